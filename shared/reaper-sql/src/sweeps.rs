//! The `reaper_sweeps` table (version 8): one row per sweep, the record kept as its JSON
//! (`reaper_core::sweeps::SweepRecord`). `seq` is the write order (SQLite's rowid), so the count
//! cap deletes the oldest writes through the primary key; the index by finish time serves the
//! newest-first read and the retention's bounded prune.

/// The table name.
pub const TABLE: &str = "reaper_sweeps";

/// Writes a record, replacing one with the same sweep id: `?1` sweep id, `?2` finished at,
/// `?3` the record's JSON.
pub const RECORD: &str = "INSERT INTO reaper_sweeps (sweep_id, finished_at, record) \
                          VALUES (?1, ?2, ?3) \
                          ON CONFLICT (sweep_id) DO UPDATE SET \
                          finished_at = excluded.finished_at, record = excluded.record";

/// The newest records: `?1` the limit. Served by the index read backwards, no sort.
pub const READ: &str = "SELECT record FROM reaper_sweeps \
                        ORDER BY finished_at DESC, sweep_id DESC LIMIT ?1";

/// Deletes at most `?2` records that finished before `?1`, oldest first, through the index.
pub const PRUNE: &str = "DELETE FROM reaper_sweeps WHERE seq IN \
                         (SELECT seq FROM reaper_sweeps WHERE finished_at < ?1 \
                         ORDER BY finished_at, sweep_id LIMIT ?2)";

/// Deletes the records written before the newest `?1`: one read of the highest `seq` and a
/// range of the primary key (nothing to read when the table is under the cap).
pub const CAP: &str = "DELETE FROM reaper_sweeps \
                       WHERE seq <= (SELECT MAX(seq) FROM reaper_sweeps) - ?1";
