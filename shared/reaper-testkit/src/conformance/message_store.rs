//! The message-store suite: transcripts saved, replaced and read back whole.

use reaper_core::ports::{Fenced, MessageStore, RunStore};
use reaper_core::{NewRun, Patch, RunPatch, Transcript, TranscriptMessage};

use super::{Case, CaseContext, CaseResult, Failure, Verdict};

/// Every case of the suite, for runners that cannot use the test macro. The backend must also
/// be the `RunStore` whose `driverEpoch` fences a save.
pub fn cases<S: MessageStore + RunStore + ?Sized>() -> Vec<Case<S>> {
    crate::__reaper_message_store_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_message_store_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_conformance_expand! { $mode $args message_store [
            get_of_a_missing_transcript_is_none,
            save_then_get_round_trips,
            save_replaces_the_transcript,
            fenced_save_is_superseded_and_keeps_the_transcript_when_the_run_epoch_is_past_the_fence,
            fenced_save_lands_when_the_run_epoch_is_not_past_the_fence_or_the_run_has_no_record,
        ] }
    };
}

fn message(role: &str, content: &str) -> TranscriptMessage {
    TranscriptMessage {
        role: role.into(),
        content: content.into(),
    }
}

fn transcript(ctx: &CaseContext, run: &str) -> Transcript {
    Transcript {
        run_id: ctx.id(run),
        thread_id: ctx.id("thread"),
        messages: vec![
            message("user", "build it"),
            message("assistant", "ünïcödé 日本語 🦀 \"quoted\"\nsecond line\t\\"),
            message("assistant", ""),
        ],
        exit_code: Some(0),
        saved_at: 1_700_000_000_000,
    }
}

/// Checks that get of a missing transcript is none.
pub async fn get_of_a_missing_transcript_is_none<S: MessageStore + RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    ensure_eq!(
        store.get_transcript(&ctx.id("missing")).await?,
        None,
        "transcript of a run that has none"
    );
    Ok(Verdict::Passed)
}

/// Checks that save then get round trips.
pub async fn save_then_get_round_trips<S: MessageStore + RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let saved = transcript(ctx, "run");
    store.save_transcript(&saved, None).await?;
    ensure_eq!(
        store.get_transcript(&saved.run_id).await?,
        Some(saved),
        "the saved transcript"
    );
    Ok(Verdict::Passed)
}

/// The second save wins whole: fewer messages and no exit code leave nothing of the first.
pub async fn save_replaces_the_transcript<S: MessageStore + RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let first = transcript(ctx, "run");
    store.save_transcript(&first, None).await?;
    let second = Transcript {
        messages: vec![message("assistant", "final")],
        exit_code: None,
        saved_at: first.saved_at + 1,
        ..first.clone()
    };
    store.save_transcript(&second, None).await?;
    ensure_eq!(
        store.get_transcript(&first.run_id).await?,
        Some(second),
        "the transcript after the second save"
    );
    let other = transcript(ctx, "other-run");
    ensure_eq!(
        store.get_transcript(&other.run_id).await?,
        None,
        "another run's transcript"
    );
    Ok(Verdict::Passed)
}

async fn run_at_epoch<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
    run_id: &str,
    epoch: u64,
) -> Result<(), Failure> {
    store
        .create_or_resume(NewRun {
            run_id: run_id.to_string(),
            thread_id: ctx.id("thread"),
            started_at: 1,
            status: None,
        })
        .await?;
    let patch = RunPatch {
        driver_epoch: Patch::Set(epoch),
        ..Default::default()
    };
    store.update(run_id, patch).await?;
    Ok(())
}

/// Issue 24: a superseded drive's transcript save is refused at the store, so it never
/// replaces (or creates) the transcript its successor owns.
pub async fn fenced_save_is_superseded_and_keeps_the_transcript_when_the_run_epoch_is_past_the_fence<
    S: MessageStore + RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let current = transcript(ctx, "run");
    run_at_epoch(store, ctx, &current.run_id, 4).await?;
    ensure_eq!(
        store.save_transcript(&current, Some(4)).await?,
        Fenced::Written(()),
        "save fenced at 4 on a run at 4"
    );
    let stale = Transcript {
        messages: vec![message("assistant", "stale")],
        exit_code: Some(1),
        saved_at: current.saved_at + 1,
        ..current.clone()
    };
    ensure_eq!(
        store.save_transcript(&stale, Some(3)).await?,
        Fenced::Superseded { observed: 4 },
        "save fenced at 3 on a run at 4"
    );
    ensure_eq!(
        store.get_transcript(&current.run_id).await?,
        Some(current),
        "the transcript after the refused save"
    );
    let fresh = transcript(ctx, "fresh");
    run_at_epoch(store, ctx, &fresh.run_id, 2).await?;
    ensure_eq!(
        store.save_transcript(&fresh, Some(1)).await?,
        Fenced::Superseded { observed: 2 },
        "first save fenced at 1 on a run at 2"
    );
    ensure_eq!(
        store.get_transcript(&fresh.run_id).await?,
        None,
        "a refused first save created a transcript"
    );
    Ok(Verdict::Passed)
}

/// Checks that fenced save lands when the run epoch is not past the fence or the run has no record.
pub async fn fenced_save_lands_when_the_run_epoch_is_not_past_the_fence_or_the_run_has_no_record<
    S: MessageStore + RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let ahead = transcript(ctx, "ahead");
    run_at_epoch(store, ctx, &ahead.run_id, 2).await?;
    ensure_eq!(
        store.save_transcript(&ahead, Some(3)).await?,
        Fenced::Written(()),
        "save fenced at 3 on a run at 2"
    );
    ensure_eq!(
        store.get_transcript(&ahead.run_id).await?,
        Some(ahead),
        "the transcript saved ahead of the epoch"
    );
    let no_record = transcript(ctx, "no-record");
    ensure_eq!(
        store.save_transcript(&no_record, Some(5)).await?,
        Fenced::Written(()),
        "save fenced at 5 on a run without a record"
    );
    ensure_eq!(
        store.get_transcript(&no_record.run_id).await?,
        Some(no_record),
        "the transcript of a run without a record"
    );
    Ok(Verdict::Passed)
}
