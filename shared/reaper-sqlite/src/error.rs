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
        "{path} is not a SQLite database (its first bytes are not the SQLite header); the reaper \
         left it untouched: point it at a reaper database file or at a path that does not exist yet"
    )]
    NotSqlite { path: PathBuf },

    /// A SQLite database that belongs to something else (it has tables but no reaper schema).
    #[error(
        "{path} is a SQLite database of another application (tables: {}) with no reaper schema \
         table; the reaper left it untouched: use a separate file for the reaper",
        tables.join(", ")
    )]
    Foreign { path: PathBuf, tables: Vec<String> },

    /// Written by a newer reaper whose schema this build does not know.
    #[error(
        "{path} has reaper schema version {found}, but this build supports versions up to \
         {supported}; the reaper left it untouched: upgrade the reaper to read it"
    )]
    TooNew {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    /// Opened read-only, but the file needs a migration only a writable open can apply.
    #[error(
        "{path} has reaper schema version {found}, older than this build's {supported}; a \
         read-only open cannot migrate it: open it once read-write (any reaper command that \
         writes does)"
    )]
    NeedsMigration {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    /// SQLite reports the file as damaged.
    #[error("{path} is a damaged SQLite database ({reason}); the reaper left it untouched")]
    Corrupt { path: PathBuf, reason: String },

    /// Another process held the database locked past the busy timeout while it was being set up.
    #[error("{path} stayed locked by another process while opening it ({reason}); retry")]
    Busy { path: PathBuf, reason: String },

    #[error("could not read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("could not open {path} as a SQLite database: {reason}")]
    Sqlite { path: PathBuf, reason: String },
}

impl OpenError {
    pub(crate) fn from_sqlite(path: &Path, e: rusqlite::Error) -> Self {
        let path = path.to_path_buf();
        let reason = e.to_string();
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => OpenError::NotSqlite { path },
            Some(ErrorCode::DatabaseCorrupt) => OpenError::Corrupt { path, reason },
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
            OpenError::Corrupt { ref path, .. } => StoreError::Corrupt {
                key: path.display().to_string(),
                reason: e.to_string(),
            },
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// Maps a SQLite error: busy or locked is retryable, a constraint is a conflict, an undecodable
/// value is corrupt, anything else is a backend error carrying SQLite's message.
pub(crate) fn store_err(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            return StoreError::Unavailable(format!("sqlite database is busy: {e}"))
        }
        Some(ErrorCode::ConstraintViolation) => {
            return StoreError::Conflict(format!("sqlite constraint failed: {e}"))
        }
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            return StoreError::Corrupt {
                key: "database".into(),
                reason: e.to_string(),
            }
        }
        _ => {}
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
        StoreError::Corrupt { reason, .. } => corrupt(key, reason),
        other => other,
    }
}
