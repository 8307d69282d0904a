//! The sandboxd token read from Secrets Manager at run time, through a fake Secrets Manager on
//! 127.0.0.1 checked against the published API model (the SDK's real client, SigV4 and all):
//! the cache and its expiry on a manual clock, a rotation met as a 401 and healed by one re-read,
//! the rotation steps of `infra/aws/README.md` performed with the SDK, and an unreachable
//! Secrets Manager.

#[path = "common/fake_secretsmanager.rs"]
mod fake_secretsmanager;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_secretsmanager::config::{BehaviorVersion, Credentials, Region};
use fake_secretsmanager::FakeSecretsManager;
use reaper_core::time::ManualClock;
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError};
use reaper_serverless::secret_token::{SecretToken, SecretTokenTransport};
use reaper_serverless::SecretSource;

const OLD: &str = "sandboxd-token-before-rotation-0123";
const NEW: &str = "sandboxd-token-after-rotation-4567";
const NOW_MS: i64 = 1_893_456_000_000;
const TTL: Duration = Duration::from_secs(300);

fn builder(endpoint: &str) -> aws_sdk_secretsmanager::config::Builder {
    aws_sdk_secretsmanager::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "AKIDLOCAL",
            "local-secret",
            None,
            None,
            "test",
        ))
        .endpoint_url(endpoint)
}

fn token(fake: &FakeSecretsManager, clock: &ManualClock) -> Arc<SecretToken> {
    Arc::new(SecretToken::new(
        SecretToken::client(builder(&fake.endpoint)),
        SecretSource {
            arn: fake.arn(),
            cache_ttl: TTL,
        },
        Arc::new(clock.clone()),
    ))
}

/// The rotation step of `infra/aws/README.md`, as the AWS CLI's
/// `aws secretsmanager put-secret-value --secret-id ARN --secret-string TOKEN` sends it.
async fn put_secret_value(fake: &FakeSecretsManager, value: &str) {
    aws_sdk_secretsmanager::Client::from_conf(builder(&fake.endpoint).build())
        .put_secret_value()
        .secret_id(fake.arn())
        .secret_string(value)
        .send()
        .await
        .expect("PutSecretValue on the fake");
}

/// A daemon's token check, in process: 401 unless the request carries the token it holds now
/// (the daemon's own behaviour is tested against the real binary in the Lambda suite).
#[derive(Default)]
struct Daemon {
    token: Mutex<String>,
    seen: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl HttpTransport for Daemon {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let auth = request
            .headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        self.seen.lock().unwrap().push(auth.clone());
        let expected = format!("Bearer {}", self.token.lock().unwrap());
        Ok(if auth == expected {
            HttpResponse::new(200, "{}")
        } else {
            HttpResponse::new(401, r#"{"error":{"code":"unauthorized","message":"no"}}"#)
        })
    }
}

fn request() -> HttpRequest {
    HttpRequest {
        method: HttpMethod::Get,
        url: "http://127.0.0.1:9/v1/sandboxes/sbx-1".into(),
        headers: vec![("authorization".into(), "Bearer placeholder".into())],
        body: None,
        timeout_ms: 5_000,
        max_response_bytes: 1 << 20,
    }
}

#[tokio::test]
async fn a_token_read_from_secrets_manager_is_reused_until_its_cache_expires_then_read_again() {
    let fake = FakeSecretsManager::start("reaper/sandboxd-token", OLD).await;
    let clock = ManualClock::new(NOW_MS);
    let token = token(&fake, &clock);
    assert_eq!(token.current().await.unwrap().expose(), OLD);
    clock.advance(TTL.as_millis() as i64 - 1);
    assert_eq!(token.current().await.unwrap().expose(), OLD);
    assert_eq!(fake.reads(), 1, "read once within the cache's lifetime");

    put_secret_value(&fake, NEW).await;
    assert_eq!(
        token.current().await.unwrap().expose(),
        OLD,
        "a rotation is not seen before the cache expires (or a 401)"
    );
    clock.advance(1);
    assert_eq!(token.current().await.unwrap().expose(), NEW);
    assert_eq!(fake.reads(), 2);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_rotation_mid_life_is_met_by_a_401_then_one_re_read_and_the_request_succeeds() {
    let fake = FakeSecretsManager::start("reaper/sandboxd-token", OLD).await;
    let clock = ManualClock::new(NOW_MS);
    let daemon = Arc::new(Daemon::default());
    *daemon.token.lock().unwrap() = OLD.into();
    let transport = SecretTokenTransport::new(daemon.clone(), token(&fake, &clock));
    assert_eq!(transport.send(request()).await.unwrap().status, 200);

    // The steps of infra/aws/README.md: a new value in the secret, the daemon restarted on it.
    put_secret_value(&fake, NEW).await;
    *daemon.token.lock().unwrap() = NEW.into();

    let answer = transport.send(request()).await.unwrap();
    assert_eq!(answer.status, 200, "healed within the request, no redeploy");
    assert_eq!(fake.reads(), 2, "one re-read on the 401");
    let seen = daemon.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            format!("Bearer {OLD}"),
            format!("Bearer {OLD}"),
            format!("Bearer {NEW}")
        ],
        "the placeholder never leaves, the cached token is refused once, the rotated one is used"
    );
    // Later requests use the new token from the cache.
    assert_eq!(transport.send(request()).await.unwrap().status, 200);
    assert_eq!(fake.reads(), 2);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_401_while_the_secret_still_holds_the_refused_token_stands_after_one_re_read() {
    let fake = FakeSecretsManager::start("reaper/sandboxd-token", OLD).await;
    let clock = ManualClock::new(NOW_MS);
    let daemon = Arc::new(Daemon::default());
    *daemon.token.lock().unwrap() = NEW.into();
    let transport = SecretTokenTransport::new(daemon.clone(), token(&fake, &clock));
    assert_eq!(transport.send(request()).await.unwrap().status, 401);
    assert_eq!(
        fake.reads(),
        2,
        "read, refused, read again: still the same value"
    );
    assert_eq!(
        daemon.seen.lock().unwrap().len(),
        1,
        "not sent twice with one token"
    );
}

#[tokio::test]
async fn an_unreachable_secrets_manager_fails_the_request_as_unreachable_naming_the_secret() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let clock = ManualClock::new(NOW_MS);
    let arn = fake_secretsmanager::secret_arn("reaper/sandboxd-token");
    let token = Arc::new(SecretToken::new(
        SecretToken::client(builder(&endpoint)),
        SecretSource {
            arn: arn.clone(),
            cache_ttl: TTL,
        },
        Arc::new(clock),
    ));
    let daemon = Arc::new(Daemon::default());
    let transport = SecretTokenTransport::new(daemon.clone(), token);
    let error = transport.send(request()).await.unwrap_err();
    assert!(
        matches!(error, TransportError::Unreachable { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    for part in [
        "cannot read the sandboxd token from Secrets Manager secret",
        arn.as_str(),
        "Nothing was destroyed",
        "secretsmanager:GetSecretValue",
    ] {
        assert!(message.contains(part), "{part:?} missing from {message}");
    }
    assert!(
        daemon.seen.lock().unwrap().is_empty(),
        "nothing sent to the daemon"
    );
}

#[tokio::test]
async fn a_secret_value_with_a_trailing_newline_is_refused_without_repeating_it() {
    let fake = FakeSecretsManager::start("reaper/sandboxd-token", "s3cr3t-token-value\n").await;
    let token = token(&fake, &ManualClock::new(NOW_MS));
    let message = token.current().await.unwrap_err().to_string();
    assert!(
        message.contains("whitespace before or after it"),
        "{message}"
    );
    assert!(!message.contains("s3cr3t"), "{message}");
}
