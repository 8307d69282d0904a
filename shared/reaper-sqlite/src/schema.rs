//! The versioned schema and its migrations. `SCHEMA.md` beside this crate documents it for the
//! applications that write into the same file; the two must change together.
//!
//! The version lives in a table (`reaper_schema`), not in `PRAGMA user_version`, because Cloudflare
//! D1 will use this same schema and D1 does not let an application set pragmas.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// The table that marks a file as a reaper database and records each applied migration.
pub(crate) const SCHEMA_TABLE: &str = "reaper_schema";

/// Migrations in order: `MIGRATIONS[i]` takes a database from version `i` to `i + 1`. Append only:
/// a released migration is never edited, since databases in the field already ran it.
const MIGRATIONS: &[(&str, &str)] = &[("initial schema", V1)];

const V1: &str = r#"
CREATE TABLE reaper_schema (
    version     INTEGER PRIMARY KEY NOT NULL,
    description TEXT NOT NULL
);

CREATE TABLE runs (
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
);
CREATE INDEX runs_by_thread ON runs (thread_id, started_at);
CREATE INDEX runs_reclaimable ON runs (detached_since)
    WHERE status = 'running' AND detached_since IS NOT NULL;
CREATE INDEX runs_finished ON runs (finished_at)
    WHERE finished_at IS NOT NULL AND status IN ('completed', 'failed', 'aborted');

CREATE TABLE leases (
    key        TEXT PRIMARY KEY NOT NULL,
    owner      TEXT NOT NULL,
    token      TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TABLE logs (
    run_id           TEXT PRIMARY KEY NOT NULL,
    closed           INTEGER NOT NULL DEFAULT 0 CHECK (closed IN (0, 1)),
    last_append_at   INTEGER,
    next_seq         INTEGER NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    events_pruned_at INTEGER
);

CREATE TABLE log_entries (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL CHECK (seq >= 0),
    chunk  TEXT NOT NULL CHECK (json_valid(chunk)),
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE sandbox_instances (
    key                 TEXT PRIMARY KEY NOT NULL,
    provider            TEXT NOT NULL,
    provider_sandbox_id TEXT NOT NULL,
    latest_snapshot_id  TEXT,
    thread_id           TEXT NOT NULL,
    latest_run_id       TEXT,
    updated_at          INTEGER NOT NULL
);

CREATE TABLE transcripts (
    run_id    TEXT PRIMARY KEY NOT NULL,
    thread_id TEXT NOT NULL,
    body      TEXT NOT NULL CHECK (json_valid(body)),
    exit_code INTEGER,
    saved_at  INTEGER NOT NULL
);
CREATE INDEX transcripts_by_thread ON transcripts (thread_id, saved_at);
"#;

/// What a file holds, decided before anything is written to it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No tables at all: a new file, or an empty database.
    Empty,
    /// A reaper database at this version.
    Reaper(u32),
    /// Tables, none of them ours.
    Foreign(Vec<String>),
}

/// Reads what the file holds without writing to it.
pub(crate) fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )?;
    let tables = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    if !tables.iter().any(|t| t == SCHEMA_TABLE) {
        return Ok(Found::Foreign(tables));
    }
    let version: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM reaper_schema", [], |r| r.get(0))
        .optional()?
        .flatten();
    Ok(Found::Reaper(
        version.and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
    ))
}

/// Brings the database to [`SCHEMA_VERSION`] in one immediate transaction. Re-inspects inside the
/// transaction, so two processes opening a new file at once apply each migration exactly once.
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<Found> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let from = match inspect(&tx)? {
        Found::Empty => 0,
        Found::Reaper(v) if v < SCHEMA_VERSION => v,
        other => return Ok(other),
    };
    for (i, (description, sql)) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO reaper_schema (version, description) VALUES (?1, ?2)",
            rusqlite::params![i as i64 + 1, description],
        )?;
    }
    tx.commit()?;
    Ok(Found::Reaper(SCHEMA_VERSION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_cover_every_version_up_to_the_current_one() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }
}
