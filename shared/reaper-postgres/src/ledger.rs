//! The `reclaim_intents` table: [`ReclaimLedger`]. Each operation is one statement whose
//! condition (insert if absent, update if present) is the statement's own.

use reaper_core::{EpochMs, LedgerCounts, ReclaimIntent, ReclaimLedger, StoreError};
use tokio_postgres::Row;

use crate::error::corrupt;
use crate::{Conn, PostgresStore};

macro_rules! intent_columns {
    () => {
        "run_id, sandbox_key, provider, provider_sandbox_id, first_seen, attempts, \
         next_attempt_at, last_error"
    };
}

const RECORD: &str = concat!(
    "INSERT INTO @.reclaim_intents (",
    intent_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (run_id) DO NOTHING RETURNING run_id"
);

const UPDATE: &str = "UPDATE @.reclaim_intents SET sandbox_key = $2, provider = $3, \
                      provider_sandbox_id = $4, first_seen = $5, attempts = $6, \
                      next_attempt_at = $7, last_error = $8 WHERE run_id = $1 RETURNING run_id";

const RESOLVE: &str = "DELETE FROM @.reclaim_intents WHERE run_id = $1";

const SELECT_BY_ID: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM @.reclaim_intents WHERE run_id = $1"
);

/// Read from the index `reclaim_intents_due`, so it stops after `$2` rows.
const DUE: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM @.reclaim_intents WHERE next_attempt_at <= $1 \
     ORDER BY next_attempt_at, run_id LIMIT $2"
);

const COUNTS: &str = "SELECT COUNT(*), COUNT(*) FILTER (WHERE attempts > 0), MIN(first_seen) \
                      FROM @.reclaim_intents";

fn decode(row: &Row) -> Result<ReclaimIntent, StoreError> {
    let run_id: String = row.get(0);
    let attempts: i64 = row.get(5);
    Ok(ReclaimIntent {
        sandbox_key: row.get(1),
        provider: row.get(2),
        provider_sandbox_id: row.get(3),
        first_seen: row.get(4),
        attempts: reaper_sql::reclaim_intents::attempts(attempts)
            .map_err(|reason| corrupt(&format!("reclaim intent {run_id}"), reason))?,
        next_attempt_at: row.get(6),
        last_error: row.get(7),
        run_id,
    })
}

impl PostgresStore {
    async fn write_intent(&self, sql: &str, i: &ReclaimIntent) -> Result<bool, StoreError> {
        let attempts = i64::from(i.attempts);
        let client = self.client().await?;
        let landed = self
            .query_opt(
                Conn::Pooled(&client),
                sql,
                &[
                    &i.run_id,
                    &i.sandbox_key,
                    &i.provider,
                    &i.provider_sandbox_id,
                    &i.first_seen,
                    &attempts,
                    &i.next_attempt_at,
                    &i.last_error,
                ],
            )
            .await?
            .is_some();
        self.committed(landed);
        Ok(landed)
    }
}

#[async_trait::async_trait]
impl ReclaimLedger for PostgresStore {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.write_intent(RECORD, intent).await
    }

    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.write_intent(UPDATE, intent).await
    }

    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        let n = self
            .execute(Conn::Pooled(&client), RESOLVE, &[&run_id])
            .await?;
        self.committed(n > 0);
        Ok(())
    }

    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        let client = self.client().await?;
        self.query_opt(Conn::Pooled(&client), SELECT_BY_ID, &[&run_id])
            .await?
            .as_ref()
            .map(decode)
            .transpose()
    }

    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        self.query(Conn::Pooled(&client), DUE, &[&now, &limit])
            .await?
            .iter()
            .map(decode)
            .collect()
    }

    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        let client = self.client().await?;
        let row = self
            .query_opt(Conn::Pooled(&client), COUNTS, &[])
            .await?
            .ok_or_else(|| StoreError::Backend("the ledger count returned no row".into()))?;
        Ok(LedgerCounts {
            pending: row.get::<_, i64>(0).max(0) as u64,
            leaked: row.get::<_, i64>(1).max(0) as u64,
            oldest_first_seen: row.get(2),
        })
    }
}
