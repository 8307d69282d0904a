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
