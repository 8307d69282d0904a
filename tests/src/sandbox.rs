//! Questions asked through any sandbox handle, the way a sweep would ask them.

use reaper_core::journal::shell_quote;
use reaper_core::{ExecOptions, RunRecord, RunStatus, SandboxHandle};

/// Runs `command` and returns its stdout, failing the test on an error.
pub async fn sh(handle: &dyn SandboxHandle, command: &str) -> String {
    handle
        .exec(command, ExecOptions::default())
        .await
        .unwrap_or_else(|e| panic!("exec {command:?} failed: {e}"))
        .stdout
}

/// Whether a file exists, asked through the sandbox's shell (`test -f`).
pub async fn file_exists(handle: &dyn SandboxHandle, path: &str) -> bool {
    handle
        .exec(
            &format!("test -f {}", shell_quote(path)),
            ExecOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("exec test -f {path:?} failed: {e}"))
        .exit_code
        == 0
}

/// A run record of thread `thread`, started at 0, in `status`.
pub fn run_record(run_id: &str, status: RunStatus) -> RunRecord {
    let mut record = RunRecord::new(run_id, "thread", 0);
    record.status = status;
    record
}
