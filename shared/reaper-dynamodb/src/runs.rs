//! [`RunStore`] on the run items and the two indexes.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
    Select,
};
use reaper_core::{
    BoundedCount, EpochBump, EpochMs, Fenced, NewRun, Patch, ReclaimableCursor, ReclaimablePage,
    ReclaimableQuery, RunPatch, RunRecord, RunStatus, RunStore, RunStoreCapabilities, StoreError,
    TerminalWrite,
};

use crate::error::CONDITION_FAILED;
use crate::layout::{
    self, indexed, json_to_attr, key, n, run, run_error_value, run_from_item, run_id_of, run_item,
    run_pk, s, sandbox_gsi_pk, status_value, thread_gsi_pk, Item, DETACHED, GSI1_PK, GSI1_SK,
    GSI2_PK, GSI3_PK, LOG_SK, PK, RECLAIMABLE_INDEX, RUN_SK, SANDBOX_INDEX, THREAD_INDEX, TTL,
};
use crate::store::{DynamoStore, Expr};

pub use reaper_core::ports::ReclaimableListing;

/// The greatest instant a listing reaches: 2^53 - 1 ms, the same bound as the SQL stores.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Most unlistable items one sweep reports: enough to see the problem, a bounded read.
pub const MAX_UNLISTABLE_REPORTED: usize = 100;

/// Query pages one backlog count reads at most, so a sweep's requests stay constant whatever
/// the backlog (each page reads up to 1 MB of the index, a few thousand runs).
pub const MAX_COUNT_PAGES: usize = 2;

/// Operation errors that can carry the item of a failed condition.
pub(crate) trait ConditionItem {
    fn old_item(&self) -> Option<Item>;
}

macro_rules! condition_item {
    ($($t:ty),*) => {$(
        impl ConditionItem for $t {
            fn old_item(&self) -> Option<Item> {
                match self {
                    Self::ConditionalCheckFailedException(e) => e.item().cloned(),
                    _ => None,
                }
            }
        }
    )*};
}
condition_item!(
    aws_sdk_dynamodb::operation::put_item::PutItemError,
    aws_sdk_dynamodb::operation::update_item::UpdateItemError,
    aws_sdk_dynamodb::operation::delete_item::DeleteItemError
);

/// The item a failed condition carried back (`ReturnValuesOnConditionCheckFailure::AllOld`):
/// `Some(None)` when the condition failed on a missing item, `None` for any other error.
pub(crate) fn condition_failed<E>(
    err: &SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> Option<Option<Item>>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + ConditionItem,
{
    match err {
        SdkError::ServiceError(ctx) if ctx.err().code() == Some(CONDITION_FAILED) => {
            Some(ctx.err().old_item())
        }
        _ => None,
    }
}

/// The listing position of an index key (`LastEvaluatedKey`): its `detachedSince` and the run
/// id its item key names (for an id too long for a key, the key's digest form, which
/// [`run_pk`] maps back to the same key).
fn position_of(k: &Item) -> Option<ReclaimableCursor> {
    let detached_since = match k.get(GSI1_SK) {
        Some(AttributeValue::N(v)) => v.parse().ok()?,
        _ => return None,
    };
    match k.get(PK) {
        Some(AttributeValue::S(pk)) => Some(ReclaimableCursor {
            detached_since,
            run_id: pk.strip_prefix("RUN#")?.to_string(),
        }),
        _ => None,
    }
}

impl DynamoStore {
    async fn get_run_item(&self, run_id: &str) -> Result<Option<Item>, StoreError> {
        let res = self
            .client
            .get_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), RUN_SK)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("get", &res);
        Ok(res.map_err(|e| self.map_err("GetItem", e))?.item)
    }

    /// Every detached `running` run with `detachedSince <= now - ttl_ms`, from the sparse index,
    /// paginated to the end. Items that do not parse are returned apart, so one bad item never
    /// hides the others.
    pub async fn list_reclaimable_report(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<ReclaimableListing, StoreError> {
        let cutoff = now.saturating_sub(ttl_ms.min(i64::MAX as u64) as i64);
        let mut listing = ReclaimableListing::default();
        let mut start: Option<Item> = None;
        loop {
            let res = self
                .client
                .query()
                .table_name(self.table_name())
                .index_name(RECLAIMABLE_INDEX)
                .key_condition_expression("#pk = :pk AND #sk <= :cutoff")
                .expression_attribute_names("#pk", GSI1_PK)
                .expression_attribute_names("#sk", GSI1_SK)
                .expression_attribute_values(":pk", s(DETACHED))
                .expression_attribute_values(":cutoff", n(cutoff))
                .set_limit(self.options.page_limit)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track("list_reclaimable", &res);
            let page = res.map_err(|e| self.map_err("Query", e))?;
            for item in page.items() {
                match run_from_item(item) {
                    // The index is eventually consistent and a racing update may not have
                    // fixed it yet: the contract is `running` rows only.
                    Ok(r) if indexed(r.status, r.detached_since) => listing.runs.push(r),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(run_id = %run_id_of(item), error = %e,
                            "skipping a corrupt run item in the reclaimable listing");
                        listing.corrupt.push(e);
                    }
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        self.counters.corrupt_skipped(listing.corrupt.len() as u64);
        Ok(listing)
    }

    /// One bounded page of the listing: a Query on the sparse index over the page's
    /// `detachedSince` range with `Limit`, resumed with an `ExclusiveStartKey` built from the
    /// cursor, so a page reads about `limit` items whatever the backlog. Runs detached in the
    /// same millisecond come in the index's own stable order (see LAYOUT.md). Items that do not
    /// parse are reported and count toward the page.
    pub async fn list_reclaimable_page_report(
        &self,
        q: &ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        let mut page = ReclaimablePage::default();
        let lower = q.detached_after.map_or(i64::MIN, |a| a.saturating_add(1));
        if q.limit == 0 || lower > q.detached_until {
            return Ok(page);
        }
        // DynamoDB refuses a start key outside the key condition ("does not match the range key
        // predicate"), and a sweep's saved cursor falls behind the TTL cutoff as time passes:
        // a cursor below the floor starts the page at the floor, one past the range ends it.
        let cursor = match &q.after {
            Some(c) if c.detached_since > q.detached_until => return Ok(page),
            Some(c) if c.detached_since < lower => None,
            other => other.as_ref(),
        };
        let mut start = cursor.map(|c| {
            let mut k = key(run_pk(&c.run_id), RUN_SK);
            k.insert(GSI1_PK.into(), s(DETACHED));
            k.insert(GSI1_SK.into(), n(c.detached_since));
            k
        });
        loop {
            let want = q.limit - page.runs.len() - page.corrupt.len();
            let want = i32::try_from(want).unwrap_or(i32::MAX);
            let want = self.options.page_limit.map_or(want, |p| p.min(want));
            let res = self
                .client
                .query()
                .table_name(self.table_name())
                .index_name(RECLAIMABLE_INDEX)
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :lower AND :upper")
                .expression_attribute_names("#pk", GSI1_PK)
                .expression_attribute_names("#sk", GSI1_SK)
                .expression_attribute_values(":pk", s(DETACHED))
                .expression_attribute_values(":lower", n(lower))
                .expression_attribute_values(":upper", n(q.detached_until))
                .limit(want)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track("list_reclaimable_page", &res);
            let out = res.map_err(|e| self.map_err("Query", e))?;
            for item in out.items() {
                match run_from_item(item) {
                    // The index is eventually consistent: `running` rows only.
                    Ok(r) if indexed(r.status, r.detached_since) => {
                        page.runs.push(std::sync::Arc::new(r))
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(run_id = %run_id_of(item), error = %e,
                            "skipping a corrupt run item in the reclaimable listing");
                        page.corrupt.push(e);
                    }
                }
            }
            let Some(last) = out.last_evaluated_key.filter(|k| !k.is_empty()) else {
                break;
            };
            if page.runs.len() + page.corrupt.len() >= q.limit {
                // The last evaluated item's position, whether it parsed or not.
                page.next = position_of(&last);
                break;
            }
            start = Some(last);
        }
        // The items no page can reach are reported with the sweep's first page (the range past
        // the TTL, from its start), so every sweep reports them once, as SQLite's does.
        if q.after.is_none() && q.detached_after.is_none() {
            page.corrupt.extend(self.unlistable().await?);
        }
        self.counters.corrupt_skipped(page.corrupt.len() as u64);
        Ok(page)
    }

    /// Detached runs in the index that no listing range reaches: `gsi1sk` past 2^53 - 1, which
    /// is no time in milliseconds a sweep's cutoff can be (the rule SQLite's and D1's
    /// `LIST_UNLISTABLE` apply to `detached_since`). One Query of that end of the `DETACHED`
    /// partition, at most `MAX_UNLISTABLE_REPORTED` items, each as [`StoreError::Corrupt`]
    /// naming its run. A status that is no run status (`RUNNING`) is reported by the page that
    /// reads it: a detached item stays in the index whatever its status says, unless it is a
    /// run status other than `running` ([`layout::LEAVES_RECLAIMABLE`], LAYOUT.md).
    pub async fn unlistable(&self) -> Result<Vec<StoreError>, StoreError> {
        let res = self
            .client
            .query()
            .table_name(self.table_name())
            .index_name(RECLAIMABLE_INDEX)
            .key_condition_expression("#pk = :pk AND #sk > :max")
            .expression_attribute_names("#pk", GSI1_PK)
            .expression_attribute_names("#sk", GSI1_SK)
            .expression_attribute_values(":pk", s(DETACHED))
            .expression_attribute_values(":max", n(MAX_SAFE_INTEGER))
            .limit(MAX_UNLISTABLE_REPORTED as i32)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("list_unlistable", &res);
        let out = res.map_err(|e| self.map_err("Query", e))?;
        Ok(out
            .items()
            .iter()
            .map(|item| {
                let since = match item.get(GSI1_SK) {
                    Some(AttributeValue::N(v)) => v.clone(),
                    other => format!("{other:?}"),
                };
                tracing::error!(run_id = %run_id_of(item), detached_since = %since,
                    "a detached run no listing reaches");
                StoreError::Corrupt {
                    key: run_id_of(item),
                    reason: format!(
                        "the detached run's detachedSince is {since}, which is no time in \
                         milliseconds since the Unix epoch (expected 0 to {MAX_SAFE_INTEGER}); \
                         no listing reaches it"
                    ),
                }
            })
            .collect())
    }

    /// The bounded count of the listing's range: a `Select = COUNT` Query on the sparse index
    /// (no item is returned or parsed), `Limit` set to what is still missing of the bound plus
    /// one, over at most [`MAX_COUNT_PAGES`] pages (each reads up to 1 MB of index). A count
    /// cut short by the page cap answers "at least" what it counted.
    pub async fn count_reclaimable_report(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        let lower = detached_after.map_or(i64::MIN, |a| a.saturating_add(1));
        if lower > detached_until {
            return Ok(BoundedCount::of(0, at_most));
        }
        let wanted = at_most.saturating_add(1);
        let mut seen: u64 = 0;
        let mut start: Option<Item> = None;
        for _ in 0..MAX_COUNT_PAGES {
            let want = i32::try_from(wanted - seen).unwrap_or(i32::MAX);
            let want = self.options.page_limit.map_or(want, |p| p.min(want));
            let res = self
                .client
                .query()
                .table_name(self.table_name())
                .index_name(RECLAIMABLE_INDEX)
                .select(Select::Count)
                .key_condition_expression("#pk = :pk AND #sk BETWEEN :lower AND :upper")
                .expression_attribute_names("#pk", GSI1_PK)
                .expression_attribute_names("#sk", GSI1_SK)
                .expression_attribute_values(":pk", s(DETACHED))
                .expression_attribute_values(":lower", n(lower))
                .expression_attribute_values(":upper", n(detached_until))
                .limit(want)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track("count_reclaimable", &res);
            let out = res.map_err(|e| self.map_err("Query", e))?;
            seen += u64::try_from(out.count()).unwrap_or(0);
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(last) if seen < wanted => start = Some(last),
                // The range is exhausted, or the bound passed: the count says which.
                _ => return Ok(BoundedCount::of(seen, at_most)),
            }
        }
        // The page cap came first: at least this many.
        Ok(BoundedCount {
            count: seen.min(at_most),
            exact: false,
        })
    }

    /// Runs of a thread from the thread index, ascending or descending by `startedAt`, stopping
    /// once `take` rows passed `keep`.
    async fn query_thread(
        &self,
        op: &str,
        thread_id: &str,
        forward: bool,
        only_running: bool,
        take: Option<usize>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let mut rows = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut q = self
                .client
                .query()
                .table_name(self.table_name())
                .index_name(THREAD_INDEX)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", GSI2_PK)
                .expression_attribute_values(":pk", s(thread_gsi_pk(thread_id)))
                .scan_index_forward(forward)
                .set_limit(self.options.page_limit)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total);
            if only_running {
                q = q
                    .filter_expression("#status = :running")
                    .expression_attribute_names("#status", run::STATUS)
                    .expression_attribute_values(":running", status_value(RunStatus::Running));
            }
            let res = q.send().await;
            self.track(op, &res);
            let page = res.map_err(|e| self.map_err("Query", e))?;
            for item in page.items() {
                rows.push(run_from_item(item)?);
                if take.is_some_and(|t| rows.len() >= t) {
                    return Ok(rows);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(rows),
            }
        }
    }

    /// Brings the index attributes in line with the item's state when a patch could not decide
    /// them alone: `gsi1*` when it changed `status` or `detachedSince` but not both, `gsi3pk`
    /// when it changed `status` or `sandboxKey` but not both. Decided from the raw attributes
    /// ([`layout::wanted_index`]), so an item whose status is no run status is kept in the
    /// index and reported as corrupt by the listing. Conditional on the state it saw, so it
    /// never undoes a newer write; that newer write checks for itself.
    async fn fix_index(&self, item: &Item) -> Result<(), StoreError> {
        let Some(pk) = item.get(PK).cloned() else {
            return Ok(());
        };
        let (want1, want3) = layout::wanted_index(item);
        let have1 = match (item.get(GSI1_PK), item.get(GSI1_SK)) {
            (Some(AttributeValue::S(p)), Some(AttributeValue::N(d))) if p == DETACHED => {
                Some(d.clone())
            }
            _ => None,
        };
        let mut e = Expr::default();
        if want1 != have1 {
            match want1 {
                Some(d) => {
                    e.set(GSI1_PK, s(DETACHED));
                    e.set(GSI1_SK, AttributeValue::N(d));
                }
                None => {
                    e.remove(GSI1_PK);
                    e.remove(GSI1_SK);
                }
            }
        }
        let have3 = match item.get(GSI3_PK) {
            Some(AttributeValue::S(k)) => Some(k.clone()),
            _ => None,
        };
        if want3 != have3 {
            match want3 {
                Some(k) => e.set(GSI3_PK, s(k)),
                None => e.remove(GSI3_PK),
            }
        }
        if e.is_empty() {
            return Ok(());
        }
        // The attributes the decision read, exactly as seen (whatever their type).
        let condition = [run::STATUS, run::DETACHED_SINCE, run::SANDBOX_KEY]
            .into_iter()
            .map(|attr| {
                let name = e.name(attr);
                match item.get(attr) {
                    None => format!("attribute_not_exists({name})"),
                    Some(AttributeValue::Null(_)) => {
                        let t = e.value(s("NULL"));
                        format!("attribute_type({name}, {t})")
                    }
                    Some(v) => {
                        let v = e.value(v.clone());
                        format!("{name} = {v}")
                    }
                }
            })
            .collect::<Vec<_>>()
            .join(" AND ");
        let mut k = key(String::new(), RUN_SK);
        k.insert(PK.into(), pk);
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(k))
            .update_expression(e.update_expression())
            .condition_expression(condition)
            .set_expression_attribute_names(e.names())
            .set_expression_attribute_values(e.values())
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("update_fix_index", &res);
        match res {
            Ok(_) => Ok(()),
            Err(err) if condition_failed(&err).is_some() => Ok(()),
            Err(err) => Err(self.map_err("UpdateItem", err)),
        }
    }

    /// The live runs naming sandbox `key`, from the sandbox index: one Query of the key's
    /// partition (it holds only non-terminal runs), paged until `limit` runs are collected.
    /// Each item is re-checked (the index is eventually consistent, and a hashed key could
    /// collide). A table deployed before the index existed answers `Unsupported` after one
    /// warning naming the index, so the reclaim keeps its thread check (see LAYOUT.md).
    pub async fn live_runs_for_sandbox_report(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let mut runs = Vec::new();
        let mut start: Option<Item> = None;
        while runs.len() < limit {
            let want = i32::try_from(limit - runs.len()).unwrap_or(i32::MAX);
            let want = self.options.page_limit.map_or(want, |p| p.min(want));
            let res = self
                .client
                .query()
                .table_name(self.table_name())
                .index_name(SANDBOX_INDEX)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", GSI3_PK)
                .expression_attribute_values(":pk", s(sandbox_gsi_pk(sandbox_key)))
                .limit(want)
                .set_exclusive_start_key(start.take())
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
                .await;
            self.track("live_runs_for_sandbox", &res);
            let page = match res {
                Ok(page) => page,
                Err(err) if crate::error::index_missing(&err) => {
                    self.warn_sandbox_index_missing(&err);
                    return Err(StoreError::Unsupported("live_runs_for_sandbox"));
                }
                Err(err) => return Err(self.map_err("Query", err)),
            };
            for item in page.items() {
                let r = run_from_item(item)?;
                if !r.status.is_terminal() && r.sandbox_key.as_deref() == Some(sandbox_key) {
                    runs.push(r);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        runs.truncate(limit);
        Ok(runs)
    }

    /// Once per store: a table without the sandbox index gets the old in-use check (the
    /// thread's runs), and the operator is told how to add the index.
    fn warn_sandbox_index_missing<E: std::fmt::Debug>(&self, err: &E) {
        if !self
            .sandbox_index_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(table = %self.table_name(), index = SANDBOX_INDEX, error = ?err,
                "the table has no usable index {SANDBOX_INDEX} (deployed before it existed, or \
                 still backfilling): the reclaim checks only the run's threads for live runs \
                 naming a sandbox; redeploy the template (or UpdateTable to add the index, see \
                 LAYOUT.md) so a live run of any thread keeps its sandbox");
        }
    }

    /// Stamps the log meta with its retention TTL after the run finished. Best effort: every
    /// entry already carries its own TTL from its append, so a failure here only delays the
    /// deletion of the one meta item.
    async fn stamp_log_ttl(&self, run_id: &str) {
        let mut e = Expr::default();
        e.set(TTL, n(self.retention_ttl()));
        let pk = e.name(PK);
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), LOG_SK)))
            .update_expression(e.update_expression())
            .condition_expression(format!("attribute_exists({pk})"))
            .set_expression_attribute_names(e.names())
            .set_expression_attribute_values(e.values())
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("write_terminal_log_ttl", &res);
        if let Err(err) = res {
            if condition_failed(&err).is_none() {
                tracing::warn!(run_id, error = %self.map_err("UpdateItem", err),
                    "could not stamp the delivery log's retention TTL; its entries still expire on their own");
            }
        }
    }
}

impl DynamoStore {
    /// [`RunStore::update`], fenced on `fence` in the request's own condition when given. A
    /// missing run is `Written(false)`.
    async fn update_run(
        &self,
        run_id: &str,
        patch: RunPatch,
        fence: Option<u64>,
    ) -> Result<Fenced<bool>, StoreError> {
        let mut e = Expr::default();
        if let Some(status) = patch.status {
            e.set(run::STATUS, status_value(status));
        }
        fn field<T>(e: &mut Expr, attr: &str, p: &Patch<T>, to: impl Fn(&T) -> AttributeValue) {
            match p {
                Patch::Keep => {}
                Patch::Clear => e.remove(attr),
                Patch::Set(v) => e.set(attr, to(v)),
            }
        }
        field(&mut e, run::FINISHED_AT, &patch.finished_at, |v| n(v));
        field(&mut e, run::ERROR, &patch.error, run_error_value);
        field(&mut e, run::USAGE, &patch.usage, json_to_attr);
        field(&mut e, run::SANDBOX_KEY, &patch.sandbox_key, |v| s(v));
        field(&mut e, run::DETACHED_SINCE, &patch.detached_since, |v| n(v));
        field(
            &mut e,
            run::CANCEL_REQUESTED,
            &patch.cancel_requested,
            |v| AttributeValue::Bool(*v),
        );
        field(&mut e, run::DRIVER_EPOCH, &patch.driver_epoch, |v| n(v));
        if e.is_empty() {
            // Nothing to write, so nothing a stale holder could land: a read answers.
            let Some(item) = self.get_run_item(run_id).await? else {
                return Ok(Fenced::Written(false));
            };
            let observed =
                layout::Reader::new(&item, run_id.to_string()).opt_num::<u64>(run::DRIVER_EPOCH)?;
            return Ok(match (observed, fence) {
                (Some(observed), Some(held)) if observed > held => Fenced::Superseded { observed },
                _ => Fenced::Written(true),
            });
        }
        // The sparse index follows `detachedSince present && status not in LEAVES_RECLAIMABLE`
        // (for the statuses a patch can write: `running`), decided in the
        // same request whenever the patch alone determines it; otherwise `fix_index` settles it
        // from the returned item.
        let status_known_not_running = patch.status.is_some_and(|s| s != RunStatus::Running);
        match (&patch.detached_since, status_known_not_running) {
            (_, true) | (Patch::Clear, _) => {
                e.remove(GSI1_PK);
                e.remove(GSI1_SK);
            }
            (Patch::Set(d), false) => {
                e.set(GSI1_PK, s(DETACHED));
                e.set(GSI1_SK, n(d));
            }
            (Patch::Keep, false) => {}
        }
        // The sandbox index follows `not terminal && sandboxKey present` the same way.
        let status_known_terminal = patch.status.is_some_and(RunStatus::is_terminal);
        match (&patch.sandbox_key, status_known_terminal) {
            (_, true) | (Patch::Clear, _) => e.remove(GSI3_PK),
            (Patch::Set(k), false) => e.set(GSI3_PK, s(sandbox_gsi_pk(k))),
            (Patch::Keep, false) => {}
        }
        let pk = e.name(PK);
        let mut condition = format!("attribute_exists({pk})");
        if let Some(held) = fence {
            let epoch = e.name(run::DRIVER_EPOCH);
            let held = e.value(n(held));
            condition.push_str(&format!(
                " AND (attribute_not_exists({epoch}) OR {epoch} <= {held})"
            ));
        }
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), RUN_SK)))
            .update_expression(e.update_expression())
            .condition_expression(condition)
            .set_expression_attribute_names(e.names())
            .set_expression_attribute_values(e.values())
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("update", &res);
        match res {
            Ok(out) => {
                if let Some(item) = out.attributes {
                    self.fix_index(&item).await?;
                }
                Ok(Fenced::Written(true))
            }
            Err(err) => match condition_failed(&err) {
                None => Err(self.map_err("UpdateItem", err)),
                // An unknown run: a no-op by contract.
                Some(None) => Ok(Fenced::Written(false)),
                Some(Some(old)) => {
                    let observed = layout::Reader::new(&old, run_id.to_string())
                        .opt_num::<u64>(run::DRIVER_EPOCH)?;
                    match (observed, fence) {
                        (Some(observed), Some(held)) if observed > held => {
                            Ok(Fenced::Superseded { observed })
                        }
                        _ => Err(StoreError::Conflict(format!(
                            "update of run {run_id} lost its condition at epoch {observed:?} \
                             while holding {fence:?}"
                        ))),
                    }
                }
            },
        }
    }
}

#[async_trait::async_trait]
impl RunStore for DynamoStore {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        let mut record = RunRecord::new(new.run_id, new.thread_id, new.started_at);
        if let Some(status) = new.status {
            record.status = status;
        }
        let res = self
            .client
            .put_item()
            .table_name(self.table_name())
            .set_item(Some(run_item(&record)))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("create_or_resume", &res);
        match res {
            Ok(_) => Ok(record),
            Err(err) => match condition_failed(&err) {
                Some(Some(existing)) => run_from_item(&existing),
                // A condition failure without the old item (a service that ignores
                // ReturnValuesOnConditionCheckFailure): read it.
                Some(None) => match self.get_run_item(&record.run_id).await? {
                    Some(existing) => run_from_item(&existing),
                    None => Err(StoreError::Conflict(format!(
                        "run {} existed at create and was gone right after",
                        record.run_id
                    ))),
                },
                None => Err(self.map_err("PutItem", err)),
            },
        }
    }

    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.update_run(run_id, patch, None).await.map(|_| ())
    }

    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        self.update_run(run_id, patch, Some(held_epoch)).await
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.get_run_item(run_id)
            .await?
            .map(|item| run_from_item(&item))
            .transpose()
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self
            .query_thread("find_active_run", thread_id, false, true, Some(1))
            .await?
            .into_iter()
            .next())
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.query_thread("list_by_thread", thread_id, true, false, None)
            .await
    }

    /// One Query; items that do not parse are returned beside the runs (logged at error level
    /// naming the run, and counted in
    /// [`RequestStats::corrupt_items_skipped`](crate::RequestStats)), so one bad item never
    /// stops a listing. The provided `list_reclaimable` keeps the runs.
    async fn list_reclaimable_listing(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<ReclaimableListing, StoreError> {
        self.list_reclaimable_report(now, ttl_ms).await
    }

    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.list_reclaimable_page_report(&query).await
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        self.count_reclaimable_report(detached_after, detached_until, at_most)
            .await
    }

    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.live_runs_for_sandbox_report(sandbox_key, limit).await
    }

    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.record_history_items(entries).await
    }

    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        self.run_history_items(run_id, limit).await
    }

    async fn prune_history(&self, before: EpochMs, max_entries: usize) -> Result<u64, StoreError> {
        self.prune_history_items(before, max_entries).await
    }

    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        self.write_sweep_history_items(history).await
    }

    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        self.recent_sweep_items(limit).await
    }

    fn capabilities(&self) -> RunStoreCapabilities {
        RunStoreCapabilities {
            list_reclaimable: true,
            list_by_thread: true,
        }
    }

    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), RUN_SK)))
            .update_expression("SET #epoch = if_not_exists(#epoch, :zero) + :one")
            // Positive list: a corrupt status string must not be claimable.
            .condition_expression("attribute_exists(#pk) AND #status IN (:running, :interrupted)")
            .expression_attribute_names("#epoch", run::DRIVER_EPOCH)
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#status", run::STATUS)
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":running", status_value(RunStatus::Running))
            .expression_attribute_values(":interrupted", status_value(RunStatus::Interrupted))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("bump_epoch", &res);
        match res {
            Ok(out) => {
                let item = out.attributes.unwrap_or_default();
                let record = run_from_item(&item)?;
                let epoch = record.driver_epoch.ok_or_else(|| StoreError::Corrupt {
                    key: run_id.to_string(),
                    reason: "driverEpoch missing right after the bump".into(),
                })?;
                Ok(EpochBump::Claimed { epoch, record })
            }
            Err(err) => match condition_failed(&err) {
                // The condition failed and no old item came back: there is no item
                // (DynamoDB returns the old item whenever one exists).
                Some(None) => Ok(EpochBump::Unknown),
                Some(Some(old)) => {
                    let r = run_from_item(&old)?;
                    if r.status.is_terminal() {
                        Ok(EpochBump::Terminal(r.status))
                    } else {
                        Err(StoreError::Conflict(format!(
                            "bump_epoch of run {run_id} lost its condition on a {} run",
                            r.status
                        )))
                    }
                }
                None => Err(self.map_err("UpdateItem", err)),
            },
        }
    }

    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        let mut e = Expr::default();
        e.set(run::STATUS, status_value(write.status.into()));
        e.set(run::FINISHED_AT, n(write.finished_at));
        if let Some(err) = &write.error {
            e.set(run::ERROR, run_error_value(err));
        }
        // Leaves both sparse indexes in the same request: a finished run is never listed again,
        // nor taken for a live user of its sandbox.
        e.remove(GSI1_PK);
        e.remove(GSI1_SK);
        e.remove(GSI3_PK);
        let pk = e.name(PK);
        let epoch = e.name(run::DRIVER_EPOCH);
        let held = e.value(n(held_epoch));
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(key(run_pk(run_id), RUN_SK)))
            .update_expression(e.update_expression())
            .condition_expression(format!(
                "attribute_exists({pk}) AND (attribute_not_exists({epoch}) OR {epoch} <= {held})"
            ))
            .set_expression_attribute_names(e.names())
            .set_expression_attribute_values(e.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("write_terminal", &res);
        match res {
            Ok(_) => {
                self.stamp_log_ttl(run_id).await;
                Ok(Fenced::Written(true))
            }
            Err(err) => {
                let old = match condition_failed(&err) {
                    None => return Err(self.map_err("UpdateItem", err)),
                    Some(old) => old,
                };
                let Some(old) = old else {
                    return Ok(Fenced::Written(false));
                };
                let observed = layout::Reader::new(&old, run_id.to_string())
                    .opt_num::<u64>(run::DRIVER_EPOCH)?;
                match observed {
                    Some(observed) if observed > held_epoch => Ok(Fenced::Superseded { observed }),
                    _ => Err(StoreError::Conflict(format!(
                        "terminal write of run {run_id} lost its condition at epoch {observed:?} \
                         while holding {held_epoch}"
                    ))),
                }
            }
        }
    }
}
