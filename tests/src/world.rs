//! The world a serverless sweep runs against, for one case: DynamoDB Local with a fresh table, a
//! `reaper-sandboxd` with its own root and token, and a journal directory; runs seeded in it the
//! way a chat route leaves them. Suites wrap it with their platform's parts (an emulator, a
//! cron secret).

use std::path::PathBuf;

use reaper_core::{RunRecord, SandboxHandle, SandboxProvider};
use reaper_dynamodb::DynamoStore;
use reaper_http_sandbox::{HttpSandbox, HttpSandboxProvider};

use crate::dynamo::{fresh_store, read_run, seed_detached_run, DetachedRun};
use crate::sandboxd::{run_agent, Sandboxd, THREE_DELTAS};
use crate::util::unique;

/// DynamoDB Local with a fresh table, a sandboxd, and a journal directory, all for one case.
#[derive(Debug)]
pub struct World {
    pub tmp: tempfile::TempDir,
    pub table: String,
    pub store: DynamoStore,
    pub sandboxd: Sandboxd,
    pub provider: HttpSandboxProvider,
    pub journals: PathBuf,
}

impl World {
    /// A table `<prefix>-<unique>`, a daemon under a fresh temp dir, journals in `journals/`.
    pub async fn new(table_prefix: &str) -> World {
        let tmp = tempfile::tempdir().expect("temp dir");
        let store = fresh_store(table_prefix).await;
        let table = store.table_name().to_string();
        let sandboxd = Sandboxd::start(tmp.path()).await;
        let provider = sandboxd.provider();
        let journals = tmp.path().join("journals");
        World {
            tmp,
            table,
            store,
            sandboxd,
            provider,
            journals,
        }
    }

    /// A sandbox on the daemon whose journals are in this world's directory.
    pub async fn sandbox(&self) -> HttpSandbox {
        crate::sandboxd::sandbox(&self.provider, &self.journals).await
    }

    /// An agent that printed three deltas and exited 0 in a sandbox of its own, recorded as a
    /// `running` run `<label>-<unique>` detached `detached_ago_ms` ago. Returns
    /// `(run_id, sandbox_id)`.
    pub async fn finished_run(&self, label: &str, detached_ago_ms: i64) -> (String, String) {
        let sbx = self.sandbox().await;
        let run_id = format!("{label}-{}", unique());
        let exit_code = run_agent(&sbx, &self.journals, &run_id, THREE_DELTAS).await;
        assert_eq!(exit_code, 0, "agent {run_id} did not exit 0");
        self.detached_run(&run_id, sbx.id(), detached_ago_ms).await;
        (run_id, sbx.id().to_string())
    }

    /// Records `run_id` as running in `sandbox_id`, detached `ago_ms` ago, with its instance.
    pub async fn detached_run(&self, run_id: &str, sandbox_id: &str, ago_ms: i64) {
        let run = DetachedRun {
            run_id,
            provider: self.provider.name(),
            sandbox_id,
            detached_ago_ms: ago_ms,
        };
        seed_detached_run(&self.store, run).await;
    }

    /// The run as stored now.
    pub async fn run(&self, run_id: &str) -> RunRecord {
        read_run(&self.store, run_id).await
    }
}
