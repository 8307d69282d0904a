//! The last-sweep mark: a summary each sweep leaves for a status read on a platform without a
//! heartbeat (Vercel). It is a row of `lease_notes` under a key no lease ever takes, so it needs
//! no table of its own; the body is the caller's JSON, opaque here.

use reaper_core::StoreError;

use crate::{Conn, PostgresStore};

/// The `lease_notes` key of the mark, beside the sweep lease's `reaper:sweep`; never a lease key.
pub const LAST_SWEEP_KEY: &str = "reaper:last-sweep";

/// Replaces the mark unless the stored one finished later (overlapping invocations finish in any
/// order): one conditional upsert.
const RECORD: &str = "INSERT INTO @.lease_notes AS n (key, note) VALUES ($1, $2) \
                      ON CONFLICT (key) DO UPDATE SET note = excluded.note \
                      WHERE (n.note::json ->> 'finishedAt')::bigint < $3 \
                      RETURNING key";

const READ: &str = "SELECT note FROM @.lease_notes WHERE key = $1";

impl PostgresStore {
    /// Writes `body` (JSON with a numeric `finishedAt`) as the last-sweep mark, unless the stored
    /// mark finished after `finished_at`. `Ok(false)`: a later mark was kept.
    pub async fn record_last_sweep(
        &self,
        body: &str,
        finished_at: i64,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = self
            .query_opt(
                Conn::Pooled(&client),
                RECORD,
                &[&LAST_SWEEP_KEY, &body, &finished_at],
            )
            .await?;
        Ok(row.is_some())
    }

    /// The last-sweep mark's body, or `None` when no sweep has recorded one.
    pub async fn read_last_sweep(&self) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let row = self
            .query_opt(Conn::Pooled(&client), READ, &[&LAST_SWEEP_KEY])
            .await?;
        row.map(|r| {
            r.try_get::<_, Option<String>>(0)
                .map_err(|e| StoreError::Corrupt {
                    key: LAST_SWEEP_KEY.into(),
                    reason: format!("the note is not text: {e}"),
                })
        })
        .transpose()
        .map(Option::flatten)
    }
}
