//! The daemon's composition root: flags, tracing, token, provider, listener, graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use reaper_docker::{DockerProvider, DockerProviderOptions};
use reaper_local::{LocalProviderOptions, LocalSandboxProvider};
use reaper_sandboxd::serve::{serve, ConnectionLimits, DEFAULT_MAX_CONNECTIONS};
use reaper_sandboxd::server::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONCURRENT_EXECS, DEFAULT_MAX_EXEC_TIMEOUT_MS,
    DEFAULT_MAX_OUTPUT_BYTES,
};
use reaper_sandboxd::{router, AppState, Backend, DockerBackend, Limits, Token, TOKEN_ENV};

/// Serves this machine's sandboxes over HTTP (API: openapi.json, /v1): local sandboxes under
/// --root, or containers on the host's Docker daemon with --backend docker. The token comes
/// from REAPER_SANDBOXD_TOKEN or --token-file; the daemon does not start without one.
#[derive(Debug, Parser)]
#[command(
    name = "reaper-sandboxd",
    version,
    after_help = "Durations are written 250ms, 30s, 5m, 2h (the reaper's one scheme); the old \
                  --max-exec-timeout-ms, --header-read-timeout-ms and --shutdown-grace-ms \
                  integers are still read, with a warning.\n\n\
                  Exit codes: 0 stopped cleanly after SIGTERM or Ctrl-C; 1 the async runtime \
                  could not start; 2 bad usage (an unknown flag or a bad value) or the daemon \
                  could not start or serve (no token, an unusable backend, the address in use)."
)]
struct Cli {
    /// Where sandboxes live: `local` (a directory and processes per sandbox under --root) or
    /// `docker` (a container per sandbox on the Docker daemon at --docker-host).
    #[arg(long, env = "REAPER_SANDBOXD_BACKEND", default_value = "local", value_parser = ["local", "docker"])]
    backend: String,
    /// Local backend: the directory holding one subdirectory per sandbox (created if missing).
    #[arg(long)]
    root: Option<PathBuf>,
    /// Docker backend: the daemon's Unix socket, as unix:///path or /path (TCP and SSH hosts are
    /// refused: the Engine API there would need TLS set up this daemon does not do).
    #[arg(
        long,
        env = "DOCKER_HOST",
        default_value = "unix:///var/run/docker.sock"
    )]
    docker_host: String,
    /// Docker backend: the image every sandbox container runs. It must be on the daemon
    /// already: sandboxes never pull.
    #[arg(long, env = "REAPER_SANDBOXD_DOCKER_IMAGE")]
    docker_image: Option<String>,
    /// Docker backend: the containers' network mode (`none`: a sandbox reaches nothing).
    #[arg(long, default_value = "none")]
    docker_network: String,
    /// Docker backend: the value of the io.reaper.sandbox label this daemon's containers carry;
    /// it only ever touches containers labelled so. Remote reapers record sandboxes under their
    /// HTTP provider's own name (default `sandboxd`), not this one.
    #[arg(long, default_value = reaper_docker::DEFAULT_PROVIDER_NAME)]
    docker_label: String,
    /// Address to listen on. Port 0 picks a free port; the bound address is printed on stdout.
    /// Anything but loopback exposes command execution to the network: put TLS in front.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// A file holding the token (one trailing newline allowed). Alternative to the environment.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Larger request bodies are refused with 413.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES, value_parser = at_least_one)]
    max_body_bytes: usize,
    /// Most stdout (and, separately, stderr) one exec may return; more is a 422 error.
    #[arg(long, default_value_t = DEFAULT_MAX_OUTPUT_BYTES, value_parser = at_least_one)]
    max_output_bytes: usize,
    /// Longest exec timeout a request may ask for: a duration, 1ms..24d (e.g. 10m).
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = duration(1, MAX_MS))]
    max_exec_timeout: Duration,
    /// Deprecated: --max-exec-timeout in whole milliseconds.
    #[arg(long, hide = true, value_parser = at_least_one_ms, conflicts_with = "max_exec_timeout")]
    max_exec_timeout_ms: Option<u64>,
    /// Execs running at once; one more is answered 503 (too-many-execs) with Retry-After.
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENT_EXECS, value_parser = at_least_one)]
    max_concurrent_execs: usize,
    /// Open connections at once. Beyond it, a new connection closes the oldest one that is not
    /// serving a request (slow or idle clients); it is refused only when all are busy.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = at_least_one)]
    max_connections: usize,
    /// A connection that has not sent a complete request head this long after it opened (or
    /// after its previous answer) is closed: slow and silent clients cannot hold connections.
    /// A duration, 1ms..1h.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration(1, 3_600_000))]
    header_read_timeout: Duration,
    /// Deprecated: --header-read-timeout in whole milliseconds.
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..=3_600_000), conflicts_with = "header_read_timeout")]
    header_read_timeout_ms: Option<u64>,
    /// Local backend: PATH inside the sandboxes (default /usr/local/bin:/usr/bin:/bin).
    #[arg(long)]
    sandbox_path: Option<String>,
    /// After SIGTERM or Ctrl-C, how long in-flight requests may take before the daemon exits:
    /// a duration, 0ms..24d.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration(0, MAX_MS))]
    shutdown_grace: Duration,
    /// Deprecated: --shutdown-grace in whole milliseconds.
    #[arg(long, hide = true, conflicts_with = "shutdown_grace")]
    shutdown_grace_ms: Option<u64>,
    /// Log JSON lines instead of text (stderr either way; filter with RUST_LOG).
    #[arg(long)]
    log_json: bool,
    /// TESTS AND DEMOS ONLY, local backend: honour the `.destroy-fails` file in a sandbox's directory (DELETE
    /// then answers 409). Never in production: an agent can write that file and make its own
    /// sandbox indestructible.
    #[arg(long)]
    honor_destroy_fails_flag: bool,
}

// The --max-exec-timeout default above, written as a duration.
const _: () = assert!(DEFAULT_MAX_EXEC_TIMEOUT_MS == 10 * 60 * 1000);

/// The longest duration a flag takes, as the reaper CLI's timers: 24 days.
const MAX_MS: u64 = 24 * 24 * 60 * 60 * 1000;

/// A duration flag in the reaper's one unit scheme (`250ms`, `30s`, `5m`, `2h`), within
/// `min_ms..=max_ms`; the `*-ms` integers these flags replace are still read, with a warning.
fn duration(min_ms: u64, max_ms: u64) -> impl Fn(&str) -> Result<Duration, String> + Clone {
    move |value| {
        let d = humantime::parse_duration(value.trim())
            .map_err(|_| format!("{value:?} is not a duration like 250ms, 30s or 5m"))?;
        let (min, max) = (Duration::from_millis(min_ms), Duration::from_millis(max_ms));
        if d < min || d > max {
            return Err(format!(
                "{value:?} is out of range: {}..{}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ));
        }
        Ok(d)
    }
}

impl Cli {
    /// Applies the deprecated `*-ms` flags (each conflicts with its replacement, so at most one
    /// of the two was given) and returns one warning per deprecated flag used.
    fn resolve_deprecated(&mut self) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut take = |old: Option<u64>, new: &mut Duration, old_flag: &str, new_flag: &str| {
            if let Some(ms) = old {
                *new = Duration::from_millis(ms);
                warnings.push(format!(
                    "{old_flag} is deprecated: use {new_flag} {} (durations like 250ms, 30s, 5m)",
                    humantime::format_duration(*new)
                ));
            }
        };
        take(
            self.max_exec_timeout_ms,
            &mut self.max_exec_timeout,
            "--max-exec-timeout-ms",
            "--max-exec-timeout",
        );
        take(
            self.header_read_timeout_ms,
            &mut self.header_read_timeout,
            "--header-read-timeout-ms",
            "--header-read-timeout",
        );
        take(
            self.shutdown_grace_ms,
            &mut self.shutdown_grace,
            "--shutdown-grace-ms",
            "--shutdown-grace",
        );
        warnings
    }
}

/// A count or size of at least one: zero would fail every request that needs it, so it is
/// refused at start-up (clap's usage error, exit 2) instead of after the daemon is up.
fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{value:?} is not a whole number of at least 1 (0 would fail every request that \
             needs it)"
        )),
    }
}

/// A duration in milliseconds of at least one: a zero exec timeout would time out every exec.
fn at_least_one_ms(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{value:?} is not a whole number of milliseconds of at least 1 (0 would time out \
             every exec)"
        )),
    }
}

/// The runtime could not start.
const EXIT_RUNTIME: u8 = 1;
/// Bad usage (clap's own code) or the daemon could not start or serve.
const EXIT_FAILED: u8 = 2;

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let deprecated = cli.resolve_deprecated();
    init_tracing(cli.log_json);
    for warning in deprecated {
        eprintln!("reaper-sandboxd: warning: {warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("reaper-sandboxd: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reaper-sandboxd: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour on a terminal unless NO_COLOR is set to a non-empty value (no-color.org).
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        );
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let token = Token::load(std::env::var(TOKEN_ENV).ok(), cli.token_file.as_deref())?;
    let backend = backend(&cli).await?;
    let kind = backend.kind();
    let state = Arc::new(AppState::new(
        backend,
        token,
        Limits {
            max_body_bytes: cli.max_body_bytes,
            max_output_bytes: cli.max_output_bytes,
            max_exec_timeout_ms: cli.max_exec_timeout.as_millis() as u64,
            max_concurrent_execs: cli.max_concurrent_execs,
        },
    ));
    let connection_limits = ConnectionLimits {
        max_connections: cli.max_connections,
        header_read_timeout: cli.header_read_timeout,
    };
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "listening on a non-loopback address: anyone who reaches it with the token runs commands as this user; put TLS in front");
    }
    // The one stdout line: scripts and tests wait for it to learn the real port.
    println!("listening on http://{addr}");
    tracing::info!(%addr, backend = kind, "reaper-sandboxd listening");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut stopped = stop_rx.clone();
    let server = serve(listener, router(state), connection_limits, async move {
        let _ = stopped.wait_for(|s| *s).await;
    });
    let grace = cli.shutdown_grace;
    tokio::select! {
        () = server => {},
        () = async {
            shutdown_signal().await;
            tracing::info!("shutting down: no new connections, waiting for requests in flight");
            let _ = stop_tx.send(true);
            tokio::time::sleep(grace).await;
        } => tracing::warn!(grace_ms = grace.as_millis() as u64, "requests still in flight after the grace period; exiting anyway"),
    }
    tracing::info!("reaper-sandboxd stopped; agents keep running in their sandboxes");
    Ok(())
}

/// The backend the flags ask for, checked before the daemon listens: a Docker daemon that does
/// not answer is an error now, not a 500 on the first request.
async fn backend(cli: &Cli) -> anyhow::Result<Backend> {
    if cli.backend == "docker" {
        if cli.sandbox_path.is_some() || cli.honor_destroy_fails_flag {
            anyhow::bail!(
                "--sandbox-path and --honor-destroy-fails-flag apply to the local backend only; \
                 the Docker backend's environment is the image's"
            );
        }
        let Some(image) = cli.docker_image.clone().filter(|i| !i.trim().is_empty()) else {
            anyhow::bail!(
                "--backend docker needs --docker-image (or REAPER_SANDBOXD_DOCKER_IMAGE): the \
                 image every sandbox container runs, already on the Docker daemon"
            );
        };
        let mut options = DockerProviderOptions::from_host(&cli.docker_host)
            .context("invalid --docker-host (DOCKER_HOST)")?;
        options.name = cli.docker_label.clone();
        // sandboxd serves only the containers it created (labelled), to clients that name them:
        // an id must never reach the host's other containers.
        options.require_label = true;
        options.output_limit = cli.max_output_bytes;
        let provider = DockerProvider::connect(options).await.map_err(|e| {
            anyhow::anyhow!("{e} Set DOCKER_HOST or --docker-host to the daemon's socket.")
        })?;
        tracing::info!(host = %cli.docker_host, %image, network = %cli.docker_network, "serving Docker containers");
        return Ok(Backend::Docker(DockerBackend {
            provider,
            image,
            network: cli.docker_network.clone(),
        }));
    }
    // The backends' required settings are checked here, not by clap, whose `required_if_eq`
    // does not see the backend's default value.
    let Some(root) = cli.root.clone().filter(|r| !r.as_os_str().is_empty()) else {
        anyhow::bail!(
            "--backend local (the default) needs --root: the directory holding one \
             subdirectory per sandbox (created if missing); or use --backend docker"
        );
    };
    std::fs::create_dir_all(&root)
        .with_context(|| format!("cannot create the sandbox root {}", root.display()))?;
    let mut options = LocalProviderOptions::new(&root);
    options.output_limit = cli.max_output_bytes;
    if let Some(path) = &cli.sandbox_path {
        options.path = path.clone();
    }
    options.destroy_fails_flag = cli.honor_destroy_fails_flag;
    if cli.honor_destroy_fails_flag {
        tracing::warn!("--honor-destroy-fails-flag: a .destroy-fails file makes DELETE fail; for tests and demos only");
    }
    tracing::info!(root = %root.display(), "serving local sandboxes");
    Ok(Backend::Local(LocalSandboxProvider::new(options)))
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the daemon");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("reaper-sandboxd").chain(args.iter().copied()))
    }

    #[test]
    fn timeouts_are_durations_like_the_reapers_other_settings() {
        let mut cli = parse(&[
            "--max-exec-timeout",
            "90s",
            "--header-read-timeout",
            "250ms",
            "--shutdown-grace",
            "1m",
        ])
        .unwrap();
        assert!(cli.resolve_deprecated().is_empty());
        assert_eq!(cli.max_exec_timeout, Duration::from_secs(90));
        assert_eq!(cli.header_read_timeout, Duration::from_millis(250));
        assert_eq!(cli.shutdown_grace, Duration::from_secs(60));
        let defaults = parse(&[]).unwrap();
        assert_eq!(
            defaults.max_exec_timeout,
            Duration::from_millis(DEFAULT_MAX_EXEC_TIMEOUT_MS)
        );
        assert_eq!(defaults.header_read_timeout, Duration::from_secs(10));
    }

    #[test]
    fn the_old_ms_flags_still_work_with_a_deprecation_warning_naming_the_new_flag() {
        let mut cli = parse(&[
            "--header-read-timeout-ms",
            "300",
            "--shutdown-grace-ms",
            "0",
        ])
        .unwrap();
        let warnings = cli.resolve_deprecated();
        assert_eq!(cli.header_read_timeout, Duration::from_millis(300));
        assert_eq!(cli.shutdown_grace, Duration::ZERO);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("--header-read-timeout-ms is deprecated")
                && warnings[0].contains("--header-read-timeout 300ms"),
            "{warnings:?}"
        );
        let both = parse(&["--shutdown-grace-ms", "5", "--shutdown-grace", "5s"]);
        assert!(
            both.is_err(),
            "an old flag and its replacement together are refused"
        );
    }

    #[test]
    fn a_bad_duration_is_refused_naming_the_flag_and_the_range() {
        let e = parse(&["--header-read-timeout", "2h"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--header-read-timeout") && e.contains("out of range"),
            "{e}"
        );
        let e = parse(&["--max-exec-timeout", "5000"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a duration"), "{e}");
    }

    #[test]
    fn the_exit_codes_are_the_ones_help_and_the_settings_registry_document() {
        use clap::CommandFactory;
        use reaper_core::settings::{Binary, EXITS};
        let documented: Vec<&str> = EXITS
            .iter()
            .filter(|e| e.binary == Binary::Sandboxd)
            .map(|e| e.code)
            .collect();
        assert_eq!(
            documented,
            [
                "0".to_string(),
                EXIT_RUNTIME.to_string(),
                EXIT_FAILED.to_string()
            ]
        );
        let usage = Cli::command()
            .try_get_matches_from(["reaper-sandboxd", "--no-such-flag"])
            .unwrap_err();
        assert_eq!(usage.exit_code(), i32::from(EXIT_FAILED));
        let help = Cli::command().render_help().to_string();
        for code in &documented {
            assert!(help.contains(&format!(" {code} ")), "--help: {code}");
        }
    }
}
