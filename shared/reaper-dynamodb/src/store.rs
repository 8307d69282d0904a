//! [`DynamoStore`]: the client, its options, request accounting and the table helper.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, ConsumedCapacity, GlobalSecondaryIndex,
    KeySchemaElement, KeyType, Projection, ProjectionType, ScalarAttributeType, TableStatus,
    TimeToLiveSpecification,
};
use aws_sdk_dynamodb::Client;
use reaper_core::{Clock, EpochMs, StoreError};

use crate::error::{self, HttpStatus, Kind};
use crate::layout::{
    GSI1_PK, GSI1_SK, GSI2_PK, GSI2_SK, GSI3_PK, PK, RECLAIMABLE_INDEX, SANDBOX_INDEX, SK,
    THREAD_INDEX, TTL,
};
use crate::stats::{Counters, Outcome, RequestStats};

/// The default retention of delivery-log events after their run finished.
pub const DEFAULT_LOG_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The system clock, for deciding whether an item's TTL has passed (the store is a native
/// backend; only the core must never read the clock).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> EpochMs {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as EpochMs)
            .unwrap_or_default()
    }
}

/// How a [`DynamoStore`] behaves. Build with [`DynamoOptions::new`] and adjust fields.
#[derive(Clone)]
pub struct DynamoOptions {
    /// The table holding runs, logs, leases and sandbox instances.
    pub table_name: String,
    /// Delivery-log events live this long after their last append, and a log's meta item this
    /// long after the run finished or the log closed (the `ttl` attribute). Default 30 days.
    pub log_retention: Duration,
    /// `Limit` of each Query page; `None` lets DynamoDB fill 1 MB pages. Tests set it small to
    /// force paging.
    pub page_limit: Option<i32>,
    /// Decides whether an expired-but-not-yet-deleted item is gone. Default: [`SystemClock`].
    pub clock: Arc<dyn Clock>,
    /// SDK attempts per call (standard retry mode: exponential backoff with jitter on
    /// throttling, 5xx and transient network errors).
    pub max_attempts: u32,
    /// The first retry's backoff.
    pub initial_backoff: Duration,
    /// The whole call, retries included.
    pub operation_timeout: Duration,
    /// One attempt.
    pub attempt_timeout: Duration,
    /// Opening a connection.
    pub connect_timeout: Duration,
}

impl DynamoOptions {
    /// The defaults for `table_name`.
    pub fn new(table_name: impl Into<String>) -> Self {
        DynamoOptions {
            table_name: table_name.into(),
            log_retention: DEFAULT_LOG_RETENTION,
            page_limit: None,
            clock: Arc::new(SystemClock),
            max_attempts: 5,
            initial_backoff: Duration::from_millis(50),
            operation_timeout: Duration::from_secs(15),
            attempt_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
        }
    }

    fn retry_config(&self) -> RetryConfig {
        RetryConfig::standard()
            .with_max_attempts(self.max_attempts.max(1))
            .with_initial_backoff(self.initial_backoff)
    }

    fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect_timeout)
            .operation_timeout(self.operation_timeout)
            .operation_attempt_timeout(self.attempt_timeout)
            .build()
    }
}

impl std::fmt::Debug for DynamoOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoOptions")
            .field("table_name", &self.table_name)
            .field("log_retention", &self.log_retention)
            .field("page_limit", &self.page_limit)
            .field("max_attempts", &self.max_attempts)
            .field("operation_timeout", &self.operation_timeout)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// Every store port ([`RunStore`](reaper_core::RunStore), [`LeaseStore`](reaper_core::LeaseStore),
/// [`DeliveryLog`](reaper_core::DeliveryLog), [`SandboxInstanceStore`](reaper_core::SandboxInstanceStore),
/// [`MessageStore`](reaper_core::MessageStore)) on one DynamoDB table laid out as the crate docs
/// describe. Cheap to clone (shared client and counters).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    pub(crate) client: Client,
    pub(crate) options: Arc<DynamoOptions>,
    pub(crate) counters: Arc<Counters>,
    /// The next sequence number of each log this process appended to: lets an append go out as
    /// one transaction without reading the log meta first. A wrong guess only costs a retry.
    pub(crate) next_seq: Arc<Mutex<HashMap<String, u64>>>,
    /// Whether the missing sandbox index was already reported (once per store, not per
    /// reclaim).
    pub(crate) sandbox_index_warned: Arc<std::sync::atomic::AtomicBool>,
}

impl DynamoStore {
    /// Loads the AWS configuration the usual way (`AWS_REGION`, credentials chain,
    /// `AWS_ENDPOINT_URL_DYNAMODB`, profiles) with this store's retry and timeout options.
    pub async fn connect(options: DynamoOptions) -> Self {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(options.retry_config())
            .timeout_config(options.timeout_config())
            .load()
            .await;
        Self::from_sdk_config(&sdk, options)
    }

    /// Builds the client from an existing configuration; the store's retry and timeout options
    /// replace the configuration's own.
    pub fn from_sdk_config(sdk: &SdkConfig, options: DynamoOptions) -> Self {
        Self::from_config_builder(aws_sdk_dynamodb::config::Builder::from(sdk), options)
    }

    /// Builds the client from a DynamoDB config builder (region, credentials, endpoint set by
    /// the caller); the store's retry and timeout options are applied on top.
    pub fn from_config_builder(
        builder: aws_sdk_dynamodb::config::Builder,
        options: DynamoOptions,
    ) -> Self {
        let config = builder
            .retry_config(options.retry_config())
            .timeout_config(options.timeout_config())
            .build();
        Self::with_client(Client::from_conf(config), options)
    }

    /// Uses a ready client as is.
    pub fn with_client(client: Client, options: DynamoOptions) -> Self {
        DynamoStore {
            client,
            options: Arc::new(options),
            counters: Arc::default(),
            next_seq: Arc::default(),
            sandbox_index_warned: Arc::default(),
        }
    }

    /// The SDK client the store uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The options the store was built with.
    pub fn options(&self) -> &DynamoOptions {
        &self.options
    }

    /// The table the store uses.
    pub fn table_name(&self) -> &str {
        &self.options.table_name
    }

    /// Requests and consumed capacity since the store was built (or last taken).
    pub fn request_stats(&self) -> RequestStats {
        self.counters.snapshot()
    }

    /// Like [`request_stats`](Self::request_stats), and resets the counters: call it at the
    /// start and end of a sweep to get that sweep's cost.
    pub fn take_request_stats(&self) -> RequestStats {
        self.counters.take()
    }

    pub(crate) fn now_secs(&self) -> i64 {
        self.options.clock.now_ms().div_euclid(1000)
    }

    /// The `ttl` value (epoch seconds) for something that ages out `log_retention` from now.
    /// Taken from the store's clock, not from the caller's `now`: DynamoDB's TTL sweeper and
    /// the expiry check on reads both compare against real time, while callers (tests, replays)
    /// may pass logical instants.
    pub(crate) fn retention_ttl(&self) -> i64 {
        self.now_secs()
            .saturating_add(self.options.log_retention.as_secs().min(i64::MAX as u64) as i64)
    }

    /// Records one call in the counters.
    pub(crate) fn track<O, E, R>(&self, op: &str, res: &Result<O, SdkError<E, R>>)
    where
        O: Consumed,
        E: ProvideErrorMetadata,
        R: HttpStatus,
    {
        match res {
            Ok(out) => self.counters.record(op, Outcome::Ok, out.consumed()),
            Err(e) => {
                let cancelled = matches!(e, SdkError::ServiceError(ctx)
                    if ctx.err().code() == Some("TransactionCanceledException"));
                let outcome = if cancelled || error::classify(e) == Kind::ConditionFailed {
                    Outcome::ConditionFailed
                } else {
                    Outcome::Error
                };
                self.counters.record(op, outcome, [])
            }
        }
    }

    pub(crate) fn map_err<E, R>(&self, op: &str, err: SdkError<E, R>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: HttpStatus + std::fmt::Debug,
    {
        error::map_sdk(op, &self.options.table_name, err)
    }

    /// Creates the table with the documented layout (keys, the three indexes, TTL) and waits
    /// until it is active. For tests and development: production tables come from the SAM
    /// template.
    pub async fn create_table(&self) -> Result<(), StoreError> {
        self.create_table_without("").await
    }

    /// The documented table lacking the index named `index` (e.g. [`SANDBOX_INDEX`], as a
    /// table deployed before that index existed): for testing what a reaper does on such a
    /// table.
    pub async fn create_table_without(&self, without: &str) -> Result<(), StoreError> {
        let table = self.table_name().to_string();
        let attr = |name: &str, t: ScalarAttributeType| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(t)
                .build()
                .map_err(|e| StoreError::Backend(format!("building the table definition: {e}")))
        };
        let keys = |hash: &str, range: &str| -> Result<Vec<KeySchemaElement>, StoreError> {
            // An empty range name: a partition-only key.
            [(hash, KeyType::Hash), (range, KeyType::Range)]
                .into_iter()
                .filter(|(name, _)| !name.is_empty())
                .map(|(name, kind)| {
                    KeySchemaElement::builder()
                        .attribute_name(name)
                        .key_type(kind)
                        .build()
                        .map_err(|e| StoreError::Backend(format!("building the key schema: {e}")))
                })
                .collect()
        };
        let index =
            |name: &str, hash: &str, range: &str| -> Result<GlobalSecondaryIndex, StoreError> {
                GlobalSecondaryIndex::builder()
                    .index_name(name)
                    .set_key_schema(Some(keys(hash, range)?))
                    .projection(
                        Projection::builder()
                            .projection_type(ProjectionType::All)
                            .build(),
                    )
                    .build()
                    .map_err(|e| StoreError::Backend(format!("building index {name}: {e}")))
            };
        let mut create = self
            .client
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attr(PK, ScalarAttributeType::S)?)
            .attribute_definitions(attr(SK, ScalarAttributeType::S)?)
            .set_key_schema(Some(keys(PK, SK)?));
        let layout = [
            (RECLAIMABLE_INDEX, GSI1_PK, Some(GSI1_SK)),
            (THREAD_INDEX, GSI2_PK, Some(GSI2_SK)),
            (SANDBOX_INDEX, GSI3_PK, None),
        ];
        for (name, hash, range) in layout.into_iter().filter(|(name, ..)| *name != without) {
            create = create
                .attribute_definitions(attr(hash, ScalarAttributeType::S)?)
                .global_secondary_indexes(index(name, hash, range.unwrap_or(""))?);
            if let Some(range) = range {
                create = create.attribute_definitions(attr(range, ScalarAttributeType::N)?);
            }
        }
        let res = create.send().await;
        res.map_err(|e| self.map_err("CreateTable", e))?;

        // Bounded: DynamoDB Local is active at once, the real service within seconds.
        let mut active = false;
        for _ in 0..600 {
            let d = self
                .client
                .describe_table()
                .table_name(&table)
                .send()
                .await
                .map_err(|e| self.map_err("DescribeTable", e))?;
            if d.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
                active = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !active {
            return Err(StoreError::Unavailable(format!(
                "table {table} did not become active within 60 s"
            )));
        }
        self.client
            .update_time_to_live()
            .table_name(&table)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name(TTL)
                    .enabled(true)
                    .build()
                    .map_err(|e| StoreError::Backend(format!("building the TTL spec: {e}")))?,
            )
            .send()
            .await
            .map_err(|e| self.map_err("UpdateTimeToLive", e))?;
        Ok(())
    }

    /// Deletes the table (test cleanup).
    pub async fn delete_table(&self) -> Result<(), StoreError> {
        self.client
            .delete_table()
            .table_name(self.table_name())
            .send()
            .await
            .map_err(|e| self.map_err("DeleteTable", e))?;
        Ok(())
    }
}

/// The capacity a call's output reports.
pub(crate) trait Consumed {
    fn consumed(&self) -> Vec<&ConsumedCapacity>;
}

macro_rules! consumed_one {
    ($($t:ty),*) => {$(
        impl Consumed for $t {
            fn consumed(&self) -> Vec<&ConsumedCapacity> {
                self.consumed_capacity().into_iter().collect()
            }
        }
    )*};
}
consumed_one!(
    aws_sdk_dynamodb::operation::get_item::GetItemOutput,
    aws_sdk_dynamodb::operation::put_item::PutItemOutput,
    aws_sdk_dynamodb::operation::update_item::UpdateItemOutput,
    aws_sdk_dynamodb::operation::delete_item::DeleteItemOutput,
    aws_sdk_dynamodb::operation::query::QueryOutput
);

impl Consumed for aws_sdk_dynamodb::operation::batch_write_item::BatchWriteItemOutput {
    fn consumed(&self) -> Vec<&ConsumedCapacity> {
        self.consumed_capacity().iter().collect()
    }
}

impl Consumed for aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput {
    fn consumed(&self) -> Vec<&ConsumedCapacity> {
        self.consumed_capacity().iter().collect()
    }
}

/// Builds `SET`/`REMOVE` update expressions and condition expressions with placeholder names
/// for every attribute (several of ours, `status` and `ttl`, are reserved words).
#[derive(Debug, Default)]
pub(crate) struct Expr {
    pub names: HashMap<String, String>,
    pub values: HashMap<String, AttributeValue>,
    sets: Vec<String>,
    removes: Vec<String>,
}

impl Expr {
    /// `#name` for an attribute.
    pub fn name(&mut self, attr: &str) -> String {
        let placeholder = format!(
            "#{}",
            attr.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        self.names.insert(placeholder.clone(), attr.to_string());
        placeholder
    }

    /// `:vN` for a value.
    pub fn value(&mut self, v: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), v);
        placeholder
    }

    pub fn set(&mut self, attr: &str, v: AttributeValue) {
        let (n, v) = (self.name(attr), self.value(v));
        self.sets.push(format!("{n} = {v}"));
    }

    /// `SET attr = <raw expression>` (for `if_not_exists` and arithmetic).
    pub fn set_raw(&mut self, attr: &str, expr: String) {
        let n = self.name(attr);
        self.sets.push(format!("{n} = {expr}"));
    }

    pub fn remove(&mut self, attr: &str) {
        let n = self.name(attr);
        self.removes.push(n);
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty() && self.removes.is_empty()
    }

    pub fn update_expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.sets.is_empty() {
            parts.push(format!("SET {}", self.sets.join(", ")));
        }
        if !self.removes.is_empty() {
            parts.push(format!("REMOVE {}", self.removes.join(", ")));
        }
        parts.join(" ")
    }

    pub fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    pub fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

/// A lease token unique across processes and grants: random per-process keys from the std
/// hasher, the process id, a counter and the time.
pub(crate) fn fresh_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!(
        "{:016x}-{:x}-{:x}",
        h.finish(),
        std::process::id(),
        COUNTER.load(Ordering::Relaxed)
    )
}
