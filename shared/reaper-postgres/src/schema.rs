//! The versioned schema: its migrations, the tables and columns the store needs, and the
//! inspection that decides whether a schema is ours, current, older, newer or damaged.
//!
//! Every statement names its tables as `@.table`; the store replaces `@` with its quoted schema
//! name (see [`crate::PostgresStore::schema`]), so one database can hold several reapers' schemas
//! (a test per schema, or staging beside production) and the application's own tables.

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 3;

/// The table that marks a schema as the reaper's and records each applied migration.
pub const SCHEMA_TABLE: &str = "schema_migrations";

/// One migration: its statements take a schema from `version - 1` to `version`, in one
/// transaction together with its row in [`SCHEMA_TABLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub version: u32,
    pub description: &'static str,
    pub statements: &'static [&'static str],
}

/// Every migration in order. Append only: a released migration is never edited, since
/// databases in the field already ran it.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "initial schema",
        statements: V1,
    },
    Migration {
        version: 2,
        description: "run history",
        statements: V2,
    },
    Migration {
        version: 3,
        description: "sweep records",
        statements: V3,
    },
];

/// The migrations a schema at version `from` still needs, in order.
pub fn pending(from: u32) -> impl Iterator<Item = &'static Migration> {
    MIGRATIONS.iter().filter(move |m| m.version > from)
}

/// Every table with the columns the reaper reads and writes. A table that lacks one of them was
/// damaged or hand-edited: the store refuses the schema at open, naming the table and columns.
/// Extra columns an application adds are tolerated.
pub const SHAPE: [(&str, &[&str]); 11] = [
    (SCHEMA_TABLE, &["version", "description", "applied_at"]),
    (
        "runs",
        &[
            "run_id",
            "thread_id",
            "status",
            "started_at",
            "finished_at",
            "error_message",
            "error_code",
            "usage",
            "sandbox_key",
            "detached_since",
            "cancel_requested",
            "driver_epoch",
            "inserted_seq",
        ],
    ),
    ("leases", &["key", "owner", "token", "expires_at"]),
    ("lease_notes", &["key", "note"]),
    ("logs", &["run_id", "closed", "last_append_at", "next_seq"]),
    ("log_entries", &["run_id", "seq", "chunk"]),
    (
        "sandbox_instances",
        &[
            "key",
            "provider",
            "provider_sandbox_id",
            "latest_snapshot_id",
            "thread_id",
            "latest_run_id",
            "updated_at",
        ],
    ),
    (
        "transcripts",
        &["run_id", "thread_id", "body", "exit_code", "saved_at"],
    ),
    (
        "reclaim_intents",
        &[
            "run_id",
            "sandbox_key",
            "provider",
            "provider_sandbox_id",
            "first_seen",
            "attempts",
            "next_attempt_at",
            "last_error",
        ],
    ),
    ("run_history", &["run_id", "at", "sweep_id", "entry"]),
    ("sweeps", &["seq", "sweep_id", "finished_at", "record"]),
];

/// The tables (with their columns) a schema at `version` has: those its migrations created.
pub fn shape_at(version: u32) -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
    SHAPE.into_iter().filter(move |(table, _)| {
        let create = format!("CREATE TABLE @.{table} (");
        pending(0)
            .filter(|m| m.version <= version)
            .flat_map(|m| m.statements)
            .any(|s| s.starts_with(&create))
    })
}

/// Identifiers are compared byte-wise (`COLLATE "C"`), as the ports' keyset order and every other
/// store compare them, whatever the database's default collation. Instants are milliseconds
/// since the Unix epoch in `BIGINT`. JSON is kept as `json`, which stores the text verbatim (a
/// chunk reads back byte for byte) and still refuses text that is not JSON.
const V1: &[&str] = &[
    "CREATE TABLE @.schema_migrations (
    version     INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
)",
    "CREATE TABLE @.runs (
    run_id           TEXT COLLATE \"C\" PRIMARY KEY,
    thread_id        TEXT COLLATE \"C\" NOT NULL,
    status           TEXT NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'interrupted', 'completed', 'failed', 'aborted')),
    started_at       BIGINT NOT NULL,
    finished_at      BIGINT,
    error_message    TEXT,
    error_code       TEXT,
    usage            JSONB,
    sandbox_key      TEXT,
    detached_since   BIGINT,
    cancel_requested BOOLEAN,
    driver_epoch     BIGINT CHECK (driver_epoch IS NULL OR driver_epoch >= 0),
    inserted_seq     BIGINT GENERATED BY DEFAULT AS IDENTITY,
    CHECK (error_code IS NULL OR error_message IS NOT NULL)
)",
    "CREATE INDEX runs_by_thread ON @.runs (thread_id, started_at)",
    "CREATE INDEX runs_reclaimable ON @.runs (detached_since, run_id)
    WHERE status = 'running' AND detached_since IS NOT NULL",
    "CREATE INDEX runs_finished ON @.runs (finished_at)
    WHERE finished_at IS NOT NULL AND status IN ('completed', 'failed', 'aborted')",
    "CREATE TABLE @.leases (
    key        TEXT COLLATE \"C\" PRIMARY KEY,
    owner      TEXT NOT NULL,
    token      TEXT NOT NULL,
    expires_at BIGINT NOT NULL
)",
    "CREATE TABLE @.lease_notes (
    key  TEXT COLLATE \"C\" PRIMARY KEY,
    note TEXT NOT NULL
)",
    "CREATE TABLE @.logs (
    run_id         TEXT COLLATE \"C\" PRIMARY KEY,
    closed         BOOLEAN NOT NULL DEFAULT false,
    last_append_at BIGINT,
    next_seq       BIGINT NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    events_pruned_at BIGINT
)",
    "CREATE TABLE @.log_entries (
    run_id TEXT COLLATE \"C\" NOT NULL,
    seq    BIGINT NOT NULL CHECK (seq >= 0),
    chunk  JSON NOT NULL,
    PRIMARY KEY (run_id, seq)
)",
    "CREATE TABLE @.sandbox_instances (
    key                 TEXT COLLATE \"C\" PRIMARY KEY,
    provider            TEXT NOT NULL,
    provider_sandbox_id TEXT NOT NULL,
    latest_snapshot_id  TEXT,
    thread_id           TEXT NOT NULL,
    latest_run_id       TEXT,
    updated_at          BIGINT NOT NULL
)",
    "CREATE TABLE @.transcripts (
    run_id    TEXT COLLATE \"C\" PRIMARY KEY,
    thread_id TEXT COLLATE \"C\" NOT NULL,
    body      JSON NOT NULL,
    exit_code BIGINT,
    saved_at  BIGINT NOT NULL
)",
    "CREATE INDEX transcripts_by_thread ON @.transcripts (thread_id, saved_at)",
    "CREATE TABLE @.reclaim_intents (
    run_id              TEXT COLLATE \"C\" PRIMARY KEY,
    sandbox_key         TEXT,
    provider            TEXT,
    provider_sandbox_id TEXT,
    first_seen          BIGINT NOT NULL,
    attempts            BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at     BIGINT NOT NULL,
    last_error          TEXT
)",
    "CREATE INDEX reclaim_intents_due ON @.reclaim_intents (next_attempt_at, run_id)",
];

/// Version 2: each run's history, what every sweep did to it (`reaper status RUN_ID`). The
/// primary key serves a run's newest entries without a sort; the index, the retention's
/// bounded prune, oldest first.
const V2: &[&str] = &[
    "CREATE TABLE @.run_history (
    run_id   TEXT COLLATE \"C\" NOT NULL,
    at       BIGINT NOT NULL,
    sweep_id TEXT COLLATE \"C\" NOT NULL,
    entry    JSON NOT NULL,
    PRIMARY KEY (run_id, at, sweep_id)
)",
    "CREATE INDEX run_history_by_age ON @.run_history (at, run_id, sweep_id)",
];

/// Version 3: one record per sweep of every host (the dashboard's recent sweeps). `seq` is the
/// write order for the count cap; the index serves the newest-first read and the retention's
/// prune, oldest first.
const V3: &[&str] = &[
    "CREATE TABLE @.sweeps (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sweep_id    TEXT COLLATE \"C\" NOT NULL UNIQUE,
    finished_at BIGINT NOT NULL,
    record      JSON NOT NULL
)",
    "CREATE INDEX sweeps_by_finish ON @.sweeps (finished_at, sweep_id)",
];

/// What a schema holds, decided with reads only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No such schema, or an empty one: the store creates its tables.
    Empty,
    /// The reaper's, at this version.
    Reaper(u32),
    /// Tables that are not the reaper's (named).
    Foreign(Vec<String>),
    /// The reaper's, but damaged: why.
    Damaged(String),
}

/// Why a table does not have its [`SHAPE`], from the columns the database reports for it (none:
/// the table is missing); `None` when it has every column.
pub fn shape_problem(table: &str, expected: &[&str], found: &[String]) -> Option<String> {
    if found.is_empty() {
        return Some(format!("table {table} is missing"));
    }
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|c| !found.iter().any(|f| f == c))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "table {table} lacks column{} {} (it has {})",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            found.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_number_every_version_from_one_up_to_the_current_one() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    }

    #[test]
    fn every_table_and_column_of_the_shape_is_created_by_a_migration() {
        assert_eq!(shape_at(SCHEMA_VERSION).count(), SHAPE.len());
        for (table, columns) in SHAPE {
            let create = format!("CREATE TABLE @.{table} (");
            let sql = MIGRATIONS
                .iter()
                .flat_map(|m| m.statements)
                .find(|s| s.starts_with(&create))
                .unwrap();
            for column in columns {
                assert!(
                    sql.contains(&format!("\n    {column} ")),
                    "{table}.{column}"
                );
            }
        }
    }

    #[test]
    fn every_statement_names_its_tables_in_the_store_s_schema() {
        for s in MIGRATIONS.iter().flat_map(|m| m.statements) {
            assert!(s.contains(" @."), "{s}");
        }
    }

    #[test]
    fn a_missing_table_or_column_is_named_and_extra_columns_are_tolerated() {
        let have = |cols: &[&str]| cols.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shape_problem("t", &["a", "b"], &have(&["b", "a", "x"])),
            None
        );
        assert_eq!(
            shape_problem("t", &["a"], &[]).as_deref(),
            Some("table t is missing")
        );
        let problem = shape_problem("runs", &["a", "b", "c"], &have(&["b", "x"])).unwrap();
        assert!(
            problem.contains("lacks columns a, c (it has b, x)"),
            "{problem}"
        );
    }
}
