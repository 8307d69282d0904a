//! The round-robin cursor a sweep keeps falls behind the TTL cutoff as time passes. DynamoDB
//! refuses a start key outside a Query's key condition, so a store that passed it through would
//! fail every later listing, and the cursor, which only a listing sweep moves, would never move
//! again: the reaper would stop reaping. Through the real core, on DynamoDB Local.

mod common;

use std::sync::Arc;

use common::fresh_store;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions};
use reaper_core::time::ManualClock;
use reaper_core::{
    CancellationToken, ChunkStream, Drive, DriveError, DriveRequest, ExitProbe, NewRun, ProbeError,
    ReclaimableCursor, RunExitProbe, RunPatch, RunRecord, RunStore,
};
use reaper_testkit::fakes::TokioSleeper;

const NOW: i64 = 1_800_000_000_000;
const TTL_MS: u64 = 30 * 60 * 1000;

/// Every agent is still working.
struct Producing;

#[async_trait::async_trait]
impl ExitProbe for Producing {
    async fn has_finished(&self, _record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        Ok(RunExitProbe::Producing)
    }
}

/// Never reached: no run is finished or expired.
struct NoDrive;

impl Drive for NoDrive {
    fn drive(&self, r: DriveRequest, _s: CancellationToken) -> Result<ChunkStream, DriveError> {
        Err(DriveError::new(format!("{} was driven", r.run_id)))
    }
}

#[tokio::test]
async fn a_sweep_whose_saved_cursor_fell_behind_the_ttl_cutoff_lists_and_moves_it_on() {
    let store = fresh_store("cursor-behind").await;
    for i in 0..3 {
        let run_id = format!("inside-{i}");
        store
            .create_or_resume(NewRun {
                run_id: run_id.clone(),
                thread_id: "t".into(),
                started_at: NOW - 120_000,
                status: None,
            })
            .await
            .unwrap();
        let patch = RunPatch {
            detached_since: reaper_core::Patch::Set(NOW - 60_000 + i),
            ..Default::default()
        };
        store.update(&run_id, patch).await.unwrap();
    }
    let deps = ReapDeps {
        runs: store.clone(),
        logs: store.clone(),
        leases: store.clone(),
        ledger: store.clone(),
        probe: Arc::new(Producing),
        drive: Arc::new(NoDrive),
        reclaim: None,
        clock: Arc::new(ManualClock::new(NOW)),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(TTL_MS, "cursor-test");
    options.now = Some(NOW);
    // Where an earlier sweep stopped: a run then inside the TTL, now an hour behind the cutoff.
    options.resume_after = Some(ReclaimableCursor {
        detached_since: NOW - TTL_MS as i64 - 3_600_000,
        run_id: "long-gone".into(),
    });
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    assert_eq!(report.listing_error, None);
    assert_eq!(report.considered, 3);
    assert_eq!(report.outcomes.producing, 3);
    assert_eq!(
        report.cursor,
        Some(ReclaimableCursor {
            detached_since: NOW - 60_000 + 2,
            run_id: "inside-2".into(),
        }),
        "the cursor moved on to the last run this sweep visited"
    );
}
