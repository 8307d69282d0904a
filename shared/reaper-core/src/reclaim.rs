//! Tearing down the sandbox of a run that became terminal (spec F), with two rules the reference
//! lacks: a sandbox that a non-terminal run still uses is never destroyed, and a failed destroy
//! keeps the instance record (the reclaim ledger retries it) instead of forgetting the sandbox.

use std::sync::Arc;

use crate::domain::{ReclaimIntent, RunRecord, SandboxInstanceRecord};
use crate::error::{ReclaimError, SandboxReclaimFailedError, StoreError};
use crate::ports::{Reclaim, Reclaimed, RunStore, SandboxInstanceStore, SandboxProvider};

/// What [`reclaim_sandbox`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReclaimOutcome {
    /// The provider destroyed it and the instance record is gone.
    Destroyed,
    /// The provider's destroy failed. The instance record is kept: the sandbox may still be
    /// running, and the ledger retries it.
    DestroyFailed {
        provider: String,
        provider_sandbox_id: String,
        reason: String,
    },
    /// The run never ran in a sandbox.
    NoSandboxKey,
    /// No instance record for the key and no sandbox on file from an earlier attempt.
    NotFound,
    /// The record belongs to another provider: refused, nothing touched.
    ProviderMismatch,
    /// A non-terminal run still uses the sandbox (a newer turn of the thread): kept.
    InUse { run_id: String },
}

impl ReclaimOutcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            ReclaimOutcome::Destroyed => "destroyed",
            ReclaimOutcome::DestroyFailed { .. } => "destroy-failed",
            ReclaimOutcome::NoSandboxKey => "no-sandbox-key",
            ReclaimOutcome::NotFound => "not-found",
            ReclaimOutcome::ProviderMismatch => "provider-mismatch",
            ReclaimOutcome::InUse { .. } => "in-use",
        }
    }
}

/// Destroys the sandbox a terminal run was bound to, in this order:
///
/// 1. the provider check, before any destroy or delete (a mismatch would hand one provider's id
///    to another and could destroy a stranger's workload);
/// 2. the in-use check: the instance's latest run, and every run of the thread that names the
///    same key, must be terminal (two turns of a thread share a sandbox; finalizing the older one
///    must not kill the newer);
/// 3. destroy; the instance record is deleted only once the destroy succeeded.
///
/// `intent` carries the sandbox an earlier attempt saw: when the instance record has since gone,
/// or moved on to another sandbox, that earlier sandbox (the leak) is the one destroyed, never
/// the new one. Store errors propagate (nothing is destroyed without the proof).
pub async fn reclaim_sandbox(
    record: &RunRecord,
    intent: &ReclaimIntent,
    provider: &dyn SandboxProvider,
    instances: &dyn SandboxInstanceStore,
    runs: &dyn RunStore,
) -> Result<ReclaimOutcome, StoreError> {
    let Some(key) = record
        .sandbox_key
        .as_deref()
        .or(intent.sandbox_key.as_deref())
    else {
        return Ok(ReclaimOutcome::NoSandboxKey);
    };
    let on_file = intent
        .provider
        .as_deref()
        .zip(intent.provider_sandbox_id.as_deref());
    let Some(instance) = instances.get(key).await? else {
        // An earlier attempt deleted nothing (it failed) but the application may have: destroy
        // the sandbox that attempt saw, if it is this provider's.
        return match on_file {
            Some((p, id)) if provider.serves(p) => Ok(destroy(provider, record, key, p, id).await),
            Some(_) => Ok(ReclaimOutcome::ProviderMismatch),
            None => Ok(ReclaimOutcome::NotFound),
        };
    };
    if !provider.serves(&instance.provider) {
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
    if let Some((p, old)) = on_file {
        if p == instance.provider && old != instance.provider_sandbox_id {
            // The key now names a new sandbox (the thread's next turn): only the old one is ours.
            return Ok(destroy(provider, record, key, p, old).await);
        }
    }
    if let Some(user) = live_user(record, key, &instance, runs).await? {
        tracing::info!(
            target: "reaper",
            run_id = %record.run_id,
            sandbox_key = key,
            in_use_by = %user,
            "a non-terminal run still uses the sandbox; keeping it"
        );
        return Ok(ReclaimOutcome::InUse { run_id: user });
    }
    let outcome = destroy(
        provider,
        record,
        key,
        &instance.provider,
        &instance.provider_sandbox_id,
    )
    .await;
    if outcome == ReclaimOutcome::Destroyed {
        instances.delete(key).await?;
    }
    Ok(outcome)
}

async fn destroy(
    provider: &dyn SandboxProvider,
    record: &RunRecord,
    key: &str,
    provider_name: &str,
    id: &str,
) -> ReclaimOutcome {
    match provider.destroy_recorded(provider_name, id).await {
        Ok(()) => ReclaimOutcome::Destroyed,
        Err(error) => {
            tracing::warn!(
                target: "reaper",
                run_id = %record.run_id,
                sandbox_key = key,
                provider_sandbox_id = id,
                %error,
                "sandbox destroy failed; keeping the instance record for the next attempt"
            );
            ReclaimOutcome::DestroyFailed {
                provider: provider_name.to_string(),
                provider_sandbox_id: id.to_string(),
                reason: error.to_string(),
            }
        }
    }
}

/// A non-terminal run other than `record` that uses the sandbox, if any: the instance's latest
/// run first (the application's own word on who uses it), then the thread's runs naming the key.
async fn live_user(
    record: &RunRecord,
    key: &str,
    instance: &SandboxInstanceRecord,
    runs: &dyn RunStore,
) -> Result<Option<String>, StoreError> {
    if let Some(latest) = instance.latest_run_id.as_deref() {
        if latest != record.run_id {
            if let Some(run) = runs.get(latest).await? {
                if !run.status.is_terminal() {
                    return Ok(Some(run.run_id));
                }
            }
        }
    }
    if !runs.capabilities().list_by_thread {
        return Ok(None);
    }
    let mut threads = vec![record.thread_id.as_str()];
    if instance.thread_id != record.thread_id {
        threads.push(instance.thread_id.as_str());
    }
    for thread in threads {
        for run in runs.list_by_thread(thread).await? {
            if run.run_id != record.run_id
                && !run.status.is_terminal()
                && run.sandbox_key.as_deref() == Some(key)
            {
                return Ok(Some(run.run_id));
            }
        }
    }
    Ok(None)
}

/// The sweep's reclaim hook over a provider, an instance store and the run store (for the
/// in-use check): a failed destroy is an error carrying what the ledger needs to retry it.
#[derive(Clone)]
pub struct SandboxReclaimer {
    pub provider: Arc<dyn SandboxProvider>,
    pub instances: Arc<dyn SandboxInstanceStore>,
    pub runs: Arc<dyn RunStore>,
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
    async fn reclaim(
        &self,
        record: &RunRecord,
        intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError> {
        let outcome = reclaim_sandbox(
            record,
            intent,
            self.provider.as_ref(),
            self.instances.as_ref(),
            self.runs.as_ref(),
        )
        .await?;
        tracing::debug!(
            target: "reaper",
            run_id = %record.run_id,
            sandbox_key = record.sandbox_key.as_deref(),
            "reclaim: {}",
            outcome.as_str()
        );
        match outcome {
            ReclaimOutcome::Destroyed => Ok(Reclaimed::Destroyed),
            ReclaimOutcome::NoSandboxKey | ReclaimOutcome::NotFound => Ok(Reclaimed::Nothing),
            ReclaimOutcome::ProviderMismatch => Ok(Reclaimed::Kept(format!(
                "the instance record belongs to another provider than {}",
                self.provider.name()
            ))),
            ReclaimOutcome::InUse { run_id } => Ok(Reclaimed::Kept(format!(
                "run {run_id} is not terminal and uses the same sandbox"
            ))),
            ReclaimOutcome::DestroyFailed {
                provider,
                provider_sandbox_id,
                reason,
            } => Err(SandboxReclaimFailedError {
                run_id: record.run_id.clone(),
                sandbox_key: record
                    .sandbox_key
                    .clone()
                    .or_else(|| intent.sandbox_key.clone()),
                provider: Some(provider),
                provider_sandbox_id: Some(provider_sandbox_id),
                reason,
            }
            .into()),
        }
    }
}
