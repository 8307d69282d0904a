//! The slice of envd's `process.Process/Start` exchange this crate uses: the Connect protocol's
//! streaming framing with the JSON codec, and the messages of `spec/envd/process/process.proto`
//! (see `openapi/SOURCE.md`) in their canonical protobuf JSON form.
//!
//! Framing: every message, both ways, is an envelope of one flags byte, a 4-byte big-endian
//! length and the JSON message. The last envelope of a response has flag `0x02` and carries the
//! end of the stream: `{}` on success, `{"error": {"code", "message"}}` on failure.

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};

/// The RPC path, appended to a sandbox's envd URL.
pub(crate) const START_PATH: &str = "/process.Process/Start";
/// The content type of a Connect streaming call with the JSON codec.
pub(crate) const CONTENT_TYPE: &str = "application/connect+json";

const FLAG_COMPRESSED: u8 = 0x01;
const FLAG_END_STREAM: u8 = 0x02;
const HEADER_LEN: usize = 5;

/// `StartRequest`: a process to start, without stdin.
#[derive(Debug, Serialize)]
pub(crate) struct StartRequest<'a> {
    pub process: ProcessConfig<'a>,
    /// `false`: the process reads `/dev/null` (envd's default is an open pipe).
    pub stdin: bool,
}

/// `ProcessConfig`.
#[derive(Debug, Serialize)]
pub(crate) struct ProcessConfig<'a> {
    pub cmd: &'a str,
    pub args: Vec<&'a str>,
    pub envs: BTreeMap<&'a str, &'a str>,
}

/// `StartResponse`.
#[derive(Debug, Deserialize)]
struct StartResponse {
    #[serde(default)]
    event: Option<ProcessEvent>,
}

/// `ProcessEvent`: exactly one of its fields is set (a `oneof`).
#[derive(Debug, Deserialize)]
struct ProcessEvent {
    #[serde(default)]
    start: Option<serde_json::Value>,
    #[serde(default)]
    data: Option<DataEvent>,
    #[serde(default)]
    end: Option<EndEvent>,
    #[serde(default)]
    keepalive: Option<serde_json::Value>,
}

/// `ProcessEvent.DataEvent`: base64 bytes of one stream.
#[derive(Debug, Deserialize)]
struct DataEvent {
    #[serde(default)]
    stdout: Option<String>,
    #[serde(default)]
    stderr: Option<String>,
    #[serde(default)]
    pty: Option<String>,
}

/// `ProcessEvent.EndEvent`. Zero values are omitted in protobuf JSON, hence the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndEvent {
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default)]
    pub exited: bool,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub error: Option<String>,
}

/// The end-of-stream message.
#[derive(Debug, Deserialize)]
struct EndStream {
    #[serde(default)]
    error: Option<RpcError>,
}

/// A Connect error: a stable `code` (`deadline_exceeded`, `unauthenticated`, …) and a message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct RpcError {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// What one `Start` stream carried.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct StartStream {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub end: Option<EndEvent>,
    pub error: Option<RpcError>,
    /// Whether the end-of-stream envelope arrived (a cut stream lacks it).
    pub complete: bool,
}

/// A response body that is not a Connect stream of `StartResponse`s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Connect stream from envd: {0}")]
pub(crate) struct FramingError(pub String);

/// One envelope around `message`.
pub(crate) fn envelope(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + message.len());
    out.push(0);
    // Requests are a few KiB: the command is bounded by the caller's request limit.
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    out
}

/// Decodes a whole `Start` response body.
pub(crate) fn decode_start_stream(body: &[u8]) -> Result<StartStream, FramingError> {
    let mut stream = StartStream::default();
    let mut rest = body;
    while !rest.is_empty() {
        if stream.complete {
            return Err(FramingError(
                "bytes after the end-of-stream envelope".into(),
            ));
        }
        if rest.len() < HEADER_LEN {
            return Err(FramingError(format!(
                "a truncated envelope header ({} bytes)",
                rest.len()
            )));
        }
        let flags = rest[0];
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let Some(message) = rest.get(HEADER_LEN..HEADER_LEN + len) else {
            return Err(FramingError(format!(
                "an envelope announces {len} bytes but {} remain",
                rest.len() - HEADER_LEN
            )));
        };
        rest = &rest[HEADER_LEN + len..];
        if flags & FLAG_COMPRESSED != 0 {
            // Nothing asked for compression (no Connect-Accept-Encoding is sent).
            return Err(FramingError(
                "a compressed envelope nobody asked for".into(),
            ));
        }
        if flags & FLAG_END_STREAM != 0 {
            let end: EndStream = serde_json::from_slice(message)
                .map_err(|e| FramingError(format!("an invalid end-of-stream message: {e}")))?;
            stream.error = end.error;
            stream.complete = true;
            continue;
        }
        let response: StartResponse = serde_json::from_slice(message)
            .map_err(|e| FramingError(format!("an invalid StartResponse: {e}")))?;
        let Some(event) = response.event else {
            continue;
        };
        if let Some(data) = event.data {
            if let Some(b) = data.stdout {
                stream.stdout.extend(decode_bytes(&b)?);
            }
            if let Some(b) = data.stderr {
                stream.stderr.extend(decode_bytes(&b)?);
            }
            if data.pty.is_some() {
                return Err(FramingError(
                    "pty output for a process started without a pty".into(),
                ));
            }
        }
        if let Some(end) = event.end {
            stream.end = Some(end);
        }
        // `start` (the pid) and `keepalive` carry nothing the exec needs.
        let _ = (event.start, event.keepalive);
    }
    Ok(stream)
}

/// Protobuf JSON writes `bytes` as standard base64 with padding; parsers must also take the
/// URL-safe alphabet and missing padding.
fn decode_bytes(text: &str) -> Result<Vec<u8>, FramingError> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .ok_or_else(|| FramingError("output bytes that are not base64".into()))
}

/// The Connect error in a non-streaming error answer (`{"code", "message"}`), if it is one.
pub(crate) fn unary_error(body: &[u8]) -> Option<RpcError> {
    serde_json::from_slice::<RpcError>(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(flags: u8, json: &str) -> Vec<u8> {
        let mut out = vec![flags];
        out.extend_from_slice(&(json.len() as u32).to_be_bytes());
        out.extend_from_slice(json.as_bytes());
        out
    }

    #[test]
    fn a_stream_decodes_into_both_outputs_the_end_event_and_no_error() {
        let mut body = frame(0, r#"{"event":{"start":{"pid":42}}}"#);
        body.extend(frame(0, r#"{"event":{"data":{"stdout":"b3V0Cg=="}}}"#));
        body.extend(frame(0, r#"{"event":{"keepalive":{}}}"#));
        body.extend(frame(0, r#"{"event":{"data":{"stderr":"ZXJyCg=="}}}"#));
        body.extend(frame(0, r#"{"event":{"data":{"stdout":"bW9yZQ"}}}"#));
        body.extend(frame(
            0,
            r#"{"event":{"end":{"exitCode":7,"exited":true,"status":"exit status 7"}}}"#,
        ));
        body.extend(frame(2, "{}"));
        let stream = decode_start_stream(&body).unwrap();
        assert_eq!(stream.stdout, b"out\nmore");
        assert_eq!(stream.stderr, b"err\n");
        assert_eq!(stream.end.as_ref().map(|e| e.exit_code), Some(7));
        assert!(stream.complete);
        assert_eq!(stream.error, None);
    }

    #[test]
    fn zero_values_omitted_by_protobuf_json_read_as_zero() {
        let mut body = frame(
            0,
            r#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#,
        );
        body.extend(frame(2, "{}"));
        let end = decode_start_stream(&body).unwrap().end.unwrap();
        assert_eq!((end.exit_code, end.exited), (0, true));
    }

    #[test]
    fn the_end_of_stream_error_is_kept() {
        let body = frame(
            2,
            r#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#,
        );
        let stream = decode_start_stream(&body).unwrap();
        assert_eq!(stream.error.unwrap().code, "deadline_exceeded");
        assert!(stream.end.is_none());
    }

    #[test]
    fn truncated_compressed_or_trailing_frames_are_framing_errors() {
        let whole = frame(0, r#"{"event":{"keepalive":{}}}"#);
        assert!(decode_start_stream(&whole[..whole.len() - 1]).is_err());
        assert!(decode_start_stream(&whole[..3]).is_err());
        assert!(decode_start_stream(&frame(1, "{}")).is_err());
        let mut trailing = frame(2, "{}");
        trailing.extend(frame(0, "{}"));
        assert!(decode_start_stream(&trailing).is_err());
        assert!(decode_start_stream(&frame(0, r#"{"event":{"data":{"stdout":"!!"}}}"#)).is_err());
    }

    #[test]
    fn an_envelope_is_flags_length_and_message() {
        assert_eq!(envelope(b"{}"), vec![0, 0, 0, 0, 2, b'{', b'}']);
    }
}
