//! The process-level test harness the handler suites share: real child processes, real
//! DynamoDB Local, bounded waits on real conditions. Test support only: a dev-dependency,
//! never shipped.
//!
//! - [`util`]: unique labels, wall-clock ms, free ports, `eventually`, process state.
//! - [`escape`]: processes that try to outlive their sandbox (`setsid`, double forks, `cd /`,
//!   `env -i`), and whether they did.
//! - [`sandbox`]: small questions asked through any [`reaper_core::SandboxHandle`].
//! - [`sandboxd`] (feature `sandboxd`): a running `reaper-sandboxd` on loopback, and agents run
//!   through it to their exit sentinel.
//! - [`dynamo`] (feature `dynamo`): the DynamoDB Local endpoint (required, never skipped), a
//!   fresh table per case, detached runs seeded the way a chat route records them.
//! - `postgres` (feature `postgres`): the test PostgreSQL, a fresh database per case.
//! - [`world`] (both features): a table, a daemon and a journal directory for one case.
//!
//! A crate that finds its own binary (`env!("CARGO_BIN_EXE_…")`) keeps doing so; only other
//! packages' binaries are located here.

pub mod escape;
pub mod sandbox;
pub mod util;

#[cfg(feature = "dynamo")]
pub mod dynamo;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sandboxd")]
pub mod sandboxd;
#[cfg(all(feature = "sandboxd", feature = "dynamo"))]
pub mod world;
