//! The schema version, the migrations that build it, and the table names.
//!
//! The version lives in a table (`reaper_schema`), not in `PRAGMA user_version`, because D1 does
//! not let an application set pragmas.

use crate::runs::unlistable_where;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 8;

/// The table that marks a database as the reaper's and records each applied migration.
pub const SCHEMA_TABLE: &str = "reaper_schema";

/// Every table of the schema, `SCHEMA_TABLE` first.
pub const TABLES: [&str; 11] = [
    SCHEMA_TABLE,
    crate::runs::TABLE,
    crate::leases::TABLE,
    crate::logs::TABLE,
    crate::logs::ENTRIES_TABLE,
    crate::sandbox_instances::TABLE,
    crate::transcripts::TABLE,
    crate::reclaim_intents::TABLE,
    crate::leases::NOTES_TABLE,
    crate::history::TABLE,
    crate::sweeps::TABLE,
];

/// Every table with the columns the reaper reads and writes, in [`TABLES`] order. A table that
/// lacks one of them was damaged or hand-edited: the store refuses it when it opens the file,
/// naming the table and columns, instead of failing every later query with "no such column".
/// Extra columns an application adds are tolerated.
pub const SHAPE: [(&str, &[&str]); 11] = [
    (SCHEMA_TABLE, &["version", "description"]),
    (
        crate::runs::TABLE,
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
        ],
    ),
    (
        crate::leases::TABLE,
        &["key", "owner", "token", "expires_at"],
    ),
    (
        crate::logs::TABLE,
        &[
            "run_id",
            "closed",
            "last_append_at",
            "next_seq",
            "events_pruned_at",
        ],
    ),
    (crate::logs::ENTRIES_TABLE, &["run_id", "seq", "chunk"]),
    (
        crate::sandbox_instances::TABLE,
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
        crate::transcripts::TABLE,
        &["run_id", "thread_id", "body", "exit_code", "saved_at"],
    ),
    (
        crate::reclaim_intents::TABLE,
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
    (crate::leases::NOTES_TABLE, &["key", "note"]),
    (
        crate::history::TABLE,
        &["run_id", "sweep_id", "at", "entry"],
    ),
    (
        crate::sweeps::TABLE,
        &["seq", "sweep_id", "finished_at", "record"],
    ),
];

/// The tables (with their columns) a database at `version` has, under the names they have at
/// that version (before version 7 the reaper's first tables had no `reaper_` prefix).
pub fn shape_at(version: u32) -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
    SHAPE.into_iter().filter_map(move |(table, columns)| {
        let name = name_at(table, version);
        let create = format!("CREATE TABLE {name} (");
        statements_up_to(version)
            .any(|s| s.starts_with(&create))
            .then_some((name, columns))
    })
}

/// The tables version 7 renamed, each as `(before, after)`.
pub const RENAMED_IN_V7: [(&str, &str); 6] = [
    ("runs", crate::runs::TABLE),
    ("leases", crate::leases::TABLE),
    ("logs", crate::logs::TABLE),
    ("log_entries", crate::logs::ENTRIES_TABLE),
    ("sandbox_instances", crate::sandbox_instances::TABLE),
    ("transcripts", crate::transcripts::TABLE),
];

/// The name the table `table` (one of [`TABLES`]) has in a database at `version`.
pub fn name_at(table: &'static str, version: u32) -> &'static str {
    match RENAMED_IN_V7.iter().find(|(_, after)| *after == table) {
        Some((before, _)) if version < BASELINE.version => before,
        _ => table,
    }
}

/// The statements that built a database at `version` from nothing: the migrations up to it for
/// an old database, [`BASELINE`] and the migrations after it for a newer one (what
/// [`pending`]`(0)` applies).
fn statements_up_to(version: u32) -> impl Iterator<Item = &'static str> {
    let upgraded = version < BASELINE.version;
    let first: &[Migration] = if upgraded { MIGRATIONS } else { &[BASELINE] };
    let rest: &[Migration] = if upgraded { &[] } else { MIGRATIONS };
    first
        .iter()
        .chain(rest.iter().filter(move |m| m.version > BASELINE.version))
        .filter(move |m| m.version <= version)
        .flat_map(|m| m.statements.iter().copied())
}

/// Every statement [`pending`]`(0)` runs on a new database, in order (without the version rows).
pub fn fresh_statements() -> impl Iterator<Item = &'static str> {
    pending(0).flat_map(|m| m.statements.iter().copied())
}

/// Why a table does not have the shape [`SHAPE`] gives it, from the columns the database
/// reports for it (none: the table is missing); `None` when it has every column.
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

/// The columns of a table, one row each in column `name` (no rows: no such table). `?1` the
/// table name.
pub const TABLE_COLUMNS: &str = "SELECT name FROM pragma_table_info(?1) ORDER BY cid";

/// The highest applied version; `NULL` (no row) when the table is empty. See [`stored_version`].
pub const CURRENT_VERSION: &str = "SELECT MAX(version) AS version FROM reaper_schema";

/// Records an applied migration: `?1` its version, `?2` its description.
pub const RECORD_MIGRATION: &str =
    "INSERT INTO reaper_schema (version, description) VALUES (?1, ?2)";

/// One migration: its statements take a database from `version - 1` to `version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version this migration brings a database to.
    pub version: u32,
    /// What it changes, recorded in `reaper_schema`.
    pub description: &'static str,
    /// Run in order, then [`RECORD_MIGRATION`], all in one transaction (one D1 batch).
    pub statements: &'static [&'static str],
}

/// Every migration in order. Append only: a released migration is never edited, since
/// databases in the field already ran it and `sqlite_master` keeps its text.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "initial schema",
        statements: V1,
    },
    Migration {
        version: 2,
        description: "reclaim ledger",
        statements: V2,
    },
    Migration {
        version: 3,
        description: "lease notes",
        statements: V3,
    },
    Migration {
        version: 4,
        description: "listing keyset index",
        statements: V4,
    },
    Migration {
        version: 5,
        description: "unlistable rows index",
        statements: V5,
    },
    Migration {
        version: 6,
        description: "run history",
        statements: V6,
    },
    Migration {
        version: 7,
        description: "reaper_ prefix on every table and index",
        statements: V7,
    },
    Migration {
        version: 8,
        description: "sweep records",
        statements: V8,
    },
];

/// The whole schema at version 7, created at once on a new database (see [`pending`]). Its
/// tables and indexes are those the migrations up to version 7 leave, statement for statement
/// as SQLite stores them but for the names (a test compares the two). Never edited once
/// released, like a migration: a later change is a migration after it.
pub const BASELINE: Migration = Migration {
    version: 7,
    description: "schema at version 7, created whole",
    statements: BASELINE_V7,
};

/// The migrations a database at version `from` still needs, in order. A new database (`from`
/// 0) is created at [`BASELINE`] and then takes the migrations after it, not every migration
/// from version 1: those create the unprefixed tables (`runs`, …) an application may have.
pub fn pending(from: u32) -> impl Iterator<Item = &'static Migration> {
    let fresh = from == 0;
    let after = if fresh { BASELINE.version } else { from };
    fresh
        .then_some(&BASELINE)
        .into_iter()
        .chain(MIGRATIONS.iter().filter(move |m| m.version > after))
}

/// The version [`CURRENT_VERSION`] read: no row, or a value that is no version, counts as 0.
pub fn stored_version(max_version: Option<i64>) -> u32 {
    max_version.and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

/// [`stored_version`] for a database whose `reaper_schema` table exists: every migration records
/// its row in the transaction that creates the table, so no row, or a version that is no
/// migration's, means the table was damaged. Returns the reason.
pub fn recorded_version(max_version: Option<i64>) -> Result<u32, String> {
    match max_version {
        None => Err(format!("{SCHEMA_TABLE} holds no version row")),
        Some(v) => u32::try_from(v)
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| format!("{SCHEMA_TABLE} records version {v}, which no reaper wrote")),
    }
}

/// The key of a `StoreError::Corrupt` about the whole database rather than one row: both
/// backends use it, so `is_damaged` means the same for an SQLite file and a D1 database.
pub const DAMAGED_KEY: &str = "database";

/// Why a store refuses a database as damaged, and what to do about it. Both backends word it
/// this way so an operator (and the CLI's exit code) recognise it by "damaged".
pub fn damaged(what: &str, detail: &str) -> String {
    format!(
        "{what} is damaged: {detail}. The reaper changed nothing; restore it from a backup, or \
         inspect it with `sqlite3 <file> \"PRAGMA integrity_check\"`"
    )
}

/// [`damaged`] for damage met while the reaper works (not when it opens the database): it may
/// have written before it met the damage (its sweep lease, claims, log entries), so it does not
/// claim to have changed nothing. It says what it guarantees: a sweep stops at the damage and
/// records no run terminal and destroys no sandbox after it.
pub fn damaged_in_use(what: &str, detail: &str) -> String {
    format!(
        "{what} is damaged: {detail}. The sweep stopped there: it records no run terminal and \
         destroys no sandbox once it has seen damage; restore it from a backup, or inspect it \
         with `sqlite3 <file> \"PRAGMA integrity_check\"`"
    )
}

/// [`damaged_in_use`] for a D1 database, with D1's remedies.
pub fn d1_damaged_in_use(detail: &str) -> String {
    format!(
        "the D1 database is damaged: {detail}. The sweep stopped there: it records no run \
         terminal and destroys no sandbox once it has seen damage; restore it to a time before \
         the damage with `npx wrangler d1 time-travel restore <database> --timestamp <when>`, or \
         inspect it with `npx wrangler d1 execute <database> --remote --command \"PRAGMA \
         quick_check\"`"
    )
}

/// [`damaged`] for a D1 database, with D1's remedies: restoring with Time Travel, or inspecting
/// it through wrangler (D1 runs `PRAGMA quick_check`, not `integrity_check`).
pub fn d1_damaged(detail: &str) -> String {
    format!(
        "the D1 database is damaged: {detail}. The reaper changed nothing; restore it to a time \
         before the damage with `npx wrangler d1 time-travel restore <database> --timestamp \
         <when>`, or inspect it with `npx wrangler d1 execute <database> --remote --command \
         \"PRAGMA quick_check\"`"
    )
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

/// Version 2: the reclaim ledger. The index serves the due listing (`next_attempt_at <= now
/// ORDER BY next_attempt_at, run_id LIMIT n`) without a sort or a scan past `n` rows.
const V2: &[&str] = &[
    "CREATE TABLE reaper_reclaim_intents (
    run_id              TEXT PRIMARY KEY NOT NULL,
    sandbox_key         TEXT,
    provider            TEXT,
    provider_sandbox_id TEXT,
    first_seen          INTEGER NOT NULL,
    attempts            INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at     INTEGER NOT NULL,
    last_error          TEXT
)",
    "CREATE INDEX reaper_reclaim_intents_due ON reaper_reclaim_intents (next_attempt_at, run_id)",
];

/// Version 3: a note kept with a lease key (the sweep's listing cursor, so a caller that keeps
/// no state between sweeps still goes round robin). Beside `leases`, not a column of it: a
/// release deletes the lease row, and the note outlives the grants.
const V3: &[&str] = &["CREATE TABLE reaper_lease_notes (
    key  TEXT PRIMARY KEY NOT NULL,
    note TEXT NOT NULL
)"];

/// The listing's index on its whole keyset `(detached_since, run_id)`, not `detached_since`
/// alone: a page resumes inside a group of runs detached in the same millisecond (a bulk detach)
/// by seeking to its cursor, where an index on the instant alone had it sort the whole group on
/// every page.
const V4: &[&str] = &[
    "DROP INDEX runs_reclaimable",
    "CREATE INDEX runs_reclaimable ON runs (detached_since, run_id)
    WHERE status = 'running' AND detached_since IS NOT NULL",
];

/// Version 5: an index holding exactly the rows that look detached but that no listing reaches
/// (its WHERE is [`crate::runs::UNLISTABLE_WHERE`], which [`crate::runs::LIST_UNLISTABLE`]
/// repeats verbatim so SQLite uses it). Healthy runs are never in it, so the sweep's report of
/// such rows reads only them, not the whole `runs` table: D1 bills every row a scan reads.
const V5: &[&str] = &[concat!(
    "CREATE INDEX runs_unlistable ON runs (detached_since) WHERE ",
    unlistable_where!()
)];

/// Version 6: each run's history, what every sweep did to it (`reaper status RUN_ID`). The
/// primary key serves a run's newest entries (`WHERE run_id = ? ORDER BY at DESC, sweep_id DESC
/// LIMIT n`) without a sort; the index serves the retention's bounded prune, oldest first.
const V6: &[&str] = &[
    "CREATE TABLE reaper_run_history (
    run_id   TEXT NOT NULL,
    at       INTEGER NOT NULL,
    sweep_id TEXT NOT NULL,
    entry    TEXT NOT NULL CHECK (json_valid(entry)),
    PRIMARY KEY (run_id, at, sweep_id)
)",
    "CREATE INDEX reaper_run_history_by_age ON reaper_run_history (at, run_id, sweep_id)",
];

/// The index statements of version 7, shared by [`V7`] and [`BASELINE_V7`] so the two create
/// the same indexes. Their conditions are those of versions 1, 4 and 5, verbatim, since the
/// queries repeat them so SQLite uses the partial indexes.
const RUNS_BY_THREAD: &str =
    "CREATE INDEX reaper_runs_by_thread ON reaper_runs (thread_id, started_at)";
const RUNS_RECLAIMABLE: &str =
    "CREATE INDEX reaper_runs_reclaimable ON reaper_runs (detached_since, run_id)
    WHERE status = 'running' AND detached_since IS NOT NULL";
const RUNS_FINISHED: &str = "CREATE INDEX reaper_runs_finished ON reaper_runs (finished_at)
    WHERE finished_at IS NOT NULL AND status IN ('completed', 'failed', 'aborted')";
const RUNS_UNLISTABLE: &str = concat!(
    "CREATE INDEX reaper_runs_unlistable ON reaper_runs (detached_since) WHERE ",
    unlistable_where!()
);
const TRANSCRIPTS_BY_THREAD: &str =
    "CREATE INDEX reaper_transcripts_by_thread ON reaper_transcripts (thread_id, saved_at)";

/// Version 7: the `reaper_` prefix on the tables and indexes that lacked it, so an application
/// may keep its own `runs` or `logs` in the same database. `ALTER TABLE … RENAME` rewrites only
/// the schema; SQLite cannot rename an index, so the five are dropped and rebuilt (the cost of
/// this upgrade on a big database: SCHEMA.md). One transaction, like every migration.
const V7: &[&str] = &[
    "DROP INDEX runs_by_thread",
    "DROP INDEX runs_reclaimable",
    "DROP INDEX runs_finished",
    "DROP INDEX runs_unlistable",
    "DROP INDEX transcripts_by_thread",
    "ALTER TABLE runs RENAME TO reaper_runs",
    "ALTER TABLE leases RENAME TO reaper_leases",
    "ALTER TABLE logs RENAME TO reaper_logs",
    "ALTER TABLE log_entries RENAME TO reaper_log_entries",
    "ALTER TABLE sandbox_instances RENAME TO reaper_sandbox_instances",
    "ALTER TABLE transcripts RENAME TO reaper_transcripts",
    RUNS_BY_THREAD,
    RUNS_RECLAIMABLE,
    RUNS_FINISHED,
    RUNS_UNLISTABLE,
    TRANSCRIPTS_BY_THREAD,
];

/// [`BASELINE`]'s statements: versions 1 to 7 as one, the tables with version 1's column text.
const BASELINE_V7: &[&str] = &[
    "CREATE TABLE reaper_schema (
    version     INTEGER PRIMARY KEY NOT NULL,
    description TEXT NOT NULL
)",
    "CREATE TABLE reaper_runs (
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
    RUNS_BY_THREAD,
    RUNS_RECLAIMABLE,
    RUNS_FINISHED,
    RUNS_UNLISTABLE,
    "CREATE TABLE reaper_leases (
    key        TEXT PRIMARY KEY NOT NULL,
    owner      TEXT NOT NULL,
    token      TEXT NOT NULL,
    expires_at INTEGER NOT NULL
)",
    "CREATE TABLE reaper_logs (
    run_id           TEXT PRIMARY KEY NOT NULL,
    closed           INTEGER NOT NULL DEFAULT 0 CHECK (closed IN (0, 1)),
    last_append_at   INTEGER,
    next_seq         INTEGER NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
    events_pruned_at INTEGER
)",
    "CREATE TABLE reaper_log_entries (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL CHECK (seq >= 0),
    chunk  TEXT NOT NULL CHECK (json_valid(chunk)),
    PRIMARY KEY (run_id, seq)
)",
    "CREATE TABLE reaper_sandbox_instances (
    key                 TEXT PRIMARY KEY NOT NULL,
    provider            TEXT NOT NULL,
    provider_sandbox_id TEXT NOT NULL,
    latest_snapshot_id  TEXT,
    thread_id           TEXT NOT NULL,
    latest_run_id       TEXT,
    updated_at          INTEGER NOT NULL
)",
    "CREATE TABLE reaper_transcripts (
    run_id    TEXT PRIMARY KEY NOT NULL,
    thread_id TEXT NOT NULL,
    body      TEXT NOT NULL CHECK (json_valid(body)),
    exit_code INTEGER,
    saved_at  INTEGER NOT NULL
)",
    TRANSCRIPTS_BY_THREAD,
    V2[0],
    V2[1],
    V3[0],
    V6[0],
    V6[1],
];

/// Version 8: one record per sweep of every host (the dashboard's recent sweeps). `seq` is the
/// rowid (write order) for the count cap; the index serves the newest-first read and the
/// retention's prune, oldest first.
const V8: &[&str] = &[
    "CREATE TABLE reaper_sweeps (
    seq         INTEGER PRIMARY KEY,
    sweep_id    TEXT NOT NULL UNIQUE,
    finished_at INTEGER NOT NULL,
    record      TEXT NOT NULL CHECK (json_valid(record))
)",
    "CREATE INDEX reaper_sweeps_by_finish ON reaper_sweeps (finished_at, sweep_id)",
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
        assert_eq!(pending(1).count(), MIGRATIONS.len() - 1);
        assert_eq!(pending(6).map(|m| m.version).collect::<Vec<_>>(), [7, 8]);
        assert_eq!(pending(SCHEMA_VERSION).count(), 0);
        assert_eq!(pending(SCHEMA_VERSION + 5).count(), 0);
    }

    #[test]
    fn a_new_database_is_created_at_the_baseline_then_takes_the_later_migrations() {
        let fresh: Vec<u32> = pending(0).map(|m| m.version).collect();
        let later = MIGRATIONS.iter().filter(|m| m.version > BASELINE.version);
        assert_eq!(
            fresh,
            std::iter::once(BASELINE.version)
                .chain(later.map(|m| m.version))
                .collect::<Vec<_>>()
        );
        assert_eq!(BASELINE.version, 7, "the baseline is version 7 as released");
    }

    #[test]
    fn every_table_and_index_of_a_new_database_has_the_reaper_prefix() {
        for sql in fresh_statements() {
            let name = sql
                .strip_prefix("CREATE TABLE ")
                .or_else(|| sql.strip_prefix("CREATE INDEX "))
                .and_then(|rest| rest.split([' ', '(']).next())
                .unwrap_or_else(|| panic!("not a CREATE: {sql}"));
            assert!(name.starts_with("reaper_"), "{name} in {sql}");
        }
    }

    #[test]
    fn tables_before_version_seven_have_their_unprefixed_names() {
        let v6: Vec<&str> = shape_at(6).map(|(t, _)| t).collect();
        assert!(
            v6.contains(&"runs") && v6.contains(&"log_entries"),
            "{v6:?}"
        );
        assert!(v6.contains(&crate::history::TABLE), "{v6:?}");
        let v7: Vec<&str> = shape_at(7).map(|(t, _)| t).collect();
        assert!(v7.iter().all(|t| t.starts_with("reaper_")), "{v7:?}");
        let now: Vec<&str> = shape_at(SCHEMA_VERSION).map(|(t, _)| t).collect();
        assert_eq!(now, TABLES.to_vec());
        assert_eq!(name_at(crate::runs::TABLE, 6), "runs");
        assert_eq!(name_at(crate::runs::TABLE, 7), "reaper_runs");
        assert_eq!(name_at(SCHEMA_TABLE, 1), SCHEMA_TABLE);
    }

    #[test]
    fn every_table_of_the_schema_is_created_by_a_new_database_s_statements() {
        for table in TABLES {
            let create = format!("CREATE TABLE {table} (");
            assert!(
                fresh_statements().any(|s| s.starts_with(&create)),
                "nothing creates {table}"
            );
        }
    }

    #[test]
    fn every_column_of_the_shape_is_created_by_its_table_s_migration() {
        for (table, columns) in SHAPE {
            let create = format!("CREATE TABLE {table} (");
            let sql = fresh_statements().find(|s| s.starts_with(&create)).unwrap();
            for column in columns {
                assert!(
                    sql.contains(&format!("\n    {column} ")),
                    "{table}.{column}"
                );
            }
        }
        assert_eq!(SHAPE.map(|(t, _)| t), TABLES);
    }

    #[test]
    fn a_database_at_version_one_has_every_table_but_the_ledger() {
        let v1: Vec<&str> = shape_at(1).map(|(t, _)| t).collect();
        let v1_names: Vec<&str> = TABLES[..7].iter().map(|t| name_at(t, 1)).collect();
        assert_eq!(v1, v1_names);
        assert_eq!(shape_at(SCHEMA_VERSION).count(), TABLES.len());
    }

    #[test]
    fn a_database_at_version_two_has_every_table_but_the_lease_notes() {
        let v2: Vec<&str> = shape_at(2).map(|(t, _)| t).collect();
        let v2_names: Vec<&str> = TABLES[..8].iter().map(|t| name_at(t, 2)).collect();
        assert_eq!(v2, v2_names);
        assert!(!v2.contains(&crate::leases::NOTES_TABLE));
    }

    #[test]
    fn a_missing_table_or_column_is_named_and_extra_columns_are_tolerated() {
        let have = |cols: &[&str]| cols.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shape_problem("t", &["a", "b"], &have(&["b", "a", "x"])),
            None
        );
        assert_eq!(
            shape_problem("t", &["a", "b"], &[]).as_deref(),
            Some("table t is missing")
        );
        let problem = shape_problem("runs", &["a", "b", "c"], &have(&["b", "x"])).unwrap();
        assert!(
            problem.contains("lacks columns a, c (it has b, x)"),
            "{problem}"
        );
    }

    #[test]
    fn a_schema_table_without_a_valid_version_row_is_damaged() {
        assert_eq!(recorded_version(Some(2)), Ok(2));
        for bad in [None, Some(0), Some(-3), Some(i64::MAX)] {
            assert!(recorded_version(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_damaged_message_says_damaged_and_what_to_do() {
        let m = damaged("/x/reaper.db", "table runs is missing");
        assert!(
            m.starts_with("/x/reaper.db is damaged: table runs is missing."),
            "{m}"
        );
        assert!(m.contains("restore it from a backup") && m.contains("PRAGMA integrity_check"));
    }

    #[test]
    fn the_d1_damaged_message_says_damaged_and_names_d1_s_remedies() {
        let m = d1_damaged("table runs is missing");
        assert!(
            m.starts_with("the D1 database is damaged: table runs is missing."),
            "{m}"
        );
        assert!(
            m.contains("wrangler d1 time-travel restore") && m.contains("PRAGMA quick_check"),
            "{m}"
        );
    }

    #[test]
    fn the_unlistable_index_holds_exactly_the_rows_the_unlistable_query_selects() {
        for index in [V5[0], RUNS_UNLISTABLE] {
            let (_, index_where) = index.split_once(" WHERE ").unwrap();
            assert_eq!(index_where, crate::runs::UNLISTABLE_WHERE);
        }
        assert!(crate::runs::LIST_UNLISTABLE.contains(&format!(
            "WHERE {} ORDER BY detached_since, rowid",
            crate::runs::UNLISTABLE_WHERE
        )));
    }

    #[test]
    fn an_empty_schema_table_reads_as_version_zero() {
        assert_eq!(stored_version(None), 0);
        assert_eq!(stored_version(Some(3)), 3);
    }
}
