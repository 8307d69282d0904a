//! The dashboard `reaper watch --listen` serves, in a real headless Chromium from the
//! distribution's packages (`apt-get install -y chromium`): pages load, show the seeded runs and
//! leaks, every link leads to a page that loads; screenshots are kept under the target dir.
//! Every wait is for an event (a line `watch` prints, a browser process exiting); the bounds are
//! only hang guards.

mod common;

use std::collections::{BTreeSet, VecDeque};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{now, Site, Spawned, HELLO, MINUTE};
use reaper_core::{NewRun, ReclaimIntent, ReclaimLedger, RunRecord, RunStore};
use serde_json::Value;

const GUARD: Duration = Duration::from_secs(300);
const TOKEN: &str = "dashboard-token-0123456789abcdef";

/// `REAPER_CHROMIUM`, else `chromium` on `PATH`. `None` (the test then says how to install it)
/// unless `CI` or `REAPER_REQUIRE_CHROMIUM` is set: there a missing browser fails the test
/// instead of skipping it.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("REAPER_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .flat_map(|dir| ["chromium", "chromium-browser"].map(|n| dir.join(n)))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        let how = "no chromium on PATH (nor REAPER_CHROMIUM): install it with \
                   `apt-get install -y chromium` to run the dashboard's browser tests";
        for required in ["CI", "REAPER_REQUIRE_CHROMIUM"] {
            assert!(
                std::env::var_os(required).is_none(),
                "{required} is set but {how}"
            );
        }
        eprintln!("SKIPPED: {how}");
    }
    found
}

/// A headless Chromium, one process per page (it exits when the page is dumped or shot).
struct Browser {
    bin: PathBuf,
    profile: tempfile::TempDir,
}

impl Browser {
    fn new(bin: PathBuf) -> Self {
        Browser {
            bin,
            profile: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "--headless",
            // Tests run as root in CI, where Chromium refuses its sandbox.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", self.profile.path().display()));
        cmd
    }

    /// The page's DOM as Chromium built it, serialized.
    fn dom(&self, url: &str) -> String {
        let out = self
            .command()
            .args(["--dump-dom", url])
            .output()
            .expect("chromium runs");
        assert!(
            out.status.success(),
            "chromium --dump-dom {url}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn screenshot(&self, url: &str, to: &Path) {
        let out = self
            .command()
            .arg(format!("--screenshot={}", to.display()))
            .args(["--window-size=1280,760", url])
            .output()
            .expect("chromium runs");
        assert!(
            out.status.success() && to.is_file(),
            "chromium --screenshot {url}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The same-site links of a serialized DOM, as paths (`&amp;` decoded).
fn links(dom: &str) -> Vec<String> {
    dom.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|href| href.starts_with('/'))
        .map(|href| href.replace("&amp;", "&"))
        .collect()
}

/// One HTTP/1.1 request on a fresh connection: (status, body).
fn http(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).expect("the dashboard accepts");
    conn.set_read_timeout(Some(GUARD)).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    (status, body.to_string())
}

fn is_event(line: &str, name: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["event"] == name)
}

/// `reaper watch --listen 127.0.0.1:0`, sweeping once at start and then not for an hour; the
/// dashboard's address and the first sweep's line.
fn start_watch(site: &Site, token: Option<&str>) -> (Spawned, String) {
    start_watch_command(site.reaper("watch"), token)
}

/// [`start_watch`] for a `reaper watch --db … --sandboxes …` command of any binary.
fn start_watch_command(mut cmd: Command, token: Option<&str>) -> (Spawned, String) {
    cmd.args(["--detached-ttl", "30m", "--every", "1h"]).args([
        "--quiet-window",
        "0ms",
        "--json",
        "--listen",
        "127.0.0.1:0",
    ]);
    if let Some(t) = token {
        cmd.env("REAPER_STATUS_TOKEN", t);
    }
    let mut watch = Spawned::start(&mut cmd);
    let start = watch
        .wait_for(GUARD, |l| is_event(l, "start"))
        .unwrap_or_else(|| panic!("watch did not start: {}", watch.stderr()));
    let start: Value = serde_json::from_str(&start).unwrap();
    let addr = start["listen"].as_str().unwrap().to_string();
    watch
        .wait_for(GUARD, |l| is_event(l, "sweep"))
        .unwrap_or_else(|| panic!("no sweep: {}", watch.stderr()));
    (watch, addr)
}

const EVIL: &str = "run-<i>&\"quoted\"";

/// After the first sweep (which finalizes `run-done`): a run past the TTL, one inside it, one
/// whose id is markup, and a leaked ledger entry for `run-leaky`.
async fn seed_after_first_sweep(site: &Site) {
    site.detached_run("run-overdue", None, false, 120 * MINUTE)
        .await;
    site.detached_run("run-recent", None, false, MINUTE).await;
    site.detached_run(EVIL, None, false, 2 * MINUTE).await;
    site.store
        .create_or_resume(NewRun {
            run_id: "run-leaky".into(),
            thread_id: "thread-leaky".into(),
            started_at: now() - 20 * MINUTE,
            status: None,
        })
        .await
        .unwrap();
    let record = RunRecord::new("run-leaky", "thread-leaky", now() - 20 * MINUTE);
    let mut intent = ReclaimIntent::new(&record, now() - 5 * MINUTE);
    intent.attempts = 3;
    intent.provider = Some("local".into());
    intent.provider_sandbox_id = Some("sbx-leaked-1".into());
    intent.next_attempt_at = now() + 60 * MINUTE;
    intent.last_error = Some("the provider answered 502".into());
    site.store.record_intent(&intent).await.unwrap();
}

fn artefacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_chromium_shows_the_seeded_runs_and_leaks_and_every_link_loads() {
    let Some(bin) = chromium() else { return };
    let browser = Browser::new(bin);
    let site = Site::new();
    // Another process sweeps first (a cron `reaper sweep`): its record is in the store, and
    // `watch` never saw it.
    site.detached_run("run-cron-expired", None, false, 120 * MINUTE)
        .await;
    let (code, stdout, stderr) = common::run(site.reaper("sweep").args([
        "--json",
        "--detached-ttl",
        "30m",
        "--quiet-window",
        "0ms",
    ]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let cron: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(cron["outcomes"]["expired"], 1, "{cron:#}");
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let (mut watch, addr) = start_watch(&site, None);
    seed_after_first_sweep(&site).await;
    let base = format!("http://{addr}");

    // Follow every link from the overview, breadth first, each page once.
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from(["/".to_string()]);
    let mut doms = std::collections::BTreeMap::new();
    while let Some(path) = queue.pop_front() {
        if !seen.insert(path.clone()) || path == "/healthz" || path == "/metrics" {
            continue;
        }
        assert!(seen.len() < 40, "the crawl did not end: {seen:?}");
        let dom = browser.dom(&format!("{base}{path}"));
        assert!(
            dom.contains("· reaper</title>") && !dom.contains("No such run"),
            "{path} did not load as a dashboard page:\n{dom}"
        );
        queue.extend(links(&dom));
        doms.insert(path, dom);
    }
    let evil_path = "/runs/run-%3Ci%3E%26%22quoted%22";
    for path in [
        "/",
        "/runs",
        "/ledger",
        "/sweeps",
        "/runs/run-overdue",
        "/runs/run-recent",
        "/runs/run-leaky",
        evil_path,
    ] {
        assert!(doms.contains_key(path), "no link led to {path}: {seen:?}");
    }
    // The browser went to /healthz through the nav too: it answers (503, a leak is recorded).
    assert!(seen.contains("/healthz") && seen.contains("/metrics"));

    let overview = &doms["/"];
    assert!(overview.contains("UNHEALTHY"), "{overview}");
    assert!(overview.contains("1 leaked"), "{overview}");
    let runs = &doms["/runs"];
    for text in [
        "run-overdue",
        "expired/ttl",
        "past the TTL of 30m",
        "run-recent",
        "waiting/inside-ttl",
    ] {
        assert!(runs.contains(text), "no {text:?} on /runs:\n{runs}");
    }
    // The markup in the run id is text in the browser's DOM, not an element.
    assert!(runs.contains("run-&lt;i&gt;&amp;\"quoted\""), "{runs}");
    assert!(!runs.contains("<i>"), "{runs}");
    assert!(
        !runs.contains("run-done"),
        "the first sweep finalized run-done"
    );
    let ledger = &doms["/ledger"];
    for text in [
        "run-leaky",
        "leaked",
        "sbx-leaked-1",
        "the provider answered 502",
    ] {
        assert!(ledger.contains(text), "no {text:?} on /ledger:\n{ledger}");
    }
    let sweeps = &doms["/sweeps"];
    assert!(sweeps.contains("finalized <b>1</b>"), "{sweeps}");
    // The store's records: watch's own sweep and the cron sweep before it, newest first.
    let stored = sweeps
        .split("Recent sweeps of every host")
        .nth(1)
        .and_then(|s| s.split("Last sweep").next())
        .unwrap_or_else(|| panic!("no store section on /sweeps:\n{sweeps}"));
    let finalized = stored.find("finalized <b>1</b>");
    let expired = stored.find("expired <b>1</b>");
    assert!(
        finalized.is_some() && expired.is_some() && finalized < expired,
        "the store's records show watch's sweep, then the other process's:\n{stored}"
    );
    assert!(overview.contains("expired <b>1</b>"), "{overview}");
    let leaky = &doms["/runs/run-leaky"];
    assert!(
        leaky.contains("leaked: its sandbox may still be running"),
        "{leaky}"
    );
    assert!(leaky.contains("History"), "{leaky}");

    let dir = artefacts();
    for (name, path) in [
        ("overview", "/"),
        ("runs", "/runs"),
        ("ledger", "/ledger"),
        ("sweeps", "/sweeps"),
        ("run", "/runs/run-leaky"),
    ] {
        browser.screenshot(&format!("{base}{path}"), &dir.join(format!("{name}.png")));
    }
    // `REAPER_UPDATE_SCREENSHOT=1` refreshes the README's screenshot from this run.
    if std::env::var_os("REAPER_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(dir.join("runs.png"), docs.join("dashboard.png")).unwrap();
    }
    eprintln!("screenshots in {}", dir.display());

    watch.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(watch.exit_within(GUARD), Some(0), "{}", watch.stderr());
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_dashboard_page_shows_the_status_token_and_none_answers_without_it() {
    let site = Site::new();
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let (mut watch, addr) = start_watch(&site, Some(TOKEN));
    seed_after_first_sweep(&site).await;

    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from(["/".to_string()]);
    while let Some(path) = queue.pop_front() {
        if !seen.insert(path.clone()) {
            continue;
        }
        assert!(seen.len() < 40, "the crawl did not end: {seen:?}");
        let (status, _) = http(&addr, &path, None);
        assert_eq!(status, 401, "{path} answered without the token");
        let (status, body) = http(&addr, &path, Some(TOKEN));
        assert!(
            status == 200 || (path == "/healthz" && status == 503),
            "{path}: {status}\n{body}"
        );
        assert!(!body.contains(TOKEN), "{path} shows the status token");
        assert!(
            !body.contains(&TOKEN[..16]),
            "{path} shows part of the token"
        );
        if !path.starts_with("/healthz") && !path.starts_with("/metrics") {
            queue.extend(links(&body));
        }
    }
    assert!(seen.len() >= 10, "the crawl saw too few pages: {seen:?}");

    watch.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(watch.exit_within(GUARD), Some(0), "{}", watch.stderr());
    site.teardown().await;
}

/// Figures, not a verdict: how long `reaper status` (the list, each filter, `--json`) and each
/// dashboard page take over 100,000 detached runs (each with its sandbox's instance record, a
/// fifth of them with two history entries), 400,000 finished runs and 10,000 ledger entries, a
/// third of them leaks; the median and the slowest of 5. Run with
/// `cargo test -p reaper-cli --release --test dashboard -- --ignored --nocapture`;
/// `REAPER_BENCH_BIN=/path/to/reaper` times another build of the binary over the same data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "figures at 100k runs, by hand"]
async fn status_and_dashboard_pages_at_100k_runs_print_their_timings() {
    const RUNS: usize = 100_000;
    const FINISHED: usize = 400_000;
    const ENTRIES: usize = 10_000;
    const OUTCOMES: [&str; 4] = ["unknown", "failed", "producing", "expired"];
    let bin = std::env::var_os("REAPER_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_reaper")));
    let site = Site::new();
    let t = now();
    let seeding = Instant::now();
    {
        let mut conn = rusqlite::Connection::open(&site.db).unwrap();
        let tx = conn.transaction().unwrap();
        {
            let mut run = tx
                .prepare(
                    "INSERT INTO reaper_runs (run_id, thread_id, started_at, detached_since, sandbox_key) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .unwrap();
            let mut instance = tx
                .prepare(
                    "INSERT INTO reaper_sandbox_instances (key, provider, provider_sandbox_id, thread_id, \
                     latest_run_id, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .unwrap();
            let mut history = tx
                .prepare(
                    "INSERT INTO reaper_run_history (run_id, at, sweep_id, entry) \
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .unwrap();
            for i in 0..RUNS {
                let id = format!("run-{i:07}");
                let thread = format!("thread-{i}");
                // Every tenth sandbox is another provider's, for `--provider`.
                let provider = if i % 10 == 0 { "docker" } else { "local" };
                let key = format!("{provider}:{thread}");
                let detached = t - 120 * MINUTE + (i as i64 % 7_000_000) / 1000;
                run.execute(rusqlite::params![
                    id,
                    thread,
                    t - 180 * MINUTE,
                    detached,
                    key
                ])
                .unwrap();
                instance
                    .execute(rusqlite::params![
                        key,
                        provider,
                        format!("sbx-{i}"),
                        thread,
                        id,
                        t
                    ])
                    .unwrap();
                if i % 5 == 0 {
                    for (n, outcome) in [(0, "unknown"), (1, OUTCOMES[(i / 5) % 4])] {
                        let at = t - 60 * MINUTE + n * MINUTE;
                        let sweep = format!("sweep-{n}");
                        let entry = serde_json::json!({
                            "runId": id, "sweepId": sweep, "at": at, "host": "bench",
                            "outcome": outcome, "reasonCode": format!("{outcome}/bench"),
                            "reason": "seeded",
                        });
                        history
                            .execute(rusqlite::params![id, at, sweep, entry.to_string()])
                            .unwrap();
                    }
                }
            }
            let mut done = tx
                .prepare(
                    "INSERT INTO reaper_runs (run_id, thread_id, status, started_at, finished_at) \
                     VALUES (?1, ?2, 'completed', ?3, ?4)",
                )
                .unwrap();
            for i in 0..FINISHED {
                done.execute(rusqlite::params![
                    format!("fin-{i:07}"),
                    format!("thread-fin-{i}"),
                    t - 600 * MINUTE,
                    t - 500 * MINUTE + i as i64
                ])
                .unwrap();
            }
            let mut intent = tx
                .prepare(
                    "INSERT INTO reaper_reclaim_intents (run_id, sandbox_key, first_seen, \
                     attempts, next_attempt_at, last_error) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .unwrap();
            for i in 0..ENTRIES {
                intent
                    .execute(rusqlite::params![
                        format!("done-{i:07}"),
                        format!("local:done-{i}"),
                        t - 60 * MINUTE,
                        (i % 3 == 0) as i64,
                        t + (i as i64) * 1000,
                        (i % 3 == 0).then_some("the provider answered 502"),
                    ])
                    .unwrap();
            }
            // Another sweeper holds the sweep lease for the hour: `watch` sweeps nothing, so the
            // figures are the pages' alone.
            tx.execute(
                "INSERT INTO reaper_leases (key, owner, token, expires_at) VALUES ('reaper:sweep', \
                 'bench-holder', 'bench', ?1)",
                [t + 60 * MINUTE],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    println!(
        "{} at {RUNS} detached runs, {FINISHED} finished, {ENTRIES} ledger entries, {} history \
         entries (seeded in {:.1} s):",
        bin.display(),
        RUNS / 5 * 2,
        seeding.elapsed().as_secs_f64()
    );
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        (
            times[2].as_secs_f64() * 1000.0,
            times[4].as_secs_f64() * 1000.0,
        )
    };
    for args in [
        &[][..],
        &["--outcome", "failed"],
        &["--provider", "docker"],
        &["--older-than", "119m"],
        &["--json"],
    ] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let mut cmd = common::reaper_at(&bin);
            cmd.arg("status").arg("--db").arg(&site.db).args(args);
            let started = Instant::now();
            let (code, stdout, stderr) = common::run(&mut cmd);
            times.push(started.elapsed());
            assert_eq!(code, 2, "the seeded leaks: {args:?}\n{stdout}\n{stderr}");
        }
        let (median, max) = median(&mut times);
        let shown = format!("status {}", args.join(" "));
        println!("  {shown:<60} median {median:>8.1} ms, max {max:>8.1} ms");
    }
    let mut cmd = common::reaper_at(&bin);
    cmd.arg("watch")
        .arg("--db")
        .arg(&site.db)
        .arg("--sandboxes")
        .arg(&site.root);
    let (mut watch, addr) = start_watch_command(cmd, None);
    let last_page = format!(
        "/runs?after={}.run-0099900",
        t - 120 * MINUTE + 99_900 / 1000
    );
    for path in [
        "/",
        "/runs",
        "/runs?after=0.run-0050000",
        last_page.as_str(),
        "/ledger",
        "/sweeps",
        "/runs/run-0099995",
    ] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let (status, body) = http(&addr, path, None);
            times.push(started.elapsed());
            assert_eq!(status, 200, "{path}: {body}");
        }
        let (median, max) = median(&mut times);
        println!("  {path:<60} median {median:>8.1} ms, max {max:>8.1} ms");
    }
    watch.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(watch.exit_within(GUARD), Some(0), "{}", watch.stderr());
}
