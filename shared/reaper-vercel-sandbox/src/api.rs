//! The parts of Vercel's sandbox API this provider sends and reads (`openapi/` holds the
//! document they are checked against). Unknown fields are ignored, so additions on Vercel's side
//! break nothing.

use serde::{Deserialize, Serialize};

/// `GET /v1/sandboxes/{sandboxId}` and `POST .../stop` answer `{"sandbox": {...}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct SandboxEnvelope {
    pub sandbox: SandboxInfo,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SandboxInfo {
    pub id: String,
    /// `pending`, `running`, `stopping`, `stopped`, `failed`, `aborted`, `snapshotting`.
    pub status: String,
}

/// The sandbox states in which commands run (or will, once it has started).
pub fn is_live_status(status: &str) -> Option<bool> {
    match status {
        "running" | "pending" => Some(true),
        "stopping" | "stopped" | "failed" | "aborted" | "snapshotting" => Some(false),
        _ => None,
    }
}

/// `POST /v1/sandboxes/{sandboxId}/cmd`: run `command` with `args`, no shell of Vercel's own.
#[derive(Debug, Clone, Serialize)]
pub struct RunCommandRequest<'a> {
    pub command: &'a str,
    pub args: Vec<String>,
}

/// `POST .../cmd`, `GET .../cmd/{cmdId}` and the kill answer `{"command": {...}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct CommandEnvelope {
    pub command: CommandInfo,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CommandInfo {
    pub id: String,
    /// `null` while the command runs; a number once it ended (always, with `wait=true`).
    #[serde(rename = "exitCode")]
    pub exit_code: Option<i64>,
}

/// `POST /v1/sandboxes/{sandboxId}/{cmdId}/kill`.
#[derive(Debug, Clone, Serialize)]
pub struct KillRequest {
    pub signal: i32,
}

/// One line of `GET .../cmd/{cmdId}/logs` (NDJSON): `{"stream":"stdout"|"stderr","data":"…"}`,
/// or `{"stream":"error","data":{"code":…,"message":…}}` when the stream itself failed.
#[derive(Debug, Clone, Deserialize)]
pub struct LogLine {
    pub stream: String,
    pub data: serde_json::Value,
}

/// Vercel's error body: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ErrorDetail {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}
