//! [`E2bProvider`] and [`E2bSandbox`]: the provider and handle ports over E2B's control plane
//! (`GET`/`DELETE /sandboxes/{sandboxID}`) and each sandbox's envd (`process.Process/Start`).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use reaper_core::secret::Secret;
use reaper_core::{
    ExecOptions, ExecOutput, SandboxError, SandboxHandle, SandboxProvider, SandboxState,
};
use reaper_http_sandbox::{
    redact_url, HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError,
};
use serde::Deserialize;

use crate::config::{ConfigError, E2bConfig, ENVD_PORT, PROVIDER_NAME};
use crate::connect::{self, StartStream};
use crate::script;

/// Longest sandbox id accepted. E2B ids are short lowercase alphanumerics; the bound only keeps
/// a hostile value out of URLs and host names.
const MAX_SANDBOX_ID_LEN: usize = 128;
/// The largest command sent, well under any proxy's request limit.
const MAX_COMMAND_BYTES: usize = 1024 * 1024;
/// The budget of the kill exec that follows a timed-out or oversized one.
const KILL_TIMEOUT_MS: u64 = 10_000;
/// The largest `Connect-Timeout-Ms` the Connect protocol allows (10 digits).
const MAX_CONNECT_TIMEOUT_MS: u64 = 9_999_999_999;

/// `SandboxDetail` of `GET /sandboxes/{sandboxID}`: the fields this provider reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SandboxDetail {
    #[serde(rename = "sandboxID")]
    sandbox_id: String,
    state: String,
    #[serde(default)]
    envd_access_token: Option<String>,
    #[serde(default)]
    domain: Option<String>,
}

/// The control plane's `Error` schema.
#[derive(Debug, Deserialize)]
struct ApiError {
    #[serde(default)]
    message: String,
}

struct Inner {
    config: E2bConfig,
    /// `api_url` without its trailing `/`.
    api_base: String,
    transport: Arc<dyn HttpTransport>,
}

/// A [`SandboxProvider`] over E2B.
///
/// - `resume` reads the sandbox from the control plane: `running` is a handle, `paused` and 404
///   are `None`. A paused sandbox is never resumed: that would bill it again only to read a
///   journal; it is not live for the probe, and `destroy` still kills it.
/// - `state` is the same read (`paused` is stopped); `start_for_read` is one
///   `POST /sandboxes/{id}/connect` (which resumes a paused sandbox) and `restore` one
///   `POST /sandboxes/{id}/pause`: the sweep's bounded start-to-read of a finished run.
/// - `destroy` is `DELETE /sandboxes/{id}`: 204 and 404 (already gone) are `Ok`; anything else
///   is an error, so a failed teardown is never swallowed.
/// - No answer, 429 and 5xx are [`SandboxError::Unreachable`] (retryable; the probe answers
///   `unknown`); 401/403 are [`SandboxError::Refused`] naming `E2B_API_KEY`.
#[derive(Clone)]
pub struct E2bProvider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for E2bProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl E2bProvider {
    /// A provider over the native reqwest transport.
    #[cfg(feature = "native")]
    pub fn new(config: E2bConfig) -> Result<Self, ConfigError> {
        let transport = reaper_http_sandbox::ReqwestTransport::new()
            .map_err(|e| ConfigError::Transport(e.to_string()))?;
        Self::with_transport(config, Arc::new(transport))
    }

    /// A provider over any transport (a Worker's `fetch`, a test's fault injector).
    pub fn with_transport(
        config: E2bConfig,
        transport: Arc<dyn HttpTransport>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let api_base = config.api_url.trim_end_matches('/').to_string();
        Ok(E2bProvider {
            inner: Arc::new(Inner {
                config,
                api_base,
                transport,
            }),
        })
    }

    /// The settings this provider was built with.
    pub fn config(&self) -> &E2bConfig {
        &self.inner.config
    }

    /// The running sandbox `id` with its concrete type; `None` when it is gone or paused.
    pub async fn open(&self, id: &str) -> Result<Option<E2bSandbox>, SandboxError> {
        validate_sandbox_id(id)?;
        let response = self.inner.api(HttpMethod::Get, id, "read sandbox").await?;
        if response.status == 404 {
            return Ok(None);
        }
        if response.status != 200 {
            return Err(self.inner.api_error(&response, "read sandbox", id));
        }
        let detail: SandboxDetail = serde_json::from_slice(&response.body).map_err(|e| {
            SandboxError::Other(format!(
                "E2B answered GET /sandboxes/{id} with a body that is not a SandboxDetail: {e}"
            ))
        })?;
        if detail.sandbox_id != id {
            return Err(SandboxError::Other(format!(
                "E2B answered GET /sandboxes/{id} with sandbox {:?}",
                detail.sandbox_id
            )));
        }
        match detail.state.as_str() {
            "running" => {}
            "paused" => {
                tracing::debug!(target: "reaper", sandbox = id,
                    "E2B sandbox is paused: not live (resuming it would bill it again)");
                return Ok(None);
            }
            other => {
                return Err(SandboxError::Other(format!(
                    "E2B sandbox {id} is in state {other:?}, which this provider does not know \
                     (expected running or paused); it is left alone"
                )))
            }
        }
        let domain = detail
            .domain
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| self.inner.config.domain.clone());
        if !domain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b':')
        {
            return Err(SandboxError::Other(format!(
                "E2B reported the domain {domain:?} for sandbox {id}, which is not a host name"
            )));
        }
        let envd_url = self
            .inner
            .config
            .envd_url_template
            .replace("{sandboxID}", id)
            .replace("{domain}", &domain)
            .trim_end_matches('/')
            .to_string();
        Ok(Some(E2bSandbox {
            inner: self.inner.clone(),
            id: id.to_string(),
            envd_url,
            access_token: detail
                .envd_access_token
                .filter(|t| !t.is_empty())
                .map(Secret::new),
        }))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxProvider for E2bProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        Ok(self
            .open(id)
            .await?
            .map(|s| Arc::new(s) as Arc<dyn SandboxHandle>))
    }

    /// `GET /sandboxes/{id}`: `running` is running, `paused` stopped, a 404 gone.
    async fn state(&self, id: &str) -> Result<Option<SandboxState>, SandboxError> {
        validate_sandbox_id(id)?;
        let response = self.inner.api(HttpMethod::Get, id, "read sandbox").await?;
        if response.status == 404 {
            return Ok(Some(SandboxState::Gone));
        }
        if response.status != 200 {
            return Err(self.inner.api_error(&response, "read sandbox", id));
        }
        let detail: SandboxDetail = serde_json::from_slice(&response.body).map_err(|e| {
            SandboxError::Other(format!(
                "E2B answered GET /sandboxes/{id} with a body that is not a SandboxDetail: {e}"
            ))
        })?;
        Ok(match detail.state.as_str() {
            "running" => Some(SandboxState::Running),
            "paused" => Some(SandboxState::Stopped),
            _ => None,
        })
    }

    /// `POST /sandboxes/{id}/connect`, which resumes a paused sandbox, with a short timeout
    /// (`READ_TIMEOUT_S`): connect only ever extends the sandbox's TTL, so one that is not
    /// paused again after the read ends by its own timeout soon.
    async fn start_for_read(&self, id: &str) -> Result<(), SandboxError> {
        validate_sandbox_id(id)?;
        let body = serde_json::json!({ "timeout": READ_TIMEOUT_S });
        let response = self
            .inner
            .api_at(
                HttpMethod::Post,
                id,
                "/connect",
                Some(body),
                "resume sandbox",
            )
            .await?;
        match response.status {
            200 | 201 => Ok(()),
            _ => Err(self.inner.api_error(&response, "resume sandbox", id)),
        }
    }

    /// `POST /sandboxes/{id}/pause`: the state a sandbox started to read was in.
    async fn restore(&self, id: &str) -> Result<(), SandboxError> {
        validate_sandbox_id(id)?;
        let response = self
            .inner
            .api_at(HttpMethod::Post, id, "/pause", None, "pause sandbox")
            .await?;
        match response.status {
            204 => Ok(()),
            _ => Err(self.inner.api_error(&response, "pause sandbox", id)),
        }
    }

    /// `DELETE /sandboxes/{id}`: kills a running or a paused sandbox.
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        validate_sandbox_id(id)?;
        let response = self
            .inner
            .api(HttpMethod::Delete, id, "kill sandbox")
            .await?;
        match response.status {
            204 => Ok(()),
            404 => {
                tracing::debug!(target: "reaper", sandbox = id, "E2B sandbox already gone");
                Ok(())
            }
            _ => Err(self.inner.api_error(&response, "kill sandbox", id)),
        }
    }
}

/// A running E2B sandbox. Cheap to clone.
#[derive(Clone)]
pub struct E2bSandbox {
    inner: Arc<Inner>,
    id: String,
    /// The sandbox's envd base URL.
    envd_url: String,
    /// envd's `X-Access-Token` (a sandbox created with secure access has one).
    access_token: Option<Secret>,
}

impl std::fmt::Debug for E2bSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bSandbox")
            .field("id", &self.id)
            .field("envd_url", &redact_url(&self.envd_url))
            .field("access_token", &self.access_token)
            .finish()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxHandle for E2bSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    /// One `process.Process/Start` stream: `sh -c command` under the wrapper script
    /// (`script::WRAPPER`), no stdin, envd's deadline at `timeout_ms`. A timeout or an output
    /// past the bound costs a second Start (the kill); a transport failure that may mean the
    /// sandbox is gone costs a control plane read to tell "gone" from "unreachable".
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        if command.len() > MAX_COMMAND_BYTES {
            return Err(SandboxError::Refused(format!(
                "the command is {} bytes, over the {MAX_COMMAND_BYTES}-byte limit: send a \
                 shorter command",
                command.len()
            )));
        }
        // envd reads a zero deadline as "none", and Connect allows at most 10 digits.
        let timeout_ms = options.timeout_ms.clamp(1, MAX_CONNECT_TIMEOUT_MS);
        let limit = self.inner.config.output_limit;
        let cut = (limit + 1).to_string();
        let token = script::kill_token(&self.id, command);
        let request = connect::StartRequest {
            process: connect::ProcessConfig {
                cmd: "/bin/sh",
                args: vec!["-c", script::WRAPPER, script::WRAPPER_NAME, &cut, command],
                envs: BTreeMap::from([(script::TOKEN_ENV, token.as_str())]),
            },
            stdin: false,
        };
        let answer = self.start(&request, timeout_ms).await;
        let stream = match answer {
            Ok(stream) => stream,
            Err(StartFailure::TimedOut) => {
                self.kill(&token).await;
                return Err(SandboxError::Timeout(options.timeout_ms));
            }
            Err(StartFailure::TooLarge(e)) => {
                self.kill(&token).await;
                return Err(e);
            }
            Err(StartFailure::MaybeGone(e)) => return Err(self.gone_or(e).await),
            Err(StartFailure::Error(e)) => return Err(e),
        };
        // Over the bound first: the cut may also have ended the command, or its timeout.
        for (name, bytes) in [("stdout", &stream.stdout), ("stderr", &stream.stderr)] {
            if bytes.len() > limit {
                self.kill(&token).await;
                return Err(SandboxError::OutputLimit {
                    stream: name.into(),
                    limit: limit as u64,
                });
            }
        }
        if let Some(error) = &stream.error {
            return Err(match error.code.as_str() {
                "deadline_exceeded" => {
                    self.kill(&token).await;
                    SandboxError::Timeout(options.timeout_ms)
                }
                "unauthenticated" | "permission_denied" => SandboxError::Refused(format!(
                    "envd of E2B sandbox {} refused the exec ({}: {}): the sandbox's access \
                     token or user ({:?}) is not accepted",
                    self.id, error.code, error.message, self.inner.config.envd_user
                )),
                "not_found" => SandboxError::NotFound(self.id.clone()),
                "unavailable" => {
                    self.gone_or(SandboxError::Unreachable(format!(
                        "envd of E2B sandbox {} is unavailable: {}",
                        self.id, error.message
                    )))
                    .await
                }
                "resource_exhausted" => SandboxError::Unreachable(format!(
                    "envd of E2B sandbox {} is rate limiting: {}; retry later",
                    self.id, error.message
                )),
                code => SandboxError::Other(format!(
                    "envd of E2B sandbox {} failed the exec ({code}): {}",
                    self.id, error.message
                )),
            });
        }
        let Some(end) = stream.end else {
            return Err(SandboxError::Other(format!(
                "envd of E2B sandbox {} ended the exec's stream without the process's end",
                self.id
            )));
        };
        Ok(ExecOutput {
            stdout: String::from_utf8_lossy(&stream.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stream.stderr).into_owned(),
            // Go reports -1 for a process ended by a signal (envd was told to kill it, or the
            // sandbox went away under it): non-zero, never a success.
            exit_code: if end.exited { end.exit_code } else { -1 },
        })
    }
}

/// Why a `Start` call brought no stream to read.
enum StartFailure {
    /// No answer within the exec's timeout plus the margin.
    TimedOut,
    /// The answer was larger than the response bound.
    TooLarge(SandboxError),
    /// No answer, or the sandbox proxy's "no such sandbox": the control plane tells which.
    MaybeGone(SandboxError),
    Error(SandboxError),
}

impl E2bSandbox {
    fn envd_headers(&self, timeout_ms: u64) -> Vec<(String, String)> {
        let user = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:", self.inner.config.envd_user));
        let mut headers = vec![
            (
                "content-type".to_string(),
                connect::CONTENT_TYPE.to_string(),
            ),
            ("connect-protocol-version".to_string(), "1".to_string()),
            ("connect-timeout-ms".to_string(), timeout_ms.to_string()),
            ("authorization".to_string(), format!("Basic {user}")),
            ("e2b-sandbox-id".to_string(), self.id.clone()),
            ("e2b-sandbox-port".to_string(), ENVD_PORT.to_string()),
        ];
        if let Some(token) = &self.access_token {
            headers.push(("x-access-token".to_string(), token.expose().to_string()));
        }
        headers
    }

    async fn start(
        &self,
        request: &connect::StartRequest<'_>,
        timeout_ms: u64,
    ) -> Result<StartStream, StartFailure> {
        let message = serde_json::to_vec(request).map_err(|e| {
            StartFailure::Error(SandboxError::Other(format!(
                "cannot encode the StartRequest: {e}"
            )))
        })?;
        let url = format!("{}{}", self.envd_url, connect::START_PATH);
        let shown = redact_url(&url);
        let http = HttpRequest {
            method: HttpMethod::Post,
            url,
            headers: self.envd_headers(timeout_ms),
            body: Some(connect::envelope(&message)),
            timeout_ms: timeout_ms.saturating_add(self.inner.config.exec_margin_ms),
            max_response_bytes: self.inner.config.max_response_bytes,
        };
        tracing::debug!(target: "reaper", sandbox = %self.id, url = %shown, timeout_ms,
            "E2B envd request");
        let response = match self.inner.transport.send(http).await {
            Ok(response) => response,
            Err(TransportError::TimedOut { .. }) => return Err(StartFailure::TimedOut),
            Err(e @ TransportError::ResponseTooLarge { .. }) => {
                return Err(StartFailure::TooLarge(SandboxError::Other(format!(
                    "the exec's answer from E2B sandbox {} is larger than max_response_bytes \
                     ({e}); the command was killed: print less per call or raise the bound",
                    self.id
                ))))
            }
            Err(e @ TransportError::Unreachable { .. }) => {
                return Err(StartFailure::MaybeGone(SandboxError::Unreachable(
                    e.to_string(),
                )))
            }
            Err(e) => return Err(StartFailure::Error(SandboxError::Other(e.to_string()))),
        };
        match response.status {
            200 => connect::decode_start_stream(&response.body)
                .map_err(|e| StartFailure::Error(SandboxError::Other(format!("{e} ({shown})")))),
            401 | 403 => Err(StartFailure::Error(SandboxError::Refused(format!(
                "envd of E2B sandbox {} refused the exec (HTTP {}): the sandbox's envd access \
                 token is not accepted: {}",
                self.id,
                response.status,
                body_excerpt(&response)
            )))),
            // The sandbox proxy answers 502 for a sandbox it does not run (killed, paused,
            // timed out); a wrong template gives 404. The control plane tells which.
            404 | 502 => Err(StartFailure::MaybeGone(SandboxError::Unreachable(format!(
                "envd of E2B sandbox {} is not reachable at {shown} (HTTP {}): {}",
                self.id,
                response.status,
                body_excerpt(&response)
            )))),
            429 | 503 | 504 => Err(StartFailure::Error(SandboxError::Unreachable(format!(
                "envd of E2B sandbox {} answered HTTP {}{}: {}",
                self.id,
                response.status,
                retry_after(&response),
                body_excerpt(&response)
            )))),
            status => Err(StartFailure::Error(SandboxError::Other(format!(
                "envd of E2B sandbox {} answered the exec with HTTP {status}: {}",
                self.id,
                connect::unary_error(&response.body)
                    .map(|e| format!("{}: {}", e.code, e.message))
                    .unwrap_or_else(|| body_excerpt(&response))
            )))),
        }
    }

    /// Kills every process of an abandoned exec. A failure is logged, not returned: the caller's
    /// own error is the answer, and destroying the sandbox kills them anyway.
    async fn kill(&self, token: &str) {
        let request = connect::StartRequest {
            process: connect::ProcessConfig {
                cmd: "/bin/sh",
                args: vec!["-c", script::KILL_SCRIPT, "reaper-kill", token],
                envs: BTreeMap::new(),
            },
            stdin: false,
        };
        let outcome = match self.start(&request, KILL_TIMEOUT_MS).await {
            Ok(stream) if stream.error.is_none() && stream.end.is_some() => return,
            Ok(stream) => match stream.error {
                Some(e) => format!("{}: {}", e.code, e.message),
                None => "the stream ended without the process's end".to_string(),
            },
            Err(StartFailure::TimedOut) => "timed out".to_string(),
            Err(
                StartFailure::TooLarge(e) | StartFailure::MaybeGone(e) | StartFailure::Error(e),
            ) => e.to_string(),
        };
        tracing::warn!(target: "reaper", sandbox = %self.id, error = %outcome,
            "could not kill an abandoned exec's processes; they run until the sandbox is destroyed");
    }

    /// `NotFound` when the control plane says the sandbox is gone or paused, else `error`.
    async fn gone_or(&self, error: SandboxError) -> SandboxError {
        let provider = E2bProvider {
            inner: self.inner.clone(),
        };
        match provider.open(&self.id).await {
            Ok(None) => SandboxError::NotFound(self.id.clone()),
            _ => error,
        }
    }
}

impl Inner {
    /// One control-plane request about sandbox `id`.
    async fn api(
        &self,
        method: HttpMethod,
        id: &str,
        what: &str,
    ) -> Result<HttpResponse, SandboxError> {
        self.api_at(method, id, "", None, what).await
    }

    /// One control-plane request to `/sandboxes/{id}{suffix}`, with a JSON body if given.
    async fn api_at(
        &self,
        method: HttpMethod,
        id: &str,
        suffix: &str,
        body: Option<serde_json::Value>,
        what: &str,
    ) -> Result<HttpResponse, SandboxError> {
        let url = format!("{}/sandboxes/{id}{suffix}", self.api_base);
        let shown = redact_url(&url);
        let mut headers = vec![
            (
                "x-api-key".to_string(),
                self.config.api_key.expose().to_string(),
            ),
            ("accept".to_string(), "application/json".to_string()),
        ];
        if body.is_some() {
            headers.push(("content-type".to_string(), "application/json".to_string()));
        }
        let request = HttpRequest {
            method,
            url,
            headers,
            body: body.map(|b| b.to_string().into_bytes()),
            timeout_ms: self.config.request_timeout_ms,
            max_response_bytes: self.config.max_response_bytes,
        };
        tracing::debug!(target: "reaper", method = method.as_str(), url = %shown, "E2B API request");
        self.transport.send(request).await.map_err(|e| match e {
            TransportError::Unreachable { .. } | TransportError::TimedOut { .. } => {
                SandboxError::Unreachable(format!("{what} {id}: {e}"))
            }
            _ => SandboxError::Other(format!("{what} {id}: {e}")),
        })
    }

    /// Maps an unexpected control-plane answer to the semantic error the core acts on.
    fn api_error(&self, response: &HttpResponse, what: &str, id: &str) -> SandboxError {
        let status = response.status;
        let message = serde_json::from_slice::<ApiError>(&response.body)
            .ok()
            .map(|e| e.message)
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| body_excerpt(response));
        let api = redact_url(&self.api_base);
        match status {
            401 | 403 => SandboxError::Refused(format!(
                "E2B at {api} rejected the API key (HTTP {status}) to {what} {id}: {message}; \
                 check E2B_API_KEY (a team API key, e2b_…, of the team that owns the sandbox)"
            )),
            404 => SandboxError::NotFound(id.to_string()),
            409 => SandboxError::Refused(format!(
                "E2B refused to {what} {id} (HTTP 409 conflict): {message}; the sandbox is in a \
                 state that does not allow it (pausing or resuming?), so it may still be \
                 running: retry later"
            )),
            429 => SandboxError::Unreachable(format!(
                "E2B is rate limiting (HTTP 429{}) the request to {what} {id}: {message}",
                retry_after(response)
            )),
            500..=599 => SandboxError::Unreachable(format!(
                "E2B failed to {what} {id} (HTTP {status}{}): {message}",
                retry_after(response)
            )),
            400..=499 => SandboxError::Refused(format!(
                "E2B refused to {what} {id} (HTTP {status}): {message}"
            )),
            _ => SandboxError::Other(format!(
                "E2B answered the request to {what} {id} with HTTP {status}: {message}"
            )),
        }
    }
}

/// The timeout, in seconds, a paused sandbox is resumed with to read its journal: long enough
/// for a probe and a replay, short enough that one left running (its pause failed) ends soon.
pub const READ_TIMEOUT_S: u64 = 600;

/// `, Retry-After: <value>` (seconds or an HTTP date) when the answer says when to come back. The provider never sleeps on it:
/// the ledger and the next sweep are the retry.
fn retry_after(response: &HttpResponse) -> String {
    response
        .header("retry-after")
        .map(|v| format!(", Retry-After: {}", v.trim()))
        .unwrap_or_default()
}

/// The start of a body, for messages: bounded, lossy.
fn body_excerpt(response: &HttpResponse) -> String {
    String::from_utf8_lossy(&response.body)
        .chars()
        .take(200)
        .collect::<String>()
        .trim()
        .to_string()
}

/// E2B's id syntax, checked before an id goes into a URL or a host name: no `/`, `.`, `%` or `?`
/// can reach either.
pub fn validate_sandbox_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_SANDBOX_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "invalid E2B sandbox id {id:?}: ids are 1-{MAX_SANDBOX_ID_LEN} characters of \
             [A-Za-z0-9-]"
        )))
    }
}
