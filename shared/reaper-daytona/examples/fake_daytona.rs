//! The OpenAPI-checked fake Daytona of this crate's tests, as a process: for tests that drive
//! the provider from elsewhere (the Cloudflare Worker's, whose `fetch` transport reaches it on
//! 127.0.0.1). `cargo run -p reaper-daytona --example fake_daytona` prints one line of JSON:
//!
//! ```json
//! {"provider":"daytona","control":"http://127.0.0.1:…",
//!  "vars":{"DAYTONA_API_URL":"http://127.0.0.1:…/api"},"secrets":{"DAYTONA_API_KEY":"…"}}
//! ```
//!
//! `vars` and `secrets` are the settings that point a reaper at the fake; `control` is the
//! control API of `support/control.rs` (sandboxes, agents, the request log, the violations).
//! Runs until stdin closes or SIGTERM, then destroys the sandboxes it made.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/control.rs"]
mod control;

use common::FakeDaytona;
use reaper_core::SandboxProvider;
use reaper_fake_api::Recorded;
use reaper_local::LocalSandbox;
use serde_json::{json, Value};

struct Daytona(FakeDaytona);

#[async_trait::async_trait]
impl control::Fake for Daytona {
    fn provider(&self) -> &'static str {
        reaper_daytona::PROVIDER_NAME
    }

    fn vars(&self) -> Value {
        json!({ reaper_daytona::API_URL_VAR: self.0.api.url() })
    }

    fn secrets(&self) -> Value {
        json!({ reaper_daytona::API_KEY_VAR: common::KEY })
    }

    async fn create_sandbox(&self) -> String {
        self.0.create().await
    }

    async fn backing(&self, id: &str) -> Option<LocalSandbox> {
        let sandbox = self.0.local(id);
        // Gone once the fake's delete tore it down.
        sandbox.metadata().await.ok().map(|_| sandbox)
    }

    async fn destroy(&self, id: &str) {
        if let Err(e) = self.0.provider.destroy(id).await {
            eprintln!("fake_daytona: cannot destroy sandbox {id} at shutdown: {e}");
        }
    }

    fn requests(&self, created: &[String]) -> Vec<(String, Recorded)> {
        let api = self.0.api.requests().into_iter();
        let toolboxes = created
            .iter()
            .flat_map(|id| self.0.toolbox(id).requests())
            .map(|r| ("toolbox".to_string(), r));
        api.map(|r| ("api".to_string(), r))
            .chain(toolboxes)
            .collect()
    }

    fn violations(&self, created: &[String]) -> Vec<String> {
        let mut all = self.0.api.violations();
        for id in created {
            all.extend(self.0.toolbox(id).violations());
        }
        all
    }

    fn assert_clean(&self) {
        self.0.assert_clean();
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    control::serve(Daytona(FakeDaytona::start().await)).await;
}
