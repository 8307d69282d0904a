//! `pipe_to_run_log` (spec C, H8) and the fenced pipe (H7).

use futures::stream;
use reaper_core::claim::{Claim, Writer};
use reaper_core::domain::{Chunk, RunRecord, RunStatus};
use reaper_core::error::{DriveError, StoreError};
use reaper_core::memory::MemoryStore;
use reaper_core::pipe::{delivered_run_error, pipe_to_run_log, PipeContext};
use reaper_core::ports::{CancellationToken, ChunkStream, LeaseStore, RunStore};
use reaper_core::time::ManualClock;
use reaper_core::RunError;
use reaper_testkit::fakes::{LogCapture, Op, SpyStore};
use tracing::Level;

const NOW: i64 = 1_700_000_000_000;

fn chunks(items: Vec<Result<Chunk, DriveError>>) -> ChunkStream {
    Box::pin(stream::iter(items))
}

fn deltas(log: &[Chunk]) -> Vec<String> {
    log.iter()
        .filter_map(|c| c.get_str("delta").as_deref().map(String::from))
        .collect()
}

struct Fixture {
    store: SpyStore,
    clock: ManualClock,
    signal: CancellationToken,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            store: SpyStore::new(MemoryStore::new()),
            clock: ManualClock::new(NOW),
            signal: CancellationToken::new(),
        }
    }

    async fn pipe(&self, stream: ChunkStream, claim: Option<&Claim>) -> RunRecord {
        pipe_to_run_log(
            stream,
            PipeContext {
                writer: Writer {
                    runs: &self.store,
                    log: &self.store,
                    claim,
                },
                clock: &self.clock,
                run_id: "r1",
                thread_id: "t1",
                signal: &self.signal,
                proven_finished: false,
            },
        )
        .await
    }

    async fn log(&self) -> Vec<Chunk> {
        self.store.log_entries("r1").await
    }
}

/// A stream that cancels `signal` after yielding `before`, then behaves as `after` says.
fn abort_midway(signal: CancellationToken, after: &'static str) -> ChunkStream {
    Box::pin(stream::unfold(0u8, move |step| {
        let signal = signal.clone();
        async move {
            match step {
                0 => Some((Ok(Chunk::text("before-abort")), 1)),
                1 => {
                    signal.cancel();
                    match after {
                        "yields" => Some((Ok(Chunk::text("after-abort")), 2)),
                        "throws" => Some((Err(DriveError::aborted()), 2)),
                        _ => None,
                    }
                }
                _ => None,
            }
        }
    }))
}

#[tokio::test]
async fn two_chunks_complete_the_run_and_replay_in_order() {
    let f = Fixture::new();
    let r = f
        .pipe(
            chunks(vec![Ok(Chunk::text("hello ")), Ok(Chunk::text("world"))]),
            None,
        )
        .await;
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.thread_id, "t1");
    assert_eq!(
        f.store.record("r1").await.unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(f.store.closes("r1"), 1);
    assert_eq!(deltas(&f.log().await), vec!["hello ", "world"]);
}

#[tokio::test]
async fn stream_that_throws_fails_the_run_and_appends_a_run_error() {
    let f = Fixture::new();
    let r = f
        .pipe(
            chunks(vec![
                Ok(Chunk::text("partial")),
                Err(DriveError::new("provider exploded")),
            ]),
            None,
        )
        .await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(r.error.unwrap().message.contains("provider exploded"));
    assert_eq!(f.store.closes("r1"), 1);
    assert!(f.log().await.iter().any(Chunk::is_run_error));
}

#[tokio::test]
async fn already_aborted_signal_records_aborted_without_appending() {
    let f = Fixture::new();
    f.signal.cancel();
    let r = f.pipe(chunks(vec![Ok(Chunk::text("x"))]), None).await;
    assert_eq!(r.status, RunStatus::Aborted);
    assert_eq!(f.store.closes("r1"), 1);
    assert!(f.log().await.is_empty());
}

#[tokio::test]
async fn run_error_chunk_is_appended_then_fails_the_run_with_its_message() {
    let f = Fixture::new();
    let r = f
        .pipe(
            chunks(vec![
                Ok(Chunk::text("a")),
                Ok(Chunk::run_error(&RunError::new(
                    "provider rejected the request",
                ))),
                Ok(Chunk::text("never")),
            ]),
            None,
        )
        .await;
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.error.unwrap().message, "provider rejected the request");
    assert_eq!(f.store.closes("r1"), 1);
    let log = f.log().await;
    assert!(log.last().unwrap().is_run_error());
    assert_eq!(deltas(&log), vec!["a"]);
}

#[tokio::test]
async fn a_delivered_run_error_fails_the_run_with_its_error_and_appends_nothing_more() {
    let f = Fixture::new();
    let already_in_log = Chunk::run_error(&RunError::new("model refused").with_code("refused"));
    let r = f
        .pipe(
            chunks(vec![
                Ok(Chunk::text("a")),
                Ok(delivered_run_error(&already_in_log)),
                Ok(Chunk::text("never")),
            ]),
            None,
        )
        .await;
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.error,
        Some(RunError::new("model refused").with_code("refused"))
    );
    assert_eq!(f.store.closes("r1"), 1);
    // The chunk before it is appended; the marker itself and anything after are not.
    let log = f.log().await;
    assert_eq!(deltas(&log), vec!["a"]);
    assert!(!log.iter().any(Chunk::is_run_error));
    assert_eq!(log.len(), 1);
}

#[tokio::test]
async fn run_error_chunk_keeps_its_code() {
    let f = Fixture::new();
    let r = f
        .pipe(
            chunks(vec![Ok(Chunk::run_error(
                &RunError::new("slow down").with_code("rate_limited"),
            ))]),
            None,
        )
        .await;
    assert_eq!(
        r.error,
        Some(RunError::new("slow down").with_code("rate_limited"))
    );
}

#[tokio::test]
async fn chunk_pulled_after_an_abort_is_not_appended() {
    let f = Fixture::new();
    let r = f.pipe(abort_midway(f.signal.clone(), "yields"), None).await;
    assert_eq!(r.status, RunStatus::Aborted);
    assert_eq!(f.store.closes("r1"), 1);
    assert_eq!(deltas(&f.log().await), vec!["before-abort"]);
}

#[tokio::test]
async fn producer_that_ends_after_an_abort_is_still_aborted() {
    let f = Fixture::new();
    let r = f.pipe(abort_midway(f.signal.clone(), "ends"), None).await;
    assert_eq!(r.status, RunStatus::Aborted);
    assert!(r.error.is_none());
    assert_eq!(f.store.closes("r1"), 1);
    assert_eq!(deltas(&f.log().await), vec!["before-abort"]);
}

#[tokio::test]
async fn producer_that_throws_an_abort_error_is_failed_as_aborted() {
    let f = Fixture::new();
    let r = f.pipe(abort_midway(f.signal.clone(), "throws"), None).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.error, Some(RunError::aborted()));
    assert!(r.error.unwrap().message.to_lowercase().contains("aborted"));
    assert_eq!(f.store.closes("r1"), 1);
    assert!(f.log().await.iter().any(Chunk::is_run_error));
}

#[tokio::test]
async fn empty_error_message_is_normalised() {
    let f = Fixture::new();
    let r = f.pipe(chunks(vec![Err(DriveError::new(""))]), None).await;
    assert_eq!(r.error.unwrap().message, RunError::UNKNOWN_MESSAGE);
}

#[tokio::test]
async fn failed_terminal_write_returns_the_local_record_and_leaves_the_log_open() {
    let f = Fixture::new();
    f.store.fail_when(|op, _| {
        matches!(op, Op::Update(_, p) if p.is_terminal())
            .then(|| StoreError::Unavailable("update refused".into()))
    });
    let (logs, _g) = LogCapture::install();
    let r = f.pipe(chunks(vec![Ok(Chunk::text("x"))]), None).await;
    // The run is still `running` in the store: the next sweep's drive must be able to append.
    assert_eq!(f.store.closes("r1"), 0);
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!((r.run_id.as_str(), r.thread_id.as_str()), ("r1", "t1"));
    assert_eq!(r.finished_at, Some(NOW));
    assert!(logs.contains(Level::ERROR, "recording the terminal run record failed"));
}

#[tokio::test]
async fn failing_close_is_logged_and_the_run_still_completes() {
    let f = Fixture::new();
    f.store.fail_when(|op, _| {
        matches!(op, Op::Close(_)).then(|| StoreError::Unavailable("close refused".into()))
    });
    let (logs, _g) = LogCapture::install();
    let r = f.pipe(chunks(vec![Ok(Chunk::text("x"))]), None).await;
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(f.store.closes("r1"), 1);
    assert!(logs.contains(Level::ERROR, "closing the run event log failed"));
}

#[tokio::test]
async fn failed_recovery_append_joins_both_messages() {
    let f = Fixture::new();
    f.store.fail_when(|op, _| {
        matches!(op, Op::Append(..)).then(|| StoreError::Backend("log write failed".into()))
    });
    let (logs, _g) = LogCapture::install();
    let r = f
        .pipe(
            chunks(vec![Err(DriveError::new("provider exploded"))]),
            None,
        )
        .await;
    assert_eq!(r.status, RunStatus::Failed);
    let message = r.error.unwrap().message;
    assert!(message.contains("provider exploded"), "{message}");
    assert!(message.contains("log write failed"), "{message}");
    assert_eq!(f.store.closes("r1"), 1);
    assert!(logs.contains(Level::ERROR, "appending the synthesized RUN_ERROR failed"));
}

#[tokio::test]
async fn failed_create_or_resume_fails_the_run_with_a_run_error() {
    let f = Fixture::new();
    f.store.fail_when(|op, _| {
        matches!(op, Op::CreateOrResume(_))
            .then(|| StoreError::Backend("store create failed".into()))
    });
    let (logs, _g) = LogCapture::install();
    let r = f.pipe(chunks(vec![Ok(Chunk::text("x"))]), None).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(r.error.unwrap().message.contains("store create failed"));
    assert_eq!(f.store.closes("r1"), 1);
    assert!(logs.contains(Level::ERROR, "the run failed before completing"));
    assert!(f.log().await.iter().any(Chunk::is_run_error));
}

#[tokio::test]
async fn record_that_vanishes_before_the_re_read_returns_the_local_record() {
    let f = Fixture::new();
    f.store.hide_on_get("r1");
    let (logs, _g) = LogCapture::install();
    let r = f.pipe(chunks(vec![Ok(Chunk::text("x"))]), None).await;
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.finished_at, Some(NOW));
    assert_eq!(f.store.closes("r1"), 1);
    assert!(logs.contains(Level::ERROR, "record vanished before the terminal re-read"));
}

#[tokio::test]
async fn failing_re_read_returns_the_local_record() {
    let f = Fixture::new();
    f.store.fail_when(|op, _| {
        matches!(op, Op::Get(_)).then(|| StoreError::Unavailable("read refused".into()))
    });
    let (logs, _g) = LogCapture::install();
    let r = f.pipe(chunks(vec![Ok(Chunk::text("x"))]), None).await;
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(f.store.closes("r1"), 1);
    assert!(logs.contains(Level::ERROR, "re-reading the terminal run record failed"));
}

#[tokio::test]
async fn ready_chunks_are_appended_in_batches() {
    let f = Fixture::new();
    let items: Vec<_> = (0..200).map(|i| Ok(Chunk::text(&i.to_string()))).collect();
    f.pipe(chunks(items), None).await;
    let appends = f
        .store
        .ops_for("r1")
        .iter()
        .filter(|o| matches!(o, Op::Append(..)))
        .count();
    assert_eq!(f.log().await.len(), 200);
    assert_eq!(
        appends,
        200usize.div_ceil(reaper_core::pipe::MAX_APPEND_BATCH)
    );
}

// ---- H7: the fenced pipe -------------------------------------------------------------------

async fn claimed(f: &Fixture) -> Claim {
    f.store
        .inner
        .create_or_resume(reaper_core::NewRun {
            run_id: "r1".into(),
            thread_id: "t1".into(),
            started_at: 1,
            status: None,
        })
        .await
        .unwrap();
    Claim::acquire(&f.store.inner, &f.store.inner, "r1", "host-a", NOW, 60_000)
        .await
        .map_err(|_| "claim refused")
        .unwrap()
}

fn set_epoch(store: &MemoryStore, epoch: u64) {
    let mut r = store
        .all_runs()
        .into_iter()
        .find(|r| r.run_id == "r1")
        .unwrap();
    r.driver_epoch = Some(epoch);
    store.put_run(r);
}

#[tokio::test]
async fn superseded_driver_cannot_terminalize_or_append() {
    let f = Fixture::new();
    let claim = claimed(&f).await;
    set_epoch(&f.store.inner, 9);
    let (logs, _g) = LogCapture::install();
    let r = f
        .pipe(chunks(vec![Ok(Chunk::text("x"))]), Some(&claim))
        .await;
    assert_eq!(r.status, RunStatus::Running);
    assert!(r.finished_at.is_none() && r.error.is_none());
    assert_eq!(r.driver_epoch, Some(9));
    assert!(
        f.log().await.is_empty(),
        "neither the chunk nor a RUN_ERROR may land"
    );
    // The log is the successor's: closing it would refuse the successor's appends.
    assert_eq!(
        f.store.closes("r1"),
        0,
        "a superseded driver closed the log"
    );
    let suppressed = logs
        .events()
        .iter()
        .filter(|e| e.message.contains("suppressed a terminal"))
        .count();
    assert_eq!(suppressed, 1);
}

#[tokio::test]
async fn lost_lease_suppresses_the_aborted_write() {
    let f = Fixture::new();
    let claim = claimed(&f).await;
    claim.lose_lease();
    let r = f
        .pipe(chunks(vec![Ok(Chunk::text("x"))]), Some(&claim))
        .await;
    assert_eq!(r.status, RunStatus::Running);
    assert!(r.finished_at.is_none());
    // Whoever takes the run over next writes and closes its log.
    assert_eq!(
        f.store.closes("r1"),
        0,
        "a driver that lost its lease closed the log"
    );
}

#[tokio::test]
async fn empty_stream_under_a_superseded_claim_stays_running() {
    let f = Fixture::new();
    let claim = claimed(&f).await;
    set_epoch(&f.store.inner, 12);
    let r = f.pipe(chunks(vec![]), Some(&claim)).await;
    assert_eq!(r.status, RunStatus::Running);
}

#[tokio::test]
async fn winner_completes_after_the_loser_is_suppressed() {
    let f = Fixture::new();
    let loser = claimed(&f).await;
    f.store.inner.release(&loser.lease()).await.unwrap();
    let winner = Claim::acquire(&f.store.inner, &f.store.inner, "r1", "host-b", NOW, 60_000)
        .await
        .map_err(|_| "refused")
        .unwrap();
    assert_eq!(winner.epoch, loser.epoch + 1);
    let lost = f
        .pipe(chunks(vec![Ok(Chunk::text("loser"))]), Some(&loser))
        .await;
    assert_eq!(lost.status, RunStatus::Running);
    // The loser still closed the shared log (spec I.2.4), so the winner appends nothing more
    // here; what matters is that the loser's suppression never blocks the winner's terminal
    // write.
    let won = f.pipe(chunks(vec![]), Some(&winner)).await;
    assert_eq!(won.status, RunStatus::Completed);
    assert!(won.finished_at.is_some());
    assert!(deltas(&f.log().await).iter().all(|d| d != "loser"));
}

#[tokio::test]
async fn unsuperseded_claim_records_a_throwing_stream_as_failed() {
    let f = Fixture::new();
    let claim = claimed(&f).await;
    let r = f
        .pipe(
            chunks(vec![Err(DriveError::new("provider exploded"))]),
            Some(&claim),
        )
        .await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(r.error.unwrap().message.contains("provider exploded"));
    assert!(r.finished_at.is_some());
    let log = f.log().await;
    assert_eq!(log.len(), 1);
    assert_eq!(
        log[0],
        Chunk::run_error(&RunError::new("provider exploded"))
    );
}

#[tokio::test]
async fn a_failing_drive_adds_no_second_run_error_after_the_one_ending_the_log() {
    let f = Fixture::new();
    let earlier = Chunk::run_error(&RunError::new("an earlier drive failed"));
    reaper_core::ports::DeliveryLog::append(&f.store.inner, "r1", None, vec![earlier], NOW)
        .await
        .unwrap();
    let r = f
        .pipe(
            chunks(vec![Err(DriveError::new("cannot read the log"))]),
            None,
        )
        .await;
    assert_eq!(r.status, RunStatus::Failed);
    let log = f.log().await;
    assert_eq!(log.len(), 1, "{log:?}");
}
