//! The sweep tests' fixture: the spec's harness (NOW, TTL, quiet window 0) over a spying memory
//! store, faulty leases, a scripted probe and drive, and a recording reclaimer, on virtual time.
#![allow(dead_code)]

use std::sync::Arc;

use reaper_core::domain::{RunRecord, RunStatus};
use reaper_core::memory::MemoryStore;
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapReport};
use reaper_testkit::fakes::{
    FaultyLeases, RecordingReclaim, ScriptedDrive, ScriptedProbe, SpyStore, TokioClock,
    TokioSleeper,
};

pub const NOW: i64 = 1_700_000_000_000;
pub const TTL: u64 = 30 * 60 * 1000;

pub struct Harness {
    pub memory: MemoryStore,
    pub store: SpyStore,
    pub leases: FaultyLeases,
    pub probe: ScriptedProbe,
    pub drive: ScriptedDrive,
    pub reclaim: RecordingReclaim,
    pub clock: TokioClock,
    pub options: ReapOptions,
    pub with_reclaim: bool,
}

impl Harness {
    /// Must be called inside a tokio runtime (virtual time starts at NOW).
    pub fn new() -> Self {
        let memory = MemoryStore::new();
        let mut options = ReapOptions::new(TTL, "test-host");
        options.now = Some(NOW);
        options.fence_quiet_ms = 0;
        Harness {
            store: SpyStore::new(memory.clone()),
            leases: FaultyLeases::new(memory.clone()),
            memory,
            probe: ScriptedProbe::new(),
            drive: ScriptedDrive::new(Arc::new(TokioSleeper)),
            reclaim: RecordingReclaim::new(),
            clock: TokioClock::new(NOW),
            options,
            with_reclaim: true,
        }
    }

    /// Seeds a run directly (not through the spy, so the fixture's writes are not counted).
    pub fn seed(&self, run_id: &str, detached_since: Option<i64>, sandbox_key: Option<&str>) {
        self.seed_with(run_id, detached_since, sandbox_key, RunStatus::Running);
    }

    pub fn seed_with(
        &self,
        run_id: &str,
        detached_since: Option<i64>,
        sandbox_key: Option<&str>,
        status: RunStatus,
    ) {
        let mut r = RunRecord::new(run_id, format!("thread-{run_id}"), NOW - 4 * TTL as i64);
        r.detached_since = detached_since;
        r.sandbox_key = sandbox_key.map(str::to_string);
        r.status = status;
        self.memory.put_run(r);
    }

    pub fn deps(&self) -> ReapDeps {
        ReapDeps {
            runs: Arc::new(self.store.clone()),
            logs: Arc::new(self.store.clone()),
            leases: Arc::new(self.leases.clone()),
            ledger: Arc::new(self.store.clone()),
            probe: Arc::new(self.probe.clone()),
            drive: Arc::new(self.drive.clone()),
            reclaim: self
                .with_reclaim
                .then(|| Arc::new(self.reclaim.clone()) as Arc<dyn reaper_core::Reclaim>),
            clock: Arc::new(self.clock.clone()),
            sleeper: Arc::new(TokioSleeper),
            damage: Default::default(),
        }
    }

    pub async fn sweep(&self) -> ReapReport {
        reap_detached_runs(&self.deps(), &self.options)
            .await
            .expect("valid options")
    }

    pub async fn record(&self, run_id: &str) -> RunRecord {
        self.store.record(run_id).await.expect("seeded run")
    }
}

pub fn entry<'a>(report: &'a ReapReport, run_id: &str) -> &'a reaper_core::reap::ReapRunEntry {
    report
        .runs
        .iter()
        .find(|e| e.run_id == run_id)
        .unwrap_or_else(|| panic!("no entry for {run_id} in {report:#?}"))
}
