//! A damaged D1 database is an error that says "damaged" and what to do, at open or at first
//! use, never an empty listing or a bare "no such column" (issue 12.7): a `reaper_runs` table
//! of the wrong shape, a missing table, damage to `reaper_schema`, and a malformed page.

mod common;

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;

use common::SqliteClient;
use reaper_core::{RunRecord, RunStatus, RunStore, StoreError};
use reaper_d1::{is_damaged, D1Store, OpenError, SqlClient, Statement, DAMAGED_KEY};
use rusqlite::Connection;

/// Every schema object and row count, to show a refused database was not written to.
async fn contents(client: &SqliteClient) -> Vec<String> {
    let out = client
        .batch(vec![Statement::new(
            "SELECT type || ' ' || name || ': ' || COALESCE(sql, '') AS o FROM sqlite_master \
             ORDER BY type, name",
            vec![],
        )])
        .await
        .unwrap();
    out[0].iter().map(|r| r["o"].to_string()).collect()
}

fn detached(i: usize) -> RunRecord {
    let mut record = RunRecord::new(format!("run-{i:05}"), format!("thread-{i}"), 1);
    record.status = RunStatus::Running;
    record.detached_since = Some(5);
    record.sandbox_key = Some(format!("thread-{i}:sandbox"));
    record
}

/// A migrated in-memory database holding one detached run, then `edit` applied by hand.
async fn edited(edit: &str) -> Arc<SqliteClient> {
    let (store, client) = common::store().await;
    store.put_run(detached(1)).await.unwrap();
    client.execute(edit);
    client
}

async fn open_refused_as_damaged(client: Arc<SqliteClient>, detail: &str) {
    let before = contents(&client).await;
    match D1Store::open(client.clone()).await {
        Err(e @ OpenError::Damaged { .. }) => {
            assert!(e.is_damaged());
            let message = e.to_string();
            assert!(
                message.starts_with("the D1 database is damaged: "),
                "{message}"
            );
            assert!(message.contains(detail), "{message}");
            assert!(
                message.contains("wrangler d1 time-travel restore")
                    && message.contains("PRAGMA quick_check"),
                "{message}"
            );
            let e = StoreError::from(e);
            assert!(is_damaged(&e), "{e:?}");
        }
        other => panic!("opened a damaged database: {other:?}"),
    }
    assert_eq!(
        contents(&client).await,
        before,
        "the refused database was written"
    );
}

#[tokio::test]
async fn a_runs_table_with_a_renamed_column_is_refused_as_damaged_at_open() {
    let client =
        edited("ALTER TABLE reaper_runs RENAME COLUMN detached_since TO detached_at").await;
    open_refused_as_damaged(client, "table reaper_runs lacks column detached_since").await;
}

#[tokio::test]
async fn a_runs_table_missing_columns_is_refused_as_damaged_naming_them() {
    let client = edited(
        "DROP TABLE reaper_runs; CREATE TABLE reaper_runs (run_id TEXT PRIMARY KEY, thread_id TEXT, \
         status TEXT, started_at INTEGER)",
    )
    .await;
    open_refused_as_damaged(
        client,
        "table reaper_runs lacks columns finished_at, error_message, error_code, usage, sandbox_key, \
         detached_since, cancel_requested, driver_epoch (it has run_id, thread_id, status, \
         started_at)",
    )
    .await;
}

#[tokio::test]
async fn a_missing_table_is_refused_as_damaged_naming_it() {
    let client = edited("DROP TABLE reaper_log_entries").await;
    open_refused_as_damaged(
        client,
        &format!(
            "table reaper_log_entries is missing, but reaper_schema says version {}",
            reaper_d1::SCHEMA_VERSION
        ),
    )
    .await;
}

#[tokio::test]
async fn a_schema_table_without_a_version_row_is_refused_as_damaged() {
    let client = edited("DELETE FROM reaper_schema").await;
    open_refused_as_damaged(client, "reaper_schema holds no version row").await;
}

#[tokio::test]
async fn a_schema_table_of_the_wrong_shape_is_refused_as_damaged() {
    let client = edited("ALTER TABLE reaper_schema RENAME COLUMN version TO v").await;
    open_refused_as_damaged(client, "table reaper_schema lacks column version").await;
}

#[tokio::test]
async fn a_version_two_database_without_lease_notes_is_not_damaged_and_migrates() {
    use reaper_core::{LeaseGrant, LeaseStore};

    let client = old_version(2);
    let store = D1Store::open(client.clone()).await.unwrap();
    assert_eq!(
        reaper_d1::schema::inspect(client.as_ref()).await.unwrap(),
        reaper_d1::Found::Reaper(reaper_d1::SCHEMA_VERSION)
    );
    assert_eq!(store.get("run-00001").await.unwrap(), Some(detached(1)));
    let LeaseGrant::Acquired(lease) = store.acquire("reaper:sweep", "me", 1, 10).await.unwrap()
    else {
        panic!("the sweep lease is free");
    };
    assert!(store.set_note(&lease, "cursor").await.unwrap());
    assert_eq!(
        store.note("reaper:sweep").await.unwrap().as_deref(),
        Some("cursor")
    );
}

/// A database as the released migrations up to `version` built it (before version 7 the
/// first tables had no `reaper_` prefix), holding the run [`detached`]`(1)`.
fn old_version(version: u32) -> Arc<SqliteClient> {
    let client = Arc::new(SqliteClient::in_memory());
    for m in reaper_sql::MIGRATIONS
        .iter()
        .filter(|m| m.version <= version)
    {
        for sql in m.statements {
            client.execute(sql);
        }
        client.execute(&format!(
            "INSERT INTO reaper_schema (version, description) VALUES ({}, '{}')",
            m.version, m.description
        ));
    }
    client.execute(
        "INSERT INTO runs (run_id, thread_id, status, started_at, detached_since, sandbox_key) \
         VALUES ('run-00001', 'thread-1', 'running', 1, 5, 'thread-1:sandbox')",
    );
    client
}

async fn index_columns(client: &SqliteClient, index: &str) -> Vec<String> {
    let out = client
        .batch(vec![Statement::new(
            "SELECT name FROM pragma_index_info(?1) ORDER BY seqno",
            vec![index.into()],
        )])
        .await
        .unwrap();
    out[0]
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_version_three_database_gets_the_listing_keyset_index_and_keeps_its_runs() {
    let client = old_version(3);
    assert_eq!(
        index_columns(&client, "runs_reclaimable").await,
        ["detached_since"]
    );
    let store = D1Store::open(client.clone()).await.unwrap();
    assert_eq!(
        reaper_d1::schema::inspect(client.as_ref()).await.unwrap(),
        reaper_d1::Found::Reaper(reaper_d1::SCHEMA_VERSION)
    );
    assert_eq!(
        index_columns(&client, "reaper_runs_reclaimable").await,
        ["detached_since", "run_id"]
    );
    assert_eq!(store.get("run-00001").await.unwrap(), Some(detached(1)));
}

#[tokio::test]
async fn a_version_five_database_gains_the_run_history_and_keeps_its_runs() {
    use reaper_core::RunStore;
    let client = old_version(5);
    let store = D1Store::open(client.clone()).await.unwrap();
    assert_eq!(
        reaper_d1::schema::inspect(client.as_ref()).await.unwrap(),
        reaper_d1::Found::Reaper(reaper_d1::SCHEMA_VERSION)
    );
    assert_eq!(store.get("run-00001").await.unwrap(), Some(detached(1)));
    assert_eq!(store.run_history("run-00001", 5).await.unwrap(), []);
}

#[tokio::test]
async fn a_version_one_database_without_the_ledger_is_not_damaged_and_migrates() {
    let client = old_version(1);
    let store = D1Store::open(client.clone()).await.unwrap();
    assert_eq!(
        reaper_d1::schema::inspect(client.as_ref()).await.unwrap(),
        reaper_d1::Found::Reaper(reaper_d1::SCHEMA_VERSION)
    );
    assert_eq!(store.get("run-00001").await.unwrap(), Some(detached(1)));
}

#[tokio::test]
async fn a_column_renamed_under_an_open_store_fails_its_first_use_as_damaged() {
    let (store, client) = common::store().await;
    store.put_run(detached(1)).await.unwrap();
    client.execute("ALTER TABLE reaper_runs RENAME COLUMN driver_epoch TO epoch");
    for e in [
        store.list_reclaimable_listing(10, 0).await.unwrap_err(),
        store.bump_epoch("run-00001").await.unwrap_err(),
    ] {
        assert!(is_damaged(&e), "{e:?}");
        assert!(!e.is_retryable());
        let StoreError::Corrupt { key, reason } = e else {
            unreachable!()
        };
        assert_eq!(key, DAMAGED_KEY);
        assert!(
            reason.starts_with("the D1 database is damaged: ") && reason.contains("driver_epoch"),
            "{reason}"
        );
    }
}

#[tokio::test]
async fn a_damaged_page_of_the_runs_table_fails_the_listing_as_damaged_never_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d1.db");
    {
        let client = Arc::new(SqliteClient::new(Connection::open(&path).unwrap()));
        let store = D1Store::open(client).await.unwrap();
        for i in 0..2_000 {
            store.put_run(detached(i)).await.unwrap();
        }
    }
    let (root, page_size): (i64, i64) = {
        let conn = Connection::open(&path).unwrap();
        let root = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'reaper_runs'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (
            root,
            conn.query_row("PRAGMA page_size", [], |r| r.get(0))
                .unwrap(),
        )
    };
    // 2,000 rows span many pages, so the root is an interior page every lookup goes through.
    // Overwrite its body, past the page header, as a bad sector or a torn copy would.
    let mut file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(((root - 1) * page_size + 12) as u64))
        .unwrap();
    file.write_all(&vec![0xA5; (page_size - 12) as usize])
        .unwrap();
    drop(file);

    let client = Arc::new(SqliteClient::new(Connection::open(&path).unwrap()));
    // The schema and version pages are intact: the shape check passes, the first read fails.
    let store = D1Store::open(client).await.unwrap();
    let e = store.list_reclaimable_listing(10, 0).await.unwrap_err();
    assert!(is_damaged(&e), "{e:?}");
    let StoreError::Corrupt { reason, .. } = e else {
        unreachable!()
    };
    assert!(
        reason.starts_with("the D1 database is damaged: database disk image is malformed"),
        "{reason}"
    );
}

#[test]
fn d1_and_sqlite_recognise_damage_by_the_same_key() {
    assert_eq!(DAMAGED_KEY, reaper_sqlite::DAMAGED_KEY);
}

#[tokio::test]
async fn a_version_six_database_is_renamed_to_the_prefixed_tables_in_one_batch_keeping_its_rows() {
    let client = old_version(6);
    client.execute(
        "INSERT INTO leases (key, owner, token, expires_at) VALUES ('k', 'o', 't', 9); \
         INSERT INTO logs (run_id, next_seq) VALUES ('run-00001', 1); \
         INSERT INTO log_entries (run_id, seq, chunk) VALUES ('run-00001', 0, '{}'); \
         INSERT INTO sandbox_instances (key, provider, provider_sandbox_id, thread_id, \
         updated_at) VALUES ('thread-1:sandbox', 'local', 'p', 'thread-1', 3); \
         INSERT INTO transcripts (run_id, thread_id, body, saved_at) \
         VALUES ('run-00001', 'thread-1', '[]', 4);",
    );
    let store = D1Store::open(client.clone()).await.unwrap();
    assert_eq!(store.get("run-00001").await.unwrap(), Some(detached(1)));
    for (table, n) in [
        ("reaper_runs", 1),
        ("reaper_leases", 1),
        ("reaper_logs", 1),
        ("reaper_log_entries", 1),
        ("reaper_sandbox_instances", 1),
        ("reaper_transcripts", 1),
    ] {
        let out = client
            .batch(vec![Statement::new(
                format!("SELECT COUNT(*) AS n FROM {table}"),
                vec![],
            )])
            .await
            .unwrap();
        assert_eq!(out[0][0]["n"], serde_json::json!(n), "{table}");
    }
    // The same tables and indexes a new database has (a rename quotes the new name).
    let (_, fresh) = common::store().await;
    let strip =
        |v: Vec<String>| -> Vec<String> { v.into_iter().map(|o| o.replace("\\\"", "")).collect() };
    assert_eq!(
        strip(contents(&client).await),
        strip(contents(&fresh).await)
    );
}
