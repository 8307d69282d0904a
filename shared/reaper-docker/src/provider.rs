//! [`DockerProvider`]: containers on a Docker daemon as sandboxes, over the Engine API on its
//! Unix socket.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, ContainerInspectResponse, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptionsBuilder, RemoveContainerOptions,
};
use bollard::{ClientVersion, Docker, API_DEFAULT_VERSION};
use reaper_core::{SandboxError, SandboxHandle, SandboxProvider};

use crate::counts::{Counters, Endpoint, RequestCounts};
use crate::error::{map, status_of};
use crate::sandbox::DockerSandbox;

/// The provider name recorded in instance records unless configured otherwise.
pub const DEFAULT_PROVIDER_NAME: &str = "docker";
/// Docker's own default socket.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// The label every sandbox container carries, valued with the provider's name. `resume` and
/// `destroy` refuse a container without it: an instance record naming someone else's container
/// (a database, another deployment's sandbox) must never get it destroyed.
pub const SANDBOX_LABEL: &str = "io.reaper.sandbox";
/// The label [`DockerProvider::create`] stamps with the creation time (epoch milliseconds), so
/// a sandbox's age reads from one inspect, in the same unit as every other reaper time.
pub const CREATED_AT_LABEL: &str = "io.reaper.created-at";
/// The most stdout (and, separately, stderr) one `exec` may return. More is an error, never a
/// silent truncation: a cut journal page would look like a complete one.
pub const DEFAULT_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;
/// The timeout of every Engine API request but an exec's output stream (bounded by the exec's
/// own timeout).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// What a sandbox container runs unless told otherwise: nothing, for as long as it exists (the
/// agents are started with `exec`). Under Docker's init, which reaps the zombies that exec'd
/// commands leave behind and stops promptly on `destroy`.
pub const DEFAULT_KEEPALIVE: [&str; 2] = ["sleep", "2147483647"];
/// Longest sandbox id accepted (Docker's ids are 64 hex digits; names are shorter in practice).
const MAX_ID_LEN: usize = 128;

/// How a [`DockerProvider`] reaches its daemon.
#[derive(Debug, Clone)]
pub struct DockerProviderOptions {
    /// The daemon's Unix socket.
    pub socket: PathBuf,
    /// The name recorded in instance records and in every container's [`SANDBOX_LABEL`].
    pub name: String,
    /// Strict mode: touch only containers labelled [`SANDBOX_LABEL`] with [`Self::name`].
    /// Off by default, so a container an app framework created without the label (TanStack
    /// AI's Docker provider does) is probed and reclaimed when its record names its exact full
    /// id; a container labelled for another provider name is refused either way, and so is an
    /// unlabelled one named by anything but its full id (see ARCHITECTURE.md, "Docker").
    pub require_label: bool,
    /// Per stream, per `exec`.
    pub output_limit: usize,
    /// How long one Engine API request may take before it fails as unavailable.
    pub request_timeout: Duration,
}

impl DockerProviderOptions {
    /// Every default, with the daemon at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        DockerProviderOptions {
            socket: socket.into(),
            name: DEFAULT_PROVIDER_NAME.into(),
            require_label: false,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// Options from a `DOCKER_HOST`-style value: `unix:///run/docker.sock` or an absolute path.
    pub fn from_host(host: &str) -> Result<Self, ConfigError> {
        let path = host.strip_prefix("unix://").unwrap_or(host);
        if !path.starts_with('/') {
            return Err(ConfigError::Host(host.to_string()));
        }
        Ok(Self::new(path))
    }
}

/// A configuration that cannot work, refused before any sandbox is touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(
        "invalid Docker host {0:?}: give the daemon's Unix socket as unix:///path/docker.sock or \
         an absolute path (TCP and SSH hosts are not supported)"
    )]
    /// `DOCKER_HOST` is not a Unix socket.
    Host(String),
    #[error("invalid provider name: it must not be empty")]
    /// The provider name is empty.
    Name,
    #[error("invalid output limit: it must be at least 1 byte")]
    /// The output limit is zero.
    OutputLimit,
    #[error("cannot reach dockerd at {socket}: {message}; is it running?")]
    /// The daemon did not answer on its socket.
    Connect {
        /// The socket tried.
        socket: String,
        /// What the connection attempt said.
        message: String,
    },
}

/// Per-container options of [`DockerProvider::create`].
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// An image already on the daemon (never pulled: sandboxes start offline).
    pub image: String,
    /// The container's network mode. Default `none`: a sandbox reaches nothing.
    pub network: String,
    /// What the container runs. Default [`DEFAULT_KEEPALIVE`].
    pub command: Option<Vec<String>>,
    /// `KEY=value` pairs for the container (and so for every exec in it).
    pub env: Vec<String>,
    /// More labels for the container (a host daemon's own metadata). [`SANDBOX_LABEL`] and
    /// [`CREATED_AT_LABEL`] are the provider's and cannot be set here.
    pub labels: Vec<(String, String)>,
}

impl CreateOptions {
    /// A container of `image` with every other default (no network, the reaper's label).
    pub fn new(image: impl Into<String>) -> Self {
        CreateOptions {
            image: image.into(),
            network: "none".into(),
            command: None,
            env: Vec::new(),
            labels: Vec::new(),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) docker: Docker,
    pub(crate) options: DockerProviderOptions,
    pub(crate) counters: Counters,
}

impl Inner {
    pub(crate) fn count(&self, endpoint: Endpoint) {
        self.counters.count(endpoint);
    }
}

/// A [`SandboxProvider`] whose sandboxes are containers on one Docker daemon.
///
/// - `resume` inspects the container (one request): a running container is a handle; a
///   missing, stopped or dead one is `None` (a stopped container cannot `exec`, and nothing here
///   restarts one: its agents are gone); a paused or restarting one is an error, since it may
///   come back.
/// - `exec` runs `sh -c command` as a Docker exec (create, attached start, inspect for the exit
///   code: three requests). Docker has no API to kill an exec, so each carries a random token
///   in its environment, and on a timeout or an output overflow a second exec kills every
///   process whose environment holds it (see [`DockerSandbox`]).
/// - `destroy` inspects, then force-removes with its anonymous volumes (two requests); a missing
///   container is `Ok`.
///
/// Both accept only an exact id or name (Docker would otherwise resolve an id prefix to another
/// container), refuse a container labelled [`SANDBOX_LABEL`] for another provider name, and
/// accept an unlabelled container only when named by its exact full 64-hex id and
/// [`DockerProviderOptions::require_label`] is off.
#[derive(Clone)]
pub struct DockerProvider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DockerProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerProvider")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

/// What an inspect told about a sandbox container.
pub(crate) struct Found {
    pub(crate) container_id: String,
    pub(crate) state: ContainerState,
    pub(crate) labels: HashMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContainerState {
    Running,
    /// Paused or restarting: it may come back, so it is neither live nor gone.
    Transient(&'static str),
    /// Created but never started, exited, dead or being removed.
    Stopped,
}

impl DockerProvider {
    /// Connects to the daemon and agrees on the API version (one `GET /version`): the older of
    /// this client's and the daemon's, so old and new daemons both work.
    pub async fn connect(options: DockerProviderOptions) -> Result<Self, ConfigError> {
        Self::connect_with_version(options, None).await
    }

    /// As [`connect`](Self::connect), at a fixed API version without asking the daemon (for a
    /// daemon that answers nothing else, as in fault-injection tests).
    pub async fn connect_at(
        options: DockerProviderOptions,
        version: ClientVersion,
    ) -> Result<Self, ConfigError> {
        Self::connect_with_version(options, Some(version)).await
    }

    async fn connect_with_version(
        options: DockerProviderOptions,
        version: Option<ClientVersion>,
    ) -> Result<Self, ConfigError> {
        if options.name.is_empty() {
            return Err(ConfigError::Name);
        }
        if options.output_limit == 0 {
            return Err(ConfigError::OutputLimit);
        }
        let socket = options.socket.display().to_string();
        let connect_error = |e: bollard::errors::Error| ConfigError::Connect {
            socket: socket.clone(),
            message: e.to_string(),
        };
        // bollard's timeout is whole seconds; round up so a sub-second setting is not 0 (none).
        let timeout = options.request_timeout.as_millis().div_ceil(1000).max(1) as u64;
        let client_version = version.as_ref().unwrap_or(API_DEFAULT_VERSION);
        let docker =
            Docker::connect_with_unix(&socket, timeout, client_version).map_err(connect_error)?;
        let counters = Counters::default();
        let docker = match version {
            Some(_) => docker,
            None => {
                counters.count(Endpoint::Version);
                docker.negotiate_version().await.map_err(connect_error)?
            }
        };
        Ok(DockerProvider {
            inner: Arc::new(Inner {
                docker,
                options,
                counters,
            }),
        })
    }

    /// The options this provider was built with.
    pub fn options(&self) -> &DockerProviderOptions {
        &self.inner.options
    }

    /// The Engine API requests sent so far by this provider and its handles.
    pub fn request_counts(&self) -> RequestCounts {
        self.inner.counters.snapshot()
    }

    /// Creates and starts a sandbox container (two requests), labelled as this provider's. A
    /// container that was created but could not start is removed again.
    pub async fn create(&self, options: CreateOptions) -> Result<DockerSandbox, SandboxError> {
        let inner = &self.inner;
        let mut labels: HashMap<String, String> = options
            .labels
            .into_iter()
            .filter(|(k, _)| k != SANDBOX_LABEL && k != CREATED_AT_LABEL)
            .collect();
        labels.insert(SANDBOX_LABEL.to_string(), inner.options.name.clone());
        labels.insert(CREATED_AT_LABEL.to_string(), now_ms().to_string());
        let body = ContainerCreateBody {
            image: Some(options.image.clone()),
            cmd: Some(
                options
                    .command
                    .unwrap_or_else(|| DEFAULT_KEEPALIVE.map(String::from).to_vec()),
            ),
            env: Some(options.env),
            labels: Some(labels.clone()),
            host_config: Some(HostConfig {
                network_mode: Some(options.network),
                init: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        inner.count(Endpoint::CreateContainer);
        let created = inner
            .docker
            .create_container(None::<CreateContainerOptions>, body)
            .await
            .map_err(|e| match status_of(&e) {
                Some((404, message)) => SandboxError::Refused(format!(
                    "cannot create a sandbox from image {:?}: {message}; load or build the image \
                     on the daemon first (sandboxes never pull)",
                    options.image
                )),
                _ => map(e, "(new)", "create container"),
            })?;
        let id = created.id;
        inner.count(Endpoint::StartContainer);
        if let Err(e) = inner.docker.start_container(&id, None).await {
            let error = map(e, &id, "start container");
            if let Err(cleanup) = self.destroy(&id).await {
                tracing::warn!(target: "reaper", sandbox = %id, error = %cleanup,
                    "a sandbox container that failed to start could not be removed");
            }
            return Err(error);
        }
        tracing::debug!(target: "reaper", sandbox = %id, image = %options.image, "sandbox created");
        Ok(DockerSandbox::new(inner.clone(), id.clone(), id, labels))
    }

    /// The ids of this provider's running sandboxes (one request), sorted: the containers
    /// labelled [`SANDBOX_LABEL`] with this provider's name. Prune walks these; a stopped one
    /// cannot run its prune and is gone for a sandbox anyway.
    pub async fn list(&self) -> Result<Vec<String>, SandboxError> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{SANDBOX_LABEL}={}", self.inner.options.name)],
        )]);
        let options = ListContainersOptionsBuilder::default()
            .filters(&filters)
            .build();
        self.inner.count(Endpoint::ListContainers);
        let found = self
            .inner
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| map(e, "(all)", "list sandboxes"))?;
        let mut ids: Vec<String> = found.into_iter().filter_map(|c| c.id).collect();
        ids.sort();
        Ok(ids)
    }

    /// The live sandbox `id`, with its concrete type. `None` when it is gone (see the type's
    /// docs for what counts as gone).
    pub async fn open(&self, id: &str) -> Result<Option<DockerSandbox>, SandboxError> {
        let Some(found) = self.find(id, "resume").await? else {
            return Ok(None);
        };
        match found.state {
            ContainerState::Running => Ok(Some(DockerSandbox::new(
                self.inner.clone(),
                id.to_string(),
                found.container_id,
                found.labels,
            ))),
            ContainerState::Stopped => Ok(None),
            ContainerState::Transient(state) => Err(SandboxError::Refused(format!(
                "sandbox {id} is {state}: it cannot run commands until it is running again"
            ))),
        }
    }

    /// Inspects sandbox `id`: `None` when no container has that id or name; an error when the
    /// daemon resolved `id` as a prefix of another id, or the container is not this provider's
    /// to touch.
    async fn find(&self, id: &str, what: &str) -> Result<Option<Found>, SandboxError> {
        validate_id(id)?;
        self.inner.count(Endpoint::InspectContainer);
        let info = match self.inner.docker.inspect_container(id, None).await {
            Ok(info) => info,
            Err(e) if matches!(status_of(&e), Some((404, _))) => return Ok(None),
            Err(e) => return Err(map(e, id, what)),
        };
        let Some(container_id) = info.id.clone() else {
            return Err(SandboxError::Other(format!(
                "{what} for sandbox {id}: the daemon's inspect answer has no container id"
            )));
        };
        // Docker resolves an unknown name to a container whose id merely starts with it. That
        // container is not proof the recorded one is gone (a short id recorded for it would be
        // dropped while it runs), nor the recorded one (an id prefix is ambiguous over time):
        // refused, touching nothing and keeping the record.
        let exact = container_id == id || info.name.as_deref() == Some(&format!("/{id}"));
        if !exact {
            return Err(SandboxError::Refused(format!(
                "{what} refused: {id:?} is neither a container's full id nor its name (the daemon \
                 resolved it as an id prefix of {container_id}); reaper acts only on exact ids: \
                 record the full id the daemon returned at create"
            )));
        }
        let labels = info
            .config
            .as_ref()
            .and_then(|c| c.labels.clone())
            .unwrap_or_default();
        let label = labels.get(SANDBOX_LABEL);
        let options = &self.inner.options;
        if label != Some(&options.name) {
            let refuse = |why: String| {
                Err(SandboxError::Refused(format!(
                    "{what} refused: container {id} {why}; reaper never touches other containers"
                )))
            };
            if let Some(other) = label {
                return refuse(format!(
                    "is labelled {SANDBOX_LABEL}={other:?}, a sandbox of another provider than \
                     {:?}",
                    options.name
                ));
            }
            if options.require_label {
                return refuse(format!(
                    "has no {SANDBOX_LABEL} label and strict mode (require_label, \
                     REAPER_DOCKER_REQUIRE_LABEL) asks for {SANDBOX_LABEL}={:?}",
                    options.name
                ));
            }
            // A full id is 256 random bits the daemon never reuses: the container it names is
            // the one created for the record. A name can be taken by any later container (a
            // name may even be 64 hex digits, hence the id itself must match).
            if !is_full_id(id) || container_id != id {
                return refuse(format!(
                    "has no {SANDBOX_LABEL} label and is named by {id:?}, not by its full \
                     64-hex-digit id: record the id the daemon returned at create, or label the \
                     container {SANDBOX_LABEL}={:?}",
                    options.name
                ));
            }
        }
        Ok(Some(Found {
            container_id,
            state: state_of(&info),
            labels,
        }))
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn state_of(info: &ContainerInspectResponse) -> ContainerState {
    let Some(state) = info.state.as_ref() else {
        return ContainerState::Stopped;
    };
    let flag = |f: Option<bool>| f.unwrap_or(false);
    if flag(state.paused) {
        ContainerState::Transient("paused")
    } else if flag(state.restarting) {
        ContainerState::Transient("restarting")
    } else if flag(state.running) && !flag(state.dead) {
        ContainerState::Running
    } else {
        ContainerState::Stopped
    }
}

/// Whether `id` is a container's full id as the daemon returns it: 64 lowercase hex digits.
fn is_full_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A container id or name as Docker spells them. Anything else is refused before it reaches a
/// URL path (bollard interpolates it unescaped).
fn validate_id(id: &str) -> Result<(), SandboxError> {
    let mut bytes = id.bytes();
    let ok = id.len() <= MAX_ID_LEN
        && bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "invalid Docker sandbox id {id:?}: expected a container id or name (letters, digits, \
             '_', '.', '-'; at most {MAX_ID_LEN} characters)"
        )))
    }
}

#[async_trait::async_trait]
impl SandboxProvider for DockerProvider {
    fn name(&self) -> &str {
        &self.inner.options.name
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        Ok(self
            .open(id)
            .await?
            .map(|s| Arc::new(s) as Arc<dyn SandboxHandle>))
    }

    /// Force-removes the container (killing everything in it) and its anonymous volumes. A
    /// missing container is `Ok`; a container of another owner is refused, never removed.
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        let Some(found) = self.find(id, "destroy").await? else {
            return Ok(());
        };
        self.inner.count(Endpoint::RemoveContainer);
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match self
            .inner
            .docker
            .remove_container(&found.container_id, Some(options))
            .await
        {
            Ok(()) => {}
            Err(e) if matches!(status_of(&e), Some((404, _))) => {}
            Err(e) => return Err(map(e, id, "destroy")),
        }
        tracing::debug!(target: "reaper", sandbox = %id, "sandbox destroyed");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_docker_would_not_resolve_exactly_are_refused() {
        for id in [
            "",
            "../x",
            "a/b",
            "-x",
            ".x",
            "x y",
            "x?all=1",
            &"a".repeat(129),
        ] {
            assert!(
                matches!(validate_id(id), Err(SandboxError::Refused(_))),
                "{id:?}"
            );
        }
        for id in ["reaper-1", "a", &"f".repeat(64), "x_y.z-1"] {
            assert!(validate_id(id).is_ok(), "{id:?}");
        }
    }

    #[test]
    fn only_a_full_lowercase_hex_id_counts_as_a_full_container_id() {
        assert!(is_full_id(&"0af9".repeat(16)));
        for id in [
            "0af9".repeat(16)[..63].to_string(),
            "0af9".repeat(16)[..12].to_string(),
            "0AF9".repeat(16),
            format!("{}0", "0af9".repeat(16)),
            "g".repeat(64),
            "reaper-sandbox".into(),
        ] {
            assert!(!is_full_id(&id), "{id:?}");
        }
    }

    #[test]
    fn hosts_other_than_a_unix_socket_are_refused_with_the_accepted_forms() {
        assert_eq!(
            DockerProviderOptions::from_host("unix:///run/d.sock")
                .unwrap()
                .socket,
            PathBuf::from("/run/d.sock")
        );
        assert_eq!(
            DockerProviderOptions::from_host("/run/d.sock")
                .unwrap()
                .socket,
            PathBuf::from("/run/d.sock")
        );
        for host in ["tcp://127.0.0.1:2375", "ssh://x", "run/d.sock", ""] {
            let err = DockerProviderOptions::from_host(host).unwrap_err();
            assert!(err.to_string().contains("unix:///"), "{err}");
        }
    }
}
