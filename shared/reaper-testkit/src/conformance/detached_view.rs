//! The detached-view suite: what `reaper status` lists ([`RunStore::detached_view`]). Every
//! store answers it, through the provided implementation or its own joins, and every answer is
//! the same: a summary of every detached run, and the filtered runs after the cursor, up to the
//! limit, in `(detachedSince, runId)` order, each with its instance record and newest history
//! entry.
//!
//! Cases share a store with others, so they place their runs in their own band of time
//! ([`super::run_store`]'s `band`), isolate counts by a provider name of their own, and compare
//! the summary before and after seeding (at least their own runs more: others may write too).

use reaper_core::detached::{DetachedQuery, DetachedView};
use reaper_core::ports::{ReclaimableCursor, RunStore, SandboxInstanceStore};
use reaper_core::{EpochMs, Patch, RunPatch, RunStatus, SandboxInstanceRecord, StoreError};

use super::run_store::{band, detached, history_entry, seed};
use super::{Case, CaseContext, CaseResult, Failure, Verdict};

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<S: RunStore + SandboxInstanceStore>() -> Vec<Case<S>> {
    crate::__reaper_detached_view_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_detached_view_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_conformance_expand! { $mode $args detached_view [
            detached_view_summarises_every_detached_run_and_lists_up_to_the_limit_in_order,
            detached_view_resumes_strictly_after_its_cursor_through_ties,
            detached_view_rows_carry_their_instance_and_newest_history_entry_or_none,
            detached_view_filters_by_age_provider_and_outcome_combined,
        ] }
    };
}

async fn view<S: RunStore + SandboxInstanceStore>(
    store: &S,
    query: &DetachedQuery,
) -> Result<DetachedView, Failure> {
    Ok(store.detached_view(store, query).await?)
}

fn ids(view: &DetachedView) -> Vec<String> {
    view.rows.iter().map(|r| r.record.run_id.clone()).collect()
}

/// Whether the store keeps history (`false`: it answers `Unsupported`).
async fn keeps_history<S: RunStore>(store: &S, ctx: &CaseContext) -> Result<bool, Failure> {
    match store.run_history(&ctx.id("history-probe"), 1).await {
        Err(StoreError::Unsupported(_)) => Ok(false),
        other => other.map(|_| true).map_err(Failure::from),
    }
}

fn with_key(at: EpochMs, key: &str) -> RunPatch {
    RunPatch {
        sandbox_key: Patch::Set(key.to_string()),
        ..detached(at)
    }
}

fn instance(ctx: &CaseContext, key: &str, provider: &str) -> SandboxInstanceRecord {
    SandboxInstanceRecord {
        key: key.to_string(),
        provider: provider.to_string(),
        provider_sandbox_id: format!("{key}-sbx"),
        latest_snapshot_id: None,
        thread_id: ctx.id("thread"),
        latest_run_id: None,
        updated_at: 1,
    }
}

/// The summary counts every `running` run with a `detachedSince` (not interrupted or finished
/// ones), its oldest and how many are past the TTL; without filters every run matches; the
/// rows are the first `limit` in `(detachedSince, runId)` order, ties by run id.
pub async fn detached_view_summarises_every_detached_run_and_lists_up_to_the_limit_in_order<
    S: RunStore + SandboxInstanceStore,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let base = band(ctx);
    let now = base + 1_000;
    let query = DetachedQuery {
        ttl_ms: Some(995),
        after: Some(ReclaimableCursor {
            detached_since: base,
            run_id: String::new(),
        }),
        ..DetachedQuery::new(now, 3)
    };
    let before = view(store, &query).await?;
    let thread = ctx.id("thread");
    for (name, at) in [("b", 2), ("a", 2), ("c", 1), ("e", 30), ("d", 3)] {
        seed(store, &ctx.id(name), &thread, 1, detached(base + at)).await?;
    }
    for (name, st) in [
        ("interrupted", RunStatus::Interrupted),
        ("done", RunStatus::Completed),
    ] {
        let patch = RunPatch {
            status: Some(st),
            ..detached(base + 1)
        };
        seed(store, &ctx.id(name), &thread, 1, patch).await?;
    }
    let after = view(store, &query).await?;
    // Other cases may add runs to a shared store meanwhile: the counts grow by at least ours.
    let grew = |a: u64, b: u64, by: u64| a >= b + by;
    ensure!(
        grew(after.summary.detached, before.summary.detached, 5),
        "the five running detached runs are counted: {} before, {} after",
        before.summary.detached,
        after.summary.detached
    );
    ensure_eq!(
        after.matching,
        after.summary.detached,
        "without filters every detached run matches"
    );
    ensure!(
        grew(
            after.summary.past_ttl.unwrap_or(0),
            before.summary.past_ttl.unwrap_or(0),
            4
        ),
        "detached at or before now - ttl (base + 5): c, a, b, d; {:?} before, {:?} after",
        before.summary.past_ttl,
        after.summary.past_ttl
    );
    ensure!(
        after.summary.oldest_since.is_some_and(|o| o <= base + 1),
        "the oldest is at most c's base + 1: {:?}",
        after.summary.oldest_since
    );
    ensure_eq!(
        ids(&after),
        vec![ctx.id("c"), ctx.id("a"), ctx.id("b")],
        "the first three after the cursor, ties by run id; never the interrupted or finished \
         run detached at c's time"
    );
    let none = view(
        store,
        &DetachedQuery {
            limit: 0,
            ..query.clone()
        },
    )
    .await?;
    ensure!(none.rows.is_empty(), "a limit of 0 lists no run");
    ensure!(
        none.summary.detached >= after.summary.detached,
        "the summary does not depend on the limit"
    );
    Ok(Verdict::Passed)
}

/// A cursor inside runs detached in the same millisecond resumes strictly after it.
pub async fn detached_view_resumes_strictly_after_its_cursor_through_ties<
    S: RunStore + SandboxInstanceStore,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let base = band(ctx);
    let thread = ctx.id("thread");
    for (name, at) in [("a", 1), ("b", 1), ("c", 1), ("d", 2)] {
        seed(store, &ctx.id(name), &thread, 1, detached(base + at)).await?;
    }
    let page = view(
        store,
        &DetachedQuery {
            after: Some(ReclaimableCursor {
                detached_since: base + 1,
                run_id: ctx.id("a"),
            }),
            ..DetachedQuery::new(base + 10, 2)
        },
    )
    .await?;
    ensure_eq!(
        ids(&page),
        vec![ctx.id("b"), ctx.id("c")],
        "strictly after a, inside the tie"
    );
    Ok(Verdict::Passed)
}

/// Each row carries its sandbox's instance record (none for a run without a key, or whose key
/// names no record) and its newest history entry (none without history).
pub async fn detached_view_rows_carry_their_instance_and_newest_history_entry_or_none<
    S: RunStore + SandboxInstanceStore,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let base = band(ctx);
    let thread = ctx.id("thread");
    let (key, missing) = (ctx.id("key"), ctx.id("no-such-key"));
    seed(store, &ctx.id("a"), &thread, 1, with_key(base + 1, &key)).await?;
    seed(
        store,
        &ctx.id("b"),
        &thread,
        1,
        with_key(base + 2, &missing),
    )
    .await?;
    seed(store, &ctx.id("c"), &thread, 1, detached(base + 3)).await?;
    store.upsert(instance(ctx, &key, "local")).await?;
    let history = keeps_history(store, ctx).await?;
    let newest = history_entry(&ctx.id("a"), "s2", base + 20);
    if history {
        store
            .record_history(&[history_entry(&ctx.id("a"), "s1", base + 10), newest.clone()])
            .await?;
    }
    let page = view(
        store,
        &DetachedQuery {
            after: Some(ReclaimableCursor {
                detached_since: base,
                run_id: String::new(),
            }),
            ..DetachedQuery::new(base + 100, 3)
        },
    )
    .await?;
    ensure_eq!(
        ids(&page),
        vec![ctx.id("a"), ctx.id("b"), ctx.id("c")],
        "in order"
    );
    ensure_eq!(
        page.rows[0].instance,
        Some(instance(ctx, &key, "local")),
        "a run's instance record"
    );
    ensure_eq!(
        page.rows[0].last,
        history.then_some(newest),
        "the newest history entry"
    );
    ensure_eq!(page.rows[1].instance, None, "a key that names no record");
    ensure_eq!(page.rows[2].instance, None, "a run without a key");
    ensure_eq!(page.rows[1].last, None, "a run without history");
    ensure_eq!(
        page.rows[1].record.sandbox_key.as_deref(),
        Some(missing.as_str()),
        "the run as stored"
    );
    Ok(Verdict::Passed)
}

/// The age, provider and outcome filters hold together: a run must pass all; a run without an
/// instance never matches a provider, one without history never matches an outcome; `matching`
/// counts every run that passes, past the limit.
pub async fn detached_view_filters_by_age_provider_and_outcome_combined<
    S: RunStore + SandboxInstanceStore,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let base = band(ctx);
    let now = base + 1_000;
    let thread = ctx.id("thread");
    // A provider name no other case uses keeps the counts this case's own.
    let (ours, theirs) = (ctx.id("prov"), ctx.id("other-prov"));
    let runs = [
        // name, detached at, provider, outcome of the newest entry
        ("old-ours-unknown-1", 1, Some(&ours), Some("unknown")),
        ("old-ours-unknown-2", 2, Some(&ours), Some("unknown")),
        ("old-ours-unknown-3", 3, Some(&ours), Some("unknown")),
        ("old-ours-failed", 4, Some(&ours), Some("failed")),
        ("old-ours-none", 5, Some(&ours), None),
        ("old-theirs-unknown", 6, Some(&theirs), Some("unknown")),
        ("old-no-instance", 7, None, Some("unknown")),
        ("young-ours-unknown", 900, Some(&ours), Some("unknown")),
    ];
    let history = keeps_history(store, ctx).await?;
    for (name, at, provider, outcome) in runs {
        let key = ctx.id(&format!("key-{name}"));
        seed(store, &ctx.id(name), &thread, 1, with_key(base + at, &key)).await?;
        if let Some(p) = provider {
            store.upsert(instance(ctx, &key, p)).await?;
        }
        if let (true, Some(outcome)) = (history, outcome) {
            let mut older = history_entry(&ctx.id(name), "s1", base + 10);
            older.outcome = "failed".into();
            let mut newest = history_entry(&ctx.id(name), "s2", base + 20);
            newest.outcome = outcome.into();
            store.record_history(&[older, newest]).await?;
        }
    }
    let query = DetachedQuery {
        older_than_ms: Some(500),
        provider: Some(ours.clone()),
        ..DetachedQuery::new(now, 2)
    };
    let by_provider = view(store, &query).await?;
    ensure_eq!(
        ids(&by_provider),
        vec![ctx.id("old-ours-unknown-1"), ctx.id("old-ours-unknown-2")],
        "old runs of the provider, up to the limit"
    );
    ensure_eq!(
        by_provider.matching,
        5,
        "old runs of the provider, past the limit"
    );
    if !history {
        return Ok(Verdict::Skipped(
            "the outcome filter needs run history, which this store does not keep".into(),
        ));
    }
    let both = view(
        store,
        &DetachedQuery {
            outcome: Some("unknown".into()),
            ..query.clone()
        },
    )
    .await?;
    ensure_eq!(
        ids(&both),
        vec![ctx.id("old-ours-unknown-1"), ctx.id("old-ours-unknown-2")],
        "old, the provider's, newest entry unknown"
    );
    ensure_eq!(
        both.matching,
        3,
        "the young run, the other provider's, the run \
        without an instance, the failed one and the one without history do not match"
    );
    ensure!(
        both.rows
            .iter()
            .all(|r| r.last.as_ref().is_some_and(|e| e.outcome == "unknown")),
        "the rows carry the entry the filter matched"
    );
    let failed = view(
        store,
        &DetachedQuery {
            outcome: Some("failed".into()),
            ..query
        },
    )
    .await?;
    ensure_eq!(
        ids(&failed),
        vec![ctx.id("old-ours-failed")],
        "only the newest entry counts: the older failed entries do not match"
    );
    ensure_eq!(failed.matching, 1, "one match");
    Ok(Verdict::Passed)
}
