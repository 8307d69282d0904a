//! `reaper status`: what is detached, for how long, in which sandbox of which provider, and the
//! reclaim ledger (pending and leaked sandboxes). Read-only.

use reaper_core::detached::DetachedQuery;
use reaper_core::{Clock, EpochMs, LedgerCounts, ReclaimIntent, ReclaimLedger, RunStatus};
use reaper_local::SystemClock;
use serde_json::{json, Map, Value};

use crate::config::{
    Settings, StatusCmd, EVERY, LIMIT, MAX_AGE_MS, MAX_TIMER_MS, OLDER_THAN, RUN_BUDGET,
    STATUS_WATCH,
};
use crate::render::{human_ms, timestamp, Table};
use crate::{health, wiring, Exit, Failure};

pub async fn run(a: &StatusCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let Some(every) = &a.watch else {
        let (text, exit) = render(a, s).await?;
        print!("{text}");
        return Ok(exit);
    };
    if a.check {
        return Err(Failure::usage(
            "--watch re-renders the status and --check gives one verdict for a monitor: use one \
             of them",
        ));
    }
    let every = s.duration_ms(STATUS_WATCH, every, 100, MAX_TIMER_MS)?;
    let clear = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut ticker = IntervalTicker::new(std::time::Duration::from_millis(every))?;
    watch(a, s, &mut ticker, clear, &mut std::io::stdout()).await
}

/// When `status --watch` renders again: after each interval, until interrupted.
pub(crate) trait Ticker {
    /// Waits for the next render; `false` ends the watch.
    async fn tick(&mut self) -> bool;
}

/// Ticks every interval until SIGINT or SIGTERM. The signal streams live as long as the
/// ticker, so a signal that lands while a render runs is kept and ends the next wait.
struct IntervalTicker {
    interval: tokio::time::Interval,
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl IntervalTicker {
    fn new(every: std::time::Duration) -> Result<Self, Failure> {
        use tokio::signal::unix::{signal, SignalKind};
        let start = tokio::time::Instant::now() + every;
        let mut interval = tokio::time::interval_at(start, every);
        // A slow render does not make the next ones bunch up.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let listen = |kind| {
            signal(kind).map_err(|e| {
                Failure::cannot_run(format!("cannot listen for signals to stop --watch: {e}"))
            })
        };
        Ok(IntervalTicker {
            interval,
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
        })
    }
}

impl Ticker for IntervalTicker {
    async fn tick(&mut self) -> bool {
        tokio::select! {
            _ = self.interval.tick() => true,
            _ = self.interrupt.recv() => false,
            _ = self.terminate.recv() => false,
        }
    }
}

/// Renders the status, then again on every tick, each render replacing the last on a terminal
/// (plain text separated by a timestamped rule otherwise, so a log keeps every render). Exits
/// with the last render's code.
pub(crate) async fn watch(
    a: &StatusCmd,
    s: Settings<'_>,
    ticker: &mut impl Ticker,
    clear: bool,
    out: &mut impl std::io::Write,
) -> Result<Exit, Failure> {
    let mut renders = 0u64;
    loop {
        let (text, exit) = render(a, s).await?;
        renders += 1;
        let frame = if clear {
            format!("\x1b[H\x1b[2J{text}")
        } else {
            format!(
                "--- status render {renders} at {} ---\n{text}",
                timestamp(SystemClock.now_ms())
            )
        };
        if out
            .write_all(frame.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // The reader went away (a closed pipe): nothing more to show.
            return Ok(exit);
        }
        if !ticker.tick().await {
            return Ok(exit);
        }
    }
}

/// One rendering of `status` (the list, or one run): the text and the exit code.
async fn render(a: &StatusCmd, s: Settings<'_>) -> Result<(String, Exit), Failure> {
    use std::fmt::Write as _;
    let mut out = String::new();
    macro_rules! println {
        ($($t:tt)*) => {{ let _ = writeln!(out, $($t)*); }};
    }
    macro_rules! print {
        ($($t:tt)*) => {{ let _ = write!(out, $($t)*); }};
    }
    if let Some(run_id) = &a.run_id {
        let (text, exit) = one_run(a, s, run_id).await?;
        return Ok((text, exit));
    }
    let ttl = match &a.detached_ttl {
        Some(v) => Some(s.detached_ttl_ms(Some(v))?),
        None => None,
    };
    let store = wiring::open_read_only(&a.db).await?;
    let ports = store.ports();
    let now = SystemClock.now_ms();
    if a.check {
        return check(a, s, ttl, &ports, now)
            .await
            .map(|exit| (String::new(), exit));
    }
    let failed = |e: reaper_core::StoreError| {
        Failure::cannot_run(format!("cannot read {}: {e}", store.describe()))
    };
    let older_than = match &a.older_than {
        Some(v) => Some(s.duration_ms(OLDER_THAN, v, 0, MAX_AGE_MS)?),
        None => None,
    };
    let limit = s.count(LIMIT, &a.limit, 1, 1_000_000)? as usize;
    let outcome = match &a.outcome {
        Some(o) => Some(outcome_filter(o)?),
        None => None,
    };
    // A malformed row is reported and the rest still listed, the ledger above all (its leaks
    // are what an operator runs `status` for); only a failing query is exit 3. The store
    // answers the summary of every detached run and only the filtered, limited rows, so the
    // cost follows what is shown, not the backlog.
    let query = DetachedQuery {
        ttl_ms: ttl,
        older_than_ms: older_than,
        provider: a.provider.clone(),
        outcome: outcome.map(str::to_string),
        ..DetachedQuery::new(now, limit)
    };
    let view = ports
        .runs
        .detached_view(&*ports.instances, &query)
        .await
        .map_err(failed)?;
    let mut corrupt: Vec<(String, String)> = view.corrupt.iter().map(corrupt_row).collect();
    let counts = match store.count_by_status().await {
        Ok(counts) => Some(counts),
        Err(e @ reaper_core::StoreError::Corrupt { .. }) => {
            let row = corrupt_row(&e);
            if !corrupt.iter().any(|(key, _)| *key == row.0) {
                corrupt.push(row);
            }
            None
        }
        Err(e) => return Err(failed(e)),
    };
    let ledger = ledger(&*ports.ledger).await;
    let exit = if corrupt.is_empty() {
        ledger.exit()
    } else {
        Exit::Failures
    };

    // The summary covers every detached run; the rows only the filtered, limited ones.
    let total = view.summary.detached as usize;
    let oldest_ms = view
        .summary
        .oldest_since
        .map(|since| now.saturating_sub(since));
    let past_ttl_total = view.summary.past_ttl;
    let matched = view.matching as usize;
    let rows: Vec<_> = view
        .rows
        .iter()
        .map(|r| {
            let detached_for_ms = now.saturating_sub(r.record.detached_since.unwrap_or(now));
            let sandbox = r
                .instance
                .as_ref()
                .map(|i| (i.provider.clone(), i.provider_sandbox_id.clone()));
            let past_ttl = ttl.map(|t| detached_for_ms >= t as i64);
            (
                Shown {
                    record: &r.record,
                    detached_for_ms,
                },
                sandbox,
                past_ttl,
                r.last.clone(),
            )
        })
        .collect();
    let summary = format!(
        "{total} detached run{}{}{}; {} shown{}",
        if total == 1 { "" } else { "s" },
        oldest_ms
            .map(|o| format!(", the oldest for {}", human_ms(o)))
            .unwrap_or_default(),
        past_ttl_total
            .map(|n| format!(", {n} past the TTL"))
            .unwrap_or_default(),
        rows.len(),
        if rows.len() < matched {
            format!(" of {matched} matching (raise --limit to see more)")
        } else if matched < total {
            format!(" ({matched} match the filters)")
        } else {
            String::new()
        }
    );

    if a.output.json {
        let runs: Vec<Value> = rows
            .iter()
            .map(|(d, sandbox, past_ttl, last)| {
                json!({
                    "runId": d.record.run_id,
                    "threadId": d.record.thread_id,
                    "detachedSince": d.record.detached_since,
                    "detachedForMs": d.detached_for_ms,
                    "sandboxKey": d.record.sandbox_key,
                    "provider": sandbox.as_ref().map(|(p, _)| p),
                    "sandbox": sandbox.as_ref().map(|(_, id)| id),
                    "pastTtl": past_ttl,
                    "cancelRequested": d.record.cancel_requested.unwrap_or(false),
                    "lastSweep": last,
                })
            })
            .collect();
        let by_status: Option<Map<String, Value>> = counts.as_ref().map(|counts| {
            RunStatus::ALL
                .iter()
                .map(|st| (st.as_str().to_string(), json!(counts.get(*st))))
                .collect()
        });
        let corrupt: Vec<Value> = corrupt
            .iter()
            .map(|(key, error)| json!({ "key": key, "error": error }))
            .collect();
        println!(
            "{}",
            json!({
                "now": now,
                "detachedTtlMs": ttl,
                "summary": {
                    "detached": total,
                    "matching": matched,
                    "shown": rows.len(),
                    "oldestDetachedForMs": oldest_ms,
                    "pastTtl": past_ttl_total,
                },
                "detached": runs,
                "corrupt": corrupt,
                "runsByStatus": by_status,
                "reclaimLedger": ledger.json(),
            })
        );
        return Ok((out, exit));
    }

    if total == 0 {
        println!("no detached runs");
    } else if rows.is_empty() {
        println!("{summary}");
    } else {
        println!("{summary}, at {}:\n", timestamp(now));
        let mut headers = vec![
            "RUN",
            "THREAD",
            "DETACHED FOR",
            "PROVIDER",
            "SANDBOX",
            "LAST SWEEP",
        ];
        if ttl.is_some() {
            headers.push("PAST TTL");
        }
        let mut table = Table::new(&headers);
        for (d, sandbox, past_ttl, last) in &rows {
            let mut row = vec![
                d.record.run_id.clone(),
                d.record.thread_id.clone(),
                human_ms(d.detached_for_ms),
                sandbox
                    .as_ref()
                    .map(|(p, _)| p.clone())
                    .unwrap_or_else(|| "-".into()),
                sandbox
                    .as_ref()
                    .map(|(_, id)| id.clone())
                    .or_else(|| {
                        d.record
                            .sandbox_key
                            .clone()
                            .map(|k| format!("{k} (no instance)"))
                    })
                    .unwrap_or_else(|| "-".into()),
                last.as_ref()
                    .map(|e| format!("{} {} ago", e.reason_code, human_ms(now - e.at)))
                    .unwrap_or_else(|| "-".into()),
            ];
            if let Some(past) = past_ttl {
                row.push(if *past { "yes" } else { "no" }.into());
            }
            table.row(row);
        }
        print!("{}", table.render());
    }
    if !corrupt.is_empty() {
        println!(
            "\n{} CORRUPT row{} (detached, but unreadable: not swept until repaired):\n",
            corrupt.len(),
            if corrupt.len() == 1 { "" } else { "s" }
        );
        let mut table = Table::new(&["ROW", "PROBLEM"]);
        for (key, error) in &corrupt {
            table.row(vec![key.clone(), error.clone()]);
        }
        print!("{}", table.render());
    }
    match &counts {
        Some(counts) => {
            let totals: Vec<String> = RunStatus::ALL
                .iter()
                .map(|st| format!("{st} {}", counts.get(*st)))
                .collect();
            println!("\nruns by status: {}", totals.join(" · "));
        }
        None => println!("\nruns by status: not counted (a row's status is no run status)"),
    }
    print!("\n{}", ledger.render(now));
    Ok((out, exit))
}

/// `status --check`: the shared health verdict; exit 0 healthy, 2 unhealthy.
async fn check(
    a: &StatusCmd,
    s: Settings<'_>,
    ttl: Option<u64>,
    ports: &wiring::Ports,
    now: EpochMs,
) -> Result<Exit, Failure> {
    let Some(ttl) = ttl else {
        return Err(Failure::usage(
            "status --check needs the detached-run TTL the sweeps use, to tell an overdue run: \
             pass --detached-ttl 30m or set REAPER_DETACHED_TTL",
        ));
    };
    let run_budget = s.duration_ms(RUN_BUDGET, &a.run_budget, 1, MAX_TIMER_MS)?;
    let every = s.duration_ms(EVERY, &a.every, 10, MAX_TIMER_MS)?;
    let status = health::verdict(ports, health::limits(ttl, run_budget, every), now).await;
    if a.output.json {
        println!("{}", serde_json::to_string(&status).unwrap_or_default());
    } else {
        print!("{}", health::render(&status));
    }
    Ok(if status.healthy {
        Exit::Ok
    } else {
        Exit::Failures
    })
}

/// A listed run and how long it has been detached.
struct Shown<'a> {
    record: &'a reaper_core::RunRecord,
    detached_for_ms: i64,
}

/// A corrupt row as `status` shows it: the row (its run id, or rowid) and what is wrong.
fn corrupt_row(e: &reaper_core::StoreError) -> (String, String) {
    match e {
        reaper_core::StoreError::Corrupt { key, reason } => (key.clone(), reason.clone()),
        other => ("-".into(), other.to_string()),
    }
}

/// The most leaked entries `status` lists; the counts always cover all of them.
const MAX_LEAKS_LISTED: usize = 1000;

/// The reclaim ledger as `status` shows it: the counts, and every leak with what to look for.
enum Ledger {
    Read {
        counts: LedgerCounts,
        /// Entries whose destroy failed at least once, oldest first.
        leaked: Vec<ReclaimIntent>,
    },
    Unreadable(String),
}

async fn ledger(store: &dyn ReclaimLedger) -> Ledger {
    let counts = match store.ledger_counts().await {
        Ok(c) => c,
        Err(e) => return Ledger::Unreadable(e.to_string()),
    };
    if counts.leaked == 0 {
        return Ledger::Read {
            counts,
            leaked: Vec::new(),
        };
    }
    // Every entry, due or not (`due_intents` at the end of time), leaks kept.
    match store.due_intents(EpochMs::MAX, MAX_LEAKS_LISTED).await {
        Ok(all) => {
            let mut leaked: Vec<ReclaimIntent> = all.into_iter().filter(|i| i.is_leak()).collect();
            leaked.sort_by_key(|i| i.first_seen);
            Ledger::Read { counts, leaked }
        }
        Err(e) => Ledger::Unreadable(e.to_string()),
    }
}

impl Ledger {
    /// Exit 2 when a sandbox may be running with nobody to stop it but the ledger's retries, or
    /// when nobody can tell because the ledger does not read.
    fn exit(&self) -> Exit {
        match self {
            Ledger::Read { counts, .. } if counts.leaked == 0 => Exit::Ok,
            _ => Exit::Failures,
        }
    }

    fn json(&self) -> Value {
        match self {
            Ledger::Read { counts, leaked } => json!({
                "pending": counts.pending,
                "leaked": counts.leaked,
                "oldestFirstSeen": counts.oldest_first_seen,
                "leaks": leaked.iter().map(|i| json!({
                    "runId": i.run_id,
                    "sandboxKey": i.sandbox_key,
                    "provider": i.provider,
                    "providerSandboxId": i.provider_sandbox_id,
                    "firstSeen": i.first_seen,
                    "attempts": i.attempts,
                    "lastError": i.last_error,
                    "nextAttemptAt": i.next_attempt_at,
                })).collect::<Vec<_>>(),
            }),
            Ledger::Unreadable(error) => json!({ "error": error }),
        }
    }

    fn render(&self, now: EpochMs) -> String {
        let (counts, leaked) = match self {
            Ledger::Unreadable(error) => {
                return format!(
                    "reclaim ledger: could not be read: {error}; leaked sandboxes cannot be \
                     listed until it is\n"
                )
            }
            Ledger::Read { counts, leaked } => (counts, leaked),
        };
        let mut out = format!(
            "reclaim ledger: pending {}, leaked {}",
            counts.pending, counts.leaked
        );
        if let Some(oldest) = counts.oldest_first_seen {
            out.push_str(&format!(", oldest {} old", human_ms(now - oldest)));
        }
        out.push('\n');
        if leaked.is_empty() {
            return out;
        }
        out.push_str(&format!(
            "\n{} LEAKED sandbox{} (a destroy failed; it may still be running and billing; every \
             sweep retries it):\n\n",
            counts.leaked,
            if counts.leaked == 1 { "" } else { "es" }
        ));
        let mut table = Table::new(&[
            "RUN",
            "SANDBOX KEY",
            "PROVIDER ID",
            "ATTEMPTS",
            "NEXT RETRY",
            "LAST ERROR",
        ]);
        for i in leaked {
            table.row(vec![
                i.run_id.clone(),
                i.sandbox_key.clone().unwrap_or_else(|| "-".into()),
                match (&i.provider, &i.provider_sandbox_id) {
                    (Some(p), Some(id)) => format!("{p}:{id}"),
                    (None, Some(id)) => id.clone(),
                    _ => "-".into(),
                },
                i.attempts.to_string(),
                if i.next_attempt_at <= now {
                    "next sweep".into()
                } else {
                    format!("in {}", human_ms(i.next_attempt_at - now))
                },
                i.last_error.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        out.push_str(&table.render());
        if (leaked.len() as u64) < counts.leaked {
            out.push_str(&format!(
                "(the first {} of {}; --json lists the same)\n",
                leaked.len(),
                counts.leaked
            ));
        }
        out
    }
}

/// The outcomes `--outcome` accepts: the sweep report's, and a ledger retry's.
fn outcome_filter(value: &str) -> Result<&'static str, Failure> {
    let producing = reaper_core::reap::ReapOutcome::Producing.as_str();
    if value.trim() == producing {
        return Err(Failure::usage(
            "--outcome producing: the runs' history records no producing outcome (a sweep that \
             leaves a working run alone writes nothing); `reaper status` without --outcome lists \
             every detached run, and the sweep report counts the producing ones"
                .to_string(),
        ));
    }
    let known = reaper_core::reap::ReapOutcome::ALL
        .iter()
        .map(|o| o.as_str())
        .filter(|o| *o != producing)
        .chain([reaper_core::history::RECLAIM_RETRY_OUTCOME]);
    let names: Vec<&'static str> = known.collect();
    names
        .iter()
        .copied()
        .find(|n| *n == value.trim())
        .ok_or_else(|| {
            Failure::usage(format!(
                "invalid value for --outcome: {value:?}: expected one of {}",
                names.join(", ")
            ))
        })
}

/// History entries `status RUN_ID` shows, newest first.
const RUN_HISTORY_SHOWN: usize = 20;

/// `status RUN_ID`: the run's record, its sandbox, its journal's verdict now (a read-only probe:
/// it reads the journal's tail and never starts, stops or destroys a sandbox), what each sweep
/// did to it, and its reclaim-ledger entry.
async fn one_run(a: &StatusCmd, s: Settings<'_>, run_id: &str) -> Result<(String, Exit), Failure> {
    use std::fmt::Write as _;
    // Checked before any request: an id pasted with a terminal escape or a newline is refused
    // (and shown escaped), never sent to the store or echoed raw.
    reaper_core::history::check_run_id(run_id)
        .map_err(|why| Failure::usage(format!("invalid run id {run_id:?}: {why}")))?;
    let store = wiring::open_read_only(&a.db).await?;
    let ports = store.ports();
    let now = SystemClock.now_ms();
    let failed = |e: reaper_core::StoreError| {
        Failure::cannot_run(format!("cannot read {}: {e}", store.describe()))
    };
    let Some(record) = ports.runs.get(run_id).await.map_err(failed)? else {
        return Err(Failure::usage(format!(
            "no run {run_id:?} in {}: check the id (`reaper status` lists the detached runs, \
             and a sweep report names every run it touched)",
            store.describe()
        )));
    };
    let instance = match record.sandbox_key.as_deref() {
        Some(key) => ports.instances.get(key).await.map_err(failed)?,
        None => None,
    };
    let (history, history_note) = match ports.runs.run_history(run_id, RUN_HISTORY_SHOWN).await {
        Ok(h) => (h, None),
        Err(reaper_core::StoreError::Unsupported(_)) => {
            (Vec::new(), Some("this store keeps no run history"))
        }
        Err(e) => return Err(failed(e)),
    };
    let intent = ports.ledger.get_intent(run_id).await.map_err(failed)?;
    let verdict = probe_now(a, s, &record, &ports).await;

    let mut out = String::new();
    if a.output.json {
        let _ = writeln!(
            out,
            "{}",
            json!({
                "now": now,
                "run": record,
                "sandbox": instance,
                "journal": verdict.json(),
                "history": history,
                "reclaimLedger": intent,
            })
        );
        return Ok((out, Exit::Ok));
    }
    let r = &record;
    let _ = writeln!(out, "run {}", r.run_id);
    let mut fields = Table::new(&["FIELD", "VALUE"]);
    let at = |t: Option<EpochMs>| {
        t.map(|t| format!("{} ({} ago)", timestamp(t), human_ms(now - t)))
            .unwrap_or_else(|| "-".into())
    };
    fields.row(vec!["thread".into(), r.thread_id.clone()]);
    fields.row(vec!["status".into(), r.status.to_string()]);
    fields.row(vec!["started".into(), at(Some(r.started_at))]);
    fields.row(vec!["finished".into(), at(r.finished_at)]);
    fields.row(vec!["detached since".into(), at(r.detached_since)]);
    fields.row(vec![
        "cancel requested".into(),
        r.cancel_requested.unwrap_or(false).to_string(),
    ]);
    fields.row(vec![
        "driver epoch".into(),
        r.driver_epoch.map_or("-".into(), |e| e.to_string()),
    ]);
    if let Some(error) = &r.error {
        fields.row(vec!["error".into(), error.message.clone()]);
    }
    fields.row(vec![
        "sandbox".into(),
        match (&r.sandbox_key, &instance) {
            (Some(key), Some(i)) => format!("{key}: {} {}", i.provider, i.provider_sandbox_id),
            (Some(key), None) => format!("{key} (no instance record)"),
            (None, _) => "-".into(),
        },
    ]);
    fields.row(vec!["journal now".into(), verdict.line()]);
    fields.row(vec![
        "reclaim ledger".into(),
        match &intent {
            None => "no entry (nothing pending for its sandbox)".into(),
            Some(i) if i.attempts > 0 => format!(
                "LEAKED: {} failed destroy{}, next retry {}{}",
                i.attempts,
                if i.attempts == 1 { "" } else { "s" },
                timestamp(i.next_attempt_at),
                i.last_error
                    .as_deref()
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default()
            ),
            Some(i) => format!("pending since {}", timestamp(i.first_seen)),
        },
    ]);
    let _ = write!(out, "{}", fields.render());
    match history_note {
        Some(note) => {
            let _ = writeln!(out, "\nhistory: {note}");
        }
        None if history.is_empty() => {
            let _ = writeln!(
                out,
                "\nhistory: no sweep has touched this run (within the retention)"
            );
        }
        None => {
            let _ = writeln!(out, "\nhistory (newest first, {} shown):\n", history.len());
            let mut table = Table::new(&["WHEN", "HOST", "OUTCOME", "REASON", "SANDBOX", "LEDGER"]);
            for e in &history {
                table.row(vec![
                    timestamp(e.at),
                    e.host.clone(),
                    e.reason_code.clone(),
                    e.reason.clone(),
                    e.sandbox.clone().unwrap_or_else(|| "-".into()),
                    if e.ledger.is_empty() {
                        "-".into()
                    } else {
                        e.ledger.join(", ")
                    },
                ]);
            }
            let _ = write!(out, "{}", table.render());
        }
    }
    Ok((out, Exit::Ok))
}

/// What the journal says now.
enum Verdict {
    Probed(reaper_core::RunExitProbe),
    NotProbed(String),
}

impl Verdict {
    fn line(&self) -> String {
        use reaper_core::RunExitProbe as P;
        match self {
            Verdict::Probed(P::Finished { exit_code }) => {
                format!("finished (exit code {exit_code}): the next sweep finalizes it")
            }
            Verdict::Probed(P::Producing) => "producing: no exit sentinel yet".into(),
            Verdict::Probed(P::Unknown { error }) => format!(
                "unknown: {}",
                error.as_deref().unwrap_or("the probe could not tell")
            ),
            Verdict::Probed(P::Unreachable(u)) => {
                let r = u.reason();
                format!("unknown ({}): {}", r.code.as_str(), r.message)
            }
            Verdict::NotProbed(why) => format!("not probed: {why}"),
        }
    }

    fn json(&self) -> Value {
        use reaper_core::RunExitProbe as P;
        match self {
            Verdict::Probed(p) => {
                let mut v = json!({ "state": p.state(), "summary": self.line() });
                if let P::Finished { exit_code } = p {
                    v["exitCode"] = json!(exit_code);
                }
                v
            }
            Verdict::NotProbed(why) => json!({ "state": "not-probed", "summary": why }),
        }
    }
}

/// The journal's verdict, read through the configured providers (`--provider`, else
/// REAPER_PROVIDERS, else local). Never fatal: a provider that cannot be set up or a probe that
/// fails is a verdict of its own.
async fn probe_now(
    a: &StatusCmd,
    s: Settings<'_>,
    record: &reaper_core::RunRecord,
    ports: &wiring::Ports,
) -> Verdict {
    use reaper_core::ExitProbe;
    if record.sandbox_key.is_none() {
        return Verdict::NotProbed("the run names no sandbox".into());
    }
    let names = a
        .provider
        .clone()
        .or_else(|| std::env::var("REAPER_PROVIDERS").ok())
        .unwrap_or_else(|| "local".into());
    let sandboxes = crate::config::Sandboxes {
        providers: names.split(',').map(|n| n.trim().to_string()).collect(),
        docker_socket: std::env::var("DOCKER_HOST")
            .unwrap_or_else(|_| "unix:///var/run/docker.sock".into()),
        docker_name: std::env::var("REAPER_DOCKER_NAME")
            .unwrap_or_else(|_| reaper_docker::DEFAULT_PROVIDER_NAME.into()),
        docker_require_label: false,
        sandboxes: a.sandboxes.clone(),
        journal_dir: a.journal_dir.clone(),
    };
    let providers = match wiring::Providers::from_settings(s, &sandboxes).await {
        Ok(p) => p,
        Err(e) => return Verdict::NotProbed(e.message),
    };
    // Where the sweep would read it: the configured directory, else the local sandbox's own.
    let fixed = match crate::sweep::journal_dir(&a.journal_dir) {
        Ok(dir) => dir,
        Err(e) => return Verdict::NotProbed(e.message),
    };
    let dirs = wiring::JournalDirs {
        local: providers.local.clone(),
        runs: ports.runs.clone(),
        instances: ports.instances.clone(),
        fixed,
    };
    let probe = reaper_core::probe::JournalExitProbe::new(
        providers.set.clone(),
        ports.instances.clone(),
        reaper_core::probe::ProbeOptions {
            dir: dirs.for_run(record).await,
            ..Default::default()
        },
    );
    let step = std::time::Duration::from_millis(reaper_core::reap::DEFAULT_STEP_TIMEOUT_MS);
    match tokio::time::timeout(step, probe.has_finished(record)).await {
        Ok(Ok(p)) => Verdict::Probed(p),
        Ok(Err(e)) => Verdict::NotProbed(format!("the probe failed: {e}")),
        Err(_) => Verdict::NotProbed(format!(
            "the probe took longer than {} ms",
            reaper_core::reap::DEFAULT_STEP_TIMEOUT_MS
        )),
    }
}
