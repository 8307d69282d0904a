//! The CLI serves every provider of the shared registry (`reaper_providers`), with the settings
//! names of the serverless handlers, and answers to the names the framework records.

mod common;

use common::{now, run, Site, HELLO, MINUTE};
use reaper_core::{SandboxInstanceRecord, SandboxInstanceStore};

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Every variable the HTTP providers read, so the test's own environment cannot leak in.
const PROVIDER_VARS: &[&str] = &[
    "REAPER_SANDBOXD_URL",
    "REAPER_SANDBOXD_TOKEN",
    "DAYTONA_API_KEY",
    "DAYTONA_API_URL",
    "E2B_API_KEY",
    "E2B_DOMAIN",
    "E2B_API_URL",
    "VERCEL_TOKEN",
    "VERCEL_OIDC_TOKEN",
    "VERCEL_TEAM_ID",
    "VERCEL_PROJECT_ID",
    "VERCEL_SANDBOX_API_URL",
];

#[test]
fn a_sweep_serves_sandboxd_daytona_e2b_and_vercel_from_the_serverless_settings() {
    let site = Site::new();
    let mut cmd = site.reaper("sweep");
    for var in PROVIDER_VARS {
        cmd.env_remove(var);
    }
    cmd.args([
        "--provider",
        "local,sandboxd,daytona,e2b,vercel",
        "--detached-ttl",
        "10m",
        "--json",
    ])
    // Nothing is sent: the database holds no run, so no provider is asked anything.
    .env("REAPER_SANDBOXD_URL", "http://127.0.0.1:9")
    .env("REAPER_SANDBOXD_TOKEN", "sandboxd-token-0123456789abcdef")
    .env("DAYTONA_API_KEY", "dtn_0123456789abcdef")
    .env("E2B_API_KEY", "e2b_0123456789abcdef")
    .env("VERCEL_TOKEN", "vcp_0123456789abcdef")
    .env("VERCEL_PROJECT_ID", "prj_0123");
    let (code, stdout, stderr) = run(&mut cmd);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(
        report["providers"],
        serde_json::json!(["local", "sandboxd", "daytona", "e2b", "vercel"])
    );
}

#[test]
fn a_listed_http_provider_without_its_settings_is_a_usage_error_naming_them() {
    let site = Site::new();
    for (provider, extra, expected) in [
        ("sandboxd", &[][..], "REAPER_SANDBOXD_URL"),
        ("daytona", &[][..], "DAYTONA_API_KEY"),
        ("e2b", &[][..], "E2B_API_KEY"),
        ("vercel", &[][..], "VERCEL_TOKEN"),
        (
            "vercel-sandbox",
            &[("VERCEL_TOKEN", "vcp_0123456789abcdef")][..],
            "VERCEL_PROJECT_ID",
        ),
    ] {
        let mut cmd = site.reaper("sweep");
        for var in PROVIDER_VARS {
            cmd.env_remove(var);
        }
        cmd.args(["--provider", provider, "--detached-ttl", "10m"]);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "{provider}: stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stderr.contains(expected), "{provider}: {stderr}");
        assert!(!stderr.contains("vcp_0123456789abcdef"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_record_names_local_process_is_finalized_by_the_local_provider() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-framework", Some(HELLO), true, MINUTE)
        .await;
    // The record as the framework's local provider names itself.
    let mut record = site
        .store
        .get("local:thread-run-framework")
        .await
        .unwrap()
        .unwrap();
    record.provider = "local-process".into();
    record.updated_at = now();
    SandboxInstanceStore::upsert(&site.store, SandboxInstanceRecord { ..record })
        .await
        .unwrap();

    let (code, stdout, stderr) = run(site.reaper("sweep").args([
        "--detached-ttl",
        "10m",
        "--quiet-window",
        "10ms",
        "--json",
    ]));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(report["outcomes"]["finalized"], 1, "{report}");
    assert!(
        !site.sandbox_exists(&sandbox).await,
        "its sandbox was reclaimed"
    );
}
