//! A fake of E2B on 127.0.0.1, backed by real sandboxes of `reaper_local` (a directory and real
//! `sh` processes), so every exec runs for real.
//!
//! - The control plane (`GET`/`DELETE /sandboxes/{sandboxID}`) is served by
//!   `reaper_fake_api::FakeApi`, which checks every request and response against the stored
//!   copy of E2B's OpenAPI document (`openapi/openapi.yml`).
//! - envd's `process.Process/Start` (Connect streaming with the JSON codec) is served under
//!   `/envd/{sandboxID}`, a prefix the control plane's document does not cover. Every exchange
//!   is held to E2B's published envd document (`openapi/envd-process-start.openapi.yml`) by
//!   [`envd::check_exchange`] when the fake is checked: the request's headers, content type,
//!   framing and `StartRequest`, and every answer envelope. [`check_start`] adds this
//!   client's own rules (no stdin, no pty, envd's user). It behaves as envd does
//!   (infra `packages/envd/internal/services/process/start.go` and `handler/handler.go`): output
//!   streamed in chunks of at most 32 KiB, no output bound, `Connect-Timeout-Ms` kills the
//!   started process only (not what it started) and ends the stream with `deadline_exceeded`,
//!   and a client that goes away does not kill the process.
//!
//! The fake reports its own `host:port` as each sandbox's `domain`, so the provider's
//! `{domain}` substitution is exercised too.

#![allow(dead_code)]

pub mod envd;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use reaper_core::secret::Secret;
use reaper_core::SandboxProvider;
use reaper_e2b::{E2bConfig, E2bProvider};
use reaper_fake_api::{handler_fn, FakeApi, FakeApiOptions, FakeRequest, FakeResponse, OpenApi};
use reaper_local::{CreateOptions, LocalProviderOptions, LocalSandboxProvider};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

pub const API_KEY: &str = "e2b_test_0123456789abcdef";
/// The per-stream bound the conformance cases cross.
pub const OUTPUT_LIMIT: usize = 4096;
/// Where the fake serves envd.
pub const ENVD_PREFIX: &str = "/envd/";
/// envd's read size for stdout and stderr.
const CHUNK: usize = 32 * 1024;

/// One E2B sandbox as the fake's control plane knows it.
#[derive(Debug, Clone)]
struct FakeSandbox {
    paused: bool,
    access_token: String,
    kill_fails: bool,
}

#[derive(Default)]
struct State {
    sandboxes: Mutex<HashMap<String, FakeSandbox>>,
    /// Departures of envd requests from the recorded shape.
    shape_violations: Mutex<Vec<String>>,
}

/// The fake, its backing sandboxes, and a provider pointed at it.
pub struct E2bFake {
    pub api: FakeApi,
    pub local: LocalSandboxProvider,
    pub provider: E2bProvider,
    state: Arc<State>,
    _root: tempfile::TempDir,
}

impl E2bFake {
    pub async fn start() -> E2bFake {
        Self::start_with(|_| {}).await
    }

    /// Starts the fake; `tune` adjusts the provider's config before it is built.
    pub async fn start_with(tune: impl FnOnce(&mut E2bConfig)) -> E2bFake {
        let root = tempfile::tempdir().expect("temp dir");
        let local =
            LocalSandboxProvider::new(LocalProviderOptions::new(root.path().join("sandboxes")));
        let state = Arc::new(State::default());
        let doc = Arc::new(
            OpenApi::from_file(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.yml"))
                .expect("the stored E2B OpenAPI document loads"),
        );
        // The handler needs the fake's own address (the sandboxes' domain), known only once it
        // listens: it reads it from here.
        let origin: Arc<Mutex<String>> = Arc::default();
        let handler = {
            let (state, local, origin) = (state.clone(), local.clone(), origin.clone());
            handler_fn(move |req: FakeRequest| {
                let (state, local) = (state.clone(), local.clone());
                let domain = origin.lock().unwrap().clone();
                async move { route(&state, &local, &domain, req).await }
            })
        };
        let api = FakeApi::start_with(
            doc,
            handler,
            FakeApiOptions::default().undocumented_prefix(ENVD_PREFIX),
        )
        .await;
        *origin.lock().unwrap() = api.addr().to_string();
        let mut config = E2bConfig::new(Secret::new(API_KEY));
        config.api_url = api.url();
        config.domain = "sandboxes.invalid".into();
        config.envd_url_template = format!("http://{{domain}}{ENVD_PREFIX}{{sandboxID}}");
        config.output_limit = OUTPUT_LIMIT;
        config.max_response_bytes = 1024 * 1024;
        tune(&mut config);
        let provider = E2bProvider::new(config).expect("a valid test config");
        E2bFake {
            api,
            local,
            provider,
            state,
            _root: root,
        }
    }

    /// A fresh running sandbox (a real local one behind it) with an envd access token.
    pub async fn create_sandbox(&self) -> String {
        let sandbox = self
            .local
            .create(CreateOptions::default())
            .await
            .expect("create a local sandbox");
        let id = sandbox.id().to_string();
        self.state.sandboxes.lock().unwrap().insert(
            id.clone(),
            FakeSandbox {
                paused: false,
                access_token: format!("envd-token-{id}"),
                kill_fails: false,
            },
        );
        id
    }

    pub fn pause(&self, id: &str) {
        self.with(id, |s| s.paused = true);
    }

    pub fn set_access_token(&self, id: &str, token: &str) {
        self.with(id, |s| s.access_token = token.to_string());
    }

    /// Makes `DELETE /sandboxes/{id}` fail with a 500 (the sandbox stays), or heals it.
    pub fn set_kill_fails(&self, id: &str, fails: bool) {
        self.with(id, |s| s.kill_fails = fails);
    }

    fn with(&self, id: &str, f: impl FnOnce(&mut FakeSandbox)) {
        f(self
            .state
            .sandboxes
            .lock()
            .unwrap()
            .get_mut(id)
            .expect("a sandbox the fake made"));
    }

    /// Requests received so far, by kind: `GET /sandboxes/{id}`, `DELETE /sandboxes/{id}`,
    /// envd `Start`, anything else.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for r in self.api.requests() {
            match (r.method.as_str(), r.path.starts_with(ENVD_PREFIX)) {
                ("GET", false) if r.path.starts_with("/sandboxes/") => counts.get_sandbox += 1,
                ("DELETE", false) if r.path.starts_with("/sandboxes/") => counts.kill_sandbox += 1,
                ("POST", false) if r.path.ends_with("/connect") => counts.connect_sandbox += 1,
                ("POST", false) if r.path.ends_with("/pause") => counts.pause_sandbox += 1,
                ("POST", true) if r.path.ends_with("/process.Process/Start") => {
                    counts.process_start += 1
                }
                _ => counts.other += 1,
            }
        }
        counts
    }

    /// Every departure from the OpenAPI documents (the control plane's and envd's) and from
    /// this client's own envd rules.
    pub fn assert_clean(&self) {
        self.api.assert_no_violations();
        let doc = envd::document();
        let exchanges = self.api.requests();
        let broken: Vec<String> = envd::starts(&exchanges)
            // A stream the client stopped reading may end mid-envelope: not `whole`.
            .flat_map(|r| envd::check_exchange(&doc, r, false).violations)
            .collect();
        assert!(
            broken.is_empty(),
            "envd exchanges broke E2B's published envd document:\n{}",
            broken.join("\n")
        );
        let shape = self.state.shape_violations.lock().unwrap().clone();
        assert!(
            shape.is_empty(),
            "envd requests broke the recorded process.proto shape:\n{}",
            shape.join("\n")
        );
    }
}

impl Drop for E2bFake {
    fn drop(&mut self) {
        // Every test that used the fake ends with its traffic checked.
        if !std::thread::panicking() {
            self.assert_clean();
        }
    }
}

/// Requests per kind (see [`E2bFake::counts`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub get_sandbox: usize,
    pub kill_sandbox: usize,
    pub connect_sandbox: usize,
    pub pause_sandbox: usize,
    pub process_start: usize,
    pub other: usize,
}

impl Counts {
    pub fn total(&self) -> usize {
        self.get_sandbox
            + self.kill_sandbox
            + self.connect_sandbox
            + self.pause_sandbox
            + self.process_start
            + self.other
    }

    pub fn since(&self, before: Counts) -> Counts {
        Counts {
            get_sandbox: self.get_sandbox - before.get_sandbox,
            kill_sandbox: self.kill_sandbox - before.kill_sandbox,
            connect_sandbox: self.connect_sandbox - before.connect_sandbox,
            pause_sandbox: self.pause_sandbox - before.pause_sandbox,
            process_start: self.process_start - before.process_start,
            other: self.other - before.other,
        }
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} request(s): {} GET /sandboxes/{{id}}, {} DELETE /sandboxes/{{id}}, {} POST \
             /sandboxes/{{id}}/connect, {} POST /sandboxes/{{id}}/pause, {} envd \
             process.Process/Start",
            self.total(),
            self.get_sandbox,
            self.kill_sandbox,
            self.connect_sandbox,
            self.pause_sandbox,
            self.process_start
        )?;
        if self.other > 0 {
            write!(f, ", {} other", self.other)?;
        }
        Ok(())
    }
}

/// The `Error` schema of the control plane.
fn api_error(status: u16, message: &str) -> FakeResponse {
    FakeResponse::json(status, &json!({"code": status, "message": message}))
}

async fn route(
    state: &State,
    local: &LocalSandboxProvider,
    domain: &str,
    req: FakeRequest,
) -> FakeResponse {
    if req.path.starts_with(ENVD_PREFIX) {
        return envd(state, local, req).await;
    }
    let template = req.operation.as_ref().map(|o| o.path_template.clone());
    if req.header("x-api-key") != Some(API_KEY) {
        return api_error(401, "Invalid API key, it must start with 'e2b_' prefix");
    }
    let id = req.param("sandboxID").unwrap_or_default().to_string();
    let known = state.sandboxes.lock().unwrap().get(&id).cloned();
    match (req.method.as_str(), template.as_deref()) {
        ("GET", Some("/sandboxes/{sandboxID}")) => match known {
            Some(sandbox) => FakeResponse::json(200, &detail(&id, &sandbox, domain)),
            None => api_error(
                404,
                &format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
            ),
        },
        ("DELETE", Some("/sandboxes/{sandboxID}")) => match known {
            Some(sandbox) if sandbox.kill_fails => api_error(
                500,
                "Error killing sandbox: the orchestrator did not answer",
            ),
            Some(_) => match local.destroy(&id).await {
                Ok(()) => {
                    state.sandboxes.lock().unwrap().remove(&id);
                    FakeResponse::empty(204)
                }
                Err(e) => api_error(500, &format!("Error killing sandbox: {e}")),
            },
            None => api_error(
                404,
                &format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
            ),
        },
        // Connect resumes a paused sandbox (201) or answers a running one (200), with the
        // `Sandbox` schema; pause pauses a running one (204) and refuses a paused one (409).
        ("POST", Some("/sandboxes/{sandboxID}/connect")) => match known {
            Some(sandbox) => {
                let was_paused = sandbox.paused;
                if let Some(s) = state.sandboxes.lock().unwrap().get_mut(&id) {
                    s.paused = false;
                }
                let body = json!({
                    "templateID": "rki5dems9wqfm4r03t7g",
                    "sandboxID": id,
                    "clientID": "6532622b",
                    "envdVersion": "0.2.4",
                    "envdAccessToken": sandbox.access_token,
                    "domain": domain,
                });
                FakeResponse::json(if was_paused { 201 } else { 200 }, &body)
            }
            None => api_error(
                404,
                &format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
            ),
        },
        ("POST", Some("/sandboxes/{sandboxID}/pause")) => match known {
            Some(sandbox) if sandbox.paused => {
                api_error(409, &format!("sandbox \"{id}\" is already paused"))
            }
            Some(_) => {
                if let Some(s) = state.sandboxes.lock().unwrap().get_mut(&id) {
                    s.paused = true;
                }
                FakeResponse::empty(204)
            }
            None => api_error(
                404,
                &format!("sandbox \"{id}\" doesn't exist or you don't have access to it"),
            ),
        },
        _ => api_error(404, "no such route in this fake"),
    }
}

/// A `SandboxDetail` with every required field.
fn detail(id: &str, sandbox: &FakeSandbox, domain: &str) -> Value {
    json!({
        "templateID": "rki5dems9wqfm4r03t7g",
        "alias": "base",
        "sandboxID": id,
        "clientID": "6532622b",
        "startedAt": "2026-12-03T09:00:00Z",
        "endAt": "2026-12-03T10:00:00Z",
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 1024,
        "envdVersion": "0.2.4",
        "envdAccessToken": sandbox.access_token,
        "domain": domain,
        "state": if sandbox.paused { "paused" } else { "running" },
        "metadata": {},
    })
}

/// One Connect envelope.
fn frame(flags: u8, message: &Value) -> Bytes {
    let json = message.to_string();
    let mut out = Vec::with_capacity(5 + json.len());
    out.push(flags);
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json.as_bytes());
    Bytes::from(out)
}

fn end_stream_error(code: &str, message: &str) -> Bytes {
    frame(2, &json!({"error": {"code": code, "message": message}}))
}

async fn envd(state: &State, local: &LocalSandboxProvider, req: FakeRequest) -> FakeResponse {
    let rest = &req.path[ENVD_PREFIX.len()..];
    let (id, method) = rest.split_once('/').unwrap_or((rest, ""));
    let known = state.sandboxes.lock().unwrap().get(id).cloned();
    // The sandbox proxy's answer for a sandbox it does not run.
    let not_running = || {
        FakeResponse::json(
            502,
            &json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}),
        )
    };
    let Some(sandbox) = known.filter(|s| !s.paused) else {
        return not_running();
    };
    let Ok(Some(backing)) = local.open(id).await else {
        return not_running();
    };
    if req.header("x-access-token") != Some(sandbox.access_token.as_str()) {
        return FakeResponse::bytes(
            401,
            "text/plain",
            "unauthorized access, please provide a valid access token",
        );
    }
    if req.method != "POST" || method != "process.Process/Start" {
        return FakeResponse::bytes(404, "text/plain", "404 page not found");
    }
    let start = match check_start(&req.headers, &req.body) {
        Ok(start) => start,
        Err(problems) => {
            let mut v = state.shape_violations.lock().unwrap();
            v.extend(
                problems
                    .iter()
                    .map(|p| format!("{} {}: {p}", req.method, req.path)),
            );
            return FakeResponse::bytes(
                200,
                "application/connect+json",
                end_stream_error("invalid_argument", &problems.join("; ")),
            );
        }
    };
    let mut command = tokio::process::Command::new(&start.cmd);
    command
        .args(&start.args)
        .env_clear()
        .env("PATH", reaper_local::DEFAULT_SANDBOX_PATH)
        .env("HOME", backing.work_dir())
        .env("LC_ALL", "C")
        // How reaper_local's destroy finds every process of the sandbox.
        .env("REAPER_SANDBOX_DIR", backing.dir())
        .envs(&start.envs)
        .current_dir(backing.work_dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return FakeResponse::bytes(
                200,
                "application/connect+json",
                end_stream_error("invalid_argument", &format!("error starting process: {e}")),
            )
        }
    };
    let (response, tx) = FakeResponse::channel(200, "application/connect+json");
    let timeout = start
        .timeout_ms
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis);
    tokio::spawn(async move {
        let pid = child.id().unwrap_or_default();
        // A client gone away stops nothing: the output is drained and dropped.
        let send = |chunk: Bytes| {
            let tx = tx.clone();
            async move { tx.send(chunk).await.is_ok() }
        };
        send(frame(0, &json!({"event": {"start": {"pid": pid}}}))).await;
        let mut stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let (mut out_open, mut err_open) = (true, true);
        let (mut out_buf, mut err_buf) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        loop {
            if !out_open && !err_open {
                break;
            }
            tokio::select! {
                n = stdout.read(&mut out_buf), if out_open => match n {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => {
                        send(frame(0, &json!({"event": {"data": {"stdout": b64(&out_buf[..n])}}}))).await;
                    }
                },
                n = stderr.read(&mut err_buf), if err_open => match n {
                    Ok(0) | Err(_) => err_open = false,
                    Ok(n) => {
                        send(frame(0, &json!({"event": {"data": {"stderr": b64(&err_buf[..n])}}}))).await;
                    }
                },
                () = &mut deadline => {
                    // envd's process context: SIGKILL to the started process only.
                    let _ = child.start_kill();
                    send(end_stream_error("deadline_exceeded", "context deadline exceeded")).await;
                    return;
                }
            }
        }
        let status = tokio::select! {
            status = child.wait() => status,
            () = &mut deadline => {
                let _ = child.start_kill();
                send(end_stream_error("deadline_exceeded", "context deadline exceeded")).await;
                return;
            }
        };
        let end = match status {
            Ok(status) => match status.code() {
                Some(code) => {
                    json!({"exitCode": code, "exited": true, "status": format!("exit status {code}")})
                }
                None => {
                    use std::os::unix::process::ExitStatusExt;
                    let signal = status.signal().unwrap_or_default();
                    json!({"exitCode": -1, "status": format!("signal: {signal}")})
                }
            },
            Err(e) => json!({"exitCode": -1, "status": "unknown", "error": e.to_string()}),
        };
        send(frame(0, &json!({"event": {"end": end}}))).await;
        send(frame(2, &json!({}))).await;
    });
    response
}

/// A `StartRequest` as the fake runs it.
#[derive(Debug)]
pub struct Start {
    pub cmd: String,
    pub args: Vec<String>,
    pub envs: BTreeMap<String, String>,
    pub timeout_ms: Option<u64>,
}

/// Holds a `process.Process/Start` request to the recorded shape: the Connect protocol's
/// streaming request with the JSON codec, and a `StartRequest` message as protobuf JSON of
/// `process.proto` (E2B `spec/envd/process/process.proto` at the commit in `openapi/SOURCE.md`).
/// Returns every departure.
pub fn check_start(headers: &[(String, String)], body: &[u8]) -> Result<Start, Vec<String>> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let mut problems = Vec::new();
    // connect-go reads the first Content-Type value.
    if header("content-type") != Some("application/connect+json") {
        problems.push(format!(
            "Content-Type must be application/connect+json, got {:?}",
            header("content-type")
        ));
    }
    if header("connect-protocol-version") != Some("1") {
        problems.push("Connect-Protocol-Version must be 1".into());
    }
    let timeout_ms = match header("connect-timeout-ms") {
        None => None,
        Some(v) if !v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse().ok()
        }
        Some(v) => {
            problems.push(format!("Connect-Timeout-Ms must be 1-10 digits, got {v:?}"));
            None
        }
    };
    match header("authorization").and_then(|a| a.strip_prefix("Basic ")) {
        Some(b) => match base64::engine::general_purpose::STANDARD.decode(b) {
            Ok(user) if user.ends_with(b":") && user.len() > 1 => {}
            _ => problems.push("Authorization must be Basic base64(<user>:)".into()),
        },
        None => problems.push("Authorization: Basic <user> is missing (envd's user)".into()),
    }
    let message: Option<Value> = if body.len() < 5 {
        problems.push(format!(
            "the body is {} bytes, shorter than an envelope",
            body.len()
        ));
        None
    } else {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if body[0] != 0 {
            problems.push(format!(
                "the request envelope has flags {:#04x}, expected 0",
                body[0]
            ));
        }
        if body.len() != 5 + len {
            problems.push(format!(
                "one envelope of {len} bytes expected, the body has {} bytes after the header",
                body.len() - 5
            ));
            None
        } else {
            match serde_json::from_slice(&body[5..]) {
                Ok(v) => Some(v),
                Err(e) => {
                    problems.push(format!("the message is not JSON: {e}"));
                    None
                }
            }
        }
    };
    let mut start = Start {
        cmd: String::new(),
        args: Vec::new(),
        envs: BTreeMap::new(),
        timeout_ms,
    };
    if let Some(message) = message {
        check_start_request(&message, &mut start, &mut problems);
    }
    if problems.is_empty() {
        Ok(start)
    } else {
        Err(problems)
    }
}

/// `StartRequest { ProcessConfig process = 1; optional PTY pty = 2; optional string tag = 3;
/// optional bool stdin = 4; }` and `ProcessConfig { string cmd = 1; repeated string args = 2;
/// map<string, string> envs = 3; optional string cwd = 4; }`, in protobuf JSON (lowerCamelCase
/// names; this client never uses `pty`).
fn check_start_request(message: &Value, start: &mut Start, problems: &mut Vec<String>) {
    let Some(fields) = message.as_object() else {
        problems.push("StartRequest must be a JSON object".into());
        return;
    };
    for key in fields.keys() {
        if !["process", "pty", "tag", "stdin"].contains(&key.as_str()) {
            problems.push(format!("StartRequest has no field {key:?}"));
        }
    }
    if fields.contains_key("pty") {
        problems.push("a pty was requested: the exec must get separate stdout and stderr".into());
    }
    if let Some(tag) = fields.get("tag") {
        if !tag.is_string() {
            problems.push("StartRequest.tag must be a string".into());
        }
    }
    match fields.get("stdin") {
        Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) | None => problems
            .push("stdin must be false: envd's default gives the command an open pipe".into()),
        Some(_) => problems.push("StartRequest.stdin must be a boolean".into()),
    }
    let Some(process) = fields.get("process").and_then(Value::as_object) else {
        problems.push("StartRequest.process must be a ProcessConfig object".into());
        return;
    };
    for key in process.keys() {
        if !["cmd", "args", "envs", "cwd"].contains(&key.as_str()) {
            problems.push(format!("ProcessConfig has no field {key:?}"));
        }
    }
    match process.get("cmd").and_then(Value::as_str) {
        Some(cmd) if !cmd.is_empty() => start.cmd = cmd.to_string(),
        _ => problems.push("ProcessConfig.cmd must be a non-empty string".into()),
    }
    match process.get("args") {
        None => {}
        Some(Value::Array(args)) => {
            for arg in args {
                match arg.as_str() {
                    Some(a) => start.args.push(a.to_string()),
                    None => problems.push("ProcessConfig.args must hold strings only".into()),
                }
            }
        }
        Some(_) => problems.push("ProcessConfig.args must be an array".into()),
    }
    match process.get("envs") {
        None => {}
        Some(Value::Object(envs)) => {
            for (k, v) in envs {
                match v.as_str() {
                    Some(v) => {
                        start.envs.insert(k.clone(), v.to_string());
                    }
                    None => problems.push(format!("ProcessConfig.envs[{k:?}] must be a string")),
                }
            }
        }
        Some(_) => problems.push("ProcessConfig.envs must be an object of strings".into()),
    }
    if let Some(cwd) = process.get("cwd") {
        if !cwd.is_string() {
            problems.push("ProcessConfig.cwd must be a string".into());
        }
    }
}

/// The fake as a conformance fixture.
pub struct E2bFixture {
    pub fake: E2bFake,
}

impl E2bFixture {
    pub async fn new() -> Option<Arc<Self>> {
        Some(Arc::new(E2bFixture {
            fake: E2bFake::start().await,
        }))
    }
}

#[async_trait::async_trait]
impl reaper_testkit::conformance::provider::ProviderFixture for E2bFixture {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.fake.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        Ok(self.fake.create_sandbox().await)
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        "i0000000000000000000".into()
    }

    async fn break_destroy(&self, id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        self.fake.set_kill_fails(id, true);
        Ok(Some(Arc::new(self.fake.provider.clone())))
    }

    async fn heal_destroy(&self, id: &str) -> Result<(), String> {
        self.fake.set_kill_fails(id, false);
        Ok(())
    }
}
