//! The schema, statement for statement the one `reaper-sqlite` writes (`schema.rs` there; a
//! native test compares the two databases' `sqlite_master`), so an application keeps one table
//! layout whether its runs live in an SQLite file or in D1.
//!
//! D1 has no `PRAGMA user_version` an application may set and no `BEGIN`: the version lives in
//! `reaper_schema`, and each migration is one batch (one transaction) with its version row.

use reaper_core::StoreError;

use crate::client::{SqlClient, Statement};
use crate::row::RowExt;

/// The schema version this build writes and reads (the same numbering as `reaper-sqlite`).
pub const SCHEMA_VERSION: u32 = 1;

/// Migrations in order: `MIGRATIONS[i]` takes a database from version `i` to `i + 1`. Append
/// only, and only together with `reaper-sqlite`.
pub(crate) const MIGRATIONS: &[(&str, &[&str])] = &[("initial schema", V1)];

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

/// What a database holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No tables of anyone's.
    Empty,
    /// A reaper database at this version.
    Reaper(u32),
    /// Tables, none of them ours.
    Foreign(Vec<String>),
}

/// Tables D1 and wrangler keep in every database (`_cf_KV`, `_cf_METADATA`, `d1_migrations`):
/// they do not make a database someone else's.
fn is_platform_table(name: &str) -> bool {
    name.starts_with("sqlite_") || name.starts_with("_cf_") || name == "d1_migrations"
}

/// Reads what the database holds without writing to it.
pub async fn inspect(client: &dyn SqlClient) -> Result<Found, StoreError> {
    let rows = client
        .batch(vec![Statement::new(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
            vec![],
        )])
        .await?
        .pop()
        .unwrap_or_default();
    let mut tables = Vec::new();
    for row in &rows {
        let name = row.text("name", "sqlite_master")?;
        if !is_platform_table(&name) {
            tables.push(name);
        }
    }
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    if !tables.iter().any(|t| t == "reaper_schema") {
        return Ok(Found::Foreign(tables));
    }
    let version = client
        .batch(vec![Statement::new(
            "SELECT MAX(version) AS version FROM reaper_schema",
            vec![],
        )])
        .await?
        .pop()
        .and_then(|mut rows| rows.pop())
        .map(|row| row.opt_int("version", "reaper_schema"))
        .transpose()?
        .flatten();
    Ok(Found::Reaper(
        version.and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
    ))
}

/// The statements that take a database from version `from` to [`SCHEMA_VERSION`], each
/// migration followed by its version row. Exposed for `wrangler d1 execute`-style tooling and
/// for the test that compares the schema with `reaper-sqlite`'s.
pub fn migration_statements(from: u32) -> Vec<Statement> {
    let mut out = Vec::new();
    for (i, (description, sqls)) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        out.extend(sqls.iter().map(|sql| Statement::new(*sql, vec![])));
        out.push(Statement::new(
            "INSERT INTO reaper_schema (version, description) VALUES (?1, ?2)",
            vec![(i as i64 + 1).into(), (*description).into()],
        ));
    }
    out
}
