//! Exit codes that say what happened: a malformed row, a leaked sandbox or an unreadable ledger
//! is exit 2 ("something is wrong, look"); a damaged database is exit 3 with "damaged" and what
//! to do, never exit 0 with "swept".

mod common;

use common::{run, Site, HELLO, MINUTE};
use reaper_core::{RunStatus, RunStore};
use rusqlite::Connection;

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn sweep(site: &Site, extra: &[&str]) -> (i32, String, String) {
    run(site
        .reaper("sweep")
        .args([
            "--detached-ttl",
            "10m",
            "--quiet-window",
            "0ms",
            "--log",
            "off",
        ])
        .args(extra))
}

fn sql(site: &Site, statement: &str) {
    Connection::open(&site.db)
        .unwrap()
        .execute_batch(statement)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_row_is_listed_as_corrupt_every_other_run_is_swept_and_the_exit_is_2() {
    let site = Site::new();
    site.detached_run("run-good", Some(HELLO), true, MINUTE)
        .await;
    site.detached_run("run-spoilt", Some(HELLO), true, MINUTE)
        .await;
    // A value no reaper or chat route writes: `usage` must be JSON and is only checked on
    // write, so bypass the check the way a hand edit or another tool would.
    sql(
        &site,
        "PRAGMA ignore_check_constraints = ON; \
         UPDATE reaper_runs SET usage = 'not json' WHERE run_id = 'run-spoilt';",
    );

    let (code, stdout, stderr) = sweep(&site, &["--json"]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(report["sweep"]["state"], "swept");
    assert_eq!(report["outcomes"]["finalized"], 1);
    assert_eq!(report["runs"][0]["runId"], "run-good");
    let corrupt = report["corrupt"].as_array().expect("a corrupt list");
    assert_eq!(corrupt.len(), 1, "{report}");
    assert!(
        corrupt[0]["key"].as_str().unwrap().contains("run-spoilt"),
        "{report}"
    );
    let good = RunStore::get(&site.store, "run-good")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(good.status, RunStatus::Completed);

    // The table shows it too.
    site.detached_run("run-next", Some(HELLO), true, MINUTE)
        .await;
    let (code, stdout, _) = sweep(&site, &[]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stdout.contains("1 malformed run row not swept") && stdout.contains("run-spoilt"),
        "{stdout}"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_sandbox_keeps_every_sweep_at_exit_2_until_the_ledger_settles_it() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-leak", Some(HELLO), true, MINUTE)
        .await;
    let flag = sandbox.dir().join(reaper_local::DESTROY_FAILS_FLAG);
    std::fs::write(&flag, "").unwrap();

    let (code, stdout, stderr) = sweep(&site, &[]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let row = stdout.lines().find(|l| l.starts_with("run-leak ")).unwrap();
    assert!(
        row.contains("reclaim-failed") && row.contains("LEAKED"),
        "{row}"
    );
    assert!(
        stdout.contains("reclaim ledger: retried 0 (settled 0, failed 0); pending 1, leaked 1"),
        "{stdout}"
    );

    // Nothing is listed any more (the run is terminal), but the sandbox still leaks: exit 2.
    // The ledger retries at its own pace; make the entry due now.
    sql(
        &site,
        "UPDATE reaper_reclaim_intents SET next_attempt_at = 0",
    );
    let (code, stdout, _) = sweep(&site, &["--json"]);
    assert_eq!(code, 2, "{stdout}");
    let report = json(&stdout);
    assert_eq!(report["considered"], 0);
    assert_eq!(report["reclaims"]["retried"], 1);
    assert_eq!(report["reclaims"]["ledger"]["leaked"], 1);

    // Once the destroy works the entry is settled and the sweep is clean again.
    std::fs::remove_file(&flag).unwrap();
    sql(
        &site,
        "UPDATE reaper_reclaim_intents SET next_attempt_at = 0",
    );
    let (code, stdout, _) = sweep(&site, &["--json"]);
    assert_eq!(code, 0, "{stdout}");
    let report = json(&stdout);
    assert_eq!(report["reclaims"]["settled"], 1);
    assert_eq!(report["reclaims"]["ledger"]["pending"], 0);
    assert!(!site.sandbox_exists(&sandbox).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_ledger_is_exit_2_and_says_so() {
    let site = Site::new();
    site.detached_run("run-good", Some(HELLO), true, MINUTE)
        .await;
    // A ledger entry whose attempt count is not a number.
    sql(
        &site,
        "INSERT INTO reaper_reclaim_intents (run_id, first_seen, attempts, next_attempt_at) \
         VALUES ('run-odd', 0, 'many', 0)",
    );

    let (code, stdout, stderr) = sweep(&site, &["--json"]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(report["outcomes"]["finalized"], 1, "the runs are swept");
    assert!(
        report["reclaims"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("run-odd")),
        "{report}"
    );
    site.teardown().await;
}

/// Overwrites the pages of the `reaper_runs` table (not the schema on page 1, so the file still opens).
fn damage_the_runs_table(site: &Site) {
    damage_table(site, "reaper_runs");
}

/// Overwrites the root page of `table` (not the schema on page 1, so the file still opens).
fn damage_table(site: &Site, table: &str) {
    let conn = Connection::open(&site.db).unwrap();
    let root: i64 = conn
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = ?1",
            [table],
            |r| r.get(0),
        )
        .unwrap();
    let page: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let mut bytes = std::fs::read(&site.db).unwrap();
    let start = ((root - 1) * page) as usize;
    bytes[start..start + page as usize].fill(0xA5);
    std::fs::write(&site.db, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_page_under_the_sweep_is_exit_3_with_damaged_not_a_clean_sweep() {
    let site = Site::new();
    site.detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    damage_the_runs_table(&site);

    let (code, stdout, stderr) = sweep(&site, &["--json"]);
    assert_eq!(code, 3, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("is damaged") && stderr.contains("restore it from a backup"),
        "says what is wrong and what to do: {stderr}"
    );
    let report = json(&stdout);
    assert!(
        report["databaseDamaged"]
            .as_str()
            .is_some_and(|m| m.contains("damaged")),
        "{report}"
    );

    let (code, _, stderr) = run(&mut site.reaper_status());
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("damaged"), "{stderr}");
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_table_of_the_wrong_shape_is_exit_3_with_damaged() {
    let site = Site::new();
    sql(&site, "ALTER TABLE reaper_runs DROP COLUMN driver_epoch");

    let (code, stdout, stderr) = sweep(&site, &[]);
    assert_eq!(code, 3, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("damaged") && stderr.contains("driver_epoch"),
        "{stderr}"
    );
    assert!(!stdout.contains("swept"), "{stdout}");
}

/// Issue 24, item 6: `status` reports the rows it cannot read and still lists the ledger (exit
/// 2, as the sweep, not 3), and the sweep reports the rows no listing reaches (a status
/// `'RUNNING'`, a `detached_since` past 2^53) as corrupt by the same rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_corrupt_rows_beside_the_ledger_and_the_sweep_reports_the_same_rows() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-leak", Some(HELLO), true, MINUTE)
        .await;
    std::fs::write(sandbox.dir().join(reaper_local::DESTROY_FAILS_FLAG), "").unwrap();
    let (code, ..) = sweep(&site, &[]);
    assert_eq!(code, 2, "the leak");
    site.detached_run("run-live", None, false, MINUTE).await;
    sql(
        &site,
        "PRAGMA ignore_check_constraints = ON; \
         INSERT INTO reaper_runs (run_id, thread_id, status, started_at, detached_since) \
           VALUES ('run-shouting', 't-1', 'RUNNING', 1, 1); \
         INSERT INTO reaper_runs (run_id, thread_id, status, started_at, detached_since) \
           VALUES ('run-far', 't-2', 'running', 1, 9007199254740993); \
         INSERT INTO reaper_runs (run_id, thread_id, status, started_at, detached_since, usage) \
           VALUES ('run-spoilt', 't-3', 'running', 1, 1, 'not json');",
    );
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut keys: Vec<String> = v
            .as_array()
            .expect("a corrupt list")
            .iter()
            .map(|c| c["key"].as_str().unwrap().to_string())
            .collect();
        keys.sort();
        keys
    };
    let expected = vec!["run-far", "run-shouting", "run-spoilt"];

    let (code, stdout, stderr) = run(site.reaper_status().arg("--json"));
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let status = json(&stdout);
    assert_eq!(keys(&status["corrupt"]), expected, "{status}");
    assert_eq!(
        status["reclaimLedger"]["leaked"], 1,
        "the ledger is still listed"
    );
    assert_eq!(status["reclaimLedger"]["leaks"][0]["runId"], "run-leak");
    assert!(
        status["detached"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["runId"] == "run-live"),
        "the readable runs are still listed: {status}"
    );

    let (code, stdout, _) = run(&mut site.reaper_status());
    assert_eq!(code, 2);
    assert!(stdout.contains("3 CORRUPT rows"), "{stdout}");
    assert!(
        stdout.contains("reclaim ledger: pending 1, leaked 1"),
        "{stdout}"
    );

    let (code, stdout, stderr) = sweep(&site, &["--json"]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = json(&stdout);
    assert_eq!(keys(&report["corrupt"]), expected, "{report}");
}

/// Issue 24: damage in any table a sweep writes to stops it before any terminal write or
/// destroy: exit 3 with "damaged", the finished run still `running` for a sweep over the
/// restored file, its sandbox still there, and no claim that the reaper changed nothing.
async fn damage_stops_the_sweep_before_any_terminal_write_or_destroy(table: &str) {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-done", Some(HELLO), true, MINUTE)
        .await;
    damage_table(&site, table);

    let (code, stdout, stderr) = sweep(&site, &["--json"]);
    assert_eq!(code, 3, "{table}: stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("damaged") && stderr.contains("restore it"),
        "{table}: says what is wrong and what to do: {stderr}"
    );
    assert!(
        !stderr.contains("changed nothing"),
        "{table}: the sweep wrote its lease, so it must not say it changed nothing: {stderr}"
    );
    let status: String = Connection::open(&site.db)
        .unwrap()
        .query_row(
            "SELECT status FROM reaper_runs WHERE run_id = 'run-done'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "running", "{table}: a terminal write landed");
    assert!(
        site.sandbox_exists(&sandbox).await,
        "{table}: the sandbox was destroyed"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_transcripts_table_stops_the_sweep_before_any_terminal_write_or_destroy() {
    damage_stops_the_sweep_before_any_terminal_write_or_destroy("reaper_transcripts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_logs_table_stops_the_sweep_before_any_terminal_write_or_destroy() {
    damage_stops_the_sweep_before_any_terminal_write_or_destroy("reaper_logs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_entries_table_stops_the_sweep_before_any_terminal_write_or_destroy() {
    damage_stops_the_sweep_before_any_terminal_write_or_destroy("reaper_log_entries").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_sandbox_instances_table_stops_the_sweep_before_any_terminal_write_or_destroy() {
    damage_stops_the_sweep_before_any_terminal_write_or_destroy("reaper_sandbox_instances").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_reclaim_intents_table_stops_the_sweep_before_any_terminal_write_or_destroy() {
    damage_stops_the_sweep_before_any_terminal_write_or_destroy("reaper_reclaim_intents").await;
}
