//! Two whole sweeps in two processes race over the same 200 finished runs on one DynamoDB Local
//! table, through the real core (`reap_detached_runs`: claim lease, epoch bump, quiet wait,
//! drive, fenced pipe, terminal write). No run may be driven twice, and every run must end
//! finalized exactly once with exactly one driver's chunks in its log.
//!
//! The test re-executes its own binary twice as the sweepers (selected by an environment
//! variable), so they have separate clients and caches, as two overlapping invocations would.
//! They call `reap_detached_runs` directly: the single-flight sweep lease would otherwise let only
//! one of them in, and this test is about the per-run claims underneath it.

mod common;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;

use common::{config_builder, fresh_store};
use futures::stream;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome};
use reaper_core::{
    CancellationToken, Chunk, ChunkStream, Clock, DeliveryLog, Drive, DriveError, DriveRequest,
    ExitProbe, NewRun, ProbeError, RunExitProbe, RunPatch, RunRecord, RunStatus, RunStore,
};
use reaper_dynamodb::{DynamoOptions, DynamoStore, SystemClock};
use reaper_testkit::fakes::TokioSleeper;

const TABLE_ENV: &str = "REAPER_DYNAMODB_SWEEP_RACE_TABLE";
const SWEEPER_ENV: &str = "REAPER_DYNAMODB_SWEEP_RACE_SWEEPER";
const RUNS: usize = 200;
const TTL_MS: u64 = 30 * 60 * 1000;

/// Every run's agent has finished.
struct Finished;

#[async_trait::async_trait]
impl ExitProbe for Finished {
    async fn has_finished(&self, _record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        Ok(RunExitProbe::Finished { exit_code: 0 })
    }
}

/// Replays three chunks tagged with the sweeper that drove them.
struct TaggedDrive(u8);

impl Drive for TaggedDrive {
    fn drive(&self, r: DriveRequest, _s: CancellationToken) -> Result<ChunkStream, DriveError> {
        let chunks: Vec<_> = (0..3)
            .map(|k| Ok(Chunk::text(&r.run_id).with("sweeper", self.0).with("k", k)))
            .collect();
        Ok(Box::pin(stream::iter(chunks)))
    }
}

fn run_id(i: usize) -> String {
    format!("sweep-race-{i:03}")
}

async fn child(table: String, sweeper: u8) {
    let store = DynamoStore::from_config_builder(config_builder(), DynamoOptions::new(table));
    let deps = ReapDeps {
        runs: Arc::new(store.clone()),
        logs: Arc::new(store.clone()),
        leases: Arc::new(store.clone()),
        ledger: Arc::new(store.clone()),
        probe: Arc::new(Finished),
        drive: Arc::new(TaggedDrive(sweeper)),
        reclaim: None,
        clock: Arc::new(SystemClock),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(TTL_MS, format!("sweeper-{sweeper}"));
    options.max_runs = RUNS;
    options.fence_quiet_ms = 0;
    let report = reap_detached_runs(&deps, &options)
        .await
        .expect("valid options");
    println!("REPORT {}", serde_json::to_string(&report).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweeps_in_two_processes_never_drive_a_run_twice() {
    if let Ok(table) = std::env::var(TABLE_ENV) {
        let sweeper = std::env::var(SWEEPER_ENV).unwrap().parse().unwrap();
        return child(table, sweeper).await;
    }
    let store = fresh_store("sweep-race").await;
    let now = SystemClock.now_ms();
    for i in 0..RUNS {
        let run = run_id(i);
        store
            .create_or_resume(NewRun {
                run_id: run.clone(),
                thread_id: "t".into(),
                started_at: now - 60_000,
                status: None,
            })
            .await
            .unwrap();
        // Detached a minute ago: inside the TTL, so each run is probed and finalized.
        store
            .update(&run, RunPatch::detach(now - 60_000, None))
            .await
            .unwrap();
    }

    let exe = std::env::current_exe().unwrap();
    let spawn = |sweeper: u8| {
        tokio::process::Command::new(&exe)
            .args([
                "--exact",
                "two_sweeps_in_two_processes_never_drive_a_run_twice",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(TABLE_ENV, store.table_name())
            .env(SWEEPER_ENV, sweeper.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(1), spawn(2));
    let (a, b) = tokio::join!(a.wait_with_output(), b.wait_with_output());

    // run -> the sweepers that reported it finalized, and every outcome seen for it.
    let mut finalized_by: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for (sweeper, out) in [(1u8, a.unwrap()), (2, b.unwrap())] {
        assert!(
            out.status.success(),
            "sweeper {sweeper} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let json = stdout
            .lines()
            .find_map(|l| l.split_once("REPORT ").map(|(_, j)| j.to_string()))
            .unwrap_or_else(|| panic!("sweeper {sweeper} printed no report:\n{stdout}"));
        let report: serde_json::Value = serde_json::from_str(&json).unwrap();
        for entry in report["runs"].as_array().unwrap() {
            let outcome = entry["outcome"].as_str().unwrap().to_string();
            let run = entry["runId"].as_str().unwrap().to_string();
            *outcomes.entry(outcome.clone()).or_default() += 1;
            if outcome == ReapOutcome::Finalized.as_str() {
                finalized_by.entry(run).or_default().push(sweeper);
            } else {
                assert_eq!(
                    outcome,
                    ReapOutcome::NotClaimed.as_str(),
                    "{run}: a losing sweeper only ever sees not-claimed: {entry}"
                );
            }
        }
    }

    assert_eq!(
        finalized_by.len(),
        RUNS,
        "every run finalized: {outcomes:?}"
    );
    for i in 0..RUNS {
        let run = run_id(i);
        let drivers = &finalized_by[&run];
        assert_eq!(drivers.len(), 1, "{run} was finalized twice: {drivers:?}");
        let record = store.get(&run).await.unwrap().unwrap();
        assert_eq!(record.status, RunStatus::Completed, "{run}");
        let log = store.read(&run, 0, 100).await.unwrap();
        let tags: Vec<u64> = log
            .iter()
            .map(|e| e.chunk.get("sweeper").unwrap().as_u64().unwrap())
            .collect();
        assert_eq!(
            tags,
            vec![u64::from(drivers[0]); 3],
            "{run}: the log holds exactly its one driver's chunks"
        );
    }
    assert!(store.list_reclaimable(now, 0).await.unwrap().is_empty());
    eprintln!("sweep race: {outcomes:?}");
}
