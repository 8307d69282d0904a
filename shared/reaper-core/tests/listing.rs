//! The sweep's bounded, fair listing (issue 13): runs past the TTL first, then a round robin among
//! the runs inside it from the cursor the previous sweep reported, in a constant number of store
//! requests whatever the backlog.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{Harness, NOW, TTL};
use reaper_core::domain::{EpochMs, NewRun, RunPatch, RunRecord, TerminalWrite};
use reaper_core::error::StoreError;
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    BoundedCount, EpochBump, Fenced, ReclaimableCursor, ReclaimablePage, ReclaimableQuery, RunStore,
};
use reaper_core::reap::{ReapOutcome, ReapReport};

/// The memory store, counting its listing and backlog-count requests.
#[derive(Clone)]
struct CountingRuns {
    inner: MemoryStore,
    pages: Arc<AtomicUsize>,
    counts: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl RunStore for CountingRuns {
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
    async fn list_reclaimable(
        &self,
        _now: EpochMs,
        _ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        panic!("the sweep must list in bounded pages, never the whole backlog")
    }
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.pages.fetch_add(1, Ordering::SeqCst);
        self.inner.list_reclaimable_page(query).await
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        self.counts.fetch_add(1, Ordering::SeqCst);
        self.inner
            .count_reclaimable(detached_after, detached_until, at_most)
            .await
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

struct Fixture {
    h: Harness,
    runs: CountingRuns,
}

impl Fixture {
    fn new(max_runs: usize) -> Self {
        let mut h = Harness::new();
        h.options.max_runs = max_runs;
        let runs = CountingRuns {
            inner: h.memory.clone(),
            pages: Arc::default(),
            counts: Arc::default(),
        };
        Fixture { h, runs }
    }

    /// One sweep over the counting store, resuming from `report`'s cursor.
    async fn sweep_after(&mut self, previous: Option<&ReapReport>) -> ReapReport {
        self.h.options.resume_after = previous.and_then(|r| r.cursor.clone());
        let mut deps = self.h.deps();
        deps.runs = Arc::new(self.runs.clone());
        reaper_core::reap::reap_detached_runs(&deps, &self.h.options)
            .await
            .expect("valid options")
    }

    fn pages(&self) -> usize {
        self.runs.pages.swap(0, Ordering::SeqCst)
    }

    fn counts(&self) -> usize {
        self.runs.counts.swap(0, Ordering::SeqCst)
    }
}

fn considered(report: &ReapReport) -> Vec<&str> {
    report.runs.iter().map(|e| e.run_id.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn finished_runs_behind_a_thousand_producing_ones_are_finalized_within_one_round() {
    let mut f = Fixture::new(25);
    // The producing runs are the longest detached: oldest first alone would never reach the rest.
    for i in 0..1_000 {
        f.h.seed(&format!("producing-{i:04}"), Some(NOW - 600_000 + i), None);
    }
    for i in 0..10 {
        let id = format!("finished-{i:02}");
        f.h.seed(&id, Some(NOW - 1_000 + i), None);
        f.h.probe.finished(&id, 0);
    }
    let bound = 1_010_usize.div_ceil(25);
    let mut finalized = 0;
    let mut report: Option<ReapReport> = None;
    let mut sweeps = 0;
    while finalized < 10 {
        assert!(
            sweeps < bound,
            "{finalized} of 10 finished runs finalized after {sweeps} sweeps (bound {bound})"
        );
        let next = f.sweep_after(report.as_ref()).await;
        assert_eq!(next.considered, 25, "every sweep fills its batch");
        finalized += next.outcomes.finalized;
        report = Some(next);
        sweeps += 1;
    }
    assert_eq!(finalized, 10);
}

#[tokio::test(start_paused = true)]
async fn runs_past_the_ttl_fill_the_batch_before_any_run_inside_it() {
    let mut f = Fixture::new(4);
    let ttl = TTL as i64;
    f.h.seed("fresh-a", Some(NOW - ttl + 10), None);
    f.h.seed("fresh-b", Some(NOW - 10), None);
    f.h.seed("expired-newest", Some(NOW - ttl), None);
    f.h.seed("expired-oldest", Some(NOW - 3 * ttl), None);
    f.h.seed("expired-middle", Some(NOW - 2 * ttl), None);
    let report = f.sweep_after(None).await;
    assert_eq!(
        considered(&report),
        [
            "expired-oldest",
            "expired-middle",
            "expired-newest",
            "fresh-a"
        ]
    );
    assert_eq!(report.outcomes.expired, 3);
    assert_eq!(
        report.cursor,
        Some(ReclaimableCursor {
            detached_since: NOW - ttl + 10,
            run_id: "fresh-a".into()
        }),
        "the cursor moves over the runs inside the TTL only"
    );
}

#[tokio::test(start_paused = true)]
async fn the_round_robin_wraps_around_to_the_longest_detached() {
    let mut f = Fixture::new(2);
    for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        f.h.seed(id, Some(NOW - 1_000 + i as i64), None);
    }
    let first = f.sweep_after(None).await;
    assert_eq!(considered(&first), ["a", "b"]);
    let second = f.sweep_after(Some(&first)).await;
    assert_eq!(considered(&second), ["c", "d"]);
    let third = f.sweep_after(Some(&second)).await;
    assert_eq!(considered(&third), ["e", "a"], "wraps around once");
    let fourth = f.sweep_after(Some(&third)).await;
    assert_eq!(considered(&fourth), ["b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn a_backlog_smaller_than_the_batch_is_listed_once_per_sweep() {
    let mut f = Fixture::new(25);
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        f.h.seed(id, Some(NOW - 1_000 + i as i64), None);
    }
    let first = f.sweep_after(None).await;
    let second = f.sweep_after(Some(&first)).await;
    assert_eq!(
        considered(&second),
        ["a", "b", "c"],
        "each run once, though the cursor was past the first"
    );
}

#[tokio::test(start_paused = true)]
async fn a_sweep_without_a_run_inside_the_ttl_keeps_the_cursor() {
    let mut f = Fixture::new(1);
    f.h.seed("fresh", Some(NOW - 10), None);
    f.h.seed("expired", Some(NOW - 2 * TTL as i64), None);
    let previous = ReapReport {
        cursor: Some(ReclaimableCursor {
            detached_since: NOW - 20,
            run_id: "gone".into(),
        }),
        ..ReapReport::default()
    };
    let report = f.sweep_after(Some(&previous)).await;
    assert_eq!(considered(&report), ["expired"]);
    assert_eq!(report.cursor, previous.cursor);
}

#[tokio::test(start_paused = true)]
async fn listing_requests_per_sweep_do_not_grow_with_the_backlog() {
    let mut counts = Vec::new();
    for backlog in [1_000, 10_000] {
        let mut f = Fixture::new(25);
        // Counted whole: the bound is above both backlogs.
        f.h.options.backlog_count_max = 10_000;
        for i in 0..backlog {
            f.h.seed(&format!("run-{i:05}"), Some(NOW - 600_000 + i), None);
        }
        let mut report = None;
        let mut most = 0;
        // Enough sweeps to wrap around the smaller backlog.
        for _ in 0..45 {
            let next = f.sweep_after(report.as_ref()).await;
            assert_eq!(next.outcomes.producing, 25);
            assert_eq!(
                (next.slo.backlog, next.slo.backlog_exact),
                (backlog as usize, true),
                "the true backlog, counted"
            );
            assert_eq!(f.counts(), 1, "one bounded count per sweep");
            most = most.max(f.pages());
            report = Some(next);
        }
        counts.push(most);
    }
    // The expired page, the page from the cursor and, on the sweep that wraps, one more.
    assert_eq!(
        counts,
        [3, 2],
        "most pages in a sweep at 1k (wraps) and 10k runs"
    );
}

#[tokio::test(start_paused = true)]
async fn runs_finalized_by_another_sweep_between_pages_are_skipped_not_repeated() {
    let mut f = Fixture::new(2);
    for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
        f.h.seed(id, Some(NOW - 1_000 + i as i64), None);
    }
    let first = f.sweep_after(None).await;
    assert_eq!(considered(&first), ["a", "b"]);
    // "c" leaves the listing (another sweep finished it) and "bb" arrives right after the cursor.
    f.h.seed_with(
        "c",
        Some(NOW - 998),
        None,
        reaper_core::domain::RunStatus::Completed,
    );
    f.h.seed("bb", Some(NOW - 999), None);
    let second = f.sweep_after(Some(&first)).await;
    assert_eq!(considered(&second), ["bb", "d"]);
    assert!(second
        .runs
        .iter()
        .all(|e| e.outcome == ReapOutcome::Producing));
}
