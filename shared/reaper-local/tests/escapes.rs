//! Destroy kills what a sandbox started however it got away: a new session, a double fork, a
//! changed directory, a cleared environment; from an exec or an agent; in this process or in a
//! later one (the CLI's case: one `reaper` starts, another destroys).

mod common;

use common::{provider, sandbox};
use reaper_core::{ExecOptions, SandboxHandle, SandboxProvider};
use reaper_e2e::escape::{
    Escape, Escaped, DOUBLE_FORK, ENV_CLEARED_FIRST, SETSID, SETSID_DOUBLE_FORK,
};
use reaper_local::LocalSandboxProvider;

/// Runs `escape` as an exec, waits until its leaf has left, destroys the sandbox through a
/// provider built afresh on the same root when `fresh_provider` (nothing in memory), and checks
/// the leaf is dead.
async fn destroy_kills_an_exec_escape(escape: Escape, fresh_provider: bool) {
    let (root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let pid_file = escape.pid_file(root.path());
    let out = sbx
        .exec(&escape.command(&pid_file), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{}: {out:?}", escape.name);
    let leaf = Escaped::wait(&pid_file).await;
    let destroyer = if fresh_provider {
        LocalSandboxProvider::with_root(provider.root())
    } else {
        provider.clone()
    };
    destroyer.destroy(sbx.id()).await.unwrap();
    assert!(
        leaf.dead(),
        "{}: pid {} survived a destroy that reported success",
        escape.name,
        leaf.pid
    );
    assert!(provider.open(sbx.id()).await.unwrap().is_none());
}

#[tokio::test]
async fn destroy_kills_an_exec_that_escaped_by_setsid_cd_root_and_env_i() {
    destroy_kills_an_exec_escape(SETSID, false).await;
}

#[tokio::test]
async fn destroy_kills_an_exec_that_escaped_by_a_double_fork_cd_root_and_env_i() {
    destroy_kills_an_exec_escape(DOUBLE_FORK, false).await;
}

#[tokio::test]
async fn destroy_kills_an_exec_that_escaped_by_setsid_and_a_double_fork() {
    destroy_kills_an_exec_escape(SETSID_DOUBLE_FORK, false).await;
}

#[tokio::test]
async fn destroy_kills_an_exec_that_cleared_its_environment_and_left_before_setsid() {
    destroy_kills_an_exec_escape(ENV_CLEARED_FIRST, false).await;
}

#[tokio::test]
async fn a_later_process_destroy_kills_every_escape_an_earlier_process_left() {
    for escape in [SETSID, DOUBLE_FORK, SETSID_DOUBLE_FORK, ENV_CLEARED_FIRST] {
        destroy_kills_an_exec_escape(escape, true).await;
    }
}

#[tokio::test]
async fn destroy_kills_what_a_finished_agent_left_by_setsid_cd_root_and_env_i() {
    let (root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let pid_file = SETSID.pid_file(root.path());
    let agent = format!(
        "{} echo '{{\"delta\":\"done\"}}'",
        SETSID.command(&pid_file)
    );
    let mut started = sbx.start_agent("run-escape", &agent, None).await.unwrap();
    assert_eq!(started.wait().await.unwrap(), 0);
    let leaf = Escaped::wait(&pid_file).await;
    LocalSandboxProvider::with_root(provider.root())
        .destroy(sbx.id())
        .await
        .unwrap();
    assert!(leaf.dead(), "pid {} survived destroy", leaf.pid);
}

#[tokio::test]
async fn an_exec_timeout_kills_what_the_command_started_wherever_it_went() {
    let (root, provider) = provider();
    let sbx = sandbox(&provider).await;
    let pid_file = SETSID.pid_file(root.path());
    // The command waits for its escape to have left, then outlives its timeout.
    let script = format!(
        "{} while [ ! -s {p} ]; do sleep 0.01; done; sleep 1000",
        SETSID.command(&pid_file),
        p = pid_file.display()
    );
    let timeout_ms = 120_000;
    let exec = sbx.exec(&script, ExecOptions { timeout_ms });
    let leaf = tokio::select! {
        leaf = Escaped::wait(&pid_file) => leaf,
        out = exec => panic!("the command ended first: {out:?}"),
    };
    // Dropping the exec (as a timeout does) kills everything below its keeper.
    assert!(
        common::eventually(std::time::Duration::from_secs(60), || leaf.dead()).await,
        "pid {} outlived its abandoned command",
        leaf.pid
    );
    provider.destroy(sbx.id()).await.unwrap();
}
