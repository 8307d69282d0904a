//! The simulation in CI: a few hundred seeds (the binary runs 10,000), determinism, and a check
//! that the schedules really exercise what they claim to.

use std::collections::BTreeMap;

use reaper_sim::{repro, run_seed, Stats};

/// Seeds run by `cargo test` (the `reaper-sim` binary runs 10,000 by default).
const CI_SEEDS: u64 = 300;

/// Invariants `reaper-core` breaks today (reported to the core's owner, not hidden: the binary
/// reports them on every run). Any other invariant fails this suite at once; remove an entry
/// when the core fixes it so the invariant is enforced again. The seeds show each one on the core
/// of this commit (`cargo run -p reaper-sim --release -- --seed N` prints the trace); a change in
/// the core shifts the interleavings, so they are examples, not fixtures.
const KNOWN_CORE_BUGS: &[(&str, &[u64])] = &[
    // Fixed since the simulator found them (the seeds are kept as regression examples):
    // a ledger retry that dropped the intent of a run whose holder was paused (now the retry
    // bumps the epoch first, and a dropped leak is recorded again), and a failed terminal write
    // whose RUN_ERROR a resumed drive appended after (now any RUN_ERROR ends a resumed drive).
    //
    // Still reachable, only under two faults in a row (1 seed in 10,000 and about 3 in 1,000):
    // a takeover whose lease expires between its confirmation and its attach write (the attach
    // is not fenced on the epoch), and a drive retried after a failed terminal write whose check
    // of the log's last entry fails too, so a second RUN_ERROR follows the first.
    ("viewer-poisoned", &[38, 890, 9658]),
    ("chunk-after-run-error", &[44, 311]),
];

fn known(invariant: &str) -> bool {
    KNOWN_CORE_BUGS.iter().any(|(name, _)| *name == invariant)
}

#[test]
fn a_few_hundred_seeds_break_no_invariant_beyond_the_known_core_bugs() {
    let mut failures = Vec::new();
    let mut known_hits: BTreeMap<&str, u64> = BTreeMap::new();
    for seed in 0..CI_SEEDS {
        let report = run_seed(seed);
        for v in &report.violations {
            if known(v.invariant) {
                *known_hits.entry(v.invariant).or_default() += 1;
            } else {
                failures.push(format!("seed {seed}: {v}\n  {}", repro(seed)));
            }
        }
    }
    eprintln!("known core bugs hit over {CI_SEEDS} seeds: {known_hits:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [7, 44, 1592] {
        let (a, b) = (run_seed(seed), run_seed(seed));
        assert_eq!(a.trace, b.trace, "seed {seed} is not deterministic");
        assert_eq!(a.violations, b.violations);
    }
}

#[test]
fn the_schedules_exercise_faults_crashes_clock_jumps_and_every_terminal_status() {
    let mut totals = Stats::default();
    let mut jumps = 0;
    for seed in 0..100 {
        let report = run_seed(seed);
        totals.add(&report.stats);
        jumps += report
            .trace
            .iter()
            .filter(|l| l.contains("clock jumps"))
            .count();
    }
    assert!(totals.faults > 100, "{totals:?}");
    assert!(totals.crashes > 5, "{totals:?}");
    assert!(jumps > 50, "{jumps} clock jumps");
    assert!(
        totals.completed > 50 && totals.failed > 50 && totals.aborted > 20,
        "{totals:?}"
    );
    assert!(
        totals.leaked > 0,
        "no stuck sandbox kept its ledger entry: {totals:?}"
    );
}

#[test]
fn the_repro_line_names_the_seed() {
    assert_eq!(
        repro(12),
        "repro: cargo run -p reaper-sim --release -- --seed 12"
    );
}
