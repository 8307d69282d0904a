//! The cron schedule the function is deployed with, and the longest gap between two of its
//! ticks: what the status path waits before calling a sweep late.
//!
//! The schedule is read from the `vercel.json` compiled into the binary, the same file Vercel
//! deploys the cron from, so the two cannot drift.

use std::time::Duration;

/// The `vercel.json` this binary was built with.
const VERCEL_JSON: &str = include_str!("../vercel.json");

/// Days scanned for the longest gap: five years cover every month length and leap day.
const HORIZON_DAYS: i64 = 5 * 366;

/// A schedule the status path cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("vercel.json's cron schedule {schedule:?} {problem}: use five fields of numbers, `*`, ranges `a-b`, steps `/n` and lists `,` (Vercel's cron syntax)")]
pub struct ScheduleError {
    pub schedule: String,
    pub problem: String,
}

/// The schedule of the first cron in the compiled-in `vercel.json`.
pub fn deployed_schedule() -> Result<String, ScheduleError> {
    let missing = |problem: &str| ScheduleError {
        schedule: String::new(),
        problem: problem.into(),
    };
    let json: serde_json::Value =
        serde_json::from_str(VERCEL_JSON).map_err(|e| missing(&format!("is unreadable: {e}")))?;
    json["crons"][0]["schedule"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| missing("is missing (crons[0].schedule)"))
}

/// The longest time between two consecutive ticks of a five-field cron expression (minute,
/// hour, day of month, month, day of week; UTC, as Vercel runs crons).
pub fn longest_interval(schedule: &str) -> Result<Duration, ScheduleError> {
    let fail = |problem: String| ScheduleError {
        schedule: schedule.into(),
        problem,
    };
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = fields[..] else {
        return Err(fail(format!("has {} fields, not 5", fields.len())));
    };
    let field = |name: &str, text: &str, min: u32, max: u32| {
        parse_field(text, min, max)
            .map_err(|p| fail(format!("has a bad {name} field {text:?}: {p}")))
    };
    let minutes = field("minute", minute, 0, 59)?;
    let hours = field("hour", hour, 0, 23)?;
    let days = field("day-of-month", dom, 1, 31)?;
    let months = field("month", month, 1, 12)?;
    // 7 is Sunday too.
    let mut weekdays = field("day-of-week", dow, 0, 7)?;
    if weekdays & (1 << 7) != 0 {
        weekdays |= 1;
    }
    // Standard cron: when both day fields are restricted, a day matching either one fires.
    let either = !dom.starts_with('*') && !dow.starts_with('*');

    let mut previous: Option<i64> = None;
    let mut longest = 0i64;
    for day in 0..HORIZON_DAYS {
        // From 2024-01-01, a Monday.
        let (m, d, weekday) = civil(19_723 + day);
        let by_dom = days & (1 << d) != 0;
        let by_dow = weekdays & (1 << weekday) != 0;
        let fires = months & (1 << m) != 0
            && if either {
                by_dom || by_dow
            } else {
                by_dom && by_dow
            };
        if !fires {
            continue;
        }
        for h in (0..24).filter(|h| hours & (1 << h) != 0) {
            for min in (0..60).filter(|min| minutes & (1u64 << min) != 0) {
                let at = day * 1_440 + h * 60 + min;
                if let Some(p) = previous {
                    longest = longest.max(at - p);
                }
                previous = Some(at);
            }
        }
    }
    if longest == 0 {
        return Err(fail("fires at most once in five years".into()));
    }
    Ok(Duration::from_secs(longest as u64 * 60))
}

/// The set of values a field allows, as bits.
fn parse_field(text: &str, min: u32, max: u32) -> Result<u64, String> {
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("{s:?} is not a step"))?,
            ),
            None => (part, 1),
        };
        let number = |v: &str| {
            v.parse::<u32>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| format!("{v:?} is not a number from {min} to {max}"))
        };
        let (from, to) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                // `a/n` runs from a to the end.
                None if part.contains('/') => (number(r)?, max),
                None => {
                    let n = number(r)?;
                    (n, n)
                }
            },
        };
        if from > to {
            return Err(format!("{from}-{to} is an empty range"));
        }
        for v in (from..=to).step_by(step as usize) {
            set |= 1 << v;
        }
    }
    Ok(set)
}

/// `(month 1..=12, day 1..=31, weekday 0..=6 with 0 = Sunday)` of a day counted from
/// 1970-01-01 (Howard Hinnant's civil-from-days).
fn civil(days: i64) -> (u32, u32, u32) {
    let weekday = (days + 4).rem_euclid(7) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (m, d, weekday)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minutes(schedule: &str) -> u64 {
        longest_interval(schedule).unwrap().as_secs() / 60
    }

    #[test]
    fn the_calendar_is_right_around_leap_days_and_weekdays() {
        assert_eq!(civil(0), (1, 1, 4), "1970-01-01 was a Thursday");
        assert_eq!(civil(19_723), (1, 1, 1), "2024-01-01 was a Monday");
        assert_eq!(civil(19_723 + 59), (2, 29, 4), "2024-02-29 was a Thursday");
    }

    #[test]
    fn every_n_minutes_hourly_and_daily_schedules_have_their_plain_intervals() {
        assert_eq!(minutes("*/5 * * * *"), 5);
        assert_eq!(minutes("* * * * *"), 1);
        assert_eq!(minutes("0 * * * *"), 60);
        assert_eq!(minutes("30 4 * * *"), 1_440);
        assert_eq!(minutes("0 */6 * * *"), 360);
    }

    #[test]
    fn the_longest_gap_counts_not_the_average_one() {
        // 0, 7, …, 56, then 0 again: the gap across the hour is 4 minutes, the others 7.
        assert_eq!(minutes("*/7 * * * *"), 7);
        // Working hours only: from 17:00 to 09:00 the next day.
        assert_eq!(minutes("0 9-17 * * *"), 16 * 60);
        // Weekdays only: Friday 12:00 to Monday 12:00.
        assert_eq!(minutes("0 12 * * 1-5"), 3 * 1_440);
        assert_eq!(minutes("0,30 * * * *"), 30);
        // Sunday written as 7.
        assert_eq!(minutes("0 0 * * 7"), 7 * 1_440);
    }

    #[test]
    fn restricted_day_of_month_and_day_of_week_fire_on_either() {
        // The 1st of each month or any Monday: never more than a week apart.
        assert_eq!(minutes("0 0 1 * 1"), 7 * 1_440);
        // The 31st only: two months apart across months without one (July 31 → August 31 is
        // one month, but August 31 → October 31 is 61 days).
        assert_eq!(minutes("0 0 31 * *"), 61 * 1_440);
    }

    #[test]
    fn malformed_schedules_are_refused_saying_what_is_wrong() {
        for (schedule, problem) in [
            ("*/5 * * *", "has 4 fields, not 5"),
            (
                "61 * * * *",
                "bad minute field \"61\": \"61\" is not a number from 0 to 59",
            ),
            ("*/0 * * * *", "\"0\" is not a step"),
            ("0 5-2 * * *", "5-2 is an empty range"),
            ("0 0 * * MON", "bad day-of-week field"),
            ("0 0 30 2 *", "fires at most once in five years"),
        ] {
            let e = longest_interval(schedule).unwrap_err().to_string();
            assert!(e.contains(problem), "{schedule}: {e}");
            assert!(e.contains("Vercel's cron syntax"), "{e}");
        }
    }

    #[test]
    fn the_deployed_schedule_is_vercel_jsons_every_five_minutes() {
        let schedule = deployed_schedule().unwrap();
        assert_eq!(schedule, "*/5 * * * *");
        assert_eq!(
            longest_interval(&schedule).unwrap(),
            Duration::from_secs(300)
        );
    }
}
