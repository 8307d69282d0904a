//! The run history (schema version 6) and the sweep records (version 8) on D1, in the
//! statements `reaper-sqlite` runs: the sweep's entries, its record with the records' prune and
//! cap, and the history's prune in one batch (one subrequest), a run's newest through the
//! primary key, the bounded prune.

use reaper_core::history::{HistoryEntry, SweepHistory, SweepWritten, MAX_HISTORY_READ};
use reaper_core::sweeps::{SweepRecord, MAX_SWEEPS_KEPT, MAX_SWEEPS_READ, SWEEP_PRUNE_BATCH};
use reaper_core::{EpochMs, StoreError};
use reaper_sql::history as sql;
use reaper_sql::sweeps as sweeps_sql;

use crate::client::Statement;
use crate::row::{corrupt, RowExt};
use crate::D1Store;

impl D1Store {
    pub(crate) async fn record_history_rows(
        &self,
        entries: &[HistoryEntry],
    ) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        // One batch: D1 runs it as one transaction, one round trip for the sweep.
        self.batch(history_statements(entries)?).await.map(drop)
    }

    /// A sweep's entries, its record (with the records' retention and cap) and the history's
    /// retention prune in one batch: one D1 round trip (one subrequest of the Worker's alarm)
    /// and one transaction, so a failed prune keeps no half of the sweep's writes either.
    /// Says how many entries the history's prune deleted (its statement comes last).
    pub(crate) async fn write_sweep_history_rows(
        &self,
        history: &SweepHistory,
    ) -> Result<SweepWritten, StoreError> {
        let mut statements = history_statements(&history.entries)?;
        if let Some(sweep) = &history.record {
            statements.extend(sweep_statements(sweep, history.prune_before)?);
        }
        let max = i64::try_from(history.prune_max).unwrap_or(i64::MAX);
        statements.push(Statement::new(
            sql::PRUNE_RETURNING,
            vec![history.prune_before.into(), max.into()],
        ));
        let out = self.batch(statements).await?;
        Ok(SweepWritten {
            recorded: history.entries.len(),
            sweep_recorded: history.record.is_some(),
            pruned: out.last().map_or(0, |pruned| pruned.len() as u64),
            ..SweepWritten::default()
        })
    }

    pub(crate) async fn recent_sweep_rows(
        &self,
        limit: usize,
    ) -> Result<Vec<SweepRecord>, StoreError> {
        let limit = limit.min(MAX_SWEEPS_READ) as i64;
        let rows = self
            .one(Statement::new(sweeps_sql::READ, vec![limit.into()]))
            .await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(&r.text("record", "recent sweeps")?).map_err(|e| {
                    corrupt(
                        "recent sweeps",
                        format!("record is not a sweep record: {e}"),
                    )
                })
            })
            .collect()
    }

    pub(crate) async fn run_history_rows(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let limit = limit.min(MAX_HISTORY_READ) as i64;
        let rows = self
            .one(Statement::new(sql::READ, vec![run_id.into(), limit.into()]))
            .await?;
        let key = format!("history of {run_id}");
        rows.iter()
            .map(|r| {
                serde_json::from_str(&r.text("entry", &key)?).map_err(|e| {
                    corrupt(key.as_str(), format!("entry is not a history entry: {e}"))
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
        let rows = self
            .one(Statement::new(
                sql::PRUNE_RETURNING,
                vec![before.into(), max.into()],
            ))
            .await?;
        Ok(rows.len() as u64)
    }
}

/// A sweep's record, then the records' retention prune and count cap.
fn sweep_statements(
    sweep: &SweepRecord,
    prune_before: EpochMs,
) -> Result<[Statement; 3], StoreError> {
    let json = serde_json::to_string(sweep)
        .map_err(|err| StoreError::Backend(format!("encoding a sweep record: {err}")))?;
    Ok([
        Statement::new(
            sweeps_sql::RECORD,
            vec![
                sweep.sweep_id.as_str().into(),
                sweep.finished_at.into(),
                json.into(),
            ],
        ),
        Statement::new(
            sweeps_sql::PRUNE,
            vec![prune_before.into(), (SWEEP_PRUNE_BATCH as i64).into()],
        ),
        Statement::new(sweeps_sql::CAP, vec![(MAX_SWEEPS_KEPT as i64).into()]),
    ])
}

/// One upsert per history entry, its JSON in `entry`.
fn history_statements(entries: &[HistoryEntry]) -> Result<Vec<Statement>, StoreError> {
    entries
        .iter()
        .map(|e| {
            let json = serde_json::to_string(e)
                .map_err(|err| StoreError::Backend(format!("encoding a history entry: {err}")))?;
            Ok(Statement::new(
                sql::RECORD,
                vec![
                    e.run_id.as_str().into(),
                    e.sweep_id.as_str().into(),
                    e.at.into(),
                    json.into(),
                ],
            ))
        })
        .collect()
}
