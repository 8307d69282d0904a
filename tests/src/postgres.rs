//! The test PostgreSQL of `REAPER_TEST_POSTGRES_URL` (`shared/reaper-postgres/server/start.sh`;
//! required, never skipped) and a fresh database per case, so a handler that keeps its tables in
//! the default schema `reaper` runs in parallel with the other cases.

use crate::util::unique;

pub const URL_VAR: &str = "REAPER_TEST_POSTGRES_URL";

/// The server's URL; fails the test, saying how to start one, when unset.
pub fn server_url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: start a server with \
             `eval \"$(shared/reaper-postgres/server/start.sh /tmp/reaper-pg)\"`"
        )
    })
}

/// Creates database `<tag>_<unique>` on the test server and returns its URL.
pub async fn fresh_database(tag: &str) -> String {
    let url = server_url();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to the test server {url}: {e}"));
    tokio::spawn(connection);
    let name: String = format!("{tag}_{}", unique())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    client
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    let (server, _) = url
        .rsplit_once('/')
        .expect("the test server's URL names a database");
    format!("{server}/{name}")
}
