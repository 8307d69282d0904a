//! [`HttpSandboxProvider`] and [`HttpSandbox`]: the provider and handle ports over the sandboxd
//! v1 API.

use std::sync::Arc;

use reaper_core::{ExecOptions, ExecOutput, SandboxError, SandboxHandle, SandboxProvider};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{
    codes, AgentStarted, CreateSandboxRequest, ErrorBody, ExecRequest, ExecResult, Health,
    SandboxInfo, StartAgentRequest, API_PREFIX,
};
use crate::redact::{redact_url, Redactor};
use crate::transport::{HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError};

/// The provider name recorded in instance records of sandboxes created through sandboxd.
/// Reclaim and the probe refuse records of another name, so every client of one daemon must use
/// the same one.
pub const DEFAULT_PROVIDER_NAME: &str = "sandboxd";
/// The timeout of every request other than `exec`.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Added to an `exec`'s own timeout for its HTTP request, so the daemon's `exec-timeout` answer
/// (the command was killed) arrives before the client gives up on the request.
pub const DEFAULT_EXEC_MARGIN_MS: u64 = 5_000;
/// The largest response body read. The daemon's default output limit is 4 MiB per stream;
/// JSON escaping can grow control bytes sixfold.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// The largest request body sent: the daemon's default `--max-body-bytes`. Checked here so an
/// oversized command is a clear error before any byte goes out.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Longest sandbox id the daemon accepts (the local provider's rule).
const MAX_SANDBOX_ID_LEN: usize = 64;

/// How an [`HttpSandboxProvider`] reaches its daemon.
#[derive(Clone)]
pub struct HttpProviderConfig {
    /// `http://127.0.0.1:7878` or `https://sandboxes.example.com/prefix`; `/v1/...` is appended.
    /// It may carry credentials for a proxy in front of the daemon (`https://user:pass@host`):
    /// they are shown nowhere ([`redact_url`] in every `Debug`, log and error).
    pub base_url: String,
    /// The daemon's bearer token. Never logged, never in `Debug`.
    pub token: String,
    /// The name recorded in instance records ([`DEFAULT_PROVIDER_NAME`]).
    pub name: String,
    /// The timeout of every request but an exec (which gets its own plus `exec_margin_ms`).
    pub request_timeout_ms: u64,
    /// Added to an exec's timeout for the round trip.
    pub exec_margin_ms: u64,
    /// Larger responses are refused.
    pub max_response_bytes: usize,
    /// Match the daemon's `--max-body-bytes`.
    pub max_request_bytes: usize,
}

impl HttpProviderConfig {
    /// The defaults for the daemon at `base_url` with `token`.
    pub fn new(base_url: impl Into<String>, token: impl Into<String>) -> Self {
        HttpProviderConfig {
            base_url: base_url.into(),
            token: token.into(),
            name: DEFAULT_PROVIDER_NAME.into(),
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            exec_margin_ms: DEFAULT_EXEC_MARGIN_MS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }
}

impl std::fmt::Debug for HttpProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProviderConfig")
            .field("base_url", &redact_url(&self.base_url))
            .field("token", &"<redacted>")
            .field("name", &self.name)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("exec_margin_ms", &self.exec_margin_ms)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

/// A configuration that cannot work, refused before any request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL is shown redacted ([`redact_url`]).
    #[error(
        "invalid sandboxd base URL {0:?}: it must start with http:// or https:// and have no \
         query or fragment"
    )]
    BaseUrl(String),
    #[error(
        "invalid sandboxd token: it must be non-empty printable ASCII without spaces (the \
         daemon's REAPER_SANDBOXD_TOKEN)"
    )]
    /// The token is empty or not printable ASCII.
    Token,
    #[error("invalid provider name: it must not be empty")]
    /// The provider name is empty.
    Name,
    #[error("cannot build the HTTP transport: {0}")]
    /// The HTTP client could not be built.
    Transport(String),
}

struct Inner {
    config: HttpProviderConfig,
    /// `base_url` without its trailing `/`, plus `/v1`.
    api_base: String,
    /// `base_url` as it may be shown: credentials masked.
    shown_base: String,
    /// Masks the URL's credentials in text a transport produced.
    redactor: Redactor,
    transport: Arc<dyn HttpTransport>,
}

/// A [`SandboxProvider`] whose sandboxes live behind a `reaper-sandboxd`.
///
/// Error mapping, which the probe and reclaim rely on:
/// - no answer (connection refused, reset, timeout, a 502/503/504 from a proxy), or a "not now"
///   (429, the daemon's 503 `too-many-execs`) is [`SandboxError::Unreachable`]: the probe
///   reports `unknown`, never `finished`;
/// - 401 is [`SandboxError::Refused`] saying the token is wrong;
/// - `resume` of a sandbox the daemon does not have (404) is `Ok(None)`;
/// - `destroy` succeeds only on 204: anything else is an `Err`, so a failed teardown is reported.
#[derive(Clone)]
pub struct HttpSandboxProvider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HttpSandboxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSandboxProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl HttpSandboxProvider {
    /// A provider over the native reqwest transport. Nothing is sent until the sweep asks; the
    /// URL and token are checked here.
    ///
    /// ```
    /// use reaper_http_sandbox::{ConfigError, HttpProviderConfig, HttpSandboxProvider};
    ///
    /// let config = HttpProviderConfig::new("https://sandboxes.example.com", "s3cret-token");
    /// assert!(HttpSandboxProvider::new(config).is_ok());
    /// let no_scheme = HttpProviderConfig::new("sandboxes.example.com", "s3cret-token");
    /// assert!(matches!(
    ///     HttpSandboxProvider::new(no_scheme),
    ///     Err(ConfigError::BaseUrl(_))
    /// ));
    /// ```
    #[cfg(feature = "native")]
    pub fn new(config: HttpProviderConfig) -> Result<Self, ConfigError> {
        let transport =
            crate::ReqwestTransport::new().map_err(|e| ConfigError::Transport(e.to_string()))?;
        Self::with_transport(config, Arc::new(transport))
    }

    /// A provider over any transport (a Worker's `fetch`, a test's fault injector).
    pub fn with_transport(
        config: HttpProviderConfig,
        transport: Arc<dyn HttpTransport>,
    ) -> Result<Self, ConfigError> {
        let base = config.base_url.trim_end_matches('/');
        // A query or fragment would end up in the middle of every request's URL.
        if !(base.starts_with("http://") || base.starts_with("https://"))
            || base.contains(['?', '#'])
        {
            return Err(ConfigError::BaseUrl(redact_url(&config.base_url)));
        }
        if config.token.is_empty() || !config.token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::Token);
        }
        if config.name.is_empty() {
            return Err(ConfigError::Name);
        }
        let api_base = format!("{base}{API_PREFIX}");
        let shown_base = redact_url(&config.base_url);
        let redactor = Redactor::for_url(base);
        Ok(HttpSandboxProvider {
            inner: Arc::new(Inner {
                config,
                api_base,
                shown_base,
                redactor,
                transport,
            }),
        })
    }

    /// The configuration the provider was built with.
    pub fn config(&self) -> &HttpProviderConfig {
        &self.inner.config
    }

    /// `GET /v1/healthz`: whether the daemon answers (no token needed).
    pub async fn health(&self) -> Result<Health, SandboxError> {
        let response = self
            .inner
            .call(HttpMethod::Get, "/healthz", None::<&()>, None)
            .await?;
        self.inner.expect(response, 200, "health check", None)
    }

    /// Creates a sandbox on the daemon's machine.
    pub async fn create(
        &self,
        request: &CreateSandboxRequest,
    ) -> Result<HttpSandbox, SandboxError> {
        let response = self
            .inner
            .call(HttpMethod::Post, "/sandboxes", Some(request), None)
            .await?;
        let info: SandboxInfo = self.inner.expect(response, 201, "create sandbox", None)?;
        validate_sandbox_id(&info.id).map_err(|_| {
            SandboxError::Other(format!(
                "sandboxd created a sandbox with an invalid id {:?}",
                info.id
            ))
        })?;
        Ok(self.handle_unchecked(info.id))
    }

    /// What the daemon knows of sandbox `id`; `None` when it does not exist (or was destroyed).
    pub async fn status(&self, id: &str) -> Result<Option<SandboxInfo>, SandboxError> {
        validate_sandbox_id(id)?;
        let response = self
            .inner
            .call(
                HttpMethod::Get,
                &format!("/sandboxes/{id}"),
                None::<&()>,
                None,
            )
            .await?;
        if response.status == 404
            && error_code(&response).as_deref() == Some(codes::SANDBOX_NOT_FOUND)
        {
            return Ok(None);
        }
        self.inner
            .expect(response, 200, "sandbox status", Some(id))
            .map(Some)
    }

    /// Like `resume`, with the concrete handle type (for `start_agent`).
    pub async fn open(&self, id: &str) -> Result<Option<HttpSandbox>, SandboxError> {
        Ok(self
            .status(id)
            .await?
            .map(|info| self.handle_unchecked(info.id)))
    }

    /// A handle to sandbox `id` without asking the daemon whether it exists; a missing sandbox
    /// shows up as [`SandboxError::NotFound`] on the first call.
    pub fn handle(&self, id: &str) -> Result<HttpSandbox, SandboxError> {
        validate_sandbox_id(id)?;
        Ok(self.handle_unchecked(id.to_string()))
    }

    fn handle_unchecked(&self, id: String) -> HttpSandbox {
        HttpSandbox {
            inner: self.inner.clone(),
            id,
        }
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxProvider for HttpSandboxProvider {
    fn name(&self) -> &str {
        &self.inner.config.name
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        Ok(self
            .open(id)
            .await?
            .map(|s| Arc::new(s) as Arc<dyn SandboxHandle>))
    }

    /// `DELETE /v1/sandboxes/{id}`. Only a 204 is success (a sandbox already gone is a 204 too);
    /// any other answer, or none, is an error: the sandbox may still be running.
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        validate_sandbox_id(id)?;
        let response = self
            .inner
            .call(
                HttpMethod::Delete,
                &format!("/sandboxes/{id}"),
                None::<&()>,
                None,
            )
            .await?;
        if response.status == 204 {
            return Ok(());
        }
        Err(self.inner.error(&response, "destroy sandbox", Some(id)))
    }
}

/// A sandbox behind sandboxd. Cheap to clone.
#[derive(Clone)]
pub struct HttpSandbox {
    inner: Arc<Inner>,
    id: String,
}

impl std::fmt::Debug for HttpSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSandbox")
            .field("id", &self.id)
            .field("base_url", &self.inner.shown_base)
            .finish()
    }
}

impl HttpSandbox {
    /// Starts `command` under the journaled wrapper as run `run_id` (its stdout to the run's
    /// journal, then the nonced exit sentinel), detached on the daemon's machine.
    /// `journal_dir` defaults to the sandbox's.
    pub async fn start_agent(
        &self,
        run_id: &str,
        command: &str,
        journal_dir: Option<&str>,
    ) -> Result<AgentStarted, SandboxError> {
        let request = StartAgentRequest {
            run_id: run_id.to_string(),
            command: command.to_string(),
            journal_dir: journal_dir.map(str::to_string),
        };
        let response = self
            .inner
            .call(
                HttpMethod::Post,
                &format!("/sandboxes/{}/agents", self.id),
                Some(&request),
                None,
            )
            .await?;
        self.inner
            .expect(response, 201, "start agent", Some(&self.id))
    }

    /// What the daemon knows of this sandbox; `None` once it is gone.
    pub async fn status(&self) -> Result<Option<SandboxInfo>, SandboxError> {
        HttpSandboxProvider {
            inner: self.inner.clone(),
        }
        .status(&self.id)
        .await
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxHandle for HttpSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    /// `POST /v1/sandboxes/{id}/exec`. The HTTP request may take the command's timeout plus
    /// the configured margin; a command killed at its timeout is [`SandboxError::Timeout`].
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let request = ExecRequest {
            command: command.to_string(),
            timeout_ms: Some(options.timeout_ms),
        };
        let timeout = options
            .timeout_ms
            .saturating_add(self.inner.config.exec_margin_ms);
        let response = self
            .inner
            .call(
                HttpMethod::Post,
                &format!("/sandboxes/{}/exec", self.id),
                Some(&request),
                Some(timeout),
            )
            .await?;
        let result: ExecResult = self.inner.expect(response, 200, "exec", Some(&self.id))?;
        Ok(ExecOutput {
            stdout: result.stdout,
            stderr: result.stderr,
            exit_code: result.exit_code,
        })
    }
}

impl Inner {
    async fn call<B: Serialize + ?Sized>(
        &self,
        method: HttpMethod,
        path: &str,
        body: Option<&B>,
        timeout_ms: Option<u64>,
    ) -> Result<HttpResponse, SandboxError> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| SandboxError::Other(format!("cannot encode the request: {e}")))?;
        if let Some(body) = &body {
            if body.len() > self.config.max_request_bytes {
                return Err(SandboxError::Refused(format!(
                    "the request body is {} bytes, over the {}-byte limit (the daemon's \
                     --max-body-bytes): send a shorter command",
                    body.len(),
                    self.config.max_request_bytes
                )));
            }
        }
        let request = HttpRequest {
            method,
            url: format!("{}{path}", self.api_base),
            headers: vec![(
                "authorization".to_string(),
                format!("Bearer {}", self.config.token),
            )],
            body,
            timeout_ms: timeout_ms.unwrap_or(self.config.request_timeout_ms),
            max_response_bytes: self.config.max_response_bytes,
        };
        tracing::debug!(
            method = method.as_str(),
            url = %format_args!("{}{API_PREFIX}{path}", self.shown_base),
            "sandboxd request"
        );
        // A transport's error quotes the URL it was given: masked before it goes anywhere.
        let shown = |e: &TransportError| self.redactor.scrub(&e.to_string());
        let response = self.transport.send(request).await.map_err(|e| match e {
            TransportError::Unreachable { .. } | TransportError::TimedOut { .. } => {
                SandboxError::Unreachable(shown(&e))
            }
            TransportError::ResponseTooLarge { .. } => SandboxError::Other(format!(
                "{}; raise max_response_bytes or read less per exec",
                shown(&e)
            )),
            other => SandboxError::Other(shown(&other)),
        })?;
        // A transport that does not stream may have read more than allowed: refuse it the same.
        if response.body.len() > self.config.max_response_bytes {
            return Err(SandboxError::Other(format!(
                "the response from sandboxd is larger than the {}-byte limit; raise \
                 max_response_bytes or read less per exec",
                self.config.max_response_bytes
            )));
        }
        Ok(response)
    }

    fn expect<T: DeserializeOwned>(
        &self,
        response: HttpResponse,
        status: u16,
        what: &str,
        id: Option<&str>,
    ) -> Result<T, SandboxError> {
        if response.status != status {
            return Err(self.error(&response, what, id));
        }
        serde_json::from_slice(&response.body).map_err(|e| {
            SandboxError::Other(format!(
                "sandboxd answered {what} with a body that is not the v1 schema: {e}"
            ))
        })
    }

    /// Maps an unexpected answer to the semantic error the core acts on.
    fn error(&self, response: &HttpResponse, what: &str, id: Option<&str>) -> SandboxError {
        let detail = serde_json::from_slice::<ErrorBody>(&response.body)
            .ok()
            .map(|b| b.error);
        let code = detail.as_ref().map(|d| d.code.as_str());
        let message = detail
            .as_ref()
            .map(|d| d.message.clone())
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&response.body)
                    .chars()
                    .take(200)
                    .collect()
            });
        let status = response.status;
        let sandbox = id.map(|i| format!(" of sandbox {i}")).unwrap_or_default();
        match (status, code) {
            (401, _) => SandboxError::Refused(format!(
                "sandboxd at {} rejected the bearer token (HTTP 401) for {what}: the token is \
                 wrong or missing; use the daemon's REAPER_SANDBOXD_TOKEN",
                self.shown_base
            )),
            (404, Some(codes::SANDBOX_NOT_FOUND)) => {
                SandboxError::NotFound(id.unwrap_or_default().to_string())
            }
            (404, _) => SandboxError::Refused(format!(
                "{} does not serve the sandboxd v1 API (HTTP 404 for {what}): check the base \
                 URL and the daemon's version",
                self.shown_base
            )),
            (422, Some(codes::EXEC_TIMEOUT)) => {
                SandboxError::Timeout(parse_timeout(&message).unwrap_or_default())
            }
            (422, Some(codes::OUTPUT_LIMIT_EXCEEDED)) => SandboxError::OutputLimit {
                // The daemon names the stream; an older or foreign daemon's message may not.
                stream: parse_stream(&message)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{what}{sandbox}")),
                limit: parse_limit(&message).unwrap_or_default(),
            },
            // 429 and 503 (the daemon's `too-many-execs`, or a proxy) say "not now": retryable,
            // so a probe answers `unknown`, never `finished`.
            (429 | 502..=504, _) => SandboxError::Unreachable(format!(
                "{what}{sandbox}: HTTP {status}{} from {}: {message}",
                code.map(|c| format!(", {c}")).unwrap_or_default(),
                self.shown_base
            )),
            (400..=499, _) => SandboxError::Refused(format!(
                "sandboxd refused {what}{sandbox} (HTTP {status}{}): {message}",
                code.map(|c| format!(", {c}")).unwrap_or_default()
            )),
            _ => SandboxError::Other(format!(
                "sandboxd failed {what}{sandbox} (HTTP {status}{}): {message}",
                code.map(|c| format!(", {c}")).unwrap_or_default()
            )),
        }
    }
}

/// The `exec-timeout` message names the timeout as `after <N> ms`.
fn parse_timeout(message: &str) -> Option<u64> {
    let rest = &message[message.find("after ")? + 6..];
    rest.split(' ').next()?.parse().ok()
}

fn error_code(response: &HttpResponse) -> Option<String> {
    serde_json::from_slice::<ErrorBody>(&response.body)
        .ok()
        .map(|b| b.error.code)
}

/// The daemon's id rule, checked before an id goes into a URL: no `/`, `..`, `%` or `?` can
/// reach the path.
pub fn validate_sandbox_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_SANDBOX_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "invalid sandbox id {id:?}: ids are 1-{MAX_SANDBOX_ID_LEN} characters of [A-Za-z0-9-]"
        )))
    }
}

/// The stream named in the daemon's output-limit message (`sandbox command stderr exceeded …`).
fn parse_stream(message: &str) -> Option<&'static str> {
    let rest = &message[message.find("sandbox command ")? + "sandbox command ".len()..];
    ["stdout", "stderr"]
        .into_iter()
        .find(|s| rest.starts_with(&format!("{s} exceeded")))
}

/// The byte limit named in the daemon's output-limit message (`… the 1048576-byte output limit …`).
fn parse_limit(message: &str) -> Option<u64> {
    let end = message.find("-byte output limit")?;
    let digits = message[..end]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?;
    digits.parse().ok()
}
