//! The function with `AWS_ROLE_ARN` and no AWS key, as a Vercel project with OIDC federation
//! runs it: each cron request carries `x-vercel-oidc-token`; the function assumes the role with
//! it at a fake STS on 127.0.0.1 (`AWS_ENDPOINT_URL_STS`; it checks the token and the role ARN)
//! and sweeps DynamoDB Local with the assumed credentials (DynamoDB Local accepts any).

mod common;
#[path = "../../../shared/reaper-serverless/tests/common/fake_sts.rs"]
mod fake_sts;

use common::{run_to_exit, send, DevFunction, World, PATH};
use fake_sts::FakeSts;
use reaper_core::RunStatus;

const ROLE: &str = "arn:aws:iam::123456789012:role/reaper-vercel";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.vercel-request-token-4e8a.sig";

/// The project's environment with the role instead of keys, STS pointed at the fake.
fn oidc_env(world: &World, sts: &FakeSts) -> Vec<(String, String)> {
    let mut env = world.env(Some(&world.secret));
    env.retain(|(k, _)| k != "AWS_ACCESS_KEY_ID" && k != "AWS_SECRET_ACCESS_KEY");
    env.push(("AWS_ROLE_ARN".into(), ROLE.into()));
    env.push(("AWS_ENDPOINT_URL_STS".into(), sts.endpoint.clone()));
    env
}

#[tokio::test]
async fn with_a_role_and_no_keys_the_sweep_runs_on_credentials_assumed_with_the_requests_token() {
    let world = World::new().await;
    let (run_id, _) = world.finished_detached_run().await;
    let sts = FakeSts::start(ROLE, &[TOKEN], "2099-01-01T00:00:00Z").await;
    let function = DevFunction::start(&oidc_env(&world, &sts), world.tmp.path()).await;
    assert!(
        sts.calls().is_empty(),
        "nothing is assumed before a request"
    );

    let bearer = format!("Bearer {}", world.secret);
    let token = [("x-vercel-oidc-token", TOKEN.to_string())];
    let answer = send(function.port, "GET", PATH, Some(&bearer), &token).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["outcomes"]["finalized"], 1, "{}", answer.body);
    assert_eq!(world.run(&run_id).await.status, RunStatus::Completed);
    assert_eq!(
        sts.calls(),
        [fake_sts::Call {
            role_arn: ROLE.into(),
            session_name: "reaper".into(),
            token: TOKEN.into(),
        }]
    );

    // The next tick reuses the cached credentials.
    let again = send(function.port, "GET", PATH, Some(&bearer), &token).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(sts.calls().len(), 1);

    let log = function.log();
    assert!(log.contains("web-identity"), "{log}");
    for secret in [
        TOKEN,
        fake_sts::SECRET_ACCESS_KEY,
        fake_sts::SESSION_TOKEN,
        world.secret.as_str(),
    ] {
        assert!(!log.contains(secret), "{secret} reached the log:\n{log}");
    }
}

#[tokio::test]
async fn without_a_token_the_lease_is_unavailable_and_the_answer_says_how_to_turn_oidc_on() {
    let world = World::new().await;
    let sts = FakeSts::start(ROLE, &[TOKEN], "2099-01-01T00:00:00Z").await;
    let function = DevFunction::start(&oidc_env(&world, &sts), world.tmp.path()).await;
    let bearer = format!("Bearer {}", world.secret);
    let answer = send(function.port, "GET", PATH, Some(&bearer), &[]).await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    let error = answer.json()["sweep"]["error"].to_string();
    assert!(
        error.contains("x-vercel-oidc-token") && error.contains("OIDC federation"),
        "{error}"
    );
    assert!(sts.calls().is_empty());
}

#[tokio::test]
async fn neither_a_role_nor_keys_stops_the_function_at_start_up_saying_what_to_set() {
    let world = World::new().await;
    let mut env = world.env(Some(&world.secret));
    env.retain(|(k, _)| k != "AWS_ACCESS_KEY_ID" && k != "AWS_SECRET_ACCESS_KEY");
    let (status, output) = run_to_exit(&env, world.tmp.path()).await;
    assert_eq!(status.code(), Some(2), "{output}");
    assert!(
        output.contains("no AWS credentials are configured: set AWS_ROLE_ARN"),
        "{output}"
    );
    assert!(!output.contains("Dev server listening"), "{output}");
}
