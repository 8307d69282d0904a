//! [`DaytonaProvider`] and [`DaytonaSandbox`]: the core's provider and handle ports over
//! Daytona's REST API (lookup, delete) and the sandbox's toolbox API (execute).

use std::sync::Arc;

use reaper_core::{
    ExecOptions, ExecOutput, SandboxError, SandboxHandle, SandboxProvider,
    SandboxState as CoreState,
};
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError};
use serde::de::DeserializeOwned;

use crate::api::{ErrorBody, ExecuteRequest, ExecuteResponse, Sandbox};
use crate::command::wrap;
use crate::config::{check_base_url, ConfigError, DaytonaConfig};

/// The name recorded in instance records of Daytona sandboxes.
pub const PROVIDER_NAME: &str = "daytona";
/// The largest sandbox lookup or delete answer read (a `Sandbox` is a few KiB).
const MAX_API_RESPONSE_BYTES: usize = 1024 * 1024;
/// Longest sandbox id or name accepted (Daytona ids are UUIDs).
const MAX_SANDBOX_ID_LEN: usize = 128;

/// States from which a sandbox comes back to `started` by itself: "not now", retryable.
const TRANSIENT_STATES: &[&str] = &[
    "creating",
    "restoring",
    "starting",
    "pending_build",
    "building_snapshot",
    "pulling_snapshot",
    "resuming",
    "resizing",
    "snapshotting",
    "forking",
];

/// What a delete answers (a `Sandbox`): only its identity is read, so a delete is confirmed
/// whatever else the sandbox carries.
#[derive(serde::Deserialize)]
struct Deleted {
    id: String,
    #[serde(default)]
    name: Option<String>,
}

/// A [`SandboxProvider`] over Daytona.
///
/// - `resume` is one `GET /sandbox/{id}`. `started` is a handle; `destroyed`, `destroying`, a
///   desired state of `destroyed`, or a 404 is `None` (gone). A sandbox on its way to
///   `started` is [`SandboxError::Unreachable`] (try later). A stopped, archived, paused or
///   errored sandbox is [`SandboxError::Refused`]: the reaper never starts a sandbox (that
///   bills compute, and a probe must not), so its journal cannot be read until someone else
///   starts it; it is still destroyed when its run is reclaimed.
/// - `state` is the same lookup: `started` running, `stopped` (the auto-stop's state) stopped,
///   the transient states changing; archived, errored or unknown states are not said (the
///   core never starts those: an archive restores for minutes, and an errored one would not
///   come up). `start_for_read` is one `POST /sandbox/{id}/start`, `restore` one
///   `POST /sandbox/{id}/stop`: a stopped sandbox is started only by the sweep's bounded
///   start-to-read, and stopped again after.
/// - `destroy` is one `DELETE /sandbox/{id}`; a 404 is `Ok` (gone). A 409 (a state change in
///   progress) costs one lookup: a sandbox whose deletion is already under way is `Ok`, any
///   other is an error (the next sweep retries).
/// - A handle's `exec` is one `POST {toolboxProxyUrl}/{id}/process/execute` (see
///   [`crate::command`] for the script sent).
///
/// Answers: 401/403 are `Refused` naming `DAYTONA_API_KEY`; 429 and 5xx are `Unreachable`
/// (retryable: the probe answers `unknown`, never `finished`); no answer is `Unreachable`, or
/// `Timeout` for an exec.
#[derive(Clone)]
pub struct DaytonaProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: DaytonaConfig,
    /// `api_url` without its trailing `/`.
    api_base: String,
    /// Whether the API is reached over TLS: the key is then never sent to a plain-HTTP toolbox.
    api_is_https: bool,
    transport: Arc<dyn HttpTransport>,
}

impl std::fmt::Debug for DaytonaProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxState {
    /// Started: exec works.
    Live(Sandbox),
    /// Deleted, being deleted, or unknown to Daytona.
    Gone,
    /// Exists but is not started (stopped, archived, …); the state is Daytona's word.
    NotLive(String),
}

impl DaytonaProvider {
    /// A provider over the native reqwest transport.
    #[cfg(feature = "native")]
    pub fn new(config: DaytonaConfig) -> Result<Self, ConfigError> {
        let transport = reaper_http_sandbox::ReqwestTransport::new()
            .map_err(|e| ConfigError::Transport(e.to_string()))?;
        Self::with_transport(config, Arc::new(transport))
    }

    /// A provider over any transport: a Worker's `fetch`, or a test's fault injector.
    pub fn with_transport(
        config: DaytonaConfig,
        transport: Arc<dyn HttpTransport>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let api_base = config.api_url.trim_end_matches('/').to_string();
        Ok(DaytonaProvider {
            inner: Arc::new(Inner {
                api_is_https: api_base.starts_with("https://"),
                api_base,
                config,
                transport,
            }),
        })
    }

    /// The settings this provider was built with.
    pub fn config(&self) -> &DaytonaConfig {
        &self.inner.config
    }

    /// One `GET /sandbox/{id}`: the sandbox's state as the reaper acts on it.
    pub async fn lookup(&self, id: &str) -> Result<SandboxState, SandboxError> {
        validate_sandbox_id(id)?;
        let inner = &self.inner;
        let url = format!("{}/sandbox/{id}", inner.api_base);
        let response = inner
            .send(
                HttpMethod::Get,
                &url,
                None,
                inner.config.request_timeout_ms,
                MAX_API_RESPONSE_BYTES,
            )
            .await
            .map_err(|e| inner.transport_error(e, "sandbox lookup", None))?;
        if response.status == 404 && is_not_found(&response) {
            return Ok(SandboxState::Gone);
        }
        if response.status != 200 {
            return Err(inner.error(&response, "sandbox lookup", id));
        }
        let sandbox: Sandbox = parse(&response, "sandbox lookup")?;
        let state = sandbox.state.as_deref().unwrap_or("unknown");
        if matches!(state, "destroyed" | "destroying")
            || sandbox.desired_state.as_deref() == Some("destroyed")
        {
            return Ok(SandboxState::Gone);
        }
        if state == "started" {
            return Ok(SandboxState::Live(sandbox));
        }
        Ok(SandboxState::NotLive(state.to_string()))
    }

    /// `POST /sandbox/{id}/{action}` (start, stop): the answer is the sandbox, which must be
    /// the one asked for (a page from something else than Daytona is an error).
    async fn transition(&self, id: &str, action: &str) -> Result<(), SandboxError> {
        validate_sandbox_id(id)?;
        let inner = &self.inner;
        let url = format!("{}/sandbox/{id}/{action}", inner.api_base);
        let what = format!("sandbox {action}");
        let response = inner
            .send(
                HttpMethod::Post,
                &url,
                None,
                inner.config.request_timeout_ms,
                MAX_API_RESPONSE_BYTES,
            )
            .await
            .map_err(|e| inner.transport_error(e, &what, None))?;
        if response.status == 404 && is_not_found(&response) {
            return Err(SandboxError::NotFound(id.to_string()));
        }
        if response.status != 200 {
            return Err(inner.error(&response, &what, id));
        }
        let answered: Deleted = parse(&response, &what)?;
        if answered.id != id && answered.name.as_deref() != Some(id) {
            return Err(SandboxError::Other(format!(
                "Daytona answered the {action} of sandbox {id} with sandbox {}",
                answered.id
            )));
        }
        Ok(())
    }

    /// A handle to a started sandbox as a lookup described it.
    fn handle(&self, sandbox: Sandbox) -> Result<DaytonaSandbox, SandboxError> {
        let base = sandbox.toolbox_proxy_url.trim_end_matches('/');
        check_base_url(base).map_err(|problem| {
            SandboxError::Other(format!(
                "Daytona gave sandbox {} an unusable toolboxProxyUrl: {problem}",
                sandbox.id
            ))
        })?;
        // The key goes along with every toolbox request: never in clear text when the API
        // itself is reached over TLS.
        if self.inner.api_is_https && !base.starts_with("https://") {
            return Err(SandboxError::Refused(format!(
                "Daytona gave sandbox {} a plain-HTTP toolboxProxyUrl ({base}) while the API is \
                 HTTPS; the API key is not sent over it",
                sandbox.id
            )));
        }
        validate_sandbox_id(&sandbox.id).map_err(|_| {
            SandboxError::Other(format!(
                "Daytona answered the lookup with an invalid sandbox id {:?}",
                sandbox.id
            ))
        })?;
        Ok(DaytonaSandbox {
            execute_url: format!("{base}/{}/process/execute", sandbox.id),
            id: sandbox.id,
            inner: self.inner.clone(),
        })
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxProvider for DaytonaProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        match self.lookup(id).await? {
            SandboxState::Live(sandbox) => Ok(Some(
                Arc::new(self.handle(sandbox)?) as Arc<dyn SandboxHandle>
            )),
            SandboxState::Gone => Ok(None),
            SandboxState::NotLive(state) if TRANSIENT_STATES.contains(&state.as_str()) => {
                Err(SandboxError::Unreachable(format!(
                    "Daytona sandbox {id} is {state}, not started yet; try again later"
                )))
            }
            SandboxState::NotLive(state) => Err(SandboxError::Refused(format!(
                "Daytona sandbox {id} is {state}, not started: its journal cannot be read until \
                 it runs (a sweep starts a stopped one within its max_starts_per_sweep); it is \
                 still destroyed when its run is reclaimed"
            ))),
        }
    }

    async fn state(&self, id: &str) -> Result<Option<CoreState>, SandboxError> {
        Ok(match self.lookup(id).await? {
            SandboxState::Live(_) => Some(CoreState::Running),
            SandboxState::Gone => Some(CoreState::Gone),
            SandboxState::NotLive(state) if state == "stopped" => Some(CoreState::Stopped),
            SandboxState::NotLive(state)
                if state == "stopping" || TRANSIENT_STATES.contains(&state.as_str()) =>
            {
                Some(CoreState::Changing)
            }
            SandboxState::NotLive(_) => None,
        })
    }

    async fn start_for_read(&self, id: &str) -> Result<(), SandboxError> {
        self.transition(id, "start").await
    }

    async fn restore(&self, id: &str) -> Result<(), SandboxError> {
        self.transition(id, "stop").await
    }

    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        validate_sandbox_id(id)?;
        let inner = &self.inner;
        let url = format!("{}/sandbox/{id}", inner.api_base);
        let response = inner
            .send(
                HttpMethod::Delete,
                &url,
                None,
                inner.config.request_timeout_ms,
                MAX_API_RESPONSE_BYTES,
            )
            .await
            .map_err(|e| inner.transport_error(e, "sandbox delete", None))?;
        match response.status {
            // Only Daytona's own answer counts: a wrong base URL can reach a page served with
            // 200 (Daytona's dashboard answers unknown non-API paths so), and taking that for
            // a deletion would forget a live sandbox.
            200 => {
                let deleted: Deleted = parse(&response, "sandbox delete")?;
                if deleted.id != id && deleted.name.as_deref() != Some(id) {
                    return Err(SandboxError::Other(format!(
                        "Daytona answered the delete of sandbox {id} with sandbox {}; the \
                         sandbox may still be running",
                        deleted.id
                    )));
                }
                Ok(())
            }
            204 => Ok(()),
            404 if is_not_found(&response) => Ok(()),
            // A state change in progress: fine when it is our deletion (a second destroy while
            // the first one runs), an error otherwise.
            409 => match self.lookup(id).await? {
                SandboxState::Gone => Ok(()),
                _ => Err(inner.error(&response, "sandbox delete", id)),
            },
            _ => Err(inner.error(&response, "sandbox delete", id)),
        }
    }
}

/// A started Daytona sandbox. Cheap to clone.
#[derive(Clone)]
pub struct DaytonaSandbox {
    inner: Arc<Inner>,
    id: String,
    execute_url: String,
}

impl std::fmt::Debug for DaytonaSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaSandbox")
            .field("id", &self.id)
            .field("execute_url", &self.execute_url)
            .finish()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxHandle for DaytonaSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    /// Runs `sh -c command` through the toolbox. Daytona folds stderr into stdout: `stdout` is
    /// both streams in the order written and `stderr` is always empty (every command the core
    /// builds silences stderr). The bound applies to both together and is reported as
    /// `stdout`. The timeout is rounded up to whole seconds (the toolbox's unit); the error
    /// names the timeout asked for.
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let inner = &self.inner;
        let limit = inner.config.output_limit;
        let seconds = options
            .timeout_ms
            .div_ceil(1000)
            .clamp(1, u64::from(u32::MAX));
        let script = wrap(command, limit);
        let body = serde_json::to_vec(&ExecuteRequest {
            command: &script,
            timeout: seconds as u32,
        })
        .map_err(|e| SandboxError::Other(format!("cannot encode the exec request: {e}")))?;
        let http_timeout = (seconds * 1000).saturating_add(inner.config.exec_margin_ms);
        // JSON escapes a control byte as six; the bound plus one byte always fits.
        let max_response = limit
            .saturating_add(1)
            .saturating_mul(6)
            .saturating_add(4096);
        let response = inner
            .send(
                HttpMethod::Post,
                &self.execute_url,
                Some(body),
                http_timeout,
                max_response,
            )
            .await
            .map_err(|e| match e {
                TransportError::TimedOut { .. } => SandboxError::Timeout(options.timeout_ms),
                TransportError::ResponseTooLarge { .. } => SandboxError::OutputLimit {
                    stream: "stdout".into(),
                    limit: limit as u64,
                },
                other => inner.transport_error(other, "exec", Some(&self.id)),
            })?;
        match response.status {
            200 => {}
            404 => return Err(SandboxError::NotFound(self.id.clone())),
            408 => return Err(SandboxError::Timeout(options.timeout_ms)),
            _ => return Err(inner.error(&response, "exec", &self.id)),
        }
        let answer: ExecuteResponse = parse(&response, "exec")?;
        if answer.result.len() > limit {
            return Err(SandboxError::OutputLimit {
                stream: "stdout".into(),
                limit: limit as u64,
            });
        }
        // An older daemon answers the exit code as `code` (Daytona's SDK reads
        // `exitCode ?? code`); an answer with neither has no exit code, and 0 would call a
        // failed command a success.
        let code = answer
            .exit_code
            .or_else(|| answer.legacy_code.as_ref().and_then(legacy_exit_code));
        match code {
            Some(-1) => Err(SandboxError::Other(format!(
                "the Daytona toolbox of sandbox {} could not run the command: {}",
                self.id,
                excerpt(&answer.result)
            ))),
            Some(code) => Ok(ExecOutput {
                stdout: answer.result,
                stderr: String::new(),
                exit_code: code,
            }),
            None => Err(SandboxError::Other(format!(
                "the Daytona toolbox of sandbox {} answered the command with neither exitCode nor \
                 code: its exit status is unknown",
                self.id
            ))),
        }
    }
}

impl Inner {
    async fn send(
        &self,
        method: HttpMethod,
        url: &str,
        body: Option<Vec<u8>>,
        timeout_ms: u64,
        max_response_bytes: usize,
    ) -> Result<HttpResponse, TransportError> {
        tracing::debug!(target: "reaper", method = method.as_str(), url, "daytona request");
        let request = HttpRequest {
            method,
            url: url.to_string(),
            headers: vec![
                (
                    "authorization".to_string(),
                    format!("Bearer {}", self.config.api_key.expose()),
                ),
                ("accept".to_string(), "application/json".to_string()),
            ],
            body,
            timeout_ms,
            max_response_bytes,
        };
        let response = self.transport.send(request).await?;
        // A transport that does not stream may have read more than allowed: refuse it the same.
        if response.body.len() > max_response_bytes {
            return Err(TransportError::ResponseTooLarge {
                url: url.to_string(),
                limit: max_response_bytes,
            });
        }
        Ok(response)
    }

    /// No answer. (URLs carry no secret: the key is only ever in a header.)
    fn transport_error(&self, e: TransportError, what: &str, id: Option<&str>) -> SandboxError {
        let sandbox = id.map(|i| format!(" of sandbox {i}")).unwrap_or_default();
        match e {
            TransportError::Unreachable { .. } | TransportError::TimedOut { .. } => {
                SandboxError::Unreachable(format!("Daytona {what}{sandbox}: {e}"))
            }
            other => SandboxError::Other(format!("Daytona {what}{sandbox}: {other}")),
        }
    }

    /// An answer other than the expected one, as the semantic error the core acts on.
    fn error(&self, response: &HttpResponse, what: &str, id: &str) -> SandboxError {
        let status = response.status;
        let message = serde_json::from_slice::<ErrorBody>(&response.body)
            .ok()
            .and_then(|b| b.message())
            .unwrap_or_else(|| excerpt(&String::from_utf8_lossy(&response.body)));
        match status {
            401 => SandboxError::Refused(format!(
                "Daytona rejected the API key (HTTP 401) for {what} of sandbox {id}: {message}; \
                 check DAYTONA_API_KEY"
            )),
            403 => SandboxError::Refused(format!(
                "Daytona refused {what} of sandbox {id} (HTTP 403): {message}; check that \
                 DAYTONA_API_KEY belongs to the sandbox's organization and may read and delete \
                 sandboxes"
            )),
            404 => SandboxError::Refused(format!(
                "{} does not serve Daytona's API (HTTP 404 for {what} of sandbox {id}: \
                 {message}); check DAYTONA_API_URL (Daytona Cloud's is {})",
                self.api_base,
                crate::config::DEFAULT_API_URL
            )),
            409 => SandboxError::Refused(format!(
                "Daytona refused {what} of sandbox {id} (HTTP 409): {message}; the sandbox is \
                 changing state, and the next sweep tries again"
            )),
            // "Not now": retryable, so a probe answers `unknown`, never `finished`. Nothing
            // sleeps here; the caller's next attempt (the next sweep) honours the wait.
            429 => SandboxError::Unreachable(format!(
                "Daytona rate-limited {what} of sandbox {id} (HTTP 429, {}): {message}",
                match response.header("retry-after") {
                    Some(after) => format!("Retry-After: {}", excerpt(after)),
                    None => "no Retry-After".to_string(),
                }
            )),
            // A proxy's request timeout, or a failure on Daytona's side: retryable.
            408 | 500..=599 => SandboxError::Unreachable(format!(
                "Daytona failed {what} of sandbox {id} (HTTP {status}): {message}"
            )),
            400..=499 => SandboxError::Refused(format!(
                "Daytona refused {what} of sandbox {id} (HTTP {status}): {message}"
            )),
            _ => SandboxError::Other(format!(
                "Daytona answered {what} of sandbox {id} with HTTP {status}: {message}"
            )),
        }
    }
}

/// A 404 that says "no such sandbox": Daytona's own JSON error, not a route the server lacks
/// (Express's `Cannot GET /…`) nor a page from something that is not Daytona. Anything else
/// is a misconfiguration, never "gone": a wrong URL must not make every sandbox look deleted.
fn is_not_found(response: &HttpResponse) -> bool {
    let Ok(body) = serde_json::from_slice::<ErrorBody>(&response.body) else {
        return false;
    };
    body.status_code == Some(404) && body.message().is_some_and(|m| !m.starts_with("Cannot "))
}

fn parse<T: DeserializeOwned>(response: &HttpResponse, what: &str) -> Result<T, SandboxError> {
    serde_json::from_slice(&response.body).map_err(|e| {
        SandboxError::Other(format!(
            "Daytona answered {what} with a body that is not the documented schema ({e}): {}; \
             check DAYTONA_API_URL",
            excerpt(&String::from_utf8_lossy(&response.body))
        ))
    })
}

/// The legacy `code` of an execute answer as an exit code (an integer; anything else is none).
fn legacy_exit_code(code: &serde_json::Value) -> Option<i32> {
    code.as_i64().and_then(|c| i32::try_from(c).ok())
}

/// The start of a text, for an error message.
fn excerpt(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Ids and names go into URL paths: only `[A-Za-z0-9._-]`, so no `/`, `?`, `%` or `..` can
/// reach a path.
pub fn validate_sandbox_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_SANDBOX_ID_LEN
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "invalid Daytona sandbox id {id:?}: ids are 1-{MAX_SANDBOX_ID_LEN} characters of \
             [A-Za-z0-9._-]"
        )))
    }
}
