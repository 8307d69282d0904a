//! A sandbox provider over Daytona's HTTP API (native reqwest or a Worker's fetch transport).
//!
//! [`DaytonaProvider`] implements the core's `SandboxProvider` port over Daytona's REST API
//! (`GET`/`DELETE /sandbox/{id}`) and [`DaytonaSandbox`] its `SandboxHandle` port over the
//! sandbox's toolbox API (`POST {toolboxProxyUrl}/{id}/process/execute`). The wire shapes are
//! those of the OpenAPI documents stored in `openapi/` (see `openapi/SOURCE.md`).
//!
//! The network is behind reaper-http-sandbox's `HttpTransport`: the `native` feature (on by
//! default) uses its `ReqwestTransport`; a Cloudflare Worker passes its own fetch transport to
//! [`DaytonaProvider::with_transport`]. Without `native` this crate has no tokio, no sockets
//! and no `std::process`, so it builds for `wasm32-unknown-unknown`.
//!
//! Invariants:
//! - "Gone" (`resume` is `None`, `destroy` is `Ok`) only on Daytona's own word: a JSON 404
//!   for the sandbox, or a sandbox destroyed or being destroyed. A 404 from a wrong URL, no
//!   answer, a 5xx or a 429 are errors, so nothing is forgotten on a misconfiguration.
//! - The reaper never starts a stopped or archived sandbox: `resume` refuses it.
//! - The API key goes only into the `Authorization` header of requests to the configured API
//!   and to the toolbox proxy the API names (never a plain-HTTP one when the API is HTTPS). It
//!   is in no `Debug`, log or error.
//! - An exec's output is bounded inside the sandbox; more than the bound is
//!   `SandboxError::OutputLimit`, never a silent truncation.
#![warn(missing_docs)]

pub mod api;
pub mod command;
mod config;
mod provider;

pub use config::{
    ConfigError, DaytonaConfig, API_KEY_VAR, API_URL_VAR, DEFAULT_API_URL, DEFAULT_EXEC_MARGIN_MS,
    DEFAULT_OUTPUT_LIMIT, DEFAULT_REQUEST_TIMEOUT_MS,
};
pub use provider::{
    validate_sandbox_id, DaytonaProvider, DaytonaSandbox, SandboxState, PROVIDER_NAME,
};
pub use reaper_http_sandbox::HttpTransport;
#[cfg(feature = "native")]
pub use reaper_http_sandbox::ReqwestTransport;
