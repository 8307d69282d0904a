//! `prune_journals` (spec E; conformance H3.1–23, H15.2) against a fake sandbox that answers the
//! listing, the age listing and the (batched) deletion scripts, and a spying run store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use reaper_core::journal::{
    journal_paths, DEFAULT_MAX_DELETES, DEFAULT_ORPHAN_TTL_MS, INVENTORY_FALLBACK_MARKER,
};
use reaper_core::memory::MemoryStore;
use reaper_core::prune::*;
use reaper_core::{
    EpochMs, ExecOptions, ExecOutput, RunRecord, RunStatus, SandboxError, SandboxHandle, StoreError,
};
use reaper_testkit::fakes::{LogCapture, Op, SpyStore};
use tracing::Level;

const DIR: &str = "/tmp/sweep-test";
const NOW: EpochMs = 1_800_000_000_000;
const FRESH: EpochMs = NOW;
const ANCIENT: EpochMs = NOW - 10 * 3_600_000;

#[derive(Debug, Default)]
struct SandboxState {
    dir: String,
    /// Listed names in order, with the mtime the age listing reports (None: no stat line).
    files: Vec<(String, Option<EpochMs>)>,
    ls_error: Option<String>,
    stat_stdout: Option<String>,
    stat_error: Option<String>,
    /// A deletion exec that mentions this path rejects with this message.
    rm_reject: Vec<(String, String)>,
    /// `rm` exit codes by journal path (default 0).
    rm_exit: HashMap<String, i32>,
    /// `stat` exits 0 whatever it printed (a `stat` that is not GNU's or BusyBox's).
    stat_exits_0: bool,
    /// Journal paths whose status line the batch output loses.
    rm_unreported: HashSet<String>,
    /// Journal paths whose files a writer puts back right after the `rm` (which exits 0).
    rm_recreated: HashSet<String>,
    /// Lines a batch prints before its status lines.
    batch_noise: Vec<String>,
    commands: Vec<String>,
}

/// A sandbox holding a journal directory, answering `ls -1`, `stat -c`, the reference's
/// single-run `rm -f` and the batched deletion script (its `set --` operands parsed as a shell
/// would; the real shell runs it in reaper-local's tests).
#[derive(Debug, Clone)]
struct FakeJournalSandbox(Arc<Mutex<SandboxState>>);

impl FakeJournalSandbox {
    fn new(dir: &str) -> Self {
        FakeJournalSandbox(Arc::new(Mutex::new(SandboxState {
            dir: dir.into(),
            ..Default::default()
        })))
    }
    fn state(&self) -> std::sync::MutexGuard<'_, SandboxState> {
        self.0.lock().unwrap()
    }
    fn file(&self, name: &str, mtime: Option<EpochMs>) -> &Self {
        self.state().files.push((name.into(), mtime));
        self
    }
    /// Both files of a run.
    fn run_files(&self, run_id: &str, mtime: EpochMs) -> &Self {
        let (journal, stderr) = names(run_id);
        self.file(&journal, Some(mtime)).file(&stderr, Some(mtime))
    }
    fn commands(&self) -> Vec<String> {
        self.state().commands.clone()
    }
    fn delete_execs(&self) -> Vec<String> {
        self.commands()
            .into_iter()
            .filter(|c| c.starts_with("rm -f ") || c.starts_with("d="))
            .collect()
    }
    fn remaining(&self) -> Vec<String> {
        self.state().files.iter().map(|(n, _)| n.clone()).collect()
    }

    fn answer(&self, command: &str) -> Result<ExecOutput, SandboxError> {
        let mut s = self.state();
        s.commands.push(command.to_string());
        let out = |stdout: String, exit_code: i32| {
            Ok(ExecOutput {
                stdout,
                stderr: String::new(),
                exit_code,
            })
        };
        if command.starts_with("stat -c ") && command.contains(" || { printf ") {
            // The combined listing: the age listing, then `ls` only when `stat` failed.
            if let Some(e) = &s.ls_error {
                return Err(SandboxError::Other(e.clone()));
            }
            let (mut stdout, stat_ok) = s.stat_answer();
            if !stat_ok {
                stdout.push_str(INVENTORY_FALLBACK_MARKER);
                stdout.push('\n');
                stdout.extend(s.files.iter().map(|(n, _)| format!("{n}\n")));
            }
            return out(stdout, 0);
        }
        if command.starts_with("ls -1 ") {
            if let Some(e) = &s.ls_error {
                return Err(SandboxError::Other(e.clone()));
            }
            let listing: String = s.files.iter().map(|(n, _)| format!("{n}\n")).collect();
            return out(listing, 0);
        }
        if command.starts_with("stat -c ") {
            if let Some(e) = &s.stat_error {
                return Err(SandboxError::Other(e.clone()));
            }
            if let Some(stdout) = &s.stat_stdout {
                return out(stdout.clone(), 0);
            }
            let mut listing = format!("1700000000 {}\n", s.dir);
            for (name, mtime) in &s.files {
                if let Some(ms) = mtime {
                    listing.push_str(&format!("{} {}/{name}\n", ms / 1000, s.dir));
                }
            }
            return out(listing, 0);
        }
        if command.starts_with("rm -f ") || command.starts_with("d=") {
            if let Some((_, message)) = s.rm_reject.iter().find(|(p, _)| command.contains(p)) {
                return Err(SandboxError::Other(message.clone()));
            }
            return Ok(s.delete(command));
        }
        Err(SandboxError::Other(format!("unexpected command {command}")))
    }
}

impl SandboxState {
    /// What `stat -c` prints, and whether it exits 0: it fails when it printed nothing it was
    /// asked for (an error, custom output, an empty directory, a file without an age).
    fn stat_answer(&self) -> (String, bool) {
        if self.stat_error.is_some() {
            return (String::new(), false);
        }
        if let Some(stdout) = &self.stat_stdout {
            return (stdout.clone(), self.stat_exits_0);
        }
        let mut listing = format!("1700000000 {}\n", self.dir);
        for (name, mtime) in &self.files {
            if let Some(ms) = mtime {
                listing.push_str(&format!("{} {}/{name}\n", ms / 1000, self.dir));
            }
        }
        let complete = !self.files.is_empty() && self.files.iter().all(|(_, m)| m.is_some());
        (listing, complete)
    }

    /// Removes a run's files unless its `rm` is set to fail; returns `rm`'s exit code.
    fn rm(&mut self, journal: &str, stderr: &str) -> i32 {
        let code = self.rm_exit.get(journal).copied().unwrap_or(0);
        if code == 0 && !self.rm_recreated.contains(journal) {
            let gone = [base_name(journal), base_name(stderr)];
            self.files.retain(|(n, _)| !gone.contains(&n.as_str()));
        }
        code
    }

    fn is_left(&self, path: &str) -> bool {
        self.files.iter().any(|(n, _)| n == base_name(path))
    }

    /// The reference's `rm -f '<journal>' '<stderr>'`, or a batch: `set --` with the operands,
    /// one `rm -f -- "$@"`, then a status line per pair.
    fn delete(&mut self, command: &str) -> ExecOutput {
        let output = |stdout: String, exit_code: i32| ExecOutput {
            stdout,
            stderr: String::new(),
            exit_code,
        };
        let Some((set, rest)) = command.split_once('\n') else {
            let words = shell_words(command);
            assert_eq!(words[..2], ["rm", "-f"], "in {command}");
            assert_eq!(words.len(), 4, "in {command}");
            return output(String::new(), self.rm(&words[2], &words[3]));
        };
        assert!(
            rest.starts_with("rm -f -- \"$@\" 2>/dev/null; rc=$?;"),
            "one rm over every operand: {rest}"
        );
        assert_eq!(rest.matches("rm -f").count(), 1, "{rest}");
        // `d='<dir>'; set -- "$d"/'<name>' …`: expand `$d` as the shell would.
        let words = shell_words(set);
        let d = words[0].strip_prefix("d=").expect("the directory first");
        assert_eq!(words[1..4], [";", "set", "--"], "in {set}");
        let expand = |w: &String| match w.strip_prefix("$d/") {
            Some(name) => format!("{d}/{name}"),
            None => w.clone(),
        };
        let pairs: Vec<(String, String)> = words[4..]
            .chunks(2)
            .map(|pair| match pair {
                [journal, stderr] => (expand(journal), expand(stderr)),
                _ => panic!("operands come in pairs: {set}"),
            })
            .collect();
        let mut rc = 0;
        for (journal, stderr) in &pairs {
            rc = rc.max(self.rm(journal, stderr));
        }
        let mut stdout: String = self.batch_noise.iter().map(|l| format!("{l}\n")).collect();
        for (position, (journal, stderr)) in pairs.iter().enumerate() {
            if self.rm_unreported.contains(journal) {
                continue;
            }
            if self.is_left(journal) || self.is_left(stderr) {
                stdout.push_str(&format!("rm {position} left {rc}\n"));
            } else {
                stdout.push_str(&format!("rm {position} gone\n"));
            }
        }
        output(stdout, 0)
    }
}

#[async_trait::async_trait]
impl SandboxHandle for FakeJournalSandbox {
    fn id(&self) -> &str {
        "sbx-prune"
    }
    async fn exec(&self, command: &str, _options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.answer(command)
    }
}

/// POSIX word splitting for the commands the prune builds: single quotes, double quotes without
/// escapes, backslash escapes outside quotes, and `;` as its own word.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    w.push(q);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == '"' {
                        break;
                    }
                    w.push(q);
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            ';' => {
                words.extend(word.take());
                words.push(";".into());
            }
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap()
}

/// The journal and sidecar file names of a run in [`DIR`].
fn names(run_id: &str) -> (String, String) {
    let p = journal_paths(run_id, Some(DIR)).unwrap();
    (base_name(&p.journal).into(), base_name(&p.stderr).into())
}

fn both(run_id: &str) -> Vec<String> {
    let (j, e) = names(run_id);
    vec![j, e]
}

fn store_with(runs: &[(&str, RunStatus)]) -> SpyStore {
    let store = SpyStore::new(MemoryStore::new());
    for (run_id, status) in runs {
        let mut record = RunRecord::new(*run_id, "thread-1", NOW - 1000);
        record.status = *status;
        store.inner.put_run(record);
    }
    store
}

fn gets(store: &SpyStore) -> Vec<String> {
    store
        .ops()
        .into_iter()
        .filter_map(|op| match op {
            Op::Get(id) => Some(id),
            _ => None,
        })
        .collect()
}

fn options() -> PruneOptions {
    PruneOptions {
        dir: Some(DIR.into()),
        ..PruneOptions::new(NOW)
    }
}

async fn prune(sandbox: &FakeJournalSandbox, store: &SpyStore) -> PruneReport {
    prune_journals(sandbox, store, &options()).await
}

/// With the reference's two listings (`ls -1`, then `stat -c`) instead of the combined one.
async fn prune_as_the_reference(sandbox: &FakeJournalSandbox, store: &SpyStore) -> PruneReport {
    let options = PruneOptions {
        combined_listing: false,
        ..options()
    };
    prune_journals(sandbox, store, &options).await
}

fn kept(run_id: &str, names: Vec<String>, reason: KeptReason) -> KeptJournal {
    KeptJournal {
        run_id: Some(run_id.into()),
        names,
        reason,
    }
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// The store decides (H3.1–4)

#[tokio::test]
async fn a_terminal_run_of_every_terminal_status_is_deleted_whatever_its_age() {
    for status in [RunStatus::Completed, RunStatus::Failed, RunStatus::Aborted] {
        let sandbox = FakeJournalSandbox::new(DIR);
        sandbox.run_files("done", FRESH);
        let store = store_with(&[("done", status)]);
        let report = prune(&sandbox, &store).await;
        assert_eq!(report.deleted, ["done"], "for {status}");
        assert!(report.kept.is_empty());
        assert!(sandbox.remaining().is_empty());
    }
}

#[tokio::test]
async fn a_running_run_is_kept_as_non_terminal_and_a_completed_one_deleted() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("live", ANCIENT).run_files("done", FRESH);
    let store = store_with(&[("live", RunStatus::Running), ("done", RunStatus::Completed)]);
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(
        report.kept,
        [kept("live", both("live"), KeptReason::NonTerminal)]
    );
}

#[tokio::test]
async fn an_interrupted_run_is_non_terminal_and_never_named_in_a_command() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .run_files("paused-run", ANCIENT)
        .run_files("done", FRESH);
    let store = store_with(&[
        ("paused-run", RunStatus::Interrupted),
        ("done", RunStatus::Completed),
    ]);
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(
        report.kept,
        [kept(
            "paused-run",
            both("paused-run"),
            KeptReason::NonTerminal
        )]
    );
    assert!(sandbox.commands().iter().all(|c| !c.contains("paused-run")));
}

#[tokio::test]
async fn a_failed_lookup_keeps_the_run_as_store_error_and_reports_it() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("a", ANCIENT).run_files("b", ANCIENT);
    let store = store_with(&[("b", RunStatus::Completed)]);
    let error = StoreError::Unavailable("store unreachable for a".into());
    let injected = error.clone();
    store.fail_when(move |op, _| (*op == Op::Get("a".into())).then(|| injected.clone()));
    let (logs, _guard) = LogCapture::install();
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, ["b"]);
    assert_eq!(report.kept, [kept("a", both("a"), KeptReason::StoreError)]);
    assert_eq!(
        report.failures,
        [PruneFailure {
            stage: PruneStage::Store,
            run_id: Some("a".into()),
            message: error.to_string(),
        }]
    );
    assert!(error.to_string().contains("store unreachable for a"));
    assert!(logs.contains(Level::WARN, "store unreachable for a"));
}

// Undecodable names (H3.5)

#[tokio::test]
async fn undecodable_names_are_kept_without_a_run_id_and_never_looked_up() {
    let truncated = format!("{}-{}.ndjson", "a".repeat(183), "0".repeat(16));
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .file("bad_zz.ndjson", Some(ANCIENT))
        .file("not-a-journal", Some(ANCIENT))
        .file(&truncated, Some(ANCIENT))
        .run_files("done", FRESH);
    let store = store_with(&[("done", RunStatus::Completed)]);
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, ["done"]);
    let undecodable = |name: &str| KeptJournal {
        run_id: None,
        names: vec![name.into()],
        reason: KeptReason::UndecodableName,
    };
    assert_eq!(
        report.kept,
        [
            undecodable("bad_zz.ndjson"),
            undecodable("not-a-journal"),
            undecodable(&truncated)
        ]
    );
    assert_eq!(gets(&store), ["done"]);
    let rms: usize = sandbox
        .commands()
        .iter()
        .map(|c| c.matches("rm -f").count())
        .sum();
    assert_eq!(rms, 1);
}

// Age gate (H3.6–10)

#[tokio::test]
async fn an_ancient_orphan_is_deleted_when_ages_are_listed() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("orphan", ANCIENT);
    let report = prune(&sandbox, &store_with(&[])).await;
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert_eq!(report.deleted, ["orphan"]);
}

#[tokio::test]
async fn a_fresh_orphan_is_kept_as_too_recent_and_an_ancient_one_deleted() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("young", FRESH).run_files("old", ANCIENT);
    let report = prune(&sandbox, &store_with(&[])).await;
    assert_eq!(report.deleted, ["old"]);
    assert_eq!(
        report.kept,
        [kept("young", both("young"), KeptReason::OrphanTooRecent)]
    );
}

#[tokio::test]
async fn the_newest_file_of_an_orphan_decides_its_age() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (journal, stderr) = names("mixed");
    sandbox
        .file(&journal, Some(ANCIENT))
        .file(&stderr, Some(NOW))
        .run_files("old", ANCIENT);
    let report = prune(&sandbox, &store_with(&[])).await;
    assert_eq!(report.deleted, ["old"]);
    assert_eq!(
        report.kept,
        [kept("mixed", both("mixed"), KeptReason::OrphanTooRecent)]
    );
}

#[tokio::test]
async fn an_orphan_file_missing_from_the_age_listing_keeps_the_orphan() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (journal, _) = names("unstated");
    sandbox.file(&journal, None).run_files("old", ANCIENT);
    let report = prune(&sandbox, &store_with(&[])).await;
    assert_eq!(report.deleted, ["old"]);
    assert_eq!(
        report.kept,
        [kept(
            "unstated",
            vec![journal],
            KeptReason::AgeGateMissingEntry
        )]
    );
}

#[tokio::test]
async fn the_orphan_cutoff_is_inclusive() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .run_files("inside", NOW - 10_000 + 1000)
        .run_files("outside", NOW - 10_000);
    let options = PruneOptions {
        orphan_ttl_ms: 10_000,
        ..options()
    };
    let report = prune_journals(&sandbox, &store_with(&[]), &options).await;
    assert_eq!(report.deleted, ["outside"]);
    assert_eq!(
        report.kept,
        [kept("inside", both("inside"), KeptReason::OrphanTooRecent)]
    );
}

// Fail closed when the age gate is unavailable (H3.11–13)

#[tokio::test]
async fn empty_stat_output_keeps_every_orphan_but_still_deletes_terminal_runs() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .run_files("orphan", ANCIENT)
        .run_files("done", ANCIENT);
    sandbox.state().stat_stdout = Some(String::new());
    let store = store_with(&[("done", RunStatus::Completed)]);
    let (logs, _guard) = LogCapture::install();
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.age_gate, AgeGate::Unavailable);
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(
        report.kept,
        [kept(
            "orphan",
            both("orphan"),
            KeptReason::AgeGateUnavailable
        )]
    );
    assert!(report.failures.is_empty());
    assert!(sandbox.commands().iter().all(|c| !c.contains("orphan")));
    assert!(logs.contains(Level::WARN, "mtime listing unavailable"));
}

#[tokio::test]
async fn an_age_listing_without_the_witness_line_keeps_every_orphan() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .run_files("orphan", ANCIENT)
        .run_files("done", ANCIENT);
    let listing: String = both("orphan")
        .iter()
        .map(|n| format!("{} {DIR}/{n}\n", ANCIENT / 1000))
        .collect();
    sandbox.state().stat_stdout = Some(listing);
    let report = prune(&sandbox, &store_with(&[("done", RunStatus::Completed)])).await;
    assert_eq!(report.age_gate, AgeGate::Unavailable);
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(
        report.kept,
        [kept(
            "orphan",
            both("orphan"),
            KeptReason::AgeGateUnavailable
        )]
    );
}

#[tokio::test]
async fn a_failed_age_listing_keeps_every_orphan_and_is_reported() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .run_files("orphan", ANCIENT)
        .run_files("done", ANCIENT);
    sandbox.state().stat_error = Some("stat exploded".into());
    let report =
        prune_as_the_reference(&sandbox, &store_with(&[("done", RunStatus::Completed)])).await;
    assert_eq!(report.age_gate, AgeGate::Unavailable);
    assert_eq!(report.deleted, ["done"]);
    let reasons: Vec<KeptReason> = report.kept.iter().map(|k| k.reason).collect();
    assert_eq!(reasons, [KeptReason::AgeGateUnavailable]);
    assert_eq!(
        report.failures,
        [PruneFailure {
            stage: PruneStage::MtimeList,
            run_id: None,
            message: SandboxError::Other("stat exploded".into()).to_string(),
        }]
    );
}

// De-duplication (H3.14)

#[tokio::test]
async fn a_journal_and_its_sidecar_are_one_lookup_and_one_rm() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("done", ANCIENT);
    let store = store_with(&[("done", RunStatus::Completed)]);
    let report = prune(&sandbox, &store).await;
    assert_eq!((report.listed, report.run_ids), (2, 1));
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(gets(&store), ["done"]);
    let rms = sandbox.delete_execs();
    assert_eq!(rms.len(), 1);
    let (journal, stderr) = names("done");
    assert!(rms[0].contains(&journal) && rms[0].contains(&stderr));
    assert_eq!(rms[0].matches("rm -f").count(), 1);
}

#[tokio::test]
async fn a_sidecar_without_its_journal_is_still_a_run() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (_, stderr) = names("done");
    sandbox.file(&stderr, Some(ANCIENT));
    let report = prune(&sandbox, &store_with(&[("done", RunStatus::Completed)])).await;
    assert_eq!(report.deleted, ["done"]);
    assert!(sandbox.remaining().is_empty());
}

// maxDeletes (H3.15–16)

#[tokio::test]
async fn max_deletes_caps_the_deletions_in_listing_order() {
    for (max, deleted, kept_ids) in [
        (1, ids(&["d1"]), ids(&["d2"])),
        (2, ids(&["d1", "d2"]), vec![]),
    ] {
        let sandbox = FakeJournalSandbox::new(DIR);
        sandbox.run_files("d1", ANCIENT).run_files("d2", ANCIENT);
        let store = store_with(&[("d1", RunStatus::Completed), ("d2", RunStatus::Completed)]);
        let options = PruneOptions {
            max_deletes: max,
            ..options()
        };
        let report = prune_journals(&sandbox, &store, &options).await;
        assert_eq!(report.deleted, deleted, "with max_deletes {max}");
        let expected: Vec<KeptJournal> = kept_ids
            .iter()
            .map(|id| kept(id, both(id), KeptReason::MaxDeletes))
            .collect();
        assert_eq!(report.kept, expected);
        // A run past the cap is not even looked up.
        assert_eq!(gets(&store).len(), max);
    }
    const { assert!(DEFAULT_MAX_DELETES > 0) };
}

#[tokio::test]
async fn zero_max_deletes_keeps_everything() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("d1", ANCIENT);
    let store = store_with(&[("d1", RunStatus::Completed)]);
    let options = PruneOptions {
        max_deletes: 0,
        ..options()
    };
    let report = prune_journals(&sandbox, &store, &options).await;
    assert!(report.deleted.is_empty());
    assert_eq!(
        report.kept,
        [kept("d1", both("d1"), KeptReason::MaxDeletes)]
    );
    assert!(sandbox.delete_execs().is_empty());
}

// Totality (H3.17–20)

/// One exec per run, as the reference does.
fn per_run() -> PruneOptions {
    PruneOptions {
        delete_batch_bytes: 0,
        ..options()
    }
}

#[tokio::test]
async fn a_rejected_rm_keeps_that_run_and_the_others_are_still_deleted() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("a", ANCIENT).run_files("b", ANCIENT);
    let (a_journal, _) = names("a");
    sandbox
        .state()
        .rm_reject
        .push((format!("/{a_journal}'"), "rm exploded".into()));
    let store = store_with(&[("a", RunStatus::Completed), ("b", RunStatus::Completed)]);
    let (logs, _guard) = LogCapture::install();
    let report = prune_journals(&sandbox, &store, &per_run()).await;
    assert_eq!(report.deleted, ["b"]);
    assert_eq!(
        report.kept,
        [kept("a", both("a"), KeptReason::DeleteFailed)]
    );
    assert_eq!(
        report.failures,
        [PruneFailure {
            stage: PruneStage::Delete,
            run_id: Some("a".into()),
            message: SandboxError::Other("rm exploded".into()).to_string(),
        }]
    );
    assert!(logs.contains(Level::WARN, "rm exploded"));
}

#[tokio::test]
async fn an_rm_exiting_non_zero_is_delete_failed_with_its_code_and_no_warning() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("stuck", ANCIENT);
    let journal = journal_paths("stuck", Some(DIR)).unwrap().journal;
    sandbox.state().rm_exit.insert(journal, 1);
    let (logs, _guard) = LogCapture::install();
    let report = prune(&sandbox, &store_with(&[("stuck", RunStatus::Completed)])).await;
    assert!(report.deleted.is_empty());
    assert_eq!(
        report.kept,
        [kept("stuck", both("stuck"), KeptReason::DeleteFailed)]
    );
    assert_eq!(
        report.failures,
        [PruneFailure {
            stage: PruneStage::Delete,
            run_id: Some("stuck".into()),
            message: "rm exited 1".into(),
        }]
    );
    assert_eq!(logs.count(Level::WARN), 0);
}

#[tokio::test]
async fn a_failed_listing_ends_the_prune_with_a_warning() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("done", ANCIENT);
    sandbox.state().ls_error = Some("ls exploded".into());
    let (logs, _guard) = LogCapture::install();
    let store = store_with(&[("done", RunStatus::Completed)]);
    let report = prune(&sandbox, &store).await;
    assert_eq!(
        report,
        PruneReport {
            listed: 0,
            run_ids: 0,
            deleted: vec![],
            kept: vec![],
            age_gate: AgeGate::Unavailable,
            failures: vec![PruneFailure {
                stage: PruneStage::List,
                run_id: None,
                message: SandboxError::Other("ls exploded".into()).to_string(),
            }],
            dry_run: false,
            planned: vec![],
        }
    );
    assert_eq!(logs.count(Level::WARN), 1);
    assert_eq!(
        sandbox.commands().len(),
        1,
        "no stat after a failed listing"
    );
    assert!(gets(&store).is_empty());
}

#[tokio::test]
async fn an_empty_directory_gives_an_empty_listed_report() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let report = prune(&sandbox, &store_with(&[])).await;
    assert_eq!(
        report,
        PruneReport {
            listed: 0,
            run_ids: 0,
            deleted: vec![],
            kept: vec![],
            age_gate: AgeGate::Listed,
            failures: vec![],
            dry_run: false,
            planned: vec![],
        }
    );
    assert_eq!(
        serde_json::to_value(&report).unwrap(),
        serde_json::json!({"listed":0,"runIds":0,"deleted":[],"kept":[],"ageGate":"listed","failures":[]})
    );
}

// Shell only (H3.21), defaults (H3.22–23)

#[tokio::test]
async fn the_commands_are_exactly_the_listing_the_age_listing_and_the_reference_rm() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("r-done", ANCIENT);
    let report =
        prune_as_the_reference(&sandbox, &store_with(&[("r-done", RunStatus::Completed)])).await;
    assert_eq!(report.deleted, ["r-done"]);
    // The port has no file API at all, so nothing but `exec` can have been used. A batch of one
    // run is the reference's own `rm`, judged by its exit code; with several runs to delete the
    // third command would be one batched script instead (see the batching tests below).
    assert_eq!(
        sandbox.commands(),
        [
            "ls -1 '/tmp/sweep-test' 2>/dev/null",
            "stat -c '%Y %n' '/tmp/sweep-test' '/tmp/sweep-test'/* 2>/dev/null",
            "rm -f '/tmp/sweep-test/r-done.ndjson' '/tmp/sweep-test/r-done.err'",
        ]
    );
}

#[tokio::test]
async fn without_a_dir_the_default_directory_is_listed() {
    let sandbox = FakeJournalSandbox::new("/tmp/tanstack-runs");
    prune_journals(&sandbox, &store_with(&[]), &PruneOptions::new(NOW)).await;
    assert_eq!(
        sandbox.commands()[0],
        "stat -c '%Y %n' '/tmp/tanstack-runs' '/tmp/tanstack-runs'/* 2>/dev/null \
         || { printf '%s\\n' '#reaper:ls-fallback'; ls -1 '/tmp/tanstack-runs' 2>/dev/null; }"
    );
    let defaults = PruneOptions::new(NOW);
    assert_eq!(defaults.orphan_ttl_ms, DEFAULT_ORPHAN_TTL_MS);
    const { assert!(DEFAULT_ORPHAN_TTL_MS >= 60_000) };
    assert_eq!(defaults.max_deletes, DEFAULT_MAX_DELETES);
}

// H15.2

#[tokio::test]
async fn a_witness_only_age_listing_still_deletes_terminal_runs_and_keeps_running_ones() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (done, _) = names("done");
    let (live, _) = names("live");
    sandbox.file(&done, None).file(&live, None);
    let store = store_with(&[("done", RunStatus::Completed), ("live", RunStatus::Running)]);
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(
        report.kept,
        [kept("live", vec![live], KeptReason::NonTerminal)]
    );
}

// Batched deletion (our deviation: fewer execs, the same per-run verdicts)

fn completed_runs(sandbox: &FakeJournalSandbox, n: usize) -> (SpyStore, Vec<String>) {
    let ids: Vec<String> = (0..n).map(|i| format!("run-{i:05}")).collect();
    let store = SpyStore::new(MemoryStore::new());
    for id in &ids {
        sandbox.run_files(id, ANCIENT);
        let mut r = RunRecord::new(id.as_str(), "t", NOW - 1000);
        r.status = RunStatus::Completed;
        store.inner.put_run(r);
    }
    (store, ids)
}

#[tokio::test]
async fn several_deletions_go_out_in_one_exec_with_a_verdict_per_run() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 3);
    let stuck = journal_paths(&ids[1], Some(DIR)).unwrap().journal;
    sandbox.state().rm_exit.insert(stuck, 1);
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, [ids[0].clone(), ids[2].clone()]);
    assert_eq!(
        report.kept,
        [kept(&ids[1], both(&ids[1]), KeptReason::DeleteFailed)]
    );
    assert_eq!(
        report.failures,
        [PruneFailure {
            stage: PruneStage::Delete,
            run_id: Some(ids[1].clone()),
            message: "rm exited 1".into(),
        }]
    );
    assert_eq!(sandbox.delete_execs().len(), 1);
    assert_eq!(sandbox.remaining(), both(&ids[1]));
}

#[tokio::test]
async fn a_batch_is_one_rm_over_all_its_files_then_a_builtin_status_line_per_run() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 2);
    prune(&sandbox, &store).await;
    let operands: Vec<String> = ids
        .iter()
        .map(|id| {
            let (journal, stderr) = names(id);
            format!("\"$d\"/'{journal}' \"$d\"/'{stderr}'")
        })
        .collect();
    // No process per run: `[`, `printf`, `shift` and `$((…))` are shell builtins.
    assert_eq!(
        sandbox.delete_execs(),
        [format!(
            "d='{DIR}'; set -- {}\n\
             rm -f -- \"$@\" 2>/dev/null; rc=$?; i=0\n\
             while [ \"$#\" -ge 2 ]; do\n\
             if [ -e \"$1\" ] || [ -L \"$1\" ] || [ -e \"$2\" ] || [ -L \"$2\" ]; \
             then printf 'rm %d left %d\\n' \"$i\" \"$rc\"; else printf 'rm %d gone\\n' \"$i\"; fi\n\
             i=$((i + 1)); shift 2\n\
             done",
            operands.join(" ")
        )]
    );
}

#[tokio::test]
async fn a_run_whose_files_are_back_after_an_rm_that_exited_zero_is_delete_failed() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 2);
    let recreated = journal_paths(&ids[0], Some(DIR)).unwrap().journal;
    sandbox.state().rm_recreated.insert(recreated);
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, [ids[1].clone()]);
    assert_eq!(
        report.kept,
        [kept(&ids[0], both(&ids[0]), KeptReason::DeleteFailed)]
    );
    assert!(
        report.failures[0].message.contains("still there"),
        "{}",
        report.failures[0].message
    );
}

#[tokio::test]
async fn only_exact_status_lines_count_and_a_run_without_one_is_delete_failed() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 2);
    let lost = journal_paths(&ids[0], Some(DIR)).unwrap().journal;
    sandbox.state().rm_unreported.insert(lost);
    // Near misses for run 0 printed before the real lines: none of them may decide it.
    sandbox.state().batch_noise = [
        "rm 0 gonex",
        "rm 0 left",
        "rm 0 left x",
        "rm -0 gone",
        "rm 0  gone",
    ]
    .map(String::from)
    .to_vec();
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, [ids[1].clone()]);
    assert_eq!(
        report.kept,
        [kept(&ids[0], both(&ids[0]), KeptReason::DeleteFailed)]
    );
    assert!(report.failures[0].message.contains("no rm status"));
}

#[tokio::test]
async fn a_failed_batch_exec_fails_every_run_in_it() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 3);
    sandbox
        .state()
        .rm_reject
        .push((DIR.into(), "connection reset".into()));
    let (logs, _guard) = LogCapture::install();
    let report = prune(&sandbox, &store).await;
    assert!(report.deleted.is_empty());
    assert_eq!(report.kept.len(), 3);
    assert!(report
        .kept
        .iter()
        .all(|k| k.reason == KeptReason::DeleteFailed));
    let failed: Vec<String> = report
        .failures
        .iter()
        .map(|f| f.run_id.clone().unwrap())
        .collect();
    assert_eq!(failed, ids);
    assert!(report
        .failures
        .iter()
        .all(|f| f.stage == PruneStage::Delete && f.message.contains("connection reset")));
    assert!(logs.contains(Level::WARN, "connection reset"));
}

#[tokio::test]
async fn a_run_without_a_status_line_is_delete_failed() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 2);
    let lost = journal_paths(&ids[1], Some(DIR)).unwrap().journal;
    sandbox.state().rm_unreported.insert(lost);
    let report = prune(&sandbox, &store).await;
    assert_eq!(report.deleted, [ids[0].clone()]);
    assert_eq!(report.kept[0].reason, KeptReason::DeleteFailed);
    assert_eq!(report.failures.len(), 1);
    assert!(
        report.failures[0].message.contains("no rm status"),
        "{}",
        report.failures[0].message
    );
}

#[tokio::test]
async fn batches_stay_within_the_byte_limit_and_keep_listing_order() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 5);
    let options = PruneOptions {
        delete_batch_bytes: 450,
        ..options()
    };
    let report = prune_journals(&sandbox, &store, &options).await;
    assert_eq!(report.deleted, ids);
    let rms = sandbox.delete_execs();
    assert!(rms.len() > 1 && rms.len() < 5, "{} batches", rms.len());
    assert!(rms.iter().all(|c| c.len() <= 450));
    // Listing order: the batches' operands, concatenated, name the runs in order.
    let named: Vec<&String> = rms
        .iter()
        .flat_map(|c| ids.iter().filter(move |id| c.contains(id.as_str())))
        .collect();
    assert_eq!(named, ids.iter().collect::<Vec<_>>());
    assert!(sandbox.remaining().is_empty());
}

#[tokio::test]
async fn max_deletes_counts_scheduled_deletions_so_a_failed_rm_uses_a_slot() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 2);
    let stuck = journal_paths(&ids[0], Some(DIR)).unwrap().journal;
    sandbox.state().rm_exit.insert(stuck, 1);
    let options = PruneOptions {
        max_deletes: 1,
        ..options()
    };
    let report = prune_journals(&sandbox, &store, &options).await;
    assert!(report.deleted.is_empty());
    let reasons: Vec<KeptReason> = report.kept.iter().map(|k| k.reason).collect();
    assert_eq!(reasons, [KeptReason::DeleteFailed, KeptReason::MaxDeletes]);
}

#[tokio::test]
async fn pruning_thousands_of_journals_takes_a_handful_of_execs() {
    for n in [1000, 5000] {
        let sandbox = FakeJournalSandbox::new(DIR);
        let (store, _) = completed_runs(&sandbox, n);
        let options = PruneOptions {
            max_deletes: n,
            ..options()
        };
        let report = prune_journals(&sandbox, &store, &options).await;
        assert_eq!(report.deleted.len(), n);
        assert_eq!(report.listed, 2 * n);
        let execs = sandbox.commands().len();
        // The reference: ls + stat + one rm per run.
        let reference = 2 + n;
        assert!(
            execs * 10 <= reference,
            "{n} runs took {execs} execs (reference {reference})"
        );
        assert!(sandbox
            .commands()
            .iter()
            .all(|c| c.len() <= DEFAULT_DELETE_BATCH_BYTES));
        println!("{n} journals: {execs} execs (reference {reference})");
    }
}

#[tokio::test]
async fn the_report_serialises_with_the_reference_names() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .file("junk", Some(ANCIENT))
        .run_files("live", ANCIENT)
        .run_files("young", FRESH);
    sandbox.state().stat_error = Some("stat exploded".into());
    let report =
        prune_as_the_reference(&sandbox, &store_with(&[("live", RunStatus::Running)])).await;
    let json = serde_json::to_value(&report).unwrap();
    let (lj, le) = names("live");
    let (yj, ye) = names("young");
    assert_eq!(
        json,
        serde_json::json!({
            "listed": 5,
            "runIds": 2,
            "deleted": [],
            "kept": [
                {"names": ["junk"], "reason": "undecodable-name"},
                {"runId": "live", "names": [lj, le], "reason": "non-terminal"},
                {"runId": "young", "names": [yj, ye], "reason": "age-gate-unavailable"},
            ],
            "ageGate": "unavailable",
            "failures": [{"stage": "mtime-list", "message": "sandbox error: stat exploded"}],
        })
    );
}

#[tokio::test]
async fn a_second_prune_finds_nothing_left_to_delete() {
    let sandbox = FakeJournalSandbox::new(DIR);
    let (store, ids) = completed_runs(&sandbox, 4);
    assert_eq!(prune(&sandbox, &store).await.deleted, ids);
    let again = prune(&sandbox, &store).await;
    assert_eq!((again.listed, again.deleted.len()), (0, 0));
}

#[tokio::test]
async fn the_prune_logs_a_debug_summary() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("done", ANCIENT);
    let (logs, _guard) = LogCapture::install();
    prune(&sandbox, &store_with(&[("done", RunStatus::Completed)])).await;
    assert!(logs.contains(Level::DEBUG, "journal prune complete"));
    assert_eq!(logs.count(Level::WARN), 0);
}

// One listing exec (our deviation: the age listing names the files; `ls` only when `stat` fails)

#[tokio::test]
async fn one_listing_exec_names_and_ages_the_journals_before_the_reference_rm() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("r-done", ANCIENT);
    let report = prune(&sandbox, &store_with(&[("r-done", RunStatus::Completed)])).await;
    assert_eq!(report.deleted, ["r-done"]);
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert_eq!(
        sandbox.commands(),
        [
            "stat -c '%Y %n' '/tmp/sweep-test' '/tmp/sweep-test'/* 2>/dev/null \
             || { printf '%s\\n' '#reaper:ls-fallback'; ls -1 '/tmp/sweep-test' 2>/dev/null; }",
            "rm -f '/tmp/sweep-test/r-done.ndjson' '/tmp/sweep-test/r-done.err'",
        ]
    );
}

/// Builds the same sandbox twice (one per listing mode).
fn twin(build: &dyn Fn(&FakeJournalSandbox)) -> (FakeJournalSandbox, FakeJournalSandbox) {
    let (a, b) = (FakeJournalSandbox::new(DIR), FakeJournalSandbox::new(DIR));
    build(&a);
    build(&b);
    (a, b)
}

#[tokio::test]
async fn the_one_listing_decides_every_run_as_the_two_reference_listings_do() {
    let runs = [
        ("done", RunStatus::Completed),
        ("failed", RunStatus::Failed),
        ("live", RunStatus::Running),
    ];
    let populate = |s: &FakeJournalSandbox| {
        s.run_files("done", ANCIENT)
            .run_files("failed", FRESH)
            .run_files("live", ANCIENT)
            .run_files("old-orphan", ANCIENT)
            .run_files("young-orphan", FRESH)
            .file("junk", Some(ANCIENT));
    };
    let (orphan_journal, _) = names("old-orphan");
    type Scenario<'a> = (&'a str, Box<dyn Fn(&FakeJournalSandbox) + 'a>);
    let scenarios: Vec<Scenario> = vec![
        ("every file aged", Box::new(|s| populate(s))),
        (
            "a file without an age (gone between the glob and stat)",
            Box::new(|s| {
                populate(s);
                let mut state = s.state();
                let entry = state.files.iter_mut().find(|(n, _)| *n == orphan_journal);
                entry.expect("the orphan's journal").1 = None;
            }),
        ),
        (
            "stat without -c prints nothing",
            Box::new(|s| {
                populate(s);
                s.state().stat_stdout = Some(String::new());
            }),
        ),
        (
            "an empty directory",
            Box::new(|s| {
                s.state().files.clear();
            }),
        ),
    ];
    for (name, build) in &scenarios {
        let (one, two) = twin(build.as_ref());
        let combined = prune(&one, &store_with(&runs)).await;
        let reference = prune_as_the_reference(&two, &store_with(&runs)).await;
        assert_eq!(combined, reference, "{name}");
        assert_eq!(one.remaining(), two.remaining(), "{name}");
        assert!(
            one.commands().len() < two.commands().len(),
            "{name}: one listing exec, not two"
        );
    }
}

#[tokio::test]
async fn in_one_listing_a_failed_stat_falls_back_to_ls_and_keeps_every_orphan() {
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox
        .run_files("orphan", ANCIENT)
        .run_files("done", ANCIENT);
    sandbox.state().stat_error = Some("stat exploded".into());
    let report = prune(&sandbox, &store_with(&[("done", RunStatus::Completed)])).await;
    assert_eq!(report.age_gate, AgeGate::Unavailable);
    assert_eq!(report.listed, 4);
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(
        report.kept,
        [kept(
            "orphan",
            both("orphan"),
            KeptReason::AgeGateUnavailable
        )]
    );
    // The listing exec itself did not fail; only the ages are missing.
    assert!(report.failures.is_empty(), "{:?}", report.failures);
}

#[tokio::test]
async fn a_stat_that_exits_0_without_a_witness_line_costs_a_second_listing_and_keeps_every_orphan()
{
    let populate = |s: &FakeJournalSandbox| {
        s.run_files("done", ANCIENT).run_files("orphan", ANCIENT);
        let mut state = s.state();
        state.stat_stdout = Some("something else entirely\n".into());
        state.stat_exits_0 = true;
    };
    let (one, two) = twin(&populate);
    let store = || store_with(&[("done", RunStatus::Completed)]);
    let report = prune(&one, &store()).await;
    assert_eq!(report.age_gate, AgeGate::Unavailable);
    assert_eq!(report.deleted, ["done"]);
    assert_eq!(
        report.kept,
        [kept(
            "orphan",
            both("orphan"),
            KeptReason::AgeGateUnavailable
        )]
    );
    assert_eq!(report, prune_as_the_reference(&two, &store()).await);
    let listings: Vec<String> = one
        .commands()
        .into_iter()
        .filter(|c| !c.starts_with("rm -f "))
        .collect();
    assert_eq!(listings.len(), 2, "{listings:?}");
    assert!(listings[1].starts_with("ls -1 "), "{listings:?}");
}

#[tokio::test]
async fn a_marker_line_smuggled_into_the_age_listing_keeps_every_orphan_it_hides() {
    // A file name with a newline can print a line equal to the marker inside `stat`'s output.
    // Everything after it is then read as names without ages: orphans stay, nothing is invented.
    let sandbox = FakeJournalSandbox::new(DIR);
    sandbox.run_files("done", ANCIENT);
    let (oj, oe) = names("old-orphan");
    let listing = format!(
        "1700000000 {DIR}\n{INVENTORY_FALLBACK_MARKER}\n{oj}\n{oe}\n{} {DIR}/{oj}\n{} {DIR}/{oe}\n",
        ANCIENT / 1000,
        ANCIENT / 1000
    );
    {
        let mut state = sandbox.state();
        state.stat_stdout = Some(listing);
        state.stat_exits_0 = true;
        state.files.push((oj.clone(), Some(ANCIENT)));
        state.files.push((oe.clone(), Some(ANCIENT)));
    }
    let report = prune(&sandbox, &store_with(&[("done", RunStatus::Completed)])).await;
    assert!(report.deleted.is_empty(), "{:?}", report.deleted);
    let orphan = report
        .kept
        .iter()
        .find(|k| k.run_id.as_deref() == Some("old-orphan"))
        .expect("the orphan is kept");
    assert_eq!(orphan.reason, KeptReason::AgeGateMissingEntry);
    assert!(sandbox.remaining().contains(&oj));
}
