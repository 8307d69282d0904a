//! `reclaim_sandbox` and `SandboxReclaimer` (spec F, H2).

use std::sync::Arc;

use reaper_core::domain::{RunRecord, RunStatus, SandboxInstanceRecord};
use reaper_core::error::{ReclaimError, StoreError};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{Reclaim, SandboxInstanceStore};
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
    let outcome = reclaim_sandbox(&record(Some("k1")), &provider, &instances)
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::Destroyed);
    assert_eq!(provider.destroy_calls(), vec!["sbx-1"]);
    assert!(instances.get("k1").await.unwrap().is_none());
}

#[tokio::test]
async fn failed_destroy_is_reported_and_the_record_is_still_deleted() {
    let instances = instances_with("k1", "sbx-1", "fake").await;
    let provider = FakeProvider::new("fake");
    provider.fail_destroy("sbx-1");
    let outcome = reclaim_sandbox(&record(Some("k1")), &provider, &instances)
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::DestroyFailed);
    assert_ne!(outcome, ReclaimOutcome::Destroyed);
    assert!(instances.get("k1").await.unwrap().is_none());
}

#[tokio::test]
async fn run_without_a_sandbox_key_needs_no_reclaim() {
    let provider = FakeProvider::new("fake");
    let outcome = reclaim_sandbox(&record(None), &provider, &MemoryStore::new())
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::NoSandboxKey);
    assert!(provider.destroy_calls().is_empty());
}

#[tokio::test]
async fn empty_sandbox_key_is_not_treated_as_missing() {
    let provider = FakeProvider::new("fake");
    let outcome = reclaim_sandbox(&record(Some("")), &provider, &MemoryStore::new())
        .await
        .unwrap();
    assert_eq!(outcome, ReclaimOutcome::NotFound);
}

#[tokio::test]
async fn missing_instance_record_is_not_found_without_a_destroy() {
    let provider = FakeProvider::new("fake");
    let outcome = reclaim_sandbox(&record(Some("k1")), &provider, &MemoryStore::new())
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
    let outcome = reclaim_sandbox(&record(Some("k1")), &provider, &instances)
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
    let err = reclaim_sandbox(&record(Some("k1")), &provider, &DownStore)
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
    }
}

#[tokio::test]
async fn reclaimer_resolves_after_a_clean_teardown() {
    let instances = Arc::new(instances_with("k1", "sbx-1", "fake").await);
    let provider = FakeProvider::new("fake");
    let (logs, _g) = LogCapture::install();
    reclaimer(&provider, instances.clone())
        .reclaim(&record(Some("k1")))
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
    let err = reclaimer(&provider, Arc::new(DownStore))
        .reclaim(&record(Some("k1")))
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
    let err = reclaimer(&provider, instances)
        .reclaim(&record(Some("k1")))
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
    let errors: Vec<_> = logs
        .events()
        .into_iter()
        .filter(|e| e.level == Level::ERROR)
        .collect();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].message.contains("destroy failed"));
}

#[tokio::test]
async fn reclaimer_resolves_when_there_is_nothing_to_tear_down() {
    let provider = FakeProvider::new("docker");
    let r = reclaimer(&provider, Arc::new(MemoryStore::new()));
    r.reclaim(&record(None)).await.unwrap();
    r.reclaim(&record(Some("missing"))).await.unwrap();
    let other = reclaimer(
        &provider,
        Arc::new(instances_with("k1", "sbx-1", "daytona").await),
    );
    other.reclaim(&record(Some("k1"))).await.unwrap();
    assert!(provider.destroy_calls().is_empty());
}
