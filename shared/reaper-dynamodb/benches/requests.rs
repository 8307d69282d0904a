//! Requests and consumed capacity of the store operations a sweep makes, against DynamoDB
//! Local (`emulator/start.sh` first). Not a timed benchmark: it prints counts.
//!
//! Scenario (issue 5): 1,000 detached runs, of which 800 are still producing (left alone),
//! 100 finished and 100 expired (claimed, driven, finalized, reclaimed). The store calls for a
//! driven run are the ones the sweep makes per the spec: claim lease, epoch bump, reclaim-ledger
//! intent, quiet-check snapshot, fenced append, close, fenced terminal write, lease release,
//! instance delete, intent resolved (plus the cancel write for an expired run); once per sweep,
//! the due-intents listing (empty here) and the ledger counts.
//!
//! Then (issue 13) 45 real sweeps over 1,000 and over 10,000 detached runs, each resuming from
//! the previous one's cursor: the most listing requests one sweep sends is the same at both.
//!
//! Run: `cargo bench -p reaper-dynamodb --bench requests` (release build), or in debug, which
//! counts the same: `cargo test -p reaper-dynamodb --bench requests`.
//!
//! DynamoDB Local reports only `CapacityUnits` (no read/write split) and charges a whole
//! transaction like one write; the real service charges 2 WCU per transaction item per KB.

#[path = "../tests/common/mod.rs"]
mod common;

use reaper_core::{
    Chunk, DeliveryLog, EpochBump, LeaseGrant, LeaseStore, NewRun, ReclaimIntent, ReclaimLedger,
    RunPatch, RunStore, SandboxInstanceRecord, SandboxInstanceStore, TerminalStatus, TerminalWrite,
};
use reaper_dynamodb::{OpStats, RequestStats};

const NOW: i64 = 1_700_000_000_000;
const TTL: u64 = 30 * 60 * 1000;
const RUNS: usize = 1_000;
const CHUNKS_PER_DRIVE: usize = 10;

fn line(label: &str, s: &OpStats) {
    println!(
        "{label:<44} {:>8} {:>10} {:>10.1} {:>10.1} {:>10.1}",
        s.requests,
        s.condition_failures,
        s.capacity_units,
        s.read_capacity_units,
        s.write_capacity_units
    );
}

fn table(title: &str, stats: &RequestStats) {
    println!("\n{title}");
    println!(
        "{:<44} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "operation", "requests", "cond.fail", "CU", "RCU", "WCU"
    );
    for (op, s) in &stats.by_operation {
        line(op, s);
    }
    line("TOTAL", &stats.total);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = common::fresh_store("bench").await;

    for i in 0..RUNS {
        let id = format!("run-{i:04}");
        store
            .create_or_resume(NewRun {
                run_id: id.clone(),
                thread_id: format!("thread-{i:04}"),
                started_at: NOW - 4 * TTL as i64,
                status: None,
            })
            .await
            .unwrap();
        // The last 100 are past the TTL (expired); the rest detached recently.
        let detached = if i >= 900 {
            NOW - TTL as i64 - 1
        } else {
            NOW - 60_000
        };
        store
            .update(&id, RunPatch::detach(detached, Some(format!("sbx-{i:04}"))))
            .await
            .unwrap();
        store
            .upsert(SandboxInstanceRecord {
                key: format!("sbx-{i:04}"),
                provider: "local".into(),
                provider_sandbox_id: format!("p-{i:04}"),
                latest_snapshot_id: None,
                thread_id: format!("thread-{i:04}"),
                latest_run_id: Some(id),
                updated_at: NOW,
            })
            .await
            .unwrap();
    }
    let seeding = store.take_request_stats();
    table(
        "seeding 1,000 detached runs (create + detach + instance upsert each)",
        &seeding,
    );

    // The sweep.
    let sweep_lease = match store
        .acquire("reaper-sweep", "bench", NOW, 300_000)
        .await
        .unwrap()
    {
        LeaseGrant::Acquired(l) => l,
        held => panic!("sweep lease {held:?}"),
    };
    assert!(store.due_intents(NOW, 25).await.unwrap().is_empty());
    let listed = store.list_reclaimable(NOW, 0).await.unwrap();
    assert_eq!(listed.len(), RUNS);
    let listing = store.request_stats().op("list_reclaimable");
    // 800 producing runs: the probe goes to the sandbox, not the store. Nothing to count.
    for (i, run) in listed.iter().enumerate() {
        let idx: usize = run.run_id[4..].parse().unwrap();
        let expired = idx >= 900;
        let finished = (800..900).contains(&idx);
        if !expired && !finished {
            continue;
        }
        if expired {
            store.update(&run.run_id, RunPatch::cancel()).await.unwrap();
        }
        let lease = match store
            .acquire(&format!("run-driver:{}", run.run_id), "bench", NOW, 60_000)
            .await
            .unwrap()
        {
            LeaseGrant::Acquired(l) => l,
            held => panic!("claim lease {held:?}"),
        };
        let EpochBump::Claimed { epoch, record } = store.bump_epoch(&run.run_id).await.unwrap()
        else {
            panic!("claim refused for {}", run.run_id);
        };
        assert!(store
            .record_intent(&ReclaimIntent::new(&record, NOW))
            .await
            .unwrap());
        store.snapshot(&run.run_id).await.unwrap();
        let chunks: Vec<Chunk> = (0..CHUNKS_PER_DRIVE)
            .map(|k| Chunk::text(&format!("chunk {k} of run {i}")))
            .collect();
        store
            .append(&run.run_id, Some(epoch), chunks.to_vec(), NOW)
            .await
            .unwrap();
        store.close(&run.run_id, None, NOW).await.unwrap();
        let write = TerminalWrite {
            status: if expired {
                TerminalStatus::Aborted
            } else {
                TerminalStatus::Completed
            },
            finished_at: NOW,
            error: None,
        };
        store
            .write_terminal(&run.run_id, epoch, &write)
            .await
            .unwrap();
        store.release(&lease).await.unwrap();
        if let Some(key) = &run.sandbox_key {
            SandboxInstanceStore::delete(&*store, key).await.unwrap();
        }
        store.resolve_intent(&run.run_id).await.unwrap();
    }
    assert_eq!(store.ledger_counts().await.unwrap().pending, 0);
    store.release(&sweep_lease).await.unwrap();
    let sweep = store.take_request_stats();
    table(
        "one sweep: 1,000 detached (800 producing, 100 finished, 100 expired)",
        &sweep,
    );

    // Unit figures.
    let after = store.list_reclaimable(NOW, 0).await.unwrap();
    let relist = store.take_request_stats().total;
    let fresh = common::fresh_store("bench-units").await;
    fresh
        .create_or_resume(NewRun {
            run_id: "u".into(),
            thread_id: "t".into(),
            started_at: NOW,
            status: None,
        })
        .await
        .unwrap();
    fresh.take_request_stats();
    fresh.bump_epoch("u").await.unwrap();
    let claim = fresh.take_request_stats().total;
    let batch: Vec<Chunk> = (0..23).map(|k| Chunk::text(&format!("c{k}"))).collect();
    fresh
        .append("u", Some(1), batch.to_vec(), NOW)
        .await
        .unwrap();
    let append23 = fresh.take_request_stats().total;
    fresh
        .append("u", Some(1), batch[..1].to_vec(), NOW)
        .await
        .unwrap();
    let append1 = fresh.take_request_stats().total;
    for i in 0..200 {
        let mut intent = ReclaimIntent::new(
            &reaper_core::RunRecord::new(format!("r-{i:03}"), "t", NOW),
            NOW - 1_000 + i,
        );
        intent.sandbox_key = Some(format!("sbx-{i:03}"));
        fresh.record_intent(&intent).await.unwrap();
    }
    fresh.take_request_stats();
    fresh.due_intents(NOW, 25).await.unwrap();
    let due25 = fresh.take_request_stats().total;
    fresh.ledger_counts().await.unwrap();
    let counts200 = fresh.take_request_stats().total;

    println!("\nunit figures");
    println!(
        "{:<44} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "", "requests", "cond.fail", "CU", "RCU", "WCU"
    );
    line("list_reclaimable, 1,000 runs listed", &listing);
    line(
        &format!("list_reclaimable, {} runs left (after)", after.len()),
        &relist,
    );
    line("bump_epoch (one claim)", &claim);
    line("fenced append, 23 chunks (one transaction)", &append23);
    line("fenced append, 1 chunk", &append1);
    line("due_intents, 25 of 200 due entries", &due25);
    line("ledger_counts, 200 entries", &counts200);
    println!(
        "\nrequests per leave-alone run beyond its share of the listing: 0 \
         (listing share: {:.4} requests/run; whole sweep {} requests)",
        listing.requests as f64 / RUNS as f64,
        sweep.total.requests
    );
    println!(
        "\nrequest stats JSON (sweep): {}",
        serde_json::to_string(&sweep).unwrap()
    );

    // Issue 13: the sweep is bounded, so its requests do not grow with the backlog. Stateless
    // sweeps (`sweep()` with no cursor carried over: it is kept with the sweep lease), as a
    // Lambda or a cron-run CLI runs them.
    println!(
        "\nrequests per stateless sweep (batch 25, every run producing inside the TTL; \
         all = listing, backlog count, sweep lease and its cursor note, ledger)"
    );
    println!(
        "{:<12} {:>8} {:>14} {:>10} {:>10} {:>16}",
        "backlog", "sweeps", "max listing", "max count", "max all", "backlog figure"
    );
    for backlog in [1_000, 10_000] {
        let m = per_sweep(backlog).await;
        println!(
            "{backlog:<12} {:>8} {:>14} {:>10} {:>10} {:>16}",
            m.sweeps, m.listing, m.count, m.all, m.backlog
        );
    }
}

/// The most requests one of `sweeps` stateless sweeps sent.
struct PerSweep {
    sweeps: usize,
    listing: u64,
    count: u64,
    all: u64,
    backlog: String,
}

/// Every run is producing: the sweep only lists and probes (the probe is the sandbox's).
struct Producing;

#[async_trait::async_trait]
impl reaper_core::ExitProbe for Producing {
    async fn has_finished(
        &self,
        _record: &reaper_core::RunRecord,
    ) -> Result<reaper_core::RunExitProbe, reaper_core::ProbeError> {
        Ok(reaper_core::RunExitProbe::Producing)
    }
}

/// Never driven here: every run is producing.
struct NoDrive;

impl reaper_core::Drive for NoDrive {
    fn drive(
        &self,
        r: reaper_core::DriveRequest,
        _s: reaper_core::CancellationToken,
    ) -> Result<reaper_core::ChunkStream, reaper_core::DriveError> {
        panic!("no run is driven here, not even {}", r.run_id)
    }
}

/// Real stateless sweeps over `backlog` detached runs, each resuming from the cursor the
/// previous one left with the sweep lease.
async fn per_sweep(backlog: usize) -> PerSweep {
    use std::sync::Arc;
    let store = common::fresh_store(&format!("bench-listing-{backlog}")).await;
    for i in 0..backlog {
        let id = format!("run-{i:05}");
        store
            .create_or_resume(NewRun {
                run_id: id.clone(),
                thread_id: format!("thread-{i:05}"),
                started_at: NOW - 4 * TTL as i64,
                status: None,
            })
            .await
            .unwrap();
        store
            .update(&id, RunPatch::detach(NOW - 60_000 + i as i64, None))
            .await
            .unwrap();
    }
    store.take_request_stats();
    let deps = reaper_core::reap::ReapDeps {
        runs: Arc::new(store.as_ref().clone()),
        logs: Arc::new(store.as_ref().clone()),
        leases: Arc::new(store.as_ref().clone()),
        ledger: Arc::new(store.as_ref().clone()),
        probe: Arc::new(Producing),
        drive: Arc::new(NoDrive),
        reclaim: None,
        clock: Arc::new(reaper_core::time::ManualClock::new(NOW)),
        sleeper: Arc::new(reaper_testkit::fakes::TokioSleeper),
        damage: Default::default(),
    };
    let mut options = reaper_core::reap::ReapOptions::new(TTL, "bench");
    options.now = Some(NOW);
    // Enough sweeps to wrap around 1,000 runs once.
    let mut m = PerSweep {
        sweeps: 45,
        listing: 0,
        count: 0,
        all: 0,
        backlog: String::new(),
    };
    let mut seen = std::collections::HashSet::new();
    for _ in 0..m.sweeps {
        let report = reaper_core::reap::sweep(&deps, &options, 60_000).await;
        assert_eq!(report.report.outcomes.producing, 25);
        seen.extend(report.report.runs.iter().map(|e| e.run_id.clone()));
        let stats = store.take_request_stats();
        m.listing = m.listing.max(stats.op("list_reclaimable_page").requests);
        m.count = m.count.max(stats.op("count_reclaimable").requests);
        m.all = m.all.max(stats.total.requests);
        let slo = &report.report.slo;
        m.backlog = format!(
            "{}{}",
            slo.backlog,
            if slo.backlog_exact { "" } else { " (≥)" }
        );
    }
    // The round robin went on from sweep to sweep with nothing carried but the note.
    assert_eq!(seen.len(), backlog.min(m.sweeps * 25));
    m
}
