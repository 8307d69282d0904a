//! How envd's Connect answers that a real envd rarely gives become sandbox errors, through a
//! scripted `HttpTransport` (the provider takes any transport, as a Worker's `fetch` one), and a
//! real refused connection to envd telling "unreachable" from "gone".

mod common;

use std::sync::{Arc, Mutex};

use common::{E2bFake, API_KEY};
use reaper_core::secret::Secret;
use reaper_core::{ExecOptions, SandboxError, SandboxProvider};
use reaper_e2b::{E2bConfig, E2bProvider};
use reaper_http_sandbox::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use serde_json::json;

/// Answers each request with the next scripted result and records what was sent.
#[derive(Default)]
struct Scripted {
    answers: Mutex<Vec<Result<HttpResponse, TransportError>>>,
    sent: Mutex<Vec<HttpRequest>>,
}

impl Scripted {
    fn answering(mut answers: Vec<Result<HttpResponse, TransportError>>) -> Arc<Self> {
        answers.reverse();
        Arc::new(Scripted {
            answers: Mutex::new(answers),
            sent: Mutex::default(),
        })
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

const ID: &str = "i1a2b3c4d5e6f7g8h9j0";

fn running() -> Result<HttpResponse, TransportError> {
    let detail = json!({
        "templateID": "base", "sandboxID": ID, "clientID": "c", "startedAt": "2026-12-03T09:00:00Z",
        "endAt": "2026-12-03T10:00:00Z", "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024,
        "envdVersion": "0.2.4", "state": "running", "domain": null,
    });
    Ok(HttpResponse::new(200, detail.to_string()))
}

fn frame(flags: u8, message: serde_json::Value) -> Vec<u8> {
    let json = message.to_string();
    let mut out = vec![flags];
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json.as_bytes());
    out
}

fn stream(frames: &[Vec<u8>]) -> Result<HttpResponse, TransportError> {
    Ok(HttpResponse::new(200, frames.concat()))
}

fn end_error(code: &str) -> Vec<u8> {
    frame(2, json!({"error": {"code": code, "message": "scripted"}}))
}

fn provider(transport: Arc<Scripted>) -> E2bProvider {
    E2bProvider::with_transport(E2bConfig::new(Secret::new(API_KEY)), transport).unwrap()
}

async fn exec_answered(
    answers: Vec<Result<HttpResponse, TransportError>>,
) -> (Result<String, SandboxError>, Vec<HttpRequest>) {
    let transport = Scripted::answering([vec![running()], answers].concat());
    let provider = provider(transport.clone());
    let handle = provider.resume(ID).await.unwrap().unwrap();
    let result = handle
        .exec("echo hi", ExecOptions { timeout_ms: 1_000 })
        .await
        .map(|o| o.stdout);
    let sent = transport.sent.lock().unwrap().clone();
    (result, sent)
}

#[tokio::test]
async fn the_public_envd_url_and_connect_headers_are_used_without_the_api_key() {
    let (result, sent) = exec_answered(vec![stream(&[
        frame(0, json!({"event": {"data": {"stdout": "aGkK"}}})),
        frame(0, json!({"event": {"end": {"exited": true}}})),
        frame(2, json!({})),
    ])])
    .await;
    assert_eq!(result.unwrap(), "hi\n");
    assert_eq!(sent[0].url, format!("https://api.e2b.app/sandboxes/{ID}"));
    let start = &sent[1];
    assert_eq!(
        start.url,
        format!("https://49983-{ID}.e2b.app/process.Process/Start")
    );
    let header = |name: &str| {
        start
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("content-type"), Some("application/connect+json"));
    assert_eq!(header("connect-timeout-ms"), Some("1000"));
    // No access token in the detail: none is sent; the API key never goes to envd.
    assert_eq!(header("x-access-token"), None);
    assert_eq!(header("x-api-key"), None);
    assert!(
        start.timeout_ms > 1_000,
        "the request outlives envd's deadline"
    );
}

#[tokio::test]
async fn connect_error_codes_map_to_what_the_core_acts_on() {
    for (code, expected) in [
        ("unauthenticated", "refused"),
        ("permission_denied", "refused"),
        ("not_found", "not-found"),
        ("resource_exhausted", "unreachable"),
        ("internal", "other"),
    ] {
        let (result, _) = exec_answered(vec![stream(&[end_error(code)])]).await;
        let kind = match result {
            Err(SandboxError::Refused(_)) => "refused",
            Err(SandboxError::NotFound(_)) => "not-found",
            Err(SandboxError::Unreachable(_)) => "unreachable",
            Err(SandboxError::Other(_)) => "other",
            other => panic!("{code}: {other:?}"),
        };
        assert_eq!(kind, expected, "Connect code {code}");
    }
}

#[tokio::test]
async fn envd_unavailable_is_gone_when_the_control_plane_no_longer_has_the_sandbox() {
    let gone = Ok(HttpResponse::new(
        404,
        json!({"code": 404, "message": "not found"}).to_string(),
    ));
    let (result, sent) = exec_answered(vec![stream(&[end_error("unavailable")]), gone]).await;
    assert!(
        matches!(result, Err(SandboxError::NotFound(_))),
        "{result:?}"
    );
    assert_eq!(sent.len(), 3, "resume, Start, then one read to tell gone");
    let (result, _) = exec_answered(vec![stream(&[end_error("unavailable")]), running()]).await;
    assert!(
        matches!(result, Err(SandboxError::Unreachable(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_deadline_is_a_timeout_followed_by_the_kill_of_the_token() {
    let killed = stream(&[
        frame(0, json!({"event": {"end": {"exited": true}}})),
        frame(2, json!({})),
    ]);
    let (result, sent) =
        exec_answered(vec![stream(&[end_error("deadline_exceeded")]), killed]).await;
    assert!(
        matches!(result, Err(SandboxError::Timeout(1_000))),
        "{result:?}"
    );
    let message = |r: &HttpRequest| -> serde_json::Value {
        serde_json::from_slice(&r.body.as_ref().unwrap()[5..]).unwrap()
    };
    let token = message(&sent[1])["process"]["envs"]["REAPER_EXEC"]
        .as_str()
        .unwrap()
        .to_string();
    let kill = message(&sent[2]);
    let args = kill["process"]["args"].as_array().unwrap();
    assert_eq!(args.last().and_then(|a| a.as_str()), Some(token.as_str()));
}

#[tokio::test]
async fn a_malformed_or_unfinished_stream_is_an_error_never_an_empty_success() {
    for body in [
        vec![0, 0, 0, 0, 9, b'{'],
        frame(0, json!({"event": {"data": {"stdout": "aGkK"}}})),
        [
            frame(0, json!({"event": {"keepalive": {}}})),
            frame(2, json!({})),
        ]
        .concat(),
    ] {
        let (result, _) = exec_answered(vec![Ok(HttpResponse::new(200, body))]).await;
        assert!(matches!(result, Err(SandboxError::Other(_))), "{result:?}");
    }
}

#[tokio::test]
async fn an_unknown_sandbox_state_is_an_error_not_a_handle() {
    let odd = json!({
        "templateID": "base", "sandboxID": ID, "clientID": "c", "startedAt": "2026-12-03T09:00:00Z",
        "endAt": "2026-12-03T10:00:00Z", "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024,
        "envdVersion": "0.2.4", "state": "snapshotting",
    });
    let provider = provider(Scripted::answering(vec![Ok(HttpResponse::new(
        200,
        odd.to_string(),
    ))]));
    let resumed = provider.resume(ID).await.map(|h| h.is_some());
    assert!(
        matches!(&resumed, Err(SandboxError::Other(m)) if m.contains("snapshotting")),
        "{resumed:?}"
    );
}

#[tokio::test]
async fn an_unreachable_envd_of_a_running_sandbox_is_unreachable_not_gone() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let fake = E2bFake::start_with(|c| {
        c.envd_url_template = format!("http://127.0.0.1:{port}/{{sandboxID}}");
    })
    .await;
    let id = fake.create_sandbox().await;
    let handle = fake.provider.resume(&id).await.unwrap().unwrap();
    let result = handle.exec("echo hi", ExecOptions::default()).await;
    assert!(
        matches!(result, Err(SandboxError::Unreachable(_))),
        "{result:?}"
    );
    fake.provider.destroy(&id).await.unwrap();
}
