//! Databases the reaper must not touch: a clear error, a non-zero exit, the file unchanged.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use common::{reaper, reaper_at, run};

/// Runs every command that opens the database against `db`; each must fail with `needle` and
/// exit 3, leaving the file byte-for-byte as it was.
fn refused_by_every_command(db: &Path, needle: &str) {
    let before = std::fs::read(db).unwrap();
    let sandboxes = db.parent().unwrap().join("sandboxes");
    std::fs::create_dir_all(&sandboxes).unwrap();
    for args in [
        &["sweep", "--detached-ttl", "10m"][..],
        &["prune"],
        &["status"],
        &["watch", "--detached-ttl", "10m", "--every", "10ms"],
    ] {
        let mut cmd = reaper();
        cmd.args(args).arg("--db").arg(db);
        if args[0] != "status" {
            cmd.arg("--sandboxes").arg(&sandboxes);
        }
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 3, "{args:?}: stdout {stdout} stderr {stderr}");
        assert!(
            stderr.contains("reaper: error: cannot open the database"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains(needle),
            "{args:?}: {stderr} should say {needle:?}"
        );
        assert_eq!(
            std::fs::read(db).unwrap(),
            before,
            "{args:?} changed the file"
        );
        let side = |suffix: &str| std::path::PathBuf::from(format!("{}{suffix}", db.display()));
        if args[0] == "status" {
            // SQLite's read-only open of a WAL-mode file sets up its shared-memory index and an
            // empty log beside it (reported to the reaper-sqlite owner); no data is written.
            if side("-wal").exists() {
                assert_eq!(
                    std::fs::metadata(side("-wal")).unwrap().len(),
                    0,
                    "status wrote a log"
                );
            }
            let _ = std::fs::remove_file(side("-wal"));
            let _ = std::fs::remove_file(side("-shm"));
        }
        for suffix in ["-wal", "-shm", "-journal"] {
            assert!(
                !side(suffix).exists(),
                "{args:?} created {}",
                side(suffix).display()
            );
        }
    }
}

#[test]
fn a_corrupted_database_file_is_refused_and_left_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("reaper.db");
    let mut bytes = b"this is not a database; ".repeat(200);
    bytes.extend(0u8..=255);
    std::fs::write(&db, &bytes).unwrap();
    refused_by_every_command(&db, "is not a SQLite database");
}

#[test]
fn a_damaged_sqlite_file_is_refused_and_left_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("reaper.db");
    // A real reaper database whose pages after the header were overwritten.
    drop(reaper_sqlite::SqliteStore::open(&db).unwrap());
    let mut bytes = std::fs::read(&db).unwrap();
    for b in bytes.iter_mut().skip(100) {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();
    refused_by_every_command(&db, "reaper.db");
}

#[test]
fn another_applications_sqlite_database_is_refused_and_left_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("app.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); \
             INSERT INTO users (name) VALUES ('ada'), ('grace');",
        )
        .unwrap();
    }
    refused_by_every_command(&db, "another application (tables: users)");
    refused_by_every_command(&db, "reaper init --db");
}

#[test]
fn init_adds_the_reaper_tables_beside_an_application_s_and_every_command_then_opens_it() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("app.db");
    let users = |db: &Path| -> Vec<String> {
        let conn = rusqlite::Connection::open(db).unwrap();
        let mut stmt = conn.prepare("SELECT name FROM users ORDER BY id").unwrap();
        let names = stmt.query_map([], |r| r.get(0)).unwrap();
        names.collect::<Result<_, _>>().unwrap()
    };
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); \
             INSERT INTO users (name) VALUES ('ada'), ('grace');",
        )
        .unwrap();

    let (code, stdout, stderr) = run(reaper().args(["init", "--db"]).arg(&db));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("beside the application's tables users"),
        "{stdout}"
    );
    assert_eq!(users(&db), ["ada", "grace"]);

    let (code, stdout, stderr) = run(reaper().args(["status", "--db"]).arg(&db));
    assert_eq!(code, 0, "{stdout} {stderr}");
    let (code, stdout, _) = run(reaper().args(["init", "--json", "--db"]).arg(&db));
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["action"], "current", "{json}");
    assert_eq!(users(&db), ["ada", "grace"]);
}

#[test]
fn init_creates_a_new_database_file() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("new.db");
    let (code, stdout, stderr) = run(reaper().args(["init", "--json", "--db"]).arg(&db));
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["action"], "created", "{json}");
    assert_eq!(json["beside"], serde_json::json!([]));
    let (code, _, stderr) = run(reaper().args(["status", "--db"]).arg(&db));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn init_refuses_tables_named_like_the_reaper_s_and_leaves_the_file_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("clash.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE reaper_runs (id INTEGER PRIMARY KEY, what TEXT);")
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    let (code, _, stderr) = run(reaper().args(["init", "--db"]).arg(&db));
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("named like the reaper's (reaper_runs)"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), before);
    refused_by_every_command(&db, "named like the reaper's (reaper_runs)");
}

/// Every row of the application's `runs`, `logs` and `transcripts`, in order.
fn app_rows(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut out = Vec::new();
    for sql in [
        "SELECT id || ' ' || what FROM runs ORDER BY id",
        "SELECT line FROM logs ORDER BY rowid",
        "SELECT id || ' ' || said FROM transcripts ORDER BY id",
    ] {
        let mut stmt = conn.prepare(sql).unwrap();
        let rows = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
        out.extend(rows.map(Result::unwrap));
    }
    out
}

#[tokio::test]
async fn init_and_a_real_sweep_work_beside_an_application_s_own_runs_logs_and_transcripts() {
    use reaper_core::{RunStatus, RunStore};

    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("app.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT, status TEXT); \
             CREATE TABLE logs (line TEXT); \
             CREATE TABLE transcripts (id INTEGER PRIMARY KEY, said TEXT); \
             CREATE INDEX runs_by_thread ON runs (what); \
             INSERT INTO runs (what, status) VALUES ('nightly import', 'running'), \
               ('weekly report', 'done'); \
             INSERT INTO logs (line) VALUES ('app started'); \
             INSERT INTO transcripts (said) VALUES ('hello from the app');",
        )
        .unwrap();
    let before = app_rows(&db);
    assert_eq!(before.len(), 4);

    let (code, stdout, stderr) = run(reaper().args(["init", "--db"]).arg(&db));
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(
        stdout.contains("beside the application's tables logs, runs, transcripts"),
        "{stdout}"
    );

    // A run of the reaper's own, detached past its TTL, in a real local sandbox.
    let root = tmp.path().join("sandboxes");
    std::fs::create_dir_all(&root).unwrap();
    let site = common::Site {
        store: reaper_sqlite::SqliteStore::open(&db).unwrap(),
        provider: reaper_local::LocalSandboxProvider::with_root(&root),
        db: db.clone(),
        root,
        tmp,
    };
    let sandbox = site
        .detached_run("run-old", Some(common::HELLO), true, 20 * common::MINUTE)
        .await;
    let (code, stdout, stderr) = run(site.reaper("sweep").args([
        "--detached-ttl",
        "10m",
        "--quiet-window",
        "0ms",
        "--log",
        "off",
    ]));
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("run-old"), "{stdout}");
    assert!(
        !site.sandbox_exists(&sandbox).await,
        "the sweep destroyed the sandbox"
    );
    let run_old = RunStore::get(&site.store, "run-old")
        .await
        .unwrap()
        .unwrap();
    assert_ne!(run_old.status, RunStatus::Running, "{run_old:?}");

    assert_eq!(
        app_rows(&db),
        before,
        "the application's rows are untouched"
    );
    let (code, _, stderr) = run(reaper().args(["status", "--db"]).arg(&db));
    assert!(code == 0 || code == 2, "{stderr}");
    site.teardown().await;
}

#[test]
fn the_sqlite_schema_script_run_by_an_application_s_migration_tool_opens_as_current() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("migrated.db");
    let (code, sql, stderr) = run(reaper().args(["schema", "--sql"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(sql.starts_with("BEGIN;"), "{sql}");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY);")
        .unwrap();
    conn.execute_batch(&sql).unwrap();
    drop(conn);
    let (code, stdout, _) = run(reaper().args(["init", "--json", "--db"]).arg(&db));
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(json["action"], "current", "{json}");
}

#[test]
fn schema_needs_sql_and_refuses_a_hostile_postgres_schema_name() {
    let (code, _, stderr) = run(reaper().args(["schema"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--sql"), "{stderr}");
    let (code, _, stderr) = run(reaper().args([
        "schema",
        "--sql",
        "--dialect",
        "postgres",
        "--postgres-schema",
        "x\"; DROP TABLE users; --",
    ]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not a plain identifier"), "{stderr}");
    let (code, sql, _) = run(reaper().args(["schema", "--sql", "--dialect", "postgres"]));
    assert_eq!(code, 0);
    assert!(
        sql.contains("CREATE SCHEMA IF NOT EXISTS \"reaper\";"),
        "{sql}"
    );
    assert!(sql.contains("CREATE TABLE \"reaper\".runs ("), "{sql}");
}

#[test]
fn a_missing_database_is_not_created() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("typo.db");
    let (code, _, stderr) = run(reaper()
        .args(["sweep", "--detached-ttl", "10m", "--db"])
        .arg(&db)
        .arg("--sandboxes")
        .arg(tmp.path()));
    assert_eq!(code, 3);
    assert!(
        stderr.contains("does not exist") && stderr.contains("REAPER_DB"),
        "{stderr}"
    );
    assert!(!db.exists());
}

/// A directory the reaper's user cannot write. As root (where permission bits do not bind), the
/// binary runs as `nobody` so the read-only directory is really read-only to it.
#[test]
fn a_read_only_database_directory_is_a_clear_error_and_nothing_changes() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("ro");
    let sandboxes = tmp.path().join("sandboxes");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&sandboxes).unwrap();
    let db = dir.join("reaper.db");
    drop(reaper_sqlite::SqliteStore::open(&db).unwrap());
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let before = std::fs::read(&db).unwrap();
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let files_before = listing(&dir);
    // `nobody` must be able to reach the binary: the build's target directory may sit under a
    // private (0700) checkout, so run a copy from this world-readable directory.
    let bin = tmp.path().join("reaper");
    common::copy_reaper_binary(&bin);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    for args in [&["sweep", "--detached-ttl", "10m"][..], &["prune"]] {
        let mut cmd = reaper_at(&bin);
        cmd.args(args)
            .arg("--db")
            .arg(&db)
            .arg("--sandboxes")
            .arg(&sandboxes);
        if nix::unistd::geteuid().is_root() {
            cmd.uid(65534).gid(65534);
        }
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 3, "{args:?}: stdout {stdout} stderr {stderr}");
        assert!(
            stderr.contains(&format!(
                "the database directory {} is not writable",
                dir.display()
            )),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("reaper.db-wal"), "says why: {stderr}");
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(listing(&dir), files_before);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}
