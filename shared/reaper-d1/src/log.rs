//! The `logs` and `log_entries` tables: [`DeliveryLog`].

use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochMs, Fenced, LogEntry, LogSnapshot, StoreError,
};

use reaper_sql::logs as sql;

use crate::client::{SqlValue, Statement};
use crate::row::{corrupt, safe_u, RowExt};
use crate::D1Store;

/// True unless the run's epoch is past the held one (`?2`; NULL means no fence). A missing run
/// record does not refuse the append.
const FENCE_OK: &str =
    "(?2 IS NULL OR NOT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1 AND driver_epoch > ?2))";

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl DeliveryLog for D1Store {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: &[Chunk],
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        let encoded = chunks
            .iter()
            .map(|c| serde_json::to_string(&c.0))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Backend(format!("chunk does not serialise: {e}")))?;
        // The chunks travel as one JSON array of strings, so any number of them is one bound
        // parameter and one INSERT, and each chunk's text is stored exactly as serialised.
        let array = serde_json::to_string(&encoded)
            .map_err(|e| StoreError::Backend(format!("chunks do not serialise: {e}")))?;
        let held = SqlValue::from(fence.map(safe_u));
        let key = || vec![SqlValue::from(run_id), held.clone()];
        // One batch, one transaction: the state read first is the state every conditional
        // write below sees, so the outcome decided from it is the one that landed.
        let mut statements = vec![
            Statement::new(
                "SELECT (SELECT driver_epoch FROM runs WHERE run_id = ?1) AS epoch, \
                 (SELECT closed FROM logs WHERE run_id = ?1) AS closed, \
                 (SELECT next_seq FROM logs WHERE run_id = ?1) AS next_seq",
                vec![run_id.into()],
            ),
            Statement::new(
                format!(
                    "INSERT INTO logs (run_id) SELECT ?1 WHERE {FENCE_OK} \
                     ON CONFLICT (run_id) DO NOTHING"
                ),
                key(),
            ),
        ];
        if !encoded.is_empty() {
            let mut insert = key();
            insert.push(array.into());
            statements.push(Statement::new(
                format!(
                    "INSERT INTO log_entries (run_id, seq, chunk) \
                     SELECT ?1, logs.next_seq + j.key, j.value FROM logs, json_each(?3) AS j \
                     WHERE logs.run_id = ?1 AND logs.closed = 0 AND {FENCE_OK}"
                ),
                insert,
            ));
            let mut advance = key();
            advance.push((encoded.len() as i64).into());
            advance.push(now.into());
            statements.push(Statement::new(
                format!(
                    "UPDATE logs SET next_seq = next_seq + ?3, last_append_at = ?4 \
                     WHERE run_id = ?1 AND closed = 0 AND {FENCE_OK}"
                ),
                advance,
            ));
        }
        let out = self.batch(statements).await?;
        let before = out[0]
            .first()
            .ok_or_else(|| StoreError::Backend(format!("log {run_id}: state read no row")))?;
        if let Some(held) = fence {
            let observed = reaper_sql::runs::driver_epoch(before.opt_int("epoch", run_id)?)
                .map_err(|reason| corrupt(run_id, reason))?;
            if let Some(observed) = observed.filter(|o| *o > held) {
                return Ok(Fenced::Superseded { observed });
            }
        }
        if before.opt_int("closed", run_id)? == Some(1) {
            return Ok(Fenced::Written(Appended::Closed));
        }
        let first = sql::next_seq(before.opt_int("next_seq", run_id)?.unwrap_or(0))
            .map_err(|reason| corrupt(run_id, reason))?;
        Ok(Fenced::Written(Appended::At { first }))
    }

    async fn close(&self, run_id: &str, _now: EpochMs) -> Result<(), StoreError> {
        self.one(Statement::new(sql::CLOSE, vec![run_id.into()]))
            .await?;
        Ok(())
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        let rows = self
            .one(Statement::new(sql::SNAPSHOT, vec![run_id.into()]))
            .await?;
        let Some(r) = rows.first() else {
            return Ok(LogSnapshot::default());
        };
        let what = format!("log {run_id}");
        let len = if r.int("pruned", &what)? != 0 {
            0
        } else {
            sql::next_seq(r.int("next_seq", &what)?).map_err(|reason| corrupt(&what, reason))?
        };
        Ok(LogSnapshot {
            len,
            last_append_at: r.opt_int("last_append_at", &what)?,
            closed: r.int("closed", &what)? != 0,
        })
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let rows = self
            .one(Statement::new(
                sql::READ,
                vec![
                    run_id.into(),
                    safe_u(from).into(),
                    safe_u(limit as u64).into(),
                ],
            ))
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let seq = r.int("seq", run_id)?;
            let key = format!("{run_id}#{seq}");
            let chunk = serde_json::from_str(&r.text("chunk", &key)?)
                .map(Chunk)
                .map_err(|e| corrupt(&key, sql::chunk_not_json(e)))?;
            out.push(LogEntry {
                offset: u64::try_from(seq).map_err(|_| corrupt(&key, "seq is negative"))?,
                chunk,
            });
        }
        Ok(out)
    }
}
