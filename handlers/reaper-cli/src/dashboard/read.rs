//! The dashboard's reads: each one bounded, whatever the store holds.

use std::sync::Arc;

use reaper_core::{
    EpochMs, LedgerCounts, ReclaimIntent, ReclaimableCursor, ReclaimableQuery, RunRecord,
    SandboxInstanceRecord, StoreError,
};

use crate::wiring::Ports;

/// One page of detached runs, oldest first.
#[derive(Debug)]
pub struct DetachedPage {
    pub rows: Vec<DetachedRow>,
    /// Where the next page starts, when there is one.
    pub next: Option<ReclaimableCursor>,
    /// Rows the store could not decode, by what it said about them.
    pub corrupt: Vec<String>,
    /// Where this page started (`None`: the first page).
    pub after: Option<ReclaimableCursor>,
}

#[derive(Debug)]
pub struct DetachedRow {
    pub record: Arc<RunRecord>,
    pub sandbox: Option<SandboxInstanceRecord>,
}

/// `<detachedSince>.<runId>`: the run id may hold dots; the number never does.
pub fn parse_cursor(s: &str) -> Option<ReclaimableCursor> {
    let (since, run_id) = s.split_once('.')?;
    Some(ReclaimableCursor {
        detached_since: since.parse().ok()?,
        run_id: run_id.to_string(),
    })
}

pub fn format_cursor(c: &ReclaimableCursor) -> String {
    format!("{}.{}", c.detached_since, c.run_id)
}

/// `rows` detached runs after `after`: one listing request for `rows + 1` of them (the extra
/// one only says whether a next page exists) and one instance record per run shown.
pub async fn detached_page(
    ports: &Ports,
    now: EpochMs,
    after: Option<ReclaimableCursor>,
    rows: usize,
) -> Result<DetachedPage, StoreError> {
    let page = ports
        .runs
        .list_reclaimable_page(ReclaimableQuery {
            // A floor below every instant: the same runs as no floor, but a store then skips the
            // whole-table search for unlistable rows it attaches to a sweep's first page (200 ms
            // at 100k runs on SQLite); the overview's health verdict still reports those.
            detached_after: Some(EpochMs::MIN),
            detached_until: now,
            after: after.clone(),
            limit: rows + 1,
        })
        .await?;
    let more = page.runs.len() > rows;
    let mut shown = Vec::with_capacity(rows.min(page.runs.len()));
    for record in page.runs.into_iter().take(rows) {
        let sandbox = match record.sandbox_key.as_deref() {
            Some(key) => ports.instances.get(key).await?,
            None => None,
        };
        shown.push(DetachedRow { record, sandbox });
    }
    let next = if more {
        shown.last().and_then(|r| ReclaimableCursor::of(&r.record))
    } else {
        None
    };
    Ok(DetachedPage {
        rows: shown,
        next,
        corrupt: page.corrupt.iter().map(|e| e.to_string()).collect(),
        after,
    })
}

/// The ledger's counts and its first `rows` entries, earliest due first.
#[derive(Debug)]
pub struct LedgerPage {
    pub counts: LedgerCounts,
    pub entries: Vec<ReclaimIntent>,
    /// More entries exist than are shown.
    pub more: bool,
}

pub async fn ledger_page(ports: &Ports, rows: usize) -> Result<LedgerPage, StoreError> {
    let counts = ports.ledger.ledger_counts().await?;
    // Every entry is due by the end of time: this lists the ledger in due order, bounded.
    let mut entries = ports.ledger.due_intents(EpochMs::MAX, rows + 1).await?;
    let more = entries.len() > rows;
    entries.truncate(rows);
    Ok(LedgerPage {
        counts,
        entries,
        more,
    })
}

/// One run: its record, its sandbox's instance record, its ledger entry.
#[derive(Debug)]
pub struct RunPage {
    pub record: RunRecord,
    pub sandbox: Option<SandboxInstanceRecord>,
    pub intent: Option<ReclaimIntent>,
    /// The newest [`RUN_HISTORY_ROWS`] entries of what sweeps did to the run, or why the store
    /// could not say (a store without history answers Unsupported).
    pub history: Result<Vec<reaper_core::history::HistoryEntry>, String>,
}

/// History entries a run page shows (newest first): a bounded read, like every page's.
pub const RUN_HISTORY_ROWS: usize = 20;

pub async fn run_page(ports: &Ports, run_id: &str) -> Result<Option<RunPage>, StoreError> {
    let Some(record) = ports.runs.get(run_id).await? else {
        return Ok(None);
    };
    let sandbox = match record.sandbox_key.as_deref() {
        Some(key) => ports.instances.get(key).await?,
        None => None,
    };
    let intent = ports.ledger.get_intent(run_id).await?;
    // A history that cannot be read still leaves the record and the ledger worth showing.
    let history = ports
        .runs
        .run_history(run_id, RUN_HISTORY_ROWS)
        .await
        .map_err(|e| match e {
            StoreError::Unsupported(_) => "this store keeps no per-run history".to_string(),
            other => format!("the history could not be read: {other}"),
        });
    Ok(Some(RunPage {
        record,
        sandbox,
        intent,
        history,
    }))
}

/// Sweeps of every host the sweeps page lists, newest first (one bounded read).
pub const STORE_SWEEP_ROWS: usize = 50;
/// Sweeps the overview lists.
pub const OVERVIEW_SWEEP_ROWS: usize = 5;

/// The store's newest `rows` sweep records, or why it cannot say (a store that keeps none
/// answers Unsupported): a page shows the rest either way.
pub async fn store_sweeps(
    ports: &Ports,
    rows: usize,
) -> Result<Vec<reaper_core::sweeps::SweepRecord>, String> {
    ports.runs.recent_sweeps(rows).await.map_err(|e| match e {
        StoreError::Unsupported(_) => "this store keeps no sweep records".to_string(),
        other => format!("the sweep records could not be read: {other}"),
    })
}
