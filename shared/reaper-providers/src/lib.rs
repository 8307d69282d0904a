//! The one registry of sandbox providers every handler uses: which providers exist, the names
//! each answers to (its own and the name the app framework records), which handler can serve
//! it, and how the hosted ones (and `reaper-sandboxd`'s HTTP client) are built from their
//! settings over the caller's HTTP transport (reqwest natively, `fetch` in a Worker). No I/O and
//! no environment reads: the caller passes a lookup.
//!
//! | name in `REAPER_PROVIDERS` | also answers to (records) | provider | served by |
//! |---|---|---|---|
//! | `local` | `local-process` | `reaper-local` | the CLI, `reaper-sandboxd` |
//! | `docker` | | `reaper-docker` | the CLI, `reaper-sandboxd` |
//! | `sandboxd` | | `reaper-http-sandbox` | every handler |
//! | `daytona` | | `reaper-daytona` | every handler |
//! | `e2b` | | `reaper-e2b` | every handler |
//! | `vercel` | `vercel-sandbox` | `reaper-vercel-sandbox` | every handler |
//! | `sprites` | | `reaper-sprites` | the CLI, Lambda, Vercel (exec needs a WebSocket: not the Worker) |
//! | `cloudflare` | | `reaper-http-sandbox` through the Sandbox bridge Worker | every handler |
//!
//! One sweep serves every provider listed: the core's [`reaper_core::ProviderSet`] routes each
//! recorded sandbox to the provider its instance record names, and refuses a record naming a
//! provider that is not listed.
#![warn(missing_docs)]

use std::sync::Arc;

use reaper_core::SandboxProvider;
use reaper_http_sandbox::HttpTransport;

/// The setting listing the providers, comma-separated (`sandboxd,daytona`).
pub const PROVIDERS_VAR: &str = "REAPER_PROVIDERS";
/// What a reaper serves when [`PROVIDERS_VAR`] is unset: its `reaper-sandboxd` daemon, as before
/// the hosted providers existed.
pub const DEFAULT_PROVIDERS: &str = "sandboxd";

/// The settings of `reaper-sandboxd`'s HTTP client, the same in every handler.
pub const SANDBOXD_URL_VAR: &str = "REAPER_SANDBOXD_URL";
/// The daemon's bearer token (a secret).
pub const SANDBOXD_TOKEN_VAR: &str = "REAPER_SANDBOXD_TOKEN";

/// The URL of the Cloudflare Sandbox bridge Worker (`handlers/reaper-cloudflare/sandbox-bridge`),
/// which serves sandboxd's API in front of a `@cloudflare/sandbox` Durable Object binding.
pub const CLOUDFLARE_BRIDGE_URL_VAR: &str = "CLOUDFLARE_SANDBOX_BRIDGE_URL";
/// The bridge's bearer token (its `BRIDGE_TOKEN` secret).
pub const CLOUDFLARE_BRIDGE_TOKEN_VAR: &str = "CLOUDFLARE_SANDBOX_BRIDGE_TOKEN";
/// The name records of Cloudflare sandboxes carry (the app framework's Cloudflare provider).
pub const CLOUDFLARE_PROVIDER_NAME: &str = "cloudflare";

/// A sandbox provider some handler can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Directories and processes on this machine (`reaper-local`): the CLI and sandboxd only.
    Local,
    /// Containers on a Docker daemon reached through its socket (`reaper-docker`): the CLI and
    /// sandboxd only.
    Docker,
    /// `reaper-sandboxd` over HTTP (local processes or Docker containers on a host).
    Sandboxd,
    /// Daytona's hosted sandboxes over its HTTP API (`reaper-daytona`).
    Daytona,
    /// E2B's hosted sandboxes over its HTTP APIs (`reaper-e2b`).
    E2b,
    /// Vercel Sandbox over its HTTP API (`reaper-vercel-sandbox`).
    Vercel,
    /// Sprites (sprites.dev): REST over the handler's transport, exec over a WebSocket.
    Sprites,
    /// Cloudflare Sandbox, reached through the bridge Worker with sandboxd's HTTP client.
    Cloudflare,
}

/// Where a reaper runs, which decides the providers it can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// A process on a machine (the CLI, `reaper watch`): every provider.
    Native,
    /// Lambda, Vercel, a Worker: no processes, no sockets of the machine; HTTP providers only.
    Serverless,
}

impl ProviderKind {
    /// Every provider, in the order errors list them.
    pub const ALL: [ProviderKind; 8] = [
        ProviderKind::Local,
        ProviderKind::Docker,
        ProviderKind::Sandboxd,
        ProviderKind::Daytona,
        ProviderKind::E2b,
        ProviderKind::Vercel,
        ProviderKind::Sprites,
        ProviderKind::Cloudflare,
    ];

    /// The name in [`PROVIDERS_VAR`], and the name this reaper's own instance records carry.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::Docker => "docker",
            ProviderKind::Sandboxd => "sandboxd",
            ProviderKind::Daytona => reaper_daytona::PROVIDER_NAME,
            ProviderKind::E2b => reaper_e2b::PROVIDER_NAME,
            ProviderKind::Vercel => reaper_vercel_sandbox::PROVIDER_NAME,
            ProviderKind::Sprites => reaper_sprites::PROVIDER_NAME,
            ProviderKind::Cloudflare => CLOUDFLARE_PROVIDER_NAME,
        }
    }

    /// Other names records of this provider carry: the app framework's (TanStack AI records
    /// `local-process` for its local provider) and this reaper's earlier ones (`vercel-sandbox`).
    /// Accepted in [`PROVIDERS_VAR`] too.
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            ProviderKind::Local => &["local-process"],
            ProviderKind::Vercel => &[reaper_vercel_sandbox::LEGACY_PROVIDER_NAME],
            _ => &[],
        }
    }

    /// Every name a record of this provider may carry: [`as_str`](Self::as_str), then the
    /// [`aliases`](Self::aliases).
    pub fn record_names(self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.as_str()).chain(self.aliases().iter().copied())
    }

    /// The kind `name` (a canonical name or an alias, any case) denotes.
    pub fn from_name(name: &str) -> Option<ProviderKind> {
        ProviderKind::ALL.into_iter().find(|k| {
            k.record_names()
                .any(|n| n.eq_ignore_ascii_case(name.trim()))
        })
    }

    /// Whether a reaper on `host` can serve this provider.
    pub fn available_on(self, host: Host) -> bool {
        match self {
            ProviderKind::Local | ProviderKind::Docker => host == Host::Native,
            _ => true,
        }
    }

    /// The variables this provider reads (all of them, optional ones too). The local and Docker
    /// providers take the CLI's flags instead.
    pub fn variables(self) -> &'static [&'static str] {
        match self {
            ProviderKind::Local | ProviderKind::Docker => &[],
            ProviderKind::Sandboxd => &[],
            ProviderKind::Daytona => &[reaper_daytona::API_KEY_VAR, reaper_daytona::API_URL_VAR],
            ProviderKind::E2b => &[
                reaper_e2b::vars::API_KEY,
                reaper_e2b::vars::DOMAIN,
                reaper_e2b::vars::API_URL,
                reaper_e2b::vars::ENVD_URL_TEMPLATE,
            ],
            ProviderKind::Vercel => &[
                reaper_vercel_sandbox::vars::TOKEN,
                reaper_vercel_sandbox::vars::OIDC_TOKEN,
                reaper_vercel_sandbox::vars::TEAM_ID,
                reaper_vercel_sandbox::vars::PROJECT_ID,
                reaper_vercel_sandbox::vars::API_URL,
                reaper_vercel_sandbox::vars::DESTROY,
            ],
            ProviderKind::Sprites => &[
                reaper_sprites::vars::TOKEN,
                reaper_sprites::vars::TOKEN_ALT,
                reaper_sprites::vars::API_URL,
            ],
            ProviderKind::Cloudflare => &[CLOUDFLARE_BRIDGE_URL_VAR, CLOUDFLARE_BRIDGE_TOKEN_VAR],
        }
    }

    /// The settings this provider reads, for messages and docs.
    pub fn settings(self) -> &'static str {
        match self {
            ProviderKind::Local => "--sandboxes (REAPER_SANDBOXES)",
            ProviderKind::Docker => "--docker-socket (DOCKER_HOST), --docker-name",
            ProviderKind::Sandboxd => "REAPER_SANDBOXD_URL, REAPER_SANDBOXD_TOKEN",
            ProviderKind::Daytona => "DAYTONA_API_KEY, DAYTONA_API_URL",
            ProviderKind::E2b => "E2B_API_KEY, E2B_DOMAIN, E2B_API_URL",
            ProviderKind::Vercel => {
                "VERCEL_TOKEN or VERCEL_OIDC_TOKEN, VERCEL_PROJECT_ID, VERCEL_TEAM_ID, \
                 VERCEL_SANDBOX_API_URL, VERCEL_SANDBOX_DESTROY"
            }
            ProviderKind::Sprites => "SPRITES_TOKEN (or SPRITE_TOKEN), SPRITES_API_URL",
            ProviderKind::Cloudflare => {
                "CLOUDFLARE_SANDBOX_BRIDGE_URL, CLOUDFLARE_SANDBOX_BRIDGE_TOKEN"
            }
        }
    }
}

/// A provider list or a hosted provider's settings that cannot work. Never quotes a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProvidersError {
    /// The list names no provider.
    #[error("{PROVIDERS_VAR} is empty: list at least one of {known}")]
    Empty {
        /// The providers this host can serve, for the message.
        known: String,
    },
    /// A name that is no provider.
    #[error("{PROVIDERS_VAR} names {name:?}, which is not a provider: use any of {known}")]
    Unknown {
        /// The name as given.
        name: String,
        /// The providers this host can serve, for the message.
        known: String,
    },
    /// A provider named twice (also by two of its names).
    #[error("{PROVIDERS_VAR} names {0:?} twice: list each provider once")]
    Duplicate(String),
    /// A provider this host cannot serve (local or docker in a serverless handler).
    #[error(
        "{PROVIDERS_VAR} names {name:?}, which runs only where the reaper runs on the machine \
         (the CLI, reaper-sandboxd): a serverless reaper reaches it through sandboxd; use any of \
         {known}"
    )]
    NotHere {
        /// The name as given.
        name: String,
        /// The providers this host can serve, for the message.
        known: String,
    },
    /// sandboxd is listed, but its URL or token is missing or malformed.
    #[error(
        "the sandboxd provider is listed in {PROVIDERS_VAR} but cannot be built: {0} (set \
         {SANDBOXD_URL_VAR} to the daemon's URL and {SANDBOXD_TOKEN_VAR} to its token)"
    )]
    Sandboxd(String),
    /// Daytona is listed, but its settings do not work (the key is missing or malformed).
    #[error("the daytona provider is listed in {PROVIDERS_VAR} but cannot be built: {0}")]
    Daytona(reaper_daytona::ConfigError),
    /// E2B is listed, but its settings do not work.
    #[error("the e2b provider is listed in {PROVIDERS_VAR} but cannot be built: {0}")]
    E2b(reaper_e2b::ConfigError),
    /// Vercel Sandbox is listed, but its settings do not work.
    #[error("the vercel provider is listed in {PROVIDERS_VAR} but cannot be built: {0}")]
    Vercel(reaper_vercel_sandbox::ConfigError),
    /// Sprites is listed, but its settings do not work.
    #[error("the sprites provider is listed in {PROVIDERS_VAR} but cannot be built: {0}")]
    Sprites(reaper_sprites::ConfigError),
    /// Cloudflare Sandbox is listed, but the bridge's settings are missing or do not work.
    #[error(
        "the cloudflare provider is listed in {PROVIDERS_VAR} but cannot be built: {0} (set \
         {CLOUDFLARE_BRIDGE_URL_VAR} to the Sandbox bridge Worker's URL and \
         {CLOUDFLARE_BRIDGE_TOKEN_VAR} to its BRIDGE_TOKEN)"
    )]
    Cloudflare(String),
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

fn known(host: Host) -> String {
    ProviderKind::ALL
        .into_iter()
        .filter(|k| k.available_on(host))
        .map(ProviderKind::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The providers `value` (the serverless handlers' [`PROVIDERS_VAR`] setting) lists, in order;
/// [`DEFAULT_PROVIDERS`] when it is unset.
pub fn parse(value: Option<&str>) -> Result<Vec<ProviderKind>, ProvidersError> {
    parse_names(
        value.unwrap_or(DEFAULT_PROVIDERS).split(','),
        Host::Serverless,
    )
}

/// The providers `names` list (each a canonical name or an alias, any case, once), in order,
/// for a reaper on `host`.
pub fn parse_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
    host: Host,
) -> Result<Vec<ProviderKind>, ProvidersError> {
    let mut kinds = Vec::new();
    for name in names.into_iter().map(str::trim).filter(|n| !n.is_empty()) {
        let kind = ProviderKind::from_name(name).ok_or_else(|| ProvidersError::Unknown {
            name: name.to_string(),
            known: known(host),
        })?;
        if !kind.available_on(host) {
            return Err(ProvidersError::NotHere {
                name: name.to_string(),
                known: known(host),
            });
        }
        if kinds.contains(&kind) {
            return Err(ProvidersError::Duplicate(kind.as_str().to_string()));
        }
        kinds.push(kind);
    }
    if kinds.is_empty() {
        return Err(ProvidersError::Empty { known: known(host) });
    }
    Ok(kinds)
}

/// Checks a hosted provider's settings without building it (a handler validating every setting
/// at start-up, before it has a transport). `Ok` for the providers the handler builds itself
/// ([`ProviderKind::Sandboxd`], [`ProviderKind::Local`], [`ProviderKind::Docker`]).
pub fn check_hosted(
    kind: ProviderKind,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(), ProvidersError> {
    match kind {
        ProviderKind::Sandboxd | ProviderKind::Local | ProviderKind::Docker => Ok(()),
        ProviderKind::Daytona => reaper_daytona::DaytonaConfig::from_lookup(lookup)
            .map(drop)
            .map_err(ProvidersError::Daytona),
        ProviderKind::E2b => reaper_e2b::E2bConfig::from_lookup(lookup)
            .map(drop)
            .map_err(ProvidersError::E2b),
        ProviderKind::Vercel => reaper_vercel_sandbox::Config::from_lookup(lookup)
            .map(drop)
            .map_err(ProvidersError::Vercel),
        ProviderKind::Sprites => sprites_config(lookup).map(drop),
        ProviderKind::Cloudflare => cloudflare_config(lookup).map(drop),
    }
}

/// Builds a hosted provider from its own settings (read through `lookup`) over `transport`.
/// `None` for the providers the handler builds itself (sandboxd, whose name a serverless handler
/// may configure, and the local and Docker providers; see [`build_sandboxd`]).
pub fn build_hosted(
    kind: ProviderKind,
    lookup: impl Fn(&str) -> Option<String>,
    transport: Arc<dyn HttpTransport>,
) -> Result<Option<Arc<dyn SandboxProvider>>, ProvidersError> {
    Ok(Some(match kind {
        ProviderKind::Sandboxd | ProviderKind::Local | ProviderKind::Docker => return Ok(None),
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
        ProviderKind::Vercel => {
            let config = reaper_vercel_sandbox::Config::from_lookup(lookup)
                .map_err(ProvidersError::Vercel)?;
            Arc::new(
                reaper_vercel_sandbox::VercelSandboxProvider::with_transport(config, transport)
                    .map_err(ProvidersError::Vercel)?,
            )
        }
        ProviderKind::Sprites => Arc::new(
            reaper_sprites::SpritesProvider::with_transport(sprites_config(lookup)?, transport)
                .map_err(ProvidersError::Sprites)?,
        ),
        ProviderKind::Cloudflare => Arc::new(
            reaper_http_sandbox::HttpSandboxProvider::with_transport(
                cloudflare_config(lookup)?,
                transport,
            )
            .map_err(|e| ProvidersError::Cloudflare(e.to_string()))?,
        ),
    }))
}

/// Sprites' settings; refused where this build cannot run a command in a sprite (the Worker
/// has no WebSocket client here), since such a reaper could never read a journal.
fn sprites_config(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<reaper_sprites::Config, ProvidersError> {
    let config = reaper_sprites::Config::from_lookup(lookup).map_err(ProvidersError::Sprites)?;
    if !reaper_sprites::EXEC_SUPPORTED {
        return Err(ProvidersError::Sprites(reaper_sprites::ConfigError::NoExec));
    }
    Ok(config)
}

/// The bridge's settings: sandboxd's HTTP client recorded as `cloudflare`.
fn cloudflare_config(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<reaper_http_sandbox::HttpProviderConfig, ProvidersError> {
    let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let url = get(CLOUDFLARE_BRIDGE_URL_VAR).ok_or_else(|| {
        ProvidersError::Cloudflare(format!("{CLOUDFLARE_BRIDGE_URL_VAR} is not set"))
    })?;
    // Empty is unset (templates spell an unset value empty); anything else follows the one
    // token rule the bridge applies too, named here before any request instead of trimmed.
    let token = reaper_core::settings::read_token(
        CLOUDFLARE_BRIDGE_TOKEN_VAR,
        lookup(CLOUDFLARE_BRIDGE_TOKEN_VAR),
    )
    .map_err(|e| ProvidersError::Cloudflare(e.to_string()))?
    .ok_or_else(|| {
        ProvidersError::Cloudflare(format!("{CLOUDFLARE_BRIDGE_TOKEN_VAR} is not set"))
    })?;
    let mut config = reaper_http_sandbox::HttpProviderConfig::new(url.trim(), &token);
    config.name = CLOUDFLARE_PROVIDER_NAME.into();
    Ok(config)
}

/// `reaper-sandboxd`'s HTTP client from [`SANDBOXD_URL_VAR`] and [`SANDBOXD_TOKEN_VAR`] (read
/// through `lookup`), recorded as `sandboxd`: what the CLI builds for `--provider sandboxd`
/// with the serverless handlers' setting names.
pub fn build_sandboxd(
    lookup: impl Fn(&str) -> Option<String>,
    transport: Arc<dyn HttpTransport>,
) -> Result<Arc<dyn SandboxProvider>, ProvidersError> {
    let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let url = get(SANDBOXD_URL_VAR)
        .ok_or_else(|| ProvidersError::Sandboxd(format!("{SANDBOXD_URL_VAR} is not set")))?;
    let token = get(SANDBOXD_TOKEN_VAR)
        .ok_or_else(|| ProvidersError::Sandboxd(format!("{SANDBOXD_TOKEN_VAR} is not set")))?;
    // The rule the daemon itself applies: a padded or short token is named here, before any
    // request, instead of trimmed into a value the operator never wrote.
    reaper_core::settings::check_token(SANDBOXD_TOKEN_VAR, &token)
        .map_err(|e| ProvidersError::Sandboxd(e.to_string()))?;
    let config = reaper_http_sandbox::HttpProviderConfig::new(url.trim(), &token);
    let provider = reaper_http_sandbox::HttpSandboxProvider::with_transport(config, transport)
        .map_err(|e| ProvidersError::Sandboxd(e.to_string()))?;
    Ok(Arc::new(provider))
}

/// `provider` answering also to the other names records of `kind` carry
/// ([`ProviderKind::aliases`]), unless it already does: what makes a record the framework wrote
/// (`local-process`) reach this reaper's provider of that kind.
pub fn with_record_names(
    kind: ProviderKind,
    provider: Arc<dyn SandboxProvider>,
) -> Arc<dyn SandboxProvider> {
    let missing: Vec<&'static str> = kind
        .aliases()
        .iter()
        .copied()
        .filter(|a| !provider.serves(a))
        .collect();
    if missing.is_empty() {
        return provider;
    }
    Arc::new(Aliased {
        inner: provider,
        aliases: missing,
    })
}

/// A provider that also serves records under other names. The id is handed on unchanged:
/// an alias names the same provider, so its ids are this provider's ids.
struct Aliased {
    inner: Arc<dyn SandboxProvider>,
    aliases: Vec<&'static str>,
}

impl std::fmt::Debug for Aliased {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aliased")
            .field("name", &self.inner.name())
            .field("aliases", &self.aliases)
            .finish()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxProvider for Aliased {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn serves(&self, name: &str) -> bool {
        self.inner.serves(name) || self.aliases.contains(&name)
    }

    async fn resume(
        &self,
        id: &str,
    ) -> Result<Option<Arc<dyn reaper_core::SandboxHandle>>, reaper_core::SandboxError> {
        self.inner.resume(id).await
    }

    async fn destroy(&self, id: &str) -> Result<(), reaper_core::SandboxError> {
        self.inner.destroy(id).await
    }

    // The stopped-sandbox capability: the provided `*_recorded` methods check `serves` (which
    // counts the aliases) and land here.
    async fn state(
        &self,
        id: &str,
    ) -> Result<Option<reaper_core::SandboxState>, reaper_core::SandboxError> {
        self.inner.state(id).await
    }

    async fn start_for_read(&self, id: &str) -> Result<(), reaper_core::SandboxError> {
        self.inner.start_for_read(id).await
    }

    async fn restore(&self, id: &str) -> Result<(), reaper_core::SandboxError> {
        self.inner.restore(id).await
    }

    async fn resume_recorded(
        &self,
        name: &str,
        id: &str,
    ) -> Result<Option<Arc<dyn reaper_core::SandboxHandle>>, reaper_core::SandboxError> {
        if self.inner.serves(name) {
            return self.inner.resume_recorded(name, id).await;
        }
        if !self.aliases.contains(&name) {
            return Err(reaper_core::ports::not_served(self.name(), name));
        }
        self.inner.resume(id).await
    }

    async fn destroy_recorded(
        &self,
        name: &str,
        id: &str,
    ) -> Result<(), reaper_core::SandboxError> {
        if self.inner.serves(name) {
            return self.inner.destroy_recorded(name, id).await;
        }
        if !self.aliases.contains(&name) {
            return Err(reaper_core::ports::not_served(self.name(), name));
        }
        self.inner.destroy(id).await
    }
}

/// The request rate limit a provider documents for the API calls a sweep makes (lookups, exec,
/// destroy), so the sweep's sizing keeps under it ([`reaper_core::concurrency`]). `None`: no
/// published limit (self-hosted sandboxd and local providers; Vercel Sandbox documents only a
/// vCPU allocation rate, which a sweep never uses; Sprites and Cloudflare Sandbox publish none).
///
/// - Daytona: 50,000 authenticated requests per 60 s (<https://www.daytona.io/docs/en/rate-limits>).
/// - E2B: 40,000 sandbox operations per 60 s per IP, the stricter of its two API limits per
///   second (<https://e2b.dev/docs/sandbox/rate-limits>).
pub fn documented_rate_limit(kind: ProviderKind) -> Option<reaper_core::concurrency::RateLimit> {
    use reaper_core::concurrency::RateLimit;
    match kind {
        ProviderKind::Daytona => Some(RateLimit::new(kind.as_str(), 50_000, 60_000)),
        ProviderKind::E2b => Some(RateLimit::new(kind.as_str(), 40_000, 60_000)),
        ProviderKind::Local
        | ProviderKind::Docker
        | ProviderKind::Sandboxd
        | ProviderKind::Vercel
        | ProviderKind::Sprites
        | ProviderKind::Cloudflare => None,
    }
}

/// The strictest documented rate limit among the providers one sweep serves: the sweep's
/// requests go to any of them, so the strictest bounds them all.
pub fn strictest_rate_limit(kinds: &[ProviderKind]) -> Option<reaper_core::concurrency::RateLimit> {
    kinds
        .iter()
        .filter_map(|&k| documented_rate_limit(k))
        .reduce(|a, b| if b.stricter_than(&a) { b } else { a })
}

#[cfg(test)]
mod rate_limit_tests {
    use super::*;

    #[test]
    fn the_strictest_documented_rate_limit_among_the_served_providers_bounds_the_sweep() {
        assert_eq!(
            strictest_rate_limit(&[ProviderKind::Local, ProviderKind::Sandboxd]),
            None
        );
        let both = strictest_rate_limit(&[ProviderKind::Daytona, ProviderKind::E2b]).unwrap();
        assert_eq!((both.provider.as_str(), both.requests), ("e2b", 40_000));
        let one = strictest_rate_limit(&[ProviderKind::Vercel, ProviderKind::Daytona]).unwrap();
        assert_eq!(one.provider, "daytona");
    }
}

#[cfg(test)]
mod bridge_token_tests {
    use super::*;

    /// Values every binary refuses: too short, a trailing newline, a space inside.
    const BAD: [&str; 3] = [
        "short-token",
        "0123456789abcdef-token\n",
        "0123456789abcdef token",
    ];

    fn bridge(token: Option<&'static str>) -> impl Fn(&str) -> Option<String> {
        move |name| match name {
            CLOUDFLARE_BRIDGE_URL_VAR => Some("https://bridge.example.workers.dev".into()),
            CLOUDFLARE_BRIDGE_TOKEN_VAR => token.map(String::from),
            _ => None,
        }
    }

    #[test]
    fn a_bad_bridge_token_is_refused_with_the_sentence_every_binary_gives() {
        for bad in BAD {
            let e = check_hosted(ProviderKind::Cloudflare, bridge(Some(bad))).unwrap_err();
            let sentence = reaper_core::settings::check_token(CLOUDFLARE_BRIDGE_TOKEN_VAR, bad)
                .unwrap_err()
                .to_string();
            assert_eq!(e, ProvidersError::Cloudflare(sentence), "{bad:?}");
            assert!(!e.to_string().contains(bad.trim()), "never the value: {e}");
        }
        assert!(check_hosted(
            ProviderKind::Cloudflare,
            bridge(Some("0123456789abcdef-token"))
        )
        .is_ok());
    }

    #[test]
    fn an_empty_bridge_token_is_unset_and_says_so() {
        for unset in [None, Some("")] {
            let e = check_hosted(ProviderKind::Cloudflare, bridge(unset)).unwrap_err();
            assert_eq!(
                e,
                ProvidersError::Cloudflare(format!("{CLOUDFLARE_BRIDGE_TOKEN_VAR} is not set"))
            );
        }
    }

    #[test]
    fn the_bridge_settings_are_registered_and_the_token_follows_the_token_rule() {
        use reaper_core::settings::{setting, Binary, Value};
        let token = setting(CLOUDFLARE_BRIDGE_TOKEN_VAR).expect("registered");
        assert_eq!(token.value, Value::Token);
        let url = setting(CLOUDFLARE_BRIDGE_URL_VAR).expect("registered");
        for s in [token, url] {
            // Every handler serves the cloudflare provider, so every sweeper reads them.
            for binary in [Binary::Cli, Binary::Lambda, Binary::Vercel, Binary::Worker] {
                assert!(s.is_read_by(binary), "{} by {binary:?}", s.name);
            }
            assert!(ProviderKind::Cloudflare.variables().contains(&s.name));
        }
    }
}
