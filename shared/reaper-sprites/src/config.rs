//! How the provider reaches Sprites: base URL, token, timeouts, the output bound.

use reaper_core::secret::Secret;
use reaper_http_sandbox::redact_url;

/// Sprites' public API.
pub const DEFAULT_BASE_URL: &str = "https://api.sprites.dev";
/// The name in instance records of sprites (the app framework's Sprites provider records
/// `sprites`), and in `REAPER_PROVIDERS`.
pub const PROVIDER_NAME: &str = "sprites";
/// The timeout of each REST request.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// The most stdout (and, separately, stderr) one `exec` returns: a replay page fits.
pub const DEFAULT_OUTPUT_LIMIT: usize = 1024 * 1024;
/// `max_run_after_disconnect` of every exec: how long a command outlives a dropped socket (an
/// exec past its timeout or its output bound). Short, so a dropped exec does not keep running.
pub const DEFAULT_EXEC_LINGER_SECS: u64 = 1;

/// The variables [`Config::from_lookup`] reads.
pub mod vars {
    /// A Sprites API token (sprites.dev/account, or `sprite org auth`).
    pub const TOKEN: &str = "SPRITES_TOKEN";
    /// The name Sprites' own reference pages use for the same token; read when `SPRITES_TOKEN` is
    /// unset.
    pub const TOKEN_ALT: &str = "SPRITE_TOKEN";
    /// Overrides [`super::DEFAULT_BASE_URL`] (tests, proxies).
    pub const API_URL: &str = "SPRITES_API_URL";
}

/// How a [`crate::SpritesProvider`] reaches Sprites. `Debug` shows no token.
#[derive(Clone)]
pub struct Config {
    /// `https://api.sprites.dev`; `/v1/sprites/...` is appended (`wss://` for exec).
    pub base_url: String,
    /// Sent only as `Authorization: Bearer …`.
    pub token: Secret,
    pub request_timeout_ms: u64,
    /// Per-stream bound of an `exec`'s output; more is `OutputLimit`.
    pub output_limit: usize,
    /// `max_run_after_disconnect` in seconds (at least 1: Sprites reads 0 as "forever").
    pub exec_linger_secs: u64,
}

impl Config {
    pub fn new(token: Secret) -> Self {
        Config {
            base_url: DEFAULT_BASE_URL.into(),
            token,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            exec_linger_secs: DEFAULT_EXEC_LINGER_SECS,
        }
    }

    /// Reads [`vars::TOKEN`] (or [`vars::TOKEN_ALT`]; one is required) and [`vars::API_URL`]
    /// through `lookup`. An empty value counts as unset. Everything is validated.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let (token, from) = match (get(vars::TOKEN), get(vars::TOKEN_ALT)) {
            (Some(t), _) => (t, vars::TOKEN),
            (None, Some(t)) => (t, vars::TOKEN_ALT),
            (None, None) => return Err(ConfigError::MissingToken),
        };
        let mut config = Config::new(Secret::new(token.trim()));
        if let Some(url) = get(vars::API_URL) {
            config.base_url = url.trim().to_string();
        }
        config.validate().map_err(|e| match e {
            ConfigError::Token { .. } => ConfigError::Token { variable: from },
            other => other,
        })?;
        Ok(config)
    }

    /// Checks every field; the provider refuses a configuration that fails this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let base = self.base_url.trim_end_matches('/');
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
        if self.request_timeout_ms == 0 || self.output_limit == 0 || self.exec_linger_secs == 0 {
            return Err(ConfigError::Zero);
        }
        Ok(())
    }

    /// The base URL without a trailing slash.
    pub(crate) fn base(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("base_url", &redact_url(&self.base_url))
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("output_limit", &self.output_limit)
            .field("exec_linger_secs", &self.exec_linger_secs)
            .finish_non_exhaustive()
    }
}

/// A configuration that cannot work. Never quotes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(
        "no Sprites token: set {} (create one at sprites.dev/account or with `sprite org auth`)",
        vars::TOKEN
    )]
    MissingToken,
    #[error("{variable} is not a usable token (empty, or with spaces or control characters): paste the token exactly")]
    Token { variable: &'static str },
    #[error(
        "{var} {url:?} is not an http(s) base URL without query or fragment: use https://api.sprites.dev",
        var = vars::API_URL,
        url = .0
    )]
    BaseUrl(String),
    #[error("the request timeout, the output limit and the exec linger must each be above zero")]
    Zero,
    #[error(
        "this build has no WebSocket client, and Sprites runs commands only over a WebSocket: \
         a reaper here could look sprites up and delete them but never read their journals; \
         sweep sprites from the CLI, Lambda or Vercel"
    )]
    NoExec,
}
