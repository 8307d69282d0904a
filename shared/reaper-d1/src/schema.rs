//! Opening and migrating a database to the schema `reaper-sql` spells, statement for statement
//! the one `reaper-sqlite` writes (a native test compares the two databases' `sqlite_master`), so
//! an application keeps one table layout whether its runs live in an SQLite file or in D1.
//!
//! D1 has no `PRAGMA user_version` an application may set and no `BEGIN`: the version lives in
//! `reaper_schema`, and each migration is one batch (one transaction) with its version row.

use reaper_core::StoreError;
use reaper_sql::schema::{
    pending, recorded_version, shape_at, shape_problem, BASELINE, CURRENT_VERSION,
    RECORD_MIGRATION, TABLES, TABLE_COLUMNS,
};
use reaper_sql::SCHEMA_TABLE;

use crate::client::{Row, SqlClient, Statement};
use crate::row::RowExt;

pub use reaper_sql::SCHEMA_VERSION;

/// What a database holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Found {
    /// None of the reaper's tables (an application's own may be there): the store creates them.
    Empty,
    /// A reaper database at this version, every table of it in shape.
    Reaper(u32),
    /// Tables named like the reaper's, but no `reaper_schema`: another application's. The
    /// clashing names.
    Foreign(Vec<String>),
    /// Ours (it has `reaper_schema`), but damaged: a table or column its version has is
    /// missing, or `reaper_schema` records no version. The reason.
    Damaged(String),
}

/// Tables D1 and wrangler keep in every database (`_cf_KV`, `_cf_METADATA`, `d1_migrations`):
/// they do not make a database someone else's.
fn is_platform_table(name: &str) -> bool {
    name.starts_with("sqlite_") || name.starts_with("_cf_") || name == "d1_migrations"
}

fn names(rows: &[Row], what: &str) -> Result<Vec<String>, StoreError> {
    rows.iter().map(|row| row.text("name", what)).collect()
}

/// Reads what the database holds without writing to it, in two round trips: the table list and
/// every reaper table's columns in one batch (D1 allows `pragma_table_info` with a bound table
/// name, which answers no rows for a missing table), then the version. A reaper database is
/// checked against the shape its version gives each table, so a missing table or column is
/// reported once, here, as damage, instead of as "no such column" from some later query.
pub async fn inspect(client: &dyn SqlClient) -> Result<Found, StoreError> {
    let mut statements = vec![Statement::new(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        vec![],
    )];
    statements.extend(
        TABLES
            .iter()
            .map(|table| Statement::new(TABLE_COLUMNS, vec![(*table).into()])),
    );
    let out = client.batch(statements).await?;
    if out.len() != TABLES.len() + 1 {
        return Err(StoreError::Backend(format!(
            "d1 batch of {} statements returned {} results",
            TABLES.len() + 1,
            out.len()
        )));
    }
    let tables: Vec<String> = names(&out[0], "sqlite_master")?
        .into_iter()
        .filter(|name| !is_platform_table(name))
        .collect();
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    if !tables.iter().any(|t| t == SCHEMA_TABLE) {
        // A D1 binding is chosen on purpose in wrangler.toml: the reaper's tables go beside an
        // application's own, unless one of its tables has a reaper table's name.
        let clashing: Vec<String> = tables
            .into_iter()
            .filter(|t| TABLES.contains(&t.as_str()))
            .collect();
        return Ok(if clashing.is_empty() {
            Found::Empty
        } else {
            Found::Foreign(clashing)
        });
    }
    let columns = |table: &str| -> Result<Vec<String>, StoreError> {
        let i = TABLES.iter().position(|t| *t == table).ok_or_else(|| {
            StoreError::Backend(format!("{table} is in the shape but not in TABLES"))
        })?;
        names(&out[i + 1], table)
    };
    // The version table first: without its columns there is no version to read.
    for (table, expected) in shape_at(1).filter(|(t, _)| *t == SCHEMA_TABLE) {
        if let Some(problem) = shape_problem(table, expected, &columns(table)?) {
            return Ok(Found::Damaged(problem));
        }
    }
    let max = client
        .batch(vec![Statement::new(CURRENT_VERSION, vec![])])
        .await?
        .pop()
        .and_then(|mut rows| rows.pop())
        .map(|row| row.opt_int("version", SCHEMA_TABLE))
        .transpose()?
        .flatten();
    let version = match recorded_version(max) {
        Ok(v) => v,
        Err(problem) => return Ok(Found::Damaged(problem)),
    };
    if version > SCHEMA_VERSION {
        // A newer schema is refused as such; its shape is not ours to judge.
        return Ok(Found::Reaper(version));
    }
    // Before version 7 the first tables had no `reaper_` prefix: their columns are read under
    // the old names, in one more round trip that only an upgrade takes.
    let old_columns = if version < BASELINE.version {
        let shape: Vec<&str> = shape_at(version).map(|(t, _)| t).collect();
        let out = client
            .batch(
                shape
                    .iter()
                    .map(|table| Statement::new(TABLE_COLUMNS, vec![(*table).into()]))
                    .collect(),
            )
            .await?;
        if out.len() != shape.len() {
            return Err(StoreError::Backend(format!(
                "d1 batch of {} statements returned {} results",
                shape.len(),
                out.len()
            )));
        }
        shape
            .into_iter()
            .zip(out)
            .map(|(t, rows)| Ok((t, names(&rows, t)?)))
            .collect::<Result<Vec<_>, StoreError>>()?
    } else {
        Vec::new()
    };
    for (table, expected) in shape_at(version) {
        let found = match old_columns.iter().find(|(t, _)| *t == table) {
            Some((_, found)) => found.clone(),
            None => columns(table)?,
        };
        if let Some(problem) = shape_problem(table, expected, &found) {
            return Ok(Found::Damaged(format!(
                "{problem}, but reaper_schema says version {version}"
            )));
        }
    }
    Ok(Found::Reaper(version))
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
