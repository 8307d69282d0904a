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
#[command(name = "reaper-sandboxd", version)]
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
    /// Longest exec timeout a request may ask for.
    #[arg(long, default_value_t = DEFAULT_MAX_EXEC_TIMEOUT_MS, value_parser = at_least_one_ms)]
    max_exec_timeout_ms: u64,
    /// Execs running at once; one more is answered 503 (too-many-execs) with Retry-After.
    #[arg(long, default_value_t = DEFAULT_MAX_CONCURRENT_EXECS, value_parser = at_least_one)]
    max_concurrent_execs: usize,
    /// Open connections at once. Beyond it, a new connection closes the oldest one that is not
    /// serving a request (slow or idle clients); it is refused only when all are busy.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = at_least_one)]
    max_connections: usize,
    /// A connection that has not sent a complete request head this long after it opened (or
    /// after its previous answer) is closed: slow and silent clients cannot hold connections.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    header_read_timeout_ms: u64,
    /// Local backend: PATH inside the sandboxes (default /usr/local/bin:/usr/bin:/bin).
    #[arg(long)]
    sandbox_path: Option<String>,
    /// After SIGTERM or Ctrl-C, how long in-flight requests may take before the daemon exits.
    #[arg(long, default_value_t = 10_000)]
    shutdown_grace_ms: u64,
    /// Log JSON lines instead of text (stderr either way; filter with RUST_LOG).
    #[arg(long)]
    log_json: bool,
    /// TESTS AND DEMOS ONLY, local backend: honour the `.destroy-fails` file in a sandbox's directory (DELETE
    /// then answers 409). Never in production: an agent can write that file and make its own
    /// sandbox indestructible.
    #[arg(long)]
    honor_destroy_fails_flag: bool,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_json);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("reaper-sandboxd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reaper-sandboxd: {e:#}");
            ExitCode::from(2)
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
            max_exec_timeout_ms: cli.max_exec_timeout_ms,
            max_concurrent_execs: cli.max_concurrent_execs,
        },
    ));
    let connection_limits = ConnectionLimits {
        max_connections: cli.max_connections,
        header_read_timeout: Duration::from_millis(cli.header_read_timeout_ms),
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
    let grace = Duration::from_millis(cli.shutdown_grace_ms);
    tokio::select! {
        () = server => {},
        () = async {
            shutdown_signal().await;
            tracing::info!("shutting down: no new connections, waiting for requests in flight");
            let _ = stop_tx.send(true);
            tokio::time::sleep(grace).await;
        } => tracing::warn!(grace_ms = cli.shutdown_grace_ms, "requests still in flight after the grace period; exiting anyway"),
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
