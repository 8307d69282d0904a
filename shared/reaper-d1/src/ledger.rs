//! The `reaper_reclaim_intents` table: [`ReclaimLedger`], with `reaper-sqlite`'s statements.
//! Each operation is one statement, so each is atomic on its own: the insert-if-absent and the
//! update-if-exists are conditions of the statement, never a read followed by a write.

use reaper_core::{EpochMs, LedgerCounts, ReclaimIntent, ReclaimLedger, StoreError};
use reaper_sql::reclaim_intents as sql;

use crate::client::{Row, SqlValue, Statement};
use crate::row::{corrupt, safe, safe_u, RowExt};
use crate::D1Store;

fn decode_intent(row: &Row) -> Result<ReclaimIntent, StoreError> {
    let run_id = row.text("run_id", "reclaim intent with an unreadable run_id")?;
    let key = format!("reclaim intent {run_id}");
    Ok(ReclaimIntent {
        sandbox_key: row.opt_text("sandbox_key", &key)?,
        provider: row.opt_text("provider", &key)?,
        provider_sandbox_id: row.opt_text("provider_sandbox_id", &key)?,
        first_seen: row.int("first_seen", &key)?,
        attempts: sql::attempts(row.int("attempts", &key)?).map_err(|r| corrupt(&key, r))?,
        next_attempt_at: row.int("next_attempt_at", &key)?,
        last_error: row.opt_text("last_error", &key)?,
        run_id,
    })
}

/// [`sql::RECORD`] or [`sql::UPDATE`], which bind the same parameters.
fn write(sql: &str, i: &ReclaimIntent) -> Statement {
    Statement::new(
        sql,
        vec![
            i.run_id.as_str().into(),
            i.sandbox_key.clone().into(),
            i.provider.clone().into(),
            i.provider_sandbox_id.clone().into(),
            safe(i.first_seen).into(),
            i64::from(i.attempts).into(),
            safe(i.next_attempt_at).into(),
            i.last_error.clone().into(),
        ],
    )
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl ReclaimLedger for D1Store {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        // It returns the row only when it inserted.
        Ok(!self.one(write(sql::RECORD, intent)).await?.is_empty())
    }

    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        Ok(!self.one(write(sql::UPDATE, intent)).await?.is_empty())
    }

    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        self.one(Statement::new(sql::RESOLVE, vec![run_id.into()]))
            .await?;
        Ok(())
    }

    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        let rows = self
            .one(Statement::new(sql::SELECT_BY_ID, vec![run_id.into()]))
            .await?;
        rows.first().map(decode_intent).transpose()
    }

    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        let params: Vec<SqlValue> = vec![safe(now).into(), safe_u(limit as u64).into()];
        let rows = self.one(Statement::new(sql::DUE, params)).await?;
        rows.iter().map(decode_intent).collect()
    }

    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        let rows = self.one(Statement::new(sql::COUNTS, vec![])).await?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::Backend("d1: the ledger count returned no row".into()))?;
        let count = |column: &str| -> Result<u64, StoreError> {
            Ok(row.int(column, sql::TABLE)?.max(0) as u64)
        };
        Ok(LedgerCounts {
            pending: count("pending")?,
            leaked: count("leaked")?,
            oldest_first_seen: row.opt_int("oldest_first_seen", sql::TABLE)?,
        })
    }
}
