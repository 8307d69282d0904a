//! Deadline-aware batch sizing: from an invocation's start and deadline, the sweep's options and
//! its lease TTL, so a sweep never starts a run it cannot finish before the platform kills it.

use std::time::Duration;

use reaper_core::claim::MAX_QUIESCENCE_PROBES;
use reaper_core::reap::{ReapOptions, STORE_ALLOWANCE_MS};
use reaper_core::EpochMs;
use serde::Serialize;

use crate::config::ServerlessConfig;

/// The smallest default safety margin: log flush, the response, clock skew (platforms §6.1).
pub const MIN_DEFAULT_MARGIN: Duration = Duration::from_secs(15);
/// The shortest sweep lease: an invocation whose deadline has already passed still takes (and
/// releases) a valid lease.
pub const MIN_LEASE_TTL_MS: u64 = 1_000;

/// What one invocation will do, and why. Serialized into the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepPlan {
    /// The options passed to the sweep.
    #[serde(skip)]
    pub options: ReapOptions,
    pub invocation_start: EpochMs,
    /// The earlier of the platform's deadline and `start + REAPER_BUDGET`.
    pub invocation_deadline: EpochMs,
    /// `invocation_deadline - margin`: no run starts unless its reserve ends before this.
    pub sweep_deadline: EpochMs,
    pub budget_ms: u64,
    pub margin_ms: u64,
    /// The worst-case time of one run: the core's [`ReapOptions::reserve_ms`] of the options
    /// the sweep runs with.
    pub reserve_ms: u64,
    /// The sweep lease lasts the whole invocation, so a sweep killed at its deadline frees the
    /// lease by then and the next tick is not locked out.
    pub lease_ttl_ms: u64,
    /// The configured cap (`REAPER_MAX_RUNS`).
    pub max_runs: usize,
    /// How many runs fit even if every one takes its whole reserve (at most `max_runs`): each of
    /// the `REAPER_CONCURRENCY` slots runs `(budget - margin) / reserve` of them back to back,
    /// while the sweep keeps that many in flight (it sizes them at run time, fewer when the
    /// provider fails). Faster runs leave room for more, up to the cap; the core checks before
    /// each run.
    pub worst_case_runs: usize,
}

/// Plans one invocation that started at `start` and must end by `deadline` (epoch ms).
///
/// - budget = `min(deadline, start + REAPER_BUDGET) - start`;
/// - margin = `REAPER_DEADLINE_MARGIN`, default `max(15 s, budget / 10)`;
/// - reserve = `REAPER_PER_RUN_RESERVE`, default the core's
///   [`ReapOptions::worst_case_run_ms`] of the very options the sweep runs with (probe and
///   reclaim step deadlines, the quiet wait's worst case, the run budget, the store requests):
///   one source, so the plan and the sweep's own deadline checks never disagree;
/// - the sweep's deadline is `start + budget - margin`, and the core starts a run only while
///   `now + reserve <= that deadline`: each started run can end before it, every other run is
///   counted `deferred` and left to the next tick;
/// - `max_runs` stays the configured cap; `worst_case_runs = min(cap, concurrency × (budget -
///   margin) / reserve)` is how many are guaranteed;
/// - the sweep lease TTL is the budget (at least [`MIN_LEASE_TTL_MS`]).
///
/// A budget that fits no run at all is a configuration error: handlers refuse it at start-up
/// with [`check_budget`].
pub fn plan(
    config: &ServerlessConfig,
    owner: impl Into<String>,
    start: EpochMs,
    deadline: EpochMs,
) -> SweepPlan {
    let invocation_deadline = match config.budget {
        Some(b) => deadline.min(start.saturating_add(ms(b).min(i64::MAX as u64) as i64)),
        None => deadline,
    };
    let budget_ms = u64::try_from(invocation_deadline.saturating_sub(start)).unwrap_or(0);
    let margin_ms = margin_ms(config, budget_ms);
    let mut options = sweep_options(config, owner);
    let reserve_ms = options.reserve_ms();
    let usable_ms = budget_ms.saturating_sub(margin_ms);
    let sweep_deadline = start.saturating_add(usable_ms as i64);
    let per_slot = usize::try_from(usable_ms / reserve_ms.max(1)).unwrap_or(usize::MAX);
    options.deadline = Some(sweep_deadline);
    SweepPlan {
        options,
        invocation_start: start,
        invocation_deadline,
        sweep_deadline,
        budget_ms,
        margin_ms,
        reserve_ms,
        lease_ttl_ms: budget_ms.max(MIN_LEASE_TTL_MS),
        max_runs: config.max_runs,
        worst_case_runs: per_slot
            .saturating_mul(config.concurrency.max(1))
            .min(config.max_runs),
    }
}

/// The sweep's options from the settings, without a deadline: the one place settings become
/// the core's options, which the reserve is then computed from.
fn sweep_options(config: &ServerlessConfig, owner: impl Into<String>) -> ReapOptions {
    let mut options = ReapOptions::new(ms(config.detached_ttl), owner);
    options.run_budget_ms = ms(config.run_budget);
    options.fence_quiet_ms = ms(config.fence_quiet);
    options.step_timeout_ms = ms(config.step_timeout);
    options.max_runs = config.max_runs;
    options.concurrency = config.concurrency;
    // The sweep sizes its runs in flight within the cap from the deadline this plan sets and
    // the providers' documented rate limits; a function has no connection limit of its own.
    options.concurrency_limits.rate_limit =
        reaper_providers::strictest_rate_limit(&config.providers);
    options.per_run_reserve_ms = config.per_run_reserve.map(ms);
    options
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `REAPER_DEADLINE_MARGIN`, default `max(15 s, budget / 10)`.
fn margin_ms(config: &ServerlessConfig, budget_ms: u64) -> u64 {
    config
        .deadline_margin
        .map(ms)
        .unwrap_or_else(|| ms(MIN_DEFAULT_MARGIN).max(budget_ms / 10))
}

/// `REAPER_PER_RUN_RESERVE`, default the core's worst case of one run under these settings.
pub fn reserve(config: &ServerlessConfig) -> Duration {
    Duration::from_millis(reserve_ms(config))
}

fn reserve_ms(config: &ServerlessConfig) -> u64 {
    sweep_options(config, "").reserve_ms()
}

/// How the default reserve is made up, in the settings' values, e.g. `probe 20s + quiet wait
/// 7 × 5s + drive 30s + reclaim 20s + store requests 2s`. A test keeps its sum equal to the
/// core's [`ReapOptions::worst_case_run_ms`].
fn reserve_derivation(config: &ServerlessConfig) -> String {
    let step = secs(ms(config.step_timeout));
    format!(
        "probe {step} + quiet wait {} × {} + drive {} + reclaim {step} + store requests {}",
        u64::from(MAX_QUIESCENCE_PROBES) + 1,
        secs(ms(config.fence_quiet)),
        secs(ms(config.run_budget)),
        secs(STORE_ALLOWANCE_MS),
    )
}

/// The shortest invocation budget that fits one worst-case run after the margin, in whole
/// seconds (rounded up, which still fits: the usable time never shrinks as the budget grows).
pub fn minimum_budget(config: &ServerlessConfig) -> Duration {
    let reserve = reserve_ms(config);
    let fits = |budget: u64| budget.saturating_sub(margin_ms(config, budget)) >= reserve;
    let mut budget = match config.deadline_margin {
        Some(margin) => reserve.saturating_add(ms(margin)),
        // The default margin grows with the budget: start from the smaller of the two
        // closed forms and step up to the first budget that fits.
        None => reserve
            .saturating_add(ms(MIN_DEFAULT_MARGIN))
            .min(reserve.saturating_mul(10).div_ceil(9)),
    };
    while !fits(budget) {
        budget += 1;
    }
    Duration::from_secs(budget.div_ceil(1_000))
}

/// A configuration whose invocation budget cannot fit a single run: every sweep would defer
/// every run, deploy green and reap nothing, forever. Handlers refuse to start with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetTooShort {
    pub budget_ms: u64,
    /// Which setting the budget came from, named as the operator sets it.
    pub budget_source: &'static str,
    pub margin_ms: u64,
    pub margin_configured: bool,
    pub reserve_ms: u64,
    /// How the reserve is made up when it is derived (`None` when `REAPER_PER_RUN_RESERVE` sets
    /// it), e.g. `probe 20s + quiet wait 7 × 5s + drive 30s + reclaim 20s + store requests 2s`.
    pub reserve_derivation: Option<String>,
    pub minimum_budget_ms: u64,
}

impl std::fmt::Display for BudgetTooShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let margin_source = if self.margin_configured {
            "REAPER_DEADLINE_MARGIN".to_string()
        } else {
            "the REAPER_DEADLINE_MARGIN default: 15s or a tenth of the budget".to_string()
        };
        let (reserve_source, lower) = match &self.reserve_derivation {
            None => (
                "REAPER_PER_RUN_RESERVE".to_string(),
                "REAPER_PER_RUN_RESERVE or REAPER_DEADLINE_MARGIN",
            ),
            Some(derivation) => (
                format!(
                    "{derivation}, from REAPER_STEP_TIMEOUT, REAPER_QUIET_WINDOW and \
                     REAPER_RUN_BUDGET"
                ),
                "REAPER_RUN_BUDGET, REAPER_STEP_TIMEOUT, REAPER_QUIET_WINDOW or \
                 REAPER_DEADLINE_MARGIN",
            ),
        };
        write!(
            f,
            "no run can ever start: the invocation budget of {} ({}) minus the safety margin of \
             {} ({margin_source}) leaves {}, less than the {} one run may take in the worst case \
             ({reserve_source}). Raise the budget to at least {}, or lower {lower}",
            secs(self.budget_ms),
            self.budget_source,
            secs(self.margin_ms),
            secs(self.budget_ms.saturating_sub(self.margin_ms)),
            secs(self.reserve_ms),
            secs(self.minimum_budget_ms),
        )
    }
}

impl std::error::Error for BudgetTooShort {}

fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{:.3}s", ms as f64 / 1_000.0)
    }
}

/// Refuses a `budget` (named by `source`, e.g. `"REAPER_BUDGET"`) that leaves no room for one
/// worst-case run after the margin, with the same arithmetic as [`plan`].
pub fn check_budget(
    config: &ServerlessConfig,
    budget: Duration,
    source: &'static str,
) -> Result<(), BudgetTooShort> {
    let budget_ms = ms(budget);
    let margin_ms = margin_ms(config, budget_ms);
    let reserve_ms = reserve_ms(config);
    if budget_ms.saturating_sub(margin_ms) >= reserve_ms {
        return Ok(());
    }
    Err(BudgetTooShort {
        budget_ms,
        budget_source: source,
        margin_ms,
        margin_configured: config.deadline_margin.is_some(),
        reserve_ms,
        reserve_derivation: config
            .per_run_reserve
            .is_none()
            .then(|| reserve_derivation(config)),
        minimum_budget_ms: ms(minimum_budget(config)),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use reaper_core::domain::RunRecord;
    use reaper_core::memory::MemoryStore;
    use reaper_core::reap::{sweep, ReapDeps, SweepStatus};
    use reaper_core::time::ManualClock;
    use reaper_core::{
        CancellationToken, ChunkStream, Drive, DriveError, DriveRequest, ExitProbe, ProbeError,
        RunExitProbe, RunStatus, Sleeper,
    };

    use super::*;
    use crate::config::Secret;

    const START: EpochMs = 1_700_000_000_000;

    fn config() -> ServerlessConfig {
        ServerlessConfig {
            store: crate::StoreChoice::DynamoDb,
            table: "t".into(),
            providers: vec![reaper_providers::ProviderKind::Sandboxd],
            hosted: Default::default(),
            sandboxd_url: "http://127.0.0.1:1".into(),
            sandboxd_token: Secret::new("x"),
            sandboxd_token_secret: None,
            provider_name: "sandboxd".into(),
            detached_ttl: Duration::from_secs(1800),
            run_budget: Duration::from_secs(30),
            max_runs: 25,
            concurrency: 4,
            fence_quiet: Duration::from_secs(5),
            step_timeout: Duration::from_secs(20),
            journal_dir: None,
            budget: None,
            deadline_margin: None,
            per_run_reserve: None,
            log_retention: Duration::from_secs(86_400),
            aws_credentials: crate::AwsCredentialsConfig::DefaultChain,
            renamed: Vec::new(),
        }
    }

    /// The default reserve, spelled out: probe 20 s + 7 quiet windows of 5 s + drive 30 s +
    /// reclaim 20 s + 2 s of store requests.
    const DEFAULT_RESERVE_MS: u64 = 20_000 + 7 * 5_000 + 30_000 + 20_000 + 2_000;

    #[test]
    fn the_default_reserve_is_the_cores_worst_case_of_the_options_the_sweep_runs_with() {
        let p = plan(&config(), "me", START, START + 300_000);
        assert_eq!(p.reserve_ms, DEFAULT_RESERVE_MS);
        assert_eq!(p.reserve_ms, 107_000);
        assert_eq!(p.reserve_ms, p.options.worst_case_run_ms());
        assert_eq!(p.options.reserve_ms(), p.reserve_ms);
        assert_eq!(reserve(&config()), Duration::from_secs(107));
        // Every value it is made of is a setting the sweep then enforces.
        let mut c = config();
        c.step_timeout = Duration::from_secs(5);
        c.fence_quiet = Duration::from_millis(50);
        c.run_budget = Duration::from_secs(10);
        let p = plan(&c, "me", START, START + 300_000);
        assert_eq!(p.options.step_timeout_ms, 5_000);
        assert_eq!(p.reserve_ms, 5_000 + 7 * 50 + 10_000 + 5_000 + 2_000);
        assert_eq!(p.reserve_ms, p.options.worst_case_run_ms());
    }

    #[test]
    fn a_five_minute_lambda_keeps_a_thirty_second_margin_and_guarantees_two_worst_case_runs_per_slot(
    ) {
        let p = plan(&config(), "me", START, START + 300_000);
        assert_eq!(p.budget_ms, 300_000);
        assert_eq!(p.margin_ms, 30_000);
        assert_eq!(p.sweep_deadline, START + 270_000);
        // 270 s / 107 s = 2 back to back in each of the 4 slots.
        assert_eq!(p.worst_case_runs, 2 * 4);
        assert_eq!(p.max_runs, 25);
        assert_eq!(p.lease_ttl_ms, 300_000);
        let o = &p.options;
        assert_eq!(
            (o.deadline, o.reserve_ms(), o.max_runs, o.concurrency),
            (Some(START + 270_000), 107_000, 25, 4)
        );
        assert_eq!(
            (
                o.detached_run_ttl_ms,
                o.run_budget_ms,
                o.fence_quiet_ms,
                o.step_timeout_ms
            ),
            (1_800_000, 30_000, 5_000, 20_000)
        );
        assert_eq!(o.owner, "me");
        assert!(o.validate().is_ok());
    }

    #[test]
    fn worst_case_runs_count_each_slot_of_the_configured_concurrency() {
        let mut c = config();
        c.concurrency = 1;
        assert_eq!(plan(&c, "me", START, START + 300_000).worst_case_runs, 2);
        c.concurrency = 3;
        assert_eq!(plan(&c, "me", START, START + 300_000).worst_case_runs, 6);
    }

    #[test]
    fn short_budgets_keep_the_fifteen_second_floor_and_long_ones_a_tenth() {
        assert_eq!(
            plan(&config(), "me", START, START + 60_000).margin_ms,
            15_000
        );
        assert_eq!(
            plan(&config(), "me", START, START + 900_000).margin_ms,
            90_000
        );
    }

    #[test]
    fn the_worst_case_count_never_exceeds_the_configured_cap() {
        let mut c = config();
        c.max_runs = 3;
        c.per_run_reserve = Some(Duration::from_secs(1));
        let p = plan(&c, "me", START, START + 900_000);
        assert_eq!((p.worst_case_runs, p.options.max_runs), (3, 3));
    }

    #[test]
    fn a_budget_setting_shorter_than_the_platform_deadline_wins() {
        let mut c = config();
        c.budget = Some(Duration::from_secs(120));
        let p = plan(&c, "me", START, START + 900_000);
        assert_eq!(p.invocation_deadline, START + 120_000);
        assert_eq!(p.lease_ttl_ms, 120_000);
        c.budget = Some(Duration::from_secs(3600));
        assert_eq!(
            plan(&c, "me", START, START + 900_000).invocation_deadline,
            START + 900_000
        );
    }

    #[test]
    fn a_deadline_inside_the_margin_leaves_no_room_for_any_run() {
        let p = plan(&config(), "me", START, START + 10_000);
        assert_eq!(p.worst_case_runs, 0);
        assert_eq!(p.sweep_deadline, START);
        assert_eq!(p.lease_ttl_ms, 10_000);
    }

    #[test]
    fn a_deadline_already_past_gives_a_zero_budget_and_a_minimal_lease() {
        let p = plan(&config(), "me", START, START - 5_000);
        assert_eq!((p.budget_ms, p.worst_case_runs), (0, 0));
        assert_eq!(p.lease_ttl_ms, MIN_LEASE_TTL_MS);
        assert_eq!(p.sweep_deadline, START);
    }

    #[test]
    fn explicit_margin_and_reserve_replace_the_defaults() {
        let mut c = config();
        c.concurrency = 1;
        c.deadline_margin = Some(Duration::from_secs(2));
        c.per_run_reserve = Some(Duration::from_secs(4));
        let p = plan(&c, "me", START, START + 20_000);
        assert_eq!((p.margin_ms, p.reserve_ms), (2_000, 4_000));
        assert_eq!(p.options.per_run_reserve_ms, Some(4_000));
        assert_eq!(p.worst_case_runs, 4);
    }

    #[test]
    fn a_sixty_second_timeout_is_refused_naming_the_values_to_change_and_the_minimum() {
        // 60 s - the 15 s margin = 45 s < the 107 s one run may take: no run could ever start.
        let e = check_budget(&config(), Duration::from_secs(60), "TimeoutSeconds").unwrap_err();
        assert_eq!(
            (e.budget_ms, e.margin_ms, e.reserve_ms, e.minimum_budget_ms),
            (60_000, 15_000, 107_000, 122_000)
        );
        let text = e.to_string();
        for part in [
            "invocation budget of 60s (TimeoutSeconds)",
            "safety margin of 15s",
            "leaves 45s, less than the 107s one run may take",
            "(probe 20s + quiet wait 7 × 5s + drive 30s + reclaim 20s + store requests 2s, \
             from REAPER_STEP_TIMEOUT, REAPER_QUIET_WINDOW and REAPER_RUN_BUDGET)",
            "Raise the budget to at least 122s",
            "lower REAPER_RUN_BUDGET, REAPER_STEP_TIMEOUT, REAPER_QUIET_WINDOW or \
             REAPER_DEADLINE_MARGIN",
        ] {
            assert!(text.contains(part), "{part:?} missing from {text}");
        }
        assert!(check_budget(&config(), Duration::from_secs(121), "TimeoutSeconds").is_err());
        assert!(check_budget(&config(), Duration::from_secs(122), "TimeoutSeconds").is_ok());
    }

    #[test]
    fn the_derivation_in_the_refusal_adds_up_to_the_cores_worst_case() {
        for (step, quiet, run) in [(20_000, 5_000, 30_000), (5_000, 50, 10_000), (100, 0, 10)] {
            let mut c = config();
            c.step_timeout = Duration::from_millis(step);
            c.fence_quiet = Duration::from_millis(quiet);
            c.run_budget = Duration::from_millis(run);
            let derivation = reserve_derivation(&c);
            let seconds = |term: &str| -> f64 {
                let factor: f64 = match term.split_once(" × ") {
                    Some((n, _)) => n.rsplit(' ').next().unwrap().parse().unwrap(),
                    None => 1.0,
                };
                let value = term.rsplit(' ').next().unwrap().trim_end_matches('s');
                factor * value.parse::<f64>().unwrap()
            };
            let total: f64 = derivation.split(" + ").map(seconds).sum();
            let worst = plan(&c, "me", START, START).options.worst_case_run_ms();
            assert_eq!((total * 1_000.0).round() as u64, worst, "{derivation}");
        }
    }

    #[test]
    fn the_minimum_budget_is_the_first_whole_second_that_plans_at_least_one_worst_case_run() {
        let cases = [
            (None, None, Duration::from_secs(30)),
            (None, None, Duration::from_secs(240)),
            (None, None, Duration::from_millis(1_234)),
            (Some(Duration::from_secs(2)), None, Duration::from_secs(30)),
            (
                None,
                Some(Duration::from_secs(400)),
                Duration::from_secs(30),
            ),
            (
                Some(Duration::ZERO),
                Some(Duration::from_millis(1)),
                Duration::from_secs(1),
            ),
        ];
        for (margin, reserve, run_budget) in cases {
            let mut c = config();
            c.deadline_margin = margin;
            c.per_run_reserve = reserve;
            c.run_budget = run_budget;
            let minimum = minimum_budget(&c);
            let at = |budget: Duration| plan(&c, "me", START, START + budget.as_millis() as i64);
            assert!(at(minimum).worst_case_runs >= 1, "{c:?}: {minimum:?}");
            assert!(check_budget(&c, minimum, "b").is_ok());
            let just_under = minimum - Duration::from_secs(1);
            assert_eq!(at(just_under).worst_case_runs, 0, "{c:?}: {just_under:?}");
            let e = check_budget(&c, just_under, "b").unwrap_err();
            assert_eq!(e.minimum_budget_ms, minimum.as_millis() as u64);
        }
    }

    #[test]
    fn a_four_minute_run_budget_does_not_fit_a_five_minute_budget() {
        // 20 + 35 + 180 + 20 + 2 = 257 s of reserve; at 300 s the margin is 30 s: 270 s fit one.
        let mut c = config();
        c.run_budget = Duration::from_secs(180);
        assert!(check_budget(&c, Duration::from_secs(300), "maxDuration").is_ok());
        // The case: a 4-minute run budget at 300 s. 317 s > 270 s; the minimum is
        // ceil(317 / 0.9) s.
        c.run_budget = Duration::from_secs(240);
        let e = check_budget(&c, Duration::from_secs(300), "maxDuration").unwrap_err();
        assert_eq!((e.margin_ms, e.reserve_ms), (30_000, 317_000));
        assert_eq!(e.minimum_budget_ms, 353_000);
        assert!(e.to_string().contains("at least 353s"), "{e}");
    }

    #[test]
    fn a_longer_step_timeout_raises_the_reserve_and_the_minimum() {
        let mut c = config();
        c.step_timeout = Duration::from_secs(60);
        let e = check_budget(&c, Duration::from_secs(122), "REAPER_BUDGET").unwrap_err();
        assert_eq!(e.reserve_ms, 60_000 + 35_000 + 30_000 + 60_000 + 2_000);
        assert!(e.to_string().contains("probe 60s"), "{e}");
    }

    #[test]
    fn configured_margin_and_reserve_are_named_as_the_values_to_change() {
        let mut c = config();
        c.deadline_margin = Some(Duration::from_secs(20));
        c.per_run_reserve = Some(Duration::from_secs(50));
        let e = check_budget(&c, Duration::from_secs(60), "REAPER_BUDGET").unwrap_err();
        assert_eq!(e.minimum_budget_ms, 70_000);
        assert_eq!(e.reserve_derivation, None);
        let text = e.to_string();
        assert!(
            text.contains("margin of 20s (REAPER_DEADLINE_MARGIN)"),
            "{text}"
        );
        assert!(text.contains("(REAPER_PER_RUN_RESERVE)"), "{text}");
        assert!(
            text.ends_with(
                "at least 70s, or lower REAPER_PER_RUN_RESERVE or REAPER_DEADLINE_MARGIN"
            ),
            "{text}"
        );
    }

    /// Every run takes its whole reserve: the probe advances the manual clock by it.
    struct SlowProbe {
        clock: ManualClock,
        reserve_ms: i64,
    }

    #[async_trait::async_trait]
    impl ExitProbe for SlowProbe {
        async fn has_finished(&self, _: &RunRecord) -> Result<RunExitProbe, ProbeError> {
            self.clock.advance(self.reserve_ms);
            Ok(RunExitProbe::Producing)
        }
    }

    struct NoDrive;
    impl Drive for NoDrive {
        fn drive(&self, _: DriveRequest, _: CancellationToken) -> Result<ChunkStream, DriveError> {
            Err(DriveError::new("not used"))
        }
    }

    struct NoSleep;
    #[async_trait::async_trait]
    impl Sleeper for NoSleep {
        async fn sleep(&self, _: u64) {}
    }

    async fn sweep_with_worst_case_runs(
        deadline: EpochMs,
        runs: usize,
    ) -> (SweepPlan, EpochMs, reaper_core::reap::SweepReport) {
        let mut c = config();
        c.deadline_margin = Some(Duration::from_secs(2));
        c.per_run_reserve = Some(Duration::from_secs(10));
        // One at a time: the probe below advances a shared manual clock by the whole reserve,
        // which models runs in sequence (runs in flight are covered by the core's own tests).
        c.concurrency = 1;
        let p = plan(&c, "me", START, deadline);
        let clock = ManualClock::new(START);
        let store = Arc::new(MemoryStore::new());
        for i in 0..runs {
            let mut r = RunRecord::new(format!("run-{i}"), "thread", START - 60_000);
            r.status = RunStatus::Running;
            r.detached_since = Some(START - 1_000);
            store.put_run(r);
        }
        let deps = ReapDeps {
            runs: store.clone(),
            logs: store.clone(),
            leases: store.clone(),
            ledger: store.clone(),
            probe: Arc::new(SlowProbe {
                clock: clock.clone(),
                reserve_ms: 10_000,
            }),
            drive: Arc::new(NoDrive),
            reclaim: None,
            clock: Arc::new(clock.clone()),
            sleeper: Arc::new(NoSleep),
            damage: Default::default(),
        };
        let report = sweep(&deps, &p.options, p.lease_ttl_ms).await;
        (p, reaper_core::Clock::now_ms(&clock), report)
    }

    #[tokio::test]
    async fn runs_that_each_take_their_whole_reserve_stop_before_the_deadline_and_the_rest_are_deferred(
    ) {
        let deadline = START + 45_000;
        let (p, ended, report) = sweep_with_worst_case_runs(deadline, 8).await;
        assert_eq!(p.worst_case_runs, 4);
        assert_eq!(report.sweep, SweepStatus::Swept);
        assert_eq!(report.report.considered, 4);
        assert_eq!(report.report.deferred, 4);
        assert!(
            ended <= p.sweep_deadline,
            "the sweep overran: ended {ended}"
        );
        assert!(ended <= deadline - 2_000);
    }

    #[tokio::test]
    async fn a_deadline_close_to_the_start_defers_every_run_and_touches_none() {
        let (p, ended, report) = sweep_with_worst_case_runs(START + 5_000, 3).await;
        assert_eq!(p.worst_case_runs, 0);
        assert_eq!(report.sweep, SweepStatus::Swept);
        assert_eq!((report.report.considered, report.report.probed), (0, 0));
        assert_eq!(report.report.deferred, 3);
        assert_eq!(ended, START, "no time was spent on runs");
    }
}
