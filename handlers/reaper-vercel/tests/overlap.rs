//! Vercel overlaps cron invocations and delivers some twice: two concurrent requests, one sweeps
//! and the other answers 200 saying a sweep is already running. The first sweep is held inside
//! its lease by a sandboxd stand-in that does not answer until the second request is done.

mod common;

use common::{send, DevFunction, Gate, World, PATH};
use reaper_core::RunStatus;

#[tokio::test]
async fn of_two_concurrent_cron_requests_one_sweeps_and_the_other_reports_it_already_running() {
    let world = World::new().await;
    let mut gate = Gate::start().await;
    let run_id = format!("run-{}", common::unique());
    world.detached_run(&run_id, "sbx-held").await;
    let env: Vec<(String, String)> = world
        .env(Some(&world.secret))
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "REAPER_SANDBOXD_URL" => (k, gate.url.clone()),
            _ => (k, v),
        })
        .collect();
    let function = DevFunction::start(&env, world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);

    let port = function.port;
    let first_bearer = bearer.clone();
    let first =
        tokio::spawn(async move { send(port, "GET", PATH, Some(&first_bearer), &[]).await });
    // The first sweep holds the lease once it is talking to the sandboxes.
    gate.entered().await;

    let second = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(second.status, 200, "{}", second.body);
    let second = second.json();
    assert_eq!(second["sweep"]["state"], "already-running");
    assert!(second["sweep"]["holder"]
        .as_str()
        .unwrap()
        .starts_with("vercel:"));
    assert_eq!(second["considered"], 0);

    gate.release();
    let first = first.await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json();
    assert_eq!(first["sweep"]["state"], "swept");
    assert_eq!(first["considered"], 1);
    assert_eq!(
        first["outcomes"]["unknown"], 1,
        "sandboxes that cannot be reached leave the run unknown: {first}"
    );
    assert_eq!(world.run(&run_id).await.status, RunStatus::Running);

    // The lease was released: the next tick sweeps again.
    let third = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(third.json()["sweep"]["state"], "swept");
}
