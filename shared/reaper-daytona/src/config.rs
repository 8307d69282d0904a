//! [`DaytonaConfig`]: where the API is, the key, and the bounds of every request.

use reaper_core::secret::Secret;

/// Daytona Cloud's API (the SDKs' default). A self-hosted Daytona serves the same API under its
/// own `…/api`.
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";
/// The variable holding the API key (required).
pub const API_KEY_VAR: &str = "DAYTONA_API_KEY";
/// The variable holding the API's base URL (optional, [`DEFAULT_API_URL`]).
pub const API_URL_VAR: &str = "DAYTONA_API_URL";
/// The timeout of a sandbox lookup or delete.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Added to an exec's own timeout for its HTTP request, so the toolbox's timeout answer (the
/// command was killed) arrives before the client gives up on the request.
pub const DEFAULT_EXEC_MARGIN_MS: u64 = 10_000;
/// The default bound on one exec's output (stdout and stderr together: Daytona folds them).
pub const DEFAULT_OUTPUT_LIMIT: usize = 4 * 1024 * 1024;

/// How a [`crate::DaytonaProvider`] reaches Daytona. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct DaytonaConfig {
    /// The API's base URL, `https://app.daytona.io/api` or a self-hosted `…/api`; the
    /// operation's path (`/sandbox/{id}`) is appended.
    pub api_url: String,
    /// A Daytona API key (sent as `Authorization: Bearer`, to the API and to the sandbox's
    /// toolbox proxy; nowhere else).
    pub api_key: Secret,
    /// The timeout of a lookup or delete.
    pub request_timeout_ms: u64,
    /// See [`DEFAULT_EXEC_MARGIN_MS`].
    pub exec_margin_ms: u64,
    /// The most output one exec may return; more is [`reaper_core::SandboxError::OutputLimit`].
    /// Enforced inside the sandbox, so an endless output is cut there.
    pub output_limit: usize,
}

impl DaytonaConfig {
    /// The defaults, with `api_key`.
    pub fn new(api_key: Secret) -> Self {
        DaytonaConfig {
            api_url: DEFAULT_API_URL.to_string(),
            api_key,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            exec_margin_ms: DEFAULT_EXEC_MARGIN_MS,
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }

    /// Reads [`API_KEY_VAR`] (required) and [`API_URL_VAR`] (optional) through `lookup`, which
    /// is how the caller reads its environment or secret store; this crate reads none itself.
    /// The result is validated.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let key = lookup(API_KEY_VAR)
            .filter(|k| !k.trim().is_empty())
            .ok_or(ConfigError::Missing { var: API_KEY_VAR })?;
        let mut config = DaytonaConfig::new(Secret::new(key));
        if let Some(url) = lookup(API_URL_VAR).filter(|u| !u.trim().is_empty()) {
            config.api_url = url;
        }
        config.validate()?;
        Ok(config)
    }

    /// Refuses a configuration that cannot work, naming the setting and what to do.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_base_url(&self.api_url).map_err(|problem| ConfigError::Invalid {
            var: API_URL_VAR,
            problem,
        })?;
        let key = self.api_key.expose();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
            // The value is never quoted: it is a secret even when it is malformed.
            return Err(ConfigError::Invalid {
                var: API_KEY_VAR,
                problem: "it must be a non-empty Daytona API key of printable ASCII without spaces"
                    .into(),
            });
        }
        for (name, value) in [
            ("request_timeout_ms", self.request_timeout_ms),
            ("output_limit", self.output_limit as u64),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    var: name,
                    problem: "it must be at least 1".into(),
                });
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for DaytonaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaConfig")
            .field("api_url", &self.api_url)
            .field("api_key", &self.api_key)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("exec_margin_ms", &self.exec_margin_ms)
            .field("output_limit", &self.output_limit)
            .finish()
    }
}

/// A setting that is missing or cannot work. Never quotes the API key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(
        "{var} is not set: set it to a Daytona API key (Daytona dashboard, Keys) with permission \
         to read and delete sandboxes"
    )]
    /// The API key variable is not set.
    Missing {
        /// The variable (`DAYTONA_API_KEY`).
        var: &'static str,
    },
    #[error("invalid {var}: {problem}")]
    /// A variable's value cannot work.
    Invalid {
        /// The variable.
        var: &'static str,
        /// What is wrong with it (never the value of a secret).
        problem: String,
    },
    #[error("cannot build the HTTP transport: {0}")]
    /// The HTTP client could not be built.
    Transport(String),
}

/// An `http(s)://host[:port][/path]` base: no credentials (the key goes in a header), no query
/// or fragment (they would land in the middle of every request's URL).
pub(crate) fn check_base_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let Some(rest) = rest else {
        return Err(format!(
            "{url:?} must start with https:// (or http:// for a local Daytona), e.g. \
             {DEFAULT_API_URL}"
        ));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    if authority.contains('@') {
        return Err(
            "the URL must not carry credentials; the API key goes in DAYTONA_API_KEY".into(),
        );
    }
    if url.contains(['?', '#']) || url.contains(char::is_whitespace) {
        return Err(format!(
            "{url:?} must not contain a query, a fragment or spaces"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dtn_s3cr3t-key-value";

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn from_lookup_reads_the_key_and_defaults_the_url() {
        let config = DaytonaConfig::from_lookup(env(&[(API_KEY_VAR, KEY)])).unwrap();
        assert_eq!(config.api_key.expose(), KEY);
        assert_eq!(config.api_url, DEFAULT_API_URL);
        let config = DaytonaConfig::from_lookup(env(&[
            (API_KEY_VAR, KEY),
            (API_URL_VAR, "http://127.0.0.1:3000/api"),
        ]))
        .unwrap();
        assert_eq!(config.api_url, "http://127.0.0.1:3000/api");
    }

    #[test]
    fn a_missing_or_blank_key_names_the_variable() {
        for vars in [&[][..], &[(API_KEY_VAR, "  ")][..]] {
            let err = DaytonaConfig::from_lookup(env(vars)).unwrap_err();
            assert_eq!(err, ConfigError::Missing { var: API_KEY_VAR });
            assert!(
                err.to_string().starts_with("DAYTONA_API_KEY is not set"),
                "{err}"
            );
        }
    }

    #[test]
    fn an_invalid_url_names_the_variable_and_the_problem() {
        for (url, says) in [
            ("app.daytona.io/api", "must start with https://"),
            ("https://", "has no host"),
            (
                "https://user:pw@app.daytona.io/api",
                "must not carry credentials",
            ),
            ("https://app.daytona.io/api?x=1", "query"),
        ] {
            let err = DaytonaConfig::from_lookup(env(&[(API_KEY_VAR, KEY), (API_URL_VAR, url)]))
                .unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("invalid DAYTONA_API_URL: "), "{text}");
            assert!(text.contains(says), "{url}: {text}");
            assert!(!text.contains("pw@"), "{text}");
        }
    }

    #[test]
    fn a_malformed_key_is_refused_without_being_quoted() {
        let err =
            DaytonaConfig::from_lookup(env(&[(API_KEY_VAR, "dtn key with spaces")])).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("invalid DAYTONA_API_KEY"), "{text}");
        assert!(!text.contains("key with spaces"), "{text}");
    }

    #[test]
    fn debug_of_the_config_never_shows_the_key() {
        let config = DaytonaConfig::from_lookup(env(&[(API_KEY_VAR, KEY)])).unwrap();
        let shown = format!("{config:?} {config:#?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn zero_bounds_are_refused() {
        let mut config = DaytonaConfig::new(Secret::new(KEY));
        config.output_limit = 0;
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("output_limit"));
    }
}
