//! Detached runs no listing reaches (issue 24): a `detachedSince` past 2^53 - 1 sits in the
//! index beyond every cutoff; the sweep's first page reports it as corrupt, by the rule SQLite's
//! `LIST_UNLISTABLE` applies, and the other runs are still listed.

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use common::fresh_store;
use reaper_core::{NewRun, ReclaimableCursor, ReclaimableQuery, RunPatch, RunStore, StoreError};

const NOW: i64 = 1_700_000_000_000;
const PAST_SAFE: i64 = (1 << 53) + 5;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

#[tokio::test]
async fn a_detached_since_past_2_pow_53_is_reported_corrupt_by_the_sweeps_first_page_only() {
    let store = fresh_store("unlistable").await;
    store
        .create_or_resume(NewRun {
            run_id: "ok".into(),
            thread_id: "t".into(),
            started_at: NOW - 60_000,
            status: None,
        })
        .await
        .unwrap();
    store
        .update("ok", RunPatch::detach(NOW - 30_000, Some("k".into())))
        .await
        .unwrap();
    // Written by hand in the documented layout, as an application's own writer might.
    let item: HashMap<String, AttributeValue> = [
        ("pk", s("RUN#far")),
        ("sk", s("RUN")),
        ("runId", s("far")),
        ("threadId", s("t")),
        ("status", s("running")),
        ("startedAt", n(NOW)),
        ("detachedSince", n(PAST_SAFE)),
        ("gsi1pk", s("DETACHED")),
        ("gsi1sk", n(PAST_SAFE)),
        ("gsi2pk", s("THREAD#t")),
        ("gsi2sk", n(NOW)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    store
        .client()
        .put_item()
        .table_name(store.table_name())
        .set_item(Some(item))
        .send()
        .await
        .unwrap();

    let first = ReclaimableQuery {
        detached_after: None,
        detached_until: NOW,
        after: None,
        limit: 10,
    };
    let page = store.list_reclaimable_page(first.clone()).await.unwrap();
    let listed: Vec<_> = page.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(listed, ["ok"]);
    assert_eq!(page.corrupt.len(), 1, "{:?}", page.corrupt);
    match &page.corrupt[0] {
        StoreError::Corrupt { key, reason } => {
            assert_eq!(key, "far");
            assert!(
                reason.contains(&PAST_SAFE.to_string()) && reason.contains("no listing reaches it"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A later page of the same sweep does not report it again.
    let later = ReclaimableQuery {
        after: Some(ReclaimableCursor {
            detached_since: NOW - 30_000,
            run_id: "ok".into(),
        }),
        ..first
    };
    assert!(store
        .list_reclaimable_page(later)
        .await
        .unwrap()
        .corrupt
        .is_empty());
}

/// Puts `attrs` as a whole run item, as a writer of its own (not this crate) does.
async fn put_foreign(store: &reaper_dynamodb::DynamoStore, attrs: &[(&str, AttributeValue)]) {
    let item: HashMap<String, AttributeValue> = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    store
        .client()
        .put_item()
        .table_name(store.table_name())
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

/// Whether the run item carries the `reclaimable` index attributes now (a consistent read).
async fn in_detached_index(store: &reaper_dynamodb::DynamoStore, run_id: &str) -> bool {
    let item = store
        .client()
        .get_item()
        .table_name(store.table_name())
        .key("pk", s(&format!("RUN#{run_id}")))
        .key("sk", s("RUN"))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    item.get("gsi1pk") == Some(&s("DETACHED")) && item.contains_key("gsi1sk")
}

struct Fixed(i64);

impl reaper_core::Clock for Fixed {
    fn now_ms(&self) -> i64 {
        self.0
    }
}

/// The index follows detachment, not a valid status: a detached item whose `status` is no run
/// status (`RUNNING`, written by a writer of its own under the old rule, outside the index) is
/// put in the index by the next write through the store, and then the sweep and the status
/// read report it as corrupt beside the run past 2^53, by the rules of SQLite's
/// `LIST_UNLISTABLE`; the healthy run is still listed and nothing is driven.
#[tokio::test]
async fn a_detached_run_whose_status_is_no_run_status_is_indexed_by_the_next_write_and_reported_corrupt_by_the_sweep_and_status(
) {
    use std::sync::Arc;

    use reaper_core::health::{read_status, StatusLimits};
    use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions};
    use reaper_core::Patch;
    use reaper_testkit::fakes::{RecordingReclaim, ScriptedDrive, ScriptedProbe, TokioSleeper};

    let store = fresh_store("unlistable-status").await;
    store
        .create_or_resume(NewRun {
            run_id: "ok".into(),
            thread_id: "t".into(),
            started_at: NOW - 60_000,
            status: None,
        })
        .await
        .unwrap();
    store
        .update("ok", RunPatch::detach(NOW - 30_000, Some("k".into())))
        .await
        .unwrap();
    // Detached, status `RUNNING`, no index attributes: what the old rule ("indexed exactly when
    // status = running") told a writer of its own to write.
    put_foreign(
        &store,
        &[
            ("pk", s("RUN#shouting")),
            ("sk", s("RUN")),
            ("runId", s("shouting")),
            ("threadId", s("t2")),
            ("status", s("RUNNING")),
            ("startedAt", n(NOW - 50_000)),
            ("detachedSince", n(NOW - 20_000)),
            ("gsi2pk", s("THREAD#t2")),
            ("gsi2sk", n(NOW - 50_000)),
        ],
    )
    .await;
    put_foreign(
        &store,
        &[
            ("pk", s("RUN#far")),
            ("sk", s("RUN")),
            ("runId", s("far")),
            ("threadId", s("t3")),
            ("status", s("running")),
            ("startedAt", n(NOW)),
            ("detachedSince", n(PAST_SAFE)),
            ("gsi1pk", s("DETACHED")),
            ("gsi1sk", n(PAST_SAFE)),
            ("gsi2pk", s("THREAD#t3")),
            ("gsi2sk", n(NOW)),
        ],
    )
    .await;
    assert!(!in_detached_index(&store, "shouting").await);
    // The app stamps the sandbox key: a write that does not decide the index alone.
    store
        .update(
            "shouting",
            RunPatch {
                sandbox_key: Patch::Set("k2".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(
        in_detached_index(&store, "shouting").await,
        "a detached item whose status is no run status was left outside the index"
    );

    let reclaim = RecordingReclaim::new();
    let probe = ScriptedProbe::new();
    let deps = ReapDeps {
        runs: store.clone(),
        logs: store.clone(),
        leases: store.clone(),
        ledger: store.clone(),
        probe: Arc::new(probe.clone()),
        drive: Arc::new(ScriptedDrive::new(Arc::new(TokioSleeper))),
        reclaim: Some(Arc::new(reclaim.clone())),
        clock: Arc::new(Fixed(NOW)),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let before = store.request_stats();
    let report = reap_detached_runs(&deps, &ReapOptions::new(30 * 60_000, "unlistable-test"))
        .await
        .unwrap();
    // No Scan: the listing is its one page Query plus the one Query past 2^53 - 1.
    let after = store.request_stats();
    let sent = |op: &str| after.op(op).requests - before.op(op).requests;
    eprintln!(
        "sweep requests: {} in all, by operation {:?}",
        after.total.requests - before.total.requests,
        after
            .by_operation
            .keys()
            .map(|op| (op.as_str(), sent(op)))
            .filter(|(_, n)| *n > 0)
            .collect::<Vec<_>>()
    );
    assert_eq!(sent("list_unlistable"), 1);
    assert!(after.by_operation.keys().all(|op| !op.contains("scan")));
    let mut corrupt: Vec<_> = report
        .corrupt
        .iter()
        .map(|c| (c.key.clone().unwrap_or_default(), c.error.clone()))
        .collect();
    corrupt.sort();
    assert_eq!(
        corrupt.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["far", "shouting"],
        "{corrupt:?}"
    );
    assert!(
        corrupt[0].1.contains("no listing reaches it"),
        "{corrupt:?}"
    );
    assert!(corrupt[1].1.contains("\"RUNNING\""), "{corrupt:?}");
    assert_eq!(probe.calls(), ["ok"], "only the healthy run is probed");
    assert!(reclaim.reclaimed().is_empty());

    let limits = StatusLimits {
        detached_ttl_ms: 30 * 60_000,
        run_budget_ms: 60_000,
        schedule_interval_ms: 60_000,
        budget_ms: 60_000,
    };
    let status = read_status(&*store, &*store, Ok(None), limits, NOW).await;
    let detached = status.detached.expect("the status read the detached runs");
    assert_eq!((detached.listed, detached.corrupt), (1, 2), "{detached:?}");
}
