//! The reclaim ledger in the sweep: an intent is durable before the terminal write, so neither a
//! crash nor a failed destroy forgets a sandbox; every sweep retries due entries under the run's
//! claim, with backoff, and reports what is pending and leaked.

mod common;

use std::sync::Arc;

use common::{entry, Harness, NOW};
use reaper_core::domain::{ReclaimIntent, RunRecord, RunStatus};
use reaper_core::error::{ReclaimError, StoreError};
use reaper_core::ports::{DeliveryLog, Reclaim, ReclaimLedger, Reclaimed};
use reaper_core::reap::{retry_backoff_ms, ReapOutcome, RECLAIM_RETRY_BASE_MS};
use reaper_testkit::fakes::Op;
use tokio::sync::Notify;

const FRESH: i64 = NOW - 60_000;

/// A reclaimer that stands for a process killed at the moment it would destroy: it announces
/// itself and never returns, so the test drops the sweep there.
#[derive(Clone, Default)]
struct CrashAtReclaim {
    reached: Arc<Notify>,
}

#[async_trait::async_trait]
impl Reclaim for CrashAtReclaim {
    async fn reclaim(
        &self,
        _record: &RunRecord,
        _intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError> {
        self.reached.notify_one();
        std::future::pending().await
    }
}

/// Runs one sweep and drops it (the crash) once `crash` says it reached the point.
async fn sweep_until_crash(h: &Harness, crash: &CrashAtReclaim) {
    let mut deps = h.deps();
    deps.reclaim = Some(Arc::new(crash.clone()));
    let options = h.options.clone();
    tokio::select! {
        _ = reaper_core::reap::reap_detached_runs(&deps, &options) => panic!("the sweep was to crash"),
        _ = crash.reached.notified() => {}
    }
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_terminal_write_and_reclaim_is_settled_by_the_next_sweep() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), Some("k-done"));
    h.probe.finished("done", 0);
    sweep_until_crash(&h, &CrashAtReclaim::default()).await;
    assert_eq!(h.record("done").await.status, RunStatus::Completed);
    assert!(h.reclaim.calls().is_empty());
    let pending = h
        .memory
        .get_intent("done")
        .await
        .unwrap()
        .expect("an intent");
    assert_eq!(pending.sandbox_key.as_deref(), Some("k-done"));
    assert_eq!(pending.attempts, 0);

    // The run is terminal, so no listing finds it again: only the ledger does.
    let report = h.sweep().await;
    assert!(report.runs.is_empty(), "{report:#?}");
    assert_eq!(h.reclaim.reclaimed(), vec!["done"]);
    assert_eq!((report.reclaims.retried, report.reclaims.settled), (1, 1));
    assert_eq!(report.reclaims.ledger.unwrap().pending, 0);
    assert!(h.memory.get_intent("done").await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_terminal_write_and_log_close_gets_the_log_closed() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    let stalled = Stall {
        inner: h.store.clone(),
        reached: Arc::new(Notify::new()),
        at_append: false,
    };
    let mut deps = h.deps();
    deps.logs = Arc::new(stalled.clone());
    let options = h.options.clone();
    tokio::select! {
        _ = reaper_core::reap::reap_detached_runs(&deps, &options) => panic!("the sweep was to crash"),
        _ = stalled.reached.notified() => {}
    }
    assert_eq!(h.record("done").await.status, RunStatus::Completed);
    assert!(!closed(&h, "done").await);

    // The dead process held the run's claim: nothing happens until its lease expires.
    assert_eq!(h.sweep().await.reclaims.busy, 1);
    tokio::time::advance(std::time::Duration::from_millis(h.options.claim_ttl() + 1)).await;
    let report = h.sweep().await;
    assert_eq!(report.reclaims.settled, 1);
    assert!(closed(&h, "done").await, "the ledger pass closed it");
}

async fn closed(h: &Harness, run_id: &str) -> bool {
    DeliveryLog::snapshot(&h.memory, run_id)
        .await
        .unwrap()
        .closed
}

/// A delivery log whose `close` (or first `append`) never returns: the process dies there.
#[derive(Clone)]
struct Stall {
    inner: reaper_testkit::fakes::SpyStore,
    reached: Arc<Notify>,
    at_append: bool,
}

#[async_trait::async_trait]
impl DeliveryLog for Stall {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<reaper_core::Chunk>,
        now: i64,
    ) -> Result<reaper_core::Fenced<reaper_core::Appended>, StoreError> {
        if self.at_append {
            self.reached.notify_one();
            return std::future::pending().await;
        }
        self.inner.append(run_id, fence, chunks, now).await
    }
    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        now: i64,
    ) -> Result<reaper_core::Fenced<()>, StoreError> {
        if self.at_append {
            return self.inner.close(run_id, fence, now).await;
        }
        self.reached.notify_one();
        std::future::pending().await
    }
    async fn snapshot(&self, run_id: &str) -> Result<reaper_core::LogSnapshot, StoreError> {
        self.inner.snapshot(run_id).await
    }
    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<reaper_core::LogEntry>, StoreError> {
        self.inner.read(run_id, from, limit).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_crash_during_the_drive_is_retried_once_the_claim_expires() {
    let h = Harness::new();
    h.seed("mid", Some(FRESH), Some("k-mid"));
    h.probe.finished("mid", 0);
    let stalled = Stall {
        inner: h.store.clone(),
        reached: Arc::new(Notify::new()),
        at_append: true,
    };
    let mut deps = h.deps();
    deps.logs = Arc::new(stalled.clone());
    let options = h.options.clone();
    // Dropping the sweep at its first append abandons the held claim lease: the crash.
    tokio::select! {
        _ = reaper_core::reap::reap_detached_runs(&deps, &options) => panic!("the sweep was to crash"),
        _ = stalled.reached.notified() => {}
    }
    assert!(h.memory.get_intent("mid").await.unwrap().is_some());

    // While the dead holder's lease lasts, neither the ledger nor the listing touches the run.
    let report = h.sweep().await;
    assert_eq!(report.reclaims.busy, 1);
    assert_eq!(entry(&report, "mid").outcome, ReapOutcome::NotClaimed);
    assert!(h.reclaim.calls().is_empty());

    tokio::time::advance(std::time::Duration::from_millis(h.options.claim_ttl() + 1)).await;
    let report = h.sweep().await;
    // The intent of a run that never became terminal is dropped; the listing finalizes it.
    assert_eq!(report.reclaims.settled, 1);
    assert_eq!(entry(&report, "mid").outcome, ReapOutcome::Finalized);
    assert_eq!(h.reclaim.reclaimed(), vec!["mid"]);
    assert_eq!(report.reclaims.ledger.unwrap().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_destroy_is_retried_with_backoff_until_it_succeeds() {
    let h = Harness::new();
    h.seed("leak", Some(FRESH), Some("k-leak"));
    h.probe.finished("leak", 0);
    h.reclaim.fail_for("leak");
    let report = h.sweep().await;
    assert_eq!(entry(&report, "leak").outcome, ReapOutcome::ReclaimFailed);
    let first = h.memory.get_intent("leak").await.unwrap().unwrap();
    assert_eq!(first.attempts, 1);
    assert!(first.last_error.as_deref().unwrap().contains("refused"));
    assert_eq!(first.next_attempt_at, NOW + RECLAIM_RETRY_BASE_MS as i64);
    let ledger = report.reclaims.ledger.unwrap();
    assert_eq!((ledger.pending, ledger.leaked), (1, 1));

    // Not due yet: no retry.
    let report = h.sweep().await;
    assert_eq!(report.reclaims.retried, 0);
    assert_eq!(h.reclaim.calls().len(), 1);

    tokio::time::advance(std::time::Duration::from_millis(RECLAIM_RETRY_BASE_MS)).await;
    let report = h.sweep().await;
    assert_eq!((report.reclaims.retried, report.reclaims.failed), (1, 1));
    let second = h.memory.get_intent("leak").await.unwrap().unwrap();
    assert_eq!(second.attempts, 2);
    assert_eq!(second.first_seen, first.first_seen, "history is kept");
    assert_eq!(
        second.next_attempt_at,
        NOW + (RECLAIM_RETRY_BASE_MS + retry_backoff_ms(2)) as i64
    );

    h.reclaim.succeed_for("leak");
    tokio::time::advance(std::time::Duration::from_millis(retry_backoff_ms(2))).await;
    let report = h.sweep().await;
    assert_eq!((report.reclaims.retried, report.reclaims.settled), (1, 1));
    assert_eq!(report.reclaims.ledger.unwrap().leaked, 0);
    assert!(h.memory.get_intent("leak").await.unwrap().is_none());
}

#[test]
fn backoff_doubles_from_a_minute_up_to_an_hour() {
    assert_eq!(retry_backoff_ms(1), 60_000);
    assert_eq!(retry_backoff_ms(2), 120_000);
    assert_eq!(retry_backoff_ms(3), 240_000);
    assert_eq!(retry_backoff_ms(7), 3_600_000);
    assert_eq!(retry_backoff_ms(u32::MAX), 3_600_000);
}

#[tokio::test(start_paused = true)]
async fn a_run_is_not_driven_when_its_intent_cannot_be_recorded() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), Some("k"));
    h.probe.finished("done", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::RecordIntent(_)).then(|| StoreError::Unavailable("ledger down".into()))
    });
    let report = h.sweep().await;
    let done = entry(&report, "done");
    assert_eq!(done.outcome, ReapOutcome::Failed);
    assert_eq!(done.error.as_ref().unwrap().kind(), "ledger");
    assert!(h.drive.driven().is_empty());
    assert_eq!(h.record("done").await.status, RunStatus::Running);
    assert!(h
        .store
        .writes_for("done")
        .iter()
        .all(|op| !matches!(op, Op::WriteTerminal(..))));
}

#[tokio::test(start_paused = true)]
async fn the_intent_is_recorded_before_the_terminal_write() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), Some("k"));
    h.probe.finished("done", 0);
    h.sweep().await;
    let ops = h.store.ops_for("done");
    let recorded = ops.iter().position(|op| matches!(op, Op::RecordIntent(_)));
    let terminal = ops
        .iter()
        .position(|op| matches!(op, Op::WriteTerminal(..)));
    let resolved = ops.iter().position(|op| matches!(op, Op::ResolveIntent(_)));
    assert!(recorded.unwrap() < terminal.unwrap(), "{ops:?}");
    assert!(terminal.unwrap() < resolved.unwrap(), "{ops:?}");
}

#[tokio::test(start_paused = true)]
async fn retries_per_sweep_are_bounded() {
    let mut h = Harness::new();
    h.options.max_reclaim_retries = 3;
    for i in 0..5 {
        let mut r = RunRecord::new(format!("t{i}"), "thread", 1);
        r.status = RunStatus::Completed;
        h.memory.put_run(r.clone());
        h.memory
            .record_intent(&ReclaimIntent::new(&r, NOW - 10 + i))
            .await
            .unwrap();
    }
    let report = h.sweep().await;
    assert_eq!(report.reclaims.retried, 3);
    assert_eq!(
        h.reclaim.reclaimed(),
        vec!["t0", "t1", "t2"],
        "earliest first"
    );
    assert_eq!(report.reclaims.ledger.unwrap().pending, 2);
}

#[tokio::test(start_paused = true)]
async fn an_intent_whose_run_record_is_gone_is_dropped_without_a_destroy() {
    let h = Harness::new();
    let r = RunRecord::new("ghost", "thread", 1);
    h.memory
        .record_intent(&ReclaimIntent::new(&r, NOW - 1))
        .await
        .unwrap();
    let report = h.sweep().await;
    assert_eq!(report.reclaims.settled, 1);
    assert!(h.reclaim.calls().is_empty());
    assert!(h.memory.get_intent("ghost").await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_ledger_that_cannot_be_read_is_reported_and_the_sweep_goes_on() {
    let h = Harness::new();
    h.seed("done", Some(FRESH), None);
    h.probe.finished("done", 0);
    h.store.fail_when(|op, _| {
        matches!(op, Op::DueIntents | Op::LedgerCounts)
            .then(|| StoreError::Unavailable("ledger down".into()))
    });
    let report = h.sweep().await;
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::Finalized);
    assert!(report
        .reclaims
        .error
        .as_deref()
        .unwrap()
        .contains("ledger down"));
    assert_eq!(report.reclaims.ledger, None);
}

#[test]
fn the_report_serializes_the_ledger_figures() {
    let report = reaper_core::reap::ReapReport {
        reclaims: reaper_core::reap::ReclaimReport {
            retried: 2,
            settled: 1,
            failed: 1,
            ledger: Some(reaper_core::LedgerCounts {
                pending: 4,
                leaked: 1,
                oldest_first_seen: Some(5),
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["reclaims"]["ledger"]["pending"], 4);
    assert_eq!(json["reclaims"]["ledger"]["leaked"], 1);
    assert_eq!(json["reclaims"]["ledger"]["oldestFirstSeen"], 5);
    assert_eq!(json["reclaims"]["retried"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_retry_fences_out_a_paused_holder_before_dropping_its_intent() {
    let h = Harness::new();
    // A sweeper claimed the run (epoch 1) and recorded its intent, then paused until its lease
    // expired. The run is not listed (a viewer is attached), so only the ledger sees it.
    h.seed("paused", None, Some("k"));
    let bumped = reaper_core::ports::RunStore::bump_epoch(&h.memory, "paused")
        .await
        .unwrap();
    assert!(matches!(
        bumped,
        reaper_core::EpochBump::Claimed { epoch: 1, .. }
    ));
    let record = h.record("paused").await;
    h.memory
        .record_intent(&ReclaimIntent::new(&record, NOW - 1))
        .await
        .unwrap();

    let report = h.sweep().await;
    assert_eq!(report.reclaims.settled, 1);
    assert!(h.memory.get_intent("paused").await.unwrap().is_none());
    // The paused holder wakes and tries its terminal write: the fence refuses it, so no
    // terminal run is ever left without its intent.
    let late = reaper_core::ports::RunStore::write_terminal(
        &h.memory,
        "paused",
        1,
        &reaper_core::TerminalWrite {
            status: reaper_core::TerminalStatus::Completed,
            finished_at: NOW,
            error: None,
        },
    )
    .await
    .unwrap();
    assert!(
        matches!(late, reaper_core::Fenced::Superseded { observed: 2 }),
        "{late:?}"
    );
    assert_eq!(h.record("paused").await.status, RunStatus::Running);
}

/// Fails its destroy after another sweep resolved the run's entry meanwhile.
#[derive(Clone)]
struct ResolvedMeanwhile(reaper_core::memory::MemoryStore);

#[async_trait::async_trait]
impl Reclaim for ResolvedMeanwhile {
    async fn reclaim(
        &self,
        record: &RunRecord,
        _intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError> {
        self.0.resolve_intent(&record.run_id).await.unwrap();
        Err(ReclaimError::Other("destroy refused".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn a_leak_is_recorded_again_when_its_entry_was_dropped_meanwhile() {
    let h = Harness::new();
    h.seed("leak", Some(FRESH), Some("k"));
    h.probe.finished("leak", 0);
    let mut deps = h.deps();
    deps.reclaim = Some(Arc::new(ResolvedMeanwhile(h.memory.clone())));
    let report = reaper_core::reap::reap_detached_runs(&deps, &h.options)
        .await
        .unwrap();
    assert_eq!(entry(&report, "leak").outcome, ReapOutcome::ReclaimFailed);
    let again = h
        .memory
        .get_intent("leak")
        .await
        .unwrap()
        .expect("re-recorded");
    assert_eq!(again.attempts, 1);
    assert_eq!(report.reclaims.ledger.unwrap().leaked, 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_run_gets_no_cancel_once_its_claim_is_lost() {
    let h = Harness::new();
    h.seed("old", Some(NOW - common::TTL as i64 - 1), None);
    h.leases.lose_on_renew("run-driver:old");
    let report = h.sweep().await;
    assert_eq!(entry(&report, "old").outcome, ReapOutcome::NotClaimed);
    assert_eq!(h.record("old").await.cancel_requested, None);
    assert!(h.drive.driven().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_report_carries_the_backlog_and_the_waits_runs_had() {
    let mut h = Harness::new();
    h.options.max_runs = 2;
    let ttl = common::TTL as i64;
    h.seed("finished", Some(NOW - 90_000), Some("k-1"));
    h.seed("old", Some(NOW - ttl - 5_000), Some("k-2"));
    h.seed("waiting", Some(NOW - 1_000), None);
    h.probe.finished("finished", 0);
    let report = h.sweep().await;
    assert_eq!(
        (report.slo.backlog, report.slo.backlog_exact),
        (3, true),
        "every detached run, not only the batch of 2"
    );
    assert_eq!(report.slo.oldest_detached_ms, Some(ttl + 5_000));
    assert_eq!(report.slo.max_detached_to_finalized_ms, Some(90_000));
    assert_eq!(entry(&report, "old").outcome, ReapOutcome::Expired);
    assert_eq!(report.slo.max_ttl_to_destroyed_ms, Some(5_000));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["slo"]["backlog"], 3);
    assert_eq!(json["slo"]["backlogExact"], true);
}

/// A probe that never answers: a sandbox host that accepted the connection and hung.
struct HungProbe;

#[async_trait::async_trait]
impl reaper_core::ports::ExitProbe for HungProbe {
    async fn has_finished(
        &self,
        _record: &RunRecord,
    ) -> Result<reaper_core::RunExitProbe, reaper_core::ProbeError> {
        std::future::pending().await
    }
}

/// A reclaim that never answers.
struct HungReclaim;

#[async_trait::async_trait]
impl Reclaim for HungReclaim {
    async fn reclaim(
        &self,
        _record: &RunRecord,
        _intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_probe_past_its_step_deadline_is_unknown_and_the_sweep_goes_on() {
    let mut h = Harness::new();
    h.options.step_timeout_ms = 1_000;
    h.seed("hung", Some(FRESH), None);
    let mut deps = h.deps();
    deps.probe = Arc::new(HungProbe);
    let started = tokio::time::Instant::now();
    let report = reaper_core::reap::reap_detached_runs(&deps, &h.options)
        .await
        .unwrap();
    assert_eq!(started.elapsed(), std::time::Duration::from_millis(1_000));
    let hung = entry(&report, "hung");
    assert_eq!(hung.outcome, ReapOutcome::Unknown);
    assert!(hung
        .error
        .as_ref()
        .unwrap()
        .to_string()
        .contains("deadline"));
}

#[tokio::test(start_paused = true)]
async fn a_reclaim_past_its_step_deadline_is_a_leak_the_ledger_retries() {
    let mut h = Harness::new();
    h.options.step_timeout_ms = 1_000;
    h.seed("done", Some(FRESH), Some("k"));
    h.probe.finished("done", 0);
    let mut deps = h.deps();
    deps.reclaim = Some(Arc::new(HungReclaim));
    let report = reaper_core::reap::reap_detached_runs(&deps, &h.options)
        .await
        .unwrap();
    assert_eq!(entry(&report, "done").outcome, ReapOutcome::ReclaimFailed);
    let intent = h.memory.get_intent("done").await.unwrap().unwrap();
    assert_eq!(intent.attempts, 1);
    assert!(intent.last_error.unwrap().contains("deadline"));
}

#[test]
fn the_reserve_is_the_worst_case_the_sweeps_own_bounds_allow() {
    let o = reaper_core::reap::ReapOptions::new(1, "me");
    // probe step + quiet wait (7 windows of 5 s) + run budget + reclaim step + store requests.
    assert_eq!(
        o.worst_case_run_ms(),
        20_000 + 35_000 + 30_000 + 20_000 + 2_000
    );
    assert_eq!(o.reserve_ms(), o.worst_case_run_ms());
    let mut o2 = o.clone();
    o2.step_timeout_ms = 5_000;
    o2.run_budget_ms = 10_000;
    o2.fence_quiet_ms = 0;
    assert_eq!(o2.reserve_ms(), 5_000 + 10_000 + 5_000 + 2_000);
}

/// Issue 24, item 5: a record naming a provider this reaper does not serve is no silent leak.
/// The sweep reports the sandbox `leaked` and the ledger keeps the entry as a leak, sweep after
/// sweep, until a reaper that serves the provider destroys it and settles the entry.
#[tokio::test(start_paused = true)]
async fn a_sandbox_of_an_unserved_provider_stays_a_leak_until_a_reaper_that_serves_it_settles_it() {
    use reaper_core::domain::SandboxInstanceRecord;
    use reaper_core::ports::SandboxInstanceStore;
    use reaper_core::reap::SandboxFate;
    use reaper_core::reclaim::SandboxReclaimer;
    use reaper_testkit::fakes::FakeProvider;

    let h = Harness::new();
    h.seed("foreign", Some(FRESH), Some("k-foreign"));
    h.probe.finished("foreign", 0);
    h.memory
        .upsert(SandboxInstanceRecord {
            key: "k-foreign".into(),
            provider: "daytona".into(),
            provider_sandbox_id: "sbx-d".into(),
            latest_snapshot_id: None,
            thread_id: "thread-foreign".into(),
            latest_run_id: Some("foreign".into()),
            updated_at: NOW,
        })
        .await
        .unwrap();
    let reclaimer = |provider: &FakeProvider| -> Arc<dyn Reclaim> {
        Arc::new(SandboxReclaimer {
            provider: Arc::new(provider.clone()),
            instances: Arc::new(h.memory.clone()),
            runs: Arc::new(h.memory.clone()),
        })
    };
    let docker = FakeProvider::new("docker");
    let mut deps = h.deps();
    deps.reclaim = Some(reclaimer(&docker));

    let report = reaper_core::reap::reap_detached_runs(&deps, &h.options)
        .await
        .unwrap();
    let e = entry(&report, "foreign");
    assert_eq!(e.outcome, ReapOutcome::ReclaimFailed);
    assert_eq!(e.status, Some(RunStatus::Completed));
    assert_eq!(e.sandbox, Some(SandboxFate::Leaked));
    assert!(
        e.error.as_ref().unwrap().to_string().contains("daytona"),
        "{e:?}"
    );
    assert_eq!(report.reclaims.leaked(), Some(1));
    let leak = h.memory.get_intent("foreign").await.unwrap().expect("kept");
    assert!(leak.is_leak());
    assert_eq!(leak.provider.as_deref(), Some("daytona"));
    assert_eq!(leak.provider_sandbox_id.as_deref(), Some("sbx-d"));

    // Due again: this reaper's retry cannot settle it either, and says so.
    tokio::time::advance(std::time::Duration::from_millis(RECLAIM_RETRY_BASE_MS + 1)).await;
    let mut options = h.options.clone();
    options.now = Some(NOW + RECLAIM_RETRY_BASE_MS as i64 + 1);
    let again = reaper_core::reap::reap_detached_runs(&deps, &options)
        .await
        .unwrap();
    assert_eq!((again.reclaims.retried, again.reclaims.failed), (1, 1));
    assert_eq!(again.reclaims.leaked(), Some(1));
    assert!(docker.destroy_calls().is_empty());

    // A reaper that serves daytona settles it.
    tokio::time::advance(std::time::Duration::from_millis(
        2 * RECLAIM_RETRY_BASE_MS + 1,
    ))
    .await;
    let daytona = FakeProvider::new("daytona");
    deps.reclaim = Some(reclaimer(&daytona));
    let settled = reaper_core::reap::reap_detached_runs(&deps, &options)
        .await
        .unwrap();
    assert_eq!(settled.reclaims.settled, 1);
    assert_eq!(settled.reclaims.leaked(), Some(0));
    assert_eq!(daytona.destroy_calls(), vec!["sbx-d"]);
    assert!(SandboxInstanceStore::get(&h.memory, "k-foreign")
        .await
        .unwrap()
        .is_none());
}
