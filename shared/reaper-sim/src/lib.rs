//! Deterministic simulation of the sweep (issue 12).
//!
//! Each seed draws a schedule ([`plan`]): two or three sweepers calling `reap::sweep` or
//! `reap::reap_detached_runs` concurrently over one shared [`reaper_core::memory::MemoryStore`],
//! agents writing their journals (and finishing) mid-sweep, viewers coming back through the
//! takeover claim, sweepers crashing, clocks skewed and jumping past leases, and every port call
//! failing at random before or after it lands ([`chaos`]). The probe and the drive are the
//! core's own, over an in-memory sandbox world ([`world`]). Everything runs on one thread with a
//! seeded scheduler and virtual time ([`exec`]), so a seed replays exactly.
//!
//! After the schedule, faults are switched off and clean sweeps run until quiescent; then the
//! invariants are checked ([`check`]), on top of the ones checked as things happen ([`trace`]):
//!
//! 1. no sandbox of terminal runs is left alive without a pending ledger entry, and after the
//!    clean sweeps every such sandbox is destroyed unless the provider still refuses;
//! 2. no sandbox is destroyed while a run that uses it is not terminal;
//! 3. no duplicate (or missing, or reordered) chunk in any delivery log;
//! 4. one transcript per finalized run, holding the whole output and the chat's own prompt;
//! 5. two sweeps never drive one run at once under live claims, and a superseded holder's write
//!    never lands after a newer holder's;
//! 6. after quiescence the ledger is empty unless the provider still refuses;
//!
//! plus "same outcome as without the crash": a finalized status, log and transcript say exactly
//! what the agent's journal says.

pub mod chaos;
pub mod check;
pub mod exec;
pub mod plan;
pub mod rng;
pub mod sim;
pub mod trace;
pub mod world;

pub use sim::{run_seed, SeedReport, Stats};
pub use trace::Violation;

/// The one line that reproduces a seed.
pub fn repro(seed: u64) -> String {
    format!("repro: cargo run -p reaper-sim --release -- --seed {seed}")
}

/// The result of a memory-store call, which never waits (its futures are ready at once).
pub(crate) fn ready<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::FutureExt::now_or_never(Box::pin(f)).expect("a memory-store call never waits")
}
