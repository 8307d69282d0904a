//! `probe_run_exit`: whether a detached run's agent has finished, read from the journal's tail
//! inside its sandbox (spec D.4–D.6), and [`JournalExitProbe`], the [`ExitProbe`] built on it.
//!
//! The probe is read-only (one `exec` of a `tail | base64`; no append, no record write) and never
//! answers `Finished` on a failure: anything it cannot read is `Unknown`, and a window without a
//! genuine sentinel is `Producing`, both of which leave the run alone.

use std::sync::Arc;

use crate::domain::RunRecord;
use crate::error::ProbeError;
use crate::error::SandboxError;
use crate::journal::{
    decode_base64_text, exit_probe_command, journal_paths, parse_journal_exit,
    DEFAULT_EXIT_PROBE_BYTES,
};
use crate::ports::{
    ExecOptions, ExitProbe, RecordedSandbox, RunExitProbe, SandboxHandle, SandboxInstanceStore,
    SandboxProvider, SandboxState,
};
use crate::reason::Unreachable;

/// How the probe reads the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOptions {
    /// The journal directory; `None` is [`crate::journal::DEFAULT_JOURNAL_DIR`].
    pub dir: Option<String>,
    /// How many bytes of the journal's tail to scan. Must be at least 1.
    pub max_bytes: u64,
    /// The `exec` timeout.
    pub exec_timeout_ms: u64,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            dir: None,
            max_bytes: DEFAULT_EXIT_PROBE_BYTES,
            exec_timeout_ms: ExecOptions::default().timeout_ms,
        }
    }
}

/// Reads the last `max_bytes` of the run's journal and looks for its nonced exit sentinel.
///
/// `exec`'s exit code and stderr are ignored: only the base64 frame on stdout matters, and a
/// missing journal is an empty frame (`Producing`).
pub async fn probe_run_exit(
    handle: &dyn SandboxHandle,
    run_id: &str,
    options: &ProbeOptions,
) -> RunExitProbe {
    let unknown = |error: String| {
        tracing::debug!(run_id, sandbox = handle.id(), %error, "journal exit probe could not tell");
        RunExitProbe::Unknown { error: Some(error) }
    };
    let paths = match journal_paths(run_id, options.dir.as_deref()) {
        Ok(paths) => paths,
        Err(e) => return unknown(e.to_string()),
    };
    let command = match exit_probe_command(&paths, options.max_bytes) {
        Ok(command) => command,
        Err(e) => return unknown(e.to_string()),
    };
    let exec = ExecOptions {
        timeout_ms: options.exec_timeout_ms,
    };
    let output = match handle.exec(&command, exec).await {
        Ok(output) => output,
        Err(e) => return unknown(e.to_string()),
    };
    let tail = match decode_base64_text(&output.stdout) {
        Ok(tail) => tail,
        Err(e) => return unknown(e.to_string()),
    };
    match parse_journal_exit(&tail, &paths) {
        Some(exit_code) => {
            tracing::debug!(run_id, exit_code, "journal exit sentinel found");
            RunExitProbe::Finished { exit_code }
        }
        None => RunExitProbe::Producing,
    }
}

/// The application's `hasFinished` for runs whose agents write a journal: finds the run's sandbox
/// from its recorded `sandboxKey` and probes the journal there.
///
/// Never returns `Err` (a probe that "throws" is reported `failed` by the sweep; this one turns
/// every problem into `Unknown` or `Unreachable`, which leave the run alone). `Unknown` carries
/// the error when something failed; a run with no key, no instance record, an instance of another
/// provider or a sandbox that is gone is `Unreachable` with that cause.
#[derive(Clone)]
pub struct JournalExitProbe {
    /// Reaches the sandboxes.
    pub provider: Arc<dyn SandboxProvider>,
    /// Finds a run's sandbox from its key.
    pub instances: Arc<dyn SandboxInstanceStore>,
    /// How much to read and how long to wait.
    pub options: ProbeOptions,
}

impl std::fmt::Debug for JournalExitProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalExitProbe")
            .field("provider", &self.provider.name())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl JournalExitProbe {
    /// A probe over these ports.
    pub fn new(
        provider: Arc<dyn SandboxProvider>,
        instances: Arc<dyn SandboxInstanceStore>,
        options: ProbeOptions,
    ) -> Self {
        JournalExitProbe {
            provider,
            instances,
            options,
        }
    }

    async fn probe(&self, record: &RunRecord) -> RunExitProbe {
        let run_id = record.run_id.as_str();
        let Some(key) = record.sandbox_key.as_deref() else {
            tracing::debug!(run_id, "no sandbox key recorded: exit unknown");
            return RunExitProbe::Unreachable(Unreachable::NoSandboxKey);
        };
        let instance = match self.instances.get(key).await {
            Ok(Some(instance)) => instance,
            Ok(None) => {
                tracing::debug!(
                    run_id,
                    sandbox_key = key,
                    "no instance record: exit unknown"
                );
                return RunExitProbe::Unreachable(Unreachable::NoInstanceRecord {
                    sandbox_key: key.to_string(),
                });
            }
            Err(e) => {
                return RunExitProbe::Unknown {
                    error: Some(format!("instance lookup for sandbox key {key} failed: {e}")),
                }
            }
        };
        if !self.provider.serves(&instance.provider) {
            // Not an error of this run: another provider's sandbox is simply not ours to read.
            tracing::warn!(
                run_id,
                sandbox_key = key,
                instance_provider = %instance.provider,
                provider = self.provider.name(),
                "instance belongs to another provider: exit unknown"
            );
            return RunExitProbe::Unreachable(Unreachable::ProviderNotConfigured {
                provider: instance.provider,
                serves: self.provider.name().to_string(),
            });
        }
        let handle = match self
            .provider
            .resume_recorded(&instance.provider, &instance.provider_sandbox_id)
            .await
        {
            Ok(Some(handle)) => handle,
            Ok(None) => {
                tracing::debug!(
                    run_id,
                    sandbox = %instance.provider_sandbox_id,
                    "sandbox is gone: exit unknown"
                );
                return RunExitProbe::Unreachable(Unreachable::SandboxGone {
                    provider: instance.provider,
                    sandbox_id: instance.provider_sandbox_id,
                });
            }
            Err(e) => {
                return RunExitProbe::Unknown {
                    error: Some(format!(
                        "resuming sandbox {} failed: {e}",
                        instance.provider_sandbox_id
                    )),
                }
            }
        };
        probe_run_exit(handle.as_ref(), run_id, &self.options).await
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl ExitProbe for JournalExitProbe {
    async fn has_finished(&self, record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        Ok(self.probe(record).await)
    }

    /// The instance record of the run's key, then one [`SandboxProvider::state_recorded`].
    async fn stopped_sandbox(
        &self,
        record: &RunRecord,
    ) -> Result<Option<RecordedSandbox>, SandboxError> {
        let Some(key) = record.sandbox_key.as_deref() else {
            return Ok(None);
        };
        let instance = match self.instances.get(key).await {
            Ok(Some(instance)) => instance,
            Ok(None) => return Ok(None),
            Err(e) => {
                return Err(SandboxError::Other(format!(
                    "instance lookup for sandbox key {key} failed: {e}"
                )))
            }
        };
        if !self.provider.serves(&instance.provider) {
            return Ok(None);
        }
        let sandbox = RecordedSandbox {
            provider: instance.provider,
            id: instance.provider_sandbox_id,
        };
        match self.sandbox_state(&sandbox).await? {
            Some(SandboxState::Stopped) => Ok(Some(sandbox)),
            _ => Ok(None),
        }
    }

    async fn sandbox_state(
        &self,
        sandbox: &RecordedSandbox,
    ) -> Result<Option<SandboxState>, SandboxError> {
        self.provider
            .state_recorded(&sandbox.provider, &sandbox.id)
            .await
    }

    async fn start_for_read(&self, sandbox: &RecordedSandbox) -> Result<(), SandboxError> {
        self.provider
            .start_for_read_recorded(&sandbox.provider, &sandbox.id)
            .await
    }

    async fn restore(&self, sandbox: &RecordedSandbox) -> Result<(), SandboxError> {
        self.provider
            .restore_recorded(&sandbox.provider, &sandbox.id)
            .await
    }
}
