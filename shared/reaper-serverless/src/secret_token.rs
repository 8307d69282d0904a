//! The sandboxd token read at run time from AWS Secrets Manager, so a rotation reaches a warm
//! function without a redeploy: only the secret's ARN is in the environment, the value is read
//! with `GetSecretValue`, used for a bounded time ([`SecretSource::cache_ttl`]), and read again
//! at once when sandboxd answers 401 (the token was rotated under us).
//!
//! [`SecretTokenTransport`] puts the token on each sandboxd request. A Secrets Manager that
//! cannot be read fails the request as unreachable: the probe answers `unknown` and the reclaim
//! keeps the sandbox (the ledger retries), so nothing is destroyed on a token we could not read.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_secretsmanager::error::DisplayErrorContext;
use reaper_core::{Clock, EpochMs};
use reaper_http_sandbox::{HttpRequest, HttpResponse, HttpTransport, TransportError};

use crate::config::{Secret, SecretSource};

/// How long one `GetSecretValue` may take: the sweep waits for it before its sandboxd request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The token could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot read the sandboxd token from Secrets Manager secret {arn}: {reason}. Nothing was \
     destroyed; the next sweep tries again. Check that the secret exists, holds the token as its \
     SecretString, and that the function may call secretsmanager:GetSecretValue on it"
)]
pub struct SecretTokenError {
    pub arn: String,
    pub reason: String,
}

struct Cached {
    token: Secret,
    read_at: EpochMs,
}

/// The token of one secret, cached for [`SecretSource::cache_ttl`] on an injected clock.
pub struct SecretToken {
    client: aws_sdk_secretsmanager::Client,
    source: SecretSource,
    clock: Arc<dyn Clock>,
    /// One read at a time: callers that find the cache stale wait for the read in flight.
    cached: tokio::sync::Mutex<Option<Cached>>,
}

impl std::fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretToken")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl SecretToken {
    pub fn new(
        client: aws_sdk_secretsmanager::Client,
        source: SecretSource,
        clock: Arc<dyn Clock>,
    ) -> Self {
        SecretToken {
            client,
            source,
            clock,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// A client for `sdk`'s region and endpoint (`AWS_ENDPOINT_URL_SECRETS_MANAGER`), with
    /// short timeouts.
    pub fn client(
        builder: aws_sdk_secretsmanager::config::Builder,
    ) -> aws_sdk_secretsmanager::Client {
        let config = builder
            .timeout_config(
                aws_sdk_secretsmanager::config::timeout::TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .operation_timeout(OPERATION_TIMEOUT)
                    .build(),
            )
            .build();
        aws_sdk_secretsmanager::Client::from_conf(config)
    }

    pub fn source(&self) -> &SecretSource {
        &self.source
    }

    /// The cached token while it is younger than the cache's lifetime, else a fresh read.
    pub async fn current(&self) -> Result<Secret, SecretTokenError> {
        let mut cached = self.cached.lock().await;
        let now = self.clock.now_ms();
        let ttl = i64::try_from(self.source.cache_ttl.as_millis()).unwrap_or(i64::MAX);
        if let Some(c) = cached.as_ref() {
            if now.saturating_sub(c.read_at) < ttl {
                return Ok(c.token.clone());
            }
        }
        let token = self.read().await?;
        *cached = Some(Cached {
            token: token.clone(),
            read_at: now,
        });
        Ok(token)
    }

    /// After sandboxd refused `rejected`: reads the secret again, unless another request has
    /// already replaced that token in the cache (then its replacement is returned unread).
    pub async fn after_unauthorized(&self, rejected: &Secret) -> Result<Secret, SecretTokenError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            if c.token != *rejected {
                return Ok(c.token.clone());
            }
        }
        let token = self.read().await;
        match token {
            Ok(token) => {
                *cached = Some(Cached {
                    token: token.clone(),
                    read_at: self.clock.now_ms(),
                });
                Ok(token)
            }
            Err(e) => {
                // The refused token is known bad: the next request reads again.
                *cached = None;
                Err(e)
            }
        }
    }

    async fn read(&self) -> Result<Secret, SecretTokenError> {
        let fail = |reason: String| SecretTokenError {
            arn: self.source.arn.clone(),
            reason,
        };
        let out = self
            .client
            .get_secret_value()
            .secret_id(&self.source.arn)
            .send()
            .await
            .map_err(|e| fail(DisplayErrorContext(e).to_string()))?;
        let Some(value) = out.secret_string else {
            return Err(fail(
                "the secret has no SecretString (a binary secret?); store the token as text".into(),
            ));
        };
        // The rule every reaper token follows: a value the daemon would refuse at start is
        // refused here too, with the same sentence.
        reaper_core::settings::check_token("the secret's value", &value)
            .map_err(|e| fail(e.to_string()))?;
        tracing::info!(secret = %self.source.arn, version = out.version_id.as_deref().unwrap_or(""), "read the sandboxd token from Secrets Manager");
        Ok(Secret::new(value))
    }
}

/// An [`HttpTransport`] that sends each sandboxd request with the token of a [`SecretToken`],
/// replacing whatever `Authorization` the provider set, and re-reads the secret once when the
/// daemon answers 401.
pub struct SecretTokenTransport {
    inner: Arc<dyn HttpTransport>,
    token: Arc<SecretToken>,
}

impl std::fmt::Debug for SecretTokenTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretTokenTransport")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl SecretTokenTransport {
    pub fn new(inner: Arc<dyn HttpTransport>, token: Arc<SecretToken>) -> Self {
        SecretTokenTransport { inner, token }
    }
}

fn with_token(mut request: HttpRequest, token: &Secret) -> HttpRequest {
    request
        .headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case("authorization"));
    request
        .headers
        .push(("authorization".into(), format!("Bearer {}", token.expose())));
    request
}

#[async_trait::async_trait]
impl HttpTransport for SecretTokenTransport {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let unavailable = |e: SecretTokenError| TransportError::Unreachable {
            url: request.url.clone(),
            message: format!("the sandboxd token is unavailable: {e}"),
        };
        let token = self.token.current().await.map_err(unavailable)?;
        let response = self.inner.send(with_token(request.clone(), &token)).await?;
        if response.status != 401 {
            return Ok(response);
        }
        let fresh = self
            .token
            .after_unauthorized(&token)
            .await
            .map_err(unavailable)?;
        if fresh == token {
            // The secret still holds the refused token: the 401 stands (the daemon's token is
            // not the one in the secret).
            return Ok(response);
        }
        // A 401 means the daemon did nothing with the request, so sending it once more, with
        // the rotated token, cannot repeat an effect.
        tracing::info!(secret = %self.token.source.arn, "sandboxd refused the cached token; sending again with the token just read");
        self.inner.send(with_token(request, &fresh)).await
    }
}
