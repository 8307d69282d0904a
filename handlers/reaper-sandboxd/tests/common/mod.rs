//! A real `reaper-sandboxd` child process per test — this package's own binary — with its own
//! root, a random token and a free loopback port (port 0; the test reads the printed address,
//! never sleeps), killed when dropped. The process harness itself is `reaper_e2e`'s.

// Each test binary uses its own subset of these helpers and re-exports.
#![allow(dead_code, unused_imports)]

use std::ops::{Deref, DerefMut};
use std::path::Path;

use reaper_core::journal::journal_paths;
use reaper_e2e::sandboxd::Sandboxd;

pub use reaper_e2e::sandbox::{file_exists, run_record, sh};
pub use reaper_e2e::sandboxd::{probe_options, run_agent, sandbox};
pub use reaper_e2e::util::{eventually, now_ms, process_dead, random_token, unique};

pub const BIN: &str = env!("CARGO_BIN_EXE_reaper-sandboxd");

/// A running daemon of this package (fields and `provider`/`pid`/`kill`/`terminate`/`log` are
/// `reaper_e2e`'s `Sandboxd`'s).
#[derive(Debug)]
pub struct Daemon(Sandboxd);

impl Daemon {
    /// Starts a daemon on a free loopback port with a fresh random token.
    pub async fn start(root: &Path, extra: &[&str]) -> Daemon {
        Self::start_at(root, &random_token(), "127.0.0.1:0", extra).await
    }

    /// Starts a daemon with this token on `listen`, and waits for its address line.
    pub async fn start_at(root: &Path, token: &str, listen: &str, extra: &[&str]) -> Daemon {
        Daemon(Sandboxd::launch(Path::new(BIN), root, token, listen, extra).await)
    }

    /// A raw client for requests the provider would never send.
    pub fn raw(&self) -> reqwest::Client {
        reaper_e2e::util::client()
    }
}

impl Deref for Daemon {
    type Target = Sandboxd;

    fn deref(&self) -> &Sandboxd {
        &self.0
    }
}

impl DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut Sandboxd {
        &mut self.0
    }
}

/// The journal path of `run_id` in `dir`.
pub fn journal_of(run_id: &str, dir: &Path) -> String {
    journal_paths(run_id, Some(dir.to_str().unwrap()))
        .unwrap()
        .journal
}
