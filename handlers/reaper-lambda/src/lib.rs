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
//!   for the invocation and re-runs init at the next tick, not in a loop. So does a budget
//!   (`REAPER_BUDGET`, which the template sets to the function timeout, or
//!   `AWS_LAMBDA_FUNCTION_TIMEOUT` where an emulator sets it) that leaves no room for one run
//!   after the margin: it would deploy green and reap nothing, forever.
//! - Each invocation logs one JSON summary and one CloudWatch Embedded Metric Format line
//!   ([`emf`]).

pub mod emf;
pub mod trigger;

use std::time::Duration;

use lambda_runtime::LambdaEvent;
use reaper_core::Clock;
use reaper_local::SystemClock;
use reaper_serverless::{
    build_deps, check_budget, plan, run_sweep, BudgetTooShort, ComposeError, ConfigError,
    ServerlessConfig, ServerlessDeps, ServerlessReport,
};
use serde_json::Value;

pub use trigger::Trigger;

/// The CloudWatch namespace of the EMF metrics (default [`emf::DEFAULT_NAMESPACE`]).
pub const METRICS_NAMESPACE: &str = "REAPER_METRICS_NAMESPACE";
/// Used only when the runtime gave no usable deadline (never in Lambda): Lambda's longest
/// timeout.
pub const FALLBACK_BUDGET: Duration = Duration::from_secs(900);
/// The function timeout in whole seconds, where the environment says it (SAM local and the
/// runtime interface emulator do; the Lambda service does not, hence `REAPER_BUDGET`).
pub const FUNCTION_TIMEOUT: &str = "AWS_LAMBDA_FUNCTION_TIMEOUT";
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

/// The shortest invocation budget known before the first event, and the setting it comes from
/// (named as the operator changes it): the smaller of `REAPER_BUDGET` and
/// `AWS_LAMBDA_FUNCTION_TIMEOUT`; `None` when neither is set (then only the first invocation's
/// deadline tells).
pub fn init_budget(
    config: &ServerlessConfig,
    get: impl Fn(&str) -> Option<String>,
) -> Option<(Duration, &'static str)> {
    let timeout = get(FUNCTION_TIMEOUT)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(|s| {
            (
                Duration::from_secs(s),
                "the function timeout: the template's TimeoutSeconds",
            )
        });
    let configured = config
        .budget
        .map(|b| (b, "REAPER_BUDGET: the template sets it to TimeoutSeconds"));
    match (timeout, configured) {
        (Some(t), Some(c)) => Some(if c.0 <= t.0 { c } else { t }),
        (t, c) => t.or(c),
    }
}

/// The function could not start.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Budget(#[from] BudgetTooShort),
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
    /// Reads the settings through `get`, refuses a budget that fits no run, and builds every
    /// port (no request is made).
    pub async fn init(get: impl Fn(&str) -> Option<String>) -> Result<Function, InitError> {
        let config = ServerlessConfig::from_env(&get)?;
        if let Some((budget, source)) = init_budget(&config, &get) {
            check_budget(&config, budget, source)?;
        }
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
        report.log_damage();
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
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = [
            ("REAPER_TABLE", "reaper-runs"),
            ("REAPER_SANDBOXD_URL", "http://127.0.0.1:9"),
            ("REAPER_SANDBOXD_TOKEN", "sandboxd-token-0123456789"),
            ("REAPER_DETACHED_TTL", "30m"),
            ("AWS_REGION", "us-east-1"),
        ]
        .iter()
        .chain(pairs)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        move |k| map.get(k).cloned()
    }

    #[tokio::test]
    async fn a_bad_sandboxd_token_fails_the_init_with_the_sentence_every_binary_gives() {
        for bad in [
            "short-token",
            "0123456789abcdef-token\n",
            "0123456789abcdef token",
        ] {
            let err = Function::init(env(&[("REAPER_SANDBOXD_TOKEN", bad)]))
                .await
                .unwrap_err();
            let sentence = reaper_core::settings::check_token("REAPER_SANDBOXD_TOKEN", bad)
                .unwrap_err()
                .to_string();
            assert!(err.to_string().contains(&sentence), "{bad:?}: {err}");
        }
    }

    #[tokio::test]
    async fn a_timeout_that_fits_no_run_fails_the_init_naming_the_values_to_change() {
        let err = Function::init(env(&[("REAPER_BUDGET", "60s")]))
            .await
            .unwrap_err();
        let InitError::Budget(e) = &err else {
            panic!("expected the budget refusal, got {err}");
        };
        assert_eq!(e.minimum_budget_ms, 122_000);
        let text = err.to_string();
        assert!(
            text.contains("budget of 60s (REAPER_BUDGET: the template sets it to TimeoutSeconds)"),
            "{text}"
        );
        assert!(text.contains("at least 122s"), "{text}");
        assert!(
            text.contains("lower REAPER_RUN_BUDGET, REAPER_STEP_TIMEOUT, REAPER_QUIET_WINDOW"),
            "{text}"
        );
        assert!(Function::init(env(&[("REAPER_BUDGET", "121s")]))
            .await
            .is_err());
        assert!(Function::init(env(&[("REAPER_BUDGET", "122s")]))
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn an_emulators_function_timeout_is_checked_and_the_shorter_budget_wins() {
        let err = Function::init(env(&[(FUNCTION_TIMEOUT, "30"), ("REAPER_BUDGET", "300s")]))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("budget of 30s (the function timeout: the template's TimeoutSeconds)"),
            "{err}"
        );
        let config = ServerlessConfig::from_env(env(&[("REAPER_BUDGET", "150s")])).unwrap();
        let source = |pairs: &[(&str, &str)]| init_budget(&config, env(pairs));
        assert_eq!(
            source(&[(FUNCTION_TIMEOUT, "200")]).map(|b| b.0),
            Some(Duration::from_secs(150))
        );
        assert_eq!(
            source(&[(FUNCTION_TIMEOUT, "not a number")]).map(|b| b.0),
            Some(Duration::from_secs(150))
        );
        let unset = ServerlessConfig::from_env(env(&[])).unwrap();
        assert_eq!(
            init_budget(&unset, env(&[])),
            None,
            "nothing to check before the first event"
        );
        assert!(Function::init(env(&[])).await.is_ok());
    }

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
