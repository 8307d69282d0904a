//! Opening and migrating a file to the schema `reaper-sql` spells (shared with `reaper-d1`).
//! `SCHEMA.md` beside this crate documents it for the applications that write into the same
//! file; the two must change together.

use reaper_sql::schema::{pending, stored_version, CURRENT_VERSION, RECORD_MIGRATION};
use reaper_sql::SCHEMA_TABLE;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

pub use reaper_sql::SCHEMA_VERSION;

/// What a file holds, decided before anything is written to it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// No tables at all: a new file, or an empty database.
    Empty,
    /// A reaper database at this version.
    Reaper(u32),
    /// Tables, none of them ours.
    Foreign(Vec<String>),
}

/// Reads what the file holds without writing to it.
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
        return Ok(Found::Foreign(tables));
    }
    let version: Option<i64> = conn
        .query_row(CURRENT_VERSION, [], |r| r.get(0))
        .optional()?
        .flatten();
    Ok(Found::Reaper(stored_version(version)))
}

/// Brings the database to [`SCHEMA_VERSION`] in one immediate transaction. Re-inspects inside the
/// transaction, so two processes opening a new file at once apply each migration exactly once.
pub(crate) fn migrate(conn: &mut Connection) -> rusqlite::Result<Found> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let from = match inspect(&tx)? {
        Found::Empty => 0,
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
    Ok(Found::Reaper(SCHEMA_VERSION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_stores_each_migration_statement_verbatim() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let mut stmt = conn
            .prepare("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid")
            .unwrap();
        let stored: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let ours: Vec<&str> = reaper_sql::MIGRATIONS
            .iter()
            .flat_map(|m| m.statements.iter().copied())
            .collect();
        assert_eq!(stored, ours);
    }
}
