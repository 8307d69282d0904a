//! Opening a file: what is refused (and left byte-for-byte untouched), what is migrated, and the
//! connection settings several processes rely on.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use reaper_core::{NewRun, RunStore};
use reaper_sqlite::{Initialised, OpenError, SqliteStore, SCHEMA_VERSION};
use rusqlite::Connection;

use common::temp_dir;

/// The bytes and modification time of a file, and which files sit beside it.
#[derive(Debug, PartialEq)]
struct Fingerprint {
    bytes: Vec<u8>,
    modified: SystemTime,
    siblings: Vec<PathBuf>,
}

fn fingerprint(path: &Path) -> Fingerprint {
    let mut siblings: Vec<PathBuf> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    siblings.sort();
    Fingerprint {
        bytes: fs::read(path).unwrap(),
        modified: fs::metadata(path).unwrap().modified().unwrap(),
        siblings,
    }
}

/// A reaper database at `version`, left in rollback-journal mode so that reading it later creates
/// no side files.
fn reaper_db_at_version(path: &Path, version: i64) {
    drop(SqliteStore::open(path).unwrap());
    let conn = Connection::open(path).unwrap();
    conn.execute(
        "INSERT INTO reaper_schema (version, description) VALUES (?1, 'from the future')",
        [version],
    )
    .unwrap();
    conn.query_row("PRAGMA journal_mode = DELETE", [], |r| {
        r.get::<_, String>(0)
    })
    .unwrap();
}

fn new_run(run_id: &str) -> NewRun {
    NewRun {
        run_id: run_id.into(),
        thread_id: "thread".into(),
        started_at: 1,
        status: None,
    }
}

#[test]
fn a_database_with_a_newer_schema_is_refused_naming_both_versions_and_left_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("future.db");
    reaper_db_at_version(&path, 99);
    let before = fingerprint(&path);

    let err = SqliteStore::open(&path).unwrap_err();
    match &err {
        OpenError::TooNew {
            found, supported, ..
        } => {
            assert_eq!(*found, 99);
            assert_eq!(*supported, SCHEMA_VERSION);
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("version 99"), "{message}");
    assert!(
        message.contains(&format!("up to {SCHEMA_VERSION}")),
        "{message}"
    );
    assert!(matches!(
        SqliteStore::open_read_only(&path).unwrap_err(),
        OpenError::TooNew { found: 99, .. }
    ));
    assert_eq!(fingerprint(&path), before);
}

#[test]
fn an_application_database_is_not_written_by_a_plain_open_and_init_is_named() {
    let dir = temp_dir();
    let path = dir.path().join("crm.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);")
        .unwrap();
    let before = fingerprint(&path);

    let err = SqliteStore::open(&path).unwrap_err();
    match &err {
        OpenError::NotInitialised { tables, .. } => {
            assert_eq!(tables, &vec!["customers".to_string()])
        }
        other => panic!("expected NotInitialised, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("customers"), "{message}");
    assert!(message.contains("reaper init --db"), "{message}");
    assert!(matches!(
        SqliteStore::open_read_only(&path).unwrap_err(),
        OpenError::NotInitialised { .. }
    ));
    assert_eq!(fingerprint(&path), before);
}

#[test]
fn init_adds_the_reaper_tables_beside_an_application_s_and_keeps_its_rows() {
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT); \
             INSERT INTO customers (name) VALUES ('ada'), ('grace');",
        )
        .unwrap();

    let (_, done) = SqliteStore::init(&path).unwrap();
    assert_eq!(
        done,
        Initialised::Created {
            beside: vec!["customers".to_string()]
        }
    );
    let names: Vec<String> = Connection::open(&path)
        .unwrap()
        .prepare("SELECT name FROM customers ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(names, ["ada", "grace"]);
    // From now on every command opens it, and a second init has nothing to do.
    SqliteStore::open(&path).unwrap();
    SqliteStore::open_read_only(&path).unwrap();
    assert_eq!(SqliteStore::init(&path).unwrap().1, Initialised::Current);
}

#[test]
fn tables_named_like_the_reaper_s_without_its_schema_are_refused_even_by_init() {
    let dir = temp_dir();
    let path = dir.path().join("clash.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY); \
             CREATE TABLE reaper_runs (id INTEGER PRIMARY KEY, what TEXT);",
        )
        .unwrap();
    let before = fingerprint(&path);

    for err in [
        SqliteStore::open(&path).unwrap_err(),
        SqliteStore::init(&path).unwrap_err(),
        SqliteStore::open_read_only(&path).unwrap_err(),
    ] {
        match &err {
            OpenError::Foreign { tables, .. } => {
                assert_eq!(tables, &vec!["reaper_runs".to_string()])
            }
            other => panic!("expected Foreign, got {other:?}"),
        }
    }
    assert_eq!(fingerprint(&path), before);
}

/// An application's own tables with the names the reaper's had before version 7, holding rows.
const APP_TABLES_WITH_OLD_NAMES: &str = "CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT); \
     CREATE TABLE logs (line TEXT); \
     CREATE TABLE transcripts (id INTEGER PRIMARY KEY, said TEXT); \
     CREATE INDEX runs_by_thread ON runs (what); \
     INSERT INTO runs (what) VALUES ('app run 1'), ('app run 2'); \
     INSERT INTO logs (line) VALUES ('app log'); \
     INSERT INTO transcripts (said) VALUES ('hello');";

fn app_rows(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut out = Vec::new();
    for sql in [
        "SELECT what FROM runs ORDER BY id",
        "SELECT line FROM logs ORDER BY rowid",
        "SELECT said FROM transcripts ORDER BY id",
    ] {
        let rows: Vec<String> = conn
            .prepare(sql)
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        out.extend(rows);
    }
    out
}

#[tokio::test]
async fn init_adds_the_reaper_tables_beside_an_application_s_own_runs_logs_and_transcripts() {
    let dir = temp_dir();
    let path = dir.path().join("app.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(APP_TABLES_WITH_OLD_NAMES)
        .unwrap();
    let before = app_rows(&path);

    // A plain open still refuses an application's database: only init writes into it.
    assert!(matches!(
        SqliteStore::open(&path).unwrap_err(),
        OpenError::NotInitialised { .. }
    ));
    let (store, _) = SqliteStore::init(&path).unwrap();
    store.create_or_resume(new_run("reaper-run")).await.unwrap();
    assert!(RunStore::get(&store, "reaper-run").await.unwrap().is_some());
    drop(store);

    assert_eq!(app_rows(&path), before);
    assert_eq!(
        app_rows(&path),
        ["app run 1", "app run 2", "app log", "hello"]
    );
    SqliteStore::open(&path).unwrap();
    assert_eq!(SqliteStore::init(&path).unwrap().1, Initialised::Current);
}

/// The file a database at `version` (1..=6) would be, built by the released migrations up to it,
/// with one row in each of its tables.
fn old_version_file(path: &Path, version: u32) {
    let conn = Connection::open(path).unwrap();
    for m in reaper_sql::MIGRATIONS
        .iter()
        .filter(|m| m.version <= version)
    {
        for sql in m.statements {
            conn.execute(sql, []).unwrap();
        }
        conn.execute(
            "INSERT INTO reaper_schema (version, description) VALUES (?1, ?2)",
            rusqlite::params![m.version, m.description],
        )
        .unwrap();
    }
    conn.execute_batch(
        "INSERT INTO runs (run_id, thread_id, status, started_at, detached_since, sandbox_key) \
         VALUES ('old-run', 't', 'running', 1, 5, 'sb'); \
         INSERT INTO runs (run_id, thread_id, status, started_at, finished_at) \
         VALUES ('old-done', 't', 'completed', 1, 2); \
         INSERT INTO leases (key, owner, token, expires_at) VALUES ('k', 'o', 'tok', 9); \
         INSERT INTO logs (run_id, next_seq) VALUES ('old-run', 1); \
         INSERT INTO log_entries (run_id, seq, chunk) VALUES ('old-run', 0, '{}'); \
         INSERT INTO sandbox_instances (key, provider, provider_sandbox_id, thread_id, \
         updated_at) VALUES ('sb', 'local', 'p1', 't', 3); \
         INSERT INTO transcripts (run_id, thread_id, body, exit_code, saved_at) \
         VALUES ('old-done', 't', '[]', 0, 4);",
    )
    .unwrap();
}

/// Every row of every reaper table, as text, keyed by the table's version-7 name.
fn reaper_rows(path: &Path, version: u32) -> Vec<(String, Vec<String>)> {
    let conn = Connection::open(path).unwrap();
    reaper_sql::schema::shape_at(version)
        .map(|(table, _)| {
            let rows: Vec<String> = conn
                .prepare(&format!("SELECT * FROM {table} ORDER BY rowid"))
                .unwrap()
                .query_map([], |r| {
                    Ok((0..r.as_ref().column_count())
                        .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                        .collect::<Vec<_>>()
                        .join("|"))
                })
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let new_name = reaper_sql::schema::TABLES
                .into_iter()
                .find(|t| reaper_sql::schema::name_at(t, version) == table)
                .unwrap();
            (new_name.to_string(), rows)
        })
        .filter(|(table, _)| table != reaper_sql::SCHEMA_TABLE)
        .collect()
}

/// What SQLite keeps of the schema, quotes dropped (a rename writes the new name quoted),
/// in name order.
fn schema_of(path: &Path) -> Vec<(String, String, String)> {
    let conn = Connection::open(path).unwrap();
    let rows: Vec<(String, String, String)> = conn
        .prepare(
            "SELECT type, name, sql FROM sqlite_master \
             WHERE sql IS NOT NULL ORDER BY type, name",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    rows.into_iter()
        .map(|(t, n, sql)| (t, n, sql.replace('"', "")))
        .collect()
}

#[tokio::test]
async fn a_database_of_every_older_version_upgrades_to_the_prefixed_names_keeping_every_row() {
    let dir = temp_dir();
    let fresh = dir.path().join("fresh.db");
    drop(SqliteStore::open(&fresh).unwrap());
    for version in 1..=6 {
        let path = dir.path().join(format!("v{version}.db"));
        old_version_file(&path, version);
        let before = reaper_rows(&path, version);
        assert!(before
            .iter()
            .any(|(t, rows)| t == "reaper_runs" && rows.len() == 2));

        let store = SqliteStore::open(&path).unwrap();
        let run = RunStore::get(&store, "old-run").await.unwrap().unwrap();
        assert_eq!(run.detached_since, Some(5));
        drop(store);

        let after = reaper_rows(&path, SCHEMA_VERSION);
        for (table, rows) in &before {
            let now = &after.iter().find(|(t, _)| t == table).unwrap().1;
            assert_eq!(now, rows, "v{version}: {table}");
        }
        // The upgraded file has the very tables and indexes a new one has, and no old name.
        assert_eq!(schema_of(&path), schema_of(&fresh), "v{version}");
        let conn = Connection::open(&path).unwrap();
        let unprefixed: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name NOT LIKE 'reaper\\_%' ESCAPE '\\' \
                 AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(unprefixed, 0, "v{version}");
    }
}

#[test]
fn a_failed_upgrade_to_version_seven_leaves_the_old_database_as_it_was() {
    let dir = temp_dir();
    let path = dir.path().join("v6.db");
    old_version_file(&path, 6);
    // A table already holding one of the new names makes a rename fail half way through.
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE reaper_transcripts (x);")
        .unwrap();
    let schema = schema_of(&path);
    let rows = reaper_rows(&path, 6);

    let err = SqliteStore::open(&path).unwrap_err();
    assert!(err.to_string().contains("reaper_transcripts"), "{err}");
    assert_eq!(schema_of(&path), schema);
    assert_eq!(reaper_rows(&path, 6), rows);
    let indexes: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN \
             ('runs_by_thread', 'runs_reclaimable', 'runs_finished', 'runs_unlistable', \
             'transcripts_by_thread')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        indexes, 5,
        "the dropped indexes came back with the rollback"
    );
}

#[test]
fn the_schema_script_applied_by_an_application_opens_as_current() {
    let dir = temp_dir();
    let path = dir.path().join("migrated-by-the-app.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY);")
        .unwrap();
    conn.execute_batch(&reaper_sqlite::schema_script()).unwrap();
    drop(conn);

    SqliteStore::open_read_only(&path).unwrap();
    assert_eq!(SqliteStore::init(&path).unwrap().1, Initialised::Current);
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("notes.txt");
    fs::write(&path, b"these are my notes, not a database\n".repeat(200)).unwrap();
    let before = fingerprint(&path);

    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(err, OpenError::NotSqlite { .. }),
        "expected NotSqlite, got {err:?}"
    );
    assert!(err.to_string().contains("not a SQLite database"), "{err}");
    assert_eq!(fingerprint(&path), before);
}

#[test]
fn a_file_with_a_sqlite_header_and_garbage_after_it_is_refused_and_left_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("damaged.db");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend((0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    fs::write(&path, &bytes).unwrap();
    let before = fingerprint(&path);

    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(err, OpenError::Corrupt { .. }) && err.to_string().contains("is damaged"),
        "expected a damaged database, got {err:?}"
    );
    assert_eq!(fingerprint(&path), before);
}

#[test]
fn a_truncated_reaper_database_is_refused_and_left_untouched() {
    let dir = temp_dir();
    let path = dir.path().join("truncated.db");
    drop(SqliteStore::open(&path).unwrap());
    // Checkpoint into the main file and leave WAL mode, then cut the file mid-page.
    Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode = DELETE", [], |r| {
            r.get::<_, String>(0)
        })
        .unwrap();
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() / 2 + 100]).unwrap();
    let before = fingerprint(&path);

    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(err, OpenError::Corrupt { .. } | OpenError::NotSqlite { .. }),
        "expected Corrupt, got {err:?}"
    );
    assert_eq!(fingerprint(&path), before);
}

#[test]
fn an_empty_file_becomes_a_reaper_database() {
    let dir = temp_dir();
    let path = dir.path().join("empty.db");
    fs::write(&path, b"").unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.path(), Some(path.as_path()));
    let version: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT MAX(version) FROM reaper_schema", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, i64::from(SCHEMA_VERSION));
}

#[tokio::test]
async fn reopening_applies_no_migration_twice_and_keeps_the_data() {
    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    SqliteStore::open(&path)
        .unwrap()
        .create_or_resume(new_run("kept"))
        .await
        .unwrap();
    let schema_before: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT group_concat(sql, ';') FROM sqlite_master ORDER BY name",
            [],
            |r| r.get(0),
        )
        .unwrap();

    for _ in 0..3 {
        let store = SqliteStore::open(&path).unwrap();
        assert!(RunStore::get(&store, "kept").await.unwrap().is_some());
    }

    let conn = Connection::open(&path).unwrap();
    let applied: i64 = conn
        .query_row("SELECT COUNT(*) FROM reaper_schema", [], |r| r.get(0))
        .unwrap();
    // One row per migration a new file takes: the baseline, then any later one.
    assert_eq!(applied, reaper_sql::schema::pending(0).count() as i64);
    let schema_after: String = conn
        .query_row(
            "SELECT group_concat(sql, ';') FROM sqlite_master ORDER BY name",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(schema_after, schema_before);
}

#[test]
fn stores_opening_one_new_file_at_once_apply_the_schema_exactly_once() {
    let dir = temp_dir();
    let path = dir.path().join("race.db");
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    SqliteStore::open(&path)
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap().expect("every concurrent open succeeds");
        }
    });
    let applied: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM reaper_schema", [], |r| r.get(0))
        .unwrap();
    // One row per migration a new file takes: the baseline, then any later one.
    assert_eq!(applied, reaper_sql::schema::pending(0).count() as i64);
}

#[test]
fn the_database_is_in_wal_mode() {
    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    let _store = SqliteStore::open(&path).unwrap();
    let mode: String = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_read_only_store_reads_and_refuses_writes_without_touching_the_file() {
    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    SqliteStore::open(&path)
        .unwrap()
        .create_or_resume(new_run("seen"))
        .await
        .unwrap();
    let before = fs::read(&path).unwrap();

    let store = SqliteStore::open_read_only(&path).unwrap();
    assert!(store.is_read_only());
    assert!(RunStore::get(&store, "seen").await.unwrap().is_some());
    assert_eq!(store.count_by_status().await.unwrap().running, 1);
    let err = store.create_or_resume(new_run("new")).await.unwrap_err();
    assert!(err.to_string().contains("readonly"), "{err}");
    drop(store);
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn a_read_only_open_of_a_missing_file_fails_and_creates_nothing() {
    let dir = temp_dir();
    let path = dir.path().join("absent.db");
    let err = SqliteStore::open_read_only(&path).unwrap_err();
    assert!(matches!(err, OpenError::Io { .. }), "{err:?}");
    assert!(!path.exists());
}

#[test]
fn an_in_memory_store_has_no_path() {
    let store = SqliteStore::open_in_memory().unwrap();
    assert_eq!(store.path(), None);
    assert!(!store.is_read_only());
}

/// A file exactly as version 1 left it (its statements and version row), holding one run.
fn version_one_file(path: &Path) {
    let conn = Connection::open(path).unwrap();
    let v1 = &reaper_sql::MIGRATIONS[0];
    assert_eq!(v1.version, 1);
    for sql in v1.statements {
        conn.execute(sql, []).unwrap();
    }
    conn.execute_batch(
        "INSERT INTO reaper_schema (version, description) VALUES (1, 'initial schema'); \
         INSERT INTO runs (run_id, thread_id, started_at, detached_since) \
         VALUES ('from-v1', 't', 1, 5);",
    )
    .unwrap();
}

#[tokio::test]
async fn a_version_one_database_is_migrated_to_the_reclaim_ledger_in_place_keeping_its_runs() {
    use reaper_core::{ReclaimIntent, ReclaimLedger};

    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    version_one_file(&path);

    let store = SqliteStore::open(&path).unwrap();
    let run = RunStore::get(&store, "from-v1").await.unwrap().unwrap();
    let intent = ReclaimIntent::new(&run, 10);
    assert!(store.record_intent(&intent).await.unwrap());
    assert_eq!(store.get_intent("from-v1").await.unwrap(), Some(intent));
    drop(store);

    let conn = Connection::open(&path).unwrap();
    let versions: Vec<(i64, String)> = conn
        .prepare("SELECT version, description FROM reaper_schema ORDER BY version")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        versions,
        [
            (1, "initial schema".into()),
            (2, "reclaim ledger".into()),
            (3, "lease notes".into()),
            (4, "listing keyset index".into()),
            (5, "unlistable rows index".into()),
            (6, "run history".into()),
            (7, "reaper_ prefix on every table and index".into()),
            (8, "sweep records".into())
        ]
    );
    assert_eq!(SCHEMA_VERSION, 8);
}

/// A file exactly as version 2 left it, holding one run and the sweep lease of a sweep that is
/// still running while the file is migrated.
fn version_two_file(path: &Path) {
    version_one_file(path);
    let conn = Connection::open(path).unwrap();
    let v2 = &reaper_sql::MIGRATIONS[1];
    assert_eq!(v2.version, 2);
    for sql in v2.statements {
        conn.execute(sql, []).unwrap();
    }
    conn.execute_batch(
        "INSERT INTO reaper_schema (version, description) VALUES (2, 'reclaim ledger'); \
         INSERT INTO leases (key, owner, token, expires_at) \
         VALUES ('reaper:sweep', 'old-build', 'tok', 9000000000000);",
    )
    .unwrap();
}

#[tokio::test]
async fn a_version_two_database_is_migrated_to_lease_notes_in_place_keeping_its_leases() {
    use reaper_core::{Lease, LeaseGrant, LeaseStore};

    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    version_two_file(&path);

    let store = SqliteStore::open(&path).unwrap();
    assert!(RunStore::get(&store, "from-v1").await.unwrap().is_some());
    // The lease a sweep of the older build holds is still its own, and it can note a cursor.
    assert_eq!(
        store
            .acquire("reaper:sweep", "new-build", 1, 1_000)
            .await
            .unwrap(),
        LeaseGrant::Held {
            owner: "old-build".into(),
            expires_at: 9_000_000_000_000
        }
    );
    assert_eq!(store.note("reaper:sweep").await.unwrap(), None);
    let held = Lease {
        key: "reaper:sweep".into(),
        owner: "old-build".into(),
        token: "tok".into(),
        expires_at: 9_000_000_000_000,
    };
    assert!(store.set_note(&held, "cursor").await.unwrap());
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.note("reaper:sweep").await.unwrap().as_deref(),
        Some("cursor")
    );
    let conn = Connection::open(&path).unwrap();
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM reaper_schema ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8]);
}

/// A file exactly as version 3 left it: the listing's index on `detached_since` alone.
fn version_three_file(path: &Path) {
    version_two_file(path);
    let conn = Connection::open(path).unwrap();
    let v3 = &reaper_sql::MIGRATIONS[2];
    assert_eq!(v3.version, 3);
    for sql in v3.statements {
        conn.execute(sql, []).unwrap();
    }
    conn.execute(
        "INSERT INTO reaper_schema (version, description) VALUES (3, 'lease notes')",
        [],
    )
    .unwrap();
}

fn index_columns(path: &Path, index: &str) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let columns = conn
        .prepare("SELECT name FROM pragma_index_info(?1) ORDER BY seqno")
        .unwrap()
        .query_map([index], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    columns
}

#[tokio::test]
async fn a_version_three_database_gets_the_listing_keyset_index_in_place_keeping_its_runs() {
    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    version_three_file(&path);
    assert_eq!(index_columns(&path, "runs_reclaimable"), ["detached_since"]);

    let store = SqliteStore::open(&path).unwrap();
    assert!(RunStore::get(&store, "from-v1").await.unwrap().is_some());
    drop(store);
    assert_eq!(
        index_columns(&path, "reaper_runs_reclaimable"),
        ["detached_since", "run_id"]
    );
}

/// A file exactly as version 4 left it (every table but the run history).
fn version_four_file(path: &Path) {
    version_three_file(path);
    let conn = Connection::open(path).unwrap();
    let v4 = &reaper_sql::MIGRATIONS[3];
    assert_eq!(v4.version, 4);
    for sql in v4.statements {
        conn.execute(sql, []).unwrap();
    }
    conn.execute(
        "INSERT INTO reaper_schema (version, description) VALUES (4, 'listing keyset index')",
        [],
    )
    .unwrap();
}

#[tokio::test]
async fn a_version_four_database_gains_the_run_history_in_place_keeping_its_runs() {
    use reaper_core::history::HistoryEntry;

    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    version_four_file(&path);
    assert!(index_columns(&path, "reaper_run_history_by_age").is_empty());

    let store = SqliteStore::open(&path).unwrap();
    assert!(RunStore::get(&store, "from-v1").await.unwrap().is_some());
    let entry = HistoryEntry {
        run_id: "from-v1".into(),
        sweep_id: "sweep-1".into(),
        at: 10,
        host: "h".into(),
        outcome: "expired".into(),
        reason_code: "expired/ttl".into(),
        reason: "past its TTL".into(),
        sandbox: None,
        ledger: vec![],
    };
    store
        .record_history(std::slice::from_ref(&entry))
        .await
        .unwrap();
    assert_eq!(store.run_history("from-v1", 5).await.unwrap(), [entry]);
    drop(store);
    assert_eq!(
        index_columns(&path, "reaper_run_history_by_age"),
        ["at", "run_id", "sweep_id"]
    );
}

#[test]
fn a_read_only_open_of_a_version_one_database_says_it_needs_a_migration_and_writes_nothing() {
    let dir = temp_dir();
    let path = dir.path().join("reaper.db");
    version_one_file(&path);
    let before = fingerprint(&path);

    let err = SqliteStore::open_read_only(&path).unwrap_err();
    assert!(
        matches!(
            err,
            OpenError::NeedsMigration {
                found: 1,
                supported: SCHEMA_VERSION,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("open it once read-write"), "{err}");
    assert_eq!(fingerprint(&path), before);
}
