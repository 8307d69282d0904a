//! The D1 schema is `reaper-sqlite`'s, and opening a database refuses what is not ours.

mod common;

use std::sync::Arc;

use common::SqliteClient;
use reaper_core::{RunStore, StoreError};
use reaper_d1::{D1Store, OpenError, SqlClient, SCHEMA_VERSION};
use rusqlite::Connection;

/// Every schema object and version row, as SQLite records them.
fn layout(conn: &Connection) -> Vec<String> {
    let mut stmt = conn
        .prepare(
            "SELECT type || ' ' || name || ' on ' || tbl_name || ': ' || COALESCE(sql, '') \
             FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
        )
        .unwrap();
    let mut out: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut versions = conn
        .prepare("SELECT version || ' ' || description FROM reaper_schema ORDER BY version")
        .unwrap();
    out.extend(
        versions
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap),
    );
    out
}

#[tokio::test]
async fn the_d1_schema_is_exactly_the_one_reaper_sqlite_writes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reaper.db");
    drop(reaper_sqlite::SqliteStore::open(&file).unwrap());
    let sqlite = layout(&Connection::open(&file).unwrap());

    let d1_file = dir.path().join("d1.db");
    let client = Arc::new(SqliteClient::new(Connection::open(&d1_file).unwrap()));
    D1Store::open(client).await.unwrap();
    let d1 = layout(&Connection::open(&d1_file).unwrap());

    assert!(sqlite.len() > 10, "{sqlite:#?}");
    assert_eq!(d1, sqlite);
    assert_eq!(SCHEMA_VERSION, reaper_sqlite::SCHEMA_VERSION);
}

#[tokio::test]
async fn a_database_written_by_reaper_sqlite_opens_as_current_and_its_runs_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reaper.db");
    let sqlite = reaper_sqlite::SqliteStore::open(&file).unwrap();
    let mut record = reaper_core::RunRecord::new("run-1", "thread-1", 1_000);
    record.detached_since = Some(2_000);
    record.usage = Some(serde_json::json!({"tokens": 12}));
    sqlite.put_run(record.clone()).await.unwrap();
    drop(sqlite);

    let client = Arc::new(SqliteClient::new(Connection::open(&file).unwrap()));
    let store = D1Store::open(client).await.unwrap();
    assert_eq!(store.get("run-1").await.unwrap(), Some(record));
}

#[tokio::test]
async fn the_reaper_tables_go_beside_an_application_s_own_in_a_d1_database() {
    let client = Arc::new(SqliteClient::in_memory());
    client.execute(
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); \
         INSERT INTO users (name) VALUES ('ada'); CREATE TABLE _cf_KV (k, v);",
    );
    D1Store::open(client.clone()).await.unwrap();
    assert_eq!(
        reaper_d1::schema::inspect(client.as_ref()).await.unwrap(),
        reaper_d1::Found::Reaper(SCHEMA_VERSION)
    );
    let rows = client
        .batch(vec![reaper_d1::Statement::new(
            "SELECT name FROM users",
            vec![],
        )])
        .await
        .unwrap();
    assert_eq!(rows[0].len(), 1, "the application's row is kept");
}

#[tokio::test]
async fn a_d1_table_named_like_the_reaper_s_without_its_schema_is_refused_untouched() {
    let client = Arc::new(SqliteClient::in_memory());
    client.execute(
        "CREATE TABLE users (id INTEGER PRIMARY KEY); CREATE TABLE reaper_runs (id INTEGER); \
         CREATE TABLE _cf_KV (k, v);",
    );
    match D1Store::open(client.clone()).await {
        Err(e @ OpenError::Foreign { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("(reaper_runs)") && !message.contains("users"),
                "{message}"
            );
        }
        other => panic!("opened a foreign database: {other:?}"),
    }
    let tables = reaper_d1::schema::inspect(client.as_ref()).await.unwrap();
    assert_eq!(
        tables,
        reaper_d1::Found::Foreign(vec!["reaper_runs".into()])
    );
}

#[tokio::test]
async fn d1_s_own_tables_do_not_make_an_empty_database_foreign() {
    let client = Arc::new(SqliteClient::in_memory());
    client.execute("CREATE TABLE _cf_KV (k, v); CREATE TABLE d1_migrations (id);");
    D1Store::open(client.clone()).await.unwrap();
    assert_eq!(
        reaper_d1::schema::inspect(client.as_ref()).await.unwrap(),
        reaper_d1::Found::Reaper(SCHEMA_VERSION)
    );
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused() {
    let (_, client) = common::store().await;
    client.execute("INSERT INTO reaper_schema (version, description) VALUES (99, 'future')");
    match D1Store::open(client).await {
        Err(OpenError::TooNew {
            found: 99,
            supported,
        }) => assert_eq!(supported, SCHEMA_VERSION),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn opening_a_current_database_again_applies_no_migration() {
    let (_, client) = common::store().await;
    D1Store::open(client.clone()).await.unwrap();
    let rows = reaper_d1::SqlClient::batch(
        client.as_ref(),
        vec![reaper_d1::Statement::new(
            "SELECT COUNT(*) AS n FROM reaper_schema",
            vec![],
        )],
    )
    .await
    .unwrap();
    // One row per migration a new database takes (the baseline, then any later), each once.
    assert_eq!(
        rows[0][0]["n"],
        serde_json::json!(reaper_sql::schema::pending(0).count())
    );
}

#[tokio::test]
async fn a_row_with_an_unknown_status_is_corrupt_and_named_never_read_as_terminal() {
    let (store, client) = common::store().await;
    // The CHECK constraint keeps the ports from writing one; a hand edit without it can.
    client.execute(
        "PRAGMA ignore_check_constraints = ON; \
         INSERT INTO reaper_runs (run_id, thread_id, status, started_at) \
         VALUES ('run-x', 't', 'toString', 1); PRAGMA ignore_check_constraints = OFF;",
    );
    match store.get("run-x").await {
        Err(StoreError::Corrupt { key, reason }) => {
            assert_eq!(key, "run-x");
            assert!(reason.contains("\"toString\""), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn one_corrupt_detached_run_is_listed_as_corrupt_beside_the_good_ones() {
    let (store, client) = common::store().await;
    client.execute(
        "PRAGMA ignore_check_constraints = ON; \
         INSERT INTO reaper_runs (run_id, thread_id, started_at, detached_since) \
         VALUES ('good', 't', 1, 5); \
         INSERT INTO reaper_runs (run_id, thread_id, started_at, detached_since, usage) \
         VALUES ('bad', 't', 1, 5, 'not json'); \
         PRAGMA ignore_check_constraints = OFF;",
    );
    let listing = store.list_reclaimable_listing(10, 0).await.unwrap();
    let ids: Vec<_> = listing.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["good"]);
    assert!(
        matches!(&listing.corrupt[..], [StoreError::Corrupt { key, .. }] if key == "bad"),
        "{:?}",
        listing.corrupt
    );
}

#[tokio::test]
async fn the_reaper_tables_go_beside_an_application_s_own_runs_and_logs_in_a_d1_database() {
    let client = Arc::new(SqliteClient::in_memory());
    client.execute(
        "CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT); CREATE TABLE logs (line TEXT); \
         CREATE INDEX runs_by_thread ON runs (what); \
         INSERT INTO runs (what) VALUES ('app run'); INSERT INTO logs (line) VALUES ('app log');",
    );
    let store = D1Store::open(client.clone()).await.unwrap();
    let mut record = reaper_core::RunRecord::new("run-1", "thread-1", 1_000);
    record.detached_since = Some(2_000);
    store.put_run(record.clone()).await.unwrap();
    assert_eq!(store.get("run-1").await.unwrap(), Some(record));
    let rows = client
        .batch(vec![
            reaper_d1::Statement::new("SELECT what FROM runs", vec![]),
            reaper_d1::Statement::new("SELECT line FROM logs", vec![]),
        ])
        .await
        .unwrap();
    assert_eq!(rows[0].len(), 1, "{rows:?}");
    assert_eq!(rows[0][0]["what"], serde_json::json!("app run"));
    assert_eq!(rows[1][0]["line"], serde_json::json!("app log"));
}
