//! `DELETE /v1/sandboxes/{id}` on a local sandbox kills what it started however it got away: a
//! new session, a double fork, a changed directory, a cleared environment.

mod common;

use common::{sandbox, Daemon};
use reaper_core::{ExecOptions, SandboxHandle, SandboxProvider};
use reaper_e2e::escape::{
    Escape, Escaped, DOUBLE_FORK, ENV_CLEARED_FIRST, SETSID, SETSID_DOUBLE_FORK,
};

async fn delete_kills_an_exec_escape(escape: Escape) {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    let sbx = sandbox(&provider, &tmp.path().join("journals")).await;
    let pid_file = escape.pid_file(tmp.path());
    let out = sbx
        .exec(&escape.command(&pid_file), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{}: {out:?}", escape.name);
    let leaf = Escaped::wait(&pid_file).await;
    provider.destroy(sbx.id()).await.unwrap();
    assert!(
        leaf.dead(),
        "{}: pid {} survived a DELETE answered with success",
        escape.name,
        leaf.pid
    );
    assert!(provider.resume(sbx.id()).await.unwrap().is_none());
}

#[tokio::test]
async fn delete_kills_an_exec_that_escaped_by_setsid_cd_root_and_env_i() {
    delete_kills_an_exec_escape(SETSID).await;
}

#[tokio::test]
async fn delete_kills_an_exec_that_escaped_by_a_double_fork_cd_root_and_env_i() {
    delete_kills_an_exec_escape(DOUBLE_FORK).await;
}

#[tokio::test]
async fn delete_kills_an_exec_that_escaped_by_setsid_and_a_double_fork() {
    delete_kills_an_exec_escape(SETSID_DOUBLE_FORK).await;
}

#[tokio::test]
async fn delete_kills_an_exec_that_cleared_its_environment_and_left_before_setsid() {
    delete_kills_an_exec_escape(ENV_CLEARED_FIRST).await;
}
