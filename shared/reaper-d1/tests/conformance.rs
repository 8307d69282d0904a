//! The whole store conformance suite against the D1 store's SQL, run natively on SQLite with
//! D1's batch semantics. The same cases run inside workerd against real D1 through the Worker's
//! test route (handlers/reaper-cloudflare/test/d1-conformance.test.mjs).

mod common;

reaper_testkit::store_conformance!(async { std::sync::Arc::new(crate::common::store().await.0) });

/// The sweep records' cap, on a database of its own (the cap is store-wide).
#[tokio::test]
async fn at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first() {
    let (store, _client) = crate::common::store().await;
    reaper_testkit::conformance::sweep_cap::run(&store).await;
}
