//! The SQLite backend runs every store conformance suite twice: each case on a fresh file, and
//! every case on one shared file through its own connection (ids are namespaced per case), which
//! also exercises several connections writing one file at once.

mod common;

mod fresh_file {
    use super::common::TempStore;

    reaper_testkit::store_conformance!(async { TempStore::new() });
}

mod shared_file {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use reaper_sqlite::SqliteStore;

    /// One file for the whole test binary; each case opens its own connection to it.
    fn shared_path() -> &'static PathBuf {
        static PATH: OnceLock<PathBuf> = OnceLock::new();
        PATH.get_or_init(|| {
            // Kept for the life of the process (statics never drop); it sits in cargo's scratch
            // directory.
            let dir = super::common::temp_dir().keep();
            dir.join("shared.db")
        })
    }

    fn open_shared() -> Box<SqliteStore> {
        Box::new(SqliteStore::open(shared_path()).expect("open the shared database"))
    }

    reaper_testkit::store_conformance!(async { open_shared() });
}

/// The sweep records' cap, on a file of its own (the cap is store-wide, so not on the shared
/// file, where it would drop the other cases' records).
#[tokio::test]
async fn at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first() {
    let store = common::TempStore::new();
    reaper_testkit::conformance::sweep_cap::run(&*store).await;
}
