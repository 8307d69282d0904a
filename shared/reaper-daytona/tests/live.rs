//! The provider conformance suite against the real Daytona, when `REAPER_LIVE_DAYTONA_API_KEY`
//! holds an API key (and `REAPER_LIVE_DAYTONA_API_URL` another API than Daytona Cloud's, if
//! needed). Without the key every case skips and prints why. Each case creates its sandboxes
//! with `POST /sandbox` (auto-stop 5 minutes, auto-delete at once when stopped, so one a failed
//! case leaves behind does not bill for long) and destroys them; a failed destroy cannot be
//! injected on the real service, so that case skips.
//!
//! `cargo test -p reaper-daytona --test live -- --test-threads 1`

use std::sync::Arc;
use std::time::Duration;

use reaper_core::secret::Secret;
use reaper_core::SandboxProvider;
use reaper_daytona::{DaytonaConfig, DaytonaProvider};
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpTransport, ReqwestTransport};
use reaper_testkit::conformance::provider::ProviderFixture;
use reaper_testkit::live;

const OUTPUT_LIMIT: usize = 4096;

struct LiveDaytona {
    provider: DaytonaProvider,
    key: String,
    api: String,
    transport: ReqwestTransport,
}

impl LiveDaytona {
    async fn from_env() -> Option<Arc<LiveDaytona>> {
        let key = live::credential("REAPER_LIVE_DAYTONA_API_KEY", "Daytona")?;
        let mut config = DaytonaConfig::new(Secret::new(key.clone()));
        config.api_url = live::setting("REAPER_LIVE_DAYTONA_API_URL", &config.api_url);
        config.output_limit = OUTPUT_LIMIT;
        let api = config.api_url.trim_end_matches('/').to_string();
        let provider = DaytonaProvider::new(config).expect("a valid live Daytona config");
        Some(Arc::new(LiveDaytona {
            provider,
            key,
            api,
            transport: ReqwestTransport::new().expect("an HTTP client"),
        }))
    }
}

#[async_trait::async_trait]
impl ProviderFixture for LiveDaytona {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        let body = serde_json::json!({"autoStopInterval": 5, "autoDeleteInterval": 0});
        let response = self
            .transport
            .send(HttpRequest {
                method: HttpMethod::Post,
                url: format!("{}/sandbox", self.api),
                headers: vec![("authorization".into(), format!("Bearer {}", self.key))],
                body: Some(body.to_string().into_bytes()),
                timeout_ms: 120_000,
                max_response_bytes: 1024 * 1024,
            })
            .await
            .map_err(|e| format!("create a Daytona sandbox: {e}"))?;
        if !(200..300).contains(&response.status) {
            return Err(format!(
                "create a Daytona sandbox: HTTP {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            ));
        }
        let created: serde_json::Value =
            serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
        let id = created["id"]
            .as_str()
            .ok_or("the create answer has no id")?
            .to_string();
        // Created sandboxes start by themselves; a hang guard only, in minutes.
        for _ in 0..180 {
            if self
                .provider
                .resume(&id)
                .await
                .is_ok_and(|handle| handle.is_some())
            {
                return Ok(id);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Err(format!(
            "Daytona sandbox {id} did not start within 3 minutes"
        ))
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        "00000000-0000-4000-8000-000000000000".into()
    }

    async fn break_destroy(&self, _id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        Ok(None)
    }

    async fn heal_destroy(&self, _id: &str) -> Result<(), String> {
        Ok(())
    }

    fn folds_stderr(&self) -> bool {
        true
    }
}

reaper_testkit::provider_conformance!(LiveDaytona::from_env());
