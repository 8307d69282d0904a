//! The whole store conformance suite against Amazon DynamoDB Local, each case on a fresh table.

mod common;

reaper_testkit::store_conformance!(async { crate::common::fresh_store("conf").await });

/// The sweep records' cap, on a table of its own (the cap is store-wide).
#[tokio::test]
async fn at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first() {
    let store = crate::common::fresh_store("sweep-cap").await;
    reaper_testkit::conformance::sweep_cap::run(&*store).await;
}
