//! The function under an emulation of Vercel's production IPC bridge: it connects to
//! `VERCEL_IPC_PATH`, says `server-started` with its port, and ends every request it was given
//! with an `end` message carrying that request's invocation and request ids.

mod common;

use common::{Bridge, World};
use reaper_core::RunStatus;

#[tokio::test]
async fn under_the_ipc_bridge_the_function_starts_sweeps_refuses_and_ends_every_request() {
    let world = World::new().await;
    let (run_id, _) = world.finished_detached_run().await;
    let mut bridge = Bridge::start(&world.env(Some(&world.secret)), world.tmp.path()).await;

    assert_eq!(
        bridge.started["type"], "server-started",
        "{}",
        bridge.started
    );
    assert_eq!(bridge.started["payload"]["httpPort"], bridge.port);

    let bearer = format!("Bearer {}", world.secret);
    let (answer, end) = bridge.invoke("inv-1", 1, "GET", Some(&bearer)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["outcomes"]["finalized"], 1);
    assert_eq!(end["payload"]["context"]["invocationId"], "inv-1");
    assert_eq!(end["payload"]["context"]["requestId"], 1);
    assert!(end["payload"]["error"].is_null(), "{end}");
    assert_eq!(world.run(&run_id).await.status, RunStatus::Completed);

    let (answer, end) = bridge.invoke("inv-2", 2, "GET", Some("Bearer wrong")).await;
    assert_eq!(answer.status, 401);
    assert!(answer.body.is_empty());
    assert_eq!(end["payload"]["context"]["invocationId"], "inv-2");
    assert_eq!(end["payload"]["context"]["requestId"], 2);

    let (answer, end) = bridge.invoke("inv-3", 3, "POST", Some(&bearer)).await;
    assert_eq!(answer.status, 405);
    assert_eq!(end["payload"]["context"]["requestId"], 3);

    let (answer, end) = bridge.invoke("inv-4", 4, "GET", Some(&bearer)).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.json()["considered"],
        0,
        "a duplicate delivery finds nothing"
    );
    assert_eq!(end["payload"]["context"]["invocationId"], "inv-4");

    assert!(
        bridge.terminate().await.success(),
        "SIGTERM drains and exits 0"
    );
    assert!(!bridge.log().contains(&world.secret));
}

#[tokio::test]
async fn under_the_ipc_bridge_an_unset_secret_still_ends_each_request_with_500() {
    let world = World::new().await;
    let mut bridge = Bridge::start(&world.env(None), world.tmp.path()).await;
    assert_eq!(bridge.started["type"], "server-started");
    let (answer, end) = bridge.invoke("inv-a", 7, "GET", Some("Bearer ")).await;
    assert_eq!(answer.status, 500);
    assert_eq!(end["payload"]["context"]["requestId"], 7);
    assert_eq!(
        bridge
            .log()
            .lines()
            .filter(|l| l.contains("CRON_SECRET is missing"))
            .count(),
        1
    );
}
