//! Crash-point testing: a real `reaper sweep` on a real SQLite file and real local sandboxes is
//! killed at every store commit in turn (reaper-sqlite's `REAPER_CRASH_AT=N` aborts the process
//! right after its N-th committed write, as `kill -9` would leave it), then clean sweeps and a
//! prune run, and the invariants are checked in SQL on the file and on the filesystem:
//!
//! - no run is terminal while its sandbox still stands, unless the ledger holds a pending entry
//!   for it or a live run of the same thread still uses the sandbox;
//! - no live run's sandbox is destroyed, and no live run's journal deleted;
//! - no chunk appears twice in a delivery log (two chunks with the same `journalEnd`);
//! - every run the crash-free sweep finalized has exactly its transcript, and no other run has one;
//! - every run ends in the status the crash-free sweep gave it.
//!
//! The `reaper` binary these tests run has the crash points because reaper-cli's dev-dependency
//! on `reaper-cli-hooks` enables them for test builds only.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{now, Site, HELLO, MINUTE};
use reaper_core::journal::journal_paths;
use reaper_core::{
    NewRun, RunPatch, RunStore, SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider,
};
use reaper_local::CreateOptions;
use rusqlite::Connection;

/// An agent that says one thing and exits 3.
const CRASHES: &str = r#"printf '{"delta":"Reading the parser"}\n'; exit 3"#;
/// The journal of an agent still writing: lines, no sentinel yet.
const HALF_WRITTEN: &str = "{\"delta\":\"Wri\"}\n{\"delta\":\"ting\"}\n";

/// One run of the scene: its id and the sandbox it runs in.
#[derive(Debug, Clone)]
struct SceneRun {
    run_id: &'static str,
    sandbox_id: String,
}

/// The scene, built once; every crash point sweeps a fresh copy of it.
struct Template {
    site: Site,
    runs: Vec<SceneRun>,
}

async fn build_template() -> Template {
    let site = Site::new();
    let mut runs = Vec::new();
    let mut add = |run_id: &'static str, sandbox: &reaper_local::LocalSandbox| {
        runs.push(SceneRun {
            run_id,
            sandbox_id: sandbox.id().to_string(),
        })
    };
    // Finished while detached: finalized, sandbox destroyed.
    let s = site
        .detached_run("run-hello", Some(HELLO), true, MINUTE)
        .await;
    add("run-hello", &s);
    // Exited 3 while detached: finalized as failed.
    let s = site
        .detached_run("run-crash", Some(CRASHES), true, MINUTE)
        .await;
    add("run-crash", &s);
    // Past its TTL, finished long ago: expired.
    let s = site
        .detached_run("run-forgotten", Some(HELLO), true, 60 * MINUTE)
        .await;
    add("run-forgotten", &s);
    // Still writing: left alone.
    let s = site.detached_run("run-typing", None, false, MINUTE).await;
    write_journal(&s, "run-typing", HALF_WRITTEN);
    add("run-typing", &s);
    // Finished, but its sandbox refuses to be destroyed: a leak the ledger keeps retrying.
    let s = site
        .detached_run("run-leaky", Some(HELLO), true, MINUTE)
        .await;
    std::fs::write(s.dir().join(reaper_local::DESTROY_FAILS_FLAG), "").unwrap();
    add("run-leaky", &s);
    // Two turns of one thread in one sandbox: the older finished, the newer still writing. The
    // older is finalized; the sandbox must stay for the newer.
    let s = shared_thread(&site).await;
    add("run-turn-1", &s);
    add("run-turn-2", &s);
    // Every commit in the WAL is moved into the file, so copying the file copies everything.
    Connection::open(&site.db)
        .unwrap()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    Template { site, runs }
}

fn write_journal(sandbox: &reaper_local::LocalSandbox, run_id: &str, text: &str) {
    let paths = journal_paths(run_id, Some(sandbox.journal_dir())).unwrap();
    std::fs::write(paths.journal, text).unwrap();
}

/// `run-turn-1` finished and `run-turn-2` writing in one sandbox, both detached, the instance
/// record naming the newer turn as the chat route leaves it.
async fn shared_thread(site: &Site) -> reaper_local::LocalSandbox {
    let thread = "thread-shared";
    let key = format!("local:{thread}");
    let sandbox = site
        .provider
        .create(CreateOptions::default())
        .await
        .unwrap();
    for (i, run_id) in ["run-turn-1", "run-turn-2"].into_iter().enumerate() {
        site.store
            .create_or_resume(NewRun {
                run_id: run_id.into(),
                thread_id: thread.into(),
                started_at: now() - 3 * MINUTE + i as i64 * MINUTE,
                status: None,
            })
            .await
            .unwrap();
    }
    sandbox
        .start_agent("run-turn-1", HELLO, None)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    write_journal(&sandbox, "run-turn-2", HALF_WRITTEN);
    SandboxInstanceStore::upsert(
        &site.store,
        SandboxInstanceRecord {
            key: key.clone(),
            provider: site.provider.name().into(),
            provider_sandbox_id: sandbox.id().to_string(),
            latest_snapshot_id: None,
            thread_id: thread.into(),
            latest_run_id: Some("run-turn-2".into()),
            updated_at: now(),
        },
    )
    .await
    .unwrap();
    for run_id in ["run-turn-1", "run-turn-2"] {
        site.store
            .update(run_id, RunPatch::detach(now() - MINUTE, Some(key.clone())))
            .await
            .unwrap();
    }
    sandbox
}

/// A fresh copy of the template's database and sandboxes under `dest`. Sandboxes record their
/// journal directory as an absolute path, so each copy's records are pointed at the copy.
fn copy_scene(template: &Template, dest: &Path) {
    let from = template.site.tmp.path();
    std::fs::create_dir_all(dest).unwrap();
    std::fs::copy(&template.site.db, dest.join("reaper.db")).unwrap();
    copy_dir(&template.site.root, &dest.join("sandboxes"));
    for entry in std::fs::read_dir(dest.join("sandboxes")).unwrap().flatten() {
        let meta = entry.path().join("sandbox.json");
        let text = std::fs::read_to_string(&meta).unwrap();
        let moved = text.replace(
            &format!("{}/", from.display()),
            &format!("{}/", dest.display()),
        );
        std::fs::write(&meta, moved).unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

struct Scene {
    dir: PathBuf,
}

impl Scene {
    fn db(&self) -> PathBuf {
        self.dir.join("reaper.db")
    }

    fn reaper(&self, command: &str) -> Command {
        let mut cmd = common::reaper();
        cmd.arg(command)
            .arg("--db")
            .arg(self.db())
            .arg("--sandboxes")
            .arg(self.dir.join("sandboxes"))
            .args(["--log", "off"]);
        if command == "sweep" {
            cmd.args([
                "--detached-ttl",
                "10m",
                "--quiet-window",
                "0ms",
                "--run-budget",
                "5s",
                "--json",
            ]);
        }
        cmd
    }

    /// The crashed sweep's leases are dead with it; expire them as their TTL would.
    fn expire_leases(&self) {
        Connection::open(self.db())
            .unwrap()
            .execute("UPDATE leases SET expires_at = 0", [])
            .unwrap();
    }

    /// After the sweep under test (crashed or not): two clean sweeps (the second retries what the
    /// first left to the ledger) and a prune. Exit codes other than 0 and 2 are violations.
    fn recover(&self, violations: &mut Vec<String>, label: &str) {
        for step in ["sweep", "sweep", "prune"] {
            let (code, stdout, stderr) = common::run(&mut self.reaper(step));
            if code != 0 && code != 2 {
                violations.push(format!(
                    "{label}: recovery `{step}` exited {code}: {stdout} {stderr}"
                ));
            }
        }
    }

    fn state(&self) -> State {
        let conn = Connection::open(self.db()).unwrap();
        let pairs = |sql: &str| -> BTreeMap<String, String> {
            let mut stmt = conn.prepare(sql).unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let duplicates: Vec<String> = conn
            .prepare(
                "SELECT run_id || ' journalEnd ' || json_extract(chunk, '$.journalEnd') || ' x' \
                 || COUNT(*) FROM log_entries \
                 WHERE json_extract(chunk, '$.journalEnd') IS NOT NULL \
                 GROUP BY run_id, json_extract(chunk, '$.journalEnd') HAVING COUNT(*) > 1",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        State {
            statuses: pairs("SELECT run_id, status FROM runs"),
            transcripts: pairs("SELECT run_id, body FROM transcripts"),
            ledger: pairs("SELECT run_id, run_id FROM reaper_reclaim_intents")
                .into_keys()
                .collect(),
            duplicates,
        }
    }

    fn sandbox_exists(&self, id: &str) -> bool {
        self.dir.join("sandboxes").join(id).is_dir()
    }

    fn journal_exists(&self, run: &SceneRun) -> bool {
        let dir = self
            .dir
            .join("sandboxes")
            .join(&run.sandbox_id)
            .join("journals");
        let paths = journal_paths(run.run_id, Some(dir.to_str().unwrap())).unwrap();
        Path::new(&paths.journal).is_file()
    }
}

/// What the invariants are checked on.
#[derive(Debug, Clone, PartialEq)]
struct State {
    statuses: BTreeMap<String, String>,
    transcripts: BTreeMap<String, String>,
    ledger: BTreeSet<String>,
    duplicates: Vec<String>,
}

const LIVE: [&str; 2] = ["running", "interrupted"];

/// Every invariant on one scene after recovery, against the crash-free outcome.
fn check(
    scene: &Scene,
    runs: &[SceneRun],
    expected: Option<&State>,
    label: &str,
) -> (State, Vec<String>) {
    let state = scene.state();
    let mut v = Vec::new();
    let status = |run_id: &str| state.statuses.get(run_id).map(String::as_str);
    for run in runs {
        let live = status(run.run_id).is_some_and(|s| LIVE.contains(&s));
        let standing = scene.sandbox_exists(&run.sandbox_id);
        if live {
            if !standing {
                v.push(format!("{label}: live run {} lost its sandbox", run.run_id));
            } else if !scene.journal_exists(run) {
                v.push(format!("{label}: live run {} lost its journal", run.run_id));
            }
        } else if standing {
            let pending = state.ledger.contains(run.run_id);
            let shared_with_live = runs.iter().any(|other| {
                other.sandbox_id == run.sandbox_id
                    && status(other.run_id).is_some_and(|s| LIVE.contains(&s))
            });
            if !pending && !shared_with_live {
                v.push(format!(
                    "{label}: run {} is {} but its sandbox {} stands with no pending ledger entry",
                    run.run_id,
                    status(run.run_id).unwrap_or("missing"),
                    run.sandbox_id
                ));
            }
        }
    }
    for d in &state.duplicates {
        v.push(format!("{label}: duplicate chunk: {d}"));
    }
    if let Some(expected) = expected {
        if state.statuses != expected.statuses {
            v.push(format!(
                "{label}: statuses {:?}, the crash-free sweep gave {:?}",
                state.statuses, expected.statuses
            ));
        }
        if state.transcripts != expected.transcripts {
            let names = |t: &BTreeMap<String, String>| t.keys().cloned().collect::<Vec<_>>();
            v.push(format!(
                "{label}: transcripts of {:?} differ from the crash-free sweep's ({:?}): {:?}",
                names(&state.transcripts),
                names(&expected.transcripts),
                state.transcripts
            ));
        }
    }
    (state, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_killed_at_every_commit_recovers_to_the_crash_free_outcome() {
    let started = Instant::now();
    let template = build_template().await;
    let work = tempfile::tempdir().unwrap();
    let mut violations = Vec::new();

    // The crash-free sweep: how many commit points it has, and where it ends.
    let clean = Scene {
        dir: work.path().join("clean"),
    };
    copy_scene(&template, &clean.dir);
    let count_file = work.path().join("commits");
    let (code, stdout, stderr) = common::run(
        clean
            .reaper("sweep")
            .env("REAPER_CRASH_COUNT_FILE", &count_file),
    );
    assert_eq!(
        code, 2,
        "the leaky run makes the clean sweep exit 2:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let outcome = |id: &str| {
        report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["runId"] == id)
            .map(|e| e["outcome"].as_str().unwrap().to_string())
    };
    for (run, expected) in [
        ("run-hello", "finalized"),
        ("run-crash", "finalized"),
        ("run-forgotten", "expired"),
        ("run-typing", "producing"),
        ("run-leaky", "reclaim-failed"),
        ("run-turn-1", "finalized"),
        ("run-turn-2", "producing"),
    ] {
        assert_eq!(outcome(run).as_deref(), Some(expected), "{run}: {stdout}");
    }
    let n: u64 = std::fs::read_to_string(&count_file)
        .expect("the test build of reaper has crash points")
        .trim()
        .parse()
        .unwrap();
    assert!(n > 10, "a sweep of seven runs commits more than {n} times");
    clean.recover(&mut violations, "crash-free");
    let (expected, found) = check(&clean, &template.runs, None, "crash-free");
    violations.extend(found);
    assert_eq!(
        expected.ledger,
        BTreeSet::from(["run-leaky".to_string()]),
        "only the leak stays pending"
    );

    let (mut crashed, mut not_reached) = (0, 0);
    for k in 1..=n {
        let scene = Scene {
            dir: work.path().join(format!("crash-{k}")),
        };
        copy_scene(&template, &scene.dir);
        let out = scene
            .reaper("sweep")
            .env("REAPER_CRASH_AT", k.to_string())
            .output()
            .unwrap();
        if out.status.signal() == Some(nix::sys::signal::Signal::SIGABRT as i32) {
            crashed += 1;
        } else if matches!(out.status.code(), Some(0 | 2)) {
            // The replay appends the chunks it has read in one batch, so how many appends a drive
            // takes depends on how fast the journal is read: this sweep committed fewer than k
            // times. Its outcome is still checked.
            not_reached += 1;
        } else {
            violations.push(format!(
                "crash point {k}: the sweep did not abort ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        scene.expire_leases();
        let label = format!("crash point {k}");
        scene.recover(&mut violations, &label);
        violations.extend(check(&scene, &template.runs, Some(&expected), &label).1);
        if violations.is_empty() {
            std::fs::remove_dir_all(&scene.dir).unwrap();
        }
    }

    println!(
        "crash points: {n}, violations: {} ({crashed} crashed, {not_reached} finished before \
         reaching theirs, {:.1}s)",
        violations.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        crashed * 10 >= n * 9,
        "only {crashed} of {n} crash points were reached"
    );
    template.site.teardown().await;
    assert!(
        violations.is_empty(),
        "crash points: {n}, violations: {}\n{}",
        violations.len(),
        violations.join("\n")
    );
}
