//! `GET /api/reap?status` on the built function started as `vercel dev` starts it, over real
//! HTTP, reading DynamoDB Local: the last sweep's mark (left by a real cron sweep), the reclaim
//! ledger and the detached runs; 200 when healthy, 503 when a sandbox leaked or a detached run
//! outlived the TTL + run budget + 2 schedule intervals; and the read writes nothing, sweeps
//! nothing and destroys nothing.

mod common;

use std::collections::BTreeMap;

use common::{send, unique, DevFunction, World, PATH};
use reaper_core::{Clock, ReclaimIntent, ReclaimLedger, RunRecord, RunStatus, SandboxHandle};
use reaper_dynamodb::layout::attr_to_json;
use reaper_vercel::app::SystemClock;

const MINUTE: i64 = 60_000;
/// The harness's `REAPER_DETACHED_TTL` (1h) + the default run budget (30 s) + 2 × the five
/// minutes of `vercel.json`'s schedule.
const STALE_DETACHED_MS: i64 = 60 * MINUTE + 30_000 + 10 * MINUTE;

fn status_path() -> String {
    format!("{PATH}?status")
}

async fn sandbox_exists(world: &World, id: &str) -> bool {
    world.provider.status(id).await.unwrap().is_some()
}

/// Every item of the world's table, in key order: what a read must leave exactly as it was.
async fn table(world: &World) -> Vec<String> {
    let scan = world
        .store
        .client()
        .scan()
        .table_name(&world.table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan the test table");
    assert!(
        scan.last_evaluated_key.is_none(),
        "the test table fits one page"
    );
    let mut items: Vec<String> = scan
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|item| {
            let fields: BTreeMap<String, String> = item
                .iter()
                .map(|(k, v)| (k.clone(), canonical(&attr_to_json(v).unwrap())))
                .collect();
            format!("{fields:?}")
        })
        .collect();
    items.sort();
    items
}

/// A JSON value as text with object keys in order, whatever the map type's iteration order.
fn canonical(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(map) => {
            let sorted: BTreeMap<_, _> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
            format!("{sorted:?}")
        }
        serde_json::Value::Array(list) => {
            format!("{:?}", list.iter().map(canonical).collect::<Vec<_>>())
        }
        other => other.to_string(),
    }
}

/// A sandbox with a run recorded as running in it, detached `ago_ms` ago (no agent: only the
/// records matter to the status).
async fn detached(world: &World, ago_ms: i64) -> (String, String) {
    let sandbox = world.sandbox().await;
    let run_id = format!("detached-{}", unique());
    // The shared world's seeding, with the age given (this crate's `World` fixes it at 1 s).
    reaper_e2e::world::World::detached_run(world, &run_id, sandbox.id(), ago_ms).await;
    (run_id, sandbox.id().to_string())
}

#[tokio::test]
async fn a_healthy_deployment_answers_200_with_the_last_sweep_the_ledger_and_the_detached_runs() {
    let world = World::new().await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);

    let before_any_sweep = send(function.port, "GET", &status_path(), Some(&bearer), &[]).await;
    assert_eq!(before_any_sweep.status, 200, "{}", before_any_sweep.body);
    assert_eq!(
        before_any_sweep.json()["lastSweep"],
        serde_json::Value::Null
    );

    let (finished, _) = world.finished_detached_run().await;
    let swept = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(swept.json()["outcomes"]["finalized"], 1, "{}", swept.body);
    let (waiting, sandbox) = detached(&world, 10 * MINUTE).await;

    let before = table(&world).await;
    let answer = send(function.port, "GET", &status_path(), Some(&bearer), &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "application/json");
    assert_eq!(answer.headers["cache-control"], "no-store");
    let status = answer.json();
    assert_eq!(status["healthy"], true, "{status}");
    assert_eq!(status["problems"], serde_json::json!([]));

    let last = &status["lastSweep"];
    assert_eq!(last["considered"], 1, "{status}");
    assert_eq!(last["outcomes"]["finalized"], 1);
    assert_eq!(last["outcomes"]["reclaim-failed"], 0);
    assert_eq!(last["ledger"]["leaked"], 0);
    assert_eq!(last["slo"]["backlog"], 1, "{status}");
    assert!(last["owner"].as_str().unwrap().starts_with("vercel:"));
    let age = status["lastSweepAgeMs"].as_i64().unwrap();
    assert!((0..MINUTE).contains(&age), "{status}");

    assert_eq!(status["ledger"]["pending"], 0);
    assert_eq!(status["ledger"]["leaked"], 0);
    let d = &status["detached"];
    assert_eq!(
        (&d["listed"], &d["pastTtl"], &d["more"]),
        (&1.into(), &0.into(), &false.into())
    );
    assert!(
        d["oldestDetachedMs"].as_i64().unwrap() >= 10 * MINUTE,
        "{status}"
    );
    assert_eq!(
        status["limits"]["scheduleIntervalMs"],
        5 * MINUTE,
        "vercel.json's */5"
    );
    assert_eq!(status["limits"]["budgetMs"], 300_000);
    assert_eq!(status["limits"]["detachedTtlMs"], 60 * MINUTE);
    assert_eq!(status["staleDetachedAfterMs"], STALE_DETACHED_MS);
    assert_eq!(status["staleSweepAfterMs"], 300_000 + 10 * MINUTE);

    let after = table(&world).await;
    let changed: Vec<_> = after.iter().filter(|i| !before.contains(i)).collect();
    let gone: Vec<_> = before.iter().filter(|i| !after.contains(i)).collect();
    assert!(
        changed.is_empty() && gone.is_empty(),
        "the status read changed the table: {changed:?} / {gone:?}"
    );
    assert_eq!(world.run(&finished).await.status, RunStatus::Completed);
    let run = world.run(&waiting).await;
    assert_eq!((run.status, run.driver_epoch), (RunStatus::Running, None));
    assert!(sandbox_exists(&world, &sandbox).await);
}

#[tokio::test]
async fn a_recorded_leak_is_503_and_reading_it_writes_nothing() {
    let world = World::new().await;
    let now = SystemClock.now_ms();
    let mut finished = RunRecord::new(format!("leaky-{}", unique()), "thread", now - 20 * MINUTE);
    finished.status = RunStatus::Completed;
    let mut intent = ReclaimIntent::new(&finished, now - 10 * MINUTE);
    intent.attempts = 2;
    intent.last_error = Some("sandboxd answered 502".into());
    assert!(world.store.record_intent(&intent).await.unwrap());
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;

    let before = table(&world).await;
    let bearer = format!("Bearer {}", world.secret);
    let answer = send(function.port, "GET", &status_path(), Some(&bearer), &[]).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    let status = answer.json();
    assert_eq!(status["healthy"], false);
    assert_eq!(status["ledger"]["leaked"], 1);
    assert_eq!(status["ledger"]["pending"], 1);
    assert_eq!(status["ledger"]["oldestFirstSeen"], now - 10 * MINUTE);
    let problems = status["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{status}");
    assert!(
        problems[0]
            .as_str()
            .unwrap()
            .starts_with("1 sandbox(es) of finished runs could not be destroyed"),
        "{status}"
    );
    assert_eq!(
        table(&world).await,
        before,
        "the status read changed the table"
    );
    let log = function.log();
    assert!(
        log.contains("status answered") && log.contains("\"healthy\":false"),
        "{log}"
    );
}

#[tokio::test]
async fn a_detached_run_older_than_ttl_run_budget_and_two_intervals_is_503_and_left_alone() {
    let world = World::new().await;
    let (forgotten, sandbox) = detached(&world, STALE_DETACHED_MS + MINUTE).await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;

    let before = table(&world).await;
    let bearer = format!("Bearer {}", world.secret);
    let answer = send(function.port, "GET", &status_path(), Some(&bearer), &[]).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    let status = answer.json();
    assert_eq!(status["detached"]["pastTtl"], 1, "{status}");
    assert!(status["detached"]["oldestDetachedMs"].as_i64().unwrap() > STALE_DETACHED_MS);
    let problems = status["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{status}");
    assert!(
        problems[0]
            .as_str()
            .unwrap()
            .contains("the oldest detached run has waited 1h 11m"),
        "{status}"
    );

    // Read only: the expired-looking run is neither claimed nor expired, its sandbox stays.
    assert_eq!(
        table(&world).await,
        before,
        "the status read changed the table"
    );
    let run = world.run(&forgotten).await;
    assert_eq!((run.status, run.driver_epoch), (RunStatus::Running, None));
    assert!(sandbox_exists(&world, &sandbox).await);
}

#[tokio::test]
async fn the_status_path_is_refused_without_the_secret_exactly_like_the_sweep() {
    let world = World::new().await;
    let (run, sandbox) = detached(&world, STALE_DETACHED_MS + MINUTE).await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;
    let before = table(&world).await;
    for authorization in [None, Some(format!("Bearer {}", unique()))] {
        let refused = send(
            function.port,
            "GET",
            &status_path(),
            authorization.as_deref(),
            &[],
        )
        .await;
        assert_eq!(refused.status, 401);
        assert!(refused.body.is_empty(), "{}", refused.body);
        assert_eq!(refused.headers["cache-control"], "no-store");
    }
    let bearer = format!("Bearer {}", world.secret);
    let post = send(function.port, "POST", &status_path(), Some(&bearer), &[]).await;
    assert_eq!(post.status, 405);

    let unset = DevFunction::start(&world.env(None), world.tmp.path()).await;
    let no_secret = send(unset.port, "GET", &status_path(), Some("Bearer "), &[]).await;
    assert_eq!(no_secret.status, 500);
    assert!(no_secret.body.is_empty());

    assert_eq!(table(&world).await, before);
    assert_eq!(world.run(&run).await.status, RunStatus::Running);
    assert!(sandbox_exists(&world, &sandbox).await);
}

fn mark(finished_at: i64, considered: usize) -> reaper_serverless::LastSweep {
    reaper_serverless::LastSweep {
        started_at: finished_at - 1_000,
        finished_at,
        considered,
        probed: 0,
        deferred: 0,
        outcomes: serde_json::json!({}),
        ledger: None,
        slo: serde_json::json!({"backlog": considered}),
        listing_error: None,
        damaged: None,
        owner: "test".into(),
    }
}

#[tokio::test]
async fn the_last_sweep_mark_keeps_the_latest_of_overlapping_sweeps() {
    use reaper_serverless::status::{read_last_sweep, record_last_sweep};
    let world = World::new().await;
    let store = reaper_serverless::ServerlessStore::DynamoDb(world.store.clone());
    assert_eq!(read_last_sweep(&store).await.unwrap(), None);
    assert!(record_last_sweep(&store, &mark(2_000, 2)).await.unwrap());
    // A sweep that started earlier but finished later in another process wins; one that
    // finished earlier, whatever order the writes land in, does not overwrite it.
    assert!(!record_last_sweep(&store, &mark(1_500, 1)).await.unwrap());
    assert_eq!(read_last_sweep(&store).await.unwrap(), Some(mark(2_000, 2)));
    assert!(record_last_sweep(&store, &mark(3_000, 3)).await.unwrap());
    assert_eq!(read_last_sweep(&store).await.unwrap(), Some(mark(3_000, 3)));
}

#[tokio::test]
async fn an_unreadable_mark_is_503_naming_it() {
    let world = World::new().await;
    world
        .store
        .client()
        .put_item()
        .table_name(&world.table)
        .item(
            "pk",
            reaper_dynamodb::layout::s(reaper_serverless::status::LAST_SWEEP_PK),
        )
        .item(
            "sk",
            reaper_dynamodb::layout::s(reaper_serverless::status::LAST_SWEEP_SK),
        )
        .item("summary", reaper_dynamodb::layout::s("{not json"))
        .send()
        .await
        .unwrap();
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);
    let answer = send(function.port, "GET", &status_path(), Some(&bearer), &[]).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    let status = answer.json();
    let problem = status["problems"][0].as_str().unwrap();
    assert!(
        problem.starts_with("cannot read the last sweep: corrupt record REAPER#last-sweep/SWEEP"),
        "{status}"
    );
    // The other figures are still there.
    assert_eq!(status["ledger"]["leaked"], 0);
    assert_eq!(status["detached"]["listed"], 0);
}

/// Replaces the world's table by one without the `by-thread` index: the database no longer has
/// the layout's shape, which the sweep meets in the reclaim's in-use check, after the listing
/// and the drive. (DynamoDB Local fails every later write after an UpdateTable deleting an
/// index, so the table is recreated instead.)
async fn a_table_without_the_thread_index(world: &World) {
    world.store.delete_table().await.unwrap();
    world
        .store
        .create_table_without(reaper_dynamodb::layout::THREAD_INDEX)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_sweep_that_met_damage_answers_500_logs_an_error_and_the_status_is_503_naming_it() {
    let world = World::new().await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);
    a_table_without_the_thread_index(&world).await;
    let (finished, sandbox) = world.finished_detached_run().await;

    let swept = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(swept.status, 500, "{}", swept.body);
    let damage = swept.json()["damaged"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        damage.contains("does not have the specified index"),
        "{}",
        swept.body
    );
    // The sandbox of the finished run is kept: the in-use check could not be made.
    assert!(sandbox_exists(&world, &sandbox).await);
    let log = function.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("sweep summary: the database is damaged")),
        "{log}"
    );

    let answer = send(function.port, "GET", &status_path(), Some(&bearer), &[]).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    let status = answer.json();
    assert_eq!(status["healthy"], false);
    assert!(
        status["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().contains("stopped at damage")),
        "{status}"
    );
    assert!(
        status["lastSweep"]["damaged"].as_str().is_some(),
        "{status}"
    );
    let _ = finished;
}

#[tokio::test]
async fn a_table_deleted_after_the_listing_answers_500_with_no_run_finished_and_no_sandbox_destroyed(
) {
    let world = World::new().await;
    let (first, first_sbx) = world.finished_detached_run().await;
    let (second, second_sbx) = world.finished_detached_run().await;
    // The table goes away once the sweep has listed both runs: when it first asks sandboxd.
    let (client, table) = (world.store.client().clone(), world.table.clone());
    let (deleted_tx, deleted_rx) = tokio::sync::oneshot::channel();
    let relay = reaper_e2e::sandboxd::relay_after_hook(world.sandboxd.addr.clone(), async move {
        client
            .delete_table()
            .table_name(table)
            .send()
            .await
            .unwrap();
        let _ = deleted_tx.send(());
    })
    .await;
    let mut env = world.env(Some(&world.secret));
    env.retain(|(k, _)| k != "REAPER_SANDBOXD_URL");
    env.push(("REAPER_SANDBOXD_URL".into(), relay));
    let function = DevFunction::start(&env, world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);

    let swept = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    deleted_rx
        .await
        .expect("the sweep never asked sandboxd, so the table was never deleted");
    assert_eq!(swept.status, 500, "{}", swept.body);
    let report = swept.json();
    assert_eq!(
        report["considered"], 2,
        "both runs were listed first: {report}"
    );
    let damage = report["damaged"].as_str().unwrap_or_default();
    assert!(
        damage.contains("ResourceNotFoundException"),
        "the report names no damage: {report}"
    );
    assert_eq!(report["outcomes"]["finalized"], 0, "{report}");
    for run in report["runs"].as_array().unwrap() {
        assert!(run.get("status").is_none(), "recorded terminal: {run}");
        assert!(run.get("sandbox").is_none(), "reclaimed: {run}");
    }
    assert!(
        sandbox_exists(&world, &first_sbx).await,
        "{first}'s sandbox was destroyed"
    );
    assert!(
        sandbox_exists(&world, &second_sbx).await,
        "{second}'s sandbox was destroyed"
    );
    let log = function.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("sweep summary: the database is damaged")),
        "{log}"
    );
}
