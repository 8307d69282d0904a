//! The run history (schema version 6) on SQLite: one row per run and sweep, the entry as JSON;
//! and the sweep records (version 8), written in the same transaction as the sweep's entries
//! and both retentions' prunes.

use reaper_core::history::{HistoryEntry, SweepHistory, SweepWritten, MAX_HISTORY_READ};
use reaper_core::sweeps::{SweepRecord, MAX_SWEEPS_KEPT, MAX_SWEEPS_READ, SWEEP_PRUNE_BATCH};
use reaper_core::{EpochMs, StoreError};
use reaper_sql::history as sql;
use reaper_sql::sweeps as sweeps_sql;
use rusqlite::params;

use crate::error::{corrupt, store_err};
use crate::{immediate, SqliteStore};

impl SqliteStore {
    pub(crate) async fn record_history_rows(
        &self,
        entries: &[HistoryEntry],
    ) -> Result<(), StoreError> {
        self.write_rows(None, entries, 0, 0).await.map(drop)
    }

    pub(crate) async fn write_sweep_history_rows(
        &self,
        history: &SweepHistory,
    ) -> Result<SweepWritten, StoreError> {
        let pruned = self
            .write_rows(
                history.record.as_ref(),
                &history.entries,
                history.prune_before,
                history.prune_max,
            )
            .await?;
        Ok(SweepWritten {
            recorded: history.entries.len(),
            sweep_recorded: history.record.is_some(),
            pruned,
            ..SweepWritten::default()
        })
    }

    /// The sweep's entries, its record when given with the records' prune and cap, then at
    /// most `prune_max` history entries made before `prune_before`: one transaction, one fsync.
    /// Returns how many entries the history's prune deleted.
    async fn write_rows(
        &self,
        sweep: Option<&SweepRecord>,
        entries: &[HistoryEntry],
        prune_before: EpochMs,
        prune_max: usize,
    ) -> Result<u64, StoreError> {
        let record = sweep
            .map(|r| {
                serde_json::to_string(r)
                    .map(|json| (r.sweep_id.clone(), r.finished_at, json))
                    .map_err(|e| StoreError::Backend(format!("encoding a sweep record: {e}")))
            })
            .transpose()?;
        let rows = entries
            .iter()
            .map(|e| {
                serde_json::to_string(e)
                    .map(|json| (e.run_id.clone(), e.sweep_id.clone(), e.at, json))
                    .map_err(|e| StoreError::Backend(format!("encoding a history entry: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let prune_max = i64::try_from(prune_max).unwrap_or(i64::MAX);
        // One transaction for the sweep's batch: one fsync, not one per run.
        self.call(move |c| {
            immediate(c, |tx| {
                let mut s = tx.prepare_cached(sql::RECORD).map_err(store_err)?;
                for (run_id, sweep_id, at, json) in &rows {
                    s.execute(params![run_id, sweep_id, at, json])
                        .map_err(store_err)?;
                }
                if let Some((sweep_id, finished_at, json)) = &record {
                    tx.prepare_cached(sweeps_sql::RECORD)
                        .and_then(|mut s| s.execute(params![sweep_id, finished_at, json]))
                        .map_err(store_err)?;
                    tx.prepare_cached(sweeps_sql::PRUNE)
                        .and_then(|mut s| {
                            s.execute(params![prune_before, SWEEP_PRUNE_BATCH as i64])
                        })
                        .map_err(store_err)?;
                    tx.prepare_cached(sweeps_sql::CAP)
                        .and_then(|mut s| s.execute(params![MAX_SWEEPS_KEPT as i64]))
                        .map_err(store_err)?;
                }
                if prune_max == 0 {
                    return Ok(0);
                }
                tx.prepare_cached(sql::PRUNE)
                    .and_then(|mut s| s.execute(params![prune_before, prune_max]))
                    .map(|n| n as u64)
                    .map_err(store_err)
            })
        })
        .await
    }

    pub(crate) async fn run_history_rows(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let run_id = run_id.to_string();
        let limit = limit.min(MAX_HISTORY_READ) as i64;
        self.call(move |c| {
            let texts: Vec<String> = c
                .prepare_cached(sql::READ)
                .and_then(|mut s| {
                    s.query_map(params![run_id, limit], |r| r.get(0))?
                        .collect::<Result<_, _>>()
                })
                .map_err(store_err)?;
            texts
                .iter()
                .map(|t| {
                    serde_json::from_str(t).map_err(|e| {
                        corrupt(
                            format!("history of {run_id}"),
                            format!("entry is not a history entry: {e}"),
                        )
                    })
                })
                .collect()
        })
        .await
    }

    pub(crate) async fn prune_history_rows(
        &self,
        before: EpochMs,
        max_entries: usize,
    ) -> Result<u64, StoreError> {
        let max = i64::try_from(max_entries).unwrap_or(i64::MAX);
        self.call(move |c| {
            c.prepare_cached(sql::PRUNE)
                .and_then(|mut s| s.execute(params![before, max]))
                .map(|n| n as u64)
                .map_err(store_err)
        })
        .await
    }
}

impl SqliteStore {
    pub(crate) async fn recent_sweep_rows(
        &self,
        limit: usize,
    ) -> Result<Vec<SweepRecord>, StoreError> {
        let limit = limit.min(MAX_SWEEPS_READ) as i64;
        self.call(move |c| {
            let texts: Vec<String> = c
                .prepare_cached(sweeps_sql::READ)
                .and_then(|mut s| {
                    s.query_map(params![limit], |r| r.get(0))?
                        .collect::<Result<_, _>>()
                })
                .map_err(store_err)?;
            texts
                .iter()
                .map(|t| {
                    serde_json::from_str(t).map_err(|e| {
                        corrupt(
                            "recent sweeps".to_string(),
                            format!("record is not a sweep record: {e}"),
                        )
                    })
                })
                .collect()
        })
        .await
    }
}
