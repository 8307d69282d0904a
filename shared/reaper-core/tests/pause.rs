//! Pausing the sweeps (issue 25): a paused sweep writes nothing and says who paused it and why;
//! a resume lets the next sweep do its work; a mark that cannot be read stops the sweep rather
//! than ignore an operator's pause.

use std::sync::Arc;

use reaper_core::memory::MemoryStore;
use reaper_core::pause::{read_pause, record_pause, PauseMark, PAUSE_KEY};
use reaper_core::reap::{sweep, ReapDeps, ReapOptions, ReapOutcome, SweepStatus};
use reaper_core::time::ManualClock;
use reaper_core::{
    LeaseGrant, LeaseStore, NewRun, Patch, ReclaimLedger, RunPatch, RunStatus, RunStore,
};
use reaper_testkit::fakes::{FakeProvider, TokioSleeper};

const NOW: i64 = 1_700_000_000_000;
const HOUR: i64 = 3_600_000;

/// A store with one run detached an hour ago (past a 30-minute TTL), and the sweep's deps.
async fn overdue_run() -> (Arc<MemoryStore>, ReapDeps) {
    let store = Arc::new(MemoryStore::new());
    store
        .create_or_resume(NewRun {
            run_id: "run-1".into(),
            thread_id: "thread-1".into(),
            started_at: NOW - HOUR,
            status: None,
        })
        .await
        .unwrap();
    let detach = RunPatch {
        detached_since: Patch::Set(NOW - HOUR),
        ..Default::default()
    };
    store.update("run-1", detach).await.unwrap();
    let deps = ReapDeps::journaled(
        store.clone(),
        Arc::new(FakeProvider::new("local")),
        Arc::new(ManualClock::new(NOW)),
        Arc::new(TokioSleeper),
        None,
    );
    (store, deps)
}

fn options() -> ReapOptions {
    let mut options = ReapOptions::new(30 * 60 * 1000, "sweeper-1");
    options.fence_quiet_ms = 0;
    options
}

#[tokio::test]
async fn a_paused_sweep_writes_nothing_and_says_who_paused_it_and_why() {
    let (store, deps) = overdue_run().await;
    let before = store.get("run-1").await.unwrap().unwrap();
    let mark = PauseMark {
        paused: true,
        by: "alice@ops-1".into(),
        at: NOW - 1_000,
        reason: Some("investigating a leak".into()),
    };
    record_pause(store.as_ref(), &mark).await.unwrap();

    let report = sweep(&deps, &options(), 60_000).await;

    assert_eq!(
        report.sweep,
        SweepStatus::Paused {
            by: "alice@ops-1".into(),
            since: NOW - 1_000,
            reason: Some("investigating a leak".into()),
        }
    );
    assert!(report.report.runs.is_empty(), "{:?}", report.report);
    let after = store.get("run-1").await.unwrap().unwrap();
    assert_eq!(after, before, "a paused sweep touched the run");
    // Not even the sweep lease was taken: another sweeper gets it at once.
    assert!(matches!(
        store
            .acquire(reaper_core::reap::SWEEP_LEASE_KEY, "other", NOW, 1_000)
            .await
            .unwrap(),
        LeaseGrant::Acquired(_)
    ));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["sweep"]["state"], "paused");
    assert_eq!(json["sweep"]["by"], "alice@ops-1");
}

#[tokio::test]
async fn after_a_resume_the_next_sweep_expires_the_overdue_run() {
    let (store, deps) = overdue_run().await;
    let mut mark = PauseMark {
        paused: true,
        by: "alice@ops-1".into(),
        at: NOW - 2_000,
        reason: None,
    };
    record_pause(store.as_ref(), &mark).await.unwrap();
    assert!(matches!(
        sweep(&deps, &options(), 60_000).await.sweep,
        SweepStatus::Paused { .. }
    ));
    mark.paused = false;
    mark.at = NOW - 1_000;
    record_pause(store.as_ref(), &mark).await.unwrap();
    assert_eq!(read_pause(store.as_ref()).await.unwrap(), Some(mark));

    let report = sweep(&deps, &options(), 60_000).await;

    assert_eq!(report.sweep, SweepStatus::Swept);
    assert_eq!(report.report.runs[0].outcome, ReapOutcome::Expired);
    let run = store.get("run-1").await.unwrap().unwrap();
    assert!(run.status.is_terminal(), "expired: {:?}", run.status);
}

#[tokio::test]
async fn a_pause_mark_that_does_not_parse_stops_the_sweep_and_says_how_to_fix_it() {
    let (store, deps) = overdue_run().await;
    let LeaseGrant::Acquired(lease) = store.acquire(PAUSE_KEY, "a", NOW, 1_000).await.unwrap()
    else {
        panic!("the pause key is free");
    };
    assert!(store.set_note(&lease, "{not json").await.unwrap());
    store.release(&lease).await.unwrap();

    let report = sweep(&deps, &options(), 60_000).await;

    let SweepStatus::LeaseUnavailable { error } = &report.sweep else {
        panic!(
            "a corrupt pause mark did not stop the sweep: {:?}",
            report.sweep
        );
    };
    assert!(error.contains("reaper resume"), "{error}");
    let run = store.get("run-1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running, "the run was touched");
}

#[tokio::test]
async fn a_dry_run_writes_nothing_even_past_the_ttl_and_takes_no_lease() {
    let (store, deps) = overdue_run().await;
    let before = store.get("run-1").await.unwrap().unwrap();
    let mut options = options();
    options.dry_run = true;

    let report = sweep(&deps, &options, 60_000).await;

    assert_eq!(report.sweep, SweepStatus::DryRun);
    let entry = &report.report.runs[0];
    assert!(entry.planned);
    assert_eq!(entry.outcome, ReapOutcome::Expired);
    let proof = entry.proof.as_ref().unwrap();
    assert_eq!(proof.expires_at, Some(NOW - HOUR + 30 * 60 * 1000));
    assert!(proof.past_ttl);
    assert_eq!(store.get("run-1").await.unwrap().unwrap(), before);
    assert!(matches!(
        store
            .acquire(reaper_core::reap::SWEEP_LEASE_KEY, "other", NOW, 1_000)
            .await
            .unwrap(),
        LeaseGrant::Acquired(_)
    ));
    assert!(
        ReclaimLedger::get_intent(store.as_ref(), "run-1")
            .await
            .unwrap()
            .is_none(),
        "a dry run recorded a reclaim intent"
    );
}
