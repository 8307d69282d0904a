//! The Docker provider against a real dockerd: what only this provider does (labels, exact ids,
//! container states, an unreachable daemon), the H14 journal behaviours and the BusyBox
//! prune/probe inside a BusyBox container, a sweep end to end (probe, replay, finalize, reclaim
//! the container), and the Engine API requests each operation costs.
//!
//! Every test skips loudly when REAPER_DOCKER_HOST is unset, and fails when it is unset in CI.

mod common;

use std::sync::Arc;

use bollard::models::ContainerCreateBody;
use common::{docker, file_exists, now_ms, run_record, sandbox, sh, unique};
use reaper_core::journal::{
    decode_base64_text, decode_journal_run_id, journal_cleanup_command, journal_mtime_list_command,
    journal_paths, journaled_command, parse_mtime_listing, shell_quote, stderr_tail_command,
    DecodedJournalName, MtimeListing,
};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, JournalExitProbe, ProbeOptions};
use reaper_core::prune::{prune_journals, AgeGate, KeptJournal, KeptReason, PruneOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    ExecOptions, ExitProbe, MessageStore, Reclaim, ReclaimIntent, Reclaimed, RunExitProbe,
    RunStatus, RunStore, SandboxError, SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore,
    SandboxProvider,
};
use reaper_docker::{
    ConfigError, CreateOptions, DockerProvider, DockerProviderOptions, DockerSandbox,
    RequestCounts, SANDBOX_LABEL,
};
use reaper_local::{SystemClock, TokioSleeper};

/// Runs an agent under the journaled wrapper in the container, to its end.
async fn run_agent(sbx: &DockerSandbox, run_id: &str, command: &str) {
    let paths = journal_paths(run_id, None).unwrap();
    let out = sbx
        .exec(&journaled_command(command, &paths), ExecOptions::default())
        .await
        .unwrap_or_else(|e| panic!("agent {run_id:?}: {e}"));
    assert_eq!(
        out.exit_code, 0,
        "the journaled wrapper of {run_id:?} failed: {out:?}"
    );
}

/// Starts an agent under the journaled wrapper in the background, and waits until its journal
/// has `lines` lines.
async fn start_agent(sbx: &DockerSandbox, run_id: &str, command: &str, lines: usize) {
    let paths = journal_paths(run_id, None).unwrap();
    let script = journaled_command(command, &paths);
    sh(
        sbx,
        &format!(
            "sh -c {} >/dev/null 2>&1 </dev/null &",
            shell_quote(&script)
        ),
    )
    .await;
    let journal = shell_quote(&paths.journal);
    let ready = reaper_e2e::util::eventually(std::time::Duration::from_secs(20), || async {
        let n = sh(sbx, &format!("cat {journal} 2>/dev/null | wc -l")).await;
        n.trim().parse::<usize>().unwrap_or(0) >= lines
    })
    .await;
    assert!(ready, "agent {run_id:?} never wrote {lines} lines");
}

/// `(sidecar, journal)` names of a run, in listing order.
fn names(run_id: &str) -> Vec<String> {
    let encoded = reaper_core::journal::encode_run_id(run_id).unwrap();
    vec![format!("{encoded}.err"), format!("{encoded}.ndjson")]
}

fn prune_options() -> PruneOptions {
    PruneOptions::new(now_ms())
}

// ---------------------------------------------------------------------------------------------
// What only the Docker provider does.

#[tokio::test]
async fn a_sandbox_runs_busybox_with_no_network_but_loopback() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    assert!(sh(&sbx, "sh --help 2>&1; true").await.contains("BusyBox"));
    assert_eq!(sh(&sbx, "ls /sys/class/net").await, "lo\n");
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn a_container_without_the_provider_label_is_refused_and_left_running() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let raw = common::raw_client();
    let name = format!("reaper-stranger-{}", unique());
    raw.create_container(
        Some(bollard::query_parameters::CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        }),
        ContainerCreateBody {
            image: Some(image.clone()),
            cmd: Some(vec!["sleep".into(), "600".into()]),
            host_config: Some(bollard::models::HostConfig {
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    raw.start_container(&name, None).await.unwrap();

    let resumed = provider.resume(&name).await;
    assert!(
        matches!(&resumed, Err(SandboxError::Refused(m)) if m.contains(SANDBOX_LABEL)),
        "{:?}",
        resumed.map(|h| h.map(|h| h.id().to_string()))
    );
    let destroyed = provider.destroy(&name).await;
    assert!(
        matches!(&destroyed, Err(SandboxError::Refused(_))),
        "{destroyed:?}"
    );
    let state = raw
        .inspect_container(&name, None)
        .await
        .unwrap()
        .state
        .unwrap();
    assert_eq!(
        state.running,
        Some(true),
        "a stranger's container was stopped"
    );
    raw.remove_container(
        &name,
        Some(bollard::query_parameters::RemoveContainerOptions {
            force: true,
            ..Default::default()
        }),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_provider_of_another_name_refuses_this_providers_sandboxes() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let (host, _) = common::docker_env().unwrap();
    let other = common::connect(&host, Some("docker-other")).await;
    let sbx = sandbox(&provider, &image).await;
    assert!(matches!(
        other.resume(sbx.id()).await,
        Err(SandboxError::Refused(_))
    ));
    assert!(matches!(
        other.destroy(sbx.id()).await,
        Err(SandboxError::Refused(_))
    ));
    assert!(provider.resume(sbx.id()).await.unwrap().is_some());
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn list_names_this_providers_running_sandboxes_and_no_other_container() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let (host, _) = common::docker_env().unwrap();
    let other = common::connect(&host, Some(&format!("docker-list-{}", unique()))).await;
    let (a, b) = (sandbox(&other, &image).await, sandbox(&other, &image).await);
    let stranger = sandbox(&provider, &image).await;
    let stopped = sandbox(&other, &image).await;
    common::raw_client()
        .stop_container(stopped.id(), None)
        .await
        .unwrap();
    let before = other.request_counts();

    let listed = other.list().await.unwrap();
    let mut expected = vec![a.id().to_string(), b.id().to_string()];
    expected.sort();
    assert_eq!(listed, expected, "only the running sandboxes of this name");
    assert_eq!(other.request_counts().since(&before).list_containers, 1);
    assert!(
        a.created_at()
            .is_some_and(|t| (now_ms() - t).abs() < 120_000),
        "{:?}",
        a.created_at()
    );
    for id in [a.id(), b.id(), stopped.id()] {
        other.destroy(id).await.unwrap();
    }
    provider.destroy(stranger.id()).await.unwrap();
}

#[tokio::test]
async fn an_agent_started_in_a_sandbox_is_listed_and_journaled_where_asked() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let run_id = format!("dk-agent ;$(x) {}", unique());
    let pid = sbx
        .start_agent(&run_id, "echo '{\"delta\":\"1\"}'", Some("/tmp/elsewhere"))
        .await
        .unwrap();
    let agents = sbx.agents().await.unwrap();
    assert_eq!(agents.len(), 1);
    assert_eq!(
        (agents[0].run_id.as_str(), agents[0].pid),
        (run_id.as_str(), pid)
    );
    let options = ProbeOptions {
        dir: Some("/tmp/elsewhere".into()),
        ..ProbeOptions::default()
    };
    let finished = reaper_e2e::util::eventually(std::time::Duration::from_secs(20), || async {
        probe_run_exit(&sbx, &run_id, &options).await == RunExitProbe::Finished { exit_code: 0 }
    })
    .await;
    assert!(
        finished,
        "the agent never wrote its sentinel in /tmp/elsewhere"
    );
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn an_id_prefix_of_a_sandbox_is_refused_and_destroys_nothing() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let prefix = &sbx.id()[..12];
    // Not "gone": a record naming a short id would otherwise be dropped while its container
    // runs on.
    assert!(matches!(
        provider.resume(prefix).await,
        Err(SandboxError::Refused(m)) if m.contains("full id")
    ));
    assert!(matches!(
        provider.destroy(prefix).await,
        Err(SandboxError::Refused(_))
    ));
    assert!(
        provider.resume(sbx.id()).await.unwrap().is_some(),
        "destroying an id prefix removed the sandbox it prefixes"
    );
    provider.destroy(sbx.id()).await.unwrap();
}

/// A running container created the way TanStack AI's Docker provider creates one: no reaper
/// label, no name of ours. Returns its full id.
async fn unlabelled_container(image: &str) -> String {
    let raw = common::raw_client();
    let created = raw
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            ContainerCreateBody {
                image: Some(image.to_string()),
                cmd: Some(vec!["sleep".into(), "600".into()]),
                host_config: Some(bollard::models::HostConfig {
                    network_mode: Some("none".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    raw.start_container(&created.id, None).await.unwrap();
    created.id
}

async fn is_running(id: &str) -> bool {
    let raw = common::raw_client();
    match raw.inspect_container(id, None).await {
        Ok(info) => info.state.and_then(|s| s.running) == Some(true),
        Err(_) => false,
    }
}

async fn remove(id: &str) {
    let _ = common::raw_client()
        .remove_container(
            id,
            Some(bollard::query_parameters::RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
}

#[tokio::test]
async fn an_unlabelled_container_recorded_by_its_full_id_under_docker_is_swept_and_reclaimed() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let provider = Arc::new(provider);
    let id = unlabelled_container(&image).await;
    let n = unique();
    let run = format!("dk-unlabelled-{n}");
    let handle = provider
        .open(&id)
        .await
        .unwrap()
        .expect("an unlabelled container named by its full id is live");
    run_agent(
        &handle,
        &run,
        "for d in 1 2; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
    )
    .await;

    // The run and the instance record exactly as the framework writes them.
    let store = Arc::new(MemoryStore::new());
    let detached_at = now_ms();
    let mut record = run_record(&run, RunStatus::Running);
    record.started_at = detached_at - 1_000;
    record.detached_since = Some(detached_at);
    record.sandbox_key = Some(format!("thread-{n}"));
    store.put_run(record);
    let instance: SandboxInstanceRecord = serde_json::from_str(&format!(
        r#"{{"key":"thread-{n}","provider":"docker","providerSandboxId":"{id}","threadId":"thread","latestRunId":"{run}","updatedAt":{detached_at}}}"#
    ))
    .unwrap();
    store.upsert(instance).await.unwrap();

    let deps = ReapDeps::journaled(
        store.clone(),
        provider.clone() as Arc<dyn SandboxProvider>,
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        None,
    );
    let mut options = ReapOptions::new(3_600_000, format!("docker-unlabelled-{n}"));
    options.fence_quiet_ms = 25;
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let entry = &report.runs[0];
    assert_eq!(entry.outcome, ReapOutcome::Finalized, "{entry:?}");
    assert_eq!(entry.sandbox, Some(SandboxFate::Destroyed), "{entry:?}");
    let transcript = store.get_transcript(&run).await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "12");
    assert!(
        common::raw_client()
            .inspect_container(&id, None)
            .await
            .is_err(),
        "the framework's container was not removed"
    );
}

#[tokio::test]
async fn an_unlabelled_container_named_by_its_name_or_a_short_id_is_refused_and_left_running() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let id = unlabelled_container(&image).await;
    let name = common::raw_client()
        .inspect_container(&id, None)
        .await
        .unwrap()
        .name
        .unwrap();
    let name = name.trim_start_matches('/');
    for by in [name, &id[..12], &id[..63]] {
        let resumed = provider.resume(by).await;
        assert!(
            matches!(&resumed, Err(SandboxError::Refused(m)) if m.contains("full")),
            "{by}: {:?}",
            resumed.map(|h| h.map(|h| h.id().to_string()))
        );
        assert!(
            matches!(provider.destroy(by).await, Err(SandboxError::Refused(_))),
            "{by}"
        );
    }
    assert!(
        is_running(&id).await,
        "a container named loosely was stopped"
    );
    remove(&id).await;
}

#[tokio::test]
async fn strict_mode_refuses_an_unlabelled_container_even_by_its_full_id_and_leaves_it_running() {
    let Some((_, image)) = docker().await else {
        return;
    };
    let (host, _) = common::docker_env().unwrap();
    let mut options = DockerProviderOptions::from_host(&host).unwrap();
    options.require_label = true;
    let strict = DockerProvider::connect(options).await.unwrap();
    let id = unlabelled_container(&image).await;
    assert!(matches!(
        strict.resume(&id).await,
        Err(SandboxError::Refused(m)) if m.contains("strict mode") && m.contains(SANDBOX_LABEL)
    ));
    assert!(matches!(
        strict.destroy(&id).await,
        Err(SandboxError::Refused(_))
    ));
    assert!(
        is_running(&id).await,
        "strict mode stopped an unlabelled container"
    );
    // Its own labelled sandboxes it still serves.
    let own = sandbox(&strict, &image).await;
    assert!(strict.resume(own.id()).await.unwrap().is_some());
    strict.destroy(own.id()).await.unwrap();
    remove(&id).await;
}

#[tokio::test]
async fn engine_api_requests_per_probe_and_reclaim_of_an_unlabelled_container() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let provider = Arc::new(provider);
    let id = unlabelled_container(&image).await;
    let run = format!("dk-unlabelled-cost-{}", unique());
    let handle = provider.open(&id).await.unwrap().unwrap();
    run_agent(&handle, &run, "echo '{\"delta\":\"1\"}'").await;
    let store = Arc::new(MemoryStore::new());
    detached(&store, "docker", &handle, &run).await;

    let before = provider.request_counts();
    let probe = JournalExitProbe::new(provider.clone(), store.clone(), ProbeOptions::default());
    let record = RunStore::get(store.as_ref(), &run).await.unwrap().unwrap();
    assert_eq!(
        probe.has_finished(&record).await.unwrap(),
        RunExitProbe::Finished { exit_code: 0 }
    );
    let probed = provider.request_counts().since(&before);

    let mut record = record;
    record.status = RunStatus::Completed;
    store.put_run(record.clone());
    let before = provider.request_counts();
    let reclaimer = SandboxReclaimer {
        provider: provider.clone(),
        instances: store.clone(),
        runs: store.clone(),
    };
    let reclaimed = reclaimer
        .reclaim(&record, &ReclaimIntent::new(&record, now_ms()))
        .await
        .unwrap();
    assert_eq!(reclaimed, Reclaimed::Destroyed);
    let reclaim = provider.request_counts().since(&before);
    eprintln!("docker (unlabelled): probe costs {probed}, reclaim costs {reclaim}");
    // The same as a labelled sandbox's: the label is read from the one inspect.
    assert_eq!(probed.inspect_container, 1, "{probed}");
    assert_eq!(probed.create_exec, probed.start_exec);
    assert_eq!(
        (
            reclaim.inspect_container,
            reclaim.remove_container,
            reclaim.total()
        ),
        (1, 1, 2)
    );
}

#[tokio::test]
async fn a_stopped_sandbox_is_gone_for_resume_and_exec_and_destroy_still_removes_it() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let raw = common::raw_client();
    raw.stop_container(sbx.id(), None).await.unwrap();
    assert!(provider.resume(sbx.id()).await.unwrap().is_none());
    assert!(matches!(
        sbx.exec("true", ExecOptions::default()).await,
        Err(SandboxError::NotFound(_))
    ));
    provider.destroy(sbx.id()).await.unwrap();
    assert!(
        raw.inspect_container(sbx.id(), None).await.is_err(),
        "still there"
    );
}

#[tokio::test]
async fn an_unreachable_daemon_is_an_error_never_gone() {
    let Some(_) = docker().await else { return };
    let dir = tempfile::tempdir().unwrap();
    // A socket file nobody listens on: connection refused.
    let socket = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let provider = common::provider_on(&socket).await;
    let resumed = provider.resume("reaper-anything").await;
    assert!(
        matches!(resumed, Err(SandboxError::Unreachable(_))),
        "{:?}",
        resumed.map(|h| h.is_some())
    );
    let destroyed = provider.destroy("reaper-anything").await;
    assert!(
        matches!(destroyed, Err(SandboxError::Unreachable(_))),
        "{destroyed:?}"
    );
}

#[tokio::test]
async fn a_daemon_failing_the_request_is_an_error_never_gone() {
    let Some(_) = docker().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let provider = common::provider_on(&common::failing_daemon(dir.path())).await;
    let resumed = provider.resume("reaper-anything").await;
    assert!(
        matches!(&resumed, Err(SandboxError::Other(m)) if m.contains("500")),
        "{:?}",
        resumed.map(|h| h.is_some())
    );
    assert!(matches!(
        provider.destroy("reaper-anything").await,
        Err(SandboxError::Other(_))
    ));
}

#[tokio::test]
async fn connecting_to_a_missing_socket_is_a_configuration_error_naming_it() {
    let Some(_) = docker().await else { return };
    let err = DockerProvider::connect(DockerProviderOptions::new("/nonexistent/docker.sock"))
        .await
        .unwrap_err();
    assert!(matches!(err, ConfigError::Connect { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/docker.sock"),
        "{err}"
    );
}

#[tokio::test]
async fn creating_from_an_image_the_daemon_lacks_is_refused_without_pulling() {
    let Some((provider, _)) = docker().await else {
        return;
    };
    let err = provider
        .create(CreateOptions::new("reaper-no-such-image:never"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SandboxError::Refused(m) if m.contains("never pull")),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// H14 and the BusyBox prune/probe, in a BusyBox container, journals in the default directory.

#[tokio::test]
async fn h14_1_and_3_prune_deletes_the_terminal_run_keeps_the_live_one_and_a_stray_file() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let n = unique();
    let (done, live) = (format!("dk-done-{n}"), format!("dk-live-{n}"));
    run_agent(&sbx, &done, "echo '{\"delta\":\"1\"}'; echo warn >&2").await;
    run_agent(&sbx, &live, "echo '{\"delta\":\"1\"}'; echo warn >&2").await;
    let dir = journal_paths(&done, None).unwrap().dir;
    let stray = "reaper-conformance-stray_1.ndjson";
    sh(&sbx, &format!("echo x > {dir}/{stray}")).await;
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));
    runs.put_run(run_record(&live, RunStatus::Running));

    let report = prune_journals(&sbx, &runs, &prune_options()).await;
    assert_eq!(report.deleted, vec![done.clone()]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(
        report.kept,
        vec![
            // Listing order: the stray name sorts before the run's in the C locale.
            KeptJournal {
                run_id: None,
                names: vec![stray.into()],
                reason: KeptReason::UndecodableName,
            },
            KeptJournal {
                run_id: Some(live.clone()),
                names: names(&live),
                reason: KeptReason::NonTerminal,
            },
        ]
    );
    let (d, l) = (
        journal_paths(&done, None).unwrap(),
        journal_paths(&live, None).unwrap(),
    );
    assert!(!file_exists(&sbx, &d.journal).await && !file_exists(&sbx, &d.stderr).await);
    assert!(file_exists(&sbx, &l.journal).await && file_exists(&sbx, &l.stderr).await);

    let again = prune_journals(&sbx, &runs, &prune_options()).await;
    assert!(again.deleted.is_empty() && again.failures.is_empty());
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn h14_6_busybox_age_gate_deletes_the_older_orphan_and_keeps_the_newer_one() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let n = unique();
    let (old, new) = (format!("dk-old-{n}"), format!("dk-new-{n}"));
    run_agent(&sbx, &old, "echo old").await;
    run_agent(&sbx, &new, "echo new").await;
    let old_paths = journal_paths(&old, None).unwrap();
    let old_secs = now_ms() / 1000 - 7_200;
    for path in [&old_paths.journal, &old_paths.stderr] {
        sh(&sbx, &format!("touch -d @{old_secs} {}", shell_quote(path))).await;
    }
    let listing = sh(&sbx, &journal_mtime_list_command(None)).await;
    let MtimeListing::Listed(entries) = parse_mtime_listing(&listing, None) else {
        panic!("no witness line in {listing:?}");
    };
    assert!(entries
        .iter()
        .any(|e| names(&old).contains(&e.name) && e.mtime_ms == old_secs * 1000));
    let options = PruneOptions {
        orphan_ttl_ms: 3_600_000,
        ..prune_options()
    };

    let report = prune_journals(&sbx, &MemoryStore::new(), &options).await;
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert_eq!(report.deleted, vec![old.clone()]);
    assert_eq!(
        report.kept,
        vec![KeptJournal {
            run_id: Some(new.clone()),
            names: names(&new),
            reason: KeptReason::OrphanTooRecent,
        }]
    );
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn h14_9_a_shell_hostile_run_id_cannot_inject_and_is_probed_read_and_pruned() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let n = unique();
    let canary = format!("/tmp/dk-pwn-{n}");
    let run_id = format!("dk-a;touch {canary};b c/d$(x)-{n}");
    run_agent(&sbx, &run_id, "echo '{\"delta\":\"1\"}'; echo boom >&2").await;
    assert!(!file_exists(&sbx, &canary).await, "command injection");
    assert_eq!(
        probe_run_exit(&sbx, &run_id, &ProbeOptions::default()).await,
        RunExitProbe::Finished { exit_code: 0 }
    );
    let runs = MemoryStore::new();
    runs.put_run(run_record(&run_id, RunStatus::Completed));
    let paths = journal_paths(&run_id, None).unwrap();
    let file = paths
        .journal
        .strip_prefix(&format!("{}/", paths.dir))
        .expect("the journal is inside the directory");
    assert!(
        file.ends_with(".ndjson")
            && file
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
        "{file}"
    );
    let sidecar = sh(&sbx, &stderr_tail_command(&paths, 4096).unwrap()).await;
    assert_eq!(decode_base64_text(&sidecar).unwrap(), "boom\n");
    let listed: Vec<String> = sh(&sbx, &format!("ls -1 {}", shell_quote(&paths.dir)))
        .await
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(listed, names(&run_id));
    for name in &listed {
        assert_eq!(
            decode_journal_run_id(name),
            DecodedJournalName::RunId(run_id.clone())
        );
    }
    let report = prune_journals(&sbx, &runs, &prune_options()).await;
    assert_eq!(report.deleted, vec![run_id.clone()]);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(!file_exists(&sbx, &paths.journal).await && !file_exists(&sbx, &paths.stderr).await);
    assert!(!file_exists(&sbx, &canary).await, "command injection");
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn h14_2_a_second_prune_finds_nothing_and_cleanup_of_absent_files_exits_zero() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let done = format!("dk-again-{}", unique());
    run_agent(&sbx, &done, "echo hi").await;
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));
    let first = prune_journals(&sbx, &runs, &prune_options()).await;
    assert_eq!(first.deleted, vec![done.clone()]);

    let second = prune_journals(&sbx, &runs, &prune_options()).await;
    assert_eq!((second.listed, second.run_ids), (0, 0));
    assert!(second.deleted.is_empty() && second.kept.is_empty() && second.failures.is_empty());
    let paths = journal_paths(&done, None).unwrap();
    let cleanup = sbx
        .exec(&journal_cleanup_command(&paths), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(cleanup.exit_code, 0, "{cleanup:?}");
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn h14_4_and_5_the_busybox_mtime_listing_has_its_witness_and_an_empty_directory_prunes_nothing(
) {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let sbx = sandbox(&provider, &image).await;
    let dir = journal_paths("x", None).unwrap().dir;
    sh(&sbx, &format!("mkdir -p {}", shell_quote(&dir))).await;
    let empty = sh(&sbx, &journal_mtime_list_command(None)).await;
    assert_eq!(
        parse_mtime_listing(&empty, None),
        MtimeListing::Listed(Vec::new())
    );
    let report = prune_journals(&sbx, &MemoryStore::new(), &prune_options()).await;
    assert_eq!(report.listed, 0);
    assert_eq!(report.age_gate, AgeGate::Listed);
    assert!(report.deleted.is_empty() && report.failures.is_empty());

    let run = format!("dk-mtime-{}", unique());
    run_agent(&sbx, &run, "echo hi; echo err >&2").await;
    let out = sh(&sbx, &journal_mtime_list_command(None)).await;
    let (secs, witness_dir) = out.lines().next().unwrap().split_once(' ').unwrap();
    assert!(
        !secs.is_empty() && secs.bytes().all(|b| b.is_ascii_digit()),
        "{out}"
    );
    assert_eq!(witness_dir, dir);
    let MtimeListing::Listed(entries) = parse_mtime_listing(&out, None) else {
        panic!("no witness in {out:?}");
    };
    let mut listed: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    listed.sort();
    assert_eq!(listed, names(&run));
    for e in &entries {
        assert!(
            (now_ms() - e.mtime_ms).abs() <= 120_000,
            "{e:?} is not recent"
        );
    }
    provider.destroy(sbx.id()).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// The core's real probe and a sweep end to end.

/// A store holding a detached `running` run whose instance record names `sbx`.
async fn detached(store: &MemoryStore, provider: &str, sbx: &DockerSandbox, run_id: &str) {
    let detached_at = now_ms();
    let mut record = run_record(run_id, RunStatus::Running);
    record.started_at = detached_at - 1_000;
    record.detached_since = Some(detached_at);
    record.sandbox_key = Some(format!("key-{run_id}"));
    store.put_run(record);
    store
        .upsert(SandboxInstanceRecord {
            key: format!("key-{run_id}"),
            provider: provider.into(),
            provider_sandbox_id: sbx.id().into(),
            latest_snapshot_id: None,
            thread_id: "thread".into(),
            latest_run_id: Some(run_id.into()),
            updated_at: detached_at,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn the_journal_exit_probe_reads_finished_producing_and_gone_through_docker() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let provider = Arc::new(provider);
    let store = Arc::new(MemoryStore::new());
    let n = unique();
    let (done, live, gone) = (
        format!("dk-p3-{n}"),
        format!("dk-pl-{n}"),
        format!("dk-pg-{n}"),
    );
    let a = sandbox(&provider, &image).await;
    run_agent(&a, &done, "echo '{\"delta\":\"1\"}'; exit 3").await;
    start_agent(&a, &live, "echo '{\"delta\":\"1\"}'; sleep 600", 1).await;
    let b = sandbox(&provider, &image).await;
    run_agent(&b, &gone, "echo hi").await;
    for (run, sbx) in [(&done, &a), (&live, &a), (&gone, &b)] {
        detached(&store, provider.name(), sbx, run).await;
    }
    provider.destroy(b.id()).await.unwrap();
    let probe = JournalExitProbe::new(provider.clone(), store.clone(), ProbeOptions::default());
    let answer = |run: &str| {
        let (probe, store, run) = (&probe, store.clone(), run.to_string());
        async move {
            let record = RunStore::get(store.as_ref(), &run).await.unwrap().unwrap();
            probe.has_finished(&record).await.unwrap()
        }
    };
    assert_eq!(answer(&done).await, RunExitProbe::Finished { exit_code: 3 });
    assert_eq!(answer(&live).await, RunExitProbe::Producing);
    assert_eq!(answer(&gone).await.state(), "unknown");
    provider.destroy(a.id()).await.unwrap();
}

#[tokio::test]
async fn a_sweep_finalizes_a_finished_run_reclaims_its_container_and_leaves_a_live_one_alone() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let provider = Arc::new(provider);
    let store = Arc::new(MemoryStore::new());
    let n = unique();
    let (done, live) = (format!("dk-sweep-done-{n}"), format!("dk-sweep-live-{n}"));
    let finished = sandbox(&provider, &image).await;
    run_agent(
        &finished,
        &done,
        "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
    )
    .await;
    let working = sandbox(&provider, &image).await;
    start_agent(&working, &live, "echo '{\"delta\":\"1\"}'; sleep 600", 1).await;
    detached(&store, provider.name(), &finished, &done).await;
    detached(&store, provider.name(), &working, &live).await;
    let live_detached_since = RunStore::get(store.as_ref(), &live)
        .await
        .unwrap()
        .unwrap()
        .detached_since;

    let dyn_provider: Arc<dyn SandboxProvider> = provider.clone();
    let drive = JournalReplayDrive::new(
        ReplayDeps {
            runs: store.clone(),
            instances: store.clone(),
            provider: dyn_provider.clone(),
            logs: store.clone(),
            messages: store.clone(),
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
        },
        ReplayOptions::default(),
    );
    let deps = ReapDeps {
        runs: store.clone(),
        logs: store.clone(),
        leases: store.clone(),
        ledger: store.clone(),
        probe: Arc::new(JournalExitProbe::new(
            dyn_provider.clone(),
            store.clone(),
            ProbeOptions::default(),
        )),
        drive: Arc::new(drive),
        reclaim: Some(Arc::new(SandboxReclaimer {
            provider: dyn_provider,
            instances: store.clone(),
            runs: store.clone(),
        })),
        clock: Arc::new(SystemClock),
        sleeper: Arc::new(TokioSleeper),
        damage: Default::default(),
    };
    let mut options = ReapOptions::new(3_600_000, format!("docker-sweep-{n}"));
    options.fence_quiet_ms = 25;
    let before = provider.request_counts();

    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = provider.request_counts().since(&before);
    eprintln!("docker: a sweep of one finished and one live run cost {cost}");
    assert_eq!(report.considered, 2);
    let entry = |run: &str| report.runs.iter().find(|e| e.run_id == run).unwrap();
    assert_eq!(entry(&done).outcome, ReapOutcome::Finalized);
    assert_eq!(entry(&done).status, Some(RunStatus::Completed));
    assert_eq!(entry(&done).sandbox, Some(SandboxFate::Destroyed));
    assert_eq!(entry(&live).outcome, ReapOutcome::Producing);
    let transcript = store.get_transcript(&done).await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "123");
    // H14.8: a producing run is left completely untouched.
    let untouched = RunStore::get(store.as_ref(), &live).await.unwrap().unwrap();
    assert_eq!(untouched.status, RunStatus::Running);
    assert_eq!(
        untouched.driver_epoch, None,
        "a producing run is not even claimed"
    );
    assert_eq!(untouched.detached_since, live_detached_since);
    assert!(
        provider.resume(finished.id()).await.unwrap().is_none(),
        "the finished run's container was not reclaimed"
    );
    assert!(
        provider.resume(working.id()).await.unwrap().is_some(),
        "the live run's container was destroyed"
    );
    assert_eq!(
        sh(&working, "ps | grep -c ' sleep 600$'").await,
        "1\n",
        "the live agent is no longer running"
    );
    assert_eq!(cost.remove_container, 1, "{cost}");
    provider.destroy(working.id()).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// What each operation costs the daemon.

#[tokio::test]
async fn engine_api_requests_per_resume_exec_probe_and_reclaim() {
    let Some((provider, image)) = docker().await else {
        return;
    };
    let provider = Arc::new(provider);
    let store = Arc::new(MemoryStore::new());
    let sbx = sandbox(&provider, &image).await;
    let run = format!("dk-cost-{}", unique());
    run_agent(&sbx, &run, "echo '{\"delta\":\"1\"}'").await;
    detached(&store, provider.name(), &sbx, &run).await;
    let measure = |before: RequestCounts| provider.request_counts().since(&before);

    let before = provider.request_counts();
    provider.resume(sbx.id()).await.unwrap().unwrap();
    let resume = measure(before);

    let before = provider.request_counts();
    sh(&sbx, "true").await;
    let exec = measure(before);

    let before = provider.request_counts();
    let probe = JournalExitProbe::new(provider.clone(), store.clone(), ProbeOptions::default());
    let record = RunStore::get(store.as_ref(), &run).await.unwrap().unwrap();
    let answer = probe.has_finished(&record).await.unwrap();
    assert_eq!(answer, RunExitProbe::Finished { exit_code: 0 });
    let probed = measure(before);

    let before = provider.request_counts();
    let reclaimer = SandboxReclaimer {
        provider: provider.clone(),
        instances: store.clone(),
        runs: store.clone(),
    };
    // The run became terminal: its sandbox may go.
    let mut record = record;
    record.status = RunStatus::Completed;
    store.put_run(record.clone());
    let reclaimed = reclaimer
        .reclaim(&record, &ReclaimIntent::new(&record, now_ms()))
        .await
        .unwrap();
    assert_eq!(reclaimed, Reclaimed::Destroyed);
    let reclaim = measure(before);

    let before = provider.request_counts();
    provider.destroy(sbx.id()).await.unwrap();
    let destroy_gone = measure(before);

    eprintln!("docker: resume costs {resume}");
    eprintln!("docker: exec costs {exec}");
    eprintln!("docker: probe (JournalExitProbe, finished run) costs {probed}");
    eprintln!("docker: reclaim (SandboxReclaimer, live sandbox) costs {reclaim}");
    eprintln!("docker: destroy of a gone sandbox costs {destroy_gone}");
    assert_eq!(resume.total(), 1);
    assert_eq!(resume.inspect_container, 1);
    assert_eq!((exec.create_exec, exec.start_exec), (1, 1));
    assert!(exec.inspect_exec >= 1 && exec.total() == 2 + exec.inspect_exec);
    assert_eq!(probed.inspect_container, 1);
    assert!(probed.create_exec >= 1);
    assert_eq!(probed.create_exec, probed.start_exec);
    assert_eq!(
        (
            reclaim.inspect_container,
            reclaim.remove_container,
            reclaim.total()
        ),
        (1, 1, 2)
    );
    assert_eq!(
        (destroy_gone.inspect_container, destroy_gone.total()),
        (1, 1)
    );
}

#[tokio::test]
async fn engine_api_requests_per_prune_of_a_sandbox() {
    let Some((_, image)) = docker().await else {
        return;
    };
    let (host, _) = common::docker_env().unwrap();
    // A name of its own, so the listing holds exactly this test's sandbox.
    let provider_name = format!("docker-prune-cost-{}", unique());
    let own = common::connect(&host, Some(&provider_name)).await;
    let sbx = sandbox(&own, &image).await;
    let n = unique();
    let (done, live) = (format!("dk-pc-done-{n}"), format!("dk-pc-live-{n}"));
    run_agent(&sbx, &done, "echo '{\"delta\":\"1\"}'").await;
    run_agent(&sbx, &live, "echo '{\"delta\":\"1\"}'").await;
    let runs = MemoryStore::new();
    runs.put_run(run_record(&done, RunStatus::Completed));
    runs.put_run(run_record(&live, RunStatus::Running));
    let before = own.request_counts();

    // What `reaper prune` does per Docker provider: list, then open and prune each sandbox.
    let ids = own.list().await.unwrap();
    assert_eq!(ids, vec![sbx.container_id().to_string()]);
    let opened = own.open(&ids[0]).await.unwrap().unwrap();
    let report = prune_journals(&opened, &runs, &prune_options()).await;
    let cost = own.request_counts().since(&before);

    eprintln!("docker: prune of one sandbox (1 deletable run, 1 kept) costs {cost}");
    assert_eq!(report.deleted, vec![done]);
    assert_eq!((cost.list_containers, cost.inspect_container), (1, 1));
    // One listing (names and ages: the orphan age gate) and one delete batch.
    assert_eq!(cost.create_exec, 2, "{cost}");
    assert_eq!(cost.create_exec, cost.start_exec);
    own.destroy(sbx.id()).await.unwrap();
}
