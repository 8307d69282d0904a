//! A sandbox provider over Sprites (sprites.dev, Fly.io's persistent Linux sandboxes).
//!
//! [`SpritesProvider`] implements the core's `SandboxProvider` port (resume = `GET
//! /v1/sprites/{name}`, destroy = `DELETE /v1/sprites/{name}`) over the caller's
//! `reaper_http_sandbox::HttpTransport`, and [`SpritesSandbox`] its `SandboxHandle` port: `exec`
//! runs `sh -c <command>` over the documented WebSocket exec API (`/v1/sprites/{name}/exec`),
//! the only way Sprites runs a command.
//!
//! The WebSocket client is the `websocket` feature (in `native`, on by default). Without it the
//! crate has no tokio and no sockets and builds for `wasm32-unknown-unknown`, but `exec` answers
//! `Refused` and [`EXEC_SUPPORTED`] is false: a reaper there (the Worker) cannot read a sprite's
//! journal, so the provider registry refuses to serve Sprites in such a build.
//!
//! Invariants:
//! - No answer, a 429 or a 5xx is [`reaper_core::SandboxError::Unreachable`]: the probe says
//!   `unknown`, never `finished`.
//! - "Gone" is a 404 whose `{"error": …}` body says the sprite was not found: `None` from
//!   `resume`, `Ok` from `destroy`, `NotFound` from `exec`. A bare 404 (a wrong `SPRITES_API_URL`,
//!   a proxy's page) is an error that keeps the record.
//! - A cold (sleeping) sprite is live: it wakes on the next command.
//! - An `exec`'s output is bounded per stream as it arrives; past the bound, or past the timeout,
//!   the socket is dropped and the service ends the command `max_run_after_disconnect` later.
//! - The token goes only into the `Authorization` header: in no `Debug`, log or error.
//! - Names are validated before they are put in a URL.

mod config;
#[cfg(feature = "websocket")]
mod exec;
mod provider;

pub use config::{
    vars, Config, ConfigError, DEFAULT_BASE_URL, DEFAULT_EXEC_LINGER_SECS, DEFAULT_OUTPUT_LIMIT,
    DEFAULT_REQUEST_TIMEOUT_MS, PROVIDER_NAME,
};
pub use provider::{validate_name, SpritesProvider, SpritesSandbox, EXEC_SUPPORTED};
