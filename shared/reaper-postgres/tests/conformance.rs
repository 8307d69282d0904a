//! Every store conformance suite of reaper-testkit, unchanged, each case on a fresh schema of
//! the PostgreSQL in `REAPER_TEST_POSTGRES_URL`.

#[cfg(reaper_test_postgres)]
mod common;

#[cfg(reaper_test_postgres)]
reaper_testkit::store_conformance!(async { crate::common::fresh_store("conf").await });

#[cfg(not(reaper_test_postgres))]
#[test]
fn conformance_needs_a_postgres() {
    eprintln!(
        "skipped: REAPER_TEST_POSTGRES_URL was not set when this test was built; start a server \
         with `eval \"$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)\"` and run again"
    );
}

/// The sweep records' cap, on a schema of its own (the cap is store-wide).
#[cfg(reaper_test_postgres)]
#[tokio::test]
async fn at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first() {
    let store = crate::common::fresh_store("sweep-cap").await;
    reaper_testkit::conformance::sweep_cap::run(&*store).await;
}
