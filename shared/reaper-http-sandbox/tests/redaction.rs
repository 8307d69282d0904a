//! Credentials in the base URL (`REAPER_SANDBOXD_URL=https://user:pass@host`) never reach a
//! `Debug` output, a log line or an error. Its own test binary: the log capture is a
//! thread-scoped subscriber, and tracing caches each event's interest process-wide, so no other
//! test may hit the same events concurrently.

use std::sync::{Arc, Mutex};

use reaper_core::{ExecOptions, SandboxError, SandboxHandle, SandboxProvider};
use reaper_http_sandbox::{
    HttpProviderConfig, HttpRequest, HttpResponse, HttpSandboxProvider, HttpTransport,
    TransportError,
};

const TOKEN: &str = "test-token-0123456789";

/// Answers each request with the next scripted result.
struct Scripted(Mutex<Vec<Result<HttpResponse, TransportError>>>);

impl Scripted {
    fn answering(mut answers: Vec<Result<HttpResponse, TransportError>>) -> Arc<Self> {
        answers.reverse();
        Arc::new(Scripted(Mutex::new(answers)))
    }
}

#[async_trait::async_trait]
impl HttpTransport for Scripted {
    async fn send(&self, _request: HttpRequest) -> Result<HttpResponse, TransportError> {
        self.0
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

/// Collects every log line written while it is the default subscriber.
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

#[tokio::test]
async fn credentials_in_the_base_url_are_in_no_debug_log_or_error() {
    const SECRETS: [&str; 2] = ["alice", "hunter22"];
    let assert_clean = |what: &str, text: &str| {
        for secret in SECRETS {
            assert!(!text.contains(secret), "{what} shows {secret:?}: {text}");
        }
    };
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    // A real transport to a port nothing listens on: its error quotes the URL it was given.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://alice:hunter22@127.0.0.1:{port}/prefix");
    let real = HttpSandboxProvider::new(HttpProviderConfig::new(&base, TOKEN)).unwrap();
    let handle = real.handle("sbx-1").unwrap();
    let unreachable = handle
        .exec("true", ExecOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(unreachable, SandboxError::Unreachable(_)));
    assert_clean("an unreachable error", &unreachable.to_string());
    assert!(
        unreachable
            .to_string()
            .contains(&format!("127.0.0.1:{port}/prefix")),
        "the error still says where: {unreachable}"
    );
    assert_clean("the provider's Debug", &format!("{real:?}"));
    assert_clean("the handle's Debug", &format!("{handle:?}"));
    assert_clean("the config's Debug", &format!("{:?}", real.config()));

    // Answers whose errors name the base URL.
    let scripted = HttpSandboxProvider::with_transport(
        HttpProviderConfig::new(&base, TOKEN),
        Scripted::answering(vec![
            reply(401, &error_body("unauthorized", "no")),
            reply(404, "not here"),
            reply(503, "busy"),
        ]),
    )
    .unwrap();
    for _ in 0..3 {
        let err = scripted.resume("sbx-1").await.err().expect("an error");
        assert_clean("an answer's error", &err.to_string());
    }
    let request = HttpRequest {
        method: reaper_http_sandbox::HttpMethod::Get,
        url: format!("{base}/v1/healthz"),
        headers: vec![],
        body: None,
        timeout_ms: 1,
        max_response_bytes: 1,
    };
    assert_clean("a request's Debug", &format!("{request:?}"));
    let refused = HttpSandboxProvider::with_transport(
        HttpProviderConfig::new("ftp://alice:hunter22@h", TOKEN),
        Scripted::answering(vec![]),
    )
    .unwrap_err();
    assert_clean("a configuration error", &refused.to_string());

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("sandboxd request"),
        "nothing was logged: {logs}"
    );
    assert_clean("the log", &logs);
}
