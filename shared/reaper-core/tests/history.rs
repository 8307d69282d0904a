//! The runs' history: what each sweep did to each run, written by the sweep at its end and
//! pruned past the retention; never able to change a run's outcome.

mod common;

use common::{entry, Harness, NOW, TTL};
use reaper_core::domain::{ReclaimIntent, RunStatus};
use reaper_core::history::{HistoryEntry, RECLAIM_RETRY_OUTCOME};
use reaper_core::ports::{ReclaimLedger, RunExitProbe, RunStore};
use reaper_core::reap::{ReapOutcome, SandboxFate};
use reaper_core::StoreError;
use reaper_testkit::fakes::Op;

const FRESH: i64 = NOW - 60_000;
const LONG_AGO: i64 = NOW - 2 * TTL as i64;

async fn history(h: &Harness, run_id: &str) -> Vec<HistoryEntry> {
    h.memory.run_history(run_id, 10).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_sweep_records_one_history_entry_per_run_it_touched_with_its_outcome_reason_and_sandbox_fate(
) {
    let h = Harness::new();
    h.seed("done", Some(FRESH), Some("box-done"));
    h.probe.finished("done", 0);
    h.seed("old", Some(LONG_AGO), None);
    h.seed("busy", Some(FRESH), None);
    h.seed("attached", None, None);
    let report = h.sweep().await;
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert_eq!(
        report.history.recorded, 2,
        "done and old, not busy: {:?}",
        report.history
    );

    let done = history(&h, "done").await;
    assert_eq!(done.len(), 1, "{done:?}");
    let e = &done[0];
    assert_eq!(e.outcome, "finalized");
    assert_eq!(e.reason_code, "finalized/exited");
    assert_eq!(e.reason, entry(&report, "done").reason.message);
    assert_eq!(e.host, "test-host");
    assert_eq!(e.at, NOW);
    assert_eq!(
        e.sandbox.as_deref(),
        entry(&report, "done").sandbox.map(SandboxFate::as_str)
    );
    assert_eq!(e.ledger, ["recorded", "resolved"]);

    let old = history(&h, "old").await;
    assert_eq!(old[0].outcome, "expired");
    assert_eq!(old[0].reason_code, "expired/ttl");
    assert_eq!(old[0].sweep_id, e.sweep_id, "one sweep, one id");

    assert!(
        history(&h, "busy").await.is_empty(),
        "a producing run is counted in the report, not written"
    );
    assert!(history(&h, "attached").await.is_empty(), "not touched");
}

#[tokio::test(start_paused = true)]
async fn a_sweep_leaving_producing_runs_alone_writes_no_history_for_them_but_an_unknown_run_still_gets_an_entry(
) {
    let h = Harness::new();
    for i in 0..3 {
        h.seed(&format!("busy-{i}"), Some(FRESH), None);
    }
    h.seed("unsure", Some(FRESH), None);
    h.probe.answer(
        "unsure",
        RunExitProbe::Unknown {
            error: Some("the provider answered 503".into()),
        },
    );
    let report = h.sweep().await;
    assert_eq!(report.outcomes.producing, 3, "{:?}", report.outcomes);
    assert_eq!(entry(&report, "unsure").outcome, ReapOutcome::Unknown);
    assert_eq!(report.history.recorded, 1, "{:?}", report.history);
    for i in 0..3 {
        assert!(history(&h, &format!("busy-{i}")).await.is_empty());
    }
    let unsure = history(&h, "unsure").await;
    assert_eq!(unsure.len(), 1, "{unsure:?}");
    assert_eq!(unsure[0].outcome, "unknown");
    assert!(unsure[0].reason_code.starts_with("unknown/"), "{unsure:?}");
    let written: Vec<_> = h
        .store
        .ops()
        .into_iter()
        .filter_map(|o| match o {
            Op::RecordHistory(runs) => Some(runs),
            _ => None,
        })
        .collect();
    assert_eq!(written.len(), 1, "one batch: {written:?}");

    // Only producing runs: the sweep's own record is written (it counts them), carrying no
    // history entry.
    let h = Harness::new();
    h.seed("busy", Some(FRESH), None);
    let report = h.sweep().await;
    assert_eq!(report.outcomes.producing, 1);
    assert_eq!(report.history.recorded, 0);
    assert!(report.history.sweep_recorded, "{:?}", report.history);
    let written: Vec<_> = h
        .store
        .ops()
        .into_iter()
        .filter_map(|o| match o {
            Op::RecordHistory(runs) => Some(runs),
            _ => None,
        })
        .collect();
    assert_eq!(written, vec![Vec::<String>::new()], "{written:?}");
    assert!(history(&h, "busy").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failed_history_write_never_turns_a_finalized_run_into_a_failure() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::RecordHistory(_) | Op::PruneHistory)
            .then(|| StoreError::Unavailable("the history table is locked".into()))
    });
    let report = h.sweep().await;
    let e = entry(&report, "done");
    assert_eq!(e.outcome, ReapOutcome::Finalized, "{e:?}");
    assert!(e.error.is_none());
    assert_eq!(report.outcomes.failed, 0);
    assert_eq!(h.record("done").await.status, RunStatus::Completed);
    assert_eq!(report.history.recorded, 0);
    let error = report.history.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("writing the runs' history failed")
            && error.contains("the history table is locked"),
        "{error}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["history"]["error"], error, "reported in the JSON");
    assert!(history(&h, "done").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_sweep_prunes_history_past_its_retention_oldest_first_in_bounded_batches() {
    let mut h = Harness::new();
    h.options.history_retention_ms = 1_000_000;
    h.options.history_prune_batch = 2;
    let old = |sweep: &str, at: i64| HistoryEntry {
        run_id: "gone".into(),
        sweep_id: sweep.into(),
        at,
        host: "h".into(),
        outcome: "expired".into(),
        reason_code: "expired/ttl".into(),
        reason: String::new(),
        sandbox: None,
        ledger: vec![],
    };
    let cutoff = NOW - 1_000_000;
    h.memory
        .record_history(&[
            old("s1", cutoff - 3),
            old("s2", cutoff - 2),
            old("s3", cutoff - 1),
            old("s4", cutoff),
        ])
        .await
        .unwrap();
    let first = h.sweep().await;
    assert_eq!(first.history.pruned, 2, "at most the batch");
    let left: Vec<String> = history(&h, "gone")
        .await
        .into_iter()
        .map(|e| e.sweep_id)
        .collect();
    assert_eq!(left, ["s4", "s3"], "the oldest went first");
    let second = h.sweep().await;
    assert_eq!(second.history.pruned, 1);
    assert_eq!(
        history(&h, "gone").await.len(),
        1,
        "the entry at the cutoff stays"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retried_reclaim_is_in_the_run_history_with_its_ledger_events() {
    let h = Harness::new();
    h.seed_with("leaked", None, Some("box-1"), RunStatus::Completed);
    let record = h.memory.get("leaked").await.unwrap().unwrap();
    let mut intent = ReclaimIntent::new(&record, NOW - 10_000);
    intent.attempts = 1;
    intent.next_attempt_at = NOW - 1;
    h.memory.record_intent(&intent).await.unwrap();
    let report = h.sweep().await;
    assert_eq!(report.reclaims.settled, 1, "{:?}", report.reclaims);
    let leaked = history(&h, "leaked").await;
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    assert_eq!(leaked[0].outcome, RECLAIM_RETRY_OUTCOME);
    assert_eq!(leaked[0].reason_code, "reclaim-retry/settled");
    assert_eq!(leaked[0].ledger, ["retried", "settled"]);
}

#[tokio::test(start_paused = true)]
async fn a_retention_of_zero_keeps_no_history_and_sends_no_history_request() {
    let mut h = Harness::new();
    h.options.history_retention_ms = 0;
    h.seed("busy", Some(FRESH), None);
    let report = h.sweep().await;
    assert!(report.history.is_empty());
    assert!(history(&h, "busy").await.is_empty());
    assert!(!h
        .store
        .ops()
        .iter()
        .any(|o| matches!(o, Op::RecordHistory(_) | Op::PruneHistory)));
}

#[tokio::test(start_paused = true)]
async fn two_single_flight_sweeps_write_two_entries_under_different_sweep_ids() {
    let h = Harness::new();
    h.seed("busy", Some(FRESH), None);
    h.probe
        .answer("busy", RunExitProbe::Unknown { error: None });
    let deps = h.deps();
    let mut options = h.options.clone();
    reaper_core::reap::sweep(&deps, &options, 60_000).await;
    options.now = Some(NOW + 1);
    reaper_core::reap::sweep(&deps, &options, 60_000).await;
    let entries = history(&h, "busy").await;
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_ne!(entries[0].sweep_id, entries[1].sweep_id);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_takes_the_history_in_one_call_gets_the_sweeps_entries_and_prune_together() {
    let mut h = Harness::new();
    h.store = h.store.clone().with_history_in_one_call();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.seed("old", Some(LONG_AGO), None);
    let report = h.sweep().await;
    let history_ops: Vec<Op> = h
        .store
        .ops()
        .into_iter()
        .filter(|o| {
            matches!(
                o,
                Op::RecordHistory(_) | Op::PruneHistory | Op::WriteSweepHistory(_)
            )
        })
        .collect();
    assert_eq!(history_ops.len(), 1, "one call: {history_ops:?}");
    let Op::WriteSweepHistory(runs) = &history_ops[0] else {
        panic!("{history_ops:?}")
    };
    let mut runs = runs.clone();
    runs.sort();
    assert_eq!(runs, ["done", "old"]);
    assert_eq!(report.history.recorded, 2, "{:?}", report.history);
    assert_eq!(history(&h, "old").await[0].outcome, "expired");
}

#[tokio::test(start_paused = true)]
async fn a_failed_one_call_history_write_is_reported_and_the_runs_outcomes_stand() {
    let mut h = Harness::new();
    h.store = h.store.clone().with_history_in_one_call();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::WriteSweepHistory(_))
            .then(|| StoreError::Unavailable("the history table is locked".into()))
    });
    let report = h.sweep().await;
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert_eq!(h.record("done").await.status, RunStatus::Completed);
    assert_eq!(report.history.recorded, 0);
    let error = report.history.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("writing the runs' history failed")
            && error.contains("the history table is locked"),
        "{error}"
    );
    // Not retried in two calls behind the store's back.
    assert!(!h
        .store
        .ops()
        .iter()
        .any(|o| matches!(o, Op::RecordHistory(_) | Op::PruneHistory)));
}

#[tokio::test(start_paused = true)]
async fn a_failed_prune_sent_apart_is_reported_and_the_entries_and_record_written_before_it_stand()
{
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::PruneHistory)
            .then(|| StoreError::Unavailable("the history index is rebuilding".into()))
    });
    let report = h.sweep().await;
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert_eq!(report.history.recorded, 1, "{:?}", report.history);
    assert!(report.history.sweep_recorded, "{:?}", report.history);
    assert_eq!(report.history.pruned, 0);
    let error = report.history.error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("pruning the runs' history failed")
            && error.contains("the history index is rebuilding"),
        "{error}"
    );
    assert_eq!(history(&h, "done").await.len(), 1);
    assert_eq!(h.memory.recent_sweeps(10).await.unwrap().len(), 1);
}
