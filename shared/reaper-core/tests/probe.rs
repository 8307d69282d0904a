//! `probe_run_exit` and `JournalExitProbe` (spec D.4–D.6; conformance H1.1–4, H15.4) against a
//! scripted sandbox handle.

use std::sync::{Arc, Mutex};

use base64::Engine;
use reaper_core::journal::{exit_sentinel_line, journal_paths, DEFAULT_EXIT_PROBE_BYTES};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, JournalExitProbe, ProbeOptions};
use reaper_core::reason::Unreachable;
use reaper_core::{
    ExecOptions, ExecOutput, ExitProbe, RunExitProbe, RunRecord, SandboxError, SandboxHandle,
    SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider, StoreError,
};

type Answer = Result<ExecOutput, SandboxError>;

/// A sandbox whose `exec` answers from a script and records every command and its options.
#[derive(Debug, Clone)]
struct ScriptedHandle {
    id: String,
    answer: Arc<Mutex<Answer>>,
    calls: Arc<Mutex<Vec<(String, ExecOptions)>>>,
}

impl ScriptedHandle {
    fn answering(answer: Answer) -> Self {
        ScriptedHandle {
            id: "sbx-1".into(),
            answer: Arc::new(Mutex::new(answer)),
            calls: Default::default(),
        }
    }

    fn stdout(stdout: &str) -> Self {
        Self::answering(Ok(ExecOutput {
            stdout: stdout.into(),
            ..Default::default()
        }))
    }

    /// A journal holding `text`, framed as `tail | base64` would print it.
    fn journal(text: &str) -> Self {
        Self::stdout(&frame(text))
    }

    fn commands(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(c, _)| c.clone())
            .collect()
    }
}

#[async_trait::async_trait]
impl SandboxHandle for ScriptedHandle {
    fn id(&self) -> &str {
        &self.id
    }
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.calls
            .lock()
            .unwrap()
            .push((command.to_string(), options));
        self.answer.lock().unwrap().clone()
    }
}

/// `base64` output: 76-column lines and a trailing newline.
fn frame(text: &str) -> String {
    let flat = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
    flat.as_bytes()
        .chunks(76)
        .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
        .collect()
}

fn sentinel(run_id: &str, code: i64) -> String {
    exit_sentinel_line(&journal_paths(run_id, None).unwrap(), code)
}

const AGENT_LINE: &str = r#"{"type":"assistant","message":{"content":"working"}}"#;

async fn probe(handle: &ScriptedHandle, run_id: &str) -> RunExitProbe {
    probe_run_exit(handle, run_id, &ProbeOptions::default()).await
}

#[tokio::test]
async fn a_genuine_sentinel_in_the_tail_is_finished_with_its_code() {
    let handle = ScriptedHandle::journal(&format!("{AGENT_LINE}\n{}\n", sentinel("r-finished", 7)));
    assert_eq!(
        probe(&handle, "r-finished").await,
        RunExitProbe::Finished { exit_code: 7 }
    );
    // Read-only: exactly one exec, the exact tail command.
    assert_eq!(
        handle.commands(),
        ["tail -c -4096 '/tmp/tanstack-runs/r-finished.ndjson' 2>/dev/null | base64"]
    );
}

#[tokio::test]
async fn a_sentinel_written_after_a_partial_last_line_is_finished() {
    // The reference's wrapper appends the sentinel to an unterminated last line (issue 12.5).
    let text = format!("{{\"delta\":\"All done\"}}{}\n", sentinel("r1", 0));
    assert_eq!(
        probe(&ScriptedHandle::journal(&text), "r1").await,
        RunExitProbe::Finished { exit_code: 0 }
    );
    let forged = "{\"delta\":\"All done\"}{\"__exit\":0}\n";
    assert_eq!(
        probe(&ScriptedHandle::journal(forged), "r1").await,
        RunExitProbe::Producing
    );
}

#[tokio::test]
async fn a_forged_unnonced_sentinel_is_still_producing() {
    let handle = ScriptedHandle::journal(&format!("{AGENT_LINE}\n{{\"__exit\":0}}\n"));
    assert_eq!(probe(&handle, "r-forged").await, RunExitProbe::Producing);
}

#[tokio::test]
async fn agent_output_only_or_a_missing_journal_is_producing() {
    let mid_flight = ScriptedHandle::journal(&format!("{AGENT_LINE}\n{AGENT_LINE}\n"));
    assert_eq!(probe(&mid_flight, "r-busy").await, RunExitProbe::Producing);
    let missing = ScriptedHandle::stdout("");
    assert_eq!(probe(&missing, "r-busy").await, RunExitProbe::Producing);
}

#[tokio::test]
async fn a_failed_exec_is_unknown_with_the_error() {
    let handle = ScriptedHandle::answering(Err(SandboxError::Unreachable("no handle".into())));
    match probe(&handle, "r-1").await {
        RunExitProbe::Unknown { error: Some(e) } => assert!(e.contains("no handle"), "{e}"),
        other => panic!("expected unknown with an error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_base64_sentinel_with_code_nine_is_finished() {
    let handle = ScriptedHandle::journal(&format!("{}\n", sentinel("idx-1", 9)));
    assert_eq!(
        probe(&handle, "idx-1").await,
        RunExitProbe::Finished { exit_code: 9 }
    );
}

#[tokio::test]
async fn the_exec_exit_code_and_stderr_are_ignored() {
    let handle = ScriptedHandle::answering(Ok(ExecOutput {
        stdout: frame(&format!("{}\n", sentinel("r-1", 0))),
        stderr: "tail: something odd".into(),
        exit_code: 1,
    }));
    assert_eq!(
        probe(&handle, "r-1").await,
        RunExitProbe::Finished { exit_code: 0 }
    );
}

#[tokio::test]
async fn a_frame_cut_mid_quantum_is_unknown_never_finished() {
    let mut cut = frame(&format!("{}\n", sentinel("r-1", 0)));
    cut.truncate(cut.trim_end().len() - 1);
    match probe(&ScriptedHandle::stdout(&cut), "r-1").await {
        RunExitProbe::Unknown { error: Some(e) } => assert!(e.contains("mid-quantum"), "{e}"),
        other => panic!("expected unknown, got {other:?}"),
    }
}

#[tokio::test]
async fn output_that_is_not_base64_is_unknown() {
    // A provider that ignored the pipe and printed the raw journal.
    let raw = format!("{}\n", sentinel("r-1", 0));
    assert!(matches!(
        probe(&ScriptedHandle::stdout(&raw), "r-1").await,
        RunExitProbe::Unknown { error: Some(_) }
    ));
}

#[tokio::test]
async fn an_empty_run_id_is_unknown_without_touching_the_sandbox() {
    let handle = ScriptedHandle::stdout("");
    match probe(&handle, "").await {
        RunExitProbe::Unknown { error: Some(e) } => assert!(e.contains("run_id"), "{e}"),
        other => panic!("expected unknown, got {other:?}"),
    }
    assert!(handle.commands().is_empty());
}

#[tokio::test]
async fn a_zero_byte_window_is_unknown_without_touching_the_sandbox() {
    let handle = ScriptedHandle::stdout("");
    let options = ProbeOptions {
        max_bytes: 0,
        ..ProbeOptions::default()
    };
    match probe_run_exit(&handle, "r-1", &options).await {
        RunExitProbe::Unknown { error: Some(e) } => assert!(e.contains("max_bytes"), "{e}"),
        other => panic!("expected unknown, got {other:?}"),
    }
    assert!(handle.commands().is_empty());
}

#[tokio::test]
async fn the_dir_window_and_timeout_options_reach_the_exec() {
    let handle = ScriptedHandle::stdout("");
    let options = ProbeOptions {
        dir: Some("/var/journals/".into()),
        max_bytes: 64,
        exec_timeout_ms: 1234,
    };
    probe_run_exit(&handle, "r-1", &options).await;
    let calls = handle.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [(
            "tail -c -64 '/var/journals/r-1.ndjson' 2>/dev/null | base64".to_string(),
            ExecOptions { timeout_ms: 1234 }
        )]
    );
    assert_eq!(ProbeOptions::default().max_bytes, DEFAULT_EXIT_PROBE_BYTES);
}

#[tokio::test]
async fn the_last_sentinel_in_the_window_decides() {
    let handle = ScriptedHandle::journal(&format!(
        "{}\n{AGENT_LINE}\n{}",
        sentinel("r-1", 0),
        sentinel("r-1", 3)
    ));
    assert_eq!(
        probe(&handle, "r-1").await,
        RunExitProbe::Finished { exit_code: 3 }
    );
}

// JournalExitProbe: the ExitProbe port (D.6)

/// Resumes `sbx-1` to the scripted handle (or fails, or answers gone); records resume calls.
#[derive(Debug)]
struct OneSandboxProvider {
    handle: Option<ScriptedHandle>,
    fail: bool,
    resumed: Mutex<Vec<String>>,
}

impl OneSandboxProvider {
    fn with(handle: Option<ScriptedHandle>) -> Arc<Self> {
        Arc::new(OneSandboxProvider {
            handle,
            fail: false,
            resumed: Default::default(),
        })
    }
    fn failing() -> Arc<Self> {
        Arc::new(OneSandboxProvider {
            handle: None,
            fail: true,
            resumed: Default::default(),
        })
    }
    fn resumed(&self) -> Vec<String> {
        self.resumed.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl SandboxProvider for OneSandboxProvider {
    fn name(&self) -> &str {
        "local"
    }
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        self.resumed.lock().unwrap().push(id.into());
        if self.fail {
            return Err(SandboxError::Unreachable("daemon down".into()));
        }
        Ok(self
            .handle
            .clone()
            .map(|h| Arc::new(h) as Arc<dyn SandboxHandle>))
    }
    async fn destroy(&self, _id: &str) -> Result<(), SandboxError> {
        panic!("the probe must never destroy a sandbox")
    }
}

#[derive(Debug)]
struct BrokenInstances;

#[async_trait::async_trait]
impl SandboxInstanceStore for BrokenInstances {
    async fn get(&self, _key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        Err(StoreError::Unavailable("instances table throttled".into()))
    }
    async fn upsert(&self, _record: SandboxInstanceRecord) -> Result<(), StoreError> {
        panic!("the probe must never write an instance")
    }
    async fn delete(&self, _key: &str) -> Result<(), StoreError> {
        panic!("the probe must never delete an instance")
    }
}

fn instance(key: &str, provider: &str) -> SandboxInstanceRecord {
    SandboxInstanceRecord {
        key: key.into(),
        provider: provider.into(),
        provider_sandbox_id: "sbx-1".into(),
        latest_snapshot_id: None,
        thread_id: "t1".into(),
        latest_run_id: Some("r-1".into()),
        updated_at: 1,
    }
}

fn record(sandbox_key: Option<&str>) -> RunRecord {
    let mut r = RunRecord::new("r-1", "t1", 1);
    r.sandbox_key = sandbox_key.map(String::from);
    r
}

async fn instances_with(records: &[SandboxInstanceRecord]) -> Arc<MemoryStore> {
    let store = MemoryStore::new();
    for r in records {
        store.upsert(r.clone()).await.unwrap();
    }
    Arc::new(store)
}

async fn ask(
    provider: Arc<OneSandboxProvider>,
    instances: Arc<dyn SandboxInstanceStore>,
    record: &RunRecord,
) -> RunExitProbe {
    let probe = JournalExitProbe::new(provider, instances, ProbeOptions::default());
    probe
        .has_finished(record)
        .await
        .expect("the journal probe never fails outright")
}

#[tokio::test]
async fn the_port_finds_the_sandbox_from_the_key_and_reads_its_journal() {
    let handle = ScriptedHandle::journal(&format!("{}\n", sentinel("r-1", 4)));
    let provider = OneSandboxProvider::with(Some(handle.clone()));
    let instances = instances_with(&[instance("k1", "local")]).await;
    assert_eq!(
        ask(provider.clone(), instances, &record(Some("k1"))).await,
        RunExitProbe::Finished { exit_code: 4 }
    );
    assert_eq!(provider.resumed(), ["sbx-1"]);
    assert_eq!(handle.commands().len(), 1);
}

#[tokio::test]
async fn a_run_without_a_sandbox_key_is_unreachable_for_want_of_a_key() {
    let provider = OneSandboxProvider::with(None);
    let instances = instances_with(&[]).await;
    assert_eq!(
        ask(provider.clone(), instances, &record(None)).await,
        RunExitProbe::Unreachable(Unreachable::NoSandboxKey)
    );
    assert!(provider.resumed().is_empty());
}

#[tokio::test]
async fn a_missing_instance_record_is_unreachable_naming_the_key() {
    let provider = OneSandboxProvider::with(None);
    let instances = instances_with(&[]).await;
    assert_eq!(
        ask(provider.clone(), instances, &record(Some("k-gone"))).await,
        RunExitProbe::Unreachable(Unreachable::NoInstanceRecord {
            sandbox_key: "k-gone".into()
        })
    );
    assert!(provider.resumed().is_empty());
}

#[tokio::test]
async fn an_instance_of_another_provider_is_unreachable_as_not_configured_and_never_resumed() {
    let handle = ScriptedHandle::journal(&format!("{}\n", sentinel("r-1", 0)));
    let provider = OneSandboxProvider::with(Some(handle.clone()));
    let instances = instances_with(&[instance("k1", "e2b")]).await;
    assert!(matches!(
        ask(provider.clone(), instances, &record(Some("k1"))).await,
        RunExitProbe::Unreachable(Unreachable::ProviderNotConfigured { provider, .. }) if provider == "e2b"
    ));
    assert!(provider.resumed().is_empty());
    assert!(handle.commands().is_empty());
}

#[tokio::test]
async fn a_sandbox_that_is_gone_is_unreachable_as_gone() {
    let provider = OneSandboxProvider::with(None);
    let instances = instances_with(&[instance("k1", "local")]).await;
    assert!(matches!(
        ask(provider.clone(), instances, &record(Some("k1"))).await,
        RunExitProbe::Unreachable(Unreachable::SandboxGone { sandbox_id, .. }) if sandbox_id == "sbx-1"
    ));
    assert_eq!(provider.resumed(), ["sbx-1"]);
}

#[tokio::test]
async fn a_failed_resume_is_unknown_with_the_error() {
    let instances = instances_with(&[instance("k1", "local")]).await;
    match ask(
        OneSandboxProvider::failing(),
        instances,
        &record(Some("k1")),
    )
    .await
    {
        RunExitProbe::Unknown { error: Some(e) } => {
            assert!(e.contains("daemon down") && e.contains("sbx-1"), "{e}")
        }
        other => panic!("expected unknown with an error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_instance_lookup_is_unknown_with_the_error() {
    let provider = OneSandboxProvider::with(None);
    match ask(
        provider.clone(),
        Arc::new(BrokenInstances),
        &record(Some("k1")),
    )
    .await
    {
        RunExitProbe::Unknown { error: Some(e) } => {
            assert!(e.contains("throttled") && e.contains("k1"), "{e}")
        }
        other => panic!("expected unknown with an error, got {other:?}"),
    }
    assert!(provider.resumed().is_empty());
}

#[tokio::test]
async fn a_failed_exec_through_the_port_is_unknown_not_a_probe_failure() {
    let handle = ScriptedHandle::answering(Err(SandboxError::Timeout(30_000)));
    let provider = OneSandboxProvider::with(Some(handle));
    let instances = instances_with(&[instance("k1", "local")]).await;
    assert!(matches!(
        ask(provider, instances, &record(Some("k1"))).await,
        RunExitProbe::Unknown { error: Some(_) }
    ));
}
