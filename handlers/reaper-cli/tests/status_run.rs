//! `reaper status RUN_ID`: one run's record, its journal's verdict now (a read-only probe), what
//! each sweep did to it and its reclaim-ledger entry; `status --outcome` from the runs' history;
//! `status --watch` rendering again on each interval.

mod common;

use std::time::Duration;

use common::{now, run, Site, Spawned, HELLO, MINUTE, TICKING};
use reaper_core::{NewRun, RunPatch, RunStatus, RunStore};
use serde_json::Value;

/// A hang guard only: every wait below ends on an event (a line printed), never on time.
const GUARD: Duration = Duration::from_secs(180);

/// `reaper status RUN_ID`, probing through the site's local sandboxes.
fn status_of(site: &Site, run_id: &str) -> std::process::Command {
    let mut cmd = site.reaper_status();
    cmd.arg(run_id).arg("--sandboxes").arg(&site.root);
    cmd
}

fn sweep(site: &Site) {
    let (code, stdout, stderr) = run(site.reaper("sweep").args(["--detached-ttl", "30m"]));
    assert!(code == 0 || code == 2, "{code}\n{stdout}\n{stderr}");
}

#[tokio::test]
async fn status_of_one_run_shows_its_record_journal_verdict_history_and_ledger() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;

    // Before any sweep: the probe reads the finished journal and changes nothing.
    let (code, stdout, stderr) = run(&mut status_of(&site, "run-done"));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.starts_with("run run-done\n"), "{stdout}");
    assert!(stdout.contains("thread-run-done"), "{stdout}");
    assert!(
        stdout.contains("finished (exit code 0): the next sweep finalizes it"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("no sweep has touched this run"), "{stdout}");
    assert!(stdout.contains("no entry (nothing pending"), "{stdout}");
    let record = site.store.get("run-done").await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Running, "status is read-only");
    assert!(
        site.sandbox_exists(&sandbox).await,
        "the probe destroyed nothing"
    );

    sweep(&site);
    let (code, stdout, stderr) = run(&mut status_of(&site, "run-done"));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("completed"), "{stdout}");
    assert!(
        stdout.contains("history (newest first, 1 shown)"),
        "{stdout}"
    );
    assert!(stdout.contains("finalized/exited"), "{stdout}");
    assert!(stdout.contains("recorded, resolved"), "{stdout}");

    let (code, stdout, stderr) = run(status_of(&site, "run-done").arg("--json"));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["run"]["runId"], "run-done");
    assert_eq!(json["run"]["status"], "completed");
    assert_eq!(json["history"][0]["outcome"], "finalized");
    assert_eq!(json["history"][0]["reasonCode"], "finalized/exited");
    assert_eq!(json["history"][0]["sandbox"], "destroyed");
    assert!(json["reclaimLedger"].is_null());
    assert_eq!(
        json["journal"]["state"], "unknown",
        "its sandbox is gone now"
    );
    site.teardown().await;
}

#[tokio::test]
async fn status_of_an_unknown_or_hostile_run_id_is_a_clear_error() {
    let site = Site::new();
    let (code, stdout, stderr) = run(&mut status_of(&site, "run-nope"));
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stderr.contains("no run \"run-nope\""), "{stderr}");
    assert!(stderr.contains("reaper status"), "{stderr}");

    let (code, _, stderr) = run(&mut status_of(&site, "run\u{1b}[2J"));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("invalid run id"), "{stderr}");
    assert!(stderr.contains("control character"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "the escape is shown escaped: {stderr:?}"
    );

    let long = "r".repeat(4_000);
    let (code, _, stderr) = run(&mut status_of(&site, &long));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("4000 bytes long"), "{stderr}");
}

#[tokio::test]
async fn status_outcome_lists_only_runs_whose_last_sweep_had_that_outcome() {
    let site = Site::new();
    site.detached_run("run-busy", Some(TICKING), false, MINUTE)
        .await;
    // No sandbox key: the probe cannot tell, the sweep reports it unknown.
    site.store
        .create_or_resume(NewRun {
            run_id: "run-keyless".into(),
            thread_id: "thread-keyless".into(),
            started_at: now() - 2 * MINUTE,
            status: None,
        })
        .await
        .unwrap();
    site.store
        .update("run-keyless", RunPatch::detach(now() - MINUTE, None))
        .await
        .unwrap();
    sweep(&site);

    let (code, stdout, stderr) = run(site.reaper_status().args(["--outcome", "unknown"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("run-keyless"), "{stdout}");
    assert!(!stdout.contains("run-busy"), "{stdout}");
    assert!(stdout.contains("(1 match the filters)"), "{stdout}");
    assert!(stdout.contains("LAST SWEEP"), "{stdout}");
    assert!(stdout.contains("unknown/"), "{stdout}");

    // History records no producing outcome: asking for it is a clear usage error.
    let (code, _, stderr) = run(site.reaper_status().args(["--outcome", "producing"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("records no producing outcome"), "{stderr}");

    let (code, _, stderr) = run(site.reaper_status().args(["--outcome", "gone"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--outcome") && stderr.contains("finalized, expired, unknown"),
        "{stderr}"
    );
    site.teardown().await;
}

#[tokio::test]
async fn status_watch_renders_again_each_interval_showing_what_changed() {
    let site = Site::new();
    site.detached_run("run-first", None, false, MINUTE).await;
    let mut watch = Spawned::start(site.reaper_status().args(["--watch", "200ms"]));
    assert!(
        watch
            .wait_for(GUARD, |l| l.starts_with("--- status render 1 at"))
            .is_some(),
        "{}",
        watch.stderr()
    );
    assert!(
        watch
            .wait_for(GUARD, |l| l.starts_with("run-first"))
            .is_some(),
        "{}",
        watch.stderr()
    );
    // Changed between two renders: a later render shows it.
    site.detached_run("run-second", None, false, MINUTE).await;
    assert!(
        watch
            .wait_for(GUARD, |l| l.starts_with("run-second"))
            .is_some(),
        "{}",
        watch.stderr()
    );
    assert!(watch
        .seen
        .iter()
        .any(|l| l.starts_with("--- status render 2 at")));
    watch.signal(nix::sys::signal::Signal::SIGINT);
    assert_eq!(watch.exit_within(GUARD), Some(0), "{}", watch.stderr());

    let (code, _, stderr) = run(site.reaper_status().args(["--watch", "1s", "--check"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("--watch") && stderr.contains("--check"),
        "{stderr}"
    );
    site.teardown().await;
}
