//! The prune under races with real writers: journals created between the listing and the
//! deletion, live agents writing while prunes run, concurrent prunes of one directory.

mod common;

use std::path::Path;
use std::sync::Mutex;

use common::{age_file, now_ms, provider, run_agent, run_record, sandbox, sh};
use reaper_core::journal::{journal_paths, journaled_command};
use reaper_core::memory::MemoryStore;
use reaper_core::prune::{prune_journals, KeptReason, PruneOptions};
use reaper_core::{ExecOptions, ExecOutput, RunStatus, SandboxError, SandboxHandle};
use reaper_local::LocalSandbox;

/// The real sandbox, plus a real journaled agent run right after the first `exec` whose
/// command starts with `after` (that is, between the prune's listing and its deletion).
struct WriterBetween {
    inner: LocalSandbox,
    after: &'static str,
    pending: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl SandboxHandle for WriterBetween {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        let out = self.inner.exec(command, options).await?;
        if command.starts_with(self.after) {
            let writers = std::mem::take(&mut *self.pending.lock().unwrap());
            for script in writers {
                let done = self.inner.exec(&script, options).await?;
                assert_eq!(done.exit_code, 0, "{script}");
            }
        }
        Ok(out)
    }
}

fn options(sbx: &LocalSandbox) -> PruneOptions {
    PruneOptions {
        dir: Some(sbx.journal_dir().to_string()),
        ..PruneOptions::new(now_ms())
    }
}

async fn journal_created_mid_prune_is_never_lost(after: &'static str, combined_listing: bool) {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let dir = sbx.journal_dir().to_string();
    let runs = MemoryStore::new();
    run_agent(&sbx, "listed-done", "echo 1", None).await;
    runs.put_run(run_record("listed-done", RunStatus::Completed));
    // Runs that appear only after the listing: a terminal one, a live one and an orphan.
    runs.put_run(run_record("late-done", RunStatus::Completed));
    runs.put_run(run_record("late-live", RunStatus::Running));
    let late = ["late-done", "late-live", "late-orphan"];
    let writers = late
        .iter()
        .map(|run| journaled_command("echo late", &journal_paths(run, Some(&dir)).unwrap()))
        .collect();
    let handle = WriterBetween {
        inner: sbx.clone(),
        after,
        pending: Mutex::new(writers),
    };

    let options = PruneOptions {
        combined_listing,
        ..options(&sbx)
    };
    let report = prune_journals(&handle, &runs, &options).await;
    assert!(
        handle.pending.lock().unwrap().is_empty(),
        "the hook never ran"
    );
    assert_eq!(report.deleted, ["listed-done"]);
    assert!(report.failures.is_empty());
    for run in late {
        let paths = journal_paths(run, Some(&dir)).unwrap();
        let text = std::fs::read_to_string(&paths.journal)
            .unwrap_or_else(|_| panic!("{run}'s journal was lost"));
        assert!(text.starts_with("late\n{\"__exit\":0"), "{run}: {text:?}");
        assert!(Path::new(&paths.stderr).exists());
    }
}

#[tokio::test]
async fn a_journal_created_after_the_listing_is_never_lost() {
    journal_created_mid_prune_is_never_lost("ls -1 ", false).await;
}

#[tokio::test]
async fn a_journal_created_after_the_age_listing_is_never_lost() {
    journal_created_mid_prune_is_never_lost("stat -c ", false).await;
}

#[tokio::test]
async fn a_journal_created_after_the_one_combined_listing_is_never_lost() {
    journal_created_mid_prune_is_never_lost("stat -c ", true).await;
}

#[tokio::test]
async fn a_live_agent_writing_during_repeated_prunes_keeps_its_whole_journal() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let runs = MemoryStore::new();
    runs.put_run(run_record("writing", RunStatus::Running));
    // Writes numbered lines until told to stop, then exits (and the wrapper adds the sentinel).
    let mut agent = sbx
        .start_agent(
            "writing",
            "i=0; while [ ! -f stop ]; do echo \"{\\\"delta\\\":\\\"$i\\\"}\"; i=$((i+1)); done",
            None,
        )
        .await
        .unwrap();
    let paths = journal_paths("writing", Some(sbx.journal_dir())).unwrap();
    assert!(common::wait_for_lines(Path::new(&paths.journal), 1).await);
    for _ in 0..20 {
        let report = prune_journals(&sbx, &runs, &options(&sbx)).await;
        assert!(report.deleted.is_empty());
        assert_eq!(report.kept.len(), 1);
        assert_eq!(report.kept[0].reason, KeptReason::NonTerminal);
    }
    sh(&sbx, "touch stop").await;
    assert_eq!(agent.wait().await.unwrap(), 0);
    let text = std::fs::read_to_string(&paths.journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (sentinel, body) = lines.split_last().unwrap();
    assert!(sentinel.starts_with("{\"__exit\":0,"));
    // Unbroken from the first line: nothing was removed under the writer.
    for (i, line) in body.iter().enumerate() {
        assert_eq!(*line, format!("{{\"delta\":\"{i}\"}}"));
    }
}

#[tokio::test]
async fn a_live_run_with_old_files_is_kept_whatever_their_age() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let runs = MemoryStore::new();
    for (run, status) in [
        ("old-running", RunStatus::Running),
        ("old-interrupted", RunStatus::Interrupted),
    ] {
        run_agent(&sbx, run, "echo 1", None).await;
        let paths = journal_paths(run, Some(sbx.journal_dir())).unwrap();
        age_file(&paths.journal, 30 * 86_400);
        age_file(&paths.stderr, 30 * 86_400);
        runs.put_run(run_record(run, status));
    }
    let report = prune_journals(&sbx, &runs, &options(&sbx)).await;
    assert!(report.deleted.is_empty());
    assert!(report
        .kept
        .iter()
        .all(|k| k.reason == KeptReason::NonTerminal));
    assert_eq!(report.kept.len(), 2);
}

#[tokio::test]
async fn an_orphan_whose_journal_is_still_being_written_is_kept_by_its_newest_file() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    run_agent(&sbx, "orphan-live", "echo 1", None).await;
    let paths = journal_paths("orphan-live", Some(sbx.journal_dir())).unwrap();
    // The sidecar is a day old, the journal was just written: the group's newest file counts.
    age_file(&paths.stderr, 86_400);
    let report = prune_journals(&sbx, &MemoryStore::new(), &options(&sbx)).await;
    assert!(report.deleted.is_empty());
    assert_eq!(report.kept[0].reason, KeptReason::OrphanTooRecent);
    assert!(Path::new(&paths.journal).exists() && Path::new(&paths.stderr).exists());
}

#[tokio::test]
async fn concurrent_prunes_of_one_directory_never_fail_and_never_touch_live_journals() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let runs = MemoryStore::new();
    for i in 0..40 {
        let run = format!("run-{i}");
        run_agent(&sbx, &run, "echo 1", None).await;
        let status = if i % 2 == 0 {
            RunStatus::Completed
        } else {
            RunStatus::Running
        };
        runs.put_run(run_record(&run, status));
    }
    let opts = options(&sbx);
    let (a, b) = tokio::join!(
        prune_journals(&sbx, &runs, &opts),
        prune_journals(&sbx, &runs, &opts),
    );
    assert!(a.failures.is_empty(), "{:?}", a.failures);
    assert!(b.failures.is_empty(), "{:?}", b.failures);
    for i in 0..40 {
        let paths = journal_paths(&format!("run-{i}"), Some(sbx.journal_dir())).unwrap();
        assert_eq!(Path::new(&paths.journal).exists(), i % 2 == 1, "run-{i}");
    }
}
