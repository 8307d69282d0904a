//! The one place SDK errors become [`StoreError`]s.
//!
//! - a lost condition (`ConditionalCheckFailedException`, a cancelled transaction whose reasons
//!   are condition failures) is [`StoreError::Conflict`] when a caller does not turn it into a
//!   semantic answer first (`Fenced::Superseded`, `LeaseGrant::Held`, …);
//! - throttling, transaction conflicts, 5xx, timeouts and connection failures are
//!   [`StoreError::Unavailable`] (safe to retry; the SDK already retried them with backoff);
//! - everything else (validation, a missing table, access denied) is [`StoreError::Backend`] with
//!   the source's full message.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::CancellationReason;
use reaper_core::StoreError;

/// Error codes DynamoDB uses for throttling and transient server-side trouble.
const TRANSIENT_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionConflictException",
    "TransactionInProgressException",
    "LimitExceededException",
];

pub(crate) const CONDITION_FAILED: &str = "ConditionalCheckFailedException";

/// What kind of failure an SDK error is, before it is turned into a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    ConditionFailed,
    Transient,
    Other,
}

pub(crate) fn classify<E, R>(err: &SdkError<E, R>) -> Kind
where
    E: ProvideErrorMetadata,
    R: HttpStatus,
{
    match err {
        SdkError::TimeoutError(_) => Kind::Transient,
        SdkError::DispatchFailure(d) if d.is_io() || d.is_timeout() => Kind::Transient,
        SdkError::ResponseError(_) => Kind::Transient,
        SdkError::ServiceError(ctx) => {
            let code = ctx.err().code().unwrap_or_default();
            if code == CONDITION_FAILED {
                Kind::ConditionFailed
            } else if TRANSIENT_CODES.contains(&code) || ctx.raw().status_code() >= 500 {
                Kind::Transient
            } else {
                Kind::Other
            }
        }
        _ => Kind::Other,
    }
}

/// Maps an SDK error of operation `op` on `table` to the semantic error.
pub(crate) fn map_sdk<E, R>(op: &str, table: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: HttpStatus + std::fmt::Debug,
{
    let kind = classify(&err);
    let message = format!(
        "dynamodb {op} on table {table} failed: {}",
        DisplayErrorContext(&err)
    );
    match kind {
        Kind::ConditionFailed => StoreError::Conflict(message),
        Kind::Transient => StoreError::Unavailable(message),
        Kind::Other => StoreError::Backend(message),
    }
}

/// Maps a cancelled transaction whose reasons the caller did not turn into an answer.
pub(crate) fn map_cancelled(op: &str, table: &str, reasons: &[CancellationReason]) -> StoreError {
    let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("?")).collect();
    let message =
        format!("dynamodb {op} on table {table}: transaction cancelled, reasons {codes:?}");
    if codes.iter().any(|c| {
        *c == "TransactionConflict"
            || *c == "ThrottlingError"
            || *c == "ProvisionedThroughputExceeded"
    }) {
        StoreError::Unavailable(message)
    } else if codes.contains(&"ConditionalCheckFailed") {
        StoreError::Conflict(message)
    } else {
        StoreError::Backend(message)
    }
}

/// The HTTP status of a raw response, abstracted so `classify` stays generic over the SDK's
/// response type.
pub(crate) trait HttpStatus {
    fn status_code(&self) -> u16;
}

impl HttpStatus for aws_sdk_dynamodb::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}
