//! The fake server over real HTTP (reqwest on loopback): checking, recording, faults,
//! streaming and shutdown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reaper_fake_api::{
    handler_fn, FakeApi, FakeApiOptions, FakeRequest, FakeResponse, Fault, Handler, OpenApi,
};
use serde_json::json;
use tokio::sync::{mpsc, Mutex};

fn doc() -> Arc<OpenApi> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sandboxes.yaml");
    Arc::new(OpenApi::from_file(path).expect("the fixture loads"))
}

/// A well-behaved fake of the fixture's API.
fn sandboxes() -> Arc<dyn Handler> {
    handler_fn(|req: FakeRequest| async move {
        let sandbox =
            |id: &str| json!({"id": id, "state": "started", "createdAt": "2026-12-03T09:00:00Z"});
        match req.operation_id.as_deref() {
            Some("getSandbox") => match req.param("sandboxId") {
                Some("sbx-gone") => FakeResponse::json(404, &json!({"message": "not found"})),
                Some(id) => FakeResponse::json(200, &sandbox(id)),
                None => FakeResponse::empty(500),
            },
            Some("deleteSandbox") => FakeResponse::empty(204),
            Some("createSandbox") => {
                let body: serde_json::Value = req.json().unwrap_or_default();
                let name = body["name"].as_str().unwrap_or("x").to_string();
                FakeResponse::json(201, &sandbox(&format!("sbx-{name}")))
            }
            _ => FakeResponse::json(404, &json!({"message": "no such route"})),
        }
    })
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

const TOKEN: &str = "Bearer t0ken";

#[tokio::test]
async fn a_valid_exchange_is_answered_recorded_and_leaves_no_violation() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    assert!(fake.url().ends_with("/api"), "{}", fake.url());
    let response = client()
        .post(format!("{}/sandbox", fake.url()))
        .header("authorization", TOKEN)
        .json(&json!({"name": "agent"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["id"], "sbx-agent");

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.operation_id.as_deref(), Some("createSandbox"));
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/api/sandbox")
    );
    assert_eq!(r.header("Authorization"), Some(TOKEN));
    assert_eq!(r.body, Bytes::from(r#"{"name":"agent"}"#));
    assert_eq!(r.status, Some(201));
    assert_eq!(fake.count("createSandbox"), 1);
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_violating_request_is_still_answered_and_recorded_as_a_violation() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    // No credentials, and an undeclared path.
    let response = client()
        .get(format!("{}/sandbox/sbx-1", fake.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "the handler still answers");
    let response = client()
        .get(format!("{}/nowhere", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);

    let violations = fake.violations();
    assert_eq!(violations.len(), 2, "{violations:#?}");
    assert!(violations[0].starts_with("request GET /api/sandbox/sbx-1"));
    assert!(violations[0].contains("credentials are missing"));
    assert!(violations[1].contains("no path of the document"));
    assert_eq!(fake.requests()[1].operation_id, None);

    let panic =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fake.assert_no_violations()))
            .expect_err("assert_no_violations panics");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("2 violation(s)"), "{message}");
    assert!(message.contains("  1. request GET") && message.contains("  2. request GET"));
}

#[tokio::test]
async fn a_handler_answer_that_breaks_the_document_is_a_violation() {
    let handler = handler_fn(|_req: FakeRequest| async move {
        FakeResponse::json(200, &json!({"id": "sbx-1", "state": "melting"}))
    });
    let fake = FakeApi::start(doc(), handler).await;
    let response = client()
        .get(format!("{}/sandbox/sbx-1", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let violations = fake.violations().join("\n");
    assert!(
        violations.starts_with("response GET /sandbox/{sandboxId} → 200"),
        "{violations}"
    );
    assert!(violations.contains("\"createdAt\" is a required property"));
    assert!(violations.contains("\"melting\" is not one of"));
}

#[tokio::test]
async fn an_injected_429_with_retry_after_answers_as_told_then_the_handler_resumes() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    fake.inject(
        Fault::json(429, &json!({"message": "slow down"}))
            .with_header("Retry-After", "7")
            .on("deleteSandbox"),
    );
    let client = client();
    let get = |id: &str| {
        client
            .get(format!("{}/sandbox/{id}", fake.url()))
            .header("authorization", TOKEN)
            .send()
    };
    let delete = || {
        client
            .delete(format!("{}/sandbox/sbx-1", fake.url()))
            .header("authorization", TOKEN)
            .send()
    };
    assert_eq!(
        get("sbx-1").await.unwrap().status(),
        200,
        "other operations"
    );
    let limited = delete().await.unwrap();
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "7");
    assert_eq!(
        limited.json::<serde_json::Value>().await.unwrap(),
        json!({"message": "slow down"})
    );
    assert_eq!(delete().await.unwrap().status(), 204, "used up after once");

    let requests = fake.requests();
    assert_eq!(
        requests[1].fault.as_deref(),
        Some("respond 429 on deleteSandbox")
    );
    assert_eq!(requests[2].fault, None);
    fake.assert_no_violations();
}

#[tokio::test]
async fn injected_answers_are_checked_unless_marked_undocumented() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    fake.inject(Fault::json(503, &json!({"message": "down"})).on("getSandbox"));
    fake.inject(Fault::respond(502).on("getSandbox").undocumented());
    let client = client();
    for expected in [503, 502] {
        let response = client
            .get(format!("{}/sandbox/sbx-1", fake.url()))
            .header("authorization", TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected);
    }
    let violations = fake.violations();
    assert_eq!(violations.len(), 1, "{violations:#?}");
    assert!(violations[0].contains("status 503 is not a declared response"));
}

#[tokio::test]
async fn a_fault_applies_the_given_number_of_times_to_any_operation() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    fake.inject(Fault::respond(500).times(2).undocumented());
    let client = client();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = client
            .get(format!("{}/sandbox/sbx-1", fake.url()))
            .header("authorization", TOKEN)
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [500, 500, 200]);
}

#[tokio::test]
async fn a_stalled_request_times_out_a_client_with_a_short_timeout() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    fake.inject(Fault::stall().on("getSandbox"));
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = impatient
        .get(format!("{}/sandbox/sbx-1", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .expect_err("a stalled request never answers");
    assert!(err.is_timeout(), "{err:?}");
    let requests = fake.requests();
    assert_eq!(requests[0].status, None);
    assert_eq!(requests[0].fault.as_deref(), Some("stall on getSandbox"));
}

#[tokio::test]
async fn dropping_the_fake_ends_a_stalled_request_and_closes_the_port() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    fake.inject(Fault::stall());
    let addr = fake.addr();
    let url = format!("{}/sandbox/sbx-1", fake.url());
    let (sent_tx, mut sent_rx) = mpsc::channel::<()>(1);
    let patient = tokio::spawn(async move {
        let request = client().get(url).header("authorization", TOKEN).send();
        sent_tx.send(()).await.unwrap();
        request.await
    });
    sent_rx.recv().await.unwrap();
    // Wait (bounded) until the stalled request reached the fake, then drop it.
    let reached = async {
        while fake.requests().is_empty() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), reached)
        .await
        .expect("the request reaches the fake");
    drop(fake);

    let outcome = tokio::time::timeout(Duration::from_secs(5), patient)
        .await
        .expect("the stalled request ends when the fake is dropped")
        .unwrap();
    assert!(outcome.is_err(), "{outcome:?}");
    // The listener goes with the server task.
    let refused = async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), refused)
        .await
        .expect("the port is closed after the drop");
}

#[tokio::test]
async fn an_injected_close_drops_the_connection_without_an_answer() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    fake.inject(Fault::close());
    let err = client()
        .get(format!("{}/sandbox/sbx-1", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .expect_err("no answer");
    assert!(!err.is_timeout(), "{err:?}");
    assert!(err.is_request() || err.is_connect(), "{err:?}");
}

#[tokio::test]
async fn streamed_chunks_arrive_in_order_as_they_are_sent() {
    // The test feeds the handler's stream itself, one chunk at a time, and sends the next only
    // after the client has read the previous one: chunks cannot be buffered into one.
    let feed: Arc<Mutex<Option<mpsc::Sender<Bytes>>>> = Arc::default();
    let handler = {
        let feed = feed.clone();
        handler_fn(move |_req: FakeRequest| {
            let feed = feed.clone();
            async move {
                let (response, tx) = FakeResponse::channel(200, "application/x-ndjson");
                *feed.lock().await = Some(tx);
                response
            }
        })
    };
    let fake = FakeApi::start(doc(), handler).await;
    let mut response = client()
        .get(format!("{}/sandbox/sbx-1/logs", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let tx = feed.lock().await.take().expect("the handler ran");
    let lines: Vec<String> = (0..3)
        .map(|i| format!("{{\"stream\":\"stdout\",\"data\":\"line {i}\"}}\n"))
        .collect();
    for line in &lines {
        tx.send(Bytes::from(line.clone())).await.unwrap();
        // Bounded: a server that buffered chunks would never hand this one over.
        let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk())
            .await
            .expect("each chunk arrives before the next is sent")
            .unwrap()
            .expect("a chunk");
        assert_eq!(chunk, Bytes::from(line.clone()));
    }
    drop(tx);
    assert_eq!(response.chunk().await.unwrap(), None, "the stream ended");
    assert_eq!(
        fake.requests()[0].response_body,
        lines.concat().into_bytes(),
        "the record keeps what was streamed"
    );
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_stream_of_an_undeclared_content_type_is_a_violation() {
    let handler = handler_fn(|_req: FakeRequest| async move {
        FakeResponse::stream(
            200,
            "text/event-stream",
            futures::stream::iter([Bytes::from("data: x\n\n")]),
        )
    });
    let fake = FakeApi::start(doc(), handler).await;
    let response = client()
        .get(format!("{}/sandbox/sbx-1/logs", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "data: x\n\n");
    let violations = fake.violations().join("\n");
    assert!(
        violations.contains("`text/event-stream`, which the document does not declare"),
        "{violations}"
    );
}

#[tokio::test]
async fn paths_under_an_undocumented_prefix_reach_the_handler_unchecked() {
    let handler = handler_fn(|req: FakeRequest| async move {
        assert_eq!(req.operation_id, None);
        FakeResponse::bytes(200, "application/connect+json", req.body)
    });
    let options = FakeApiOptions::default().undocumented_prefix("/process.Process/");
    let fake = FakeApi::start_with(doc(), handler, options).await;
    let response = client()
        .post(format!("{}/process.Process/Start", fake.origin()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "{}");
    assert_eq!(fake.requests()[0].path, "/process.Process/Start");
    fake.assert_no_violations();
}

#[tokio::test]
async fn clearing_the_log_restarts_counting_without_forgetting_violations() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    let client = client();
    let get = || client.get(format!("{}/sandbox/sbx-1", fake.url())).send();
    get().await.unwrap();
    fake.clear_requests();
    get().await.unwrap();
    assert_eq!(fake.count("getSandbox"), 1);
    assert_eq!(fake.requests()[0].seq, 1);
    assert_eq!(fake.violations().len(), 2, "both lacked credentials");
}

#[tokio::test]
async fn operations_without_ids_are_named_by_method_and_template() {
    let doc = OpenApi::parse(
        r#"
openapi: 3.0.0
info: {title: no ids, version: "1"}
paths:
  /sandboxes/{sandboxID}:
    parameters:
      - {name: sandboxID, in: path, required: true, schema: {type: string}}
    get:
      responses:
        "200": {description: ok}
    delete:
      responses:
        "204": {description: gone}
        "404": {description: not found}
"#,
    )
    .unwrap();
    let handler = handler_fn(|req: FakeRequest| async move {
        let op = req.operation.expect("matched");
        assert_eq!(req.operation_id, None);
        assert_eq!(
            op.name(),
            format!("{} /sandboxes/{{sandboxID}}", req.method)
        );
        FakeResponse::empty(if req.method == "GET" { 200 } else { 204 })
    });
    let fake = FakeApi::start(Arc::new(doc), handler).await;
    fake.inject(Fault::respond(404).on("DELETE /sandboxes/{sandboxID}"));
    let client = client();
    let url = format!("{}/sandboxes/s1", fake.url());
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    assert_eq!(client.delete(&url).send().await.unwrap().status(), 404);
    assert_eq!(client.delete(&url).send().await.unwrap().status(), 204);
    assert_eq!(fake.count("GET /sandboxes/{sandboxID}"), 1);
    assert_eq!(fake.count("DELETE /sandboxes/{sandboxID}"), 2);
    assert!(fake.requests()[1].is("DELETE /sandboxes/{sandboxID}"));
    fake.assert_no_violations();
}

#[tokio::test]
async fn a_panicking_handler_answers_500_and_is_reported() {
    let handler = handler_fn(|req: FakeRequest| async move {
        if req.operation_id.as_deref() == Some("getSandbox") {
            panic!("no fake for {}", req.path);
        }
        FakeResponse::empty(204)
    });
    let fake = FakeApi::start(doc(), handler).await;
    let response = client()
        .get(format!("{}/sandbox/sbx-1", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    assert_eq!(
        fake.violations(),
        ["the handler panicked on GET /api/sandbox/sbx-1: no fake for /api/sandbox/sbx-1"]
    );
    // The server goes on serving.
    let response = client()
        .delete(format!("{}/sandbox/sbx-1", fake.url()))
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_each_answered_and_recorded() {
    let fake = FakeApi::start(doc(), sandboxes()).await;
    let client = client();
    let answers = futures::future::join_all((0..20).map(|i| {
        client
            .get(format!("{}/sandbox/sbx-{i}", fake.url()))
            .header("authorization", TOKEN)
            .send()
    }))
    .await;
    for (i, answer) in answers.into_iter().enumerate() {
        let body: serde_json::Value = answer.unwrap().json().await.unwrap();
        assert_eq!(body["id"], format!("sbx-{i}"));
    }
    let requests = fake.requests();
    assert_eq!(requests.len(), 20);
    assert!(requests.iter().all(|r| r.status == Some(200)));
    let mut seqs: Vec<u64> = requests.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..20).collect::<Vec<u64>>());
    fake.assert_no_violations();
}

#[tokio::test]
async fn streamed_json_lines_are_checked_line_by_line_when_asked() {
    // A line split across chunks, a bad second line, and a last line without its newline.
    let chunks = [
        "{\"stream\":\"stdout\",\"da",
        "ta\":\"x\"}\n{\"stream\":\"weird\",\"data\":\"y\"}\n{\"stream\":",
        "\"stderr\"}",
    ];
    let handler = handler_fn(move |_req: FakeRequest| async move {
        let chunks = chunks.map(|c: &'static str| Bytes::from_static(c.as_bytes()));
        FakeResponse::stream(200, "application/x-ndjson", futures::stream::iter(chunks))
    });
    let get = |fake: &FakeApi| {
        client()
            .get(format!("{}/sandbox/sbx-1/logs", fake.url()))
            .header("authorization", TOKEN)
            .send()
    };

    let unchecked = FakeApi::start(doc(), handler.clone()).await;
    get(&unchecked).await.unwrap().text().await.unwrap();
    unchecked.assert_no_violations();

    let options = FakeApiOptions::default().check_json_lines();
    let fake = FakeApi::start_with(doc(), handler, options).await;
    let body = get(&fake).await.unwrap().text().await.unwrap();
    assert_eq!(body, chunks.concat());
    let violations = fake.violations();
    assert_eq!(violations.len(), 2, "{violations:#?}");
    assert!(violations[0].contains("line 2") && violations[0].contains("\"weird\" is not one of"));
    assert!(violations[1].contains("line 3") && violations[1].contains("\"data\" is a required"));
}

#[tokio::test]
async fn the_record_keeps_the_query_as_sent_and_decodes_it_on_demand() {
    let handler = handler_fn(|req: FakeRequest| async move {
        assert_eq!(req.query("projectId"), Some("p 1"));
        FakeResponse::json(200, &json!([]))
    });
    let fake = FakeApi::start(doc(), handler).await;
    let response = client()
        .get(format!(
            "{}/sandbox?projectId=p%201&labels=a&labels=b",
            fake.url()
        ))
        .header("authorization", TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let r = &fake.requests()[0];
    assert_eq!(r.query, "projectId=p%201&labels=a&labels=b");
    assert_eq!(r.query_param("projectId").as_deref(), Some("p 1"));
    assert_eq!(r.query_param("labels").as_deref(), Some("a"));
    assert_eq!(r.query_param("absent"), None);
    fake.assert_no_violations();
}
