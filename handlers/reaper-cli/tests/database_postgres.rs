//! The CLI on PostgreSQL: `--db postgres://…` or `REAPER_DATABASE_URL` reach the same schema for
//! sweep and status, and a remote host without TLS is refused before anything is sent.

mod common;

use common::{now, reaper, run, HELLO, MINUTE};
use reaper_core::{
    NewRun, RunPatch, RunStatus, RunStore, SandboxInstanceRecord, SandboxInstanceStore,
    SandboxProvider,
};
use reaper_local::{CreateOptions, LocalSandboxProvider};

#[test]
fn a_remote_postgres_url_without_tls_is_refused_with_exit_3() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(reaper()
        .args(["sweep", "--detached-ttl", "1h", "--sandboxes"])
        .arg(tmp.path())
        .args([
            "--db",
            "postgres://app:hunter2@db.example.com/app?sslmode=disable",
        ]));
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("without TLS") && stderr.contains("sslmode=disable"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("hunter2"),
        "the password is never echoed: {stderr}"
    );
}

/// A database of its own on the test server (so the CLI's default schema `reaper` is the
/// calling test's), named with `prefix`: its URL, its name and a client on the server (to drop
/// it). `None` (the test then skips) without a server.
async fn fresh_database(prefix: &str) -> Option<(String, String, tokio_postgres::Client)> {
    let Ok(server) = std::env::var("REAPER_TEST_POSTGRES_URL") else {
        eprintln!("skipped: REAPER_TEST_POSTGRES_URL is not set");
        return None;
    };
    let name = format!(
        "{prefix}_{}_{}",
        std::process::id(),
        now().rem_euclid(1_000_000_000)
    );
    let (client, conn) = tokio_postgres::connect(&server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    match server.rsplit_once('/') {
        Some((base, _)) => Some((format!("{base}/{name}"), name, client)),
        None => panic!("unexpected test URL {server}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_and_status_reach_one_postgres_schema_by_db_or_reaper_database_url() {
    let Some((url, name, client)) = fresh_database("cli").await else {
        return;
    };
    let store = reaper_postgres::PostgresStore::connect(&url).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let provider = LocalSandboxProvider::with_root(tmp.path());
    let sandbox = provider.create(CreateOptions::default()).await.unwrap();
    store
        .create_or_resume(NewRun {
            run_id: "run-hello".into(),
            thread_id: "thread-1".into(),
            started_at: now() - 2 * MINUTE,
            status: None,
        })
        .await
        .unwrap();
    SandboxInstanceStore::upsert(
        &store,
        SandboxInstanceRecord {
            key: "local:thread-1".into(),
            provider: provider.name().into(),
            provider_sandbox_id: reaper_core::SandboxHandle::id(&sandbox).to_string(),
            latest_snapshot_id: None,
            thread_id: "thread-1".into(),
            latest_run_id: Some("run-hello".into()),
            updated_at: now(),
        },
    )
    .await
    .unwrap();
    sandbox
        .start_agent("run-hello", HELLO, None)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    store
        .update(
            "run-hello",
            RunPatch::detach(now() - MINUTE, Some("local:thread-1".into())),
        )
        .await
        .unwrap();

    let (code, stdout, stderr) = run(reaper()
        .args(["status", "--json"])
        .env("REAPER_DATABASE_URL", &url));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("run-hello"),
        "status lists the detached run: {stdout}"
    );

    let (code, stdout, stderr) = run(reaper()
        .args([
            "sweep",
            "--detached-ttl",
            "10m",
            "--quiet-window",
            "0ms",
            "--json",
        ])
        .args(["--db", &url])
        .arg("--sandboxes")
        .arg(tmp.path()));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("\"finalized\""), "{stdout}");
    let record = RunStore::get(&store, "run-hello").await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Completed);

    let (code, stdout, stderr) = run(reaper()
        .args(["sweep", "--detached-ttl", "10m", "--sandboxes"])
        .arg(tmp.path())
        .args(["--db", "reaper.db"])
        .env("REAPER_DATABASE_URL", &url));
    assert_eq!(
        code, 1,
        "--db and REAPER_DATABASE_URL together are a usage error: {stdout}{stderr}"
    );
    drop(store);
    let _ = client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_schema_script_run_by_an_application_opens_as_current_and_init_is_idempotent()
{
    let Some((url, _, _server)) = fresh_database("cli_ddl").await else {
        return;
    };
    let (code, sql, stderr) = run(reaper().args(["schema", "--sql", "--dialect", "postgres"]));
    assert_eq!(code, 0, "{stderr}");
    // The application's migration tool: its own table, then the reaper's script.
    let (app, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    app.batch_execute("CREATE TABLE public.users (id BIGINT PRIMARY KEY)")
        .await
        .unwrap();
    app.batch_execute(&sql).await.unwrap();

    let (code, stdout, stderr) = run(reaper().args(["init", "--json", "--database-url", &url]));
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["action"], "current", "{json}");
    let (code, _, stderr) = run(reaper().args(["status", "--database-url", &url]));
    assert_eq!(code, 0, "{stderr}");
}
