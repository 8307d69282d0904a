//! Error responses: every failure is `{"error": {"code", "message"}}` with a documented status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use reaper_http_sandbox::api::{codes, ErrorBody, ErrorDetail};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header (503 answers the client should retry).
    pub retry_after_secs: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    /// 503 with `Retry-After`: the daemon is at a capacity bound; nothing was done.
    pub fn busy(code: &'static str, message: impl Into<String>, retry_after_secs: u32) -> Self {
        ApiError {
            retry_after_secs: Some(retry_after_secs),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, message)
    }

    pub fn not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            codes::SANDBOX_NOT_FOUND,
            format!("sandbox {id} not found: it does not exist on this daemon or was destroyed"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            codes::UNAUTHORIZED,
            "missing or wrong bearer token: send `Authorization: Bearer <token>` with the \
             daemon's token",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.retry_after_secs.is_some() {
            // A capacity bound doing its job, not a failure of the daemon.
            tracing::warn!(code = self.code, message = %self.message, "request shed");
        } else if self.status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        let retry_after = self.retry_after_secs;
        let unauthorized = self.status == StatusCode::UNAUTHORIZED;
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"reaper-sandboxd\""),
            );
        }
        response
    }
}
