//! An [`SqlClient`] over an SQLite connection with D1's semantics (a batch is one transaction,
//! rows come back as JSON objects keyed by column name), so the store's SQL runs natively.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use reaper_core::StoreError;
use reaper_d1::{classify_d1_error, D1Store, Row, SqlClient, SqlValue, Statement};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Connection;
use serde_json::Value;

pub struct SqliteClient {
    conn: Mutex<Connection>,
}

impl SqliteClient {
    pub fn new(conn: Connection) -> Self {
        SqliteClient {
            conn: Mutex::new(conn),
        }
    }

    pub fn in_memory() -> Self {
        Self::new(Connection::open_in_memory().unwrap())
    }

    /// Runs raw SQL, for tests that plant rows the ports would never write.
    pub fn execute(&self, sql: &str) {
        self.conn.lock().unwrap().execute_batch(sql).unwrap();
    }
}

fn to_sql(v: &SqlValue) -> ToSqlOutput<'_> {
    match v {
        SqlValue::Null => ToSqlOutput::Borrowed(ValueRef::Null),
        SqlValue::Integer(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
        SqlValue::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
    }
}

fn err(e: rusqlite::Error) -> StoreError {
    classify_d1_error(&e.to_string())
}

fn run(conn: &mut Connection, statements: Vec<Statement>) -> rusqlite::Result<Vec<Vec<Row>>> {
    let tx = conn.transaction()?;
    let mut out = Vec::with_capacity(statements.len());
    for s in &statements {
        let mut stmt = tx.prepare(&s.sql)?;
        let names: Vec<String> = stmt.column_names().map(|n| n.to_string()).collect();
        let params: Vec<ToSqlOutput<'_>> = s.params.iter().map(to_sql).collect();
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        let mut result = Vec::new();
        while let Some(row) = rows.next()? {
            let mut map = Row::new();
            for (i, name) in names.iter().enumerate() {
                let v = match row.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::from(n),
                    ValueRef::Real(f) => Value::from(f),
                    // As a Worker sees them: text through a JS string (invalid UTF-8 already
                    // replaced), a blob as an array of byte values.
                    ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Value::from(b.to_vec()),
                };
                map.insert(name.clone(), v);
            }
            result.push(map);
        }
        out.push(result);
    }
    tx.commit()?;
    Ok(out)
}

#[async_trait::async_trait]
impl SqlClient for SqliteClient {
    async fn batch(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>, StoreError> {
        let mut conn = self.conn.lock().unwrap();
        run(&mut conn, statements).map_err(err)
    }
}

/// A migrated store on a private in-memory database, and its client.
pub async fn store() -> (D1Store, Arc<SqliteClient>) {
    let client = Arc::new(SqliteClient::in_memory());
    let store = D1Store::open(client.clone()).await.unwrap();
    (store, client)
}
