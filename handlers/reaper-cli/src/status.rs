//! `reaper status`: what is detached, for how long, in which sandbox. Read-only.

use reaper_core::{Clock, RunStatus, SandboxInstanceStore};
use reaper_local::SystemClock;
use serde_json::{json, Map, Value};

use crate::config::{Settings, StatusCmd};
use crate::render::{human_ms, timestamp, Table};
use crate::{wiring, Exit, Failure};

pub async fn run(a: &StatusCmd, s: Settings<'_>) -> Result<Exit, Failure> {
    let ttl = match &a.detached_ttl {
        Some(v) => Some(s.detached_ttl_ms(Some(v))?),
        None => None,
    };
    let store = wiring::open_store_read_only(&a.db.db)?;
    let now = SystemClock.now_ms();
    let failed = |e: reaper_core::StoreError| {
        Failure::cannot_run(format!("cannot read {}: {e}", a.db.db.display()))
    };
    let detached = store.list_detached(now).await.map_err(failed)?;
    let counts = store.count_by_status().await.map_err(failed)?;

    let mut rows = Vec::new();
    for d in &detached {
        let r = &d.record;
        let sandbox = match r.sandbox_key.as_deref() {
            Some(key) => SandboxInstanceStore::get(&store, key)
                .await
                .map_err(failed)?
                .map(|i| i.provider_sandbox_id),
            None => None,
        };
        let past_ttl = ttl.map(|t| d.detached_for_ms >= t as i64);
        rows.push((d, sandbox, past_ttl));
    }

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
                    "sandbox": sandbox,
                    "pastTtl": past_ttl,
                    "cancelRequested": d.record.cancel_requested.unwrap_or(false),
                })
            })
            .collect();
        let by_status: Map<String, Value> = RunStatus::ALL
            .iter()
            .map(|st| (st.as_str().to_string(), json!(counts.get(*st))))
            .collect();
        println!(
            "{}",
            json!({"now": now, "detachedTtlMs": ttl, "detached": runs, "runsByStatus": by_status})
        );
        return Ok(Exit::Ok);
    }

    if rows.is_empty() {
        println!("no detached runs");
    } else {
        println!(
            "{} detached run{} at {}:\n",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" },
            timestamp(now)
        );
        let mut headers = vec!["RUN", "THREAD", "DETACHED FOR", "SANDBOX"];
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
                    .clone()
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
    let totals: Vec<String> = RunStatus::ALL
        .iter()
        .map(|st| format!("{st} {}", counts.get(*st)))
        .collect();
    println!("\nruns by status: {}", totals.join(" · "));
    Ok(Exit::Ok)
}
