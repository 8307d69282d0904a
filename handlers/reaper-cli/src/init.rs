//! `reaper init` and `reaper schema --sql`: the reaper's tables in a database the operator
//! chooses, created by the reaper or by the application's own migration tool.

use std::io::Write;

use reaper_postgres::PostgresStore;
use reaper_sqlite::{Initialised, SqliteStore, SCHEMA_VERSION};

use crate::config::{Dialect, InitCmd, SchemaCmd};
use crate::wiring::{self, Target};
use crate::{Exit, Failure};

/// Creates or migrates the reaper's tables and says what it did.
pub async fn run(a: &InitCmd) -> Result<Exit, Failure> {
    let (database, done) = match wiring::target(&a.db) {
        Target::Sqlite(path) => {
            if path.is_dir() {
                return Err(Failure::cannot_run(format!(
                    "{} is a directory: point --db at the SQLite file to create or initialise",
                    path.display()
                )));
            }
            // A new file only needs a writable directory, which SQLite reports itself.
            if path.exists() {
                wiring::check_writable(path)?;
            }
            let (_, done) = SqliteStore::init(path)
                .map_err(|e| Failure::cannot_run(format!("cannot initialise the database: {e}")))?;
            (path.display().to_string(), done)
        }
        Target::Postgres(url) => {
            let options = wiring::postgres_options(url);
            let schema = options.schema.clone();
            // Opening read-write creates the schema or migrates it; the read-only open first
            // tells the three cases apart for the report.
            let before = PostgresStore::open_read_only(options.clone()).await;
            let store = PostgresStore::open(options)
                .await
                .map_err(wiring::postgres_failure)?;
            let done = match before {
                Ok(_) => Initialised::Current,
                Err(reaper_postgres::OpenError::NeedsMigration { found: 0, .. }) => {
                    Initialised::Created { beside: Vec::new() }
                }
                Err(reaper_postgres::OpenError::NeedsMigration { found, .. }) => {
                    Initialised::Migrated { from: found }
                }
                Err(_) => Initialised::Created { beside: Vec::new() },
            };
            (format!("{} (schema {schema})", store.target()), done)
        }
    };
    if a.output.json {
        let (action, extra) = match &done {
            Initialised::Created { beside } => ("created", serde_json::json!({ "beside": beside })),
            Initialised::Migrated { from } => ("migrated", serde_json::json!({ "from": from })),
            Initialised::Current => ("current", serde_json::json!({})),
        };
        let mut out = serde_json::json!({
            "database": database,
            "schemaVersion": SCHEMA_VERSION,
            "action": action,
        });
        if let (Some(o), Some(e)) = (out.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        println!("{out}");
    } else {
        match &done {
            Initialised::Created { beside } if beside.is_empty() => {
                println!(
                    "created the reaper's tables (schema version {SCHEMA_VERSION}) in {database}"
                )
            }
            Initialised::Created { beside } => println!(
                "created the reaper's tables (schema version {SCHEMA_VERSION}) in {database}, \
                 beside the application's tables {} (left as they were)",
                beside.join(", ")
            ),
            Initialised::Migrated { from } => println!(
                "migrated the reaper's tables in {database} from schema version {from} to \
                 {SCHEMA_VERSION}"
            ),
            Initialised::Current => println!(
                "the reaper's tables in {database} are current (schema version {SCHEMA_VERSION}); \
                 nothing to do"
            ),
        }
    }
    Ok(Exit::Ok)
}

/// The DDL `reaper schema --sql` prints.
pub fn schema_script(a: &SchemaCmd) -> Result<String, Failure> {
    match a.dialect {
        Dialect::Sqlite => Ok(reaper_sqlite::schema_script()),
        Dialect::Postgres => reaper_postgres::schema_script(&a.postgres_schema)
            .map_err(|e| Failure::usage(format!("--postgres-schema: {e}"))),
    }
}

/// Writes the script to stdout; a closed pipe is not an error worth a panic.
pub fn print(sql: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(sql.as_bytes())?;
    out.flush()
}
