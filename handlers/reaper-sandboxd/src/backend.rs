//! What the daemon serves sandboxes from: this machine's local sandboxes (`reaper-local`, a
//! directory and processes per sandbox) or containers on a Docker daemon (`reaper-docker`). The
//! API is the same either way; only where a sandbox lives differs.

use reaper_core::journal::DEFAULT_JOURNAL_DIR;
use reaper_core::{ExecOptions, ExecOutput, SandboxError, SandboxHandle, SandboxProvider};
use reaper_docker::{DockerProvider, DockerSandbox};
use reaper_http_sandbox::api::{AgentInfo, SandboxInfo};
use reaper_local::{CreateOptions, LocalSandbox, LocalSandboxProvider};

/// The label a Docker sandbox's journal directory is kept in (set at creation).
pub const JOURNAL_DIR_LABEL: &str = "io.reaper.sandboxd.journal-dir";

/// Where sandboxes live.
#[derive(Debug)]
pub enum Backend {
    Local(LocalSandboxProvider),
    Docker(DockerBackend),
}

/// Containers from one image on one Docker daemon.
#[derive(Debug)]
pub struct DockerBackend {
    pub provider: DockerProvider,
    /// The image every sandbox runs; it must already be on the daemon (nothing is pulled).
    pub image: String,
    /// The containers' network mode (`none` unless configured).
    pub network: String,
}

/// One live sandbox of either backend.
#[derive(Debug)]
pub enum Sandbox {
    Local(LocalSandbox),
    Docker(DockerSandbox),
}

impl Backend {
    /// `local` or `docker`, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Local(_) => "local",
            Backend::Docker(_) => "docker",
        }
    }

    /// Creates a sandbox whose journals go to `journal_dir` (else the backend's default).
    pub async fn create(&self, journal_dir: Option<String>) -> Result<Sandbox, SandboxError> {
        match self {
            Backend::Local(p) => p
                .create(CreateOptions {
                    journal_dir,
                    path: None,
                })
                .await
                .map(Sandbox::Local),
            Backend::Docker(d) => {
                let dir = journal_dir.unwrap_or_else(|| DEFAULT_JOURNAL_DIR.to_string());
                let mut options = reaper_docker::CreateOptions::new(&d.image);
                options.network = d.network.clone();
                options.labels = vec![(JOURNAL_DIR_LABEL.to_string(), dir)];
                d.provider.create(options).await.map(Sandbox::Docker)
            }
        }
    }

    /// The live sandbox `id`; `None` when there is none.
    pub async fn open(&self, id: &str) -> Result<Option<Sandbox>, SandboxError> {
        Ok(match self {
            Backend::Local(p) => p.open(id).await?.map(Sandbox::Local),
            Backend::Docker(d) => d.provider.open(id).await?.map(Sandbox::Docker),
        })
    }

    /// Tears sandbox `id` down; a missing one is `Ok`.
    pub async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        match self {
            Backend::Local(p) => p.destroy(id).await,
            Backend::Docker(d) => d.provider.destroy(id).await,
        }
    }
}

impl Sandbox {
    pub fn id(&self) -> &str {
        match self {
            Sandbox::Local(s) => s.id(),
            Sandbox::Docker(s) => s.id(),
        }
    }

    /// Where this sandbox's journals go unless a request names another directory.
    pub fn journal_dir(&self) -> &str {
        match self {
            Sandbox::Local(s) => s.journal_dir(),
            Sandbox::Docker(s) => s.label(JOURNAL_DIR_LABEL).unwrap_or(DEFAULT_JOURNAL_DIR),
        }
    }

    pub async fn exec(
        &self,
        command: &str,
        options: ExecOptions,
    ) -> Result<ExecOutput, SandboxError> {
        match self {
            Sandbox::Local(s) => s.exec(command, options).await,
            Sandbox::Docker(s) => s.exec(command, options).await,
        }
    }

    /// Starts an agent under the journaled wrapper; returns its pid (for Docker, in the
    /// container's pid namespace).
    pub async fn start_agent(
        &self,
        run_id: &str,
        command: &str,
        journal_dir: Option<&str>,
    ) -> Result<u32, SandboxError> {
        match self {
            Sandbox::Local(s) => Ok(s.start_agent(run_id, command, journal_dir).await?.pid),
            // The sandbox's own directory, as the local backend does, not the core's default.
            Sandbox::Docker(s) => {
                let dir = journal_dir.unwrap_or(self.journal_dir());
                s.start_agent(run_id, command, Some(dir)).await
            }
        }
    }

    /// The sandbox as the API describes it.
    pub async fn info(&self) -> Result<SandboxInfo, SandboxError> {
        match self {
            Sandbox::Local(s) => {
                let meta = s.metadata().await?;
                Ok(SandboxInfo {
                    id: meta.id,
                    created_at: meta.created_at,
                    journal_dir: meta.journal_dir,
                    agents: meta
                        .agents
                        .into_iter()
                        .map(|a| AgentInfo {
                            run_id: a.run_id,
                            pid: a.pid,
                        })
                        .collect(),
                })
            }
            Sandbox::Docker(s) => Ok(SandboxInfo {
                id: s.id().to_string(),
                // A container labelled by hand has no creation label: 0, not a made-up time.
                created_at: s.created_at().unwrap_or(0),
                journal_dir: self.journal_dir().to_string(),
                agents: s
                    .agents()
                    .await?
                    .into_iter()
                    .map(|a| AgentInfo {
                        run_id: a.run_id,
                        pid: a.pid,
                    })
                    .collect(),
            }),
        }
    }
}
