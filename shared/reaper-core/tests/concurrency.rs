//! Runs in flight sized at run time (issue 27): the sizing state machine fed with observations,
//! and whole sweeps on tokio's paused clock against providers that are slow, fast, failing or
//! rate limited, under every platform limit. Every verdict is on virtual time.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{Harness, NOW};
use reaper_core::concurrency::{
    ConcurrencyLimits, Observation, RateLimit, SizedBy, Sizer, DEFAULT_CAP, INITIAL_IN_FLIGHT,
};
use reaper_core::domain::RunRecord;
use reaper_core::error::ProbeError;
use reaper_core::ports::{Clock, ExitProbe, RunExitProbe};
use reaper_core::reap::reap_detached_runs;
use reaper_testkit::fakes::TokioClock;

/// A provider answering every probe "producing" after `latency_ms` of virtual time; it fails
/// the first `failing` probes, and records when each probe started and how many overlapped.
#[derive(Clone)]
struct TimedProvider {
    latency_ms: u64,
    failing: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    starts: Arc<Mutex<Vec<i64>>>,
    clock: TokioClock,
}

impl TimedProvider {
    fn new(latency_ms: u64, clock: TokioClock) -> Self {
        TimedProvider {
            latency_ms,
            failing: Arc::new(AtomicUsize::new(0)),
            in_flight: Arc::default(),
            peak: Arc::default(),
            starts: Arc::default(),
            clock,
        }
    }

    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// The most probes that started within any `window_ms` of virtual time.
    fn most_starts_within(&self, window_ms: i64) -> usize {
        let starts = self.starts.lock().unwrap().clone();
        (0..starts.len())
            .map(|i| {
                starts[i..]
                    .iter()
                    .take_while(|&&t| t < starts[i] + window_ms)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}

#[async_trait::async_trait]
impl ExitProbe for TimedProvider {
    async fn has_finished(&self, _run: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        self.starts.lock().unwrap().push(self.clock.now_ms());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(self.latency_ms)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let failed = self
            .failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failed {
            return Err(ProbeError("the provider answered 503".into()));
        }
        Ok(RunExitProbe::Producing)
    }
}

/// `n` producing runs inside the TTL behind `provider`, swept once under `cap` and `limits`;
/// returns the report and the virtual time the sweep took.
async fn sweep_behind(
    n: usize,
    latency_ms: u64,
    cap: usize,
    limits: ConcurrencyLimits,
    failing: usize,
) -> (reaper_core::reap::ReapReport, TimedProvider, i64) {
    let mut h = Harness::new();
    for i in 0..n {
        h.seed(
            &format!("run-{i:04}"),
            Some(NOW - 60_000),
            Some(&format!("sbx-{i}")),
        );
    }
    h.options.max_runs = n;
    h.options.concurrency = cap;
    h.options.concurrency_limits = limits;
    let provider = TimedProvider::new(latency_ms, h.clock.clone());
    provider.failing.store(failing, Ordering::SeqCst);
    let mut deps = h.deps();
    deps.probe = Arc::new(provider.clone());
    let started = h.clock.now_ms();
    let report = reap_detached_runs(&deps, &h.options).await.unwrap();
    let took = h.clock.now_ms() - started;
    assert_eq!(report.considered, n, "every run was swept: {report:#?}");
    (report, provider, took)
}

fn ok(started_at: i64, ms: i64) -> Observation {
    Observation {
        started_at,
        finished_at: started_at + ms,
        failed: false,
    }
}

#[test]
fn sizing_starts_at_the_initial_size_within_the_cap() {
    assert_eq!(
        Sizer::new(DEFAULT_CAP, ConcurrencyLimits::default()).in_flight(100, None),
        INITIAL_IN_FLIGHT
    );
    let mut capped = Sizer::new(2, ConcurrencyLimits::default());
    assert_eq!(capped.in_flight(100, None), 2);
    assert_eq!(capped.report().sized_by, SizedBy::Cap);
}

#[test]
fn sizing_doubles_after_a_window_at_a_steady_latency_up_to_the_cap() {
    let mut s = Sizer::new(32, ConcurrencyLimits::default());
    for round in 0..4 {
        let n = s.in_flight(1000, None);
        for _ in 0..n {
            s.observe(ok(round * 50, 50));
        }
    }
    assert_eq!(s.in_flight(1000, None), 32);
    assert_eq!(s.report().sized_by, SizedBy::Cap);
}

#[test]
fn sizing_shrinks_when_the_provider_slows_as_more_runs_are_in_flight() {
    let mut s = Sizer::new(32, ConcurrencyLimits::default());
    for _ in 0..INITIAL_IN_FLIGHT {
        s.observe(ok(0, 20));
    }
    assert_eq!(s.in_flight(1000, None), 2 * INITIAL_IN_FLIGHT);
    // The provider queues: every run now takes ten times as long.
    for _ in 0..2 * INITIAL_IN_FLIGHT {
        s.observe(ok(0, 200));
    }
    assert!(s.in_flight(1000, None) < 2 * INITIAL_IN_FLIGHT);
    assert_eq!(s.report().sized_by, SizedBy::ProviderSlowing);
}

#[test]
fn sizing_halves_on_each_failure_down_to_one() {
    let mut s = Sizer::new(32, ConcurrencyLimits::default());
    for _ in 0..10 {
        s.observe(Observation {
            started_at: 0,
            finished_at: 20_000,
            failed: true,
        });
    }
    assert_eq!(s.in_flight(1000, None), 1);
    let r = s.report();
    assert_eq!((r.sized_by, r.failures), (SizedBy::Failures, 10));
    assert!(r.why.contains("10 runs the provider failed"), "{}", r.why);
}

#[test]
fn sizing_raises_the_size_to_finish_before_the_deadline() {
    let mut s = Sizer::new(64, ConcurrencyLimits::default());
    s.observe(ok(0, 1_000));
    // 400 runs of 1 s in 10 s need 40 in flight.
    assert_eq!(s.in_flight(400, Some(10_000)), 40);
    assert_eq!(s.report().sized_by, SizedBy::Budget);
    // Never past the cap.
    assert_eq!(s.in_flight(4_000, Some(10_000)), 64);
}

#[test]
fn sizing_never_exceeds_the_platforms_connections() {
    let limits = ConcurrencyLimits {
        connections: Some(4),
        ..Default::default()
    };
    let mut s = Sizer::new(32, limits);
    s.observe(ok(0, 1_000));
    assert_eq!(s.in_flight(1_000, Some(1_000)), 4);
    assert_eq!(s.report().sized_by, SizedBy::Connections);
}

#[test]
fn sizing_never_exceeds_the_subrequests_left_for_runs_in_flight() {
    let limits = ConcurrencyLimits {
        subrequests: Some((34, 10)),
        ..Default::default()
    };
    let mut s = Sizer::new(32, limits);
    assert_eq!(s.in_flight(100, None), 3);
    assert_eq!(s.report().sized_by, SizedBy::Subrequests);
}

#[test]
fn sizing_keeps_runs_in_flight_under_the_providers_rate_limit_by_littles_law() {
    // 100 requests a second documented, half of it ours: 50 requests, 3 per run, so at 60 ms a
    // run, one run in flight (50 × 0.06 / 3 = 1) and starts paced 60 ms apart.
    let limits = ConcurrencyLimits {
        rate_limit: Some(RateLimit::new("e2b", 100, 1_000)),
        ..Default::default()
    };
    let mut s = Sizer::new(32, limits);
    assert_eq!(s.in_flight(100, None), 1, "one until a latency is known");
    s.started(0, 1);
    assert_eq!(s.next_start_at(), Some(60));
    s.observe(ok(0, 600));
    // At 600 ms a run, ten in flight stay within 50 requests a second.
    for _ in 0..20 {
        s.observe(ok(0, 600));
    }
    assert_eq!(s.in_flight(100, None), 10);
    assert_eq!(s.report().sized_by, SizedBy::RateLimit);
}

#[tokio::test(start_paused = true)]
async fn a_hundred_producing_runs_behind_a_50_ms_provider_take_under_half_a_second_of_virtual_time_at_the_default_cap(
) {
    let (report, provider, took) =
        sweep_behind(100, 50, DEFAULT_CAP, ConcurrencyLimits::default(), 0).await;
    assert_eq!(report.outcomes.producing, 100);
    assert!(
        took <= 500,
        "took {took} ms of virtual time: {:?}",
        report.concurrency
    );
    assert!(provider.peak() <= DEFAULT_CAP);
    assert_eq!(report.concurrency.peak, provider.peak());
    assert!(!report.concurrency.why.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_slow_provider_still_finishes_the_batch_before_the_deadline() {
    let mut h = Harness::new();
    for i in 0..60 {
        h.seed(&format!("run-{i:04}"), Some(NOW - 60_000), Some("sbx"));
    }
    h.options.max_runs = 60;
    h.options.concurrency = 64;
    h.options.step_timeout_ms = 5_000;
    h.options.run_budget_ms = 1_000;
    h.options.per_run_reserve_ms = Some(2_500);
    // 60 runs of 2 s with 20 s left: the deadline needs at least 6 in flight after the first
    // window, and the provider's steady pace lets the size grow past that.
    h.options.deadline = Some(NOW + 20_000);
    let provider = TimedProvider::new(2_000, h.clock.clone());
    let mut deps = h.deps();
    deps.probe = Arc::new(provider.clone());
    let report = reap_detached_runs(&deps, &h.options).await.unwrap();
    assert_eq!((report.considered, report.deferred), (60, 0), "{report:#?}");
    assert_eq!(report.concurrency.recent_ms, Some(2_000));
}

#[tokio::test(start_paused = true)]
async fn a_fast_provider_lets_the_sweep_grow_to_the_cap() {
    let (report, provider, _) = sweep_behind(200, 5, 16, ConcurrencyLimits::default(), 0).await;
    assert_eq!(provider.peak(), 16);
    assert_eq!(report.concurrency.sized_by, SizedBy::Cap);
}

#[tokio::test(start_paused = true)]
async fn a_failing_provider_brings_the_runs_in_flight_down_to_one() {
    let (report, provider, _) =
        sweep_behind(40, 50, DEFAULT_CAP, ConcurrencyLimits::default(), 40).await;
    assert_eq!(report.outcomes.failed, 40, "{:?}", report.outcomes);
    assert_eq!(report.concurrency.last, 1);
    assert_eq!(report.concurrency.sized_by, SizedBy::Failures);
    assert!(provider.peak() <= INITIAL_IN_FLIGHT);
}

#[tokio::test(start_paused = true)]
async fn a_sweep_never_holds_more_runs_than_the_workers_connections() {
    let limits = ConcurrencyLimits {
        connections: Some(4),
        ..Default::default()
    };
    let (report, provider, _) = sweep_behind(100, 50, DEFAULT_CAP, limits, 0).await;
    assert_eq!(provider.peak(), 4);
    assert_eq!(report.concurrency.sized_by, SizedBy::Connections);
}

#[tokio::test(start_paused = true)]
async fn a_sweep_never_holds_more_runs_than_its_subrequests_allow() {
    let limits = ConcurrencyLimits {
        subrequests: Some((25, 10)),
        ..Default::default()
    };
    let (report, provider, _) = sweep_behind(50, 50, DEFAULT_CAP, limits, 0).await;
    assert_eq!(provider.peak(), 2);
    assert_eq!(report.concurrency.sized_by, SizedBy::Subrequests);
}

#[tokio::test(start_paused = true)]
async fn a_sweep_stays_within_its_share_of_the_providers_documented_rate_limit() {
    // 200 requests a second, 100 of them ours, 3 per run: at most 33 runs a second.
    let limits = ConcurrencyLimits {
        rate_limit: Some(RateLimit::new("daytona", 200, 1_000)),
        ..Default::default()
    };
    let (report, provider, _) = sweep_behind(100, 50, DEFAULT_CAP, limits, 0).await;
    let most = provider.most_starts_within(1_000);
    assert!(most * 3 <= 100, "{most} probes in one second");
    assert_eq!(report.concurrency.sized_by, SizedBy::RateLimit);
    assert!(
        report.concurrency.why.contains("daytona"),
        "{}",
        report.concurrency.why
    );
}
