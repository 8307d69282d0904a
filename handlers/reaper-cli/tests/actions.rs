//! The operator's actions (issue 25): each asks first (`--yes`, or a prompt on a terminal; a
//! script without `--yes` is refused), goes through the core's own path, and leaves an audit
//! entry in the logs and in the store.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{now, run, Site, HELLO, MINUTE, TICKING};
use reaper_core::{
    LeaseStore, ReclaimIntent, ReclaimLedger, RunPatch, RunStatus, RunStore, SandboxProvider,
};
use serde_json::Value;

/// `reaper ledger <action> RUN_ID --db … --sandboxes … --yes` plus `extra`.
fn ledger(site: &Site, action: &str, extra: &[&str]) -> (i32, String, String) {
    let mut cmd = common::reaper();
    cmd.args(["ledger", action, "run-leaked", "--yes"])
        .arg("--db")
        .arg(&site.db)
        .arg("--sandboxes")
        .arg(&site.root)
        .args(extra);
    run(&mut cmd)
}

/// The audit trail the store keeps (the note of the `reaper:audit` lease key).
async fn audit_trail(site: &Site) -> Vec<Value> {
    match site.store.note("reaper:audit").await.unwrap() {
        Some(note) => serde_json::from_str(&note).unwrap(),
        None => Vec::new(),
    }
}

/// A completed run whose sandbox's destroy failed once: a leak, not due for an hour.
async fn leaked_run(site: &Site) -> reaper_local::LocalSandbox {
    let sandbox = site
        .detached_run("run-leaked", Some(HELLO), true, 2 * MINUTE)
        .await;
    site.store
        .update(
            "run-leaked",
            RunPatch {
                status: Some(RunStatus::Completed),
                finished_at: reaper_core::Patch::Set(now() - MINUTE),
                detached_since: reaper_core::Patch::Clear,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let record = site.store.get("run-leaked").await.unwrap().unwrap();
    let mut intent = ReclaimIntent::new(&record, now() - 5 * MINUTE);
    intent.provider = Some("local".into());
    intent.provider_sandbox_id = Some(sandbox.id().to_string());
    intent.attempts = 1;
    intent.next_attempt_at = now() + 60 * MINUTE;
    intent.last_error = Some("destroy failed: injected".into());
    assert!(site.store.record_intent(&intent).await.unwrap());
    sandbox
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_without_yes_and_without_a_terminal_is_refused_and_changes_nothing() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-busy", Some(TICKING), false, MINUTE)
        .await;
    for args in [
        vec!["expire", "run-busy"],
        vec!["pause"],
        vec!["ledger", "retry", "run-busy"],
    ] {
        let mut cmd = common::reaper();
        cmd.args(&args).arg("--db").arg(&site.db);
        if args[0] != "pause" {
            cmd.arg("--sandboxes").arg(&site.root);
        }
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "{args:?}: {stdout}\n{stderr}");
        assert!(
            stderr.contains("without confirmation") && stderr.contains("--yes"),
            "{args:?}: {stderr}"
        );
    }
    let run_now = site.store.get("run-busy").await.unwrap().unwrap();
    assert_eq!(run_now.status, RunStatus::Running);
    assert!(site.sandbox_exists(&sandbox).await);
    assert!(site.store.note("reaper:pause").await.unwrap().is_none());
    assert!(
        audit_trail(&site).await.is_empty(),
        "a refused action is no action"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_ends_a_producing_run_inside_its_ttl_through_the_expire_path_and_audits_it() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-busy", Some(TICKING), false, MINUTE)
        .await;
    let (code, stdout, stderr) = run(site.reaper("expire").args([
        "run-busy",
        "--yes",
        "--json",
        "--quiet-window",
        "0ms",
        "--run-budget",
        "2s",
    ]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["entry"]["outcome"], "expired", "{out:#}");
    assert_eq!(out["entry"]["sandbox"], "destroyed", "{out:#}");
    let record = site.store.get("run-busy").await.unwrap().unwrap();
    assert!(record.status.is_terminal(), "{:?}", record.status);
    assert_eq!(
        record.cancel_requested,
        Some(true),
        "the cancel was recorded"
    );
    assert!(
        !site.sandbox_exists(&sandbox).await,
        "its sandbox was reclaimed"
    );
    let trail = audit_trail(&site).await;
    assert_eq!(trail.len(), 1, "{trail:#?}");
    assert_eq!(trail[0]["action"], "expire");
    assert_eq!(trail[0]["runId"], "run-busy");
    assert!(trail[0]["result"].as_str().unwrap().starts_with("expired"));
    assert!(
        stderr.contains("reaper::audit") && stderr.contains("operator action"),
        "the audit log line: {stderr}"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_refuses_a_run_attached_to_a_viewer() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-back", Some(TICKING), false, MINUTE)
        .await;
    site.store
        .update(
            "run-back",
            RunPatch {
                detached_since: reaper_core::Patch::Clear,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (code, stdout, stderr) = run(site.reaper("expire").args(["run-back", "--yes"]));
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("attached to a viewer"), "{stderr}");
    assert_eq!(
        site.store.get("run-back").await.unwrap().unwrap().status,
        RunStatus::Running
    );
    assert!(site.sandbox_exists(&sandbox).await);
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_stops_every_sweep_until_resume_and_both_are_audited() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-overdue", Some(HELLO), true, 90 * MINUTE)
        .await;
    let pause = |args: &[&str]| {
        let mut cmd = common::reaper();
        cmd.args(args).arg("--db").arg(&site.db);
        run(&mut cmd)
    };
    let (code, stdout, stderr) = pause(&["pause", "--yes", "--reason", "investigating a leak"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let sweep = || {
        run(site
            .reaper("sweep")
            .args(["--json", "--detached-ttl", "30m", "--quiet-window", "0ms"]))
    };

    let (code, stdout, stderr) = sweep();
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["sweep"]["state"], "paused", "{report:#}");
    assert_eq!(report["sweep"]["reason"], "investigating a leak");
    common::assert_valid(&report);
    assert_eq!(
        site.store.get("run-overdue").await.unwrap().unwrap().status,
        RunStatus::Running,
        "a paused sweep expired the run"
    );
    assert!(site.sandbox_exists(&sandbox).await);

    let (code, stdout, stderr) = pause(&["resume", "--yes"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("resumed (paused by"), "{stdout}");
    let (code, stdout, stderr) = sweep();
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["sweep"]["state"], "swept", "{report:#}");
    assert_eq!(report["outcomes"]["expired"], 1, "{report:#}");

    let actions: Vec<String> = audit_trail(&site)
        .await
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(actions, ["pause", "resume"]);
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_retry_destroys_a_leaked_sandbox_now_whatever_its_backoff_and_resolves_the_entry() {
    let site = Site::new();
    let sandbox = leaked_run(&site).await;
    let (code, stdout, stderr) = ledger(&site, "retry", &["--json"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["retry"]["result"], "settled", "{out:#}");
    assert!(
        !site.sandbox_exists(&sandbox).await,
        "the leak was destroyed"
    );
    assert!(site.store.get_intent("run-leaked").await.unwrap().is_none());
    assert_eq!(audit_trail(&site).await[0]["action"], "ledger-retry");
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_forget_refuses_while_the_provider_has_the_sandbox_and_forgets_it_once_gone() {
    let site = Site::new();
    let sandbox = leaked_run(&site).await;
    let forget = || ledger(&site, "forget", &[]);

    let (code, stdout, stderr) = forget();
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stderr.contains("still exists"), "{stderr}");
    assert!(site.store.get_intent("run-leaked").await.unwrap().is_some());
    assert!(site.sandbox_exists(&sandbox).await, "forget never destroys");

    // The operator destroys it by hand; now the provider confirms it gone.
    site.provider.destroy(sandbox.id()).await.unwrap();
    let (code, stdout, stderr) = forget();
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("forgotten"), "{stdout}");
    assert!(site.store.get_intent("run-leaked").await.unwrap().is_none());
    let key = "local:thread-run-leaked";
    assert!(
        reaper_core::SandboxInstanceStore::get(&site.store, key)
            .await
            .unwrap()
            .is_none(),
        "the instance record naming the gone sandbox went too"
    );
    let trail = audit_trail(&site).await;
    let results: Vec<&str> = trail
        .iter()
        .map(|e| e["result"].as_str().unwrap())
        .collect();
    assert!(results[0].starts_with("refused"), "{results:?}");
    assert!(results[1].starts_with("forgotten"), "{results:?}");
    site.teardown().await;
}

/// What the prompt ends with; the typed answer is sent only once it is on the screen.
const PROMPT_END: &str = "? [y/N] ";

/// A hang guard only: every wait below is for the prompt or for the program's exit.
const GUARD: Duration = Duration::from_secs(300);

/// Runs `cmd` with stdin, stdout and stderr on a real pseudo-terminal, types `answer` once
/// the prompt is drawn, and returns the exit code and everything the terminal showed.
async fn answer_on_a_terminal(mut cmd: Command, answer: &'static [u8]) -> (i32, String) {
    let done = tokio::task::spawn_blocking(move || {
        let nix::pty::OpenptyResult { master, slave } =
            nix::pty::openpty(None, None).expect("openpty");
        let mut master = std::fs::File::from(master);
        cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let mut child = cmd.spawn().expect("reaper runs");
        // Only the child may hold the terminal open: its exit then ends our reads (EIO).
        drop(cmd);
        let mut screen = Vec::new();
        let mut buf = [0u8; 4096];
        let mut answered = false;
        loop {
            match master.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => screen.extend_from_slice(&buf[..n]),
                // Linux answers EIO once the program exited and closed the terminal.
                Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => break,
                Err(e) => panic!("reading the terminal: {e}"),
            }
            if !answered && String::from_utf8_lossy(&screen).contains(PROMPT_END) {
                master.write_all(answer).expect("typing the answer");
                answered = true;
            }
        }
        let code = child.wait().unwrap().code().expect("exited with a code");
        let screen = String::from_utf8_lossy(&screen).into_owned();
        assert!(answered, "the prompt never appeared: {screen:?}");
        (code, screen)
    });
    tokio::time::timeout(GUARD, done)
        .await
        .expect("the prompt or the program hung")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answering_y_at_the_terminal_prompt_performs_the_action_and_audits_it() {
    let site = Site::new();
    let mut cmd = common::reaper();
    cmd.args(["pause", "--reason", "typed at the prompt", "--db"])
        .arg(&site.db);
    let (code, screen) = answer_on_a_terminal(cmd, b"y\n").await;
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("reaper: pause sweeping (every handler on this database stops sweeping until reaper resume)? [y/N] "),
        "{screen:?}"
    );
    assert!(screen.contains("paused: sweeps do nothing"), "{screen:?}");
    let note = site.store.note("reaper:pause").await.unwrap().unwrap();
    assert!(note.contains("typed at the prompt"), "{note}");
    let trail = audit_trail(&site).await;
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0]["action"], "pause");
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answering_n_enter_or_ctrl_d_at_the_terminal_prompt_does_nothing_and_exits_1() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-busy", Some(TICKING), false, MINUTE)
        .await;
    // `n`, a bare Enter (the default is No), and Ctrl-D (the terminal's end of input).
    for answer in [&b"n\n"[..], b"\n", b"\x04"] {
        let mut cmd = site.reaper("expire");
        cmd.arg("run-busy");
        let (code, screen) = answer_on_a_terminal(cmd, answer).await;
        assert_eq!(code, 1, "{answer:?}: {screen}");
        assert!(
            screen.contains("not confirmed: did not expire run run-busy now"),
            "{answer:?}: {screen:?}"
        );
    }
    let run_now = site.store.get("run-busy").await.unwrap().unwrap();
    assert_eq!(run_now.status, RunStatus::Running);
    assert!(site.sandbox_exists(&sandbox).await);
    assert!(
        audit_trail(&site).await.is_empty(),
        "an action not confirmed is no action"
    );
    site.teardown().await;
}
