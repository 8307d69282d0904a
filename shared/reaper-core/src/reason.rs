//! Why each run of a sweep ended as it did: a stable machine-readable code and a sentence for
//! people, on every report entry of every handler (they share [`crate::reap::ReapReport`]).
//!
//! Codes are `<outcome>/<cause>` (`kept/<cause>` when a terminal run's sandbox was deliberately
//! kept). They are part of the JSON report's contract (`schema/sweep-report.schema.json` lists
//! every one, and a test keeps the list and [`ReasonCode::ALL`] equal): add codes, never rename
//! one.

use std::borrow::Cow;

use serde::{Serialize, Serializer};

/// Every reason a report entry can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReasonCode {
    /// The journal's exit sentinel was found; the run was replayed and recorded terminal.
    FinalizedExited,
    /// Detached past the TTL: cancelled, driven under the run budget, recorded terminal.
    ExpiredTtl,
    /// The journal has no exit sentinel yet.
    ProducingNoExitYet,
    /// The run records no sandbox key: there is no journal to read.
    UnknownNoSandboxKey,
    /// No sandbox instance record for the run's key.
    UnknownNoInstanceRecord,
    /// The instance belongs to a provider this reaper does not serve.
    UnknownProviderNotConfigured,
    /// The provider says the sandbox is gone.
    UnknownSandboxGone,
    /// The run's sandbox is stopped and this sweep may start no more (the per-sweep cap or the
    /// deadline); a later sweep starts it to read the journal.
    UnknownSandboxStopped,
    /// The probe took longer than its step deadline.
    UnknownProbeTimeout,
    /// The probe could not tell (an exec, a lookup or a decode failed).
    UnknownProbeError,
    /// The run budget ran out mid-replay; what landed stays, the next sweep resumes.
    BudgetExceededReplayIncomplete,
    /// The run budget ran out and the run was recorded terminal anyway.
    BudgetExceededTerminalizedAnyway,
    /// Another sweep holds the run's claim.
    NotClaimedBusy,
    /// The run was already terminal when claimed.
    NotClaimedTerminal,
    /// The run's record is gone.
    NotClaimedRunMissing,
    /// The viewer came back (the in-lock re-check).
    NotClaimedViewerReturned,
    /// The claim was lost mid-drive to a newer holder.
    NotClaimedClaimLost,
    /// The drive ended but the store shows the run not terminal.
    NotClaimedStillRunning,
    /// The provider's destroy failed: the sandbox may be running; the ledger retries it.
    ReclaimFailedDestroyFailed,
    /// The reclaim could not run (a store call, a timeout).
    ReclaimFailedError,
    /// The store does not confirm the terminal write: the sandbox is kept, the next sweep retries.
    FailedTerminalNotConfirmed,
    /// The probe threw.
    FailedProbeError,
    /// The delivery log never went quiet.
    FailedNeverQuiesced,
    /// The drive could not start or failed.
    FailedDriveError,
    /// The reclaim intent could not be recorded, so the run was not driven.
    FailedLedgerUnavailable,
    /// A store call failed.
    FailedStoreError,
    /// A terminal run's sandbox is kept: another run that is not terminal uses it.
    KeptLiveRunSharesSandbox,
    /// A terminal run's sandbox is kept: its latest run has no record yet (a turn being set up).
    KeptTurnBeingSetUp,
}

impl ReasonCode {
    /// Every code.
    pub const ALL: [ReasonCode; 28] = [
        ReasonCode::FinalizedExited,
        ReasonCode::ExpiredTtl,
        ReasonCode::ProducingNoExitYet,
        ReasonCode::UnknownNoSandboxKey,
        ReasonCode::UnknownNoInstanceRecord,
        ReasonCode::UnknownProviderNotConfigured,
        ReasonCode::UnknownSandboxGone,
        ReasonCode::UnknownSandboxStopped,
        ReasonCode::UnknownProbeTimeout,
        ReasonCode::UnknownProbeError,
        ReasonCode::BudgetExceededReplayIncomplete,
        ReasonCode::BudgetExceededTerminalizedAnyway,
        ReasonCode::NotClaimedBusy,
        ReasonCode::NotClaimedTerminal,
        ReasonCode::NotClaimedRunMissing,
        ReasonCode::NotClaimedViewerReturned,
        ReasonCode::NotClaimedClaimLost,
        ReasonCode::NotClaimedStillRunning,
        ReasonCode::ReclaimFailedDestroyFailed,
        ReasonCode::ReclaimFailedError,
        ReasonCode::FailedTerminalNotConfirmed,
        ReasonCode::FailedProbeError,
        ReasonCode::FailedNeverQuiesced,
        ReasonCode::FailedDriveError,
        ReasonCode::FailedLedgerUnavailable,
        ReasonCode::FailedStoreError,
        ReasonCode::KeptLiveRunSharesSandbox,
        ReasonCode::KeptTurnBeingSetUp,
    ];

    /// The code as reports and the schema spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::FinalizedExited => "finalized/exited",
            ReasonCode::ExpiredTtl => "expired/ttl",
            ReasonCode::ProducingNoExitYet => "producing/no-exit-yet",
            ReasonCode::UnknownNoSandboxKey => "unknown/no-sandbox-key",
            ReasonCode::UnknownNoInstanceRecord => "unknown/no-instance-record",
            ReasonCode::UnknownProviderNotConfigured => "unknown/provider-not-configured",
            ReasonCode::UnknownSandboxGone => "unknown/sandbox-gone",
            ReasonCode::UnknownSandboxStopped => "unknown/sandbox-stopped",
            ReasonCode::UnknownProbeTimeout => "unknown/probe-timeout",
            ReasonCode::UnknownProbeError => "unknown/probe-error",
            ReasonCode::BudgetExceededReplayIncomplete => "budget-exceeded/replay-incomplete",
            ReasonCode::BudgetExceededTerminalizedAnyway => "budget-exceeded/terminalized-anyway",
            ReasonCode::NotClaimedBusy => "not-claimed/busy",
            ReasonCode::NotClaimedTerminal => "not-claimed/terminal",
            ReasonCode::NotClaimedRunMissing => "not-claimed/run-missing",
            ReasonCode::NotClaimedViewerReturned => "not-claimed/viewer-returned",
            ReasonCode::NotClaimedClaimLost => "not-claimed/claim-lost",
            ReasonCode::NotClaimedStillRunning => "not-claimed/still-running",
            ReasonCode::ReclaimFailedDestroyFailed => "reclaim-failed/destroy-failed",
            ReasonCode::ReclaimFailedError => "reclaim-failed/error",
            ReasonCode::FailedTerminalNotConfirmed => "failed/terminal-not-confirmed",
            ReasonCode::FailedProbeError => "failed/probe-error",
            ReasonCode::FailedNeverQuiesced => "failed/never-quiesced",
            ReasonCode::FailedDriveError => "failed/drive-error",
            ReasonCode::FailedLedgerUnavailable => "failed/ledger-unavailable",
            ReasonCode::FailedStoreError => "failed/store-error",
            ReasonCode::KeptLiveRunSharesSandbox => "kept/live-run-shares-sandbox",
            ReasonCode::KeptTurnBeingSetUp => "kept/turn-being-set-up",
        }
    }
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ReasonCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A code and the sentence that explains it for this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// The reason's code.
    pub code: ReasonCode,
    /// The reason in words, for a person. Borrowed when the sentence is fixed: a sweep leaving
    /// 10,000 working runs alone gives each the same sentence without copying it.
    pub message: Cow<'static, str>,
}

impl Reason {
    /// A reason with this code and message.
    pub fn new(code: ReasonCode, message: impl Into<Cow<'static, str>>) -> Self {
        Reason {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// Why a probe could not reach a run's journal at all. Nothing failed: there is no sandbox of
/// this reaper's to read, so the run is left alone until its TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreachable {
    /// The run names no sandbox.
    NoSandboxKey,
    /// No instance record has the run's sandbox key.
    NoInstanceRecord {
        /// The key looked up.
        sandbox_key: String,
    },
    /// The sandbox's provider is not one this reaper serves.
    ProviderNotConfigured {
        /// The provider the record names.
        provider: String,
        /// The providers this reaper serves.
        serves: String,
    },
    /// The provider says the sandbox no longer exists.
    SandboxGone {
        /// The provider.
        provider: String,
        /// The sandbox's id there.
        sandbox_id: String,
    },
}

impl Unreachable {
    /// The reason reports give for this.
    pub fn reason(&self) -> Reason {
        const ALONE: &str = "left alone until its TTL expires it";
        match self {
            Unreachable::NoSandboxKey => Reason::new(
                ReasonCode::UnknownNoSandboxKey,
                format!("the run records no sandbox key, so no journal can be read; {ALONE}"),
            ),
            Unreachable::NoInstanceRecord { sandbox_key } => Reason::new(
                ReasonCode::UnknownNoInstanceRecord,
                format!("no sandbox instance record for key {sandbox_key}; {ALONE}"),
            ),
            Unreachable::ProviderNotConfigured { provider, serves } => Reason::new(
                ReasonCode::UnknownProviderNotConfigured,
                format!(
                    "the sandbox belongs to provider {provider}, which this reaper does not \
                     serve (it serves {serves}); {ALONE}, or configure that provider"
                ),
            ),
            Unreachable::SandboxGone {
                provider,
                sandbox_id,
            } => Reason::new(
                ReasonCode::UnknownSandboxGone,
                format!(
                    "{provider} sandbox {sandbox_id} is gone, and its journal with it; {ALONE}"
                ),
            ),
        }
    }
}
