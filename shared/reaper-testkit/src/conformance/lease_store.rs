//! The lease-store suite: the per-run claim and the sweep-wide single-flight lease (A.5). A busy
//! key is answered at once; every grant has its own token, so a stale holder can neither renew
//! nor release a newer grant. A key's note (the sweep's listing cursor) is written only by the
//! grant holding the key and outlives the grants.

use reaper_core::pause::{read_pause_note, record_pause_note, PauseMark};
use reaper_core::ports::{Lease, LeaseGrant, LeaseStore};
use reaper_core::{EpochMs, StoreError};

use super::{Case, CaseContext, CaseResult, Failure, Verdict};

/// Every case of the suite, for runners that cannot use the test macro.
pub fn cases<S: LeaseStore + ?Sized>() -> Vec<Case<S>> {
    crate::__reaper_lease_store_cases! { list {} }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __reaper_lease_store_cases {
    ($mode:ident $args:tt) => {
        $crate::__reaper_conformance_expand! { $mode $args lease_store [
            acquire_of_a_free_key_grants_it_until_now_plus_ttl,
            acquire_of_a_held_key_answers_held_with_the_holder_at_once,
            acquire_at_or_after_expiry_grants_another_owner_a_new_token,
            renew_by_the_holder_extends_the_lease,
            renew_by_a_stale_grant_after_another_owner_took_the_key_is_lost,
            renew_after_release_is_lost,
            release_by_a_stale_grant_keeps_the_new_holders_lease,
            a_regrant_to_the_same_owner_cannot_be_released_by_its_old_grant,
            release_then_reacquire_grants_the_key_before_expiry,
            keys_are_independent,
            a_missing_note_is_none,
            a_note_written_by_the_holder_reads_back_and_is_replaced_by_the_next,
            a_note_from_a_grant_another_owner_took_over_is_refused,
            a_note_from_a_released_grant_is_refused,
            a_note_survives_release_and_reacquire,
            a_pause_mark_reads_back_and_a_resume_replaces_it,
            a_pause_mark_is_refused_while_another_writer_holds_its_key,
        ] }
    };
}

const TTL: u64 = 1_000;

async fn must_acquire<S: LeaseStore + ?Sized>(
    store: &S,
    key: &str,
    owner: &str,
    now: EpochMs,
) -> Result<Lease, Failure> {
    match store.acquire(key, owner, now, TTL).await? {
        LeaseGrant::Acquired(lease) => Ok(lease),
        held => Err(Failure::at(
            format!("{owner} could not acquire {key:?} at {now}: {held:?}"),
            file!(),
            line!(),
        )),
    }
}

fn held(owner: &str, expires_at: EpochMs) -> LeaseGrant {
    LeaseGrant::Held {
        owner: owner.to_string(),
        expires_at,
    }
}

/// Checks that acquire of a free key grants it until now plus ttl.
pub async fn acquire_of_a_free_key_grants_it_until_now_plus_ttl<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("run-driver:run");
    let lease = must_acquire(store, &key, "owner-a", 5_000).await?;
    ensure_eq!(
        (lease.key.as_str(), lease.owner.as_str(), lease.expires_at),
        (key.as_str(), "owner-a", 6_000),
        "key, owner, expiresAt of the grant"
    );
    ensure!(!lease.token.is_empty(), "the grant's token is empty");
    Ok(Verdict::Passed)
}

/// Checks that acquire of a held key answers held with the holder at once.
pub async fn acquire_of_a_held_key_answers_held_with_the_holder_at_once<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    must_acquire(store, &key, "owner-a", 5_000).await?;
    ensure_eq!(
        store.acquire(&key, "owner-b", 5_999, TTL).await?,
        held("owner-a", 6_000),
        "acquire by another owner 1 ms before expiry"
    );
    Ok(Verdict::Passed)
}

/// Expired means `expires_at <= now`.
pub async fn acquire_at_or_after_expiry_grants_another_owner_a_new_token<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let first = must_acquire(store, &key, "owner-a", 5_000).await?;
    let second = must_acquire(store, &key, "owner-b", 6_000).await?;
    ensure_eq!(
        (second.owner.as_str(), second.expires_at),
        ("owner-b", 7_000),
        "owner and expiresAt of the grant at exactly the old expiry"
    );
    ensure!(
        second.token != first.token,
        "the new grant reused the expired grant's token {:?}",
        first.token
    );
    let third = must_acquire(store, &key, "owner-c", 9_000).await?;
    ensure!(
        third.token != second.token && third.token != first.token,
        "the grant after expiry reused an earlier token {:?}",
        third.token
    );
    Ok(Verdict::Passed)
}

/// Checks that renew by the holder extends the lease.
pub async fn renew_by_the_holder_extends_the_lease<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let lease = must_acquire(store, &key, "owner-a", 5_000).await?;
    let renewed = store.renew(&lease, 5_800, TTL).await?;
    ensure_eq!(
        renewed.as_ref().map(|l| (l.owner.as_str(), l.expires_at)),
        Some(("owner-a", 6_800)),
        "owner and expiresAt after renewing at 5800"
    );
    ensure_eq!(
        store.acquire(&key, "owner-b", 6_000, TTL).await?,
        held("owner-a", 6_800),
        "acquire by another owner at the original expiry"
    );
    // The renewed grant is still this holder's: it renews again.
    let renewed = renewed.unwrap_or(lease);
    ensure!(
        store.renew(&renewed, 6_500, TTL).await?.is_some(),
        "a second renewal by the holder was refused"
    );
    Ok(Verdict::Passed)
}

/// Checks that renew by a stale grant after another owner took the key is lost.
pub async fn renew_by_a_stale_grant_after_another_owner_took_the_key_is_lost<
    S: LeaseStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("run-driver:run");
    let stale = must_acquire(store, &key, "owner-a", 5_000).await?;
    must_acquire(store, &key, "owner-b", 6_500).await?;
    ensure_eq!(
        store.renew(&stale, 6_600, TTL).await?,
        None,
        "renewal by the expired grant"
    );
    ensure_eq!(
        store.acquire(&key, "owner-c", 6_700, TTL).await?,
        held("owner-b", 7_500),
        "the key after the stale renewal"
    );
    Ok(Verdict::Passed)
}

/// Checks that renew after release is lost.
pub async fn renew_after_release_is_lost<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let lease = must_acquire(store, &key, "owner-a", 5_000).await?;
    store.release(&lease).await?;
    ensure_eq!(
        store.renew(&lease, 5_100, TTL).await?,
        None,
        "renewal of a released grant"
    );
    Ok(Verdict::Passed)
}

/// Checks that release by a stale grant keeps the new holders lease.
pub async fn release_by_a_stale_grant_keeps_the_new_holders_lease<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("run-driver:run");
    let stale = must_acquire(store, &key, "owner-a", 5_000).await?;
    let current = must_acquire(store, &key, "owner-b", 6_000).await?;
    store.release(&stale).await?;
    ensure_eq!(
        store.acquire(&key, "owner-c", 6_100, TTL).await?,
        held("owner-b", 7_000),
        "the key after a stale release"
    );
    ensure!(
        store.renew(&current, 6_200, TTL).await?.is_some(),
        "the current holder lost its lease to a stale release"
    );
    Ok(Verdict::Passed)
}

/// Tokens, not owners, identify a grant: the same owner taking the key again after expiry gets
/// a new grant that its old one cannot touch.
pub async fn a_regrant_to_the_same_owner_cannot_be_released_by_its_old_grant<
    S: LeaseStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let old = must_acquire(store, &key, "owner-a", 5_000).await?;
    let new = must_acquire(store, &key, "owner-a", 6_000).await?;
    ensure!(
        new.token != old.token,
        "the re-grant reused the old token {:?}",
        old.token
    );
    store.release(&old).await?;
    ensure_eq!(
        store.acquire(&key, "owner-b", 6_100, TTL).await?,
        held("owner-a", 7_000),
        "the key after releasing the old grant"
    );
    ensure_eq!(
        store.renew(&old, 6_200, TTL).await?,
        None,
        "renewal by the old grant"
    );
    Ok(Verdict::Passed)
}

/// Checks that release then reacquire grants the key before expiry.
pub async fn release_then_reacquire_grants_the_key_before_expiry<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let lease = must_acquire(store, &key, "owner-a", 5_000).await?;
    store.release(&lease).await?;
    // Releasing twice is harmless.
    store.release(&lease).await?;
    let next = must_acquire(store, &key, "owner-b", 5_001).await?;
    ensure_eq!(
        (next.owner.as_str(), next.expires_at),
        ("owner-b", 6_001),
        "owner and expiresAt of the grant after release"
    );
    Ok(Verdict::Passed)
}

/// Checks that keys are independent.
pub async fn keys_are_independent<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let run_a = ctx.id("run-driver:a");
    let run_b = ctx.id("run-driver:b");
    let a = must_acquire(store, &run_a, "owner-a", 5_000).await?;
    let b = must_acquire(store, &run_b, "owner-b", 5_000).await?;
    store.release(&a).await?;
    ensure_eq!(
        store.acquire(&run_b, "owner-c", 5_100, TTL).await?,
        held("owner-b", 6_000),
        "key b after releasing key a"
    );
    ensure!(
        store.renew(&b, 5_200, TTL).await?.is_some(),
        "renewal on key b after releasing key a was refused"
    );
    Ok(Verdict::Passed)
}

async fn note_of<S: LeaseStore + ?Sized>(store: &S, key: &str) -> Result<Option<String>, Failure> {
    Ok(store.note(key).await?)
}

/// Checks that a missing note is none.
pub async fn a_missing_note_is_none<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    ensure_eq!(
        note_of(store, &key).await?,
        None,
        "the note of a key never taken"
    );
    let lease = must_acquire(store, &key, "owner-a", 5_000).await?;
    ensure_eq!(note_of(store, &key).await?, None, "the note of a held key");
    store.release(&lease).await?;
    ensure_eq!(
        note_of(store, &key).await?,
        None,
        "the note of a released key"
    );
    Ok(Verdict::Passed)
}

/// Checks that a note written by the holder reads back and is replaced by the next.
pub async fn a_note_written_by_the_holder_reads_back_and_is_replaced_by_the_next<
    S: LeaseStore + ?Sized,
>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let other = ctx.id("sweep-other");
    let lease = must_acquire(store, &key, "owner-a", 5_000).await?;
    let first = r#"{"detachedSince":1700000000000,"runId":"run-\"é\""}"#;
    ensure!(
        store.set_note(&lease, first).await?,
        "the holder's note was refused"
    );
    ensure_eq!(
        note_of(store, &key).await?.as_deref(),
        Some(first),
        "the note after the holder wrote it"
    );
    ensure!(
        store.set_note(&lease, "second").await?,
        "the holder's second note was refused"
    );
    ensure_eq!(
        note_of(store, &key).await?.as_deref(),
        Some("second"),
        "the note after the holder replaced it"
    );
    ensure_eq!(
        note_of(store, &other).await?,
        None,
        "the note of another key"
    );
    // A renewed grant is the same grant: it still writes.
    let renewed = store.renew(&lease, 5_500, TTL).await?.unwrap_or(lease);
    ensure!(
        store.set_note(&renewed, "third").await?,
        "the renewed holder's note was refused"
    );
    Ok(Verdict::Passed)
}

/// The fence: a holder paused past its expiry, whose key another owner took, cannot rewind the
/// new holder's note.
pub async fn a_note_from_a_grant_another_owner_took_over_is_refused<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let stale = must_acquire(store, &key, "owner-a", 5_000).await?;
    let current = must_acquire(store, &key, "owner-b", 6_000).await?;
    ensure!(
        store.set_note(&current, "owner-b's").await?,
        "the new holder's note was refused"
    );
    ensure!(
        !store.set_note(&stale, "owner-a's").await?,
        "the stale grant's note was accepted"
    );
    ensure_eq!(
        note_of(store, &key).await?.as_deref(),
        Some("owner-b's"),
        "the note after the stale grant tried to write"
    );
    // The same owner taking the key again is a new grant too.
    let regrant = must_acquire(store, &key, "owner-b", 7_000).await?;
    ensure!(
        !store.set_note(&current, "old grant").await?,
        "the old grant of a re-granted owner wrote its note"
    );
    ensure!(
        store.set_note(&regrant, "new grant").await?,
        "the re-grant's note was refused"
    );
    Ok(Verdict::Passed)
}

/// Checks that a note from a released grant is refused.
pub async fn a_note_from_a_released_grant_is_refused<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let lease = must_acquire(store, &key, "owner-a", 5_000).await?;
    ensure!(
        store.set_note(&lease, "kept").await?,
        "the holder's note was refused"
    );
    store.release(&lease).await?;
    ensure!(
        !store.set_note(&lease, "after release").await?,
        "a released grant's note was accepted"
    );
    ensure_eq!(
        note_of(store, &key).await?.as_deref(),
        Some("kept"),
        "the note after a released grant tried to write"
    );
    Ok(Verdict::Passed)
}

/// Checks that a note survives release and reacquire.
pub async fn a_note_survives_release_and_reacquire<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("sweep");
    let first = must_acquire(store, &key, "owner-a", 5_000).await?;
    ensure!(
        store.set_note(&first, "cursor-1").await?,
        "the holder's note was refused"
    );
    store.release(&first).await?;
    let second = must_acquire(store, &key, "owner-b", 5_100).await?;
    ensure_eq!(
        note_of(store, &key).await?.as_deref(),
        Some("cursor-1"),
        "the note the next holder reads after a release"
    );
    ensure!(
        store.set_note(&second, "cursor-2").await?,
        "the next holder's note was refused"
    );
    // Expiry keeps it too: the holder after an expired grant reads it.
    must_acquire(store, &key, "owner-c", 7_000).await?;
    ensure_eq!(
        note_of(store, &key).await?.as_deref(),
        Some("cursor-2"),
        "the note after the lease expired and was taken again"
    );
    Ok(Verdict::Passed)
}

fn pause_mark(paused: bool, by: &str, at: EpochMs) -> PauseMark {
    PauseMark {
        paused,
        by: by.into(),
        at,
        reason: paused.then(|| "investigating a leak".into()),
    }
}

/// The operator's pause (issue 25) lives in a key's note: every store keeps it after the
/// write's lease is released, and the next writer replaces it.
pub async fn a_pause_mark_reads_back_and_a_resume_replaces_it<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("pause");
    ensure_eq!(
        read_pause_note(store, &key).await?,
        None,
        "the pause mark before any was written"
    );
    let paused = pause_mark(true, "alice@ops-1", 5_000);
    record_pause_note(store, &key, &paused).await?;
    ensure_eq!(
        read_pause_note(store, &key).await?,
        Some(paused),
        "the pause mark after it was written"
    );
    // The write's lease was released: another operator writes at once, well inside its TTL.
    let resumed = pause_mark(false, "bob@ops-2", 5_001);
    record_pause_note(store, &key, &resumed).await?;
    ensure_eq!(
        read_pause_note(store, &key).await?,
        Some(resumed),
        "the resume replaces the pause"
    );
    Ok(Verdict::Passed)
}

/// Checks that a pause mark is refused while another writer holds its key.
pub async fn a_pause_mark_is_refused_while_another_writer_holds_its_key<S: LeaseStore + ?Sized>(
    store: &S,
    ctx: &CaseContext,
) -> CaseResult {
    let key = ctx.id("pause");
    let lease = must_acquire(store, &key, "alice@ops-1", 5_000).await?;
    let refused = record_pause_note(store, &key, &pause_mark(true, "bob@ops-2", 5_500)).await;
    ensure!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "a pause written while another writer held the key: {refused:?}"
    );
    store.release(&lease).await?;
    ensure_eq!(
        read_pause_note(store, &key).await?,
        None,
        "a refused pause wrote nothing"
    );
    Ok(Verdict::Passed)
}
