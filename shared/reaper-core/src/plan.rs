//! The dry run of a sweep ([`ReapOptions::dry_run`], issue 25): what a sweep would do with each
//! listed run and each due ledger entry, and the proof each decision rests on (the TTL
//! arithmetic, the exit probe's verdict, the in-use check), writing nothing and touching no
//! sandbox beyond read-only probes.
//!
//! Enforced here, not by the caller: the dry run takes no lease, and runs over the sweep's
//! ports behind `ReadOnly` wrappers that refuse every write, every sandbox start and every
//! destroy. The planner itself calls none of them; the wrappers make a slip an error in the
//! report instead of a change in the store.

use std::sync::Arc;

use serde::Serialize;

use crate::domain::{
    Chunk, EpochMs, LedgerCounts, LogEntry, LogSnapshot, NewRun, ReclaimIntent, RunPatch,
    RunRecord, RunStatus, TerminalWrite,
};
use crate::error::{DriveError, ProbeError, ReclaimError, SandboxError, StoreError};
use crate::ports::{
    Appended, BoundedCount, ChunkStream, DeliveryLog, Drive, DriveRequest, EpochBump, ExitProbe,
    Fenced, Lease, LeaseGrant, LeaseStore, Reclaim, ReclaimLedger, ReclaimablePage,
    ReclaimableQuery, Reclaimed, RecordedSandbox, RunExitProbe, RunStore, RunStoreCapabilities,
    SandboxState,
};
use crate::reap::{
    count_backlog, leave_alone, list_batch, out_of_time, read_cursor_note, within, CorruptRow,
    ReapDeps, ReapOptions, ReapOutcome, ReapReport, ReapRunEntry, SandboxFate,
};
use crate::reason::Reason;
use crate::reclaim::ReclaimPlan;

/// What one planned entry's decision rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanProof {
    /// The sweep's "now".
    pub now: EpochMs,
    /// When the viewer left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detached_since: Option<EpochMs>,
    /// The TTL the decision used.
    pub ttl_ms: u64,
    /// `detachedSince + ttlMs`: the run is past its TTL from this moment on (inclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<EpochMs>,
    /// `now - detachedSince`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detached_for_ms: Option<i64>,
    /// `now >= expiresAt`.
    pub past_ttl: bool,
    /// The TTL arithmetic in words.
    pub ttl: String,
    /// The exit probe's verdict (read-only: one journal tail read). Absent for a run past its
    /// TTL, which a sweep expires without asking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    /// The run's sandbox is stopped: a sweep would start it (within its cap) to read the
    /// journal; the dry run starts nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sandbox_stopped: bool,
    /// The in-use check for a run a sweep would make terminal: what its reclaim would do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimPlan>,
    /// The in-use check in words, or why it could not be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_use_check: Option<String>,
}

/// What a sweep would do with one due reclaim-ledger entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedRetry {
    /// The run the entry belongs to.
    pub run_id: String,
    /// `retry-destroy`, `drop-intent` or `unknown`.
    pub action: &'static str,
    /// Attempts so far.
    pub attempts: u32,
    /// When the entry became due.
    pub next_attempt_at: EpochMs,
    /// Why, with the store's word on the run.
    pub why: String,
    /// The destroy a retry would attempt, with the in-use check's verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimPlan>,
}

/// The dry run behind [`crate::reap::sweep`] when [`ReapOptions::dry_run`] is set.
pub(crate) async fn plan_sweep(deps: &ReapDeps, options: &ReapOptions) -> ReapReport {
    let deps = &read_only(deps);
    let mut report = ReapReport::default();
    let now = options.now.unwrap_or_else(|| deps.clock.now_ms());
    plan_retries(deps, options, now, &mut report).await;
    // The batch the next real sweep would take: the same cursor, read, not moved.
    let resumed;
    let options = match (&options.resume_after, read_cursor_note(deps).await) {
        (None, Some(cursor)) => {
            resumed = ReapOptions {
                resume_after: Some(cursor),
                ..options.clone()
            };
            &resumed
        }
        _ => options,
    };
    plan_listed(deps, options, now, &mut report).await;
    match deps.ledger.ledger_counts().await {
        Ok(counts) => report.reclaims.ledger = Some(counts),
        Err(error) => report.reclaims.error = Some(error.to_string()),
    }
    let o = &report.outcomes;
    tracing::info!(
        target: "reaper",
        considered = report.considered,
        probed = report.probed,
        finalized = o.finalized,
        expired = o.expired,
        producing = o.producing,
        unknown = o.unknown,
        failed = o.failed,
        ledger_due = report.reclaims.planned.len(),
        "dry run complete: nothing was written"
    );
    report
}

async fn plan_retries(
    deps: &ReapDeps,
    options: &ReapOptions,
    now: EpochMs,
    report: &mut ReapReport,
) {
    let due = match deps
        .ledger
        .due_intents(now, options.max_reclaim_retries)
        .await
    {
        Ok(due) => due,
        Err(error) => {
            report.reclaims.error = Some(error.to_string());
            return;
        }
    };
    for intent in due {
        let mut planned = PlannedRetry {
            run_id: intent.run_id.clone(),
            action: "unknown",
            attempts: intent.attempts,
            next_attempt_at: intent.next_attempt_at,
            why: String::new(),
            reclaim: None,
        };
        match deps.runs.get(&intent.run_id).await {
            Err(error) => planned.why = format!("the run's record could not be read: {error}"),
            Ok(None) => {
                planned.action = "drop-intent";
                planned.why = "the run's record is gone: a sweep drops the entry without a \
                               destroy (nothing proves the run terminal)"
                    .into();
            }
            Ok(Some(run)) if !run.status.is_terminal() => {
                planned.action = "drop-intent";
                planned.why = format!(
                    "the run is {}, not terminal: a sweep fences it (epoch bump) and drops the \
                     entry; the listing finds the run again",
                    run.status
                );
            }
            Ok(Some(run)) => {
                planned.action = "retry-destroy";
                let (plan, words) = reclaim_plan(deps, &run, &intent).await;
                planned.why = format!(
                    "the run is {} (attempt {} of its destroy): {}",
                    run.status,
                    intent.attempts + 1,
                    words
                );
                planned.reclaim = plan;
            }
        }
        report.reclaims.retried += 1;
        report.reclaims.planned.push(planned);
    }
}

async fn reclaim_plan(
    deps: &ReapDeps,
    record: &RunRecord,
    intent: &ReclaimIntent,
) -> (Option<ReclaimPlan>, String) {
    let Some(reclaim) = &deps.reclaim else {
        return (None, "this handler reclaims no sandbox".into());
    };
    match reclaim.plan(record, intent).await {
        Ok(Some(plan)) => {
            let words = plan.describe();
            (Some(plan), words)
        }
        Ok(None) => (None, "the reclaimer cannot tell without acting".into()),
        Err(error) => (None, format!("the in-use check failed: {error}")),
    }
}

async fn plan_listed(
    deps: &ReapDeps,
    options: &ReapOptions,
    now: EpochMs,
    report: &mut ReapReport,
) {
    if !deps.runs.capabilities().list_reclaimable {
        return;
    }
    let cutoff = now.saturating_sub(options.detached_run_ttl_ms as i64);
    let (listed, _) = match list_batch(deps, options, now, cutoff).await {
        Ok(listed) => listed,
        Err(error) => {
            report.listing_error = Some(error.to_string());
            return;
        }
    };
    for error in listed.corrupt {
        let key = match &error {
            StoreError::Corrupt { key, .. } => Some(key.clone()),
            _ => None,
        };
        report.corrupt.push(CorruptRow {
            key,
            error: error.to_string(),
        });
    }
    let read = listed.runs.len() + report.corrupt.len();
    (report.slo.backlog, report.slo.backlog_exact) = count_backlog(deps, options, now, read).await;
    report.slo.oldest_detached_ms = listed
        .runs
        .iter()
        .filter_map(|r| r.detached_since)
        .min()
        .map(|d| now.saturating_sub(d).max(0));
    report.cursor = options.resume_after.clone();
    for record in listed.runs.iter().take(options.max_runs) {
        if out_of_time(deps, options, None) {
            report.deferred += 1;
            continue;
        }
        report.considered += 1;
        let entry = plan_one(deps, options, record, now, cutoff, &mut report.probed).await;
        report.push(entry);
    }
}

async fn plan_one(
    deps: &ReapDeps,
    options: &ReapOptions,
    record: &RunRecord,
    now: EpochMs,
    cutoff: EpochMs,
    probed: &mut usize,
) -> ReapRunEntry {
    let ttl_ms = options.detached_run_ttl_ms;
    let expires_at = record
        .detached_since
        .map(|d| d.saturating_add(ttl_ms as i64));
    let past_ttl = record.detached_since.is_some_and(|d| d <= cutoff);
    let ttl = match (record.detached_since, expires_at) {
        (Some(d), Some(e)) => format!(
            "detached at {d}, {} ms before now ({now}); TTL {ttl_ms} ms ends at {e}: {}",
            now.saturating_sub(d),
            if past_ttl {
                "past the TTL"
            } else {
                "inside the TTL"
            }
        ),
        _ => "not detached".into(),
    };
    let mut proof = PlanProof {
        now,
        detached_since: record.detached_since,
        ttl_ms,
        expires_at,
        detached_for_ms: record.detached_since.map(|d| now.saturating_sub(d)),
        past_ttl,
        ttl,
        probe: None,
        sandbox_stopped: false,
        reclaim: None,
        in_use_check: None,
    };
    if options.max_starts_per_sweep > 0 && (past_ttl || options.start_stopped_inside_ttl) {
        // A state read only; the start itself is refused by the read-only probe anyway.
        if let Some(Ok(Some(_))) = within(
            deps.sleeper.as_ref(),
            options.step_timeout_ms,
            deps.probe.stopped_sandbox(record),
        )
        .await
        {
            proof.sandbox_stopped = true;
        }
    }
    let mut entry = if past_ttl {
        let mut entry = ReapRunEntry::new(&record.run_id, ReapOutcome::Expired);
        entry.status = Some(RunStatus::Aborted);
        entry
    } else {
        *probed += 1;
        let answer = within(
            deps.sleeper.as_ref(),
            options.step_timeout_ms,
            deps.probe.has_finished(record),
        )
        .await;
        proof.probe = Some(match &answer {
            None => format!(
                "the probe took longer than its {} ms deadline",
                options.step_timeout_ms
            ),
            Some(Ok(RunExitProbe::Finished { exit_code })) => {
                format!("finished: the journal ends with the exit sentinel (exit code {exit_code})")
            }
            Some(Ok(RunExitProbe::Producing)) => {
                "producing: the journal has no exit sentinel yet".into()
            }
            Some(Ok(RunExitProbe::Unreachable(why))) => format!("unknown: {}", why.reason()),
            Some(Ok(RunExitProbe::Unknown { error })) => {
                format!("unknown: {}", error.as_deref().unwrap_or("no reason given"))
            }
            Some(Err(e)) => format!("the probe failed: {}", e.0),
        });
        match leave_alone(&record.run_id, answer, options.step_timeout_ms) {
            Ok(code) => {
                let mut entry = ReapRunEntry::new(&record.run_id, ReapOutcome::Finalized);
                entry.exit_code = Some(code);
                entry.status = Some(if code == 0 {
                    RunStatus::Completed
                } else {
                    RunStatus::Failed
                });
                entry
            }
            Err(entry) => entry,
        }
    };
    if matches!(entry.outcome, ReapOutcome::Finalized | ReapOutcome::Expired) {
        let intent = match deps.ledger.get_intent(&record.run_id).await {
            Ok(Some(intent)) => intent,
            _ => ReclaimIntent::new(record, now),
        };
        let (plan, words) = reclaim_plan(deps, record, &intent).await;
        entry.sandbox = Some(match &plan {
            Some(ReclaimPlan::Destroy { .. }) => SandboxFate::Destroyed,
            Some(ReclaimPlan::Leave(
                crate::reclaim::ReclaimOutcome::InUse { .. }
                | crate::reclaim::ReclaimOutcome::LatestRunUnknown { .. },
            )) => SandboxFate::Kept,
            Some(ReclaimPlan::Leave(crate::reclaim::ReclaimOutcome::ProviderMismatch)) => {
                SandboxFate::Leaked
            }
            Some(ReclaimPlan::Leave(_)) => SandboxFate::NoSandbox,
            None => SandboxFate::NotReclaimed,
        });
        proof.reclaim = plan;
        proof.in_use_check = Some(words);
    }
    let explained = entry.explain();
    let would = match entry.outcome {
        ReapOutcome::Finalized => format!(
            "would finalize: {}; its output would be replayed and the run recorded {}",
            proof.probe.as_deref().unwrap_or_default(),
            entry.status.map_or("terminal".into(), |s| s.to_string())
        ),
        ReapOutcome::Expired => format!(
            "would expire: {}; the run would be cancelled, driven under the run budget and \
             recorded aborted{}",
            proof.ttl,
            if proof.sandbox_stopped {
                " (its sandbox is stopped: a sweep would start it, within its cap, to read the \
                 journal first)"
            } else {
                ""
            }
        ),
        _ => format!("would leave alone: {}", entry.reason.message),
    };
    let with_sandbox = match &proof.in_use_check {
        Some(check) => format!("{would}; {check}"),
        None => would,
    };
    let code = match (&entry.reason, explained.code) {
        // The leave-alone entries carry their precise code already.
        (r, _) if !matches!(entry.outcome, ReapOutcome::Finalized | ReapOutcome::Expired) => r.code,
        (_, code) => code,
    };
    entry.reason = Reason::new(code, format!("dry run: {with_sandbox}"));
    entry.planned = true;
    entry.proof = Some(Box::new(proof));
    entry
}

fn refused(what: &str) -> StoreError {
    tracing::error!(target: "reaper", what, "a dry run tried to write; refused");
    StoreError::Unsupported("a dry run writes nothing")
}

/// The sweep's ports with every write, start, drive and destroy refused.
fn read_only(deps: &ReapDeps) -> ReapDeps {
    ReapDeps {
        runs: Arc::new(ReadOnly(deps.runs.clone())),
        logs: Arc::new(ReadOnly(deps.logs.clone())),
        leases: Arc::new(ReadOnly(deps.leases.clone())),
        ledger: Arc::new(ReadOnly(deps.ledger.clone())),
        probe: Arc::new(ReadOnly(deps.probe.clone())),
        drive: Arc::new(ReadOnly(deps.drive.clone())),
        reclaim: deps
            .reclaim
            .clone()
            .map(|r| Arc::new(ReadOnly(r)) as Arc<dyn Reclaim>),
        clock: deps.clock.clone(),
        sleeper: deps.sleeper.clone(),
        damage: deps.damage.clone(),
    }
}

/// A port with its writes refused (see the module's docs).
struct ReadOnly<T: ?Sized>(Arc<T>);

impl<T: ?Sized> std::fmt::Debug for ReadOnly<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadOnly")
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: RunStore + ?Sized> RunStore for ReadOnly<T> {
    async fn create_or_resume(&self, _new: NewRun) -> Result<RunRecord, StoreError> {
        Err(refused("create_or_resume"))
    }
    async fn update(&self, _run_id: &str, _patch: RunPatch) -> Result<(), StoreError> {
        Err(refused("update"))
    }
    async fn update_fenced(
        &self,
        _run_id: &str,
        _held_epoch: u64,
        _patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        Err(refused("update_fenced"))
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.0.get(run_id).await
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.0.find_active_run(thread_id).await
    }
    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.0.list_by_thread(thread_id).await
    }
    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.0.live_runs_for_sandbox(sandbox_key, limit).await
    }
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.0.list_reclaimable_page(query).await
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        self.0
            .count_reclaimable(detached_after, detached_until, at_most)
            .await
    }
    fn capabilities(&self) -> RunStoreCapabilities {
        self.0.capabilities()
    }
    async fn bump_epoch(&self, _run_id: &str) -> Result<EpochBump, StoreError> {
        Err(refused("bump_epoch"))
    }
    async fn write_terminal(
        &self,
        _run_id: &str,
        _held_epoch: u64,
        _write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        Err(refused("write_terminal"))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: DeliveryLog + ?Sized> DeliveryLog for ReadOnly<T> {
    async fn append(
        &self,
        _run_id: &str,
        _fence: Option<u64>,
        _chunks: Vec<Chunk>,
        _now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        Err(refused("append"))
    }
    async fn close(
        &self,
        _run_id: &str,
        _fence: Option<u64>,
        _now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        Err(refused("close"))
    }
    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        self.0.snapshot(run_id).await
    }
    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.0.read(run_id, from, limit).await
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: LeaseStore + ?Sized> LeaseStore for ReadOnly<T> {
    async fn acquire(
        &self,
        _key: &str,
        _owner: &str,
        _now: EpochMs,
        _ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        Err(refused("acquire"))
    }
    async fn renew(
        &self,
        _lease: &Lease,
        _now: EpochMs,
        _ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        Err(refused("renew"))
    }
    async fn release(&self, _lease: &Lease) -> Result<(), StoreError> {
        Err(refused("release"))
    }
    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.0.note(key).await
    }
    async fn set_note(&self, _lease: &Lease, _note: &str) -> Result<bool, StoreError> {
        Err(refused("set_note"))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: ReclaimLedger + ?Sized> ReclaimLedger for ReadOnly<T> {
    async fn record_intent(&self, _intent: &ReclaimIntent) -> Result<bool, StoreError> {
        Err(refused("record_intent"))
    }
    async fn update_intent(&self, _intent: &ReclaimIntent) -> Result<bool, StoreError> {
        Err(refused("update_intent"))
    }
    async fn resolve_intent(&self, _run_id: &str) -> Result<(), StoreError> {
        Err(refused("resolve_intent"))
    }
    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        self.0.get_intent(run_id).await
    }
    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        self.0.due_intents(now, limit).await
    }
    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        self.0.ledger_counts().await
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: ExitProbe + ?Sized> ExitProbe for ReadOnly<T> {
    async fn has_finished(&self, record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        self.0.has_finished(record).await
    }
    async fn stopped_sandbox(
        &self,
        record: &RunRecord,
    ) -> Result<Option<RecordedSandbox>, SandboxError> {
        self.0.stopped_sandbox(record).await
    }
    async fn sandbox_state(
        &self,
        sandbox: &RecordedSandbox,
    ) -> Result<Option<SandboxState>, SandboxError> {
        self.0.sandbox_state(sandbox).await
    }
    async fn start_for_read(&self, _sandbox: &RecordedSandbox) -> Result<(), SandboxError> {
        Err(SandboxError::Other(refused("start_for_read").to_string()))
    }
    async fn restore(&self, _sandbox: &RecordedSandbox) -> Result<(), SandboxError> {
        Err(SandboxError::Other(refused("restore").to_string()))
    }
}

impl<T: Drive + ?Sized> Drive for ReadOnly<T> {
    fn drive(
        &self,
        _request: DriveRequest,
        _signal: crate::ports::CancellationToken,
    ) -> Result<ChunkStream, DriveError> {
        Err(DriveError {
            message: refused("drive").to_string(),
            code: None,
            is_abort: false,
        })
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: Reclaim + ?Sized> Reclaim for ReadOnly<T> {
    async fn reclaim(
        &self,
        _record: &RunRecord,
        _intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError> {
        Err(ReclaimError::Store(refused("reclaim")))
    }
    async fn plan(
        &self,
        record: &RunRecord,
        intent: &ReclaimIntent,
    ) -> Result<Option<ReclaimPlan>, ReclaimError> {
        self.0.plan(record, intent).await
    }
}
