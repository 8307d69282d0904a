//! The world an emulator test runs in: DynamoDB Local (required: never skipped), a real
//! `reaper-sandboxd` with its own root and token, a fresh table, cargo-lambda's Lambda runtime
//! emulator (`cargo lambda watch --only-lambda-apis`) on a free loopback port, and the
//! function's binary started against the emulator's runtime API with the environment a
//! deployment would give it. Invocations go through the emulator's invoke API, as
//! `cargo lambda invoke` sends them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
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
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const CARGO_LAMBDA_VERSION: &str = "1.9.2";
pub const CFN_LINT_VERSION: &str = "1.58.0";
/// The function name the emulator serves in `--only-lambda-apis` mode.
const EMULATED_FUNCTION: &str = "_";

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The DynamoDB Local endpoint. Missing is a failure with instructions, never a skip.
pub fn endpoint() -> String {
    std::env::var("REAPER_DYNAMODB_ENDPOINT")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL_DYNAMODB"))
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "reaper-lambda's emulator tests need Amazon DynamoDB Local and neither \
                 REAPER_DYNAMODB_ENDPOINT nor AWS_ENDPOINT_URL_DYNAMODB is set. Start it with \
                 `shared/reaper-dynamodb/emulator/start.sh /tmp/ddb.env && set -a && . \
                 /tmp/ddb.env && set +a`, run the tests, then \
                 `shared/reaper-dynamodb/emulator/stop.sh /tmp/ddb.env`"
            )
        })
}

/// A virtualenv holding cargo-lambda and cfn-lint from PyPI: `REAPER_LAMBDA_VENV`, default
/// `target/venv-lambda`; created and filled on first use.
pub fn tools() -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    static INSTALL: Mutex<()> = Mutex::new(());
    VENV.get_or_init(|| {
        let _one_at_a_time = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
        let venv = std::env::var_os("REAPER_LAMBDA_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/venv-lambda"));
        let bin = venv.join("bin");
        if !bin.join("cargo-lambda").exists() || !bin.join("cfn-lint").exists() {
            let ok = std::process::Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("run python3 -m venv")
                .success();
            assert!(ok, "python3 -m venv {} failed", venv.display());
            let ok = std::process::Command::new(bin.join("pip"))
                .args(["install", "--quiet"])
                .arg(format!("cargo-lambda=={CARGO_LAMBDA_VERSION}"))
                .arg(format!("cfn-lint=={CFN_LINT_VERSION}"))
                .status()
                .expect("run pip install")
                .success();
            assert!(ok, "pip install cargo-lambda and cfn-lint failed");
        }
        bin
    })
    .clone()
}

/// `reaper-sandboxd`: `REAPER_SANDBOXD_BIN`, else built once per test process (cargo does not
/// build another package's binary for an integration test).
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls a real condition until it holds or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A running `reaper-sandboxd`.
pub struct Sandboxd {
    _child: Child,
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
        Sandboxd {
            _child: child,
            url,
            token,
        }
    }
}

/// cargo-lambda's runtime emulator, serving the Lambda runtime API and the invoke API.
pub struct Emulator {
    _child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Emulator {
    pub async fn start(dir: &Path) -> Emulator {
        let port = free_port();
        let log = dir.join(format!("cargo-lambda-{port}.log"));
        let child = Command::new(tools().join("cargo-lambda"))
            .args(["lambda", "watch", "--only-lambda-apis"])
            .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
            .arg(port.to_string())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start cargo lambda watch");
        let up = eventually(Duration::from_secs(60), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        assert!(
            up,
            "cargo lambda watch did not listen on {port} within 60 s: {}",
            std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
        );
        Emulator {
            _child: child,
            port,
            log,
        }
    }

    pub fn runtime_api(&self) -> String {
        format!("http://127.0.0.1:{}/.rt", self.port)
    }

    /// Invokes the function with `payload` through the emulator; `(HTTP status, body)`.
    pub async fn invoke(&self, payload: &serde_json::Value) -> (u16, String) {
        let response = client()
            .post(format!(
                "http://127.0.0.1:{}/2015-03-31/functions/{EMULATED_FUNCTION}/invocations",
                self.port
            ))
            .body(payload.to_string())
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .expect("the emulator answered the invocation");
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// Invokes and parses a successful answer: the report.
    pub async fn sweep(&self, payload: &serde_json::Value) -> serde_json::Value {
        let (status, body) = self.invoke(payload).await;
        assert_eq!(status, 200, "the invocation failed: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// The function's process, polling the emulator for events.
pub struct Function {
    child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl Function {
    /// Starts `bin` (default: the binary cargo built for these tests) with exactly `env` plus the
    /// variables the Lambda service sets.
    pub fn start(emulator: &Emulator, env: &[(String, String)], dir: &Path) -> Function {
        Self::start_bin(
            Path::new(env!("CARGO_BIN_EXE_reaper-lambda")),
            emulator,
            env,
            dir,
        )
    }

    pub fn start_bin(
        bin: &Path,
        emulator: &Emulator,
        env: &[(String, String)],
        dir: &Path,
    ) -> Function {
        let tag = unique();
        let stdout = dir.join(format!("function-{tag}.out"));
        let stderr = dir.join(format!("function-{tag}.err"));
        let child = Command::new(bin)
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", emulator.runtime_api())
            .env("AWS_LAMBDA_FUNCTION_NAME", "reaper-lambda")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .env("AWS_LAMBDA_LOG_LEVEL", "INFO")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start the function");
        Function {
            child,
            stdout,
            stderr,
        }
    }

    /// What the function wrote to stdout (its JSON log lines and EMF lines).
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        self.output()
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {l}"))
            })
            .collect()
    }

    /// The EMF documents written so far.
    pub fn metrics(&self) -> Vec<serde_json::Value> {
        self.log_lines()
            .into_iter()
            .filter(|l| l.get("_aws").is_some())
            .collect()
    }

    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the function did not exit within {within:?}"))
            .unwrap()
    }
}

/// DynamoDB Local with a fresh table, a sandboxd, an emulator and a journal directory.
pub struct World {
    pub tmp: tempfile::TempDir,
    pub table: String,
    pub store: DynamoStore,
    pub sandboxd: Sandboxd,
    pub provider: HttpSandboxProvider,
    pub journals: PathBuf,
    pub emulator: Emulator,
}

impl World {
    pub async fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let table = format!("reaper-lambda-{}", unique());
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
        let provider =
            HttpSandboxProvider::new(HttpProviderConfig::new(&sandboxd.url, &sandboxd.token))
                .unwrap();
        let journals = tmp.path().join("journals");
        let emulator = Emulator::start(tmp.path()).await;
        World {
            table,
            store,
            provider,
            sandboxd,
            journals,
            emulator,
            tmp,
        }
    }

    /// The function's environment as the SAM template sets it (plus the emulator endpoint and
    /// dummy credentials), with `extra` replacing or adding variables.
    pub fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let endpoint = endpoint();
        let mut env: Vec<(String, String)> = [
            ("REAPER_TABLE", self.table.as_str()),
            ("REAPER_SANDBOXD_URL", &self.sandboxd.url),
            ("REAPER_SANDBOXD_TOKEN", &self.sandboxd.token),
            ("REAPER_DETACHED_TTL", "30m"),
            ("REAPER_RUN_BUDGET", "10s"),
            ("REAPER_FENCE_QUIET", "50ms"),
            ("REAPER_JOURNAL_DIR", self.journals.to_str().unwrap()),
            ("REAPER_BUDGET", "60s"),
            ("REAPER_DEADLINE_MARGIN", "5s"),
            ("AWS_ENDPOINT_URL_DYNAMODB", &endpoint),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "local"),
            ("AWS_SECRET_ACCESS_KEY", "local"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            env.retain(|(name, _)| name != k);
            env.push((k.to_string(), v.to_string()));
        }
        env
    }

    pub fn function(&self, extra: &[(&str, &str)]) -> Function {
        Function::start(&self.emulator, &self.env(extra), self.tmp.path())
    }

    pub async fn sandbox(&self) -> HttpSandbox {
        self.provider
            .create(&CreateSandboxRequest {
                journal_dir: Some(self.journals.to_str().unwrap().to_string()),
            })
            .await
            .expect("create sandbox")
    }

    /// An agent that printed three deltas and exited 0 in a sandbox of its own, recorded as a
    /// `running` run detached `detached_ago_ms` ago. Returns `(run_id, sandbox_id)`.
    pub async fn finished_run(&self, label: &str, detached_ago_ms: i64) -> (String, String) {
        let sbx = self.sandbox().await;
        let run_id = format!("{label}-{}", unique());
        let deltas = "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done";
        sbx.start_agent(&run_id, deltas, None)
            .await
            .expect("start agent");
        let options = ProbeOptions {
            dir: Some(self.journals.to_str().unwrap().to_string()),
            ..ProbeOptions::default()
        };
        let finished = eventually(Duration::from_secs(30), || async {
            matches!(
                probe_run_exit(&sbx, &run_id, &options).await,
                RunExitProbe::Finished { exit_code: 0 }
            )
        })
        .await;
        assert!(finished, "agent {run_id} did not finish within 30 s");
        self.detached_run(&run_id, sbx.id(), detached_ago_ms).await;
        (run_id, sbx.id().to_string())
    }

    /// An agent still producing (it sleeps after its first delta), detached a second ago.
    pub async fn producing_run(&self, label: &str) -> (String, String) {
        let sbx = self.sandbox().await;
        let run_id = format!("{label}-{}", unique());
        sbx.start_agent(&run_id, "echo '{\"delta\":\"1\"}'; sleep 120", None)
            .await
            .expect("start agent");
        self.detached_run(&run_id, sbx.id(), 1_000).await;
        (run_id, sbx.id().to_string())
    }

    /// Records `run_id` as running in `sandbox_id`, detached `ago_ms` ago, with its instance.
    pub async fn detached_run(&self, run_id: &str, sandbox_id: &str, ago_ms: i64) {
        let now = now_ms();
        let key = format!("key-{run_id}");
        self.store
            .create_or_resume(NewRun {
                run_id: run_id.into(),
                thread_id: format!("thread-{run_id}"),
                started_at: now - ago_ms - 5_000,
                status: None,
            })
            .await
            .unwrap();
        RunStore::update(
            &self.store,
            run_id,
            RunPatch::detach(now - ago_ms, Some(key.clone())),
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

    pub async fn sandbox_exists(&self, id: &str) -> bool {
        self.provider.status(id).await.unwrap().is_some()
    }

    /// Whether the sweep lease item is in the table now (a real read, consistent).
    pub async fn sweep_lease_held(&self) -> bool {
        let key = reaper_dynamodb::layout::key(
            reaper_dynamodb::layout::lease_pk(reaper_core::reap::SWEEP_LEASE_KEY),
            reaper_dynamodb::layout::LEASE_SK,
        );
        self.store
            .client()
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item()
            .is_some()
    }
}

/// The report's entry for `run_id`.
pub fn entry<'a>(report: &'a serde_json::Value, run_id: &str) -> &'a serde_json::Value {
    report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == run_id)
        .unwrap_or_else(|| panic!("{run_id} is not in the report: {report}"))
}

/// A real EventBridge rule "Scheduled Event" envelope (the shape AWS documents).
pub fn scheduled_event() -> serde_json::Value {
    serde_json::json!({
        "version": "0",
        "id": format!("{}-0000-4000-8000-000000000000", &unique()[..8]),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-12-02T12:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/reaper-sweep"],
        "detail": {}
    })
}
