//! One stateless sweep on a real PostgreSQL at 1k, 100k and 1M detached runs (issue 27: the cost
//! of a sweep stays flat with the backlog), as `reaper-sqlite`'s bench of the same name. Each
//! size in a fresh schema of its own, all three seeded first: 20 warm-up sweeps each, then
//! `REAPER_BENCH_ROUNDS` rounds (default 5) of 100 turns, each turn one sweep of every size; a
//! round's figures are its median sweep per size and the median of its turns' ratios to 1k, the
//! printed figures the median of the rounds with their range.
//!
//! Run against a server: `eval "$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)"`, then
//! `cargo bench -p reaper-postgres --bench scale` (`REAPER_TEST_POSTGRES_URL` names the server).

use std::sync::Arc;
use std::time::Instant;

use reaper_core::reap::{sweep, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_core::EpochMs;
use reaper_postgres::{PostgresOptions, PostgresStore};
use reaper_testkit::bench::{print_scales, Turns};
use reaper_testkit::fakes::{ScriptedDrive, ScriptedProbe, TokioSleeper};

const NOW: EpochMs = 1_800_000_000_000;
const TTL: u64 = 3_600_000;
/// Turns per round: one sweep of every size each.
const TURNS: usize = 100;

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
    let sizes = [1_000_i64, 100_000, 1_000_000];
    let mut options = ReapOptions::new(TTL, "bench");
    options.now = Some(NOW);
    let (medians, ratios, seen) = rt.block_on(async {
        let mut stores = Vec::new();
        for backlog in sizes {
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
            for _ in 0..20 {
                sweep(&deps, &options, 60_000).await;
            }
            stores.push((deps, schema));
        }
        // The sizes take turns sweep by sweep: the server's and the neighbours' slow moments
        // land on every size alike, and each ratio is taken within a turn.
        let mut medians = vec![Vec::new(); sizes.len()];
        let mut ratios = vec![Vec::new(); sizes.len()];
        let mut seen = vec![(0, false); sizes.len()];
        for _ in 0..rounds {
            let mut turns = Turns::new(sizes.len());
            for turn in 0..TURNS {
                for i in turns.order(turn) {
                    let t0 = Instant::now();
                    let report = sweep(&stores[i].0, &options, 60_000).await;
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
        let (c, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        for (_, schema) in &stores {
            let _ = c
                .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .await;
        }
        (medians, ratios, seen)
    });
    print_scales(
        "PostgreSQL",
        &sizes.map(|s| s as u64),
        &medians,
        &ratios,
        &seen,
        TURNS,
    );
}
