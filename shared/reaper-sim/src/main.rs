//! `reaper-sim`: runs many seeds (10,000 by default) or replays one.
//!
//! ```text
//! reaper-sim [--seeds N] [--start S]     run seeds S..S+N, print a repro line per failure
//! reaper-sim --seed N                    replay one seed and print its trace tail
//! ```

use std::process::ExitCode;
use std::time::Instant;

use reaper_sim::{repro, run_seed, SeedReport, Stats};

const USAGE: &str = "usage: reaper-sim [--seeds N] [--start S] | --seed N";

enum Mode {
    Many { start: u64, count: u64 },
    One(u64),
}

fn parse(args: &[String]) -> Result<Mode, String> {
    let mut start = 0;
    let mut count = 10_000;
    let mut one = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = it
                .next()
                .ok_or_else(|| format!("{name} needs a number; {USAGE}"))?;
            v.parse()
                .map_err(|_| format!("{name} takes a non-negative integer, not {v:?}; {USAGE}"))
        };
        match flag.as_str() {
            "--seeds" => count = value("--seeds")?,
            "--start" => start = value("--start")?,
            "--seed" => one = Some(value("--seed")?),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}; {USAGE}")),
        }
    }
    Ok(match one {
        Some(seed) => Mode::One(seed),
        None => Mode::Many { start, count },
    })
}

fn print_failure(report: &SeedReport, trace_lines: usize) {
    let first = &report.violations[0];
    println!("seed {} violates {}", report.seed, first);
    for extra in &report.violations[1..] {
        println!("  also: {extra}");
    }
    let tail = &report.trace[report.trace.len().saturating_sub(trace_lines)..];
    for line in tail {
        println!("    {line}");
    }
    println!("{}", repro(report.seed));
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = match parse(&args) {
        Ok(mode) => mode,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match mode {
        Mode::One(seed) => {
            let report = run_seed(seed);
            if report.violations.is_empty() {
                println!("seed {seed}: no violation ({:?})", report.stats);
                ExitCode::SUCCESS
            } else {
                print_failure(&report, usize::MAX);
                ExitCode::FAILURE
            }
        }
        Mode::Many { start, count } => {
            let began = Instant::now();
            let mut totals = Stats::default();
            let mut failing = 0u64;
            for seed in start..start.saturating_add(count) {
                let report = run_seed(seed);
                totals.add(&report.stats);
                if !report.violations.is_empty() {
                    failing += 1;
                    // The first few in full; after that one line each keeps the output readable.
                    print_failure(&report, if failing <= 3 { 12 } else { 0 });
                }
            }
            let elapsed = began.elapsed();
            println!(
                "seeds: {count}, violations: {failing}, elapsed: {:.1} s ({:.2} ms/seed)",
                elapsed.as_secs_f64(),
                elapsed.as_secs_f64() * 1000.0 / count.max(1) as f64
            );
            println!(
                "runs: {} (completed {}, failed {}, aborted {}), sweeps: {}, crashes: {}, \
                 faults injected: {}, stuck sandboxes left leaking: {}, polls: {}",
                totals.runs,
                totals.completed,
                totals.failed,
                totals.aborted,
                totals.sweeps,
                totals.crashes,
                totals.faults,
                totals.leaked,
                totals.polls
            );
            if failing == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
