//! One stateless sweep on a real PostgreSQL at 1k, 100k and 1M detached runs (issue 27: the cost
//! of a sweep stays flat with the backlog), as `reaper-sqlite`'s bench of the same name. Each
//! size in a fresh schema: 20 warm-up sweeps, then `REAPER_BENCH_ROUNDS` rounds (default 5) of
//! 100 sweeps; a round's figure is its median sweep, the printed figure the median of the rounds
//! with their range.
//!
//! Run against a server: `eval "$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)"`, then
//! `cargo bench -p reaper-postgres --bench scale` (`REAPER_TEST_POSTGRES_URL` names the server).

use std::sync::Arc;
use std::time::Instant;

use reaper_core::reap::{sweep, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_core::EpochMs;
use reaper_postgres::{PostgresOptions, PostgresStore};
use reaper_testkit::fakes::{ScriptedDrive, ScriptedProbe, TokioSleeper};

const NOW: EpochMs = 1_800_000_000_000;
const TTL: u64 = 3_600_000;

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// A fresh schema holding `backlog` detached runs inside the TTL, seeded by one statement and
/// vacuumed.
async fn seeded(url: &str, backlog: i64) -> (PostgresStore, String) {
    let schema = format!("bench_scale_{backlog}_{}", std::process::id());
    let store = PostgresStore::open(PostgresOptions::new(url).with_schema(schema.clone()))
        .await
        .expect("open a fresh schema");
    let (c, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    c.execute(
        &store.sql(
            "INSERT INTO @.runs (run_id, thread_id, started_at, detached_since) \
             SELECT 'run-' || lpad(i::text, 7, '0'), 'thread-' || i, $1::bigint - 1000000, \
             $1::bigint - 600000 + (i % 500000) FROM generate_series(0, $2::bigint - 1) AS i",
        ),
        &[&NOW, &backlog],
    )
    .await
    .expect("seed");
    // Vacuumed as autovacuum would after a bulk load, before the timing starts: an autovacuum
    // of a million fresh rows running during the rounds would be timed as the sweep's cost.
    c.batch_execute(&store.sql("VACUUM (ANALYZE) @.runs"))
        .await
        .expect("vacuum");
    (store, schema)
}

fn main() {
    let Ok(url) = std::env::var("REAPER_TEST_POSTGRES_URL") else {
        eprintln!(
            "REAPER_TEST_POSTGRES_URL is not set: start a server with \
             `eval \"$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)\"`"
        );
        std::process::exit(2);
    };
    let rounds: usize = std::env::var("REAPER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut table = Vec::new();
    for backlog in [1_000_i64, 100_000, 1_000_000] {
        let (m, lo, hi, seen) = rt.block_on(async {
            let (store, schema) = seeded(&url, backlog).await;
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
            for _ in 0..20 {
                sweep(&deps, &options, 60_000).await;
            }
            let mut seen = (0, false);
            let mut medians = Vec::new();
            for _ in 0..rounds {
                let mut times = Vec::with_capacity(100);
                for _ in 0..100 {
                    let t0 = Instant::now();
                    let report = sweep(&deps, &options, 60_000).await;
                    times.push(t0.elapsed().as_secs_f64() * 1e6);
                    assert_eq!(report.report.outcomes.producing, 25);
                    seen = (report.report.slo.backlog, report.report.slo.backlog_exact);
                }
                medians.push(median(&mut times));
            }
            let (c, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(connection);
            let _ = c
                .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .await;
            let lo = medians.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (median(&mut medians), lo, hi, seen)
        });
        println!(
            "  backlog={backlog}: one sweep {m:.0} us (median of {rounds} rounds of 100, range \
             {lo:.0}–{hi:.0}), backlog figure {}{}",
            seen.0,
            if seen.1 { " (exact)" } else { " (at least)" }
        );
        table.push(m);
    }
    println!(
        "\n| one PostgreSQL sweep, batch 25 | 1k | 100k | 1M | 1M / 1k |\n|---|---|---|---|---|\n\
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
