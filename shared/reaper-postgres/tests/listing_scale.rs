//! The listing at scale on a real server: a page seeks the partial index to its cursor (the
//! query plan at 100k detached runs shows an index range scan and no sort), and a stateless
//! sweep sends the same number of store requests at 1k and at 100k detached runs.

#[cfg(reaper_test_postgres)]
mod common;

#[cfg(not(reaper_test_postgres))]
#[test]
fn listing_scale_needs_a_postgres() {
    eprintln!("skipped: REAPER_TEST_POSTGRES_URL was not set when this test was built");
}

#[cfg(reaper_test_postgres)]
mod on_a_server {
    use std::sync::Arc;

    use super::common::{self, raw_client};
    use reaper_core::reap::{sweep, ReapDeps, ReapOptions};
    use reaper_core::time::ManualClock;
    use reaper_core::EpochMs;
    use reaper_postgres::{PostgresStore, LIST_PAGE_AFTER};
    use reaper_testkit::fakes::{ScriptedDrive, ScriptedProbe, TokioSleeper};

    const NOW: EpochMs = 1_800_000_000_000;
    const TTL: u64 = 3_600_000;

    /// A fresh schema holding `backlog` detached runs, all inside the TTL, inserted by one
    /// `generate_series` statement (seeding through the port would take minutes).
    async fn seeded(backlog: i64) -> PostgresStore {
        let store = *common::fresh_store(&format!("scale{backlog}")).await;
        let c = raw_client().await;
        c.execute(
            &store.sql(
                "INSERT INTO @.runs (run_id, thread_id, started_at, detached_since) \
                 SELECT 'run-' || lpad(i::text, 7, '0'), 'thread-' || i, $1::bigint - 1000000, \
                 $1::bigint - 600000 + (i % 500000) FROM generate_series(0, $2::bigint - 1) AS i",
            ),
            &[&NOW, &backlog],
        )
        .await
        .unwrap();
        c.batch_execute(&store.sql("ANALYZE @.runs")).await.unwrap();
        store
    }

    async fn plan(store: &PostgresStore, generic: bool) -> String {
        let c = raw_client().await;
        let mode = if generic {
            "force_generic_plan"
        } else {
            "force_custom_plan"
        };
        c.batch_execute(&format!(
            "SET plan_cache_mode = {mode}; PREPARE page AS {}",
            store.sql(LIST_PAGE_AFTER)
        ))
        .await
        .unwrap();
        let cutoff = NOW - TTL as i64 + 3_600_000;
        let rows = c
            .simple_query(&format!(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) \
                 EXECUTE page({cutoff}, {}, 'run-0050000', 25)",
                NOW - 600_000 + 50_000
            ))
            .await
            .unwrap();
        rows.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_page_at_100k_detached_runs_is_an_index_range_scan_from_its_cursor_with_no_sort() {
        let store = seeded(100_000).await;
        for generic in [false, true] {
            let plan = plan(&store, generic).await;
            eprintln!(
                "plan ({}):\n{plan}",
                if generic { "generic" } else { "custom" }
            );
            assert!(
                plan.contains("Index Scan using runs_reclaimable"),
                "no scan of the listing's index: {plan}"
            );
            assert!(
                plan.lines().any(|l| l.contains("Index Cond:")
                    && l.contains("ROW(detached_since, run_id) > ROW(")),
                "the scan does not start at the cursor: {plan}"
            );
            assert!(!plan.contains("Sort"), "the page sorts: {plan}");
            assert!(
                plan.lines()
                    .any(|l| l.contains("Index Scan") && l.contains("rows=25 ")),
                "the scan read more than the page: {plan}"
            );
        }
    }

    /// The most store requests one of `sweeps` stateless sweeps sent, and the last backlog
    /// figure.
    async fn per_sweep(backlog: i64, sweeps: usize) -> (u64, usize, bool) {
        let store = seeded(backlog).await;
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
        let mut options = ReapOptions::new(TTL, "requests-test");
        options.now = Some(NOW);
        let mut most = 0;
        let mut figure = (0, false);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..sweeps {
            let before = store.requests();
            let report = sweep(&deps, &options, 60_000).await;
            most = most.max(store.requests() - before);
            assert_eq!(report.report.outcomes.producing, 25, "{report:?}");
            seen.extend(report.report.runs.iter().map(|e| e.run_id.clone()));
            figure = (report.report.slo.backlog, report.report.slo.backlog_exact);
        }
        assert_eq!(
            seen.len(),
            sweeps * 25,
            "the stateless sweeps went round robin"
        );
        (most, figure.0, figure.1)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn store_requests_per_sweep_are_the_same_at_1k_and_100k_detached_runs() {
        let small = per_sweep(1_000, 3).await;
        let large = per_sweep(100_000, 3).await;
        eprintln!(
            "store requests per sweep: {} at 1k, {} at 100k",
            small.0, large.0
        );
        assert_eq!(
            small.0, large.0,
            "store requests per sweep at 1k and 100k runs"
        );
        assert_eq!((small.1, small.2), (1_000, true), "the backlog at 1k");
        assert_eq!(
            (large.1, large.2),
            (reaper_core::reap::DEFAULT_BACKLOG_COUNT_MAX as usize, false),
            "the backlog at 100k: at least the count's bound"
        );
    }
}
