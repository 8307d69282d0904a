//! A sandbox provider over Vercel Sandbox's v2 HTTP API (native reqwest or a Worker's fetch
//! transport).
//!
//! [`VercelSandboxProvider`] implements the core's `SandboxProvider` port (resume = get the
//! named sandbox and its session, destroy = delete it) and [`VercelSandbox`] its
//! `SandboxHandle` port (`exec` = run a command in the session, read its log stream, wait for
//! its exit code). The network is
//! `reaper_http_sandbox::HttpTransport`: the `native` feature (on by default) uses its
//! `ReqwestTransport`; a Cloudflare Worker passes the fetch transport it already has. Without
//! `native` this crate has no tokio, sockets or `std::process`, so it builds for
//! `wasm32-unknown-unknown`.
//!
//! Invariants:
//! - No answer, a 429 or a 5xx is [`reaper_core::SandboxError::Unreachable`], so the journal
//!   probe reports `unknown` and never `finished`.
//! - "Gone" (a 404 whose body says the sandbox was not found, a 410, a stopped sandbox that is
//!   not persistent) is `None` from `resume`, `Ok` from `destroy` and `NotFound` from `exec`;
//!   every other refusal, a bare 404 included, is an error that keeps the record.
//! - `resume` never starts a sandbox: a stopped persistent sandbox is an error (it lives on).
//!   Only `start_for_read` resumes one (`resume=true`), when the core asks to read a journal;
//!   `restore` stops it again.
//! - An `exec`'s output is bounded per stream inside the sandbox ([`wrapper`]) and its log
//!   stream by [`log_stream_bound`]: more is `OutputLimit` (or an error), never a truncation.
//! - The token goes only into the `Authorization` header: it is in no `Debug`, log or error.
//! - Ids are validated before they are put in a URL.
#![warn(missing_docs)]

pub mod api;
mod config;
mod provider;
pub mod wrapper;

pub use config::{
    vars, Config, ConfigError, DestroyMode, DEFAULT_BASE_URL, DEFAULT_OUTPUT_LIMIT,
    DEFAULT_REQUEST_TIMEOUT_MS, LEGACY_PROVIDER_NAME, PROVIDER_NAME,
};
pub use provider::{log_stream_bound, validate_id, Presence, VercelSandbox, VercelSandboxProvider};
