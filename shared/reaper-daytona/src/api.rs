//! The few wire shapes this provider reads and writes, as the stored OpenAPI documents
//! (`openapi/`) define them. Responses accept unknown fields, so a newer API can add some.

use serde::{Deserialize, Serialize};

/// The part of the API's `Sandbox` (`GET /sandbox/{sandboxIdOrName}`) the provider uses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    /// The sandbox's id (what the instance record stores).
    pub id: String,
    /// `SandboxState`: `started`, `stopped`, `archived`, `destroying`, … (optional in the
    /// document).
    #[serde(default)]
    pub state: Option<String>,
    /// `SandboxDesiredState`: `destroyed` once a delete was accepted.
    #[serde(default)]
    pub desired_state: Option<String>,
    /// Where the sandbox's toolbox API is served: `{toolboxProxyUrl}/{id}/process/execute`.
    pub toolbox_proxy_url: String,
}

/// The toolbox's `ExecuteRequest`. `timeout` is in whole seconds; the daemon treats an absent
/// or zero timeout as none at all, so one is always sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecuteRequest<'a> {
    /// The shell command line to run.
    pub command: &'a str,
    /// Seconds; never zero (zero means no timeout to the daemon).
    pub timeout: u32,
}

/// The toolbox's `ExecuteResponse`: stdout and stderr folded into `result`. `exitCode` is
/// optional in the document (older daemons omit it); `-1` means the daemon could not start or
/// wait for the shell.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResponse {
    /// stdout and stderr, folded together.
    pub result: String,
    #[serde(default)]
    /// The exit code; `None` from daemons that omit it.
    pub exit_code: Option<i32>,
    /// The exit code's older name, answered by older daemons instead of `exitCode` (Daytona's
    /// SDK reads `exitCode ?? code`). Kept as JSON: only an integer counts.
    #[serde(default, rename = "code")]
    pub legacy_code: Option<serde_json::Value>,
}

/// An error body. The API (NestJS) answers `{statusCode, error, message, path, timestamp}`,
/// the toolbox and its proxy (Go) `{statusCode, message, code, path, timestamp, method}`.
/// `message` may be a list (NestJS validation errors).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    #[serde(default)]
    /// The HTTP status, repeated in the body.
    pub status_code: Option<u16>,
    #[serde(default)]
    /// A string, or a list of strings (NestJS validation errors).
    pub message: Option<serde_json::Value>,
    #[serde(default)]
    /// The API's short error name (`Not Found`).
    pub error: Option<String>,
    #[serde(default)]
    /// The toolbox's error code.
    pub code: Option<String>,
}

impl ErrorBody {
    /// The message as one string (a list is joined), for error messages.
    pub fn message(&self) -> Option<String> {
        match self.message.as_ref()? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Array(items) => Some(
                items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| i.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            other => Some(other.to_string()),
        }
    }
}
