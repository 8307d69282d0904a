//! `reaper`: the self-hosted handler and the operator's tool. A composition root: parse the
//! settings, set up logging, open the SQLite store and the local sandboxes, run a command, map
//! its result to an exit code.

mod actions;
mod config;
mod dashboard;
mod demo;
mod health;
mod help;
mod init;
mod progress;
mod prune;
mod render;
mod status;
mod sweep;
mod wiring;

use std::io::IsTerminal;
use std::process::ExitCode;

use config::{Command, LogFormat, Output, Settings};
use tracing_subscriber::EnvFilter;

/// The exit codes scripts can rely on (documented in the README and `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; a sweep skipped because another sweep holds the lease is done too.
    Ok = 0,
    /// Bad usage or a bad setting.
    Usage = 1,
    /// Ran, but some run failed or leaked its sandbox, or a prune failed.
    Failures = 2,
    /// Could not run: the database or sandbox root is unusable, or the lease store failed.
    CannotRun = 3,
}

/// A command that could not do its job, with the message for the operator.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            exit: Exit::Usage,
            message: message.into(),
        }
    }

    pub fn cannot_run(message: impl Into<String>) -> Self {
        Failure {
            exit: Exit::CannotRun,
            message: message.into(),
        }
    }
}

impl From<config::ConfigError> for Failure {
    fn from(e: config::ConfigError) -> Self {
        Failure::usage(e.0)
    }
}

fn main() -> ExitCode {
    let mut parsed = match config::parse() {
        Ok(p) => p,
        Err(e) => {
            let _ = e.print();
            // clap exits 2 on usage errors; here 2 means "some run failed", so usage is 1.
            return ExitCode::from(if e.use_stderr() { Exit::Usage as u8 } else { 0 });
        }
    };
    if let Err(e) = parsed.resolve_json_env() {
        eprintln!("reaper: error: {e}");
        return ExitCode::from(Exit::Usage as u8);
    }
    // Before logging starts, once per process (a watch runs for months on one warning).
    for renamed in parsed.resolve_renamed_env(|name| std::env::var(name).ok()) {
        eprintln!("reaper: warning: {renamed}");
    }
    let settings = parsed.settings();
    let (output, default_log) = match &parsed.cli.command {
        Command::Demo(a) => (&a.output, "off"),
        Command::Sweep(a) => (&a.output, "info"),
        Command::Watch(a) => (&a.output, "info"),
        Command::Prune(a) => (&a.output, "info"),
        Command::Status(a) => (&a.output, "warn"),
        Command::Init(a) => (&a.output, "warn"),
        Command::Expire(a) => (&a.output, "info"),
        Command::Ledger(a) => (a.output(), "info"),
        Command::Pause(a) | Command::Resume(a) => (&a.output, "info"),
        Command::Settings { .. }
        | Command::Schema(_)
        | Command::Completions { .. }
        | Command::Man => return print_docs(&parsed.cli.command),
    };
    let ansi = parsed.cli.color.colors(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let result = init_tracing(settings, output, default_log, ansi).and_then(|()| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Failure::cannot_run(format!("cannot start the async runtime: {e}")))?;
        runtime.block_on(run(&parsed, settings))
    });
    match result {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(failure) => {
            eprintln!("reaper: error: {}", failure.message);
            ExitCode::from(failure.exit as u8)
        }
    }
}

async fn run(parsed: &config::Parsed, settings: Settings<'_>) -> Result<Exit, Failure> {
    match &parsed.cli.command {
        Command::Demo(a) => demo::run(a).await,
        Command::Sweep(a) => sweep::run_sweep(a, settings).await,
        Command::Watch(a) => sweep::run_watch(a, settings).await,
        Command::Prune(a) => prune::run(a, settings).await,
        Command::Status(a) => status::run(a, settings).await,
        Command::Init(a) => init::run(a).await,
        Command::Expire(a) => actions::run_expire(a, settings).await,
        Command::Ledger(a) => actions::run_ledger(a, settings).await,
        Command::Pause(a) => actions::run_pause(a, true).await,
        Command::Resume(a) => actions::run_pause(a, false).await,
        Command::Settings { .. }
        | Command::Schema(_)
        | Command::Completions { .. }
        | Command::Man => Ok(Exit::Ok),
    }
}

/// The commands that print documentation generated from the clap definition and exit.
fn print_docs(command: &Command) -> ExitCode {
    let printed = match command {
        Command::Settings { all: false } => {
            print!("{}", help::settings_markdown());
            Ok(())
        }
        Command::Settings { all: true } => {
            print!("{}", reaper_core::settings::markdown());
            Ok(())
        }
        Command::Completions { shell } => help::print_completions(*shell),
        Command::Man => help::print_man(),
        Command::Schema(a) => match init::schema_script(a) {
            Ok(sql) => init::print(&sql),
            Err(failure) => {
                eprintln!("reaper: error: {}", failure.message);
                return ExitCode::from(failure.exit as u8);
            }
        },
        _ => Ok(()),
    };
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reaper: error: cannot write to stdout: {e}");
            ExitCode::from(Exit::CannotRun as u8)
        }
    }
}

/// Logs go to stderr (stdout is the command's output): text for people, JSON lines for machines.
fn init_tracing(
    s: Settings<'_>,
    output: &Output,
    default: &str,
    ansi: bool,
) -> Result<(), Failure> {
    let format = s.log_format(&output.log_format)?;
    let (directives, name) = match (&output.log, std::env::var("RUST_LOG")) {
        (Some(d), _) => (d.clone(), s.name(config::LOG)),
        (None, Ok(d)) if !d.trim().is_empty() => (d, "RUST_LOG".to_string()),
        _ => (default.to_string(), "the default log filter".to_string()),
    };
    let filter = EnvFilter::builder().parse(&directives).map_err(|e| {
        Failure::usage(format!(
            "invalid value for {name}: {directives:?}: {e}: expected tracing directives like \
             warn, info, debug or reaper=debug,info"
        ))
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}
