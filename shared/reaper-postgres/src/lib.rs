//! Every reaper store port on PostgreSQL: runs, leases with their notes, delivery logs, the
//! reclaim ledger, sandbox instances and transcripts, in a schema of their own (`reaper` by
//! default) whose tables `SCHEMA.md` documents for the applications writing runs into them.
//!
//! Several processes on several hosts may share one database: every read-modify-write is one
//! conditional statement or one transaction that locks the rows it depends on, so the fence on
//! a run's epoch, the sweep lease and its note, and the log's sequence hold across a fleet.
//!
//! Connections come from a small pool (deadpool). A host other than this machine is reached only
//! over TLS (rustls, with the Mozilla roots built in), so a password never crosses a network in
//! clear.

mod detached;
mod error;
mod history;
mod instances;
mod leases;
mod ledger;
mod log;
mod mark;
mod runs;
pub mod schema;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use deadpool_postgres::{Hook, Manager, ManagerConfig, Pool, RecyclingMethod};
use reaper_core::secret::Secret;
use reaper_core::StoreError;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Row};

pub use error::{OpenError, DAMAGED_KEY};
pub use log::{RetentionReport, DEFAULT_EVENT_RETENTION_MS};
pub use mark::LAST_SWEEP_KEY;
pub use runs::{DetachedRun, StatusCounts};
/// The listing's two page statements (tables as `@.table`), for the query-plan tests.
#[doc(hidden)]
pub use runs::{LIST_PAGE_AFTER, LIST_PAGE_FROM};
pub use schema::SCHEMA_VERSION;

use error::store_err;
use schema::Found;

/// The schema the store keeps its tables in unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "reaper";

/// How long connecting may take unless the URL says otherwise (`connect_timeout=`).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connections per store: a sweep drives one run at a time, so a few cover the listing, the
/// drive and the lease renewal running at once.
pub const DEFAULT_POOL_SIZE: usize = 4;

/// How to reach the database and where the reaper's tables live.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// A `postgres://user@host:port/db?sslmode=…` URL (or a libpq key=value string).
    pub url: String,
    /// Used when the URL carries no password, so the password can come from a secret of its own
    /// (an environment variable the platform keeps encrypted) instead of a URL that gets logged.
    pub password: Option<Secret>,
    /// The schema holding the reaper's tables, created if missing.
    pub schema: String,
    pub pool_size: usize,
}

impl PostgresOptions {
    pub fn new(url: impl Into<String>) -> Self {
        PostgresOptions {
            url: url.into(),
            password: None,
            schema: DEFAULT_SCHEMA.into(),
            pool_size: DEFAULT_POOL_SIZE,
        }
    }

    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    pub fn with_password(mut self, password: Option<Secret>) -> Self {
        self.password = password;
        self
    }
}

/// The variable every entry point (the CLI, the serverless handlers) reads the database URL from.
pub const DATABASE_URL_VAR: &str = "REAPER_DATABASE_URL";
/// The variable the password comes from when the URL carries none: a platform secret of its own,
/// kept out of a URL that ends up in logs and shell history.
pub const DATABASE_PASSWORD_VAR: &str = "REAPER_DATABASE_PASSWORD";

impl PostgresOptions {
    /// The options for `url`, with the password from [`DATABASE_PASSWORD_VAR`] read through
    /// `get` (`|k| std::env::var(k).ok()`); an empty value counts as unset. One reading of the
    /// settings for the CLI and the handlers alike.
    pub fn from_settings(url: &str, get: impl Fn(&str) -> Option<String>) -> Self {
        let password = get(DATABASE_PASSWORD_VAR)
            .filter(|p| !p.is_empty())
            .map(Secret::new);
        PostgresOptions::new(url).with_password(password)
    }

    /// Checks the options as [`PostgresStore::open`] would before connecting (the URL parses and
    /// names a host, a remote host is not asked for `sslmode=disable`, the schema name is plain),
    /// without connecting: a handler refuses bad settings at start-up with the same message.
    pub fn check(&self) -> Result<(), OpenError> {
        connect_config(self).map(|_| ())
    }
}

/// Whether a URL names a PostgreSQL database (as opposed to an SQLite file path).
pub fn is_postgres_url(value: &str) -> bool {
    value.starts_with("postgres://") || value.starts_with("postgresql://")
}

/// Every store port over one PostgreSQL schema. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    schema: String,
    /// `"schema".`, substituted for `@.` in every statement.
    prefix: String,
    /// Where the database is, without credentials, for messages.
    target: String,
    requests: AtomicU64,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("schema", &self.inner.schema)
            .finish_non_exhaustive()
    }
}

/// Whether every host of the config is this machine (loopback or a Unix socket).
fn all_local(config: &tokio_postgres::Config) -> bool {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let local_name = |h: &str| matches!(h, "localhost" | "127.0.0.1" | "::1" | "[::1]");
    !hosts.is_empty()
        && hosts.iter().all(|h| match h {
            Host::Tcp(name) => local_name(name),
            Host::Unix(_) => true,
        })
        && addrs.iter().all(|a| a.is_loopback())
}

fn describe_target(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}:{port}/{}",
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

fn tls() -> tokio_postgres_rustls::MakeRustlsConnect {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the aws-lc-rs provider supports the default TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

/// The whole schema as one SQL script for an application's migration tool: the schema, every
/// migration and its `schema_migrations` row in one transaction, so a database it ran on opens
/// as current. `schema` must be a plain lowercase identifier (as [`PostgresOptions::schema`]).
pub fn schema_script(schema: &str) -> Result<String, OpenError> {
    check_schema_name(schema)?;
    let prefix = format!("\"{schema}\".");
    let mut out = format!("BEGIN;\nCREATE SCHEMA IF NOT EXISTS \"{schema}\";\n");
    for m in schema::MIGRATIONS {
        out.push_str(&format!("-- version {}: {}\n", m.version, m.description));
        for statement in m.statements {
            out.push_str(statement.replace("@.", &prefix).trim_end());
            out.push_str(";\n");
        }
        out.push_str(&format!(
            "INSERT INTO {prefix}schema_migrations (version, description) VALUES ({}, '{}');\n",
            m.version,
            m.description.replace('\'', "''")
        ));
    }
    out.push_str("COMMIT;\n");
    Ok(out)
}

/// A schema name the store accepts: a plain lowercase identifier, so it needs no quoting rules
/// beyond the double quotes the store adds.
fn check_schema_name(name: &str) -> Result<(), OpenError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(OpenError::InvalidOptions(format!(
            "schema name {name:?} is not a plain identifier: use lowercase letters, digits and \
             underscores (at most 63), starting with a letter or underscore"
        )))
    }
}

/// The connection settings of `options`, checked: the URL parses and names a host, the
/// password is filled in from its own secret, and a remote host is reached over TLS only.
/// Returns the config and where it points (without credentials).
fn connect_config(
    options: &PostgresOptions,
) -> Result<(tokio_postgres::Config, String), OpenError> {
    check_schema_name(&options.schema)?;
    let mut config: tokio_postgres::Config = options.url.parse().map_err(|e| {
        OpenError::InvalidOptions(format!(
            "the database URL does not parse ({e}): expected \
             postgres://USER@HOST:PORT/DATABASE?sslmode=require"
        ))
    })?;
    if config.get_hosts().is_empty() {
        return Err(OpenError::InvalidOptions(
            "the database URL names no host: expected postgres://USER@HOST:PORT/DATABASE".into(),
        ));
    }
    if config.get_password().is_none() {
        if let Some(p) = &options.password {
            config.password(p.expose());
        }
    }
    if config.get_connect_timeout().is_none() {
        // An unreachable host fails the open (or the operation) instead of hanging it.
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("reaper");
    }
    let target = describe_target(&config);
    if !all_local(&config) {
        // A remote host is reached over TLS only: a password must not cross a network in
        // clear, and hosted databases (Neon, Supabase, RDS) require it anyway.
        if config.get_ssl_mode() == SslMode::Disable {
            return Err(OpenError::TlsRequired { target });
        }
        config.ssl_mode(SslMode::Require);
    }
    Ok((config, target))
}

impl PostgresStore {
    /// Connects to `url` with the default schema and applies any pending migration.
    pub async fn connect(url: &str) -> Result<Self, OpenError> {
        Self::open(PostgresOptions::new(url)).await
    }

    /// Connects, refuses a schema that is not the reaper's, is damaged or is newer than this
    /// build, and otherwise creates or migrates it in place.
    pub async fn open(options: PostgresOptions) -> Result<Self, OpenError> {
        let store = Self::pool_only(&options)?;
        store.migrate().await?;
        Ok(store)
    }

    /// Connects without writing anything: refuses a schema that needs creating or migrating
    /// (for `reaper status`).
    pub async fn open_read_only(options: PostgresOptions) -> Result<Self, OpenError> {
        let store = Self::pool_only(&options)?;
        match store.inspect().await? {
            Found::Reaper(v) if v == SCHEMA_VERSION => Ok(store),
            Found::Reaper(v) if v > SCHEMA_VERSION => Err(store.too_new(v)),
            Found::Reaper(found) => Err(OpenError::NeedsMigration {
                target: store.inner.target.clone(),
                found,
                supported: SCHEMA_VERSION,
            }),
            Found::Empty => Err(OpenError::NeedsMigration {
                target: store.inner.target.clone(),
                found: 0,
                supported: SCHEMA_VERSION,
            }),
            other => Err(store.refusal(other)),
        }
    }

    fn pool_only(options: &PostgresOptions) -> Result<Self, OpenError> {
        let (config, target) = connect_config(options)?;
        let manager = Manager::from_config(
            config,
            tls(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .post_create(Hook::async_fn(|client, _| {
                Box::pin(async move {
                    // Every statement here is prepared once per connection and reaches its rows
                    // through an index whatever its parameters, so one generic plan serves all
                    // executions. Left to choose, the server replans the listing's page at every
                    // sweep once a table outgrows its LIMIT guess (about 120 µs of a 1.3 ms sweep
                    // at 100k runs, none at 1k). A server without the setting (before 12) keeps
                    // its own choice.
                    if let Err(error) = client
                        .batch_execute("SET plan_cache_mode = force_generic_plan")
                        .await
                    {
                        tracing::debug!(target: "reaper", %error, "plan_cache_mode not set");
                    }
                    Ok(())
                })
            }))
            .build()
            .map_err(|e| OpenError::InvalidOptions(format!("connection pool: {e}")))?;
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool,
                prefix: format!("\"{}\".", options.schema),
                schema: options.schema.clone(),
                target,
                requests: AtomicU64::new(0),
            }),
        })
    }

    /// The schema holding the reaper's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Where the database is, without credentials.
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// Statements sent to the database so far by this store and its clones (each one round
    /// trip), for the tests that bound the requests a sweep makes.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// A statement with its tables in this store's schema.
    pub fn sql(&self, text: &str) -> String {
        text.replace("@.", &self.inner.prefix)
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.inner.pool.get().await.map_err(|e| {
            StoreError::Unavailable(format!("no connection to {}: {e}", self.inner.target))
        })
    }

    pub(crate) fn count(&self, n: u64) {
        self.inner.requests.fetch_add(n, Ordering::Relaxed);
    }

    /// A write just committed (a statement that changed rows, or a transaction that did): the
    /// crash harness's point.
    pub(crate) fn committed(&self, changed: bool) {
        #[cfg(feature = "crash-points")]
        if changed {
            reaper_sql::crash::commit_point();
        }
        let _ = changed;
    }

    async fn migrate(&self) -> Result<(), OpenError> {
        let found = self.inspect().await?;
        let from = match found {
            Found::Empty => 0,
            Found::Reaper(v) if v <= SCHEMA_VERSION => v,
            Found::Reaper(v) => return Err(self.too_new(v)),
            other => return Err(self.refusal(other)),
        };
        if from == SCHEMA_VERSION {
            return Ok(());
        }
        let mut client = self.client().await.map_err(OpenError::from)?;
        let tx = client.transaction().await.map_err(|e| self.open_err(e))?;
        // Two reapers starting together on a new database: one migrates, the other waits here
        // and then finds the work done.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&self.inner.prefix],
        )
        .await
        .map_err(|e| self.open_err(e))?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{}\"",
            self.inner.schema
        ))
        .await
        .map_err(|e| self.open_err(e))?;
        let now = self.inspect_with(&*tx).await?;
        let from = match now {
            Found::Empty => 0,
            Found::Reaper(v) if v <= SCHEMA_VERSION => v,
            Found::Reaper(v) => return Err(self.too_new(v)),
            other => return Err(self.refusal(other)),
        };
        for m in schema::pending(from) {
            for statement in m.statements {
                tx.batch_execute(&self.sql(statement))
                    .await
                    .map_err(|e| self.open_err(e))?;
            }
            tx.execute(
                &self.sql("INSERT INTO @.schema_migrations (version, description) VALUES ($1, $2)"),
                &[&(m.version as i32), &m.description],
            )
            .await
            .map_err(|e| self.open_err(e))?;
        }
        tx.commit().await.map_err(|e| self.open_err(e))?;
        tracing::info!(target = %self.inner.target, schema = %self.inner.schema, from, to = SCHEMA_VERSION, "migrated the reaper schema");
        Ok(())
    }

    /// Applies the migrations up to `version` only: for tests that build an older schema and
    /// then open it with this build.
    #[doc(hidden)]
    pub async fn migrate_to(options: PostgresOptions, version: u32) -> Result<Self, OpenError> {
        let store = Self::pool_only(&options)?;
        let mut client = store.client().await.map_err(OpenError::from)?;
        let tx = client.transaction().await.map_err(|e| store.open_err(e))?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{}\"",
            options.schema
        ))
        .await
        .map_err(|e| store.open_err(e))?;
        for m in schema::pending(0).filter(|m| m.version <= version) {
            for statement in m.statements {
                tx.batch_execute(&store.sql(statement))
                    .await
                    .map_err(|e| store.open_err(e))?;
            }
            tx.execute(
                &store
                    .sql("INSERT INTO @.schema_migrations (version, description) VALUES ($1, $2)"),
                &[&(m.version as i32), &m.description],
            )
            .await
            .map_err(|e| store.open_err(e))?;
        }
        tx.commit().await.map_err(|e| store.open_err(e))?;
        drop(client);
        Ok(store)
    }

    async fn inspect(&self) -> Result<Found, OpenError> {
        let client = self.client().await.map_err(OpenError::from)?;
        self.inspect_with(&**client).await
    }

    /// Whose schema this is, with reads only: its tables and their columns from the catalog.
    async fn inspect_with(&self, c: &impl GenericClient) -> Result<Found, OpenError> {
        let rows = c
            .query(
                "SELECT table_name::text, column_name::text FROM information_schema.columns \
                 WHERE table_schema = $1 ORDER BY table_name, ordinal_position",
                &[&self.inner.schema],
            )
            .await
            .map_err(|e| self.open_err(e))?;
        let mut tables: Vec<(String, Vec<String>)> = Vec::new();
        for row in rows {
            let (t, col): (String, String) = (row.get(0), row.get(1));
            match tables.last_mut() {
                Some((last, cols)) if *last == t => cols.push(col),
                _ => tables.push((t, vec![col])),
            }
        }
        if tables.is_empty() {
            return Ok(Found::Empty);
        }
        if !tables.iter().any(|(t, _)| t == schema::SCHEMA_TABLE) {
            return Ok(Found::Foreign(tables.into_iter().map(|(t, _)| t).collect()));
        }
        let version: Option<i32> = c
            .query_one(
                &self.sql("SELECT MAX(version) FROM @.schema_migrations"),
                &[],
            )
            .await
            .map_err(|e| self.open_err(e))?
            .get(0);
        let version = match version {
            Some(v) if v >= 1 => v as u32,
            None => {
                return Ok(Found::Damaged(format!(
                    "{} holds no version row",
                    schema::SCHEMA_TABLE
                )))
            }
            Some(v) => {
                return Ok(Found::Damaged(format!(
                    "{} records version {v}, which no reaper wrote",
                    schema::SCHEMA_TABLE
                )))
            }
        };
        if version > SCHEMA_VERSION {
            return Ok(Found::Reaper(version));
        }
        for (table, expected) in schema::shape_at(version) {
            let found = tables
                .iter()
                .find(|(t, _)| t == table)
                .map(|(_, cols)| cols.clone())
                .unwrap_or_default();
            if let Some(problem) = schema::shape_problem(table, expected, &found) {
                return Ok(Found::Damaged(problem));
            }
        }
        Ok(Found::Reaper(version))
    }

    fn too_new(&self, found: u32) -> OpenError {
        OpenError::TooNew {
            target: self.inner.target.clone(),
            schema: self.inner.schema.clone(),
            found,
            supported: SCHEMA_VERSION,
        }
    }

    fn refusal(&self, found: Found) -> OpenError {
        match found {
            Found::Foreign(tables) => OpenError::Foreign {
                target: self.inner.target.clone(),
                schema: self.inner.schema.clone(),
                tables,
            },
            Found::Damaged(reason) => OpenError::Damaged {
                target: self.inner.target.clone(),
                schema: self.inner.schema.clone(),
                reason,
            },
            Found::Reaper(v) => self.too_new(v),
            Found::Empty => OpenError::NeedsMigration {
                target: self.inner.target.clone(),
                found: 0,
                supported: SCHEMA_VERSION,
            },
        }
    }

    fn open_err(&self, e: tokio_postgres::Error) -> OpenError {
        OpenError::Database {
            target: self.inner.target.clone(),
            message: error::describe(&e),
        }
    }

    // --- statement helpers: each counts its round trip ---

    pub(crate) async fn query(
        &self,
        c: Conn<'_, '_>,
        text: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        let stmt = c.prepare(&self.sql(text)).await.map_err(store_err)?;
        self.count(1);
        match c {
            Conn::Pooled(c) => c.query(&stmt, params).await,
            Conn::Tx(t) => t.query(&stmt, params).await,
        }
        .map_err(store_err)
    }

    pub(crate) async fn query_opt(
        &self,
        c: Conn<'_, '_>,
        text: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        Ok(self.query(c, text, params).await?.into_iter().next())
    }

    pub(crate) async fn execute(
        &self,
        c: Conn<'_, '_>,
        text: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let stmt = c.prepare(&self.sql(text)).await.map_err(store_err)?;
        self.count(1);
        match c {
            Conn::Pooled(c) => c.execute(&stmt, params).await,
            Conn::Tx(t) => t.execute(&stmt, params).await,
        }
        .map_err(store_err)
    }

    /// Starts a transaction on `client` (one round trip).
    pub(crate) async fn begin<'c>(
        &self,
        client: &'c mut deadpool_postgres::Object,
    ) -> Result<deadpool_postgres::Transaction<'c>, StoreError> {
        self.count(1);
        client.transaction().await.map_err(store_err)
    }

    /// Commits a transaction; `wrote` says whether it changed anything (a crash point).
    pub(crate) async fn commit(
        &self,
        tx: deadpool_postgres::Transaction<'_>,
        wrote: bool,
    ) -> Result<(), StoreError> {
        self.count(1);
        tx.commit().await.map_err(store_err)?;
        self.committed(wrote);
        Ok(())
    }

    /// The fence shared by every epoch-conditional write: locks the run row against a
    /// concurrent claim until the caller's transaction ends, and answers the epoch that
    /// supersedes `held`, if any. A missing run does not refuse the write.
    pub(crate) async fn superseding_epoch(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        run_id: &str,
        held: Option<u64>,
    ) -> Result<Option<u64>, StoreError> {
        let Some(held) = held else {
            return Ok(None);
        };
        let row = self
            .query_opt(
                Conn::Tx(tx),
                "SELECT driver_epoch FROM @.runs WHERE run_id = $1 FOR SHARE",
                &[&run_id],
            )
            .await?;
        let observed: Option<i64> = row.and_then(|r| r.get(0));
        let observed = reaper_sql::runs::driver_epoch(observed)
            .map_err(|reason| error::corrupt(run_id, reason))?;
        Ok(observed.filter(|o| *o > held))
    }
}

/// A pooled connection or a transaction on one: where a statement runs.
#[derive(Clone, Copy)]
pub(crate) enum Conn<'a, 'b> {
    Pooled(&'a deadpool_postgres::Client),
    Tx(&'a deadpool_postgres::Transaction<'b>),
}

impl Conn<'_, '_> {
    /// Prepared once per connection (deadpool's statement cache), then bound each time.
    async fn prepare(&self, sql: &str) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
        match self {
            Conn::Pooled(c) => c.prepare_cached(sql).await,
            Conn::Tx(t) => t.prepare_cached(sql).await,
        }
    }
}

/// Saturating conversion of the ports' unsigned counts to `BIGINT`.
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(all(test, reaper_test_postgres))]
mod on_a_server {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_pooled_connection_plans_its_prepared_statements_generically() {
        let url = std::env::var("REAPER_TEST_POSTGRES_URL").expect("the test server's URL");
        let mut options = PostgresOptions::new(url);
        options.pool_size = 2;
        let store = PostgresStore::pool_only(&options).expect("a pool");
        // Two connections at once: both were created by the pool, so both ran its hook.
        let (a, b) = (store.client().await.unwrap(), store.client().await.unwrap());
        for c in [&a, &b] {
            let mode: String = c
                .query_one("SHOW plan_cache_mode", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(mode, "force_generic_plan");
        }
    }
}
