//! Every reaper store port on Cloudflare D1: runs, leases, delivery logs, sandbox instances and
//! transcripts, in the same tables, columns and versioning as `reaper-sqlite`, so an application
//! keeps one table layout across an embedded SQLite file and D1.
//!
//! The store speaks SQL through [`SqlClient`], one method that runs a batch atomically. A Worker
//! implements it over `worker::D1Database` (see `handlers/reaper-cloudflare`); the native tests
//! implement it over an SQLite connection, so this crate has no `worker` dependency and its SQL
//! is checked natively and, through the Worker's test route, inside workerd.
//!
//! Invariants:
//! - Every read-modify-write is a single statement or a single batch: D1 has no `BEGIN`, and a
//!   batch is its only transaction. Conditions (the epoch fence, a closed log, an unexpired
//!   lease) are in the SQL itself, never checked in Rust between two round trips.
//! - Integers are bound within `±(2^53 - 1)`: D1 returns numbers as JS doubles.
//! - A row that does not decode (an unknown status above all) is `StoreError::Corrupt` naming
//!   it, never read as something else.
#![warn(missing_docs)]

mod client;
mod history;
mod instances;
mod leases;
mod ledger;
mod log;
mod row;
mod runs;
pub mod schema;

use std::sync::Arc;

use reaper_core::StoreError;

pub use client::{classify_d1_error, Row, SqlClient, SqlValue, Statement, MAX_SAFE_INTEGER};
pub use log::DEFAULT_RETENTION_ROUND_TRIPS;
pub use reaper_sql::logs::{RetentionReport, DEFAULT_EVENT_RETENTION_MS};
pub use reaper_sql::DAMAGED_KEY;
pub use runs::MAX_UNLISTABLE_REPORTED;
pub use schema::{Found, SCHEMA_VERSION};

/// Whether `e` says the database itself is damaged (a table or column of the schema missing,
/// `reaper_schema` without a version, or a malformed page): no retry helps, the database must
/// be restored or repaired, and the message says how. A malformed row is not this: it is a
/// `Corrupt` naming the row, and every other row still reads. The same test as
/// `reaper_sqlite::is_damaged`.
pub fn is_damaged(e: &StoreError) -> bool {
    matches!(e, StoreError::Corrupt { key, .. } if key == DAMAGED_KEY)
}

/// Why a database cannot be used as a reaper store.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error(
        "the D1 database holds tables named like the reaper's ({}) and no reaper_schema \
         table: they belong to another application, so nothing was written; bind the database \
         the reaper uses, or one without those tables",
        .tables.join(", ")
    )]
    /// Tables named like the reaper's and no `reaper_schema`: nothing was written to it.
    Foreign {
        /// The clashing tables.
        tables: Vec<String>,
    },
    #[error(
        "the D1 database is at reaper schema version {found}, newer than this build's \
         {supported}: deploy a newer reaper"
    )]
    /// A newer reaper's database: this build would not know its tables.
    TooNew {
        /// The version `reaper_schema` records.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// Ours, but a table or column its version has is missing, or `reaper_schema` records no
    /// version. Nothing was written to it.
    #[error("{}", reaper_sql::d1_damaged(.reason))]
    Damaged {
        /// What is missing or wrong.
        reason: String,
    },
    /// D1 itself failed while the schema was read or migrated.
    #[error("opening the D1 store failed: {0}")]
    Store(#[from] StoreError),
}

impl OpenError {
    /// Whether the database is damaged, found by the shape check or by a statement SQLite
    /// answered with a malformed page (see [`is_damaged`]).
    pub fn is_damaged(&self) -> bool {
        match self {
            OpenError::Damaged { .. } => true,
            OpenError::Store(e) => is_damaged(e),
            _ => false,
        }
    }
}

impl From<OpenError> for StoreError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::Store(e) => e,
            e @ OpenError::Damaged { .. } => StoreError::Corrupt {
                key: DAMAGED_KEY.into(),
                reason: e.to_string(),
            },
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// Every store port over one D1 database. Cheap to clone.
#[derive(Clone)]
pub struct D1Store {
    client: Arc<dyn SqlClient>,
}

impl std::fmt::Debug for D1Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("D1Store").finish_non_exhaustive()
    }
}

impl D1Store {
    /// Opens the store, applying any pending migration in one batch; the reaper's tables go
    /// beside an application's own. A database with tables named like the reaper's but no
    /// `reaper_schema`, one at a newer schema version, or a damaged one (a table
    /// or column missing, no version row) is refused before anything is written to it. Two Workers migrating at once both succeed: the loser's batch
    /// fails as a whole and it finds the schema current.
    pub async fn open(client: Arc<dyn SqlClient>) -> Result<Self, OpenError> {
        let from = match schema::inspect(client.as_ref()).await? {
            Found::Reaper(v) if v == SCHEMA_VERSION => return Ok(D1Store { client }),
            Found::Reaper(v) if v > SCHEMA_VERSION => {
                return Err(OpenError::TooNew {
                    found: v,
                    supported: SCHEMA_VERSION,
                })
            }
            Found::Reaper(v) => v,
            Found::Empty => 0,
            Found::Foreign(tables) => return Err(OpenError::Foreign { tables }),
            Found::Damaged(reason) => return Err(OpenError::Damaged { reason }),
        };
        if let Err(e) = client.batch(schema::migration_statements(from)).await {
            match schema::inspect(client.as_ref()).await? {
                Found::Reaper(v) if v == SCHEMA_VERSION => {}
                Found::Damaged(reason) => return Err(OpenError::Damaged { reason }),
                _ => return Err(e.into()),
            }
        }
        Ok(D1Store { client })
    }

    /// Opens the store for a periodic caller (the Worker's alarm): one statement reading only
    /// the recorded version, one row read, and when it is [`SCHEMA_VERSION`] the store is used
    /// as is. Anything else (no `reaper_schema`, an older or newer version, an error) falls back
    /// to [`D1Store::open`]'s full check and migration. The full shape check reads every
    /// table's columns (143 rows on a version 6 database, D1 bills rows read); a table or
    /// column lost after the last full check is still met as damage by the first statement
    /// that needs it ([`is_damaged`]), before any terminal write depends on it.
    pub async fn open_current(client: Arc<dyn SqlClient>) -> Result<Self, OpenError> {
        let version = client
            .batch(vec![Statement::new(
                reaper_sql::schema::CURRENT_VERSION,
                vec![],
            )])
            .await
            .ok()
            .and_then(|mut out| out.pop())
            .and_then(|mut rows| rows.pop())
            .and_then(|row| {
                use crate::row::RowExt;
                row.opt_int("version", reaper_sql::SCHEMA_TABLE)
                    .ok()
                    .flatten()
            });
        if version == Some(i64::from(SCHEMA_VERSION)) {
            return Ok(D1Store { client });
        }
        Self::open(client).await
    }

    /// Wraps a database known to be at [`SCHEMA_VERSION`] without checking (one round trip
    /// less per invocation once a deployment has migrated).
    pub fn assume_current(client: Arc<dyn SqlClient>) -> Self {
        D1Store { client }
    }

    pub(crate) async fn one(&self, statement: Statement) -> Result<Vec<Row>, StoreError> {
        Ok(self
            .client
            .batch(vec![statement])
            .await?
            .pop()
            .unwrap_or_default())
    }

    /// Runs a statement fenced on `fence` in its own SQL (a NULL fence never refuses), with a
    /// read of the run's epoch in the same batch, so the answer says whether the fence refused
    /// it: an epoch past the held one means the statement wrote nothing.
    pub(crate) async fn fenced(
        &self,
        write: Statement,
        run_id: &str,
        fence: Option<u64>,
    ) -> Result<reaper_core::Fenced<()>, StoreError> {
        let Some(held) = fence else {
            self.one(write).await?;
            return Ok(reaper_core::Fenced::Written(()));
        };
        let epoch = Statement::new(reaper_sql::runs::EPOCH_BY_ID, vec![run_id.into()]);
        let out = self.batch(vec![write, epoch]).await?;
        let observed = match out[1].first() {
            Some(row) => {
                use crate::row::RowExt;
                reaper_sql::runs::driver_epoch(row.opt_int("driver_epoch", run_id)?)
                    .map_err(|reason| crate::row::corrupt(run_id, reason))?
            }
            None => None,
        };
        Ok(match observed.filter(|o| *o > held) {
            Some(observed) => reaper_core::Fenced::Superseded { observed },
            None => reaper_core::Fenced::Written(()),
        })
    }

    pub(crate) async fn batch(
        &self,
        statements: Vec<Statement>,
    ) -> Result<Vec<Vec<Row>>, StoreError> {
        let n = statements.len();
        let out = self.client.batch(statements).await?;
        if out.len() != n {
            return Err(StoreError::Backend(format!(
                "d1 batch of {n} statements returned {} results",
                out.len()
            )));
        }
        Ok(out)
    }
}
