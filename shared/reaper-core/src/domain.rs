//! The run record and its status: the data shared with the chat routes that write runs.
//!
//! JSON field names are the reference's (`runId`, `detachedSince`, …) so a record written by the
//! TypeScript implementation, or by an application's own routes, reads back unchanged.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch. Every instant in the core is one of these, taken from an
/// injected [`crate::ports::Clock`], never from the system clock.
pub type EpochMs = i64;

/// A run's lifecycle status. Unknown strings are rejected at deserialization, so a corrupt row can
/// never be read as terminal (the reference's prototype-chain bug cannot exist here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// The agent is (or may still be) producing output.
    Running,
    /// A human-in-the-loop pause. Not terminal.
    Interrupted,
    /// The run ended normally.
    Completed,
    /// The run ended with an error.
    Failed,
    /// The run was cancelled or expired.
    Aborted,
}

impl RunStatus {
    /// Every status.
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Running,
        RunStatus::Interrupted,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Aborted,
    ];

    /// Exactly `completed`, `failed` and `aborted`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Aborted
        )
    }

    /// The status as stored and shown (`running`, `completed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Aborted => "aborted",
        }
    }

    /// Parses one of the five status strings, case-sensitively.
    pub fn parse(s: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The statuses a sweep may write at the end of a drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TerminalStatus {
    /// The run ended normally.
    Completed,
    /// The run ended with an error.
    Failed,
    /// The run was cancelled or expired.
    Aborted,
}

impl From<TerminalStatus> for RunStatus {
    fn from(s: TerminalStatus) -> Self {
        match s {
            TerminalStatus::Completed => RunStatus::Completed,
            TerminalStatus::Failed => RunStatus::Failed,
            TerminalStatus::Aborted => RunStatus::Aborted,
        }
    }
}

/// The `{message, code?}` payload stored on a failed run and carried by a `RUN_ERROR` chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// What went wrong, for a person.
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A machine-readable code, when the source gave one.
    pub code: Option<String>,
}

impl RunError {
    /// The message when the source gave none.
    pub const UNKNOWN_MESSAGE: &'static str = "Unknown error occurred";

    /// An error with `message` and no code.
    pub fn new(message: impl Into<String>) -> Self {
        RunError {
            message: message.into(),
            code: None,
        }
    }

    /// The same error with a machine-readable code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The normalisation of an abort (spec C.3).
    pub fn aborted() -> Self {
        RunError::new("Request aborted").with_code("aborted")
    }

    /// Normalises an error's message the way the reference does: an empty message becomes
    /// "Unknown error occurred"; an abort-shaped error becomes `{Request aborted, aborted}`.
    pub fn normalise(message: &str, code: Option<String>, is_abort: bool) -> Self {
        if is_abort {
            return RunError::aborted();
        }
        let message = if message.is_empty() {
            RunError::UNKNOWN_MESSAGE.to_string()
        } else {
            message.to_string()
        };
        RunError { message, code }
    }

    /// Normalises an arbitrary JSON error payload (spec C.3): an object with a string `message`
    /// and a string or finite numeric `code` (else a finite numeric `status`), or a non-empty
    /// string; anything else is "Unknown error occurred".
    pub fn from_json(value: &serde_json::Value) -> Self {
        use serde_json::Value;
        match value {
            Value::String(s) if !s.is_empty() => RunError::new(s.clone()),
            Value::Object(map) => {
                let message = match map.get("message") {
                    Some(Value::String(s)) if !s.is_empty() => s.clone(),
                    _ => RunError::UNKNOWN_MESSAGE.to_string(),
                };
                let numeric = |v: Option<&Value>| match v {
                    Some(Value::Number(n)) => n
                        .as_i64()
                        .map(|i| i.to_string())
                        .or_else(|| n.as_u64().map(|u| u.to_string()))
                        .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f.to_string())),
                    _ => None,
                };
                let code = match map.get("code") {
                    Some(Value::String(s)) => Some(s.clone()),
                    other => numeric(other).or_else(|| numeric(map.get("status"))),
                };
                RunError { message, code }
            }
            _ => RunError::new(RunError::UNKNOWN_MESSAGE),
        }
    }
}

/// One run as the run store holds it.
///
/// A fresh row reads `sandbox_key`, `detached_since`, `cancel_requested` and `driver_epoch` back
/// as `None` (absent), never as a zero value. There is no `exitCode` field: the exit code the
/// probe reads appears only on the sweep's report entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The run's id (the primary key).
    pub run_id: String,
    /// The conversation the run belongs to.
    pub thread_id: String,
    /// Where the run is in its life.
    pub status: RunStatus,
    /// When the run started.
    pub started_at: EpochMs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When the run reached a terminal status.
    pub finished_at: Option<EpochMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Why the run failed, for a failed run.
    pub error: Option<RunError>,
    /// Token usage, written by other code; opaque to the reaper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The sandbox instance the run used (the key of its instance record).
    pub sandbox_key: Option<String>,
    /// When the last viewer detached. The selection key and the TTL evidence; never written by
    /// the reaper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached_since: Option<EpochMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Set when someone asked for the run to be cancelled.
    pub cancel_requested: Option<bool>,
    /// The fencing token: each successful claim writes `(old ?? 0) + 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_epoch: Option<u64>,
}

impl RunRecord {
    /// A fresh `running` row.
    pub fn new(
        run_id: impl Into<String>,
        thread_id: impl Into<String>,
        started_at: EpochMs,
    ) -> Self {
        RunRecord {
            run_id: run_id.into(),
            thread_id: thread_id.into(),
            status: RunStatus::Running,
            started_at,
            finished_at: None,
            error: None,
            usage: None,
            sandbox_key: None,
            detached_since: None,
            cancel_requested: None,
            driver_epoch: None,
        }
    }

    /// Applies a patch the way every store must: named fields change, others stay.
    pub fn apply(&mut self, patch: &RunPatch) {
        if let Some(status) = patch.status {
            self.status = status;
        }
        patch.finished_at.apply_to(&mut self.finished_at);
        patch.error.apply_to(&mut self.error);
        patch.usage.apply_to(&mut self.usage);
        patch.sandbox_key.apply_to(&mut self.sandbox_key);
        patch.detached_since.apply_to(&mut self.detached_since);
        patch.cancel_requested.apply_to(&mut self.cancel_requested);
        patch.driver_epoch.apply_to(&mut self.driver_epoch);
    }
}

/// One field of a [`RunPatch`]: leave it, clear it, or set it. `Clear` is the reference's
/// `update(id, {field: undefined})`, which must really clear (a backend that drops it would leave
/// a re-attached run reclaimable).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Patch<T> {
    #[default]
    /// Leave the field as it is.
    Keep,
    /// Remove the field's value.
    Clear,
    /// Write this value.
    Set(T),
}

impl<T: Clone> Patch<T> {
    /// Applies the patch to a field's current value.
    pub fn apply_to(&self, slot: &mut Option<T>) {
        match self {
            Patch::Keep => {}
            Patch::Clear => *slot = None,
            Patch::Set(v) => *slot = Some(v.clone()),
        }
    }

    /// Whether the patch leaves the field alone.
    pub fn is_keep(&self) -> bool {
        matches!(self, Patch::Keep)
    }
}

impl<T> From<Option<T>> for Patch<T> {
    /// `Some(v)` sets, `None` clears.
    fn from(v: Option<T>) -> Self {
        match v {
            Some(v) => Patch::Set(v),
            None => Patch::Clear,
        }
    }
}

/// A partial update of a run record. Only the reference's patchable keys exist here; `runId`,
/// `threadId` and `startedAt` never change after creation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunPatch {
    /// The new status, if it changes.
    pub status: Option<RunStatus>,
    /// When the run finished.
    pub finished_at: Patch<EpochMs>,
    /// Why the run failed.
    pub error: Patch<RunError>,
    /// The model's token usage, as the application reports it.
    pub usage: Patch<serde_json::Value>,
    /// The sandbox instance the run uses.
    pub sandbox_key: Patch<String>,
    /// When nobody was left watching the run (set on detach, cleared on re-attach).
    pub detached_since: Patch<EpochMs>,
    /// A cancel request.
    pub cancel_requested: Patch<bool>,
    /// The epoch of the latest claim to drive the run.
    pub driver_epoch: Patch<u64>,
}

impl RunPatch {
    /// Whether this patch writes a terminal status (the writes the fence guards).
    pub fn is_terminal(&self) -> bool {
        self.status.is_some_and(RunStatus::is_terminal)
    }

    /// The patch that marks a run detached at `at`, in `sandbox_key`'s sandbox.
    pub fn detach(at: EpochMs, sandbox_key: Option<String>) -> Self {
        RunPatch {
            detached_since: Patch::Set(at),
            sandbox_key: sandbox_key.map(Patch::Set).unwrap_or_default(),
            ..Default::default()
        }
    }

    /// The patch that asks for the run to be cancelled.
    pub fn cancel() -> Self {
        RunPatch {
            cancel_requested: Patch::Set(true),
            ..Default::default()
        }
    }
}

/// The input of `create_or_resume`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// The new run's id.
    pub run_id: String,
    /// The conversation it belongs to.
    pub thread_id: String,
    /// When it started.
    pub started_at: EpochMs,
    /// Defaults to `running`.
    pub status: Option<RunStatus>,
}

/// The terminal write at the end of a drive.
#[derive(Debug, Clone, PartialEq)]
pub struct TerminalWrite {
    /// The status to write.
    pub status: TerminalStatus,
    /// When the run finished.
    pub finished_at: EpochMs,
    /// Why it failed, for `failed`.
    pub error: Option<RunError>,
}

impl TerminalWrite {
    /// The same write as a patch, for backends that apply patches.
    pub fn to_patch(&self) -> RunPatch {
        RunPatch {
            status: Some(self.status.into()),
            finished_at: Patch::Set(self.finished_at),
            error: self.error.clone().map(Patch::Set).unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// Where a sandbox instance lives, keyed by the compound `sandboxKey` a run records at detach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInstanceRecord {
    /// The instance record's key (what runs name as their `sandbox_key`).
    pub key: String,
    /// The provider name ([`crate::ports::SandboxProvider::name`]).
    pub provider: String,
    /// The sandbox's id at its provider.
    pub provider_sandbox_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The latest snapshot the application took of the sandbox, if any.
    pub latest_snapshot_id: Option<String>,
    /// The conversation the sandbox serves.
    pub thread_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The newest run started in the sandbox.
    pub latest_run_id: Option<String>,
    /// When the record last changed.
    pub updated_at: EpochMs,
}

/// A durable promise to settle a run's aftermath (the reclaim ledger): recorded *before* the
/// terminal write of a drive, removed only once the store confirms the run terminal, its log is
/// closed and its sandbox is confirmed gone (or provably not ours to destroy). A crash anywhere
/// between the terminal write and the destroy leaves the entry behind for the next sweep, so a
/// sandbox is never forgotten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimIntent {
    /// The run whose sandbox is to be reclaimed.
    pub run_id: String,
    /// The run's sandbox key when the intent was recorded; `None` for a run without a sandbox
    /// (its entry still makes sure the log gets closed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_key: Option<String>,
    /// The provider and its sandbox id, once an attempt read the instance record: a retry can
    /// still reach a leaked sandbox after the instance record moved on to a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The sandbox's id at that provider.
    pub provider_sandbox_id: Option<String>,
    /// When the intent was first recorded.
    pub first_seen: EpochMs,
    /// Failed attempts so far. Non-zero means the sandbox may be running now: a leak.
    pub attempts: u32,
    /// The earliest time a sweep retries it.
    pub next_attempt_at: EpochMs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Why the last attempt failed.
    pub last_error: Option<String>,
}

impl ReclaimIntent {
    /// A fresh intent, due at once (a sweep only acts on it when nobody holds the run's claim).
    pub fn new(record: &RunRecord, now: EpochMs) -> Self {
        ReclaimIntent {
            run_id: record.run_id.clone(),
            sandbox_key: record.sandbox_key.clone(),
            provider: None,
            provider_sandbox_id: None,
            first_seen: now,
            attempts: 0,
            next_attempt_at: now,
            last_error: None,
        }
    }

    /// Whether a destroy already failed for it: the sandbox may be running and billing.
    pub fn is_leak(&self) -> bool {
        self.attempts > 0
    }
}

/// What the reclaim ledger holds right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerCounts {
    /// Every entry: runs whose aftermath is not yet confirmed.
    pub pending: u64,
    /// Entries with at least one failed destroy: sandboxes that may be running now.
    pub leaked: u64,
    /// The oldest entry's `firstSeen`, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_first_seen: Option<EpochMs>,
}

pub use crate::chunk::Chunk;

/// A stored delivery-log entry: its offset (0-based sequence number) and the chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// The entry's position in the log, from 0.
    pub offset: u64,
    /// The entry.
    pub chunk: Chunk,
}

/// A point-in-time view of a delivery log, cheap to take: what the quiet check needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogSnapshot {
    /// How many chunks the log holds.
    pub len: u64,
    /// When the log was last appended to, if the backend tracks it. Lets the quiet wait end at
    /// once when the log has been quiet for longer than the window.
    pub last_append_at: Option<EpochMs>,
    /// Whether the log is closed (no more appends).
    pub closed: bool,
}

/// What a finished run's transcript looks like once saved: the messages a chat UI renders when
/// the delivery log has aged out. Messages outlive events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transcript {
    /// The run the transcript is of.
    pub run_id: String,
    /// The conversation it belongs to.
    pub thread_id: String,
    /// The messages, in order.
    pub messages: Vec<TranscriptMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The agent's exit code, when the journal recorded one.
    pub exit_code: Option<i64>,
    /// When the transcript was saved.
    pub saved_at: EpochMs,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// One message of a transcript.
pub struct TranscriptMessage {
    /// Who said it (`user`, `assistant`, ...).
    pub role: String,
    /// What was said, as text.
    pub content: String,
}
