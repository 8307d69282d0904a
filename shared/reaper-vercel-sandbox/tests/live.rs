//! The provider conformance suite against the real Vercel Sandbox, when
//! `REAPER_LIVE_VERCEL_TOKEN` holds an access token and `REAPER_LIVE_VERCEL_PROJECT_ID` the
//! project to create sandboxes in (`REAPER_LIVE_VERCEL_TEAM_ID` its team, when the token's
//! default scope is not; `REAPER_LIVE_VERCEL_RUNTIME` the image, `node22` by default;
//! `REAPER_LIVE_VERCEL_API_URL` another endpoint). Without them every case skips and prints why.
//!
//! Vercel's published REST document has no create operation; each case creates its sandboxes
//! the way the official `@vercel/sandbox` client does (`POST /v2/sandboxes` with a `runtime`,
//! see `openapi/SOURCE.md`), named `reaper-live-…`, not persistent and with a 5-minute timeout,
//! so one a failed case leaves behind stops by itself and keeps no snapshot; the provider
//! deletes them. A failed destroy cannot be injected on the real service, so that case skips.
//!
//! `cargo test -p reaper-vercel-sandbox --test live -- --test-threads 1`

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use reaper_core::secret::Secret;
use reaper_core::SandboxProvider;
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpTransport, ReqwestTransport};
use reaper_testkit::conformance::provider::ProviderFixture;
use reaper_testkit::live;
use reaper_vercel_sandbox::{Config, VercelSandboxProvider, DEFAULT_BASE_URL};

const OUTPUT_LIMIT: usize = 4096;

struct LiveVercel {
    provider: VercelSandboxProvider,
    token: String,
    base: String,
    project: String,
    team: Option<String>,
    runtime: String,
    transport: ReqwestTransport,
}

impl LiveVercel {
    async fn from_env() -> Option<Arc<LiveVercel>> {
        let token = live::credential("REAPER_LIVE_VERCEL_TOKEN", "Vercel Sandbox")?;
        let project = std::env::var("REAPER_LIVE_VERCEL_PROJECT_ID")
            .ok()
            .filter(|p| !p.trim().is_empty());
        let Some(project) = project else {
            // Straight to stderr, which the test harness does not capture.
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED: live Vercel Sandbox conformance: REAPER_LIVE_VERCEL_PROJECT_ID is not \
                 set. Set it to the project (prj_… or its name) the sandboxes are created in."
            );
            return None;
        };
        let team = std::env::var("REAPER_LIVE_VERCEL_TEAM_ID")
            .ok()
            .filter(|t| !t.trim().is_empty());
        let mut config = Config::new(Secret::new(token.clone()));
        config.base_url = live::setting("REAPER_LIVE_VERCEL_API_URL", DEFAULT_BASE_URL);
        config.project_id = Some(project.clone());
        config.team_id = team.clone();
        config.output_limit = OUTPUT_LIMIT;
        let base = config.base_url.trim_end_matches('/').to_string();
        let provider = VercelSandboxProvider::new(config).expect("a valid live Vercel config");
        Some(Arc::new(LiveVercel {
            provider,
            token,
            base,
            project,
            team,
            runtime: live::setting("REAPER_LIVE_VERCEL_RUNTIME", "node22"),
            transport: ReqwestTransport::new().expect("an HTTP client"),
        }))
    }
}

#[async_trait::async_trait]
impl ProviderFixture for LiveVercel {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let name = format!(
            "reaper-live-{nanos}-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let body = serde_json::json!({
            "projectId": self.project,
            "name": name,
            "runtime": self.runtime,
            "timeout": 300_000,
            "persistent": false,
        });
        let mut url = format!("{}/v2/sandboxes", self.base);
        if let Some(team) = &self.team {
            url.push_str(&format!("?teamId={team}"));
        }
        let response = self
            .transport
            .send(HttpRequest {
                method: HttpMethod::Post,
                url,
                headers: vec![
                    ("authorization".into(), format!("Bearer {}", self.token)),
                    ("content-type".into(), "application/json".into()),
                ],
                body: Some(body.to_string().into_bytes()),
                timeout_ms: 120_000,
                max_response_bytes: 1024 * 1024,
            })
            .await
            .map_err(|e| format!("create a Vercel sandbox: {e}"))?;
        if response.status != 200 && response.status != 201 {
            return Err(format!(
                "create a Vercel sandbox: HTTP {}: {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            ));
        }
        let created: serde_json::Value =
            serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
        created["sandbox"]["name"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "the create answer has no sandbox.name".to_string())
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        "reaper-live-missing-0000".into()
    }

    async fn break_destroy(&self, _id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        Ok(None)
    }

    async fn heal_destroy(&self, _id: &str) -> Result<(), String> {
        Ok(())
    }
}

reaper_testkit::provider_conformance!(LiveVercel::from_env());
