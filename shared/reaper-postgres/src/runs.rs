//! The `runs` table: [`RunStore`], the fenced patch, and the read-only figures `reaper status`
//! needs.

use std::sync::Arc;

use reaper_core::{
    BoundedCount, EpochBump, EpochMs, Fenced, NewRun, Patch, ReclaimableCursor, ReclaimablePage,
    ReclaimableQuery, RunError, RunPatch, RunRecord, RunStatus, RunStore, RunStoreCapabilities,
    StoreError, TerminalWrite,
};
use reaper_sql::runs as rules;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::error::corrupt;
use crate::{to_i64, Conn, PostgresStore};

/// The run columns in the order every run query selects them (`concat!` needs a literal).
macro_rules! run_columns {
    () => {
        "run_id, thread_id, status, started_at, finished_at, error_message, error_code, \
         usage::text AS usage, sandbox_key, detached_since, cancel_requested, driver_epoch"
    };
}

const SELECT_BY_ID: &str = concat!("SELECT ", run_columns!(), " FROM @.runs WHERE run_id = $1");

/// A page strictly after the keyset `($2, $3)`: the keyset is the page's only lower bound, so
/// the partial index `runs_reclaimable (detached_since, run_id)` is entered at the cursor and
/// the LIMIT stops the scan at the page (see `reaper_sql::runs::page_statement`).
pub const LIST_PAGE_AFTER: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM @.runs WHERE status = 'running' AND detached_since IS NOT NULL \
     AND detached_since <= $1 AND (detached_since, run_id) > ($2, $3) \
     ORDER BY detached_since, run_id LIMIT $4"
);

/// [`LIST_PAGE_AFTER`] from the keyset `($2, $3)` inclusive: the first page of a range.
pub const LIST_PAGE_FROM: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM @.runs WHERE status = 'running' AND detached_since IS NOT NULL \
     AND detached_since <= $1 AND (detached_since, run_id) >= ($2, $3) \
     ORDER BY detached_since, run_id LIMIT $4"
);

/// Counted inside the partial index; the inner LIMIT bounds the cost whatever the backlog.
const COUNT_RECLAIMABLE: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM @.runs \
     WHERE status = 'running' AND detached_since IS NOT NULL \
     AND detached_since <= $1 AND detached_since > $2 LIMIT $3) AS bounded";

const FIND_ACTIVE: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM @.runs WHERE thread_id = $1 AND status = 'running' \
     ORDER BY started_at DESC, inserted_seq DESC LIMIT 1"
);

const LIST_BY_THREAD: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM @.runs WHERE thread_id = $1 ORDER BY started_at, inserted_seq"
);

const INSERT_IF_ABSENT: &str = "INSERT INTO @.runs (run_id, thread_id, status, started_at) \
                                VALUES ($1, $2, $3, $4) ON CONFLICT (run_id) DO NOTHING";

const SEED: &str = "INSERT INTO @.runs (run_id, thread_id, status, started_at) \
                    VALUES ($1, $2, $3, $4) ON CONFLICT (run_id) DO UPDATE SET \
                    thread_id = excluded.thread_id, started_at = excluded.started_at";

const BUMP_EPOCH: &str = concat!(
    "UPDATE @.runs SET driver_epoch = COALESCE(driver_epoch, 0) + 1 \
     WHERE run_id = $1 AND status IN ('running', 'interrupted') RETURNING ",
    run_columns!()
);

const STATUS_BY_ID: &str = "SELECT status FROM @.runs WHERE run_id = $1";
const EPOCH_BY_ID: &str = "SELECT driver_epoch FROM @.runs WHERE run_id = $1";

/// The fence every epoch-conditional run write carries, in its own `WHERE`: under PostgreSQL's
/// row locking the condition is re-checked on the row version the write lands on, so a claim
/// that commits first always wins.
const FENCE: &str = "(driver_epoch IS NULL OR driver_epoch <= $2)";

pub(crate) fn parse_status(raw: &str, run_id: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(raw).ok_or_else(|| corrupt(run_id, rules::unknown_status(raw)))
}

fn cell<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
    name: &str,
    key: &str,
) -> Result<T, StoreError> {
    row.try_get(idx)
        .map_err(|e| corrupt(key, format!("column {name}: {e}")))
}

/// Decodes one row selected with the run columns. Anything that does not parse, an unknown
/// status above all, is [`StoreError::Corrupt`] naming the run: never read as something else.
pub(crate) fn decode_run(row: &Row) -> Result<RunRecord, StoreError> {
    let run_id: String = cell(row, 0, "run_id", "runs row with an unreadable run_id")?;
    let key = run_id.as_str();
    fn rule<T>(key: &str, r: Result<T, String>) -> Result<T, StoreError> {
        r.map_err(|reason| corrupt(key, reason))
    }
    let instant = |idx: usize, name: &str| -> Result<Option<i64>, StoreError> {
        cell::<Option<i64>>(row, idx, name, key)?
            .map(|v| rule(key, rules::instant(name, v)))
            .transpose()
    };
    let status = parse_status(&cell::<String>(row, 2, "status", key)?, key)?;
    let error = rule(
        key,
        rules::error(
            cell(row, 5, "error_message", key)?,
            cell(row, 6, "error_code", key)?,
        ),
    )?
    .map(|(message, code)| RunError { message, code });
    let usage = cell::<Option<String>>(row, 7, "usage", key)?
        .map(|raw| serde_json::from_str(&raw))
        .transpose()
        .map_err(|e| corrupt(key, format!("column usage is not JSON: {e}")))?;
    let started_at = rule(
        key,
        rules::instant("started_at", cell(row, 3, "started_at", key)?),
    )?;
    let cancel_requested: Option<bool> = cell(row, 10, "cancel_requested", key)?;
    let driver_epoch = rule(
        key,
        rules::driver_epoch(cell(row, 11, "driver_epoch", key)?),
    )?;
    Ok(RunRecord {
        thread_id: cell(row, 1, "thread_id", key)?,
        status,
        started_at,
        finished_at: instant(4, "finished_at")?,
        error,
        usage,
        sandbox_key: cell(row, 8, "sandbox_key", key)?,
        detached_since: instant(9, "detached_since")?,
        cancel_requested,
        driver_epoch,
        run_id,
    })
}

fn decode_all(rows: Vec<Row>) -> Result<Vec<RunRecord>, StoreError> {
    rows.iter().map(decode_run).collect()
}

type Param = Box<dyn ToSql + Sync + Send>;

/// The `SET` assignments of a patch, numbered from `$first`. `Clear` writes NULL.
fn assignments(patch: &RunPatch, first: usize) -> Result<(Vec<String>, Vec<Param>), StoreError> {
    let mut cols: Vec<(&str, &str, Param)> = Vec::new();
    fn value<T: Clone, V: ToSql + Sync + Send + 'static>(
        patch: &Patch<T>,
        f: impl Fn(&T) -> V,
    ) -> Option<Param> {
        match patch {
            Patch::Keep => None,
            Patch::Clear => Some(Box::new(None::<V>)),
            Patch::Set(v) => Some(Box::new(Some(f(v)))),
        }
    }
    if let Some(status) = patch.status {
        cols.push(("status", "", Box::new(status.as_str().to_string())));
    }
    if let Some(v) = value(&patch.finished_at, |v| *v) {
        cols.push(("finished_at", "", v));
    }
    match &patch.error {
        Patch::Keep => {}
        Patch::Clear => {
            cols.push(("error_message", "", Box::new(None::<String>)));
            cols.push(("error_code", "", Box::new(None::<String>)));
        }
        Patch::Set(e) => {
            cols.push(("error_message", "", Box::new(e.message.clone())));
            cols.push(("error_code", "", Box::new(e.code.clone())));
        }
    }
    match &patch.usage {
        Patch::Keep => {}
        Patch::Clear => cols.push(("usage", "::text::jsonb", Box::new(None::<String>))),
        Patch::Set(usage) => {
            let json = serde_json::to_string(usage)
                .map_err(|e| StoreError::Backend(format!("usage does not serialise: {e}")))?;
            cols.push(("usage", "::text::jsonb", Box::new(Some(json))));
        }
    }
    if let Some(v) = value(&patch.sandbox_key, |k: &String| k.clone()) {
        cols.push(("sandbox_key", "", v));
    }
    if let Some(v) = value(&patch.detached_since, |v| *v) {
        cols.push(("detached_since", "", v));
    }
    if let Some(v) = value(&patch.cancel_requested, |b| *b) {
        cols.push(("cancel_requested", "", v));
    }
    if let Some(v) = value(&patch.driver_epoch, |e| to_i64(*e)) {
        cols.push(("driver_epoch", "", v));
    }
    let mut set = Vec::new();
    let mut params = Vec::new();
    for (i, (name, cast, p)) in cols.into_iter().enumerate() {
        set.push(format!("{name} = ${}{cast}", i + first));
        params.push(p);
    }
    Ok((set, params))
}

impl PostgresStore {
    async fn runs(
        &self,
        text: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<RunRecord>, StoreError> {
        let client = self.client().await?;
        decode_all(self.query(Conn::Pooled(&client), text, params).await?)
    }

    /// Runs a fenced `… RETURNING run_id` statement; when it matched nothing, says whether the
    /// run is missing or superseded.
    async fn fenced_write(
        &self,
        run_id: &str,
        held: i64,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        writes: bool,
    ) -> Result<Fenced<bool>, StoreError> {
        let client = self.client().await?;
        let landed = !self
            .query(Conn::Pooled(&client), sql, params)
            .await?
            .is_empty();
        if landed {
            self.committed(writes);
            return Ok(Fenced::Written(true));
        }
        let epoch = self
            .query_opt(Conn::Pooled(&client), EPOCH_BY_ID, &[&run_id])
            .await?;
        match epoch.map(|r| r.get::<_, Option<i64>>(0)) {
            None => Ok(Fenced::Written(false)),
            Some(Some(observed)) if observed > held => Ok(Fenced::Superseded {
                observed: observed as u64,
            }),
            Some(observed) => Err(StoreError::Backend(format!(
                "run {run_id}: a fenced write matched no row at epoch {observed:?} (held {held})"
            ))),
        }
    }

    /// Inserts or replaces a whole row as is: seeding for tests and demos, not a port operation.
    pub async fn put_run(&self, record: RunRecord) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = self.begin(&mut client).await?;
        self.execute(
            Conn::Tx(&tx),
            SEED,
            &[
                &record.run_id,
                &record.thread_id,
                &record.status.as_str(),
                &record.started_at,
            ],
        )
        .await?;
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
        let (set, params) = assignments(&patch, 2)?;
        let sql = format!("UPDATE @.runs SET {} WHERE run_id = $1", set.join(", "));
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&record.run_id];
        all.extend(params.iter().map(|p| &**p as &(dyn ToSql + Sync)));
        self.execute(Conn::Tx(&tx), &sql, &all).await?;
        self.commit(tx, true).await
    }

    /// Every run, in insertion order.
    pub async fn all_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.runs(
            concat!(
                "SELECT ",
                run_columns!(),
                " FROM @.runs ORDER BY inserted_seq"
            ),
            &[],
        )
        .await
    }

    /// Every `running` run with a `detached_since`, longest detached first (`reaper status`).
    pub async fn list_detached(&self, now: EpochMs) -> Result<Vec<DetachedRun>, StoreError> {
        let rows = self
            .runs(
                concat!(
                    "SELECT ",
                    run_columns!(),
                    " FROM @.runs WHERE status = 'running' AND detached_since IS NOT NULL \
                     ORDER BY detached_since, run_id"
                ),
                &[],
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|record| DetachedRun {
                detached_for_ms: now.saturating_sub(record.detached_since.unwrap_or(now)),
                record,
            })
            .collect())
    }

    /// How many runs hold each status. A row with an unknown status is reported as corrupt.
    pub async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        let client = self.client().await?;
        let rows = self
            .query(
                Conn::Pooled(&client),
                "SELECT status, COUNT(*), MIN(run_id) FROM @.runs GROUP BY status",
                &[],
            )
            .await?;
        let mut counts = StatusCounts::default();
        for row in rows {
            let example: String = row.get(2);
            let status = parse_status(&row.get::<_, String>(0), &example)?;
            *counts.slot(status) += row.get::<_, i64>(1).max(0) as u64;
        }
        Ok(counts)
    }
}

/// A running run that nobody is attached to, as `reaper status` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct DetachedRun {
    /// `now - detached_since`: how long it has been detached.
    pub detached_for_ms: i64,
    pub record: RunRecord,
}

/// Counts of runs by status, for `reaper status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StatusCounts {
    pub running: u64,
    pub interrupted: u64,
    pub completed: u64,
    pub failed: u64,
    pub aborted: u64,
}

impl StatusCounts {
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

    pub fn total(&self) -> u64 {
        RunStatus::ALL.iter().map(|s| self.get(*s)).sum()
    }
}

#[async_trait::async_trait]
impl RunStore for PostgresStore {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        let status = new.status.unwrap_or(RunStatus::Running);
        let client = self.client().await?;
        let inserted = self
            .execute(
                Conn::Pooled(&client),
                INSERT_IF_ABSENT,
                &[
                    &new.run_id,
                    &new.thread_id,
                    &status.as_str(),
                    &new.started_at,
                ],
            )
            .await?;
        self.committed(inserted > 0);
        let rows = self
            .query(Conn::Pooled(&client), SELECT_BY_ID, &[&new.run_id])
            .await?;
        decode_all(rows)?.pop().ok_or_else(|| {
            StoreError::Backend(format!(
                "run {} vanished right after its insert",
                new.run_id
            ))
        })
    }

    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        let (set, params) = assignments(&patch, 2)?;
        if set.is_empty() {
            return Ok(());
        }
        let sql = format!("UPDATE @.runs SET {} WHERE run_id = $1", set.join(", "));
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&run_id];
        all.extend(params.iter().map(|p| &**p as &(dyn ToSql + Sync)));
        let client = self.client().await?;
        let n = self.execute(Conn::Pooled(&client), &sql, &all).await?;
        self.committed(n > 0);
        Ok(())
    }

    /// The fence is in the `UPDATE` itself.
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        let (set, params) = assignments(&patch, 3)?;
        let held = to_i64(held_epoch);
        let sql = if set.is_empty() {
            // Nothing to write: still answer whether the fence holds.
            format!("SELECT run_id FROM @.runs WHERE run_id = $1 AND {FENCE}")
        } else {
            format!(
                "UPDATE @.runs SET {} WHERE run_id = $1 AND {FENCE} RETURNING run_id",
                set.join(", ")
            )
        };
        let mut all: Vec<&(dyn ToSql + Sync)> = vec![&run_id, &held];
        all.extend(params.iter().map(|p| &**p as &(dyn ToSql + Sync)));
        self.fenced_write(run_id, held, &sql, &all, !set.is_empty())
            .await
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.runs(SELECT_BY_ID, &[&run_id]).await?.pop())
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.runs(FIND_ACTIVE, &[&thread_id]).await?.pop())
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.runs(LIST_BY_THREAD, &[&thread_id]).await
    }

    async fn detached_view(
        &self,
        _instances: &dyn reaper_core::SandboxInstanceStore,
        query: &reaper_core::detached::DetachedQuery,
    ) -> Result<reaper_core::detached::DetachedView, StoreError> {
        // The instance records are this store's own table: joined, not read one by one.
        self.detached_view_rows(query).await
    }

    async fn list_reclaimable_page(
        &self,
        q: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        if q.limit == 0 {
            return Ok(ReclaimablePage::default());
        }
        let cursor = q
            .after
            .as_ref()
            .map(|c| (c.detached_since, c.run_id.as_str()));
        let page_sql = rules::page_statement(q.detached_until, q.detached_after, cursor, q.limit);
        let sql = if page_sql.sql == rules::LIST_RECLAIMABLE_PAGE {
            LIST_PAGE_AFTER
        } else {
            LIST_PAGE_FROM
        };
        let client = self.client().await?;
        let rows = self
            .query(
                Conn::Pooled(&client),
                sql,
                &[
                    &page_sql.detached_until,
                    &page_sql.since,
                    &page_sql.run_id,
                    &page_sql.limit,
                ],
            )
            .await?;
        let mut page = ReclaimablePage::default();
        let read = rows.len();
        for row in &rows {
            // The keyset of every row, a corrupt one included, so the next page starts past it.
            if let (Ok(detached_since), Ok(run_id)) = (row.try_get(9), row.try_get(0)) {
                page.next = Some(ReclaimableCursor {
                    detached_since,
                    run_id,
                });
            }
            match decode_run(row) {
                Ok(record) => page.runs.push(Arc::new(record)),
                Err(e @ StoreError::Corrupt { .. }) => page.corrupt.push(e),
                Err(e) => return Err(e),
            }
        }
        if read < q.limit {
            page.next = None;
        }
        Ok(page)
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        let after = detached_after.unwrap_or(i64::MIN);
        let bound = to_i64(at_most.saturating_add(1));
        let client = self.client().await?;
        let rows = self
            .query(
                Conn::Pooled(&client),
                COUNT_RECLAIMABLE,
                &[&detached_until, &after, &bound],
            )
            .await?;
        let seen: i64 = rows.first().map(|r| r.get(0)).unwrap_or(0);
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
        let client = self.client().await?;
        let rows = self
            .query(Conn::Pooled(&client), BUMP_EPOCH, &[&run_id])
            .await?;
        if let Some(record) = decode_all(rows)?.pop() {
            self.committed(true);
            let epoch = record
                .driver_epoch
                .ok_or_else(|| corrupt(run_id, "driver_epoch is NULL after a bump"))?;
            return Ok(EpochBump::Claimed { epoch, record });
        }
        // Nothing was written; say why.
        let status = self
            .query_opt(Conn::Pooled(&client), STATUS_BY_ID, &[&run_id])
            .await?;
        match status {
            None => Ok(EpochBump::Unknown),
            Some(row) => match parse_status(&row.get::<_, String>(0), run_id)? {
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
        let held = to_i64(held_epoch);
        let status = RunStatus::from(write.status).as_str();
        // No error in the write keeps the stored one, as `TerminalWrite::to_patch` does.
        match &write.error {
            Some(e) => {
                let sql = format!(
                    "UPDATE @.runs SET status = $3, finished_at = $4, error_message = $5, \
                     error_code = $6 WHERE run_id = $1 AND {FENCE} RETURNING run_id"
                );
                self.fenced_write(
                    run_id,
                    held,
                    &sql,
                    &[
                        &run_id,
                        &held,
                        &status,
                        &write.finished_at,
                        &e.message,
                        &e.code,
                    ],
                    true,
                )
                .await
            }
            None => {
                let sql = format!(
                    "UPDATE @.runs SET status = $3, finished_at = $4 \
                     WHERE run_id = $1 AND {FENCE} RETURNING run_id"
                );
                self.fenced_write(
                    run_id,
                    held,
                    &sql,
                    &[&run_id, &held, &status, &write.finished_at],
                    true,
                )
                .await
            }
        }
    }
}
