//! The `logs` and `log_entries` tables: [`DeliveryLog`].

use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochMs, Fenced, LogEntry, LogSnapshot, StoreError,
};
use reaper_sql::logs as rules;

use crate::error::corrupt;
use crate::{to_i64, Conn, PostgresStore};

pub use reaper_sql::logs::{RetentionReport, DEFAULT_EVENT_RETENTION_MS};

/// Creates the log row if missing and locks it, so concurrent appends to one run take turns and
/// each gets its own offsets.
const LOCK_LOG: &str = "INSERT INTO @.logs (run_id) VALUES ($1) \
                        ON CONFLICT (run_id) DO UPDATE SET run_id = excluded.run_id \
                        RETURNING closed, next_seq";

/// Every chunk of one append in one statement, numbered from `$2`. Chunks are JSON text bound as
/// `text` and cast, so the column keeps each exactly as appended.
const INSERT_CHUNKS: &str = "INSERT INTO @.log_entries (run_id, seq, chunk) \
                             SELECT $1, $2 + ord - 1, chunk::json \
                             FROM unnest($3::text[]) WITH ORDINALITY AS c(chunk, ord)";

const ADVANCE: &str = "UPDATE @.logs SET next_seq = $2, last_append_at = $3 WHERE run_id = $1";

const CLOSE: &str = "INSERT INTO @.logs (run_id, closed) VALUES ($1, true) \
                     ON CONFLICT (run_id) DO UPDATE SET closed = true";

const SNAPSHOT: &str = "SELECT closed, last_append_at, next_seq, events_pruned_at IS NOT NULL \
                        FROM @.logs WHERE run_id = $1";

/// Logs whose events have aged out (the run is terminal and finished at or before `$1`) and
/// are not yet pruned, oldest finish first.
const AGED_OUT: &str = "SELECT logs.run_id FROM @.runs JOIN @.logs ON logs.run_id = runs.run_id \
                        WHERE runs.finished_at IS NOT NULL AND runs.finished_at <= $1 \
                        AND runs.status IN ('completed', 'failed', 'aborted') \
                        AND logs.events_pruned_at IS NULL \
                        ORDER BY runs.finished_at, runs.run_id LIMIT 1";

/// Deletes up to `$2` of a run's oldest events while the run is still aged out at `$3`
/// (re-checked in the statement, so a stale listing deletes nothing).
const DELETE_AGED_OUT: &str = "DELETE FROM @.log_entries WHERE run_id = $1 AND seq IN \
     (SELECT seq FROM @.log_entries WHERE run_id = $1 ORDER BY seq LIMIT $2) \
     AND EXISTS (SELECT 1 FROM @.runs WHERE runs.run_id = $1 AND runs.finished_at IS NOT NULL \
     AND runs.finished_at <= $3 AND runs.status IN ('completed', 'failed', 'aborted'))";

/// Marks the log pruned and closed once none of its events is left (a late append cannot
/// start a fresh log under offsets already handed out).
const MARK_PRUNED: &str = "UPDATE @.logs SET events_pruned_at = $2, closed = true \
     WHERE run_id = $1 AND events_pruned_at IS NULL \
     AND NOT EXISTS (SELECT 1 FROM @.log_entries WHERE log_entries.run_id = $1) \
     AND EXISTS (SELECT 1 FROM @.runs WHERE runs.run_id = $1 AND runs.finished_at IS NOT NULL \
     AND runs.finished_at <= $3 AND runs.status IN ('completed', 'failed', 'aborted'))";

const READ: &str = "SELECT seq, chunk::text FROM @.log_entries WHERE run_id = $1 AND seq >= $2 \
                    ORDER BY seq LIMIT $3";

impl PostgresStore {
    /// Ages out delivery-log events, as reaper-sqlite's `prune_events`: deletes the events of
    /// every run that is terminal with `finished_at <= now - retention_ms`, at most
    /// `batch_limit` per statement, until none are left; each emptied log is marked pruned and
    /// closed. Run rows and transcripts are never deleted.
    pub async fn prune_events(
        &self,
        now: EpochMs,
        retention_ms: u64,
        batch_limit: usize,
    ) -> Result<RetentionReport, StoreError> {
        let cutoff = rules::retention_cutoff(now, retention_ms);
        let batch = i64::try_from(batch_limit.max(1)).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let mut report = RetentionReport::default();
        while let Some(row) = self
            .query_opt(Conn::Pooled(&client), AGED_OUT, &[&cutoff])
            .await?
        {
            let run_id: String = row.get(0);
            let deleted = self
                .execute(
                    Conn::Pooled(&client),
                    DELETE_AGED_OUT,
                    &[&run_id, &batch, &cutoff],
                )
                .await?;
            self.committed(deleted > 0);
            report.events_deleted += deleted;
            let marked = self
                .execute(
                    Conn::Pooled(&client),
                    MARK_PRUNED,
                    &[&run_id, &now, &cutoff],
                )
                .await?;
            self.committed(marked > 0);
            if marked > 0 {
                report.runs += 1;
            }
            if deleted > 0 || marked > 0 {
                report.batches += 1;
            } else {
                // Listed but neither deleted from nor marked: a concurrent writer changed it.
                // Stop rather than spin; the next prune sees it again.
                break;
            }
        }
        Ok(report)
    }
}

#[async_trait::async_trait]
impl DeliveryLog for PostgresStore {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        // A chunk is its JSON text already: stored as is.
        let encoded: Vec<String> = chunks.into_iter().map(Chunk::into_json).collect();
        let mut client = self.client().await?;
        let tx = self.begin(&mut client).await?;
        // The epoch check holds the run row against a claim until the chunks are in.
        if let Some(observed) = self.superseding_epoch(&tx, run_id, fence).await? {
            self.commit(tx, false).await?;
            return Ok(Fenced::Superseded { observed });
        }
        let row = self
            .query(Conn::Tx(&tx), LOCK_LOG, &[&run_id])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::Backend(format!("log {run_id}: upsert returned no row")))?;
        let (closed, next_seq): (bool, i64) = (row.get(0), row.get(1));
        if closed {
            self.commit(tx, true).await?;
            return Ok(Fenced::Written(Appended::Closed));
        }
        if !encoded.is_empty() {
            self.execute(
                Conn::Tx(&tx),
                INSERT_CHUNKS,
                &[&run_id, &next_seq, &encoded],
            )
            .await?;
            let next = next_seq + encoded.len() as i64;
            self.execute(Conn::Tx(&tx), ADVANCE, &[&run_id, &next, &now])
                .await?;
        }
        self.commit(tx, true).await?;
        let first = rules::next_seq(next_seq).map_err(|reason| corrupt(run_id, reason))?;
        Ok(Fenced::Written(Appended::At { first }))
    }

    /// With a fence, the epoch check and the close share one transaction and the run row
    /// stays locked against a claim until it commits.
    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        _now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        let mut client = self.client().await?;
        if fence.is_none() {
            let n = self
                .execute(Conn::Pooled(&client), CLOSE, &[&run_id])
                .await?;
            self.committed(n > 0);
            return Ok(Fenced::Written(()));
        }
        let tx = self.begin(&mut client).await?;
        if let Some(observed) = self.superseding_epoch(&tx, run_id, fence).await? {
            self.commit(tx, false).await?;
            return Ok(Fenced::Superseded { observed });
        }
        self.execute(Conn::Tx(&tx), CLOSE, &[&run_id]).await?;
        self.commit(tx, true).await?;
        Ok(Fenced::Written(()))
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        let client = self.client().await?;
        let Some(row) = self
            .query_opt(Conn::Pooled(&client), SNAPSHOT, &[&run_id])
            .await?
        else {
            return Ok(LogSnapshot::default());
        };
        let (closed, last_append_at, next_seq, pruned): (bool, Option<i64>, i64, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        Ok(LogSnapshot {
            // Aged-out events read back as an empty log.
            len: if pruned {
                0
            } else {
                rules::next_seq(next_seq).map_err(|reason| corrupt(run_id, reason))?
            },
            last_append_at,
            closed,
        })
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let from = to_i64(from);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let rows = self
            .query(Conn::Pooled(&client), READ, &[&run_id, &from, &limit])
            .await?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.get(0);
                let raw: String = row.get(1);
                let chunk = Chunk::from_json(&raw).ok_or_else(|| {
                    corrupt(&format!("{run_id}#{seq}"), rules::chunk_not_json(raw.len()))
                })?;
                Ok(LogEntry {
                    offset: seq as u64,
                    chunk,
                })
            })
            .collect()
    }
}
