//! The `leases` table: [`LeaseStore`].

use reaper_core::{EpochMs, Lease, LeaseGrant, LeaseStore, StoreError};
use reaper_sql::leases as sql;
use rusqlite::{params, OptionalExtension};

use crate::error::store_err;
use crate::{immediate, to_i64, SqliteStore};

fn expiry(now: EpochMs, ttl_ms: u64) -> EpochMs {
    now.saturating_add(to_i64(ttl_ms))
}

#[async_trait::async_trait]
impl LeaseStore for SqliteStore {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        let key = key.to_string();
        let owner = owner.to_string();
        let expires_at = expiry(now, ttl_ms);
        self.call(move |c| {
            immediate(c, |tx| {
                // One conditional upsert grants a free or expired key; the token is 128 random
                // bits from SQLite, so a stale holder's token never matches a newer grant.
                let token: Option<String> = tx
                    .prepare_cached(sql::ACQUIRE)
                    .and_then(|mut s| {
                        s.query_row(params![key, owner, expires_at, now], |r| r.get(0))
                            .optional()
                    })
                    .map_err(store_err)?;
                if let Some(token) = token {
                    return Ok(LeaseGrant::Acquired(Lease {
                        key,
                        owner,
                        token,
                        expires_at,
                    }));
                }
                let (owner, expires_at) = tx
                    .query_row(sql::HOLDER, [&key], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(store_err)?;
                Ok(LeaseGrant::Held { owner, expires_at })
            })
        })
        .await
    }

    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        let mut renewed = lease.clone();
        renewed.expires_at = expiry(now, ttl_ms);
        self.call(move |c| {
            // It returns the key when it landed.
            let landed = c
                .prepare_cached(sql::RENEW)
                .and_then(|mut s| {
                    s.exists(params![
                        renewed.key,
                        renewed.owner,
                        renewed.token,
                        renewed.expires_at
                    ])
                })
                .map_err(store_err)?;
            Ok(landed.then_some(renewed))
        })
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let lease = lease.clone();
        self.call(move |c| {
            c.prepare_cached(sql::RELEASE)
                .and_then(|mut s| s.execute(params![lease.key, lease.owner, lease.token]))
                .map_err(store_err)?;
            Ok(())
        })
        .await
    }

    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        let key = key.to_string();
        self.call(move |c| {
            c.prepare_cached(sql::NOTE)
                .and_then(|mut s| s.query_row([&key], |r| r.get(0)).optional())
                .map_err(store_err)
        })
        .await
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        let lease = lease.clone();
        let note = note.to_string();
        self.call(move |c| {
            // The holder check and the write are one statement: no pause between them.
            c.prepare_cached(sql::SET_NOTE)
                .and_then(|mut s| s.exists(params![lease.key, lease.owner, lease.token, note]))
                .map_err(store_err)
        })
        .await
    }
}
