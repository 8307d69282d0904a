//! Two real processes contending on one database file: epoch bumps, a lease, and fenced terminal
//! writes. The contender is this same test binary, re-run with an environment switch so that it
//! executes only [`contender_loop`] against the parent's file.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use reaper_core::{
    EpochBump, Fenced, LeaseGrant, LeaseStore, NewRun, RunError, RunStore, StoreError,
    TerminalStatus, TerminalWrite,
};
use reaper_sqlite::SqliteStore;
use rusqlite::Connection;
use serde_json::{json, Value};

/// Set in a contender's environment to the database path it works on.
const DB_ENV: &str = "REAPER_SQLITE_CONTENDER_DB";
/// The contender's owner name.
const NAME_ENV: &str = "REAPER_SQLITE_CONTENDER_NAME";

const ROUNDS: u64 = 200;
const LEASE_KEY: &str = "sweep";

/// Retries a store call while it reports the documented, retryable `Unavailable`.
async fn retrying<T, F, Fut>(retries: &mut u64, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    loop {
        match call().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() => *retries += 1,
            Err(e) => panic!("store call failed: {e}"),
        }
    }
}

/// Creates what both contenders work on, and the occupancy table the lease holders mark.
async fn prepare(path: &Path) {
    let store = SqliteStore::open(path).unwrap();
    for run_id in std::iter::once("shared".to_string()).chain((0..ROUNDS).map(fenced_id)) {
        store
            .create_or_resume(NewRun {
                run_id,
                thread_id: "contention".into(),
                started_at: 1,
                status: None,
            })
            .await
            .unwrap();
    }
    Connection::open(path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE occupancy (key TEXT PRIMARY KEY, holder TEXT); \
             INSERT INTO occupancy VALUES ('sweep', NULL);",
        )
        .unwrap();
}

fn fenced_id(i: u64) -> String {
    format!("fenced-{i}")
}

/// One contender's work: `ROUNDS` rounds, each claiming `fenced-<i>`, bumping the shared run,
/// taking the lease once, then landing (or losing) the terminal write of `fenced-<i>`. Both
/// contenders walk the same runs in the same order, so their claims collide.
async fn contend(path: &Path, me: &str) -> Value {
    let store = SqliteStore::open(path).unwrap();
    let side = Connection::open(path).unwrap();
    side.busy_timeout(Duration::from_secs(5)).unwrap();
    let mut retries = 0;
    let (mut epochs, mut landed) = (Vec::new(), BTreeMap::new());
    let (mut acquired, mut violations, mut refusals, mut superseded) = (0u64, 0u64, 0u64, 0u64);

    let started = Instant::now();
    for i in 0..ROUNDS {
        let run_id = fenced_id(i);
        let claimed = match retrying(&mut retries, || store.bump_epoch(&run_id)).await {
            EpochBump::Claimed { epoch, .. } => Some(epoch),
            EpochBump::Terminal(_) => None,
            EpochBump::Unknown => panic!("{run_id} is unknown"),
        };

        match retrying(&mut retries, || store.bump_epoch("shared")).await {
            EpochBump::Claimed { epoch, .. } => epochs.push(epoch),
            other => panic!("bump of a running run answered {other:?}"),
        }

        // Mutual exclusion, checked two ways while holding: the lease row still carries this
        // grant's token, and the occupancy slot was free on entry.
        let lease = loop {
            match retrying(&mut retries, || {
                store.acquire(LEASE_KEY, me, 1_000, 600_000)
            })
            .await
            {
                LeaseGrant::Acquired(lease) => break lease,
                LeaseGrant::Held { .. } => {
                    refusals += 1;
                    std::thread::yield_now();
                }
            }
        };
        acquired += 1;
        let entered = side
            .execute(
                "UPDATE occupancy SET holder = ?1 WHERE key = 'sweep' AND holder IS NULL",
                [me],
            )
            .unwrap();
        let (owner, token): (String, String) = side
            .query_row(
                "SELECT owner, token FROM reaper_leases WHERE key = ?1",
                [LEASE_KEY],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        if entered != 1 || owner != me || token != lease.token {
            violations += 1;
        }
        side.execute(
            "UPDATE occupancy SET holder = NULL WHERE key = 'sweep' AND holder = ?1",
            [me],
        )
        .unwrap();
        retrying(&mut retries, || store.release(&lease)).await;

        let Some(epoch) = claimed else { continue };
        let write = TerminalWrite {
            status: TerminalStatus::Completed,
            finished_at: 2,
            error: Some(RunError::new(me)),
        };
        match retrying(&mut retries, || {
            store.write_terminal(&run_id, epoch, &write)
        })
        .await
        {
            Fenced::Written(true) => {
                landed.insert(run_id, epoch);
            }
            Fenced::Written(false) => panic!("{run_id} vanished"),
            Fenced::Superseded { observed } => {
                assert!(observed > epoch, "superseded by {observed} at {epoch}");
                superseded += 1;
            }
        }
    }
    let elapsed_ms = started.elapsed().as_millis();

    json!({
        "name": me,
        "epochs": epochs,
        "acquired": acquired,
        "violations": violations,
        "refusals": refusals,
        "landed": landed,
        "superseded": superseded,
        "retries": retries,
        "elapsed_ms": elapsed_ms,
    })
}

/// Run alone, this checks one contender's loop on its own file. Re-run by
/// [`two_processes_contending_on_one_file_lose_no_update_and_never_share_the_lease`] with
/// [`DB_ENV`] set, it is that test's second and third process: it says READY, waits for GO on
/// stdin so both start together, works on the shared file, and prints its RESULT.
#[tokio::test]
async fn contender_loop() {
    let Ok(path) = std::env::var(DB_ENV) else {
        let dir = common::temp_dir();
        let path = dir.path().join("alone.db");
        prepare(&path).await;
        let result = contend(&path, "alone").await;
        assert_eq!(
            result["epochs"],
            json!((1..=ROUNDS).collect::<Vec<_>>()),
            "a lone contender's epochs are 1..=N"
        );
        assert_eq!(result["acquired"], json!(ROUNDS));
        assert_eq!(result["violations"], json!(0));
        assert_eq!(result["refusals"], json!(0));
        assert_eq!(result["landed"].as_object().unwrap().len() as u64, ROUNDS);
        return;
    };
    let me = std::env::var(NAME_ENV).expect("contender name");
    println!("READY");
    // Stdout may be block-buffered on a pipe: the parent is waiting for this line now.
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    assert_eq!(go.trim(), "GO");
    let result = contend(Path::new(&path), &me).await;
    println!("RESULT {result}");
    std::io::stdout().flush().unwrap();
}

// The child is returned to the caller, which waits for it in `result_of`.
#[allow(clippy::zombie_processes)]
fn spawn_contender(path: &Path, name: &str) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "contender_loop",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DB_ENV, path)
        .env(NAME_ENV, name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let status = child.wait().unwrap();
            panic!("contender {name} exited before READY: {status}");
        }
        // libtest may print "test contender_loop ... " on the same line first.
        if line.trim_end().ends_with("READY") {
            return (child, stdin, stdout);
        }
    }
}

fn result_of(mut child: Child, stdout: BufReader<ChildStdout>) -> Value {
    let mut result = None;
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some(at) = line.find("RESULT ") {
            result = Some(serde_json::from_str(&line[at + "RESULT ".len()..]).unwrap());
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "contender failed: {status}");
    result.expect("contender printed its RESULT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_contending_on_one_file_lose_no_update_and_never_share_the_lease() {
    let dir = common::temp_dir();
    let path = dir.path().join("contended.db");
    prepare(&path).await;

    let mut contenders = [
        spawn_contender(&path, "first"),
        spawn_contender(&path, "second"),
    ];
    // Both are READY (open, waiting): start them together.
    for (_, stdin, _) in &mut contenders {
        writeln!(stdin, "GO").unwrap();
        stdin.flush().unwrap();
    }
    let results: Vec<Value> = contenders
        .into_iter()
        .map(|(child, stdin, stdout)| {
            drop(stdin);
            result_of(child, stdout)
        })
        .collect();

    // Epoch bumps: no lost update, and every epoch handed out exactly once across processes.
    let store = SqliteStore::open(&path).unwrap();
    let shared = RunStore::get(&store, "shared").await.unwrap().unwrap();
    assert_eq!(shared.driver_epoch, Some(2 * ROUNDS));
    let mut all_epochs = BTreeSet::new();
    for r in &results {
        for e in r["epochs"].as_array().unwrap() {
            assert!(
                all_epochs.insert(e.as_u64().unwrap()),
                "epoch {e} handed out twice"
            );
        }
    }
    assert_eq!(all_epochs, (1..=2 * ROUNDS).collect::<BTreeSet<_>>());

    // The lease: every acquisition found itself the only holder, and all were released.
    for r in &results {
        assert_eq!(r["acquired"], json!(ROUNDS));
        assert_eq!(r["violations"], json!(0), "two holders at once: {r}");
    }
    let leftover: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM reaper_leases", [], |r| r.get(0))
        .unwrap();
    assert_eq!(leftover, 0);

    // Fenced terminal writes: exactly one lands per run, by the holder of the final epoch.
    let mut winners: BTreeMap<String, (String, u64)> = BTreeMap::new();
    for r in &results {
        let name = r["name"].as_str().unwrap().to_string();
        for (run_id, epoch) in r["landed"].as_object().unwrap() {
            let previous = winners.insert(run_id.clone(), (name.clone(), epoch.as_u64().unwrap()));
            assert!(previous.is_none(), "two terminal writes landed on {run_id}");
        }
    }
    assert_eq!(winners.len() as u64, ROUNDS);
    for (run_id, (writer, epoch)) in &winners {
        let run = RunStore::get(&store, run_id).await.unwrap().unwrap();
        assert_eq!(run.error.unwrap().message, *writer, "{run_id}");
        assert_eq!(run.driver_epoch, Some(*epoch), "{run_id}");
    }

    let retries: u64 = results.iter().map(|r| r["retries"].as_u64().unwrap()).sum();
    let refusals: u64 = results
        .iter()
        .map(|r| r["refusals"].as_u64().unwrap())
        .sum();
    let superseded: u64 = results
        .iter()
        .map(|r| r["superseded"].as_u64().unwrap())
        .sum();
    println!(
        "contention: 2 processes x {ROUNDS} rounds (claim + bump + lease + fenced write) in {:?} \
         ms; {refusals} lease refusals, {superseded} superseded terminal writes, {retries} \
         Unavailable retries",
        results
            .iter()
            .map(|r| r["elapsed_ms"].as_u64().unwrap())
            .collect::<Vec<_>>(),
    );
}
