//! The health contract every platform serves (`reaper_core::health`): `reaper status --check`,
//! and `reaper watch --listen ADDR` serving `/healthz` (GET and HEAD; 503 when unhealthy) and
//! `/metrics` (Prometheus text). Both only read: no route can start a sweep, so a monitor may
//! hold the optional read-only `REAPER_STATUS_TOKEN`. The dashboard (`crate::dashboard`) is
//! served beside them under the same token.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use reaper_core::health::{read_last_sweep, read_status, ServiceStatus, StatusLimits};
use reaper_core::reap::{ReapOutcome, SweepStatus};
use reaper_core::{Clock, EpochMs};
use reaper_local::SystemClock;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::sweep::Swept;
use crate::wiring::{Ports, Store};
use crate::Failure;

/// The environment variable holding the read-only status token.
pub const STATUS_TOKEN: &str = "REAPER_STATUS_TOKEN";

/// The verdict's bounds for a CLI deployment: its TTL and run budget, `every` as the schedule
/// interval (the `watch` interval or the cron period), and the sweep lease's TTL as one sweep's
/// budget (the longest a sweep in progress holds the lease without renewing it).
pub fn limits(detached_ttl_ms: u64, run_budget_ms: u64, every_ms: u64) -> StatusLimits {
    let mut options = reaper_core::reap::ReapOptions::new(detached_ttl_ms, "status");
    options.run_budget_ms = run_budget_ms;
    StatusLimits {
        detached_ttl_ms,
        run_budget_ms,
        schedule_interval_ms: every_ms,
        budget_ms: options.claim_ttl().saturating_mul(2),
    }
}

/// Reads the last-sweep mark, the ledger and one page of detached runs, and judges them.
pub async fn verdict(ports: &Ports, limits: StatusLimits, now: EpochMs) -> ServiceStatus {
    let last = read_last_sweep(&*ports.leases).await;
    read_status(&*ports.runs, &*ports.ledger, last, limits, now).await
}

/// The verdict for people: `healthy` or `UNHEALTHY` with each problem on its own line.
pub fn render(status: &ServiceStatus) -> String {
    let mut out = if status.healthy {
        "healthy".to_string()
    } else {
        format!("UNHEALTHY ({} problem(s)):", status.problems.len())
    };
    for p in &status.problems {
        out.push_str("\n  - ");
        out.push_str(p);
    }
    match (&status.last_sweep, status.last_sweep_age_ms) {
        (Some(_), Some(age)) => out.push_str(&format!(
            "\nlast sweep: {} ago (stale after {})",
            crate::render::human_ms(age),
            crate::render::human_ms(status.stale_sweep_after_ms as i64)
        )),
        _ => out.push_str("\nlast sweep: none recorded yet"),
    }
    if let Some(l) = &status.ledger {
        out.push_str(&format!(
            "\nreclaim ledger: pending {}, leaked {}",
            l.pending, l.leaked
        ));
    }
    if let Some(d) = &status.detached {
        out.push_str(&format!(
            "\ndetached: {}{} ({} past the TTL)",
            d.listed,
            if d.more { "+" } else { "" },
            d.past_ttl
        ));
    }
    out.push('\n');
    out
}

/// The read-only status token: only its digest is kept, compared in constant time.
#[derive(Clone)]
pub struct StatusToken([u8; 32]);

impl std::fmt::Debug for StatusToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusToken(..)")
    }
}

impl StatusToken {
    /// From `REAPER_STATUS_TOKEN`: unset or empty means the endpoints are open.
    pub fn from_env() -> Result<Option<StatusToken>, Failure> {
        match std::env::var(STATUS_TOKEN) {
            // Empty is unset, as for every token setting (`settings::read_token`).
            Ok(v) if v.is_empty() => Ok(None),
            Ok(v) => StatusToken::parse(&v).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(Failure::usage(
                reaper_core::settings::TokenError {
                    setting: STATUS_TOKEN.into(),
                    problem: reaper_core::settings::TokenProblem::Charset,
                }
                .to_string(),
            )),
        }
    }

    /// A token's value as `REAPER_STATUS_TOKEN` holds it, by the rule every token follows
    /// (`reaper_core::settings::check_token`).
    pub fn parse(v: &str) -> Result<StatusToken, Failure> {
        reaper_core::settings::check_token(STATUS_TOKEN, v)
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok(StatusToken::digest_of(v))
    }

    fn digest_of(v: &str) -> StatusToken {
        StatusToken(digest(format!("Bearer {v}").as_bytes()))
    }

    /// Exactly one `Authorization: Bearer <token>` header.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        match (values.next(), values.next()) {
            (Some(v), None) => bool::from(digest(v.as_bytes()).ct_eq(&self.0)),
            _ => false,
        }
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

/// What `watch` exports at `/metrics`, updated after every sweep.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    sweeps: Counter,
    sweep_failures: Counter,
    runs: Family<OutcomeLabel, Counter>,
    duration: Histogram,
    backlog: Gauge,
    oldest_detached: Gauge<f64, AtomicU64>,
    ledger_pending: Gauge,
    ledger_leaked: Gauge,
    last_sweep: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("reaper");
        let sweeps = Counter::default();
        registry.register(
            "sweeps",
            "Sweeps that held the lease and ran",
            sweeps.clone(),
        );
        let sweep_failures = Counter::default();
        registry.register(
            "sweep_failures",
            "Sweeps that could not do their job: the lease store failed, the listing failed, \
             or the database is damaged",
            sweep_failures.clone(),
        );
        let runs = Family::<OutcomeLabel, Counter>::default();
        registry.register("runs", "Runs handled, by outcome", runs.clone());
        let duration =
            Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]);
        registry.register_with_unit(
            "sweep_duration",
            "How long each sweep took",
            prometheus_client::registry::Unit::Seconds,
            duration.clone(),
        );
        let backlog = Gauge::default();
        registry.register(
            "backlog",
            "Detached runs waiting at the last sweep",
            backlog.clone(),
        );
        let oldest_detached = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "oldest_detached_age",
            "How long the oldest detached run had waited at the last sweep",
            prometheus_client::registry::Unit::Seconds,
            oldest_detached.clone(),
        );
        let ledger_pending = Gauge::default();
        registry.register(
            "ledger_pending",
            "Reclaim-ledger entries: runs whose aftermath is not yet confirmed",
            ledger_pending.clone(),
        );
        let ledger_leaked = Gauge::default();
        registry.register(
            "ledger_leaked",
            "Sandboxes whose destroy failed and may still be running",
            ledger_leaked.clone(),
        );
        let last_sweep = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "last_sweep_timestamp",
            "When the last sweep finished (Unix time)",
            prometheus_client::registry::Unit::Seconds,
            last_sweep.clone(),
        );
        for outcome in ReapOutcome::ALL {
            // Every outcome is exported from the start, so a rate over it is never absent.
            let _ = runs.get_or_create(&OutcomeLabel {
                outcome: outcome.as_str().into(),
            });
        }
        Metrics {
            registry,
            sweeps,
            sweep_failures,
            runs,
            duration,
            backlog,
            oldest_detached,
            ledger_pending,
            ledger_leaked,
            last_sweep,
        }
    }

    /// Counts one sweep's report.
    pub fn observe(&self, swept: &Swept) {
        let report = &swept.report;
        let failed = swept.cannot_run().is_some()
            || matches!(
                report.sweep,
                SweepStatus::LeaseUnavailable { .. } | SweepStatus::InvalidOptions { .. }
            );
        if failed {
            self.sweep_failures.inc();
        }
        if report.sweep != SweepStatus::Swept {
            return;
        }
        self.sweeps.inc();
        self.duration
            .observe(report.duration_ms.max(0) as f64 / 1000.0);
        let r = &report.report;
        for outcome in ReapOutcome::ALL {
            let n = r.outcomes.get(outcome) as u64;
            if n > 0 {
                self.runs
                    .get_or_create(&OutcomeLabel {
                        outcome: outcome.as_str().into(),
                    })
                    .inc_by(n);
            }
        }
        self.backlog.set(r.slo.backlog as i64);
        self.oldest_detached
            .set(r.slo.oldest_detached_ms.unwrap_or(0) as f64 / 1000.0);
        if let Some(l) = r.reclaims.ledger {
            self.ledger_pending.set(l.pending as i64);
            self.ledger_leaked.set(l.leaked as i64);
        }
        self.last_sweep
            .set((report.started_at + report.duration_ms) as f64 / 1000.0);
    }

    fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// What the routes read.
#[derive(Clone)]
struct Served {
    store: Arc<Store>,
    limits: StatusLimits,
    metrics: Arc<Metrics>,
    token: Option<StatusToken>,
}

/// Binds `addr` (before the first sweep, so a bad address fails at start) and serves the
/// routes in the background. Returns the bound address (port 0 picks one).
pub async fn listen(
    addr: &str,
    store: Arc<Store>,
    limits: StatusLimits,
    metrics: Arc<Metrics>,
    recent: Arc<crate::dashboard::RecentSweeps>,
    token: Option<StatusToken>,
) -> Result<SocketAddr, Failure> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        Failure::usage(format!(
            "invalid value for --listen (REAPER_LISTEN): cannot listen on {addr:?}: {e}; \
             expected a free HOST:PORT such as 127.0.0.1:9187"
        ))
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::cannot_run(format!("cannot read the listening address: {e}")))?;
    let dashboard = crate::dashboard::Dashboard {
        ports: store.ports(),
        limits,
        recent,
        token: token.clone(),
        clock: Arc::new(SystemClock),
    };
    let served = Served {
        store,
        limits,
        metrics,
        token,
    };
    // GET routes answer HEAD too (axum drops the body); every other method is 405.
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(serve_metrics))
        .with_state(served)
        .merge(dashboard.router());
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(target: "reaper", %error, "the health endpoint stopped serving");
        }
    });
    Ok(bound)
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "send Authorization: Bearer <REAPER_STATUS_TOKEN>\n",
    )
        .into_response()
}

async fn healthz(State(s): State<Served>, method: Method, headers: HeaderMap) -> Response {
    if s.token.as_ref().is_some_and(|t| !t.admits(&headers)) {
        return unauthorized();
    }
    let status = verdict(&s.store.ports(), s.limits, SystemClock.now_ms()).await;
    let code = if status.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = serde_json::to_string(&status).unwrap_or_default();
    tracing::debug!(target: "reaper", %method, healthy = status.healthy, "health check");
    (
        code,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn serve_metrics(State(s): State<Served>, headers: HeaderMap) -> Response {
    if s.token.as_ref().is_some_and(|t| !t.admits(&headers)) {
        return unauthorized();
    }
    match s.metrics.encode() {
        // The OpenMetrics text format, which Prometheus scrapes natively.
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
