//! The fake Vercel Sandbox API (v2) of this crate's tests (checked against the stored OpenAPI
//! document), as a process: for tests that drive the provider
//! from elsewhere (the Cloudflare Worker's, whose `fetch` transport reaches it on 127.0.0.1).
//! `cargo run -p reaper-vercel-sandbox --example fake_vercel_sandbox` prints one line of JSON:
//!
//! ```json
//! {"provider":"vercel","control":"http://127.0.0.1:…",
//!  "vars":{"VERCEL_SANDBOX_API_URL":"http://127.0.0.1:…","VERCEL_TEAM_ID":"team_…",
//!          "VERCEL_PROJECT_ID":"prj_…"},
//!  "secrets":{"VERCEL_TOKEN":"…"}}
//! ```
//!
//! `control` is the control API of `reaper-daytona/examples/support/control.rs`. Runs until
//! stdin closes or SIGTERM, then destroys the sandboxes it made.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../../reaper-daytona/examples/support/control.rs"]
mod control;

use common::FakeVercel;
use reaper_fake_api::Recorded;
use reaper_local::LocalSandbox;
use reaper_vercel_sandbox::vars;
use serde_json::{json, Value};

struct Vercel(FakeVercel);

#[async_trait::async_trait]
impl control::Fake for Vercel {
    fn provider(&self) -> &'static str {
        reaper_vercel_sandbox::PROVIDER_NAME
    }

    fn vars(&self) -> Value {
        json!({
            vars::API_URL: self.0.api.url(),
            vars::TEAM_ID: common::TEAM,
            vars::PROJECT_ID: common::PROJECT,
        })
    }

    fn secrets(&self) -> Value {
        json!({ vars::TOKEN: common::TOKEN })
    }

    async fn create_sandbox(&self) -> String {
        self.0.create_sandbox().await
    }

    async fn backing(&self, id: &str) -> Option<LocalSandbox> {
        // A delete tears the backing sandbox down.
        self.0.local.open(id).await.ok().flatten()
    }

    async fn destroy(&self, id: &str) {
        if let Err(e) = reaper_core::SandboxProvider::destroy(&self.0.local, id).await {
            eprintln!("fake_vercel_sandbox: cannot destroy sandbox {id} at shutdown: {e}");
        }
    }

    fn requests(&self, _created: &[String]) -> Vec<(String, Recorded)> {
        let api = self.0.api.requests().into_iter();
        api.map(|r| ("api".to_string(), r)).collect()
    }

    fn violations(&self, _created: &[String]) -> Vec<String> {
        self.0.api.violations()
    }

    fn assert_clean(&self) {
        // Every violation of the stored document counts.
        self.0.api.assert_no_violations();
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    control::serve(Vercel(FakeVercel::start().await)).await;
}
