//! Tearing down the sandbox of a run that became terminal (spec F), with two rules the reference
//! lacks: a sandbox that a non-terminal run still uses is never destroyed, and a failed destroy
//! keeps the instance record (the reclaim ledger retries it) instead of forgetting the sandbox.

use std::sync::Arc;

use crate::domain::{ReclaimIntent, RunRecord, SandboxInstanceRecord};
use crate::error::{ReclaimError, SandboxReclaimFailedError, StoreError};
use crate::ports::{Reclaim, Reclaimed, RunStore, SandboxInstanceStore, SandboxProvider};
use crate::reason::{Reason, ReasonCode};

/// What [`reclaim_sandbox`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(
    rename_all = "kebab-case",
    rename_all_fields = "camelCase",
    tag = "outcome"
)]
pub enum ReclaimOutcome {
    /// The provider destroyed it and the instance record is gone.
    Destroyed,
    /// The provider's destroy failed. The instance record is kept: the sandbox may still be
    /// running, and the ledger retries it.
    DestroyFailed {
        /// The provider whose destroy failed.
        provider: String,
        /// The sandbox's id there.
        provider_sandbox_id: String,
        /// What the provider answered.
        reason: String,
    },
    /// The run never ran in a sandbox.
    NoSandboxKey,
    /// No instance record for the key and no sandbox on file from an earlier attempt.
    NotFound,
    /// The record belongs to another provider: refused, nothing touched.
    ProviderMismatch,
    /// A non-terminal run still uses the sandbox (a newer turn of the thread): kept.
    InUse {
        /// The run using it.
        run_id: String,
    },
    /// The instance's latest run has no record yet (the application is setting up a new turn in
    /// the sandbox): kept, since nothing proves that turn is over.
    LatestRunUnknown {
        /// The run the instance names as its latest.
        run_id: String,
    },
}

impl ReclaimOutcome {
    /// The outcome as reports name it.
    pub fn as_str(&self) -> &'static str {
        match self {
            ReclaimOutcome::Destroyed => "destroyed",
            ReclaimOutcome::DestroyFailed { .. } => "destroy-failed",
            ReclaimOutcome::NoSandboxKey => "no-sandbox-key",
            ReclaimOutcome::NotFound => "not-found",
            ReclaimOutcome::ProviderMismatch => "provider-mismatch",
            ReclaimOutcome::InUse { .. } => "in-use",
            ReclaimOutcome::LatestRunUnknown { .. } => "latest-run-unknown",
        }
    }
}

/// Destroys the sandbox a terminal run was bound to, in this order:
///
/// 1. the provider check, before any destroy or delete (a mismatch would hand one provider's id
///    to another and could destroy a stranger's workload);
/// 2. the in-use check: the instance's latest run must have a record and be terminal (a
///    latest run with no record yet is a turn being set up), every run of any thread that names
///    the same key must be terminal (the store's [`RunStore::live_runs_for_sandbox`]), and so
///    must every run of the thread with no key yet (an attached turn gets its key only when it
///    detaches, while the instance may still name the older run);
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
    match plan_reclaim(record, intent, provider, instances, runs).await? {
        ReclaimPlan::Leave(outcome) => Ok(outcome),
        ReclaimPlan::Destroy {
            key,
            provider: name,
            provider_sandbox_id,
            delete_record,
        } => {
            let outcome = destroy(provider, record, &key, &name, &provider_sandbox_id).await;
            if delete_record && outcome == ReclaimOutcome::Destroyed {
                instances.delete(&key).await?;
            }
            Ok(outcome)
        }
    }
}

/// What [`reclaim_sandbox`] would do, decided from reads alone (a dry run shows it as the proof
/// of a planned destroy or keep).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(
    rename_all = "kebab-case",
    rename_all_fields = "camelCase",
    tag = "action"
)]
pub enum ReclaimPlan {
    /// Destroy `provider_sandbox_id` of `provider`; then delete the instance record `key` when
    /// `delete_record` (it still names this sandbox).
    Destroy {
        /// The sandbox instance record's key.
        key: String,
        /// The provider to ask.
        provider: String,
        /// The sandbox to destroy.
        provider_sandbox_id: String,
        /// Whether the instance record still names this sandbox and goes with it.
        delete_record: bool,
    },
    /// Destroy nothing, for this reason.
    Leave(ReclaimOutcome),
}

impl ReclaimPlan {
    /// A sentence for a dry run's proof.
    pub fn describe(&self) -> String {
        match self {
            ReclaimPlan::Destroy {
                key,
                provider,
                provider_sandbox_id,
                ..
            } => format!(
                "in-use check passed (no live run uses sandbox key {key}): would destroy \
                 {provider} sandbox {provider_sandbox_id}"
            ),
            ReclaimPlan::Leave(ReclaimOutcome::InUse { run_id }) => {
                format!("in-use check: run {run_id} is not terminal and uses the sandbox: would keep it")
            }
            ReclaimPlan::Leave(ReclaimOutcome::LatestRunUnknown { run_id }) => format!(
                "in-use check: the sandbox's latest run {run_id} has no record yet (a turn being \
                 set up): would keep it"
            ),
            ReclaimPlan::Leave(ReclaimOutcome::ProviderMismatch) => "the sandbox's provider is \
                 not served here: would leave it to the ledger as a leak"
                .into(),
            ReclaimPlan::Leave(ReclaimOutcome::NoSandboxKey) => {
                "the run names no sandbox: nothing to destroy".into()
            }
            ReclaimPlan::Leave(other) => {
                format!(
                    "no sandbox on file ({}): nothing to destroy",
                    other.as_str()
                )
            }
        }
    }
}

/// The checks of [`reclaim_sandbox`] (provider, then in use), with no destroy and no delete.
pub async fn plan_reclaim(
    record: &RunRecord,
    intent: &ReclaimIntent,
    provider: &dyn SandboxProvider,
    instances: &dyn SandboxInstanceStore,
    runs: &dyn RunStore,
) -> Result<ReclaimPlan, StoreError> {
    let leave = |o| Ok(ReclaimPlan::Leave(o));
    let Some(key) = record
        .sandbox_key
        .as_deref()
        .or(intent.sandbox_key.as_deref())
    else {
        return leave(ReclaimOutcome::NoSandboxKey);
    };
    let on_file = intent
        .provider
        .as_deref()
        .zip(intent.provider_sandbox_id.as_deref());
    let destroy_on_file = |p: &str, id: &str| {
        Ok(ReclaimPlan::Destroy {
            key: key.to_string(),
            provider: p.to_string(),
            provider_sandbox_id: id.to_string(),
            delete_record: false,
        })
    };
    let Some(instance) = instances.get(key).await? else {
        // An earlier attempt deleted nothing (it failed) but the application may have: destroy
        // the sandbox that attempt saw, if it is this provider's.
        return match on_file {
            Some((p, id)) if provider.serves(p) => destroy_on_file(p, id),
            Some(_) => leave(ReclaimOutcome::ProviderMismatch),
            None => leave(ReclaimOutcome::NotFound),
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
        return leave(ReclaimOutcome::ProviderMismatch);
    }
    if let Some((p, old)) = on_file {
        if p == instance.provider && old != instance.provider_sandbox_id {
            // The key now names a new sandbox (the thread's next turn): only the old one is ours.
            return destroy_on_file(p, old);
        }
    }
    if let Some(user) = live_user(record, key, &instance, runs).await? {
        if let LiveUser::Unrecorded(run_id) = user {
            tracing::info!(
                target: "reaper",
                run_id = %record.run_id,
                sandbox_key = key,
                latest_run_id = %run_id,
                "the sandbox's latest run has no record yet (a turn being set up); keeping it"
            );
            return leave(ReclaimOutcome::LatestRunUnknown { run_id });
        }
        let user = user.run_id();
        tracing::info!(
            target: "reaper",
            run_id = %record.run_id,
            sandbox_key = key,
            in_use_by = %user,
            "a non-terminal run still uses the sandbox; keeping it"
        );
        return leave(ReclaimOutcome::InUse { run_id: user });
    }
    Ok(ReclaimPlan::Destroy {
        key: key.to_string(),
        provider: instance.provider,
        provider_sandbox_id: instance.provider_sandbox_id,
        delete_record: true,
    })
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

/// Who may still use a sandbox.
enum LiveUser {
    /// A non-terminal run.
    Running(String),
    /// The instance's latest run, which has no record yet.
    Unrecorded(String),
}

impl LiveUser {
    fn run_id(self) -> String {
        match self {
            LiveUser::Running(id) | LiveUser::Unrecorded(id) => id,
        }
    }
}

/// Runs asked for at most when looking for a live run naming the key: one is enough to keep
/// the sandbox, a few let the log name them.
const LIVE_RUNS_ASKED: usize = 8;

/// A run other than `record` that may use the sandbox, if any: the instance's latest run first
/// (the application's own word on who uses it; one with no record yet is a turn being set up),
/// then any thread's live run naming the key, then the threads' live runs with no key yet.
async fn live_user(
    record: &RunRecord,
    key: &str,
    instance: &SandboxInstanceRecord,
    runs: &dyn RunStore,
) -> Result<Option<LiveUser>, StoreError> {
    if let Some(latest) = instance.latest_run_id.as_deref() {
        if latest != record.run_id {
            match runs.get(latest).await? {
                Some(run) if !run.status.is_terminal() => {
                    return Ok(Some(LiveUser::Running(run.run_id)))
                }
                Some(_) => {}
                None => return Ok(Some(LiveUser::Unrecorded(latest.to_string()))),
            }
        }
    }
    match runs.live_runs_for_sandbox(key, LIVE_RUNS_ASKED).await {
        Ok(live) => {
            if let Some(run) = live.into_iter().find(|r| r.run_id != record.run_id) {
                return Ok(Some(LiveUser::Running(run.run_id)));
            }
        }
        // A store without the query still gets the thread check below.
        Err(StoreError::Unsupported(_)) => {}
        Err(error) => return Err(error),
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
            // A live turn with no key yet may be the one in this sandbox: an attached turn gets
            // its key stamped only when it detaches.
            if run.run_id != record.run_id
                && !run.status.is_terminal()
                && run.sandbox_key.as_deref().is_none_or(|k| k == key)
            {
                return Ok(Some(LiveUser::Running(run.run_id)));
            }
        }
    }
    Ok(None)
}

/// The sweep's reclaim hook over a provider, an instance store and the run store (for the
/// in-use check): a failed destroy is an error carrying what the ledger needs to retry it.
#[derive(Clone)]
pub struct SandboxReclaimer {
    /// Destroys sandboxes.
    pub provider: Arc<dyn SandboxProvider>,
    /// Finds a run's sandbox from its key.
    pub instances: Arc<dyn SandboxInstanceStore>,
    /// Tells whether another run still uses the sandbox.
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
    async fn plan(
        &self,
        record: &RunRecord,
        intent: &ReclaimIntent,
    ) -> Result<Option<ReclaimPlan>, ReclaimError> {
        let plan = plan_reclaim(
            record,
            intent,
            self.provider.as_ref(),
            self.instances.as_ref(),
            self.runs.as_ref(),
        )
        .await?;
        Ok(Some(plan))
    }

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
            // Not ours to destroy, and not settled either: the entry stays in the ledger as a
            // leak (every report and `reaper status` show it) until a reaper that serves the
            // provider destroys it.
            ReclaimOutcome::ProviderMismatch => {
                let instance = match record
                    .sandbox_key
                    .as_deref()
                    .or(intent.sandbox_key.as_deref())
                {
                    Some(key) => self.instances.get(key).await?,
                    None => None,
                };
                let (provider, provider_sandbox_id) = match instance {
                    Some(i) => (Some(i.provider), Some(i.provider_sandbox_id)),
                    None => (intent.provider.clone(), intent.provider_sandbox_id.clone()),
                };
                Err(SandboxReclaimFailedError {
                    run_id: record.run_id.clone(),
                    sandbox_key: record
                        .sandbox_key
                        .clone()
                        .or_else(|| intent.sandbox_key.clone()),
                    reason: format!(
                        "the sandbox belongs to provider {}, which this reaper does not serve \
                         (it serves {}); it stays in the ledger as a leak until a reaper \
                         configured with that provider destroys it",
                        provider.as_deref().unwrap_or("?"),
                        self.provider.name()
                    ),
                    provider,
                    provider_sandbox_id,
                }
                .into())
            }
            ReclaimOutcome::InUse { run_id } => Ok(Reclaimed::Kept(Reason::new(
                ReasonCode::KeptLiveRunSharesSandbox,
                format!("run {run_id} is not terminal and uses the same sandbox"),
            ))),
            ReclaimOutcome::LatestRunUnknown { run_id } => Ok(Reclaimed::Kept(Reason::new(
                ReasonCode::KeptTurnBeingSetUp,
                format!(
                    "the sandbox's latest run {run_id} has no record yet (a turn being set up)"
                ),
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
