//! Recent sweeps: one [`SweepRecord`] per sweep (who swept, when, for how long, how many runs
//! had each outcome, how many were in flight, whether it failed and why), kept by the store so
//! the dashboard and `reaper status` see every host's sweeps, not only their own process's.
//!
//! The sweep writes its record in the same store call as its runs' history
//! ([`crate::RunStore::write_sweep_history`]): one round trip (one D1 subrequest) for both. Records
//! follow the history's retention and are also capped at [`MAX_SWEEPS_KEPT`] per store. Like the
//! history, a failed write is reported ([`crate::reap::ReapReport::history`]) and never fatal.
//! A dry run and a paused sweep write nothing, so they leave no record.

use serde::{Deserialize, Serialize};

use crate::domain::EpochMs;
use crate::reap::OutcomeCounts;

/// The most sweep records a store keeps: the write that would keep more deletes the oldest
/// in the same call. About 17 hours of a sweep a minute, 3.5 days of one every five minutes;
/// a dashboard reads a few dozen.
pub const MAX_SWEEPS_KEPT: u64 = 1_000;

/// The most records past the retention one write deletes (one bounded statement or request; a
/// backlog drains over the next sweeps, each of which adds one record).
pub const SWEEP_PRUNE_BATCH: usize = 100;

/// The most records [`crate::RunStore::recent_sweeps`] returns in one call, whatever the caller
/// asks.
pub const MAX_SWEEPS_READ: usize = 1_000;

/// What one sweep did, as the store keeps it. Stored as its JSON, so a record written by one
/// version reads in another (unknown fields are ignored, missing ones default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepRecord {
    /// The sweep's id, as in its runs' [`crate::history::HistoryEntry::sweep_id`]: a record
    /// written again with the same id replaces the first.
    pub sweep_id: String,
    /// Who swept: the sweep's owner (host, process, invocation, handler).
    pub host: String,
    /// When the sweep started, ms since the epoch (the sweep's clock).
    pub started_at: EpochMs,
    /// When it wrote this record (its end, but for the reclaim ledger's count), ms since the
    /// epoch. Records read newest first by this, then by `sweep_id`.
    pub finished_at: EpochMs,
    /// `finished_at - started_at`.
    pub duration_ms: i64,
    /// Runs taken from the listing.
    #[serde(default)]
    pub considered: usize,
    /// How many runs had each outcome.
    #[serde(default)]
    pub outcomes: OutcomeCounts,
    /// Reclaim-ledger entries this sweep retried, and of those settled.
    #[serde(default)]
    pub reclaims_retried: usize,
    /// Of the retried entries, settled.
    #[serde(default)]
    pub reclaims_settled: usize,
    /// The most runs in flight at once ([`crate::concurrency`]'s choice).
    #[serde(default)]
    pub concurrency: usize,
    /// The sizing's cap (the user's setting).
    #[serde(default)]
    pub concurrency_cap: usize,
    /// Whether this was a dry run (none is written today: a dry run writes nothing; kept so a
    /// reader can tell should one ever be).
    #[serde(default)]
    pub dry_run: bool,
    /// Whether the sweep failed: its listing failed or it stopped at damage in the database.
    #[serde(default)]
    pub failed: bool,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
