//! Issue 13 on a real SQLite file: a stateless sweep (`sweep()`, the cursor kept with the sweep
//! lease) sends the same number of run-store statements whatever the backlog, and the backlog
//! figure is the true count.

mod common;

use std::sync::Arc;

use common::temp_dir;
use reaper_core::reap::{sweep, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_core::EpochMs;
use reaper_sqlite::SqliteStore;
use reaper_testkit::fakes::{CountingRuns, ScriptedDrive, ScriptedProbe, TokioSleeper};
use rusqlite::{params, Connection};

const NOW: EpochMs = 1_800_000_000_000;
const TTL: u64 = 3_600_000;

/// A file holding `backlog` detached runs, all producing inside the TTL, written in one
/// transaction (seeding through the port would take minutes at this size).
fn seeded_file(backlog: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    drop(SqliteStore::open(&path).expect("a new file"));
    let mut conn = Connection::open(&path).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO reaper_runs (run_id, thread_id, started_at, detached_since) \
                 VALUES (?1, ?1, ?2, ?3)",
            )
            .unwrap();
        for i in 0..backlog {
            let detached = NOW - 600_000 + (i % 500_000) as i64;
            insert
                .execute(params![format!("run-{i:07}"), NOW - 1_000_000, detached])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    (dir, path)
}

/// The most run-store statements one of `sweeps` stateless sweeps sent, and the last backlog
/// figure.
async fn per_sweep(backlog: usize, sweeps: usize) -> (usize, usize, bool) {
    let (_dir, path) = seeded_file(backlog);
    let store = SqliteStore::open(&path).unwrap();
    // Counting the run-store calls (one statement each) a sweep makes.
    let runs = Arc::new(CountingRuns::new(store.clone()));
    let probe = ScriptedProbe::new();
    let deps = ReapDeps {
        runs: runs.clone(),
        logs: Arc::new(store.clone()),
        leases: Arc::new(store.clone()),
        ledger: Arc::new(store.clone()),
        probe: Arc::new(probe),
        drive: Arc::new(ScriptedDrive::new(Arc::new(TokioSleeper))),
        reclaim: None,
        clock: Arc::new(ManualClock::new(NOW)),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(TTL, "requests-test");
    options.now = Some(NOW);
    let mut most = 0;
    let mut figure = (0, false);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..sweeps {
        let report = sweep(&deps, &options, 60_000).await;
        assert_eq!(report.report.outcomes.producing, 25, "{report:?}");
        seen.extend(report.report.runs.iter().map(|e| e.run_id.clone()));
        most = most.max(runs.take());
        figure = (report.report.slo.backlog, report.report.slo.backlog_exact);
    }
    assert_eq!(
        seen.len(),
        sweeps * 25,
        "the stateless sweeps went round robin"
    );
    (most, figure.0, figure.1)
}

#[tokio::test]
async fn run_store_statements_per_stateless_sweep_do_not_grow_with_the_backlog() {
    let small = per_sweep(1_000, 3).await;
    let large = per_sweep(100_000, 3).await;
    // Producing runs only: the listing's pages, the backlog count, and the history's one
    // bounded prune (producing runs write no history); nothing per run.
    assert_eq!(small.0, large.0, "statements per sweep at 1k and 100k runs");
    assert!(small.0 <= 6, "{} statements per sweep", small.0);
    assert_eq!((small.1, small.2), (1_000, true), "the backlog at 1k");
    assert_eq!(
        (large.1, large.2),
        (reaper_core::reap::DEFAULT_BACKLOG_COUNT_MAX as usize, false),
        "the backlog at 100k: at least the count's bound"
    );
}
