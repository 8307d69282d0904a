//! `reaper watch`: clean shutdown on SIGTERM, and single-flight across processes.

mod common;

use std::time::Duration;

use common::{Site, Spawned, MINUTE};
use nix::sys::signal::Signal;
use serde_json::Value;

fn event(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
}

fn is_event(line: &str, name: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["event"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_stops_cleanly_on_sigterm_after_its_first_sweep() {
    let site = Site::new();
    site.detached_run("run-done", Some(common::HELLO), true, MINUTE)
        .await;
    let mut watch = Spawned::start(site.reaper("watch").args([
        "--detached-ttl",
        "10m",
        "--every",
        "1h",
        "--quiet-window",
        "10ms",
        "--json",
    ]));

    let Some(first) = watch.wait_for(Duration::from_secs(30), |l| is_event(l, "sweep")) else {
        let stderr = watch.stderr();
        panic!(
            "no sweep reported; stdout: {:?}; stderr: {stderr}",
            watch.seen
        );
    };
    let first = event(&first);
    assert_eq!(first["sweep"]["state"], "swept");
    assert_eq!(first["outcomes"]["finalized"], 1);
    watch
        .wait_for(Duration::from_secs(30), |l| is_event(l, "prune"))
        .expect("the first prune follows the first sweep");

    watch.signal(Signal::SIGTERM);
    let code = watch.exit_within(Duration::from_secs(10));
    let stderr = watch.stderr();
    assert_eq!(code, Some(0), "stdout: {:?}; stderr: {stderr}", watch.seen);
    let shutdown = watch
        .seen
        .iter()
        .find(|l| is_event(l, "shutdown"))
        .map(|l| event(l))
        .expect("a clean-shutdown line");
    assert_eq!(shutdown["signal"], "SIGTERM");
    assert_eq!(shutdown["sweeps"], 1);
    assert_eq!(shutdown["abandoned"], false);
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_in_text_mode_says_it_shut_down_cleanly() {
    let site = Site::new();
    let mut watch = Spawned::start(site.reaper("watch").args([
        "--detached-ttl",
        "10m",
        "--every",
        "1h",
        "--log",
        "off",
    ]));
    watch
        .wait_for(Duration::from_secs(30), |l| {
            l.contains(" sweep 1: swept 0 detached runs")
        })
        .unwrap_or_else(|| panic!("{:?}", watch.seen));
    watch.signal(Signal::SIGINT);
    assert_eq!(watch.exit_within(Duration::from_secs(10)), Some(0));
    assert!(
        watch
            .seen
            .iter()
            .any(|l| l.contains("watch shut down cleanly after 1 sweeps (SIGINT)")),
        "{:?}",
        watch.seen
    );
}

/// Many detached runs whose agents are still producing: every sweep probes them all, so sweeps
/// take long enough for two watchers ticking every 10 ms to collide constantly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_watchers_on_one_database_never_hold_the_sweep_lease_at_once() {
    let site = Site::new();
    for i in 0..30 {
        site.detached_run(&format!("run-{i:02}"), None, false, MINUTE)
            .await;
    }
    let start = || {
        Spawned::start(site.reaper("watch").args([
            "--detached-ttl",
            "10m",
            "--every",
            "10ms",
            "--prune-every",
            "1h",
            "--json",
            "--log",
            "off",
        ]))
    };
    let mut watchers = [start(), start()];

    // Until both have reported enough sweep attempts (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut enough = true;
        for w in watchers.iter_mut() {
            let attempts = w.seen.iter().filter(|l| is_event(l, "sweep")).count();
            if attempts < 8 {
                enough = false;
                w.wait_for(Duration::from_millis(200), |l| is_event(l, "sweep"));
            }
        }
        if enough || std::time::Instant::now() > deadline {
            break;
        }
    }
    for w in watchers.iter_mut() {
        w.signal(Signal::SIGTERM);
    }
    let mut held = Vec::new();
    let mut skipped = 0;
    for (i, w) in watchers.iter_mut().enumerate() {
        assert_eq!(
            w.exit_within(Duration::from_secs(30)),
            Some(0),
            "watcher {i}: {}",
            w.stderr()
        );
        for line in w.seen.iter().filter(|l| is_event(l, "sweep")) {
            let v = event(line);
            match v["sweep"]["state"].as_str().unwrap() {
                "swept" => {
                    assert_eq!(v["considered"], 25, "the default max-runs cap: {v}");
                    let from = v["leaseHeld"]["from"].as_i64().unwrap();
                    let to = v["leaseHeld"]["to"].as_i64().unwrap();
                    held.push((i, from, to));
                }
                "already-running" => skipped += 1,
                other => panic!("watcher {i}: unexpected sweep state {other}: {v}"),
            }
        }
    }
    eprintln!(
        "sweeps with the lease: {}, turned away: {skipped}",
        held.len()
    );
    assert!(
        held.len() >= 2,
        "both watchers together swept at least twice: {held:?}"
    );
    assert!(
        skipped >= 1,
        "overlapping attempts were turned away: {held:?}"
    );
    for (n, a) in held.iter().enumerate() {
        for b in &held[n + 1..] {
            let disjoint = a.2 <= b.1 || b.2 <= a.1;
            assert!(
                disjoint,
                "two sweeps held the lease at once: {a:?} and {b:?}"
            );
        }
    }
}
