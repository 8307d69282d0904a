//! Where we do better than the reference: each improvement of the core issue has its own test.

mod common;

use std::sync::Arc;

use common::{entry, Harness, NOW};
use reaper_core::domain::RunStatus;
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{Clock, DeliveryLog, RunStore};
use reaper_core::reap::{sweep, ReapOutcome, SweepStatus};
use reaper_core::{Chunk, ClaimRefusal, ReapError};
use reaper_testkit::fakes::{DriveScript, Op};

const FRESH: i64 = NOW - 60_000;

/// 1. Airtight fencing: a holder paused between the core's latch check and its append (the
/// window in which the reference re-read the epoch and still wrote) cannot land the append.
#[tokio::test(start_paused = true)]
async fn superseded_holder_paused_between_check_and_append_lands_nothing() {
    let h = Harness::new();
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 0);
    let memory = h.memory.clone();
    // Just before the first append reaches the store, a successor claims the run.
    h.store.before_each(move |op| {
        if matches!(op, Op::Append(r, _) if r == "r") {
            let _ = futures::FutureExt::now_or_never(memory.bump_epoch("r"))
                .expect("memory store is immediate");
        }
    });
    let report = h.sweep().await;
    assert_eq!(h.store.appended("r"), 0, "a superseded append landed");
    let r = h.record("r").await;
    assert_eq!(
        r.status,
        RunStatus::Running,
        "a superseded terminal write landed"
    );
    assert!(r.finished_at.is_none());
    assert_eq!(r.driver_epoch, Some(2));
    assert_eq!(entry(&report, "r").outcome, ReapOutcome::NotClaimed);
    // The log is the successor's now: a superseded driver never closes it (the successor's
    // appends would be refused and its finished run recorded failed).
    assert_eq!(h.store.closes("r"), 0, "a superseded driver closed the log");
    assert!(!h.memory.snapshot("r").await.unwrap().closed);
}

#[tokio::test(start_paused = true)]
async fn superseded_holder_paused_between_check_and_terminal_write_cannot_terminalize() {
    let h = Harness::new();
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 0);
    let memory = h.memory.clone();
    h.store.before_each(move |op| {
        if matches!(op, Op::WriteTerminal(r, _) if r == "r") {
            let _ = futures::FutureExt::now_or_never(memory.bump_epoch("r"))
                .expect("memory store is immediate");
        }
    });
    let report = h.sweep().await;
    // Its appends landed while it held the claim; the terminal write did not.
    assert_eq!(h.store.appended("r"), 2);
    assert_eq!(h.record("r").await.status, RunStatus::Running);
    let e = entry(&report, "r");
    assert_eq!(e.outcome, ReapOutcome::NotClaimed);
    assert_eq!(e.status, Some(RunStatus::Running));
    assert_eq!(e.exit_code, Some(0));
    assert!(e.error.is_none());
}

/// 2. No needless sleeping: when the log says it has been quiet for longer than the window, the
/// quiet wait ends at once. 25 finished runs at the default 5 s window take no virtual time.
#[tokio::test(start_paused = true)]
async fn quiet_wait_ends_at_once_when_the_log_was_last_appended_long_ago() {
    let mut h = Harness::new();
    h.options.fence_quiet_ms = reaper_core::claim::DEFAULT_FENCE_QUIET_MS;
    for i in 0..25 {
        let id = format!("r{i}");
        h.seed(&id, Some(FRESH), None);
        h.probe.finished(&id, 0);
        h.memory
            .append(&id, None, vec![Chunk::text("delivered")], NOW - 60_000)
            .await
            .unwrap();
    }
    let start = h.clock.now_ms();
    let report = h.sweep().await;
    assert_eq!(report.outcomes.finalized, 25);
    assert_eq!(h.clock.now_ms() - start, 0, "the sweep slept");
}

#[tokio::test(start_paused = true)]
async fn quiet_wait_falls_back_to_snapshot_polling_when_the_log_was_just_appended() {
    let mut h = Harness::new();
    h.options.fence_quiet_ms = 5_000;
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 0);
    h.memory
        .append("r", None, vec![Chunk::text("just now")], NOW)
        .await
        .unwrap();
    let start = h.clock.now_ms();
    let report = h.sweep().await;
    assert_eq!(entry(&report, "r").outcome, ReapOutcome::Finalized);
    assert_eq!(h.clock.now_ms() - start, 5_000);
}

/// 3. A busy claim is answered at once, with no epoch bump and no waiting.
#[tokio::test(start_paused = true)]
async fn run_claimed_elsewhere_is_not_claimed_at_once() {
    let h = Harness::new();
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 0);
    h.leases.hold_elsewhere("run-driver:r");
    let start = h.clock.now_ms();
    let report = h.sweep().await;
    let e = entry(&report, "r");
    assert_eq!(e.outcome, ReapOutcome::NotClaimed);
    assert!(matches!(
        e.error.as_deref(),
        Some(ReapError::ClaimNotAcquired {
            reason: ClaimRefusal::Busy,
            ..
        })
    ));
    assert_eq!(h.clock.now_ms(), start);
    assert_eq!(h.record("r").await.driver_epoch, None);
    assert!(h.drive.driven().is_empty());
}

#[tokio::test(start_paused = true)]
async fn losing_the_lease_mid_drive_aborts_the_drive_and_suppresses_the_terminal_write() {
    let mut h = Harness::new();
    h.options.claim_ttl_ms = Some(3_000);
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 0);
    h.drive.script("r", DriveScript::UntilAborted);
    h.leases.lose_on_renew("run-driver:r");
    let start = h.clock.now_ms();
    let report = h.sweep().await;
    // The first renewal (a third of the TTL) finds the lease gone and cancels the drive, long
    // before the 30 s budget.
    assert_eq!(h.clock.now_ms() - start, 1_000);
    let e = entry(&report, "r");
    assert_eq!(e.outcome, ReapOutcome::NotClaimed);
    assert_eq!(h.record("r").await.status, RunStatus::Running);
    assert_eq!(h.store.appended("r"), 1, "the chunk before the loss landed");
}

#[tokio::test(start_paused = true)]
async fn held_claim_is_renewed_while_a_long_drive_runs() {
    let mut h = Harness::new();
    h.options.claim_ttl_ms = Some(300);
    h.options.run_budget_ms = 10_000;
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 0);
    h.drive
        .script("r", DriveScript::IgnoresAbort { every_ms: 100 });
    let report = h.sweep().await;
    // Without renewals the 300 ms lease would lapse long before the 10 s budget; with them the
    // run is still this host's when the budget stops it (a finished run's stop keeps it running
    // for the next sweep to resume: the chunks landed are the proof it was still held).
    let e = entry(&report, "r");
    assert_eq!(e.outcome, ReapOutcome::BudgetExceeded);
    assert_eq!(e.terminalized_anyway, Some(false));
    assert_eq!(h.record("r").await.status, RunStatus::Running);
    assert!(h.store.appended("r") >= 99, "{}", h.store.appended("r"));
}

/// 4. Deadline-aware batches: never start a run that cannot finish before the deadline.
#[tokio::test(start_paused = true)]
async fn sweep_defers_runs_it_cannot_finish_before_the_deadline() {
    let mut h = Harness::new();
    h.options.fence_quiet_ms = 1_000; // each driven run waits one quiet window
    h.options.per_run_reserve_ms = Some(1_500);
    h.options.deadline = Some(NOW + 3_000);
    for i in 0..5 {
        let id = format!("r{i}");
        h.seed(&id, Some(FRESH), None);
        h.probe.finished(&id, 0);
    }
    let report = h.sweep().await;
    assert_eq!(report.considered, 2);
    assert_eq!(report.deferred, 3);
    assert_eq!(report.outcomes.finalized, 2);
    assert!(h.clock.now_ms() <= NOW + 3_000);
    assert_eq!(h.drive.driven(), vec!["r0", "r1"]);
}

#[tokio::test(start_paused = true)]
async fn max_runs_stays_the_hard_cap_under_a_generous_deadline() {
    let mut h = Harness::new();
    h.options.max_runs = 2;
    h.options.deadline = Some(NOW + 3_600_000);
    for i in 0..5 {
        h.seed(&format!("r{i}"), Some(FRESH), None);
    }
    let report = h.sweep().await;
    assert_eq!(report.considered, 2);
    assert_eq!(report.deferred, 0);
}

/// 5. Single flight across overlapping triggers.
#[tokio::test(start_paused = true)]
async fn overlapping_sweeps_never_sweep_at_once_and_the_loser_says_so() {
    let mut h = Harness::new();
    h.options.fence_quiet_ms = 1_000;
    for i in 0..3 {
        let id = format!("r{i}");
        h.seed(&id, Some(FRESH), None);
        h.probe.finished(&id, 0);
    }
    let deps = h.deps();
    let mut other = h.options.clone();
    other.owner = "other-host".into();
    let (a, b) = tokio::join!(
        sweep(&deps, &h.options, 60_000),
        sweep(&deps, &other, 60_000)
    );
    let (winner, loser) = if a.sweep == SweepStatus::Swept {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(winner.sweep, SweepStatus::Swept);
    assert_eq!(winner.report.outcomes.finalized, 3);
    match loser.sweep {
        SweepStatus::AlreadyRunning { holder, .. } => {
            assert!(holder == "test-host" || holder == "other-host")
        }
        other => panic!("expected already-running, got {other:?}"),
    }
    assert_eq!(loser.report.considered, 0);
    assert_eq!(h.drive.driven().len(), 3, "a run was driven twice");
    // The lease is released: the next sweep runs.
    let next = sweep(&deps, &h.options, 60_000).await;
    assert_eq!(next.sweep, SweepStatus::Swept);
}

#[tokio::test(start_paused = true)]
async fn sweep_lease_store_failure_is_a_reported_state_not_an_error() {
    let h = Harness::new();
    h.seed("r", Some(FRESH), None);
    let leases = reaper_testkit::fakes::FaultyLeases::new(MemoryStore::new());
    leases.hold_elsewhere(reaper_core::reap::SWEEP_LEASE_KEY);
    let mut deps = h.deps();
    deps.leases = Arc::new(leases);
    let report = sweep(&deps, &h.options, 60_000).await;
    assert!(matches!(report.sweep, SweepStatus::AlreadyRunning { .. }));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["sweep"]["state"], "already-running");
    assert_eq!(json["considered"], 0);
}

/// 6. Invalid options are rejected up front with a clear error.
#[tokio::test(start_paused = true)]
async fn zero_budget_is_rejected_before_any_run_is_touched() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 0;
    h.seed("r", Some(FRESH), None);
    let err = reaper_core::reap::reap_detached_runs(&h.deps(), &h.options)
        .await
        .unwrap_err();
    assert_eq!(err.option, "run_budget_ms");
    assert!(err.to_string().contains("out of range"));
    assert!(h.store.ops().is_empty());
    let report = sweep(&h.deps(), &h.options, 60_000).await;
    assert!(matches!(report.sweep, SweepStatus::InvalidOptions { .. }));
}

#[tokio::test(start_paused = true)]
async fn out_of_range_budget_and_empty_owner_are_rejected() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 1 << 40;
    assert_eq!(h.options.validate().unwrap_err().option, "run_budget_ms");
    h.options.run_budget_ms = 1_000;
    h.options.owner = "  ".into();
    assert_eq!(h.options.validate().unwrap_err().option, "owner");
    h.options.owner = "me".into();
    h.options.claim_ttl_ms = Some(0);
    assert_eq!(h.options.validate().unwrap_err().option, "claim_ttl_ms");
}

/// The budget is sampled the moment the pipe returns (spec B.4's race): a drive that ends
/// exactly as the budget would fire is judged by what happened first.
#[tokio::test(start_paused = true)]
async fn run_that_completes_within_budget_is_never_reported_over_budget() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 1_000;
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 0);
    let report = h.sweep().await;
    assert_eq!(entry(&report, "r").outcome, ReapOutcome::Finalized);
    let _ = RunStore::get(&h.memory, "r").await;
}

#[tokio::test(start_paused = true)]
async fn stopped_sweep_finishes_the_run_in_progress_and_defers_the_rest() {
    let mut h = Harness::new();
    h.options.fence_quiet_ms = 1_000;
    for i in 0..4 {
        let id = format!("r{i}");
        h.seed(&id, Some(FRESH), None);
        h.probe.finished(&id, 0);
    }
    let stop = reaper_core::CancellationToken::new();
    let deps = h.deps();
    let stopper = {
        let stop = stop.clone();
        async move {
            // Halfway through the second run's quiet window.
            tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
            stop.cancel();
        }
    };
    let (report, ()) = tokio::join!(
        reaper_core::reap::sweep_until(&deps, &h.options, 60_000, Some(&stop)),
        stopper
    );
    assert_eq!(report.sweep, SweepStatus::Swept);
    assert_eq!(report.report.outcomes.finalized, 2);
    assert_eq!(report.report.deferred, 2);
    let next = sweep(&deps, &h.options, 60_000).await;
    assert_eq!(next.report.outcomes.finalized, 2, "the lease was released");
}
