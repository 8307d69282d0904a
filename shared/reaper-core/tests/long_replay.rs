//! A finished agent's output is never cut (issue 24, item 3): a replay that runs out of budget
//! keeps what it landed, the run stays `running` with its journal and sandbox, and the next
//! sweep resumes from its offset until the whole output is landed; only then the terminal write
//! and the reclaim. The sweep is the real one (`reap_detached_runs`) over the memory store, the
//! journal probe, the journal replay and the sandbox reclaimer; the sandbox serves a journal from
//! a byte buffer and charges virtual time per `exec`, so the budget runs out deterministically.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use reaper_core::journal::{exit_sentinel_line, journal_paths};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, ReapReport};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::replay::{journal_end, JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    DeliveryLog, ExecOptions, ExecOutput, MessageStore, RunRecord, RunStatus, RunStore,
    SandboxError, SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider,
};
use reaper_testkit::fakes::{TokioClock, TokioSleeper};

const RUN: &str = "run-long";
const THREAD: &str = "thread-long";
const SANDBOX: &str = "sbx-long";
const KEY: &str = "key-long";
const DIR: &str = "/j";
const NOW: i64 = 1_700_000_000_000;
const BUDGET_MS: u64 = 2_000;

/// A sandbox whose journal is a byte buffer; every `exec` takes `exec_ms` of virtual time, and
/// one chosen exec takes `pause_ms` more (the reaper's process paused mid-replay).
struct SlowSandbox {
    journal: Vec<u8>,
    exec_ms: u64,
    execs: AtomicUsize,
    pause_at: AtomicUsize,
    pause_ms: AtomicU64,
    destroyed: AtomicBool,
}

fn number_after(command: &str, marker: &str) -> u64 {
    let at = command.find(marker).expect("a paged or tail read") + marker.len();
    let digits: String = command[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[async_trait::async_trait]
impl SandboxHandle for SlowSandbox {
    fn id(&self) -> &str {
        SANDBOX
    }

    async fn exec(&self, command: &str, _options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let n = self.execs.fetch_add(1, Ordering::SeqCst) + 1;
        let mut ms = self.exec_ms;
        if n == self.pause_at.load(Ordering::SeqCst) {
            ms += self.pause_ms.load(Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let journal = &self.journal;
        let (start, end) = if command.starts_with("tail -c -") {
            let n = number_after(command, "tail -c -") as usize;
            (journal.len().saturating_sub(n), journal.len())
        } else {
            let from = number_after(command, "tail -c +") as usize - 1;
            let max = number_after(command, "head -c ") as usize;
            let start = from.min(journal.len());
            (start, (start + max).min(journal.len()))
        };
        Ok(ExecOutput {
            stdout: base64::engine::general_purpose::STANDARD.encode(&journal[start..end]),
            stderr: String::new(),
            exit_code: 0,
        })
    }
}

struct Provider(Arc<SlowSandbox>);

#[async_trait::async_trait]
impl SandboxProvider for Provider {
    fn name(&self) -> &str {
        "slow"
    }
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        let alive = id == SANDBOX && !self.0.destroyed.load(Ordering::SeqCst);
        Ok(alive.then(|| self.0.clone() as Arc<dyn SandboxHandle>))
    }
    async fn destroy(&self, _id: &str) -> Result<(), SandboxError> {
        self.0.destroyed.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// The journal: `lines` short lines, with one line of `long` bytes after the first half, then
/// the genuine exit-0 sentinel. Returns the bytes and each output line's end offset.
fn journal(lines: usize, long: usize) -> (Vec<u8>, Vec<u64>) {
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    for i in 0..lines {
        if i == lines / 2 && long > 0 {
            bytes.resize(bytes.len() + long, b'x');
            bytes.push(b'\n');
            ends.push(bytes.len() as u64);
        }
        bytes.extend_from_slice(format!("line-{i}\n").as_bytes());
        ends.push(bytes.len() as u64);
    }
    let paths = journal_paths(RUN, Some(DIR)).unwrap();
    bytes.extend_from_slice(format!("{}\n", exit_sentinel_line(&paths, 0)).as_bytes());
    (bytes, ends)
}

struct Case {
    store: Arc<MemoryStore>,
    sandbox: Arc<SlowSandbox>,
    deps: ReapDeps,
    options: ReapOptions,
}

impl Case {
    async fn new(journal: Vec<u8>, exec_ms: u64, page_bytes: u64) -> Case {
        let store = Arc::new(MemoryStore::new());
        let mut record = RunRecord::new(RUN, THREAD, NOW - 60_000);
        record.sandbox_key = Some(KEY.into());
        record.detached_since = Some(NOW - 30_000);
        store.put_run(record);
        store
            .upsert(SandboxInstanceRecord {
                key: KEY.into(),
                provider: "slow".into(),
                provider_sandbox_id: SANDBOX.into(),
                latest_snapshot_id: None,
                thread_id: THREAD.into(),
                latest_run_id: Some(RUN.into()),
                updated_at: NOW,
            })
            .await
            .unwrap();
        let sandbox = Arc::new(SlowSandbox {
            journal,
            exec_ms,
            execs: AtomicUsize::new(0),
            pause_at: AtomicUsize::new(0),
            pause_ms: AtomicU64::new(0),
            destroyed: AtomicBool::new(false),
        });
        let provider: Arc<dyn SandboxProvider> = Arc::new(Provider(sandbox.clone()));
        let clock = Arc::new(TokioClock::new(NOW));
        let drive = JournalReplayDrive::new(
            ReplayDeps {
                runs: store.clone(),
                instances: store.clone(),
                provider: provider.clone(),
                logs: store.clone(),
                messages: store.clone(),
                clock: clock.clone(),
                sleeper: Arc::new(TokioSleeper),
            },
            ReplayOptions {
                journal_dir: Some(DIR.into()),
                page_bytes,
                ..ReplayOptions::default()
            },
        );
        let probe = JournalExitProbe::new(
            provider.clone(),
            store.clone(),
            ProbeOptions {
                dir: Some(DIR.into()),
                ..Default::default()
            },
        );
        let deps = ReapDeps {
            runs: store.clone(),
            logs: store.clone(),
            leases: store.clone(),
            ledger: store.clone(),
            probe: Arc::new(probe),
            drive: Arc::new(drive),
            reclaim: Some(Arc::new(SandboxReclaimer {
                provider,
                instances: store.clone(),
                runs: store.clone(),
            })),
            clock,
            sleeper: Arc::new(TokioSleeper),
            damage: Default::default(),
        };
        let mut options = ReapOptions::new(24 * 3_600_000, "long-replay");
        options.run_budget_ms = BUDGET_MS;
        options.fence_quiet_ms = 0;
        Case {
            store,
            sandbox,
            deps,
            options,
        }
    }

    async fn sweep(&self) -> ReapReport {
        reap_detached_runs(&self.deps, &self.options).await.unwrap()
    }

    async fn landed_ends(&self) -> Vec<u64> {
        self.store
            .read(RUN, 0, usize::MAX)
            .await
            .unwrap()
            .iter()
            .map(|e| journal_end(&e.chunk).expect("every replayed chunk carries journalEnd"))
            .collect()
    }

    /// Sweeps until the run is finalized; asserts every sweep before that left the run
    /// `running` with its sandbox, and returns how many sweeps it took.
    async fn sweep_until_finalized(&self, most: usize) -> usize {
        for n in 1..=most {
            let report = self.sweep().await;
            let entry = &report.runs[0];
            if entry.outcome == ReapOutcome::Finalized {
                assert_eq!(entry.status, Some(RunStatus::Completed));
                return n;
            }
            assert_eq!(entry.outcome, ReapOutcome::BudgetExceeded, "{entry:?}");
            assert_eq!(entry.status, Some(RunStatus::Running), "{entry:?}");
            assert_eq!(entry.terminalized_anyway, Some(false));
            let record = RunStore::get(self.store.as_ref(), RUN)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(record.status, RunStatus::Running, "sweep {n}");
            assert!(
                !self.sandbox.destroyed.load(Ordering::SeqCst),
                "sweep {n} destroyed the sandbox of a run whose output is not all landed"
            );
            assert!(
                SandboxInstanceStore::get(self.store.as_ref(), KEY)
                    .await
                    .unwrap()
                    .is_some(),
                "the instance record stays"
            );
            assert!(
                self.store.get_transcript(RUN).await.unwrap().is_none(),
                "no transcript before the whole output is landed"
            );
        }
        panic!("the run was not finalized in {most} sweeps");
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_longer_than_its_budget_lands_every_chunk_exactly_once_across_sweeps() {
    // 200,000 chunks and one 30 MB line, read 32 KiB per exec at 100 ms an exec: the output
    // takes several budgets of 2 s, and the 30 MB line alone takes 960 reads (96 s).
    let (bytes, ends) = journal(200_000, 30 * 1024 * 1024);
    let total = bytes.len();
    let case = Case::new(bytes, 100, 32 * 1024).await;

    let sweeps = case.sweep_until_finalized(40).await;
    println!(
        "200,001 chunks ({total} journal bytes) landed once each over {sweeps} sweeps of a {BUDGET_MS} ms budget, {} execs",
        case.sandbox.execs.load(Ordering::SeqCst)
    );
    assert!(
        sweeps >= 3,
        "the output fit in {sweeps} sweeps: no resume was exercised"
    );

    let landed = case.landed_ends().await;
    assert_eq!(landed.len(), 200_001);
    assert_eq!(
        landed, ends,
        "every chunk lands exactly once, in journal order"
    );
    let log = case.store.read(RUN, 0, usize::MAX).await.unwrap();
    let long = log
        .iter()
        .find(|e| e.chunk.get_str("line").is_some_and(|l| l.len() > 1000))
        .expect("the 30 MB line landed");
    assert_eq!(long.chunk.get_str("line").unwrap().len(), 30 * 1024 * 1024);
    assert!(case.sandbox.execs.load(Ordering::SeqCst) as u64 >= (total as u64) / (32 * 1024));
    let record = RunStore::get(case.store.as_ref(), RUN)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert!(case.store.get_transcript(RUN).await.unwrap().is_some());
    assert!(
        case.sandbox.destroyed.load(Ordering::SeqCst),
        "reclaimed once everything landed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pause_past_the_budget_mid_replay_keeps_what_landed_and_the_next_sweep_finishes() {
    let (bytes, ends) = journal(2_000, 0);
    let case = Case::new(bytes, 10, 1024).await;
    // The probe's read is exec 1; the replay's third page read stalls for a minute.
    case.sandbox.pause_at.store(4, Ordering::SeqCst);
    case.sandbox.pause_ms.store(60_000, Ordering::SeqCst);

    let first = case.sweep().await;
    let entry = &first.runs[0];
    assert_eq!(entry.outcome, ReapOutcome::BudgetExceeded);
    assert_eq!(entry.status, Some(RunStatus::Running));
    let landed = case.landed_ends().await;
    assert!(
        !landed.is_empty(),
        "the pages read before and during the pause landed"
    );
    assert_eq!(landed, ends[..landed.len()]);
    assert!(!case.sandbox.destroyed.load(Ordering::SeqCst));

    assert_eq!(case.sweep_until_finalized(5).await, 1);
    assert_eq!(case.landed_ends().await, ends);
}

#[tokio::test(start_paused = true)]
async fn an_expired_run_is_still_aborted_by_its_budget() {
    // No sentinel ever comes: the agent is still writing past its TTL.
    let mut bytes = Vec::new();
    for i in 0..100 {
        bytes.extend_from_slice(format!("line-{i}\n").as_bytes());
    }
    bytes.extend_from_slice(b"partial line with no end");
    let mut case = Case::new(bytes, 10, 1024).await;
    case.options.detached_run_ttl_ms = 1_000;
    let report = case.sweep().await;
    assert_eq!(report.runs[0].outcome, ReapOutcome::Expired);
    assert_eq!(report.runs[0].status, Some(RunStatus::Aborted));
    assert_eq!(case.landed_ends().await.len(), 100);
}
