//! `reclaim_sandbox` and `SandboxReclaimer` (spec F, H2).

use std::sync::Arc;

use reaper_core::domain::{ReclaimIntent, RunRecord, RunStatus, SandboxInstanceRecord};
use reaper_core::error::{ReclaimError, StoreError};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{Reclaim, Reclaimed, SandboxInstanceStore};
use reaper_core::reclaim::{reclaim_sandbox, ReclaimOutcome, SandboxReclaimer};
use reaper_testkit::fakes::{FakeProvider, LogCapture};
use tracing::Level;

fn record(key: Option<&str>) -> RunRecord {
    let mut r = RunRecord::new("r1", "t1", 1);
    r.status = RunStatus::Completed;
    r.finished_at = Some(2);
    r.sandbox_key = key.map(String::from);
    r
}

fn intent(r: &RunRecord) -> ReclaimIntent {
    ReclaimIntent::new(r, 10)
}

/// `reclaim_sandbox` of `r` with a fresh intent, runs and instances in one memory store.
async fn reclaim(
    r: &RunRecord,
    provider: &FakeProvider,
    store: &MemoryStore,
) -> Result<ReclaimOutcome, StoreError> {
    reclaim_sandbox(r, &intent(r), provider, store, store).await
}

async fn instances_with(key: &str, id: &str, provider: &str) -> MemoryStore {
    let store = MemoryStore::new();
    store
        .upsert(SandboxInstanceRecord {
            key: key.into(),
            provider: provider.into(),
            provider_sandbox_id: id.into(),
            latest_snapshot_id: None,
            thread_id: "t1".into(),
            latest_run_id: Some("r1".into()),
            updated_at: 1,
        })
        .await
        .unwrap();
    store
}

/// An instance store whose `get` fails.
#[derive(Debug)]
struct DownStore;

#[async_trait::async_trait]
impl SandboxInstanceStore for DownStore {
    async fn get(&self, _key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        Err(StoreError::Unavailable("store down".into()))
    }
    async fn upsert(&self, _r: SandboxInstanceRecord) -> Result<(), StoreError> {
        Ok(())
    }
    async fn delete(&self, _key: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

#[tokio::test]
async fn sandbox_is_destroyed_and_its_record_deleted() {
    let instances = instances_with("k1", "sbx-1", "fake").await;
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&record(Some("k1")), &provider, &instances)
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::Destroyed);
    assert_eq!(provider.destroy_calls(), vec!["sbx-1"]);
    assert!(instances.get("k1").await.unwrap().is_none());
}

#[tokio::test]
async fn failed_destroy_is_reported_and_the_record_is_kept_for_the_retry() {
    let instances = instances_with("k1", "sbx-1", "fake").await;
    let provider = FakeProvider::new("fake");
    provider.fail_destroy("sbx-1");
    let outcome = reclaim(&record(Some("k1")), &provider, &instances)
        .await
        .unwrap();
    assert!(
        matches!(&outcome, ReclaimOutcome::DestroyFailed { provider, provider_sandbox_id, .. }
            if provider == "fake" && provider_sandbox_id == "sbx-1"),
        "{outcome:?}"
    );
    // Kept, so the ledger's retry still reaches the sandbox.
    assert!(instances.get("k1").await.unwrap().is_some());
}

#[tokio::test]
async fn run_without_a_sandbox_key_needs_no_reclaim() {
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&record(None), &provider, &MemoryStore::new())
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::NoSandboxKey);
    assert!(provider.destroy_calls().is_empty());
}

#[tokio::test]
async fn empty_sandbox_key_is_not_treated_as_missing() {
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&record(Some("")), &provider, &MemoryStore::new())
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::NotFound);
}

#[tokio::test]
async fn missing_instance_record_is_not_found_without_a_destroy() {
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&record(Some("k1")), &provider, &MemoryStore::new())
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::NotFound);
    assert!(provider.destroy_calls().is_empty());
}

#[tokio::test]
async fn instance_of_another_provider_is_refused_and_kept() {
    let instances = instances_with("k1", "sbx-1", "daytona").await;
    let provider = FakeProvider::new("docker");
    let (logs, _g) = LogCapture::install();
    let outcome = reclaim(&record(Some("k1")), &provider, &instances)
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::ProviderMismatch);
    assert!(provider.destroy_calls().is_empty());
    assert!(instances.get("k1").await.unwrap().is_some());
    assert!(logs.count(Level::WARN) >= 1);
}

#[tokio::test]
async fn instance_store_failure_propagates_without_a_destroy() {
    let provider = FakeProvider::new("fake");
    let r = record(Some("k1"));
    let err = reclaim_sandbox(&r, &intent(&r), &provider, &DownStore, &MemoryStore::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("store down"));
    assert!(provider.destroy_calls().is_empty());
}

fn reclaimer(
    provider: &FakeProvider,
    instances: Arc<dyn SandboxInstanceStore>,
) -> SandboxReclaimer {
    SandboxReclaimer {
        provider: Arc::new(provider.clone()),
        instances,
        runs: Arc::new(MemoryStore::new()),
    }
}

async fn reclaim_with(r: &SandboxReclaimer, record: &RunRecord) -> Result<Reclaimed, ReclaimError> {
    r.reclaim(record, &intent(record)).await
}

#[tokio::test]
async fn reclaimer_resolves_after_a_clean_teardown() {
    let instances = Arc::new(instances_with("k1", "sbx-1", "fake").await);
    let provider = FakeProvider::new("fake");
    let (logs, _g) = LogCapture::install();
    reclaim_with(
        &reclaimer(&provider, instances.clone()),
        &record(Some("k1")),
    )
    .await
    .unwrap();
    assert_eq!(provider.destroy_calls(), vec!["sbx-1"]);
    assert!(instances.get("k1").await.unwrap().is_none());
    assert_eq!(logs.count(Level::ERROR), 0);
    assert!(logs.count(Level::DEBUG) >= 1);
}

#[tokio::test]
async fn reclaimer_propagates_an_instance_store_failure() {
    let provider = FakeProvider::new("fake");
    let err = reclaim_with(
        &reclaimer(&provider, Arc::new(DownStore)),
        &record(Some("k1")),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, ReclaimError::Store(_)));
    assert!(err.to_string().contains("store down"));
}

#[tokio::test]
async fn reclaimer_rejects_a_failed_destroy_with_the_run_and_key() {
    let instances = Arc::new(instances_with("k1", "sbx-1", "fake").await);
    let provider = FakeProvider::new("fake");
    provider.fail_destroy("sbx-1");
    let (logs, _g) = LogCapture::install();
    let err = reclaim_with(&reclaimer(&provider, instances), &record(Some("k1")))
        .await
        .unwrap_err();
    match &err {
        ReclaimError::Failed(e) => {
            assert_eq!(e.run_id, "r1");
            assert_eq!(e.sandbox_key.as_deref(), Some("k1"));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("k1"));
    assert!(err.to_string().contains("retries"), "{err}");
    assert!(logs.contains(Level::WARN, "destroy failed"));
}

#[tokio::test]
async fn reclaimer_resolves_when_there_is_nothing_to_tear_down() {
    let provider = FakeProvider::new("docker");
    let r = reclaimer(&provider, Arc::new(MemoryStore::new()));
    assert_eq!(
        reclaim_with(&r, &record(None)).await.unwrap(),
        Reclaimed::Nothing
    );
    assert_eq!(
        reclaim_with(&r, &record(Some("missing"))).await.unwrap(),
        Reclaimed::Nothing
    );
    assert!(provider.destroy_calls().is_empty());
}

/// Issue 24, item 5: a record of a provider this reaper does not serve is not settled as
/// `kept` (which resolved its ledger entry and hid it for ever) but failed as a leak naming the
/// provider and the sandbox, so the ledger keeps it until a reaper that serves it destroys it.
#[tokio::test]
async fn a_sandbox_of_a_provider_this_reaper_lacks_is_a_leak_not_kept() {
    let provider = FakeProvider::new("docker");
    let other = reclaimer(
        &provider,
        Arc::new(instances_with("k1", "sbx-1", "daytona").await),
    );
    let err = reclaim_with(&other, &record(Some("k1"))).await.unwrap_err();
    match &err {
        ReclaimError::Failed(e) => {
            assert_eq!(e.provider.as_deref(), Some("daytona"));
            assert_eq!(e.provider_sandbox_id.as_deref(), Some("sbx-1"));
            assert!(e.reason.contains("does not serve"), "{}", e.reason);
        }
        other => panic!("{other:?}"),
    }
    assert!(provider.destroy_calls().is_empty());
}

/// Issue 24, item 4: the application records a new turn's run id on the instance before the
/// run row exists; nothing proves that turn over, so its sandbox stays.
#[tokio::test]
async fn a_sandbox_whose_latest_run_has_no_record_yet_is_kept() {
    let store = instances_with("k1", "sbx-1", "fake").await;
    let mut inst = store.get("k1").await.unwrap().unwrap();
    inst.latest_run_id = Some("r-next".into());
    store.upsert(inst).await.unwrap();
    let r1 = record(Some("k1"));
    store.put_run(r1.clone());
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&r1, &provider, &store).await.unwrap();
    assert_eq!(
        outcome,
        ReclaimOutcome::LatestRunUnknown {
            run_id: "r-next".into()
        }
    );
    assert!(provider.destroy_calls().is_empty());
    let kept = SandboxReclaimer {
        provider: Arc::new(provider.clone()),
        instances: Arc::new(store.clone()),
        runs: Arc::new(store.clone()),
    }
    .reclaim(&r1, &intent(&r1))
    .await
    .unwrap();
    assert!(
        matches!(&kept, Reclaimed::Kept(why) if why.message.contains("r-next") && why.message.contains("no record") && why.code == reaper_core::reason::ReasonCode::KeptTurnBeingSetUp),
        "the report says why: {kept:?}"
    );
}

/// Issue 24, item 4: a live run of another thread naming the same key keeps the sandbox (the
/// store's `live_runs_for_sandbox`, not only the thread's runs).
#[tokio::test]
async fn a_sandbox_named_by_a_live_run_of_another_thread_is_kept() {
    let store = instances_with("k1", "sbx-1", "fake").await;
    let r1 = record(Some("k1"));
    store.put_run(r1.clone());
    let mut other = RunRecord::new("r-other", "t-other", 5);
    other.sandbox_key = Some("k1".into());
    store.put_run(other);
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&r1, &provider, &store).await.unwrap();
    assert_eq!(
        outcome,
        ReclaimOutcome::InUse {
            run_id: "r-other".into()
        }
    );
    assert!(provider.destroy_calls().is_empty());
}

/// Issue 24, item 4: an attached turn gets its key only when it detaches, and the instance may
/// still name the finished run as its latest: the thread's live run with no key keeps it.
#[tokio::test]
async fn an_attached_turn_with_no_key_yet_keeps_the_sandbox_of_a_stale_latest_run() {
    let store = instances_with("k1", "sbx-1", "fake").await;
    let r1 = record(Some("k1"));
    store.put_run(r1.clone());
    store.put_run(RunRecord::new("r2", "t1", 5));
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&r1, &provider, &store).await.unwrap();
    assert_eq!(
        outcome,
        ReclaimOutcome::InUse {
            run_id: "r2".into()
        }
    );
    assert!(provider.destroy_calls().is_empty());
}

/// Two turns of one thread share a sandbox: `r1` (older, now terminal) and `r2`.
async fn shared_sandbox(r2_status: RunStatus, latest: &str) -> (MemoryStore, RunRecord) {
    let store = instances_with("k1", "sbx-1", "fake").await;
    let mut inst = store.get("k1").await.unwrap().unwrap();
    inst.latest_run_id = Some(latest.into());
    store.upsert(inst).await.unwrap();
    let r1 = record(Some("k1"));
    store.put_run(r1.clone());
    let mut r2 = RunRecord::new("r2", "t1", 5);
    r2.status = r2_status;
    r2.sandbox_key = Some("k1".into());
    store.put_run(r2);
    (store, r1)
}

#[tokio::test]
async fn sandbox_of_a_newer_live_run_is_kept_when_an_older_turn_is_finalized() {
    let (store, r1) = shared_sandbox(RunStatus::Running, "r2").await;
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&r1, &provider, &store).await.unwrap();
    assert_eq!(
        outcome,
        ReclaimOutcome::InUse {
            run_id: "r2".into()
        }
    );
    assert!(provider.destroy_calls().is_empty());
    assert!(store.get("k1").await.unwrap().is_some(), "the record stays");
}

#[tokio::test]
async fn sandbox_named_by_any_non_terminal_run_of_the_thread_is_kept() {
    // The instance still names r1 as its latest run, but r2 (interrupted: waiting for a human)
    // records the same key.
    let (store, r1) = shared_sandbox(RunStatus::Interrupted, "r1").await;
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&r1, &provider, &store).await.unwrap();
    assert_eq!(
        outcome,
        ReclaimOutcome::InUse {
            run_id: "r2".into()
        }
    );
    assert!(provider.destroy_calls().is_empty());
}

#[tokio::test]
async fn shared_sandbox_is_destroyed_once_every_run_using_it_is_terminal() {
    let (store, r1) = shared_sandbox(RunStatus::Completed, "r2").await;
    let provider = FakeProvider::new("fake");
    let outcome = reclaim(&r1, &provider, &store).await.unwrap();
    assert_eq!(outcome, ReclaimOutcome::Destroyed);
    assert_eq!(provider.destroy_calls(), vec!["sbx-1"]);
}

#[tokio::test]
async fn a_failed_in_use_check_destroys_nothing() {
    /// Instances answer; the run store is down, so nothing proves the sandbox unused.
    #[derive(Debug)]
    struct DownRuns;
    #[async_trait::async_trait]
    impl reaper_core::ports::RunStore for DownRuns {
        async fn create_or_resume(&self, _n: reaper_core::NewRun) -> Result<RunRecord, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn update(&self, _id: &str, _p: reaper_core::RunPatch) -> Result<(), StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn update_fenced(
            &self,
            _id: &str,
            _e: u64,
            _p: reaper_core::RunPatch,
        ) -> Result<reaper_core::Fenced<bool>, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn get(&self, _id: &str) -> Result<Option<RunRecord>, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn find_active_run(&self, _t: &str) -> Result<Option<RunRecord>, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn list_reclaimable_page(
            &self,
            _q: reaper_core::ReclaimableQuery,
        ) -> Result<reaper_core::ReclaimablePage, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn count_reclaimable(
            &self,
            _after: Option<i64>,
            _until: i64,
            _at_most: u64,
        ) -> Result<reaper_core::BoundedCount, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn bump_epoch(&self, _id: &str) -> Result<reaper_core::EpochBump, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
        async fn write_terminal(
            &self,
            _id: &str,
            _e: u64,
            _w: &reaper_core::TerminalWrite,
        ) -> Result<reaper_core::Fenced<bool>, StoreError> {
            Err(StoreError::Unavailable("runs down".into()))
        }
    }
    let (store, r1) = shared_sandbox(RunStatus::Running, "r2").await;
    let provider = FakeProvider::new("fake");
    let err = reclaim_sandbox(&r1, &intent(&r1), &provider, &store, &DownRuns)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("runs down"));
    assert!(provider.destroy_calls().is_empty());
}

#[tokio::test]
async fn a_leak_on_file_is_destroyed_after_the_instance_record_is_gone() {
    let store = MemoryStore::new();
    let provider = FakeProvider::new("fake");
    let r1 = record(Some("k1"));
    let mut on_file = intent(&r1);
    on_file.provider = Some("fake".into());
    on_file.provider_sandbox_id = Some("sbx-old".into());
    on_file.attempts = 2;
    let outcome = reclaim_sandbox(&r1, &on_file, &provider, &store, &store)
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::Destroyed);
    assert_eq!(provider.destroy_calls(), vec!["sbx-old"]);
}

#[tokio::test]
async fn a_leak_on_file_is_destroyed_and_not_the_new_sandbox_the_key_moved_to() {
    let store = instances_with("k1", "sbx-new", "fake").await;
    let provider = FakeProvider::new("fake");
    let r1 = record(Some("k1"));
    let mut on_file = intent(&r1);
    on_file.provider = Some("fake".into());
    on_file.provider_sandbox_id = Some("sbx-old".into());
    let outcome = reclaim_sandbox(&r1, &on_file, &provider, &store, &store)
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::Destroyed);
    assert_eq!(provider.destroy_calls(), vec!["sbx-old"]);
    assert_eq!(
        store.get("k1").await.unwrap().unwrap().provider_sandbox_id,
        "sbx-new",
        "the new sandbox's record is untouched"
    );
}

#[tokio::test]
async fn a_leak_on_file_of_another_provider_is_never_sent_to_this_one() {
    let store = MemoryStore::new();
    let provider = FakeProvider::new("docker");
    let r1 = record(Some("k1"));
    let mut on_file = intent(&r1);
    on_file.provider = Some("daytona".into());
    on_file.provider_sandbox_id = Some("sbx-old".into());
    let outcome = reclaim_sandbox(&r1, &on_file, &provider, &store, &store)
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::ProviderMismatch);
    assert!(provider.destroy_calls().is_empty());
}
