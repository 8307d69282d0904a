//! The sweep (spec B): find detached runs, probe the ones inside their TTL, finalize the
//! finished, expire the overdue, reclaim what became terminal — one run at a time, every
//! per-run problem an entry in the report, never an error for the whole sweep.

use std::sync::Arc;

use futures::future::{select, Either};
use futures::FutureExt;
use serde::Serialize;

use crate::claim::{await_log_quiescence, Claim, ClaimError, Writer, DEFAULT_FENCE_QUIET_MS};
use crate::domain::{EpochMs, RunPatch, RunRecord, RunStatus};
use crate::error::{ClaimRefusal, OptionsError, ReapError};
use crate::pipe::{pipe_to_run_log, PipeContext};
use crate::ports::{
    CancellationToken, Clock, DeliveryLog, Drive, DriveRequest, ExitProbe, LeaseGrant, LeaseStore,
    Reclaim, RunExitProbe, RunStore, Sleeper,
};

pub const DEFAULT_MAX_RUNS: usize = 25;
pub const DEFAULT_RUN_BUDGET_MS: u64 = 30_000;
pub const DEFAULT_EXIT_PROBE_BYTES: u64 = 4_096;
/// The sweep-wide single-flight lease key.
pub const SWEEP_LEASE_KEY: &str = "reaper:sweep";
/// The longest budget or TTL accepted (about 24.8 days, the range of a JS timer): anything larger
/// is a unit mistake.
pub const MAX_DURATION_MS: u64 = (1 << 31) - 1;

/// The eight per-run outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReapOutcome {
    Finalized,
    Expired,
    Producing,
    Unknown,
    BudgetExceeded,
    NotClaimed,
    ReclaimFailed,
    Failed,
}

impl ReapOutcome {
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

/// Counts per outcome. Always has all eight keys, starting at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct OutcomeCounts {
    pub finalized: usize,
    pub expired: usize,
    pub producing: usize,
    pub unknown: usize,
    pub budget_exceeded: usize,
    pub not_claimed: usize,
    pub reclaim_failed: usize,
    pub failed: usize,
}

impl OutcomeCounts {
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

    pub fn total(&self) -> usize {
        ReapOutcome::ALL.iter().map(|o| self.get(*o)).sum()
    }
}

/// One run's line in the report. Which fields are present depends on the outcome (spec B.5).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReapRunEntry {
    pub run_id: String,
    pub outcome: ReapOutcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminalized_anyway: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ReapError>,
}

impl ReapRunEntry {
    fn new(run_id: &str, outcome: ReapOutcome) -> Self {
        ReapRunEntry {
            run_id: run_id.to_string(),
            outcome,
            status: None,
            exit_code: None,
            terminalized_anyway: None,
            error: None,
        }
    }

    fn with_error(mut self, error: ReapError) -> Self {
        self.error = Some(error);
        self
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
    /// Runs in the batch not started because the deadline left too little time for them.
    pub deferred: usize,
    pub outcomes: OutcomeCounts,
    pub runs: Vec<ReapRunEntry>,
    /// Rows the listing matched but could not read: reported, never swept, never fatal.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub corrupt: Vec<CorruptRow>,
}

/// A stored run that did not parse.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CorruptRow {
    /// The run (or store key) it belongs to, when the store could tell.
    pub key: Option<String>,
    pub error: String,
}

impl ReapReport {
    fn push(&mut self, entry: ReapRunEntry) {
        *self.outcomes.slot(entry.outcome) += 1;
        self.runs.push(entry);
    }
}

/// The ports a sweep runs on. Hold them as `Arc<dyn …>` in one plain struct.
#[derive(Clone)]
pub struct ReapDeps {
    pub runs: Arc<dyn RunStore>,
    pub logs: Arc<dyn DeliveryLog>,
    pub leases: Arc<dyn LeaseStore>,
    pub probe: Arc<dyn ExitProbe>,
    pub drive: Arc<dyn Drive>,
    /// Optional: without it, terminal runs keep their sandboxes.
    pub reclaim: Option<Arc<dyn Reclaim>>,
    pub clock: Arc<dyn Clock>,
    pub sleeper: Arc<dyn Sleeper>,
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
}

impl ReapOptions {
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

    pub fn reserve_ms(&self) -> u64 {
        self.per_run_reserve_ms
            .unwrap_or(self.run_budget_ms + self.fence_quiet_ms + 1_000)
    }

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
        holder: String,
        #[serde(rename = "expiresAt")]
        expires_at: EpochMs,
    },
    /// The lease store failed: nothing was done.
    LeaseUnavailable { error: String },
    /// The options were invalid: nothing was done.
    InvalidOptions { error: String },
}

/// The report of a single-flight sweep.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    pub sweep: SweepStatus,
    pub started_at: EpochMs,
    pub duration_ms: i64,
    #[serde(flatten)]
    pub report: ReapReport,
}

/// A single-flight sweep: takes the sweep-wide lease (TTL `lease_ttl_ms`, renewed between runs),
/// sweeps, and releases. When another sweep holds the lease, returns at once saying so.
/// Overlapping scheduled triggers, retries and a manual run never sweep the same runs at once.
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
    let report = reap_with(deps, options, Some((lease.clone(), lease_ttl_ms)), stop).await;
    if let Err(error) = deps.leases.release(&lease).await {
        tracing::warn!(target: "reaper", %error, "releasing the sweep lease failed; it will expire");
    }
    done(SweepStatus::Swept, report)
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
    let mut report = ReapReport::default();
    let now = options.now.unwrap_or_else(|| deps.clock.now_ms());
    if !deps.runs.capabilities().list_reclaimable {
        tracing::debug!(target: "reaper", "the run store has no list_reclaimable; nothing to sweep");
        return report;
    }
    let candidates = match deps.runs.list_reclaimable_listing(now, 0).await {
        Ok(listing) => {
            for error in listing.corrupt {
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
            listing.runs
        }
        Err(error) => {
            tracing::error!(target: "reaper", %error, "listing reclaimable runs failed");
            return report;
        }
    };
    let cutoff = now.saturating_sub(options.detached_run_ttl_ms as i64);
    let batch = &candidates[..candidates.len().min(options.max_runs)];
    let reserve = options.reserve_ms() as i64;
    for (i, record) in batch.iter().enumerate() {
        if stop.is_some_and(CancellationToken::is_cancelled) {
            report.deferred = batch.len() - i;
            tracing::info!(target: "reaper", deferred = report.deferred, "stopping at a run boundary; deferring the rest of the batch");
            break;
        }
        if let Some(deadline) = options.deadline {
            if deps.clock.now_ms().saturating_add(reserve) > deadline {
                report.deferred = batch.len() - i;
                tracing::info!(target: "reaper", deferred = report.deferred, deadline, "deadline near; deferring the rest of the batch to the next sweep");
                break;
            }
        }
        if let Some((lease, ttl)) = sweep_lease.as_mut() {
            renew_sweep_lease(deps, lease, *ttl).await;
        }
        report.considered += 1;
        let entry = reap_one(deps, options, record, cutoff, &mut report.probed).await;
        report.push(entry);
    }
    let o = &report.outcomes;
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
        "sweep complete"
    );
    report
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
    final_record: RunRecord,
    budget_fired: bool,
}

async fn reap_one(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    cutoff: EpochMs,
    probed: &mut usize,
) -> ReapRunEntry {
    let run_id = record.run_id.as_str();
    let expired = record.detached_since.is_some_and(|d| d <= cutoff);

    let mut exit_code = None;
    if !expired {
        *probed += 1;
        match deps.probe.has_finished(record).await {
            Ok(RunExitProbe::Finished { exit_code: code }) => exit_code = Some(code),
            Ok(RunExitProbe::Producing) => {
                tracing::debug!(target: "reaper", run_id, state = "producing", "leaving the run alone");
                return ReapRunEntry::new(run_id, ReapOutcome::Producing);
            }
            Ok(RunExitProbe::Unknown { error }) => {
                tracing::debug!(target: "reaper", run_id, state = "unknown", error = error.as_deref(), "leaving the run alone");
                let entry = ReapRunEntry::new(run_id, ReapOutcome::Unknown);
                return match error {
                    Some(e) => entry.with_error(ReapError::ProbeUnknown(e)),
                    None => entry,
                };
            }
            Err(e) => return failed(run_id, ReapError::Probe(e.0)),
        }
    }

    let driven = match drive_under_claim(deps, options, record, cutoff, expired).await {
        Ok(d) => d,
        Err(error) if error.is_claim_refusal() => {
            tracing::debug!(target: "reaper", run_id, %error, "run not claimed");
            return ReapRunEntry::new(run_id, ReapOutcome::NotClaimed).with_error(error);
        }
        Err(error) => return failed(run_id, error),
    };

    let status = driven.final_record.status;
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
    if terminal {
        if let Some(reclaim) = &deps.reclaim {
            // The listed record, never the final one: a failed terminal write returns a local
            // record without the sandboxKey, and the sandbox would leak silently.
            if let Err(e) = reclaim.reclaim(record).await {
                let e = match e {
                    crate::error::ReclaimError::Failed(f) => ReapError::ReclaimFailed(f),
                    other => ReapError::Reclaim(other.to_string()),
                };
                tracing::error!(target: "reaper", run_id, status = %status, error = %e, "reclaiming the run's sandbox failed");
                outcome = ReapOutcome::ReclaimFailed;
                error = Some(e);
            }
        }
    }

    ReapRunEntry {
        run_id: run_id.to_string(),
        outcome,
        status: Some(status),
        exit_code,
        terminalized_anyway: budget_anomaly.then_some(terminal),
        error,
    }
}

fn failed(run_id: &str, error: ReapError) -> ReapRunEntry {
    tracing::error!(target: "reaper", run_id, %error, "reaping the run failed");
    ReapRunEntry::new(run_id, ReapOutcome::Failed).with_error(error)
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
        // Before the drive: when the drive's abort reaches the sandbox layer, it must read the
        // cancel and destroy, not re-detach.
        deps.runs.update(run_id, RunPatch::cancel()).await?;
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
            },
            signal.clone(),
        )
        .map_err(|e| ReapError::Drive(e.message))?;
    let writer = Writer {
        runs: deps.runs.as_ref(),
        log: deps.logs.as_ref(),
        claim: Some(claim),
    };
    let pipe = pipe_to_run_log(
        stream,
        PipeContext {
            writer,
            clock: deps.clock.as_ref(),
            run_id,
            thread_id: &record.thread_id,
            signal: &signal,
        },
    );
    let budget = deps.sleeper.sleep(options.run_budget_ms).fuse();
    let mut pipe = Box::pin(pipe);
    let mut budget = Box::pin(budget);
    let mut budget_fired = false;
    let final_record = match select(pipe.as_mut(), budget.as_mut()).await {
        Either::Left((record, _)) => record,
        Either::Right(((), pipe)) => {
            budget_fired = true;
            signal.cancel();
            pipe.await
        }
    };
    Ok(Driven {
        final_record,
        budget_fired,
    })
}
