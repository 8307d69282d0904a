//! Settings from the environment: one table ([`SETTINGS`]), one parser per kind of value, and
//! one error that names every problem at once (and never a secret's value).

use std::time::Duration;

use reaper_core::reap::{DEFAULT_MAX_RUNS, DEFAULT_RUN_BUDGET_MS, DEFAULT_STEP_TIMEOUT_MS};

use crate::credentials::{
    AwsCredentialsConfig, ACCESS_KEY_ID, DEFAULT_SESSION_NAME, ROLE_ARN, ROLE_SESSION_NAME,
    SECRET_ACCESS_KEY, SESSION_TOKEN, VERCEL_OIDC_TOKEN,
};

/// Which store holds the runs: `dynamodb` (the default) or `postgres`.
pub const STORE: &str = "REAPER_STORE";
/// The DynamoDB table holding runs, logs, leases and sandbox instances.
pub const TABLE: &str = "REAPER_TABLE";
/// The PostgreSQL URL (`REAPER_STORE=postgres`), read as the CLI reads it.
pub const DATABASE_URL: &str = reaper_postgres::DATABASE_URL_VAR;
/// The PostgreSQL password when the URL carries none (a secret).
pub const DATABASE_PASSWORD: &str = reaper_postgres::DATABASE_PASSWORD_VAR;
/// The providers one sweep serves (`sandboxd,daytona,e2b,vercel`).
pub const PROVIDERS: &str = reaper_providers::PROVIDERS_VAR;
/// Where `reaper-sandboxd` listens.
pub const SANDBOXD_URL: &str = "REAPER_SANDBOXD_URL";
/// The daemon's bearer token (a secret).
pub const SANDBOXD_TOKEN: &str = "REAPER_SANDBOXD_TOKEN";
/// The Secrets Manager secret holding the daemon's token, read at run time instead of
/// [`SANDBOXD_TOKEN`] (only the ARN is in the environment).
pub const SANDBOXD_TOKEN_SECRET_ARN: &str = "REAPER_SANDBOXD_TOKEN_SECRET_ARN";
/// How long a token read from Secrets Manager is used before it is read again.
pub const SECRET_CACHE_TTL: &str = "REAPER_SECRET_CACHE_TTL";
/// Five minutes: a rotation reaches every warm instance within this even without a 401.
pub const DEFAULT_SECRET_CACHE_TTL: Duration = Duration::from_secs(300);
pub const SANDBOX_PROVIDER_NAME: &str = "REAPER_SANDBOX_PROVIDER_NAME";
pub const DETACHED_TTL: &str = "REAPER_DETACHED_TTL";
pub const RUN_BUDGET: &str = "REAPER_RUN_BUDGET";
pub const MAX_RUNS: &str = "REAPER_MAX_RUNS";
pub const CONCURRENCY: &str = "REAPER_CONCURRENCY";
/// The cap on runs in flight by default; each sweep sizes its runs in flight within it from the
/// provider's latency, failures and documented rate limit, and the time left
/// ([`reaper_core::concurrency`]).
pub const DEFAULT_CONCURRENCY: usize = reaper_core::concurrency::DEFAULT_CAP;
/// The quiet window before a drive appends (formerly `REAPER_FENCE_QUIET`).
pub const QUIET_WINDOW: &str = reaper_core::settings::QUIET_WINDOW;
/// The deadline of one probe or one reclaim (the sandbox I/O around a drive).
pub const STEP_TIMEOUT: &str = "REAPER_STEP_TIMEOUT";
pub const JOURNAL_DIR: &str = "REAPER_JOURNAL_DIR";
pub const BUDGET: &str = "REAPER_BUDGET";
pub const DEADLINE_MARGIN: &str = "REAPER_DEADLINE_MARGIN";
pub const PER_RUN_RESERVE: &str = "REAPER_PER_RUN_RESERVE";
/// How long a finished run's delivery-log events are kept (formerly `REAPER_LOG_RETENTION`).
pub const EVENT_RETENTION: &str = reaper_core::settings::EVENT_RETENTION;

/// One environment variable: the documented table (`README.md`) is kept equal to this list by a
/// test, and the deploy templates' tidy tests check their variable names against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    pub required: bool,
    /// Never echoed in errors or logs.
    pub secret: bool,
    /// The default, as written in the table.
    pub default: &'static str,
    /// What values are accepted (also the last part of every error about it).
    pub accepted: &'static str,
}

/// Every setting [`ServerlessConfig::from_env`] reads.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: STORE,
        required: false,
        secret: false,
        default: "dynamodb",
        accepted: "the store holding the runs: dynamodb or postgres",
    },
    Setting {
        name: TABLE,
        required: false,
        secret: false,
        default: "",
        accepted: "a DynamoDB table name: 3 to 255 characters of A-Z a-z 0-9 _ - . (required while REAPER_STORE is dynamodb)",
    },
    Setting {
        name: DATABASE_URL,
        required: false,
        secret: false,
        default: "",
        accepted: "a PostgreSQL URL postgres://USER@HOST:PORT/DATABASE?sslmode=require (required while REAPER_STORE is postgres; Neon and Vercel Postgres: the unpooled URL); a host other than this machine only over TLS",
    },
    Setting {
        name: DATABASE_PASSWORD,
        required: false,
        secret: true,
        default: "",
        accepted: "the database password when the URL carries none",
    },
    Setting {
        name: PROVIDERS,
        required: false,
        secret: false,
        default: reaper_providers::DEFAULT_PROVIDERS,
        accepted: "the providers one sweep serves, comma-separated: sandboxd, daytona, e2b, vercel, sprites, cloudflare",
    },
    Setting {
        name: SANDBOXD_URL,
        required: false,
        secret: false,
        default: "",
        accepted: "the reaper-sandboxd base URL, http:// or https://, e.g. https://sandboxes.example.com (required while REAPER_PROVIDERS lists sandboxd)",
    },
    Setting {
        name: SANDBOXD_TOKEN,
        required: false,
        secret: true,
        default: "",
        accepted: reaper_core::settings::TOKEN_ACCEPTED,
    },
    Setting {
        name: SANDBOXD_TOKEN_SECRET_ARN,
        required: false,
        secret: false,
        default: "",
        accepted: "the ARN of the Secrets Manager secret holding the daemon's token, arn:aws:secretsmanager:<region>:<12-digit account>:secret:<name>, instead of REAPER_SANDBOXD_TOKEN",
    },
    Setting {
        name: SECRET_CACHE_TTL,
        required: false,
        secret: false,
        default: "5m",
        accepted: "a duration from 1s to 1h: how long a token read from Secrets Manager is used before it is read again (a 401 re-reads it at once)",
    },
    Setting {
        name: SANDBOX_PROVIDER_NAME,
        required: false,
        secret: false,
        default: reaper_http_sandbox::DEFAULT_PROVIDER_NAME,
        accepted: "the provider name in the sandbox instance records: 1 to 64 printable characters without spaces",
    },
    Setting {
        name: DETACHED_TTL,
        required: true,
        secret: false,
        default: "",
        accepted: "a duration from 1s to 3650d, e.g. 30m or 2h",
    },
    Setting {
        name: RUN_BUDGET,
        required: false,
        secret: false,
        default: "30s",
        accepted: "a duration from 10ms to 1h",
    },
    Setting {
        name: MAX_RUNS,
        required: false,
        secret: false,
        default: "25",
        accepted: "a whole number from 1 to 1000",
    },
    Setting {
        name: CONCURRENCY,
        required: false,
        secret: false,
        default: "32",
        accepted: "a whole number from 1 to 64: the cap on runs in flight, sized within it at run time",
    },
    Setting {
        name: QUIET_WINDOW,
        required: false,
        secret: false,
        default: "5s",
        accepted: "a duration from 0ms to 1m (formerly REAPER_FENCE_QUIET, still read with a warning)",
    },
    Setting {
        name: STEP_TIMEOUT,
        required: false,
        secret: false,
        default: "20s",
        accepted: "a duration from 100ms to 5m: how long one journal probe or one sandbox reclaim may take before it is abandoned (the probe answers unknown, the ledger retries the reclaim)",
    },
    Setting {
        name: JOURNAL_DIR,
        required: false,
        secret: false,
        default: reaper_core::journal::DEFAULT_JOURNAL_DIR,
        accepted: "an absolute directory path inside the sandboxes",
    },
    Setting {
        name: BUDGET,
        required: false,
        secret: false,
        default: "the platform's deadline",
        accepted: "a duration from 1s to 1h: the invocation budget when the platform gives no deadline (Vercel: equal to maxDuration); on Lambda the earlier of this and the invocation deadline wins",
    },
    Setting {
        name: DEADLINE_MARGIN,
        required: false,
        secret: false,
        default: "15s or a tenth of the budget, whichever is larger",
        accepted: "a duration from 0ms to 5m",
    },
    Setting {
        name: PER_RUN_RESERVE,
        required: false,
        secret: false,
        default: "the worst case of one run: 2 × the step timeout + 7 × the fence quiet window + the run budget + 2s (107s with the defaults)",
        accepted: "a duration from 1ms to 1h: the time one run may take in the worst case",
    },
    Setting {
        name: EVENT_RETENTION,
        required: false,
        secret: false,
        default: "30d",
        accepted: "a duration from 1h to 3650d (formerly REAPER_LOG_RETENTION, still read with a warning)",
    },
    Setting {
        name: ROLE_ARN,
        required: false,
        secret: false,
        default: "",
        accepted: "an IAM role ARN, arn:aws:iam::<12-digit account>:role/<name>: the role the OIDC stack creates (infra/aws/vercel-oidc.yaml, output RoleArn)",
    },
    Setting {
        name: ROLE_SESSION_NAME,
        required: false,
        secret: false,
        default: DEFAULT_SESSION_NAME,
        accepted: "2 to 64 characters of A-Z a-z 0-9 _ + = , . @ -",
    },
    Setting {
        name: VERCEL_OIDC_TOKEN,
        required: false,
        secret: true,
        default: "",
        accepted: "a Vercel OIDC token (a JWT) without surrounding whitespace; Vercel sets it",
    },
    Setting {
        name: ACCESS_KEY_ID,
        required: false,
        secret: true,
        default: "",
        accepted: "an AWS access key id without surrounding whitespace",
    },
    Setting {
        name: SECRET_ACCESS_KEY,
        required: false,
        secret: true,
        default: "",
        accepted: "the secret access key of AWS_ACCESS_KEY_ID, without surrounding whitespace",
    },
    Setting {
        name: SESSION_TOKEN,
        required: false,
        secret: true,
        default: "",
        accepted: "the session token of temporary keys, without surrounding whitespace",
    },
];

/// Looks a setting up in [`SETTINGS`].
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

pub use reaper_core::secret::Secret;
pub use reaper_core::settings::Renamed;

/// Everything a serverless sweep needs to know, validated. Its `Debug` masks credentials a
/// sandboxd URL may carry (`https://user:pass@host`), as the token is masked by [`Secret`].
#[derive(Clone, PartialEq, Eq)]
pub struct ServerlessConfig {
    /// Where the runs are (`REAPER_STORE`).
    pub store: StoreChoice,
    /// The DynamoDB table; empty with another store.
    pub table: String,
    /// The providers one sweep serves, in the order listed.
    pub providers: Vec<reaper_providers::ProviderKind>,
    /// The listed hosted providers' own settings (`DAYTONA_API_KEY`, ...), held as secrets.
    pub hosted: reaper_providers::HostedSettings,
    /// Empty unless `providers` lists sandboxd.
    pub sandboxd_url: String,
    /// Empty when the token is read from Secrets Manager.
    pub sandboxd_token: Secret,
    /// `REAPER_SANDBOXD_TOKEN_SECRET_ARN`: the token is read from this secret at run time.
    pub sandboxd_token_secret: Option<SecretSource>,
    pub provider_name: String,
    pub detached_ttl: Duration,
    pub run_budget: Duration,
    pub max_runs: usize,
    /// Runs in flight at once (`REAPER_CONCURRENCY`).
    pub concurrency: usize,
    pub fence_quiet: Duration,
    /// `REAPER_STEP_TIMEOUT`: the deadline of one probe and of one reclaim.
    pub step_timeout: Duration,
    pub journal_dir: Option<String>,
    /// `REAPER_BUDGET`: caps the invocation's time from its start.
    pub budget: Option<Duration>,
    pub deadline_margin: Option<Duration>,
    pub per_run_reserve: Option<Duration>,
    pub log_retention: Duration,
    /// How the DynamoDB store authenticates (`AWS_ROLE_ARN`, else `AWS_ACCESS_KEY_ID`, else the
    /// SDK's default chain).
    pub aws_credentials: AwsCredentialsConfig,
    /// Settings found under a deprecated name: the handler logs each once, at start-up.
    pub renamed: Vec<Renamed>,
}

impl std::fmt::Debug for ServerlessConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerlessConfig")
            .field("store", &self.store)
            .field("table", &self.table)
            .field("providers", &self.providers)
            .field("hosted", &self.hosted)
            .field(
                "sandboxd_url",
                &reaper_http_sandbox::redact_url(&self.sandboxd_url),
            )
            .field("sandboxd_token", &self.sandboxd_token)
            .field("sandboxd_token_secret", &self.sandboxd_token_secret)
            .field("provider_name", &self.provider_name)
            .field("detached_ttl", &self.detached_ttl)
            .field("run_budget", &self.run_budget)
            .field("max_runs", &self.max_runs)
            .field("concurrency", &self.concurrency)
            .field("fence_quiet", &self.fence_quiet)
            .field("step_timeout", &self.step_timeout)
            .field("journal_dir", &self.journal_dir)
            .field("budget", &self.budget)
            .field("deadline_margin", &self.deadline_margin)
            .field("per_run_reserve", &self.per_run_reserve)
            .field("log_retention", &self.log_retention)
            .field("aws_credentials", &self.aws_credentials)
            .field("renamed", &self.renamed)
            .finish()
    }
}

/// The store the runs are in.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// `REAPER_STORE=dynamodb` (the default): the table of `REAPER_TABLE`.
    DynamoDb,
    /// `REAPER_STORE=postgres`: the database of `REAPER_DATABASE_URL`, its password from the URL
    /// or `REAPER_DATABASE_PASSWORD`, tables in schema `reaper`.
    Postgres {
        url: String,
        password: Option<Secret>,
    },
}

impl StoreChoice {
    /// `dynamodb` or `postgres`, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreChoice::DynamoDb => "dynamodb",
            StoreChoice::Postgres { .. } => "postgres",
        }
    }

    /// The PostgreSQL options, read as the CLI reads them; `None` for DynamoDB.
    pub fn postgres_options(&self) -> Option<reaper_postgres::PostgresOptions> {
        match self {
            StoreChoice::DynamoDb => None,
            StoreChoice::Postgres { url, password } => {
                Some(reaper_postgres::PostgresOptions::new(url).with_password(password.clone()))
            }
        }
    }
}

impl std::fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreChoice::DynamoDb => f.write_str("DynamoDb"),
            // The URL may carry the password: shown masked.
            StoreChoice::Postgres { url, password } => f
                .debug_struct("Postgres")
                .field("url", &reaper_http_sandbox::redact_url(url))
                .field("password", password)
                .finish(),
        }
    }
}

/// Where the sandboxd token is read at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSource {
    /// The secret's ARN: the only thing about it in the environment.
    pub arn: String,
    /// How long a value read is used before it is read again.
    pub cache_ttl: Duration,
}

impl ServerlessConfig {
    /// Whether the deployment calls AWS at all: DynamoDB, or Secrets Manager for the token.
    pub fn uses_aws(&self) -> bool {
        self.store == StoreChoice::DynamoDb || self.sandboxd_token_secret.is_some()
    }
}

/// One setting that was missing or wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingProblem {
    pub name: &'static str,
    /// `None` when the value is secret (or absent).
    pub value: Option<String>,
    pub problem: String,
    pub accepted: &'static str,
}

impl std::fmt::Display for SettingProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={v:?} {}", self.name, self.problem)?,
            None => write!(f, "{} {}", self.name, self.problem)?,
        }
        write!(f, " (accepted: {})", self.accepted)
    }
}

/// The configuration cannot work. Lists every problem, so one deploy fixes them all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {}", list(.problems))]
pub struct ConfigError {
    pub problems: Vec<SettingProblem>,
}

fn list(problems: &[SettingProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ConfigError {
    /// Whether `name` is among the problems.
    pub fn names(&self, name: &str) -> bool {
        self.problems.iter().any(|p| p.name == name)
    }
}

/// Reads settings through `get`, collecting problems instead of stopping at the first.
struct Reader<G> {
    get: G,
    problems: Vec<SettingProblem>,
    /// Old names found in the environment (for the deprecation warnings).
    renamed: Vec<Renamed>,
    /// Settings whose value came from an old name: (current name, old name).
    read_as: Vec<(&'static str, &'static str)>,
}

impl<G: Fn(&str) -> Option<String>> Reader<G> {
    fn raw(&mut self, name: &'static str) -> Option<String> {
        let spec = setting(name).expect("every setting read is in SETTINGS");
        let value = if reaper_core::settings::setting(name).is_some() {
            // A renamed setting is still read under its old name, reported for a warning.
            let found = reaper_core::settings::lookup(name, &self.get);
            if let Some(renamed) = found.renamed {
                if !renamed.ignored {
                    self.read_as.push((name, renamed.old));
                }
                self.renamed.push(renamed);
            }
            found.value
        } else {
            (self.get)(name)
        };
        match value {
            // An empty variable is how templates spell "unset" for an optional parameter.
            Some(v) if !v.is_empty() => Some(v),
            Some(_) if spec.required => {
                self.fail(name, None, "is empty".into());
                None
            }
            None if spec.required => {
                self.fail(name, None, "is not set".into());
                None
            }
            _ => None,
        }
    }

    fn is_set(&self, name: &str) -> bool {
        (self.get)(name).is_some_and(|v| !v.is_empty())
    }

    fn fail(&mut self, name: &'static str, value: Option<&str>, problem: String) {
        let spec = setting(name).expect("every setting read is in SETTINGS");
        // A value read under a setting's old name is reported under that name: it is the one
        // in the deployment to fix.
        let shown = self
            .read_as
            .iter()
            .find(|(new, _)| *new == name)
            .map_or(name, |(_, old)| *old);
        self.problems.push(SettingProblem {
            name: shown,
            value: if spec.secret {
                None
            } else if name == SANDBOXD_URL || name == DATABASE_URL {
                // A URL may carry credentials: say what was wrong without repeating them.
                value.map(reaper_http_sandbox::redact_url)
            } else {
                value.map(str::to_string)
            },
            problem,
            accepted: spec.accepted,
        });
    }

    fn string(
        &mut self,
        name: &'static str,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Option<String> {
        let value = self.raw(name)?;
        match check(&value) {
            Ok(()) => Some(value),
            Err(problem) => {
                self.fail(name, Some(&value), problem);
                None
            }
        }
    }

    /// A duration within the range [`reaper_core::settings`] gives `name`, the same wherever it
    /// is read.
    fn duration(&mut self, name: &'static str) -> Option<Duration> {
        let (min, max) = reaper_core::settings::setting(name)
            .and_then(reaper_core::settings::Setting::duration_ms)
            .map(|(min, max)| (Duration::from_millis(min), Duration::from_millis(max)))
            .expect("every duration is registered in reaper_core::settings");
        let value = self.raw(name)?;
        let parsed = match humantime::parse_duration(value.trim()) {
            Ok(d) => d,
            Err(e) => {
                self.fail(name, Some(&value), format!("is not a duration ({e})"));
                return None;
            }
        };
        if parsed < min || parsed > max {
            self.fail(name, Some(&value), "is out of range".into());
            return None;
        }
        Some(parsed)
    }

    /// A whole number within the range [`reaper_core::settings`] gives `name`.
    fn count(&mut self, name: &'static str) -> Option<usize> {
        let (min, max) = reaper_core::settings::setting(name)
            .and_then(reaper_core::settings::Setting::count)
            .map(|(min, max)| (min as usize, max as usize))
            .expect("every count is registered in reaper_core::settings");
        let value = self.raw(name)?;
        match value.trim().parse::<usize>() {
            Ok(n) if (min..=max).contains(&n) => Some(n),
            Ok(_) => {
                self.fail(name, Some(&value), "is out of range".into());
                None
            }
            Err(_) => {
                self.fail(name, Some(&value), "is not a whole number".into());
                None
            }
        }
    }
}

fn check_table(v: &str) -> Result<(), String> {
    if !(3..=255).contains(&v.len()) {
        return Err(format!("has {} characters", v.len()));
    }
    if let Some(c) = v
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!("contains {c:?}"));
    }
    Ok(())
}

fn check_url(v: &str) -> Result<(), String> {
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .ok_or("does not start with http:// or https://")?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("has no host".into());
    }
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("contains whitespace".into());
    }
    Ok(())
}

fn check_bare_secret(v: &str) -> Result<(), String> {
    if v.trim() != v {
        return Err(
            "has leading or trailing whitespace (a newline stored with the secret?)".into(),
        );
    }
    if !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("contains spaces, control or non-ASCII characters".into());
    }
    Ok(())
}

fn check_password(v: &str) -> Result<(), String> {
    if v.trim() != v {
        return Err(
            "has leading or trailing whitespace (a newline stored with the secret?)".into(),
        );
    }
    if v.chars().any(char::is_control) {
        return Err("contains control characters".into());
    }
    Ok(())
}

fn check_name(v: &str) -> Result<(), String> {
    if v.len() > 64 || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("is not 1 to 64 printable characters without spaces".into());
    }
    Ok(())
}

fn check_dir(v: &str) -> Result<(), String> {
    if !v.starts_with('/') {
        return Err("is not an absolute path".into());
    }
    if v.chars().any(|c| c == '\0' || c == '\n' || c == '\r') {
        return Err("contains a NUL or newline".into());
    }
    Ok(())
}

fn check_role_arn(v: &str) -> Result<(), String> {
    let parts: Vec<&str> = v.splitn(6, ':').collect();
    let well_formed = matches!(parts.as_slice(),
        ["arn", partition, "iam", "", account, resource]
            if partition.starts_with("aws")
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && resource.strip_prefix("role/").is_some_and(|name| !name.is_empty())
                && !resource.contains(char::is_whitespace));
    if well_formed {
        Ok(())
    } else {
        Err("is not an IAM role ARN".into())
    }
}

fn check_session_name(v: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c);
    if !(2..=64).contains(&v.len()) || !v.chars().all(allowed) {
        return Err("is not a valid STS session name".into());
    }
    Ok(())
}

/// `REAPER_STORE`'s two values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    DynamoDb,
    Postgres,
}

fn check_secret_arn(v: &str) -> Result<(), String> {
    let parts: Vec<&str> = v.splitn(7, ':').collect();
    let well_formed = matches!(parts.as_slice(),
        ["arn", partition, "secretsmanager", region, account, "secret", name]
            if partition.starts_with("aws")
                && !region.is_empty()
                && account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_graphic()));
    if well_formed {
        Ok(())
    } else {
        Err("is not a Secrets Manager secret ARN".into())
    }
}

impl<G: Fn(&str) -> Option<String>> Reader<G> {
    /// `REAPER_STORE`, DynamoDB when unset.
    fn store_kind(&mut self) -> Option<StoreKind> {
        let Some(value) = self.raw(STORE) else {
            return Some(StoreKind::DynamoDb);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "dynamodb" => Some(StoreKind::DynamoDb),
            "postgres" | "postgresql" => Some(StoreKind::Postgres),
            _ => {
                self.fail(
                    STORE,
                    Some(&value),
                    "is not a store this handler knows".into(),
                );
                None
            }
        }
    }

    /// `REAPER_DATABASE_URL` and `REAPER_DATABASE_PASSWORD`, checked as the store checks them
    /// before connecting (a remote host without TLS is refused here, at start-up).
    fn postgres(&mut self) -> Option<StoreChoice> {
        let Some(url) = self.raw(DATABASE_URL) else {
            self.fail(
                DATABASE_URL,
                None,
                format!("is not set, and {STORE} is postgres"),
            );
            return None;
        };
        if !reaper_postgres::is_postgres_url(&url) {
            self.fail(
                DATABASE_URL,
                Some(&url),
                "does not start with postgres:// or postgresql://".into(),
            );
            return None;
        }
        let password = self.string(DATABASE_PASSWORD, check_password);
        let options = reaper_postgres::PostgresOptions::from_settings(&url, &self.get);
        if let Err(e) = options.check() {
            self.fail(DATABASE_URL, Some(&url), format!("cannot be used: {e}"));
            return None;
        }
        Some(StoreChoice::Postgres {
            url,
            password: password.map(Secret::new),
        })
    }

    /// `REAPER_PROVIDERS`, sandboxd alone when unset.
    fn providers(&mut self) -> Vec<reaper_providers::ProviderKind> {
        let value = self.raw(PROVIDERS);
        match reaper_providers::parse(value.as_deref()) {
            Ok(kinds) => kinds,
            Err(e) => {
                self.fail(PROVIDERS, value.as_deref(), e.to_string());
                Vec::new()
            }
        }
    }

    /// `AWS_ROLE_ARN` wins; keys count only without it (they are not even read then); neither
    /// leaves the SDK's default chain.
    fn aws_credentials(&mut self) -> Option<AwsCredentialsConfig> {
        if self.is_set(ROLE_ARN) {
            let role_arn = self.string(ROLE_ARN, check_role_arn);
            let session_name = self.string(ROLE_SESSION_NAME, check_session_name);
            let env_token = self.string(VERCEL_OIDC_TOKEN, check_bare_secret);
            return Some(AwsCredentialsConfig::WebIdentity {
                role_arn: role_arn?,
                session_name: session_name.unwrap_or_else(|| DEFAULT_SESSION_NAME.into()),
                env_token: env_token.map(Secret::new),
            });
        }
        if !self.is_set(ACCESS_KEY_ID) {
            return Some(AwsCredentialsConfig::DefaultChain);
        }
        let access_key_id = self.string(ACCESS_KEY_ID, check_bare_secret);
        let secret_access_key = self.string(SECRET_ACCESS_KEY, check_bare_secret);
        let session_token = self.string(SESSION_TOKEN, check_bare_secret);
        if !self.is_set(SECRET_ACCESS_KEY) {
            self.fail(
                SECRET_ACCESS_KEY,
                None,
                format!("is not set, but {ACCESS_KEY_ID} is"),
            );
        }
        Some(AwsCredentialsConfig::StaticKeys {
            access_key_id: Secret::new(access_key_id?),
            secret_access_key: Secret::new(secret_access_key?),
            session_token: session_token.map(Secret::new),
        })
    }
}

impl ServerlessConfig {
    /// Reads every setting of [`SETTINGS`] through `get` (`|k| std::env::var(k).ok()` in a
    /// handler). An empty value counts as unset. Fails with every problem found, each naming
    /// its variable, what was wrong and what is accepted; a secret's value is never repeated.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut r = Reader {
            get,
            problems: Vec::new(),
            renamed: Vec::new(),
            read_as: Vec::new(),
        };
        let store_kind = r.store_kind();
        let table = r.string(TABLE, check_table);
        if store_kind == Some(StoreKind::DynamoDb) && !r.is_set(TABLE) {
            let problem = match (r.get)(TABLE) {
                Some(_) => "is empty",
                None => "is not set",
            };
            r.fail(TABLE, None, problem.into());
        }
        let store = match store_kind {
            Some(StoreKind::Postgres) => r.postgres(),
            Some(StoreKind::DynamoDb) => Some(StoreChoice::DynamoDb),
            None => None,
        };
        let providers = r.providers();
        let hosted = reaper_providers::HostedSettings::capture(&providers, &r.get);
        for kind in &providers {
            if let Err(e) = reaper_providers::check_hosted(*kind, |n| hosted.get(n)) {
                r.fail(PROVIDERS, None, e.to_string());
            }
        }
        let sandboxd = providers.contains(&reaper_providers::ProviderKind::Sandboxd);
        let sandboxd_url = r.string(SANDBOXD_URL, check_url);
        let sandboxd_token = r.string(SANDBOXD_TOKEN, |v| {
            reaper_core::settings::check_token(SANDBOXD_TOKEN, v).map_err(|e| e.reason())
        });
        let token_secret_arn = r.string(SANDBOXD_TOKEN_SECRET_ARN, check_secret_arn);
        let secret_cache_ttl = r.duration(SECRET_CACHE_TTL);
        if sandboxd {
            if !r.is_set(SANDBOXD_URL) {
                r.fail(
                    SANDBOXD_URL,
                    None,
                    format!("is not set, and {PROVIDERS} lists sandboxd"),
                );
            }
            match (
                r.is_set(SANDBOXD_TOKEN),
                r.is_set(SANDBOXD_TOKEN_SECRET_ARN),
            ) {
                (false, false) => r.fail(
                    SANDBOXD_TOKEN,
                    None,
                    format!(
                        "is not set, and {PROVIDERS} lists sandboxd (or set \
                         {SANDBOXD_TOKEN_SECRET_ARN} to read it from Secrets Manager)"
                    ),
                ),
                // Either would do; both mean a token value still sits in the environment.
                (true, true) => r.fail(
                    SANDBOXD_TOKEN,
                    None,
                    format!(
                        "is set together with {SANDBOXD_TOKEN_SECRET_ARN}: keep the token in \
                         Secrets Manager only and remove {SANDBOXD_TOKEN} from the environment"
                    ),
                ),
                _ => {}
            }
        }
        let provider_name = r.string(SANDBOX_PROVIDER_NAME, check_name);
        let detached_ttl = r.duration(DETACHED_TTL);
        let run_budget = r.duration(RUN_BUDGET);
        let max_runs = r.count(MAX_RUNS);
        let concurrency = r.count(CONCURRENCY);
        let fence_quiet = r.duration(QUIET_WINDOW);
        let step_timeout = r.duration(STEP_TIMEOUT);
        let journal_dir = r.string(JOURNAL_DIR, check_dir);
        let budget = r.duration(BUDGET);
        let deadline_margin = r.duration(DEADLINE_MARGIN);
        let per_run_reserve = r.duration(PER_RUN_RESERVE);
        let log_retention = r.duration(EVENT_RETENTION);
        let aws_credentials = r.aws_credentials();
        // Read once per cold start, so each old name is warned about once per instance.
        for renamed in &r.renamed {
            tracing::warn!(old = renamed.old, new = renamed.new, "{renamed}");
        }
        if !r.problems.is_empty() {
            return Err(ConfigError {
                problems: r.problems,
            });
        }
        let (Some(store), Some(detached_ttl), Some(aws_credentials)) =
            (store, detached_ttl, aws_credentials)
        else {
            unreachable!(
                "a missing required setting or a bad credential setting is a problem above"
            );
        };
        let (sandboxd_url, sandboxd_token) = if sandboxd {
            (
                sandboxd_url.unwrap_or_default(),
                sandboxd_token.unwrap_or_default(),
            )
        } else {
            (String::new(), String::new())
        };
        let sandboxd_token_secret = match token_secret_arn {
            Some(arn) if sandboxd => Some(SecretSource {
                arn,
                cache_ttl: secret_cache_ttl.unwrap_or(DEFAULT_SECRET_CACHE_TTL),
            }),
            _ => None,
        };
        let table = match store {
            StoreChoice::DynamoDb => table.unwrap_or_default(),
            StoreChoice::Postgres { .. } => String::new(),
        };
        Ok(ServerlessConfig {
            renamed: r.renamed,
            store,
            table,
            providers,
            hosted,
            sandboxd_url,
            sandboxd_token: Secret::new(sandboxd_token),
            sandboxd_token_secret,
            provider_name: provider_name
                .unwrap_or_else(|| reaper_http_sandbox::DEFAULT_PROVIDER_NAME.into()),
            detached_ttl,
            run_budget: run_budget.unwrap_or(Duration::from_millis(DEFAULT_RUN_BUDGET_MS)),
            max_runs: max_runs.unwrap_or(DEFAULT_MAX_RUNS),
            concurrency: concurrency.unwrap_or(DEFAULT_CONCURRENCY),
            fence_quiet: fence_quiet.unwrap_or(Duration::from_millis(
                reaper_core::claim::DEFAULT_FENCE_QUIET_MS,
            )),
            step_timeout: step_timeout.unwrap_or(Duration::from_millis(DEFAULT_STEP_TIMEOUT_MS)),
            journal_dir,
            budget,
            deadline_margin,
            per_run_reserve,
            log_retention: log_retention.unwrap_or(reaper_dynamodb::DEFAULT_LOG_RETENTION),
            aws_credentials,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const TOKEN: &str = "s3cr3t-t0ken-value";

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn minimal() -> Vec<(&'static str, &'static str)> {
        vec![
            (TABLE, "reaper-runs"),
            (SANDBOXD_URL, "https://sandboxes.example.com"),
            (SANDBOXD_TOKEN, TOKEN),
            (DETACHED_TTL, "30m"),
        ]
    }

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut pairs = minimal();
        for (k, v) in extra {
            pairs.retain(|(name, _)| name != k);
            pairs.push((k, v));
        }
        pairs
    }

    fn error_for(pairs: &[(&str, &str)]) -> ConfigError {
        ServerlessConfig::from_env(env(pairs)).expect_err("the configuration must be refused")
    }

    /// Runs `f` with a subscriber writing warnings into the returned text.
    fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let out = tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        (out, text)
    }

    #[test]
    fn the_old_fence_quiet_and_log_retention_names_are_read_with_one_warning_each() {
        let (c, log) = logged(|| {
            ServerlessConfig::from_env(env(&with(&[
                ("REAPER_FENCE_QUIET", "3s"),
                ("REAPER_LOG_RETENTION", "7d"),
            ])))
            .unwrap()
        });
        assert_eq!(c.fence_quiet, Duration::from_secs(3));
        assert_eq!(c.log_retention, Duration::from_secs(7 * 24 * 3600));
        let olds: Vec<_> = c.renamed.iter().map(|r| r.old).collect();
        assert_eq!(olds, ["REAPER_FENCE_QUIET", "REAPER_LOG_RETENTION"]);
        for (old, new) in [
            ("REAPER_FENCE_QUIET", QUIET_WINDOW),
            ("REAPER_LOG_RETENTION", EVENT_RETENTION),
        ] {
            let line = format!("{old} is deprecated: rename it to {new}");
            assert_eq!(log.matches(&line).count(), 1, "{log}");
        }
    }

    #[test]
    fn the_new_setting_name_wins_over_its_old_name_and_both_are_warned_about() {
        let (c, log) = logged(|| {
            ServerlessConfig::from_env(env(&with(&[
                (QUIET_WINDOW, "1s"),
                ("REAPER_FENCE_QUIET", "not even a duration"),
            ])))
            .unwrap()
        });
        assert_eq!(c.fence_quiet, Duration::from_secs(1));
        assert!(
            log.contains("(REAPER_QUIET_WINDOW is also set and wins)"),
            "{log}"
        );
    }

    #[test]
    fn a_bad_value_under_an_old_name_is_reported_under_that_name() {
        let e = error_for(&with(&[("REAPER_FENCE_QUIET", "5m")]));
        assert_eq!(e.problems[0].name, "REAPER_FENCE_QUIET", "{e}");
        assert!(e.to_string().contains("is out of range"), "{e}");
    }

    #[test]
    fn every_setting_is_registered_for_lambda_and_vercel_with_the_range_stated_here() {
        use reaper_core::settings::{Binary, Value, SETTINGS as REGISTRY};
        let ours: Vec<&str> = SETTINGS
            .iter()
            .map(|s| s.name)
            .filter(|n| n.starts_with("REAPER_"))
            .collect();
        // The bridge's, read by the cloudflare provider when the providers list it.
        let bridge = reaper_providers::ProviderKind::Cloudflare.variables();
        let registered: Vec<&str> = REGISTRY
            .iter()
            .filter(|s| s.is_read_by(Binary::Lambda) || s.is_read_by(Binary::Vercel))
            .map(|s| s.name)
            .filter(|n| *n != "REAPER_STATUS_TOKEN" && *n != "REAPER_METRICS_NAMESPACE")
            .collect();
        let (mut a, mut b) = (ours.clone(), registered.clone());
        a.extend(bridge);
        a.sort();
        b.sort();
        assert_eq!(
            a, b,
            "reaper-serverless's SETTINGS and reaper_core::settings differ"
        );
        for name in ours {
            let spec = reaper_core::settings::setting(name).unwrap();
            let accepted = setting(name).unwrap().accepted;
            let stated = match spec.value {
                Value::Duration { min_ms, max_ms } => format!(
                    "from {} to {}",
                    reaper_core::settings::show_ms(min_ms),
                    reaper_core::settings::show_ms(max_ms)
                ),
                Value::Count { min, max } => format!("from {min} to {max}"),
                Value::Token => reaper_core::settings::TOKEN_ACCEPTED.to_string(),
                Value::Text(_) => continue,
            };
            assert!(
                accepted.contains(&stated),
                "{name}: {accepted:?} should say {stated:?}"
            );
        }
    }

    #[test]
    fn an_unset_provider_list_serves_sandboxd_alone() {
        let c = ServerlessConfig::from_env(env(&minimal())).unwrap();
        assert_eq!(c.providers, [reaper_providers::ProviderKind::Sandboxd]);
    }

    #[test]
    fn hosted_providers_alone_need_no_sandboxd_settings_and_keep_their_keys_secret() {
        let c = ServerlessConfig::from_env(env(&[
            (TABLE, "reaper-runs"),
            (DETACHED_TTL, "30m"),
            (PROVIDERS, "daytona,e2b"),
            ("DAYTONA_API_KEY", "dtn_S3CR3T_0123"),
            ("E2B_API_KEY", "e2b_S3CR3T_0123"),
        ]))
        .unwrap();
        assert_eq!(
            c.providers,
            [
                reaper_providers::ProviderKind::Daytona,
                reaper_providers::ProviderKind::E2b
            ]
        );
        assert_eq!(c.sandboxd_url, "");
        let shown = format!("{c:?}");
        assert!(
            shown.contains("DAYTONA_API_KEY") && !shown.contains("S3CR3T"),
            "{shown}"
        );
        let set = crate::compose::providers(&c).unwrap();
        assert_eq!(set.names().collect::<Vec<_>>(), ["daytona", "e2b"]);
    }

    #[test]
    fn sandboxd_listed_without_its_url_and_token_is_refused_naming_both() {
        let e = error_for(&[
            (TABLE, "reaper-runs"),
            (DETACHED_TTL, "30m"),
            (PROVIDERS, "sandboxd,vercel-sandbox"),
            ("VERCEL_TOKEN", "vcp_0123456789"),
        ]);
        assert!(e.names(SANDBOXD_URL) && e.names(SANDBOXD_TOKEN), "{e}");
        assert!(e.to_string().contains("lists sandboxd"), "{e}");
    }

    #[test]
    fn a_bad_cloudflare_bridge_token_is_refused_with_the_sentence_every_binary_gives() {
        let bridge = reaper_providers::CLOUDFLARE_BRIDGE_TOKEN_VAR;
        for bad in [
            "short-token",
            "0123456789abcdef-token\n",
            "0123456789abcdef token",
        ] {
            let e = error_for(&[
                (TABLE, "reaper-runs"),
                (DETACHED_TTL, "30m"),
                (PROVIDERS, "cloudflare"),
                (
                    "CLOUDFLARE_SANDBOX_BRIDGE_URL",
                    "https://bridge.example.workers.dev",
                ),
                (bridge, bad),
            ]);
            let sentence = reaper_core::settings::check_token(bridge, bad)
                .unwrap_err()
                .to_string();
            assert_eq!(e.problems.len(), 1, "{e}");
            assert!(e.problems[0].to_string().contains(&sentence), "{e}");
        }
        let c = ServerlessConfig::from_env(env(&[
            (TABLE, "reaper-runs"),
            (DETACHED_TTL, "30m"),
            (PROVIDERS, "cloudflare"),
            (
                "CLOUDFLARE_SANDBOX_BRIDGE_URL",
                "https://bridge.example.workers.dev",
            ),
            (bridge, "0123456789abcdef-token"),
        ]));
        assert!(c.is_ok(), "{c:?}");
    }

    #[test]
    fn a_listed_provider_without_its_key_or_an_unknown_one_is_refused_with_the_rest() {
        let e = error_for(&with(&[(PROVIDERS, "sandboxd,daytona"), (MAX_RUNS, "0")]));
        assert!(e.names(PROVIDERS) && e.names(MAX_RUNS), "{e}");
        assert!(e.to_string().contains("DAYTONA_API_KEY"), "{e}");
        let unknown = error_for(&with(&[(PROVIDERS, "sandboxd,modal")]));
        assert!(unknown.to_string().contains("\"modal\""), "{unknown}");
    }

    #[test]
    fn credentials_in_the_sandboxd_url_are_in_neither_the_debug_output_nor_an_error() {
        let c = ServerlessConfig::from_env(env(&with(&[(
            SANDBOXD_URL,
            "https://admin:hunter2@sandboxes.example.com",
        )])))
        .unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("admin"),
            "{shown}"
        );
        assert!(shown.contains("sandboxes.example.com"), "{shown}");
        let refused = error_for(&with(&[(SANDBOXD_URL, "https://admin:hunter2@ bad host")]));
        let message = refused.to_string();
        assert!(message.contains(SANDBOXD_URL), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn the_four_required_settings_suffice_and_the_rest_take_their_documented_defaults() {
        let c = ServerlessConfig::from_env(env(&minimal())).unwrap();
        assert_eq!(c.table, "reaper-runs");
        assert_eq!(c.sandboxd_token.expose(), TOKEN);
        assert_eq!(c.detached_ttl, Duration::from_secs(1800));
        assert_eq!(c.run_budget, Duration::from_secs(30));
        assert_eq!(c.max_runs, 25);
        assert_eq!(c.fence_quiet, Duration::from_secs(5));
        assert_eq!(c.step_timeout, Duration::from_secs(20));
        assert_eq!(c.provider_name, "sandboxd");
        assert_eq!(c.journal_dir, None);
        assert_eq!(c.log_retention, Duration::from_secs(30 * 24 * 3600));
        assert_eq!(
            (c.budget, c.deadline_margin, c.per_run_reserve),
            (None, None, None)
        );
    }

    #[test]
    fn optional_settings_are_parsed_as_humantime_durations_and_numbers() {
        let c = ServerlessConfig::from_env(env(&with(&[
            (RUN_BUDGET, "2s"),
            (MAX_RUNS, "7"),
            (CONCURRENCY, "12"),
            (QUIET_WINDOW, "150ms"),
            (STEP_TIMEOUT, "45s"),
            (JOURNAL_DIR, "/var/journals"),
            (BUDGET, "5m"),
            (DEADLINE_MARGIN, "3s"),
            (PER_RUN_RESERVE, "40s"),
            (EVENT_RETENTION, "7d"),
            (SANDBOX_PROVIDER_NAME, "edge-daemon"),
        ])))
        .unwrap();
        assert_eq!(c.run_budget, Duration::from_secs(2));
        assert_eq!(c.max_runs, 7);
        assert_eq!(c.concurrency, 12);
        assert_eq!(c.fence_quiet, Duration::from_millis(150));
        assert_eq!(c.step_timeout, Duration::from_secs(45));
        assert_eq!(c.journal_dir.as_deref(), Some("/var/journals"));
        assert_eq!(c.budget, Some(Duration::from_secs(300)));
        assert_eq!(c.deadline_margin, Some(Duration::from_secs(3)));
        assert_eq!(c.per_run_reserve, Some(Duration::from_secs(40)));
        assert_eq!(c.log_retention, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(c.provider_name, "edge-daemon");
    }

    #[test]
    fn runs_in_flight_default_to_four_and_stay_within_one_to_sixty_four() {
        let c = ServerlessConfig::from_env(env(&minimal())).unwrap();
        assert_eq!(c.concurrency, DEFAULT_CONCURRENCY);
        for bad in ["0", "65", "many"] {
            let e = error_for(&with(&[(CONCURRENCY, bad)]));
            assert!(e.names(CONCURRENCY), "{bad}: {e}");
        }
        let p = crate::plan(&c, "me", 0, 300_000);
        assert_eq!(p.options.concurrency, DEFAULT_CONCURRENCY);
    }

    #[test]
    fn an_empty_environment_names_every_required_setting_in_one_error() {
        let e = error_for(&[]);
        let names: Vec<_> = e.problems.iter().map(|p| p.name).collect();
        assert_eq!(names, [TABLE, SANDBOXD_URL, SANDBOXD_TOKEN, DETACHED_TTL]);
        let text = e.to_string();
        assert!(
            text.starts_with(
                "invalid configuration: REAPER_TABLE is not set (accepted: a DynamoDB table name"
            ),
            "{text}"
        );
        assert!(
            text.contains("REAPER_DETACHED_TTL is not set (accepted: a duration from 1s to 3650d"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_required_value_is_reported_as_empty() {
        let e = error_for(&with(&[(TABLE, "")]));
        assert_eq!(e.problems.len(), 1);
        assert_eq!(e.problems[0].problem, "is empty");
    }

    #[test]
    fn a_bad_duration_names_the_variable_the_value_and_what_is_accepted() {
        let e = error_for(&with(&[(DETACHED_TTL, "soon")]));
        assert!(e.names(DETACHED_TTL));
        let text = e.to_string();
        assert!(
            text.contains("REAPER_DETACHED_TTL=\"soon\" is not a duration"),
            "{text}"
        );
        assert!(
            text.contains("accepted: a duration from 1s to 3650d, e.g. 30m or 2h"),
            "{text}"
        );
    }

    #[test]
    fn a_duration_outside_its_range_is_refused() {
        for (name, value) in [
            (DETACHED_TTL, "500ms"),
            (RUN_BUDGET, "2h"),
            (QUIET_WINDOW, "5m"),
            (STEP_TIMEOUT, "50ms"),
            (STEP_TIMEOUT, "6m"),
            (BUDGET, "0s"),
            (EVENT_RETENTION, "10m"),
        ] {
            let e = error_for(&with(&[(name, value)]));
            assert_eq!(e.problems.len(), 1, "{name}={value}");
            assert_eq!(e.problems[0].name, name);
            assert_eq!(e.problems[0].problem, "is out of range");
        }
    }

    #[test]
    fn max_runs_must_be_a_whole_number_from_one_to_a_thousand() {
        for (value, problem) in [
            ("0", "is out of range"),
            ("1001", "is out of range"),
            ("2.5", "is not a whole number"),
            ("-3", "is not a whole number"),
            ("many", "is not a whole number"),
        ] {
            let e = error_for(&with(&[(MAX_RUNS, value)]));
            assert_eq!(e.problems[0].name, MAX_RUNS);
            assert_eq!(e.problems[0].problem, problem, "{value}");
        }
    }

    #[test]
    fn table_names_url_journal_dir_and_provider_name_are_checked() {
        for (name, value) in [
            (TABLE, "ab"),
            (TABLE, "runs table"),
            (SANDBOXD_URL, "sandboxes.example.com"),
            (SANDBOXD_URL, "http://"),
            (SANDBOXD_URL, "https://a b"),
            (JOURNAL_DIR, "journals"),
            (SANDBOX_PROVIDER_NAME, "two words"),
        ] {
            let e = error_for(&with(&[(name, value)]));
            assert_eq!(e.problems.len(), 1, "{name}={value}");
            assert_eq!(e.problems[0].name, name);
            assert_eq!(e.problems[0].value.as_deref(), Some(value));
        }
    }

    #[test]
    fn a_bad_token_is_refused_without_ever_repeating_it() {
        for token in [
            "s3cr3t-with-newline\n",
            " s3cr3t-padded",
            "s3cr3t with space",
            "s3cr3t-ünicode",
        ] {
            let e = error_for(&with(&[(SANDBOXD_TOKEN, token)]));
            assert_eq!(e.problems[0].name, SANDBOXD_TOKEN);
            assert_eq!(e.problems[0].value, None);
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains("s3cr3t"), "the secret leaked: {shown}");
        }
        let e = error_for(&with(&[(SANDBOXD_TOKEN, "s3cr3t\n")]));
        assert!(e.to_string().contains("whitespace before or after"), "{e}");
    }

    #[test]
    fn a_bad_sandboxd_token_is_refused_with_the_sentence_every_binary_gives() {
        for bad in [
            "short-token",
            "0123456789abcdef-token\n",
            "0123456789abcdef token",
        ] {
            let e = error_for(&with(&[(SANDBOXD_TOKEN, bad)]));
            let sentence = reaper_core::settings::check_token(SANDBOXD_TOKEN, bad)
                .unwrap_err()
                .to_string();
            assert_eq!(e.problems.len(), 1, "{e}");
            assert!(e.problems[0].to_string().starts_with(&sentence), "{e}");
        }
    }

    #[test]
    fn the_token_never_appears_in_the_configs_debug_output() {
        let c = ServerlessConfig::from_env(env(&minimal())).unwrap();
        let debug = format!("{c:?}");
        assert!(
            !debug.contains(TOKEN) && debug.contains("<redacted>"),
            "{debug}"
        );
    }

    #[test]
    fn several_bad_settings_are_all_reported_at_once() {
        let e = error_for(&with(&[
            (MAX_RUNS, "0"),
            (RUN_BUDGET, "fast"),
            (SANDBOXD_URL, "ftp://x"),
        ]));
        let mut names: Vec<_> = e.problems.iter().map(|p| p.name).collect();
        names.sort();
        assert_eq!(names, [MAX_RUNS, RUN_BUDGET, SANDBOXD_URL]);
    }

    #[test]
    fn optional_settings_set_to_empty_take_their_defaults() {
        let c = ServerlessConfig::from_env(env(&with(&[(BUDGET, ""), (JOURNAL_DIR, "")]))).unwrap();
        assert_eq!((c.budget, c.journal_dir), (None, None));
    }

    const ROLE: &str = "arn:aws:iam::123456789012:role/reaper-vercel";
    const OIDC: &str = "eyJhbGciOiJSUzI1NiJ9.oidc-payload-s3cr3t.signature";
    const KEY_ID: &str = "AKIAKEYIDS3CR3T";
    const SECRET_KEY: &str = "wJalrXUtnFEMI-secret-key-s3cr3t";

    #[test]
    fn a_role_arn_selects_web_identity_and_the_keys_beside_it_are_ignored() {
        let c = ServerlessConfig::from_env(env(&with(&[
            (ROLE_ARN, ROLE),
            (VERCEL_OIDC_TOKEN, OIDC),
            (ACCESS_KEY_ID, KEY_ID),
            // Not even read while a role is set: a leftover key cannot block the start.
            (SECRET_ACCESS_KEY, " padded"),
        ])))
        .unwrap();
        assert_eq!(
            c.aws_credentials,
            AwsCredentialsConfig::WebIdentity {
                role_arn: ROLE.into(),
                session_name: DEFAULT_SESSION_NAME.into(),
                env_token: Some(Secret::new(OIDC)),
            }
        );
        assert!(c.aws_credentials.require_explicit().is_ok());
        let named = ServerlessConfig::from_env(env(&with(&[
            (
                ROLE_ARN,
                "arn:aws-us-gov:iam::123456789012:role/path/reaper",
            ),
            (ROLE_SESSION_NAME, "reaper-prod@vercel"),
        ])))
        .unwrap();
        let AwsCredentialsConfig::WebIdentity {
            session_name,
            env_token,
            ..
        } = named.aws_credentials
        else {
            panic!("expected web identity: {named:?}");
        };
        assert_eq!(
            (session_name.as_str(), env_token),
            ("reaper-prod@vercel", None)
        );
    }

    #[test]
    fn access_keys_without_a_role_are_used_as_set_and_need_their_secret() {
        let c = ServerlessConfig::from_env(env(&with(&[
            (ACCESS_KEY_ID, KEY_ID),
            (SECRET_ACCESS_KEY, SECRET_KEY),
            (SESSION_TOKEN, "session-s3cr3t"),
        ])))
        .unwrap();
        assert_eq!(
            c.aws_credentials,
            AwsCredentialsConfig::StaticKeys {
                access_key_id: Secret::new(KEY_ID),
                secret_access_key: Secret::new(SECRET_KEY),
                session_token: Some(Secret::new("session-s3cr3t")),
            }
        );
        assert!(c.aws_credentials.require_explicit().is_ok());

        let e = error_for(&with(&[(ACCESS_KEY_ID, KEY_ID)]));
        assert_eq!(e.problems.len(), 1, "{e}");
        assert_eq!(e.problems[0].name, SECRET_ACCESS_KEY);
        assert!(
            e.to_string()
                .contains("AWS_SECRET_ACCESS_KEY is not set, but AWS_ACCESS_KEY_ID is"),
            "{e}"
        );
    }

    #[test]
    fn neither_a_role_nor_keys_leaves_the_default_chain_which_a_handler_can_refuse() {
        let c = ServerlessConfig::from_env(env(&minimal())).unwrap();
        assert_eq!(c.aws_credentials, AwsCredentialsConfig::DefaultChain);
        let e = c
            .aws_credentials
            .require_explicit()
            .unwrap_err()
            .to_string();
        for part in [
            "no AWS credentials are configured",
            "set AWS_ROLE_ARN to the role the OIDC stack creates",
            "infra/aws/vercel-oidc.yaml",
            "AWS_REGION",
            "or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        ] {
            assert!(e.contains(part), "{part:?} missing from {e}");
        }
        // Empty values are how templates spell unset.
        let empty = ServerlessConfig::from_env(env(&with(&[(ROLE_ARN, ""), (ACCESS_KEY_ID, "")])));
        assert_eq!(
            empty.unwrap().aws_credentials,
            AwsCredentialsConfig::DefaultChain
        );
    }

    #[test]
    fn a_malformed_role_arn_or_session_name_is_refused_naming_the_variable() {
        for (name, value) in [
            (ROLE_ARN, "reaper-vercel"),
            (ROLE_ARN, "arn:aws:iam::12345:role/reaper"),
            (ROLE_ARN, "arn:aws:iam::123456789012:user/reaper"),
            (ROLE_ARN, "arn:aws:s3:::123456789012:role/reaper"),
            (ROLE_ARN, "arn:aws:iam::123456789012:role/"),
        ] {
            let e = error_for(&with(&[(name, value)]));
            assert_eq!(e.problems.len(), 1, "{value}: {e}");
            assert_eq!(e.problems[0].name, ROLE_ARN);
            assert_eq!(e.problems[0].value.as_deref(), Some(value));
            assert!(e.to_string().contains("is not an IAM role ARN"), "{e}");
        }
        let too_long: &'static str = Box::leak("n".repeat(65).into_boxed_str());
        for session in ["x", "has space", too_long] {
            let e = error_for(&with(&[(ROLE_ARN, ROLE), (ROLE_SESSION_NAME, session)]));
            assert_eq!(e.problems[0].name, ROLE_SESSION_NAME, "{session}");
        }
    }

    #[test]
    fn keys_and_the_oidc_token_never_appear_in_the_debug_output_or_an_error() {
        let role =
            ServerlessConfig::from_env(env(&with(&[(ROLE_ARN, ROLE), (VERCEL_OIDC_TOKEN, OIDC)])))
                .unwrap();
        let keys = ServerlessConfig::from_env(env(&with(&[
            (ACCESS_KEY_ID, KEY_ID),
            (SECRET_ACCESS_KEY, SECRET_KEY),
            (SESSION_TOKEN, "session-s3cr3t"),
        ])))
        .unwrap();
        let shown = format!("{role:?} {keys:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains(ROLE),
            "the role ARN is not a secret: {shown}"
        );
        for (name, value) in [
            (VERCEL_OIDC_TOKEN, "padded-oidc-s3cr3t\n"),
            (SECRET_ACCESS_KEY, " padded-s3cr3t"),
            (ACCESS_KEY_ID, "AKIA S3CR3T"),
        ] {
            let mut pairs = with(&[(ACCESS_KEY_ID, KEY_ID), (SECRET_ACCESS_KEY, SECRET_KEY)]);
            if name == VERCEL_OIDC_TOKEN {
                pairs = with(&[(ROLE_ARN, ROLE)]);
            }
            pairs.retain(|(k, _)| *k != name);
            pairs.push((name, value));
            let e = error_for(&pairs);
            assert_eq!(e.problems[0].name, name);
            let shown = format!("{e} {e:?}");
            assert!(
                !shown.contains("S3CR3T") && !shown.contains("s3cr3t"),
                "{shown}"
            );
        }
    }

    const REMOTE_DB: &str =
        "postgres://reaper@ep-cool-name-123456.us-east-2.aws.neon.tech/neondb?sslmode=require";

    fn postgres_env(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut pairs = vec![
            (STORE, "postgres"),
            (DATABASE_URL, REMOTE_DB),
            (DATABASE_PASSWORD, "pg-s3cr3t-password"),
            (SANDBOXD_URL, "https://sandboxes.example.com"),
            (SANDBOXD_TOKEN, TOKEN),
            (DETACHED_TTL, "30m"),
        ];
        for (k, v) in extra {
            pairs.retain(|(name, _)| name != k);
            pairs.push((k, v));
        }
        pairs
    }

    #[test]
    fn reaper_store_postgres_needs_no_table_and_reads_the_url_and_the_password_secret() {
        let c = ServerlessConfig::from_env(env(&postgres_env(&[]))).unwrap();
        assert_eq!(
            c.store,
            StoreChoice::Postgres {
                url: REMOTE_DB.into(),
                password: Some(Secret::new("pg-s3cr3t-password")),
            }
        );
        assert_eq!(c.table, "");
        assert!(
            !c.uses_aws(),
            "no DynamoDB and no Secrets Manager: no AWS at all"
        );
        let options = c.store.postgres_options().unwrap();
        assert_eq!(options.password, Some(Secret::new("pg-s3cr3t-password")));
        assert_eq!(options.schema, "reaper");
        let shown = format!("{c:?}");
        assert!(!shown.contains("pg-s3cr3t"), "{shown}");
        // The default stays DynamoDB.
        let d = ServerlessConfig::from_env(env(&minimal())).unwrap();
        assert_eq!(d.store, StoreChoice::DynamoDb);
        assert!(d.uses_aws());
    }

    #[test]
    fn reaper_store_postgres_without_a_url_or_with_another_scheme_is_refused_naming_it() {
        let mut pairs = postgres_env(&[]);
        pairs.retain(|(k, _)| *k != DATABASE_URL);
        let e = error_for(&pairs);
        assert_eq!(e.problems.len(), 1, "{e}");
        assert!(
            e.to_string()
                .contains("REAPER_DATABASE_URL is not set, and REAPER_STORE is postgres"),
            "{e}"
        );
        let e = error_for(&postgres_env(&[(
            DATABASE_URL,
            "mysql://db.example.com/app",
        )]));
        assert!(e.names(DATABASE_URL), "{e}");
        assert!(
            e.to_string().contains("does not start with postgres://"),
            "{e}"
        );
        let e = error_for(&postgres_env(&[(STORE, "mongodb")]));
        assert!(e.names(STORE), "{e}");
        assert!(e.to_string().contains("dynamodb or postgres"), "{e}");
    }

    #[test]
    fn sslmode_disable_to_a_remote_database_is_refused_at_start_up_and_loopback_is_allowed() {
        let e = error_for(&postgres_env(&[(
            DATABASE_URL,
            "postgres://reaper:pw-in-url-s3cr3t@db.example.com:5432/app?sslmode=disable",
        )]));
        assert!(e.names(DATABASE_URL), "{e}");
        let text = e.to_string();
        assert!(text.contains("refusing to connect to"), "{text}");
        assert!(text.contains("without TLS"), "{text}");
        assert!(text.contains("Remove sslmode=disable"), "{text}");
        assert!(
            !text.contains("s3cr3t"),
            "the password in the URL leaked: {text}"
        );
        let local = ServerlessConfig::from_env(env(&postgres_env(&[(
            DATABASE_URL,
            "postgres://reaper@127.0.0.1:5432/app?sslmode=disable",
        )])));
        assert!(local.is_ok(), "{local:?}");
    }

    const SECRET_ARN: &str =
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:reaper/sandboxd-token-AbCdEf";

    #[test]
    fn a_secret_arn_replaces_the_token_and_carries_the_cache_lifetime() {
        let mut pairs = with(&[(SANDBOXD_TOKEN_SECRET_ARN, SECRET_ARN)]);
        pairs.retain(|(k, _)| *k != SANDBOXD_TOKEN);
        let c = ServerlessConfig::from_env(env(&pairs)).unwrap();
        assert_eq!(
            c.sandboxd_token_secret,
            Some(SecretSource {
                arn: SECRET_ARN.into(),
                cache_ttl: DEFAULT_SECRET_CACHE_TTL,
            })
        );
        assert_eq!(c.sandboxd_token.expose(), "");
        pairs.push((SECRET_CACHE_TTL, "30s"));
        let c = ServerlessConfig::from_env(env(&pairs)).unwrap();
        assert_eq!(
            c.sandboxd_token_secret.unwrap().cache_ttl,
            Duration::from_secs(30)
        );
        // A PostgreSQL deployment reading its token from Secrets Manager uses AWS for that.
        let mut pg = postgres_env(&[(SANDBOXD_TOKEN_SECRET_ARN, SECRET_ARN)]);
        pg.retain(|(k, _)| *k != SANDBOXD_TOKEN);
        assert!(ServerlessConfig::from_env(env(&pg)).unwrap().uses_aws());
    }

    #[test]
    fn a_token_beside_its_secret_arn_or_a_malformed_arn_is_refused() {
        let e = error_for(&with(&[(SANDBOXD_TOKEN_SECRET_ARN, SECRET_ARN)]));
        assert!(e.names(SANDBOXD_TOKEN), "{e}");
        assert!(
            e.to_string()
                .contains("keep the token in Secrets Manager only"),
            "{e}"
        );
        assert!(!e.to_string().contains(TOKEN), "{e}");
        for bad in [
            "reaper/sandboxd-token",
            "arn:aws:ssm:us-east-1:123456789012:parameter/x",
            "arn:aws:secretsmanager:us-east-1:1234:secret:x",
        ] {
            let mut pairs = with(&[(SANDBOXD_TOKEN_SECRET_ARN, bad)]);
            pairs.retain(|(k, _)| *k != SANDBOXD_TOKEN);
            let e = error_for(&pairs);
            assert!(e.names(SANDBOXD_TOKEN_SECRET_ARN), "{bad}: {e}");
            assert!(
                e.to_string()
                    .contains("is not a Secrets Manager secret ARN"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_readme_table_lists_exactly_the_settings_read() {
        let readme = include_str!("../README.md");
        let documented: Vec<&str> = readme
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .filter(|n| {
                n.starts_with("REAPER_") || n.starts_with("AWS_") || n.starts_with("VERCEL_")
            })
            .collect();
        let read: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        assert_eq!(documented, read);
    }
}
