//! The world a test runs the function in: DynamoDB Local (required: never skipped), a real
//! `reaper-sandboxd` with its own root and token, a fresh table per test, and the function's
//! binary started the two ways Vercel starts it — as `vercel dev` does (`VERCEL_DEV=1`,
//! `VERCEL_DEV_PORT`, wait for `Dev server listening`), and under an emulation of the production
//! IPC bridge (`VERCEL_IPC_PATH`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::{
    NewRun, RunExitProbe, RunPatch, RunRecord, RunStore, SandboxHandle, SandboxInstanceRecord,
    SandboxInstanceStore, SandboxProvider,
};
use reaper_dynamodb::{DynamoOptions, DynamoStore};
use reaper_http_sandbox::api::CreateSandboxRequest;
use reaper_http_sandbox::{HttpProviderConfig, HttpSandbox, HttpSandboxProvider};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

pub const SCHEDULE: &str = "*/5 * * * *";
pub const PATH: &str = "/api/reap";
/// Long enough that a finished run is finalized, not expired.
pub const DETACHED_TTL: &str = "1h";

/// The function's binary: `REAPER_VERCEL_BIN` (build-check.sh points it at the `vercel build`
/// output) or the one cargo built for these tests.
pub fn function_bin() -> PathBuf {
    std::env::var_os("REAPER_VERCEL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_reaper-vercel")))
}

/// The DynamoDB Local endpoint. Missing is a failure with instructions, never a skip.
pub fn endpoint() -> String {
    std::env::var("REAPER_DYNAMODB_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "reaper-vercel tests need Amazon DynamoDB Local and neither \
                 REAPER_DYNAMODB_ENDPOINT nor AWS_ENDPOINT_URL_DYNAMODB is set. Start it with \
                 `shared/reaper-dynamodb/emulator/start.sh /tmp/ddb.env && set -a && . \
                 /tmp/ddb.env && set +a`, run the tests, then \
                 `shared/reaper-dynamodb/emulator/stop.sh /tmp/ddb.env`"
            )
        })
}

/// `reaper-sandboxd`: `REAPER_SANDBOXD_BIN`, else built once per test process with the cargo
/// that runs these tests (cargo does not build another package's binary for an integration
/// test).
pub fn sandboxd_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("REAPER_SANDBOXD_BIN") {
            return PathBuf::from(bin);
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let output = std::process::Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "reaper-sandboxd",
                "--bin",
                "reaper-sandboxd",
                "--message-format=json",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build -p reaper-sandboxd");
        assert!(
            output.status.success(),
            "cargo build -p reaper-sandboxd failed"
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["target"]["name"] == "reaper-sandboxd")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reported the reaper-sandboxd executable")
    })
    .clone()
}

/// A unique lowercase hex label.
pub fn unique() -> String {
    let mut bytes = [0u8; 8];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A loopback port that was free a moment ago (`VERCEL_DEV_PORT` must be a real port: with 0 the
/// runtime prints 0, not the port it bound).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `reaper-sandboxd`.
pub struct Sandboxd {
    child: Child,
    pub url: String,
    pub token: String,
}

impl Sandboxd {
    pub async fn start(root: &Path) -> Sandboxd {
        let token = format!("sbx-token-{}", unique());
        let mut child = Command::new(sandboxd_bin())
            .arg("--root")
            .arg(root.join("sandboxes"))
            .args(["--listen", "127.0.0.1:0"])
            .env("REAPER_SANDBOXD_TOKEN", &token)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(root.join("sandboxd.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start reaper-sandboxd");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("reaper-sandboxd printed its address within 30 s")
            .unwrap()
            .expect("reaper-sandboxd exited before listening");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Sandboxd { child, url, token }
    }

    pub fn provider(&self) -> HttpSandboxProvider {
        HttpSandboxProvider::new(HttpProviderConfig::new(&self.url, &self.token)).unwrap()
    }
}

/// DynamoDB Local with a fresh table, a sandboxd, and a journal directory, all for one test.
pub struct World {
    pub tmp: tempfile::TempDir,
    pub table: String,
    pub store: DynamoStore,
    pub sandboxd: Sandboxd,
    pub provider: HttpSandboxProvider,
    pub journals: PathBuf,
    pub secret: String,
}

impl World {
    pub async fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let table = format!("reaper-vercel-{}", unique());
        let config = aws_sdk_dynamodb::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("local", "local", None, None, "tests"))
            .endpoint_url(endpoint());
        let store = DynamoStore::from_config_builder(config, DynamoOptions::new(&table));
        store
            .create_table()
            .await
            .unwrap_or_else(|e| panic!("creating table {table} on {}: {e}", endpoint()));
        let sandboxd = Sandboxd::start(tmp.path()).await;
        let provider = sandboxd.provider();
        let journals = tmp.path().join("journals");
        World {
            table,
            store,
            provider,
            sandboxd,
            journals,
            secret: format!("cron-{}{}", unique(), unique()),
            tmp,
        }
    }

    /// The function's environment, exactly what a Vercel project would set (plus the AWS
    /// emulator endpoint and dummy credentials). `secret: None` leaves `CRON_SECRET` unset.
    pub fn env(&self, secret: Option<&str>) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("REAPER_TABLE", self.table.as_str()),
            ("REAPER_SANDBOXD_URL", &self.sandboxd.url),
            ("REAPER_SANDBOXD_TOKEN", &self.sandboxd.token),
            ("REAPER_DETACHED_TTL", DETACHED_TTL),
            ("REAPER_FENCE_QUIET", "50ms"),
            ("REAPER_JOURNAL_DIR", self.journals.to_str().unwrap()),
            ("AWS_ENDPOINT_URL_DYNAMODB", &endpoint()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "local"),
            ("AWS_SECRET_ACCESS_KEY", "local"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("RUST_LOG", "info"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Some(s) = secret {
            env.push(("CRON_SECRET".into(), s.into()));
        }
        env
    }

    /// A sandbox on the daemon whose journals are in this world's directory.
    pub async fn sandbox(&self) -> HttpSandbox {
        self.provider
            .create(&CreateSandboxRequest {
                journal_dir: Some(self.journals.to_str().unwrap().to_string()),
            })
            .await
            .expect("create sandbox")
    }

    /// An agent that printed three deltas and exited 0 in a sandbox of its own, recorded in
    /// DynamoDB as a `running` run detached a second ago — what the sweep must finalize.
    /// Returns `(run_id, sandbox_id)`.
    pub async fn finished_detached_run(&self) -> (String, String) {
        let sbx = self.sandbox().await;
        let run_id = format!("run-{}", unique());
        let deltas = "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done";
        sbx.start_agent(&run_id, deltas, None)
            .await
            .expect("start agent");
        let options = ProbeOptions {
            dir: Some(self.journals.to_str().unwrap().to_string()),
            ..ProbeOptions::default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let RunExitProbe::Finished { exit_code } =
                probe_run_exit(&sbx, &run_id, &options).await
            {
                assert_eq!(exit_code, 0);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the agent did not finish in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.detached_run(&run_id, sbx.id()).await;
        (run_id, sbx.id().to_string())
    }

    /// Records `run_id` as running in `sandbox_id`, detached a second ago.
    pub async fn detached_run(&self, run_id: &str, sandbox_id: &str) {
        let now = now_ms();
        let key = format!("key-{run_id}");
        self.store
            .create_or_resume(NewRun {
                run_id: run_id.into(),
                thread_id: format!("thread-{run_id}"),
                started_at: now - 5_000,
                status: None,
            })
            .await
            .unwrap();
        RunStore::update(
            &self.store,
            run_id,
            RunPatch::detach(now - 1_000, Some(key.clone())),
        )
        .await
        .unwrap();
        self.store
            .upsert(SandboxInstanceRecord {
                key,
                provider: self.provider.name().into(),
                provider_sandbox_id: sandbox_id.into(),
                latest_snapshot_id: None,
                thread_id: format!("thread-{run_id}"),
                latest_run_id: Some(run_id.into()),
                updated_at: now,
            })
            .await
            .unwrap();
    }

    pub async fn run(&self, run_id: &str) -> RunRecord {
        RunStore::get(&self.store, run_id)
            .await
            .unwrap()
            .expect("the run exists")
    }
}

/// A response: status, headers, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A request shaped like Vercel's cron: `GET`, `user-agent: vercel-cron/1.0`, the schedule
/// header, and `authorization` when given.
pub async fn send(
    port: u16,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    extra: &[(&str, String)],
) -> Answer {
    let mut request = client()
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("http://127.0.0.1:{port}{path}"),
        )
        .header("user-agent", "vercel-cron/1.0")
        .header("x-vercel-cron-schedule", SCHEDULE);
    if let Some(a) = authorization {
        request = request.header("authorization", a);
    }
    for (k, v) in extra {
        request = request.header(*k, v);
    }
    let response = request.send().await.expect("the function answered");
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

fn command(env: &[(String, String)], log: &Path) -> Command {
    let mut cmd = Command::new(function_bin());
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .kill_on_drop(true);
    cmd
}

/// The function started as `vercel dev` starts it.
pub struct DevFunction {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl DevFunction {
    pub async fn start(env: &[(String, String)], dir: &Path) -> DevFunction {
        let port = free_port();
        let log = dir.join(format!("function-{}.log", unique()));
        let mut env = env.to_vec();
        env.push(("VERCEL_DEV".into(), "1".into()));
        env.push(("VERCEL_DEV_PORT".into(), port.to_string()));
        let mut child = command(&env, &log).spawn().expect("start the function");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = format!("Dev server listening: {port}");
        let found = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains(&ready) {
                    return true;
                }
            }
            false
        })
        .await
        .expect("the function printed `Dev server listening` within 60 s");
        assert!(
            found,
            "the function exited before listening; its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        // Keep draining stdout so the function never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        DevFunction { child, port, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as `vercel dev` stops it; returns how it exited.
    pub async fn terminate(&mut self) -> ExitStatus {
        terminate(&mut self.child).await
    }
}

async fn terminate(child: &mut Child) -> ExitStatus {
    let pid = child.id().expect("running") as i32;
    // The `kill` command keeps this test crate free of a signal dependency.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the function exited within 30 s of SIGTERM")
        .unwrap()
}

/// Runs the function until it exits on its own (a start-up failure); returns the exit status and
/// everything it wrote to stdout and stderr.
pub async fn run_to_exit(env: &[(String, String)], dir: &Path) -> (ExitStatus, String) {
    let log = dir.join(format!("function-{}.log", unique()));
    let mut env = env.to_vec();
    env.push(("VERCEL_DEV".into(), "1".into()));
    env.push(("VERCEL_DEV_PORT".into(), free_port().to_string()));
    let mut child = command(&env, &log).spawn().expect("start the function");
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .await
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the function exited within 30 s")
        .unwrap();
    (
        status,
        stdout + &std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

/// Vercel's production side of the IPC bridge, emulated: a unix socket at `VERCEL_IPC_PATH` that
/// the function connects to, NUL-terminated JSON messages from it (`server-started`, then an
/// `end` per request carrying the request's invocation and request ids).
pub struct Bridge {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
    pub started: serde_json::Value,
    messages: tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
}

impl Bridge {
    pub async fn start(env: &[(String, String)], dir: &Path) -> Bridge {
        let socket = dir.join(format!("ipc-{}.sock", unique()));
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let port = free_port();
        let log = dir.join(format!("function-{}.log", unique()));
        let mut env = env.to_vec();
        env.push(("VERCEL_IPC_PATH".into(), socket.to_str().unwrap().into()));
        env.push(("VERCEL_DEV_PORT".into(), port.to_string()));
        let mut child = command(&env, &log).spawn().expect("start the function");
        let stream = tokio::select! {
            accepted = listener.accept() => accepted.unwrap().0,
            status = child.wait() => panic!(
                "the function exited ({status:?}) before connecting to the IPC socket; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ),
            () = tokio::time::sleep(Duration::from_secs(60)) => {
                panic!("the function did not connect to VERCEL_IPC_PATH within 60 s")
            }
        };
        let (tx, messages) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream);
            loop {
                let mut frame = Vec::new();
                match reader.read_until(0, &mut frame).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                assert_eq!(frame.pop(), Some(0), "an IPC message must end with NUL");
                let message: serde_json::Value =
                    serde_json::from_slice(&frame).expect("IPC messages are JSON");
                if tx.send(message).is_err() {
                    break;
                }
            }
        });
        // Stdout is not the protocol in production; drain it so the function never blocks.
        let mut stdout = child.stdout.take().unwrap();
        tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = stdout.read_to_end(&mut sink).await;
        });
        let mut bridge = Bridge {
            child,
            port,
            log,
            started: serde_json::Value::Null,
            messages,
        };
        bridge.started = bridge.next_message().await;
        bridge
    }

    pub async fn next_message(&mut self) -> serde_json::Value {
        tokio::time::timeout(Duration::from_secs(60), self.messages.recv())
            .await
            .expect("an IPC message within 60 s")
            .expect("the IPC connection is open")
    }

    /// Sends a request the way Vercel's proxy does in production, then waits for its `end`.
    /// Returns the answer and the `end` message.
    pub async fn invoke(
        &mut self,
        invocation_id: &str,
        request_id: u64,
        method: &str,
        authorization: Option<&str>,
    ) -> (Answer, serde_json::Value) {
        let answer = send(
            self.port,
            method,
            PATH,
            authorization,
            &[
                ("x-vercel-internal-invocation-id", invocation_id.to_string()),
                ("x-vercel-internal-request-id", request_id.to_string()),
            ],
        )
        .await;
        let end = loop {
            let message = self.next_message().await;
            if message["type"] == "end" {
                break message;
            }
        };
        (answer, end)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn terminate(&mut self) -> ExitStatus {
        terminate(&mut self.child).await
    }
}

/// A stand-in for sandboxd that takes the first request and answers nothing until released, then
/// answers 503 to it and every later request: a sweep that reaches the sandboxes is provably
/// inside its lease while the test holds it there.
pub struct Gate {
    pub url: String,
    entered: tokio::sync::oneshot::Receiver<()>,
    release: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Gate {
    pub async fn start() -> Gate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (entered_tx, entered) = tokio::sync::oneshot::channel();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (first, _) = listener.accept().await.unwrap();
            let _ = entered_tx.send(());
            let _ = released.await;
            answer_503(first).await;
            while let Ok((next, _)) = listener.accept().await {
                answer_503(next).await;
            }
        });
        Gate {
            url,
            entered,
            release: Some(release),
        }
    }

    /// Waits until the sweep's first request to the sandboxes arrived.
    pub async fn entered(&mut self) {
        tokio::time::timeout(Duration::from_secs(60), &mut self.entered)
            .await
            .expect("the sweep reached the sandboxes within 60 s")
            .unwrap();
    }

    pub fn release(&mut self) {
        let _ = self.release.take().expect("released once").send(());
    }
}

async fn answer_503(mut stream: tokio::net::TcpStream) {
    let _ = stream
        .write_all(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await;
    let _ = stream.shutdown().await;
}
