//! The fake E2B of this crate's tests (the control plane checked against the stored OpenAPI
//! document, envd's `process.Process/Start` against the recorded `process.proto` shape), as a
//! process: for tests that drive the provider from elsewhere (the Cloudflare Worker's, whose
//! `fetch` transport reaches it on 127.0.0.1). `cargo run -p reaper-e2b --example fake_e2b`
//! prints one line of JSON:
//!
//! ```json
//! {"provider":"e2b","control":"http://127.0.0.1:…",
//!  "vars":{"E2B_API_URL":"http://127.0.0.1:…","E2B_DOMAIN":"sandboxes.invalid",
//!          "E2B_ENVD_URL_TEMPLATE":"http://{domain}/envd/{sandboxID}"},
//!  "secrets":{"E2B_API_KEY":"…"}}
//! ```
//!
//! The control plane reports the fake's own `127.0.0.1:PORT` as every sandbox's `domain`, so
//! the template reaches the fake's envd there; `E2B_DOMAIN` names no reachable host, so a
//! client that ignored the reported domain would fail instead of passing by luck.
//! `control` is the control API of `reaper-daytona/examples/support/control.rs`. Runs until
//! stdin closes or SIGTERM, then destroys the sandboxes it made.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../reaper-daytona/examples/support/control.rs"]
mod control;

use common::{E2bFake, ENVD_PREFIX};
use reaper_e2b::vars;
use reaper_fake_api::Recorded;
use reaper_local::LocalSandbox;
use serde_json::{json, Value};

struct E2b(E2bFake);

#[async_trait::async_trait]
impl control::Fake for E2b {
    fn provider(&self) -> &'static str {
        reaper_e2b::PROVIDER_NAME
    }

    fn vars(&self) -> Value {
        let config = self.0.provider.config();
        json!({
            vars::API_URL: config.api_url,
            vars::DOMAIN: config.domain,
            vars::ENVD_URL_TEMPLATE: config.envd_url_template,
        })
    }

    fn secrets(&self) -> Value {
        json!({ vars::API_KEY: common::API_KEY })
    }

    async fn create_sandbox(&self) -> String {
        self.0.create_sandbox().await
    }

    async fn backing(&self, id: &str) -> Option<LocalSandbox> {
        self.0.local.open(id).await.ok().flatten()
    }

    async fn destroy(&self, id: &str) {
        if let Err(e) = reaper_core::SandboxProvider::destroy(&self.0.local, id).await {
            eprintln!("fake_e2b: cannot destroy sandbox {id} at shutdown: {e}");
        }
    }

    fn requests(&self, _created: &[String]) -> Vec<(String, Recorded)> {
        let server = |r: &Recorded| {
            if r.path.starts_with(ENVD_PREFIX) {
                "envd"
            } else {
                "api"
            }
        };
        self.0
            .api
            .requests()
            .into_iter()
            .map(|r| (server(&r).to_string(), r))
            .collect()
    }

    fn violations(&self, _created: &[String]) -> Vec<String> {
        // envd's shape violations are private to the fake: its `assert_clean` reports them.
        self.0.api.violations()
    }

    fn assert_clean(&self) {
        self.0.assert_clean();
    }

    fn operation(&self, request: &Recorded) -> String {
        match request.path.strip_prefix(ENVD_PREFIX) {
            // `/envd/{sandboxID}/process.Process/Start`: counted by method, not by sandbox.
            Some(rest) => format!(
                "envd {}",
                rest.split_once('/').map_or(rest, |(_, method)| method)
            ),
            // The document has no operationIds: `METHOD /template`.
            None => request.operation_id.clone().unwrap_or_else(|| {
                let route = request.path_template.as_deref().unwrap_or(&request.path);
                format!("{} {route}", request.method)
            }),
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    control::serve(E2b(E2bFake::start().await)).await;
}
