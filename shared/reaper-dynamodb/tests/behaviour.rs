//! Behaviour beyond the conformance suite: the sparse index, paging, the documented layout read
//! by hand, corrupt items, retention, request accounting and error mapping, against DynamoDB
//! Local.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::{fresh_store, store_with, unique_table};
use reaper_core::time::ManualClock;
use reaper_core::{
    BoundedCount, Chunk, DeliveryLog, EpochBump, Fenced, MessageStore, NewRun, Patch, RunError,
    RunPatch, RunRecord, RunStatus, RunStore, StoreError, TerminalStatus, TerminalWrite,
    Transcript, TranscriptMessage,
};
use reaper_dynamodb::{DynamoOptions, DynamoStore};

const NOW: i64 = 1_700_000_000_000;
const TTL: u64 = 30 * 60 * 1000;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

async fn put_raw(store: &DynamoStore, item: HashMap<String, AttributeValue>) {
    store
        .client()
        .put_item()
        .table_name(store.table_name())
        .set_item(Some(item))
        .send()
        .await
        .expect("raw PutItem");
}

async fn get_raw(
    store: &DynamoStore,
    pk: &str,
    sk: &str,
) -> Option<HashMap<String, AttributeValue>> {
    store
        .client()
        .get_item()
        .table_name(store.table_name())
        .key("pk", s(pk))
        .key("sk", s(sk))
        .consistent_read(true)
        .send()
        .await
        .expect("raw GetItem")
        .item
}

async fn create_detached(store: &DynamoStore, run_id: &str, detached_since: i64) {
    store
        .create_or_resume(NewRun {
            run_id: run_id.into(),
            thread_id: format!("thread-of-{run_id}"),
            started_at: NOW - 4 * TTL as i64,
            status: None,
        })
        .await
        .expect("create");
    store
        .update(
            run_id,
            RunPatch::detach(detached_since, Some(format!("key-{run_id}"))),
        )
        .await
        .expect("detach");
}

fn ids(runs: &[RunRecord]) -> Vec<String> {
    let mut v: Vec<String> = runs.iter().map(|r| r.run_id.clone()).collect();
    v.sort();
    v
}

#[tokio::test]
async fn listing_pages_through_more_than_one_page_of_detached_runs() {
    let mut options = DynamoOptions::new(unique_table("paging"));
    options.page_limit = Some(3);
    let store = store_with(options).await;
    let mut expected = Vec::new();
    for i in 0..10 {
        let id = format!("run-{i:02}");
        create_detached(&store, &id, NOW - TTL as i64 - i).await;
        expected.push(id);
    }
    // Neither of these may be listed: not yet past the TTL, and never detached.
    create_detached(&store, "fresh", NOW - 1000).await;
    store
        .create_or_resume(NewRun {
            run_id: "attached".into(),
            thread_id: "t".into(),
            started_at: NOW,
            status: None,
        })
        .await
        .unwrap();
    store.take_request_stats();

    let listed = store.list_reclaimable(NOW, TTL).await.unwrap();

    assert_eq!(ids(&listed), expected);
    let stats = store.request_stats().op("list_reclaimable");
    assert!(
        stats.requests >= 4,
        "10 runs in pages of 3 need at least 4 queries, made {}",
        stats.requests
    );
}

#[tokio::test]
async fn the_backlog_count_reads_no_item_and_stops_at_its_page_cap_saying_at_least() {
    let mut options = DynamoOptions::new(unique_table("count"));
    options.page_limit = Some(3);
    let store = store_with(options).await;
    for i in 0..10 {
        create_detached(&store, &format!("run-{i:02}"), NOW - i).await;
    }
    store.take_request_stats();

    // Pages of 3: two pages count 6 of the 10, and the count says "at least".
    let capped = store.count_reclaimable(None, NOW, 100).await.unwrap();
    assert_eq!(
        capped,
        BoundedCount {
            count: 3 * reaper_dynamodb::MAX_COUNT_PAGES as u64,
            exact: false
        }
    );
    let stats = store.request_stats().op("count_reclaimable");
    assert_eq!(stats.requests, reaper_dynamodb::MAX_COUNT_PAGES as u64);
    // Within the cap the count is exact, and past its bound it is "at least" the bound.
    assert_eq!(
        store
            .count_reclaimable(Some(NOW - 5), NOW, 100)
            .await
            .unwrap(),
        BoundedCount {
            count: 5,
            exact: true
        }
    );
    assert_eq!(
        store.count_reclaimable(None, NOW, 2).await.unwrap(),
        BoundedCount {
            count: 2,
            exact: false
        }
    );
}

#[tokio::test]
async fn a_run_written_by_hand_in_the_documented_layout_reads_back() {
    let store = fresh_store("by-hand").await;
    let item = HashMap::from([
        ("pk".to_string(), s("RUN#hand-1")),
        ("sk".into(), s("RUN")),
        ("runId".into(), s("hand-1")),
        ("threadId".into(), s("thread-h")),
        ("status".into(), s("running")),
        ("startedAt".into(), n(NOW - 10 * TTL as i64)),
        ("sandboxKey".into(), s("docker:abc")),
        ("detachedSince".into(), n(NOW - 2 * TTL as i64)),
        ("driverEpoch".into(), n(3)),
        ("cancelRequested".into(), AttributeValue::Bool(false)),
        (
            "error".into(),
            AttributeValue::M(HashMap::from([
                ("message".to_string(), s("boom")),
                ("code".to_string(), s("E1")),
            ])),
        ),
        (
            "usage".into(),
            AttributeValue::M(HashMap::from([("tokens".to_string(), n(42))])),
        ),
        // A JS writer's `undefined` stored as NULL reads back absent.
        ("finishedAt".into(), AttributeValue::Null(true)),
        ("gsi1pk".into(), s("DETACHED")),
        ("gsi1sk".into(), n(NOW - 2 * TTL as i64)),
        ("gsi2pk".into(), s("THREAD#thread-h")),
        ("gsi2sk".into(), n(NOW - 10 * TTL as i64)),
    ]);
    put_raw(&store, item).await;

    let expected = RunRecord {
        run_id: "hand-1".into(),
        thread_id: "thread-h".into(),
        status: RunStatus::Running,
        started_at: NOW - 10 * TTL as i64,
        finished_at: None,
        error: Some(RunError::new("boom").with_code("E1")),
        usage: Some(serde_json::json!({"tokens": 42})),
        sandbox_key: Some("docker:abc".into()),
        detached_since: Some(NOW - 2 * TTL as i64),
        cancel_requested: Some(false),
        driver_epoch: Some(3),
    };
    assert_eq!(store.get("hand-1").await.unwrap(), Some(expected.clone()));
    assert_eq!(
        store.list_reclaimable(NOW, TTL).await.unwrap(),
        vec![expected.clone()]
    );
    assert_eq!(
        store.find_active_run("thread-h").await.unwrap(),
        Some(expected)
    );
    match store.bump_epoch("hand-1").await.unwrap() {
        EpochBump::Claimed { epoch, .. } => assert_eq!(epoch, 4),
        other => panic!("expected a claim at epoch 4, got {other:?}"),
    }
}

#[tokio::test]
async fn a_corrupt_item_is_reported_for_its_run_and_the_listing_goes_on() {
    let store = fresh_store("corrupt").await;
    create_detached(&store, "good-1", NOW - 2 * TTL as i64).await;
    create_detached(&store, "good-2", NOW - 3 * TTL as i64).await;
    let bad = |id: &str, status: &str| {
        HashMap::from([
            ("pk".to_string(), s(&format!("RUN#{id}"))),
            ("sk".into(), s("RUN")),
            ("runId".into(), s(id)),
            ("threadId".into(), s("t")),
            ("status".into(), s(status)),
            ("startedAt".into(), n(NOW - 10 * TTL as i64)),
            ("detachedSince".into(), n(NOW - 2 * TTL as i64)),
            ("gsi1pk".into(), s("DETACHED")),
            ("gsi1sk".into(), n(NOW - 2 * TTL as i64)),
        ])
    };
    put_raw(&store, bad("zombie-run", "zombie")).await;
    let mut missing_thread = bad("no-thread", "running");
    missing_thread.remove("threadId");
    put_raw(&store, missing_thread).await;

    let report = store.list_reclaimable_report(NOW, TTL).await.unwrap();
    assert_eq!(ids(&report.runs), vec!["good-1", "good-2"]);
    let mut corrupt: Vec<(String, String)> = report
        .corrupt
        .iter()
        .map(|e| match e {
            StoreError::Corrupt { key, reason } => (key.clone(), reason.clone()),
            other => panic!("expected Corrupt, got {other:?}"),
        })
        .collect();
    corrupt.sort();
    assert_eq!(corrupt[0].0, "no-thread");
    assert!(corrupt[0].1.contains("threadId"), "{}", corrupt[0].1);
    assert_eq!(corrupt[1].0, "zombie-run");
    assert!(corrupt[1].1.contains("zombie"), "{}", corrupt[1].1);

    // Through the port: the good runs, and the skip is counted.
    assert_eq!(
        ids(&store.list_reclaimable(NOW, TTL).await.unwrap()),
        vec!["good-1", "good-2"]
    );
    assert!(store.request_stats().corrupt_items_skipped >= 2);

    // Read directly, the bad run is named; a claim never treats it as claimable.
    assert!(
        matches!(store.get("zombie-run").await, Err(StoreError::Corrupt { key, .. }) if key == "zombie-run")
    );
    assert!(
        matches!(store.bump_epoch("zombie-run").await, Err(StoreError::Corrupt { key, .. }) if key == "zombie-run")
    );
    let raw = get_raw(&store, "RUN#zombie-run", "RUN").await.unwrap();
    assert!(
        !raw.contains_key("driverEpoch"),
        "a corrupt run must not be claimed"
    );
}

#[tokio::test]
async fn the_terminal_write_takes_the_run_out_of_the_index_in_the_same_request() {
    let store = fresh_store("terminal-index").await;
    create_detached(&store, "r", NOW - 2 * TTL as i64).await;
    let epoch = match store.bump_epoch("r").await.unwrap() {
        EpochBump::Claimed { epoch, .. } => epoch,
        other => panic!("{other:?}"),
    };
    store.take_request_stats();
    let write = TerminalWrite {
        status: TerminalStatus::Completed,
        finished_at: NOW,
        error: None,
    };
    assert_eq!(
        store.write_terminal("r", epoch, &write).await.unwrap(),
        Fenced::Written(true)
    );

    let stats = store.request_stats();
    assert_eq!(stats.op("write_terminal").requests, 1);
    let raw = get_raw(&store, "RUN#r", "RUN").await.unwrap();
    assert!(
        !raw.contains_key("gsi1pk") && !raw.contains_key("gsi1sk"),
        "{raw:?}"
    );
    // detachedSince stays (the sweep never clears it) and the run is not listed.
    assert_eq!(raw.get("detachedSince"), Some(&n(NOW - 2 * TTL as i64)));
    assert!(store.list_reclaimable(NOW, 0).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_index_follows_status_and_detach_whatever_order_patches_come_in() {
    let store = fresh_store("index-follows").await;
    let indexed = |store: Arc<DynamoStore>, id: &'static str| async move {
        get_raw(&store, &format!("RUN#{id}"), "RUN")
            .await
            .unwrap()
            .contains_key("gsi1pk")
    };
    store
        .create_or_resume(NewRun {
            run_id: "done".into(),
            thread_id: "t".into(),
            started_at: NOW,
            status: Some(RunStatus::Completed),
        })
        .await
        .unwrap();
    // Detaching a finished run must not index it (the patch alone cannot know the status).
    store
        .update("done", RunPatch::detach(NOW, None))
        .await
        .unwrap();
    assert!(!indexed(store.clone(), "done").await);

    create_detached(&store, "paused", NOW - 2 * TTL as i64).await;
    assert!(indexed(store.clone(), "paused").await);
    let status = |s: RunStatus| RunPatch {
        status: Some(s),
        ..RunPatch::default()
    };
    store
        .update("paused", status(RunStatus::Interrupted))
        .await
        .unwrap();
    assert!(!indexed(store.clone(), "paused").await);
    // Back to running while still detached: listed again, with its detach time.
    store
        .update("paused", status(RunStatus::Running))
        .await
        .unwrap();
    assert!(indexed(store.clone(), "paused").await);
    assert_eq!(
        ids(&store.list_reclaimable(NOW, TTL).await.unwrap()),
        vec!["paused"]
    );
    // The viewer comes back: clearing detachedSince leaves the index.
    let reattach = RunPatch {
        detached_since: Patch::Clear,
        ..RunPatch::default()
    };
    store.update("paused", reattach).await.unwrap();
    assert!(!indexed(store.clone(), "paused").await);
}

#[tokio::test]
async fn log_items_carry_a_ttl_and_expired_items_read_as_gone_while_transcripts_never_expire() {
    let clock = ManualClock::new(NOW);
    let mut options = DynamoOptions::new(unique_table("retention"));
    options.clock = Arc::new(clock.clone());
    options.log_retention = Duration::from_secs(3600);
    let store = store_with(options).await;
    store
        .create_or_resume(NewRun {
            run_id: "r".into(),
            thread_id: "t".into(),
            started_at: NOW,
            status: None,
        })
        .await
        .unwrap();
    store
        .append("r", None, vec![Chunk::text("a"), Chunk::text("b")], NOW)
        .await
        .unwrap();
    let expected_ttl = n(NOW / 1000 + 3600);
    assert_eq!(
        get_raw(&store, "RUN#r", "LOG").await.unwrap().get("ttl"),
        Some(&expected_ttl)
    );
    assert_eq!(
        get_raw(&store, "RUN#r", "LOG#00000000000000000001")
            .await
            .unwrap()
            .get("ttl"),
        Some(&expected_ttl)
    );

    // The terminal write restamps the meta item from the time the run finished.
    clock.advance(60_000);
    let write = TerminalWrite {
        status: TerminalStatus::Completed,
        finished_at: NOW + 60_000,
        error: None,
    };
    store.write_terminal("r", 0, &write).await.unwrap();
    assert_eq!(
        get_raw(&store, "RUN#r", "LOG").await.unwrap().get("ttl"),
        Some(&n((NOW + 60_000) / 1000 + 3600))
    );
    let transcript = Transcript {
        run_id: "r".into(),
        thread_id: "t".into(),
        messages: vec![TranscriptMessage {
            role: "assistant".into(),
            content: "ab".into(),
        }],
        exit_code: Some(0),
        saved_at: NOW,
    };
    store.save_transcript(&transcript, None).await.unwrap();
    assert!(!get_raw(&store, "RUN#r", "TRANSCRIPT")
        .await
        .unwrap()
        .contains_key("ttl"));

    assert_eq!(store.read("r", 0, 10).await.unwrap().len(), 2);
    // Past the retention, DynamoDB may not have deleted anything yet; reads must not care.
    clock.advance(2 * 3600 * 1000);
    assert!(get_raw(&store, "RUN#r", "LOG#00000000000000000000")
        .await
        .is_some());
    assert!(store.read("r", 0, 10).await.unwrap().is_empty());
    assert_eq!(
        store.snapshot("r").await.unwrap(),
        reaper_core::LogSnapshot::default()
    );
    assert_eq!(store.get_transcript("r").await.unwrap(), Some(transcript));
}

#[tokio::test]
async fn an_append_larger_than_one_transaction_lands_whole_and_in_order() {
    let store = fresh_store("big-append").await;
    let chunks: Vec<Chunk> = (0..60).map(|i| Chunk::text(&format!("c{i}"))).collect();
    store.take_request_stats();
    let res = store
        .append("r", Some(1), chunks.to_vec(), NOW)
        .await
        .unwrap();
    assert_eq!(res, Fenced::Written(reaper_core::Appended::At { first: 0 }));
    // 23 chunks per fenced transaction (25 items minus the fence check and the meta update).
    assert_eq!(store.request_stats().op("append").requests, 3);
    let read = store.read("r", 0, 100).await.unwrap();
    assert_eq!(read.len(), 60);
    assert!(read.iter().enumerate().all(|(i, e)| e.offset == i as u64
        && e.chunk.get("delta") == Some(serde_json::json!(format!("c{i}")))));
    assert_eq!(store.snapshot("r").await.unwrap().len, 60);
}

#[tokio::test]
async fn a_chunk_too_large_for_an_item_is_refused_with_a_clear_error_and_nothing_lands() {
    let store = fresh_store("huge-chunk").await;
    let huge = Chunk::text(&"x".repeat(500_000));
    let err = store.append("r", None, vec![huge], NOW).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Backend(m) if m.contains("400 KB") && m.contains("run r")),
        "{err}"
    );
    assert_eq!(store.snapshot("r").await.unwrap().len, 0);
}

#[tokio::test]
async fn a_claim_and_a_refused_claim_each_cost_one_request() {
    let store = fresh_store("claim-cost").await;
    create_detached(&store, "r", NOW - 2 * TTL as i64).await;
    store.take_request_stats();
    assert!(matches!(
        store.bump_epoch("r").await.unwrap(),
        EpochBump::Claimed { epoch: 1, .. }
    ));
    assert_eq!(store.take_request_stats().total.requests, 1);

    store
        .write_terminal(
            "r",
            1,
            &TerminalWrite {
                status: TerminalStatus::Failed,
                finished_at: NOW,
                error: None,
            },
        )
        .await
        .unwrap();
    store.take_request_stats();
    assert_eq!(
        store.bump_epoch("r").await.unwrap(),
        EpochBump::Terminal(RunStatus::Failed)
    );
    assert_eq!(
        store.bump_epoch("missing").await.unwrap(),
        EpochBump::Unknown
    );
    let stats = store.take_request_stats();
    assert_eq!(stats.total.requests, 2);
    assert_eq!(stats.total.condition_failures, 2);
}

#[tokio::test]
async fn a_superseded_terminal_write_reports_the_epoch_it_lost_to_and_changes_nothing() {
    let store = fresh_store("superseded").await;
    create_detached(&store, "r", NOW - 2 * TTL as i64).await;
    store.bump_epoch("r").await.unwrap();
    store.bump_epoch("r").await.unwrap();
    let write = TerminalWrite {
        status: TerminalStatus::Completed,
        finished_at: NOW,
        error: None,
    };
    assert_eq!(
        store.write_terminal("r", 1, &write).await.unwrap(),
        Fenced::Superseded { observed: 2 }
    );
    assert_eq!(
        store
            .append("r", Some(1), vec![Chunk::text("late")], NOW)
            .await
            .unwrap(),
        Fenced::Superseded { observed: 2 }
    );
    let run = store.get("r").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(store.snapshot("r").await.unwrap().len, 0);
    assert_eq!(
        ids(&store.list_reclaimable(NOW, TTL).await.unwrap()),
        vec!["r"]
    );
}

#[tokio::test]
async fn a_missing_table_is_damage_naming_it_in_one_line() {
    let store = DynamoStore::from_config_builder(
        common::config_builder(),
        DynamoOptions::new(unique_table("never-created")),
    );
    let err = store.get("r").await.unwrap_err();
    assert!(
        reaper_core::damage::is_damaged(&err)
            && err.to_string().contains("ResourceNotFoundException")
            && err.to_string().contains(store.table_name()),
        "{err}"
    );
    // The service's code and message, not the SDK's dump of the raw response.
    let message = err.to_string();
    assert!(
        !message.contains("SdkBody") && !message.contains("headers") && message.len() < 600,
        "{message}"
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable_after_bounded_retries() {
    // A loopback port nobody listens on: bind one, learn its number, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut options = DynamoOptions::new("nowhere");
    options.max_attempts = 2;
    options.initial_backoff = Duration::from_millis(1);
    options.operation_timeout = Duration::from_secs(5);
    let store = DynamoStore::from_config_builder(
        common::config_builder().endpoint_url(format!("http://127.0.0.1:{port}")),
        options,
    );
    let err = store.get("r").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(err.is_retryable());
}
