//! The fake sandbox world: in-memory sandboxes holding one journal per run, a provider over them,
//! and a handle that interprets exactly the commands the core's probe and replay build (checked
//! byte for byte against the core's own builders, so a changed template is noticed, never
//! silently misread).
//!
//! The probe and the drive are the core's real [`reaper_core::probe::JournalExitProbe`] and
//! [`reaper_core::replay::JournalReplayDrive`] over this world, so the sweep is exercised with
//! the same code a deployment runs; only the sandbox is simulated.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use base64::Engine;
use futures::Stream;
use reaper_core::domain::Chunk;
use reaper_core::error::{DriveError, SandboxError};
use reaper_core::journal::{exit_probe_command, journal_read_page_command, JournalPaths};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    CancellationToken, ChunkStream, Drive, DriveRequest, ExecOptions, ExecOutput, SandboxHandle,
    SandboxProvider,
};

use crate::chaos::Faults;
use crate::trace::{DriverGuard, Trace};

/// The provider name every instance record of the simulation carries.
pub const PROVIDER: &str = "sim";

#[derive(Debug, Default)]
struct Sandbox {
    alive: bool,
    /// The provider rejects every destroy of this one (a stuck VM): it leaks until it stops.
    refuses_destroy: bool,
    journals: BTreeMap<String, Vec<u8>>,
    /// The runs that use it (ground truth, for the live-use check at destroy time).
    users: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    sandboxes: BTreeMap<String, Sandbox>,
    /// Every journal path the core may ask about, by path.
    paths: BTreeMap<String, JournalPaths>,
}

/// Every sandbox of the simulation. Clones share it.
#[derive(Debug, Clone)]
pub struct World {
    state: Arc<Mutex<State>>,
    /// The raw store (no chaos): what is true at the moment of a destroy.
    store: MemoryStore,
    trace: Trace,
}

impl World {
    pub fn new(store: MemoryStore, trace: Trace) -> Self {
        World {
            state: Arc::default(),
            store,
            trace,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add_sandbox(&self, id: &str, refuses_destroy: bool) {
        self.lock().sandboxes.insert(
            id.to_string(),
            Sandbox {
                alive: true,
                refuses_destroy,
                ..Sandbox::default()
            },
        );
    }

    /// Declares that `run_id` uses sandbox `id` and writes its journal at `paths`.
    pub fn add_user(&self, id: &str, run_id: &str, paths: JournalPaths) {
        let mut s = self.lock();
        s.paths.insert(paths.journal.clone(), paths);
        if let Some(sandbox) = s.sandboxes.get_mut(id) {
            sandbox.users.push(run_id.to_string());
        }
    }

    /// The agent's write: appends bytes to a journal, if the sandbox is still alive. Returns
    /// whether it was written.
    pub fn write(&self, id: &str, journal: &str, bytes: &[u8]) -> bool {
        let mut s = self.lock();
        match s.sandboxes.get_mut(id) {
            Some(sandbox) if sandbox.alive => {
                sandbox
                    .journals
                    .entry(journal.to_string())
                    .or_default()
                    .extend_from_slice(bytes);
                true
            }
            _ => false,
        }
    }

    pub fn journal(&self, id: &str, journal: &str) -> Vec<u8> {
        self.lock()
            .sandboxes
            .get(id)
            .and_then(|s| s.journals.get(journal).cloned())
            .unwrap_or_default()
    }

    pub fn is_alive(&self, id: &str) -> bool {
        self.lock().sandboxes.get(id).is_some_and(|s| s.alive)
    }

    pub fn refuses_destroy(&self, id: &str) -> bool {
        self.lock()
            .sandboxes
            .get(id)
            .is_some_and(|s| s.refuses_destroy)
    }

    pub fn users(&self, id: &str) -> Vec<String> {
        self.lock()
            .sandboxes
            .get(id)
            .map(|s| s.users.clone())
            .unwrap_or_default()
    }

    pub fn sandbox_ids(&self) -> Vec<String> {
        self.lock().sandboxes.keys().cloned().collect()
    }

    /// Tears a sandbox down, first checking invariant (2): no run that uses it may be live.
    fn destroy(&self, id: &str, by: &str) -> Result<(), SandboxError> {
        let users = {
            let s = self.lock();
            let Some(sandbox) = s.sandboxes.get(id) else {
                return Ok(()); // never existed: already gone
            };
            if !sandbox.alive {
                return Ok(());
            }
            if sandbox.refuses_destroy {
                return Err(SandboxError::Refused(format!("sandbox {id} is stuck")));
            }
            sandbox.users.clone()
        };
        let runs = self.store.all_runs();
        for user in users {
            if let Some(run) = runs.iter().find(|r| r.run_id == user) {
                if !run.status.is_terminal() {
                    self.trace.violate(
                        "live-sandbox-destroyed",
                        format!(
                            "{by} destroyed sandbox {id} while its run {user} was {} \
                             (detachedSince {:?}, cancel {:?})",
                            run.status, run.detached_since, run.cancel_requested
                        ),
                    );
                }
            }
        }
        if let Some(sandbox) = self.lock().sandboxes.get_mut(id) {
            sandbox.alive = false;
        }
        self.trace.event(format!("{by} destroys sandbox {id}"));
        Ok(())
    }

    /// Runs one of the two commands the probe and the replay send; anything else is an error
    /// (and a violation: the core sent a command this simulation does not know).
    fn exec(&self, id: &str, command: &str) -> Result<ExecOutput, SandboxError> {
        let bytes = {
            let s = self.lock();
            let Some(sandbox) = s.sandboxes.get(id).filter(|s| s.alive) else {
                return Err(SandboxError::NotFound(id.to_string()));
            };
            let Some(paths) = quoted_path(command).and_then(|p| s.paths.get(p)) else {
                drop(s);
                return Err(self.unknown_command(command));
            };
            let journal = sandbox
                .journals
                .get(&paths.journal)
                .map(Vec::as_slice)
                .unwrap_or_default();
            match interpret(command, paths, journal) {
                Some(bytes) => bytes,
                None => {
                    drop(s);
                    return Err(self.unknown_command(command));
                }
            }
        };
        Ok(ExecOutput {
            stdout: wrap76(&base64::engine::general_purpose::STANDARD.encode(bytes)),
            stderr: String::new(),
            exit_code: 0,
        })
    }

    fn unknown_command(&self, command: &str) -> SandboxError {
        self.trace.violate(
            "unknown-command",
            format!("the core sent a command the simulation does not interpret: {command}"),
        );
        SandboxError::Other(format!("unsupported command: {command}"))
    }
}

/// The first single-quoted word of a command (the journal path; simulation paths hold no quote).
fn quoted_path(command: &str) -> Option<&str> {
    let start = command.find('\'')? + 1;
    let len = command[start..].find('\'')?;
    Some(&command[start..start + len])
}

/// What `command` prints (before base64) for `journal`, if it is one of the core's reads of
/// `paths` — rebuilt with the core's own builders and compared byte for byte.
fn interpret(command: &str, paths: &JournalPaths, journal: &[u8]) -> Option<Vec<u8>> {
    let rest = command.strip_prefix("tail -c ")?;
    let number: String = rest[1..].chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = number.parse().ok()?;
    if rest.starts_with('-') {
        // The probe: the last n bytes.
        (exit_probe_command(paths, n).ok()? == command).then(|| {
            let from = journal.len().saturating_sub(n as usize);
            journal[from..].to_vec()
        })
    } else {
        // The replay's page: from byte k-1, at most `head -c` bytes.
        let from = n.checked_sub(1)?;
        let max: u64 = command
            .rsplit("head -c ")
            .next()?
            .split(' ')
            .next()?
            .parse()
            .ok()?;
        (journal_read_page_command(paths, from, max).ok()? == command).then(|| {
            let start = (from as usize).min(journal.len());
            let end = start.saturating_add(max as usize).min(journal.len());
            journal[start..end].to_vec()
        })
    }
}

/// GNU `base64` wraps at 76 columns; the core must undo it.
fn wrap76(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 76 + 1);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && i % 76 == 0 {
            out.push('\n');
        }
        out.push(c);
    }
    if !s.is_empty() {
        out.push('\n');
    }
    out
}

/// One actor's provider over the world, with faults on `resume`, `exec` and `destroy`.
#[derive(Debug, Clone)]
pub struct SimProvider {
    pub world: World,
    pub actor: Arc<str>,
    pub faults: Faults,
}

impl SimProvider {
    fn fail(&self, op: &str, id: &str, when: &str) -> SandboxError {
        self.world
            .trace
            .fault(format!("{} {op}({id}) fails {when}", self.actor));
        SandboxError::Unreachable(format!("injected {op} failure {when} the call"))
    }
}

#[async_trait::async_trait]
impl SandboxProvider for SimProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        self.faults.jitter().await;
        if self.faults.strike() {
            return Err(self.fail("resume", id, "before"));
        }
        let alive = self.world.is_alive(id);
        self.faults.jitter().await;
        Ok(alive.then(|| {
            Arc::new(SimHandle {
                provider: self.clone(),
                id: id.to_string(),
            }) as Arc<dyn SandboxHandle>
        }))
    }

    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        self.faults.jitter().await;
        if self.faults.strike() {
            return Err(self.fail("destroy", id, "before"));
        }
        self.world.destroy(id, &self.actor)?;
        self.faults.jitter().await;
        if self.faults.strike() {
            return Err(self.fail("destroy", id, "after"));
        }
        Ok(())
    }
}

/// A handle to one simulated sandbox.
#[derive(Debug)]
pub struct SimHandle {
    provider: SimProvider,
    id: String,
}

#[async_trait::async_trait]
impl SandboxHandle for SimHandle {
    fn id(&self) -> &str {
        &self.id
    }

    async fn exec(&self, command: &str, _options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let p = &self.provider;
        p.faults.jitter().await;
        if p.faults.strike() {
            p.world
                .trace
                .fault(format!("{} exec in {} fails", p.actor, self.id));
            return Err(SandboxError::Timeout(30_000));
        }
        let out = p.world.exec(&self.id, command);
        p.faults.jitter().await;
        out
    }
}

/// A [`Drive`] that records, for the two-drivers invariant, while each of its streams is alive.
pub struct TrackedDrive {
    pub inner: Arc<dyn Drive>,
    pub actor: Arc<str>,
    pub trace: Trace,
}

impl std::fmt::Debug for TrackedDrive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackedDrive")
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

impl Drive for TrackedDrive {
    fn drive(
        &self,
        request: DriveRequest,
        signal: CancellationToken,
    ) -> Result<ChunkStream, DriveError> {
        let guard = self.trace.start_driving(&request.run_id, &self.actor);
        let inner = self.inner.drive(request, signal)?;
        Ok(Box::pin(Tracked {
            inner,
            _guard: guard,
        }))
    }
}

/// A stream that stays "driving" until it is dropped.
struct Tracked {
    inner: ChunkStream,
    _guard: DriverGuard,
}

impl Stream for Tracked {
    type Item = Result<Chunk, DriveError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::VirtualTime;
    use reaper_core::journal::journal_paths;

    fn world() -> (World, JournalPaths) {
        let world = World::new(MemoryStore::new(), Trace::new(VirtualTime::new(0)));
        let paths = journal_paths("run-1", None).unwrap();
        world.add_sandbox("sbx", false);
        world.add_user("sbx", "run-1", paths.clone());
        world.write("sbx", &paths.journal, b"line one\nline two\n");
        (world, paths)
    }

    fn decode(out: ExecOutput) -> Vec<u8> {
        reaper_core::journal::decode_base64_frame(&out.stdout).unwrap()
    }

    #[test]
    fn the_probe_command_reads_the_journal_tail() {
        let (world, paths) = world();
        let out = world
            .exec("sbx", &exit_probe_command(&paths, 9).unwrap())
            .unwrap();
        assert_eq!(decode(out), b"line two\n");
    }

    #[test]
    fn the_page_command_reads_a_bounded_slice_from_an_offset() {
        let (world, paths) = world();
        let cmd = journal_read_page_command(&paths, 5, 6).unwrap();
        assert_eq!(decode(world.exec("sbx", &cmd).unwrap()), b"one\nli");
        let past_end = journal_read_page_command(&paths, 100, 6).unwrap();
        assert_eq!(decode(world.exec("sbx", &past_end).unwrap()), b"");
    }

    #[test]
    fn an_unknown_command_is_refused_and_reported() {
        let (world, paths) = world();
        let cmd = format!("cat '{}'", paths.journal);
        assert!(world.exec("sbx", &cmd).is_err());
        assert_eq!(world.trace.violations()[0].invariant, "unknown-command");
    }

    #[test]
    fn destroying_a_sandbox_a_live_run_uses_is_a_violation() {
        let (world, _) = world();
        world
            .store
            .put_run(reaper_core::domain::RunRecord::new("run-1", "t", 0));
        world.destroy("sbx", "test").unwrap();
        assert_eq!(
            world.trace.violations()[0].invariant,
            "live-sandbox-destroyed"
        );
        assert!(!world.is_alive("sbx"));
        assert!(
            world.exec("sbx", "anything").is_err(),
            "a destroyed sandbox runs nothing"
        );
    }
}
