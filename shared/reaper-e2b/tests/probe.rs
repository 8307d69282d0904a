//! The core's journal exit probe and reclaim through the E2B provider, against the
//! OpenAPI-checked fake backed by real local sandboxes: a finished journal is read as finished,
//! a journal still being written as producing, a killed sandbox as unknown, and a terminal run's
//! sandbox is killed. Also the E2B requests each costs (printed for the closing note).

mod common;

use std::sync::Arc;

use common::{Counts, E2bFake};
use reaper_core::journal::{journal_paths, journaled_command, shell_quote};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::{
    Clock, ExecOptions, ExitProbe, MessageStore, Reclaim, ReclaimIntent, Reclaimed, RunExitProbe,
    RunRecord, RunStatus, RunStore, SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore,
    SandboxProvider,
};
use reaper_e2b::{E2bProvider, PROVIDER_NAME};
use reaper_local::{SystemClock, TokioSleeper};

const NOW: i64 = 1_800_000_000_000;

/// A run detached a second ago, whose instance record names E2B sandbox `sandbox`.
async fn detached(store: &MemoryStore, sandbox: &str, run_id: &str) -> RunRecord {
    detached_at(store, sandbox, run_id, NOW).await
}

async fn detached_at(store: &MemoryStore, sandbox: &str, run_id: &str, now: i64) -> RunRecord {
    let mut record = RunRecord::new(run_id, "thread", now - 2_000);
    record.detached_since = Some(now - 1_000);
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
            updated_at: now - 1_000,
        })
        .await
        .unwrap();
    record
}

/// The sandbox's journal directory (the backing local sandbox's, so tests never share one).
async fn journal_dir(fake: &E2bFake, id: &str) -> String {
    fake.local
        .open(id)
        .await
        .unwrap()
        .unwrap()
        .journal_dir()
        .to_string()
}

/// Runs `command` as agent `run_id` under the journaled wrapper, through the provider, to its
/// end: the journal gets its output and then the nonced sentinel.
async fn run_agent(handle: &dyn SandboxHandle, dir: &str, run_id: &str, command: &str) {
    let paths = journal_paths(run_id, Some(dir)).unwrap();
    let out = handle
        .exec(&journaled_command(command, &paths), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "the journaled wrapper failed: {out:?}");
}

async fn probe_of(probe: &JournalExitProbe, store: &MemoryStore, run_id: &str) -> RunExitProbe {
    let record = RunStore::get(store, run_id).await.unwrap().unwrap();
    probe.has_finished(&record).await.unwrap()
}

#[tokio::test]
async fn the_journal_exit_probe_reads_finished_producing_and_gone_through_e2b() {
    let fake = E2bFake::start().await;
    let provider = Arc::new(fake.provider.clone());
    let store = Arc::new(MemoryStore::new());
    let a = fake.create_sandbox().await;
    let b = fake.create_sandbox().await;
    let (dir_a, dir_b) = (journal_dir(&fake, &a).await, journal_dir(&fake, &b).await);
    let handle = provider.resume(&a).await.unwrap().unwrap();
    run_agent(
        &*handle,
        &dir_a,
        "e2b-done",
        "echo '{\"delta\":\"hi\"}'; exit 3",
    )
    .await;
    // Output but no sentinel yet: an agent still at work.
    let live = journal_paths("e2b-live", Some(&dir_a)).unwrap();
    handle
        .exec(
            &format!(
                "printf '%s\\n' '{{\"delta\":\"1\"}}' >> {}",
                shell_quote(&live.journal)
            ),
            ExecOptions::default(),
        )
        .await
        .unwrap();
    let handle_b = provider.resume(&b).await.unwrap().unwrap();
    run_agent(&*handle_b, &dir_b, "e2b-gone", "echo hi").await;
    detached(&store, &a, "e2b-done").await;
    detached(&store, &a, "e2b-live").await;
    detached(&store, &b, "e2b-gone").await;
    provider.destroy(&b).await.unwrap();

    let options = |dir: &str| ProbeOptions {
        dir: Some(dir.to_string()),
        ..ProbeOptions::default()
    };
    let probe_a = JournalExitProbe::new(provider.clone(), store.clone(), options(&dir_a));
    let probe_b = JournalExitProbe::new(provider.clone(), store.clone(), options(&dir_b));
    assert_eq!(
        probe_of(&probe_a, &store, "e2b-done").await,
        RunExitProbe::Finished { exit_code: 3 }
    );
    assert_eq!(
        probe_of(&probe_a, &store, "e2b-live").await,
        RunExitProbe::Producing
    );
    assert_eq!(
        probe_of(&probe_b, &store, "e2b-gone").await.state(),
        "unknown"
    );
    provider.destroy(&a).await.unwrap();
}

#[tokio::test]
async fn a_paused_sandbox_is_probed_as_unknown_without_resuming_it() {
    let fake = E2bFake::start().await;
    let provider = Arc::new(fake.provider.clone());
    let store = Arc::new(MemoryStore::new());
    let id = fake.create_sandbox().await;
    let dir = journal_dir(&fake, &id).await;
    let handle = provider.resume(&id).await.unwrap().unwrap();
    run_agent(&*handle, &dir, "e2b-paused", "echo hi").await;
    detached(&store, &id, "e2b-paused").await;
    fake.pause(&id);
    let before = fake.counts();
    let probe = JournalExitProbe::new(
        provider.clone(),
        store.clone(),
        ProbeOptions {
            dir: Some(dir),
            ..ProbeOptions::default()
        },
    );
    assert_eq!(
        probe_of(&probe, &store, "e2b-paused").await.state(),
        "unknown"
    );
    assert_eq!(
        fake.counts().since(before),
        Counts {
            get_sandbox: 1,
            ..Counts::default()
        },
        "a paused sandbox costs one read and is never resumed"
    );
    provider.destroy(&id).await.unwrap();
}

/// The closing note's figures: E2B requests per probe and per reclaim, read from the fake's
/// request log.
#[tokio::test]
async fn requests_per_probe_and_per_reclaim() {
    let fake = E2bFake::start().await;
    let provider: Arc<E2bProvider> = Arc::new(fake.provider.clone());
    let store = Arc::new(MemoryStore::new());
    let id = fake.create_sandbox().await;
    let dir = journal_dir(&fake, &id).await;

    let before = fake.counts();
    let handle = provider.resume(&id).await.unwrap().unwrap();
    let resume = fake.counts().since(before);

    let before = fake.counts();
    handle.exec("true", ExecOptions::default()).await.unwrap();
    let exec = fake.counts().since(before);

    run_agent(&*handle, &dir, "e2b-count", "echo '{\"delta\":\"1\"}'").await;
    let mut record = detached(&store, &id, "e2b-count").await;
    let probe = JournalExitProbe::new(
        provider.clone(),
        store.clone(),
        ProbeOptions {
            dir: Some(dir),
            ..ProbeOptions::default()
        },
    );
    let before = fake.counts();
    assert_eq!(
        probe_of(&probe, &store, "e2b-count").await,
        RunExitProbe::Finished { exit_code: 0 }
    );
    let probed = fake.counts().since(before);

    record.status = RunStatus::Completed;
    store.put_run(record.clone());
    let reclaimer = SandboxReclaimer {
        provider: provider.clone(),
        instances: store.clone(),
        runs: store.clone(),
    };
    let before = fake.counts();
    let reclaimed = reclaimer
        .reclaim(&record, &ReclaimIntent::new(&record, NOW))
        .await
        .unwrap();
    assert_eq!(reclaimed, Reclaimed::Destroyed);
    let reclaim = fake.counts().since(before);
    assert!(fake.local.open(&id).await.unwrap().is_none());

    let before = fake.counts();
    provider.destroy(&id).await.unwrap();
    let destroy_gone = fake.counts().since(before);

    println!("e2b: resume costs {resume}");
    println!("e2b: exec costs {exec}");
    println!("e2b: probe (JournalExitProbe, finished run) costs {probed}");
    println!("e2b: reclaim (SandboxReclaimer, running sandbox) costs {reclaim}");
    println!("e2b: destroy of a sandbox already gone costs {destroy_gone}");
    let one = |get_sandbox, kill_sandbox, process_start| Counts {
        get_sandbox,
        kill_sandbox,
        process_start,
        ..Counts::default()
    };
    assert_eq!(resume, one(1, 0, 0));
    assert_eq!(exec, one(0, 0, 1));
    assert_eq!(probed, one(1, 0, 1));
    assert_eq!(reclaim, one(0, 1, 0));
    assert_eq!(destroy_gone, one(0, 1, 0));
}

/// Starts `command` as agent `run_id` under the journaled wrapper, detached (the exec returns at
/// once), and waits until its journal has a complete line.
async fn start_agent(handle: &dyn SandboxHandle, dir: &str, run_id: &str, command: &str) {
    let paths = journal_paths(run_id, Some(dir)).unwrap();
    // Detached from the exec's stdout and stderr, so the exec does not wait for the agent.
    let detached = format!(
        "( {} ) </dev/null >/dev/null 2>&1 &",
        journaled_command(command, &paths)
    );
    handle
        .exec(&detached, ExecOptions::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = handle
            .exec(
                &format!("cat {} 2>/dev/null", shell_quote(&paths.journal)),
                ExecOptions::default(),
            )
            .await
            .unwrap();
        if out.stdout.ends_with('\n') {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "agent {run_id} never wrote a line"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_sweep_finalizes_a_finished_run_kills_its_sandbox_and_leaves_a_live_one_alone() {
    let fake = E2bFake::start().await;
    let provider = Arc::new(fake.provider.clone());
    let store = Arc::new(MemoryStore::new());
    // One journal directory for both sandboxes: the sweep's probe and replay name one.
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let finished = fake.create_sandbox().await;
    let working = fake.create_sandbox().await;
    let handle = provider.resume(&finished).await.unwrap().unwrap();
    run_agent(
        &*handle,
        &dir,
        "e2b-sweep-done",
        "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
    )
    .await;
    let live = provider.resume(&working).await.unwrap().unwrap();
    start_agent(
        &*live,
        &dir,
        "e2b-sweep-live",
        // The pid first, then the line start_agent waits for.
        "exec sh -c 'echo $$ > live.pid; echo {}; exec sleep 600'",
    )
    .await;
    let now = SystemClock.now_ms();
    detached_at(&store, &finished, "e2b-sweep-done", now).await;
    detached_at(&store, &working, "e2b-sweep-live", now).await;

    let dyn_provider: Arc<dyn SandboxProvider> = provider.clone();
    let deps = ReapDeps::journaled(
        store.clone(),
        dyn_provider,
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        Some(dir.clone()),
    );
    let mut options = ReapOptions::new(3_600_000, "e2b-sweep");
    options.fence_quiet_ms = 25;
    let before = fake.counts();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = fake.counts().since(before);
    println!("e2b: a sweep of one finished and one live run costs {cost}");
    assert_eq!(report.considered, 2);
    let entry = |run: &str| report.runs.iter().find(|e| e.run_id == run).unwrap();
    assert_eq!(entry("e2b-sweep-done").outcome, ReapOutcome::Finalized);
    assert_eq!(entry("e2b-sweep-done").status, Some(RunStatus::Completed));
    assert_eq!(
        entry("e2b-sweep-done").sandbox,
        Some(SandboxFate::Destroyed)
    );
    assert_eq!(entry("e2b-sweep-live").outcome, ReapOutcome::Producing);
    let transcript = store
        .get_transcript("e2b-sweep-done")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transcript.messages[0].content, "123");
    assert!(provider.resume(&finished).await.unwrap().is_none());
    assert!(fake.local.open(&finished).await.unwrap().is_none());
    let still = live
        .exec(
            "kill -0 \"$(cat live.pid)\" && echo alive",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        still.stdout, "alive\n",
        "the live agent is no longer running"
    );
    assert_eq!(cost.kill_sandbox, 1, "{cost}");
    provider.destroy(&working).await.unwrap();
}
