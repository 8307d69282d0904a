//! The round-robin cursor kept with the sweep lease (issue 13): a caller that keeps no state
//! between sweeps (Lambda, Vercel, a cron-run `reaper sweep`) still goes round robin, through
//! `sweep()` alone, with one note read and at most one note write per sweep.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{Harness, NOW};
use reaper_core::domain::RunRecord;
use reaper_core::error::ProbeError;
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{ExitProbe, LeaseGrant, LeaseStore, ReclaimableCursor, RunExitProbe};
use reaper_core::reap::{sweep, ReapDeps, SweepReport, SweepStatus, SWEEP_LEASE_KEY};
use reaper_testkit::fakes::ScriptedProbe;

const LEASE_TTL: u64 = 60_000;

/// The harness's deps with the sweep lease on the memory store itself (lease notes included).
fn deps(h: &Harness) -> ReapDeps {
    let mut deps = h.deps();
    deps.leases = Arc::new(h.memory.clone());
    deps
}

/// One stateless sweep: nothing carried over from the previous one but what the store keeps.
async fn stateless_sweep(h: &Harness, deps: &ReapDeps) -> SweepReport {
    assert!(h.options.resume_after.is_none());
    let report = sweep(deps, &h.options, LEASE_TTL).await;
    assert_eq!(report.sweep, SweepStatus::Swept);
    report
}

fn considered(report: &SweepReport) -> Vec<&str> {
    report
        .report
        .runs
        .iter()
        .map(|e| e.run_id.as_str())
        .collect()
}

async fn noted_cursor(memory: &MemoryStore) -> Option<ReclaimableCursor> {
    let note = memory.note(SWEEP_LEASE_KEY).await.expect("memory notes");
    note.map(|n| serde_json::from_str(&n).expect("the note is a cursor"))
}

/// Writes `note` with the sweep lease as another sweep would, leaving the lease free.
async fn leave_note(memory: &MemoryStore, note: &str) {
    let LeaseGrant::Acquired(lease) = memory
        .acquire(SWEEP_LEASE_KEY, "earlier-sweep", NOW - 10, 1)
        .await
        .unwrap()
    else {
        panic!("the sweep lease is free")
    };
    assert!(memory.set_note(&lease, note).await.unwrap());
    memory.release(&lease).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn stateless_sweeps_finalize_finished_runs_behind_a_thousand_producing_ones_within_one_round()
{
    let mut h = Harness::new();
    h.options.max_runs = 25;
    // The producing runs are the longest detached: without the cursor every sweep would start
    // at them and never reach the finished ones.
    for i in 0..1_000 {
        h.seed(&format!("producing-{i:04}"), Some(NOW - 600_000 + i), None);
    }
    for i in 0..10 {
        let id = format!("finished-{i:02}");
        h.seed(&id, Some(NOW - 1_000 + i), None);
        h.probe.finished(&id, 0);
    }
    let deps = deps(&h);
    let bound = 1_010_usize.div_ceil(25);
    let mut finalized = 0;
    let mut sweeps = 0;
    while finalized < 10 {
        assert!(
            sweeps < bound,
            "{finalized} of 10 finished runs finalized after {sweeps} stateless sweeps (bound {bound})"
        );
        let report = stateless_sweep(&h, &deps).await;
        assert_eq!(report.report.considered, 25, "every sweep fills its batch");
        finalized += report.report.outcomes.finalized;
        sweeps += 1;
    }
    assert_eq!(finalized, 10);
}

#[tokio::test(start_paused = true)]
async fn a_stateless_sweep_continues_where_the_previous_one_stopped() {
    let mut h = Harness::new();
    h.options.max_runs = 2;
    for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        h.seed(id, Some(NOW - 1_000 + i as i64), None);
    }
    let deps = deps(&h);
    let first = stateless_sweep(&h, &deps).await;
    assert_eq!(considered(&first), ["a", "b"]);
    assert_eq!(noted_cursor(&h.memory).await, first.report.cursor);
    let second = stateless_sweep(&h, &deps).await;
    assert_eq!(considered(&second), ["c", "d"]);
    let third = stateless_sweep(&h, &deps).await;
    assert_eq!(considered(&third), ["e", "a"], "wraps around once");
}

#[tokio::test(start_paused = true)]
async fn a_malformed_cursor_note_restarts_the_round_robin() {
    let mut h = Harness::new();
    h.options.max_runs = 2;
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        h.seed(id, Some(NOW - 1_000 + i as i64), None);
    }
    leave_note(&h.memory, "{\"cursor from\": \"another version\"}").await;
    let deps = deps(&h);
    let report = stateless_sweep(&h, &deps).await;
    assert_eq!(
        considered(&report),
        ["a", "b"],
        "from the start, not an error"
    );
    assert_eq!(
        noted_cursor(&h.memory).await,
        report.report.cursor,
        "the malformed note is replaced"
    );
}

#[tokio::test(start_paused = true)]
async fn an_explicit_resume_after_wins_over_the_noted_cursor() {
    let mut h = Harness::new();
    h.options.max_runs = 1;
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        h.seed(id, Some(NOW - 1_000 + i as i64), None);
    }
    let deps = deps(&h);
    stateless_sweep(&h, &deps).await;
    // A stateful caller (reaper watch, the Durable Object) passes its own cursor.
    h.options.resume_after = Some(ReclaimableCursor {
        detached_since: NOW - 999,
        run_id: "b".into(),
    });
    let report = sweep(&deps, &h.options, LEASE_TTL).await;
    assert_eq!(considered(&report), ["c"]);
    assert_eq!(noted_cursor(&h.memory).await, report.report.cursor);
}

#[tokio::test(start_paused = true)]
async fn a_sweep_without_a_run_inside_the_ttl_writes_no_note() {
    let h = Harness::new();
    h.seed("expired", Some(NOW - 2 * common::TTL as i64), None);
    let deps = deps(&h);
    let report = stateless_sweep(&h, &deps).await;
    assert_eq!(considered(&report), ["expired"]);
    assert_eq!(report.report.cursor, None);
    assert_eq!(h.memory.note(SWEEP_LEASE_KEY).await.unwrap(), None);
}

/// A probe that, on its first call, lets another sweep take the sweep lease over (this sweep's
/// lease expired, as after a long pause) and note its own cursor.
struct Usurper {
    memory: MemoryStore,
    inner: ScriptedProbe,
    done: AtomicBool,
}

#[async_trait::async_trait]
impl ExitProbe for Usurper {
    async fn has_finished(&self, record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        if !self.done.swap(true, Ordering::SeqCst) {
            let later = NOW + 10 * LEASE_TTL as i64;
            let LeaseGrant::Acquired(lease) = self
                .memory
                .acquire(SWEEP_LEASE_KEY, "usurper", later, LEASE_TTL)
                .await
                .unwrap()
            else {
                panic!("the expired sweep lease is granted to the usurper")
            };
            assert!(self
                .memory
                .set_note(&lease, "usurper's cursor")
                .await
                .unwrap());
        }
        self.inner.has_finished(record).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_sweep_that_lost_its_lease_leaves_the_new_holders_cursor_alone() {
    let mut h = Harness::new();
    h.options.max_runs = 2;
    h.seed("a", Some(NOW - 1_000), None);
    h.seed("b", Some(NOW - 999), None);
    let mut deps = deps(&h);
    deps.probe = Arc::new(Usurper {
        memory: h.memory.clone(),
        inner: h.probe.clone(),
        done: AtomicBool::new(false),
    });
    let report = stateless_sweep(&h, &deps).await;
    assert_eq!(considered(&report), ["a", "b"]);
    assert_eq!(
        h.memory.note(SWEEP_LEASE_KEY).await.unwrap().as_deref(),
        Some("usurper's cursor")
    );
}
