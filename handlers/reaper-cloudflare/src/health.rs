//! The health verdict of `GET`/`HEAD /status`: the same contract as the Vercel function's
//! `?status` and `reaper status --check` (`reaper_core::health::assess`). Unhealthy (503)
//! when a sandbox leaked, a detached run is overdue, the last sweep is stale or never happened,
//! the last sweep could not list the detached runs (or could not run at all), or what the verdict
//! needs could not be read. Plain Rust: tested natively; the Durable Object stores a [`Mark`]
//! after every alarm and judges it on request.

use reaper_core::reap::{SweepReport, SweepStatus};
use reaper_core::EpochMs;
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// What one alarm left for the status route.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mark {
    pub finished_at: EpochMs,
    /// The sweep could not start, or could not run (lease store, settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The listing of detached runs failed, so the sweep swept none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listing_error: Option<String>,
    /// The database is damaged: the sweep stopped at it, recording nothing terminal and
    /// destroying nothing after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// Sandboxes of finished runs the reclaim ledger could not destroy (None: not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaked: Option<u64>,
    /// How long the oldest detached run had waited when the sweep listed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_detached_ms: Option<i64>,
}

impl Mark {
    /// The mark of a sweep that returned a report.
    pub fn of(report: &SweepReport, finished_at: EpochMs) -> Mark {
        let error = match &report.sweep {
            // A pause is an operator's decision, not a failure: the staleness rule still tells.
            SweepStatus::Swept
            | SweepStatus::AlreadyRunning { .. }
            | SweepStatus::Paused { .. }
            | SweepStatus::DryRun => None,
            SweepStatus::LeaseUnavailable { error } => {
                Some(format!("the sweep lease is unavailable: {error}"))
            }
            SweepStatus::InvalidOptions { error } => {
                Some(format!("the sweep options are invalid: {error}"))
            }
            #[allow(unreachable_patterns)]
            _ => Some("the sweep did not run".into()),
        };
        let r = &report.report;
        Mark {
            finished_at,
            error,
            listing_error: r.listing_error.clone(),
            damaged: r.damaged.clone(),
            leaked: r.reclaims.ledger.map(|l| l.leaked),
            oldest_detached_ms: r.slo.oldest_detached_ms,
        }
    }

    /// The mark of an alarm that could not sweep at all.
    pub fn failed(error: impl Into<String>, finished_at: EpochMs) -> Mark {
        Mark {
            finished_at,
            error: Some(error.into()),
            ..Mark::default()
        }
    }
}

/// The answer: `healthy` is false exactly when `problems` is not empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub healthy: bool,
    pub problems: Vec<String>,
    pub now: EpochMs,
    pub last_sweep: Option<Mark>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_sweep_age_ms: Option<i64>,
    pub stale_sweep_after_ms: u64,
    pub stale_detached_after_ms: u64,
}

impl Verdict {
    /// 200 when healthy, else 503 (what a load balancer or uptime monitor acts on).
    pub fn http_status(&self) -> u16 {
        if self.healthy {
            200
        } else {
            503
        }
    }
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A last sweep older than this means a tick came and went without one: two intervals plus
/// one wall limit for an alarm still sweeping (as on Vercel: one budget + 2 intervals).
pub fn stale_sweep_ms(config: &Config) -> u64 {
    ms(config.wall_limit).saturating_add(ms(config.interval).saturating_mul(2))
}

/// A detached run older than this should have been expired: its TTL, its own drive, and two
/// intervals for an alarm that deferred it (as on Vercel).
pub fn stale_detached_ms(config: &Config) -> u64 {
    ms(config.detached_ttl)
        .saturating_add(ms(config.run_budget))
        .saturating_add(ms(config.interval).saturating_mul(2))
}

/// Judges the stored mark (`Err`: it could not be read) at `now`. `deployed_at` is when the
/// Durable Object first saw a request: a fresh deployment is not stale before one interval's
/// worth of time has had a chance to sweep.
pub fn assess(
    config: &Config,
    mark: Result<Option<Mark>, String>,
    now: EpochMs,
    deployed_at: Option<EpochMs>,
) -> Verdict {
    let mut problems = Vec::new();
    let stale_sweep = stale_sweep_ms(config);
    let stale_detached = stale_detached_ms(config);
    let mark = match mark {
        Ok(m) => m,
        Err(e) => {
            problems.push(format!("cannot read the last sweep: {e}"));
            None
        }
    };
    let age = mark
        .as_ref()
        .map(|m| now.saturating_sub(m.finished_at).max(0));
    let over = |v: i64, limit: u64| v > i64::try_from(limit).unwrap_or(i64::MAX);
    match (&mark, age) {
        (Some(_), Some(age)) if over(age, stale_sweep) => problems.push(format!(
            "the last sweep finished {}s ago, longer than the wall limit + 2 intervals ({}s): \
             the alarm is not firing (the cron re-arms it within 5 minutes) or every sweep fails \
             before recording (see Workers Logs)",
            age / 1000,
            stale_sweep / 1000
        )),
        (None, _) if problems.is_empty() => {
            let waited = deployed_at.map_or(0, |d| now.saturating_sub(d));
            if over(waited, stale_sweep) {
                problems.push(format!(
                    "no sweep has finished in {}s since the first request: the alarm is not \
                     firing (see Workers Logs)",
                    waited / 1000
                ));
            }
        }
        _ => {}
    }
    if let Some(m) = &mark {
        if let Some(e) = &m.error {
            problems.push(format!("the last alarm could not sweep: {e}"));
        }
        if let Some(e) = &m.listing_error {
            problems.push(format!(
                "the last sweep could not list the detached runs, so it swept none: {e}"
            ));
        }
        if let Some(d) = &m.damaged {
            problems.push(format!(
                "the last sweep stopped at damage in the database and swept nothing after it \
                 (no run recorded terminal, no sandbox destroyed): {d}"
            ));
        }
        if let Some(n) = m.leaked.filter(|n| *n > 0) {
            problems.push(format!(
                "{n} sandbox(es) of finished runs could not be destroyed and may still be running \
                 (and billing); every sweep retries them: the reclaim ledger's lastError says why"
            ));
        }
        if let Some(wait) = m.oldest_detached_ms.filter(|w| over(*w, stale_detached)) {
            problems.push(format!(
                "the oldest detached run had waited {}s, longer than the TTL + run budget + 2 \
                 intervals ({}s): sweeps are not keeping up",
                wait / 1000,
                stale_detached / 1000
            ));
        }
    }
    Verdict {
        healthy: problems.is_empty(),
        problems,
        now,
        last_sweep: mark,
        last_sweep_age_ms: age,
        stale_sweep_after_ms: stale_sweep,
        stale_detached_after_ms: stale_detached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DETACHED_TTL, SANDBOXD_TOKEN, SANDBOXD_URL};

    fn config() -> Config {
        Config::from_lookup(|k| match k {
            DETACHED_TTL => Some("30m".into()),
            SANDBOXD_URL => Some("http://127.0.0.1:1".into()),
            SANDBOXD_TOKEN => Some("t0123456789abcdef".into()),
            _ => None,
        })
        .unwrap()
    }

    const NOW: EpochMs = 1_700_000_000_000;

    fn fresh() -> Mark {
        Mark {
            finished_at: NOW - 30_000,
            leaked: Some(0),
            oldest_detached_ms: Some(60_000),
            ..Mark::default()
        }
    }

    #[test]
    fn a_recent_clean_sweep_is_healthy_200() {
        let v = assess(&config(), Ok(Some(fresh())), NOW, Some(NOW - 3_600_000));
        assert!(v.healthy, "{v:?}");
        assert_eq!(v.http_status(), 200);
    }

    #[test]
    fn each_problem_alone_is_unhealthy_503_and_says_what_to_look_at() {
        let c = config();
        let stale = stale_sweep_ms(&c) as i64;
        let cases: Vec<(Result<Option<Mark>, String>, &str)> = vec![
            (
                Ok(Some(Mark {
                    leaked: Some(2),
                    ..fresh()
                })),
                "2 sandbox(es)",
            ),
            (
                Ok(Some(Mark {
                    oldest_detached_ms: Some(stale_detached_ms(&c) as i64 + 1),
                    ..fresh()
                })),
                "oldest detached run",
            ),
            (
                Ok(Some(Mark {
                    finished_at: NOW - stale - 1,
                    ..fresh()
                })),
                "the last sweep finished",
            ),
            (
                Ok(Some(Mark {
                    listing_error: Some("D1_ERROR".into()),
                    ..fresh()
                })),
                "could not list",
            ),
            (
                Ok(Some(Mark {
                    damaged: Some("no such table: transcripts".into()),
                    ..fresh()
                })),
                "stopped at damage",
            ),
            (
                Ok(Some(Mark::failed("REAPER_DETACHED_TTL is not set", NOW))),
                "could not sweep",
            ),
            (Err("storage unavailable".into()), "cannot read"),
            (Ok(None), "no sweep has finished"),
        ];
        for (mark, says) in cases {
            let v = assess(&c, mark, NOW, Some(NOW - stale - 1));
            assert_eq!(v.http_status(), 503, "{says}: {v:?}");
            assert!(
                v.problems.iter().any(|p| p.contains(says)),
                "{says}: {:?}",
                v.problems
            );
        }
    }

    #[test]
    fn a_fresh_deployment_is_not_stale_before_it_had_time_to_sweep() {
        let c = config();
        let v = assess(&c, Ok(None), NOW, Some(NOW - 1_000));
        assert!(v.healthy, "{v:?}");
    }
}
