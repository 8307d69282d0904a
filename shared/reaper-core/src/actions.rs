//! An operator's actions on one run or one ledger entry (issue 25), each through the sweep's own
//! machinery, so an action is exactly as safe as a sweep: [`expire_now`] takes the expire path
//! (claim, in-lock re-check, durable reclaim intent, fenced cancel, drive under the budget,
//! reclaim with the in-use check); [`retry_reclaim_now`] retries a ledger entry under the run's
//! claim, as the ledger pass does; [`forget_leak`] drops a leak only once the provider confirms
//! its sandbox gone. None of them honours the pause: an operator acting by hand is the point.

use crate::claim::run_driver_lock_key;
use crate::domain::ReclaimIntent;
use crate::error::{OptionsError, StoreError};
use crate::ports::{
    LeaseGrant, LeaseStore, ReclaimLedger, SandboxInstanceStore, SandboxProvider, SandboxState,
};
use crate::reap::{ReapDeps, ReapOptions, ReapRunEntry};

/// Why an action did nothing.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    /// The options the action runs under were invalid.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The action does not apply (the run is terminal, attached, busy, …): the sentence says
    /// why and what to do.
    #[error("{0}")]
    Refused(String),
}

/// Expires one detached run now, whatever its TTL, through the sweep's expire path. Refused
/// when the run is missing, already terminal, or attached to a viewer (its `detachedSince` is
/// not set: it is not the reaper's to end). A viewer who returns before the claim's re-check
/// still wins (`not-claimed/viewer-returned`).
pub async fn expire_now(
    deps: &ReapDeps,
    options: &ReapOptions,
    run_id: &str,
) -> Result<ReapRunEntry, ActionError> {
    options.validate()?;
    let guarded = deps.guarded();
    let deps = &guarded;
    let Some(record) = deps.runs.get(run_id).await? else {
        return Err(ActionError::Refused(format!(
            "there is no run {run_id:?} in this database: check the id (reaper status lists the \
             detached runs)"
        )));
    };
    if record.status.is_terminal() {
        return Err(ActionError::Refused(format!(
            "run {run_id} is already {}: nothing to expire",
            record.status
        )));
    }
    let Some(detached) = record.detached_since else {
        return Err(ActionError::Refused(format!(
            "run {run_id} is attached to a viewer (it has no detachedSince): only a detached run \
             is the reaper's to expire"
        )));
    };
    // The cutoff that makes this run expired and keeps the re-check's meaning: a viewer who
    // re-attached (detachedSince cleared) or re-detached later refuses the cancel.
    let cutoff = deps.clock.now_ms().max(detached);
    Ok(Box::pin(crate::reap::reap_claimed(
        deps, options, &record, cutoff, true, None,
    ))
    .await)
}

/// What [`retry_reclaim_now`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum RetryNow {
    /// The entry is settled: the sandbox is confirmed gone (or kept, or the run was not
    /// terminal and the listing finds it again); the entry is resolved.
    Settled,
    /// The retry failed again; the entry stays, rescheduled, with its error.
    Failed {
        /// What the destroy answered.
        error: String,
    },
}

/// Retries one reclaim-ledger entry now, under the run's claim, as the sweep's ledger pass does
/// (whatever its backoff says). Refused when there is no entry, or when another sweep holds the
/// run's claim right now.
pub async fn retry_reclaim_now(
    deps: &ReapDeps,
    options: &ReapOptions,
    run_id: &str,
) -> Result<RetryNow, ActionError> {
    options.validate()?;
    let guarded = deps.guarded();
    let deps = &guarded;
    let Some(intent) = deps.ledger.get_intent(run_id).await? else {
        return Err(no_entry(run_id));
    };
    let lease = claim(deps.leases.as_ref(), run_id, &options.owner, deps, options).await?;
    let result = crate::reap::settle_intent(deps, options, intent).await;
    if let Err(error) = deps.leases.release(&lease).await {
        tracing::warn!(target: "reaper", run_id, %error, "releasing the run's claim failed; it will expire");
    }
    Ok(match result {
        Ok(()) => match deps.ledger.get_intent(run_id).await? {
            None => RetryNow::Settled,
            Some(left) => RetryNow::Failed {
                error: left
                    .last_error
                    .unwrap_or_else(|| "the entry is still in the ledger".into()),
            },
        },
        Err(error) => RetryNow::Failed {
            error: error.to_string(),
        },
    })
}

/// What [`forget_leak`] removed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forgotten {
    /// The run whose ledger entry was dropped.
    pub run_id: String,
    /// The provider that confirmed the sandbox gone.
    pub provider: String,
    /// The sandbox it confirmed gone.
    pub sandbox_id: String,
    /// The sandbox instance record that still named the gone sandbox was deleted too.
    pub instance_record_deleted: bool,
}

/// Drops the ledger entry of a sandbox an operator destroyed by hand, only once the provider
/// confirms it gone (its state says gone, or, when the provider keeps no state, it cannot be
/// opened). The instance record still naming it goes too, as after the reaper's own destroy.
/// Under the run's claim, so a sweep retrying the same entry never races it.
pub async fn forget_leak(
    leases: &dyn LeaseStore,
    ledger: &dyn ReclaimLedger,
    instances: &dyn SandboxInstanceStore,
    provider: &dyn SandboxProvider,
    options: &ReapOptions,
    now: crate::domain::EpochMs,
    run_id: &str,
) -> Result<Forgotten, ActionError> {
    let Some(intent) = ledger.get_intent(run_id).await? else {
        return Err(no_entry(run_id));
    };
    let (name, id) = sandbox_of(&intent, instances).await?;
    if !provider.serves(&name) {
        return Err(ActionError::Refused(format!(
            "the sandbox {id} is a {name} sandbox, a provider this reaper is not configured with, \
             so it cannot confirm it gone: run this with that provider configured"
        )));
    }
    gone(provider, &name, &id).await?;
    let lease = match leases
        .acquire(
            &run_driver_lock_key(run_id),
            &options.owner,
            now,
            options.claim_ttl(),
        )
        .await?
    {
        LeaseGrant::Acquired(lease) => lease,
        LeaseGrant::Held { owner, .. } => return Err(busy(run_id, &owner)),
    };
    let result = async {
        let mut deleted = false;
        if let Some(key) = intent.sandbox_key.as_deref() {
            if let Some(instance) = instances.get(key).await? {
                if instance.provider == name && instance.provider_sandbox_id == id {
                    instances.delete(key).await?;
                    deleted = true;
                }
            }
        }
        ledger.resolve_intent(run_id).await?;
        Ok::<_, StoreError>(deleted)
    }
    .await;
    if let Err(error) = leases.release(&lease).await {
        tracing::warn!(target: "reaper", run_id, %error, "releasing the run's claim failed; it will expire");
    }
    Ok(Forgotten {
        run_id: run_id.to_string(),
        provider: name,
        sandbox_id: id,
        instance_record_deleted: result?,
    })
}

/// The sandbox a ledger entry is about: the one an earlier attempt saw, else the instance
/// record's.
async fn sandbox_of(
    intent: &ReclaimIntent,
    instances: &dyn SandboxInstanceStore,
) -> Result<(String, String), ActionError> {
    if let (Some(p), Some(id)) = (&intent.provider, &intent.provider_sandbox_id) {
        return Ok((p.clone(), id.clone()));
    }
    if let Some(key) = intent.sandbox_key.as_deref() {
        if let Some(instance) = instances.get(key).await? {
            return Ok((instance.provider, instance.provider_sandbox_id));
        }
    }
    Err(ActionError::Refused(format!(
        "the ledger entry of run {} names no sandbox the provider could be asked about: use \
         `reaper ledger retry {}` instead, which settles an entry with nothing to destroy",
        intent.run_id, intent.run_id
    )))
}

/// Ok when the provider confirms the sandbox gone; a refusal saying what it answered otherwise.
async fn gone(provider: &dyn SandboxProvider, name: &str, id: &str) -> Result<(), ActionError> {
    let refuse = |what: String| {
        Err(ActionError::Refused(format!(
            "the {name} sandbox {id} {what}: destroy it first (or let `reaper ledger retry` \
             destroy it); nothing was forgotten"
        )))
    };
    match provider.state_recorded(name, id).await {
        Ok(Some(SandboxState::Gone)) => return Ok(()),
        Ok(Some(state)) => return refuse(format!("still exists ({state:?})")),
        Ok(None) => {}
        Err(error) => return refuse(format!("could not be confirmed gone: {error}")),
    }
    // A provider that keeps no state: gone when it cannot be opened.
    match provider.resume_recorded(name, id).await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => refuse("still exists".into()),
        Err(error) => refuse(format!("could not be confirmed gone: {error}")),
    }
}

async fn claim(
    leases: &dyn LeaseStore,
    run_id: &str,
    owner: &str,
    deps: &ReapDeps,
    options: &ReapOptions,
) -> Result<crate::ports::Lease, ActionError> {
    match leases
        .acquire(
            &run_driver_lock_key(run_id),
            owner,
            deps.clock.now_ms(),
            options.claim_ttl(),
        )
        .await?
    {
        LeaseGrant::Acquired(lease) => Ok(lease),
        LeaseGrant::Held { owner, .. } => Err(busy(run_id, &owner)),
    }
}

fn busy(run_id: &str, owner: &str) -> ActionError {
    ActionError::Refused(format!(
        "{owner} holds run {run_id}'s claim right now (a sweep is working on it): try again when \
         it is done"
    ))
}

fn no_entry(run_id: &str) -> ActionError {
    ActionError::Refused(format!(
        "there is no reclaim-ledger entry for run {run_id}: reaper status lists the ledger"
    ))
}
