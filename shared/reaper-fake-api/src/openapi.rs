//! An OpenAPI 3.0 / 3.1 document, reduced to what checking traffic needs: the operations with
//! their path templates, parameters, request bodies, responses and security requirements, and
//! every schema compiled (lazily, once) into a JSON Schema validator.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::schema::{self, Dialect, Direction};

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// A parsed OpenAPI 3.x document (JSON or YAML), used to check HTTP traffic.
///
/// Local `$ref`s (`#/components/...`, or any other pointer into the same document) are
/// resolved; references to other files or URLs are rejected at load time, so a document that
/// loads is self-contained.
pub struct OpenApi {
    title: String,
    api_version: String,
    openapi: String,
    base_path: String,
    operations: Vec<Operation>,
    security_schemes: BTreeMap<String, SecurityScheme>,
    schemas: Vec<SchemaSlot>,
    dialect: Dialect,
    /// The document's `components`, rewritten to plain JSON Schema for requests and for
    /// responses: each compiled validator carries the parts it references so
    /// `#/components/...` references resolve inside one self-contained schema.
    request_components: Value,
    response_components: Value,
}

impl fmt::Debug for OpenApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenApi")
            .field("title", &self.title)
            .field("version", &self.api_version)
            .field("openapi", &self.openapi)
            .field("base_path", &self.base_path)
            .field("operations", &self.operations.len())
            .finish_non_exhaustive()
    }
}

/// The operation a request was matched to, with the values bound to its path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationRef {
    /// The operation's `operationId`, when the document gives one.
    pub operation_id: Option<String>,
    /// Upper-case HTTP method.
    pub method: String,
    /// The path template as written in the document, e.g. `/sandbox/{sandboxId}`.
    pub path_template: String,
    /// Path parameters, percent-decoded, by name.
    pub path_params: BTreeMap<String, String>,
    index: usize,
}

impl OperationRef {
    /// `operationId` if there is one, else [`route`](Self::route): a name for messages,
    /// counts and faults.
    pub fn name(&self) -> String {
        match &self.operation_id {
            Some(id) => id.clone(),
            None => self.route(),
        }
    }

    /// `METHOD /template`, e.g. `DELETE /sandboxes/{sandboxID}`: names an operation in a
    /// document that gives no `operationId`s.
    pub fn route(&self) -> String {
        format!("{} {}", self.method, self.path_template)
    }

    /// Whether `name` is this operation's `operationId` or its [`route`](Self::route).
    pub fn is(&self, name: &str) -> bool {
        self.operation_id.as_deref() == Some(name) || self.route() == name
    }
}

/// What [`OpenApi::inspect_request`] found: the operation (when the path and method matched one)
/// and every violation, so a caller can route a request even when it breaks the document.
#[derive(Debug, Clone)]
pub struct RequestCheck {
    /// The operation the path and method matched, if any.
    pub operation: Option<OperationRef>,
    /// Every way the request breaks the document (empty when it conforms).
    pub violations: Vec<String>,
}

#[derive(Debug)]
struct Operation {
    method: String,
    template: String,
    segments: Vec<Vec<Piece>>,
    literal_segments: usize,
    operation_id: Option<String>,
    parameters: Vec<Parameter>,
    body: Option<BodySpec>,
    responses: Vec<(StatusKey, ResponseSpec)>,
    /// Alternatives, each a set of scheme names that must all be satisfied; `None` when the
    /// operation asks for no credentials.
    security: Option<Vec<Vec<String>>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Param(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum In {
    Path,
    Query,
    Header,
    Cookie,
}

impl In {
    fn word(self) -> &'static str {
        match self {
            In::Path => "path",
            In::Query => "query",
            In::Header => "header",
            In::Cookie => "cookie",
        }
    }
}

#[derive(Debug)]
struct Parameter {
    name: String,
    location: In,
    required: bool,
    schema: Option<usize>,
    kind: ValueKind,
    /// Arrays in a query: `form` + `explode` (the default) repeats the key; otherwise one
    /// comma-separated value.
    explode: bool,
    /// `style: deepObject`: members arrive as `name[member]=value`.
    deep_object: bool,
}

impl Parameter {
    /// A query object whose members arrive as top-level keys of their own.
    fn exploded_object(&self) -> bool {
        self.location == In::Query
            && self.kind == ValueKind::Object
            && self.explode
            && !self.deep_object
    }

    /// Whether the query key `key` carries (part of) this parameter.
    fn owns_query_key(&self, key: &str) -> bool {
        self.location == In::Query
            && (key == self.name
                || (self.deep_object
                    && key
                        .strip_prefix(self.name.as_str())
                        .is_some_and(|rest| rest.starts_with('['))))
    }
}

/// How a parameter's text is turned into JSON before its schema is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    String,
    Integer,
    Number,
    Boolean,
    Array(ItemKind),
    /// Only its presence is checked: its members arrive as separate keys (`form` + `explode`:
    /// `a=1&b=2`; `deepObject`: `p[a]=1`) or as `p=a,1,b,2`, with no types to go by.
    Object,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    String,
    Integer,
    Number,
    Boolean,
}

#[derive(Debug)]
struct BodySpec {
    required: bool,
    content: Vec<MediaSpec>,
}

#[derive(Debug)]
struct MediaSpec {
    media: String,
    schema: Option<usize>,
}

#[derive(Debug)]
struct ResponseSpec {
    headers: Vec<(String, bool)>,
    content: Vec<MediaSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusKey {
    Exact(u16),
    Range(u16),
    Default,
}

impl fmt::Display for StatusKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusKey::Exact(code) => write!(f, "{code}"),
            StatusKey::Range(first) => write!(f, "{first}XX"),
            StatusKey::Default => f.write_str("default"),
        }
    }
}

#[derive(Debug, Clone)]
enum SecurityScheme {
    Header(String),
    Query(String),
    Cookie(String),
    /// `http` with a scheme (`bearer`, `basic`, ...), and OAuth2 / OpenID Connect (a bearer
    /// token in practice).
    Authorization(String),
}

impl SecurityScheme {
    fn describe(&self) -> String {
        match self {
            SecurityScheme::Header(name) => format!("header `{name}`"),
            SecurityScheme::Query(name) => format!("query parameter `{name}`"),
            SecurityScheme::Cookie(name) => format!("cookie `{name}`"),
            SecurityScheme::Authorization(scheme) => format!("`Authorization: {scheme} ...`"),
        }
    }
}

struct SchemaSlot {
    /// Where the schema sits, for messages: `GET /a/{b}: response 200 application/json`.
    site: String,
    direction: Direction,
    schema: Value,
    validator: OnceLock<Result<jsonschema::Validator, String>>,
}

impl OpenApi {
    /// Reads and parses a document from a `.json`, `.yaml` or `.yml` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<OpenApi, String> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the OpenAPI document {}: {e}", path.display()))?;
        OpenApi::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses a document from JSON or YAML text (also available as [`FromStr`]).
    pub fn parse(text: &str) -> Result<OpenApi, String> {
        let doc: Value = match serde_json::from_str(text) {
            Ok(doc) => doc,
            Err(json_err) => serde_norway::from_str(text).map_err(|yaml_err| {
                format!("the OpenAPI document is neither JSON ({json_err}) nor YAML ({yaml_err})")
            })?,
        };
        OpenApi::from_value(doc)
    }

    /// Builds the checker from an already parsed document.
    pub fn from_value(doc: Value) -> Result<OpenApi, String> {
        Loader::new(&doc)?.load()
    }

    /// `info.title`.
    pub fn title(&self) -> &str {
        &self.title
    }

    /// `info.version`: the API's version, not the OpenAPI version.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// The path of the first `servers` URL (e.g. `/api` for `https://app.example.com/api`), or
    /// the empty string: a fake serves the API under it.
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// Every operation's `operationId`, in document order.
    pub fn operation_ids(&self) -> Vec<&str> {
        self.operations
            .iter()
            .filter_map(|op| op.operation_id.as_deref())
            .collect()
    }

    /// Compiles every schema of every operation now (they are otherwise compiled on first
    /// use), listing those that cannot be: a provider's test can assert its stored copy is
    /// fully usable.
    pub fn compile_all(&self) -> Result<(), Vec<String>> {
        let failures: Vec<String> = (0..self.schemas.len())
            .filter_map(|i| {
                self.validator(i)
                    .err()
                    .map(|e| format!("{}: {e}", self.schemas[i].site))
            })
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures)
        }
    }

    /// Finds the operation for `method` + `path_and_query` and checks the request against it.
    ///
    /// The path may include the `servers` base path or not (a whole URL is taken for its path
    /// and query). Checked: the path matches a path
    /// template (literal segments win over templated ones), the method is declared there,
    /// required path/query/header parameters are present, parameter values fit their schema
    /// (integer, number, boolean, enum, pattern, ...), no undeclared query parameter is sent,
    /// the credentials of one `security` alternative are present, and the body fits the
    /// declared content type and (for JSON) its schema. `Err` lists every violation.
    pub fn check_request(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<OperationRef, Vec<String>> {
        let check = self.inspect_request(method, path_and_query, headers, body);
        match check.operation {
            Some(op) if check.violations.is_empty() => Ok(op),
            _ => Err(check.violations),
        }
    }

    /// Like [`check_request`](Self::check_request), but returns the matched operation even
    /// when the request breaks the document, so a fake can still answer it.
    pub fn inspect_request(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> RequestCheck {
        let method = method.to_ascii_uppercase();
        // A whole URL is taken for its path and query.
        let path_and_query = match path_and_query
            .strip_prefix("http://")
            .or_else(|| path_and_query.strip_prefix("https://"))
        {
            Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => path_and_query,
        };
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, query),
            None => (path_and_query, ""),
        };
        let what = format!("{method} {path}");
        let (index, path_params) = match self.find(&method, path) {
            Ok(found) => found,
            Err(violation) => {
                return RequestCheck {
                    operation: None,
                    violations: vec![format!("{what}: {violation}")],
                }
            }
        };
        let op = &self.operations[index];
        let mut violations = Vec::new();
        let query_pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        self.check_parameters(op, &path_params, &query_pairs, headers, &mut violations);
        self.check_security(op, &query_pairs, headers, &mut violations);
        self.check_request_body(op, headers, body, &mut violations);
        RequestCheck {
            operation: Some(OperationRef {
                operation_id: op.operation_id.clone(),
                method: op.method.clone(),
                path_template: op.template.clone(),
                path_params,
                index,
            }),
            violations: violations
                .into_iter()
                .map(|v| format!("{what} ({}): {v}", describe_op(op)))
                .collect(),
        }
    }

    /// Checks that `status` is a declared response of the operation (exactly, or by a `4XX`
    /// range, or `default`), that its required headers are present, and that the body fits
    /// the declared content type and, for JSON content with a schema, the schema.
    pub fn check_response(
        &self,
        op: &OperationRef,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<(), Vec<String>> {
        self.check_response_inner(op, status, headers, Some(body))
    }

    /// Checks a streamed response: the status, the headers and the content type only (its
    /// body is never whole in one place).
    pub fn check_streamed_response(
        &self,
        op: &OperationRef,
        status: u16,
        headers: &[(String, String)],
    ) -> Result<(), Vec<String>> {
        self.check_response_inner(op, status, headers, None)
    }

    /// Validates each line of a JSON-lines answer (`application/x-ndjson`, `application/jsonl`,
    /// ...) against the schema the document gives for that media type, read as the shape of
    /// one line. Answers of other content types, and undeclared statuses (which
    /// [`check_response`](Self::check_response) reports), pass.
    pub fn check_json_lines(
        &self,
        op: &OperationRef,
        status: u16,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<(), Vec<String>> {
        let mut violations = Vec::new();
        for (i, line) in body.split(|b| *b == b'\n').enumerate() {
            violations.extend(self.check_json_line(op, status, headers, line, i + 1));
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// One line of a JSON-lines answer, numbered from 1 for messages.
    pub(crate) fn check_json_line(
        &self,
        op_ref: &OperationRef,
        status: u16,
        headers: &[(String, String)],
        line: &[u8],
        number: usize,
    ) -> Vec<String> {
        let line = line.trim_ascii();
        let Some(content_type) = header(headers, "content-type").map(essence) else {
            return Vec::new();
        };
        if line.is_empty() || !is_json_lines(&content_type) {
            return Vec::new();
        }
        let Ok((op, Some(response))) = self.response(op_ref, status) else {
            return Vec::new();
        };
        let Some(schema) = best_media(&response.content, &content_type).and_then(|m| m.schema)
        else {
            return Vec::new();
        };
        let what = format!("line {number} of the `{content_type}` response body");
        let mut violations = Vec::new();
        match serde_json::from_slice::<Value>(line) {
            Ok(json) => self.validate(schema, &json, &what, &mut violations),
            Err(e) => violations.push(format!("{what} is not JSON: {e}")),
        }
        violations
            .into_iter()
            .map(|v| {
                format!(
                    "{} {} → {status} ({}): {v}",
                    op.method,
                    op.template,
                    describe_op(op)
                )
            })
            .collect()
    }

    /// The operation behind `op_ref` and the response declared for `status` (`None` when it
    /// is not declared).
    fn response(
        &self,
        op_ref: &OperationRef,
        status: u16,
    ) -> Result<(&Operation, Option<&ResponseSpec>), String> {
        let op = self
            .operations
            .get(op_ref.index)
            .filter(|op| op.method == op_ref.method && op.template == op_ref.path_template)
            .ok_or_else(|| {
                format!(
                    "{} is not an operation of this document (was it matched by another one?)",
                    op_ref.route()
                )
            })?;
        let declared = |wanted: StatusKey| {
            op.responses
                .iter()
                .find(|(key, _)| *key == wanted)
                .map(|(_, response)| response)
        };
        let response = declared(StatusKey::Exact(status))
            .or_else(|| declared(StatusKey::Range(status / 100)))
            .or_else(|| declared(StatusKey::Default));
        Ok((op, response))
    }

    fn check_response_inner(
        &self,
        op_ref: &OperationRef,
        status: u16,
        headers: &[(String, String)],
        body: Option<&[u8]>,
    ) -> Result<(), Vec<String>> {
        let (op, response) = self.response(op_ref, status).map_err(|e| vec![e])?;
        let prefix = format!("{} {} → {status}", op.method, op.template);
        let Some(response) = response else {
            let declared: Vec<String> = op.responses.iter().map(|(k, _)| k.to_string()).collect();
            return Err(vec![format!(
                "{prefix} ({}): status {status} is not a declared response (declared: {}); \
                 answer with a declared status or check the document",
                describe_op(op),
                declared.join(", ")
            )]);
        };
        let mut violations = Vec::new();
        for (name, required) in &response.headers {
            if *required && header(headers, name).is_none() {
                violations.push(format!("required response header `{name}` is missing"));
            }
        }
        let bodiless = op.method == "HEAD" || status == 204 || status == 304;
        if bodiless && body.is_some_and(|b| !b.is_empty()) {
            // HTTP forbids it; hyper would drop it silently and the client never see it.
            violations.push(format!(
                "a {} answer carries no body, but the fake sent one",
                if op.method == "HEAD" {
                    "HEAD".to_string()
                } else {
                    status.to_string()
                }
            ));
        }
        self.check_content(
            "response body",
            &response.content,
            false,
            headers,
            body,
            bodiless,
            &mut violations,
        );
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations
                .into_iter()
                .map(|v| format!("{prefix} ({}): {v}", describe_op(op)))
                .collect())
        }
    }

    fn find(&self, method: &str, path: &str) -> Result<(usize, BTreeMap<String, String>), String> {
        let stripped = strip_base(path, &self.base_path);
        let mut candidates: Vec<(usize, BTreeMap<String, String>)> = Vec::new();
        for candidate_path in stripped.iter().copied().chain(std::iter::once(path)) {
            let segments: Vec<&str> = split_path(candidate_path);
            for (index, op) in self.operations.iter().enumerate() {
                if let Some(params) = match_template(&op.segments, &segments) {
                    candidates.push((index, params));
                }
            }
            if !candidates.is_empty() {
                break;
            }
        }
        if candidates.is_empty() {
            let base = if self.base_path.is_empty() {
                String::new()
            } else {
                format!(" (under the base path `{}`)", self.base_path)
            };
            let path = stripped.unwrap_or(path);
            let other = match path.strip_suffix('/') {
                Some(trimmed) if !trimmed.is_empty() => trimmed.to_string(),
                _ => format!("{path}/"),
            };
            let hint = if self
                .operations
                .iter()
                .any(|op| match_template(&op.segments, &split_path(&other)).is_some())
            {
                format!(" (the document has `{other}`: mind the trailing slash)")
            } else {
                String::new()
            };
            return Err(format!(
                "no path of the document{base} matches{hint}; the request goes to an \
                 undeclared endpoint"
            ));
        }
        // Literal segments beat templated ones (`/sandbox/paginated` over `/sandbox/{id}`).
        let best = candidates
            .iter()
            .map(|(i, _)| self.operations[*i].literal_segments)
            .max()
            .unwrap_or(0);
        let same_template: Vec<&(usize, BTreeMap<String, String>)> = candidates
            .iter()
            .filter(|(i, _)| self.operations[*i].literal_segments == best)
            .collect();
        if let Some((index, params)) = same_template
            .iter()
            .find(|(i, _)| self.operations[*i].method == method)
        {
            return Ok((*index, params.clone()));
        }
        // A less specific template may still declare the method.
        if let Some((index, params)) = candidates
            .iter()
            .find(|(i, _)| self.operations[*i].method == method)
        {
            return Ok((*index, params.clone()));
        }
        let template = &self.operations[same_template[0].0].template;
        let methods: Vec<&str> = same_template
            .iter()
            .map(|(i, _)| self.operations[*i].method.as_str())
            .collect();
        Err(format!(
            "the document declares {template} only for {}, not {method}",
            methods.join(", ")
        ))
    }

    fn check_parameters(
        &self,
        op: &Operation,
        path_params: &BTreeMap<String, String>,
        query: &[(String, String)],
        headers: &[(String, String)],
        violations: &mut Vec<String>,
    ) {
        let credentials: Vec<&str> = self
            .security_schemes
            .values()
            .filter_map(|s| match s {
                SecurityScheme::Query(name) => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let claimed = |key: &str| {
            credentials.contains(&key) || op.parameters.iter().any(|p| p.owns_query_key(key))
        };
        for param in &op.parameters {
            let values: Vec<&str> = match param.location {
                In::Path => path_params
                    .get(&param.name)
                    .map(String::as_str)
                    .into_iter()
                    .collect(),
                In::Query if param.exploded_object() => query
                    .iter()
                    .filter(|(k, _)| !claimed(k))
                    .map(|(_, v)| v.as_str())
                    .collect(),
                In::Query => query
                    .iter()
                    .filter(|(k, _)| param.owns_query_key(k))
                    .map(|(_, v)| v.as_str())
                    .collect(),
                In::Header => headers
                    .iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case(&param.name))
                    .map(|(_, v)| v.as_str())
                    .collect(),
                In::Cookie => cookie(headers, &param.name).into_iter().collect(),
            };
            let where_ = format!("{} parameter `{}`", param.location.word(), param.name);
            if values.is_empty() {
                if param.required {
                    violations.push(format!("required {where_} is missing"));
                }
                continue;
            }
            if param.kind == ValueKind::Object {
                continue;
            }
            let json = match to_json(param, &values) {
                Ok(json) => json,
                Err(e) => {
                    violations.push(format!("{where_}: {e}"));
                    continue;
                }
            };
            if let Some(schema) = param.schema {
                self.validate(schema, &json, &where_, violations);
            }
        }
        if op.parameters.iter().any(Parameter::exploded_object) {
            // Its members are keys of their own: any other key may be one.
            return;
        }
        let declared: Vec<&str> = op
            .parameters
            .iter()
            .filter(|p| p.location == In::Query)
            .map(|p| p.name.as_str())
            .collect();
        let mut reported: Vec<&str> = Vec::new();
        for (key, _) in query {
            let key = key.as_str();
            if !claimed(key) && !reported.contains(&key) {
                reported.push(key);
                violations.push(format!(
                    "query parameter `{key}` is not declared by the operation (declared: {})",
                    if declared.is_empty() {
                        "none".to_string()
                    } else {
                        declared.join(", ")
                    }
                ));
            }
        }
    }

    fn check_security(
        &self,
        op: &Operation,
        query: &[(String, String)],
        headers: &[(String, String)],
        violations: &mut Vec<String>,
    ) {
        let Some(alternatives) = &op.security else {
            return;
        };
        let satisfied = |name: &String| match self.security_schemes.get(name) {
            Some(SecurityScheme::Header(h)) => header(headers, h).is_some_and(|v| !v.is_empty()),
            Some(SecurityScheme::Query(q)) => query.iter().any(|(k, v)| k == q && !v.is_empty()),
            Some(SecurityScheme::Cookie(c)) => cookie(headers, c).is_some(),
            Some(SecurityScheme::Authorization(scheme)) => header(headers, "authorization")
                .and_then(|v| v.split_once(' '))
                .is_some_and(|(s, token)| {
                    s.eq_ignore_ascii_case(scheme) && !token.trim().is_empty()
                }),
            // Unknown schemes were rejected at load time.
            None => false,
        };
        if alternatives.iter().any(|all| all.iter().all(satisfied)) {
            return;
        }
        let wanted: Vec<String> = alternatives
            .iter()
            .map(|all| {
                all.iter()
                    .filter_map(|name| self.security_schemes.get(name))
                    .map(SecurityScheme::describe)
                    .collect::<Vec<_>>()
                    .join(" and ")
            })
            .collect();
        violations.push(format!(
            "credentials are missing: send {}",
            wanted.join(", or ")
        ));
    }

    fn check_request_body(
        &self,
        op: &Operation,
        headers: &[(String, String)],
        body: &[u8],
        violations: &mut Vec<String>,
    ) {
        match &op.body {
            None => {
                if !body.is_empty() {
                    violations.push(format!(
                        "sends a {}-byte body but the operation declares no request body",
                        body.len()
                    ));
                }
            }
            Some(spec) => {
                if body.is_empty() {
                    if spec.required {
                        violations.push(format!(
                            "the request body is required ({}) but none was sent",
                            media_list(&spec.content)
                        ));
                    }
                    return;
                }
                self.check_content(
                    "request body",
                    &spec.content,
                    true,
                    headers,
                    Some(body),
                    false,
                    violations,
                );
            }
        }
    }

    /// Checks a body against declared content: the content type is declared, and JSON parses
    /// and fits its schema. `body: None` is a stream (content type only).
    #[allow(clippy::too_many_arguments)]
    fn check_content(
        &self,
        what: &str,
        content: &[MediaSpec],
        is_request: bool,
        headers: &[(String, String)],
        body: Option<&[u8]>,
        empty_allowed: bool,
        violations: &mut Vec<String>,
    ) {
        if content.is_empty() {
            // Nothing is described (an error answer often declares no content): any body is
            // left unchecked rather than guessed at.
            return;
        }
        let is_empty = body.is_some_and(<[u8]>::is_empty);
        if is_empty {
            if !is_request
                && !empty_allowed
                && content
                    .iter()
                    .all(|m| is_json(&m.media) && m.schema.is_some())
            {
                violations.push(format!(
                    "the {what} is empty but the document declares {}",
                    media_list(content)
                ));
            }
            return;
        }
        let Some(content_type) = header(headers, "content-type") else {
            violations.push(format!(
                "the {what} has no Content-Type header (declared: {})",
                media_list(content)
            ));
            return;
        };
        let actual = essence(content_type);
        let Some(spec) = best_media(content, &actual) else {
            violations.push(format!(
                "the {what} is `{actual}`, which the document does not declare (declared: {})",
                media_list(content)
            ));
            return;
        };
        let (Some(body), Some(schema)) = (body, spec.schema) else {
            return;
        };
        if !is_json(&actual) {
            return;
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(json) => self.validate(schema, &json, what, violations),
            Err(e) => violations.push(format!(
                "the {what} is declared `{actual}` but is not JSON: {e}"
            )),
        }
    }

    fn validator(&self, schema: usize) -> Result<&jsonschema::Validator, &str> {
        let slot = &self.schemas[schema];
        slot.validator
            .get_or_init(|| {
                let components = match slot.direction {
                    Direction::Request => &self.request_components,
                    Direction::Response => &self.response_components,
                };
                schema::compile(&slot.schema, components, self.dialect)
            })
            .as_ref()
            .map_err(String::as_str)
    }

    fn validate(&self, schema: usize, instance: &Value, what: &str, violations: &mut Vec<String>) {
        match self.validator(schema) {
            Ok(validator) => {
                for error in validator.iter_errors(instance) {
                    for (at, message) in explain(&error) {
                        let at = if at.is_empty() {
                            String::new()
                        } else {
                            format!(" at `{at}`")
                        };
                        violations.push(format!("{what}{at}: {message}"));
                    }
                }
            }
            Err(e) => violations.push(format!(
                "{what}: the document's schema cannot be compiled, so nothing was checked: {e}"
            )),
        }
    }
}

/// An error in words, as `(instance path, message)` pairs. "Not valid under any of the
/// schemas in anyOf" says nothing a reader can act on, so alternatives are opened: the `null`
/// alternative of a nullable schema is dropped, and when one alternative is left its own
/// errors are given; otherwise each alternative's first error is listed.
fn explain(error: &jsonschema::ValidationError<'_>) -> Vec<(String, String)> {
    use jsonschema::error::ValidationErrorKind;
    let (ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context }) =
        error.kind()
    else {
        return vec![(error.instance_path().to_string(), error.to_string())];
    };
    let branches: Vec<&Vec<jsonschema::ValidationError<'static>>> = context
        .iter()
        .filter(|branch| {
            !(branch.len() == 1 && branch[0].to_string().ends_with("is not of type \"null\""))
        })
        .collect();
    match branches.as_slice() {
        [] => vec![(error.instance_path().to_string(), error.to_string())],
        [only] => only.iter().flat_map(explain).collect(),
        several => {
            let reasons: Vec<String> = several
                .iter()
                .enumerate()
                .filter_map(|(i, branch)| {
                    let (at, message) = explain(branch.first()?).into_iter().next()?;
                    let at = if at.is_empty() {
                        String::new()
                    } else {
                        format!("at `{at}`: ")
                    };
                    Some(format!("({}) {at}{message}", i + 1))
                })
                .collect();
            vec![(
                error.instance_path().to_string(),
                format!(
                    "{} fits none of the {} alternatives: {}",
                    error.instance(),
                    several.len(),
                    reasons.join("; ")
                ),
            )]
        }
    }
}

impl FromStr for OpenApi {
    type Err = String;

    fn from_str(text: &str) -> Result<OpenApi, String> {
        OpenApi::parse(text)
    }
}

fn describe_op(op: &Operation) -> String {
    match &op.operation_id {
        Some(id) => format!("operation `{id}`"),
        None => format!("{} {}", op.method, op.template),
    }
}

fn media_list(content: &[MediaSpec]) -> String {
    content
        .iter()
        .map(|m| format!("`{}`", m.media))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `application/json; charset=utf-8` → `application/json`.
fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Newline-delimited JSON under its usual names.
fn is_json_lines(media: &str) -> bool {
    matches!(
        media,
        "application/x-ndjson"
            | "application/ndjson"
            | "application/jsonl"
            | "application/x-jsonlines"
            | "application/jsonlines"
    )
}

fn is_json(media: &str) -> bool {
    media == "application/json" || media.ends_with("+json")
}

/// The declared media type that covers `actual`: exact first, then `type/*`, then `*/*`.
fn best_media<'a>(content: &'a [MediaSpec], actual: &str) -> Option<&'a MediaSpec> {
    let major = actual.split('/').next().unwrap_or("");
    content
        .iter()
        .find(|m| m.media == actual)
        .or_else(|| {
            content
                .iter()
                .find(|m| m.media.strip_suffix("/*") == Some(major))
        })
        .or_else(|| content.iter().find(|m| m.media == "*/*"))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn cookie<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("cookie"))
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn strip_base<'a>(path: &'a str, base: &str) -> Option<&'a str> {
    if base.is_empty() {
        return None;
    }
    let rest = path.strip_prefix(base)?;
    if rest.is_empty() {
        Some("/")
    } else if rest.starts_with('/') {
        Some(rest)
    } else {
        None
    }
}

fn split_path(path: &str) -> Vec<&str> {
    path.strip_prefix('/').unwrap_or(path).split('/').collect()
}

fn parse_template(template: &str) -> Result<Vec<Vec<Piece>>, String> {
    split_path(template)
        .into_iter()
        .map(|segment| {
            let mut pieces = Vec::new();
            let mut rest = segment;
            while let Some(open) = rest.find('{') {
                if open > 0 {
                    pieces.push(Piece::Literal(rest[..open].to_string()));
                }
                let close = rest[open..]
                    .find('}')
                    .ok_or_else(|| format!("path template `{template}` has an unclosed `{{`"))?;
                pieces.push(Piece::Param(rest[open + 1..open + close].to_string()));
                rest = &rest[open + close + 1..];
            }
            if !rest.is_empty() || pieces.is_empty() {
                pieces.push(Piece::Literal(rest.to_string()));
            }
            Ok(pieces)
        })
        .collect()
}

fn match_template(template: &[Vec<Piece>], segments: &[&str]) -> Option<BTreeMap<String, String>> {
    if template.len() != segments.len() {
        return None;
    }
    let mut params = BTreeMap::new();
    for (pieces, segment) in template.iter().zip(segments) {
        let decoded = percent_encoding::percent_decode_str(segment)
            .decode_utf8_lossy()
            .into_owned();
        if !match_pieces(pieces, &decoded, &mut params) {
            return None;
        }
    }
    Some(params)
}

fn match_pieces(pieces: &[Piece], segment: &str, params: &mut BTreeMap<String, String>) -> bool {
    match pieces.split_first() {
        None => segment.is_empty(),
        Some((Piece::Literal(lit), rest)) => segment
            .strip_prefix(lit.as_str())
            .is_some_and(|tail| match_pieces(rest, tail, params)),
        Some((Piece::Param(name), rest)) => {
            // A value is never empty; try every split point, shortest value first.
            for end in (1..=segment.len()).filter(|i| segment.is_char_boundary(*i)) {
                let mut trial = params.clone();
                trial.insert(name.clone(), segment[..end].to_string());
                if match_pieces(rest, &segment[end..], &mut trial) {
                    *params = trial;
                    return true;
                }
            }
            false
        }
    }
}

fn to_json(param: &Parameter, values: &[&str]) -> Result<Value, String> {
    match param.kind {
        ValueKind::Array(item) => {
            let items: Vec<&str> = if param.explode && param.location == In::Query {
                values.to_vec()
            } else {
                values.iter().flat_map(|v| v.split(',')).collect()
            };
            items
                .into_iter()
                .map(|v| scalar(item, v))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        kind => {
            if values.len() > 1 && param.location == In::Query {
                return Err(format!(
                    "sent {} times, but it is not an array",
                    values.len()
                ));
            }
            let v = values[0];
            match kind {
                ValueKind::Integer => scalar(ItemKind::Integer, v),
                ValueKind::Number => scalar(ItemKind::Number, v),
                ValueKind::Boolean => scalar(ItemKind::Boolean, v),
                _ => Ok(Value::String(v.to_string())),
            }
        }
    }
}

fn scalar(kind: ItemKind, v: &str) -> Result<Value, String> {
    match kind {
        ItemKind::String => Ok(Value::String(v.to_string())),
        ItemKind::Integer => v
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| v.parse::<u64>().map(Value::from))
            .map_err(|_| format!("`{v}` is not an integer")),
        ItemKind::Number => v
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("`{v}` is not a number")),
        ItemKind::Boolean => match v {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(format!("`{v}` is not a boolean (true or false)")),
        },
    }
}

/// Walks the raw document once, resolving references, and builds the [`OpenApi`].
struct Loader<'a> {
    doc: &'a Value,
    dialect: Dialect,
    schemas: Vec<SchemaSlot>,
}

impl<'a> Loader<'a> {
    fn new(doc: &'a Value) -> Result<Loader<'a>, String> {
        let Some(root) = doc.as_object() else {
            return Err("the OpenAPI document is not an object".into());
        };
        if root.contains_key("swagger") {
            return Err(
                "this is a Swagger 2.0 document; convert it to OpenAPI 3 (e.g. with \
                 swagger2openapi) and store the converted copy"
                    .into(),
            );
        }
        let version = root
            .get("openapi")
            .and_then(Value::as_str)
            .ok_or("the document has no `openapi` version field; is it an OpenAPI 3 document?")?;
        let dialect = if version.starts_with("3.0") {
            Dialect::OpenApi30
        } else if version.starts_with("3.1") || version.starts_with("3.2") {
            Dialect::OpenApi31
        } else {
            return Err(format!(
                "unsupported OpenAPI version `{version}`; expected 3.0.x or 3.1.x"
            ));
        };
        schema::reject_external_refs(doc)?;
        Ok(Loader {
            doc,
            dialect,
            schemas: Vec::new(),
        })
    }

    fn load(mut self) -> Result<OpenApi, String> {
        let doc = self.doc;
        let info = doc.get("info");
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
        let title = text(info.and_then(|i| i.get("title")));
        let api_version = text(info.and_then(|i| i.get("version")));
        let openapi = text(doc.get("openapi"));
        let base_path = base_path(doc.get("servers"));
        let security_schemes = self.security_schemes()?;
        let global_security = doc.get("security");
        let mut operations = Vec::new();
        if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
            for (template, item) in paths {
                let item = self.resolve(item)?;
                let segments = parse_template(template)?;
                let literal_segments = segments
                    .iter()
                    .filter(|s| s.iter().all(|p| matches!(p, Piece::Literal(_))))
                    .count();
                let shared_params = item.get("parameters");
                for method in METHODS {
                    let Some(op) = item.get(method) else {
                        continue;
                    };
                    let operation = self.operation(
                        method,
                        template,
                        op,
                        shared_params,
                        global_security,
                        &security_schemes,
                        segments.clone(),
                        literal_segments,
                    )?;
                    operations.push(operation);
                }
            }
        }
        let components = |direction| match doc.get("components") {
            Some(components) => schema::convert(components, self.dialect, direction),
            None => Value::Object(Map::new()),
        };
        Ok(OpenApi {
            title,
            api_version,
            openapi,
            base_path,
            operations,
            security_schemes,
            schemas: self.schemas,
            dialect: self.dialect,
            request_components: components(Direction::Request),
            response_components: components(Direction::Response),
        })
    }

    /// Follows `$ref` chains inside the document.
    fn resolve(&self, value: &'a Value) -> Result<&'a Value, String> {
        let mut current = value;
        for _ in 0..64 {
            let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
                return Ok(current);
            };
            current = schema::pointer(self.doc, reference)?;
        }
        Err("a `$ref` chain is longer than 64 hops (a reference cycle?)".into())
    }

    fn schema(
        &mut self,
        schema: Option<&Value>,
        direction: Direction,
        site: String,
    ) -> Option<usize> {
        let schema = schema?;
        self.schemas.push(SchemaSlot {
            site,
            direction,
            schema: schema::convert(schema, self.dialect, direction),
            validator: OnceLock::new(),
        });
        Some(self.schemas.len() - 1)
    }

    fn security_schemes(&self) -> Result<BTreeMap<String, SecurityScheme>, String> {
        let mut schemes = BTreeMap::new();
        let Some(declared) = self
            .doc
            .pointer("/components/securitySchemes")
            .and_then(Value::as_object)
        else {
            return Ok(schemes);
        };
        for (name, scheme) in declared {
            let scheme = self.resolve(scheme)?;
            let field = |key: &str| scheme.get(key).and_then(Value::as_str).unwrap_or("");
            let parsed = match field("type") {
                "apiKey" => match field("in") {
                    "header" => SecurityScheme::Header(field("name").to_string()),
                    "query" => SecurityScheme::Query(field("name").to_string()),
                    "cookie" => SecurityScheme::Cookie(field("name").to_string()),
                    other => {
                        return Err(format!(
                            "security scheme `{name}`: apiKey `in` must be header, query or \
                             cookie, not `{other}`"
                        ))
                    }
                },
                "http" => {
                    let mut scheme = field("scheme").to_string();
                    if let Some(first) = scheme.get(..1) {
                        scheme = first.to_ascii_uppercase() + &scheme[1..].to_ascii_lowercase();
                    }
                    SecurityScheme::Authorization(scheme)
                }
                "oauth2" | "openIdConnect" => SecurityScheme::Authorization("Bearer".into()),
                other => {
                    return Err(format!(
                        "security scheme `{name}` has type `{other}`, which cannot be checked \
                         (apiKey, http, oauth2 and openIdConnect can)"
                    ))
                }
            };
            schemes.insert(name.clone(), parsed);
        }
        Ok(schemes)
    }

    #[allow(clippy::too_many_arguments)]
    fn operation(
        &mut self,
        method: &str,
        template: &str,
        op: &'a Value,
        shared_params: Option<&'a Value>,
        global_security: Option<&'a Value>,
        schemes: &BTreeMap<String, SecurityScheme>,
        segments: Vec<Vec<Piece>>,
        literal_segments: usize,
    ) -> Result<Operation, String> {
        let where_ = format!("{} {template}", method.to_ascii_uppercase());
        let operation_id = op
            .get("operationId")
            .and_then(Value::as_str)
            .map(str::to_string);

        // Operation-level parameters override path-level ones with the same name and place.
        let mut raw: Vec<&Value> = Vec::new();
        for list in [shared_params, op.get("parameters")].into_iter().flatten() {
            for p in list.as_array().into_iter().flatten() {
                let p = self.resolve(p)?;
                let key = (p.get("name"), p.get("in"));
                raw.retain(|q| (q.get("name"), q.get("in")) != key);
                raw.push(p);
            }
        }
        let mut parameters = Vec::new();
        for p in raw {
            let parameter = self.parameter(p, &where_)?;
            // OpenAPI: header parameters named Accept, Content-Type or Authorization are
            // ignored (the media types and the security schemes say those).
            let reserved = ["accept", "content-type", "authorization"]
                .iter()
                .any(|h| parameter.name.eq_ignore_ascii_case(h));
            if !(parameter.location == In::Header && reserved) {
                parameters.push(parameter);
            }
        }

        let body = match op.get("requestBody") {
            None => None,
            Some(body) => {
                let body = self.resolve(body)?;
                Some(BodySpec {
                    required: body.get("required").and_then(Value::as_bool) == Some(true),
                    content: self.content(
                        body.get("content"),
                        Direction::Request,
                        &format!("{where_}: request body"),
                    )?,
                })
            }
        };

        let mut responses = Vec::new();
        for (key, response) in op
            .get("responses")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let status = parse_status(key)
                .ok_or_else(|| format!("{where_}: response key `{key}` is not a status code"))?;
            let response = self.resolve(response)?;
            let mut headers = Vec::new();
            for (name, h) in response
                .get("headers")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let h = self.resolve(h)?;
                headers.push((
                    name.clone(),
                    h.get("required").and_then(Value::as_bool) == Some(true),
                ));
            }
            responses.push((
                status,
                ResponseSpec {
                    headers,
                    content: self.content(
                        response.get("content"),
                        Direction::Response,
                        &format!("{where_}: response {key}"),
                    )?,
                },
            ));
        }

        let security = match op.get("security").or(global_security) {
            None => None,
            Some(list) => {
                let mut alternatives = Vec::new();
                for requirement in list.as_array().into_iter().flatten() {
                    let names: Vec<String> = requirement
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(name, _)| name.clone())
                        .collect();
                    if let Some(unknown) = names.iter().find(|n| !schemes.contains_key(*n)) {
                        return Err(format!(
                            "{where_}: security requirement names `{unknown}`, which \
                             components.securitySchemes does not declare"
                        ));
                    }
                    alternatives.push(names);
                }
                // `security: []` or an `{}` alternative: no credentials needed.
                if alternatives.is_empty() || alternatives.iter().any(Vec::is_empty) {
                    None
                } else {
                    Some(alternatives)
                }
            }
        };

        Ok(Operation {
            method: method.to_ascii_uppercase(),
            template: template.to_string(),
            segments,
            literal_segments,
            operation_id,
            parameters,
            body,
            responses,
            security,
        })
    }

    fn parameter(&mut self, p: &'a Value, where_: &str) -> Result<Parameter, String> {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{where_}: a parameter has no `name`"))?
            .to_string();
        let location = match p.get("in").and_then(Value::as_str) {
            Some("path") => In::Path,
            Some("query") => In::Query,
            Some("header") => In::Header,
            Some("cookie") => In::Cookie,
            other => {
                return Err(format!(
                    "{where_}: parameter `{name}` has `in: {}`; expected path, query, header or \
                     cookie",
                    other.unwrap_or("(missing)")
                ))
            }
        };
        // `content`-style parameters carry their schema one level down.
        let raw_schema = p.get("schema").or_else(|| {
            p.get("content")
                .and_then(Value::as_object)
                .and_then(|c| c.values().next())
                .and_then(|m| m.get("schema"))
        });
        let kind = match raw_schema {
            Some(s) => self.kind(s)?,
            None => ValueKind::Other,
        };
        let style = p.get("style").and_then(Value::as_str).unwrap_or("form");
        let explode = p
            .get("explode")
            .and_then(Value::as_bool)
            .unwrap_or(style == "form");
        Ok(Parameter {
            required: location == In::Path
                || p.get("required").and_then(Value::as_bool) == Some(true),
            schema: self.schema(
                raw_schema,
                Direction::Request,
                format!("{where_}: {} parameter `{name}`", location.word()),
            ),
            name,
            location,
            kind,
            explode,
            deep_object: style == "deepObject",
        })
    }

    fn kind(&self, schema: &'a Value) -> Result<ValueKind, String> {
        let schema = self.resolve(schema)?;
        let kind = match type_of(schema) {
            Some("integer") => ValueKind::Integer,
            Some("number") => ValueKind::Number,
            Some("boolean") => ValueKind::Boolean,
            Some("string") => ValueKind::String,
            Some("object") => ValueKind::Object,
            Some("array") => {
                let item = match schema.get("items") {
                    Some(items) => type_of(self.resolve(items)?),
                    None => None,
                };
                ValueKind::Array(match item {
                    Some("integer") => ItemKind::Integer,
                    Some("number") => ItemKind::Number,
                    Some("boolean") => ItemKind::Boolean,
                    _ => ItemKind::String,
                })
            }
            _ => ValueKind::Other,
        };
        Ok(kind)
    }

    fn content(
        &mut self,
        content: Option<&'a Value>,
        direction: Direction,
        site: &str,
    ) -> Result<Vec<MediaSpec>, String> {
        let mut specs = Vec::new();
        for (media, spec) in content.and_then(Value::as_object).into_iter().flatten() {
            let spec = self.resolve(spec)?;
            specs.push(MediaSpec {
                media: essence(media),
                schema: self.schema(spec.get("schema"), direction, format!("{site} `{media}`")),
            });
        }
        Ok(specs)
    }
}

/// The single non-null `type` of a schema (`["integer", "null"]` counts as integer).
fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(types) => {
            let mut non_null = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null");
            let first = non_null.next();
            if non_null.next().is_some() {
                None
            } else {
                first
            }
        }
        _ => None,
    }
}

fn parse_status(key: &str) -> Option<StatusKey> {
    if key == "default" {
        return Some(StatusKey::Default);
    }
    if key.len() == 3 && key[1..].eq_ignore_ascii_case("XX") {
        let first = key[..1].parse::<u16>().ok()?;
        return (1..=5).contains(&first).then_some(StatusKey::Range(first));
    }
    key.parse::<u16>()
        .ok()
        .filter(|code| (100..=599).contains(code))
        .map(StatusKey::Exact)
}

/// The path of the first server URL, with `{variables}` replaced by their defaults.
fn base_path(servers: Option<&Value>) -> String {
    let Some(server) = servers.and_then(Value::as_array).and_then(|s| s.first()) else {
        return String::new();
    };
    let mut url = server
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    for (name, var) in server
        .get("variables")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(default) = var.get("default").and_then(Value::as_str) {
            url = url.replace(&format!("{{{name}}}"), default);
        }
    }
    let path = match url.find("://") {
        Some(scheme_end) => {
            let after = &url[scheme_end + 3..];
            after.find('/').map_or("", |i| &after[i..])
        }
        None => url.as_str(),
    };
    path.trim_end_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_path_is_the_first_server_urls_path_with_variables_filled_in() {
        let servers = serde_json::json!([{
            "url": "https://{region}.example.com/{version}/",
            "variables": {"region": {"default": "eu"}, "version": {"default": "v2"}}
        }]);
        assert_eq!(base_path(Some(&servers)), "/v2");
        assert_eq!(
            base_path(Some(
                &serde_json::json!([{"url": "https://api.example.com"}])
            )),
            ""
        );
        assert_eq!(
            base_path(Some(&serde_json::json!([{"url": "/api"}]))),
            "/api"
        );
        assert_eq!(base_path(None), "");
    }

    #[test]
    fn templates_with_text_around_a_parameter_bind_only_the_parameter() {
        let template = parse_template("/files/{name}.json").unwrap();
        let params = match_template(&template, &["files", "report.json"]).unwrap();
        assert_eq!(params["name"], "report");
        assert!(match_template(&template, &["files", ".json"]).is_none());
        assert!(match_template(&template, &["files", "report.txt"]).is_none());
    }

    #[test]
    fn a_literal_segment_wins_even_when_a_template_comes_first() {
        let doc = OpenApi::parse(
            r#"
openapi: 3.0.0
info: {title: t, version: "1"}
paths:
  /items/{id}:
    get: {operationId: getItem, responses: {"200": {description: ok}}}
  /items/~latest:
    get: {operationId: getLatest, responses: {"200": {description: ok}}}
"#,
        )
        .unwrap();
        assert_eq!(
            doc.operations[0].template, "/items/{id}",
            "the template is tried first"
        );
        let op = doc
            .check_request("GET", "/items/~latest", &[], b"")
            .unwrap();
        assert_eq!(op.operation_id.as_deref(), Some("getLatest"));
        let op = doc.check_request("GET", "/items/7", &[], b"").unwrap();
        assert_eq!(op.operation_id.as_deref(), Some("getItem"));
    }

    #[test]
    fn status_keys_parse_exact_codes_ranges_and_default() {
        assert_eq!(parse_status("404"), Some(StatusKey::Exact(404)));
        assert_eq!(parse_status("4XX"), Some(StatusKey::Range(4)));
        assert_eq!(parse_status("5xx"), Some(StatusKey::Range(5)));
        assert_eq!(parse_status("default"), Some(StatusKey::Default));
        assert_eq!(parse_status("ok"), None);
        assert_eq!(parse_status("999"), None);
    }
}
