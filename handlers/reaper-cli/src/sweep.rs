//! `reaper sweep` and `reaper watch`.

use reaper_core::health::{record_last_sweep, LastSweep};
use reaper_core::reap::{sweep_until, ReapOptions, SweepReport, SweepStatus};
use reaper_core::CancellationToken;
use reaper_core::Clock;
use reaper_local::SystemClock;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::{
    PruneSettings, Settings, SweepCmd, SweepSettings, WatchCmd, EVERY, MAX_TIMER_MS, PRUNE_EVERY,
};
use crate::wiring::{self, DriveTuning, Held, Progress, Providers, Sweeper, Trouble};
use crate::{health, prune, render, Exit, Failure};

/// The sweep options for these settings. `now` stays unset: every sweep reads the clock.
pub fn reap_options(s: &SweepSettings, owner: String) -> ReapOptions {
    let mut options = ReapOptions::new(s.detached_ttl_ms, owner);
    options.run_budget_ms = s.run_budget_ms;
    options.max_runs = s.max_runs;
    options.concurrency = s.concurrency;
    options.max_starts_per_sweep = s.max_starts;
    options.start_stopped_inside_ttl = s.start_stopped_inside_ttl;
    options.fence_quiet_ms = s.quiet_window_ms;
    options
}

/// The sweep lease outlives the worst single run twice over; the core renews it between runs.
fn lease_ttl(options: &ReapOptions) -> u64 {
    options.claim_ttl().saturating_mul(2)
}

/// One sweep's result and when this process held the sweep lease for it.
#[derive(Debug)]
pub struct Swept {
    pub report: SweepReport,
    pub held: Option<Held>,
    /// The database failing underneath the sweep (damaged, or the listing failed).
    pub trouble: Trouble,
    /// The provider names this sweep served (instance records naming another were left alone).
    pub providers: Vec<String>,
}

impl Swept {
    /// The report as JSON, with `leaseHeld` and `providers` added, and `databaseDamaged` / `listingError` when
    /// the database failed underneath the sweep.
    pub fn json(&self) -> Value {
        let mut v = serde_json::to_value(&self.report).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut v {
            map.insert("leaseHeld".into(), json!(self.held));
            map.insert("providers".into(), json!(self.providers));
            if let Some(damaged) = self.damaged() {
                map.insert("databaseDamaged".into(), json!(damaged));
            }
            if let Some(listing) = &self.trouble.listing {
                map.insert("listingError".into(), json!(listing));
            }
        }
        v
    }

    /// The damage the sweep met in any table, if it met some (the core stops at it).
    pub fn damaged(&self) -> Option<&String> {
        self.trouble
            .damaged
            .as_ref()
            .or(self.report.report.damaged.as_ref())
    }

    /// Why the sweep could not do its job at all (exit 3), with what to do; `None` when it ran.
    pub fn cannot_run(&self) -> Option<Failure> {
        if let Some(damaged) = self.damaged() {
            return Some(Failure::cannot_run(format!(
                "the sweep stopped short: {damaged}"
            )));
        }
        self.trouble.listing.as_ref().map(|e| {
            Failure::cannot_run(format!(
                "listing the detached runs failed, so nothing was swept: {e}; the next sweep \
                 tries again"
            ))
        })
    }

    pub fn exit(&self) -> Exit {
        match &self.report.sweep {
            SweepStatus::Swept => {
                let r = &self.report.report;
                let o = &r.outcomes;
                if self.cannot_run().is_some() {
                    Exit::CannotRun
                } else if o.failed + o.reclaim_failed > 0
                    || !r.corrupt.is_empty()
                    // A sandbox that may be running unstopped, or a ledger nobody can read
                    // (then nobody knows): either way someone must look.
                    || r.reclaims.leaked() != Some(0)
                    || r.reclaims.error.is_some()
                {
                    Exit::Failures
                } else {
                    Exit::Ok
                }
            }
            SweepStatus::AlreadyRunning { .. } | SweepStatus::Paused { .. } => Exit::Ok,
            SweepStatus::DryRun => match self.cannot_run() {
                Some(_) => Exit::CannotRun,
                None => Exit::Ok,
            },
            SweepStatus::InvalidOptions { .. } => Exit::Usage,
            SweepStatus::LeaseUnavailable { .. } => Exit::CannotRun,
        }
    }
}

pub async fn sweep_once(
    sweeper: &Sweeper,
    options: &ReapOptions,
    stop: Option<&CancellationToken>,
) -> Swept {
    sweeper.progress.start_sweep();
    let sweep = sweep_until(&sweeper.deps, options, lease_ttl(options), stop);
    let report = match sweeper.progress.heartbeat() {
        None => sweep.await,
        Some(every) => {
            tokio::pin!(sweep);
            // The heartbeat keeps a single long step from going silent.
            let mut beat = tokio::time::interval_at(Instant::now() + every, every);
            beat.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    report = &mut sweep => break report,
                    _ = beat.tick() => sweeper.progress.tick(),
                }
            }
        }
    };
    sweeper.progress.finish();
    // The last-sweep mark `status --check` and /healthz judge staleness by; never fatal.
    if let Some(mark) = LastSweep::of(&report, &options.owner) {
        let leases = &*sweeper.deps.leases;
        if let Err(error) = record_last_sweep(leases, &mark, SystemClock.now_ms()).await {
            tracing::warn!(target: "reaper", %error, "recording the last-sweep mark failed; status --check may call the sweeps stale");
        }
    }
    Swept {
        report,
        held: sweeper.take_held(),
        trouble: sweeper.trouble.take(),
        providers: sweeper.providers.clone(),
    }
}

/// `--journal-dir` names a directory inside every sandbox: it must be absolute.
pub fn journal_dir(value: &Option<String>) -> Result<Option<String>, Failure> {
    match value {
        Some(dir) if !dir.starts_with('/') => Err(Failure::usage(format!(
            "invalid value for --journal-dir (REAPER_JOURNAL_DIR): {dir:?}: expected an \
             absolute path such as /tmp/tanstack-runs"
        ))),
        other => Ok(other.clone()),
    }
}

pub async fn run_sweep(a: &SweepCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let settings = SweepSettings::parse(s, &a.sweep)?;
    let journal_dir = journal_dir(&a.sandboxes.journal_dir)?;
    // A dry run opens the database read-only: the store refuses a write too, not only the core.
    let store = if a.dry_run {
        wiring::open_read_only(&a.db).await?
    } else {
        wiring::open(&a.db).await?
    };
    let providers = Providers::from_settings(s, &a.sandboxes).await?;
    let sweeper = Sweeper::new(
        &store,
        &providers,
        journal_dir,
        Progress::new(Some(settings.progress_after)),
        DriveTuning::default(),
    );
    let mut options = reap_options(&settings, wiring::owner_id());
    options.dry_run = a.dry_run;
    options.concurrency_limits.rate_limit = providers.rate_limit.clone();
    let swept = sweep_once(&sweeper, &options, None).await;
    if a.output.json {
        println!("{}", swept.json());
    } else {
        print!("{}", render::sweep_report(&swept.report));
    }
    match swept.cannot_run() {
        Some(failure) => Err(failure),
        None => Ok(swept.exit()),
    }
}

/// SIGTERM and SIGINT, as a stream of names. Installed before the first sweep, so a signal
/// never meets the default action (instant death mid-write).
struct Signals {
    rx: mpsc::UnboundedReceiver<&'static str>,
}

impl Signals {
    fn install() -> Result<Self, Failure> {
        let io = |e: std::io::Error| Failure::cannot_run(format!("cannot handle signals: {e}"));
        let mut term = signal(SignalKind::terminate()).map_err(io)?;
        let mut int = signal(SignalKind::interrupt()).map_err(io)?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let name = tokio::select! {
                    Some(()) = term.recv() => "SIGTERM",
                    Some(()) = int.recv() => "SIGINT",
                    else => break,
                };
                if tx.send(name).is_err() {
                    break;
                }
            }
        });
        Ok(Signals { rx })
    }

    async fn next(&mut self) -> &'static str {
        self.rx.recv().await.unwrap_or("signal handler ended")
    }
}

/// Stdout lines of `watch`: one per sweep, per prune, and at start and shutdown.
struct Lines {
    json: bool,
}

impl Lines {
    fn event(&self, human: String, event: &str, mut fields: Value) {
        if self.json {
            if let Value::Object(map) = &mut fields {
                map.insert("event".into(), json!(event));
                map.insert("at".into(), json!(SystemClock.now_ms()));
            }
            println!("{fields}");
        } else {
            println!("{} {human}", render::timestamp(SystemClock.now_ms()));
        }
    }
}

pub async fn run_watch(a: &WatchCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let settings = SweepSettings::parse(s, &a.sweep)?;
    let prune_settings = PruneSettings::parse(s, &a.prune)?;
    let every = s.duration(EVERY, &a.every, 10, MAX_TIMER_MS)?;
    let prune_every = s.duration(PRUNE_EVERY, &a.prune_every, 10, MAX_TIMER_MS)?;
    let journal_dir = journal_dir(&a.sandboxes.journal_dir)?;
    let store = std::sync::Arc::new(wiring::open(&a.db).await?);
    let providers = Providers::from_settings(s, &a.sandboxes).await?;
    let mut signals = Signals::install()?;
    let owner = wiring::owner_id();
    let metrics = std::sync::Arc::new(health::Metrics::new());
    let recent = std::sync::Arc::new(crate::dashboard::RecentSweeps::default());
    let listening = match &a.listen {
        Some(addr) => {
            let token = health::StatusToken::from_env()?;
            let limits = health::limits(
                settings.detached_ttl_ms,
                settings.run_budget_ms,
                every.as_millis() as u64,
            );
            Some(
                health::listen(
                    addr,
                    store.clone(),
                    limits,
                    metrics.clone(),
                    recent.clone(),
                    token,
                )
                .await?,
            )
        }
        None => None,
    };
    let sweeper = Sweeper::new(
        &store,
        &providers,
        journal_dir.clone(),
        Progress::new(Some(settings.progress_after)),
        DriveTuning::default(),
    );
    let mut options = reap_options(&settings, owner.clone());
    options.concurrency_limits.rate_limit = providers.rate_limit.clone();
    let mut resume_after = None;
    let lines = Lines {
        json: a.output.json,
    };
    let slow_lines = Lines {
        json: a.output.json,
    };
    let progress_after = settings.progress_after;
    sweeper.progress.on_slow(move |slow| {
        slow_lines.event(
            format!(
                "sweep {} is taking longer than {} (--progress-after): {} run step(s) so far{}",
                slow.n,
                humantime::format_duration(progress_after),
                slow.steps,
                slow.current
                    .as_ref()
                    .map(|c| format!(", now {c}"))
                    .unwrap_or_default()
            ),
            "slow",
            json!({"n": slow.n, "elapsedMs": slow.elapsed_ms, "steps": slow.steps, "current": slow.current}),
        );
    });
    lines.event(
        format!(
            "watch started: sweeping every {}, pruning every {}, as {owner}, serving providers \
             {}{}; stop with Ctrl-C or SIGTERM",
            humantime::format_duration(every),
            humantime::format_duration(prune_every),
            providers.names().join(", "),
            listening
                .map(|a| format!(", the dashboard on http://{a}/ (health and metrics at /healthz and /metrics)"))
                .unwrap_or_default()
        ),
        "start",
        json!({"owner": owner, "everyMs": every.as_millis() as u64, "pruneEveryMs": prune_every.as_millis() as u64, "providers": providers.names(), "listen": listening.map(|a| a.to_string())}),
    );

    let mut ticker = tokio::time::interval(every);
    // A sweep longer than the interval is followed by the next one a full interval later, never
    // by a burst of catch-up sweeps.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut next_prune = Instant::now();
    let mut sweeps = 0u64;
    let mut stop: Option<&'static str> = None;
    while stop.is_none() {
        tokio::select! {
            biased;
            sig = signals.next() => { stop = Some(sig); break; }
            _ = ticker.tick() => {}
        }
        sweeps += 1;
        let n = sweeps;
        // The first signal stops the sweep at the next run boundary (the run in progress
        // finishes; the rest is deferred to the next sweep); a second one abandons it.
        let boundary = CancellationToken::new();
        let mut this_sweep = options.clone();
        this_sweep.resume_after = resume_after.take();
        let sweep = sweep_once(&sweeper, &this_sweep, Some(&boundary));
        tokio::pin!(sweep);
        let swept = tokio::select! {
            swept = &mut sweep => swept,
            sig = signals.next() => {
                stop = Some(sig);
                boundary.cancel();
                lines.event(
                    format!("{sig} received during sweep {n}: finishing the run in progress, deferring the rest (send it again to abandon the sweep)"),
                    "finishing",
                    json!({"signal": sig, "n": n}),
                );
                tokio::select! {
                    swept = &mut sweep => swept,
                    again = signals.next() => {
                        let released = sweeper.release_abandoned().await;
                        lines.event(
                            format!("{again} received again: abandoned sweep {n} and released its {released} lease(s); a run it was driving is resumed by the next sweep"),
                            "abandoned",
                            json!({"signal": again, "n": n, "releasedLeases": released}),
                        );
                        lines.event(format!("watch shut down after {n} sweeps ({again})"), "shutdown", json!({"signal": again, "sweeps": n, "abandoned": true}));
                        return Ok(Exit::Ok);
                    }
                }
            }
        };
        // The round robin over runs inside the TTL goes on where this sweep stopped, so every
        // detached run is visited within ceil(backlog / batch) sweeps.
        resume_after = swept.report.report.cursor.clone();
        metrics.observe(&swept);
        recent.observe(n, &swept);
        let mut fields = swept.json();
        fields["n"] = json!(n);
        let r = &swept.report.report;
        let ledger = &r.reclaims;
        lines.event(
            format!(
                "sweep {n}: {}{}{}{}",
                render::sweep_headline(&swept.report),
                if r.considered > 0 {
                    format!(": {}", render::outcome_totals(&r.outcomes))
                } else {
                    String::new()
                },
                if r.corrupt.is_empty() {
                    String::new()
                } else {
                    format!("; {} malformed run row(s) not swept", r.corrupt.len())
                },
                if ledger.retried > 0
                    || ledger.error.is_some()
                    || ledger.ledger.is_some_and(|l| l.pending > 0)
                {
                    format!("; {}", render::ledger_line(ledger, SystemClock.now_ms()))
                } else {
                    String::new()
                }
            ),
            "sweep",
            fields,
        );
        // A damaged file does not heal: sweeping it every interval would only repeat this.
        if swept.damaged().is_some() {
            if let Some(failure) = swept.cannot_run() {
                return Err(failure);
            }
        }
        if stop.is_none() && Instant::now() >= next_prune {
            let pruned = prune::prune_all(
                &store,
                &providers,
                journal_dir.as_deref(),
                &prune_settings,
                SystemClock.now_ms(),
            )
            .await;
            lines.event(
                format!("prune: {}", pruned.summary()),
                "prune",
                serde_json::to_value(&pruned).unwrap_or(Value::Null),
            );
            next_prune = Instant::now() + prune_every;
        }
    }
    let sig = stop.unwrap_or("signal");
    lines.event(
        format!("watch shut down cleanly after {sweeps} sweeps ({sig})"),
        "shutdown",
        json!({"signal": sig, "sweeps": sweeps, "abandoned": false}),
    );
    Ok(Exit::Ok)
}
