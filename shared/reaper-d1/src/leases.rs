//! The `leases` table: [`LeaseStore`].

use reaper_core::{EpochMs, Lease, LeaseGrant, LeaseStore, StoreError};

use reaper_sql::leases as sql;

use crate::client::Statement;
use crate::row::{safe, safe_u, RowExt};
use crate::D1Store;

fn expiry(now: EpochMs, ttl_ms: u64) -> EpochMs {
    safe(now.saturating_add(safe_u(ttl_ms)))
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl LeaseStore for D1Store {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        let expires_at = expiry(now, ttl_ms);
        // One conditional upsert grants a free or expired key; the token is 128 random bits
        // from SQLite, so a stale holder's token never matches a newer grant. The read after it
        // (same transaction) names the holder when it did not.
        let grant = Statement::new(
            sql::ACQUIRE,
            vec![
                key.into(),
                owner.into(),
                expires_at.into(),
                safe(now).into(),
            ],
        );
        let holder = Statement::new(sql::HOLDER, vec![key.into()]);
        let out = self.batch(vec![grant, holder]).await?;
        let what = format!("lease {key}");
        if let Some(row) = out[0].first() {
            return Ok(LeaseGrant::Acquired(Lease {
                key: key.to_string(),
                owner: owner.to_string(),
                token: row.text("token", &what)?,
                expires_at,
            }));
        }
        let row = out[1]
            .first()
            .ok_or_else(|| StoreError::Backend(format!("{what} was neither granted nor held")))?;
        Ok(LeaseGrant::Held {
            owner: row.text("owner", &what)?,
            expires_at: row.int("expires_at", &what)?,
        })
    }

    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        let mut renewed = lease.clone();
        renewed.expires_at = expiry(now, ttl_ms);
        let rows = self
            .one(Statement::new(
                sql::RENEW,
                vec![
                    lease.key.as_str().into(),
                    lease.owner.as_str().into(),
                    lease.token.as_str().into(),
                    renewed.expires_at.into(),
                ],
            ))
            .await?;
        Ok((!rows.is_empty()).then_some(renewed))
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.one(Statement::new(
            sql::RELEASE,
            vec![
                lease.key.as_str().into(),
                lease.owner.as_str().into(),
                lease.token.as_str().into(),
            ],
        ))
        .await?;
        Ok(())
    }

    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        let rows = self
            .one(Statement::new(sql::NOTE, vec![key.into()]))
            .await?;
        rows.first()
            .map(|row| row.text("note", &format!("lease note {key}")))
            .transpose()
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        // The holder check and the write are one statement: no pause between them.
        let rows = self
            .one(Statement::new(
                sql::SET_NOTE,
                vec![
                    lease.key.as_str().into(),
                    lease.owner.as_str().into(),
                    lease.token.as_str().into(),
                    note.into(),
                ],
            ))
            .await?;
        Ok(!rows.is_empty())
    }
}
