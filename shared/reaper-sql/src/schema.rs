//! The schema version, the migrations that build it, and the table names.
//!
//! The version lives in a table (`reaper_schema`), not in `PRAGMA user_version`, because D1 does
//! not let an application set pragmas.

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// The table that marks a database as the reaper's and records each applied migration.
pub const SCHEMA_TABLE: &str = "reaper_schema";

/// Every table of the schema, `SCHEMA_TABLE` first.
pub const TABLES: [&str; 7] = [
    SCHEMA_TABLE,
    crate::runs::TABLE,
    crate::leases::TABLE,
    crate::logs::TABLE,
    crate::logs::ENTRIES_TABLE,
    crate::sandbox_instances::TABLE,
    crate::transcripts::TABLE,
];

/// The highest applied version; `NULL` (no row) when the table is empty. See [`stored_version`].
pub const CURRENT_VERSION: &str = "SELECT MAX(version) AS version FROM reaper_schema";

/// Records an applied migration: `?1` its version, `?2` its description.
pub const RECORD_MIGRATION: &str =
    "INSERT INTO reaper_schema (version, description) VALUES (?1, ?2)";

/// One migration: its statements take a database from `version - 1` to `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub version: u32,
    pub description: &'static str,
    /// Run in order, then [`RECORD_MIGRATION`], all in one transaction (one D1 batch).
    pub statements: &'static [&'static str],
}

/// Every migration in order. Append only: a released migration is never edited, since
/// databases in the field already ran it and `sqlite_master` keeps its text.
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    description: "initial schema",
    statements: V1,
}];

/// The migrations a database at version `from` still needs, in order.
pub fn pending(from: u32) -> impl Iterator<Item = &'static Migration> {
    MIGRATIONS.iter().filter(move |m| m.version > from)
}

/// The version [`CURRENT_VERSION`] read: no row, or a value that is no version, counts as 0.
pub fn stored_version(max_version: Option<i64>) -> u32 {
    max_version.and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

const V1: &[&str] = &[
    "CREATE TABLE reaper_schema (
    version     INTEGER PRIMARY KEY NOT NULL,
    description TEXT NOT NULL
)",
    "CREATE TABLE runs (
    run_id           TEXT PRIMARY KEY NOT NULL,
    thread_id        TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'interrupted', 'completed', 'failed', 'aborted')),
    started_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    error_message    TEXT,
    error_code       TEXT,
    usage            TEXT CHECK (usage IS NULL OR json_valid(usage)),
    sandbox_key      TEXT,
    detached_since   INTEGER,
    cancel_requested INTEGER CHECK (cancel_requested IS NULL OR cancel_requested IN (0, 1)),
    driver_epoch     INTEGER CHECK (driver_epoch IS NULL OR driver_epoch >= 0),
    CHECK (error_code IS NULL OR error_message IS NOT NULL)
)",
    "CREATE INDEX runs_by_thread ON runs (thread_id, started_at)",
    "CREATE INDEX runs_reclaimable ON runs (detached_since)
    WHERE status = 'running' AND detached_since IS NOT NULL",
    "CREATE INDEX runs_finished ON runs (finished_at)
    WHERE finished_at IS NOT NULL AND status IN ('completed', 'failed', 'aborted')",
    "CREATE TABLE leases (
    key        TEXT PRIMARY KEY NOT NULL,
    owner      TEXT NOT NULL,
    token      TEXT NOT NULL,
    expires_at INTEGER NOT NULL
)",
    "CREATE TABLE logs (
    run_id           TEXT PRIMARY KEY NOT NULL,
    closed           INTEGER NOT NULL DEFAULT 0 CHECK (closed IN (0, 1)),
    last_append_at   INTEGER,
    next_seq         INTEGER NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    events_pruned_at INTEGER
)",
    "CREATE TABLE log_entries (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL CHECK (seq >= 0),
    chunk  TEXT NOT NULL CHECK (json_valid(chunk)),
    PRIMARY KEY (run_id, seq)
)",
    "CREATE TABLE sandbox_instances (
    key                 TEXT PRIMARY KEY NOT NULL,
    provider            TEXT NOT NULL,
    provider_sandbox_id TEXT NOT NULL,
    latest_snapshot_id  TEXT,
    thread_id           TEXT NOT NULL,
    latest_run_id       TEXT,
    updated_at          INTEGER NOT NULL
)",
    "CREATE TABLE transcripts (
    run_id    TEXT PRIMARY KEY NOT NULL,
    thread_id TEXT NOT NULL,
    body      TEXT NOT NULL CHECK (json_valid(body)),
    exit_code INTEGER,
    saved_at  INTEGER NOT NULL
)",
    "CREATE INDEX transcripts_by_thread ON transcripts (thread_id, saved_at)",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_number_every_version_from_one_up_to_the_current_one() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    }

    #[test]
    fn a_database_at_a_version_needs_only_the_migrations_after_it() {
        assert_eq!(pending(0).count(), MIGRATIONS.len());
        assert_eq!(pending(SCHEMA_VERSION).count(), 0);
        assert_eq!(pending(SCHEMA_VERSION + 5).count(), 0);
    }

    #[test]
    fn every_table_of_the_schema_is_created_by_a_migration() {
        for table in TABLES {
            let create = format!("CREATE TABLE {table} (");
            assert!(
                MIGRATIONS
                    .iter()
                    .flat_map(|m| m.statements)
                    .any(|s| s.starts_with(&create)),
                "no migration creates {table}"
            );
        }
    }

    #[test]
    fn an_empty_schema_table_reads_as_version_zero() {
        assert_eq!(stored_version(None), 0);
        assert_eq!(stored_version(Some(3)), 3);
    }
}
