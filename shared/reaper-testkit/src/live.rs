//! Live conformance: a hosted provider's suite against the real service, when the user supplies
//! credentials in the environment (`REAPER_LIVE_<PROVIDER>_API_KEY`). Without them every case
//! skips and says so on the terminal, not only in captured test output.

use std::io::Write;
use std::sync::Once;

/// The value of `var`, or `None` after printing why the live `provider` suite is skipped.
///
/// The message goes straight to the process's stderr, which the test harness does not capture,
/// so `cargo test` shows the skip even for a passing test.
pub fn credential(var: &str, provider: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => Some(value.trim().to_string()),
        _ => {
            // Once per test binary: every case of the suite asks.
            static SAID: Once = Once::new();
            SAID.call_once(|| {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "SKIPPED: live {provider} conformance: {var} is not set. Set it to an API \
                     key of {provider} to run the provider suite against the real service (it \
                     creates and destroys sandboxes on that account)."
                );
            });
            None
        }
    }
}

/// An optional setting of a live suite (a base URL, a template), `default` when unset.
pub fn setting(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}
