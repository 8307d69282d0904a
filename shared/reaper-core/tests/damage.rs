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
