//! The `runs` table: [`RunStore`].

use reaper_core::{
    BoundedCount, EpochBump, EpochMs, Fenced, NewRun, Patch, ReclaimableCursor, ReclaimableListing,
    ReclaimablePage, ReclaimableQuery, RunError, RunPatch, RunRecord, RunStatus, RunStore,
    RunStoreCapabilities, StoreError, TerminalWrite,
};

use reaper_sql::runs as sql;

use crate::client::{Row, SqlValue, Statement};
use crate::row::{corrupt, safe, safe_u, RowExt};
use crate::D1Store;

pub(crate) fn parse_status(raw: &str, run_id: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(raw).ok_or_else(|| corrupt(run_id, sql::unknown_status(raw)))
}

/// Decodes one row selected with [`sql::COLUMNS`], column by column with typed checks;
/// anything that does not parse is corrupt, named by its run (`unreadable` when the run id
/// itself is what does not parse).
fn decode_run(row: &Row, unreadable: &str) -> Result<RunRecord, StoreError> {
    let run_id = row.text("run_id", unreadable)?;
    let id = run_id.as_str();
    let instant = |column: &str| -> Result<Option<i64>, StoreError> {
        row.opt_int(column, id)?
            .map(|v| sql::instant(column, v).map_err(|reason| corrupt(id, reason)))
            .transpose()
    };
    let status = parse_status(&row.text("status", id)?, id)?;
    let error = sql::error(
        row.opt_text("error_message", id)?,
        row.opt_text("error_code", id)?,
    )
    .map_err(|reason| corrupt(id, reason))?
    .map(|(message, code)| RunError { message, code });
    let usage = row
        .opt_text("usage", id)?
        .map(|raw| serde_json::from_str(&raw))
        .transpose()
        .map_err(|e| corrupt(id, format!("column usage is not JSON: {e}")))?;
    let cancel_requested = sql::cancel_requested(row.opt_int("cancel_requested", id)?)
        .map_err(|reason| corrupt(id, reason))?;
    let driver_epoch = sql::driver_epoch(row.opt_int("driver_epoch", id)?)
        .map_err(|reason| corrupt(id, reason))?;
    Ok(RunRecord {
        thread_id: row.text("thread_id", id)?,
        status,
        started_at: sql::instant("started_at", row.int("started_at", id)?)
            .map_err(|reason| corrupt(id, reason))?,
        finished_at: instant("finished_at")?,
        error,
        usage,
        sandbox_key: row.opt_text("sandbox_key", id)?,
        detached_since: instant("detached_since")?,
        cancel_requested,
        driver_epoch,
        run_id,
    })
}

/// Most unlistable rows one sweep reports: enough to see the problem, a bounded read whatever
/// the damage (the SQLite store's bound).
pub const MAX_UNLISTABLE_REPORTED: usize = 100;

/// One row [`sql::LIST_UNLISTABLE`] selected, as [`StoreError::Corrupt`] naming the run (or its
/// rowid when the run id is not text), with the reason `reaper status` gives.
fn unlistable_row(row: &Row) -> StoreError {
    let rowid = row.opt_int("rowid", "reaper_runs").ok().flatten();
    let key = match row.get("run_id") {
        Some(serde_json::Value::String(id)) => id.clone(),
        _ => sql::row_key(rowid),
    };
    let status = match row.get("status") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    };
    let text = |column: &str| match row.get(column) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    corrupt(
        key,
        sql::unlistable(
            status.as_deref(),
            &text("detached_text"),
            &text("detached_type"),
        ),
    )
}

fn decode_all(rows: &[Row]) -> Result<Vec<RunRecord>, StoreError> {
    rows.iter()
        .map(|row| decode_run(row, "<unreadable run_id>"))
        .collect()
}

fn select_run(run_id: &str) -> Statement {
    Statement::new(sql::SELECT_BY_ID, vec![run_id.into()])
}

fn patch_value<T>(patch: &Patch<T>, to_value: impl Fn(&T) -> SqlValue) -> Option<SqlValue> {
    match patch {
        Patch::Keep => None,
        Patch::Clear => Some(SqlValue::Null),
        Patch::Set(v) => Some(to_value(v)),
    }
}

/// The `SET` assignments of a patch. `Clear` becomes NULL, so clearing really clears.
fn assignments(patch: &RunPatch) -> Result<Vec<(&'static str, SqlValue)>, StoreError> {
    let mut set = Vec::new();
    if let Some(status) = patch.status {
        set.push(("status", status.as_str().into()));
    }
    let int = |v: &i64| SqlValue::Integer(*v);
    if let Some(v) = patch_value(&patch.finished_at, int) {
        set.push(("finished_at", v));
    }
    match &patch.error {
        Patch::Keep => {}
        Patch::Clear => {
            set.push(("error_message", SqlValue::Null));
            set.push(("error_code", SqlValue::Null));
        }
        Patch::Set(e) => {
            set.push(("error_message", e.message.clone().into()));
            set.push(("error_code", e.code.clone().into()));
        }
    }
    match &patch.usage {
        Patch::Keep => {}
        Patch::Clear => set.push(("usage", SqlValue::Null)),
        Patch::Set(usage) => {
            let json = serde_json::to_string(usage)
                .map_err(|e| StoreError::Backend(format!("usage does not serialise: {e}")))?;
            set.push(("usage", json.into()));
        }
    }
    if let Some(v) = patch_value(&patch.sandbox_key, |k| k.clone().into()) {
        set.push(("sandbox_key", v));
    }
    if let Some(v) = patch_value(&patch.detached_since, int) {
        set.push(("detached_since", v));
    }
    if let Some(v) = patch_value(&patch.cancel_requested, |b| i64::from(*b).into()) {
        set.push(("cancel_requested", v));
    }
    if let Some(v) = patch_value(&patch.driver_epoch, |e| safe_u(*e).into()) {
        set.push(("driver_epoch", v));
    }
    Ok(set)
}

/// One `UPDATE` for a patch, or `None` when it changes nothing.
fn update_statement(run_id: &str, patch: &RunPatch) -> Result<Option<Statement>, StoreError> {
    let set = assignments(patch)?;
    let Some(update) = sql::update(set.iter().map(|(name, _)| *name)) else {
        return Ok(None);
    };
    let mut params = vec![SqlValue::from(run_id)];
    params.extend(set.into_iter().map(|(_, v)| v));
    Ok(Some(Statement::new(update, params)))
}

impl D1Store {
    async fn reclaimable_rows(&self, now: EpochMs, ttl_ms: u64) -> Result<Vec<Row>, StoreError> {
        let cutoff = safe(now.saturating_sub(safe_u(ttl_ms)));
        self.one(Statement::new(sql::LIST_RECLAIMABLE, vec![cutoff.into()]))
            .await
    }

    /// Inserts or replaces a whole row as is, in one batch: seeding for tests and demos, not a
    /// port operation.
    pub async fn put_run(&self, record: RunRecord) -> Result<(), StoreError> {
        let insert = Statement::new(
            sql::SEED,
            vec![
                record.run_id.as_str().into(),
                record.thread_id.as_str().into(),
                record.status.as_str().into(),
                record.started_at.into(),
            ],
        );
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
        let mut statements = vec![insert];
        statements.extend(update_statement(&record.run_id, &patch)?);
        self.batch(statements).await?;
        Ok(())
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl RunStore for D1Store {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        let status = new.status.unwrap_or(RunStatus::Running);
        let insert = Statement::new(
            sql::INSERT_IF_ABSENT,
            vec![
                new.run_id.as_str().into(),
                new.thread_id.as_str().into(),
                status.as_str().into(),
                new.started_at.into(),
            ],
        );
        // The read shares the insert's transaction: it sees exactly the row that stands.
        let mut out = self.batch(vec![insert, select_run(&new.run_id)]).await?;
        let rows = out.pop().unwrap_or_default();
        decode_all(&rows)?.pop().ok_or_else(|| {
            StoreError::Backend(format!(
                "run {} vanished right after its insert",
                new.run_id
            ))
        })
    }

    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        // One statement: atomic on its own, and a no-op for an unknown run.
        if let Some(statement) = update_statement(run_id, &patch)? {
            self.one(statement).await?;
        }
        Ok(())
    }

    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        let held = safe_u(held_epoch);
        let set = assignments(&patch)?;
        let update = sql::update_fenced(set.iter().map(|(name, _)| *name));
        let mut params = vec![SqlValue::from(run_id)];
        params.extend(set.into_iter().map(|(_, v)| v));
        params.push(held.into());
        // The fence is in the statement itself; the read after it shares its transaction.
        let epoch = Statement::new(sql::EPOCH_BY_ID, vec![run_id.into()]);
        let out = self
            .batch(vec![Statement::new(update, params), epoch])
            .await?;
        if !out[0].is_empty() {
            return Ok(Fenced::Written(true));
        }
        match out[1].first() {
            None => Ok(Fenced::Written(false)),
            Some(row) => match row.opt_int("driver_epoch", run_id)? {
                Some(observed) if observed > held => Ok(Fenced::Superseded {
                    observed: observed as u64,
                }),
                observed => Err(StoreError::Backend(format!(
                    "run {run_id}: fenced update matched no row at epoch {observed:?} \
                     (held {held})"
                ))),
            },
        }
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(decode_all(&self.one(select_run(run_id)).await?)?.pop())
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let rows = self
            .one(Statement::new(sql::FIND_ACTIVE, vec![thread_id.into()]))
            .await?;
        Ok(decode_all(&rows)?.pop())
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let rows = self
            .one(Statement::new(sql::LIST_BY_THREAD, vec![thread_id.into()]))
            .await?;
        decode_all(&rows)
    }

    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .one(Statement::new(
                sql::LIVE_BY_SANDBOX_KEY,
                vec![sandbox_key.into(), limit.into()],
            ))
            .await?;
        decode_all(&rows)
    }

    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        decode_all(&self.reclaimable_rows(now, ttl_ms).await?)
    }

    async fn list_reclaimable_listing(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<ReclaimableListing, StoreError> {
        // Row by row: one malformed row is reported, not a reason to sweep nothing.
        let mut listing = ReclaimableListing {
            runs: Vec::new(),
            corrupt: Vec::new(),
        };
        for row in self.reclaimable_rows(now, ttl_ms).await? {
            let rowid = row.opt_int("rowid", "reaper_runs").ok().flatten();
            match decode_run(&row, &sql::row_key(rowid)) {
                Ok(record) => listing.runs.push(record),
                Err(e @ StoreError::Corrupt { .. }) => listing.corrupt.push(e),
                Err(e) => return Err(e),
            }
        }
        Ok(listing)
    }

    /// One page, pushed down: the range, keyset and LIMIT are the statement's, so a page stays
    /// far inside D1's result-size and time limits whatever the backlog.
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        if query.limit == 0 {
            return Ok(ReclaimablePage::default());
        }
        let cursor = query
            .after
            .as_ref()
            .map(|c| (c.detached_since, c.run_id.as_str()));
        let page_sql = sql::page_statement(
            query.detached_until,
            query.detached_after,
            cursor,
            query.limit,
        );
        let page_statement = Statement::new(
            page_sql.sql,
            vec![
                safe(page_sql.detached_until).into(),
                safe(page_sql.since).into(),
                page_sql.run_id.into(),
                safe(page_sql.limit).into(),
            ],
        );
        // The rows no page can reach are reported with the sweep's first page (the range past
        // the TTL, from its start), so every sweep reports them once, as `reaper status` and
        // the SQLite store do. In the page's batch: no extra round trip, and the partial index
        // `reaper_runs_unlistable` keeps it to the unlistable rows themselves (none when healthy).
        let first = query.after.is_none() && query.detached_after.is_none();
        let mut statements = vec![page_statement];
        if first {
            statements.push(Statement::new(
                sql::LIST_UNLISTABLE,
                vec![safe_u(MAX_UNLISTABLE_REPORTED as u64).into()],
            ));
        }
        let mut out = self.batch(statements).await?;
        let unlistable = if first { out.pop() } else { None };
        let rows = out.pop().unwrap_or_default();
        let mut page = ReclaimablePage::default();
        for row in &rows {
            // The keyset of every row, a corrupt one included, so the next page starts past it.
            let position = (
                row.opt_int("detached_since", "reaper_runs"),
                row.text("run_id", "reaper_runs"),
            );
            if let (Ok(Some(detached_since)), Ok(run_id)) = position {
                page.next = Some(ReclaimableCursor {
                    detached_since,
                    run_id,
                });
            }
            let rowid = row.opt_int("rowid", "reaper_runs").ok().flatten();
            match decode_run(row, &sql::row_key(rowid)) {
                Ok(record) => page.runs.push(std::sync::Arc::new(record)),
                Err(e @ StoreError::Corrupt { .. }) => page.corrupt.push(e),
                Err(e) => return Err(e),
            }
        }
        if rows.len() < query.limit {
            page.next = None;
        }
        page.corrupt
            .extend(unlistable.iter().flatten().map(unlistable_row));
        Ok(page)
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        let after = detached_after.unwrap_or(i64::MIN);
        // D1 bills rows read: the inner LIMIT keeps it at the bound plus one.
        let bound = safe_u(at_most.saturating_add(1));
        let rows = self
            .one(Statement::new(
                sql::COUNT_RECLAIMABLE,
                vec![
                    safe(detached_until).into(),
                    safe(after).into(),
                    bound.into(),
                ],
            ))
            .await?;
        let seen = rows
            .first()
            .map(|row| row.int("n", "runs count"))
            .transpose()?
            .unwrap_or(0);
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

    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        self.recent_sweep_rows(limit).await
    }

    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        self.write_sweep_history_rows(history).await
    }

    fn capabilities(&self) -> RunStoreCapabilities {
        RunStoreCapabilities {
            list_reclaimable: true,
            list_by_thread: true,
        }
    }

    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        let bump = Statement::new(sql::BUMP_EPOCH, vec![run_id.into()]);
        // Read in the same transaction: when the bump matched nothing, this says why.
        let status = Statement::new(sql::STATUS_BY_ID, vec![run_id.into()]);
        let out = self.batch(vec![bump, status]).await?;
        if let Some(record) = decode_all(&out[0])?.pop() {
            let epoch = record
                .driver_epoch
                .ok_or_else(|| corrupt(run_id, "driver_epoch is NULL after a bump"))?;
            return Ok(EpochBump::Claimed { epoch, record });
        }
        match out[1].first() {
            None => Ok(EpochBump::Unknown),
            Some(row) => match parse_status(&row.text("status", run_id)?, run_id)? {
                s if s.is_terminal() => Ok(EpochBump::Terminal(s)),
                s => Err(StoreError::Backend(format!(
                    "run {run_id} is {s} but its epoch bump matched no row"
                ))),
            },
        }
    }

    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        let held = safe_u(held_epoch);
        let mut params = vec![
            SqlValue::from(run_id),
            RunStatus::from(write.status).as_str().into(),
            write.finished_at.into(),
            held.into(),
        ];
        // No error in the write keeps the stored one, as `TerminalWrite::to_patch` does.
        if let Some(e) = &write.error {
            params.push(e.message.clone().into());
            params.push(e.code.clone().into());
        }
        // The fence is in the statement itself: a superseded holder cannot land this whatever
        // its timing. The read after it shares its transaction.
        let update = Statement::new(sql::write_terminal(write.error.is_some()), params);
        let epoch = Statement::new(sql::EPOCH_BY_ID, vec![run_id.into()]);
        let out = self.batch(vec![update, epoch]).await?;
        if !out[0].is_empty() {
            return Ok(Fenced::Written(true));
        }
        match out[1].first() {
            None => Ok(Fenced::Written(false)),
            Some(row) => match row.opt_int("driver_epoch", run_id)? {
                Some(observed) if observed > held => Ok(Fenced::Superseded {
                    observed: observed as u64,
                }),
                observed => Err(StoreError::Backend(format!(
                    "run {run_id}: fenced terminal write matched no row at epoch {observed:?} \
                     (held {held})"
                ))),
            },
        }
    }
}
