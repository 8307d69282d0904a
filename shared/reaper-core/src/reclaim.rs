//! Tearing down the sandbox of a run that became terminal (spec F).

use std::sync::Arc;

use crate::domain::RunRecord;
use crate::error::{ReclaimError, SandboxReclaimFailedError, StoreError};
use crate::ports::{Reclaim, SandboxInstanceStore, SandboxProvider};

/// What [`reclaim_sandbox`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimOutcome {
    /// The provider destroyed it and the instance record is gone.
    Destroyed,
    /// The provider's destroy failed; the instance record was deleted anyway, so the sandbox may
    /// still be running and is no longer reachable from here. The leak the reaper exists to stop.
    DestroyFailed,
    /// The run never ran in a sandbox.
    NoSandboxKey,
    /// No instance record for the key: nothing to do.
    NotFound,
    /// The record belongs to another provider: refused, nothing touched.
    ProviderMismatch,
}

impl ReclaimOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReclaimOutcome::Destroyed => "destroyed",
            ReclaimOutcome::DestroyFailed => "destroy-failed",
            ReclaimOutcome::NoSandboxKey => "no-sandbox-key",
            ReclaimOutcome::NotFound => "not-found",
            ReclaimOutcome::ProviderMismatch => "provider-mismatch",
        }
    }
}

/// Destroys the sandbox a run was bound to, in this order: the provider check before any
/// destroy or delete (a mismatch would hand one provider's id to another and could destroy a
/// stranger's workload); destroy; then delete the instance record whether or not the destroy
/// succeeded (a record pointing at nothing breaks the thread's next turn). Instance-store
/// errors propagate.
pub async fn reclaim_sandbox(
    record: &RunRecord,
    provider: &dyn SandboxProvider,
    instances: &dyn SandboxInstanceStore,
) -> Result<ReclaimOutcome, StoreError> {
    let Some(key) = record.sandbox_key.as_deref() else {
        return Ok(ReclaimOutcome::NoSandboxKey);
    };
    let Some(instance) = instances.get(key).await? else {
        return Ok(ReclaimOutcome::NotFound);
    };
    if instance.provider != provider.name() {
        tracing::warn!(
            target: "reaper",
            run_id = %record.run_id,
            sandbox_key = key,
            record_provider = %instance.provider,
            reclaimer_provider = provider.name(),
            "the sandbox record belongs to a different provider; refusing to reclaim it"
        );
        return Ok(ReclaimOutcome::ProviderMismatch);
    }
    let destroy_failed = match provider.destroy(&instance.provider_sandbox_id).await {
        Ok(()) => false,
        Err(error) => {
            tracing::warn!(
                target: "reaper",
                run_id = %record.run_id,
                sandbox_key = key,
                provider_sandbox_id = %instance.provider_sandbox_id,
                %error,
                "sandbox destroy failed; deleting the instance record anyway"
            );
            true
        }
    };
    instances.delete(key).await?;
    Ok(if destroy_failed {
        ReclaimOutcome::DestroyFailed
    } else {
        ReclaimOutcome::Destroyed
    })
}

/// The sweep's reclaim hook over a provider and an instance store: fails with
/// [`SandboxReclaimFailedError`] when the destroy failed, succeeds on every other outcome.
#[derive(Clone)]
pub struct SandboxReclaimer {
    pub provider: Arc<dyn SandboxProvider>,
    pub instances: Arc<dyn SandboxInstanceStore>,
}

impl std::fmt::Debug for SandboxReclaimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxReclaimer")
            .field("provider", &self.provider.name())
            .finish()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl Reclaim for SandboxReclaimer {
    async fn reclaim(&self, record: &RunRecord) -> Result<(), ReclaimError> {
        let outcome =
            reclaim_sandbox(record, self.provider.as_ref(), self.instances.as_ref()).await?;
        if outcome == ReclaimOutcome::DestroyFailed {
            tracing::error!(
                target: "reaper",
                run_id = %record.run_id,
                sandbox_key = record.sandbox_key.as_deref(),
                "reclaim: destroy failed; the sandbox may still be running"
            );
            return Err(SandboxReclaimFailedError {
                run_id: record.run_id.clone(),
                sandbox_key: record.sandbox_key.clone(),
            }
            .into());
        }
        tracing::debug!(
            target: "reaper",
            run_id = %record.run_id,
            sandbox_key = record.sandbox_key.as_deref(),
            "reclaim: {}",
            outcome.as_str()
        );
        Ok(())
    }
}
