//! `reaper sweep` reclaims a local sandbox and kills what its agent left behind however it got
//! away: a new session, a double fork, a changed directory, a cleared environment. The agent
//! was started by this test process; the sweep is another process with nothing in memory.

mod common;

use common::{run, Site, HELLO, MINUTE};
use reaper_e2e::escape::{
    Escape, Escaped, DOUBLE_FORK, ENV_CLEARED_FIRST, SETSID, SETSID_DOUBLE_FORK,
};

async fn sweep_kills_what_a_finished_agent_left(escape: Escape) {
    let site = Site::new();
    let pid_file = escape.pid_file(site.tmp.path());
    // A newline, not a space: some kinds end in `&`, others do not.
    let agent = format!("{}\n{HELLO}", escape.command(&pid_file));
    let sandbox = site
        .detached_run("run-escape", Some(&agent), true, MINUTE)
        .await;
    let leaf = Escaped::wait(&pid_file).await;

    let (code, stdout, stderr) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "10m", "--quiet-window", "0ms"]));

    assert_eq!(
        code, 0,
        "{}: stdout:\n{stdout}\nstderr:\n{stderr}",
        escape.name
    );
    assert!(
        !site.sandbox_exists(&sandbox).await,
        "{}: {stdout}",
        escape.name
    );
    assert!(
        leaf.dead(),
        "{}: pid {} survived a sweep that reclaimed its sandbox",
        escape.name,
        leaf.pid
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_kills_an_agent_escape_by_setsid_cd_root_and_env_i() {
    sweep_kills_what_a_finished_agent_left(SETSID).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_kills_an_agent_escape_by_a_double_fork_cd_root_and_env_i() {
    sweep_kills_what_a_finished_agent_left(DOUBLE_FORK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_kills_an_agent_escape_by_setsid_and_a_double_fork() {
    sweep_kills_what_a_finished_agent_left(SETSID_DOUBLE_FORK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_kills_an_agent_escape_that_cleared_its_environment_and_left_before_setsid() {
    sweep_kills_what_a_finished_agent_left(ENV_CLEARED_FIRST).await;
}
