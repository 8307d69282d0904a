//! Two sweepers in two processes race over the same 200 runs on one DynamoDB Local table:
//! per-run claim leases, epoch bumps, fenced appends and fenced terminal writes. No epoch may be
//! lost or granted twice, and no superseded holder may land a write.
//!
//! The test re-executes its own binary twice as the sweepers (selected by an environment
//! variable), so the two have separate clients, connection pools and caches, as two Lambda
//! invocations would.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;

use common::{config_builder, fresh_store};
use reaper_core::{
    Appended, Chunk, DeliveryLog, EpochBump, Fenced, LeaseGrant, LeaseStore, NewRun, RunPatch,
    RunStatus, RunStore, TerminalStatus, TerminalWrite,
};
use reaper_dynamodb::{DynamoOptions, DynamoStore};
use serde::{Deserialize, Serialize};

const TABLE_ENV: &str = "REAPER_DYNAMODB_RACE_TABLE";
const SWEEPER_ENV: &str = "REAPER_DYNAMODB_RACE_SWEEPER";
const RUNS: usize = 200;
const NOW: i64 = 1_700_000_000_000;
const TTL: u64 = 30 * 60 * 1000;

#[derive(Debug, Serialize, Deserialize)]
struct Attempt {
    run: String,
    sweeper: u8,
    lease_acquired: bool,
    epoch: Option<u64>,
    /// "written", "superseded", "closed", or absent without a claim.
    append: Option<String>,
    terminal: Option<String>,
}

fn run_id(i: usize) -> String {
    format!("race-{i:03}")
}

/// One sweeper's pass over every run, in the same order as the other's so they collide.
async fn sweep(store: &DynamoStore, sweeper: u8) -> Vec<Attempt> {
    let mut attempts = Vec::with_capacity(RUNS);
    for i in 0..RUNS {
        let run = run_id(i);
        let lease = store
            .acquire(
                &format!("run-driver:{run}"),
                &format!("sweeper-{sweeper}"),
                NOW,
                TTL,
            )
            .await
            .expect("acquire");
        let mut attempt = Attempt {
            run: run.clone(),
            sweeper,
            lease_acquired: matches!(lease, LeaseGrant::Acquired(_)),
            epoch: None,
            append: None,
            terminal: None,
        };
        // Both go on whatever the lease said, as a holder whose lease silently expired would:
        // only the epoch fence may keep the loser out.
        if let EpochBump::Claimed { epoch, .. } = store.bump_epoch(&run).await.expect("bump") {
            attempt.epoch = Some(epoch);
            let tag = |k: u8| {
                Chunk::text("x")
                    .with("sweeper", sweeper)
                    .with("epoch", epoch)
                    .with("k", k)
            };
            let appended = store
                .append(&run, Some(epoch), vec![tag(0), tag(1)], NOW)
                .await
                .expect("append");
            attempt.append = Some(
                match appended {
                    Fenced::Written(Appended::At { .. }) => "written",
                    Fenced::Written(Appended::Closed) => "closed",
                    Fenced::Superseded { .. } => "superseded",
                }
                .into(),
            );
            let write = TerminalWrite {
                status: TerminalStatus::Completed,
                finished_at: NOW + i64::from(sweeper),
                error: None,
            };
            attempt.terminal = Some(
                match store
                    .write_terminal(&run, epoch, &write)
                    .await
                    .expect("terminal")
                {
                    Fenced::Written(true) => "written",
                    Fenced::Written(false) => "missing",
                    Fenced::Superseded { .. } => "superseded",
                }
                .into(),
            );
        }
        attempts.push(attempt);
    }
    attempts
}

async fn child(table: String, sweeper: u8) {
    let store = DynamoStore::from_config_builder(config_builder(), DynamoOptions::new(table));
    for attempt in sweep(&store, sweeper).await {
        println!("RACE {}", serde_json::to_string(&attempt).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweeper_processes_racing_over_200_runs_lose_no_epoch_and_land_no_superseded_write() {
    if let Ok(table) = std::env::var(TABLE_ENV) {
        let sweeper = std::env::var(SWEEPER_ENV).unwrap().parse().unwrap();
        return child(table, sweeper).await;
    }
    let store = fresh_store("race").await;
    for i in 0..RUNS {
        let run = run_id(i);
        store
            .create_or_resume(NewRun {
                run_id: run.clone(),
                thread_id: "t".into(),
                started_at: NOW - 4 * TTL as i64,
                status: None,
            })
            .await
            .unwrap();
        store
            .update(&run, RunPatch::detach(NOW - 2 * TTL as i64, None))
            .await
            .unwrap();
    }

    let exe = std::env::current_exe().unwrap();
    let spawn = |sweeper: u8| {
        tokio::process::Command::new(&exe)
            .args([
                "--exact",
                "two_sweeper_processes_racing_over_200_runs_lose_no_epoch_and_land_no_superseded_write",
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
    let mut attempts: BTreeMap<String, Vec<Attempt>> = BTreeMap::new();
    for out in [a.unwrap(), b.unwrap()] {
        assert!(
            out.status.success(),
            "a sweeper process failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // libtest prints `test <name> ... ` on the same line before the first of them.
            if let Some(json) = line.split_once("RACE ").map(|(_, json)| json) {
                let attempt: Attempt = serde_json::from_str(json).unwrap();
                attempts
                    .entry(attempt.run.clone())
                    .or_default()
                    .push(attempt);
            }
        }
    }
    assert_eq!(attempts.len(), RUNS, "every run reported by the sweepers");

    let (mut superseded, mut double_claims) = (0, 0);
    for (run, tries) in &attempts {
        assert_eq!(tries.len(), 2, "{run}: one attempt per sweeper");
        assert_eq!(
            tries.iter().filter(|t| t.lease_acquired).count(),
            1,
            "{run}: exactly one sweeper holds the claim lease"
        );
        let epochs: Vec<u64> = tries.iter().filter_map(|t| t.epoch).collect();
        let granted: BTreeSet<u64> = epochs.iter().copied().collect();
        assert_eq!(
            granted.len(),
            epochs.len(),
            "{run}: an epoch was granted twice: {epochs:?}"
        );
        let top = *granted.iter().max().expect("someone claimed");
        assert_eq!(
            granted,
            (1..=top).collect(),
            "{run}: an epoch was lost: {epochs:?}"
        );
        double_claims += usize::from(epochs.len() == 2);

        let landed: Vec<&Attempt> = tries
            .iter()
            .filter(|t| t.terminal.as_deref() == Some("written"))
            .collect();
        assert_eq!(
            landed.len(),
            1,
            "{run}: exactly one terminal write lands: {tries:?}"
        );
        assert_eq!(
            landed[0].epoch,
            Some(top),
            "{run}: the terminal write came from a superseded holder"
        );
        superseded += tries
            .iter()
            .filter(|t| t.terminal.as_deref() == Some("superseded"))
            .count();

        let record = store.get(run).await.unwrap().unwrap();
        assert_eq!(record.status, RunStatus::Completed);
        assert_eq!(record.driver_epoch, Some(top), "{run}: stored epoch");
        assert_eq!(record.finished_at, Some(NOW + i64::from(landed[0].sweeper)));

        // The log: nothing from a superseded append, everything from a landed one, and epochs
        // never go backwards along it.
        let entries = store.read(run, 0, 100).await.unwrap();
        let tags: Vec<u64> = entries
            .iter()
            .map(|e| e.chunk.get("epoch").unwrap().as_u64().unwrap())
            .collect();
        assert!(
            tags.windows(2).all(|w| w[0] <= w[1]),
            "{run}: log epochs {tags:?}"
        );
        for t in tries {
            let n = tags.iter().filter(|e| Some(**e) == t.epoch).count();
            match t.append.as_deref() {
                Some("written") => assert_eq!(n, 2, "{run}: a landed append is whole"),
                Some(_) => assert_eq!(n, 0, "{run}: a refused append left entries"),
                None => {}
            }
        }
    }
    assert!(
        store.list_reclaimable(NOW, 0).await.unwrap().is_empty(),
        "every run left the index"
    );
    eprintln!("race: {double_claims} runs claimed by both sweepers, {superseded} terminal writes refused as superseded");
}
