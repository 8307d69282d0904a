//! The journal replay drive against real agents writing real journals in a local sandbox.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{provider, run_agent, sandbox};
use futures::StreamExt;
use reaper_core::journal::{exit_sentinel_line, journal_paths, shell_quote};
use reaper_core::memory::MemoryStore;
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::replay::{JournalReplayDrive, ReplayDeps, ReplayOptions};
use reaper_core::{
    CancellationToken, Chunk, ChunkStream, DeliveryLog, Drive, DriveRequest, ExecOptions,
    ExecOutput, MessageStore, RunExitProbe, RunRecord, SandboxError, SandboxHandle,
    SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider,
};
use reaper_local::{LocalSandbox, LocalSandboxProvider, SystemClock, TokioSleeper};

/// The local provider, counting `exec` calls of the handles it resumes.
#[derive(Clone)]
struct Counting {
    inner: LocalSandboxProvider,
    execs: Arc<AtomicUsize>,
}

struct CountingHandle {
    inner: Arc<dyn SandboxHandle>,
    execs: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl SandboxHandle for CountingHandle {
    fn id(&self) -> &str {
        self.inner.id()
    }
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.execs.fetch_add(1, Ordering::SeqCst);
        self.inner.exec(command, options).await
    }
}

#[async_trait::async_trait]
impl SandboxProvider for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        Ok(self.inner.resume(id).await?.map(|inner| {
            Arc::new(CountingHandle {
                inner,
                execs: self.execs.clone(),
            }) as Arc<dyn SandboxHandle>
        }))
    }
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        self.inner.destroy(id).await
    }
}

struct Case {
    store: Arc<MemoryStore>,
    provider: Counting,
    sbx: LocalSandbox,
    run_id: String,
    options: ReplayOptions,
}

impl Case {
    async fn new(run_id: &str) -> (tempfile::TempDir, Case) {
        let (root, provider) = provider();
        let sbx = sandbox(&provider).await;
        let store = Arc::new(MemoryStore::new());
        let mut record = RunRecord::new(run_id, "thread", 0);
        record.sandbox_key = Some("key".into());
        store.put_run(record);
        store
            .upsert(SandboxInstanceRecord {
                key: "key".into(),
                provider: provider.name().into(),
                provider_sandbox_id: sbx.id().into(),
                latest_snapshot_id: None,
                thread_id: "thread".into(),
                latest_run_id: Some(run_id.into()),
                updated_at: 0,
            })
            .await
            .unwrap();
        let options = ReplayOptions {
            journal_dir: Some(sbx.journal_dir().into()),
            poll_ms: 20,
            ..ReplayOptions::default()
        };
        let case = Case {
            store,
            provider: Counting {
                inner: provider,
                execs: Arc::default(),
            },
            sbx,
            run_id: run_id.into(),
            options,
        };
        (root, case)
    }

    fn stream(&self) -> ChunkStream {
        JournalReplayDrive::new(
            ReplayDeps {
                runs: self.store.clone(),
                instances: self.store.clone(),
                provider: Arc::new(self.provider.clone()),
                logs: self.store.clone(),
                messages: self.store.clone(),
                clock: Arc::new(SystemClock),
                sleeper: Arc::new(TokioSleeper),
            },
            self.options.clone(),
        )
        .drive(
            DriveRequest {
                run_id: self.run_id.clone(),
                thread_id: "thread".into(),
                fence: None,
            },
            CancellationToken::new(),
        )
        .unwrap()
    }

    /// Appends up to `limit` chunks (all when `None`) to the log; the count appended.
    async fn pipe(&self, stream: &mut ChunkStream, limit: Option<usize>) -> usize {
        let mut n = 0;
        while limit.is_none_or(|l| n < l) {
            match stream.next().await {
                Some(Ok(chunk)) => {
                    self.store
                        .append(&self.run_id, None, vec![chunk], 0)
                        .await
                        .unwrap();
                    n += 1;
                }
                Some(Err(e)) => panic!("replay failed: {e}"),
                None => break,
            }
        }
        n
    }

    async fn log(&self) -> Vec<Chunk> {
        self.store
            .read(&self.run_id, 0, usize::MAX)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.chunk)
            .collect()
    }
}

fn deltas(log: &[Chunk]) -> Vec<String> {
    log.iter()
        .filter_map(|c| c.get_str("delta").as_deref().map(String::from))
        .collect()
}

/// A POSIX agent printing `{"delta":"<i>"}` for i in `from..to`.
fn lines_agent(from: usize, to: usize) -> String {
    format!("awk 'BEGIN {{ for (i = {from}; i < {to}; i++) printf \"{{\\\"delta\\\":\\\"%d\\\"}}\\n\", i }}'")
}

fn expected(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| i.to_string()).collect()
}

#[tokio::test]
async fn a_real_50000_line_journal_is_replayed_exactly_once() {
    let (_root, case) = Case::new("real-50k").await;
    run_agent(&case.sbx, "real-50k", &lines_agent(0, 50_000), None).await;
    let mut stream = case.stream();
    assert_eq!(case.pipe(&mut stream, None).await, 50_000);
    let log = case.log().await;
    assert_eq!(deltas(&log), expected(0..50_000));
    let transcript = case
        .store
        .get_transcript("real-50k")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transcript.exit_code, Some(0));
    assert_eq!(transcript.messages[0].content, expected(0..50_000).concat());
    // ~900 KB in 256 KiB pages.
    assert!(case.provider.execs.load(Ordering::SeqCst) <= 6);
}

#[tokio::test]
async fn a_replay_started_while_the_agent_writes_follows_it_to_the_sentinel() {
    let (_root, case) = Case::new("real-follow").await;
    let script = format!(
        "{}; while [ ! -f go ]; do sleep 0.01; done; {}",
        lines_agent(0, 1_000),
        lines_agent(1_000, 2_000)
    );
    let mut agent = case
        .sbx
        .start_agent("real-follow", &script, None)
        .await
        .unwrap();
    let mut stream = case.stream();
    assert_eq!(case.pipe(&mut stream, Some(1_000)).await, 1_000);
    std::fs::write(case.sbx.work_dir().join("go"), "").unwrap();
    assert_eq!(case.pipe(&mut stream, None).await, 1_000);
    assert_eq!(agent.wait().await.unwrap(), 0);
    assert_eq!(deltas(&case.log().await), expected(0..2_000));
    assert!(case
        .store
        .get_transcript("real-follow")
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn a_crash_mid_replay_of_a_real_journal_then_a_second_drive_completes_without_duplicates() {
    let (_root, mut case) = Case::new("real-crash").await;
    case.options.page_bytes = 4096;
    run_agent(&case.sbx, "real-crash", &lines_agent(0, 20_000), None).await;
    let mut first = case.stream();
    assert_eq!(case.pipe(&mut first, Some(7_777)).await, 7_777);
    drop(first);
    let mut second = case.stream();
    assert_eq!(case.pipe(&mut second, None).await, 20_000 - 7_777);
    assert_eq!(deltas(&case.log().await), expected(0..20_000));
}

#[tokio::test]
async fn a_real_non_zero_exit_saves_the_transcript_then_yields_run_error() {
    let (_root, case) = Case::new("real-exit").await;
    run_agent(
        &case.sbx,
        "real-exit",
        &format!("{}; exit 3", lines_agent(0, 2)),
        None,
    )
    .await;
    let mut stream = case.stream();
    case.pipe(&mut stream, None).await;
    let log = case.log().await;
    let last = log.last().unwrap();
    assert!(last.is_run_error());
    assert_eq!(last.get("code").unwrap(), "exit_3");
    let transcript = case
        .store
        .get_transcript("real-exit")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(transcript.exit_code, Some(3));
    assert_eq!(transcript.messages[0].content, "01");
}

impl Case {
    async fn probe(&self) -> RunExitProbe {
        let options = ProbeOptions {
            dir: Some(self.sbx.journal_dir().into()),
            ..ProbeOptions::default()
        };
        probe_run_exit(&self.sbx, &self.run_id, &options).await
    }

    async fn transcript_text(&self) -> String {
        let transcript = self.store.get_transcript(&self.run_id).await.unwrap();
        transcript.expect("a transcript was saved").messages[0]
            .content
            .clone()
    }
}

#[tokio::test]
async fn a_real_agent_whose_output_lacks_a_trailing_newline_is_finished_and_replayed() {
    let (_root, case) = Case::new("real-no-newline").await;
    run_agent(
        &case.sbx,
        "real-no-newline",
        r#"printf '{"delta":"Working. "}\n{"delta":"All done"}'"#,
        None,
    )
    .await;
    assert_eq!(case.probe().await, RunExitProbe::Finished { exit_code: 0 });
    let mut stream = case.stream();
    assert_eq!(case.pipe(&mut stream, None).await, 2);
    assert_eq!(deltas(&case.log().await), ["Working. ", "All done"]);
    assert_eq!(case.transcript_text().await, "Working. All done");
}

#[tokio::test]
async fn a_journal_from_the_reference_wrapper_with_the_sentinel_on_a_partial_line_is_read() {
    let (_root, case) = Case::new("real-reference").await;
    // The reference's template (spec D.3) byte for byte: no newline before the sentinel.
    let paths = journal_paths("real-reference", Some(case.sbx.journal_dir())).unwrap();
    let reference = format!(
        "mkdir -p {} && {{ ( printf '{{\"delta\":\"All done\"}}'; exit 2 ); printf '{}\\n' \"$?\"; }} >> {} 2>> {}",
        shell_quote(&paths.dir),
        exit_sentinel_line(&paths, 0).replace(":0,", ":%d,"),
        shell_quote(&paths.journal),
        shell_quote(&paths.stderr),
    );
    let out = case
        .sbx
        .exec(&reference, ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    let journal = std::fs::read_to_string(&paths.journal).unwrap();
    assert_eq!(
        journal,
        format!(
            "{{\"delta\":\"All done\"}}{}\n",
            exit_sentinel_line(&paths, 2)
        )
    );

    assert_eq!(case.probe().await, RunExitProbe::Finished { exit_code: 2 });
    let mut stream = case.stream();
    assert_eq!(case.pipe(&mut stream, None).await, 2);
    let log = case.log().await;
    assert_eq!(deltas(&log), ["All done"]);
    assert_eq!(log[1].get("code").unwrap(), "exit_2");
    assert_eq!(case.transcript_text().await, "All done");
}
