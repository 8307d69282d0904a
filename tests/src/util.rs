//! Labels, time, ports and bounded waits.

use std::time::{Duration, Instant};

/// A unique lowercase hex label (16 characters) for run ids, tables, canaries and files of one
/// case.
pub fn unique() -> String {
    let mut bytes = [0u8; 8];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("open /dev/urandom"),
        &mut bytes,
    )
    .expect("read /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh random bearer token (`tok-` and 32 hex characters).
pub fn random_token() -> String {
    format!("tok-{}{}", unique(), unique())
}

/// The wall-clock time in ms since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis() as i64
}

/// A loopback port that was free a moment ago, for programs that must be told a real port
/// (with 0 some print 0 rather than the port they bound).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// Polls a real condition every 20 ms until it holds or `within` passes; returns whether it
/// held. A bound on a real event, never a sleep standing in for one.
pub async fn eventually<F, Fut>(within: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a process is gone or a zombie (dead, waiting for a reaper that may never come).
pub fn process_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat[stat.rfind(')').map_or(0, |i| i + 1)..]
                .split_whitespace()
                .next()
                .unwrap_or("");
            state == "Z" || state == "X"
        }
    }
}

/// An HTTP client for loopback servers: no proxy from the environment gets in the way.
#[cfg(feature = "sandboxd")]
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("build an HTTP client")
}

/// Sends SIGTERM to `child` and waits up to 30 s for it to exit; `what` names it in the
/// failure ("the daemon", "the function").
#[cfg(feature = "sandboxd")]
pub async fn terminate(child: &mut tokio::process::Child, what: &str) -> std::process::ExitStatus {
    let pid = child
        .id()
        .unwrap_or_else(|| panic!("{what} is still running"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap_or_else(|e| panic!("SIGTERM to {what} ({pid}): {e}"));
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap_or_else(|_| panic!("{what} exited within 30 s of SIGTERM"))
        .unwrap_or_else(|e| panic!("waiting for {what}: {e}"))
}
