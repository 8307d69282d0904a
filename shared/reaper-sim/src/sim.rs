//! One seed, end to end: build the world from the [`Plan`], run every actor (agents, viewers,
//! sweepers, the clock jumper) on the deterministic executor, then sweep cleanly (no faults)
//! until quiescent and check the invariants.

use std::sync::Arc;

use futures::future::{select, Either};
use reaper_core::claim::{Claim, ClaimError};
use reaper_core::domain::{
    Patch, RunPatch, RunRecord, SandboxInstanceRecord, Transcript, TranscriptMessage,
};
use reaper_core::error::{ClaimRefusal, ReapError};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{Fenced, MessageStore, RunStore, SandboxInstanceStore};
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{reap_detached_runs, sweep, ReapDeps, ReapOptions, ReapReport};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};

use crate::chaos::{Chaos, Faults};
use crate::check;
use crate::exec::{Executor, SkewedClock, VirtualTime};
use crate::plan::{EntryPoint, Plan, RunPlan, SweeperPlan, BUDGET_MS, SWEEP_LEASE_MS, T0, TTL_MS};
use crate::rng::Rng;
use crate::trace::{Trace, Violation};
use crate::world::{SimProvider, TrackedDrive, World, PROVIDER};

/// Polls per phase before the executor calls it a livelock.
const MAX_POLLS: u64 = 3_000_000;
/// Clean sweeps after the schedule, each after a two-hour jump (past every backoff and lease).
const CLEAN_SWEEPS: usize = 4;

/// What one seed did.
#[derive(Debug, Clone)]
pub struct SeedReport {
    pub seed: u64,
    pub violations: Vec<Violation>,
    /// The whole event trace (the binary prints its tail with a repro).
    pub trace: Vec<String>,
    pub stats: Stats,
}

/// Counters over a seed, summed over many by the binary.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub runs: u64,
    pub sweeps: u64,
    pub crashes: u64,
    pub faults: u64,
    pub polls: u64,
    pub completed: u64,
    pub failed: u64,
    pub aborted: u64,
    /// Sandboxes the stuck provider never let go of (their ledger entries stay).
    pub leaked: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.runs += o.runs;
        self.sweeps += o.sweeps;
        self.crashes += o.crashes;
        self.faults += o.faults;
        self.polls += o.polls;
        self.completed += o.completed;
        self.failed += o.failed;
        self.aborted += o.aborted;
        self.leaked += o.leaked;
    }
}

/// Everything the actors share.
#[derive(Debug, Clone)]
struct Shared {
    store: MemoryStore,
    time: VirtualTime,
    trace: Trace,
    world: World,
    faults: Faults,
    counters: Arc<std::sync::Mutex<Stats>>,
}

impl Shared {
    fn count(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.counters.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// Runs one seed and checks every invariant.
pub fn run_seed(seed: u64) -> SeedReport {
    let mut rng = Rng::new(seed);
    let plan = Plan::draw(seed, &mut rng.fork());
    let time = VirtualTime::new(T0);
    let trace = Trace::new(time.clone());
    let store = MemoryStore::new();
    let shared = Shared {
        world: World::new(store.clone(), trace.clone()),
        faults: Faults::new(rng.fork(), plan.fault_rate),
        store,
        time: time.clone(),
        trace: trace.clone(),
        counters: Arc::default(),
    };
    seed_world(&shared, &plan);

    let mut executor = Executor::new(time.clone(), rng.fork());
    for run in &plan.runs {
        spawn_run_actors(&mut executor, &shared, run);
    }
    for sweeper in &plan.sweepers {
        let (s, p) = (shared.clone(), sweeper.clone());
        executor.spawn(
            sweeper.name.clone(),
            async move { sweeper_actor(s, p).await },
        );
    }
    for (i, &(delay, jump)) in plan.jumps.iter().enumerate() {
        let s = shared.clone();
        executor.spawn(format!("jump-{i}"), async move {
            s.time.sleep(delay).await;
            s.trace.event(format!("clock jumps {jump} ms"));
            s.time.jump(jump);
        });
    }
    if let Err(stall) = executor.run(MAX_POLLS) {
        trace.violate("stall", format!("the schedule stalled: {stall:?}"));
    }
    let mut polls = executor.polls();

    // Orphans are checked before the clean sweeps: a terminal run's sandbox that nobody will
    // ever retry is a leak whatever happens next.
    check::no_orphaned_sandbox(&shared.store, &shared.world, &trace);

    shared.faults.disable();
    trace.event("faults off: clean sweeps until quiescent");
    let mut executor = Executor::new(time.clone(), rng.fork());
    let s = shared.clone();
    executor.spawn("clean", async move {
        let clean = SweeperPlan {
            name: "clean".into(),
            entry: EntryPoint::Reap,
            skew_ms: 0,
            fence_quiet_ms: 0,
            page_bytes: 4096,
            sweeps: Vec::new(),
        };
        let deps = deps_for(&s, &clean);
        for _ in 0..CLEAN_SWEEPS {
            s.time.jump(2 * 3_600_000);
            let report = reap_detached_runs(&deps, &options_for(&clean))
                .await
                .expect("valid options");
            s.trace.event(format!("clean sweep: {}", summary(&report)));
        }
    });
    if let Err(stall) = executor.run(MAX_POLLS) {
        trace.violate("stall", format!("the clean sweeps stalled: {stall:?}"));
    }
    polls += executor.polls();

    check::after_quiescence(&plan, &shared.store, &shared.world, &trace);

    let mut stats = *shared.counters.lock().unwrap_or_else(|p| p.into_inner());
    stats.runs = plan.runs.len() as u64;
    stats.faults = trace.faults();
    stats.polls = polls;
    for run in shared.store.all_runs() {
        use reaper_core::domain::RunStatus::*;
        match run.status {
            Completed => stats.completed += 1,
            Failed => stats.failed += 1,
            Aborted => stats.aborted += 1,
            Running | Interrupted => {}
        }
    }
    stats.leaked = plan
        .stuck
        .iter()
        .filter(|id| shared.world.is_alive(id))
        .count() as u64;
    SeedReport {
        seed,
        violations: trace.violations(),
        trace: trace.tail(usize::MAX),
        stats,
    }
}

/// The rows the chat application wrote before the schedule starts.
fn seed_world(shared: &Shared, plan: &Plan) {
    for id in plan
        .runs
        .iter()
        .filter_map(|r| r.sandbox.as_ref().map(|s| &s.0))
    {
        if !shared.world.sandbox_ids().contains(id) {
            shared.world.add_sandbox(id, plan.stuck.contains(id));
        }
    }
    for (i, run) in plan.runs.iter().enumerate() {
        let mut record = RunRecord::new(&run.run_id, &run.thread_id, T0 - 200_000 + i as i64);
        if run.detach_at_ms <= 0 {
            record.detached_since = Some(T0 + run.detach_at_ms);
        }
        if let Some((id, key)) = &run.sandbox {
            record.sandbox_key = Some(key.clone());
            shared.world.add_user(id, &run.run_id, run.paths.clone());
            // The thread's newest turn is the instance's latest run.
            let instance = SandboxInstanceRecord {
                key: key.clone(),
                provider: PROVIDER.into(),
                provider_sandbox_id: id.clone(),
                latest_snapshot_id: None,
                thread_id: run.thread_id.clone(),
                latest_run_id: Some(run.run_id.clone()),
                updated_at: T0,
            };
            crate::ready(shared.store.upsert(instance)).expect("memory store");
        }
        shared.store.put_run(record);
        if let Some(prompt) = &run.user_prompt {
            let transcript = Transcript {
                run_id: run.run_id.clone(),
                thread_id: run.thread_id.clone(),
                messages: vec![TranscriptMessage {
                    role: "user".into(),
                    content: prompt.clone(),
                }],
                exit_code: None,
                saved_at: T0,
            };
            crate::ready(shared.store.save_transcript(&transcript, None)).expect("memory store");
        }
    }
}

fn spawn_run_actors(executor: &mut Executor, shared: &Shared, run: &RunPlan) {
    if let Some((sandbox, _)) = run.sandbox.clone() {
        let (s, r) = (shared.clone(), run.clone());
        executor.spawn(format!("agent {}", run.run_id), async move {
            for write in &r.writes {
                s.time.sleep(write.delay_ms).await;
                if !s.world.write(&sandbox, &r.paths.journal, &write.bytes) {
                    s.trace
                        .event(format!("agent {} stops: its sandbox is gone", r.run_id));
                    return;
                }
            }
            s.trace.event(format!("agent {} is done writing", r.run_id));
        });
    }
    if run.detach_at_ms > 0 {
        // The viewer who started the run leaves: the application's disconnect handler.
        let (s, id, at) = (shared.clone(), run.run_id.clone(), run.detach_at_ms as u64);
        executor.spawn(format!("detach {id}"), async move {
            s.time.sleep(at).await;
            detach(&s, &id).await;
        });
    }
    if let Some((at, hold)) = run.viewer {
        let (s, id) = (shared.clone(), run.run_id.clone());
        executor.spawn(format!("viewer {id}"), async move {
            s.time.sleep(at).await;
            viewer_returns(&s, &id, hold).await;
        });
    }
}

/// The application's disconnect: stamps `detachedSince` (reliably: it is not under test).
async fn detach(s: &Shared, run_id: &str) {
    let now = s.time.now();
    s.trace.event(format!("viewer of {run_id} detaches"));
    s.store
        .update(run_id, RunPatch::detach(now, None))
        .await
        .expect("memory store");
}

/// A viewer comes back: the application's takeover takes the run's claim (the same lease the
/// reaper uses), refuses a run with a recorded cancel, clears `detachedSince`, stays a while as
/// the run's driver, then detaches again.
async fn viewer_returns(s: &Shared, run_id: &str, hold_ms: u64) {
    let who = format!("viewer-{run_id}");
    let chaos = Chaos {
        store: s.store.clone(),
        actor: who.as_str().into(),
        faults: s.faults.clone(),
        trace: s.trace.clone(),
    };
    let ttl = 30_000;
    let claim = loop {
        match Claim::acquire(&chaos, &chaos, run_id, &who, s.time.now(), ttl).await {
            Ok(claim) => break claim,
            Err(e) => {
                let busy = matches!(
                    &e,
                    ClaimError::Refused(ReapError::ClaimNotAcquired {
                        reason: ClaimRefusal::Busy,
                        ..
                    })
                );
                s.trace.event(format!("{who} could not take over: {e:?}"));
                // A busy run is retried a little later; anything else ends the visit.
                if !busy || s.time.now() > T0 + 400_000 {
                    return;
                }
                s.time.sleep(5_000).await;
            }
        }
    };
    // As the core's own cancel does: confirm the lease is held right before acting on the claim
    // (a lease that expired between the grant and the bump is otherwise handed out as live).
    let confirmed = claim.confirm(&chaos, &s.time, ttl).await.is_ok();
    if !confirmed || claim.record.cancel_requested == Some(true) || claim.signal().is_cancelled() {
        s.trace.event(format!(
            "{who} finds a recorded cancel or a lost claim; leaves"
        ));
        claim.release(&chaos).await;
        return;
    }
    let guard = s.trace.start_driving(run_id, &who);
    let attach = RunPatch {
        detached_since: Patch::Clear,
        ..RunPatch::default()
    };
    // Fenced on the takeover's epoch: a lease that expired after its confirmation (and a sweep
    // that claimed the run meanwhile) refuses the attach at the store.
    let attached = chaos.update_fenced(run_id, claim.epoch, attach).await;
    if let Ok(Fenced::Superseded { observed }) = &attached {
        s.trace.event(format!(
            "{who}'s attach was fenced out by epoch {observed}; leaves"
        ));
    }
    if matches!(attached, Ok(Fenced::Written(true))) {
        let live = s.trace.holds_claim(run_id, &who);
        s.trace
            .event(format!("{who} is attached (claim current: {live})"));
        let stay = s.time.sleep(hold_ms);
        let keep = claim.keep_alive(&chaos, &s.time, &s.time, ttl);
        futures::pin_mut!(stay, keep);
        if let Either::Right((never, _)) = select(stay, keep).await {
            match never {}
        }
        // A viewer who came back must not be poisoned: a cancel recorded while it was attached
        // means a sweep's expiry re-check and its cancel were not atomic with respect to it.
        let record = RunStore::get(&s.store, run_id).await.expect("memory store");
        if let Some(r) = record.filter(|r| r.cancel_requested == Some(true)) {
            s.trace.violate(
                "viewer-poisoned",
                format!(
                    "{who} came back to {run_id} (its claim current when it attached: {live}) \
                     and a sweep recorded a cancel while it was attached (status {})",
                    r.status
                ),
            );
        }
    }
    drop(guard);
    detach(s, run_id).await;
    claim.release(&chaos).await;
}

fn options_for(p: &SweeperPlan) -> ReapOptions {
    let mut options = ReapOptions::new(TTL_MS, p.name.clone());
    options.run_budget_ms = BUDGET_MS;
    options.fence_quiet_ms = p.fence_quiet_ms;
    options
}

fn deps_for(s: &Shared, p: &SweeperPlan) -> ReapDeps {
    let chaos = Arc::new(Chaos {
        store: s.store.clone(),
        actor: p.name.as_str().into(),
        faults: s.faults.clone(),
        trace: s.trace.clone(),
    });
    let provider = Arc::new(SimProvider {
        world: s.world.clone(),
        actor: p.name.as_str().into(),
        faults: s.faults.clone(),
    });
    let clock = Arc::new(SkewedClock {
        time: s.time.clone(),
        skew_ms: p.skew_ms,
    });
    let sleeper = Arc::new(s.time.clone());
    let replay = JournalReplayDrive::new(
        ReplayDeps {
            runs: chaos.clone(),
            instances: chaos.clone(),
            provider: provider.clone(),
            logs: chaos.clone(),
            messages: chaos.clone(),
            clock: clock.clone(),
            sleeper: sleeper.clone(),
        },
        ReplayOptions {
            page_bytes: p.page_bytes,
            poll_ms: 500,
            ..ReplayOptions::default()
        },
    );
    ReapDeps {
        runs: chaos.clone(),
        logs: chaos.clone(),
        leases: chaos.clone(),
        ledger: chaos.clone(),
        probe: Arc::new(JournalExitProbe::new(
            provider.clone(),
            chaos.clone(),
            ProbeOptions::default(),
        )),
        drive: Arc::new(TrackedDrive {
            inner: Arc::new(replay),
            actor: p.name.as_str().into(),
            trace: s.trace.clone(),
        }),
        reclaim: Some(Arc::new(SandboxReclaimer {
            provider,
            instances: chaos.clone(),
            runs: chaos,
        })),
        clock,
        sleeper,
        damage: Default::default(),
    }
}

async fn sweeper_actor(s: Shared, p: SweeperPlan) {
    let deps = deps_for(&s, &p);
    let options = options_for(&p);
    for planned in &p.sweeps {
        s.time.sleep(planned.delay_ms).await;
        s.trace.event(format!("{} starts a {:?}", p.name, p.entry));
        s.count(|c| c.sweeps += 1);
        let run = async {
            match p.entry {
                EntryPoint::Sweep => sweep(&deps, &options, SWEEP_LEASE_MS).await.report,
                EntryPoint::Reap => reap_detached_runs(&deps, &options)
                    .await
                    .expect("valid options"),
            }
        };
        let report = match planned.crash_after_ms {
            None => run.await,
            Some(after) => {
                let crash = s.time.sleep(after);
                futures::pin_mut!(run, crash);
                match select(run, crash).await {
                    Either::Left((report, _)) => report,
                    Either::Right(_) => {
                        // Dropping the future mid-call is a process dying: no cleanup runs, its
                        // leases stay until they expire.
                        s.trace.event(format!("{} CRASHES", p.name));
                        s.count(|c| c.crashes += 1);
                        continue;
                    }
                }
            }
        };
        s.trace
            .event(format!("{} swept: {}", p.name, summary(&report)));
    }
}

fn summary(r: &ReapReport) -> String {
    let runs: Vec<String> = r
        .runs
        .iter()
        .map(|e| format!("{}={}", e.run_id, e.outcome))
        .collect();
    format!(
        "[{}] reclaims retried {} settled {} failed {} busy {} ledger {:?}",
        runs.join(" "),
        r.reclaims.retried,
        r.reclaims.settled,
        r.reclaims.failed,
        r.reclaims.busy,
        r.reclaims.ledger.map(|l| (l.pending, l.leaked))
    )
}
