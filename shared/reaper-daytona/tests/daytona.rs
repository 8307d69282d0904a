//! What only the Daytona provider does, through the fake Daytona (real HTTP, every exchange
//! checked against the stored OpenAPI documents): Daytona's states, its recorded error shapes
//! (404 gone, 401/403, 409, 429 with Retry-After, 5xx, a stalled answer), the request an exec
//! sends, the key kept secret, a journal probe end to end, and the requests per probe and per
//! reclaim.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{handle, FakeDaytona, KEY, MISSING_ID};
use reaper_core::journal::{journal_paths, journaled_command, shell_quote};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{JournalExitProbe, ProbeOptions};
use reaper_core::reap::{reap_detached_runs, ReapDeps, ReapOptions, ReapOutcome, SandboxFate};
use reaper_core::reclaim::SandboxReclaimer;
use reaper_core::secret::Secret;
use reaper_core::{
    ExecOptions, ExitProbe, MessageStore, Reclaim, ReclaimIntent, Reclaimed, RunExitProbe,
    RunStatus, RunStore, SandboxError, SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore,
    SandboxProvider,
};
use reaper_daytona::{DaytonaConfig, DaytonaProvider, DEFAULT_OUTPUT_LIMIT, PROVIDER_NAME};
use reaper_e2e::sandbox::run_record;
use reaper_e2e::util::{now_ms, unique};
use reaper_fake_api::Fault;
use reaper_http_sandbox::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use reaper_local::{SystemClock, TokioSleeper};
use serde_json::json;

fn exec_opts(timeout_ms: u64) -> ExecOptions {
    ExecOptions { timeout_ms }
}

fn api_error(status: u16, message: &str) -> serde_json::Value {
    json!({
        "path": "/sandbox/x",
        "timestamp": "2026-06-23T12:00:00.000Z",
        "statusCode": status,
        "error": "Error",
        "message": message,
    })
}

// ---------------------------------------------------------------------------------------------
// Daytona's states.

#[tokio::test]
async fn a_started_sandbox_resumes_to_a_handle_that_runs_sh() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let sbx = handle(&fake, &id).await;
    assert_eq!(sbx.id(), id);
    let out = sbx.exec("echo $0; exit 3", exec_opts(5_000)).await.unwrap();
    assert_eq!((out.stdout.as_str(), out.exit_code), ("sh\n", 3));
    fake.assert_clean();
}

#[tokio::test]
async fn a_stopped_or_archived_sandbox_is_never_started_by_resume_and_is_still_destroyed() {
    for (state, desired) in [
        ("stopped", "stopped"),
        ("archived", "archived"),
        ("paused", "paused"),
        ("error", "started"),
    ] {
        let fake = FakeDaytona::start().await;
        let id = fake.create().await;
        fake.set_state(&id, state, desired);
        let before = fake.counts();
        let resumed = fake.provider.resume(&id).await;
        let Err(SandboxError::Refused(message)) = &resumed else {
            panic!(
                "resume of a {state} sandbox: {:?}",
                resumed.map(|h| h.map(|_| "handle"))
            );
        };
        assert!(message.contains(state), "{message}");
        assert!(message.contains("cannot be read until"), "{message}");
        // One lookup, and nothing that could start it.
        let cost = fake.counts().since(&before);
        assert_eq!((cost.get_sandbox, cost.total()), (1, 1), "{state}: {cost}");
        fake.provider.destroy(&id).await.unwrap();
        assert!(
            fake.provider.resume(&id).await.unwrap().is_none(),
            "{state}"
        );
        fake.assert_clean();
    }
}

#[tokio::test]
async fn a_sandbox_on_its_way_to_started_is_retryable() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    fake.set_state(&id, "starting", "started");
    let resumed = fake.provider.resume(&id).await;
    assert!(
        matches!(&resumed, Err(SandboxError::Unreachable(m)) if m.contains("starting")),
        "{:?}",
        resumed.map(|h| h.is_some())
    );
    fake.assert_clean();
}

#[tokio::test]
async fn a_sandbox_whose_deletion_is_under_way_is_gone() {
    let fake = FakeDaytona::start().await;
    for (state, desired) in [("started", "destroyed"), ("destroying", "destroyed")] {
        let id = fake.create().await;
        fake.set_state(&id, state, desired);
        assert!(
            fake.provider.resume(&id).await.unwrap().is_none(),
            "{state}/{desired} resumed"
        );
    }
    fake.assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Recorded error shapes.

#[tokio::test]
async fn a_404_for_the_sandbox_is_gone_on_resume_and_destroy() {
    let fake = FakeDaytona::start().await;
    assert!(fake.provider.resume(MISSING_ID).await.unwrap().is_none());
    fake.provider.destroy(MISSING_ID).await.unwrap();
    let answers: Vec<u16> = fake
        .api
        .requests()
        .iter()
        .filter_map(|r| r.status)
        .collect();
    assert_eq!(answers, [404, 404]);
    fake.assert_clean();
}

/// A wrong URL must not make every sandbox look deleted (a reclaim would then forget them).
#[tokio::test]
async fn a_404_that_is_not_daytonas_word_on_the_sandbox_is_a_configuration_error_never_gone() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    for fault in [
        // Express's answer for a route the server does not have.
        Fault::json(404, &api_error(404, "Cannot GET /sandbox/x")),
        // Something that is not Daytona at all.
        Fault::respond(404).with_header("content-type", "text/html"),
    ] {
        fake.api.inject(fault.clone().undocumented().times(2));
        let resumed = fake.provider.resume(&id).await;
        assert!(
            matches!(&resumed, Err(SandboxError::Refused(m)) if m.contains("DAYTONA_API_URL")),
            "{:?}",
            resumed.map(|h| h.is_some())
        );
        let destroyed = fake.provider.destroy(&id).await;
        assert!(
            matches!(&destroyed, Err(SandboxError::Refused(m)) if m.contains("DAYTONA_API_URL")),
            "{destroyed:?}"
        );
    }
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
    fake.assert_clean();
}

/// Daytona serves its dashboard with 200 on non-API paths: a base URL without `/api` must not
/// turn a delete into a success.
#[tokio::test]
async fn a_delete_answered_with_anything_but_the_sandbox_is_not_ok() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    for fault in [
        Fault::respond(200).with_header("content-type", "text/html"),
        Fault::json(200, &json!({"id": "another-sandbox"})),
    ] {
        fake.api.inject(fault.undocumented().on("deleteSandbox"));
        let destroyed = fake.provider.destroy(&id).await;
        assert!(
            matches!(&destroyed, Err(SandboxError::Other(_))),
            "{destroyed:?}"
        );
    }
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
    fake.provider.destroy(&id).await.unwrap();
    fake.assert_clean();
}

#[tokio::test]
async fn a_sandbox_id_that_could_change_the_url_is_refused_before_any_request() {
    let fake = FakeDaytona::start().await;
    for id in [
        "",
        "..",
        "a/b",
        "x?verbose=true",
        "a%2Fb",
        "a b",
        &"x".repeat(129),
    ] {
        let resumed = fake.provider.resume(id).await;
        assert!(
            matches!(&resumed, Err(SandboxError::Refused(m)) if m.contains("invalid Daytona sandbox id")),
            "{id:?}: {:?}",
            resumed.map(|h| h.is_some())
        );
        let destroyed = fake.provider.destroy(id).await;
        assert!(
            matches!(&destroyed, Err(SandboxError::Refused(_))),
            "{id:?}: {destroyed:?}"
        );
    }
    assert_eq!(fake.counts().total(), 0);
}

#[tokio::test]
async fn a_rejected_key_is_refused_naming_daytona_api_key_and_never_quoting_it() {
    let wrong = "dtn_wrong-key-9876543210";
    let fake = FakeDaytona::start_with(|c| c.api_key = Secret::new(wrong)).await;
    let id = fake.create().await;
    for result in [
        fake.provider.resume(&id).await.map(|_| ()),
        fake.provider.destroy(&id).await,
    ] {
        let Err(SandboxError::Refused(message)) = &result else {
            panic!("with a wrong key: {result:?}");
        };
        assert!(message.contains("HTTP 401"), "{message}");
        assert!(message.contains("check DAYTONA_API_KEY"), "{message}");
        assert!(
            !message.contains(wrong) && !message.contains(KEY),
            "{message}"
        );
    }
    fake.assert_clean();
}

#[tokio::test]
async fn a_forbidden_answer_and_a_rejected_key_at_the_toolbox_are_refused() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let sbx = handle(&fake, &id).await;
    for status in [401, 403] {
        fake.toolbox(&id).inject(
            Fault::json(status, &api_error(status, "Forbidden"))
                .undocumented()
                .on("ExecuteCommand"),
        );
        let result = sbx.exec("true", exec_opts(5_000)).await;
        assert!(
            matches!(&result, Err(SandboxError::Refused(m))
                if m.contains(&format!("HTTP {status}")) && m.contains("DAYTONA_API_KEY")),
            "{result:?}"
        );
    }
    fake.api.inject(
        Fault::json(403, &api_error(403, "Forbidden"))
            .undocumented()
            .on("deleteSandbox"),
    );
    let destroyed = fake.provider.destroy(&id).await;
    assert!(
        matches!(&destroyed, Err(SandboxError::Refused(m)) if m.contains("HTTP 403")),
        "{destroyed:?}"
    );
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
    fake.assert_clean();
}

#[tokio::test]
async fn a_409_on_destroy_is_ok_when_the_deletion_is_already_under_way() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    // A first delete was accepted (desired state destroyed); a second one meets the state change.
    fake.set_state(&id, "started", "destroyed");
    fake.api.inject(
        Fault::json(409, &api_error(409, "Sandbox state change in progress"))
            .undocumented()
            .on("deleteSandbox"),
    );
    let before = fake.counts();
    fake.provider.destroy(&id).await.unwrap();
    let cost = fake.counts().since(&before);
    assert_eq!((cost.delete_sandbox, cost.get_sandbox), (1, 1), "{cost}");
    fake.assert_clean();
}

#[tokio::test]
async fn a_409_on_destroy_of_a_sandbox_not_being_deleted_is_an_error_and_it_stays_live() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    fake.refuse_delete(&id, true);
    let destroyed = fake.provider.destroy(&id).await;
    assert!(
        matches!(&destroyed, Err(SandboxError::Refused(m))
            if m.contains("HTTP 409") && m.contains("Sandbox state change in progress")),
        "{destroyed:?}"
    );
    let sbx = handle(&fake, &id).await;
    assert_eq!(
        sbx.exec("echo alive", exec_opts(5_000))
            .await
            .unwrap()
            .stdout,
        "alive\n"
    );
    fake.refuse_delete(&id, false);
    fake.provider.destroy(&id).await.unwrap();
    fake.assert_clean();
}

#[tokio::test]
async fn a_409_on_exec_is_refused_with_daytonas_message() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let sbx = handle(&fake, &id).await;
    fake.toolbox(&id).inject(
        Fault::json(409, &api_error(409, "sandbox is busy"))
            .undocumented()
            .on("ExecuteCommand"),
    );
    let result = sbx.exec("true", exec_opts(5_000)).await;
    assert!(
        matches!(&result, Err(SandboxError::Refused(m)) if m.contains("HTTP 409") && m.contains("sandbox is busy")),
        "{result:?}"
    );
    fake.assert_clean();
}

/// Rate-limited is "not now": retryable (a probe answers `unknown`), the wait quoted for the
/// operator, and the provider does not sleep it off itself.
#[tokio::test]
async fn a_429_is_retryable_quotes_retry_after_and_does_not_sleep() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let throttled = || {
        Fault::json(
            429,
            &api_error(429, "ThrottlerException: Too Many Requests"),
        )
        .with_header("retry-after", "60")
        .undocumented()
    };
    let started = Instant::now();
    fake.api.inject(throttled().on("getSandbox"));
    let resumed = fake.provider.resume(&id).await;
    fake.api.inject(throttled().on("deleteSandbox"));
    let destroyed = fake.provider.destroy(&id).await;
    let sbx = handle(&fake, &id).await;
    fake.toolbox(&id).inject(throttled().on("ExecuteCommand"));
    let executed = sbx.exec("true", exec_opts(5_000)).await;
    assert!(started.elapsed() < Duration::from_secs(30), "it slept");
    for result in [resumed.map(|_| ()), destroyed, executed.map(|_| ())] {
        assert!(
            matches!(&result, Err(SandboxError::Unreachable(m))
                if m.contains("HTTP 429") && m.contains("Retry-After: 60")),
            "{result:?}"
        );
    }
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
    fake.assert_clean();
}

#[tokio::test]
async fn a_5xx_or_a_proxy_timeout_is_unreachable_and_a_destroy_that_got_one_is_not_ok() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    for status in [408, 500, 502, 503] {
        fake.api.inject(
            Fault::json(status, &api_error(status, "boom"))
                .undocumented()
                .times(2),
        );
        let resumed = fake.provider.resume(&id).await;
        assert!(
            matches!(&resumed, Err(SandboxError::Unreachable(m)) if m.contains(&format!("HTTP {status}"))),
            "{:?}",
            resumed.map(|h| h.is_some())
        );
        let destroyed = fake.provider.destroy(&id).await;
        assert!(
            matches!(&destroyed, Err(SandboxError::Unreachable(_))),
            "{destroyed:?}"
        );
    }
    assert!(fake.provider.resume(&id).await.unwrap().is_some());
    fake.assert_clean();
}

#[tokio::test]
async fn a_stalled_lookup_is_unreachable_after_the_request_timeout() {
    let fake = FakeDaytona::start_with(|c| c.request_timeout_ms = 300).await;
    let id = fake.create().await;
    fake.api.inject(Fault::stall().on("getSandbox"));
    let started = Instant::now();
    let resumed = fake.provider.resume(&id).await;
    assert!(
        matches!(&resumed, Err(SandboxError::Unreachable(m)) if m.contains("within 300 ms")),
        "{:?}",
        resumed.map(|h| h.is_some())
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    fake.api.inject(Fault::close().on("deleteSandbox"));
    let destroyed = fake.provider.destroy(&id).await;
    assert!(
        matches!(&destroyed, Err(SandboxError::Unreachable(_))),
        "{destroyed:?}"
    );
    fake.assert_clean();
}

#[tokio::test]
async fn a_stalled_exec_is_a_timeout_after_its_timeout_and_the_margin() {
    let fake = FakeDaytona::start_with(|c| c.exec_margin_ms = 300).await;
    let id = fake.create().await;
    let sbx = handle(&fake, &id).await;
    fake.toolbox(&id)
        .inject(Fault::stall().on("ExecuteCommand"));
    let started = Instant::now();
    let result = sbx.exec("true", exec_opts(700)).await;
    let took = started.elapsed();
    assert!(
        matches!(result, Err(SandboxError::Timeout(700))),
        "{result:?}"
    );
    // 700 ms rounds up to the toolbox's 1 s, plus the 300 ms margin.
    assert!(
        took >= Duration::from_millis(1_300) && took < Duration::from_secs(10),
        "{took:?}"
    );
    fake.assert_clean();
}

// ---------------------------------------------------------------------------------------------
// The exec request.

#[tokio::test]
async fn an_exec_sends_the_wrapped_command_with_a_whole_second_timeout_and_the_key_as_bearer() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let sbx = handle(&fake, &id).await;
    for (asked_ms, sent_s) in [(700, 1), (1_000, 1), (1_001, 2), (0, 1)] {
        fake.toolbox(&id).clear_requests();
        sbx.exec("true", exec_opts(asked_ms)).await.unwrap();
        let requests = fake.toolbox(&id).requests();
        let [request] = requests.as_slice() else {
            panic!("{} requests for one exec", requests.len());
        };
        assert_eq!(request.path, format!("/{id}/process/execute"));
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["timeout"], sent_s, "{asked_ms} ms");
        assert!(
            body["command"]
                .as_str()
                .unwrap()
                .starts_with("exec sh -c 'exec 3>&1"),
            "{body}"
        );
        assert_eq!(
            request.header("authorization"),
            Some(&*format!("Bearer {KEY}"))
        );
    }
    for request in fake.api.requests() {
        assert_eq!(
            request.header("authorization"),
            Some(&*format!("Bearer {KEY}"))
        );
    }
    fake.assert_clean();
}

#[tokio::test]
async fn a_toolbox_that_could_not_run_the_command_is_an_error_not_an_exit_code() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let sbx = handle(&fake, &id).await;
    fake.toolbox(&id).inject(
        Fault::json(
            200,
            &json!({"result": "fork/exec sh: no such file", "exitCode": -1}),
        )
        .on("ExecuteCommand"),
    );
    let result = sbx.exec("true", exec_opts(5_000)).await;
    assert!(
        matches!(&result, Err(SandboxError::Other(m)) if m.contains("could not run the command")),
        "{result:?}"
    );
    fake.assert_clean();
}

#[tokio::test]
async fn the_api_key_is_in_no_debug_output() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let sbx = fake.provider.lookup(&id).await.unwrap();
    let concrete = DaytonaProvider::new(fake.provider.config().clone()).unwrap();
    let shown = format!(
        "{:?} {:#?} {:?}",
        fake.provider,
        concrete,
        fake.provider.config()
    );
    let shown = format!("{shown} {sbx:?}");
    assert!(!shown.contains(KEY), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// The journal probe and reclaim, end to end.

/// Records a detached run whose sandbox is `id`, as a chat route would.
async fn detached(store: &MemoryStore, id: &str, run_id: &str) {
    let now = now_ms();
    let mut record = run_record(run_id, RunStatus::Running);
    record.started_at = now - 1_000;
    record.detached_since = Some(now);
    record.sandbox_key = Some(format!("key-{run_id}"));
    store.put_run(record);
    store
        .upsert(SandboxInstanceRecord {
            key: format!("key-{run_id}"),
            provider: PROVIDER_NAME.into(),
            provider_sandbox_id: id.into(),
            latest_snapshot_id: None,
            thread_id: "thread".into(),
            latest_run_id: Some(run_id.into()),
            updated_at: now,
        })
        .await
        .unwrap();
}

/// Runs an agent under the journaled wrapper through the provider, to its end.
async fn run_agent(sbx: &dyn SandboxHandle, dir: &str, run_id: &str, command: &str) {
    let paths = journal_paths(run_id, Some(dir)).unwrap();
    let out = sbx
        .exec(&journaled_command(command, &paths), ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
}

/// Starts an agent in the background through the provider (it prints one line, then works).
async fn start_agent(sbx: &dyn SandboxHandle, dir: &str, run_id: &str, command: &str) {
    let paths = journal_paths(run_id, Some(dir)).unwrap();
    let script = journaled_command(command, &paths);
    let out = sbx
        .exec(
            &format!(
                "sh -c {} >/dev/null 2>&1 </dev/null &",
                shell_quote(&script)
            ),
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
}

#[tokio::test]
async fn the_journal_exit_probe_reads_finished_producing_and_gone_through_daytona() {
    let fake = FakeDaytona::start().await;
    let provider = Arc::new(fake.provider.clone());
    let store = Arc::new(MemoryStore::new());
    let n = unique();
    let (done, live, gone) = (
        format!("dt-done-{n}"),
        format!("dt-live-{n}"),
        format!("dt-gone-{n}"),
    );
    let a = fake.create().await;
    let b = fake.create().await;
    let dir = fake.local(&a).journal_dir().to_string();
    let dir_b = fake.local(&b).journal_dir().to_string();
    let (sa, sb) = (handle(&fake, &a).await, handle(&fake, &b).await);
    run_agent(&*sa, &dir, &done, "echo '{\"delta\":\"1\"}'; exit 3").await;
    start_agent(&*sa, &dir, &live, "echo '{\"delta\":\"1\"}'; sleep 600").await;
    run_agent(&*sb, &dir_b, &gone, "echo hi").await;
    detached(&store, &a, &done).await;
    detached(&store, &a, &live).await;
    detached(&store, &b, &gone).await;
    fake.provider.destroy(&b).await.unwrap();

    let probe_in = |dir: &str| {
        JournalExitProbe::new(
            provider.clone(),
            store.clone(),
            ProbeOptions {
                dir: Some(dir.to_string()),
                ..ProbeOptions::default()
            },
        )
    };
    let answer = |probe: JournalExitProbe, run: String| {
        let store = store.clone();
        async move {
            let record = RunStore::get(store.as_ref(), &run).await.unwrap().unwrap();
            probe.has_finished(&record).await.unwrap()
        }
    };
    assert_eq!(
        answer(probe_in(&dir), done.clone()).await,
        RunExitProbe::Finished { exit_code: 3 }
    );
    assert_eq!(
        answer(probe_in(&dir), live.clone()).await,
        RunExitProbe::Producing
    );
    assert_eq!(
        answer(probe_in(&dir_b), gone.clone()).await.state(),
        "unknown"
    );
    fake.provider.destroy(&a).await.unwrap();
    fake.assert_clean();
}

/// The figures of the closing note: what one probe and one reclaim cost Daytona.
#[tokio::test]
async fn requests_per_probe_and_per_reclaim() {
    let fake = FakeDaytona::start().await;
    let provider = Arc::new(fake.provider.clone());
    let store = Arc::new(MemoryStore::new());
    let id = fake.create().await;
    let dir = fake.local(&id).journal_dir().to_string();
    let run = format!("dt-cost-{}", unique());
    run_agent(
        &*handle(&fake, &id).await,
        &dir,
        &run,
        "echo '{\"delta\":\"1\"}'",
    )
    .await;
    detached(&store, &id, &run).await;

    let before = fake.counts();
    let probe = JournalExitProbe::new(
        provider.clone(),
        store.clone(),
        ProbeOptions {
            dir: Some(dir.clone()),
            ..ProbeOptions::default()
        },
    );
    let record = RunStore::get(store.as_ref(), &run).await.unwrap().unwrap();
    assert_eq!(
        probe.has_finished(&record).await.unwrap(),
        RunExitProbe::Finished { exit_code: 0 }
    );
    let probed = fake.counts().since(&before);

    let before = fake.counts();
    let reclaimer = SandboxReclaimer {
        provider: provider.clone(),
        instances: store.clone(),
        runs: store.clone(),
    };
    let mut record = record;
    record.status = RunStatus::Completed;
    store.put_run(record.clone());
    let reclaimed = reclaimer
        .reclaim(&record, &ReclaimIntent::new(&record, now_ms()))
        .await
        .unwrap();
    assert_eq!(reclaimed, Reclaimed::Destroyed);
    let reclaim = fake.counts().since(&before);

    let before = fake.counts();
    fake.provider.destroy(&id).await.unwrap();
    let destroy_gone = fake.counts().since(&before);

    eprintln!("daytona: probe (JournalExitProbe, finished run) costs {probed}");
    eprintln!("daytona: reclaim (SandboxReclaimer, live sandbox) costs {reclaim}");
    eprintln!("daytona: destroy of a gone sandbox costs {destroy_gone}");
    assert_eq!(
        (probed.get_sandbox, probed.execute, probed.total()),
        (1, 1, 2)
    );
    assert_eq!((reclaim.delete_sandbox, reclaim.total()), (1, 1));
    assert_eq!((destroy_gone.delete_sandbox, destroy_gone.total()), (1, 1));
    assert!(fake.provider.resume(&id).await.unwrap().is_none());
    fake.assert_clean();
}

/// A transport that answers every request with one sandbox (a fault: the API naming a toolbox
/// the key must not go to). Also shows that any `HttpTransport`, a Worker's fetch included,
/// plugs in unchanged.
struct OneSandbox(serde_json::Value);

#[async_trait::async_trait]
impl HttpTransport for OneSandbox {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        assert_eq!(request.url, "https://app.daytona.io/api/sandbox/sbx-1");
        Ok(HttpResponse::new(200, self.0.to_string()))
    }
}

#[tokio::test]
async fn the_key_is_never_sent_to_a_plain_http_toolbox_when_the_api_is_https() {
    let answer = |toolbox: &str| json!({"id": "sbx-1", "state": "started", "desiredState": "started", "toolboxProxyUrl": toolbox});
    let provider = |toolbox: &str| {
        DaytonaProvider::with_transport(
            DaytonaConfig::new(Secret::new(KEY)),
            Arc::new(OneSandbox(answer(toolbox))),
        )
        .unwrap()
    };
    let refused = provider("http://proxy.example/toolbox")
        .resume("sbx-1")
        .await;
    assert!(
        matches!(&refused, Err(SandboxError::Refused(m)) if m.contains("plain-HTTP")),
        "{:?}",
        refused.map(|h| h.is_some())
    );
    let live = provider("https://proxy.example/toolbox/")
        .resume("sbx-1")
        .await
        .unwrap();
    assert_eq!(live.unwrap().id(), "sbx-1");
}

/// A sweep over Daytona: the finished run is probed, replayed, finalized and its sandbox
/// deleted; the live one is left alone, its sandbox and agent untouched.
#[tokio::test]
async fn a_sweep_finalizes_a_finished_run_deletes_its_sandbox_and_leaves_a_live_one_alone() {
    let fake = FakeDaytona::start_with(|c| c.output_limit = DEFAULT_OUTPUT_LIMIT).await;
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let n = unique();
    let (done, live) = (format!("dt-sweep-done-{n}"), format!("dt-sweep-live-{n}"));
    let finished = fake.create().await;
    let working = fake.create().await;
    run_agent(
        &*handle(&fake, &finished).await,
        &dir,
        &done,
        "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
    )
    .await;
    let working_handle = handle(&fake, &working).await;
    // The agent records its pid: other tests' sandboxes share this machine's process table.
    let pid_file = format!("{dir}/{live}.pid");
    start_agent(
        &*working_handle,
        &dir,
        &live,
        &format!(
            "echo '{{\"delta\":\"1\"}}'; echo $$ > {}; exec sleep 600",
            shell_quote(&pid_file)
        ),
    )
    .await;
    detached(&store, &finished, &done).await;
    detached(&store, &working, &live).await;

    let provider: Arc<dyn SandboxProvider> = Arc::new(fake.provider.clone());
    let deps = ReapDeps::journaled(
        store.clone(),
        provider,
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        Some(dir.clone()),
    );
    let mut options = ReapOptions::new(3_600_000, format!("daytona-sweep-{n}"));
    options.fence_quiet_ms = 25;
    let before = fake.counts();

    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = fake.counts().since(&before);
    eprintln!("daytona: a sweep of one finished and one live run cost {cost}");
    let entry = |run: &str| report.runs.iter().find(|e| e.run_id == run).unwrap();
    assert_eq!(entry(&done).outcome, ReapOutcome::Finalized);
    assert_eq!(entry(&done).status, Some(RunStatus::Completed));
    assert_eq!(entry(&done).sandbox, Some(SandboxFate::Destroyed));
    assert_eq!(entry(&live).outcome, ReapOutcome::Producing);
    let transcript = store.get_transcript(&done).await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "123");
    assert!(fake.provider.resume(&finished).await.unwrap().is_none());
    assert!(fake.provider.resume(&working).await.unwrap().is_some());
    let agents = working_handle
        .exec(
            &format!(
                "kill -0 \"$(cat {})\" && echo alive",
                shell_quote(&pid_file)
            ),
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        agents.stdout, "alive\n",
        "the live agent is no longer running"
    );
    assert_eq!(cost.delete_sandbox, 1, "{cost}");
    fake.provider.destroy(&working).await.unwrap();
    fake.assert_clean();
}

#[tokio::test]
async fn an_execute_answer_without_exit_code_takes_the_legacy_code_and_one_with_neither_is_an_error(
) {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    let sbx = handle(&fake, &id).await;
    fake.toolbox(&id)
        .inject(Fault::json(200, &json!({"result": "out\n", "code": 3})).on("ExecuteCommand"));
    let out = sbx.exec("true", exec_opts(5_000)).await.unwrap();
    assert_eq!((out.stdout.as_str(), out.exit_code), ("out\n", 3));
    fake.toolbox(&id)
        .inject(Fault::json(200, &json!({"result": "out\n"})).on("ExecuteCommand"));
    let result = sbx.exec("false", exec_opts(5_000)).await;
    assert!(
        matches!(&result, Err(SandboxError::Other(m)) if m.contains("neither exitCode nor code")),
        "a missing exit code read as {result:?}"
    );
    fake.assert_clean();
}

// ---------------------------------------------------------------------------------------------
// Auto-stopped sandboxes (Daytona stops an idle sandbox after autoStopInterval, 15 minutes by
// default): the sweep starts one to read a finished run's journal, then deletes or stops it.

/// Makes a recorded run `expired` (detached long before the TTL of `options`).
async fn expire(store: &MemoryStore, run_id: &str) {
    let mut record = RunStore::get(store, run_id).await.unwrap().unwrap();
    record.detached_since = Some(now_ms() - 10 * 60_000);
    store.put_run(record);
}

#[tokio::test]
async fn state_start_and_restore_are_one_request_each_on_the_documented_endpoints() {
    let fake = FakeDaytona::start().await;
    let id = fake.create().await;
    fake.set_state(&id, "stopped", "stopped");
    let p = &fake.provider;
    let before = fake.counts();
    assert_eq!(
        p.state(&id).await.unwrap(),
        Some(reaper_core::SandboxState::Stopped)
    );
    p.start_for_read(&id).await.unwrap();
    assert_eq!(
        p.state(&id).await.unwrap(),
        Some(reaper_core::SandboxState::Changing),
        "starting"
    );
    assert_eq!(
        p.state(&id).await.unwrap(),
        Some(reaper_core::SandboxState::Running)
    );
    p.restore(&id).await.unwrap();
    assert_eq!(
        p.state(&id).await.unwrap(),
        Some(reaper_core::SandboxState::Stopped)
    );
    let cost = fake.counts().since(&before);
    assert_eq!(
        (
            cost.get_sandbox,
            cost.start_sandbox,
            cost.stop_sandbox,
            cost.total()
        ),
        (4, 1, 1, 6),
        "{cost}"
    );
    for (state, desired, said) in [
        ("archived", "archived", None),
        ("error", "started", None),
        (
            "destroyed",
            "destroyed",
            Some(reaper_core::SandboxState::Gone),
        ),
    ] {
        fake.set_state(&id, state, desired);
        assert_eq!(p.state(&id).await.unwrap(), said, "{state}");
    }
    assert!(matches!(
        p.start_for_read(MISSING_ID).await,
        Err(SandboxError::NotFound(_))
    ));
    fake.assert_clean();
}

#[tokio::test]
async fn a_finished_run_whose_sandbox_auto_stopped_is_started_finalized_with_its_output_and_deleted(
) {
    let fake = FakeDaytona::start_with(|c| c.output_limit = DEFAULT_OUTPUT_LIMIT).await;
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let n = unique();
    let done = format!("dt-stopped-done-{n}");
    let id = fake.create().await;
    run_agent(
        &*handle(&fake, &id).await,
        &dir,
        &done,
        "for d in 1 2 3; do echo \"{\\\"delta\\\":\\\"$d\\\"}\"; done",
    )
    .await;
    detached(&store, &id, &done).await;
    expire(&store, &done).await;
    fake.set_state(&id, "stopped", "stopped");

    let deps = ReapDeps::journaled(
        store.clone(),
        Arc::new(fake.provider.clone()),
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        Some(dir.clone()),
    );
    let mut options = ReapOptions::new(60_000, format!("daytona-stopped-{n}"));
    options.fence_quiet_ms = 25;
    let before = fake.counts();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = fake.counts().since(&before);
    eprintln!("daytona: a sweep of one finished run in an auto-stopped sandbox cost {cost}");

    let entry = &report.runs[0];
    assert_eq!(entry.outcome, ReapOutcome::Finalized, "{entry:?}");
    assert_eq!(entry.status, Some(RunStatus::Completed));
    assert_eq!(entry.sandbox, Some(SandboxFate::Destroyed));
    assert!(entry.started_for_read);
    assert_eq!(report.starts.started, 1);
    let transcript = store.get_transcript(&done).await.unwrap().unwrap();
    assert_eq!(transcript.messages[0].content, "123");
    assert!(
        fake.provider.resume(&id).await.unwrap().is_none(),
        "deleted"
    );
    assert_eq!(
        (cost.start_sandbox, cost.stop_sandbox, cost.delete_sandbox),
        (1, 0, 1)
    );
    fake.assert_clean();
}

#[tokio::test]
async fn a_working_run_inside_its_ttl_in_an_auto_stopped_sandbox_is_started_only_when_asked_and_stopped_again(
) {
    let fake = FakeDaytona::start().await;
    let store = Arc::new(MemoryStore::new());
    let journals = tempfile::tempdir().unwrap();
    let dir = journals.path().to_str().unwrap().to_string();
    let n = unique();
    let run = format!("dt-stopped-working-{n}");
    let id = fake.create().await;
    // A journal without its exit sentinel: the agent had not finished when the sandbox stopped.
    let paths = journal_paths(&run, Some(&dir)).unwrap();
    std::fs::write(&paths.journal, "{\"delta\":\"1\"}\n").unwrap();
    detached(&store, &id, &run).await;
    fake.set_state(&id, "stopped", "stopped");
    let deps = ReapDeps::journaled(
        store.clone(),
        Arc::new(fake.provider.clone()),
        Arc::new(SystemClock),
        Arc::new(TokioSleeper),
        Some(dir.clone()),
    );
    let mut options = ReapOptions::new(3_600_000, format!("daytona-working-{n}"));
    options.fence_quiet_ms = 25;

    let before = fake.counts();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = fake.counts().since(&before);
    assert_eq!(report.runs[0].outcome, ReapOutcome::Unknown);
    assert_eq!(
        (cost.start_sandbox, cost.total()),
        (0, 1),
        "only the probe's lookup: {cost}"
    );

    options.start_stopped_inside_ttl = true;
    let before = fake.counts();
    let report = reap_detached_runs(&deps, &options).await.unwrap();
    let cost = fake.counts().since(&before);
    eprintln!(
        "daytona: a run still working in an auto-stopped sandbox, started to read, cost {cost}"
    );
    assert_eq!(report.runs[0].outcome, ReapOutcome::Producing, "{report:?}");
    assert_eq!((report.starts.started, report.starts.restored), (1, 1));
    assert_eq!(
        (cost.start_sandbox, cost.stop_sandbox, cost.delete_sandbox),
        (1, 1, 0)
    );
    assert_eq!(
        fake.provider.state(&id).await.unwrap(),
        Some(reaper_core::SandboxState::Stopped),
        "returned to the state it was in"
    );
    let record = RunStore::get(store.as_ref(), &run).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.driver_epoch),
        (RunStatus::Running, None)
    );
    fake.assert_clean();
}
