//! `GET /api/reap`: the Vercel Cron entrypoint. A composition root: logging, settings, the app,
//! and Vercel's runtime (a local HTTP server; in production also its IPC bridge).

use std::process::ExitCode;
use std::sync::Arc;

use reaper_vercel::app::SystemClock;
use reaper_vercel::App;
use vercel_runtime::{run, service_fn, Error, Request, Response, ResponseBody};

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    let app = match App::from_env(|k| std::env::var(k).ok(), Arc::new(SystemClock)).await {
        Ok(app) => Arc::new(app),
        Err(e) => {
            // Refusing to start makes every invocation fail visibly, with this line in the log.
            tracing::error!(error = %e, "reaper-vercel cannot start");
            eprintln!("reaper-vercel: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(weak) = app.secret.weakness() {
        // Vercel accepts it, so the function does too; the reaper's token rule says why not.
        tracing::warn!("{weak}");
    }
    let handler = move |req: Request| {
        let app = app.clone();
        async move {
            // The body of a cron GET is empty: only the head is read.
            let (parts, _body) = req.into_parts();
            Ok::<Response<ResponseBody>, Error>(app.handle(&parts).await.map(ResponseBody::from))
        }
    };
    match run(service_fn(handler)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "the Vercel runtime stopped");
            ExitCode::FAILURE
        }
    }
}

/// JSON lines on stderr (Vercel keeps a function's stderr as its log), level from `RUST_LOG`.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
