//! The suites must be able to fail: each flaw planted in an otherwise correct backend (the
//! memory store) is caught by the case written for it, through the same `cases()` lists a
//! Worker runner uses.

use std::sync::Arc;

use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    Appended, BoundedCount, DeliveryLog, EpochBump, Fenced, Lease, LeaseGrant, LeaseStore,
    MessageStore, ReclaimableCursor, ReclaimablePage, ReclaimableQuery, RunStore,
    RunStoreCapabilities, SandboxInstanceStore,
};
use reaper_core::{
    Chunk, EpochMs, LogEntry, LogSnapshot, NewRun, Patch, RunPatch, RunRecord,
    SandboxInstanceRecord, StoreError, TerminalWrite, Transcript,
};

use super::{run_cases, Case, CaseReport, Verdict};

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    CreateOverwritesExisting,
    UpdateCreatesUnknown,
    ClearIsDropped,
    FalseIsStoredAsAbsent,
    ListByThreadInInsertionOrder,
    ReclaimableCutoffExclusive,
    ReclaimableIncludesInterrupted,
    /// Counts past its bound and calls it exact.
    CountIgnoresBound,
    /// The reference's read-then-write claim: concurrent claims read the same epoch.
    BumpReadsThenWrites,
    BumpClaimsTerminal,
    WriteTerminalUnfenced,
    WriteTerminalCreatesMissing,
    LeaseExpiryExclusive,
    LeaseTokenIsTheOwner,
    LeaseReleaseIgnoresToken,
    /// The note is written whoever holds the key.
    NoteIgnoresGrant,
    /// The note lives in the lease row, so a release takes it along.
    ReleaseDropsNote,
    AppendIgnoresFence,
    FenceRefusesMissingRecord,
    CloseIsIgnored,
    EmptyAppendStampsTime,
    ReadIgnoresLimit,
    UpsertMerges,
    SaveKeepsFirst,
    /// Reports `list_by_thread` absent while the test declares it present.
    UndeclaredMissingCapability,
    GetIsUnavailable,
}

#[derive(Debug)]
struct Flawed {
    inner: MemoryStore,
    flaw: Flaw,
}

/// One page of a whole listing: the runs the query admits, in keyset order, up to its limit.
fn page_of(listing: Vec<RunRecord>, query: &ReclaimableQuery) -> ReclaimablePage {
    let mut runs: Vec<RunRecord> = listing.into_iter().filter(|r| query.admits(r)).collect();
    runs.sort_by(|a, b| (a.detached_since, &a.run_id).cmp(&(b.detached_since, &b.run_id)));
    let full = runs.len() > query.limit;
    runs.truncate(query.limit);
    let next = if full {
        runs.last().and_then(ReclaimableCursor::of)
    } else {
        None
    };
    ReclaimablePage {
        runs: runs.into_iter().map(Arc::new).collect(),
        corrupt: Vec::new(),
        next,
    }
}

fn flawed(flaw: Flaw) -> Flawed {
    Flawed {
        inner: MemoryStore::new(),
        flaw,
    }
}

#[async_trait::async_trait]
impl RunStore for Flawed {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        if self.flaw == Flaw::CreateOverwritesExisting {
            let mut record = RunRecord::new(&new.run_id, &new.thread_id, new.started_at);
            if let Some(status) = new.status {
                record.status = status;
            }
            self.inner.put_run(record.clone());
            return Ok(record);
        }
        self.inner.create_or_resume(new).await
    }

    async fn update(&self, run_id: &str, mut patch: RunPatch) -> Result<(), StoreError> {
        match self.flaw {
            Flaw::UpdateCreatesUnknown if RunStore::get(&self.inner, run_id).await?.is_none() => {
                let mut record = RunRecord::new(run_id, "", 0);
                record.apply(&patch);
                self.inner.put_run(record);
                return Ok(());
            }
            Flaw::ClearIsDropped => {
                for clear in [
                    &mut patch.sandbox_key as &mut dyn ClearToKeep,
                    &mut patch.detached_since,
                    &mut patch.cancel_requested,
                    &mut patch.driver_epoch,
                    &mut patch.usage,
                ] {
                    clear.clear_to_keep();
                }
            }
            Flaw::FalseIsStoredAsAbsent if patch.cancel_requested == Patch::Set(false) => {
                patch.cancel_requested = Patch::Clear;
            }
            _ => {}
        }
        self.inner.update(run_id, patch).await
    }

    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        self.inner.update_fenced(run_id, held_epoch, patch).await
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        if self.flaw == Flaw::GetIsUnavailable {
            return Err(StoreError::Unavailable("injected outage".into()));
        }
        RunStore::get(&self.inner, run_id).await
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.inner.find_active_run(thread_id).await
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        match self.flaw {
            Flaw::UndeclaredMissingCapability => Err(StoreError::Unsupported("list_by_thread")),
            Flaw::ListByThreadInInsertionOrder => Ok(self
                .inner
                .all_runs()
                .into_iter()
                .filter(|r| r.thread_id == thread_id)
                .collect()),
            _ => self.inner.list_by_thread(thread_id).await,
        }
    }

    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let cutoff = now - ttl_ms as i64;
        match self.flaw {
            Flaw::ReclaimableCutoffExclusive => Ok(self
                .inner
                .list_reclaimable(now, ttl_ms)
                .await?
                .into_iter()
                .filter(|r| r.detached_since.is_some_and(|d| d < cutoff))
                .collect()),
            Flaw::ReclaimableIncludesInterrupted => Ok(self
                .inner
                .all_runs()
                .into_iter()
                .filter(|r| {
                    !r.status.is_terminal() && r.detached_since.is_some_and(|d| d <= cutoff)
                })
                .collect()),
            _ => self.inner.list_reclaimable(now, ttl_ms).await,
        }
    }

    /// The flawed listing, sliced into the page (so a listing flaw shows in pages too).
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        let listing = self.list_reclaimable(query.detached_until, 0).await?;
        Ok(page_of(listing, &query))
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        let inner = &self.inner;
        if self.flaw == Flaw::CountIgnoresBound {
            let mut counted = inner
                .count_reclaimable(detached_after, detached_until, u64::MAX)
                .await?;
            counted.exact = true;
            return Ok(counted);
        }
        inner
            .count_reclaimable(detached_after, detached_until, at_most)
            .await
    }

    fn capabilities(&self) -> RunStoreCapabilities {
        RunStoreCapabilities {
            list_by_thread: self.flaw != Flaw::UndeclaredMissingCapability,
            list_reclaimable: true,
        }
    }

    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        match self.flaw {
            Flaw::BumpReadsThenWrites => {
                let Some(mut record) = RunStore::get(&self.inner, run_id).await? else {
                    return Ok(EpochBump::Unknown);
                };
                // Another claim gets to read the same epoch before this one writes.
                tokio::task::yield_now().await;
                let epoch = record.driver_epoch.unwrap_or(0) + 1;
                record.driver_epoch = Some(epoch);
                self.inner.put_run(record.clone());
                Ok(EpochBump::Claimed { epoch, record })
            }
            Flaw::BumpClaimsTerminal => {
                let Some(mut record) = RunStore::get(&self.inner, run_id).await? else {
                    return Ok(EpochBump::Unknown);
                };
                let epoch = record.driver_epoch.unwrap_or(0) + 1;
                record.driver_epoch = Some(epoch);
                self.inner.put_run(record.clone());
                Ok(EpochBump::Claimed { epoch, record })
            }
            _ => self.inner.bump_epoch(run_id).await,
        }
    }

    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        match self.flaw {
            Flaw::WriteTerminalUnfenced => {
                let existed = RunStore::get(&self.inner, run_id).await?.is_some();
                self.inner.update(run_id, write.to_patch()).await?;
                Ok(Fenced::Written(existed))
            }
            Flaw::WriteTerminalCreatesMissing
                if RunStore::get(&self.inner, run_id).await?.is_none() =>
            {
                let mut record = RunRecord::new(run_id, "", 0);
                record.apply(&write.to_patch());
                self.inner.put_run(record);
                Ok(Fenced::Written(true))
            }
            _ => self.inner.write_terminal(run_id, held_epoch, write).await,
        }
    }
}

trait ClearToKeep {
    fn clear_to_keep(&mut self);
}

impl<T> ClearToKeep for Patch<T> {
    fn clear_to_keep(&mut self) {
        if matches!(self, Patch::Clear) {
            *self = Patch::Keep;
        }
    }
}

#[async_trait::async_trait]
impl LeaseStore for Flawed {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        // An expiry checked as `expires_at < now` keeps a lease one millisecond too long.
        let (now, ttl_ms) = if self.flaw == Flaw::LeaseExpiryExclusive {
            (now - 1, ttl_ms + 1)
        } else {
            (now, ttl_ms)
        };
        let grant = self.inner.acquire(key, owner, now, ttl_ms).await?;
        Ok(match (self.flaw, grant) {
            (Flaw::LeaseTokenIsTheOwner, LeaseGrant::Acquired(lease)) => {
                LeaseGrant::Acquired(Lease {
                    token: lease.owner.clone(),
                    ..lease
                })
            }
            (_, grant) => grant,
        })
    }

    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        self.inner.renew(lease, now, ttl_ms).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        if self.flaw == Flaw::LeaseReleaseIgnoresToken {
            // Removes whichever grant holds the key: take it over as expired, then release.
            if let LeaseGrant::Acquired(current) = self
                .inner
                .acquire(&lease.key, "any", EpochMs::MAX, 0)
                .await?
            {
                return self.inner.release(&current).await;
            }
        }
        self.inner.release(lease).await?;
        if self.flaw == Flaw::ReleaseDropsNote {
            // Clear it through a grant of our own, then give the key back.
            if let LeaseGrant::Acquired(own) = self
                .inner
                .acquire(&lease.key, "any", EpochMs::MIN, 0)
                .await?
            {
                self.inner.set_note(&own, "").await?;
                self.inner.release(&own).await?;
            }
        }
        Ok(())
    }

    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        let note = self.inner.note(key).await?;
        Ok(note.filter(|n| !(self.flaw == Flaw::ReleaseDropsNote && n.is_empty())))
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        if self.flaw == Flaw::NoteIgnoresGrant {
            // Writes through whichever grant holds the key now, or a grant of its own.
            let current = match self
                .inner
                .acquire(&lease.key, "any", EpochMs::MAX, 0)
                .await?
            {
                LeaseGrant::Acquired(current) => current,
                LeaseGrant::Held { .. } => return Ok(false),
            };
            return self.inner.set_note(&current, note).await;
        }
        self.inner.set_note(lease, note).await
    }
}

#[async_trait::async_trait]
impl DeliveryLog for Flawed {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        match self.flaw {
            Flaw::AppendIgnoresFence => self.inner.append(run_id, None, chunks, now).await,
            Flaw::FenceRefusesMissingRecord
                if fence.is_some() && RunStore::get(&self.inner, run_id).await?.is_none() =>
            {
                Ok(Fenced::Superseded { observed: 0 })
            }
            Flaw::EmptyAppendStampsTime if chunks.is_empty() => {
                let stamp = [Chunk::new("STAMP")];
                self.inner.append(run_id, fence, stamp.to_vec(), now).await
            }
            _ => self.inner.append(run_id, fence, chunks, now).await,
        }
    }

    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        if self.flaw == Flaw::CloseIsIgnored {
            return Ok(Fenced::Written(()));
        }
        self.inner.close(run_id, fence, now).await
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        self.inner.snapshot(run_id).await
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let limit = if self.flaw == Flaw::ReadIgnoresLimit {
            usize::MAX
        } else {
            limit
        };
        self.inner.read(run_id, from, limit).await
    }
}

#[async_trait::async_trait]
impl SandboxInstanceStore for Flawed {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        SandboxInstanceStore::get(&self.inner, key).await
    }

    async fn upsert(&self, mut record: SandboxInstanceRecord) -> Result<(), StoreError> {
        if self.flaw == Flaw::UpsertMerges {
            if let Some(old) = SandboxInstanceStore::get(&self.inner, &record.key).await? {
                record.latest_snapshot_id = record.latest_snapshot_id.or(old.latest_snapshot_id);
                record.latest_run_id = record.latest_run_id.or(old.latest_run_id);
            }
        }
        self.inner.upsert(record).await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

#[async_trait::async_trait]
impl MessageStore for Flawed {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        if self.flaw == Flaw::SaveKeepsFirst
            && self
                .inner
                .get_transcript(&transcript.run_id)
                .await?
                .is_some()
        {
            return Ok(Fenced::Written(()));
        }
        self.inner.save_transcript(transcript, fence).await
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        self.inner.get_transcript(run_id).await
    }
}

fn all_cases() -> Vec<Case<Flawed>> {
    let mut cases = super::run_store::cases();
    cases.extend(super::lease_store::cases());
    cases.extend(super::delivery_log::cases());
    cases.extend(super::sandbox_instance_store::cases());
    cases.extend(super::message_store::cases());
    cases
}

/// Runs every case, each on a fresh backend with the flaw, and returns the failed case names.
async fn failures(flaw: Flaw) -> Vec<&'static str> {
    let mut failed = Vec::new();
    for case in all_cases() {
        let backend = flawed(flaw);
        let reports = run_cases(
            &backend,
            &[case],
            "self-test",
            RunStoreCapabilities::default(),
        )
        .await;
        failed.extend(
            reports
                .into_iter()
                .filter(|r| r.result.is_err())
                .map(|r| r.name),
        );
    }
    failed
}

#[tokio::test]
async fn a_correct_backend_passes_every_case_through_the_case_lists() {
    let backend = MemoryStore::new();
    let cases: Vec<Case<MemoryStore>> = {
        let mut cases = super::run_store::cases();
        cases.extend(super::lease_store::cases());
        cases.extend(super::delivery_log::cases());
        cases.extend(super::sandbox_instance_store::cases());
        cases.extend(super::message_store::cases());
        cases
    };
    // One backend for every case: ids never collide between cases.
    let reports = run_cases(&backend, &cases, "shared", RunStoreCapabilities::default()).await;
    assert_eq!(reports.len(), cases.len());
    let bad: Vec<&CaseReport> = reports
        .iter()
        .filter(|r| r.result != Ok(Verdict::Passed))
        .collect();
    assert!(bad.is_empty(), "cases that did not pass: {bad:#?}");
}

#[tokio::test]
async fn every_planted_flaw_fails_the_case_written_for_it() {
    let expectations: &[(Flaw, &[&str])] = &[
        (
            Flaw::CreateOverwritesExisting,
            &["create_or_resume_returns_an_existing_row_unchanged"],
        ),
        (
            Flaw::UpdateCreatesUnknown,
            &["update_of_an_unknown_run_is_a_no_op_that_creates_nothing"],
        ),
        (
            Flaw::ClearIsDropped,
            &[
                "clearing_one_durable_field_clears_only_that_field",
                "clearing_every_durable_field_keeps_the_row",
                "list_reclaimable_drops_a_run_whose_detached_since_is_cleared_when_capable",
                "usage_json_round_trips",
            ],
        ),
        (
            Flaw::FalseIsStoredAsAbsent,
            &["explicit_cancel_requested_false_round_trips_as_false"],
        ),
        (
            Flaw::ListByThreadInInsertionOrder,
            &["list_by_thread_is_ordered_by_started_at_when_capable"],
        ),
        (
            Flaw::ReclaimableCutoffExclusive,
            &[
                "list_reclaimable_cutoff_is_inclusive_when_capable",
                "list_reclaimable_with_zero_ttl_returns_a_run_detached_at_exactly_now_when_capable",
            ],
        ),
        (
            Flaw::ReclaimableIncludesInterrupted,
            &["list_reclaimable_never_lists_terminal_or_interrupted_runs_when_capable"],
        ),
        (
            Flaw::CountIgnoresBound,
            &["count_reclaimable_stops_at_its_bound_and_says_at_least_when_capable"],
        ),
        (
            Flaw::BumpReadsThenWrites,
            &["concurrent_bump_epochs_produce_distinct_consecutive_epochs"],
        ),
        (
            Flaw::BumpClaimsTerminal,
            &["bump_epoch_of_a_terminal_run_is_refused_and_leaves_the_epoch"],
        ),
        (
            Flaw::WriteTerminalUnfenced,
            &["write_terminal_is_superseded_when_the_stored_epoch_is_greater"],
        ),
        (
            Flaw::WriteTerminalCreatesMissing,
            &["write_terminal_of_a_missing_run_writes_nothing_and_creates_nothing"],
        ),
        (
            Flaw::LeaseExpiryExclusive,
            &["acquire_at_or_after_expiry_grants_another_owner_a_new_token"],
        ),
        (
            Flaw::LeaseTokenIsTheOwner,
            &["a_regrant_to_the_same_owner_cannot_be_released_by_its_old_grant"],
        ),
        (
            Flaw::LeaseReleaseIgnoresToken,
            &["release_by_a_stale_grant_keeps_the_new_holders_lease"],
        ),
        (
            Flaw::NoteIgnoresGrant,
            &[
                "a_note_from_a_grant_another_owner_took_over_is_refused",
                "a_note_from_a_released_grant_is_refused",
            ],
        ),
        (
            Flaw::ReleaseDropsNote,
            &["a_note_survives_release_and_reacquire"],
        ),
        (
            Flaw::AppendIgnoresFence,
            &["fenced_append_is_superseded_and_stores_nothing_when_the_run_epoch_is_past_the_fence"],
        ),
        (
            Flaw::FenceRefusesMissingRecord,
            &["fenced_append_lands_when_the_run_has_no_record_or_no_epoch"],
        ),
        (
            Flaw::CloseIsIgnored,
            &[
                "close_is_idempotent_and_refuses_later_appends",
                "closing_a_log_that_was_never_appended_refuses_appends",
            ],
        ),
        (
            Flaw::EmptyAppendStampsTime,
            &["snapshot_counts_entries_and_stamps_the_last_non_empty_append"],
        ),
        (
            Flaw::ReadIgnoresLimit,
            &[
                "read_returns_at_most_limit_entries_in_order_from_an_offset",
                "a_thousand_appends_read_back_in_pages",
            ],
        ),
        (Flaw::UpsertMerges, &["upsert_fully_replaces_the_row"]),
        (Flaw::SaveKeepsFirst, &["save_replaces_the_transcript"]),
        (
            Flaw::UndeclaredMissingCapability,
            &["list_by_thread_is_ordered_by_started_at_when_capable"],
        ),
    ];
    assert!(failures(Flaw::None).await.is_empty());
    for (flaw, expected) in expectations {
        let failed = failures(*flaw).await;
        for case in *expected {
            assert!(
                failed.contains(case),
                "{flaw:?} was not caught by {case}; failed cases: {failed:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_store_error_fails_the_case_and_says_where() {
    let backend = flawed(Flaw::GetIsUnavailable);
    let case = super::run_store::cases::<Flawed>()
        .into_iter()
        .find(|c| c.name == "get_of_an_unknown_run_is_none")
        .expect("the case exists");
    let reports = run_cases(&backend, &[case], "err", RunStoreCapabilities::default()).await;
    let Err(failure) = &reports[0].result else {
        panic!("a store error passed the case: {reports:?}");
    };
    assert!(
        failure.message.contains("injected outage") && failure.message.contains("run_store.rs:"),
        "failure message: {failure}"
    );
}

#[derive(Debug, Default)]
struct WithoutListByThread(MemoryStore);

#[async_trait::async_trait]
impl RunStore for WithoutListByThread {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.0.create_or_resume(new).await
    }
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.0.update(run_id, patch).await
    }
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        self.0.update_fenced(run_id, held_epoch, patch).await
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        RunStore::get(&self.0, run_id).await
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.0.find_active_run(thread_id).await
    }
    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.0.live_runs_for_sandbox(sandbox_key, limit).await
    }
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.0.list_reclaimable_page(query).await
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        self.0
            .count_reclaimable(detached_after, detached_until, at_most)
            .await
    }
    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.0.record_history(entries).await
    }
    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        self.0.run_history(run_id, limit).await
    }
    async fn prune_history(
        &self,
        before: reaper_core::EpochMs,
        max_entries: usize,
    ) -> Result<u64, StoreError> {
        self.0.prune_history(before, max_entries).await
    }
    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        self.0.write_sweep_history(history).await
    }
    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        self.0.recent_sweeps(limit).await
    }
    fn capabilities(&self) -> RunStoreCapabilities {
        RunStoreCapabilities {
            list_by_thread: false,
            list_reclaimable: true,
        }
    }
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.0.bump_epoch(run_id).await
    }
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.0.write_terminal(run_id, held_epoch, write).await
    }
}

#[tokio::test]
async fn a_declared_missing_capability_skips_its_cases_and_only_those() {
    let backend = WithoutListByThread::default();
    let declared = RunStoreCapabilities {
        list_by_thread: false,
        list_reclaimable: true,
    };
    let reports = run_cases(&backend, &super::run_store::cases(), "lacks", declared).await;
    for report in &reports {
        let gated = report.name.starts_with("list_by_thread");
        match &report.result {
            Ok(Verdict::Skipped(reason)) => {
                assert!(gated, "{} skipped: {reason}", report.name);
                assert!(reason.contains("list_by_thread"), "skip reason: {reason}");
            }
            Ok(Verdict::Passed) => assert!(!gated, "{} passed without the capability", report.name),
            Err(failure) => panic!("{} failed: {failure}", report.name),
        }
    }
    assert!(reports
        .iter()
        .any(|r| matches!(r.result, Ok(Verdict::Skipped(_)))));
}

// The macro itself, with a declared missing capability: every case becomes a test here.
crate::run_store_conformance!(
    async { Arc::new(WithoutListByThread::default()) },
    lacks = [list_by_thread],
);

/// A store written before the one end write: it keeps history through `record_history` and
/// `prune_history` only, no sweep records, and takes `write_sweep_history` as provided.
#[derive(Debug, Default)]
struct HistoryOnly(MemoryStore);

#[async_trait::async_trait]
impl RunStore for HistoryOnly {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.0.create_or_resume(new).await
    }
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.0.update(run_id, patch).await
    }
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        self.0.update_fenced(run_id, held_epoch, patch).await
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        RunStore::get(&self.0, run_id).await
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.0.find_active_run(thread_id).await
    }
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.0.list_reclaimable_page(query).await
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        self.0
            .count_reclaimable(detached_after, detached_until, at_most)
            .await
    }
    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.0.record_history(entries).await
    }
    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        self.0.run_history(run_id, limit).await
    }
    async fn prune_history(
        &self,
        before: reaper_core::EpochMs,
        max_entries: usize,
    ) -> Result<u64, StoreError> {
        self.0.prune_history(before, max_entries).await
    }
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.0.bump_epoch(run_id).await
    }
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.0.write_terminal(run_id, held_epoch, write).await
    }
}

#[tokio::test]
async fn a_store_with_only_the_history_methods_does_a_sweeps_end_write_through_the_provided_method()
{
    let backend = HistoryOnly::default();
    let case = super::run_store::cases::<HistoryOnly>()
        .into_iter()
        .find(|c| {
            c.name == "one_sweep_write_records_the_entries_the_sweep_record_and_prunes_both_retentions_when_supported"
        })
        .expect("the case exists");
    let reports = run_cases(&backend, &[case], "apart", RunStoreCapabilities::default()).await;
    assert_eq!(reports[0].result, Ok(Verdict::Passed), "{reports:?}");
}
