//! A run's history: what each sweep did to it (when, on which host, with which outcome and
//! why, what became of its sandbox, what happened in the reclaim ledger). The sweep writes one
//! [`HistoryEntry`] per run it touched, in one batch at its end, except a run it left
//! `producing` (the agent still working, nothing done: an entry per working run and sweep would
//! be a store write each for no information; the sweep's report counts them), and prunes entries older than
//! its retention in bounded batches; `reaper status RUN_ID` and the dashboard read it with
//! [`crate::RunStore::run_history`].
//!
//! The history is an operator's aid, never part of a run's fate: a failed history write is
//! logged and reported ([`crate::reap::ReapReport::history`]), and the sweep's outcomes
//! stand.

use serde::{Deserialize, Serialize};

use crate::domain::EpochMs;

/// How long history entries are kept by default: 30 days (a month of on-call questions).
pub const DEFAULT_HISTORY_RETENTION_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// Entries one sweep deletes at most when pruning past the retention (one bounded request or
/// statement; a larger backlog of old entries drains over the next sweeps).
pub const DEFAULT_HISTORY_PRUNE_BATCH: usize = 500;

/// The most entries [`crate::RunStore::run_history`] returns in one call, whatever the caller
/// asks: a store reads one bounded page.
pub const MAX_HISTORY_READ: usize = 1_000;

/// The outcome of a reclaim-ledger retry (the run's sandbox destroy retried by a later sweep),
/// used in [`HistoryEntry::outcome`] when the listing did not also visit the run.
pub const RECLAIM_RETRY_OUTCOME: &str = "reclaim-retry";

/// What one sweep did to one run. Stored as written: the strings are the report's own
/// (outcome, reason code, sandbox fate), so an entry written by one version reads in another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The run the entry is about.
    pub run_id: String,
    /// The sweep that wrote it: unique per sweep (the sweep's start and its lease's grant
    /// token, or its owner for a sweep run without the lease). With `run_id` and `at`, the
    /// entry's key.
    pub sweep_id: String,
    /// When the sweep made the entry (the sweep's clock), ms since the epoch.
    pub at: EpochMs,
    /// Who swept: the sweep's owner (host, process, invocation).
    pub host: String,
    /// A [`crate::reap::ReapOutcome`] name, or [`RECLAIM_RETRY_OUTCOME`].
    pub outcome: String,
    /// The stable reason code (`expired/ttl`, `unknown/sandbox-gone`, …).
    pub reason_code: String,
    /// The reason's sentence.
    pub reason: String,
    /// What became of the sandbox (a [`crate::reap::SandboxFate`] name), when the run was
    /// terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// What happened to the run's reclaim-ledger entry in this sweep, in order: `recorded`,
    /// `resolved`, `rescheduled` (a failed destroy, retried later), `retried`, `settled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ledger: Vec<String>,
}

/// What one sweep writes at its end: its entries, its own record, and both retentions' prunes,
/// handed to the store in one call ([`crate::RunStore::write_sweep_history`]) so a store sends
/// them as one request or transaction where it can (D1: one batch, one subrequest of the
/// Worker's alarm). Built by the sweep; a store only reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepHistory {
    /// One entry per run the sweep touched (may be empty: the prune still runs).
    pub entries: Vec<HistoryEntry>,
    /// Entries made before this are past the retention.
    pub prune_before: EpochMs,
    /// Entries the prune deletes at most.
    pub prune_max: usize,
    /// The sweep's own record ([`crate::sweeps::SweepRecord`]), written in the same request
    /// with the records' prune (before `prune_before`, at most
    /// [`crate::sweeps::SWEEP_PRUNE_BATCH`]) and cap ([`crate::sweeps::MAX_SWEEPS_KEPT`])
    /// (`None`: the entries and the history's prune alone).
    pub record: Option<crate::sweeps::SweepRecord>,
}

/// What [`crate::RunStore::write_sweep_history`] did. A store that writes atomically fails the
/// whole call instead (`Err`: nothing written, nothing pruned); only a store that sends the
/// write and the prune apart (the provided default, DynamoDB) reports a part's failure here,
/// beside what the other part did.
#[derive(Debug, Clone, Default)]
pub struct SweepWritten {
    /// History entries written: all of [`SweepHistory::entries`], or none (a failed write, a
    /// store that keeps no history).
    pub recorded: usize,
    /// Whether the sweep's record was written (`false` without one, or where the store keeps
    /// no sweep records).
    pub sweep_recorded: bool,
    /// History entries the prune deleted.
    pub pruned: u64,
    /// Why the entries and the record were not written, when the prune went on apart.
    pub write_error: Option<crate::StoreError>,
    /// Why the prune failed, when it was sent apart from the write.
    pub prune_error: Option<crate::StoreError>,
}

impl SweepWritten {
    /// What a store that sends the write and the prune apart did: `written` is the write's
    /// answer (`Ok(true)` when it held the sweep's record), `pruned` the prune's. A part the
    /// store does not support (`Unsupported`) wrote nothing and is no failure.
    pub fn apart(
        history: &SweepHistory,
        written: Result<bool, crate::StoreError>,
        pruned: Result<u64, crate::StoreError>,
    ) -> Self {
        let mut done = SweepWritten::default();
        match written {
            Ok(sweep_recorded) => {
                done.recorded = history.entries.len();
                done.sweep_recorded = sweep_recorded;
            }
            Err(crate::StoreError::Unsupported(_)) => {}
            Err(error) => done.write_error = Some(error),
        }
        match pruned {
            Ok(pruned) => done.pruned = pruned,
            Err(crate::StoreError::Unsupported(_)) => {}
            Err(error) => done.prune_error = Some(error),
        }
        done
    }

    /// A whole call that failed: nothing written, nothing pruned.
    pub fn failed(error: crate::StoreError) -> Self {
        SweepWritten {
            write_error: Some(error),
            ..SweepWritten::default()
        }
    }
}

/// Why a run id cannot name a run: empty, too long, or holding control characters. Shared by
/// every reader of a run id an operator typed, so a hostile id is refused before any request.
pub fn check_run_id(run_id: &str) -> Result<(), String> {
    const MAX: usize = 512;
    if run_id.is_empty() {
        return Err("the run id is empty".into());
    }
    if run_id.len() > MAX {
        return Err(format!(
            "the run id is {} bytes long; run ids are at most {MAX}",
            run_id.len()
        ));
    }
    if let Some(c) = run_id.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the run id holds the control character {:?}; copy it again from the report",
            c
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_with_control_characters_or_no_characters_is_refused() {
        assert!(check_run_id("run-1").is_ok());
        assert!(check_run_id("").unwrap_err().contains("empty"));
        assert!(check_run_id("run\u{1b}[2J")
            .unwrap_err()
            .contains("control"));
        assert!(check_run_id(&"x".repeat(600)).unwrap_err().contains("600"));
    }
}
