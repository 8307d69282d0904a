//! A real `reaper-sandboxd` child process per test: its own root, a random token, a free port on
//! loopback (port 0; the test reads the printed address, never sleeps), killed when dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reaper_core::journal::{journal_paths, shell_quote};
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::{Clock, ExecOptions, RunExitProbe, SandboxHandle};
use reaper_http_sandbox::api::CreateSandboxRequest;
use reaper_http_sandbox::{HttpProviderConfig, HttpSandbox, HttpSandboxProvider};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub const BIN: &str = env!("CARGO_BIN_EXE_reaper-sandboxd");

/// A unique label (run ids, canaries, tokens).
pub fn unique() -> String {
    let mut bytes = [0u8; 8];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn random_token() -> String {
    format!("tok-{}{}", unique(), unique())
}

pub fn now_ms() -> i64 {
    reaper_local::SystemClock.now_ms()
}

/// A running daemon.
pub struct Daemon {
    child: Child,
    pub addr: String,
    pub url: String,
    pub token: String,
    pub root: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts a daemon on a free loopback port with a fresh random token.
    pub async fn start(root: &Path, extra: &[&str]) -> Daemon {
        Self::start_at(root, &random_token(), "127.0.0.1:0", extra).await
    }

    /// Starts a daemon with this token on `listen`, and waits for its address line.
    pub async fn start_at(root: &Path, token: &str, listen: &str, extra: &[&str]) -> Daemon {
        let sandboxes = root.join("sandboxes");
        let log = root.join(format!("daemon-{}.log", unique()));
        let mut child = Command::new(BIN)
            .arg("--root")
            .arg(&sandboxes)
            .arg("--listen")
            .arg(listen)
            .args(extra)
            .env("REAPER_SANDBOXD_TOKEN", token)
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start reaper-sandboxd");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the daemon printed its address within 30 s")
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "the daemon exited before listening: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let addr = url.trim_start_matches("http://").to_string();
        Daemon {
            child,
            addr,
            url,
            token: token.to_string(),
            root: sandboxes,
            log,
        }
    }

    pub fn provider(&self) -> HttpSandboxProvider {
        HttpSandboxProvider::new(HttpProviderConfig::new(&self.url, &self.token)).unwrap()
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("daemon running") as i32
    }

    /// SIGKILL, as a crash or an OOM kill would; waits for the process to be gone.
    pub async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }

    /// SIGTERM; returns the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the daemon exited within 30 s of SIGTERM")
            .unwrap()
    }

    /// Everything the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A raw client for requests the provider would never send.
    pub fn raw(&self) -> reqwest::Client {
        reqwest::Client::builder().no_proxy().build().unwrap()
    }
}

/// A fresh sandbox with its journals in `journal_dir`.
pub async fn sandbox(provider: &HttpSandboxProvider, journal_dir: &Path) -> HttpSandbox {
    provider
        .create(&CreateSandboxRequest {
            journal_dir: Some(journal_dir.to_str().unwrap().to_string()),
        })
        .await
        .expect("create sandbox")
}

pub fn probe_options(journal_dir: &Path) -> ProbeOptions {
    ProbeOptions {
        dir: Some(journal_dir.to_str().unwrap().to_string()),
        ..ProbeOptions::default()
    }
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

/// Starts an agent through the daemon and waits (through the daemon too) until its journal
/// holds the exit sentinel; returns the exit code the probe read.
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

/// Whether a file exists, asked through the daemon's shell (`test -f`).
pub async fn file_exists(handle: &dyn SandboxHandle, path: &str) -> bool {
    handle
        .exec(
            &format!("test -f {}", shell_quote(path)),
            ExecOptions::default(),
        )
        .await
        .unwrap()
        .exit_code
        == 0
}

/// Runs `command` and returns its stdout, failing the test on an error.
pub async fn sh(handle: &dyn SandboxHandle, command: &str) -> String {
    handle
        .exec(command, ExecOptions::default())
        .await
        .unwrap_or_else(|e| panic!("exec {command:?} failed: {e}"))
        .stdout
}

/// The journal path of `run_id` in `dir`.
pub fn journal_of(run_id: &str, dir: &Path) -> String {
    journal_paths(run_id, Some(dir.to_str().unwrap()))
        .unwrap()
        .journal
}

/// Whether a process is gone or a zombie.
pub fn process_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap_or("");
            state == "Z" || state == "X"
        }
    }
}

/// A run record in `status`.
pub fn run_record(run_id: &str, status: reaper_core::RunStatus) -> reaper_core::RunRecord {
    let mut record = reaper_core::RunRecord::new(run_id, "thread", 0);
    record.status = status;
    record
}
