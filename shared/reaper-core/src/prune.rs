//! `prune_journals`: deletes the journals of runs that no longer need them, deciding each run
//! from the run store and, for orphans, from the files' age (spec E).
//!
//! Fails closed at every step: a name that does not decode, a lookup that fails, an orphan whose
//! age cannot be proven, a live run, all keep their files. It never returns an error; every
//! problem is a [`PruneFailure`] in the report.
//!
//! # Deviation from the reference: one listing
//!
//! The reference lists names (`ls -1`) and then ages (`stat -c`): two `exec`s, two shells and two
//! commands. Here one `exec` runs the age listing, whose lines already name every file, and runs
//! the name listing only when `stat` fails ([`journal_inventory_command`]). The per-run decisions
//! are the same: names without a proven age keep their orphans. With the batched deletion below,
//! pruning 1,000 journals costs four processes (`sh` and `stat`, `sh` and `rm`).
//! [`PruneOptions::combined_listing`] `false` sends the reference's two listings.
//!
//! # Deviation from the reference: batched deletion
//!
//! The reference issues one `rm` `exec` per deleted run; against a remote sandbox every `exec`
//! is a network round trip, and every `rm` a process. Here every group is decided first (the same
//! store lookups, in the same order), and the deletions then go out in batches: one `exec` per
//! batch, whose script runs one `rm -f --` over all the batch's files and then, with shell
//! builtins only, prints a status line per run saying whether any of its files is left. So each
//! run still gets its own verdict (deleted when none of its files is left after the `rm`), and
//! 1,000 journals cost a few processes instead of one per run. A run without its status line is
//! `delete-failed` (fail closed), and a batch whose `exec` fails fails every run in it with that
//! error. A batch is bounded by [`PruneOptions::delete_batch_bytes`], which also bounds the `rm`'s
//! argument list.
//!
//! A batch of a single run is exactly the reference's command, judged by the `exec`'s exit code,
//! so `delete_batch_bytes: 0` reproduces the reference's one-`rm`-per-run command sequence.
//!
//! One consequence: `max_deletes` counts *scheduled* deletions, where the reference counts
//! successful ones, so a failed `rm` uses up a slot instead of letting one more run through.

use std::collections::HashMap;

use serde::Serialize;

use crate::domain::EpochMs;
use crate::journal::{
    decode_journal_run_id, journal_cleanup_command, journal_inventory_command,
    journal_list_command, journal_mtime_list_command, journal_paths, js_trim, normalize_dir,
    parse_mtime_listing, shell_quote, DecodedJournalName, MtimeListing, DEFAULT_MAX_DELETES,
    DEFAULT_ORPHAN_TTL_MS, INVENTORY_FALLBACK_MARKER,
};
use crate::ports::{ExecOptions, RunStore, SandboxHandle};

/// The default bound on one deletion `exec`'s script: far below `ARG_MAX` (2 MiB on Linux, 256
/// KiB on macOS), Linux's 128 KiB bound on one argument (the script is `sh -c`'s) and typical
/// HTTP request-body limits of sandbox APIs, yet over 1,000 runs with short ids (the directory is
/// named once per batch; a run costs its two file names plus about 20 bytes).
pub const DEFAULT_DELETE_BATCH_BYTES: usize = 64 * 1024;

/// What one prune does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneOptions {
    /// The journal directory; `None` is [`crate::journal::DEFAULT_JOURNAL_DIR`].
    pub dir: Option<String>,
    /// The current time, from the caller's clock (the core never reads one).
    pub now: EpochMs,
    /// An orphan (no run record) is deleted only when its newest file is at least this old.
    pub orphan_ttl_ms: u64,
    /// At most this many runs' journals are scheduled for deletion. 0 keeps everything.
    pub max_deletes: usize,
    /// The timeout of each `exec`.
    pub exec_timeout_ms: u64,
    /// The longest deletion script sent in one `exec`. A run whose command alone is longer goes
    /// in a batch of its own; 0 sends every run alone, as the reference does.
    pub delete_batch_bytes: usize,
    /// List names and ages in one `exec` (see [`journal_inventory_command`]); `false` sends the
    /// reference's two listings.
    pub combined_listing: bool,
    /// A dry run: list and decide as usual, delete nothing; the report's `planned` says which
    /// journals a prune would delete and the proof for each.
    pub dry_run: bool,
}

impl PruneOptions {
    /// The defaults, at `now`.
    pub fn new(now: EpochMs) -> Self {
        PruneOptions {
            dir: None,
            now,
            orphan_ttl_ms: DEFAULT_ORPHAN_TTL_MS,
            max_deletes: DEFAULT_MAX_DELETES,
            exec_timeout_ms: ExecOptions::default().timeout_ms,
            delete_batch_bytes: DEFAULT_DELETE_BATCH_BYTES,
            combined_listing: true,
            dry_run: false,
        }
    }
}

/// Whether file ages could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgeGate {
    /// The age listing carried its witness line: every listed file's age is known.
    Listed,
    /// No trustworthy ages: every orphan is kept.
    Unavailable,
}

/// Why a journal was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeptReason {
    /// The run exists and is not terminal (including `interrupted`).
    NonTerminal,
    /// An orphan, and file ages could not be read.
    AgeGateUnavailable,
    /// An orphan with a file the age listing did not mention.
    AgeGateMissingEntry,
    /// An orphan whose newest file is younger than the orphan TTL.
    OrphanTooRecent,
    /// The run store lookup failed.
    StoreError,
    /// The file name is not one this encoding writes, or was truncated.
    UndecodableName,
    /// The delete cap was reached before this run.
    MaxDeletes,
    /// The `rm` failed or its result is unknown.
    DeleteFailed,
}

impl KeptReason {
    /// The reason as reports name it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeptReason::NonTerminal => "non-terminal",
            KeptReason::AgeGateUnavailable => "age-gate-unavailable",
            KeptReason::AgeGateMissingEntry => "age-gate-missing-entry",
            KeptReason::OrphanTooRecent => "orphan-too-recent",
            KeptReason::StoreError => "store-error",
            KeptReason::UndecodableName => "undecodable-name",
            KeptReason::MaxDeletes => "max-deletes",
            KeptReason::DeleteFailed => "delete-failed",
        }
    }
}

impl std::fmt::Display for KeptReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Files left in place, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptJournal {
    /// Absent for an undecodable name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The listed names, in listing order.
    pub names: Vec<String>,
    /// Why it was kept.
    pub reason: KeptReason,
}

/// The step a failure happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PruneStage {
    /// Listing the sandbox's journals.
    List,
    /// Reading the journals' ages.
    MtimeList,
    /// Reading the runs from the store.
    Store,
    /// Deleting a journal.
    Delete,
}

/// One thing that went wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneFailure {
    /// Which step failed.
    pub stage: PruneStage,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// The run whose journal it was about, if one.
    pub run_id: Option<String>,
    /// What failed.
    pub message: String,
}

/// What one prune did. The JSON shape is the reference's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneReport {
    /// Names listed (a journal and its sidecar count twice).
    pub listed: usize,
    /// Distinct runs among the decodable names.
    pub run_ids: usize,
    /// Runs whose journal and sidecar were removed, in listing order.
    pub deleted: Vec<String>,
    /// Journals kept, with why.
    pub kept: Vec<KeptJournal>,
    /// The age past which an orphan journal is deleted.
    pub age_gate: AgeGate,
    /// Steps that failed; the rest of the prune went on.
    pub failures: Vec<PruneFailure>,
    /// A dry run ([`PruneOptions::dry_run`]): nothing was deleted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// A dry run: the journals a prune would delete, with the proof for each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<PlannedDeletion>,
}

/// A journal a prune would delete, and why it may.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedDeletion {
    /// The run the journal belongs to.
    pub run_id: String,
    /// The journal's files.
    pub names: Vec<String>,
    /// The store's word (the run's terminal status) or, for an orphan, the age arithmetic.
    pub proof: String,
}

enum Verdict {
    Keep(KeptReason),
    StoreFailed(String),
    /// Scheduled; the outcome lands in `deletions`. With the proof that it may go.
    Delete(String),
}

struct Group {
    run_id: String,
    names: Vec<String>,
}

/// Prunes the journal directory of one sandbox. Never fails: see [`PruneReport::failures`].
pub async fn prune_journals(
    handle: &dyn SandboxHandle,
    runs: &dyn RunStore,
    options: &PruneOptions,
) -> PruneReport {
    let dir = normalize_dir(options.dir.as_deref());
    let exec = ExecOptions {
        timeout_ms: options.exec_timeout_ms,
    };
    let mut failures = Vec::new();

    let listing = if options.combined_listing {
        list_combined(handle, &dir, exec).await
    } else {
        list_as_the_reference(handle, &dir, exec).await
    };
    let Inventory {
        names,
        age_gate,
        mtimes,
    } = match listing {
        Ok((inventory, failure)) => {
            failures.extend(failure);
            inventory
        }
        Err(failure) => {
            tracing::warn!(dir = %dir, error = %failure.message, "journal listing failed");
            failures.push(failure);
            return PruneReport {
                listed: 0,
                run_ids: 0,
                deleted: Vec::new(),
                kept: Vec::new(),
                age_gate: AgeGate::Unavailable,
                failures,
                dry_run: options.dry_run,
                planned: Vec::new(),
            };
        }
    };

    let mut kept = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: HashMap<String, usize> = HashMap::new();
    for name in &names {
        match decode_journal_run_id(name) {
            DecodedJournalName::RunId(run_id) => match group_of.get(&run_id) {
                Some(&i) => groups[i].names.push(name.clone()),
                None => {
                    group_of.insert(run_id.clone(), groups.len());
                    groups.push(Group {
                        run_id,
                        names: vec![name.clone()],
                    });
                }
            },
            // Never looked up: a name we cannot map back to a runId keeps its files.
            DecodedJournalName::Truncated | DecodedJournalName::Malformed => {
                kept.push(KeptJournal {
                    run_id: None,
                    names: vec![name.clone()],
                    reason: KeptReason::UndecodableName,
                })
            }
        }
    }

    let orphan_cutoff = options
        .now
        .saturating_sub(i64::try_from(options.orphan_ttl_ms).unwrap_or(i64::MAX));
    let mut verdicts = Vec::with_capacity(groups.len());
    let mut scheduled = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let verdict = if scheduled.len() >= options.max_deletes {
            Verdict::Keep(KeptReason::MaxDeletes)
        } else {
            match runs.get(&group.run_id).await {
                Err(e) => {
                    let message = e.to_string();
                    tracing::warn!(run_id = %group.run_id, error = %message, "run lookup failed; keeping its journal");
                    Verdict::StoreFailed(message)
                }
                Ok(None) => orphan_verdict(age_gate, &mtimes, group, orphan_cutoff),
                Ok(Some(record)) if !record.status.is_terminal() => {
                    Verdict::Keep(KeptReason::NonTerminal)
                }
                Ok(Some(record)) => Verdict::Delete(format!(
                    "the store records the run {}: terminal, so its journal is no longer needed",
                    record.status
                )),
            }
        };
        if matches!(verdict, Verdict::Delete(_)) {
            scheduled.push(i);
        }
        verdicts.push(verdict);
    }

    // A dry run stops here: every decision is made, and nothing is sent to the sandbox.
    let (deletions, execs) = if options.dry_run {
        (Deletions::new(), 0)
    } else {
        delete_batches(handle, &groups, &scheduled, &dir, options).await
    };
    let mut planned = Vec::new();

    let mut deleted = Vec::new();
    for (i, (group, verdict)) in groups.into_iter().zip(verdicts).enumerate() {
        let reason = match verdict {
            Verdict::Keep(reason) => reason,
            Verdict::StoreFailed(message) => {
                failures.push(PruneFailure {
                    stage: PruneStage::Store,
                    run_id: Some(group.run_id.clone()),
                    message,
                });
                KeptReason::StoreError
            }
            Verdict::Delete(proof) if options.dry_run => {
                planned.push(PlannedDeletion {
                    run_id: group.run_id,
                    names: group.names,
                    proof,
                });
                continue;
            }
            Verdict::Delete(_) => match deletions.get(&i) {
                Some(Ok(())) => {
                    deleted.push(group.run_id);
                    continue;
                }
                failed => {
                    let message = match failed {
                        Some(Err(message)) => message.clone(),
                        _ => "the delete was scheduled but never ran".to_string(),
                    };
                    failures.push(PruneFailure {
                        stage: PruneStage::Delete,
                        run_id: Some(group.run_id.clone()),
                        message,
                    });
                    KeptReason::DeleteFailed
                }
            },
        };
        kept.push(KeptJournal {
            run_id: Some(group.run_id),
            names: group.names,
            reason,
        });
    }

    let report = PruneReport {
        listed: names.len(),
        run_ids: group_of.len(),
        deleted,
        kept,
        age_gate,
        failures,
        dry_run: options.dry_run,
        planned,
    };
    tracing::debug!(
        dir = %dir,
        listed = report.listed,
        run_ids = report.run_ids,
        deleted = report.deleted.len(),
        kept = report.kept.len(),
        age_gate = ?report.age_gate,
        delete_execs = execs,
        "journal prune complete"
    );
    report
}

/// The names in a journal directory and, where provable, their ages.
struct Inventory {
    names: Vec<String>,
    age_gate: AgeGate,
    mtimes: HashMap<String, EpochMs>,
}

impl Inventory {
    fn new(names: Vec<String>, listing: MtimeListing) -> Self {
        match listing {
            MtimeListing::Listed(entries) => Inventory {
                names,
                age_gate: AgeGate::Listed,
                mtimes: entries.into_iter().map(|e| (e.name, e.mtime_ms)).collect(),
            },
            MtimeListing::Unavailable => Inventory {
                names,
                age_gate: AgeGate::Unavailable,
                mtimes: HashMap::new(),
            },
        }
    }
}

fn listed_names(stdout: &str) -> Vec<String> {
    stdout
        .split('\n')
        .map(js_trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

fn list_failure(stage: PruneStage, message: String) -> PruneFailure {
    PruneFailure {
        stage,
        run_id: None,
        message,
    }
}

/// One `exec` ([`journal_inventory_command`]): the names come from the age listing itself when
/// `stat` succeeded, else from the `ls` after the marker, with the ages `stat` did print. The
/// decisions are the reference's: a name without an age keeps its orphan, and no witness line
/// means no age at all (and a second `exec`, the reference's `ls -1`, for the names).
async fn list_combined(
    handle: &dyn SandboxHandle,
    dir: &str,
    exec: ExecOptions,
) -> Result<(Inventory, Option<PruneFailure>), PruneFailure> {
    let out = handle
        .exec(&journal_inventory_command(Some(dir)), exec)
        .await
        .map_err(|e| list_failure(PruneStage::List, e.to_string()))?;
    let stdout = out.stdout.as_str();
    // Only the first marker line counts: `ls` output after it may hold anything.
    let fallback = stdout
        .split_inclusive('\n')
        .scan(0usize, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line))
        })
        .find(|(_, line)| js_trim(line) == INVENTORY_FALLBACK_MARKER);
    if let Some((at, marker)) = fallback {
        let (ages, names) = (&stdout[..at], &stdout[at + marker.len()..]);
        let listing = parse_mtime_listing(ages, Some(dir));
        if listing == MtimeListing::Unavailable {
            tracing::warn!(dir = %dir, "journal mtime listing unavailable; keeping every orphan");
        }
        return Ok((Inventory::new(listed_names(names), listing), None));
    }
    match parse_mtime_listing(stdout, Some(dir)) {
        MtimeListing::Listed(entries) => {
            let names = entries.iter().map(|e| e.name.clone()).collect();
            Ok((Inventory::new(names, MtimeListing::Listed(entries)), None))
        }
        // `stat` exited 0 yet printed no witness for the directory (a directory whose name holds
        // a newline, a `stat` of another kind): no age is trusted, and the names come from the
        // reference's `ls -1`, in a second `exec` only in this odd case.
        MtimeListing::Unavailable => {
            tracing::warn!(dir = %dir, "journal mtime listing unavailable; keeping every orphan");
            let names = handle
                .exec(&journal_list_command(Some(dir)), exec)
                .await
                .map(|out| listed_names(&out.stdout))
                .map_err(|e| list_failure(PruneStage::List, e.to_string()))?;
            Ok((Inventory::new(names, MtimeListing::Unavailable), None))
        }
    }
}

/// The reference's two `exec`s: `ls -1`, then the age listing (whose failure only costs the ages).
async fn list_as_the_reference(
    handle: &dyn SandboxHandle,
    dir: &str,
    exec: ExecOptions,
) -> Result<(Inventory, Option<PruneFailure>), PruneFailure> {
    let names = handle
        .exec(&journal_list_command(Some(dir)), exec)
        .await
        .map(|out| listed_names(&out.stdout))
        .map_err(|e| list_failure(PruneStage::List, e.to_string()))?;
    match handle
        .exec(&journal_mtime_list_command(Some(dir)), exec)
        .await
    {
        Ok(out) => {
            let listing = parse_mtime_listing(&out.stdout, Some(dir));
            if listing == MtimeListing::Unavailable {
                tracing::warn!(dir = %dir, "journal mtime listing unavailable; keeping every orphan");
            }
            Ok((Inventory::new(names, listing), None))
        }
        Err(e) => {
            let message = e.to_string();
            tracing::warn!(dir = %dir, error = %message, "journal mtime listing failed; keeping every orphan");
            Ok((
                Inventory::new(names, MtimeListing::Unavailable),
                Some(list_failure(PruneStage::MtimeList, message)),
            ))
        }
    }
}

/// An orphan (no run record) is deleted only when the age listing proves every one of its files
/// is at least the orphan TTL old. Exactly at the cutoff is old enough.
fn orphan_verdict(
    age_gate: AgeGate,
    mtimes: &HashMap<String, EpochMs>,
    group: &Group,
    cutoff: EpochMs,
) -> Verdict {
    if age_gate == AgeGate::Unavailable {
        return Verdict::Keep(KeptReason::AgeGateUnavailable);
    }
    let mut newest = EpochMs::MIN;
    for name in &group.names {
        match mtimes.get(name) {
            Some(&mtime) => newest = newest.max(mtime),
            None => return Verdict::Keep(KeptReason::AgeGateMissingEntry),
        }
    }
    if newest > cutoff {
        Verdict::Keep(KeptReason::OrphanTooRecent)
    } else {
        Verdict::Delete(format!(
            "no run record (an orphan) and its newest file, modified at {newest}, is at or \
             before the orphan cutoff {cutoff} (now minus the orphan TTL)"
        ))
    }
}

type Deletions = HashMap<usize, Result<(), String>>;

/// A scheduled run's share of a batch: its index in `groups` and its two quoted paths.
struct Scheduled {
    index: usize,
    /// ` "$d"/'<journal name>' "$d"/'<stderr name>'`, ready to append to `set --`: the
    /// directory is said once per batch (in `d`), which about halves a batch's bytes.
    operands: String,
    /// The reference's own command, used when the run is alone in its batch.
    alone: String,
}

/// Runs the scheduled deletions in batches; returns each group's outcome and the `exec` count.
async fn delete_batches(
    handle: &dyn SandboxHandle,
    groups: &[Group],
    scheduled: &[usize],
    dir: &str,
    options: &PruneOptions,
) -> (Deletions, usize) {
    let exec = ExecOptions {
        timeout_ms: options.exec_timeout_ms,
    };
    let mut outcomes = Deletions::new();
    // Paths are re-derived from the runId, never taken from the listed names: only the
    // canonical journal and sidecar of a run are ever removed.
    let mut runs = Vec::with_capacity(scheduled.len());
    for &index in scheduled {
        match journal_paths(&groups[index].run_id, Some(dir)) {
            Ok(paths) => runs.push(Scheduled {
                index,
                operands: format!(
                    " {} {}",
                    in_dir(&paths.journal, dir),
                    in_dir(&paths.stderr, dir)
                ),
                alone: journal_cleanup_command(&paths),
            }),
            Err(e) => {
                outcomes.insert(index, Err(e.to_string()));
            }
        }
    }
    let prologue = batch_prologue(dir);
    let mut execs = 0;
    for batch in batch_by_length(&runs, prologue.len(), options.delete_batch_bytes) {
        execs += 1;
        let result = match batch {
            [run] => handle.exec(&run.alone, exec).await,
            _ => handle.exec(&batch_script(&prologue, batch), exec).await,
        };
        match result {
            Err(e) => {
                let message = e.to_string();
                tracing::warn!(runs = batch.len(), error = %message, "journal delete failed");
                for run in batch {
                    outcomes.insert(run.index, Err(message.clone()));
                }
            }
            Ok(out) if batch.len() == 1 => {
                let verdict = (out.exit_code == 0)
                    .then_some(())
                    .ok_or_else(|| format!("rm exited {}", out.exit_code));
                outcomes.insert(batch[0].index, verdict);
            }
            Ok(out) => {
                let mut statuses: HashMap<usize, Status> = HashMap::new();
                for line in out.stdout.split('\n') {
                    if let Some((position, status)) = parse_status_line(line) {
                        statuses.entry(position).or_insert(status);
                    }
                }
                let mut unreported = 0;
                for (position, run) in batch.iter().enumerate() {
                    let verdict = match statuses.get(&position) {
                        Some(Status::Gone) => Ok(()),
                        Some(Status::Left(0)) => Err("rm exited 0 but a file of this run was \
                                                      still there after it (recreated meanwhile?)"
                            .to_string()),
                        Some(Status::Left(code)) => Err(format!("rm exited {code}")),
                        None => {
                            unreported += 1;
                            Err(format!(
                                "no rm status reported for this run by the batched delete \
                                 (exec exited {}); its files may remain",
                                out.exit_code
                            ))
                        }
                    };
                    outcomes.insert(run.index, verdict);
                }
                if unreported > 0 {
                    tracing::warn!(
                        runs = batch.len(),
                        unreported,
                        exit_code = out.exit_code,
                        "batched journal delete did not report every run"
                    );
                }
            }
        }
    }
    (outcomes, execs)
}

/// The batch script's first line, before the operands: the directory, then `set --`.
fn batch_prologue(dir: &str) -> String {
    format!("d={}; set --", shell_quote(dir))
}

/// A path under `dir` as a batch operand, `"$d"/'<name>'`. Every path comes from
/// [`journal_paths`], which puts it directly under `dir`; anything else is quoted whole.
fn in_dir(path: &str, dir: &str) -> String {
    match path.strip_prefix(dir).and_then(|p| p.strip_prefix('/')) {
        Some(name) => format!("\"$d\"/{}", shell_quote(name)),
        None => shell_quote(path),
    }
}

/// The rest of a batch script, after the operands (pairs of journal and sidecar paths): one `rm`
/// for every file of the batch, then, with shell builtins only (`[`, `printf`, `shift`), one
/// status line per run: `rm <position> gone` when neither of its files is left (a dangling
/// symlink counts as left), else `rm <position> left <rm's exit code>`. `rm`'s stderr is
/// silenced so that a provider folding stderr into stdout cannot mix a path (which may hold a
/// newline) into the status lines.
const BATCH_EPILOGUE: &str = "\nrm -f -- \"$@\" 2>/dev/null; rc=$?; i=0\n\
while [ \"$#\" -ge 2 ]; do\n\
if [ -e \"$1\" ] || [ -L \"$1\" ] || [ -e \"$2\" ] || [ -L \"$2\" ]; \
then printf 'rm %d left %d\\n' \"$i\" \"$rc\"; else printf 'rm %d gone\\n' \"$i\"; fi\n\
i=$((i + 1)); shift 2\n\
done";

/// Splits the runs into consecutive batches whose scripts stay within `limit` bytes; a run that
/// does not fit a batch with another one goes alone (as the reference's own command).
fn batch_by_length(runs: &[Scheduled], prologue: usize, limit: usize) -> Vec<&[Scheduled]> {
    let overhead = prologue + BATCH_EPILOGUE.len();
    let mut batches = Vec::new();
    let mut start = 0;
    let mut len = overhead;
    for (k, run) in runs.iter().enumerate() {
        if k > start && len + run.operands.len() > limit {
            batches.push(&runs[start..k]);
            start = k;
            len = overhead;
        }
        len += run.operands.len();
    }
    if start < runs.len() {
        batches.push(&runs[start..]);
    }
    batches
}

/// `d='<dir>'; set -- "$d"/'<journal 0>' "$d"/'<stderr 0>' …`, then [`BATCH_EPILOGUE`].
fn batch_script(prologue: &str, batch: &[Scheduled]) -> String {
    let operands: usize = batch.iter().map(|run| run.operands.len()).sum();
    let mut script = String::with_capacity(prologue.len() + operands + BATCH_EPILOGUE.len());
    script.push_str(prologue);
    for run in batch {
        script.push_str(&run.operands);
    }
    script.push_str(BATCH_EPILOGUE);
    script
}

/// One run's outcome in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// None of its files is left.
    Gone,
    /// A file is left; `rm` exited with this code.
    Left(i64),
}

/// `rm <position> gone` or `rm <position> left <code>`; anything else is ignored.
fn parse_status_line(line: &str) -> Option<(usize, Status)> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (position, rest) = js_trim(line).strip_prefix("rm ")?.split_once(' ')?;
    if !all_digits(position) {
        return None;
    }
    let status = if rest == "gone" {
        Status::Gone
    } else {
        let code = rest.strip_prefix("left ")?;
        if !all_digits(code.strip_prefix('-').unwrap_or(code)) {
            return None;
        }
        Status::Left(code.parse().ok()?)
    };
    Some((position.parse().ok()?, status))
}
