//! How Engine API failures become [`SandboxError`]s. The probe answers `unknown` for any error
//! and reclaim keeps the ledger entry, so what matters is that "gone" (`NotFound`, or `Ok` from
//! a destroy) is never reported for a failure, and that a daemon that did not answer is
//! `Unreachable`.

use bollard::errors::Error as DockerError;
use reaper_core::SandboxError;

/// An Engine API error answer: its HTTP status and the daemon's message.
pub(crate) fn status_of(e: &DockerError) -> Option<(u16, &str)> {
    match e {
        DockerError::DockerResponseServerError {
            status_code,
            message,
        } => Some((*status_code, message.as_str())),
        _ => None,
    }
}

/// Maps an error of a request about sandbox `id`; `what` names the request for the message.
/// A 404 is *not* mapped to `NotFound` here: whether it means "gone" depends on the request, so
/// callers match it first.
pub(crate) fn map(e: DockerError, id: &str, what: &str) -> SandboxError {
    match &e {
        DockerError::DockerResponseServerError {
            status_code,
            message,
        } => match *status_code {
            401 | 403 => SandboxError::Refused(format!(
                "{what} for sandbox {id}: the Docker daemon refused access ({status_code}): \
                 {message}"
            )),
            // A proxy or a daemon that is starting or overloaded: try again later.
            429 | 502 | 503 | 504 => SandboxError::Unreachable(format!(
                "{what} for sandbox {id}: the Docker daemon is not answering now \
                 ({status_code}): {message}"
            )),
            _ => SandboxError::Other(format!(
                "{what} for sandbox {id} failed ({status_code}): {message}"
            )),
        },
        DockerError::SocketNotFoundError(path) => SandboxError::Unreachable(format!(
            "{what} for sandbox {id}: no Docker socket at {path}; is dockerd running?"
        )),
        DockerError::IOError { .. }
        | DockerError::HyperResponseError { .. }
        | DockerError::HyperLegacyError { .. }
        | DockerError::RequestTimeoutError => SandboxError::Unreachable(format!(
            "{what} for sandbox {id}: the Docker daemon did not answer: {e}"
        )),
        _ => SandboxError::Other(format!("{what} for sandbox {id} failed: {e}")),
    }
}
