//! What to do with a request, decided from its head alone (`http::request::Parts`), and the
//! responses. Plain functions so every case is a unit test: the runtime's
//! `hyper::body::Incoming` cannot be built outside a server.

use http::{header, HeaderValue, Method, Response, StatusCode};
use reaper_core::reap::{SweepReport, SweepStatus};
use reaper_serverless::{ServerlessReport, ServiceStatus};

use crate::auth::{authorize, AuthFailure, CronSecret, CRON_SECRET_ENV};

/// The function's path: `api/reap.rs` is served at `/api/reap`, and `vercel.json`'s cron calls it
/// (a tidy test keeps the three equal).
pub const CRON_PATH: &str = "/api/reap";

/// The header carrying the deployment's OIDC token on every request to a function (when OIDC
/// federation is on). Only an authorized cron request's token is kept.
pub const OIDC_TOKEN_HEADER: &str = "x-vercel-oidc-token";

/// The request's OIDC token, if it carries one that is valid header text.
pub fn oidc_token(parts: &http::request::Parts) -> Option<&str> {
    parts
        .headers
        .get(OIDC_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
}

/// The query parameter that asks for the status instead of a sweep: `GET /api/reap?status`.
pub const STATUS_QUERY: &str = "status";

/// What an admitted request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The cron's request: a sweep.
    Sweep,
    /// `?status`: the last sweep, the ledger and the detached runs, read without sweeping.
    Status,
}

/// Why a request gets no sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not the cron path.
    NotFound,
    /// The cron only ever sends `GET`; anything else is not a cron delivery.
    MethodNotAllowed,
    /// Missing or wrong bearer secret.
    Unauthorized,
    /// The function was deployed without `CRON_SECRET`.
    SecretMissing,
}

/// The read-only token for the status path (`REAPER_STATUS_TOKEN`): a monitor holding it reads
/// the verdict and can never trigger a sweep, unlike one holding `CRON_SECRET`.
pub const STATUS_TOKEN_ENV: &str = "REAPER_STATUS_TOKEN";

/// Decides whether a request is admitted, and to what: the path, then the method, then the
/// secret, then the query. The cron secret admits both routes.
pub fn gate(parts: &http::request::Parts, secret: &CronSecret) -> Result<Route, Refusal> {
    gate_with_status_token(parts, secret, &CronSecret::Missing)
}

/// [`gate`] where the status path also admits `status_token` (and `HEAD`, for monitors that
/// default to it); the sweep admits only the cron secret and `GET`.
pub fn gate_with_status_token(
    parts: &http::request::Parts,
    secret: &CronSecret,
    status_token: &CronSecret,
) -> Result<Route, Refusal> {
    if parts.uri.path() != CRON_PATH {
        return Err(Refusal::NotFound);
    }
    let asks_status = parts.uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.split('=').next() == Some(STATUS_QUERY))
    });
    let head_status = asks_status && parts.method == Method::HEAD;
    if parts.method != Method::GET && !head_status {
        return Err(Refusal::MethodNotAllowed);
    }
    let to_refusal = |e| match e {
        AuthFailure::SecretMissing => Refusal::SecretMissing,
        AuthFailure::Unauthorized => Refusal::Unauthorized,
    };
    let by_cron = authorize(&parts.headers, secret);
    if asks_status && by_cron.is_err() {
        match (by_cron, authorize(&parts.headers, status_token)) {
            (_, Ok(())) => {}
            // Both missing: nobody can be admitted, a deploy mistake.
            (Err(AuthFailure::SecretMissing), Err(AuthFailure::SecretMissing)) => {
                return Err(Refusal::SecretMissing)
            }
            _ => return Err(Refusal::Unauthorized),
        }
    } else {
        by_cron.map_err(to_refusal)?;
    }
    Ok(if asks_status {
        Route::Status
    } else {
        Route::Sweep
    })
}

impl Refusal {
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::NotFound => StatusCode::NOT_FOUND,
            Refusal::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Refusal::Unauthorized => StatusCode::UNAUTHORIZED,
            Refusal::SecretMissing => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// One log line per refused request. It names what was wrong, never a header's value.
    pub fn log(self, parts: &http::request::Parts) {
        let method = parts.method.as_str();
        let path = parts.uri.path();
        match self {
            Refusal::SecretMissing => tracing::error!(
                method,
                path,
                "{CRON_SECRET_ENV} is missing (unset or empty): refusing every request; set it \
                 in the project's environment variables (at least 16 random characters) and \
                 redeploy"
            ),
            Refusal::Unauthorized => tracing::warn!(
                method,
                path,
                authorization_present = parts.headers.contains_key(header::AUTHORIZATION),
                "refused a request without the right bearer secret"
            ),
            Refusal::MethodNotAllowed => {
                tracing::info!(method, path, "refused a method other than GET")
            }
            Refusal::NotFound => tracing::info!(method, path, "no such path"),
        }
    }

    /// An empty body: a refused caller learns nothing but the status.
    pub fn response(self) -> Response<String> {
        let mut response = Response::new(String::new());
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self == Refusal::MethodNotAllowed {
            // HEAD only for the status path (`?status`).
            headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        response
    }
}

/// The status for a sweep's outcome. A sweep that ran, one skipped because another holds the
/// lease, and one an operator paused are all 200: Vercel delivers crons twice and overlaps them,
/// and none is a failure. A lease store that cannot be reached is 503 and bad settings are 500,
/// so the cron's log shows them failed.
pub fn report_status(report: &SweepReport) -> StatusCode {
    match report.sweep {
        SweepStatus::Swept
        | SweepStatus::AlreadyRunning { .. }
        | SweepStatus::Paused { .. }
        | SweepStatus::DryRun => StatusCode::OK,
        SweepStatus::LeaseUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        SweepStatus::InvalidOptions { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The report as JSON: `sweep` (its `state`), `considered`, `probed`, `deferred`, `outcomes`,
/// `runs`, `startedAt`, `durationMs`, the `plan` (budget, margin, deadlines) and the sweep's
/// `dynamodb` requests.
pub fn report_response(report: &ServerlessReport) -> Response<String> {
    // Damage is a failed invocation (500) in Vercel's logs and to any monitor of the cron.
    let code = match report.damaged() {
        Some(_) => StatusCode::INTERNAL_SERVER_ERROR,
        None => report_status(&report.sweep),
    };
    json_response(code, report)
}

/// The status as JSON: 200 when healthy, 503 when not (an uptime monitor alerts on the status
/// code alone; `problems` says why).
pub fn status_response(status: &ServiceStatus) -> Response<String> {
    let code = if status.healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(code, status)
}

/// A JSON body with `cache-control: no-store` (a cached answer would hide a sweep).
pub fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<String> {
    let body = serde_json::to_string(body).unwrap_or_else(|e| {
        tracing::error!(error = %e, "cannot serialize the response");
        "{}".into()
    });
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tests::report;
    use std::ffi::OsStr;

    const SECRET: &str = "0123456789abcdef-secret";

    fn parts(method: &str, uri: &str, auth: Option<&str>) -> http::request::Parts {
        let mut b = http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::USER_AGENT, "vercel-cron/1.0")
            .header("x-vercel-cron-schedule", "*/5 * * * *");
        if let Some(a) = auth {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn secret() -> CronSecret {
        CronSecret::from_env_value(Some(OsStr::new(SECRET))).unwrap()
    }

    fn bearer() -> String {
        format!("Bearer {SECRET}")
    }

    #[test]
    fn a_cron_shaped_get_with_the_secret_may_sweep_even_with_a_query_string() {
        assert_eq!(
            gate(&parts("GET", CRON_PATH, Some(&bearer())), &secret()),
            Ok(Route::Sweep)
        );
        for query in ["from=cron", "statuses", "x=status", "stat"] {
            let with_query = format!("{CRON_PATH}?{query}");
            assert_eq!(
                gate(&parts("GET", &with_query, Some(&bearer())), &secret()),
                Ok(Route::Sweep),
                "{query}"
            );
        }
    }

    #[test]
    fn a_status_query_with_the_secret_reads_the_status() {
        for query in ["status", "status=1", "from=monitor&status"] {
            let uri = format!("{CRON_PATH}?{query}");
            assert_eq!(
                gate(&parts("GET", &uri, Some(&bearer())), &secret()),
                Ok(Route::Status),
                "{query}"
            );
        }
    }

    #[test]
    fn the_status_query_is_refused_exactly_as_the_sweep_without_the_secret() {
        let uri = format!("{CRON_PATH}?status");
        for auth in [None, Some("Bearer nope")] {
            let refusal = gate(&parts("GET", &uri, auth), &secret()).unwrap_err();
            assert_eq!(refusal, Refusal::Unauthorized);
            let response = refusal.response();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            assert!(response.body().is_empty());
        }
        assert_eq!(
            gate(&parts("POST", &uri, Some(&bearer())), &secret()),
            Err(Refusal::MethodNotAllowed)
        );
        let missing = CronSecret::from_env_value(None).unwrap();
        assert_eq!(
            gate(&parts("GET", &uri, Some("Bearer ")), &missing),
            Err(Refusal::SecretMissing)
        );
    }

    #[test]
    fn every_method_but_get_is_405_with_an_allow_header_even_with_the_secret() {
        // HEAD is refused on the sweep; only the status path (`?status`) answers it.
        for method in ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"] {
            let refusal = gate(&parts(method, CRON_PATH, Some(&bearer())), &secret()).unwrap_err();
            assert_eq!(refusal, Refusal::MethodNotAllowed, "{method}");
            let response = refusal.response();
            assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
            assert_eq!(response.headers()[header::ALLOW], "GET, HEAD");
            assert!(response.body().is_empty());
        }
    }

    #[test]
    fn another_path_is_404_before_anything_else_is_looked_at() {
        for path in ["/", "/api/reap/", "/api/reaper", "/API/REAP"] {
            assert_eq!(
                gate(&parts("POST", path, None), &secret()),
                Err(Refusal::NotFound),
                "{path}"
            );
        }
    }

    #[test]
    fn a_wrong_or_missing_secret_is_401_with_an_empty_body() {
        for auth in [None, Some("Bearer nope")] {
            let refusal = gate(&parts("GET", CRON_PATH, auth), &secret()).unwrap_err();
            assert_eq!(refusal, Refusal::Unauthorized);
            let response = refusal.response();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            assert!(response.body().is_empty());
            assert_eq!(response.headers()[header::CACHE_CONTROL], "no-store");
        }
    }

    #[test]
    fn without_a_configured_secret_even_a_bearer_header_gets_500() {
        let missing = CronSecret::from_env_value(None).unwrap();
        let refusal = gate(&parts("GET", CRON_PATH, Some("Bearer ")), &missing).unwrap_err();
        assert_eq!(refusal, Refusal::SecretMissing);
        let response = refusal.response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.body().is_empty());
    }

    #[test]
    fn a_sweep_and_a_sweep_already_running_are_both_200_with_the_counts() {
        let swept = report_response(&report(SweepStatus::Swept, 1_000));
        assert_eq!(swept.status(), StatusCode::OK);
        assert_eq!(swept.headers()[header::CONTENT_TYPE], "application/json");
        let body: serde_json::Value = serde_json::from_str(swept.body()).unwrap();
        assert_eq!(body["sweep"]["state"], "swept");
        assert_eq!(
            (&body["considered"], &body["probed"], &body["deferred"]),
            (&2.into(), &1.into(), &3.into())
        );
        assert_eq!(body["outcomes"]["finalized"], 0);
        assert_eq!(body["plan"]["budgetMs"], 300_000);
        assert!(body["dynamodb"]["total"].is_object());

        let held = report_response(&report(
            SweepStatus::AlreadyRunning {
                holder: "other".into(),
                expires_at: 9,
            },
            1_000,
        ));
        assert_eq!(held.status(), StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(held.body()).unwrap();
        assert_eq!(body["sweep"]["state"], "already-running");
        assert_eq!(body["sweep"]["holder"], "other");
    }

    #[test]
    fn a_sweep_an_operator_paused_is_200_saying_who_paused_it() {
        let paused = report(
            SweepStatus::Paused {
                by: "ops@host".into(),
                since: 500,
                reason: Some("provider incident".into()),
            },
            1_000,
        );
        let response = report_response(&paused);
        assert_eq!(response.status(), StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(body["sweep"]["state"], "paused");
        assert_eq!(body["sweep"]["by"], "ops@host");
    }

    #[test]
    fn an_unreachable_lease_store_is_503_and_bad_options_500() {
        let unavailable = report(
            SweepStatus::LeaseUnavailable {
                error: "down".into(),
            },
            1_000,
        );
        assert_eq!(
            report_response(&unavailable).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let invalid = report(SweepStatus::InvalidOptions { error: "x".into() }, 1_000);
        assert_eq!(
            report_response(&invalid).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn every_status_the_function_answers_is_documented_in_the_settings_registry() {
        use reaper_core::settings::{Binary, EXITS};
        let documented: Vec<&str> = EXITS
            .iter()
            .filter(|e| e.binary == Binary::Vercel)
            .map(|e| e.code)
            .collect();
        let error = || "x".to_string();
        let mut answered: Vec<u16> = [
            Refusal::NotFound,
            Refusal::MethodNotAllowed,
            Refusal::Unauthorized,
            Refusal::SecretMissing,
        ]
        .map(|r| r.status().as_u16())
        .to_vec();
        for sweep in [
            SweepStatus::Swept,
            SweepStatus::LeaseUnavailable { error: error() },
            SweepStatus::InvalidOptions { error: error() },
        ] {
            answered.push(report_response(&report(sweep, 1_000)).status().as_u16());
        }
        answered.sort();
        answered.dedup();
        let answered: Vec<String> = answered.iter().map(u16::to_string).collect();
        assert_eq!(documented, answered);
    }
}
