//! The `run_history` table (schema version 2): what each sweep did to each run, one row per run
//! and sweep, the entry kept as its JSON text; and the `sweeps` table (version 3), one record
//! per sweep, written in the same transaction as the sweep's entries and both retentions'
//! prunes.

use reaper_core::history::{HistoryEntry, SweepHistory, SweepWritten, MAX_HISTORY_READ};
use reaper_core::sweeps::{SweepRecord, MAX_SWEEPS_KEPT, MAX_SWEEPS_READ, SWEEP_PRUNE_BATCH};
use reaper_core::{EpochMs, StoreError};

use crate::error::corrupt;
use crate::{Conn, PostgresStore};

/// The sweep's whole batch in one statement (arrays unnested), replacing an entry with the same
/// key (run, time, sweep).
const RECORD: &str = "INSERT INTO @.run_history (run_id, at, sweep_id, entry) \
                      SELECT r, a, s, e::json FROM unnest($1::text[], $2::text[], $3::bigint[], \
                      $4::text[]) AS t(r, s, a, e) \
                      ON CONFLICT (run_id, at, sweep_id) DO UPDATE SET entry = excluded.entry";

/// A run's newest entries, through the primary key.
const READ: &str = "SELECT entry::text FROM @.run_history WHERE run_id = $1 \
                    ORDER BY at DESC, sweep_id DESC LIMIT $2";

/// At most `$2` entries made before `$1`, oldest first, through the by-age index.
const PRUNE: &str = "DELETE FROM @.run_history WHERE (run_id, at, sweep_id) IN \
                     (SELECT run_id, at, sweep_id FROM @.run_history WHERE at < $1 \
                     ORDER BY at, run_id, sweep_id LIMIT $2)";

/// A sweep's record, replacing one with the same sweep id.
const RECORD_SWEEP: &str = "INSERT INTO @.sweeps (sweep_id, finished_at, record) \
                            VALUES ($1, $2, $3::text::json) ON CONFLICT (sweep_id) DO UPDATE SET \
                            finished_at = excluded.finished_at, record = excluded.record";

/// The newest records, through the by-finish index read backwards.
const READ_SWEEPS: &str = "SELECT record::text FROM @.sweeps \
                           ORDER BY finished_at DESC, sweep_id DESC LIMIT $1";

/// At most `$2` records that finished before `$1`, oldest first.
const PRUNE_SWEEPS: &str = "DELETE FROM @.sweeps WHERE seq IN (SELECT seq FROM @.sweeps \
                            WHERE finished_at < $1 ORDER BY finished_at, sweep_id LIMIT $2)";

/// The records written before the newest `$1`, through the primary key.
const CAP_SWEEPS: &str = "DELETE FROM @.sweeps WHERE seq <= (SELECT max(seq) FROM @.sweeps) - $1";

impl PostgresStore {
    /// A sweep's end write in one transaction: its entries, its record with the records' prune
    /// and cap, then the history's prune. A failure rolls all of it back.
    pub(crate) async fn write_sweep_history_rows(
        &self,
        history: &SweepHistory,
    ) -> Result<SweepWritten, StoreError> {
        let body = history
            .record
            .as_ref()
            .map(|sweep| {
                serde_json::to_string(sweep)
                    .map_err(|e| StoreError::Backend(format!("encoding a sweep record: {e}")))
            })
            .transpose()?;
        let batch = HistoryBatch::of(&history.entries)?;
        let prune_max = i64::try_from(history.prune_max).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        let tx = self.begin(&mut client).await?;
        if let Some(b) = &batch {
            self.execute(
                Conn::Tx(&tx),
                RECORD,
                &[&b.run_ids, &b.sweep_ids, &b.ats, &b.bodies],
            )
            .await?;
        }
        if let (Some(sweep), Some(body)) = (&history.record, &body) {
            self.execute(
                Conn::Tx(&tx),
                RECORD_SWEEP,
                &[&sweep.sweep_id, &sweep.finished_at, body],
            )
            .await?;
            self.execute(
                Conn::Tx(&tx),
                PRUNE_SWEEPS,
                &[&history.prune_before, &(SWEEP_PRUNE_BATCH as i64)],
            )
            .await?;
            self.execute(Conn::Tx(&tx), CAP_SWEEPS, &[&(MAX_SWEEPS_KEPT as i64)])
                .await?;
        }
        let pruned = if prune_max > 0 {
            self.execute(Conn::Tx(&tx), PRUNE, &[&history.prune_before, &prune_max])
                .await?
        } else {
            0
        };
        let wrote = batch.is_some() || body.is_some() || pruned > 0;
        self.commit(tx, wrote).await?;
        Ok(SweepWritten {
            recorded: history.entries.len(),
            sweep_recorded: history.record.is_some(),
            pruned,
            ..SweepWritten::default()
        })
    }

    pub(crate) async fn recent_sweep_rows(
        &self,
        limit: usize,
    ) -> Result<Vec<SweepRecord>, StoreError> {
        let limit = limit.min(MAX_SWEEPS_READ) as i64;
        let client = self.client().await?;
        let rows = self
            .query(Conn::Pooled(&client), READ_SWEEPS, &[&limit])
            .await?;
        rows.iter()
            .map(|row| {
                let text: String = row.get(0);
                serde_json::from_str(&text).map_err(|e| {
                    corrupt(
                        "recent sweeps",
                        format!("record is not a sweep record: {e}"),
                    )
                })
            })
            .collect()
    }

    pub(crate) async fn record_history_rows(
        &self,
        entries: &[HistoryEntry],
    ) -> Result<(), StoreError> {
        let Some(b) = HistoryBatch::of(entries)? else {
            return Ok(());
        };
        let client = self.client().await?;
        let n = self
            .execute(
                Conn::Pooled(&client),
                RECORD,
                &[&b.run_ids, &b.sweep_ids, &b.ats, &b.bodies],
            )
            .await?;
        self.committed(n > 0);
        Ok(())
    }

    pub(crate) async fn run_history_rows(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let limit = limit.min(MAX_HISTORY_READ) as i64;
        let client = self.client().await?;
        let rows = self
            .query(Conn::Pooled(&client), READ, &[&run_id, &limit])
            .await?;
        rows.iter()
            .map(|row| {
                let text: String = row.get(0);
                serde_json::from_str(&text).map_err(|e| {
                    corrupt(
                        &format!("history of {run_id}"),
                        format!("entry is not a history entry: {e}"),
                    )
                })
            })
            .collect()
    }

    pub(crate) async fn prune_history_rows(
        &self,
        before: EpochMs,
        max_entries: usize,
    ) -> Result<u64, StoreError> {
        let max = i64::try_from(max_entries).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let n = self
            .execute(Conn::Pooled(&client), PRUNE, &[&before, &max])
            .await?;
        self.committed(n > 0);
        Ok(n)
    }
}

/// A sweep's entries as the arrays [`RECORD`] unnests, one row per key (an upsert cannot touch
/// the same row twice in one statement); `None` when there are none.
struct HistoryBatch<'a> {
    run_ids: Vec<&'a str>,
    sweep_ids: Vec<&'a str>,
    ats: Vec<i64>,
    bodies: Vec<String>,
}

impl<'a> HistoryBatch<'a> {
    fn of(entries: &'a [HistoryEntry]) -> Result<Option<Self>, StoreError> {
        let mut rows: Vec<&HistoryEntry> = Vec::with_capacity(entries.len());
        for e in entries {
            rows.retain(|r| (&r.run_id, r.at, &r.sweep_id) != (&e.run_id, e.at, &e.sweep_id));
            rows.push(e);
        }
        if rows.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self {
            run_ids: rows.iter().map(|e| e.run_id.as_str()).collect(),
            sweep_ids: rows.iter().map(|e| e.sweep_id.as_str()).collect(),
            ats: rows.iter().map(|e| e.at).collect(),
            bodies: rows
                .iter()
                .map(serde_json::to_string)
                .collect::<Result<Vec<String>, _>>()
                .map_err(|e| StoreError::Backend(format!("encoding a history entry: {e}")))?,
        }))
    }
}
