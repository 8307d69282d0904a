//! The `reaper_reclaim_intents` table: [`ReclaimLedger`]. Each operation is one statement, so
//! each is atomic on its own: the insert-if-absent and the update-if-exists are conditions of
//! the statement, never a read followed by a write.

use reaper_core::{EpochMs, LedgerCounts, ReclaimIntent, ReclaimLedger, StoreError};
use reaper_sql::reclaim_intents as sql;
use rusqlite::{params, Connection, Row};

use crate::decode::Cells;
use crate::error::store_err;
use crate::{to_i64, SqliteStore};

fn decode_intent(row: &Row<'_>) -> Result<ReclaimIntent, StoreError> {
    let run_id = Cells {
        row,
        key: "reclaim intent with an unreadable run_id",
    }
    .text(0, "run_id")?;
    let key = format!("reclaim intent {run_id}");
    let c = Cells { row, key: &key };
    Ok(ReclaimIntent {
        sandbox_key: c.opt_text(1, "sandbox_key")?,
        provider: c.opt_text(2, "provider")?,
        provider_sandbox_id: c.opt_text(3, "provider_sandbox_id")?,
        first_seen: c.int(4, "first_seen")?,
        attempts: c.rule(sql::attempts(c.int(5, "attempts")?))?,
        next_attempt_at: c.int(6, "next_attempt_at")?,
        last_error: c.opt_text(7, "last_error")?,
        run_id,
    })
}

fn query_intents(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<ReclaimIntent>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(store_err)?;
    let mut rows = stmt.query(params).map_err(store_err)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(store_err)? {
        out.push(decode_intent(row)?);
    }
    Ok(out)
}

/// Runs [`sql::RECORD`] or [`sql::UPDATE`] (same parameters); true when it returned the row.
fn write_intent(conn: &Connection, sql: &str, i: &ReclaimIntent) -> Result<bool, StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| {
            stmt.exists(params![
                i.run_id,
                i.sandbox_key,
                i.provider,
                i.provider_sandbox_id,
                i.first_seen,
                i.attempts,
                i.next_attempt_at,
                i.last_error,
            ])
        })
        .map_err(store_err)
}

#[async_trait::async_trait]
impl ReclaimLedger for SqliteStore {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        let intent = intent.clone();
        self.call(move |c| write_intent(c, sql::RECORD, &intent))
            .await
    }

    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        let intent = intent.clone();
        self.call(move |c| write_intent(c, sql::UPDATE, &intent))
            .await
    }

    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        let run_id = run_id.to_string();
        self.call(move |c| {
            c.prepare_cached(sql::RESOLVE)
                .and_then(|mut s| s.execute([run_id]))
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }

    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        let run_id = run_id.to_string();
        self.call(move |c| Ok(query_intents(c, sql::SELECT_BY_ID, [run_id])?.pop()))
            .await
    }

    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        let limit = to_i64(limit as u64);
        self.call(move |c| query_intents(c, sql::DUE, params![now, limit]))
            .await
    }

    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        self.call(|c| {
            let (pending, leaked, oldest): (i64, i64, Option<i64>) = c
                .prepare_cached(sql::COUNTS)
                .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))))
                .map_err(store_err)?;
            Ok(LedgerCounts {
                pending: pending.max(0) as u64,
                leaked: leaked.max(0) as u64,
                oldest_first_seen: oldest,
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_due_listing_is_read_from_its_index_without_a_sort() {
        let store = SqliteStore::open_in_memory().unwrap();
        let conn = store.inner_conn();
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", sql::DUE))
            .unwrap();
        let plan = stmt
            .query_map(params![0i64, 10i64], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<Vec<_>>>()
            .unwrap()
            .join("; ");
        assert!(
            plan.contains("USING INDEX reaper_reclaim_intents_due")
                && !plan.contains("TEMP B-TREE"),
            "{plan}"
        );
    }
}
