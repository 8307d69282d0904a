//! A damaged database is an error that says "damaged" and what to do, at open or at first use,
//! never an empty listing (issue 12.7, 12.9): a malformed page, a `reaper_runs` table of the wrong
//! shape, a missing table, and damage to `reaper_schema`.

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use reaper_core::{RunRecord, RunStatus, RunStore, StoreError};
use reaper_sqlite::{is_damaged, OpenError, SqliteStore};
use rusqlite::Connection;

use common::TempStore;

/// A file holding `n` detached running runs, closed (so its WAL is checkpointed into it).
async fn file_with_runs(n: usize) -> TempStore {
    let store = TempStore::new();
    for i in 0..n {
        store
            .put_run(RunRecord {
                run_id: format!("run-{i:05}"),
                thread_id: format!("thread-{i}"),
                status: RunStatus::Running,
                started_at: 1,
                finished_at: None,
                error: None,
                usage: None,
                sandbox_key: Some(format!("thread-{i}:sandbox")),
                detached_since: Some(5),
                cancel_requested: None,
                driver_epoch: None,
            })
            .await
            .unwrap();
    }
    let dir = store.dir;
    drop(store.store);
    // Opened again only to be reused by the caller's raw edits; no store holds the file now.
    TempStore {
        store: SqliteStore::open_in_memory().unwrap(),
        dir,
    }
}

fn assert_damaged_message(message: &str, path: &Path) {
    assert!(
        message.contains(&format!("{} is damaged", path.display())),
        "{message}"
    );
    assert!(
        message.contains("restore it from a backup") && message.contains("PRAGMA integrity_check"),
        "{message}"
    );
}

fn assert_damaged_error(e: &StoreError, path: &Path) {
    assert!(is_damaged(e), "{e:?}");
    let StoreError::Corrupt { reason, .. } = e else {
        unreachable!()
    };
    assert_damaged_message(reason, path);
}

fn open_refused_as_damaged(path: &Path, detail: &str) {
    let before = fs::read(path).unwrap();
    for (mode, result) in [
        ("read-write", SqliteStore::open(path)),
        ("read-only", SqliteStore::open_read_only(path)),
    ] {
        match result {
            Err(e @ OpenError::Corrupt { .. }) => {
                let message = e.to_string();
                assert_damaged_message(&message, path);
                assert!(message.contains(detail), "{mode}: {message}");
                assert!(is_damaged(&StoreError::from(e)), "{mode}");
            }
            other => panic!("{mode}: {other:?}"),
        }
    }
    assert_eq!(
        fs::read(path).unwrap(),
        before,
        "the refused file was written"
    );
}

#[tokio::test]
async fn a_damaged_page_of_the_runs_table_fails_the_listing_as_damaged_never_empty() {
    let fresh = file_with_runs(2_000).await;
    let path = fresh.path();
    let (root, page_size): (i64, i64) = {
        let conn = Connection::open(&path).unwrap();
        let root = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'reaper_runs'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let size = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        (root, size)
    };
    // 2,000 rows span many pages, so the root is an interior page every row lookup goes
    // through. Overwrite its body, past the page header, as a bad sector or a torn copy would.
    let mut file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(((root - 1) * page_size + 12) as u64))
        .unwrap();
    file.write_all(&vec![0xA5; (page_size - 12) as usize])
        .unwrap();
    drop(file);

    let store = SqliteStore::open(&path).unwrap();
    let e = store.list_reclaimable_listing(10, 0).await.unwrap_err();
    assert_damaged_error(&e, &path);
    assert_damaged_error(&store.count_by_status().await.unwrap_err(), &path);
}

#[tokio::test]
async fn a_runs_table_with_a_renamed_column_is_refused_as_damaged_at_open() {
    let fresh = file_with_runs(1).await;
    let path = fresh.path();
    Connection::open(&path)
        .unwrap()
        .execute_batch("ALTER TABLE reaper_runs RENAME COLUMN detached_since TO detached_at")
        .unwrap();
    open_refused_as_damaged(&path, "table reaper_runs lacks column detached_since");
}

#[tokio::test]
async fn a_runs_table_missing_columns_is_refused_as_damaged_naming_them() {
    let fresh = file_with_runs(1).await;
    let path = fresh.path();
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE reaper_runs; CREATE TABLE reaper_runs (run_id TEXT PRIMARY KEY, thread_id TEXT, \
             status TEXT, started_at INTEGER)",
        )
        .unwrap();
    open_refused_as_damaged(
        &path,
        "table reaper_runs lacks columns finished_at, error_message, error_code, usage, sandbox_key, \
         detached_since, cancel_requested, driver_epoch",
    );
}

#[tokio::test]
async fn a_missing_table_is_refused_as_damaged() {
    let fresh = file_with_runs(1).await;
    let path = fresh.path();
    Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE reaper_reclaim_intents")
        .unwrap();
    open_refused_as_damaged(&path, "table reaper_reclaim_intents is missing");
}

#[tokio::test]
async fn a_schema_table_without_version_rows_is_refused_as_damaged() {
    let fresh = file_with_runs(1).await;
    let path = fresh.path();
    Connection::open(&path)
        .unwrap()
        .execute_batch("DELETE FROM reaper_schema")
        .unwrap();
    open_refused_as_damaged(&path, "reaper_schema holds no version row");
}

#[tokio::test]
async fn a_schema_table_of_the_wrong_shape_is_refused_as_damaged() {
    let fresh = file_with_runs(1).await;
    let path = fresh.path();
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE reaper_schema; CREATE TABLE reaper_schema (v INTEGER); \
             INSERT INTO reaper_schema VALUES (2)",
        )
        .unwrap();
    open_refused_as_damaged(
        &path,
        "table reaper_schema lacks columns version, description",
    );
}

#[tokio::test]
async fn a_table_dropped_under_an_open_store_fails_its_next_use_as_damaged() {
    let store = TempStore::new();
    let path = store.path();
    Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE reaper_runs")
        .unwrap();
    let e = store.list_reclaimable_listing(10, 0).await.unwrap_err();
    assert_damaged_error(&e, &path);
}
