//! A sandbox provider whose sandboxes live behind a `reaper-sandboxd` daemon, reached over HTTP.
//!
//! A sweep running in Lambda, Vercel or a Worker cannot start local processes; it reaches the
//! sandboxes of another machine through the daemon's JSON API (`/v1/...`, documented in
//! `handlers/reaper-sandboxd/openapi.json`). [`HttpSandboxProvider`] implements the core's
//! `SandboxProvider` port and [`HttpSandbox`] its `SandboxHandle` port.
//!
//! The network is behind one small trait, [`HttpTransport`]: the `native` feature (on by
//! default) supplies [`ReqwestTransport`]; a Cloudflare Worker supplies one over its `fetch`.
//! Without `native` this crate uses no tokio, no sockets and no `std::process`, so it builds for
//! `wasm32-unknown-unknown`.
//!
//! Invariants:
//! - A failure to get an answer is [`reaper_core::SandboxError::Unreachable`], so the journal
//!   probe reports `unknown` and never `finished`.
//! - `destroy` is `Ok` only when the daemon answered 204; a failed teardown is never swallowed.
//! - The token goes only into the `Authorization` header: it is in no `Debug`, log or error.
//!   Credentials in the base URL (`https://user:pass@host`) are masked in every `Debug`, log
//!   and error ([`redact_url`]).
//! - Sandbox ids are validated before they are put in a URL.

#![warn(missing_docs)]

pub mod api;
#[cfg(feature = "native")]
mod native;
mod provider;
mod redact;
mod transport;

#[cfg(feature = "native")]
pub use native::ReqwestTransport;
pub use provider::{
    validate_sandbox_id, ConfigError, HttpProviderConfig, HttpSandbox, HttpSandboxProvider,
    DEFAULT_EXEC_MARGIN_MS, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_PROVIDER_NAME, DEFAULT_REQUEST_TIMEOUT_MS,
};
pub use redact::redact_url;
pub use transport::{HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError};
