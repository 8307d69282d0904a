//! The message-store suite: transcripts saved, replaced and read back whole.

use reaper_core::ports::MessageStore;
use reaper_core::{Transcript, TranscriptMessage};

use super::{Case, CaseContext, CaseResult, Verdict};

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<S: MessageStore + ?Sized>() -> Vec<Case<S>> {
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

pub async fn get_of_a_missing_transcript_is_none<S: MessageStore + ?Sized>(
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

pub async fn save_then_get_round_trips<S: MessageStore + ?Sized>(
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
pub async fn save_replaces_the_transcript<S: MessageStore + ?Sized>(
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
