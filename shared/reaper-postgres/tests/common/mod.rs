//! The harness: the PostgreSQL of `REAPER_TEST_POSTGRES_URL` (see `server/start.sh`), and a fresh
//! schema per store, so cases run in parallel on one server without seeing each other.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use reaper_postgres::{PostgresOptions, PostgresStore};

pub const URL_VAR: &str = "REAPER_TEST_POSTGRES_URL";

pub fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: start a server with \
             `eval \"$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)\"` and rebuild"
        )
    })
}

/// A schema name unique to this process and call.
pub fn unique_schema(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let tag: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(24)
        .collect();
    format!(
        "t_{tag}_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn options(tag: &str) -> PostgresOptions {
    PostgresOptions::new(url()).with_schema(unique_schema(tag))
}

pub async fn fresh_store(tag: &str) -> Box<PostgresStore> {
    let options = options(tag);
    Box::new(
        PostgresStore::open(options)
            .await
            .unwrap_or_else(|e| panic!("opening a fresh schema on {}: {e}", url())),
    )
}

/// A plain client on the test server, for seeding and inspecting outside the store.
pub async fn raw_client() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}
