//! The reclaim-ledger suite: intents are inserted once (an existing entry and its history win),
//! updated only while they exist (a resolved entry never comes back), listed due-first within a
//! limit, and counted. Cases filter listings by their own prefix and remove what they wrote, so
//! a backend may share one table between cases and runs.

use reaper_core::ports::ReclaimLedger;
use reaper_core::ReclaimIntent;

use super::{Case, CaseContext, CaseResult, Verdict};

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<S: ReclaimLedger + ?Sized>() -> Vec<Case<S>> {
    crate::__reaper_reclaim_ledger_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_reclaim_ledger_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_conformance_expand! { $mode $args reclaim_ledger [
            get_of_a_missing_intent_is_none,
            record_then_get_round_trips_every_field,
            record_keeps_an_existing_entry_and_its_history,
            update_replaces_an_existing_entry,
            update_never_resurrects_a_resolved_entry,
            resolve_removes_only_that_entry,
            due_lists_only_due_entries_earliest_first,
            due_respects_the_limit,
            counts_include_pending_and_leaked_entries,
        ] }
    };
}

fn intent(ctx: &CaseContext, run: &str, next_attempt_at: i64) -> ReclaimIntent {
    ReclaimIntent {
        run_id: ctx.id(run),
        sandbox_key: Some(ctx.id("thread:sandbox ünïcödé \"q\"")),
        provider: None,
        provider_sandbox_id: None,
        first_seen: 1_700_000_000_000,
        attempts: 0,
        next_attempt_at,
        last_error: None,
    }
}

fn leaked(mut i: ReclaimIntent) -> ReclaimIntent {
    i.provider = Some("local".into());
    i.provider_sandbox_id = Some("sbx-1 'quoted' \"too\"".into());
    i.attempts = 3;
    i.last_error = Some("destroy refused: 503 \u{1F4A5}".into());
    i
}

/// Checks that get of a missing intent is none.
pub async fn get_of_a_missing_intent_is_none<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    ensure_eq!(
        store.get_intent(&ctx.id("missing")).await?,
        None,
        "get of a missing intent"
    );
    Ok(Verdict::Passed)
}

/// Checks that record then get round trips every field.
pub async fn record_then_get_round_trips_every_field<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let full = leaked(intent(ctx, "run-full", 1_700_000_060_000));
    let mut bare = intent(ctx, "run-bare", 1_700_000_000_000);
    bare.sandbox_key = None;
    ensure!(
        store.record_intent(&full).await?,
        "the first record inserts"
    );
    ensure!(
        store.record_intent(&bare).await?,
        "the first record inserts"
    );
    ensure_eq!(
        store.get_intent(&full.run_id).await?,
        Some(full.clone()),
        "the stored intent with every field"
    );
    ensure_eq!(
        store.get_intent(&bare.run_id).await?,
        Some(bare.clone()),
        "the stored intent without the optional fields"
    );
    store.resolve_intent(&full.run_id).await?;
    store.resolve_intent(&bare.run_id).await?;
    Ok(Verdict::Passed)
}

/// A second sweep recording the same run's intent must not reset the first sighting or the
/// failed-attempt count: that history is how a leak is told from a fresh intent.
pub async fn record_keeps_an_existing_entry_and_its_history<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let first = leaked(intent(ctx, "run", 1_700_000_060_000));
    store.record_intent(&first).await?;
    let mut again = intent(ctx, "run", 1_800_000_000_000);
    again.first_seen = 1_800_000_000_000;
    ensure!(
        !store.record_intent(&again).await?,
        "recording over an existing entry answers false"
    );
    ensure_eq!(
        store.get_intent(&first.run_id).await?,
        Some(first.clone()),
        "the existing entry, unchanged"
    );
    store.resolve_intent(&first.run_id).await?;
    Ok(Verdict::Passed)
}

/// Checks that update replaces an existing entry.
pub async fn update_replaces_an_existing_entry<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let fresh = intent(ctx, "run", 1_700_000_000_000);
    store.record_intent(&fresh).await?;
    let after = leaked(fresh.clone());
    ensure!(
        store.update_intent(&after).await?,
        "updating an existing entry answers true"
    );
    ensure_eq!(
        store.get_intent(&fresh.run_id).await?,
        Some(after.clone()),
        "the entry after the update"
    );
    // And back: an update fully replaces, clearing optional fields.
    ensure!(store.update_intent(&fresh).await?, "the second update");
    ensure_eq!(
        store.get_intent(&fresh.run_id).await?,
        Some(fresh.clone()),
        "the entry after a replacement without the optional fields"
    );
    store.resolve_intent(&fresh.run_id).await?;
    Ok(Verdict::Passed)
}

/// A sweep that settled the entry while another was retrying it must not see it come back.
pub async fn update_never_resurrects_a_resolved_entry<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let entry = intent(ctx, "run", 1_700_000_000_000);
    store.record_intent(&entry).await?;
    store.resolve_intent(&entry.run_id).await?;
    ensure!(
        !store.update_intent(&leaked(entry.clone())).await?,
        "updating a resolved entry answers false"
    );
    ensure_eq!(
        store.get_intent(&entry.run_id).await?,
        None,
        "the resolved entry after the update"
    );
    let never = intent(ctx, "never-recorded", 1_700_000_000_000);
    ensure!(
        !store.update_intent(&never).await?,
        "updating an entry that never existed answers false"
    );
    ensure_eq!(
        store.get_intent(&never.run_id).await?,
        None,
        "an entry that was never recorded"
    );
    Ok(Verdict::Passed)
}

/// Checks that resolve removes only that entry.
pub async fn resolve_removes_only_that_entry<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let gone = intent(ctx, "gone", 1_700_000_000_000);
    let kept = intent(ctx, "kept", 1_700_000_000_000);
    store.record_intent(&gone).await?;
    store.record_intent(&kept).await?;
    store.resolve_intent(&gone.run_id).await?;
    ensure_eq!(
        store.get_intent(&gone.run_id).await?,
        None,
        "the resolved entry"
    );
    ensure_eq!(
        store.get_intent(&kept.run_id).await?,
        Some(kept.clone()),
        "the other entry"
    );
    store.resolve_intent(&gone.run_id).await?;
    store.resolve_intent(&ctx.id("never")).await?;
    store.resolve_intent(&kept.run_id).await?;
    Ok(Verdict::Passed)
}

/// Checks that due lists only due entries earliest first.
pub async fn due_lists_only_due_entries_earliest_first<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let now = 1_700_000_100_000;
    let later = intent(ctx, "later", now - 10);
    let earliest = intent(ctx, "earliest", now - 1_000);
    let exactly_now = intent(ctx, "exactly-now", now);
    let future = intent(ctx, "future", now + 1);
    for i in [&later, &earliest, &exactly_now, &future] {
        store.record_intent(i).await?;
    }
    let ours: Vec<String> = store
        .due_intents(now, 10_000)
        .await?
        .into_iter()
        .filter(|i| i.run_id.starts_with(&ctx.prefix))
        .map(|i| i.run_id)
        .collect();
    ensure_eq!(
        ours,
        vec![
            earliest.run_id.clone(),
            later.run_id.clone(),
            exactly_now.run_id.clone()
        ],
        "the due entries (nextAttemptAt <= now, inclusive), earliest first"
    );
    for i in [&later, &earliest, &exactly_now, &future] {
        store.resolve_intent(&i.run_id).await?;
    }
    Ok(Verdict::Passed)
}

/// Checks that due respects the limit.
pub async fn due_respects_the_limit<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    // Far in the past, so no other case's entries sort before these.
    let entries: Vec<ReclaimIntent> = (0..5)
        .map(|n| intent(ctx, &format!("run-{n}"), 1_000 + n))
        .collect();
    for i in &entries {
        store.record_intent(i).await?;
    }
    let due = store.due_intents(1_000_000, 3).await?;
    ensure_eq!(due.len(), 3, "the number of entries under a limit of 3");
    let ours: Vec<String> = due.into_iter().map(|i| i.run_id).collect();
    let expected: Vec<String> = entries[..3].iter().map(|i| i.run_id.clone()).collect();
    ensure_eq!(ours, expected, "the three earliest entries");
    ensure_eq!(
        store.due_intents(1_000_000, 0).await?.len(),
        0,
        "a limit of 0"
    );
    for i in &entries {
        store.resolve_intent(&i.run_id).await?;
    }
    Ok(Verdict::Passed)
}

/// Checks that counts include pending and leaked entries.
pub async fn counts_include_pending_and_leaked_entries<S: ReclaimLedger + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let before = store.ledger_counts().await?;
    let mut old = intent(ctx, "old", 1_700_000_000_000);
    old.first_seen = 5;
    let leak = leaked(intent(ctx, "leak", 1_700_000_000_000));
    store.record_intent(&old).await?;
    store.record_intent(&leak).await?;
    let after = store.ledger_counts().await?;
    // Other cases may write to a shared table at the same time: bounds, not equalities.
    ensure!(
        after.pending >= before.pending + 2,
        "pending counts both new entries: before {before:?}, after {after:?}"
    );
    ensure!(
        after.leaked >= 1,
        "leaked counts the entry with failed attempts: before {before:?}, after {after:?}"
    );
    ensure!(
        after.leaked <= after.pending,
        "leaks are a subset of pending: {after:?}"
    );
    ensure!(
        after.oldest_first_seen.is_some_and(|t| t <= 5),
        "the oldest entry's firstSeen: {after:?}"
    );
    store.resolve_intent(&old.run_id).await?;
    store.resolve_intent(&leak.run_id).await?;
    Ok(Verdict::Passed)
}
