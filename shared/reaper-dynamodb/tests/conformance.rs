//! The whole store conformance suite against Amazon DynamoDB Local, each case on a fresh table.

mod common;

reaper_testkit::store_conformance!(async { crate::common::fresh_store("conf").await });
