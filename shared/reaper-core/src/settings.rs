//! One registry of every `REAPER_*` setting of every binary (and the Cloudflare Sandbox
//! bridge's, `CLOUDFLARE_SANDBOX_BRIDGE_*`): its one name, the names it had
//! before, which binaries read it, and the range of its value. The binaries check their own
//! settings against it (each in a test), take the ranges of the settings they share from it,
//! and read renamed settings through [`lookup`]; `SETTINGS.md` is [`markdown`]'s output.
//!
//! Like the rest of the core this reads nothing itself: [`lookup`] is handed the environment.
//!
//! ```
//! use reaper_core::settings::{lookup, QUIET_WINDOW};
//!
//! // A deployment still using the serverless handlers' old name keeps working, with a warning.
//! let env = |name: &str| (name == "REAPER_FENCE_QUIET").then(|| "3s".to_string());
//! let found = lookup(QUIET_WINDOW, env);
//! assert_eq!(found.value.as_deref(), Some("3s"));
//! let renamed = found.renamed.unwrap();
//! assert_eq!((renamed.old, renamed.new), ("REAPER_FENCE_QUIET", "REAPER_QUIET_WINDOW"));
//! ```

use std::fmt;

/// A program that reads settings from its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Binary {
    /// `reaper`, the command line (`sweep`, `watch`, `prune`, `status`).
    Cli,
    /// `reaper-sandboxd`, the sandbox daemon.
    Sandboxd,
    /// The AWS Lambda handler (`handlers/reaper-lambda`).
    Lambda,
    /// The Vercel function (`handlers/reaper-vercel`).
    Vercel,
    /// The Cloudflare Worker (`handlers/reaper-cloudflare`, wrangler `[vars]` and secrets).
    Worker,
}

impl Binary {
    /// Every binary, in the order `SETTINGS.md` lists them.
    pub const ALL: [Binary; 5] = [
        Binary::Cli,
        Binary::Sandboxd,
        Binary::Lambda,
        Binary::Vercel,
        Binary::Worker,
    ];

    /// The short name the settings table uses.
    pub fn name(self) -> &'static str {
        match self {
            Binary::Cli => "reaper",
            Binary::Sandboxd => "reaper-sandboxd",
            Binary::Lambda => "Lambda",
            Binary::Vercel => "Vercel",
            Binary::Worker => "Worker",
        }
    }
}

/// What a setting's value may be. Durations are written as `250ms`, `30s`, `5m`, `2h`, `30d`
/// everywhere; the bounds are inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// A duration between two bounds, in milliseconds.
    Duration {
        /// The shortest accepted.
        min_ms: u64,
        /// The longest accepted.
        max_ms: u64,
    },
    /// A whole number between two bounds.
    Count {
        /// The smallest accepted.
        min: u64,
        /// The largest accepted.
        max: u64,
    },
    /// A bearer token: every one follows [`check_token`], described by [`TOKEN_ACCEPTED`].
    Token,
    /// Anything else, described in words.
    Text(&'static str),
}

impl Value {
    /// The range as people write it: `a duration, 1s..3650d`, `a whole number, 1..64`.
    pub fn accepted(&self) -> String {
        match *self {
            Value::Duration { min_ms, max_ms } => {
                format!("a duration, {}..{}", show_ms(min_ms), show_ms(max_ms))
            }
            Value::Count { min, max } => format!("a whole number, {min}..{max}"),
            Value::Token => TOKEN_ACCEPTED.to_string(),
            Value::Text(text) => text.to_string(),
        }
    }
}

/// One setting as every binary reading it knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The environment variable.
    pub name: &'static str,
    /// Names it had before: still read, with a deprecation warning, when `name` is unset.
    pub old_names: &'static [&'static str],
    /// The binaries that read it.
    pub read_by: &'static [Binary],
    /// What it may be set to.
    pub value: Value,
    /// The value when unset, as the table shows it.
    pub default: &'static str,
    /// What it controls, in a sentence.
    pub what: &'static str,
}

impl Setting {
    /// Whether `binary` reads this setting.
    pub fn is_read_by(&self, binary: Binary) -> bool {
        self.read_by.contains(&binary)
    }

    /// The duration bounds, for a [`Value::Duration`] setting.
    pub fn duration_ms(&self) -> Option<(u64, u64)> {
        match self.value {
            Value::Duration { min_ms, max_ms } => Some((min_ms, max_ms)),
            _ => None,
        }
    }

    /// The bounds, for a [`Value::Count`] setting.
    pub fn count(&self) -> Option<(u64, u64)> {
        match self.value {
            Value::Count { min, max } => Some((min, max)),
            _ => None,
        }
    }
}

const MS: u64 = 1;
const SECOND: u64 = 1000 * MS;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Runs detached longer than this are expired.
pub const DETACHED_TTL: &str = "REAPER_DETACHED_TTL";
/// How long one run's drive may take.
pub const RUN_BUDGET: &str = "REAPER_RUN_BUDGET";
/// The most runs one sweep handles.
pub const MAX_RUNS: &str = "REAPER_MAX_RUNS";
/// Runs in flight at once.
pub const CONCURRENCY: &str = "REAPER_CONCURRENCY";
/// How long a run's delivery log must be quiet before a drive appends to it.
pub const QUIET_WINDOW: &str = "REAPER_QUIET_WINDOW";
/// How long a finished run's delivery-log events are kept.
pub const EVENT_RETENTION: &str = "REAPER_EVENT_RETENTION";
/// Time between sweeps.
pub const EVERY: &str = "REAPER_EVERY";
/// The journal directory inside every sandbox.
pub const JOURNAL_DIR: &str = "REAPER_JOURNAL_DIR";

const SERVERLESS: &[Binary] = &[Binary::Lambda, Binary::Vercel];
const SWEEPERS: &[Binary] = &[Binary::Cli, Binary::Lambda, Binary::Vercel, Binary::Worker];
const HOSTED_SWEEPERS: &[Binary] = &[Binary::Lambda, Binary::Vercel, Binary::Worker];

const fn duration(min_ms: u64, max_ms: u64) -> Value {
    Value::Duration { min_ms, max_ms }
}

/// Every `REAPER_*` setting of every binary (and the Sandbox bridge's), the shared ones first.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: DETACHED_TTL,
        old_names: &[],
        read_by: SWEEPERS,
        value: duration(SECOND, 3650 * DAY),
        default: "required (`status`: optional)",
        what: "Runs detached longer than this are expired and their sandboxes reclaimed.",
    },
    Setting {
        name: RUN_BUDGET,
        old_names: &[],
        read_by: SWEEPERS,
        value: duration(10 * MS, HOUR),
        default: "`30s`",
        what: "How long one run's drive may take.",
    },
    Setting {
        name: MAX_RUNS,
        old_names: &[],
        read_by: SWEEPERS,
        value: Value::Count { min: 1, max: 1000 },
        default: "`25`",
        what: "The most runs one sweep handles; the rest wait for the next sweep.",
    },
    Setting {
        name: CONCURRENCY,
        old_names: &[],
        read_by: &[Binary::Cli, Binary::Lambda, Binary::Vercel],
        value: Value::Count { min: 1, max: 64 },
        default: "`32`",
        what: "The cap on runs one sweep works on at once; each sweep sizes its runs in flight \
               within it from the provider's latency, failures and documented rate limit, and \
               reports its choice (`concurrency`).",
    },
    Setting {
        name: QUIET_WINDOW,
        old_names: &["REAPER_FENCE_QUIET"],
        read_by: SWEEPERS,
        value: duration(0, MINUTE),
        default: "`5s`",
        what: "How long a run's delivery log must be quiet before a drive appends to it.",
    },
    Setting {
        name: EVENT_RETENTION,
        old_names: &["REAPER_LOG_RETENTION"],
        read_by: SWEEPERS,
        value: duration(HOUR, 3650 * DAY),
        default: "`30d`",
        what: "Delivery-log events of runs finished longer ago than this are deleted \
               (transcripts stay).",
    },
    Setting {
        name: EVERY,
        old_names: &["REAPER_INTERVAL"],
        read_by: &[Binary::Cli, Binary::Worker],
        value: duration(10 * MS, DAY),
        default: "`60s`",
        what: "Time between sweeps (`watch`, the Worker's alarm); `status --check` uses it to \
               tell a stale sweep. Lambda and Vercel sweep on their schedule instead.",
    },
    Setting {
        name: JOURNAL_DIR,
        old_names: &[],
        read_by: SWEEPERS,
        value: Value::Text("an absolute directory path inside the sandboxes"),
        default: "each local sandbox's own; `/tmp/tanstack-runs` elsewhere",
        what: "Where the runs' journals are inside every sandbox.",
    },
    Setting {
        name: "REAPER_PROVIDERS",
        old_names: &[],
        read_by: SWEEPERS,
        value: Value::Text(
            "comma-separated provider names: `local`, `docker` (reaper only), `sandboxd`, \
             `daytona`, `e2b`, `vercel`, `sprites`, `cloudflare`",
        ),
        default: "reaper: `local`; elsewhere `sandboxd`",
        what: "The sandbox providers one sweep serves; each hosted one reads its own key.",
    },
    Setting {
        name: "REAPER_SANDBOXD_URL",
        old_names: &[],
        read_by: SWEEPERS,
        value: Value::Text("an `http://` or `https://` base URL"),
        default: "none (required when the providers list `sandboxd`)",
        what: "Where `reaper-sandboxd` listens.",
    },
    Setting {
        name: "REAPER_SANDBOXD_TOKEN",
        old_names: &[],
        read_by: &[
            Binary::Cli,
            Binary::Sandboxd,
            Binary::Lambda,
            Binary::Vercel,
            Binary::Worker,
        ],
        value: Value::Token,
        default: "none (sandboxd: or `--token-file`)",
        what: "The bearer token between the reapers and `reaper-sandboxd`.",
    },
    // The Cloudflare Sandbox bridge's: the one provider whose server this repository ships
    // (`handlers/reaper-cloudflare/sandbox-bridge`), so its token follows the reaper's rule.
    Setting {
        name: "CLOUDFLARE_SANDBOX_BRIDGE_URL",
        old_names: &[],
        read_by: SWEEPERS,
        value: Value::Text("an `http://` or `https://` base URL"),
        default: "none (required when the providers list `cloudflare`)",
        what: "Where the Cloudflare Sandbox bridge Worker listens.",
    },
    Setting {
        name: "CLOUDFLARE_SANDBOX_BRIDGE_TOKEN",
        old_names: &[],
        read_by: SWEEPERS,
        value: Value::Token,
        default: "none (required when the providers list `cloudflare`)",
        what: "The bearer token between the reapers and the Sandbox bridge (the bridge's \
               `BRIDGE_TOKEN` secret, which the bridge checks by the same rule).",
    },
    Setting {
        name: "REAPER_SANDBOX_PROVIDER_NAME",
        old_names: &[],
        read_by: HOSTED_SWEEPERS,
        value: Value::Text("1 to 64 printable characters without spaces"),
        default: "`sandboxd`",
        what: "The provider name the sandbox instance records of `reaper-sandboxd` carry.",
    },
    Setting {
        name: "REAPER_STATUS_TOKEN",
        old_names: &[],
        read_by: &[Binary::Cli, Binary::Vercel, Binary::Worker],
        value: Value::Token,
        default: "none",
        what: "Admits a monitor to the read-only status routes (`watch --listen`, Vercel's \
               `?status`, the Worker's status route) and nothing else.",
    },
    Setting {
        name: "REAPER_DATABASE_URL",
        old_names: &[],
        read_by: &[Binary::Cli, Binary::Lambda, Binary::Vercel],
        value: Value::Text(
            "`postgres://USER@HOST:PORT/DATABASE`; a host other than this machine only over TLS",
        ),
        default: "none",
        what: "The PostgreSQL database holding the runs (schema `reaper`).",
    },
    Setting {
        name: "REAPER_DATABASE_PASSWORD",
        old_names: &[],
        read_by: &[Binary::Cli, Binary::Lambda, Binary::Vercel],
        value: Value::Text("the password, when the URL carries none (a secret)"),
        default: "none",
        what: "The PostgreSQL password, kept out of the URL.",
    },
    // The command line's own.
    Setting {
        name: "REAPER_DB",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("a path to an SQLite file, or a PostgreSQL URL"),
        default: "`reaper.db`",
        what: "The database the application writes runs into.",
    },
    Setting {
        name: "REAPER_SANDBOXES",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("an existing directory"),
        default: "`sandboxes`",
        what: "The directory holding one directory per local sandbox.",
    },
    Setting {
        name: "REAPER_DOCKER_NAME",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("a non-empty name"),
        default: "`docker`",
        what: "The provider name of Docker sandboxes and their `io.reaper.sandbox` label.",
    },
    Setting {
        name: "REAPER_DOCKER_REQUIRE_LABEL",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("`true` or `false`"),
        default: "`false`",
        what: "Touch only containers labelled `io.reaper.sandbox=<name>`.",
    },
    Setting {
        name: "REAPER_MAX_STARTS",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Count { min: 0, max: 1000 },
        default: "`2`",
        what: "Stopped sandboxes one sweep may start to read a finished run's journal.",
    },
    Setting {
        name: "REAPER_START_STOPPED_INSIDE_TTL",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("`true` or `false`"),
        default: "`false`",
        what: "Also start the stopped sandbox of a run inside its TTL.",
    },
    Setting {
        name: "REAPER_PROGRESS_AFTER",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: duration(0, 24 * DAY),
        default: "`2s`",
        what: "Print a progress line per run once a sweep has taken this long.",
    },
    Setting {
        name: "REAPER_PRUNE_EVERY",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: duration(10 * MS, 24 * DAY),
        default: "`10m`",
        what: "Time between journal prunes and event retention in `watch`.",
    },
    Setting {
        name: "REAPER_ORPHAN_TTL",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: duration(0, 3650 * DAY),
        default: "`1h`",
        what: "A journal with no run record is deleted once its newest file is this old.",
    },
    Setting {
        name: "REAPER_MAX_DELETES",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Count {
            min: 0,
            max: 100_000,
        },
        default: "`200`",
        what: "The most runs' journals deleted per sandbox per prune.",
    },
    Setting {
        name: "REAPER_LOG",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("tracing directives, e.g. `warn` or `reaper=debug,info`"),
        default: "`info` (else `RUST_LOG`)",
        what: "Which log lines are written.",
    },
    Setting {
        name: "REAPER_LOG_FORMAT",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("`text` or `json`"),
        default: "`text`",
        what: "The log format on stderr.",
    },
    Setting {
        name: "REAPER_JSON",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("`true` or `false`"),
        default: "`false`",
        what: "Machine-readable JSON on stdout instead of tables.",
    },
    Setting {
        name: "REAPER_LISTEN",
        old_names: &[],
        read_by: &[Binary::Cli],
        value: Value::Text("`HOST:PORT`"),
        default: "off",
        what: "Where `watch` serves `/healthz` and `/metrics`.",
    },
    // The daemon's own.
    Setting {
        name: "REAPER_SANDBOXD_BACKEND",
        old_names: &[],
        read_by: &[Binary::Sandboxd],
        value: Value::Text("`local` or `docker`"),
        default: "`local`",
        what: "Where the daemon's sandboxes live.",
    },
    Setting {
        name: "REAPER_SANDBOXD_DOCKER_IMAGE",
        old_names: &[],
        read_by: &[Binary::Sandboxd],
        value: Value::Text("an image already on the Docker daemon"),
        default: "none (required with the docker backend)",
        what: "The image every sandbox container runs.",
    },
    // Lambda's and Vercel's own.
    Setting {
        name: "REAPER_STORE",
        old_names: &[],
        read_by: SERVERLESS,
        value: Value::Text("`dynamodb` or `postgres`"),
        default: "`dynamodb`",
        what: "The store holding the runs.",
    },
    Setting {
        name: "REAPER_TABLE",
        old_names: &[],
        read_by: SERVERLESS,
        value: Value::Text("a DynamoDB table name, 3 to 255 of `A-Z a-z 0-9 _ - .`"),
        default: "none (required with `dynamodb`)",
        what: "The DynamoDB table holding runs, logs, leases and sandbox instances.",
    },
    Setting {
        name: "REAPER_SANDBOXD_TOKEN_SECRET_ARN",
        old_names: &[],
        read_by: SERVERLESS,
        value: Value::Text("a Secrets Manager secret ARN"),
        default: "none",
        what: "Read the sandboxd token from this secret at run time instead.",
    },
    Setting {
        name: "REAPER_SECRET_CACHE_TTL",
        old_names: &[],
        read_by: SERVERLESS,
        value: duration(SECOND, HOUR),
        default: "`5m`",
        what: "How long a token read from Secrets Manager is used before it is read again.",
    },
    Setting {
        name: "REAPER_STEP_TIMEOUT",
        old_names: &[],
        read_by: SERVERLESS,
        value: duration(100 * MS, 5 * MINUTE),
        default: "`20s`",
        what: "How long one journal probe or one sandbox reclaim may take.",
    },
    Setting {
        name: "REAPER_BUDGET",
        old_names: &[],
        read_by: SERVERLESS,
        value: duration(SECOND, HOUR),
        default: "the platform's deadline",
        what: "The invocation's budget when the platform gives no deadline (Vercel: \
               `maxDuration`).",
    },
    Setting {
        name: "REAPER_DEADLINE_MARGIN",
        old_names: &[],
        read_by: SERVERLESS,
        value: duration(0, 5 * MINUTE),
        default: "`15s` or a tenth of the budget",
        what: "Time kept free before the deadline.",
    },
    Setting {
        name: "REAPER_PER_RUN_RESERVE",
        old_names: &[],
        read_by: SERVERLESS,
        value: duration(MS, HOUR),
        default: "the worst case of one run",
        what: "The time one run may take, so no run starts that cannot finish.",
    },
    Setting {
        name: "REAPER_METRICS_NAMESPACE",
        old_names: &[],
        read_by: &[Binary::Lambda],
        value: Value::Text("a CloudWatch namespace"),
        default: "`Reaper`",
        what: "Where Lambda's embedded metrics go.",
    },
    // The Worker's own.
    Setting {
        name: "REAPER_PLAN",
        old_names: &[],
        read_by: &[Binary::Worker],
        value: Value::Text("`free` or `paid`"),
        default: "`free`",
        what: "The Workers plan, whose limits size the sweep.",
    },
    Setting {
        name: "REAPER_CPU_LIMIT",
        old_names: &[],
        read_by: &[Binary::Worker],
        value: duration(10 * MS, 5 * MINUTE),
        default: "by plan: `10ms` (free), `30s` (paid)",
        what: "The CPU one invocation may use (`[limits] cpu_ms`).",
    },
    Setting {
        name: "REAPER_CPU_PER_RUN",
        old_names: &[],
        read_by: &[Binary::Worker],
        value: duration(MS, MINUTE),
        default: "`200ms`",
        what: "The CPU one run may use.",
    },
    Setting {
        name: "REAPER_WALL_LIMIT",
        old_names: &[],
        read_by: &[Binary::Worker],
        value: duration(SECOND, 15 * MINUTE),
        default: "`15m`",
        what: "The alarm's wall-clock limit.",
    },
    Setting {
        name: "REAPER_SUBREQUESTS",
        old_names: &[],
        read_by: &[Binary::Worker],
        value: Value::Count {
            min: 10,
            max: 10_000_000,
        },
        default: "by plan: `50` (free), `10000` (paid)",
        what: "The plan's subrequest limit per invocation.",
    },
    Setting {
        name: "REAPER_SUBREQUESTS_PER_RUN",
        old_names: &[],
        read_by: &[Binary::Worker],
        value: Value::Count {
            min: 1,
            max: 100_000,
        },
        default: "`36`",
        what: "D1 queries and sandboxd requests one run may make.",
    },
    Setting {
        name: "REAPER_ADMIN_TOKEN",
        old_names: &[],
        read_by: &[Binary::Worker],
        value: Value::Token,
        default: "none (admin routes off)",
        what: "Admits an operator to the Worker's admin routes.",
    },
];

/// The fewest characters a bearer token may have: shorter ones can be guessed.
pub const TOKEN_MIN_CHARS: usize = 16;

/// How to make a token every binary accepts; ends every [`TokenError`].
pub const TOKEN_ADVICE: &str = "a token is 16 or more printable ASCII characters without \
     spaces and nothing around it (no trailing newline); make one with `openssl rand -hex 32`";

/// What every token setting accepts, as the settings table shows it.
pub const TOKEN_ACCEPTED: &str = "a secret: 16 or more printable ASCII characters without \
     spaces, nothing around it (`openssl rand -hex 32`)";

/// What is wrong with a token's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenProblem {
    /// Whitespace before or after it: the header would carry it and never match, or a
    /// receiver would compare what the sender never sends.
    Padded,
    /// A space inside it.
    Space,
    /// A control or non-ASCII character: an HTTP header cannot carry it as is.
    Charset,
    /// Fewer than [`TOKEN_MIN_CHARS`] characters.
    TooShort {
        /// Its length.
        chars: usize,
    },
}

impl fmt::Display for TokenProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenProblem::Padded => {
                f.write_str("has whitespace before or after it (a newline stored with it?)")
            }
            TokenProblem::Space => f.write_str("contains a space"),
            TokenProblem::Charset => f.write_str("contains a control or non-ASCII character"),
            TokenProblem::TooShort { chars } => write!(f, "is too short (length {chars})"),
        }
    }
}

/// A token refused by [`check_token`]: one sentence naming the setting, what is wrong, and how
/// to make a good one, the same from every binary. It never repeats the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} {}", self.reason())]
pub struct TokenError {
    /// Where the value came from: the setting's name (or a file holding it).
    pub setting: String,
    /// What is wrong.
    pub problem: TokenProblem,
}

impl TokenError {
    /// The sentence after the setting's name, for a list that names the setting itself.
    pub fn reason(&self) -> String {
        format!("{}: {TOKEN_ADVICE}", self.problem)
    }
}

/// The one rule for every bearer token the reaper accepts or sends (`REAPER_STATUS_TOKEN`,
/// `REAPER_ADMIN_TOKEN`, `REAPER_SANDBOXD_TOKEN`, `CLOUDFLARE_SANDBOX_BRIDGE_TOKEN`, …): at least [`TOKEN_MIN_CHARS`] printable
/// ASCII characters, no space, nothing around it. Nothing is trimmed: a padded value is refused
/// rather than silently differing between the sender and the receiver. `setting` names the
/// value in the error.
///
/// ```
/// use reaper_core::settings::check_token;
///
/// assert!(check_token("REAPER_STATUS_TOKEN", "4f1c2a9be07d5e3c").is_ok());
/// let e = check_token("REAPER_STATUS_TOKEN", "hunter2\n").unwrap_err();
/// assert!(e.to_string().starts_with("REAPER_STATUS_TOKEN has whitespace before or after it"));
/// ```
pub fn check_token(setting: &str, value: &str) -> Result<(), TokenError> {
    let problem = if value.trim() != value {
        Some(TokenProblem::Padded)
    } else if value.contains(' ') {
        Some(TokenProblem::Space)
    } else if !value.bytes().all(|b| b.is_ascii_graphic()) {
        Some(TokenProblem::Charset)
    } else if value.len() < TOKEN_MIN_CHARS {
        Some(TokenProblem::TooShort { chars: value.len() })
    } else {
        None
    };
    match problem {
        Some(problem) => Err(TokenError {
            setting: setting.to_string(),
            problem,
        }),
        None => Ok(()),
    }
}

/// A token setting as read from the environment: unset or empty is `None` (templates spell an
/// unset optional value empty), anything else must pass [`check_token`].
pub fn read_token(setting: &str, value: Option<String>) -> Result<Option<String>, TokenError> {
    match value {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => check_token(setting, &v).map(|()| Some(v)),
    }
}

/// Looks a setting up in [`SETTINGS`] by its current name.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// A setting found under a name it no longer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// The name found in the environment.
    pub old: &'static str,
    /// The name to use instead.
    pub new: &'static str,
    /// The new name was set too, so the old one was ignored.
    pub ignored: bool,
}

impl fmt::Display for Renamed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is deprecated: rename it to {}", self.old, self.new)?;
        if self.ignored {
            write!(f, " ({} is also set and wins)", self.new)?;
        }
        Ok(())
    }
}

/// What [`lookup`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The value, from the current name if it is set, else from an old name.
    pub value: Option<String>,
    /// Set when an old name was in the environment: the warning to log once.
    pub renamed: Option<Renamed>,
}

/// Reads the setting `name` through `get`, falling back to its old names. The current name wins
/// when both are set (an empty value counts as unset, as templates spell it). Either way an old
/// name present is reported in [`Found::renamed`], so the deployment can be fixed.
///
/// # Panics
/// When `name` is not in [`SETTINGS`]: every name read must be registered.
pub fn lookup(name: &'static str, get: impl Fn(&str) -> Option<String>) -> Found {
    let spec = setting(name).unwrap_or_else(|| panic!("{name} is not in settings::SETTINGS"));
    let current = get(name);
    let is_set = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
    for &old in spec.old_names {
        let value = get(old);
        if is_set(&value) {
            let ignored = is_set(&current);
            return Found {
                value: if ignored { current } else { value },
                renamed: Some(Renamed {
                    old,
                    new: name,
                    ignored,
                }),
            };
        }
    }
    Found {
        value: current,
        renamed: None,
    }
}

/// `250ms`, `24d`: a bound in the largest unit that states it exactly (never rounded, so a
/// stated limit is the limit enforced).
pub fn show_ms(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(DAY, "d"), (HOUR, "h"), (MINUTE, "m"), (SECOND, "s")];
    for (size, unit) in UNITS {
        if ms >= size && ms.checked_rem(size) == Some(0) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// One exit code (or, for the hosted handlers, one outcome) of a binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// The binary.
    pub binary: Binary,
    /// The process exit code, or the HTTP status / invocation outcome of a hosted handler.
    pub code: &'static str,
    /// When it is given.
    pub meaning: &'static str,
}

/// What every binary's exit tells its caller (a shell, systemd, a scheduler, a monitor).
pub const EXITS: &[Exit] = &[
    Exit {
        binary: Binary::Cli,
        code: "0",
        meaning: "done (a sweep skipped because another holds the lease is done too)",
    },
    Exit {
        binary: Binary::Cli,
        code: "1",
        meaning: "bad usage or a bad setting; nothing was opened",
    },
    Exit {
        binary: Binary::Cli,
        code: "2",
        meaning: "something to look at: a run failed, a sandbox leaked, malformed run rows, a \
                  failed prune; `status --check`: unhealthy",
    },
    Exit {
        binary: Binary::Cli,
        code: "3",
        meaning: "could not run: the database is missing, foreign or damaged, the sandbox root \
                  unusable, the lease store or run listing failing",
    },
    Exit {
        binary: Binary::Sandboxd,
        code: "0",
        meaning: "stopped cleanly after SIGTERM or Ctrl-C",
    },
    Exit {
        binary: Binary::Sandboxd,
        code: "1",
        meaning: "the async runtime could not start",
    },
    Exit {
        binary: Binary::Sandboxd,
        code: "2",
        meaning: "bad usage or a bad value, or the daemon could not start or serve (no token, \
                  an unusable backend, the address in use)",
    },
    Exit {
        binary: Binary::Lambda,
        code: "success",
        meaning: "the sweep ran or was skipped because another holds the lease; the report is \
                  the result",
    },
    Exit {
        binary: Binary::Lambda,
        code: "function error",
        meaning: "bad settings, an unreachable lease store or damage: the invocation fails, so \
                  its alarm and retries see it",
    },
    Exit {
        binary: Binary::Vercel,
        code: "200",
        meaning: "the sweep ran or was skipped because another holds the lease; `?status`: \
                  healthy",
    },
    Exit {
        binary: Binary::Vercel,
        code: "401",
        meaning: "a missing or wrong bearer secret",
    },
    Exit {
        binary: Binary::Vercel,
        code: "404",
        meaning: "another path",
    },
    Exit {
        binary: Binary::Vercel,
        code: "405",
        meaning: "a method other than `GET` (`HEAD` too for `?status`)",
    },
    Exit {
        binary: Binary::Vercel,
        code: "500",
        meaning: "`CRON_SECRET` is not configured, the options are invalid, or the store is \
                  damaged",
    },
    Exit {
        binary: Binary::Vercel,
        code: "503",
        meaning: "the lease store cannot be reached; `?status`: unhealthy",
    },
    Exit {
        binary: Binary::Worker,
        code: "200",
        meaning: "a route answered; `/status`: healthy (the alarm's sweeps report in the logs \
                  and on `/status`)",
    },
    Exit {
        binary: Binary::Worker,
        code: "401",
        meaning: "a missing or wrong token on `/status` or the admin routes",
    },
    Exit {
        binary: Binary::Worker,
        code: "404",
        meaning: "another path",
    },
    Exit {
        binary: Binary::Worker,
        code: "405",
        meaning: "a method `/status` does not take",
    },
    Exit {
        binary: Binary::Worker,
        code: "500",
        meaning: "an admin route found the settings unusable",
    },
    Exit {
        binary: Binary::Worker,
        code: "503",
        meaning: "`/status`: unhealthy or the settings are unusable; the admin routes (and \
                  `/status` while neither token is set) when their token is not set or breaks \
                  the token rule",
    },
];

/// `SETTINGS.md`: every setting, who reads it, its range and default, the renamed ones, and
/// every binary's exit codes. A test keeps the file equal to this.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Settings\n\n\
         <!-- Generated by `reaper settings --all` from reaper_core::settings; a test fails when \
         they differ. -->\n\n\
         Every `REAPER_*` setting of every binary, and the Cloudflare Sandbox bridge's \
         (`CLOUDFLARE_SANDBOX_BRIDGE_*`, environment only: this repository ships the bridge). \
         One setting has one name, one unit and one range wherever it is read: durations are \
         written `250ms`, `30s`, `5m`, `2h`, `30d`, ranges are inclusive. The command line also \
         takes each `REAPER_*` one as a flag (`reaper settings` lists them); on Cloudflare they \
         are wrangler `[vars]`, secrets by `wrangler secret put`; hosted providers' keys (`DAYTONA_API_KEY`, `E2B_API_KEY`, `VERCEL_TOKEN`, …) are listed \
         in `shared/reaper-serverless/README.md`.\n\n\
         | Variable | Read by | Accepted | Default | What |\n\
         |---|---|---|---|---|\n",
    );
    for s in SETTINGS {
        let read_by: Vec<&str> = s.read_by.iter().map(|b| b.name()).collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            s.name,
            read_by.join(", "),
            s.value.accepted(),
            s.default,
            s.what
        ));
    }
    out.push_str(
        "\n## Renamed settings\n\n\
         The old names are still read, with a warning logged once, when the new name is unset; \
         when both are set the new name wins.\n\n\
         | Old name | New name |\n|---|---|\n",
    );
    for s in SETTINGS {
        for old in s.old_names {
            out.push_str(&format!("| `{old}` | `{}` |\n", s.name));
        }
    }
    out.push_str("\n## Exit codes\n");
    for binary in Binary::ALL {
        out.push_str(&format!("\n### {}\n\n", binary.name()));
        for e in EXITS.iter().filter(|e| e.binary == binary) {
            out.push_str(&format!("- `{}`: {}\n", e.code, e.meaning));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn an_old_name_alone_is_read_and_reported_as_renamed() {
        let found = lookup(EVENT_RETENTION, env(&[("REAPER_LOG_RETENTION", "7d")]));
        assert_eq!(found.value.as_deref(), Some("7d"));
        let renamed = found.renamed.unwrap();
        assert!(!renamed.ignored);
        assert_eq!(
            renamed.to_string(),
            "REAPER_LOG_RETENTION is deprecated: rename it to REAPER_EVENT_RETENTION"
        );
    }

    #[test]
    fn the_new_name_wins_when_both_are_set_and_the_old_one_is_still_reported() {
        let found = lookup(
            QUIET_WINDOW,
            env(&[("REAPER_QUIET_WINDOW", "2s"), ("REAPER_FENCE_QUIET", "9s")]),
        );
        assert_eq!(found.value.as_deref(), Some("2s"));
        let renamed = found.renamed.unwrap();
        assert!(renamed.ignored);
        assert!(renamed
            .to_string()
            .ends_with("(REAPER_QUIET_WINDOW is also set and wins)"));
    }

    #[test]
    fn an_empty_new_name_counts_as_unset_beside_an_old_one() {
        let found = lookup(
            EVERY,
            env(&[("REAPER_EVERY", ""), ("REAPER_INTERVAL", "5m")]),
        );
        assert_eq!(found.value.as_deref(), Some("5m"));
        assert!(!found.renamed.unwrap().ignored);
        let none = lookup(EVERY, env(&[("REAPER_EVERY", "")]));
        assert_eq!(
            none,
            Found {
                value: Some(String::new()),
                renamed: None
            }
        );
    }

    #[test]
    fn names_are_unique_and_no_old_name_is_a_current_one() {
        let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        names.extend(SETTINGS.iter().flat_map(|s| s.old_names.iter().copied()));
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "a name is used twice");
        // Every setting is the reaper's own: `REAPER_*`, or the Sandbox bridge's, whose server
        // this repository ships (other providers' keys are theirs, listed elsewhere).
        assert!(SETTINGS.iter().all(|s| (s.name.starts_with("REAPER_")
            || s.name.starts_with("CLOUDFLARE_SANDBOX_BRIDGE_"))
            && !s.read_by.is_empty()));
    }

    #[test]
    fn every_binary_has_exit_codes_and_every_range_is_ordered() {
        for binary in Binary::ALL {
            assert!(EXITS.iter().any(|e| e.binary == binary), "{binary:?}");
        }
        for s in SETTINGS {
            match s.value {
                Value::Duration { min_ms, max_ms } => assert!(min_ms <= max_ms, "{}", s.name),
                Value::Count { min, max } => assert!(min <= max, "{}", s.name),
                Value::Token | Value::Text(_) => {}
            }
        }
    }

    #[test]
    fn every_token_setting_uses_the_shared_token_rule() {
        let tokens: Vec<&str> = SETTINGS
            .iter()
            .filter(|s| s.value == Value::Token)
            .map(|s| s.name)
            .collect();
        assert_eq!(
            tokens,
            [
                "REAPER_SANDBOXD_TOKEN",
                "CLOUDFLARE_SANDBOX_BRIDGE_TOKEN",
                "REAPER_STATUS_TOKEN",
                "REAPER_ADMIN_TOKEN"
            ]
        );
        for s in SETTINGS {
            // A name that says token or secret is a token, unless it only points at one.
            let named_so = s.name.ends_with("_TOKEN") || s.name.ends_with("_SECRET");
            assert_eq!(named_so, s.value == Value::Token, "{}", s.name);
            if s.value == Value::Token {
                assert_eq!(s.value.accepted(), TOKEN_ACCEPTED);
            }
        }
    }

    #[test]
    fn a_token_is_refused_for_padding_spaces_odd_characters_or_shortness_in_one_sentence() {
        let refused = |v: &str| check_token("REAPER_X_TOKEN", v).unwrap_err();
        assert_eq!(
            refused("0123456789abcdef\n").to_string(),
            "REAPER_X_TOKEN has whitespace before or after it (a newline stored with it?): a \
             token is 16 or more printable ASCII characters without spaces and nothing around \
             it (no trailing newline); make one with `openssl rand -hex 32`"
        );
        assert_eq!(refused(" 0123456789abcdef").problem, TokenProblem::Padded);
        assert_eq!(refused("01234567 89abcdef").problem, TokenProblem::Space);
        assert_eq!(refused("0123456789abcdéf").problem, TokenProblem::Charset);
        assert_eq!(
            refused("0123\u{7}456789abcdef").problem,
            TokenProblem::Charset
        );
        assert_eq!(
            refused("0123456789abcde").problem,
            TokenProblem::TooShort { chars: 15 }
        );
        assert!(check_token("REAPER_X_TOKEN", "0123456789abcdef").is_ok());
        assert!(check_token("REAPER_X_TOKEN", "A+/=~!_-.0123456789").is_ok());
        assert!(
            !refused("hunter2").to_string().contains("hunter2"),
            "never the value"
        );
        assert_eq!(read_token("REAPER_X_TOKEN", Some(String::new())), Ok(None));
        assert_eq!(read_token("REAPER_X_TOKEN", None), Ok(None));
        assert!(read_token("REAPER_X_TOKEN", Some(" ".into())).is_err());
    }

    #[test]
    fn bounds_are_shown_in_the_unit_a_person_writes() {
        assert_eq!(show_ms(0), "0ms");
        assert_eq!(show_ms(10), "10ms");
        assert_eq!(show_ms(1000), "1s");
        assert_eq!(show_ms(3_600_000), "1h");
        assert_eq!(show_ms(DAY + 1), "86400001ms", "never rounded");
        assert_eq!(show_ms(3650 * DAY), "3650d");
    }
}
