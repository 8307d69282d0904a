//! A fake of Vercel's sandbox API (v2: named sandboxes and sessions) that runs commands for
//! real, checked against the stored OpenAPI document.
//!
//! Each fake named sandbox is a real `reaper_local` sandbox (a directory, real `sh`, real
//! processes) whose name is the local id; each start of it is a session `sbx_<n>`. A
//! run-command request starts the command in the background, the log stream and the
//! `wait=true` read answer when it ends, a kill aborts it (which kills its process group). A
//! session stop kills its commands; a persistent sandbox keeps its directory (its "snapshot")
//! and resumes as a new session on `resume=true` (answered `pending` once), a non-persistent
//! one loses it. A delete destroys the local sandbox. Every exchange goes through `reaper_fake_api`, which checks it
//! against `openapi/vercel-sandboxes-v2.openapi.json`.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use reaper_core::journal::shell_quote;
use reaper_core::secret::Secret;
use reaper_core::{Clock, ExecOptions, SandboxHandle, SandboxProvider};
use reaper_fake_api::{handler_fn, FakeApi, FakeRequest, FakeResponse, OpenApi, Recorded};
use reaper_http_sandbox::ReqwestTransport;
use reaper_local::{CreateOptions, LocalProviderOptions, LocalSandboxProvider, SystemClock};
use reaper_testkit::conformance::provider::ProviderFixture;
use reaper_vercel_sandbox::{Config, VercelSandboxProvider};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::AbortHandle;

pub const TOKEN: &str = "vercel-test-token-0123456789";
pub const TEAM: &str = "team_reaperTest0123";
/// The per-stream bound the conformance suite crosses.
pub const OUTPUT_LIMIT: usize = 4096;
/// The exit status the fake reports for a command it killed (128 + SIGKILL).
const KILLED: i64 = 137;

/// The stored v2 document (see `openapi/SOURCE.md`).
pub fn document() -> Arc<OpenApi> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/openapi/vercel-sandboxes-v2.openapi.json"
    );
    Arc::new(OpenApi::from_file(path).expect("a valid OpenAPI document"))
}

pub const PROJECT: &str = "prj_reaperTest0123";

/// A Vercel error body, as the recorded shapes describe it.
pub fn error_body(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

#[derive(Clone)]
struct Finished {
    stdout: String,
    stderr: String,
    exit_code: i64,
}

struct Command {
    session: String,
    name: String,
    args: Vec<String>,
    started_at: i64,
    done: watch::Sender<Option<Finished>>,
    task: AbortHandle,
}

impl Command {
    fn json(&self, id: &str) -> Value {
        let exit = self.done.borrow().as_ref().map(|f| f.exit_code);
        json!({
            "id": id, "name": self.name, "args": self.args, "cwd": "/vercel/sandbox",
            "sessionId": self.session, "exitCode": exit, "startedAt": self.started_at,
        })
    }

    /// Ends the command as killed, unless it already ended.
    fn kill(&self) {
        self.task.abort();
        self.done.send_if_modified(|state| {
            if state.is_some() {
                return false;
            }
            *state = Some(Finished {
                stdout: String::new(),
                stderr: String::new(),
                exit_code: KILLED,
            });
            true
        });
    }
}

/// A named sandbox: its current session and whether it survives a stop.
#[derive(Clone)]
struct Named {
    session: String,
    persistent: bool,
}

#[derive(Default)]
struct State {
    /// Sandbox name (the local sandbox's id) → its current session.
    sandboxes: Mutex<HashMap<String, Named>>,
    /// Session id → (sandbox name, status: `pending`, `running` or `stopped`).
    sessions: Mutex<HashMap<String, (String, &'static str)>>,
    /// How many sessions were started by a `resume=true` read.
    resumes: AtomicU64,
    next_session: AtomicU64,
    commands: Mutex<HashMap<String, Arc<Command>>>,
    /// Sandboxes whose delete or stop answers 500 (a teardown that failed).
    stop_fails: Mutex<HashSet<String>>,
    /// Sandboxes whose next log stream fails with Vercel's `error` entry.
    broken_streams: Mutex<HashSet<String>>,
    /// Sandboxes whose next log stream first sends this many empty stdout entries.
    flooded_streams: Mutex<HashMap<String, usize>>,
    next_command: AtomicU64,
}

/// The fake service: the API in front, the local sandboxes behind.
pub struct FakeVercel {
    pub api: FakeApi,
    pub local: LocalSandboxProvider,
    state: Arc<State>,
    _root: tempfile::TempDir,
}

impl FakeVercel {
    pub async fn start() -> FakeVercel {
        let root = tempfile::tempdir().expect("temp dir");
        let mut options = LocalProviderOptions::new(root.path().join("sandboxes"));
        // Vercel itself has no output bound; the provider's wrapper is what bounds a command.
        options.output_limit = 64 * 1024 * 1024;
        let local = LocalSandboxProvider::new(options);
        let state = Arc::new(State::default());
        let handler = {
            let (local, state) = (local.clone(), state.clone());
            handler_fn(move |req: FakeRequest| {
                let (local, state) = (local.clone(), state.clone());
                async move { handle(&local, &state, req).await }
            })
        };
        let api = FakeApi::start(document(), handler).await;
        FakeVercel {
            api,
            local,
            state,
            _root: root,
        }
    }

    /// A provider configured for this fake, over the native transport.
    pub fn provider(&self) -> VercelSandboxProvider {
        self.provider_with(|_| {})
    }

    pub fn provider_with(&self, adjust: impl FnOnce(&mut Config)) -> VercelSandboxProvider {
        let mut config = Config::new(Secret::new(TOKEN));
        config.base_url = self.api.url();
        config.team_id = Some(TEAM.into());
        config.project_id = Some(PROJECT.into());
        config.output_limit = OUTPUT_LIMIT;
        adjust(&mut config);
        VercelSandboxProvider::with_transport(
            config,
            Arc::new(ReqwestTransport::new().expect("reqwest client")),
        )
        .expect("a valid configuration")
    }

    /// A new running named sandbox, persistent as Vercel's are by default (Vercel's create is
    /// not part of what the provider uses). Returns its name.
    pub async fn create_sandbox(&self) -> String {
        self.create_sandbox_with(CreateOptions::default(), true)
            .await
    }

    pub async fn create_sandbox_with(&self, options: CreateOptions, persistent: bool) -> String {
        let sandbox = self
            .local
            .create(options)
            .await
            .expect("create a local sandbox");
        let name = sandbox.id().to_string();
        let session = self.state.start_session(&name);
        lock(&self.state.sandboxes).insert(
            name.clone(),
            Named {
                session,
                persistent,
            },
        );
        name
    }

    /// The current session of sandbox `name`.
    pub fn session_of(&self, name: &str) -> String {
        lock(&self.state.sandboxes)[name].session.clone()
    }

    /// Stops sandbox `name`'s session as Vercel does when it times out or idles.
    pub async fn auto_stop(&self, name: &str) {
        let session = self.session_of(name);
        let persistent = lock(&self.state.sandboxes)[name].persistent;
        stop_session(&self.local, &self.state, &session, persistent).await;
    }

    /// The status of sandbox `name`'s current session; `None` once it is deleted.
    pub fn status(&self, name: &str) -> Option<&'static str> {
        let session = lock(&self.state.sandboxes).get(name)?.session.clone();
        lock(&self.state.sessions).get(&session).map(|(_, s)| *s)
    }

    /// How many sessions a `resume=true` read started.
    pub fn resumes(&self) -> u64 {
        self.state.resumes.load(Ordering::Relaxed)
    }

    pub fn break_stop(&self, id: &str) {
        lock(&self.state.stop_fails).insert(id.to_string());
    }

    pub fn heal_stop(&self, id: &str) {
        lock(&self.state.stop_fails).remove(id);
    }

    /// The next log stream read in sandbox `id` starts with `entries` empty stdout entries: a
    /// stream whose envelopes outweigh its output.
    pub fn flood_log_stream(&self, id: &str, entries: usize) {
        lock(&self.state.flooded_streams).insert(id.to_string(), entries);
    }

    /// The next log stream read in sandbox `id` ends with an `error` entry after the output.
    pub fn break_log_stream(&self, id: &str) {
        lock(&self.state.broken_streams).insert(id.to_string());
    }

    /// The exchanges since the last [`FakeApi::clear_requests`], as `operationId`s.
    pub fn operations(&self) -> Vec<String> {
        self.api
            .requests()
            .iter()
            .map(|r: &Recorded| r.operation_id.clone().unwrap_or_else(|| "?".into()))
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_found(what: &str, id: &str) -> FakeResponse {
    FakeResponse::json(
        404,
        &error_body("not_found", &format!("{what} not found: {id}")),
    )
}

fn stopped() -> FakeResponse {
    FakeResponse::json(
        410,
        &error_body(
            "sandbox_stopped",
            "Sandbox has stopped execution and is no longer available",
        ),
    )
}

fn session_json(id: &str, name: &str, status: &str) -> Value {
    let now = SystemClock.now_ms();
    json!({
        "sourceSandboxName": name, "projectId": PROJECT, "id": id, "memory": 2048,
        "vcpus": 1, "region": "iad1", "runtime": "node22", "timeout": 300000,
        "status": status, "requestedAt": now, "cwd": "/vercel/sandbox",
        "createdAt": now, "updatedAt": now,
    })
}

fn named_json(name: &str, named: &Named, status: &str) -> Value {
    let now = SystemClock.now_ms();
    let status = if status == "running" || status == "pending" {
        "running"
    } else {
        "stopped"
    };
    json!({
        "name": name, "currentSessionId": named.session, "status": status,
        "statusUpdatedAt": now, "persistent": named.persistent,
        "createdAt": now, "updatedAt": now,
    })
}

impl State {
    /// A session's status as one read sees it: a resumed session reads `pending` once after
    /// the resume answer, then runs.
    fn observe(&self, session: &str) -> &'static str {
        let mut sessions = lock(&self.sessions);
        let Some(entry) = sessions.get_mut(session) else {
            return "stopped";
        };
        let seen = entry.1;
        if seen == "pending" {
            entry.1 = "running";
        }
        seen
    }

    fn start_session(&self, name: &str) -> String {
        let id = format!("sbx_{}", self.next_session.fetch_add(1, Ordering::Relaxed));
        lock(&self.sessions).insert(id.clone(), (name.to_string(), "running"));
        id
    }
}

/// Stops a session: its commands are killed; a non-persistent sandbox loses its files.
async fn stop_session(
    local: &LocalSandboxProvider,
    state: &State,
    session: &str,
    persistent: bool,
) {
    let name = {
        let mut sessions = lock(&state.sessions);
        let Some(entry) = sessions.get_mut(session) else {
            return;
        };
        entry.1 = "stopped";
        entry.0.clone()
    };
    let running: Vec<Arc<Command>> = lock(&state.commands)
        .values()
        .filter(|c| c.session == session)
        .cloned()
        .collect();
    for command in running {
        command.kill();
    }
    if !persistent {
        let _ = local.destroy(&name).await;
    }
}

async fn handle(
    local: &LocalSandboxProvider,
    state: &Arc<State>,
    req: FakeRequest,
) -> FakeResponse {
    if req.header("authorization") != Some(&format!("Bearer {TOKEN}")) {
        return FakeResponse::json(401, &error_body("forbidden", "Not authorized"));
    }
    if req.query("teamId") != Some(TEAM) {
        return FakeResponse::json(403, &error_body("forbidden", "Not a member of this team"));
    }
    let operation = req.operation_id.clone().unwrap_or_default();
    if let Some(name) = req.param("name").map(str::to_string) {
        if req.query("projectId") != Some(PROJECT) {
            return FakeResponse::json(404, &error_body("not_found", "Project not found"));
        }
        let Some(named) = lock(&state.sandboxes).get(&name).cloned() else {
            return not_found("Sandbox", &name);
        };
        if lock(&state.stop_fails).contains(&name) && operation == "deleteSandbox" {
            return FakeResponse::json(500, &error_body("internal_error", "delete failed"));
        }
        let status = lock(&state.sessions)[&named.session].1;
        return match operation.as_str() {
            "getNamedSandbox" => {
                let mut named = named;
                let mut resumed = false;
                if req.query("resume") == Some("true") && status == "stopped" && named.persistent {
                    // A new session from the snapshot, answered before it runs (`pending`).
                    named.session = state.start_session(&name);
                    lock(&state.sessions).get_mut(&named.session).unwrap().1 = "pending";
                    lock(&state.sandboxes).insert(name.clone(), named.clone());
                    state.resumes.fetch_add(1, Ordering::Relaxed);
                    resumed = true;
                }
                let status = if resumed {
                    "pending"
                } else {
                    state.observe(&named.session)
                };
                FakeResponse::json(
                    200,
                    &json!({
                        "sandbox": named_json(&name, &named, status),
                        "session": session_json(&named.session, &name, status),
                        "routes": [], "resumed": resumed,
                    }),
                )
            }
            "deleteSandbox" => {
                stop_session(local, state, &named.session, false).await;
                lock(&state.sandboxes).remove(&name);
                FakeResponse::json(
                    200,
                    &json!({"sandbox": named_json(&name, &named, "stopped")}),
                )
            }
            _ => not_found("Route", &operation),
        };
    }
    let session = req.param("sessionId").unwrap_or_default().to_string();
    let Some((name, status)) = lock(&state.sessions).get(&session).cloned() else {
        return not_found("Session", &session);
    };
    match (operation.as_str(), status) {
        ("getSession", _) => FakeResponse::json(
            200,
            &json!({"session": session_json(&session, &name, state.observe(&session)), "routes": []}),
        ),
        ("stopSession", "stopped") => stopped(),
        ("stopSession", _) => {
            if lock(&state.stop_fails).contains(&name) {
                return FakeResponse::json(500, &error_body("internal_error", "stop failed"));
            }
            let persistent = lock(&state.sandboxes)
                .get(&name)
                .is_some_and(|n| n.persistent);
            stop_session(local, state, &session, persistent).await;
            FakeResponse::json(
                200,
                &json!({"session": session_json(&session, &name, "stopped")}),
            )
        }
        (_, "stopped") => stopped(),
        ("runSessionCommand", _) => run_command(local, state, &session, &name, &req).await,
        (op, _) => {
            let cmd_id = req.param("cmdId").unwrap_or_default().to_string();
            let Some(command) = lock(&state.commands).get(&cmd_id).cloned() else {
                return not_found("Command", &cmd_id);
            };
            if command.session != session {
                return not_found("Command", &cmd_id);
            }
            match op {
                "getSessionCommand" => {
                    if req.query("wait") == Some("true") {
                        let mut done = command.done.subscribe();
                        let _ = done.wait_for(Option::is_some).await;
                    }
                    // Stopped while the caller waited: the session is gone.
                    if lock(&state.sessions).get(&session).map(|(_, s)| *s) == Some("stopped") {
                        return stopped();
                    }
                    FakeResponse::json(200, &json!({"command": command.json(&cmd_id)}))
                }
                "getSessionCommandLogs" => {
                    let broken = lock(&state.broken_streams).remove(&name);
                    let flood = lock(&state.flooded_streams).remove(&name).unwrap_or(0);
                    logs(command, broken, flood)
                }
                "killSessionCommand" => {
                    command.kill();
                    FakeResponse::json(200, &json!({"command": command.json(&cmd_id)}))
                }
                _ => not_found("Route", op),
            }
        }
    }
}

async fn run_command(
    local: &LocalSandboxProvider,
    state: &Arc<State>,
    session: &str,
    sandbox: &str,
    req: &FakeRequest,
) -> FakeResponse {
    let Ok(body) = req.json::<Value>() else {
        return FakeResponse::json(400, &error_body("bad_request", "invalid JSON"));
    };
    let name = body["command"].as_str().unwrap_or_default().to_string();
    let args: Vec<String> = body["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let Ok(Some(handle)) = local.open(sandbox).await else {
        return stopped();
    };
    // The program and its arguments, run as such: `exec` keeps it the leader of the command's
    // process group, so a kill reaches everything it started.
    let script = std::iter::once(&name)
        .chain(&args)
        .map(|word| shell_quote(word))
        .collect::<Vec<_>>()
        .join(" ");
    let script = format!("exec {script}");
    let (done, _) = watch::channel(None);
    let id = format!("cmd_{}", state.next_command.fetch_add(1, Ordering::Relaxed));
    let task = {
        let done = done.clone();
        tokio::spawn(async move {
            let result = handle
                .exec(
                    &script,
                    ExecOptions {
                        timeout_ms: 600_000,
                    },
                )
                .await;
            let finished = match result {
                Ok(out) => Finished {
                    stdout: out.stdout,
                    stderr: out.stderr,
                    exit_code: out.exit_code.into(),
                },
                Err(_) => Finished {
                    stdout: String::new(),
                    stderr: String::new(),
                    exit_code: KILLED,
                },
            };
            done.send_if_modified(|state| {
                if state.is_some() {
                    return false;
                }
                *state = Some(finished);
                true
            });
        })
    };
    let command = Arc::new(Command {
        session: session.to_string(),
        name,
        args,
        started_at: SystemClock.now_ms(),
        done,
        task: task.abort_handle(),
    });
    let body = json!({"command": command.json(&id)});
    lock(&state.commands).insert(id, command);
    FakeResponse::json(200, &body)
}

/// The log stream: headers at once, the entries once the command ends, in chunks of at most
/// 1,000 characters as a pipe reader would deliver them.
fn logs(command: Arc<Command>, broken: bool, flood: usize) -> FakeResponse {
    let (response, tx) = FakeResponse::channel(200, "application/x-ndjson");
    tokio::spawn(async move {
        let mut done = command.done.subscribe();
        let Ok(finished) = done.wait_for(Option::is_some).await.map(|f| f.clone()) else {
            return;
        };
        let Some(finished) = finished else { return };
        let empty = format!("{}\n", json!({"stream": "stdout", "data": ""}));
        for _ in 0..flood {
            if tx.send(empty.clone().into()).await.is_err() {
                return;
            }
        }
        for (stream, text) in [("stdout", &finished.stdout), ("stderr", &finished.stderr)] {
            let chars: Vec<char> = text.chars().collect();
            for piece in chars.chunks(1000) {
                let data: String = piece.iter().collect();
                let mut line = json!({"stream": stream, "data": data}).to_string();
                line.push('\n');
                if tx.send(line.into()).await.is_err() {
                    return;
                }
            }
        }
        if broken {
            let data = json!({
                "code": "sandbox_stream_closed",
                "message": "Sandbox stream was closed and is not accepting commands.",
            });
            let line = format!("{}\n", json!({"stream": "error", "data": data}));
            let _ = tx.send(line.into()).await;
        }
    });
    response
}

/// The provider conformance fixture: a fresh fake per case.
pub struct VercelFixture {
    pub fake: FakeVercel,
    provider: VercelSandboxProvider,
}

impl VercelFixture {
    pub async fn new() -> Option<Arc<Self>> {
        let fake = FakeVercel::start().await;
        let provider = fake.provider();
        Some(Arc::new(VercelFixture { fake, provider }))
    }
}

impl Drop for VercelFixture {
    fn drop(&mut self) {
        // A case that failed half-way still reports what broke the document.
        if !std::thread::panicking() {
            self.fake.api.assert_no_violations();
        }
    }
}

#[async_trait::async_trait]
impl ProviderFixture for VercelFixture {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        Ok(self.fake.create_sandbox().await)
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        "missing-sandbox-0000".into()
    }

    async fn break_destroy(&self, id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        self.fake.break_stop(id);
        Ok(Some(Arc::new(self.provider.clone())))
    }

    async fn heal_destroy(&self, id: &str) -> Result<(), String> {
        self.fake.heal_stop(id);
        Ok(())
    }
}
