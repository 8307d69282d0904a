//! [`VercelSandboxProvider`] and [`VercelSandbox`]: the provider and handle ports over Vercel's
//! sandbox REST API.

use std::sync::Arc;

use reaper_core::{
    ExecOptions, ExecOutput, SandboxError, SandboxHandle, SandboxProvider,
    SandboxState as CoreState,
};
use reaper_http_sandbox::{
    redact_url, HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{
    is_live_status, CommandEnvelope, ErrorBody, KillRequest, LogLine, NamedSandboxEnvelope,
    RunCommandRequest, SessionEnvelope,
};
use crate::config::{Config, ConfigError, DestroyMode, LEGACY_PROVIDER_NAME, PROVIDER_NAME};

/// The largest answer read for anything but a log stream (a sandbox or command object).
const MAX_JSON_RESPONSE_BYTES: usize = 1024 * 1024;
/// Longest sandbox or command id put in a URL.
const MAX_ID_LEN: usize = 128;
/// `SIGKILL`: a command past its timeout or bound is ended, not asked to end.
const KILL_SIGNAL: i32 = 9;

/// The most a log stream may weigh for an output bound of `limit` bytes per stream: both
/// streams at `limit + 1` bytes (the wrapper cuts them there), each byte escaped at worst to six
/// (`\u0000`), plus the NDJSON envelope of each chunk. A longer stream (only possible if Vercel
/// split the output into implausibly small chunks) is an error, never a truncation.
pub fn log_stream_bound(limit: usize) -> usize {
    limit
        .saturating_add(1)
        .saturating_mul(2 * 6)
        .saturating_add(256 * 1024)
}

struct Inner {
    config: Config,
    /// `base_url` without its trailing `/`, plus `/v2/sandboxes`.
    api_base: String,
    /// `base_url` as it may be shown: credentials masked.
    shown_base: String,
    transport: Arc<dyn HttpTransport>,
}

/// What a recorded id names: a named sandbox (what `@vercel/sandbox` 2.x and TanStack AI
/// record), or one session (`sbx_…`, the id a 1.x SDK recorded for a sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target<'a> {
    Named(&'a str),
    Session(&'a str),
}

fn target(id: &str) -> Target<'_> {
    if id.starts_with("sbx_") {
        Target::Session(id)
    } else {
        Target::Named(id)
    }
}

/// What Vercel says of a recorded sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// Commands run in this session now.
    Live {
        /// The live session's id.
        session: String,
    },
    /// A persistent sandbox whose session stopped: its filesystem is kept in a snapshot, and
    /// it resumes (a new session, billed) when asked.
    Stopped {
        /// The stopped session's id.
        session: String,
    },
    /// Vercel says it does not exist, or it stopped without anything to resume.
    Gone,
}

/// A [`SandboxProvider`] over Vercel Sandbox's v2 API, named `vercel` (and serving records
/// written under `vercel-sandbox`).
///
/// - A recorded id is a sandbox **name** (`/v2/sandboxes/{name}?projectId=…`), or a session id
///   `sbx_…` (what the 1.x SDK recorded, reached through `/v2/sandboxes/sessions/{id}`).
/// - `resume` never starts anything: a running (or pending) session is a handle; a
///   non-persistent sandbox that stopped is `None`; a persistent one that stopped is an error
///   (the probe says `unknown`), never "gone": it lives on, resumable and billed.
/// - `destroy` deletes the named sandbox (`DELETE /v2/sandboxes/{name}`), or with
///   [`DestroyMode::Stop`] stops its session; a session id is stopped.
/// - A 404 is "gone" only when Vercel's error body says the sandbox (or session) was not
///   found; any other 404 (a wrong base URL, team or project) is an error that keeps the record.
/// - `exec` runs `sh -c <command>` in the session under the output-bound wrapper
///   ([`crate::wrapper`]), reads its log stream within the `exec`'s timeout, then its exit code.
///   Past the timeout or the bound the command is killed.
/// - 401/403 are [`SandboxError::Refused`] naming `VERCEL_TOKEN`; 429 and 5xx are
///   [`SandboxError::Unreachable`] (429 with its `Retry-After`); no answer is `Unreachable`.
#[derive(Clone)]
pub struct VercelSandboxProvider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for VercelSandboxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VercelSandboxProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl VercelSandboxProvider {
    /// A provider over the native reqwest transport.
    #[cfg(feature = "native")]
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        let transport = reaper_http_sandbox::ReqwestTransport::new()
            .map_err(|e| ConfigError::Transport(e.to_string()))?;
        Self::with_transport(config, Arc::new(transport))
    }

    /// A provider over any transport (a Worker's `fetch`, a test's fault injector).
    pub fn with_transport(
        config: Config,
        transport: Arc<dyn HttpTransport>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let api_base = format!("{}/v2/sandboxes", config.base_url.trim_end_matches('/'));
        let shown_base = redact_url(&config.base_url);
        Ok(VercelSandboxProvider {
            inner: Arc::new(Inner {
                config,
                api_base,
                shown_base,
                transport,
            }),
        })
    }

    /// The settings this provider was built with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// What Vercel says of the recorded sandbox `id`, in one request that starts nothing.
    pub async fn presence(&self, id: &str) -> Result<Presence, SandboxError> {
        validate_id(id, "sandbox")?;
        let inner = &self.inner;
        let (session, persistent) = match target(id) {
            Target::Named(name) => match self.read_named(name, false).await? {
                None => return Ok(Presence::Gone),
                Some(found) => (found.session, found.sandbox.persistent),
            },
            Target::Session(session) => {
                let response = inner
                    .call(
                        HttpMethod::Get,
                        &inner.session_url(session, ""),
                        None::<&()>,
                    )
                    .await?;
                if response.status == 410 || inner.is_gone(&response) {
                    return Ok(Presence::Gone);
                }
                let found: SessionEnvelope = inner.expect(response, "get session", id)?;
                // A session alone cannot be resumed: only a named sandbox can.
                (found.session, false)
            }
        };
        validate_id(&session.id, "session")?;
        match (is_live_status(&session.status), persistent) {
            (Some(true), _) => Ok(Presence::Live {
                session: session.id,
            }),
            (Some(false), true) => Ok(Presence::Stopped {
                session: session.id,
            }),
            (Some(false), false) => Ok(Presence::Gone),
            (None, _) => Err(SandboxError::Other(format!(
                "Vercel reports sandbox {id} in state {:?}, which this provider does not know; \
                 it cannot tell whether the sandbox is live",
                session.status
            ))),
        }
    }

    /// `GET /v2/sandboxes/{name}?projectId=…`, with `resume=true` when asked (Vercel then
    /// starts a new session of a stopped persistent sandbox from its snapshot). `None`: Vercel
    /// says it is gone (410, or a 404 whose body says the sandbox was not found).
    async fn read_named(
        &self,
        name: &str,
        resume: bool,
    ) -> Result<Option<NamedSandboxEnvelope>, SandboxError> {
        let inner = &self.inner;
        let query: &[(&str, &str)] = if resume { &[("resume", "true")] } else { &[] };
        let response = inner
            .call(HttpMethod::Get, &inner.named_url(name, query), None::<&()>)
            .await?;
        // 410: Vercel says it is gone for good.
        if response.status == 410 || inner.is_gone(&response) {
            return Ok(None);
        }
        let what = if resume {
            "resume named sandbox"
        } else {
            "get named sandbox"
        };
        let found: NamedSandboxEnvelope = inner.expect(response, what, name)?;
        validate_id(&found.session.id, "session")?;
        Ok(Some(found))
    }

    /// A handle to session `session` without asking Vercel whether it is live; a gone session
    /// shows up as [`SandboxError::NotFound`] on the first `exec`.
    pub fn handle(&self, session: &str) -> Result<VercelSandbox, SandboxError> {
        validate_id(session, "session")?;
        Ok(VercelSandbox {
            inner: self.inner.clone(),
            id: session.to_string(),
            session: session.to_string(),
        })
    }

    /// Stops session `session`: gone, stopped or stopping already is `Ok`.
    async fn stop_session(&self, session: &str) -> Result<(), SandboxError> {
        let inner = &self.inner;
        let response = inner
            .call(
                HttpMethod::Post,
                &inner.session_url(session, "/stop"),
                None::<&()>,
            )
            .await?;
        match response.status {
            200..=299 => Ok(()),
            // 410: stopped already; 422: stopping (or snapshotting, then stopping).
            410 | 422 => Ok(()),
            _ if inner.is_gone(&response) => Ok(()),
            _ => Err(inner.error(&response, "stop session", session)),
        }
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxProvider for VercelSandboxProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    /// `vercel` (the framework's name) and `vercel-sandbox` (this reaper's earlier one).
    fn serves(&self, name: &str) -> bool {
        name == PROVIDER_NAME || name == LEGACY_PROVIDER_NAME
    }

    /// One request (`GET /v2/sandboxes/{name}` or `GET /v2/sandboxes/sessions/{id}`). Never
    /// starts a sandbox.
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        match self.presence(id).await? {
            Presence::Live { session } => {
                validate_id(&session, "session")?;
                Ok(Some(Arc::new(VercelSandbox {
                    inner: self.inner.clone(),
                    id: id.to_string(),
                    session,
                })))
            }
            Presence::Gone => Ok(None),
            Presence::Stopped { .. } => Err(SandboxError::Refused(format!(
                "Vercel sandbox {id} is stopped but persistent: it lives on (resumable, its \
                 snapshot billed), and reading its journal would resume it, which this reaper \
                 was not asked to do"
            ))),
        }
    }

    /// One request (`GET /v2/sandboxes/{name}`), which starts nothing. A live session is
    /// `Running`; a pending one (a resume Vercel has not finished) and a persistent sandbox
    /// stopping or snapshotting are `Changing`; any other stopped session of a **persistent**
    /// sandbox is `Stopped` (its snapshot resumes); a sandbox Vercel says is gone, or one that
    /// stopped without persistence, is `Gone`. A session id (`sbx_…`) is never said to be
    /// stopped (`None`): a session alone cannot be resumed, only a named sandbox can.
    async fn state(&self, id: &str) -> Result<Option<CoreState>, SandboxError> {
        validate_id(id, "sandbox")?;
        let Target::Named(name) = target(id) else {
            return Ok(None);
        };
        let Some(found) = self.read_named(name, false).await? else {
            return Ok(Some(CoreState::Gone));
        };
        let persistent = found.sandbox.persistent;
        Ok(match found.session.status.as_str() {
            "running" => Some(CoreState::Running),
            "pending" => Some(CoreState::Changing),
            _ if !persistent => Some(CoreState::Gone),
            "stopping" | "snapshotting" => Some(CoreState::Changing),
            "stopped" | "failed" | "aborted" => Some(CoreState::Stopped),
            // A state this provider does not know: it does not say, and nothing is started.
            _ => None,
        })
    }

    /// One request: `GET /v2/sandboxes/{name}?projectId=…&resume=true`, the read with which
    /// `@vercel/sandbox` resumes a stopped persistent sandbox (a new session from its
    /// snapshot). Vercel may answer before the new session runs; the core asks
    /// [`state`](SandboxProvider::state) until it does. Gone is `NotFound`; a sandbox Vercel
    /// did not resume (not persistent) is an error.
    async fn start_for_read(&self, id: &str) -> Result<(), SandboxError> {
        validate_id(id, "sandbox")?;
        let Target::Named(name) = target(id) else {
            return Err(SandboxError::Refused(format!(
                "Vercel session {id} cannot be resumed: only a named sandbox can (the record \
                 names a 1.x session)"
            )));
        };
        let Some(found) = self.read_named(name, true).await? else {
            return Err(SandboxError::NotFound(id.to_string()));
        };
        match is_live_status(&found.session.status) {
            Some(true) => Ok(()),
            _ => Err(SandboxError::Other(format!(
                "Vercel did not resume sandbox {id}: its session {} is {:?}{}",
                found.session.id,
                found.session.status,
                if found.sandbox.persistent {
                    ""
                } else {
                    " and the sandbox is not persistent"
                }
            ))),
        }
    }

    /// Stops the session a read resumed, so the sandbox is stopped again (and snapshotted, as
    /// Vercel does for a persistent sandbox): two requests, the named read for its current
    /// session and `POST /v2/sandboxes/sessions/{sessionId}/stop`. Already stopped or gone is
    /// `Ok` after the read.
    async fn restore(&self, id: &str) -> Result<(), SandboxError> {
        validate_id(id, "sandbox")?;
        let Target::Named(_) = target(id) else {
            return Err(SandboxError::Refused(format!(
                "Vercel session {id} was never resumed by this reaper: only named sandboxes are"
            )));
        };
        match self.presence(id).await? {
            Presence::Live { session } => self.stop_session(&session).await,
            Presence::Stopped { .. } | Presence::Gone => Ok(()),
        }
    }

    /// A named sandbox: `DELETE /v2/sandboxes/{name}` (one request), or with
    /// [`DestroyMode::Stop`] its session stopped (two). A session id: its stop (one). Gone
    /// (Vercel says not found, stopped or stopping) is `Ok`; any other refusal, or no answer,
    /// is an error: it may still be there.
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        validate_id(id, "sandbox")?;
        let inner = &self.inner;
        match (target(id), inner.config.destroy) {
            (Target::Session(session), _) => self.stop_session(session).await,
            (Target::Named(_), DestroyMode::Stop) => match self.presence(id).await? {
                Presence::Gone => Ok(()),
                Presence::Live { session } | Presence::Stopped { session } => {
                    self.stop_session(&session).await
                }
            },
            (Target::Named(name), DestroyMode::Delete) => {
                let response = inner
                    .call(HttpMethod::Delete, &inner.named_url(name, &[]), None::<&()>)
                    .await?;
                match response.status {
                    200..=299 | 410 => Ok(()),
                    _ if inner.is_gone(&response) => {
                        tracing::debug!(
                            target: "reaper",
                            sandbox = id,
                            "vercel sandbox already gone"
                        );
                        Ok(())
                    }
                    _ => Err(inner.error(&response, "delete sandbox", id)),
                }
            }
        }
    }
}

/// A Vercel sandbox's running session. Cheap to clone.
#[derive(Clone)]
pub struct VercelSandbox {
    inner: Arc<Inner>,
    /// The id it was recorded under (a name, or a session id).
    id: String,
    /// The session its commands run in.
    session: String,
}

impl std::fmt::Debug for VercelSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VercelSandbox")
            .field("id", &self.id)
            .field("session", &self.session)
            .field("base_url", &self.inner.shown_base)
            .finish()
    }
}

/// Why reading a command's log stream ended early.
enum LogsEnd {
    TimedOut,
    Overflow(&'static str),
    Failed(SandboxError),
}

/// What a finished log stream held.
#[derive(Default)]
struct Output {
    stdout: String,
    stderr: String,
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxHandle for VercelSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    /// Three requests: run (`POST .../cmd`), its log stream (`GET .../cmd/{cmdId}/logs`, which
    /// ends when the command does, within `timeout_ms`), its exit code (`GET .../cmd/{cmdId}`
    /// with `wait=true`). A fourth, the kill, only past the timeout or the bound.
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let inner = &self.inner;
        if command.contains('\0') {
            return Err(SandboxError::Refused(
                "the command contains a NUL byte, which no process argument can carry".into(),
            ));
        }
        let limit = inner.config.output_limit;
        let (program, args) = crate::wrapper::bounded(command, limit);
        let request = RunCommandRequest {
            command: program,
            args,
        };
        let response = inner
            .call(
                HttpMethod::Post,
                &inner.session_url(&self.session, "/cmd"),
                Some(&request),
            )
            .await?;
        let started: CommandEnvelope = inner.expect_exec(response, "run command", &self.id)?;
        let cmd = started.command.id;
        validate_id(&cmd, "command")?;

        let output = match self.read_logs(&cmd, options.timeout_ms).await {
            Ok(output) => output,
            Err(end) => {
                // A sandbox that is gone took its commands with it.
                if !matches!(end, LogsEnd::Failed(SandboxError::NotFound(_))) {
                    self.kill(&cmd).await;
                }
                return Err(match end {
                    LogsEnd::TimedOut => SandboxError::Timeout(options.timeout_ms),
                    LogsEnd::Overflow(stream) => SandboxError::OutputLimit {
                        stream: stream.to_string(),
                        limit: limit as u64,
                    },
                    LogsEnd::Failed(e) => e,
                });
            }
        };

        let finished = async {
            let response = inner
                .call(
                    HttpMethod::Get,
                    &inner.session_url_with(
                        &self.session,
                        &format!("/cmd/{cmd}"),
                        &[("wait", "true")],
                    ),
                    None::<&()>,
                )
                .await?;
            inner.expect_exec::<CommandEnvelope>(response, "wait for command", &self.id)
        }
        .await;
        let finished = match finished {
            Ok(finished) => finished,
            // The command may still be running, and nothing will read it any more.
            Err(e) => {
                if !matches!(e, SandboxError::NotFound(_)) {
                    self.kill(&cmd).await;
                }
                return Err(e);
            }
        };
        let exit_code = finished.command.exit_code.ok_or_else(|| {
            SandboxError::Other(format!(
                "Vercel answered the wait for command {cmd} in sandbox {} without an exit code",
                self.id
            ))
        })?;
        Ok(ExecOutput {
            stdout: output.stdout,
            stderr: output.stderr,
            exit_code: i32::try_from(exit_code).unwrap_or(-1),
        })
    }
}

impl VercelSandbox {
    /// Reads the command's whole log stream, bounded in time by the `exec`'s timeout and in
    /// size by [`log_stream_bound`], and splits it into stdout and stderr.
    async fn read_logs(&self, cmd: &str, timeout_ms: u64) -> Result<Output, LogsEnd> {
        let inner = &self.inner;
        let limit = inner.config.output_limit;
        let url = inner.session_url(&self.session, &format!("/cmd/{cmd}/logs"));
        let request = inner.request(
            HttpMethod::Get,
            url,
            None,
            timeout_ms,
            log_stream_bound(limit),
        );
        let response = match inner.transport.send(request).await {
            Ok(response) => response,
            Err(TransportError::TimedOut { .. }) => return Err(LogsEnd::TimedOut),
            Err(TransportError::ResponseTooLarge { limit: bytes, .. }) => {
                return Err(LogsEnd::Failed(SandboxError::Other(format!(
                    "Vercel's log stream of command {cmd} in sandbox {} passed {bytes} bytes, \
                     more than {limit} bytes per stream can take: its output came in unusually \
                     small pieces; nothing of it is returned",
                    self.id
                ))))
            }
            Err(e) => return Err(LogsEnd::Failed(inner.transport_error(e))),
        };
        if response.status != 200 {
            return Err(LogsEnd::Failed(inner.exec_error(
                &response,
                "read command logs",
                &self.id,
            )));
        }
        let mut output = Output::default();
        for line in response.body.split(|&b| b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let line: LogLine = serde_json::from_slice(line).map_err(|e| {
                LogsEnd::Failed(SandboxError::Other(format!(
                    "Vercel's log stream of command {cmd} in sandbox {} has a line that is not \
                     a log entry: {e}",
                    self.id
                )))
            })?;
            let (stream, buffer) = match line.stream.as_str() {
                "stdout" => ("stdout", &mut output.stdout),
                "stderr" => ("stderr", &mut output.stderr),
                "error" => {
                    return Err(LogsEnd::Failed(SandboxError::Unreachable(format!(
                        "Vercel's log stream of command {cmd} in sandbox {} failed: {}",
                        self.id, line.data
                    ))))
                }
                other => {
                    return Err(LogsEnd::Failed(SandboxError::Other(format!(
                        "Vercel's log stream of command {cmd} in sandbox {} has an entry of \
                         unknown stream {other:?}",
                        self.id
                    ))))
                }
            };
            let serde_json::Value::String(data) = line.data else {
                return Err(LogsEnd::Failed(SandboxError::Other(format!(
                    "Vercel's log stream of command {cmd} in sandbox {} has a {stream} entry \
                     whose data is not a string",
                    self.id
                ))));
            };
            buffer.push_str(&data);
            if buffer.len() > limit {
                return Err(LogsEnd::Overflow(stream));
            }
        }
        Ok(output)
    }

    /// `POST /v2/sandboxes/sessions/{id}/cmd/{cmdId}/kill` with `SIGKILL`, best effort: the caller already
    /// has the error to report, and a command that ended meanwhile needs no kill.
    async fn kill(&self, cmd: &str) {
        let inner = &self.inner;
        let result = inner
            .call(
                HttpMethod::Post,
                &inner.session_url(&self.session, &format!("/cmd/{cmd}/kill")),
                Some(&KillRequest {
                    signal: KILL_SIGNAL,
                }),
            )
            .await;
        match result {
            Ok(response) if (200..300).contains(&response.status) => {}
            Ok(response) => tracing::warn!(
                target: "reaper",
                sandbox = %self.id,
                command = cmd,
                status = response.status,
                "vercel refused to kill a command past its timeout or output bound"
            ),
            Err(e) => tracing::warn!(
                target: "reaper",
                sandbox = %self.id,
                command = cmd,
                error = %e,
                "could not kill a command past its timeout or output bound"
            ),
        }
    }
}

impl Inner {
    /// `{api_base}/{name}?projectId=…&teamId=…`.
    fn named_url(&self, name: &str, query: &[(&str, &str)]) -> String {
        let project = self.config.project_id.as_deref().map(|p| ("projectId", p));
        let query: Vec<(&str, &str)> = query.iter().copied().chain(project).collect();
        self.url(&format!("{}/{name}", self.api_base), &query)
    }

    /// `{api_base}/sessions/{session}{suffix}?teamId=…` (sessions take no project).
    fn session_url(&self, session: &str, suffix: &str) -> String {
        self.session_url_with(session, suffix, &[])
    }

    fn session_url_with(&self, session: &str, suffix: &str, query: &[(&str, &str)]) -> String {
        self.url(
            &format!("{}/sessions/{session}{suffix}", self.api_base),
            query,
        )
    }

    /// `{path}?{query}&teamId=…`.
    fn url(&self, path: &str, query: &[(&str, &str)]) -> String {
        let mut url = path.to_string();
        let team = self.config.team_id.as_deref().map(|t| ("teamId", t));
        for (i, (name, value)) in query.iter().copied().chain(team).enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            // Names and values are ids validated to [A-Za-z0-9_-] or fixed words.
            url.push_str(name);
            url.push('=');
            url.push_str(value);
        }
        url
    }

    /// Whether an answer says the sandbox is gone: a 404 whose body says the sandbox (or
    /// session) was not found. A bare 404 is not: it is also what a wrong URL, team or project
    /// gets, and reading it as gone would drop the record of a sandbox that lives on.
    fn is_gone(&self, response: &HttpResponse) -> bool {
        response.status == 404
            && serde_json::from_slice::<ErrorBody>(&response.body)
                .is_ok_and(|body| body.says_sandbox_not_found())
    }

    fn request(
        &self,
        method: HttpMethod,
        url: String,
        body: Option<Vec<u8>>,
        timeout_ms: u64,
        max_response_bytes: usize,
    ) -> HttpRequest {
        tracing::debug!(
            target: "reaper",
            method = method.as_str(),
            url = %redact_url(&url),
            "vercel sandbox request"
        );
        HttpRequest {
            method,
            url,
            headers: vec![(
                "authorization".to_string(),
                format!("Bearer {}", self.config.token.expose()),
            )],
            body,
            timeout_ms,
            max_response_bytes,
        }
    }

    async fn call<B: Serialize + ?Sized>(
        &self,
        method: HttpMethod,
        url: &str,
        body: Option<&B>,
    ) -> Result<HttpResponse, SandboxError> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| SandboxError::Other(format!("cannot encode the request: {e}")))?;
        let request = self.request(
            method,
            url.to_string(),
            body,
            self.config.request_timeout_ms,
            MAX_JSON_RESPONSE_BYTES,
        );
        self.transport
            .send(request)
            .await
            .map_err(|e| self.transport_error(e))
    }

    fn transport_error(&self, e: TransportError) -> SandboxError {
        match e {
            TransportError::Unreachable { .. } | TransportError::TimedOut { .. } => {
                SandboxError::Unreachable(format!("Vercel API: {e}"))
            }
            other => SandboxError::Other(format!("Vercel API: {other}")),
        }
    }

    /// A 200 answer's JSON body, or the mapped error.
    fn expect<T: DeserializeOwned>(
        &self,
        response: HttpResponse,
        what: &str,
        id: &str,
    ) -> Result<T, SandboxError> {
        if response.status != 200 {
            return Err(self.error(&response, what, id));
        }
        self.decode(&response, what)
    }

    /// Like [`expect`](Self::expect), where a sandbox that is gone is
    /// [`SandboxError::NotFound`].
    fn expect_exec<T: DeserializeOwned>(
        &self,
        response: HttpResponse,
        what: &str,
        id: &str,
    ) -> Result<T, SandboxError> {
        if response.status != 200 {
            return Err(self.exec_error(&response, what, id));
        }
        self.decode(&response, what)
    }

    fn decode<T: DeserializeOwned>(
        &self,
        response: &HttpResponse,
        what: &str,
    ) -> Result<T, SandboxError> {
        serde_json::from_slice(&response.body).map_err(|e| {
            SandboxError::Other(format!(
                "Vercel answered {what} with a body this provider cannot read: {e}"
            ))
        })
    }

    /// During an `exec`, a session Vercel says it does not know (404 with a not-found body),
    /// has stopped (410) or is stopping (422) is gone: [`SandboxError::NotFound`].
    fn exec_error(&self, response: &HttpResponse, what: &str, id: &str) -> SandboxError {
        if matches!(response.status, 410 | 422) || self.is_gone(response) {
            tracing::debug!(
                target: "reaper",
                sandbox = id,
                status = response.status,
                detail = %detail(response),
                "vercel sandbox gone during {what}"
            );
            return SandboxError::NotFound(id.to_string());
        }
        self.error(response, what, id)
    }

    /// Maps an unexpected answer to the semantic error the core acts on.
    fn error(&self, response: &HttpResponse, what: &str, id: &str) -> SandboxError {
        let status = response.status;
        let detail = detail(response);
        match status {
            401 | 403 => SandboxError::Refused(format!(
                "Vercel refused {what} of sandbox {id} (HTTP {status}{detail}): check \
                 VERCEL_TOKEN (or VERCEL_OIDC_TOKEN) and VERCEL_TEAM_ID: the token must be valid \
                 and belong to the team that owns the sandbox"
            )),
            409 => SandboxError::Refused(format!(
                "Vercel refused {what} of sandbox {id}: the sandbox is in a state that does not \
                 allow it (HTTP 409 conflict{detail})"
            )),
            429 => SandboxError::Unreachable(format!(
                "Vercel rate-limited {what} of sandbox {id} (HTTP 429{detail}); retry after {}",
                match response.header("retry-after").map(str::trim) {
                    Some(secs) if secs.parse::<u64>().is_ok() => format!("{secs} s (Retry-After)"),
                    // The other form Retry-After may take: an HTTP date.
                    Some(date) => format!("{date} (Retry-After)"),
                    None => "a while (no Retry-After given)".into(),
                }
            )),
            500..=599 => SandboxError::Unreachable(format!(
                "Vercel failed {what} of sandbox {id} (HTTP {status}{detail}) at {}",
                self.shown_base
            )),
            404 => SandboxError::Refused(format!(
                "Vercel answered {what} of sandbox {id} with 404 (HTTP 404{detail}) without \
                 saying the sandbox was not found: check VERCEL_SANDBOX_API_URL, VERCEL_TEAM_ID \
                 and VERCEL_PROJECT_ID; the record is kept"
            )),
            400..=499 => SandboxError::Refused(format!(
                "Vercel refused {what} of sandbox {id} (HTTP {status}{detail})"
            )),
            _ => SandboxError::Other(format!(
                "Vercel answered {what} of sandbox {id} with HTTP {status}{detail}"
            )),
        }
    }
}

/// `, <code>: <message>` from Vercel's error body, or the start of a body that is not one.
fn detail(response: &HttpResponse) -> String {
    match serde_json::from_slice::<ErrorBody>(&response.body) {
        Ok(body) => {
            let code = body.error.code.unwrap_or_default();
            let message = body.error.message.unwrap_or_default();
            match (code.is_empty(), message.is_empty()) {
                (true, true) => String::new(),
                (false, true) => format!(", {code}"),
                (true, false) => format!(", {message}"),
                (false, false) => format!(", {code}: {message}"),
            }
        }
        Err(_) if response.body.is_empty() => String::new(),
        Err(_) => {
            let text: String = String::from_utf8_lossy(&response.body)
                .chars()
                .take(200)
                .collect();
            format!(", {text}")
        }
    }
}

/// Ids and names go into URL paths: only `[A-Za-z0-9_-]` (what Vercel allows in a sandbox
/// name), so no `/`, `..`, `%`, `?` or `&` can reach one.
pub fn validate_id(id: &str, what: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "invalid Vercel {what} id {id:?}: ids are 1-{MAX_ID_LEN} characters of [A-Za-z0-9_-] \
             (a sandbox name, or sbx_…)"
        )))
    }
}
