//! The detached view `reaper status` lists (`reaper_core::detached`), in SQL: an aggregate over
//! the partial index `runs_reclaimable` for the summary, and one joined, filtered, limited
//! statement for the rows (the newest history entry through a lateral read of the history's
//! primary key), so the cost follows the rows shown, not the backlog.

use reaper_core::detached::{DetachedQuery, DetachedRow, DetachedSummary, DetachedView};
use reaper_core::{SandboxInstanceRecord, StoreError};

use crate::error::corrupt;
use crate::runs::decode_run;
use crate::{to_i64, Conn, PostgresStore};

/// The partial index's own condition, and the filters: `$1` the latest `detached_since` the
/// age filter admits, `$2` the provider, `$3` the newest history entry's outcome (each NULL: no
/// filter).
macro_rules! detached_from_where {
    () => {
        " FROM @.runs AS r LEFT JOIN @.sandbox_instances AS i ON i.key = r.sandbox_key \
         LEFT JOIN LATERAL (SELECT entry FROM @.run_history WHERE run_id = r.run_id \
         ORDER BY at DESC, sweep_id DESC LIMIT 1) AS h ON true \
         WHERE r.status = 'running' AND r.detached_since IS NOT NULL \
         AND ($1::bigint IS NULL OR r.detached_since <= $1::bigint) \
         AND ($2::text IS NULL OR i.provider = $2::text) \
         AND ($3::text IS NULL OR h.entry->>'outcome' = $3::text)"
    };
}

/// Every detached run: how many, the oldest, how many at or before `$1` (the TTL's cutoff).
const SUMMARY: &str = "SELECT COUNT(*), MIN(detached_since), \
     COUNT(*) FILTER (WHERE detached_since <= $1::bigint) FROM @.runs \
     WHERE status = 'running' AND detached_since IS NOT NULL";

/// How many pass the filters.
const MATCHING: &str = concat!("SELECT COUNT(*)", detached_from_where!());

macro_rules! detached_select {
    () => {
        "SELECT r.run_id, r.thread_id, r.status, r.started_at, r.finished_at, r.error_message, \
         r.error_code, r.usage::text AS usage, r.sandbox_key, r.detached_since, \
         r.cancel_requested, r.driver_epoch, i.key, i.provider, i.provider_sandbox_id, \
         i.latest_snapshot_id, i.thread_id, i.latest_run_id, i.updated_at, h.entry::text"
    };
}

/// Up to `$6` passing runs from the keyset `($4, $5)` inclusive (the first page).
const ROWS_FROM: &str = concat!(
    detached_select!(),
    detached_from_where!(),
    " AND (r.detached_since, r.run_id) >= ($4, $5) ORDER BY r.detached_since, r.run_id LIMIT $6"
);

/// [`ROWS_FROM`] strictly after the keyset.
const ROWS_AFTER: &str = concat!(
    detached_select!(),
    detached_from_where!(),
    " AND (r.detached_since, r.run_id) > ($4, $5) ORDER BY r.detached_since, r.run_id LIMIT $6"
);

/// Where the instance record's columns start.
const INSTANCE_AT: usize = 12;

impl PostgresStore {
    pub(crate) async fn detached_view_rows(
        &self,
        q: &DetachedQuery,
    ) -> Result<DetachedView, StoreError> {
        let mut client = self.client().await?;
        let tx = self.begin(&mut client).await?;
        // The pool plans generically (the sweep's statements gain); the view's optional
        // filters (`$2 IS NULL OR …`) do not: a custom plan folds the unused ones away, and a
        // filter matching few runs took 40 ms planned per call against 360 ms generic at 100k.
        self.count(1);
        tx.batch_execute("SET LOCAL plan_cache_mode = auto")
            .await
            .map_err(crate::error::store_err)?;
        let view = self.detached_view_in(Conn::Tx(&tx), q).await?;
        self.commit(tx, false).await?;
        Ok(view)
    }

    async fn detached_view_in(
        &self,
        conn: Conn<'_, '_>,
        q: &DetachedQuery,
    ) -> Result<DetachedView, StoreError> {
        let ttl_until = q.ttl_ms.map(|t| q.now.saturating_sub(to_i64(t)));
        let summary = self.query(conn, SUMMARY, &[&ttl_until]).await?;
        let (count, oldest, past_ttl): (i64, Option<i64>, i64) = summary
            .first()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .unwrap_or_default();
        let mut view = DetachedView {
            summary: DetachedSummary {
                detached: count.max(0) as u64,
                oldest_since: oldest,
                past_ttl: q.ttl_ms.map(|_| past_ttl.max(0) as u64),
            },
            matching: count.max(0) as u64,
            ..DetachedView::default()
        };
        let until = q.detached_until();
        if q.filters() {
            let rows = self
                .query(conn, MATCHING, &[&until, &q.provider, &q.outcome])
                .await?;
            view.matching = rows.first().map_or(0, |r| r.get::<_, i64>(0).max(0) as u64);
        }
        if q.limit == 0 {
            return Ok(view);
        }
        let (sql, since, run_id) = match &q.after {
            Some(a) => (ROWS_AFTER, a.detached_since, a.run_id.clone()),
            None => (ROWS_FROM, i64::MIN, String::new()),
        };
        let limit = to_i64(q.limit as u64);
        let rows = self
            .query(
                conn,
                sql,
                &[&until, &q.provider, &q.outcome, &since, &run_id, &limit],
            )
            .await?;
        for row in &rows {
            let record = match decode_run(row) {
                Ok(record) => record,
                Err(e @ StoreError::Corrupt { .. }) => {
                    view.summary.detached = view.summary.detached.saturating_sub(1);
                    view.matching = view.matching.saturating_sub(1);
                    view.corrupt.push(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let at = INSTANCE_AT;
            let instance = row
                .get::<_, Option<String>>(at)
                .map(|key| SandboxInstanceRecord {
                    key,
                    provider: row.get(at + 1),
                    provider_sandbox_id: row.get(at + 2),
                    latest_snapshot_id: row.get(at + 3),
                    thread_id: row.get(at + 4),
                    latest_run_id: row.get(at + 5),
                    updated_at: row.get(at + 6),
                });
            let last = row
                .get::<_, Option<String>>(at + 7)
                .map(|t| {
                    serde_json::from_str(&t).map_err(|e| {
                        corrupt(
                            &format!("history of {}", record.run_id),
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
        Ok(view)
    }
}
