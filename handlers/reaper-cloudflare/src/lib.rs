//! The reaper on Cloudflare: a Durable Object (`RunReaper`) whose alarm runs one sweep of the
//! detached runs in D1 and re-arms on every path, a Cron Trigger watchdog that re-arms a missing
//! or stale alarm (which also arms the first one after a deploy), and optional authenticated admin
//! routes.
//!
//! [`config`] and [`plan`] are plain Rust (tested natively); everything that touches JS is in
//! the wasm32-only modules.
//!
//! Invariants:
//! - `alarm()` arms the safety net ([`plan::safety_net_at`]) before anything that can fail, so
//!   a sweep that panics (aborting the wasm instance), hangs or is killed still leaves an alarm.
//! - Every alarm time is absolute (`set_alarm` with a `DateTime`): worker's `i64` and
//!   `Duration` forms are offsets from now.
//! - Admin routes compare the bearer token in constant time and refuse when no token is set.
//! - `GET`/`HEAD /status` answers the [`health`] verdict (200 or 503) to a bearer of the
//!   read-only `REAPER_STATUS_TOKEN` (or the admin token); it never sweeps or writes runs.

pub mod config;
pub mod health;
pub mod logging;
pub mod meter;
pub mod plan;

#[cfg(target_arch = "wasm32")]
mod wasm;
