//! Opening and migrating a file to the schema `reaper-sql` spells (shared with `reaper-d1`).
//! `SCHEMA.md` beside this crate documents it for the applications that write into the same
//! file; the two must change together.

use reaper_sql::schema::TABLES;
use reaper_sql::schema::{
    pending, recorded_version, shape_at, shape_problem, CURRENT_VERSION, RECORD_MIGRATION,
    TABLE_COLUMNS,
};
use reaper_sql::SCHEMA_TABLE;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

pub use reaper_sql::SCHEMA_VERSION;

/// What a file holds, decided before anything is written to it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No tables at all: a new file, or an empty database.
    Empty,
    /// A reaper database at this version, every table of it in shape.
    Reaper(u32),
    /// An application's tables and none of the reaper's: `init` may add the reaper's beside
    /// them. Its table names.
    AppOnly(Vec<String>),
    /// Tables named like the reaper's but without its schema table: not ours, and ours cannot
    /// be added beside them. The clashing names.
    Foreign(Vec<String>),
    /// Ours (it has `reaper_schema`), but damaged: the reason.
    Damaged(String),
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(TABLE_COLUMNS)?;
    let names = stmt.query_map([table], |r| r.get::<_, String>(0))?;
    names.collect()
}

/// Reads what the file holds without writing to it. A reaper database is checked against the
/// shape its version gives each table, so a missing table or column is reported once, here,
/// as damage, instead of as "no such column" from some later query.
pub(crate) fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )?;
    let tables = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    if !tables.iter().any(|t| t == SCHEMA_TABLE) {
        let clashing: Vec<String> = tables
            .iter()
            .filter(|t| TABLES.contains(&t.as_str()))
            .cloned()
            .collect();
        return Ok(if clashing.is_empty() {
            Found::AppOnly(tables)
        } else {
            Found::Foreign(clashing)
        });
    }
    // The version table first: without its columns there is no version to read.
    for (table, expected) in shape_at(1).filter(|(t, _)| *t == SCHEMA_TABLE) {
        if let Some(problem) = shape_problem(table, expected, &columns(conn, table)?) {
            return Ok(Found::Damaged(problem));
        }
    }
    // `version` is the INTEGER PRIMARY KEY, so MAX is an integer or NULL (no row).
    let max: Option<i64> = conn
        .query_row(CURRENT_VERSION, [], |r| r.get(0))
        .optional()?
        .flatten();
    let version = match recorded_version(max) {
        Ok(v) => v,
        Err(problem) => return Ok(Found::Damaged(problem)),
    };
    if version > SCHEMA_VERSION {
        // A newer schema is refused as such; its shape is not ours to judge.
        return Ok(Found::Reaper(version));
    }
    for (table, expected) in shape_at(version) {
        if let Some(problem) = shape_problem(table, expected, &columns(conn, table)?) {
            return Ok(Found::Damaged(format!(
                "{problem}, but reaper_schema says version {version}"
            )));
        }
    }
    Ok(Found::Reaper(version))
}

/// Brings the database to [`SCHEMA_VERSION`] in one immediate transaction. Re-inspects inside the
/// transaction, so two processes opening a new file at once apply each migration exactly once.
/// `beside_app`: create the tables in a database that holds only an application's tables (an
/// explicit `init`; a plain open never writes into someone else's database).
pub(crate) fn migrate(conn: &mut Connection, beside_app: bool) -> rusqlite::Result<Found> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let from = match inspect(&tx)? {
        Found::Empty => 0,
        Found::AppOnly(_) if beside_app => 0,
        Found::Reaper(v) if v < SCHEMA_VERSION => v,
        other => return Ok(other),
    };
    for migration in pending(from) {
        for sql in migration.statements {
            tx.execute(sql, [])?;
        }
        tx.execute(
            RECORD_MIGRATION,
            rusqlite::params![migration.version, migration.description],
        )?;
    }
    tx.commit()?;
    #[cfg(feature = "crash-points")]
    reaper_sql::crash::commit_point();
    Ok(Found::Reaper(SCHEMA_VERSION))
}

/// The whole schema as one SQL script for an application's own migration tool: what a new
/// database takes (the baseline and any migration after it) and each `reaper_schema` row, in
/// one transaction, so a database it ran on opens as current.
pub fn schema_script() -> String {
    let mut out = String::from("BEGIN;\n");
    for m in pending(0) {
        out.push_str(&format!("-- version {}: {}\n", m.version, m.description));
        for sql in m.statements {
            out.push_str(sql.trim_end());
            out.push_str(";\n");
        }
        out.push_str(&format!(
            "INSERT INTO {SCHEMA_TABLE} (version, description) VALUES ({}, '{}');\n",
            m.version,
            m.description.replace('\'', "''")
        ));
    }
    out.push_str("COMMIT;\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_stores_each_migration_statement_verbatim() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, false).unwrap();
        let mut stmt = conn
            .prepare("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid")
            .unwrap();
        let stored: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        // Every statement in order, less the objects a later one dropped.
        let mut ours: Vec<&str> = Vec::new();
        for sql in reaper_sql::schema::fresh_statements() {
            match sql.strip_prefix("DROP INDEX ") {
                Some(name) => {
                    let create = format!("CREATE INDEX {name} ");
                    ours.retain(|s| !s.starts_with(&create));
                }
                None => ours.push(sql),
            }
        }
        assert_eq!(stored, ours);
    }
}
