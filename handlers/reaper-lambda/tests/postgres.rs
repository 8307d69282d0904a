//! `REAPER_STORE=postgres` under cargo-lambda's runtime emulator: the function sweeps runs kept
//! in a real PostgreSQL (`REAPER_TEST_POSTGRES_URL`, from `shared/reaper-postgres/server/start.sh`;
//! required, never skipped) against sandboxes on a real `reaper-sandboxd`, and refuses bad
//! database settings at init with one clear line.

mod common;

use std::time::Duration;

use common::*;
use reaper_core::{RunStatus, RunStore};
use reaper_postgres::{PostgresOptions, PostgresStore};

/// The function's environment for PostgreSQL: no table, no DynamoDB endpoint.
fn postgres_env(w: &World, url: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = w.env(&[("REAPER_STORE", "postgres"), ("REAPER_DATABASE_URL", url)]);
    env.retain(|(k, _)| k != "REAPER_TABLE" && k != "AWS_ENDPOINT_URL_DYNAMODB");
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), v.to_string()));
    }
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaper_store_postgres_sweeps_runs_kept_in_postgresql_and_reports_its_statements() {
    let w = World::new().await;
    let url = reaper_e2e::postgres::fresh_database("lambda").await;
    // The application's side: it opens the same schema and records its runs there.
    let app = PostgresStore::open(PostgresOptions::new(&url))
        .await
        .unwrap();
    let (finished, sbx) = w.finished_run_in(&app, "pg-finished").await;
    let _f = w.function_with(&postgres_env(&w, &url, &[]));

    let report = w.emulator.sweep(&scheduled_event()).await;
    assert_eq!(report["sweep"]["state"], "swept", "{report}");
    assert_eq!(
        entry(&report, &finished)["outcome"],
        "finalized",
        "{report}"
    );
    assert!(
        report["postgres"]["statements"].as_u64().unwrap() > 3,
        "{report}"
    );
    assert_eq!(report["dynamodb"]["total"]["requests"], 0, "{report}");
    let run = RunStore::get(&app, &finished).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert!(!w.sandbox_exists(&sbx).await, "the sandbox was reclaimed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_database_without_tls_or_a_missing_url_fails_the_init_naming_the_variable() {
    let w = World::new().await;
    for (url, expected) in [
        (
            "postgres://reaper:pw-s3cr3t@db.example.com:5432/app?sslmode=disable",
            "refusing to connect to postgres://db.example.com:5432/app without TLS",
        ),
        (
            "",
            "REAPER_DATABASE_URL is not set, and REAPER_STORE is postgres",
        ),
    ] {
        let mut f = Function::start(&w.emulator, &postgres_env(&w, url, &[]), w.tmp.path());
        let status = f.wait_exit(Duration::from_secs(30)).await;
        assert_eq!(status.code(), Some(1), "{url}");
        let lines = f.log_lines();
        assert_eq!(lines.len(), 1, "{}", f.output());
        let error = lines[0]["fields"]["error"].as_str().unwrap();
        assert!(
            error.contains(expected),
            "{expected:?} missing from {error}"
        );
        assert!(!f.output().contains("s3cr3t"), "{}", f.output());
    }
}
