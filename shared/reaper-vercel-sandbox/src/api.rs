//! The parts of Vercel's sandbox API (v2: named sandboxes and their sessions) this provider
//! sends and reads (`openapi/` holds the document they are checked against). Unknown fields are
//! ignored, so additions on Vercel's side break nothing.

use serde::{Deserialize, Serialize};

/// `GET /v2/sandboxes/{name}` answers the named sandbox and its current session.
#[derive(Debug, Clone, Deserialize)]
pub struct NamedSandboxEnvelope {
    /// The sandbox.
    pub sandbox: NamedSandbox,
    /// Its current session.
    pub session: Session,
    /// Whether this read resumed a stopped sandbox (`resume=true`): `session` is then the new
    /// session Vercel started from the sandbox's snapshot.
    #[serde(default)]
    pub resumed: bool,
}

#[derive(Debug, Clone, Deserialize)]
/// A named (v2) sandbox.
pub struct NamedSandbox {
    /// The sandbox's name (what the instance record stores).
    pub name: String,
    /// Whether a stopped sandbox keeps its filesystem (a snapshot) and can be resumed.
    #[serde(default)]
    pub persistent: bool,
    #[serde(rename = "currentSessionId")]
    /// The session commands run in, or the last one.
    pub current_session_id: String,
}

/// `GET /v2/sandboxes/sessions/{sessionId}` answers `{"session": {...}, "routes": [...]}`.
#[derive(Debug, Clone, Deserialize)]
pub struct SessionEnvelope {
    /// The session.
    pub session: Session,
}

/// One running (or stopped) instance of a sandbox. A v1 sandbox id (`sbx_…`) names a session.
#[derive(Debug, Clone, Deserialize)]
pub struct Session {
    /// The session id (`sbx_…`).
    pub id: String,
    /// `pending`, `running`, `stopping`, `stopped`, `failed`, `aborted`, `snapshotting`.
    pub status: String,
}

/// The session states in which commands run (`Some(true)`), the ones in which they do not
/// (`Some(false)`), and `None` for a state this provider does not know.
pub fn is_live_status(status: &str) -> Option<bool> {
    match status {
        "running" | "pending" => Some(true),
        "stopping" | "stopped" | "failed" | "aborted" | "snapshotting" => Some(false),
        _ => None,
    }
}

/// `POST /v2/sandboxes/sessions/{sessionId}/cmd`: run `command` with `args`, no shell of
/// Vercel's own.
#[derive(Debug, Clone, Serialize)]
pub struct RunCommandRequest<'a> {
    /// The program to run.
    pub command: &'a str,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The run, get and kill answers of a command: `{"command": {...}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct CommandEnvelope {
    /// The command.
    pub command: CommandInfo,
}

#[derive(Debug, Clone, Deserialize)]
/// A command run in a session.
pub struct CommandInfo {
    /// The command id, for its logs and kill.
    pub id: String,
    /// `null` while the command runs; a number once it ended (always, with `wait=true`).
    #[serde(rename = "exitCode")]
    pub exit_code: Option<i64>,
}

/// `POST /v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}/kill`.
#[derive(Debug, Clone, Serialize)]
pub struct KillRequest {
    /// The signal number (15, SIGTERM).
    pub signal: i32,
}

/// One line of `GET .../cmd/{cmdId}/logs` (NDJSON): `{"stream":"stdout"|"stderr","data":"…"}`,
/// or `{"stream":"error","data":{"code":…,"message":…}}` when the stream itself failed.
#[derive(Debug, Clone, Deserialize)]
pub struct LogLine {
    /// `stdout`, `stderr`, or `error`.
    pub stream: String,
    /// The text of an output line, or the error object of a failed stream.
    pub data: serde_json::Value,
}

/// Vercel's error body: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Deserialize)]
/// The inside of Vercel's error body.
pub struct ErrorDetail {
    #[serde(default)]
    /// A machine-readable code (`not_found`).
    pub code: Option<String>,
    #[serde(default)]
    /// The message for people.
    pub message: Option<String>,
}

impl ErrorBody {
    /// Whether this error says the sandbox (or session) itself does not exist: a `not_found`
    /// code and a message naming a sandbox or session as not found. A 404 for anything else (a
    /// wrong base URL, an API route that does not exist, a project or team that is not there)
    /// must never read as "the sandbox is gone", or the reaper would drop the record of a
    /// sandbox that lives on.
    pub fn says_sandbox_not_found(&self) -> bool {
        let code = self.error.code.as_deref().unwrap_or_default();
        let message = self
            .error
            .message
            .as_deref()
            .unwrap_or_default()
            .to_ascii_lowercase();
        matches!(
            code,
            "not_found" | "sandbox_not_found" | "session_not_found"
        ) && message.contains("not found")
            && (message.contains("sandbox") || message.contains("session"))
    }
}
