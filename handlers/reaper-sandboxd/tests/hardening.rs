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

#[tokio::test]
async fn more_slow_connections_than_the_cap_do_not_lock_out_a_token_holder() {
    let tmp = tempfile::tempdir().unwrap();
    // A header timeout far longer than the test: only the cap's eviction can make room.
    let daemon = Daemon::start(
        tmp.path(),
        &[
            "--max-connections",
            "32",
            "--header-read-timeout-ms",
            "600000",
        ],
    )
    .await;
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(&daemon.addr).await.unwrap();
        stream.write_all(b"POST /v1/sandboxes HTT").await.unwrap();
        slow.push(stream);
    }
    let started = Instant::now();
    let served = tokio::time::timeout(Duration::from_secs(20), async {
        let provider = daemon.provider();
        let sbx = provider.create(&Default::default()).await?;
        sbx.exec("echo served", ExecOptions::default()).await
    })
    .await
    .expect("a token holder was not served while slow connections were open")
    .unwrap();
    assert_eq!(served.stdout, "served\n");
    println!(
        "served a token holder in {:?} with 200 slow connections open",
        started.elapsed()
    );
    // Connections beyond the cap were closed, not kept.
    let mut closed = 0;
    for stream in &mut slow {
        if closed_by_server(stream, Duration::from_millis(50)).await {
            closed += 1;
        }
    }
    assert!(
        closed >= 200 - 32,
        "only {closed} of 200 slow connections were closed"
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
