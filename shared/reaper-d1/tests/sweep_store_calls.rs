//! What a periodic sweep costs on D1, where each batch is one subrequest of the Worker's alarm
//! and every row read is billed: a current schema is checked by its version alone (one
//! statement, one row), anything else falls back to the full check; a sweep's history entries
//! and the retention's prune go in one batch.

mod common;

use std::sync::{Arc, Mutex};

use common::SqliteClient;
use reaper_core::history::{HistoryEntry, SweepHistory};
use reaper_core::reap::OutcomeCounts;
use reaper_core::sweeps::SweepRecord;
use reaper_core::{EpochMs, RunStore, StoreError};
use reaper_d1::{D1Store, OpenError, Row, SqlClient, Statement, SCHEMA_VERSION};

/// The native client, recording each batch's statements.
struct Recording {
    inner: Arc<SqliteClient>,
    batches: Mutex<Vec<Vec<String>>>,
}

impl Recording {
    fn new(inner: Arc<SqliteClient>) -> Arc<Self> {
        Arc::new(Recording {
            inner,
            batches: Mutex::new(Vec::new()),
        })
    }

    fn take(&self) -> Vec<Vec<String>> {
        std::mem::take(&mut *self.batches.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl SqlClient for Recording {
    async fn batch(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>, StoreError> {
        self.batches
            .lock()
            .unwrap()
            .push(statements.iter().map(|s| s.sql.clone()).collect());
        self.inner.batch(statements).await
    }
}

fn entry(run_id: &str, sweep_id: &str, at: EpochMs) -> HistoryEntry {
    HistoryEntry {
        run_id: run_id.into(),
        sweep_id: sweep_id.into(),
        at,
        host: "test".into(),
        outcome: "expired".into(),
        reason_code: "expired/ttl".into(),
        reason: "detached past the TTL".into(),
        sandbox: None,
        ledger: Vec::new(),
    }
}

#[tokio::test]
async fn a_current_schema_opens_for_a_sweep_with_one_statement_reading_only_its_version() {
    let (_, sqlite) = common::store().await;
    let client = Recording::new(sqlite);
    D1Store::open_current(client.clone()).await.unwrap();
    assert_eq!(
        client.take(),
        vec![vec![
            "SELECT MAX(version) AS version FROM reaper_schema".to_string()
        ]]
    );
}

#[tokio::test]
async fn an_empty_database_opened_for_a_sweep_is_checked_in_full_and_migrated() {
    let client = Recording::new(Arc::new(SqliteClient::in_memory()));
    let store = D1Store::open_current(client.clone()).await.unwrap();
    assert!(client.take().len() > 2, "the full check and the migration");
    // Migrated: the next open reads the version alone.
    D1Store::open_current(client.clone()).await.unwrap();
    assert_eq!(client.take().len(), 1);
    assert!(store.get("nobody").await.unwrap().is_none());
}

#[tokio::test]
async fn a_schema_without_its_version_row_opened_for_a_sweep_is_refused_as_damaged() {
    let (_, sqlite) = common::store().await;
    sqlite.execute("DELETE FROM reaper_schema");
    match D1Store::open_current(sqlite).await {
        Err(e @ OpenError::Damaged { .. }) => assert!(e.is_damaged()),
        other => panic!("opened a database without a version: {other:?}"),
    }
}

#[tokio::test]
async fn a_newer_schema_opened_for_a_sweep_is_refused_as_too_new() {
    let (_, sqlite) = common::store().await;
    sqlite.execute(&format!(
        "INSERT INTO reaper_schema (version, description) VALUES ({}, 'from the future')",
        SCHEMA_VERSION + 1
    ));
    assert!(matches!(
        D1Store::open_current(sqlite).await,
        Err(OpenError::TooNew { .. })
    ));
}

#[tokio::test]
async fn a_sweeps_history_its_record_and_the_retentions_prunes_are_one_batch() {
    let (_, sqlite) = common::store().await;
    let client = Recording::new(sqlite);
    let store = D1Store::assume_current(client.clone());
    store
        .record_history(&[entry("run-old", "s0", 10), entry("run-old", "s1", 20)])
        .await
        .unwrap();
    client.take();

    let record = SweepRecord {
        sweep_id: "s2".into(),
        host: "worker".into(),
        started_at: 990,
        finished_at: 1_000,
        duration_ms: 10,
        considered: 2,
        outcomes: OutcomeCounts::default(),
        reclaims_retried: 0,
        reclaims_settled: 0,
        concurrency: 2,
        concurrency_cap: 4,
        dry_run: false,
        failed: false,
        error: None,
    };
    let write = SweepHistory {
        entries: vec![entry("run-a", "s2", 1_000), entry("run-b", "s2", 1_000)],
        prune_before: 15,
        prune_max: 500,
        record: Some(record.clone()),
    };
    let done = store.write_sweep_history(&write).await.unwrap();

    assert_eq!(done.pruned, 1, "the entry made before the cutoff");
    assert_eq!(done.recorded, 2, "{done:?}");
    assert!(done.sweep_recorded, "{done:?}");
    let batches = client.take();
    assert_eq!(batches.len(), 1, "one round trip: {batches:?}");
    assert_eq!(
        batches[0].len(),
        6,
        "two entries, the record, its prune and cap, the history's prune: {batches:?}"
    );
    assert!(batches[0][5].starts_with("DELETE FROM reaper_run_history"));
    assert_eq!(store.recent_sweeps(5).await.unwrap(), [record]);
    assert_eq!(
        store.run_history("run-a", 10).await.unwrap(),
        [entry("run-a", "s2", 1_000)]
    );
    assert_eq!(
        store.run_history("run-old", 10).await.unwrap(),
        [entry("run-old", "s1", 20)]
    );

    client.take();
    // No entries: the prune alone, still one batch.
    let none = SweepHistory {
        entries: Vec::new(),
        prune_before: 1_001,
        prune_max: 1,
        record: None,
    };
    let done = store.write_sweep_history(&none).await.unwrap();
    assert_eq!(
        (done.recorded, done.sweep_recorded, done.pruned),
        (0, false, 1)
    );
    assert_eq!(client.take().len(), 1);
}
