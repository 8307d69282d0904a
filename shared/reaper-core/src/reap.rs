//! The sweep (spec B): find detached runs, probe the ones inside their TTL, finalize the
//! finished, expire the overdue, reclaim what became terminal — one run at a time, every
//! per-run problem an entry in the report, never an error for the whole sweep.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::future::{select, Either};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::claim::{
    await_log_quiescence, run_driver_lock_key, Claim, ClaimError, Writer, DEFAULT_FENCE_QUIET_MS,
};
use crate::concurrency::{ConcurrencyLimits, ConcurrencyReport, Observation, Sizer};
use crate::domain::{EpochMs, LedgerCounts, ReclaimIntent, RunPatch, RunRecord, RunStatus};
use crate::error::{
    ClaimRefusal, ObservedEpoch, OptionsError, ReapError, ReclaimError, StoreError,
};
use crate::pipe::{pipe_and_confirm, PipeContext, Piped};
use crate::ports::{
    CancellationToken, Clock, DeliveryLog, Drive, DriveRequest, EpochBump, ExitProbe, Fenced,
    LeaseGrant, LeaseStore, Reclaim, ReclaimLedger, ReclaimableCursor, ReclaimablePage,
    ReclaimableQuery, Reclaimed, RecordedSandbox, RunExitProbe, RunStore, SandboxState, Sleeper,
};
use crate::reason::{Reason, ReasonCode, Unreachable};

/// Runs one sweep handles when not told otherwise.
pub const DEFAULT_MAX_RUNS: usize = 25;
/// How long one run's drive may take when not told otherwise.
pub const DEFAULT_RUN_BUDGET_MS: u64 = 30_000;
/// How much of a journal the exit probe reads from its end.
pub const DEFAULT_EXIT_PROBE_BYTES: u64 = 4_096;
/// Reclaim-ledger entries retried per sweep, at most.
pub const DEFAULT_MAX_RECLAIM_RETRIES: usize = 25;
/// Runs in flight at once unless a handler sizes it for its platform: one, as the reference.
pub const DEFAULT_CONCURRENCY: usize = 1;
/// The most runs in flight accepted.
pub const MAX_CONCURRENCY: usize = 256;
/// The deadline of one I/O step the sweep waits on besides the drive: a probe (resume plus one
/// tail read) or a reclaim (instance lookups plus the destroy). A step past it is abandoned: the
/// probe answers `unknown`, the reclaim is retried by the ledger.
pub const DEFAULT_STEP_TIMEOUT_MS: u64 = 20_000;
/// Time kept in the per-run reserve for the store requests around a run (claim, intent, re-read,
/// release).
pub const STORE_ALLOWANCE_MS: u64 = 2_000;
/// The first retry of a failed destroy waits this long; each further failure doubles it.
pub const RECLAIM_RETRY_BASE_MS: u64 = 60_000;
/// The longest wait between two retries of a failed destroy.
pub const RECLAIM_RETRY_MAX_MS: u64 = 3_600_000;
/// Stopped sandboxes a sweep starts to read, at most, unless set (each start bills compute).
pub const DEFAULT_MAX_STARTS_PER_SWEEP: usize = 2;
/// How often a started sandbox is asked whether it is running yet.
pub const START_POLL_MS: u64 = 1_000;
/// Detached runs a sweep counts at most for its backlog figure (beyond it, "at least"): a
/// bounded count costs the same at 1k detached runs as at 1M on every store that cannot keep a
/// count (the memory store counts exactly at no cost).
pub const DEFAULT_BACKLOG_COUNT_MAX: u64 = 1_000;
/// The sweep-wide single-flight lease key.
pub const SWEEP_LEASE_KEY: &str = "reaper:sweep";
/// The longest budget or TTL accepted (about 24.8 days, the range of a JS timer): anything larger
/// is a unit mistake.
pub const MAX_DURATION_MS: u64 = (1 << 31) - 1;

/// The eight per-run outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReapOutcome {
    /// A finished run was driven to its terminal status.
    Finalized,
    /// A run past its TTL was aborted.
    Expired,
    /// The agent is still producing: left alone.
    Producing,
    /// The probe could not tell: left alone.
    Unknown,
    /// The drive ran out of budget; the next sweep resumes it.
    BudgetExceeded,
    /// Another sweeper holds the run's claim.
    NotClaimed,
    /// The run ended, but its sandbox could not be destroyed (the ledger retries).
    ReclaimFailed,
    /// Handling the run failed.
    Failed,
}

impl ReapOutcome {
    /// Every outcome.
    pub const ALL: [ReapOutcome; 8] = [
        ReapOutcome::Finalized,
        ReapOutcome::Expired,
        ReapOutcome::Producing,
        ReapOutcome::Unknown,
        ReapOutcome::BudgetExceeded,
        ReapOutcome::NotClaimed,
        ReapOutcome::ReclaimFailed,
        ReapOutcome::Failed,
    ];

    /// The outcome as reports name it (`finalized`, `budget-exceeded`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ReapOutcome::Finalized => "finalized",
            ReapOutcome::Expired => "expired",
            ReapOutcome::Producing => "producing",
            ReapOutcome::Unknown => "unknown",
            ReapOutcome::BudgetExceeded => "budget-exceeded",
            ReapOutcome::NotClaimed => "not-claimed",
            ReapOutcome::ReclaimFailed => "reclaim-failed",
            ReapOutcome::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ReapOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counts per outcome. Always has all eight keys, starting at zero (a stored record missing
/// one, written by another version, reads it as zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct OutcomeCounts {
    /// Runs finalized.
    pub finalized: usize,
    /// Runs expired.
    pub expired: usize,
    /// Runs still producing.
    pub producing: usize,
    /// Runs the probe could not tell about.
    pub unknown: usize,
    /// Runs whose drive ran out of budget.
    pub budget_exceeded: usize,
    /// Runs another sweeper held.
    pub not_claimed: usize,
    /// Runs whose sandbox could not be destroyed.
    pub reclaim_failed: usize,
    /// Runs that failed.
    pub failed: usize,
}

impl OutcomeCounts {
    /// The count of one outcome.
    pub fn get(&self, outcome: ReapOutcome) -> usize {
        match outcome {
            ReapOutcome::Finalized => self.finalized,
            ReapOutcome::Expired => self.expired,
            ReapOutcome::Producing => self.producing,
            ReapOutcome::Unknown => self.unknown,
            ReapOutcome::BudgetExceeded => self.budget_exceeded,
            ReapOutcome::NotClaimed => self.not_claimed,
            ReapOutcome::ReclaimFailed => self.reclaim_failed,
            ReapOutcome::Failed => self.failed,
        }
    }

    fn slot(&mut self, outcome: ReapOutcome) -> &mut usize {
        match outcome {
            ReapOutcome::Finalized => &mut self.finalized,
            ReapOutcome::Expired => &mut self.expired,
            ReapOutcome::Producing => &mut self.producing,
            ReapOutcome::Unknown => &mut self.unknown,
            ReapOutcome::BudgetExceeded => &mut self.budget_exceeded,
            ReapOutcome::NotClaimed => &mut self.not_claimed,
            ReapOutcome::ReclaimFailed => &mut self.reclaim_failed,
            ReapOutcome::Failed => &mut self.failed,
        }
    }

    /// Runs counted, every outcome together.
    pub fn total(&self) -> usize {
        ReapOutcome::ALL.iter().map(|o| self.get(*o)).sum()
    }
}

/// One run's line in the report. Which fields are present depends on the outcome (spec B.5).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReapRunEntry {
    /// The run.
    pub run_id: String,
    /// What the sweep did with it.
    pub outcome: ReapOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The run's status after the sweep, when known.
    pub status: Option<RunStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The agent's exit code, when the probe found one.
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// On a budget-exceeded run: whether its terminal status was written anyway.
    pub terminalized_anyway: Option<bool>,
    /// Boxed: most runs have none, and a report holds one entry per run of the batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<ReapError>>,
    /// What became of the sandbox of a run that is terminal now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxFate>,
    /// Why a `kept` sandbox was kept (a live run that may use it, a turn being set up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_because: Option<String>,
    /// Why the run ended as it did: a stable code and a sentence (every entry has one).
    pub reason: Reason,
    /// The run's sandbox was stopped and this sweep started it to read the journal.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub started_for_read: bool,
    /// A dry run's entry: what a sweep would do, not what was done ([`ReapOptions::dry_run`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub planned: bool,
    /// What a dry run's decision rests on. Boxed: only planned entries have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof: Option<Box<crate::plan::PlanProof>>,
}

/// What became of a terminal run's sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxFate {
    /// Destroyed, confirmed by the provider.
    Destroyed,
    /// There was nothing to destroy (no sandbox, or it was already gone).
    NoSandbox,
    /// Deliberately kept: a non-terminal run still uses it, or it is another provider's.
    Kept,
    /// The destroy failed: it may still be running. The ledger retries it.
    Leaked,
    /// Not reclaimed here: the sweep has no reclaim hook.
    NotReclaimed,
}

impl SandboxFate {
    /// The name the report's JSON uses.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxFate::Destroyed => "destroyed",
            SandboxFate::NoSandbox => "no-sandbox",
            SandboxFate::Kept => "kept",
            SandboxFate::Leaked => "leaked",
            SandboxFate::NotReclaimed => "not-reclaimed",
        }
    }
}

impl ReapRunEntry {
    pub(crate) fn new(run_id: &str, outcome: ReapOutcome) -> Self {
        let mut entry = Self::unexplained(run_id, outcome);
        entry.reason = entry.explain();
        entry
    }

    /// An entry whose reason the caller sets once its fields are (a reason costs a sentence's
    /// formatting, and a reaped run's would be written twice).
    fn unexplained(run_id: &str, outcome: ReapOutcome) -> Self {
        ReapRunEntry {
            run_id: run_id.to_string(),
            outcome,
            status: None,
            exit_code: None,
            terminalized_anyway: None,
            error: None,
            sandbox: None,
            kept_because: None,
            reason: Reason::new(ReasonCode::ProducingNoExitYet, ""),
            started_for_read: false,
            planned: false,
            proof: None,
        }
    }

    pub(crate) fn with_error(mut self, error: ReapError) -> Self {
        self.error = Some(Box::new(error));
        self.reason = self.explain();
        self
    }

    /// The reason this entry's fields give. The causes the fields cannot tell (why the probe
    /// could not reach the journal, why a sandbox was kept) are set where they are known.
    pub(crate) fn explain(&self) -> Reason {
        let status = self.status.map_or("not terminal", RunStatus::as_str);
        let error = || {
            self.error
                .as_ref()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let sandbox = match self.sandbox {
            Some(SandboxFate::Destroyed) => "; its sandbox was destroyed",
            Some(SandboxFate::NoSandbox) => "; it had no sandbox left to destroy",
            Some(SandboxFate::Leaked) => {
                "; its sandbox's destroy failed (a leak the ledger retries)"
            }
            Some(SandboxFate::NotReclaimed) => "; its sandbox is not reclaimed by this handler",
            Some(SandboxFate::Kept) | None => "",
        };
        let (code, message): (ReasonCode, Cow<'static, str>) =
            match (self.outcome, self.error.as_deref()) {
                (ReapOutcome::Finalized, _) => (
                    ReasonCode::FinalizedExited,
                    format!(
                    "the agent exited{} (journal sentinel); its output was replayed and the run \
                     recorded {status}{sandbox}",
                    self.exit_code.map(|c| format!(" with code {c}")).unwrap_or_default()
                )
                    .into(),
                ),
                (ReapOutcome::Expired, _) => (
                    ReasonCode::ExpiredTtl,
                    format!(
                        "detached for longer than the TTL: cancelled, driven under the run budget \
                     and recorded {status}{sandbox}"
                    )
                    .into(),
                ),
                (ReapOutcome::Producing, _) => (
                    ReasonCode::ProducingNoExitYet,
                    "the journal has no exit sentinel yet: the agent is still working; left alone"
                        .into(),
                ),
                (ReapOutcome::Unknown, _) => (
                    ReasonCode::UnknownProbeError,
                    format!("the exit probe could not tell: {}; left alone", error()).into(),
                ),
                (ReapOutcome::BudgetExceeded, _) if self.terminalized_anyway == Some(true) => (
                    ReasonCode::BudgetExceededTerminalizedAnyway,
                    format!(
                        "the run budget ran out; the run was recorded {status} anyway{sandbox}"
                    )
                    .into(),
                ),
                (ReapOutcome::BudgetExceeded, _) => (
                    ReasonCode::BudgetExceededReplayIncomplete,
                    "the run budget ran out mid-replay; what landed stays and the next sweep \
                 resumes the replay"
                        .into(),
                ),
                (ReapOutcome::NotClaimed, Some(ReapError::ClaimNotAcquired { reason, .. })) => {
                    match reason {
                        ClaimRefusal::Busy => (
                            ReasonCode::NotClaimedBusy,
                            "another sweep holds the run's claim; left to it".into(),
                        ),
                        ClaimRefusal::Terminal => (
                            ReasonCode::NotClaimedTerminal,
                            "the run was already terminal when claimed; nothing to do".into(),
                        ),
                        ClaimRefusal::Unknown => (
                            ReasonCode::NotClaimedRunMissing,
                            "the run's record is gone; nothing to do".into(),
                        ),
                        ClaimRefusal::Superseded => (
                            ReasonCode::NotClaimedViewerReturned,
                            "a viewer came back before the claim: the run is attached again; left \
                         alone"
                                .into(),
                        ),
                    }
                }
                (ReapOutcome::NotClaimed, Some(ReapError::ClaimLost { .. })) => (
                    ReasonCode::NotClaimedClaimLost,
                    format!("{}; the newer holder finishes the run", error()).into(),
                ),
                (ReapOutcome::NotClaimed, _) => (
                    ReasonCode::NotClaimedStillRunning,
                    format!("the drive ended but the store shows the run {status}; left alone")
                        .into(),
                ),
                (ReapOutcome::ReclaimFailed, Some(ReapError::ReclaimFailed(_))) => {
                    (ReasonCode::ReclaimFailedDestroyFailed, error().into())
                }
                (ReapOutcome::ReclaimFailed, _) => (
                    ReasonCode::ReclaimFailedError,
                    format!("{}; the reclaim ledger retries it every sweep", error()).into(),
                ),
                (ReapOutcome::Failed, Some(e)) => (
                    match e {
                        ReapError::TerminalNotConfirmed { .. } => {
                            ReasonCode::FailedTerminalNotConfirmed
                        }
                        ReapError::Probe(_) => ReasonCode::FailedProbeError,
                        ReapError::NeverQuiesced { .. } => ReasonCode::FailedNeverQuiesced,
                        ReapError::Drive(_) => ReasonCode::FailedDriveError,
                        ReapError::Ledger(_) => ReasonCode::FailedLedgerUnavailable,
                        _ => ReasonCode::FailedStoreError,
                    },
                    error().into(),
                ),
                (ReapOutcome::Failed, None) => (ReasonCode::FailedStoreError, "".into()),
            };
        Reason::new(code, message)
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReapReport {
    /// Runs taken from the listing and processed (after the `max_runs` cap and the deadline).
    pub considered: usize,
    /// Calls to the exit probe, including ones that failed.
    pub probed: usize,
    /// Stopped sandboxes this sweep started to read their journals, and what became of them.
    #[serde(skip_serializing_if = "StartReport::is_empty")]
    pub starts: StartReport,
    /// Runs in the batch not started because the deadline left too little time for them.
    pub deferred: usize,
    /// How many runs had each outcome.
    pub outcomes: OutcomeCounts,
    /// One entry per run handled.
    pub runs: Vec<ReapRunEntry>,
    /// Rows the listing matched but could not read: reported, never swept, never fatal.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub corrupt: Vec<CorruptRow>,
    /// Why the listing itself failed (a store error, a damaged database): no run was swept, and
    /// that is not a clean sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listing_error: Option<String>,
    /// The database is damaged (a malformed page, a table missing or of the wrong shape): the
    /// sweep stopped at the first sign of it, recording no run terminal and destroying no
    /// sandbox after it. The first damage seen, with what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// The reclaim ledger: what this sweep retried, and what is still pending or leaked.
    pub reclaims: ReclaimReport,
    /// The runs' history this sweep wrote and pruned (absent when it did neither).
    #[serde(skip_serializing_if = "HistoryReport::is_empty")]
    pub history: HistoryReport,
    /// The figures an operator sets objectives on.
    pub slo: SweepSlo,
    /// How many runs were in flight and why (the sizing's choice).
    pub concurrency: ConcurrencyReport,
    /// Where the next sweep resumes the round-robin among runs inside the TTL: pass it back as
    /// [`ReapOptions::resume_after`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<ReclaimableCursor>,
}

/// The stopped sandboxes of one sweep (see [`ReapOptions::max_starts_per_sweep`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartReport {
    /// Sandboxes started (or resumed) to read a journal: each counts against the cap.
    pub started: usize,
    /// Of those, put back to the state they were in (stopped, paused) after the read; the rest
    /// were destroyed with their terminal run, or the stop failed (`restoreFailed`).
    pub restored: usize,
    /// Returning a started sandbox to its state failed: it runs until its provider's own
    /// auto-stop or timeout (its run's next sweep tries again if it is still detached).
    pub restore_failed: usize,
    /// Stopped sandboxes left stopped because the cap or the deadline was reached (their runs
    /// wait for a later sweep).
    pub capped: usize,
}

impl StartReport {
    /// Whether the sweep found nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == StartReport::default()
    }

    fn add(&mut self, other: StartReport) {
        self.started += other.started;
        self.restored += other.restored;
        self.restore_failed += other.restore_failed;
        self.capped += other.capped;
    }
}

/// Service-level figures of one sweep: how big and how old the backlog is, and how long runs
/// waited for the reaper. The agent's own finish time is not known out of band (the sentinel
/// carries none), so a finalization is measured from the detach, the earliest moment the run
/// could have finished unobserved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepSlo {
    /// Detached runs waiting (corrupt rows included), counted by the store up to
    /// [`ReapOptions::backlog_count_max`]; see `backlog_exact`.
    pub backlog: usize,
    /// Whether `backlog` is the whole backlog. `false`: at least that many (the count stopped at
    /// its bound, or the store cannot count and `backlog` is what this sweep's listing read).
    pub backlog_exact: bool,
    /// How long the oldest listed run has been detached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_detached_ms: Option<i64>,
    /// Of the runs finalized by this sweep, the longest time from detach to finalization.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_detached_to_finalized_ms: Option<i64>,
    /// Of the expired runs whose sandbox this sweep destroyed, the longest time from the end of
    /// their TTL to the confirmed destroy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ttl_to_destroyed_ms: Option<i64>,
}

impl SweepSlo {
    fn observe(&mut self, entry: &ReapRunEntry, record: &RunRecord, now: EpochMs, ttl_ms: u64) {
        let Some(detached) = record.detached_since else {
            return;
        };
        let max = |slot: &mut Option<i64>, v: i64| *slot = Some(slot.map_or(v, |s| s.max(v)));
        match entry.outcome {
            ReapOutcome::Finalized => max(
                &mut self.max_detached_to_finalized_ms,
                now.saturating_sub(detached).max(0),
            ),
            ReapOutcome::Expired if entry.sandbox == Some(SandboxFate::Destroyed) => max(
                &mut self.max_ttl_to_destroyed_ms,
                now.saturating_sub(detached.saturating_add(ttl_ms as i64))
                    .max(0),
            ),
            _ => {}
        }
    }
}

/// The reclaim ledger's part of a report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimReport {
    /// Entries this sweep acted on: aftermaths left by a crash, or destroys that failed before.
    pub retried: usize,
    /// Of those, settled: the sandbox is confirmed gone (or not ours), the entry resolved.
    pub settled: usize,
    /// Of those, still unsettled (the destroy failed again, or a store call did).
    pub failed: usize,
    /// Entries skipped because another sweep holds the run's claim right now.
    pub busy: usize,
    /// Due entries left for the next sweep (the deadline or a shutdown came first).
    pub deferred: usize,
    /// The ledger after the sweep. Absent when it could not be read (see `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerCounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Why the ledger could not be read.
    pub error: Option<String>,
    /// A dry run: what a sweep would do with each due entry, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<crate::plan::PlannedRetry>,
}

impl ReclaimReport {
    /// Sandboxes that may be running with nobody to stop them but the ledger's retries, or
    /// `None` when the ledger could not be read.
    pub fn leaked(&self) -> Option<u64> {
        self.ledger.map(|l| l.leaked)
    }
}

/// The history part of a report: entries written (one per run touched) and pruned past the
/// retention. A failure here is reported, never fatal: the runs' outcomes stand.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryReport {
    /// Entries written (0 when the write failed or the store keeps no history).
    pub recorded: usize,
    /// Entries past the retention deleted by this sweep.
    pub pruned: u64,
    /// Whether the sweep's own record ([`crate::sweeps::SweepRecord`]) was written with them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sweep_recorded: bool,
    /// Why writing or pruning the history failed (the store's error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl HistoryReport {
    /// Nothing recorded, pruned or failed (the report leaves the field out).
    pub fn is_empty(&self) -> bool {
        *self == HistoryReport::default()
    }
}

/// A stored run that did not parse.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CorruptRow {
    /// The run (or store key) it belongs to, when the store could tell.
    pub key: Option<String>,
    /// Why it does not parse.
    pub error: String,
}

impl ReapReport {
    pub(crate) fn push(&mut self, entry: ReapRunEntry) {
        // One line per run with its reason, so a log alone tells why a run was left or reaped.
        let (code, why) = (entry.reason.code.as_str(), &*entry.reason.message);
        match entry.outcome {
            ReapOutcome::Producing | ReapOutcome::NotClaimed => {
                tracing::debug!(target: "reaper", run_id = %entry.run_id, outcome = %entry.outcome, reason = code, why, "run left alone")
            }
            _ => {
                tracing::info!(target: "reaper", run_id = %entry.run_id, outcome = %entry.outcome, reason = code, why, "run reaped")
            }
        }
        *self.outcomes.slot(entry.outcome) += 1;
        self.runs.push(entry);
    }
}

/// The ports a sweep runs on. Hold them as `Arc<dyn …>` in one plain struct.
#[derive(Clone)]
pub struct ReapDeps {
    /// Where the runs are.
    pub runs: Arc<dyn RunStore>,
    /// The runs' delivery logs.
    pub logs: Arc<dyn DeliveryLog>,
    /// The sweep's single-flight lease.
    pub leases: Arc<dyn LeaseStore>,
    /// Durable reclaim intents: written before every terminal write, retried every sweep.
    pub ledger: Arc<dyn ReclaimLedger>,
    /// Reads a run's journal for its exit.
    pub probe: Arc<dyn ExitProbe>,
    /// Replays a finished run's output into its log.
    pub drive: Arc<dyn Drive>,
    /// Optional: without it, terminal runs keep their sandboxes.
    pub reclaim: Option<Arc<dyn Reclaim>>,
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// Waits (the quiet window, retries).
    pub sleeper: Arc<dyn Sleeper>,
    /// The damage latch: the sweep guards its own ports with it, and a composition guards the
    /// stores its drive and reclaimer write to with the same one (see [`crate::damage`]), so
    /// damage seen anywhere stops every terminal write and destroy after it.
    pub damage: crate::damage::Damage,
}

impl ReapDeps {
    /// These ports behind the damage latch (idempotent in effect: a guarded port guarded again
    /// shares the latch).
    pub fn guarded(&self) -> ReapDeps {
        use crate::damage::Guarded;
        let damage = &self.damage;
        ReapDeps {
            runs: Guarded::new(self.runs.clone(), damage),
            logs: Guarded::new(self.logs.clone(), damage),
            ledger: Guarded::new(self.ledger.clone(), damage),
            reclaim: self
                .reclaim
                .clone()
                .map(|r| Guarded::new(r, damage) as Arc<dyn Reclaim>),
            ..self.clone()
        }
    }

    /// The default composition over one store backing every port: the journal probe, the
    /// journal replay drive and the sandbox reclaimer, all over `provider` (one provider or a
    /// [`crate::ProviderSet`]), reading journals in `journal_dir` (`None`: the default).
    pub fn journaled<S>(
        store: Arc<S>,
        provider: Arc<dyn crate::ports::SandboxProvider>,
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
        journal_dir: Option<String>,
    ) -> ReapDeps
    where
        S: RunStore
            + DeliveryLog
            + LeaseStore
            + ReclaimLedger
            + crate::ports::SandboxInstanceStore
            + crate::ports::MessageStore
            + 'static,
    {
        use crate::damage::Guarded;
        let damage = crate::damage::Damage::default();
        // The drive's and the reclaimer's own writes share the sweep's damage latch.
        let guarded = Guarded::new(store.clone(), &damage);
        let probe = crate::probe::JournalExitProbe::new(
            provider.clone(),
            store.clone(),
            crate::probe::ProbeOptions {
                dir: journal_dir.clone(),
                ..Default::default()
            },
        );
        let drive = crate::replay::JournalReplayDrive::new(
            crate::replay::ReplayDeps {
                runs: guarded.clone(),
                instances: guarded.clone(),
                provider: provider.clone(),
                logs: guarded.clone(),
                messages: guarded.clone(),
                clock: clock.clone(),
                sleeper: sleeper.clone(),
            },
            crate::replay::ReplayOptions {
                journal_dir,
                ..Default::default()
            },
        );
        ReapDeps {
            runs: store.clone(),
            logs: store.clone(),
            leases: store.clone(),
            ledger: store.clone(),
            probe: Arc::new(probe),
            drive: Arc::new(drive),
            reclaim: Some(Arc::new(crate::reclaim::SandboxReclaimer {
                provider,
                instances: guarded.clone(),
                runs: guarded,
            })),
            clock,
            sleeper,
            damage,
        }
    }
}

impl std::fmt::Debug for ReapDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReapDeps")
            .field("reclaim", &self.reclaim.is_some())
            .finish_non_exhaustive()
    }
}

/// The sweep's settings. Build with [`ReapOptions::new`] and validate with
/// [`ReapOptions::validate`] (done by every entry point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReapOptions {
    /// "Now" for the listing and the expiry cutoff. `None` reads the injected clock.
    pub now: Option<EpochMs>,
    /// Required: a detached run older than this is expired. There is no default.
    pub detached_run_ttl_ms: u64,
    /// How long one drive may take once armed.
    pub run_budget_ms: u64,
    /// The hard cap on runs per sweep.
    pub max_runs: usize,
    /// The quiet window before a drive appends.
    pub fence_quiet_ms: u64,
    /// The invocation's end. The sweep never starts a run that cannot finish before it.
    pub deadline: Option<EpochMs>,
    /// Time kept for one run when checking the deadline. Default: the worst case of a drive
    /// (budget plus one quiet window) plus a second for the surrounding requests.
    pub per_run_reserve_ms: Option<u64>,
    /// Who holds leases taken by this sweep (host, process, invocation).
    pub owner: String,
    /// The TTL of a run's claim lease, renewed every third of it while held. Default: the run
    /// budget plus the quiet window's worst case, so a crashed holder frees the run soon after.
    pub claim_ttl_ms: Option<u64>,
    /// Reclaim-ledger entries retried per sweep, at most (they share the deadline with runs).
    pub max_reclaim_retries: usize,
    /// The cap on runs in flight at once (probes waiting on slow sandbox hosts overlap). Within
    /// it, the sweep sizes the runs in flight from the provider's observed latency, failures,
    /// the time left and [`Self::concurrency_limits`] ([`crate::concurrency`]). Each run still
    /// holds its own claim; 1 is the reference's one-at-a-time sweep.
    pub concurrency: usize,
    /// The platform's and the providers' limits on runs in flight, passed by the handler.
    pub concurrency_limits: ConcurrencyLimits,
    /// The deadline of a probe and of a reclaim (see [`DEFAULT_STEP_TIMEOUT_MS`]).
    pub step_timeout_ms: u64,
    /// Where the round-robin among runs inside the TTL resumes: the previous sweep's
    /// [`ReapReport::cursor`]. `None` starts from the longest detached.
    pub resume_after: Option<ReclaimableCursor>,
    /// The backlog figure counts at most this many detached runs (one bounded request per sweep
    /// whatever the backlog; 0 skips the count and reports the rows the listing read).
    pub backlog_count_max: u64,
    /// Stopped sandboxes (Daytona's auto-stop, E2B's pause, Vercel's persistence) this sweep may
    /// start to read a run's journal, at most; 0 never starts one. A run past its TTL may start
    /// its sandbox; a run inside it only with [`Self::start_stopped_inside_ttl`]. Each started
    /// sandbox is put back to its state afterwards, or destroyed with its terminal run.
    pub max_starts_per_sweep: usize,
    /// Also start the stopped sandbox of a run inside its TTL whose probe cannot tell (the
    /// journal of a stopped sandbox is unreadable): finds finished runs before their TTL at
    /// the cost of a start each. Off by default: such a run waits for its TTL.
    pub start_stopped_inside_ttl: bool,
    /// A dry run: report what a sweep would do with each run and each due ledger entry, and
    /// why, writing nothing and touching no sandbox beyond read-only probes. The core enforces
    /// it: the sweep takes no lease, and its ports refuse every write, start and destroy.
    pub dry_run: bool,
    /// How long runs' history entries are kept (see [`crate::history`]); each sweep deletes
    /// older ones, at most [`Self::history_prune_batch`] of them. 0 keeps no history at all:
    /// the sweep writes none and prunes none.
    pub history_retention_ms: u64,
    /// History entries past the retention one sweep deletes at most.
    pub history_prune_batch: usize,
}

impl ReapOptions {
    /// The defaults, with the detached-run TTL and the lease owner's name given.
    pub fn new(detached_run_ttl_ms: u64, owner: impl Into<String>) -> Self {
        ReapOptions {
            now: None,
            detached_run_ttl_ms,
            run_budget_ms: DEFAULT_RUN_BUDGET_MS,
            max_runs: DEFAULT_MAX_RUNS,
            fence_quiet_ms: DEFAULT_FENCE_QUIET_MS,
            deadline: None,
            per_run_reserve_ms: None,
            owner: owner.into(),
            claim_ttl_ms: None,
            max_reclaim_retries: DEFAULT_MAX_RECLAIM_RETRIES,
            concurrency: DEFAULT_CONCURRENCY,
            concurrency_limits: ConcurrencyLimits::default(),
            step_timeout_ms: DEFAULT_STEP_TIMEOUT_MS,
            resume_after: None,
            backlog_count_max: DEFAULT_BACKLOG_COUNT_MAX,
            max_starts_per_sweep: DEFAULT_MAX_STARTS_PER_SWEEP,
            start_stopped_inside_ttl: false,
            dry_run: false,
            history_retention_ms: crate::history::DEFAULT_HISTORY_RETENTION_MS,
            history_prune_batch: crate::history::DEFAULT_HISTORY_PRUNE_BATCH,
        }
    }

    /// Rejects settings that cannot run, before any run is touched.
    pub fn validate(&self) -> Result<(), OptionsError> {
        let bad = |option, problem: String| Err(OptionsError { option, problem });
        if self.run_budget_ms == 0 || self.run_budget_ms > MAX_DURATION_MS {
            return bad(
                "run_budget_ms",
                format!(
                    "{} is out of range: use 1..={MAX_DURATION_MS} milliseconds",
                    self.run_budget_ms
                ),
            );
        }
        if self.fence_quiet_ms > MAX_DURATION_MS {
            return bad(
                "fence_quiet_ms",
                format!(
                    "{} is out of range: use 0..={MAX_DURATION_MS} milliseconds",
                    self.fence_quiet_ms
                ),
            );
        }
        if self.detached_run_ttl_ms > i64::MAX as u64 / 2 {
            return bad(
                "detached_run_ttl_ms",
                format!("{} is too large", self.detached_run_ttl_ms),
            );
        }
        if self.step_timeout_ms == 0 || self.step_timeout_ms > MAX_DURATION_MS {
            return bad(
                "step_timeout_ms",
                format!(
                    "{} is out of range: use 1..={MAX_DURATION_MS} milliseconds",
                    self.step_timeout_ms
                ),
            );
        }
        if self.concurrency == 0 || self.concurrency > MAX_CONCURRENCY {
            return bad(
                "concurrency",
                format!(
                    "{} is out of range: use 1..={MAX_CONCURRENCY} runs in flight",
                    self.concurrency
                ),
            );
        }
        if self.owner.trim().is_empty() {
            return bad("owner", "must name this host or invocation".into());
        }
        if let Some(ttl) = self.claim_ttl_ms {
            if ttl == 0 || ttl > MAX_DURATION_MS {
                return bad(
                    "claim_ttl_ms",
                    format!("{ttl} is out of range: use 1..={MAX_DURATION_MS} milliseconds"),
                );
            }
        }
        Ok(())
    }

    /// Time kept for one run when checking the deadline: [`ReapOptions::worst_case_run_ms`]
    /// unless set.
    pub fn reserve_ms(&self) -> u64 {
        self.per_run_reserve_ms
            .unwrap_or_else(|| self.worst_case_run_ms())
    }

    /// The longest one run can take, from the same bounds the sweep enforces: the probe's step
    /// deadline, the quiet wait's worst case, the drive's budget, the reclaim's step deadline and
    /// the store requests around them. A platform that plans its batch with this never starts a
    /// run that overruns its kill.
    pub fn worst_case_run_ms(&self) -> u64 {
        let quiet_worst =
            self.fence_quiet_ms * (u64::from(crate::claim::MAX_QUIESCENCE_PROBES) + 1);
        self.step_timeout_ms
            .saturating_add(quiet_worst)
            .saturating_add(self.run_budget_ms)
            .saturating_add(self.step_timeout_ms)
            .saturating_add(STORE_ALLOWANCE_MS)
    }

    /// How long a run's claim lasts before it must be renewed.
    pub fn claim_ttl(&self) -> u64 {
        self.claim_ttl_ms.unwrap_or(
            self.run_budget_ms
                + self.fence_quiet_ms * (u64::from(crate::claim::MAX_QUIESCENCE_PROBES) + 1)
                + 10_000,
        )
    }
}

/// Whether a sweep ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum SweepStatus {
    /// This invocation held the sweep lease and swept.
    Swept,
    /// Another sweep holds the lease: nothing was done. Not an error.
    AlreadyRunning {
        /// The lease holder.
        holder: String,
        #[serde(rename = "expiresAt")]
        /// When its lease lapses.
        expires_at: EpochMs,
    },
    /// The lease store failed: nothing was done.
    LeaseUnavailable {
        /// What the lease store answered.
        error: String,
    },
    /// The options were invalid: nothing was done.
    InvalidOptions {
        /// What is wrong.
        error: String,
    },
    /// A dry run ([`ReapOptions::dry_run`]): the entries say what a sweep would do; nothing was
    /// written and no sandbox touched beyond read-only probes.
    DryRun,
    /// An operator paused the sweeps ([`crate::pause`]): nothing was done.
    Paused {
        /// Who paused them (the operator's name or host, as recorded).
        by: String,
        /// When the pause was recorded.
        since: EpochMs,
        /// Why, when the operator said.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// The version of the sweep report's JSON shape, carried as `schemaVersion` and described by
/// `shared/reaper-core/schema/sweep-report.schema.json`. Raised when a field changes meaning or
/// goes away; new fields and new reason codes keep it.
pub const SWEEP_REPORT_SCHEMA_VERSION: u32 = 1;

/// The report of a single-flight sweep. Its JSON starts with `schemaVersion`.
#[derive(Debug, Clone)]
pub struct SweepReport {
    /// Whether the sweep ran.
    pub sweep: SweepStatus,
    /// When it started.
    pub started_at: EpochMs,
    /// How long it took.
    pub duration_ms: i64,
    /// What it did to each run.
    pub report: ReapReport,
}

impl Serialize for SweepReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A wire view rather than a field, so the version cannot be set wrong by a caller.
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            schema_version: u32,
            sweep: &'a SweepStatus,
            started_at: EpochMs,
            duration_ms: i64,
            #[serde(flatten)]
            report: &'a ReapReport,
        }
        Wire {
            schema_version: SWEEP_REPORT_SCHEMA_VERSION,
            sweep: &self.sweep,
            started_at: self.started_at,
            duration_ms: self.duration_ms,
            report: &self.report,
        }
        .serialize(serializer)
    }
}

/// A single-flight sweep: takes the sweep-wide lease (TTL `lease_ttl_ms`, renewed between runs),
/// sweeps, and releases. When another sweep holds the lease, returns at once saying so.
/// Overlapping scheduled triggers, retries and a manual run never sweep the same runs at once.
///
/// # Example
///
/// One sweep over the in-memory store: a run detached an hour ago, past a 30-minute TTL and
/// with no sandbox recorded, is expired.
///
/// ```
/// use std::sync::Arc;
/// use reaper_core::memory::MemoryStore;
/// use reaper_core::reap::{sweep, ReapDeps, ReapOptions, ReapOutcome, SweepStatus};
/// use reaper_core::time::ManualClock;
/// use reaper_core::{NewRun, Patch, RunPatch, RunStore};
/// use reaper_testkit::fakes::{FakeProvider, TokioSleeper};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let now = 1_700_000_000_000;
/// let store = Arc::new(MemoryStore::new());
/// let hour_ago = now - 3_600_000;
/// store
///     .create_or_resume(NewRun {
///         run_id: "run-1".into(),
///         thread_id: "thread-1".into(),
///         started_at: hour_ago,
///         status: None,
///     })
///     .await
///     .unwrap();
/// let detach = RunPatch {
///     detached_since: Patch::Set(hour_ago),
///     ..Default::default()
/// };
/// store.update("run-1", detach).await.unwrap();
///
/// let deps = ReapDeps::journaled(
///     store.clone(),
///     Arc::new(FakeProvider::new("local")),
///     Arc::new(ManualClock::new(now)),
///     Arc::new(TokioSleeper),
///     None,
/// );
/// let options = ReapOptions::new(30 * 60 * 1000, "example-sweeper");
/// let report = sweep(&deps, &options, 60_000).await;
///
/// assert_eq!(report.sweep, SweepStatus::Swept);
/// assert_eq!(report.report.runs[0].outcome, ReapOutcome::Expired);
/// let run = store.get("run-1").await.unwrap().unwrap();
/// assert!(run.status.is_terminal(), "expired: {:?}", run.status);
/// # }
/// ```
pub async fn sweep(deps: &ReapDeps, options: &ReapOptions, lease_ttl_ms: u64) -> SweepReport {
    sweep_until(deps, options, lease_ttl_ms, None).await
}

/// [`sweep`] that stops at the next run boundary once `stop` is cancelled (a long-running
/// process shutting down): the run in progress finishes, the rest of the batch is reported
/// `deferred`, and the lease is released.
pub async fn sweep_until(
    deps: &ReapDeps,
    options: &ReapOptions,
    lease_ttl_ms: u64,
    stop: Option<&CancellationToken>,
) -> SweepReport {
    let started_at = deps.clock.now_ms();
    let done = |sweep, report| SweepReport {
        sweep,
        started_at,
        duration_ms: deps.clock.now_ms() - started_at,
        report,
    };
    if let Err(e) = options.validate() {
        return done(
            SweepStatus::InvalidOptions {
                error: e.to_string(),
            },
            ReapReport::default(),
        );
    }
    if options.dry_run {
        // No lease either: a dry run beside a real sweep is harmless, and takes nothing from it.
        let report = crate::plan::plan_sweep(deps, options).await;
        return done(SweepStatus::DryRun, report);
    }
    // Before the lease: a paused reaper writes nothing at all.
    match crate::pause::read_pause(deps.leases.as_ref()).await {
        Ok(Some(mark)) if mark.paused => {
            tracing::info!(target: "reaper", by = %mark.by, since = mark.at, reason = mark.reason.as_deref(), "sweeping is paused; nothing done (reaper resume ends the pause)");
            return done(
                SweepStatus::Paused {
                    by: mark.by,
                    since: mark.at,
                    reason: mark.reason,
                },
                ReapReport::default(),
            );
        }
        Ok(_) | Err(StoreError::Unsupported(_)) => {}
        Err(error) => {
            // Fail closed: an operator may have paused for a reason this sweep cannot read.
            tracing::error!(target: "reaper", %error, "reading the pause mark failed; not sweeping");
            return done(
                SweepStatus::LeaseUnavailable {
                    error: format!(
                        "reading the pause mark failed, so nothing was swept: {error} (reaper \
                         resume rewrites a mark that does not parse)"
                    ),
                },
                ReapReport::default(),
            );
        }
    }
    let lease = match deps
        .leases
        .acquire(SWEEP_LEASE_KEY, &options.owner, started_at, lease_ttl_ms)
        .await
    {
        Ok(LeaseGrant::Acquired(lease)) => lease,
        Ok(LeaseGrant::Held { owner, expires_at }) => {
            tracing::info!(target: "reaper", holder = %owner, expires_at, "another sweep holds the lease; skipping this one");
            return done(
                SweepStatus::AlreadyRunning {
                    holder: owner,
                    expires_at,
                },
                ReapReport::default(),
            );
        }
        Err(error) => {
            tracing::error!(target: "reaper", %error, "taking the sweep lease failed");
            return done(
                SweepStatus::LeaseUnavailable {
                    error: error.to_string(),
                },
                ReapReport::default(),
            );
        }
    };
    // A caller that keeps no state between sweeps (Lambda, Vercel, a cron-run CLI) resumes the
    // round robin from the cursor the last sweep left with the lease: one read and at most one
    // write per sweep, none per run.
    let noted = match options.resume_after {
        Some(_) => None,
        None => read_cursor_note(deps).await,
    };
    let resumed;
    let options = match &noted {
        Some(cursor) => {
            resumed = ReapOptions {
                resume_after: Some(cursor.clone()),
                ..options.clone()
            };
            &resumed
        }
        None => options,
    };
    let report = reap_with(deps, options, Some((lease.clone(), lease_ttl_ms)), stop).await;
    write_cursor_note(
        deps,
        &lease,
        options.resume_after.as_ref(),
        report.cursor.as_ref(),
    )
    .await;
    if let Err(error) = deps.leases.release(&lease).await {
        tracing::warn!(target: "reaper", %error, "releasing the sweep lease failed; it will expire");
    }
    done(SweepStatus::Swept, report)
}

/// The cursor the last sweep left with the sweep lease. Never fatal: a store without notes, a
/// failed read or a note this build cannot decode (another version's) restarts the round robin.
pub(crate) async fn read_cursor_note(deps: &ReapDeps) -> Option<ReclaimableCursor> {
    let note = match deps.leases.note(SWEEP_LEASE_KEY).await {
        Ok(note) => note?,
        Err(StoreError::Unsupported(_)) => return None,
        Err(error) => {
            tracing::warn!(target: "reaper", %error, "reading the listing cursor kept with the sweep lease failed; the round robin restarts");
            return None;
        }
    };
    match serde_json::from_str(&note) {
        Ok(cursor) => Some(cursor),
        Err(error) => {
            tracing::warn!(target: "reaper", %error, note = %note, "the listing cursor kept with the sweep lease is malformed; the round robin restarts");
            None
        }
    }
}

/// Leaves the sweep's cursor with the sweep lease for the next sweep, while this sweep still
/// holds it (a sweep that lost the lease must not rewind its successor). Skipped when the cursor
/// did not move.
async fn write_cursor_note(
    deps: &ReapDeps,
    lease: &crate::ports::Lease,
    started_from: Option<&ReclaimableCursor>,
    cursor: Option<&ReclaimableCursor>,
) {
    let Some(cursor) = cursor.filter(|c| Some(*c) != started_from) else {
        return;
    };
    let note = match serde_json::to_string(cursor) {
        Ok(note) => note,
        Err(error) => {
            tracing::warn!(target: "reaper", %error, "encoding the listing cursor failed");
            return;
        }
    };
    match deps.leases.set_note(lease, &note).await {
        Ok(true) | Err(StoreError::Unsupported(_)) => {}
        Ok(false) => {
            tracing::warn!(target: "reaper", "the sweep lease was lost; the next sweep resumes from its holder's cursor, not this one's")
        }
        Err(error) => {
            tracing::warn!(target: "reaper", %error, "keeping the listing cursor with the sweep lease failed; the next stateless sweep resumes from an older position")
        }
    }
}

/// One sweep without the single-flight lease (spec B). Invalid options are rejected up front
/// with an error; everything after that is an entry in the report.
pub async fn reap_detached_runs(
    deps: &ReapDeps,
    options: &ReapOptions,
) -> Result<ReapReport, OptionsError> {
    options.validate()?;
    Ok(reap_with(deps, options, None, None).await)
}

async fn reap_with(
    deps: &ReapDeps,
    options: &ReapOptions,
    mut sweep_lease: Option<(crate::ports::Lease, u64)>,
    stop: Option<&CancellationToken>,
) -> ReapReport {
    // Damage seen anywhere stops every terminal write and destroy after it.
    let guarded = deps.guarded();
    let deps = &guarded;
    let mut report = ReapReport::default();
    let started_at = deps.clock.now_ms();
    let now = options.now.unwrap_or(started_at);
    // Unique per sweep: the lease's grant token changes on every grant.
    let sweep_id = match &sweep_lease {
        Some((lease, _)) => format!("{now}-{}", lease.token),
        None => format!("{now}-{}", options.owner),
    };
    // Leaks first: a sandbox whose destroy failed, or whose sweep crashed before the destroy,
    // bills every minute, and its retry costs no probe.
    let mut retried = Vec::new();
    retry_reclaims(deps, options, stop, &mut report.reclaims, &mut retried).await;
    reap_listed(deps, options, now, &mut sweep_lease, stop, &mut report).await;
    match deps.ledger.ledger_counts().await {
        Ok(counts) => report.reclaims.ledger = Some(counts),
        Err(error) => {
            tracing::error!(target: "reaper", %error, "reading the reclaim ledger's counts failed");
            report
                .reclaims
                .error
                .get_or_insert_with(|| error.to_string());
        }
    }
    let o = &report.outcomes;
    let r = &report.reclaims;
    tracing::info!(
        target: "reaper",
        considered = report.considered,
        probed = report.probed,
        deferred = report.deferred,
        finalized = o.finalized,
        expired = o.expired,
        producing = o.producing,
        unknown = o.unknown,
        budget_exceeded = o.budget_exceeded,
        not_claimed = o.not_claimed,
        reclaim_failed = o.reclaim_failed,
        failed = o.failed,
        corrupt = report.corrupt.len(),
        backlog = report.slo.backlog,
        backlog_exact = report.slo.backlog_exact,
        oldest_detached_ms = report.slo.oldest_detached_ms,
        reclaims_retried = r.retried,
        reclaims_settled = r.settled,
        reclaims_pending = r.ledger.map(|l| l.pending),
        sandboxes_leaked = r.leaked(),
        "sweep complete"
    );
    report.damaged = deps.damage.seen();
    if let Some(damage) = &report.damaged {
        tracing::error!(target: "reaper", %damage, "the sweep stopped at damage in the database: no run was recorded terminal and no sandbox destroyed after it; the runs it did not reach are deferred");
    }
    // Last, so the sweep's record carries its whole outcome (a failed listing, damage).
    record_history(deps, options, &sweep_id, started_at, &retried, &mut report).await;
    report
}

/// Writes one history entry per run this sweep touched (the listing's runs and the ledger's
/// retries, one entry per run) except runs left `producing`, then prunes entries past the
/// retention in one bounded batch. A producing run is the healthy case with nothing done: an
/// entry per such run and sweep would cost a store write each (10,000 writes a minute for
/// 10,000 working agents) and say nothing the report's count does not.
/// Never fatal: a failure is logged and reported in [`ReapReport::history`], and every outcome
/// already written stands.
async fn record_history(
    deps: &ReapDeps,
    options: &ReapOptions,
    sweep_id: &str,
    started_at: EpochMs,
    retried: &[(String, bool)],
    report: &mut ReapReport,
) {
    use crate::history::{HistoryEntry, RECLAIM_RETRY_OUTCOME};
    // A dry run writes nothing, its history included.
    if options.history_retention_ms == 0 || options.dry_run {
        return;
    }
    let at = deps.clock.now_ms();
    let entry = |run_id: &str, outcome: &str, code: &str, reason: String| HistoryEntry {
        run_id: run_id.to_string(),
        sweep_id: sweep_id.to_string(),
        at,
        host: options.owner.clone(),
        outcome: outcome.to_string(),
        reason_code: code.to_string(),
        reason,
        sandbox: None,
        ledger: Vec::new(),
    };
    let mut entries: Vec<HistoryEntry> = retried
        .iter()
        .map(|(run_id, settled)| {
            let (code, why, event) = if *settled {
                (
                    "reclaim-retry/settled",
                    "a retried reclaim settled the run's ledger entry",
                    "settled",
                )
            } else {
                (
                    "reclaim-retry/failed",
                    "a retried reclaim failed again; the ledger retries it later",
                    "rescheduled",
                )
            };
            let mut e = entry(run_id, RECLAIM_RETRY_OUTCOME, code, why.into());
            e.ledger = vec!["retried".into(), event.into()];
            e
        })
        .collect();
    // Where each run's entry is, so merging a retried run's entry costs no scan.
    let mut at_index: std::collections::HashMap<&str, usize> = retried
        .iter()
        .enumerate()
        .map(|(i, (run_id, _))| (run_id.as_str(), i))
        .collect();
    for run in report
        .runs
        .iter()
        .filter(|run| run.outcome != ReapOutcome::Producing)
    {
        let mut e = entry(
            &run.run_id,
            run.outcome.as_str(),
            run.reason.code.as_str(),
            run.reason.message.to_string(),
        );
        e.sandbox = run.sandbox.map(|f| f.as_str().to_string());
        // A terminal run's sandbox fate is settled through its ledger entry: recorded before the
        // terminal write, resolved once settled, rescheduled on a failed destroy.
        match run.sandbox {
            Some(SandboxFate::Leaked) => e.ledger = vec!["recorded".into(), "rescheduled".into()],
            Some(_) => e.ledger = vec!["recorded".into(), "resolved".into()],
            None if run.outcome == ReapOutcome::ReclaimFailed => {
                e.ledger = vec!["recorded".into(), "rescheduled".into()]
            }
            None => {}
        }
        // One entry per run and sweep: a run the ledger pass retried and the listing visited
        // keeps both stories in one entry.
        match at_index.get(run.run_id.as_str()) {
            Some(&i) => {
                let earlier = &mut entries[i];
                let mut ledger = std::mem::take(&mut earlier.ledger);
                ledger.append(&mut e.ledger);
                e.ledger = ledger;
                *earlier = e;
            }
            None => {
                at_index.insert(&run.run_id, entries.len());
                entries.push(e);
            }
        }
    }
    let before = at.saturating_sub(options.history_retention_ms.min(i64::MAX as u64) as i64);
    let failure = report
        .listing_error
        .as_ref()
        .map(|e| format!("the listing failed: {e}"))
        .or_else(|| {
            report
                .damaged
                .as_ref()
                .map(|d| format!("the sweep stopped at damage in the database: {d}"))
        });
    let record = crate::sweeps::SweepRecord {
        sweep_id: sweep_id.to_string(),
        host: options.owner.clone(),
        started_at,
        finished_at: at,
        duration_ms: at.saturating_sub(started_at),
        considered: report.considered,
        outcomes: report.outcomes,
        reclaims_retried: report.reclaims.retried,
        reclaims_settled: report.reclaims.settled,
        concurrency: report.concurrency.peak,
        concurrency_cap: report.concurrency.cap,
        dry_run: options.dry_run,
        failed: failure.is_some(),
        error: failure,
    };
    let write = crate::history::SweepHistory {
        entries,
        prune_before: before,
        prune_max: options.history_prune_batch,
        record: Some(record),
    };
    // One store call for the entries, the record and both retentions' prunes (D1: one batch,
    // one subrequest of the Worker's alarm; SQL stores: one transaction). A failed call wrote
    // nothing; a store that sends the parts apart says which failed.
    let done = deps
        .runs
        .write_sweep_history(&write)
        .await
        .unwrap_or_else(crate::history::SweepWritten::failed);
    let history = &mut report.history;
    history.recorded = done.recorded;
    history.sweep_recorded = done.sweep_recorded;
    history.pruned = done.pruned;
    // `Unsupported`: the store keeps no history, which is no failure.
    let failed = |e: Option<StoreError>| e.filter(|e| !matches!(e, StoreError::Unsupported(_)));
    if let Some(error) = failed(done.write_error) {
        tracing::warn!(target: "reaper", %error, entries = write.entries.len(), "writing the runs' history and the sweep's record failed; the sweep's outcomes stand");
        history.error = Some(format!(
            "writing the runs' history failed (the sweep's record with it): {error}"
        ));
    }
    if let Some(error) = failed(done.prune_error) {
        tracing::warn!(target: "reaper", %error, "pruning the runs' history failed; a later sweep prunes it");
        history
            .error
            .get_or_insert_with(|| format!("pruning the runs' history failed: {error}"));
    }
}

/// Whether the batch must stop before its next item: a shutdown, damage, or too little time
/// left.
pub(crate) fn out_of_time(
    deps: &ReapDeps,
    options: &ReapOptions,
    stop: Option<&CancellationToken>,
) -> bool {
    // Damage stops the sweep as a shutdown does: the runs not started are deferred.
    if stop.is_some_and(CancellationToken::is_cancelled) || deps.damage.seen().is_some() {
        return true;
    }
    options.deadline.is_some_and(|deadline| {
        deps.clock
            .now_ms()
            .saturating_add(options.reserve_ms() as i64)
            > deadline
    })
}

/// Listing requests one sweep sends at most, whatever the backlog (half of them at most for the
/// runs past the TTL).
const MAX_LISTING_REQUESTS: usize = 6;

/// The sweep's batch, in bounded pages, so a sweep reads only what it can use: first the runs
/// past the TTL, oldest first (they need no probe and free money), then the rest of the batch
/// from the round-robin cursor among the runs inside the TTL, wrapping around once. Every
/// detached run is therefore visited within ⌈backlog / batch⌉ sweeps, however long the runs
/// ahead of it keep producing. Returns the batch and the index of its first run inside the TTL.
pub(crate) async fn list_batch(
    deps: &ReapDeps,
    options: &ReapOptions,
    now: EpochMs,
    cutoff: EpochMs,
) -> Result<(ReclaimablePage, usize), crate::error::StoreError> {
    let limit = options.max_runs;
    let mut batch = ReclaimablePage::default();
    let mut known: HashSet<String> = HashSet::new();
    // Corrupt rows count toward a store's page, so a page can come back short of runs with more
    // behind it: the sweep pages on, within a fixed number of requests per sweep.
    let mut requests = 0;
    // The two ranges are disjoint and each page resumes strictly after the last, so no run is
    // read twice, except after the wrap: that pass stops at (and keeps nothing past) `upto`,
    // where the sweep started. Positions are compared in place, not collected in a set.
    let mut list = async |range: ReclaimableQuery,
                          upto: Option<&ReclaimableCursor>,
                          batch: &mut ReclaimablePage| {
        requests += 1;
        let page = deps.runs.list_reclaimable_page(range).await?;
        let unreadable = page.corrupt.len();
        let corrupt = page.corrupt.into_iter();
        // A store that cannot place corrupt rows reports them with every first page.
        batch
            .corrupt
            .extend(corrupt.filter(|e| known.insert(e.to_string())));
        let before = batch.runs.len();
        if before == 0 && upto.is_none() {
            // Usually the whole batch: taken as is, not copied into a growing vector.
            batch.runs = page.runs;
            return Ok((page.next, batch.runs.len() + unreadable, requests));
        }
        let runs = page.runs.into_iter();
        batch.runs.extend(runs.filter(|r| {
            upto.is_none_or(|u| {
                (r.detached_since, r.run_id.as_str()) <= (Some(u.detached_since), u.run_id.as_str())
            })
        }));
        let read = batch.runs.len() - before + unreadable;
        Ok::<_, crate::error::StoreError>((page.next, read, requests))
    };
    let mut after = None;
    while batch.runs.len() < limit {
        let range = ReclaimableQuery {
            detached_after: None,
            detached_until: cutoff,
            after: after.take(),
            limit: limit - batch.runs.len(),
        };
        match list(range, None, &mut batch).await? {
            (Some(next), _, sent) if sent < MAX_LISTING_REQUESTS / 2 => after = Some(next),
            _ => break,
        }
    }
    let fresh_from = batch.runs.len();
    let start = options.resume_after.as_ref();
    let mut after = start.cloned();
    let mut wrapped = start.is_none();
    while batch.runs.len() < limit {
        // After the wrap, up to where this sweep started.
        let upto = start.filter(|_| wrapped);
        let range = ReclaimableQuery {
            detached_after: Some(cutoff),
            detached_until: upto.map_or(now, |u| u.detached_since.min(now)),
            after: after.clone(),
            limit: limit - batch.runs.len(),
        };
        let (next, read, sent) = list(range, upto, &mut batch).await?;
        if sent >= MAX_LISTING_REQUESTS {
            break;
        }
        match next {
            Some(next) if read > 0 => after = Some(next),
            _ if wrapped => break,
            _ => {
                wrapped = true;
                after = None;
            }
        }
    }
    Ok((batch, fresh_from))
}

async fn reap_listed(
    deps: &ReapDeps,
    options: &ReapOptions,
    now: EpochMs,
    sweep_lease: &mut Option<(crate::ports::Lease, u64)>,
    stop: Option<&CancellationToken>,
    report: &mut ReapReport,
) {
    if !deps.runs.capabilities().list_reclaimable {
        tracing::debug!(target: "reaper", "the run store has no list_reclaimable; nothing to sweep");
        return;
    }
    let cutoff = now.saturating_sub(options.detached_run_ttl_ms as i64);
    let (candidates, fresh_from) = match list_batch(deps, options, now, cutoff).await {
        Ok(listed) => listed,
        Err(error) => {
            tracing::error!(target: "reaper", %error, "listing reclaimable runs failed");
            report.listing_error = Some(error.to_string());
            return;
        }
    };
    for error in candidates.corrupt {
        tracing::error!(target: "reaper", %error, "a detached run's record is corrupt; it is skipped");
        let key = match &error {
            crate::error::StoreError::Corrupt { key, .. } => Some(key.clone()),
            _ => None,
        };
        report.corrupt.push(CorruptRow {
            key,
            error: error.to_string(),
        });
    }
    let candidates = candidates.runs;
    let read = candidates.len() + report.corrupt.len();
    (report.slo.backlog, report.slo.backlog_exact) = count_backlog(deps, options, now, read).await;
    report.slo.oldest_detached_ms = candidates
        .iter()
        .filter_map(|r| r.detached_since)
        .min()
        .map(|d| now.saturating_sub(d).max(0));
    // Without any run started inside the TTL, the cursor stays where it was.
    report.cursor = options.resume_after.clone();
    let batch = &candidates[..candidates.len().min(options.max_runs)];
    // The sweep's cap on sandbox starts, shared by the runs in flight.
    let starts_left = AtomicUsize::new(options.max_starts_per_sweep);
    let starts_left = &starts_left;
    // Up to `concurrency` runs in flight, each under its own claim. Runs start in listing order,
    // each only after the deadline check; entries are reported in listing order whatever order
    // they finish in. Plain futures combinators: the same code runs on one Worker thread.
    let mut in_flight = FuturesUnordered::new();
    // Entries are reported in listing order: each goes straight into the report once every run
    // before it has; only the ones that finished ahead of an earlier run wait here.
    let mut ahead: std::collections::BTreeMap<usize, ReapRunEntry> = Default::default();
    let mut reported = 0;
    let mut last_fresh = None;
    report.runs.reserve(batch.len());
    let mut next = 0;
    let mut sizer = Sizer::new(options.concurrency, options.concurrency_limits.clone());
    // After a paced wait one run starts whatever the clock says, so a sleeper that does not
    // move the clock cannot stall the sweep.
    let mut waited = false;
    loop {
        let time_left = options.deadline.map(|deadline| {
            u64::try_from(deadline.saturating_sub(deps.clock.now_ms())).unwrap_or(0)
        });
        let want = sizer.in_flight(batch.len() - next, time_left);
        let mut pace = None;
        while in_flight.len() < want && next < batch.len() {
            if out_of_time(deps, options, stop) {
                report.deferred = batch.len() - next;
                tracing::info!(target: "reaper", deferred = report.deferred, deadline = options.deadline, "stopping at a run boundary; deferring the rest of the batch to the next sweep");
                next = batch.len();
                break;
            }
            // Starts are paced under the provider's rate limit.
            let started_at = deps.clock.now_ms();
            if let Some(at) = sizer
                .next_start_at()
                .filter(|&at| at > started_at && !waited)
            {
                pace = Some(u64::try_from(at - started_at).unwrap_or(0));
                break;
            }
            if let Some((lease, ttl)) = sweep_lease.as_mut() {
                renew_sweep_lease(deps, lease, *ttl).await;
            }
            report.considered += 1;
            let index = next;
            next += 1;
            if index >= fresh_from {
                // The round-robin position moves past every fresh run this sweep started.
                last_fresh = Some(index);
            }
            waited = false;
            sizer.started(started_at, in_flight.len() + 1);
            in_flight.push(async move {
                let mut counts = RunCounts::default();
                let entry = reap_one(
                    deps,
                    options,
                    &batch[index],
                    cutoff,
                    starts_left,
                    &mut counts,
                )
                .await;
                (index, entry, counts, deps.clock.now_ms())
            });
        }
        let finished = match pace {
            // Wait for the paced start or the next run to finish, whichever comes first.
            Some(ms) if !in_flight.is_empty() => {
                match select(in_flight.next(), Box::pin(deps.sleeper.sleep(ms))).await {
                    Either::Left((finished, _)) => finished,
                    Either::Right(_) => {
                        waited = true;
                        continue;
                    }
                }
            }
            Some(ms) => {
                deps.sleeper.sleep(ms).await;
                waited = true;
                continue;
            }
            None => in_flight.next().await,
        };
        let Some((index, entry, counts, finished_at)) = finished else {
            break;
        };
        if let Some(ms) = counts.provider_ms {
            sizer.observe(Observation {
                started_at: finished_at.saturating_sub(ms as i64),
                finished_at,
                failed: counts.provider_failed,
            });
        }
        report.probed += counts.probed;
        report.starts.add(counts.starts);
        report.slo.observe(
            &entry,
            &batch[index],
            finished_at,
            options.detached_run_ttl_ms,
        );
        if index == reported {
            report.push(entry);
            reported += 1;
            while let Some(entry) = ahead.remove(&reported) {
                report.push(entry);
                reported += 1;
            }
        } else {
            ahead.insert(index, entry);
        }
    }
    report.concurrency = sizer.report();
    debug_assert!(
        ahead.is_empty(),
        "every started run reports before the sweep ends"
    );
    if let Some(index) = last_fresh {
        report.cursor = ReclaimableCursor::of(&batch[index]);
    }
}

/// The backlog figure: the store's bounded count, or, when it cannot count, the rows this
/// sweep's listing read (then "at least", never exact).
pub(crate) async fn count_backlog(
    deps: &ReapDeps,
    options: &ReapOptions,
    now: EpochMs,
    read: usize,
) -> (usize, bool) {
    if options.backlog_count_max == 0 {
        return (read, false);
    }
    match deps
        .runs
        .count_reclaimable(None, now, options.backlog_count_max)
        .await
    {
        Ok(counted) => (
            usize::try_from(counted.count).unwrap_or(usize::MAX),
            counted.exact,
        ),
        Err(StoreError::Unsupported(_)) => (read, false),
        Err(error) => {
            tracing::warn!(target: "reaper", %error, "counting the backlog failed; reporting the rows this sweep read");
            (read, false)
        }
    }
}

/// Renews the sweep lease once more than half its TTL has passed (one request per long sweep,
/// not per run).
async fn renew_sweep_lease(deps: &ReapDeps, lease: &mut crate::ports::Lease, ttl: u64) {
    let now = deps.clock.now_ms();
    if lease.expires_at - now > (ttl / 2) as i64 {
        return;
    }
    match deps.leases.renew(lease, now, ttl).await {
        Ok(Some(renewed)) => *lease = renewed,
        Ok(None) => {
            tracing::warn!(target: "reaper", "the sweep lease was lost; per-run claims still keep runs single-writer")
        }
        Err(error) => tracing::warn!(target: "reaper", %error, "renewing the sweep lease failed"),
    }
}

/// What happened inside the claim.
struct Driven {
    /// The pipe's final record, and whether the store confirmed it.
    piped: Piped,
    budget_fired: bool,
    /// The ledger entry recorded before the drive.
    intent: ReclaimIntent,
}

/// What one run cost besides its entry, summed into the report.
#[derive(Default)]
struct RunCounts {
    probed: usize,
    starts: StartReport,
    /// Time spent in the provider's probe calls (on the injected clock), when one was made.
    provider_ms: Option<u64>,
    /// A probe failed or ran past its deadline.
    provider_failed: bool,
}

/// What one call to the exit probe gave: `None` when it ran past its deadline.
pub(crate) type Answer = Option<Result<RunExitProbe, crate::error::ProbeError>>;

/// One run of the batch. Every run in flight carries this future, so the common case (inside
/// the TTL, the probe answered) stays small; a run whose sandbox may be stopped and the claimed
/// path are boxed.
async fn reap_one(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    cutoff: EpochMs,
    starts_left: &AtomicUsize,
    counts: &mut RunCounts,
) -> ReapRunEntry {
    if record.detached_since.is_some_and(|d| d <= cutoff) {
        return Box::pin(reap_waking(
            deps,
            options,
            record,
            cutoff,
            starts_left,
            counts,
            None,
        ))
        .await;
    }
    let answer = probe(deps, options, record, counts).await;
    // A probe that timed out, could not read, or found no running sandbox (a paused or stopped
    // one looks gone to a provider that opens only running sandboxes) may be a stopped sandbox.
    if options.start_stopped_inside_ttl
        && matches!(
            answer,
            None | Some(Ok(RunExitProbe::Unknown { .. }
                | RunExitProbe::Unreachable(Unreachable::SandboxGone { .. })))
        )
    {
        return Box::pin(reap_waking(
            deps,
            options,
            record,
            cutoff,
            starts_left,
            counts,
            Some(answer),
        ))
        .await;
    }
    match leave_alone(&record.run_id, answer, options.step_timeout_ms) {
        // Boxed: the claimed path's state (claim, pipe, reclaim) is kilobytes, and a future
        // that carried it inline would be copied into the in-flight set for every run, the
        // many left alone included.
        Ok(code) => {
            Box::pin(reap_claimed(
                deps,
                options,
                record,
                cutoff,
                false,
                Some(code),
            ))
            .await
        }
        Err(entry) => entry,
    }
}

/// A run whose sandbox may be stopped: past its TTL (`answer` is `None`), or inside it with a
/// probe that could not read (`answer`). `wake` asks the provider's state before starting
/// anything; a sandbox started here to read the journal is put back afterwards.
async fn reap_waking(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    cutoff: EpochMs,
    starts_left: &AtomicUsize,
    counts: &mut RunCounts,
    answer: Option<Answer>,
) -> ReapRunEntry {
    let expired = answer.is_none();
    let mut woken = None;
    let mut exit_code = None;
    match answer {
        None => {
            // Past its TTL the run is settled whatever its sandbox's state. A stopped sandbox
            // is started first, so a journal that proves the run finished finalizes it with
            // its whole output instead of an aborted drive that reads nothing. Past the cap,
            // the run waits for a later sweep rather than lose that output.
            match wake(deps, options, record, starts_left, counts).await {
                Wake::Started(sandbox) => {
                    if let Some(Ok(RunExitProbe::Finished { exit_code: code })) =
                        probe(deps, options, record, counts).await
                    {
                        exit_code = Some(code);
                    }
                    woken = Some(sandbox);
                }
                Wake::Capped => {
                    const CAPPED: &str = "the run's sandbox is stopped and this sweep may start \
                                          no more sandboxes (max_starts_per_sweep, or the \
                                          deadline); a later sweep starts it";
                    let mut entry = ReapRunEntry::new(&record.run_id, ReapOutcome::Unknown)
                        .with_error(ReapError::ProbeUnknown(CAPPED.into()));
                    entry.reason = Reason::new(ReasonCode::UnknownSandboxStopped, CAPPED);
                    return entry;
                }
                Wake::NotStopped | Wake::Failed => {}
            }
        }
        Some(mut answer) => {
            if let Wake::Started(sandbox) = wake(deps, options, record, starts_left, counts).await {
                answer = probe(deps, options, record, counts).await;
                woken = Some(sandbox);
            }
            match leave_alone(&record.run_id, answer, options.step_timeout_ms) {
                Ok(code) => exit_code = Some(code),
                Err(entry) => return restored(deps, options, woken, entry, counts).await,
            }
        }
    }
    // A woken expired run whose journal proved it finished is finalized as a finished run:
    // its output is replayed whole, never cut and aborted.
    let expired = expired && exit_code.is_none();
    let entry = Box::pin(reap_claimed(
        deps, options, record, cutoff, expired, exit_code,
    ))
    .await;
    restored(deps, options, woken, entry, counts).await
}

/// One call to the exit probe under the step deadline; `None` when it ran past the deadline.
async fn probe(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    counts: &mut RunCounts,
) -> Answer {
    counts.probed += 1;
    let started = deps.clock.now_ms();
    let answer = within(
        deps.sleeper.as_ref(),
        options.step_timeout_ms,
        deps.probe.has_finished(record),
    )
    .await;
    let took = u64::try_from(deps.clock.now_ms().saturating_sub(started)).unwrap_or(0);
    counts.provider_ms = Some(counts.provider_ms.unwrap_or(0).saturating_add(took));
    counts.provider_failed |= !matches!(answer, Some(Ok(_)));
    answer
}

/// A finished run's exit code, or the entry of a run the probe says to leave alone.
pub(crate) fn leave_alone(
    run_id: &str,
    answer: Answer,
    step_timeout_ms: u64,
) -> Result<i64, ReapRunEntry> {
    let Some(answer) = answer else {
        let error = format!("the probe took longer than its {step_timeout_ms} ms deadline");
        tracing::debug!(target: "reaper", run_id, state = "unknown", %error, "leaving the run alone");
        let mut entry = ReapRunEntry::new(run_id, ReapOutcome::Unknown)
            .with_error(ReapError::ProbeUnknown(error.clone()));
        entry.reason = Reason::new(
            ReasonCode::UnknownProbeTimeout,
            format!("{error}; left alone"),
        );
        return Err(entry);
    };
    match answer {
        Ok(RunExitProbe::Finished { exit_code }) => Ok(exit_code),
        Ok(RunExitProbe::Producing) => {
            tracing::debug!(target: "reaper", run_id, state = "producing", "leaving the run alone");
            Err(ReapRunEntry::new(run_id, ReapOutcome::Producing))
        }
        Ok(RunExitProbe::Unreachable(why)) => {
            let mut entry = ReapRunEntry::new(run_id, ReapOutcome::Unknown);
            entry.reason = why.reason();
            tracing::debug!(target: "reaper", run_id, state = "unknown", reason = %entry.reason, "leaving the run alone");
            Err(entry)
        }
        Ok(RunExitProbe::Unknown { error }) => {
            tracing::debug!(target: "reaper", run_id, state = "unknown", error = error.as_deref(), "leaving the run alone");
            let entry = ReapRunEntry::new(run_id, ReapOutcome::Unknown);
            Err(match error {
                Some(e) => entry.with_error(ReapError::ProbeUnknown(e)),
                None => entry,
            })
        }
        Err(e) => Err(failed(run_id, ReapError::Probe(e.0))),
    }
}

/// What [`wake`] did.
enum Wake {
    /// Not stopped (running, gone, unrecorded), or its provider does not say: nothing done.
    NotStopped,
    /// Stopped, and left so: the cap or the deadline allows no start.
    Capped,
    /// Started, and it runs: the caller returns it to its state or reclaims it.
    Started(RecordedSandbox),
    /// Stopped, and the start failed or it did not come up in time (it was stopped again).
    Failed,
}

/// Starts the run's sandbox when it is stopped and the sweep may: its cap has a start left and
/// its deadline leaves room for the start, a probe and a stop on top of the run's reserve.
async fn wake(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    starts_left: &AtomicUsize,
    counts: &mut RunCounts,
) -> Wake {
    if options.max_starts_per_sweep == 0 {
        // Starting is off: no request, and a run goes the way it always went.
        return Wake::NotStopped;
    }
    let run_id = record.run_id.as_str();
    let step = options.step_timeout_ms;
    let sandbox = match within(
        deps.sleeper.as_ref(),
        step,
        deps.probe.stopped_sandbox(record),
    )
    .await
    {
        Some(Ok(Some(sandbox))) => sandbox,
        Some(Ok(None)) => return Wake::NotStopped,
        Some(Err(error)) => {
            tracing::warn!(target: "reaper", run_id, %error, "could not tell whether the run's sandbox is stopped");
            return Wake::NotStopped;
        }
        None => return Wake::NotStopped,
    };
    let room = options.deadline.is_none_or(|deadline| {
        let extra = step.saturating_mul(3).saturating_add(options.reserve_ms());
        deps.clock
            .now_ms()
            .saturating_add(extra.min(i64::MAX as u64) as i64)
            <= deadline
    });
    let took = room
        && starts_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    if !took {
        tracing::info!(target: "reaper", run_id, sandbox = %sandbox.id, "the run's sandbox is stopped and this sweep starts no more sandboxes; a later sweep will");
        counts.starts.capped += 1;
        return Wake::Capped;
    }
    counts.starts.started += 1;
    tracing::info!(target: "reaper", run_id, provider = %sandbox.provider, sandbox = %sandbox.id, "starting the run's stopped sandbox to read its journal");
    let began = deps.clock.now_ms();
    let started = within(
        deps.sleeper.as_ref(),
        step,
        deps.probe.start_for_read(&sandbox),
    )
    .await;
    let mut running = false;
    if let Some(Err(error)) = &started {
        tracing::warn!(target: "reaper", run_id, sandbox = %sandbox.id, %error, "starting the sandbox failed");
    } else {
        // Providers answer a start before the sandbox runs: ask until it does, within the step.
        loop {
            match within(
                deps.sleeper.as_ref(),
                step,
                deps.probe.sandbox_state(&sandbox),
            )
            .await
            {
                Some(Ok(Some(SandboxState::Running))) => {
                    running = true;
                    break;
                }
                Some(Ok(Some(SandboxState::Gone))) => return Wake::NotStopped,
                Some(Ok(Some(SandboxState::Stopped | SandboxState::Changing))) => {}
                Some(Ok(None)) | Some(Err(_)) | None => break,
            }
            if deps.clock.now_ms().saturating_sub(began) >= step as i64 {
                break;
            }
            deps.sleeper.sleep(START_POLL_MS).await;
        }
    }
    if running {
        return Wake::Started(sandbox);
    }
    tracing::warn!(target: "reaper", run_id, sandbox = %sandbox.id, "the started sandbox did not come up in time; stopping it again");
    restore(deps, options, &sandbox, counts).await;
    Wake::Failed
}

/// Returns a sandbox this sweep started to its state, unless the run's reclaim destroyed it.
async fn restored(
    deps: &ReapDeps,
    options: &ReapOptions,
    woken: Option<RecordedSandbox>,
    mut entry: ReapRunEntry,
    counts: &mut RunCounts,
) -> ReapRunEntry {
    let Some(sandbox) = woken else {
        return entry;
    };
    entry.started_for_read = true;
    if !matches!(
        entry.sandbox,
        Some(SandboxFate::Destroyed | SandboxFate::NoSandbox)
    ) {
        Box::pin(restore(deps, options, &sandbox, counts)).await;
    }
    entry
}

async fn restore(
    deps: &ReapDeps,
    options: &ReapOptions,
    sandbox: &RecordedSandbox,
    counts: &mut RunCounts,
) {
    match within(
        deps.sleeper.as_ref(),
        options.step_timeout_ms,
        deps.probe.restore(sandbox),
    )
    .await
    {
        Some(Ok(())) => counts.starts.restored += 1,
        Some(Err(error)) => {
            tracing::warn!(target: "reaper", sandbox = %sandbox.id, %error, "returning the started sandbox to its state failed; its provider's own auto-stop will");
            counts.starts.restore_failed += 1;
        }
        None => {
            tracing::warn!(target: "reaper", sandbox = %sandbox.id, "returning the started sandbox to its state took too long");
            counts.starts.restore_failed += 1;
        }
    }
}

/// The rest of [`reap_one`] for a run that is finished or expired: claim, drive, settle.
pub(crate) async fn reap_claimed(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    cutoff: EpochMs,
    expired: bool,
    exit_code: Option<i64>,
) -> ReapRunEntry {
    let run_id = record.run_id.as_str();
    let driven = match drive_under_claim(deps, options, record, cutoff, expired).await {
        Ok(d) => d,
        Err(error) if error.is_claim_refusal() => {
            tracing::debug!(target: "reaper", run_id, %error, "run not claimed");
            return ReapRunEntry::new(run_id, ReapOutcome::NotClaimed).with_error(error);
        }
        Err(error) => return failed(run_id, error),
    };

    // The store's word, never the drive's local copy: a terminal write that failed must not be
    // taken for one that landed, or a live agent's sandbox would be destroyed.
    // The pipe re-reads the record after the terminal write; its local copy (a failed write or
    // re-read) never counts.
    let Piped {
        record: stored,
        from_store,
    } = driven.piped;
    if !from_store {
        return not_confirmed(
            run_id,
            format!(
                "the {} status was not recorded, or could not be read back",
                stored.status
            ),
        );
    }
    let status = stored.status;
    let terminal = status.is_terminal();
    let mut outcome = if driven.budget_fired && !expired {
        ReapOutcome::BudgetExceeded
    } else if !terminal {
        ReapOutcome::NotClaimed
    } else if expired {
        ReapOutcome::Expired
    } else {
        ReapOutcome::Finalized
    };
    let budget_anomaly = outcome == ReapOutcome::BudgetExceeded;

    let mut error = None;
    let mut sandbox = None;
    let mut kept: Option<Reason> = None;
    if terminal {
        match settle(deps, options, &stored, driven.intent).await {
            Ok((fate, why)) => {
                sandbox = Some(fate);
                kept = why;
            }
            Err(e) => {
                tracing::error!(target: "reaper", run_id, status = %status, error = %e, retried_by = "the reclaim ledger", "reclaiming the run's sandbox failed");
                outcome = ReapOutcome::ReclaimFailed;
                sandbox = Some(SandboxFate::Leaked);
                error = Some(e);
            }
        }
    }

    let mut entry = ReapRunEntry::unexplained(run_id, outcome);
    entry.status = Some(status);
    entry.exit_code = exit_code;
    entry.terminalized_anyway = budget_anomaly.then_some(terminal);
    entry.error = error.map(Box::new);
    entry.sandbox = sandbox;
    entry.reason = match kept {
        // The sandbox kept is what an operator acts on; the outcome stays in its own field.
        Some(kept) => {
            let reason = Reason::new(
                kept.code,
                format!(
                    "{}; the sandbox is kept: {}",
                    entry.explain().message,
                    kept.message
                ),
            );
            entry.kept_because = Some(kept.message.into_owned());
            reason
        }
        None => entry.explain(),
    };
    entry
}

fn failed(run_id: &str, error: ReapError) -> ReapRunEntry {
    tracing::error!(target: "reaper", run_id, %error, "reaping the run failed");
    ReapRunEntry::new(run_id, ReapOutcome::Failed).with_error(error)
}

fn not_confirmed(run_id: &str, reason: String) -> ReapRunEntry {
    failed(
        run_id,
        ReapError::TerminalNotConfirmed {
            run_id: run_id.to_string(),
            reason,
        },
    )
}

/// `fut`, or `None` once `ms` passed first (the future is dropped, abandoning the step).
pub(crate) async fn within<T>(
    sleeper: &dyn Sleeper,
    ms: u64,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    let mut fut = std::pin::pin!(fut);
    // An answer ready at once needs no timer (arming one costs an allocation per call).
    if let std::task::Poll::Ready(value) = futures::poll!(fut.as_mut()) {
        return Some(value);
    }
    let timer = std::pin::pin!(sleeper.sleep(ms));
    match select(fut, timer).await {
        Either::Left((value, _)) => Some(value),
        Either::Right(((), _)) => None,
    }
}

/// Reclaims the sandbox of `record`, which the store confirmed terminal, and settles its ledger
/// entry: resolved once the sandbox is confirmed gone (or deliberately kept), otherwise
/// rescheduled with backoff and reported as a leak.
async fn settle(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    mut intent: ReclaimIntent,
) -> Result<(SandboxFate, Option<Reason>), ReapError> {
    let run_id = record.run_id.as_str();
    let Some(reclaim) = &deps.reclaim else {
        resolve(deps, run_id).await;
        return Ok((SandboxFate::NotReclaimed, None));
    };
    let attempt = within(
        deps.sleeper.as_ref(),
        options.step_timeout_ms,
        reclaim.reclaim(record, &intent),
    )
    .await
    .unwrap_or_else(|| {
        // The destroy may still land; the ledger's retry finds the sandbox gone then.
        Err(ReclaimError::Other(format!(
            "the reclaim took longer than its {} ms deadline",
            options.step_timeout_ms
        )))
    });
    let error = match attempt {
        Ok(done) => {
            resolve(deps, run_id).await;
            return Ok(match done {
                Reclaimed::Destroyed => (SandboxFate::Destroyed, None),
                Reclaimed::Nothing => (SandboxFate::NoSandbox, None),
                Reclaimed::Kept(reason) => {
                    tracing::info!(target: "reaper", run_id, %reason, "the run's sandbox is kept");
                    (SandboxFate::Kept, Some(reason))
                }
            });
        }
        Err(error) => error,
    };
    if let ReclaimError::Failed(f) = &error {
        intent.provider = f.provider.clone().or(intent.provider);
        intent.provider_sandbox_id = f.provider_sandbox_id.clone().or(intent.provider_sandbox_id);
    }
    let now = deps.clock.now_ms();
    intent.attempts = intent.attempts.saturating_add(1);
    intent.next_attempt_at = now.saturating_add(retry_backoff_ms(intent.attempts) as i64);
    intent.last_error = Some(error.to_string());
    match deps.ledger.update_intent(&intent).await {
        Ok(true) => {}
        // Another sweep dropped the entry meanwhile (it saw the run before this terminal write
        // landed): the leak must not go unrecorded, so record it again.
        Ok(false) => {
            if let Err(store) = deps.ledger.record_intent(&intent).await {
                tracing::error!(target: "reaper", run_id, error = %store, "re-recording the reclaim intent of a leaked sandbox failed");
            }
        }
        // The entry is still there (as it was): the next sweep retries it without the backoff.
        Err(store) => {
            tracing::error!(target: "reaper", run_id, error = %store, "rescheduling the reclaim intent failed")
        }
    }
    Err(match error {
        ReclaimError::Failed(f) => ReapError::ReclaimFailed(f),
        other => ReapError::Reclaim(other.to_string()),
    })
}

async fn resolve(deps: &ReapDeps, run_id: &str) {
    if let Err(error) = deps.ledger.resolve_intent(run_id).await {
        // Harmless: a later sweep finds the sandbox gone and resolves it then.
        tracing::warn!(target: "reaper", run_id, %error, "resolving the reclaim intent failed; a later sweep settles it");
    }
}

/// The wait before retry number `attempts + 1` of a failed destroy: doubling from
/// [`RECLAIM_RETRY_BASE_MS`] up to [`RECLAIM_RETRY_MAX_MS`].
pub fn retry_backoff_ms(attempts: u32) -> u64 {
    let doublings = attempts.saturating_sub(1).min(32);
    RECLAIM_RETRY_BASE_MS
        .saturating_mul(1u64 << doublings)
        .min(RECLAIM_RETRY_MAX_MS)
}

/// The ledger pass: settles up to `max_reclaim_retries` due entries, each under the run's claim
/// lease (so a sweep that is driving the run right now is never raced). A run the store says is
/// terminal gets its log closed (idempotent: heals a crash between the terminal write and the
/// close) and its sandbox reclaimed; a run that is not terminal never got its terminal write (a
/// crash or a failure before it), so its entry is dropped and the listing finds the run again.
async fn retry_reclaims(
    deps: &ReapDeps,
    options: &ReapOptions,
    stop: Option<&CancellationToken>,
    report: &mut ReclaimReport,
    retried: &mut Vec<(String, bool)>,
) {
    let due = match deps
        .ledger
        .due_intents(deps.clock.now_ms(), options.max_reclaim_retries)
        .await
    {
        Ok(due) => due,
        Err(error) => {
            tracing::error!(target: "reaper", %error, "listing due reclaim intents failed");
            report.error = Some(error.to_string());
            return;
        }
    };
    for (i, intent) in due.iter().enumerate() {
        if out_of_time(deps, options, stop) {
            report.deferred = due.len() - i;
            break;
        }
        let run_id = intent.run_id.as_str();
        let key = run_driver_lock_key(run_id);
        let now = deps.clock.now_ms();
        let lease = match deps
            .leases
            .acquire(&key, &options.owner, now, options.claim_ttl())
            .await
        {
            Ok(LeaseGrant::Acquired(lease)) => lease,
            Ok(LeaseGrant::Held { .. }) => {
                report.busy += 1;
                continue;
            }
            Err(error) => {
                tracing::warn!(target: "reaper", run_id, %error, "taking the claim for a reclaim retry failed");
                report.failed += 1;
                continue;
            }
        };
        report.retried += 1;
        let settled = settle_intent(deps, options, intent.clone()).await;
        retried.push((run_id.to_string(), settled.is_ok()));
        match settled {
            Ok(()) => report.settled += 1,
            Err(error) => {
                tracing::error!(target: "reaper", run_id, %error, attempts = intent.attempts + 1, first_seen = intent.first_seen, "a reclaim retry failed; the sandbox may still be running");
                report.failed += 1;
            }
        }
        if let Err(error) = deps.leases.release(&lease).await {
            tracing::warn!(target: "reaper", run_id, %error, "releasing a lease failed; it will expire");
        }
    }
}

pub(crate) async fn settle_intent(
    deps: &ReapDeps,
    options: &ReapOptions,
    intent: ReclaimIntent,
) -> Result<(), ReapError> {
    let run_id = intent.run_id.clone();
    // The epoch bump, not a read: for a run that is not terminal it fences out the holder that
    // recorded the intent (its lease may have expired while it was paused), so no terminal write
    // can land after the intent is dropped. A terminal run is refused without a write.
    match deps.runs.bump_epoch(&run_id).await? {
        EpochBump::Claimed { .. } => {
            tracing::info!(target: "reaper", run_id, "the run never became terminal; dropping its reclaim intent (the listing finds it again)");
            resolve(deps, &run_id).await;
            return Ok(());
        }
        EpochBump::Unknown => {
            // Nothing proves the run terminal any more, so nothing is destroyed for it.
            tracing::warn!(target: "reaper", run_id, sandbox_key = intent.sandbox_key.as_deref(), "the run record is gone; dropping its reclaim intent without a destroy");
            resolve(deps, &run_id).await;
            return Ok(());
        }
        EpochBump::Terminal(_) => {}
    }
    let Some(record) = deps
        .runs
        .get(&run_id)
        .await?
        .filter(|r| r.status.is_terminal())
    else {
        // Terminal a moment ago: a record cannot leave a terminal status, so this is a store
        // that changed under us. Keep the entry for the next sweep.
        return Err(ReapError::TerminalNotConfirmed {
            run_id,
            reason: "the record changed while its reclaim was retried".into(),
        });
    };
    // Unfenced: the run is terminal, so no driver can hold it any more.
    deps.logs.close(&run_id, None, deps.clock.now_ms()).await?;
    settle(deps, options, &record, intent).await.map(|_| ())
}

/// Steps 3–10 of spec B.3: claim, re-check expiry, cancel, quiesce, arm the budget, drive, pipe.
async fn drive_under_claim(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    cutoff: EpochMs,
    expired: bool,
) -> Result<Driven, ReapError> {
    let run_id = record.run_id.as_str();
    let ttl = options.claim_ttl();
    let claim = match Claim::acquire(
        deps.runs.as_ref(),
        deps.leases.as_ref(),
        run_id,
        &options.owner,
        deps.clock.now_ms(),
        ttl,
    )
    .await
    {
        Ok(c) => c,
        Err(ClaimError::Refused(e)) => return Err(e),
        Err(ClaimError::Store(e)) => return Err(e.into()),
    };
    let body = drive_claimed(deps, options, record, cutoff, expired, &claim);
    let keep_alive = claim.keep_alive(
        deps.leases.as_ref(),
        deps.clock.as_ref(),
        deps.sleeper.as_ref(),
        ttl,
    );
    let result = match select(Box::pin(body), Box::pin(keep_alive)).await {
        Either::Left((result, _)) => result,
        Either::Right((never, _)) => match never {},
    };
    claim.release(deps.leases.as_ref()).await;
    result
}

async fn drive_claimed(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    cutoff: EpochMs,
    expired: bool,
    claim: &Claim,
) -> Result<Driven, ReapError> {
    let run_id = record.run_id.as_str();
    if expired {
        // The viewer may have come back while this host waited: re-derive the expiry from a
        // fresh record before recording a cancel, which is permanent.
        let current = deps.runs.get(run_id).await?;
        let refuse = |reason| ReapError::ClaimNotAcquired {
            run_id: run_id.to_string(),
            reason,
        };
        match current {
            None => return Err(refuse(ClaimRefusal::Unknown)),
            Some(c) if c.detached_since.is_none_or(|d| d > cutoff) => {
                return Err(refuse(ClaimRefusal::Superseded))
            }
            Some(_) => {}
        }
    }
    // Durable before anything the drive writes: whatever happens after the terminal write (a
    // crash, a failed destroy), the next sweep finds this entry and finishes the job. The
    // claim's row is the freshest view of the sandbox key.
    let fresh = ReclaimIntent::new(&claim.record, deps.clock.now_ms());
    let intent = if deps
        .ledger
        .record_intent(&fresh)
        .await
        .map_err(ReapError::Ledger)?
    {
        fresh
    } else {
        // An earlier sweep's entry (its attempts and first sighting) stays the one of record.
        deps.ledger
            .get_intent(run_id)
            .await
            .map_err(ReapError::Ledger)?
            .unwrap_or(fresh)
    };
    if expired {
        // The cancel is permanent and not fenced on the epoch: write it only while the lease is
        // confirmed held, so a holder that lost the run meanwhile cannot poison a returning viewer.
        claim
            .confirm(
                deps.leases.as_ref(),
                deps.clock.as_ref(),
                options.claim_ttl(),
            )
            .await?;
        // Before the drive: when the drive's abort reaches the sandbox layer, it must read the
        // cancel and destroy, not re-detach.
        // Fenced as well: a holder superseded between the confirmation and this write never
        // lands it.
        if let Fenced::Superseded { observed } = deps
            .runs
            .update_fenced(run_id, claim.epoch, RunPatch::cancel())
            .await?
        {
            claim.lose_lease();
            return Err(claim.trip(ObservedEpoch::Epoch(observed)));
        }
    }

    await_log_quiescence(
        deps.logs.as_ref(),
        run_id,
        options.fence_quiet_ms,
        deps.clock.as_ref(),
        deps.sleeper.as_ref(),
    )
    .await?;

    // Armed only now, after the lease and quiet waits, so a queued claim cannot spend a finished
    // run's budget before its first chunk.
    let signal = claim.signal().child_token();
    let stream = deps
        .drive
        .drive(
            DriveRequest {
                run_id: run_id.to_string(),
                thread_id: record.thread_id.clone(),
                fence: Some(claim.epoch),
            },
            signal.clone(),
        )
        .map_err(|e| ReapError::Drive(e.message))?;
    let writer = Writer {
        runs: deps.runs.as_ref(),
        log: deps.logs.as_ref(),
        claim: Some(claim),
    };
    let pipe = pipe_and_confirm(
        stream,
        PipeContext {
            writer,
            clock: deps.clock.as_ref(),
            run_id,
            thread_id: &record.thread_id,
            signal: &signal,
            // Only the probe proves a run finished: an expired run's drive is cut by the budget.
            proven_finished: !expired,
        },
    );
    let budget = deps.sleeper.sleep(options.run_budget_ms).fuse();
    let mut pipe = Box::pin(pipe);
    let mut budget = Box::pin(budget);
    let mut budget_fired = false;
    let piped = match select(pipe.as_mut(), budget.as_mut()).await {
        Either::Left((piped, _)) => piped,
        Either::Right(((), pipe)) => {
            budget_fired = true;
            signal.cancel();
            pipe.await
        }
    };
    Ok(Driven {
        piped,
        budget_fired,
        intent,
    })
}
