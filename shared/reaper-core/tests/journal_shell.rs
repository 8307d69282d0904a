//! The journal's shell side for real: the commands the core builds, run by `sh -c` against a
//! temporary directory (a journaled agent, the exit probe, a batched prune with a failing `rm`).

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use reaper_core::journal::{journal_paths, journaled_command};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::prune::{prune_journals, KeptReason, PruneOptions, PruneStage};
use reaper_core::{
    ExecOptions, ExecOutput, RunExitProbe, RunRecord, RunStatus, SandboxError, SandboxHandle,
};
use std::sync::Mutex;

/// A "sandbox" that is this machine's `sh`, recording each command.
#[derive(Debug, Default)]
struct Shell {
    commands: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl SandboxHandle for Shell {
    fn id(&self) -> &str {
        "local-sh"
    }
    async fn exec(&self, command: &str, _options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.commands.lock().unwrap().push(command.to_string());
        let out = Command::new("sh")
            .arg("-c")
            .arg(command)
            .output()
            .map_err(|e| SandboxError::Other(format!("spawning sh failed: {e}")))?;
        Ok(ExecOutput {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            exit_code: out.status.code().unwrap_or(-1),
        })
    }
}

fn sh(command: &str) {
    let status = Command::new("sh").arg("-c").arg(command).status().unwrap();
    assert!(status.success(), "{command}");
}

fn quote(p: &str) -> String {
    reaper_core::journal::shell_quote(p)
}

/// A directory whose name would break any unquoted command.
fn hostile_dir(root: &Path) -> String {
    let dir = root.join("jo'u r;n $(x)");
    std::fs::create_dir(&dir).unwrap();
    dir.to_str().unwrap().to_string()
}

#[tokio::test]
async fn a_journaled_agent_that_exits_non_zero_is_probed_finished_with_its_code() {
    let root = tempfile::tempdir().unwrap();
    let dir = hostile_dir(root.path());
    let paths = journal_paths("agent/1 'x'", Some(&dir)).unwrap();
    let shell = Shell::default();
    let options = ProbeOptions {
        dir: Some(dir.clone()),
        ..ProbeOptions::default()
    };
    assert_eq!(
        probe_run_exit(&shell, "agent/1 'x'", &options).await,
        RunExitProbe::Producing,
        "no journal yet"
    );
    let agent = r#"echo '{"type":"text","delta":"héllo"}'; echo oops >&2; exit 3"#;
    shell
        .exec(&journaled_command(agent, &paths), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(
        probe_run_exit(&shell, "agent/1 'x'", &options).await,
        RunExitProbe::Finished { exit_code: 3 }
    );
    assert_eq!(std::fs::read_to_string(&paths.stderr).unwrap(), "oops\n");
    let journal = std::fs::read_to_string(&paths.journal).unwrap();
    assert!(journal.starts_with("{\"type\":\"text\",\"delta\":\"héllo\"}\n{\"__exit\":3,"));
}

#[tokio::test]
async fn a_batched_prune_under_sh_deletes_each_decided_run_and_reports_a_failed_rm() {
    let root = tempfile::tempdir().unwrap();
    let dir = hostile_dir(root.path());
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let store = MemoryStore::new();
    let seed = |run_id: &str, status: Option<RunStatus>, age_s: i64| {
        let p = journal_paths(run_id, Some(&dir)).unwrap();
        let at = now_ms / 1000 - age_s;
        sh(&format!(
            "printf 'x\\n' > {j} && : > {e} && touch -d @{at} {j} {e}",
            j = quote(&p.journal),
            e = quote(&p.stderr)
        ));
        if let Some(status) = status {
            let mut r = RunRecord::new(run_id, "t", now_ms);
            r.status = status;
            store.put_run(r);
        }
        p
    };
    let done_a = seed("done-a", Some(RunStatus::Completed), 0);
    let done_b = seed("done-b", Some(RunStatus::Failed), 0);
    let live = seed("live", Some(RunStatus::Running), 36_000);
    let old = seed("orphan-old", None, 36_000);
    let young = seed("orphan-young", None, 0);
    // `rm -f` cannot remove a directory: this run's delete fails inside the batch.
    let stuck = journal_paths("stuck", Some(&dir)).unwrap();
    std::fs::create_dir(&stuck.journal).unwrap();
    store.put_run({
        let mut r = RunRecord::new("stuck", "t", now_ms);
        r.status = RunStatus::Aborted;
        r
    });

    let shell = Shell::default();
    let options = PruneOptions {
        dir: Some(dir.clone()),
        ..PruneOptions::new(now_ms)
    };
    let report = prune_journals(&shell, &store, &options).await;

    assert_eq!(report.deleted, ["done-a", "done-b", "orphan-old"]);
    let kept: Vec<(String, KeptReason)> = report
        .kept
        .iter()
        .map(|k| (k.run_id.clone().unwrap(), k.reason))
        .collect();
    assert_eq!(
        kept,
        [
            ("live".to_string(), KeptReason::NonTerminal),
            ("orphan-young".to_string(), KeptReason::OrphanTooRecent),
            ("stuck".to_string(), KeptReason::DeleteFailed),
        ]
    );
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].stage, PruneStage::Delete);
    assert_eq!(report.failures[0].message, "rm exited 1");
    // One listing (the age listing names every file), and one script for all four deletions.
    assert_eq!(shell.commands.lock().unwrap().len(), 2);
    for p in [&done_a, &done_b, &old] {
        assert!(!Path::new(&p.journal).exists() && !Path::new(&p.stderr).exists());
    }
    for p in [&live, &young] {
        assert!(Path::new(&p.journal).exists() && Path::new(&p.stderr).exists());
    }
    assert!(Path::new(&stuck.journal).is_dir());
}
