//! [`DockerSandbox`]: running commands in a sandbox container.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures::StreamExt;
use reaper_core::journal::{journal_paths, journaled_command, shell_quote};
use reaper_core::{ExecOptions, ExecOutput, SandboxError, SandboxHandle};

use crate::counts::Endpoint;
use crate::error::{map, status_of};
use crate::provider::Inner;

/// The environment variable that carries an exec's kill token.
pub const EXEC_TOKEN_ENV: &str = "REAPER_EXEC";

/// Where [`DockerSandbox::start_agent`] records the agents it started, one `<pid> <hex run id>`
/// line each, inside the container: the container is the only place that lives exactly as long
/// as the agents, so a restarted host daemon still finds them.
pub const AGENTS_FILE: &str = "/tmp/.reaper-agents";

/// An agent [`DockerSandbox::start_agent`] started (finished ones included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// The run the agent works for.
    pub run_id: String,
    /// In the container's pid namespace.
    pub pid: u32,
}

/// Kills every process of the sandbox whose environment holds `$EXEC_TOKEN_ENV=$1`: the command
/// of a timed-out exec and everything it started (children inherit the environment, whatever
/// process group or session they moved to). Repeated while it finds some, in case one forked
/// during the scan; bounded. Needs `/proc`, `tr`, `grep` and `kill` in the image.
const KILL_SCRIPT: &str = "t=\"REAPER_EXEC=$1\"; n=0; \
     while [ \"$n\" -lt 3 ]; do found=; \
       for d in /proc/[0-9]*; do \
         if tr '\\0' '\\n' < \"$d/environ\" 2>/dev/null | grep -qxF \"$t\"; then \
           kill -9 \"${d#/proc/}\" 2>/dev/null && found=1; \
         fi; \
       done; \
       [ -z \"$found\" ] && break; n=$((n+1)); \
     done";

/// How long the kill of a timed-out exec may take before it is given up (and logged).
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle to one running sandbox container. Cheap to clone.
#[derive(Clone)]
pub struct DockerSandbox {
    inner: Arc<Inner>,
    /// As the caller named it (recorded in instance records).
    id: String,
    /// The full container id every request uses, so a later container with the same name is
    /// never reached through this handle.
    container: String,
    /// The container's labels when this handle was made (they never change afterwards).
    labels: Arc<HashMap<String, String>>,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("id", &self.id)
            .field("container", &self.container)
            .finish_non_exhaustive()
    }
}

impl DockerSandbox {
    pub(crate) fn new(
        inner: Arc<Inner>,
        id: String,
        container: String,
        labels: HashMap<String, String>,
    ) -> Self {
        DockerSandbox {
            inner,
            id,
            container,
            labels: Arc::new(labels),
        }
    }

    /// A label of the container.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str)
    }

    /// When the sandbox was created (epoch ms), from [`crate::CREATED_AT_LABEL`]; `None` for a
    /// container this provider did not create.
    pub fn created_at(&self) -> Option<i64> {
        self.label(crate::CREATED_AT_LABEL)?.parse().ok()
    }

    /// Starts `agent_command` under the journaled wrapper in the background (journals in
    /// `journal_dir`, else the core's default) and records it in [`AGENTS_FILE`]: one exec.
    /// Returns the agent's pid in the container. The agent outlives the exec (Docker's init
    /// adopts it) and ends with the sandbox.
    pub async fn start_agent(
        &self,
        run_id: &str,
        agent_command: &str,
        journal_dir: Option<&str>,
    ) -> Result<u32, SandboxError> {
        let paths = journal_paths(run_id, journal_dir)
            .map_err(|e| SandboxError::Refused(format!("cannot start agent: {e}")))?;
        let wrapper = journaled_command(agent_command, &paths);
        let script = format!(
            "sh -c {wrapper} >/dev/null 2>&1 </dev/null & pid=$!; \
             printf '%s %s\\n' \"$pid\" {hex} >> {file} || exit 1; echo \"$pid\"",
            wrapper = shell_quote(&wrapper),
            hex = hex(run_id.as_bytes()),
            file = shell_quote(AGENTS_FILE),
        );
        let out = self.exec(&script, ExecOptions::default()).await?;
        let pid = out
            .stdout
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|_| out.exit_code == 0);
        pid.ok_or_else(|| {
            SandboxError::Other(format!(
                "starting agent {run_id:?} in sandbox {} failed (exit {}): {}",
                self.id,
                out.exit_code,
                out.stderr.trim()
            ))
        })
    }

    /// The agents [`start_agent`](Self::start_agent) started here, in start order: one exec.
    /// Lines that are not `<pid> <hex>` (something in the sandbox wrote the file) are skipped.
    pub async fn agents(&self) -> Result<Vec<AgentInfo>, SandboxError> {
        let out = self
            .exec(
                &format!("cat {} 2>/dev/null; true", shell_quote(AGENTS_FILE)),
                ExecOptions::default(),
            )
            .await?;
        Ok(out
            .stdout
            .lines()
            .filter_map(|line| {
                let (pid, run) = line.split_once(' ')?;
                Some(AgentInfo {
                    pid: pid.parse().ok()?,
                    run_id: String::from_utf8(unhex(run)?).ok()?,
                })
            })
            .collect())
    }

    /// The sandbox id (also [`SandboxHandle::id`], without importing the trait).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The full container id.
    pub fn container_id(&self) -> &str {
        &self.container
    }

    /// Creates an exec of `cmd` with `env`: one request.
    async fn create_exec(
        &self,
        cmd: Vec<String>,
        env: Vec<String>,
    ) -> Result<String, SandboxError> {
        self.inner.count(Endpoint::CreateExec);
        let config = CreateExecOptions {
            cmd: Some(cmd),
            env: Some(env),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(false),
            tty: Some(false),
            ..Default::default()
        };
        match self.inner.docker.create_exec(&self.container, config).await {
            Ok(created) => Ok(created.id),
            Err(e) => Err(match status_of(&e) {
                Some((404, _)) => SandboxError::NotFound(self.id.clone()),
                // A stopped container is gone for a sandbox (resume says `None` for it too).
                Some((409, m)) if m.contains("not running") => {
                    SandboxError::NotFound(self.id.clone())
                }
                Some((409, m)) => SandboxError::Refused(format!(
                    "cannot run a command in sandbox {}: {m}",
                    self.id
                )),
                _ => map(e, &self.id, "exec"),
            }),
        }
    }

    /// Starts exec `exec_id` attached and reads its output to the end, failing as soon as a
    /// stream passes the limit (the rest is never read).
    async fn read_output(&self, exec_id: &str) -> Result<(Vec<u8>, Vec<u8>), SandboxError> {
        self.inner.count(Endpoint::StartExec);
        let start = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: None,
        };
        let output = match self.inner.docker.start_exec(exec_id, Some(start)).await {
            Ok(StartExecResults::Attached { output, .. }) => output,
            Ok(StartExecResults::Detached) => {
                return Err(SandboxError::Other(format!(
                    "exec in sandbox {} started detached; its output is lost",
                    self.id
                )))
            }
            Err(e) if matches!(status_of(&e), Some((404, _))) => {
                return Err(SandboxError::NotFound(self.id.clone()))
            }
            Err(e) => return Err(map(e, &self.id, "start exec")),
        };
        let limit = self.inner.options.output_limit;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut output = output;
        while let Some(item) = output.next().await {
            let (which, message) = match item.map_err(|e| map(e, &self.id, "read exec output"))? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    ("stdout", message)
                }
                LogOutput::StdErr { message } => ("stderr", message),
                LogOutput::StdIn { .. } => continue,
            };
            let buf = if which == "stdout" {
                &mut out
            } else {
                &mut err
            };
            if buf.len() + message.len() > limit {
                return Err(SandboxError::OutputLimit {
                    stream: which.to_string(),
                    limit: limit as u64,
                });
            }
            buf.extend_from_slice(&message);
        }
        Ok((out, err))
    }

    /// The exit code of a finished exec. The output stream can end a moment before the daemon
    /// records the exit, so a still-running answer is asked again, with a short backoff, for as
    /// long as the caller's timeout allows.
    async fn exit_code(&self, exec_id: &str) -> Result<i32, SandboxError> {
        let mut backoff = Duration::from_millis(2);
        loop {
            self.inner.count(Endpoint::InspectExec);
            let info = match self.inner.docker.inspect_exec(exec_id).await {
                Ok(info) => info,
                Err(e) if matches!(status_of(&e), Some((404, _))) => {
                    return Err(SandboxError::NotFound(self.id.clone()))
                }
                Err(e) => return Err(map(e, &self.id, "inspect exec")),
            };
            match (info.running, info.exit_code) {
                (Some(false), Some(code)) => {
                    return i32::try_from(code).map_err(|_| {
                        SandboxError::Other(format!(
                            "exec in sandbox {} reported exit code {code}, outside any process's \
                             range",
                            self.id
                        ))
                    })
                }
                _ => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(100));
                }
            }
        }
    }
}

/// Kills a started exec's processes unless it finished: on a timeout, an output overflow, a
/// broken stream, or the `exec` future being dropped (then from a spawned task, since a drop
/// cannot wait).
struct KillGuard {
    sandbox: DockerSandbox,
    token: String,
    armed: AtomicBool,
}

impl KillGuard {
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    async fn kill_now(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            kill(self.sandbox.clone(), self.token.clone()).await;
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return;
        }
        let (sandbox, token) = (self.sandbox.clone(), std::mem::take(&mut self.token));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(kill(sandbox, token));
            }
            Err(_) => tracing::warn!(target: "reaper", sandbox = %sandbox.id,
                "an abandoned exec could not be killed (no runtime); destroy reaches it"),
        }
    }
}

/// Runs [`KILL_SCRIPT`] for `token` and waits for it: two or three requests. A failure is logged,
/// not returned: the caller's own error (the timeout) is the answer, and `destroy` still kills
/// everything in the container.
async fn kill(sandbox: DockerSandbox, token: String) {
    let cmd = ["sh", "-c", KILL_SCRIPT, "sh", &token]
        .map(String::from)
        .to_vec();
    let run = async {
        let exec_id = sandbox.create_exec(cmd, Vec::new()).await?;
        sandbox.read_output(&exec_id).await?;
        Ok::<_, SandboxError>(())
    };
    let failure = match tokio::time::timeout(KILL_TIMEOUT, run).await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} s", KILL_TIMEOUT.as_secs()),
    };
    tracing::warn!(target: "reaper", sandbox = %sandbox.id, error = %failure,
        "could not kill an exec's processes; they run until the sandbox is destroyed");
}

/// A fresh token naming one exec's processes: 32 hex digits from the standard library's
/// randomly seeded hasher and a process-wide counter (unique, not secret: guessing one only
/// lets a process get itself killed).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn exec_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut token = String::with_capacity(32);
    for _ in 0..2 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_u32(std::process::id());
        token.push_str(&format!("{:016x}", hasher.finish()));
    }
    token
}

#[async_trait::async_trait]
impl SandboxHandle for DockerSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    /// Runs `sh -c command` as a Docker exec in the container's working directory, with the
    /// container's environment plus `LC_ALL=C` and the kill token, and no stdin. Past
    /// `timeout_ms` every process carrying the token is killed and the call is
    /// [`SandboxError::Timeout`]; past the output limit, likewise, and the call is
    /// [`SandboxError::OutputLimit`]. Processes a finished command left in the background keep
    /// running, as on any remote sandbox, until the sandbox is destroyed.
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let guard = KillGuard {
            sandbox: self.clone(),
            token: exec_token(),
            armed: AtomicBool::new(false),
        };
        let run = async {
            let cmd = ["sh", "-c", command].map(String::from).to_vec();
            let env = vec![
                // Byte-wise, locale-independent output from ls, sort and friends.
                "LC_ALL=C".to_string(),
                format!("{EXEC_TOKEN_ENV}={}", guard.token),
            ];
            let exec_id = self.create_exec(cmd, env).await?;
            guard.arm();
            let (out, err) = self.read_output(&exec_id).await?;
            let exit_code = self.exit_code(&exec_id).await?;
            Ok::<_, SandboxError>((out, err, exit_code))
        };
        let result = tokio::time::timeout(Duration::from_millis(options.timeout_ms), run).await;
        let result = match result {
            Ok(Ok(done)) => {
                guard.disarm();
                return Ok(ExecOutput {
                    stdout: String::from_utf8_lossy(&done.0).into_owned(),
                    stderr: String::from_utf8_lossy(&done.1).into_owned(),
                    exit_code: done.2,
                });
            }
            // Gone: nothing left to kill.
            Ok(Err(e @ SandboxError::NotFound(_))) => {
                guard.disarm();
                Err(e)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SandboxError::Timeout(options.timeout_ms)),
        };
        guard.kill_now().await;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_survive_the_hex_of_the_agents_file() {
        for id in ["run-1", "a;b $(c)\n'd'", "日本語", ""] {
            assert_eq!(unhex(&hex(id.as_bytes())).unwrap(), id.as_bytes());
        }
        for bad in ["abc", "zz", "0g"] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn exec_tokens_are_distinct_hex() {
        let a = exec_token();
        let b = exec_token();
        assert_ne!(a, b);
        for t in [&a, &b] {
            assert_eq!(t.len(), 32);
            assert!(t.bytes().all(|c| c.is_ascii_hexdigit()));
        }
    }
}
