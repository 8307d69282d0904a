//! `reaper demo`, end to end, as a newcomer runs it.

mod common;

use std::time::{Duration, Instant};

use common::{processes_under, reaper, run};
use reaper_core::{MessageStore, RunStatus, RunStore};
use reaper_sqlite::SqliteStore;

fn line_of<'a>(stdout: &'a str, run_id: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{run_id} ")))
        .unwrap_or_else(|| panic!("no table row for {run_id} in:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_sweeps_a_dozen_real_runs_explains_each_and_leaves_nothing_running() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let started = Instant::now();
    let (code, stdout, stderr) = run(reaper().arg("demo").arg("--dir").arg(&dir));
    let took = started.elapsed();
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(took < Duration::from_secs(20), "the demo took {took:?}");

    for (run_id, words) in [
        (
            "run-hello",
            &[
                "finished while detached",
                "finalized",
                "completed",
                "destroyed",
                "Hello, world!",
            ][..],
        ),
        (
            "run-crash",
            &[
                "exited 3",
                "finalized",
                "failed",
                " 3 ",
                "agent exited with code 3",
            ],
        ),
        (
            "run-typing",
            &[
                "still producing",
                "producing",
                "running",
                "kept",
                "left alone",
            ],
        ),
        (
            "run-stale",
            &[
                "past its TTL",
                "expired",
                "aborted",
                "destroyed",
                "cancel recorded",
            ],
        ),
        (
            "run-forgotten",
            &["past its TTL", "expired", "completed", "destroyed"],
        ),
        (
            "run-back",
            &[
                "viewer came back",
                "not listed",
                "running",
                "kept",
                "untouched",
            ],
        ),
        (
            "run-leaky",
            &["destroy fails", "reclaim-failed", "completed", "LEAKED"],
        ),
        ("run-vanished", &["vanished", "unknown", "gone before"]),
        ("run-paused", &["interrupted", "not listed"]),
        (
            "run-earlier",
            &["completed while watched", "not listed", "completed"],
        ),
    ] {
        let line = line_of(&stdout, run_id);
        for w in words {
            assert!(line.contains(w), "{run_id}: {w:?} missing from {line:?}");
        }
    }
    assert!(
        stdout.contains("run-of-a-deleted-thread"),
        "the orphan journal is shown:\n{stdout}"
    );
    let totals = stdout
        .lines()
        .find(|l| l.starts_with("totals:"))
        .expect("a totals line");
    for w in [
        "finalized 4",
        "expired 2",
        "producing 2",
        "unknown 1",
        "reclaim-failed 1",
        "not listed 3",
    ] {
        assert!(totals.contains(w), "{w:?} missing from {totals:?}");
    }
    assert!(stdout.contains("journals pruned 3"), "{stdout}");
    assert!(!stdout.contains("UNEXPECTED"), "{stdout}");

    // The database tells the same story: terminal statuses and saved transcripts.
    let store = SqliteStore::open(dir.join("reaper.db")).unwrap();
    for (run_id, status, said) in [
        ("run-hello", RunStatus::Completed, Some("Hello, world!")),
        (
            "run-essay",
            RunStatus::Completed,
            Some("Three fixes, one feature, no breaking changes."),
        ),
        (
            "run-crash",
            RunStatus::Failed,
            Some("Reading the parser..."),
        ),
        (
            "run-noisy",
            RunStatus::Completed,
            Some("All 12 tests pass."),
        ),
        (
            "run-forgotten",
            RunStatus::Completed,
            Some("Done: README.fr.md"),
        ),
        ("run-stale", RunStatus::Aborted, None),
        ("run-typing", RunStatus::Running, None),
    ] {
        let record = RunStore::get(&store, run_id).await.unwrap().unwrap();
        assert_eq!(record.status, status, "{run_id}");
        let transcript = store.get_transcript(run_id).await.unwrap().unwrap();
        assert_eq!(
            transcript.messages[0].role, "user",
            "the chat route's prompt is kept"
        );
        let assistant = transcript.messages.iter().find(|m| m.role == "assistant");
        assert_eq!(assistant.map(|m| m.content.trim()), said, "{run_id}");
    }

    let left = processes_under(&dir);
    assert!(left.is_empty(), "demo processes still running: {left:#?}");
    let sandboxes: Vec<_> = std::fs::read_dir(dir.join("sandboxes")).unwrap().collect();
    assert!(sandboxes.is_empty(), "sandboxes left: {sandboxes:?}");
}

#[test]
fn demo_rerun_wipes_its_previous_directory_and_reports_every_run_as_its_scene_expects() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let (code, _, stderr) = run(reaper().arg("demo").arg("--dir").arg(&dir));
    assert_eq!(code, 0, "{stderr}");
    std::fs::write(dir.join("left-over"), "from the first demo").unwrap();

    let (code, stdout, stderr) = run(reaper().args(["demo", "--json", "--dir"]).arg(&dir));
    assert_eq!(code, 0, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["unexpected"], 0, "{report:#}");
    assert_eq!(report["runs"].as_array().unwrap().len(), 13);
    assert_eq!(report["sweep"]["sweep"]["state"], "swept");
    assert_eq!(report["sweep"]["considered"], 10);
    assert!(
        !dir.join("left-over").exists(),
        "the previous demo was wiped"
    );
    assert!(processes_under(&dir).is_empty());
}

#[test]
fn demo_refuses_to_wipe_a_directory_it_did_not_make() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("precious");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("thesis.tex"), "years of work").unwrap();

    let (code, stdout, stderr) = run(reaper().arg("demo").arg("--dir").arg(&dir));

    assert_eq!(code, 1, "stdout:\n{stdout}");
    assert!(stderr.contains("refusing to use"), "{stderr}");
    assert!(stderr.contains("not made by `reaper demo`"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("thesis.tex")).unwrap(),
        "years of work"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "nothing was added"
    );
}

/// The demo's cleanup destroys the sandbox whose destroy it made fail; the ledger learns that
/// too, so `reaper status` on the demo's database reports no leak and exits 0.
#[test]
fn after_the_demo_status_reports_no_leak_and_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    let (code, stdout, stderr) = run(reaper().arg("demo").arg("--dir").arg(&dir));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("a ledger retry confirmed 1 leak(s) gone"),
        "{stdout}"
    );
    let (code, stdout, stderr) = run(reaper()
        .arg("status")
        .arg("--db")
        .arg(dir.join("reaper.db")));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("pending 0, leaked 0"), "{stdout}");
}
