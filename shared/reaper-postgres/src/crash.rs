//! Crash points for the crash-test harness (feature `crash-points`): every committed write of
//! the process counts. With `REAPER_CRASH_AT=N` the N-th one aborts the process right after the
//! commit returned, as `kill -9` would leave it; with `REAPER_CRASH_COUNT_FILE=<path>` the count
//! so far is written there after each one. Same variables as reaper-sqlite's, so one harness
//! drives both stores.

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

pub(crate) fn commit_point() {
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
