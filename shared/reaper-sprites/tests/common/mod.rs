//! A fake of Sprites built from its published reference (`api/SOURCE.md`): REST lookup and delete
//! through `reaper-fake-api` (every exchange checked against `api/sprites-v1.openapi.yaml`), and
//! the WebSocket exec endpoint, whose upgrade request is checked against the same document.
//!
//! A sprite is a directory; an exec is a real `sh` process group in it, its stdout and stderr
//! streamed as binary messages (1, 2), its exit as message 3. A client that drops the socket
//! leaves the command running for `max_run_after_disconnect`, then it is killed, as the
//! reference describes. A delete kills the sprite's commands and removes the directory.
//!
//! One listener fronts both: a WebSocket upgrade is served here, anything else is passed through
//! byte for byte to the `FakeApi`, so the provider sees one base URL as it would with Sprites.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use reaper_core::secret::Secret;
use reaper_core::SandboxProvider;
use reaper_fake_api::{handler_fn, FakeApi, FakeRequest, FakeResponse, OpenApi};
use reaper_http_sandbox::ReqwestTransport;
use reaper_sprites::{Config, SpritesProvider};
use reaper_testkit::conformance::provider::ProviderFixture;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::Message;

pub const TOKEN: &str = "sprites-test-token-0123456789";
pub const OUTPUT_LIMIT: usize = 4096;

pub fn document() -> Arc<OpenApi> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/api/sprites-v1.openapi.yaml");
    Arc::new(OpenApi::from_file(path).expect("a valid OpenAPI document"))
}

#[derive(Default)]
pub struct State {
    /// Sprite name → its directory.
    sprites: Mutex<HashMap<String, PathBuf>>,
    /// Sprite name → process groups of its running commands.
    running: Mutex<HashMap<String, HashSet<i32>>>,
    /// Sprites whose delete answers 500 and leaves them live.
    delete_fails: Mutex<HashSet<String>>,
    /// What broke the document on the exec endpoint.
    pub ws_violations: Mutex<Vec<String>>,
    /// Exec upgrades seen (answered or refused).
    pub execs: AtomicU64,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn kill_group(pgid: i32) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

fn not_found() -> Value {
    json!({"error": "sprite not found"})
}

pub struct FakeSprites {
    pub api: FakeApi,
    pub state: Arc<State>,
    doc: Arc<OpenApi>,
    addr: std::net::SocketAddr,
    root: tempfile::TempDir,
}

impl FakeSprites {
    pub async fn start() -> FakeSprites {
        let doc = document();
        let state = Arc::new(State::default());
        let handler = {
            let state = state.clone();
            handler_fn(move |req: FakeRequest| {
                let state = state.clone();
                async move { rest(&state, req) }
            })
        };
        let api = FakeApi::start(doc.clone(), handler).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (backend, st, d) = (api.addr(), state.clone(), doc.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (st, d) = (st.clone(), d.clone());
                tokio::spawn(async move { front(stream, backend, st, d).await });
            }
        });
        FakeSprites {
            api,
            state,
            doc,
            addr,
            root: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn provider(&self) -> SpritesProvider {
        self.provider_with(|_| {})
    }

    pub fn provider_with(&self, adjust: impl FnOnce(&mut Config)) -> SpritesProvider {
        let mut config = Config::new(Secret::new(TOKEN));
        config.base_url = self.url();
        config.output_limit = OUTPUT_LIMIT;
        adjust(&mut config);
        SpritesProvider::with_transport(
            config,
            Arc::new(ReqwestTransport::new().expect("reqwest client")),
        )
        .expect("a valid configuration")
    }

    /// A new sprite (Sprites' create is not what the provider uses). Returns its name.
    pub fn create_sprite(&self) -> String {
        let n = self.state.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("reaper-sprite-{n}");
        let dir = self.root.path().join(&name);
        std::fs::create_dir_all(&dir).expect("sprite dir");
        lock(&self.state.sprites).insert(name.clone(), dir);
        name
    }

    pub fn exists(&self, name: &str) -> bool {
        lock(&self.state.sprites).contains_key(name)
    }

    pub fn assert_no_violations(&self) {
        self.api.assert_no_violations();
        let ws = lock(&self.state.ws_violations);
        assert!(ws.is_empty(), "exec requests broke the document: {ws:#?}");
    }
}

fn sprite_json(name: &str) -> Value {
    json!({
        "id": "01234567-89ab-cdef-0123-456789abcdef", "name": name, "organization": "reaper-test",
        "url": format!("https://{name}.sprites.app"), "url_settings": {"auth": "sprite"},
        "status": "cold", "created_at": "2026-12-04T10:00:00Z", "updated_at": "2026-12-04T10:00:00Z",
    })
}

fn rest(state: &State, req: FakeRequest) -> FakeResponse {
    let name = req.param("name").unwrap_or_default().to_string();
    match req.operation_id.as_deref() {
        Some("getSprite") if lock(&state.sprites).contains_key(&name) => {
            FakeResponse::json(200, &sprite_json(&name))
        }
        Some("getSprite") => FakeResponse::json(404, &not_found()),
        Some("deleteSprite") => {
            if lock(&state.delete_fails).contains(&name) {
                return FakeResponse::json(500, &json!({"error": "delete failed"}));
            }
            let Some(dir) = lock(&state.sprites).remove(&name) else {
                return FakeResponse::json(404, &not_found());
            };
            for pgid in lock(&state.running).remove(&name).unwrap_or_default() {
                kill_group(pgid);
            }
            let _ = std::fs::remove_dir_all(dir);
            FakeResponse::empty(204)
        }
        _ => FakeResponse::json(404, &json!({"error": "no route"})),
    }
}

/// Reads the request head without consuming it: a WebSocket upgrade is served here, anything
/// else is passed through to the REST fake.
async fn front(
    stream: TcpStream,
    backend: std::net::SocketAddr,
    state: Arc<State>,
    doc: Arc<OpenApi>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let head = loop {
        let Ok(n) = stream.peek(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        let text = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        if text.contains("\r\n\r\n") || n == buf.len() {
            break text;
        }
        tokio::task::yield_now().await;
    };
    if head.contains("upgrade: websocket") {
        exec(stream, state, doc).await;
    } else if let Ok(mut upstream) = TcpStream::connect(backend).await {
        let mut stream = stream;
        let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
    }
}

/// An accepted exec upgrade: the sprite's name, its directory, the query pairs.
type Accepted = Option<(String, PathBuf, Vec<(String, String)>)>;

// The handshake callback's signature (and its large error type) is tungstenite's.
#[allow(clippy::result_large_err)]
async fn exec(stream: TcpStream, state: Arc<State>, doc: Arc<OpenApi>) {
    state.execs.fetch_add(1, Ordering::Relaxed);
    let accepted: Arc<Mutex<Accepted>> = Arc::default();
    let callback = {
        let (state, doc, accepted) = (state.clone(), doc.clone(), accepted.clone());
        move |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
            let uri = request.uri().to_string();
            let headers: Vec<(String, String)> = request
                .headers()
                .iter()
                .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
                .collect();
            let op = match doc.check_request("GET", &uri, &headers, b"") {
                Ok(op) => op,
                Err(v) => {
                    lock(&state.ws_violations).extend(v);
                    return Err(refuse(400, json!({"error": "bad exec request"})));
                }
            };
            let name = op
                .path_params
                .iter()
                .find(|(k, _)| k.as_str() == "name")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let Some(dir) = lock(&state.sprites).get(&name).cloned() else {
                check(&doc, &op, 404, &state);
                return Err(refuse(404, not_found()));
            };
            check(&doc, &op, 101, &state);
            let query = uri.split_once('?').map(|(_, q)| q).unwrap_or("");
            let pairs = form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect();
            *lock(&accepted) = Some((name, dir, pairs));
            Ok(response)
        }
    };
    let Ok(mut socket) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    let Some((name, dir, pairs)) = lock(&accepted).take() else {
        return;
    };
    let cmd: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "cmd")
        .map(|(_, v)| v.clone())
        .collect();
    let linger = pairs
        .iter()
        .find(|(k, _)| k == "max_run_after_disconnect")
        .and_then(|(_, v)| v.strip_suffix('s')?.parse::<u64>().ok())
        .unwrap_or(10);
    let stdin_on = pairs.iter().any(|(k, v)| k == "stdin" && v == "true");
    let mut command = tokio::process::Command::new(&cmd[0]);
    command
        .args(&cmd[1..])
        .current_dir(&dir)
        .stdin(if stdin_on {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let Ok(mut child) = command.spawn() else {
        let _ = socket.send(Message::Binary(vec![3u8, 127].into())).await;
        return;
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    lock(&state.running)
        .entry(name.clone())
        .or_default()
        .insert(pgid);
    let info = json!({"type": "session_info", "session_id": pgid, "command": cmd[0], "created": 1764842400, "is_owner": true, "tty": false});
    let _ = socket.send(Message::Text(info.to_string().into())).await;
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (mut ob, mut eb) = (vec![0u8; 8192], vec![0u8; 8192]);
    let (mut out_open, mut err_open) = (true, true);
    let mut connected = true;
    while out_open || err_open {
        tokio::select! {
            n = out.read(&mut ob), if out_open => match n {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => connected &= send(&mut socket, 1, &ob[..n]).await,
            },
            n = err.read(&mut eb), if err_open => match n {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => connected &= send(&mut socket, 2, &eb[..n]).await,
            },
            m = socket.next(), if connected => {
                if !matches!(m, Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Text(_) | Message::Binary(_)))) {
                    connected = false;
                }
            },
        }
        if !connected {
            // The reference: a command outlives its client by max_run_after_disconnect.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(linger)).await;
                kill_group(pgid);
            });
            break;
        }
    }
    let status = child.wait().await.ok();
    if let Some(set) = lock(&state.running).get_mut(&name) {
        set.remove(&pgid);
    }
    if connected {
        use std::os::unix::process::ExitStatusExt;
        let code = status.map_or(255, |s| {
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
        });
        let _ = socket
            .send(Message::Binary(vec![3u8, (code & 0xff) as u8].into()))
            .await;
        let _ = socket.close(None).await;
    }
    // Drain so the pipes' writer never blocks (nothing more is sent).
    let _ = out.read_to_end(&mut Vec::new()).await;
    let _ = err.read_to_end(&mut Vec::new()).await;
}

async fn send(
    socket: &mut tokio_tungstenite::WebSocketStream<TcpStream>,
    stream: u8,
    data: &[u8],
) -> bool {
    let mut frame = Vec::with_capacity(data.len() + 1);
    frame.push(stream);
    frame.extend_from_slice(data);
    socket.send(Message::Binary(frame.into())).await.is_ok()
}

fn check(doc: &OpenApi, op: &reaper_fake_api::OperationRef, status: u16, state: &State) {
    let headers = if status == 101 {
        vec![]
    } else {
        vec![("content-type".to_string(), "application/json".to_string())]
    };
    let body = if status == 101 {
        Vec::new()
    } else {
        not_found().to_string().into_bytes()
    };
    if let Err(v) = doc.check_response(op, status, &headers, &body) {
        lock(&state.ws_violations).extend(v);
    }
}

fn refuse(status: u16, body: Value) -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(body.to_string()));
    *response.status_mut() =
        tokio_tungstenite::tungstenite::http::StatusCode::from_u16(status).unwrap();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}

/// The provider conformance suite's fixture.
pub struct SpritesFixture {
    pub fake: FakeSprites,
    provider: SpritesProvider,
}

impl SpritesFixture {
    pub async fn new() -> Option<Arc<Self>> {
        let fake = FakeSprites::start().await;
        let provider = fake.provider();
        Some(Arc::new(SpritesFixture { fake, provider }))
    }
}

impl Drop for SpritesFixture {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.fake.assert_no_violations();
        }
    }
}

#[async_trait::async_trait]
impl ProviderFixture for SpritesFixture {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        Ok(self.fake.create_sprite())
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        "reaper-sprite-never-created".into()
    }

    async fn break_destroy(&self, id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        lock(&self.fake.state.delete_fails).insert(id.to_string());
        Ok(Some(Arc::new(self.fake.provider())))
    }

    async fn heal_destroy(&self, id: &str) -> Result<(), String> {
        lock(&self.fake.state.delete_fails).remove(id);
        Ok(())
    }
}
