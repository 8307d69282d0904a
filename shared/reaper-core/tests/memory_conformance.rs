//! The in-memory backend runs every store conformance suite.

use std::sync::Arc;

use reaper_core::memory::MemoryStore;

reaper_testkit::store_conformance!(async { Arc::new(MemoryStore::new()) });

/// The sweep records' cap, shared with every store (`reaper_testkit::conformance::sweep_cap`).
#[tokio::test]
async fn at_most_a_thousand_sweep_records_are_kept_the_oldest_dropped_first() {
    reaper_testkit::conformance::sweep_cap::run(&MemoryStore::new()).await;
}
