//! Reading typed values out of a row. SQLite's type affinity lets any value into any column (a
//! real number into `started_at`, a blob into `run_id`), so each value is checked against what
//! the contract says its column holds, and anything else is [`StoreError::Corrupt`] naming the
//! row and the column: never converted, never read as something else.

use reaper_core::StoreError;
use rusqlite::types::ValueRef;
use rusqlite::Row;

use crate::error::{corrupt, store_err};

/// A short description of a value of the wrong type, for the corrupt reason.
fn describe(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => format!("the integer {i}"),
        ValueRef::Real(f) => format!("the real number {f}"),
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(s) if s.chars().count() <= 40 => format!("the text {s:?}"),
            Ok(_) => format!("a text of {} bytes", t.len()),
            Err(_) => format!("a text of {} bytes that is not UTF-8", t.len()),
        },
        ValueRef::Blob(b) => format!("a blob of {} bytes", b.len()),
    }
}

/// One row and the key its errors name.
pub(crate) struct Cells<'a, 'r> {
    pub row: &'a Row<'r>,
    pub key: &'a str,
}

impl Cells<'_, '_> {
    fn value(&self, idx: usize) -> Result<ValueRef<'_>, StoreError> {
        self.row.get_ref(idx).map_err(store_err)
    }

    pub fn opt_text(&self, idx: usize, column: &str) -> Result<Option<String>, StoreError> {
        match self.value(idx)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map(|s| Some(s.to_owned()))
                .map_err(|_| {
                    corrupt(
                        self.key,
                        format!("column {column} is {}", describe(ValueRef::Text(t))),
                    )
                }),
            other => Err(corrupt(
                self.key,
                format!("column {column} is {}, expected text", describe(other)),
            )),
        }
    }

    pub fn opt_int(&self, idx: usize, column: &str) -> Result<Option<i64>, StoreError> {
        match self.value(idx)? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(i) => Ok(Some(i)),
            other => Err(corrupt(
                self.key,
                format!(
                    "column {column} is {}, expected an integer",
                    describe(other)
                ),
            )),
        }
    }

    pub fn text(&self, idx: usize, column: &str) -> Result<String, StoreError> {
        self.opt_text(idx, column)?
            .ok_or_else(|| corrupt(self.key, format!("column {column} is NULL")))
    }

    pub fn int(&self, idx: usize, column: &str) -> Result<i64, StoreError> {
        self.opt_int(idx, column)?
            .ok_or_else(|| corrupt(self.key, format!("column {column} is NULL")))
    }

    /// Applies one of `reaper-sql`'s decoding rules, naming this row when it refuses.
    pub fn rule<T>(&self, decoded: Result<T, String>) -> Result<T, StoreError> {
        decoded.map_err(|reason| corrupt(self.key, reason))
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    fn check<T: std::fmt::Debug>(
        sql: &str,
        read: impl Fn(&Cells<'_, '_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = Connection::open_in_memory().unwrap();
        conn.query_row(sql, [], |row| Ok(read(&Cells { row, key: "run-1" })))
            .unwrap()
    }

    fn reason<T: std::fmt::Debug>(r: Result<T, StoreError>) -> String {
        match r {
            Err(StoreError::Corrupt { key, reason }) => {
                assert_eq!(key, "run-1");
                reason
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_integer_column_refuses_reals_texts_and_blobs() {
        assert_eq!(check("SELECT 7", |c| c.int(0, "n")).unwrap(), 7);
        assert!(reason(check("SELECT 1.5", |c| c.int(0, "n"))).contains("real number 1.5"));
        assert!(reason(check("SELECT 'soon'", |c| c.int(0, "n"))).contains("\"soon\""));
        assert!(reason(check("SELECT x'00'", |c| c.int(0, "n"))).contains("blob of 1 bytes"));
        assert!(reason(check("SELECT NULL", |c| c.int(0, "n"))).contains("n is NULL"));
    }

    #[test]
    fn a_text_column_refuses_numbers_blobs_and_invalid_utf8() {
        assert_eq!(check("SELECT 'a'", |c| c.text(0, "t")).unwrap(), "a");
        assert!(reason(check("SELECT 3", |c| c.text(0, "t"))).contains("integer 3"));
        assert!(reason(check("SELECT x'ff'", |c| c.text(0, "t"))).contains("blob"));
        let bad = reason(check("SELECT CAST(x'ff' AS TEXT)", |c| c.text(0, "t")));
        assert!(bad.contains("not UTF-8"), "{bad}");
    }
}
