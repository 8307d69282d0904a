//! The `run_history` table (schema version 2): what each sweep did to each run, one row per run
//! and sweep, the entry kept as its JSON text.

use reaper_core::history::{HistoryEntry, MAX_HISTORY_READ};
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

impl PostgresStore {
    pub(crate) async fn record_history_rows(
        &self,
        entries: &[HistoryEntry],
    ) -> Result<(), StoreError> {
        // One row per key: an upsert cannot touch the same row twice in one statement.
        let mut rows: Vec<&HistoryEntry> = Vec::with_capacity(entries.len());
        for e in entries {
            rows.retain(|r| (&r.run_id, r.at, &r.sweep_id) != (&e.run_id, e.at, &e.sweep_id));
            rows.push(e);
        }
        if rows.is_empty() {
            return Ok(());
        }
        let run_ids: Vec<&str> = rows.iter().map(|e| e.run_id.as_str()).collect();
        let sweep_ids: Vec<&str> = rows.iter().map(|e| e.sweep_id.as_str()).collect();
        let ats: Vec<i64> = rows.iter().map(|e| e.at).collect();
        let bodies = rows
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<String>, _>>()
            .map_err(|e| StoreError::Backend(format!("encoding a history entry: {e}")))?;
        let client = self.client().await?;
        let n = self
            .execute(
                Conn::Pooled(&client),
                RECORD,
                &[&run_ids, &sweep_ids, &ats, &bodies],
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
