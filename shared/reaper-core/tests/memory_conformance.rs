//! The in-memory backend runs every store conformance suite.

use std::sync::Arc;

use reaper_core::memory::MemoryStore;

reaper_testkit::store_conformance!(async { Arc::new(MemoryStore::new()) });
