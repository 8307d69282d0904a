//! Paused sandboxes of finished runs (issue 22, item 4): E2B pauses a sandbox (its lifecycle's
//! auto-pause, or the app's own pause) and a paused sandbox's journal is unreadable. The sweep
//! resumes one through `POST /sandboxes/{id}/connect` to read a finished run's journal, within
//! its cap, and pauses it again unless the run's reclaim killed it. Through the OpenAPI-checked
//! fake, with real local sandboxes behind it.

mod common;

use std::sync::Arc;

use common::E2bFake;
use reaper_core::journal::{journal_paths, journaled_command};
use reaper_core::memory::MemoryStore;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::{
    Clock, ExecOptions, MessageStore, RunRecord, RunStatus, RunStore, SandboxHandle,
    SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider, SandboxState,
};
use reaper_e2b::PROVIDER_NAME;
use reaper_local::{SystemClock, TokioSleeper};

async fn detached(store: &MemoryStore, sandbox: &str, run_id: &str, detached_since: i64) {
    let mut record = RunRecord::new(run_id, "thread", detached_since - 1_000);
    record.detached_since = Some(detached_since);
    record.sandbox_key = Some(format!("key-{run_id}"));
    store.put_run(record);
    store
        .upsert(SandboxInstanceRecord {
            key: format!("key-{run_id}"),
            provider: PROVIDER_NAME.into(),
            provider_sandbox_id: sandbox.into(),
            latest_snapshot_id: None,
            thread_id: "thread".into(),
            latest_run_id: Some(run_id.into()),
            updated_at: detached_since,
        })
        .await
        .unwrap();
}

async fn run_agent(handle: &dyn SandboxHandle, dir: &str, run_id: &str, command: &str) {
    let paths = journal_paths(run_id, Some(dir)).unwrap();
    let out = handle
        .exec(&journaled_command(command, &paths), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
}

fn deps(fake: &E2bFake, store: &Arc<MemoryStore>, dir: &str) -> ReapDeps {
    ReapDeps::journaled(
        store.clone(),
        Arc::new(fake.provider.clone()) as Arc<dyn SandboxProvider>,
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        Some(dir.to_string()),
    )
}

#[tokio::test]
async fn state_connect_and_pause_are_one_request_each_on_the_documented_endpoints() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    let p = &fake.provider;
    fake.pause(&id);
    let before = fake.counts();
    assert_eq!(p.state(&id).await.unwrap(), Some(SandboxState::Stopped));
    p.start_for_read(&id).await.unwrap();
    assert_eq!(p.state(&id).await.unwrap(), Some(SandboxState::Running));
    p.restore(&id).await.unwrap();
    assert_eq!(p.state(&id).await.unwrap(), Some(SandboxState::Stopped));
    let cost = fake.counts().since(before);
    assert_eq!(
        (
            cost.get_sandbox,
            cost.connect_sandbox,
            cost.pause_sandbox,
            cost.total()
        ),
        (3, 1, 1, 5),
        "{cost}"
    );
    assert_eq!(
        p.state("i0000000000000000000").await.unwrap(),
        Some(SandboxState::Gone)
    );
    p.destroy(&id).await.unwrap();
}

#[tokio::test]
async fn a_finished_run_whose_sandbox_paused_is_resumed_finalized_with_its_output_and_killed() {
    let fake = E2bFake::start().await;
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let id = fake.create_sandbox().await;
    let handle = fake.provider.resume(&id).await.unwrap().unwrap();
    run_agent(
        &*handle,
        &dir,
        "e2b-paused-done",
        "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
    )
    .await;
    // Detached an hour ago: past the sweep's TTL.
    detached(
        &store,
        &id,
        "e2b-paused-done",
        SystemClock.now_ms() - 3_600_000,
    )
    .await;
    fake.pause(&id);

    let mut options = ReapOptions::new(60_000, "e2b-paused");
    options.fence_quiet_ms = 25;
    let before = fake.counts();
    let report = reap_detached_runs(&deps(&fake, &store, &dir), &options)
        .await
        .unwrap();
    let cost = fake.counts().since(before);
    println!("e2b: a sweep of one finished run in a paused sandbox costs {cost}");

    let entry = &report.runs[0];
    assert_eq!(entry.outcome, ReapOutcome::Finalized, "{entry:?}");
    assert_eq!(entry.status, Some(RunStatus::Completed));
    assert_eq!(entry.sandbox, Some(SandboxFate::Destroyed));
    assert!(entry.started_for_read);
    assert_eq!(report.starts.started, 1);
    let transcript = store
        .get_transcript("e2b-paused-done")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transcript.messages[0].content, "123");
    assert_eq!(
        (cost.connect_sandbox, cost.pause_sandbox, cost.kill_sandbox),
        (1, 0, 1),
        "{cost}"
    );
    assert!(fake.local.open(&id).await.unwrap().is_none(), "killed");
}

#[tokio::test]
async fn a_working_run_inside_its_ttl_in_a_paused_sandbox_is_resumed_only_when_asked_and_paused_again(
) {
    let fake = E2bFake::start().await;
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let id = fake.create_sandbox().await;
    let run = "e2b-paused-working";
    // A journal without its exit sentinel: the agent had not finished when the sandbox paused.
    let paths = journal_paths(run, Some(&dir)).unwrap();
    std::fs::write(&paths.journal, "{\"delta\":\"1\"}\n").unwrap();
    detached(&store, &id, run, SystemClock.now_ms() - 1_000).await;
    fake.pause(&id);
    let deps = deps(&fake, &store, &dir);
    let mut options = ReapOptions::new(3_600_000, "e2b-paused-working");
    options.fence_quiet_ms = 25;

    let before = fake.counts();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = fake.counts().since(before);
    assert_eq!(report.runs[0].outcome, ReapOutcome::Unknown);
    assert_eq!(
        (cost.connect_sandbox, cost.total()),
        (0, 1),
        "only the probe's read: {cost}"
    );

    options.start_stopped_inside_ttl = true;
    let before = fake.counts();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = fake.counts().since(before);
    println!("e2b: a run still working in a paused sandbox, resumed to read, costs {cost}");
    assert_eq!(report.runs[0].outcome, ReapOutcome::Producing, "{report:?}");
    assert_eq!((report.starts.started, report.starts.restored), (1, 1));
    assert_eq!(
        (cost.connect_sandbox, cost.pause_sandbox, cost.kill_sandbox),
        (1, 1, 0)
    );
    assert_eq!(
        fake.provider.state(&id).await.unwrap(),
        Some(SandboxState::Stopped),
        "paused again"
    );
    let record = RunStore::get(store.as_ref(), run).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.driver_epoch),
        (RunStatus::Running, None)
    );
    fake.provider.destroy(&id).await.unwrap();
}
