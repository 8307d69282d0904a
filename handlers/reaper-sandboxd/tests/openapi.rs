//! `openapi.json` against the server: every route the router serves is documented (and nothing
//! else is), and real answers of every operation have a documented status and validate against
//! the documented schema.

mod common;

use common::Daemon;
use reaper_sandboxd::route_specs;
use serde_json::{json, Value};

fn document() -> Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json"))
        .expect("openapi.json is checked in next to Cargo.toml");
    serde_json::from_str(&text).expect("openapi.json is JSON")
}

/// Follows a local `$ref` (`#/components/...`).
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let target = doc
                .pointer(r.trim_start_matches('#'))
                .unwrap_or_else(|| panic!("dangling $ref {r}"));
            resolve(doc, target)
        }
        None => value,
    }
}

/// Structural JSON-schema check of the subset the document uses: type, required, properties,
/// additionalProperties: false, enum, items, minimum, minLength, maxLength.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(kind) = schema.get("type").and_then(Value::as_str) {
        let ok = match kind {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            other => return Err(format!("{at}: unknown schema type {other}")),
        };
        if !ok {
            return Err(format!("{at}: expected {kind}, got {value}"));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            return Err(format!("{at}: {value} is not one of {options:?}"));
        }
    }
    if let (Some(min), Some(n)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) {
        if n < min {
            return Err(format!("{at}: {n} is below the minimum {min}"));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if schema
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
            || schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len > m)
        {
            return Err(format!("{at}: length {len} is out of the documented range"));
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = required.as_str().unwrap();
            if !object.contains_key(name) {
                return Err(format!("{at}: required field {name} is missing"));
            }
        }
        for (name, field) in object {
            match properties.and_then(|p| p.get(name)) {
                Some(s) => validate(doc, s, field, &format!("{at}.{name}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{at}: undocumented field {name}"))
                }
                // Responses may grow fields; the document must still list what we send.
                None => return Err(format!("{at}: field {name} is not in the document")),
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            validate(doc, items, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// Sends one request and checks the answer against the operation `method path` in the document.
/// Returns the body.
// One flat call per case keeps the scenario below readable as a table.
#[allow(clippy::too_many_arguments)]
async fn check(
    daemon: &Daemon,
    doc: &Value,
    method: &str,
    template: &str,
    path: &str,
    auth: bool,
    body: Option<Value>,
    expected: u16,
) -> Value {
    let operation = doc["paths"][template][method.to_lowercase()].clone();
    assert!(
        operation.is_object(),
        "{method} {template} is not documented"
    );
    let client = daemon.raw();
    let mut request = client.request(method.parse().unwrap(), format!("{}{path}", daemon.url));
    if auth {
        request = request.bearer_auth(&daemon.token);
    }
    if let Some(b) = body {
        request = request.json(&b);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    assert_eq!(status, expected, "{method} {path}");
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    let text = response.text().await.unwrap();
    let documented = operation["responses"]
        .get(status.to_string())
        .unwrap_or_else(|| panic!("{method} {template} answered an undocumented {status}"));
    let documented = resolve(doc, documented);
    match documented.pointer("/content/application~1json/schema") {
        Some(schema) => {
            assert_eq!(
                content_type.as_deref(),
                Some("application/json"),
                "{method} {path}"
            );
            let value: Value = serde_json::from_str(&text).unwrap();
            validate(doc, schema, &value, "body")
                .unwrap_or_else(|e| panic!("{method} {path} {status}: {e}\n{text}"));
            value
        }
        None => {
            assert!(
                text.is_empty(),
                "{method} {path} {status} has an undocumented body"
            );
            Value::Null
        }
    }
}

#[test]
fn every_route_the_router_serves_is_documented_and_nothing_else_is() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.0.3");
    let mut served: Vec<(String, String)> = route_specs()
        .iter()
        .map(|r| (r.method.to_lowercase(), r.path.to_string()))
        .collect();
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        assert!(path.starts_with("/v1/"), "{path} is not versioned");
        for method in ["get", "post", "put", "delete", "patch", "head", "options"] {
            if item.get(method).is_some() {
                documented.push((method.to_string(), path.clone()));
            }
        }
    }
    served.sort();
    documented.sort();
    assert_eq!(served, documented);
    for route in route_specs() {
        let op = &doc["paths"][route.path][route.method.to_lowercase()];
        let open = op.get("security") == Some(&json!([]));
        assert_eq!(
            open, !route.authenticated,
            "{} {}: the document's security disagrees with the router",
            route.method, route.path
        );
    }
    assert_eq!(doc["security"], json!([{"bearerAuth": []}]));
}

#[tokio::test]
async fn real_answers_of_every_operation_match_the_documented_status_and_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        tmp.path(),
        &["--max-output-bytes", "100", "--honor-destroy-fails-flag"],
    )
    .await;
    let doc = document();
    let d = &daemon;
    let (get, post, delete) = ("GET", "POST", "DELETE");
    let item = "/v1/sandboxes/{id}";
    let exec = "/v1/sandboxes/{id}/exec";
    let agents = "/v1/sandboxes/{id}/agents";

    check(d, &doc, get, "/v1/healthz", "/v1/healthz", false, None, 200).await;
    let created = check(
        d,
        &doc,
        post,
        "/v1/sandboxes",
        "/v1/sandboxes",
        true,
        Some(json!({})),
        201,
    )
    .await;
    let id = created["id"].as_str().unwrap().to_string();
    let journals = tmp.path().join("j").to_str().unwrap().to_string();
    check(
        d,
        &doc,
        post,
        "/v1/sandboxes",
        "/v1/sandboxes",
        true,
        Some(json!({"journalDir": journals})),
        201,
    )
    .await;
    check(
        d,
        &doc,
        post,
        "/v1/sandboxes",
        "/v1/sandboxes",
        true,
        Some(json!({"journalDir": "rel"})),
        400,
    )
    .await;
    check(
        d,
        &doc,
        post,
        "/v1/sandboxes",
        "/v1/sandboxes",
        false,
        Some(json!({})),
        401,
    )
    .await;
    let big = json!({"journalDir": "x".repeat(2 * 1024 * 1024)});
    check(
        d,
        &doc,
        post,
        "/v1/sandboxes",
        "/v1/sandboxes",
        true,
        Some(big),
        413,
    )
    .await;

    let path = format!("/v1/sandboxes/{id}");
    let info = check(d, &doc, get, item, &path, true, None, 200).await;
    assert_eq!(info["id"], id.as_str());
    check(
        d,
        &doc,
        get,
        item,
        "/v1/sandboxes/sbx-0000000000000000",
        true,
        None,
        404,
    )
    .await;
    check(d, &doc, get, item, "/v1/sandboxes/..%2Fx", true, None, 400).await;
    check(d, &doc, get, item, &path, false, None, 401).await;

    let exec_path = format!("/v1/sandboxes/{id}/exec");
    let out = check(
        d,
        &doc,
        post,
        exec,
        &exec_path,
        true,
        Some(json!({"command": "echo hi; exit 4"})),
        200,
    )
    .await;
    assert_eq!(out, json!({"stdout": "hi\n", "stderr": "", "exitCode": 4}));
    check(
        d,
        &doc,
        post,
        exec,
        &exec_path,
        true,
        Some(json!({"command": "sleep 5", "timeoutMs": 50})),
        422,
    )
    .await;
    check(
        d,
        &doc,
        post,
        exec,
        &exec_path,
        true,
        Some(json!({"command": "head -c 101 /dev/zero"})),
        422,
    )
    .await;
    check(
        d,
        &doc,
        post,
        exec,
        &exec_path,
        true,
        Some(json!({"command": 1})),
        400,
    )
    .await;
    check(
        d,
        &doc,
        post,
        exec,
        "/v1/sandboxes/sbx-0000000000000000/exec",
        true,
        Some(json!({"command": "true"})),
        404,
    )
    .await;
    check(
        d,
        &doc,
        post,
        exec,
        &exec_path,
        true,
        Some(json!({"command": "x".repeat(1 << 21)})),
        413,
    )
    .await;
    check(
        d,
        &doc,
        post,
        exec,
        &exec_path,
        false,
        Some(json!({"command": "true"})),
        401,
    )
    .await;

    let agents_path = format!("/v1/sandboxes/{id}/agents");
    let started = check(
        d,
        &doc,
        post,
        agents,
        &agents_path,
        true,
        Some(json!({"runId": "r1", "command": "echo {}"})),
        201,
    )
    .await;
    assert_eq!(started["runId"], "r1");
    check(
        d,
        &doc,
        post,
        agents,
        &agents_path,
        true,
        Some(json!({"runId": "r2"})),
        400,
    )
    .await;
    check(
        d,
        &doc,
        post,
        agents,
        "/v1/sandboxes/sbx-0000000000000000/agents",
        true,
        Some(json!({"runId": "r", "command": "true"})),
        404,
    )
    .await;
    check(
        d,
        &doc,
        post,
        agents,
        &agents_path,
        false,
        Some(json!({"runId": "r", "command": "true"})),
        401,
    )
    .await;
    let info = check(d, &doc, get, item, &path, true, None, 200).await;
    assert_eq!(info["agents"][0]["runId"], "r1");

    std::fs::write(
        daemon.root.join(&id).join(reaper_local::DESTROY_FAILS_FLAG),
        "",
    )
    .unwrap();
    check(d, &doc, delete, item, &path, true, None, 409).await;
    std::fs::remove_file(daemon.root.join(&id).join(reaper_local::DESTROY_FAILS_FLAG)).unwrap();
    check(d, &doc, delete, item, &path, false, None, 401).await;
    check(d, &doc, delete, item, &path, true, None, 204).await;
    check(d, &doc, delete, item, &path, true, None, 204).await;
    check(d, &doc, delete, item, "/v1/sandboxes/a.b", true, None, 400).await;
    check(d, &doc, get, item, &path, true, None, 404).await;

    // Off the documented routes: the documented error shape, with its own codes.
    let error = &doc["components"]["schemas"]["Error"];
    for (method, path, status, code) in [
        ("GET", "/v2/healthz", 404, "route-not-found"),
        ("PUT", "/v1/sandboxes", 405, "method-not-allowed"),
    ] {
        let response = daemon
            .raw()
            .request(method.parse().unwrap(), format!("{}{path}", daemon.url))
            .bearer_auth(&daemon.token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status);
        let value: Value = response.json().await.unwrap();
        validate(&doc, error, &value, "body").unwrap();
        assert_eq!(value["error"]["code"], code);
    }
}

#[tokio::test]
async fn an_exec_beyond_the_concurrency_cap_is_the_documented_503_with_retry_after() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &["--max-concurrent-execs", "1"]).await;
    let doc = document();
    let exec = "/v1/sandboxes/{id}/exec";
    let created = check(
        &daemon,
        &doc,
        "POST",
        "/v1/sandboxes",
        "/v1/sandboxes",
        true,
        None,
        201,
    )
    .await;
    let id = created["id"].as_str().unwrap().to_string();
    let exec_path = format!("/v1/sandboxes/{id}/exec");
    let blocking = {
        let (client, url, token) = (daemon.raw(), daemon.url.clone(), daemon.token.clone());
        let exec_path = exec_path.clone();
        tokio::spawn(async move {
            client
                .post(format!("{url}{exec_path}"))
                .bearer_auth(token)
                .json(&json!({"command": "touch started; exec sleep 60", "timeoutMs": 60000}))
                .send()
                .await
        })
    };
    let started = daemon.root.join(&id).join("work").join("started");
    assert!(
        common::eventually(std::time::Duration::from_secs(20), || async {
            started.exists()
        })
        .await
    );
    let busy = check(
        &daemon,
        &doc,
        "POST",
        exec,
        &exec_path,
        true,
        Some(json!({"command": "true"})),
        503,
    )
    .await;
    assert_eq!(busy["error"]["code"], "too-many-execs");
    let documented = resolve(&doc, &doc["paths"][exec]["post"]["responses"]["503"]);
    assert!(
        documented.pointer("/headers/Retry-After").is_some(),
        "the 503 documents its Retry-After header"
    );
    check(
        &daemon,
        &doc,
        "DELETE",
        "/v1/sandboxes/{id}",
        &format!("/v1/sandboxes/{id}"),
        true,
        None,
        204,
    )
    .await;
    let _ = blocking.await.unwrap();
}
