//! The command line and its settings: every setting is a flag and a `REAPER_*` environment
//! variable (the flag wins), parsed here into plain values, and every bad value is reported with
//! the setting's name as the user gave it, what was wrong, and what is accepted.

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// One setting of the CLI: a flag and an environment variable (the flag wins). The README's
/// table and the settings part of `--help` are both generated from [`SETTINGS`].
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// What it is, in a few words.
    pub setting: &'static str,
    /// The flag, as Markdown.
    pub flag: &'static str,
    /// The environment variable(s), as Markdown.
    pub env: &'static str,
    /// The default, as Markdown.
    pub default: &'static str,
    /// What values are accepted, as Markdown.
    pub accepted: &'static str,
    /// The commands that read it.
    pub commands: &'static str,
}

/// Every setting, in the order the README and `--help` show them.
pub const SETTINGS: &[Row] = &[
    Row {
        setting: "Database file",
        flag: "`--db`",
        env: "`REAPER_DB`",
        default: "`reaper.db`",
        accepted: "a path to the SQLite file the application writes runs into; it must exist (an empty file is initialised); or a PostgreSQL URL as below",
        commands: "sweep, watch, prune, status",
    },
    Row {
        setting: "PostgreSQL database",
        flag: "`--database-url` (or `--db postgres://…`)",
        env: "`REAPER_DATABASE_URL`; password `REAPER_DATABASE_PASSWORD`",
        default: "none",
        accepted: "`postgres://USER@HOST:PORT/DATABASE`; tables in schema `reaper` (created or migrated in place); a host other than this machine only over TLS",
        commands: "sweep, watch, prune, status",
    },
    Row {
        setting: "Sandbox providers",
        flag: "`--provider` (repeatable)",
        env: "`REAPER_PROVIDERS` (comma-separated)",
        default: "`local`",
        accepted: "any of `local` (also `local-process`), `docker`, `sandboxd`, `daytona`, `e2b`, `vercel` (also `vercel-sandbox`), `sprites`, `cloudflare`: each run's sandbox is reached through the provider its instance record names; another provider's sandbox is never touched. The HTTP providers read the serverless handlers' settings from the environment (`REAPER_SANDBOXD_URL`, `REAPER_SANDBOXD_TOKEN`, `DAYTONA_API_KEY`, `E2B_API_KEY`, `VERCEL_TOKEN`, `VERCEL_PROJECT_ID`, …; see `shared/reaper-serverless/README.md`); prune walks the local and Docker sandboxes only",
        commands: "sweep, watch, prune",
    },
    Row {
        setting: "Sandbox root",
        flag: "`--sandboxes`",
        env: "`REAPER_SANDBOXES`",
        default: "`sandboxes`",
        accepted: "an existing directory holding one directory per local sandbox (provider `local`)",
        commands: "sweep, watch, prune",
    },
    Row {
        setting: "Docker socket",
        flag: "`--docker-socket`",
        env: "`DOCKER_HOST`",
        default: "`unix:///var/run/docker.sock`",
        accepted: "the Docker daemon's Unix socket, `unix:///path` or `/path` (provider `docker`)",
        commands: "sweep, watch, prune",
    },
    Row {
        setting: "Docker provider name",
        flag: "`--docker-name`",
        env: "`REAPER_DOCKER_NAME`",
        default: "`docker`",
        accepted: "the provider name instance records carry for containers, and the `io.reaper.sandbox` label value of the containers reaper may touch",
        commands: "sweep, watch, prune",
    },
    Row {
        setting: "Docker strict labels",
        flag: "`--docker-require-label`",
        env: "`REAPER_DOCKER_REQUIRE_LABEL`",
        default: "off",
        accepted: "`true`/`false`: on, only containers labelled `io.reaper.sandbox=<name>` are touched; off, an unlabelled container (an app framework's) is also probed and reclaimed when its record names its exact full 64-hex id (never a name or short id)",
        commands: "sweep, watch, prune",
    },
    Row {
        setting: "Journal directory",
        flag: "`--journal-dir`",
        env: "`REAPER_JOURNAL_DIR`",
        default: "each local sandbox's own; `/tmp/tanstack-runs` in containers",
        accepted: "an absolute path inside the sandboxes",
        commands: "sweep, watch, prune",
    },
    Row {
        setting: "Detached-run TTL",
        flag: "`--detached-ttl`",
        env: "`REAPER_DETACHED_TTL`",
        default: "required (no default)",
        accepted: "a duration, 1s..3650d",
        commands: "sweep, watch (status: optional)",
    },
    Row {
        setting: "Run budget",
        flag: "`--run-budget`",
        env: "`REAPER_RUN_BUDGET`",
        default: "`30s`",
        accepted: "a duration, 10ms..1h",
        commands: "sweep, watch",
    },
    Row {
        setting: "Max runs per sweep",
        flag: "`--max-runs`",
        env: "`REAPER_MAX_RUNS`",
        default: "`25`",
        accepted: "a whole number, 1..1000",
        commands: "sweep, watch",
    },
    Row {
        setting: "Runs in flight, at most",
        flag: "`--concurrency`",
        env: "`REAPER_CONCURRENCY`",
        default: "`32`",
        accepted: "a whole number, 1..64: the cap; each sweep sizes its runs in flight within \
                   it from the provider's latency, failures and documented rate limit, and \
                   reports its choice (`concurrency`)",
        commands: "sweep, watch",
    },
    Row {
        setting: "Sandbox starts per sweep",
        flag: "`--max-starts`",
        env: "`REAPER_MAX_STARTS`",
        default: "`2`",
        accepted: "a whole number, 0..1000: stopped sandboxes (Daytona's auto-stop, E2B's pause) a sweep may start to read a finished run's journal, each stopped again or destroyed with its run; 0 never starts one",
        commands: "sweep, watch",
    },
    Row {
        setting: "Start stopped sandboxes inside the TTL",
        flag: "`--start-stopped-inside-ttl`",
        env: "`REAPER_START_STOPPED_INSIDE_TTL`",
        default: "off",
        accepted: "`true`/`false`: also start the stopped sandbox of a run inside its TTL (else it waits for its TTL)",
        commands: "sweep, watch",
    },
    Row {
        setting: "Quiet window",
        flag: "`--quiet-window`",
        env: "`REAPER_QUIET_WINDOW` (formerly `REAPER_FENCE_QUIET`)",
        default: "`5s`",
        accepted: "a duration, 0ms..1m",
        commands: "sweep, watch",
    },
    Row {
        setting: "Progress after",
        flag: "`--progress-after`",
        env: "`REAPER_PROGRESS_AFTER`",
        default: "`2s`",
        accepted: "a duration, 0ms..24d (a terminal gets progress at once)",
        commands: "sweep, watch",
    },
    Row {
        setting: "Sweep interval",
        flag: "`--every`",
        env: "`REAPER_EVERY` (formerly `REAPER_INTERVAL`)",
        default: "`60s`",
        accepted: "a duration, 10ms..1d",
        commands: "watch",
    },
    Row {
        setting: "Prune interval",
        flag: "`--prune-every`",
        env: "`REAPER_PRUNE_EVERY`",
        default: "`10m`",
        accepted: "a duration, 10ms..24d",
        commands: "watch",
    },
    Row {
        setting: "Orphan journal TTL",
        flag: "`--orphan-ttl`",
        env: "`REAPER_ORPHAN_TTL`",
        default: "`1h`",
        accepted: "a duration, 0ms..3650d",
        commands: "prune, watch",
    },
    Row {
        setting: "Max journal deletes",
        flag: "`--max-deletes`",
        env: "`REAPER_MAX_DELETES`",
        default: "`200`",
        accepted: "a whole number, 0..100000 per sandbox",
        commands: "prune, watch",
    },
    Row {
        setting: "Event retention",
        flag: "`--event-retention`",
        env: "`REAPER_EVENT_RETENTION` (formerly `REAPER_LOG_RETENTION`)",
        default: "`30d`",
        accepted: "a duration, 1h..3650d",
        commands: "prune, watch",
    },
    Row {
        setting: "Log filter",
        flag: "`--log`",
        env: "`REAPER_LOG`, else `RUST_LOG`",
        default: "`info` (`demo`: `off`)",
        accepted: "tracing directives: `warn`, `debug`, `reaper=debug,info`",
        commands: "all",
    },
    Row {
        setting: "Log format",
        flag: "`--log-format`",
        env: "`REAPER_LOG_FORMAT`",
        default: "`text`",
        accepted: "`text` or `json`",
        commands: "all",
    },
    Row {
        setting: "Machine output",
        flag: "`--json`",
        env: "`REAPER_JSON`",
        default: "off",
        accepted: "`true`/`false`",
        commands: "all",
    },
    Row {
        setting: "Health listen address",
        flag: "`--listen`",
        env: "`REAPER_LISTEN`",
        default: "off",
        accepted: "`HOST:PORT` (port 0 picks one, named in the start line); serves `/healthz` (GET, HEAD; 503 when unhealthy) and `/metrics` (Prometheus), read-only",
        commands: "watch",
    },
    Row {
        setting: "Status token",
        flag: "—",
        env: "`REAPER_STATUS_TOKEN`",
        default: "none (routes open)",
        accepted: "a secret: 16 or more printable ASCII characters without spaces, nothing around it (`openssl rand -hex 32`); then required as `Authorization: Bearer …` on `/healthz`, `/metrics` and the dashboard",
        commands: "watch",
    },
    Row {
        setting: "Status list limit",
        flag: "`--limit`",
        env: "—",
        default: "`100`",
        accepted: "a whole number, 1..1000000: the detached runs `status` prints (the summary line counts them all)",
        commands: "status",
    },
];

pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// The longest timer accepted, exactly as the settings table states it: 24 days. Larger is a
/// unit mistake, and the core refuses anything past `MAX_DURATION_MS` (about 24.8 days).
pub const MAX_TIMER_MS: u64 = 24 * DAY_MS;
const _: () = assert!(MAX_TIMER_MS <= reaper_core::reap::MAX_DURATION_MS);
/// The longest age accepted (ten years).
pub const MAX_AGE_MS: u64 = 3650 * DAY_MS;

#[derive(Debug, Parser)]
#[command(
    name = "reaper",
    version,
    about = "Cleans up after AI agents left running in sandboxes: finalizes runs that finished \
             while nobody watched, expires the ones past their TTL, reclaims their sandboxes."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Colour the logs on stderr: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub color: crate::help::ColorWhen,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Set up a realistic scene in a fresh directory, sweep it once, prune, and explain.
    Demo(DemoArgs),
    /// Run one sweep (single-flight: skipped when another sweep holds the lease).
    Sweep(SweepCmd),
    /// Sweep on an interval until SIGTERM or Ctrl-C; prune journals and events on their own cadence.
    Watch(WatchCmd),
    /// Prune the journals of every sandbox and age out old delivery-log events.
    Prune(PruneCmd),
    /// Show what is detached, for how long, and in which sandbox.
    Status(StatusCmd),
    /// Create the reaper's tables (in a new file, beside an application's own tables, or in a
    /// PostgreSQL schema) and bring them to this build's schema version.
    Init(InitCmd),
    /// Print the reaper's tables as SQL (DDL) for an application's migration tool.
    Schema(SchemaCmd),
    /// Expire one detached run now, through the sweep's own expire path (asks first).
    Expire(crate::actions::ExpireCmd),
    /// Act on one reclaim-ledger entry: retry it now, or forget a leak destroyed by hand.
    #[command(subcommand)]
    Ledger(crate::actions::LedgerCmd),
    /// Pause sweeping: every handler sweeping this database does nothing until resumed.
    Pause(crate::actions::PauseCmd),
    /// Resume sweeping after reaper pause.
    Resume(crate::actions::PauseCmd),
    /// Print every setting as a Markdown table (the README's, generated from this binary).
    Settings {
        /// Print every binary's settings and exit codes instead (SETTINGS.md).
        #[arg(long)]
        all: bool,
    },
    /// Print a shell completion script: reaper completions bash > /etc/bash_completion.d/reaper
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): reaper man > reaper.1 && man ./reaper.1
    Man,
}

#[derive(Debug, Args)]
pub struct Output {
    /// Print machine-readable JSON on stdout instead of tables (or set REAPER_JSON=true).
    // REAPER_JSON is read by `Parsed::resolve_json_env`, not clap, so a bad value names the
    // variable rather than the flag.
    #[arg(long)]
    pub json: bool,
    /// Log filter (tracing directives); REAPER_LOG, else RUST_LOG.
    #[arg(long, env = "REAPER_LOG", value_name = "FILTER")]
    pub log: Option<String>,
    /// Log format on stderr: text or json.
    #[arg(
        long,
        env = "REAPER_LOG_FORMAT",
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub log_format: String,
}

#[derive(Debug, Args)]
pub struct Db {
    /// The database the application writes runs into: an SQLite file, or a PostgreSQL URL
    /// (postgres://USER@HOST:PORT/DATABASE).
    #[arg(
        long,
        env = "REAPER_DB",
        default_value = "reaper.db",
        value_name = "PATH|URL"
    )]
    pub db: PathBuf,
    /// A PostgreSQL URL (postgres://USER@HOST:PORT/DATABASE?sslmode=require), instead of --db.
    /// The password may come from REAPER_DATABASE_PASSWORD instead of the URL.
    #[arg(
        long = "database-url",
        env = "REAPER_DATABASE_URL",
        value_name = "URL",
        conflicts_with = "db",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct Sandboxes {
    /// The sandbox providers to serve: local, docker, sandboxd, daytona, e2b, vercel, sprites,
    /// cloudflare (repeat the flag, or set REAPER_PROVIDERS=local,docker). The HTTP ones read the
    /// serverless handlers' settings (REAPER_SANDBOXD_URL, DAYTONA_API_KEY, E2B_API_KEY,
    /// VERCEL_TOKEN, SPRITES_TOKEN, CLOUDFLARE_SANDBOX_BRIDGE_URL, …).
    #[arg(
        long = "provider",
        env = "REAPER_PROVIDERS",
        value_delimiter = ',',
        default_value = "local",
        value_name = "NAME"
    )]
    pub providers: Vec<String>,
    /// The Docker daemon's Unix socket (provider docker).
    #[arg(
        long,
        env = "DOCKER_HOST",
        default_value = "unix:///var/run/docker.sock",
        value_name = "SOCKET"
    )]
    pub docker_socket: String,
    /// The provider name Docker sandboxes are recorded under (and their containers' label).
    #[arg(
        long,
        env = "REAPER_DOCKER_NAME",
        default_value = reaper_docker::DEFAULT_PROVIDER_NAME,
        value_name = "NAME"
    )]
    pub docker_name: String,
    /// Strict mode: touch only containers labelled `io.reaper.sandbox=<docker name>`. Off, an
    /// unlabelled container is reached when its record names its exact full id.
    #[arg(
        long,
        env = "REAPER_DOCKER_REQUIRE_LABEL",
        value_name = "BOOL",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub docker_require_label: bool,
    /// The directory holding the local sandboxes.
    #[arg(
        long,
        env = "REAPER_SANDBOXES",
        default_value = "sandboxes",
        value_name = "DIR"
    )]
    pub sandboxes: PathBuf,
    /// The journal directory inside every sandbox (default: each sandbox's own).
    #[arg(long, env = "REAPER_JOURNAL_DIR", value_name = "DIR")]
    pub journal_dir: Option<String>,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Runs detached longer than this are expired (required; e.g. 30m).
    #[arg(
        long,
        env = "REAPER_DETACHED_TTL",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub detached_ttl: Option<String>,
    /// How long one run's drive may take.
    #[arg(
        long,
        env = "REAPER_RUN_BUDGET",
        default_value = "30s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub run_budget: String,
    /// The most runs one sweep handles.
    #[arg(
        long,
        env = "REAPER_MAX_RUNS",
        default_value = "25",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub max_runs: String,
    /// The most runs one sweep works on at once (probes of slow sandbox hosts overlap); within
    /// it the sweep sizes its runs in flight from the provider's latency, failures and rate limit.
    #[arg(
        long,
        env = "REAPER_CONCURRENCY",
        default_value = "32",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub concurrency: String,
    /// Stopped sandboxes one sweep may start to read a finished run's journal (0: never).
    #[arg(
        long,
        env = "REAPER_MAX_STARTS",
        default_value = "2",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub max_starts: String,
    /// Also start the stopped sandbox of a run inside its TTL.
    #[arg(
        long,
        env = "REAPER_START_STOPPED_INSIDE_TTL",
        value_name = "BOOL",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub start_stopped_inside_ttl: bool,
    /// How long a run's delivery log must be quiet before a drive appends to it.
    #[arg(
        long,
        env = "REAPER_QUIET_WINDOW",
        default_value = "5s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub quiet_window: String,
    /// Print a progress line per run once a sweep has taken this long.
    #[arg(
        long,
        env = "REAPER_PROGRESS_AFTER",
        default_value = "2s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub progress_after: String,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// A journal with no run record is deleted once its newest file is this old.
    #[arg(
        long,
        env = "REAPER_ORPHAN_TTL",
        default_value = "1h",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub orphan_ttl: String,
    /// The most runs' journals deleted per sandbox per prune.
    #[arg(
        long,
        env = "REAPER_MAX_DELETES",
        default_value = "200",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub max_deletes: String,
    /// Delivery-log events of runs finished longer ago than this are deleted.
    #[arg(
        long,
        env = "REAPER_EVENT_RETENTION",
        default_value = "30d",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub event_retention: String,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The demo directory: created, or wiped when it holds a previous demo.
    #[arg(long, default_value = ".reaper-demo", value_name = "DIR")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct SweepCmd {
    #[command(flatten)]
    pub db: Db,
    #[command(flatten)]
    pub sandboxes: Sandboxes,
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Say what a sweep would do with each run and each due ledger entry, and why (the TTL
    /// arithmetic, the probe's verdict, the in-use check), writing nothing and touching no
    /// sandbox beyond read-only journal probes.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct WatchCmd {
    #[command(flatten)]
    pub db: Db,
    #[command(flatten)]
    pub sandboxes: Sandboxes,
    #[command(flatten)]
    pub sweep: SweepArgs,
    #[command(flatten)]
    pub prune: PruneArgs,
    /// Time between sweeps.
    #[arg(
        long,
        env = "REAPER_EVERY",
        default_value = "60s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub every: String,
    /// Time between journal prunes and event retention.
    #[arg(
        long,
        env = "REAPER_PRUNE_EVERY",
        default_value = "10m",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub prune_every: String,
    /// Serve /healthz (the health verdict; 503 when unhealthy) and /metrics (Prometheus) on
    /// HOST:PORT, read-only. With REAPER_STATUS_TOKEN set, both require
    /// `Authorization: Bearer <token>`.
    #[arg(long, env = "REAPER_LISTEN", value_name = "HOST:PORT")]
    pub listen: Option<String>,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct InitCmd {
    #[command(flatten)]
    pub db: Db,
    #[command(flatten)]
    pub output: Output,
}

/// The SQL dialects `reaper schema --sql` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    /// SQLite (also what D1 runs).
    Sqlite,
    /// PostgreSQL, in its own schema.
    Postgres,
}

#[derive(Debug, Args)]
pub struct SchemaCmd {
    /// Print the DDL as one SQL script (the only format; the flag says what is printed).
    #[arg(long, required = true)]
    pub sql: bool,
    /// The database the script is for.
    #[arg(long, value_enum, default_value = "sqlite", value_name = "DIALECT")]
    pub dialect: Dialect,
    /// With --dialect postgres: the schema that holds the reaper's tables.
    #[arg(long, default_value = reaper_postgres::DEFAULT_SCHEMA, value_name = "NAME")]
    pub postgres_schema: String,
}

#[derive(Debug, Args)]
pub struct PruneCmd {
    #[command(flatten)]
    pub db: Db,
    #[command(flatten)]
    pub sandboxes: Sandboxes,
    #[command(flatten)]
    pub prune: PruneArgs,
    /// Say which journals a prune would delete and why (the run's terminal status, or an
    /// orphan's age against the orphan TTL), deleting nothing and ageing out no events.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct StatusCmd {
    /// Show one run instead of the list: its record, its journal's verdict now (a read-only
    /// probe through --provider), what each sweep did to it (its history) and its reclaim-ledger
    /// entry.
    #[arg(value_name = "RUN_ID")]
    pub run_id: Option<String>,
    #[command(flatten)]
    pub db: Db,
    /// Optional here: marks the runs a sweep would expire.
    #[arg(
        long,
        env = "REAPER_DETACHED_TTL",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub detached_ttl: Option<String>,
    /// Print only the health verdict (the same as Vercel's `?status` and `watch --listen`'s
    /// /healthz): exit 0 when healthy, 2 when not (a leaked sandbox, an overdue detached run, a
    /// stale or failed last sweep, a failed read). Needs --detached-ttl.
    #[arg(long)]
    pub check: bool,
    /// With --check: the run budget the sweeps use.
    #[arg(
        long,
        env = "REAPER_RUN_BUDGET",
        default_value = "30s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub run_budget: String,
    /// With --check: how often sweeps run (the watch interval or the cron period).
    #[arg(
        long,
        env = "REAPER_EVERY",
        default_value = "60s",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub every: String,
    /// The most detached runs listed (the summary line counts them all).
    #[arg(
        long,
        default_value = "100",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub limit: String,
    /// List only runs detached for at least this long (e.g. 30m).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub older_than: Option<String>,
    /// List only runs whose sandbox is recorded under this provider (e.g. local, docker). With
    /// RUN_ID: the providers the journal is probed through (default: REAPER_PROVIDERS, or
    /// local).
    #[arg(long = "provider", value_name = "NAME")]
    pub provider: Option<String>,
    /// List only runs whose last sweep had this outcome (finalized, expired,
    /// unknown, budget-exceeded, not-claimed, reclaim-failed, failed), from the runs' history
    /// (which records no producing outcome, so producing is refused).
    #[arg(long, value_name = "OUTCOME")]
    pub outcome: Option<String>,
    /// Re-render every INTERVAL (2s when given without one) until interrupted.
    #[arg(
        long,
        value_name = "INTERVAL",
        num_args = 0..=1,
        default_missing_value = "2s",
        allow_hyphen_values = true
    )]
    pub watch: Option<String>,
    /// With RUN_ID: the directory holding the local sandboxes, for the probe.
    #[arg(
        long,
        env = "REAPER_SANDBOXES",
        default_value = "sandboxes",
        value_name = "DIR"
    )]
    pub sandboxes: PathBuf,
    /// With RUN_ID: the journal directory inside every sandbox (default: each sandbox's own).
    #[arg(long, env = "REAPER_JOURNAL_DIR", value_name = "DIR")]
    pub journal_dir: Option<String>,
    #[command(flatten)]
    pub output: Output,
}

/// A setting with a bad or missing value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The parsed command line and the matches it came from (to tell a flag from an environment
/// variable in messages).
#[derive(Debug)]
pub struct Parsed {
    pub cli: Cli,
    matches: ArgMatches,
    /// Settings whose value came from a deprecated variable: (clap id, old variable).
    read_as: Vec<(&'static str, &'static str)>,
}

/// The clap definition with the settings and exit codes after `--help`, wrapped to `width`.
pub fn command(width: usize) -> clap::Command {
    Cli::command()
        .max_term_width(crate::help::MAX_WIDTH)
        .after_long_help(crate::help::settings_help(width))
}

/// Parses the process's arguments. `Err` is clap's own error (help, version, or a usage error).
pub fn parse() -> Result<Parsed, clap::Error> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let color = crate::help::ColorWhen::from_raw_args(&args);
    let matches = command(crate::help::help_width())
        .color(color.clap())
        .try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    Ok(Parsed {
        cli,
        matches,
        read_as: Vec::new(),
    })
}

/// The values `REAPER_JSON` accepts.
const JSON_ENV_ACCEPTED: &str = "true or false (or pass --json)";

impl Parsed {
    /// Applies `REAPER_JSON` when `--json` was not passed. Any value other than `true`/`false`
    /// (any case; `1`/`0` too; empty means unset) is refused, naming the variable.
    pub fn resolve_json_env(&mut self) -> Result<(), ConfigError> {
        let output = match &mut self.cli.command {
            Command::Demo(a) => &mut a.output,
            Command::Sweep(a) => &mut a.output,
            Command::Watch(a) => &mut a.output,
            Command::Prune(a) => &mut a.output,
            Command::Status(a) => &mut a.output,
            Command::Init(a) => &mut a.output,
            Command::Expire(a) => &mut a.output,
            Command::Ledger(crate::actions::LedgerCmd::Retry(a))
            | Command::Ledger(crate::actions::LedgerCmd::Forget(a)) => &mut a.output,
            Command::Pause(a) | Command::Resume(a) => &mut a.output,
            Command::Settings { .. }
            | Command::Schema(_)
            | Command::Completions { .. }
            | Command::Man => return Ok(()),
        };
        if output.json {
            return Ok(());
        }
        let Some(raw) = std::env::var_os("REAPER_JSON") else {
            return Ok(());
        };
        let value = raw.to_string_lossy();
        output.json = match value.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => true,
            "false" | "0" | "" => false,
            _ => {
                return Err(ConfigError(format!(
                    "invalid value for REAPER_JSON: {value:?}: expected {JSON_ENV_ACCEPTED}"
                )))
            }
        };
        Ok(())
    }

    /// Reads the renamed settings' old variables (the serverless handlers' and the Worker's
    /// former names) where neither the flag nor the new variable is given, and returns every
    /// old variable found, for one warning each. The flag and the new variable win.
    pub fn resolve_renamed_env(
        &mut self,
        get: impl Fn(&str) -> Option<String>,
    ) -> Vec<reaper_core::settings::Renamed> {
        let mut found = Vec::new();
        let Some((_, sub)) = self.matches.subcommand() else {
            return found;
        };
        for key in RENAMED {
            // Only the subcommands that take the setting.
            if !sub.ids().any(|id| id.as_str() == key.id) {
                continue;
            }
            let lookup = reaper_core::settings::lookup(key.env, &get);
            let Some(mut renamed) = lookup.renamed else {
                continue;
            };
            let given = matches!(
                sub.value_source(key.id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
            renamed.ignored |= given;
            if let (false, Some(value)) = (renamed.ignored, lookup.value) {
                if let Some(field) = renamed_field(&mut self.cli.command, key.id) {
                    *field = value;
                    self.read_as.push((key.id, renamed.old));
                }
            }
            found.push(renamed);
        }
        found
    }

    /// A resolver for the settings of the chosen subcommand.
    pub fn settings(&self) -> Settings<'_> {
        Settings {
            matches: self
                .matches
                .subcommand()
                .map(|(_, m)| m)
                .unwrap_or(&self.matches),
            read_as: &self.read_as,
        }
    }
}

/// Turns raw setting strings into values, naming the setting as the user supplied it.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    matches: &'a ArgMatches,
    read_as: &'a [(&'static str, &'static str)],
}

/// A setting's identity: clap's argument id, its flag and its environment variable.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub id: &'static str,
    pub flag: &'static str,
    pub env: &'static str,
}

pub const DETACHED_TTL: Key = Key::new("detached_ttl", "--detached-ttl", "REAPER_DETACHED_TTL");
pub const RUN_BUDGET: Key = Key::new("run_budget", "--run-budget", "REAPER_RUN_BUDGET");
pub const MAX_RUNS: Key = Key::new("max_runs", "--max-runs", "REAPER_MAX_RUNS");
pub const QUIET_WINDOW: Key = Key::new("quiet_window", "--quiet-window", "REAPER_QUIET_WINDOW");
pub const CONCURRENCY: Key = Key::new("concurrency", "--concurrency", "REAPER_CONCURRENCY");
pub const MAX_STARTS: Key = Key::new("max_starts", "--max-starts", "REAPER_MAX_STARTS");
pub const PROGRESS_AFTER: Key = Key::new(
    "progress_after",
    "--progress-after",
    "REAPER_PROGRESS_AFTER",
);
pub const EVERY: Key = Key::new("every", "--every", "REAPER_EVERY");
pub const LIMIT: Key = Key::new("limit", "--limit", "--limit");
pub const OLDER_THAN: Key = Key::new("older_than", "--older-than", "--older-than");
pub const STATUS_WATCH: Key = Key::new("watch", "--watch", "--watch");
pub const PRUNE_EVERY: Key = Key::new("prune_every", "--prune-every", "REAPER_PRUNE_EVERY");
pub const ORPHAN_TTL: Key = Key::new("orphan_ttl", "--orphan-ttl", "REAPER_ORPHAN_TTL");
pub const MAX_DELETES: Key = Key::new("max_deletes", "--max-deletes", "REAPER_MAX_DELETES");
pub const EVENT_RETENTION: Key = Key::new(
    "event_retention",
    "--event-retention",
    "REAPER_EVENT_RETENTION",
);
pub const LOG_FORMAT: Key = Key::new("log_format", "--log-format", "REAPER_LOG_FORMAT");
pub const LOG: Key = Key::new("log", "--log", "REAPER_LOG");
pub const PROVIDERS: Key = Key::new("providers", "--provider", "REAPER_PROVIDERS");
pub const DOCKER_SOCKET: Key = Key::new("docker_socket", "--docker-socket", "DOCKER_HOST");
pub const DOCKER_NAME: Key = Key::new("docker_name", "--docker-name", "REAPER_DOCKER_NAME");

/// The settings with an old variable name still read (see [`reaper_core::settings`]).
const RENAMED: [Key; 3] = [QUIET_WINDOW, EVENT_RETENTION, EVERY];

/// The field holding a renamed setting's raw value in `command`, if it takes the setting.
fn renamed_field<'c>(command: &'c mut Command, id: &str) -> Option<&'c mut String> {
    match (command, id) {
        (Command::Sweep(a), "quiet_window") => Some(&mut a.sweep.quiet_window),
        (Command::Watch(a), "quiet_window") => Some(&mut a.sweep.quiet_window),
        (Command::Watch(a), "event_retention") => Some(&mut a.prune.event_retention),
        (Command::Prune(a), "event_retention") => Some(&mut a.prune.event_retention),
        (Command::Watch(a), "every") => Some(&mut a.every),
        (Command::Status(a), "every") => Some(&mut a.every),
        _ => None,
    }
}

impl Key {
    const fn new(id: &'static str, flag: &'static str, env: &'static str) -> Self {
        Key { id, flag, env }
    }
}

impl Settings<'_> {
    /// How the user named the setting: the variable when it came from the environment.
    pub fn name(&self, key: Key) -> String {
        if let Some((_, old)) = self.read_as.iter().find(|(id, _)| *id == key.id) {
            return (*old).to_string();
        }
        match self.matches.value_source(key.id) {
            Some(ValueSource::EnvVariable) => key.env.to_string(),
            Some(ValueSource::CommandLine) => key.flag.to_string(),
            _ => format!("{} (default)", key.flag),
        }
    }

    fn invalid(&self, key: Key, value: &str, expected: &str) -> ConfigError {
        ConfigError(format!(
            "invalid value for {}: {value:?}: expected {expected}",
            self.name(key)
        ))
    }

    /// A duration between `min_ms` and `max_ms` inclusive; a setting of
    /// [`reaper_core::settings`] takes the range registered there instead, so it is the same
    /// range wherever the setting is read.
    pub fn duration(
        &self,
        key: Key,
        value: &str,
        min_ms: u64,
        max_ms: u64,
    ) -> Result<Duration, ConfigError> {
        let (min_ms, max_ms) = reaper_core::settings::setting(key.env)
            .and_then(reaper_core::settings::Setting::duration_ms)
            .unwrap_or((min_ms, max_ms));
        let expected = format!(
            "a duration like 30s, 5m or 250ms ({}..{})",
            show_ms(min_ms),
            show_ms(max_ms)
        );
        let d = humantime::parse_duration(value.trim())
            .map_err(|_| self.invalid(key, value, &expected))?;
        // Compared in whole nanoseconds: `24d 1ns` is past 24d, not rounded back into range.
        let (min, max) = (Duration::from_millis(min_ms), Duration::from_millis(max_ms));
        if d > max {
            return Err(self.invalid(
                key,
                value,
                &format!(
                    "{expected}: it is longer than the limit of {}",
                    show_ms(max_ms)
                ),
            ));
        }
        if d < min {
            return Err(self.invalid(
                key,
                value,
                &format!("{expected}: it is shorter than {}", show_ms(min_ms)),
            ));
        }
        Ok(d)
    }

    pub fn duration_ms(
        &self,
        key: Key,
        value: &str,
        min_ms: u64,
        max_ms: u64,
    ) -> Result<u64, ConfigError> {
        Ok(self.duration(key, value, min_ms, max_ms)?.as_millis() as u64)
    }

    /// A whole number between `min` and `max` inclusive; a setting of [`reaper_core::settings`]
    /// takes the range registered there instead.
    pub fn count(&self, key: Key, value: &str, min: u64, max: u64) -> Result<u64, ConfigError> {
        let (min, max) = reaper_core::settings::setting(key.env)
            .and_then(reaper_core::settings::Setting::count)
            .unwrap_or((min, max));
        let expected = format!("a whole number from {min} to {max}");
        match value.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.invalid(key, value, &expected)),
        }
    }

    /// The detached-run TTL, which has no default.
    pub fn detached_ttl_ms(&self, value: Option<&str>) -> Result<u64, ConfigError> {
        let Some(value) = value else {
            return Err(ConfigError(
                "missing setting: the detached-run TTL has no default: pass --detached-ttl 30m \
                 or set REAPER_DETACHED_TTL (a duration like 30m or 2h, 1s..3650d); runs \
                 detached longer than this are expired"
                    .into(),
            ));
        };
        self.duration_ms(DETACHED_TTL, value, 1, MAX_AGE_MS)
    }

    /// The providers to serve, in the order given, each once: any provider of the shared
    /// registry (`reaper_providers`), by its name or the name the framework records.
    pub fn providers(&self, values: &[String]) -> Result<Vec<ProviderKind>, ConfigError> {
        const ACCEPTED: &str = "local, docker, sandboxd, daytona, e2b, vercel, sprites or \
                                cloudflare, one or more \
                                (repeat --provider, or separate with commas in REAPER_PROVIDERS)";
        reaper_providers::parse_names(values.iter().map(String::as_str), Host::Native).map_err(
            |e| {
                let shown = match &e {
                    reaper_providers::ProvidersError::Unknown { name, .. } => name.clone(),
                    reaper_providers::ProvidersError::Duplicate(name) => name.clone(),
                    _ => values.join(","),
                };
                let why = match e {
                    reaper_providers::ProvidersError::Duplicate(_) => {
                        format!("{ACCEPTED}: it is given twice")
                    }
                    _ => ACCEPTED.to_string(),
                };
                self.invalid(PROVIDERS, &shown, &why)
            },
        )
    }

    /// The Docker provider's options: the socket and the recorded name.
    pub fn docker(
        &self,
        socket: &str,
        name: &str,
    ) -> Result<reaper_docker::DockerProviderOptions, ConfigError> {
        let mut options =
            reaper_docker::DockerProviderOptions::from_host(socket.trim()).map_err(|_| {
                self.invalid(
                    DOCKER_SOCKET,
                    socket,
                    "the daemon's Unix socket as unix:///var/run/docker.sock or an absolute \
                     path (TCP and SSH hosts are not supported)",
                )
            })?;
        if name.trim().is_empty() {
            return Err(self.invalid(
                DOCKER_NAME,
                name,
                "a non-empty name, e.g. docker (instance records of Docker sandboxes carry it)",
            ));
        }
        options.name = name.trim().to_string();
        Ok(options)
    }

    pub fn log_format(&self, value: &str) -> Result<LogFormat, ConfigError> {
        match value.trim() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(self.invalid(LOG_FORMAT, value, "text or json")),
        }
    }
}

use reaper_core::settings::show_ms;

use reaper_providers::Host;
/// A sandbox provider the CLI can serve: every one of the shared registry.
pub use reaper_providers::ProviderKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The sweep settings, parsed.
#[derive(Debug, Clone, Copy)]
pub struct SweepSettings {
    pub detached_ttl_ms: u64,
    pub run_budget_ms: u64,
    pub max_runs: usize,
    pub concurrency: usize,
    pub max_starts: usize,
    pub start_stopped_inside_ttl: bool,
    pub quiet_window_ms: u64,
    pub progress_after: Duration,
}

impl SweepSettings {
    pub fn parse(s: Settings<'_>, a: &SweepArgs) -> Result<Self, ConfigError> {
        Ok(SweepSettings {
            detached_ttl_ms: s.detached_ttl_ms(a.detached_ttl.as_deref())?,
            run_budget_ms: s.duration_ms(RUN_BUDGET, &a.run_budget, 1, MAX_TIMER_MS)?,
            max_runs: s.count(MAX_RUNS, &a.max_runs, 0, 100_000)? as usize,
            concurrency: s.count(
                CONCURRENCY,
                &a.concurrency,
                1,
                reaper_core::reap::MAX_CONCURRENCY as u64,
            )? as usize,
            max_starts: s.count(MAX_STARTS, &a.max_starts, 0, 1_000)? as usize,
            start_stopped_inside_ttl: a.start_stopped_inside_ttl,
            quiet_window_ms: s.duration_ms(QUIET_WINDOW, &a.quiet_window, 0, MAX_TIMER_MS)?,
            progress_after: s.duration(PROGRESS_AFTER, &a.progress_after, 0, MAX_TIMER_MS)?,
        })
    }
}

/// The prune settings, parsed.
#[derive(Debug, Clone, Copy)]
pub struct PruneSettings {
    pub orphan_ttl_ms: u64,
    pub max_deletes: usize,
    pub event_retention_ms: u64,
    /// Decide, delete nothing (`reaper prune --dry-run`).
    pub dry_run: bool,
}

impl PruneSettings {
    pub fn parse(s: Settings<'_>, a: &PruneArgs) -> Result<Self, ConfigError> {
        Ok(PruneSettings {
            orphan_ttl_ms: s.duration_ms(ORPHAN_TTL, &a.orphan_ttl, 0, MAX_AGE_MS)?,
            max_deletes: s.count(MAX_DELETES, &a.max_deletes, 0, 100_000)? as usize,
            event_retention_ms: s.duration_ms(
                EVENT_RETENTION,
                &a.event_retention,
                0,
                MAX_AGE_MS,
            )?,
            dry_run: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_shown_in_the_unit_a_person_writes() {
        assert_eq!(show_ms(1), "1ms");
        assert_eq!(show_ms(10), "10ms");
        assert_eq!(show_ms(1000), "1s");
        assert_eq!(show_ms(MAX_TIMER_MS), "24d");
        assert_eq!(show_ms(DAY_MS + 1), "86400001ms", "never rounded");
        assert_eq!(show_ms(MAX_AGE_MS), "3650d");
    }
}
