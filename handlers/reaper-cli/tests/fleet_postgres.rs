//! A fleet on one PostgreSQL: three `reaper watch` processes (separate processes, as on three
//! hosts) share one database with a backlog of detached runs whose agents finish, and one of
//! them is killed with SIGKILL while it holds a run's claim. Checked on the database and on the
//! watchers' own reports:
//!
//! - no two sweeps ever held the sweep lease at once (the `leaseHeld` intervals are disjoint);
//! - no run was driven twice (no run reported finalized by two sweeps, no chunk twice in a log);
//! - every finished run ends `completed` with its transcript, its sandbox destroyed and the
//!   reclaim ledger empty: the survivors finish what the killed watcher left.
//!
//! Nothing here waits on the machine's speed: the kill is triggered by state observed in the
//! database (a `run-driver:` claim row owned by a live watcher), and the end by every run being
//! settled. The only time limits are hang guards of minutes. If no claim is ever observed (the
//! drives were all missed), a watcher is killed anyway and the same properties are asserted.
//!
//! Needs `REAPER_TEST_POSTGRES_URL` (see shared/reaper-postgres/server/start.sh); skipped with
//! a message without it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{now, reaper, Spawned, HELLO, MINUTE};
use nix::sys::signal::Signal;
use reaper_core::{
    NewRun, RunPatch, RunStatus, RunStore, SandboxInstanceRecord, SandboxInstanceStore,
    SandboxProvider,
};
use reaper_local::{CreateOptions, LocalSandboxProvider};
use reaper_postgres::PostgresStore;
use serde_json::Value;

/// A hang guard, never a verdict: every wait below ends on observed state long before it.
const HANG_GUARD: Duration = Duration::from_secs(300);
const FINISHED: usize = 24;
const GATED: usize = 12;

/// `REAPER_FLEET_SCALE=N` runs the same fleet over N times the backlog (and N times the hang
/// guard), for a run of several minutes by hand; the test command uses 1.
fn scale() -> usize {
    match std::env::var("REAPER_FLEET_SCALE") {
        Err(_) => 1,
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .unwrap_or_else(|| {
                panic!("REAPER_FLEET_SCALE must be a whole number 1..100, not {v:?}")
            }),
    }
}

fn test_url() -> Option<String> {
    std::env::var("REAPER_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// The test server's URL with another database name.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].rfind('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{base}/{db}{query}")
}

async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

fn event(line: &str) -> Option<Value> {
    serde_json::from_str::<Value>(line).ok()
}

struct Watcher {
    name: char,
    proc: Spawned,
    killed: bool,
}

impl Watcher {
    fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Reads whatever lines arrived, without waiting.
    fn drain(&mut self) {
        while let Ok(line) = self.proc.lines.try_recv() {
            self.proc.seen.push(line);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_watchers_on_one_postgres_never_overlap_never_double_drive_and_survive_a_kill() {
    let Some(url) = test_url() else {
        eprintln!(
            "skipped: REAPER_TEST_POSTGRES_URL is not set; start a server with \
             `eval \"$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)\"`"
        );
        return;
    };
    let started = Instant::now();
    let db = format!(
        "fleet_{}_{}",
        std::process::id(),
        now().rem_euclid(1_000_000_000)
    );
    raw(&url)
        .await
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let db_url = with_database(&url, &db);
    let store = PostgresStore::connect(&db_url).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sandboxes");
    std::fs::create_dir_all(&root).unwrap();
    let go = tmp.path().join("go");
    let provider = LocalSandboxProvider::with_root(&root);

    // The backlog, written as a chat route writes it: finished agents, and agents that finish
    // only once the test creates `go` (after the kill), all detached a minute ago.
    let gated = format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; {HELLO}",
        go.display()
    );
    let (finished, gated_runs) = (FINISHED * scale(), GATED * scale());
    let mut run_ids = Vec::new();
    for i in 0..finished + gated_runs {
        let run_id = format!("run-{i:02}");
        let thread = format!("thread-{run_id}");
        store
            .create_or_resume(NewRun {
                run_id: run_id.clone(),
                thread_id: thread.clone(),
                started_at: now() - 2 * MINUTE,
                status: None,
            })
            .await
            .unwrap();
        let sandbox = provider.create(CreateOptions::default()).await.unwrap();
        let key = format!("local:{thread}");
        SandboxInstanceStore::upsert(
            &store,
            SandboxInstanceRecord {
                key: key.clone(),
                provider: provider.name().into(),
                provider_sandbox_id: reaper_core::SandboxHandle::id(&sandbox).to_string(),
                latest_snapshot_id: None,
                thread_id: thread,
                latest_run_id: Some(run_id.clone()),
                updated_at: now(),
            },
        )
        .await
        .unwrap();
        let agent = if i < finished { HELLO } else { gated.as_str() };
        let mut process = sandbox.start_agent(&run_id, agent, None).await.unwrap();
        if i < finished {
            process.wait().await.unwrap();
        }
        store
            .update(&run_id, RunPatch::detach(now() - MINUTE, Some(key)))
            .await
            .unwrap();
        run_ids.push(run_id);
    }

    let start = |name: char| Watcher {
        name,
        proc: Spawned::start(
            reaper()
                .arg("watch")
                .args(["--db", &db_url])
                .arg("--sandboxes")
                .arg(&root)
                .args([
                    "--detached-ttl",
                    "10m",
                    "--every",
                    "20ms",
                    "--prune-every",
                    "1h",
                    // Short drives and claims, so the survivors take over a killed watcher's
                    // claim (and the sweep lease) within seconds.
                    "--run-budget",
                    "2s",
                    "--quiet-window",
                    "300ms",
                    "--max-runs",
                    "12",
                    "--concurrency",
                    "4",
                    "--json",
                    "--log",
                    "off",
                ]),
        ),
        killed: false,
    };
    let seeded_after = started.elapsed();
    let mut watchers = [start('a'), start('b'), start('c')];
    let c = raw(&db_url).await;

    // The kill: as soon as a live watcher is seen holding a run's claim, it is killed there.
    let deadline = Instant::now() + HANG_GUARD * u32::try_from(scale()).unwrap();
    let mut killed_mid_drive = None;
    while killed_mid_drive.is_none() {
        assert!(
            Instant::now() < deadline,
            "hang guard: no claim and no progress"
        );
        for w in watchers.iter_mut() {
            w.drain();
        }
        let claims = c
            .query(
                "SELECT key, owner FROM reaper.leases WHERE key LIKE 'run-driver:%'",
                &[],
            )
            .await
            .unwrap();
        if let Some((w, key)) = claims.iter().find_map(|row| {
            let owner: String = row.get(1);
            watchers
                .iter()
                .position(|w| owner.contains(&format!("/{}/", w.pid())))
                .map(|i| (i, row.get::<_, String>(0)))
        }) {
            watchers[w].proc.signal(Signal::SIGKILL);
            watchers[w].killed = true;
            killed_mid_drive = Some((watchers[w].name, Some(key)));
            break;
        }
        let settled: i64 = c
            .query_one(
                "SELECT COUNT(*) FROM reaper.runs WHERE status <> 'running'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if settled as usize == finished {
            // Every finished run was driven without a claim ever being observed: kill one
            // anyway; the properties below must hold all the same.
            watchers[0].proc.signal(Signal::SIGKILL);
            watchers[0].killed = true;
            killed_mid_drive = Some((watchers[0].name, None));
        }
        // Polling the database for the trigger state; not a verdict.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed_after = started.elapsed();
    let (killed, killed_claim) = killed_mid_drive.unwrap();
    eprintln!("killed watcher {killed} (claim held: {killed_claim:?})");

    // The gated agents finish now; the survivors must settle every run.
    std::fs::write(&go, "").unwrap();
    loop {
        assert!(
            Instant::now() < deadline,
            "hang guard: the survivors did not settle every run"
        );
        for w in watchers.iter_mut() {
            w.drain();
        }
        let row = c
            .query_one(
                "SELECT (SELECT COUNT(*) FROM reaper.runs WHERE status = 'running'), \
                 (SELECT COUNT(*) FROM reaper.reclaim_intents)",
                &[],
            )
            .await
            .unwrap();
        let (running, pending): (i64, i64) = (row.get(0), row.get(1));
        if running == 0 && pending == 0 && std::fs::read_dir(&root).unwrap().count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let settled_after = started.elapsed();
    for w in watchers.iter_mut().filter(|w| !w.killed) {
        w.proc.signal(Signal::SIGTERM);
    }
    let mut held = Vec::new();
    let mut finalized: BTreeMap<String, Vec<char>> = BTreeMap::new();
    let mut sweeps: BTreeMap<char, (usize, usize)> = BTreeMap::new();
    for w in watchers.iter_mut() {
        if w.killed {
            let _ = w.proc.child.wait();
            w.drain();
        } else {
            let code = w.proc.exit_within(HANG_GUARD);
            assert_eq!(code, Some(0), "watcher {}: {}", w.name, w.proc.stderr());
        }
        for v in w.proc.seen.iter().filter_map(|l| event(l)) {
            if v["event"] != "sweep" {
                continue;
            }
            let entry = sweeps.entry(w.name).or_default();
            match v["sweep"]["state"].as_str() {
                Some("swept") => {
                    entry.0 += 1;
                    held.push((
                        w.name,
                        v["leaseHeld"]["from"].as_i64().unwrap(),
                        v["leaseHeld"]["to"].as_i64().unwrap(),
                    ));
                    for r in v["runs"].as_array().into_iter().flatten() {
                        if r["outcome"] == "finalized" {
                            finalized
                                .entry(r["runId"].as_str().unwrap().to_string())
                                .or_default()
                                .push(w.name);
                        }
                    }
                }
                Some("already-running") => entry.1 += 1,
                other => panic!("watcher {}: unexpected sweep state {other:?}: {v}", w.name),
            }
        }
    }

    // 0 overlapping sweeps.
    let mut overlaps = 0;
    for (n, a) in held.iter().enumerate() {
        for b in &held[n + 1..] {
            if !(a.2 <= b.1 || b.2 <= a.1) {
                overlaps += 1;
                eprintln!("overlap: {a:?} and {b:?}");
            }
        }
    }
    // 0 double drives: no run finalized by two sweeps, no chunk appended twice.
    let doubly: Vec<_> = finalized.iter().filter(|(_, by)| by.len() > 1).collect();
    let duplicated = c
        .query(
            "SELECT run_id, chunk->>'journalEnd' FROM reaper.log_entries \
             WHERE chunk->>'journalEnd' IS NOT NULL \
             GROUP BY run_id, chunk->>'journalEnd' HAVING COUNT(*) > 1",
            &[],
        )
        .await
        .unwrap();
    // Every finished run finalized: completed, with its transcript.
    let mut missing = BTreeSet::new();
    for run_id in &run_ids {
        let run = RunStore::get(&store, run_id).await.unwrap().unwrap();
        let transcript = reaper_core::MessageStore::get_transcript(&store, run_id)
            .await
            .unwrap();
        if run.status != RunStatus::Completed || transcript.is_none() {
            missing.insert(format!(
                "{run_id}: {} transcript {}",
                run.status,
                transcript.is_some()
            ));
        }
    }
    let unreported: Vec<_> = run_ids
        .iter()
        .filter(|r| !finalized.contains_key(*r))
        .collect();
    eprintln!(
        "fleet: {} runs; sweeps with the lease / turned away per watcher: {sweeps:?}; \
         overlaps {overlaps}; runs finalized by two sweeps {}; duplicated chunks {}; \
         finalized but unreported (the killed watcher's last sweep) {unreported:?}; \
         killed {killed} holding {killed_claim:?}; seeded after {seeded_after:?}, killed after \
         {killed_after:?}, settled after {settled_after:?}, took {:?}",
        run_ids.len(),
        doubly.len(),
        duplicated.len(),
        started.elapsed()
    );
    assert_eq!(overlaps, 0, "sweeps held the lease at once: {held:?}");
    assert!(doubly.is_empty(), "runs finalized twice: {doubly:?}");
    assert!(
        duplicated.is_empty(),
        "chunks appended twice: {:?}",
        duplicated
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    );
    assert!(missing.is_empty(), "runs not finalized: {missing:?}");
    assert!(
        unreported.len() <= 12,
        "only the killed watcher's last sweep (--max-runs 12) may finalize runs unreported: \
         {unreported:?}"
    );
    drop(c);
    drop(store);
    // The database is private to this test: dropped, with a connection still closing allowed.
    let _ = raw(&url)
        .await
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await;
}
