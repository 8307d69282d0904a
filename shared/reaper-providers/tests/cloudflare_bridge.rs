//! The provider conformance suite through the Cloudflare Sandbox bridge Worker: sandboxd's HTTP
//! client, built by the registry under `cloudflare`, against the bridge running in workerd in
//! front of a stand-in of `@cloudflare/sandbox` whose commands run for real.
//!
//! The bridge must be running: `handlers/reaper-cloudflare/test/sandbox-bridge.test.mjs` starts
//! it (workerd via Miniflare, a real reaper-sandboxd behind the stand-in) and runs this test with
//! `REAPER_CLOUDFLARE_BRIDGE_TEST_URL` and `REAPER_CLOUDFLARE_BRIDGE_TEST_TOKEN` set, asserting
//! that every case passed. Run alone, each case says why it skipped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use reaper_core::SandboxProvider;
use reaper_http_sandbox::{HttpMethod, HttpRequest, HttpTransport, ReqwestTransport};
use reaper_providers::{build_hosted, ProviderKind};
use reaper_testkit::conformance::provider::ProviderFixture;

const URL_VAR: &str = "REAPER_CLOUDFLARE_BRIDGE_TEST_URL";
const TOKEN_VAR: &str = "REAPER_CLOUDFLARE_BRIDGE_TEST_TOKEN";
/// The bridge's MAX_OUTPUT_BYTES in the harness.
const OUTPUT_LIMIT: usize = 4096;

struct BridgeFixture {
    url: String,
    provider: Arc<dyn SandboxProvider>,
    transport: Arc<dyn HttpTransport>,
    nonce: String,
}

impl BridgeFixture {
    async fn new() -> Option<Arc<Self>> {
        let (Ok(url), Ok(token)) = (std::env::var(URL_VAR), std::env::var(TOKEN_VAR)) else {
            eprintln!(
                "skipped: {URL_VAR} is unset (handlers/reaper-cloudflare/test/sandbox-bridge.test.mjs \
                 starts the bridge in workerd and runs this test)"
            );
            return None;
        };
        let transport: Arc<dyn HttpTransport> = Arc::new(ReqwestTransport::new().unwrap());
        let settings = |n: &str| match n {
            "CLOUDFLARE_SANDBOX_BRIDGE_URL" => Some(url.clone()),
            "CLOUDFLARE_SANDBOX_BRIDGE_TOKEN" => Some(token.clone()),
            _ => None,
        };
        let provider = build_hosted(ProviderKind::Cloudflare, settings, transport.clone())
            .expect("the bridge settings build")
            .expect("a hosted provider");
        assert_eq!(provider.name(), "cloudflare");
        Some(Arc::new(BridgeFixture {
            url,
            provider,
            transport,
            nonce: reaper_testkit::conformance::native_nonce()
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .rev()
                .take(12)
                .collect(),
        }))
    }

    async fn hook(&self, what: &str, id: &str) -> Result<(), String> {
        let response = self
            .transport
            .send(HttpRequest {
                method: HttpMethod::Post,
                url: format!("{}/__standin/{what}/{id}", self.url.trim_end_matches('/')),
                headers: vec![],
                body: None,
                timeout_ms: 60_000,
                max_response_bytes: 4096,
            })
            .await
            .map_err(|e| e.to_string())?;
        match response.status {
            204 => Ok(()),
            s => Err(format!(
                "stand-in {what} {id}: {s} {}",
                String::from_utf8_lossy(&response.body)
            )),
        }
    }
}

#[async_trait::async_trait]
impl ProviderFixture for BridgeFixture {
    fn provider(&self) -> &dyn SandboxProvider {
        &*self.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        // One counter for the whole binary: the cases run in parallel, each with its fixture.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = format!("cf-{}-{}", self.nonce, NEXT.fetch_add(1, Ordering::Relaxed));
        self.hook("create", &id).await?;
        Ok(id)
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        format!("cf-{}-never-created", self.nonce)
    }

    async fn break_destroy(&self, id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        self.hook("break", id).await?;
        Ok(Some(self.provider.clone()))
    }

    async fn heal_destroy(&self, id: &str) -> Result<(), String> {
        self.hook("heal", id).await
    }
}

reaper_testkit::provider_conformance!(BridgeFixture::new());
