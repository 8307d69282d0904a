//! The wire types of the sandboxd v1 API, shared by the daemon and this client so the two cannot
//! drift. `handlers/reaper-sandboxd/openapi.json` documents the same shapes; the daemon's tests
//! check every response against it.
//!
//! Request types refuse unknown fields (a misspelt `timeoutMs` must not silently become the
//! default); response types accept them, so a newer daemon can add fields without breaking an
//! older client.

use serde::{Deserialize, Serialize};

/// The path prefix of this API version.
pub const API_PREFIX: &str = "/v1";

/// `POST /v1/sandboxes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSandboxRequest {
    /// An absolute journal directory for the sandbox; default `<sandbox>/journals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_dir: Option<String>,
}

/// A sandbox as `GET /v1/sandboxes/{id}` and `POST /v1/sandboxes` describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    /// The sandbox's id.
    pub id: String,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// The sandbox's journal directory (absolute, on the daemon's machine).
    pub journal_dir: String,
    /// Agents started in it, in start order (finished ones included).
    pub agents: Vec<AgentInfo>,
}

/// One agent recorded in a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInfo {
    /// The agent's run.
    pub run_id: String,
    /// The agent's process id in the sandbox.
    pub pid: u32,
}

/// `POST /v1/sandboxes/{id}/agents`: start `command` under the journaled wrapper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartAgentRequest {
    /// The run the agent works on (its journal's name).
    pub run_id: String,
    /// The agent's shell command.
    pub command: String,
    /// The journal directory for this run; default the sandbox's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_dir: Option<String>,
}

/// The answer to a started agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStarted {
    /// The run.
    pub run_id: String,
    /// The agent's process id in the sandbox.
    pub pid: u32,
}

/// `POST /v1/sandboxes/{id}/exec`: run `sh -c command` in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    /// The shell command.
    pub command: String,
    /// Default [`DEFAULT_EXEC_TIMEOUT_MS`]; at most the daemon's `--max-exec-timeout-ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The exec timeout when a request names none (the core's `ExecOptions` default).
pub const DEFAULT_EXEC_TIMEOUT_MS: u64 = 30_000;

/// A command that ran to its end (any exit code).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    /// The command's standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// Its exit status.
    pub exit_code: i32,
}

/// `GET /v1/healthz` (the only unauthenticated route).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// The API version, `v1`.
    pub api: String,
    /// The daemon's crate version.
    pub version: String,
}

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// An error's code and message.
pub struct ErrorDetail {
    /// One of [`codes`]; stable, for machines.
    pub code: String,
    /// For people: what was wrong and what to do.
    pub message: String,
}

/// The stable error codes.
pub mod codes {
    /// 401: no `Authorization: Bearer` header, or the wrong token.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 400: the body is not the documented JSON, or a field is out of range.
    pub const INVALID_REQUEST: &str = "invalid-request";
    /// 400: a sandbox id that is not 1–64 characters of `[A-Za-z0-9-]`.
    pub const INVALID_SANDBOX_ID: &str = "invalid-sandbox-id";
    /// 404: no live sandbox with that id.
    pub const SANDBOX_NOT_FOUND: &str = "sandbox-not-found";
    /// 404: no such route (a wrong base URL or API version).
    pub const ROUTE_NOT_FOUND: &str = "route-not-found";
    /// 405.
    pub const METHOD_NOT_ALLOWED: &str = "method-not-allowed";
    /// 413: the request body is over the daemon's limit.
    pub const PAYLOAD_TOO_LARGE: &str = "payload-too-large";
    /// 422: the command ran past its timeout; its process group was killed.
    pub const EXEC_TIMEOUT: &str = "exec-timeout";
    /// 422: the command printed more than the output limit; nothing was returned.
    pub const OUTPUT_LIMIT_EXCEEDED: &str = "output-limit-exceeded";
    /// 409: the sandbox refused teardown; it may still be running.
    pub const DESTROY_REFUSED: &str = "destroy-refused";
    /// 503 with `Retry-After`: the daemon is running as many execs as it allows; nothing was
    /// run. Retryable.
    pub const TOO_MANY_EXECS: &str = "too-many-execs";
    /// 500: the daemon failed; the message says how.
    pub const INTERNAL: &str = "internal";
}
