//! [`E2bConfig`]: where the E2B APIs are, the API key, and the bounds of every request.

use reaper_core::secret::Secret;
use reaper_http_sandbox::redact_url;

/// The name recorded in instance records of E2B sandboxes.
pub const PROVIDER_NAME: &str = "e2b";
/// E2B's public domain (the SDKs' default for `E2B_DOMAIN`).
pub const DEFAULT_DOMAIN: &str = "e2b.app";
/// The port envd, the daemon inside every sandbox, listens on.
pub const ENVD_PORT: u16 = 49983;
/// Where a sandbox's envd is reached: `{sandboxID}` and `{domain}` are filled in per sandbox
/// (the domain the control plane reports for it, else [`E2bConfig::domain`]).
pub const DEFAULT_ENVD_URL_TEMPLATE: &str = "https://49983-{sandboxID}.{domain}";
/// The user envd runs commands as: the SDKs' default, the owner of an agent's files.
pub const DEFAULT_ENVD_USER: &str = "user";
/// The timeout of every control-plane request (and of the kill that follows a timed-out exec).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Added to an exec's own timeout for its HTTP request, so envd's deadline answer arrives before
/// the client gives up on the request.
pub const DEFAULT_EXEC_MARGIN_MS: u64 = 5_000;
/// The most stdout (and, separately, stderr) one exec may return. More is
/// [`reaper_core::SandboxError::OutputLimit`], never a silent truncation.
pub const DEFAULT_OUTPUT_LIMIT: usize = 4 * 1024 * 1024;
/// The largest response body read. An exec's answer carries both streams base64-encoded in JSON
/// envelopes (about 4/3 of the bytes plus ~60 bytes per chunk), so this must exceed
/// `3 * output_limit`; a smaller value is refused by [`E2bConfig::validate`].
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// The environment variables [`E2bConfig::from_lookup`] reads.
pub mod vars {
    /// Required: the team's API key (`e2b_…`), sent as `X-API-Key`.
    pub const API_KEY: &str = "E2B_API_KEY";
    /// Optional: the domain of the E2B deployment (default [`super::DEFAULT_DOMAIN`]).
    pub const DOMAIN: &str = "E2B_DOMAIN";
    /// Optional: the control-plane URL (default `https://api.<E2B_DOMAIN>`).
    pub const API_URL: &str = "E2B_API_URL";
    /// Optional: the envd URL template (default [`super::DEFAULT_ENVD_URL_TEMPLATE`]).
    pub const ENVD_URL_TEMPLATE: &str = "E2B_ENVD_URL_TEMPLATE";
}

/// How an [`crate::E2bProvider`] reaches E2B.
#[derive(Clone)]
pub struct E2bConfig {
    /// The control plane, e.g. `https://api.e2b.app`: `/sandboxes/{id}` is appended.
    pub api_url: String,
    /// The sandbox domain used when the control plane names none for a sandbox.
    pub domain: String,
    /// The envd base URL of a sandbox, with `{sandboxID}` and `{domain}` placeholders.
    pub envd_url_template: String,
    /// Sent as `X-API-Key` to the control plane only. Never logged, never in `Debug`.
    pub api_key: Secret,
    /// The sandbox user commands run as (envd's `Authorization: Basic` user name).
    pub envd_user: String,
    /// How long one control-plane or envd request may take, in milliseconds.
    pub request_timeout_ms: u64,
    /// Added to an exec's own timeout for the request that carries it, in milliseconds.
    pub exec_margin_ms: u64,
    /// The most bytes of stdout (and, separately, stderr) one exec returns.
    pub output_limit: usize,
    /// The largest answer read from envd; must hold an exec's output at the limit.
    pub max_response_bytes: usize,
}

impl E2bConfig {
    /// The public E2B endpoints with `api_key` and every default.
    pub fn new(api_key: Secret) -> Self {
        E2bConfig {
            api_url: format!("https://api.{DEFAULT_DOMAIN}"),
            domain: DEFAULT_DOMAIN.into(),
            envd_url_template: DEFAULT_ENVD_URL_TEMPLATE.into(),
            api_key,
            envd_user: DEFAULT_ENVD_USER.into(),
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            exec_margin_ms: DEFAULT_EXEC_MARGIN_MS,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// Reads [`vars`] through `lookup` (the caller's environment, a Worker's bindings): this
    /// crate never reads the environment itself. An unset or empty optional variable keeps its
    /// default; the result is validated.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let api_key = get(vars::API_KEY).ok_or(ConfigError::MissingApiKey)?;
        let mut config = E2bConfig::new(Secret::new(api_key.trim()));
        if let Some(domain) = get(vars::DOMAIN) {
            config.domain = domain.trim().to_string();
            config.api_url = format!("https://api.{}", config.domain);
        }
        if let Some(url) = get(vars::API_URL) {
            config.api_url = url.trim().to_string();
        }
        if let Some(template) = get(vars::ENVD_URL_TEMPLATE) {
            config.envd_url_template = template.trim().to_string();
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks everything a request would trip over later, naming the setting to fix.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let key = self.api_key.expose();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::InvalidApiKey);
        }
        if !is_base_url(&self.api_url) {
            return Err(ConfigError::ApiUrl(redact_url(&self.api_url)));
        }
        let domain_ok = !self.domain.is_empty()
            && self
                .domain
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b':');
        if !domain_ok {
            return Err(ConfigError::Domain(self.domain.clone()));
        }
        let filled = self
            .envd_url_template
            .replace("{sandboxID}", "x")
            .replace("{domain}", "x");
        if !self.envd_url_template.contains("{sandboxID}") || !is_base_url(&filled) {
            return Err(ConfigError::EnvdUrlTemplate(redact_url(
                &self.envd_url_template,
            )));
        }
        if self.envd_user.is_empty() || self.envd_user.contains([':', ' ']) {
            return Err(ConfigError::EnvdUser(self.envd_user.clone()));
        }
        if self.output_limit == 0 {
            return Err(ConfigError::OutputLimit);
        }
        let needed = self
            .output_limit
            .saturating_mul(3)
            .saturating_add(64 * 1024);
        if self.max_response_bytes < needed {
            return Err(ConfigError::MaxResponseBytes {
                given: self.max_response_bytes,
                needed,
            });
        }
        if self.request_timeout_ms == 0 {
            return Err(ConfigError::RequestTimeout);
        }
        Ok(())
    }
}

fn is_base_url(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://")) && !url.contains(['?', '#', ' '])
}

impl std::fmt::Debug for E2bConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bConfig")
            .field("api_url", &redact_url(&self.api_url))
            .field("domain", &self.domain)
            .field("envd_url_template", &redact_url(&self.envd_url_template))
            .field("api_key", &self.api_key)
            .field("envd_user", &self.envd_user)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("exec_margin_ms", &self.exec_margin_ms)
            .field("output_limit", &self.output_limit)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

/// A configuration that cannot work, refused before any request. No variant carries the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(
        "E2B_API_KEY is not set: set it to the team's API key from the E2B dashboard (Team \
         settings, API keys)"
    )]
    /// `E2B_API_KEY` is not set.
    MissingApiKey,
    #[error("E2B_API_KEY is invalid: it must be printable ASCII without spaces")]
    /// `E2B_API_KEY` is not printable ASCII without spaces.
    InvalidApiKey,
    #[error(
        "E2B_API_URL {0:?} is invalid: it must start with http:// or https:// and have no query \
         or fragment (unset it to use https://api.<E2B_DOMAIN>)"
    )]
    /// `E2B_API_URL` is not an http(s) base URL.
    ApiUrl(String),
    #[error("E2B_DOMAIN {0:?} is invalid: it must be a host name such as e2b.app")]
    /// `E2B_DOMAIN` is not a host name.
    Domain(String),
    #[error(
        "E2B_ENVD_URL_TEMPLATE {0:?} is invalid: it must be an http(s) URL containing \
         {{sandboxID}} (and usually {{domain}}), e.g. https://49983-{{sandboxID}}.{{domain}}"
    )]
    /// `E2B_ENVD_URL_TEMPLATE` is not an http(s) URL with `{sandboxID}`.
    EnvdUrlTemplate(String),
    #[error("the envd user {0:?} is invalid: it must be a non-empty user name without ':'")]
    /// The envd user is empty or contains `:`.
    EnvdUser(String),
    #[error("the output limit must be at least 1 byte")]
    /// The output limit is zero.
    OutputLimit,
    #[error(
        "max_response_bytes {given} is too small for the output limit: an exec's answer can take \
         up to {needed} bytes; raise it or lower output_limit"
    )]
    /// The response limit cannot hold an exec's answer at the output limit.
    MaxResponseBytes {
        /// The limit given.
        given: usize,
        /// The least that holds an exec's answer.
        needed: usize,
    },
    #[error("the request timeout must be at least 1 ms")]
    /// The request timeout is zero.
    RequestTimeout,
    #[error("cannot build the HTTP transport: {0}")]
    /// The HTTP client could not be built.
    Transport(String),
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn from_lookup_defaults_to_the_public_e2b_endpoints() {
        let config = E2bConfig::from_lookup(lookup(&[(vars::API_KEY, KEY)])).unwrap();
        assert_eq!(config.api_url, "https://api.e2b.app");
        assert_eq!(config.domain, "e2b.app");
        assert_eq!(config.envd_url_template, DEFAULT_ENVD_URL_TEMPLATE);
        assert_eq!(config.api_key.expose(), KEY);
    }

    #[test]
    fn e2b_domain_moves_the_api_and_e2b_api_url_overrides_it() {
        let config = E2bConfig::from_lookup(lookup(&[
            (vars::API_KEY, KEY),
            (vars::DOMAIN, "e2b.example.com"),
        ]))
        .unwrap();
        assert_eq!(config.api_url, "https://api.e2b.example.com");
        assert_eq!(config.domain, "e2b.example.com");
        let config = E2bConfig::from_lookup(lookup(&[
            (vars::API_KEY, KEY),
            (vars::DOMAIN, "e2b.example.com"),
            (vars::API_URL, "http://127.0.0.1:3000/"),
            (vars::ENVD_URL_TEMPLATE, "http://127.0.0.1:3001/{sandboxID}"),
        ]))
        .unwrap();
        assert_eq!(config.api_url, "http://127.0.0.1:3000/");
        assert_eq!(
            config.envd_url_template,
            "http://127.0.0.1:3001/{sandboxID}"
        );
    }

    #[test]
    fn a_missing_or_empty_api_key_names_e2b_api_key() {
        for pairs in [&[][..], &[(vars::API_KEY, "  ")][..]] {
            let err = E2bConfig::from_lookup(lookup(pairs)).unwrap_err();
            assert_eq!(err, ConfigError::MissingApiKey);
            assert!(err.to_string().contains("E2B_API_KEY is not set"), "{err}");
        }
    }

    #[test]
    fn each_invalid_setting_names_its_variable_and_never_the_key() {
        for (pairs, names) in [
            (vec![(vars::API_KEY, "e2b key with spaces")], "E2B_API_KEY"),
            (
                vec![(vars::API_KEY, KEY), (vars::DOMAIN, "e2b.app/evil")],
                "E2B_DOMAIN",
            ),
            (
                vec![(vars::API_KEY, KEY), (vars::API_URL, "api.e2b.app")],
                "E2B_API_URL",
            ),
            (
                vec![
                    (vars::API_KEY, KEY),
                    (vars::API_URL, "https://api.e2b.app?k=v"),
                ],
                "E2B_API_URL",
            ),
            (
                vec![
                    (vars::API_KEY, KEY),
                    (vars::ENVD_URL_TEMPLATE, "https://{domain}"),
                ],
                "E2B_ENVD_URL_TEMPLATE",
            ),
        ] {
            let err = E2bConfig::from_lookup(lookup(&pairs))
                .unwrap_err()
                .to_string();
            assert!(err.contains(names), "{names} not named in: {err}");
            assert!(!err.contains(KEY), "{err}");
        }
    }

    #[test]
    fn a_response_bound_too_small_for_the_output_limit_is_refused() {
        let mut config = E2bConfig::new(Secret::new(KEY));
        config.output_limit = 1024 * 1024;
        config.max_response_bytes = 2 * 1024 * 1024;
        let err = config.validate().unwrap_err();
        assert!(matches!(err, ConfigError::MaxResponseBytes { .. }), "{err}");
        config.max_response_bytes = 4 * 1024 * 1024;
        config.validate().unwrap();
    }

    #[test]
    fn debug_never_shows_the_api_key_nor_credentials_in_urls() {
        let mut config = E2bConfig::new(Secret::new(KEY));
        config.api_url = "https://user:hunter22@api.e2b.app".into();
        let shown = format!("{config:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(!shown.contains("hunter22"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
