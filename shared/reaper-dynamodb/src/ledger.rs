//! [`ReclaimLedger`] on reclaim-ledger items (`pk = RECLAIM#<runId>`, `sk = RECLAIM`), each in
//! the sparse index under `gsi1pk = RECLAIM` by `nextAttemptAt`: the due listing is one bounded
//! Query of that index partition and the counts read the (small) partition whole. No scan.

use aws_sdk_dynamodb::types::ReturnConsumedCapacity;
use reaper_core::{EpochMs, LedgerCounts, ReclaimIntent, ReclaimLedger, StoreError};

use crate::layout::{
    intent_from_item, intent_item, intent_key_of, key, n, reclaim_pk, s, Item, GSI1_PK, GSI1_SK,
    PK, RECLAIM, RECLAIMABLE_INDEX, RECLAIM_SK,
};
use crate::runs::condition_failed;
use crate::store::DynamoStore;

/// Request counter names, one per ledger operation (see [`RequestStats`](crate::RequestStats)).
mod ops {
    pub const RECORD: &str = "reclaim_record";
    pub const UPDATE: &str = "reclaim_update";
    pub const RESOLVE: &str = "reclaim_resolve";
    pub const GET: &str = "reclaim_get";
    pub const DUE: &str = "reclaim_due";
    pub const COUNTS: &str = "reclaim_counts";
}

impl DynamoStore {
    /// `PutItem` of the whole entry on `condition` (over `#pk`): whether it landed. A lost
    /// condition is an answer (`false`), not an error.
    async fn put_intent(
        &self,
        op: &str,
        intent: &ReclaimIntent,
        condition: &str,
    ) -> Result<bool, StoreError> {
        let res = self
            .client
            .put_item()
            .table_name(self.table_name())
            .set_item(Some(intent_item(intent)))
            .condition_expression(condition)
            .expression_attribute_names("#pk", PK)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(op, &res);
        match res {
            Ok(_) => Ok(true),
            Err(err) if condition_failed(&err).is_some() => Ok(false),
            Err(err) => Err(self.map_err("PutItem", err)),
        }
    }

    /// One page of the ledger's index partition, `nextAttemptAt <= due_by` when given, at most
    /// `limit` items when given.
    async fn query_ledger(
        &self,
        op: &str,
        due_by: Option<EpochMs>,
        limit: Option<i32>,
        start: Option<Item>,
    ) -> Result<(Vec<Item>, Option<Item>), StoreError> {
        let mut q = self
            .client
            .query()
            .table_name(self.table_name())
            .index_name(RECLAIMABLE_INDEX)
            .expression_attribute_names("#pk", GSI1_PK)
            .expression_attribute_values(":pk", s(RECLAIM))
            .set_limit(limit)
            .set_exclusive_start_key(start)
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        q = match due_by {
            Some(now) => q
                .key_condition_expression("#pk = :pk AND #sk <= :now")
                .expression_attribute_names("#sk", GSI1_SK)
                .expression_attribute_values(":now", n(now)),
            None => q.key_condition_expression("#pk = :pk"),
        };
        let res = q.send().await;
        self.track(op, &res);
        let page = res.map_err(|e| self.map_err("Query", e))?;
        let next = page.last_evaluated_key.filter(|k| !k.is_empty());
        Ok((page.items.unwrap_or_default(), next))
    }
}

/// Every operation is one request except the listings, which page. Index reads are eventually
/// consistent: an entry resolved or rescheduled a moment ago may still be listed (or counted)
/// once; settling an entry is idempotent and `update_intent` never resurrects one.
#[async_trait::async_trait]
impl ReclaimLedger for DynamoStore {
    /// `PutItem` on `attribute_not_exists(pk)`: of two racing sweeps exactly one inserts, and
    /// an existing entry keeps its `firstSeen` and attempt count.
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.put_intent(ops::RECORD, intent, "attribute_not_exists(#pk)")
            .await
    }

    /// `PutItem` of the whole entry on `attribute_exists(pk)`: replaces every attribute (an
    /// optional one the intent no longer has is cleared) and never recreates a resolved entry.
    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.put_intent(ops::UPDATE, intent, "attribute_exists(#pk)")
            .await
    }

    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        let res = self
            .client
            .delete_item()
            .table_name(self.table_name())
            .set_key(Some(key(reclaim_pk(run_id), RECLAIM_SK)))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(ops::RESOLVE, &res);
        res.map_err(|e| self.map_err("DeleteItem", e))?;
        Ok(())
    }

    /// A strongly consistent read. An entry that does not parse is [`StoreError::Corrupt`].
    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        let res = self
            .client
            .get_item()
            .table_name(self.table_name())
            .set_key(Some(key(reclaim_pk(run_id), RECLAIM_SK)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(ops::GET, &res);
        res.map_err(|e| self.map_err("GetItem", e))?
            .item
            .map(|item| intent_from_item(&item))
            .transpose()
    }

    /// One Query `gsi1pk = RECLAIM AND gsi1sk <= now` in `nextAttemptAt` order with `Limit` set
    /// to what is still missing, paged only until `limit` entries are collected. Entries with
    /// the same `nextAttemptAt` come back ordered by run id among those read; which of them
    /// make the cut at the limit follows the index's own (stable) order, since reading every
    /// tie to sort them would make the read unbounded.
    ///
    /// An entry that does not parse is skipped, logged at error level naming it and counted in
    /// [`RequestStats::corrupt_items_skipped`](crate::RequestStats): one bad item must not stop
    /// every other retry. [`ledger_counts`](ReclaimLedger::ledger_counts) keeps counting it.
    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        let mut due = Vec::new();
        let mut skipped = 0;
        let mut start = None;
        while due.len() < limit {
            let missing = i32::try_from(limit - due.len()).unwrap_or(i32::MAX);
            let page_limit = self.options.page_limit.map_or(missing, |p| p.min(missing));
            let (items, next) = self
                .query_ledger(ops::DUE, Some(now), Some(page_limit), start.take())
                .await?;
            for item in &items {
                match intent_from_item(item) {
                    Ok(intent) => due.push(intent),
                    Err(error) => {
                        tracing::error!(entry = %intent_key_of(item), %error,
                            "skipping a corrupt reclaim-ledger entry; no sweep can retry it until it is repaired or deleted");
                        skipped += 1;
                    }
                }
            }
            match next {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        self.counters.corrupt_skipped(skipped);
        due.sort_by(|a, b| (a.next_attempt_at, &a.run_id).cmp(&(b.next_attempt_at, &b.run_id)));
        Ok(due)
    }

    /// One Query of the ledger's index partition, paged to the end: the oldest `firstSeen`
    /// needs every entry (the index is sorted by `nextAttemptAt`), and the ledger is small
    /// (an entry lives from a terminal write until its sandbox is confirmed gone). A count-only
    /// Query would cost the same capacity (DynamoDB charges for the items read either way) and
    /// a second request for the leaks.
    ///
    /// An entry that does not parse counts as pending and as leaked: no sweep can act on it
    /// (`due_intents` skips it), so its sandbox may be running until someone repairs it.
    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        let mut counts = LedgerCounts::default();
        let mut start = None;
        loop {
            let (items, next) = self
                .query_ledger(ops::COUNTS, None, self.options.page_limit, start.take())
                .await?;
            for item in &items {
                counts.pending += 1;
                match intent_from_item(item) {
                    Ok(intent) => {
                        counts.leaked += u64::from(intent.is_leak());
                        counts.oldest_first_seen = Some(
                            counts
                                .oldest_first_seen
                                .map_or(intent.first_seen, |t| t.min(intent.first_seen)),
                        );
                    }
                    Err(error) => {
                        tracing::error!(entry = %intent_key_of(item), %error,
                            "a reclaim-ledger entry is corrupt; counted as leaked");
                        counts.leaked += 1;
                    }
                }
            }
            match next {
                Some(k) => start = Some(k),
                None => return Ok(counts),
            }
        }
    }
}
