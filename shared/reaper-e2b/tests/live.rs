//! The provider conformance suite against the real E2B, when `REAPER_LIVE_E2B_API_KEY` holds a
//! team API key (`REAPER_LIVE_E2B_TEMPLATE` picks the template, `base` by default;
//! `REAPER_LIVE_E2B_API_URL` another control plane). Without the key every case skips and
//! prints why. Each case creates its sandboxes with `POST /sandboxes` (a 5-minute timeout, so
//! one a failed case leaves behind ends by itself) and destroys them; a failed destroy cannot be
//! injected on the real service, so that case skips.
//!
//! `cargo test -p reaper-e2b --test live -- --test-threads 1`

use std::sync::Arc;

use reaper_core::secret::Secret;
use reaper_core::SandboxProvider;
use reaper_e2b::{E2bConfig, E2bProvider};
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpTransport, ReqwestTransport};
use reaper_testkit::conformance::provider::ProviderFixture;
use reaper_testkit::live;

const OUTPUT_LIMIT: usize = 4096;

struct LiveE2b {
    provider: E2bProvider,
    key: String,
    api: String,
    template: String,
    transport: ReqwestTransport,
}

impl LiveE2b {
    async fn from_env() -> Option<Arc<LiveE2b>> {
        let key = live::credential("REAPER_LIVE_E2B_API_KEY", "E2B")?;
        let mut config = E2bConfig::new(Secret::new(key.clone()));
        config.api_url = live::setting("REAPER_LIVE_E2B_API_URL", &config.api_url);
        config.output_limit = OUTPUT_LIMIT;
        let api = config.api_url.trim_end_matches('/').to_string();
        let provider = E2bProvider::new(config).expect("a valid live E2B config");
        Some(Arc::new(LiveE2b {
            provider,
            key,
            api,
            template: live::setting("REAPER_LIVE_E2B_TEMPLATE", "base"),
            transport: ReqwestTransport::new().expect("an HTTP client"),
        }))
    }
}

#[async_trait::async_trait]
impl ProviderFixture for LiveE2b {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        let body = serde_json::json!({"templateID": self.template, "timeout": 300});
        let response = self
            .transport
            .send(HttpRequest {
                method: HttpMethod::Post,
                url: format!("{}/sandboxes", self.api),
                headers: vec![("x-api-key".into(), self.key.clone())],
                body: Some(body.to_string().into_bytes()),
                timeout_ms: 120_000,
                max_response_bytes: 1024 * 1024,
            })
            .await
            .map_err(|e| format!("create an E2B sandbox: {e}"))?;
        if response.status != 201 {
            return Err(format!(
                "create an E2B sandbox: HTTP {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            ));
        }
        let created: serde_json::Value =
            serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
        created["sandboxID"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "the create answer has no sandboxID".to_string())
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        "i0000000000000000000".into()
    }

    async fn break_destroy(&self, _id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        Ok(None)
    }

    async fn heal_destroy(&self, _id: &str) -> Result<(), String> {
        Ok(())
    }
}

reaper_testkit::provider_conformance!(LiveE2b::from_env());
