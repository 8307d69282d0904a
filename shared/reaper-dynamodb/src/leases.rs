//! [`LeaseStore`] on lease items (`pk = LEASE#<key>`, `sk = LEASE`): conditional puts with an
//! owner, a per-grant token and an expiry. A key's note is its own item beside the lease
//! (`sk = NOTE`), written in a transaction with a condition check on the lease item, so a
//! release (which deletes the lease item) keeps it and only the holder's grant writes it.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, Put, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};
use reaper_core::{EpochMs, Lease, LeaseGrant, LeaseStore, StoreError};

use crate::error::map_cancelled;
use crate::layout::{
    key, lease, lease_pk, n, s, Item, Reader, ENTITY, LEASE_NOTE_SK, LEASE_SK, PK, TTL,
};
use crate::runs::condition_failed;
use crate::store::{fresh_token, DynamoStore};

/// Lease items stay a day past their expiry before DynamoDB's TTL deletes them: long enough
/// that no holder renews a lease TTL removed under it in practice, short enough that per-run
/// claim leases of crashed sweeps do not pile up.
const LEASE_TTL_GRACE_SECS: i64 = 24 * 3600;

fn lease_ttl(expires_at: EpochMs) -> i64 {
    expires_at
        .div_euclid(1000)
        .saturating_add(LEASE_TTL_GRACE_SECS)
}

fn lease_from_item(item: &Item, key: &str) -> Result<Lease, StoreError> {
    let r = Reader::new(item, format!("lease {key}"));
    Ok(Lease {
        key: key.to_string(),
        owner: r.str(lease::OWNER)?,
        token: r.str(lease::TOKEN)?,
        expires_at: r.num(lease::EXPIRES_AT)?,
    })
}

#[async_trait::async_trait]
impl LeaseStore for DynamoStore {
    async fn acquire(
        &self,
        key_name: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        let granted = Lease {
            key: key_name.to_string(),
            owner: owner.to_string(),
            token: fresh_token(),
            expires_at: now.saturating_add(ttl_ms.min(i64::MAX as u64) as i64),
        };
        let mut item = key(lease_pk(key_name), LEASE_SK);
        item.insert(ENTITY.into(), s("lease"));
        item.insert(lease::KEY.into(), s(key_name));
        item.insert(lease::OWNER.into(), s(owner));
        item.insert(lease::TOKEN.into(), s(&granted.token));
        item.insert(lease::EXPIRES_AT.into(), n(granted.expires_at));
        item.insert(TTL.into(), n(lease_ttl(granted.expires_at)));
        let res = self
            .client
            .put_item()
            .table_name(self.table_name())
            .set_item(Some(item))
            // Free, or expired at or before `now`. Never the TTL: deletion lags by days.
            .condition_expression("attribute_not_exists(#pk) OR #exp <= :now")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#exp", lease::EXPIRES_AT)
            .expression_attribute_values(":now", n(now))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("lease_acquire", &res);
        match res {
            Ok(_) => Ok(LeaseGrant::Acquired(granted)),
            Err(err) => match condition_failed(&err) {
                Some(Some(old)) => {
                    let held = lease_from_item(&old, key_name)?;
                    Ok(LeaseGrant::Held {
                        owner: held.owner,
                        expires_at: held.expires_at,
                    })
                }
                Some(None) => Err(StoreError::Conflict(format!(
                    "lease {key_name} is held, and the service did not say by whom"
                ))),
                None => Err(self.map_err("PutItem", err)),
            },
        }
    }

    async fn renew(
        &self,
        lease_held: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        let expires_at = now.saturating_add(ttl_ms.min(i64::MAX as u64) as i64);
        let res = self
            .client
            .update_item()
            .table_name(self.table_name())
            .set_key(Some(key(lease_pk(&lease_held.key), LEASE_SK)))
            .update_expression("SET #exp = :exp, #ttl = :ttl")
            .condition_expression("#owner = :owner AND #token = :token")
            .expression_attribute_names("#exp", lease::EXPIRES_AT)
            .expression_attribute_names("#ttl", TTL)
            .expression_attribute_names("#owner", lease::OWNER)
            .expression_attribute_names("#token", lease::TOKEN)
            .expression_attribute_values(":exp", n(expires_at))
            .expression_attribute_values(":ttl", n(lease_ttl(expires_at)))
            .expression_attribute_values(":owner", s(&lease_held.owner))
            .expression_attribute_values(":token", s(&lease_held.token))
            .return_values(ReturnValue::AllNew)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("lease_renew", &res);
        match res {
            Ok(out) => match out.attributes {
                Some(item) => Ok(Some(lease_from_item(&item, &lease_held.key)?)),
                None => Ok(Some(Lease {
                    expires_at,
                    ..lease_held.clone()
                })),
            },
            Err(err) if condition_failed(&err).is_some() => Ok(None),
            Err(err) => Err(self.map_err("UpdateItem", err)),
        }
    }

    async fn release(&self, lease_held: &Lease) -> Result<(), StoreError> {
        let res = self
            .client
            .delete_item()
            .table_name(self.table_name())
            .set_key(Some(key(lease_pk(&lease_held.key), LEASE_SK)))
            .condition_expression("#owner = :owner AND #token = :token")
            .expression_attribute_names("#owner", lease::OWNER)
            .expression_attribute_names("#token", lease::TOKEN)
            .expression_attribute_values(":owner", s(&lease_held.owner))
            .expression_attribute_values(":token", s(&lease_held.token))
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("lease_release", &res);
        match res {
            Ok(_) => Ok(()),
            // Someone else's grant now (or gone): releasing is a no-op.
            Err(err) if condition_failed(&err).is_some() => Ok(()),
            Err(err) => Err(self.map_err("DeleteItem", err)),
        }
    }

    /// A strongly consistent read of the note item.
    async fn note(&self, key_name: &str) -> Result<Option<String>, StoreError> {
        let res = self
            .client
            .get_item()
            .table_name(self.table_name())
            .set_key(Some(key(lease_pk(key_name), LEASE_NOTE_SK)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("lease_note", &res);
        res.map_err(|e| self.map_err("GetItem", e))?
            .item
            .map(|item| Reader::new(&item, format!("lease note {key_name}")).str(lease::NOTE))
            .transpose()
    }

    /// One `TransactWriteItems`: a condition check that this grant holds the lease item, and
    /// the put of the note item. Both land or neither.
    async fn set_note(&self, lease_held: &Lease, note: &str) -> Result<bool, StoreError> {
        let table = self.table_name();
        let build_err = |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::Backend(format!("building the lease note transaction: {e}"))
        };
        let held = ConditionCheck::builder()
            .table_name(table)
            .set_key(Some(key(lease_pk(&lease_held.key), LEASE_SK)))
            .condition_expression("#owner = :owner AND #token = :token")
            .expression_attribute_names("#owner", lease::OWNER)
            .expression_attribute_names("#token", lease::TOKEN)
            .expression_attribute_values(":owner", s(&lease_held.owner))
            .expression_attribute_values(":token", s(&lease_held.token))
            .build()
            .map_err(build_err)?;
        let mut item = key(lease_pk(&lease_held.key), LEASE_NOTE_SK);
        item.insert(ENTITY.into(), s("lease-note"));
        item.insert(lease::KEY.into(), s(&lease_held.key));
        item.insert(lease::NOTE.into(), s(note));
        let put = Put::builder()
            .table_name(table)
            .set_item(Some(item))
            .build()
            .map_err(build_err)?;
        let res = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().condition_check(held).build())
            .transact_items(TransactWriteItem::builder().put(put).build())
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        self.track("lease_set_note", &res);
        match res {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(ctx)) => match ctx.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => {
                    let reasons = c.cancellation_reasons();
                    if reasons.first().and_then(|r| r.code()) == Some("ConditionalCheckFailed") {
                        // The grant no longer holds the key (or the lease item is gone).
                        Ok(false)
                    } else {
                        Err(map_cancelled("TransactWriteItems", table, reasons))
                    }
                }
                _ => Err(self.map_err("TransactWriteItems", SdkError::ServiceError(ctx))),
            },
            Err(err) => Err(self.map_err("TransactWriteItems", err)),
        }
    }
}
