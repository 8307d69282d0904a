//! The world an emulator test runs in: DynamoDB Local (required: never skipped), a real
//! `reaper-sandboxd` with its own root and token, a fresh table, cargo-lambda's Lambda runtime
//! emulator (`cargo lambda watch --only-lambda-apis`) on a free loopback port, and the
//! function's binary started against the emulator's runtime API with the environment a
//! deployment would give it. Invocations go through the emulator's invoke API, as
//! `cargo lambda invoke` sends them.

#![allow(dead_code)]

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use reaper_core::SandboxHandle;
use tokio::process::{Child, Command};

pub use reaper_e2e::dynamo::endpoint;
pub use reaper_e2e::util::{client, eventually, free_port, unique};

pub const CARGO_LAMBDA_VERSION: &str = "1.9.2";
pub const CFN_LINT_VERSION: &str = "1.58.0";
/// cfn-lint 1.58 no longer pulls it in; with it, cfn-lint also lints what SAM generates, and
/// `sam.rs` reads the generated resources.
pub const SAM_TRANSLATOR_VERSION: &str = "1.110.0";
/// The function name the emulator serves in `--only-lambda-apis` mode.
const EMULATED_FUNCTION: &str = "_";

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A virtualenv holding cargo-lambda, cfn-lint and the SAM translator from PyPI:
/// `REAPER_LAMBDA_VENV`, default `target/venv-lambda`; created and filled on first use (and
/// topped up when a pinned version changes: the marker names them all).
pub fn tools() -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    static INSTALL: Mutex<()> = Mutex::new(());
    VENV.get_or_init(|| {
        let _one_at_a_time = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
        let venv = std::env::var_os("REAPER_LAMBDA_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/venv-lambda"));
        let bin = venv.join("bin");
        let pins = [
            format!("cargo-lambda=={CARGO_LAMBDA_VERSION}"),
            format!("cfn-lint=={CFN_LINT_VERSION}"),
            format!("aws-sam-translator=={SAM_TRANSLATOR_VERSION}"),
        ];
        let marker = venv.join("reaper-tools.txt");
        let installed = std::fs::read_to_string(&marker).unwrap_or_default();
        if installed != pins.join("\n") {
            if !bin.join("pip").exists() {
                let ok = std::process::Command::new("python3")
                    .args(["-m", "venv"])
                    .arg(&venv)
                    .status()
                    .expect("run python3 -m venv")
                    .success();
                assert!(ok, "python3 -m venv {} failed", venv.display());
            }
            let ok = std::process::Command::new(bin.join("pip"))
                .args(["install", "--quiet"])
                .args(&pins)
                .status()
                .expect("run pip install")
                .success();
            assert!(ok, "pip install {pins:?} failed");
            std::fs::write(&marker, pins.join("\n")).expect("write the venv marker");
        }
        bin
    })
    .clone()
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

/// `reaper_e2e`'s world (a fresh table, a sandboxd, a journal directory; its fields and
/// `sandbox`/`finished_run`/`detached_run`/`run`) plus the Lambda emulator.
pub struct World {
    base: reaper_e2e::world::World,
    pub emulator: Emulator,
}

impl Deref for World {
    type Target = reaper_e2e::world::World;

    fn deref(&self) -> &Self::Target {
        &self.base
    }
}

impl World {
    pub async fn new() -> World {
        let base = reaper_e2e::world::World::new("reaper-lambda").await;
        let emulator = Emulator::start(base.tmp.path()).await;
        World { base, emulator }
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
            ("REAPER_QUIET_WINDOW", "50ms"),
            // A local sandboxd answers in milliseconds: a shorter step deadline keeps one run's
            // worst case (10 s + 0.35 s + 10 s + 10 s + 2 s) well inside the 60 s budget.
            ("REAPER_STEP_TIMEOUT", "10s"),
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

    /// The function with exactly `env`.
    pub fn function_with(&self, env: &[(String, String)]) -> Function {
        Function::start(&self.emulator, env, self.tmp.path())
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

    /// Restarts the daemon on the same address and root with `token`, as an operator does after
    /// rotating it: its sandboxes stay (they are directories under the root).
    pub async fn restart_sandboxd(&mut self, token: &str) {
        let addr = self.base.sandboxd.addr.clone();
        self.base.sandboxd.terminate().await;
        self.base.sandboxd = reaper_e2e::sandboxd::Sandboxd::launch(
            &reaper_e2e::sandboxd::sandboxd_bin(),
            self.base.tmp.path(),
            token,
            &addr,
            &[],
        )
        .await;
        self.base.provider = self.base.sandboxd.provider();
    }

    /// An agent that printed three deltas and exited 0 in a sandbox of its own, recorded in
    /// `store` (any store) as a `running` run detached a second ago. Returns `(run_id,
    /// sandbox_id)`.
    pub async fn finished_run_in<S>(&self, store: &S, label: &str) -> (String, String)
    where
        S: reaper_core::RunStore + reaper_core::SandboxInstanceStore,
    {
        let sbx = self.sandbox().await;
        let run_id = format!("{label}-{}", unique());
        let exit_code = reaper_e2e::sandboxd::run_agent(
            &sbx,
            &self.journals,
            &run_id,
            reaper_e2e::sandboxd::THREE_DELTAS,
        )
        .await;
        assert_eq!(exit_code, 0, "agent {run_id} did not exit 0");
        reaper_e2e::dynamo::seed_detached_run(
            store,
            reaper_e2e::dynamo::DetachedRun {
                run_id: &run_id,
                provider: reaper_core::SandboxProvider::name(&self.provider),
                sandbox_id: sbx.id(),
                detached_ago_ms: 1_000,
            },
        )
        .await;
        (run_id, sbx.id().to_string())
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
