//! Spec H14 (the reference's real-sandbox reaper conformance) against `LocalSandboxProvider`:
//! real agents under the journaled wrapper, real `sh`, real files. Each case has its own
//! sandbox root and unique run ids. The provider declares no `mtimeListUnsupported` (GNU `stat`
//! has `-c`) and declares `followUnsupported`: the `SandboxHandle` port's `exec` returns when the
//! command ends, so it cannot stream a `tail -f`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{file_exists, now_ms, provider, run_agent, run_record, sandbox, sh, unique};
use reaper_core::journal::{
    decode_base64_text, decode_journal_run_id, journal_cleanup_command, journal_mtime_list_command,
    journal_paths, parse_mtime_listing, stderr_tail_command, DecodedJournalName, MtimeListing,
};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, JournalExitProbe, ProbeOptions};
use reaper_core::prune::{prune_journals, AgeGate, KeptJournal, KeptReason, PruneOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome};
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    CancellationToken, ChunkStream, DeliveryLog, Drive, DriveError, DriveRequest, ExecOptions,
    MessageStore, RunExitProbe, RunStatus, RunStore, SandboxHandle, SandboxInstanceRecord,
    SandboxInstanceStore, SandboxProvider,
};
use reaper_local::{LocalSandbox, LocalSandboxProvider, SystemClock, TokioSleeper};
use reaper_testkit::fakes::SpyStore;

fn prune_options(sbx: &LocalSandbox) -> PruneOptions {
    PruneOptions {
        dir: Some(sbx.journal_dir().to_string()),
        ..PruneOptions::new(now_ms())
    }
}

fn probe_options(sbx: &LocalSandbox) -> ProbeOptions {
    ProbeOptions {
        dir: Some(sbx.journal_dir().to_string()),
        ..ProbeOptions::default()
    }
}

/// `(journal, sidecar)` names of a run in listing order (`ls` in the C locale sorts `.err` first).
fn names(run_id: &str) -> Vec<String> {
    let encoded = reaper_core::journal::encode_run_id(run_id).unwrap();
    vec![format!("{encoded}.err"), format!("{encoded}.ndjson")]
}

#[tokio::test]
async fn h14_1_prune_deletes_the_terminal_run_and_keeps_the_live_one_as_non_terminal() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let n = unique();
    let (done, live) = (format!("rp-done-{n}"), format!("rp-live-{n}"));
    run_agent(&sbx, &done, "echo '{\"delta\":\"1\"}'; echo warn >&2", None).await;
    run_agent(&sbx, &live, "echo '{\"delta\":\"1\"}'; echo warn >&2", None).await;
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));
    runs.put_run(run_record(&live, RunStatus::Running));

    let report = prune_journals(&sbx, &runs, &prune_options(&sbx)).await;
    assert_eq!(report.deleted, vec![done.clone()]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(
        report.kept,
        vec![KeptJournal {
            run_id: Some(live.clone()),
            names: names(&live),
            reason: KeptReason::NonTerminal,
        }]
    );
    let (d, l) = (
        journal_paths(&done, Some(sbx.journal_dir())).unwrap(),
        journal_paths(&live, Some(sbx.journal_dir())).unwrap(),
    );
    assert!(!file_exists(&sbx, &d.journal).await);
    assert!(!file_exists(&sbx, &d.stderr).await);
    assert!(file_exists(&sbx, &l.journal).await);
    assert!(file_exists(&sbx, &l.stderr).await);
}

#[tokio::test]
async fn h14_2_a_second_prune_finds_nothing_and_cleanup_of_absent_files_exits_zero() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let done = format!("rp-again-{}", unique());
    run_agent(&sbx, &done, "echo hi", None).await;
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));
    let first = prune_journals(&sbx, &runs, &prune_options(&sbx)).await;
    assert_eq!(first.deleted, vec![done.clone()]);

    let second = prune_journals(&sbx, &runs, &prune_options(&sbx)).await;
    assert_eq!(second.listed, 0);
    assert_eq!(second.run_ids, 0);
    assert!(second.deleted.is_empty());
    assert!(second.kept.is_empty());
    assert!(second.failures.is_empty());
    let paths = journal_paths(&done, Some(sbx.journal_dir())).unwrap();
    let cleanup = sbx
        .exec(&journal_cleanup_command(&paths), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(cleanup.exit_code, 0);
}

#[tokio::test]
async fn h14_3_a_stray_undecodable_file_is_kept_and_left_in_place() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let done = format!("rp-stray-{}", unique());
    run_agent(&sbx, &done, "echo hi", None).await;
    let stray = "reaper-conformance-stray_1.ndjson";
    let stray_path = format!("{}/{stray}", sbx.journal_dir());
    std::fs::write(&stray_path, "x\n").unwrap();
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));

    let report = prune_journals(&sbx, &runs, &prune_options(&sbx)).await;
    assert_eq!(report.deleted, vec![done]);
    assert_eq!(
        report.kept,
        vec![KeptJournal {
            run_id: None,
            names: vec![stray.into()],
            reason: KeptReason::UndecodableName,
        }]
    );
    assert!(file_exists(&sbx, &stray_path).await);
}

#[tokio::test]
async fn h14_4_mtime_listing_has_the_witness_and_exactly_the_run_files_with_recent_mtimes() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let run = format!("rp-mtime-{}", unique());
    run_agent(&sbx, &run, "echo hi; echo err >&2", None).await;
    let out = sh(&sbx, &journal_mtime_list_command(Some(sbx.journal_dir()))).await;
    let witness = out.lines().next().unwrap();
    let (secs, dir) = witness.split_once(' ').unwrap();
    assert!(secs.bytes().all(|b| b.is_ascii_digit()) && !secs.is_empty());
    assert_eq!(dir, sbx.journal_dir());
    let MtimeListing::Listed(entries) = parse_mtime_listing(&out, Some(sbx.journal_dir())) else {
        panic!("no witness in {out:?}");
    };
    let mut listed: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    listed.sort();
    assert_eq!(listed, names(&run));
    let now = now_ms();
    for e in &entries {
        assert!((now - e.mtime_ms).abs() <= 120_000, "{e:?} is not recent");
    }
}

#[tokio::test]
async fn h14_5_an_empty_directory_lists_its_witness_and_prunes_nothing() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let out = sh(&sbx, &journal_mtime_list_command(Some(sbx.journal_dir()))).await;
    assert_eq!(
        parse_mtime_listing(&out, Some(sbx.journal_dir())),
        MtimeListing::Listed(Vec::new())
    );
    let report = prune_journals(&sbx, &MemoryStore::new(), &prune_options(&sbx)).await;
    assert_eq!(report.listed, 0);
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert!(report.deleted.is_empty());
    assert!(report.failures.is_empty());
}

#[tokio::test]
async fn h14_6_the_age_gate_deletes_the_older_orphan_and_keeps_the_newer_one() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let n = unique();
    let (old, new) = (format!("rp-old-{n}"), format!("rp-new-{n}"));
    run_agent(&sbx, &old, "echo old", None).await;
    run_agent(&sbx, &new, "echo new", None).await;
    // The reference waits 2.5 s between the two runs; setting the older run's mtimes 10 s back
    // with the real `touch -d` gives the same real gap without a sleep.
    let old_paths = journal_paths(&old, Some(sbx.journal_dir())).unwrap();
    common::age_file(&old_paths.journal, 10);
    common::age_file(&old_paths.stderr, 10);
    let listing = sh(&sbx, &journal_mtime_list_command(Some(sbx.journal_dir()))).await;
    let MtimeListing::Listed(entries) = parse_mtime_listing(&listing, Some(sbx.journal_dir()))
    else {
        panic!("no witness");
    };
    let newest = |run: &str| {
        entries
            .iter()
            .filter(|e| names(run).contains(&e.name))
            .map(|e| e.mtime_ms)
            .max()
            .unwrap()
    };
    let cutoff = (newest(&old) + newest(&new)) / 2;
    let now = now_ms();
    let options = PruneOptions {
        orphan_ttl_ms: (now - cutoff) as u64,
        now,
        ..prune_options(&sbx)
    };

    let report = prune_journals(&sbx, &MemoryStore::new(), &options).await;
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert_eq!(report.deleted, vec![old.clone()]);
    assert_eq!(
        report.kept,
        vec![KeptJournal {
            run_id: Some(new.clone()),
            names: names(&new),
            reason: KeptReason::OrphanTooRecent,
        }]
    );
    assert!(report.failures.is_empty());
    assert!(!file_exists(&sbx, &old_paths.journal).await);
    let new_paths = journal_paths(&new, Some(sbx.journal_dir())).unwrap();
    assert!(file_exists(&sbx, &new_paths.journal).await);
}

/// Counts `drive` calls; otherwise the real replay drive.
struct CountingDrive {
    inner: JournalReplayDrive,
    calls: AtomicUsize,
}

impl Drive for CountingDrive {
    fn drive(
        &self,
        request: DriveRequest,
        signal: CancellationToken,
    ) -> Result<ChunkStream, DriveError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.drive(request, signal)
    }
}

struct Detached {
    spy: Arc<SpyStore>,
    store: Arc<MemoryStore>,
    drive: Arc<CountingDrive>,
    deps: ReapDeps,
    detached_at: i64,
}

/// A detached run recorded against the sandbox, and the sweep's ports: the real probe, the real
/// replay drive, a spying store for runs and the log, no reclaim.
async fn detached_run(
    provider: &LocalSandboxProvider,
    sbx: &LocalSandbox,
    run_id: &str,
) -> Detached {
    let store = Arc::new(MemoryStore::new());
    let detached_at = now_ms();
    let mut record = run_record(run_id, RunStatus::Running);
    record.started_at = detached_at - 1_000;
    record.detached_since = Some(detached_at);
    record.sandbox_key = Some(format!("key-{run_id}"));
    store.put_run(record);
    store
        .upsert(SandboxInstanceRecord {
            key: format!("key-{run_id}"),
            provider: provider.name().into(),
            provider_sandbox_id: sbx.id().into(),
            latest_snapshot_id: None,
            thread_id: "thread".into(),
            latest_run_id: Some(run_id.into()),
            updated_at: detached_at,
        })
        .await
        .unwrap();
    let spy = Arc::new(SpyStore::new((*store).clone()));
    let provider: Arc<dyn SandboxProvider> = Arc::new(provider.clone());
    let drive = Arc::new(CountingDrive {
        inner: JournalReplayDrive::new(
            ReplayDeps {
                runs: spy.clone(),
                instances: store.clone(),
                provider: provider.clone(),
                logs: spy.clone(),
                messages: store.clone(),
                clock: Arc::new(SystemClock),
                sleeper: Arc::new(TokioSleeper),
            },
            ReplayOptions {
                journal_dir: Some(sbx.journal_dir().into()),
                ..ReplayOptions::default()
            },
        ),
        calls: AtomicUsize::new(0),
    });
    let deps = ReapDeps {
        runs: spy.clone(),
        logs: spy.clone(),
        leases: store.clone(),
        ledger: spy.clone(),
        probe: Arc::new(JournalExitProbe::new(
            provider,
            store.clone(),
            probe_options(sbx),
        )),
        drive: drive.clone(),
        reclaim: None,
        clock: Arc::new(SystemClock),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    spy.clear_ops();
    Detached {
        spy,
        store,
        drive,
        deps,
        detached_at,
    }
}

fn reap_options() -> ReapOptions {
    let mut options = ReapOptions::new(3_600_000, format!("conformance-{}", unique()));
    options.fence_quiet_ms = 25;
    options
}

#[tokio::test]
async fn h14_7_a_finished_detached_run_is_finalized_with_its_transcript() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let run_id = format!("rp-final-{}", unique());
    run_agent(
        &sbx,
        &run_id,
        "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
        None,
    )
    .await;
    assert_eq!(
        probe_run_exit(&sbx, &run_id, &probe_options(&sbx)).await,
        RunExitProbe::Finished { exit_code: 0 }
    );
    let case = detached_run(&provider, &sbx, &run_id).await;

    let started = std::time::Instant::now();
    let report = reap_detached_runs(&case.deps, &reap_options())
        .await
        .unwrap();
    assert_eq!(report.considered, 1);
    assert_eq!(report.probed, 1);
    assert_eq!(report.outcomes.finalized, 1);
    assert_eq!(report.outcomes.total(), 1);
    assert_eq!(report.runs.len(), 1);
    let entry = &report.runs[0];
    assert_eq!(entry.run_id, run_id);
    assert_eq!(entry.outcome, ReapOutcome::Finalized);
    assert_eq!(entry.status, Some(RunStatus::Completed));
    assert_eq!(entry.exit_code, Some(0));
    assert!(entry.error.is_none() && entry.terminalized_anyway.is_none());

    let transcript = case.store.get_transcript(&run_id).await.unwrap().unwrap();
    assert_eq!(transcript.messages.len(), 1);
    assert_eq!(transcript.messages[0].content, "123");
    let record = RunStore::get(case.store.as_ref(), &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.detached_since, Some(case.detached_at));
    let log: Vec<(String, String)> = DeliveryLog::read(case.store.as_ref(), &run_id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let kind = e.chunk.kind().unwrap().to_string();
            (
                kind,
                e.chunk.get("delta").unwrap().as_str().unwrap().to_string(),
            )
        })
        .collect();
    let text = |d: &str| ("TEXT_MESSAGE_CONTENT".to_string(), d.to_string());
    assert_eq!(log, vec![text("1"), text("2"), text("3")]);
    // Not ended by a 90 s backstop (the reference's); the replay ends at the sentinel.
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn h14_8_a_live_detached_run_is_producing_and_left_completely_untouched() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let run_id = format!("rp-live-{}", unique());
    let agent = sbx
        .start_agent(&run_id, "echo '{\"delta\":\"1\"}'; sleep 30", None)
        .await
        .unwrap();
    let paths = journal_paths(&run_id, Some(sbx.journal_dir())).unwrap();
    assert!(common::wait_for_lines(std::path::Path::new(&paths.journal), 1).await);
    assert_eq!(
        probe_run_exit(&sbx, &run_id, &probe_options(&sbx)).await,
        RunExitProbe::Producing
    );
    let case = detached_run(&provider, &sbx, &run_id).await;

    let report = reap_detached_runs(&case.deps, &reap_options())
        .await
        .unwrap();
    assert_eq!(report.considered, 1);
    assert_eq!(report.probed, 1);
    assert_eq!(report.outcomes.producing, 1);
    assert_eq!(report.outcomes.finalized, 0);
    assert_eq!(report.outcomes.expired, 0);
    assert_eq!(report.outcomes.failed, 0);
    assert_eq!(report.runs.len(), 1);
    assert_eq!(report.runs[0].outcome, ReapOutcome::Producing);
    assert!(report.runs[0].status.is_none() && report.runs[0].error.is_none());

    assert_eq!(case.drive.calls.load(Ordering::SeqCst), 0);
    assert_eq!(case.spy.appended(&run_id), 0);
    assert_eq!(case.spy.closes(&run_id), 0);
    assert!(case.spy.writes_for(&run_id).is_empty());
    let record = RunStore::get(case.store.as_ref(), &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.detached_since, Some(case.detached_at));
    assert_eq!(record.driver_epoch, None);
    assert!(
        !common::process_dead(agent.pid),
        "the live agent was killed"
    );
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn h14_9_a_shell_hostile_run_id_cannot_inject_and_is_probed_read_and_pruned() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let n = unique();
    let canary = format!("/tmp/rp-pwn-{n}");
    let run_id = format!("rp-a;touch {canary};b c/d$(x)-{n}");
    run_agent(
        &sbx,
        &run_id,
        "echo '{\"delta\":\"1\"}'; echo boom >&2",
        None,
    )
    .await;
    assert!(!std::path::Path::new(&canary).exists(), "command injection");
    assert_eq!(
        probe_run_exit(&sbx, &run_id, &probe_options(&sbx)).await,
        RunExitProbe::Finished { exit_code: 0 }
    );

    let paths = journal_paths(&run_id, Some(sbx.journal_dir())).unwrap();
    let file = paths
        .journal
        .strip_prefix(&format!("{}/", sbx.journal_dir()))
        .expect("inside the directory");
    assert!(file.ends_with(".ndjson"));
    assert!(file
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
    assert!(file_exists(&sbx, &paths.journal).await);

    let sidecar = sh(&sbx, &stderr_tail_command(&paths, 4096).unwrap()).await;
    assert_eq!(decode_base64_text(&sidecar).unwrap(), "boom\n");

    let listed: Vec<String> = sh(&sbx, &format!("ls -1 '{}'", sbx.journal_dir()))
        .await
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(listed, names(&run_id));
    for name in &listed {
        assert_eq!(
            decode_journal_run_id(name),
            DecodedJournalName::RunId(run_id.clone())
        );
    }

    let runs = MemoryStore::new();
    runs.put_run(run_record(&run_id, RunStatus::Completed));
    let report = prune_journals(&sbx, &runs, &prune_options(&sbx)).await;
    assert_eq!(report.deleted, vec![run_id.clone()]);
    assert!(report.failures.is_empty());
    assert!(!file_exists(&sbx, &paths.journal).await);
    assert!(!file_exists(&sbx, &paths.stderr).await);
    assert!(!std::path::Path::new(&canary).exists(), "command injection");
}
