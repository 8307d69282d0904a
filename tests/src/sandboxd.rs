//! A real `reaper-sandboxd` child process per case: its own root, a random token, a free
//! loopback port (it listens on port 0 and the harness reads the address it prints, never
//! sleeps), killed when dropped; and agents run through it to their exit sentinel.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::RunExitProbe;
use reaper_http_sandbox::api::CreateSandboxRequest;
use reaper_http_sandbox::{HttpProviderConfig, HttpSandbox, HttpSandboxProvider};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::util::{random_token, unique};

/// An agent that prints three deltas and exits 0.
pub const THREE_DELTAS: &str = "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done";

/// The `reaper-sandboxd` binary for another package's tests: `REAPER_SANDBOXD_BIN`, else built
/// once per test process with the cargo running the tests (cargo builds only the tested
/// package's own binaries for its integration tests). `reaper-sandboxd`'s own tests pass
/// `env!("CARGO_BIN_EXE_reaper-sandboxd")` to [`Sandboxd::launch`] instead.
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

/// A running `reaper-sandboxd`, killed when dropped.
#[derive(Debug)]
pub struct Sandboxd {
    child: Child,
    /// `http://127.0.0.1:<port>`, as the daemon printed it.
    pub url: String,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    pub token: String,
    /// Its `--root`: the directory holding one directory per sandbox.
    pub root: PathBuf,
    /// Its stderr (the tracing log, at `RUST_LOG=debug`).
    pub log: PathBuf,
}

impl Sandboxd {
    /// Starts [`sandboxd_bin`] with root `dir/sandboxes` on a free loopback port with a fresh
    /// random token.
    pub async fn start(dir: &Path) -> Sandboxd {
        Self::launch(&sandboxd_bin(), dir, &random_token(), "127.0.0.1:0", &[]).await
    }

    /// Starts `bin` with root `dir/sandboxes`, this token, `--listen listen` and `extra`
    /// arguments, and waits (30 s at most) for the address line it prints once listening.
    pub async fn launch(
        bin: &Path,
        dir: &Path,
        token: &str,
        listen: &str,
        extra: &[&str],
    ) -> Sandboxd {
        let root = dir.join("sandboxes");
        let log = dir.join(format!("sandboxd-{}.log", unique()));
        let mut child = Command::new(bin)
            .arg("--root")
            .arg(&root)
            .arg("--listen")
            .arg(listen)
            .args(extra)
            .env("REAPER_SANDBOXD_TOKEN", token)
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("create the daemon's log"))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("reaper-sandboxd printed its address within 30 s")
            .expect("read reaper-sandboxd's stdout")
            .unwrap_or_else(|| {
                panic!(
                    "reaper-sandboxd exited before listening: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let addr = url.trim_start_matches("http://").to_string();
        Sandboxd {
            child,
            url,
            addr,
            token: token.to_string(),
            root,
            log,
        }
    }

    /// The HTTP provider a reaper would use to reach this daemon.
    pub fn provider(&self) -> HttpSandboxProvider {
        HttpSandboxProvider::new(HttpProviderConfig::new(&self.url, &self.token))
            .expect("an HTTP provider for the daemon")
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("the daemon is running") as i32
    }

    /// SIGKILL, as a crash or an OOM kill would; waits for the process to be gone.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill the daemon");
    }

    /// SIGTERM; returns the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        crate::util::terminate(&mut self.child, "the daemon").await
    }

    /// Everything the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A fresh sandbox whose journals go to `journal_dir`.
pub async fn sandbox(provider: &HttpSandboxProvider, journal_dir: &Path) -> HttpSandbox {
    provider
        .create(&CreateSandboxRequest {
            journal_dir: Some(path_str(journal_dir).to_string()),
        })
        .await
        .expect("create sandbox")
}

/// Probe options reading journals in `journal_dir`.
pub fn probe_options(journal_dir: &Path) -> ProbeOptions {
    ProbeOptions {
        dir: Some(path_str(journal_dir).to_string()),
        ..ProbeOptions::default()
    }
}

/// Starts an agent through the daemon and waits (through the daemon too, 30 s at most) until
/// its journal holds the exit sentinel; returns the exit code the probe read.
pub async fn run_agent(sbx: &HttpSandbox, journal_dir: &Path, run_id: &str, command: &str) -> i64 {
    sbx.start_agent(run_id, command, None)
        .await
        .unwrap_or_else(|e| panic!("start agent {run_id:?}: {e}"));
    let options = probe_options(journal_dir);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let RunExitProbe::Finished { exit_code } = probe_run_exit(sbx, run_id, &options).await {
            return exit_code;
        }
        assert!(
            Instant::now() < deadline,
            "agent {run_id:?} did not finish within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", path.display()))
}

/// Fault injection for the handler suites: a TCP relay to `upstream` (a sandboxd's `addr`) that
/// runs `hook` once, when the first connection comes in (a sweep's first question about a
/// sandbox, which comes after its listing read the runs), before relaying a byte; later
/// connections wait behind it. Returns the relay's URL, to give the function as its sandboxd.
pub async fn relay_after_hook(
    upstream: String,
    hook: impl std::future::Future<Output = ()> + Send + 'static,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut hook = Some(hook);
        while let Ok((mut inbound, _)) = listener.accept().await {
            if let Some(hook) = hook.take() {
                hook.await;
            }
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}
