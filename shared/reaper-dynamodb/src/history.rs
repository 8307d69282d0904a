//! The runs' history on DynamoDB: one item per entry in the run's own history partition
//! (`pk = HISTORY#<runId>`, `sk = H#<at, order-preserving>#<sweepId>`), so a run's newest
//! entries are one Query read backwards with `Limit`. Every entry is also in the `reclaimable`
//! index under `gsi1pk = HISTORY` by `at`, so the retention's prune is one bounded Query of that
//! partition, oldest first, and batched deletes. No Scan, no new index.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, DeleteRequest, PutRequest, ReturnConsumedCapacity, WriteRequest,
};
use reaper_core::history::{HistoryEntry, MAX_HISTORY_READ};
use reaper_core::{EpochMs, StoreError};

use crate::layout::{key_id, n, s, Item, ENTITY, GSI1_PK, GSI1_SK, PK, RECLAIMABLE_INDEX, SK};
use crate::store::DynamoStore;

/// The index partition every history entry sits in (beside `DETACHED` and `RECLAIM`).
pub const HISTORY: &str = "HISTORY";

/// Items per `BatchWriteItem`, DynamoDB's maximum.
const BATCH: usize = 25;

/// Rounds of re-sending a batch's unprocessed items (throttling) before giving up.
const UNPROCESSED_ROUNDS: usize = 5;

mod ops {
    pub const RECORD: &str = "history_record";
    pub const READ: &str = "history_read";
    pub const PRUNE_LIST: &str = "history_prune_list";
    pub const PRUNE_DELETE: &str = "history_prune_delete";
}

/// A run's history partition.
pub fn history_pk(run_id: &str) -> String {
    format!("HISTORY#{}", key_id(run_id))
}

/// `H#` + `at` shifted to an unsigned 20-digit number (string order is time order, negative
/// times included) + `#` + the sweep id: newest first is the partition read backwards.
pub fn history_sk(at: EpochMs, sweep_id: &str) -> String {
    let shifted = (i128::from(at) - i128::from(i64::MIN)) as u64;
    format!("H#{shifted:020}#{}", key_id(sweep_id))
}

fn history_item(e: &HistoryEntry) -> Result<Item, StoreError> {
    let entry = serde_json::to_string(e)
        .map_err(|err| StoreError::Backend(format!("encoding a history entry: {err}")))?;
    Ok(HashMap::from([
        (PK.to_string(), s(history_pk(&e.run_id))),
        (SK.to_string(), s(history_sk(e.at, &e.sweep_id))),
        ("runId".to_string(), s(e.run_id.clone())),
        ("at".to_string(), n(e.at)),
        ("entry".to_string(), s(entry)),
        (GSI1_PK.to_string(), s(HISTORY)),
        (GSI1_SK.to_string(), n(e.at)),
        (ENTITY.to_string(), s("history")),
    ]))
}

impl DynamoStore {
    /// Sends write requests in batches of 25, re-sending what DynamoDB left unprocessed.
    pub(crate) async fn batch_write(
        &self,
        op: &str,
        requests: Vec<WriteRequest>,
    ) -> Result<(), StoreError> {
        for chunk in requests.chunks(BATCH) {
            let mut pending = chunk.to_vec();
            for _ in 0..UNPROCESSED_ROUNDS {
                let res = self
                    .client
                    .batch_write_item()
                    .request_items(self.table_name(), pending)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await;
                self.track(op, &res);
                let out = res.map_err(|e| self.map_err("BatchWriteItem", e))?;
                pending = out
                    .unprocessed_items
                    .and_then(|mut u| u.remove(self.table_name()))
                    .unwrap_or_default();
                if pending.is_empty() {
                    break;
                }
            }
            if !pending.is_empty() {
                return Err(StoreError::Unavailable(format!(
                    "{} history or sweep-record writes stayed unprocessed after \
                     {UNPROCESSED_ROUNDS} rounds (throttled)",
                    pending.len()
                )));
            }
        }
        Ok(())
    }

    pub(crate) async fn record_history_items(
        &self,
        entries: &[HistoryEntry],
    ) -> Result<(), StoreError> {
        self.batch_write(ops::RECORD, history_requests(entries)?)
            .await
    }

    pub(crate) async fn run_history_items(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let limit = limit.min(MAX_HISTORY_READ);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let res = self
            .client
            .query()
            .table_name(self.table_name())
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :h)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", s(history_pk(run_id)))
            .expression_attribute_values(":h", s("H#"))
            .scan_index_forward(false)
            .limit(limit as i32)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(ops::READ, &res);
        let page = res.map_err(|e| self.map_err("Query", e))?;
        let corrupt = |reason: String| StoreError::Corrupt {
            key: format!("history of {run_id}"),
            reason,
        };
        let mut entries = Vec::new();
        for item in page.items.unwrap_or_default() {
            let Some(AttributeValue::S(text)) = item.get("entry") else {
                return Err(corrupt("an entry item has no string `entry`".into()));
            };
            let entry: HistoryEntry = serde_json::from_str(text)
                .map_err(|e| corrupt(format!("entry is not a history entry: {e}")))?;
            // A hashed partition key is shared only by ids with the same hash: keep ours.
            if entry.run_id == run_id {
                entries.push(entry);
            }
        }
        Ok(entries)
    }

    pub(crate) async fn prune_history_items(
        &self,
        before: EpochMs,
        max_entries: usize,
    ) -> Result<u64, StoreError> {
        if max_entries == 0 {
            return Ok(0);
        }
        let limit = i32::try_from(max_entries).unwrap_or(i32::MAX);
        let res = self
            .client
            .query()
            .table_name(self.table_name())
            .index_name(RECLAIMABLE_INDEX)
            .key_condition_expression("#pk = :pk AND #sk < :before")
            .expression_attribute_names("#pk", GSI1_PK)
            .expression_attribute_names("#sk", GSI1_SK)
            .expression_attribute_values(":pk", s(HISTORY))
            .expression_attribute_values(":before", n(before))
            .limit(limit)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(ops::PRUNE_LIST, &res);
        let page = res.map_err(|e| self.map_err("Query", e))?;
        let requests = page
            .items
            .unwrap_or_default()
            .into_iter()
            .take(max_entries)
            .filter_map(|item| {
                let key: Item = [PK, SK]
                    .into_iter()
                    .filter_map(|k| Some((k.to_string(), item.get(k)?.clone())))
                    .collect();
                (key.len() == 2).then_some(key)
            })
            .map(|key| {
                DeleteRequest::builder()
                    .set_key(Some(key))
                    .build()
                    .map(|delete| WriteRequest::builder().delete_request(delete).build())
                    .map_err(|e| StoreError::Backend(format!("building a history delete: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let count = requests.len() as u64;
        self.batch_write(ops::PRUNE_DELETE, requests).await?;
        Ok(count)
    }
}

/// One put per history entry, one per key (DynamoDB refuses a batch naming a key twice).
pub(crate) fn history_requests(entries: &[HistoryEntry]) -> Result<Vec<WriteRequest>, StoreError> {
    let mut items: Vec<(String, String, Item)> = Vec::with_capacity(entries.len());
    for e in entries {
        let item = history_item(e)?;
        let key = (history_pk(&e.run_id), history_sk(e.at, &e.sweep_id));
        items.retain(|(pk, sk, _)| (pk, sk) != (&key.0, &key.1));
        items.push((key.0, key.1, item));
    }
    items
        .into_iter()
        .map(|(_, _, item)| {
            PutRequest::builder()
                .set_item(Some(item))
                .build()
                .map(|put| WriteRequest::builder().put_request(put).build())
                .map_err(|e| StoreError::Backend(format!("building a history write: {e}")))
        })
        .collect()
}
