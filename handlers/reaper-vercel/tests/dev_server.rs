//! The built function started exactly as `vercel dev` starts it (`VERCEL_DEV=1`,
//! `VERCEL_DEV_PORT`, ready at `Dev server listening`), called over real HTTP with cron-shaped
//! requests; sweeping real runs in DynamoDB Local through a real `reaper-sandboxd`.

mod common;

use common::{run_to_exit, send, unique, DevFunction, World, PATH};
use reaper_core::{RunStatus, SandboxInstanceStore};

#[tokio::test]
async fn the_right_secret_sweeps_and_finalizes_a_finished_run_and_reclaims_its_sandbox() {
    let world = World::new().await;
    let (run_id, sandbox_id) = world.finished_detached_run().await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;

    let bearer = format!("Bearer {}", world.secret);
    let answer = send(function.port, "GET", PATH, Some(&bearer), &[]).await;

    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.headers["content-type"], "application/json");
    assert_eq!(answer.headers["cache-control"], "no-store");
    let report = answer.json();
    assert_eq!(report["sweep"]["state"], "swept");
    assert_eq!(report["considered"], 1);
    assert_eq!(report["probed"], 1);
    assert_eq!(report["deferred"], 0);
    assert_eq!(report["outcomes"]["finalized"], 1);
    assert_eq!(report["runs"][0]["runId"], run_id.as_str());
    assert_eq!(report["runs"][0]["exitCode"], 0);
    assert_eq!(
        report["plan"]["budgetMs"], 300_000,
        "vercel.json's maxDuration"
    );
    assert!(report["dynamodb"]["total"]["requests"].as_u64().unwrap() > 0);

    let record = world.run(&run_id).await;
    assert_eq!(record.status, RunStatus::Completed);
    assert!(record.finished_at.is_some());
    assert!(
        world.provider.status(&sandbox_id).await.unwrap().is_none(),
        "the finished run's sandbox was destroyed"
    );
    assert!(world
        .store
        .get(&format!("key-{run_id}"))
        .await
        .unwrap()
        .is_none());

    // Vercel may deliver the same cron event again: the duplicate finds nothing left to do.
    let again = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["sweep"]["state"], "swept");
    assert_eq!(again.json()["considered"], 0);
    assert_eq!(world.run(&run_id).await.status, RunStatus::Completed);
}

#[tokio::test]
async fn missing_wrong_near_miss_recased_and_padded_secrets_are_401_with_an_empty_body() {
    let world = World::new().await;
    let (run_id, _) = world.finished_detached_run().await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;
    let s = &world.secret;
    let cases: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        ("wrong", Some(format!("Bearer {}", unique()))),
        ("near miss", Some(format!("Bearer {}", &s[..s.len() - 1]))),
        ("one more char", Some(format!("Bearer {s}0"))),
        (
            "recased secret",
            Some(format!("Bearer {}", s.to_uppercase())),
        ),
        ("recased scheme", Some(format!("bearer {s}"))),
        ("no scheme", Some(s.clone())),
        ("padded inside", Some(format!("Bearer  {s}"))),
        ("padded with a tab", Some(format!("Bearer\t{s}"))),
        ("padded with a suffix", Some(format!("Bearer {s} x"))),
        ("empty bearer", Some("Bearer ".into())),
    ];
    for (name, authorization) in &cases {
        let answer = send(function.port, "GET", PATH, authorization.as_deref(), &[]).await;
        assert_eq!(answer.status, 401, "{name}: {}", answer.body);
        assert!(answer.body.is_empty(), "{name}: {}", answer.body);
    }
    assert_eq!(
        world.run(&run_id).await.status,
        RunStatus::Running,
        "no refused request swept"
    );
    let log = function.log();
    assert!(!log.contains(s.as_str()), "the secret reached the log");
    assert_eq!(
        log.matches("refused a request without the right bearer secret")
            .count(),
        cases.len()
    );
}

#[tokio::test]
async fn post_and_other_methods_are_405_even_with_the_right_secret_and_nothing_is_swept() {
    let world = World::new().await;
    let (run_id, _) = world.finished_detached_run().await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let answer = send(function.port, method, PATH, Some(&bearer), &[]).await;
        assert_eq!(answer.status, 405, "{method}");
        assert_eq!(answer.headers["allow"], "GET, HEAD", "{method}");
        assert!(answer.body.is_empty());
    }
    let other = send(function.port, "GET", "/api/other", Some(&bearer), &[]).await;
    assert_eq!(other.status, 404);
    assert_eq!(world.run(&run_id).await.status, RunStatus::Running);
}

#[tokio::test]
async fn the_runtimes_health_check_answers_without_a_secret() {
    let world = World::new().await;
    let function = DevFunction::start(&world.env(Some(&world.secret)), world.tmp.path()).await;
    let ping = send(function.port, "GET", "/_vercel/ping", None, &[]).await;
    assert_eq!(ping.status, 200);
}

#[tokio::test]
async fn an_unset_or_empty_secret_fails_closed_with_500_and_one_error_line_per_request() {
    let world = World::new().await;
    let (run_id, _) = world.finished_detached_run().await;
    for secret in [None, Some("")] {
        let mut function = DevFunction::start(&world.env(secret), world.tmp.path()).await;
        for authorization in [None, Some("Bearer "), Some("Bearer anything")] {
            let answer = send(function.port, "GET", PATH, authorization, &[]).await;
            assert_eq!(answer.status, 500, "{secret:?} {authorization:?}");
            assert!(answer.body.is_empty());
        }
        assert!(
            function.terminate().await.success(),
            "SIGTERM drains and exits 0"
        );
        let log = function.log();
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("\"level\":\"ERROR\""))
            .collect();
        assert_eq!(errors.len(), 3, "{log}");
        for line in errors {
            assert!(line.contains("CRON_SECRET is missing"), "{line}");
        }
    }
    assert_eq!(world.run(&run_id).await.status, RunStatus::Running);
}

#[tokio::test]
async fn a_secret_with_surrounding_whitespace_stops_the_function_at_start_up() {
    let world = World::new().await;
    let value = format!("padded-{}", unique());
    for padded in [
        format!("{value}\n"),
        format!(" {value}"),
        format!("{value}\t"),
    ] {
        let (status, output) = run_to_exit(&world.env(Some(&padded)), world.tmp.path()).await;
        assert_eq!(status.code(), Some(2), "{output}");
        assert!(
            output.contains("CRON_SECRET has whitespace before or after it"),
            "{output}"
        );
        assert!(!output.contains(&value), "the secret was echoed: {output}");
        assert!(!output.contains("Dev server listening"), "{output}");
    }
}

#[tokio::test]
async fn a_missing_setting_stops_the_function_at_start_up_naming_it() {
    let world = World::new().await;
    let env: Vec<(String, String)> = world
        .env(Some(&world.secret))
        .into_iter()
        .filter(|(k, _)| k != "REAPER_TABLE")
        .collect();
    let (status, output) = run_to_exit(&env, world.tmp.path()).await;
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("REAPER_TABLE is not set"), "{output}");
    assert!(!output.contains(&world.sandboxd.token), "{output}");
}

#[tokio::test]
async fn a_budget_that_fits_no_run_stops_the_function_at_start_up_saying_what_to_change() {
    let world = World::new().await;
    let mut env = world.env(Some(&world.secret));
    env.push(("REAPER_BUDGET".into(), "30s".into()));
    let (status, output) = run_to_exit(&env, world.tmp.path()).await;
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(output.contains("no run can ever start"), "{output}");
    assert!(output.contains("budget of 30s (REAPER_BUDGET"), "{output}");
    assert!(output.contains("Raise the budget to at least"), "{output}");
    assert!(!output.contains("Dev server listening"), "{output}");
}

#[tokio::test]
async fn a_lease_store_that_cannot_be_used_is_503_with_the_report_saying_why() {
    let world = World::new().await;
    let env: Vec<(String, String)> = world
        .env(Some(&world.secret))
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "REAPER_TABLE" => (k, format!("no-such-table-{}", unique())),
            _ => (k, v),
        })
        .collect();
    let function = DevFunction::start(&env, world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);
    let answer = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    let report = answer.json();
    assert_eq!(report["sweep"]["state"], "lease-unavailable");
    assert!(report["sweep"]["error"]
        .as_str()
        .unwrap()
        .contains("non-existent table"));
    assert_eq!(report["considered"], 0);
}
