//! Which sandbox providers a reaper serves, chosen by name from `REAPER_PROVIDERS`, and the
//! hosted ones built from their own settings over the caller's HTTP transport (reqwest natively,
//! `fetch` in a Worker). No I/O and no environment reads: the caller passes a lookup.
//!
//! One sweep serves every provider listed: the core's [`reaper_core::ProviderSet`] routes each
//! recorded sandbox to the provider its instance record names, and refuses a record naming a
//! provider that is not listed.

use std::sync::Arc;

use reaper_core::SandboxProvider;
use reaper_http_sandbox::HttpTransport;

/// The setting listing the providers, comma-separated (`sandboxd,daytona`).
pub const PROVIDERS_VAR: &str = "REAPER_PROVIDERS";
/// What a reaper serves when [`PROVIDERS_VAR`] is unset: its `reaper-sandboxd` daemon, as before
/// the hosted providers existed.
pub const DEFAULT_PROVIDERS: &str = "sandboxd";

/// A provider a serverless reaper can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// `reaper-sandboxd` over HTTP (local processes or Docker containers on a host). Built by
    /// the handler, which owns its URL and token settings.
    Sandboxd,
    Daytona,
    E2b,
    VercelSandbox,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 4] = [
        ProviderKind::Sandboxd,
        ProviderKind::Daytona,
        ProviderKind::E2b,
        ProviderKind::VercelSandbox,
    ];

    /// The name in [`PROVIDERS_VAR`]; for the hosted providers, also the name their instance
    /// records carry.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Sandboxd => "sandboxd",
            ProviderKind::Daytona => reaper_daytona::PROVIDER_NAME,
            ProviderKind::E2b => reaper_e2b::PROVIDER_NAME,
            ProviderKind::VercelSandbox => reaper_vercel_sandbox::PROVIDER_NAME,
        }
    }

    /// The variables this provider reads (all of them, optional ones too).
    pub fn variables(self) -> &'static [&'static str] {
        match self {
            ProviderKind::Sandboxd => &[],
            ProviderKind::Daytona => &[reaper_daytona::API_KEY_VAR, reaper_daytona::API_URL_VAR],
            ProviderKind::E2b => &[
                reaper_e2b::vars::API_KEY,
                reaper_e2b::vars::DOMAIN,
                reaper_e2b::vars::API_URL,
                reaper_e2b::vars::ENVD_URL_TEMPLATE,
            ],
            ProviderKind::VercelSandbox => &[
                reaper_vercel_sandbox::vars::TOKEN,
                reaper_vercel_sandbox::vars::OIDC_TOKEN,
                reaper_vercel_sandbox::vars::TEAM_ID,
                reaper_vercel_sandbox::vars::API_URL,
            ],
        }
    }

    /// The settings this provider reads, for messages and docs.
    pub fn settings(self) -> &'static str {
        match self {
            ProviderKind::Sandboxd => "REAPER_SANDBOXD_URL, REAPER_SANDBOXD_TOKEN",
            ProviderKind::Daytona => "DAYTONA_API_KEY, DAYTONA_API_URL",
            ProviderKind::E2b => "E2B_API_KEY, E2B_DOMAIN, E2B_API_URL",
            ProviderKind::VercelSandbox => {
                "VERCEL_TOKEN or VERCEL_OIDC_TOKEN, VERCEL_TEAM_ID, VERCEL_SANDBOX_API_URL"
            }
        }
    }
}

/// A provider list or a hosted provider's settings that cannot work. Never quotes a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProvidersError {
    #[error("{PROVIDERS_VAR} is empty: list at least one of {known}")]
    Empty { known: String },
    #[error("{PROVIDERS_VAR} names {name:?}, which is not a provider: use any of {known}")]
    Unknown { name: String, known: String },
    #[error("{PROVIDERS_VAR} names {0:?} twice: list each provider once")]
    Duplicate(String),
    #[error("the daytona provider is listed in {PROVIDERS_VAR} but cannot be built: {0}")]
    Daytona(reaper_daytona::ConfigError),
    #[error("the e2b provider is listed in {PROVIDERS_VAR} but cannot be built: {0}")]
    E2b(reaper_e2b::ConfigError),
    #[error("the vercel-sandbox provider is listed in {PROVIDERS_VAR} but cannot be built: {0}")]
    VercelSandbox(reaper_vercel_sandbox::ConfigError),
}

/// The hosted providers' variables, read once at start-up (a handler validates its settings
/// before it composes its ports). Every value is held as a secret: `Debug` shows names only.
#[derive(Clone, Default)]
pub struct HostedSettings {
    values: Vec<(&'static str, reaper_core::secret::Secret)>,
}

impl HostedSettings {
    /// Reads the variables of every provider in `kinds` through `lookup`.
    pub fn capture(kinds: &[ProviderKind], lookup: impl Fn(&str) -> Option<String>) -> Self {
        let values = kinds
            .iter()
            .flat_map(|k| k.variables())
            .filter_map(|&name| lookup(name).map(|v| (name, reaper_core::secret::Secret::new(v))))
            .collect();
        HostedSettings { values }
    }

    /// The captured value of `name`.
    pub fn get(&self, name: &str) -> Option<String> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.expose().to_string())
    }
}

impl std::fmt::Debug for HostedSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.values.iter().map(|(n, _)| n))
            .finish()
    }
}

impl PartialEq for HostedSettings {
    fn eq(&self, other: &Self) -> bool {
        self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .all(|(n, v)| other.get(n).as_deref() == Some(v.expose()))
    }
}

impl Eq for HostedSettings {}

fn known() -> String {
    ProviderKind::ALL.map(ProviderKind::as_str).join(", ")
}

/// The providers `value` (the [`PROVIDERS_VAR`] setting) lists, in order; [`DEFAULT_PROVIDERS`]
/// when it is unset.
pub fn parse(value: Option<&str>) -> Result<Vec<ProviderKind>, ProvidersError> {
    let value = value.unwrap_or(DEFAULT_PROVIDERS);
    let mut kinds = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = ProviderKind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(name))
            .ok_or_else(|| ProvidersError::Unknown {
                name: name.to_string(),
                known: known(),
            })?;
        if kinds.contains(&kind) {
            return Err(ProvidersError::Duplicate(kind.as_str().to_string()));
        }
        kinds.push(kind);
    }
    if kinds.is_empty() {
        return Err(ProvidersError::Empty { known: known() });
    }
    Ok(kinds)
}

/// Checks a hosted provider's settings without building it (a handler validating every setting
/// at start-up, before it has a transport). `Ok` for [`ProviderKind::Sandboxd`].
pub fn check_hosted(
    kind: ProviderKind,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(), ProvidersError> {
    match kind {
        ProviderKind::Sandboxd => Ok(()),
        ProviderKind::Daytona => reaper_daytona::DaytonaConfig::from_lookup(lookup)
            .map(drop)
            .map_err(ProvidersError::Daytona),
        ProviderKind::E2b => reaper_e2b::E2bConfig::from_lookup(lookup)
            .map(drop)
            .map_err(ProvidersError::E2b),
        ProviderKind::VercelSandbox => reaper_vercel_sandbox::Config::from_lookup(lookup)
            .map(drop)
            .map_err(ProvidersError::VercelSandbox),
    }
}

/// Builds a hosted provider from its own settings (read through `lookup`) over `transport`.
/// `None` for [`ProviderKind::Sandboxd`], which the handler builds.
pub fn build_hosted(
    kind: ProviderKind,
    lookup: impl Fn(&str) -> Option<String>,
    transport: Arc<dyn HttpTransport>,
) -> Result<Option<Arc<dyn SandboxProvider>>, ProvidersError> {
    Ok(Some(match kind {
        ProviderKind::Sandboxd => return Ok(None),
        ProviderKind::Daytona => {
            let config = reaper_daytona::DaytonaConfig::from_lookup(lookup)
                .map_err(ProvidersError::Daytona)?;
            Arc::new(
                reaper_daytona::DaytonaProvider::with_transport(config, transport)
                    .map_err(ProvidersError::Daytona)?,
            )
        }
        ProviderKind::E2b => {
            let config = reaper_e2b::E2bConfig::from_lookup(lookup).map_err(ProvidersError::E2b)?;
            Arc::new(
                reaper_e2b::E2bProvider::with_transport(config, transport)
                    .map_err(ProvidersError::E2b)?,
            )
        }
        ProviderKind::VercelSandbox => {
            let config = reaper_vercel_sandbox::Config::from_lookup(lookup)
                .map_err(ProvidersError::VercelSandbox)?;
            Arc::new(
                reaper_vercel_sandbox::VercelSandboxProvider::with_transport(config, transport)
                    .map_err(ProvidersError::VercelSandbox)?,
            )
        }
    }))
}
