//! Test-only: a local fake of a provider's HTTP API that checks every request and response
//! against the provider's published OpenAPI document.
//!
//! No provider is reachable from the test machines, so each provider crate tests against a
//! [`FakeApi`] that serves the provider's API on `127.0.0.1`, backed by a [`Handler`] the test
//! writes. Every exchange is checked against a stored copy of the provider's OpenAPI document
//! ([`OpenApi`]); a violation is recorded (the request is still answered, so the client sees
//! what it would see) and the test ends with [`FakeApi::assert_no_violations`].
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use reaper_fake_api::{handler_fn, FakeApi, FakeRequest, FakeResponse, Fault, OpenApi};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // The stored copy of the provider's document (this crate's test fixture here).
//! let doc = Arc::new(OpenApi::from_file("tests/fixtures/sandboxes.yaml").unwrap());
//! let fake = FakeApi::start(doc, handler_fn(|req: FakeRequest| async move {
//!     // Route on the operationId (or on `req.operation`'s method and template).
//!     match req.operation_id.as_deref() {
//!         Some("getSandbox") => FakeResponse::json(200, &json!({
//!             "id": req.param("sandboxId"),
//!             "state": "started",
//!             "createdAt": "2026-12-03T09:00:00Z",
//!         })),
//!         Some("deleteSandbox") => FakeResponse::empty(204),
//!         _ => FakeResponse::json(404, &json!({"message": "not found"})),
//!     }
//! })).await;
//! // `fake.url()` is `http://127.0.0.1:PORT/api`: the document's base path is included.
//! // Configure the provider with it; here a plain client stands in.
//! let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
//! let get = || client
//!     .get(format!("{}/sandbox/sbx-1", fake.url()))
//!     .header("authorization", "Bearer token")
//!     .send();
//!
//! // A recorded error shape: the next getSandbox is answered 429 with Retry-After.
//! fake.inject(Fault::json(429, &json!({"message": "slow down"}))
//!     .with_header("retry-after", "1")
//!     .on("getSandbox")
//!     .undocumented()); // the fixture declares no 429 for getSandbox
//! assert_eq!(get().await.unwrap().status(), 429);
//! assert_eq!(get().await.unwrap().status(), 200);
//!
//! assert_eq!(fake.count("getSandbox"), 2);
//! fake.assert_no_violations();
//! # }
//! ```
//!
//! # What is checked
//!
//! Requests ([`OpenApi::check_request`]):
//! - the path matches a path template of the document, with or without the first `servers`
//!   URL's path (the base path); a literal segment wins over a `{param}` one;
//! - the method is declared for that path;
//! - required path, query, header and cookie parameters are present, and every parameter's
//!   value fits its schema after conversion from text (integer, number, boolean, enum,
//!   pattern, arrays as repeated keys or comma lists);
//! - no query parameter the operation does not declare (API-key query credentials excepted);
//! - the credentials of one `security` alternative are present (`apiKey` header/query/cookie,
//!   `http` bearer/basic as `Authorization: <Scheme> <token>`, OAuth2/OpenID as bearer);
//! - a body only where a request body is declared, a required one is sent, its `Content-Type`
//!   is declared (exact, `type/*` or `*/*`), and JSON bodies validate against the schema.
//!
//! Responses ([`OpenApi::check_response`]):
//! - the status is declared exactly, by range (`4XX`) or by `default`;
//! - declared required response headers are present;
//! - when the response declares content: the `Content-Type` is declared and a JSON body
//!   (`application/json`, `*+json`) validates against its schema; an empty body where only
//!   JSON with a schema is declared is a violation (not for `HEAD`, 204, 304). A response that
//!   declares no content is not checked for its body (documents often leave error bodies
//!   undescribed). A body on a `HEAD`, 204 or 304 answer is a violation (HTTP drops it).
//! - **Streamed answers** ([`FakeBody::Stream`]) are checked for status, headers and content
//!   type only; their chunks are never validated against a schema. Non-JSON content
//!   (`application/x-ndjson`, `application/connect+json`, `text/plain`, ...) is likewise
//!   checked for status and content type only.
//! - Opt-in, [`FakeApiOptions::check_json_lines`]: each line of a JSON-lines answer
//!   (`application/x-ndjson`, `application/jsonl`, ...), whole or streamed, is validated
//!   against the schema the document gives for that media type, read as one line's shape
//!   (also [`OpenApi::check_json_lines`]). A stream the client cuts short is not checked for
//!   its unfinished last line.
//!
//! Schemas: a `readOnly` property is not required in a request, nor a `writeOnly` one in a
//! response. OpenAPI 3.0 schemas are rewritten to JSON Schema (`nullable: true` becomes a type
//! union with `null`, or `anyOf [schema, null]` for a `$ref`) and validated as draft 4; 3.1
//! schemas are JSON Schema 2020-12. `$ref`s must point inside the document (`#/...`); other
//! references are refused when the document is loaded, so store a self-contained copy. Formats
//! the JSON Schema draft knows (`date-time`, `email`, ...) are validated; OpenAPI's own
//! (`int64`, `binary`, ...) are ignored.
//!
//! A JSON value that fits none of the alternatives of an `anyOf`/`oneOf` is explained by each
//! alternative's first error (and a nullable reference by its own errors).
//!
//! Use [`OpenApi::compile_all`] (or `cargo run -p reaper-fake-api --example inspect -- FILE`)
//! to check that a stored copy loads and that every schema in it compiles.
//!
//! # Naming operations
//!
//! An operation is named by its `operationId`, or by `METHOD /template` (e.g.
//! `DELETE /sandboxes/{sandboxID}`) when the document gives none: [`FakeApi::count`],
//! [`Fault::on`] and [`Recorded::is`] accept either. Handlers get both
//! [`FakeRequest::operation_id`] and the matched [`OperationRef`] (method, template, path
//! parameters).
//!
//! # Faults
//!
//! [`FakeApi::inject`] queues a [`Fault`] for the next N requests (optionally only those
//! matched to one operation): answer with a status, headers and body instead of calling
//! the handler ([`Fault::respond`], [`Fault::json`]), [`Fault::stall`] (never answer, until
//! the client times out or the fake is dropped) or [`Fault::close`] (drop the connection).
//! An injected answer is checked against the document like any other, unless marked
//! [`Fault::undocumented`] (an error shape the document does not declare, e.g. a 429 recorded
//! from the provider's docs).
//!
//! # Endpoints outside the document
//!
//! A part of an API that no OpenAPI document describes (E2B's envd process service speaks
//! Connect over a `.proto`) can share the fake: [`FakeApiOptions::undocumented_prefix`] lets
//! those paths through to the handler unchecked (`operation_id: None`), where the test checks
//! them against a recorded shape. Otherwise an undeclared path is a violation.
//!
//! # Lifecycle
//!
//! [`FakeApi::start`] (inside a tokio runtime, e.g. `#[tokio::test]`) binds `127.0.0.1:0`
//! and serves HTTP/1.1 on that runtime until the [`FakeApi`] is dropped, which closes the port
//! and drops every connection, stalled ones included. A handler that panics answers 500 and
//! the panic is recorded as a violation. [`FakeApi::requests`] returns every exchange ([`Recorded`]: operation, method,
//! path, query, headers, body, status, response), [`FakeApi::count`] counts one operation's.
#![warn(missing_docs)]

mod openapi;
mod schema;
mod server;

pub use openapi::{OpenApi, OperationRef, RequestCheck};
pub use server::{
    handler_fn, FakeApi, FakeApiOptions, FakeBody, FakeRequest, FakeResponse, Fault, Handler,
    Recorded,
};
