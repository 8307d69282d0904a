//! The one place SQLite errors become [`StoreError`]s, and the errors of opening a database file.

use std::path::{Path, PathBuf};

use reaper_core::StoreError;
use rusqlite::ErrorCode;

/// Why a database file could not be opened as a reaper store. Every variant that names a file the
/// store refused also guarantees the file was not written to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The file exists but is not SQLite at all.
    #[error(
        "{path} is not a SQLite database; the reaper left it untouched: point it at a reaper \
         database file or at a path that does not exist yet"
    )]
    NotSqlite {
        /// The database file.
        path: PathBuf,
    },

    /// An application's database with none of the reaper's tables yet: only an explicit `init`
    /// adds them, so a typo in a path never writes into someone else's database.
    #[error(
        "{path} is a SQLite database of another application (tables: {}) with no reaper tables \
         yet; the reaper left it untouched: run `reaper init --db {}` to add the reaper's tables \
         beside the application's (or apply the DDL of `reaper schema --sql` with your \
         migration tool), or use a separate file",
        tables.join(", "), path.display()
    )]
    NotInitialised {
        /// The database file.
        path: PathBuf,
        /// The application's tables.
        tables: Vec<String>,
    },

    /// Tables named like the reaper's that are not the reaper's (there is no reaper schema
    /// table): the reaper's cannot be added beside them.
    #[error(
        "{path} holds tables named like the reaper's ({}) but no reaper schema table: they \
         belong to another application; the reaper left it untouched: use a separate file for \
         the reaper",
        tables.join(", ")
    )]
    Foreign {
        /// The database file.
        path: PathBuf,
        /// The tables whose names clash with the reaper's.
        tables: Vec<String>,
    },

    /// Written by a newer reaper whose schema this build does not know.
    #[error(
        "{path} has reaper schema version {found}, but this build supports versions up to \
         {supported}; the reaper left it untouched: upgrade the reaper to read it"
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// The version the file records.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },

    /// Opened read-only, but the file needs a migration only a writable open can apply.
    #[error(
        "{path} has reaper schema version {found}, older than this build's {supported}; a \
         read-only open cannot migrate it: open it once read-write (any reaper command that \
         writes does)"
    )]
    NeedsMigration {
        /// The database file.
        path: PathBuf,
        /// The version the file records.
        found: u32,
        /// The version this build would migrate it to.
        supported: u32,
    },

    /// The file is damaged: SQLite reports a malformed page, or the reaper's tables are not
    /// the shape its schema version gives them (a table or column missing, no version row).
    #[error("{}", reaper_sql::damaged(&path.display().to_string(), reason))]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is damaged.
        reason: String,
    },

    /// Another process held the database locked past the busy timeout while it was being set up.
    #[error("{path} stayed locked by another process while opening it ({reason}); retry")]
    Busy {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        reason: String,
    },

    /// The file could not be read (permissions, a missing directory).
    #[error("could not read {path}: {source}")]
    Io {
        /// The database file.
        path: PathBuf,
        #[source]
        /// The system's error.
        source: std::io::Error,
    },

    /// SQLite refused to open it for another reason.
    #[error("could not open {path} as a SQLite database: {reason}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        reason: String,
    },
}

impl OpenError {
    pub(crate) fn from_sqlite(path: &Path, e: rusqlite::Error) -> Self {
        let path = path.to_path_buf();
        let reason = e.to_string();
        match e.sqlite_error_code() {
            // The header check already saw SQLite's header: the rest of the file is damaged.
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                OpenError::Corrupt { path, reason }
            }
            Some(ErrorCode::CannotOpen) => OpenError::Sqlite {
                reason: format!(
                    "{reason} (SQLite needs to read the file and, for a database in WAL mode, \
                     to create its -wal and -shm files beside it even to read: check the file \
                     and its directory are readable, and the directory writable)"
                ),
                path,
            },
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                OpenError::Busy { path, reason }
            }
            _ => OpenError::Sqlite { path, reason },
        }
    }
}

impl From<OpenError> for StoreError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Busy { .. } => StoreError::Unavailable(e.to_string()),
            OpenError::Corrupt { .. } => StoreError::Corrupt {
                key: DAMAGED_KEY.into(),
                reason: e.to_string(),
            },
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// The key of a [`StoreError::Corrupt`] about the whole database file rather than one row,
/// shared with D1.
pub use reaper_sql::DAMAGED_KEY;

/// Whether `e` says the database file itself is damaged (a malformed page, a table of the wrong
/// shape): no retry helps, the file must be restored or repaired. Its message says how. A
/// malformed row is not this: it is a `Corrupt` naming the row, and every other row still reads.
pub fn is_damaged(e: &StoreError) -> bool {
    matches!(e, StoreError::Corrupt { key, .. } if key == DAMAGED_KEY)
}

/// A [`StoreError`] saying the database is damaged, met while working rather than at open
/// (which says so with [`OpenError::Corrupt`]): worded so it stays true after the sweep wrote
/// its lease or a claim. `what` names the file.
fn damaged_in_use(what: &str, detail: &str) -> StoreError {
    StoreError::Corrupt {
        key: DAMAGED_KEY.into(),
        reason: reaper_sql::damaged_in_use(what, detail),
    }
}

/// Names the file in a damaged-database error, which [`store_err`] words without knowing it.
pub(crate) fn name_the_file(e: StoreError, path: Option<&Path>) -> StoreError {
    match (e, path) {
        (StoreError::Corrupt { key, reason }, Some(path)) if key == DAMAGED_KEY => {
            StoreError::Corrupt {
                key,
                reason: reason.replacen(UNNAMED_DATABASE, &path.display().to_string(), 1),
            }
        }
        (other, _) => other,
    }
}

const UNNAMED_DATABASE: &str = "the database";

/// Maps a SQLite error: busy or locked is retryable, a constraint is a conflict, a malformed
/// page or a missing table or column (every statement of the store names only the schema's) is a
/// damaged database, an undecodable value is corrupt, anything else is a backend error carrying
/// SQLite's message.
pub(crate) fn store_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            return StoreError::Unavailable(format!("sqlite database is busy: {e}"))
        }
        Some(ErrorCode::ConstraintViolation) => {
            return StoreError::Conflict(format!("sqlite constraint failed: {e}"))
        }
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            return damaged_in_use(UNNAMED_DATABASE, &e.to_string())
        }
        _ => {}
    }
    let message = e.to_string();
    if message.starts_with("no such table") || message.starts_with("no such column") {
        return damaged_in_use(UNNAMED_DATABASE, &message);
    }
    match e {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::Utf8Error(..) => StoreError::Corrupt {
            key: "row".into(),
            reason: e.to_string(),
        },
        other => StoreError::Backend(format!("sqlite: {other}")),
    }
}

/// A stored value that does not decode, named by the row it belongs to.
pub(crate) fn corrupt(key: impl Into<String>, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        key: key.into(),
        reason: reason.into(),
    }
}

/// [`store_err`], naming the row when the error is a value that does not decode.
pub(crate) fn store_err_for(key: &str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| match store_err(e) {
        // Damage is the whole database's, never one row's: naming a row would hide it.
        StoreError::Corrupt { key: k, reason } if k != DAMAGED_KEY => corrupt(key, reason),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rusqlite::Connection;

    use super::*;

    #[test]
    fn a_constraint_failure_is_a_conflict() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY); INSERT INTO t VALUES ('a');")
            .unwrap();
        let e = conn.execute("INSERT INTO t VALUES ('a')", []).unwrap_err();
        assert!(matches!(store_err(e), StoreError::Conflict(_)));
    }

    #[test]
    fn a_locked_database_is_unavailable_and_retryable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let holder = Connection::open(&path).unwrap();
        holder
            .execute_batch("CREATE TABLE t (k INTEGER); BEGIN IMMEDIATE; INSERT INTO t VALUES (1);")
            .unwrap();
        let other = Connection::open(&path).unwrap();
        other.busy_timeout(Duration::ZERO).unwrap();
        let e = other.execute("INSERT INTO t VALUES (2)", []).unwrap_err();
        let mapped = store_err(e);
        assert!(mapped.is_retryable(), "{mapped:?}");
    }

    #[test]
    fn an_undecodable_value_is_corrupt_and_named_by_its_row() {
        let conn = Connection::open_in_memory().unwrap();
        let e = conn
            .query_row("SELECT 'text'", [], |r| r.get::<_, i64>(0))
            .unwrap_err();
        match store_err_for("run-7")(e) {
            StoreError::Corrupt { key, .. } => assert_eq!(key, "run-7"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn any_other_failure_is_a_backend_error_with_sqlite_s_message() {
        let conn = Connection::open_in_memory().unwrap();
        let e = conn.execute("SELECT nonsense(1)", []).unwrap_err();
        match store_err(e) {
            StoreError::Backend(m) => assert!(m.contains("nonsense"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_table_is_a_damaged_database_named_by_its_file() {
        let conn = Connection::open_in_memory().unwrap();
        let e = conn.execute("SELECT * FROM reaper_runs", []).unwrap_err();
        let e = name_the_file(store_err(e), Some(Path::new("/srv/reaper.db")));
        assert!(is_damaged(&e), "{e:?}");
        let StoreError::Corrupt { reason, .. } = e else {
            unreachable!()
        };
        assert!(
            reason.starts_with("/srv/reaper.db is damaged: no such table: reaper_runs"),
            "{reason}"
        );
        assert!(reason.contains("PRAGMA integrity_check"), "{reason}");
    }

    #[test]
    fn damage_met_reading_a_named_row_stays_the_database_s_damage() {
        let conn = Connection::open_in_memory().unwrap();
        let e = conn
            .execute("SELECT * FROM reaper_sandbox_instances", [])
            .unwrap_err();
        let mapped = store_err_for("sandbox instance k")(e);
        assert!(is_damaged(&mapped), "{mapped:?}");
        assert!(!mapped.to_string().contains("changed nothing"), "{mapped}");
    }

    #[test]
    fn a_malformed_row_is_not_a_damaged_database() {
        assert!(!is_damaged(&corrupt("run-1", "status \"x\"")));
        assert!(!is_damaged(&StoreError::Backend("database".into())));
    }
}
