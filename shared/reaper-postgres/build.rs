//! Compiles the database tests only when a PostgreSQL is configured: without
//! `REAPER_TEST_POSTGRES_URL` they are replaced by one test that says why they were skipped.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(reaper_test_postgres)");
    println!("cargo::rerun-if-env-changed=REAPER_TEST_POSTGRES_URL");
    if std::env::var_os("REAPER_TEST_POSTGRES_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=reaper_test_postgres");
    }
}
