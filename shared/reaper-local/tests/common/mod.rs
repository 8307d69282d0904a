//! Helpers shared by the real-process tests: a fresh root per case, and waits on real events.

// Each test binary uses its own subset of these helpers and re-exports.
#![allow(dead_code, unused_imports)]

use std::path::Path;
use std::time::Duration;

use reaper_local::{CreateOptions, LocalSandbox, LocalSandboxProvider};
use tempfile::TempDir;

pub use reaper_e2e::sandbox::{file_exists, run_record, sh};
pub use reaper_e2e::util::{now_ms, process_dead, unique};

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

/// Polls a real condition until it holds or `within` passes. Returns whether it held.
pub async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    reaper_e2e::util::eventually(within, || std::future::ready(condition())).await
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
