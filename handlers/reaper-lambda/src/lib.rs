//! The reaper sweep as an AWS Lambda function: a composition root over
//! [`reaper_serverless`] (DynamoDB stores, the `reaper-sandboxd` provider, deadline-aware
//! planning). `main.rs` only sets up tracing and the runtime.
//!
//! - Any payload sweeps: an EventBridge rule's "Scheduled Event" envelope, a Scheduler `Input`
//!   (even `{}`), a manual test event. The payload is only recognised for the log.
//! - The deadline is the invocation's (`ctx.deadline`), shortened by `REAPER_BUDGET` if set.
//! - An invocation always succeeds and returns the report: a sweep folds every per-run problem
//!   into its report, and "another sweep holds the lease" is an outcome, so Lambda's own retries
//!   never stack a second sweep on the next tick.
//! - A bad configuration fails the *init* (one error log line naming every bad variable, then
//!   the process exits non-zero before taking any event): Lambda reports `Runtime.ExitError`
//!   for the invocation and re-runs init at the next tick, not in a loop.
//! - Each invocation logs one JSON summary and one CloudWatch Embedded Metric Format line
//!   ([`emf`]).

pub mod emf;
pub mod trigger;

use std::time::Duration;

use lambda_runtime::LambdaEvent;
use reaper_core::Clock;
use reaper_local::SystemClock;
use reaper_serverless::{
    build_deps, plan, run_sweep, ComposeError, ConfigError, ServerlessConfig, ServerlessDeps,
    ServerlessReport,
};
use serde_json::Value;

pub use trigger::Trigger;

/// The CloudWatch namespace of the EMF metrics (default [`emf::DEFAULT_NAMESPACE`]).
pub const METRICS_NAMESPACE: &str = "REAPER_METRICS_NAMESPACE";
/// Used only when the runtime gave no usable deadline (never in Lambda): Lambda's longest
/// timeout.
pub const FALLBACK_BUDGET: Duration = Duration::from_secs(900);
/// A deadline further in the past than this is not a real one (clock skew is far smaller).
const MAX_CLOCK_SKEW_MS: i64 = 60_000;

/// The invocation's deadline (epoch ms): the runtime's `Lambda-Runtime-Deadline-Ms`, unless it
/// is not a plausible instant. cargo-lambda 1.9.2's emulator sends `600000` (a duration, not
/// an epoch instant); taken literally, that deadline passed in 1970 and every run would be
/// deferred. Then the budget is `REAPER_BUDGET`, else [`FALLBACK_BUDGET`], from `start`.
pub fn invocation_deadline(runtime_deadline: u64, start: i64, budget: Option<Duration>) -> i64 {
    match i64::try_from(runtime_deadline) {
        Ok(d) if d >= start - MAX_CLOCK_SKEW_MS => d,
        _ => {
            let budget = budget.unwrap_or(FALLBACK_BUDGET);
            tracing::warn!(
                runtime_deadline,
                budget_ms = budget.as_millis() as u64,
                "the runtime's deadline is not a plausible epoch time (a local emulator?); \
                 using the budget from the invocation's start"
            );
            start + budget.as_millis() as i64
        }
    }
}

/// The function could not start.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Compose(#[from] ComposeError),
}

/// What one execution environment builds at cold start and reuses for every invocation.
#[derive(Debug)]
pub struct Function {
    pub config: ServerlessConfig,
    pub deps: ServerlessDeps,
    pub namespace: String,
}

impl Function {
    /// Reads the settings through `get` and builds every port (no request is made).
    pub async fn init(get: impl Fn(&str) -> Option<String>) -> Result<Function, InitError> {
        let config = ServerlessConfig::from_env(&get)?;
        let deps = build_deps(&config).await?;
        let namespace = get(METRICS_NAMESPACE)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| emf::DEFAULT_NAMESPACE.into());
        Ok(Function {
            config,
            deps,
            namespace,
        })
    }

    /// One invocation: plan from the context's deadline, sweep, log, emit metrics, return the
    /// report. Never fails.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> ServerlessReport {
        let (payload, ctx) = event.into_parts();
        let start = SystemClock.now_ms();
        let deadline = invocation_deadline(ctx.deadline, start, self.config.budget);
        let function = ctx.env_config.function_name.as_str();
        let trigger = Trigger::recognise(&payload);
        tracing::info!(
            request_id = %ctx.request_id,
            trigger = %serde_json::to_string(&trigger).unwrap_or_default(),
            remaining_ms = deadline - start,
            "sweep starting"
        );
        let owner = format!("lambda:{function}:{}", ctx.request_id);
        let plan = plan(&self.config, owner, start, deadline);
        let report = run_sweep(&self.deps, &plan).await;
        log_summary(&report);
        let metrics = emf::document(&report, &self.namespace, function, SystemClock.now_ms());
        // Straight to stdout, not through tracing: EMF needs `_aws` at the top level.
        println!("{metrics}");
        report
    }
}

fn log_summary(report: &ServerlessReport) {
    let r = &report.sweep.report;
    let o = &r.outcomes;
    tracing::info!(
        state = report.state(),
        considered = r.considered,
        probed = r.probed,
        deferred = r.deferred,
        finalized = o.finalized,
        expired = o.expired,
        producing = o.producing,
        unknown = o.unknown,
        budget_exceeded = o.budget_exceeded,
        not_claimed = o.not_claimed,
        reclaim_failed = o.reclaim_failed,
        failed = o.failed,
        duration_ms = report.sweep.duration_ms,
        worst_case_runs = report.plan.worst_case_runs,
        dynamodb_requests = report.dynamodb.total.requests,
        "sweep summary"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_796_000_000_000;

    #[test]
    fn a_real_runtime_deadline_is_used_as_is() {
        assert_eq!(
            invocation_deadline((NOW + 300_000) as u64, NOW, None),
            NOW + 300_000
        );
        assert_eq!(
            invocation_deadline((NOW + 300_000) as u64, NOW, Some(Duration::from_secs(5))),
            NOW + 300_000,
            "the plan applies REAPER_BUDGET, not this"
        );
    }

    #[test]
    fn a_deadline_a_few_seconds_past_is_clock_skew_and_still_used() {
        assert_eq!(
            invocation_deadline((NOW - 2_000) as u64, NOW, None),
            NOW - 2_000
        );
    }

    #[test]
    fn the_emulators_duration_shaped_deadline_falls_back_to_the_budget() {
        assert_eq!(
            invocation_deadline(600_000, NOW, Some(Duration::from_secs(20))),
            NOW + 20_000
        );
        assert_eq!(invocation_deadline(600_000, NOW, None), NOW + 900_000);
        assert_eq!(invocation_deadline(0, NOW, None), NOW + 900_000);
        assert_eq!(invocation_deadline(u64::MAX, NOW, None), NOW + 900_000);
    }
}
