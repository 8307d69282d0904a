//! The `leases` and `lease_notes` tables: [`LeaseStore`].

use reaper_core::{EpochMs, Lease, LeaseGrant, LeaseStore, StoreError};

use crate::{to_i64, Conn, PostgresStore};

/// Grants a free or expired key in one conditional upsert, returning the new token; returns
/// no row while someone else holds it. The token is a random UUID from the server, so a stale
/// holder's token never matches a newer grant.
const ACQUIRE: &str = "INSERT INTO @.leases AS l (key, owner, token, expires_at) \
                       VALUES ($1, $2, gen_random_uuid()::text, $3) \
                       ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, \
                       token = excluded.token, expires_at = excluded.expires_at \
                       WHERE l.expires_at <= $4 \
                       RETURNING token";

const HOLDER: &str = "SELECT owner, expires_at FROM @.leases WHERE key = $1";

const RENEW: &str = "UPDATE @.leases SET expires_at = $4 \
                     WHERE key = $1 AND owner = $2 AND token = $3 RETURNING key";

const RELEASE: &str = "DELETE FROM @.leases WHERE key = $1 AND owner = $2 AND token = $3";

const NOTE: &str = "SELECT note FROM @.lease_notes WHERE key = $1";

/// Writes the note only while the grant holds the key, in one statement: the holder's row is
/// locked (`FOR SHARE`) until the note is written, so a new grant waits for it, and a grant
/// that replaced this one makes the condition false.
const SET_NOTE: &str = "INSERT INTO @.lease_notes (key, note) \
                        SELECT $1, $4 WHERE EXISTS (SELECT 1 FROM @.leases \
                        WHERE key = $1 AND owner = $2 AND token = $3 FOR SHARE) \
                        ON CONFLICT (key) DO UPDATE SET note = excluded.note \
                        RETURNING key";

fn expiry(now: EpochMs, ttl_ms: u64) -> EpochMs {
    now.saturating_add(to_i64(ttl_ms))
}

#[async_trait::async_trait]
impl LeaseStore for PostgresStore {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        let expires_at = expiry(now, ttl_ms);
        let client = self.client().await?;
        // A holder that releases between the refused upsert and the read leaves no row to
        // report: try again (each try is a fresh snapshot, so this ends).
        for _ in 0..8 {
            let granted = self
                .query_opt(
                    Conn::Pooled(&client),
                    ACQUIRE,
                    &[&key, &owner, &expires_at, &now],
                )
                .await?;
            if let Some(row) = granted {
                self.committed(true);
                return Ok(LeaseGrant::Acquired(Lease {
                    key: key.to_string(),
                    owner: owner.to_string(),
                    token: row.get(0),
                    expires_at,
                }));
            }
            if let Some(row) = self
                .query_opt(Conn::Pooled(&client), HOLDER, &[&key])
                .await?
            {
                return Ok(LeaseGrant::Held {
                    owner: row.get(0),
                    expires_at: row.get(1),
                });
            }
        }
        Err(StoreError::Unavailable(format!(
            "lease {key} changed hands on every try; try again"
        )))
    }

    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        let mut renewed = lease.clone();
        renewed.expires_at = expiry(now, ttl_ms);
        let client = self.client().await?;
        let landed = self
            .query_opt(
                Conn::Pooled(&client),
                RENEW,
                &[
                    &renewed.key,
                    &renewed.owner,
                    &renewed.token,
                    &renewed.expires_at,
                ],
            )
            .await?
            .is_some();
        self.committed(landed);
        Ok(landed.then_some(renewed))
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let client = self.client().await?;
        let n = self
            .execute(
                Conn::Pooled(&client),
                RELEASE,
                &[&lease.key, &lease.owner, &lease.token],
            )
            .await?;
        self.committed(n > 0);
        Ok(())
    }

    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        Ok(self
            .query_opt(Conn::Pooled(&client), NOTE, &[&key])
            .await?
            .map(|r| r.get(0)))
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let landed = self
            .query_opt(
                Conn::Pooled(&client),
                SET_NOTE,
                &[&lease.key, &lease.owner, &lease.token, &note],
            )
            .await?
            .is_some();
        self.committed(landed);
        Ok(landed)
    }
}
