//! The one seam between the provider and the network: send a request, get a status and a body.
//!
//! Native code uses [`crate::ReqwestTransport`] (feature `native`); a Cloudflare Worker supplies
//! an implementation over `worker::Fetch` (its futures are `!Send`, which the `cfg_attr`ed
//! `async_trait` allows on wasm32).

use reaper_core::{MaybeSend, MaybeSync};

/// The methods the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `PATCH`.
    Patch,
    /// `DELETE`.
    Delete,
}

impl HttpMethod {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }
}

/// One request. `headers` carries the bearer token: its `Debug` never shows header values, nor
/// credentials in the URL.
#[derive(Clone)]
pub struct HttpRequest {
    /// The method.
    pub method: HttpMethod,
    /// The full URL.
    pub url: String,
    /// Request headers, names and values.
    pub headers: Vec<(String, String)>,
    /// The body, sent with `Content-Type: application/json` unless `headers` names another
    /// content type (a provider's streaming protocol, say).
    pub body: Option<Vec<u8>>,
    /// The whole exchange (connect, send, read the body) must finish within this.
    pub timeout_ms: u64,
    /// A response body longer than this must be refused with
    /// [`TransportError::ResponseTooLarge`], without reading the rest into memory.
    pub max_response_bytes: usize,
}

impl std::fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &crate::redact::redact_url(&self.url))
            .field("headers", &names)
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// Any answer the server gave, whatever its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The HTTP status.
    pub status: u16,
    /// Response headers, names in lower case (`retry-after`, `content-type`).
    pub headers: Vec<(String, String)>,
    /// The body, read up to the request's limit.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A response with no headers (tests, fakes).
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        HttpResponse {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl HttpRequest {
    /// Whether the caller chose the body's content type itself.
    pub fn has_content_type(&self) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    }
}

/// Why no answer arrived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Connecting, sending or reading failed: the daemon is down, restarting or unroutable.
    #[error("cannot reach {url}: {message}")]
    Unreachable {
        /// The URL requested.
        url: String,
        /// What failed.
        message: String,
    },
    /// No complete answer within the request's timeout.
    #[error("no answer from {url} within {timeout_ms} ms")]
    TimedOut {
        /// The URL requested.
        url: String,
        /// The timeout that passed.
        timeout_ms: u64,
    },
    #[error("the response from {url} is larger than the {limit}-byte limit")]
    /// The body was longer than the request allows.
    ResponseTooLarge {
        /// The URL requested.
        url: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request could not be built (a bad URL, an invalid header).
    #[error("cannot send a request to {url}: {message}")]
    Invalid {
        /// The URL requested.
        url: String,
        /// What is wrong.
        message: String,
    },
}

/// Sends one HTTP request. Implementations must honour `timeout_ms` and `max_response_bytes`,
/// must not follow redirects (the bearer token would follow them), and must not retry.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait HttpTransport: MaybeSend + MaybeSync {
    /// Sends `request` and returns the answer, whatever its status.
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError>;
}
