//! A whole sweep (`reap_detached_runs`) through the Vercel provider against the fake API: the
//! finished run is probed, replayed page by page through `exec`, finalized and its sandbox
//! stopped; the live run is left untouched. Every exchange is checked against the document.

mod common;

use std::sync::Arc;

use common::FakeVercel;
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    Clock, MessageStore, RunRecord, RunStatus, RunStore, SandboxInstanceRecord,
    SandboxInstanceStore, SandboxProvider,
};
use reaper_local::{CreateOptions, SystemClock, TokioSleeper};
use reaper_vercel_sandbox::{DEFAULT_OUTPUT_LIMIT, PROVIDER_NAME};

async fn detached(store: &MemoryStore, run_id: &str, sandbox: &str) {
    let now = SystemClock.now_ms();
    let mut record = RunRecord::new(run_id, "thread", now - 1_000);
    record.status = RunStatus::Running;
    record.detached_since = Some(now);
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
            updated_at: now,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn a_sweep_finalizes_a_finished_run_stops_its_sandbox_and_leaves_a_live_one_alone() {
    let fake = FakeVercel::start().await;
    // The replay reads pages of the journal base64-encoded: the default bound holds them.
    let vercel = fake.provider_with(|c| c.output_limit = DEFAULT_OUTPUT_LIMIT);
    let provider: Arc<dyn SandboxProvider> = Arc::new(vercel.clone());
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let journal_dir = journals.path().to_str().unwrap().to_string();
    let in_journals = || CreateOptions {
        journal_dir: Some(journal_dir.clone()),
        ..CreateOptions::default()
    };

    let finished = fake.create_sandbox_with(in_journals(), true).await;
    let working = fake.create_sandbox_with(in_journals(), true).await;
    // 3,000 deltas: about 45 KB of journal, several replay pages.
    let mut agent = fake
        .local
        .open(&finished)
        .await
        .unwrap()
        .unwrap()
        .start_agent(
            "vc-sweep-done",
            "i=0; while [ $i -lt 3000 ]; do echo '{\"delta\":\"x\"}'; i=$((i+1)); done",
            None,
        )
        .await
        .unwrap();
    agent.wait().await.unwrap();
    fake.local
        .open(&working)
        .await
        .unwrap()
        .unwrap()
        .start_agent("vc-sweep-live", "echo '{\"delta\":\"1\"}'; sleep 600", None)
        .await
        .unwrap();
    detached(&store, "vc-sweep-done", &finished).await;
    detached(&store, "vc-sweep-live", &working).await;

    let drive = JournalReplayDrive::new(
        ReplayDeps {
            runs: store.clone(),
            instances: store.clone(),
            provider: provider.clone(),
            logs: store.clone(),
            messages: store.clone(),
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
        },
        ReplayOptions {
            journal_dir: Some(journal_dir.clone()),
            page_bytes: 16 * 1024,
            ..ReplayOptions::default()
        },
    );
    let deps = ReapDeps {
        runs: store.clone(),
        logs: store.clone(),
        leases: store.clone(),
        ledger: store.clone(),
        probe: Arc::new(JournalExitProbe::new(
            provider.clone(),
            store.clone(),
            ProbeOptions {
                dir: Some(journal_dir.clone()),
                ..ProbeOptions::default()
            },
        )),
        drive: Arc::new(drive),
        reclaim: Some(Arc::new(SandboxReclaimer {
            provider: provider.clone(),
            instances: store.clone(),
            runs: store.clone(),
        })),
        clock: Arc::new(SystemClock),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(3_600_000, "vercel-sweep");
    options.fence_quiet_ms = 25;
    fake.api.clear_requests();

    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let operations = fake.operations();
    eprintln!(
        "vercel-sandbox: a sweep of one finished (45 KB journal, 16 KiB pages) and one live run \
         cost {} requests: {operations:?}",
        operations.len()
    );
    let entry = |run: &str| report.runs.iter().find(|e| e.run_id == run).unwrap();
    assert_eq!(entry("vc-sweep-done").outcome, ReapOutcome::Finalized);
    assert_eq!(entry("vc-sweep-done").status, Some(RunStatus::Completed));
    assert_eq!(entry("vc-sweep-done").sandbox, Some(SandboxFate::Destroyed));
    assert_eq!(entry("vc-sweep-live").outcome, ReapOutcome::Producing);
    let transcript = store
        .get_transcript("vc-sweep-done")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transcript.messages[0].content, "x".repeat(3000));
    let untouched = RunStore::get(store.as_ref(), "vc-sweep-live")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (untouched.status, untouched.driver_epoch),
        (RunStatus::Running, None),
        "a producing run is not even claimed"
    );
    assert_eq!(fake.status(&finished), None, "deleted");
    assert_eq!(fake.status(&working), Some("running"));
    assert_eq!(
        operations.iter().filter(|o| *o == "deleteSandbox").count(),
        1,
        "only the finished run's sandbox is deleted"
    );
    provider.destroy(&working).await.unwrap();
    fake.api.assert_no_violations();
}
