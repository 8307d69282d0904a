//! The `logs` and `log_entries` tables: [`DeliveryLog`].

use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochMs, Fenced, LogEntry, LogSnapshot, StoreError,
};
use reaper_sql::logs as rules;

use crate::error::corrupt;
use crate::{to_i64, Conn, PostgresStore};

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

const SNAPSHOT: &str = "SELECT closed, last_append_at, next_seq FROM @.logs WHERE run_id = $1";

const READ: &str = "SELECT seq, chunk::text FROM @.log_entries WHERE run_id = $1 AND seq >= $2 \
                    ORDER BY seq LIMIT $3";

impl PostgresStore {
    /// Closes the run's log unless the run's epoch is past `fence`, checked in the same
    /// transaction as the write (the run row stays locked against a claim until it commits).
    pub async fn close_fenced(
        &self,
        run_id: &str,
        fence: Option<u64>,
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

    async fn close(&self, run_id: &str, _now: EpochMs) -> Result<(), StoreError> {
        self.close_fenced(run_id, None).await.map(|_| ())
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        let client = self.client().await?;
        let Some(row) = self
            .query_opt(Conn::Pooled(&client), SNAPSHOT, &[&run_id])
            .await?
        else {
            return Ok(LogSnapshot::default());
        };
        let (closed, last_append_at, next_seq): (bool, Option<i64>, i64) =
            (row.get(0), row.get(1), row.get(2));
        Ok(LogSnapshot {
            len: rules::next_seq(next_seq).map_err(|reason| corrupt(run_id, reason))?,
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
