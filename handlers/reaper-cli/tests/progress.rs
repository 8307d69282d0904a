//! Progress during a long sweep, through the real binary: a spinner on a terminal (a real
//! pseudo-terminal), and `watch`'s line when a sweep runs past `--progress-after`. The timing
//! rules themselves are tested in virtual time in `src/progress.rs`; here every wait is for a
//! line, and the long step lasts its 10-minute budget, far past the 1 s threshold, whatever the
//! machine's speed.

mod common;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::Duration;

use common::{Site, Spawned, HELLO, MINUTE, TICKING};
use nix::sys::signal::Signal;
use serde_json::Value;

const GUARD: Duration = Duration::from_secs(300);

fn pty() -> (OwnedFd, std::fs::File) {
    let nix::pty::OpenptyResult { master, slave } = nix::pty::openpty(None, None).expect("openpty");
    (slave, std::fs::File::from(master))
}

/// A sweep of one finished run with stderr on a terminal of type `term`: what it drew there.
async fn sweep_on_a_terminal(term: &str) -> String {
    let site = Site::new();
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let (slave, mut master) = pty();
    let mut cmd = site.reaper("sweep");
    cmd.args([
        "--detached-ttl",
        "30m",
        "--quiet-window",
        "0ms",
        "--log",
        "off",
    ])
    .env("TERM", term)
    .stdout(Stdio::null())
    .stderr(Stdio::from(slave.try_clone().unwrap()));
    let mut child = cmd.spawn().expect("reaper runs");
    drop(cmd);
    drop(slave);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            // Linux answers EIO once the program exited and closed the terminal.
            Err(e) if e.raw_os_error() == Some(nix::libc::EIO) => break,
            Err(e) => panic!("reading the terminal: {e}"),
        }
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    site.teardown().await;
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_on_a_terminal_shows_a_spinner_with_its_run_steps() {
    let screen = sweep_on_a_terminal("xterm-256color").await;
    assert!(
        screen.contains("run step(s) · probing run run-done"),
        "no spinner line on the terminal: {screen:?}"
    );
    // The spinner is drawn and cleared in place: erase-line sequences, not plain lines.
    assert!(screen.contains("\u{1b}["), "{screen:?}");
    assert!(
        !screen.contains("reaper: sweep"),
        "plain lines on a terminal: {screen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dumb_terminal_gets_plain_progress_lines_instead_of_a_spinner() {
    let screen = sweep_on_a_terminal("dumb").await;
    // At once, as the spinner would be, timestamped, and without a cursor movement.
    let line = screen
        .lines()
        .find(|l| l.contains("reaper: sweep"))
        .unwrap_or_else(|| panic!("no progress line: {screen:?}"));
    assert!(
        line.starts_with("20")
            && line.contains("Z reaper: sweep 0.")
            && line.ends_with("probing run run-done"),
        "{line:?}"
    );
    assert!(!screen.contains("\u{1b}["), "{screen:?}");
}

fn is_event(line: &str, name: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["event"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_says_when_a_sweep_runs_past_progress_after_and_names_the_long_step() {
    let site = Site::new();
    // Expired and still producing: its drive replays the journal until the 10-minute budget.
    site.detached_run("run-old", Some(TICKING), false, 90 * MINUTE)
        .await;
    let mut watch = Spawned::start(site.reaper("watch").args([
        "--detached-ttl",
        "30m",
        "--every",
        "1h",
        "--quiet-window",
        "10ms",
        "--run-budget",
        "10m",
        "--progress-after",
        "1s",
        "--json",
        "--log",
        "off",
    ]));
    let slow = watch
        .wait_for(GUARD, |l| is_event(l, "slow"))
        .unwrap_or_else(|| panic!("no slow line: {:?}", watch.seen));
    let slow: Value = serde_json::from_str(&slow).unwrap();
    assert_eq!(slow["n"], 1, "{slow}");
    assert!(slow["elapsedMs"].as_i64().unwrap() >= 1000, "{slow}");
    assert_eq!(
        slow["current"], "replaying the journal of run run-old",
        "{slow}"
    );
    // And the heartbeat on stderr, timestamped, while the one long step goes on.
    watch
        .wait_for(GUARD, |l| {
            l.starts_with("stderr: 20")
                && l.contains("reaper: sweep")
                && l.contains("still running, ")
                && l.ends_with("now replaying the journal of run run-old")
        })
        .unwrap_or_else(|| panic!("no heartbeat: {:?}", watch.seen));
    watch.signal(Signal::SIGTERM);
    watch
        .wait_for(GUARD, |l| is_event(l, "finishing"))
        .unwrap_or_else(|| panic!("{:?}", watch.seen));
    watch.signal(Signal::SIGTERM);
    assert_eq!(watch.exit_within(GUARD), Some(0), "{:?}", watch.seen);
    site.teardown().await;
}
