//! The daemon's own guarantees against the real binary: the token, the bounds, the refusal to
//! run anything outside a live sandbox, graceful shutdown.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{eventually, process_dead, random_token, sandbox, unique, Daemon, BIN};
use reaper_core::{ExecOptions, SandboxError, SandboxHandle, SandboxProvider};
use reaper_http_sandbox::{HttpProviderConfig, HttpSandboxProvider};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends raw bytes (paths no client library would send unnormalised) and returns the status and
/// the body.
async fn raw_http(addr: &str, request: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

fn error_code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    v["error"]["code"].as_str().unwrap().to_string()
}

async fn count_sandboxes(daemon: &Daemon) -> usize {
    std::fs::read_dir(&daemon.root)
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test]
async fn missing_wrong_and_near_miss_tokens_get_401_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    let sbx = provider.create(&Default::default()).await.unwrap();
    let canary = tmp.path().join("canary");
    let t = daemon.token.clone();
    let mut one_off = t.clone().into_bytes();
    *one_off.last_mut().unwrap() ^= 1;
    let near_misses: Vec<Option<String>> = vec![
        None,
        Some(format!("Bearer {}", random_token())),
        Some(format!("Bearer {}", String::from_utf8(one_off).unwrap())),
        Some(format!("Bearer {}", &t[..t.len() - 1])),
        Some(format!("Bearer {}", &t[..8])),
        Some(format!("Bearer {t}x")),
        Some(format!("Bearer {}", t.to_uppercase())),
        Some(format!("Bearer  {t}")),
        Some(format!("Bearer {t}\t{t}")),
        Some(format!("Bearer\t{t}")),
        Some(format!("Token {t}")),
        Some(format!("Basic {t}")),
        Some(t.clone()),
        Some("Bearer ".into()),
    ];
    let touch = json!({"command": format!("touch {}", canary.display())});
    let agent = json!({"runId": "r", "command": format!("touch {}", canary.display())});
    let sid = sbx.id();
    let requests: Vec<(reqwest::Method, String, Option<Value>)> = vec![
        (
            reqwest::Method::POST,
            "/v1/sandboxes".into(),
            Some(json!({})),
        ),
        (reqwest::Method::GET, format!("/v1/sandboxes/{sid}"), None),
        (
            reqwest::Method::DELETE,
            format!("/v1/sandboxes/{sid}"),
            None,
        ),
        (
            reqwest::Method::POST,
            format!("/v1/sandboxes/{sid}/exec"),
            Some(touch),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/sandboxes/{sid}/agents"),
            Some(agent),
        ),
    ];
    let client = daemon.raw();
    for header in &near_misses {
        for (method, path, body) in &requests {
            let mut request =
                client.request(method.clone(), format!("{}{path}?token={t}", daemon.url));
            if let Some(h) = header {
                request = request.header("authorization", h);
            }
            if let Some(b) = body {
                request = request.json(b);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with {header:?}");
            assert!(response.headers().contains_key("www-authenticate"));
            assert_eq!(error_code(&response.text().await.unwrap()), "unauthorized");
        }
    }
    assert!(!canary.exists(), "a refused request ran its command");
    assert_eq!(
        count_sandboxes(&daemon).await,
        1,
        "a refused request created a sandbox"
    );
    assert!(
        provider.resume(sid).await.unwrap().is_some(),
        "a refused DELETE destroyed it"
    );
    assert!(sbx.status().await.unwrap().unwrap().agents.is_empty());

    // Trailing whitespace is not part of a header value (RFC 9110 5.5): the HTTP parser strips
    // it, so `Bearer <token> ` is the token itself. Leading padding (above) is refused.
    let padded = client
        .get(format!("{}/v1/sandboxes/{sid}", daemon.url))
        .header("authorization", format!("Bearer {t} "))
        .send()
        .await
        .unwrap();
    assert_eq!(padded.status(), 200);
    // The scheme is case-insensitive (RFC 9110); the token is not.
    let ok = client
        .get(format!("{}/v1/sandboxes/{sid}", daemon.url))
        .header("authorization", format!("bEARER {t}"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

#[tokio::test]
async fn the_http_provider_with_a_wrong_token_is_refused_with_a_message_about_the_token() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let wrong =
        HttpSandboxProvider::new(HttpProviderConfig::new(&daemon.url, random_token())).unwrap();
    match wrong.create(&Default::default()).await {
        Err(SandboxError::Refused(m)) => assert!(m.contains("token is wrong"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    let sbx = daemon.provider().create(&Default::default()).await.unwrap();
    assert!(matches!(
        wrong.resume(sbx.id()).await,
        Err(SandboxError::Refused(_))
    ));
    assert!(matches!(
        wrong.destroy(sbx.id()).await,
        Err(SandboxError::Refused(_))
    ));
    assert!(daemon.provider().resume(sbx.id()).await.unwrap().is_some());
    // Health needs no token.
    assert_eq!(wrong.health().await.unwrap().api, "v1");
}

/// Runs the binary to its exit and returns (success, stdout, stderr).
async fn start_expecting_exit(token_env: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(BIN);
    command
        .arg("--root")
        .arg(tmp.path().join("s"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("REAPER_SANDBOXD_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(t) = token_env {
        command.env("REAPER_SANDBOXD_TOKEN", t);
    }
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("the daemon refused to start within 30 s instead of serving")
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_bad_token_is_refused_with_the_sentence_every_binary_gives() {
    for bad in [
        "short-token",
        "0123456789abcdef-token\n",
        "0123456789abcdef token",
    ] {
        let (ok, _, stderr) = start_expecting_exit(Some(bad), &[]).await;
        assert!(!ok, "started with {bad:?}");
        let sentence = reaper_core::settings::check_token("REAPER_SANDBOXD_TOKEN", bad)
            .unwrap_err()
            .to_string();
        assert!(stderr.contains(&sentence), "{bad:?}: {stderr}");
    }
    // A token file names the file in the same sentence.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("token");
    std::fs::write(&file, "short-token\n").unwrap();
    let (ok, _, stderr) =
        start_expecting_exit(None, &["--token-file", file.to_str().unwrap()]).await;
    assert!(!ok);
    let sentence = reaper_core::settings::check_token(
        &format!("the token in --token-file {}", file.display()),
        "short-token",
    )
    .unwrap_err()
    .to_string();
    assert!(stderr.contains(&sentence), "{stderr}");
}

#[tokio::test]
async fn the_daemon_refuses_to_start_without_a_usable_token_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("token");
    std::fs::write(&file, "0123456789abcdef-token\n").unwrap();
    let file_arg = file.to_str().unwrap();
    let cases: Vec<(Option<&str>, Vec<&str>, &str)> = vec![
        (None, vec![], "no token"),
        (Some(""), vec![], "no token"),
        (Some("short-token"), vec![], "is too short (length 11)"),
        (
            Some(" 0123456789abcdef-token"),
            vec![],
            "whitespace before or after",
        ),
        (
            Some("0123456789abcdef-token "),
            vec![],
            "whitespace before or after",
        ),
        (Some("0123456789abcdef token"), vec![], "contains a space"),
        (
            Some("0123456789abcdef-token"),
            vec!["--token-file", file_arg],
            "one way only",
        ),
        (
            None,
            vec!["--token-file", "/nonexistent/token"],
            "cannot read",
        ),
    ];
    for (env, args, expected) in cases {
        let (ok, stdout, stderr) = start_expecting_exit(env, &args).await;
        assert!(!ok, "started with {env:?} {args:?}");
        assert!(stdout.is_empty(), "it listened: {stdout}");
        assert!(stderr.contains(expected), "{env:?} {args:?}: {stderr}");
    }
    // A token file with one trailing newline is fine.
    let mut command = tokio::process::Command::new(BIN);
    command
        .arg("--root")
        .arg(tmp.path().join("s"))
        .args(["--listen", "127.0.0.1:0", "--token-file", file_arg])
        .env_remove("REAPER_SANDBOXD_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut first = [0u8; 12];
    child
        .stdout
        .take()
        .unwrap()
        .read_exact(&mut first)
        .await
        .unwrap();
    assert_eq!(&first, b"listening on");
}

#[tokio::test]
async fn a_backend_missing_its_setting_refuses_to_start_and_says_what_to_pass() {
    // The backend from its default and from the environment: clap alone misses both.
    let cases = [
        (None, "--backend local (the default) needs --root"),
        (Some("docker"), "--backend docker needs --docker-image"),
    ];
    for (backend, expected) in cases {
        let mut command = tokio::process::Command::new(BIN);
        command
            .args(["--listen", "127.0.0.1:0"])
            .env_clear()
            .env("REAPER_SANDBOXD_TOKEN", random_token())
            .kill_on_drop(true);
        if let Some(b) = backend {
            command.env("REAPER_SANDBOXD_BACKEND", b);
        }
        let output = tokio::time::timeout(Duration::from_secs(30), command.output())
            .await
            .expect("the daemon refused to start within 30 s instead of serving")
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{backend:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{backend:?}: it listened");
        assert!(stderr.contains(expected), "{backend:?}: {stderr}");
    }
}

#[tokio::test]
async fn the_token_never_appears_in_the_daemon_log() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &["--log-json"]).await;
    let provider = daemon.provider();
    let sbx = sandbox(&provider, &tmp.path().join("j")).await;
    sbx.exec("echo hi", ExecOptions::default()).await.unwrap();
    let near_miss = format!("{}Z", daemon.token);
    let response = daemon
        .raw()
        .get(format!("{}/v1/sandboxes/{}", daemon.url, sbx.id()))
        .header("authorization", format!("Bearer {near_miss}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    provider.destroy(sbx.id()).await.unwrap();
    let log = daemon.log();
    assert!(
        log.contains("sandbox destroyed"),
        "the log is not being written: {log}"
    );
    assert!(log.contains("refused: missing or wrong bearer token"));
    assert!(!log.contains(&daemon.token[4..]), "the token is in the log");
    for line in log.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
}

#[tokio::test]
async fn request_bodies_over_the_limit_are_413_whether_declared_or_chunked_and_run_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let sbx = daemon.provider().create(&Default::default()).await.unwrap();
    let canary = tmp.path().join("canary");
    let padding = " ".repeat(2 * 1024 * 1024);
    let body = format!(r#"{{"command":"touch {}{padding}"}}"#, canary.display());
    let url = format!("{}/v1/sandboxes/{}/exec", daemon.url, sbx.id());

    let response = daemon
        .raw()
        .post(&url)
        .bearer_auth(&daemon.token)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let text = response.text().await.unwrap();
    assert_eq!(error_code(&text), "payload-too-large");
    assert!(text.contains("1048576-byte limit"), "{text}");

    // Chunked: no Content-Length, so the limit is enforced while reading.
    let mut stream = tokio::net::TcpStream::connect(&daemon.addr).await.unwrap();
    let head = format!(
        "POST /v1/sandboxes/{}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        sbx.id(),
        daemon.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // The writer is handed back, not dropped: dropping it half-closes the socket, which the
    // server may take for a client that left.
    let send = tokio::spawn(async move {
        for chunk in body.as_bytes().chunks(64 * 1024) {
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
            if writer.write_all(&framed).await.is_err() {
                return writer;
            }
        }
        let _ = writer.write_all(b"0\r\n\r\n").await;
        writer
    });
    let mut response = Vec::new();
    reader.read_to_end(&mut response).await.unwrap();
    drop(send.await.unwrap());
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("payload-too-large"));
    assert!(!canary.exists(), "an oversized request ran its command");

    // Exactly at the limit is read and parsed: the command is then refused for being longer
    // than one process argument may be, not for the body's size.
    let at_limit = format!(r#"{{"command":"true{}"}}"#, " ".repeat(1024 * 1024 - 18));
    assert_eq!(at_limit.len(), 1024 * 1024);
    let response = daemon
        .raw()
        .post(&url)
        .bearer_auth(&daemon.token)
        .body(at_limit)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let text = response.text().await.unwrap();
    assert_eq!(error_code(&text), "invalid-request");
    assert!(text.contains("one argument"), "{text}");
    let longest = format!(
        r#"{{"command":"true{}"}}"#,
        " ".repeat(reaper_sandboxd::server::MAX_SCRIPT_BYTES - 4)
    );
    let response = daemon
        .raw()
        .post(&url)
        .bearer_auth(&daemon.token)
        .body(longest)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn exec_output_over_the_limit_is_a_clear_error_never_a_truncation() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &["--max-output-bytes", "1000"]).await;
    let sbx = daemon.provider().create(&Default::default()).await.unwrap();
    let exact = sbx
        .exec(
            "head -c 1000 /dev/zero | tr '\\0' a",
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(exact.stdout.len(), 1000);
    for (command, expected) in [("head -c 1001 /dev/zero", "stdout"), ("yes >&2", "stderr")] {
        match sbx.exec(command, ExecOptions { timeout_ms: 10_000 }).await {
            Err(SandboxError::OutputLimit { stream, limit }) => {
                assert_eq!(limit, 1000, "{command}");
                assert_eq!(stream, expected, "{command}: the stream the daemon names");
            }
            other => panic!("{command}: expected an output-limit error, got {other:?}"),
        }
    }
    let response = daemon
        .raw()
        .post(format!("{}/v1/sandboxes/{}/exec", daemon.url, sbx.id()))
        .bearer_auth(&daemon.token)
        .json(&json!({"command": "head -c 5000 /dev/zero"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    assert_eq!(
        error_code(&response.text().await.unwrap()),
        "output-limit-exceeded"
    );
}

#[tokio::test]
async fn a_response_over_the_clients_limit_is_refused_not_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let mut config = HttpProviderConfig::new(&daemon.url, &daemon.token);
    config.max_response_bytes = 500;
    let small = HttpSandboxProvider::new(config).unwrap();
    let sbx = small.create(&Default::default()).await.unwrap();
    assert_eq!(
        sbx.exec("echo hi", ExecOptions::default())
            .await
            .unwrap()
            .stdout,
        "hi\n"
    );
    match sbx
        .exec("head -c 1000 /dev/zero", ExecOptions::default())
        .await
    {
        Err(SandboxError::Other(m)) => assert!(m.contains("500-byte limit"), "{m}"),
        other => panic!("expected a response-limit error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_exec_past_its_timeout_is_a_timeout_and_its_process_group_is_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let sbx = daemon.provider().create(&Default::default()).await.unwrap();
    let started = std::time::Instant::now();
    let result = sbx
        .exec(
            "sleep 60 & echo $! > bg.pid; sleep 60",
            ExecOptions { timeout_ms: 300 },
        )
        .await;
    assert!(
        matches!(result, Err(SandboxError::Timeout(300))),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let bg: u32 = std::fs::read_to_string(daemon.root.join(sbx.id()).join("work/bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async move { process_dead(bg) }).await,
        "the timed-out command's background child survived"
    );
    for timeout in [json!(0), json!(600_001), json!(-1), json!(1.5), json!("9")] {
        let response = daemon
            .raw()
            .post(format!("{}/v1/sandboxes/{}/exec", daemon.url, sbx.id()))
            .bearer_auth(&daemon.token)
            .json(&json!({"command": "true", "timeoutMs": timeout}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "timeoutMs {timeout}");
    }
}

#[tokio::test]
async fn no_command_runs_outside_a_live_sandbox() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let provider = daemon.provider();
    // A directory that looks like a sandbox next to the root: a traversal would run there.
    let victim = tmp.path().join("victim");
    std::fs::create_dir_all(victim.join("work")).unwrap();
    std::fs::write(
        victim.join("sandbox.json"),
        r#"{"id":"victim","createdAt":0,"journalDir":"/tmp","agents":[]}"#,
    )
    .unwrap();
    let canary = tmp.path().join(format!("canary-{}", unique()));
    let body = format!(r#"{{"command":"touch {}"}}"#, canary.display());
    let agent_body = format!(r#"{{"runId":"r","command":"touch {}"}}"#, canary.display());
    for (path, expected) in [
        ("/v1/sandboxes/..%2Fvictim/exec", 400),
        ("/v1/sandboxes/../victim/exec", 404),
        ("/v1/sandboxes/%2e%2e/exec", 400),
        ("/v1/sandboxes/../exec", 400),
        ("/v1/sandboxes/.hidden/exec", 400),
        ("/v1/sandboxes/a%00b/exec", 400),
        ("/v1/sandboxes/%2Ftmp/exec", 400),
        ("/v1/sandboxes/sbx-0000000000000000/exec", 404),
        ("/v1/sandboxes/..%2Fvictim/agents", 400),
        ("/v1/sandboxes/sbx-0000000000000000/agents", 404),
    ] {
        let payload = if path.ends_with("agents") {
            &agent_body
        } else {
            &body
        };
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{payload}",
            daemon.token,
            payload.len()
        );
        let (status, response) = raw_http(&daemon.addr, request.as_bytes()).await;
        assert_eq!(status, expected, "{path}: {response}");
    }
    // A destroyed sandbox is gone for good.
    let sbx = provider.create(&Default::default()).await.unwrap();
    provider.destroy(sbx.id()).await.unwrap();
    let touch = format!("touch {}", canary.display());
    assert!(matches!(
        sbx.exec(&touch, ExecOptions::default()).await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        sbx.start_agent("r", &touch, None).await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(provider.resume(sbx.id()).await.unwrap().is_none());
    assert!(!canary.exists(), "a command ran outside a live sandbox");
    assert!(victim.join("sandbox.json").exists());
}

#[tokio::test]
async fn malformed_bodies_are_400_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(tmp.path(), &[]).await;
    let sbx = daemon.provider().create(&Default::default()).await.unwrap();
    let base = format!("{}/v1/sandboxes", daemon.url);
    let long_agent = format!(r#"{{"runId":"r","command":"{}"}}"#, "x".repeat(200_000));
    let cases = [
        (format!("{base}/{}/exec", sbx.id()), "not json"),
        (format!("{base}/{}/exec", sbx.id()), r#"{"cmd":"true"}"#),
        (
            format!("{base}/{}/exec", sbx.id()),
            r#"{"command":"a\u0000b"}"#,
        ),
        (format!("{base}/{}/exec", sbx.id()), ""),
        (
            format!("{base}/{}/agents", sbx.id()),
            r#"{"runId":"","command":"true"}"#,
        ),
        (
            format!("{base}/{}/agents", sbx.id()),
            r#"{"runId":"r","command":"true","journalDir":"relative"}"#,
        ),
        (base.clone(), r#"{"journalDir":"/tmp/../etc"}"#),
        (base.clone(), r#"{"unknown":1}"#),
        (base.clone(), "[]"),
        (format!("{base}/{}/exec", sbx.id()), r#"["true"]"#),
    ];
    let cases = cases
        .into_iter()
        .chain([(format!("{base}/{}/agents", sbx.id()), long_agent.as_str())]);
    for (url, body) in cases {
        let response = daemon
            .raw()
            .post(&url)
            .bearer_auth(&daemon.token)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            400,
            "{url} {}",
            &body[..body.len().min(80)]
        );
        assert_eq!(
            error_code(&response.text().await.unwrap()),
            "invalid-request"
        );
    }
    assert_eq!(count_sandboxes(&daemon).await, 1);
}

#[tokio::test]
async fn sigterm_stops_the_daemon_cleanly_and_its_agents_keep_running() {
    let tmp = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::start(tmp.path(), &[]).await;
    let sbx = daemon.provider().create(&Default::default()).await.unwrap();
    let agent = sbx.start_agent("r-live", "sleep 60", None).await.unwrap();
    let status = daemon.terminate().await;
    assert!(status.success(), "{status:?}");
    assert!(daemon.log().contains("shutting down"));
    assert!(!process_dead(agent.pid), "the agent died with the daemon");
    // Clean up the agent's group (its keeper's) ourselves: no daemon is left to destroy it.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", agent.pid)).unwrap();
    let pgid: i32 = stat
        .rsplit_once(") ")
        .unwrap()
        .1
        .split(' ')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            process_dead(agent.pid)
        })
        .await
    );
}

#[tokio::test]
async fn a_destroy_the_sandbox_refuses_is_a_reported_error_and_the_sandbox_stays() {
    let tmp = tempfile::tempdir().unwrap();
    // The fault-injection file is honoured only by a daemon told to (tests and demos).
    let daemon = Daemon::start(tmp.path(), &["--honor-destroy-fails-flag"]).await;
    let provider = daemon.provider();
    let sbx = provider.create(&Default::default()).await.unwrap();
    let flag = daemon
        .root
        .join(sbx.id())
        .join(reaper_local::DESTROY_FAILS_FLAG);
    std::fs::write(&flag, "").unwrap();
    match provider.destroy(sbx.id()).await {
        Err(SandboxError::Refused(m)) => assert!(m.contains("destroy-refused"), "{m}"),
        other => panic!("expected a refused destroy, got {other:?}"),
    }
    assert!(provider.resume(sbx.id()).await.unwrap().is_some());
    std::fs::remove_file(&flag).unwrap();
    provider.destroy(sbx.id()).await.unwrap();
    assert!(provider.resume(sbx.id()).await.unwrap().is_none());
    // Destroying what is already gone is success: a retried reclaim must not fail.
    provider.destroy(sbx.id()).await.unwrap();
}

#[tokio::test]
async fn zero_limits_are_refused_at_start_up_with_exit_2_naming_the_flag() {
    use tokio::io::AsyncBufReadExt;
    for flag in [
        "--max-output-bytes",
        "--max-body-bytes",
        "--max-exec-timeout-ms",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new(BIN)
            .arg("--root")
            .arg(tmp.path().join("s"))
            .args(["--listen", "127.0.0.1:0", flag, "0"])
            .env("REAPER_SANDBOXD_TOKEN", random_token())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // A daemon that starts prints its address line; one that refuses closes stdout silent.
        let mut first = String::new();
        tokio::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .await
            .unwrap();
        assert_eq!(first, "", "{flag} 0 was accepted: {first}");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .await
            .unwrap();
        let status = child.wait().await.unwrap();
        assert_eq!(status.code(), Some(2), "{flag} 0: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("at least 1"),
            "{flag} 0: {stderr}"
        );
    }
}
