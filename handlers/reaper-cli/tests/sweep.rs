//! `reaper sweep` on a prepared database and real local sandboxes.

mod common;

use common::{now, run, Site, HELLO, MINUTE, TICKING};
use reaper_core::{LeaseStore, MessageStore, RunStatus, RunStore, SandboxInstanceStore};

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_finalizes_a_finished_agent_reclaims_its_sandbox_and_leaves_a_producing_one_alone() {
    let site = Site::new();
    let finished = site
        .detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let producing = site
        .detached_run("run-busy", Some(TICKING), false, MINUTE)
        .await;

    let (code, stdout, stderr) = common::run(site.reaper("sweep").args([
        "--detached-ttl",
        "10m",
        "--quiet-window",
        "10ms",
        "--json",
    ]));

    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(report["sweep"]["state"], "swept");
    assert_eq!(report["considered"], 2);
    assert_eq!(report["outcomes"]["finalized"], 1);
    assert_eq!(report["outcomes"]["producing"], 1);
    let entry = |id: &str| {
        report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["runId"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(entry("run-done")["outcome"], "finalized");
    assert_eq!(entry("run-done")["status"], "completed");
    assert_eq!(entry("run-done")["exitCode"], 0);
    assert_eq!(entry("run-busy")["outcome"], "producing");
    assert!(
        report["leaseHeld"]["from"].as_i64().unwrap()
            <= report["leaseHeld"]["to"].as_i64().unwrap()
    );

    let done = RunStore::get(&site.store, "run-done")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let transcript = site
        .store
        .get_transcript("run-done")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transcript.messages.last().unwrap().content, "Hello there");
    assert!(
        !site.sandbox_exists(&finished).await,
        "the finished run's sandbox is destroyed"
    );
    assert!(
        SandboxInstanceStore::get(&site.store, "local:thread-run-done")
            .await
            .unwrap()
            .is_none(),
        "its instance record is gone"
    );
    let busy = RunStore::get(&site.store, "run-busy")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(busy.status, RunStatus::Running);
    assert_eq!(
        busy.driver_epoch, None,
        "a producing run is not even claimed"
    );
    assert!(site.sandbox_exists(&producing).await);
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_exits_2_and_says_so_when_a_sandbox_destroy_fails() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-leak", Some(HELLO), true, MINUTE)
        .await;
    std::fs::write(sandbox.dir().join(reaper_local::DESTROY_FAILS_FLAG), "").unwrap();

    let (code, stdout, stderr) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "10m", "--quiet-window", "0ms"]));

    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("run-leak "))
        .expect("a row for the run");
    assert!(
        row.contains("reclaim-failed") && row.contains("completed"),
        "{row}"
    );
    assert!(stdout.contains("totals: reclaim-failed 1"), "{stdout}");
    assert!(
        site.sandbox_exists(&sandbox).await,
        "the leak is real: the sandbox is still there"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_expires_a_run_past_its_ttl_and_stops_its_agent() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-old", Some(TICKING), false, 60 * MINUTE)
        .await;

    let (code, stdout, stderr) = run(site.reaper("sweep").args([
        "--detached-ttl",
        "30m",
        "--quiet-window",
        "10ms",
        "--run-budget",
        "300ms",
        "--json",
    ]));

    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(report["runs"][0]["outcome"], "expired");
    assert_eq!(report["runs"][0]["status"], "aborted");
    let record = RunStore::get(&site.store, "run-old")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.cancel_requested, Some(true));
    assert!(!site.sandbox_exists(&sandbox).await);
    assert!(common::processes_under(site.tmp.path()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_skipped_because_another_sweep_holds_the_lease_exits_0_and_names_the_holder() {
    let site = Site::new();
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    site.store
        .acquire(
            reaper_core::reap::SWEEP_LEASE_KEY,
            "other-host/42/beef",
            now(),
            60_000,
        )
        .await
        .unwrap();

    let (code, stdout, stderr) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "10m", "--json"]));

    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(report["sweep"]["state"], "already-running");
    assert_eq!(report["sweep"]["holder"], "other-host/42/beef");
    assert_eq!(report["considered"], 0);
    let record = RunStore::get(&site.store, "run-done")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, RunStatus::Running, "nothing was touched");

    let (code, stdout, _) = run(site.reaper("sweep").args(["--detached-ttl", "10m"]));
    assert_eq!(code, 0);
    assert!(
        stdout.starts_with("skipped: another sweep holds the lease (holder other-host/42/beef"),
        "{stdout}"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_lines_appear_only_once_a_sweep_passes_the_threshold() {
    let site = Site::new();
    site.detached_run("run-busy", Some(TICKING), false, MINUTE)
        .await;

    let (code, _, quiet) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "10m", "--log", "off"]));
    assert_eq!(code, 0);
    assert!(
        !quiet.contains("probing"),
        "a quick sweep prints no progress: {quiet}"
    );

    let (code, _, progress) = run(site.reaper("sweep").args([
        "--detached-ttl",
        "10m",
        "--log",
        "off",
        "--progress-after",
        "0ms",
    ]));
    assert_eq!(code, 0);
    assert!(progress.contains("probing run run-busy"), "{progress}");
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_go_to_stderr_as_json_lines_when_asked() {
    let site = Site::new();
    let (code, stdout, stderr) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "10m", "--log-format", "json", "--json"]));
    assert_eq!(code, 0, "{stderr}");
    json(&stdout);
    let summary = stderr
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))
        })
        .find(|v| v["fields"]["message"] == "sweep complete")
        .expect("one summary event per sweep");
    assert_eq!(summary["fields"]["considered"], 0);
}

/// A cron-run `reaper sweep` keeps no state between processes: the round-robin cursor is kept
/// with the sweep lease in the database, so the next process goes on where the last stopped and
/// a producing run at the head never starves the runs behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_sweep_processes_go_round_robin_through_the_cursor_kept_in_the_database() {
    let site = Site::new();
    let mut sandboxes = Vec::new();
    for i in 0..3 {
        // Oldest first in the listing: busy-0 has been detached longest.
        let id = format!("busy-{i}");
        sandboxes.push(
            site.detached_run(&id, Some(TICKING), false, MINUTE - i * 1_000)
                .await,
        );
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (code, stdout, stderr) =
            run(site
                .reaper("sweep")
                .args(["--detached-ttl", "10m", "--max-runs", "1", "--json"]));
        assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
        let report = json(&stdout);
        let runs = report["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{report}");
        assert_eq!(runs[0]["outcome"], "producing", "{report}");
        seen.push(runs[0]["runId"].as_str().unwrap().to_string());
    }
    assert_eq!(seen, ["busy-0", "busy-1", "busy-2"], "each process went on");
    let note = site
        .store
        .note(reaper_core::reap::SWEEP_LEASE_KEY)
        .await
        .unwrap();
    assert!(
        note.is_some_and(|n| n.contains("busy-2")),
        "the cursor is kept"
    );
    site.teardown().await;
}
