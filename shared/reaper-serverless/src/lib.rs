//! What the serverless handlers (AWS Lambda, Vercel) share, so neither repeats it:
//!
//! - [`ServerlessConfig::from_env`]: every setting from the environment ([`config::SETTINGS`],
//!   documented in `README.md`), with one error naming every missing or bad variable, what was
//!   wrong and what is accepted, never repeating the sandboxd token;
//! - [`credentials`]: how the store authenticates to AWS: a role assumed with the deployment's
//!   OIDC token (`AWS_ROLE_ARN`, no stored keys), explicit keys, or the SDK's default chain;
//! - [`build_deps`]: the store `REAPER_STORE` names (DynamoDB, every port on one table, or
//!   PostgreSQL, every port in schema `reaper`), the sandboxd HTTP provider (its token from the
//!   environment or, with [`secret_token`], from Secrets Manager at run time), the journal exit probe, the journal replay drive, the sandbox reclaimer and system
//!   time, composed into the core's [`ReapDeps`](reaper_core::reap::ReapDeps);
//! - [`plan`](mod@plan): deadline-aware batch sizing from the invocation's start and deadline;
//! - [`run_sweep`] and [`ServerlessReport`]: the single-flight sweep and what a handler returns
//!   (the sweep report, the plan, the DynamoDB requests of the sweep);
//! - [`status`]: the last sweep's mark in the table, and a read-only health verdict over it, the
//!   reclaim ledger and the detached runs, for an uptime monitor on a platform without a
//!   heartbeat.
//!
//! A handler is then: read the config once, build the deps once, and per invocation
//! `run_sweep(&deps, &plan(&config, owner, start, deadline))`.

pub mod compose;
pub mod config;
pub mod credentials;
pub mod plan;
pub mod secret_token;
pub mod status;

pub use compose::{
    build_deps, compose, compose_with, dynamo_options, providers, providers_with, requests_since,
    run_sweep, ComposeError, PostgresRequests, ServerlessDeps, ServerlessReport, ServerlessStore,
};
pub use config::{
    ConfigError, Secret, SecretSource, ServerlessConfig, Setting, SettingProblem, StoreChoice,
    SETTINGS,
};
pub use credentials::{AwsCredentialsConfig, NoAwsCredentials, OidcTokens, WebIdentityCredentials};
pub use plan::{check_budget, minimum_budget, plan, reserve, BudgetTooShort, SweepPlan};
/// The wall clock the serverless handlers run on (their deadlines are wall time).
pub use reaper_local::SystemClock;
/// `REAPER_PROVIDERS` and the hosted providers, for handlers and their tests.
pub use reaper_providers;
pub use status::{LastSweep, ServiceStatus, StatusLimits};
