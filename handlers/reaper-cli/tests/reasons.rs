//! Every run of a real sweep says why it ended as it did, in the table's NOTE, the JSON report
//! (valid against the published schema) and the logs.

mod common;

use common::{assert_valid, now, run, Site, HELLO, MINUTE};
use reaper_core::{NewRun, RunPatch, RunStore, SandboxProvider};
use serde_json::Value;

/// A detached run the way a chat route writes it without a sandbox, or with a key whose instance
/// record was never written.
async fn bare_detached_run(site: &Site, run_id: &str, key: Option<&str>) {
    site.store
        .create_or_resume(NewRun {
            run_id: run_id.into(),
            thread_id: format!("thread-{run_id}"),
            started_at: now() - 2 * MINUTE,
            status: None,
        })
        .await
        .unwrap();
    site.store
        .update(
            run_id,
            RunPatch::detach(now() - MINUTE, key.map(str::to_string)),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_real_sweep_explains_every_run_in_its_table_json_and_logs() {
    let site = Site::new();
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let gone = site.detached_run("run-gone", None, false, MINUTE).await;
    site.provider.destroy(gone.id()).await.unwrap();
    site.detached_run("run-overdue", None, false, 90 * MINUTE)
        .await;
    bare_detached_run(&site, "run-nokey", None).await;
    bare_detached_run(&site, "run-norecord", Some("local:never-written")).await;

    // Text first: it leaves everything but the two finished runs for the JSON sweep.
    let (code, stdout, stderr) = run(site
        .reaper("sweep")
        .args([
            "--detached-ttl",
            "30m",
            "--quiet-window",
            "0ms",
            "--run-budget",
            "2s",
        ])
        .args(["--log", "reaper=info", "--log-format", "json"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let line = |run: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(run))
            .unwrap_or_else(|| panic!("no row for {run} in\n{stdout}"))
            .to_string()
    };
    assert!(line("run-done").contains("finalized/exited: the agent exited with code 0"));
    assert!(line("run-overdue").contains("expired/ttl: detached for longer than the TTL"));
    assert!(line("run-gone").contains("unknown/sandbox-gone"));
    assert!(line("run-nokey").contains("unknown/no-sandbox-key"));
    assert!(line("run-norecord").contains(
        "unknown/no-instance-record: no sandbox instance record for key local:never-written"
    ));
    // The logs carry the same code per run.
    let logged: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let logged_reason = |run: &str| {
        logged
            .iter()
            .find(|v| v["fields"]["run_id"] == run && v["fields"]["reason"].is_string())
            .map(|v| v["fields"]["reason"].as_str().unwrap().to_string())
    };
    assert_eq!(
        logged_reason("run-gone").as_deref(),
        Some("unknown/sandbox-gone"),
        "{stderr}"
    );
    assert_eq!(logged_reason("run-overdue").as_deref(), Some("expired/ttl"));

    let (code, stdout, stderr) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "30m", "--json"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_valid(&report);
    assert_eq!(report["schemaVersion"], 1);
    let codes: Vec<(String, String)> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["runId"].as_str().unwrap().to_string(),
                e["reason"]["code"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (run, code) in [
        ("run-gone", "unknown/sandbox-gone"),
        ("run-nokey", "unknown/no-sandbox-key"),
        ("run-norecord", "unknown/no-instance-record"),
    ] {
        assert!(
            codes.contains(&(run.to_string(), code.to_string())),
            "{run} is not {code}: {codes:?}"
        );
    }
    site.teardown().await;
}
