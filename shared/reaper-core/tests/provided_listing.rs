//! `RunStore::list_reclaimable` (the spec's whole listing) is provided on top of the required
//! paged listing: it walks every page of the range, and stops on a store whose cursor does not
//! move instead of paging for ever.

use std::sync::atomic::{AtomicUsize, Ordering};

use reaper_core::domain::{EpochMs, NewRun, RunPatch, RunRecord, TerminalWrite};
use reaper_core::error::StoreError;
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    BoundedCount, EpochBump, Fenced, ReclaimablePage, ReclaimableQuery, RunStore,
};
use reaper_core::Patch;

const NOW: EpochMs = 1_000_000;

/// Forwards only what the provided listing needs, with pages of at most two runs; `stuck`
/// answers every page with the same cursor.
#[derive(Default)]
struct Paged {
    inner: MemoryStore,
    stuck: bool,
    pages: AtomicUsize,
}

#[async_trait::async_trait]
impl RunStore for Paged {
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
    async fn list_reclaimable_page(
        &self,
        mut query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.pages.fetch_add(1, Ordering::SeqCst);
        query.limit = query.limit.min(2);
        let mut page = self.inner.list_reclaimable_page(query.clone()).await?;
        if self.stuck {
            page.next = query.after.or(page.next);
        }
        Ok(page)
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
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

/// Five runs detached at `NOW - 100 + i`, and one detached after the cutoff used below.
async fn seeded(stuck: bool) -> Paged {
    let store = Paged {
        stuck,
        ..Paged::default()
    };
    for i in 0..6 {
        let run_id = format!("run-{i}");
        store
            .create_or_resume(NewRun {
                run_id: run_id.clone(),
                thread_id: "t".into(),
                started_at: 1,
                status: None,
            })
            .await
            .unwrap();
        let detached = if i < 5 { NOW - 100 + i } else { NOW };
        let patch = RunPatch {
            detached_since: Patch::Set(detached),
            ..Default::default()
        };
        store.update(&run_id, patch).await.unwrap();
    }
    store
}

fn ids(mut runs: Vec<RunRecord>) -> Vec<String> {
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    runs.into_iter().map(|r| r.run_id).collect()
}

#[tokio::test]
async fn the_whole_listing_walks_every_page_of_the_range() {
    let store = seeded(false).await;
    let listed = store.list_reclaimable(NOW, 10).await.unwrap();
    assert_eq!(
        ids(listed),
        ["run-0", "run-1", "run-2", "run-3", "run-4"],
        "every run detached at or before the cutoff, across pages of two"
    );
    assert_eq!(store.pages.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_page_cursor_that_does_not_move_ends_the_whole_listing() {
    let store = seeded(true).await;
    let listed = store.list_reclaimable(NOW, 10).await.unwrap();
    assert_eq!(ids(listed), ["run-0", "run-1", "run-2", "run-3"]);
    assert_eq!(store.pages.load(Ordering::SeqCst), 2);
}
