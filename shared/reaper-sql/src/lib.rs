//! The SQL that `reaper-sqlite` (rusqlite, native) and `reaper-d1` (Cloudflare D1, wasm32) share:
//! the versioned schema and its migrations, the table and column names, the statement texts
//! both backends run verbatim, and the decoding rules for stored values that do not depend on
//! the driver. `shared/reaper-sqlite/SCHEMA.md` documents the contract this crate spells.
//!
//! Binding parameters, reading rows and grouping statements into a transaction (rusqlite) or a
//! batch (D1) stay in each backend. Decoding rules return the reason a stored value is corrupt
//! as a `String`; the backend turns it into its `StoreError::Corrupt` naming the row.
//!
//! Invariants:
//! - The migration statements are stored verbatim in `sqlite_master`: a released statement is
//!   never edited, not even its whitespace (`tests/v1_as_stored.sql` pins version 1).
//! - A statement here is spelled once for both backends; parameters are positional (`?1`, …),
//!   and every expression column has an alias, since D1 returns rows keyed by column name.
#![warn(missing_docs)]

#[cfg(feature = "crash-points")]
pub mod crash;
pub mod detached;
pub mod history;
pub mod leases;
pub mod logs;
pub mod reclaim_intents;
pub mod runs;
pub mod sandbox_instances;
pub mod schema;
pub mod sweeps;
pub mod transcripts;

pub use logs::{RetentionReport, DEFAULT_EVENT_RETENTION_MS};
pub use schema::{
    d1_damaged, d1_damaged_in_use, damaged, damaged_in_use, Migration, BASELINE, DAMAGED_KEY,
    MIGRATIONS, SCHEMA_TABLE, SCHEMA_VERSION,
};
