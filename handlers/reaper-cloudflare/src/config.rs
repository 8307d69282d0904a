//! The Worker's settings, read from `[vars]` and secrets. Plain Rust: tested natively.

use std::time::Duration;

pub const DETACHED_TTL: &str = "REAPER_DETACHED_TTL";
/// Time between sweeps (formerly `REAPER_INTERVAL`).
pub const EVERY: &str = reaper_core::settings::EVERY;
pub const RUN_BUDGET: &str = "REAPER_RUN_BUDGET";
pub const MAX_RUNS: &str = "REAPER_MAX_RUNS";
/// The quiet window before a drive appends (formerly `REAPER_FENCE_QUIET`).
pub const QUIET_WINDOW: &str = reaper_core::settings::QUIET_WINDOW;
pub const JOURNAL_DIR: &str = "REAPER_JOURNAL_DIR";
pub const PROVIDERS: &str = reaper_providers::PROVIDERS_VAR;
pub const SANDBOXD_URL: &str = "REAPER_SANDBOXD_URL";
pub const SANDBOX_PROVIDER_NAME: &str = "REAPER_SANDBOX_PROVIDER_NAME";
pub const CPU_LIMIT: &str = "REAPER_CPU_LIMIT";
pub const CPU_PER_RUN: &str = "REAPER_CPU_PER_RUN";
pub const WALL_LIMIT: &str = "REAPER_WALL_LIMIT";
pub const SUBREQUESTS: &str = "REAPER_SUBREQUESTS";
pub const SUBREQUESTS_PER_RUN: &str = "REAPER_SUBREQUESTS_PER_RUN";
/// How long a finished run's events stay in D1 (formerly `REAPER_LOG_RETENTION`).
pub const EVENT_RETENTION: &str = reaper_core::settings::EVENT_RETENTION;
pub const PLAN: &str = "REAPER_PLAN";
/// A read-only token for the status route (`/status`): a monitor holding it can read the
/// verdict, never sweep, migrate or bootstrap.
pub const STATUS_TOKEN: &str = "REAPER_STATUS_TOKEN";
/// Secrets (`wrangler secret put`), never `[vars]`.
pub const SANDBOXD_TOKEN: &str = "REAPER_SANDBOXD_TOKEN";
pub const ADMIN_TOKEN: &str = "REAPER_ADMIN_TOKEN";

/// One `[vars]` setting: its name, default and what it accepts (the README table is this list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    /// Empty when required.
    pub default: &'static str,
    pub accepted: &'static str,
}

/// The Workers plan: the limits the sweep sizes itself to when they are not set explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// 10 ms of CPU and 50 subrequests per invocation; `[limits] cpu_ms` is refused (100328).
    Free,
    /// 30 s of CPU by default (up to 5 min with `[limits] cpu_ms`), 10,000 subrequests.
    Paid,
}

impl Plan {
    pub fn parse(raw: &str) -> Option<Plan> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "free" => Some(Plan::Free),
            "paid" | "standard" => Some(Plan::Paid),
            _ => None,
        }
    }

    /// `REAPER_CPU_LIMIT` when unset: the plan's default CPU limit per invocation.
    pub fn cpu_limit(self) -> &'static str {
        match self {
            Plan::Free => "10ms",
            Plan::Paid => "30s",
        }
    }

    /// `REAPER_SUBREQUESTS` when unset: the plan's subrequest limit per invocation.
    pub fn subrequests(self) -> &'static str {
        match self {
            Plan::Free => "50",
            Plan::Paid => "10000",
        }
    }
}

pub const SETTINGS: &[Setting] = &[
    Setting {
        name: PLAN,
        default: "free",
        accepted: "free or paid: the Workers plan, whose limits size the sweep when \
                   REAPER_CPU_LIMIT and REAPER_SUBREQUESTS are unset",
    },
    Setting {
        name: DETACHED_TTL,
        default: "",
        accepted: "a duration from 1s to 3650d, e.g. 30m",
    },
    Setting {
        name: PROVIDERS,
        default: "sandboxd",
        accepted: "a comma-separated list of sandboxd, daytona, e2b, vercel, cloudflare: the \
                   providers one sweep serves (each hosted one reads its own settings, \
                   e.g. the DAYTONA_API_KEY secret)",
    },
    Setting {
        name: SANDBOXD_URL,
        default: "",
        accepted: "the reaper-sandboxd base URL, http:// or https:// (required when \
                   REAPER_PROVIDERS lists sandboxd)",
    },
    Setting {
        name: EVERY,
        default: "1m",
        accepted: "a duration from 10ms to 1d: time between sweeps (formerly REAPER_INTERVAL, \
                   still read with a warning)",
    },
    Setting {
        name: RUN_BUDGET,
        default: "30s",
        accepted: "a duration from 10ms to 1h",
    },
    Setting {
        name: MAX_RUNS,
        default: "25",
        accepted: "a whole number from 1 to 1000: the cap per sweep",
    },
    Setting {
        name: QUIET_WINDOW,
        default: "5s",
        accepted: "a duration from 0ms to 1m (formerly REAPER_FENCE_QUIET, still read with a \
                   warning)",
    },
    Setting {
        name: JOURNAL_DIR,
        default: "the core's default",
        accepted: "an absolute directory path inside the sandboxes",
    },
    Setting {
        name: SANDBOX_PROVIDER_NAME,
        default: "sandboxd",
        accepted: "the provider name in the sandbox instance records",
    },
    Setting {
        name: CPU_LIMIT,
        default: "by plan: 10ms (free), 30s (paid)",
        accepted: "a duration from 10ms to 5m: the same value as [limits] cpu_ms when that is \
                   set (paid only)",
    },
    Setting {
        name: CPU_PER_RUN,
        default: "200ms",
        accepted: "a duration from 1ms to 1m: the CPU one run may use (JSON, journal parsing)",
    },
    Setting {
        name: WALL_LIMIT,
        default: "15m",
        accepted: "a duration from 1s to 15m: the alarm's wall-clock limit",
    },
    Setting {
        name: SUBREQUESTS,
        default: "by plan: 50 (free), 10000 (paid)",
        accepted: "a whole number from 10 to 10000000: the plan's subrequest limit per invocation",
    },
    Setting {
        name: SUBREQUESTS_PER_RUN,
        default: "36",
        accepted:
            "a whole number from 1 to 100000: D1 queries and sandboxd requests one run may make",
    },
    Setting {
        name: EVENT_RETENTION,
        default: "30d",
        accepted: "a duration from 1h to 3650d: how long a finished run's delivery-log events \
                   stay in D1 (transcripts stay for ever; formerly REAPER_LOG_RETENTION, still \
                   read with a warning)",
    },
];

pub use reaper_core::secret::Secret;
pub use reaper_core::settings::Renamed;

/// Everything a sweep needs, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub detached_ttl: Duration,
    pub interval: Duration,
    pub run_budget: Duration,
    pub max_runs: usize,
    pub fence_quiet: Duration,
    pub journal_dir: Option<String>,
    /// The providers one sweep serves, in the order listed.
    pub providers: Vec<reaper_providers::ProviderKind>,
    /// Set when `providers` lists sandboxd.
    pub sandboxd: Option<Sandboxd>,
    pub cpu_limit: Duration,
    pub cpu_per_run: Duration,
    pub wall_limit: Duration,
    pub subrequests: u64,
    pub subrequests_per_run: u64,
    pub log_retention: Duration,
    pub plan: Plan,
    /// Settings found under a deprecated name, to be warned about once.
    pub renamed: Vec<Renamed>,
}

/// How to reach `reaper-sandboxd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandboxd {
    pub url: String,
    pub token: Secret,
    /// The provider name its instance records carry.
    pub provider_name: String,
}

/// Every problem with the settings, so one deploy fixes them all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid reaper configuration: {}", .problems.join("; "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

impl ConfigError {
    pub fn names(&self, name: &str) -> bool {
        self.problems.iter().any(|p| p.starts_with(name))
    }
}

struct Reader<G> {
    get: G,
    problems: Vec<String>,
    renamed: Vec<Renamed>,
    /// Settings whose value came from an old name: (current name, old name).
    read_as: Vec<(&'static str, &'static str)>,
}

fn spec(name: &str) -> &'static Setting {
    SETTINGS
        .iter()
        .find(|s| s.name == name)
        .expect("every setting read is in SETTINGS")
}

impl<G: Fn(&str) -> Option<String>> Reader<G> {
    fn raw(&mut self, name: &'static str) -> Option<String> {
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
        match value.filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(v.trim().to_string()),
            None if spec(name).default.is_empty() => {
                self.fail(name, None, "is not set");
                None
            }
            None => None,
        }
    }

    fn fail(&mut self, name: &str, value: Option<&str>, problem: &str) {
        let accepted = SETTINGS
            .iter()
            .find(|s| s.name == name)
            .map_or("", |s| s.accepted);
        // A value read under an old name is reported under it: that is the var to fix.
        let name = self
            .read_as
            .iter()
            .find(|(new, _)| *new == name)
            .map_or(name, |(_, old)| *old);
        self.problems.push(match value {
            Some(v) => format!("{name}={v:?} {problem} (accepted: {accepted})"),
            None => format!("{name} {problem} (accepted: {accepted})"),
        });
    }

    fn duration(&mut self, name: &'static str) -> Duration {
        self.duration_or(name, spec(name).default)
    }

    /// A duration within the range [`reaper_core::settings`] gives `name`, the same range
    /// wherever it is read.
    fn duration_or(&mut self, name: &'static str, default: &str) -> Duration {
        let (min, max) = reaper_core::settings::setting(name)
            .and_then(reaper_core::settings::Setting::duration_ms)
            .map(|(min, max)| (Duration::from_millis(min), Duration::from_millis(max)))
            .expect("every duration is registered in reaper_core::settings");
        let Some(raw) = self
            .raw(name)
            .or_else(|| (!default.is_empty()).then(|| default.into()))
        else {
            return min;
        };
        match humantime::parse_duration(&raw) {
            Ok(d) if d >= min && d <= max => d,
            Ok(_) => {
                self.fail(name, Some(&raw), "is out of range");
                min
            }
            Err(e) => {
                self.fail(name, Some(&raw), &format!("is not a duration ({e})"));
                min
            }
        }
    }

    fn number(&mut self, name: &'static str) -> u64 {
        self.number_or(name, spec(name).default)
    }

    /// A whole number within the range [`reaper_core::settings`] gives `name`.
    fn number_or(&mut self, name: &'static str, default: &str) -> u64 {
        let (min, max) = reaper_core::settings::setting(name)
            .and_then(reaper_core::settings::Setting::count)
            .expect("every count is registered in reaper_core::settings");
        let raw = self.raw(name).unwrap_or_else(|| default.into());
        match raw.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => n,
            _ => {
                self.fail(name, Some(&raw), "is not a whole number in range");
                min
            }
        }
    }
}

impl<G: Fn(&str) -> Option<String>> Reader<G> {
    fn sandboxd(&mut self) -> Sandboxd {
        let provider_name = self
            .raw(SANDBOX_PROVIDER_NAME)
            .unwrap_or_else(|| spec(SANDBOX_PROVIDER_NAME).default.into());
        let url = self.raw(SANDBOXD_URL).unwrap_or_default();
        let http = url.starts_with("http://") || url.starts_with("https://");
        if !url.is_empty() && !http {
            // A URL may carry credentials: name the problem without repeating them.
            let shown = reaper_http_sandbox::redact_url(&url);
            self.fail(SANDBOXD_URL, Some(&shown), "is not an http(s) URL");
        }
        let token = (self.get)(SANDBOXD_TOKEN).unwrap_or_default();
        if token.is_empty() {
            self.problems.push(format!(
                "{SANDBOXD_TOKEN} is not set (a secret: `wrangler secret put {SANDBOXD_TOKEN}`)"
            ));
        } else if let Err(e) = reaper_core::settings::check_token(SANDBOXD_TOKEN, &token) {
            self.problems.push(e.to_string());
        }
        Sandboxd {
            url,
            token: Secret::new(token),
            provider_name,
        }
    }
}

impl Config {
    /// Reads `[vars]` and secrets through `get` (`None` when unset).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut r = Reader {
            get,
            problems: Vec::new(),
            renamed: Vec::new(),
            read_as: Vec::new(),
        };
        let ms = Duration::from_millis;
        let detached_ttl = r.duration(DETACHED_TTL);
        let interval = r.duration(EVERY);
        let run_budget = r.duration(RUN_BUDGET);
        let max_runs = r.number(MAX_RUNS) as usize;
        let fence_quiet = r.duration(QUIET_WINDOW);
        let plan_raw = r.raw(PLAN).unwrap_or_else(|| spec(PLAN).default.into());
        let plan = Plan::parse(&plan_raw).unwrap_or_else(|| {
            r.fail(PLAN, Some(&plan_raw), "is not a Workers plan");
            Plan::Free
        });
        let cpu_limit = r.duration_or(CPU_LIMIT, plan.cpu_limit());
        let cpu_per_run = r.duration(CPU_PER_RUN);
        let wall_limit = r.duration(WALL_LIMIT);
        let subrequests = r.number_or(SUBREQUESTS, plan.subrequests());
        let subrequests_per_run = r.number(SUBREQUESTS_PER_RUN);
        let log_retention = r.duration(EVENT_RETENTION);
        let journal_dir = r.raw(JOURNAL_DIR);
        if let Some(dir) = &journal_dir {
            if !dir.starts_with('/') {
                r.fail(JOURNAL_DIR, Some(dir), "is not an absolute path");
            }
        }
        let providers = match reaper_providers::parse((r.get)(PROVIDERS).as_deref()) {
            Ok(kinds) => kinds,
            Err(e) => {
                r.problems.push(e.to_string());
                Vec::new()
            }
        };
        for kind in &providers {
            if let Err(e) = reaper_providers::check_hosted(*kind, &r.get) {
                r.problems.push(e.to_string());
            }
        }
        let sandboxd = providers
            .contains(&reaper_providers::ProviderKind::Sandboxd)
            .then(|| r.sandboxd());
        // The route tokens are checked again on each request; named here too, so the alarm's
        // log says what to fix as every other binary would at start.
        for name in [STATUS_TOKEN, ADMIN_TOKEN] {
            if let Err(e) = reaper_core::settings::read_token(name, (r.get)(name)) {
                r.problems.push(e.to_string());
            }
        }
        if plan == Plan::Free {
            if cpu_limit > ms(10) {
                r.problems.push(format!(
                    "{CPU_LIMIT}={cpu_limit:?} is more than the Free plan's 10ms CPU per \
                     invocation: set {PLAN}=paid (and [limits] cpu_ms) on a Paid account, or \
                     remove {CPU_LIMIT}"
                ));
            }
            if subrequests > 50 {
                r.problems.push(format!(
                    "{SUBREQUESTS}={subrequests} is more than the Free plan's 50 subrequests \
                     per invocation: set {PLAN}=paid on a Paid account, or remove {SUBREQUESTS}"
                ));
            }
        }
        if r.problems.is_empty() {
            Ok(Config {
                detached_ttl,
                interval,
                run_budget,
                max_runs,
                fence_quiet,
                journal_dir,
                providers,
                sandboxd,
                cpu_limit,
                cpu_per_run,
                wall_limit,
                subrequests,
                subrequests_per_run,
                log_retention,
                plan,
                renamed: r.renamed,
            })
        } else {
            Err(ConfigError {
                problems: r.problems,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const MINIMAL: &[(&str, &str)] = &[
        (DETACHED_TTL, "30m"),
        (SANDBOXD_URL, "https://sandboxes.example.com"),
        (SANDBOXD_TOKEN, "s3cret-token-0123456789"),
    ];

    #[test]
    fn the_required_settings_alone_give_the_documented_defaults() {
        let c = Config::from_lookup(lookup(MINIMAL)).unwrap();
        assert_eq!(c.detached_ttl, Duration::from_secs(1800));
        assert_eq!(c.interval, Duration::from_secs(60));
        assert_eq!(c.run_budget, Duration::from_secs(30));
        assert_eq!(c.max_runs, 25);
        assert_eq!(c.cpu_limit, Duration::from_millis(10));
        assert_eq!(c.wall_limit, Duration::from_secs(900));
        assert_eq!(c.sandboxd.unwrap().provider_name, "sandboxd");
        assert_eq!(c.providers, [reaper_providers::ProviderKind::Sandboxd]);
        assert_eq!(c.journal_dir, None);
    }

    #[test]
    fn hosted_providers_alone_need_no_sandboxd_settings() {
        let c = Config::from_lookup(lookup(&[
            (DETACHED_TTL, "30m"),
            (PROVIDERS, "daytona,e2b"),
            ("DAYTONA_API_KEY", "dtn_0123456789"),
            ("E2B_API_KEY", "e2b_0123456789"),
        ]))
        .unwrap();
        assert_eq!(c.sandboxd, None);
        assert_eq!(
            c.providers,
            [
                reaper_providers::ProviderKind::Daytona,
                reaper_providers::ProviderKind::E2b
            ]
        );
    }

    #[test]
    fn a_bad_cloudflare_bridge_token_is_refused_with_the_sentence_every_binary_gives() {
        let bridge = reaper_providers::CLOUDFLARE_BRIDGE_TOKEN_VAR;
        let settings = |token| {
            [
                (DETACHED_TTL, "30m"),
                (PROVIDERS, "cloudflare"),
                (
                    reaper_providers::CLOUDFLARE_BRIDGE_URL_VAR,
                    "https://bridge.example.workers.dev",
                ),
                (bridge, token),
            ]
        };
        for bad in [
            "short-token",
            "0123456789abcdef-token\n",
            "0123456789abcdef token",
        ] {
            let e = Config::from_lookup(lookup(&settings(bad))).unwrap_err();
            let sentence = reaper_core::settings::check_token(bridge, bad)
                .unwrap_err()
                .to_string();
            assert_eq!(e.problems.len(), 1, "{bad:?}: {e}");
            assert!(e.problems[0].contains(&sentence), "{bad:?}: {e}");
        }
        assert!(Config::from_lookup(lookup(&settings("0123456789abcdef-token"))).is_ok());
    }

    /// The Sandbox bridge (TypeScript, tested in workerd by `test/sandbox-bridge.test.mjs`)
    /// refuses a bad `BRIDGE_TOKEN` with the core's words: this keeps its copy of them true.
    #[test]
    fn the_sandbox_bridge_checks_its_token_with_the_cores_rule_and_words() {
        use reaper_core::settings::{TokenProblem, TOKEN_ADVICE, TOKEN_MIN_CHARS};
        let bridge = include_str!("../sandbox-bridge/src/index.ts");
        assert!(
            bridge.contains(&format!("\"{TOKEN_ADVICE}\"")),
            "TOKEN_ADVICE"
        );
        assert!(bridge.contains(&format!("TOKEN_MIN_CHARS = {TOKEN_MIN_CHARS};")));
        for problem in [
            TokenProblem::Padded,
            TokenProblem::Space,
            TokenProblem::Charset,
        ] {
            assert!(bridge.contains(&format!("\"{problem}\"")), "{problem}");
        }
        let short = TokenProblem::TooShort { chars: 0 }.to_string();
        let short = short.replace("0)", "${value.length})");
        assert!(bridge.contains(&format!("`{short}`")), "{short}");
        assert!(bridge.contains("`${setting} ${problem}: ${TOKEN_ADVICE}`"));
    }

    #[test]
    fn a_listed_provider_missing_its_secret_is_named_with_the_other_problems() {
        let e = Config::from_lookup(lookup(&[
            (DETACHED_TTL, "30m"),
            (PROVIDERS, "sandboxd,vercel-sandbox"),
            (MAX_RUNS, "0"),
        ]))
        .unwrap_err();
        assert!(e.names(MAX_RUNS), "{e}");
        assert!(e.names(SANDBOXD_URL), "{e}");
        assert!(e.to_string().contains("VERCEL_TOKEN"), "{e}");
        let unknown =
            Config::from_lookup(lookup(&[(DETACHED_TTL, "30m"), (PROVIDERS, "e2c")])).unwrap_err();
        assert!(unknown.to_string().contains("e2c"), "{unknown}");
    }

    #[test]
    fn every_bad_setting_is_named_at_once_and_the_token_never_appears() {
        let e = Config::from_lookup(lookup(&[
            (EVERY, "soon"),
            (MAX_RUNS, "0"),
            (WALL_LIMIT, "1h"),
            (JOURNAL_DIR, "journals"),
            (SANDBOXD_URL, "ftp://x"),
            (SANDBOXD_TOKEN, "s3cret-token-0123456789"),
        ]))
        .unwrap_err();
        for name in [
            DETACHED_TTL,
            EVERY,
            MAX_RUNS,
            WALL_LIMIT,
            JOURNAL_DIR,
            SANDBOXD_URL,
        ] {
            assert!(e.names(name), "{name} missing from {e}");
        }
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(format!("{:?}", Secret::new("s3cret")).contains("redacted"));
    }

    #[test]
    fn the_limits_default_to_the_plans_free_unless_paid_is_set() {
        let free = Config::from_lookup(lookup(MINIMAL)).unwrap();
        assert_eq!(free.plan, Plan::Free);
        assert_eq!(free.cpu_limit, Duration::from_millis(10));
        assert_eq!(free.subrequests, 50);
        let mut paid = MINIMAL.to_vec();
        paid.push((PLAN, "paid"));
        let paid = Config::from_lookup(lookup(&paid)).unwrap();
        assert_eq!(paid.cpu_limit, Duration::from_secs(30));
        assert_eq!(paid.subrequests, 10_000);
    }

    #[test]
    fn limits_above_the_free_plans_are_refused_on_free_naming_the_fix() {
        let mut over = MINIMAL.to_vec();
        over.extend([(CPU_LIMIT, "30s"), (SUBREQUESTS, "1000")]);
        let e = Config::from_lookup(lookup(&over)).unwrap_err();
        assert!(e.names(CPU_LIMIT) && e.names(SUBREQUESTS), "{e}");
        assert!(e.to_string().contains("REAPER_PLAN=paid"), "{e}");
        let mut bad = MINIMAL.to_vec();
        bad.push((PLAN, "enterprise-ish"));
        assert!(Config::from_lookup(lookup(&bad)).unwrap_err().names(PLAN));
    }

    #[test]
    fn a_bad_token_is_refused_with_the_sentence_every_binary_gives() {
        for name in [SANDBOXD_TOKEN, STATUS_TOKEN, ADMIN_TOKEN] {
            for bad in [
                "short-token",
                "0123456789abcdef-token\n",
                "0123456789abcdef token",
            ] {
                let mut pairs = MINIMAL.to_vec();
                pairs.retain(|(k, _)| *k != name);
                pairs.push((name, bad));
                let e = Config::from_lookup(lookup(&pairs)).unwrap_err();
                let sentence = reaper_core::settings::check_token(name, bad)
                    .unwrap_err()
                    .to_string();
                assert_eq!(e.problems, [sentence], "{name}={bad:?}");
            }
        }
        let mut pairs = MINIMAL.to_vec();
        pairs.extend([
            (STATUS_TOKEN, ""),
            (ADMIN_TOKEN, "admin-token-0123456789abcdef"),
        ]);
        assert!(
            Config::from_lookup(lookup(&pairs)).is_ok(),
            "empty is unset"
        );
    }

    #[test]
    fn a_missing_sandboxd_token_says_it_is_a_secret() {
        let e = Config::from_lookup(lookup(&MINIMAL[..2])).unwrap_err();
        assert!(
            e.to_string()
                .contains("wrangler secret put REAPER_SANDBOXD_TOKEN"),
            "{e}"
        );
    }

    #[test]
    fn the_old_interval_fence_quiet_and_log_retention_vars_still_work_and_are_reported() {
        let mut pairs = MINIMAL.to_vec();
        pairs.extend([
            ("REAPER_INTERVAL", "2m"),
            ("REAPER_FENCE_QUIET", "0s"),
            ("REAPER_LOG_RETENTION", "2d"),
        ]);
        let c = Config::from_lookup(lookup(&pairs)).unwrap();
        assert_eq!(c.interval, Duration::from_secs(120));
        assert_eq!(c.fence_quiet, Duration::ZERO);
        assert_eq!(c.log_retention, Duration::from_secs(2 * 86_400));
        let olds: Vec<&str> = c.renamed.iter().map(|r| r.old).collect();
        assert_eq!(
            olds,
            [
                "REAPER_INTERVAL",
                "REAPER_FENCE_QUIET",
                "REAPER_LOG_RETENTION"
            ]
        );
    }

    #[test]
    fn a_new_var_wins_over_its_old_name_and_a_bad_old_value_is_named_as_set() {
        let mut pairs = MINIMAL.to_vec();
        pairs.extend([(EVERY, "30s"), ("REAPER_INTERVAL", "nonsense")]);
        let c = Config::from_lookup(lookup(&pairs)).unwrap();
        assert_eq!(c.interval, Duration::from_secs(30));
        assert!(c.renamed[0].ignored);
        let mut pairs = MINIMAL.to_vec();
        pairs.push(("REAPER_FENCE_QUIET", "5m"));
        let e = Config::from_lookup(lookup(&pairs)).unwrap_err();
        assert!(e.names("REAPER_FENCE_QUIET"), "{e}");
    }

    #[test]
    fn every_var_is_registered_for_the_worker_with_the_range_stated_here() {
        use reaper_core::settings::{Binary, Value, SETTINGS as REGISTRY};
        let mut ours: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        ours.extend([STATUS_TOKEN, SANDBOXD_TOKEN, ADMIN_TOKEN]);
        // Read by the cloudflare provider when the providers list it (`check_hosted`).
        ours.extend(reaper_providers::ProviderKind::Cloudflare.variables());
        ours.sort();
        let mut registered: Vec<&str> = REGISTRY
            .iter()
            .filter(|s| s.is_read_by(Binary::Worker))
            .map(|s| s.name)
            .collect();
        registered.sort();
        assert_eq!(ours, registered);
        for s in SETTINGS {
            let stated = match reaper_core::settings::setting(s.name).unwrap().value {
                Value::Duration { min_ms, max_ms } => format!(
                    "from {} to {}",
                    reaper_core::settings::show_ms(min_ms),
                    reaper_core::settings::show_ms(max_ms)
                ),
                Value::Count { min, max } => format!("from {min} to {max}"),
                Value::Token | Value::Text(_) => continue,
            };
            assert!(
                s.accepted.contains(&stated),
                "{}: {:?} should say {stated:?}",
                s.name,
                s.accepted
            );
        }
    }
}
