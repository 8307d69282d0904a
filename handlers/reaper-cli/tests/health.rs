//! The health contract on the CLI: `reaper status --check` and `reaper watch --listen`'s
//! /healthz and /metrics, over real HTTP against a real `reaper watch` on a real SQLite file.
//! Every wait is for an event (a line the process prints, a response); the bounds are only
//! hang guards.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{now, run, Site, Spawned, HELLO, MINUTE};
use reaper_core::health::{record_last_sweep, LastSweep};
use reaper_core::{LedgerCounts, ReclaimIntent, ReclaimLedger, RunRecord};
use serde_json::Value;

const GUARD: Duration = Duration::from_secs(300);
const TOKEN: &str = "monitor-token-0123456789";

/// One HTTP/1.1 request on a fresh connection: (status, head, body).
fn http(addr: &str, method: &str, path: &str, token: Option<&str>) -> (u16, String, String) {
    let mut conn = TcpStream::connect(addr).expect("the health endpoint accepts");
    conn.set_read_timeout(Some(GUARD)).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
    (status, head.to_string(), body.to_string())
}

fn is_event(line: &str, name: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["event"] == name)
}

fn leak(run_id: &str) -> ReclaimIntent {
    let record = RunRecord::new(run_id, "thread-leak", now() - 10 * MINUTE);
    let mut intent = ReclaimIntent::new(&record, now() - 5 * MINUTE);
    intent.attempts = 1;
    // Not due for an hour: no sweep of this test retries it.
    intent.next_attempt_at = now() + 60 * MINUTE;
    intent.last_error = Some("the provider answered 502".into());
    intent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_listen_serves_healthz_and_metrics_behind_the_read_only_token() {
    let site = Site::new();
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let mut watch = Spawned::start(
        site.reaper("watch")
            .args([
                "--detached-ttl",
                "30m",
                "--every",
                "1h",
                "--quiet-window",
                "0ms",
            ])
            .args(["--json", "--listen", "127.0.0.1:0"])
            .env("REAPER_STATUS_TOKEN", TOKEN),
    );
    let start = watch
        .wait_for(GUARD, |l| is_event(l, "start"))
        .unwrap_or_else(|| panic!("watch did not start: {}", watch.stderr()));
    let start: Value = serde_json::from_str(&start).unwrap();
    let addr = start["listen"]
        .as_str()
        .expect("the start line names the address")
        .to_string();
    // The sweep line is printed after the metrics took the sweep in.
    watch
        .wait_for(GUARD, |l| is_event(l, "sweep"))
        .unwrap_or_else(|| panic!("no sweep: {}", watch.stderr()));

    // Without the token, or with another, nothing is told.
    for token in [None, Some("monitor-token-wrong-000000")] {
        for path in ["/healthz", "/metrics"] {
            let (status, head, _) = http(&addr, "GET", path, token);
            assert_eq!(status, 401, "{path} with {token:?}: {head}");
        }
    }

    let (status, head, body) = http(&addr, "GET", "/healthz", Some(TOKEN));
    assert_eq!(status, 200, "{head}\n{body}");
    let verdict: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(verdict["healthy"], true, "{verdict:#}");
    assert_eq!(
        verdict["lastSweep"]["outcomes"]["finalized"], 1,
        "{verdict:#}"
    );
    assert_eq!(verdict["ledger"]["leaked"], 0);

    let (status, head, body) = http(&addr, "HEAD", "/healthz", Some(TOKEN));
    assert_eq!((status, body.as_str()), (200, ""), "{head}");
    let (status, _, _) = http(&addr, "POST", "/healthz", Some(TOKEN));
    assert_eq!(status, 405, "a monitor cannot trigger anything");

    let (status, head, metrics) = http(&addr, "GET", "/metrics", Some(TOKEN));
    assert_eq!(status, 200, "{head}");
    for line in [
        "reaper_sweeps_total 1",
        "reaper_runs_total{outcome=\"finalized\"} 1",
        "reaper_runs_total{outcome=\"failed\"} 0",
        "reaper_sweep_failures_total 0",
        "reaper_sweep_duration_seconds_count 1",
        "reaper_backlog 1",
        "reaper_ledger_pending 0",
        "reaper_ledger_leaked 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
    assert!(metrics.contains("# TYPE reaper_oldest_detached_age_seconds gauge"));
    assert!(metrics.contains("reaper_last_sweep_timestamp_seconds "));

    // A leak recorded now turns the verdict at the next request: 503, GET and HEAD alike.
    site.store.record_intent(&leak("run-leaky")).await.unwrap();
    let (status, _, body) = http(&addr, "GET", "/healthz", Some(TOKEN));
    assert_eq!(status, 503, "{body}");
    let verdict: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(verdict["healthy"], false);
    assert!(
        verdict["problems"][0]
            .as_str()
            .unwrap()
            .starts_with("1 sandbox(es) of finished runs could not be destroyed"),
        "{verdict:#}"
    );
    let (status, _, _) = http(&addr, "HEAD", "/healthz", Some(TOKEN));
    assert_eq!(status, 503);

    watch.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(watch.exit_within(GUARD), Some(0), "{}", watch.stderr());
    site.teardown().await;
}

#[tokio::test]
async fn a_bad_listen_address_is_refused_at_start_naming_the_setting() {
    let site = Site::new();
    let (code, _, stderr) =
        run(site
            .reaper("watch")
            .args(["--detached-ttl", "30m", "--listen", "not-an-address"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--listen"), "{stderr}");
}

fn check(site: &Site, extra: &[&str]) -> (i32, String, String) {
    run(site
        .reaper_status()
        .args(["--check", "--detached-ttl", "30m", "--every", "1m"])
        .args(extra))
}

#[tokio::test]
async fn status_check_is_healthy_after_a_sweep_and_exits_2_naming_each_problem() {
    let site = Site::new();
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let (code, stdout, stderr) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "30m", "--quiet-window", "0ms"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (code, stdout, stderr) = check(&site, &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.starts_with("healthy\nlast sweep: "), "{stdout}");
    let (code, stdout, _) = check(&site, &["--json"]);
    assert_eq!(code, 0);
    let verdict: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(verdict["healthy"], true);
    assert_eq!(
        verdict["lastSweep"]["considered"], 1,
        "the sweep left its mark: {verdict:#}"
    );

    // A stale sweep, an overdue detached run and a leak: each named, exit 2.
    let stale = LastSweep {
        started_at: now() - 120 * MINUTE,
        finished_at: now() - 119 * MINUTE,
        considered: 0,
        probed: 0,
        deferred: 0,
        outcomes: serde_json::json!({}),
        ledger: Some(LedgerCounts::default()),
        slo: serde_json::json!({}),
        listing_error: Some("store unavailable: disk I/O error".into()),
        damaged: None,
        owner: "elsewhere".into(),
    };
    let other = Site::new();
    assert!(record_last_sweep(&other.store, &stale, now())
        .await
        .unwrap());
    other
        .detached_run("run-forgotten", None, false, 300 * MINUTE)
        .await;
    other.store.record_intent(&leak("run-leaky")).await.unwrap();
    let (code, stdout, stderr) = check(&other, &[]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(stdout.starts_with("UNHEALTHY (4 problem(s)):"), "{stdout}");
    for problem in [
        "1 sandbox(es) of finished runs could not be destroyed",
        "the oldest detached run has waited 5h",
        "the last sweep finished 1h 59m",
        "the last sweep could not list the detached runs, so it swept none: store unavailable",
    ] {
        assert!(stdout.contains(problem), "no {problem:?} in\n{stdout}");
    }
    let (code, stdout, _) = check(&other, &["--json"]);
    assert_eq!(code, 2);
    let verdict: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(verdict["healthy"], false);
    assert_eq!(verdict["problems"].as_array().unwrap().len(), 4);

    let (code, _, stderr) = run(other.reaper_status().arg("--check"));
    assert_eq!(code, 1, "--check without a TTL is a usage error: {stderr}");
    assert!(stderr.contains("--detached-ttl"), "{stderr}");
    site.teardown().await;
    other.teardown().await;
}
