//! Event retention on D1: the events of runs finished longer ago than the retention are deleted
//! in bounded batches within a bounded number of round trips; run rows, transcripts and the
//! events of recent, unfinished or undated runs are kept; pruning again deletes nothing.

mod common;

use std::sync::{Arc, Mutex};

use common::SqliteClient;
use reaper_core::{
    Appended, Chunk, DeliveryLog, Fenced, LogSnapshot, MessageStore, NewRun, RunPatch, RunStore,
    StoreError, TerminalStatus, Transcript, TranscriptMessage,
};
use reaper_d1::{
    D1Store, RetentionReport, Row, SqlClient, Statement, DEFAULT_EVENT_RETENTION_MS,
    DEFAULT_RETENTION_ROUND_TRIPS,
};

const DAY: i64 = 24 * 60 * 60 * 1000;

/// The native client, recording per batch how many events its deletes returned.
struct Counting {
    inner: Arc<SqliteClient>,
    deleted_per_batch: Mutex<Vec<usize>>,
}

impl Counting {
    fn reset(&self) -> Vec<usize> {
        std::mem::take(&mut *self.deleted_per_batch.lock().unwrap())
    }
}

#[async_trait::async_trait]
impl SqlClient for Counting {
    async fn batch(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>, StoreError> {
        let deletes: Vec<bool> = statements
            .iter()
            .map(|s| s.sql.starts_with("DELETE FROM reaper_log_entries"))
            .collect();
        let out = self.inner.batch(statements).await?;
        let deleted = out
            .iter()
            .zip(deletes)
            .filter(|(_, d)| *d)
            .map(|(rows, _)| rows.len())
            .sum();
        self.deleted_per_batch.lock().unwrap().push(deleted);
        Ok(out)
    }
}

async fn counted_store() -> (D1Store, Arc<Counting>) {
    let client = Arc::new(Counting {
        inner: Arc::new(SqliteClient::in_memory()),
        deleted_per_batch: Mutex::new(Vec::new()),
    });
    let store = D1Store::open(client.clone()).await.unwrap();
    client.reset();
    (store, client)
}

/// A run with `events` appended and closed, finished at `finished_at` (or left running), and a
/// saved transcript.
async fn run_with_events(
    store: &D1Store,
    run_id: &str,
    events: usize,
    outcome: Option<(TerminalStatus, Option<i64>)>,
) {
    store
        .create_or_resume(NewRun {
            run_id: run_id.into(),
            thread_id: "thread".into(),
            started_at: 0,
            status: None,
        })
        .await
        .unwrap();
    let chunks: Vec<Chunk> = (0..events)
        .map(|i| Chunk::text(&format!("{run_id} {i}")))
        .collect();
    store
        .append(run_id, None, chunks.to_vec(), 5)
        .await
        .unwrap();
    if let Some((status, finished_at)) = outcome {
        let patch = RunPatch {
            status: Some(status.into()),
            finished_at: finished_at.into(),
            ..Default::default()
        };
        store.update(run_id, patch).await.unwrap();
        store.close(run_id, None, 6).await.unwrap();
    }
    store
        .save_transcript(
            &Transcript {
                run_id: run_id.into(),
                thread_id: "thread".into(),
                messages: vec![TranscriptMessage {
                    role: "assistant".into(),
                    content: format!("all of {run_id}"),
                }],
                exit_code: Some(0),
                saved_at: 7,
            },
            None,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn events_of_runs_finished_longer_ago_than_the_retention_are_deleted_in_bounded_batches() {
    let (store, client) = counted_store().await;
    let now = 100 * DAY;
    let old = now - 31 * DAY;
    run_with_events(
        &store,
        "old-done",
        5,
        Some((TerminalStatus::Completed, Some(old))),
    )
    .await;
    run_with_events(
        &store,
        "old-failed",
        3,
        Some((TerminalStatus::Failed, Some(old + 1))),
    )
    .await;
    run_with_events(
        &store,
        "recent",
        2,
        Some((TerminalStatus::Completed, Some(now - DAY))),
    )
    .await;
    run_with_events(
        &store,
        "no-finish-time",
        1,
        Some((TerminalStatus::Aborted, None)),
    )
    .await;
    run_with_events(&store, "still-running", 4, None).await;
    client.reset();

    let report = store
        .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 2, 100)
        .await
        .unwrap();
    assert_eq!(report.runs, 2);
    assert_eq!(report.events_deleted, 8);
    assert!(!report.more, "{report:?}");
    let per_batch = client.reset();
    assert!(per_batch.iter().all(|n| *n <= 2), "{per_batch:?}");
    assert!(report.batches >= 4, "8 events at 2 per batch: {report:?}");

    for gone in ["old-done", "old-failed"] {
        assert!(store.read(gone, 0, 100).await.unwrap().is_empty());
        let snap = store.snapshot(gone).await.unwrap();
        assert_eq!(snap.len, 0);
        assert!(snap.closed);
        // The run row and the transcript outlive the events.
        let run = RunStore::get(&store, gone).await.unwrap().unwrap();
        assert!(run.status.is_terminal());
        let transcript = store.get_transcript(gone).await.unwrap().unwrap();
        assert_eq!(transcript.messages[0].content, format!("all of {gone}"));
    }
    for (kept, n) in [("recent", 2), ("no-finish-time", 1), ("still-running", 4)] {
        assert_eq!(store.read(kept, 0, 100).await.unwrap().len(), n, "{kept}");
        assert_eq!(store.snapshot(kept).await.unwrap().len, n as u64, "{kept}");
    }
}

#[tokio::test]
async fn one_call_makes_at_most_its_round_trips_and_says_more_is_left() {
    let (store, client) = counted_store().await;
    let now = 100 * DAY;
    for i in 0..6 {
        run_with_events(
            &store,
            &format!("old-{i}"),
            4,
            Some((TerminalStatus::Completed, Some(DAY + i))),
        )
        .await;
    }
    client.reset();

    // 24 events at 3 per batch need 8 batches and a listing; 4 round trips are not enough.
    let first = store
        .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 3, 4)
        .await
        .unwrap();
    assert_eq!(client.reset().len(), 4);
    assert!(first.more, "{first:?}");
    assert_eq!(first.events_deleted, 9, "three batches of three: {first:?}");
    // Oldest finish first: the first two runs are gone, the third is partly pruned.
    assert_eq!(first.runs, 2, "{first:?}");

    let mut total = first;
    while total.more {
        let next = store
            .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 3, 4)
            .await
            .unwrap();
        assert!(client.reset().len() <= 4);
        total.runs += next.runs;
        total.events_deleted += next.events_deleted;
        total.more = next.more;
    }
    assert_eq!((total.runs, total.events_deleted), (6, 24));
    for i in 0..6 {
        assert_eq!(store.snapshot(&format!("old-{i}")).await.unwrap().len, 0);
    }
}

#[tokio::test]
async fn many_small_logs_share_one_batch() {
    let (store, client) = counted_store().await;
    let now = 100 * DAY;
    for i in 0..20 {
        run_with_events(
            &store,
            &format!("old-{i:02}"),
            2,
            Some((TerminalStatus::Completed, Some(DAY))),
        )
        .await;
    }
    client.reset();
    let report = store
        .prune_events(
            now,
            DEFAULT_EVENT_RETENTION_MS,
            500,
            DEFAULT_RETENTION_ROUND_TRIPS,
        )
        .await
        .unwrap();
    assert_eq!(
        report,
        RetentionReport {
            runs: 20,
            events_deleted: 40,
            batches: 1,
            more: false
        }
    );
    // One listing (which returned them all) and one batch: no listing to learn nothing is left.
    assert_eq!(client.reset(), vec![0, 40]);
}

#[tokio::test]
async fn the_retention_cutoff_is_inclusive() {
    let (store, _) = counted_store().await;
    let now = 40 * DAY;
    let retention = 30 * DAY as u64;
    run_with_events(
        &store,
        "at-cutoff",
        1,
        Some((TerminalStatus::Completed, Some(10 * DAY))),
    )
    .await;
    run_with_events(
        &store,
        "just-after",
        1,
        Some((TerminalStatus::Completed, Some(10 * DAY + 1))),
    )
    .await;

    let report = store.prune_events(now, retention, 100, 10).await.unwrap();
    assert_eq!(
        report,
        RetentionReport {
            runs: 1,
            events_deleted: 1,
            batches: 1,
            more: false
        }
    );
    assert!(store.read("at-cutoff", 0, 10).await.unwrap().is_empty());
    assert_eq!(store.read("just-after", 0, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn pruning_again_deletes_nothing_and_an_aged_out_log_refuses_appends() {
    let (store, client) = counted_store().await;
    let now = 100 * DAY;
    run_with_events(
        &store,
        "old",
        3,
        Some((TerminalStatus::Completed, Some(DAY))),
    )
    .await;
    let first = store
        .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 10, 10)
        .await
        .unwrap();
    assert_eq!((first.runs, first.events_deleted), (1, 3));
    client.reset();

    let again = store
        .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 10, 10)
        .await
        .unwrap();
    assert_eq!(again, RetentionReport::default());
    // Nothing to do costs one listing.
    assert_eq!(client.reset().len(), 1);
    assert_eq!(
        store
            .append("old", None, vec![Chunk::text("late")], now)
            .await
            .unwrap(),
        Fenced::Written(Appended::Closed)
    );
    assert_eq!(
        store.snapshot("old").await.unwrap(),
        LogSnapshot {
            len: 0,
            last_append_at: Some(5),
            closed: true
        }
    );
}

#[tokio::test]
async fn a_run_no_longer_aged_out_when_its_batch_lands_keeps_its_events() {
    let (store, client) = counted_store().await;
    let now = 100 * DAY;
    run_with_events(
        &store,
        "old",
        3,
        Some((TerminalStatus::Completed, Some(DAY))),
    )
    .await;
    // The listing and the batch are two transactions: between them the run is rewritten as
    // finished recently (an application correcting it). The batch's own check keeps it.
    let listed = client
        .batch(vec![Statement::new(
            reaper_sql::logs::AGED_OUT,
            vec![(now - 30 * DAY).into(), 10.into()],
        )])
        .await
        .unwrap();
    assert_eq!(listed[0].len(), 1);
    store
        .update(
            "old",
            RunPatch {
                finished_at: Some(now).into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let batch = vec![
        Statement::new(
            reaper_sql::logs::DELETE_AGED_OUT_EVENTS,
            vec!["old".into(), 10.into(), (now - 30 * DAY).into()],
        ),
        Statement::new(
            reaper_sql::logs::MARK_PRUNED,
            vec!["old".into(), now.into(), (now - 30 * DAY).into()],
        ),
    ];
    let out = client.batch(batch).await.unwrap();
    assert!(out[0].is_empty() && out[1].is_empty(), "{out:?}");
    assert_eq!(store.read("old", 0, 10).await.unwrap().len(), 3);
}

#[test]
fn d1_and_sqlite_keep_events_equally_long_by_default() {
    assert_eq!(
        DEFAULT_EVENT_RETENTION_MS,
        reaper_sqlite::DEFAULT_EVENT_RETENTION_MS
    );
    assert_eq!(DEFAULT_EVENT_RETENTION_MS, 30 * DAY as u64);
}
