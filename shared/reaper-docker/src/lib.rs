//! A sandbox provider over the Docker Engine API on a Unix socket: each sandbox is a container
//! (network `none` by default, labelled as the provider's), every journal operation an exec.
//!
//! Tested against a real `dockerd` (`dockerd/start.sh` starts one with no bridge and no
//! iptables, and builds a BusyBox image offline); see `tests/`.
#![warn(missing_docs)]

mod counts;
mod error;
mod provider;
mod sandbox;

/// The Engine API version type, for [`DockerProvider::connect_at`].
pub use bollard::ClientVersion;
pub use counts::RequestCounts;
pub use provider::{
    ConfigError, CreateOptions, DockerProvider, DockerProviderOptions, CREATED_AT_LABEL,
    DEFAULT_KEEPALIVE, DEFAULT_OUTPUT_LIMIT, DEFAULT_PROVIDER_NAME, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SOCKET, SANDBOX_LABEL,
};
pub use sandbox::{AgentInfo, DockerSandbox, AGENTS_FILE, EXEC_TOKEN_ENV};
