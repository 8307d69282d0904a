//! How E2B's answers (and their absence) become the core's sandbox errors: gone is not failed,
//! a wrong key is refused naming E2B_API_KEY, 409 is a clear error, 429 and 5xx are retryable
//! with Retry-After shown, a stalled answer is a timeout, a paused sandbox is not live and is
//! never resumed. Error answers the OpenAPI document does not declare for an operation are
//! injected as undocumented faults in the document's `Error` shape.

mod common;

use std::time::{Duration, Instant};

use common::{check_start, Counts, E2bFake, API_KEY};
use reaper_core::secret::Secret;
use reaper_core::{ExecOptions, SandboxError, SandboxHandle, SandboxProvider};
use reaper_e2b::{E2bConfig, E2bProvider};
use reaper_fake_api::Fault;
use serde_json::json;

fn error_body(status: u16, message: &str) -> serde_json::Value {
    json!({"code": status, "message": message})
}

fn opts(timeout_ms: u64) -> ExecOptions {
    ExecOptions { timeout_ms }
}

#[tokio::test]
async fn a_killed_sandbox_resumes_as_none_and_killing_it_again_is_ok() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    fake.provider.destroy(&id).await.unwrap();
    let before = fake.counts();
    assert!(fake.provider.resume(&id).await.unwrap().is_none());
    fake.provider.destroy(&id).await.unwrap();
    let statuses: Vec<Option<u16>> = fake.api.requests().iter().map(|r| r.status).collect();
    assert_eq!(&statuses[statuses.len() - 2..], &[Some(404), Some(404)]);
    assert_eq!(
        fake.counts().since(before),
        Counts {
            get_sandbox: 1,
            kill_sandbox: 1,
            ..Counts::default()
        }
    );
}

#[tokio::test]
async fn a_wrong_api_key_is_refused_and_the_message_names_e2b_api_key_not_the_key() {
    let fake = E2bFake::start_with(|c| c.api_key = Secret::new("e2b_wrong_key_42")).await;
    let id = fake.create_sandbox().await;
    for result in [
        fake.provider.resume(&id).await.map(|_| ()),
        fake.provider.destroy(&id).await,
    ] {
        let message = match result {
            Err(SandboxError::Refused(m)) => m,
            other => panic!("a rejected key: expected refused, got {other:?}"),
        };
        assert!(message.contains("E2B_API_KEY"), "{message}");
        assert!(message.contains("401"), "{message}");
        assert!(!message.contains("e2b_wrong_key_42"), "{message}");
    }
}

#[tokio::test]
async fn a_conflict_on_kill_is_an_error_saying_the_sandbox_may_still_run_and_it_does() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    fake.api
        .inject(Fault::json(409, &error_body(409, "sandbox is being paused")).undocumented());
    let message = match fake.provider.destroy(&id).await {
        Err(SandboxError::Refused(m)) => m,
        other => panic!("a 409 on kill: expected refused, got {other:?}"),
    };
    assert!(message.contains("409"), "{message}");
    assert!(message.contains("sandbox is being paused"), "{message}");
    assert!(message.contains("may still be running"), "{message}");
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
    fake.provider.destroy(&id).await.unwrap();
}

#[tokio::test]
async fn rate_limiting_is_retryable_and_the_message_carries_retry_after() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    for _ in 0..2 {
        fake.api.inject(
            Fault::json(429, &error_body(429, "rate limit exceeded"))
                .with_header("retry-after", "7")
                .undocumented(),
        );
    }
    let started = Instant::now();
    for result in [
        fake.provider.resume(&id).await.map(|_| ()),
        fake.provider.destroy(&id).await,
    ] {
        let message = match result {
            Err(SandboxError::Unreachable(m)) => m,
            other => panic!("a 429: expected a retryable unreachable, got {other:?}"),
        };
        assert!(message.contains("429"), "{message}");
        assert!(message.contains("Retry-After: 7"), "{message}");
    }
    // The provider never sleeps on Retry-After: the ledger and the next sweep retry.
    assert!(started.elapsed() < Duration::from_secs(7));
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
}

#[tokio::test]
async fn server_errors_are_retryable_unreachable_and_never_gone() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    // 500 is declared by the document; 502/503 come from E2B's edge, in the same shape.
    fake.api
        .inject(Fault::json(500, &error_body(500, "internal error")));
    fake.api.inject(
        Fault::json(503, &error_body(503, "service unavailable"))
            .with_header("retry-after", "2")
            .undocumented(),
    );
    fake.api
        .inject(Fault::json(502, &error_body(502, "bad gateway")).undocumented());
    let resumed = fake.provider.resume(&id).await.map(|h| h.is_some());
    assert!(
        matches!(&resumed, Err(SandboxError::Unreachable(m)) if m.contains("500")),
        "{resumed:?}"
    );
    let destroyed = fake.provider.destroy(&id).await;
    assert!(
        matches!(&destroyed, Err(SandboxError::Unreachable(m)) if m.contains("503") && m.contains("Retry-After: 2")),
        "{destroyed:?}"
    );
    let destroyed = fake.provider.destroy(&id).await;
    assert!(
        matches!(&destroyed, Err(SandboxError::Unreachable(m)) if m.contains("502")),
        "{destroyed:?}"
    );
    // Still there: a failed kill never reports the sandbox gone.
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
}

#[tokio::test]
async fn a_stalled_control_plane_is_unreachable_within_the_request_timeout() {
    let fake = E2bFake::start_with(|c| c.request_timeout_ms = 300).await;
    let id = fake.create_sandbox().await;
    fake.api.inject(Fault::stall());
    let started = Instant::now();
    let resumed = fake.provider.resume(&id).await.map(|h| h.is_some());
    assert!(
        matches!(&resumed, Err(SandboxError::Unreachable(m)) if m.contains("300 ms")),
        "{resumed:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_dropped_connection_is_unreachable() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    fake.api.inject(Fault::close());
    let destroyed = fake.provider.destroy(&id).await;
    assert!(
        matches!(destroyed, Err(SandboxError::Unreachable(_))),
        "{destroyed:?}"
    );
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
}

#[tokio::test]
async fn a_stalled_envd_is_an_exec_timeout_followed_by_one_kill() {
    let fake = E2bFake::start_with(|c| c.exec_margin_ms = 200).await;
    let id = fake.create_sandbox().await;
    let handle = fake.provider.resume(&id).await.unwrap().unwrap();
    fake.api.inject(Fault::stall());
    let before = fake.counts();
    let started = Instant::now();
    let result = handle.exec("echo never", opts(500)).await;
    assert!(
        matches!(result, Err(SandboxError::Timeout(500))),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    // The stalled Start, then the kill of whatever it may have started.
    assert_eq!(fake.counts().since(before).process_start, 2);
    fake.provider.destroy(&id).await.unwrap();
}

#[tokio::test]
async fn a_paused_sandbox_is_not_live_is_never_resumed_and_is_still_destroyable() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    fake.pause(&id);
    let before = fake.counts();
    assert!(fake.provider.resume(&id).await.unwrap().is_none());
    // One read; no POST /sandboxes/{id}/resume or /connect, which would bill it again.
    assert_eq!(
        fake.counts().since(before),
        Counts {
            get_sandbox: 1,
            ..Counts::default()
        }
    );
    fake.provider.destroy(&id).await.unwrap();
    assert!(fake.local.open(&id).await.unwrap().is_none());
}

#[tokio::test]
async fn an_exec_in_a_sandbox_paused_since_its_resume_is_not_found() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    let handle = fake.provider.resume(&id).await.unwrap().unwrap();
    fake.pause(&id);
    let result = handle.exec("echo hi", opts(5_000)).await;
    assert!(
        matches!(&result, Err(SandboxError::NotFound(i)) if i == &id),
        "{result:?}"
    );
    fake.provider.destroy(&id).await.unwrap();
}

#[tokio::test]
async fn envd_refusing_the_access_token_is_refused_and_the_token_is_not_shown() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    let handle = fake.provider.open(&id).await.unwrap().unwrap();
    let old_token = format!("envd-token-{id}");
    fake.set_access_token(&id, "rotated-token");
    let result = handle.exec("echo hi", opts(5_000)).await;
    let message = match result {
        Err(SandboxError::Refused(m)) => m,
        other => panic!("a refused access token: expected refused, got {other:?}"),
    };
    assert!(message.contains("401"), "{message}");
    assert!(!message.contains(&old_token), "{message}");
    assert!(!format!("{handle:?}").contains(&old_token));
    fake.provider.destroy(&id).await.unwrap();
}

#[tokio::test]
async fn neither_the_api_key_nor_the_access_token_is_in_any_debug_output() {
    let fake = E2bFake::start().await;
    let id = fake.create_sandbox().await;
    let handle = fake.provider.open(&id).await.unwrap().unwrap();
    let shown = format!(
        "{:?} {:?} {:?}",
        fake.provider,
        fake.provider.config(),
        handle
    );
    assert!(!shown.contains(API_KEY), "{shown}");
    assert!(!shown.contains(&format!("envd-token-{id}")), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    // The key does go where it belongs: the control plane's X-API-Key, and nowhere else.
    for r in fake.api.requests() {
        let envd = r.path.starts_with(common::ENVD_PREFIX);
        assert_eq!(
            r.header("x-api-key").is_some(),
            !envd,
            "{} {}",
            r.method,
            r.path
        );
    }
    fake.provider.destroy(&id).await.unwrap();
}

#[tokio::test]
async fn an_invalid_id_is_refused_before_any_request() {
    let fake = E2bFake::start().await;
    for id in [
        "",
        "../sandboxes",
        "a/b",
        "x.evil.example",
        "id?q=1",
        &"a".repeat(129),
    ] {
        assert!(
            matches!(
                fake.provider.resume(id).await,
                Err(SandboxError::Refused(_))
            ),
            "{id:?}"
        );
        assert!(
            matches!(
                fake.provider.destroy(id).await,
                Err(SandboxError::Refused(_))
            ),
            "{id:?}"
        );
    }
    assert_eq!(fake.counts().total(), 0);
}

#[test]
fn a_config_that_cannot_work_is_refused_when_the_provider_is_built() {
    let mut config = E2bConfig::new(Secret::new(API_KEY));
    config.envd_url_template = "https://envd.example".into();
    let err = E2bProvider::new(config).unwrap_err().to_string();
    assert!(err.contains("E2B_ENVD_URL_TEMPLATE"), "{err}");
}

/// The recorded shape can fail: a request that breaks it is reported, field by field.
#[test]
fn the_recorded_envd_shape_rejects_a_request_that_breaks_it() {
    let mut body = vec![0u8];
    let message = json!({
        "process": {"cmd": "", "args": ["-c", 1], "environment": {}},
        "stdin": true,
        "pty": {"size": {"cols": 80, "rows": 24}}
    })
    .to_string();
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(message.as_bytes());
    let headers = vec![("content-type".to_string(), "application/json".to_string())];
    let problems = check_start(&headers, &body).unwrap_err().join("\n");
    for expected in [
        "Content-Type must be application/connect+json",
        "Connect-Protocol-Version",
        "Authorization",
        "ProcessConfig has no field \"environment\"",
        "ProcessConfig.cmd",
        "ProcessConfig.args must hold strings only",
        "stdin must be false",
        "a pty was requested",
    ] {
        assert!(
            problems.contains(expected),
            "{expected} not in:\n{problems}"
        );
    }
}
