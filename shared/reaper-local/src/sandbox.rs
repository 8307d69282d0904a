//! One sandbox: running commands and starting journaled agents in it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use reaper_core::journal::{journal_paths, journaled_command};
use reaper_core::{ExecOptions, ExecOutput, SandboxError, SandboxHandle};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::watch;

use crate::keeper;
use crate::meta::{read_metadata, write_metadata, AgentRecord, SandboxMetadata};
use crate::process::{
    group_alive, kill_below_keeper, signal_group, start_time, SANDBOX_MARKER_ENV,
};
use crate::provider::Shared;

/// A handle to one live sandbox. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LocalSandbox {
    shared: Arc<Shared>,
    id: String,
    dir: PathBuf,
    work_dir: PathBuf,
    journal_dir: String,
    path: String,
}

impl LocalSandbox {
    pub(crate) fn new(shared: Arc<Shared>, dir: PathBuf, meta: SandboxMetadata) -> Self {
        let path = meta
            .path
            .clone()
            .unwrap_or_else(|| shared.options.path.clone());
        LocalSandbox {
            id: meta.id,
            work_dir: dir.join("work"),
            dir,
            journal_dir: meta.journal_dir,
            path,
            shared,
        }
    }

    /// The sandbox id (also [`SandboxHandle::id`], without importing the trait).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `<root>/<id>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where every command runs.
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// This sandbox's journal directory (absolute).
    pub fn journal_dir(&self) -> &str {
        &self.journal_dir
    }

    /// The metadata as stored now (agents recorded so far included).
    pub async fn metadata(&self) -> Result<SandboxMetadata, SandboxError> {
        read_metadata(&self.dir)
            .await?
            .ok_or_else(|| SandboxError::NotFound(self.id.clone()))
    }

    fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .current_dir(&self.work_dir)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", &self.work_dir)
            .env("TMPDIR", &self.dir)
            // Byte-wise, locale-independent output from ls, sort and friends.
            .env("LC_ALL", "C")
            // Inherited by everything it starts: how `destroy` finds a process that left the group.
            .env(SANDBOX_MARKER_ENV, &self.dir)
            .stdin(Stdio::null())
            // Its own group, so a timeout or destroy reaches everything it forked.
            .process_group(0);
        cmd
    }

    fn spawn_error(&self, what: &str, e: std::io::Error) -> SandboxError {
        if !self.work_dir.exists() {
            return SandboxError::NotFound(self.id.clone());
        }
        SandboxError::Other(format!("cannot start {what} in sandbox {}: {e}", self.id))
    }

    /// Starts `agent_command` under the journaled wrapper (its stdout to the run's journal, its
    /// stderr to the sidecar, then the nonced exit sentinel), detached: it leads its own process
    /// group, keeps running after this returns and after the caller's runtime ends, and is
    /// recorded in the metadata so [`destroy`](reaper_core::SandboxProvider::destroy) kills it.
    /// `journal_dir` defaults to the sandbox's.
    pub async fn start_agent(
        &self,
        run_id: &str,
        agent_command: &str,
        journal_dir: Option<&str>,
    ) -> Result<AgentProcess, SandboxError> {
        let paths = journal_paths(run_id, Some(journal_dir.unwrap_or(&self.journal_dir)))
            .map_err(|e| SandboxError::Refused(format!("cannot start agent: {e}")))?;
        let lock = self.shared.lock_for(&self.id);
        let _held = lock.lock().await;
        // Checked under the lock: a sandbox destroyed a moment ago must not get a new agent.
        let mut meta = self.metadata().await?;
        let mut command = self.command(&journaled_command(agent_command, &paths));
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let pending = keeper::install(&mut command).map_err(|e| self.spawn_error("agent", e))?;
        let child = command.spawn().map_err(|e| self.spawn_error("agent", e))?;
        let pgid = child
            .id()
            .ok_or_else(|| SandboxError::Other("agent exited before its pid was read".into()))?
            as i32;
        let started = match pending.spawned() {
            Ok(mut report) => report.command_pid().await.map(|pid| (pid, report)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the agent keeper's report");
                None
            }
        };
        let Some((pid, mut report)) = started else {
            kill_below_keeper(pgid);
            let _ = signal_group(pgid, Signal::SIGKILL);
            return Err(SandboxError::Other(format!(
                "the keeper of a new agent in sandbox {} died before it reported the agent",
                self.id
            )));
        };
        meta.agents.push(AgentRecord {
            run_id: run_id.to_string(),
            pid,
            pgid,
            start_time: start_time(pgid),
        });
        if let Err(e) = write_metadata(&self.dir, &meta).await {
            // An agent destroy could not find must not keep running.
            kill_below_keeper(pgid);
            let _ = signal_group(pgid, Signal::SIGKILL);
            return Err(e);
        }
        // The keeper itself is not waited for: it lives as long as anything the agent started,
        // and the runtime reaps it whenever it exits.
        drop(child);
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let code = report.exit_code().await;
            let _ = tx.send(Some(code));
        });
        tracing::debug!(sandbox = %self.id, run_id, pid, "agent started");
        Ok(AgentProcess { pid, exit: rx })
    }
}

/// An agent started by [`LocalSandbox::start_agent`].
#[derive(Debug, Clone)]
pub struct AgentProcess {
    /// The agent's wrapper shell's process id.
    pub pid: u32,
    exit: watch::Receiver<Option<Option<i32>>>,
}

impl AgentProcess {
    /// Waits for the wrapper shell to exit (after it wrote the sentinel) and returns its exit
    /// status (128 + N for signal N). The agent's own exit code is in the sentinel.
    pub async fn wait(&mut self) -> Result<i32, SandboxError> {
        let pid = self.pid;
        let lost = || SandboxError::Other(format!("lost track of agent process {pid}"));
        let state = self
            .exit
            .wait_for(Option::is_some)
            .await
            .map_err(|_| lost())?;
        (*state).flatten().ok_or_else(lost)
    }
}

/// Kills everything a command started unless it finished: on a timeout, an output overflow, or
/// the `exec` future being dropped. A finished command's group (its keeper's) stays recorded
/// while something it backgrounded is still alive, so `destroy` kills that too.
struct GroupGuard<'a> {
    shared: &'a Shared,
    id: &'a str,
    pgid: i32,
    finished: bool,
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // Everything below the keeper, wherever it moved; the keeper then exits on its own.
            kill_below_keeper(self.pgid);
        } else if group_alive(self.pgid).unwrap_or(true) {
            return;
        }
        self.shared.untrack_exec(self.id, self.pgid);
    }
}

/// How much of a stream is read at a time. The buffer grows by at most this past what was
/// read, so a stream is never held beyond `limit` plus one chunk, whatever the command prints.
const READ_CHUNK: usize = 64 * 1024;

/// Reads a whole stream, failing as soon as it passes `limit` bytes: the overflow is detected
/// while reading (the rest is never read, and the caller kills the command), so memory stays
/// bounded by the limit however much, and however long a line, the command prints.
async fn read_capped<R: AsyncRead + Unpin>(
    reader: Option<R>,
    limit: usize,
    which: &str,
) -> Result<Vec<u8>, SandboxError> {
    let mut buf = Vec::new();
    let Some(mut reader) = reader else {
        return Ok(buf);
    };
    // The one byte past the limit proves it was crossed.
    let cap = limit.saturating_add(1);
    loop {
        let start = buf.len();
        let room = (cap - start).min(READ_CHUNK);
        if buf.capacity() - start < room {
            // Doubling, but never past `cap`: a 4 MiB limit never allocates 8 MiB.
            let target = (buf.capacity() * 2).max(start + room).min(cap);
            buf.reserve_exact(target - start);
        }
        buf.resize(start + room, 0);
        let n = reader
            .read(&mut buf[start..])
            .await
            .map_err(|e| SandboxError::Other(format!("cannot read command {which}: {e}")))?;
        buf.truncate(start + n);
        if n == 0 {
            return Ok(buf);
        }
        if buf.len() > limit {
            return Err(SandboxError::OutputLimit {
                stream: which.to_string(),
                limit: limit as u64,
            });
        }
    }
}

#[async_trait::async_trait]
impl SandboxHandle for LocalSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    /// Runs `/bin/sh -c command` in the work directory with only `PATH`, `HOME`, `TMPDIR` and
    /// `LC_ALL=C` set, under a keeper. Past `timeout_ms` everything the command started is killed
    /// (wherever it moved) and the call is [`SandboxError::Timeout`]. Background processes a finished command left behind keep
    /// running, as on a remote sandbox, until the sandbox is destroyed; use `start_agent` for
    /// anything meant to outlive a call.
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let mut cmd = self.command(command);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let pending = keeper::install(&mut cmd).map_err(|e| self.spawn_error("command", e))?;
        let mut child = cmd.spawn().map_err(|e| self.spawn_error("command", e))?;
        let pgid = child
            .id()
            .ok_or_else(|| SandboxError::Other("command exited before its pid was read".into()))?
            as i32;
        self.shared.track_exec(&self.id, pgid, start_time(pgid));
        let mut guard = GroupGuard {
            shared: &self.shared,
            id: &self.id,
            pgid,
            finished: false,
        };
        let mut report = pending.spawned().map_err(|e| {
            SandboxError::Other(format!(
                "cannot read the command's keeper in {}: {e}",
                self.id
            ))
        })?;
        let limit = self.shared.options.output_limit;
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        // The keeper is not waited for: it lives as long as anything the command left behind.
        drop(child);
        let lost = || {
            SandboxError::Other(format!(
                "lost the exit status of a command in {}: its keeper was killed",
                self.id
            ))
        };
        let run = async {
            let (out, err) = tokio::try_join!(
                read_capped(stdout, limit, "stdout"),
                read_capped(stderr, limit, "stderr"),
            )?;
            report.command_pid().await.ok_or_else(lost)?;
            let code = report.exit_code().await.ok_or_else(lost)?;
            Ok::<_, SandboxError>((out, err, code))
        };
        let (out, err, code) =
            match tokio::time::timeout(Duration::from_millis(options.timeout_ms), run).await {
                Ok(result) => result?,
                Err(_) => return Err(SandboxError::Timeout(options.timeout_ms)),
            };
        guard.finished = true;
        Ok(ExecOutput {
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: String::from_utf8_lossy(&err).into_owned(),
            exit_code: code,
        })
    }
}
