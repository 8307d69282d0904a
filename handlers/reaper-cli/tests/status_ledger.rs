//! `reaper status` and the reclaim ledger: pending and leaked counts, each leaked sandbox with
//! what an operator needs to find it, and what a read-only database allows.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;

use common::{reaper_at, run, Site, HELLO, MINUTE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_ledger_and_every_leaked_sandbox_and_exits_2_while_one_leaks() {
    let site = Site::new();
    let sandbox = site
        .detached_run("run-leak", Some(HELLO), true, MINUTE)
        .await;
    std::fs::write(sandbox.dir().join(reaper_local::DESTROY_FAILS_FLAG), "").unwrap();
    let (code, ..) =
        run(site
            .reaper("sweep")
            .args(["--detached-ttl", "10m", "--quiet-window", "0ms"]));
    assert_eq!(code, 2);

    let (code, stdout, stderr) = run(site.reaper_status().arg("--json"));
    assert_eq!(code, 2, "a leak is something wrong: {stdout} {stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ledger = &v["reclaimLedger"];
    assert_eq!(ledger["pending"], 1);
    assert_eq!(ledger["leaked"], 1);
    assert!(ledger["oldestFirstSeen"].as_i64().is_some());
    let leak = &ledger["leaks"][0];
    assert_eq!(leak["runId"], "run-leak");
    assert_eq!(leak["sandboxKey"], "local:thread-run-leak");
    assert_eq!(leak["provider"], "local");
    assert_eq!(
        leak["providerSandboxId"],
        reaper_core::SandboxHandle::id(&sandbox)
    );
    assert_eq!(leak["attempts"], 1);
    assert!(leak["nextAttemptAt"].as_i64().is_some());
    assert!(
        leak["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "{leak}"
    );

    let (code, stdout, _) = run(&mut site.reaper_status());
    assert_eq!(code, 2);
    assert!(
        stdout.contains("reclaim ledger: pending 1, leaked 1, oldest "),
        "{stdout}"
    );
    assert!(stdout.contains("1 LEAKED sandbox "), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("run-leak "))
        .expect("a row for the leak");
    assert!(
        row.contains("local:thread-run-leak")
            && row.contains(&format!(
                "local:{}",
                reaper_core::SandboxHandle::id(&sandbox)
            ))
            && row.contains("refused"),
        "{row}"
    );
    site.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_with_an_empty_ledger_says_so_and_exits_0() {
    let site = Site::new();
    let (code, stdout, stderr) = run(&mut site.reaper_status());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("reclaim ledger: pending 0, leaked 0\n"),
        "{stdout}"
    );
}

/// The database (0444) in a directory (0555) this user cannot write. As root, where permission
/// bits do not bind, the binary runs as `nobody`.
#[test]
fn status_on_a_read_only_database_says_exactly_why_it_cannot_read_it_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("reaper.db");
    drop(reaper_sqlite::SqliteStore::open(&db).unwrap());
    let bin = tmp.path().join("reaper");
    common::copy_reaper_binary(&bin);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let status = || {
        let mut cmd = reaper_at(&bin);
        cmd.arg("status").arg("--db").arg(&db);
        if nix::unistd::geteuid().is_root() {
            cmd.uid(65534).gid(65534);
        }
        cmd
    };

    for (file_mode, dir_mode, says) in [
        (0o444, 0o777, "The file is read-only"),
        (0o666, 0o555, "Its directory"),
        (0o444, 0o555, "The file and its directory"),
    ] {
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(file_mode)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
        let before = std::fs::read(&db).unwrap();
        let (code, stdout, stderr) = run(&mut status());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        if code == 0 {
            // SQLite managed a read-only open here: then it must have read the database.
            assert!(stdout.contains("runs by status"), "{stdout}");
        } else {
            assert_eq!(code, 3, "{file_mode:o}/{dir_mode:o}: {stderr}");
            assert!(
                stderr.contains(says)
                    && stderr.contains("reaper.db-shm")
                    && stderr.contains("copy")
                    && stderr.contains("Nothing was changed"),
                "{file_mode:o}/{dir_mode:o}: {stderr}"
            );
        }
        assert_eq!(std::fs::read(&db).unwrap(), before);
    }
}
