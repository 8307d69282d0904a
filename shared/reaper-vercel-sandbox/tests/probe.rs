//! The core's journal exit probe and reclaim through the Vercel provider, end to end against the
//! fake API (real agents writing real journals in local sandboxes), and what each costs in
//! requests to Vercel.

mod common;

use std::sync::Arc;

use common::FakeVercel;
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::{
    Clock, ExitProbe, Reclaim, ReclaimIntent, Reclaimed, RunExitProbe, RunRecord, RunStatus,
    SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider,
};
use reaper_local::{LocalSandbox, SystemClock};
use reaper_vercel_sandbox::PROVIDER_NAME;

/// A detached `running` run whose instance record names Vercel sandbox `sandbox`.
async fn detached(store: &MemoryStore, run_id: &str, sandbox: &str) -> RunRecord {
    let now = SystemClock.now_ms();
    let mut record = RunRecord::new(run_id, "thread", now - 1_000);
    record.status = RunStatus::Running;
    record.detached_since = Some(now);
    record.sandbox_key = Some(format!("key-{run_id}"));
    store.put_run(record.clone());
    store
        .upsert(SandboxInstanceRecord {
            key: format!("key-{run_id}"),
            provider: PROVIDER_NAME.into(),
            provider_sandbox_id: sandbox.into(),
            latest_snapshot_id: None,
            thread_id: "thread".into(),
            latest_run_id: Some(run_id.into()),
            updated_at: now,
        })
        .await
        .unwrap();
    record
}

async fn local(fake: &FakeVercel, id: &str) -> LocalSandbox {
    fake.local
        .open(id)
        .await
        .unwrap()
        .expect("the local sandbox")
}

fn probe(
    provider: Arc<dyn SandboxProvider>,
    store: Arc<MemoryStore>,
    journal_dir: &str,
) -> JournalExitProbe {
    JournalExitProbe::new(
        provider,
        store,
        ProbeOptions {
            dir: Some(journal_dir.to_string()),
            ..ProbeOptions::default()
        },
    )
}

#[tokio::test]
async fn the_journal_exit_probe_reads_finished_producing_and_gone_through_vercel() {
    let fake = FakeVercel::start().await;
    let provider: Arc<dyn SandboxProvider> = Arc::new(fake.provider());
    let store = Arc::new(MemoryStore::new());

    let id = fake.create_sandbox().await;
    let sandbox = local(&fake, &id).await;
    let mut agent = sandbox
        .start_agent("vc-done", "echo '{\"delta\":\"hi\"}'; exit 3", None)
        .await
        .unwrap();
    agent.wait().await.unwrap();
    sandbox
        .start_agent("vc-live", "echo '{\"delta\":\"1\"}'; sleep 600", None)
        .await
        .unwrap();
    let done = detached(&store, "vc-done", &id).await;
    let live = detached(&store, "vc-live", &id).await;
    let probe = probe(provider.clone(), store.clone(), sandbox.journal_dir());

    assert_eq!(
        probe.has_finished(&done).await.unwrap(),
        RunExitProbe::Finished { exit_code: 3 }
    );
    assert_eq!(
        probe.has_finished(&live).await.unwrap(),
        RunExitProbe::Producing
    );

    provider.destroy(&id).await.unwrap();
    assert!(
        matches!(
            probe.has_finished(&done).await.unwrap(),
            RunExitProbe::Unreachable(reaper_core::reason::Unreachable::SandboxGone { .. })
        ),
        "a deleted sandbox is gone: unknown, saying so"
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn vercel_requests_per_resume_exec_probe_and_reclaim() {
    let fake = FakeVercel::start().await;
    let provider: Arc<dyn SandboxProvider> = Arc::new(fake.provider());
    let store = Arc::new(MemoryStore::new());
    let id = fake.create_sandbox().await;
    let sandbox = local(&fake, &id).await;
    let mut agent = sandbox
        .start_agent("vc-cost", "echo '{\"delta\":\"1\"}'", None)
        .await
        .unwrap();
    agent.wait().await.unwrap();
    let mut record = detached(&store, "vc-cost", &id).await;

    fake.api.clear_requests();
    let handle = provider.resume(&id).await.unwrap().unwrap();
    let resume = fake.operations();

    fake.api.clear_requests();
    handle
        .exec("true", reaper_core::ExecOptions::default())
        .await
        .unwrap();
    let exec = fake.operations();

    fake.api.clear_requests();
    let answer = probe(provider.clone(), store.clone(), sandbox.journal_dir())
        .has_finished(&record)
        .await
        .unwrap();
    assert_eq!(answer, RunExitProbe::Finished { exit_code: 0 });
    let probed = fake.operations();

    // The run became terminal: its sandbox may go.
    record.status = RunStatus::Completed;
    store.put_run(record.clone());
    fake.api.clear_requests();
    let reclaimer = SandboxReclaimer {
        provider: provider.clone(),
        instances: store.clone(),
        runs: store.clone(),
    };
    let reclaimed = reclaimer
        .reclaim(&record, &ReclaimIntent::new(&record, SystemClock.now_ms()))
        .await
        .unwrap();
    assert_eq!(reclaimed, Reclaimed::Destroyed);
    let reclaim = fake.operations();

    fake.api.clear_requests();
    provider.destroy(&id).await.unwrap();
    let destroy_gone = fake.operations();

    eprintln!(
        "vercel: resume costs {} request(s): {resume:?}",
        resume.len()
    );
    eprintln!("vercel: exec costs {} request(s): {exec:?}", exec.len());
    eprintln!(
        "vercel: probe (JournalExitProbe, finished run) costs {} request(s): {probed:?}",
        probed.len()
    );
    eprintln!(
        "vercel: reclaim (SandboxReclaimer, live sandbox) costs {} request(s): {reclaim:?}",
        reclaim.len()
    );
    eprintln!(
        "vercel: destroy of a deleted sandbox costs {} request(s): {destroy_gone:?}",
        destroy_gone.len()
    );
    assert_eq!(resume, ["getNamedSandbox"]);
    assert_eq!(
        exec,
        [
            "runSessionCommand",
            "getSessionCommandLogs",
            "getSessionCommand"
        ]
    );
    assert_eq!(
        probed,
        [
            "getNamedSandbox",
            "runSessionCommand",
            "getSessionCommandLogs",
            "getSessionCommand"
        ]
    );
    assert_eq!(reclaim, ["deleteSandbox"]);
    assert_eq!(destroy_gone, ["deleteSandbox"]);
    fake.api.assert_no_violations();
}
