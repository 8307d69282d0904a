//! `pipe_to_run_log` (spec C): drains a drive's chunks into the run's delivery log, then writes a
//! terminal status and closes the log — on every path except a terminal write the store refused, never failing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{FutureExt, StreamExt};

use crate::claim::{TerminalResult, Writer};
use crate::domain::{Chunk, NewRun, RunError, RunRecord, TerminalStatus, TerminalWrite};
use crate::ports::{CancellationToken, ChunkStream, Clock};

/// At most this many chunks that are already available are appended in one request.
pub const MAX_APPEND_BATCH: usize = 64;

/// The type of the chunk a drive yields, instead of a `RUN_ERROR`, when the run's delivery log
/// already holds that `RUN_ERROR`: a drive resumed after a crash that came after the append and
/// before the terminal write. The pipe then records the run `failed` with the error the chunk
/// carries (under `error`) and appends nothing, so the resumed run ends exactly as an
/// uninterrupted one would, without a second `RUN_ERROR`. Build it with [`delivered_run_error`].
pub const DELIVERED_RUN_ERROR: &str = "REAPER_DELIVERED_RUN_ERROR";

/// The [`DELIVERED_RUN_ERROR`] chunk for a `RUN_ERROR` chunk that is already in the log.
pub fn delivered_run_error(run_error: &Chunk) -> Chunk {
    Chunk::new(DELIVERED_RUN_ERROR).with("error", serde_json::Value::Object(run_error.to_map()))
}

/// The error a [`DELIVERED_RUN_ERROR`] chunk carries, if `chunk` is one.
fn delivered_error(chunk: &Chunk) -> Option<RunError> {
    (chunk.kind() == Some(DELIVERED_RUN_ERROR))
        .then(|| RunError::from_json(&chunk.get("error").unwrap_or(serde_json::Value::Null)))
}

/// What a pipe needs besides the stream.
#[derive(Clone, Copy)]
pub struct PipeContext<'a> {
    /// Where the chunks are written.
    pub writer: Writer<'a>,
    /// The time source.
    pub clock: &'a dyn Clock,
    /// The run being piped.
    pub run_id: &'a str,
    /// Its conversation.
    pub thread_id: &'a str,
    /// Cancels the pipe.
    pub signal: &'a CancellationToken,
    /// The probe proved the agent finished: its whole output is in the journal, so a stop (the
    /// budget, a lost claim) must not cut it. The pipe then lands the chunk the drive is
    /// producing, writes no terminal status and leaves the log open; the run stays `running`
    /// and the next sweep resumes the replay from what landed.
    pub proven_finished: bool,
}

impl std::fmt::Debug for PipeContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeContext")
            .field("run_id", &self.run_id)
            .field("writer", &self.writer)
            .finish()
    }
}

/// Why the loop ended.
enum Ending {
    Status(TerminalStatus, Option<RunError>),
    Threw(RunError),
    /// A proven-finished run stopped before its output ended: no terminal write.
    Suspended,
}

/// Pipes `stream` into the run's log and returns the final record. Never fails:
///
/// - every chunk is appended (in batches of what is already available) until the stream ends,
///   the signal fires (the chunk pulled after the abort is not appended), or a `RUN_ERROR`
///   chunk is appended (status `failed` with its error);
/// - a [`DELIVERED_RUN_ERROR`] chunk ends it like a `RUN_ERROR` but is not appended (the log
///   already holds that `RUN_ERROR`);
/// - a stream error, a failed `create_or_resume` or a failed append appends a synthetic
///   `RUN_ERROR` (best effort) and records `failed`;
/// - after the loop, a fired signal means `aborted`, otherwise `completed`;
/// - with [`PipeContext::proven_finished`], a fired signal never means `aborted`: the chunks
///   the drive still yields at once (up to one batch) are appended, and the pipe returns the
///   stored record, still `running`, without a terminal write or a close;
/// - the terminal write goes through the writer (suppressed if the claim was lost); when it
///   landed, `close` is called exactly once (fenced like it), and the record is re-read.
pub async fn pipe_to_run_log(stream: ChunkStream, cx: PipeContext<'_>) -> RunRecord {
    pipe_and_confirm(stream, cx).await.record
}

/// The pipe's final record, and whether it is the store's own (re-read after the terminal write
/// landed or was suppressed) rather than the local copy a failed write or re-read leaves.
#[derive(Debug, Clone)]
pub struct Piped {
    /// The run's final record.
    pub record: RunRecord,
    /// Whether `record` is the store's own (else the local copy).
    pub from_store: bool,
}

/// [`pipe_to_run_log`], saying whether the record came from the store: the sweep reclaims only
/// on the store's word, and this spares it a second read of the record.
pub async fn pipe_and_confirm(stream: ChunkStream, cx: PipeContext<'_>) -> Piped {
    let started_at = cx.clock.now_ms();
    let ending = match drain(stream, &cx).await {
        Ok(ending) => ending,
        Err(err) => Ending::Threw(err),
    };
    let (status, error) = match ending {
        Ending::Suspended => return suspended(&cx, started_at).await,
        Ending::Status(status, error) => (status, error),
        Ending::Threw(mut err) => {
            tracing::error!(target: "reaper", run_id = cx.run_id, error = %err.message, "the run failed before completing");
            let synthetic = Chunk::run_error(&err);
            match ends_in_run_error(&cx).await {
                Some(true) => {
                    // An earlier drive's RUN_ERROR ends the log (its terminal write failed): the
                    // viewers already know the run failed, and a second one would follow the
                    // first.
                    tracing::debug!(target: "reaper", run_id = cx.run_id, "the log already ends in a RUN_ERROR; not appending another");
                }
                None => {
                    // Unknown is not "no": appending could put a second RUN_ERROR after the
                    // first. The terminal write still records the failure and its error.
                    tracing::warn!(target: "reaper", run_id = cx.run_id, "reading the log's last entry failed; not appending a RUN_ERROR that may follow another");
                }
                Some(false) => {
                    if let Err(secondary) = cx
                        .writer
                        .append(cx.run_id, vec![synthetic], cx.clock.now_ms())
                        .await
                    {
                        tracing::error!(target: "reaper", run_id = cx.run_id, error = %secondary, "appending the synthesized RUN_ERROR failed");
                        err.message = format!(
                            "{}; appending the synthesized RUN_ERROR failed: {secondary}",
                            err.message
                        );
                    }
                }
            }
            (TerminalStatus::Failed, Some(err))
        }
    };
    finish(&cx, started_at, status, error).await
}

/// Whether the log's last entry is a `RUN_ERROR`; `None` when a read failed and nobody knows.
async fn ends_in_run_error(cx: &PipeContext<'_>) -> Option<bool> {
    let log = cx.writer.log;
    let snapshot = log.snapshot(cx.run_id).await.ok()?;
    if snapshot.len == 0 {
        return Some(false);
    }
    let last = log.read(cx.run_id, snapshot.len - 1, 1).await.ok()?;
    Some(last.first().is_some_and(|e| e.chunk.is_run_error()))
}

async fn drain(mut stream: ChunkStream, cx: &PipeContext<'_>) -> Result<Ending, RunError> {
    cx.writer
        .runs
        .create_or_resume(NewRun {
            run_id: cx.run_id.to_string(),
            thread_id: cx.thread_id.to_string(),
            started_at: cx.clock.now_ms(),
            status: None,
        })
        .await
        .map_err(|e| RunError::new(e.to_string()))?;
    if cx.signal.is_cancelled() {
        return Ok(stopped(cx));
    }
    let mut batch: Vec<Chunk> = Vec::new();
    loop {
        // Wait for one chunk, then take whatever else is already there, so a replay of a long
        // journal costs one request per batch rather than per chunk.
        let mut next = stream.next().await;
        let mut ended = false;
        let mut aborted = false;
        let mut run_error = None;
        loop {
            match next {
                None => {
                    ended = true;
                    break;
                }
                Some(Err(e)) => {
                    flush(cx, &mut batch).await?;
                    return Err(RunError::normalise(&e.message, e.code, e.is_abort));
                }
                Some(Ok(chunk)) => {
                    // A finished run's chunk is its output, whole: it lands even after a stop.
                    if cx.signal.is_cancelled() && !cx.proven_finished {
                        aborted = true;
                        break;
                    }
                    if let Some(err) = delivered_error(&chunk) {
                        run_error = Some(err);
                        break;
                    }
                    let is_error = chunk.is_run_error();
                    if is_error {
                        run_error = Some(chunk.as_run_error());
                    }
                    batch.push(chunk);
                    if is_error || batch.len() >= MAX_APPEND_BATCH {
                        break;
                    }
                }
            }
            match stream.next().now_or_never() {
                Some(item) => next = item,
                None => break,
            }
        }
        flush(cx, &mut batch).await?;
        if let Some(err) = run_error {
            return Ok(Ending::Status(TerminalStatus::Failed, Some(err)));
        }
        if aborted {
            return Ok(Ending::Status(TerminalStatus::Aborted, None));
        }
        if cx.proven_finished && cx.signal.is_cancelled() {
            // What landed stays; the rest is in the journal for the next sweep.
            return Ok(Ending::Suspended);
        }
        if ended {
            break;
        }
        // A stream that is always ready must not starve the budget timer sharing this task.
        YieldNow(false).await;
    }
    // The post-loop re-check: a producer that notices the abort and ends its stream normally
    // was still aborted.
    if cx.signal.is_cancelled() {
        Ok(stopped(cx))
    } else {
        Ok(Ending::Status(TerminalStatus::Completed, None))
    }
}

/// How a stopped pipe ends: `aborted`, or suspended for a run whose output must not be cut.
fn stopped(cx: &PipeContext<'_>) -> Ending {
    if cx.proven_finished {
        Ending::Suspended
    } else {
        Ending::Status(TerminalStatus::Aborted, None)
    }
}

/// The end of a suspended pipe: no terminal write and no close (the next sweep's replay appends
/// the rest), only the re-read, so the sweep sees the run still `running` in the store.
async fn suspended(cx: &PipeContext<'_>, started_at: i64) -> Piped {
    tracing::info!(target: "reaper", run_id = cx.run_id, "stopped before the finished run's output was all delivered; what landed stays and the next sweep resumes from it");
    match cx.writer.runs.get(cx.run_id).await {
        Ok(Some(record)) => Piped {
            record,
            from_store: true,
        },
        Ok(None) | Err(_) => Piped {
            record: RunRecord::new(cx.run_id, cx.thread_id, started_at),
            from_store: false,
        },
    }
}

async fn flush(cx: &PipeContext<'_>, batch: &mut Vec<Chunk>) -> Result<(), RunError> {
    if batch.is_empty() {
        return Ok(());
    }
    // Handed over whole: the store moves the chunks in rather than copying each one.
    let chunks = std::mem::take(batch);
    cx.writer
        .append(cx.run_id, chunks, cx.clock.now_ms())
        .await
        .map_err(|e| RunError::new(e.to_string()))
}

/// `finish`: total, every step guarded; `close` runs only after the terminal write landed, and
/// fenced like it: never after a write the store failed (the run is still `running`), and never
/// after one the fence suppressed (the log belongs to the driver that took the run over).
async fn finish(
    cx: &PipeContext<'_>,
    started_at: i64,
    status: TerminalStatus,
    error: Option<RunError>,
) -> Piped {
    let write = TerminalWrite {
        status,
        finished_at: cx.clock.now_ms(),
        error,
    };
    let mut record = RunRecord::new(cx.run_id, cx.thread_id, started_at);
    record.apply(&write.to_patch());
    let local = Piped {
        record,
        from_store: false,
    };

    match cx.writer.write_terminal(cx.run_id, &write).await {
        Ok(TerminalResult::Written) => {
            // Fenced like the write before it: the close is this driver's only while it holds
            // the run.
            match cx.writer.close(cx.run_id, cx.clock.now_ms()).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(target: "reaper", run_id = cx.run_id, "the fence refused closing the log: another driver holds the run");
                }
                Err(error) => {
                    tracing::error!(target: "reaper", run_id = cx.run_id, %error, "closing the run event log failed");
                }
            }
        }
        // The run is another driver's now: the log is its to write and close, never this one's.
        Ok(TerminalResult::Suppressed) => {}
        Err(error) => {
            // The run is still `running` in the store: a closed log would refuse the next
            // sweep's drive and turn a retryable write failure into a failed run.
            tracing::error!(target: "reaper", run_id = cx.run_id, %error, "recording the terminal run record failed; the log stays open for the next sweep");
            return local;
        }
    }
    match cx.writer.runs.get(cx.run_id).await {
        Ok(Some(record)) => Piped {
            record,
            from_store: true,
        },
        Ok(None) => {
            tracing::error!(target: "reaper", run_id = cx.run_id, "record vanished before the terminal re-read");
            local
        }
        Err(error) => {
            tracing::error!(target: "reaper", run_id = cx.run_id, %error, "re-reading the terminal run record failed");
            local
        }
    }
}

/// Yields to the executor once. Runtime-agnostic (tokio and a Worker alike).
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
