//! A fake Daytona: the REST API and each sandbox's toolbox, served by reaper-fake-api (every
//! request and answer checked against the stored OpenAPI documents), with real sandboxes
//! behind them: each is a reaper-local sandbox, and an exec runs the way Daytona's daemon runs
//! it (the command text piped into a shell, stdout and stderr into one buffer, the timeout in
//! whole seconds killing the process group, then a 408).
//!
//! Error answers the documents do not declare are built by [`recorded`] from the shapes
//! recorded in `openapi/SOURCE.md`, and only those statuses are tolerated as undeclared
//! ([`assert_clean`]).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use reaper_core::journal::shell_quote;
use reaper_core::secret::Secret;
use reaper_core::{ExecOptions, SandboxError, SandboxHandle, SandboxProvider};
use reaper_daytona::{DaytonaConfig, DaytonaProvider};
use reaper_fake_api::{handler_fn, FakeApi, FakeRequest, FakeResponse, OpenApi};
use reaper_local::{CreateOptions, LocalProviderOptions, LocalSandbox, LocalSandboxProvider};
use serde_json::{json, Value};

/// The key the fake accepts.
pub const KEY: &str = "dtn_fake-0123456789abcdef";
/// The suite's small output bound.
pub const OUTPUT_LIMIT: usize = 4096;
/// An id in Daytona's syntax that names no sandbox.
pub const MISSING_ID: &str = "00000000-0000-4000-8000-000000000000";
/// The statuses the fake answers that the documents do not declare (each from a recorded
/// shape): 401 bad key, 404 no such sandbox, 408 exec timeout, 409 state change in progress.
pub const RECORDED_STATUSES: [u16; 4] = [401, 404, 408, 409];

const API_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/daytona-api.yaml");
const TOOLBOX_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/daytona-toolbox.yaml");

/// One fake sandbox.
struct Entry {
    local: LocalSandbox,
    /// `SandboxState` as the API reports it.
    state: String,
    desired_state: String,
    /// This sandbox's toolbox, served under `/{id}` as the document's description says
    /// (`{toolboxProxyUrl}/{sandboxId}/…`).
    toolbox: Arc<FakeApi>,
    /// Deletes answer 409 (a state change in progress) while set.
    refuse_delete: bool,
}

struct World {
    local: LocalSandboxProvider,
    toolbox_doc: Value,
    sandboxes: Mutex<BTreeMap<String, Entry>>,
}

/// The fake Daytona and a provider pointed at it.
pub struct FakeDaytona {
    pub api: FakeApi,
    pub provider: DaytonaProvider,
    world: Arc<World>,
    _root: tempfile::TempDir,
}

impl FakeDaytona {
    pub async fn start() -> FakeDaytona {
        FakeDaytona::start_with(|_| {}).await
    }

    /// Starts it with the provider's config adjusted by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut DaytonaConfig)) -> FakeDaytona {
        let root = tempfile::tempdir().expect("temp dir");
        let mut options = LocalProviderOptions::new(root.path().join("sandboxes"));
        // Daytona's daemon returns whatever the command printed: the bound is the provider's.
        options.output_limit = 64 * 1024 * 1024;
        let toolbox_text = std::fs::read_to_string(TOOLBOX_DOC).expect("the toolbox document");
        let world = Arc::new(World {
            local: LocalSandboxProvider::new(options),
            toolbox_doc: yaml_to_json(&toolbox_text),
            sandboxes: Mutex::new(BTreeMap::new()),
        });
        let doc = Arc::new(OpenApi::from_file(API_DOC).expect("the API document loads"));
        let api = FakeApi::start(doc, {
            let world = world.clone();
            handler_fn(move |req| {
                let world = world.clone();
                async move { world.api(req).await }
            })
        })
        .await;
        let mut config = DaytonaConfig::new(Secret::new(KEY));
        config.api_url = api.url();
        config.output_limit = OUTPUT_LIMIT;
        tweak(&mut config);
        let provider = DaytonaProvider::new(config).expect("a valid config");
        FakeDaytona {
            api,
            provider,
            world,
            _root: root,
        }
    }

    /// Creates a started sandbox (as Daytona's create would) and returns its id.
    pub async fn create(&self) -> String {
        let local = self
            .world
            .local
            .create(CreateOptions::default())
            .await
            .expect("a local sandbox");
        let id = local.id().to_string();
        let mut doc = self.world.toolbox_doc.clone();
        doc["servers"] = json!([{ "url": format!("/{id}") }]);
        let doc = Arc::new(OpenApi::from_value(doc).expect("the toolbox document loads"));
        let toolbox = FakeApi::start(doc, {
            let (world, id) = (self.world.clone(), id.clone());
            handler_fn(move |req| {
                let (world, id) = (world.clone(), id.clone());
                async move { world.toolbox(&id, req).await }
            })
        })
        .await;
        self.world.sandboxes.lock().unwrap().insert(
            id.clone(),
            Entry {
                local,
                state: "started".into(),
                desired_state: "started".into(),
                toolbox: Arc::new(toolbox),
                refuse_delete: false,
            },
        );
        id
    }

    /// The sandbox's directory on this machine (its journals live under it).
    pub fn local(&self, id: &str) -> LocalSandbox {
        self.world.sandboxes.lock().unwrap()[id].local.clone()
    }

    /// Sets the state the API reports (`stopped`, `archived`, …) without touching processes.
    pub fn set_state(&self, id: &str, state: &str, desired: &str) {
        let mut sandboxes = self.world.sandboxes.lock().unwrap();
        let entry = sandboxes.get_mut(id).expect("a fake sandbox");
        entry.state = state.into();
        entry.desired_state = desired.into();
    }

    pub fn refuse_delete(&self, id: &str, refuse: bool) {
        if let Some(entry) = self.world.sandboxes.lock().unwrap().get_mut(id) {
            entry.refuse_delete = refuse;
        }
    }

    /// The toolbox fake of a sandbox (for its request log and violations).
    pub fn toolbox(&self, id: &str) -> Arc<FakeApi> {
        self.world.sandboxes.lock().unwrap()[id].toolbox.clone()
    }

    /// Every toolbox fake started so far.
    fn toolboxes(&self) -> Vec<Arc<FakeApi>> {
        let sandboxes = self.world.sandboxes.lock().unwrap();
        sandboxes.values().map(|e| e.toolbox.clone()).collect()
    }

    /// Requests received by the API and every toolbox, by operation.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        let mut logs = vec![self.api.requests()];
        logs.extend(self.toolboxes().iter().map(|t| t.requests()));
        for log in logs {
            for r in log {
                match r.operation_id.as_deref() {
                    Some("getSandbox") => counts.get_sandbox += 1,
                    Some("deleteSandbox") => counts.delete_sandbox += 1,
                    Some("startSandbox") => counts.start_sandbox += 1,
                    Some("stopSandbox") => counts.stop_sandbox += 1,
                    Some("ExecuteCommand") => counts.execute += 1,
                    _ => counts.other += 1,
                }
            }
        }
        counts
    }

    /// No document was broken, except by the recorded error shapes (see [`assert_clean`]).
    pub fn assert_clean(&self) {
        assert_clean(&self.api);
        for toolbox in self.toolboxes() {
            assert_clean(&toolbox);
        }
    }
}

/// Requests per operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub get_sandbox: usize,
    pub delete_sandbox: usize,
    pub start_sandbox: usize,
    pub stop_sandbox: usize,
    pub execute: usize,
    pub other: usize,
}

impl Counts {
    pub fn since(&self, before: &Counts) -> Counts {
        Counts {
            get_sandbox: self.get_sandbox - before.get_sandbox,
            delete_sandbox: self.delete_sandbox - before.delete_sandbox,
            start_sandbox: self.start_sandbox - before.start_sandbox,
            stop_sandbox: self.stop_sandbox - before.stop_sandbox,
            execute: self.execute - before.execute,
            other: self.other - before.other,
        }
    }

    pub fn total(&self) -> usize {
        self.get_sandbox
            + self.delete_sandbox
            + self.start_sandbox
            + self.stop_sandbox
            + self.execute
            + self.other
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} request(s): {} GET /sandbox/{{id}}, {} DELETE /sandbox/{{id}}, {} POST \
             /sandbox/{{id}}/start, {} POST /sandbox/{{id}}/stop, {} POST …/process/execute",
            self.total(),
            self.get_sandbox,
            self.delete_sandbox,
            self.start_sandbox,
            self.stop_sandbox,
            self.execute
        )
    }
}

/// Panics on any violation of the fake's document other than an undeclared status among
/// [`RECORDED_STATUSES`] (the documents declare only success answers; those errors are built
/// from the recorded shapes). Every request, and every success answer, must fit the document.
#[track_caller]
pub fn assert_clean(fake: &FakeApi) {
    let unexpected: Vec<String> = fake
        .violations()
        .into_iter()
        .filter(|v| {
            !(v.starts_with("response ")
                && RECORDED_STATUSES.iter().any(|s| {
                    v.contains(&format!("status {s} is not a declared response"))
                        && v.matches(" is not a declared response").count() == 1
                }))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "the traffic broke the OpenAPI document ({} violation(s)):\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
}

/// An error answer in the recorded shape: the API's (NestJS) filter, or the Go side's
/// (daemon, proxy) middleware.
pub fn recorded(side: Side, status: u16, path: &str, message: &str) -> FakeResponse {
    let timestamp = "2026-06-23T12:00:00.000Z";
    let body = match side {
        Side::Api => json!({
            "path": path,
            "timestamp": timestamp,
            "statusCode": status,
            "error": reason(status),
            "message": message,
        }),
        Side::Toolbox => json!({
            "statusCode": status,
            "message": message,
            "code": reason(status).to_uppercase().replace(' ', "_"),
            "timestamp": timestamp,
            "path": path,
            "method": "POST",
        }),
    };
    FakeResponse::json(status, &body)
}

#[derive(Debug, Clone, Copy)]
pub enum Side {
    Api,
    Toolbox,
}

fn reason(status: u16) -> &'static str {
    match status {
        401 => "Unauthorized",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn authorized(req: &FakeRequest) -> bool {
    req.header("authorization") == Some(&format!("Bearer {KEY}"))
}

impl World {
    fn sandbox_json(&self, id: &str, entry: &Entry) -> Value {
        json!({
            "id": id,
            "organizationId": "org-fake",
            "name": id,
            "user": "daytona",
            "env": {},
            "labels": {},
            "public": false,
            "networkBlockAll": false,
            "target": "us",
            "cpu": 1,
            "gpu": 0,
            "memory": 1,
            "disk": 3,
            "state": entry.state,
            "desiredState": entry.desired_state,
            "toolboxProxyUrl": entry.toolbox.origin(),
        })
    }

    async fn api(&self, req: FakeRequest) -> FakeResponse {
        if !authorized(&req) {
            return recorded(Side::Api, 401, &req.path, "Unauthorized");
        }
        let id = req.param("sandboxIdOrName").unwrap_or_default().to_string();
        let not_found = || {
            recorded(
                Side::Api,
                404,
                &req.path,
                &format!("Sandbox with ID or name {id} not found"),
            )
        };
        match req.operation_id.as_deref() {
            Some("getSandbox") => {
                let mut sandboxes = self.sandboxes.lock().unwrap();
                match sandboxes.get_mut(&id) {
                    // Destroyed sandboxes are filtered out of lookups (`findOneByIdOrName`).
                    Some(entry) if entry.state != "destroyed" => {
                        let answer = FakeResponse::json(200, &self.sandbox_json(&id, entry));
                        // A start is under way: the runner reports it started by the next look.
                        if entry.state == "starting" {
                            entry.state = "started".into();
                        }
                        answer
                    }
                    _ => not_found(),
                }
            }
            // `startSandbox` and `stopSandbox` answer the sandbox as it is then: a start is
            // `starting` until the runner reports back (the next lookup here), a stop is done
            // at once (the files stay, the processes end; the fake's processes are left, as
            // nothing in a stopped sandbox is reachable through the toolbox).
            Some(op @ ("startSandbox" | "stopSandbox")) => {
                let mut sandboxes = self.sandboxes.lock().unwrap();
                match sandboxes.get_mut(&id) {
                    Some(entry) if entry.state != "destroyed" => {
                        let (state, desired) = if op == "startSandbox" {
                            match entry.state.as_str() {
                                "started" => ("started", "started"),
                                _ => ("starting", "started"),
                            }
                        } else {
                            ("stopped", "stopped")
                        };
                        entry.state = state.into();
                        entry.desired_state = desired.into();
                        FakeResponse::json(200, &self.sandbox_json(&id, entry))
                    }
                    _ => not_found(),
                }
            }
            Some("deleteSandbox") => {
                let local = {
                    let sandboxes = self.sandboxes.lock().unwrap();
                    match sandboxes.get(&id) {
                        Some(entry) if entry.state != "destroyed" => {
                            if entry.refuse_delete {
                                return recorded(
                                    Side::Api,
                                    409,
                                    &req.path,
                                    "Sandbox state change in progress",
                                );
                            }
                            entry.local.clone()
                        }
                        _ => return not_found(),
                    }
                };
                // The runner's teardown, done at once: the processes end with the sandbox.
                if let Err(e) = self.local.destroy(local.id()).await {
                    return FakeResponse::json(
                        500,
                        &json!({"statusCode": 500, "message": e.to_string()}),
                    );
                }
                let mut sandboxes = self.sandboxes.lock().unwrap();
                let entry = sandboxes.get_mut(&id).expect("the entry");
                entry.desired_state = "destroyed".into();
                let answer = self.sandbox_json(&id, entry);
                entry.state = "destroyed".into();
                FakeResponse::json(200, &answer)
            }
            _ => recorded(
                Side::Api,
                404,
                &req.path,
                &format!("Cannot {} {}", req.method, req.path),
            ),
        }
    }

    /// `POST /process/execute` as the daemon runs it (`apps/daemon/pkg/toolbox/process/
    /// execute.go`): the text into the shell's stdin, both streams into one buffer, the timeout
    /// killing the process group and answering 408, `exitCode: -1` when waiting failed.
    async fn toolbox(&self, id: &str, req: FakeRequest) -> FakeResponse {
        if !authorized(&req) {
            return recorded(Side::Toolbox, 401, &req.path, "unauthorized");
        }
        if req.operation_id.as_deref() != Some("ExecuteCommand") {
            return recorded(Side::Toolbox, 404, &req.path, "not found");
        }
        let local = {
            let sandboxes = self.sandboxes.lock().unwrap();
            match sandboxes.get(id) {
                Some(entry) if entry.state == "started" => entry.local.clone(),
                _ => return recorded(Side::Toolbox, 404, &req.path, "sandbox not found"),
            }
        };
        let request: Value = match req.json() {
            Ok(v) => v,
            Err(e) => {
                return FakeResponse::json(
                    400,
                    &json!({"statusCode": 400, "message": e.to_string()}),
                )
            }
        };
        let command = request["command"].as_str().unwrap_or_default();
        // No timeout, or zero, is none at all: an hour stands for it here.
        let timeout_s = request["timeout"]
            .as_u64()
            .filter(|t| *t > 0)
            .unwrap_or(3600);
        let daemon = format!(
            "printf '%s' {} | {} 2>&1",
            shell_quote(command),
            daemon_shell()
        );
        let ran = local
            .exec(
                &daemon,
                ExecOptions {
                    timeout_ms: timeout_s * 1000,
                },
            )
            .await;
        match ran {
            Ok(out) => FakeResponse::json(
                200,
                &json!({"result": out.stdout, "exitCode": out.exit_code}),
            ),
            Err(SandboxError::Timeout(_)) => recorded(
                Side::Toolbox,
                408,
                &req.path,
                "request timeout: command execution timeout",
            ),
            Err(SandboxError::NotFound(_)) => {
                recorded(Side::Toolbox, 404, &req.path, "sandbox not found")
            }
            Err(e) => FakeResponse::json(200, &json!({"result": e.to_string(), "exitCode": -1})),
        }
    }
}

/// The shell the daemon pipes commands into (`apps/daemon/pkg/common/get_shell.go`): zsh,
/// else bash, else sh, as `/etc/shells` lists them.
fn daemon_shell() -> &'static str {
    let listed = std::fs::read_to_string("/etc/shells").unwrap_or_default();
    ["/usr/bin/zsh", "/bin/zsh", "/usr/bin/bash", "/bin/bash"]
        .into_iter()
        .find(|shell| listed.lines().any(|l| l.trim() == *shell))
        .unwrap_or("sh")
}

/// The YAML document as JSON (the toolbox fakes each serve it under their own base path).
fn yaml_to_json(text: &str) -> Value {
    serde_norway::from_str(text).expect("the toolbox document is YAML")
}

/// A provider (with the fake's key) whose destroy of `id` fails until healed.
pub fn provider(fake: &FakeDaytona) -> Arc<dyn SandboxProvider> {
    Arc::new(fake.provider.clone())
}

/// A handle of sandbox `id` through the provider.
pub async fn handle(fake: &FakeDaytona, id: &str) -> Arc<dyn SandboxHandle> {
    fake.provider
        .resume(id)
        .await
        .expect("resume")
        .expect("a live sandbox")
}
