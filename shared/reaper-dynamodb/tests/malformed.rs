//! Malformed items, one variant per way an item can be wrong, each written with a raw PutItem
//! next to good items on DynamoDB Local: the listing reports the bad one in `corrupt` naming it
//! and lists every good one, a direct read is `Corrupt`, and a whole sweep goes on around it.
//! The same for reclaim-ledger entries.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use common::fresh_store;
use futures::stream;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_core::{
    CancellationToken, Chunk, ChunkStream, Drive, DriveError, DriveRequest, ExitProbe, NewRun,
    ProbeError, ReclaimIntent, ReclaimLedger, RunExitProbe, RunPatch, RunRecord, RunStore,
    StoreError,
};
use reaper_dynamodb::DynamoStore;
use reaper_testkit::fakes::TokioSleeper;

type Item = HashMap<String, AttributeValue>;

const NOW: i64 = 1_700_000_000_000;
const TTL: u64 = 30 * 60 * 1000;
const DETACHED_AT: i64 = NOW - 2 * TTL as i64;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_string())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Bytes that are not UTF-8: an id a binary-typed writer could store.
fn not_utf8() -> AttributeValue {
    AttributeValue::B(Blob::new(vec![0xff, 0xfe, 0x00, 0xc3]))
}

async fn put_raw(store: &DynamoStore, item: Item) {
    store
        .client()
        .put_item()
        .table_name(store.table_name())
        .set_item(Some(item))
        .send()
        .await
        .expect("raw PutItem");
}

/// A well-formed detached running run item in the documented layout, indexed as reclaimable.
fn good_run(id: &str) -> Item {
    HashMap::from([
        ("pk".to_string(), s(&format!("RUN#{id}"))),
        ("sk".into(), s("RUN")),
        ("runId".into(), s(id)),
        ("threadId".into(), s("thread-1")),
        ("status".into(), s("running")),
        ("startedAt".into(), n(NOW - 10 * TTL as i64)),
        ("detachedSince".into(), n(DETACHED_AT)),
        ("gsi1pk".into(), s("DETACHED")),
        ("gsi1sk".into(), n(DETACHED_AT)),
        ("gsi2pk".into(), s("THREAD#thread-1")),
        ("gsi2sk".into(), n(NOW - 10 * TTL as i64)),
    ])
}

fn set(mut item: Item, name: &str, v: AttributeValue) -> Item {
    item.insert(name.to_string(), v);
    item
}

fn without(mut item: Item, name: &str) -> Item {
    item.remove(name);
    item
}

fn map(entries: &[(&str, AttributeValue)]) -> AttributeValue {
    AttributeValue::M(
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    )
}

/// A malformed variant: the run id its key carries, the item, the key the error must name and
/// a fragment its reason must contain.
struct Variant {
    id: String,
    item: Item,
    key: String,
    reason: &'static str,
}

fn run_variants() -> Vec<Variant> {
    let v = |name: &str, change: &dyn Fn(Item) -> Item, reason: &'static str| {
        let id = format!("bad-{name}");
        Variant {
            item: change(good_run(&id)),
            key: id.clone(),
            id,
            reason,
        }
    };
    let mut all = vec![
        v(
            "unknown-status",
            &|i| set(i, "status", s("zombie")),
            "zombie",
        ),
        v(
            "status-wrong-case",
            &|i| set(i, "status", s("Running")),
            "Running",
        ),
        v(
            "status-a-number",
            &|i| set(i, "status", n(1)),
            "status is not a string",
        ),
        v(
            "status-null",
            &|i| set(i, "status", AttributeValue::Null(true)),
            "missing attribute status",
        ),
        v(
            "no-status",
            &|i| without(i, "status"),
            "missing attribute status",
        ),
        v(
            "no-thread",
            &|i| without(i, "threadId"),
            "missing attribute threadId",
        ),
        v(
            "no-started-at",
            &|i| without(i, "startedAt"),
            "missing attribute startedAt",
        ),
        v(
            "started-at-a-string",
            &|i| set(i, "startedAt", s("yesterday")),
            "startedAt is not a number",
        ),
        v(
            "started-at-fractional",
            &|i| set(i, "startedAt", n("1700000000000.5")),
            "startedAt is 1700000000000.5",
        ),
        v(
            "started-at-out-of-range",
            &|i| set(i, "startedAt", n("1e30")),
            "startedAt",
        ),
        v(
            "finished-at-a-boolean",
            &|i| set(i, "finishedAt", AttributeValue::Bool(true)),
            "finishedAt is not a number",
        ),
        v(
            "detached-since-a-string",
            &|i| set(i, "detachedSince", s("an hour ago")),
            "detachedSince is not a number",
        ),
        v(
            "negative-epoch",
            &|i| set(i, "driverEpoch", n(-1)),
            "driverEpoch is -1",
        ),
        v(
            "fractional-epoch",
            &|i| set(i, "driverEpoch", n("2.5")),
            "driverEpoch is 2.5",
        ),
        v(
            "cancel-requested-a-string",
            &|i| set(i, "cancelRequested", s("true")),
            "cancelRequested is not a boolean",
        ),
        v(
            "sandbox-key-a-number",
            &|i| set(i, "sandboxKey", n(7)),
            "sandboxKey is not a string",
        ),
        v(
            "error-a-string",
            &|i| set(i, "error", s("boom")),
            "error is not a map",
        ),
        v(
            "error-code-without-message",
            &|i| set(i, "error", map(&[("code", s("E1"))])),
            "missing attribute message",
        ),
        v(
            "error-message-a-number",
            &|i| set(i, "error", map(&[("message", n(3))])),
            "message is not a string",
        ),
        v(
            "usage-binary",
            &|i| set(i, "usage", not_utf8()),
            "attribute usage",
        ),
        v(
            "usage-nested-binary",
            &|i| set(i, "usage", map(&[("tokens", n(3)), ("raw", not_utf8())])),
            "attribute usage",
        ),
        v(
            "thread-binary",
            &|i| set(i, "threadId", not_utf8()),
            "threadId is not a string",
        ),
    ];
    // Without a readable runId the error names the run by its key.
    all.push(Variant {
        item: without(good_run("bad-no-run-id"), "runId"),
        id: "bad-no-run-id".into(),
        key: "bad-no-run-id".into(),
        reason: "missing attribute runId",
    });
    all.push(Variant {
        item: set(good_run("bad-binary-run-id"), "runId", not_utf8()),
        id: "bad-binary-run-id".into(),
        key: "bad-binary-run-id".into(),
        reason: "runId is not a string",
    });
    // A runId that is not its key's: every keyed operation on it would reach another item.
    all.push(Variant {
        item: set(good_run("bad-foreign-id"), "runId", s("someone-else")),
        id: "bad-foreign-id".into(),
        key: "someone-else".into(),
        reason: "RUN#bad-foreign-id",
    });
    all
}

fn corrupt_by_key(errors: &[StoreError]) -> BTreeMap<String, String> {
    errors
        .iter()
        .map(|e| match e {
            StoreError::Corrupt { key, reason } => (key.clone(), reason.clone()),
            other => panic!("expected Corrupt, got {other:?}"),
        })
        .collect()
}

fn assert_reasons(corrupt: &BTreeMap<String, String>, variants: &[Variant]) {
    for v in variants {
        let reason = corrupt
            .get(&v.key)
            .unwrap_or_else(|| panic!("{} is not reported as corrupt: {corrupt:?}", v.id));
        assert!(
            reason.contains(v.reason),
            "{}: the reason {reason:?} does not say {:?}",
            v.id,
            v.reason
        );
    }
}

async fn seed_good_runs(store: &DynamoStore) -> Vec<String> {
    let mut good = Vec::new();
    for i in 0..4 {
        let id = format!("good-{i}");
        store
            .create_or_resume(NewRun {
                run_id: id.clone(),
                thread_id: "thread-1".into(),
                started_at: NOW - 10 * TTL as i64,
                status: None,
            })
            .await
            .unwrap();
        store
            .update(&id, RunPatch::detach(DETACHED_AT, Some(format!("sbx-{i}"))))
            .await
            .unwrap();
        good.push(id);
    }
    // Written by hand in the documented layout, with every optional attribute, and a JS
    // writer's NULLs: good too.
    let by_hand = set(
        set(
            set(
                good_run("good-by-hand"),
                "error",
                map(&[("message", s("m")), ("code", s("c"))]),
            ),
            "usage",
            map(&[("tokens", n(42)), ("model", AttributeValue::Null(true))]),
        ),
        "finishedAt",
        AttributeValue::Null(true),
    );
    put_raw(store, set(by_hand, "driverEpoch", n(3))).await;
    good.push("good-by-hand".into());
    good
}

#[tokio::test]
async fn every_malformed_run_item_is_reported_by_key_and_every_good_run_is_still_listed() {
    let store = fresh_store("malformed-runs").await;
    let good = seed_good_runs(&store).await;
    let variants = run_variants();
    for v in &variants {
        put_raw(&store, v.item.clone()).await;
    }

    let listing = store.list_reclaimable_listing(NOW, TTL).await.unwrap();

    let listed: BTreeSet<String> = listing.runs.iter().map(|r| r.run_id.clone()).collect();
    assert_eq!(listed, good.iter().cloned().collect::<BTreeSet<_>>());
    let corrupt = corrupt_by_key(&listing.corrupt);
    let expected: BTreeSet<String> = variants.iter().map(|v| v.key.clone()).collect();
    assert_eq!(
        corrupt.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "each malformed item once, by its key"
    );
    assert_reasons(&corrupt, &variants);
    // The port without the report lists the same good runs and counts the skips.
    let plain: BTreeSet<String> = store
        .list_reclaimable(NOW, TTL)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(plain, listed);
    assert!(store.request_stats().corrupt_items_skipped >= 2 * variants.len() as u64);
}

#[tokio::test]
async fn a_direct_read_of_each_malformed_run_item_is_corrupt_naming_it() {
    let store = fresh_store("malformed-get").await;
    let variants = run_variants();
    for v in &variants {
        put_raw(&store, v.item.clone()).await;
    }
    for v in &variants {
        match store.get(&v.id).await {
            Err(StoreError::Corrupt { key, reason }) => {
                assert_eq!(key, v.key, "{}", v.id);
                assert!(reason.contains(v.reason), "{}: {reason}", v.id);
            }
            other => panic!("{}: expected Corrupt, got {other:?}", v.id),
        }
    }
}

/// Every run's agent has finished.
struct Finished;

#[async_trait::async_trait]
impl ExitProbe for Finished {
    async fn has_finished(&self, _record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        Ok(RunExitProbe::Finished { exit_code: 0 })
    }
}

struct OneChunk;

impl Drive for OneChunk {
    fn drive(&self, r: DriveRequest, _s: CancellationToken) -> Result<ChunkStream, DriveError> {
        Ok(Box::pin(stream::iter([Ok(Chunk::text(&r.run_id))])))
    }
}

#[tokio::test]
async fn a_sweep_reports_the_malformed_items_and_finalizes_every_other_run() {
    let store = fresh_store("malformed-sweep").await;
    let good = seed_good_runs(&store).await;
    let variants = run_variants();
    for v in &variants {
        put_raw(&store, v.item.clone()).await;
    }
    // Inside the TTL, so every good run is probed (finished) and finalized.
    let now = DETACHED_AT + 1000;
    let deps = ReapDeps {
        runs: Arc::new(store.as_ref().clone()),
        logs: Arc::new(store.as_ref().clone()),
        leases: Arc::new(store.as_ref().clone()),
        ledger: Arc::new(store.as_ref().clone()),
        probe: Arc::new(Finished),
        drive: Arc::new(OneChunk),
        reclaim: None,
        clock: Arc::new(ManualClock::new(now)),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(TTL, "sweeper");
    options.fence_quiet_ms = 0;

    let report = reap_detached_runs(&deps, &options).await.unwrap();

    assert_eq!(report.outcomes.finalized, good.len(), "{report:?}");
    let reported: BTreeSet<Option<String>> = report.corrupt.iter().map(|c| c.key.clone()).collect();
    let expected: BTreeSet<Option<String>> = variants.iter().map(|v| Some(v.key.clone())).collect();
    assert_eq!(reported, expected);
    for id in &good {
        assert!(
            store.get(id).await.unwrap().unwrap().status.is_terminal(),
            "{id} was not finalized"
        );
    }
}

// Reclaim-ledger entries.

fn good_intent_item(id: &str, next_attempt_at: i64) -> Item {
    HashMap::from([
        ("pk".to_string(), s(&format!("RECLAIM#{id}"))),
        ("sk".into(), s("RECLAIM")),
        ("runId".into(), s(id)),
        ("firstSeen".into(), n(NOW - 1000)),
        ("attempts".into(), n(0)),
        ("nextAttemptAt".into(), n(next_attempt_at)),
        ("gsi1pk".into(), s("RECLAIM")),
        ("gsi1sk".into(), n(next_attempt_at)),
    ])
}

fn intent_variants() -> Vec<Variant> {
    let v = |name: &str, change: &dyn Fn(Item) -> Item, reason: &'static str| {
        let id = format!("bad-{name}");
        Variant {
            item: change(good_intent_item(&id, NOW - 500)),
            key: format!("reclaim intent {id}"),
            id,
            reason,
        }
    };
    vec![
        v(
            "attempts-fractional",
            &|i| set(i, "attempts", n("1.5")),
            "attempts is 1.5",
        ),
        v(
            "attempts-negative",
            &|i| set(i, "attempts", n(-1)),
            "attempts is -1",
        ),
        v(
            "attempts-a-string",
            &|i| set(i, "attempts", s("3")),
            "attempts is not a number",
        ),
        v(
            "no-first-seen",
            &|i| without(i, "firstSeen"),
            "missing attribute firstSeen",
        ),
        v(
            "next-attempt-a-string",
            &|i| set(i, "nextAttemptAt", s("soon")),
            "nextAttemptAt is not a number",
        ),
        v(
            "index-disagrees",
            &|i| set(i, "nextAttemptAt", n(NOW + 60_000)),
            "disagree with nextAttemptAt",
        ),
        v(
            "last-error-a-number",
            &|i| set(i, "lastError", n(503)),
            "lastError is not a string",
        ),
        v(
            "provider-a-boolean",
            &|i| set(i, "provider", AttributeValue::Bool(true)),
            "provider is not a string",
        ),
        v(
            "binary-run-id",
            &|i| set(i, "runId", not_utf8()),
            "runId is not a string",
        ),
        // Named by the id it carries; the reason names the key it sits under.
        Variant {
            item: set(
                good_intent_item("bad-foreign-id", NOW - 500),
                "runId",
                s("someone-else"),
            ),
            id: "bad-foreign-id".into(),
            key: "reclaim intent someone-else".into(),
            reason: "RECLAIM#bad-foreign-id",
        },
    ]
}

#[tokio::test]
async fn a_malformed_ledger_entry_is_corrupt_on_read_skipped_when_due_and_counted_as_a_leak() {
    let store = fresh_store("malformed-intents").await;
    let good: Vec<ReclaimIntent> = (0..3)
        .map(|i| ReclaimIntent {
            run_id: format!("good-{i}"),
            sandbox_key: Some(format!("sbx-{i}")),
            provider: None,
            provider_sandbox_id: None,
            first_seen: NOW - 10_000 + i,
            attempts: 0,
            next_attempt_at: NOW - 1000 + i,
            last_error: None,
        })
        .collect();
    for i in &good {
        assert!(store.record_intent(i).await.unwrap());
    }
    let variants = intent_variants();
    for v in &variants {
        put_raw(&store, v.item.clone()).await;
    }

    for v in &variants {
        match store.get_intent(&v.id).await {
            Err(StoreError::Corrupt { key, reason }) => {
                assert_eq!(key, v.key, "{}", v.id);
                assert!(reason.contains(v.reason), "{}: {reason}", v.id);
            }
            other => panic!("{}: expected Corrupt, got {other:?}", v.id),
        }
    }
    store.take_request_stats();
    assert_eq!(store.due_intents(NOW, 100).await.unwrap(), good);
    assert_eq!(
        store.request_stats().corrupt_items_skipped,
        variants.len() as u64
    );
    let counts = store.ledger_counts().await.unwrap();
    assert_eq!(counts.pending, (good.len() + variants.len()) as u64);
    assert_eq!(
        counts.leaked,
        variants.len() as u64,
        "no sweep can act on a corrupt entry"
    );
    assert_eq!(counts.oldest_first_seen, Some(NOW - 10_000));
}

#[tokio::test]
async fn a_ledger_entry_missing_from_the_due_index_reads_as_corrupt() {
    let store = fresh_store("intent-unindexed").await;
    put_raw(&store, without(good_intent_item("stray", NOW), "gsi1pk")).await;
    match store.get_intent("stray").await {
        Err(StoreError::Corrupt { key, reason }) => {
            assert_eq!(key, "reclaim intent stray");
            assert!(reason.contains("no sweep would retry it"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}
