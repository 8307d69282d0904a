//! Damage on DynamoDB (issue 24): the table going away under a sweep is damage, not a run error,
//! so the sweep stops before any terminal write or destroy and its report says so.

mod common;

use std::sync::Arc;

use common::fresh_store;
use futures::stream;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome};
use reaper_core::{
    CancellationToken, Chunk, ChunkStream, Clock, Drive, DriveError, DriveRequest, ExitProbe,
    NewRun, ProbeError, RunExitProbe, RunPatch, RunRecord, RunStore,
};
use reaper_dynamodb::{DynamoStore, SystemClock};
use reaper_testkit::fakes::{RecordingReclaim, TokioSleeper};

const TTL_MS: u64 = 30 * 60 * 1000;

struct Finished;

#[async_trait::async_trait]
impl ExitProbe for Finished {
    async fn has_finished(&self, _record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        Ok(RunExitProbe::Finished { exit_code: 0 })
    }
}

/// Fault injection: the table is deleted when the first run is driven, after the listing read
/// it; the replay then has nowhere to land.
struct DeletesTheTable(Arc<DynamoStore>);

impl Drive for DeletesTheTable {
    fn drive(&self, r: DriveRequest, _s: CancellationToken) -> Result<ChunkStream, DriveError> {
        let store = self.0.clone();
        let delete = async move {
            // Deleting twice (a second run driven) answers ResourceNotFound: already gone.
            let _ = store.delete_table().await;
            Ok(Chunk::text(&r.run_id))
        };
        Ok(Box::pin(stream::once(delete)))
    }
}

#[tokio::test]
async fn a_table_deleted_under_the_sweep_is_damage_and_no_sandbox_is_destroyed() {
    let store = fresh_store("damage-deleted").await;
    let now = SystemClock.now_ms();
    for id in ["r1", "r2"] {
        store
            .create_or_resume(NewRun {
                run_id: id.into(),
                thread_id: "t".into(),
                started_at: now - 60_000,
                status: None,
            })
            .await
            .unwrap();
        store
            .update(id, RunPatch::detach(now - 30_000, Some(format!("k-{id}"))))
            .await
            .unwrap();
    }
    let reclaim = RecordingReclaim::new();
    let deps = ReapDeps {
        runs: store.clone(),
        logs: store.clone(),
        leases: store.clone(),
        ledger: store.clone(),
        probe: Arc::new(Finished),
        drive: Arc::new(DeletesTheTable(store.clone())),
        reclaim: Some(Arc::new(reclaim.clone())),
        clock: Arc::new(SystemClock),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(TTL_MS, "damage-test");
    options.concurrency = 1;
    options.fence_quiet_ms = 0;
    let report = reap_detached_runs(&deps, &options).await.unwrap();

    let damage = report
        .damaged
        .as_deref()
        .unwrap_or_else(|| panic!("the report names no damage: {report:?}"));
    assert!(
        damage.contains("ResourceNotFoundException") && damage.contains("damaged"),
        "{damage}"
    );
    assert!(
        reclaim.reclaimed().is_empty(),
        "a sandbox was destroyed after the damage: {:?}",
        reclaim.reclaimed()
    );
    // No terminal status recorded, none finalized, and the run after the damage not started.
    assert!(
        report
            .runs
            .iter()
            .all(|e| e.status.is_none() && e.outcome != ReapOutcome::Finalized),
        "a run was recorded terminal after the damage: {:?}",
        report.runs
    );
    assert_eq!(report.runs.len(), 1, "{:?}", report.runs);
    assert_eq!(report.deferred, 1, "{report:?}");
}
