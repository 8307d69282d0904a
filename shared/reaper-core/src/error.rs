//! Error types. Stores map their SDK errors to [`StoreError`] in one place each; the sweep turns
//! every per-run failure into a report entry carrying a [`ReapError`].

use serde::{Serialize, Serializer};

/// One semantic error for every store backend.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A conditional write lost its condition (a lease held elsewhere, an epoch moved).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A transient failure (throttling, a busy database, a 5xx): safe to retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored row that does not parse: named, never read as something else.
    #[error("corrupt record {key}: {reason}")]
    Corrupt {
        /// The row's key.
        key: String,
        /// What does not parse.
        reason: String,
    },
    /// The backend lacks an optional capability.
    #[error("unsupported by this store: {0}")]
    Unsupported(&'static str),
    /// Anything else, with its source's message.
    #[error("store error: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether trying again may succeed (a timeout or an unreachable backend).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// A sandbox provider's failure.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error("sandbox {0} not found")]
    /// No such sandbox.
    NotFound(String),
    #[error("sandbox command timed out after {0} ms")]
    /// The command did not finish within this many milliseconds.
    Timeout(u64),
    /// The command printed more than the provider returns; nothing was returned (never a silent
    /// truncation).
    #[error("sandbox command {stream} exceeded the {limit}-byte output limit; read less per call")]
    OutputLimit {
        /// `stdout` or `stderr`.
        stream: String,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The provider could not be reached (network, daemon down).
    #[error("sandbox provider unreachable: {0}")]
    Unreachable(String),
    #[error("sandbox provider refused: {0}")]
    /// The provider refused the request (authentication, quota, a bad request).
    Refused(String),
    #[error("sandbox error: {0}")]
    /// Any other failure.
    Other(String),
}

/// A probe that failed outright (the reference's `hasFinished` throwing).
#[derive(Debug, Clone, thiserror::Error)]
#[error("probe failed: {0}")]
pub struct ProbeError(pub String);

/// An error that ends a drive's stream, or a drive that could not start.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DriveError {
    /// What went wrong.
    pub message: String,
    /// A machine-readable code, when there is one.
    pub code: Option<String>,
    /// Abort-shaped (`AbortError` in the reference): normalised to `{Request aborted, aborted}`.
    pub is_abort: bool,
}

impl DriveError {
    /// An error with `message` and no code.
    pub fn new(message: impl Into<String>) -> Self {
        DriveError {
            message: message.into(),
            code: None,
            is_abort: false,
        }
    }

    /// The error of a run aborted on its TTL.
    pub fn aborted() -> Self {
        DriveError {
            message: "aborted".into(),
            code: None,
            is_abort: true,
        }
    }

    /// The same error with a code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }
}

/// Returned by [`crate::reclaim::SandboxReclaimer`] when the provider's destroy was rejected:
/// the sandbox may still be running and billing. The instance record is kept and the run's
/// reclaim-ledger entry is retried with backoff until the provider confirms the sandbox gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "sandbox reclaim failed for run {run_id}{}: the provider's destroy was rejected ({reason}), so \
     the sandbox may still be running; it stays in the reclaim ledger and every sweep retries it",
    .sandbox_key.as_deref().map(|k| format!(" (sandbox key {k})")).unwrap_or_default()
)]
pub struct SandboxReclaimFailedError {
    /// The run whose sandbox could not be destroyed.
    pub run_id: String,
    /// The sandbox's instance key, if the run had one.
    pub sandbox_key: Option<String>,
    /// The provider and sandbox id the destroy was sent to, kept in the ledger entry.
    pub provider: Option<String>,
    /// The sandbox's id at its provider, once known.
    pub provider_sandbox_id: Option<String>,
    /// What the provider said.
    pub reason: String,
}

/// Why a reclaim did not tear the sandbox down.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReclaimError {
    #[error(transparent)]
    /// The provider's destroy failed.
    Failed(#[from] SandboxReclaimFailedError),
    #[error(transparent)]
    /// A store call failed.
    Store(#[from] StoreError),
    #[error("{0}")]
    /// Any other failure.
    Other(String),
}

/// Why a claim was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimRefusal {
    /// The run is already terminal.
    Terminal,
    /// The run does not exist.
    Unknown,
    /// The viewer came back (the in-lock expiry re-check).
    Superseded,
    /// Another host holds the run's claim lease.
    Busy,
}

impl std::fmt::Display for ClaimRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClaimRefusal::Terminal => "terminal",
            ClaimRefusal::Unknown => "unknown",
            ClaimRefusal::Superseded => "superseded",
            ClaimRefusal::Busy => "busy",
        })
    }
}

/// What the holder saw when it lost its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObservedEpoch {
    /// The run's `driverEpoch` moved past the claim's to this one.
    Epoch(u64),
    /// The lease was lost (not renewed in time, or taken over).
    LeaseLost,
}

impl std::fmt::Display for ObservedEpoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObservedEpoch::Epoch(e) => write!(f, "{e}"),
            ObservedEpoch::LeaseLost => f.write_str("lease-lost"),
        }
    }
}

/// The error a report entry carries.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReapError {
    #[error("driver claim not acquired for run {run_id}: {reason}")]
    /// The run could not be claimed.
    ClaimNotAcquired {
        /// The run.
        run_id: String,
        /// Why.
        reason: ClaimRefusal,
    },
    #[error("driver claim lost for run {run_id}: held epoch {held_epoch}, observed {observed}")]
    /// The claim was lost while driving: every later fenced write is refused.
    ClaimLost {
        /// The run.
        run_id: String,
        /// The epoch the claim held.
        held_epoch: u64,
        /// What showed the claim was lost.
        observed: ObservedEpoch,
    },
    #[error(transparent)]
    /// The sandbox's destroy failed.
    ReclaimFailed(#[from] SandboxReclaimFailedError),
    #[error("reclaim failed: {0}")]
    /// The reclaim failed for another reason.
    Reclaim(String),
    #[error("probe failed: {0}")]
    /// The exit probe failed.
    Probe(String),
    /// The probe answered `unknown` with a reason.
    #[error("{0}")]
    ProbeUnknown(String),
    #[error("the event log never quiesced after {probes} probes (last length {len})")]
    /// The delivery log kept growing through every quiet check.
    NeverQuiesced {
        /// How many times the log was looked at.
        probes: u32,
        /// Its length at the last look.
        len: u64,
    },
    #[error("drive failed: {0}")]
    /// The drive failed.
    Drive(String),
    /// The drive ended but the store does not confirm a terminal status (the terminal write
    /// failed, or the re-read did): nothing is reclaimed, and the run stays listed.
    #[error(
        "the terminal status of run {run_id} is not confirmed by the store ({reason}); its \
         sandbox is kept and the next sweep tries again"
    )]
    TerminalNotConfirmed {
        /// The run.
        run_id: String,
        /// Why it is not confirmed.
        reason: String,
    },
    /// The reclaim ledger could not record the run's intent, so it was not driven (a terminal
    /// write without a durable intent could leak the sandbox on a crash).
    #[error("recording the reclaim intent failed, so the run was not driven: {0}")]
    Ledger(StoreError),
    #[error(transparent)]
    /// A store call failed.
    Store(#[from] StoreError),
}

impl ReapError {
    /// A stable machine-readable kind for JSON reports.
    pub fn kind(&self) -> &'static str {
        match self {
            ReapError::ClaimNotAcquired { .. } => "claim-not-acquired",
            ReapError::ClaimLost { .. } => "claim-lost",
            ReapError::ReclaimFailed(_) => "sandbox-reclaim-failed",
            ReapError::Reclaim(_) => "reclaim",
            ReapError::Probe(_) => "probe",
            ReapError::ProbeUnknown(_) => "probe-unknown",
            ReapError::NeverQuiesced { .. } => "never-quiesced",
            ReapError::Drive(_) => "drive",
            ReapError::TerminalNotConfirmed { .. } => "terminal-not-confirmed",
            ReapError::Ledger(_) => "ledger",
            ReapError::Store(_) => "store",
        }
    }

    /// A claim refusal or a lost claim: reported `not-claimed`, not `failed`.
    pub fn is_claim_refusal(&self) -> bool {
        matches!(
            self,
            ReapError::ClaimNotAcquired { .. } | ReapError::ClaimLost { .. }
        )
    }
}

impl Serialize for ReapError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("kind", self.kind())?;
        map.serialize_entry("message", &self.to_string())?;
        match self {
            ReapError::ClaimNotAcquired { reason, .. } => {
                map.serialize_entry("reason", reason)?;
            }
            ReapError::ReclaimFailed(e) => {
                map.serialize_entry("sandboxKey", &e.sandbox_key)?;
            }
            _ => {}
        }
        map.end()
    }
}

/// Options that cannot run, rejected before any run is touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid reaper option {option}: {problem}")]
pub struct OptionsError {
    /// The option's name.
    pub option: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}
