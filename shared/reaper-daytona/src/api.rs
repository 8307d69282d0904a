//! The few wire shapes this provider reads and writes, as the stored OpenAPI documents
//! (`openapi/`) define them. Responses accept unknown fields, so a newer API can add some.

use serde::{Deserialize, Serialize};

/// The part of the API's `Sandbox` (`GET /sandbox/{sandboxIdOrName}`) the provider uses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
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
    pub command: &'a str,
    pub timeout: u32,
}

/// The toolbox's `ExecuteResponse`: stdout and stderr folded into `result`. `exitCode` is
/// optional in the document (older daemons omit it); `-1` means the daemon could not start or
/// wait for the shell.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResponse {
    pub result: String,
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// An error body. The API (NestJS) answers `{statusCode, error, message, path, timestamp}`,
/// the toolbox and its proxy (Go) `{statusCode, message, code, path, timestamp, method}`.
/// `message` may be a list (NestJS validation errors).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    #[serde(default)]
    pub status_code: Option<u16>,
    #[serde(default)]
    pub message: Option<serde_json::Value>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
}

impl ErrorBody {
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
