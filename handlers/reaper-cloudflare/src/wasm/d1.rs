//! [`SqlClient`] over a D1 binding: one `batch()` per call, D1's only transaction.

use reaper_core::StoreError;
use reaper_d1::{classify_d1_error, Row, SqlClient, SqlValue, Statement, MAX_SAFE_INTEGER};
use wasm_bindgen::JsValue;
use worker::D1Database;

/// A D1 binding, with the alarm's subrequest meter when a sweep runs (each `batch()` is one
/// round trip; the rows each statement read, as D1 reports them, are summed too).
pub struct D1Client(
    pub D1Database,
    pub Option<std::sync::Arc<crate::meter::SubrequestMeter>>,
);

fn bind(value: &SqlValue) -> Result<JsValue, StoreError> {
    Ok(match value {
        SqlValue::Null => JsValue::NULL,
        // D1 takes numbers, not BigInts: refuse what a double would silently round.
        SqlValue::Integer(i) if i.abs() <= MAX_SAFE_INTEGER => JsValue::from_f64(*i as f64),
        SqlValue::Integer(i) => {
            return Err(StoreError::Backend(format!(
                "integer {i} is beyond what D1 carries exactly (±2^53)"
            )))
        }
        SqlValue::Text(s) => JsValue::from_str(s),
    })
}

/// D1's own sentence for a failed statement ("no such table: main.x: SQLITE_ERROR"): the
/// `worker` crate's `Display` of a D1 error is its `Debug` dump, JS stack included, which would
/// otherwise land in the sweep's report and the operator's logs.
fn message(e: &worker::Error) -> String {
    match e {
        worker::Error::D1(d1) => d1.cause(),
        other => other.to_string(),
    }
}

#[async_trait::async_trait(?Send)]
impl SqlClient for D1Client {
    async fn batch(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>, StoreError> {
        if let Some(meter) = &self.1 {
            meter.count(crate::meter::Kind::D1);
        }
        let mut prepared = Vec::with_capacity(statements.len());
        for s in &statements {
            let params = s.params.iter().map(bind).collect::<Result<Vec<_>, _>>()?;
            let stmt = self
                .0
                .prepare(s.sql.as_str())
                .bind(&params)
                .map_err(|e| classify_d1_error(&message(&e)))?;
            prepared.push(stmt);
        }
        let results = self
            .0
            .batch(prepared)
            .await
            .map_err(|e| classify_d1_error(&message(&e)))?;
        results
            .iter()
            .zip(&statements)
            .map(|(r, _s)| {
                if let Some(error) = r.error() {
                    return Err(classify_d1_error(&error));
                }
                if let (Some(meter), Ok(Some(meta))) = (&self.1, r.meta()) {
                    let rows = meta.rows_read.unwrap_or(0) as u64;
                    meter.rows_read(rows);
                    // The test build names each metered statement's rows (scale.test.mjs
                    // prints them): what D1 bills, per query.
                    #[cfg(feature = "test-hooks")]
                    tracing::info!(target: crate::logging::TARGET, sql = %_s.sql, rows_read = rows, "d1 statement");
                }
                r.results::<Row>()
                    .map_err(|e| StoreError::Backend(format!("d1 row does not decode: {e}")))
            })
            .collect()
    }
}
