//! The document checker on its own: requests and responses against tests/fixtures.

use std::path::PathBuf;

use reaper_fake_api::OpenApi;
use serde_json::json;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn doc() -> OpenApi {
    OpenApi::from_file(fixture("sandboxes.yaml")).expect("the fixture loads")
}

fn auth() -> Vec<(String, String)> {
    vec![("authorization".into(), "Bearer t0ken".into())]
}

fn json_headers() -> Vec<(String, String)> {
    let mut h = auth();
    h.push(("content-type".into(), "application/json".into()));
    h
}

fn sandbox() -> serde_json::Value {
    json!({"id": "sbx-1", "state": "started", "createdAt": "2026-12-03T09:00:00Z"})
}

/// Asserts exactly one violation, mentioning every one of `words`.
#[track_caller]
fn assert_one_violation(result: Result<impl std::fmt::Debug, Vec<String>>, words: &[&str]) {
    let violations = result.expect_err("a violation was expected");
    assert_eq!(violations.len(), 1, "{violations:#?}");
    for word in words {
        assert!(
            violations[0].contains(word),
            "`{}` does not mention `{word}`",
            violations[0]
        );
    }
}

#[test]
fn a_valid_request_and_response_pass() {
    let doc = doc();
    let body = json!({"name": "agent", "cpu": 2, "labels": {"run": "r1"}}).to_string();
    let op = doc
        .check_request("POST", "/api/sandbox", &json_headers(), body.as_bytes())
        .expect("valid request");
    assert_eq!(op.operation_id.as_deref(), Some("createSandbox"));
    doc.check_response(&op, 201, &json_headers(), sandbox().to_string().as_bytes())
        .expect("valid response");
}

#[test]
fn path_parameters_are_bound_and_the_base_path_and_origin_are_optional() {
    let doc = doc();
    for path in [
        "/api/sandbox/sbx-42",
        "/sandbox/sbx-42",
        "https://api.example.test/api/sandbox/sbx-42",
    ] {
        let op = doc.check_request("GET", path, &auth(), b"").expect(path);
        assert_eq!(op.operation_id.as_deref(), Some("getSandbox"));
        assert_eq!(op.path_template, "/sandbox/{sandboxId}");
        assert_eq!(op.path_params["sandboxId"], "sbx-42");
    }
}

#[test]
fn a_literal_segment_wins_over_a_path_parameter() {
    let op = doc()
        .check_request("GET", "/api/sandbox/paginated", &auth(), b"")
        .unwrap();
    assert_eq!(op.operation_id.as_deref(), Some("listSandboxesPaginated"));
}

#[test]
fn a_missing_required_body_field_is_reported() {
    let body = json!({"cpu": 2}).to_string();
    assert_one_violation(
        doc().check_request("POST", "/api/sandbox", &json_headers(), body.as_bytes()),
        &[
            "createSandbox",
            "request body",
            "\"name\" is a required property",
        ],
    );
}

#[test]
fn a_wrong_type_is_reported_with_where_it_is() {
    let body = json!({"name": "agent", "cpu": "two"}).to_string();
    assert_one_violation(
        doc().check_request("POST", "/api/sandbox", &json_headers(), body.as_bytes()),
        &["/cpu", "\"two\" is not of type \"integer\""],
    );
}

#[test]
fn an_unknown_body_property_is_reported_where_the_schema_forbids_it() {
    let body = json!({"name": "agent", "gpu": 1}).to_string();
    assert_one_violation(
        doc().check_request("POST", "/api/sandbox", &json_headers(), body.as_bytes()),
        &["gpu"],
    );
}

#[test]
fn an_undeclared_path_is_reported() {
    assert_one_violation(
        doc().check_request("GET", "/api/sandboxes/sbx-1", &auth(), b""),
        &[
            "GET /api/sandboxes/sbx-1",
            "no path of the document",
            "/api",
        ],
    );
}

#[test]
fn a_trailing_slash_the_document_does_not_have_is_pointed_out() {
    assert_one_violation(
        doc().check_request("GET", "/api/sandbox/sbx-1/", &auth(), b""),
        &[
            "no path of the document",
            "`/sandbox/sbx-1`: mind the trailing slash",
        ],
    );
}

#[test]
fn an_undeclared_method_is_reported_with_the_declared_ones() {
    assert_one_violation(
        doc().check_request("PUT", "/api/sandbox/sbx-1", &auth(), b""),
        &["/sandbox/{sandboxId}", "GET, DELETE", "not PUT"],
    );
}

#[test]
fn a_path_parameter_breaking_its_pattern_is_reported() {
    assert_one_violation(
        doc().check_request("GET", "/api/sandbox/SBX_1", &auth(), b""),
        &["path parameter `sandboxId`", "does not match"],
    );
}

#[test]
fn a_missing_required_query_parameter_is_reported() {
    assert_one_violation(
        doc().check_request("GET", "/api/sandbox?limit=5", &auth(), b""),
        &[
            "listSandboxes",
            "required query parameter `projectId` is missing",
        ],
    );
}

#[test]
fn query_parameters_are_checked_as_integers_enums_and_arrays() {
    let doc = doc();
    doc.check_request(
        "GET",
        "/api/sandbox?projectId=p&limit=5&state=stopped&labels=a&labels=b",
        &auth(),
        b"",
    )
    .expect("valid query");
    assert_one_violation(
        doc.check_request("GET", "/api/sandbox?projectId=p&limit=five", &auth(), b""),
        &["query parameter `limit`", "`five` is not an integer"],
    );
    assert_one_violation(
        doc.check_request("GET", "/api/sandbox?projectId=p&limit=500", &auth(), b""),
        &["query parameter `limit`", "500"],
    );
    assert_one_violation(
        doc.check_request("DELETE", "/api/sandbox/sbx-1?force=yes", &auth(), b""),
        &["query parameter `force`", "not a boolean"],
    );
}

#[test]
fn an_unknown_enum_value_is_reported() {
    let doc = doc();
    assert_one_violation(
        doc.check_request("GET", "/api/sandbox?projectId=p&state=paused", &auth(), b""),
        &["query parameter `state`", "\"paused\"", "is not one of"],
    );
    let op = doc
        .check_request("GET", "/api/sandbox/sbx-1", &auth(), b"")
        .unwrap();
    let mut body = sandbox();
    body["state"] = json!("paused");
    assert_one_violation(
        doc.check_response(&op, 200, &json_headers(), body.to_string().as_bytes()),
        &["response body", "/state", "\"paused\" is not one of"],
    );
}

#[test]
fn an_undeclared_query_parameter_is_reported() {
    assert_one_violation(
        doc().check_request("GET", "/api/sandbox/sbx-1?verbose=1", &auth(), b""),
        &["query parameter `verbose` is not declared"],
    );
}

#[test]
fn missing_credentials_are_reported_unless_the_operation_needs_none() {
    let doc = doc();
    assert_one_violation(
        doc.check_request("GET", "/api/sandbox/sbx-1", &[], b""),
        &["credentials are missing", "Authorization: Bearer"],
    );
    let basic = vec![("authorization".to_string(), "Basic dTpw".to_string())];
    assert_one_violation(
        doc.check_request("GET", "/api/sandbox/sbx-1", &basic, b""),
        &["credentials are missing"],
    );
    doc.check_request("GET", "/api/health", &[], b"")
        .expect("health needs no credentials");
}

#[test]
fn a_body_of_an_undeclared_content_type_is_reported() {
    let mut headers = auth();
    headers.push(("content-type".into(), "text/plain".into()));
    assert_one_violation(
        doc().check_request("POST", "/api/sandbox", &headers, b"name=agent"),
        &["`text/plain`", "does not declare", "`application/json`"],
    );
}

#[test]
fn a_missing_required_body_and_an_unexpected_body_are_reported() {
    let doc = doc();
    assert_one_violation(
        doc.check_request("POST", "/api/sandbox", &json_headers(), b""),
        &["request body is required"],
    );
    assert_one_violation(
        doc.check_request("DELETE", "/api/sandbox/sbx-1", &json_headers(), b"{}"),
        &["declares no request body"],
    );
}

#[test]
fn a_body_that_is_not_json_is_reported() {
    assert_one_violation(
        doc().check_request("POST", "/api/sandbox", &json_headers(), b"{name:"),
        &["not JSON"],
    );
}

#[test]
fn an_undeclared_status_is_reported_with_the_declared_ones() {
    let doc = doc();
    let op = doc
        .check_request("GET", "/api/sandbox/sbx-1", &auth(), b"")
        .unwrap();
    assert_one_violation(
        doc.check_response(&op, 500, &json_headers(), br#"{"message":"boom"}"#),
        &[
            "status 500 is not a declared response",
            "declared: 200, 404",
        ],
    );
}

#[test]
fn ranges_and_default_cover_statuses_not_listed_exactly() {
    let doc = doc();
    let list = doc
        .check_request("GET", "/api/sandbox?projectId=p", &auth(), b"")
        .unwrap();
    doc.check_response(&list, 403, &json_headers(), br#"{"message":"no"}"#)
        .expect("4XX covers 403");
    assert!(doc
        .check_response(&list, 503, &json_headers(), br#"{"message":"down"}"#)
        .is_err());
    let create = doc
        .check_request("POST", "/api/sandbox", &json_headers(), br#"{"name":"a"}"#)
        .unwrap();
    doc.check_response(&create, 503, &json_headers(), br#"{"message":"down"}"#)
        .expect("default covers 503");
    assert_one_violation(
        doc.check_response(&create, 503, &json_headers(), br#"{"error":"down"}"#),
        &["\"message\" is a required property"],
    );
}

#[test]
fn a_required_response_header_is_checked() {
    let doc = doc();
    let op = doc
        .check_request("DELETE", "/api/sandbox/sbx-1", &auth(), b"")
        .unwrap();
    let body = br#"{"message":"slow down"}"#;
    assert_one_violation(
        doc.check_response(&op, 429, &json_headers(), body),
        &["required response header `Retry-After` is missing"],
    );
    let mut headers = json_headers();
    headers.push(("retry-after".into(), "3".into()));
    doc.check_response(&op, 429, &headers, body)
        .expect("with Retry-After");
    doc.check_response(&op, 204, &[], b"")
        .expect("204 has no body");
    assert_one_violation(
        doc.check_response(&op, 204, &json_headers(), b"{}"),
        &["a 204 answer carries no body"],
    );
}

#[test]
fn an_empty_body_where_json_is_declared_is_reported() {
    let doc = doc();
    let op = doc
        .check_request("GET", "/api/sandbox/sbx-1", &auth(), b"")
        .unwrap();
    assert_one_violation(
        doc.check_response(&op, 200, &[], b""),
        &["response body is empty", "application/json"],
    );
}

#[test]
fn a_referenced_schema_validates_through_its_ref() {
    let doc = doc();
    let op = doc
        .check_request("GET", "/api/sandbox/paginated", &auth(), b"")
        .unwrap();
    let good = json!({"items": [sandbox(), sandbox()]});
    doc.check_response(&op, 200, &json_headers(), good.to_string().as_bytes())
        .expect("valid through $ref");
    let bad = json!({"items": [sandbox(), {"id": "sbx-2", "state": "started"}]});
    assert_one_violation(
        doc.check_response(&op, 200, &json_headers(), bad.to_string().as_bytes()),
        &["/items/1", "\"createdAt\" is a required property"],
    );
}

#[test]
fn a_nullable_schema_accepts_null_and_still_checks_other_values() {
    let doc = doc();
    let op = doc
        .check_request("GET", "/api/sandbox/sbx-1", &auth(), b"")
        .unwrap();
    let mut body = sandbox();
    body["errorReason"] = json!(null);
    body["snapshot"] = json!(null);
    doc.check_response(&op, 200, &json_headers(), body.to_string().as_bytes())
        .expect("null is allowed");
    body["snapshot"] = json!({"name": "base"});
    doc.check_response(&op, 200, &json_headers(), body.to_string().as_bytes())
        .expect("a snapshot is allowed");
    body["snapshot"] = json!({"nameless": true});
    // The reason inside the nullable reference is given, not "fits no anyOf branch".
    assert_one_violation(
        doc.check_response(&op, 200, &json_headers(), body.to_string().as_bytes()),
        &["at `/snapshot`", "\"name\" is a required property"],
    );
    body["snapshot"] = json!(null);
    body["errorReason"] = json!(7);
    assert_one_violation(
        doc.check_response(&op, 200, &json_headers(), body.to_string().as_bytes()),
        &["/errorReason"],
    );
    let create = json!({"name": "a", "labels": null}).to_string();
    doc.check_request("POST", "/api/sandbox", &json_headers(), create.as_bytes())
        .expect("nullable object accepts null");
}

#[test]
fn formats_are_validated() {
    let doc = doc();
    let op = doc
        .check_request("GET", "/api/sandbox/sbx-1", &auth(), b"")
        .unwrap();
    let mut body = sandbox();
    body["createdAt"] = json!("yesterday");
    assert_one_violation(
        doc.check_response(&op, 200, &json_headers(), body.to_string().as_bytes()),
        &["/createdAt", "date-time"],
    );
}

#[test]
fn a_non_json_response_is_checked_for_its_content_type_only() {
    let doc = doc();
    let op = doc
        .check_request("GET", "/api/sandbox/sbx-1/logs", &auth(), b"")
        .unwrap();
    let ndjson = vec![(
        "content-type".to_string(),
        "application/x-ndjson".to_string(),
    )];
    doc.check_response(&op, 200, &ndjson, b"not even json\n")
        .expect("ndjson bodies are not schema-checked");
    doc.check_streamed_response(&op, 200, &ndjson)
        .expect("a stream of the declared type");
    assert_one_violation(
        doc.check_streamed_response(&op, 200, &json_headers()),
        &[
            "`application/json`",
            "does not declare",
            "application/x-ndjson",
        ],
    );
}

#[test]
fn every_violation_of_one_request_is_listed() {
    let body = json!({"cpu": "two"}).to_string();
    let violations = doc()
        .check_request(
            "POST",
            "/api/sandbox?dryRun=true",
            &[("content-type".into(), "application/json".into())],
            body.as_bytes(),
        )
        .unwrap_err();
    let all = violations.join("\n");
    assert_eq!(violations.len(), 4, "{all}");
    for word in ["dryRun", "credentials", "\"name\" is a required", "\"two\""] {
        assert!(all.contains(word), "{word} missing from:\n{all}");
    }
}

#[test]
fn json_and_yaml_copies_of_a_document_load_alike() {
    let yaml = std::fs::read_to_string(fixture("sandboxes.yaml")).unwrap();
    let value: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
    let from_json: OpenApi = value.to_string().parse().expect("JSON text parses");
    let from_yaml = OpenApi::parse(&yaml).unwrap();
    assert_eq!(from_json.operation_ids(), from_yaml.operation_ids());
    assert_eq!(from_yaml.title(), "Sandboxes (test fixture)");
    assert_eq!(from_yaml.api_version(), "1.2.3");
    assert_eq!(from_yaml.base_path(), "/api");
}

#[test]
fn documents_that_cannot_be_checked_are_refused_with_the_reason() {
    let err = OpenApi::parse(r#"{"swagger": "2.0", "paths": {}}"#).unwrap_err();
    assert!(
        err.contains("Swagger 2.0") && err.contains("convert"),
        "{err}"
    );
    let err = OpenApi::parse("openapi: 4.0.0\npaths: {}\n").unwrap_err();
    assert!(err.contains("unsupported OpenAPI version `4.0.0`"), "{err}");
    let err = OpenApi::parse(
        r##"{"openapi": "3.0.0", "paths": {"/a": {"get": {"responses": {"200": {"$ref": "common.yaml#/Ok"}}}}}}"##,
    )
    .unwrap_err();
    assert!(
        err.contains("common.yaml") && err.contains("inline"),
        "{err}"
    );
    let err = OpenApi::parse("{ not: [valid").unwrap_err();
    assert!(
        err.contains("neither JSON") && err.contains("nor YAML"),
        "{err}"
    );
    let err = OpenApi::from_file(fixture("missing.yaml")).unwrap_err();
    assert!(err.contains("missing.yaml"), "{err}");
}

#[test]
fn an_openapi_3_1_document_uses_json_schema_type_unions() {
    let doc = OpenApi::parse(
        r##"{
          "openapi": "3.1.0",
          "info": {"title": "t", "version": "1"},
          "paths": {"/things/{id}": {"get": {
            "operationId": "getThing",
            "parameters": [{"name": "id", "in": "path", "required": true,
                            "schema": {"type": "integer"}}],
            "responses": {"200": {"description": "ok", "content": {"application/json": {
              "schema": {"$ref": "#/components/schemas/Thing"}}}}}}}},
          "components": {"schemas": {"Thing": {
            "type": "object", "required": ["note"],
            "properties": {"note": {"type": ["string", "null"]}}}}}
        }"##,
    )
    .unwrap();
    let op = doc.check_request("GET", "/things/7", &[], b"").unwrap();
    let json = vec![("content-type".to_string(), "application/json".to_string())];
    doc.check_response(&op, 200, &json, br#"{"note": null}"#)
        .expect("null note");
    assert_one_violation(
        doc.check_response(&op, 200, &json, br#"{"note": 1}"#),
        &["/note"],
    );
    assert_one_violation(
        doc.check_request("GET", "/things/seven", &[], b""),
        &["path parameter `id`", "`seven` is not an integer"],
    );
}

#[test]
fn header_parameters_named_accept_content_type_or_authorization_are_ignored() {
    let doc = OpenApi::parse(
        r#"
openapi: 3.0.0
info: {title: t, version: "1"}
paths:
  /ping:
    get:
      parameters:
        - {name: Authorization, in: header, required: true, schema: {type: string}}
        - {name: Accept, in: header, required: true, schema: {type: string}}
        - {name: X-Trace, in: header, required: true, schema: {type: integer}}
      responses:
        "200": {description: ok}
"#,
    )
    .unwrap();
    let trace = vec![("x-trace".to_string(), "12".to_string())];
    doc.check_request("GET", "/ping", &trace, b"")
        .expect("Authorization and Accept are not parameters");
    assert_one_violation(
        doc.check_request("GET", "/ping", &[], b""),
        &["required header parameter `X-Trace` is missing"],
    );
    let bad = vec![("X-Trace".to_string(), "twelve".to_string())];
    assert_one_violation(
        doc.check_request("GET", "/ping", &bad, b""),
        &["header parameter `X-Trace`", "not an integer"],
    );
}

#[test]
fn a_value_fitting_no_alternative_lists_why_for_each() {
    let doc = OpenApi::parse(
        r##"{
          "openapi": "3.1.0",
          "info": {"title": "t", "version": "1"},
          "paths": {"/events": {"post": {
            "requestBody": {"required": true, "content": {"application/json": {"schema": {
              "oneOf": [
                {"type": "object", "required": ["exit"], "properties": {"exit": {"type": "integer"}}},
                {"type": "object", "required": ["data"], "properties": {"data": {"type": "string"}}}
              ]}}}},
            "responses": {"204": {"description": "ok"}}}}}
        }"##,
    )
    .unwrap();
    let json = vec![("content-type".to_string(), "application/json".to_string())];
    doc.check_request("POST", "/events", &json, br#"{"exit": 0}"#)
        .expect("the first alternative");
    assert_one_violation(
        doc.check_request("POST", "/events", &json, br#"{"exit": "0"}"#),
        &[
            "fits none of the 2 alternatives",
            "(1) at `/exit`: \"0\" is not of type \"integer\"",
            "(2) \"data\" is a required property",
        ],
    );
}

#[test]
fn query_objects_are_recognised_by_their_members_keys() {
    let doc = OpenApi::parse(
        r#"
openapi: 3.0.0
info: {title: t, version: "1"}
paths:
  /deep:
    get:
      parameters:
        - {name: filter, in: query, required: true, style: deepObject,
           schema: {type: object, properties: {state: {type: string}}}}
        - {name: limit, in: query, schema: {type: integer}}
      responses:
        "200": {description: ok}
  /exploded:
    get:
      parameters:
        - {name: labels, in: query, required: true,
           schema: {type: object, additionalProperties: {type: string}}}
      responses:
        "200": {description: ok}
"#,
    )
    .unwrap();
    doc.check_request("GET", "/deep?filter[state]=started&limit=2", &[], b"")
        .expect("deepObject members belong to `filter`");
    assert_one_violation(
        doc.check_request("GET", "/deep?limit=2", &[], b""),
        &["required query parameter `filter` is missing"],
    );
    assert_one_violation(
        doc.check_request("GET", "/deep?filter[state]=x&sort=asc", &[], b""),
        &["query parameter `sort` is not declared"],
    );
    doc.check_request("GET", "/exploded?run=r1&team=t", &[], b"")
        .expect("exploded members are keys of their own");
    assert_one_violation(
        doc.check_request("GET", "/exploded", &[], b""),
        &["required query parameter `labels` is missing"],
    );
}

#[test]
fn an_operation_of_another_document_is_refused() {
    let other = OpenApi::parse(
        "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths:\n  /x:\n    get:\n      \
         responses:\n        '200': {description: ok}\n",
    )
    .unwrap();
    let op = other.check_request("GET", "/x", &[], b"").unwrap();
    assert_one_violation(
        doc().check_response(&op, 200, &[], b""),
        &["GET /x is not an operation of this document"],
    );
}

#[test]
fn json_lines_are_each_checked_against_the_one_line_schema() {
    let doc = doc();
    let op = doc
        .check_request("GET", "/api/sandbox/sbx-1/logs", &auth(), b"")
        .unwrap();
    let ndjson = vec![(
        "content-type".to_string(),
        "application/x-ndjson".to_string(),
    )];
    let good = b"{\"stream\":\"stdout\",\"data\":\"a\"}\n\n{\"stream\":\"stderr\",\"data\":\"b\"}";
    doc.check_json_lines(&op, 200, &ndjson, good)
        .expect("every line fits");
    let bad = b"{\"stream\":\"stdout\",\"data\":\"a\"}\n{\"stream\":\"stdlog\"}\nnot json\n";
    let violations = doc.check_json_lines(&op, 200, &ndjson, bad).unwrap_err();
    let all = violations.join("\n");
    assert_eq!(violations.len(), 3, "{all}");
    assert!(
        all.contains("line 2 of the `application/x-ndjson` response body at `/stream`"),
        "{all}"
    );
    assert!(
        all.contains(
            "line 2 of the `application/x-ndjson` response body: \"data\" is a required property"
        ),
        "{all}"
    );
    assert!(
        all.contains("line 3 of the `application/x-ndjson` response body is not JSON"),
        "{all}"
    );
    // Other content types are not JSON lines.
    doc.check_json_lines(&op, 200, &json_headers(), b"not json")
        .expect("not JSON lines");
}

#[test]
fn a_schema_that_cannot_compile_is_named_by_compile_all_and_reported_when_used() {
    let doc = OpenApi::parse(
        r#"
openapi: 3.0.0
info: {title: t, version: "1"}
paths:
  /things:
    get:
      operationId: listThings
      parameters:
        - {name: name, in: query, schema: {type: string, pattern: "(["}}
      responses:
        "200": {description: ok}
"#,
    )
    .expect("loading does not compile schemas");
    let failures = doc.compile_all().unwrap_err();
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].starts_with("GET /things: query parameter `name`"),
        "{failures:#?}"
    );
    assert_one_violation(
        doc.check_request("GET", "/things?name=x", &[], b""),
        &[
            "query parameter `name`",
            "cannot be compiled, so nothing was checked",
        ],
    );
    self::doc()
        .compile_all()
        .expect("the fixture compiles whole");
}
