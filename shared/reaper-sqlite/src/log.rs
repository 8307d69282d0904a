//! The `logs` and `log_entries` tables: [`DeliveryLog`], and the retention that ages events out.

use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochMs, Fenced, LogEntry, LogSnapshot, StoreError,
};
use reaper_sql::logs as sql;
use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::{corrupt, store_err, store_err_for};
use crate::{fenced_outcome, immediate, to_i64, SqliteStore};

pub use reaper_sql::logs::{RetentionReport, DEFAULT_EVENT_RETENTION_MS};

#[async_trait::async_trait]
impl DeliveryLog for SqliteStore {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        let run_id = run_id.to_string();
        // A chunk is its JSON text already: stored as is.
        let encoded: Vec<String> = chunks.into_iter().map(Chunk::into_json).collect();
        self.call(move |c| {
            // The epoch check and the insert share one immediate transaction: no claim can move
            // the epoch between them.
            immediate(c, |tx| {
                if let Some(held) = fence {
                    let epoch: Option<Option<i64>> = tx
                        .query_row(reaper_sql::runs::EPOCH_BY_ID, [&run_id], |r| r.get(0))
                        .optional()
                        .map_err(store_err)?;
                    let observed = reaper_sql::runs::driver_epoch(epoch.flatten())
                        .map_err(|reason| corrupt(&run_id, reason))?;
                    if let Some(observed) = observed.filter(|o| *o > held) {
                        return Ok(Fenced::Superseded { observed });
                    }
                }
                tx.prepare_cached("INSERT INTO reaper_logs (run_id) VALUES (?1) ON CONFLICT DO NOTHING")
                    .and_then(|mut s| s.execute([&run_id]))
                    .map_err(store_err)?;
                let (closed, next_seq): (bool, i64) = tx
                    .query_row(
                        "SELECT closed, next_seq FROM reaper_logs WHERE run_id = ?1",
                        [&run_id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(store_err)?;
                if closed {
                    return Ok(Fenced::Written(Appended::Closed));
                }
                insert_chunks(tx, &run_id, next_seq, &encoded)?;
                if !encoded.is_empty() {
                    tx.prepare_cached(
                        "UPDATE reaper_logs SET next_seq = ?2, last_append_at = ?3 WHERE run_id = ?1",
                    )
                    .and_then(|mut s| {
                        s.execute(params![run_id, next_seq + encoded.len() as i64, now])
                    })
                    .map_err(store_err)?;
                }
                let first = sql::next_seq(next_seq).map_err(|reason| corrupt(&run_id, reason))?;
                Ok(Fenced::Written(Appended::At { first }))
            })
        })
        .await
    }

    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        _now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        let run_id = run_id.to_string();
        let held = fence.map(to_i64);
        self.call(move |c| {
            immediate(c, |tx| {
                let changed = tx
                    .prepare_cached(sql::CLOSE_FENCED)
                    .and_then(|mut s| s.execute(params![run_id, held]))
                    .map_err(store_err)?;
                fenced_outcome(tx, &run_id, fence, changed)
            })
        })
        .await
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        let run_id = run_id.to_string();
        self.call(move |c| {
            let row: Option<(bool, Option<i64>, i64, bool)> = c
                .prepare_cached(sql::SNAPSHOT)
                .and_then(|mut s| {
                    s.query_row([&run_id], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })
                    .optional()
                })
                .map_err(store_err_for(&format!("log {run_id}")))?;
            let Some((closed, last_append_at, next_seq, pruned)) = row else {
                return Ok(LogSnapshot::default());
            };
            let len = if pruned {
                0
            } else {
                sql::next_seq(next_seq).map_err(|reason| corrupt(&run_id, reason))?
            };
            Ok(LogSnapshot {
                len,
                last_append_at,
                closed,
            })
        })
        .await
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let run_id = run_id.to_string();
        let from = to_i64(from);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.call(move |c| {
            let mut stmt = c.prepare_cached(sql::READ).map_err(store_err)?;
            let mut rows = stmt
                .query(params![run_id, from, limit])
                .map_err(store_err)?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(store_err)? {
                let seq: i64 = row.get(0).map_err(store_err)?;
                let key = format!("{run_id}#{seq}");
                let raw: String = row
                    .get(1)
                    .map_err(|e| corrupt(&key, format!("chunk: {e}")))?;
                let chunk = Chunk::from_json(&raw)
                    .ok_or_else(|| corrupt(&key, sql::chunk_not_json(raw.len())))?;
                out.push(LogEntry {
                    offset: seq as u64,
                    chunk,
                });
            }
            Ok(out)
        })
        .await
    }
}

fn insert_chunks(
    tx: &Transaction<'_>,
    run_id: &str,
    first: i64,
    encoded: &[String],
) -> Result<(), StoreError> {
    let mut stmt = tx
        .prepare_cached("INSERT INTO reaper_log_entries (run_id, seq, chunk) VALUES (?1, ?2, ?3)")
        .map_err(store_err)?;
    for (i, chunk) in encoded.iter().enumerate() {
        stmt.execute(params![run_id, first + i as i64, chunk])
            .map_err(store_err)?;
    }
    Ok(())
}

impl SqliteStore {
    /// Ages out delivery-log events: deletes the events of every run that is terminal with
    /// `finished_at <= now - retention_ms`, at most `batch_limit` events per transaction so other
    /// writers wait at most one short batch, until none are left (`more` is always false). The
    /// log is then closed and reads back empty. Run rows and transcripts are never deleted; a
    /// terminal run without `finished_at` keeps its events (there is no evidence of its age).
    /// The statements are `reaper_sql::logs`', which the D1 store runs too.
    pub async fn prune_events(
        &self,
        now: EpochMs,
        retention_ms: u64,
        batch_limit: usize,
    ) -> Result<RetentionReport, StoreError> {
        let cutoff = sql::retention_cutoff(now, retention_ms);
        let batch_limit = i64::try_from(batch_limit.max(1)).unwrap_or(i64::MAX);
        let mut report = RetentionReport::default();
        loop {
            let (runs, deleted, more) = self
                .call(move |c| immediate(c, |tx| prune_batch(tx, now, cutoff, batch_limit)))
                .await?;
            report.runs += runs;
            report.events_deleted += deleted;
            if runs > 0 || deleted > 0 {
                report.batches += 1;
            }
            if !more {
                break;
            }
        }
        tracing::debug!(
            runs = report.runs,
            events_deleted = report.events_deleted,
            batches = report.batches,
            "pruned aged-out delivery-log events"
        );
        Ok(report)
    }
}

/// Rows a statement returned: the count of a `DELETE … RETURNING` or `UPDATE … RETURNING`.
fn returned(
    tx: &Transaction<'_>,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<i64, StoreError> {
    let mut stmt = tx.prepare_cached(sql).map_err(store_err)?;
    let mut rows = stmt.query(params).map_err(store_err)?;
    let mut n = 0;
    while rows.next().map_err(store_err)?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// One batch: returns (runs finished, events deleted, whether another batch may find more).
fn prune_batch(
    tx: &Transaction<'_>,
    now: EpochMs,
    cutoff: EpochMs,
    batch_limit: i64,
) -> Result<(u64, u64, bool), StoreError> {
    let mut budget = batch_limit;
    let mut runs = 0;
    let mut deleted = 0;
    while budget > 0 {
        let candidate: Option<String> = tx
            .prepare_cached(sql::AGED_OUT)
            .and_then(|mut s| s.query_row(params![cutoff, 1], |r| r.get(0)).optional())
            .map_err(store_err)?;
        let Some(run_id) = candidate else {
            return Ok((runs, deleted, false));
        };
        let n = returned(
            tx,
            sql::DELETE_AGED_OUT_EVENTS,
            params![run_id, budget, cutoff],
        )?;
        budget -= n;
        deleted += n as u64;
        if returned(tx, sql::MARK_PRUNED, params![run_id, now, cutoff])? == 1 {
            runs += 1;
        } else if n == 0 {
            // Still listed, nothing deleted and not marked: only a concurrent writer could do
            // that inside this transaction, which IMMEDIATE rules out. Stop rather than spin.
            return Ok((runs, deleted, false));
        }
    }
    Ok((runs, deleted, true))
}
