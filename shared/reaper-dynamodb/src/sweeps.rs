//! Sweep records on DynamoDB, in a partition of their own: `pk = SWEEPS`,
//! `sk = S#<finishedAt, order-preserving>#<sweepId>`, so the newest records are one Query of that
//! partition read backwards with `Limit`, and the retention's prune one bounded Query of its
//! oldest. The count cap needs the write order: a counter item (`pk = SWEEPS`, `sk = COUNTER`)
//! hands each record a sequence number, kept in the `reclaimable` index under
//! `gsi1pk = SWEEPS` by that number, so the records past the cap are one bounded Query of that
//! index partition. No Scan, no new index.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, PutRequest, ReturnConsumedCapacity, ReturnValue, WriteRequest,
};
use reaper_core::history::{HistoryEntry, SweepHistory, SweepWritten};
use reaper_core::sweeps::{SweepRecord, MAX_SWEEPS_KEPT, MAX_SWEEPS_READ, SWEEP_PRUNE_BATCH};
use reaper_core::{EpochMs, StoreError};

use crate::history::history_requests;
use crate::layout::{key, key_id, n, s, Item, ENTITY, GSI1_PK, GSI1_SK, PK, RECLAIMABLE_INDEX, SK};
use crate::store::DynamoStore;

/// The partition of every sweep record (and of the counter), and their `gsi1pk`.
pub const SWEEPS: &str = "SWEEPS";

/// The `sk` of the counter item handing out sequence numbers.
pub const COUNTER_SK: &str = "COUNTER";

mod ops {
    pub const SEQ: &str = "sweeps_seq";
    pub const RECORD: &str = "sweeps_record";
    pub const READ: &str = "sweeps_read";
    pub const PRUNE_LIST: &str = "sweeps_prune_list";
    pub const CAP_LIST: &str = "sweeps_cap_list";
    pub const PRUNE_DELETE: &str = "sweeps_prune_delete";
}

/// `S#` + `finished_at` shifted to an unsigned 20-digit number (string order is time order,
/// negative times included) + `#` + the sweep id.
pub fn sweep_sk(finished_at: EpochMs, sweep_id: &str) -> String {
    format!("{}#{}", sweep_sk_prefix(finished_at), key_id(sweep_id))
}

fn sweep_sk_prefix(finished_at: EpochMs) -> String {
    let shifted = (i128::from(finished_at) - i128::from(i64::MIN)) as u64;
    format!("S#{shifted:020}")
}

fn sweep_item(r: &SweepRecord, seq: i64) -> Result<Item, StoreError> {
    let record = serde_json::to_string(r)
        .map_err(|err| StoreError::Backend(format!("encoding a sweep record: {err}")))?;
    Ok(HashMap::from([
        (PK.to_string(), s(SWEEPS)),
        (SK.to_string(), s(sweep_sk(r.finished_at, &r.sweep_id))),
        ("finishedAt".to_string(), n(r.finished_at)),
        ("record".to_string(), s(record)),
        (GSI1_PK.to_string(), s(SWEEPS)),
        (GSI1_SK.to_string(), n(seq)),
        (ENTITY.to_string(), s("sweep")),
    ]))
}

fn delete_of(item: &Item) -> Option<WriteRequest> {
    let k: Item = [PK, SK]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), item.get(k)?.clone())))
        .collect();
    if k.len() != 2 {
        return None;
    }
    DeleteRequest::builder()
        .set_key(Some(k))
        .build()
        .ok()
        .map(|d| WriteRequest::builder().delete_request(d).build())
}

impl DynamoStore {
    /// The counter's next value (one `UpdateItem`).
    async fn next_sweep_seq(&self) -> Result<i64, StoreError> {
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(key(SWEEPS.to_string(), COUNTER_SK)))
            .update_expression("ADD #seq :one SET #entity = :entity")
            .expression_attribute_names("#seq", "seq")
            .expression_attribute_names("#entity", ENTITY)
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":entity", s("sweep-counter"))
            .return_values(ReturnValue::UpdatedNew)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(ops::SEQ, &res);
        let out = res.map_err(|e| self.map_err("UpdateItem", e))?;
        match out.attributes.as_ref().and_then(|a| a.get("seq")) {
            Some(AttributeValue::N(v)) => v.parse().map_err(|_| StoreError::Corrupt {
                key: "sweep counter".into(),
                reason: format!("seq {v:?} is not an integer"),
            }),
            _ => Err(StoreError::Corrupt {
                key: "sweep counter".into(),
                reason: "the update returned no numeric seq".into(),
            }),
        }
    }

    /// A sweep's end write: its entries with its record (as [`Self::record_sweep_items`]), or
    /// the entries alone without one; then the history's prune. DynamoDB has no transaction
    /// for these (a `BatchWriteItem` is not one, and a prune reads before it deletes), so the
    /// prune goes apart, and runs even after a failed write: each part's failure is reported
    /// beside what the other did.
    pub(crate) async fn write_sweep_history_items(
        &self,
        history: &SweepHistory,
    ) -> Result<SweepWritten, StoreError> {
        let written = match &history.record {
            Some(sweep) => self
                .record_sweep_items(sweep, &history.entries, history.prune_before)
                .await
                .map(|()| true),
            None => self
                .record_history_items(&history.entries)
                .await
                .map(|()| false),
        };
        let pruned = self
            .prune_history_items(history.prune_before, history.prune_max)
            .await;
        Ok(SweepWritten::apart(history, written, pruned))
    }

    /// The sweep's entries and its record (one `BatchWriteItem` per 25), after one `UpdateItem`
    /// for its sequence number; then at most one Query each for records past the retention and
    /// past the cap, and one `BatchWriteItem` deleting them.
    async fn record_sweep_items(
        &self,
        sweep: &SweepRecord,
        entries: &[HistoryEntry],
        prune_before: EpochMs,
    ) -> Result<(), StoreError> {
        let seq = self.next_sweep_seq().await?;
        let mut requests = history_requests(entries)?;
        requests.push(
            PutRequest::builder()
                .set_item(Some(sweep_item(sweep, seq)?))
                .build()
                .map(|put| WriteRequest::builder().put_request(put).build())
                .map_err(|e| StoreError::Backend(format!("building a sweep-record write: {e}")))?,
        );
        self.batch_write(ops::RECORD, requests).await?;

        let res = self
            .client
            .query()
            .table_name(self.table_name())
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :lo AND :hi")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", s(SWEEPS))
            .expression_attribute_values(":lo", s("S#"))
            // The bare prefix sorts before every record that finished at the cutoff.
            .expression_attribute_values(":hi", s(sweep_sk_prefix(prune_before)))
            .projection_expression("#pk, #sk")
            .limit(SWEEP_PRUNE_BATCH as i32)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(ops::PRUNE_LIST, &res);
        let mut old = res
            .map_err(|e| self.map_err("Query", e))?
            .items
            .unwrap_or_default();

        let cut = seq - MAX_SWEEPS_KEPT as i64;
        if cut > 0 {
            let res = self
                .client
                .query()
                .table_name(self.table_name())
                .index_name(RECLAIMABLE_INDEX)
                .key_condition_expression("#pk = :pk AND #sk <= :cut")
                .expression_attribute_names("#pk", GSI1_PK)
                .expression_attribute_names("#sk", GSI1_SK)
                .expression_attribute_values(":pk", s(SWEEPS))
                .expression_attribute_values(":cut", n(cut))
                .limit(SWEEP_PRUNE_BATCH as i32)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track(ops::CAP_LIST, &res);
            old.extend(
                res.map_err(|e| self.map_err("Query", e))?
                    .items
                    .unwrap_or_default(),
            );
        }
        let mut deletes: Vec<WriteRequest> = Vec::new();
        let mut seen: Vec<(Option<AttributeValue>, Option<AttributeValue>)> = Vec::new();
        for item in &old {
            let k = (item.get(PK).cloned(), item.get(SK).cloned());
            if seen.contains(&k) {
                continue;
            }
            seen.push(k);
            deletes.extend(delete_of(item));
        }
        if deletes.is_empty() {
            return Ok(());
        }
        self.batch_write(ops::PRUNE_DELETE, deletes).await
    }

    pub(crate) async fn recent_sweep_items(
        &self,
        limit: usize,
    ) -> Result<Vec<SweepRecord>, StoreError> {
        let limit = limit.min(MAX_SWEEPS_READ);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let res = self
            .client
            .query()
            .table_name(self.table_name())
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :p)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", s(SWEEPS))
            .expression_attribute_values(":p", s("S#"))
            .scan_index_forward(false)
            .limit(limit as i32)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(ops::READ, &res);
        let page = res.map_err(|e| self.map_err("Query", e))?;
        let corrupt = |reason: String| StoreError::Corrupt {
            key: "recent sweeps".into(),
            reason,
        };
        page.items
            .unwrap_or_default()
            .iter()
            .map(|item| {
                let Some(AttributeValue::S(text)) = item.get("record") else {
                    return Err(corrupt("a sweep item has no string `record`".into()));
                };
                serde_json::from_str(text)
                    .map_err(|e| corrupt(format!("record is not a sweep record: {e}")))
            })
            .collect()
    }
}
