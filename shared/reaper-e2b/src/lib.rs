//! A sandbox provider over E2B's HTTP APIs (native reqwest or a Worker's fetch transport).
//!
//! [`E2bProvider`] implements the core's `SandboxProvider` port and [`E2bSandbox`] its
//! `SandboxHandle` port:
//! - the control plane (`https://api.e2b.app`, `X-API-Key`): `GET /sandboxes/{sandboxID}` to
//!   resume, `DELETE /sandboxes/{sandboxID}` to destroy, as in E2B's OpenAPI document
//!   (`openapi/openapi.yml`);
//! - each sandbox's envd (`https://49983-{sandboxID}.{domain}`): `exec` is one
//!   `process.Process/Start` server stream over the Connect protocol with the JSON codec
//!   (`connect` module; `openapi/process.proto`).
//!
//! The network is behind reaper-http-sandbox's [`HttpTransport`]: the `native` feature (on by
//! default) supplies its reqwest transport; a Cloudflare Worker plugs in its `fetch` transport.
//! Without `native` this crate uses no tokio, no sockets and no `std::process`, so it builds for
//! `wasm32-unknown-unknown`.
//!
//! Invariants:
//! - Gone is not failed: 404 on resume is `None`, 404 on destroy is `Ok`; a failure to get an
//!   answer is [`reaper_core::SandboxError::Unreachable`], so the probe says `unknown`.
//! - A paused sandbox is never resumed (that bills it again): it is not live, and destroyable.
//! - The API key goes only into the control plane's `X-API-Key` header, the envd access token
//!   only into envd's `X-Access-Token`: neither is in any `Debug`, log or error.
//! - Sandbox ids are validated before they reach a URL or a host name.
//! - An exec's output past the bound is an `OutputLimit` error and its command is killed;
//!   nothing is silently truncated.
//!
//! [`HttpTransport`]: reaper_http_sandbox::HttpTransport
#![warn(missing_docs)]

mod config;
mod connect;
mod provider;
mod script;

pub use config::{
    vars, ConfigError, E2bConfig, DEFAULT_DOMAIN, DEFAULT_ENVD_URL_TEMPLATE, DEFAULT_ENVD_USER,
    DEFAULT_EXEC_MARGIN_MS, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_OUTPUT_LIMIT,
    DEFAULT_REQUEST_TIMEOUT_MS, ENVD_PORT, PROVIDER_NAME,
};
pub use provider::{validate_sandbox_id, E2bProvider, E2bSandbox};
