//! The `runs` table: [`RunStore`], and the read-only listings `reaper status` needs.

use reaper_core::{
    BoundedCount, EpochBump, EpochMs, Fenced, NewRun, Patch, ReclaimableCursor, ReclaimableListing,
    ReclaimablePage, ReclaimableQuery, RunError, RunPatch, RunRecord, RunStatus, RunStore,
    RunStoreCapabilities, StoreError, TerminalWrite,
};
use reaper_sql::runs::{self as sql, COLUMNS};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};

use crate::decode::Cells;
use crate::error::{corrupt, store_err};
use crate::{fenced_outcome, immediate, to_i64, SqliteStore};

pub(crate) fn parse_status(raw: &str, run_id: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(raw).ok_or_else(|| corrupt(run_id, sql::unknown_status(raw)))
}

/// Decodes one row selected with [`COLUMNS`], column by column with typed checks (see
/// [`crate::decode`]). Anything that does not parse, an unknown status above all, is
/// [`StoreError::Corrupt`] naming the run (or `unreadable` when the run id itself is the
/// problem): never read as something else.
fn decode_run(row: &Row<'_>, unreadable: &str) -> Result<RunRecord, StoreError> {
    let run_id = Cells {
        row,
        key: unreadable,
    }
    .text(0, "run_id")?;
    let c = Cells { row, key: &run_id };
    let instant = |idx: usize, name: &str| -> Result<Option<i64>, StoreError> {
        c.opt_int(idx, name)?
            .map(|v| c.rule(sql::instant(name, v)))
            .transpose()
    };
    let status = parse_status(&c.text(2, "status")?, &run_id)?;
    let error = c
        .rule(sql::error(
            c.opt_text(5, "error_message")?,
            c.opt_text(6, "error_code")?,
        ))?
        .map(|(message, code)| RunError { message, code });
    let usage = c
        .opt_text(7, "usage")?
        .map(|raw| serde_json::from_str(&raw))
        .transpose()
        .map_err(|e| corrupt(&run_id, format!("column usage is not JSON: {e}")))?;
    Ok(RunRecord {
        thread_id: c.text(1, "thread_id")?,
        status,
        started_at: c.rule(sql::instant("started_at", c.int(3, "started_at")?))?,
        finished_at: instant(4, "finished_at")?,
        error,
        usage,
        sandbox_key: c.opt_text(8, "sandbox_key")?,
        detached_since: instant(9, "detached_since")?,
        cancel_requested: c.rule(sql::cancel_requested(c.opt_int(10, "cancel_requested")?))?,
        driver_epoch: c.rule(sql::driver_epoch(c.opt_int(11, "driver_epoch")?))?,
        run_id,
    })
}

/// Runs a statement selecting [`COLUMNS`] and decodes every row; the first malformed row fails
/// the whole query (a lookup by id names it).
fn query_runs(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<RunRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(store_err)?;
    let mut rows = stmt.query(params).map_err(store_err)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(store_err)? {
        out.push(decode_run(row, "<unreadable run_id>")?);
    }
    Ok(out)
}

/// The reclaimable listing, row by row: a malformed row is reported in `corrupt` (by run id, or
/// by rowid when the run id is what is malformed) and every other row is still listed. Only a
/// failure of the query itself (a damaged file, a busy database) fails the listing.
fn list_reclaimable_rows(conn: &Connection, cutoff: i64) -> Result<ReclaimableListing, StoreError> {
    let mut stmt = conn
        .prepare_cached(sql::LIST_RECLAIMABLE)
        .map_err(store_err)?;
    let mut rows = stmt.query([cutoff]).map_err(store_err)?;
    let mut listing = ReclaimableListing::default();
    while let Some(row) = rows.next().map_err(store_err)? {
        let rowid = match row.get_ref(COLUMN_COUNT).map_err(store_err)? {
            rusqlite::types::ValueRef::Integer(r) => Some(r),
            _ => None,
        };
        match decode_run(row, &sql::row_key(rowid)) {
            Ok(record) => listing.runs.push(record),
            Err(e @ StoreError::Corrupt { .. }) => listing.corrupt.push(e),
            Err(e) => return Err(e),
        }
    }
    Ok(listing)
}

/// One page of the reclaimable listing, pushed down: the range, keyset and LIMIT are the
/// statement's, so only the page's rows are read.
fn list_reclaimable_page_rows(
    conn: &Connection,
    q: &ReclaimableQuery,
) -> Result<ReclaimablePage, StoreError> {
    let cursor = q
        .after
        .as_ref()
        .map(|c| (c.detached_since, c.run_id.as_str()));
    let page_sql = sql::page_statement(q.detached_until, q.detached_after, cursor, q.limit);
    let mut stmt = conn.prepare_cached(page_sql.sql).map_err(store_err)?;
    let mut rows = stmt
        .query(params![
            page_sql.detached_until,
            page_sql.since,
            page_sql.run_id,
            page_sql.limit
        ])
        .map_err(store_err)?;
    let mut page = ReclaimablePage::default();
    let mut read = 0;
    while let Some(row) = rows.next().map_err(store_err)? {
        read += 1;
        // The keyset of every row, a corrupt one included, so the next page starts past it.
        let position = (row.get::<_, i64>(9), row.get::<_, String>(0));
        if let (Ok(detached_since), Ok(run_id)) = position {
            page.next = Some(ReclaimableCursor {
                detached_since,
                run_id,
            });
        }
        let rowid = match row.get_ref(COLUMN_COUNT).map_err(store_err)? {
            rusqlite::types::ValueRef::Integer(r) => Some(r),
            _ => None,
        };
        match decode_run(row, &sql::row_key(rowid)) {
            Ok(record) => page.runs.push(std::sync::Arc::new(record)),
            Err(e @ StoreError::Corrupt { .. }) => page.corrupt.push(e),
            Err(e) => return Err(e),
        }
    }
    if read < q.limit {
        page.next = None;
    }
    // The rows no page can reach are reported with the sweep's first page (the range past the
    // TTL, from its start), so every sweep reports them once, as `reaper status` does.
    if q.after.is_none() && q.detached_after.is_none() {
        page.corrupt
            .extend(unlistable_rows(conn, MAX_UNLISTABLE_REPORTED)?);
    }
    Ok(page)
}

/// Rows that look detached but that no listing reaches ([`sql::LIST_UNLISTABLE`]), each as
/// [`StoreError::Corrupt`] naming the run (or its rowid): at most `limit` of them.
pub(crate) fn unlistable_rows(
    conn: &Connection,
    limit: usize,
) -> Result<Vec<StoreError>, StoreError> {
    let mut stmt = conn
        .prepare_cached(sql::LIST_UNLISTABLE)
        .map_err(store_err)?;
    let mut rows = stmt.query([to_i64(limit as u64)]).map_err(store_err)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(store_err)? {
        let rowid: Option<i64> = row.get(1).ok();
        let key = match row.get_ref(0).map_err(store_err)? {
            rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
            _ => sql::row_key(rowid),
        };
        let status = match row.get_ref(2).map_err(store_err)? {
            rusqlite::types::ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
            rusqlite::types::ValueRef::Null => None,
            other => Some(format!("{other:?}")),
        };
        let detached: String = row
            .get::<_, Option<String>>(3)
            .ok()
            .flatten()
            .unwrap_or_default();
        let kind: String = row.get(4).unwrap_or_default();
        out.push(corrupt(
            key,
            sql::unlistable(status.as_deref(), &detached, &kind),
        ));
    }
    Ok(out)
}

/// Most unlistable rows one sweep (or `reaper status`) reports: enough to see the problem, a
/// bounded read whatever the damage.
pub const MAX_UNLISTABLE_REPORTED: usize = 100;

/// How many columns [`COLUMNS`] names: the listing's `rowid` comes right after them.
const COLUMN_COUNT: usize = 12;

fn get_run(conn: &Connection, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
    Ok(query_runs(conn, sql::SELECT_BY_ID, [run_id])?.pop())
}

fn patch_value<T>(patch: &Patch<T>, to_value: impl Fn(&T) -> Value) -> Option<Value> {
    match patch {
        Patch::Keep => None,
        Patch::Clear => Some(Value::Null),
        Patch::Set(v) => Some(to_value(v)),
    }
}

/// The `SET` assignments of a patch. `Clear` becomes NULL, so clearing really clears.
fn assignments(patch: &RunPatch) -> Result<Vec<(&'static str, Value)>, StoreError> {
    let mut set = Vec::new();
    if let Some(status) = patch.status {
        set.push(("status", Value::Text(status.as_str().into())));
    }
    let int = |v: &i64| Value::Integer(*v);
    if let Some(v) = patch_value(&patch.finished_at, int) {
        set.push(("finished_at", v));
    }
    match &patch.error {
        Patch::Keep => {}
        Patch::Clear => {
            set.push(("error_message", Value::Null));
            set.push(("error_code", Value::Null));
        }
        Patch::Set(e) => {
            set.push(("error_message", Value::Text(e.message.clone())));
            set.push((
                "error_code",
                e.code.clone().map_or(Value::Null, Value::Text),
            ));
        }
    }
    if let Patch::Set(usage) = &patch.usage {
        let json = serde_json::to_string(usage)
            .map_err(|e| StoreError::Backend(format!("usage does not serialise: {e}")))?;
        set.push(("usage", Value::Text(json)));
    } else if let Some(v) = patch_value(&patch.usage, |_| Value::Null) {
        set.push(("usage", v));
    }
    if let Some(v) = patch_value(&patch.sandbox_key, |k| Value::Text(k.clone())) {
        set.push(("sandbox_key", v));
    }
    if let Some(v) = patch_value(&patch.detached_since, int) {
        set.push(("detached_since", v));
    }
    if let Some(v) = patch_value(&patch.cancel_requested, |b| Value::Integer(i64::from(*b))) {
        set.push(("cancel_requested", v));
    }
    if let Some(v) = patch_value(&patch.driver_epoch, |e| Value::Integer(to_i64(*e))) {
        set.push(("driver_epoch", v));
    }
    Ok(set)
}

/// Counts of runs by status, for `reaper status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusCounts {
    /// Runs `running` (detached or not).
    pub running: u64,
    /// Runs paused for a human (`interrupted`).
    pub interrupted: u64,
    /// Runs `completed`.
    pub completed: u64,
    /// Runs `failed`.
    pub failed: u64,
    /// Runs `aborted`.
    pub aborted: u64,
}

impl StatusCounts {
    /// The count for `status`.
    pub fn get(&self, status: RunStatus) -> u64 {
        match status {
            RunStatus::Running => self.running,
            RunStatus::Interrupted => self.interrupted,
            RunStatus::Completed => self.completed,
            RunStatus::Failed => self.failed,
            RunStatus::Aborted => self.aborted,
        }
    }

    fn slot(&mut self, status: RunStatus) -> &mut u64 {
        match status {
            RunStatus::Running => &mut self.running,
            RunStatus::Interrupted => &mut self.interrupted,
            RunStatus::Completed => &mut self.completed,
            RunStatus::Failed => &mut self.failed,
            RunStatus::Aborted => &mut self.aborted,
        }
    }

    /// Every run, whatever its status.
    pub fn total(&self) -> u64 {
        RunStatus::ALL.iter().map(|s| self.get(*s)).sum()
    }
}

/// What `reaper status` lists: the detached runs, and the rows that look detached but do not
/// read (the same rule as the sweep's `corrupt`).
#[derive(Debug, Default)]
pub struct DetachedListing {
    /// The detached runs, longest detached first.
    pub runs: Vec<DetachedRun>,
    /// One error per row that looks detached but does not read.
    pub corrupt: Vec<StoreError>,
}

fn listing_has(corrupt: &[StoreError], e: &StoreError) -> bool {
    let key = |e: &StoreError| match e {
        StoreError::Corrupt { key, .. } => Some(key.clone()),
        _ => None,
    };
    corrupt.iter().any(|c| key(c).is_some() && key(c) == key(e))
}

/// A running run that nobody is attached to, as `reaper status` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct DetachedRun {
    /// `now - detached_since`: how long it has been detached (negative if stamped in the future).
    pub detached_for_ms: i64,
    /// The run as stored.
    pub record: RunRecord,
}

impl SqliteStore {
    /// Every run, in insertion order.
    pub async fn all_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.call(|c| {
            query_runs(
                c,
                &format!("SELECT {COLUMNS} FROM reaper_runs ORDER BY rowid"),
                [],
            )
        })
        .await
    }

    /// Every `running` run with a `detached_since`, longest detached first, row by row: a row
    /// that does not decode is in `corrupt` (by run id, or rowid), beside the rows that look
    /// detached but that no listing reaches ([`sql::LIST_UNLISTABLE`], the sweep's rule), and
    /// every other row is still listed. Only a failure of the query itself fails it.
    pub async fn list_detached(&self, now: EpochMs) -> Result<DetachedListing, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS}, rowid AS rowid FROM reaper_runs WHERE status = 'running' \
             AND detached_since IS NOT NULL ORDER BY detached_since, rowid"
        );
        self.call(move |c| {
            let mut stmt = c.prepare_cached(&sql).map_err(store_err)?;
            let mut rows = stmt.query([]).map_err(store_err)?;
            let mut listing = DetachedListing::default();
            while let Some(row) = rows.next().map_err(store_err)? {
                let rowid = match row.get_ref(COLUMN_COUNT).map_err(store_err)? {
                    rusqlite::types::ValueRef::Integer(r) => Some(r),
                    _ => None,
                };
                match decode_run(row, &sql::row_key(rowid)) {
                    Ok(record) => listing.runs.push(DetachedRun {
                        detached_for_ms: now.saturating_sub(record.detached_since.unwrap_or(now)),
                        record,
                    }),
                    Err(e @ StoreError::Corrupt { .. }) => listing.corrupt.push(e),
                    Err(e) => return Err(e),
                }
            }
            // The running rows among them were decoded above, and reported if they did not.
            let hidden: Vec<StoreError> = unlistable_rows(c, MAX_UNLISTABLE_REPORTED)?
                .into_iter()
                .filter(|e| !listing_has(&listing.corrupt, e))
                .collect();
            listing.corrupt.extend(hidden);
            Ok(listing)
        })
        .await
    }

    /// How many runs hold each status. A row with an unknown status is reported as corrupt.
    pub async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        self.call(|c| {
            let mut stmt = c
                .prepare_cached(
                    "SELECT status, COUNT(*), MIN(run_id) FROM reaper_runs GROUP BY status",
                )
                .map_err(store_err)?;
            let mut rows = stmt.query([]).map_err(store_err)?;
            let mut counts = StatusCounts::default();
            while let Some(row) = rows.next().map_err(store_err)? {
                let example: String = row.get(2).map_err(store_err)?;
                let raw: String = row.get(0).map_err(|e| corrupt(&example, e.to_string()))?;
                let n: i64 = row.get(1).map_err(store_err)?;
                *counts.slot(parse_status(&raw, &example)?) += n.max(0) as u64;
            }
            Ok(counts)
        })
        .await
    }

    /// Inserts or replaces a whole row as is: seeding for tests and demos, not a port operation.
    pub async fn put_run(&self, record: RunRecord) -> Result<(), StoreError> {
        self.call(move |c| {
            immediate(c, |tx| {
                tx.execute(
                    sql::SEED,
                    params![
                        record.run_id,
                        record.thread_id,
                        record.status.as_str(),
                        record.started_at
                    ],
                )
                .map_err(store_err)?;
                let patch = RunPatch {
                    status: Some(record.status),
                    finished_at: record.finished_at.into(),
                    error: record.error.clone().into(),
                    usage: record.usage.clone().into(),
                    sandbox_key: record.sandbox_key.clone().into(),
                    detached_since: record.detached_since.into(),
                    cancel_requested: record.cancel_requested.into(),
                    driver_epoch: record.driver_epoch.into(),
                };
                update_row(tx, &record.run_id, &patch)
            })
        })
        .await
    }
}

fn update_row(conn: &Connection, run_id: &str, patch: &RunPatch) -> Result<(), StoreError> {
    let set = assignments(patch)?;
    let Some(update) = sql::update(set.iter().map(|(name, _)| *name)) else {
        return Ok(());
    };
    let values =
        std::iter::once(Value::Text(run_id.to_string())).chain(set.into_iter().map(|s| s.1));
    conn.prepare_cached(&update)
        .and_then(|mut stmt| stmt.execute(params_from_iter(values)))
        .map_err(store_err)?;
    Ok(())
}

#[async_trait::async_trait]
impl RunStore for SqliteStore {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.call(move |c| {
            immediate(c, |tx| {
                let status = new.status.unwrap_or(RunStatus::Running);
                tx.prepare_cached(sql::INSERT_IF_ABSENT)
                    .and_then(|mut s| {
                        s.execute(params![
                            new.run_id,
                            new.thread_id,
                            status.as_str(),
                            new.started_at
                        ])
                    })
                    .map_err(store_err)?;
                get_run(tx, &new.run_id)?.ok_or_else(|| {
                    StoreError::Backend(format!(
                        "run {} vanished right after its insert",
                        new.run_id
                    ))
                })
            })
        })
        .await
    }

    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        let run_id = run_id.to_string();
        // One statement: atomic on its own, and a no-op for an unknown run.
        self.call(move |c| update_row(c, &run_id, &patch)).await
    }

    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        let run_id = run_id.to_string();
        let held = to_i64(held_epoch);
        self.call(move |c| {
            let set = assignments(&patch)?;
            let update = sql::update_fenced(set.iter().map(|(name, _)| *name));
            let values = std::iter::once(Value::Text(run_id.clone()))
                .chain(set.into_iter().map(|s| s.1))
                .chain(std::iter::once(Value::Integer(held)));
            // The fence is in the statement; the transaction keeps the follow-up read of the
            // epoch consistent with it.
            immediate(c, |tx| {
                let landed = tx
                    .prepare_cached(&update)
                    .and_then(|mut stmt| stmt.exists(params_from_iter(values)))
                    .map_err(store_err)?;
                if landed {
                    return Ok(Fenced::Written(true));
                }
                let exists = tx
                    .query_row(sql::EPOCH_BY_ID, [&run_id], |_| Ok(()))
                    .optional()
                    .map_err(store_err)?
                    .is_some();
                if !exists {
                    return Ok(Fenced::Written(false));
                }
                Ok(match fenced_outcome(tx, &run_id, Some(held_epoch), 0)? {
                    Fenced::Written(()) => Fenced::Written(true),
                    Fenced::Superseded { observed } => Fenced::Superseded { observed },
                })
            })
        })
        .await
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let run_id = run_id.to_string();
        self.call(move |c| get_run(c, &run_id)).await
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let thread_id = thread_id.to_string();
        self.call(move |c| Ok(query_runs(c, sql::FIND_ACTIVE, [thread_id])?.pop()))
            .await
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let thread_id = thread_id.to_string();
        self.call(move |c| query_runs(c, sql::LIST_BY_THREAD, [thread_id]))
            .await
    }

    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let key = sandbox_key.to_string();
        let limit = to_i64(limit as u64);
        self.call(move |c| query_runs(c, sql::LIVE_BY_SANDBOX_KEY, params![key, limit]))
            .await
    }

    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let listing = self.list_reclaimable_listing(now, ttl_ms).await?;
        // The plain listing has no place for a malformed row, so it fails on the first one.
        match listing.corrupt.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(listing.runs),
        }
    }

    async fn list_reclaimable_listing(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<ReclaimableListing, StoreError> {
        let cutoff = now.saturating_sub(to_i64(ttl_ms));
        self.call(move |c| list_reclaimable_rows(c, cutoff)).await
    }

    async fn detached_view(
        &self,
        _instances: &dyn reaper_core::SandboxInstanceStore,
        query: &reaper_core::detached::DetachedQuery,
    ) -> Result<reaper_core::detached::DetachedView, StoreError> {
        // The instance records are this store's own table: joined, not read one by one.
        let query = query.clone();
        self.call(move |c| detached_view_rows(c, &query).map(|(view, _)| view))
            .await
    }

    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        if query.limit == 0 {
            return Ok(ReclaimablePage::default());
        }
        self.call(move |c| list_reclaimable_page_rows(c, &query))
            .await
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        let after = detached_after.unwrap_or(i64::MIN);
        let bound = to_i64(at_most.saturating_add(1));
        let seen: i64 = self
            .call(move |c| {
                c.prepare_cached(sql::COUNT_RECLAIMABLE)
                    .and_then(|mut s| {
                        s.query_row(params![detached_until, after, bound], |r| r.get(0))
                    })
                    .map_err(store_err)
            })
            .await?;
        Ok(BoundedCount::of(u64::try_from(seen).unwrap_or(0), at_most))
    }

    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.record_history_rows(entries).await
    }

    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        self.run_history_rows(run_id, limit).await
    }

    async fn prune_history(&self, before: EpochMs, max_entries: usize) -> Result<u64, StoreError> {
        self.prune_history_rows(before, max_entries).await
    }

    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        self.write_sweep_history_rows(history).await
    }

    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        self.recent_sweep_rows(limit).await
    }

    fn capabilities(&self) -> RunStoreCapabilities {
        RunStoreCapabilities {
            list_reclaimable: true,
            list_by_thread: true,
        }
    }

    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        let run_id = run_id.to_string();
        self.call(move |c| {
            immediate(c, |tx| {
                if let Some(record) = query_runs(tx, sql::BUMP_EPOCH, [&run_id])?.pop() {
                    let epoch = record
                        .driver_epoch
                        .ok_or_else(|| corrupt(&run_id, "driver_epoch is NULL after a bump"))?;
                    return Ok(EpochBump::Claimed { epoch, record });
                }
                // Nothing was written; say why.
                let status: Option<String> = tx
                    .query_row(sql::STATUS_BY_ID, [&run_id], |r| r.get(0))
                    .optional()
                    .map_err(store_err)?;
                match status {
                    None => Ok(EpochBump::Unknown),
                    Some(raw) => match parse_status(&raw, &run_id)? {
                        s if s.is_terminal() => Ok(EpochBump::Terminal(s)),
                        s => Err(StoreError::Backend(format!(
                            "run {run_id} is {s} but its epoch bump matched no row"
                        ))),
                    },
                }
            })
        })
        .await
    }

    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        let run_id = run_id.to_string();
        let held = to_i64(held_epoch);
        let status = reaper_core::RunStatus::from(write.status).as_str();
        let finished_at = write.finished_at;
        // No error in the write keeps the stored one, as `TerminalWrite::to_patch` does.
        let error = write.error.clone();
        // The fence is in the statement itself: a superseded holder cannot land this whatever
        // its timing. The transaction only keeps the follow-up read consistent with it.
        let update = sql::write_terminal(error.is_some());
        self.call(move |c| {
            immediate(c, |tx| {
                let mut stmt = tx.prepare_cached(update).map_err(store_err)?;
                // It returns the run id when it landed.
                let landed = match &error {
                    Some(e) => stmt.exists(params![
                        run_id,
                        status,
                        finished_at,
                        held,
                        e.message,
                        e.code
                    ]),
                    None => stmt.exists(params![run_id, status, finished_at, held]),
                }
                .map_err(store_err)?;
                if landed {
                    return Ok(Fenced::Written(true));
                }
                let epoch: Option<Option<i64>> = tx
                    .query_row(sql::EPOCH_BY_ID, [&run_id], |r| r.get(0))
                    .optional()
                    .map_err(store_err)?;
                match epoch {
                    None => Ok(Fenced::Written(false)),
                    Some(Some(observed)) if observed > held => Ok(Fenced::Superseded {
                        observed: observed as u64,
                    }),
                    Some(observed) => Err(StoreError::Backend(format!(
                        "run {run_id}: fenced terminal write matched no row at epoch {observed:?} \
                         (held {held})"
                    ))),
                }
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(store: &SqliteStore, sql: &str) -> String {
        let conn = store.inner_conn();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map([0i64], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap();
        rows.join("; ")
    }

    #[test]
    fn list_reclaimable_is_answered_from_the_partial_index() {
        let store = SqliteStore::open_in_memory().unwrap();
        let plan = plan(&store, sql::LIST_RECLAIMABLE);
        assert!(
            plan.contains("USING INDEX reaper_runs_reclaimable"),
            "query plan does not use the partial index: {plan}"
        );
    }

    #[test]
    fn a_page_of_the_listing_seeks_the_partial_index_to_its_keyset() {
        let store = SqliteStore::open_in_memory().unwrap();
        let conn = store.inner_conn();
        // A resumed page (cursor past the floor), a first page, and a cursor below the floor.
        for (after, cursor) in [
            (Some(1), Some((2, "run"))),
            (Some(1), None),
            (Some(5), Some((2, "run"))),
        ] {
            let page = sql::page_statement(10, after, cursor, 25);
            let mut stmt = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", page.sql))
                .unwrap();
            let plan = stmt
                .query_map(
                    params![page.detached_until, page.since, page.run_id, page.limit],
                    |r| r.get::<_, String>(3),
                )
                .unwrap()
                .collect::<rusqlite::Result<Vec<_>>>()
                .unwrap()
                .join("; ");
            // The seek starts at the keyset (no scan from the range's floor) and the index
            // gives the order (no sort of a same-millisecond group).
            assert!(
                plan.contains("USING INDEX reaper_runs_reclaimable ((detached_since,run_id)>"),
                "the page does not seek the index to its keyset: {plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "the page sorts: {plan}");
        }
    }

    #[test]
    fn the_listing_reads_the_rowid_right_after_the_run_columns() {
        assert_eq!(COLUMNS.split(", ").count(), COLUMN_COUNT);
        assert!(sql::LIST_RECLAIMABLE.contains(&format!("{COLUMNS}, rowid AS rowid FROM")));
        assert!(sql::LIST_RECLAIMABLE_PAGE.contains(&format!("{COLUMNS}, rowid AS rowid FROM")));
        assert!(
            sql::LIST_RECLAIMABLE_PAGE_FROM.contains(&format!("{COLUMNS}, rowid AS rowid FROM"))
        );
    }

    #[test]
    fn a_stored_unknown_status_is_corrupt_not_terminal() {
        for raw in ["toString", "__proto__", "RUNNING", "", "complete"] {
            match parse_status(raw, "run-x") {
                Err(StoreError::Corrupt { key, reason }) => {
                    assert_eq!(key, "run-x");
                    assert!(reason.contains(&format!("{raw:?}")), "{reason}");
                }
                other => panic!("{raw:?} decoded as {other:?}"),
            }
        }
    }
}

/// What answering a detached view cost: how `reaper status` is kept bounded (see the test).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ViewCost {
    /// Statements run.
    pub statements: usize,
    /// Virtual machine steps of the rows statement (grows with the rows it walks).
    pub row_steps: i32,
    /// Steps of the rows statement through a full table scan (0 while it reads the index).
    pub row_full_scan_steps: i32,
}

/// The detached view in SQL (see [`reaper_sql::detached`]): a summary over the partial index,
/// a count of the matching rows when a filter is given, one joined page of rows, and the
/// unlistable rows through their own partial index.
pub(crate) fn detached_view_rows(
    conn: &Connection,
    q: &reaper_core::detached::DetachedQuery,
) -> Result<(reaper_core::detached::DetachedView, ViewCost), StoreError> {
    use reaper_core::detached::{DetachedRow, DetachedSummary, DetachedView};
    use reaper_core::SandboxInstanceRecord;
    use reaper_sql::detached as dsql;
    use rusqlite::StatementStatus;

    let mut cost = ViewCost::default();
    let ttl_until = q.ttl_ms.map(|t| q.now.saturating_sub(to_i64(t)));
    let (count, oldest, past_ttl): (i64, Option<i64>, i64) = conn
        .prepare_cached(dsql::SUMMARY)
        .and_then(|mut s| {
            s.query_row(params![ttl_until], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
        })
        .map_err(store_err)?;
    cost.statements += 1;
    let mut view = DetachedView {
        summary: DetachedSummary {
            detached: count.max(0) as u64,
            oldest_since: oldest,
            past_ttl: q.ttl_ms.map(|_| past_ttl.max(0) as u64),
        },
        matching: count.max(0) as u64,
        ..DetachedView::default()
    };
    let filters = params![q.detached_until(), q.provider, q.outcome];
    if q.filters() {
        let n: i64 = conn
            .prepare_cached(dsql::MATCHING)
            .and_then(|mut s| s.query_row(filters, |r| r.get(0)))
            .map_err(store_err)?;
        cost.statements += 1;
        view.matching = n.max(0) as u64;
    }
    if q.limit > 0 {
        let (sql, since, run_id) = match &q.after {
            Some(a) => (dsql::ROWS_AFTER, a.detached_since, a.run_id.clone()),
            None => (dsql::ROWS_FROM, i64::MIN, String::new()),
        };
        let mut stmt = conn.prepare_cached(sql).map_err(store_err)?;
        // The counters are the statement's own since it was prepared: read the difference.
        let steps_before = stmt.get_status(StatementStatus::VmStep);
        let scans_before = stmt.get_status(StatementStatus::FullscanStep);
        let mut rows = stmt
            .query(params![
                q.detached_until(),
                q.provider,
                q.outcome,
                since,
                run_id,
                to_i64(q.limit as u64)
            ])
            .map_err(store_err)?;
        let mut corrupt_counted = 0u64;
        while let Some(row) = rows.next().map_err(store_err)? {
            let rowid = match row.get_ref(COLUMN_COUNT).map_err(store_err)? {
                rusqlite::types::ValueRef::Integer(r) => Some(r),
                _ => None,
            };
            let record = match decode_run(row, &sql::row_key(rowid)) {
                Ok(record) => record,
                Err(e @ StoreError::Corrupt { .. }) => {
                    // Counted by the summary's index, but a run that does not read is no run.
                    corrupt_counted += 1;
                    view.corrupt.push(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let at = dsql::INSTANCE_AT;
            let key: Option<String> = row.get(at).map_err(store_err)?;
            let instance = match key {
                Some(key) => Some(
                    (|| {
                        Ok::<_, rusqlite::Error>(SandboxInstanceRecord {
                            key: key.clone(),
                            provider: row.get(at + 1)?,
                            provider_sandbox_id: row.get(at + 2)?,
                            latest_snapshot_id: row.get(at + 3)?,
                            thread_id: row.get(at + 4)?,
                            latest_run_id: row.get(at + 5)?,
                            updated_at: row.get(at + 6)?,
                        })
                    })()
                    .map_err(|e| corrupt(format!("sandbox instance {key}"), e.to_string()))?,
                ),
                None => None,
            };
            let last: Option<String> = row.get(dsql::LAST_ENTRY_AT).map_err(store_err)?;
            let last = last
                .map(|t| {
                    serde_json::from_str(&t).map_err(|e| {
                        corrupt(
                            format!("history of {}", record.run_id),
                            format!("entry is not a history entry: {e}"),
                        )
                    })
                })
                .transpose()?;
            view.rows.push(DetachedRow {
                record,
                instance,
                last,
            });
        }
        drop(rows);
        cost.statements += 1;
        cost.row_steps = stmt.get_status(StatementStatus::VmStep) - steps_before;
        cost.row_full_scan_steps = stmt.get_status(StatementStatus::FullscanStep) - scans_before;
        view.summary.detached = view.summary.detached.saturating_sub(corrupt_counted);
        view.matching = view.matching.saturating_sub(corrupt_counted);
    }
    view.corrupt
        .extend(unlistable_rows(conn, MAX_UNLISTABLE_REPORTED)?);
    cost.statements += 1;
    Ok((view, cost))
}

#[cfg(test)]
mod detached_view_cost {
    use super::*;
    use reaper_core::detached::DetachedQuery;

    const BASE: i64 = 1_000_000;

    /// `detached` runs detached one millisecond apart (every tenth sandbox docker's, the rest
    /// local; every fifth run with two history entries, the newest `failed` for every other
    /// one), and as many finished runs.
    fn seeded(detached: usize) -> SqliteStore {
        let store = SqliteStore::open_in_memory().unwrap();
        {
            let mut conn = store.inner_conn();
            let tx = conn.transaction().unwrap();
            for i in 0..detached {
                let id = format!("run-{i:07}");
                let provider = if i % 10 == 0 { "docker" } else { "local" };
                let key = format!("{provider}:{i}");
                tx.execute(
                    "INSERT INTO reaper_runs (run_id, thread_id, started_at, detached_since, sandbox_key) \
                     VALUES (?1, 't', 1, ?2, ?3)",
                    params![id, BASE + i as i64, key],
                )
                .unwrap();
                tx.execute(
                    "INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, \
                     thread_id, updated_at) VALUES (?1, ?2, 'sbx', 't', 1)",
                    params![key, provider],
                )
                .unwrap();
                if i % 5 == 0 {
                    let newest = if i % 10 == 0 { "failed" } else { "unknown" };
                    for (at, outcome) in [(1, "unknown"), (2, newest)] {
                        let entry = serde_json::json!({
                            "runId": id, "sweepId": "s", "at": at, "host": "h",
                            "outcome": outcome, "reasonCode": "x/y", "reason": "r",
                        });
                        tx.execute(
                            "INSERT INTO reaper_run_history (run_id, at, sweep_id, entry) \
                             VALUES (?1, ?2, 's', ?3)",
                            params![id, at, entry.to_string()],
                        )
                        .unwrap();
                    }
                }
            }
            for i in 0..detached {
                tx.execute(
                    "INSERT INTO reaper_runs (run_id, thread_id, status, started_at, finished_at) \
                     VALUES (?1, 't', 'completed', 1, 2)",
                    params![format!("fin-{i:07}")],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        store
    }

    fn queries() -> Vec<(&'static str, DetachedQuery)> {
        let now = BASE + 1_000_000;
        let q = DetachedQuery {
            ttl_ms: Some(500_000),
            ..DetachedQuery::new(now, 5)
        };
        vec![
            ("no filter", q.clone()),
            (
                "--provider",
                DetachedQuery {
                    provider: Some("docker".into()),
                    ..q.clone()
                },
            ),
            (
                "--outcome",
                DetachedQuery {
                    outcome: Some("failed".into()),
                    ..q.clone()
                },
            ),
            (
                "--older-than",
                DetachedQuery {
                    older_than_ms: Some(999_000),
                    ..q.clone()
                },
            ),
        ]
    }

    /// Issue 25: `reaper status` with a small limit walks the same rows whatever the backlog
    /// (the rows statement's virtual-machine steps are equal at 1,000 and 10,000 detached runs,
    /// with no full scan), runs a fixed number of statements, and still summarises every run.
    #[test]
    fn a_limited_status_list_reads_the_same_rows_whatever_the_backlog() {
        let (small, large) = (seeded(1_000), seeded(10_000));
        for (name, q) in queries() {
            let (a, cost_a) = detached_view_rows(&small.inner_conn(), &q).unwrap();
            let (b, cost_b) = detached_view_rows(&large.inner_conn(), &q).unwrap();
            assert_eq!(b.rows.len(), 5, "{name}");
            let ids = |v: &reaper_core::detached::DetachedView| -> Vec<String> {
                v.rows.iter().map(|r| r.record.run_id.clone()).collect()
            };
            assert_eq!(ids(&a), ids(&b), "{name}: the same first rows");
            assert_eq!(
                cost_a.row_steps, cost_b.row_steps,
                "{name}: {cost_a:?} {cost_b:?}"
            );
            assert_eq!(cost_b.row_full_scan_steps, 0, "{name}: {cost_b:?}");
            assert!(cost_b.statements <= 4, "{name}: {cost_b:?}");
            assert_eq!(
                b.summary.detached, 10_000,
                "{name}: the summary covers every run"
            );
            assert_eq!(b.summary.past_ttl, Some(10_000), "{name}");
            assert_eq!(b.summary.oldest_since, Some(BASE), "{name}");
        }
    }

    #[test]
    fn the_filters_count_every_match_and_the_rows_carry_the_join() {
        let store = seeded(1_000);
        let by = |name: &str| queries().into_iter().find(|(n, _)| *n == name).unwrap().1;
        let (v, _) = detached_view_rows(&store.inner_conn(), &by("--provider")).unwrap();
        assert_eq!(v.matching, 100);
        assert!(v
            .rows
            .iter()
            .all(|r| r.instance.as_ref().is_some_and(|i| i.provider == "docker")));
        let (v, _) = detached_view_rows(&store.inner_conn(), &by("--outcome")).unwrap();
        assert_eq!(v.matching, 100);
        assert!(v
            .rows
            .iter()
            .all(|r| r.last.as_ref().is_some_and(|e| e.outcome == "failed")));
        let (v, _) = detached_view_rows(&store.inner_conn(), &by("--older-than")).unwrap();
        assert_eq!(v.matching, 1_000, "now - 999s admits up to BASE + 1000 ms");
    }

    #[test]
    fn the_rows_statement_reads_the_partial_index_in_order() {
        let store = SqliteStore::open_in_memory().unwrap();
        let conn = store.inner_conn();
        let mut stmt = conn
            .prepare(&format!(
                "EXPLAIN QUERY PLAN {}",
                reaper_sql::detached::ROWS_FROM
            ))
            .unwrap();
        let plan = stmt
            .query_map(
                params![None::<i64>, None::<String>, None::<String>, 0, "", 5],
                |r| r.get::<_, String>(3),
            )
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap()
            .join("; ");
        assert!(
            plan.contains("USING INDEX reaper_runs_reclaimable"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "no sort: {plan}");
    }
}
