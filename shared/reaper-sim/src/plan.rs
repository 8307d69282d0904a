//! A seed's schedule, drawn up front: the threads and runs, what each agent writes and when,
//! when viewers come back, the sweepers (how many, which entry point, their clock skew, when they
//! sweep and when they crash), the clock jumps and the fault rate.

use reaper_core::journal::{exit_sentinel_line, journal_paths, JournalPaths};

use crate::rng::Rng;

/// The simulation's epoch: all times are offsets from here.
pub const T0: i64 = 1_700_000_000_000;
/// A detached run older than this is expired.
pub const TTL_MS: u64 = 60_000;
/// The drive budget.
pub const BUDGET_MS: u64 = 20_000;
/// The single-flight lease's TTL.
pub const SWEEP_LEASE_MS: u64 = 120_000;
/// Everything scheduled happens within this window.
pub const HORIZON_MS: u64 = 150_000;

/// One agent write: after `delay_ms`, append `bytes` to the journal.
#[derive(Debug, Clone)]
pub struct Write {
    pub delay_ms: u64,
    pub bytes: Vec<u8>,
}

/// How the agent ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentEnd {
    /// The wrapper wrote the nonced sentinel with this code.
    Exit(i64),
    /// Still working (or hung) when the schedule ends: no sentinel, ever.
    Hangs,
}

#[derive(Debug, Clone)]
pub struct RunPlan {
    pub run_id: String,
    pub thread_id: String,
    /// The sandbox id and key, when the run has one.
    pub sandbox: Option<(String, String)>,
    pub paths: JournalPaths,
    /// Negative: detached that long before the start. Positive: the viewer leaves then.
    pub detach_at_ms: i64,
    pub writes: Vec<Write>,
    pub end: AgentEnd,
    /// A user message the chat route stored before the run: a replay must keep it.
    pub user_prompt: Option<String>,
    /// When a viewer comes back (takes the run over) and how long it stays.
    pub viewer: Option<(u64, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryPoint {
    /// `reap::sweep`: single flight.
    Sweep,
    /// `reap::reap_detached_runs`: no sweep lease, so only the per-run claims keep it apart.
    Reap,
}

#[derive(Debug, Clone)]
pub struct SweepPlan {
    pub delay_ms: u64,
    /// The process dies this long after the sweep starts (its future is dropped mid-flight).
    pub crash_after_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct SweeperPlan {
    pub name: String,
    pub entry: EntryPoint,
    pub skew_ms: i64,
    pub fence_quiet_ms: u64,
    pub page_bytes: u64,
    pub sweeps: Vec<SweepPlan>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub fault_rate: f64,
    pub runs: Vec<RunPlan>,
    /// Sandbox ids whose destroy the provider always rejects.
    pub stuck: Vec<String>,
    pub sweepers: Vec<SweeperPlan>,
    /// (delay, forward jump) pairs.
    pub jumps: Vec<(u64, u64)>,
}

impl Plan {
    pub fn draw(seed: u64, rng: &mut Rng) -> Plan {
        let fault_rate = *rng.pick(&[0.0, 0.01, 0.03, 0.06, 0.1]);
        let mut runs = Vec::new();
        let mut stuck = Vec::new();
        for t in 0..rng.range(2, 4) {
            let thread_id = format!("t{t}");
            let turns = if rng.chance(0.3) { 2 } else { 1 };
            let sandbox = (!rng.chance(0.1)).then(|| (format!("sbx-{t}"), format!("key-{t}")));
            if let Some((id, _)) = &sandbox {
                if rng.chance(0.1) {
                    stuck.push(id.clone());
                }
            }
            for turn in 0..turns {
                let run_id = format!("{thread_id}-r{turn}");
                // The older turn of a shared sandbox finished before the newer one started.
                let end = if turn + 1 < turns || rng.chance(0.75) {
                    AgentEnd::Exit(if rng.chance(0.8) {
                        0
                    } else {
                        rng.range(1, 3) as i64
                    })
                } else {
                    AgentEnd::Hangs
                };
                runs.push(RunPlan::draw(
                    rng,
                    run_id,
                    thread_id.clone(),
                    sandbox.clone(),
                    end,
                ));
            }
        }
        let sweepers = (0..rng.range(2, 3))
            .map(|i| SweeperPlan {
                name: format!("sweeper-{}", (b'a' + i as u8) as char),
                entry: if rng.chance(0.5) {
                    EntryPoint::Sweep
                } else {
                    EntryPoint::Reap
                },
                skew_ms: if rng.chance(0.3) {
                    rng.range(0, 6_000) as i64 - 3_000
                } else {
                    0
                },
                fence_quiet_ms: *rng.pick(&[0, 1_000, 5_000]),
                page_bytes: rng.range(8, 300),
                sweeps: (0..rng.range(2, 5))
                    .map(|_| SweepPlan {
                        delay_ms: rng.range(0, 60_000),
                        crash_after_ms: rng.chance(0.15).then(|| rng.range(0, 30_000)),
                    })
                    .collect(),
            })
            .collect();
        let jumps = (0..rng.range(0, 3))
            .map(|_| (rng.range(0, HORIZON_MS), rng.range(1_000, 150_000)))
            .collect();
        Plan {
            seed,
            fault_rate,
            runs,
            stuck,
            sweepers,
            jumps,
        }
    }
}

impl RunPlan {
    fn draw(
        rng: &mut Rng,
        run_id: String,
        thread_id: String,
        sandbox: Option<(String, String)>,
        end: AgentEnd,
    ) -> RunPlan {
        let paths = journal_paths(&run_id, None).expect("simulation run ids are valid");
        let mut writes = Vec::new();
        for i in 0..rng.range(0, 6) {
            let line = match rng.below(10) {
                0..=4 => format!(r#"{{"delta":"{run_id}:{i} "}}"#),
                5 | 6 => format!(r#"{{"type":"TOOL_CALL_START","toolCallId":"{run_id}-{i}"}}"#),
                7 => format!("plain output {i} of {run_id}"),
                8 => String::new(),
                // A forged sentinel without the nonce: agent output like any other line.
                _ => r#"{"__exit":0}"#.to_string(),
            };
            let bytes = format!("{line}\n").into_bytes();
            let delay_ms = rng.range(0, 20_000);
            if bytes.len() > 2 && rng.chance(0.3) {
                // Half a line now, the rest later: a reader must withhold the partial line.
                let cut = rng.range(1, bytes.len() as u64 - 1) as usize;
                writes.push(Write {
                    delay_ms,
                    bytes: bytes[..cut].to_vec(),
                });
                writes.push(Write {
                    delay_ms: rng.range(0, 5_000),
                    bytes: bytes[cut..].to_vec(),
                });
            } else {
                writes.push(Write { delay_ms, bytes });
            }
        }
        if let AgentEnd::Exit(code) = end {
            writes.push(Write {
                delay_ms: rng.range(0, 30_000),
                bytes: format!("{}\n", exit_sentinel_line(&paths, code)).into_bytes(),
            });
        }
        let detach_at_ms = rng.range(0, 150_000) as i64 - 90_000;
        RunPlan {
            user_prompt: rng.chance(0.5).then(|| format!("prompt of {run_id}")),
            viewer: rng
                .chance(0.3)
                .then(|| (rng.range(0, HORIZON_MS), rng.range(0, 40_000))),
            run_id,
            thread_id,
            sandbox,
            paths,
            detach_at_ms,
            writes,
            end,
        }
    }
}
