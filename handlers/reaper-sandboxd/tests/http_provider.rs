//! Spec H14 (the real-sandbox reaper conformance) and the journal shell-safety cases, run through
//! `HttpSandboxProvider` against a real `reaper-sandboxd` on loopback; then a daemon killed in the
//! middle of a sweep and restarted on the same root.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{
    eventually, file_exists, journal_of, now_ms, probe_options, process_dead, run_agent,
    run_record, sandbox, sh, unique, Daemon,
};
use reaper_core::journal::{
    decode_base64_text, decode_journal_run_id, encode_run_id, journal_cleanup_command,
    journal_mtime_list_command, journal_paths, parse_mtime_listing, stderr_tail_command,
    DecodedJournalName, MtimeListing,
};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, JournalExitProbe};
use reaper_core::prune::{prune_journals, AgeGate, KeptJournal, KeptReason, PruneOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome};
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    CancellationToken, ChunkStream, DeliveryLog, Drive, DriveError, DriveRequest, ExecOptions,
    ExitProbe, MessageStore, ProbeError, RunExitProbe, RunRecord, RunStatus, RunStore,
    SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider,
};
use reaper_http_sandbox::{HttpSandbox, HttpSandboxProvider, DEFAULT_PROVIDER_NAME};
use reaper_local::{SystemClock, TokioSleeper};
use reaper_testkit::fakes::SpyStore;

fn prune_options(dir: &std::path::Path) -> PruneOptions {
    PruneOptions {
        dir: Some(dir.to_str().unwrap().to_string()),
        ..PruneOptions::new(now_ms())
    }
}

/// `(sidecar, journal)` names of a run in `ls` order (C locale: `.err` first).
fn names(run_id: &str) -> Vec<String> {
    let encoded = encode_run_id(run_id).unwrap();
    vec![format!("{encoded}.err"), format!("{encoded}.ndjson")]
}

struct Case {
    _tmp: tempfile::TempDir,
    daemon: Daemon,
    provider: HttpSandboxProvider,
    sbx: HttpSandbox,
    journals: std::path::PathBuf,
}

/// A daemon, the HTTP provider for it, and one sandbox whose journals are in a directory unique
/// to the case.
async fn case() -> Case {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    let journals = tmp
        .path()
        .join(format!("tanstack-reaper-conformance-{}", unique()));
    let sbx = sandbox(&provider, &journals).await;
    Case {
        _tmp: tmp,
        daemon,
        provider,
        sbx,
        journals,
    }
}

#[tokio::test]
async fn sandboxes_created_through_the_daemon_are_recorded_under_the_sandboxd_provider_name() {
    let c = case().await;
    assert_eq!(c.provider.name(), DEFAULT_PROVIDER_NAME);
    assert_eq!(DEFAULT_PROVIDER_NAME, "sandboxd");
    let info = c.sbx.status().await.unwrap().unwrap();
    assert_eq!(info.id, c.sbx.id());
    assert_eq!(info.journal_dir, c.journals.to_str().unwrap());
    assert!(c
        .daemon
        .root
        .join(c.sbx.id())
        .join("sandbox.json")
        .is_file());
    assert!(c.provider.resume(c.sbx.id()).await.unwrap().is_some());
}

#[tokio::test]
async fn h14_1_prune_deletes_the_terminal_run_and_keeps_the_live_one_as_non_terminal() {
    let c = case().await;
    let n = unique();
    let (done, live) = (format!("rp-done-{n}"), format!("rp-live-{n}"));
    let agent = "echo '{\"delta\":\"1\"}'; echo warn >&2";
    assert_eq!(run_agent(&c.sbx, &c.journals, &done, agent).await, 0);
    assert_eq!(run_agent(&c.sbx, &c.journals, &live, agent).await, 0);
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));
    runs.put_run(run_record(&live, RunStatus::Running));

    let report = prune_journals(&c.sbx, &runs, &prune_options(&c.journals)).await;
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
    let dir = c.journals.to_str().unwrap();
    let (d, l) = (
        journal_paths(&done, Some(dir)).unwrap(),
        journal_paths(&live, Some(dir)).unwrap(),
    );
    assert!(!file_exists(&c.sbx, &d.journal).await);
    assert!(!file_exists(&c.sbx, &d.stderr).await);
    assert!(file_exists(&c.sbx, &l.journal).await);
    assert!(file_exists(&c.sbx, &l.stderr).await);
}

#[tokio::test]
async fn h14_2_a_second_prune_finds_nothing_and_cleanup_of_absent_files_exits_zero() {
    let c = case().await;
    let done = format!("rp-again-{}", unique());
    run_agent(&c.sbx, &c.journals, &done, "echo hi").await;
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));
    let first = prune_journals(&c.sbx, &runs, &prune_options(&c.journals)).await;
    assert_eq!(first.deleted, vec![done.clone()]);

    let second = prune_journals(&c.sbx, &runs, &prune_options(&c.journals)).await;
    assert_eq!(
        (second.listed, second.run_ids),
        (0, 0),
        "second prune listed something"
    );
    assert!(second.deleted.is_empty() && second.kept.is_empty() && second.failures.is_empty());
    let paths = journal_paths(&done, c.journals.to_str()).unwrap();
    let cleanup = c
        .sbx
        .exec(&journal_cleanup_command(&paths), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(cleanup.exit_code, 0);
}

#[tokio::test]
async fn h14_3_a_stray_undecodable_file_is_kept_and_left_in_place() {
    let c = case().await;
    let done = format!("rp-stray-{}", unique());
    run_agent(&c.sbx, &c.journals, &done, "echo hi").await;
    let stray = "reaper-conformance-stray_1.ndjson";
    let stray_path = c.journals.join(stray);
    std::fs::write(&stray_path, "x\n").unwrap();
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));

    let report = prune_journals(&c.sbx, &runs, &prune_options(&c.journals)).await;
    assert_eq!(report.deleted, vec![done]);
    assert_eq!(
        report.kept,
        vec![KeptJournal {
            run_id: None,
            names: vec![stray.into()],
            reason: KeptReason::UndecodableName,
        }]
    );
    assert!(file_exists(&c.sbx, stray_path.to_str().unwrap()).await);
}

#[tokio::test]
async fn h14_4_and_5_the_mtime_listing_has_its_witness_and_an_empty_directory_prunes_nothing() {
    let c = case().await;
    let dir = c.journals.to_str().unwrap();
    let empty = sh(&c.sbx, &journal_mtime_list_command(Some(dir))).await;
    assert_eq!(
        parse_mtime_listing(&empty, Some(dir)),
        MtimeListing::Listed(Vec::new())
    );
    let report = prune_journals(&c.sbx, &MemoryStore::new(), &prune_options(&c.journals)).await;
    assert_eq!(report.listed, 0);
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert!(report.deleted.is_empty() && report.failures.is_empty());

    let run = format!("rp-mtime-{}", unique());
    run_agent(&c.sbx, &c.journals, &run, "echo hi; echo err >&2").await;
    let out = sh(&c.sbx, &journal_mtime_list_command(Some(dir))).await;
    let (secs, witness_dir) = out.lines().next().unwrap().split_once(' ').unwrap();
    assert!(!secs.is_empty() && secs.bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(witness_dir, dir);
    let MtimeListing::Listed(entries) = parse_mtime_listing(&out, Some(dir)) else {
        panic!("no witness in {out:?}");
    };
    let mut listed: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    listed.sort();
    assert_eq!(listed, names(&run));
    for e in &entries {
        assert!(
            (now_ms() - e.mtime_ms).abs() <= 120_000,
            "{e:?} is not recent"
        );
    }
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

/// The sweep's ports over the HTTP provider: the real journal probe, the real replay drive, a
/// spying memory store, no reclaim.
struct Sweep {
    spy: Arc<SpyStore>,
    store: Arc<MemoryStore>,
    drive: Arc<CountingDrive>,
    provider: Arc<dyn SandboxProvider>,
    journals: String,
}

impl Sweep {
    fn new(provider: &HttpSandboxProvider, journals: &std::path::Path) -> Sweep {
        let store = Arc::new(MemoryStore::new());
        let spy = Arc::new(SpyStore::new((*store).clone()));
        let provider: Arc<dyn SandboxProvider> = Arc::new(provider.clone());
        let journals = journals.to_str().unwrap().to_string();
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
                    journal_dir: Some(journals.clone()),
                    // A daemon that died mid-drive fails the read fast instead of retrying.
                    read_attempts: 1,
                    ..ReplayOptions::default()
                },
            ),
            calls: AtomicUsize::new(0),
        });
        Sweep {
            spy,
            store,
            drive,
            provider,
            journals,
        }
    }

    /// Records `run_id` as detached now, in sandbox `sbx`.
    async fn detach(&self, run_id: &str, sbx: &str) -> i64 {
        let detached_at = now_ms();
        let mut record = run_record(run_id, RunStatus::Running);
        record.started_at = detached_at - 1_000;
        record.detached_since = Some(detached_at);
        record.sandbox_key = Some(format!("key-{run_id}"));
        self.store.put_run(record);
        self.store
            .upsert(SandboxInstanceRecord {
                key: format!("key-{run_id}"),
                provider: self.provider.name().into(),
                provider_sandbox_id: sbx.into(),
                latest_snapshot_id: None,
                thread_id: "thread".into(),
                latest_run_id: Some(run_id.into()),
                updated_at: detached_at,
            })
            .await
            .unwrap();
        self.spy.clear_ops();
        detached_at
    }

    fn probe(&self) -> JournalExitProbe {
        JournalExitProbe::new(
            self.provider.clone(),
            self.store.clone(),
            reaper_core::probe::ProbeOptions {
                dir: Some(self.journals.clone()),
                ..Default::default()
            },
        )
    }

    fn deps(&self, probe: Arc<dyn ExitProbe>) -> ReapDeps {
        ReapDeps {
            runs: self.spy.clone(),
            logs: self.spy.clone(),
            leases: self.store.clone(),
            ledger: self.spy.clone(),
            probe,
            drive: self.drive.clone(),
            reclaim: None,
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
            damage: Default::default(),
        }
    }

    async fn record(&self, run_id: &str) -> RunRecord {
        RunStore::get(self.store.as_ref(), run_id)
            .await
            .unwrap()
            .unwrap()
    }
}

fn reap_options() -> ReapOptions {
    let mut options = ReapOptions::new(3_600_000, format!("sandboxd-test-{}", unique()));
    options.fence_quiet_ms = 25;
    options
}

#[tokio::test]
async fn h14_7_a_finished_detached_run_is_probed_finished_and_finalized_through_the_daemon() {
    let c = case().await;
    let run_id = format!("rp-final-{}", unique());
    let deltas = "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done";
    assert_eq!(run_agent(&c.sbx, &c.journals, &run_id, deltas).await, 0);
    let failing = format!("rp-exit3-{}", unique());
    assert_eq!(
        run_agent(&c.sbx, &c.journals, &failing, "echo x; exit 3").await,
        3
    );
    assert_eq!(
        probe_run_exit(&c.sbx, &run_id, &probe_options(&c.journals)).await,
        RunExitProbe::Finished { exit_code: 0 }
    );
    let sweep = Sweep::new(&c.provider, &c.journals);
    let detached_at = sweep.detach(&run_id, c.sbx.id()).await;

    let started = std::time::Instant::now();
    let report = reap_detached_runs(&sweep.deps(Arc::new(sweep.probe())), &reap_options())
        .await
        .unwrap();
    assert_eq!((report.considered, report.probed), (1, 1));
    assert_eq!(report.outcomes.finalized, 1);
    assert_eq!(report.outcomes.total(), 1);
    let entry = &report.runs[0];
    assert_eq!(entry.run_id, run_id);
    assert_eq!(entry.outcome, ReapOutcome::Finalized);
    assert_eq!(entry.status, Some(RunStatus::Completed));
    assert_eq!(entry.exit_code, Some(0));
    assert!(entry.error.is_none() && entry.terminalized_anyway.is_none());

    let transcript = sweep.store.get_transcript(&run_id).await.unwrap().unwrap();
    assert_eq!(transcript.messages.len(), 1);
    assert_eq!(transcript.messages[0].content, "123");
    let record = sweep.record(&run_id).await;
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.detached_since, Some(detached_at));
    let deltas: Vec<String> = DeliveryLog::read(sweep.store.as_ref(), &run_id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.chunk.get("delta").unwrap().as_str().unwrap().to_string())
        .collect();
    assert_eq!(deltas, ["1", "2", "3"]);
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn h14_8_a_live_detached_run_is_producing_and_left_completely_untouched() {
    let c = case().await;
    let run_id = format!("rp-live-{}", unique());
    let agent = c
        .sbx
        .start_agent(&run_id, "echo '{\"delta\":\"1\"}'; sleep 30", None)
        .await
        .unwrap();
    let journal = journal_of(&run_id, &c.journals);
    assert!(
        eventually(Duration::from_secs(20), || async {
            std::fs::read_to_string(&journal).is_ok_and(|t| t.ends_with('\n'))
        })
        .await
    );
    assert_eq!(
        probe_run_exit(&c.sbx, &run_id, &probe_options(&c.journals)).await,
        RunExitProbe::Producing
    );
    let sweep = Sweep::new(&c.provider, &c.journals);
    let detached_at = sweep.detach(&run_id, c.sbx.id()).await;

    let report = reap_detached_runs(&sweep.deps(Arc::new(sweep.probe())), &reap_options())
        .await
        .unwrap();
    assert_eq!((report.considered, report.probed), (1, 1));
    assert_eq!(report.outcomes.producing, 1);
    assert_eq!(
        (
            report.outcomes.finalized,
            report.outcomes.expired,
            report.outcomes.failed
        ),
        (0, 0, 0)
    );
    assert_eq!(report.runs[0].outcome, ReapOutcome::Producing);
    assert!(report.runs[0].status.is_none() && report.runs[0].error.is_none());
    assert_eq!(sweep.drive.calls.load(Ordering::SeqCst), 0);
    assert_eq!(sweep.spy.appended(&run_id), 0);
    assert_eq!(sweep.spy.closes(&run_id), 0);
    assert!(sweep.spy.writes_for(&run_id).is_empty());
    let record = sweep.record(&run_id).await;
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.detached_since, Some(detached_at));
    assert_eq!(record.driver_epoch, None);
    assert!(!process_dead(agent.pid), "the live agent was killed");

    c.provider.destroy(c.sbx.id()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            process_dead(agent.pid)
        })
        .await,
        "destroy through the daemon left the agent running"
    );
}

#[tokio::test]
async fn h14_9_a_shell_hostile_run_id_cannot_inject_and_is_probed_read_and_pruned() {
    let c = case().await;
    let n = unique();
    let canary = c.daemon.root.parent().unwrap().join(format!("rp-pwn-{n}"));
    let run_id = format!("rp-a;touch {};b c/d$(x)-{n}", canary.display());
    let code = run_agent(
        &c.sbx,
        &c.journals,
        &run_id,
        "echo '{\"delta\":\"1\"}'; echo boom >&2",
    )
    .await;
    assert_eq!(code, 0);
    assert!(!canary.exists(), "command injection through the run id");
    assert_eq!(
        probe_run_exit(&c.sbx, &run_id, &probe_options(&c.journals)).await,
        RunExitProbe::Finished { exit_code: 0 }
    );

    let dir = c.journals.to_str().unwrap();
    let paths = journal_paths(&run_id, Some(dir)).unwrap();
    let file = paths
        .journal
        .strip_prefix(&format!("{dir}/"))
        .expect("the journal is inside the directory");
    assert!(file.ends_with(".ndjson"));
    assert!(file
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
    let sidecar = sh(&c.sbx, &stderr_tail_command(&paths, 4096).unwrap()).await;
    assert_eq!(decode_base64_text(&sidecar).unwrap(), "boom\n");
    let listed: Vec<String> = sh(&c.sbx, &format!("ls -1 '{dir}'"))
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
    // The daemon recorded the exact id, carried as JSON, not through any shell.
    let info = c.sbx.status().await.unwrap().unwrap();
    assert_eq!(info.agents[0].run_id, run_id);

    let runs = MemoryStore::new();
    runs.put_run(run_record(&run_id, RunStatus::Completed));
    let report = prune_journals(&c.sbx, &runs, &prune_options(&c.journals)).await;
    assert_eq!(report.deleted, vec![run_id.clone()]);
    assert!(report.failures.is_empty());
    assert!(!file_exists(&c.sbx, &paths.journal).await);
    assert!(!file_exists(&c.sbx, &paths.stderr).await);
    assert!(!canary.exists(), "command injection through the run id");
}

#[tokio::test]
async fn hostile_run_ids_and_journal_dirs_never_run_their_payload() {
    let c = case().await;
    let n = unique();
    let canary = c.daemon.root.parent().unwrap().join(format!("pwn-{n}"));
    let touch = format!("touch {}", canary.display());
    let hostile_dir = c
        .daemon
        .root
        .parent()
        .unwrap()
        .join(format!("j '$({touch})' `{touch}`;{touch}"));
    let ids = [
        format!("'; {touch}; '"),
        format!("$({touch})"),
        format!("`{touch}`"),
        format!("a\n{touch}\n"),
        format!("\"; {touch}; \""),
        format!("日本語 | {touch} &"),
        format!("{}{touch}", "x".repeat(5000)),
    ];
    for (i, id) in ids.iter().enumerate() {
        let dir = (i % 2 == 1).then(|| hostile_dir.to_str().unwrap());
        c.sbx
            .start_agent(id, "echo '{\"delta\":\"ok\"}'", dir)
            .await
            .unwrap();
        let journals = dir
            .map(std::path::PathBuf::from)
            .unwrap_or(c.journals.clone());
        let options = probe_options(&journals);
        assert!(
            eventually(Duration::from_secs(30), || async {
                probe_run_exit(&c.sbx, id, &options).await
                    == RunExitProbe::Finished { exit_code: 0 }
            })
            .await,
            "run {i} never finished"
        );
    }
    assert!(
        !canary.exists(),
        "a hostile run id or directory ran its payload"
    );
}

/// The real journal probe, except that on its `kill_on`-th call it first SIGKILLs the daemon and
/// waits for the process to be dead: the daemon dies in the middle of the sweep.
struct KillingProbe {
    inner: JournalExitProbe,
    daemon_pid: i32,
    kill_on: usize,
    calls: AtomicUsize,
    killed_for: std::sync::Mutex<Option<String>>,
}

#[async_trait::async_trait]
impl ExitProbe for KillingProbe {
    async fn has_finished(&self, record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.kill_on {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.daemon_pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
            let pid = self.daemon_pid as u32;
            assert!(eventually(Duration::from_secs(10), || async move { process_dead(pid) }).await);
            *self.killed_for.lock().unwrap() = Some(record.run_id.clone());
        }
        self.inner.has_finished(record).await
    }
}

#[tokio::test]
async fn a_daemon_killed_mid_sweep_leaves_runs_unknown_never_finished_and_the_next_sweep_completes()
{
    let tmp = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    let journals = tmp.path().join("journals");
    let sbx = sandbox(&provider, &journals).await;
    let n = unique();
    let (a, b) = (format!("rp-a-{n}"), format!("rp-b-{n}"));
    run_agent(&sbx, &journals, &a, "echo '{\"delta\":\"a\"}'").await;
    run_agent(&sbx, &journals, &b, "echo '{\"delta\":\"b\"}'").await;
    // A live agent: it must outlive the daemon and still be destroyable after the restart.
    let live = sbx
        .start_agent(&format!("rp-live-{n}"), "sleep 60", None)
        .await
        .unwrap();
    let sweep = Sweep::new(&provider, &journals);
    let detached_a = sweep.detach(&a, sbx.id()).await;
    let detached_b = sweep.detach(&b, sbx.id()).await;

    let probe = Arc::new(KillingProbe {
        inner: sweep.probe(),
        daemon_pid: daemon.pid(),
        kill_on: 2,
        calls: AtomicUsize::new(0),
        killed_for: Default::default(),
    });
    let report = reap_detached_runs(&sweep.deps(probe.clone()), &reap_options())
        .await
        .unwrap();
    let lost = probe
        .killed_for
        .lock()
        .unwrap()
        .clone()
        .expect("the daemon was killed");
    let survivor = if lost == a { &b } else { &a };
    assert_eq!(report.considered, 2);
    assert_eq!(report.outcomes.finalized, 1, "{:?}", report.runs);
    assert_eq!(report.outcomes.unknown, 1, "{:?}", report.runs);
    assert_eq!(report.outcomes.failed, 0, "{:?}", report.runs);
    let entry = report.runs.iter().find(|e| e.run_id == lost).unwrap();
    assert_eq!(entry.outcome, ReapOutcome::Unknown);
    assert!(entry.exit_code.is_none() && entry.status.is_none());
    let message = entry.error.as_ref().expect("the reason").to_string();
    assert!(message.contains("unreachable"), "{message}");
    // Nothing was written for the run the daemon died under: it is exactly as detached.
    let record = sweep.record(&lost).await;
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(
        record.detached_since,
        Some(if lost == a { detached_a } else { detached_b })
    );
    assert_eq!(record.driver_epoch, None);
    assert_eq!(sweep.spy.appended(&lost), 0);
    assert_eq!(sweep.record(survivor).await.status, RunStatus::Completed);
    // While it is down a probe is unknown, never finished.
    let handle = provider.handle(sbx.id()).unwrap();
    assert!(matches!(
        probe_run_exit(&handle, &lost, &probe_options(&journals)).await,
        RunExitProbe::Unknown { error: Some(_) }
    ));
    assert!(!process_dead(live.pid), "the agent died with the daemon");

    let addr = daemon.addr.clone();
    let token = daemon.token.clone();
    daemon.kill().await;
    let restarted = Daemon::start_at(tmp.path(), &token, &addr, &[]).await;
    assert_eq!(restarted.url, format!("http://{addr}"));

    let report = reap_detached_runs(&sweep.deps(Arc::new(sweep.probe())), &reap_options())
        .await
        .unwrap();
    assert_eq!(report.considered, 1);
    assert_eq!(report.runs[0].run_id, lost);
    assert_eq!(report.runs[0].outcome, ReapOutcome::Finalized);
    assert_eq!(report.runs[0].exit_code, Some(0));
    assert_eq!(sweep.record(&lost).await.status, RunStatus::Completed);
    let transcript = sweep.store.get_transcript(&lost).await.unwrap().unwrap();
    assert_eq!(
        transcript.messages[0].content,
        if lost == a { "a" } else { "b" }
    );
    for run in [&a, &b] {
        assert!(file_exists(&handle, &journal_of(run, &journals)).await);
    }
    // The restarted daemon still knows the live agent from the sandbox's metadata on disk.
    provider.destroy(sbx.id()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async { process_dead(live.pid) }).await,
        "destroy after the restart left the agent running"
    );
}
