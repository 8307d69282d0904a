//! The sandbox index (`by-sandbox`): the reclaim's in-use check reads the live runs of any thread
//! naming a key with one Query, the index holds exactly those runs whatever order patches come
//! in, and a table deployed before the index existed keeps the old thread check.

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use common::{config_builder, fresh_store, unique_table};
use reaper_core::{
    EpochBump, Fenced, NewRun, Patch, RunPatch, RunStatus, RunStore, StoreError, TerminalStatus,
    TerminalWrite,
};
use reaper_dynamodb::{DynamoOptions, DynamoStore};
use reaper_testkit::conformance::run_store::live_runs_for_sandbox_are_the_non_terminal_runs_of_any_thread_naming_the_key_when_supported as live_runs_case;
use reaper_testkit::conformance::{native_nonce, CaseContext, Verdict};

const NOW: i64 = 1_700_000_000_000;

async fn raw(store: &DynamoStore, run_id: &str) -> HashMap<String, AttributeValue> {
    store
        .client()
        .get_item()
        .table_name(store.table_name())
        .key("pk", AttributeValue::S(format!("RUN#{run_id}")))
        .key("sk", AttributeValue::S("RUN".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("raw GetItem")
        .item
        .expect("the run item")
}

async fn indexed_under(store: &DynamoStore, run_id: &str) -> Option<String> {
    match raw(store, run_id).await.get("gsi3pk") {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        None => None,
        other => panic!("gsi3pk of {run_id} is {other:?}"),
    }
}

async fn create(store: &DynamoStore, run_id: &str, thread_id: &str, status: Option<RunStatus>) {
    store
        .create_or_resume(NewRun {
            run_id: run_id.into(),
            thread_id: thread_id.into(),
            started_at: NOW,
            status,
        })
        .await
        .expect("create");
}

fn name_key(key: &str) -> RunPatch {
    RunPatch {
        sandbox_key: Patch::Set(key.into()),
        ..RunPatch::default()
    }
}

fn status(s: RunStatus) -> RunPatch {
    RunPatch {
        status: Some(s),
        ..RunPatch::default()
    }
}

#[tokio::test]
async fn live_runs_for_sandbox_finds_the_live_runs_of_every_thread_naming_the_key_on_dynamodb() {
    let store = fresh_store("live-by-sandbox").await;
    let ctx = CaseContext::new(&native_nonce(), "live-by-sandbox", store.capabilities());
    assert_eq!(
        live_runs_case(store.as_ref(), &ctx).await.unwrap(),
        Verdict::Passed,
        "the conformance case must run, not skip, on DynamoDB"
    );
}

#[tokio::test]
async fn live_runs_for_sandbox_is_one_query_of_the_key_and_reads_no_finished_run() {
    let store = fresh_store("live-one-query").await;
    // Twenty finished turns in the same sandbox and one live one: the finished ones are not in
    // the index, so the check reads one item, not the sandbox's whole history.
    for i in 0..20 {
        let id = format!("done-{i}");
        create(&store, &id, "t", None).await;
        store.update(&id, name_key("k")).await.unwrap();
        store
            .update(&id, status(RunStatus::Completed))
            .await
            .unwrap();
    }
    create(&store, "live", "other-thread", None).await;
    store.update("live", name_key("k")).await.unwrap();
    store.take_request_stats();
    let live = store.live_runs_for_sandbox("k", 8).await.unwrap();
    assert_eq!(
        live.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(),
        ["live"]
    );
    let stats = store.request_stats();
    let op = stats.op("live_runs_for_sandbox");
    assert_eq!(op.requests, 1, "{stats:?}");
    assert!(
        op.capacity_units <= 0.5,
        "one small item read, not the history: {stats:?}"
    );
}

#[tokio::test]
async fn the_sandbox_index_holds_exactly_the_live_runs_naming_a_key_whatever_order_patches_come_in()
{
    let store = fresh_store("sandbox-index-follows").await;
    let long_key = "k".repeat(1500);

    // Named while running: indexed under the key's own form.
    create(&store, "r", "t", None).await;
    assert_eq!(indexed_under(&store, "r").await, None);
    store
        .update("r", RunPatch::detach(NOW, Some("k".into())))
        .await
        .unwrap();
    assert_eq!(
        indexed_under(&store, "r").await.as_deref(),
        Some("SANDBOX#k")
    );
    // Paused is still live.
    store
        .update("r", status(RunStatus::Interrupted))
        .await
        .unwrap();
    assert_eq!(
        indexed_under(&store, "r").await.as_deref(),
        Some("SANDBOX#k")
    );
    // Another key moves it; clearing the key takes it out.
    store.update("r", name_key(&long_key)).await.unwrap();
    let hashed = indexed_under(&store, "r").await.unwrap();
    assert!(hashed.starts_with("SANDBOX#~sha256:"), "{hashed}");
    store
        .update(
            "r",
            RunPatch {
                sandbox_key: Patch::Clear,
                ..RunPatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(indexed_under(&store, "r").await, None);
    // Back to running with a key, then the driver's terminal write takes it out in its request.
    store.update("r", status(RunStatus::Running)).await.unwrap();
    store.update("r", name_key(&long_key)).await.unwrap();
    assert_eq!(
        store
            .live_runs_for_sandbox(&long_key, 4)
            .await
            .unwrap()
            .len(),
        1
    );
    let epoch = match store.bump_epoch("r").await.unwrap() {
        EpochBump::Claimed { epoch, .. } => epoch,
        other => panic!("{other:?}"),
    };
    let write = TerminalWrite {
        status: TerminalStatus::Failed,
        finished_at: NOW,
        error: None,
    };
    assert_eq!(
        store.write_terminal("r", epoch, &write).await.unwrap(),
        Fenced::Written(true)
    );
    assert_eq!(indexed_under(&store, "r").await, None);
    assert!(store
        .live_runs_for_sandbox(&long_key, 4)
        .await
        .unwrap()
        .is_empty());

    // A finished run named afterwards (the patch alone cannot know the status) is not indexed.
    create(&store, "done", "t", Some(RunStatus::Completed)).await;
    store.update("done", name_key("k")).await.unwrap();
    assert_eq!(indexed_under(&store, "done").await, None);
    // Set back to running without touching the key: indexed again.
    store
        .update("done", status(RunStatus::Running))
        .await
        .unwrap();
    assert_eq!(
        indexed_under(&store, "done").await.as_deref(),
        Some("SANDBOX#k")
    );
    // An application's own terminal update takes it out in the same request.
    store
        .update("done", status(RunStatus::Aborted))
        .await
        .unwrap();
    assert_eq!(indexed_under(&store, "done").await, None);
}

#[tokio::test]
async fn a_table_deployed_without_the_sandbox_index_answers_unsupported_and_keeps_working() {
    let store = DynamoStore::from_config_builder(
        config_builder(),
        DynamoOptions::new(unique_table("no-sandbox-index")),
    );
    store
        .create_table_without(reaper_dynamodb::layout::SANDBOX_INDEX)
        .await
        .unwrap();
    create(&store, "r", "t", None).await;
    // Writing the index attribute on a table without the index is allowed.
    store
        .update("r", RunPatch::detach(NOW, Some("k".into())))
        .await
        .unwrap();
    // Unsupported (the reclaim then checks the run's threads, as before the index), not a
    // failure that would stop every reclaim until the stack is redeployed.
    for _ in 0..2 {
        match store.live_runs_for_sandbox("k", 4).await {
            Err(StoreError::Unsupported("live_runs_for_sandbox")) => {}
            other => panic!("expected Unsupported on a table without the index, got {other:?}"),
        }
    }
    // The rest of the store is unaffected.
    assert_eq!(
        store
            .get("r")
            .await
            .unwrap()
            .unwrap()
            .sandbox_key
            .as_deref(),
        Some("k")
    );
    store.delete_table().await.unwrap();
}
