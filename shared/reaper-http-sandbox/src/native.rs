//! The native transport: reqwest over rustls, no redirects, no proxy, bounded bodies.

use std::time::Duration;

use crate::redact::redact_url;
use crate::transport::{HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError};

/// How long an idle pooled connection is reused: under the daemon's default
/// `--header-read-timeout-ms` (10 s), which closes idle connections, so a request is not sent on
/// a connection the daemon is closing.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// [`HttpTransport`] for native code (tokio).
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// A client that never follows redirects (the token would go along) and ignores proxy
    /// environment variables (a daemon on loopback must not be reached through a proxy).
    pub fn new() -> Result<Self, TransportError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()
            .map_err(|e| TransportError::Invalid {
                url: String::new(),
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(ReqwestTransport { client })
    }

    /// Uses a client configured by the caller (custom roots, pools). It should not follow
    /// redirects.
    pub fn with_client(client: reqwest::Client) -> Self {
        ReqwestTransport { client }
    }
}

fn map_error(url: &str, timeout_ms: u64, e: reqwest::Error) -> TransportError {
    // reqwest's messages quote the URL, credentials included; `url` below is the caller's to
    // redact, and the message must not carry a second copy.
    let e = e.without_url();
    if e.is_timeout() {
        TransportError::TimedOut {
            url: redact_url(url),
            timeout_ms,
        }
    } else if e.is_builder() {
        TransportError::Invalid {
            url: redact_url(url),
            message: e.to_string(),
        }
    } else {
        // reqwest's Display is terse ("error sending request"); the source says why.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        TransportError::Unreachable {
            url: redact_url(url),
            message,
        }
    }
}

#[async_trait::async_trait]
impl HttpTransport for ReqwestTransport {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let json_body = !request.has_content_type();
        let HttpRequest {
            method,
            url,
            headers,
            body,
            timeout_ms,
            max_response_bytes,
        } = request;
        let method = match method {
            HttpMethod::Get => reqwest::Method::GET,
            HttpMethod::Post => reqwest::Method::POST,
            HttpMethod::Put => reqwest::Method::PUT,
            HttpMethod::Patch => reqwest::Method::PATCH,
            HttpMethod::Delete => reqwest::Method::DELETE,
        };
        let mut builder = self
            .client
            .request(method, &url)
            .timeout(Duration::from_millis(timeout_ms));
        for (name, value) in &headers {
            builder = builder.header(name, value);
        }
        if let Some(body) = body {
            if json_body {
                builder = builder.header("content-type", "application/json");
            }
            builder = builder.body(body);
        }
        let mut response = builder
            .send()
            .await
            .map_err(|e| map_error(&url, timeout_ms, e))?;
        let too_large = || TransportError::ResponseTooLarge {
            url: redact_url(&url),
            limit: max_response_bytes,
        };
        if response
            .content_length()
            .is_some_and(|n| n > max_response_bytes as u64)
        {
            return Err(too_large());
        }
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        let mut body = Vec::new();
        // Read chunk by chunk so an oversized body is refused without being held whole.
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| map_error(&url, timeout_ms, e))?
        {
            if body.len() + chunk.len() > max_response_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}
