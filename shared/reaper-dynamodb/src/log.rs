//! [`DeliveryLog`] as items under the run's partition: a meta item (`sk = LOG`) with
//! `nextSeq`, `closed`, `lastAppendAt`, and one item per chunk (`sk = LOG#<seq:020>`).
//!
//! An append is one `TransactWriteItems`: an optional `ConditionCheck` on the run item
//! (`driverEpoch <= held`: the fence), an `Update` of the meta item conditional on the
//! `nextSeq` the writer expects and on the log being open, and a `Put` per chunk. So the
//! chunks, the sequence numbers and the fence land together or not at all.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Put, ReturnConsumedCapacity,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochMs, Fenced, LogEntry, LogSnapshot, StoreError,
};

use crate::error::map_cancelled;
use crate::layout::{
    entry_sk, key, log, n, run, run_pk, s, Item, Reader, ENTITY, LOG_SK, PK, RUN_SK, SK, TTL,
};
use crate::store::{DynamoStore, Expr};

/// Items per transaction. DynamoDB itself now allows 100; 25 is the long-standing limit that
/// every emulator and older region honours, and keeps one append's cost predictable.
pub const MAX_TRANSACTION_ITEMS: usize = 25;
/// Bytes of chunk JSON per transaction, under the 4 MB transaction limit with room for keys.
const MAX_TRANSACTION_BYTES: usize = 3_500_000;
/// One item holds at most 400 KB, attribute names and keys included.
pub const MAX_CHUNK_BYTES: usize = 390_000;
/// Retries of one batch after a lost `nextSeq` guess or a transaction conflict.
const MAX_APPEND_ATTEMPTS: usize = 16;
/// Bounds the per-process `nextSeq` cache; it is only a guess, so forgetting is harmless.
const NEXT_SEQ_CACHE_LIMIT: usize = 10_000;

fn code(reason: Option<&CancellationReason>) -> &str {
    reason.and_then(|r| r.code()).unwrap_or("None")
}

enum BatchResult {
    Written(u64),
    Closed,
    Superseded(u64),
}

impl DynamoStore {
    /// One write made conditional on the run's epoch: a `TransactWriteItems` of a
    /// `ConditionCheck` on the run item (`driverEpoch <= held`; a missing run record does not
    /// refuse it) and the write itself, so the two land together or not at all.
    pub(crate) async fn fenced_write(
        &self,
        op: &str,
        run_id: &str,
        held: u64,
        write: TransactWriteItem,
    ) -> Result<Fenced<()>, StoreError> {
        let table = self.table_name();
        let check = ConditionCheck::builder()
            .table_name(table)
            .set_key(Some(key(run_pk(run_id), RUN_SK)))
            .condition_expression("attribute_not_exists(#epoch) OR #epoch <= :held")
            .expression_attribute_names("#epoch", run::DRIVER_EPOCH)
            .expression_attribute_values(":held", n(held))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::Backend(format!("building the {op} of run {run_id}: {e}")))?;
        let res = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().condition_check(check).build())
            .transact_items(write)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(op, &res);
        let err = match res {
            Ok(_) => return Ok(Fenced::Written(())),
            Err(err) => err,
        };
        let reasons = match &err {
            SdkError::ServiceError(ctx) => match ctx.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    c.cancellation_reasons().to_vec()
                }
                _ => return Err(self.map_err("TransactWriteItems", err)),
            },
            _ => return Err(self.map_err("TransactWriteItems", err)),
        };
        let fence_reason = reasons.first();
        if code(fence_reason) == "ConditionalCheckFailed" {
            let observed = fence_reason
                .and_then(|r| r.item())
                .map(|item| Reader::new(item, run_id.to_string()).opt_num::<u64>(run::DRIVER_EPOCH))
                .transpose()?
                .flatten();
            if let Some(observed) = observed.filter(|o| *o > held) {
                return Ok(Fenced::Superseded { observed });
            }
        }
        Err(map_cancelled("TransactWriteItems", table, &reasons))
    }
    fn cached_next_seq(&self, run_id: &str) -> u64 {
        let cache = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        cache.get(run_id).copied().unwrap_or(0)
    }

    fn remember_next_seq(&self, run_id: &str, next: u64) {
        let mut cache = self.next_seq.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= NEXT_SEQ_CACHE_LIMIT && !cache.contains_key(run_id) {
            cache.clear();
        }
        cache.insert(run_id.to_string(), next);
    }

    async fn get_log_meta(&self, op: &str, run_id: &str) -> Result<Option<Item>, StoreError> {
        let res = self
            .client
            .get_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), LOG_SK)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track(op, &res);
        let item = res.map_err(|e| self.map_err("GetItem", e))?.item;
        // An expired meta means the whole log aged out (every entry expires no later).
        match item {
            Some(item) if Reader::new(&item, run_id.to_string()).expired(self.now_secs())? => {
                Ok(None)
            }
            other => Ok(other),
        }
    }

    /// An empty append writes nothing: it only answers as a real one would.
    async fn append_nothing(
        &self,
        run_id: &str,
        fence: Option<u64>,
    ) -> Result<Fenced<Appended>, StoreError> {
        if let Some(held) = fence {
            let res = self
                .client
                .get_item()
                .table_name(self.table_name())
                .set_key(Some(key(run_pk(run_id), RUN_SK)))
                .consistent_read(true)
                .projection_expression("#epoch")
                .expression_attribute_names("#epoch", run::DRIVER_EPOCH)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track("append", &res);
            if let Some(item) = res.map_err(|e| self.map_err("GetItem", e))?.item {
                let observed =
                    Reader::new(&item, run_id.to_string()).opt_num::<u64>(run::DRIVER_EPOCH)?;
                if let Some(observed) = observed.filter(|o| *o > held) {
                    return Ok(Fenced::Superseded { observed });
                }
            }
        }
        let meta = self.get_log_meta("append", run_id).await?;
        let (len, closed) = match &meta {
            Some(m) => {
                let r = Reader::new(m, run_id.to_string());
                (
                    r.opt_num(log::NEXT_SEQ)?.unwrap_or(0),
                    r.opt_bool(log::CLOSED)?.unwrap_or(false),
                )
            }
            None => (0, false),
        };
        Ok(Fenced::Written(if closed {
            Appended::Closed
        } else {
            Appended::At { first: len }
        }))
    }

    async fn append_batch(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: &[&str],
        now: EpochMs,
    ) -> Result<BatchResult, StoreError> {
        let table = self.table_name();
        let pk = run_pk(run_id);
        let ttl = self.retention_ttl();
        let build_err = |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::Backend(format!("building the append of run {run_id}: {e}"))
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let expected = self.cached_next_seq(run_id);
            let next = expected + chunks.len() as u64;
            let mut items = Vec::with_capacity(chunks.len() + 2);
            if let Some(held) = fence {
                items.push(
                    TransactWriteItem::builder()
                        .condition_check(
                            ConditionCheck::builder()
                                .table_name(table)
                                .set_key(Some(key(pk.clone(), RUN_SK)))
                                // A missing run record does not refuse the append.
                                .condition_expression(
                                    "attribute_not_exists(#epoch) OR #epoch <= :held",
                                )
                                .expression_attribute_names("#epoch", run::DRIVER_EPOCH)
                                .expression_attribute_values(":held", n(held))
                                .return_values_on_condition_check_failure(
                                    ReturnValuesOnConditionCheckFailure::AllOld,
                                )
                                .build()
                                .map_err(build_err)?,
                        )
                        .build(),
                );
            }
            let mut e = Expr::default();
            e.set(log::NEXT_SEQ, n(next));
            e.set(log::LAST_APPEND_AT, n(now));
            e.set(TTL, n(ttl));
            e.set(ENTITY, s("log"));
            e.set(run::RUN_ID, s(run_id));
            let seq = e.name(log::NEXT_SEQ);
            let closed = e.name(log::CLOSED);
            let expected_v = e.value(n(expected));
            let seq_cond = if expected == 0 {
                format!("(attribute_not_exists({seq}) OR {seq} = {expected_v})")
            } else {
                format!("{seq} = {expected_v}")
            };
            let open_v = e.value(AttributeValue::Bool(false));
            items.push(
                TransactWriteItem::builder()
                    .update(
                        Update::builder()
                            .table_name(table)
                            .set_key(Some(key(pk.clone(), LOG_SK)))
                            .update_expression(e.update_expression())
                            .condition_expression(format!(
                                "{seq_cond} AND (attribute_not_exists({closed}) OR {closed} = {open_v})"
                            ))
                            .set_expression_attribute_names(e.names())
                            .set_expression_attribute_values(e.values())
                            .return_values_on_condition_check_failure(
                                ReturnValuesOnConditionCheckFailure::AllOld,
                            )
                            .build()
                            .map_err(build_err)?,
                    )
                    .build(),
            );
            for (i, chunk) in chunks.iter().enumerate() {
                let seq_no = expected + i as u64;
                let mut item = key(pk.clone(), &entry_sk(seq_no));
                item.insert(ENTITY.into(), s("entry"));
                item.insert(log::SEQ.into(), n(seq_no));
                item.insert(log::CHUNK.into(), s(chunk.to_string()));
                item.insert(TTL.into(), n(ttl));
                items.push(
                    TransactWriteItem::builder()
                        .put(
                            Put::builder()
                                .table_name(table)
                                .set_item(Some(item))
                                .build()
                                .map_err(build_err)?,
                        )
                        .build(),
                );
            }
            let res = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track("append", &res);
            let reasons = match res {
                Ok(_) => {
                    self.remember_next_seq(run_id, next);
                    return Ok(BatchResult::Written(expected));
                }
                Err(err) => {
                    let reasons = match &err {
                        SdkError::ServiceError(ctx) => match ctx.err() {
                            TransactWriteItemsError::TransactionCanceledException(c) => {
                                Some(c.cancellation_reasons().to_vec())
                            }
                            _ => None,
                        },
                        _ => None,
                    };
                    match reasons {
                        Some(reasons) => reasons,
                        None => return Err(self.map_err("TransactWriteItems", err)),
                    }
                }
            };
            let (fence_reason, meta_reason) = if fence.is_some() {
                (reasons.first(), reasons.get(1))
            } else {
                (None, reasons.first())
            };
            if code(fence_reason) == "ConditionalCheckFailed" {
                let observed = fence_reason
                    .and_then(|r| r.item())
                    .map(|item| {
                        Reader::new(item, run_id.to_string()).opt_num::<u64>(run::DRIVER_EPOCH)
                    })
                    .transpose()?
                    .flatten();
                return match observed {
                    Some(observed) => Ok(BatchResult::Superseded(observed)),
                    None => Err(map_cancelled("TransactWriteItems", table, &reasons)),
                };
            }
            if code(meta_reason) == "ConditionalCheckFailed" {
                let old = meta_reason.and_then(|r| r.item());
                let (actual, is_closed) = match old {
                    Some(item) => {
                        let r = Reader::new(item, run_id.to_string());
                        (
                            r.opt_num(log::NEXT_SEQ)?.unwrap_or(0),
                            r.opt_bool(log::CLOSED)?.unwrap_or(false),
                        )
                    }
                    None => (0, false),
                };
                if is_closed {
                    return Ok(BatchResult::Closed);
                }
                // Another writer moved nextSeq (or this process had no guess): retry at its value.
                self.remember_next_seq(run_id, actual);
            } else if !reasons
                .iter()
                .any(|r| r.code() == Some("TransactionConflict"))
            {
                return Err(map_cancelled("TransactWriteItems", table, &reasons));
            }
            if attempt >= MAX_APPEND_ATTEMPTS {
                return Err(StoreError::Unavailable(format!(
                    "append to the log of run {run_id} lost {attempt} races in a row; retry later"
                )));
            }
            if reasons
                .iter()
                .any(|r| r.code() == Some("TransactionConflict"))
            {
                // A concurrent transaction holds the item: back off a little, growing.
                tokio::time::sleep(std::time::Duration::from_millis(5 << attempt.min(6))).await;
            }
        }
    }
}

#[async_trait::async_trait]
impl DeliveryLog for DynamoStore {
    /// More than [`MAX_TRANSACTION_ITEMS`] − 2 chunks (or about 3.5 MB) go out as several
    /// transactions, each atomic with its own fence check: if the holder is superseded (or the
    /// log closed) between two of them, the earlier ones stay (they landed while the holder was
    /// current) and the answer is `Superseded` (or `Closed`).
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        if chunks.is_empty() {
            return self.append_nothing(run_id, fence).await;
        }
        let serialized = chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let json = c.as_json();
                if json.len() > MAX_CHUNK_BYTES {
                    return Err(StoreError::Backend(format!(
                        "chunk {i} of run {run_id} is {} bytes; a DynamoDB item holds at most 400 KB, \
                         so split the chunk before appending it",
                        json.len()
                    )));
                }
                Ok(json)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let per_batch = MAX_TRANSACTION_ITEMS - 1 - usize::from(fence.is_some());
        let mut first = None;
        let mut rest = serialized.as_slice();
        while !rest.is_empty() {
            let mut take = 0;
            let mut bytes = 0;
            while take < rest.len()
                && take < per_batch
                && (take == 0 || bytes + rest[take].len() <= MAX_TRANSACTION_BYTES)
            {
                bytes += rest[take].len();
                take += 1;
            }
            let (batch, tail) = rest.split_at(take);
            match self.append_batch(run_id, fence, batch, now).await? {
                BatchResult::Written(at) => {
                    first.get_or_insert(at);
                }
                BatchResult::Closed => return Ok(Fenced::Written(Appended::Closed)),
                BatchResult::Superseded(observed) => return Ok(Fenced::Superseded { observed }),
            }
            rest = tail;
        }
        Ok(Fenced::Written(Appended::At {
            first: first.unwrap_or(0),
        }))
    }

    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        _now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        let mut e = Expr::default();
        e.set(log::CLOSED, AttributeValue::Bool(true));
        e.set(TTL, n(self.retention_ttl()));
        e.set(ENTITY, s("log"));
        e.set(run::RUN_ID, s(run_id));
        let seq = e.name(log::NEXT_SEQ);
        let zero = e.value(n(0));
        e.set_raw(log::NEXT_SEQ, format!("if_not_exists({seq}, {zero})"));
        if let Some(held) = fence {
            let update = Update::builder()
                .table_name(self.table_name())
                .set_key(Some(key(run_pk(run_id), LOG_SK)))
                .update_expression(e.update_expression())
                .set_expression_attribute_names(e.names())
                .set_expression_attribute_values(e.values())
                .build()
                .map_err(|e| {
                    StoreError::Backend(format!("building the close of run {run_id}: {e}"))
                })?;
            let write = TransactWriteItem::builder().update(update).build();
            return self.fenced_write("close", run_id, held, write).await;
        }
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), LOG_SK)))
            .update_expression(e.update_expression())
            .set_expression_attribute_names(e.names())
            .set_expression_attribute_values(e.values())
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("close", &res);
        res.map_err(|e| self.map_err("UpdateItem", e))?;
        Ok(Fenced::Written(()))
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        let Some(meta) = self.get_log_meta("snapshot", run_id).await? else {
            return Ok(LogSnapshot::default());
        };
        let r = Reader::new(&meta, run_id.to_string());
        Ok(LogSnapshot {
            len: r.opt_num(log::NEXT_SEQ)?.unwrap_or(0),
            last_append_at: r.opt_num(log::LAST_APPEND_AT)?,
            closed: r.opt_bool(log::CLOSED)?.unwrap_or(false),
        })
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let now_secs = self.now_secs();
        let mut start: Option<Item> = None;
        loop {
            let want = limit - out.len();
            let page_limit = self
                .options
                .page_limit
                .map_or(want, |p| want.min(p.max(1) as usize))
                .min(i32::MAX as usize) as i32;
            let res = self
                .client
                .query()
                .table_name(self.table_name())
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :from AND :to")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":pk", s(run_pk(run_id)))
                .expression_attribute_values(":from", s(entry_sk(from)))
                .expression_attribute_values(":to", s(entry_sk(u64::MAX)))
                .consistent_read(true)
                .limit(page_limit)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track("read", &res);
            let page = res.map_err(|e| self.map_err("Query", e))?;
            for item in page.items() {
                let r = Reader::new(item, format!("{run_id} log entry"));
                if r.expired(now_secs)? {
                    continue;
                }
                let offset: u64 = r.num(log::SEQ)?;
                let raw = r.str(log::CHUNK)?;
                let chunk = Chunk::from_json(&raw).ok_or_else(|| StoreError::Corrupt {
                    key: format!("{run_id} log entry {offset}"),
                    reason: "chunk is not a JSON object".into(),
                })?;
                out.push(LogEntry { offset, chunk });
                if out.len() >= limit {
                    return Ok(out);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }
}
