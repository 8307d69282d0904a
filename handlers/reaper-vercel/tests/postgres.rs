//! `REAPER_STORE=postgres` in the function started as `vercel dev` starts it: a cron sweeps runs
//! kept in a real PostgreSQL (`REAPER_TEST_POSTGRES_URL`, from
//! `shared/reaper-postgres/server/start.sh`; required, never skipped) with no AWS setting at all,
//! the status path reads the last-sweep mark from it, and a remote database without TLS stops the
//! function at start-up naming the variable.

mod common;

use common::{run_to_exit, send, unique, DevFunction, World, PATH};
use reaper_core::{RunStatus, RunStore, SandboxHandle, SandboxProvider};
use reaper_postgres::{PostgresOptions, PostgresStore};

/// A Vercel project's environment on PostgreSQL: no table and no AWS variable.
fn postgres_env(world: &World, url: &str) -> Vec<(String, String)> {
    let mut env = world.env(Some(&world.secret));
    env.retain(|(k, _)| k != "REAPER_TABLE" && !k.starts_with("AWS_"));
    env.push(("REAPER_STORE".into(), "postgres".into()));
    env.push(("REAPER_DATABASE_URL".into(), url.into()));
    env
}

#[tokio::test]
async fn a_cron_sweeps_runs_kept_in_postgresql_and_the_status_path_reads_its_mark() {
    let world = World::new().await;
    let url = reaper_e2e::postgres::fresh_database("vercel").await;
    let app = PostgresStore::open(PostgresOptions::new(&url))
        .await
        .unwrap();
    let sbx = world.sandbox().await;
    let run_id = format!("pg-run-{}", unique());
    let exit = reaper_e2e::sandboxd::run_agent(
        &sbx,
        &world.journals,
        &run_id,
        reaper_e2e::sandboxd::THREE_DELTAS,
    )
    .await;
    assert_eq!(exit, 0);
    reaper_e2e::dynamo::seed_detached_run(
        &app,
        reaper_e2e::dynamo::DetachedRun {
            run_id: &run_id,
            provider: world.provider.name(),
            sandbox_id: sbx.id(),
            detached_ago_ms: 1_000,
        },
    )
    .await;
    let function = DevFunction::start(&postgres_env(&world, &url), world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);

    let answer = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let report = answer.json();
    assert_eq!(report["outcomes"]["finalized"], 1, "{report}");
    assert!(
        report["postgres"]["statements"].as_u64().unwrap() > 3,
        "{report}"
    );
    let run = RunStore::get(&app, &run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert!(world.provider.status(sbx.id()).await.unwrap().is_none());

    let status = send(
        function.port,
        "GET",
        &format!("{PATH}?status"),
        Some(&bearer),
        &[],
    )
    .await;
    assert_eq!(status.status, 200, "{}", status.body);
    let status = status.json();
    assert_eq!(status["healthy"], true, "{status}");
    assert_eq!(status["lastSweep"]["outcomes"]["finalized"], 1, "{status}");
    assert!(
        app.read_last_sweep().await.unwrap().is_some(),
        "the mark is in PostgreSQL"
    );
}

#[tokio::test]
async fn a_remote_database_without_tls_stops_the_function_at_start_up_naming_the_variable() {
    let world = World::new().await;
    let env = postgres_env(
        &world,
        "postgres://reaper:pw-s3cr3t@ep-example.us-east-2.aws.neon.tech/neondb?sslmode=disable",
    );
    let (status, output) = run_to_exit(&env, world.tmp.path()).await;
    assert_eq!(status.code(), Some(2), "{output}");
    for part in [
        "REAPER_DATABASE_URL",
        "refusing to connect to postgres://ep-example.us-east-2.aws.neon.tech:5432/neondb without TLS",
        "Remove sslmode=disable",
    ] {
        assert!(output.contains(part), "{part:?} missing from {output}");
    }
    assert!(
        !output.contains("s3cr3t"),
        "the password was echoed: {output}"
    );
    assert!(!output.contains("Dev server listening"), "{output}");
}

#[tokio::test]
async fn the_last_sweep_mark_in_postgresql_keeps_the_latest_of_overlapping_sweeps() {
    use reaper_serverless::status::{read_last_sweep, record_last_sweep};
    use reaper_serverless::{LastSweep, ServerlessStore};
    let url = reaper_e2e::postgres::fresh_database("mark").await;
    let store = ServerlessStore::Postgres(
        PostgresStore::open(PostgresOptions::new(&url))
            .await
            .unwrap(),
    );
    let mark = |finished_at: i64, considered: usize| LastSweep {
        started_at: finished_at - 500,
        finished_at,
        considered,
        probed: considered,
        deferred: 0,
        outcomes: serde_json::json!({}),
        ledger: None,
        slo: serde_json::json!({}),
        listing_error: None,
        damaged: None,
        owner: "test".into(),
    };
    assert_eq!(read_last_sweep(&store).await.unwrap(), None);
    assert!(record_last_sweep(&store, &mark(2_000, 2)).await.unwrap());
    assert!(!record_last_sweep(&store, &mark(1_500, 1)).await.unwrap());
    assert_eq!(read_last_sweep(&store).await.unwrap(), Some(mark(2_000, 2)));
    assert!(record_last_sweep(&store, &mark(3_000, 3)).await.unwrap());
    assert_eq!(read_last_sweep(&store).await.unwrap(), Some(mark(3_000, 3)));
}
