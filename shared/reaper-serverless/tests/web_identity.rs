//! The role assumed with the OIDC token through a fake STS on 127.0.0.1 (a real HTTP server,
//! the SDK's real STS client): what is sent, what is cached and for how long, where the token
//! comes from, the errors, and that no token or credential reaches a log line.

#[path = "common/fake_sts.rs"]
mod fake_sts;

use std::sync::{Arc, Mutex};

use aws_credential_types::provider::ProvideCredentials;
use aws_sdk_sts::config::{BehaviorVersion, Region};
use fake_sts::FakeSts;
use reaper_core::time::ManualClock;
use reaper_serverless::credentials::{WebIdentityError, REFRESH_BEFORE_EXPIRY};
use reaper_serverless::{OidcTokens, Secret, WebIdentityCredentials};

const ROLE: &str = "arn:aws:iam::123456789012:role/reaper-vercel";
const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.request-token-7d1f.sig";
/// 2030-01-01T00:00:00Z and the credentials' expiry one hour later.
const NOW_MS: i64 = 1_893_456_000_000;
const EXPIRATION: &str = "2030-01-01T01:00:00Z";
const EXPIRY_MS: i64 = NOW_MS + 3_600_000;

fn sts(endpoint: &str) -> aws_sdk_sts::Client {
    aws_sdk_sts::Client::from_conf(
        aws_sdk_sts::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(endpoint)
            .build(),
    )
}

fn provider(fake: &FakeSts, tokens: OidcTokens, clock: &ManualClock) -> WebIdentityCredentials {
    WebIdentityCredentials::new(
        sts(&fake.endpoint),
        ROLE,
        "reaper",
        tokens,
        Arc::new(clock.clone()),
    )
}

fn offered(token: &str) -> OidcTokens {
    let tokens = OidcTokens::new(None);
    tokens.offer(token);
    tokens
}

#[tokio::test]
async fn the_role_is_assumed_with_the_offered_token_and_the_credentials_are_those_sts_returned() {
    let fake = FakeSts::start(ROLE, &[TOKEN], EXPIRATION).await;
    let clock = ManualClock::new(NOW_MS);
    let credentials = provider(&fake, offered(TOKEN), &clock)
        .provide_credentials()
        .await
        .expect("the fake STS accepts the token for the role");
    assert_eq!(credentials.access_key_id(), fake_sts::ACCESS_KEY_ID);
    assert_eq!(credentials.secret_access_key(), fake_sts::SECRET_ACCESS_KEY);
    assert_eq!(credentials.session_token(), Some(fake_sts::SESSION_TOKEN));
    let expiry = credentials.expiry().unwrap();
    assert_eq!(
        expiry
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
        EXPIRY_MS
    );
    assert_eq!(
        fake.calls(),
        [fake_sts::Call {
            role_arn: ROLE.into(),
            session_name: "reaper".into(),
            token: TOKEN.into(),
        }]
    );
}

#[tokio::test]
async fn assumed_credentials_are_reused_until_five_minutes_before_they_expire() {
    let fake = FakeSts::start(ROLE, &[TOKEN], EXPIRATION).await;
    let clock = ManualClock::new(NOW_MS);
    let p = provider(&fake, offered(TOKEN), &clock);
    for _ in 0..3 {
        p.credentials().await.unwrap();
    }
    assert_eq!(fake.calls().len(), 1, "cached after the first call");
    let renew_at = EXPIRY_MS - REFRESH_BEFORE_EXPIRY.as_millis() as i64;
    clock.set(renew_at - 1);
    p.credentials().await.unwrap();
    assert_eq!(fake.calls().len(), 1, "still fresh a millisecond before");
    clock.set(renew_at);
    p.credentials().await.unwrap();
    assert_eq!(fake.calls().len(), 2, "renewed five minutes before expiry");
}

#[tokio::test]
async fn concurrent_callers_needing_credentials_share_one_sts_call() {
    let fake = FakeSts::start(ROLE, &[TOKEN], EXPIRATION).await;
    let clock = ManualClock::new(NOW_MS);
    let p = Arc::new(provider(&fake, offered(TOKEN), &clock));
    // Tasks on one thread interleave at every await: all eight ask before any STS answer.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.credentials().await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(fake.calls().len(), 1);
}

#[tokio::test]
async fn the_freshest_offered_token_is_sent_and_vercel_oidc_token_is_the_fallback() {
    let env_token = "env-token-from-vercel-env-pull";
    let fake = FakeSts::start(ROLE, &[env_token, "request-1", "request-2"], EXPIRATION).await;
    let clock = ManualClock::new(NOW_MS);
    let tokens = OidcTokens::new(Some(Secret::new(env_token)));
    let p = provider(&fake, tokens.clone(), &clock);
    p.credentials().await.unwrap();
    tokens.offer("request-1");
    tokens.offer("  ");
    tokens.offer("request-2");
    clock.set(EXPIRY_MS);
    p.credentials().await.unwrap();
    let sent: Vec<String> = fake.calls().into_iter().map(|c| c.token).collect();
    assert_eq!(sent, [env_token, "request-2"]);
}

#[tokio::test]
async fn without_any_token_the_error_says_how_to_turn_on_oidc_and_sts_is_not_called() {
    let fake = FakeSts::start(ROLE, &[TOKEN], EXPIRATION).await;
    let clock = ManualClock::new(NOW_MS);
    let err = provider(&fake, OidcTokens::new(None), &clock)
        .credentials()
        .await
        .unwrap_err();
    assert!(matches!(err, WebIdentityError::NoToken { .. }), "{err:?}");
    let text = err.to_string();
    for part in [
        ROLE,
        "x-vercel-oidc-token",
        "VERCEL_OIDC_TOKEN is unset",
        "OIDC federation",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    assert!(fake.calls().is_empty());
}

#[tokio::test]
async fn a_refusal_by_sts_names_the_role_and_the_trust_conditions_and_is_not_cached() {
    let fake = FakeSts::start(ROLE, &[TOKEN], EXPIRATION).await;
    let clock = ManualClock::new(NOW_MS);
    let tokens = offered("a-token-the-role-does-not-trust");
    let p = provider(&fake, tokens.clone(), &clock);
    let err = p.credentials().await.unwrap_err();
    let text = err.to_string();
    for part in [
        "AWS_ROLE_ARN=arn:aws:iam::123456789012:role/reaper-vercel",
        "AccessDenied: Not authorized to perform sts:AssumeRoleWithWebIdentity",
        "aud and sub conditions",
        "infra/aws/vercel-oidc.yaml",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
    assert!(!text.contains("a-token-the-role"), "{text}");
    tokens.offer(TOKEN);
    assert!(p.credentials().await.is_ok(), "the next call tries again");
}

#[tokio::test]
async fn an_unreachable_sts_is_an_error_naming_the_role() {
    // A port nobody listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = WebIdentityCredentials::new(
        sts(&format!("http://127.0.0.1:{port}")),
        ROLE,
        "reaper",
        offered(TOKEN),
        Arc::new(ManualClock::new(NOW_MS)),
    );
    let err = p.credentials().await.unwrap_err();
    assert!(matches!(err, WebIdentityError::Sts { .. }), "{err:?}");
    assert!(err.to_string().contains(ROLE), "{err}");
}

/// A log buffer for the tracing subscriber a test installs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn neither_the_token_nor_the_assumed_credentials_reach_a_log_line_or_debug_output() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let fake = FakeSts::start(ROLE, &[TOKEN], EXPIRATION).await;
    let clock = ManualClock::new(NOW_MS);
    let tokens = OidcTokens::new(Some(Secret::new(TOKEN)));
    tokens.offer(TOKEN);
    let p = provider(&fake, tokens.clone(), &clock);
    let credentials = p.credentials().await.unwrap();
    // And a refusal, whose error text is logged too.
    let refused = provider(&fake, offered("wrong-token-9b1"), &clock)
        .credentials()
        .await
        .unwrap_err();

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        log.contains("assumed the role with the OIDC token"),
        "the subscriber saw the provider's lines: {log}"
    );
    let shown = format!("{log}\n{p:?}\n{tokens:?}\n{credentials:?}\n{refused:?}\n{refused}");
    for secret in [
        TOKEN,
        "wrong-token-9b1",
        fake_sts::SECRET_ACCESS_KEY,
        fake_sts::SESSION_TOKEN,
    ] {
        assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
    }
}
