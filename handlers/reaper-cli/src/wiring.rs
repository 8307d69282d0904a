//! Composition: the store (an SQLite file or a PostgreSQL schema), the sandbox providers (local, Docker, routed by one
//! `ProviderSet`) and the core's sweep parts put together, plus the few adapters the CLI needs
//! around them (per-sandbox journal directories, progress lines, and a record of when this
//! process held the sweep lease).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{ReapDeps, SWEEP_LEASE_KEY};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    BoundedCount, CancellationToken, ChunkStream, Clock, Drive, DriveError, DriveRequest,
    EpochBump, EpochMs, ExitProbe, Fenced, Lease, LeaseGrant, LeaseStore, LedgerCounts, NewRun,
    ProbeError, ProviderSet, ReclaimIntent, ReclaimLedger, ReclaimableListing, ReclaimablePage,
    ReclaimableQuery, RunExitProbe, RunPatch, RunRecord, RunStore, RunStoreCapabilities,
    SandboxInstanceStore, SandboxProvider, StoreError, TerminalWrite,
};
use reaper_core::{DeliveryLog, MessageStore};
use reaper_docker::DockerProvider;
use reaper_local::{LocalSandboxProvider, SystemClock, TokioSleeper};
use reaper_postgres::{PostgresOptions, PostgresStore};
use reaper_sqlite::{RetentionReport, SqliteStore, StatusCounts};
use serde::Serialize;

use crate::config::{Db, ProviderKind, Sandboxes, Settings};
use crate::Failure;

/// The database the CLI works on: the SQLite file the application writes, or the `reaper`
/// schema of its PostgreSQL. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// Every port of a [`Store`], each as the trait object the core takes.
#[derive(Clone)]
pub struct Ports {
    pub runs: Arc<dyn RunStore>,
    pub leases: Arc<dyn LeaseStore>,
    pub logs: Arc<dyn DeliveryLog>,
    pub messages: Arc<dyn MessageStore>,
    pub ledger: Arc<dyn ReclaimLedger>,
    pub instances: Arc<dyn SandboxInstanceStore>,
}

fn ports_of<S>(store: S) -> Ports
where
    S: RunStore
        + LeaseStore
        + DeliveryLog
        + MessageStore
        + ReclaimLedger
        + SandboxInstanceStore
        + 'static,
{
    let s = Arc::new(store);
    Ports {
        runs: s.clone(),
        leases: s.clone(),
        logs: s.clone(),
        messages: s.clone(),
        ledger: s.clone(),
        instances: s,
    }
}

impl Store {
    pub fn ports(&self) -> Ports {
        match self {
            Store::Sqlite(s) => ports_of(s.clone()),
            Store::Postgres(p) => ports_of(p.clone()),
        }
    }

    /// The file or the server (without credentials), for messages.
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(s) => s
                .path()
                .map_or_else(|| ":memory:".into(), |p| p.display().to_string()),
            Store::Postgres(p) => format!("{} (schema {})", p.target(), p.schema()),
        }
    }

    pub async fn prune_events(
        &self,
        now: EpochMs,
        retention_ms: u64,
        batch_limit: usize,
    ) -> Result<RetentionReport, StoreError> {
        match self {
            Store::Sqlite(s) => s.prune_events(now, retention_ms, batch_limit).await,
            Store::Postgres(p) => p.prune_events(now, retention_ms, batch_limit).await,
        }
    }

    pub async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        match self {
            Store::Sqlite(s) => s.count_by_status().await,
            Store::Postgres(p) => {
                let c = p.count_by_status().await?;
                Ok(StatusCounts {
                    running: c.running,
                    interrupted: c.interrupted,
                    completed: c.completed,
                    failed: c.failed,
                    aborted: c.aborted,
                })
            }
        }
    }
}

/// Where `--db` / `--database-url` point: a PostgreSQL URL, else an SQLite file.
pub(crate) enum Target<'a> {
    Sqlite(&'a Path),
    Postgres(&'a str),
}

pub(crate) fn target(db: &Db) -> Target<'_> {
    if let Some(url) = &db.database_url {
        return Target::Postgres(url);
    }
    match db.db.to_str() {
        Some(url) if reaper_postgres::is_postgres_url(url) => Target::Postgres(url),
        _ => Target::Sqlite(&db.db),
    }
}

/// The PostgreSQL options: the URL, and the password from `REAPER_DATABASE_PASSWORD` when the
/// URL has none (read as the serverless handlers read it).
pub(crate) fn postgres_options(url: &str) -> PostgresOptions {
    PostgresOptions::from_settings(url, |k| std::env::var(k).ok())
}

pub(crate) fn postgres_failure(e: reaper_postgres::OpenError) -> Failure {
    Failure::cannot_run(format!("cannot open the database: {e}"))
}

/// Opens the store read-write: an SQLite file (see [`open_store`]) or a PostgreSQL schema,
/// created or migrated in place.
pub async fn open(db: &Db) -> Result<Store, Failure> {
    match target(db) {
        Target::Sqlite(path) => open_store(path).map(Store::Sqlite),
        Target::Postgres(url) => PostgresStore::open(postgres_options(url))
            .await
            .map(Store::Postgres)
            .map_err(postgres_failure),
    }
}

/// Opens the store without writing to it.
pub async fn open_read_only(db: &Db) -> Result<Store, Failure> {
    match target(db) {
        Target::Sqlite(path) => open_store_read_only(path).map(Store::Sqlite),
        Target::Postgres(url) => PostgresStore::open_read_only(postgres_options(url))
            .await
            .map(Store::Postgres)
            .map_err(postgres_failure),
    }
}

/// Opens the database read-write. It must exist (an empty file is initialised): a typo in `--db`
/// must not silently sweep a fresh, empty database.
pub fn open_store(path: &Path) -> Result<SqliteStore, Failure> {
    check_exists(path)?;
    check_writable(path)?;
    SqliteStore::open(path)
        .map_err(|e| Failure::cannot_run(format!("cannot open the database: {e}")))
}

/// Opens the database without writing to it.
pub fn open_store_read_only(path: &Path) -> Result<SqliteStore, Failure> {
    check_exists(path)?;
    SqliteStore::open_read_only(path).map_err(|e| {
        let mut message = format!("cannot open the database: {e}");
        if let Some(why) = read_only_obstacle(path, &e) {
            message.push_str(&why);
        }
        Failure::cannot_run(message)
    })
}

/// Why a read-only open of a readable file failed, when the cause is that it or its directory
/// is read-only to this user: SQLite reads a WAL-mode database through a shared-memory index
/// (`<db>-shm`) that even a reader must create or write, and SQLite offers no safe way around
/// that here (its `immutable` mode would ignore commits still in `<db>-wal`).
fn read_only_obstacle(path: &Path, e: &reaper_sqlite::OpenError) -> Option<String> {
    use nix::unistd::{access, AccessFlags};
    if !matches!(e, reaper_sqlite::OpenError::Sqlite { .. }) {
        return None;
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_ro = access(path, AccessFlags::W_OK).is_err();
    let dir_ro = access(&dir, AccessFlags::W_OK).is_err();
    if !file_ro && !dir_ro {
        return None;
    }
    let what = match (file_ro, dir_ro) {
        (true, true) => format!("The file and its directory {} are", dir.display()),
        (true, false) => "The file is".to_string(),
        _ => format!("Its directory {} is", dir.display()),
    };
    let name = path.display();
    Some(format!(
        ". {what} read-only to this user, and SQLite reads a WAL-mode database through a \
         shared-memory index ({name}-shm) that even a reader must create and write. Run status \
         as the user that writes the database, make {name} and its directory writable for this \
         user, or copy {name} (and {name}-wal, if present) somewhere writable and point --db at \
         the copy. Nothing was changed"
    ))
}

fn check_exists(path: &Path) -> Result<(), Failure> {
    if path.is_file() {
        return Ok(());
    }
    let what = if path.exists() {
        "is not a file"
    } else {
        "does not exist"
    };
    Err(Failure::cannot_run(format!(
        "the database {} {what}: point --db (REAPER_DB) at the SQLite file your application \
         writes runs into (an empty file is initialised), or create one with `reaper init --db \
         PATH`",
        path.display()
    )))
}

/// SQLite keeps its write-ahead log beside the database, so both the file and its directory must
/// be writable; saying so up front beats SQLite's "unable to open database file".
pub(crate) fn check_writable(path: &Path) -> Result<(), Failure> {
    use nix::unistd::{access, AccessFlags};
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if access(&dir, AccessFlags::W_OK).is_err() {
        return Err(Failure::cannot_run(format!(
            "the database directory {} is not writable: SQLite keeps its write-ahead log \
             ({name}-wal, {name}-shm) beside the database; make the directory writable or move \
             the database (nothing was changed)",
            dir.display(),
            name = path
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        )));
    }
    if access(path, AccessFlags::W_OK).is_err() {
        return Err(Failure::cannot_run(format!(
            "the database {} is not writable: the sweep records its claims and results in it; \
             make it writable (nothing was changed)",
            path.display()
        )));
    }
    Ok(())
}

/// The local provider over an existing sandbox root. It honours the `.destroy-fails`
/// fault-injection flag only in the demo (whose sandboxes it makes itself) and in test builds:
/// anywhere else an agent could write that file to make its own sandbox indestructible.
pub fn provider(
    root: &Path,
    kill_grace: Option<Duration>,
    destroy_fails_flag: bool,
) -> Result<LocalSandboxProvider, Failure> {
    if !root.is_dir() {
        return Err(Failure::cannot_run(format!(
            "the sandbox root {} is not a directory: point --sandboxes (REAPER_SANDBOXES) at the \
             directory holding the local sandboxes",
            root.display()
        )));
    }
    let mut options = reaper_local::LocalProviderOptions::new(root);
    if let Some(grace) = kill_grace {
        options.kill_grace = grace;
    }
    options.destroy_fails_flag = destroy_fails_flag || reaper_cli_hooks::ENABLED;
    Ok(LocalSandboxProvider::new(options))
}

/// The sandbox providers this process serves, each also as its concrete type (prune walks the
/// sandboxes of each), and all of them as one [`ProviderSet`] that routes every recorded sandbox
/// to the member its instance record names.
#[derive(Clone)]
pub struct Providers {
    pub local: Option<LocalSandboxProvider>,
    pub docker: Option<DockerProvider>,
    /// The HTTP providers (sandboxd, Daytona, E2B, Vercel), built by the shared registry from
    /// the serverless handlers' settings. Prune does not walk them.
    pub remote: Vec<Arc<dyn SandboxProvider>>,
    pub set: Arc<dyn SandboxProvider>,
    /// The strictest rate limit the served providers document: the sweep's sizing keeps under
    /// it.
    pub rate_limit: Option<reaper_core::concurrency::RateLimit>,
}

impl Providers {
    /// The configured providers, checked before anything is touched: a local root that is not a
    /// directory, a Docker socket nobody answers on.
    pub async fn from_settings(s: Settings<'_>, a: &Sandboxes) -> Result<Self, Failure> {
        let kinds = s.providers(&a.providers)?;
        let local = match kinds.contains(&ProviderKind::Local) {
            true => Some(provider(&a.sandboxes, None, false)?),
            false => None,
        };
        let docker = match kinds.contains(&ProviderKind::Docker) {
            true => {
                let mut options = s.docker(&a.docker_socket, &a.docker_name)?;
                options.require_label = a.docker_require_label;
                // Checked before connecting: a name clash is a setting to fix, whatever dockerd
                // says.
                if let Some(local) = local.as_ref().filter(|l| l.name() == options.name) {
                    return Err(Failure::usage(format!(
                        "invalid value for {}: {:?}: the local provider is named so too, and each \
                         instance record names one provider: pick another Docker provider name",
                        s.name(crate::config::DOCKER_NAME),
                        local.name()
                    )));
                }
                let connected = DockerProvider::connect(options).await.map_err(|e| {
                    Failure::cannot_run(format!(
                        "{e} Set DOCKER_HOST or --docker-socket to the daemon's socket, or \
                         leave docker out of --provider (REAPER_PROVIDERS)"
                    ))
                })?;
                Some(connected)
            }
            false => None,
        };
        let mut remote = Vec::new();
        let mut transport: Option<Arc<dyn reaper_http_sandbox::HttpTransport>> = None;
        for kind in kinds
            .iter()
            .filter(|k| !matches!(k, ProviderKind::Local | ProviderKind::Docker))
        {
            let transport = match &transport {
                Some(t) => t.clone(),
                None => {
                    let t: Arc<dyn reaper_http_sandbox::HttpTransport> = Arc::new(
                        reaper_http_sandbox::ReqwestTransport::new()
                            .map_err(|e| Failure::cannot_run(e.to_string()))?,
                    );
                    transport.insert(t).clone()
                }
            };
            let env = |name: &str| std::env::var(name).ok();
            let built = match kind {
                ProviderKind::Sandboxd => reaper_providers::build_sandboxd(env, transport),
                _ => reaper_providers::build_hosted(*kind, env, transport)
                    .map(|p| p.expect("a hosted provider")),
            };
            remote.push(built.map_err(|e| Failure::usage(e.to_string()))?);
        }
        let mut providers = Self::new(local, docker, remote)?;
        providers.rate_limit = reaper_providers::strictest_rate_limit(&kinds);
        Ok(providers)
    }

    /// Only the local provider (the demo's).
    pub fn local_only(local: LocalSandboxProvider) -> Self {
        Self::new(Some(local), None, Vec::new()).expect("one provider is a valid set")
    }

    fn new(
        local: Option<LocalSandboxProvider>,
        docker: Option<DockerProvider>,
        remote: Vec<Arc<dyn SandboxProvider>>,
    ) -> Result<Self, Failure> {
        let mut members: Vec<Arc<dyn SandboxProvider>> = Vec::new();
        if let Some(p) = &local {
            // Records the framework wrote name it `local-process`.
            members.push(reaper_providers::with_record_names(
                ProviderKind::Local,
                Arc::new(p.clone()),
            ));
        }
        if let Some(p) = &docker {
            members.push(Arc::new(p.clone()));
        }
        members.extend(remote.iter().cloned());
        let set = ProviderSet::new(members).map_err(|e| Failure::usage(e.to_string()))?;
        Ok(Providers {
            local,
            docker,
            remote,
            set: Arc::new(set),
            rate_limit: None,
        })
    }

    /// The names instance records must carry to be served here (local first).
    pub fn names(&self) -> Vec<String> {
        self.local
            .iter()
            .map(|p| p.name().to_string())
            .chain(self.docker.iter().map(|p| p.name().to_string()))
            .chain(self.remote.iter().map(|p| p.name().to_string()))
            .collect()
    }
}

/// Who holds leases taken by this process: host, pid and a random tag.
pub fn owner_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into());
    let mut tag = [0u8; 4];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut tag))
        .is_ok();
    let tag: String = if random {
        tag.iter().map(|b| format!("{b:02x}")).collect()
    } else {
        format!("{:08x}", SystemClock.now_ms() as u32)
    };
    format!("{host}/{}/{tag}", std::process::id())
}

/// Where a run's journal is: the configured directory, else the one its local sandbox records,
/// else (any other provider) the core's default directory.
#[derive(Clone)]
pub struct JournalDirs {
    pub local: Option<LocalSandboxProvider>,
    pub runs: Arc<dyn RunStore>,
    pub instances: Arc<dyn SandboxInstanceStore>,
    pub fixed: Option<String>,
}

impl JournalDirs {
    /// `None` when the run's sandbox cannot be found: the probe or drive then reports that itself.
    pub async fn for_run(&self, record: &RunRecord) -> Option<String> {
        if let Some(dir) = &self.fixed {
            return Some(dir.clone());
        }
        let local = self.local.as_ref()?;
        let key = record.sandbox_key.as_deref()?;
        let instance = self.instances.get(key).await.ok()??;
        // The local provider's records: its own name, or the framework's (`local-process`).
        if instance.provider != local.name()
            && !ProviderKind::Local
                .aliases()
                .contains(&instance.provider.as_str())
        {
            return None;
        }
        let sandbox = local.open(&instance.provider_sandbox_id).await.ok()??;
        Some(sandbox.journal_dir().to_string())
    }

    async fn for_run_id(&self, run_id: &str) -> Option<String> {
        if let Some(dir) = &self.fixed {
            return Some(dir.clone());
        }
        let record = self.runs.get(run_id).await.ok()??;
        self.for_run(&record).await
    }
}

pub use crate::progress::Progress;

/// The journal exit probe, reading each run's journal where its sandbox keeps it.
struct LocalJournalProbe {
    dirs: JournalDirs,
    provider: Arc<dyn SandboxProvider>,
    instances: Arc<dyn SandboxInstanceStore>,
    progress: Progress,
}

#[async_trait::async_trait]
impl ExitProbe for LocalJournalProbe {
    async fn has_finished(&self, record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        self.progress.step("probing", &record.run_id);
        let options = ProbeOptions {
            dir: self.dirs.for_run(record).await,
            ..ProbeOptions::default()
        };
        JournalExitProbe::new(self.provider.clone(), self.instances.clone(), options)
            .has_finished(record)
            .await
    }
}

/// The journal replay drive, reading each run's journal where its sandbox keeps it.
#[derive(Clone)]
struct LocalReplayDrive {
    dirs: JournalDirs,
    deps: ReplayDeps,
    options: ReplayOptions,
    progress: Progress,
}

impl Drive for LocalReplayDrive {
    fn drive(
        &self,
        request: DriveRequest,
        signal: CancellationToken,
    ) -> Result<ChunkStream, DriveError> {
        self.progress
            .step("replaying the journal of", &request.run_id);
        let this = self.clone();
        let stream = async move {
            let options = ReplayOptions {
                journal_dir: this.dirs.for_run_id(&request.run_id).await,
                ..this.options.clone()
            };
            match JournalReplayDrive::new(this.deps.clone(), options).drive(request, signal) {
                Ok(stream) => stream,
                Err(e) => Box::pin(futures::stream::iter([Err(e)])) as ChunkStream,
            }
        };
        Ok(Box::pin(futures::stream::once(stream).flatten()))
    }
}

/// When this process held the sweep lease: from just after it was granted to just before it was
/// released, so two processes' intervals can be compared (they must never overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Held {
    pub from: EpochMs,
    pub to: EpochMs,
}

struct ObservedLeases {
    inner: Arc<dyn LeaseStore>,
    granted: Mutex<Option<EpochMs>>,
    held: Mutex<Option<Held>>,
    /// Leases granted and not yet released, so an abandoned sweep can give them back at once
    /// instead of leaving them to expire.
    outstanding: Mutex<Vec<Lease>>,
}

impl ObservedLeases {
    fn track(&self, f: impl FnOnce(&mut Vec<Lease>)) {
        f(&mut self.outstanding.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

#[async_trait::async_trait]
impl LeaseStore for ObservedLeases {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        let grant = self.inner.acquire(key, owner, now, ttl_ms).await?;
        if let LeaseGrant::Acquired(lease) = &grant {
            if key == SWEEP_LEASE_KEY {
                *self.granted.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(SystemClock.now_ms());
            }
            self.track(|v| v.push(lease.clone()));
        }
        Ok(grant)
    }

    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        let renewed = self.inner.renew(lease, now, ttl_ms).await?;
        self.track(|v| {
            v.retain(|l| l.token != lease.token);
            v.extend(renewed.clone());
        });
        Ok(renewed)
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        if lease.key == SWEEP_LEASE_KEY {
            let to = SystemClock.now_ms();
            if let Some(from) = self
                .granted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                *self.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(Held { from, to });
            }
        }
        self.track(|v| v.retain(|l| l.token != lease.token));
        self.inner.release(lease).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.inner.note(key).await
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        self.inner.set_note(lease, note).await
    }
}

/// What went wrong with the database itself during a sweep. The core turns every store error
/// into a report entry (a sweep never fails as a whole), and a failed listing leaves no entry at
/// all; this is how the CLI still tells "nothing to do" from "could not look" and exits 3.
#[derive(Debug, Clone, Default)]
pub struct StoreTrouble {
    inner: Arc<Mutex<Trouble>>,
}

#[derive(Debug, Default, Clone)]
pub struct Trouble {
    /// The first error saying the database file is damaged (a malformed page, a table of the
    /// wrong shape): no retry helps.
    pub damaged: Option<String>,
    /// The listing of detached runs failed: nothing was swept, whatever the report says.
    pub listing: Option<String>,
}

impl StoreTrouble {
    fn saw(&self, e: &StoreError) {
        if reaper_sqlite::is_damaged(e) {
            let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            t.damaged.get_or_insert_with(|| e.to_string());
        }
    }

    fn watch<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r {
            self.saw(e);
        }
        r
    }

    /// What this sweep saw, and a clean slate for the next one.
    pub fn take(&self) -> Trouble {
        std::mem::take(&mut *self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The run store, watched for [`StoreTrouble`].
struct WatchedRuns {
    inner: Arc<dyn RunStore>,
    trouble: StoreTrouble,
}

#[async_trait::async_trait]
impl RunStore for WatchedRuns {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.trouble.watch(self.inner.create_or_resume(new).await)
    }

    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.trouble.watch(self.inner.update(run_id, patch).await)
    }

    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<reaper_core::Fenced<bool>, StoreError> {
        self.trouble
            .watch(self.inner.update_fenced(run_id, held_epoch, patch).await)
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.trouble.watch(self.inner.get(run_id).await)
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.trouble
            .watch(self.inner.find_active_run(thread_id).await)
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.trouble
            .watch(self.inner.list_by_thread(thread_id).await)
    }

    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.trouble
            .watch(self.inner.live_runs_for_sandbox(sandbox_key, limit).await)
    }

    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.trouble
            .watch(self.inner.list_reclaimable(now, ttl_ms).await)
    }

    async fn list_reclaimable_listing(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<ReclaimableListing, StoreError> {
        let listing = self.inner.list_reclaimable_listing(now, ttl_ms).await;
        if let Err(e) = &listing {
            let mut t = self.trouble.inner.lock().unwrap_or_else(|p| p.into_inner());
            t.listing.get_or_insert_with(|| e.to_string());
        }
        self.trouble.watch(listing)
    }

    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        let page = self.inner.list_reclaimable_page(query).await;
        if let Err(e) = &page {
            let mut t = self.trouble.inner.lock().unwrap_or_else(|p| p.into_inner());
            t.listing.get_or_insert_with(|| e.to_string());
        }
        self.trouble.watch(page)
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        self.trouble.watch(
            self.inner
                .count_reclaimable(detached_after, detached_until, at_most)
                .await,
        )
    }

    // The history is an operator's aid: its failures are the sweep report's, not trouble that
    // fails the sweep.
    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.inner.record_history(entries).await
    }
    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        self.inner.run_history(run_id, limit).await
    }
    async fn prune_history(&self, before: EpochMs, max_entries: usize) -> Result<u64, StoreError> {
        self.inner.prune_history(before, max_entries).await
    }
    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        self.inner.write_sweep_history(history).await
    }
    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        self.inner.recent_sweeps(limit).await
    }
    fn capabilities(&self) -> RunStoreCapabilities {
        self.inner.capabilities()
    }

    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.trouble.watch(self.inner.bump_epoch(run_id).await)
    }

    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.trouble
            .watch(self.inner.write_terminal(run_id, held_epoch, write).await)
    }
}

/// The reclaim ledger, watched for [`StoreTrouble`].
struct WatchedLedger {
    inner: Arc<dyn ReclaimLedger>,
    trouble: StoreTrouble,
}

#[async_trait::async_trait]
impl ReclaimLedger for WatchedLedger {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.trouble.watch(self.inner.record_intent(intent).await)
    }

    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.trouble.watch(self.inner.update_intent(intent).await)
    }

    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        self.trouble.watch(self.inner.resolve_intent(run_id).await)
    }

    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        self.trouble.watch(self.inner.get_intent(run_id).await)
    }

    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        self.trouble.watch(self.inner.due_intents(now, limit).await)
    }

    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        self.trouble.watch(self.inner.ledger_counts().await)
    }
}

/// Everything one sweep needs, built once per process.
pub struct Sweeper {
    pub deps: ReapDeps,
    /// The provider names served, for the report.
    pub providers: Vec<String>,
    pub progress: Progress,
    pub trouble: StoreTrouble,
    leases: Arc<ObservedLeases>,
}

/// How drives read journals.
#[derive(Debug, Clone, Copy)]
pub struct DriveTuning {
    pub poll_ms: u64,
}

impl Default for DriveTuning {
    fn default() -> Self {
        DriveTuning {
            poll_ms: ReplayOptions::default().poll_ms,
        }
    }
}

impl Sweeper {
    pub fn new(
        store: &Store,
        providers: &Providers,
        journal_dir: Option<String>,
        progress: Progress,
        tuning: DriveTuning,
    ) -> Self {
        let ports = store.ports();
        let trouble = StoreTrouble::default();
        // Every store the sweep, its drive and its reclaimer write to shares one damage latch:
        // damage seen in any table stops every terminal write and destroy after it.
        let damage = reaper_core::damage::Damage::default();
        let runs: Arc<dyn RunStore> = Arc::new(WatchedRuns {
            inner: reaper_core::damage::Guarded::new(ports.runs.clone(), &damage),
            trouble: trouble.clone(),
        });
        let instances: Arc<dyn SandboxInstanceStore> =
            reaper_core::damage::Guarded::new(ports.instances.clone(), &damage);
        let logs: Arc<dyn DeliveryLog> =
            reaper_core::damage::Guarded::new(ports.logs.clone(), &damage);
        let messages: Arc<dyn MessageStore> =
            reaper_core::damage::Guarded::new(ports.messages.clone(), &damage);
        let ledger: Arc<dyn ReclaimLedger> =
            reaper_core::damage::Guarded::new(ports.ledger.clone(), &damage);
        let sandboxes = providers.set.clone();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let sleeper = Arc::new(TokioSleeper);
        let dirs = JournalDirs {
            local: providers.local.clone(),
            runs: runs.clone(),
            instances: instances.clone(),
            fixed: journal_dir,
        };
        let leases = Arc::new(ObservedLeases {
            inner: ports.leases.clone(),
            granted: Mutex::new(None),
            held: Mutex::new(None),
            outstanding: Mutex::new(Vec::new()),
        });
        let drive = LocalReplayDrive {
            dirs: dirs.clone(),
            deps: ReplayDeps {
                runs: runs.clone(),
                instances: instances.clone(),
                provider: sandboxes.clone(),
                logs: logs.clone(),
                messages,
                clock: clock.clone(),
                sleeper: sleeper.clone(),
            },
            options: ReplayOptions {
                poll_ms: tuning.poll_ms,
                ..ReplayOptions::default()
            },
            progress: progress.clone(),
        };
        let deps = ReapDeps {
            runs: runs.clone(),
            logs,
            leases: leases.clone(),
            ledger: Arc::new(WatchedLedger {
                inner: ledger,
                trouble: trouble.clone(),
            }),
            probe: Arc::new(LocalJournalProbe {
                dirs,
                provider: sandboxes.clone(),
                instances: instances.clone(),
                progress: progress.clone(),
            }),
            drive: Arc::new(drive),
            reclaim: Some(Arc::new(SandboxReclaimer {
                provider: sandboxes,
                instances,
                runs,
            })),
            clock,
            sleeper,
            damage,
        };
        Sweeper {
            deps,
            providers: providers.names(),
            progress,
            trouble,
            leases,
        }
    }

    /// The interval this process held the sweep lease during its last sweep, if it did.
    pub fn take_held(&self) -> Option<Held> {
        self.leases
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Releases every lease an abandoned sweep still holds (the sweep lease and a run's claim),
    /// so the next sweep, here or elsewhere, need not wait for them to expire.
    pub async fn release_abandoned(&self) -> usize {
        let leases = std::mem::take(
            &mut *self
                .leases
                .outstanding
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let mut released = 0;
        for lease in &leases {
            match self.leases.inner.release(lease).await {
                Ok(()) => released += 1,
                Err(error) => {
                    tracing::warn!(key = %lease.key, %error, "releasing an abandoned lease failed; it will expire")
                }
            }
        }
        released
    }
}
