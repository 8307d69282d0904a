//! Helpers shared by the CLI tests: run the real binary, seed a real database and real local
//! sandboxes the way an application's chat routes do.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use reaper_core::{
    Clock, EpochMs, NewRun, RunPatch, RunStore, SandboxInstanceRecord, SandboxInstanceStore,
    SandboxProvider,
};
use reaper_local::{CreateOptions, LocalSandbox, LocalSandboxProvider, SystemClock};
use reaper_sqlite::SqliteStore;

pub const MINUTE: i64 = 60_000;

/// The `reaper` binary with a clean environment: no `REAPER_*` or `RUST_LOG` from the caller.
pub fn reaper() -> Command {
    reaper_at(Path::new(env!("CARGO_BIN_EXE_reaper")))
}

/// Copies the `reaper` binary to `to`, executable by anyone. The copy is written by a child
/// `cp`, never through a file descriptor of this process: another test thread forking while
/// this process held the new file open for writing would make executing it fail with
/// ETXTBSY ("Text file busy") until that child execs.
pub fn copy_reaper_binary(to: &Path) {
    let status = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_reaper"))
        .arg(to)
        .status()
        .expect("cp runs");
    assert!(
        status.success(),
        "copying the reaper binary failed: {status}"
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// [`reaper`], for a copy of the binary at `bin`.
pub fn reaper_at(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null());
    cmd
}

/// Runs to completion and returns (exit code, stdout, stderr).
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("the reaper binary runs");
    (
        status.code().expect("exited with a code, not a signal"),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

pub fn now() -> EpochMs {
    SystemClock.now_ms()
}

/// A database and a sandbox root in a fresh temporary directory.
pub struct Site {
    pub tmp: tempfile::TempDir,
    pub db: PathBuf,
    pub root: PathBuf,
    pub store: SqliteStore,
    pub provider: LocalSandboxProvider,
}

impl Site {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("reaper.db");
        let root = tmp.path().join("sandboxes");
        std::fs::create_dir_all(&root).unwrap();
        let store = SqliteStore::open(&db).unwrap();
        let provider = LocalSandboxProvider::with_root(&root);
        Site {
            tmp,
            db,
            root,
            store,
            provider,
        }
    }

    /// `reaper <command> --db … --sandboxes …`.
    pub fn reaper(&self, command: &str) -> Command {
        let mut cmd = reaper();
        cmd.arg(command)
            .arg("--db")
            .arg(&self.db)
            .arg("--sandboxes")
            .arg(&self.root);
        cmd
    }

    /// `reaper status --db …` (it takes no sandbox root).
    pub fn reaper_status(&self) -> Command {
        let mut cmd = reaper();
        cmd.arg("status").arg("--db").arg(&self.db);
        cmd
    }

    /// A run in its own sandbox, as a chat route writes it: create, instance record, agent,
    /// detach with the sandbox key `detached_ago` ms ago. With `wait`, the agent has exited (and
    /// written its sentinel) when this returns.
    pub async fn detached_run(
        &self,
        run_id: &str,
        agent: Option<&str>,
        wait: bool,
        detached_ago: i64,
    ) -> LocalSandbox {
        let thread = format!("thread-{run_id}");
        self.store
            .create_or_resume(NewRun {
                run_id: run_id.into(),
                thread_id: thread.clone(),
                started_at: now() - detached_ago - 1000,
                status: None,
            })
            .await
            .unwrap();
        let sandbox = self
            .provider
            .create(CreateOptions::default())
            .await
            .unwrap();
        let id = reaper_core::SandboxHandle::id(&sandbox).to_string();
        let key = format!("local:{thread}");
        SandboxInstanceStore::upsert(
            &self.store,
            SandboxInstanceRecord {
                key: key.clone(),
                provider: self.provider.name().into(),
                provider_sandbox_id: id,
                latest_snapshot_id: None,
                thread_id: thread,
                latest_run_id: Some(run_id.into()),
                updated_at: now(),
            },
        )
        .await
        .unwrap();
        if let Some(agent) = agent {
            let mut process = sandbox.start_agent(run_id, agent, None).await.unwrap();
            if wait {
                process.wait().await.unwrap();
            }
        }
        self.store
            .update(run_id, RunPatch::detach(now() - detached_ago, Some(key)))
            .await
            .unwrap();
        sandbox
    }

    pub async fn sandbox_exists(&self, sandbox: &LocalSandbox) -> bool {
        self.provider
            .open(reaper_core::SandboxHandle::id(sandbox))
            .await
            .unwrap()
            .is_some()
    }

    /// Destroys every sandbox left, so no test leaves an agent running.
    pub async fn teardown(&self) {
        for entry in std::fs::read_dir(&self.root).unwrap().flatten() {
            let id = entry.file_name().into_string().unwrap();
            let _ = std::fs::remove_file(entry.path().join(reaper_local::DESTROY_FAILS_FLAG));
            let _ = self.provider.destroy(&id).await;
        }
    }
}

/// A spawned process whose stdout lines arrive on a channel, so a test waits for a line (with a
/// bound) instead of sleeping.
pub struct Spawned {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Spawned {
    /// Stdout lines arrive as they are; stderr lines with a `stderr: ` prefix.
    pub fn start(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let forward = |reader: Box<dyn std::io::Read + Send>, prefix: &'static str| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(reader).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(format!("{prefix}{line}")).is_err() {
                        break;
                    }
                }
            });
        };
        forward(Box::new(child.stdout.take().unwrap()), "");
        forward(Box::new(child.stderr.take().unwrap()), "stderr: ");
        Spawned {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits up to `within` for a line matching `pred`; every line read is kept in `seen`.
    pub fn wait_for(&mut self, within: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Some(line);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// Waits up to `within` for the process to exit, then drains the rest of stdout.
    pub fn exit_within(&mut self, within: Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(line);
                }
                return status.code();
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                return None;
            }
            // Polling a child's exit status: there is no portable blocking wait with a timeout.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the process wrote to stderr so far (and, once it exited, all of it). Kills it if it
    /// is still running, so a failing test never leaves it behind.
    pub fn stderr(&mut self) -> String {
        if self.child.try_wait().unwrap().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        self.seen
            .iter()
            .filter_map(|l| l.strip_prefix("stderr: "))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Processes whose working directory or command line mentions `dir` and that are not zombies.
pub fn processes_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap_or_default();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let path = entry.path();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .map(|(_, r)| r.chars().next())
            .unwrap_or(None);
        if matches!(state, Some('Z') | Some('X') | None) {
            continue;
        }
        let cwd = std::fs::read_link(path.join("cwd"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cmdline = std::fs::read(path.join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cwd.starts_with(&dir) || cmdline.contains(&dir) {
            found.push(format!("pid {name}: cwd {cwd}: {cmdline}"));
        }
    }
    found
}

/// A finished agent that prints two deltas.
pub const HELLO: &str = r#"printf '{"delta":"Hello"}\n{"delta":" there"}\n'"#;
/// An agent that keeps producing.
pub const TICKING: &str = r#"while :; do printf '{"delta":"."}\n'; sleep 0.2; done"#;

/// The published JSON Schema of the sweep report.
pub fn schema() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reaper-core/schema/sweep-report.schema.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Asserts `report` is valid against the published schema, listing every violation.
pub fn assert_valid(report: &serde_json::Value) {
    let schema = schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\nin {report:#}");
}
