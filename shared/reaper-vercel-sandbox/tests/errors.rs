//! How Vercel's answers (and their absence) become the core's sandbox errors, against the fake
//! API: the published statuses and the recorded error shapes (404 gone, 401/403, 409, 429 with
//! Retry-After, 5xx), a stalled answer, a closed connection and a refused one. Every exchange is
//! checked against the stored document.

mod common;

use common::{error_body, FakeVercel, TOKEN};
use reaper_core::{ExecOptions, SandboxError, SandboxHandle, SandboxProvider};
use reaper_fake_api::Fault;
use reaper_vercel_sandbox::{Config, DestroyMode};

fn opts(timeout_ms: u64) -> ExecOptions {
    ExecOptions { timeout_ms }
}

#[tokio::test]
async fn resume_of_an_unknown_or_stopped_non_persistent_sandbox_is_none() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    assert!(provider.resume("unknown-name").await.unwrap().is_none());
    assert!(
        provider.resume("sbx_unknown").await.unwrap().is_none(),
        "a session id"
    );

    let id = fake.create_sandbox_with(Default::default(), false).await;
    fake.api.inject(
        Fault::json(410, &error_body("sandbox_stopped", "Sandbox has stopped"))
            .on("getNamedSandbox"),
    );
    assert!(provider.resume(&id).await.unwrap().is_none(), "410");

    fake.auto_stop(&id).await;
    assert!(
        provider.resume(&id).await.unwrap().is_none(),
        "stopped, nothing kept"
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_stopped_persistent_sandbox_is_never_gone_and_never_resumed_by_a_probe() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    fake.auto_stop(&id).await;
    match provider.resume(&id).await.map(|h| h.is_some()) {
        Err(SandboxError::Refused(message)) => {
            assert!(message.contains("persistent"), "{message}")
        }
        other => panic!("a stopped persistent sandbox lives on: expected an error, got {other:?}"),
    }
    assert_eq!(fake.resumes(), 0, "reading its state resumed it");
    assert_eq!(fake.status(&id), Some("stopped"));
    // Its destroy deletes it, snapshot and all.
    provider.destroy(&id).await.unwrap();
    assert_eq!(fake.status(&id), None);
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_404_that_does_not_say_the_sandbox_is_missing_keeps_the_record() {
    let fake = FakeVercel::start().await;
    let id = fake.create_sandbox().await;
    // The wrong project: Vercel answers 404, but for the project, not the sandbox.
    let provider = fake.provider_with(|c: &mut Config| c.project_id = Some("prj_other".into()));
    for result in [
        provider.resume(&id).await.map(|h| h.is_some()),
        provider.destroy(&id).await.map(|()| false),
    ] {
        match result {
            Err(SandboxError::Refused(message)) => {
                assert!(message.contains("404"), "{message}");
                assert!(message.contains("VERCEL_PROJECT_ID"), "{message}");
            }
            other => panic!("a bare 404 is no proof the sandbox is gone, got {other:?}"),
        }
    }
    // A bodiless 404 (a wrong base URL behind a proxy) is no proof either.
    let provider = fake.provider();
    fake.api.inject(Fault::respond(404).on("getNamedSandbox"));
    assert!(provider.resume(&id).await.is_err());
    fake.api.inject(Fault::respond(404).on("deleteSandbox"));
    assert!(provider.destroy(&id).await.is_err());
    assert_eq!(fake.status(&id), Some("running"), "the sandbox lives on");
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn destroy_deletes_a_named_sandbox_and_gone_or_stopping_is_ok() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    provider.destroy("unknown-name").await.unwrap();

    let id = fake.create_sandbox().await;
    provider.destroy(&id).await.unwrap();
    assert_eq!(fake.status(&id), None, "deleted, not just stopped");
    // Deleted already: Vercel says it is not found.
    provider.destroy(&id).await.unwrap();

    let other = fake.create_sandbox().await;
    fake.api.inject(
        Fault::json(410, &error_body("sandbox_stopped", "The Sandbox is gone")).on("deleteSandbox"),
    );
    provider.destroy(&other).await.unwrap();
    assert_eq!(fake.api.count("deleteSandbox"), 4);
    assert_eq!(fake.api.count("stopSession"), 0);
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn destroy_only_stops_the_session_when_the_setting_asks_for_stop() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider_with(|c: &mut Config| c.destroy = DestroyMode::Stop);
    let id = fake.create_sandbox().await;
    provider.destroy(&id).await.unwrap();
    assert_eq!(fake.status(&id), Some("stopped"), "kept, stopped");
    assert_eq!(fake.api.count("deleteSandbox"), 0);
    assert_eq!(
        fake.operations(),
        ["getNamedSandbox", "stopSession"],
        "two requests"
    );
    // Stopped already: the stop answers 410, which is done.
    provider.destroy(&id).await.unwrap();
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_v1_sandbox_id_is_served_as_a_session() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let session = fake.session_of(&id);
    assert!(session.starts_with("sbx_"));
    let handle = provider.resume(&session).await.unwrap().unwrap();
    assert_eq!(
        handle.exec("echo v1", opts(10_000)).await.unwrap().stdout,
        "v1\n"
    );
    provider.destroy(&session).await.unwrap();
    assert_eq!(fake.status(&id), Some("stopped"));
    assert!(provider.resume(&session).await.unwrap().is_none());
    assert_eq!(
        fake.api.count("getNamedSandbox"),
        0,
        "{:?}",
        fake.operations()
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn exec_in_a_stopped_sandbox_is_not_found_and_never_restarts_it() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let handle = provider.resume(&id).await.unwrap().unwrap();
    provider.destroy(&id).await.unwrap();
    fake.api.clear_requests();
    let result = handle.exec("echo hi", opts(10_000)).await;
    assert!(
        matches!(result, Err(SandboxError::NotFound(ref s)) if s == &id),
        "{result:?}"
    );
    assert_eq!(
        fake.operations(),
        ["runSessionCommand"],
        "one refused run, nothing else"
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_sandbox_stopped_under_a_running_exec_is_not_found_and_costs_no_kill() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let handle = provider.handle(&fake.session_of(&id)).unwrap();
    fake.api.inject(
        Fault::json(410, &error_body("sandbox_stopped", "Sandbox has stopped"))
            .on("getSessionCommandLogs"),
    );
    let result = handle.exec("true", opts(10_000)).await;
    assert!(
        matches!(result, Err(SandboxError::NotFound(_))),
        "{result:?}"
    );
    fake.api.inject(
        Fault::json(410, &error_body("sandbox_stopped", "Sandbox has stopped"))
            .on("getSessionCommand"),
    );
    let result = handle.exec("true", opts(10_000)).await;
    assert!(
        matches!(result, Err(SandboxError::NotFound(_))),
        "{result:?}"
    );
    assert_eq!(
        fake.api.count("killSessionCommand"),
        0,
        "{:?}",
        fake.operations()
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_rejected_token_is_refused_naming_vercel_token() {
    let fake = FakeVercel::start().await;
    let id = fake.create_sandbox().await;
    let provider = fake.provider_with(|c: &mut Config| {
        c.token = reaper_core::secret::Secret::new("wrong-token");
    });
    for result in [
        provider.resume(&id).await.map(|_| ()),
        provider.destroy(&id).await,
    ] {
        match result {
            Err(SandboxError::Refused(message)) => {
                assert!(message.contains("HTTP 401"), "{message}");
                assert!(message.contains("VERCEL_TOKEN"), "{message}");
                assert!(!message.contains("wrong-token") && !message.contains(TOKEN));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // The sandbox was not touched.
    assert_eq!(fake.status(&id), Some("running"));
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_forbidden_team_is_refused_naming_vercel_team_id() {
    let fake = FakeVercel::start().await;
    let id = fake.create_sandbox().await;
    let provider = fake.provider_with(|c: &mut Config| c.team_id = Some("team_other".into()));
    match provider.resume(&id).await.map(|h| h.is_some()) {
        Err(SandboxError::Refused(message)) => {
            assert!(message.contains("HTTP 403"), "{message}");
            assert!(message.contains("VERCEL_TEAM_ID"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_conflict_is_a_refusal_that_says_the_state_refuses_it() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let handle = provider.handle(&fake.session_of(&id)).unwrap();
    fake.api.inject(
        Fault::json(409, &error_body("conflict", "sandbox is snapshotting"))
            .on("runSessionCommand"),
    );
    match handle.exec("true", opts(10_000)).await {
        Err(SandboxError::Refused(message)) => {
            assert!(message.contains("409"), "{message}");
            assert!(message.contains("state"), "{message}");
            assert!(message.contains("sandbox is snapshotting"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    fake.api
        .inject(Fault::json(409, &error_body("conflict", "busy")).on("deleteSandbox"));
    assert!(matches!(
        provider.destroy(&id).await,
        Err(SandboxError::Refused(_))
    ));
    assert_eq!(
        fake.status(&id),
        Some("running"),
        "a refused delete leaves the sandbox live"
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn rate_limiting_is_retryable_and_quotes_retry_after_without_sleeping() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let handle = provider.handle(&fake.session_of(&id)).unwrap();
    fake.api.inject(
        Fault::json(429, &error_body("rate_limited", "Too many requests"))
            .with_header("retry-after", "17")
            .on("runSessionCommand"),
    );
    let started = std::time::Instant::now();
    match handle.exec("true", opts(10_000)).await {
        Err(SandboxError::Unreachable(message)) => {
            assert!(message.contains("429"), "{message}");
            assert!(message.contains("17 s (Retry-After)"), "{message}");
        }
        other => panic!("expected a retryable error, got {other:?}"),
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the provider waited out the Retry-After itself"
    );
    fake.api.inject(
        Fault::json(429, &error_body("rate_limited", "Too many requests"))
            .with_header("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")
            .on("deleteSandbox"),
    );
    match provider.destroy(&id).await {
        Err(SandboxError::Unreachable(message)) => assert!(
            message.contains("Wed, 21 Oct 2026 07:28:00 GMT (Retry-After)"),
            "{message}"
        ),
        other => panic!("expected a retryable error, got {other:?}"),
    }
    // The next call goes through: nothing was left broken.
    assert_eq!(
        handle.exec("echo ok", opts(10_000)).await.unwrap().stdout,
        "ok\n"
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn server_errors_are_unreachable_so_a_probe_says_unknown() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    for (status, operation) in [
        (500, "getNamedSandbox"),
        (503, "deleteSandbox"),
        (502, "getSessionCommand"),
    ] {
        fake.api
            .inject(Fault::json(status, &error_body("internal_error", "try again")).on(operation));
        let result = match operation {
            "getNamedSandbox" => provider.resume(&id).await.map(|_| ()),
            "deleteSandbox" => provider.destroy(&id).await,
            _ => provider
                .handle(&fake.session_of(&id))
                .unwrap()
                .exec("true", opts(10_000))
                .await
                .map(|_| ()),
        };
        match result {
            Err(SandboxError::Unreachable(message)) => {
                assert!(message.contains(&format!("HTTP {status}")), "{message}")
            }
            other => panic!("{operation} answered {status}: expected unreachable, got {other:?}"),
        }
    }
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_failed_wait_for_the_exit_code_kills_the_command() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    fake.api
        .inject(Fault::json(502, &error_body("bad_gateway", "upstream")).on("getSessionCommand"));
    let result = provider
        .handle(&fake.session_of(&id))
        .unwrap()
        .exec("true", opts(10_000))
        .await;
    assert!(
        matches!(result, Err(SandboxError::Unreachable(_))),
        "{result:?}"
    );
    assert_eq!(
        fake.api.count("killSessionCommand"),
        1,
        "{:?}",
        fake.operations()
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_command_with_a_nul_byte_is_refused_before_any_request() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let result = provider
        .handle(&fake.session_of(&id))
        .unwrap()
        .exec("echo a\0b", opts(10_000))
        .await;
    assert!(
        matches!(result, Err(SandboxError::Refused(_))),
        "{result:?}"
    );
    assert!(fake.api.requests().is_empty());
}

#[tokio::test]
async fn a_stalled_answer_is_unreachable_after_the_request_timeout() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider_with(|c: &mut Config| c.request_timeout_ms = 300);
    let id = fake.create_sandbox().await;
    fake.api.inject(Fault::stall().on("getNamedSandbox"));
    let started = std::time::Instant::now();
    let result = provider.resume(&id).await.map(|h| h.is_some());
    assert!(
        matches!(result, Err(SandboxError::Unreachable(_))),
        "{result:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_stalled_log_stream_is_the_exec_timeout_and_the_command_is_killed() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let handle = provider.handle(&fake.session_of(&id)).unwrap();
    fake.api.inject(Fault::stall().on("getSessionCommandLogs"));
    let result = handle.exec("sleep 600", opts(500)).await;
    assert!(
        matches!(result, Err(SandboxError::Timeout(500))),
        "{result:?}"
    );
    assert_eq!(fake.api.count("killSessionCommand"), 1);
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_closed_connection_is_unreachable() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    fake.api.inject(Fault::close().on("getNamedSandbox"));
    let result = provider.resume("any-name").await.map(|h| h.is_some());
    assert!(
        matches!(result, Err(SandboxError::Unreachable(_))),
        "{result:?}"
    );
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_refused_connection_is_unreachable() {
    // A port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a local port")
        .port();
    let mut config = Config::new(reaper_core::secret::Secret::new(TOKEN));
    config.base_url = format!("http://127.0.0.1:{port}");
    let provider = reaper_vercel_sandbox::VercelSandboxProvider::new(config).unwrap();
    let result = provider.destroy("sbx_any").await;
    assert!(
        matches!(result, Err(SandboxError::Unreachable(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_failed_log_stream_is_unreachable_never_a_short_output() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    fake.break_log_stream(&id);
    let result = provider
        .handle(&fake.session_of(&id))
        .unwrap()
        .exec("echo partial", opts(10_000))
        .await;
    match result {
        Err(SandboxError::Unreachable(message)) => {
            assert!(message.contains("sandbox_stream_closed"), "{message}")
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn a_log_stream_past_its_bound_is_an_error_never_a_truncation() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let bound = reaper_vercel_sandbox::log_stream_bound(common::OUTPUT_LIMIT);
    // Each empty entry is about 30 bytes: together they pass the bound.
    fake.flood_log_stream(&id, bound / 20);
    let result = provider
        .handle(&fake.session_of(&id))
        .unwrap()
        .exec("echo hi", opts(10_000))
        .await;
    match result {
        Err(SandboxError::Other(message)) => {
            assert!(message.contains("log stream"), "{message}");
            assert!(message.contains(&bound.to_string()), "{message}");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    assert_eq!(
        fake.api.count("killSessionCommand"),
        1,
        "{:?}",
        fake.operations()
    );
    // Empty entries within the bound are harmless.
    fake.flood_log_stream(&id, 1000);
    let out = provider
        .handle(&fake.session_of(&id))
        .unwrap()
        .exec("echo hi", opts(10_000))
        .await;
    assert_eq!(out.unwrap().stdout, "hi\n");
    fake.api.assert_no_violations();
}

#[tokio::test]
async fn every_request_carries_the_bearer_token_and_the_team() {
    let fake = FakeVercel::start().await;
    let provider = fake.provider();
    let id = fake.create_sandbox().await;
    let handle = provider.resume(&id).await.unwrap().unwrap();
    handle.exec("true", opts(10_000)).await.unwrap();
    provider.destroy(&id).await.unwrap();
    let requests = fake.api.requests();
    assert_eq!(requests.len(), 5);
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(
            r.query.contains(&format!("teamId={}", common::TEAM)),
            "{r:?}"
        );
    }
    fake.api.assert_no_violations();
}
