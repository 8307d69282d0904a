//! The core's clock, sleeper and HTTP transport on the Workers runtime.

use futures::future::{select, Either};
use futures::StreamExt;
use reaper_core::{Clock, EpochMs, Sleeper};
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError};
use worker::{
    AbortController, Date, Delay, Fetch, Headers, Method, Request, RequestInit, RequestRedirect,
};

/// `Date.now()`. In a Worker it advances across I/O, which is all the sweep's timing needs.
#[derive(Debug, Clone, Copy)]
pub struct WorkerClock;

impl Clock for WorkerClock {
    fn now_ms(&self) -> EpochMs {
        Date::now().as_millis() as EpochMs
    }
}

pub fn now_ms() -> EpochMs {
    WorkerClock.now_ms()
}

/// `setTimeout` through `worker::Delay`.
#[derive(Debug, Clone, Copy)]
pub struct WorkerSleeper;

#[async_trait::async_trait(?Send)]
impl Sleeper for WorkerSleeper {
    async fn sleep(&self, ms: u64) {
        Delay::from(std::time::Duration::from_millis(ms)).await;
    }
}

/// The sandboxd provider's transport over the Workers `fetch`: no redirects (the bearer token
/// would follow them), aborted at the request's timeout, the body read as a stream and refused
/// past its limit.
#[derive(Debug, Clone, Copy)]
pub struct FetchTransport;

fn invalid(url: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Invalid {
        url: url.to_string(),
        message: e.to_string(),
    }
}

fn unreachable(url: &str, e: impl std::fmt::Display) -> TransportError {
    TransportError::Unreachable {
        url: url.to_string(),
        message: e.to_string(),
    }
}

impl FetchTransport {
    async fn exchange(
        request: &HttpRequest,
        signal: &worker::AbortSignal,
    ) -> Result<HttpResponse, TransportError> {
        let url = request.url.as_str();
        let headers = Headers::new();
        for (name, value) in &request.headers {
            headers.set(name, value).map_err(|e| invalid(url, e))?;
        }
        let mut init = RequestInit::new();
        init.with_method(match request.method {
            HttpMethod::Get => Method::Get,
            HttpMethod::Post => Method::Post,
            HttpMethod::Put => Method::Put,
            HttpMethod::Patch => Method::Patch,
            HttpMethod::Delete => Method::Delete,
        })
        .with_redirect(RequestRedirect::Manual);
        if let Some(body) = &request.body {
            if !request.has_content_type() {
                headers
                    .set("content-type", "application/json")
                    .map_err(|e| invalid(url, e))?;
            }
            init.with_body(Some(js_sys::Uint8Array::from(body.as_slice()).into()));
        }
        init.with_headers(headers);
        let req = Request::new_with_init(url, &init).map_err(|e| invalid(url, e))?;
        let mut response = Fetch::Request(req)
            .send_with_signal(signal)
            .await
            .map_err(|e| unreachable(url, e))?;
        let status = response.status_code();
        let headers = response
            .headers()
            .entries()
            .map(|(n, v)| (n.to_ascii_lowercase(), v))
            .collect();
        let limit = request.max_response_bytes;
        let too_large = || TransportError::ResponseTooLarge {
            url: url.to_string(),
            limit,
        };
        if let Ok(Some(len)) = response.headers().get("content-length") {
            if len.parse::<usize>().is_ok_and(|n| n > limit) {
                return Err(too_large());
            }
        }
        let mut body = Vec::new();
        if let Ok(mut stream) = response.stream() {
            while let Some(piece) = stream.next().await {
                let piece = piece.map_err(|e| unreachable(url, e))?;
                if body.len() + piece.len() > limit {
                    return Err(too_large());
                }
                body.extend_from_slice(&piece);
            }
        }
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

#[async_trait::async_trait(?Send)]
impl HttpTransport for FetchTransport {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let controller = AbortController::default();
        let signal = controller.signal();
        let exchange = Box::pin(Self::exchange(&request, &signal));
        let timer = Delay::from(std::time::Duration::from_millis(request.timeout_ms));
        let outcome = match select(exchange, timer).await {
            Either::Left((result, _)) => result,
            Either::Right(((), _)) => {
                controller.abort();
                Err(TransportError::TimedOut {
                    url: request.url.clone(),
                    timeout_ms: request.timeout_ms,
                })
            }
        };
        outcome
    }
}

/// A transport that counts each request on the alarm's subrequest meter before sending it.
#[derive(Debug)]
pub struct Metered<T> {
    pub inner: T,
    pub meter: std::sync::Arc<crate::meter::SubrequestMeter>,
}

#[async_trait::async_trait(?Send)]
impl<T: HttpTransport> HttpTransport for Metered<T> {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        self.meter.count(crate::meter::Kind::Fetch);
        self.inner.send(request).await
    }
}
