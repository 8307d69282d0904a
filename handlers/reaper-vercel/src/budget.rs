//! The invocation's time budget. `vercel_runtime` exposes no deadline, so the function is told
//! `maxDuration` through `REAPER_BUDGET` (read by `reaper-serverless`) and counts from the
//! request's arrival.

use std::time::Duration;

/// The `maxDuration` in `vercel.json`, used when `REAPER_BUDGET` is unset (Vercel's Fluid default,
/// allowed on every plan). A tidy test fails when the two differ.
pub const DEFAULT_MAX_DURATION_SECS: u64 = 300;

/// The budget of one invocation: `REAPER_BUDGET` when set, else [`DEFAULT_MAX_DURATION_SECS`].
pub fn budget(configured: Option<Duration>) -> Duration {
    configured.unwrap_or(Duration::from_secs(DEFAULT_MAX_DURATION_SECS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_budget_is_the_vercel_json_max_duration_and_a_set_one_wins() {
        assert_eq!(budget(None), Duration::from_secs(300));
        assert_eq!(
            budget(Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
    }
}
