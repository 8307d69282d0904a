//! The claim, the fence and the quiet wait (spec A.5, A.6, H6).

use std::sync::Arc;

use reaper_core::claim::{
    await_log_quiescence, run_driver_lock_key, AppendError, Claim, ClaimError, Writer,
    DEFAULT_FENCE_QUIET_MS,
};
use reaper_core::domain::{Chunk, RunRecord, RunStatus};
use reaper_core::error::{ClaimRefusal, ObservedEpoch, ReapError};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{DeliveryLog, LeaseGrant, LeaseStore, RunStore};
use reaper_testkit::fakes::{FaultyLeases, Op, SpyStore, TokioClock, TokioSleeper};

const NOW: i64 = 1_700_000_000_000;

async fn seed(store: &MemoryStore, run_id: &str, status: RunStatus, epoch: Option<u64>) {
    let mut r = RunRecord::new(run_id, "t", 1);
    r.status = status;
    r.driver_epoch = epoch;
    store.put_run(r);
}

async fn claim(store: &MemoryStore, run_id: &str, owner: &str) -> Result<Claim, ReapError> {
    match Claim::acquire(store, store, run_id, owner, NOW, 60_000).await {
        Ok(c) => Ok(c),
        Err(ClaimError::Refused(e)) => Err(e),
        Err(ClaimError::Store(e)) => panic!("store error {e}"),
    }
}

#[test]
fn lock_key_is_per_run() {
    assert_eq!(run_driver_lock_key("r1"), "run-driver:r1");
    assert_ne!(run_driver_lock_key("r1"), run_driver_lock_key("r2"));
    assert_eq!(DEFAULT_FENCE_QUIET_MS, 5_000);
}

#[tokio::test]
async fn first_claim_of_a_running_run_takes_epoch_one_under_its_lock_key() {
    let store = MemoryStore::new();
    seed(&store, "claim-1", RunStatus::Running, None).await;
    let c = claim(&store, "claim-1", "a").await.unwrap();
    assert_eq!(c.epoch, 1);
    assert_eq!(c.lease().key, "run-driver:claim-1");
    assert_eq!(
        store.get("claim-1").await.unwrap().unwrap().driver_epoch,
        Some(1)
    );
}

#[tokio::test]
async fn claim_bumps_a_stored_epoch_by_one() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, Some(7)).await;
    assert_eq!(claim(&store, "r", "a").await.unwrap().epoch, 8);
}

#[tokio::test]
async fn lease_is_held_while_claimed_and_free_after_release() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let c = claim(&store, "r", "a").await.unwrap();
    let other = store
        .acquire("run-driver:r", "b", NOW, 1_000)
        .await
        .unwrap();
    assert!(matches!(other, LeaseGrant::Held { ref owner, .. } if owner == "a"));
    c.release(&store).await;
    let again = store
        .acquire("run-driver:r", "b", NOW, 1_000)
        .await
        .unwrap();
    assert!(matches!(again, LeaseGrant::Acquired(_)));
}

#[tokio::test]
async fn busy_claim_is_refused_at_once_without_moving_the_epoch() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let _held = claim(&store, "r", "a").await.unwrap();
    let err = claim(&store, "r", "b").await.unwrap_err();
    assert!(matches!(
        err,
        ReapError::ClaimNotAcquired {
            reason: ClaimRefusal::Busy,
            ..
        }
    ));
    assert_eq!(store.get("r").await.unwrap().unwrap().driver_epoch, Some(1));
}

#[tokio::test]
async fn crashed_holder_frees_the_run_when_its_lease_expires() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let _crashed = claim(&store, "r", "a").await.unwrap();
    let later = Claim::acquire(&store, &store, "r", "b", NOW + 60_000, 60_000).await;
    assert_eq!(later.map_err(|_| ()).unwrap().epoch, 2);
}

#[tokio::test]
async fn terminal_run_refuses_the_claim_and_keeps_its_epoch() {
    for status in [RunStatus::Completed, RunStatus::Failed, RunStatus::Aborted] {
        let store = MemoryStore::new();
        seed(&store, "r", status, None).await;
        let err = claim(&store, "r", "a").await.unwrap_err();
        match &err {
            ReapError::ClaimNotAcquired { run_id, reason } => {
                assert_eq!(run_id, "r");
                assert_eq!(*reason, ClaimRefusal::Terminal);
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("driver claim not acquired"));
        assert_eq!(store.get("r").await.unwrap().unwrap().driver_epoch, None);
        // The refused claim released its lease.
        assert!(matches!(
            store.acquire("run-driver:r", "z", NOW, 1).await.unwrap(),
            LeaseGrant::Acquired(_)
        ));
    }
}

#[tokio::test]
async fn unknown_run_refuses_the_claim() {
    let store = MemoryStore::new();
    let err = claim(&store, "nope", "a").await.unwrap_err();
    assert!(matches!(
        err,
        ReapError::ClaimNotAcquired {
            reason: ClaimRefusal::Unknown,
            ..
        }
    ));
    assert!(store.get("nope").await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn claim_signal_fires_when_a_renewal_finds_the_lease_gone() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let leases = FaultyLeases::new(store.clone());
    leases.lose_on_renew("run-driver:r");
    let c = match Claim::acquire(&store, &leases, "r", "a", NOW, 300).await {
        Ok(c) => c,
        Err(_) => panic!("refused"),
    };
    assert!(!c.signal().is_cancelled());
    let clock = TokioClock::new(NOW);
    let keep = c.keep_alive(&leases, &clock, &TokioSleeper, 300);
    tokio::select! {
        _ = keep => unreachable!(),
        _ = c.signal().cancelled() => {}
    }
    assert!(c.signal().is_cancelled());
}

// ---- the fence ------------------------------------------------------------------------------

fn writer<'a>(store: &'a MemoryStore, claim: &'a Claim) -> Writer<'a> {
    Writer {
        runs: store,
        log: store,
        claim: Some(claim),
    }
}

#[tokio::test]
async fn fenced_append_lands_while_the_claim_holds() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let c = claim(&store, "r", "a").await.unwrap();
    writer(&store, &c)
        .append("r", vec![Chunk::text("x")], NOW)
        .await
        .unwrap();
    assert_eq!(store.snapshot("r").await.unwrap().len, 1);
}

#[tokio::test]
async fn lost_lease_refuses_the_append_and_nothing_lands() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let c = claim(&store, "r", "a").await.unwrap();
    c.lose_lease();
    let err = writer(&store, &c)
        .append("r", vec![Chunk::text("x")], NOW)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        AppendError::Lost(ReapError::ClaimLost {
            observed: ObservedEpoch::LeaseLost,
            ..
        })
    ));
    assert_eq!(store.snapshot("r").await.unwrap().len, 0);
}

#[tokio::test]
async fn moved_epoch_refuses_the_append_with_held_and_observed_epochs() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, Some(2)).await;
    let c = claim(&store, "r", "a").await.unwrap();
    assert_eq!(c.epoch, 3);
    seed(&store, "r", RunStatus::Running, Some(4)).await;
    let err = writer(&store, &c)
        .append("r", vec![Chunk::text("x")], NOW)
        .await
        .unwrap_err();
    match err {
        AppendError::Lost(ReapError::ClaimLost {
            held_epoch,
            observed,
            ..
        }) => {
            assert_eq!(held_epoch, 3);
            assert_eq!(observed, ObservedEpoch::Epoch(4));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.snapshot("r").await.unwrap().len, 0);
}

#[tokio::test]
async fn every_append_is_fenced_so_a_successor_stops_the_very_next_one() {
    // The reference re-reads the epoch every 32 appends, so up to 32 can land after a takeover;
    // here the first append after the successor's claim is refused.
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let c = claim(&store, "r", "a").await.unwrap();
    let w = writer(&store, &c);
    w.append("r", vec![Chunk::text("1")], NOW).await.unwrap();
    w.append("r", vec![Chunk::text("2")], NOW).await.unwrap();
    store.bump_epoch("r").await.unwrap();
    assert!(w.append("r", vec![Chunk::text("3")], NOW).await.is_err());
    assert_eq!(store.snapshot("r").await.unwrap().len, 2);
}

#[tokio::test]
async fn once_refused_the_fence_stays_shut_with_the_original_error_and_no_store_calls() {
    let memory = MemoryStore::new();
    seed(&memory, "r", RunStatus::Running, Some(1)).await;
    let spy = SpyStore::new(memory.clone());
    let c = claim(&memory, "r", "a").await.unwrap();
    seed(&memory, "r", RunStatus::Running, Some(9)).await;
    let w = Writer {
        runs: &spy,
        log: &spy,
        claim: Some(&c),
    };
    let first = w
        .append("r", vec![Chunk::text("x")], NOW)
        .await
        .unwrap_err()
        .to_string();
    // Even if the epoch "comes back", the latch keeps refusing.
    seed(&memory, "r", RunStatus::Running, Some(2)).await;
    spy.clear_ops();
    let second = w
        .append("r", vec![Chunk::text("y")], NOW)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(first, second);
    assert!(
        first.contains("held epoch 2") && first.contains("observed 9"),
        "{first}"
    );
    assert!(
        spy.ops().is_empty(),
        "a latched fence must not touch the store"
    );
    assert_eq!(memory.snapshot("r").await.unwrap().len, 0);
}

#[tokio::test]
async fn flapping_lease_keeps_refusing_as_lease_lost() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let c = claim(&store, "r", "a").await.unwrap();
    c.lose_lease();
    let w = writer(&store, &c);
    let _ = w.append("r", vec![Chunk::text("x")], NOW).await;
    let err = w
        .append("r", vec![Chunk::text("y")], NOW)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lease-lost"));
    assert_eq!(store.snapshot("r").await.unwrap().len, 0);
}

#[tokio::test]
async fn healthy_claim_lands_every_append() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let c = claim(&store, "r", "a").await.unwrap();
    let w = writer(&store, &c);
    for i in 0..69 {
        w.append("r", vec![Chunk::text(&i.to_string())], NOW)
            .await
            .unwrap();
    }
    assert_eq!(store.snapshot("r").await.unwrap().len, 69);
}

#[tokio::test]
async fn close_snapshot_and_read_work_after_the_claim_is_lost() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    store
        .append("r", None, vec![Chunk::text("before")], NOW)
        .await
        .unwrap();
    let c = claim(&store, "r", "a").await.unwrap();
    c.lose_lease();
    let _ = writer(&store, &c)
        .append("r", vec![Chunk::text("x")], NOW)
        .await;
    assert_eq!(store.snapshot("r").await.unwrap().len, 1);
    assert_eq!(store.read("r", 0, 10).await.unwrap().len(), 1);
    store.close("r", None, NOW).await.unwrap();
    assert!(store.snapshot("r").await.unwrap().closed);
}

#[tokio::test]
async fn two_concurrent_claims_never_overlap() {
    let store = MemoryStore::new();
    seed(&store, "r", RunStatus::Running, None).await;
    let (a, b) = tokio::join!(claim(&store, "r", "a"), claim(&store, "r", "b"));
    assert!(a.is_ok() != b.is_ok(), "exactly one claim wins");
    assert_eq!(store.get("r").await.unwrap().unwrap().driver_epoch, Some(1));
}

// ---- the quiet wait -------------------------------------------------------------------------

async fn quiesce(spy: &SpyStore, quiet: u64) -> Result<u64, ReapError> {
    await_log_quiescence(spy, "r", quiet, &TokioClock::new(NOW), &TokioSleeper).await
}

#[tokio::test(start_paused = true)]
async fn stable_log_quiesces_at_its_length() {
    let spy = SpyStore::new(MemoryStore::new());
    spy.inner
        .append("r", None, vec![Chunk::text("a"), Chunk::text("b")], NOW)
        .await
        .unwrap();
    assert_eq!(quiesce(&spy, 25).await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn empty_log_quiesces_at_zero() {
    let spy = SpyStore::new(MemoryStore::new());
    assert_eq!(quiesce(&spy, 25).await.unwrap(), 0);
}

#[tokio::test(start_paused = true)]
async fn log_that_grows_for_two_probes_settles_after_three_snapshots() {
    let spy = SpyStore::new(MemoryStore::new());
    let memory = spy.inner.clone();
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    spy.before_each(move |op| {
        if matches!(op, Op::Snapshot(_)) {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n < 2 {
                let _ = futures::FutureExt::now_or_never(memory.append(
                    "r",
                    None,
                    vec![Chunk::text("late")],
                    NOW,
                ));
            }
        }
    });
    assert_eq!(quiesce(&spy, 25).await.unwrap(), 2);
    assert!(seen.load(std::sync::atomic::Ordering::SeqCst) >= 3);
}

#[tokio::test(start_paused = true)]
async fn log_that_never_stops_growing_never_quiesces() {
    let spy = SpyStore::new(MemoryStore::new());
    spy.grow_snapshot("r");
    let err = quiesce(&spy, 25).await.unwrap_err();
    assert!(err.to_string().contains("never quiesced"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn quiet_wait_only_takes_snapshots() {
    let spy = SpyStore::new(MemoryStore::new());
    quiesce(&spy, 25).await.unwrap();
    assert!(spy.ops().iter().all(|o| matches!(o, Op::Snapshot(_))));
}
