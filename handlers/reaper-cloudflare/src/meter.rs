//! Counts the alarm's subrequests as they happen (every `fetch` to a sandbox provider and every
//! D1 round trip) and stops the sweep from starting runs before the plan's limit, instead of
//! trusting a static per-run estimate. Plain Rust: tested natively.
//!
//! A run that already started is never cut off: the stop is checked by the core at run
//! boundaries only, so the meter stops early enough to leave every run that may still be in
//! flight its worst case, plus the sweep's own tail (lease release, ledger counts, event
//! retention).

use std::sync::atomic::{AtomicU64, Ordering};

use reaper_core::CancellationToken;
use serde::Serialize;

/// What kind of subrequest: the runtime limits external `fetch`es and calls to Cloudflare
/// services (D1) separately on the Free plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fetch,
    D1,
}

/// The counts one alarm made, part of its stored report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Used {
    pub fetch: u64,
    pub d1: u64,
    /// Rows D1 says those round trips read (its `meta.rows_read`): what D1 bills.
    pub d1_rows_read: u64,
    /// Whether the meter stopped the sweep from starting more runs.
    pub stopped: bool,
}

/// The counter and the stop it raises. Shared by the counting transport and the counting D1
/// client of one alarm.
#[derive(Debug)]
pub struct SubrequestMeter {
    fetch: AtomicU64,
    d1: AtomicU64,
    d1_rows_read: AtomicU64,
    /// Stop starting runs once this many subrequests were made; `None` counts only.
    stop_at: Option<u64>,
    stop: CancellationToken,
}

impl SubrequestMeter {
    pub fn new(stop_at: Option<u64>) -> Self {
        SubrequestMeter {
            fetch: AtomicU64::new(0),
            d1: AtomicU64::new(0),
            d1_rows_read: AtomicU64::new(0),
            stop_at,
            stop: CancellationToken::new(),
        }
    }

    /// Records one subrequest, and raises the stop when the count reaches the threshold.
    pub fn count(&self, kind: Kind) {
        match kind {
            Kind::Fetch => self.fetch.fetch_add(1, Ordering::Relaxed),
            Kind::D1 => self.d1.fetch_add(1, Ordering::Relaxed),
        };
        if self.stop_at.is_some_and(|at| self.total() >= at) {
            self.stop.cancel();
        }
    }

    /// Records the rows one D1 round trip read. Not a subrequest: it never raises the stop.
    pub fn rows_read(&self, rows: u64) {
        self.d1_rows_read.fetch_add(rows, Ordering::Relaxed);
    }

    pub fn total(&self) -> u64 {
        self.fetch.load(Ordering::Relaxed) + self.d1.load(Ordering::Relaxed)
    }

    /// The stop the sweep checks before each run.
    pub fn stop(&self) -> &CancellationToken {
        &self.stop
    }

    pub fn used(&self) -> Used {
        Used {
            fetch: self.fetch.load(Ordering::Relaxed),
            d1: self.d1.load(Ordering::Relaxed),
            d1_rows_read: self.d1_rows_read.load(Ordering::Relaxed),
            stopped: self.stop.is_cancelled(),
        }
    }
}

/// Where the meter stops a sweep whose plan allows `limit` subrequests, `per_run` at most per
/// run, `concurrency` runs in flight and `tail` after the last run: every run that may be in
/// flight when the stop is raised still has its worst case. `None` when the limit cannot hold
/// that many runs at once: the plan then runs one run at a time without a meter stop, as the
/// static estimate did.
pub fn stop_at(limit: u64, per_run: u64, concurrency: usize, tail: u64) -> Option<u64> {
    let in_flight = per_run.saturating_mul(concurrency as u64);
    limit
        .checked_sub(tail.saturating_add(in_flight))
        .filter(|&at| at > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_raises_the_stop_when_the_count_reaches_the_threshold() {
        let meter = SubrequestMeter::new(Some(3));
        meter.count(Kind::D1);
        meter.count(Kind::Fetch);
        assert!(!meter.stop().is_cancelled());
        meter.count(Kind::D1);
        assert!(meter.stop().is_cancelled());
        assert_eq!(
            meter.used(),
            Used {
                fetch: 1,
                d1: 2,
                d1_rows_read: 0,
                stopped: true
            }
        );
    }

    #[test]
    fn rows_read_are_summed_and_never_raise_the_stop() {
        let meter = SubrequestMeter::new(Some(2));
        meter.count(Kind::D1);
        meter.rows_read(1_001);
        meter.rows_read(26);
        assert!(!meter.stop().is_cancelled());
        let used = meter.used();
        assert_eq!((used.d1, used.d1_rows_read), (1, 1_027));
        assert_eq!(
            serde_json::to_value(used).unwrap()["d1RowsRead"],
            serde_json::json!(1_027)
        );
    }

    #[test]
    fn a_meter_without_a_threshold_only_counts() {
        let meter = SubrequestMeter::new(None);
        for _ in 0..10_000 {
            meter.count(Kind::Fetch);
        }
        assert_eq!(meter.total(), 10_000);
        assert!(!meter.used().stopped);
    }

    #[test]
    fn the_stop_leaves_every_run_in_flight_its_worst_case_and_the_tail() {
        // Paid default: 10,000, 36 per run, 4 in flight, 16 after the last run.
        assert_eq!(stop_at(10_000, 36, 4, 16), Some(10_000 - 16 - 144));
        // Every run started at or before the stop may still spend its 36: the limit holds.
        let at = stop_at(1_000, 36, 4, 16).unwrap();
        assert!(at + 4 * 36 + 16 <= 1_000);
    }

    #[test]
    fn a_limit_too_small_for_the_runs_in_flight_has_no_meter_stop() {
        // Free: 50 external subrequests cannot hold four runs of 36.
        assert_eq!(stop_at(50, 36, 4, 16), None);
        assert_eq!(stop_at(52, 36, 1, 16), None);
        assert_eq!(stop_at(53, 36, 1, 16), Some(1));
    }
}
