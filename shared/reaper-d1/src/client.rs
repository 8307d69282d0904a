//! The seam between the store and D1: run statements as one atomic batch, get rows back.
//!
//! A Worker implements [`SqlClient`] over `worker::D1Database::batch` (D1 runs a batch as one
//! SQL transaction, and has no `BEGIN`); native tests implement it over an SQLite connection
//! with the same semantics, so the very same SQL runs in both.

use reaper_core::{MaybeSend, MaybeSync, StoreError};
use serde_json::{Map, Value};

/// The largest integer a D1 result carries exactly: D1 hands numbers to the Worker as JS
/// doubles. The store keeps every integer it binds within `±MAX_SAFE_INTEGER`.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A bound parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL `NULL`.
    Null,
    /// An integer, within `±MAX_SAFE_INTEGER` so the Worker's doubles carry it exactly.
    Integer(i64),
    /// Text.
    Text(String),
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Integer(v)
    }
}

impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_string())
    }
}

impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}

impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}

/// One statement with its positional parameters (`?1`, `?2`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    /// The statement, with `?N` placeholders.
    pub sql: String,
    /// The values bound to `?1`, `?2`, … in order.
    pub params: Vec<SqlValue>,
}

impl Statement {
    /// A statement binding `params` to its placeholders in order.
    pub fn new(sql: impl Into<String>, params: Vec<SqlValue>) -> Self {
        Statement {
            sql: sql.into(),
            params,
        }
    }
}

/// One result row, keyed by column name (alias every expression column).
pub type Row = Map<String, Value>;

/// Runs statements against D1 (or an equivalent).
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait SqlClient: MaybeSend + MaybeSync {
    /// Runs `statements` in order as one transaction: all land or none does. Returns each
    /// statement's rows (empty for a write without `RETURNING`), in the same order.
    async fn batch(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>, StoreError>;
}

/// Maps a D1 error message to the store's semantic error. D1 reports everything as a message
/// string. A malformed page, or a table or column that does not exist (every statement of the
/// store names only the schema's), is a damaged database: [`StoreError::Corrupt`] keyed
/// [`reaper_sql::DAMAGED_KEY`], whose message says "damaged" and what to do. The transient ones
/// (the documented retryable errors: a reset or overloaded database, a lost connection, a
/// timeout) are [`StoreError::Unavailable`], constraint failures are [`StoreError::Conflict`],
/// the rest [`StoreError::Backend`].
pub fn classify_d1_error(message: &str) -> StoreError {
    // SQLite's own wording of a damaged file (SQLITE_CORRUPT, SQLITE_NOTADB) and of a schema
    // object that is not there.
    const DAMAGED: &[&str] = &[
        "sqlite_corrupt",
        "database disk image is malformed",
        "sqlite_notadb",
        "file is not a database",
        "no such table",
        "no such column",
    ];
    const TRANSIENT: &[&str] = &[
        "network connection lost",
        "storage caused object to be reset",
        "object to be reset",
        "overloaded",
        "timed out",
        "timeout",
        "internal error",
        "try again",
        "database is locked",
        "database is busy",
    ];
    let lower = message.to_ascii_lowercase();
    if DAMAGED.iter().any(|d| lower.contains(d)) {
        StoreError::Corrupt {
            key: reaper_sql::DAMAGED_KEY.into(),
            reason: reaper_sql::d1_damaged_in_use(message),
        }
    } else if TRANSIENT.iter().any(|t| lower.contains(t)) {
        StoreError::Unavailable(format!("d1: {message}"))
    } else if lower.contains("constraint failed") {
        StoreError::Conflict(format!("d1: {message}"))
    } else {
        StoreError::Backend(format!("d1: {message}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_d1_messages_are_retryable_and_constraint_failures_are_conflicts() {
        for m in [
            "D1_ERROR: Network connection lost.",
            "D1 DB is overloaded. Requests queued for too long.",
            "D1_ERROR: D1 DB storage operation exceeded timeout which caused object to be reset.",
            "D1_ERROR: Internal error while starting up D1 DB storage caused object to be reset.",
        ] {
            assert!(classify_d1_error(m).is_retryable(), "{m}");
        }
        assert!(matches!(
            classify_d1_error(
                "D1_ERROR: UNIQUE constraint failed: reaper_runs.run_id: SQLITE_CONSTRAINT"
            ),
            StoreError::Conflict(_)
        ));
        match classify_d1_error("D1_ERROR: near \"SELEC\": syntax error: SQLITE_ERROR") {
            StoreError::Backend(m) => assert!(m.contains("syntax error"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_malformed_page_or_a_missing_table_or_column_is_a_damaged_database() {
        for m in [
            "D1_ERROR: database disk image is malformed: SQLITE_CORRUPT",
            "D1_ERROR: file is not a database: SQLITE_NOTADB",
            "D1_ERROR: no such table: reaper_runs: SQLITE_ERROR",
            "D1_ERROR: no such column: driver_epoch at offset 7: SQLITE_ERROR",
        ] {
            let e = classify_d1_error(m);
            assert!(crate::is_damaged(&e), "{m}: {e:?}");
            assert!(!e.is_retryable(), "{m}");
            let StoreError::Corrupt { reason, .. } = e else {
                unreachable!()
            };
            assert!(
                reason.starts_with(&format!("the D1 database is damaged: {m}")),
                "{reason}"
            );
            assert!(reason.contains("time-travel restore"), "{reason}");
        }
    }
}
