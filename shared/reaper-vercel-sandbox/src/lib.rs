//! A sandbox provider over Vercel Sandbox's HTTP API (native reqwest or a Worker's fetch transport).
//!
//! [`VercelSandboxProvider`] implements the core's `SandboxProvider` port (resume = get the
//! sandbox, destroy = stop it) and [`VercelSandbox`] its `SandboxHandle` port (`exec` = run a
//! command, read its log stream, wait for its exit code). The network is
//! `reaper_http_sandbox::HttpTransport`: the `native` feature (on by default) uses its
//! `ReqwestTransport`; a Cloudflare Worker passes the fetch transport it already has. Without
//! `native` this crate has no tokio, sockets or `std::process`, so it builds for
//! `wasm32-unknown-unknown`.
//!
//! Invariants:
//! - No answer, a 429 or a 5xx is [`reaper_core::SandboxError::Unreachable`], so the journal
//!   probe reports `unknown` and never `finished`.
//! - "Gone" (404, 410, a stopped or stopping sandbox) is `None` from `resume`, `Ok` from
//!   `destroy` and `NotFound` from `exec`; every other refusal is an error.
//! - `resume` never starts a sandbox (Vercel cannot restart a stopped one anyway).
//! - An `exec`'s output is bounded per stream inside the sandbox ([`wrapper`]) and its log
//!   stream by [`log_stream_bound`]: more is `OutputLimit` (or an error), never a truncation.
//! - The token goes only into the `Authorization` header: it is in no `Debug`, log or error.
//! - Ids are validated before they are put in a URL.

pub mod api;
mod config;
mod provider;
pub mod wrapper;

pub use config::{
    vars, Config, ConfigError, DEFAULT_BASE_URL, DEFAULT_OUTPUT_LIMIT, DEFAULT_REQUEST_TIMEOUT_MS,
    PROVIDER_NAME,
};
pub use provider::{log_stream_bound, validate_id, VercelSandbox, VercelSandboxProvider};
