//! Opening and migrating a database to the schema `reaper-sql` spells, statement for statement
//! the one `reaper-sqlite` writes (a native test compares the two databases' `sqlite_master`), so
//! an application keeps one table layout whether its runs live in an SQLite file or in D1.
//!
//! D1 has no `PRAGMA user_version` an application may set and no `BEGIN`: the version lives in
//! `reaper_schema`, and each migration is one batch (one transaction) with its version row.

use reaper_core::StoreError;
use reaper_sql::schema::{pending, stored_version, CURRENT_VERSION, RECORD_MIGRATION};
use reaper_sql::SCHEMA_TABLE;

use crate::client::{SqlClient, Statement};
use crate::row::RowExt;

pub use reaper_sql::SCHEMA_VERSION;

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
    if !tables.iter().any(|t| t == SCHEMA_TABLE) {
        return Ok(Found::Foreign(tables));
    }
    let version = client
        .batch(vec![Statement::new(CURRENT_VERSION, vec![])])
        .await?
        .pop()
        .and_then(|mut rows| rows.pop())
        .map(|row| row.opt_int("version", SCHEMA_TABLE))
        .transpose()?
        .flatten();
    Ok(Found::Reaper(stored_version(version)))
}

/// The statements that take a database from version `from` to [`SCHEMA_VERSION`], each
/// migration followed by its version row. Exposed for `wrangler d1 execute`-style tooling and
/// for the test that compares the schema with `reaper-sqlite`'s.
pub fn migration_statements(from: u32) -> Vec<Statement> {
    let mut out = Vec::new();
    for migration in pending(from) {
        out.extend(
            migration
                .statements
                .iter()
                .map(|sql| Statement::new(*sql, vec![])),
        );
        out.push(Statement::new(
            RECORD_MIGRATION,
            vec![
                i64::from(migration.version).into(),
                migration.description.into(),
            ],
        ));
    }
    out
}
