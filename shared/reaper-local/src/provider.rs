//! The provider: creates, finds and destroys sandbox directories under one root.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reaper_core::{Clock, SandboxError, SandboxHandle, SandboxProvider};

use crate::meta::{
    generate_sandbox_id, read_metadata, validate_sandbox_id, write_metadata, SandboxMetadata,
};
use crate::process::{group_alive, group_is_ours, send_signal, SandboxProcesses, AFTER_KILL_WAIT};
use crate::sandbox::LocalSandbox;
use crate::time::SystemClock;

/// The provider name recorded in instance records unless configured otherwise.
pub const DEFAULT_PROVIDER_NAME: &str = "local";
/// The `PATH` every command sees unless configured otherwise. The caller's own `PATH` is never
/// inherited, so what a sandbox can run does not depend on who started it.
pub const DEFAULT_SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The most stdout (and, separately, stderr) one `exec` may return. More is an error, never a
/// silent truncation: a cut journal page would look like a complete one.
pub const DEFAULT_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;
/// How long `destroy` waits after SIGTERM before SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

/// **Fault-injection switch for demos and tests**, honoured only by a provider built with
/// [`LocalProviderOptions::destroy_fails_flag`] (off by default). While a file with this name
/// exists in a sandbox's directory, `destroy` refuses with [`SandboxError::Refused`] and leaves
/// the sandbox and its processes alone, exactly as a provider whose teardown API failed. Nothing
/// in the provider creates it; `touch <root>/<id>/.destroy-fails` arms it. Off by default because
/// an agent can write that file: it must never be able to make its own sandbox indestructible.
pub const DESTROY_FAILS_FLAG: &str = ".destroy-fails";

/// How a [`LocalSandboxProvider`] is set up.
#[derive(Debug, Clone)]
pub struct LocalProviderOptions {
    /// The directory holding one subdirectory per sandbox (`--sandboxes DIR`).
    pub root: PathBuf,
    /// The provider name instance records carry (default `local`); sandboxes recorded under another
    /// name are never touched.
    pub name: String,
    /// `PATH` inside the sandboxes (tests put a BusyBox applet directory first).
    pub path: String,
    /// The most bytes of stdout (and, separately, stderr) one exec returns; more fails the exec.
    pub output_limit: usize,
    /// How long `destroy` waits after SIGTERM before it sends SIGKILL.
    pub kill_grace: Duration,
    /// Honour [`DESTROY_FAILS_FLAG`] (demos and tests only). Default `false`: production
    /// providers ignore the file, so an agent cannot make its own destroy fail.
    pub destroy_fails_flag: bool,
}

impl LocalProviderOptions {
    /// Every default, with sandboxes under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalProviderOptions {
            root: root.into(),
            name: DEFAULT_PROVIDER_NAME.into(),
            path: DEFAULT_SANDBOX_PATH.into(),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            kill_grace: DEFAULT_KILL_GRACE,
            destroy_fails_flag: false,
        }
    }
}

/// Per-sandbox options of [`LocalSandboxProvider::create`].
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// The sandbox's journal directory. Default `<sandbox>/journals`, so sandboxes (and tests)
    /// never share `/tmp/tanstack-runs`. Created if missing.
    pub journal_dir: Option<String>,
    /// `PATH` for this sandbox's commands instead of the provider's.
    pub path: Option<String>,
}

/// State shared by the provider and every handle it gives out.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) options: LocalProviderOptions,
    /// Serialises `start_agent` against `destroy` per sandbox, so an agent is either recorded
    /// before the kill or started after the directory is gone, never leaked in between.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Process groups of `exec` commands, per sandbox, with their leader's start time: still
    /// running, or finished but with something left in the group (`sleep 1000 &`). `destroy`
    /// kills them too.
    exec_groups: Mutex<HashMap<String, HashMap<i32, Option<u64>>>>,
}

/// Past this many exec groups recorded for one sandbox, recording another first forgets the
/// groups that have emptied, so a long-lived sandbox does not accumulate them.
const EXEC_GROUPS_PRUNE_AT: usize = 32;

impl Shared {
    pub(crate) fn lock_for(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(id.to_string()).or_default().clone()
    }

    /// Forgets a destroyed sandbox's lock, so a long-lived provider does not accumulate them.
    /// A caller still holding the old lock finds the metadata gone and fails with `NotFound`.
    fn forget_lock(&self, id: &str) {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.remove(id);
    }

    pub(crate) fn track_exec(&self, id: &str, pgid: i32, leader_start: Option<u64>) {
        let mut map = self.exec_groups.lock().unwrap_or_else(|e| e.into_inner());
        let groups = map.entry(id.to_string()).or_default();
        if groups.len() >= EXEC_GROUPS_PRUNE_AT {
            groups.retain(|&g, _| group_alive(g).unwrap_or(true));
        }
        groups.insert(pgid, leader_start);
    }

    pub(crate) fn untrack_exec(&self, id: &str, pgid: i32) {
        let mut map = self.exec_groups.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(groups) = map.get_mut(id) {
            groups.remove(&pgid);
            if groups.is_empty() {
                map.remove(id);
            }
        }
    }

    /// The recorded exec groups of sandbox `id` that are still the ones recorded.
    fn exec_groups(&self, id: &str) -> Vec<i32> {
        let map = self.exec_groups.lock().unwrap_or_else(|e| e.into_inner());
        map.get(id)
            .map(|groups| {
                groups
                    .iter()
                    .filter(|&(&pgid, &start)| group_is_ours(pgid, start))
                    .map(|(&pgid, _)| pgid)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn forget_exec_groups(&self, id: &str) {
        let mut map = self.exec_groups.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(id);
    }

    /// `<root>/<id>`, absolute (the root was made absolute when the provider was built), so the
    /// marker every process carries names the same directory whoever resolves it.
    pub(crate) fn sandbox_dir(&self, id: &str) -> Result<PathBuf, SandboxError> {
        validate_sandbox_id(id)?;
        Ok(self.options.root.join(id))
    }
}

/// A sandbox provider on this machine. A sandbox is the directory `<root>/<id>/` (metadata in
/// `sandbox.json`, commands run in `work/`, journals in `journals/` unless overridden) plus the
/// processes started in it, each the leader of its own process group.
#[derive(Debug, Clone)]
pub struct LocalSandboxProvider {
    shared: Arc<Shared>,
}

impl LocalSandboxProvider {
    /// A provider with `options`; a relative root is made absolute now, so a later `chdir` cannot
    /// move it.
    pub fn new(mut options: LocalProviderOptions) -> Self {
        // Resolved once: a relative root would name another directory after a `chdir`, and
        // `destroy` compares the marker of every process with the absolute directory.
        if let Ok(root) = std::path::absolute(&options.root) {
            options.root = root;
        }
        LocalSandboxProvider {
            shared: Arc::new(Shared {
                options,
                locks: Mutex::default(),
                exec_groups: Mutex::default(),
            }),
        }
    }

    /// This provider, honouring the [`DESTROY_FAILS_FLAG`] fault-injection file (demos and
    /// tests). Call it before creating sandboxes: the result shares no state with `self`.
    pub fn honoring_destroy_fails_flag(self) -> Self {
        let mut options = self.shared.options.clone();
        options.destroy_fails_flag = true;
        Self::new(options)
    }

    /// The options this provider was built with.
    pub fn options(&self) -> &LocalProviderOptions {
        &self.shared.options
    }

    /// A provider with every default under `root`.
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        Self::new(LocalProviderOptions::new(root))
    }

    /// The directory holding the sandboxes (absolute).
    pub fn root(&self) -> &Path {
        &self.shared.options.root
    }

    /// Creates a fresh sandbox with a generated id.
    ///
    /// # Example
    ///
    /// A sandbox is a directory under the root; commands run in it through the same `exec` the
    /// reaper's probe uses, and `destroy` removes it and kills what runs in it:
    ///
    /// ```
    /// use reaper_core::{ExecOptions, SandboxHandle, SandboxProvider};
    /// use reaper_local::{CreateOptions, LocalSandboxProvider};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let root = tempfile::tempdir().unwrap();
    /// let provider = LocalSandboxProvider::with_root(root.path());
    /// let sandbox = provider.create(CreateOptions::default()).await.unwrap();
    /// let out = sandbox
    ///     .exec("echo hello", ExecOptions::default())
    ///     .await
    ///     .unwrap();
    /// assert_eq!((out.exit_code, out.stdout.as_str()), (0, "hello\n"));
    ///
    /// provider.destroy(sandbox.id()).await.unwrap();
    /// assert!(provider.resume(sandbox.id()).await.unwrap().is_none());
    /// # }
    /// ```
    pub async fn create(&self, options: CreateOptions) -> Result<LocalSandbox, SandboxError> {
        let root = std::path::absolute(&self.shared.options.root).map_err(|e| {
            SandboxError::Other(format!(
                "cannot resolve sandbox root {}: {e}",
                self.shared.options.root.display()
            ))
        })?;
        let io = |what: &str, path: &Path, e: std::io::Error| {
            SandboxError::Other(format!("cannot create {what} {}: {e}", path.display()))
        };
        tokio::fs::create_dir_all(&root)
            .await
            .map_err(|e| io("sandbox root", &root, e))?;
        let id = generate_sandbox_id()?;
        let dir = root.join(&id);
        // `create_dir`, not `create_dir_all`: an existing directory means an id collision, which
        // must not hand out someone else's sandbox.
        tokio::fs::create_dir(&dir)
            .await
            .map_err(|e| io("sandbox directory", &dir, e))?;
        let work = dir.join("work");
        tokio::fs::create_dir(&work)
            .await
            .map_err(|e| io("sandbox work directory", &work, e))?;
        let journal_dir = match options.journal_dir {
            Some(d) => d,
            None => dir
                .join("journals")
                .to_str()
                .ok_or_else(|| {
                    SandboxError::Other(format!(
                        "sandbox root {} is not valid UTF-8; shell commands need a UTF-8 path",
                        root.display()
                    ))
                })?
                .to_string(),
        };
        tokio::fs::create_dir_all(&journal_dir)
            .await
            .map_err(|e| io("journal directory", Path::new(&journal_dir), e))?;
        let meta = SandboxMetadata {
            id: id.clone(),
            created_at: SystemClock.now_ms(),
            journal_dir,
            path: options.path,
            agents: Vec::new(),
        };
        write_metadata(&dir, &meta).await?;
        tracing::debug!(sandbox = %id, dir = %dir.display(), "sandbox created");
        Ok(LocalSandbox::new(self.shared.clone(), dir, meta))
    }

    /// The live sandbox `id`, with its concrete type (for `start_agent`). `None` when it does not
    /// exist or was destroyed; a hostile id is an error, never joined to a path.
    pub async fn open(&self, id: &str) -> Result<Option<LocalSandbox>, SandboxError> {
        let dir = self.shared.sandbox_dir(id)?;
        Ok(read_metadata(&dir)
            .await?
            .map(|meta| LocalSandbox::new(self.shared.clone(), dir, meta)))
    }
}

#[async_trait::async_trait]
impl SandboxProvider for LocalSandboxProvider {
    fn name(&self) -> &str {
        &self.shared.options.name
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        Ok(self
            .open(id)
            .await?
            .map(|s| Arc::new(s) as Arc<dyn SandboxHandle>))
    }

    /// Kills every process of the sandbox (SIGTERM, then SIGKILL after the grace period) and
    /// removes its directory. A missing sandbox is `Ok`. "Every process" is everything that
    /// descends from the keeper of an agent or an `exec` (whatever group, session, directory or
    /// environment it moved to), the recorded groups, and any process that still carries the
    /// sandbox's marker variable or works inside its directory. Anything still alive after
    /// SIGKILL fails the destroy and keeps the directory, so the failure is retried, never
    /// reported as a success.
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        let dir = self.shared.sandbox_dir(id)?;
        let lock = self.shared.lock_for(id);
        let _held = lock.lock().await;
        if !tokio::fs::try_exists(&dir).await.unwrap_or(true) {
            return Ok(());
        }
        if self.shared.options.destroy_fails_flag
            && tokio::fs::try_exists(dir.join(DESTROY_FAILS_FLAG))
                .await
                .unwrap_or(false)
        {
            return Err(SandboxError::Refused(format!(
                "destroy of sandbox {id} refused: the fault-injection flag {} is set; remove it \
                 to allow teardown",
                dir.join(DESTROY_FAILS_FLAG).display()
            )));
        }
        let mut groups: Vec<i32> = self.shared.exec_groups(id);
        if let Some(meta) = read_metadata(&dir).await? {
            groups.extend(
                meta.agents
                    .iter()
                    .filter(|a| group_is_ours(a.pgid, a.start_time))
                    .map(|a| a.pgid),
            );
        }
        let processes = SandboxProcesses::new(&dir, groups);
        processes
            .terminate(
                self.shared.options.kill_grace,
                AFTER_KILL_WAIT,
                &send_signal,
            )
            .await
            .map_err(|survivors| {
                SandboxError::Other(format!(
                    "cannot destroy sandbox {id}: {} process(es) still running after SIGKILL: \
                     {survivors}; the sandbox is kept so a later destroy can retry",
                    survivors.0.len()
                ))
            })?;
        remove_dir(&dir).await.map_err(|e| {
            SandboxError::Other(format!(
                "cannot remove sandbox directory {}: {e}",
                dir.display()
            ))
        })?;
        self.shared.forget_lock(id);
        self.shared.forget_exec_groups(id);
        tracing::debug!(sandbox = %id, groups = processes.groups.len(), "sandbox destroyed");
        Ok(())
    }
}

/// `remove_dir_all`, retried: a process killed a moment ago may still have been creating a file,
/// which makes one pass fail with "directory not empty".
async fn remove_dir(dir: &Path) -> std::io::Result<()> {
    let mut attempts = 0;
    loop {
        match tokio::fs::remove_dir_all(dir).await {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if attempts < 3 && e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
                attempts += 1;
            }
            Err(e) => return Err(e),
        }
    }
}
