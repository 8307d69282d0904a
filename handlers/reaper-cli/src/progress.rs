//! Progress during a long sweep. On a terminal (`TERM` set, not `dumb`): a spinner (`indicatif`) with the run steps so
//! far and the step in progress, at once. Otherwise (a log file, a journal): quiet for the quick
//! sweeps a scheduler runs every minute, then, once a sweep has run for `--progress-after`, one
//! timestamped line per run step and a heartbeat line every `--progress-after` while a single
//! step runs long, so a 15 s sweep is never silent.
//!
//! Time comes from an injected [`Clock`] and lines go to an injected writer, so the thresholds
//! are tested in virtual time.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use reaper_core::{Clock, EpochMs};
use reaper_local::SystemClock;

use crate::render::timestamp;

/// What `watch` is told once per sweep, when the sweep passes `--progress-after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slow {
    /// The sweep's number in this process (1 for the first).
    pub n: u64,
    pub elapsed_ms: i64,
    pub steps: u64,
    /// The step in progress, e.g. `replaying the journal of run run-7`.
    pub current: Option<String>,
}

type OnSlow = Box<dyn Fn(&Slow) + Send + Sync>;

/// Cheap to clone: every clone reports the same sweep.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` never reports.
    after: Option<Duration>,
    clock: Arc<dyn Clock>,
    sink: Sink,
    state: Mutex<State>,
    on_slow: Mutex<Option<OnSlow>>,
}

enum Sink {
    /// A terminal: one spinner per sweep, cleared when the sweep ends.
    Bar(Mutex<Option<ProgressBar>>),
    Lines(Mutex<Box<dyn Write + Send>>),
}

#[derive(Debug, Default)]
struct State {
    sweeps: u64,
    started: EpochMs,
    steps: u64,
    current: Option<String>,
    last_line: Option<EpochMs>,
    slow_told: bool,
}

impl Progress {
    /// Progress on stderr: a spinner at once on a terminal, lines after `after` otherwise.
    pub fn new(after: Option<Duration>) -> Self {
        // A terminal that cannot move the cursor (`TERM` unset or `dumb`) gets lines: the
        // spinner would stay hidden there.
        let dumb = std::env::var("TERM").map_or(true, |t| t == "dumb");
        let terminal = std::io::stderr().is_terminal();
        if terminal && !dumb {
            Self::build(after, Arc::new(SystemClock), Sink::Bar(Mutex::new(None)))
        } else if terminal {
            // Someone is watching: lines at once, as the spinner would be.
            let after = after.map(|_| Duration::ZERO);
            Self::lines(after, Arc::new(SystemClock), Box::new(std::io::stderr()))
        } else {
            Self::lines(after, Arc::new(SystemClock), Box::new(std::io::stderr()))
        }
    }

    /// Plain lines to `out`, timed by `clock`.
    pub fn lines(
        after: Option<Duration>,
        clock: Arc<dyn Clock>,
        out: Box<dyn Write + Send>,
    ) -> Self {
        Self::build(after, clock, Sink::Lines(Mutex::new(out)))
    }

    fn build(after: Option<Duration>, clock: Arc<dyn Clock>, sink: Sink) -> Self {
        Progress {
            inner: Arc::new(Inner {
                after,
                clock,
                sink,
                state: Mutex::new(State::default()),
                on_slow: Mutex::new(None),
            }),
        }
    }

    /// Called once per sweep that passes `--progress-after` (`watch` prints a line).
    pub fn on_slow(&self, f: impl Fn(&Slow) + Send + Sync + 'static) {
        *lock(&self.inner.on_slow) = Some(Box::new(f));
    }

    /// How often [`Progress::tick`] is worth calling during a sweep: every `--progress-after`
    /// (at least every second, so `0ms` does not spin); `None` when nothing is reported.
    pub fn heartbeat(&self) -> Option<Duration> {
        self.inner.after.map(|a| a.max(Duration::from_secs(1)))
    }

    pub fn start_sweep(&self) {
        let now = self.inner.clock.now_ms();
        {
            let mut s = lock(&self.inner.state);
            let sweeps = s.sweeps + 1;
            *s = State {
                sweeps,
                started: now,
                ..State::default()
            };
        }
        if let (Sink::Bar(bar), Some(_)) = (&self.inner.sink, self.inner.after) {
            let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            spinner.set_style(
                ProgressStyle::with_template("{spinner} sweep {elapsed}: {pos} run step(s) {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            spinner.enable_steady_tick(Duration::from_millis(120));
            *lock(bar) = Some(spinner);
        }
    }

    /// A run step begins: `what` run `run_id`.
    pub fn step(&self, what: &str, run_id: &str) {
        let Some(after) = self.inner.after else {
            return;
        };
        let now = self.inner.clock.now_ms();
        let current = format!("{what} run {run_id}");
        let (elapsed, steps) = {
            let mut s = lock(&self.inner.state);
            s.steps += 1;
            s.current = Some(current.clone());
            (now - s.started, s.steps)
        };
        match &self.inner.sink {
            Sink::Bar(bar) => {
                if let Some(b) = lock(bar).as_ref() {
                    b.set_position(steps);
                    b.set_message(format!("· {current}"));
                }
            }
            Sink::Lines(out) => {
                if elapsed >= after.as_millis() as i64 {
                    lock(&self.inner.state).last_line = Some(now);
                    let _ = writeln!(
                        lock(out),
                        "{} reaper: sweep {:.1}s: {current}",
                        timestamp(now),
                        elapsed as f64 / 1000.0
                    );
                }
                self.tell_slow(now);
            }
        }
    }

    /// The heartbeat: a line when the sweep has run past `--progress-after` and nothing was
    /// printed for that long (one long step), and `watch`'s line once per slow sweep.
    pub fn tick(&self) {
        let Some(after) = self.inner.after else {
            return;
        };
        let after = after.as_millis() as i64;
        let now = self.inner.clock.now_ms();
        if let Sink::Lines(out) = &self.inner.sink {
            let line = {
                let mut s = lock(&self.inner.state);
                let elapsed = now - s.started;
                let quiet_for = s.last_line.map_or(elapsed, |l| now - l);
                if elapsed >= after && quiet_for >= after.max(1) {
                    s.last_line = Some(now);
                    Some(format!(
                        "{} reaper: sweep {:.1}s: still running, {} run step(s) so far{}",
                        timestamp(now),
                        elapsed as f64 / 1000.0,
                        s.steps,
                        s.current
                            .as_ref()
                            .map(|c| format!(", now {c}"))
                            .unwrap_or_else(|| ", listing the detached runs".into())
                    ))
                } else {
                    None
                }
            };
            if let Some(line) = line {
                let _ = writeln!(lock(out), "{line}");
            }
        }
        self.tell_slow(now);
    }

    fn tell_slow(&self, now: EpochMs) {
        let Some(after) = self.inner.after else {
            return;
        };
        let slow = {
            let mut s = lock(&self.inner.state);
            let elapsed = now - s.started;
            if s.slow_told || elapsed < after.as_millis() as i64 || after.is_zero() {
                return;
            }
            s.slow_told = true;
            Slow {
                n: s.sweeps,
                elapsed_ms: elapsed,
                steps: s.steps,
                current: s.current.clone(),
            }
        };
        if let Some(f) = lock(&self.inner.on_slow).as_ref() {
            f(&slow);
        }
    }

    /// The sweep ended: the spinner goes away.
    pub fn finish(&self) {
        if let Sink::Bar(bar) = &self.inner.sink {
            if let Some(b) = lock(bar).take() {
                b.finish_and_clear();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    struct Manual(AtomicI64);
    impl Clock for Manual {
        fn now_ms(&self) -> EpochMs {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Captured {
        fn take(&self) -> Vec<String> {
            let bytes = std::mem::take(&mut *lock(&self.0));
            String::from_utf8(bytes)
                .unwrap()
                .lines()
                .map(String::from)
                .collect()
        }
    }

    const T0: EpochMs = 1_800_000_000_000;

    fn at(clock: &Manual, ms: i64) {
        clock.0.store(T0 + ms, Ordering::SeqCst);
    }

    #[test]
    fn a_long_step_prints_a_timestamped_heartbeat_every_progress_after_and_a_quick_sweep_nothing() {
        let clock = Arc::new(Manual(AtomicI64::new(T0)));
        let out = Captured::default();
        let slow = Arc::new(Mutex::new(Vec::new()));
        let p = Progress::lines(
            Some(Duration::from_secs(2)),
            clock.clone(),
            Box::new(out.clone()),
        );
        let told = slow.clone();
        p.on_slow(move |s| lock(&told).push(s.clone()));

        // A quick sweep: steps and ticks inside the threshold print nothing.
        p.start_sweep();
        at(&clock, 500);
        p.step("probing", "run-a");
        at(&clock, 1_999);
        p.tick();
        p.finish();
        assert_eq!(out.take(), Vec::<String>::new());
        assert!(lock(&slow).is_empty());

        // A slow one: one step that runs for 7 s.
        at(&clock, 10_000);
        p.start_sweep();
        at(&clock, 10_100);
        p.step("replaying the journal of", "run-b");
        at(&clock, 12_000);
        p.tick();
        at(&clock, 13_000);
        p.tick(); // one second after the last line: quiet
        at(&clock, 14_000);
        p.tick();
        at(&clock, 17_100);
        p.step("probing", "run-c");
        p.finish();
        assert_eq!(
            out.take(),
            vec![
                "2027-01-15T08:00:12Z reaper: sweep 2.0s: still running, 1 run step(s) so far, \
                 now replaying the journal of run run-b",
                "2027-01-15T08:00:14Z reaper: sweep 4.0s: still running, 1 run step(s) so far, \
                 now replaying the journal of run run-b",
                "2027-01-15T08:00:17Z reaper: sweep 7.1s: probing run run-c",
            ]
        );
        assert_eq!(
            *lock(&slow),
            vec![Slow {
                n: 2,
                elapsed_ms: 2_000,
                steps: 1,
                current: Some("replaying the journal of run run-b".into()),
            }],
            "watch is told once per slow sweep"
        );
    }

    #[test]
    fn a_sweep_slow_before_its_first_step_says_it_is_listing() {
        let clock = Arc::new(Manual(AtomicI64::new(T0)));
        let out = Captured::default();
        let p = Progress::lines(
            Some(Duration::from_secs(1)),
            clock.clone(),
            Box::new(out.clone()),
        );
        p.start_sweep();
        at(&clock, 3_000);
        p.tick();
        assert_eq!(
            out.take(),
            vec![
                "2027-01-15T08:00:03Z reaper: sweep 3.0s: still running, 0 run step(s) so far, \
                  listing the detached runs"
            ]
        );
    }

    #[test]
    fn progress_off_prints_nothing_however_long_the_sweep() {
        let clock = Arc::new(Manual(AtomicI64::new(T0)));
        let out = Captured::default();
        let p = Progress::lines(None, clock.clone(), Box::new(out.clone()));
        p.start_sweep();
        at(&clock, 60_000);
        p.step("probing", "run-a");
        p.tick();
        assert!(out.take().is_empty());
        assert_eq!(p.heartbeat(), None);
    }
}
