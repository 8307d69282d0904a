//! The harness itself, against the real things it drives: a `reaper-sandboxd` child process
//! and DynamoDB Local (required: a missing endpoint fails with instructions).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reaper_core::{RunStatus, SandboxHandle, SandboxInstanceStore, SandboxProvider};
use reaper_e2e::dynamo::{fresh_store, read_run, seed_detached_run, DetachedRun};
use reaper_e2e::sandbox::{file_exists, sh};
use reaper_e2e::sandboxd::{run_agent, sandbox, Sandboxd, THREE_DELTAS};
use reaper_e2e::util::{eventually, now_ms, process_dead, random_token, unique};
use reaper_e2e::world::World;

#[tokio::test]
async fn eventually_returns_true_on_the_poll_where_the_condition_first_holds() {
    let polls = AtomicUsize::new(0);
    let held = eventually(Duration::from_secs(10), || async {
        polls.fetch_add(1, Ordering::SeqCst) + 1 == 3
    })
    .await;
    assert!(held);
    assert_eq!(polls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn eventually_gives_up_with_false_once_its_bound_passes() {
    let started = Instant::now();
    let held = eventually(Duration::from_millis(100), || async { false }).await;
    assert!(!held);
    assert!(started.elapsed() >= Duration::from_millis(100));
}

#[test]
fn labels_and_tokens_are_fresh_hex_each_time() {
    let (a, b) = (unique(), unique());
    assert_ne!(a, b);
    assert_eq!(a.len(), 16);
    assert!(a
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    let token = random_token();
    assert!(token.starts_with("tok-") && token.len() == 36, "{token}");
}

#[test]
fn process_dead_tells_a_live_child_from_a_reaped_one() {
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    assert!(!process_dead(child.id()));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(process_dead(child.id()));
}

#[tokio::test]
async fn a_started_sandboxd_runs_agents_to_their_exit_code_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let mut daemon = Sandboxd::start(tmp.path()).await;
    assert_eq!(daemon.url, format!("http://{}", daemon.addr));
    let journals = tmp.path().join("journals");
    let sbx = sandbox(&daemon.provider(), &journals).await;
    assert!(daemon.root.join(sbx.id()).is_dir());

    assert_eq!(run_agent(&sbx, &journals, "r-three", THREE_DELTAS).await, 0);
    assert_eq!(run_agent(&sbx, &journals, "r-fails", "exit 3").await, 3);
    assert_eq!(sh(&sbx, "echo hi").await, "hi\n");
    let marker = journals.join("marker");
    assert!(!file_exists(&sbx, marker.to_str().unwrap()).await);
    std::fs::write(&marker, "").unwrap();
    assert!(file_exists(&sbx, marker.to_str().unwrap()).await);

    let status = daemon.terminate().await;
    assert!(status.success(), "{status:?}");
    assert!(
        !daemon.log().contains(&daemon.token),
        "the token is in the log"
    );
}

#[tokio::test]
async fn a_seeded_detached_run_reads_back_running_detached_and_tied_to_its_sandbox() {
    let store = fresh_store("reaper-e2e").await;
    assert!(store.table_name().starts_with("reaper-e2e-"));
    let before = now_ms();
    let run = DetachedRun {
        run_id: "run-seeded",
        provider: "http",
        sandbox_id: "sbx-1",
        detached_ago_ms: 60_000,
    };
    seed_detached_run(&store, run).await;

    let record = read_run(&store, "run-seeded").await;
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.thread_id, "thread-run-seeded");
    assert_eq!(record.sandbox_key.as_deref(), Some("key-run-seeded"));
    let detached = record.detached_since.expect("detached");
    assert!(detached >= before - 60_000 && detached <= now_ms() - 60_000);
    assert_eq!(record.started_at, detached - 5_000);

    let instance = SandboxInstanceStore::get(&store, "key-run-seeded")
        .await
        .unwrap()
        .expect("the sandbox instance is recorded");
    assert_eq!(instance.provider, "http");
    assert_eq!(instance.provider_sandbox_id, "sbx-1");
    assert_eq!(instance.latest_run_id.as_deref(), Some("run-seeded"));
}

#[tokio::test]
async fn a_world_finished_run_is_recorded_running_and_detached_in_its_live_sandbox() {
    let world = World::new("reaper-e2e").await;
    let (run_id, sandbox_id) = world.finished_run("done", 1_000).await;
    assert!(run_id.starts_with("done-"));
    let record = world.run(&run_id).await;
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.sandbox_key, Some(format!("key-{run_id}")));
    assert!(world.provider.status(&sandbox_id).await.unwrap().is_some());
    let instance = SandboxInstanceStore::get(&world.store, &format!("key-{run_id}"))
        .await
        .unwrap()
        .expect("the sandbox instance is recorded");
    assert_eq!(instance.provider_sandbox_id, sandbox_id);
    assert_eq!(instance.provider, world.provider.name());
}
