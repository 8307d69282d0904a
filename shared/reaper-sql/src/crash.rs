//! Crash points for the crash-test harness, compiled only with the `crash-points` feature.
//!
//! Every committed write of the process (a statement or transaction that changed the database,
//! counted right after it commits) is a crash point. With `REAPER_CRASH_AT=N` the N-th one
//! aborts the process: no destructors, no flush, as `kill -9` would leave it, except that the
//! commit is known to be durable (SQLite's WAL, PostgreSQL's commit). With `REAPER_CRASH_COUNT_FILE=<path>` the count so
//! far is written to that file after each commit, so a harness learns how many crash points a
//! clean run has and can then crash at each in turn.
//!
//! One counter for every SQL store (reaper-sqlite and reaper-postgres call it after each
//! commit; their `crash-points` features enable this one), so one harness drives both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static COMMITS: AtomicU64 = AtomicU64::new(0);

struct Settings {
    crash_at: Option<u64>,
    count_file: Option<std::path::PathBuf>,
}

fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| Settings {
        crash_at: std::env::var("REAPER_CRASH_AT").ok().map(|raw| {
            raw.trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| {
                    panic!("REAPER_CRASH_AT must be a commit number from 1 up, got {raw:?}")
                })
        }),
        count_file: std::env::var_os("REAPER_CRASH_COUNT_FILE").map(Into::into),
    })
}

/// A write just committed: count it, report the count, and abort if this is the chosen one.
pub fn commit_point() {
    let n = COMMITS.fetch_add(1, Ordering::SeqCst) + 1;
    let settings = settings();
    if let Some(path) = &settings.count_file {
        if let Err(e) = std::fs::write(path, n.to_string()) {
            panic!("could not write the crash count to {}: {e}", path.display());
        }
    }
    if settings.crash_at == Some(n) {
        std::process::abort();
    }
}
