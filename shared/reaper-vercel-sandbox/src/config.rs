//! How the provider reaches Vercel: base URL, token, team, timeouts and the output bound.

use reaper_core::secret::Secret;
use reaper_http_sandbox::redact_url;

/// Vercel's public REST endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.vercel.com";
/// The name recorded in instance records of Vercel sandboxes: TanStack AI's Vercel provider
/// records `vercel`.
pub const PROVIDER_NAME: &str = "vercel";
/// The name this reaper recorded before it followed the framework's; records written under it
/// are still served.
pub const LEGACY_PROVIDER_NAME: &str = "vercel-sandbox";
/// The timeout of every request other than an `exec`'s log stream.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// The most stdout (and, separately, stderr) one `exec` returns: a replay page (256 KiB of
/// journal, base64-encoded) fits with room to spare.
pub const DEFAULT_OUTPUT_LIMIT: usize = 1024 * 1024;

/// The variables [`Config::from_lookup`] reads.
pub mod vars {
    /// A Vercel access token (preferred when both are set).
    pub const TOKEN: &str = "VERCEL_TOKEN";
    /// The OIDC token a Vercel deployment receives; used when `VERCEL_TOKEN` is unset.
    pub const OIDC_TOKEN: &str = "VERCEL_OIDC_TOKEN";
    /// The team owning the sandboxes (`teamId` on every request). Optional: when unset, the
    /// team named in an OIDC token's claims (`owner_id`) is used, and a personal account has
    /// none.
    pub const TEAM_ID: &str = "VERCEL_TEAM_ID";
    /// Overrides [`super::DEFAULT_BASE_URL`] (tests, proxies).
    pub const API_URL: &str = "VERCEL_SANDBOX_API_URL";
    /// The project owning the named sandboxes (`projectId` on the named-sandbox requests).
    /// Required with an access token; an OIDC token names its project (`project_id`).
    pub const PROJECT_ID: &str = "VERCEL_PROJECT_ID";
    /// How a sandbox is destroyed: `delete` (default: the named sandbox and its snapshots are
    /// deleted) or `stop` (only its session is stopped; a persistent sandbox keeps its snapshot
    /// and its bill).
    pub const DESTROY: &str = "VERCEL_SANDBOX_DESTROY";
}

/// How [`crate::VercelSandboxProvider`] destroys a named sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DestroyMode {
    /// `DELETE /v2/sandboxes/{name}`: nothing of it is left, and nothing is billed any more.
    #[default]
    Delete,
    /// `POST /v2/sandboxes/sessions/{sessionId}/stop` on its current session: a persistent
    /// sandbox stays (resumable, its snapshots billed).
    Stop,
}

/// Longest team id accepted (Vercel's are `team_` plus 24 characters).
const MAX_TEAM_ID_LEN: usize = 128;

/// How a [`crate::VercelSandboxProvider`] reaches Vercel. `Debug` shows no token.
#[derive(Clone)]
pub struct Config {
    /// `https://api.vercel.com`; `/v2/sandboxes/...` is appended.
    pub base_url: String,
    /// Sent only as `Authorization: Bearer …`; never in `Debug`, logs or errors.
    pub token: Secret,
    /// Sent as the `teamId` query parameter when set.
    pub team_id: Option<String>,
    /// Sent as the `projectId` query parameter of the named-sandbox requests when set.
    pub project_id: Option<String>,
    /// What `destroy` does to a named sandbox.
    pub destroy: DestroyMode,
    /// The timeout of each request other than an `exec`'s log stream, whose timeout is the
    /// `exec`'s own.
    pub request_timeout_ms: u64,
    /// Per-stream bound of an `exec`'s output; more is [`reaper_core::SandboxError::OutputLimit`].
    pub output_limit: usize,
}

impl Config {
    /// A configuration with every default and this token.
    pub fn new(token: Secret) -> Self {
        Config {
            base_url: DEFAULT_BASE_URL.into(),
            token,
            team_id: None,
            project_id: None,
            destroy: DestroyMode::Delete,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }

    /// Reads the settings through `lookup` (the caller's environment, a Worker's bindings):
    /// [`vars::TOKEN`] or else [`vars::OIDC_TOKEN`] (one is required), [`vars::TEAM_ID`] and
    /// [`vars::API_URL`] (optional). An empty value counts as unset. Without a team id, a token
    /// that is a JWT naming its team (`owner_id`, as Vercel's OIDC tokens do) supplies it.
    /// Everything is validated.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let (token, from) = match (get(vars::TOKEN), get(vars::OIDC_TOKEN)) {
            (Some(t), _) => (t, vars::TOKEN),
            (None, Some(t)) => (t, vars::OIDC_TOKEN),
            (None, None) => return Err(ConfigError::MissingToken),
        };
        let mut config = Config::new(Secret::new(token));
        config.team_id =
            get(vars::TEAM_ID).or_else(|| jwt_claim(config.token.expose(), "owner_id"));
        config.project_id =
            get(vars::PROJECT_ID).or_else(|| jwt_claim(config.token.expose(), "project_id"));
        if let Some(url) = get(vars::API_URL) {
            config.base_url = url;
        }
        config.destroy = match get(vars::DESTROY).as_deref().map(str::trim) {
            None => DestroyMode::Delete,
            Some(v) if v.eq_ignore_ascii_case("delete") => DestroyMode::Delete,
            Some(v) if v.eq_ignore_ascii_case("stop") => DestroyMode::Stop,
            Some(other) => return Err(ConfigError::Destroy(other.to_string())),
        };
        config.validate().map_err(|e| match e {
            ConfigError::Token { .. } => ConfigError::Token { variable: from },
            other => other,
        })?;
        if config.project_id.is_none() && jwt_claim(config.token.expose(), "owner_id").is_none() {
            // An access token names no project, and Vercel needs one to find a sandbox by name.
            return Err(ConfigError::MissingProject);
        }
        Ok(config)
    }

    /// Checks every field; the provider refuses a configuration that fails this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let base = self.base_url.trim_end_matches('/');
        // A query or fragment would end up in the middle of every request's URL.
        if !(base.starts_with("http://") || base.starts_with("https://"))
            || base.contains(['?', '#'])
            || base.len() <= "https://".len()
        {
            return Err(ConfigError::BaseUrl(redact_url(&self.base_url)));
        }
        let token = self.token.expose();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::Token {
                variable: vars::TOKEN,
            });
        }
        if let Some(team) = &self.team_id {
            if !is_plain_id(team) {
                return Err(ConfigError::TeamId(team.clone()));
            }
        }
        if let Some(project) = &self.project_id {
            if !is_plain_id(project) {
                return Err(ConfigError::ProjectId(project.clone()));
            }
        }
        if self.request_timeout_ms == 0 {
            return Err(ConfigError::RequestTimeout);
        }
        if self.output_limit == 0 {
            return Err(ConfigError::OutputLimit);
        }
        Ok(())
    }
}

/// Team and project ids go into query strings unescaped: only `[A-Za-z0-9_-]`.
fn is_plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_TEAM_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A string claim of a JWT (Vercel's OIDC tokens name their team in `owner_id` and their
/// project in `project_id`), read without verifying the signature: it only chooses the ids to
/// ask for, and Vercel checks the token.
fn jwt_claim(token: &str, claim: &str) -> Option<String> {
    use base64::Engine;
    let mut parts = token.split('.');
    let (_, payload, _, None) = (parts.next()?, parts.next()?, parts.next()?, parts.next()) else {
        return None;
    };
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let claims: serde_json::Value =
        serde_json::from_slice(&engine.decode(payload.trim_end_matches('=')).ok()?).ok()?;
    claims
        .get(claim)?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("base_url", &redact_url(&self.base_url))
            .field("token", &self.token)
            .field("team_id", &self.team_id)
            .field("project_id", &self.project_id)
            .field("destroy", &self.destroy)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("output_limit", &self.output_limit)
            .finish()
    }
}

/// A configuration that cannot work, refused before any request. No variant carries the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(
        "no Vercel token: set VERCEL_TOKEN to an access token (vercel.com/account/tokens), or \
         run on Vercel where VERCEL_OIDC_TOKEN is provided"
    )]
    /// Neither `VERCEL_TOKEN` nor `VERCEL_OIDC_TOKEN` is set.
    MissingToken,
    #[error("invalid {variable}: a token is non-empty printable ASCII without spaces")]
    /// A token variable's value is not a token.
    Token {
        /// `VERCEL_TOKEN` or `VERCEL_OIDC_TOKEN`.
        variable: &'static str,
    },
    #[error(
        "invalid VERCEL_TEAM_ID {0:?}: a team id is 1-128 characters of [A-Za-z0-9_-] \
         (team_…, from the team's settings page)"
    )]
    /// `VERCEL_TEAM_ID` is malformed.
    TeamId(String),
    /// The URL is shown redacted.
    #[error(
        "invalid Vercel API base URL {0:?} (VERCEL_SANDBOX_API_URL): it must start with http:// \
         or https:// and have no query or fragment"
    )]
    BaseUrl(String),
    #[error(
        "no Vercel project: set VERCEL_PROJECT_ID to the project owning the sandboxes (prj_… or \
         its name); an access token names none (on Vercel, VERCEL_OIDC_TOKEN does)"
    )]
    /// No project: an access token alone names none.
    MissingProject,
    #[error(
        "invalid VERCEL_PROJECT_ID {0:?}: a project id or name is 1-128 characters of \
         [A-Za-z0-9_-]"
    )]
    /// `VERCEL_PROJECT_ID` is malformed.
    ProjectId(String),
    #[error("invalid VERCEL_SANDBOX_DESTROY {0:?}: use delete (the default) or stop")]
    /// `VERCEL_SANDBOX_DESTROY` is neither `delete` nor `stop`.
    Destroy(String),
    #[error("invalid request timeout: it must be at least 1 ms")]
    /// The request timeout is zero.
    RequestTimeout,
    #[error("invalid output limit: it must be at least 1 byte")]
    /// The output limit is zero.
    OutputLimit,
    #[error("cannot build the HTTP transport: {0}")]
    /// The HTTP client could not be built.
    Transport(String),
}
