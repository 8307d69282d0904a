//! Reading typed columns out of a D1 row. D1 hands integers over as JS numbers, so an integer
//! may arrive as a float with no fraction; anything else of the wrong type is corrupt, named by
//! its row.

use reaper_core::StoreError;
use serde_json::Value;

use crate::client::Row;

pub(crate) fn corrupt(key: impl Into<String>, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        key: key.into(),
        reason: reason.into(),
    }
}

fn as_int(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() <= i64::MAX as f64)
            .map(|f| f as i64)
    })
}

pub(crate) trait RowExt {
    fn opt_text(&self, column: &str, key: &str) -> Result<Option<String>, StoreError>;
    fn opt_int(&self, column: &str, key: &str) -> Result<Option<i64>, StoreError>;

    fn text(&self, column: &str, key: &str) -> Result<String, StoreError> {
        self.opt_text(column, key)?
            .ok_or_else(|| corrupt(key, format!("column {column} is NULL")))
    }

    fn int(&self, column: &str, key: &str) -> Result<i64, StoreError> {
        self.opt_int(column, key)?
            .ok_or_else(|| corrupt(key, format!("column {column} is NULL")))
    }
}

impl RowExt for Row {
    fn opt_text(&self, column: &str, key: &str) -> Result<Option<String>, StoreError> {
        match self.get(column) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(corrupt(
                key,
                format!("column {column} is {other}, expected text"),
            )),
        }
    }

    fn opt_int(&self, column: &str, key: &str) -> Result<Option<i64>, StoreError> {
        match self.get(column) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => as_int(v).map(Some).ok_or_else(|| {
                corrupt(key, format!("column {column} is {v}, expected an integer"))
            }),
        }
    }
}

/// Clamps an integer into the range D1 carries exactly (see
/// [`crate::client::MAX_SAFE_INTEGER`]): for limits, cutoffs and expiries, where the clamped
/// value means the same thing.
pub(crate) fn safe(v: i64) -> i64 {
    v.clamp(
        -crate::client::MAX_SAFE_INTEGER,
        crate::client::MAX_SAFE_INTEGER,
    )
}

pub(crate) fn safe_u(v: u64) -> i64 {
    safe(i64::try_from(v).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Row {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn an_integer_sent_as_a_whole_float_reads_as_that_integer() {
        let r = row(json!({"a": 5.0, "b": 7, "c": null}));
        assert_eq!(r.int("a", "k").unwrap(), 5);
        assert_eq!(r.int("b", "k").unwrap(), 7);
        assert_eq!(r.opt_int("c", "k").unwrap(), None);
    }

    #[test]
    fn a_fractional_or_textual_integer_column_is_corrupt_and_names_its_row() {
        let r = row(json!({"a": 5.5, "b": "7"}));
        for col in ["a", "b"] {
            match r.int(col, "run-1") {
                Err(StoreError::Corrupt { key, reason }) => {
                    assert_eq!(key, "run-1");
                    assert!(reason.contains(col), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn clamped_values_stay_within_what_a_js_number_carries() {
        assert_eq!(safe_u(u64::MAX), (1 << 53) - 1);
        assert_eq!(safe(i64::MIN), -((1 << 53) - 1));
        assert_eq!(safe(42), 42);
    }
}
