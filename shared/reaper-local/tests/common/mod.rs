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
