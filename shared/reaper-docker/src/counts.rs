//! Engine API requests, counted per endpoint, so a deployment can see what a probe or a reclaim
//! costs the daemon.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The Engine API endpoints the provider calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `GET /version`, once, when the provider negotiates the API version.
    Version,
    /// `POST /containers/create`.
    CreateContainer,
    /// `POST /containers/{id}/start`.
    StartContainer,
    /// `GET /containers/{id}/json`.
    InspectContainer,
    /// `GET /containers/json?filters=…`: this provider's sandboxes (prune's enumeration).
    ListContainers,
    /// `DELETE /containers/{id}?force=1&v=1`.
    RemoveContainer,
    /// `POST /containers/{id}/exec`.
    CreateExec,
    /// `POST /exec/{id}/start`, attached (the output streams over the upgraded connection).
    StartExec,
    /// `GET /exec/{id}/json`: the exit code.
    InspectExec,
}

/// Live counters, shared by a provider and its handles.
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; 9]);

impl Counters {
    pub(crate) fn count(&self, endpoint: Endpoint) {
        self.0[endpoint as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RequestCounts {
        let get = |e: Endpoint| self.0[e as usize].load(Ordering::Relaxed);
        RequestCounts {
            version: get(Endpoint::Version),
            create_container: get(Endpoint::CreateContainer),
            start_container: get(Endpoint::StartContainer),
            inspect_container: get(Endpoint::InspectContainer),
            list_containers: get(Endpoint::ListContainers),
            remove_container: get(Endpoint::RemoveContainer),
            create_exec: get(Endpoint::CreateExec),
            start_exec: get(Endpoint::StartExec),
            inspect_exec: get(Endpoint::InspectExec),
        }
    }
}

/// How many Engine API requests a provider (and every handle it gave out) has sent, per
/// endpoint. Subtract two snapshots to get what one operation cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `GET /version` (the start-up probe).
    pub version: u64,
    /// `POST /containers/create`.
    pub create_container: u64,
    /// `POST /containers/{id}/start`.
    pub start_container: u64,
    /// `GET /containers/{id}/json`.
    pub inspect_container: u64,
    /// `GET /containers/json`.
    pub list_containers: u64,
    /// `DELETE /containers/{id}`.
    pub remove_container: u64,
    /// `POST /containers/{id}/exec`.
    pub create_exec: u64,
    /// `POST /exec/{id}/start`.
    pub start_exec: u64,
    /// `GET /exec/{id}/json`.
    pub inspect_exec: u64,
}

impl RequestCounts {
    /// Every request, whatever the endpoint.
    pub fn total(&self) -> u64 {
        self.version
            + self.create_container
            + self.start_container
            + self.inspect_container
            + self.list_containers
            + self.remove_container
            + self.create_exec
            + self.start_exec
            + self.inspect_exec
    }

    /// The requests sent between `earlier` and `self`.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            version: self.version - earlier.version,
            create_container: self.create_container - earlier.create_container,
            start_container: self.start_container - earlier.start_container,
            inspect_container: self.inspect_container - earlier.inspect_container,
            list_containers: self.list_containers - earlier.list_containers,
            remove_container: self.remove_container - earlier.remove_container,
            create_exec: self.create_exec - earlier.create_exec,
            start_exec: self.start_exec - earlier.start_exec,
            inspect_exec: self.inspect_exec - earlier.inspect_exec,
        }
    }
}

impl fmt::Display for RequestCounts {
    /// `5 requests (inspect container 1, create exec 2, start exec 2)`: non-zero endpoints only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [
            ("version", self.version),
            ("create container", self.create_container),
            ("start container", self.start_container),
            ("inspect container", self.inspect_container),
            ("list containers", self.list_containers),
            ("remove container", self.remove_container),
            ("create exec", self.create_exec),
            ("start exec", self.start_exec),
            ("inspect exec", self.inspect_exec),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
        write!(f, "{} requests ({})", self.total(), parts.join(", "))
    }
}
