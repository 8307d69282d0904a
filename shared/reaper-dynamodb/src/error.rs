//! The one place SDK errors become [`StoreError`]s.
//!
//! - a lost condition (`ConditionalCheckFailedException`, a cancelled transaction whose reasons
//!   are condition failures) is [`StoreError::Conflict`] when a caller does not turn it into a
//!   semantic answer first (`Fenced::Superseded`, `LeaseGrant::Held`, …);
//! - throttling, transaction conflicts, 5xx, timeouts and connection failures are
//!   [`StoreError::Unavailable`] (safe to retry; the SDK already retried them with backoff);
//! - a missing table (`ResourceNotFoundException`) or a missing index of the layout (a Query
//!   answered "does not have the specified index") is a damaged database:
//!   [`StoreError::Corrupt`] keyed [`DAMAGED_KEY`], so the sweep's damage latch stops every
//!   terminal write and destroy after it (no retry brings a table back; a finished run must not
//!   be recorded failed and its sandbox destroyed because its transcript had nowhere to go);
//! - everything else (validation, access denied) is [`StoreError::Backend`] with the source's
//!   full message.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::CancellationReason;
use reaper_core::damage::DAMAGED_KEY;
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
    /// The table, or an index the layout needs, is not there.
    Damaged,
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
            let message = ctx.err().message().unwrap_or_default();
            if code == CONDITION_FAILED {
                Kind::ConditionFailed
            } else if code == "ResourceNotFoundException"
                || (code == "ValidationException"
                    && message.contains("does not have the specified index"))
            {
                Kind::Damaged
            } else if code == "ValidationException"
                && message.contains("backfilling global secondary index")
            {
                // An index being built after an UpdateTable added it: readable soon.
                Kind::Transient
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
    // A service's answer is its code and message; the SDK's full context would add the raw
    // response's debug dump (headers, body bytes) to every report and log line. Anything else
    // (a timeout, a refused connection) has no code, and its context chain is what says why.
    let detail = match (err.code(), err.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_string(),
        _ => DisplayErrorContext(&err).to_string(),
    };
    let message = format!("dynamodb {op} on table {table} failed: {detail}");
    match kind {
        Kind::ConditionFailed => StoreError::Conflict(message),
        Kind::Transient => StoreError::Unavailable(message),
        Kind::Damaged => StoreError::Corrupt {
            key: DAMAGED_KEY.into(),
            reason: format!(
                "{message}: the database is damaged (the table or an index of the layout is \
                 missing); the sweep stopped before any further terminal write or destroy. \
                 Restore the table from a backup or redeploy the template so it has the \
                 layout of shared/reaper-dynamodb/LAYOUT.md, then sweep again"
            ),
        },
        Kind::Other => StoreError::Backend(message),
    }
}

/// Whether a Query failed because the index it named is not there (a table deployed before
/// the index existed) or not readable yet (being backfilled after an UpdateTable added it).
/// DynamoDB answers both with a `ValidationException` naming the index.
pub(crate) fn index_missing<E, R>(err: &SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
{
    let SdkError::ServiceError(ctx) = err else {
        return false;
    };
    let message = ctx.err().message().unwrap_or_default();
    ctx.err().code() == Some("ValidationException")
        && (message.contains("does not have the specified index")
            || message.contains("backfilling global secondary index"))
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

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::config::http::HttpResponse;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;
    use aws_smithy_types::body::SdkBody;

    use super::*;

    fn service(code: &str, status: u16) -> SdkError<GetItemError, HttpResponse> {
        let err = GetItemError::generic(
            ErrorMetadata::builder()
                .code(code)
                .message("from the service")
                .build(),
        );
        let raw = HttpResponse::new(status.try_into().expect("valid status"), SdkBody::empty());
        SdkError::service_error(err, raw)
    }

    fn mapped(err: SdkError<GetItemError, HttpResponse>) -> StoreError {
        map_sdk("GetItem", "runs", err)
    }

    #[test]
    fn throttling_and_server_errors_are_unavailable() {
        for (code, status) in [
            ("ProvisionedThroughputExceededException", 400),
            ("ThrottlingException", 400),
            ("RequestLimitExceeded", 400),
            ("InternalServerError", 500),
            ("SomethingNew", 503),
        ] {
            let e = mapped(service(code, status));
            assert!(
                matches!(&e, StoreError::Unavailable(m) if m.contains(code) && m.contains("runs")),
                "{code}/{status} mapped to {e:?}"
            );
            assert!(e.is_retryable());
        }
    }

    #[test]
    fn a_lost_condition_is_a_conflict() {
        let e = mapped(service(CONDITION_FAILED, 400));
        assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    }

    #[test]
    fn validation_and_access_errors_are_backend_errors_with_the_source_message() {
        for code in ["ValidationException", "AccessDeniedException"] {
            let e = mapped(service(code, 400));
            assert!(
                matches!(&e, StoreError::Backend(m) if m.contains(code) && m.contains("from the service")),
                "{code} mapped to {e:?}"
            );
        }
    }

    #[test]
    fn a_missing_table_or_layout_index_is_damage_and_a_backfilling_index_is_unavailable() {
        let e = mapped(service("ResourceNotFoundException", 400));
        assert!(reaper_core::damage::is_damaged(&e), "{e:?}");
        assert!(e.to_string().contains("ResourceNotFoundException"), "{e}");
        let with_message = |message: &str| {
            SdkError::service_error(
                GetItemError::generic(
                    ErrorMetadata::builder()
                        .code("ValidationException")
                        .message(message)
                        .build(),
                ),
                HttpResponse::new(400.try_into().expect("valid status"), SdkBody::empty()),
            )
        };
        let e = mapped(with_message(
            "The table does not have the specified index: by-thread",
        ));
        assert!(reaper_core::damage::is_damaged(&e), "{e:?}");
        let e = mapped(with_message(
            "Cannot read from backfilling global secondary index: by-thread",
        ));
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    }

    #[test]
    fn a_timeout_is_unavailable() {
        let e = mapped(SdkError::timeout_error("operation timed out"));
        assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    }

    #[test]
    fn a_cancelled_transaction_maps_by_its_reasons() {
        let reason = |code: &str| CancellationReason::builder().code(code).build();
        assert!(matches!(
            map_cancelled(
                "TransactWriteItems",
                "t",
                &[reason("None"), reason("TransactionConflict")]
            ),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            map_cancelled(
                "TransactWriteItems",
                "t",
                &[reason("ConditionalCheckFailed")]
            ),
            StoreError::Conflict(_)
        ));
        assert!(matches!(
            map_cancelled("TransactWriteItems", "t", &[reason("ValidationError")]),
            StoreError::Backend(_)
        ));
    }
}
