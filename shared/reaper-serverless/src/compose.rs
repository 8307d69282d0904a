//! The composition every serverless handler needs: DynamoDB stores, the sandboxd provider, the
//! journal probe and replay drive, the reclaimer, system time; and the sweep run over them with
//! its DynamoDB cost.

use std::sync::Arc;

use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{sweep, ReapDeps, SweepReport, SweepStatus};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_dynamodb::{DynamoOptions, DynamoStore, RequestStats};
use reaper_http_sandbox::{HttpProviderConfig, HttpSandboxProvider};
use reaper_local::{SystemClock, TokioSleeper};
use serde::Serialize;

use crate::config::{ServerlessConfig, SANDBOXD_TOKEN, SANDBOXD_URL};
use crate::plan::SweepPlan;

/// The handler's dependencies: the sweep's ports, plus the concrete store for its request
/// counters.
#[derive(Debug, Clone)]
pub struct ServerlessDeps {
    pub reap: ReapDeps,
    pub store: DynamoStore,
    pub provider: HttpSandboxProvider,
}

/// The sandboxd provider could not be built from the settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot set up the sandboxd client from {SANDBOXD_URL} and {SANDBOXD_TOKEN}: {0}")]
pub struct ComposeError(pub reaper_http_sandbox::ConfigError);

/// Loads the AWS configuration the usual way (region, credentials chain,
/// `AWS_ENDPOINT_URL_DYNAMODB`) and builds every port. Makes no request.
pub async fn build_deps(config: &ServerlessConfig) -> Result<ServerlessDeps, ComposeError> {
    let store = DynamoStore::connect(dynamo_options(config)).await;
    compose(config, store)
}

/// The store options the settings ask for.
pub fn dynamo_options(config: &ServerlessConfig) -> DynamoOptions {
    let mut options = DynamoOptions::new(&config.table);
    options.log_retention = config.log_retention;
    options
}

/// Builds every port over a ready store.
pub fn compose(
    config: &ServerlessConfig,
    store: DynamoStore,
) -> Result<ServerlessDeps, ComposeError> {
    let mut http = HttpProviderConfig::new(&config.sandboxd_url, config.sandboxd_token.expose());
    http.name = config.provider_name.clone();
    let provider = HttpSandboxProvider::new(http).map_err(ComposeError)?;
    let shared: Arc<DynamoStore> = Arc::new(store.clone());
    let sandboxes: Arc<dyn reaper_core::SandboxProvider> = Arc::new(provider.clone());
    let clock = Arc::new(SystemClock);
    let sleeper = Arc::new(TokioSleeper);
    let probe = JournalExitProbe::new(
        sandboxes.clone(),
        shared.clone(),
        ProbeOptions {
            dir: config.journal_dir.clone(),
            ..ProbeOptions::default()
        },
    );
    let drive = JournalReplayDrive::new(
        ReplayDeps {
            runs: shared.clone(),
            instances: shared.clone(),
            provider: sandboxes.clone(),
            logs: shared.clone(),
            messages: shared.clone(),
            clock: clock.clone(),
            sleeper: sleeper.clone(),
        },
        ReplayOptions {
            journal_dir: config.journal_dir.clone(),
            ..ReplayOptions::default()
        },
    );
    let reclaim = SandboxReclaimer {
        provider: sandboxes,
        instances: shared.clone(),
    };
    Ok(ServerlessDeps {
        reap: ReapDeps {
            runs: shared.clone(),
            logs: shared.clone(),
            leases: shared,
            probe: Arc::new(probe),
            drive: Arc::new(drive),
            reclaim: Some(Arc::new(reclaim)),
            clock,
            sleeper,
        },
        store,
        provider,
    })
}

/// What a serverless sweep returns: the sweep's report, the plan it ran under and the DynamoDB
/// requests it made.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerlessReport {
    #[serde(flatten)]
    pub sweep: SweepReport,
    pub plan: SweepPlan,
    pub dynamodb: RequestStats,
}

impl ServerlessReport {
    /// `swept`, `already-running`, `lease-unavailable` or `invalid-options`.
    pub fn state(&self) -> &'static str {
        match self.sweep.sweep {
            SweepStatus::Swept => "swept",
            SweepStatus::AlreadyRunning { .. } => "already-running",
            SweepStatus::LeaseUnavailable { .. } => "lease-unavailable",
            SweepStatus::InvalidOptions { .. } => "invalid-options",
        }
    }
}

/// Runs the single-flight sweep under `plan` and reports it with its DynamoDB requests.
///
/// The store's counters are reset first, so the figures are this sweep's: one invocation at a
/// time per process (Lambda's default, a Vercel function's request) keeps them exact; concurrent
/// sweeps in one process would share them.
pub async fn run_sweep(deps: &ServerlessDeps, plan: &SweepPlan) -> ServerlessReport {
    deps.store.take_request_stats();
    let sweep = sweep(&deps.reap, &plan.options, plan.lease_ttl_ms).await;
    ServerlessReport {
        sweep,
        plan: plan.clone(),
        dynamodb: deps.store.take_request_stats(),
    }
}
