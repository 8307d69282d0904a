//! AWS credentials for the DynamoDB store, chosen from the settings ([`AwsCredentialsConfig`]):
//!
//! - `AWS_ROLE_ARN` set: the role is assumed with STS `AssumeRoleWithWebIdentity` and the
//!   deployment's OIDC token ([`WebIdentityCredentials`]); no AWS key is stored anywhere. On
//!   Vercel the token arrives with every request (`x-vercel-oidc-token`, offered to
//!   [`OidcTokens`] by the handler) and `VERCEL_OIDC_TOKEN` is the fallback (builds, `vercel env
//!   pull` for local runs).
//! - else `AWS_ACCESS_KEY_ID` set: those keys (with `AWS_SECRET_ACCESS_KEY` and, for temporary
//!   keys such as Lambda's execution role, `AWS_SESSION_TOKEN`).
//! - else the SDK's default chain. A handler without ambient credentials (Vercel) refuses this
//!   at start-up with [`AwsCredentialsConfig::require_explicit`].
//!
//! Why not the SDK's own `WebIdentityTokenCredentialsProvider`: it reads the token from a file
//! (`AWS_WEB_IDENTITY_TOKEN_FILE`). Feeding it Vercel's per-request token would mean writing a
//! bearer token to disk on every request, with concurrent requests in one process (fluid
//! compute) racing on that file. This provider takes the token from memory instead, makes one
//! STS call at a time, and caches the credentials until shortly before they expire.

use std::sync::{Arc, RwLock};
use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{future, ProvideCredentials};
use aws_credential_types::Credentials;
use aws_sdk_sts::error::ProvideErrorMetadata;
use reaper_core::Clock;

use crate::config::Secret;

/// The IAM role to assume with the OIDC token (the OIDC stack's `RoleArn` output).
pub const ROLE_ARN: &str = "AWS_ROLE_ARN";
/// The STS session name, shown in CloudTrail next to every DynamoDB call.
pub const ROLE_SESSION_NAME: &str = "AWS_ROLE_SESSION_NAME";
/// The session name when [`ROLE_SESSION_NAME`] is unset.
pub const DEFAULT_SESSION_NAME: &str = "reaper";
pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
pub const SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";
/// Vercel's OIDC token in builds and local development (in functions it is a request header).
pub const VERCEL_OIDC_TOKEN: &str = "VERCEL_OIDC_TOKEN";

/// Assumed credentials are renewed this long before they expire, so no request goes out with
/// credentials that expire while it is in flight (a DynamoDB call retries for up to ~20 s).
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);

/// How the store authenticates to AWS. `Debug` shows no key, token or secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsCredentialsConfig {
    /// `AWS_ROLE_ARN`: assume the role with the deployment's OIDC token.
    WebIdentity {
        role_arn: String,
        session_name: String,
        /// `VERCEL_OIDC_TOKEN`, used until a request brings a token.
        env_token: Option<Secret>,
    },
    /// `AWS_ACCESS_KEY_ID` without `AWS_ROLE_ARN`: the keys as set.
    StaticKeys {
        access_key_id: Secret,
        secret_access_key: Secret,
        session_token: Option<Secret>,
    },
    /// Neither: the SDK's default chain (profiles, container or instance credentials).
    DefaultChain,
}

/// Neither a role nor keys are configured where no ambient credentials exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no AWS credentials are configured: set {ROLE_ARN} to the role the OIDC stack creates \
     (infra/aws/vercel-oidc.yaml, output RoleArn; no keys needed) with AWS_REGION, and enable \
     OIDC federation in the project; or set {ACCESS_KEY_ID} and {SECRET_ACCESS_KEY} of an IAM \
     user limited to the table"
)]
pub struct NoAwsCredentials;

impl AwsCredentialsConfig {
    /// Refuses [`AwsCredentialsConfig::DefaultChain`]: on a platform without ambient
    /// credentials it would only fail at the first DynamoDB request, after a slow search.
    pub fn require_explicit(&self) -> Result<(), NoAwsCredentials> {
        match self {
            AwsCredentialsConfig::DefaultChain => Err(NoAwsCredentials),
            _ => Ok(()),
        }
    }

    /// `web-identity`, `static-keys` or `default-chain`: for the start-up log line.
    pub fn kind(&self) -> &'static str {
        match self {
            AwsCredentialsConfig::WebIdentity { .. } => "web-identity",
            AwsCredentialsConfig::StaticKeys { .. } => "static-keys",
            AwsCredentialsConfig::DefaultChain => "default-chain",
        }
    }
}

/// The freshest OIDC token this process has seen, shared by the handler (which offers each
/// authorized request's token) and [`WebIdentityCredentials`] (which sends it to STS).
#[derive(Clone, Default)]
pub struct OidcTokens {
    latest: Arc<RwLock<Option<Secret>>>,
    fallback: Option<Secret>,
}

impl std::fmt::Debug for OidcTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcTokens")
            .field("offered", &self.read().is_some())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl OidcTokens {
    /// Tokens offered later win; `fallback` (`VERCEL_OIDC_TOKEN`) until one is offered.
    pub fn new(fallback: Option<Secret>) -> Self {
        OidcTokens {
            latest: Arc::default(),
            fallback,
        }
    }

    /// A request's token. Every request carries a token minted no earlier than the ones before
    /// it, so the last one offered is the freshest. An empty value is ignored.
    pub fn offer(&self, token: &str) {
        let token = token.trim();
        if token.is_empty() {
            return;
        }
        let mut latest = self.latest.write().unwrap_or_else(|p| p.into_inner());
        if latest.as_ref().map(Secret::expose) != Some(token) {
            *latest = Some(Secret::new(token));
        }
    }

    /// The token to send now.
    pub fn current(&self) -> Option<Secret> {
        self.read().or_else(|| self.fallback.clone())
    }

    fn read(&self) -> Option<Secret> {
        self.latest
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Why no credentials could be assumed. Never carries the token or a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebIdentityError {
    #[error(
        "no Vercel OIDC token to assume {role_arn} with: the request carried no \
         x-vercel-oidc-token header and {VERCEL_OIDC_TOKEN} is unset; turn on OIDC federation \
         (project Settings → Security → Secure backend access with OIDC federation) and redeploy"
    )]
    NoToken { role_arn: String },
    #[error(
        "STS AssumeRoleWithWebIdentity for {ROLE_ARN}={role_arn} failed: {reason}; check that the \
         role trusts this team's OIDC provider and that its aud and sub conditions name this \
         team, project and environment (infra/aws/vercel-oidc.yaml)"
    )]
    Sts { role_arn: String, reason: String },
    #[error("STS answered AssumeRoleWithWebIdentity for {role_arn} without usable credentials: {reason}")]
    BadResponse { role_arn: String, reason: String },
}

/// Credentials from STS `AssumeRoleWithWebIdentity` with the freshest OIDC token, cached until
/// [`REFRESH_BEFORE_EXPIRY`] before they expire. One STS call at a time: concurrent requests
/// needing a refresh wait for it and share its result.
pub struct WebIdentityCredentials {
    sts: aws_sdk_sts::Client,
    role_arn: String,
    session_name: String,
    tokens: OidcTokens,
    clock: Arc<dyn Clock>,
    cached: tokio::sync::Mutex<Option<Credentials>>,
}

impl std::fmt::Debug for WebIdentityCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebIdentityCredentials")
            .field("role_arn", &self.role_arn)
            .field("session_name", &self.session_name)
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

impl WebIdentityCredentials {
    /// `sts` needs a region (or an endpoint); the call itself is unsigned.
    pub fn new(
        sts: aws_sdk_sts::Client,
        role_arn: impl Into<String>,
        session_name: impl Into<String>,
        tokens: OidcTokens,
        clock: Arc<dyn Clock>,
    ) -> Self {
        WebIdentityCredentials {
            sts,
            role_arn: role_arn.into(),
            session_name: session_name.into(),
            tokens,
            clock,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The cached credentials while they are fresh, else newly assumed ones.
    pub async fn credentials(&self) -> Result<Credentials, WebIdentityError> {
        let mut cached = self.cached.lock().await;
        if let Some(credentials) = cached.as_ref() {
            if self.fresh(credentials) {
                return Ok(credentials.clone());
            }
        }
        let assumed = self.assume().await?;
        *cached = Some(assumed.clone());
        Ok(assumed)
    }

    fn fresh(&self, credentials: &Credentials) -> bool {
        let Some(expiry) = credentials.expiry() else {
            return true;
        };
        let expiry_ms = expiry
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64);
        self.clock.now_ms() < expiry_ms - REFRESH_BEFORE_EXPIRY.as_millis() as i64
    }

    async fn assume(&self) -> Result<Credentials, WebIdentityError> {
        let role_arn = self.role_arn.clone();
        let token = self
            .tokens
            .current()
            .ok_or_else(|| WebIdentityError::NoToken {
                role_arn: role_arn.clone(),
            })?;
        let answer = self
            .sts
            .assume_role_with_web_identity()
            .role_arn(&self.role_arn)
            .role_session_name(&self.session_name)
            .web_identity_token(token.expose())
            .send()
            .await;
        let output = answer.map_err(|e| {
            let reason = sts_reason(&e, token.expose());
            tracing::warn!(role_arn = %self.role_arn, %reason, "assuming the role failed");
            WebIdentityError::Sts {
                role_arn: role_arn.clone(),
                reason,
            }
        })?;
        let bad = |reason: &str| WebIdentityError::BadResponse {
            role_arn: role_arn.clone(),
            reason: reason.into(),
        };
        let sts = output
            .credentials
            .ok_or_else(|| bad("no Credentials element"))?;
        let expiry = std::time::SystemTime::try_from(sts.expiration)
            .map_err(|_| bad("an Expiration outside the representable range"))?;
        tracing::info!(
            role_arn = %self.role_arn,
            session_name = %self.session_name,
            expires_at = %sts.expiration,
            "assumed the role with the OIDC token"
        );
        Ok(Credentials::new(
            sts.access_key_id,
            sts.secret_access_key,
            Some(sts.session_token),
            Some(expiry),
            "VercelOidcWebIdentity",
        ))
    }
}

/// The STS error's code and message (or the transport failure), with the token masked should
/// it ever be echoed.
fn sts_reason<E, R>(e: &aws_sdk_sts::error::SdkError<E, R>, token: &str) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let reason = match e.code() {
        Some(code) => format!("{code}: {}", e.message().unwrap_or("no message")),
        None => aws_sdk_sts::error::DisplayErrorContext(e).to_string(),
    };
    reason.replace(token, "<redacted>")
}

impl ProvideCredentials for WebIdentityCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            self.credentials()
                .await
                .map_err(CredentialsError::provider_error)
        })
    }
}
