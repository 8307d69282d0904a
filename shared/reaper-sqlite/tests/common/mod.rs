//! Fixtures shared by the integration tests: a store on a fresh file in its own temp dir.

#![allow(dead_code)]

use std::ops::Deref;
use std::path::PathBuf;

use reaper_sqlite::SqliteStore;
use tempfile::TempDir;

/// A store on `reaper.db` in a temp dir that lives as long as the store.
#[derive(Debug)]
pub struct TempStore {
    pub store: SqliteStore,
    pub dir: TempDir,
}

impl TempStore {
    pub fn new() -> Self {
        let dir = temp_dir();
        let store = SqliteStore::open(dir.path().join("reaper.db")).expect("open a fresh database");
        TempStore { store, dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("reaper.db")
    }
}

impl Deref for TempStore {
    type Target = SqliteStore;
    fn deref(&self) -> &SqliteStore {
        &self.store
    }
}

/// A temp dir under cargo's per-target scratch directory.
pub fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("reaper-sqlite-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("create a temp dir")
}
