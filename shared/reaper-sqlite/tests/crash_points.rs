//! The `crash-points` feature: `REAPER_CRASH_AT=N` aborts the process right after its N-th
//! committed write, and `REAPER_CRASH_COUNT_FILE` reports how many commits happened. Each test
//! re-runs this test binary as a child (the ignored `child_writes_three_runs`), so a real
//! process really aborts. Run with `cargo test -p reaper-sqlite --features crash-points`.

#![cfg(feature = "crash-points")]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use reaper_core::{NewRun, RunStore};
use reaper_sqlite::SqliteStore;

const CHILD_DB: &str = "REAPER_TEST_CHILD_DB";

/// The signal `std::process::abort` raises (6 on every Unix the reaper runs on).
const SIGABRT: i32 = 6;

fn new_run(run_id: &str) -> NewRun {
    NewRun {
        run_id: run_id.into(),
        thread_id: "thread".into(),
        started_at: 1,
        status: None,
    }
}

/// The child: three writes (one commit each) and a read (no commit) on an existing file.
#[test]
#[ignore = "run as a child process by the crash-point tests"]
fn child_writes_three_runs() {
    let path = std::env::var_os(CHILD_DB).expect("run by the crash-point tests");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(path).unwrap();
        for id in ["run-1", "run-2", "run-3"] {
            store.create_or_resume(new_run(id)).await.unwrap();
            store.get(id).await.unwrap();
        }
    });
}

/// Runs the child on a migrated file with `crash_at`, returning how it ended and the count file.
fn run_child(dir: &Path, crash_at: Option<&str>) -> (ExitStatus, PathBuf, PathBuf) {
    let db = dir.join("reaper.db");
    // Migrated here, so the child's only commits are its three writes.
    drop(SqliteStore::open(&db).unwrap());
    let count = dir.join("commits");
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            "child_writes_three_runs",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DB, &db)
        .env("REAPER_CRASH_COUNT_FILE", &count)
        .env_remove("REAPER_CRASH_AT");
    if let Some(n) = crash_at {
        child.env("REAPER_CRASH_AT", n);
    }
    let status = child.status().expect("start the child");
    (status, db, count)
}

async fn stored_runs(db: &Path) -> Vec<String> {
    let store = SqliteStore::open_read_only(db).unwrap();
    store
        .all_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

#[tokio::test]
async fn without_a_crash_point_the_count_file_reports_every_commit() {
    let dir = common::temp_dir();
    let (status, db, count) = run_child(dir.path(), None);
    assert!(status.success(), "{status:?}");
    assert_eq!(std::fs::read_to_string(count).unwrap(), "3");
    assert_eq!(stored_runs(&db).await, ["run-1", "run-2", "run-3"]);
}

#[tokio::test]
async fn the_process_aborts_right_after_the_chosen_commit_which_is_durable() {
    let dir = common::temp_dir();
    let (status, db, count) = run_child(dir.path(), Some("2"));
    assert_eq!(status.signal(), Some(SIGABRT), "{status:?}");
    assert_eq!(std::fs::read_to_string(count).unwrap(), "2");
    assert_eq!(stored_runs(&db).await, ["run-1", "run-2"]);
}

#[test]
fn a_crash_point_that_is_no_commit_number_is_refused_with_a_clear_message() {
    let dir = common::temp_dir();
    let db = dir.path().join("reaper.db");
    drop(SqliteStore::open(&db).unwrap());
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writes_three_runs",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_DB, &db)
        .env("REAPER_CRASH_AT", "soon")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("REAPER_CRASH_AT must be a commit number from 1 up, got \"soon\""),
        "{stderr}"
    );
}
