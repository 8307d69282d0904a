//! DynamoDB Local: the endpoint (required: a missing one fails with instructions, never skips),
//! a fresh table per case so cases run in parallel, and runs recorded the way a chat route
//! records a detached run.

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use reaper_core::{
    NewRun, RunPatch, RunRecord, RunStore, SandboxInstanceRecord, SandboxInstanceStore,
};
use reaper_dynamodb::{DynamoOptions, DynamoStore};

use crate::util::{now_ms, unique};

/// The DynamoDB Local endpoint from `REAPER_DYNAMODB_ENDPOINT` or `AWS_ENDPOINT_URL_DYNAMODB`.
pub fn endpoint() -> String {
    std::env::var("REAPER_DYNAMODB_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| {
            // Cargo sets CARGO_PKG_NAME for the test binaries it runs.
            let suite = std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| "these".into());
            panic!(
                "{suite} tests need Amazon DynamoDB Local and neither \
                 REAPER_DYNAMODB_ENDPOINT nor AWS_ENDPOINT_URL_DYNAMODB is set. Start it with \
                 `shared/reaper-dynamodb/emulator/start.sh /tmp/ddb.env && set -a && . \
                 /tmp/ddb.env && set +a` (needs java and npm), run the tests, then \
                 `shared/reaper-dynamodb/emulator/stop.sh /tmp/ddb.env`"
            )
        })
}

/// A client config for DynamoDB Local: dummy credentials, `us-east-1`, the [`endpoint`].
pub fn config_builder() -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
        .endpoint_url(endpoint())
}

/// A store on a freshly created table `<prefix>-<unique>`.
pub async fn fresh_store(prefix: &str) -> DynamoStore {
    let table = format!("{prefix}-{}", unique());
    let store = DynamoStore::from_config_builder(config_builder(), DynamoOptions::new(&table));
    store
        .create_table()
        .await
        .unwrap_or_else(|e| panic!("creating table {table} on {}: {e}", endpoint()));
    store
}

/// A run a chat route left behind: `running` in sandbox `sandbox_id` of provider `provider`,
/// started 5 s before it detached, detached `detached_ago_ms` ago.
#[derive(Debug, Clone, Copy)]
pub struct DetachedRun<'a> {
    pub run_id: &'a str,
    pub provider: &'a str,
    pub sandbox_id: &'a str,
    pub detached_ago_ms: i64,
}

/// Records `run` as a chat route does when its client goes away: creates the run (thread
/// `thread-<run_id>`), marks it detached with sandbox key `key-<run_id>`, and upserts that
/// sandbox instance.
pub async fn seed_detached_run<S>(store: &S, run: DetachedRun<'_>)
where
    S: RunStore + SandboxInstanceStore,
{
    let now = now_ms();
    let run_id = run.run_id;
    let key = format!("key-{run_id}");
    store
        .create_or_resume(NewRun {
            run_id: run_id.into(),
            thread_id: format!("thread-{run_id}"),
            started_at: now - run.detached_ago_ms - 5_000,
            status: None,
        })
        .await
        .unwrap_or_else(|e| panic!("create run {run_id}: {e}"));
    RunStore::update(
        store,
        run_id,
        RunPatch::detach(now - run.detached_ago_ms, Some(key.clone())),
    )
    .await
    .unwrap_or_else(|e| panic!("detach run {run_id}: {e}"));
    store
        .upsert(SandboxInstanceRecord {
            key,
            provider: run.provider.into(),
            provider_sandbox_id: run.sandbox_id.into(),
            latest_snapshot_id: None,
            thread_id: format!("thread-{run_id}"),
            latest_run_id: Some(run_id.into()),
            updated_at: now,
        })
        .await
        .unwrap_or_else(|e| panic!("upsert the sandbox instance of {run_id}: {e}"));
}

/// The run as stored now; fails the test when it is missing.
pub async fn read_run(store: &impl RunStore, run_id: &str) -> RunRecord {
    RunStore::get(store, run_id)
        .await
        .unwrap_or_else(|e| panic!("read run {run_id}: {e}"))
        .unwrap_or_else(|| panic!("run {run_id} exists"))
}
