//! The HTTP/1 accept loop: a bounded number of connections, a deadline for every request's
//! headers, and graceful shutdown.
//!
//! `axum::serve` has neither bound: a client that opens connections and never finishes its
//! headers holds each one (and its file descriptor) for ever, and enough of them starve every
//! token holder. Here:
//! - a connection that has not sent a complete request head within `header_read_timeout` (from
//!   its start, and again while idle between requests) is closed;
//! - at most `max_connections` are open; a new connection beyond that is closed at once. An
//!   open connection is never closed to make room: every one is either serving a request or
//!   inside its header window, and a client that has just connected and not yet sent its head
//!   (a legitimate one thinking, or waiting on its own side) must not lose its connection to a
//!   churn of others. The header window is what bounds how long a slot can be held without
//!   sending anything, so slow and silent clients still leave, and a refused client can retry.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower_service::Service;

/// Default of `--max-connections`: well under the usual 1,024 open-file limit, with room for
/// the pipes of every concurrent exec.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default of `--header-read-timeout-ms`.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the accept loop pauses after `accept` fails (out of file descriptors, typically)
/// before trying again, so the failure does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The connection bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
        }
    }
}

/// The number of open connections, decremented when a connection's task ends however it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, lets requests in
/// flight finish (idle connections are closed) and returns when every connection has closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    // Whether the refusals since the cap was last reached were already logged at warn, so a
    // churn of thousands of connections logs one warning, not thousands.
    let mut refusing = false;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let http = Arc::new(http);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            // Reap finished connection tasks as they end, so the set stays small.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a connection; retrying");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        if open.load(Ordering::Acquire) >= limits.max_connections {
            if refusing {
                tracing::debug!(%peer, "connection refused (--max-connections)");
            } else {
                refusing = true;
                tracing::warn!(%peer, max = limits.max_connections, "connections refused: the cap is reached, and an open connection is only closed when its header window ends (--max-connections, --header-read-timeout-ms)");
            }
            drop(stream);
            continue;
        }
        refusing = false;
        open.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(open.clone());
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let mut app = app.clone();
            async move {
                let response = app.call(request.map(axum::body::Body::new)).await;
                Ok::<_, Infallible>(response.unwrap_or_else(|never| match never {}))
            }
        });
        let http = http.clone();
        let mut stopping = stop_rx.clone();
        connections.spawn(async move {
            let _slot = slot;
            let connection = http.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let mut draining = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(%peer, error = %e, "connection ended");
                        }
                        break;
                    }
                    Ok(_) = stopping.wait_for(|stop| *stop), if !draining => {
                        draining = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
}
