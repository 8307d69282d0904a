//! `reaper sweep --dry-run` and `reaper prune --dry-run` (issue 25): every run, ledger entry and
//! journal gets a planned decision with its proof, and the database file, the sandboxes' files
//! and their processes are exactly as they were.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{assert_valid, now, processes_under, run, Site, HELLO, MINUTE};
use reaper_core::{ReclaimIntent, ReclaimLedger, RunPatch, RunStatus, RunStore};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// An agent that printed one line and keeps running without writing more: producing, and still
/// byte-stable, so any change under the sandbox root is the reaper's.
const PRODUCING: &str = r#"printf '{"delta":"working"}\n'; exec sleep 600"#;

/// Every regular file under `dir` (and the SQLite database and its WAL, which hold the data),
/// by path, with its SHA-256. The `-shm` file is SQLite's shared-memory index, which every
/// reader updates by design; it holds no data and is left out.
fn hashes(dirs: &[&Path]) -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path.to_string_lossy().into_owned();
            if name.ends_with("-shm") {
                continue;
            }
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                out.insert(format!("{name}/"), "dir".into());
                walk(&path, out);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(name, format!("{:x}", Sha256::digest(&bytes)));
            }
        }
    }
    let mut out = BTreeMap::new();
    for dir in dirs {
        walk(dir, &mut out);
    }
    out
}

/// A site with a run in every situation a sweep and a prune decide about:
/// - `run-done`: its agent finished inside the TTL (finalize, then destroy its sandbox);
/// - `run-busy`: its agent is still producing (left alone);
/// - `run-overdue`: detached past the TTL (expire, then destroy its sandbox);
/// - `run-leaked`: completed, its destroy failed once, a due ledger entry (retry the destroy);
/// - an orphan journal two days old in `run-leaked`'s sandbox (prune deletes it).
async fn scene() -> (Site, Vec<reaper_local::LocalSandbox>) {
    let site = Site::new();
    let done = site
        .detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    let busy = site
        .detached_run("run-busy", Some(PRODUCING), false, MINUTE)
        .await;
    let overdue = site
        .detached_run("run-overdue", Some(HELLO), true, 90 * MINUTE)
        .await;
    let leaked = site
        .detached_run("run-leaked", Some(HELLO), true, 2 * MINUTE)
        .await;
    site.store
        .update(
            "run-leaked",
            RunPatch {
                status: Some(RunStatus::Completed),
                finished_at: reaper_core::Patch::Set(now() - MINUTE),
                detached_since: reaper_core::Patch::Clear,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let record = site.store.get("run-leaked").await.unwrap().unwrap();
    let mut intent = ReclaimIntent::new(&record, now() - 5 * MINUTE);
    intent.provider = Some("local".into());
    intent.provider_sandbox_id = Some(leaked.id().to_string());
    intent.attempts = 1;
    intent.next_attempt_at = now() - MINUTE;
    intent.last_error = Some("destroy failed: injected".into());
    assert!(site.store.record_intent(&intent).await.unwrap());
    // The orphan: a journal and its sidecar of a run the store never heard of, two days old.
    let paths =
        reaper_core::journal::journal_paths("run-orphan", Some(leaked.journal_dir())).unwrap();
    for file in [&paths.journal, &paths.stderr] {
        std::fs::write(file, "{\"delta\":\"old\"}\n").unwrap();
        let status = std::process::Command::new("touch")
            .args(["-d", "2 days ago", file])
            .status()
            .unwrap();
        assert!(status.success());
    }
    // The producing agent has printed its line: wait for it, on the file, not the clock.
    let busy_journal =
        reaper_core::journal::journal_paths("run-busy", Some(busy.journal_dir())).unwrap();
    let guard = std::time::Instant::now();
    while std::fs::read_to_string(&busy_journal.journal)
        .map(|s| !s.ends_with('\n'))
        .unwrap_or(true)
    {
        // A hang guard only: the agent's first line lands within milliseconds.
        assert!(
            guard.elapsed() < std::time::Duration::from_secs(120),
            "the producing agent never wrote its first line"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (site, vec![done, busy, overdue, leaked])
}

fn entry<'a>(report: &'a Value, run_id: &str) -> &'a Value {
    report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["runId"] == run_id)
        .unwrap_or_else(|| panic!("no entry for {run_id} in {report:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_sweep_and_prune_plan_every_run_and_journal_and_leave_database_and_sandboxes_byte_identical(
) {
    let (site, _sandboxes) = scene().await;
    let before = hashes(&[site.tmp.path()]);
    let processes_before = processes_under(&site.root);
    assert!(
        !processes_before.is_empty(),
        "the producing agent runs under the sandbox root"
    );

    let (code, stdout, stderr) = run(site.reaper("sweep").args([
        "--dry-run",
        "--json",
        "--detached-ttl",
        "30m",
        "--quiet-window",
        "0ms",
    ]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["sweep"]["state"], "dry-run", "{report:#}");
    assert_valid(&report);

    let done = entry(&report, "run-done");
    assert_eq!(done["planned"], true);
    assert_eq!(done["outcome"], "finalized");
    assert_eq!(done["sandbox"], "destroyed", "{done:#}");
    assert_eq!(done["proof"]["pastTtl"], false);
    assert!(
        done["proof"]["probe"]
            .as_str()
            .unwrap()
            .starts_with("finished"),
        "{done:#}"
    );
    assert_eq!(done["proof"]["reclaim"]["action"], "destroy", "{done:#}");
    assert!(done["reason"]["message"]
        .as_str()
        .unwrap()
        .starts_with("dry run: would finalize"));

    let busy = entry(&report, "run-busy");
    assert_eq!(busy["outcome"], "producing", "{busy:#}");
    assert_eq!(busy["planned"], true);
    assert!(busy["proof"]["probe"]
        .as_str()
        .unwrap()
        .starts_with("producing"));
    assert!(busy.get("sandbox").is_none(), "{busy:#}");

    let overdue = entry(&report, "run-overdue");
    assert_eq!(overdue["outcome"], "expired", "{overdue:#}");
    assert_eq!(overdue["proof"]["pastTtl"], true);
    let (since, ttl, expires) = (
        overdue["proof"]["detachedSince"].as_i64().unwrap(),
        overdue["proof"]["ttlMs"].as_i64().unwrap(),
        overdue["proof"]["expiresAt"].as_i64().unwrap(),
    );
    assert_eq!(
        (ttl, expires),
        (30 * MINUTE, since + ttl),
        "the TTL arithmetic"
    );
    assert!(overdue["proof"]["now"].as_i64().unwrap() >= expires);
    assert!(overdue["proof"].get("probe").is_none(), "{overdue:#}");
    assert_eq!(overdue["sandbox"], "destroyed");

    let ledger = &report["reclaims"]["planned"];
    assert_eq!(ledger.as_array().map(Vec::len), Some(1), "{report:#}");
    assert_eq!(ledger[0]["runId"], "run-leaked");
    assert_eq!(ledger[0]["action"], "retry-destroy");
    assert_eq!(ledger[0]["reclaim"]["action"], "destroy", "{ledger:#}");

    // The table says the same to a person, every row marked as a plan.
    let (code, table, stderr) = run(site.reaper("sweep").args([
        "--dry-run",
        "--detached-ttl",
        "30m",
        "--quiet-window",
        "0ms",
    ]));
    assert_eq!(code, 0, "{table}\n{stderr}");
    assert!(
        table.starts_with("dry run: 3 detached runs planned"),
        "{table}"
    );
    assert!(table.contains("would: expired"), "{table}");
    assert!(
        table.contains("ledger run-leaked: would retry-destroy"),
        "{table}"
    );

    let (code, stdout, stderr) =
        run(site
            .reaper("prune")
            .args(["--dry-run", "--json", "--orphan-ttl", "1h"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let pruned: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(pruned["dryRun"], true);
    let planned: Vec<(String, String)> = pruned["journals"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|j| j["planned"].as_array().cloned().unwrap_or_default())
        .map(|p| {
            (
                p["runId"].as_str().unwrap().to_string(),
                p["proof"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let ids: Vec<&str> = planned.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["run-leaked", "run-orphan"], "{pruned:#}");
    assert!(planned[0].1.contains("completed"), "{planned:?}");
    assert!(planned[1].1.contains("orphan"), "{planned:?}");
    let deleted: usize = pruned["journals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["deleted"].as_array().unwrap().len())
        .sum();
    assert_eq!(deleted, 0, "{pruned:#}");

    assert_eq!(
        hashes(&[site.tmp.path()]),
        before,
        "the dry runs changed the database or a sandbox"
    );
    assert_eq!(
        processes_under(&site.root),
        processes_before,
        "the dry runs started or stopped a process in a sandbox"
    );
    // The witness is sensitive: the same sweep without --dry-run changes both.
    let (code, stdout, stderr) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "30m", "--quiet-window", "0ms"]));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_ne!(hashes(&[site.tmp.path()]), before, "a real sweep writes");
    site.teardown().await;
}
