//! Request accounting: how many DynamoDB requests each store operation made and the capacity
//! they consumed, so a sweep report can show what a sweep cost.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::types::ConsumedCapacity;
use serde::Serialize;

/// Counters of one store operation (or of all of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpStats {
    /// DynamoDB API calls made (SDK-internal retries of one call are not counted again).
    pub requests: u64,
    /// Calls answered with a failed condition (a cancelled transaction counts once). DynamoDB
    /// still charges write capacity for these but does not report it, so it is missing from
    /// the capacity sums below.
    pub condition_failures: u64,
    /// Calls that failed for any other reason.
    pub errors: u64,
    /// Total capacity units the service reported (`ReturnConsumedCapacity::Total`).
    pub capacity_units: f64,
    /// Read capacity units the service reported.
    pub read_capacity_units: f64,
    /// Write capacity units the service reported.
    pub write_capacity_units: f64,
}

impl OpStats {
    fn add(&mut self, other: &OpStats) {
        self.requests += other.requests;
        self.condition_failures += other.condition_failures;
        self.errors += other.errors;
        self.capacity_units += other.capacity_units;
        self.read_capacity_units += other.read_capacity_units;
        self.write_capacity_units += other.write_capacity_units;
    }
}

/// A snapshot of the store's request counters. Serializable, for the sweep report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestStats {
    /// Keyed by store operation (`list_reclaimable`, `bump_epoch`, `append`, …).
    pub by_operation: BTreeMap<String, OpStats>,
    /// Every operation together.
    pub total: OpStats,
    /// Items a listing skipped because they did not parse: runs in `list_reclaimable` (each
    /// also returned in the listing's `corrupt`) and reclaim-ledger entries in `due_intents`.
    /// Each was logged at error level naming it.
    pub corrupt_items_skipped: u64,
}

impl RequestStats {
    /// The counters of one operation (zero when it never ran).
    pub fn op(&self, name: &str) -> OpStats {
        self.by_operation.get(name).copied().unwrap_or_default()
    }
}

/// How a call ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    ConditionFailed,
    Error,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    inner: Mutex<RequestStats>,
}

impl Counters {
    fn lock(&self) -> std::sync::MutexGuard<'_, RequestStats> {
        // Counters are plain numbers: a poisoned guard still holds consistent values.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn record<'a>(
        &self,
        op: &str,
        outcome: Outcome,
        consumed: impl IntoIterator<Item = &'a ConsumedCapacity>,
    ) {
        let mut delta = OpStats {
            requests: 1,
            ..OpStats::default()
        };
        match outcome {
            Outcome::Ok => {}
            Outcome::ConditionFailed => delta.condition_failures = 1,
            Outcome::Error => delta.errors = 1,
        }
        for c in consumed {
            delta.capacity_units += c.capacity_units().unwrap_or_default();
            delta.read_capacity_units += c.read_capacity_units().unwrap_or_default();
            delta.write_capacity_units += c.write_capacity_units().unwrap_or_default();
        }
        let mut s = self.lock();
        s.by_operation
            .entry(op.to_string())
            .or_default()
            .add(&delta);
        s.total.add(&delta);
    }

    pub fn corrupt_skipped(&self, n: u64) {
        self.lock().corrupt_items_skipped += n;
    }

    pub fn snapshot(&self) -> RequestStats {
        self.lock().clone()
    }

    pub fn take(&self) -> RequestStats {
        std::mem::take(&mut *self.lock())
    }
}
