//! Errors: why a database was refused at open, and how a statement's failure maps onto the
//! ports' [`StoreError`].

use reaper_core::StoreError;

/// The key of a [`StoreError::Corrupt`] about the whole schema rather than one row, as the SQL
/// stores use it.
pub const DAMAGED_KEY: &str = "database";

/// Why the store could not be opened. Each message says what was found and what to do; nothing
/// was written when a schema is refused.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    InvalidOptions(String),
    #[error(
        "refusing to connect to {target} without TLS: a host other than this machine is reached \
         over TLS only, so the password never crosses the network in clear. Remove \
         sslmode=disable from the URL (hosted databases such as Neon, Supabase and RDS all \
         accept TLS)"
    )]
    TlsRequired { target: String },
    #[error("cannot use the database {target}: {message}")]
    Database { target: String, message: String },
    #[error(
        "schema {schema} of {target} is not the reaper's: it holds {} but no schema_migrations \
         table. The reaper changed nothing; point it at another schema (its tables live in a \
         schema of their own) or another database", tables.join(", ")
    )]
    Foreign {
        target: String,
        schema: String,
        tables: Vec<String>,
    },
    #[error(
        "schema {schema} of {target} is damaged: {reason}. The reaper changed nothing; restore \
         it from a backup, or compare it with shared/reaper-postgres/SCHEMA.md"
    )]
    Damaged {
        target: String,
        schema: String,
        reason: String,
    },
    #[error(
        "schema {schema} of {target} is at version {found}, newer than this reaper's {supported}: \
         upgrade the reaper (nothing was changed)"
    )]
    TooNew {
        target: String,
        schema: String,
        found: u32,
        supported: u32,
    },
    #[error(
        "the reaper schema of {target} is at version {found} and this build reads {supported}: \
         run a read-write command (reaper sweep) once to migrate it"
    )]
    NeedsMigration {
        target: String,
        found: u32,
        supported: u32,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl OpenError {
    /// Whether the schema was refused as damaged (the CLI's exit code tells it apart).
    pub fn is_damaged(&self) -> bool {
        matches!(self, OpenError::Damaged { .. })
    }
}

pub(crate) fn corrupt(key: &str, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// The server's message with its SQLSTATE, or the client's.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                s.push_str(": ");
                s.push_str(&inner.to_string());
                source = inner.source();
            }
            s
        }
    }
}

/// A failed statement as a store error: a lost connection, a serialization failure, a deadlock
/// or a server shutting down is transient ([`StoreError::Unavailable`], safe to retry); a
/// missing table or column is the schema damaged under a running store, and so are corrupted
/// data or index pages (`XX001`, `XX002`); anything else is a
/// backend error with the server's message.
pub(crate) fn store_err(e: tokio_postgres::Error) -> StoreError {
    let message = describe(&e);
    let Some(db) = e.as_db_error() else {
        return StoreError::Unavailable(message);
    };
    let code = db.code().code();
    match &code[..2] {
        // connection exception, transaction rollback, insufficient resources, operator
        // intervention (shutdown)
        "08" | "40" | "53" | "57" => StoreError::Unavailable(message),
        // undefined table / column: the schema changed under the store.
        "42" if code == "42P01" || code == "42703" => StoreError::Corrupt {
            key: DAMAGED_KEY.into(),
            reason: format!(
                "the reaper schema is damaged: {message}. Restore it from a backup, or compare \
                 it with shared/reaper-postgres/SCHEMA.md"
            ),
        },
        // data_corrupted / index_corrupted: the server found the stored pages damaged.
        "XX" if code == "XX001" || code == "XX002" => StoreError::Corrupt {
            key: DAMAGED_KEY.into(),
            reason: format!(
                "the database is damaged: {message}. Restore it from a backup (or REINDEX a \
                 damaged index), then sweep again"
            ),
        },
        _ => StoreError::Backend(message),
    }
}
