//! Holds envd `process.Process/Start` exchanges to E2B's published envd API document
//! (`openapi/envd-process-start.openapi.yml`, see `openapi/SOURCE.md`).
//!
//! The document declares the exchange as `application/connect+json` with `StartRequest` and
//! `StartResponse` bodies, its `default` answer as `connect.error`, and the
//! `Connect-Protocol-Version` / `Connect-Timeout-Ms` headers. What the document leaves to the
//! Connect protocol (its generator's `with-streaming` mode) is checked here: a streaming body is
//! a sequence of envelopes (one flags byte, a 4-byte big-endian length, the message); the
//! request carries exactly one message envelope (flags 0, no compression); the answer carries
//! message envelopes (flags 0) and ends with one end-of-stream envelope (flags 0x02) holding
//! `{"error"?: connect.error, "metadata"?: {...}}`. Each message is then checked by
//! `reaper_fake_api` against the document's schema, with the document's own headers and content
//! type, and `bytes` fields (`format: byte`, which the validator leaves alone) must be base64.

use std::sync::Arc;

use base64::Engine;
use reaper_fake_api::{OpenApi, Recorded};
use serde_json::Value;

/// The RPC's path in the document.
pub const START: &str = "/process.Process/Start";
/// The one media type this client speaks.
pub const CONNECT_JSON: &str = "application/connect+json";

/// The stored envd document excerpt.
pub fn document() -> Arc<OpenApi> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/openapi/envd-process-start.openapi.yml"
    );
    Arc::new(OpenApi::from_file(path).expect("the stored envd document loads"))
}

/// What checking one exchange found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Message envelopes of the answer, each checked against `StartResponse`.
    pub messages: usize,
    /// Whether the answer ended with its end-of-stream envelope.
    pub ended: bool,
    /// The end-of-stream error's code, if it carried one.
    pub error_code: Option<String>,
    pub violations: Vec<String>,
}

/// One envelope of a Connect streaming body.
struct Envelope<'a> {
    flags: u8,
    message: &'a [u8],
}

/// Splits a body into envelopes; the bytes after the last whole envelope are returned apart
/// (a stream the client cut short ends in the middle of one).
fn envelopes(body: &[u8]) -> (Vec<Envelope<'_>>, &[u8]) {
    let mut out = Vec::new();
    let mut rest = body;
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if rest.len() < 5 + len {
            break;
        }
        out.push(Envelope {
            flags: rest[0],
            message: &rest[5..5 + len],
        });
        rest = &rest[5 + len..];
    }
    (out, rest)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `format: byte` fields of a `StartResponse` message must hold base64.
fn check_bytes(message: &Value, violations: &mut Vec<String>) {
    let Some(data) = message.pointer("/event/data").and_then(Value::as_object) else {
        return;
    };
    for (stream, value) in data {
        if let Some(text) = value.as_str() {
            if base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_err()
            {
                violations.push(format!(
                    "ProcessEvent.DataEvent.{stream} is `bytes` (format: byte) but is not base64"
                ));
            }
        }
    }
}

/// Checks one `process.Process/Start` exchange: the request always, the answer when it is a
/// Connect answer (status 200; the sandbox proxy's own HTTP errors are not envd's). With
/// `whole`, the answer must have ended (its end-of-stream envelope, nothing after it).
pub fn check_exchange(doc: &OpenApi, exchange: &Recorded, whole: bool) -> Checked {
    let mut checked = Checked::default();
    let v = &mut checked.violations;

    // The request: one message envelope, whose message fits `StartRequest`; the headers and
    // the content type are the document's.
    let (sent, trailing) = envelopes(&exchange.body);
    if !trailing.is_empty() {
        v.push(format!(
            "request: {} bytes after the last whole envelope",
            trailing.len()
        ));
    }
    if sent.len() != 1 {
        v.push(format!(
            "request: a server-streaming call sends exactly one envelope, this one sent {}",
            sent.len()
        ));
    }
    let mut operation = None;
    for envelope in &sent {
        if envelope.flags != 0 {
            v.push(format!(
                "request: envelope flags {:#04x}: a request message is sent uncompressed \
                 with flags 0",
                envelope.flags
            ));
        }
        let check =
            doc.inspect_request(&exchange.method, START, &exchange.headers, envelope.message);
        v.extend(
            check
                .violations
                .into_iter()
                .map(|e| format!("request: {e}")),
        );
        operation = operation.or(check.operation);
    }
    if sent.is_empty() {
        let check = doc.inspect_request(&exchange.method, START, &exchange.headers, b"");
        v.extend(
            check
                .violations
                .into_iter()
                .map(|e| format!("request: {e}")),
        );
    }
    let Some(op) = operation else {
        return checked;
    };

    // The answer.
    if exchange.status != Some(200) {
        return checked;
    }
    let headers = &exchange.response_headers;
    if let Err(e) = doc.check_streamed_response(&op, 200, headers) {
        v.extend(e.into_iter().map(|e| format!("response: {e}")));
    }
    let (answered, trailing) = envelopes(&exchange.response_body);
    if whole && !trailing.is_empty() {
        v.push(format!(
            "response: {} bytes after the last whole envelope",
            trailing.len()
        ));
    }
    for (i, envelope) in answered.iter().enumerate() {
        let json: Value = match serde_json::from_slice(envelope.message) {
            Ok(json) => json,
            Err(e) => {
                v.push(format!("response: envelope {} is not JSON: {e}", i + 1));
                continue;
            }
        };
        match envelope.flags {
            0 => {
                if checked.ended {
                    v.push(format!(
                        "response: envelope {} follows the end of the stream",
                        i + 1
                    ));
                }
                checked.messages += 1;
                if let Err(e) = doc.check_response(&op, 200, headers, envelope.message) {
                    v.extend(
                        e.into_iter()
                            .map(|e| format!("response: envelope {}: {e}", i + 1)),
                    );
                }
                check_bytes(&json, v);
            }
            0x02 => {
                if checked.ended {
                    v.push(format!(
                        "response: a second end of stream (envelope {})",
                        i + 1
                    ));
                }
                checked.ended = true;
                let Some(fields) = json.as_object() else {
                    v.push("response: the end of the stream is not a JSON object".into());
                    continue;
                };
                for key in fields.keys() {
                    if key != "error" && key != "metadata" {
                        v.push(format!(
                            "response: the end of the stream has no field {key:?} (error, \
                             metadata)"
                        ));
                    }
                }
                if let Some(error) = fields.get("error") {
                    checked.error_code = error["code"].as_str().map(str::to_string);
                    // The document's error answer (`default`): connect.error.
                    let body = error.to_string();
                    if let Err(e) = doc.check_response(&op, 500, headers, body.as_bytes()) {
                        v.extend(
                            e.into_iter()
                                .map(|e| format!("response: end of stream: {e}")),
                        );
                    }
                }
                if let Some(metadata) = fields.get("metadata") {
                    if !metadata.is_object() {
                        v.push(
                            "response: the end of the stream's metadata is not an object".into(),
                        );
                    }
                }
            }
            flags => v.push(format!(
                "response: envelope {} has flags {flags:#04x} (0: a message, 0x02: the end of \
                 the stream; this client asks for no compression)",
                i + 1
            )),
        }
    }
    if whole && !checked.ended {
        v.push("response: the stream has no end-of-stream envelope".into());
    }
    if header(headers, "content-type").is_none() {
        v.push("response: no Content-Type".into());
    }
    checked
}

/// Every envd `process.Process/Start` exchange in `exchanges` (a fake's log), checked.
pub fn starts(exchanges: &[Recorded]) -> impl Iterator<Item = &Recorded> {
    exchanges
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with(START))
}
