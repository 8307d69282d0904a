//! The whole store conformance suite against the D1 store's SQL, run natively on SQLite with
//! D1's batch semantics. The same cases run inside workerd against real D1 through the Worker's
//! test route (handlers/reaper-cloudflare/test/d1-conformance.test.mjs).

mod common;

reaper_testkit::store_conformance!(async { std::sync::Arc::new(crate::common::store().await.0) });
