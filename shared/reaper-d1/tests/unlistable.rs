//! Issue 24, item 6, on D1: the rows that look detached but that no listing reaches (a status
//! that is no run status such as `'RUNNING'`, a `detached_since` past 2^53 − 1 or of the wrong
//! type) are reported as corrupt with the sweep's first page, by the rule `reaper status` and
//! the SQLite store use, through an index that holds only them (D1 bills every row read), and a
//! database at version 4 upgrades to it keeping every row.

mod common;

use std::sync::Arc;

use common::SqliteClient;
use reaper_core::{ReclaimableCursor, ReclaimableQuery, RunStore, StoreError};
use reaper_d1::{D1Store, SqlClient, Statement, SCHEMA_VERSION};
use rusqlite::Connection;

/// A healthy detached run, and three no listing reaches: one shouting its status, one detached
/// past what a JS number carries, one whose `detached_since` is text.
const PLANT: &str = "PRAGMA ignore_check_constraints = ON; \
     INSERT INTO reaper_runs (run_id, thread_id, status, started_at, detached_since) VALUES \
       ('run-good', 't-0', 'running', 1, 5), \
       ('run-shouting', 't-1', 'RUNNING', 1, 1), \
       ('run-far', 't-2', 'running', 1, 9007199254740993), \
       ('run-text', 't-3', 'running', 1, 'soon'), \
       ('run-done', 't-4', 'completed', 1, 7); \
     PRAGMA ignore_check_constraints = OFF;";

fn first_page() -> ReclaimableQuery {
    ReclaimableQuery {
        detached_after: None,
        detached_until: 1_000,
        after: None,
        limit: 10,
    }
}

/// The corrupt entries as `(key, reason)`, sorted by key.
fn corrupt(errors: &[StoreError]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = errors
        .iter()
        .map(|e| match e {
            StoreError::Corrupt { key, reason } => (key.clone(), reason.clone()),
            other => panic!("not a corrupt row: {other:?}"),
        })
        .collect();
    out.sort();
    out
}

fn assert_reports_the_three(errors: &[StoreError]) {
    let found = corrupt(errors);
    let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["run-far", "run-shouting", "run-text"], "{found:#?}");
    let reason = |key: &str| &found.iter().find(|(k, _)| k == key).unwrap().1;
    assert!(
        reason("run-shouting").contains("\"RUNNING\"")
            && reason("run-shouting").contains("no listing reaches it"),
        "{}",
        reason("run-shouting")
    );
    assert!(
        reason("run-far").contains("integer \"9007199254740993\"")
            && reason("run-far").contains("9007199254740991"),
        "{}",
        reason("run-far")
    );
    assert!(
        reason("run-text").contains("text \"soon\""),
        "{}",
        reason("run-text")
    );
}

#[tokio::test]
async fn rows_no_listing_reaches_are_reported_corrupt_with_the_sweeps_first_page_and_the_runs_still_listed(
) {
    let (store, client) = common::store().await;
    client.execute(PLANT);

    let page = store.list_reclaimable_page(first_page()).await.unwrap();
    let listed: Vec<&str> = page.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(listed, ["run-good"], "the readable run is still listed");
    assert_reports_the_three(&page.corrupt);

    // The same rows, by the same rule, as the SQLite store (and so `reaper status`) reports.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reaper.db");
    let sqlite = reaper_sqlite::SqliteStore::open(&file).unwrap();
    Connection::open(&file)
        .unwrap()
        .execute_batch(PLANT)
        .unwrap();
    let sqlite_page = sqlite.list_reclaimable_page(first_page()).await.unwrap();
    assert_eq!(corrupt(&page.corrupt), corrupt(&sqlite_page.corrupt));
}

#[tokio::test]
async fn rows_no_listing_reaches_are_reported_once_per_sweep_not_with_every_page() {
    let (store, client) = common::store().await;
    client.execute(PLANT);
    let resumed = ReclaimableQuery {
        after: Some(ReclaimableCursor {
            detached_since: 5,
            run_id: "run-good".into(),
        }),
        ..first_page()
    };
    let inside_ttl = ReclaimableQuery {
        detached_after: Some(0),
        ..first_page()
    };
    for query in [resumed, inside_ttl] {
        let page = store.list_reclaimable_page(query.clone()).await.unwrap();
        assert!(page.corrupt.is_empty(), "{query:?}: {:?}", page.corrupt);
    }
}

#[tokio::test]
async fn the_unlistable_report_reads_only_its_partial_index_not_the_runs_table() {
    let (_store, client) = common::store().await;
    let plan = client
        .batch(vec![Statement::new(
            format!("EXPLAIN QUERY PLAN {}", reaper_sql::runs::LIST_UNLISTABLE),
            vec![100i64.into()],
        )])
        .await
        .unwrap();
    let steps: Vec<String> = plan[0]
        .iter()
        .map(|row| row["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        steps
            .iter()
            .any(|s| s.contains("USING INDEX reaper_runs_unlistable")),
        "{steps:?}"
    );
    assert!(
        !steps.iter().any(|s| s.starts_with("SCAN runs")),
        "a full scan of runs: {steps:?}"
    );
    assert!(
        !steps.iter().any(|s| s.contains("TEMP B-TREE")),
        "a sort: {steps:?}"
    );
}

/// The statements of every migration up to `version`, each with its version row.
fn migrate_to(client: &SqliteClient, version: u32) {
    for m in reaper_sql::schema::MIGRATIONS
        .iter()
        .filter(|m| m.version <= version)
    {
        for statement in m.statements {
            client.execute(statement);
        }
        client.execute(&format!(
            "INSERT INTO reaper_schema (version, description) VALUES ({}, '{}')",
            m.version, m.description
        ));
    }
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_version_4_database_upgrades_to_the_unlistable_index_keeping_every_row_and_then_reports_them(
) {
    assert_eq!(SCHEMA_VERSION, 8);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d1.db");
    let client = Arc::new(SqliteClient::new(Connection::open(&file).unwrap()));
    migrate_to(&client, 4);
    // Version 4 named the table `runs` (version 7 added the prefix).
    client.execute(&PLANT.replace("INTO reaper_runs ", "INTO runs "));
    client.execute(
        "INSERT INTO log_entries (run_id, seq, chunk) VALUES ('run-good', 0, '{}'); \
         INSERT INTO logs (run_id, next_seq) VALUES ('run-good', 1);",
    );
    let before = Connection::open(&file).unwrap();
    let rows_before = count(&before, "SELECT COUNT(*) FROM runs");
    assert_eq!(rows_before, 5);
    assert_eq!(
        count(
            &before,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'runs_unlistable'"
        ),
        0
    );
    drop(before);

    let store = D1Store::open(client.clone()).await.unwrap();

    let after = Connection::open(&file).unwrap();
    assert_eq!(
        count(&after, "SELECT COUNT(*) FROM reaper_runs"),
        rows_before
    );
    assert_eq!(count(&after, "SELECT COUNT(*) FROM reaper_log_entries"), 1);
    assert_eq!(
        count(&after, "SELECT MAX(version) FROM reaper_schema"),
        i64::from(SCHEMA_VERSION)
    );
    assert_eq!(
        count(
            &after,
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' \
             AND name = 'reaper_runs_unlistable'"
        ),
        1
    );
    // The index was filled from the rows already there, so it reports them at once.
    assert_eq!(
        count(
            &after,
            &format!(
                "SELECT COUNT(*) FROM reaper_runs INDEXED BY reaper_runs_unlistable WHERE {}",
                reaper_sql::runs::UNLISTABLE_WHERE
            )
        ),
        3
    );
    let page = store.list_reclaimable_page(first_page()).await.unwrap();
    assert_reports_the_three(&page.corrupt);
    assert_eq!(page.runs.len(), 1);
}
