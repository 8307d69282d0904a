//! Pausing the sweeps (issue 25): an operator's mark, kept in the store every handler shares,
//! that every sweep reads before it takes its lease. A paused sweep writes nothing and touches no
//! sandbox; its report says who paused it, when and why.
//!
//! The mark is the note of the [`PAUSE_KEY`] lease, a place every store already keeps (memory,
//! SQLite, D1, PostgreSQL, DynamoDB: schema-free, and release keeps the note), so no backend
//! needs a table or a migration for it, and a handler honours it through the same
//! [`LeaseStore`] port it already sweeps with.

use serde::{Deserialize, Serialize};

use crate::domain::EpochMs;
use crate::error::StoreError;
use crate::ports::{LeaseGrant, LeaseStore};

/// The lease key whose note holds the pause mark. Taken only for the moment of the write, so two
/// operators' writes land one at a time.
pub const PAUSE_KEY: &str = "reaper:pause";

/// How long the write's lease lives: a writer that dies between acquire and release blocks the
/// next writer only this long.
const PAUSE_WRITE_LEASE_MS: u64 = 30_000;

/// The last pause or resume an operator recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseMark {
    /// Whether sweeps are paused now. A resume writes `false` (a note cannot be deleted through
    /// the port, and the resume is worth keeping for the audit).
    pub paused: bool,
    /// Who recorded it (the operator's host and user, as the caller names them).
    pub by: String,
    /// When it was recorded.
    pub at: EpochMs,
    /// Why, in the operator's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Records `mark` as the pause mark. Fails with [`StoreError::Conflict`] when another writer
/// holds the key this instant (try again), so an operator never believes a pause landed that
/// did not.
pub async fn record_pause(leases: &dyn LeaseStore, mark: &PauseMark) -> Result<(), StoreError> {
    record_pause_note(leases, PAUSE_KEY, mark).await
}

/// The pause mark, or `None` when nobody ever paused. A mark this build cannot read is
/// [`StoreError::Corrupt`].
pub async fn read_pause(leases: &dyn LeaseStore) -> Result<Option<PauseMark>, StoreError> {
    read_pause_note(leases, PAUSE_KEY).await
}

/// [`record_pause`] under `key` (the conformance suite gives each case a key of its own).
pub async fn record_pause_note<S: LeaseStore + ?Sized>(
    leases: &S,
    key: &str,
    mark: &PauseMark,
) -> Result<(), StoreError> {
    let note = serde_json::to_string(mark)
        .map_err(|e| StoreError::Backend(format!("cannot encode the pause mark: {e}")))?;
    let lease = match leases
        .acquire(key, &mark.by, mark.at, PAUSE_WRITE_LEASE_MS)
        .await?
    {
        LeaseGrant::Acquired(lease) => lease,
        LeaseGrant::Held { owner, .. } => {
            return Err(StoreError::Conflict(format!(
                "{owner} is writing the pause mark right now; try again"
            )))
        }
    };
    let written = leases.set_note(&lease, &note).await;
    if let Err(error) = leases.release(&lease).await {
        tracing::warn!(target: "reaper", %error, "releasing the pause lease failed; it expires in 30 s");
    }
    match written? {
        true => Ok(()),
        false => Err(StoreError::Conflict(
            "the pause lease was lost before the mark was written; try again".into(),
        )),
    }
}

/// [`read_pause`] under `key`.
pub async fn read_pause_note<S: LeaseStore + ?Sized>(
    leases: &S,
    key: &str,
) -> Result<Option<PauseMark>, StoreError> {
    let Some(note) = leases.note(key).await? else {
        return Ok(None);
    };
    serde_json::from_str(&note)
        .map(Some)
        .map_err(|e| StoreError::Corrupt {
            key: key.into(),
            reason: format!("the pause mark does not parse: {e}"),
        })
}
