//! `reaper-sandboxd`: serves this machine's sandboxes over a JSON HTTP API, so a reaper running
//! in Lambda, Vercel or a Worker can reach them (`reaper-http-sandbox` is the client). The
//! sandboxes are local ones (`reaper-local`, the default backend) or containers on the host's
//! Docker daemon (`reaper-docker`, `--backend docker`).
//!
//! Invariants:
//! - Every route but `GET /v1/healthz` requires `Authorization: Bearer <token>`, checked in
//!   constant time before any handler or body read runs; the daemon does not start without a
//!   token, and never logs one.
//! - Request bodies are bounded (413), `exec` output is bounded while it is read (422, never
//!   truncated), the exec timeout is bounded, and so are concurrent execs (503 with
//!   `Retry-After`), open connections and the time a client may take to send its headers.
//! - A command runs only in a live sandbox: the id is validated before it is joined to the root,
//!   and an unknown or destroyed sandbox is a 404.
//! - The router is built from one route list, which the OpenAPI test compares with
//!   `openapi.json`.

pub mod backend;
mod error;
pub mod serve;
pub mod server;
pub mod token;

pub use backend::{Backend, DockerBackend};
pub use server::{route_specs, router, AppState, Limits, RouteSpec};
pub use token::{Token, TokenError, MIN_TOKEN_BYTES, TOKEN_ENV};
