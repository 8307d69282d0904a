//! `reaper status`: what is detached, for how long, in which sandbox of which provider, and the
//! reclaim ledger (pending and leaked sandboxes). Read-only.

use reaper_core::{Clock, EpochMs, LedgerCounts, ReclaimIntent, ReclaimLedger, RunStatus};
use reaper_local::SystemClock;
use serde_json::{json, Map, Value};

use crate::config::{
    Settings, StatusCmd, EVERY, LIMIT, MAX_AGE_MS, MAX_TIMER_MS, OLDER_THAN, RUN_BUDGET,
};
use crate::render::{human_ms, timestamp, Table};
use crate::{health, wiring, Exit, Failure};

pub async fn run(a: &StatusCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let ttl = match &a.detached_ttl {
        Some(v) => Some(s.detached_ttl_ms(Some(v))?),
        None => None,
    };
    let store = wiring::open_read_only(&a.db).await?;
    let ports = store.ports();
    let now = SystemClock.now_ms();
    if a.check {
        return check(a, s, ttl, &ports, now).await;
    }
    let failed = |e: reaper_core::StoreError| {
        Failure::cannot_run(format!("cannot read {}: {e}", store.describe()))
    };
    // A malformed row is reported and the rest still listed, the ledger above all (its leaks
    // are what an operator runs `status` for); only a failing query is exit 3.
    let listing = store.list_detached(now).await.map_err(failed)?;
    let detached = listing.runs;
    let mut corrupt: Vec<(String, String)> = listing.corrupt.iter().map(corrupt_row).collect();
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

    let older_than = match &a.older_than {
        Some(v) => Some(s.duration_ms(OLDER_THAN, v, 0, MAX_AGE_MS)? as i64),
        None => None,
    };
    let limit = s.count(LIMIT, &a.limit, 1, 1_000_000)? as usize;
    // The summary covers every detached run; the rows only the filtered, limited ones.
    let total = detached.len();
    let oldest_ms = detached.iter().map(|d| d.detached_for_ms).max();
    let past_ttl_total = ttl.map(|t| {
        detached
            .iter()
            .filter(|d| d.detached_for_ms >= t as i64)
            .count()
    });
    let mut matched = 0usize;
    let mut rows = Vec::new();
    for d in &detached {
        if older_than.is_some_and(|min| d.detached_for_ms < min) {
            continue;
        }
        let r = &d.record;
        let sandbox = match r.sandbox_key.as_deref() {
            Some(key) => ports
                .instances
                .get(key)
                .await
                .map_err(failed)?
                .map(|i| (i.provider, i.provider_sandbox_id)),
            None => None,
        };
        if let Some(want) = &a.provider {
            if sandbox.as_ref().is_none_or(|(p, _)| p != want) {
                continue;
            }
        }
        matched += 1;
        if rows.len() < limit {
            let past_ttl = ttl.map(|t| d.detached_for_ms >= t as i64);
            rows.push((d, sandbox, past_ttl));
        }
    }
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
            .map(|(d, sandbox, past_ttl)| {
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
        return Ok(exit);
    }

    if total == 0 {
        println!("no detached runs");
    } else if rows.is_empty() {
        println!("{summary}");
    } else {
        println!("{summary}, at {}:\n", timestamp(now));
        let mut headers = vec!["RUN", "THREAD", "DETACHED FOR", "PROVIDER", "SANDBOX"];
        if ttl.is_some() {
            headers.push("PAST TTL");
        }
        let mut table = Table::new(&headers);
        for (d, sandbox, past_ttl) in &rows {
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
    Ok(exit)
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
