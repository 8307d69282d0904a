//! What the tests against a real dockerd share: the daemon from the environment, a provider and
//! sandboxes on it, a fault-injecting socket, and the conformance fixtures.

// Each test binary uses its own subset.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use reaper_core::SandboxProvider;
use reaper_docker::{
    ClientVersion, CreateOptions, DockerProvider, DockerProviderOptions, DockerSandbox,
};
use reaper_testkit::conformance::provider::ProviderFixture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use reaper_e2e::sandbox::{file_exists, run_record, sh};
pub use reaper_e2e::util::{now_ms, unique};

/// The small output bound the fixtures build providers with, so cases cross it cheaply.
pub const OUTPUT_LIMIT: usize = 4096;

/// The daemon and image the tests use: `REAPER_DOCKER_HOST` (`unix:///…`) and
/// `REAPER_DOCKER_IMAGE` (default `reaper-busybox:test`), as printed by `dockerd/start.sh`.
/// Unset outside CI, the Docker tests skip and say so loudly; unset in CI (`CI` set), they fail:
/// the suite there must run them.
pub fn docker_env() -> Option<(String, String)> {
    match std::env::var("REAPER_DOCKER_HOST") {
        Ok(host) if !host.is_empty() => {
            let image = std::env::var("REAPER_DOCKER_IMAGE")
                .unwrap_or_else(|_| "reaper-busybox:test".into());
            Some((host, image))
        }
        _ if std::env::var_os("CI").is_some() => panic!(
            "REAPER_DOCKER_HOST is not set but CI is: the Docker provider must be tested against \
             a real dockerd there. Start one with \
             `eval \"$(shared/reaper-docker/dockerd/start.sh)\"` before the tests."
        ),
        _ => {
            eprintln!(
                "\n*** SKIPPED: REAPER_DOCKER_HOST is not set, so the Docker provider was NOT \
                 tested. Run `eval \"$(shared/reaper-docker/dockerd/start.sh)\"` (root) first. ***\n"
            );
            None
        }
    }
}

pub async fn connect(host: &str, name: Option<&str>) -> DockerProvider {
    let mut options = DockerProviderOptions::from_host(host).expect("REAPER_DOCKER_HOST");
    options.output_limit = OUTPUT_LIMIT;
    if let Some(name) = name {
        options.name = name.into();
    }
    DockerProvider::connect(options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A provider on the test daemon, and the image its sandboxes run; `None` skips (see
/// [`docker_env`]).
pub async fn docker() -> Option<(DockerProvider, String)> {
    let (host, image) = docker_env()?;
    Some((connect(&host, None).await, image))
}

pub async fn sandbox(provider: &DockerProvider, image: &str) -> DockerSandbox {
    provider
        .create(CreateOptions::new(image))
        .await
        .unwrap_or_else(|e| panic!("create a sandbox from {image}: {e}"))
}

/// The raw Engine API client on the test daemon, to set up what the provider must refuse.
pub fn raw_client() -> bollard::Docker {
    let (host, _) = docker_env().expect("REAPER_DOCKER_HOST");
    bollard::Docker::connect_with_unix(
        &host,
        30,
        &ClientVersion {
            major_version: 1,
            minor_version: 41,
        },
    )
    .expect("connect to the test daemon")
}

/// A Unix socket whose "daemon" answers every request with a 500 (fault injection: a daemon
/// failing the request), served until the process ends. Returns its path.
pub fn failing_daemon(dir: &Path) -> PathBuf {
    let path = dir.join(format!("failing-{}.sock", unique()));
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the failing socket");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Requests here carry no body the answer depends on: read the head, answer.
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = br#"{"message":"injected fault: the daemon failed this request"}"#;
                let answer = format!(
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.write_all(body).await;
            });
        }
    });
    path
}

/// A provider on a socket answering only 500s, pinned to an API version (it cannot negotiate).
pub async fn provider_on(socket: &Path) -> DockerProvider {
    let mut options = DockerProviderOptions::new(socket);
    options.output_limit = OUTPUT_LIMIT;
    DockerProvider::connect_at(
        options,
        ClientVersion {
            major_version: 1,
            minor_version: 41,
        },
    )
    .await
    .expect("a provider on the fault socket")
}

/// The conformance fixture on the real daemon. A failed destroy is injected by handing the case
/// a provider whose daemon answers 500.
pub struct DockerFixture {
    pub provider: DockerProvider,
    image: String,
    scratch: tempfile::TempDir,
}

impl DockerFixture {
    pub async fn new() -> Option<Arc<Self>> {
        let (provider, image) = docker().await?;
        Some(Arc::new(DockerFixture {
            provider,
            image,
            scratch: tempfile::tempdir().expect("temp dir"),
        }))
    }
}

#[async_trait::async_trait]
impl ProviderFixture for DockerFixture {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        self.provider
            .create(CreateOptions::new(&self.image))
            .await
            .map(|s| s.id().to_string())
            .map_err(|e| e.to_string())
    }

    fn output_limit(&self) -> usize {
        OUTPUT_LIMIT
    }

    fn missing_id(&self) -> String {
        format!("reaper-missing-{}", unique())
    }

    async fn break_destroy(&self, _id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        let socket = failing_daemon(self.scratch.path());
        Ok(Some(Arc::new(provider_on(&socket).await)))
    }

    async fn heal_destroy(&self, _id: &str) -> Result<(), String> {
        Ok(())
    }
}
