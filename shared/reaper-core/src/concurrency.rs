//! How many runs a sweep keeps in flight, decided while it runs: a pure state machine fed with
//! what the sweep observes (each run's start and end on the injected clock, and whether the
//! provider failed it), bounded by the platform's limits and the user's cap.
//!
//! The policy, in order:
//! - **Ceiling.** The smallest of the user's cap, the connections the platform lets the runs
//!   hold at once, the subrequests the invocation has left for runs in flight, and the provider's
//!   documented rate limit: at most `rate × latency / requests per run` runs in flight (Little's
//!   law), and starts paced `requests per run / rate` apart, so the sweep's request rate stays
//!   under the limit whatever the latency.
//! - **Slow start.** It begins at [`INITIAL_IN_FLIGHT`] and doubles after every window of
//!   successful runs (as many runs as are in flight) while the provider keeps its pace: the
//!   recent latency within twice the fastest seen plus [`LATENCY_SLACK_MS`].
//! - **Provider slowing.** A window whose recent latency went past that shrinks the size by a
//!   quarter: more in flight only queues at the provider.
//! - **Failures.** A run the provider failed (a probe error or timeout, a failed drive) halves it.
//! - **Budget.** With a deadline, the size is at least what finishes the runs left before it at
//!   the recent latency (`left × latency / time left`), within the ceiling.
//!
//! No clock is read here: every instant comes from the caller.

use serde::Serialize;

use crate::domain::EpochMs;

/// Runs in flight when a sweep starts, before any latency is known (within the ceiling).
pub const INITIAL_IN_FLIGHT: usize = 8;
/// The default user cap on runs in flight.
pub const DEFAULT_CAP: usize = 32;
/// Latency jitter tolerated before the provider counts as slowing down.
pub const LATENCY_SLACK_MS: u64 = 5;
/// Provider requests one run makes, as a default estimate: a lookup or resume, the tail read
/// (one exec), and a destroy once the run is terminal.
pub const DEFAULT_PROVIDER_REQUESTS_PER_RUN: u32 = 3;
/// The share of a provider's documented rate limit a sweep may use: the application shares the
/// same limit (the same key, often the same IP).
pub const RATE_LIMIT_SHARE_PERCENT: u32 = 50;

/// A provider's documented request rate limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimit {
    /// Which provider documents it (the strictest among the providers a sweep serves).
    pub provider: String,
    /// Requests allowed per `window_ms`.
    pub requests: u32,
    /// The window the limit counts over, in milliseconds.
    pub window_ms: u64,
}

impl RateLimit {
    /// `requests` per `window_ms` for `provider`.
    pub fn new(provider: impl Into<String>, requests: u32, window_ms: u64) -> Self {
        RateLimit {
            provider: provider.into(),
            requests,
            window_ms,
        }
    }

    /// Requests per second the sweep may send: its share of the limit, at least one every
    /// window.
    fn share_per_window(&self) -> u64 {
        (u64::from(self.requests) * u64::from(RATE_LIMIT_SHARE_PERCENT) / 100).max(1)
    }

    /// Whether this limit is stricter than `other` (fewer requests per millisecond).
    pub fn stricter_than(&self, other: &RateLimit) -> bool {
        u128::from(self.requests) * u128::from(other.window_ms)
            < u128::from(other.requests) * u128::from(self.window_ms)
    }
}

/// What the platform and the providers allow, passed by each handler.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConcurrencyLimits {
    /// Connections the runs may hold open at once (a Worker's six simultaneous connections,
    /// less what the store needs). `None`: no such limit.
    pub connections: Option<usize>,
    /// Subrequests the invocation has left for runs (a Worker's per-invocation limit, less the
    /// sweep's own), and the most one run makes: at most `left / per run` runs in flight.
    pub subrequests: Option<(u64, u64)>,
    /// The strictest documented rate limit among the providers the sweep serves.
    pub rate_limit: Option<RateLimit>,
    /// Provider requests one run makes (0: [`DEFAULT_PROVIDER_REQUESTS_PER_RUN`]).
    pub provider_requests_per_run: u32,
}

impl ConcurrencyLimits {
    fn requests_per_run(&self) -> u64 {
        match self.provider_requests_per_run {
            0 => u64::from(DEFAULT_PROVIDER_REQUESTS_PER_RUN),
            n => u64::from(n),
        }
    }
}

/// Which bound or observation set the size last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SizedBy {
    /// The starting size, before a window of runs finished.
    Start,
    /// Grown: the provider kept its pace over a whole window.
    Growing,
    /// The user's cap.
    Cap,
    /// The platform's simultaneous connections.
    Connections,
    /// The subrequests the invocation has left.
    Subrequests,
    /// The provider's documented rate limit.
    RateLimit,
    /// The provider slowed down as more runs were in flight.
    ProviderSlowing,
    /// The provider failed runs.
    Failures,
    /// Raised to finish the runs left before the deadline.
    Budget,
}

/// What the sizing chose and why: part of the sweep report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConcurrencyReport {
    /// The user's cap.
    pub cap: usize,
    /// The most runs that were in flight at once.
    pub peak: usize,
    /// The size when the sweep ended.
    pub last: usize,
    /// What set the size last.
    pub sized_by: SizedBy,
    /// The fastest run seen, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fastest_ms: Option<u64>,
    /// The recent latency (a moving average), in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent_ms: Option<u64>,
    /// Runs the provider failed.
    pub failures: usize,
    /// The rate limit the sweep kept under, when one applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// The decision as a sentence.
    pub why: String,
}

impl Default for ConcurrencyReport {
    fn default() -> Self {
        ConcurrencyReport {
            cap: 1,
            peak: 0,
            last: 1,
            sized_by: SizedBy::Start,
            fastest_ms: None,
            recent_ms: None,
            failures: 0,
            rate_limit: None,
            why: "no run was started".into(),
        }
    }
}

/// One finished run, as the sweep saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// When the run started, on the sweep's clock.
    pub started_at: EpochMs,
    /// When it finished.
    pub finished_at: EpochMs,
    /// The provider failed the run (a probe error or timeout, a failed drive or reclaim).
    pub failed: bool,
}

/// The sizing state of one sweep.
#[derive(Debug, Clone)]
pub struct Sizer {
    cap: usize,
    limits: ConcurrencyLimits,
    current: usize,
    sized_by: SizedBy,
    fastest_ms: Option<u64>,
    recent_ms: Option<u64>,
    window_done: usize,
    failures: usize,
    peak: usize,
    last_start: Option<EpochMs>,
}

impl Sizer {
    /// A sizer under the user's `cap` (at least 1) and the platform's `limits`.
    pub fn new(cap: usize, limits: ConcurrencyLimits) -> Self {
        let cap = cap.max(1);
        let mut sizer = Sizer {
            cap,
            limits,
            current: INITIAL_IN_FLIGHT,
            sized_by: SizedBy::Start,
            fastest_ms: None,
            recent_ms: None,
            window_done: 0,
            failures: 0,
            peak: 0,
            last_start: None,
        };
        sizer.clamp();
        sizer
    }

    /// The most runs in flight the limits allow now, and which limit that is.
    pub fn ceiling(&self) -> (usize, SizedBy) {
        let mut ceiling = (self.cap, SizedBy::Cap);
        let mut lower = |n: usize, by| {
            if n < ceiling.0 {
                ceiling = (n, by);
            }
        };
        if let Some(c) = self.limits.connections {
            lower(c.max(1), SizedBy::Connections);
        }
        if let Some((left, per_run)) = self.limits.subrequests {
            lower(
                usize::try_from(left / per_run.max(1))
                    .unwrap_or(usize::MAX)
                    .max(1),
                SizedBy::Subrequests,
            );
        }
        if let Some(rate) = &self.limits.rate_limit {
            // Little's law: runs in flight = run rate × latency. Until a latency is known, one.
            let latency = self.recent_ms.unwrap_or(0);
            let allowed = u128::from(rate.share_per_window()) * u128::from(latency)
                / (u128::from(rate.window_ms.max(1)) * u128::from(self.limits.requests_per_run()));
            lower(
                usize::try_from(allowed).unwrap_or(usize::MAX).max(1),
                SizedBy::RateLimit,
            );
        }
        ceiling
    }

    fn clamp(&mut self) {
        let (ceiling, by) = self.ceiling();
        if self.current >= ceiling {
            self.current = ceiling;
            self.sized_by = by;
        }
        self.current = self.current.max(1);
    }

    /// Runs to keep in flight now, with `left` runs not started yet, and the time left before
    /// the deadline (`None`: no deadline).
    pub fn in_flight(&mut self, left: usize, time_left_ms: Option<u64>) -> usize {
        if let (Some(time_left), Some(latency)) = (time_left_ms, self.recent_ms) {
            // The size that finishes the runs left before the deadline at the recent latency.
            let need =
                (left as u128 * u128::from(latency.max(1))).div_ceil(u128::from(time_left.max(1)));
            let need = usize::try_from(need).unwrap_or(usize::MAX);
            if need > self.current {
                self.current = need;
                self.sized_by = SizedBy::Budget;
                self.clamp();
            }
        }
        self.current
    }

    /// The earliest time the next run may start: starts are paced so the sweep's requests stay
    /// within its share of the provider's rate limit. `None`: now.
    pub fn next_start_at(&self) -> Option<EpochMs> {
        let rate = self.limits.rate_limit.as_ref()?;
        let gap = (u128::from(rate.window_ms) * u128::from(self.limits.requests_per_run()))
            .div_ceil(u128::from(rate.share_per_window()));
        let gap = i64::try_from(gap).unwrap_or(i64::MAX);
        self.last_start.map(|at| at.saturating_add(gap))
    }

    /// A run started at `now` with `in_flight` runs (itself included) in flight.
    pub fn started(&mut self, now: EpochMs, in_flight: usize) {
        self.last_start = Some(now);
        self.peak = self.peak.max(in_flight);
    }

    /// A run finished: the size follows the provider's latency and failures.
    pub fn observe(&mut self, o: Observation) {
        let latency = u64::try_from(o.finished_at.saturating_sub(o.started_at)).unwrap_or(0);
        if o.failed {
            self.failures += 1;
            self.window_done = 0;
            let halved = (self.current / 2).max(1);
            if halved < self.current || self.sized_by != SizedBy::Failures {
                self.current = halved;
                self.sized_by = SizedBy::Failures;
            }
            return;
        }
        self.fastest_ms = Some(self.fastest_ms.map_or(latency, |f| f.min(latency)));
        self.recent_ms = Some(self.recent_ms.map_or(latency, |r| (3 * r + latency) / 4));
        self.window_done += 1;
        if self.window_done < self.current {
            return;
        }
        self.window_done = 0;
        let (fastest, recent) = (self.fastest_ms.unwrap_or(0), self.recent_ms.unwrap_or(0));
        if recent > fastest.saturating_mul(2).saturating_add(LATENCY_SLACK_MS) {
            self.current = (self.current - self.current / 4).max(1);
            self.sized_by = SizedBy::ProviderSlowing;
            return;
        }
        let (ceiling, _) = self.ceiling();
        if self.current < ceiling {
            self.current = self.current.saturating_mul(2);
            self.sized_by = SizedBy::Growing;
        }
        self.clamp();
    }

    /// What was chosen and why.
    pub fn report(&self) -> ConcurrencyReport {
        let why = match self.sized_by {
            SizedBy::Start => format!("started at {} runs in flight", self.current),
            SizedBy::Growing => format!(
                "grew to {} runs in flight while the provider kept its pace",
                self.current
            ),
            SizedBy::Cap => format!("held at the cap of {} runs in flight", self.cap),
            SizedBy::Connections => format!(
                "held at {} runs in flight: the platform's simultaneous connections",
                self.current
            ),
            SizedBy::Subrequests => format!(
                "held at {} runs in flight: the subrequests the invocation has left",
                self.current
            ),
            SizedBy::RateLimit => {
                let rate = self.limits.rate_limit.as_ref();
                format!(
                    "held at {} runs in flight, starts paced: {}% of {}'s documented limit of {} \
                     requests per {} ms",
                    self.current,
                    RATE_LIMIT_SHARE_PERCENT,
                    rate.map_or("the provider", |r| r.provider.as_str()),
                    rate.map_or(0, |r| r.requests),
                    rate.map_or(0, |r| r.window_ms),
                )
            }
            SizedBy::ProviderSlowing => format!(
                "lowered to {} runs in flight: the provider's latency rose past twice its \
                 fastest",
                self.current
            ),
            SizedBy::Failures => format!(
                "lowered to {} runs in flight after {} runs the provider failed",
                self.current, self.failures
            ),
            SizedBy::Budget => format!(
                "raised to {} runs in flight to finish the batch before the deadline",
                self.current
            ),
        };
        ConcurrencyReport {
            cap: self.cap,
            peak: self.peak,
            last: self.current,
            sized_by: self.sized_by,
            fastest_ms: self.fastest_ms,
            recent_ms: self.recent_ms,
            failures: self.failures,
            rate_limit: self.limits.rate_limit.clone(),
            why,
        }
    }
}
