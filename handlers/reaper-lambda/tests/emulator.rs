//! The function under cargo-lambda's Lambda runtime emulator, sweeping real runs in DynamoDB
//! Local against sandboxes on a real `reaper-sandboxd`; and cfn-lint on the SAM template.
//!
//! Needs DynamoDB Local (`REAPER_DYNAMODB_ENDPOINT`; fails without it) and python3 (the tests
//! install cargo-lambda and cfn-lint from PyPI into `target/venv-lambda` when missing).

mod common;

use std::time::{Duration, Instant};

use common::*;
use reaper_core::{RunStatus, SandboxProvider};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_rule_event_and_a_scheduler_payload_sweep_real_runs_and_answer_with_the_report()
{
    let w = World::new().await;
    let (finished, finished_sbx) = w.finished_run("finished", 1_000).await;
    let (expired, expired_sbx) = w.finished_run("expired", 2 * 3_600_000).await;
    let (producing, producing_sbx) = w.producing_run("producing").await;
    let f = w.function(&[]);

    let report = w.emulator.sweep(&scheduled_event()).await;
    assert_eq!(report["sweep"]["state"], "swept", "{report}");
    assert_eq!(report["considered"], 3, "{report}");
    assert_eq!(
        report["probed"], 2,
        "the expired run is not probed: {report}"
    );
    assert_eq!(report["deferred"], 0);
    let outcomes = &report["outcomes"];
    assert_eq!(
        (
            &outcomes["finalized"],
            &outcomes["expired"],
            &outcomes["producing"]
        ),
        (&json!(1), &json!(1), &json!(1)),
        "{report}"
    );
    assert_eq!(outcomes["failed"], 0);
    assert_eq!(outcomes["reclaim-failed"], 0);
    assert_eq!(entry(&report, &finished)["outcome"], "finalized");
    assert_eq!(entry(&report, &finished)["exitCode"], 0);
    assert_eq!(entry(&report, &expired)["outcome"], "expired");
    assert_eq!(entry(&report, &producing)["outcome"], "producing");
    assert!(report["dynamodb"]["total"]["requests"].as_u64().unwrap() > 3);
    assert_eq!(report["plan"]["budgetMs"], 60_000);
    assert_eq!(report["plan"]["leaseTtlMs"], 60_000);

    // The store agrees: finalized and expired are terminal with their sandboxes destroyed;
    // the producing run and its sandbox are untouched.
    assert_eq!(w.run(&finished).await.status, RunStatus::Completed);
    assert!(w.run(&expired).await.status.is_terminal());
    let live = w.run(&producing).await;
    assert_eq!((live.status, live.driver_epoch), (RunStatus::Running, None));
    assert!(!w.sandbox_exists(&finished_sbx).await);
    assert!(!w.sandbox_exists(&expired_sbx).await);
    assert!(w.sandbox_exists(&producing_sbx).await);

    // EventBridge Scheduler sends whatever Input is configured, even `{}`.
    let report = w.emulator.sweep(&json!({})).await;
    assert_eq!(report["sweep"]["state"], "swept", "{report}");
    assert_eq!(
        report["considered"], 1,
        "only the producing run is left: {report}"
    );
    assert_eq!(entry(&report, &producing)["outcome"], "producing");
    assert_eq!(w.run(&producing).await.status, RunStatus::Running);

    // Logs are JSON lines; each sweep emitted one EMF document with its counts.
    let logs = f.log_lines();
    assert!(logs
        .iter()
        .any(|l| l["fields"]["message"] == "sweep starting"
            && l["fields"]["trigger"]
                .as_str()
                .unwrap()
                .contains("scheduled-rule")));
    let metrics = f.metrics();
    assert_eq!(metrics.len(), 2, "{}", f.output());
    assert_eq!(
        (
            &metrics[0]["finalized"],
            &metrics[0]["expired"],
            &metrics[0]["producing"]
        ),
        (&json!(1), &json!(1), &json!(1))
    );
    assert_eq!(metrics[0]["FunctionName"], "reaper-lambda");
    assert_eq!(metrics[1]["considered"], 1);
    assert!(
        !f.output().contains(&w.sandboxd.token),
        "the token was logged"
    );

    w.provider.destroy(&producing_sbx).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_deleted_under_the_invocation_is_reported_as_damage_and_no_run_is_finished_nor_sandbox_destroyed(
) {
    let w = World::new().await;
    let (first, first_sbx) = w.finished_run("first", 1_000).await;
    let (second, second_sbx) = w.finished_run("second", 2 * 3_600_000).await;
    // The table goes away once the sweep has listed both runs: when it first asks sandboxd.
    let (client, table) = (w.store.client().clone(), w.table.clone());
    let (deleted_tx, deleted_rx) = tokio::sync::oneshot::channel();
    let relay = reaper_e2e::sandboxd::relay_after_hook(w.sandboxd.addr.clone(), async move {
        client
            .delete_table()
            .table_name(table)
            .send()
            .await
            .unwrap();
        let _ = deleted_tx.send(());
    })
    .await;
    let f = w.function(&[("REAPER_SANDBOXD_URL", relay.as_str())]);

    // The contract: the invocation succeeds and its report names the damage.
    let report = w.emulator.sweep(&scheduled_event()).await;
    deleted_rx
        .await
        .expect("the sweep never asked sandboxd, so the table was never deleted");
    assert_eq!(report["sweep"]["state"], "swept", "{report}");
    assert_eq!(
        report["considered"], 2,
        "both runs were listed first: {report}"
    );
    let damage = report["damaged"].as_str().unwrap_or_default();
    assert!(
        damage.contains("ResourceNotFoundException") && damage.contains("damaged"),
        "the report names no damage: {report}"
    );
    // No run finished (neither the finished one nor the expired one), none recorded terminal.
    assert_eq!(report["outcomes"]["finalized"], 0, "{report}");
    assert_eq!(report["outcomes"]["expired"], 0, "{report}");
    for run in report["runs"].as_array().unwrap() {
        assert!(run.get("status").is_none(), "recorded terminal: {run}");
        assert!(run.get("sandbox").is_none(), "reclaimed: {run}");
    }
    // Both sandboxes live on (asked of sandboxd itself, not through the relay).
    assert!(
        w.sandbox_exists(&first_sbx).await,
        "{first}'s sandbox was destroyed"
    );
    assert!(
        w.sandbox_exists(&second_sbx).await,
        "{second}'s sandbox was destroyed"
    );

    // The error-level summary a log alarm matches, and the failed-sweep metric.
    let logs = f.log_lines();
    assert!(
        logs.iter().any(|l| l["level"] == "ERROR"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("sweep summary: the database is damaged"))),
        "{}",
        f.output()
    );
    let metrics = f.metrics();
    assert_eq!(metrics.len(), 1, "{}", f.output());
    assert_eq!(
        (
            &metrics[0][reaper_lambda::emf::SWEEP_FAILED],
            &metrics[0][reaper_lambda::emf::SWEPT],
            &metrics[0]["finalized"]
        ),
        (&json!(1), &json!(0), &json!(0)),
        "{}",
        metrics[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_overlapping_invocations_one_sweeps_and_the_other_reports_the_lease_held() {
    let w = World::new().await;
    let (finished, _) = w.finished_run("finished", 1_000).await;
    // The quiet window before the drive keeps the first sweep busy for seconds.
    let extra = [("REAPER_QUIET_WINDOW", "3s"), ("REAPER_BUDGET", "120s")];
    let _a = w.function(&extra);
    let _b = w.function(&extra);

    let first = {
        let emulator = &w.emulator;
        async move { emulator.sweep(&json!({})).await }
    };
    let second = async {
        let held = eventually(Duration::from_secs(30), || w.sweep_lease_held()).await;
        assert!(held, "the first invocation never took the sweep lease");
        w.emulator.sweep(&json!({})).await
    };
    let (first, second) = tokio::join!(first, second);

    assert_eq!(first["sweep"]["state"], "swept", "{first}");
    assert_eq!(entry(&first, &finished)["outcome"], "finalized");
    assert_eq!(second["sweep"]["state"], "already-running", "{second}");
    assert_eq!(second["considered"], 0);
    assert!(second["sweep"]["holder"]
        .as_str()
        .unwrap()
        .starts_with("lambda:reaper-lambda:"));
    assert!(second["durationMs"].as_i64().unwrap() < 3_000);
    assert_eq!(w.run(&finished).await.status, RunStatus::Completed);
    assert!(
        !w.sweep_lease_held().await,
        "the sweep lease was not released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_fits_no_run_fails_the_init_with_one_line_naming_the_values_to_change() {
    let w = World::new().await;
    let (run, sbx) = w.finished_run("waiting", 1_000).await;
    // 30 s minus the default 15 s margin leaves 15 s; one run may take 10 s (probe) + 7 × 50 ms
    // (quiet wait) + 10 s (drive) + 10 s (reclaim) + 2 s (store requests).
    // Every tick would defer every run: refused before any event is taken.
    let mut f = w.function(&[("REAPER_BUDGET", "30s"), ("REAPER_DEADLINE_MARGIN", "")]);

    let status = f.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(1));
    let lines = f.log_lines();
    assert_eq!(lines.len(), 1, "{}", f.output());
    assert_eq!(lines[0]["level"], "ERROR");
    let error = lines[0]["fields"]["error"].as_str().unwrap();
    for part in [
        "no run can ever start",
        "budget of 30s (REAPER_BUDGET",
        "leaves 15s, less than the 32.350s one run may take",
        "probe 10s + quiet wait 7 × 0.050s + drive 10s + reclaim 10s + store requests 2s",
        "Raise the budget to at least 48s",
        "lower REAPER_RUN_BUDGET, REAPER_STEP_TIMEOUT, REAPER_QUIET_WINDOW or REAPER_DEADLINE_MARGIN",
    ] {
        assert!(error.contains(part), "{part:?} missing from {error}");
    }
    let r = w.run(&run).await;
    assert_eq!((r.status, r.driver_epoch), (RunStatus::Running, None));
    assert!(w.sandbox_exists(&sbx).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_bad_settings_fail_the_init_with_one_clear_log_line_and_no_restart() {
    let w = World::new().await;
    let mut env = w.env(&[
        ("REAPER_SANDBOXD_TOKEN", "sekrit value"),
        ("REAPER_MAX_RUNS", "0"),
    ]);
    env.retain(|(k, _)| k != "REAPER_TABLE");
    let mut f = Function::start(&w.emulator, &env, w.tmp.path());

    let status = f.wait_exit(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(1));
    let lines = f.log_lines();
    assert_eq!(lines.len(), 1, "{}", f.output());
    let line = &lines[0];
    assert_eq!(line["level"], "ERROR");
    let error = line["fields"]["error"].as_str().unwrap();
    for name in [
        "REAPER_TABLE is not set",
        "REAPER_SANDBOXD_TOKEN contains a space",
        "REAPER_MAX_RUNS=\"0\" is out of range",
    ] {
        assert!(error.contains(name), "{name:?} missing from {error}");
    }
    let everything = format!(
        "{}{}",
        f.output(),
        std::fs::read_to_string(&f.stderr).unwrap()
    );
    assert!(
        !everything.contains("sekrit"),
        "the token leaked: {everything}"
    );
    assert!(!everything.contains("panicked"), "{everything}");
}

#[test]
fn the_sam_template_is_clean_under_cfn_lint() {
    let template = workspace_root().join("infra/aws/template.yaml");
    let output = std::process::Command::new(tools().join("cfn-lint"))
        .arg(&template)
        .output()
        .expect("run cfn-lint");
    assert!(
        output.status.success(),
        "cfn-lint found problems:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The deployable artifact: `cargo lambda build --release --output-format zip` (x86_64; arm64
/// cannot be built on these machines), then its `bootstrap` under the emulator. Slow (a release
/// build of the AWS SDK): run with `cargo test -p reaper-lambda -- --ignored`. Prints the
/// figures it measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow release build (minutes): run with -- --ignored"]
async fn the_release_bootstrap_zip_builds_and_sweeps_under_the_emulator() {
    let w = World::new().await;
    let root = workspace_root();
    let started = Instant::now();
    let built = std::process::Command::new(tools().join("cargo-lambda"))
        .args([
            "lambda",
            "build",
            "--release",
            "--bin",
            "reaper-lambda",
            "--output-format",
            "zip",
        ])
        .current_dir(&root)
        .env(
            "PATH",
            format!(
                "{}:{}",
                tools().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .status()
        .expect("run cargo lambda build");
    assert!(built.success(), "cargo lambda build failed");
    let build_time = started.elapsed();
    let zip = root.join("target/lambda/reaper-lambda/bootstrap.zip");
    let zip_bytes = std::fs::metadata(&zip).expect("the zip exists").len();
    let unpacked = w.tmp.path().join("bootstrap-dir");
    let ok = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&zip)
        .arg(&unpacked)
        .status()
        .unwrap()
        .success();
    assert!(ok, "unzip failed");
    let bootstrap = unpacked.join("bootstrap");
    let bootstrap_bytes = std::fs::metadata(&bootstrap).unwrap().len();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bootstrap, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (finished, _) = w.finished_run("finished", 1_000).await;

    // Cold start: the invocation is queued before the process exists.
    let invoke = {
        let emulator = &w.emulator;
        async move {
            let t = Instant::now();
            (emulator.sweep(&scheduled_event()).await, t)
        }
    };
    let spawn = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t = Instant::now();
        let f = Function::start_bin(&bootstrap, &w.emulator, &w.env(&[]), w.tmp.path());
        (f, t)
    };
    let (((report, _), (_f, spawned)), answered) = (tokio::join!(invoke, spawn), Instant::now());
    assert_eq!(
        entry(&report, &finished)["outcome"],
        "finalized",
        "{report}"
    );
    let first = answered - spawned;
    let sweep_ms = report["durationMs"].as_u64().unwrap();
    let t = Instant::now();
    let warm = w.emulator.sweep(&json!({})).await;
    let warm_time = t.elapsed();
    assert_eq!(warm["sweep"]["state"], "swept");
    eprintln!(
        "release build {:.0?}; bootstrap.zip {} bytes, bootstrap {} bytes; spawn to first answer \
         {:.0?} (of which the sweep {} ms, so init + runtime ≈ {} ms); warm empty sweep {:.0?}",
        build_time,
        zip_bytes,
        bootstrap_bytes,
        first,
        sweep_ms,
        (first.as_millis() as u64).saturating_sub(sweep_ms),
        warm_time
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_recorded_in_the_table_makes_the_function_answer_paused_and_touch_nothing() {
    let w = World::new().await;
    let (expired, expired_sbx) = w.finished_run("expired", 2 * 3_600_000).await;
    let mark = reaper_core::pause::PauseMark {
        paused: true,
        by: "alice@ops-1".into(),
        at: reaper_e2e::util::now_ms(),
        reason: Some("investigating a leak".into()),
    };
    reaper_core::pause::record_pause(&w.store, &mark)
        .await
        .unwrap();
    let _f = w.function(&[]);

    let report = w.emulator.sweep(&scheduled_event()).await;

    assert_eq!(report["sweep"]["state"], "paused", "{report}");
    assert_eq!(report["sweep"]["by"], "alice@ops-1", "{report}");
    assert_eq!(report["considered"], 0, "{report}");
    let run = w.run(&expired).await;
    assert_eq!((run.status, run.driver_epoch), (RunStatus::Running, None));
    assert!(w.sandbox_exists(&expired_sbx).await);
}
