//! The `reaper_run_history` table (version 5): what each sweep did to each run, one row per run
//! and sweep, the entry kept as its JSON (`reaper_core::history::HistoryEntry`).

/// The table name.
pub const TABLE: &str = "reaper_run_history";

/// Writes an entry, replacing one with the same key (run, time, sweep): `?1` run id, `?2` sweep
/// id, `?3` at, `?4` the entry's JSON.
pub const RECORD: &str = "INSERT INTO reaper_run_history (run_id, at, sweep_id, entry) \
                          VALUES (?1, ?3, ?2, ?4) \
                          ON CONFLICT (run_id, at, sweep_id) DO UPDATE SET entry = excluded.entry";

/// A run's newest entries: `?1` run id, `?2` the limit. Served by the primary key, no sort.
pub const READ: &str = "SELECT entry FROM reaper_run_history WHERE run_id = ?1 \
                        ORDER BY at DESC, sweep_id DESC LIMIT ?2";

/// Deletes at most `?2` entries made before `?1`, oldest first, through the by-age index.
pub const PRUNE: &str = "DELETE FROM reaper_run_history WHERE (run_id, at, sweep_id) IN \
                         (SELECT run_id, at, sweep_id FROM reaper_run_history WHERE at < ?1 \
                         ORDER BY at, run_id, sweep_id LIMIT ?2)";

/// [`PRUNE`] answering one row per deleted entry, for a driver that reports no change count
/// (D1's batch returns rows only).
pub const PRUNE_RETURNING: &str = "DELETE FROM reaper_run_history WHERE (run_id, at, sweep_id) IN \
                                   (SELECT run_id, at, sweep_id FROM reaper_run_history \
                                   WHERE at < ?1 ORDER BY at, run_id, sweep_id LIMIT ?2) \
                                   RETURNING run_id";
