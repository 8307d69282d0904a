//! The run-store suite (spec A.2–A.4, H10, H12, H13, plus the claim's epoch bump and the fenced
//! terminal write).
//!
//! Cases for the optional `list_by_thread` and `list_reclaimable` end in `_when_capable`: when
//! the backend declares the capability absent they check that `capabilities()` and the method
//! agree (`Unsupported`) and report a skip; an undeclared gap is a failure.

use futures::future::join_all;
use reaper_core::history::{HistoryEntry, SweepHistory};
use reaper_core::ports::{
    BoundedCount, EpochBump, Fenced, ReclaimableCursor, ReclaimableQuery, RunStore,
};
use reaper_core::reap::OutcomeCounts;
use reaper_core::sweeps::{SweepRecord, MAX_SWEEPS_READ, SWEEP_PRUNE_BATCH};
use reaper_core::{
    EpochMs, NewRun, Patch, RunError, RunPatch, RunRecord, RunStatus, StoreError, TerminalStatus,
    TerminalWrite,
};
use serde_json::json;

use super::{Case, CaseContext, CaseResult, Failure, Verdict};

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<S: RunStore + ?Sized>() -> Vec<Case<S>> {
    crate::__reaper_run_store_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_run_store_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_conformance_expand! { $mode $args run_store [
            create_or_resume_creates_a_running_row_by_default,
            create_or_resume_honours_an_explicit_status,
            create_or_resume_returns_an_existing_row_unchanged,
            get_of_an_unknown_run_is_none,
            update_changes_named_fields_and_keeps_the_others,
            update_of_an_unknown_run_is_a_no_op_that_creates_nothing,
            every_status_round_trips,
            find_active_run_returns_the_newest_running_run_of_the_thread,
            find_active_run_of_a_thread_without_running_runs_is_none,
            list_by_thread_is_ordered_by_started_at_when_capable,
            live_runs_for_sandbox_are_the_non_terminal_runs_of_any_thread_naming_the_key_when_supported,
            list_reclaimable_cutoff_is_inclusive_when_capable,
            list_reclaimable_with_zero_ttl_returns_a_run_detached_at_exactly_now_when_capable,
            list_reclaimable_drops_a_run_whose_detached_since_is_cleared_when_capable,
            list_reclaimable_never_lists_terminal_or_interrupted_runs_when_capable,
            list_reclaimable_page_is_ordered_by_detached_since_up_to_its_limit_when_capable,
            list_reclaimable_page_resumes_strictly_after_its_cursor_and_ends_past_the_last_when_capable,
            list_reclaimable_page_excludes_its_lower_bound_and_includes_its_upper_when_capable,
            list_reclaimable_page_takes_the_later_of_its_floor_and_its_cursor_when_capable,
            list_reclaimable_page_shows_each_run_as_stored_now_when_capable,
            list_reclaimable_pages_see_inserts_after_the_cursor_and_not_runs_that_left_when_capable,
            count_reclaimable_counts_running_detached_runs_up_to_the_cutoff_when_capable,
            count_reclaimable_stops_at_its_bound_and_says_at_least_when_capable,
            durable_fields_of_a_fresh_row_read_back_absent,
            durable_fields_round_trip,
            overwriting_one_durable_field_leaves_the_others_unchanged,
            clearing_one_durable_field_clears_only_that_field,
            explicit_cancel_requested_false_round_trips_as_false,
            clearing_every_durable_field_keeps_the_row,
            bump_epoch_of_an_unknown_run_is_unknown_and_creates_nothing,
            bump_epoch_of_a_terminal_run_is_refused_and_leaves_the_epoch,
            bump_epoch_of_a_never_claimed_run_writes_one,
            bump_epoch_increments_a_stored_epoch,
            bump_epoch_of_an_interrupted_run_claims_it,
            concurrent_bump_epochs_produce_distinct_consecutive_epochs,
            write_terminal_lands_when_the_held_epoch_is_current,
            write_terminal_lands_when_the_run_was_never_claimed_or_the_held_epoch_is_ahead,
            write_terminal_is_superseded_when_the_stored_epoch_is_greater,
            write_terminal_of_a_missing_run_writes_nothing_and_creates_nothing,
            update_fenced_lands_when_the_held_epoch_is_current_or_ahead,
            update_fenced_is_superseded_and_changes_nothing_when_the_stored_epoch_is_greater,
            update_fenced_of_a_missing_run_writes_nothing_and_creates_nothing,
            usage_json_round_trips,
            error_with_and_without_code_round_trips,
            run_ids_with_quotes_newlines_and_unicode_round_trip,
            a_five_thousand_char_run_id_round_trips,
            run_history_of_a_run_without_entries_is_empty_when_supported,
            run_history_is_newest_first_up_to_its_limit_when_supported,
            run_history_round_trips_every_field_of_an_entry_when_supported,
            recording_an_entry_again_replaces_it_when_supported,
            run_history_of_one_run_never_shows_a_run_whose_id_extends_it_when_supported,
            prune_history_deletes_entries_before_the_cutoff_oldest_first_in_bounded_batches_when_supported,
            a_sweep_record_round_trips_every_field_and_writes_its_history_with_it_when_supported,
            recent_sweeps_are_newest_first_up_to_their_limit_and_a_rewrite_replaces_when_supported,
            sweep_records_past_the_retention_are_pruned_oldest_first_by_a_later_write_when_supported,
            one_sweep_write_records_the_entries_the_sweep_record_and_prunes_both_retentions_when_supported,
        ] }
    };
}

fn new_run(run_id: &str, thread_id: &str, started_at: EpochMs) -> NewRun {
    NewRun {
        run_id: run_id.to_string(),
        thread_id: thread_id.to_string(),
        started_at,
        status: None,
    }
}

/// Creates a run through the port and applies `patch`; returns the stored row.
pub(crate) async fn seed<S: RunStore + ?Sized>(
    store: &S,
    run_id: &str,
    thread_id: &str,
    started_at: EpochMs,
    patch: RunPatch,
) -> Result<RunRecord, Failure> {
    store
        .create_or_resume(new_run(run_id, thread_id, started_at))
        .await?;
    store.update(run_id, patch).await?;
    let Some(row) = store.get(run_id).await? else {
        return Err(Failure::at(
            format!("seeded run {run_id:?} does not read back"),
            file!(),
            line!(),
        ));
    };
    Ok(row)
}

async fn must_get<S: RunStore + ?Sized>(store: &S, run_id: &str) -> Result<RunRecord, Failure> {
    match store.get(run_id).await? {
        Some(row) => Ok(row),
        None => Err(Failure::at(
            format!("run {run_id:?} is missing"),
            file!(),
            line!(),
        )),
    }
}

fn status(status: RunStatus) -> RunPatch {
    RunPatch {
        status: Some(status),
        ..Default::default()
    }
}

pub(crate) fn detached(at: EpochMs) -> RunPatch {
    RunPatch {
        detached_since: Patch::Set(at),
        ..Default::default()
    }
}

#[derive(Clone, Copy)]
enum Capability {
    ListByThread,
    ListReclaimable,
}

/// `None` when the capability is present; a skip when declared and reported absent and the
/// method answers `Unsupported`; a failure on any disagreement.
async fn capability_gate<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
    capability: Capability,
) -> Result<Option<Verdict>, Failure> {
    let reported = store.capabilities();
    let (name, declared, reported) = match capability {
        Capability::ListByThread => (
            "list_by_thread",
            ctx.capabilities.list_by_thread,
            reported.list_by_thread,
        ),
        Capability::ListReclaimable => (
            "list_reclaimable",
            ctx.capabilities.list_reclaimable,
            reported.list_reclaimable,
        ),
    };
    ensure!(
        declared == reported,
        "the test declares {name} {} but capabilities() reports it {}: declare it with \
         `lacks = [{name}]` only when the backend really lacks it",
        if declared { "present" } else { "absent" },
        if reported { "present" } else { "absent" },
    );
    if declared {
        return Ok(None);
    }
    let answer = match capability {
        Capability::ListByThread => store.list_by_thread(&ctx.id("thread")).await.map(drop),
        Capability::ListReclaimable => store.list_reclaimable(0, 0).await.map(drop),
    };
    ensure!(
        matches!(answer, Err(StoreError::Unsupported(_))),
        "{name} is reported absent but calling it answered {answer:?} instead of Unsupported"
    );
    Ok(Some(Verdict::Skipped(format!(
        "capability {name} absent (declared, reported and answered Unsupported)"
    ))))
}

/// The ids in `rows` that belong to this case, sorted (order is not part of the contract).
fn own_ids(rows: &[RunRecord], ctx: &CaseContext) -> Vec<String> {
    let mut ids: Vec<String> = rows
        .iter()
        .filter(|r| r.run_id.starts_with(&ctx.prefix))
        .map(|r| r.run_id.clone())
        .collect();
    ids.sort();
    ids
}

/// Checks that create or resume creates a running row by default.
pub async fn create_or_resume_creates_a_running_row_by_default<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let thread = ctx.id("thread");
    let created = store.create_or_resume(new_run(&id, &thread, 100)).await?;
    let expected = RunRecord::new(&id, &thread, 100);
    ensure_eq!(created, expected, "the created row");
    ensure_eq!(store.get(&id).await?, Some(expected), "the stored row");
    Ok(Verdict::Passed)
}

/// Checks that create or resume honours an explicit status.
pub async fn create_or_resume_honours_an_explicit_status<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let mut new = new_run(&id, &ctx.id("thread"), 100);
    new.status = Some(RunStatus::Interrupted);
    let created = store.create_or_resume(new).await?;
    ensure_eq!(created.status, RunStatus::Interrupted, "the created status");
    ensure_eq!(
        must_get(store, &id).await?.status,
        RunStatus::Interrupted,
        "the stored status"
    );
    Ok(Verdict::Passed)
}

/// H10.9: a second call with a different thread, `startedAt` and status returns the original.
pub async fn create_or_resume_returns_an_existing_row_unchanged<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let original = seed(store, &id, &ctx.id("thread"), 100, detached(150)).await?;
    let again = store
        .create_or_resume(NewRun {
            run_id: id.clone(),
            thread_id: ctx.id("other-thread"),
            started_at: 999,
            status: Some(RunStatus::Completed),
        })
        .await?;
    ensure_eq!(again, original, "the row returned for an existing run id");
    ensure_eq!(
        must_get(store, &id).await?,
        original,
        "the stored row after resume"
    );
    Ok(Verdict::Passed)
}

/// Checks that get of an unknown run is none.
pub async fn get_of_an_unknown_run_is_none<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    ensure_eq!(
        store.get(&ctx.id("missing")).await?,
        None,
        "get of an unknown run"
    );
    Ok(Verdict::Passed)
}

/// H10.10, A.2: named fields change, the rest stay.
pub async fn update_changes_named_fields_and_keeps_the_others<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let mut expected = seed(
        store,
        &id,
        &ctx.id("thread"),
        100,
        RunPatch {
            sandbox_key: Patch::Set("sandbox-1".into()),
            detached_since: Patch::Set(200),
            ..Default::default()
        },
    )
    .await?;
    let patch = RunPatch {
        status: Some(RunStatus::Failed),
        finished_at: Patch::Set(300),
        error: Patch::Set(RunError::new("boom")),
        ..Default::default()
    };
    store.update(&id, patch.clone()).await?;
    expected.apply(&patch);
    ensure_eq!(
        must_get(store, &id).await?,
        expected,
        "the row after the update"
    );
    ensure_eq!(
        expected.sandbox_key.as_deref(),
        Some("sandbox-1"),
        "the unnamed sandbox key"
    );
    Ok(Verdict::Passed)
}

/// Checks that update of an unknown run is a no op that creates nothing.
pub async fn update_of_an_unknown_run_is_a_no_op_that_creates_nothing<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("missing");
    store
        .update(
            &id,
            RunPatch {
                status: Some(RunStatus::Running),
                detached_since: Patch::Set(1),
                cancel_requested: Patch::Set(true),
                driver_epoch: Patch::Set(4),
                ..Default::default()
            },
        )
        .await?;
    ensure_eq!(
        store.get(&id).await?,
        None,
        "get after updating an unknown run"
    );
    Ok(Verdict::Passed)
}

/// Checks that every status round trips.
pub async fn every_status_round_trips<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    seed(store, &id, &ctx.id("thread"), 1, RunPatch::default()).await?;
    for s in RunStatus::ALL {
        store.update(&id, status(s)).await?;
        ensure_eq!(
            must_get(store, &id).await?.status,
            s,
            "status after writing {s}"
        );
    }
    Ok(Verdict::Passed)
}

/// H10.13: the newest `running` row by `startedAt`; other statuses and threads ignored.
pub async fn find_active_run_returns_the_newest_running_run_of_the_thread<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let thread = ctx.id("thread");
    let other = ctx.id("other-thread");
    // Created out of startedAt order so insertion order cannot pass for the answer.
    seed(
        store,
        &ctx.id("newest-running"),
        &thread,
        300,
        RunPatch::default(),
    )
    .await?;
    seed(
        store,
        &ctx.id("old-running"),
        &thread,
        100,
        RunPatch::default(),
    )
    .await?;
    seed(
        store,
        &ctx.id("completed"),
        &thread,
        500,
        status(RunStatus::Completed),
    )
    .await?;
    seed(
        store,
        &ctx.id("interrupted"),
        &thread,
        400,
        status(RunStatus::Interrupted),
    )
    .await?;
    seed(
        store,
        &ctx.id("other-thread-run"),
        &other,
        900,
        RunPatch::default(),
    )
    .await?;
    let active = store.find_active_run(&thread).await?;
    ensure_eq!(
        active.map(|r| r.run_id),
        Some(ctx.id("newest-running")),
        "the active run of the thread"
    );
    ensure_eq!(
        store.find_active_run(&other).await?.map(|r| r.run_id),
        Some(ctx.id("other-thread-run")),
        "the active run of the other thread"
    );
    Ok(Verdict::Passed)
}

/// Checks that find active run of a thread without running runs is none.
pub async fn find_active_run_of_a_thread_without_running_runs_is_none<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let thread = ctx.id("thread");
    seed(
        store,
        &ctx.id("done"),
        &thread,
        100,
        status(RunStatus::Completed),
    )
    .await?;
    seed(
        store,
        &ctx.id("paused"),
        &thread,
        200,
        status(RunStatus::Interrupted),
    )
    .await?;
    ensure_eq!(
        store.find_active_run(&thread).await?,
        None,
        "active run of a thread with only completed and interrupted runs"
    );
    ensure_eq!(
        store.find_active_run(&ctx.id("unknown-thread")).await?,
        None,
        "active run of an unknown thread"
    );
    Ok(Verdict::Passed)
}

/// The reclaim's in-use check: every non-terminal run (`running`, `interrupted`) of any thread
/// naming the key, none of another key, none terminal. A store without the query answers
/// `Unsupported` (reported as a skip).
pub async fn live_runs_for_sandbox_are_the_non_terminal_runs_of_any_thread_naming_the_key_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sandbox-key");
    let named = |status: Option<RunStatus>, key: &str| RunPatch {
        status,
        sandbox_key: Patch::Set(key.to_string()),
        ..Default::default()
    };
    match store.live_runs_for_sandbox(&key, 10).await {
        Err(StoreError::Unsupported(_)) => {
            return Ok(Verdict::Skipped(
                "live_runs_for_sandbox is not supported: the reclaim checks the thread's runs only"
                    .into(),
            ))
        }
        other => ensure_eq!(other?, Vec::<RunRecord>::new(), "no run names a new key"),
    }
    seed(
        store,
        &ctx.id("live"),
        &ctx.id("t1"),
        100,
        named(None, &key),
    )
    .await?;
    seed(
        store,
        &ctx.id("paused"),
        &ctx.id("t2"),
        200,
        named(Some(RunStatus::Interrupted), &key),
    )
    .await?;
    for (i, done) in [RunStatus::Completed, RunStatus::Failed, RunStatus::Aborted]
        .into_iter()
        .enumerate()
    {
        seed(
            store,
            &ctx.id(&format!("done-{i}")),
            &ctx.id("t3"),
            300,
            named(Some(done), &key),
        )
        .await?;
    }
    seed(
        store,
        &ctx.id("elsewhere"),
        &ctx.id("t4"),
        400,
        named(None, &ctx.id("other-key")),
    )
    .await?;
    seed(
        store,
        &ctx.id("keyless"),
        &ctx.id("t5"),
        500,
        RunPatch::default(),
    )
    .await?;
    let mut ids: Vec<String> = store
        .live_runs_for_sandbox(&key, 10)
        .await?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    ids.sort();
    let mut expected = vec![ctx.id("live"), ctx.id("paused")];
    expected.sort();
    ensure_eq!(
        ids,
        expected,
        "the live runs naming the key, of every thread"
    );
    ensure_eq!(
        store.live_runs_for_sandbox(&key, 1).await?.len(),
        1,
        "at most the limit"
    );
    Ok(Verdict::Passed)
}

/// H10.11. Capability-gated (`list_by_thread`).
pub async fn list_by_thread_is_ordered_by_started_at_when_capable<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListByThread).await? {
        return Ok(skip);
    }
    let thread = ctx.id("thread");
    seed(store, &ctx.id("c"), &thread, 300, RunPatch::default()).await?;
    seed(
        store,
        &ctx.id("a"),
        &thread,
        100,
        status(RunStatus::Completed),
    )
    .await?;
    seed(store, &ctx.id("b"), &thread, 200, RunPatch::default()).await?;
    seed(
        store,
        &ctx.id("elsewhere"),
        &ctx.id("other"),
        150,
        RunPatch::default(),
    )
    .await?;
    let ids: Vec<String> = store
        .list_by_thread(&thread)
        .await?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    ensure_eq!(
        ids,
        vec![ctx.id("a"), ctx.id("b"), ctx.id("c")],
        "rows of the thread by startedAt"
    );
    ensure_eq!(
        store.list_by_thread(&ctx.id("unknown")).await?,
        Vec::<RunRecord>::new(),
        "rows of an unknown thread"
    );
    Ok(Verdict::Passed)
}

/// H10.12, H12.2: `detachedSince <= now - ttl`, inclusive; only detached `running` rows.
/// Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_cutoff_is_inclusive_when_capable<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let thread = ctx.id("thread");
    seed(store, &ctx.id("included"), &thread, 1, detached(1000)).await?;
    seed(store, &ctx.id("boundary"), &thread, 1, detached(5000)).await?;
    seed(store, &ctx.id("too-recent"), &thread, 1, detached(5001)).await?;
    let mut terminal = detached(1000);
    terminal.status = Some(RunStatus::Completed);
    seed(store, &ctx.id("terminal-detached"), &thread, 1, terminal).await?;
    seed(
        store,
        &ctx.id("never-detached"),
        &thread,
        1,
        RunPatch::default(),
    )
    .await?;
    let listed = store.list_reclaimable(10_000, 5_000).await?;
    ensure_eq!(
        own_ids(&listed, ctx),
        vec![ctx.id("boundary"), ctx.id("included")],
        "reclaimable at now 10000, ttl 5000"
    );
    let boundary = listed.iter().find(|r| r.run_id == ctx.id("boundary"));
    ensure_eq!(
        boundary.and_then(|r| r.detached_since),
        Some(5000),
        "the listed boundary row's detachedSince"
    );
    Ok(Verdict::Passed)
}

/// H12.3: the reaper calls with ttl 0. Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_with_zero_ttl_returns_a_run_detached_at_exactly_now_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let thread = ctx.id("thread");
    seed(store, &ctx.id("at-now"), &thread, 1, detached(7_000)).await?;
    seed(store, &ctx.id("after-now"), &thread, 1, detached(7_001)).await?;
    let listed = store.list_reclaimable(7_000, 0).await?;
    ensure_eq!(
        own_ids(&listed, ctx),
        vec![ctx.id("at-now")],
        "reclaimable at now 7000, ttl 0"
    );
    Ok(Verdict::Passed)
}

/// H12.4: a viewer re-attaching clears `detachedSince`, and the run is no longer reclaimable.
/// Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_drops_a_run_whose_detached_since_is_cleared_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let id = ctx.id("reattached");
    seed(store, &id, &ctx.id("thread"), 1, detached(1_000)).await?;
    ensure_eq!(
        own_ids(&store.list_reclaimable(10_000, 0).await?, ctx),
        vec![id.clone()],
        "reclaimable while detached"
    );
    store
        .update(
            &id,
            RunPatch {
                detached_since: Patch::Clear,
                ..Default::default()
            },
        )
        .await?;
    ensure_eq!(
        own_ids(&store.list_reclaimable(10_000, 0).await?, ctx),
        Vec::<String>::new(),
        "reclaimable after clearing detachedSince"
    );
    Ok(Verdict::Passed)
}

/// H12.5–6. Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_never_lists_terminal_or_interrupted_runs_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let thread = ctx.id("thread");
    for s in [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Aborted,
        RunStatus::Interrupted,
    ] {
        let mut patch = detached(10);
        patch.status = Some(s);
        seed(store, &ctx.id(s.as_str()), &thread, 1, patch).await?;
    }
    seed(store, &ctx.id("running"), &thread, 1, detached(10)).await?;
    ensure_eq!(
        own_ids(&store.list_reclaimable(1_000_000, 0).await?, ctx),
        vec![ctx.id("running")],
        "reclaimable among runs detached long ago"
    );
    Ok(Verdict::Passed)
}

/// A band of `detachedSince` values of this case's own, far above every other case's, so a page
/// of a store other cases share holds this case's runs only.
pub(crate) fn band(ctx: &CaseContext) -> EpochMs {
    // FNV-1a over the prefix: stable, and distinct bands for distinct cases.
    let hash = ctx.prefix.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // Below 2^53, the largest instant every store accepts (a JSON-safe integer).
    8_000_000_000_000_000 + (hash % (1 << 30)) as EpochMs * 1_000
}

fn page_query(
    detached_after: Option<EpochMs>,
    detached_until: EpochMs,
    after: Option<ReclaimableCursor>,
    limit: usize,
) -> ReclaimableQuery {
    ReclaimableQuery {
        detached_after,
        detached_until,
        after,
        limit,
    }
}

fn cursor(detached_since: EpochMs, run_id: String) -> Option<ReclaimableCursor> {
    Some(ReclaimableCursor {
        detached_since,
        run_id,
    })
}

/// The page's run ids grouped by `detachedSince`, groups in the page's order, each sorted.
fn tie_groups(page: &reaper_core::ports::ReclaimablePage) -> Vec<Vec<String>> {
    let mut groups: Vec<(Option<EpochMs>, Vec<String>)> = Vec::new();
    for r in &page.runs {
        match groups.last_mut() {
            Some((at, ids)) if *at == r.detached_since => ids.push(r.run_id.clone()),
            _ => groups.push((r.detached_since, vec![r.run_id.clone()])),
        }
    }
    groups
        .into_iter()
        .map(|(_, mut ids)| {
            ids.sort();
            ids
        })
        .collect()
}

/// The page's run ids, in the page's order.
fn page_ids(page: &reaper_core::ports::ReclaimablePage) -> Vec<String> {
    page.runs.iter().map(|r| r.run_id.clone()).collect()
}

/// Issue 13: a page is ordered by `detachedSince` (runs detached in the same millisecond in the
/// store's own stable order) and holds at most `limit` runs; a full page names its last run as
/// where the next one starts. Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_page_is_ordered_by_detached_since_up_to_its_limit_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    for (name, at) in [("b", 2), ("a", 2), ("c", 1), ("e", 3), ("d", 3)] {
        seed(store, &ctx.id(name), &thread, 1, detached(base + at)).await?;
    }
    let page = store
        .list_reclaimable_page(page_query(Some(base), base + 10, None, 3))
        .await?;
    ensure_eq!(
        tie_groups(&page),
        vec![vec![ctx.id("c")], vec![ctx.id("a"), ctx.id("b")]],
        "the first page of 3, by detachedSince"
    );
    let last = page
        .runs
        .last()
        .map(|r| r.run_id.clone())
        .unwrap_or_default();
    ensure_eq!(
        page.next,
        cursor(base + 2, last),
        "a full page names its last run as the next page's start"
    );
    let all = store
        .list_reclaimable_page(page_query(Some(base), base + 10, None, 10))
        .await?;
    ensure_eq!(
        tie_groups(&all),
        vec![
            vec![ctx.id("c")],
            vec![ctx.id("a"), ctx.id("b")],
            vec![ctx.id("d"), ctx.id("e")]
        ],
        "a page larger than the range, by detachedSince"
    );
    ensure_eq!(all.next, None, "a short page ends the range");
    Ok(Verdict::Passed)
}

/// Issue 13: the next page starts strictly after the cursor, also inside a run of equal
/// `detachedSince`, and a page past the last run is empty and ends the range, which is where a
/// sweep wraps around. Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_page_resumes_strictly_after_its_cursor_and_ends_past_the_last_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    for (name, at) in [("a", 1), ("b", 2), ("c", 2), ("d", 3)] {
        seed(store, &ctx.id(name), &thread, 1, detached(base + at)).await?;
    }
    let mut seen = Vec::new();
    let mut after = None;
    for _ in 0..4 {
        let page = store
            .list_reclaimable_page(page_query(Some(base), base + 10, after, 2))
            .await?;
        seen.extend(page_ids(&page));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    ensure_eq!(
        seen.first().zip(seen.last()),
        Some((&ctx.id("a"), &ctx.id("d"))),
        "pages in detachedSince order: {seen:?}"
    );
    seen.sort();
    ensure_eq!(
        seen,
        ["a", "b", "c", "d"].map(|n| ctx.id(n)).to_vec(),
        "every run once across pages of 2"
    );
    let past_the_last = store
        .list_reclaimable_page(page_query(
            Some(base),
            base + 10,
            cursor(base + 3, ctx.id("d")),
            2,
        ))
        .await?;
    ensure_eq!(
        page_ids(&past_the_last),
        Vec::<String>::new(),
        "a page past the last run"
    );
    ensure_eq!(
        past_the_last.next,
        None,
        "a page past the last run ends the range"
    );
    Ok(Verdict::Passed)
}

/// Issue 13: `detached_after < detachedSince <= detached_until`, so the runs past the TTL and the
/// runs inside it are two disjoint ranges; terminal runs are never paged. Capability-gated
/// (`list_reclaimable`).
pub async fn list_reclaimable_page_excludes_its_lower_bound_and_includes_its_upper_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    for (name, at) in [
        ("at-lower", 1),
        ("inside", 2),
        ("at-upper", 3),
        ("above", 4),
    ] {
        seed(store, &ctx.id(name), &thread, 1, detached(base + at)).await?;
    }
    let mut done = detached(base + 2);
    done.status = Some(RunStatus::Completed);
    seed(store, &ctx.id("completed"), &thread, 1, done).await?;
    let page = store
        .list_reclaimable_page(page_query(Some(base + 1), base + 3, None, 10))
        .await?;
    ensure_eq!(
        page_ids(&page),
        vec![ctx.id("inside"), ctx.id("at-upper")],
        "runs in (base+1, base+3]"
    );
    Ok(Verdict::Passed)
}

/// Issue 13: a page holds each run as it is stored at the time of the page, after a claim's
/// epoch bump and after an update (a store that keeps an index beside its rows must keep the
/// index's view in step). Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_page_shows_each_run_as_stored_now_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    let run = ctx.id("run");
    seed(store, &run, &thread, 1, detached(base + 1)).await?;
    let query = || page_query(Some(base), base + 10, None, 10);
    let before = store.list_reclaimable_page(query()).await?;
    ensure_eq!(before.runs.len(), 1, "the run is listed");
    store.bump_epoch(&run).await?;
    let claimed = store.list_reclaimable_page(query()).await?;
    ensure_eq!(
        claimed.runs.first().map(|r| r.driver_epoch),
        Some(Some(1)),
        "the page after a claim"
    );
    store
        .update(
            &run,
            RunPatch {
                sandbox_key: Patch::Set("moved".into()),
                ..Default::default()
            },
        )
        .await?;
    let after = store.list_reclaimable_page(query()).await?;
    let listed = after
        .runs
        .first()
        .map(|r| (r.driver_epoch, r.sandbox_key.clone()));
    ensure_eq!(
        listed,
        Some((Some(1), Some("moved".to_string()))),
        "the page after a claim and an update"
    );
    ensure_eq!(
        before.runs[0].driver_epoch,
        None,
        "a page taken before is not changed by later writes"
    );
    Ok(Verdict::Passed)
}

/// Issue 13: a page has two lower bounds, the range's floor (`detached_after`, exclusive) and the
/// cursor; whichever is later decides where it starts, so a cursor left behind the floor (the
/// TTL cutoff moved past it) neither repeats runs below the floor nor skips runs above it.
/// Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_page_takes_the_later_of_its_floor_and_its_cursor_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    for (name, at) in [("at-floor", 1), ("p", 2), ("q", 3)] {
        seed(store, &ctx.id(name), &thread, 1, detached(base + at)).await?;
    }
    for (label, after, want) in [
        (
            "a cursor at the floor's instant",
            cursor(base + 1, ctx.id("zzzz")),
            vec![ctx.id("p"), ctx.id("q")],
        ),
        (
            "a cursor below the floor",
            cursor(base - 5, ctx.id("a")),
            vec![ctx.id("p"), ctx.id("q")],
        ),
        (
            "a cursor above the floor",
            cursor(base + 2, ctx.id("p")),
            vec![ctx.id("q")],
        ),
    ] {
        let page = store
            .list_reclaimable_page(page_query(Some(base + 1), base + 10, after, 10))
            .await?;
        ensure_eq!(page_ids(&page), want, "{label}");
    }
    Ok(Verdict::Passed)
}

/// Issue 13: the keyset cursor is a position, not a row: a run inserted after it between pages
/// is on the next page, a run that went terminal or was re-attached is not, and nothing is
/// repeated. Capability-gated (`list_reclaimable`).
pub async fn list_reclaimable_pages_see_inserts_after_the_cursor_and_not_runs_that_left_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    for (name, at) in [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)] {
        seed(store, &ctx.id(name), &thread, 1, detached(base + at)).await?;
    }
    let first = store
        .list_reclaimable_page(page_query(Some(base), base + 10, None, 2))
        .await?;
    ensure_eq!(
        page_ids(&first),
        vec![ctx.id("a"), ctx.id("b")],
        "the first page"
    );
    // The cursor row itself leaves: the position still holds.
    store
        .update(&ctx.id("b"), status(RunStatus::Completed))
        .await?;
    store
        .update(&ctx.id("c"), status(RunStatus::Failed))
        .await?;
    store
        .update(
            &ctx.id("d"),
            RunPatch {
                detached_since: Patch::Clear,
                ..Default::default()
            },
        )
        .await?;
    seed(store, &ctx.id("before"), &thread, 1, detached(base + 1)).await?;
    seed(store, &ctx.id("new"), &thread, 1, detached(base + 4)).await?;
    let second = store
        .list_reclaimable_page(page_query(Some(base), base + 10, first.next, 10))
        .await?;
    ensure_eq!(
        page_ids(&second),
        vec![ctx.id("new"), ctx.id("e")],
        "the second page after inserts and departures"
    );
    Ok(Verdict::Passed)
}

/// The four durable fields of a row (H13).
fn durable(r: &RunRecord) -> (Option<String>, Option<EpochMs>, Option<bool>, Option<u64>) {
    (
        r.sandbox_key.clone(),
        r.detached_since,
        r.cancel_requested,
        r.driver_epoch,
    )
}

fn set_durable(sandbox_key: &str, detached_since: EpochMs, cancel: bool, epoch: u64) -> RunPatch {
    RunPatch {
        sandbox_key: Patch::Set(sandbox_key.into()),
        detached_since: Patch::Set(detached_since),
        cancel_requested: Patch::Set(cancel),
        driver_epoch: Patch::Set(epoch),
        ..Default::default()
    }
}

/// H13.1: absent, never a zero value.
pub async fn durable_fields_of_a_fresh_row_read_back_absent<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    store
        .create_or_resume(new_run(&id, &ctx.id("thread"), 1))
        .await?;
    ensure_eq!(
        durable(&must_get(store, &id).await?),
        (None, None, None, None),
        "sandboxKey, detachedSince, cancelRequested, driverEpoch of a fresh row"
    );
    Ok(Verdict::Passed)
}

/// H13.2.
pub async fn durable_fields_round_trip<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let row = seed(
        store,
        &id,
        &ctx.id("thread"),
        1,
        set_durable("sandbox-abc", 500, true, 1),
    )
    .await?;
    ensure_eq!(
        durable(&row),
        (Some("sandbox-abc".into()), Some(500), Some(true), Some(1)),
        "durable fields after writing them"
    );
    Ok(Verdict::Passed)
}

/// H13.3.
pub async fn overwriting_one_durable_field_leaves_the_others_unchanged<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    seed(
        store,
        &id,
        &ctx.id("thread"),
        1,
        set_durable("sandbox-abc", 500, true, 1),
    )
    .await?;
    store
        .update(
            &id,
            RunPatch {
                driver_epoch: Patch::Set(2),
                ..Default::default()
            },
        )
        .await?;
    ensure_eq!(
        durable(&must_get(store, &id).await?),
        (Some("sandbox-abc".into()), Some(500), Some(true), Some(2)),
        "durable fields after overwriting driverEpoch"
    );
    Ok(Verdict::Passed)
}

/// H13.4: `Patch::Clear` really clears (the reference's `{field: undefined}`).
pub async fn clearing_one_durable_field_clears_only_that_field<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    seed(
        store,
        &id,
        &ctx.id("thread"),
        1,
        set_durable("sandbox-abc", 500, true, 2),
    )
    .await?;
    store
        .update(
            &id,
            RunPatch {
                detached_since: Patch::Clear,
                ..Default::default()
            },
        )
        .await?;
    ensure_eq!(
        durable(&must_get(store, &id).await?),
        (Some("sandbox-abc".into()), None, Some(true), Some(2)),
        "durable fields after clearing detachedSince"
    );
    Ok(Verdict::Passed)
}

/// H13.5: `false` is a value, distinct from absent.
pub async fn explicit_cancel_requested_false_round_trips_as_false<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    seed(store, &id, &ctx.id("thread"), 1, RunPatch::cancel()).await?;
    store
        .update(
            &id,
            RunPatch {
                cancel_requested: Patch::Set(false),
                ..Default::default()
            },
        )
        .await?;
    ensure_eq!(
        must_get(store, &id).await?.cancel_requested,
        Some(false),
        "cancelRequested after writing false"
    );
    Ok(Verdict::Passed)
}

/// H13.6: clearing all four fields leaves a live `running` row.
pub async fn clearing_every_durable_field_keeps_the_row<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let thread = ctx.id("thread");
    seed(
        store,
        &id,
        &thread,
        1,
        set_durable("sandbox-abc", 500, false, 3),
    )
    .await?;
    store
        .update(
            &id,
            RunPatch {
                sandbox_key: Patch::Clear,
                detached_since: Patch::Clear,
                cancel_requested: Patch::Clear,
                driver_epoch: Patch::Clear,
                ..Default::default()
            },
        )
        .await?;
    ensure_eq!(
        store.get(&id).await?,
        Some(RunRecord::new(&id, &thread, 1)),
        "the row after clearing every durable field"
    );
    Ok(Verdict::Passed)
}

/// Checks that bump epoch of an unknown run is unknown and creates nothing.
pub async fn bump_epoch_of_an_unknown_run_is_unknown_and_creates_nothing<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("missing");
    ensure_eq!(
        store.bump_epoch(&id).await?,
        EpochBump::Unknown,
        "bump of an unknown run"
    );
    ensure_eq!(
        store.get(&id).await?,
        None,
        "get after bumping an unknown run"
    );
    Ok(Verdict::Passed)
}

/// A refused claim never moves the epoch (A.5).
pub async fn bump_epoch_of_a_terminal_run_is_refused_and_leaves_the_epoch<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    for s in [RunStatus::Completed, RunStatus::Failed, RunStatus::Aborted] {
        let id = ctx.id(s.as_str());
        let mut patch = status(s);
        patch.driver_epoch = Patch::Set(3);
        let before = seed(store, &id, &ctx.id("thread"), 1, patch).await?;
        ensure_eq!(
            store.bump_epoch(&id).await?,
            EpochBump::Terminal(s),
            "bump of a {s} run"
        );
        ensure_eq!(
            must_get(store, &id).await?,
            before,
            "the {s} row after the refused bump"
        );
    }
    Ok(Verdict::Passed)
}

/// Checks that bump epoch of a never claimed run writes one.
pub async fn bump_epoch_of_a_never_claimed_run_writes_one<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let mut expected = seed(store, &id, &ctx.id("thread"), 1, detached(50)).await?;
    expected.driver_epoch = Some(1);
    ensure_eq!(
        store.bump_epoch(&id).await?,
        EpochBump::Claimed {
            epoch: 1,
            record: expected.clone()
        },
        "bump of a never-claimed run"
    );
    ensure_eq!(
        must_get(store, &id).await?,
        expected,
        "the row after the bump"
    );
    Ok(Verdict::Passed)
}

/// Checks that bump epoch increments a stored epoch.
pub async fn bump_epoch_increments_a_stored_epoch<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let patch = RunPatch {
        driver_epoch: Patch::Set(7),
        ..Default::default()
    };
    seed(store, &id, &ctx.id("thread"), 1, patch).await?;
    let bumped = store.bump_epoch(&id).await?;
    ensure!(
        matches!(&bumped, EpochBump::Claimed { epoch: 8, record } if record.driver_epoch == Some(8)),
        "bump of a run at epoch 7 answered {bumped:?}, expected Claimed at 8 with the record at 8"
    );
    ensure_eq!(
        must_get(store, &id).await?.driver_epoch,
        Some(8),
        "stored epoch"
    );
    Ok(Verdict::Passed)
}

/// `interrupted` is a pause, not terminal (A.1): it can be claimed.
pub async fn bump_epoch_of_an_interrupted_run_claims_it<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    seed(
        store,
        &id,
        &ctx.id("thread"),
        1,
        status(RunStatus::Interrupted),
    )
    .await?;
    let bumped = store.bump_epoch(&id).await?;
    ensure!(
        matches!(bumped, EpochBump::Claimed { epoch: 1, .. }),
        "bump of an interrupted run answered {bumped:?}, expected Claimed at 1"
    );
    Ok(Verdict::Passed)
}

/// The bump is atomic: concurrent claims never read the same old epoch.
pub async fn concurrent_bump_epochs_produce_distinct_consecutive_epochs<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    const CLAIMS: u64 = 8;
    let id = ctx.id("run");
    seed(store, &id, &ctx.id("thread"), 1, RunPatch::default()).await?;
    let answers = join_all((0..CLAIMS).map(|_| store.bump_epoch(&id))).await;
    let mut epochs = Vec::new();
    for answer in answers {
        match answer? {
            EpochBump::Claimed { epoch, .. } => epochs.push(epoch),
            other => {
                return Err(Failure::at(
                    format!("a concurrent bump answered {other:?}"),
                    file!(),
                    line!(),
                ))
            }
        }
    }
    epochs.sort_unstable();
    ensure_eq!(
        epochs,
        (1..=CLAIMS).collect::<Vec<_>>(),
        "epochs of {CLAIMS} concurrent bumps"
    );
    ensure_eq!(
        must_get(store, &id).await?.driver_epoch,
        Some(CLAIMS),
        "stored epoch after the concurrent bumps"
    );
    Ok(Verdict::Passed)
}

fn failed_at(finished_at: EpochMs) -> TerminalWrite {
    TerminalWrite {
        status: TerminalStatus::Failed,
        finished_at,
        error: Some(RunError::new("agent crashed").with_code("exit_1")),
    }
}

/// Checks that write terminal lands when the held epoch is current.
pub async fn write_terminal_lands_when_the_held_epoch_is_current<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let mut patch = detached(40);
    patch.sandbox_key = Patch::Set("sandbox-1".into());
    patch.driver_epoch = Patch::Set(2);
    let mut expected = seed(store, &id, &ctx.id("thread"), 1, patch).await?;
    let write = failed_at(900);
    ensure_eq!(
        store.write_terminal(&id, 2, &write).await?,
        Fenced::Written(true),
        "terminal write at the current epoch"
    );
    expected.status = RunStatus::Failed;
    expected.finished_at = Some(900);
    expected.error = write.error.clone();
    ensure_eq!(
        must_get(store, &id).await?,
        expected,
        "the row after the terminal write"
    );
    Ok(Verdict::Passed)
}

/// The condition is `driverEpoch <= held`: an absent epoch is not past any holder.
pub async fn write_terminal_lands_when_the_run_was_never_claimed_or_the_held_epoch_is_ahead<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let never = ctx.id("never-claimed");
    seed(store, &never, &ctx.id("thread"), 1, RunPatch::default()).await?;
    let write = TerminalWrite {
        status: TerminalStatus::Completed,
        finished_at: 10,
        error: None,
    };
    ensure_eq!(
        store.write_terminal(&never, 1, &write).await?,
        Fenced::Written(true),
        "terminal write on a run without driverEpoch"
    );
    let row = must_get(store, &never).await?;
    ensure_eq!(
        (row.status, row.finished_at, row.error),
        (RunStatus::Completed, Some(10), None),
        "status, finishedAt, error after completing"
    );

    let behind = ctx.id("stored-behind");
    let patch = RunPatch {
        driver_epoch: Patch::Set(2),
        ..Default::default()
    };
    seed(store, &behind, &ctx.id("thread"), 1, patch).await?;
    ensure_eq!(
        store.write_terminal(&behind, 3, &write).await?,
        Fenced::Written(true),
        "terminal write held at 3 on a run at 2"
    );
    ensure_eq!(
        must_get(store, &behind).await?.status,
        RunStatus::Completed,
        "status after the write held ahead"
    );
    Ok(Verdict::Passed)
}

/// Checks that write terminal is superseded when the stored epoch is greater.
pub async fn write_terminal_is_superseded_when_the_stored_epoch_is_greater<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let patch = RunPatch {
        driver_epoch: Patch::Set(5),
        ..Default::default()
    };
    let before = seed(store, &id, &ctx.id("thread"), 1, patch).await?;
    ensure_eq!(
        store.write_terminal(&id, 4, &failed_at(900)).await?,
        Fenced::Superseded { observed: 5 },
        "terminal write held at 4 on a run at 5"
    );
    ensure_eq!(
        must_get(store, &id).await?,
        before,
        "the row after the refused write"
    );
    Ok(Verdict::Passed)
}

/// The claim holder's update (the sweep's cancel, a returning viewer's attach) lands while its
/// epoch is current, or ahead of a never-claimed run's, and clears what it says to clear.
pub async fn update_fenced_lands_when_the_held_epoch_is_current_or_ahead<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let mut patch = detached(500);
    patch.driver_epoch = Patch::Set(3);
    seed(store, &id, &ctx.id("thread"), 1, patch).await?;
    let attach = RunPatch {
        detached_since: Patch::Clear,
        ..Default::default()
    };
    ensure_eq!(
        store.update_fenced(&id, 3, attach).await?,
        Fenced::Written(true),
        "attach held at 3 on a run at 3"
    );
    let row = must_get(store, &id).await?;
    ensure_eq!(row.detached_since, None, "detachedSince after the attach");
    ensure_eq!(row.driver_epoch, Some(3), "the epoch after the attach");
    let never = ctx.id("never-claimed");
    seed(store, &never, &ctx.id("thread"), 1, detached(500)).await?;
    ensure_eq!(
        store.update_fenced(&never, 1, RunPatch::cancel()).await?,
        Fenced::Written(true),
        "cancel held at 1 on a never-claimed run"
    );
    ensure_eq!(
        must_get(store, &never).await?.cancel_requested,
        Some(true),
        "cancelRequested after the fenced cancel"
    );
    Ok(Verdict::Passed)
}

/// Issue 24: a holder whose claim was taken over (a paused process, an expired lease) can
/// never land its cancel or attach, whatever its timing: the store refuses it and says by whom.
pub async fn update_fenced_is_superseded_and_changes_nothing_when_the_stored_epoch_is_greater<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let mut patch = detached(500);
    patch.driver_epoch = Patch::Set(5);
    let before = seed(store, &id, &ctx.id("thread"), 1, patch).await?;
    ensure_eq!(
        store.update_fenced(&id, 4, RunPatch::cancel()).await?,
        Fenced::Superseded { observed: 5 },
        "cancel held at 4 on a run at 5"
    );
    let attach = RunPatch {
        detached_since: Patch::Clear,
        ..Default::default()
    };
    ensure_eq!(
        store.update_fenced(&id, 4, attach).await?,
        Fenced::Superseded { observed: 5 },
        "attach held at 4 on a run at 5"
    );
    ensure_eq!(
        store.update_fenced(&id, 4, RunPatch::default()).await?,
        Fenced::Superseded { observed: 5 },
        "an empty patch held at 4 on a run at 5"
    );
    ensure_eq!(
        must_get(store, &id).await?,
        before,
        "the row after the refused updates"
    );
    Ok(Verdict::Passed)
}

/// Checks that update fenced of a missing run writes nothing and creates nothing.
pub async fn update_fenced_of_a_missing_run_writes_nothing_and_creates_nothing<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("missing");
    ensure_eq!(
        store.update_fenced(&id, 1, RunPatch::cancel()).await?,
        Fenced::Written(false),
        "fenced update of a missing run"
    );
    ensure_eq!(
        store.get(&id).await?,
        None,
        "get after the update of a missing run"
    );
    Ok(Verdict::Passed)
}

/// Checks that write terminal of a missing run writes nothing and creates nothing.
pub async fn write_terminal_of_a_missing_run_writes_nothing_and_creates_nothing<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("missing");
    ensure_eq!(
        store.write_terminal(&id, 1, &failed_at(900)).await?,
        Fenced::Written(false),
        "terminal write on a missing run"
    );
    ensure_eq!(
        store.get(&id).await?,
        None,
        "get after the write on a missing run"
    );
    Ok(Verdict::Passed)
}

/// Checks that usage json round trips.
pub async fn usage_json_round_trips<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let id = ctx.id("run");
    let usage = json!({
        "promptTokens": 1234,
        "completionTokens": 0,
        "cost": 0.125,
        "byModel": [{"model": "m-1", "tokens": 9_007_199_254_740_991_i64}, {"model": null}],
        "cached": false,
        "note": "ünïcödé \"quoted\"\nline",
    });
    let patch = RunPatch {
        usage: Patch::Set(usage.clone()),
        ..Default::default()
    };
    seed(store, &id, &ctx.id("thread"), 1, patch).await?;
    ensure_eq!(must_get(store, &id).await?.usage, Some(usage), "usage");
    store
        .update(
            &id,
            RunPatch {
                usage: Patch::Clear,
                ..Default::default()
            },
        )
        .await?;
    ensure_eq!(
        must_get(store, &id).await?.usage,
        None,
        "usage after clearing"
    );
    Ok(Verdict::Passed)
}

/// H10.7.
pub async fn error_with_and_without_code_round_trips<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    for (name, error) in [
        (
            "with-code",
            RunError::new("blocked").with_code("content_filter"),
        ),
        ("without-code", RunError::new("something broke")),
    ] {
        let id = ctx.id(name);
        let mut patch = status(RunStatus::Failed);
        patch.error = Patch::Set(error.clone());
        seed(store, &id, &ctx.id("thread"), 1, patch).await?;
        ensure_eq!(
            must_get(store, &id).await?.error,
            Some(error),
            "error {name}"
        );
    }
    Ok(Verdict::Passed)
}

/// Ids are opaque strings: no escaping or quoting bugs.
pub async fn run_ids_with_quotes_newlines_and_unicode_round_trip<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let thread = ctx.id("thread \"quoted\"\n");
    let ids = [
        ctx.id("it's \"quoted\" `back` \\slash"),
        ctx.id("new\nline\r\ttab"),
        ctx.id("ünïcödé-日本語-🦀"),
        ctx.id("'; DROP TABLE reaper_runs; --"),
        ctx.id("%2F/../?#&=*"),
    ];
    round_trip_ids(store, &thread, &ids).await
}

/// No truncation: 5,000 characters (a backend with a shorter key limit must map long ids, not
/// cut them).
pub async fn a_five_thousand_char_run_id_round_trips<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let long = ctx.id(&"x".repeat(5_000));
    // A sibling differing only in the last character must stay a different run.
    let sibling = format!("{}y", &long[..long.len() - 1]);
    round_trip_ids(store, &ctx.id("thread"), &[long, sibling]).await
}

/// Creates, detaches, reads back and claims each id, all on one thread.
async fn round_trip_ids<S: RunStore + ?Sized>(
    store: &S,
    thread: &str,
    ids: &[String],
) -> CaseResult {
    for (i, id) in ids.iter().enumerate() {
        let started_at = 100 + i as EpochMs;
        let created = store
            .create_or_resume(new_run(id, thread, started_at))
            .await?;
        ensure_eq!(created.run_id, *id, "run id echoed by create_or_resume");
        store.update(id, detached(5)).await?;
        let row = must_get(store, id).await?;
        ensure_eq!(
            (
                row.run_id,
                row.thread_id,
                row.started_at,
                row.detached_since
            ),
            (id.clone(), thread.to_string(), started_at, Some(5)),
            "run id, thread id, startedAt, detachedSince"
        );
        let bumped = store.bump_epoch(id).await?;
        ensure!(
            matches!(bumped, EpochBump::Claimed { epoch: 1, .. }),
            "bump of run {id:?} answered {bumped:?}"
        );
    }
    ensure_eq!(
        store.find_active_run(thread).await?.map(|r| r.run_id),
        ids.last().cloned(),
        "active run of the thread"
    );
    Ok(Verdict::Passed)
}

/// Checks that count reclaimable counts running detached runs up to the cutoff when capable.
pub async fn count_reclaimable_counts_running_detached_runs_up_to_the_cutoff_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    seed(store, &ctx.id("at-lower-bound"), &thread, 1, detached(base)).await?;
    seed(store, &ctx.id("a"), &thread, 1, detached(base + 1)).await?;
    seed(store, &ctx.id("b"), &thread, 1, detached(base + 2)).await?;
    seed(store, &ctx.id("boundary"), &thread, 1, detached(base + 5)).await?;
    seed(store, &ctx.id("too-recent"), &thread, 1, detached(base + 6)).await?;
    for terminal in [RunStatus::Completed, RunStatus::Interrupted] {
        let mut patch = detached(base + 1);
        patch.status = Some(terminal);
        seed(store, &ctx.id(terminal.as_str()), &thread, 1, patch).await?;
    }
    let exact = |count| BoundedCount { count, exact: true };
    ensure_eq!(
        store.count_reclaimable(Some(base), base + 5, 100).await?,
        exact(3),
        "the count past the lower bound up to the boundary, inclusive"
    );
    ensure_eq!(
        store.count_reclaimable(Some(base), base + 5, 3).await?,
        exact(3),
        "the count with a bound equal to it"
    );
    ensure_eq!(
        store
            .count_reclaimable(Some(base + 6), base + 100, 100)
            .await?,
        exact(0),
        "the count of a range with no run"
    );
    Ok(Verdict::Passed)
}

/// Checks that count reclaimable stops at its bound and says at least when capable.
pub async fn count_reclaimable_stops_at_its_bound_and_says_at_least_when_capable<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = capability_gate(store, ctx, Capability::ListReclaimable).await? {
        return Ok(skip);
    }
    let base = band(ctx);
    let thread = ctx.id("thread");
    for i in 1..=5 {
        seed(
            store,
            &ctx.id(&format!("run-{i}")),
            &thread,
            1,
            detached(base + i),
        )
        .await?;
    }
    let counted = store.count_reclaimable(Some(base), base + 10, 3).await?;
    ensure!(
        !counted.exact && (1..=3).contains(&counted.count),
        "a count bounded at 3 over 5 runs answered {counted:?}, not at least 1..=3"
    );
    ensure_eq!(
        store.count_reclaimable(Some(base), base + 10, 0).await?,
        BoundedCount {
            count: 0,
            exact: false
        },
        "a count bounded at 0 over runs"
    );
    Ok(Verdict::Passed)
}

pub(crate) fn history_entry(run_id: &str, sweep_id: &str, at: EpochMs) -> HistoryEntry {
    HistoryEntry {
        run_id: run_id.to_string(),
        sweep_id: sweep_id.to_string(),
        at,
        host: "host-a".into(),
        outcome: "expired".into(),
        reason_code: "expired/ttl".into(),
        reason: "detached for longer than the TTL".into(),
        sandbox: Some("destroyed".into()),
        ledger: vec!["recorded".into(), "resolved".into()],
    }
}

/// `None` when the store keeps history; a skip when it answers `Unsupported`.
async fn history_gate<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> Result<Option<Verdict>, Failure> {
    match store.run_history(&ctx.id("history-probe"), 1).await {
        Err(StoreError::Unsupported(_)) => Ok(Some(Verdict::Skipped(
            "run history is not supported by this store".into(),
        ))),
        other => {
            ensure_eq!(
                other?,
                Vec::<HistoryEntry>::new(),
                "a new run has no history"
            );
            Ok(None)
        }
    }
}

/// Entries of other runs never leak into a run's history; an unknown run has none.
pub async fn run_history_of_a_run_without_entries_is_empty_when_supported<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = history_gate(store, ctx).await? {
        return Ok(skip);
    }
    store
        .record_history(&[history_entry(&ctx.id("other"), &ctx.id("s1"), 1_000_000)])
        .await?;
    ensure_eq!(
        store.run_history(&ctx.id("run"), 10).await?,
        Vec::<HistoryEntry>::new(),
        "a run without entries"
    );
    Ok(Verdict::Passed)
}

/// Newest first by `at`, then by sweep id; at most `limit` entries.
pub async fn run_history_is_newest_first_up_to_its_limit_when_supported<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = history_gate(store, ctx).await? {
        return Ok(skip);
    }
    let run = ctx.id("run");
    // Written out of order, two of them at the same time.
    let entries = [
        history_entry(&run, "sweep-b", 2_000_000),
        history_entry(&run, "sweep-d", 4_000_000),
        history_entry(&run, "sweep-a", 1_000_000),
        history_entry(&run, "sweep-c2", 3_000_000),
        history_entry(&run, "sweep-c1", 3_000_000),
    ];
    store.record_history(&entries[..2]).await?;
    store.record_history(&entries[2..]).await?;
    let sweeps = |h: Vec<HistoryEntry>| h.into_iter().map(|e| e.sweep_id).collect::<Vec<_>>();
    ensure_eq!(
        sweeps(store.run_history(&run, 10).await?),
        vec!["sweep-d", "sweep-c2", "sweep-c1", "sweep-b", "sweep-a"],
        "newest first, ties by sweep id, descending"
    );
    ensure_eq!(
        sweeps(store.run_history(&run, 2).await?),
        vec!["sweep-d", "sweep-c2"],
        "the newest `limit` entries"
    );
    Ok(Verdict::Passed)
}

/// Every field reads back as written: no ledger events and no sandbox, odd text, a large `at`.
pub async fn run_history_round_trips_every_field_of_an_entry_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = history_gate(store, ctx).await? {
        return Ok(skip);
    }
    let run = ctx.id("run \"quoted\"\nline é 🦀");
    let full = history_entry(&run, "sweep-1", 1_700_000_000_000);
    let bare = HistoryEntry {
        sandbox: None,
        ledger: Vec::new(),
        outcome: "unknown".into(),
        reason_code: "unknown/sandbox-gone".into(),
        reason: "no sandbox instance record for key \"k\" — left alone".into(),
        host: "host b/ü".into(),
        ..history_entry(&run, "sweep-2", (1 << 53) - 1)
    };
    store.record_history(&[full.clone(), bare.clone()]).await?;
    ensure_eq!(
        store.run_history(&run, 10).await?,
        vec![bare, full],
        "both entries, as written"
    );
    Ok(Verdict::Passed)
}

/// The entry's key is the run, the time and the sweep: a retried write replaces it, and an
/// entry of another sweep at the same time stays.
pub async fn recording_an_entry_again_replaces_it_when_supported<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = history_gate(store, ctx).await? {
        return Ok(skip);
    }
    let run = ctx.id("run");
    store
        .record_history(&[history_entry(&run, "sweep-1", 1_000_000)])
        .await?;
    let again = HistoryEntry {
        outcome: "failed".into(),
        ..history_entry(&run, "sweep-1", 1_000_000)
    };
    let other = history_entry(&run, "sweep-2", 1_000_000);
    store
        .record_history(&[again.clone(), other.clone()])
        .await?;
    ensure_eq!(
        store.run_history(&run, 10).await?,
        vec![other, again],
        "one entry per key, the last written"
    );
    Ok(Verdict::Passed)
}

/// A run whose id is another's prefix (a key-prefix query's classic slip) keeps its own history.
pub async fn run_history_of_one_run_never_shows_a_run_whose_id_extends_it_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = history_gate(store, ctx).await? {
        return Ok(skip);
    }
    let run = ctx.id("run");
    let longer = format!("{run}1");
    let like = format!("{run}%");
    store
        .record_history(&[
            history_entry(&longer, "sweep-1", 1_000_000),
            history_entry(&like, "sweep-1", 1_000_000),
            history_entry(&run, "sweep-2", 2_000_000),
        ])
        .await?;
    let history = store.run_history(&run, 10).await?;
    ensure_eq!(
        history
            .iter()
            .map(|e| e.run_id.as_str())
            .collect::<Vec<_>>(),
        vec![run.as_str()],
        "only the run's own entries"
    );
    Ok(Verdict::Passed)
}

/// Pruning deletes entries made strictly before the cutoff, oldest first, at most its batch per
/// call, and keeps the rest. Uses negative times no other case writes, so cases sharing a
/// database never prune each other's entries; leftovers of earlier runs are drained first.
pub async fn prune_history_deletes_entries_before_the_cutoff_oldest_first_in_bounded_batches_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = history_gate(store, ctx).await? {
        return Ok(skip);
    }
    let run = ctx.id("run");
    let keep = ctx.id("kept");
    store
        .record_history(&[
            history_entry(&run, "sweep-1", -3_000),
            history_entry(&run, "sweep-2", -2_000),
            history_entry(&run, "sweep-3", -1_000),
            history_entry(&keep, "sweep-1", 5_000_000),
        ])
        .await?;
    let first = store.prune_history(-1_000, 1).await?;
    ensure_eq!(first, 1, "one entry per call with a batch of one");
    // Other runs of this suite may have left entries this old: drain them, bounded.
    let mut calls = 0;
    loop {
        let pruned = store.prune_history(-1_000, 1).await?;
        ensure!(pruned <= 1, "a batch of one deleted {pruned} entries");
        if pruned == 0 {
            break;
        }
        calls += 1;
        ensure!(calls < 10_000, "pruning never ran dry");
    }
    let left: Vec<String> = store
        .run_history(&run, 10)
        .await?
        .into_iter()
        .map(|e| e.sweep_id)
        .collect();
    ensure_eq!(
        left,
        vec!["sweep-3".to_string()],
        "entries strictly before the cutoff are gone; the one at it stays"
    );
    ensure_eq!(
        store.run_history(&keep, 10).await?.len(),
        1,
        "a recent entry of another run stays"
    );
    Ok(Verdict::Passed)
}

/// A sweep record as a sweep writes it; `finished_at` decides its place.
pub(super) fn sweep_record(sweep_id: &str, finished_at: EpochMs) -> SweepRecord {
    SweepRecord {
        sweep_id: sweep_id.to_string(),
        host: "host-b pid 7 \"cron\" ✓".into(),
        started_at: finished_at - 1_234,
        finished_at,
        duration_ms: 1_234,
        considered: 9,
        outcomes: OutcomeCounts {
            finalized: 1,
            expired: 2,
            producing: 3,
            unknown: 1,
            budget_exceeded: 0,
            not_claimed: 1,
            reclaim_failed: 0,
            failed: 1,
        },
        reclaims_retried: 2,
        reclaims_settled: 1,
        concurrency: 8,
        concurrency_cap: 32,
        dry_run: false,
        failed: true,
        error: Some("the listing failed: disk I/O error <b>".into()),
    }
}

/// Records of this case only (stores may share a table between cases and runs).
async fn own_sweeps<S: RunStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
    limit: usize,
) -> Result<Vec<SweepRecord>, Failure> {
    let prefix = ctx.id("");
    Ok(store
        .recent_sweeps(limit)
        .await?
        .into_iter()
        .filter(|r| r.sweep_id.starts_with(&prefix))
        .collect())
}

/// `None` when the store keeps sweep records; a skip when it answers `Unsupported`.
pub(super) async fn sweeps_gate<S: RunStore + ?Sized>(
    store: &S,
) -> Result<Option<Verdict>, Failure> {
    match store.recent_sweeps(1).await {
        Err(StoreError::Unsupported(_)) => Ok(Some(Verdict::Skipped(
            "sweep records are not supported by this store".into(),
        ))),
        other => other.map(|_| None).map_err(Failure::from),
    }
}

/// A cutoff that prunes nothing (other cases' records may share the table).
pub(super) const NO_PRUNE: EpochMs = EpochMs::MIN;

/// A sweep's end write of `record` and `entries` whose records' prune cuts at `prune_before`
/// and whose history prune deletes nothing (other cases' entries may share the table).
pub(super) fn sweep_write(
    record: Option<SweepRecord>,
    entries: Vec<HistoryEntry>,
    prune_before: EpochMs,
) -> SweepHistory {
    SweepHistory {
        entries,
        prune_before,
        prune_max: 0,
        record,
    }
}

/// Far past any clock a real sweep reads, so this case's records are the store's newest.
const FUTURE: EpochMs = 4_000_000_000_000_000;

/// The record reads back field for field, and the history entries written in the same call
/// are in their runs' histories.
pub async fn a_sweep_record_round_trips_every_field_and_writes_its_history_with_it_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = sweeps_gate(store).await? {
        return Ok(skip);
    }
    let sweep = ctx.id("sweep");
    let run = ctx.id("run");
    let record = sweep_record(&sweep, FUTURE + 7);
    store
        .write_sweep_history(&sweep_write(
            Some(record.clone()),
            vec![history_entry(&run, &sweep, FUTURE + 7)],
            NO_PRUNE,
        ))
        .await?;
    ensure_eq!(
        own_sweeps(store, ctx, MAX_SWEEPS_READ).await?,
        vec![record],
        "the record as written"
    );
    let history = store.run_history(&run, 10).await?;
    ensure_eq!(
        history.len(),
        1,
        "the history entry written with the record"
    );
    ensure_eq!(history[0].sweep_id, sweep, "the entry's sweep");
    // A sweep that touched no run writes its record alone.
    let idle = sweep_record(&ctx.id("sweep-idle"), FUTURE + 8);
    store
        .write_sweep_history(&sweep_write(Some(idle), Vec::new(), NO_PRUNE))
        .await?;
    ensure_eq!(
        own_sweeps(store, ctx, MAX_SWEEPS_READ).await?.len(),
        2,
        "an idle sweep's record too"
    );
    Ok(Verdict::Passed)
}

/// Newest first by `finished_at`, ties by sweep id descending; at most `limit`; writing a
/// record again (same sweep id) replaces it.
pub async fn recent_sweeps_are_newest_first_up_to_their_limit_and_a_rewrite_replaces_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = sweeps_gate(store).await? {
        return Ok(skip);
    }
    let base = FUTURE + 1_000_000;
    for (name, at) in [("b", 2), ("d", 4), ("a", 1), ("c2", 3), ("c1", 3)] {
        let record = sweep_record(&ctx.id(name), base + at);
        store
            .write_sweep_history(&sweep_write(Some(record), Vec::new(), NO_PRUNE))
            .await?;
    }
    let ids = |v: Vec<SweepRecord>| v.into_iter().map(|r| r.sweep_id).collect::<Vec<_>>();
    let want: Vec<String> = ["d", "c2", "c1", "b", "a"]
        .iter()
        .map(|n| ctx.id(n))
        .collect();
    ensure_eq!(
        ids(own_sweeps(store, ctx, MAX_SWEEPS_READ).await?),
        want,
        "newest first, ties by sweep id, descending"
    );
    ensure_eq!(
        store.recent_sweeps(0).await?.len(),
        0,
        "a limit of zero reads nothing"
    );
    ensure!(
        store.recent_sweeps(2).await?.len() <= 2,
        "at most `limit` records"
    );
    let mut again = sweep_record(&ctx.id("b"), base + 2);
    again.failed = false;
    again.error = None;
    store
        .write_sweep_history(&sweep_write(Some(again.clone()), Vec::new(), NO_PRUNE))
        .await?;
    let all = own_sweeps(store, ctx, MAX_SWEEPS_READ).await?;
    ensure_eq!(all.len(), 5, "a rewrite adds no record");
    ensure!(
        all.iter().any(|r| r == &again),
        "the rewritten record replaces the first: {all:?}"
    );
    Ok(Verdict::Passed)
}

/// A write deletes records that finished before its cutoff, oldest first, at most
/// [`SWEEP_PRUNE_BATCH`] of them, and keeps the rest.
pub async fn sweep_records_past_the_retention_are_pruned_oldest_first_by_a_later_write_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = sweeps_gate(store).await? {
        return Ok(skip);
    }
    // Below any real clock and any other case's records, so this cutoff prunes only its own.
    let old = -5_000_000_000_000_000;
    for i in 0..3 {
        let record = sweep_record(&ctx.id(&format!("old-{i}")), old + i);
        store
            .write_sweep_history(&sweep_write(Some(record), Vec::new(), NO_PRUNE))
            .await?;
    }
    let fresh = sweep_record(&ctx.id("fresh"), FUTURE + 2_000_000);
    store
        .write_sweep_history(&sweep_write(Some(fresh), Vec::new(), old + 2))
        .await?;
    let left: Vec<String> = own_sweeps(store, ctx, MAX_SWEEPS_READ)
        .await?
        .into_iter()
        .map(|r| r.sweep_id)
        .collect();
    ensure_eq!(
        left,
        vec![ctx.id("fresh"), ctx.id("old-2")],
        "the records before the cutoff are gone; the one at it stays"
    );
    ensure!(SWEEP_PRUNE_BATCH >= 2, "the batch holds at least two");
    Ok(Verdict::Passed)
}

/// One `write_sweep_history` call is a sweep's whole end write and says what it did: the
/// entries are in their runs' histories, the sweep's record is kept, the records that finished
/// before the cutoff are gone, and at most `prune_max` entries made before it went, oldest
/// first, after the write. The old entries ride in the call itself (a sweep's own are never
/// that old), so no neighbour sharing the table can prune them between the write and the count.
/// Without a record the call writes no record. A store that keeps no sweep records says it
/// wrote none.
pub async fn one_sweep_write_records_the_entries_the_sweep_record_and_prunes_both_retentions_when_supported<
    S: RunStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    if let Some(skip) = history_gate(store, ctx).await? {
        return Ok(skip);
    }
    let keeps_sweeps = sweeps_gate(store).await?.is_none();
    // Below every other case's entries and records, so this cutoff prunes only this case's.
    let cutoff: EpochMs = -6_000_000_000_000_000;
    if keeps_sweeps {
        for i in 0..2 {
            let old = sweep_record(&ctx.id(&format!("old-{i}")), cutoff - 2 + i);
            let done = store
                .write_sweep_history(&sweep_write(Some(old), Vec::new(), NO_PRUNE))
                .await?;
            ensure!(
                done.sweep_recorded && done.recorded == 0 && done.pruned == 0,
                "an old record written alone: {done:?}"
            );
        }
    }
    let sweep = ctx.id("sweep");
    let run = ctx.id("run");
    let old_run = ctx.id("old-run");
    let fresh = history_entry(&run, &sweep, FUTURE + 3);
    let record = sweep_record(&sweep, FUTURE + 3);
    let write = SweepHistory {
        entries: vec![
            fresh.clone(),
            history_entry(&old_run, "old-a", cutoff - 3),
            history_entry(&old_run, "old-b", cutoff - 2),
            history_entry(&old_run, "old-c", cutoff - 1),
        ],
        prune_before: cutoff,
        prune_max: 2,
        record: Some(record.clone()),
    };
    let done = store.write_sweep_history(&write).await?;
    ensure!(
        done.write_error.is_none() && done.prune_error.is_none(),
        "no part failed: {done:?}"
    );
    ensure_eq!(done.recorded, 4, "every entry written");
    ensure_eq!(
        done.sweep_recorded,
        keeps_sweeps,
        "the record is written where the store keeps records"
    );
    ensure_eq!(
        done.pruned,
        2,
        "the prune deletes at most its batch, after the write"
    );
    ensure_eq!(
        store.run_history(&run, 10).await?,
        vec![fresh],
        "the sweep's entry"
    );
    let old_left: Vec<String> = store
        .run_history(&old_run, 10)
        .await?
        .into_iter()
        .map(|e| e.sweep_id)
        .collect();
    ensure!(
        !old_left.iter().any(|s| s == "old-a" || s == "old-b"),
        "the oldest entries went first: {old_left:?} left"
    );
    if keeps_sweeps {
        ensure_eq!(
            own_sweeps(store, ctx, MAX_SWEEPS_READ).await?,
            vec![record],
            "the sweep's record is kept and the records past the retention are gone"
        );
    }
    // Without a record: the history's prune alone, which takes this case's last old entry.
    let done = store
        .write_sweep_history(&SweepHistory {
            entries: Vec::new(),
            prune_before: cutoff,
            prune_max: 100,
            record: None,
        })
        .await?;
    ensure!(
        !done.sweep_recorded && done.recorded == 0 && done.pruned <= 100,
        "a write without a record: {done:?}"
    );
    ensure_eq!(
        store.run_history(&old_run, 10).await?.len(),
        0,
        "every entry before the cutoff is gone"
    );
    if keeps_sweeps {
        ensure_eq!(
            own_sweeps(store, ctx, MAX_SWEEPS_READ).await?.len(),
            1,
            "a write without a record adds none"
        );
    }
    Ok(Verdict::Passed)
}
