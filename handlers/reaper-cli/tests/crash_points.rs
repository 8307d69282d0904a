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
//! The same scene runs on a PostgreSQL database too (each crash point on a copy made with
//! `CREATE DATABASE … TEMPLATE`), where every committed statement or transaction of
//! reaper-postgres is a crash point; it needs `REAPER_TEST_POSTGRES_URL` and says it skipped
//! without it.
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
    /// The PostgreSQL database holding the same rows, when the scene runs on PostgreSQL.
    postgres: Option<PgTemplate>,
}

/// The test server and the template database every scene copies.
struct PgTemplate {
    server: String,
    name: String,
}

/// Where the scenes' databases live.
#[derive(Debug, Clone)]
enum Backend {
    Sqlite,
    /// The test server's URL.
    Postgres(String),
}

fn postgres_url() -> Option<String> {
    std::env::var("REAPER_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// The server's URL with another database name.
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

async fn pg(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// The template's rows (runs and instance records: nothing else exists before the sweep) in a
/// new PostgreSQL database, written through the store as an application would.
async fn postgres_template(site: &Site, server: &str) -> PgTemplate {
    let name = format!(
        "crash_tmpl_{}_{}",
        std::process::id(),
        now().rem_euclid(1_000_000_000)
    );
    pg(server)
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let store = reaper_postgres::PostgresStore::connect(&with_database(server, &name))
        .await
        .unwrap();
    for run in site.store.all_runs().await.unwrap() {
        store.put_run(run).await.unwrap();
    }
    let keys: Vec<String> = Connection::open(&site.db)
        .unwrap()
        .prepare("SELECT key FROM reaper_sandbox_instances")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for key in keys {
        let record = SandboxInstanceStore::get(&site.store, &key)
            .await
            .unwrap()
            .unwrap();
        SandboxInstanceStore::upsert(&store, record).await.unwrap();
    }
    drop(store);
    PgTemplate {
        server: server.to_string(),
        name,
    }
}

async fn build_template(backend: &Backend) -> Template {
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
    let postgres = match backend {
        Backend::Sqlite => None,
        Backend::Postgres(server) => Some(postgres_template(&site, server).await),
    };
    Template {
        site,
        runs,
        postgres,
    }
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

/// A fresh copy of the template's database and sandboxes under `dest` (and, on PostgreSQL, in
/// a database of its own). Sandboxes record their journal directory as an absolute path, so
/// each copy's records are pointed at the copy.
async fn copy_scene(template: &Template, dest: &Path) -> Scene {
    let from = template.site.tmp.path();
    std::fs::create_dir_all(dest).unwrap();
    let db = match &template.postgres {
        None => {
            std::fs::copy(&template.site.db, dest.join("reaper.db")).unwrap();
            SceneDb::File(dest.join("reaper.db"))
        }
        Some(t) => {
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let name = format!(
                "{}_{}",
                t.name,
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let server = pg(&t.server).await;
            // A template must have no other sessions: end any the store left closing.
            server
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                    &[&t.name],
                )
                .await
                .unwrap();
            server
                .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {}", t.name))
                .await
                .unwrap();
            SceneDb::Postgres {
                url: with_database(&t.server, &name),
                server: t.server.clone(),
                name,
            }
        }
    };
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
    Scene {
        dir: dest.to_path_buf(),
        db,
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

enum SceneDb {
    File(PathBuf),
    Postgres {
        url: String,
        server: String,
        name: String,
    },
}

struct Scene {
    dir: PathBuf,
    db: SceneDb,
}

impl Scene {
    fn db_arg(&self) -> std::ffi::OsString {
        match &self.db {
            SceneDb::File(path) => path.clone().into(),
            SceneDb::Postgres { url, .. } => url.into(),
        }
    }

    fn reaper(&self, command: &str) -> Command {
        let mut cmd = common::reaper();
        cmd.arg(command)
            .arg("--db")
            .arg(self.db_arg())
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
    async fn expire_leases(&self) {
        match &self.db {
            SceneDb::File(path) => {
                Connection::open(path)
                    .unwrap()
                    .execute("UPDATE reaper_leases SET expires_at = 0", [])
                    .unwrap();
            }
            SceneDb::Postgres { url, .. } => {
                pg(url)
                    .await
                    .execute("UPDATE reaper.leases SET expires_at = 0", &[])
                    .await
                    .unwrap();
            }
        }
    }

    /// Drops the scene's database (PostgreSQL) once it passed.
    async fn drop_database(&self) {
        if let SceneDb::Postgres { server, name, .. } = &self.db {
            let _ = pg(server)
                .await
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await;
        }
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

    async fn state(&self) -> State {
        let path = match &self.db {
            SceneDb::File(path) => path,
            SceneDb::Postgres { url, .. } => return postgres_state(url).await,
        };
        let conn = Connection::open(path).unwrap();
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
                 || COUNT(*) FROM reaper_log_entries \
                 WHERE json_extract(chunk, '$.journalEnd') IS NOT NULL \
                 GROUP BY run_id, json_extract(chunk, '$.journalEnd') HAVING COUNT(*) > 1",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        State {
            statuses: pairs("SELECT run_id, status FROM reaper_runs"),
            transcripts: pairs("SELECT run_id, body FROM reaper_transcripts"),
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

/// [`Scene::state`] of a PostgreSQL scene, by the same queries.
async fn postgres_state(url: &str) -> State {
    let c = pg(url).await;
    let pairs = |rows: Vec<tokio_postgres::Row>| -> BTreeMap<String, String> {
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let q = |sql: &'static str| {
        let c = &c;
        async move { c.query(sql, &[]).await.unwrap() }
    };
    State {
        statuses: pairs(q("SELECT run_id, status FROM reaper.runs").await),
        transcripts: pairs(q("SELECT run_id, body::text FROM reaper.transcripts").await),
        ledger: q("SELECT run_id FROM reaper.reclaim_intents")
            .await
            .iter()
            .map(|r| r.get(0))
            .collect(),
        duplicates: q(
            "SELECT run_id || ' journalEnd ' || (chunk->>'journalEnd') || ' x' || \
                 COUNT(*) FROM reaper.log_entries WHERE chunk->>'journalEnd' IS NOT NULL \
                 GROUP BY run_id, chunk->>'journalEnd' HAVING COUNT(*) > 1",
        )
        .await
        .iter()
        .map(|r| r.get(0))
        .collect(),
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
async fn check(
    scene: &Scene,
    runs: &[SceneRun],
    expected: Option<&State>,
    label: &str,
) -> (State, Vec<String>) {
    let state = scene.state().await;
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
    every_commit(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_on_postgres_killed_at_every_commit_recovers_to_the_crash_free_outcome() {
    let Some(server) = postgres_url() else {
        eprintln!(
            "skipped: REAPER_TEST_POSTGRES_URL is not set; start a server with \
             `eval \"$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)\"`"
        );
        return;
    };
    every_commit(Backend::Postgres(server)).await;
}

async fn every_commit(backend: Backend) {
    let started = Instant::now();
    let template = build_template(&backend).await;
    let work = tempfile::tempdir().unwrap();
    let mut violations = Vec::new();

    // The crash-free sweep: how many commit points it has, and where it ends.
    let clean = copy_scene(&template, &work.path().join("clean")).await;
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
    let (expected, found) = check(&clean, &template.runs, None, "crash-free").await;
    violations.extend(found);
    assert_eq!(
        expected.ledger,
        BTreeSet::from(["run-leaky".to_string()]),
        "only the leak stays pending"
    );

    let (mut crashed, mut not_reached) = (0, 0);
    for k in 1..=n {
        let scene = copy_scene(&template, &work.path().join(format!("crash-{k}"))).await;
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
        scene.expire_leases().await;
        let label = format!("crash point {k}");
        scene.recover(&mut violations, &label);
        violations.extend(
            check(&scene, &template.runs, Some(&expected), &label)
                .await
                .1,
        );
        if violations.is_empty() {
            std::fs::remove_dir_all(&scene.dir).unwrap();
            scene.drop_database().await;
        }
    }

    clean.drop_database().await;
    if let Some(t) = &template.postgres {
        let _ = pg(&t.server)
            .await
            .batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", t.name))
            .await;
    }
    println!(
        "{backend:?} crash points: {n}, violations: {} ({crashed} crashed, {not_reached} finished before \
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
