//! The reaper sweep as a Vercel Cron function on the official Rust runtime (`vercel_runtime` 2.x).
//!
//! Vercel calls `GET /api/reap` on the production deployment at the `vercel.json` schedule, with
//! `Authorization: Bearer $CRON_SECRET`. The function checks the secret in constant time, runs the
//! single-flight, deadline-aware sweep over DynamoDB and `reaper-sandboxd`, and answers with the
//! report as JSON.
//!
//! Invariants:
//! - Nothing sweeps without the exact bearer secret; an unset secret refuses everything (500).
//! - The secret never reaches a log line, an error message or a `Debug` output.
//! - DynamoDB is reached with a role assumed with the deployment's OIDC token (`AWS_ROLE_ARN`;
//!   each authorized request's `x-vercel-oidc-token` is offered to the store's credentials), or
//!   with explicit keys; with neither the function refuses to start. No token or credential is
//!   ever logged.
//! - Vercel's runtime does not tell the function its deadline: the budget is `REAPER_BUDGET`
//!   (default [`DEFAULT_MAX_DURATION_SECS`], kept equal to `maxDuration` in `vercel.json` by a
//!   tidy test), measured from the request's arrival.
//! - `GET /api/reap?status` with the same bearer secret reads, never sweeps: the last sweep (a
//!   mark each sweep leaves in the table), the reclaim ledger and the detached runs, answered
//!   200 when healthy and 503 when a sandbox leaked, a detached run outlived the TTL + run
//!   budget + 2 schedule intervals, or no sweep finished for a budget + 2 intervals. The
//!   interval is the longest gap of the `vercel.json` schedule compiled in.
//! - Duplicate and overlapping deliveries are safe: the sweep lease lets one sweep run; the other
//!   answers 200 saying a sweep is already running.
//! - Request logic is plain functions over the request head ([`request::gate`]), so every case
//!   is unit-tested without a server.

pub mod app;
pub mod auth;
pub mod budget;
pub mod request;
pub mod schedule;

pub use app::{App, StatusReader, Sweeper};
pub use auth::{CronSecret, SecretError, CRON_SECRET_ENV};
pub use budget::{budget, DEFAULT_MAX_DURATION_SECS};
pub use request::{gate, oidc_token, Refusal, Route, CRON_PATH, OIDC_TOKEN_HEADER, STATUS_QUERY};
