//! `tracing` to Workers Logs: every event becomes one JSON line (`level`, `target`, `message` and
//! its fields at the top level) handed to a [`LineSink`]. In the Worker the sink is `console`
//! (`console.error` for errors, `console.warn` for warnings, `console.log` otherwise): Workers Logs
//! ingests console output and indexes a JSON line's keys as fields. Plain Rust: the formatting and
//! the summary event are tested natively with a capturing sink.
//!
//! No timestamps: Workers Logs stamps every line itself, and `SystemTime::now()` panics on
//! wasm32-unknown-unknown. No spans: the core emits events only.

use std::io;
use std::sync::Arc;

use reaper_core::reap::SweepReport;
use reaper_core::EpochMs;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::plan::SweepPlan;

/// Events below this level are dropped: the core's per-run `debug` events (a producing run
/// left alone, every sweep) would flood the logs.
pub const LEVEL: LevelFilter = LevelFilter::INFO;

/// The target of the handler's own events (the core's use `reaper`).
pub const TARGET: &str = "reaper::cloudflare";

/// Where formatted lines go: one call per event, the line without its newline.
pub trait LineSink: Send + Sync + 'static {
    fn line(&self, level: Level, line: &str);
}

/// A [`MakeWriter`] whose writers each collect one formatted event and hand it to the sink as a
/// single line when dropped (the formatter writes an event, then drops its writer).
pub struct Lines<S>(Arc<S>);

impl<S> Lines<S> {
    pub fn new(sink: S) -> Self {
        Lines(Arc::new(sink))
    }
}

/// The writer for one event.
pub struct LineWriter<S: LineSink> {
    sink: Arc<S>,
    level: Level,
    buf: Vec<u8>,
}

impl<S: LineSink> io::Write for LineWriter<S> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<S: LineSink> Drop for LineWriter<S> {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.buf);
        let line = text.trim_end_matches('\n');
        if !line.is_empty() {
            self.sink.line(self.level, line);
        }
    }
}

impl<S: LineSink> Lines<S> {
    fn writer(&self, level: Level) -> LineWriter<S> {
        LineWriter {
            sink: self.0.clone(),
            level,
            buf: Vec::new(),
        }
    }
}

impl<'a, S: LineSink> MakeWriter<'a> for Lines<S> {
    type Writer = LineWriter<S>;

    fn make_writer(&'a self) -> Self::Writer {
        self.writer(Level::INFO)
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        self.writer(*meta.level())
    }
}

/// The JSON-lines layer over `sink`, filtered at [`LEVEL`].
pub fn layer<S, K>(sink: K) -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    K: LineSink,
{
    tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .without_time()
        .with_ansi(false)
        .with_target(true)
        .with_writer(Lines::new(sink))
        .with_filter(LEVEL)
}

/// A subscriber that writes JSON lines to `sink`.
pub fn subscriber(sink: impl LineSink) -> impl Subscriber + Send + Sync + 'static {
    tracing_subscriber::registry().with(layer(sink))
}

/// Logs one sweep in one event: its state, the counts (all eight outcomes, considered, probed,
/// deferred, corrupt rows), the reclaim ledger (retried, settled, pending, leaked), how the batch
/// was sized, and when the next alarm fires. `error` when a run failed, a reclaim failed, a
/// sandbox is leaked, the ledger could not be read or a row is corrupt; `warn` when a run ran over
/// its budget; `info` otherwise.
pub fn sweep_summary(
    report: &SweepReport,
    plan: &SweepPlan,
    subrequests: &crate::meter::Used,
    next_alarm: EpochMs,
) {
    let r = &report.report;
    let o = &r.outcomes;
    let ledger = &r.reclaims;
    let state = serde_json::to_value(&report.sweep)
        .ok()
        .and_then(|v| v.get("state").and_then(|s| s.as_str()).map(str::to_owned))
        .unwrap_or_default();
    macro_rules! summary {
        ($level:expr) => {
            tracing::event!(
                target: TARGET,
                $level,
                state = %state,
                considered = r.considered,
                probed = r.probed,
                deferred = r.deferred,
                finalized = o.finalized,
                expired = o.expired,
                producing = o.producing,
                unknown = o.unknown,
                budget_exceeded = o.budget_exceeded,
                not_claimed = o.not_claimed,
                reclaim_failed = o.reclaim_failed,
                failed = o.failed,
                corrupt = r.corrupt.len(),
                reclaims_retried = ledger.retried,
                reclaims_settled = ledger.settled,
                sandboxes_pending = ledger.ledger.map(|l| l.pending),
                sandboxes_leaked = ledger.leaked(),
                backlog = r.slo.backlog,
                backlog_exact = r.slo.backlog_exact,
                oldest_detached_ms = r.slo.oldest_detached_ms,
                max_detached_to_finalized_ms = r.slo.max_detached_to_finalized_ms,
                max_ttl_to_destroyed_ms = r.slo.max_ttl_to_destroyed_ms,
                ledger_error = ledger.error.as_deref(),
                listing_error = r.listing_error.as_deref(),
                damaged = r.damaged.as_deref(),
                duration_ms = report.duration_ms,
                max_runs = plan.max_runs,
                limited_by = plan.limited_by,
                subrequests_fetch = subrequests.fetch,
                subrequests_d1 = subrequests.d1,
                d1_rows_read = subrequests.d1_rows_read,
                subrequests_stopped = subrequests.stopped,
                deadline = plan.deadline,
                next_alarm,
                "sweep summary"
            )
        };
    }
    let leaking = ledger.error.is_some()
        || ledger.leaked().is_some_and(|n| n > 0)
        || r.listing_error.is_some();
    if o.failed > 0
        || r.damaged.is_some()
        || o.reclaim_failed > 0
        || !r.corrupt.is_empty()
        || leaking
    {
        summary!(Level::ERROR);
    } else if o.budget_exceeded > 0 {
        summary!(Level::WARN);
    } else {
        summary!(Level::INFO);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use reaper_core::reap::{CorruptRow, ReapReport, SweepStatus};
    use serde_json::{json, Value};

    use super::*;
    use crate::config::{Config, DETACHED_TTL, SANDBOXD_TOKEN, SANDBOXD_URL};

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

    impl LineSink for Capture {
        fn line(&self, level: Level, line: &str) {
            self.0.lock().unwrap().push((level, line.to_owned()));
        }
    }

    impl Capture {
        fn lines(&self) -> Vec<(Level, Value)> {
            self.0
                .lock()
                .unwrap()
                .iter()
                .map(|(level, line)| {
                    let value = serde_json::from_str(line)
                        .unwrap_or_else(|e| panic!("not one JSON object: {line:?}: {e}"));
                    (*level, value)
                })
                .collect()
        }
    }

    fn captured(f: impl FnOnce()) -> Vec<(Level, Value)> {
        let capture = Capture::default();
        tracing::subscriber::with_default(subscriber(capture.clone()), f);
        capture.lines()
    }

    fn plan() -> SweepPlan {
        let config = Config::from_lookup(|k| match k {
            DETACHED_TTL => Some("30m".into()),
            SANDBOXD_URL => Some("http://127.0.0.1:1".into()),
            SANDBOXD_TOKEN => Some("t0123456789abcdef".into()),
            "REAPER_PLAN" => Some("paid".into()),
            _ => None,
        })
        .expect("a valid config");
        crate::plan::plan(&config, "test", 1_000)
    }

    fn report(edit: impl FnOnce(&mut ReapReport)) -> SweepReport {
        let mut report = ReapReport::default();
        edit(&mut report);
        SweepReport {
            sweep: SweepStatus::Swept,
            started_at: 1_000,
            duration_ms: 42,
            report,
        }
    }

    #[test]
    fn an_event_is_one_json_line_with_level_target_message_and_fields() {
        let lines = captured(|| {
            tracing::error!(target: "reaper", run_id = "run-1", error = %"boom", "reclaiming the run's sandbox failed");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let (level, line) = &lines[0];
        assert_eq!(*level, Level::ERROR, "errors go to console.error");
        assert_eq!(
            line,
            &json!({
                "level": "ERROR",
                "target": "reaper",
                "message": "reclaiming the run's sandbox failed",
                "run_id": "run-1",
                "error": "boom",
            })
        );
    }

    #[test]
    fn debug_events_are_dropped_and_info_and_warn_keep_their_level() {
        let lines = captured(|| {
            tracing::debug!(target: "reaper", run_id = "r", "leaving the run alone");
            tracing::info!(target: "reaper", "sweep complete");
            tracing::warn!(target: "reaper", "renewing the sweep lease failed");
        });
        let levels: Vec<_> = lines
            .iter()
            .map(|(l, v)| (*l, v["level"].clone()))
            .collect();
        assert_eq!(
            levels,
            vec![(Level::INFO, json!("INFO")), (Level::WARN, json!("WARN"))]
        );
    }

    #[test]
    fn a_message_with_quotes_and_newlines_stays_one_valid_json_line() {
        let capture = Capture::default();
        tracing::subscriber::with_default(subscriber(capture.clone()), || {
            tracing::info!(target: "reaper", detail = "a \"quoted\"\nsecond line", "odd");
        });
        let raw = capture.0.lock().unwrap().clone();
        assert_eq!(raw.len(), 1);
        assert!(!raw[0].1.contains('\n'), "{:?}", raw[0].1);
        assert_eq!(capture.lines()[0].1["detail"], "a \"quoted\"\nsecond line");
    }

    #[test]
    fn the_sweep_summary_is_one_event_with_every_count() {
        let report = report(|r| {
            r.considered = 9;
            r.probed = 7;
            r.deferred = 2;
            r.outcomes.finalized = 1;
            r.outcomes.expired = 2;
            r.outcomes.producing = 3;
            r.outcomes.unknown = 4;
            r.outcomes.budget_exceeded = 5;
            r.outcomes.not_claimed = 6;
            r.outcomes.reclaim_failed = 7;
            r.outcomes.failed = 8;
            r.corrupt.push(CorruptRow {
                key: Some("run-x".into()),
                error: "bad".into(),
            });
            r.slo.backlog = 12;
            r.slo.oldest_detached_ms = Some(3_600_000);
            r.reclaims.retried = 3;
            r.reclaims.settled = 2;
            r.reclaims.ledger = Some(reaper_core::LedgerCounts {
                pending: 5,
                leaked: 1,
                oldest_first_seen: Some(1),
            });
        });
        let plan = plan();
        let used = crate::meter::Used {
            fetch: 30,
            d1: 70,
            d1_rows_read: 1_030,
            stopped: true,
        };
        let lines = captured(|| sweep_summary(&report, &plan, &used, 61_000));
        assert_eq!(lines.len(), 1, "{lines:?}");
        let (level, line) = &lines[0];
        assert_eq!(*level, Level::ERROR);
        let mut counts = line.clone();
        let counts = counts.as_object_mut().unwrap();
        for key in ["max_runs", "limited_by", "deadline"] {
            assert!(counts.remove(key).is_some(), "no {key} in {line}");
        }
        assert_eq!(
            Value::Object(counts.clone()),
            json!({
                "level": "ERROR",
                "target": TARGET,
                "message": "sweep summary",
                "state": "swept",
                "considered": 9,
                "probed": 7,
                "deferred": 2,
                "finalized": 1,
                "expired": 2,
                "producing": 3,
                "unknown": 4,
                "budget_exceeded": 5,
                "not_claimed": 6,
                "reclaim_failed": 7,
                "failed": 8,
                "corrupt": 1,
                "reclaims_retried": 3,
                "reclaims_settled": 2,
                "sandboxes_pending": 5,
                "sandboxes_leaked": 1,
                "backlog": 12,
                "backlog_exact": false,
                "oldest_detached_ms": 3_600_000,
                "duration_ms": 42,
                "subrequests_fetch": 30,
                "subrequests_d1": 70,
                "d1_rows_read": 1_030,
                "subrequests_stopped": true,
                "next_alarm": 61_000,
            })
        );
    }

    #[test]
    fn a_clean_sweep_summary_is_info_and_a_budget_overrun_is_a_warning() {
        let plan = plan();
        let clean = report(|r| r.outcomes.finalized = 1);
        let over = report(|r| r.outcomes.budget_exceeded = 1);
        let lines = captured(|| {
            sweep_summary(&clean, &plan, &Default::default(), 0);
            sweep_summary(&over, &plan, &Default::default(), 0);
        });
        let levels: Vec<_> = lines.iter().map(|(l, _)| *l).collect();
        assert_eq!(levels, vec![Level::INFO, Level::WARN]);
        assert_eq!(
            lines[0].1["reclaim_failed"], 0,
            "zero counts are logged too"
        );
    }

    #[test]
    fn a_sweep_stopped_by_damage_is_an_error_summary_naming_the_damage() {
        let plan = plan();
        let damaged = report(|r| {
            r.deferred = 2;
            r.damaged = Some("the database is damaged: no such table: transcripts".into());
        });
        let lines = captured(|| sweep_summary(&damaged, &plan, &Default::default(), 0));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].0, Level::ERROR);
        assert!(
            lines[0].1["damaged"]
                .as_str()
                .is_some_and(|d| d.contains("no such table: transcripts")),
            "{:?}",
            lines[0].1
        );
    }
}
