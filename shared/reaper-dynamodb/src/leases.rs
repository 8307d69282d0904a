//! [`LeaseStore`] on lease items (`pk = LEASE#<key>`, `sk = LEASE`): conditional puts with an
//! owner, a per-grant token and an expiry.

use aws_sdk_dynamodb::types::{
    ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
};
use reaper_core::{EpochMs, Lease, LeaseGrant, LeaseStore, StoreError};

use crate::layout::{key, lease, lease_pk, n, s, Item, Reader, ENTITY, LEASE_SK, PK, TTL};
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
}
