//! The true backlog figure (issue 13): the store's bounded count of every detached run, not the
//! rows one sweep's bounded listing read, in one request per sweep whatever the backlog.

mod common;

use std::sync::Arc;

use common::{Harness, NOW, TTL};
use reaper_core::domain::{EpochMs, NewRun, RunPatch, RunRecord, RunStatus, TerminalWrite};
use reaper_core::error::StoreError;
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    BoundedCount, EpochBump, Fenced, ReclaimablePage, ReclaimableQuery, RunStore,
};
use reaper_core::reap::{reap_detached_runs, ReapReport};

/// The memory store, whose count fails (or is missing) as told.
struct CountFails {
    inner: MemoryStore,
    error: fn() -> StoreError,
}

#[async_trait::async_trait]
impl RunStore for CountFails {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.inner.create_or_resume(new).await
    }
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.inner.update(run_id, patch).await
    }
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<reaper_core::Fenced<bool>, StoreError> {
        self.inner.update_fenced(run_id, held_epoch, patch).await
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.inner.get(run_id).await
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.inner.find_active_run(thread_id).await
    }
    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.list_by_thread(thread_id).await
    }
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.inner.list_reclaimable_page(query).await
    }
    async fn count_reclaimable(
        &self,
        _detached_after: Option<EpochMs>,
        _detached_until: EpochMs,
        _at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        Err((self.error)())
    }
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.inner.bump_epoch(run_id).await
    }
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.inner.write_terminal(run_id, held_epoch, write).await
    }
}

/// 12 detached runs (2 past the TTL) and some that are not in the backlog; batches of 5.
fn seeded() -> Harness {
    let mut h = Harness::new();
    h.options.max_runs = 5;
    for i in 0..10 {
        h.seed(&format!("fresh-{i:02}"), Some(NOW - 10_000 + i), None);
    }
    h.seed("expired-a", Some(NOW - 2 * TTL as i64), None);
    h.seed("expired-b", Some(NOW - 3 * TTL as i64), None);
    h.seed_with("done", Some(NOW - 5_000), None, RunStatus::Completed);
    h.seed("attached", None, None);
    h
}

async fn sweep_on(h: &Harness, runs: Arc<dyn RunStore>) -> ReapReport {
    let mut deps = h.deps();
    deps.runs = runs;
    reap_detached_runs(&deps, &h.options)
        .await
        .expect("valid options")
}

#[tokio::test(start_paused = true)]
async fn the_backlog_is_every_detached_run_the_store_counts_not_the_batch() {
    let h = seeded();
    let report = sweep_on(&h, Arc::new(h.memory.clone())).await;
    assert_eq!(report.considered, 5);
    assert_eq!((report.slo.backlog, report.slo.backlog_exact), (12, true));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["slo"]["backlog"], 12);
    assert_eq!(json["slo"]["backlogExact"], true);
}

#[tokio::test(start_paused = true)]
async fn a_backlog_past_the_count_bound_is_at_least_the_bound() {
    let mut h = seeded();
    h.options.backlog_count_max = 7;
    let report = sweep_on(&h, Arc::new(h.memory.clone())).await;
    assert_eq!((report.slo.backlog, report.slo.backlog_exact), (7, false));
}

#[tokio::test(start_paused = true)]
async fn a_failed_count_reports_the_rows_read_as_at_least_and_the_sweep_goes_on() {
    let h = seeded();
    let runs = CountFails {
        inner: h.memory.clone(),
        error: || StoreError::Unavailable("injected outage".into()),
    };
    let report = sweep_on(&h, Arc::new(runs)).await;
    assert_eq!(report.considered, 5, "the sweep itself is unaffected");
    assert_eq!((report.slo.backlog, report.slo.backlog_exact), (5, false));
}

#[tokio::test(start_paused = true)]
async fn a_store_that_cannot_count_reports_the_rows_read_as_at_least() {
    let h = seeded();
    let runs = CountFails {
        inner: h.memory.clone(),
        error: || StoreError::Unsupported("count_reclaimable"),
    };
    let report = sweep_on(&h, Arc::new(runs)).await;
    assert_eq!((report.slo.backlog, report.slo.backlog_exact), (5, false));
}

#[tokio::test(start_paused = true)]
async fn a_count_bound_of_zero_skips_the_count() {
    let mut h = seeded();
    h.options.backlog_count_max = 0;
    let report = sweep_on(&h, Arc::new(h.memory.clone())).await;
    assert_eq!((report.slo.backlog, report.slo.backlog_exact), (5, false));
}
