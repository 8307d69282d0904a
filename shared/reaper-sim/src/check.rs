//! The invariants checked on the final state (the ones checked as things happen live in
//! [`crate::trace`] and [`crate::world`]).
//!
//! The oracle is the journal each agent actually wrote: its complete lines up to the genuine
//! sentinel (or the agent's own `RUN_ERROR`) are exactly what a finalized run's delivery log and
//! transcript must hold, whatever crashed or failed on the way.

use crate::ready as block_on;
use reaper_core::domain::{Chunk, RunRecord, RunStatus};
use reaper_core::journal::exit_sentinel_line;
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{DeliveryLog, MessageStore, ReclaimLedger};
use reaper_core::replay::{journal_end, line_chunk};

use crate::plan::{AgentEnd, Plan, RunPlan};
use crate::trace::Trace;
use crate::world::World;

/// What a run's journal says its finalized output is.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// One chunk per complete non-blank line, in order, up to the end; for a non-zero exit, the
    /// `RUN_ERROR` the replay ends with.
    pub chunks: Vec<Chunk>,
    /// Every text delta of those chunks, concatenated.
    pub assistant: String,
    pub ending: Option<Ending>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The genuine sentinel with this code.
    Exit(i64),
    /// The agent printed a `RUN_ERROR` event (the last chunk).
    AgentError,
}

/// Reads a journal the way a correct replay must: complete lines only, stopping at the sentinel
/// the agent's wrapper wrote (matched as the exact line, not with the core's parser).
pub fn expected(journal: &[u8], run: &RunPlan) -> Expected {
    let sentinel = match run.end {
        AgentEnd::Exit(code) => Some((exit_sentinel_line(&run.paths, code), code)),
        AgentEnd::Hangs => None,
    };
    let mut out = Expected {
        chunks: Vec::new(),
        assistant: String::new(),
        ending: None,
    };
    let mut start = 0;
    while let Some(nl) = journal[start..].iter().position(|b| *b == b'\n') {
        let end = start + nl + 1;
        let text = String::from_utf8_lossy(&journal[start..end - 1]).into_owned();
        start = end;
        if let Some((line, code)) = &sentinel {
            if text == *line {
                out.ending = Some(Ending::Exit(*code));
                if *code != 0 {
                    // The documented failure event, stamped with the sentinel's end so a
                    // resumed drive finds it delivered instead of appending it twice.
                    out.chunks.push(
                        Chunk::new(Chunk::RUN_ERROR)
                            .with("message", format!("agent exited with code {code}"))
                            .with("code", format!("exit_{code}"))
                            .with("exitCode", *code)
                            .with("journalEnd", end as u64),
                    );
                }
                break;
            }
        }
        let Some(chunk) = line_chunk(&text, end as u64) else {
            continue;
        };
        if chunk.kind() == Some(Chunk::TEXT_MESSAGE_CONTENT) {
            if let Some(delta) = chunk.get_str("delta") {
                out.assistant.push_str(&delta);
            }
        }
        let error = chunk.is_run_error();
        out.chunks.push(chunk);
        if error {
            out.ending = Some(Ending::AgentError);
            break;
        }
    }
    out
}

fn status(store: &MemoryStore, run_id: &str) -> Option<RunRecord> {
    store.all_runs().into_iter().find(|r| r.run_id == run_id)
}

/// Invariant (1) at any moment: a live sandbox whose every run is terminal must have a ledger
/// entry for one of them — otherwise no sweep will ever destroy it.
pub fn no_orphaned_sandbox(store: &MemoryStore, world: &World, trace: &Trace) {
    for id in world.sandbox_ids() {
        if !world.is_alive(&id) {
            continue;
        }
        let users = world.users(&id);
        let records: Vec<RunRecord> = users.iter().filter_map(|u| status(store, u)).collect();
        if records.is_empty() || !records.iter().all(|r| r.status.is_terminal()) {
            continue;
        }
        let pending = users.iter().any(|u| {
            block_on(store.get_intent(u))
                .expect("memory store")
                .is_some()
        });
        if !pending {
            trace.violate(
                "orphaned-sandbox",
                format!(
                    "sandbox {id} is alive, its runs {users:?} are all terminal, and no reclaim \
                     intent is pending for any of them: nothing will ever destroy it"
                ),
            );
        }
    }
}

/// Every invariant on the state the clean sweeps left.
pub fn after_quiescence(plan: &Plan, store: &MemoryStore, world: &World, trace: &Trace) {
    no_orphaned_sandbox(store, world, trace);
    let chaos = trace.faults() > 0
        || !plan.jumps.is_empty()
        || plan
            .sweepers
            .iter()
            .any(|s| s.skew_ms != 0 || s.sweeps.iter().any(|w| w.crash_after_ms.is_some()));
    for run in &plan.runs {
        let Some(record) = status(store, &run.run_id) else {
            trace.violate("run-vanished", format!("{} has no record", run.run_id));
            continue;
        };
        check_run(run, &record, store, world, trace, chaos);
    }
    // (1) and (6): every sandbox whose runs are all terminal is destroyed, unless the provider
    // still refuses — and then its ledger entry is there, with the failed attempts counted.
    for id in world.sandbox_ids() {
        let users = world.users(&id);
        let all_terminal = users
            .iter()
            .all(|u| status(store, u).is_some_and(|r| r.status.is_terminal()));
        if !all_terminal || !world.is_alive(&id) {
            continue;
        }
        if !world.refuses_destroy(&id) {
            trace.violate(
                "sandbox-not-reclaimed",
                format!("sandbox {id} of terminal runs {users:?} is alive after the clean sweeps"),
            );
            continue;
        }
        let leak_recorded = users.iter().any(|u| {
            block_on(store.get_intent(u))
                .expect("memory store")
                .is_some_and(|i| i.attempts > 0)
        });
        if !leak_recorded {
            trace.violate(
                "leak-not-in-ledger",
                format!("sandbox {id} refuses destroy but no ledger entry counts a failed attempt"),
            );
        }
    }
    for run in &plan.runs {
        if let Some(intent) = block_on(store.get_intent(&run.run_id)).expect("memory store") {
            let stuck = run
                .sandbox
                .as_ref()
                .is_some_and(|(id, _)| world.refuses_destroy(id) && world.is_alive(id));
            if !stuck {
                trace.violate(
                    "ledger-not-empty",
                    format!(
                        "{} still has a reclaim intent after quiescence though its sandbox is \
                         not stuck: {intent:?}",
                        run.run_id
                    ),
                );
            }
        }
    }
}

fn check_run(
    run: &RunPlan,
    record: &RunRecord,
    store: &MemoryStore,
    world: &World,
    trace: &Trace,
    chaos: bool,
) {
    let id = run.run_id.as_str();
    if !record.status.is_terminal() {
        trace.violate(
            "run-never-settled",
            format!(
                "{id} is still {} after the clean sweeps: {record:?}",
                record.status
            ),
        );
        return;
    }
    let journal = run
        .sandbox
        .as_ref()
        .map(|(sbx, _)| world.journal(sbx, &run.paths.journal))
        .unwrap_or_default();
    let want = expected(&journal, run);
    let log: Vec<Chunk> = block_on(store.read(id, 0, usize::MAX))
        .expect("memory store")
        .into_iter()
        .map(|e| e.chunk)
        .collect();

    // (3) No duplicate chunk, no gap, nothing out of order: the journal chunks in the log are a
    // prefix of the journal's, and anything else is one RUN_ERROR at the very end.
    let mut journal_chunks = 0;
    for (i, chunk) in log.iter().enumerate() {
        match journal_end(chunk) {
            Some(end) => {
                if want.chunks.get(journal_chunks) != Some(chunk) {
                    let seen_before = log[..i].iter().any(|c| journal_end(c) == Some(end));
                    trace.violate(
                        if seen_before {
                            "duplicate-chunk"
                        } else {
                            "wrong-chunk"
                        },
                        format!(
                            "{id}: log entry {i} is {chunk:?}, the journal's next chunk is {:?}",
                            want.chunks.get(journal_chunks)
                        ),
                    );
                    return;
                }
                journal_chunks += 1;
            }
            None if chunk.is_run_error() && i + 1 == log.len() => {}
            None => {
                trace.violate(
                    "chunk-after-run-error",
                    format!(
                        "{id}: log entry {i} ({chunk:?}) is not the last of {} entries",
                        log.len()
                    ),
                );
                return;
            }
        }
    }
    let complete = journal_chunks == want.chunks.len();
    let last = log.last();
    let exit_error = last
        .filter(|c| c.is_run_error())
        .and_then(|c| c.get("exitCode").and_then(|v| v.as_i64()));

    // Same outcome as without the crash: a finalized status says exactly what the journal says.
    let finalized = match record.status {
        RunStatus::Completed => {
            if last.is_some_and(Chunk::is_run_error) {
                trace.violate(
                    "completed-log-ends-in-run-error",
                    format!(
                        "{id} is completed but its delivery log ends with {:?}: a reader is told \
                         the run failed",
                        last
                    ),
                );
            } else if want.ending != Some(Ending::Exit(0)) || !complete {
                trace.violate(
                    "wrong-outcome",
                    format!(
                        "{id} is completed but its journal ends {:?} and the log holds {journal_chunks} \
                         of {} chunks",
                        want.ending,
                        want.chunks.len()
                    ),
                );
            }
            true
        }
        RunStatus::Failed if exit_error.is_some() => {
            let code = exit_error.unwrap_or_default();
            if want.ending != Some(Ending::Exit(code)) || !complete {
                trace.violate(
                    "wrong-outcome",
                    format!(
                        "{id} failed with exit {code} but its journal ends {:?}",
                        want.ending
                    ),
                );
            }
            true
        }
        RunStatus::Failed if want.ending == Some(Ending::AgentError) && complete => true,
        RunStatus::Failed => {
            // A failure of the machinery (a store, a lost claim), never of the agent: only
            // acceptable when the schedule injected chaos, or there is no sandbox to replay.
            if !chaos && run.sandbox.is_some() {
                trace.violate(
                    "wrong-outcome",
                    format!("{id} failed without any fault: {:?}", record.error),
                );
            }
            false
        }
        RunStatus::Aborted => {
            if record.cancel_requested != Some(true) && !chaos {
                trace.violate(
                    "wrong-outcome",
                    format!("{id} was aborted without a cancel or any fault"),
                );
            }
            false
        }
        RunStatus::Running | RunStatus::Interrupted => unreachable!("checked terminal above"),
    };

    // (4) One transcript per finalized run, with the whole output; never two assistant
    // messages; the chat route's prompt kept.
    let transcript = block_on(store.get_transcript(id)).expect("memory store");
    if let Some(t) = &transcript {
        let assistants = t.messages.iter().filter(|m| m.role == "assistant").count();
        if assistants > 1 {
            trace.violate(
                "duplicate-transcript",
                format!("{id}'s transcript has {assistants} assistant messages"),
            );
        }
        if let Some(prompt) = &run.user_prompt {
            if t.messages.first().map(|m| &m.content) != Some(prompt) {
                trace.violate(
                    "lost-user-message",
                    format!("{id}'s transcript lost the user prompt: {:?}", t.messages),
                );
            }
        }
    }
    if finalized {
        let saved = transcript.as_ref().filter(|t| {
            t.messages.iter().any(|m| m.role == "assistant") || want.assistant.is_empty()
        });
        let Some(t) =
            saved.filter(|t| t.exit_code.is_some() || want.ending == Some(Ending::AgentError))
        else {
            trace.violate(
                "missing-transcript",
                format!(
                    "{id} is finalized ({}) without a saved transcript",
                    record.status
                ),
            );
            return;
        };
        let assistant: String = t
            .messages
            .iter()
            .filter(|m| m.role == "assistant")
            .map(|m| m.content.as_str())
            .collect();
        let code = match want.ending {
            Some(Ending::Exit(code)) => Some(code),
            _ => None,
        };
        if assistant != want.assistant || t.exit_code != code {
            trace.violate(
                "wrong-transcript",
                format!(
                    "{id}'s transcript says {assistant:?} (exit {:?}); the journal says {:?} (exit {code:?})",
                    t.exit_code, want.assistant
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Write;
    use reaper_core::journal::journal_paths;

    fn run(end: AgentEnd) -> RunPlan {
        RunPlan {
            run_id: "r".into(),
            thread_id: "t".into(),
            sandbox: None,
            paths: journal_paths("r", None).unwrap(),
            detach_at_ms: -1,
            writes: Vec::<Write>::new(),
            end,
            user_prompt: None,
            viewer: None,
        }
    }

    #[test]
    fn the_oracle_stops_at_the_genuine_sentinel_and_skips_forgeries_and_blanks() {
        let plan = run(AgentEnd::Exit(3));
        let journal = format!(
            "{{\"delta\":\"a\"}}\n\n{{\"__exit\":0}}\n{}\n{{\"delta\":\"after\"}}\n",
            exit_sentinel_line(&plan.paths, 3)
        );
        let want = expected(journal.as_bytes(), &plan);
        assert_eq!(want.ending, Some(Ending::Exit(3)));
        assert_eq!(want.chunks.len(), 3, "{:?}", want.chunks);
        assert_eq!(want.chunks[2].get("exitCode"), Some(serde_json::json!(3)));
        assert_eq!(want.assistant, "a");
    }

    #[test]
    fn the_oracle_withholds_a_partial_line() {
        let want = expected(b"{\"delta\":\"a\"}\n{\"delta\":\"b", &run(AgentEnd::Hangs));
        assert_eq!(want.chunks.len(), 1);
        assert_eq!(want.ending, None);
    }
}
