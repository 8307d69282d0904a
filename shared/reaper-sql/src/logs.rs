//! The `logs` and `log_entries` tables: the per-run delivery log. Appending differs by backend
//! (a transaction reading then writing in rusqlite; one batch of conditional statements in D1),
//! so only the statements both run verbatim are here.

/// One row per run that has a log.
pub const TABLE: &str = "logs";

/// One row per chunk.
pub const ENTRIES_TABLE: &str = "log_entries";

/// Closes a run's log, creating it closed if it has none: `?1` the run id.
pub const CLOSE: &str = "INSERT INTO logs (run_id, closed) VALUES (?1, 1) \
                         ON CONFLICT (run_id) DO UPDATE SET closed = 1";

/// A log's state: `closed`, `last_append_at`, `next_seq` and `pruned` (its events aged out, so
/// it reads back empty). `?1` the run id.
pub const SNAPSHOT: &str = "SELECT closed, last_append_at, next_seq, \
                            events_pruned_at IS NOT NULL AS pruned \
                            FROM logs WHERE run_id = ?1";

/// Up to `?3` chunks from offset `?2` on, in order: `?1` the run id.
pub const READ: &str = "SELECT seq, chunk FROM log_entries WHERE run_id = ?1 AND seq >= ?2 \
                        ORDER BY seq LIMIT ?3";

/// `next_seq` as an offset: it is never negative.
pub fn next_seq(stored: i64) -> Result<u64, String> {
    u64::try_from(stored).map_err(|_| "log next_seq is negative".into())
}

/// Why a stored chunk is corrupt: it is not the JSON object that was appended.
pub fn chunk_not_json(error: impl std::fmt::Display) -> String {
    format!("chunk is not a JSON object: {error}")
}
