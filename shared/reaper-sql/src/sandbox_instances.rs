//! The `reaper_sandbox_instances` table: where a sandbox lives.

/// The table name.
pub const TABLE: &str = "reaper_sandbox_instances";

/// One record by key, its columns in the record's order: `?1` the key.
pub const SELECT_BY_KEY: &str = "SELECT key, provider, provider_sandbox_id, latest_snapshot_id, \
                                 thread_id, latest_run_id, updated_at \
                                 FROM reaper_sandbox_instances WHERE key = ?1";

/// A full replace: every column is written, absent optionals as NULL. `?1`…`?7` in the order
/// [`SELECT_BY_KEY`] reads them.
pub const UPSERT: &str =
    "INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, \
                          latest_snapshot_id, thread_id, latest_run_id, updated_at) \
                          VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                          ON CONFLICT (key) DO UPDATE SET provider = excluded.provider, \
                          provider_sandbox_id = excluded.provider_sandbox_id, \
                          latest_snapshot_id = excluded.latest_snapshot_id, \
                          thread_id = excluded.thread_id, latest_run_id = excluded.latest_run_id, \
                          updated_at = excluded.updated_at";

/// `?1` the key.
pub const DELETE: &str = "DELETE FROM reaper_sandbox_instances WHERE key = ?1";
