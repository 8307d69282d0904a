//! envd's `process.Process/Start` against E2B's published envd API document
//! (`openapi/envd-process-start.openapi.yml`; where it comes from: `openapi/SOURCE.md`): every
//! exchange the provider has with the fake (the client's requests and the fake's answers) fits
//! the document, and the check rejects what breaks it, so the fake cannot drift from E2B's shapes
//! unnoticed.

mod common;

use bytes::Bytes;
use common::envd::{self, check_exchange, CONNECT_JSON};
use common::E2bFake;
use reaper_core::{ExecOptions, SandboxError};
use reaper_fake_api::Recorded;
use serde_json::{json, Value};

#[test]
fn the_stored_envd_excerpt_loads_and_every_schema_compiles() {
    let doc = envd::document();
    assert_eq!(
        doc.title(),
        "E2B Sandbox API (process.Process/Start excerpt)"
    );
    assert_eq!(doc.operation_ids(), ["process.Process.Start"]);
    doc.compile_all().expect("every schema compiles");
}

#[tokio::test]
async fn every_process_start_the_provider_sends_and_the_fake_answers_fits_e2bs_published_envd_document(
) {
    let fake = E2bFake::start_with(|c| {
        c.output_limit = 256 * 1024;
        c.max_response_bytes = 8 * 1024 * 1024;
    })
    .await;
    let id = fake.create_sandbox().await;
    let handle = reaper_core::SandboxProvider::resume(&fake.provider, &id)
        .await
        .unwrap()
        .unwrap();
    // Both streams and an exit code; output past envd's 32 KiB read size (several data
    // events); a command past its timeout (an end of stream carrying deadline_exceeded).
    let out = handle
        .exec("printf out; printf err >&2; exit 3", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str(), out.exit_code),
        ("out", "err", 3)
    );
    let out = handle
        .exec(
            "head -c 100000 /dev/zero | tr '\\0' x",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), 100_000);
    let late = handle
        .exec("exec sleep 600", ExecOptions { timeout_ms: 300 })
        .await;
    assert!(matches!(late, Err(SandboxError::Timeout(300))), "{late:?}");

    let doc = envd::document();
    let exchanges = fake.api.requests();
    let starts: Vec<&Recorded> = envd::starts(&exchanges).collect();
    // The three execs, and the kill the provider runs after the deadline (a Start of its own).
    assert_eq!(starts.len(), 4);
    let checked: Vec<_> = starts
        .iter()
        .map(|r| check_exchange(&doc, r, true))
        .collect();
    for (exchange, found) in starts.iter().zip(&checked) {
        assert!(
            found.violations.is_empty(),
            "{} {}:\n{}",
            exchange.method,
            exchange.path,
            found.violations.join("\n")
        );
        assert!(found.ended, "every answer ends its stream");
    }
    // start + stdout + stderr + end; start + 4 × 32 KiB data + end.
    assert!(checked[0].messages >= 4, "{}", checked[0].messages);
    assert!(checked[1].messages >= 5, "{}", checked[1].messages);
    assert_eq!(
        checked
            .iter()
            .map(|c| c.error_code.as_deref())
            .collect::<Vec<_>>(),
        [None, None, Some("deadline_exceeded"), None]
    );
}

/// A well-formed exchange, as the document has it.
fn exchange(request: &[u8], headers: &[(&str, &str)], answer: &[u8]) -> Recorded {
    Recorded {
        seq: 0,
        operation_id: None,
        path_template: None,
        method: "POST".into(),
        path: "/envd/i0/process.Process/Start".into(),
        query: String::new(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: Bytes::copy_from_slice(request),
        status: Some(200),
        response_headers: vec![("content-type".into(), CONNECT_JSON.into())],
        response_body: answer.to_vec(),
        fault: None,
    }
}

fn frame(flags: u8, message: &Value) -> Vec<u8> {
    let json = message.to_string();
    let mut out = vec![flags];
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json.as_bytes());
    out
}

const HEADERS: &[(&str, &str)] = &[
    ("content-type", CONNECT_JSON),
    ("connect-protocol-version", "1"),
    ("connect-timeout-ms", "30000"),
];

fn request() -> Value {
    json!({"process": {"cmd": "/bin/sh", "args": ["-c", "true"], "envs": {}}, "stdin": false})
}

fn answer(events: &[Value], end: &Value) -> Vec<u8> {
    let mut out: Vec<u8> = events
        .iter()
        .flat_map(|e| frame(0, &json!({ "event": e })))
        .collect();
    out.extend(frame(2, end));
    out
}

fn good_events() -> Vec<Value> {
    vec![
        json!({"start": {"pid": 7}}),
        json!({"data": {"stdout": "b3V0"}}),
        json!({"end": {"exitCode": 3, "exited": true, "status": "exit status 3"}}),
    ]
}

/// The violations of an exchange built from these parts.
fn violations(request: &[u8], headers: &[(&str, &str)], answer: &[u8]) -> Vec<String> {
    check_exchange(&envd::document(), &exchange(request, headers, answer), true).violations
}

/// What is broken, the request body, its headers, the answer body.
type Case<'a> = (&'a str, Vec<u8>, Vec<(&'a str, &'a str)>, Vec<u8>);

#[test]
fn the_envd_document_check_rejects_what_breaks_the_published_shapes() {
    let good_request = frame(0, &request());
    let good_answer = answer(&good_events(), &json!({}));
    assert_eq!(
        violations(&good_request, HEADERS, &good_answer),
        Vec::<String>::new(),
        "a well-formed exchange"
    );

    let mut cases: Vec<Case> = Vec::new();
    let headers = HEADERS.to_vec();
    let without = |name: &str| -> Vec<(&str, &str)> {
        HEADERS
            .iter()
            .copied()
            .filter(|(k, _)| *k != name)
            .collect()
    };
    cases.push((
        "a unary JSON content type",
        good_request.clone(),
        [("content-type", "application/json")]
            .into_iter()
            .chain(without("content-type"))
            .collect(),
        good_answer.clone(),
    ));
    cases.push((
        "no Connect-Protocol-Version",
        good_request.clone(),
        without("connect-protocol-version"),
        good_answer.clone(),
    ));
    cases.push((
        "a Connect-Timeout-Ms that is not a number",
        good_request.clone(),
        [("connect-timeout-ms", "soon")]
            .into_iter()
            .chain(without("connect-timeout-ms"))
            .collect(),
        good_answer.clone(),
    ));
    cases.push((
        "an unframed request",
        request().to_string().into_bytes(),
        headers.clone(),
        good_answer.clone(),
    ));
    cases.push((
        "two request envelopes",
        [good_request.clone(), good_request.clone()].concat(),
        headers.clone(),
        good_answer.clone(),
    ));
    cases.push((
        "a compressed request envelope",
        frame(1, &request()),
        headers.clone(),
        good_answer.clone(),
    ));
    cases.push((
        "a StartRequest field the document lacks",
        frame(0, &json!({"process": {"cmd": "sh"}, "command": "sh"})),
        headers.clone(),
        good_answer.clone(),
    ));
    cases.push((
        "ProcessConfig.args that are not strings",
        frame(0, &json!({"process": {"cmd": "sh", "args": [1]}})),
        headers.clone(),
        good_answer.clone(),
    ));
    cases.push((
        "an exit code sent as a string",
        good_request.clone(),
        headers.clone(),
        answer(&[json!({"end": {"exitCode": "3"}})], &json!({})),
    ));
    cases.push((
        "an event with two members of its oneof",
        good_request.clone(),
        headers.clone(),
        answer(
            &[json!({"start": {"pid": 1}, "end": {"exitCode": 0}})],
            &json!({}),
        ),
    ));
    cases.push((
        "output that is not base64",
        good_request.clone(),
        headers.clone(),
        answer(&[json!({"data": {"stdout": "not base64!"}})], &json!({})),
    ));
    cases.push((
        "an end-of-stream error code Connect does not have",
        good_request.clone(),
        headers.clone(),
        answer(
            &[],
            &json!({"error": {"code": "timeout", "message": "late"}}),
        ),
    ));
    cases.push((
        "no end of stream",
        good_request.clone(),
        headers.clone(),
        good_events()
            .iter()
            .flat_map(|e| frame(0, &json!({ "event": e })))
            .collect(),
    ));
    cases.push((
        "a message after the end of stream",
        good_request.clone(),
        headers.clone(),
        [
            good_answer.clone(),
            frame(0, &json!({"event": {"keepalive": {}}})),
        ]
        .concat(),
    ));
    for (what, request, headers, answer) in cases {
        let found = violations(&request, &headers, &answer);
        assert!(!found.is_empty(), "{what} went unnoticed");
    }
}
