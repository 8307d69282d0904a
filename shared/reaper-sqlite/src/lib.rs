//! Every reaper store port on one SQLite file: runs, leases, delivery logs, sandbox instances and
//! transcripts, in the versioned schema that `SCHEMA.md` documents for the applications writing
//! into the same file.
//!
//! SQLite is bundled, so a fresh machine needs nothing installed. The file is opened in WAL mode
//! with a 5 s busy timeout, and every read-modify-write runs in a `BEGIN IMMEDIATE` transaction or
//! is one conditional statement, so several processes may share a file.
//!
//! # Async over a blocking library
//!
//! One `rusqlite::Connection` sits behind a mutex, and each port call runs its few statements as
//! one job on tokio's blocking pool (`spawn_blocking`). The statements themselves take well under
//! a millisecond on a local file, but a write can wait up to the busy timeout for another process;
//! running that wait inline would stall a runtime worker (all of them, on the CLI's
//! current-thread runtime). Outside a tokio runtime the job runs inline. A job whose caller stops
//! waiting still runs to the end, so a write is never left half applied.
#![warn(missing_docs)]

mod decode;
mod error;
mod history;
mod instances;
mod leases;
mod ledger;
mod log;
mod runs;
mod schema;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reaper_core::StoreError;
use rusqlite::{Connection, OpenFlags};

pub use error::{is_damaged, OpenError, DAMAGED_KEY};
pub use log::{RetentionReport, DEFAULT_EVENT_RETENTION_MS};
pub use runs::{DetachedListing, DetachedRun, StatusCounts};
pub use schema::{schema_script, SCHEMA_VERSION};

use error::{name_the_file, store_err};
use schema::Found;

/// How long a statement waits for another process's write lock before it fails as
/// [`StoreError::Unavailable`].
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// What [`SqliteStore::init`] did to the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Initialised {
    /// Created the reaper's tables, beside these tables of an application (none: a new file).
    Created {
        /// The application's tables, left as they were.
        beside: Vec<String>,
    },
    /// The reaper's tables were there at this older version and are now current.
    Migrated {
        /// The version found.
        from: u32,
    },
    /// Nothing to do: the tables were current.
    Current,
}

/// Every store port over one SQLite database. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    path: Option<PathBuf>,
    read_only: bool,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("read_only", &self.inner.read_only)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it if missing) the reaper database at `path` and applies any pending
    /// migration. A file that is not SQLite, a SQLite database of another application, or one
    /// whose schema is newer than [`SCHEMA_VERSION`] is refused before anything is written to it.
    ///
    /// # Example
    ///
    /// A run written as an application's chat route writes it, read back through the port
    /// the sweep uses:
    ///
    /// ```
    /// use reaper_core::{NewRun, RunStatus, RunStore};
    /// use reaper_sqlite::SqliteStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let dir = tempfile::tempdir().unwrap();
    /// let store = SqliteStore::open(dir.path().join("reaper.db")).unwrap();
    /// store
    ///     .create_or_resume(NewRun {
    ///         run_id: "run-1".into(),
    ///         thread_id: "thread-1".into(),
    ///         started_at: 1_700_000_000_000,
    ///         status: None,
    ///     })
    ///     .await
    ///     .unwrap();
    /// let run = store.get("run-1").await.unwrap().unwrap();
    /// assert_eq!(run.status, RunStatus::Running);
    /// # }
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_or_init(path.as_ref(), false).map(|(store, _)| store)
    }

    /// Adds the reaper's tables to the database at `path` (creating the file if missing),
    /// beside any tables an application already keeps there, and migrates them to
    /// [`SCHEMA_VERSION`]; says what it did. A database whose tables clash with the reaper's
    /// names, or are damaged, is refused untouched, as by [`open`](Self::open).
    pub fn init(path: impl AsRef<Path>) -> Result<(Self, Initialised), OpenError> {
        Self::open_or_init(path.as_ref(), true)
    }

    fn open_or_init(path: &Path, beside_app: bool) -> Result<(Self, Initialised), OpenError> {
        check_header(path, true)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let sql = |e| OpenError::from_sqlite(path, e);
        let mut conn = Connection::open_with_flags(path, flags).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        // Decide whose file this is with reads only: the WAL switch below rewrites the header.
        let found = schema::inspect(&conn).map_err(sql)?;
        let done = match &found {
            Found::Reaper(v) if *v == SCHEMA_VERSION => Initialised::Current,
            Found::Reaper(v) => Initialised::Migrated { from: *v },
            Found::AppOnly(tables) if beside_app => Initialised::Created {
                beside: tables.clone(),
            },
            _ => Initialised::Created { beside: Vec::new() },
        };
        if !beside_app || !matches!(found, Found::AppOnly(_)) {
            refuse_unless_ours(path, found)?;
        }
        enable_wal(&conn).map_err(sql)?;
        // In WAL mode NORMAL loses at most the last commits on power loss, never consistency.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        if done != Initialised::Current {
            refuse_unless_ours(path, schema::migrate(&mut conn, beside_app).map_err(sql)?)?;
        }
        Ok((Self::wrap(conn, Some(path.to_path_buf()), false), done))
    }

    /// Opens an existing reaper database without ever writing to it (for `reaper status`). Refuses
    /// a database that needs a migration; writes through this store fail.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        let path = path.as_ref();
        check_header(path, false)?;
        let sql = |e| OpenError::from_sqlite(path, e);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        match schema::inspect(&conn).map_err(sql)? {
            Found::Reaper(v) if v == SCHEMA_VERSION => {}
            Found::Reaper(v) if v > SCHEMA_VERSION => refuse_unless_ours(path, Found::Reaper(v))?,
            Found::Reaper(found) => {
                return Err(OpenError::NeedsMigration {
                    path: path.to_path_buf(),
                    found,
                    supported: SCHEMA_VERSION,
                })
            }
            Found::Empty => {
                return Err(OpenError::NeedsMigration {
                    path: path.to_path_buf(),
                    found: 0,
                    supported: SCHEMA_VERSION,
                })
            }
            other => refuse_unless_ours(path, other)?,
        }
        Ok(Self::wrap(conn, Some(path.to_path_buf()), true))
    }

    /// A private database in memory, gone when the last clone drops. For tests and demos.
    pub fn open_in_memory() -> Result<Self, OpenError> {
        let path = Path::new(":memory:");
        let sql = |e| OpenError::from_sqlite(path, e);
        let mut conn = Connection::open_in_memory().map_err(sql)?;
        schema::migrate(&mut conn, false).map_err(sql)?;
        Ok(Self::wrap(conn, None, false))
    }

    fn wrap(conn: Connection, path: Option<PathBuf>, read_only: bool) -> Self {
        SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                path,
                read_only,
            }),
        }
    }

    /// Changes how long a statement waits for another process's lock before failing as
    /// [`StoreError::Unavailable`] (default [`BUSY_TIMEOUT`]).
    pub fn with_busy_timeout(self, timeout: Duration) -> Result<Self, StoreError> {
        self.inner
            .conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .busy_timeout(timeout)
            .map_err(store_err)?;
        Ok(self)
    }

    /// The database file, or `None` in memory.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Whether this store was opened read-only ([`SqliteStore::open_read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// Runs `job` with the connection on the blocking pool (see the crate docs for why).
    pub(crate) async fn call<T, F>(&self, job: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let job = move || {
            // A job that panicked mid-transaction rolled it back when the transaction dropped,
            // so the connection behind a poisoned lock is still consistent.
            let mut conn = inner.conn.lock().unwrap_or_else(|p| p.into_inner());
            #[cfg(feature = "crash-points")]
            let changes = conn.total_changes();
            let out = job(&mut conn).map_err(|e| name_the_file(e, inner.path.as_deref()));
            // A job is one statement or one transaction: when it changed rows and left no
            // transaction open, exactly one commit happened.
            #[cfg(feature = "crash-points")]
            if out.is_ok() && conn.total_changes() != changes && conn.is_autocommit() {
                reaper_sql::crash::commit_point();
            }
            out
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => match handle.spawn_blocking(job).await {
                Ok(result) => result,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => Err(StoreError::Backend(format!(
                    "sqlite job was cancelled: {e}"
                ))),
            },
            Err(_) => job(),
        }
    }
}

#[cfg(test)]
impl SqliteStore {
    /// The connection, for unit tests that inspect the schema or a query plan.
    pub(crate) fn inner_conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.inner.conn.lock().unwrap()
    }
}

/// Refuses a non-empty file that does not start with the SQLite header, before SQLite sees it.
fn check_header(path: &Path, missing_ok: bool) -> Result<(), OpenError> {
    let io = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    let mut head = Vec::with_capacity(SQLITE_HEADER.len());
    file.take(SQLITE_HEADER.len() as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    if head.is_empty() || head == SQLITE_HEADER {
        Ok(())
    } else {
        Err(OpenError::NotSqlite {
            path: path.to_path_buf(),
        })
    }
}

fn refuse_unless_ours(path: &Path, found: Found) -> Result<(), OpenError> {
    match found {
        Found::Empty => Ok(()),
        Found::Reaper(v) if v <= SCHEMA_VERSION => Ok(()),
        Found::Reaper(found) => Err(OpenError::TooNew {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        }),
        Found::AppOnly(tables) => Err(OpenError::NotInitialised {
            path: path.to_path_buf(),
            tables,
        }),
        Found::Foreign(tables) => Err(OpenError::Foreign {
            path: path.to_path_buf(),
            tables,
        }),
        Found::Damaged(reason) => Err(OpenError::Corrupt {
            path: path.to_path_buf(),
            reason,
        }),
    }
}

/// Runs `f` in a `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so a
/// read-then-write never fails half way with a stale snapshot, and commits only on `Ok`.
pub(crate) fn immediate<T>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(store_err)?;
    let out = f(&tx)?;
    tx.commit().map_err(store_err)?;
    Ok(out)
}

/// The answer to a fenced statement that changed `changed` rows, read in its own transaction:
/// nothing changed because the run's epoch is past `held` (`Superseded`), or for no reason the
/// fence explains (a backend error, never taken for a refusal).
pub(crate) fn fenced_outcome(
    tx: &rusqlite::Transaction<'_>,
    run_id: &str,
    held: Option<u64>,
    changed: usize,
) -> Result<reaper_core::Fenced<()>, StoreError> {
    use rusqlite::OptionalExtension;
    if changed > 0 {
        return Ok(reaper_core::Fenced::Written(()));
    }
    let epoch: Option<Option<i64>> = tx
        .query_row(reaper_sql::runs::EPOCH_BY_ID, [run_id], |r| r.get(0))
        .optional()
        .map_err(error::store_err)?;
    let observed = reaper_sql::runs::driver_epoch(epoch.flatten())
        .map_err(|reason| error::corrupt(run_id, reason))?;
    match (observed, held) {
        (Some(observed), Some(held)) if observed > held => {
            Ok(reaper_core::Fenced::Superseded { observed })
        }
        _ => Err(StoreError::Backend(format!(
            "run {run_id}: a fenced write changed nothing at epoch {observed:?} (held {held:?})"
        ))),
    }
}

/// Saturating conversions between the ports' unsigned counts and SQLite's signed integers.
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Switches the file to WAL. Changing the journal mode needs the file to itself, and SQLite
/// answers "locked" at once, without its busy handler, while another connection is opening the
/// same new file: retry within [`BUSY_TIMEOUT`] as the busy handler would have.
fn enable_wal(conn: &Connection) -> rusqlite::Result<()> {
    let started = std::time::Instant::now();
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other.map(drop),
        }
    }
}
