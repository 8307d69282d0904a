//! Sweep records: each sweep leaves one in the store, in the same call as its runs' history,
//! with its outcome counts; a failed listing records a failed sweep; a failed write is
//! reported and never fatal; the store keeps a bounded number.

mod common;

use common::{entry, Harness, NOW, TTL};
use reaper_core::ports::RunStore;
use reaper_core::reap::ReapOutcome;
use reaper_core::{RunStatus, StoreError};
use reaper_testkit::fakes::Op;

const FRESH: i64 = NOW - 60_000;
const LONG_AGO: i64 = NOW - 2 * TTL as i64;

#[tokio::test(start_paused = true)]
async fn a_sweep_records_itself_with_its_outcome_counts_in_the_call_that_writes_its_history() {
    let mut h = Harness::new();
    h.seed("done", Some(FRESH), Some("box-done"));
    h.probe.finished("done", 0);
    h.seed("old", Some(LONG_AGO), None);
    h.seed("busy", Some(FRESH), None);
    let report = h.sweep().await;
    assert!(report.history.sweep_recorded, "{:?}", report.history);
    // The producing run is counted in the record, not given a history entry.
    assert_eq!(report.history.recorded, 2);

    let sweeps = h.memory.recent_sweeps(10).await.unwrap();
    assert_eq!(sweeps.len(), 1, "{sweeps:?}");
    let r = &sweeps[0];
    assert_eq!(r.host, "test-host");
    assert_eq!(r.considered, 3);
    assert_eq!(r.outcomes, report.outcomes);
    assert_eq!(
        (
            r.outcomes.finalized,
            r.outcomes.expired,
            r.outcomes.producing
        ),
        (1, 1, 1)
    );
    assert_eq!(r.concurrency, report.concurrency.peak);
    assert_eq!(r.concurrency_cap, report.concurrency.cap);
    assert!(!r.failed && r.error.is_none() && !r.dry_run, "{r:?}");
    assert!(r.finished_at >= r.started_at);
    assert_eq!(r.duration_ms, r.finished_at - r.started_at);
    let history = h.memory.run_history("done", 1).await.unwrap();
    assert_eq!(
        history[0].sweep_id, r.sweep_id,
        "the record and the entries share the sweep id"
    );
    assert_eq!(
        h.store
            .ops()
            .iter()
            .filter(|op| matches!(op, Op::RecordHistory(_)))
            .count(),
        1,
        "one store call writes the entries and the record"
    );

    // A sweep that touched no run still records itself (a second later: another sweep id).
    h.options.now = Some(NOW + 1_000);
    let idle = h.sweep().await;
    assert!(idle.history.sweep_recorded);
    assert_eq!(h.memory.recent_sweeps(10).await.unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_sweep_whose_listing_failed_records_itself_as_failed_with_the_error() {
    let h = Harness::new();
    h.seed("old", Some(LONG_AGO), None);
    h.store.fail_when(|op, _| {
        matches!(op, Op::ListReclaimable)
            .then(|| StoreError::Unavailable("the runs table is locked".into()))
    });
    let report = h.sweep().await;
    assert!(report.listing_error.is_some(), "{report:?}");
    let sweeps = h.memory.recent_sweeps(10).await.unwrap();
    assert_eq!(sweeps.len(), 1, "{sweeps:?}");
    assert!(sweeps[0].failed);
    let error = sweeps[0].error.as_deref().unwrap_or_default();
    assert!(
        error.contains("the listing failed") && error.contains("the runs table is locked"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_sweep_record_write_is_reported_and_never_changes_an_outcome() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::RecordHistory(_))
            .then(|| StoreError::Unavailable("the sweeps table is locked".into()))
    });
    let report = h.sweep().await;
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert_eq!(h.record("done").await.status, RunStatus::Completed);
    assert!(!report.history.sweep_recorded);
    assert!(report
        .history
        .error
        .as_deref()
        .is_some_and(|e| e.contains("the sweeps table is locked")));
    assert!(h.memory.recent_sweeps(10).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_leaves_no_record() {
    let mut h = Harness::new();
    h.seed("old", Some(LONG_AGO), None);
    h.options.dry_run = true;
    let report = reaper_core::reap::sweep(&h.deps(), &h.options, 60_000).await;
    assert_eq!(report.sweep, reaper_core::reap::SweepStatus::DryRun);
    assert!(h.memory.recent_sweeps(10).await.unwrap().is_empty());
}
