//! What `reaper status` lists: a summary of every detached run, and a filtered, limited page of
//! them with each run's sandbox instance and newest history entry. One read, so a store that can
//! join its tables answers in a few requests whatever the backlog; the provided implementation
//! ([`detached_view_by_listing`]) builds the same answer from the other store methods.

use crate::history::HistoryEntry;
use crate::ports::{ReclaimableCursor, ReclaimableQuery, RunStore, SandboxInstanceStore};
use crate::{EpochMs, RunRecord, RunStatus, SandboxInstanceRecord, StoreError};

/// The filters and the page of a detached view. Every filter is optional; all given ones hold
/// for a listed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedQuery {
    /// The time ages are measured at.
    pub now: EpochMs,
    /// Counts the runs detached for at least this long in [`DetachedSummary::past_ttl`].
    pub ttl_ms: Option<u64>,
    /// Only runs detached for at least this long (`now - detachedSince >= older_than_ms`).
    pub older_than_ms: Option<u64>,
    /// Only runs whose sandbox instance record names this provider (a run without one is out).
    pub provider: Option<String>,
    /// Only runs whose newest history entry has this outcome (a run without one is out).
    pub outcome: Option<String>,
    /// Runs listed at most.
    pub limit: usize,
    /// List strictly after this position in `(detachedSince, runId)` order.
    pub after: Option<ReclaimableCursor>,
}

impl DetachedQuery {
    /// A query for the first `limit` detached runs at `now`, without filters.
    pub fn new(now: EpochMs, limit: usize) -> Self {
        DetachedQuery {
            now,
            ttl_ms: None,
            older_than_ms: None,
            provider: None,
            outcome: None,
            limit,
            after: None,
        }
    }

    /// The latest `detachedSince` the age filter admits (`None`: no age filter).
    pub fn detached_until(&self) -> Option<EpochMs> {
        self.older_than_ms
            .map(|min| self.now.saturating_sub(ms(min)))
    }

    /// Whether the query filters on anything a run's record alone cannot answer.
    pub fn filters(&self) -> bool {
        self.older_than_ms.is_some() || self.provider.is_some() || self.outcome.is_some()
    }

    /// Whether a run with this record, instance and newest entry passes every filter (the
    /// contract, in one place; the cursor is not a filter).
    pub fn admits(
        &self,
        record: &RunRecord,
        instance: Option<&SandboxInstanceRecord>,
        last: Option<&HistoryEntry>,
    ) -> bool {
        let Some(since) = record.detached_since else {
            return false;
        };
        record.status == RunStatus::Running
            && self.detached_until().is_none_or(|until| since <= until)
            && self
                .provider
                .as_ref()
                .is_none_or(|p| instance.is_some_and(|i| &i.provider == p))
            && self
                .outcome
                .as_ref()
                .is_none_or(|o| last.is_some_and(|e| &e.outcome == o))
    }
}

fn ms(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// Every detached run in a few numbers, whatever the filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DetachedSummary {
    /// How many `running` runs have a `detachedSince` (the rows that do not read excluded).
    pub detached: u64,
    /// The earliest `detachedSince` among them.
    pub oldest_since: Option<EpochMs>,
    /// How many are detached for at least the query's TTL (`None` without a TTL).
    pub past_ttl: Option<u64>,
}

/// One listed run with what `status` shows beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct DetachedRow {
    /// The run as stored.
    pub record: RunRecord,
    /// Its sandbox's instance record, when it names one that exists.
    pub instance: Option<SandboxInstanceRecord>,
    /// Its newest history entry (`None` when it has none or the store keeps no history).
    pub last: Option<HistoryEntry>,
}

/// The answer to a [`DetachedQuery`].
#[derive(Debug, Clone, Default)]
pub struct DetachedView {
    /// Every detached run, filters ignored.
    pub summary: DetachedSummary,
    /// How many runs pass the filters (the cursor and the limit ignored).
    pub matching: u64,
    /// Up to `limit` runs that pass the filters, after the cursor, in `(detachedSince, runId)`
    /// order.
    pub rows: Vec<DetachedRow>,
    /// One error per row that looks detached but does not read, among the rows the store read,
    /// plus those no listing reaches (the sweep's rule). Never counted in the summary.
    pub corrupt: Vec<StoreError>,
}

/// The newest history entry of a run; `None` when it has none or the store keeps no history.
pub async fn last_entry<S: RunStore + ?Sized>(
    runs: &S,
    run_id: &str,
) -> Result<Option<HistoryEntry>, StoreError> {
    match runs.run_history(run_id, 1).await {
        Ok(entries) => Ok(entries.into_iter().next()),
        Err(StoreError::Unsupported(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Rows per listing request the provided view reads.
const VIEW_PAGE_ROWS: usize = 500;

/// The provided [`RunStore::detached_view`]: walks the whole reclaimable listing (every detached
/// run, for the summary), reading an instance record or a history entry for a run only when a
/// filter needs it or the run is listed. Correct on every store; its cost grows with the
/// backlog, which is why stores that can join override it.
pub async fn detached_view_by_listing<R, I>(
    runs: &R,
    instances: &I,
    query: &DetachedQuery,
) -> Result<DetachedView, StoreError>
where
    R: RunStore + ?Sized,
    I: SandboxInstanceStore + ?Sized,
{
    let mut view = DetachedView::default();
    let mut past_ttl = 0u64;
    let until_ttl = query.ttl_ms.map(|t| query.now.saturating_sub(ms(t)));
    let mut listing = ReclaimableQuery {
        detached_after: None,
        detached_until: EpochMs::MAX,
        after: None,
        limit: VIEW_PAGE_ROWS,
    };
    loop {
        let page = runs.list_reclaimable_page(listing.clone()).await?;
        view.corrupt.extend(page.corrupt);
        for record in &page.runs {
            let Some(since) = record.detached_since else {
                continue;
            };
            view.summary.detached += 1;
            view.summary.oldest_since =
                Some(view.summary.oldest_since.map_or(since, |o| o.min(since)));
            if until_ttl.is_some_and(|u| since <= u) {
                past_ttl += 1;
            }
            if query.detached_until().is_some_and(|u| since > u) {
                continue;
            }
            let after = query.after.as_ref().is_none_or(|a| {
                (since, record.run_id.as_str()) > (a.detached_since, a.run_id.as_str())
            });
            // A store may order runs detached in the same millisecond its own way: every run
            // of the last listed millisecond is kept, then sorted by id and cut to the limit.
            let shown = after
                && query.limit > 0
                && (view.rows.len() < query.limit
                    || view
                        .rows
                        .last()
                        .is_some_and(|r| r.record.detached_since == Some(since)));
            let instance = match record.sandbox_key.as_deref() {
                Some(key) if shown || query.provider.is_some() => instances.get(key).await?,
                _ => None,
            };
            let last = if shown || query.outcome.is_some() {
                last_entry(runs, &record.run_id).await?
            } else {
                None
            };
            if !query.admits(record, instance.as_ref(), last.as_ref()) {
                continue;
            }
            view.matching += 1;
            if shown {
                view.rows.push(DetachedRow {
                    record: (**record).clone(),
                    instance,
                    last,
                });
            }
        }
        match page.next {
            // A cursor that does not move would page for ever: a broken store ends here.
            Some(next) if listing.after.as_ref() != Some(&next) => listing.after = Some(next),
            _ => break,
        }
    }
    view.rows.sort_by(|a, b| {
        (a.record.detached_since, &a.record.run_id)
            .cmp(&(b.record.detached_since, &b.record.run_id))
    });
    view.rows.truncate(query.limit);
    view.summary.past_ttl = query.ttl_ms.map(|_| past_ttl);
    Ok(view)
}
