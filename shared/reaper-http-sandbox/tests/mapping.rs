//! How daemon answers (and their absence) become the core's sandbox errors. A scripted transport
//! injects the answers a real daemon rarely gives (503 from a proxy, a 200 to a DELETE); the
//! network failure is a real refused connection.

use std::sync::{Arc, Mutex};

use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::{ExecOptions, RunExitProbe, SandboxError, SandboxHandle, SandboxProvider};
use reaper_http_sandbox::{
    HttpProviderConfig, HttpRequest, HttpResponse, HttpSandboxProvider, HttpTransport,
    TransportError,
};

const TOKEN: &str = "test-token-0123456789";

/// Answers each request with the next scripted result and records what was sent.
#[derive(Default)]
struct Scripted {
    answers: Mutex<Vec<Result<HttpResponse, TransportError>>>,
    sent: Mutex<Vec<HttpRequest>>,
}

impl Scripted {
    fn answering(answers: Vec<Result<HttpResponse, TransportError>>) -> Arc<Self> {
        let mut answers = answers;
        answers.reverse();
        Arc::new(Scripted {
            answers: Mutex::new(answers),
            sent: Mutex::default(),
        })
    }

    fn sent(&self) -> Vec<HttpRequest> {
        self.sent.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl HttpTransport for Scripted {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        self.sent.lock().unwrap().push(request);
        self.answers
            .lock()
            .unwrap()
            .pop()
            .expect("a request nobody scripted an answer for")
    }
}

fn reply(status: u16, body: &str) -> Result<HttpResponse, TransportError> {
    Ok(HttpResponse::new(status, body.as_bytes()))
}

fn error_body(code: &str, message: &str) -> String {
    serde_json::json!({"error": {"code": code, "message": message}}).to_string()
}

fn provider(transport: Arc<Scripted>) -> HttpSandboxProvider {
    HttpSandboxProvider::with_transport(
        HttpProviderConfig::new("http://sandboxd.test/", TOKEN),
        transport,
    )
    .unwrap()
}

#[tokio::test]
async fn a_refused_connection_is_unreachable_and_the_probe_answers_unknown() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let provider = HttpSandboxProvider::new(HttpProviderConfig::new(
        format!("http://127.0.0.1:{port}"),
        TOKEN,
    ))
    .unwrap();
    let resumed = provider
        .resume("sbx-0123456789abcdef")
        .await
        .map(|h| h.is_some());
    assert!(
        matches!(&resumed, Err(SandboxError::Unreachable(m)) if m.contains("127.0.0.1")),
        "{resumed:?}"
    );
    let handle = provider.handle("sbx-0123456789abcdef").unwrap();
    let probe = probe_run_exit(&handle, "run-1", &ProbeOptions::default()).await;
    assert!(
        matches!(probe, RunExitProbe::Unknown { error: Some(_) }),
        "{probe:?}"
    );
    assert!(matches!(
        provider.destroy("sbx-0123456789abcdef").await,
        Err(SandboxError::Unreachable(_))
    ));
}

#[tokio::test]
async fn a_401_is_refused_with_a_message_that_the_token_is_wrong() {
    let transport = Scripted::answering(vec![reply(401, &error_body("unauthorized", "no"))]);
    let err = provider(transport)
        .resume("sbx-1")
        .await
        .err()
        .expect("a 401 is an error");
    match err {
        SandboxError::Refused(m) => assert!(m.contains("token is wrong"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[tokio::test]
async fn resume_of_a_sandbox_the_daemon_does_not_have_is_none() {
    let transport = Scripted::answering(vec![reply(
        404,
        &error_body("sandbox-not-found", "sandbox sbx-1 not found"),
    )]);
    assert!(provider(transport).resume("sbx-1").await.unwrap().is_none());
}

#[tokio::test]
async fn a_404_from_something_that_is_not_sandboxd_is_an_error_naming_the_base_url() {
    let transport = Scripted::answering(vec![reply(404, "<html>not found</html>")]);
    match provider(transport)
        .resume("sbx-1")
        .await
        .map(|h| h.is_some())
    {
        Err(SandboxError::Refused(m)) => assert!(m.contains("http://sandboxd.test/"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[tokio::test]
async fn destroy_is_ok_only_on_204_and_every_other_answer_is_reported() {
    let answers = vec![
        reply(409, &error_body("destroy-refused", "flag set")),
        reply(500, &error_body("internal", "cannot kill group 7")),
        reply(503, "upstream down"),
        reply(200, "{}"),
        Err(TransportError::TimedOut {
            url: "http://sandboxd.test/v1/sandboxes/sbx-1".into(),
            timeout_ms: 30_000,
        }),
        reply(204, ""),
    ];
    let provider = provider(Scripted::answering(answers));
    let results = destroy_six_times(&provider).await;
    assert!(matches!(&results[0], Err(SandboxError::Refused(m)) if m.contains("flag set")));
    assert!(matches!(&results[1], Err(SandboxError::Other(m)) if m.contains("cannot kill")));
    assert!(matches!(&results[2], Err(SandboxError::Unreachable(_))));
    assert!(results[3].is_err(), "a 200 is not the documented 204");
    assert!(matches!(&results[4], Err(SandboxError::Unreachable(_))));
    assert!(results[5].is_ok());
}

async fn destroy_six_times(provider: &HttpSandboxProvider) -> Vec<Result<(), SandboxError>> {
    let mut out = Vec::new();
    for _ in 0..6 {
        out.push(provider.destroy("sbx-1").await);
    }
    out
}

#[tokio::test]
async fn an_exec_killed_at_its_timeout_is_a_timeout_and_its_request_gets_the_margin() {
    let transport = Scripted::answering(vec![reply(
        422,
        &error_body(
            "exec-timeout",
            "the command in sandbox sbx-1 timed out after 250 ms; its process group was killed",
        ),
    )]);
    let handle = provider(transport.clone()).handle("sbx-1").unwrap();
    let result = handle
        .exec("sleep 9", ExecOptions { timeout_ms: 250 })
        .await;
    assert!(
        matches!(result, Err(SandboxError::Timeout(250))),
        "{result:?}"
    );
    let sent = transport.sent();
    assert_eq!(
        sent[0].timeout_ms,
        250 + reaper_http_sandbox::DEFAULT_EXEC_MARGIN_MS
    );
    assert_eq!(sent[0].url, "http://sandboxd.test/v1/sandboxes/sbx-1/exec");
    let body: serde_json::Value = serde_json::from_slice(sent[0].body.as_ref().unwrap()).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"command": "sleep 9", "timeoutMs": 250})
    );
}

#[tokio::test]
async fn an_output_limit_names_the_stream_the_daemon_names() {
    let limit_error = |stream: &str| {
        reply(
            422,
            &error_body(
                "output-limit-exceeded",
                &format!(
                    "sandbox command {stream} exceeded the 4096-byte output limit; read less \
                     per call (the daemon's --max-output-bytes); nothing was returned"
                ),
            ),
        )
    };
    let transport = Scripted::answering(vec![
        limit_error("stderr"),
        limit_error("stdout"),
        reply(
            422,
            &error_body(
                "output-limit-exceeded",
                "the 4096-byte output limit was hit",
            ),
        ),
    ]);
    let handle = provider(transport).handle("sbx-1").unwrap();
    let mut streams = Vec::new();
    for _ in 0..3 {
        match handle.exec("yes", ExecOptions { timeout_ms: 250 }).await {
            Err(SandboxError::OutputLimit {
                stream,
                limit: 4096,
            }) => streams.push(stream),
            other => panic!("expected an output-limit error, got {other:?}"),
        }
    }
    assert_eq!(streams[..2], ["stderr", "stdout"]);
    assert!(
        streams[2].contains("sbx-1"),
        "a message naming no stream falls back to the call: {}",
        streams[2]
    );
}

#[tokio::test]
async fn an_oversized_response_is_an_error_not_a_truncation() {
    let transport = Scripted::answering(vec![Err(TransportError::ResponseTooLarge {
        url: "u".into(),
        limit: 10,
    })]);
    let handle = provider(transport).handle("sbx-1").unwrap();
    match handle.exec("cat big", ExecOptions::default()).await {
        Err(SandboxError::Other(m)) => assert!(m.contains("max_response_bytes"), "{m}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_oversized_request_is_refused_before_anything_is_sent() {
    let transport = Scripted::answering(vec![]);
    let handle = provider(transport.clone()).handle("sbx-1").unwrap();
    let command = "x".repeat(reaper_http_sandbox::DEFAULT_MAX_REQUEST_BYTES);
    match handle.exec(&command, ExecOptions::default()).await {
        Err(SandboxError::Refused(m)) => assert!(m.contains("--max-body-bytes"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    assert!(transport.sent().is_empty());
}

#[tokio::test]
async fn hostile_sandbox_ids_never_reach_a_url() {
    let transport = Scripted::answering(vec![]);
    let provider = provider(transport.clone());
    for id in ["../x", "a/b", "", "a?b", "a%2fb", "..", &"a".repeat(65)] {
        assert!(matches!(
            provider.resume(id).await,
            Err(SandboxError::Refused(_))
        ));
        assert!(matches!(
            provider.destroy(id).await,
            Err(SandboxError::Refused(_))
        ));
        assert!(provider.handle(id).is_err());
    }
    assert!(transport.sent().is_empty());
}

#[test]
fn the_token_is_in_no_debug_output() {
    let transport = Scripted::answering(vec![]);
    let provider = provider(transport);
    let handle = provider.handle("sbx-1").unwrap();
    for text in [
        format!("{provider:?}"),
        format!("{handle:?}"),
        format!("{:?}", provider.config()),
    ] {
        assert!(!text.contains(TOKEN), "{text}");
    }
    let request = HttpRequest {
        method: reaper_http_sandbox::HttpMethod::Get,
        url: "u".into(),
        headers: vec![("authorization".into(), format!("Bearer {TOKEN}"))],
        body: None,
        timeout_ms: 1,
        max_response_bytes: 1,
    };
    assert!(!format!("{request:?}").contains(TOKEN));
}

#[test]
fn a_bad_base_url_or_token_is_refused_at_construction() {
    let t = || Scripted::answering(vec![]) as Arc<dyn HttpTransport>;
    assert!(HttpSandboxProvider::with_transport(
        HttpProviderConfig::new("127.0.0.1:1", TOKEN),
        t()
    )
    .is_err());
    assert!(HttpSandboxProvider::with_transport(
        HttpProviderConfig::new("http://h", "has space"),
        t()
    )
    .is_err());
    // A query or fragment would land in the middle of every request's URL.
    for base in ["http://h/?token=x", "http://h/#f"] {
        assert!(
            HttpSandboxProvider::with_transport(HttpProviderConfig::new(base, TOKEN), t()).is_err(),
            "{base}"
        );
    }
    let ok = HttpSandboxProvider::with_transport(HttpProviderConfig::new("http://h", TOKEN), t())
        .unwrap();
    assert_eq!(ok.name(), "sandboxd");
}

#[tokio::test]
async fn a_busy_daemon_or_a_429_is_retryable_and_the_probe_answers_unknown() {
    let busy = || {
        reply(
            503,
            &error_body(
                "too-many-execs",
                "64 commands are already running on this daemon",
            ),
        )
    };
    let transport = Scripted::answering(vec![busy(), reply(429, "slow down"), busy()]);
    let provider = provider(transport);
    let handle = provider.handle("sbx-1").unwrap();
    let exec = handle.exec("true", ExecOptions::default()).await;
    assert!(
        matches!(&exec, Err(SandboxError::Unreachable(m)) if m.contains("too-many-execs")),
        "{exec:?}"
    );
    let limited = handle.exec("true", ExecOptions::default()).await;
    assert!(
        matches!(&limited, Err(SandboxError::Unreachable(m)) if m.contains("429")),
        "{limited:?}"
    );
    let probe = probe_run_exit(&handle, "run-1", &ProbeOptions::default()).await;
    assert!(
        matches!(&probe, RunExitProbe::Unknown { error: Some(e) } if e.contains("too-many-execs")),
        "{probe:?}"
    );
}
