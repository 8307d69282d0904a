//! The delivery-log suite (A.7 and the fenced append of A.5). The backend must also be the
//! `RunStore` holding the runs, because a fenced append checks the run's `driverEpoch` in the
//! same atomic step.

use reaper_core::ports::{Appended, DeliveryLog, Fenced, RunStore};
use reaper_core::{Chunk, LogEntry, LogSnapshot, NewRun, Patch, RunPatch};
use serde_json::json;

use super::{Case, CaseContext, CaseResult, Failure, Verdict};

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<S: DeliveryLog + RunStore + ?Sized>() -> Vec<Case<S>> {
    crate::__reaper_delivery_log_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_delivery_log_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_conformance_expand! { $mode $args delivery_log [
            appends_return_consecutive_offsets,
            read_returns_at_most_limit_entries_in_order_from_an_offset,
            snapshot_and_read_of_an_unknown_run_are_empty,
            snapshot_counts_entries_and_stamps_the_last_non_empty_append,
            close_is_idempotent_and_refuses_later_appends,
            closing_a_log_that_was_never_appended_refuses_appends,
            fenced_append_lands_when_the_run_epoch_equals_the_fence,
            fenced_append_is_superseded_and_stores_nothing_when_the_run_epoch_is_past_the_fence,
            fenced_append_lands_when_the_run_has_no_record_or_no_epoch,
            unfenced_append_ignores_the_run_epoch,
            fenced_close_is_superseded_and_leaves_the_log_open_when_the_run_epoch_is_past_the_fence,
            fenced_close_lands_when_the_run_epoch_is_not_past_the_fence_or_the_run_has_no_record,
            unfenced_close_ignores_the_run_epoch,
            logs_of_different_runs_are_independent,
            chunks_round_trip_exactly,
            a_thousand_appends_read_back_in_pages,
        ] }
    };
}

fn texts(prefix: &str, n: usize) -> Vec<Chunk> {
    (0..n)
        .map(|i| Chunk::text(&format!("{prefix}{i}")))
        .collect()
}

async fn append_at<S: DeliveryLog + ?Sized>(
    log: &S,
    run_id: &str,
    fence: Option<u64>,
    chunks: &[Chunk],
    now: i64,
) -> Result<u64, Failure> {
    match log.append(run_id, fence, chunks.to_vec(), now).await? {
        Fenced::Written(Appended::At { first }) => Ok(first),
        other => Err(Failure::at(
            format!(
                "append of {} chunks to {run_id:?} answered {other:?}",
                chunks.len()
            ),
            file!(),
            line!(),
        )),
    }
}

async fn read_all<S: DeliveryLog + ?Sized>(log: &S, run_id: &str) -> Result<Vec<Chunk>, Failure> {
    Ok(log
        .read(run_id, 0, usize::MAX)
        .await?
        .into_iter()
        .map(|e| e.chunk)
        .collect())
}

async fn run_at_epoch<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
    run_id: &str,
    epoch: Option<u64>,
) -> Result<(), Failure> {
    store
        .create_or_resume(NewRun {
            run_id: run_id.to_string(),
            thread_id: ctx.id("thread"),
            started_at: 1,
            status: None,
        })
        .await?;
    if let Some(epoch) = epoch {
        let patch = RunPatch {
            driver_epoch: Patch::Set(epoch),
            ..Default::default()
        };
        store.update(run_id, patch).await?;
    }
    Ok(())
}

/// Checks that appends return consecutive offsets.
pub async fn appends_return_consecutive_offsets<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    ensure_eq!(
        append_at(log, &run, None, &texts("a", 2), 10).await?,
        0,
        "first offset of the first append"
    );
    ensure_eq!(
        append_at(log, &run, None, &texts("b", 3), 11).await?,
        2,
        "first offset of the second append"
    );
    ensure_eq!(
        append_at(log, &run, None, &texts("c", 1), 12).await?,
        5,
        "first offset of the third append"
    );
    let offsets: Vec<u64> = log
        .read(&run, 0, 100)
        .await?
        .into_iter()
        .map(|e| e.offset)
        .collect();
    ensure_eq!(offsets, (0..6).collect::<Vec<_>>(), "offsets read back");
    Ok(Verdict::Passed)
}

/// Checks that read returns at most limit entries in order from an offset.
pub async fn read_returns_at_most_limit_entries_in_order_from_an_offset<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    let chunks = texts("t", 10);
    append_at(log, &run, None, &chunks, 10).await?;
    let expected: Vec<LogEntry> = (3..7)
        .map(|i| LogEntry {
            offset: i as u64,
            chunk: chunks[i].clone(),
        })
        .collect();
    ensure_eq!(
        log.read(&run, 3, 4).await?,
        expected,
        "read from 3, limit 4"
    );
    ensure_eq!(
        log.read(&run, 8, 100).await?.len(),
        2,
        "entries read from 8 with a large limit"
    );
    ensure_eq!(log.read(&run, 10, 5).await?, Vec::new(), "read at the end");
    ensure_eq!(
        log.read(&run, 50, 5).await?,
        Vec::new(),
        "read past the end"
    );
    ensure_eq!(log.read(&run, 0, 0).await?, Vec::new(), "read with limit 0");
    Ok(Verdict::Passed)
}

/// A.7: an empty or unknown run is an empty snapshot, never an error.
pub async fn snapshot_and_read_of_an_unknown_run_are_empty<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("unknown");
    ensure_eq!(
        log.snapshot(&run).await?,
        LogSnapshot::default(),
        "snapshot of an unknown run"
    );
    ensure_eq!(
        log.read(&run, 0, 10).await?,
        Vec::new(),
        "read of an unknown run"
    );
    Ok(Verdict::Passed)
}

/// Checks that snapshot counts entries and stamps the last non empty append.
pub async fn snapshot_counts_entries_and_stamps_the_last_non_empty_append<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    append_at(log, &run, None, &texts("a", 2), 1_000).await?;
    append_at(log, &run, None, &texts("b", 3), 2_500).await?;
    let expected = LogSnapshot {
        len: 5,
        last_append_at: Some(2_500),
        closed: false,
    };
    ensure_eq!(
        log.snapshot(&run).await?,
        expected,
        "snapshot after two appends"
    );
    // An empty append adds nothing and is not activity.
    log.append(&run, None, Vec::new(), 9_000).await?;
    ensure_eq!(
        log.snapshot(&run).await?,
        expected,
        "snapshot after an empty append"
    );
    Ok(Verdict::Passed)
}

/// Checks that close is idempotent and refuses later appends.
pub async fn close_is_idempotent_and_refuses_later_appends<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    let chunks = texts("a", 3);
    append_at(log, &run, None, &chunks, 1_000).await?;
    log.close(&run, None, 1_100).await?;
    log.close(&run, None, 1_200).await?;
    ensure_eq!(
        log.append(&run, None, texts("late", 2), 1_300).await?,
        Fenced::Written(Appended::Closed),
        "append after close"
    );
    ensure_eq!(
        log.snapshot(&run).await?,
        LogSnapshot {
            len: 3,
            last_append_at: Some(1_000),
            closed: true,
        },
        "snapshot after close and a refused append"
    );
    ensure_eq!(read_all(log, &run).await?, chunks, "entries after close");
    Ok(Verdict::Passed)
}

/// Checks that closing a log that was never appended refuses appends.
pub async fn closing_a_log_that_was_never_appended_refuses_appends<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    log.close(&run, None, 500).await?;
    ensure_eq!(
        log.append(&run, None, texts("a", 1), 600).await?,
        Fenced::Written(Appended::Closed),
        "append after closing an empty log"
    );
    let snapshot = log.snapshot(&run).await?;
    ensure_eq!(
        (snapshot.len, snapshot.closed),
        (0, true),
        "len and closed of a closed empty log"
    );
    Ok(Verdict::Passed)
}

/// Checks that fenced append lands when the run epoch equals the fence.
pub async fn fenced_append_lands_when_the_run_epoch_equals_the_fence<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    run_at_epoch(log, ctx, &run, Some(3)).await?;
    let chunks = texts("a", 2);
    ensure_eq!(
        log.append(&run, Some(3), chunks.clone(), 10).await?,
        Fenced::Written(Appended::At { first: 0 }),
        "append fenced at 3 on a run at 3"
    );
    ensure_eq!(read_all(log, &run).await?, chunks, "entries");
    Ok(Verdict::Passed)
}

/// Checks that fenced append is superseded and stores nothing when the run epoch is past the fence.
pub async fn fenced_append_is_superseded_and_stores_nothing_when_the_run_epoch_is_past_the_fence<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    run_at_epoch(log, ctx, &run, Some(3)).await?;
    let first = texts("mine", 2);
    append_at(log, &run, Some(3), &first, 10).await?;
    // A newer claim takes the run; the old holder's next append must not land.
    let patch = RunPatch {
        driver_epoch: Patch::Set(4),
        ..Default::default()
    };
    log.update(&run, patch).await?;
    ensure_eq!(
        log.append(&run, Some(3), texts("stale", 2), 20).await?,
        Fenced::Superseded { observed: 4 },
        "append fenced at 3 on a run at 4"
    );
    ensure_eq!(
        log.snapshot(&run).await?,
        LogSnapshot {
            len: 2,
            last_append_at: Some(10),
            closed: false,
        },
        "snapshot after the refused append"
    );
    ensure_eq!(
        read_all(log, &run).await?,
        first,
        "entries after the refused append"
    );
    Ok(Verdict::Passed)
}

/// Issue 24: a superseded driver's close is refused at the store, so its successor's appends
/// keep landing in an open log.
pub async fn fenced_close_is_superseded_and_leaves_the_log_open_when_the_run_epoch_is_past_the_fence<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    run_at_epoch(log, ctx, &run, Some(4)).await?;
    append_at(log, &run, Some(4), &texts("new", 1), 10).await?;
    ensure_eq!(
        log.close(&run, Some(3), 20).await?,
        Fenced::Superseded { observed: 4 },
        "close fenced at 3 on a run at 4"
    );
    ensure!(
        !log.snapshot(&run).await?.closed,
        "the log is closed after a refused close"
    );
    ensure_eq!(
        append_at(log, &run, Some(4), &texts("more", 1), 30).await?,
        1,
        "the successor's append after the refused close"
    );
    // Never appended: a refused close must not create the log closed either.
    let fresh = ctx.id("fresh");
    run_at_epoch(log, ctx, &fresh, Some(2)).await?;
    ensure_eq!(
        log.close(&fresh, Some(1), 20).await?,
        Fenced::Superseded { observed: 2 },
        "close fenced at 1 on a never-appended run at 2"
    );
    ensure_eq!(
        append_at(log, &fresh, Some(2), &texts("a", 1), 30).await?,
        0,
        "the successor's first append after the refused close"
    );
    Ok(Verdict::Passed)
}

/// Checks that fenced close lands when the run epoch is not past the fence or the run has no record.
pub async fn fenced_close_lands_when_the_run_epoch_is_not_past_the_fence_or_the_run_has_no_record<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    run_at_epoch(log, ctx, &run, Some(3)).await?;
    append_at(log, &run, Some(3), &texts("a", 1), 10).await?;
    ensure_eq!(
        log.close(&run, Some(3), 20).await?,
        Fenced::Written(()),
        "close fenced at 3 on a run at 3"
    );
    ensure!(log.snapshot(&run).await?.closed, "the log after the close");
    ensure_eq!(
        log.close(&run, Some(3), 21).await?,
        Fenced::Written(()),
        "a second close fenced at 3"
    );
    let no_record = ctx.id("no-record");
    ensure_eq!(
        log.close(&no_record, Some(5), 20).await?,
        Fenced::Written(()),
        "close fenced at 5 on a run without a record"
    );
    ensure!(
        log.snapshot(&no_record).await?.closed,
        "the log of a run without a record after the close"
    );
    let no_epoch = ctx.id("no-epoch");
    run_at_epoch(log, ctx, &no_epoch, None).await?;
    ensure_eq!(
        log.close(&no_epoch, Some(1), 20).await?,
        Fenced::Written(()),
        "close fenced at 1 on a run without driverEpoch"
    );
    Ok(Verdict::Passed)
}

/// Checks that unfenced close ignores the run epoch.
pub async fn unfenced_close_ignores_the_run_epoch<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    run_at_epoch(log, ctx, &run, Some(9)).await?;
    ensure_eq!(
        log.close(&run, None, 20).await?,
        Fenced::Written(()),
        "unfenced close on a run at 9"
    );
    ensure!(log.snapshot(&run).await?.closed, "the log after the close");
    Ok(Verdict::Passed)
}

/// A.5: a missing run record does not refuse a fenced append; nor does an absent epoch or a
/// fence ahead of the stored one (the condition is "not past").
pub async fn fenced_append_lands_when_the_run_has_no_record_or_no_epoch<
    S: DeliveryLog + RunStore + ?Sized,
>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let no_record = ctx.id("no-record");
    ensure_eq!(
        log.append(&no_record, Some(5), texts("a", 1), 10).await?,
        Fenced::Written(Appended::At { first: 0 }),
        "append fenced at 5 on a run without a record"
    );
    let no_epoch = ctx.id("no-epoch");
    run_at_epoch(log, ctx, &no_epoch, None).await?;
    ensure_eq!(
        log.append(&no_epoch, Some(1), texts("a", 1), 10).await?,
        Fenced::Written(Appended::At { first: 0 }),
        "append fenced at 1 on a run without driverEpoch"
    );
    let behind = ctx.id("behind");
    run_at_epoch(log, ctx, &behind, Some(2)).await?;
    ensure_eq!(
        log.append(&behind, Some(3), texts("a", 1), 10).await?,
        Fenced::Written(Appended::At { first: 0 }),
        "append fenced at 3 on a run at 2"
    );
    Ok(Verdict::Passed)
}

/// Checks that unfenced append ignores the run epoch.
pub async fn unfenced_append_ignores_the_run_epoch<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    run_at_epoch(log, ctx, &run, Some(9)).await?;
    ensure_eq!(
        log.append(&run, None, texts("a", 2), 10).await?,
        Fenced::Written(Appended::At { first: 0 }),
        "unfenced append on a run at 9"
    );
    ensure_eq!(log.snapshot(&run).await?.len, 2, "len");
    Ok(Verdict::Passed)
}

/// Checks that logs of different runs are independent.
pub async fn logs_of_different_runs_are_independent<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let a = ctx.id("a");
    let b = ctx.id("b");
    append_at(log, &a, None, &texts("a", 3), 10).await?;
    ensure_eq!(
        append_at(log, &b, None, &texts("b", 1), 20).await?,
        0,
        "first offset of another run's log"
    );
    log.close(&a, None, 30).await?;
    ensure_eq!(
        append_at(log, &b, None, &texts("b", 1), 40).await?,
        1,
        "append to b after closing a"
    );
    ensure_eq!(
        log.snapshot(&b).await?,
        LogSnapshot {
            len: 2,
            last_append_at: Some(40),
            closed: false,
        },
        "snapshot of b"
    );
    Ok(Verdict::Passed)
}

/// Checks that chunks round trip exactly.
pub async fn chunks_round_trip_exactly<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run = ctx.id("run");
    let values = [
        json!({"type": "TEXT_MESSAGE_CONTENT", "delta": "ünïcödé 日本語 🦀 \"q\" \\ \n\t\u{0}"}),
        json!({"type": "RUN_ERROR", "message": "boom", "code": "exit_1"}),
        json!({
            "type": "TOOL_CALL_RESULT",
            "content": {"nested": {"deeper": [1, 2.5, -3, null, true, false, "", {"k": []}]}},
            "big": 9_007_199_254_740_991_i64,
            "negative": -9_007_199_254_740_991_i64,
            "empty": {},
        }),
        json!({"type": "", "": "empty key"}),
        json!({"type": "CUSTOM", "text": "x".repeat(20_000)}),
    ];
    let chunks: Vec<Chunk> = values
        .iter()
        .cloned()
        .filter_map(Chunk::from_value)
        .collect();
    append_at(log, &run, None, &chunks, 10).await?;
    ensure_eq!(read_all(log, &run).await?, chunks, "chunks read back");
    Ok(Verdict::Passed)
}

/// Checks that a thousand appends read back in pages.
pub async fn a_thousand_appends_read_back_in_pages<S: DeliveryLog + RunStore + ?Sized>(
    log: &S,
    ctx: &CaseContext,
) -> CaseResult {
    const APPENDS: u64 = 1_000;
    const PAGE: usize = 64;
    let run = ctx.id("run");
    for i in 0..APPENDS {
        let first = append_at(log, &run, None, &[Chunk::text(&i.to_string())], i as i64).await?;
        ensure_eq!(first, i, "offset of append {i}");
    }
    let mut from = 0;
    let mut pages = 0;
    loop {
        let page = log.read(&run, from, PAGE).await?;
        if page.is_empty() {
            break;
        }
        ensure!(page.len() <= PAGE, "a page held {} entries", page.len());
        for entry in &page {
            ensure_eq!(entry.offset, from, "offset in page {pages}");
            ensure_eq!(
                entry.chunk.get_str("delta").as_deref(),
                Some(from.to_string().as_str()),
                "chunk at offset {from}"
            );
            from += 1;
        }
        pages += 1;
    }
    ensure_eq!(from, APPENDS, "entries read in pages");
    ensure_eq!(pages, APPENDS.div_ceil(PAGE as u64), "pages");
    ensure_eq!(
        log.snapshot(&run).await?,
        LogSnapshot {
            len: APPENDS,
            last_append_at: Some(APPENDS as i64 - 1),
            closed: false,
        },
        "snapshot after {APPENDS} appends"
    );
    Ok(Verdict::Passed)
}
