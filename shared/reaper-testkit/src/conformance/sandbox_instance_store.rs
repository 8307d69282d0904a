//! The sandbox-instance-store suite (A.8): `get` of a missing key is `None`, `upsert` fully
//! replaces, `delete` of a missing key is a no-op. There is deliberately no `list`.

use reaper_core::ports::SandboxInstanceStore;
use reaper_core::SandboxInstanceRecord;

use super::{Case, CaseContext, CaseResult, Verdict};

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<S: SandboxInstanceStore + ?Sized>() -> Vec<Case<S>> {
    crate::__reaper_sandbox_instance_store_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_sandbox_instance_store_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_conformance_expand! { $mode $args sandbox_instance_store [
            get_of_a_missing_key_is_none,
            upsert_then_get_round_trips,
            upsert_fully_replaces_the_row,
            delete_of_a_missing_key_is_a_no_op,
            delete_removes_only_that_row,
        ] }
    };
}

fn full(ctx: &CaseContext, key: &str) -> SandboxInstanceRecord {
    SandboxInstanceRecord {
        key: ctx.id(key),
        provider: "local".into(),
        provider_sandbox_id: "sbx-ünïcödé \"1\"".into(),
        latest_snapshot_id: Some("snap-1".into()),
        thread_id: ctx.id("thread"),
        latest_run_id: Some(ctx.id("run")),
        updated_at: 1_700_000_000_000,
    }
}

/// Checks that get of a missing key is none.
pub async fn get_of_a_missing_key_is_none<S: SandboxInstanceStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    ensure_eq!(
        store.get(&ctx.id("missing")).await?,
        None,
        "get of a missing key"
    );
    Ok(Verdict::Passed)
}

/// Checks that upsert then get round trips.
pub async fn upsert_then_get_round_trips<S: SandboxInstanceStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let record = full(ctx, "thread:sandbox");
    store.upsert(record.clone()).await?;
    ensure_eq!(
        store.get(&record.key).await?,
        Some(record),
        "the stored record"
    );
    Ok(Verdict::Passed)
}

/// A replacement without the optional fields clears them: no merge.
pub async fn upsert_fully_replaces_the_row<S: SandboxInstanceStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let first = full(ctx, "key");
    store.upsert(first.clone()).await?;
    let second = SandboxInstanceRecord {
        key: first.key.clone(),
        provider: "docker".into(),
        provider_sandbox_id: "sbx-2".into(),
        latest_snapshot_id: None,
        thread_id: ctx.id("thread-2"),
        latest_run_id: None,
        updated_at: 1_700_000_000_500,
    };
    store.upsert(second.clone()).await?;
    ensure_eq!(
        store.get(&first.key).await?,
        Some(second),
        "the record after the replacement"
    );
    Ok(Verdict::Passed)
}

/// Checks that delete of a missing key is a no op.
pub async fn delete_of_a_missing_key_is_a_no_op<S: SandboxInstanceStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("missing");
    store.delete(&key).await?;
    ensure_eq!(
        store.get(&key).await?,
        None,
        "get after deleting a missing key"
    );
    Ok(Verdict::Passed)
}

/// Checks that delete removes only that row.
pub async fn delete_removes_only_that_row<S: SandboxInstanceStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let gone = full(ctx, "gone");
    let kept = full(ctx, "kept");
    store.upsert(gone.clone()).await?;
    store.upsert(kept.clone()).await?;
    store.delete(&gone.key).await?;
    ensure_eq!(store.get(&gone.key).await?, None, "the deleted record");
    ensure_eq!(store.get(&kept.key).await?, Some(kept), "the other record");
    store.delete(&gone.key).await?;
    Ok(Verdict::Passed)
}
