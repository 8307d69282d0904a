//! The composition every serverless handler needs: DynamoDB stores, the listed sandbox providers, the
//! journal probe and replay drive, the reclaimer, system time; and the sweep run over them with
//! its DynamoDB cost.

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::IdentityCache;

use reaper_core::reap::{sweep, ReapDeps, SweepReport, SweepStatus};
use reaper_core::{ProviderSet, ReclaimLedger, RunStore, SandboxProvider};
use reaper_dynamodb::{DynamoOptions, DynamoStore, OpStats, RequestStats};
use reaper_http_sandbox::{
    HttpProviderConfig, HttpSandboxProvider, HttpTransport, ReqwestTransport,
};
use reaper_local::{SystemClock, TokioSleeper};
use reaper_postgres::PostgresStore;
use serde::Serialize;

use crate::config::{ServerlessConfig, StoreChoice, DATABASE_URL, SANDBOXD_TOKEN, SANDBOXD_URL};
use crate::credentials::{AwsCredentialsConfig, OidcTokens, WebIdentityCredentials};
use crate::plan::SweepPlan;
use crate::secret_token::{SecretToken, SecretTokenTransport};

/// The store the runs are in, as `REAPER_STORE` chose it. Both hold every store port; the
/// handlers reach the one they have only for the status mark and the request counters.
#[derive(Debug, Clone)]
pub enum ServerlessStore {
    DynamoDb(DynamoStore),
    Postgres(PostgresStore),
}

impl ServerlessStore {
    /// The DynamoDB store, when that is the store.
    pub fn dynamodb(&self) -> Option<&DynamoStore> {
        match self {
            ServerlessStore::DynamoDb(s) => Some(s),
            ServerlessStore::Postgres(_) => None,
        }
    }

    /// The reads the status path makes.
    pub fn runs(&self) -> &dyn RunStore {
        match self {
            ServerlessStore::DynamoDb(s) => s,
            ServerlessStore::Postgres(s) => s,
        }
    }

    pub fn ledger(&self) -> &dyn ReclaimLedger {
        match self {
            ServerlessStore::DynamoDb(s) => s,
            ServerlessStore::Postgres(s) => s,
        }
    }

    /// `DynamoDB` or `PostgreSQL`, for messages.
    pub fn product(&self) -> &'static str {
        match self {
            ServerlessStore::DynamoDb(_) => "DynamoDB",
            ServerlessStore::Postgres(_) => "PostgreSQL",
        }
    }
}

/// The handler's dependencies: the sweep's ports, plus the concrete store for its request
/// counters and the status mark.
#[derive(Debug, Clone)]
pub struct ServerlessDeps {
    pub reap: ReapDeps,
    pub store: ServerlessStore,
    /// The providers `REAPER_PROVIDERS` lists, routed by each instance record's provider.
    pub providers: ProviderSet,
    /// Where the handler offers each request's OIDC token; `Some` when the store assumes a role
    /// with it (`AWS_ROLE_ARN`).
    pub oidc_tokens: Option<OidcTokens>,
}

/// A listed provider could not be built from the settings, or the store could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ComposeError {
    #[error("cannot set up the sandboxd client from {SANDBOXD_URL} and {SANDBOXD_TOKEN}: {0}")]
    Sandboxd(reaper_http_sandbox::ConfigError),
    #[error("{0}")]
    Hosted(reaper_providers::ProvidersError),
    #[error("cannot set up the HTTP client of the hosted providers: {0}")]
    Transport(String),
    #[error("{0}")]
    Providers(reaper_core::ProviderSetError),
    /// `REAPER_STORE=postgres` and the database could not be opened (unreachable, refused, a
    /// schema that is not the reaper's).
    #[error("cannot open the PostgreSQL store of {DATABASE_URL}: {0}")]
    Postgres(String),
}

/// The token in place of a value when it is read from Secrets Manager per request; the
/// provider's own check wants a well-formed one, and [`SecretTokenTransport`] replaces it on
/// every request.
const TOKEN_FROM_SECRET: &str = "read-from-secrets-manager";

/// The providers the settings list, each hosted one over one shared reqwest client. The sandboxd
/// token comes from `secret` when given (`REAPER_SANDBOXD_TOKEN_SECRET_ARN`).
pub fn providers_with(
    config: &ServerlessConfig,
    secret: Option<Arc<SecretToken>>,
) -> Result<ProviderSet, ComposeError> {
    let mut transport: Option<Arc<dyn HttpTransport>> = None;
    let mut shared = || -> Result<Arc<dyn HttpTransport>, ComposeError> {
        if let Some(t) = &transport {
            return Ok(t.clone());
        }
        let t: Arc<dyn HttpTransport> =
            Arc::new(ReqwestTransport::new().map_err(|e| ComposeError::Transport(e.to_string()))?);
        Ok(transport.insert(t).clone())
    };
    let mut members: Vec<Arc<dyn SandboxProvider>> = Vec::new();
    for kind in &config.providers {
        if *kind == reaper_providers::ProviderKind::Sandboxd {
            let provider = match &secret {
                Some(token) => {
                    let mut http = HttpProviderConfig::new(&config.sandboxd_url, TOKEN_FROM_SECRET);
                    http.name = config.provider_name.clone();
                    let transport = Arc::new(SecretTokenTransport::new(shared()?, token.clone()));
                    HttpSandboxProvider::with_transport(http, transport)
                }
                None => {
                    let mut http = HttpProviderConfig::new(
                        &config.sandboxd_url,
                        config.sandboxd_token.expose(),
                    );
                    http.name = config.provider_name.clone();
                    HttpSandboxProvider::new(http)
                }
            };
            members.push(Arc::new(provider.map_err(ComposeError::Sandboxd)?));
            continue;
        }
        if let Some(hosted) =
            reaper_providers::build_hosted(*kind, |n| config.hosted.get(n), shared()?)
                .map_err(ComposeError::Hosted)?
        {
            members.push(hosted);
        }
    }
    ProviderSet::new(members).map_err(ComposeError::Providers)
}

/// The providers the settings list, with the token from the environment.
pub fn providers(config: &ServerlessConfig) -> Result<ProviderSet, ComposeError> {
    providers_with(config, None)
}

/// How long one STS call may take: the sweep waits for it before its first DynamoDB request.
const STS_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const STS_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The AWS side of a deployment: the SDK configuration with the credentials the settings choose
/// ([`AwsCredentialsConfig`]), shared by DynamoDB and Secrets Manager.
struct Aws {
    sdk: aws_config::SdkConfig,
    credentials: Option<SharedCredentialsProvider>,
    oidc_tokens: Option<OidcTokens>,
}

impl Aws {
    async fn load(config: &ServerlessConfig) -> Aws {
        let loader = aws_config::defaults(BehaviorVersion::latest());
        match &config.aws_credentials {
            AwsCredentialsConfig::DefaultChain => Aws {
                sdk: loader.load().await,
                credentials: None,
                oidc_tokens: None,
            },
            AwsCredentialsConfig::StaticKeys {
                access_key_id,
                secret_access_key,
                session_token,
            } => Aws {
                sdk: loader.no_credentials().load().await,
                credentials: Some(SharedCredentialsProvider::new(Credentials::new(
                    access_key_id.expose(),
                    secret_access_key.expose(),
                    session_token.as_ref().map(|t| t.expose().to_string()),
                    None,
                    "ReaperStaticKeys",
                ))),
                oidc_tokens: None,
            },
            AwsCredentialsConfig::WebIdentity {
                role_arn,
                session_name,
                env_token,
            } => {
                let sdk = loader.no_credentials().load().await;
                let tokens = OidcTokens::new(env_token.clone());
                let sts = aws_sdk_sts::config::Builder::from(&sdk)
                    .timeout_config(
                        aws_sdk_sts::config::timeout::TimeoutConfig::builder()
                            .connect_timeout(STS_CONNECT_TIMEOUT)
                            .operation_timeout(STS_OPERATION_TIMEOUT)
                            .build(),
                    )
                    .build();
                let provider = WebIdentityCredentials::new(
                    aws_sdk_sts::Client::from_conf(sts),
                    role_arn,
                    session_name,
                    tokens.clone(),
                    Arc::new(SystemClock),
                );
                Aws {
                    sdk,
                    credentials: Some(SharedCredentialsProvider::new(provider)),
                    oidc_tokens: Some(tokens),
                }
            }
        }
    }

    fn dynamodb(&self) -> aws_sdk_dynamodb::config::Builder {
        let builder = aws_sdk_dynamodb::config::Builder::from(&self.sdk);
        match &self.credentials {
            // The web-identity provider caches and renews the credentials itself (one STS call
            // at a time, with the freshest token); the SDK's cache in front of it would only
            // delay that.
            Some(c) => builder
                .credentials_provider(c.clone())
                .identity_cache(IdentityCache::no_cache()),
            None => builder,
        }
    }

    fn secretsmanager(&self) -> aws_sdk_secretsmanager::config::Builder {
        let builder = aws_sdk_secretsmanager::config::Builder::from(&self.sdk);
        match &self.credentials {
            Some(c) => builder
                .credentials_provider(c.clone())
                .identity_cache(aws_sdk_secretsmanager::config::IdentityCache::no_cache()),
            None => builder,
        }
    }
}

/// Loads the AWS configuration the usual way when the deployment uses AWS (region,
/// `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL_SECRETS_MANAGER`),
/// opens the store `REAPER_STORE` names and builds every port. DynamoDB makes no request here;
/// PostgreSQL connects and creates or migrates its schema (as the CLI does).
pub async fn build_deps(config: &ServerlessConfig) -> Result<ServerlessDeps, ComposeError> {
    let aws = if config.uses_aws() {
        Some(Aws::load(config).await)
    } else {
        None
    };
    let store = match (&config.store, &aws) {
        (StoreChoice::DynamoDb, Some(aws)) => ServerlessStore::DynamoDb(
            DynamoStore::from_config_builder(aws.dynamodb(), dynamo_options(config)),
        ),
        (StoreChoice::DynamoDb, None) => unreachable!("a DynamoDB deployment uses AWS"),
        (postgres, _) => {
            let options = postgres
                .postgres_options()
                .expect("a store other than DynamoDB is PostgreSQL");
            ServerlessStore::Postgres(
                PostgresStore::open(options)
                    .await
                    .map_err(|e| ComposeError::Postgres(e.to_string()))?,
            )
        }
    };
    let secret = match (&config.sandboxd_token_secret, &aws) {
        (Some(source), Some(aws)) => Some(Arc::new(SecretToken::new(
            SecretToken::client(aws.secretsmanager()),
            source.clone(),
            Arc::new(SystemClock),
        ))),
        _ => None,
    };
    tracing::info!(
        store = config.store.kind(),
        aws_credentials = aws
            .as_ref()
            .map(|_| config.aws_credentials.kind())
            .unwrap_or("none"),
        sandboxd_token = if secret.is_some() {
            "secrets-manager"
        } else {
            "environment"
        },
        "store configured"
    );
    let mut deps = compose_with(config, store, secret)?;
    deps.oidc_tokens = aws.and_then(|a| a.oidc_tokens);
    Ok(deps)
}

/// The store options the settings ask for.
pub fn dynamo_options(config: &ServerlessConfig) -> DynamoOptions {
    let mut options = DynamoOptions::new(&config.table);
    options.log_retention = config.log_retention;
    options
}

/// Builds every port over a ready DynamoDB store.
pub fn compose(
    config: &ServerlessConfig,
    store: DynamoStore,
) -> Result<ServerlessDeps, ComposeError> {
    compose_with(config, ServerlessStore::DynamoDb(store), None)
}

/// Builds every port over a ready store, the sandboxd token from `secret` when given.
pub fn compose_with(
    config: &ServerlessConfig,
    store: ServerlessStore,
    secret: Option<Arc<SecretToken>>,
) -> Result<ServerlessDeps, ComposeError> {
    let providers = providers_with(config, secret)?;
    let sandboxes: Arc<dyn SandboxProvider> = Arc::new(providers.clone());
    let reap = match &store {
        ServerlessStore::DynamoDb(s) => journaled(s, config, sandboxes),
        ServerlessStore::Postgres(s) => journaled(s, config, sandboxes),
    };
    Ok(ServerlessDeps {
        reap,
        store,
        providers,
        oidc_tokens: None,
    })
}

/// The core's journaled composition over one store that backs every port.
fn journaled<S>(
    store: &S,
    config: &ServerlessConfig,
    sandboxes: Arc<dyn SandboxProvider>,
) -> ReapDeps
where
    S: Clone
        + RunStore
        + reaper_core::DeliveryLog
        + reaper_core::LeaseStore
        + ReclaimLedger
        + reaper_core::SandboxInstanceStore
        + reaper_core::MessageStore
        + 'static,
{
    ReapDeps::journaled(
        Arc::new(store.clone()),
        sandboxes,
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        config.journal_dir.clone(),
    )
}

/// What a serverless sweep returns: the sweep's report, the plan it ran under and the store
/// requests it made (`dynamodb`, per operation; or `postgres`, statements sent).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerlessReport {
    #[serde(flatten)]
    pub sweep: SweepReport,
    pub plan: SweepPlan,
    /// Empty with another store.
    pub dynamodb: RequestStats,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresRequests>,
}

/// What a sweep sent to PostgreSQL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PostgresRequests {
    /// Statements sent (each one round trip).
    pub statements: u64,
}

impl ServerlessReport {
    /// The damage the sweep stopped at, if any (see [`reaper_core::damage`]).
    pub fn damaged(&self) -> Option<&str> {
        self.sweep.report.damaged.as_deref()
    }

    /// Logs the damage, if any, as the handler's error-level summary: the one line a log alert
    /// matches on when the database (table, index) is broken and no sweep can finish a run.
    pub fn log_damage(&self) {
        if let Some(damage) = self.damaged() {
            tracing::error!(
                state = self.state(),
                deferred = self.sweep.report.deferred,
                %damage,
                "sweep summary: the database is damaged; the sweep stopped before any further \
                 terminal write or destroy and every later sweep will stop the same way until \
                 it is repaired"
            );
        }
    }

    /// `swept`, `already-running`, `lease-unavailable`, `invalid-options`, `dry-run` or
    /// `paused`.
    pub fn state(&self) -> &'static str {
        match self.sweep.sweep {
            SweepStatus::Swept => "swept",
            SweepStatus::AlreadyRunning { .. } => "already-running",
            SweepStatus::LeaseUnavailable { .. } => "lease-unavailable",
            SweepStatus::InvalidOptions { .. } => "invalid-options",
            SweepStatus::DryRun => "dry-run",
            SweepStatus::Paused { .. } => "paused",
        }
    }
}

/// Runs the single-flight sweep under `plan` and reports it with its DynamoDB requests.
///
/// The requests are the difference of the store's counters before and after (the counters are
/// not reset, so nothing else reading them loses counts). One sweep at a time per process
/// (Lambda's default) makes the figures exactly this sweep's; sweeps overlapping in one process
/// (Vercel's fluid compute) each also count the other's requests made meanwhile.
pub async fn run_sweep(deps: &ServerlessDeps, plan: &SweepPlan) -> ServerlessReport {
    match &deps.store {
        ServerlessStore::DynamoDb(store) => {
            let before = store.request_stats();
            let sweep = sweep(&deps.reap, &plan.options, plan.lease_ttl_ms).await;
            ServerlessReport {
                sweep,
                plan: plan.clone(),
                dynamodb: requests_since(&before, &store.request_stats()),
                postgres: None,
            }
        }
        ServerlessStore::Postgres(store) => {
            let before = store.requests();
            let sweep = sweep(&deps.reap, &plan.options, plan.lease_ttl_ms).await;
            ServerlessReport {
                sweep,
                plan: plan.clone(),
                dynamodb: RequestStats::default(),
                postgres: Some(PostgresRequests {
                    statements: store.requests().saturating_sub(before),
                }),
            }
        }
    }
}

/// `after - before`, per operation; operations with no request in between are left out.
pub fn requests_since(before: &RequestStats, after: &RequestStats) -> RequestStats {
    let minus = |a: &OpStats, b: &OpStats| OpStats {
        requests: a.requests.saturating_sub(b.requests),
        condition_failures: a.condition_failures.saturating_sub(b.condition_failures),
        errors: a.errors.saturating_sub(b.errors),
        capacity_units: (a.capacity_units - b.capacity_units).max(0.0),
        read_capacity_units: (a.read_capacity_units - b.read_capacity_units).max(0.0),
        write_capacity_units: (a.write_capacity_units - b.write_capacity_units).max(0.0),
    };
    let mut diff = RequestStats {
        total: minus(&after.total, &before.total),
        corrupt_items_skipped: after
            .corrupt_items_skipped
            .saturating_sub(before.corrupt_items_skipped),
        ..RequestStats::default()
    };
    for (op, stats) in &after.by_operation {
        let d = minus(stats, &before.op(op));
        if d.requests > 0 {
            diff.by_operation.insert(op.clone(), d);
        }
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(ops: &[(&str, u64, f64)], corrupt: u64) -> RequestStats {
        let mut s = RequestStats {
            corrupt_items_skipped: corrupt,
            ..RequestStats::default()
        };
        for (op, requests, units) in ops {
            let o = OpStats {
                requests: *requests,
                capacity_units: *units,
                write_capacity_units: *units,
                ..OpStats::default()
            };
            s.total.requests += requests;
            s.total.capacity_units += units;
            s.total.write_capacity_units += units;
            s.by_operation.insert(op.to_string(), o);
        }
        s
    }

    #[test]
    fn the_sweeps_requests_are_the_counters_difference_per_operation() {
        let before = stats(&[("lease_acquire", 2, 2.0), ("get", 5, 0.0)], 1);
        let after = stats(
            &[
                ("lease_acquire", 3, 3.0),
                ("get", 5, 0.0),
                ("list_reclaimable", 1, 0.5),
            ],
            3,
        );
        let d = requests_since(&before, &after);
        assert_eq!(d.total.requests, 2);
        assert_eq!(d.total.capacity_units, 1.5);
        assert_eq!(d.op("lease_acquire").requests, 1);
        assert_eq!(d.op("list_reclaimable").requests, 1);
        assert!(
            !d.by_operation.contains_key("get"),
            "an idle operation is left out"
        );
        assert_eq!(d.corrupt_items_skipped, 2);
    }
}
