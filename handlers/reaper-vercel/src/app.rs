//! [`App`]: one request in, one response out. The sweep is behind [`Sweeper`] and the status
//! read behind [`StatusReader`], so the request handling is tested without a store;
//! [`ServerlessSweeper`] is the real one of both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use reaper_core::StoreError;
use reaper_core::{Clock, EpochMs};
use reaper_serverless::status::{assess, read_last_sweep, read_status, record_last_sweep};
use reaper_serverless::{
    build_deps, check_budget, plan, run_sweep, BudgetTooShort, ComposeError, ConfigError,
    NoAwsCredentials, OidcTokens, ServerlessConfig, ServerlessDeps, ServerlessReport,
    ServiceStatus, StatusLimits,
};

use crate::auth::{CronSecret, SecretError, CRON_SECRET_ENV};
use crate::budget::budget;
use crate::request::{
    gate_with_status_token, oidc_token, report_response, status_response, Route, STATUS_TOKEN_ENV,
};
use crate::schedule::{deployed_schedule, longest_interval, ScheduleError};

/// How long writing the last-sweep mark may take: it runs inside the safety margin, after the
/// sweep.
const MARK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a status read may take before it answers 503 (a monitor's own timeout is often
/// 30 s).
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one single-flight sweep that starts no run it cannot finish by `deadline`.
#[async_trait::async_trait]
pub trait Sweeper: Send + Sync {
    async fn sweep(&self, started_at: EpochMs, deadline: EpochMs) -> ServerlessReport;
}

/// Reads the deployment's status at `now`: reads only, no sweep, no write.
#[async_trait::async_trait]
pub trait StatusReader: Send + Sync {
    async fn status(&self, now: EpochMs) -> ServiceStatus;
}

/// The sweep over DynamoDB and `reaper-sandboxd`, as `reaper-serverless` composes it.
#[derive(Debug)]
pub struct ServerlessSweeper {
    pub config: ServerlessConfig,
    pub deps: ServerlessDeps,
    /// What the status read judges against.
    pub limits: StatusLimits,
    /// This process, in every lease owner it takes (`vercel:<pid>:<random>`).
    owner_prefix: String,
    invocations: AtomicU64,
}

impl ServerlessSweeper {
    pub fn new(config: ServerlessConfig, deps: ServerlessDeps, limits: StatusLimits) -> Self {
        ServerlessSweeper {
            config,
            deps,
            limits,
            owner_prefix: format!("vercel:{}:{}", std::process::id(), random_tag()),
            invocations: AtomicU64::new(0),
        }
    }
}

#[async_trait::async_trait]
impl Sweeper for ServerlessSweeper {
    async fn sweep(&self, started_at: EpochMs, deadline: EpochMs) -> ServerlessReport {
        // Fluid compute runs several requests in one process: each gets its own lease owner.
        let n = self.invocations.fetch_add(1, Ordering::Relaxed);
        let owner = format!("{}:{n}", self.owner_prefix);
        let report = run_sweep(&self.deps, &plan(&self.config, owner, started_at, deadline)).await;
        // Vercel keeps no heartbeat: the mark is how the status path knows sweeps happen.
        if let Some(mark) = reaper_serverless::status::last_sweep_of(&report) {
            match tokio::time::timeout(MARK_TIMEOUT, record_last_sweep(&self.deps.store, &mark))
                .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(%error, "the last-sweep mark was not written; the status path will show an older sweep")
                }
                Err(_) => tracing::warn!(
                    timeout_ms = MARK_TIMEOUT.as_millis() as u64,
                    "writing the last-sweep mark timed out; the status path will show an older sweep"
                ),
            }
        }
        report
    }
}

#[async_trait::async_trait]
impl StatusReader for ServerlessSweeper {
    async fn status(&self, now: EpochMs) -> ServiceStatus {
        let store = &self.deps.store;
        let read = async {
            let last = read_last_sweep(store).await;
            read_status(store.runs(), store.ledger(), last, self.limits, now).await
        };
        match tokio::time::timeout(STATUS_TIMEOUT, read).await {
            Ok(status) => status,
            Err(_) => {
                let late = || {
                    StoreError::Unavailable(format!(
                        "{} did not answer within {}s",
                        self.deps.store.product(),
                        STATUS_TIMEOUT.as_secs()
                    ))
                };
                assess(now, self.limits, Err(late()), Err(late()), Err(late()))
            }
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn random_tag() -> String {
    let mut bytes = [0u8; 4];
    match std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
    {
        Ok(()) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => format!("{:08x}", SystemClock.now_ms() as u32),
    }
}

pub use reaper_serverless::SystemClock;

/// Why the function refuses to start. Each names the variable to fix and never a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartupError {
    /// `CRON_SECRET` or `REAPER_STATUS_TOKEN` breaks the token rule (the error names which).
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Credentials(#[from] NoAwsCredentials),
    #[error(transparent)]
    Budget(#[from] BudgetTooShort),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Compose(#[from] ComposeError),
}

/// Where the budget came from, as the deployer changes it.
fn budget_source(configured: Option<Duration>) -> &'static str {
    match configured {
        Some(_) => "REAPER_BUDGET: keep it equal to maxDuration in vercel.json",
        None => "REAPER_BUDGET unset: vercel.json's maxDuration",
    }
}

/// The function: its secret, its budget, its sweep and a clock.
#[derive(Clone)]
pub struct App {
    pub secret: CronSecret,
    /// `REAPER_STATUS_TOKEN`: admits the status path only (Missing: only the cron secret does).
    pub status_token: CronSecret,
    /// How long one invocation may run (Vercel's `maxDuration`).
    pub budget: Duration,
    pub sweeper: Arc<dyn Sweeper>,
    /// Answers `?status`.
    pub status: Arc<dyn StatusReader>,
    pub clock: Arc<dyn Clock>,
    /// Where each authorized request's OIDC token goes, when the store assumes a role with it.
    pub oidc_tokens: Option<OidcTokens>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("secret", &self.secret)
            .field("budget", &self.budget)
            .field("oidc_tokens", &self.oidc_tokens)
            .finish_non_exhaustive()
    }
}

impl App {
    /// Reads `CRON_SECRET` and the shared settings through `get`, and builds the stores and the
    /// sandboxd client (no request is made). An unset secret starts a function that refuses
    /// every request; a padded one, any bad setting, neither `AWS_ROLE_ARN` nor AWS keys (Vercel
    /// has no ambient credentials), or a budget that fits no run after the margin (every cron
    /// would answer 200 and reap nothing) does not start.
    pub async fn from_env(
        get: impl Fn(&str) -> Option<String>,
        clock: Arc<dyn Clock>,
    ) -> Result<App, StartupError> {
        let secret = get(CRON_SECRET_ENV);
        let secret = CronSecret::from_env_value(secret.as_deref().map(std::ffi::OsStr::new))?;
        let status_token = get(STATUS_TOKEN_ENV);
        let status_token = CronSecret::from_token_setting(
            STATUS_TOKEN_ENV,
            status_token.as_deref().map(std::ffi::OsStr::new),
        )?;
        let config = ServerlessConfig::from_env(get)?;
        if config.uses_aws() {
            config.aws_credentials.require_explicit()?;
        }
        let budget = budget(config.budget);
        check_budget(&config, budget, budget_source(config.budget))?;
        let limits = StatusLimits {
            detached_ttl_ms: millis(config.detached_ttl),
            run_budget_ms: millis(config.run_budget),
            schedule_interval_ms: millis(longest_interval(&deployed_schedule()?)?),
            budget_ms: millis(budget),
        };
        let deps = build_deps(&config).await?;
        let oidc_tokens = deps.oidc_tokens.clone();
        let serverless = Arc::new(ServerlessSweeper::new(config, deps, limits));
        Ok(App {
            secret,
            status_token,
            budget,
            sweeper: serverless.clone(),
            status: serverless,
            clock,
            oidc_tokens,
        })
    }

    /// Answers one request from its head (the body of a cron `GET` is empty and never read).
    pub async fn handle(&self, parts: &http::request::Parts) -> Response<String> {
        // The budget counts from the request's arrival: Vercel's clock started no later.
        let started_at = self.clock.now_ms();
        let route = match gate_with_status_token(parts, &self.secret, &self.status_token) {
            Ok(route) => route,
            Err(refusal) => {
                refusal.log(parts);
                return refusal.response();
            }
        };
        // Only after the gate: an unauthenticated caller cannot swap the token the store uses.
        if let (Some(tokens), Some(token)) = (&self.oidc_tokens, oidc_token(parts)) {
            tokens.offer(token);
        }
        if route == Route::Status {
            let status = self.status.status(started_at).await;
            if status.healthy {
                tracing::info!(healthy = true, "status answered");
            } else {
                tracing::warn!(healthy = false, problems = ?status.problems, "status answered");
            }
            let mut response = status_response(&status);
            if parts.method == http::Method::HEAD {
                // The verdict is the status code; a HEAD answer carries no body.
                response.body_mut().clear();
            }
            return response;
        }
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let deadline = started_at.saturating_add(self.budget.as_millis() as i64);
        let report = self.sweeper.sweep(started_at, deadline).await;
        let outcomes = &report.sweep.report.outcomes;
        // The one outcome that costs money while nobody looks: a sandbox left running. Its own
        // ERROR line is what a log drain or a log alert matches on.
        if outcomes.reclaim_failed > 0 {
            tracing::error!(
                reclaim_failed = outcomes.reclaim_failed,
                "sandboxes of terminal runs could not be destroyed and may still be running; \
                 the report's runs[] names them"
            );
        }
        report.log_damage();
        tracing::info!(
            state = report.state(),
            reclaim_failed = outcomes.reclaim_failed,
            failed = outcomes.failed,
            considered = report.sweep.report.considered,
            probed = report.sweep.report.probed,
            deferred = report.sweep.report.deferred,
            duration_ms = report.sweep.duration_ms,
            deadline,
            dynamodb_requests = report.dynamodb.total.requests,
            cron_schedule = %header("x-vercel-cron-schedule"),
            user_agent = %header("user-agent"),
            "cron request answered"
        );
        report_response(&report)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use reaper_core::reap::{ReapReport, SweepReport, SweepStatus};
    use reaper_core::time::ManualClock;
    use reaper_serverless::Secret;
    use std::collections::HashMap;
    use std::sync::Mutex;

    const SECRET: &str = "a-secret-of-sixteen-or-more";

    pub(crate) fn report(status: SweepStatus, started_at: EpochMs) -> ServerlessReport {
        let config = ServerlessConfig {
            store: reaper_serverless::StoreChoice::DynamoDb,
            table: "t".into(),
            providers: vec![reaper_serverless::reaper_providers::ProviderKind::Sandboxd],
            hosted: Default::default(),
            sandboxd_url: "http://127.0.0.1:1".into(),
            sandboxd_token: Secret::new("x"),
            sandboxd_token_secret: None,
            provider_name: "sandboxd".into(),
            detached_ttl: Duration::from_secs(1800),
            run_budget: Duration::from_secs(30),
            max_runs: 25,
            concurrency: 4,
            fence_quiet: Duration::from_secs(5),
            step_timeout: Duration::from_secs(20),
            journal_dir: None,
            budget: None,
            deadline_margin: None,
            per_run_reserve: None,
            log_retention: Duration::from_secs(86_400),
            aws_credentials: reaper_serverless::AwsCredentialsConfig::DefaultChain,
            renamed: Vec::new(),
        };
        ServerlessReport {
            sweep: SweepReport {
                sweep: status,
                started_at,
                duration_ms: 0,
                report: ReapReport {
                    considered: 2,
                    probed: 1,
                    deferred: 3,
                    ..ReapReport::default()
                },
            },
            plan: plan(&config, "owner", started_at, started_at + 300_000),
            dynamodb: Default::default(),
            postgres: None,
        }
    }

    /// A log buffer for the tracing subscriber a test installs.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    thread_local! {
        /// Where this thread's log lines go while a test captures them.
        static CAPTURE: std::cell::RefCell<Option<Captured>> = const { std::cell::RefCell::new(None) };
    }

    /// Writes to the current thread's capture, if any; drops the line otherwise.
    struct ThreadCapture;

    impl std::io::Write for ThreadCapture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            CAPTURE.with(|c| {
                if let Some(captured) = &*c.borrow() {
                    captured.0.lock().unwrap().extend_from_slice(buf);
                }
            });
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Captures the JSON log lines this thread writes until the guard drops. One process-wide
    /// subscriber, installed once: a thread-scoped one (`set_default`) races tracing's
    /// per-callsite interest cache against other test threads and can miss a line.
    fn capture_logs() -> (Captured, impl Drop) {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .json()
                .with_writer(|| ThreadCapture)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in these tests");
        });
        let captured = Captured::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(captured.clone()));
        struct Uncapture;
        impl Drop for Uncapture {
            fn drop(&mut self) {
                CAPTURE.with(|c| *c.borrow_mut() = None);
            }
        }
        (captured, Uncapture)
    }

    struct ReclaimFailing;

    #[async_trait::async_trait]
    impl Sweeper for ReclaimFailing {
        async fn sweep(&self, started_at: EpochMs, _: EpochMs) -> ServerlessReport {
            let mut r = report(SweepStatus::Swept, started_at);
            r.sweep.report.outcomes.reclaim_failed = 2;
            r
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_sweep_that_could_not_destroy_sandboxes_says_so_in_the_body_and_an_error_line() {
        let (captured, _guard) = capture_logs();
        let (mut app, _) = recording_app(Some(SECRET), SweepStatus::Swept);
        app.sweeper = Arc::new(ReclaimFailing);

        let response = app
            .handle(&cron("GET", Some(&format!("Bearer {SECRET}"))))
            .await;
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["outcomes"]["reclaim-failed"], 2);

        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let error = lines
            .iter()
            .find(|l| l["level"] == "ERROR")
            .unwrap_or_else(|| panic!("no ERROR line: {log}"));
        assert_eq!(error["fields"]["reclaim_failed"], 2);
        let summary = lines
            .iter()
            .find(|l| l["fields"]["message"] == "cron request answered")
            .unwrap();
        assert_eq!(summary["fields"]["reclaim_failed"], 2);
    }

    /// Records each sweep's `(started_at, deadline)` and answers with `status`; records each
    /// status read's `now` and answers with a ledger holding `leaked` leaks.
    struct Recording {
        calls: Mutex<Vec<(EpochMs, EpochMs)>>,
        status: SweepStatus,
        status_reads: Mutex<Vec<EpochMs>>,
        leaked: u64,
    }

    #[async_trait::async_trait]
    impl Sweeper for Recording {
        async fn sweep(&self, started_at: EpochMs, deadline: EpochMs) -> ServerlessReport {
            self.calls.lock().unwrap().push((started_at, deadline));
            report(self.status.clone(), started_at)
        }
    }

    #[async_trait::async_trait]
    impl StatusReader for Recording {
        async fn status(&self, now: EpochMs) -> ServiceStatus {
            self.status_reads.lock().unwrap().push(now);
            let limits = StatusLimits {
                detached_ttl_ms: 1_800_000,
                run_budget_ms: 30_000,
                schedule_interval_ms: 300_000,
                budget_ms: 300_000,
            };
            let ledger = reaper_core::LedgerCounts {
                pending: self.leaked,
                leaked: self.leaked,
                oldest_first_seen: None,
            };
            assess(now, limits, Ok(None), Ok(ledger), Ok(Default::default()))
        }
    }

    fn recording_app(secret: Option<&str>, status: SweepStatus) -> (App, Arc<Recording>) {
        let sweeper = Arc::new(Recording {
            calls: Mutex::default(),
            status,
            status_reads: Mutex::default(),
            leaked: 0,
        });
        let app = App {
            secret: CronSecret::from_env_value(secret.map(std::ffi::OsStr::new)).unwrap(),
            status_token: CronSecret::Missing,
            budget: Duration::from_secs(300),
            sweeper: sweeper.clone(),
            status: sweeper.clone(),
            clock: Arc::new(ManualClock::new(1_700_000_000_000)),
            oidc_tokens: None,
        };
        (app, sweeper)
    }

    fn cron(method: &str, auth: Option<&str>) -> http::request::Parts {
        let mut b = http::Request::builder()
            .method(method)
            .uri("/api/reap")
            .header("user-agent", "vercel-cron/1.0")
            .header("x-vercel-cron-schedule", "*/5 * * * *");
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[tokio::test]
    async fn an_authorized_cron_sweeps_with_the_deadline_one_budget_after_arrival() {
        let (app, sweeper) = recording_app(Some(SECRET), SweepStatus::Swept);
        let response = app
            .handle(&cron("GET", Some(&format!("Bearer {SECRET}"))))
            .await;
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(
            (&body["considered"], &body["probed"], &body["deferred"]),
            (&2.into(), &1.into(), &3.into())
        );
        assert_eq!(body["sweep"]["state"], "swept");
        assert_eq!(
            *sweeper.calls.lock().unwrap(),
            [(1_700_000_000_000, 1_700_000_300_000)]
        );
    }

    #[tokio::test]
    async fn refused_requests_never_reach_the_sweep() {
        let (app, sweeper) = recording_app(Some(SECRET), SweepStatus::Swept);
        assert_eq!(app.handle(&cron("GET", None)).await.status(), 401);
        assert_eq!(
            app.handle(&cron("GET", Some("Bearer x"))).await.status(),
            401
        );
        let right = format!("Bearer {SECRET}");
        assert_eq!(app.handle(&cron("POST", Some(&right))).await.status(), 405);
        let (unset, unset_sweeper) = recording_app(None, SweepStatus::Swept);
        assert_eq!(
            unset.handle(&cron("GET", Some("Bearer "))).await.status(),
            500
        );
        assert!(sweeper.calls.lock().unwrap().is_empty());
        assert!(unset_sweeper.calls.lock().unwrap().is_empty());
    }

    fn status_request(auth: Option<&str>) -> http::request::Parts {
        let mut parts = cron("GET", auth);
        parts.uri = "/api/reap?status".parse().unwrap();
        parts
    }

    #[tokio::test]
    async fn an_authorized_status_request_reads_the_status_at_arrival_and_never_sweeps() {
        let (app, recording) = recording_app(Some(SECRET), SweepStatus::Swept);
        let response = app
            .handle(&status_request(Some(&format!("Bearer {SECRET}"))))
            .await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["cache-control"], "no-store");
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["healthy"], true);
        assert_eq!(body["ledger"]["leaked"], 0);
        assert_eq!(body["lastSweep"], serde_json::Value::Null);
        assert_eq!(*recording.status_reads.lock().unwrap(), [1_700_000_000_000]);
        assert!(
            recording.calls.lock().unwrap().is_empty(),
            "the status path swept"
        );
    }

    #[tokio::test]
    async fn an_unhealthy_status_is_503_with_the_problems() {
        let (mut app, _) = recording_app(Some(SECRET), SweepStatus::Swept);
        let leaking = Arc::new(Recording {
            calls: Mutex::default(),
            status: SweepStatus::Swept,
            status_reads: Mutex::default(),
            leaked: 2,
        });
        app.status = leaking.clone();
        let response = app
            .handle(&status_request(Some(&format!("Bearer {SECRET}"))))
            .await;
        assert_eq!(response.status(), 503);
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["healthy"], false);
        assert_eq!(body["ledger"]["leaked"], 2);
        assert!(body["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("2 sandbox(es) of finished runs could not be destroyed"));
        assert!(leaking.calls.lock().unwrap().is_empty());
    }

    const STATUS_TOKEN: &str = "a-read-only-status-token";

    fn with_status_token(mut app: App) -> App {
        app.status_token = CronSecret::from_token_setting(
            STATUS_TOKEN_ENV,
            Some(std::ffi::OsStr::new(STATUS_TOKEN)),
        )
        .unwrap();
        app
    }

    #[tokio::test]
    async fn the_status_token_reads_the_status_and_head_gets_the_verdict_alone() {
        let (app, recording) = recording_app(Some(SECRET), SweepStatus::Swept);
        let app = with_status_token(app);
        let bearer = format!("Bearer {STATUS_TOKEN}");
        let get = app.handle(&status_request(Some(&bearer))).await;
        assert_eq!(get.status(), 200);
        assert!(get.body().contains("\"healthy\":true"), "{}", get.body());
        let mut head = status_request(Some(&bearer));
        head.method = http::Method::HEAD;
        let answer = app.handle(&head).await;
        assert_eq!(answer.status(), 200);
        assert!(answer.body().is_empty(), "{}", answer.body());
        assert_eq!(recording.status_reads.lock().unwrap().len(), 2);
        assert!(
            recording.calls.lock().unwrap().is_empty(),
            "a status read swept"
        );
    }

    #[tokio::test]
    async fn an_unhealthy_status_is_503_to_head_as_well() {
        let (mut app, _) = recording_app(Some(SECRET), SweepStatus::Swept);
        app.status = Arc::new(Recording {
            calls: Mutex::default(),
            status: SweepStatus::Swept,
            status_reads: Mutex::default(),
            leaked: 1,
        });
        let mut head = status_request(Some(&format!("Bearer {SECRET}")));
        head.method = http::Method::HEAD;
        let answer = app.handle(&head).await;
        assert_eq!(answer.status(), 503);
        assert!(answer.body().is_empty());
    }

    #[tokio::test]
    async fn the_status_token_can_never_trigger_a_sweep() {
        let (app, recording) = recording_app(Some(SECRET), SweepStatus::Swept);
        let app = with_status_token(app);
        let response = app
            .handle(&cron("GET", Some(&format!("Bearer {STATUS_TOKEN}"))))
            .await;
        assert_eq!(response.status(), 401);
        // HEAD is for the status path only: a HEAD to the sweep is refused, whoever sends it.
        let head = app
            .handle(&cron("HEAD", Some(&format!("Bearer {SECRET}"))))
            .await;
        assert_eq!(head.status(), 405);
        assert_eq!(head.headers()[http::header::ALLOW], "GET, HEAD");
        assert!(recording.calls.lock().unwrap().is_empty());
        // With no cron secret at all, the status token still reads the status.
        let (unset, _) = recording_app(None, SweepStatus::Swept);
        let unset = with_status_token(unset);
        let read = unset
            .handle(&status_request(Some(&format!("Bearer {STATUS_TOKEN}"))))
            .await;
        assert_eq!(read.status(), 200);
    }

    #[tokio::test]
    async fn refused_status_requests_never_read_the_status() {
        let (app, recording) = recording_app(Some(SECRET), SweepStatus::Swept);
        for auth in [None, Some("Bearer x")] {
            let response = app.handle(&status_request(auth)).await;
            assert_eq!(response.status(), 401);
            assert!(response.body().is_empty());
        }
        let (unset, unset_recording) = recording_app(None, SweepStatus::Swept);
        assert_eq!(
            unset
                .handle(&status_request(Some("Bearer ")))
                .await
                .status(),
            500
        );
        assert!(recording.status_reads.lock().unwrap().is_empty());
        assert!(unset_recording.status_reads.lock().unwrap().is_empty());
        assert!(recording.calls.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_sweep_already_running_is_answered_200_and_says_so() {
        let (app, _) = recording_app(
            Some(SECRET),
            SweepStatus::AlreadyRunning {
                holder: "vercel-other".into(),
                expires_at: 5,
            },
        );
        let response = app
            .handle(&cron("GET", Some(&format!("Bearer {SECRET}"))))
            .await;
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["sweep"]["state"], "already-running");
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const SETTINGS: [(&str, &str); 5] = [
        ("REAPER_TABLE", "reaper-runs"),
        ("REAPER_SANDBOXD_URL", "http://127.0.0.1:9"),
        ("REAPER_SANDBOXD_TOKEN", "sandboxd-token-0123456789"),
        ("REAPER_DETACHED_TTL", "30m"),
        (
            "AWS_ROLE_ARN",
            "arn:aws:iam::123456789012:role/reaper-vercel",
        ),
    ];

    #[tokio::test]
    async fn start_up_without_a_role_or_aws_keys_is_refused_saying_what_to_set() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let mut pairs = SETTINGS.to_vec();
        pairs.retain(|(k, _)| *k != "AWS_ROLE_ARN");
        pairs.push((CRON_SECRET_ENV, SECRET));
        let err = App::from_env(env(&pairs), clock.clone()).await.unwrap_err();
        assert!(matches!(err, StartupError::Credentials(_)), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("set AWS_ROLE_ARN") && text.contains("vercel-oidc.yaml"),
            "{text}"
        );

        pairs.push(("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"));
        pairs.push(("AWS_SECRET_ACCESS_KEY", "secret-key-example"));
        let app = App::from_env(env(&pairs), clock).await.unwrap();
        assert!(app.oidc_tokens.is_none(), "static keys need no token");
    }

    #[tokio::test]
    async fn an_authorized_requests_oidc_token_is_kept_and_a_refused_requests_is_not() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let mut pairs = SETTINGS.to_vec();
        pairs.push((CRON_SECRET_ENV, SECRET));
        let mut app = App::from_env(env(&pairs), clock).await.unwrap();
        let tokens = app
            .oidc_tokens
            .clone()
            .expect("a role is assumed with the token");
        assert!(tokens.current().is_none());
        let (recording, _) = recording_app(Some(SECRET), SweepStatus::Swept);
        app.sweeper = recording.sweeper;
        app.status = recording.status;

        let with_token = |auth: &str, token: &str| {
            let mut parts = cron("GET", Some(auth));
            parts
                .headers
                .insert(crate::OIDC_TOKEN_HEADER, token.parse().unwrap());
            parts
        };
        app.handle(&with_token("Bearer wrong", "forged-token"))
            .await;
        assert!(
            tokens.current().is_none(),
            "a refused request's token is dropped"
        );
        let right = format!("Bearer {SECRET}");
        app.handle(&with_token(&right, "token-of-request-1")).await;
        app.handle(&with_token(&right, "token-of-request-2")).await;
        assert_eq!(
            tokens.current().as_ref().map(Secret::expose),
            Some("token-of-request-2")
        );
        assert!(!format!("{app:?}").contains("token-of-request"));
    }

    #[tokio::test]
    async fn start_up_takes_the_budget_from_reaper_budget_or_the_vercel_json_default() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let mut pairs = SETTINGS.to_vec();
        pairs.push((CRON_SECRET_ENV, SECRET));
        let app = App::from_env(env(&pairs), clock.clone()).await.unwrap();
        assert_eq!(app.budget, Duration::from_secs(300));
        pairs.push(("REAPER_BUDGET", "150s"));
        let app = App::from_env(env(&pairs), clock).await.unwrap();
        assert_eq!(app.budget, Duration::from_secs(150));
    }

    #[tokio::test]
    async fn start_up_refuses_a_budget_that_fits_no_run_naming_the_values_to_change() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let mut pairs = SETTINGS.to_vec();
        pairs.push((CRON_SECRET_ENV, SECRET));
        // The case: a 4-minute run budget at the default 300 s. 270 s usable, but one
        // run may take 20 s + 35 s + 240 s + 20 s + 2 s = 317 s.
        pairs.push(("REAPER_RUN_BUDGET", "240s"));
        let err = App::from_env(env(&pairs), clock.clone()).await.unwrap_err();
        let StartupError::Budget(e) = &err else {
            panic!("expected the budget refusal, got {err}");
        };
        assert_eq!(e.minimum_budget_ms, 353_000);
        let text = err.to_string();
        assert!(
            text.contains("budget of 300s (REAPER_BUDGET unset: vercel.json's maxDuration)"),
            "{text}"
        );
        assert!(
            text.contains("at least 353s, or lower REAPER_RUN_BUDGET, REAPER_STEP_TIMEOUT"),
            "{text}"
        );

        pairs.push(("REAPER_BUDGET", "20s"));
        pairs.retain(|(k, _)| *k != "REAPER_RUN_BUDGET");
        let err = App::from_env(env(&pairs), clock).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("budget of 20s (REAPER_BUDGET: keep it equal to maxDuration"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_bad_status_token_is_refused_at_start_up_with_the_sentence_every_binary_gives() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        for bad in [
            "short-token",
            "0123456789abcdef-token\n",
            "0123456789abcdef token",
        ] {
            let mut pairs = SETTINGS.to_vec();
            pairs.extend([(CRON_SECRET_ENV, SECRET), (STATUS_TOKEN_ENV, bad)]);
            let err = App::from_env(env(&pairs), clock.clone()).await.unwrap_err();
            assert_eq!(
                err.to_string(),
                reaper_core::settings::check_token(STATUS_TOKEN_ENV, bad)
                    .unwrap_err()
                    .to_string(),
                "{bad:?}"
            );
        }
        // The same bad sandboxd token is named the same way in the settings' list.
        let mut pairs = SETTINGS.to_vec();
        pairs.retain(|(k, _)| *k != "REAPER_SANDBOXD_TOKEN");
        pairs.extend([
            (CRON_SECRET_ENV, SECRET),
            ("REAPER_SANDBOXD_TOKEN", "short-token"),
        ]);
        let err = App::from_env(env(&pairs), clock.clone()).await.unwrap_err();
        let sentence = reaper_core::settings::check_token("REAPER_SANDBOXD_TOKEN", "short-token")
            .unwrap_err()
            .to_string();
        assert!(err.to_string().contains(&sentence), "{err}");
        // CRON_SECRET is Vercel's: a short one Vercel accepts starts, with that sentence kept
        // for the warning.
        let mut pairs = SETTINGS.to_vec();
        pairs.push((CRON_SECRET_ENV, "short-token"));
        let app = App::from_env(env(&pairs), clock).await.unwrap();
        assert_eq!(
            app.secret.weakness().unwrap().to_string(),
            reaper_core::settings::check_token(CRON_SECRET_ENV, "short-token")
                .unwrap_err()
                .to_string()
        );
    }

    #[tokio::test]
    async fn start_up_refuses_a_padded_secret_and_bad_settings_but_not_a_missing_secret() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let mut pairs = SETTINGS.to_vec();
        let app = App::from_env(env(&pairs), clock.clone()).await.unwrap();
        assert!(matches!(app.secret, CronSecret::Missing));

        pairs.push((CRON_SECRET_ENV, "padded-secret-value\n"));
        let err = App::from_env(env(&pairs), clock.clone()).await.unwrap_err();
        assert!(
            matches!(&err, StartupError::Secret(e) if e.problem == reaper_core::settings::TokenProblem::Padded)
        );
        assert!(!err.to_string().contains("padded-secret-value"));

        let err = App::from_env(env(&[(CRON_SECRET_ENV, SECRET)]), clock)
            .await
            .unwrap_err();
        let StartupError::Config(config) = err else {
            panic!("expected a configuration error, got {err}");
        };
        assert!(config.names("REAPER_TABLE") && config.names("REAPER_DETACHED_TTL"));
    }
}
