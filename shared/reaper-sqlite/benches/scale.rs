//! One stateless sweep on a real SQLite file at 1k, 100k and 1M detached runs (issue 27: the
//! cost of a sweep stays flat with the backlog). Each size: 20 warm-up sweeps, then
//! `REAPER_BENCH_ROUNDS` rounds (default 5) of 200 sweeps; a round's figure is its median sweep,
//! and the printed figure the median of the rounds with their range.
//!
//! Run: `cargo bench -p reaper-sqlite --bench scale` (seeding 1M runs takes a few seconds).

use std::sync::Arc;
use std::time::Instant;

use reaper_core::reap::{sweep, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_core::EpochMs;
use reaper_sqlite::SqliteStore;
use reaper_testkit::fakes::{ScriptedDrive, ScriptedProbe, TokioSleeper};
use rusqlite::{params, Connection};

const NOW: EpochMs = 1_800_000_000_000;
const TTL: u64 = 3_600_000;

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

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
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
    let mut table = Vec::new();
    for backlog in [1_000, 100_000, 1_000_000] {
        let path = seeded_file(dir.path(), backlog);
        let store = SqliteStore::open(&path).unwrap();
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
        let mut options = ReapOptions::new(TTL, "bench");
        options.now = Some(NOW);
        let (medians, backlog_seen) = rt.block_on(async {
            let mut seen = (0, false);
            for _ in 0..20 {
                sweep(&deps, &options, 60_000).await;
            }
            let mut medians = Vec::new();
            for _ in 0..rounds {
                let mut times = Vec::with_capacity(200);
                for _ in 0..200 {
                    let t0 = Instant::now();
                    let report = sweep(&deps, &options, 60_000).await;
                    times.push(t0.elapsed().as_secs_f64() * 1e6);
                    assert_eq!(report.report.outcomes.producing, 25);
                    seen = (report.report.slo.backlog, report.report.slo.backlog_exact);
                }
                medians.push(median(&mut times));
            }
            (medians, seen)
        });
        let lo = medians.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut m = medians.clone();
        let m = median(&mut m);
        println!(
            "  backlog={backlog}: one sweep {m:.0} us (median of {rounds} rounds of 200, range \
             {lo:.0}–{hi:.0}), backlog figure {}{}",
            backlog_seen.0,
            if backlog_seen.1 {
                " (exact)"
            } else {
                " (at least)"
            }
        );
        table.push(m);
        drop(deps);
        drop(store);
        let _ = std::fs::remove_file(&path);
    }
    println!(
        "\n| one SQLite sweep, batch 25 | 1k | 100k | 1M | 1M / 1k |\n|---|---|---|---|---|\n\
         | median µs | {:.0} | {:.0} | {:.0} | {:.2} |",
        table[0],
        table[1],
        table[2],
        table[2] / table[0]
    );
    println!(
        "load average at the end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}
