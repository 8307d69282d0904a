//! The `reaper_logs` and `reaper_log_entries` tables: the per-run delivery log. Appending differs by backend
//! (a transaction reading then writing in rusqlite; one batch of conditional statements in D1),
//! so only the statements both run verbatim are here.

/// One row per run that has a log.
pub const TABLE: &str = "reaper_logs";

/// One row per chunk.
pub const ENTRIES_TABLE: &str = "reaper_log_entries";

/// Closes a run's log, creating it closed if it has none: `?1` the run id.
pub const CLOSE: &str = "INSERT INTO reaper_logs (run_id, closed) VALUES (?1, 1) \
                         ON CONFLICT (run_id) DO UPDATE SET closed = 1";

/// [`CLOSE`] fenced on a held epoch: it writes nothing while run `?1`'s `driver_epoch` is past
/// `?2` (a NULL `?2` never refuses, and neither does a missing run), in the statement itself.
pub const CLOSE_FENCED: &str = "INSERT INTO reaper_logs (run_id, closed) SELECT ?1, 1 \
     WHERE NOT EXISTS (SELECT 1 FROM reaper_runs WHERE run_id = ?1 AND driver_epoch > ?2) \
     ON CONFLICT (run_id) DO UPDATE SET closed = 1";

/// A log's state: `closed`, `last_append_at`, `next_seq` and `pruned` (its events aged out, so
/// it reads back empty). `?1` the run id.
pub const SNAPSHOT: &str = "SELECT closed, last_append_at, next_seq, \
                            events_pruned_at IS NOT NULL AS pruned \
                            FROM reaper_logs WHERE run_id = ?1";

/// Up to `?3` chunks from offset `?2` on, in order: `?1` the run id.
pub const READ: &str = "SELECT seq, chunk FROM reaper_log_entries WHERE run_id = ?1 AND seq >= ?2 \
                        ORDER BY seq LIMIT ?3";

/// `next_seq` as an offset: it is never negative.
pub fn next_seq(stored: i64) -> Result<u64, String> {
    u64::try_from(stored).map_err(|_| "log next_seq is negative".into())
}

/// Why a stored chunk is corrupt: it is not the JSON object that was appended.
pub fn chunk_not_json(bytes: usize) -> String {
    format!("chunk is not a JSON object: its {bytes} bytes do not parse as one")
}

/// How long a finished run's events are kept by default: 30 days, long enough that a user
/// opening a thread the next morning still gets an exact replay. Transcripts are kept for ever.
pub const DEFAULT_EVENT_RETENTION_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// What one retention call removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionReport {
    /// Runs whose events were all deleted (their log is now marked pruned and closed).
    pub runs: u64,
    /// Events deleted, over all those runs.
    pub events_deleted: u64,
    /// Write transactions (D1 batches) that deleted or marked something; each deleted at most
    /// the call's batch limit of events.
    pub batches: u64,
    /// The call stopped at its bound with aged-out events possibly left: call again.
    pub more: bool,
}

/// The condition that a run's events have aged out: it is terminal and finished at or before
/// the cutoff. A terminal run without `finished_at` has no evidence of its age and keeps them.
/// Spelled once so the listing and every write re-check the same thing.
macro_rules! aged_out {
    ($run:literal, $cutoff:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM reaper_runs WHERE reaper_runs.run_id = ",
            $run,
            " AND reaper_runs.finished_at IS NOT NULL AND reaper_runs.finished_at <= ",
            $cutoff,
            " AND reaper_runs.status IN ('completed', 'failed', 'aborted'))"
        )
    };
}

/// Logs whose events have aged out and are not yet pruned, oldest finish first: `run_id` and
/// `next_seq` (an upper bound of the events it holds: every event has `seq < next_seq`).
/// `?1` the cutoff (`now - retention`), `?2` how many.
pub const AGED_OUT: &str = "SELECT reaper_logs.run_id AS run_id, reaper_logs.next_seq AS next_seq \
                            FROM reaper_runs JOIN reaper_logs ON reaper_logs.run_id = reaper_runs.run_id \
                            WHERE reaper_runs.finished_at IS NOT NULL AND reaper_runs.finished_at <= ?1 \
                            AND reaper_runs.status IN ('completed', 'failed', 'aborted') \
                            AND reaper_logs.events_pruned_at IS NULL \
                            ORDER BY reaper_runs.finished_at, reaper_runs.run_id LIMIT ?2";

/// Deletes up to `?2` of a run's oldest events, returning one row per event deleted, and only
/// while the run is still aged out at cutoff `?3` (it is re-checked in the write's own
/// transaction, so a listing that went stale deletes nothing). `?1` the run id.
pub const DELETE_AGED_OUT_EVENTS: &str = concat!(
    "DELETE FROM reaper_log_entries WHERE run_id = ?1 AND seq IN \
     (SELECT seq FROM reaper_log_entries WHERE run_id = ?1 ORDER BY seq LIMIT ?2) AND ",
    aged_out!("?1", "?3"),
    " RETURNING seq"
);

/// Marks a run's log pruned and closed once none of its events is left, returning its row when
/// it did. Closing keeps a late append from starting a fresh log under offsets already handed
/// out; the log then reads back empty. `?1` the run id, `?2` now, `?3` the cutoff.
pub const MARK_PRUNED: &str = concat!(
    "UPDATE reaper_logs SET events_pruned_at = ?2, closed = 1 \
     WHERE run_id = ?1 AND events_pruned_at IS NULL \
     AND NOT EXISTS (SELECT 1 FROM reaper_log_entries WHERE reaper_log_entries.run_id = ?1) AND ",
    aged_out!("?1", "?3"),
    " RETURNING run_id"
);

/// The retention cutoff: events of runs finished at or before it have aged out.
pub fn retention_cutoff(now: i64, retention_ms: u64) -> i64 {
    now.saturating_sub(i64::try_from(retention_ms).unwrap_or(i64::MAX))
}
