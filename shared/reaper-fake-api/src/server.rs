//! The fake server: hyper on 127.0.0.1, every exchange checked against the document.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use futures::FutureExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::openapi::{OpenApi, OperationRef};

/// Answers the requests a [`FakeApi`] receives. Implemented for you by [`handler_fn`].
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Answers one request; called once per request, concurrently.
    async fn handle(&self, req: FakeRequest) -> FakeResponse;
}

/// Wraps an async closure as a [`Handler`].
///
/// ```
/// use reaper_fake_api::{handler_fn, FakeRequest, FakeResponse};
///
/// let handler = handler_fn(|req: FakeRequest| async move {
///     FakeResponse::json(200, &serde_json::json!({"path": req.path}))
/// });
/// ```
pub fn handler_fn<F, Fut>(f: F) -> Arc<dyn Handler>
where
    F: Fn(FakeRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = FakeResponse> + Send + 'static,
{
    struct FnHandler<F>(F);
    #[async_trait]
    impl<F, Fut> Handler for FnHandler<F>
    where
        F: Fn(FakeRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = FakeResponse> + Send + 'static,
    {
        async fn handle(&self, req: FakeRequest) -> FakeResponse {
            (self.0)(req).await
        }
    }
    Arc::new(FnHandler(f))
}

/// A request as the handler sees it.
#[derive(Debug, Clone)]
pub struct FakeRequest {
    /// The matched operation's `operationId`; `None` when the path or method is not in the
    /// document (a violation is recorded; answer as the real service would, e.g. 404).
    pub operation_id: Option<String>,
    /// The matched operation (template, method, path parameters).
    pub operation: Option<OperationRef>,
    /// Upper-case method.
    pub method: String,
    /// The path as sent, base path included, still percent-encoded.
    pub path: String,
    /// Path parameters by name, percent-decoded (empty when no operation matched).
    pub path_params: BTreeMap<String, String>,
    /// Query pairs in order, decoded.
    pub query: Vec<(String, String)>,
    /// Headers in order, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body as received.
    pub body: Bytes,
}

impl FakeRequest {
    /// A path parameter, e.g. `req.param("sandboxId")`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.path_params.get(name).map(String::as_str)
    }

    /// The first value of a query parameter.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// A handler's answer: a whole body, or a stream of chunks sent as they come.
pub struct FakeResponse {
    /// The HTTP status code.
    pub status: u16,
    /// Headers to send, in order.
    pub headers: Vec<(String, String)>,
    /// The body: whole, or streamed.
    pub body: FakeBody,
}

/// The body of a [`FakeResponse`].
pub enum FakeBody {
    /// Sent at once (with `Content-Length`); checked against the document's schema when JSON.
    Whole(Bytes),
    /// Sent chunk by chunk (chunked encoding) as the stream yields; only the status, headers
    /// and content type are checked against the document.
    Stream(BoxStream<'static, Bytes>),
}

impl fmt::Debug for FakeResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body = match &self.body {
            FakeBody::Whole(bytes) => format!("{} bytes", bytes.len()),
            FakeBody::Stream(_) => "stream".to_string(),
        };
        f.debug_struct("FakeResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &body)
            .finish()
    }
}

impl fmt::Debug for FakeBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FakeBody::Whole(bytes) => write!(f, "Whole({} bytes)", bytes.len()),
            FakeBody::Stream(_) => f.write_str("Stream"),
        }
    }
}

impl FakeResponse {
    /// An empty body.
    pub fn empty(status: u16) -> FakeResponse {
        FakeResponse {
            status,
            headers: Vec::new(),
            body: FakeBody::Whole(Bytes::new()),
        }
    }

    /// A JSON body with `Content-Type: application/json`.
    pub fn json(status: u16, body: &serde_json::Value) -> FakeResponse {
        FakeResponse::bytes(status, "application/json", body.to_string())
    }

    /// A whole body with the given content type.
    pub fn bytes(status: u16, content_type: &str, body: impl Into<Bytes>) -> FakeResponse {
        FakeResponse {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: FakeBody::Whole(body.into()),
        }
    }

    /// A streamed body: each item is sent as one chunk when the stream yields it; the response
    /// ends when the stream does.
    pub fn stream(
        status: u16,
        content_type: &str,
        chunks: impl futures::Stream<Item = Bytes> + Send + 'static,
    ) -> FakeResponse {
        FakeResponse {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: FakeBody::Stream(chunks.boxed()),
        }
    }

    /// A streamed body fed through a channel: send chunks on the returned sender (from a task
    /// the handler spawns); dropping the sender ends the response.
    pub fn channel(status: u16, content_type: &str) -> (FakeResponse, mpsc::Sender<Bytes>) {
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        let chunks = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (chunk, rx))
        });
        (FakeResponse::stream(status, content_type, chunks), tx)
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: &str) -> FakeResponse {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }
}

/// One exchange, as recorded by the fake, for counting and asserting.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Arrival number, from 0, never reused (not even after [`FakeApi::clear_requests`]).
    pub seq: u64,
    /// The matched operation's `operationId` (`None` if none matched or it has none).
    pub operation_id: Option<String>,
    /// The matched operation's path template (`None` if none matched).
    pub path_template: Option<String>,
    /// The HTTP method, upper-case.
    pub method: String,
    /// Path as sent, without the query.
    pub path: String,
    /// The raw query string (without `?`), empty if none.
    pub query: String,
    /// Headers in order, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body as received.
    pub body: Bytes,
    /// The status answered; `None` while the handler runs, or for a stalled or closed request.
    pub status: Option<u16>,
    /// The headers answered, in order.
    pub response_headers: Vec<(String, String)>,
    /// The body answered; for a streamed answer, the chunks sent so far.
    pub response_body: Vec<u8>,
    /// The fault injected into this exchange, if any.
    pub fault: Option<String>,
}

impl Recorded {
    /// The first value of a query parameter, decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Whether the request was matched to the operation `name`: its `operationId`, or
    /// `METHOD /template` (for documents without ids).
    pub fn is(&self, name: &str) -> bool {
        self.operation_id.as_deref() == Some(name)
            || self
                .path_template
                .as_ref()
                .is_some_and(|t| name.split_once(' ') == Some((self.method.as_str(), t)))
    }

    /// The first value of a request header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A fault to inject: what to do instead of calling the handler, for which requests, how many
/// times. Built with [`Fault::respond`], [`Fault::json`], [`Fault::stall`] or
/// [`Fault::close`], then narrowed with [`Fault::on`] and [`Fault::times`].
#[derive(Debug, Clone)]
pub struct Fault {
    operation: Option<String>,
    times: usize,
    action: FaultAction,
    checked: bool,
}

#[derive(Debug, Clone)]
enum FaultAction {
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Bytes,
    },
    Stall,
    Close,
}

impl Fault {
    /// Answer with `status` and an empty body (add headers with [`Fault::with_header`]).
    pub fn respond(status: u16) -> Fault {
        Fault::new(FaultAction::Respond {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
        })
    }

    /// Answer with `status` and a JSON body, e.g. the provider's recorded error shape.
    pub fn json(status: u16, body: &serde_json::Value) -> Fault {
        Fault::new(FaultAction::Respond {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Bytes::from(body.to_string()),
        })
    }

    /// Never answer: the request hangs until the client gives up (its timeout) or the
    /// [`FakeApi`] is dropped.
    pub fn stall() -> Fault {
        Fault::new(FaultAction::Stall)
    }

    /// Close the connection without answering (the client sees a connection error).
    pub fn close() -> Fault {
        Fault::new(FaultAction::Close)
    }

    fn new(action: FaultAction) -> Fault {
        Fault {
            operation: None,
            times: 1,
            action,
            checked: true,
        }
    }

    /// Only requests matched to this operation (default: any request): its `operationId`, or
    /// `METHOD /template` (e.g. `DELETE /sandboxes/{sandboxID}`) in a document without ids.
    pub fn on(mut self, operation: &str) -> Fault {
        self.operation = Some(operation.to_string());
        self
    }

    /// The next `n` matching requests (default 1).
    pub fn times(mut self, n: usize) -> Fault {
        self.times = n;
        self
    }

    /// Adds a response header (e.g. `Retry-After`); only for answering faults.
    pub fn with_header(mut self, name: &str, value: &str) -> Fault {
        if let FaultAction::Respond { headers, .. } = &mut self.action {
            headers.push((name.to_ascii_lowercase(), value.to_string()));
        }
        self
    }

    /// Don't check this answer against the document: for an error shape the document does not
    /// declare (a 429 or a gateway's 502 often isn't), recorded from the provider's docs
    /// instead. The request is still checked.
    pub fn undocumented(mut self) -> Fault {
        self.checked = false;
        self
    }

    fn describe(&self) -> String {
        let what = match &self.action {
            FaultAction::Respond { status, .. } => format!("respond {status}"),
            FaultAction::Stall => "stall".into(),
            FaultAction::Close => "close the connection".into(),
        };
        match &self.operation {
            Some(op) => format!("{what} on {op}"),
            None => what,
        }
    }
}

/// Options for [`FakeApi::start_with`].
#[derive(Debug, Clone, Default)]
pub struct FakeApiOptions {
    undocumented_prefixes: Vec<String>,
    json_lines: bool,
}

impl FakeApiOptions {
    /// Also validate each line of a JSON-lines answer (`application/x-ndjson`,
    /// `application/jsonl`, ...), whole or streamed, against the schema the document gives
    /// for that media type, read as the shape of one line. Off by default: a document may
    /// mean the schema otherwise.
    pub fn check_json_lines(mut self) -> FakeApiOptions {
        self.json_lines = true;
        self
    }

    /// Requests whose path starts with `prefix` are not in the document (e.g. a Connect/gRPC
    /// endpoint described by a `.proto`): they go to the handler with `operation_id: None`
    /// and are recorded, but are not violations. Check them in the handler against a recorded
    /// shape.
    pub fn undocumented_prefix(mut self, prefix: &str) -> FakeApiOptions {
        self.undocumented_prefixes.push(prefix.to_string());
        self
    }
}

/// A fake of a provider's HTTP API on `127.0.0.1:<free port>`; see the crate docs.
///
/// Dropping it stops the server: the listener closes and every connection (a stalled one
/// included) is dropped.
pub struct FakeApi {
    addr: SocketAddr,
    base_path: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeApi")
            .field("url", &self.url())
            .field("doc", &self.shared.doc)
            .finish_non_exhaustive()
    }
}

struct Shared {
    doc: Arc<OpenApi>,
    handler: Arc<dyn Handler>,
    options: FakeApiOptions,
    log: Mutex<Vec<Recorded>>,
    next_seq: AtomicU64,
    violations: Mutex<Vec<String>>,
    faults: Mutex<VecDeque<Fault>>,
}

/// A test-time lock: a panic while holding it must not hide the log from the assertions.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FakeApi {
    /// Starts the server on `127.0.0.1:0`. Panics if it cannot bind (a test cannot go on).
    pub async fn start(doc: Arc<OpenApi>, handler: Arc<dyn Handler>) -> FakeApi {
        FakeApi::start_with(doc, handler, FakeApiOptions::default()).await
    }

    /// [`start`](Self::start) with options.
    pub async fn start_with(
        doc: Arc<OpenApi>,
        handler: Arc<dyn Handler>,
        options: FakeApiOptions,
    ) -> FakeApi {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("the fake API cannot bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        let base_path = doc.base_path().to_string();
        let shared = Arc::new(Shared {
            doc,
            handler,
            options,
            log: Mutex::new(Vec::new()),
            next_seq: AtomicU64::new(0),
            violations: Mutex::new(Vec::new()),
            faults: Mutex::new(VecDeque::new()),
        });
        let server = tokio::spawn(serve(listener, shared.clone()));
        FakeApi {
            addr,
            base_path,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT` followed by the document's base path (the first `servers`
    /// URL's path, e.g. `/api`): what a client is configured with in place of the real URL.
    pub fn url(&self) -> String {
        format!("{}{}", self.origin(), self.base_path)
    }

    /// `http://127.0.0.1:PORT`, without the base path.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the fake listens on (127.0.0.1 and a free port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.log).clone()
    }

    /// How many requests so far were matched to the operation `name`: its `operationId`,
    /// or `METHOD /template` (e.g. `DELETE /sandboxes/{sandboxID}`).
    pub fn count(&self, name: &str) -> usize {
        lock(&self.shared.log).iter().filter(|r| r.is(name)).count()
    }

    /// Forgets the requests received so far (e.g. to count the requests of one step);
    /// violations are kept.
    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// Every violation of the document so far, each saying what was wrong.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.shared.violations).clone()
    }

    /// Panics listing every violation, if there is any.
    #[track_caller]
    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        if !violations.is_empty() {
            let list: Vec<String> = violations
                .iter()
                .enumerate()
                .map(|(i, v)| format!("  {}. {v}", i + 1))
                .collect();
            panic!(
                "the traffic broke the OpenAPI document `{}` {} ({} violation(s)):\n{}",
                self.shared.doc.title(),
                self.shared.doc.api_version(),
                violations.len(),
                list.join("\n")
            );
        }
    }

    /// Queues a fault; faults apply in the order injected, each to the next requests it
    /// matches, until used up.
    pub fn inject(&self, fault: Fault) {
        if fault.times > 0 {
            lock(&self.shared.faults).push_back(fault);
        }
    }

    /// Drops every queued fault not used yet.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        // The accept loop owns the listener and the connections' JoinSet: aborting it closes
        // the port and drops every connection task, stalled ones included.
        self.server.abort();
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| exchange(shared.clone(), req));
                    // An error here is a client going away or an injected close: nothing to do.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Returned to hyper to drop the connection without an answer (an injected close, or a
/// client gone before its body arrived).
#[derive(Debug)]
struct CloseConnection;

impl fmt::Display for CloseConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection closed without an answer")
    }
}

impl std::error::Error for CloseConnection {}

type Body = UnsyncBoxBody<Bytes, Infallible>;

async fn exchange(
    shared: Arc<Shared>,
    req: hyper::Request<Incoming>,
) -> Result<hyper::Response<Body>, CloseConnection> {
    let (parts, incoming) = req.into_parts();
    let body = incoming
        .collect()
        .await
        .map_err(|_| CloseConnection)?
        .to_bytes();
    let method = parts.method.as_str().to_string();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or("").to_string();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(path.clone(), |pq| pq.as_str().to_string());
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();

    let undocumented = shared
        .options
        .undocumented_prefixes
        .iter()
        .any(|prefix| path.starts_with(prefix.as_str()));
    let operation = if undocumented {
        None
    } else {
        let check = shared
            .doc
            .inspect_request(&method, &path_and_query, &headers, &body);
        lock(&shared.violations)
            .extend(check.violations.into_iter().map(|v| format!("request {v}")));
        check.operation
    };
    let operation_id = operation.as_ref().and_then(|op| op.operation_id.clone());

    let fault = take_fault(&shared, operation.as_ref());
    let seq = shared.next_seq.fetch_add(1, Ordering::Relaxed);
    lock(&shared.log).push(Recorded {
        seq,
        operation_id: operation_id.clone(),
        path_template: operation.as_ref().map(|op| op.path_template.clone()),
        method: method.clone(),
        path: path.clone(),
        query: raw_query,
        headers: headers.clone(),
        body: body.clone(),
        status: None,
        response_headers: Vec::new(),
        response_body: Vec::new(),
        fault: fault.as_ref().map(Fault::describe),
    });

    let (response, checked) = match fault {
        Some(Fault {
            action: FaultAction::Stall,
            ..
        }) => std::future::pending().await,
        Some(Fault {
            action: FaultAction::Close,
            ..
        }) => return Err(CloseConnection),
        Some(Fault {
            action:
                FaultAction::Respond {
                    status,
                    headers,
                    body,
                },
            checked,
            ..
        }) => (
            FakeResponse {
                status,
                headers,
                body: FakeBody::Whole(body),
            },
            checked,
        ),
        None => {
            let query = form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect();
            let request = FakeRequest {
                operation_id: operation_id.clone(),
                path_params: operation
                    .as_ref()
                    .map(|op| op.path_params.clone())
                    .unwrap_or_default(),
                operation: operation.clone(),
                method,
                path,
                query,
                headers,
                body,
            };
            call_handler(&shared, request).await
        }
    };

    let FakeResponse {
        status,
        headers,
        body,
    } = response;
    let checked = operation.filter(|_| checked);
    if let Some(op) = &checked {
        let mut found = Vec::new();
        match &body {
            FakeBody::Whole(bytes) => {
                found.extend(shared.doc.check_response(op, status, &headers, bytes).err());
                if shared.options.json_lines {
                    found.extend(
                        shared
                            .doc
                            .check_json_lines(op, status, &headers, bytes)
                            .err(),
                    );
                }
            }
            FakeBody::Stream(_) => {
                found.extend(
                    shared
                        .doc
                        .check_streamed_response(op, status, &headers)
                        .err(),
                );
            }
        }
        lock(&shared.violations)
            .extend(found.into_iter().flatten().map(|v| format!("response {v}")));
    }
    {
        let mut log = lock(&shared.log);
        // The log may have been cleared meanwhile; then there is nothing to update.
        if let Some(record) = find_record(&mut log, seq) {
            record.status = Some(status);
            record.response_headers = headers.clone();
            if let FakeBody::Whole(bytes) = &body {
                record.response_body = bytes.to_vec();
            }
        }
    }

    let lines = checked
        .filter(|_| shared.options.json_lines)
        .map(|op| LineChecker {
            shared: shared.clone(),
            op,
            status,
            headers: headers.clone(),
            partial: Vec::new(),
            number: 0,
        });
    Ok(into_http(&shared, seq, status, &headers, body, lines))
}

/// Calls the handler; a panic in it is a violation answered with a 500 (the client fails
/// fast instead of on a dropped connection). The flag says whether to check the answer.
async fn call_handler(shared: &Shared, request: FakeRequest) -> (FakeResponse, bool) {
    let what = format!("{} {}", request.method, request.path);
    match AssertUnwindSafe(shared.handler.handle(request))
        .catch_unwind()
        .await
    {
        Ok(response) => (response, true),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(a panic without a message)".into());
            lock(&shared.violations).push(format!("the handler panicked on {what}: {message}"));
            let answer = FakeResponse::bytes(500, "text/plain", "the fake's handler panicked");
            (answer, false)
        }
    }
}

/// The hyper response; a streamed body appends each chunk to the exchange's record as it goes.
fn into_http(
    shared: &Arc<Shared>,
    seq: u64,
    status: u16,
    headers: &[(String, String)],
    body: FakeBody,
    lines: Option<LineChecker>,
) -> hyper::Response<Body> {
    let mut builder = hyper::Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let body: Body = match body {
        FakeBody::Whole(bytes) => Full::new(bytes).boxed_unsync(),
        FakeBody::Stream(chunks) => {
            let shared = shared.clone();
            let frames =
                futures::stream::unfold((chunks, lines), move |(mut chunks, mut lines)| {
                    let shared = shared.clone();
                    async move {
                        let Some(chunk) = chunks.next().await else {
                            // The stream ended: a last line without its newline is whole now (a
                            // stream cut short by the client is not, and is never checked).
                            if let Some(lines) = &mut lines {
                                lines.finish();
                            }
                            return None;
                        };
                        if let Some(record) = find_record(&mut lock(&shared.log), seq) {
                            record.response_body.extend_from_slice(&chunk);
                        }
                        if let Some(lines) = &mut lines {
                            lines.feed(&chunk);
                        }
                        Some((Ok::<_, Infallible>(Frame::data(chunk)), (chunks, lines)))
                    }
                });
            StreamBody::new(frames).boxed_unsync()
        }
    };
    builder.body(body).unwrap_or_else(|e| {
        lock(&shared.violations).push(format!(
            "the fake's answer is not valid HTTP (status {status}, headers {headers:?}): {e}"
        ));
        let mut response = hyper::Response::new(Full::new(Bytes::new()).boxed_unsync());
        *response.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        response
    })
}

/// Checks a streamed JSON-lines answer line by line as the chunks go out
/// ([`FakeApiOptions::check_json_lines`]).
struct LineChecker {
    shared: Arc<Shared>,
    op: OperationRef,
    status: u16,
    headers: Vec<(String, String)>,
    /// The bytes after the last newline seen.
    partial: Vec<u8>,
    number: usize,
}

impl LineChecker {
    fn feed(&mut self, chunk: &[u8]) {
        self.partial.extend_from_slice(chunk);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            self.check(&line);
        }
    }

    fn check(&mut self, line: &[u8]) {
        self.number += 1;
        let found = self.shared.doc.check_json_line(
            &self.op,
            self.status,
            &self.headers,
            line,
            self.number,
        );
        lock(&self.shared.violations).extend(found.into_iter().map(|v| format!("response {v}")));
    }

    fn finish(&mut self) {
        let last = std::mem::take(&mut self.partial);
        if !last.is_empty() {
            self.check(&last);
        }
    }
}

fn find_record(log: &mut [Recorded], seq: u64) -> Option<&mut Recorded> {
    log.iter_mut().rev().find(|r| r.seq == seq)
}

fn take_fault(shared: &Shared, operation: Option<&OperationRef>) -> Option<Fault> {
    let mut faults = lock(&shared.faults);
    let position = faults.iter().position(|f| match &f.operation {
        None => true,
        Some(wanted) => operation.is_some_and(|op| op.is(wanted)),
    })?;
    let fault = &mut faults[position];
    fault.times -= 1;
    let taken = fault.clone();
    if fault.times == 0 {
        faults.remove(position);
    }
    Some(taken)
}
