//! Clocks that read no system time: a manual clock for tests and for callers that already hold
//! "now" (a Worker's `Date.now()`, a Lambda context).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::domain::EpochMs;
use crate::ports::Clock;

/// A clock that only moves when told to. Clones share the same instant.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock showing `now`.
    pub fn new(now: EpochMs) -> Self {
        ManualClock(Arc::new(AtomicI64::new(now)))
    }

    /// Moves the clock to `now`.
    pub fn set(&self, now: EpochMs) {
        self.0.store(now, Ordering::SeqCst);
    }

    /// Moves the clock by `ms` (backwards when negative).
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> EpochMs {
        self.0.load(Ordering::SeqCst)
    }
}
