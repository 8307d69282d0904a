//! The router and its handlers: the v1 API over a [`Backend`] (local sandboxes or Docker
//! containers).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, MethodRouter};
use axum::{Json, Router};
use http_body_util::BodyExt;
use reaper_core::journal::{journal_paths, journaled_command};
use reaper_core::{ExecOptions, SandboxError};
use reaper_http_sandbox::api::{
    codes, AgentStarted, CreateSandboxRequest, ExecRequest, ExecResult, Health, SandboxInfo,
    StartAgentRequest, DEFAULT_EXEC_TIMEOUT_MS,
};
use reaper_local::validate_sandbox_id;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use crate::backend::{Backend, Sandbox};
use crate::error::ApiError;
use crate::token::Token;

/// The bounds every request is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Larger request bodies are answered 413 without being read whole.
    pub max_body_bytes: usize,
    /// Per stream (stdout, stderr) of one `exec`; more is a 422, never a truncation. Set on the
    /// backend's provider, which enforces it while reading.
    pub max_output_bytes: usize,
    pub max_exec_timeout_ms: u64,
    /// Execs running at once; one more is answered 503 `too-many-execs` with `Retry-After`
    /// instead of failing for want of processes or file descriptors.
    pub max_concurrent_execs: usize,
}

pub const DEFAULT_MAX_CONCURRENT_EXECS: usize = 64;
/// The `Retry-After` of a `too-many-execs` answer, in seconds.
const EXEC_RETRY_AFTER_SECS: u32 = 1;
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;
pub const DEFAULT_MAX_EXEC_TIMEOUT_MS: u64 = 600_000;
/// Longest accepted journal directory.
const MAX_JOURNAL_DIR_LEN: usize = 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            max_exec_timeout_ms: DEFAULT_MAX_EXEC_TIMEOUT_MS,
            max_concurrent_execs: DEFAULT_MAX_CONCURRENT_EXECS,
        }
    }
}

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    pub backend: Backend,
    pub token: Token,
    pub limits: Limits,
    /// One permit per exec allowed to run at once (`limits.max_concurrent_execs`).
    exec_slots: Semaphore,
}

impl AppState {
    pub fn new(backend: Backend, token: Token, limits: Limits) -> Self {
        AppState {
            backend,
            token,
            limits,
            exec_slots: Semaphore::new(limits.max_concurrent_execs),
        }
    }
}

type Shared = Arc<AppState>;

/// One route of the API, as the OpenAPI document must list it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteSpec {
    pub method: &'static str,
    /// In OpenAPI (and axum 0.8) syntax: `/v1/sandboxes/{id}`.
    pub path: &'static str,
    pub authenticated: bool,
}

/// Every route with its handler. The router is built from this list and nothing else, so
/// [`route_specs`] (which the OpenAPI test checks) is exactly what the server serves.
fn routes() -> Vec<(RouteSpec, MethodRouter<Shared>)> {
    let spec = |method, path, authenticated| RouteSpec {
        method,
        path,
        authenticated,
    };
    vec![
        (spec("GET", "/v1/healthz", false), get(healthz)),
        (spec("POST", "/v1/sandboxes", true), post(create_sandbox)),
        (spec("GET", "/v1/sandboxes/{id}", true), get(sandbox_status)),
        (
            spec("DELETE", "/v1/sandboxes/{id}", true),
            delete(destroy_sandbox),
        ),
        (spec("POST", "/v1/sandboxes/{id}/exec", true), post(exec)),
        (
            spec("POST", "/v1/sandboxes/{id}/agents", true),
            post(start_agent),
        ),
    ]
}

pub fn route_specs() -> Vec<RouteSpec> {
    routes().into_iter().map(|(spec, _)| spec).collect()
}

pub fn router(state: Shared) -> Router {
    let mut open = Router::new();
    let mut authed = Router::new();
    for (spec, handler) in routes() {
        if spec.authenticated {
            authed = authed.route(spec.path, handler);
        } else {
            open = open.route(spec.path, handler);
        }
    }
    let authed = authed.route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    open.merge(authed)
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Refuses a request without the exact token before any handler (or body read) runs.
async fn require_token(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()));
    match presented {
        Some(token) if state.token.matches(token) => next.run(request).await,
        _ => {
            // The presented value is never logged: a near-miss is usually the real token.
            tracing::warn!(method = %request.method(), path = %short_path(&request), "refused: missing or wrong bearer token");
            ApiError::unauthorized().into_response()
        }
    }
}

/// The token of `Bearer <token>` (scheme case-insensitive, exactly one space). Anything else is
/// no token.
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

fn short_path(request: &Request) -> String {
    request.uri().path().chars().take(200).collect()
}

/// One structured line per request: method, path, status, duration. Headers are never logged.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = short_path(&request);
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        %method,
        path,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

async fn route_not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        codes::ROUTE_NOT_FOUND,
        format!(
            "no route {} {}: this daemon serves the API documented in openapi.json under /v1",
            request.method(),
            short_path(&request)
        ),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        codes::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed on {}: see openapi.json for the methods of each route",
            request.method(),
            short_path(&request)
        ),
    )
}

/// A request body read up to the daemon's limit; a larger one is a 413.
///
/// An oversized body is still read and discarded, up to [`DRAIN_MAX_BYTES`], before the 413 is
/// sent: a client that is still writing when the connection closes sees a broken pipe instead of
/// the answer. Past that bound the 413 goes out at once and the connection is dropped.
struct LimitedBody(Bytes);

/// The most bytes of an oversized body read (and thrown away) so the client gets its 413.
const DRAIN_MAX_BYTES: u64 = 8 * 1024 * 1024;

impl FromRequest<Shared> for LimitedBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Shared) -> Result<Self, ApiError> {
        let limit = state.limits.max_body_bytes;
        let too_large = || {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is over the daemon's {limit}-byte limit: send a shorter \
                     command (split a large script, read journals in pages)"
                ),
            )
        };
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse::<u64>().ok());
        if declared.is_some_and(|n| n > DRAIN_MAX_BYTES) {
            return Err(too_large());
        }
        let mut over = declared.is_some_and(|n| n > limit as u64);
        let mut body = request.into_body();
        let mut kept: Vec<u8> = Vec::new();
        let mut seen: u64 = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| ApiError::invalid(format!("cannot read the request body: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            seen += data.len() as u64;
            if over {
                if seen > DRAIN_MAX_BYTES {
                    break;
                }
            } else if kept.len() + data.len() > limit {
                over = true;
                kept = Vec::new();
            } else {
                kept.extend_from_slice(&data);
            }
        }
        if over {
            return Err(too_large());
        }
        Ok(LimitedBody(Bytes::from(kept)))
    }
}

/// Parses a request body, which must be a JSON object: serde would also read a struct from an
/// array (`["true"]`), which the document does not allow.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let invalid = |e: serde_json::Error| {
        ApiError::invalid(format!("the request body is not the documented JSON: {e}"))
    };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(invalid)?;
    if !value.is_object() {
        return Err(ApiError::invalid(
            "the request body is not the documented JSON: it must be an object",
        ));
    }
    serde_json::from_value(value).map_err(invalid)
}

fn sandbox_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let invalid =
        |detail: String| ApiError::new(StatusCode::BAD_REQUEST, codes::INVALID_SANDBOX_ID, detail);
    let Path(id) = path.map_err(|e| invalid(format!("invalid sandbox id in the path: {e}")))?;
    // Checked before the id is joined to the root: `..`, `/` or a dot-file never become a path.
    validate_sandbox_id(&id).map_err(|_| {
        invalid(format!(
            "invalid sandbox id {:?}: ids are 1-64 characters of [A-Za-z0-9-]",
            id.chars().take(100).collect::<String>()
        ))
    })?;
    Ok(id)
}

/// The longest single argument Linux passes to a process (`MAX_ARG_STRLEN`, 32 pages, minus the
/// NUL): the script of `sh -c` is one argument.
pub const MAX_SCRIPT_BYTES: usize = 128 * 1024 - 1;

/// A script `sh -c` can be given: no NUL, not longer than one argument may be. Refusing here
/// keeps these a 400 rather than a spawn failure.
fn runnable(script: &str, field: &str) -> Result<(), ApiError> {
    if script.contains('\0') {
        return Err(ApiError::invalid(format!(
            "{field} contains a NUL character, which no process argument can carry"
        )));
    }
    if script.len() > MAX_SCRIPT_BYTES {
        return Err(ApiError::invalid(format!(
            "{field} is {} bytes as run; the kernel passes at most {MAX_SCRIPT_BYTES} bytes in \
             one argument: split the script or write it to a file in the sandbox first",
            script.len()
        )));
    }
    Ok(())
}

/// A journal directory must be an absolute, normalised path (no `.` or `..`, no control
/// characters): the daemon creates it and the wrapper quotes it into a shell command.
fn journal_dir(dir: Option<String>) -> Result<Option<String>, ApiError> {
    let Some(dir) = dir else { return Ok(None) };
    let bad = |why: &str| {
        Err(ApiError::invalid(format!(
            "invalid journalDir {:?}: {why}",
            dir.chars().take(100).collect::<String>()
        )))
    };
    if dir.len() > MAX_JOURNAL_DIR_LEN {
        return bad("longer than 1024 bytes");
    }
    if !dir.starts_with('/') {
        return bad("it must be an absolute path");
    }
    if dir.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    if dir
        .split('/')
        .skip(1)
        .any(|part| part == "." || part == "..")
    {
        return bad("it must not contain . or .. components");
    }
    Ok(Some(dir))
}

/// The live sandbox `id`, or a 404.
async fn open(state: &AppState, id: &str) -> Result<Sandbox, ApiError> {
    match state.backend.open(id).await {
        Ok(Some(sandbox)) => Ok(sandbox),
        Ok(None) => Err(ApiError::not_found(id)),
        Err(e) => Err(sandbox_error(e, id)),
    }
}

fn sandbox_error(e: SandboxError, id: &str) -> ApiError {
    match e {
        SandboxError::NotFound(_) => ApiError::not_found(id),
        SandboxError::Timeout(ms) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            codes::EXEC_TIMEOUT,
            format!(
                "the command in sandbox {id} timed out after {ms} ms; its processes were killed"
            ),
        ),
        e @ SandboxError::OutputLimit { .. } => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            codes::OUTPUT_LIMIT_EXCEEDED,
            format!("{e} (the daemon's --max-output-bytes); nothing was returned"),
        ),
        SandboxError::Refused(m) => ApiError::invalid(m),
        other => ApiError::internal(other.to_string()),
    }
}

async fn info(sandbox: &Sandbox) -> Result<SandboxInfo, ApiError> {
    sandbox
        .info()
        .await
        .map_err(|e| sandbox_error(e, sandbox.id()))
}

async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        api: "v1".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

async fn create_sandbox(
    State(state): State<Shared>,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<SandboxInfo>), ApiError> {
    // An empty body is the default request: nothing to configure.
    let request: CreateSandboxRequest = if body.is_empty() {
        CreateSandboxRequest::default()
    } else {
        parse(&body)?
    };
    let sandbox = state
        .backend
        .create(journal_dir(request.journal_dir)?)
        .await
        .map_err(|e| sandbox_error(e, "(new)"))?;
    tracing::info!(sandbox = sandbox.id(), "sandbox created");
    Ok((StatusCode::CREATED, Json(info(&sandbox).await?)))
}

async fn sandbox_status(
    State(state): State<Shared>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let id = sandbox_id(id)?;
    let sandbox = open(&state, &id).await?;
    Ok(Json(info(&sandbox).await?))
}

async fn destroy_sandbox(
    State(state): State<Shared>,
    id: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let id = sandbox_id(id)?;
    match state.backend.destroy(&id).await {
        Ok(()) => {
            tracing::info!(sandbox = %id, "sandbox destroyed");
            Ok(StatusCode::NO_CONTENT)
        }
        Err(SandboxError::Refused(m)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            codes::DESTROY_REFUSED,
            m,
        )),
        Err(e) => Err(ApiError::internal(format!(
            "destroy of sandbox {id} failed, it may still be running: {e}"
        ))),
    }
}

async fn exec(
    State(state): State<Shared>,
    id: Result<Path<String>, PathRejection>,
    LimitedBody(body): LimitedBody,
) -> Result<Json<ExecResult>, ApiError> {
    let id = sandbox_id(id)?;
    let request: ExecRequest = parse(&body)?;
    runnable(&request.command, "command")?;
    let timeout_ms = request.timeout_ms.unwrap_or(DEFAULT_EXEC_TIMEOUT_MS);
    let max = state.limits.max_exec_timeout_ms;
    if timeout_ms == 0 || timeout_ms > max {
        return Err(ApiError::invalid(format!(
            "timeoutMs {timeout_ms} is out of range: use 1..={max} (the daemon's \
             --max-exec-timeout-ms)"
        )));
    }
    let sandbox = open(&state, &id).await?;
    // Refused at once rather than queued: the caller's own timeout keeps running, and a probe
    // that is told "busy" reports `unknown` and tries again on the next sweep.
    let _slot = state.exec_slots.try_acquire().map_err(|_| {
        let max = state.limits.max_concurrent_execs;
        ApiError::busy(
            codes::TOO_MANY_EXECS,
            format!(
                "{max} commands are already running on this daemon (--max-concurrent-execs); \
                 nothing was run: retry after a moment"
            ),
            EXEC_RETRY_AFTER_SECS,
        )
    })?;
    let output = sandbox
        .exec(&request.command, ExecOptions { timeout_ms })
        .await
        .map_err(|e| sandbox_error(e, &id))?;
    Ok(Json(ExecResult {
        stdout: output.stdout,
        stderr: output.stderr,
        exit_code: output.exit_code,
    }))
}

async fn start_agent(
    State(state): State<Shared>,
    id: Result<Path<String>, PathRejection>,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<AgentStarted>), ApiError> {
    let id = sandbox_id(id)?;
    let request: StartAgentRequest = parse(&body)?;
    if request.run_id.is_empty() {
        return Err(ApiError::invalid("runId must not be empty"));
    }
    let dir = journal_dir(request.journal_dir)?;
    let sandbox = open(&state, &id).await?;
    // Checked as the wrapper will run it: the journal paths and sentinel add to the command.
    let paths = journal_paths(
        &request.run_id,
        Some(dir.as_deref().unwrap_or(sandbox.journal_dir())),
    )
    .map_err(|e| ApiError::invalid(e.to_string()))?;
    runnable(&journaled_command(&request.command, &paths), "command")?;
    let pid = sandbox
        .start_agent(&request.run_id, &request.command, dir.as_deref())
        .await
        .map_err(|e| sandbox_error(e, &id))?;
    tracing::info!(sandbox = %id, pid, "agent started");
    Ok((
        StatusCode::CREATED,
        Json(AgentStarted {
            run_id: request.run_id,
            pid,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_exact_bearer_scheme_yields_a_token() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Bearer  abc"), Some(&b" abc"[..]));
        assert_eq!(bearer_token(b"Basic abcdef"), None);
        assert_eq!(bearer_token(b"Bearer"), None);
        assert_eq!(bearer_token(b"abc"), None);
    }

    #[test]
    fn journal_dirs_must_be_absolute_and_normalised() {
        assert!(journal_dir(Some("/tmp/j".into())).is_ok());
        assert!(journal_dir(Some("/tmp/my journals".into())).is_ok());
        for bad in ["tmp/j", "/tmp/../etc", "/tmp/./j", "/tmp/\nj", ""] {
            assert!(journal_dir(Some(bad.into())).is_err(), "{bad:?} accepted");
        }
    }
}
