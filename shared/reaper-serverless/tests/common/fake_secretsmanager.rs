//! A fake AWS Secrets Manager on 127.0.0.1: a real HTTP/1.1 server speaking the service's JSON
//! protocol (`POST /`, `X-Amz-Target: secretsmanager.<Operation>`, `application/x-amz-json-1.1`)
//! for `GetSecretValue` and `PutSecretValue`, one secret, versions staged `AWSCURRENT`.
//!
//! Every request and every answer is checked against the published API model stored beside the
//! crate (`secretsmanager/secretsmanager-2017-10-17.json`, see `secretsmanager/SOURCE.md`):
//! the operation exists, members are those of its input/output shape, required members are
//! present, strings are within their lengths, an error is one the operation declares, and the
//! request is SigV4-signed for `secretsmanager`. What breaks the model is recorded in
//! [`FakeSecretsManager::violations`], which every test asserts empty.
//!
//! Shared by the reaper-serverless and reaper-lambda tests (included by path).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The published model's excerpt.
const MODEL: &str = include_str!("../../secretsmanager/secretsmanager-2017-10-17.json");

#[derive(Debug, Default)]
struct State {
    arn: String,
    name: String,
    /// `(version id, value)`, the last one is `AWSCURRENT`.
    versions: Vec<(String, String)>,
    /// Operations received, in order.
    calls: Vec<String>,
    violations: Vec<String>,
}

pub struct FakeSecretsManager {
    pub endpoint: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSecretsManager {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A secret ARN as Secrets Manager forms them (name plus a 6-character suffix).
pub fn secret_arn(name: &str) -> String {
    format!("arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}-AbCdEf")
}

impl FakeSecretsManager {
    /// One secret `name` holding `value`.
    pub async fn start(name: &str, value: &str) -> FakeSecretsManager {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake Secrets Manager");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            arn: secret_arn(name),
            name: name.to_string(),
            versions: vec![(version_id(1), value.to_string())],
            ..State::default()
        }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move { serve(stream, &state).await });
            }
        });
        FakeSecretsManager {
            endpoint,
            state,
            task,
        }
    }

    pub fn arn(&self) -> String {
        self.state.lock().unwrap().arn.clone()
    }

    /// How many `GetSecretValue` calls arrived.
    pub fn reads(&self) -> usize {
        let state = self.state.lock().unwrap();
        state
            .calls
            .iter()
            .filter(|c| *c == "GetSecretValue")
            .count()
    }

    pub fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Requests or answers that broke the published model.
    pub fn violations(&self) -> Vec<String> {
        self.state.lock().unwrap().violations.clone()
    }

    /// The value staged `AWSCURRENT`.
    pub fn current(&self) -> String {
        let state = self.state.lock().unwrap();
        state.versions.last().unwrap().1.clone()
    }
}

fn version_id(n: usize) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

async fn serve(mut stream: TcpStream, state: &Mutex<State>) {
    let mut buffer = Vec::new();
    loop {
        let Some((head, head_end, length)) = read_head(&mut stream, &mut buffer).await else {
            return;
        };
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body = String::from_utf8_lossy(&buffer[head_end..head_end + length]).into_owned();
        buffer.drain(..head_end + length);
        let (status, answer) = handle(&head, &body, state);
        let text = answer.to_string();
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.1\r\nx-amzn-requestid: 00000000-0000-0000-0000-000000000001\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn handle(head: &str, body: &str, state: &Mutex<State>) -> (&'static str, Value) {
    let model: Value = serde_json::from_str(MODEL).expect("the stored model parses");
    let mut problems = Vec::new();
    let request_line = head.lines().next().unwrap_or("");
    if !request_line.starts_with("POST / ") {
        problems.push(format!(
            "request line {request_line:?}: the model says POST /"
        ));
    }
    let prefix = model["metadata"]["targetPrefix"].as_str().unwrap();
    let target = header(head, "x-amz-target").unwrap_or("");
    let operation = target
        .strip_prefix(prefix)
        .and_then(|t| t.strip_prefix('.'))
        .unwrap_or("");
    let content_type = header(head, "content-type").unwrap_or("");
    let json_version = model["metadata"]["jsonVersion"].as_str().unwrap();
    if content_type != format!("application/x-amz-json-{json_version}") {
        problems.push(format!("content-type {content_type:?}"));
    }
    let signing = model["metadata"]["signingName"].as_str().unwrap();
    let authorization = header(head, "authorization").unwrap_or("");
    if !(authorization.starts_with("AWS4-HMAC-SHA256 ")
        && authorization.contains(&format!("/{signing}/aws4_request")))
    {
        problems.push(format!(
            "the request is not SigV4-signed for {signing}: {authorization:?}"
        ));
    }
    let Some(op) = model["operations"].get(operation) else {
        problems.push(format!("operation {target:?} is not in the model"));
        return finish(
            state,
            operation,
            problems,
            error("InvalidRequestException", "unknown operation"),
        );
    };
    let input: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    check_shape(
        &model,
        op["input"]["shape"].as_str().unwrap(),
        &input,
        "request",
        &mut problems,
    );
    if !problems.is_empty() {
        return finish(
            state,
            operation,
            problems,
            error("InvalidParameterException", "the request breaks the model"),
        );
    }
    let answer = {
        let mut s = state.lock().unwrap();
        let id = input["SecretId"].as_str().unwrap_or("");
        if id != s.arn && id != s.name {
            error(
                "ResourceNotFoundException",
                "Secrets Manager can't find the specified secret.",
            )
        } else if operation == "GetSecretValue" {
            let (version, value) = s.versions.last().unwrap().clone();
            Ok(json!({
                "ARN": s.arn, "Name": s.name, "VersionId": version, "SecretString": value,
                "VersionStages": ["AWSCURRENT"], "CreatedDate": 1_764_000_000.0
            }))
        } else {
            let value = input["SecretString"].as_str().unwrap_or("").to_string();
            let version = version_id(s.versions.len() + 1);
            s.versions.push((version.clone(), value));
            Ok(json!({
                "ARN": s.arn, "Name": s.name, "VersionId": version,
                "VersionStages": ["AWSCURRENT"]
            }))
        }
    };
    match &answer {
        Ok(out) => check_shape(
            &model,
            op["output"]["shape"].as_str().unwrap(),
            out,
            "answer",
            &mut problems,
        ),
        Err(e) => {
            let declared = op["errors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["shape"] == e["__type"]);
            if !declared {
                problems.push(format!("{operation} does not declare {}", e["__type"]));
            }
        }
    }
    finish(state, operation, problems, answer)
}

fn error(kind: &str, message: &str) -> Result<Value, Value> {
    Err(json!({ "__type": kind, "Message": message }))
}

fn finish(
    state: &Mutex<State>,
    operation: &str,
    problems: Vec<String>,
    answer: Result<Value, Value>,
) -> (&'static str, Value) {
    let mut s = state.lock().unwrap();
    s.calls.push(operation.to_string());
    s.violations
        .extend(problems.into_iter().map(|p| format!("{operation}: {p}")));
    match answer {
        Ok(v) => ("200 OK", v),
        Err(e) => ("400 Bad Request", e),
    }
}

/// Checks `value` against shape `name` of the model.
fn check_shape(model: &Value, name: &str, value: &Value, at: &str, problems: &mut Vec<String>) {
    let shape = &model["shapes"][name];
    match shape["type"].as_str().unwrap_or("") {
        "structure" => {
            let Some(object) = value.as_object() else {
                problems.push(format!("{at} is not an object"));
                return;
            };
            let members: &Map<String, Value> = shape["members"].as_object().unwrap();
            for key in object.keys() {
                if !members.contains_key(key) {
                    problems.push(format!("{at}.{key} is not a member of {name}"));
                }
            }
            for required in shape["required"].as_array().into_iter().flatten() {
                let required = required.as_str().unwrap();
                if !object.contains_key(required) {
                    problems.push(format!("{at}.{required} is required by {name}"));
                }
            }
            for (key, v) in object {
                if let Some(member) = members.get(key) {
                    let inner = member["shape"].as_str().unwrap();
                    check_shape(model, inner, v, &format!("{at}.{key}"), problems);
                }
            }
        }
        "string" => {
            let Some(s) = value.as_str() else {
                problems.push(format!("{at} is not a string"));
                return;
            };
            let len = s.chars().count() as u64;
            if shape["min"].as_u64().is_some_and(|m| len < m)
                || shape["max"].as_u64().is_some_and(|m| len > m)
            {
                problems.push(format!(
                    "{at} has {len} characters, outside {name}'s bounds"
                ));
            }
        }
        "list" => {
            let Some(items) = value.as_array() else {
                problems.push(format!("{at} is not a list"));
                return;
            };
            let member = shape["member"]["shape"].as_str().unwrap();
            for (i, item) in items.iter().enumerate() {
                check_shape(model, member, item, &format!("{at}[{i}]"), problems);
            }
        }
        "timestamp" => {
            if !value.is_number() {
                problems.push(format!("{at} is not epoch seconds"));
            }
        }
        "blob" => {
            if !value.is_string() {
                problems.push(format!("{at} is not base64 text"));
            }
        }
        other => problems.push(format!(
            "{at}: shape {name} of type {other:?} is not modelled"
        )),
    }
}

/// Reads until the end of a request head; returns the head, where the body starts and its
/// length.
async fn read_head(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<(String, usize, usize)> {
    loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..at]).into_owned();
            let length = header(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            return Some((head, at + 4, length));
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}
