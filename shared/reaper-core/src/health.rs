//! The health verdict every platform serves (Vercel's `?status`, `reaper status --check`,
//! `reaper watch --listen`'s `/healthz`): unhealthy when a sandbox leaked, a detached run is
//! overdue, the last sweep is stale, the last sweep could not list the detached runs, or what the
//! verdict needs could not be read. Pure logic over what a handler read, plus the reads it needs
//! through the ports, so every handler judges the same way.
//!
//! The last-sweep mark lives where each store can keep it: the DynamoDB handlers in an item of
//! their own (`reaper_serverless::status`), every other store as the note of the
//! [`LAST_SWEEP_KEY`] lease ([`record_last_sweep`], [`read_last_sweep`]), which every store
//! already keeps (schema-free, and release keeps the note).

use serde::{Deserialize, Serialize};

use crate::domain::{EpochMs, LedgerCounts};
use crate::error::StoreError;
use crate::ports::{
    LeaseGrant, LeaseStore, ReclaimLedger, ReclaimablePage, ReclaimableQuery, RunStore,
};
use crate::reap::{SweepReport, SweepStatus};

/// Detached runs one status read lists at most: one bounded page, oldest first.
pub const STATUS_LISTING_LIMIT: usize = 100;

/// The lease key whose note holds the last-sweep mark on stores without a place of their own.
/// Taken only for the moment of the write, so overlapping sweeps write one at a time.
pub const LAST_SWEEP_KEY: &str = "reaper:last-sweep";

/// What the last sweep that ran did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastSweep {
    /// When the sweep started.
    pub started_at: EpochMs,
    /// When it finished.
    pub finished_at: EpochMs,
    /// Detached runs it looked at.
    pub considered: usize,
    /// Runs whose journal it probed.
    pub probed: usize,
    /// Runs it left for a later sweep (budget or cap reached).
    pub deferred: usize,
    /// Runs per outcome, as the sweep's report counts them (`finalized`, `reclaim-failed`, …).
    pub outcomes: serde_json::Value,
    /// The reclaim ledger after the sweep; absent when the sweep could not read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerCounts>,
    /// The sweep's service-level figures: `backlog` (and whether it is exact),
    /// `oldestDetachedMs`, the longest waits to finalization and to a destroy.
    #[serde(default)]
    pub slo: serde_json::Value,
    /// Why the sweep's listing failed: it swept nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing_error: Option<String>,
    /// The database is damaged: the sweep stopped at it, recording nothing terminal and
    /// destroying nothing after it (the first damage seen, with what to do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// The sweep lease's owner: which invocation swept.
    pub owner: String,
}

impl LastSweep {
    /// The mark a sweep leaves; `None` when it did not sweep (another held the lease, the
    /// lease store failed, the options were refused): the last one that did stays.
    pub fn of(report: &SweepReport, owner: &str) -> Option<LastSweep> {
        if report.sweep != SweepStatus::Swept {
            return None;
        }
        let r = &report.report;
        Some(LastSweep {
            started_at: report.started_at,
            finished_at: report.started_at.saturating_add(report.duration_ms),
            considered: r.considered,
            probed: r.probed,
            deferred: r.deferred,
            outcomes: serde_json::to_value(r.outcomes).unwrap_or_default(),
            ledger: r.reclaims.ledger,
            slo: serde_json::to_value(&r.slo).unwrap_or_default(),
            listing_error: r.listing_error.clone(),
            damaged: r.damaged.clone(),
            owner: owner.to_string(),
        })
    }
}

/// Writes `mark` as the note of [`LAST_SWEEP_KEY`], unless the note already holds a later one
/// (overlapping sweeps finish in any order). `Ok(false)`: nothing written (a later mark was
/// kept, or another writer held the key this instant and its mark is at least as fresh).
pub async fn record_last_sweep(
    leases: &dyn LeaseStore,
    mark: &LastSweep,
    now: EpochMs,
) -> Result<bool, StoreError> {
    let note = serde_json::to_string(mark)
        .map_err(|e| StoreError::Backend(format!("cannot encode the last-sweep mark: {e}")))?;
    // A short lease: a writer that dies between acquire and release blocks the next only this long.
    let lease = match leases
        .acquire(LAST_SWEEP_KEY, &mark.owner, now, 30_000)
        .await?
    {
        LeaseGrant::Acquired(lease) => lease,
        LeaseGrant::Held { .. } => return Ok(false),
    };
    let written = match read_last_sweep(leases).await {
        Ok(Some(kept)) if kept.finished_at > mark.finished_at => Ok(false),
        // A mark this build cannot read is replaced by one it can.
        Ok(_) | Err(StoreError::Corrupt { .. }) => leases.set_note(&lease, &note).await,
        Err(e) => Err(e),
    };
    if let Err(error) = leases.release(&lease).await {
        tracing::warn!(target: "reaper", %error, "releasing the last-sweep lease failed; it expires in 30 s");
    }
    written
}

/// Reads the mark [`record_last_sweep`] left. `None`: no sweep has recorded one yet.
pub async fn read_last_sweep(leases: &dyn LeaseStore) -> Result<Option<LastSweep>, StoreError> {
    let Some(note) = leases.note(LAST_SWEEP_KEY).await? else {
        return Ok(None);
    };
    serde_json::from_str(&note)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            key: LAST_SWEEP_KEY.into(),
            reason: format!("the last-sweep mark does not parse: {e}"),
        })
}

/// The bounds the verdict compares against, from the deployment's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusLimits {
    /// The detached-run TTL the sweeps use.
    pub detached_ttl_ms: u64,
    /// The run budget the sweeps use.
    pub run_budget_ms: u64,
    /// The longest time between two scheduled sweeps.
    pub schedule_interval_ms: u64,
    /// One invocation's budget.
    pub budget_ms: u64,
}

impl StatusLimits {
    /// A detached run older than this should have been expired by a sweep: its TTL, its own
    /// drive, and two whole intervals for a tick that deferred it.
    pub fn stale_detached_ms(&self) -> u64 {
        self.detached_ttl_ms
            .saturating_add(self.run_budget_ms)
            .saturating_add(self.schedule_interval_ms.saturating_mul(2))
    }

    /// A last sweep that ended longer ago than this means at least one tick came and went
    /// without a sweep: two intervals, plus one budget for a tick still sweeping.
    pub fn stale_sweep_ms(&self) -> u64 {
        self.budget_ms
            .saturating_add(self.schedule_interval_ms.saturating_mul(2))
    }
}

/// The detached runs waiting, from one bounded listing page (oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetachedFigures {
    /// Detached runs read, at most [`STATUS_LISTING_LIMIT`].
    pub listed: usize,
    /// Whether more are detached than were read (then `listed` is a lower bound).
    pub more: bool,
    /// Of those, past the TTL: the next sweep expires them.
    pub past_ttl: usize,
    /// Rows the listing matched but could not read.
    pub corrupt: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// When the oldest detached run was detached.
    pub oldest_detached_since: Option<EpochMs>,
    /// How long the oldest has been detached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_detached_ms: Option<i64>,
}

impl DetachedFigures {
    fn of(page: &ReclaimablePage, now: EpochMs, ttl_ms: u64) -> Self {
        let cutoff = now.saturating_sub(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let oldest = page.runs.iter().filter_map(|r| r.detached_since).min();
        DetachedFigures {
            listed: page.runs.len(),
            more: page.next.is_some(),
            past_ttl: page
                .runs
                .iter()
                .filter(|r| r.detached_since.is_some_and(|d| d <= cutoff))
                .count(),
            corrupt: page.corrupt.len(),
            oldest_detached_since: oldest,
            oldest_detached_ms: oldest.map(|d| now.saturating_sub(d).max(0)),
        }
    }
}

/// The answer of a status read. `healthy` is false exactly when `problems` is not empty.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// The verdict: no problem found.
    pub healthy: bool,
    /// Why it is not healthy, each saying what is wrong and where to look.
    pub problems: Vec<String>,
    /// When the status was taken.
    pub now: EpochMs,
    /// The last sweep that ran; `null` until the first one.
    pub last_sweep: Option<LastSweep>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// How long ago the last sweep finished; `None` before the first.
    pub last_sweep_age_ms: Option<i64>,
    /// The reclaim ledger now: `pending`, `leaked`, `oldestFirstSeen`.
    pub ledger: Option<LedgerCounts>,
    /// The detached backlog, when it could be read.
    pub detached: Option<DetachedFigures>,
    /// The limits the verdict was judged against.
    pub limits: StatusLimits,
    /// `limits.stale_detached_ms()`.
    pub stale_detached_after_ms: u64,
    /// `limits.stale_sweep_ms()`.
    pub stale_sweep_after_ms: u64,
}

/// The verdict from what was read (a failed read is a problem: the monitor cannot vouch for
/// what it could not see).
pub fn assess(
    now: EpochMs,
    limits: StatusLimits,
    last_sweep: Result<Option<LastSweep>, StoreError>,
    ledger: Result<LedgerCounts, StoreError>,
    detached: Result<DetachedFigures, StoreError>,
) -> ServiceStatus {
    let mut problems = Vec::new();
    let mut read = |what: &str, error: &StoreError| {
        problems.push(format!("cannot read {what}: {error}"));
    };
    let last_sweep = last_sweep
        .map_err(|e| read("the last sweep", &e))
        .ok()
        .flatten();
    let ledger = ledger.map_err(|e| read("the reclaim ledger", &e)).ok();
    let detached = detached.map_err(|e| read("the detached runs", &e)).ok();

    if let Some(l) = ledger.filter(|l| l.leaked > 0) {
        problems.push(format!(
            "{} sandbox(es) of finished runs could not be destroyed and may still be running \
             (and billing); every sweep retries them: the reclaim ledger's lastError says why",
            l.leaked
        ));
    }
    let stale_detached = limits.stale_detached_ms();
    if let Some(age) = detached
        .as_ref()
        .and_then(|d| d.oldest_detached_ms)
        .filter(|age| *age > i64::try_from(stale_detached).unwrap_or(i64::MAX))
    {
        problems.push(format!(
            "the oldest detached run has waited {}, longer than the TTL + run budget + 2 \
             schedule intervals ({}): sweeps are not running, or not keeping up",
            human(age),
            human(stale_detached as i64)
        ));
    }
    let last_sweep_age_ms = last_sweep
        .as_ref()
        .map(|s| now.saturating_sub(s.finished_at).max(0));
    let stale_sweep = limits.stale_sweep_ms();
    if let Some(age) =
        last_sweep_age_ms.filter(|age| *age > i64::try_from(stale_sweep).unwrap_or(i64::MAX))
    {
        problems.push(format!(
            "the last sweep finished {} ago, longer than one budget + 2 schedule intervals \
             ({}): the cron is not firing, or the function fails before sweeping (see its logs)",
            human(age),
            human(stale_sweep as i64)
        ));
    }
    if let Some(error) = last_sweep.as_ref().and_then(|s| s.listing_error.as_ref()) {
        problems.push(format!(
            "the last sweep could not list the detached runs, so it swept none: {error}"
        ));
    }
    if let Some(damage) = last_sweep.as_ref().and_then(|s| s.damaged.as_ref()) {
        problems.push(format!(
            "the last sweep stopped at damage in the database and swept nothing after it (no \
             run recorded terminal, no sandbox destroyed): {damage}"
        ));
    }
    ServiceStatus {
        healthy: problems.is_empty(),
        problems,
        now,
        last_sweep,
        last_sweep_age_ms,
        ledger,
        detached,
        limits,
        stale_detached_after_ms: stale_detached,
        stale_sweep_after_ms: stale_sweep,
    }
}

/// Reads the ledger counts and one page of the detached runs (oldest first) and assesses them
/// with the `last_sweep` read by the caller. Only reads: no claim, no lease, no write.
pub async fn read_status(
    runs: &dyn RunStore,
    ledger: &dyn ReclaimLedger,
    last_sweep: Result<Option<LastSweep>, StoreError>,
    limits: StatusLimits,
    now: EpochMs,
) -> ServiceStatus {
    let counts = ledger.ledger_counts().await;
    let page = runs
        .list_reclaimable_page(ReclaimableQuery {
            detached_after: None,
            detached_until: now,
            after: None,
            limit: STATUS_LISTING_LIMIT,
        })
        .await;
    let detached = page.map(|p| DetachedFigures::of(&p, now, limits.detached_ttl_ms));
    assess(now, limits, last_sweep, counts, detached)
}

/// `1h 2m 3s`-style, whole seconds (`0s` for less than one).
fn human(ms: i64) -> String {
    let secs = u64::try_from(ms / 1_000).unwrap_or(0);
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    let parts: Vec<String> = [(d, "d"), (h, "h"), (m, "m"), (s, "s")]
        .iter()
        .filter(|(v, _)| *v > 0)
        .map(|(v, unit)| format!("{v}{unit}"))
        .collect();
    if parts.is_empty() {
        "0s".into()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::domain::RunRecord;
    use crate::memory::MemoryStore;
    use crate::{ReclaimIntent, RunStatus};

    use super::*;

    const NOW: EpochMs = 1_800_000_000_000;
    const MIN: i64 = 60_000;

    fn limits() -> StatusLimits {
        StatusLimits {
            detached_ttl_ms: 30 * MIN as u64,
            run_budget_ms: 30_000,
            schedule_interval_ms: 5 * MIN as u64,
            budget_ms: 300_000,
        }
    }

    fn sweep_finished(ago_ms: i64) -> LastSweep {
        LastSweep {
            started_at: NOW - ago_ms - 4_000,
            finished_at: NOW - ago_ms,
            considered: 3,
            probed: 2,
            deferred: 0,
            outcomes: serde_json::json!({"finalized": 1, "reclaim-failed": 0}),
            ledger: Some(LedgerCounts::default()),
            slo: serde_json::json!({"backlog": 2}),
            listing_error: None,
            damaged: None,
            owner: "vercel:1:ab:0".into(),
        }
    }

    fn detached(store: &MemoryStore, run_id: &str, ago_ms: i64) {
        let mut r = RunRecord::new(run_id, "thread", NOW - ago_ms - 1_000);
        r.status = RunStatus::Running;
        r.detached_since = Some(NOW - ago_ms);
        store.put_run(r);
    }

    async fn status_of(store: &MemoryStore, last: Option<LastSweep>) -> ServiceStatus {
        read_status(store, store, Ok(last), limits(), NOW).await
    }

    #[test]
    fn the_stale_bounds_are_ttl_plus_run_budget_plus_two_intervals_and_budget_plus_two() {
        assert_eq!(
            limits().stale_detached_ms(),
            (30 * MIN + 30_000 + 10 * MIN) as u64
        );
        assert_eq!(limits().stale_sweep_ms(), (300_000 + 10 * MIN) as u64);
    }

    #[tokio::test]
    async fn a_recent_sweep_no_leak_and_young_detached_runs_are_healthy_with_every_figure() {
        let store = MemoryStore::new();
        detached(&store, "inside-ttl", 10 * MIN);
        detached(&store, "past-ttl", 31 * MIN);
        let status = status_of(&store, Some(sweep_finished(MIN))).await;
        assert!(status.healthy, "{:?}", status.problems);
        assert!(status.problems.is_empty());
        let d = status.detached.clone().unwrap();
        assert_eq!((d.listed, d.more, d.past_ttl, d.corrupt), (2, false, 1, 0));
        assert_eq!(d.oldest_detached_since, Some(NOW - 31 * MIN));
        assert_eq!(d.oldest_detached_ms, Some(31 * MIN));
        assert_eq!(status.last_sweep_age_ms, Some(MIN));
        assert_eq!(status.ledger, Some(LedgerCounts::default()));

        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["healthy"], true);
        assert_eq!(json["lastSweep"]["considered"], 3);
        assert_eq!(json["lastSweep"]["outcomes"]["finalized"], 1);
        assert_eq!(json["ledger"]["pending"], 0);
        assert_eq!(json["ledger"]["leaked"], 0);
        assert_eq!(json["detached"]["pastTtl"], 1);
        assert_eq!(json["detached"]["oldestDetachedMs"], 31 * MIN);
        assert_eq!(json["limits"]["detachedTtlMs"], 30 * MIN);
        assert_eq!(json["staleDetachedAfterMs"], 30 * MIN + 30_000 + 10 * MIN);
    }

    #[tokio::test]
    async fn a_recorded_leak_is_unhealthy_and_counted() {
        let store = MemoryStore::new();
        let mut finished = RunRecord::new("leaky", "thread", NOW - 20 * MIN);
        finished.status = RunStatus::Completed;
        let mut intent = ReclaimIntent::new(&finished, NOW - 10 * MIN);
        intent.attempts = 2;
        intent.last_error = Some("sandboxd answered 502".into());
        store.record_intent(&intent).await.unwrap();
        let status = status_of(&store, Some(sweep_finished(MIN))).await;
        assert!(!status.healthy);
        let ledger = status.ledger.unwrap();
        assert_eq!((ledger.pending, ledger.leaked), (1, 1));
        assert_eq!(ledger.oldest_first_seen, Some(NOW - 10 * MIN));
        assert_eq!(status.problems.len(), 1, "{:?}", status.problems);
        assert!(
            status.problems[0].starts_with("1 sandbox(es) of finished runs could not be destroyed"),
            "{:?}",
            status.problems
        );
    }

    #[tokio::test]
    async fn a_pending_intent_without_a_failed_destroy_is_not_a_leak() {
        let store = MemoryStore::new();
        let r = RunRecord::new("settling", "thread", NOW - MIN);
        store
            .record_intent(&ReclaimIntent::new(&r, NOW - MIN))
            .await
            .unwrap();
        let status = status_of(&store, Some(sweep_finished(MIN))).await;
        assert!(status.healthy, "{:?}", status.problems);
        assert_eq!(status.ledger.map(|l| (l.pending, l.leaked)), Some((1, 0)));
    }

    #[tokio::test]
    async fn a_detached_run_older_than_ttl_run_budget_and_two_intervals_is_unhealthy() {
        let store = MemoryStore::new();
        let bound = limits().stale_detached_ms() as i64;
        detached(&store, "at-the-bound", bound);
        assert!(status_of(&store, Some(sweep_finished(MIN))).await.healthy);

        detached(&store, "forgotten", bound + 1_000);
        let status = status_of(&store, Some(sweep_finished(MIN))).await;
        assert!(!status.healthy);
        assert_eq!(status.problems.len(), 1, "{:?}", status.problems);
        assert!(
            status.problems[0].contains(
                "the oldest detached run has waited 40m 31s, longer than the TTL + run budget \
                 + 2 schedule intervals (40m 30s)"
            ),
            "{:?}",
            status.problems
        );
    }

    #[tokio::test]
    async fn a_last_sweep_older_than_a_budget_and_two_intervals_is_unhealthy() {
        let store = MemoryStore::new();
        let bound = limits().stale_sweep_ms() as i64;
        assert!(status_of(&store, Some(sweep_finished(bound))).await.healthy);
        let status = status_of(&store, Some(sweep_finished(bound + 1_000))).await;
        assert!(!status.healthy);
        assert!(
            status.problems[0].starts_with("the last sweep finished 15m 1s ago"),
            "{:?}",
            status.problems
        );
        // Before the first sweep there is nothing to be late against.
        let fresh = status_of(&store, None).await;
        assert!(fresh.healthy && fresh.last_sweep.is_none());
        assert_eq!(
            serde_json::to_value(&fresh).unwrap()["lastSweep"],
            serde_json::Value::Null
        );
    }

    #[tokio::test]
    async fn a_last_sweep_whose_listing_failed_is_unhealthy() {
        let mut last = sweep_finished(MIN);
        last.listing_error = Some("store unavailable: throttled".into());
        let status = status_of(&MemoryStore::new(), Some(last)).await;
        assert!(!status.healthy);
        assert!(status.problems[0].ends_with("so it swept none: store unavailable: throttled"));
    }

    #[tokio::test]
    async fn a_last_sweep_that_stopped_at_damage_is_unhealthy_and_says_so() {
        let store = MemoryStore::new();
        let mut last = sweep_finished(MIN);
        last.damaged = Some("the database is damaged: ResourceNotFoundException".into());
        let status = status_of(&store, Some(last)).await;
        assert!(!status.healthy);
        assert!(
            status.problems.iter().any(|p| p.contains("stopped at damage")
                && p.contains("ResourceNotFoundException")),
            "{:?}",
            status.problems
        );
    }

    #[test]
    fn a_read_that_failed_is_unhealthy_and_named() {
        let down = || StoreError::Unavailable("throttled".into());
        let status = assess(NOW, limits(), Err(down()), Err(down()), Err(down()));
        assert!(!status.healthy);
        assert_eq!(
            status.problems,
            [
                "cannot read the last sweep: store unavailable: throttled",
                "cannot read the reclaim ledger: store unavailable: throttled",
                "cannot read the detached runs: store unavailable: throttled",
            ]
        );
        assert_eq!((status.ledger, status.detached), (None, None));
    }

    #[tokio::test]
    async fn a_long_backlog_is_read_in_one_bounded_page_oldest_first() {
        let store = MemoryStore::new();
        for i in 0..(STATUS_LISTING_LIMIT as i64 + 5) {
            detached(&store, &format!("run-{i:03}"), MIN + i * 1_000);
        }
        let d = status_of(&store, None).await.detached.unwrap();
        assert_eq!((d.listed, d.more), (STATUS_LISTING_LIMIT, true));
        assert_eq!(
            d.oldest_detached_ms,
            Some(MIN + (STATUS_LISTING_LIMIT as i64 + 4) * 1_000)
        );
    }

    #[tokio::test]
    async fn reading_the_status_writes_nothing() {
        let store = Arc::new(MemoryStore::new());
        detached(&store, "old", 2 * limits().stale_detached_ms() as i64);
        let r = RunRecord::new("leaky", "thread", NOW - MIN);
        let mut intent = ReclaimIntent::new(&r, NOW - MIN);
        intent.attempts = 1;
        store.record_intent(&intent).await.unwrap();
        let before = format!("{store:?}");
        let status = status_of(&store, Some(sweep_finished(MIN))).await;
        assert!(!status.healthy);
        assert_eq!(
            format!("{store:?}"),
            before,
            "the status read changed the store"
        );
        let run = RunStore::get(&*store, "old").await.unwrap().unwrap();
        assert_eq!((run.status, run.driver_epoch), (RunStatus::Running, None));
    }
}
