//! The read-only dashboard `reaper watch --listen ADDR` serves beside `/healthz` and `/metrics`:
//! the health verdict, the detached runs with their age and what the next sweep does to them,
//! the reclaim ledger and its leaks, the recent sweeps, and one page per run.
//!
//! Invariants:
//! - Every page reads a bounded number of rows, whatever the backlog: the detached runs one
//!   keyset page at a time ([`PAGE_ROWS`] + 1 rows), the ledger [`LEDGER_ROWS`] + 1 entries,
//!   a run page one record, the sweeps page [`read::STORE_SWEEP_ROWS`] sweep records. Nothing here lists a table whole.
//! - Nothing here writes: every route is GET (HEAD), so the read-only status token is enough.
//! - Every value that came from the database or the request is HTML-escaped by `maud`; no
//!   setting (the token, provider credentials, the database URL) is ever rendered.

mod pages;
mod read;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use reaper_core::health::StatusLimits;
use reaper_core::reap::{ReapOutcome, SweepStatus};
use reaper_core::EpochMs;
use serde::Deserialize;

use crate::health::StatusToken;
use crate::sweep::Swept;
use crate::wiring::Ports;

/// Detached runs per page.
pub const PAGE_ROWS: usize = 50;
/// Ledger entries shown (the earliest due first); the counts above them cover every entry.
pub const LEDGER_ROWS: usize = 100;
/// Sweeps this process remembers for the sweeps page.
pub const RECENT_SWEEPS: usize = 20;

/// One sweep as the sweeps page shows it.
#[derive(Debug, Clone)]
pub struct SweepLine {
    pub n: u64,
    pub started_at: EpochMs,
    pub duration_ms: i64,
    pub headline: String,
    pub swept: bool,
    pub considered: usize,
    /// The non-zero outcome counts, in the report's order.
    pub outcomes: Vec<(&'static str, usize)>,
    pub ledger_pending: Option<u64>,
    pub ledger_leaked: Option<u64>,
    /// Why the sweep could not do its job, when it could not.
    pub trouble: Option<String>,
}

/// The last [`RECENT_SWEEPS`] sweeps of this `watch` process, those that wrote no record
/// included (paused, another sweep holding the lease); the store's sweep records, of every
/// host, are on the page above them.
#[derive(Debug, Default)]
pub struct RecentSweeps {
    ring: Mutex<VecDeque<SweepLine>>,
}

impl RecentSweeps {
    pub fn observe(&self, n: u64, swept: &Swept) {
        let report = &swept.report;
        let r = &report.report;
        let line = SweepLine {
            n,
            started_at: report.started_at,
            duration_ms: report.duration_ms,
            headline: crate::render::sweep_headline(report),
            swept: report.sweep == SweepStatus::Swept,
            considered: r.considered,
            outcomes: ReapOutcome::ALL
                .iter()
                .map(|o| (o.as_str(), r.outcomes.get(*o)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            ledger_pending: r.reclaims.ledger.map(|l| l.pending),
            ledger_leaked: r.reclaims.ledger.map(|l| l.leaked),
            trouble: swept.cannot_run().map(|f| f.message),
        };
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        if ring.len() == RECENT_SWEEPS {
            ring.pop_back();
        }
        ring.push_front(line);
    }

    /// Newest first.
    pub fn lines(&self) -> Vec<SweepLine> {
        self.ring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// What the pages read, and the clock they judge ages by.
#[derive(Clone)]
pub struct Dashboard {
    pub ports: Ports,
    pub limits: StatusLimits,
    pub recent: Arc<RecentSweeps>,
    pub token: Option<StatusToken>,
    pub clock: Arc<dyn reaper_core::Clock>,
}

impl Dashboard {
    /// The dashboard's routes, to merge into the health router.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(overview))
            .route("/runs", get(detached))
            .route("/runs/{run_id}", get(run))
            .route("/ledger", get(ledger))
            .route("/sweeps", get(sweeps))
            .with_state(self)
    }

    fn admits(&self, headers: &HeaderMap) -> bool {
        self.token.as_ref().is_none_or(|t| t.admits(headers))
    }

    fn now(&self) -> EpochMs {
        self.clock.now_ms()
    }
}

fn html(status: StatusCode, body: maud::Markup) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            // No script runs on these pages, and none may be injected: nothing loads from
            // anywhere, inline styles aside.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; frame-ancestors 'none'",
            ),
        ],
        body.into_string(),
    )
        .into_response()
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "send Authorization: Bearer <REAPER_STATUS_TOKEN>\n",
    )
        .into_response()
}

async fn overview(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    if !d.admits(&headers) {
        return unauthorized();
    }
    let now = d.now();
    let status = crate::health::verdict(&d.ports, d.limits, now).await;
    let sweeps = read::store_sweeps(&d.ports, read::OVERVIEW_SWEEP_ROWS).await;
    html(StatusCode::OK, pages::overview(&status, &sweeps, now))
}

/// `?after=<detachedSince>.<runId>`: the keyset position the previous page ended at.
#[derive(Debug, Deserialize)]
struct PageQuery {
    after: Option<String>,
}

async fn detached(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Query(q): Query<PageQuery>,
) -> Response {
    if !d.admits(&headers) {
        return unauthorized();
    }
    let after = match q.after.as_deref().map(read::parse_cursor) {
        None => None,
        Some(Some(c)) => Some(c),
        Some(None) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::problem(
                    "Bad page position",
                    "The after= parameter is not a position this dashboard wrote \
                     (<detachedSince>.<runId>); start again from the first page.",
                ),
            )
        }
    };
    let now = d.now();
    match read::detached_page(&d.ports, now, after, PAGE_ROWS).await {
        Ok(page) => html(
            StatusCode::OK,
            pages::detached(&page, d.limits.detached_ttl_ms, now),
        ),
        Err(e) => store_failed(e),
    }
}

async fn run(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    Path(run_id): Path<String>,
) -> Response {
    if !d.admits(&headers) {
        return unauthorized();
    }
    let now = d.now();
    match read::run_page(&d.ports, &run_id).await {
        Ok(Some(page)) => html(
            StatusCode::OK,
            pages::run(&page, d.limits.detached_ttl_ms, now),
        ),
        Ok(None) => html(
            StatusCode::NOT_FOUND,
            pages::problem(
                "No such run",
                &format!("The store has no run with id {run_id:?}."),
            ),
        ),
        Err(e) => store_failed(e),
    }
}

async fn ledger(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    if !d.admits(&headers) {
        return unauthorized();
    }
    let now = d.now();
    match read::ledger_page(&d.ports, LEDGER_ROWS).await {
        Ok(page) => html(StatusCode::OK, pages::ledger(&page, now)),
        Err(e) => store_failed(e),
    }
}

async fn sweeps(State(d): State<Dashboard>, headers: HeaderMap) -> Response {
    if !d.admits(&headers) {
        return unauthorized();
    }
    let now = d.now();
    let last = reaper_core::health::read_last_sweep(&*d.ports.leases).await;
    let stored = read::store_sweeps(&d.ports, read::STORE_SWEEP_ROWS).await;
    html(
        StatusCode::OK,
        pages::sweeps(last, &stored, &d.recent.lines(), d.limits, now),
    )
}

fn store_failed(e: reaper_core::StoreError) -> Response {
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        pages::problem(
            "The store could not be read",
            &format!("{e}. The page reads again when reloaded."),
        ),
    )
}

#[cfg(test)]
mod tests;
