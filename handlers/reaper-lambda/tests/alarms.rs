//! The sweep alarms of `infra/aws/template.yaml`, as the SAM translator hands them to
//! CloudFormation, evaluated the way CloudWatch evaluates a metric alarm (period buckets,
//! statistic, M out of N, the missing-data treatment) over the datapoints the function's own
//! EMF documents produce, for every `ScheduleMinutes` the template allows.
//!
//! The evaluator follows the CloudWatch documentation ("Evaluating an alarm", "Configuring how
//! CloudWatch alarms treat missing data"): a period's datapoint is the statistic of the values
//! whose timestamp falls in it; the alarm looks at the last `EvaluationPeriods` periods and
//! goes to ALARM when `DatapointsToAlarm` of them breach; `breaching`/`notBreaching` stand in
//! for missing periods, `ignore` keeps the state when every period is missing, `missing` goes
//! to INSUFFICIENT_DATA then.

mod common;

use common::{tools, workspace_root};
use reaper_core::reap::{ReapReport, SweepReport, SweepStatus};
use reaper_lambda::emf;
use reaper_serverless::{plan, ServerlessConfig, ServerlessReport};
use serde_json::Value;

fn translated() -> Value {
    static ONCE: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    ONCE.get_or_init(translate).clone()
}

fn translate() -> Value {
    let output = std::process::Command::new(tools().join("python"))
        .arg(workspace_root().join("handlers/reaper-lambda/tests/sam_translate.py"))
        .arg(workspace_root().join("infra/aws/template.yaml"))
        .output()
        .expect("run the SAM translator");
    assert!(
        output.status.success(),
        "the SAM translator failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the translator prints JSON")
}

/// A value of the translated template with `Ref` to a parameter and `Fn::FindInMap` resolved,
/// as CloudFormation resolves them for one set of parameter values.
fn resolve(t: &Value, v: &Value, params: &dyn Fn(&str) -> String) -> Value {
    if let Some(name) = v.get("Ref").and_then(Value::as_str) {
        if t["Parameters"].get(name).is_some() {
            return Value::String(params(name));
        }
    }
    if let Some(args) = v.get("Fn::FindInMap").and_then(Value::as_array) {
        let key = |i: usize| match resolve(t, &args[i], params) {
            Value::String(s) => s,
            other => panic!("FindInMap key {other}"),
        };
        return t["Mappings"][key(0)][key(1)][key(2)].clone();
    }
    v.clone()
}

fn number(v: &Value) -> f64 {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Ok,
    Alarm,
    InsufficientData,
}

/// One alarm of the template as CloudWatch would run it.
#[derive(Debug)]
struct Alarm {
    metric: String,
    statistic: String,
    period_s: i64,
    evaluation_periods: usize,
    datapoints_to_alarm: usize,
    threshold: f64,
    comparison: String,
    missing: String,
}

impl Alarm {
    fn from_template(t: &Value, name: &str, params: &dyn Fn(&str) -> String) -> Alarm {
        let r = &t["Resources"][name];
        assert_eq!(r["Type"], "AWS::CloudWatch::Alarm", "{name}");
        let p = |k: &str| resolve(t, &r["Properties"][k], params);
        let evaluation_periods = number(&p("EvaluationPeriods")) as usize;
        let datapoints = p("DatapointsToAlarm");
        Alarm {
            metric: p("MetricName").as_str().unwrap().into(),
            statistic: p("Statistic").as_str().unwrap().into(),
            period_s: number(&p("Period")) as i64,
            evaluation_periods,
            datapoints_to_alarm: if datapoints.is_null() {
                evaluation_periods
            } else {
                number(&datapoints) as usize
            },
            threshold: number(&p("Threshold")),
            comparison: p("ComparisonOperator").as_str().unwrap().into(),
            missing: p("TreatMissingData")
                .as_str()
                .unwrap_or("missing")
                .to_string(),
        }
    }

    fn breaches(&self, value: f64) -> bool {
        match self.comparison.as_str() {
            "GreaterThanThreshold" => value > self.threshold,
            "GreaterThanOrEqualToThreshold" => value >= self.threshold,
            "LessThanThreshold" => value < self.threshold,
            "LessThanOrEqualToThreshold" => value <= self.threshold,
            other => panic!("comparison {other}"),
        }
    }

    /// The period's datapoint from the values (epoch seconds, value) of this alarm's metric.
    fn datapoint(&self, values: &[(i64, f64)], start: i64) -> Option<f64> {
        let inside: Vec<f64> = values
            .iter()
            .filter(|(at, _)| *at >= start && *at < start + self.period_s)
            .map(|(_, v)| *v)
            .collect();
        if inside.is_empty() {
            return None;
        }
        Some(match self.statistic.as_str() {
            "Sum" => inside.iter().sum(),
            "Maximum" => inside.iter().cloned().fold(f64::MIN, f64::max),
            "SampleCount" => inside.len() as f64,
            other => panic!("statistic {other}"),
        })
    }

    /// The state after evaluating at `now` (a period boundary), from `previous`.
    fn evaluate(&self, values: &[(i64, f64)], now: i64, previous: State) -> State {
        let periods: Vec<Option<bool>> = (1..=self.evaluation_periods as i64)
            .map(|back| {
                self.datapoint(values, now - back * self.period_s)
                    .map(|v| self.breaches(v))
            })
            .collect();
        let substituted: Vec<Option<bool>> = periods
            .iter()
            .map(|p| match (p, self.missing.as_str()) {
                (Some(b), _) => Some(*b),
                (None, "breaching") => Some(true),
                (None, "notBreaching") => Some(false),
                (None, _) => None,
            })
            .collect();
        let breaching = substituted.iter().filter(|p| **p == Some(true)).count();
        if breaching >= self.datapoints_to_alarm {
            return State::Alarm;
        }
        if substituted.iter().all(Option::is_none) {
            return match self.missing.as_str() {
                "ignore" => previous,
                _ => State::InsufficientData,
            };
        }
        State::Ok
    }
}

/// What one tick did.
#[derive(Debug, Clone, Copy)]
enum Tick {
    /// Listed and finished; the ledger counted this many leaked sandboxes (None: not read).
    Swept(Option<u32>),
    /// The lease store (or the listing) failed.
    Failed,
    /// No metrics at all: the init failed, the function timed out or the schedule stopped.
    Missed,
}

fn config() -> ServerlessConfig {
    ServerlessConfig::from_env(|k| {
        Some(
            match k {
                "REAPER_TABLE" => "runs",
                "REAPER_SANDBOXD_URL" => "http://127.0.0.1:1",
                "REAPER_SANDBOXD_TOKEN" => "t0123456789abcdef",
                "REAPER_DETACHED_TTL" => "30m",
                _ => return None,
            }
            .into(),
        )
    })
    .unwrap()
}

/// The EMF document the function writes for a tick, or none.
fn document(tick: Tick, at_ms: i64) -> Option<Value> {
    let (sweep, leaked) = match tick {
        Tick::Missed => return None,
        Tick::Failed => (
            SweepStatus::LeaseUnavailable {
                error: "AccessDeniedException".into(),
            },
            None,
        ),
        Tick::Swept(leaked) => (SweepStatus::Swept, leaked),
    };
    let mut report = ReapReport::default();
    report.reclaims.ledger = leaked.map(|leaked| reaper_core::LedgerCounts {
        pending: leaked as u64,
        leaked: leaked as u64,
        oldest_first_seen: None,
    });
    let report = ServerlessReport {
        sweep: SweepReport {
            sweep,
            started_at: at_ms,
            duration_ms: 1_500,
            report,
        },
        plan: plan(&config(), "alarms", at_ms, at_ms + 300_000),
        dynamodb: Default::default(),
        postgres: None,
    };
    Some(emf::document(&report, "Reaper", "reaper-fn", at_ms))
}

/// Runs `ticks` on a `minutes` schedule (each tick 37 s into its interval, so the metric lands
/// inside the interval it belongs to, as the Scheduler's fixed rate does) and returns the
/// alarm's state after each tick's interval has been evaluated.
fn states(alarm: &Alarm, minutes: i64, ticks: &[Tick]) -> Vec<State> {
    let interval = minutes * 60;
    let start = 1_800_000_000 - 1_800_000_000 % 86_400;
    let mut values = Vec::new();
    let mut state = State::InsufficientData;
    let mut out = Vec::new();
    for (i, tick) in ticks.iter().enumerate() {
        let at = start + i as i64 * interval + 37;
        if let Some(doc) = document(*tick, at * 1000) {
            if let Some(v) = doc.get(&alarm.metric) {
                values.push((at, v.as_f64().unwrap()));
            }
        }
        // CloudWatch evaluates every period; the alarm's period is the interval here, but
        // evaluate at each of its boundaries within the interval all the same.
        let end = start + (i as i64 + 1) * interval;
        let mut now = start + i as i64 * interval + alarm.period_s;
        while now <= end {
            state = alarm.evaluate(&values, now, state);
            now += alarm.period_s;
        }
        out.push(state);
    }
    out
}

fn allowed_schedules(t: &Value) -> Vec<String> {
    t["Parameters"]["ScheduleMinutes"]["AllowedValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn params<'a>(t: &'a Value, minutes: &'a str) -> impl Fn(&str) -> String + 'a {
    move |name| match name {
        "ScheduleMinutes" => minutes.to_string(),
        "MetricsNamespace" => "Reaper".into(),
        other => {
            let d = &t["Parameters"][other]["Default"];
            d.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| d.to_string())
        }
    }
}

fn k(t: &Value) -> usize {
    number(&t["Parameters"]["HeartbeatMissedTicks"]["Default"]) as usize
}

/// `healthy` good sweeps, then `bad` ticks of `tick`: the state after each bad tick.
fn after_bad_ticks(t: &Value, name: &str, minutes: &str, bad: Tick, count: usize) -> Vec<State> {
    let alarm = Alarm::from_template(t, name, &params(t, minutes));
    let healthy = 4;
    let mut ticks = vec![Tick::Swept(Some(0)); healthy];
    ticks.extend(std::iter::repeat_n(bad, count));
    let all = states(&alarm, minutes.parse().unwrap(), &ticks);
    assert_eq!(
        all[healthy - 1],
        State::Ok,
        "{name} on {minutes} min: not OK after good sweeps ({alarm:?})"
    );
    all[healthy..].to_vec()
}

#[test]
fn the_heartbeat_fires_after_k_failed_sweeps_and_not_before_on_every_schedule() {
    let t = translated();
    let k = k(&t);
    for minutes in allowed_schedules(&t) {
        let states = after_bad_ticks(&t, "HeartbeatAlarm", &minutes, Tick::Failed, k);
        assert!(
            states[..k - 1].iter().all(|s| *s == State::Ok),
            "{minutes} min: fired before {k} failed sweeps: {states:?}"
        );
        assert_eq!(
            states[k - 1],
            State::Alarm,
            "{minutes} min: {k} failed sweeps in a row did not fire the heartbeat"
        );
    }
}

#[test]
fn the_heartbeat_fires_after_k_missed_sweeps_and_not_before_on_every_schedule() {
    let t = translated();
    let k = k(&t);
    for minutes in allowed_schedules(&t) {
        let states = after_bad_ticks(&t, "HeartbeatAlarm", &minutes, Tick::Missed, k);
        assert!(
            states[..k - 1].iter().all(|s| *s == State::Ok),
            "{minutes} min: fired before {k} missed sweeps: {states:?}"
        );
        assert_eq!(states[k - 1], State::Alarm, "{minutes} min: {states:?}");
    }
}

#[test]
fn the_sweep_failed_alarm_fires_after_k_failed_sweeps_and_not_before_on_every_schedule() {
    let t = translated();
    let k = k(&t);
    for minutes in allowed_schedules(&t) {
        let states = after_bad_ticks(&t, "SweepFailedAlarm", &minutes, Tick::Failed, k);
        assert!(
            states[..k - 1].iter().all(|s| *s == State::Ok),
            "{minutes} min: fired before {k} failed sweeps: {states:?}"
        );
        assert_eq!(
            states[k - 1],
            State::Alarm,
            "{minutes} min: {k} failed sweeps in a row did not fire: {states:?}"
        );
    }
}

#[test]
fn one_good_sweep_between_failures_keeps_the_sweep_alarms_quiet() {
    let t = translated();
    let k = k(&t);
    for minutes in allowed_schedules(&t) {
        // A healthy history first: a brand-new alarm sees no data before its first sweep.
        let mut ticks = vec![Tick::Swept(Some(0)); k];
        for _ in 0..4 {
            ticks.extend(std::iter::repeat_n(Tick::Failed, k - 1));
            ticks.push(Tick::Swept(Some(0)));
        }
        for name in ["HeartbeatAlarm", "SweepFailedAlarm"] {
            let alarm = Alarm::from_template(&t, name, &params(&t, &minutes));
            let all = states(&alarm, minutes.parse().unwrap(), &ticks);
            assert!(
                !all.contains(&State::Alarm),
                "{name} on {minutes} min fired with a good sweep every {k} ticks: {all:?}"
            );
        }
    }
}

#[test]
fn the_leak_alarm_stays_in_alarm_while_the_leak_persists_and_recovers_on_a_clean_count() {
    let t = translated();
    for minutes in allowed_schedules(&t) {
        let alarm = Alarm::from_template(&t, "LeakedSandboxesAlarm", &params(&t, &minutes));
        // The leak persists across sweeps that do not read the ledger, failed sweeps and a
        // missed tick: none of them says the sandboxes are gone.
        let ticks = [
            Tick::Swept(Some(0)),
            Tick::Swept(Some(2)),
            Tick::Swept(None),
            Tick::Swept(Some(2)),
            Tick::Failed,
            Tick::Missed,
            Tick::Swept(Some(1)),
            Tick::Swept(Some(0)),
        ];
        let all = states(&alarm, minutes.parse().unwrap(), &ticks);
        assert_eq!(all[0], State::Ok, "{minutes} min: {all:?}");
        assert!(
            all[1..7].iter().all(|s| *s == State::Alarm),
            "{minutes} min: a persisting leak left ALARM (a false recovery mail): {all:?}"
        );
        assert_eq!(all[7], State::Ok, "{minutes} min: {all:?}");
    }
}

#[test]
fn every_sweep_alarm_period_is_one_schedule_interval() {
    let t = translated();
    for minutes in allowed_schedules(&t) {
        for name in ["HeartbeatAlarm", "SweepFailedAlarm", "LeakedSandboxesAlarm"] {
            let alarm = Alarm::from_template(&t, name, &params(&t, &minutes));
            assert_eq!(
                alarm.period_s,
                minutes.parse::<i64>().unwrap() * 60,
                "{name} on {minutes} min"
            );
        }
    }
}
