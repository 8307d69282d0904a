//! The provider (REST over the caller's transport) and its handle (exec over a WebSocket).

use std::sync::Arc;

use reaper_core::{ExecOptions, ExecOutput, SandboxError, SandboxHandle, SandboxProvider};
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpResponse, HttpTransport, TransportError};

use crate::config::{Config, ConfigError, PROVIDER_NAME};

/// Whether this build can run commands in a sprite (the `websocket` feature).
pub const EXEC_SUPPORTED: bool = cfg!(feature = "websocket");

/// The most a REST answer may hold (a sprite object or an error is a few hundred bytes).
const MAX_RESPONSE_BYTES: usize = 256 * 1024;
/// Longest sprite name accepted.
const MAX_NAME_LEN: usize = 128;

/// Sprites over the caller's HTTP transport.
#[derive(Clone)]
pub struct SpritesProvider {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    transport: Arc<dyn HttpTransport>,
}

impl std::fmt::Debug for SpritesProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpritesProvider")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl SpritesProvider {
    /// A provider over the native reqwest transport.
    #[cfg(feature = "native")]
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        let transport = reaper_http_sandbox::ReqwestTransport::new()
            .map_err(|_| ConfigError::BaseUrl(config.base_url.clone()))?;
        Self::with_transport(config, Arc::new(transport))
    }

    /// A provider over `transport` (a Worker's fetch, a test's).
    pub fn with_transport(
        config: Config,
        transport: Arc<dyn HttpTransport>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(SpritesProvider {
            inner: Arc::new(Inner { config, transport }),
        })
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A handle to sprite `name` without looking it up.
    pub fn handle(&self, name: &str) -> Result<SpritesSandbox, SandboxError> {
        validate_name(name)?;
        Ok(SpritesSandbox {
            inner: self.inner.clone(),
            name: name.to_string(),
        })
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxProvider for SpritesProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        validate_name(id)?;
        let response = self.inner.call(HttpMethod::Get, id).await?;
        match response.status {
            200 => {
                let sprite: SpriteInfo = serde_json::from_slice(&response.body).map_err(|e| {
                    SandboxError::Other(format!(
                        "Sprites answered GET /v1/sprites/{id} with a body that is not a sprite: {e}"
                    ))
                })?;
                if sprite.name != id {
                    return Err(SandboxError::Other(format!(
                        "Sprites answered GET /v1/sprites/{id} with sprite {:?}",
                        sprite.name
                    )));
                }
                // cold, warm and running are all live: a cold sprite wakes on the next command.
                Ok(Some(Arc::new(self.handle(id)?)))
            }
            404 if is_not_found(&response) => Ok(None),
            _ => Err(self.inner.error(&response, "look up", id)),
        }
    }

    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        validate_name(id)?;
        let response = self.inner.call(HttpMethod::Delete, id).await?;
        match response.status {
            200 | 202 | 204 => Ok(()),
            404 if is_not_found(&response) => Ok(()),
            _ => Err(self.inner.error(&response, "delete", id)),
        }
    }
}

/// The fields of a sprite the provider reads.
#[derive(serde::Deserialize)]
struct SpriteInfo {
    name: String,
}

/// A live sprite.
#[derive(Clone)]
pub struct SpritesSandbox {
    // Read only by the WebSocket exec; without it a sprite can be looked up and deleted only.
    #[cfg_attr(not(feature = "websocket"), allow(dead_code))]
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: String,
}

impl std::fmt::Debug for SpritesSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpritesSandbox")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxHandle for SpritesSandbox {
    fn id(&self) -> &str {
        &self.name
    }

    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        #[cfg(feature = "websocket")]
        {
            crate::exec::run(self, command, options).await
        }
        #[cfg(not(feature = "websocket"))]
        {
            let _ = (command, options);
            Err(SandboxError::Refused(ConfigError::NoExec.to_string()))
        }
    }
}

impl Inner {
    pub(crate) fn sprite_url(&self, name: &str) -> String {
        format!("{}/v1/sprites/{name}", self.config.base())
    }

    pub(crate) fn authorization(&self) -> String {
        format!("Bearer {}", self.config.token.expose())
    }

    async fn call(&self, method: HttpMethod, name: &str) -> Result<HttpResponse, SandboxError> {
        let request = HttpRequest {
            method,
            url: self.sprite_url(name),
            headers: vec![
                ("authorization".into(), self.authorization()),
                ("accept".into(), "application/json".into()),
            ],
            body: None,
            timeout_ms: self.config.request_timeout_ms,
            max_response_bytes: MAX_RESPONSE_BYTES,
        };
        self.transport
            .send(request)
            .await
            .map_err(|e| transport_error(&e))
    }

    /// An answer that is neither success nor "gone", as the error that keeps the record.
    pub(crate) fn error(&self, response: &HttpResponse, what: &str, name: &str) -> SandboxError {
        status_error(response.status, &detail(&response.body), what, name)
    }
}

/// The error of a refused request, by status.
pub(crate) fn status_error(status: u16, detail: &str, what: &str, name: &str) -> SandboxError {
    let said = format!("Sprites answered {status} to {what} sprite {name}: {detail}");
    match status {
        429 | 500..=599 => SandboxError::Unreachable(said),
        401 | 403 => SandboxError::Refused(format!(
            "{said} (check SPRITES_TOKEN: it must be a token of the organization owning the sprite)"
        )),
        404 => SandboxError::Refused(format!(
            "{said} (a 404 that does not say the sprite was not found: check SPRITES_API_URL; the record is kept)"
        )),
        _ => SandboxError::Refused(said),
    }
}

pub(crate) fn transport_error(e: &TransportError) -> SandboxError {
    SandboxError::Unreachable(format!("Sprites: {e}"))
}

/// Whether a 404's body is Sprites' own "not found" error (`{"error": "sprite not found"}`),
/// not a proxy's page or an unknown route.
pub(crate) fn is_not_found(response: &HttpResponse) -> bool {
    body_says_not_found(&response.body)
}

pub(crate) fn body_says_not_found(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: String,
    }
    serde_json::from_slice::<ErrorBody>(body)
        .map(|b| {
            let message = b.error.to_ascii_lowercase();
            message.contains("not found") && message.contains("sprite")
        })
        .unwrap_or(false)
}

/// The error message of a body, shortened, for errors.
pub(crate) fn detail(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: String,
    }
    let text = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(b) => b.error,
        Err(_) if body.is_empty() => "(no body)".into(),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    text.chars().take(300).collect()
}

/// A sprite name fit for a URL path: 1–128 characters of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<(), SandboxError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "{:?} is not a sprite name (1-{MAX_NAME_LEN} characters of letters, digits, '.', '_', '-')",
            name.chars().take(80).collect::<String>()
        )))
    }
}
