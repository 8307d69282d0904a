//! The journal replay drive against a sandbox whose `exec` serves a journal from a byte buffer.
//! The fake parses the paged read command (`tail -c +<from> … | head -c <max> | base64`) so the
//! drive's real command strings are exercised; every store is the real memory backend.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use futures::future::{select, Either};
use futures::StreamExt;
use reaper_core::claim::Writer;
use reaper_core::domain::{LogEntry, LogSnapshot};
use reaper_core::error::{SandboxError, StoreError};
use reaper_core::journal::{exit_sentinel_line, journal_paths};
use reaper_core::memory::MemoryStore;
use reaper_core::pipe::{pipe_to_run_log, PipeContext, DELIVERED_RUN_ERROR};
use reaper_core::ports::{Appended, Fenced};
use reaper_core::probe::{probe_run_exit, ProbeOptions};
use reaper_core::replay::{
    journal_end, line_chunk, JournalReplayDrive, ReplayDeps, ReplayOptions, JOURNAL_LINE,
};
use reaper_core::{
    CancellationToken, Chunk, ChunkStream, DeliveryLog, Drive, DriveRequest, ExecOptions,
    ExecOutput, MessageStore, RunError, RunExitProbe, RunRecord, RunStatus, RunStore,
    SandboxHandle, SandboxInstanceRecord, SandboxInstanceStore, SandboxProvider, Transcript,
    TranscriptMessage,
};
use reaper_testkit::fakes::{TokioClock, TokioSleeper};

const RUN: &str = "run-replay";
const THREAD: &str = "thread-1";
const SANDBOX: &str = "sbx-1";
const KEY: &str = "key-1";
const DIR: &str = "/j";

/// A sandbox whose journal is a growable byte buffer.
#[derive(Default)]
struct BufferSandbox {
    journal: Mutex<Vec<u8>>,
    execs: AtomicUsize,
    /// The next this many execs fail.
    fail_next: AtomicUsize,
}

impl BufferSandbox {
    fn write(&self, bytes: &[u8]) {
        self.journal.lock().unwrap().extend_from_slice(bytes);
    }
    fn execs(&self) -> usize {
        self.execs.load(Ordering::SeqCst)
    }
}

fn number_after(command: &str, marker: &str) -> u64 {
    let rest = &command[command
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} not in {command:?}"))
        + marker.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

#[async_trait::async_trait]
impl SandboxHandle for BufferSandbox {
    fn id(&self) -> &str {
        SANDBOX
    }

    async fn exec(&self, command: &str, _options: ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.execs.fetch_add(1, Ordering::SeqCst);
        if self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(SandboxError::Unreachable("injected".into()));
        }
        let paths = journal_paths(RUN, Some(DIR)).unwrap();
        assert!(
            command.contains(&format!("'{}'", paths.journal)),
            "unexpected command {command:?}"
        );
        let journal = self.journal.lock().unwrap();
        let (start, end) = if command.starts_with("tail -c -") {
            // The exit probe's read: the last N bytes.
            let n = number_after(command, "tail -c -") as usize;
            (journal.len().saturating_sub(n), journal.len())
        } else {
            let from = number_after(command, "tail -c +") as usize - 1;
            let max = number_after(command, "head -c ") as usize;
            let start = from.min(journal.len());
            (start, (start + max).min(journal.len()))
        };
        Ok(ExecOutput {
            stdout: base64::engine::general_purpose::STANDARD.encode(&journal[start..end]),
            stderr: String::new(),
            exit_code: 0,
        })
    }
}

struct OneSandbox(Arc<BufferSandbox>);

#[async_trait::async_trait]
impl SandboxProvider for OneSandbox {
    fn name(&self) -> &str {
        "buffer"
    }
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        Ok((id == SANDBOX).then(|| self.0.clone() as Arc<dyn SandboxHandle>))
    }
    async fn destroy(&self, _id: &str) -> Result<(), SandboxError> {
        Ok(())
    }
}

/// Messages that refuse every save.
struct FailingMessages;

#[async_trait::async_trait]
impl MessageStore for FailingMessages {
    async fn save_transcript(
        &self,
        _t: &Transcript,
        _fence: Option<u64>,
    ) -> Result<reaper_core::Fenced<()>, StoreError> {
        Err(StoreError::Unavailable("injected save failure".into()))
    }
    async fn get_transcript(&self, _run_id: &str) -> Result<Option<Transcript>, StoreError> {
        Ok(None)
    }
}

struct Case {
    store: Arc<MemoryStore>,
    sandbox: Arc<BufferSandbox>,
    messages: Arc<dyn MessageStore>,
    options: ReplayOptions,
}

impl Case {
    async fn new() -> Case {
        let store = Arc::new(MemoryStore::new());
        let mut record = RunRecord::new(RUN, THREAD, 0);
        record.sandbox_key = Some(KEY.into());
        store.put_run(record);
        store
            .upsert(SandboxInstanceRecord {
                key: KEY.into(),
                provider: "buffer".into(),
                provider_sandbox_id: SANDBOX.into(),
                latest_snapshot_id: None,
                thread_id: THREAD.into(),
                latest_run_id: Some(RUN.into()),
                updated_at: 0,
            })
            .await
            .unwrap();
        Case {
            messages: store.clone(),
            store,
            sandbox: Arc::new(BufferSandbox::default()),
            options: ReplayOptions {
                journal_dir: Some(DIR.into()),
                ..ReplayOptions::default()
            },
        }
    }

    fn drive(&self) -> JournalReplayDrive {
        self.drive_with(self.messages.clone())
    }

    fn drive_with(&self, messages: Arc<dyn MessageStore>) -> JournalReplayDrive {
        JournalReplayDrive::new(
            ReplayDeps {
                runs: self.store.clone(),
                instances: self.store.clone(),
                provider: Arc::new(OneSandbox(self.sandbox.clone())),
                logs: self.store.clone(),
                messages,
                clock: Arc::new(TokioClock::new(1_000)),
                sleeper: Arc::new(TokioSleeper),
            },
            self.options.clone(),
        )
    }

    fn stream(&self, signal: &CancellationToken) -> ChunkStream {
        self.drive()
            .drive(
                DriveRequest {
                    run_id: RUN.into(),
                    thread_id: THREAD.into(),
                    fence: None,
                },
                signal.clone(),
            )
            .unwrap()
    }

    fn sentinel(&self, code: i64) {
        let paths = journal_paths(RUN, Some(DIR)).unwrap();
        self.sandbox
            .write(format!("{}\n", exit_sentinel_line(&paths, code)).as_bytes());
    }

    async fn log(&self) -> Vec<Chunk> {
        self.store
            .read(RUN, 0, usize::MAX)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.chunk)
            .collect()
    }

    async fn transcript(&self) -> Option<Transcript> {
        self.store.get_transcript(RUN).await.unwrap()
    }
}

/// Appends every chunk to the log as the sweep's pipe does, optionally stopping (a crash) after
/// `limit` chunks. Returns the stream error, if any.
async fn pipe(
    case: &Case,
    mut stream: ChunkStream,
    limit: Option<usize>,
) -> Option<reaper_core::DriveError> {
    let mut n = 0;
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => {
                case.store.append(RUN, None, vec![chunk], 0).await.unwrap();
                n += 1;
                if limit == Some(n) {
                    return None;
                }
            }
            Err(e) => return Some(e),
        }
    }
    None
}

fn deltas(log: &[Chunk]) -> Vec<String> {
    log.iter()
        .filter(|c| c.kind() == Some(Chunk::TEXT_MESSAGE_CONTENT))
        .map(|c| c.get("delta").unwrap().as_str().unwrap().to_string())
        .collect()
}

fn delta_journal(lines: std::ops::Range<usize>) -> Vec<u8> {
    lines
        .map(|i| format!("{{\"delta\":\"{i} \"}}\n"))
        .collect::<String>()
        .into_bytes()
}

#[tokio::test(start_paused = true)]
async fn fifty_thousand_line_journal_replays_every_line_exactly_once() {
    let case = Case::new().await;
    case.sandbox.write(&delta_journal(0..50_000));
    case.sentinel(0);
    let error = pipe(&case, case.stream(&CancellationToken::new()), None).await;
    assert!(error.is_none(), "{error:?}");
    let log = case.log().await;
    assert_eq!(log.len(), 50_000);
    let expected: Vec<String> = (0..50_000).map(|i| format!("{i} ")).collect();
    assert_eq!(deltas(&log), expected);
    // Positions are absolute and strictly increasing.
    let ends: Vec<u64> = log.iter().map(|c| journal_end(c).unwrap()).collect();
    assert!(ends.windows(2).all(|w| w[0] < w[1]));
    // Bounded pages: ~1 MB of journal in 256 KiB pages.
    let journal_len = case.sandbox.journal.lock().unwrap().len();
    assert!(case.sandbox.execs() <= journal_len / (256 * 1024) + 2);
    let transcript = case.transcript().await.expect("transcript saved");
    assert_eq!(transcript.exit_code, Some(0));
    assert_eq!(transcript.messages.len(), 1);
    assert_eq!(transcript.messages[0].content, expected.concat());
}

#[tokio::test(start_paused = true)]
async fn crash_after_half_the_appends_then_a_fresh_drive_completes_without_duplicates() {
    let mut case = Case::new().await;
    // Small pages so the crash lands mid-journal, between pages.
    case.options.page_bytes = 1000;
    case.sandbox.write(&delta_journal(0..5_000));
    case.sentinel(0);
    pipe(&case, case.stream(&CancellationToken::new()), Some(2_500)).await;
    assert_eq!(case.log().await.len(), 2_500);
    assert!(case.transcript().await.is_none(), "saved before the end");

    let error = pipe(&case, case.stream(&CancellationToken::new()), None).await;
    assert!(error.is_none(), "{error:?}");
    let expected: Vec<String> = (0..5_000).map(|i| format!("{i} ")).collect();
    assert_eq!(deltas(&case.log().await), expected);
    // The transcript covers the whole output, not only the second drive's half.
    let transcript = case.transcript().await.unwrap();
    assert_eq!(transcript.messages[0].content, expected.concat());

    // A third drive (a crash after the transcript save, before the terminal write) appends
    // nothing and saves the same transcript again.
    let error = pipe(&case, case.stream(&CancellationToken::new()), None).await;
    assert!(error.is_none());
    assert_eq!(case.log().await.len(), 5_000);
    assert_eq!(
        case.transcript().await.unwrap().messages,
        transcript.messages
    );
}

#[tokio::test(start_paused = true)]
async fn journal_without_sentinel_is_never_finalized_until_cancelled() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"a\"}\n");
    let signal = CancellationToken::new();
    let mut stream = case.stream(&signal);
    assert_eq!(
        stream.next().await.unwrap().unwrap().get("delta").unwrap(),
        "a"
    );
    // An hour of virtual time: it keeps polling and never ends.
    let waited = tokio::time::timeout(Duration::from_secs(3_600), stream.next()).await;
    assert!(waited.is_err(), "the stream ended without a sentinel");
    assert!(case.sandbox.execs() > 1_000, "it stopped polling");
    assert!(case.transcript().await.is_none());

    signal.cancel();
    assert!(
        stream.next().await.is_none(),
        "a cancel ends the stream, not an error"
    );
    assert!(case.transcript().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn lines_written_while_polling_are_replayed_and_the_sentinel_ends_it() {
    let case = Case::new().await;
    let signal = CancellationToken::new();
    let mut stream = case.stream(&signal);
    let next = tokio::time::timeout(Duration::from_secs(10), stream.next()).await;
    assert!(next.is_err(), "an empty journal yielded something");
    case.sandbox.write(b"{\"delta\":\"late\"}\n");
    case.sentinel(0);
    let chunk = stream.next().await.unwrap().unwrap();
    assert_eq!(chunk.get("delta").unwrap(), "late");
    assert!(stream.next().await.is_none());
    assert_eq!(case.transcript().await.unwrap().messages[0].content, "late");
}

#[tokio::test(start_paused = true)]
async fn non_zero_exit_saves_the_transcript_then_yields_run_error() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"x\"}\n");
    case.sentinel(3);
    let mut stream = case.stream(&CancellationToken::new());
    assert_eq!(
        stream.next().await.unwrap().unwrap().get("delta").unwrap(),
        "x"
    );
    let error = stream.next().await.unwrap().unwrap();
    // Saved before the RUN_ERROR is handed over: the pipe stops at a RUN_ERROR.
    let transcript = case.transcript().await.expect("saved before the RUN_ERROR");
    assert_eq!(transcript.exit_code, Some(3));
    assert!(error.is_run_error());
    assert_eq!(error.get("message").unwrap(), "agent exited with code 3");
    assert_eq!(error.get("code").unwrap(), "exit_3");
    assert!(stream.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn transcript_is_saved_before_the_stream_ends_and_keeps_the_user_prompt() {
    let case = Case::new().await;
    case.store
        .save_transcript(
            &Transcript {
                run_id: RUN.into(),
                thread_id: THREAD.into(),
                messages: vec![TranscriptMessage {
                    role: "user".into(),
                    content: "go".into(),
                }],
                exit_code: None,
                saved_at: 0,
            },
            None,
        )
        .await
        .unwrap();
    case.sandbox.write(&delta_journal(1..4));
    case.sentinel(0);
    let mut stream = case.stream(&CancellationToken::new());
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
        assert!(case.transcript().await.unwrap().exit_code.is_none());
    }
    assert!(stream.next().await.is_none());
    let transcript = case.transcript().await.unwrap();
    let messages: Vec<String> = transcript
        .messages
        .iter()
        .map(|m| format!("{}:{}", m.role, m.content))
        .collect();
    assert_eq!(messages, ["user:go", "assistant:1 2 3 "]);
    assert_eq!(transcript.exit_code, Some(0));
    assert_eq!(transcript.saved_at, 1_000);
}

#[tokio::test(start_paused = true)]
async fn failed_transcript_save_ends_the_stream_with_an_error() {
    let mut case = Case::new().await;
    case.messages = Arc::new(FailingMessages);
    case.sandbox.write(b"{\"delta\":\"x\"}\n");
    case.sentinel(0);
    let error = pipe(&case, case.stream(&CancellationToken::new()), None)
        .await
        .expect("a stream error");
    assert_eq!(error.code.as_deref(), Some("transcript_save"));
    assert!(
        error.message.contains("injected save failure"),
        "{}",
        error.message
    );
}

#[tokio::test(start_paused = true)]
async fn forged_and_unnonced_sentinels_are_replayed_as_agent_output() {
    let case = Case::new().await;
    let other = journal_paths("another-run", Some(DIR)).unwrap();
    case.sandbox.write(b"{\"__exit\":0}\n");
    case.sandbox
        .write(format!("{}\n", exit_sentinel_line(&other, 0)).as_bytes());
    case.sandbox
        .write(b"{\"__exit\":0,\"__nonce\":\"00000000000000000000000000000000\"}\n");
    case.sandbox.write(b"{\"delta\":\"after\"}\n");
    case.sentinel(0);
    case.sandbox.write(b"{\"delta\":\"past the sentinel\"}\n");
    pipe(&case, case.stream(&CancellationToken::new()), None).await;
    let log = case.log().await;
    assert_eq!(log.len(), 4);
    assert!(log[..3].iter().all(|c| c.kind() == Some(JOURNAL_LINE)));
    assert_eq!(log[0].get("line").unwrap(), "{\"__exit\":0}");
    assert_eq!(deltas(&log), ["after"]);
    assert_eq!(case.transcript().await.unwrap().exit_code, Some(0));
}

#[tokio::test(start_paused = true)]
async fn partial_trailing_line_is_withheld_until_its_newline_arrives() {
    let case = Case::new().await;
    case.sandbox.write("{\"delta\":\"caf".as_bytes());
    let mut stream = case.stream(&CancellationToken::new());
    let early = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
    assert!(early.is_err(), "a partial line was yielded");
    case.sandbox.write("é\"}\n".as_bytes());
    let chunk = stream.next().await.unwrap().unwrap();
    assert_eq!(chunk.get("delta").unwrap(), "café");
    // Positions count bytes: `é` is two, so 17 characters end at byte 18.
    assert_eq!(journal_end(&chunk), Some(18));
}

#[test]
fn lines_map_to_events_deltas_or_journal_lines_each_with_its_end() {
    let event = line_chunk(r#"{"type":"TOOL_CALL_START","id":"t1"}"#, 40).unwrap();
    assert_eq!(event.kind(), Some("TOOL_CALL_START"));
    assert_eq!(event.get("id").unwrap(), "t1");
    assert_eq!(journal_end(&event), Some(40));

    let delta = line_chunk(r#"{"delta":"hi"}"#, 15).unwrap();
    assert_eq!(delta.kind(), Some(Chunk::TEXT_MESSAGE_CONTENT));
    assert_eq!(delta.get("delta").unwrap(), "hi");

    for other in [
        "plain text",
        "[1,2]",
        r#"{"type":7}"#,
        r#"{"delta":5}"#,
        "{oops",
    ] {
        let chunk = line_chunk(other, 1).unwrap();
        assert_eq!(chunk.kind(), Some(JOURNAL_LINE), "{other}");
        assert_eq!(chunk.get("line").unwrap(), other);
    }
    assert!(line_chunk("   ", 3).is_none());
}

#[tokio::test(start_paused = true)]
async fn agent_run_error_event_ends_the_replay_after_the_transcript_is_saved() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"partial\"}\n");
    case.sandbox
        .write(b"{\"type\":\"RUN_ERROR\",\"message\":\"model refused\"}\n");
    let mut stream = case.stream(&CancellationToken::new());
    stream.next().await.unwrap().unwrap();
    let error = stream.next().await.unwrap().unwrap();
    assert!(error.is_run_error());
    assert_eq!(error.get("message").unwrap(), "model refused");
    let transcript = case.transcript().await.expect("saved before the RUN_ERROR");
    assert_eq!(transcript.messages[0].content, "partial");
    assert!(stream.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn transient_read_failures_are_retried_and_persistent_ones_end_the_stream() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"x\"}\n");
    case.sentinel(0);
    case.sandbox.fail_next.store(2, Ordering::SeqCst);
    let error = pipe(&case, case.stream(&CancellationToken::new()), None).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(deltas(&case.log().await), ["x"]);

    let case = Case::new().await;
    case.sandbox.fail_next.store(usize::MAX, Ordering::SeqCst);
    let error = pipe(&case, case.stream(&CancellationToken::new()), None)
        .await
        .expect("a stream error");
    assert_eq!(error.code.as_deref(), Some("journal_read"));
    assert!(error.message.contains("3 times"), "{}", error.message);
    assert_eq!(case.sandbox.execs(), 3);
}

#[tokio::test(start_paused = true)]
async fn missing_sandbox_key_instance_or_sandbox_ends_the_stream_with_a_clear_error() {
    let case = Case::new().await;
    case.store.delete(KEY).await.unwrap();
    let error = pipe(&case, case.stream(&CancellationToken::new()), None)
        .await
        .unwrap();
    assert!(
        error
            .message
            .contains("no sandbox instance record for key key-1"),
        "{}",
        error.message
    );

    let case = Case::new().await;
    case.store
        .update(
            RUN,
            reaper_core::RunPatch {
                sandbox_key: reaper_core::Patch::Clear,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let error = pipe(&case, case.stream(&CancellationToken::new()), None)
        .await
        .unwrap();
    assert!(error.message.contains("no sandboxKey"), "{}", error.message);

    let case = Case::new().await;
    let mut instance = SandboxInstanceStore::get(case.store.as_ref(), KEY)
        .await
        .unwrap()
        .unwrap();
    instance.provider_sandbox_id = "sbx-gone".into();
    case.store.upsert(instance).await.unwrap();
    let error = pipe(&case, case.stream(&CancellationToken::new()), None)
        .await
        .unwrap();
    assert!(
        error.message.contains("sandbox sbx-gone is gone"),
        "{}",
        error.message
    );
    assert_eq!(case.sandbox.execs(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_already_cancelled_signal_yields_nothing_and_reads_nothing() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"x\"}\n");
    case.sentinel(0);
    let signal = CancellationToken::new();
    signal.cancel();
    assert!(case.stream(&signal).next().await.is_none());
    assert_eq!(case.sandbox.execs(), 0);
    assert!(case.transcript().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn resume_position_comes_from_the_last_positioned_log_entry() {
    let case = Case::new().await;
    case.sandbox.write(&delta_journal(0..3));
    case.sentinel(0);
    // A live route delivered the first line (stamped) and an event of its own (unstamped).
    let first_end = "{\"delta\":\"0 \"}\n".len() as u64;
    case.store
        .append(
            RUN,
            None,
            vec![
                line_chunk("{\"delta\":\"0 \"}", first_end).unwrap(),
                Chunk::new("RUN_STARTED"),
            ],
            0,
        )
        .await
        .unwrap();
    pipe(&case, case.stream(&CancellationToken::new()), None).await;
    let log = case.log().await;
    assert_eq!(deltas(&log), ["0 ", "1 ", "2 "]);
    assert_eq!(log[1].kind(), Some("RUN_STARTED"));
    assert_eq!(
        case.transcript().await.unwrap().messages[0].content,
        "0 1 2 "
    );
}

#[test]
fn zero_page_size_is_refused_when_the_drive_is_built() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut case = rt.block_on(Case::new());
    case.options.page_bytes = 0;
    let result = case.drive().drive(
        DriveRequest {
            run_id: RUN.into(),
            thread_id: THREAD.into(),
            fence: None,
        },
        CancellationToken::new(),
    );
    assert!(result.is_err());
}

// A sentinel after a partial line (issue 12.5)

#[tokio::test(start_paused = true)]
async fn a_sentinel_after_a_partial_line_ends_the_replay_and_the_partial_line_is_delivered() {
    let case = Case::new().await;
    case.sandbox
        .write(b"{\"delta\":\"Working. \"}\n{\"delta\":\"All done\"}");
    case.sentinel(0);
    let error = pipe(&case, case.stream(&CancellationToken::new()), None).await;
    assert!(error.is_none(), "{error:?}");
    let log = case.log().await;
    assert_eq!(deltas(&log), ["Working. ", "All done"]);
    // The partial line ends where the sentinel starts, so a resumed drive still reads it.
    let sentinel_start = "{\"delta\":\"Working. \"}\n{\"delta\":\"All done\"}".len() as u64;
    assert_eq!(journal_end(&log[1]), Some(sentinel_start));
    let transcript = case.transcript().await.unwrap();
    assert_eq!(transcript.messages[0].content, "Working. All done");
    assert_eq!(transcript.exit_code, Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_forged_sentinel_after_a_partial_line_is_agent_output() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"a\"}{\"__exit\":0}\n");
    let signal = CancellationToken::new();
    let mut stream = case.stream(&signal);
    let chunk = stream.next().await.unwrap().unwrap();
    assert_eq!(
        chunk.get("line").unwrap(),
        "{\"delta\":\"a\"}{\"__exit\":0}"
    );
    let waited = tokio::time::timeout(Duration::from_secs(60), stream.next()).await;
    assert!(waited.is_err(), "a forged sentinel ended the replay");
    assert!(case.transcript().await.is_none());
}

#[test]
fn a_journal_line_cannot_pass_for_the_pipes_delivered_marker() {
    let line = format!(r#"{{"type":"{DELIVERED_RUN_ERROR}","error":{{"message":"x"}}}}"#);
    let chunk = line_chunk(&line, 1).unwrap();
    assert_eq!(chunk.kind(), Some(JOURNAL_LINE));
    assert_eq!(chunk.get("line").unwrap(), line.as_str());
}

// Two genuine sentinels (issue 12.9a): the last one wins, in the probe and in the replay.

async fn probe(case: &Case) -> RunExitProbe {
    let options = ProbeOptions {
        dir: Some(DIR.into()),
        ..ProbeOptions::default()
    };
    probe_run_exit(case.sandbox.as_ref(), RUN, &options).await
}

#[tokio::test(start_paused = true)]
async fn with_two_genuine_sentinels_the_probe_and_the_replay_both_take_the_last() {
    for page_bytes in [DEFAULT_PAGE, 7] {
        let mut case = Case::new().await;
        // Small pages too: the second sentinel arrives pages after the first.
        case.options.page_bytes = page_bytes;
        case.sandbox.write(b"{\"delta\":\"first \"}\n");
        case.sentinel(0);
        case.sandbox.write(b"{\"delta\":\"second\"}\n");
        case.sentinel(7);
        assert_eq!(probe(&case).await, RunExitProbe::Finished { exit_code: 7 });
        let record = run_pipe(&case, None).await.expect("no crash injected");
        assert_eq!(record.status, RunStatus::Failed);
        assert_eq!(record.error.unwrap().code.as_deref(), Some("exit_7"));
        let log = case.log().await;
        assert_eq!(deltas(&log), ["first ", "second"]);
        let transcript = case.transcript().await.unwrap();
        assert_eq!(transcript.exit_code, Some(7));
        assert_eq!(transcript.messages[0].content, "first second");
    }
}

#[tokio::test(start_paused = true)]
async fn output_after_the_last_sentinel_is_ignored_by_the_probe_and_the_replay() {
    for page_bytes in [DEFAULT_PAGE, 7] {
        let mut case = Case::new().await;
        case.options.page_bytes = page_bytes;
        case.sandbox.write(b"{\"delta\":\"done\"}\n");
        case.sentinel(3);
        case.sandbox
            .write(b"{\"delta\":\"a later run, unfinished\"}\n{\"de");
        assert_eq!(probe(&case).await, RunExitProbe::Finished { exit_code: 3 });
        let record = run_pipe(&case, None).await.expect("no crash injected");
        assert_eq!(record.status, RunStatus::Failed);
        assert_eq!(record.error.unwrap().code.as_deref(), Some("exit_3"));
        assert_eq!(deltas(&case.log().await), ["done"]);
    }
}

// Crash recovery (issue 12.6): a drive resumed after a crash at any point ends exactly as an
// uninterrupted one: the same log, transcript and terminal status.

const DEFAULT_PAGE: u64 = reaper_core::replay::DEFAULT_REPLAY_PAGE_BYTES;

/// Where the injected crash strikes.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// Right after the log holds this many chunks (mid-batch if need be).
    AfterAppends(usize),
    /// Right after the transcript is saved.
    AfterTranscriptSave,
}

/// The memory store, except that at the crash point the process "dies": the write has landed,
/// the call never returns, and `crashed` fires so the test can drop the pipe.
struct CrashingStore {
    inner: Arc<MemoryStore>,
    crash: Option<Crash>,
    appended: AtomicUsize,
    crashed: CancellationToken,
}

impl CrashingStore {
    async fn die(&self) -> ! {
        self.crashed.cancel();
        std::future::pending().await
    }
}

#[async_trait::async_trait]
impl DeliveryLog for CrashingStore {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: i64,
    ) -> Result<Fenced<Appended>, StoreError> {
        let Some(Crash::AfterAppends(limit)) = self.crash else {
            return self.inner.append(run_id, fence, chunks, now).await;
        };
        let room = limit.saturating_sub(self.appended.load(Ordering::SeqCst));
        if chunks.len() < room {
            self.appended.fetch_add(chunks.len(), Ordering::SeqCst);
            return self.inner.append(run_id, fence, chunks, now).await;
        }
        if room > 0 {
            self.inner
                .append(run_id, fence, chunks[..room].to_vec(), now)
                .await
                .unwrap();
        }
        self.die().await
    }
    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        now: i64,
    ) -> Result<reaper_core::Fenced<()>, StoreError> {
        self.inner.close(run_id, fence, now).await
    }
    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        self.inner.snapshot(run_id).await
    }
    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.inner.read(run_id, from, limit).await
    }
}

#[async_trait::async_trait]
impl MessageStore for CrashingStore {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<reaper_core::Fenced<()>, StoreError> {
        let saved = self.inner.save_transcript(transcript, fence).await?;
        if matches!(self.crash, Some(Crash::AfterTranscriptSave)) {
            self.die().await
        }
        Ok(saved)
    }
    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        self.inner.get_transcript(run_id).await
    }
}

/// Drives the replay through the real pipe, as a sweep does (unfenced). `None` when the
/// injected crash struck first.
async fn run_pipe(case: &Case, crash: Option<Crash>) -> Option<RunRecord> {
    let store = Arc::new(CrashingStore {
        inner: case.store.clone(),
        crash,
        appended: AtomicUsize::new(0),
        crashed: CancellationToken::new(),
    });
    let signal = CancellationToken::new();
    let stream = case
        .drive_with(store.clone())
        .drive(
            DriveRequest {
                run_id: RUN.into(),
                thread_id: THREAD.into(),
                fence: None,
            },
            signal.clone(),
        )
        .unwrap();
    let clock = TokioClock::new(1_000);
    let pipe = pipe_to_run_log(
        stream,
        PipeContext {
            writer: Writer {
                runs: case.store.as_ref(),
                log: store.as_ref(),
                claim: None,
            },
            clock: &clock,
            run_id: RUN,
            thread_id: THREAD,
            signal: &signal,
            proven_finished: false,
        },
    );
    let crashed = store.crashed.cancelled();
    futures::pin_mut!(pipe, crashed);
    match select(pipe, crashed).await {
        Either::Left((record, _)) => Some(record),
        Either::Right(_) => None,
    }
}

/// What a run ends with, to compare an interrupted run against an uninterrupted one.
#[derive(Debug, PartialEq)]
struct Outcome {
    status: RunStatus,
    error: Option<RunError>,
    log: Vec<Chunk>,
    transcript: Vec<TranscriptMessage>,
    exit_code: Option<i64>,
}

async fn outcome(case: &Case, record: RunRecord) -> Outcome {
    let transcript = case.transcript().await.expect("a transcript was saved");
    Outcome {
        status: record.status,
        error: record.error,
        log: case.log().await,
        transcript: transcript.messages,
        exit_code: transcript.exit_code,
    }
}

async fn case_with(journal: &[u8], sentinels: &[(usize, i64)]) -> Case {
    let case = Case::new().await;
    let mut at = 0;
    for &(offset, code) in sentinels {
        case.sandbox.write(&journal[at..offset]);
        let paths = journal_paths(RUN, Some(DIR)).unwrap();
        case.sandbox
            .write(format!("{}\n", exit_sentinel_line(&paths, code)).as_bytes());
        at = offset;
    }
    case.sandbox.write(&journal[at..]);
    case
}

/// For a journal (its bytes, with a sentinel of `code` inserted at each offset): the outcome of
/// an uninterrupted drive, then, for a crash after every possible number of appends and after
/// the transcript save, that a resumed drive ends with the very same outcome.
async fn assert_resumes_identically(name: &str, journal: &[u8], sentinels: &[(usize, i64)]) {
    let case = case_with(journal, sentinels).await;
    let record = run_pipe(&case, None).await.expect("no crash injected");
    let expected = outcome(&case, record).await;

    let mut crashes: Vec<Crash> = (1..=expected.log.len()).map(Crash::AfterAppends).collect();
    crashes.push(Crash::AfterTranscriptSave);
    for crash in crashes {
        let case = case_with(journal, sentinels).await;
        assert!(
            run_pipe(&case, Some(crash)).await.is_none(),
            "{name}: the crash {crash:?} never struck"
        );
        let record = run_pipe(&case, None).await.expect("no crash injected");
        assert_eq!(
            outcome(&case, record).await,
            expected,
            "{name}: resumed after a crash {crash:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_resumed_drive_ends_as_an_uninterrupted_one_after_exit_zero() {
    let journal =
        b"{\"delta\":\"a\"}\n{\"type\":\"TOOL_CALL_START\",\"id\":\"t\"}\n{\"delta\":\"b\"}\n";
    assert_resumes_identically("exit 0", journal, &[(journal.len(), 0)]).await;
}

#[tokio::test(start_paused = true)]
async fn a_resumed_drive_ends_as_an_uninterrupted_one_after_a_non_zero_exit() {
    // Includes a crash right after the synthesized RUN_ERROR was appended: not appended twice.
    let journal = b"{\"delta\":\"a\"}\n{\"delta\":\"b\"}\n";
    assert_resumes_identically("exit 3", journal, &[(journal.len(), 3)]).await;
}

#[tokio::test(start_paused = true)]
async fn a_resumed_drive_ends_as_an_uninterrupted_one_after_the_agents_own_run_error() {
    // Includes a crash right after the agent's RUN_ERROR was appended: still failed, with it.
    let journal =
        b"{\"delta\":\"a\"}\n{\"type\":\"RUN_ERROR\",\"message\":\"model refused\",\"code\":\"refused\"}\n";
    assert_resumes_identically("agent RUN_ERROR", journal, &[(journal.len(), 1)]).await;
}

#[tokio::test(start_paused = true)]
async fn a_resumed_drive_ends_as_an_uninterrupted_one_after_a_sentinel_on_a_partial_line() {
    let journal = b"{\"delta\":\"a\"}\n{\"delta\":\"All done\"}";
    assert_resumes_identically("partial line, exit 0", journal, &[(journal.len(), 0)]).await;
    let journal = b"{\"delta\":\"cut mid-wri";
    assert_resumes_identically("partial line, exit 137", journal, &[(journal.len(), 137)]).await;
}

#[tokio::test(start_paused = true)]
async fn a_resumed_drive_ends_as_an_uninterrupted_one_with_two_sentinels() {
    let journal = b"{\"delta\":\"a\"}\n{\"delta\":\"b\"}\n{\"delta\":\"ignored\"}\n";
    assert_resumes_identically("0 then 7", journal, &[(14, 0), (28, 7)]).await;
    assert_resumes_identically("7 then 0", journal, &[(14, 7), (28, 0)]).await;
}

#[tokio::test(start_paused = true)]
async fn the_uninterrupted_outcomes_the_resume_tests_compare_against_are_right() {
    let journal = b"{\"delta\":\"a\"}\n";
    let case = case_with(journal, &[(journal.len(), 3)]).await;
    let record = run_pipe(&case, None).await.unwrap();
    let outcome = outcome(&case, record).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    assert_eq!(
        outcome.error,
        Some(RunError::new("agent exited with code 3").with_code("exit_3"))
    );
    assert_eq!(outcome.log.len(), 2);
    assert_eq!(outcome.log.iter().filter(|c| c.is_run_error()).count(), 1);
    assert_eq!(outcome.exit_code, Some(3));
    assert_eq!(outcome.transcript[0].content, "a");
}

/// A drive failed (its RUN_ERROR, which carries no `journalEnd`, reached the log) and its
/// terminal write failed too, so the run stayed `running` with an open log: viewers were told it
/// failed, so the next drive ends it failed instead of appending after that RUN_ERROR.
#[tokio::test(start_paused = true)]
async fn a_pipe_run_error_left_by_a_drive_whose_terminal_write_failed_ends_the_next_drive() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"hello\"}\n");
    let first = pipe(&case, case.stream(&CancellationToken::new()), Some(1)).await;
    assert!(first.is_none());
    let pipes_error = Chunk::run_error(&reaper_core::RunError::new("store unavailable"));
    case.store
        .append(RUN, None, vec![pipes_error], 0)
        .await
        .unwrap();
    case.sandbox.write(b"{\"delta\":\" world\"}\n");
    case.sentinel(0);

    let mut stream = case.stream(&CancellationToken::new());
    let only = stream.next().await.unwrap().unwrap();
    assert_eq!(only.kind(), Some(DELIVERED_RUN_ERROR));
    assert!(stream.next().await.is_none(), "nothing after the ending");
    let log = case.log().await;
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log.last().unwrap().is_run_error());
}

/// Resuming a run whose RUN_ERROR is already in the log: a failed transcript save must not add a
/// second RUN_ERROR after it.
#[tokio::test(start_paused = true)]
async fn a_delivered_ending_is_yielded_even_when_the_transcript_save_fails() {
    let case = Case::new().await;
    case.sandbox.write(b"{\"delta\":\"hello\"}\n");
    let pipes_error = Chunk::run_error(&reaper_core::RunError::new("store unavailable"));
    case.store
        .append(RUN, None, vec![pipes_error], 0)
        .await
        .unwrap();
    let mut stream = case
        .drive_with(Arc::new(FailingMessages))
        .drive(
            DriveRequest {
                run_id: RUN.into(),
                thread_id: THREAD.into(),
                fence: None,
            },
            CancellationToken::new(),
        )
        .unwrap();
    let only = stream.next().await.unwrap().unwrap();
    assert_eq!(only.kind(), Some(DELIVERED_RUN_ERROR));
    assert!(stream.next().await.is_none());
}
