//! The reclaim ledger beyond the conformance suite, against DynamoDB Local: where the entries
//! live (their own partition, the sparse index under `RECLAIM`), that the due listing reads no
//! more than its limit, that concurrent records insert once, and what each operation costs.

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use common::{fresh_store, store_with, unique_table};
use reaper_core::{NewRun, ReclaimIntent, ReclaimLedger, RunPatch, RunStore};
use reaper_dynamodb::{DynamoOptions, DynamoStore};

const NOW: i64 = 1_700_000_000_000;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn intent(run_id: &str, next_attempt_at: i64) -> ReclaimIntent {
    ReclaimIntent {
        run_id: run_id.to_string(),
        sandbox_key: Some(format!("sandbox-of-{run_id}")),
        provider: None,
        provider_sandbox_id: None,
        first_seen: NOW - 60_000,
        attempts: 0,
        next_attempt_at,
        last_error: None,
    }
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

#[tokio::test]
async fn an_entry_is_one_item_in_its_own_partition_indexed_under_reclaim_by_next_attempt() {
    let store = fresh_store("ledger-layout").await;
    let mut full = intent("r-1", NOW + 5_000);
    full.provider = Some("local".into());
    full.provider_sandbox_id = Some("sbx-9".into());
    full.attempts = 2;
    full.last_error = Some("destroy refused".into());
    store.record_intent(&full).await.unwrap();

    let raw = get_raw(&store, "RECLAIM#r-1", "RECLAIM")
        .await
        .expect("the entry's item");
    let expected = HashMap::from([
        ("pk".to_string(), s("RECLAIM#r-1")),
        ("sk".into(), s("RECLAIM")),
        ("entity".into(), s("reclaim")),
        ("runId".into(), s("r-1")),
        ("sandboxKey".into(), s("sandbox-of-r-1")),
        ("provider".into(), s("local")),
        ("providerSandboxId".into(), s("sbx-9")),
        ("firstSeen".into(), n(NOW - 60_000)),
        ("attempts".into(), n(2)),
        ("nextAttemptAt".into(), n(NOW + 5_000)),
        ("lastError".into(), s("destroy refused")),
        ("gsi1pk".into(), s("RECLAIM")),
        ("gsi1sk".into(), n(NOW + 5_000)),
    ]);
    assert_eq!(raw, expected);
    // The run's own partition is untouched.
    assert!(get_raw(&store, "RUN#r-1", "RECLAIM").await.is_none());
}

#[tokio::test]
async fn entries_share_the_sparse_index_without_ever_appearing_as_reclaimable_runs() {
    let store = fresh_store("ledger-apart").await;
    store
        .create_or_resume(NewRun {
            run_id: "detached".into(),
            thread_id: "t".into(),
            started_at: NOW - 100_000,
            status: None,
        })
        .await
        .unwrap();
    store
        .update("detached", RunPatch::detach(NOW - 50_000, None))
        .await
        .unwrap();
    store
        .record_intent(&intent("finished", NOW - 50_000))
        .await
        .unwrap();

    let listing = store.list_reclaimable_listing(NOW, 0).await.unwrap();
    let runs: Vec<&str> = listing.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(runs, ["detached"]);
    assert!(listing.corrupt.is_empty(), "{:?}", listing.corrupt);
    let due: Vec<String> = store
        .due_intents(NOW, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.run_id)
        .collect();
    assert_eq!(due, ["finished"]);
}

#[tokio::test]
async fn an_update_moves_the_entry_in_the_due_order() {
    let store = fresh_store("ledger-move").await;
    for (id, at) in [("a", NOW - 3_000), ("b", NOW - 2_000), ("c", NOW - 1_000)] {
        store.record_intent(&intent(id, at)).await.unwrap();
    }
    // "a" failed again: backed off past now.
    let mut a = intent("a", NOW + 60_000);
    a.attempts = 1;
    assert!(store.update_intent(&a).await.unwrap());
    let raw = get_raw(&store, "RECLAIM#a", "RECLAIM").await.unwrap();
    assert_eq!(raw.get("gsi1sk"), Some(&n(NOW + 60_000)));

    let due: Vec<String> = store
        .due_intents(NOW, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.run_id)
        .collect();
    assert_eq!(due, ["b", "c"]);
    let later: Vec<String> = store
        .due_intents(NOW + 60_000, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.run_id)
        .collect();
    assert_eq!(later, ["b", "c", "a"]);
}

#[tokio::test]
async fn entries_due_at_the_same_instant_come_back_ordered_by_run_id() {
    let store = fresh_store("ledger-ties").await;
    for id in ["m", "z", "a", "k"] {
        store.record_intent(&intent(id, NOW - 1_000)).await.unwrap();
    }
    store
        .record_intent(&intent("early", NOW - 2_000))
        .await
        .unwrap();
    let due: Vec<String> = store
        .due_intents(NOW, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.run_id)
        .collect();
    assert_eq!(due, ["early", "a", "k", "m", "z"]);
}

/// The limit is pushed down: with 200 entries due, a listing of 5 reads one small page, not the
/// ledger (DynamoDB charges read units by the bytes read, 0.5 per 4 KB for index reads).
#[tokio::test]
async fn the_due_listing_reads_only_as_many_entries_as_its_limit() {
    let store = fresh_store("ledger-bounded").await;
    for i in 0..200 {
        store
            .record_intent(&intent(&format!("run-{i:03}"), NOW - 1_000 + i))
            .await
            .unwrap();
    }
    store.take_request_stats();

    let due = store.due_intents(NOW, 5).await.unwrap();

    let ids: Vec<String> = due.into_iter().map(|i| i.run_id).collect();
    assert_eq!(ids, ["run-000", "run-001", "run-002", "run-003", "run-004"]);
    let stats = store.request_stats().op("reclaim_due");
    assert_eq!(stats.requests, 1);
    assert!(
        stats.capacity_units > 0.0 && stats.capacity_units <= 0.5,
        "5 entries of about 200 bytes fit one 4 KB read unit; consumed {stats:?}"
    );
    // Reading them all costs several units: the small figure above is the limit at work.
    store.take_request_stats();
    assert_eq!(store.due_intents(NOW, 200).await.unwrap().len(), 200);
    let all = store.request_stats().op("reclaim_due");
    assert!(all.capacity_units >= 2.0, "{all:?}");
    // A limit of 0 asks nothing.
    store.take_request_stats();
    assert!(store.due_intents(NOW, 0).await.unwrap().is_empty());
    assert_eq!(store.request_stats().total.requests, 0);
}

#[tokio::test]
async fn the_due_listing_pages_only_until_the_limit_is_reached() {
    let mut options = DynamoOptions::new(unique_table("ledger-pages"));
    options.page_limit = Some(2);
    let store = store_with(options).await;
    for i in 0..20 {
        store
            .record_intent(&intent(&format!("run-{i:02}"), NOW - 100 + i))
            .await
            .unwrap();
    }
    store.take_request_stats();

    assert_eq!(store.due_intents(NOW, 5).await.unwrap().len(), 5);
    // Pages of 2, 2, then the 1 still missing.
    assert_eq!(store.take_request_stats().op("reclaim_due").requests, 3);

    let counts = store.ledger_counts().await.unwrap();
    assert_eq!(counts.pending, 20);
    assert!(store.take_request_stats().op("reclaim_counts").requests >= 10);
}

#[tokio::test]
async fn of_many_concurrent_records_of_one_run_exactly_one_inserts() {
    let store = fresh_store("ledger-race").await;
    let attempts = (0..16).map(|k| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut mine = intent("contested", NOW + k);
            mine.first_seen = NOW + k;
            (k, store.record_intent(&mine).await.unwrap())
        })
    });
    let results = futures::future::join_all(attempts).await;
    let winners: Vec<i64> = results
        .into_iter()
        .map(|r| r.unwrap())
        .filter(|(_, inserted)| *inserted)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let stored = store.get_intent("contested").await.unwrap().unwrap();
    assert_eq!(
        stored.first_seen,
        NOW + winners[0],
        "the winner's entry stands"
    );
}

#[tokio::test]
async fn each_ledger_operation_is_one_counted_request() {
    let store = fresh_store("ledger-cost").await;
    let entry = intent("r", NOW - 1);
    store.take_request_stats();
    assert!(store.record_intent(&entry).await.unwrap());
    assert!(!store.record_intent(&entry).await.unwrap());
    assert!(store.update_intent(&entry).await.unwrap());
    store.get_intent("r").await.unwrap();
    store.due_intents(NOW, 10).await.unwrap();
    store.ledger_counts().await.unwrap();
    store.resolve_intent("r").await.unwrap();
    assert!(!store.update_intent(&entry).await.unwrap());

    let stats = store.request_stats();
    let record = stats.op("reclaim_record");
    assert_eq!((record.requests, record.condition_failures), (2, 1));
    let update = stats.op("reclaim_update");
    assert_eq!((update.requests, update.condition_failures), (2, 1));
    for op in [
        "reclaim_get",
        "reclaim_due",
        "reclaim_counts",
        "reclaim_resolve",
    ] {
        assert_eq!(stats.op(op).requests, 1, "{op}");
    }
    assert_eq!(stats.total.requests, 8);
    assert_eq!(stats.total.errors, 0);
}

#[tokio::test]
async fn a_long_run_id_is_keyed_by_its_hash_and_reads_back_whole() {
    let store = fresh_store("ledger-long-id").await;
    let long = "r".repeat(3_000);
    let entry = intent(&long, NOW - 1);
    assert!(store.record_intent(&entry).await.unwrap());
    assert_eq!(store.get_intent(&long).await.unwrap(), Some(entry.clone()));
    assert_eq!(store.due_intents(NOW, 1).await.unwrap(), vec![entry]);
    store.resolve_intent(&long).await.unwrap();
    assert_eq!(store.get_intent(&long).await.unwrap(), None);
}
