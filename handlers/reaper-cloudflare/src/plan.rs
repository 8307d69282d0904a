//! What one alarm does and when the next one fires: batch sizing from the configured CPU, wall
//! and subrequest limits (a Worker has no deadline API), and the alarm decisions. Plain Rust:
//! tested natively.

use std::time::Duration;

use reaper_core::concurrency::ConcurrencyLimits;
use reaper_core::reap::ReapOptions;
use reaper_core::EpochMs;
use serde::Serialize;

use crate::config::Config;

/// Kept back from the wall limit: the report write and the final `setAlarm`.
pub const MIN_WALL_MARGIN_MS: u64 = 5_000;
/// D1 round trips of the sweep itself, outside any run, at most: opening the store (1 when
/// the schema is current, 2 for the full check and 1 for a migration, 2 more for the check
/// after a lost migration race), the pause mark, the lease, the listing cursor, the ledger's
/// due entries, the listing (at most 6 pages, the unlistable report inside the first), the
/// backlog count, one lease renewal, the history (the entries and the prune in one batch), the
/// ledger's counts, the cursor's write and the release. A steady-state alarm makes 12 of them.
pub const SWEEP_OVERHEAD_SUBREQUESTS: u64 = 5 + 1 + 1 + 1 + 1 + 6 + 1 + 1 + 1 + 1 + 1 + 1;
/// D1 round trips (subrequests) the event retention after a sweep may make, kept out of the
/// runs' share.
pub const RETENTION_ROUND_TRIPS: usize = 8;
/// Events one retention batch deletes at most: one short D1 transaction.
pub const RETENTION_BATCH_EVENTS: usize = 500;
/// How often the retention runs while it keeps up: its listing walks the terminal runs in
/// finish order (pruned ones too, since no index tells them apart), so it runs hourly rather
/// than every alarm. While a call reports `more`, every alarm carries on.
pub const RETENTION_EVERY_MS: i64 = 60 * 60 * 1000;
/// A tenth of the CPU limit stays unspent: the runtime, the report, JSON.
pub const CPU_RESERVE_DIVISOR: u64 = 10;
/// The bound of the backlog count (rows read per alarm): past it the figure is "at least".
/// D1 bills rows read, and a steady-state alarm reads 42 other rows (the schema's version, the
/// pause mark, the lease, the cursor note, the ledger, the batch's listing, the history), so
/// with the count's 26 an alarm reads 68 rows at any backlog (`test/scale.test.mjs`): 98 k rows
/// a day at an alarm a minute, within D1 Free's 5 M.
pub const BACKLOG_COUNT_MAX: u64 = 25;
/// Runs in flight, at most: a Worker keeps at most six connections open at once, and each run
/// holds one (its provider request) next to the D1 requests. The sweep sizes its runs in flight
/// within this from the provider's latency, failures and rate limit.
pub const WORKER_CONCURRENCY: usize = 4;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What one alarm will do, and why. Part of the stored report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepPlan {
    #[serde(skip)]
    pub options: ReapOptions,
    pub start: EpochMs,
    /// `start + wall limit - margin`: no run starts unless its reserve ends before this.
    pub deadline: EpochMs,
    pub max_runs: usize,
    /// Which limit set `max_runs`: `configured`, `cpu` or `subrequests`.
    pub limited_by: &'static str,
    pub lease_ttl_ms: u64,
    /// Runs in flight at once.
    pub concurrency: usize,
    /// The subrequest count at which the meter stops the sweep from starting runs
    /// ([`crate::meter::stop_at`]); `None` when the limit is too small for a meter and the
    /// static estimate caps the batch instead.
    pub subrequest_stop_at: Option<u64>,
}

/// Sizes one sweep that starts at `start`.
///
/// - Wall: the deadline is `start + wall - max(5 s, wall / 10)`; the core starts a run only
///   while its worst case ([`ReapOptions::worst_case_run_ms`]: the probe and reclaim step
///   deadlines, the quiet wait's worst case and the run budget) ends before it.
/// - CPU: Workers cannot read their CPU time, so the cap is what fits if every run spends its
///   `REAPER_CPU_PER_RUN`: `(cpu - cpu / 10) / cpu_per_run`.
/// - Subrequests are counted as they happen ([`crate::meter`]): the sweep stops starting runs
///   once the count leaves only room for the runs in flight (`REAPER_SUBREQUESTS_PER_RUN`
///   each) and the tail (21 of the sweep's own, 8 of the event retention). Only a limit too
///   small to hold four runs in flight lowers concurrency to one, and one too small to hold
///   even that falls back to the static cap `(limit - 21 - 8) / per_run`.
/// - `max_runs` is the smallest of those and `REAPER_MAX_RUNS`, and at least 1.
/// - The sweep lease lasts the wall limit, so a sweep killed by the runtime frees it by then.
pub fn plan(config: &Config, owner: impl Into<String>, start: EpochMs) -> SweepPlan {
    let wall = ms(config.wall_limit);
    let margin = MIN_WALL_MARGIN_MS.max(wall / 10);
    let deadline = start.saturating_add(wall.saturating_sub(margin) as i64);
    let cpu = ms(config.cpu_limit);
    let by_cpu = ((cpu - cpu / CPU_RESERVE_DIVISOR) / ms(config.cpu_per_run).max(1)) as usize;
    let tail = SWEEP_OVERHEAD_SUBREQUESTS + RETENTION_ROUND_TRIPS as u64;
    let metered = |concurrency| {
        crate::meter::stop_at(
            config.subrequests,
            config.subrequests_per_run,
            concurrency,
            tail,
        )
        .map(|at| (concurrency, at))
    };
    let (concurrency, subrequest_stop_at) = match metered(WORKER_CONCURRENCY).or_else(|| metered(1))
    {
        Some((concurrency, at)) => (concurrency, Some(at)),
        None => (1, None),
    };
    let (mut max_runs, mut limited_by) = (config.max_runs, "configured");
    if by_cpu < max_runs {
        (max_runs, limited_by) = (by_cpu, "cpu");
    }
    if subrequest_stop_at.is_none() {
        let by_subrequests =
            (config.subrequests.saturating_sub(tail) / config.subrequests_per_run.max(1)) as usize;
        if by_subrequests < max_runs {
            (max_runs, limited_by) = (by_subrequests, "subrequests");
        }
    }
    let max_runs = max_runs.max(1);
    let mut options = ReapOptions::new(ms(config.detached_ttl), owner);
    options.now = Some(start);
    options.run_budget_ms = ms(config.run_budget);
    options.fence_quiet_ms = ms(config.fence_quiet);
    options.max_runs = max_runs;
    options.deadline = Some(deadline);
    options.concurrency = concurrency;
    // The platform's limits for the core's sizing: the connections, the subrequests left for
    // runs in flight (the meter stops new runs before the rest run out), the providers' rate.
    options.concurrency_limits = ConcurrencyLimits {
        connections: Some(WORKER_CONCURRENCY),
        subrequests: Some((
            config.subrequests.saturating_sub(tail),
            config.subrequests_per_run.max(1),
        )),
        rate_limit: reaper_providers::strictest_rate_limit(&config.providers),
        provider_requests_per_run: 0,
    };
    // D1 bills rows read, and the backlog count reads up to this many each alarm.
    options.backlog_count_max = BACKLOG_COUNT_MAX;
    // The run history is on, at the core's retention: its write and prune are one D1 batch,
    // counted in SWEEP_OVERHEAD_SUBREQUESTS.
    SweepPlan {
        options,
        start,
        deadline,
        max_runs,
        limited_by,
        lease_ttl_ms: wall.max(1_000),
        concurrency,
        subrequest_stop_at,
    }
}

/// When the last event retention ran and whether it stopped at its bound. Kept in the Durable
/// Object's storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetentionMark {
    pub at: EpochMs,
    pub more: bool,
}

/// Whether an alarm at `now` runs the event retention: when it never ran, when the last call
/// left aged-out events behind, or an hour after the last one.
pub fn retention_due(last: Option<RetentionMark>, now: EpochMs) -> bool {
    match last {
        None => true,
        Some(mark) => mark.more || now.saturating_sub(mark.at) >= RETENTION_EVERY_MS,
    }
}

/// The safety net armed before a sweep starts: one interval after the longest the runtime lets
/// the alarm run. If the sweep panics, hangs or is killed, this alarm still fires.
pub fn safety_net_at(config: &Config, now: EpochMs) -> EpochMs {
    now.saturating_add(ms(config.interval + config.wall_limit) as i64)
}

/// The alarm armed after a sweep that returned: one interval from now.
pub fn next_alarm_at(config: &Config, now: EpochMs) -> EpochMs {
    now.saturating_add(ms(config.interval) as i64)
}

/// What the watchdog (cron, or the admin bootstrap) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Heal {
    /// A plausible alarm is armed: leave it.
    Keep { at: EpochMs },
    /// No alarm: arm one now.
    ArmMissing { at: EpochMs },
    /// The alarm is long past and never fired (the "alarm never fires again" failure): re-arm.
    ArmStale { was: EpochMs, at: EpochMs },
    /// The alarm is further out than the reaper ever arms (a stray manual set): re-arm.
    ArmTooFar { was: EpochMs, at: EpochMs },
}

impl Heal {
    /// The `action` tag it serializes with (`keep`, `arm-missing`, `arm-stale`, `arm-too-far`).
    pub fn action(self) -> &'static str {
        match self {
            Heal::Keep { .. } => "keep",
            Heal::ArmMissing { .. } => "arm-missing",
            Heal::ArmStale { .. } => "arm-stale",
            Heal::ArmTooFar { .. } => "arm-too-far",
        }
    }

    /// The time to arm, or `None` to leave the alarm alone.
    pub fn arm_at(self) -> Option<EpochMs> {
        match self {
            Heal::Keep { .. } => None,
            Heal::ArmMissing { at } | Heal::ArmStale { at, .. } | Heal::ArmTooFar { at, .. } => {
                Some(at)
            }
        }
    }
}

/// Decides whether the alarm needs re-arming. An alarm a little in the past is due or being
/// retried and is left alone; one more than two intervals plus the wall limit in the past never
/// fired. Re-arming fires it at once: a missed sweep is due now.
pub fn heal(config: &Config, alarm: Option<EpochMs>, now: EpochMs) -> Heal {
    let Some(at) = alarm else {
        return Heal::ArmMissing { at: now };
    };
    let stale_after = ms(config.interval * 2 + config.wall_limit) as i64;
    if at < now.saturating_sub(stale_after) {
        return Heal::ArmStale { was: at, at: now };
    }
    if at > safety_net_at(config, now) {
        return Heal::ArmTooFar { was: at, at: now };
    }
    Heal::Keep { at }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, DETACHED_TTL, SANDBOXD_TOKEN, SANDBOXD_URL};

    fn config(extra: &[(&str, &str)]) -> Config {
        let mut pairs = vec![
            (DETACHED_TTL, "30m"),
            (SANDBOXD_URL, "http://127.0.0.1:1"),
            (SANDBOXD_TOKEN, "t0123456789abcdef"),
            // These cases size a Paid deployment; Free's limits are config.rs's tests.
            ("REAPER_PLAN", "paid"),
        ];
        pairs.extend_from_slice(extra);
        Config::from_lookup(|k| {
            pairs
                .iter()
                .rev()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
    }

    const T0: EpochMs = 1_700_000_000_000;

    #[test]
    fn the_sizing_gets_the_workers_connections_subrequests_and_the_providers_rate_limit() {
        let c = config(&[
            (reaper_providers::PROVIDERS_VAR, "sandboxd,e2b"),
            ("E2B_API_KEY", "k"),
        ]);
        let p = plan(&c, "test", T0);
        let limits = &p.options.concurrency_limits;
        assert_eq!(limits.connections, Some(WORKER_CONCURRENCY));
        let tail = SWEEP_OVERHEAD_SUBREQUESTS + RETENTION_ROUND_TRIPS as u64;
        assert_eq!(
            limits.subrequests,
            Some((c.subrequests - tail, c.subrequests_per_run))
        );
        assert_eq!(
            limits.rate_limit.as_ref().map(|r| r.provider.as_str()),
            Some("e2b")
        );
        // D1 bills rows read: the count stays small.
        assert_eq!(p.options.backlog_count_max, BACKLOG_COUNT_MAX);
        const { assert!(BACKLOG_COUNT_MAX < 200) };
    }

    #[test]
    fn the_run_history_is_kept_and_its_one_batch_is_counted_in_the_sweep_s_own_subrequests() {
        let p = plan(&config(&[]), "o", T0);
        assert_eq!(
            p.options.history_retention_ms,
            reaper_core::history::DEFAULT_HISTORY_RETENTION_MS
        );
        // Schema check (at most 5), pause, lease, cursor, ledger due, 6 listing pages, count,
        // renewal, history (entries and prune in one batch), ledger counts, cursor, release.
        assert_eq!(SWEEP_OVERHEAD_SUBREQUESTS, 21);
    }

    #[test]
    fn the_default_plan_keeps_a_tenth_of_the_wall_limit_and_caps_at_the_configured_runs() {
        let p = plan(&config(&[]), "owner", T0);
        assert_eq!(p.deadline, T0 + 900_000 - 90_000);
        assert_eq!((p.max_runs, p.limited_by), (25, "configured"));
        assert_eq!(p.options.deadline, Some(p.deadline));
        assert_eq!(p.options.now, Some(T0));
        assert_eq!(p.lease_ttl_ms, 900_000);
        assert_eq!(p.options.backlog_count_max, BACKLOG_COUNT_MAX);
        assert!(p.options.validate().is_ok());
    }

    #[test]
    fn a_small_cpu_limit_caps_the_batch_at_what_fits_with_a_tenth_kept_back() {
        let p = plan(
            &config(&[("REAPER_CPU_LIMIT", "1s"), ("REAPER_CPU_PER_RUN", "100ms")]),
            "o",
            T0,
        );
        assert_eq!((p.max_runs, p.limited_by), (9, "cpu"));
    }

    #[test]
    fn the_free_plan_s_fifty_subrequests_cap_the_batch() {
        let p = plan(&config(&[("REAPER_SUBREQUESTS", "50")]), "o", T0);
        assert_eq!((p.max_runs, p.limited_by), (1, "subrequests"));
    }

    #[test]
    fn a_limit_that_holds_the_runs_in_flight_is_metered_at_runtime_not_estimated() {
        let p = plan(
            &config(&[
                ("REAPER_SUBREQUESTS", "1000"),
                ("REAPER_SUBREQUESTS_PER_RUN", "124"),
            ]),
            "o",
            T0,
        );
        // The static estimate would have capped the batch at (1000 - 29) / 124 = 7 runs.
        assert_eq!((p.max_runs, p.limited_by), (25, "configured"));
        assert_eq!(p.concurrency, WORKER_CONCURRENCY);
        assert_eq!(p.subrequest_stop_at, Some(1000 - 29 - 4 * 124));
    }

    #[test]
    fn a_limit_too_small_for_four_runs_in_flight_runs_one_at_a_time_under_the_meter() {
        let p = plan(&config(&[("REAPER_SUBREQUESTS", "100")]), "o", T0);
        assert_eq!(p.concurrency, 1);
        assert_eq!(p.options.concurrency, 1);
        assert_eq!(p.subrequest_stop_at, Some(100 - 29 - 36));
        assert_eq!(p.limited_by, "configured");
    }

    #[test]
    fn the_event_retention_s_round_trips_come_out_of_the_static_cap() {
        // Too small for even one metered run (29 + 36 > 52): the static cap, (52 - 29) / 36,
        // and never less than one run.
        let p = plan(
            &config(&[
                ("REAPER_SUBREQUESTS", "52"),
                ("REAPER_SUBREQUESTS_PER_RUN", "36"),
            ]),
            "o",
            T0,
        );
        assert_eq!(
            (p.max_runs, p.limited_by, p.concurrency),
            (1, "subrequests", 1)
        );
        assert_eq!(p.subrequest_stop_at, None);
    }

    #[test]
    fn the_event_retention_runs_first_hourly_after_and_every_alarm_while_it_is_behind() {
        assert!(retention_due(None, T0));
        let kept_up = RetentionMark {
            at: T0,
            more: false,
        };
        assert!(!retention_due(Some(kept_up), T0 + RETENTION_EVERY_MS - 1));
        assert!(retention_due(Some(kept_up), T0 + RETENTION_EVERY_MS));
        let behind = RetentionMark { at: T0, more: true };
        assert!(retention_due(Some(behind), T0 + 1));
    }

    #[test]
    fn the_event_retention_defaults_to_thirty_days_like_the_other_stores() {
        assert_eq!(config(&[]).log_retention.as_secs(), 30 * 86_400);
        let refused = Config::from_lookup(|k| match k {
            "REAPER_DETACHED_TTL" => Some("30m".into()),
            "REAPER_SANDBOXD_URL" => Some("http://127.0.0.1:1".into()),
            "REAPER_SANDBOXD_TOKEN" => Some("t".into()),
            "REAPER_EVENT_RETENTION" => Some("10m".into()),
            "REAPER_PLAN" => Some("paid".into()),
            _ => None,
        })
        .unwrap_err();
        assert!(refused.names("REAPER_EVENT_RETENTION"), "{refused}");
    }

    #[test]
    fn a_short_wall_limit_keeps_at_least_the_minimum_margin() {
        let p = plan(&config(&[("REAPER_WALL_LIMIT", "20s")]), "o", T0);
        assert_eq!(p.deadline, T0 + 15_000);
    }

    #[test]
    fn the_safety_net_fires_after_the_longest_possible_sweep_and_the_next_alarm_one_interval_on() {
        let c = config(&[("REAPER_EVERY", "2m")]);
        assert_eq!(safety_net_at(&c, T0), T0 + 120_000 + 900_000);
        assert_eq!(next_alarm_at(&c, T0), T0 + 120_000);
        assert!(next_alarm_at(&c, T0) < safety_net_at(&c, T0));
    }

    #[test]
    fn a_missing_alarm_is_armed_now() {
        assert_eq!(heal(&config(&[]), None, T0), Heal::ArmMissing { at: T0 });
    }

    #[test]
    fn an_alarm_due_or_being_retried_is_kept_and_one_that_never_fired_is_re_armed() {
        let c = config(&[]);
        let horizon = 2 * 60_000 + 900_000;
        assert_eq!(
            heal(&c, Some(T0 - horizon), T0),
            Heal::Keep { at: T0 - horizon }
        );
        assert_eq!(
            heal(&c, Some(T0 - horizon - 1), T0),
            Heal::ArmStale {
                was: T0 - horizon - 1,
                at: T0
            }
        );
        assert_eq!(
            heal(&c, Some(T0 + 60_000), T0),
            Heal::Keep { at: T0 + 60_000 }
        );
    }

    #[test]
    fn an_alarm_beyond_the_safety_net_is_re_armed_and_the_safety_net_itself_is_kept() {
        let c = config(&[]);
        let net = safety_net_at(&c, T0);
        assert_eq!(heal(&c, Some(net), T0).arm_at(), None);
        assert_eq!(heal(&c, Some(net + 1), T0).arm_at(), Some(T0));
    }

    #[test]
    fn a_heal_action_is_the_tag_it_serializes_with() {
        for heal in [
            Heal::Keep { at: 1 },
            Heal::ArmMissing { at: 1 },
            Heal::ArmStale { was: 0, at: 1 },
            Heal::ArmTooFar { was: 2, at: 1 },
        ] {
            assert_eq!(
                serde_json::to_value(heal).unwrap()["action"],
                heal.action(),
                "{heal:?}"
            );
        }
    }
}
