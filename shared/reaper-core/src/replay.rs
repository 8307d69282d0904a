//! The default drive: journal replay. [`JournalReplayDrive`] turns the lines a finished agent
//! left in its journal into chunks for the sweep to append to the run's delivery log, resuming
//! after what the log already holds.
//!
//! Pure: every read goes through the ports (`exec` in the sandbox, the stores), every wait through
//! the injected [`Sleeper`], every instant through the injected [`Clock`].
//!
//! # What a drive does
//!
//! 1. Reads the delivery log already stored for the run (`snapshot` + paged `read`): every chunk
//!    this drive produces carries [`JOURNAL_END_FIELD`], the journal byte offset just past its
//!    line, so the greatest one in the log is where the replay resumes. A chunk is therefore never
//!    appended twice, even across a crash and a second sweep. Entries without the field (a live
//!    route's own events) count towards the transcript but not towards the position: a live
//!    route that tails the journal must stamp its chunks with [`line_chunk`] to be resumable.
//!    When the log already holds the run's ending, a `RUN_ERROR` with `journalEnd` (see 6), the
//!    drive goes straight to 5 and then yields [`crate::pipe::DELIVERED_RUN_ERROR`] instead of
//!    the `RUN_ERROR`: the pipe records the same failure without appending it again.
//! 2. Finds the run's sandbox: the record's `sandboxKey` → the instance record → the provider's
//!    `resume`. Anything missing (or an instance of another provider) ends the stream with an
//!    error: the run is recorded `failed` rather than replayed from the wrong place.
//! 3. Reads the journal from the resume offset in bounded pages (`journal_read_page_command`, at
//!    most [`ReplayOptions::page_bytes`] per `exec`), splitting bytes into complete lines; a
//!    partial trailing line is withheld until its `\n` arrives. Each line becomes one chunk:
//!    - a JSON object with a string `type` passes through unchanged as an AG-UI event (except
//!      the pipe's reserved [`crate::pipe::DELIVERED_RUN_ERROR`] type);
//!    - a JSON object with a string `delta` and no `type` (`{"delta":"..."}`) becomes
//!      `{"type":"TEXT_MESSAGE_CONTENT","delta":...}`;
//!    - a blank line is skipped;
//!    - any other line becomes `{"type":"JOURNAL_LINE","line":<the line>}`;
//!
//!    and each gets `journalEnd`. Forged sentinels (`{"__exit":0}`, another run's nonce) are
//!    agent output like any other line.
//! 4. Ends at the journal's **last** genuine nonced exit sentinel, as the probe's scan does
//!    ([`crate::journal::parse_journal_exit`]), so both report the same exit code. A sentinel is
//!    not a chunk. Lines after a sentinel are held back until the journal has been read to its
//!    current end: if another genuine sentinel follows them (the agent ran again under the same
//!    runId), they are delivered and that one counts; otherwise they are ignored. A sentinel that
//!    follows an unterminated last line on the same line ([`crate::journal::find_exit_sentinel`])
//!    counts too; the text before it becomes a chunk ending where the sentinel starts. With no
//!    sentinel yet it waits [`ReplayOptions::poll_ms`] and reads again, for ever: a journal
//!    without a sentinel is never finalized; only the cancel signal ends it.
//! 5. Saves the transcript ([`MessageStore::save_transcript`]) built from the **whole** output
//!    (earlier log entries and new lines): messages already stored for the run other than a
//!    trailing assistant message are kept (the chat route's user prompt), then one assistant
//!    message whose content is every `TEXT_MESSAGE_CONTENT` delta concatenated, and the exit
//!    code (0, or the ending `RUN_ERROR`'s integer `exitCode`). Only then does the stream end, so
//!    `finalized` means "transcript saved"; a failed save ends the stream with an error (the run
//!    becomes `failed`). Saving is idempotent: a resumed drive saves the same transcript.
//! 6. For a non-zero exit it then yields `{"type":"RUN_ERROR","message":"agent exited with code
//!    N","code":"exit_N","exitCode":N,"journalEnd":<end of the sentinel's line>}` so the run is
//!    recorded `failed`. The reference's reader only surfaces the sentinel's code to its caller
//!    (spec D.7); this message and code are ours. A `RUN_ERROR` event in the journal itself is
//!    treated the same way: the transcript is saved first, then it is yielded and the replay ends
//!    (the pipe stops at a `RUN_ERROR`). Both carry `journalEnd`, which is how step 1 recognizes
//!    them after a crash.
//!
//! The cancel signal is honoured between pages, during each `exec` and while waiting: the stream
//! then ends without an error and without saving a transcript.
//!
//! # Journal files are kept
//!
//! Unlike the reference's reader (D.7), the replay does not remove the journal after the
//! sentinel. A crash between the transcript save and the terminal write leaves the run
//! `running`; the next sweep's probe must still find the sentinel to finish it, so the files stay
//! until [`crate::prune`] removes them once the run is terminal.
//!
//! A failed page read (an `exec` error or a bad base64 frame) is retried after a poll interval,
//! up to [`ReplayOptions::read_attempts`] in a row, then ends the stream with an error.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::future::{select, Either};
use serde_json::Value;

use crate::domain::{Chunk, Transcript, TranscriptMessage};
use crate::error::DriveError;
use crate::journal::{
    decode_base64_frame, find_exit_sentinel, journal_paths, journal_read_page_command, JournalLine,
    JournalLines, JournalPaths,
};
use crate::pipe::{delivered_run_error, DELIVERED_RUN_ERROR};
use crate::ports::{
    CancellationToken, ChunkStream, Clock, DeliveryLog, Drive, DriveRequest, ExecOptions, Fenced,
    MessageStore, RunStore, SandboxHandle, SandboxInstanceStore, SandboxProvider, Sleeper,
};

/// The chunk field holding the journal byte offset just past the chunk's line.
pub const JOURNAL_END_FIELD: &str = "journalEnd";
/// The field of the `RUN_ERROR` for a non-zero exit that holds the code.
pub const EXIT_CODE_FIELD: &str = "exitCode";
/// The type of a chunk carrying a journal line that is not an event.
pub const JOURNAL_LINE: &str = "JOURNAL_LINE";
/// Default most journal bytes read per `exec`.
pub const DEFAULT_REPLAY_PAGE_BYTES: u64 = 256 * 1024;
/// Default wait before re-reading a journal that has no sentinel yet (the reference's poll
/// interval).
pub const DEFAULT_REPLAY_POLL_MS: u64 = 250;
/// Default failed page reads in a row before the replay gives up.
pub const DEFAULT_REPLAY_READ_ATTEMPTS: u32 = 3;
/// Delivery-log entries read per request when rebuilding the position and transcript.
const LOG_READ_PAGE: usize = 1000;

/// How a replay reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOptions {
    /// The journal directory; `None` is [`crate::journal::DEFAULT_JOURNAL_DIR`].
    pub journal_dir: Option<String>,
    /// Most journal bytes per `exec`. At least 1.
    pub page_bytes: u64,
    /// How long one command in the sandbox may take.
    pub exec_timeout_ms: u64,
    /// Wait before re-reading a journal with no new complete line and no sentinel.
    pub poll_ms: u64,
    /// Failed page reads in a row before the stream ends with an error. At least 1.
    pub read_attempts: u32,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            journal_dir: None,
            page_bytes: DEFAULT_REPLAY_PAGE_BYTES,
            exec_timeout_ms: ExecOptions::default().timeout_ms,
            poll_ms: DEFAULT_REPLAY_POLL_MS,
            read_attempts: DEFAULT_REPLAY_READ_ATTEMPTS,
        }
    }
}

/// The ports a replay runs on.
#[derive(Clone)]
pub struct ReplayDeps {
    /// Where the runs are.
    pub runs: Arc<dyn RunStore>,
    /// Finds a run's sandbox.
    pub instances: Arc<dyn SandboxInstanceStore>,
    /// Reaches the sandbox.
    pub provider: Arc<dyn SandboxProvider>,
    /// The run's delivery log.
    pub logs: Arc<dyn DeliveryLog>,
    /// Where the transcript is saved.
    pub messages: Arc<dyn MessageStore>,
    /// The time.
    pub clock: Arc<dyn Clock>,
    /// Waits between reads.
    pub sleeper: Arc<dyn Sleeper>,
}

impl std::fmt::Debug for ReplayDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayDeps")
            .field("provider", &self.provider.name())
            .finish_non_exhaustive()
    }
}

/// The [`Drive`] that replays a run's journal (see the module documentation).
#[derive(Debug, Clone)]
pub struct JournalReplayDrive {
    deps: ReplayDeps,
    options: ReplayOptions,
}

impl JournalReplayDrive {
    /// A drive over these ports.
    pub fn new(deps: ReplayDeps, options: ReplayOptions) -> Self {
        JournalReplayDrive { deps, options }
    }
}

impl Drive for JournalReplayDrive {
    /// Checks the options and returns a lazy stream; all I/O happens while it is polled.
    fn drive(
        &self,
        request: DriveRequest,
        signal: CancellationToken,
    ) -> Result<ChunkStream, DriveError> {
        if self.options.page_bytes == 0 || self.options.read_attempts == 0 {
            return Err(DriveError::new(
                "invalid replay options: page_bytes and read_attempts must be at least 1",
            )
            .with_code("replay_options"));
        }
        let replay = Replay {
            deps: self.deps.clone(),
            options: self.options.clone(),
            request,
            signal,
            phase: Phase::Start,
            queue: VecDeque::new(),
            assistant: String::new(),
            finish_lines: false,
        };
        Ok(Box::pin(futures::stream::unfold(
            replay,
            |mut replay| async move { replay.next().await.map(|item| (item, replay)) },
        )))
    }
}

/// The chunk for one journal line ending at byte `end` (exclusive), or `None` for a blank line.
/// A live route tailing the journal should produce its chunks with this too, so a replay after
/// it resumes where it stopped.
pub fn line_chunk(line: &str, end: u64) -> Option<Chunk> {
    if line.trim().is_empty() {
        return None;
    }
    let chunk = match Chunk::from_json(line) {
        // The pipe's own marker type is not an event an agent can send: it would end the run
        // without its error reaching the log.
        Some(chunk) if chunk.kind().is_some_and(|t| t != DELIVERED_RUN_ERROR) => chunk,
        Some(object) => match object.get_str("delta") {
            Some(delta) => Chunk::text(&delta),
            None => Chunk::new(JOURNAL_LINE).with("line", line),
        },
        None => Chunk::new(JOURNAL_LINE).with("line", line),
    };
    Some(chunk.with(JOURNAL_END_FIELD, end))
}

/// The journal offset a chunk was stamped with.
pub fn journal_end(chunk: &Chunk) -> Option<u64> {
    chunk
        .get(JOURNAL_END_FIELD)
        .as_ref()
        .and_then(Value::as_u64)
}

enum Phase {
    Start,
    Reading(Box<Reader>),
    Finishing {
        ending: Ending,
        /// The ending's `RUN_ERROR` is already in the delivery log (a resumed drive).
        delivered: bool,
    },
    Done,
}

/// How the run ended.
enum Ending {
    /// The journal's last genuine sentinel says 0.
    Completed,
    /// A `RUN_ERROR`: the agent's own event, or the one [`exit_run_error`] makes for a non-zero
    /// sentinel. Either carries `journalEnd`, which is how a resumed drive finds it in the log.
    Failed(Chunk),
}

impl Ending {
    fn from_exit(code: i64, sentinel_end: u64) -> Ending {
        if code == 0 {
            Ending::Completed
        } else {
            Ending::Failed(exit_run_error(code, sentinel_end))
        }
    }

    /// The transcript's exit code: the `RUN_ERROR`'s integer `exitCode`, if it has one.
    fn exit_code(&self) -> Option<i64> {
        match self {
            Ending::Completed => Some(0),
            Ending::Failed(chunk) => chunk.get(EXIT_CODE_FIELD).as_ref().and_then(Value::as_i64),
        }
    }
}

/// The `RUN_ERROR` for a non-zero exit, stamped with the end of the sentinel's line: it stands
/// for that line in the log, so a drive resumed after it was appended neither appends it again
/// nor reads past the sentinel looking for another.
fn exit_run_error(code: i64, sentinel_end: u64) -> Chunk {
    Chunk::new(Chunk::RUN_ERROR)
        .with("message", format!("agent exited with code {code}"))
        .with("code", format!("exit_{code}"))
        .with(EXIT_CODE_FIELD, code)
        .with(JOURNAL_END_FIELD, sentinel_end)
}

struct Reader {
    handle: Arc<dyn SandboxHandle>,
    paths: JournalPaths,
    lines: JournalLines,
    /// The next byte to read: past every byte received, including a withheld partial line.
    read_pos: u64,
    /// The last page was short: the journal has no more bytes yet, so wait before reading.
    caught_up: bool,
    failures: u32,
    /// The last genuine sentinel read so far: its exit code and the end of its line.
    exit: Option<(i64, u64)>,
    /// Complete lines after that sentinel, held back: they are delivered only if a later genuine
    /// sentinel follows them (the run's agent ran again), and dropped if the journal ends first,
    /// so the replay ends where the probe's "last genuine sentinel" does.
    after_exit: Vec<JournalLine>,
}

/// What the delivery log already holds.
struct Delivered {
    /// The journal offset to resume reading from.
    resume: u64,
    /// The run's `RUN_ERROR`, when a replay (or a live route) already appended it.
    ending: Option<Chunk>,
}

enum Step {
    Continue,
    Cancelled,
    Ended(Ending),
}

struct Replay {
    deps: ReplayDeps,
    options: ReplayOptions,
    request: DriveRequest,
    signal: CancellationToken,
    phase: Phase,
    queue: VecDeque<Chunk>,
    /// Every text delta of the run so far, earlier log entries included.
    assistant: String,
    /// A stop lets the line in hand finish (see [`Replay::finishing_line`]): set for a run with
    /// no cancel recorded, whose journal is a finished agent's, so the line has an end.
    finish_lines: bool,
}

impl Replay {
    async fn next(&mut self) -> Option<Result<Chunk, DriveError>> {
        loop {
            if self.signal.is_cancelled() && !self.finishing_line() {
                if self.finish_lines {
                    // Whole lines only: what is queued may still land (the pipe takes what it
                    // can at once); nothing more is read.
                    if let Some(chunk) = self.queue.pop_front() {
                        return Some(Ok(chunk));
                    }
                }
                self.phase = Phase::Done;
                self.queue.clear();
                return None;
            }
            if let Some(chunk) = self.queue.pop_front() {
                return Some(Ok(chunk));
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Start => match self.start().await {
                    Ok(phase) => self.phase = phase,
                    Err(e) => return Some(Err(e)),
                },
                Phase::Reading(mut reader) => match self.read_page(&mut reader).await {
                    Ok(Step::Continue) => self.phase = Phase::Reading(reader),
                    Ok(Step::Cancelled) => return None,
                    Ok(Step::Ended(ending)) => {
                        self.phase = Phase::Finishing {
                            ending,
                            delivered: false,
                        }
                    }
                    Err(e) => return Some(Err(e)),
                },
                Phase::Finishing { ending, delivered } => {
                    // Saved again on a resumed drive too: the same content, and a `RUN_ERROR`
                    // that a live route delivered came with no transcript at all.
                    if let Err(e) = self.save_transcript(&ending).await {
                        if !delivered {
                            return Some(Err(e));
                        }
                        // The log already ends in the run's RUN_ERROR: a second one (the pipe's
                        // report of this failure) would follow it. The run ends failed either way.
                        tracing::warn!(target: "reaper", run_id = self.run_id(), error = %e.message, "saving the transcript of a run whose RUN_ERROR is already delivered failed");
                    }
                    match ending {
                        Ending::Completed => {}
                        Ending::Failed(chunk) if delivered => {
                            self.queue.push_back(delivered_run_error(&chunk))
                        }
                        Ending::Failed(chunk) => self.queue.push_back(chunk),
                    }
                }
                Phase::Done => return None,
            }
        }
    }

    fn run_id(&self) -> &str {
        &self.request.run_id
    }

    /// Whether a stop must wait for the line being read: a run that is not cancelled (the probe
    /// proved it finished) with part of a line in hand and nothing queued. Finishing it costs
    /// the rest of that line, which is in the journal already; cutting it would cost the whole
    /// line again on every sweep, so a line longer than one budget's reading would never land.
    fn finishing_line(&self) -> bool {
        self.finish_lines
            && self.queue.is_empty()
            && matches!(&self.phase, Phase::Reading(reader) if !reader.lines.pending().is_empty())
    }

    /// Reads what the log already holds: when it holds the run's ending (a drive resumed after
    /// the `RUN_ERROR` was appended), finishes from it without touching the sandbox; otherwise
    /// finds the sandbox and reads the journal from the resume position.
    async fn start(&mut self) -> Result<Phase, DriveError> {
        let delivered = self.read_delivered().await?;
        if let Some(chunk) = delivered.ending {
            tracing::debug!(
                run_id = self.run_id(),
                "the delivery log already holds the run's RUN_ERROR: finishing from it"
            );
            return Ok(Phase::Finishing {
                ending: Ending::Failed(chunk),
                delivered: true,
            });
        }
        let resume = delivered.resume;
        let run_id = self.request.run_id.clone();
        let setup = |message: String| DriveError::new(message).with_code("replay_setup");
        let store = |what: &str, e: crate::error::StoreError| {
            setup(format!("cannot replay run {run_id}: {what} failed: {e}"))
        };
        let record = self
            .deps
            .runs
            .get(&run_id)
            .await
            .map_err(|e| store("reading the run record", e))?
            .ok_or_else(|| setup(format!("cannot replay run {run_id}: no such run")))?;
        // An expired run's cancel is recorded before its drive: its agent may still be writing,
        // so its line in hand may have no end, and its stop is immediate.
        self.finish_lines = record.cancel_requested != Some(true);
        let key = record.sandbox_key.ok_or_else(|| {
            setup(format!(
                "cannot replay run {run_id}: the run has no sandboxKey, so its sandbox is unknown"
            ))
        })?;
        let instance = self
            .deps
            .instances
            .get(&key)
            .await
            .map_err(|e| store("reading the sandbox instance", e))?
            .ok_or_else(|| {
                setup(format!(
                    "cannot replay run {run_id}: no sandbox instance record for key {key}"
                ))
            })?;
        let provider = self.deps.provider.name();
        if !self.deps.provider.serves(&instance.provider) {
            return Err(setup(format!(
                "cannot replay run {run_id}: sandbox key {key} belongs to provider {}, not {provider}",
                instance.provider
            )));
        }
        let sandbox_id = instance.provider_sandbox_id;
        let handle = self
            .deps
            .provider
            .resume_recorded(&instance.provider, &sandbox_id)
            .await
            .map_err(|e| {
                setup(format!(
                    "cannot replay run {run_id}: resuming sandbox {sandbox_id} failed: {e}"
                ))
            })?
            .ok_or_else(|| {
                setup(format!(
                    "cannot replay run {run_id}: sandbox {sandbox_id} is gone"
                ))
            })?;
        let paths = journal_paths(&run_id, self.options.journal_dir.as_deref())
            .map_err(|e| setup(format!("cannot replay run {run_id}: {e}")))?;

        tracing::debug!(run_id, sandbox = %sandbox_id, resume, "journal replay starting");
        Ok(Phase::Reading(Box::new(Reader {
            handle,
            paths,
            lines: JournalLines::new(resume),
            read_pos: resume,
            caught_up: false,
            failures: 0,
            exit: None,
            after_exit: Vec::new(),
        })))
    }

    /// Reads the whole delivery log: the greatest `journalEnd` is the resume position, every
    /// delta goes into the transcript, and the first `RUN_ERROR` is the run's ending: the
    /// agent's own or the exit's (which carry `journalEnd`), or the pipe's report of an earlier
    /// drive that failed and whose terminal write failed too. Viewers were told the run failed,
    /// so it ends failed; appending after it would leave a log that says both.
    async fn read_delivered(&mut self) -> Result<Delivered, DriveError> {
        let run_id = self.request.run_id.clone();
        let failed = |e: crate::error::StoreError| {
            DriveError::new(format!(
                "cannot replay run {run_id}: reading its delivery log failed: {e}"
            ))
            .with_code("replay_setup")
        };
        let len = self.deps.logs.snapshot(&run_id).await.map_err(failed)?.len;
        let mut resume = 0;
        let mut ending = None;
        let mut from = 0;
        while from < len {
            let entries = self
                .deps
                .logs
                .read(&run_id, from, LOG_READ_PAGE)
                .await
                .map_err(failed)?;
            let Some(last) = entries.last() else { break };
            from = last.offset + 1;
            for entry in entries {
                self.observe(&entry.chunk);
                if let Some(end) = journal_end(&entry.chunk) {
                    resume = resume.max(end);
                }
                if ending.is_none() && entry.chunk.is_run_error() {
                    ending = Some(entry.chunk);
                }
            }
        }
        Ok(Delivered { resume, ending })
    }

    fn observe(&mut self, chunk: &Chunk) {
        if chunk.kind() == Some(Chunk::TEXT_MESSAGE_CONTENT) {
            if let Some(delta) = chunk.get_str("delta") {
                self.assistant.push_str(&delta);
            }
        }
    }

    /// Waits `ms` unless the signal fires first. Returns whether it waited the whole time.
    async fn wait(&self, ms: u64) -> bool {
        let sleep = self.deps.sleeper.sleep(ms);
        let cancelled = self.signal.cancelled();
        futures::pin_mut!(sleep, cancelled);
        matches!(select(sleep, cancelled).await, Either::Left(_))
    }

    async fn read_page(&mut self, reader: &mut Reader) -> Result<Step, DriveError> {
        if reader.caught_up && !self.wait(self.options.poll_ms).await {
            return Ok(Step::Cancelled);
        }
        let command =
            journal_read_page_command(&reader.paths, reader.read_pos, self.options.page_bytes)
                .map_err(|e| DriveError::new(e.to_string()).with_code("replay_options"))?;
        let exec = reader.handle.exec(
            &command,
            ExecOptions {
                timeout_ms: self.options.exec_timeout_ms,
            },
        );
        let output = if self.finish_lines {
            // Not cut by a stop: this page may be the rest of the line in hand (an exec is
            // bounded by its own timeout).
            exec.await
        } else {
            let cancelled = self.signal.cancelled();
            futures::pin_mut!(cancelled);
            match select(exec, cancelled).await {
                Either::Left((output, _)) => output,
                Either::Right(_) => return Ok(Step::Cancelled),
            }
        };
        let bytes = match output
            .map_err(|e| e.to_string())
            .and_then(|out| decode_base64_frame(&out.stdout).map_err(|e| e.to_string()))
        {
            Ok(bytes) => bytes,
            Err(error) => {
                reader.failures += 1;
                tracing::warn!(run_id = self.run_id(), sandbox = reader.handle.id(), %error, attempt = reader.failures, "journal page read failed");
                if reader.failures >= self.options.read_attempts {
                    return Err(DriveError::new(format!(
                        "reading the journal of run {} in sandbox {} failed {} times in a row; \
                         last error: {error}",
                        self.run_id(),
                        reader.handle.id(),
                        reader.failures
                    ))
                    .with_code("journal_read"));
                }
                reader.caught_up = true;
                return Ok(Step::Continue);
            }
        };
        reader.failures = 0;
        reader.read_pos += bytes.len() as u64;
        reader.caught_up = (bytes.len() as u64) < self.options.page_bytes;
        for line in reader.lines.push(&bytes) {
            if let Some(ending) = self.take_line(reader, line) {
                return Ok(Step::Ended(ending));
            }
        }
        // The journal ends at its last genuine sentinel, as the probe's scan does: so a
        // sentinel only ends the replay once everything written after it has been read.
        match reader.exit {
            Some((code, end)) if reader.caught_up => {
                tracing::debug!(
                    run_id = self.run_id(),
                    exit_code = code,
                    "journal exit sentinel reached"
                );
                Ok(Step::Ended(Ending::from_exit(code, end)))
            }
            _ => Ok(Step::Continue),
        }
    }

    /// Takes one complete journal line; returns the ending when it is an agent's `RUN_ERROR`.
    fn take_line(&mut self, reader: &mut Reader, line: JournalLine) -> Option<Ending> {
        let Some(found) = find_exit_sentinel(&line.text, &reader.paths.nonce) else {
            if reader.exit.is_some() {
                reader.after_exit.push(line);
                return None;
            }
            return self.deliver(&line.text, line.end_position);
        };
        // Another sentinel: the lines since the previous one were a finished run's output.
        for held in std::mem::take(&mut reader.after_exit) {
            if let Some(ending) = self.deliver(&held.text, held.end_position) {
                return Some(ending);
            }
        }
        // An unterminated last line before the sentinel ends where the sentinel starts, so a
        // drive resumed after it still reads the sentinel (the rest of the line is ASCII, so the
        // lossy-decoded text and the bytes agree on its length).
        let sentinel_len = (line.text.len() - found.partial_line.len()) as u64;
        let sentinel_start = line.end_position - 1 - sentinel_len;
        if let Some(ending) = self.deliver(found.partial_line, sentinel_start) {
            return Some(ending);
        }
        reader.exit = Some((found.exit_code, line.end_position));
        None
    }

    /// Queues the chunk for the line ending at `end` (none for a blank one); an agent's
    /// `RUN_ERROR` is not queued but returned as the ending (after the transcript is saved).
    fn deliver(&mut self, text: &str, end: u64) -> Option<Ending> {
        let chunk = line_chunk(text, end)?;
        self.observe(&chunk);
        if chunk.is_run_error() {
            return Some(Ending::Failed(chunk));
        }
        self.queue.push_back(chunk);
        None
    }

    async fn save_transcript(&self, ending: &Ending) -> Result<(), DriveError> {
        let run_id = self.run_id();
        let failed = |e: crate::error::StoreError| {
            DriveError::new(format!(
                "saving the transcript of run {run_id} failed: {e}; the run is not finalized"
            ))
            .with_code("transcript_save")
        };
        let mut messages = self
            .deps
            .messages
            .get_transcript(run_id)
            .await
            .map_err(failed)?
            .map(|t| t.messages)
            .unwrap_or_default();
        // A trailing assistant message is this replay's own from an earlier attempt: rebuilt.
        if messages.last().is_some_and(|m| m.role == "assistant") {
            messages.pop();
        }
        if !self.assistant.is_empty() {
            messages.push(TranscriptMessage {
                role: "assistant".into(),
                content: self.assistant.clone(),
            });
        }
        let transcript = Transcript {
            run_id: run_id.to_string(),
            thread_id: self.request.thread_id.clone(),
            messages,
            exit_code: ending.exit_code(),
            saved_at: self.deps.clock.now_ms(),
        };
        match self
            .deps
            .messages
            .save_transcript(&transcript, self.request.fence)
            .await
            .map_err(failed)?
        {
            Fenced::Written(()) => Ok(()),
            // Another driver took the run over: its transcript stands, and this drive's writes
            // are refused from here on (the pipe's fence says so too).
            Fenced::Superseded { observed } => Err(DriveError::new(format!(
                "saving the transcript of run {run_id} was refused: the run's driver epoch is                  {observed}, past this drive's {:?}; another driver holds the run",
                self.request.fence
            ))
            .with_code("superseded")),
        }
    }
}
