//! The HTTP/1 accept loop: a bounded number of connections, a deadline for every request's
//! headers, and graceful shutdown.
//!
//! `axum::serve` has neither bound: a client that opens connections and never finishes its
//! headers holds each one (and its file descriptor) for ever, and enough of them starve every
//! token holder. Here:
//! - a connection that has not sent a complete request head within `header_read_timeout` (from
//!   its start, and again while idle between requests) is closed;
//! - at most `max_connections` are open; a new connection beyond that closes the oldest one
//!   that is not serving a request (a slow or idle client never reached a handler, so it never
//!   passed the token check), and is itself closed at once only when every open connection is
//!   busy serving a request.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
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

/// One open connection: how many requests it is serving, and how to close it.
struct Open {
    serving: Arc<AtomicUsize>,
    evict: oneshot::Sender<()>,
}

/// Open connections by accept order, so the oldest idle one is found first.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: BTreeMap<u64, Open>,
}

impl Registry {
    /// Makes room for one more connection: `false` when every open one is serving a request.
    fn make_room(&mut self, max: usize) -> bool {
        if self.open.len() < max {
            return true;
        }
        let idle = self
            .open
            .iter()
            .find(|(_, c)| c.serving.load(Ordering::Acquire) == 0)
            .map(|(&id, _)| id);
        match idle.and_then(|id| self.open.remove(&id)) {
            Some(oldest) => {
                // The task may have ended already; either way it is gone from the count.
                let _ = oldest.evict.send(());
                true
            }
            None => false,
        }
    }
}

/// Counts a request as being served while it lives (also when its future is dropped).
struct Serving(Arc<AtomicUsize>);

impl Serving {
    fn start(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Serving(counter.clone())
    }
}

impl Drop for Serving {
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
    let registry = Arc::new(Mutex::new(Registry::default()));
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
        let (id, serving, evicted) = {
            let mut registry = registry.lock().unwrap_or_else(|e| e.into_inner());
            if !registry.make_room(limits.max_connections) {
                tracing::warn!(%peer, max = limits.max_connections, "connection refused: every connection is serving a request (--max-connections)");
                continue;
            }
            let id = registry.next_id;
            registry.next_id += 1;
            let serving = Arc::new(AtomicUsize::new(0));
            let (evict, evicted) = oneshot::channel();
            registry.open.insert(
                id,
                Open {
                    serving: serving.clone(),
                    evict,
                },
            );
            (id, serving, evicted)
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let serving = Serving::start(&serving);
            let mut app = app.clone();
            async move {
                let _serving = serving;
                let response = app.call(request.map(axum::body::Body::new)).await;
                Ok::<_, Infallible>(response.unwrap_or_else(|never| match never {}))
            }
        });
        let http = http.clone();
        let registry = registry.clone();
        let mut stopping = stop_rx.clone();
        connections.spawn(async move {
            let connection = http.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::pin!(evicted);
            let mut draining = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(%peer, error = %e, "connection ended");
                        }
                        break;
                    }
                    Ok(()) = &mut evicted => {
                        tracing::debug!(%peer, "idle connection closed to make room (--max-connections)");
                        break;
                    }
                    Ok(_) = stopping.wait_for(|stop| *stop), if !draining => {
                        draining = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            let mut registry = registry.lock().unwrap_or_else(|e| e.into_inner());
            registry.open.remove(&id);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
}
