//! One stateless sweep on a real SQLite file at 1k, 100k and 1M detached runs (issue 27: the
//! cost of a sweep stays flat with the backlog). Each size: 20 warm-up sweeps, then
//! `REAPER_BENCH_ROUNDS` rounds (default 5) of 200 turns, each turn one sweep of every size; a
//! round's figures are its median sweep per size and the median of its turns' ratios to 1k, and
//! the printed figures the median of the rounds with their range.
//!
//! Run: `cargo bench -p reaper-sqlite --bench scale` (seeding 1M runs takes a few seconds).

use std::sync::Arc;
use std::time::Instant;

use reaper_core::reap::{sweep, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_core::EpochMs;
use reaper_sqlite::SqliteStore;
use reaper_testkit::bench::{print_scales, Turns};
use reaper_testkit::fakes::{ScriptedDrive, ScriptedProbe, TokioSleeper};
use rusqlite::{params, Connection};

const NOW: EpochMs = 1_800_000_000_000;
const TTL: u64 = 3_600_000;
/// Turns per round: one sweep of every size each.
const TURNS: usize = 200;

/// A file holding `backlog` detached runs, all producing inside the TTL, in one transaction.
fn seeded_file(dir: &std::path::Path, backlog: usize) -> std::path::PathBuf {
    let path = dir.join(format!("reaper-{backlog}.db"));
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
    path
}

fn main() {
    let rounds: usize = std::env::var("REAPER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sizes = [1_000, 100_000, 1_000_000];
    let stores: Vec<(SqliteStore, ReapDeps)> = sizes
        .iter()
        .map(|&backlog| {
            let store = SqliteStore::open(seeded_file(dir.path(), backlog)).unwrap();
            let deps = ReapDeps {
                runs: Arc::new(store.clone()),
                logs: Arc::new(store.clone()),
                leases: Arc::new(store.clone()),
                ledger: Arc::new(store.clone()),
                probe: Arc::new(ScriptedProbe::new()),
                drive: Arc::new(ScriptedDrive::new(Arc::new(TokioSleeper))),
                reclaim: None,
                clock: Arc::new(ManualClock::new(NOW)),
                sleeper: Arc::new(TokioSleeper),
                damage: Default::default(),
            };
            (store, deps)
        })
        .collect();
    let mut options = ReapOptions::new(TTL, "bench");
    options.now = Some(NOW);
    // The sizes take turns sweep by sweep, so a disk or a neighbour that slows down for a while
    // slows every size alike; each ratio is taken within a turn.
    let mut medians = vec![Vec::new(); sizes.len()];
    let mut ratios = vec![Vec::new(); sizes.len()];
    let mut seen = vec![(0, false); sizes.len()];
    rt.block_on(async {
        for (_, deps) in &stores {
            for _ in 0..20 {
                sweep(deps, &options, 60_000).await;
            }
        }
        for _ in 0..rounds {
            let mut turns = Turns::new(sizes.len());
            for turn in 0..TURNS {
                for i in turns.order(turn) {
                    let t0 = Instant::now();
                    let report = sweep(&stores[i].1, &options, 60_000).await;
                    turns.push(i, t0.elapsed().as_secs_f64() * 1e6);
                    assert_eq!(report.report.outcomes.producing, 25);
                    seen[i] = (report.report.slo.backlog, report.report.slo.backlog_exact);
                }
            }
            for i in 0..sizes.len() {
                medians[i].push(turns.median(i));
                ratios[i].push(turns.paired_ratio(i));
            }
        }
    });
    print_scales(
        "SQLite",
        &sizes.map(|s| s as u64),
        &medians,
        &ratios,
        &seen,
        TURNS,
    );
    drop(stores);
}
