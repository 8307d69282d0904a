//! The native runtime adapters for the core's time ports: the system clock and tokio's timer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reaper_core::{Clock, EpochMs, Sleeper};

/// Reads the wall clock. A clock set before 1970 reads as 0 rather than panicking.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> EpochMs {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| EpochMs::try_from(d.as_millis()).unwrap_or(EpochMs::MAX))
            .unwrap_or(0)
    }
}

/// Sleeps on tokio's timer (so tests under `tokio::time::pause` run on virtual time).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

#[async_trait::async_trait]
impl Sleeper for TokioSleeper {
    async fn sleep(&self, ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}
