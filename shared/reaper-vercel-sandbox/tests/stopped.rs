//! Stopped persistent sandboxes of finished runs (issue 22, item 4). Under v2 persistence a
//! stopped sandbox is not gone: its filesystem (the journal with it) is kept in a snapshot, and
//! its journal is unreadable until it resumes. The sweep resumes one the way `@vercel/sandbox`
//! does (`GET /v2/sandboxes/{name}?resume=true`, which starts a new session from the snapshot),
//! reads a finished run's journal, finalizes the run with its whole output and deletes the
//! sandbox, or stops the new session again when the run is not settled. Resumes are capped per
//! sweep like every provider's starts. Through the OpenAPI-checked fake, with real local
//! sandboxes behind it.

mod common;

use std::sync::Arc;

use common::FakeVercel;
use reaper_core::memory::MemoryStore;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::reason::ReasonCode;
use reaper_core::{
    Clock, MessageStore, RunRecord, RunStatus, RunStore, SandboxError, SandboxInstanceRecord,
    SandboxInstanceStore, SandboxProvider, SandboxState,
};
use reaper_local::{CreateOptions, SystemClock, TokioSleeper};
use reaper_vercel_sandbox::{VercelSandboxProvider, DEFAULT_OUTPUT_LIMIT, PROVIDER_NAME};

/// A detached `running` run, detached `ago_ms` before now, whose instance record names Vercel
/// sandbox `sandbox`.
async fn detached(store: &MemoryStore, run_id: &str, sandbox: &str, ago_ms: i64) {
    let now = SystemClock.now_ms();
    let mut record = RunRecord::new(run_id, "thread", now - ago_ms - 1_000);
    record.status = RunStatus::Running;
    record.detached_since = Some(now - ago_ms);
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
            updated_at: now - ago_ms,
        })
        .await
        .unwrap();
}

/// A persistent sandbox writing its journals under `dir`, in which agent `run_id` ran `script`
/// to the end.
async fn finished_agent(fake: &FakeVercel, dir: &str, run_id: &str, script: &str) -> String {
    let name = fake
        .create_sandbox_with(
            CreateOptions {
                journal_dir: Some(dir.to_string()),
                ..CreateOptions::default()
            },
            true,
        )
        .await;
    let sandbox = fake.local.open(&name).await.unwrap().unwrap();
    let mut agent = sandbox.start_agent(run_id, script, None).await.unwrap();
    agent.wait().await.unwrap();
    name
}

fn deps(provider: &VercelSandboxProvider, store: &Arc<MemoryStore>, dir: &str) -> ReapDeps {
    ReapDeps::journaled(
        store.clone(),
        Arc::new(provider.clone()) as Arc<dyn SandboxProvider>,
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        Some(dir.to_string()),
    )
}

fn count(operations: &[String], name: &str) -> usize {
    operations.iter().filter(|o| *o == name).count()
}

/// Detached an hour ago: past the sweeps' one-minute TTL.
const HOUR_AGO: i64 = 3_600_000;

#[tokio::test]
async fn state_resume_and_restore_are_the_documented_named_read_and_one_session_stop() {
    let fake = FakeVercel::start().await;
    let p = fake.provider();
    let name = fake.create_sandbox().await;
    fake.auto_stop(&name).await;
    let stopped_session = fake.session_of(&name);
    fake.api.clear_requests();

    assert_eq!(p.state(&name).await.unwrap(), Some(SandboxState::Stopped));
    assert_eq!(fake.resumes(), 0, "reading the state resumed it");
    p.start_for_read(&name).await.unwrap();
    assert_eq!(fake.resumes(), 1);
    assert_ne!(fake.session_of(&name), stopped_session, "a new session");
    assert_eq!(
        p.state(&name).await.unwrap(),
        Some(SandboxState::Changing),
        "the resumed session is pending"
    );
    assert_eq!(p.state(&name).await.unwrap(), Some(SandboxState::Running));
    p.restore(&name).await.unwrap();
    assert_eq!(p.state(&name).await.unwrap(), Some(SandboxState::Stopped));
    let operations = fake.operations();
    assert_eq!(
        (
            count(&operations, "getNamedSandbox"),
            count(&operations, "stopSession"),
            operations.len()
        ),
        (6, 1, 7),
        "{operations:?}"
    );
    let resumes: Vec<_> = fake
        .api
        .requests()
        .into_iter()
        .filter_map(|r| r.query_param("resume"))
        .collect();
    assert_eq!(resumes, ["true"], "only start_for_read asks for a resume");

    // Gone, not persistent, and 1.x session ids: nothing to resume.
    let plain = fake
        .create_sandbox_with(CreateOptions::default(), false)
        .await;
    fake.auto_stop(&plain).await;
    assert_eq!(p.state(&plain).await.unwrap(), Some(SandboxState::Gone));
    assert_eq!(
        p.state("missing-sandbox-0000").await.unwrap(),
        Some(SandboxState::Gone)
    );
    assert_eq!(p.state(&stopped_session).await.unwrap(), None);
    assert!(matches!(
        p.start_for_read("missing-sandbox-0000").await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        p.start_for_read(&stopped_session).await,
        Err(SandboxError::Refused(_))
    ));
    // Restoring a sandbox that is stopped already stops nothing.
    fake.api.clear_requests();
    p.restore(&name).await.unwrap();
    assert_eq!(fake.operations(), ["getNamedSandbox"]);
    p.destroy(&name).await.unwrap();
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_finished_run_whose_persistent_sandbox_stopped_is_resumed_finalized_with_its_whole_output_and_deleted(
) {
    let fake = FakeVercel::start().await;
    // The replay reads pages of the journal base64-encoded: the default bound holds them.
    let provider = fake.provider_with(|c| c.output_limit = DEFAULT_OUTPUT_LIMIT);
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    // 3,000 deltas: about 45 KB of journal.
    let name = finished_agent(
        &fake,
        &dir,
        "vc-stopped-done",
        "i=0; while [ $i -lt 3000 ]; do echo '{\"delta\":\"x\"}'; i=$((i+1)); done",
    )
    .await;
    detached(&store, "vc-stopped-done", &name, HOUR_AGO).await;
    fake.auto_stop(&name).await;
    assert_eq!(fake.status(&name), Some("stopped"));

    let mut options = ReapOptions::new(60_000, "vercel-stopped");
    options.fence_quiet_ms = 25;
    fake.api.clear_requests();
    let report = reap_detached_runs(&deps(&provider, &store, &dir), &options)
        .await
        .unwrap();
    let operations = fake.operations();
    eprintln!(
        "vercel: a sweep of one finished run (45 KB journal) in a stopped persistent sandbox \
         cost {} requests: {operations:?}",
        operations.len()
    );

    let entry = &report.runs[0];
    assert_eq!(entry.outcome, ReapOutcome::Finalized, "{entry:?}");
    assert_eq!(entry.status, Some(RunStatus::Completed));
    assert_eq!(entry.sandbox, Some(SandboxFate::Destroyed));
    assert!(entry.started_for_read);
    assert_eq!(
        (report.starts.started, report.starts.restored),
        (1, 0),
        "deleted with its run, not stopped again"
    );
    let transcript = store
        .get_transcript("vc-stopped-done")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transcript.messages[0].content, "x".repeat(3000), "whole");
    assert_eq!(fake.resumes(), 1);
    assert_eq!(
        (
            count(&operations, "deleteSandbox"),
            count(&operations, "stopSession")
        ),
        (1, 0)
    );
    assert_eq!(fake.status(&name), None, "deleted");
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_working_run_inside_its_ttl_in_a_stopped_sandbox_is_resumed_only_when_asked_and_stopped_again(
) {
    let fake = FakeVercel::start().await;
    let provider = fake.provider_with(|c| c.output_limit = DEFAULT_OUTPUT_LIMIT);
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let run = "vc-stopped-working";
    // An agent that had not finished when the sandbox stopped: no exit sentinel.
    let name = fake
        .create_sandbox_with(
            CreateOptions {
                journal_dir: Some(dir.clone()),
                ..CreateOptions::default()
            },
            true,
        )
        .await;
    let paths = reaper_core::journal::journal_paths(run, Some(&dir)).unwrap();
    std::fs::write(&paths.journal, "{\"delta\":\"1\"}\n").unwrap();
    detached(&store, run, &name, 1_000).await;
    fake.auto_stop(&name).await;
    let deps = deps(&provider, &store, &dir);
    let mut options = ReapOptions::new(3_600_000, "vercel-stopped-working");
    options.fence_quiet_ms = 25;

    fake.api.clear_requests();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    assert_eq!(report.runs[0].outcome, ReapOutcome::Unknown);
    assert_eq!(
        fake.operations(),
        ["getNamedSandbox"],
        "only the probe's read, no resume"
    );
    assert_eq!(fake.resumes(), 0);

    options.start_stopped_inside_ttl = true;
    fake.api.clear_requests();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let operations = fake.operations();
    eprintln!(
        "vercel: a run still working in a stopped sandbox, resumed to read, cost {} requests: \
         {operations:?}",
        operations.len()
    );
    assert_eq!(report.runs[0].outcome, ReapOutcome::Producing, "{report:?}");
    assert_eq!((report.starts.started, report.starts.restored), (1, 1));
    assert_eq!(fake.resumes(), 1);
    assert_eq!(
        (
            count(&operations, "stopSession"),
            count(&operations, "deleteSandbox")
        ),
        (1, 0)
    );
    assert_eq!(fake.status(&name), Some("stopped"), "stopped again");
    let record = RunStore::get(store.as_ref(), run).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.driver_epoch),
        (RunStatus::Running, None)
    );
    provider.destroy(&name).await.unwrap();
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn stopped_sandboxes_past_the_sweeps_resume_cap_wait_stopped_for_a_later_sweep() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider_with(|c| c.output_limit = DEFAULT_OUTPUT_LIMIT);
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let mut names = Vec::new();
    for run in ["vc-capped-a", "vc-capped-b"] {
        let script = format!("echo '{{\"delta\":\"{run}\"}}'");
        let name = finished_agent(&fake, &dir, run, &script).await;
        detached(&store, run, &name, HOUR_AGO).await;
        fake.auto_stop(&name).await;
        names.push(name);
    }
    let deps = deps(&provider, &store, &dir);
    let mut options = ReapOptions::new(60_000, "vercel-capped");
    options.fence_quiet_ms = 25;
    options.max_starts_per_sweep = 1;

    let report = reap_detached_runs(&deps, &options).await.unwrap();
    assert_eq!((report.starts.started, report.starts.capped), (1, 1));
    assert_eq!(fake.resumes(), 1, "one resume in this sweep");
    let finalized: Vec<_> = report
        .runs
        .iter()
        .filter(|e| e.outcome == ReapOutcome::Finalized)
        .collect();
    let waiting: Vec<_> = report
        .runs
        .iter()
        .filter(|e| e.outcome == ReapOutcome::Unknown)
        .collect();
    assert_eq!((finalized.len(), waiting.len()), (1, 1), "{report:?}");
    assert_eq!(waiting[0].reason.code, ReasonCode::UnknownSandboxStopped);
    let left = if finalized[0].run_id == "vc-capped-a" {
        ("vc-capped-b", &names[1])
    } else {
        ("vc-capped-a", &names[0])
    };
    assert_eq!(
        fake.status(left.1),
        Some("stopped"),
        "left stopped, not resumed"
    );
    let record = RunStore::get(store.as_ref(), left.0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RunStatus::Running, "nothing lost: it waits");

    let report = reap_detached_runs(&deps, &options).await.unwrap();
    assert_eq!(report.runs.len(), 1);
    assert_eq!(report.runs[0].outcome, ReapOutcome::Finalized);
    let transcript = store.get_transcript(left.0).await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, left.0);
    assert_eq!(fake.resumes(), 2);
    assert!(names.iter().all(|n| fake.status(n).is_none()), "deleted");
    fake.api.assert_no_violations();
}
