//! The local provider against real processes and a real filesystem.

mod common;

use std::time::Duration;

use common::{eventually, process_dead, provider, sandbox, sh};
use reaper_core::{ExecOptions, SandboxError, SandboxHandle, SandboxProvider};
use reaper_local::{CreateOptions, LocalProviderOptions, LocalSandboxProvider, DESTROY_FAILS_FLAG};

#[tokio::test]
async fn created_sandbox_has_work_and_journal_dirs_and_is_resumable_by_id() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    assert!(sbx.id().starts_with("sbx-"));
    assert!(sbx.work_dir().is_dir());
    assert_eq!(
        sbx.journal_dir(),
        sbx.dir().join("journals").to_str().unwrap()
    );
    assert!(std::path::Path::new(sbx.journal_dir()).is_dir());
    let meta = sbx.metadata().await.unwrap();
    assert_eq!(meta.id, sbx.id());
    assert!(meta.agents.is_empty());

    let resumed = provider
        .resume(sbx.id())
        .await
        .unwrap()
        .expect("live sandbox");
    assert_eq!(resumed.id(), sbx.id());
    assert_eq!(provider.name(), "local");
}

#[tokio::test]
async fn two_sandboxes_get_distinct_ids_and_directories() {
    let (_root, provider) = provider();
    let a = sandbox(&provider).await;
    let b = sandbox(&provider).await;
    assert_ne!(a.id(), b.id());
    assert_ne!(a.journal_dir(), b.journal_dir());
}

#[tokio::test]
async fn journal_dir_and_provider_name_are_configurable() {
    let root = tempfile::tempdir().unwrap();
    let mut options = LocalProviderOptions::new(root.path().join("s"));
    options.name = "local-test".into();
    let provider = LocalSandboxProvider::new(options);
    let journals = root
        .path()
        .join("my journals")
        .to_str()
        .unwrap()
        .to_string();
    let sbx = provider
        .create(CreateOptions {
            journal_dir: Some(journals.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(provider.name(), "local-test");
    assert_eq!(sbx.journal_dir(), journals);
    assert!(root.path().join("my journals").is_dir());
    let reopened = provider.open(sbx.id()).await.unwrap().unwrap();
    assert_eq!(reopened.journal_dir(), journals);
}

#[tokio::test]
async fn resume_of_a_missing_sandbox_is_none() {
    let (_root, provider) = provider();
    assert!(provider
        .resume("sbx-0000000000000000")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn hostile_sandbox_ids_are_refused_and_never_joined_to_a_path() {
    let (root, provider) = provider();
    // A real directory the traversal would reach if the id were joined.
    let victim = root.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("sandbox.json"), "{}").unwrap();
    for id in ["../victim", "..", "a/b", "x;rm -rf /", "", ".hidden"] {
        assert!(
            matches!(provider.resume(id).await, Err(SandboxError::Refused(_))),
            "resume accepted {id:?}"
        );
        assert!(
            matches!(provider.destroy(id).await, Err(SandboxError::Refused(_))),
            "destroy accepted {id:?}"
        );
    }
    assert!(victim.join("sandbox.json").exists());
}

#[tokio::test]
async fn exec_runs_sh_in_the_work_dir_with_a_clean_environment() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    std::env::set_var("REAPER_LOCAL_LEAK_CHECK", "leaked");
    let out = sbx
        .exec(
            "pwd; echo \"leak=${REAPER_LOCAL_LEAK_CHECK:-none}\"; echo \"$PATH\"; echo oops >&2; exit 7",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        std::path::Path::new(lines[0]).canonicalize().unwrap(),
        sbx.work_dir().canonicalize().unwrap()
    );
    assert_eq!(lines[1], "leak=none");
    assert_eq!(lines[2], reaper_local::DEFAULT_SANDBOX_PATH);
    assert_eq!(out.stderr, "oops\n");
    assert_eq!(out.exit_code, 7);
}

#[tokio::test]
async fn exec_decodes_invalid_utf8_lossily() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let out = sh(&sbx, "printf 'caf\\303\\251 \\377!'").await;
    assert_eq!(out, "café \u{fffd}!");
}

#[tokio::test]
async fn exec_past_its_timeout_kills_the_whole_process_group() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let started = std::time::Instant::now();
    let result = sbx
        .exec(
            "sleep 60 >/dev/null 2>&1 & echo $! > bg.pid; sleep 60",
            ExecOptions { timeout_ms: 300 },
        )
        .await;
    assert!(
        matches!(result, Err(SandboxError::Timeout(300))),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let bg: u32 = std::fs::read_to_string(sbx.work_dir().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || process_dead(bg)).await,
        "the background child of a timed-out command survived"
    );
}

#[tokio::test]
async fn exec_output_over_the_limit_is_an_error_not_a_truncation() {
    let root = tempfile::tempdir().unwrap();
    let mut options = LocalProviderOptions::new(root.path());
    options.output_limit = 1000;
    let provider = LocalSandboxProvider::new(options);
    let sbx = sandbox(&provider).await;
    let exact = sbx
        .exec("head -c 1000 /dev/zero", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(exact.stdout.len(), 1000);
    let over = sbx
        .exec("head -c 1001 /dev/zero", ExecOptions::default())
        .await;
    match over {
        Err(SandboxError::OutputLimit { stream, limit }) => {
            assert_eq!((stream.as_str(), limit), ("stdout", 1000))
        }
        other => panic!("expected an output-limit error, got {other:?}"),
    }
    let over_stderr = sbx
        .exec("yes >&2", ExecOptions { timeout_ms: 10_000 })
        .await;
    assert!(
        matches!(&over_stderr, Err(SandboxError::OutputLimit { stream, .. }) if stream == "stderr"),
        "{over_stderr:?}"
    );
}

#[tokio::test]
async fn sandbox_path_is_configurable_per_sandbox() {
    let (root, provider) = provider();
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let sbx = provider
        .create(CreateOptions {
            path: Some(path.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(sh(&sbx, "echo \"$PATH\"").await.trim_end(), path);
    let resumed = provider.resume(sbx.id()).await.unwrap().unwrap();
    assert_eq!(
        sh(resumed.as_ref(), "echo \"$PATH\"").await.trim_end(),
        path
    );
}

#[tokio::test]
async fn started_agent_writes_a_real_journal_and_keeps_running_after_the_call() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    // The agent blocks on a fifo: it is still running after start_agent returned.
    let fifo = sbx.work_dir().join("ready.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut agent = sbx
        .start_agent(
            "run-1",
            "echo '{\"delta\":\"1\"}'; read _ < ready.fifo; echo late",
            None,
        )
        .await
        .unwrap();
    let journal = std::path::Path::new(sbx.journal_dir()).join("run-1.ndjson");
    assert!(common::wait_for_lines(&journal, 1).await);
    assert!(!process_dead(agent.pid));
    // The recorded group is its keeper's, and the agent is in it.
    let recorded = sbx.metadata().await.unwrap().agents[0].pgid;
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", agent.pid)).unwrap();
    let pgrp: i32 = stat
        .rsplit_once(") ")
        .unwrap()
        .1
        .split(' ')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(pgrp, recorded);
    std::fs::write(&fifo, "go\n").unwrap();
    assert_eq!(agent.wait().await.unwrap(), 0);
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "{\"delta\":\"1\"}");
    assert_eq!(lines[1], "late");
    assert!(lines[2].starts_with("{\"__exit\":0,\"__nonce\":"));
    let meta = sbx.metadata().await.unwrap();
    assert_eq!(meta.agents.len(), 1);
    assert_eq!(meta.agents[0].run_id, "run-1");
    assert_eq!(meta.agents[0].pid, agent.pid);
}

#[tokio::test]
async fn destroy_kills_every_agent_process_group_and_removes_the_directory() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    // A grandchild that ignores nothing but outlives its parent shell unless the group dies.
    let agent = sbx
        .start_agent("run-k", "sleep 60 & echo $! > child.pid; wait", None)
        .await
        .unwrap();
    let pid_file = sbx.work_dir().join("child.pid");
    assert!(
        eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
        })
        .await
    );
    let child: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    provider.destroy(sbx.id()).await.unwrap();
    assert!(process_dead(agent.pid), "agent leader survived destroy");
    assert!(process_dead(child), "agent's child survived destroy");
    assert!(!sbx.dir().exists());
    assert!(provider.resume(sbx.id()).await.unwrap().is_none());
}

#[tokio::test]
async fn destroy_escalates_to_sigkill_for_an_agent_that_ignores_sigterm() {
    let root = tempfile::tempdir().unwrap();
    let mut options = LocalProviderOptions::new(root.path());
    options.kill_grace = Duration::from_millis(200);
    let provider = LocalSandboxProvider::new(options);
    let sbx = sandbox(&provider).await;
    sbx.start_agent(
        "stubborn",
        "exec sh -c 'trap \"\" TERM; echo $$ > stubborn.pid; while :; do sleep 1; done'",
        None,
    )
    .await
    .unwrap();
    let pid_file = sbx.work_dir().join("stubborn.pid");
    assert!(
        eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
        })
        .await
    );
    let stubborn: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    provider.destroy(sbx.id()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || process_dead(stubborn)).await,
        "a process ignoring SIGTERM survived destroy"
    );
    assert!(!sbx.dir().exists());
}

#[tokio::test]
async fn destroying_a_missing_sandbox_is_ok_and_idempotent() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    provider.destroy(sbx.id()).await.unwrap();
    provider.destroy(sbx.id()).await.unwrap();
    provider.destroy("sbx-ffffffffffffffff").await.unwrap();
}

#[tokio::test]
async fn destroy_fails_flag_makes_destroy_refuse_and_leaves_everything_running() {
    let (_root, provider) = provider();
    let provider = provider.honoring_destroy_fails_flag();
    let sbx = sandbox(&provider).await;
    let agent = sbx.start_agent("run-f", "sleep 60", None).await.unwrap();
    std::fs::write(sbx.dir().join(DESTROY_FAILS_FLAG), "").unwrap();
    let err = provider.destroy(sbx.id()).await.unwrap_err();
    assert!(
        matches!(err, SandboxError::Refused(ref m) if m.contains(DESTROY_FAILS_FLAG)),
        "{err}"
    );
    assert!(!process_dead(agent.pid));
    assert!(sbx.dir().exists());
    std::fs::remove_file(sbx.dir().join(DESTROY_FAILS_FLAG)).unwrap();
    provider.destroy(sbx.id()).await.unwrap();
    assert!(process_dead(agent.pid));
}

#[tokio::test]
async fn destroy_kills_an_exec_still_running_in_the_sandbox() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let running = {
        let sbx = sbx.clone();
        tokio::spawn(async move {
            sbx.exec(
                "echo $$ > exec.pid; exec sleep 60",
                ExecOptions { timeout_ms: 60_000 },
            )
            .await
        })
    };
    let pid_file = sbx.work_dir().join("exec.pid");
    assert!(
        eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
        })
        .await
    );
    provider.destroy(sbx.id()).await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("exec returned after destroy")
        .unwrap()
        .unwrap();
    assert_eq!(out.exit_code, 128 + 15);
}

#[tokio::test]
async fn exec_in_a_destroyed_sandbox_is_not_found() {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    provider.destroy(sbx.id()).await.unwrap();
    assert!(matches!(
        sbx.exec("true", ExecOptions::default()).await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        sbx.start_agent("r", "true", None).await,
        Err(SandboxError::NotFound(_))
    ));
}

#[test]
fn a_started_agent_outlives_the_runtime_that_started_it() {
    let (_root, provider) = provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (sbx, pid) = runtime.block_on(async {
        let sbx = sandbox(&provider).await;
        let fifo = sbx.work_dir().join("gate.fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let agent = sbx
            .start_agent("outlives", "read _ < gate.fifo; echo after", None)
            .await
            .unwrap();
        (sbx, agent.pid)
    });
    drop(runtime);
    assert!(!process_dead(pid), "the agent died with the runtime");
    std::fs::write(sbx.work_dir().join("gate.fifo"), "go\n").unwrap();
    let journal = std::path::Path::new(sbx.journal_dir()).join("outlives.ndjson");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        if text.contains("__exit") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(text.starts_with("after\n{\"__exit\":0,"), "{text:?}");
}

#[tokio::test]
async fn an_agent_cannot_make_its_own_destroy_fail_by_writing_the_fault_flag() {
    let (_root, provider) = provider();
    assert!(!provider.options().destroy_fails_flag, "off by default");
    let sbx = sandbox(&provider).await;
    // What a hostile agent would do from its working directory.
    let agent = sbx
        .start_agent("run-hostile", "touch ../.destroy-fails; sleep 60", None)
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || sbx
            .dir()
            .join(DESTROY_FAILS_FLAG)
            .exists())
        .await
    );
    provider.destroy(sbx.id()).await.unwrap();
    assert!(!sbx.dir().exists());
    assert!(eventually(Duration::from_secs(10), || process_dead(agent.pid)).await);
}

/// Runs `script` (which must print the pid to kill as its only stdout) through `exec`, checks
/// the process outlives the exec, destroys the sandbox and checks the process is gone.
async fn destroy_kills_what_an_exec_left_behind(script: &str) {
    let (_root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let out = sbx
        .exec(script, ExecOptions { timeout_ms: 10_000 })
        .await
        .unwrap();
    let pid: u32 = out
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{script}: printed {:?}", out.stdout));
    assert!(!process_dead(pid), "{script}: nothing was left behind");
    provider.destroy(sbx.id()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || process_dead(pid)).await,
        "{script}: pid {pid} survived destroy"
    );
}

#[tokio::test]
async fn destroy_kills_a_process_an_exec_backgrounded() {
    destroy_kills_what_an_exec_left_behind("sleep 1000 >/dev/null 2>&1 & echo $!").await;
}

#[tokio::test]
async fn destroy_kills_a_nohup_process_an_exec_backgrounded() {
    destroy_kills_what_an_exec_left_behind("nohup sleep 1000 >/dev/null 2>&1 & echo $!").await;
}

#[tokio::test]
async fn destroy_kills_a_setsid_process_that_left_the_exec_group() {
    // A new session and group: only the sandbox's marker variable (and its cwd) still tie it to
    // the sandbox.
    destroy_kills_what_an_exec_left_behind(
        "setsid sh -c 'echo $$ > setsid.pid; exec sleep 1000' >/dev/null 2>&1 < /dev/null & \
         while [ ! -s setsid.pid ]; do sleep 0.01; done; cat setsid.pid",
    )
    .await;
}

#[tokio::test]
async fn destroy_kills_a_daemon_that_cleared_its_environment_but_works_in_the_sandbox() {
    destroy_kills_what_an_exec_left_behind(
        "setsid env -i /bin/sh -c 'echo $$ > d.pid; exec sleep 1000' >/dev/null 2>&1 < /dev/null & \
         while [ ! -s d.pid ]; do sleep 0.01; done; cat d.pid",
    )
    .await;
}

#[tokio::test]
async fn destroy_leaves_processes_of_other_sandboxes_alone() {
    let (_root, provider) = provider();
    let doomed = sandbox(&provider).await;
    let other = sandbox(&provider).await;
    let out = other
        .exec(
            "setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo $!",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    let bystander: u32 = out.stdout.trim().parse().unwrap();
    doomed
        .exec(
            "sleep 1000 >/dev/null 2>&1 & echo $!",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    provider.destroy(doomed.id()).await.unwrap();
    assert!(
        !process_dead(bystander),
        "another sandbox's process was killed"
    );
    provider.destroy(other.id()).await.unwrap();
    assert!(eventually(Duration::from_secs(10), || process_dead(bystander)).await);
}

#[tokio::test]
async fn a_huge_output_fails_at_the_limit_without_reading_it_all() {
    let root = tempfile::tempdir().unwrap();
    let mut options = LocalProviderOptions::new(root.path());
    options.output_limit = 1024 * 1024;
    let provider = LocalSandboxProvider::new(options);
    let sbx = sandbox(&provider).await;
    // One 100 MB line, with a marker written only if the whole of it was consumed.
    let result = sbx
        .exec(
            "head -c 100000000 /dev/zero | tr '\\0' a && touch all-written",
            ExecOptions { timeout_ms: 60_000 },
        )
        .await;
    assert!(
        matches!(&result, Err(SandboxError::OutputLimit { stream, limit }) if stream == "stdout" && *limit == 1024 * 1024),
        "{result:?}"
    );
    assert!(
        !sbx.work_dir().join("all-written").exists(),
        "the command was left to print everything"
    );
}
