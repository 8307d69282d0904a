//! What a provider's fake needs to run as its own process for tests in another language (the
//! Cloudflare Worker's, in workerd): one line of JSON on stdout saying how to reach it, a small
//! control API beside it, and a clean end when stdin closes or SIGTERM arrives.
//!
//! Shared by the three hosted providers' `fake_*` examples (each includes this file by path,
//! as it includes its crate's `tests/common` fake): only the [`Fake`] impl differs.
//!
//! The control API is served by `reaper_fake_api` too, against [`control_document`], so a test
//! that calls it wrongly gets a recorded violation and an answer saying what was wrong:
//!
//! - `POST /__test/sandboxes` → `{"id"}`: a new running sandbox (a real local one behind it).
//! - `GET /__test/sandboxes/{id}` → `{"id", "alive"}`: whether its backing sandbox still
//!   exists (`false` once the provider's destroy reached the fake).
//! - `POST /__test/sandboxes/{id}/agents` `{"runId", "command", "journalDir"?}` → `{"pid"}`:
//!   starts `command` under the core's journaled wrapper, detached (its journal is written to
//!   `journalDir`, default the sandbox's own; the exit sentinel follows when it ends).
//! - `GET /__test/requests` → `[{"server", "operation", "method", "path", "status"}]`: every
//!   request the fake's provider API received so far, in order per server.
//! - `GET /__test/violations` → `{"recorded", "unexpected"}`: every departure from the
//!   provider's documents recorded so far, and what the crate's own `assert_clean` makes of
//!   them (empty when the traffic is clean but for the statuses that crate tolerates).

#![allow(dead_code)]

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use reaper_fake_api::{handler_fn, FakeApi, FakeRequest, FakeResponse, OpenApi, Recorded};
use reaper_local::LocalSandbox;
use serde_json::{json, Value};

/// A provider's fake as the control API drives it.
#[async_trait::async_trait]
pub trait Fake: Send + Sync + 'static {
    /// The provider's name, as instance records and `REAPER_PROVIDERS` spell it.
    fn provider(&self) -> &'static str;
    /// The non-secret settings that point the reaper's provider at this fake.
    fn vars(&self) -> Value;
    /// The secret settings (API keys): a Worker binds them as secrets.
    fn secrets(&self) -> Value;
    /// A new running sandbox; its id.
    async fn create_sandbox(&self) -> String;
    /// The backing local sandbox of `id`, while it exists.
    async fn backing(&self, id: &str) -> Option<LocalSandbox>;
    /// Ends sandbox `id` and everything running in it (at shutdown).
    async fn destroy(&self, id: &str);
    /// Every request received so far, each with the server (`api`, a sandbox's `toolbox`, …)
    /// that received it.
    fn requests(&self, created: &[String]) -> Vec<(String, Recorded)>;
    /// Every recorded departure from the provider's documents.
    fn violations(&self, created: &[String]) -> Vec<String>;
    /// The crate's own check of the traffic (panics listing what it does not tolerate).
    fn assert_clean(&self);
    /// The name a request is counted under: its `operationId` when the document has one.
    fn operation(&self, request: &Recorded) -> String {
        request.operation_id.clone().unwrap_or_else(|| {
            let route = request.path_template.as_deref().unwrap_or(&request.path);
            format!("{} {route}", request.method)
        })
    }
}

/// The OpenAPI document of the control API.
pub fn control_document() -> Value {
    let error = json!({
        "description": "what was wrong",
        "content": {"application/json": {"schema": {
            "type": "object", "required": ["error"],
            "properties": {"error": {"type": "string"}}
        }}}
    });
    let id_param = json!([{
        "name": "id", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}
    }]);
    let ok = |schema: Value| json!({"description": "ok", "content": {"application/json": {"schema": schema}}});
    json!({
        "openapi": "3.0.3",
        "info": {"title": "provider fake control", "version": "1"},
        "paths": {
            "/__test/sandboxes": {"post": {
                "operationId": "createSandbox",
                "responses": {"200": ok(json!({
                    "type": "object", "required": ["id"],
                    "properties": {"id": {"type": "string"}}
                }))}
            }},
            "/__test/sandboxes/{id}": {"get": {
                "operationId": "getSandbox",
                "parameters": id_param,
                "responses": {
                    "200": ok(json!({
                        "type": "object", "required": ["id", "alive"],
                        "properties": {"id": {"type": "string"}, "alive": {"type": "boolean"}}
                    })),
                    "404": error,
                }
            }},
            "/__test/sandboxes/{id}/agents": {"post": {
                "operationId": "startAgent",
                "parameters": id_param,
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["runId", "command"],
                    "additionalProperties": false,
                    "properties": {
                        "runId": {"type": "string", "minLength": 1},
                        "command": {"type": "string", "minLength": 1},
                        "journalDir": {"type": "string", "pattern": "^/"}
                    }
                }}}},
                "responses": {
                    "200": ok(json!({
                        "type": "object", "required": ["pid"],
                        "properties": {"pid": {"type": "integer"}}
                    })),
                    "400": error,
                    "404": error,
                    "409": error,
                }
            }},
            "/__test/requests": {"get": {
                "operationId": "listRequests",
                "responses": {"200": ok(json!({
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["server", "operation", "method", "path"],
                        "properties": {
                            "server": {"type": "string"},
                            "operation": {"type": "string"},
                            "method": {"type": "string"},
                            "path": {"type": "string"},
                            "status": {"type": "integer", "nullable": true}
                        }
                    }
                }))}
            }},
            "/__test/violations": {"get": {
                "operationId": "listViolations",
                "responses": {"200": ok(json!({
                    "type": "object", "required": ["recorded", "unexpected"],
                    "properties": {
                        "recorded": {"type": "array", "items": {"type": "string"}},
                        "unexpected": {"type": "array", "items": {"type": "string"}}
                    }
                }))}
            }}
        }
    })
}

struct Control<F> {
    fake: F,
    /// The sandboxes made through the control API, in creation order.
    created: Mutex<Vec<String>>,
}

fn error(status: u16, message: impl Into<String>) -> FakeResponse {
    FakeResponse::json(status, &json!({"error": message.into()}))
}

impl<F: Fake> Control<F> {
    fn created(&self) -> Vec<String> {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn known(&self, id: &str) -> bool {
        self.created().iter().any(|c| c == id)
    }

    async fn handle(&self, req: FakeRequest) -> FakeResponse {
        let id = req.param("id").unwrap_or_default().to_string();
        match req.operation_id.as_deref() {
            Some("createSandbox") => {
                let id = self.fake.create_sandbox().await;
                self.created
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(id.clone());
                FakeResponse::json(200, &json!({ "id": id }))
            }
            Some("getSandbox") if self.known(&id) => {
                let alive = self.fake.backing(&id).await.is_some();
                FakeResponse::json(200, &json!({ "id": id, "alive": alive }))
            }
            Some("startAgent") if self.known(&id) => self.start_agent(&id, &req).await,
            Some("getSandbox" | "startAgent") => error(
                404,
                format!("no sandbox {id:?} was created through this control API"),
            ),
            Some("listRequests") => {
                let list: Vec<Value> = self
                    .fake
                    .requests(&self.created())
                    .into_iter()
                    .map(|(server, r)| {
                        json!({
                            "server": server,
                            "operation": self.fake.operation(&r),
                            "method": r.method,
                            "path": r.path,
                            "status": r.status,
                        })
                    })
                    .collect();
                FakeResponse::json(200, &Value::Array(list))
            }
            Some("listViolations") => FakeResponse::json(
                200,
                &json!({
                    "recorded": self.fake.violations(&self.created()),
                    "unexpected": self.unexpected(),
                }),
            ),
            _ => error(
                404,
                format!(
                    "{} {} is not part of the control API (see control_document)",
                    req.method, req.path
                ),
            ),
        }
    }

    async fn start_agent(&self, id: &str, req: &FakeRequest) -> FakeResponse {
        let body: Value = match req.json() {
            Ok(body) => body,
            Err(e) => return error(400, format!("the body must be JSON: {e}")),
        };
        let (Some(run_id), Some(command)) = (body["runId"].as_str(), body["command"].as_str())
        else {
            return error(400, "the body needs runId and command, both strings");
        };
        let Some(sandbox) = self.fake.backing(id).await else {
            return error(
                409,
                format!("sandbox {id} is gone: no agent can start in it"),
            );
        };
        match sandbox
            .start_agent(run_id, command, body["journalDir"].as_str())
            .await
        {
            Ok(agent) => FakeResponse::json(200, &json!({ "pid": agent.pid })),
            Err(e) => error(400, format!("cannot start the agent: {e}")),
        }
    }

    /// The crate's `assert_clean` verdict: empty when it passes, else its message.
    fn unexpected(&self) -> Vec<String> {
        QUIET_PANICS.with(|quiet| quiet.set(true));
        let verdict = std::panic::catch_unwind(AssertUnwindSafe(|| self.fake.assert_clean()));
        QUIET_PANICS.with(|quiet| quiet.set(false));
        match verdict {
            Ok(()) => Vec::new(),
            Err(payload) => vec![payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "assert_clean failed".into())],
        }
    }
}

thread_local! {
    /// Set while `assert_clean` runs to answer `/__test/violations`: its panic is the answer,
    /// not a crash, so it is not printed.
    static QUIET_PANICS: Cell<bool> = const { Cell::new(false) };
}

/// Serves `fake`: prints its line, then waits for stdin to close or SIGTERM, and destroys the
/// sandboxes it made (their agents with them) before returning.
pub async fn serve<F: Fake>(fake: F) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !QUIET_PANICS.with(Cell::get) {
            previous(info);
        }
    }));
    let control = Arc::new(Control {
        fake,
        created: Mutex::new(Vec::new()),
    });
    let doc = Arc::new(OpenApi::from_value(control_document()).expect("the control document"));
    let api = FakeApi::start(doc, {
        let control = control.clone();
        handler_fn(move |req| {
            let control = control.clone();
            async move { control.handle(req).await }
        })
    })
    .await;
    let line = json!({
        "provider": control.fake.provider(),
        "control": api.url(),
        "vars": control.fake.vars(),
        "secrets": control.fake.secrets(),
    });
    println!("{line}");

    wait_for_the_end().await;
    for id in control.created() {
        if control.fake.backing(&id).await.is_some() {
            control.fake.destroy(&id).await;
        }
    }
    let misuse = api.violations();
    if !misuse.is_empty() {
        eprintln!("the control API was called wrongly:\n{}", misuse.join("\n"));
    }
}

/// Returns when stdin reaches its end (the parent went away or closed it) or SIGTERM arrives.
async fn wait_for_the_end() {
    let (tx, stdin_closed) = tokio::sync::oneshot::channel::<()>();
    // A blocking read on its own thread: the runtime may be single-threaded.
    std::thread::spawn(move || {
        let mut sink = [0u8; 1024];
        let mut stdin = std::io::stdin().lock();
        while matches!(std::io::Read::read(&mut stdin, &mut sink), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = stdin_closed => {}
        _ = term.recv() => {}
    }
}
