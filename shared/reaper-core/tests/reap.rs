//! The sweep, behaviour by behaviour (spec H1.5–25 and B), on virtual time.

mod common;

use std::sync::Arc;

use common::{entry, Harness, NOW, TTL};
use reaper_core::domain::{Chunk, RunStatus, SandboxInstanceRecord};
use reaper_core::error::{DriveError, ReapError, StoreError};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{Clock, RunExitProbe, SandboxInstanceStore};
use reaper_core::reap::{
    ReapOutcome, SandboxFate, DEFAULT_EXIT_PROBE_BYTES, DEFAULT_MAX_RUNS, DEFAULT_RUN_BUDGET_MS,
};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_testkit::fakes::{DriveScript, FakeProvider, LogCapture, Op};
use tracing::Level;

const FRESH: i64 = NOW - 60_000;
const EXPIRED: i64 = NOW - TTL as i64 - 1;

#[test]
fn defaults_match_the_reference() {
    assert_eq!(DEFAULT_MAX_RUNS, 25);
    assert_eq!(DEFAULT_RUN_BUDGET_MS, 30_000);
    assert_eq!(DEFAULT_EXIT_PROBE_BYTES, 4_096);
    assert_eq!(reaper_core::claim::DEFAULT_FENCE_QUIET_MS, 5_000);
}

#[tokio::test(start_paused = true)]
async fn batch_is_capped_at_the_default_max_runs_before_any_probe() {
    let h = Harness::new();
    for i in 0..DEFAULT_MAX_RUNS + 5 {
        h.seed(&format!("r{i:02}"), Some(FRESH), None);
    }
    let report = h.sweep().await;
    assert_eq!(report.considered, 25);
    assert_eq!(report.runs.len(), 25);
    assert_eq!(report.probed, 25);
    assert_eq!(h.probe.calls().len(), 25);
}

#[tokio::test(start_paused = true)]
async fn run_detached_exactly_at_the_cutoff_is_expired_and_one_ms_later_is_probed() {
    let h = Harness::new();
    h.seed("at-cutoff", Some(NOW - TTL as i64), None);
    h.seed("inside", Some(NOW - TTL as i64 + 1), None);
    let report = h.sweep().await;
    assert_eq!(entry(&report, "at-cutoff").outcome, ReapOutcome::Expired);
    assert_eq!(entry(&report, "inside").outcome, ReapOutcome::Producing);
    assert_eq!(report.probed, 1);
    assert_eq!(h.probe.calls(), vec!["inside"]);
    assert_eq!(h.drive.driven(), vec!["at-cutoff"]);
}

#[tokio::test(start_paused = true)]
async fn store_without_list_reclaimable_sweeps_nothing_and_says_why() {
    let mut h = Harness::new();
    h.store = h.store.clone().without_listing();
    h.seed("r1", Some(FRESH), None);
    let (logs, _g) = LogCapture::install();
    let report = h.sweep().await;
    assert_eq!(report.considered, 0);
    assert_eq!(report.probed, 0);
    assert!(report.runs.is_empty());
    assert_eq!(report.outcomes.failed, 0);
    assert!(logs.any("list_reclaimable"));
}

#[tokio::test(start_paused = true)]
async fn failed_listing_resolves_with_nothing_considered_and_an_error_log() {
    let h = Harness::new();
    h.seed("r1", Some(FRESH), None);
    h.store.fail_when(|op, _| {
        matches!(op, Op::ListReclaimable).then(|| StoreError::Unavailable("db down".into()))
    });
    let (logs, _g) = LogCapture::install();
    let report = h.sweep().await;
    assert_eq!(report.considered, 0);
    assert!(logs.count(Level::ERROR) >= 1);
    // Not a clean sweep: the report says why nothing was swept.
    assert!(report.listing_error.as_deref().unwrap().contains("db down"));
    assert!(serde_json::to_value(&report).unwrap()["listingError"].is_string());
}

#[tokio::test(start_paused = true)]
async fn producing_run_is_left_completely_alone_while_a_finished_one_is_finalized() {
    let h = Harness::new();
    h.seed("live", Some(FRESH), None);
    h.seed("done", Some(FRESH), Some("k-done"));
    h.probe.finished("done", 0);
    let report = h.sweep().await;

    assert_eq!(entry(&report, "live").outcome, ReapOutcome::Producing);
    assert_eq!(h.store.appended("live"), 0);
    assert_eq!(h.store.closes("live"), 0);
    assert!(
        h.store.writes_for("live").is_empty(),
        "{:?}",
        h.store.writes_for("live")
    );
    let live = h.record("live").await;
    assert_eq!(live.status, RunStatus::Running);
    assert_eq!(live.detached_since, Some(FRESH));
    assert_eq!(live.driver_epoch, None);

    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert_eq!(h.drive.driven(), vec!["done"]);
    assert_eq!(h.store.appended("done"), 2);
    assert_eq!(h.store.closes("done"), 1);
}

#[tokio::test(start_paused = true)]
async fn unknown_probe_carries_its_error_and_is_not_driven() {
    let h = Harness::new();
    h.seed("lost", Some(FRESH), None);
    h.seed("done", Some(FRESH), None);
    h.probe.answer(
        "lost",
        RunExitProbe::Unknown {
            error: Some("no handle".into()),
        },
    );
    h.probe.finished("done", 0);
    let report = h.sweep().await;
    let lost = entry(&report, "lost");
    assert_eq!(lost.outcome, ReapOutcome::Unknown);
    assert!(lost
        .error
        .as_ref()
        .unwrap()
        .to_string()
        .contains("no handle"));
    assert_eq!(h.drive.driven(), vec!["done"]);
    assert_eq!(h.store.closes("lost"), 0);
    assert_eq!(report.outcomes.unknown, 1);
    assert_eq!(report.outcomes.finalized, 1);
}

#[tokio::test(start_paused = true)]
async fn finished_run_is_finalized_with_its_exit_code_and_only_it_is_reclaimed() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), Some("k-1"));
    h.seed("live", Some(FRESH), Some("k-2"));
    h.probe.finished("done", 3);
    let report = h.sweep().await;
    let done = entry(&report, "done");
    assert_eq!(done.outcome, ReapOutcome::Finalized);
    assert_eq!(done.status, Some(RunStatus::Completed));
    assert_eq!(done.exit_code, Some(3));
    assert_eq!(done.terminalized_anyway, None);
    assert_eq!(h.store.appended("done"), 2);
    assert_eq!(h.store.closes("done"), 1);
    assert_eq!(h.record("done").await.status, RunStatus::Completed);
    assert_eq!(h.reclaim.reclaimed(), vec!["done"]);
    assert_eq!(entry(&report, "live").outcome, ReapOutcome::Producing);
}

#[tokio::test(start_paused = true)]
async fn failed_terminal_write_is_reported_failed_and_reclaims_nothing() {
    let h = Harness::new();
    h.seed("keep", Some(FRESH), Some("k-keep"));
    h.probe.finished("keep", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::WriteTerminal(..)).then(|| StoreError::Unavailable("disk full".into()))
    });
    let report = h.sweep().await;
    let keep = entry(&report, "keep");
    assert_eq!(keep.outcome, ReapOutcome::Failed);
    let error = keep.error.as_ref().expect("the failed write is named");
    assert_eq!(error.kind(), "terminal-not-confirmed");
    assert!(error.to_string().contains("sandbox is kept"), "{error}");
    assert!(h.reclaim.calls().is_empty(), "no destroy without proof");
    assert_eq!(h.record("keep").await.status, RunStatus::Running);
    assert_eq!(report.outcomes.finalized, 0);
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_terminal_write_failed_is_finalized_by_the_next_sweep() {
    let h = Harness::new();
    h.seed("keep", Some(FRESH), Some("k-keep"));
    h.probe.finished("keep", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::WriteTerminal(..)).then(|| StoreError::Unavailable("disk full".into()))
    });
    assert_eq!(entry(&h.sweep().await, "keep").outcome, ReapOutcome::Failed);
    h.store.fail_when(|_, _| None);
    let report = h.sweep().await;
    assert_eq!(entry(&report, "keep").outcome, ReapOutcome::Finalized);
    assert_eq!(h.reclaim.reclaimed(), vec!["keep"]);
    assert_eq!(h.record("keep").await.status, RunStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn expired_run_is_cancelled_before_it_is_driven() {
    let h = Harness::new();
    h.seed("old", Some(EXPIRED), None);
    h.seed("fresh", Some(NOW - 1_000), None);
    let report = h.sweep().await;

    assert_eq!(entry(&report, "old").outcome, ReapOutcome::Expired);
    assert_eq!(h.record("old").await.cancel_requested, Some(true));
    let ops = h.store.ops_for("old");
    let cancel_at = ops
        .iter()
        .position(|o| matches!(o, Op::Update(_, p) if p.cancel_requested == reaper_core::Patch::Set(true)))
        .expect("a cancel write");
    let first_append = ops
        .iter()
        .position(|o| matches!(o, Op::Append(..)))
        .expect("appends");
    let first_snapshot = ops
        .iter()
        .position(|o| matches!(o, Op::Snapshot(_)))
        .expect("quiet check");
    assert!(
        cancel_at < first_snapshot && first_snapshot < first_append,
        "{ops:?}"
    );
    assert!(entry(&report, "old").exit_code.is_none());

    assert_eq!(entry(&report, "fresh").outcome, ReapOutcome::Producing);
    assert_eq!(h.record("fresh").await.cancel_requested, None);
    assert_eq!(h.drive.driven(), vec!["old"]);
}

#[tokio::test(start_paused = true)]
async fn budget_stop_reads_expired_aborted_on_expiry_and_budget_exceeded_on_finalization() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 1;
    h.seed("old", Some(EXPIRED), None);
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.drive.script("old", DriveScript::UntilAborted);
    h.drive.script("done", DriveScript::UntilAborted);
    let report = h.sweep().await;

    let old = entry(&report, "old");
    assert_eq!(old.outcome, ReapOutcome::Expired);
    assert_eq!(old.status, Some(RunStatus::Aborted));
    assert_eq!(old.terminalized_anyway, None);
    assert_eq!(h.record("old").await.status, RunStatus::Aborted);
    assert!(h.reclaim.reclaimed().contains(&"old".to_string()));

    assert_eq!(entry(&report, "done").outcome, ReapOutcome::BudgetExceeded);
}

#[tokio::test(start_paused = true)]
async fn log_that_never_quiesces_fails_the_run_without_driving_it() {
    let h = Harness::new();
    h.seed("busy", Some(FRESH), None);
    h.seed("calm", Some(FRESH), None);
    h.probe.finished("busy", 0).finished("calm", 0);
    h.store.grow_snapshot("busy");
    let report = h.sweep().await;
    let busy = entry(&report, "busy");
    assert_eq!(busy.outcome, ReapOutcome::Failed);
    assert!(matches!(
        busy.error.as_deref(),
        Some(ReapError::NeverQuiesced { .. })
    ));
    assert_eq!(h.store.appended("busy"), 0);
    assert_eq!(h.drive.driven(), vec!["calm"]);
    assert_eq!(entry(&report, "calm").outcome, ReapOutcome::Finalized);
    // 1 + 6 probes: the reference's 7 snapshots.
    let snapshots = h
        .store
        .ops_for("busy")
        .iter()
        .filter(|o| matches!(o, Op::Snapshot(_)))
        .count();
    assert_eq!(snapshots, 7);
}

#[tokio::test(start_paused = true)]
async fn run_completed_before_its_claim_is_not_claimed_with_no_writes() {
    let h = Harness::new();
    h.seed("gone", Some(EXPIRED), None);
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    let memory = h.memory.clone();
    // The run completes elsewhere between the listing and this host's claim.
    h.leases.on_acquire(move |key| {
        if key == "run-driver:gone" {
            let mut r = memory
                .all_runs()
                .into_iter()
                .find(|r| r.run_id == "gone")
                .unwrap();
            r.status = RunStatus::Completed;
            memory.put_run(r);
        }
    });
    let report = h.sweep().await;
    let gone = entry(&report, "gone");
    assert_eq!(gone.outcome, ReapOutcome::NotClaimed);
    assert!(gone
        .error
        .as_ref()
        .unwrap()
        .to_string()
        .contains("driver claim not acquired"));
    // The only store call that could write was the atomic epoch bump, and it refused.
    assert_eq!(
        h.store.writes_for("gone"),
        vec![Op::BumpEpoch("gone".into())]
    );
    let r = h.record("gone").await;
    assert_eq!(r.cancel_requested, None);
    assert_eq!(r.driver_epoch, None);
    assert_eq!(h.drive.driven(), vec!["done"]);
    assert_eq!(h.reclaim.reclaimed(), vec!["done"]);
}

#[tokio::test(start_paused = true)]
async fn expired_run_whose_viewer_came_back_is_not_cancelled_or_driven() {
    let h = Harness::new();
    h.seed("back", Some(EXPIRED), Some("k-back"));
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    let memory = h.memory.clone();
    h.leases.on_acquire(move |key| {
        if key == "run-driver:back" {
            let mut r = memory
                .all_runs()
                .into_iter()
                .find(|r| r.run_id == "back")
                .unwrap();
            r.detached_since = None;
            memory.put_run(r);
        }
    });
    let report = h.sweep().await;
    let back = entry(&report, "back");
    assert_eq!(back.outcome, ReapOutcome::NotClaimed);
    assert!(matches!(
        back.error.as_deref(),
        Some(ReapError::ClaimNotAcquired {
            reason: reaper_core::ClaimRefusal::Superseded,
            ..
        })
    ));
    let r = h.record("back").await;
    assert_eq!(r.cancel_requested, None);
    assert_eq!(r.status, RunStatus::Running);
    // The claim had already bumped the epoch when the re-check refused (as the reference).
    assert_eq!(r.driver_epoch, Some(1));
    assert_eq!(h.store.appended("back"), 0);
    assert_eq!(h.store.closes("back"), 0);
    assert_eq!(h.drive.driven(), vec!["done"]);
    assert_eq!(h.reclaim.reclaimed(), vec!["done"]);
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
}

#[tokio::test(start_paused = true)]
async fn budget_is_armed_after_the_lease_and_quiet_waits() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 50;
    h.options.fence_quiet_ms = 25;
    h.leases.delay_acquire(100);
    h.seed("queued", Some(FRESH), Some("k-queued"));
    h.seed("live", Some(FRESH), None);
    h.probe.finished("queued", 0);
    let report = h.sweep().await;
    let queued = entry(&report, "queued");
    assert_eq!(queued.outcome, ReapOutcome::Finalized);
    assert_eq!(queued.status, Some(RunStatus::Completed));
    assert_eq!(h.store.appended("queued"), 2);
    assert_eq!(report.outcomes.budget_exceeded, 0);
    assert_eq!(h.reclaim.reclaimed(), vec!["queued"]);
    assert_eq!(entry(&report, "live").outcome, ReapOutcome::Producing);
}

#[tokio::test(start_paused = true)]
async fn lease_lost_on_arrival_is_not_claimed_and_nothing_lands() {
    let h = Harness::new();
    h.seed("a", Some(FRESH), None);
    h.seed("b", Some(FRESH), None);
    h.probe.finished("a", 0).finished("b", 0);
    h.leases.lose_on_arrival("run-driver:a");
    let report = h.sweep().await;
    assert_eq!(h.drive.signal_was_cancelled("a"), Some(true));
    assert_eq!(h.store.appended("a"), 0);
    assert_eq!(entry(&report, "a").outcome, ReapOutcome::NotClaimed);
    assert_eq!(h.record("a").await.status, RunStatus::Running);
    assert_eq!(h.drive.signal_was_cancelled("b"), Some(false));
    assert_eq!(entry(&report, "b").outcome, ReapOutcome::Finalized);
    assert_eq!(h.reclaim.reclaimed(), vec!["b"]);
}

#[tokio::test(start_paused = true)]
async fn probe_that_throws_is_failed_not_unknown_and_still_counts_as_probed() {
    let h = Harness::new();
    h.seed("a", Some(FRESH), None);
    h.seed("b", Some(FRESH), None);
    h.probe.fail("a", "probe exploded").finished("b", 0);
    let (logs, _g) = LogCapture::install();
    let report = h.sweep().await;
    let a = entry(&report, "a");
    assert_eq!(a.outcome, ReapOutcome::Failed);
    assert!(a
        .error
        .as_ref()
        .unwrap()
        .to_string()
        .contains("probe exploded"));
    assert_eq!(report.probed, 2);
    assert_eq!(h.drive.driven(), vec!["b"]);
    assert_eq!(report.outcomes.failed, 1);
    assert_eq!(report.outcomes.finalized, 1);
    assert!(logs.count(Level::ERROR) >= 1);
}

/// A finished run's output is never cut (issue 24, item 3): the budget stops the drive, what
/// landed stays, and the run stays `running` with its log open for the next sweep to resume.
#[tokio::test(start_paused = true)]
async fn finished_run_stopped_by_the_budget_stays_running_with_its_log_open() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 1;
    h.seed("stuck", Some(FRESH), None);
    h.seed("quick", Some(FRESH), None);
    h.probe.finished("stuck", 0).finished("quick", 0);
    h.drive.script("stuck", DriveScript::UntilAborted);
    h.drive
        .script("quick", DriveScript::Chunks(vec![Chunk::text("one")]));
    let report = h.sweep().await;
    let stuck = entry(&report, "stuck");
    assert_eq!(stuck.outcome, ReapOutcome::BudgetExceeded);
    assert_eq!(stuck.terminalized_anyway, Some(false));
    assert_eq!(stuck.status, Some(RunStatus::Running));
    assert_eq!(stuck.sandbox, None, "nothing reclaimed");
    assert_eq!(h.record("stuck").await.status, RunStatus::Running);
    assert_eq!(h.store.closes("stuck"), 0);
    assert_eq!(
        h.store.appended("stuck"),
        1,
        "the chunk before the stop landed"
    );
    assert!(!h.reclaim.reclaimed().contains(&"stuck".to_string()));
    let quick = entry(&report, "quick");
    assert_eq!(quick.outcome, ReapOutcome::Finalized);
    assert_eq!(quick.terminalized_anyway, None);
}

#[tokio::test(start_paused = true)]
async fn drive_that_ignores_the_abort_is_still_stopped_by_the_budget() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 100;
    h.seed("deaf", Some(FRESH), None);
    h.probe.finished("deaf", 0);
    h.drive
        .script("deaf", DriveScript::IgnoresAbort { every_ms: 10 });
    let report = h.sweep().await;
    let deaf = entry(&report, "deaf");
    assert_eq!(deaf.outcome, ReapOutcome::BudgetExceeded);
    assert_eq!(deaf.status, Some(RunStatus::Running));
    // The chunk in hand at the stop lands (a finished run's output), then the pipe stops.
    assert!(
        h.store.appended("deaf") <= 11,
        "{}",
        h.store.appended("deaf")
    );
}

#[tokio::test(start_paused = true)]
async fn rejected_reclaim_is_reported_as_reclaim_failed_with_status_and_exit_code() {
    let h = Harness::new();
    h.seed("leak", Some(FRESH), Some("k-leak"));
    h.seed("ok", Some(FRESH), Some("k-ok"));
    h.probe.finished("leak", 5).finished("ok", 0);
    h.reclaim.fail_for("leak");
    let (logs, _g) = LogCapture::install();
    let report = h.sweep().await;
    let leak = entry(&report, "leak");
    assert_eq!(leak.outcome, ReapOutcome::ReclaimFailed);
    assert_eq!(leak.status, Some(RunStatus::Completed));
    assert_eq!(leak.exit_code, Some(5));
    assert!(leak.error.is_some());
    assert_eq!(h.store.appended("leak"), 2);
    assert_eq!(h.store.closes("leak"), 1);
    assert_eq!(h.record("leak").await.status, RunStatus::Completed);
    assert!(logs.count(Level::ERROR) >= 1);
    assert_eq!(report.outcomes.reclaim_failed, 1);
    assert_eq!(report.outcomes.finalized, 1);
    assert_eq!(report.outcomes.failed, 0);
    assert_eq!(entry(&report, "ok").outcome, ReapOutcome::Finalized);
    assert_eq!(h.reclaim.reclaimed(), vec!["leak", "ok"]);
}

#[tokio::test(start_paused = true)]
async fn shipped_reclaimer_reports_a_failed_destroy_as_a_leak_and_keeps_it_in_the_ledger() {
    let mut h = Harness::new();
    h.with_reclaim = false;
    h.seed("leak", Some(FRESH), Some("k-leak"));
    h.seed("ok", Some(FRESH), Some("k-ok"));
    h.probe.finished("leak", 5).finished("ok", 0);
    let instances = MemoryStore::new();
    for (key, id) in [("k-leak", "sbx-leak"), ("k-ok", "sbx-ok")] {
        instances
            .upsert(SandboxInstanceRecord {
                key: key.into(),
                provider: "fake".into(),
                provider_sandbox_id: id.into(),
                latest_snapshot_id: None,
                thread_id: "t".into(),
                latest_run_id: None,
                updated_at: 1,
            })
            .await
            .unwrap();
    }
    let provider = FakeProvider::new("fake");
    provider.fail_destroy("sbx-leak");
    let mut deps = h.deps();
    deps.reclaim = Some(Arc::new(SandboxReclaimer {
        provider: Arc::new(provider.clone()),
        instances: Arc::new(instances.clone()),
        runs: Arc::new(instances.clone()),
    }));
    let (logs, _g) = LogCapture::install();
    let report = reaper_core::reap::reap_detached_runs(&deps, &h.options)
        .await
        .unwrap();
    let leak = entry(&report, "leak");
    assert_eq!(leak.outcome, ReapOutcome::ReclaimFailed);
    assert_eq!(leak.status, Some(RunStatus::Completed));
    assert_eq!(leak.exit_code, Some(5));
    match leak.error.as_deref() {
        Some(ReapError::ReclaimFailed(e)) => {
            assert_eq!(e.run_id, "leak");
            assert_eq!(e.sandbox_key.as_deref(), Some("k-leak"));
        }
        other => panic!("expected SandboxReclaimFailedError, got {other:?}"),
    }
    assert_eq!(h.store.closes("leak"), 1);
    let ok = entry(&report, "ok");
    assert_eq!(ok.outcome, ReapOutcome::Finalized);
    assert!(ok.error.is_none());
    assert_eq!(provider.destroy_calls(), vec!["sbx-leak", "sbx-ok"]);
    assert!(
        instances.get("k-leak").await.unwrap().is_some(),
        "the leak's record is kept for the retry"
    );
    assert!(instances.get("k-ok").await.unwrap().is_none());
    let ledger = report.reclaims.ledger.expect("the ledger was read");
    assert_eq!((ledger.pending, ledger.leaked), (1, 1));
    assert_eq!(leak.sandbox, Some(SandboxFate::Leaked));
    assert_eq!(ok.sandbox, Some(SandboxFate::Destroyed));
    assert_eq!(report.outcomes.reclaim_failed, 1);
    assert_eq!(report.outcomes.finalized, 1);
    assert_eq!(report.outcomes.failed, 0);
    assert!(logs.count(Level::ERROR) >= 1);
}

#[tokio::test(start_paused = true)]
async fn finished_run_stopped_by_the_budget_keeps_its_sandbox() {
    let mut h = Harness::new();
    h.options.run_budget_ms = 1;
    h.seed("stuck", Some(FRESH), None);
    h.seed("ok", Some(FRESH), None);
    h.probe.finished("stuck", 0).finished("ok", 0);
    h.drive.script("stuck", DriveScript::UntilAborted);
    h.reclaim.fail_for("stuck");
    let report = h.sweep().await;
    let stuck = entry(&report, "stuck");
    assert_eq!(stuck.outcome, ReapOutcome::BudgetExceeded);
    assert_eq!(stuck.terminalized_anyway, Some(false));
    assert!(stuck.error.is_none());
    assert!(!h.reclaim.reclaimed().contains(&"stuck".to_string()));
    assert_eq!(entry(&report, "ok").outcome, ReapOutcome::Finalized);
    assert_eq!(entry(&report, "ok").terminalized_anyway, None);
}

#[tokio::test(start_paused = true)]
async fn default_budget_applies_when_none_is_given() {
    let h = Harness::new();
    assert_eq!(h.options.run_budget_ms, DEFAULT_RUN_BUDGET_MS);
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    let report = h.sweep().await;
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert_eq!(report.outcomes.budget_exceeded, 0);
}

#[tokio::test(start_paused = true)]
async fn expired_run_with_an_empty_drive_is_expired_and_completed() {
    let mut h = Harness::new();
    h.options.detached_run_ttl_ms = 0;
    h.seed("r", Some(NOW - 1_000), None);
    h.probe.answer("r", RunExitProbe::Unknown { error: None });
    h.drive.script("r", DriveScript::Chunks(vec![]));
    let report = h.sweep().await;
    assert_eq!(report.considered, 1);
    assert_eq!(entry(&report, "r").outcome, ReapOutcome::Expired);
    assert_eq!(h.record("r").await.status, RunStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn run_error_chunk_in_the_replay_finalizes_as_failed() {
    let h = Harness::new();
    h.seed("r", Some(FRESH), None);
    h.probe.finished("r", 1);
    h.drive.script(
        "r",
        DriveScript::Chunks(vec![
            Chunk::text("partial"),
            Chunk::run_error(&reaper_core::RunError::new("agent exited with code 1")),
        ]),
    );
    let report = h.sweep().await;
    let r = entry(&report, "r");
    assert_eq!(r.outcome, ReapOutcome::Finalized);
    assert_eq!(r.status, Some(RunStatus::Failed));
    assert_eq!(
        h.record("r").await.error.unwrap().message,
        "agent exited with code 1"
    );
}

#[tokio::test(start_paused = true)]
async fn drive_that_fails_to_start_is_failed_and_leaves_the_log_open() {
    let h = Harness::new();
    h.seed("old", Some(EXPIRED), None);
    h.drive
        .script("old", DriveScript::SyncError(DriveError::new("no sandbox")));
    let report = h.sweep().await;
    let old = entry(&report, "old");
    assert_eq!(old.outcome, ReapOutcome::Failed);
    assert!(old
        .error
        .as_ref()
        .unwrap()
        .to_string()
        .contains("no sandbox"));
    let r = h.record("old").await;
    assert_eq!(r.cancel_requested, Some(true));
    assert_eq!(r.driver_epoch, Some(1));
    assert_eq!(h.store.closes("old"), 0);
}

#[tokio::test(start_paused = true)]
async fn outcome_counts_always_add_up_to_considered_and_serialize_all_eight_keys() {
    let h = Harness::new();
    h.seed("a", Some(FRESH), None);
    h.seed("b", Some(EXPIRED), None);
    h.seed("c", Some(FRESH), None);
    h.probe.finished("c", 0);
    let report = h.sweep().await;
    assert_eq!(report.outcomes.total(), report.considered);
    let json = serde_json::to_value(&report).unwrap();
    let keys: Vec<&str> = json["outcomes"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    for k in [
        "finalized",
        "expired",
        "producing",
        "unknown",
        "budget-exceeded",
        "not-claimed",
        "reclaim-failed",
        "failed",
    ] {
        assert!(keys.contains(&k), "missing {k} in {keys:?}");
    }
    // The expired run is listed first (issue 13), then the runs inside the TTL.
    assert_eq!(json["runs"][1]["runId"], "a");
    assert!(
        json["runs"][1].get("status").is_none(),
        "producing entries carry nothing else"
    );
}

#[tokio::test(start_paused = true)]
async fn sweep_uses_the_injected_clock_when_no_now_is_given() {
    let mut h = Harness::new();
    h.options.now = None;
    h.seed("r", Some(h.clock.now_ms() - TTL as i64), None);
    let report = h.sweep().await;
    assert_eq!(entry(&report, "r").outcome, ReapOutcome::Expired);
}

#[tokio::test(start_paused = true)]
async fn corrupt_row_is_reported_and_the_rest_of_the_batch_is_swept() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.store.inject_corrupt_row("bad-row");
    let (logs, _g) = LogCapture::install();
    let report = h.sweep().await;
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert_eq!(report.corrupt.len(), 1);
    assert_eq!(report.corrupt[0].key.as_deref(), Some("bad-row"));
    assert!(logs.contains(Level::ERROR, "corrupt"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["corrupt"][0]["key"], "bad-row");
}

/// A probe that takes `ms` of (virtual) time per run, as a slow sandbox host does.
#[derive(Clone)]
struct SlowProbe {
    ms: u64,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait::async_trait]
impl reaper_core::ports::ExitProbe for SlowProbe {
    async fn has_finished(
        &self,
        _record: &reaper_core::RunRecord,
    ) -> Result<RunExitProbe, reaper_core::ProbeError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.peak.fetch_max(now, SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(self.ms)).await;
        self.in_flight.fetch_sub(1, SeqCst);
        Ok(RunExitProbe::Producing)
    }
}

#[tokio::test(start_paused = true)]
async fn runs_overlap_up_to_the_concurrency_and_are_reported_in_listing_order() {
    let mut h = Harness::new();
    h.options.max_runs = 100;
    h.options.concurrency = 16;
    for i in 0..100 {
        h.seed(&format!("r{i:03}"), Some(FRESH), None);
    }
    let probe = SlowProbe {
        ms: 50,
        in_flight: Default::default(),
        peak: Default::default(),
    };
    let mut deps = h.deps();
    deps.probe = Arc::new(probe.clone());
    let started = tokio::time::Instant::now();
    let report = reaper_core::reap::reap_detached_runs(&deps, &h.options)
        .await
        .unwrap();
    // 100 probes of 50 ms, 16 at a time: 7 rounds of virtual time, not 100.
    assert_eq!(started.elapsed(), std::time::Duration::from_millis(350));
    assert_eq!(probe.peak.load(std::sync::atomic::Ordering::SeqCst), 16);
    assert_eq!(report.outcomes.producing, 100);
    let order: Vec<&str> = report.runs.iter().map(|e| e.run_id.as_str()).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "listing order");
}

#[tokio::test(start_paused = true)]
async fn with_runs_in_flight_no_run_starts_that_cannot_finish_before_the_deadline() {
    let mut h = Harness::new();
    h.options.max_runs = 10;
    h.options.concurrency = 4;
    h.options.per_run_reserve_ms = Some(100);
    h.options.deadline = Some(NOW + 150);
    for i in 0..10 {
        h.seed(&format!("r{i}"), Some(FRESH), None);
    }
    let mut deps = h.deps();
    deps.probe = Arc::new(SlowProbe {
        ms: 60,
        in_flight: Default::default(),
        peak: Default::default(),
    });
    let report = reaper_core::reap::reap_detached_runs(&deps, &h.options)
        .await
        .unwrap();
    // Four start at once; at +60 ms a fifth would need until +160, past the deadline.
    assert_eq!(report.considered, 4);
    assert_eq!(report.deferred, 6);
}

#[test]
fn a_concurrency_of_zero_or_beyond_the_cap_is_refused() {
    let mut o = reaper_core::reap::ReapOptions::new(TTL, "me");
    o.concurrency = 0;
    assert_eq!(o.validate().unwrap_err().option, "concurrency");
    o.concurrency = reaper_core::reap::MAX_CONCURRENCY + 1;
    assert_eq!(o.validate().unwrap_err().option, "concurrency");
    o.concurrency = 1;
    assert!(o.validate().is_ok());
}
