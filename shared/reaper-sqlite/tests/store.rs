//! Behaviour beyond the shared conformance suite: rows written by other code, a busy file,
//! retention of delivery-log events, and the listings `reaper status` uses.

mod common;

use std::time::Duration;

use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochBump, Fenced, LogSnapshot, MessageStore, NewRun, RunPatch,
    RunStatus, RunStore, StoreError, TerminalStatus, TerminalWrite, Transcript, TranscriptMessage,
};
use reaper_sqlite::{RetentionReport, DEFAULT_EVENT_RETENTION_MS};
use rusqlite::Connection;

use common::TempStore;

fn new_run(run_id: &str, thread_id: &str, started_at: i64) -> NewRun {
    NewRun {
        run_id: run_id.into(),
        thread_id: thread_id.into(),
        started_at,
        status: None,
    }
}

/// Inserts a run whose status no reaper could write, bypassing the CHECK constraint the way a
/// careless application or a hand edit might.
fn insert_bad_status(path: &std::path::Path, run_id: &str, status: &str) {
    let conn = Connection::open(path).unwrap();
    conn.pragma_update(None, "ignore_check_constraints", "ON")
        .unwrap();
    conn.execute(
        "INSERT INTO reaper_runs (run_id, thread_id, status, started_at, detached_since) \
         VALUES (?1, 'bad-thread', ?2, 1, 0)",
        [run_id, status],
    )
    .unwrap();
}

fn assert_corrupt_naming<T: std::fmt::Debug>(result: Result<T, StoreError>, run_id: &str) {
    match result {
        Err(StoreError::Corrupt { key, reason }) => {
            assert_eq!(key, run_id);
            assert!(reason.contains("status"), "{reason}");
        }
        other => panic!("expected Corrupt naming {run_id}, got {other:?}"),
    }
}

#[test]
fn the_schema_refuses_an_unknown_status() {
    let store = TempStore::new();
    let conn = Connection::open(store.path()).unwrap();
    let err = conn
        .execute(
            "INSERT INTO reaper_runs (run_id, thread_id, status, started_at) VALUES ('r', 't', 'done', 1)",
            [],
        )
        .unwrap_err();
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ConstraintViolation)
    );
}

#[tokio::test]
async fn a_row_with_an_unknown_status_reads_as_corrupt_naming_the_run_and_never_as_terminal() {
    let store = TempStore::new();
    insert_bad_status(&store.path(), "proto-run", "toString");

    assert_corrupt_naming(RunStore::get(&*store, "proto-run").await, "proto-run");
    assert_corrupt_naming(store.bump_epoch("proto-run").await, "proto-run");
    assert_corrupt_naming(store.list_by_thread("bad-thread").await, "proto-run");
    assert_corrupt_naming(store.count_by_status().await, "proto-run");
    // The selection asks for `running` rows, so the corrupt row is neither listed nor an error.
    assert!(store.list_reclaimable(10, 0).await.unwrap().is_empty());
    // The refused claim wrote nothing.
    let epoch: Option<i64> = Connection::open(store.path())
        .unwrap()
        .query_row(
            "SELECT driver_epoch FROM reaper_runs WHERE run_id = 'proto-run'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(epoch, None);
}

#[tokio::test]
async fn a_busy_file_surfaces_as_a_retryable_unavailable_and_the_retry_lands() {
    let store = TempStore::new();
    let sqlite = store
        .store
        .clone()
        .with_busy_timeout(Duration::from_millis(20))
        .unwrap();
    sqlite.create_or_resume(new_run("r", "t", 1)).await.unwrap();

    let holder = Connection::open(sqlite.path().unwrap()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = sqlite.bump_epoch("r").await.unwrap_err();
    assert!(err.is_retryable(), "expected Unavailable, got {err:?}");
    holder.execute_batch("COMMIT").unwrap();

    match sqlite.bump_epoch("r").await.unwrap() {
        EpochBump::Claimed { epoch, .. } => assert_eq!(epoch, 1),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_application_writing_the_documented_sql_produces_a_reclaimable_run() {
    let store = TempStore::new();
    let conn = Connection::open(store.path()).unwrap();
    // The statements SCHEMA.md gives to applications, verbatim.
    conn.execute(
        "INSERT INTO reaper_runs (run_id, thread_id, status, started_at) \
         VALUES (?1, ?2, 'running', ?3) ON CONFLICT (run_id) DO NOTHING",
        rusqlite::params!["app-run", "app-thread", 1_000],
    )
    .unwrap();
    conn.execute(
        "UPDATE reaper_runs SET detached_since = ?2, sandbox_key = ?3 WHERE run_id = ?1",
        rusqlite::params!["app-run", 2_000, "local:sbx-1"],
    )
    .unwrap();
    let listed = store.list_reclaimable(2_000, 0).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].sandbox_key.as_deref(), Some("local:sbx-1"));
    assert_eq!(listed[0].detached_since, Some(2_000));
    assert_eq!(listed[0].cancel_requested, None);

    conn.execute(
        "UPDATE reaper_runs SET detached_since = NULL WHERE run_id = ?1",
        ["app-run"],
    )
    .unwrap();
    assert!(store.list_reclaimable(2_000, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn list_detached_and_status_counts_show_what_reaper_status_needs() {
    let store = TempStore::new();
    for (id, started) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
        store
            .create_or_resume(new_run(id, "t", started))
            .await
            .unwrap();
    }
    store
        .update("a", RunPatch::detach(100, Some("k-a".into())))
        .await
        .unwrap();
    store
        .update("b", RunPatch::detach(50, Some("k-b".into())))
        .await
        .unwrap();
    store
        .update(
            "c",
            RunPatch {
                status: Some(RunStatus::Completed),
                ..RunPatch::detach(10, None)
            },
        )
        .await
        .unwrap();

    let detached = store.list_detached(1_000).await.unwrap();
    assert!(detached.corrupt.is_empty());
    let summary: Vec<(&str, i64, Option<&str>)> = detached
        .runs
        .iter()
        .map(|d| {
            (
                d.record.run_id.as_str(),
                d.detached_for_ms,
                d.record.sandbox_key.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![("b", 950, Some("k-b")), ("a", 900, Some("k-a"))]
    );

    let counts = store.count_by_status().await.unwrap();
    assert_eq!(counts.running, 3);
    assert_eq!(counts.completed, 1);
    assert_eq!(counts.get(RunStatus::Failed), 0);
    assert_eq!(counts.total(), 4);

    let all: Vec<String> = store
        .all_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(all, ["a", "b", "c", "d"]);
}

const DAY: i64 = 24 * 60 * 60 * 1000;

/// A run with `events` appended and closed, finished at `finished_at` (or left running), and a
/// saved transcript.
async fn run_with_events(
    store: &TempStore,
    run_id: &str,
    events: usize,
    outcome: Option<(TerminalStatus, Option<i64>)>,
) {
    store
        .create_or_resume(new_run(run_id, "thread", 0))
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
    let store = TempStore::new();
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

    let report = store
        .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 2)
        .await
        .unwrap();
    assert_eq!(report.runs, 2);
    assert_eq!(report.events_deleted, 8);
    assert!(report.batches >= 4, "8 events at 2 per batch: {report:?}");

    for gone in ["old-done", "old-failed"] {
        assert!(store.read(gone, 0, 100).await.unwrap().is_empty());
        let snap = store.snapshot(gone).await.unwrap();
        assert_eq!(snap.len, 0);
        assert!(snap.closed);
        // The run row and the transcript outlive the events.
        let run = RunStore::get(&*store, gone).await.unwrap().unwrap();
        assert!(run.status.is_terminal());
        let transcript = store.get_transcript(gone).await.unwrap().unwrap();
        assert_eq!(transcript.messages[0].content, format!("all of {gone}"));
    }
    for kept in [("recent", 2), ("no-finish-time", 1), ("still-running", 4)] {
        assert_eq!(
            store.read(kept.0, 0, 100).await.unwrap().len(),
            kept.1,
            "{}",
            kept.0
        );
    }
}

#[tokio::test]
async fn the_retention_cutoff_is_inclusive() {
    let store = TempStore::new();
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

    let report = store.prune_events(now, retention, 100).await.unwrap();
    assert_eq!(
        report,
        RetentionReport {
            runs: 1,
            events_deleted: 1,
            batches: 1,
            more: false,
        }
    );
    assert!(store.read("at-cutoff", 0, 10).await.unwrap().is_empty());
    assert_eq!(store.read("just-after", 0, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn pruning_again_deletes_nothing_and_an_aged_out_log_refuses_appends() {
    let store = TempStore::new();
    let now = 100 * DAY;
    run_with_events(
        &store,
        "old",
        3,
        Some((TerminalStatus::Completed, Some(DAY))),
    )
    .await;
    assert_eq!(
        store
            .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 10)
            .await
            .unwrap()
            .events_deleted,
        3
    );

    let again = store
        .prune_events(now, DEFAULT_EVENT_RETENTION_MS, 10)
        .await
        .unwrap();
    assert_eq!(again, RetentionReport::default());
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

#[test]
fn the_default_event_retention_is_thirty_days() {
    assert_eq!(DEFAULT_EVENT_RETENTION_MS, 30 * DAY as u64);
}

#[tokio::test]
async fn a_fenced_terminal_write_keeps_a_stored_error_when_it_carries_none() {
    let store = TempStore::new();
    store.create_or_resume(new_run("r", "t", 1)).await.unwrap();
    store
        .update(
            "r",
            RunPatch {
                error: reaper_core::Patch::Set(reaper_core::RunError::new("earlier")),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let write = TerminalWrite {
        status: TerminalStatus::Completed,
        finished_at: 9,
        error: None,
    };
    assert_eq!(
        store.write_terminal("r", 0, &write).await.unwrap(),
        Fenced::Written(true)
    );
    let run = RunStore::get(&*store, "r").await.unwrap().unwrap();
    assert_eq!(run.error.unwrap().message, "earlier");
    assert_eq!(run.finished_at, Some(9));
}
