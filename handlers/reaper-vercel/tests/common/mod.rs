//! The world a test runs the function in: DynamoDB Local (required: never skipped), a real
//! `reaper-sandboxd` with its own root and token, a fresh table per test, and the function's
//! binary started the two ways Vercel starts it — as `vercel dev` does (`VERCEL_DEV=1`,
//! `VERCEL_DEV_PORT`, wait for `Dev server listening`), and under an emulation of the production
//! IPC bridge (`VERCEL_IPC_PATH`).

#![allow(dead_code)]

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use reaper_e2e::dynamo::endpoint;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

pub use reaper_e2e::util::{client, free_port, unique};

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

/// `reaper_e2e`'s world (a fresh table, a sandboxd, a journal directory; its fields and
/// `sandbox`/`run`) plus the cron secret.
pub struct World {
    base: reaper_e2e::world::World,
    pub secret: String,
}

impl Deref for World {
    type Target = reaper_e2e::world::World;

    fn deref(&self) -> &Self::Target {
        &self.base
    }
}

impl World {
    pub async fn new() -> World {
        World {
            base: reaper_e2e::world::World::new("reaper-vercel").await,
            secret: format!("cron-{}{}", unique(), unique()),
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
            ("REAPER_QUIET_WINDOW", "50ms"),
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

    /// An agent that printed three deltas and exited 0 in a sandbox of its own, recorded in
    /// DynamoDB as a `running` run detached a second ago — what the sweep must finalize.
    /// Returns `(run_id, sandbox_id)`.
    pub async fn finished_detached_run(&self) -> (String, String) {
        self.base.finished_run("run", 1_000).await
    }

    /// Records `run_id` as running in `sandbox_id`, detached a second ago.
    pub async fn detached_run(&self, run_id: &str, sandbox_id: &str) {
        self.base.detached_run(run_id, sandbox_id, 1_000).await;
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
        reaper_e2e::util::terminate(&mut self.child, "the function").await
    }
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
        reaper_e2e::util::terminate(&mut self.child, "the function").await
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
