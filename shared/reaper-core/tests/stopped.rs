//! Stopped sandboxes of finished runs (issue 22, item 4): a provider that stops sandboxes by
//! itself (Daytona's auto-stop, E2B's pause, Vercel's persistence) leaves a finished run's
//! journal unreadable. The sweep starts such a sandbox to read it, bounded by a per-sweep cap,
//! only for a run past its TTL unless the user asks, and puts it back to its state afterwards
//! unless the run's reclaim destroyed it. The real sweep over the memory store, the journal
//! probe, replay and reclaimer, on virtual time; the provider is a stand-in whose sandboxes
//! start in two state reads (starting, then started), as hosted ones do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use reaper_core::journal::{exit_sentinel_line, journal_paths};
use reaper_core::memory::MemoryStore;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::{
    ExecOptions, ExecOutput, MessageStore, RunRecord, RunStatus, RunStore, SandboxError,
    SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider, SandboxState,
};
use reaper_testkit::fakes::{TokioClock, TokioSleeper};

const NOW: i64 = 1_700_000_000_000;
const TTL: u64 = 30 * 60 * 1000;
const DIR: &str = "/j";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Power {
    Running,
    Stopped,
    /// Started: the next state read says `Changing`, the one after `Running`.
    Starting(u8),
    Gone,
}

struct Box_ {
    journal: Vec<u8>,
    power: Power,
}

/// Sandboxes that stop: exec works only while running; `resume` of a stopped one is refused
/// (as Daytona's is), so the probe cannot tell.
struct Stopping {
    boxes: Mutex<HashMap<String, Box_>>,
    calls: Mutex<Vec<String>>,
    /// State reads a started sandbox answers `Changing` before `Running`.
    start_polls: Mutex<u8>,
}

impl Default for Stopping {
    fn default() -> Self {
        Stopping {
            boxes: Mutex::default(),
            calls: Mutex::default(),
            start_polls: Mutex::new(1),
        }
    }
}

impl Stopping {
    fn power(&self, id: &str) -> Power {
        self.boxes.lock().unwrap()[id].power
    }
    fn calls(&self, what: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.starts_with(what))
            .count()
    }
    fn log(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

struct Handle {
    id: String,
    provider: Arc<Stopping>,
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
impl SandboxHandle for Handle {
    fn id(&self) -> &str {
        &self.id
    }

    async fn exec(&self, command: &str, _options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.provider.log(format!("exec {}", self.id));
        let boxes = self.provider.boxes.lock().unwrap();
        let b = &boxes[&self.id];
        if b.power != Power::Running {
            return Err(SandboxError::NotFound(self.id.clone()));
        }
        let journal = &b.journal;
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

struct Provider(Arc<Stopping>);

#[async_trait::async_trait]
impl SandboxProvider for Provider {
    fn name(&self) -> &str {
        "stopping"
    }
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        self.0.log(format!("resume {id}"));
        match self.0.power(id) {
            Power::Running => Ok(Some(Arc::new(Handle {
                id: id.into(),
                provider: self.0.clone(),
            }))),
            Power::Gone => Ok(None),
            _ => Err(SandboxError::Refused(format!("{id} is stopped"))),
        }
    }
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        self.0.log(format!("destroy {id}"));
        self.0.boxes.lock().unwrap().get_mut(id).unwrap().power = Power::Gone;
        Ok(())
    }
    async fn state(&self, id: &str) -> Result<Option<SandboxState>, SandboxError> {
        self.0.log(format!("state {id}"));
        let mut boxes = self.0.boxes.lock().unwrap();
        let b = boxes.get_mut(id).unwrap();
        Ok(Some(match b.power {
            Power::Running => SandboxState::Running,
            Power::Stopped => SandboxState::Stopped,
            Power::Gone => SandboxState::Gone,
            Power::Starting(0) => {
                b.power = Power::Running;
                SandboxState::Running
            }
            Power::Starting(n) => {
                b.power = Power::Starting(n - 1);
                SandboxState::Changing
            }
        }))
    }
    async fn start_for_read(&self, id: &str) -> Result<(), SandboxError> {
        self.0.log(format!("start {id}"));
        let polls = *self.0.start_polls.lock().unwrap();
        self.0.boxes.lock().unwrap().get_mut(id).unwrap().power = Power::Starting(polls);
        Ok(())
    }
    async fn restore(&self, id: &str) -> Result<(), SandboxError> {
        self.0.log(format!("restore {id}"));
        self.0.boxes.lock().unwrap().get_mut(id).unwrap().power = Power::Stopped;
        Ok(())
    }
}

/// A finished run's journal (two deltas and the genuine exit-0 sentinel), or a working one's.
fn journal(run_id: &str, finished: bool) -> Vec<u8> {
    let mut bytes = b"{\"type\":\"TEXT_MESSAGE_CONTENT\",\"delta\":\"hel\"}\n{\"type\":\"TEXT_MESSAGE_CONTENT\",\"delta\":\"lo\"}\n".to_vec();
    if finished {
        let paths = journal_paths(run_id, Some(DIR)).unwrap();
        bytes.extend_from_slice(format!("{}\n", exit_sentinel_line(&paths, 0)).as_bytes());
    }
    bytes
}

struct Case {
    store: Arc<MemoryStore>,
    sandboxes: Arc<Stopping>,
    deps: ReapDeps,
    options: ReapOptions,
}

impl Case {
    fn new() -> Case {
        let store = Arc::new(MemoryStore::new());
        let sandboxes = Arc::new(Stopping::default());
        let deps = ReapDeps::journaled(
            store.clone(),
            Arc::new(Provider(sandboxes.clone())),
            Arc::new(TokioClock::new(NOW)),
            Arc::new(TokioSleeper),
            Some(DIR.into()),
        );
        let mut options = ReapOptions::new(TTL, "test-host");
        options.now = Some(NOW);
        options.fence_quiet_ms = 0;
        Case {
            store,
            sandboxes,
            deps,
            options,
        }
    }

    /// A detached run in its own sandbox, `expired` or inside its TTL.
    async fn run(&self, run_id: &str, expired: bool, finished: bool, power: Power) {
        let sandbox = format!("sbx-{run_id}");
        let mut record = RunRecord::new(run_id, format!("thread-{run_id}"), NOW - 4 * TTL as i64);
        record.sandbox_key = Some(format!("key-{run_id}"));
        record.detached_since = Some(if expired {
            NOW - TTL as i64 - 1
        } else {
            NOW - 60_000
        });
        self.store.put_run(record);
        self.store
            .upsert(SandboxInstanceRecord {
                key: format!("key-{run_id}"),
                provider: "stopping".into(),
                provider_sandbox_id: sandbox.clone(),
                latest_snapshot_id: None,
                thread_id: format!("thread-{run_id}"),
                latest_run_id: Some(run_id.into()),
                updated_at: NOW - 60_000,
            })
            .await
            .unwrap();
        self.sandboxes.boxes.lock().unwrap().insert(
            sandbox,
            Box_ {
                journal: journal(run_id, finished),
                power,
            },
        );
    }

    async fn sweep(&self) -> reaper_core::reap::ReapReport {
        reap_detached_runs(&self.deps, &self.options).await.unwrap()
    }

    async fn record(&self, run_id: &str) -> RunRecord {
        RunStore::get(self.store.as_ref(), run_id)
            .await
            .unwrap()
            .unwrap()
    }
}

fn entry<'a>(
    report: &'a reaper_core::reap::ReapReport,
    run_id: &str,
) -> &'a reaper_core::reap::ReapRunEntry {
    report.runs.iter().find(|e| e.run_id == run_id).unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_expired_run_whose_sandbox_stopped_is_started_and_finalized_with_its_whole_output() {
    let case = Case::new();
    case.run("done", true, true, Power::Stopped).await;

    let report = case.sweep().await;

    let e = entry(&report, "done");
    assert_eq!(e.outcome, ReapOutcome::Finalized, "{e:?}");
    assert_eq!(e.status, Some(RunStatus::Completed));
    assert_eq!(e.exit_code, Some(0));
    assert_eq!(e.sandbox, Some(SandboxFate::Destroyed));
    assert!(e.started_for_read);
    let transcript = case.store.get_transcript("done").await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "hello");
    assert_eq!(report.starts.started, 1);
    assert_eq!(
        report.starts.restored, 0,
        "a destroyed sandbox is not stopped"
    );
    assert_eq!(case.sandboxes.power("sbx-done"), Power::Gone);
    assert_eq!(case.sandboxes.calls("start"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_run_inside_its_ttl_whose_sandbox_stopped_is_never_started_unless_the_user_asks() {
    let case = Case::new();
    case.run("quiet", false, true, Power::Stopped).await;

    let report = case.sweep().await;
    assert_eq!(entry(&report, "quiet").outcome, ReapOutcome::Unknown);
    assert_eq!(case.sandboxes.calls("start"), 0);
    assert_eq!(case.sandboxes.calls("state"), 0, "not even asked");
    assert_eq!(case.sandboxes.power("sbx-quiet"), Power::Stopped);
    assert!(report.starts.is_empty());
    assert_eq!(case.record("quiet").await.driver_epoch, None, "untouched");

    let mut case = case;
    case.options.start_stopped_inside_ttl = true;
    let report = case.sweep().await;
    let e = entry(&report, "quiet");
    assert_eq!(e.outcome, ReapOutcome::Finalized, "{e:?}");
    assert_eq!(e.sandbox, Some(SandboxFate::Destroyed));
    assert_eq!(report.starts.started, 1);
    let transcript = case.store.get_transcript("quiet").await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "hello");
}

#[tokio::test(start_paused = true)]
async fn a_started_sandbox_whose_agent_is_still_working_is_stopped_again_and_the_run_untouched() {
    let mut case = Case::new();
    case.options.start_stopped_inside_ttl = true;
    case.run("working", false, false, Power::Stopped).await;

    let report = case.sweep().await;

    let e = entry(&report, "working");
    assert_eq!(e.outcome, ReapOutcome::Producing, "{e:?}");
    assert!(e.started_for_read);
    assert_eq!(
        (report.starts.started, report.starts.restored),
        (1, 1),
        "{:?}",
        report.starts
    );
    assert_eq!(case.sandboxes.power("sbx-working"), Power::Stopped);
    let record = case.record("working").await;
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.driver_epoch, None, "a producing run is not claimed");
}

#[tokio::test(start_paused = true)]
async fn starts_are_capped_per_sweep_and_the_runs_past_the_cap_wait_for_a_later_sweep() {
    let mut case = Case::new();
    case.options.max_starts_per_sweep = 2;
    for run in ["a", "b", "c"] {
        case.run(run, true, true, Power::Stopped).await;
    }

    let first = case.sweep().await;
    assert_eq!(first.starts.started, 2);
    assert_eq!(first.starts.capped, 1);
    assert_eq!(first.outcomes.finalized, 2);
    let waiting: Vec<_> = first
        .runs
        .iter()
        .filter(|e| e.outcome == ReapOutcome::Unknown)
        .collect();
    assert_eq!(waiting.len(), 1, "{first:#?}");
    let waiting = waiting[0].run_id.clone();
    assert_eq!(
        case.record(&waiting).await.status,
        RunStatus::Running,
        "a run past the cap is neither cancelled nor aborted"
    );
    assert_eq!(
        case.sandboxes.power(&format!("sbx-{waiting}")),
        Power::Stopped
    );

    let second = case.sweep().await;
    assert_eq!(second.starts.started, 1);
    assert_eq!(entry(&second, &waiting).outcome, ReapOutcome::Finalized);
    let transcript = case.store.get_transcript(&waiting).await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "hello");
}

#[tokio::test(start_paused = true)]
async fn with_starts_off_an_expired_runs_stopped_sandbox_is_never_started_or_asked_about() {
    let mut case = Case::new();
    case.options.max_starts_per_sweep = 0;
    case.run("off", true, true, Power::Stopped).await;

    let report = case.sweep().await;

    assert_eq!(case.sandboxes.calls("state"), 0);
    assert_eq!(case.sandboxes.calls("start"), 0);
    assert!(report.starts.is_empty());
    // The run goes the way it always went: cancelled at its TTL, its sandbox destroyed.
    assert_eq!(entry(&report, "off").outcome, ReapOutcome::Expired);
}

#[tokio::test(start_paused = true)]
async fn a_running_sandbox_costs_one_state_read_and_no_start() {
    let case = Case::new();
    case.run("live", true, true, Power::Running).await;

    let report = case.sweep().await;

    assert_eq!(case.sandboxes.calls("state"), 1);
    assert_eq!(case.sandboxes.calls("start"), 0);
    assert!(report.starts.is_empty());
    assert!(!entry(&report, "live").started_for_read);
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_that_does_not_come_up_within_the_step_is_stopped_again_and_the_run_settled() {
    let mut case = Case::new();
    case.options.step_timeout_ms = 5_000;
    *case.sandboxes.start_polls.lock().unwrap() = 200;
    case.run("stuck", true, true, Power::Stopped).await;

    let report = case.sweep().await;

    assert_eq!(report.starts.started, 1);
    assert_eq!(case.sandboxes.calls("restore"), 1);
    // One read to find it stopped, then one a second for the 5 s step.
    let reads = case.sandboxes.calls("state");
    assert!((2..=8).contains(&reads), "{reads} state reads");
    // Past its TTL the run is still settled, as it was before starts existed.
    assert_eq!(entry(&report, "stuck").outcome, ReapOutcome::Expired);
}
