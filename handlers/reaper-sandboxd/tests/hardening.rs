//! The daemon against a hostile user: slow and silent connections, more execs than it runs at
//! once, a sandbox that tries to make its own destroy fail, processes an exec backgrounded, a
//! 100 MB line.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, process_dead, sandbox, Daemon};
use reaper_core::probe::probe_run_exit;
use reaper_core::{ExecOptions, RunExitProbe, SandboxError, SandboxHandle, SandboxProvider};
use reaper_http_sandbox::api::codes;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection (EOF or reset); `false` if it is still open
/// after `within`.
async fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let read_to_end = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read_to_end).await.is_ok()
}

#[tokio::test]
async fn a_connection_that_never_sends_its_headers_is_closed_after_the_header_read_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &["--header-read-timeout-ms", "300"]).await;

    let mut silent = TcpStream::connect(&daemon.addr).await.unwrap();
    let started = Instant::now();
    assert!(
        closed_by_server(&mut silent, Duration::from_secs(15)).await,
        "a silent connection was kept open"
    );
    println!("silent connection closed after {:?}", started.elapsed());

    // A slowloris: a request line trickled a byte at a time, never finished.
    let mut trickle = TcpStream::connect(&daemon.addr).await.unwrap();
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    let mut closed = false;
    for byte in b"GET /v1/healthz HTTP/1.1\r\nX-Slow: "
        .iter()
        .cycle()
        .take(400)
    {
        ticks.tick().await;
        if trickle.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
    }
    assert!(
        closed || closed_by_server(&mut trickle, Duration::from_secs(1)).await,
        "a trickling client kept its connection for {:?}",
        started.elapsed()
    );
    println!("trickling connection closed after {:?}", started.elapsed());

    // A client that sends its request in time is served as before.
    assert_eq!(daemon.provider().health().await.unwrap().status, "ok");
}

/// Sends one whole request on `stream` and reads until the server closes it: the answer's
/// status line, or `None` when the connection was closed without one.
async fn request(stream: &mut TcpStream, head: &str) -> Option<String> {
    if stream.write_all(head.as_bytes()).await.is_err() {
        return None;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    answer.lines().next().map(str::to_string)
}

#[tokio::test]
async fn a_client_that_connected_before_a_churn_of_unauthenticated_connections_is_served_after_waiting_to_send_its_head(
) {
    let tmp = tempfile::tempdir().unwrap();
    // A header window far longer than the test: only the cap decides who stays.
    let daemon = Daemon::start(
        tmp.path(),
        &[
            "--max-connections",
            "4",
            "--header-read-timeout-ms",
            "600000",
        ],
    )
    .await;
    let mut legitimate = TcpStream::connect(&daemon.addr).await.unwrap();
    let mut churn = Vec::new();
    for _ in 0..200 {
        churn.push(TcpStream::connect(&daemon.addr).await.unwrap());
    }
    // The daemon accepts in order: once this last connection has its outcome (an answer, or
    // closed), every connection before it has been admitted or refused. No clock involved.
    let mut last = TcpStream::connect(&daemon.addr).await.unwrap();
    let outcome = request(
        &mut last,
        "GET /v1/healthz HTTP/1.1\r\nHost: sandboxd\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(outcome, None, "a connection beyond the cap was served");
    // Only now does the waiting client send its head.
    let head = format!(
        "GET /v1/healthz HTTP/1.1\r\nHost: sandboxd\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        daemon.token
    );
    let answer = request(&mut legitimate, &head).await;
    assert_eq!(
        answer.as_deref(),
        Some("HTTP/1.1 200 OK"),
        "the waiting client lost its connection to the churn"
    );
    drop(churn);
}

#[tokio::test]
async fn connections_beyond_the_cap_are_refused_and_a_token_holder_gets_in_once_the_slow_ones_header_window_ends(
) {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        tmp.path(),
        &[
            "--max-connections",
            "32",
            "--header-read-timeout-ms",
            "1000",
        ],
    )
    .await;
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(&daemon.addr).await.unwrap();
        // A refused connection may already be closed: the write's outcome does not matter.
        let _ = stream.write_all(b"POST /v1/sandboxes HTT").await;
        slow.push(stream);
    }
    // Every slow connection ends: the refused ones at once, the admitted ones when their header
    // window does. The bound is a hang guard only.
    for stream in &mut slow {
        assert!(
            closed_by_server(stream, Duration::from_secs(120)).await,
            "a slow connection was kept open past its header window"
        );
    }
    let served = reaper_e2e::util::eventually(Duration::from_secs(120), || async {
        let provider = daemon.provider();
        let Ok(sbx) = provider.create(&Default::default()).await else {
            return false;
        };
        sbx.exec("echo served", ExecOptions::default())
            .await
            .is_ok_and(|out| out.stdout == "served\n")
    })
    .await;
    assert!(
        served,
        "a token holder was never served after the slow connections left"
    );
}

#[tokio::test]
async fn execs_beyond_the_concurrency_cap_get_503_with_retry_after_and_a_probe_says_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &["--max-concurrent-execs", "2"]).await;
    let provider = daemon.provider();
    let journals = tmp.path().join("journals");
    let sbx = sandbox(&provider, &journals).await;
    let mut running = Vec::new();
    for n in 0..2 {
        let sbx = sbx.clone();
        running.push(tokio::spawn(async move {
            sbx.exec(
                &format!("touch started-{n}; exec sleep 60"),
                ExecOptions { timeout_ms: 60_000 },
            )
            .await
        }));
    }
    let work = daemon.root.join(sbx.id()).join("work");
    assert!(
        eventually(Duration::from_secs(20), || async {
            work.join("started-0").exists() && work.join("started-1").exists()
        })
        .await
    );

    let response = daemon
        .raw()
        .post(format!("{}/v1/sandboxes/{}/exec", daemon.url, sbx.id()))
        .bearer_auth(&daemon.token)
        .json(&serde_json::json!({"command": "touch ran"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], codes::TOO_MANY_EXECS);
    assert!(!work.join("ran").exists(), "a refused exec ran");

    // Through the provider: retryable, and a probe answers `unknown`, never `finished`.
    let refused = sbx.exec("true", ExecOptions::default()).await;
    assert!(
        matches!(&refused, Err(SandboxError::Unreachable(m)) if m.contains(codes::TOO_MANY_EXECS)),
        "{refused:?}"
    );
    let probe = probe_run_exit(&sbx, "busy-run", &common::probe_options(&journals)).await;
    assert!(
        matches!(&probe, RunExitProbe::Unknown { error: Some(e) } if e.contains(codes::TOO_MANY_EXECS)),
        "{probe:?}"
    );

    // Destroy ends the two execs; their slots are free again.
    provider.destroy(sbx.id()).await.unwrap();
    for exec in running {
        let _ = exec.await.unwrap();
    }
    let other = sandbox(&provider, &journals).await;
    let out = other
        .exec("echo again", ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.stdout, "again\n");
}

#[tokio::test]
async fn an_agent_cannot_make_its_own_sandbox_indestructible_in_a_production_daemon() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    let sbx = sandbox(&provider, &tmp.path().join("journals")).await;
    let started = sbx
        .start_agent("hostile", "touch ../.destroy-fails; exec sleep 1000", None)
        .await
        .unwrap();
    let flag = daemon
        .root
        .join(sbx.id())
        .join(reaper_local::DESTROY_FAILS_FLAG);
    assert!(eventually(Duration::from_secs(10), || async { flag.exists() }).await);
    provider.destroy(sbx.id()).await.unwrap();
    assert!(provider.resume(sbx.id()).await.unwrap().is_none());
    assert!(
        eventually(Duration::from_secs(10), || async {
            process_dead(started.pid)
        })
        .await
    );
}

#[tokio::test]
async fn delete_kills_every_process_an_exec_backgrounded() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    let sbx = sandbox(&provider, &tmp.path().join("journals")).await;
    let mut pids = Vec::new();
    for script in [
        "sleep 1000 >/dev/null 2>&1 & echo $!",
        "nohup sleep 1000 >/dev/null 2>&1 & echo $!",
        "setsid sh -c 'echo $$ > s.pid; exec sleep 1000' >/dev/null 2>&1 </dev/null & \
         while [ ! -s s.pid ]; do sleep 0.01; done; cat s.pid",
    ] {
        let out = sbx.exec(script, ExecOptions::default()).await.unwrap();
        let pid: u32 = out.stdout.trim().parse().unwrap();
        assert!(!process_dead(pid), "{script}: nothing left behind");
        pids.push(pid);
    }
    provider.destroy(sbx.id()).await.unwrap();
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(10), || async { process_dead(pid) }).await,
            "pid {pid} survived DELETE"
        );
    }
}

/// `VmHWM` (peak resident set) of a process, in KiB.
fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

#[tokio::test]
async fn a_100_mb_line_is_the_output_limit_error_and_the_daemon_stays_small() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    let sbx = sandbox(&provider, &tmp.path().join("journals")).await;
    let before = peak_rss_kib(daemon.pid());
    let result = sbx
        .exec(
            "head -c 100000000 /dev/zero | tr '\\0' a",
            ExecOptions {
                timeout_ms: 120_000,
            },
        )
        .await;
    assert!(
        matches!(&result, Err(SandboxError::OutputLimit { .. })),
        "{result:?}"
    );
    let after = peak_rss_kib(daemon.pid());
    println!("sandboxd peak RSS: {before} KiB before, {after} KiB after a 100 MB line");
    // The default limit is 4 MiB per stream: the peak must stay far below the line's size.
    assert!(
        after < 64 * 1024,
        "sandboxd peaked at {after} KiB reading a 100 MB line"
    );
}
