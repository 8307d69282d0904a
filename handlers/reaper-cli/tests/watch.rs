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
                    // The default max-runs cap; a sweep interrupted by the shutdown signal stops
                    // at a run boundary and defers the rest.
                    let batch = v["considered"].as_u64().unwrap() + v["deferred"].as_u64().unwrap();
                    assert_eq!(batch, 25, "the default max-runs cap: {v}");
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

/// A signal mid-sweep lets the sweep finish; a second one abandons it and gives its leases back,
/// so the next sweep (here a plain `reaper sweep`) runs at once instead of waiting for them to
/// expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_abandons_the_running_sweep_and_releases_its_leases() {
    let site = Site::new();
    site.detached_run("run-old", Some(common::TICKING), false, 90 * MINUTE)
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
        "0ms",
        "--json",
        "--log",
        "off",
    ]));

    // The drive of an expired, still-producing run runs until its (long) budget: mid-sweep.
    watch
        .wait_for(Duration::from_secs(30), |l| {
            l.contains("replaying the journal of run run-old")
        })
        .unwrap_or_else(|| panic!("{:?}", watch.seen));
    watch.signal(Signal::SIGTERM);
    watch
        .wait_for(Duration::from_secs(10), |l| is_event(l, "finishing"))
        .unwrap_or_else(|| panic!("{:?}", watch.seen));
    watch.signal(Signal::SIGTERM);
    assert_eq!(
        watch.exit_within(Duration::from_secs(10)),
        Some(0),
        "{:?}",
        watch.seen
    );
    let abandoned = watch
        .seen
        .iter()
        .find(|l| is_event(l, "abandoned"))
        .map(|l| event(l))
        .unwrap_or_else(|| panic!("{:?}", watch.seen));
    assert_eq!(
        abandoned["releasedLeases"], 2,
        "the sweep lease and the run's claim"
    );
    let shutdown = watch
        .seen
        .iter()
        .find(|l| is_event(l, "shutdown"))
        .map(|l| event(l));
    assert_eq!(shutdown.unwrap()["abandoned"], true);

    let (code, stdout, stderr) = common::run(site.reaper("sweep").args([
        "--detached-ttl",
        "30m",
        "--quiet-window",
        "10ms",
        "--run-budget",
        "200ms",
        "--json",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let report = event(&stdout);
    assert_eq!(
        report["sweep"]["state"], "swept",
        "no stale sweep lease: {report}"
    );
    assert_eq!(
        report["runs"][0]["outcome"], "expired",
        "no stale claim: {report}"
    );
    site.teardown().await;
}
