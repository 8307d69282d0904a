//! The sandboxd token read at run time from Secrets Manager, under cargo-lambda's runtime
//! emulator with a real `reaper-sandboxd`: the environment carries only the secret's ARN; the
//! rotation steps of `infra/aws/README.md` (a new value in the secret, the daemon restarted on
//! it) are performed mid-life and the next sweep heals on the 401 without a redeploy; an
//! unreachable Secrets Manager is reported by the sweep and nothing is destroyed. The fake
//! Secrets Manager checks every request and answer against the published API model.

mod common;

#[path = "../../../shared/reaper-serverless/tests/common/fake_secretsmanager.rs"]
mod fake_secretsmanager;

use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
use common::*;
use fake_secretsmanager::FakeSecretsManager;
use reaper_core::RunStatus;

const ROTATED: &str = "rotated-sandboxd-token-0123456789abcdef";

/// The function's environment with the token's ARN in place of the token.
fn secret_env(w: &World, arn: &str, endpoint: &str) -> Vec<(String, String)> {
    let mut env = w.env(&[
        ("REAPER_SANDBOXD_TOKEN_SECRET_ARN", arn),
        ("AWS_ENDPOINT_URL_SECRETS_MANAGER", endpoint),
    ]);
    env.retain(|(k, _)| k != "REAPER_SANDBOXD_TOKEN");
    env
}

/// `aws secretsmanager put-secret-value --secret-id ARN --secret-string TOKEN`, through the SDK.
async fn put_secret_value(fake: &FakeSecretsManager, value: &str) {
    let config = aws_sdk_secretsmanager::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("local", "local", None, None, "test"))
        .endpoint_url(&fake.endpoint)
        .build();
    aws_sdk_secretsmanager::Client::from_conf(config)
        .put_secret_value()
        .secret_id(fake.arn())
        .secret_string(value)
        .send()
        .await
        .expect("PutSecretValue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_rotated_mid_life_is_read_again_on_the_401_and_the_next_sweep_succeeds() {
    let mut w = World::new().await;
    let fake = FakeSecretsManager::start("reaper/sandboxd-token", &w.sandboxd.token).await;
    let env = secret_env(&w, &fake.arn(), &fake.endpoint);
    assert!(
        env.iter().all(|(_, v)| *v != w.sandboxd.token),
        "no token value in the environment"
    );
    let f = w.function_with(&env);
    let (first, _) = w.finished_run("before-rotation", 1_000).await;
    let report = w.emulator.sweep(&scheduled_event()).await;
    assert_eq!(entry(&report, &first)["outcome"], "finalized", "{report}");
    assert_eq!(fake.reads(), 1);

    // The rotation, as infra/aws/README.md says: new value in the secret, daemon restarted.
    put_secret_value(&fake, ROTATED).await;
    w.restart_sandboxd(ROTATED).await;
    let (second, sbx) = w.finished_run("after-rotation", 1_000).await;

    let report = w.emulator.sweep(&scheduled_event()).await;
    assert_eq!(entry(&report, &second)["outcome"], "finalized", "{report}");
    assert_eq!(report["outcomes"]["reclaim-failed"], 0, "{report}");
    assert_eq!(fake.reads(), 2, "one re-read, on the first 401");
    assert_eq!(w.run(&second).await.status, RunStatus::Completed);
    assert!(!w.sandbox_exists(&sbx).await);
    assert_eq!(fake.violations(), Vec::<String>::new());
    assert!(
        !f.output().contains(ROTATED),
        "the token reached a log line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_secrets_manager_is_reported_by_the_sweep_and_nothing_is_destroyed() {
    let w = World::new().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let arn = fake_secretsmanager::secret_arn("reaper/sandboxd-token");
    let _f = w.function_with(&secret_env(&w, &arn, &endpoint));
    let (run, sbx) = w.finished_run("unreadable-token", 1_000).await;

    let report = w.emulator.sweep(&scheduled_event()).await;
    assert_eq!(report["sweep"]["state"], "swept", "{report}");
    let entry = entry(&report, &run);
    assert_eq!(entry["outcome"], "unknown", "{report}");
    let text = entry.to_string();
    assert!(
        text.contains("cannot read the sandboxd token from Secrets Manager secret")
            && text.contains(&arn),
        "the report does not say why: {entry}"
    );
    let stored = w.run(&run).await;
    assert_eq!(
        (stored.status, stored.driver_epoch),
        (RunStatus::Running, None)
    );
    assert!(w.sandbox_exists(&sbx).await, "nothing was destroyed");
}
