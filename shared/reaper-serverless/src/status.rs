//! What a deployment can tell about itself without sweeping, for an uptime monitor: the last
//! sweep that ran (a mark each sweep leaves in the table), the reclaim ledger, and the detached
//! runs waiting, with a verdict. Reading it writes nothing and touches no sandbox.
//!
//! A platform without a heartbeat (Vercel) otherwise leaves no trace of a cron that stopped
//! firing: no sweep, no log line, nothing to alert on.
//!
//! The verdict itself is the core's (`reaper_core::health`), shared with `reaper status --check`
//! and `reaper watch --listen`; this module keeps the mark in the DynamoDB table.

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use reaper_core::StoreError;
use reaper_dynamodb::DynamoStore;

use crate::compose::{ServerlessReport, ServerlessStore};

/// The partition of the last-sweep mark. No store item uses the `REAPER#` prefix
/// (`shared/reaper-dynamodb/LAYOUT.md`), and the mark carries no index attribute and no TTL.
pub const LAST_SWEEP_PK: &str = "REAPER#last-sweep";
/// The sort key of the last-sweep mark.
pub const LAST_SWEEP_SK: &str = "SWEEP";
/// The mark's attributes: the [`LastSweep`] as JSON (S), and its `finishedAt` (N) for the
/// write's condition.
const SUMMARY: &str = "summary";
const FINISHED_AT: &str = "finishedAt";
const ENTITY: &str = "entity";

pub use reaper_core::health::{
    assess, read_status, DetachedFigures, LastSweep, ServiceStatus, StatusLimits,
    STATUS_LISTING_LIMIT,
};

/// The mark a sweep leaves; `None` when it did not sweep (see [`LastSweep::of`]).
pub fn last_sweep_of(report: &ServerlessReport) -> Option<LastSweep> {
    LastSweep::of(&report.sweep, &report.plan.options.owner)
}

fn sdk_error<E, R>(op: &str, e: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    StoreError::Backend(format!(
        "{op} of the last-sweep mark failed: {}",
        DisplayErrorContext(e)
    ))
}

/// Writes the mark, unless the store already holds a later one (overlapping invocations finish
/// in any order). `Ok(false)`: a later mark was kept. DynamoDB: one conditional `PutItem`;
/// PostgreSQL: one conditional upsert of `lease_notes` key `reaper:last-sweep`.
pub async fn record_last_sweep(
    store: &ServerlessStore,
    mark: &LastSweep,
) -> Result<bool, StoreError> {
    let summary = serde_json::to_string(mark)
        .map_err(|e| StoreError::Backend(format!("cannot encode the last-sweep mark: {e}")))?;
    match store {
        ServerlessStore::DynamoDb(store) => record_in_dynamodb(store, mark, summary).await,
        ServerlessStore::Postgres(store) => {
            store.record_last_sweep(&summary, mark.finished_at).await
        }
    }
}

async fn record_in_dynamodb(
    store: &DynamoStore,
    mark: &LastSweep,
    summary: String,
) -> Result<bool, StoreError> {
    let put = store
        .client()
        .put_item()
        .table_name(store.table_name())
        .item("pk", AttributeValue::S(LAST_SWEEP_PK.into()))
        .item("sk", AttributeValue::S(LAST_SWEEP_SK.into()))
        .item(ENTITY, AttributeValue::S("last-sweep".into()))
        .item(SUMMARY, AttributeValue::S(summary))
        .item(FINISHED_AT, AttributeValue::N(mark.finished_at.to_string()))
        .condition_expression("attribute_not_exists(pk) OR #f < :f")
        .expression_attribute_names("#f", FINISHED_AT)
        .expression_attribute_values(":f", AttributeValue::N(mark.finished_at.to_string()))
        .send()
        .await;
    match put {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(sdk_error("PutItem", e)),
    }
}

/// Reads the mark (strongly consistent). `None`: no sweep has run against this store yet.
pub async fn read_last_sweep(store: &ServerlessStore) -> Result<Option<LastSweep>, StoreError> {
    match store {
        ServerlessStore::DynamoDb(store) => read_from_dynamodb(store).await,
        ServerlessStore::Postgres(store) => {
            let Some(summary) = store.read_last_sweep().await? else {
                return Ok(None);
            };
            serde_json::from_str(&summary)
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    key: reaper_postgres::LAST_SWEEP_KEY.into(),
                    reason: format!("the last-sweep mark does not parse: {e}"),
                })
        }
    }
}

async fn read_from_dynamodb(store: &DynamoStore) -> Result<Option<LastSweep>, StoreError> {
    let got = store
        .client()
        .get_item()
        .table_name(store.table_name())
        .key("pk", AttributeValue::S(LAST_SWEEP_PK.into()))
        .key("sk", AttributeValue::S(LAST_SWEEP_SK.into()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| sdk_error("GetItem", e))?;
    let Some(item) = got.item else {
        return Ok(None);
    };
    let corrupt = |reason: String| StoreError::Corrupt {
        key: format!("{LAST_SWEEP_PK}/{LAST_SWEEP_SK}"),
        reason,
    };
    let Some(AttributeValue::S(summary)) = item.get(SUMMARY) else {
        return Err(corrupt(format!("{SUMMARY} is not a string")));
    };
    serde_json::from_str(summary)
        .map(Some)
        .map_err(|e| corrupt(format!("{SUMMARY} does not parse: {e}")))
}
