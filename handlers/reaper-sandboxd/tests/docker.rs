//! The daemon's Docker backend (`--backend docker`) against a real dockerd: the provider
//! conformance suite through `HttpSandboxProvider` → `reaper-sandboxd` → Docker, what the API
//! says about a container sandbox, a sweep end to end whose sandbox is a container, and a
//! daemon that cannot reach dockerd refusing to start.
//!
//! Every test skips loudly when REAPER_DOCKER_HOST is unset (see `dockerd_env`), and fails when
//! it is unset in CI.

mod common;

use std::sync::Arc;

use common::{now_ms, unique, Daemon, BIN};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    MessageStore, RunExitProbe, RunStatus, RunStore, SandboxHandle, SandboxInstanceRecord,
    SandboxInstanceStore, SandboxProvider,
};
use reaper_docker::{DockerProvider, DockerProviderOptions};
use reaper_http_sandbox::api::CreateSandboxRequest;
use reaper_http_sandbox::{HttpSandboxProvider, DEFAULT_PROVIDER_NAME};
use reaper_local::{SystemClock, TokioSleeper};
use reaper_testkit::conformance::provider::ProviderFixture;

/// The output bound the conformance daemon runs with, so cases cross it cheaply.
const OUTPUT_LIMIT: usize = 4096;

/// `REAPER_DOCKER_HOST` and `REAPER_DOCKER_IMAGE`, as `shared/reaper-docker/dockerd/start.sh`
/// prints them. Unset outside CI, the tests skip and say so; unset in CI, they fail.
fn dockerd_env() -> Option<(String, String)> {
    match std::env::var("REAPER_DOCKER_HOST") {
        Ok(host) if !host.is_empty() => Some((
            host,
            std::env::var("REAPER_DOCKER_IMAGE").unwrap_or_else(|_| "reaper-busybox:test".into()),
        )),
        _ if std::env::var_os("CI").is_some() => panic!(
            "REAPER_DOCKER_HOST is not set but CI is: sandboxd's Docker backend must be tested \
             against a real dockerd there. Run `eval \"$(shared/reaper-docker/dockerd/start.sh)\"` \
             first."
        ),
        _ => {
            eprintln!(
                "\n*** SKIPPED: REAPER_DOCKER_HOST is not set, so sandboxd's Docker backend was \
                 NOT tested. Run `eval \"$(shared/reaper-docker/dockerd/start.sh)\"` (root) first. \
                 ***\n"
            );
            None
        }
    }
}

/// A daemon serving Docker containers, and the HTTP provider a remote reaper would use.
struct DockerDaemon {
    /// Kept for its lifetime: dropping it kills the daemon.
    _daemon: Daemon,
    provider: HttpSandboxProvider,
    /// The daemon's own view of its containers, to check what the API did.
    docker: DockerProvider,
    tmp: tempfile::TempDir,
}

impl DockerDaemon {
    /// A daemon whose containers carry a label value of their own, so what a test leaves
    /// behind is found (and removed) without touching another test's containers.
    async fn start(extra: &[&str]) -> Option<DockerDaemon> {
        let (host, image) = dockerd_env()?;
        let tmp = tempfile::tempdir().unwrap();
        let label = format!("sandboxd-test-{}", unique());
        let mut args = vec![
            "--backend",
            "docker",
            "--docker-host",
            &host,
            "--docker-image",
            &image,
            "--docker-label",
            &label,
        ];
        args.extend_from_slice(extra);
        let daemon = Daemon::start(tmp.path(), &args).await;
        let provider = daemon.provider();
        let mut options = DockerProviderOptions::from_host(&host).unwrap();
        options.name = label.clone();
        let docker = DockerProvider::connect(options).await.unwrap();
        Some(DockerDaemon {
            _daemon: daemon,
            provider,
            docker,
            tmp,
        })
    }

    /// Removes every container of this daemon's label (a failed case leaves its sandbox).
    async fn remove_all(&self) {
        for id in self.docker.list().await.unwrap() {
            self.docker.destroy(&id).await.unwrap();
        }
    }
}

/// A Unix socket in front of dockerd that forwards every Engine API request but a `DELETE`,
/// which it answers 500 (fault injection: a daemon failing the container's removal). Each
/// forwarded request is made the last of its connection (`Connection: close`), so a client's
/// next request, a `DELETE` included, arrives on a new connection and is seen here; an upgraded
/// exec stream is forwarded as it is. Served until the test process ends; returns its path and
/// the count of `DELETE`s it failed.
fn failing_removal_proxy(
    upstream: std::path::PathBuf,
    dir: &std::path::Path,
) -> (std::path::PathBuf, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let path = dir.join(format!("proxy-{}.sock", unique()));
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the proxy socket");
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = refused.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                let end = loop {
                    if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at;
                    }
                    match client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                };
                if head.starts_with(b"DELETE ") {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let body = br#"{"message":"injected fault: the removal failed"}"#;
                    let answer = format!(
                        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = client.write_all(answer.as_bytes()).await;
                    let _ = client.write_all(body).await;
                    return;
                }
                let upgrade = String::from_utf8_lossy(&head[..end])
                    .to_ascii_lowercase()
                    .contains("\r\nupgrade:");
                if !upgrade {
                    head.splice(end..end, b"\r\nConnection: close".iter().copied());
                }
                let Ok(mut up) = tokio::net::UnixStream::connect(&upstream).await else {
                    return;
                };
                if up.write_all(&head).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                }
            });
        }
    });
    (path, refused)
}

struct Fixture {
    d: DockerDaemon,
    /// A second daemon on the same containers whose dockerd fails every removal
    /// (`break_destroy`); kept here because dropping it kills it.
    failing: tokio::sync::Mutex<Option<(Daemon, Arc<std::sync::atomic::AtomicUsize>)>>,
}

impl Fixture {
    async fn new() -> Option<Arc<Fixture>> {
        let limit = OUTPUT_LIMIT.to_string();
        let d = DockerDaemon::start(&["--max-output-bytes", &limit]).await?;
        Some(Arc::new(Fixture {
            d,
            failing: tokio::sync::Mutex::new(None),
        }))
    }
}

#[async_trait::async_trait]
impl ProviderFixture for Fixture {
    fn provider(&self) -> &dyn SandboxProvider {
        &self.d.provider
    }

    async fn create_sandbox(&self) -> Result<String, String> {
        self.d
            .provider
            .create(&CreateSandboxRequest::default())
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

    /// A second daemon serving the same containers through [`failing_removal_proxy`].
    async fn break_destroy(&self, _id: &str) -> Result<Option<Arc<dyn SandboxProvider>>, String> {
        let (host, image) = dockerd_env().ok_or("no dockerd")?;
        let socket = host.strip_prefix("unix://").unwrap_or(&host).into();
        let (proxy, refused) = failing_removal_proxy(socket, self.d.tmp.path());
        let proxy_host = format!("unix://{}", proxy.display());
        let args = [
            "--backend",
            "docker",
            "--docker-host",
            &proxy_host,
            "--docker-image",
            &image,
            "--docker-label",
            self.d.docker.name(),
        ];
        let failing = Daemon::start(self.d.tmp.path(), &args).await;
        let provider = Arc::new(failing.provider());
        *self.failing.lock().await = Some((failing, refused));
        Ok(Some(provider))
    }

    /// Nothing to heal (the fixture's own daemon never failed), but the failure the case saw
    /// must have been the injected one, not a refusal of some other kind.
    async fn heal_destroy(&self, _id: &str) -> Result<(), String> {
        match &*self.failing.lock().await {
            Some((_, refused)) if refused.load(std::sync::atomic::Ordering::SeqCst) > 0 => Ok(()),
            _ => Err("the destroy failed without reaching the injected DELETE fault".into()),
        }
    }
}

/// The provider conformance cases through the daemon, each its own test.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod through_sandboxd {
            use reaper_testkit::conformance::{conclude, native_nonce, provider, CaseContext};

            $(
                #[tokio::test]
                async fn $case() {
                    let Some(fixture) = super::Fixture::new().await else {
                        return;
                    };
                    let ctx = CaseContext::new(
                        &native_nonce(),
                        stringify!($case),
                        Default::default(),
                    );
                    let result = provider::$case(&*fixture, &ctx).await;
                    // A failed case leaves its sandbox: remove it before reporting.
                    fixture.d.remove_all().await;
                    conclude(stringify!($case), result);
                }
            )*
        }
    };
}

// Every case of the suite.
conformance!(
    resume_of_a_missing_id_is_none,
    resume_of_a_live_sandbox_is_a_handle_with_its_id,
    exec_returns_stdout_stderr_and_the_exit_code,
    exec_passes_the_command_to_sh_verbatim,
    exec_decodes_invalid_utf8_lossily,
    exec_gives_the_command_no_stdin,
    exec_output_at_the_bound_is_returned_whole,
    exec_stdout_beyond_the_bound_is_an_output_limit_error,
    exec_stderr_beyond_the_bound_is_an_output_limit_error,
    exec_of_an_endless_output_stops_at_the_bound_and_kills_the_command,
    exec_past_its_timeout_is_a_timeout_error_and_kills_the_command,
    destroy_then_resume_is_none,
    exec_through_a_handle_of_a_destroyed_sandbox_is_not_found,
    destroy_of_a_missing_id_is_ok_and_repeatable,
    destroy_ends_an_exec_still_running,
    a_failed_destroy_is_an_error_and_the_sandbox_stays_live,
);

#[tokio::test]
async fn a_docker_sandbox_is_described_with_its_journal_dir_creation_time_and_agents() {
    let Some(d) = DockerDaemon::start(&[]).await else {
        return;
    };
    let before = now_ms();
    let journals = format!("/tmp/journals-{}", unique());
    let sbx = d
        .provider
        .create(&CreateSandboxRequest {
            journal_dir: Some(journals.clone()),
        })
        .await
        .unwrap();
    let run_id = format!("sd-docker-{}", unique());
    let started = sbx
        .start_agent(&run_id, "echo '{\"delta\":\"1\"}'", None)
        .await
        .unwrap();

    let info = sbx.status().await.unwrap().expect("the sandbox is live");
    assert_eq!(info.id, sbx.id());
    assert_eq!(info.journal_dir, journals);
    assert!(
        (before..=now_ms()).contains(&info.created_at),
        "{info:?} vs {before}"
    );
    assert_eq!(info.agents.len(), 1);
    assert_eq!(info.agents[0].run_id, run_id);
    assert_eq!(info.agents[0].pid, started.pid);
    // The agent ran in the container, its journal where the sandbox said.
    let options = ProbeOptions {
        dir: Some(journals),
        ..ProbeOptions::default()
    };
    assert!(
        common::eventually(std::time::Duration::from_secs(20), || async {
            reaper_core::probe::probe_run_exit(&sbx, &run_id, &options).await
                == RunExitProbe::Finished { exit_code: 0 }
        })
        .await
    );
    assert!(d.docker.resume(sbx.id()).await.unwrap().is_some());
    d.provider.destroy(sbx.id()).await.unwrap();
    assert!(
        d.docker.resume(sbx.id()).await.unwrap().is_none(),
        "DELETE through the daemon left the container"
    );
}

#[tokio::test]
async fn a_sweep_through_sandboxd_finalizes_a_run_in_a_container_and_removes_the_container() {
    let Some(d) = DockerDaemon::start(&[]).await else {
        return;
    };
    let sbx = d
        .provider
        .create(&CreateSandboxRequest::default())
        .await
        .unwrap();
    let run_id = format!("sd-sweep-{}", unique());
    sbx.start_agent(
        &run_id,
        "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
        None,
    )
    .await
    .unwrap();
    assert!(
        common::eventually(std::time::Duration::from_secs(20), || async {
            reaper_core::probe::probe_run_exit(&sbx, &run_id, &ProbeOptions::default()).await
                == RunExitProbe::Finished { exit_code: 0 }
        })
        .await
    );

    // What a remote reaper records: the HTTP provider's name, so the id is routed to this
    // daemon and never to a Docker daemon the reaper might reach itself.
    assert_eq!(d.provider.name(), DEFAULT_PROVIDER_NAME);
    let store = Arc::new(MemoryStore::new());
    let detached_at = now_ms();
    let mut record = common::run_record(&run_id, RunStatus::Running);
    record.started_at = detached_at - 1_000;
    record.detached_since = Some(detached_at);
    record.sandbox_key = Some(format!("key-{run_id}"));
    store.put_run(record);
    store
        .upsert(SandboxInstanceRecord {
            key: format!("key-{run_id}"),
            provider: d.provider.name().into(),
            provider_sandbox_id: sbx.id().into(),
            latest_snapshot_id: None,
            thread_id: "thread".into(),
            latest_run_id: Some(run_id.clone()),
            updated_at: detached_at,
        })
        .await
        .unwrap();
    let provider: Arc<dyn SandboxProvider> = Arc::new(d.provider.clone());
    let deps = ReapDeps {
        runs: store.clone(),
        logs: store.clone(),
        leases: store.clone(),
        ledger: store.clone(),
        probe: Arc::new(JournalExitProbe::new(
            provider.clone(),
            store.clone(),
            ProbeOptions::default(),
        )),
        drive: Arc::new(JournalReplayDrive::new(
            ReplayDeps {
                runs: store.clone(),
                instances: store.clone(),
                provider: provider.clone(),
                logs: store.clone(),
                messages: store.clone(),
                clock: Arc::new(SystemClock),
                sleeper: Arc::new(TokioSleeper),
            },
            ReplayOptions::default(),
        )),
        reclaim: Some(Arc::new(SandboxReclaimer {
            provider,
            instances: store.clone(),
            runs: store.clone(),
        })),
        clock: Arc::new(SystemClock),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(3_600_000, format!("sandboxd-docker-{}", unique()));
    options.fence_quiet_ms = 25;

    let report = reap_detached_runs(&deps, &options).await.unwrap();
    assert_eq!(report.runs.len(), 1, "{:?}", report.runs);
    let entry = &report.runs[0];
    assert_eq!(entry.outcome, ReapOutcome::Finalized, "{entry:?}");
    assert_eq!(entry.sandbox, Some(SandboxFate::Destroyed));
    let transcript = store.get_transcript(&run_id).await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "123");
    assert_eq!(
        RunStore::get(store.as_ref(), &run_id)
            .await
            .unwrap()
            .unwrap()
            .status,
        RunStatus::Completed
    );
    assert!(
        d.docker.resume(sbx.id()).await.unwrap().is_none(),
        "the container was not removed"
    );
}

#[tokio::test]
async fn a_daemon_that_cannot_reach_dockerd_refuses_to_start_and_says_what_to_set() {
    let Some((_, image)) = dockerd_env() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("no-dockerd.sock");
    let output = std::process::Command::new(BIN)
        .args(["--backend", "docker", "--listen", "127.0.0.1:0"])
        .arg("--docker-host")
        .arg(format!("unix://{}", socket.display()))
        .args(["--docker-image", &image])
        .env_clear()
        .env("REAPER_SANDBOXD_TOKEN", common::random_token())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty(), "it must not say it is listening");
    assert!(
        stderr.contains(&format!("cannot reach dockerd at {}", socket.display()))
            && stderr.contains("DOCKER_HOST"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_docker_backend_needs_an_image_and_refuses_tcp_hosts() {
    let Some(_) = dockerd_env() else { return };
    let run = |args: &[&str]| {
        let output = std::process::Command::new(BIN)
            .args(args)
            .env_clear()
            .env("REAPER_SANDBOXD_TOKEN", common::random_token())
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["--backend", "docker", "--listen", "127.0.0.1:0"]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("--docker-image"), "{stderr}");
    let (code, stderr) = run(&[
        "--backend",
        "docker",
        "--docker-image",
        "x",
        "--docker-host",
        "tcp://127.0.0.1:2375",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("unix:///"), "{stderr}");
}
