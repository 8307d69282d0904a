//! How many processes a real prune costs: 1,000 journals (667 deletable) pruned through the
//! real shell of a local sandbox, with `ls`, `stat` and `rm` wrappers first on the sandbox's
//! `PATH` that log every call before running the real command. Every `exec` is one `sh`; every
//! logged call one more process (a wrapper `exec`s the real command, so it is one process).

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::{age_file, now_ms, provider, run_record};
use reaper_core::journal::{journal_paths, shell_quote};
use reaper_core::memory::MemoryStore;
use reaper_core::prune::{prune_journals, KeptReason, PruneOptions};
use reaper_core::{ExecOptions, ExecOutput, RunStatus, SandboxError, SandboxHandle};
use reaper_local::{CreateOptions, LocalSandbox};

/// Counts the `exec` calls that reach the sandbox (each one is a `sh` process).
struct Counting {
    inner: LocalSandbox,
    execs: AtomicUsize,
}

#[async_trait::async_trait]
impl SandboxHandle for Counting {
    fn id(&self) -> &str {
        self.inner.id()
    }
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.execs.fetch_add(1, Ordering::SeqCst);
        self.inner.exec(command, options).await
    }
}

/// The real command's absolute path, looked up before `PATH` is changed.
fn real(command: &str) -> PathBuf {
    ["/usr/bin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(command))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("no {command} in /usr/bin or /bin"))
}

/// A directory of wrappers that append their name to `log`, then become the real command.
fn logging_wrappers(root: &Path, log: &Path, commands: &[&str]) -> PathBuf {
    let dir = root.join("wrappers");
    std::fs::create_dir_all(&dir).unwrap();
    for command in commands {
        let script = format!(
            "#!/bin/sh\nprintf '%s\\n' {name} >> {log}\nexec {real} \"$@\"\n",
            name = shell_quote(command),
            log = shell_quote(&log.display().to_string()),
            real = shell_quote(&real(command).display().to_string()),
        );
        let path = dir.join(command);
        std::fs::write(&path, script).unwrap();
        let mut permissions = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&path, permissions).unwrap();
    }
    dir
}

fn calls(log: &Path, command: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| *line == command)
        .count()
}

#[tokio::test]
async fn pruning_1000_journals_with_667_deletable_takes_at_most_5_processes_in_all() {
    let (root, provider) = provider();
    let log = root.path().join("calls.log");
    let wrappers = logging_wrappers(root.path(), &log, &["ls", "stat", "rm"]);
    let sbx = provider
        .create(CreateOptions {
            path: Some(format!("{}:/usr/bin:/bin", wrappers.display())),
            ..Default::default()
        })
        .await
        .unwrap();
    let dir = sbx.journal_dir().to_string();

    // A third terminal, a third running, a third orphans two hours old: 667 deletable.
    let n = 1_000;
    let runs = MemoryStore::new();
    let mut expected_deleted = Vec::new();
    for i in 0..n {
        let run_id = format!("run-{i:04}");
        let paths = journal_paths(&run_id, Some(&dir)).unwrap();
        std::fs::write(&paths.journal, "{\"delta\":\"x\"}\n").unwrap();
        std::fs::write(&paths.stderr, "").unwrap();
        match i % 3 {
            0 => runs.put_run(run_record(&run_id, RunStatus::Completed)),
            1 => runs.put_run(run_record(&run_id, RunStatus::Running)),
            _ => {
                age_file(&paths.journal, 7_200);
                age_file(&paths.stderr, 7_200);
            }
        }
        if i % 3 != 1 {
            expected_deleted.push(run_id);
        }
    }
    assert_eq!(expected_deleted.len(), 667);
    std::fs::remove_file(&log).ok();

    let handle = Counting {
        inner: sbx.clone(),
        execs: AtomicUsize::new(0),
    };
    let options = PruneOptions {
        dir: Some(dir.clone()),
        max_deletes: n,
        ..PruneOptions::new(now_ms())
    };
    let started = Instant::now();
    let report = prune_journals(&handle, &runs, &options).await;
    let wall = started.elapsed();

    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.deleted, expected_deleted);
    assert_eq!(report.kept.len(), 333);
    assert!(report
        .kept
        .iter()
        .all(|k| k.reason == KeptReason::NonTerminal));
    for i in 0..n {
        let paths = journal_paths(&format!("run-{i:04}"), Some(&dir)).unwrap();
        let kept = i % 3 == 1;
        assert_eq!(Path::new(&paths.journal).exists(), kept, "run-{i:04}");
        assert_eq!(Path::new(&paths.stderr).exists(), kept, "run-{i:04}");
    }

    let execs = handle.execs.load(Ordering::SeqCst);
    let (ls, stat, rm) = (calls(&log, "ls"), calls(&log, "stat"), calls(&log, "rm"));
    // The wrappers really ran: one age listing, which named every file, so no `ls`.
    assert_eq!((ls, stat), (0, 1), "the logging wrappers were not on PATH");
    println!(
        "prune {n} journals (667 deletable) through real sh: wall {:.1} ms, {execs} execs, \
         {rm} rm processes, {} processes in all (one sh per exec, ls, stat, rm)",
        wall.as_secs_f64() * 1e3,
        execs + ls + stat + rm,
    );
    assert!((1..=5).contains(&rm), "{rm} rm processes (reference: 667)");
    assert!(execs <= 5, "{execs} execs (reference: 669)");
    let processes = execs + ls + stat + rm;
    assert!(
        processes <= 5,
        "{processes} processes (reference: 669 sh, ls, stat and 667 rm)"
    );
}
