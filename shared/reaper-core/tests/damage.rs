//! Issue 24: damage anywhere stops the sweep before any terminal write or destroy, and the
//! report says so (an error-level summary, and `damaged` for a handler's exit code).

mod common;

use common::{Harness, NOW};
use reaper_core::damage::DAMAGED_KEY;
use reaper_core::domain::RunStatus;
use reaper_core::ports::DeliveryLog;
use reaper_core::reap::ReapOutcome;
use reaper_core::StoreError;
use reaper_testkit::fakes::Op;

const FRESH: i64 = NOW - 60_000;

fn damaged() -> StoreError {
    StoreError::Corrupt {
        key: DAMAGED_KEY.into(),
        reason: "the database is damaged: database disk image is malformed".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn damage_met_in_the_log_stops_the_sweep_before_any_terminal_write_or_destroy() {
    let mut h = Harness::new();
    h.options.concurrency = 1;
    for id in ["r1", "r2"] {
        h.seed(id, Some(FRESH), Some(&format!("k-{id}")));
        h.probe.finished(id, 0);
    }
    // The first append of the first run meets a damaged `log_entries` table.
    h.store.fail_when(|op, _| match op {
        Op::Append(r, _) if r == "r1" => Some(damaged()),
        _ => None,
    });
    let report = h.sweep().await;

    let damage = report
        .damaged
        .as_deref()
        .expect("the report names the damage");
    assert!(damage.contains("damaged"), "{damage}");
    for id in ["r1", "r2"] {
        let r = h.record(id).await;
        assert_eq!(
            r.status,
            RunStatus::Running,
            "{id}: a terminal write landed"
        );
        assert!(r.error.is_none(), "{id}: recorded an error: {:?}", r.error);
    }
    assert!(
        h.reclaim.reclaimed().is_empty(),
        "a sandbox was reclaimed after damage: {:?}",
        h.reclaim.reclaimed()
    );
    assert_eq!(
        h.store.appended("r1"),
        0,
        "a RUN_ERROR landed after the damage"
    );
    assert!(
        !h.memory
            .snapshot("r1")
            .await
            .map(|s| s.closed)
            .unwrap_or(false),
        "the damaged run's log was closed"
    );
    // The run after the damage is not started at all.
    assert!(
        report
            .runs
            .iter()
            .all(|e| e.run_id != "r2" || e.outcome != ReapOutcome::Finalized),
        "{:?}",
        report.runs
    );
    assert!(report.deferred >= 1, "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn an_ordinary_store_error_is_not_damage_and_the_sweep_goes_on() {
    let mut h = Harness::new();
    h.options.concurrency = 1;
    for id in ["r1", "r2"] {
        h.seed(id, Some(FRESH), Some(&format!("k-{id}")));
        h.probe.finished(id, 0);
    }
    h.store.fail_when(|op, _| match op {
        Op::Append(r, _) if r == "r1" => Some(StoreError::Backend("a hiccup".into())),
        _ => None,
    });
    let report = h.sweep().await;
    assert!(report.damaged.is_none());
    assert_eq!(h.record("r2").await.status, RunStatus::Completed);
}

#[tokio::test]
async fn damage_a_store_reports_for_one_part_of_a_sweeps_end_write_sets_the_latch() {
    use reaper_core::damage::{Damage, Guarded};
    use reaper_core::history::SweepHistory;
    use reaper_core::ports::RunStore;

    let h = Harness::new();
    h.store
        .fail_when(|op, _| matches!(op, Op::PruneHistory).then(damaged));
    let damage = Damage::default();
    let guarded = Guarded::new(std::sync::Arc::new(h.store.clone()), &damage);
    let write = SweepHistory {
        entries: Vec::new(),
        prune_before: NOW,
        prune_max: 10,
        record: None,
    };
    let done = guarded.write_sweep_history(&write).await.unwrap();
    assert!(done.prune_error.is_some(), "{done:?}");
    assert!(
        damage.seen().is_some_and(|d| d.contains("malformed")),
        "the prune's damage, reported beside the write, is seen"
    );
    assert!(
        guarded.write_sweep_history(&write).await.is_err(),
        "and every later write is refused"
    );
}
