//! Helpers shared by the real-process tests: a fresh root per case, and waits on real events.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use reaper_core::{ExecOptions, SandboxHandle};
use reaper_local::{CreateOptions, LocalSandbox, LocalSandboxProvider};
use tempfile::TempDir;

/// A provider rooted in its own temporary directory (removed when the `TempDir` drops).
pub fn provider() -> (TempDir, LocalSandboxProvider) {
    let root = tempfile::tempdir().expect("temp dir");
    let provider = LocalSandboxProvider::with_root(root.path().join("sandboxes"));
    (root, provider)
}

pub async fn sandbox(provider: &LocalSandboxProvider) -> LocalSandbox {
    provider
        .create(CreateOptions::default())
        .await
        .expect("create sandbox")
}

/// Runs `command` and returns its stdout, failing the test on an error.
pub async fn sh(handle: &dyn SandboxHandle, command: &str) -> String {
    handle
        .exec(command, ExecOptions::default())
        .await
        .unwrap_or_else(|e| panic!("exec {command:?} failed: {e}"))
        .stdout
}

/// Whether the process is gone or a zombie (dead, waiting for a reaper that may never come).
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

/// Polls a real condition until it holds or `within` passes. Returns whether it held.
pub async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `path` holds at least `n` lines (a real agent's progress).
pub async fn wait_for_lines(path: &Path, n: usize) -> bool {
    eventually(Duration::from_secs(20), || {
        std::fs::read(path)
            .map(|b| b.iter().filter(|&&c| c == b'\n').count() >= n)
            .unwrap_or(false)
    })
    .await
}

/// The BusyBox binary. Fails loudly (never skips): CI installs it.
pub fn busybox() -> std::path::PathBuf {
    for candidate in ["/bin/busybox", "/usr/bin/busybox"] {
        if Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!(
        "busybox is not installed: these tests run the prune and probe under a BusyBox userland. \
         Install it with `apt-get install busybox` (the CI script does)."
    );
}

/// A unique label for run ids, canaries and directories of one case.
pub fn unique() -> String {
    let mut bytes = [0u8; 6];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Starts an agent under the journaled wrapper and waits for its process to exit.
pub async fn run_agent(sbx: &LocalSandbox, run_id: &str, command: &str, dir: Option<&str>) {
    let mut agent = sbx
        .start_agent(run_id, command, dir)
        .await
        .unwrap_or_else(|e| panic!("start agent {run_id:?}: {e}"));
    let code = tokio::time::timeout(Duration::from_secs(60), agent.wait())
        .await
        .expect("agent exited within a minute")
        .unwrap();
    assert_eq!(code, 0, "the journaled wrapper of {run_id:?} failed");
}

/// Whether a file exists, asked through the shell (`test -f`), as a sweep would.
pub async fn file_exists(handle: &dyn SandboxHandle, path: &str) -> bool {
    let command = format!("test -f {}", reaper_core::journal::shell_quote(path));
    handle
        .exec(&command, ExecOptions::default())
        .await
        .unwrap()
        .exit_code
        == 0
}

/// A run record in `status`.
pub fn run_record(run_id: &str, status: reaper_core::RunStatus) -> reaper_core::RunRecord {
    let mut record = reaper_core::RunRecord::new(run_id, "thread", 0);
    record.status = status;
    record
}

/// Sets a file's mtime to `epoch_secs` with the real `touch -d`.
pub fn touch_at(path: &str, epoch_secs: i64) {
    let status = std::process::Command::new("touch")
        .arg("-d")
        .arg(format!("@{epoch_secs}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "touch -d failed on {path}");
}

/// Sets a file's mtime to `secs_ago` seconds in the past.
pub fn age_file(path: &str, secs_ago: i64) {
    touch_at(path, now_ms() / 1000 - secs_ago);
}

/// The current wall-clock time in ms.
pub fn now_ms() -> i64 {
    use reaper_core::Clock;
    reaper_local::SystemClock.now_ms()
}
