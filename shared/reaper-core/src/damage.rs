//! Damage stops the sweep (issue 24): once any store says the database itself is damaged (a
//! malformed page, a table missing or of the wrong shape: no retry helps), nothing more is
//! written and nothing destroyed in that sweep. A damaged `transcripts` or `logs` table must not
//! turn finished runs into failed ones and destroy their sandboxes.
//!
//! [`Damage`] is the sweep's latch; [`Guarded`] wraps a store port (or the reclaimer) so that
//! every error it sees is checked for damage, and once the latch is set every write (and every
//! reclaim) is refused with the damage itself. Reads still answer, so a report can be written.

use std::sync::{Arc, Mutex};

use crate::domain::{
    Chunk, EpochMs, LedgerCounts, LogEntry, LogSnapshot, NewRun, ReclaimIntent, RunPatch,
    RunRecord, SandboxInstanceRecord, TerminalWrite, Transcript,
};
use crate::error::{ReclaimError, StoreError};
use crate::ports::{
    Appended, BoundedCount, DeliveryLog, EpochBump, Fenced, MessageStore, Reclaim, ReclaimLedger,
    ReclaimablePage, ReclaimableQuery, Reclaimed, RunStore, RunStoreCapabilities,
    SandboxInstanceStore,
};

/// The key of a [`StoreError::Corrupt`] about the whole database rather than one row. Every
/// backend that can tell (SQLite, D1) reports damage under it.
pub const DAMAGED_KEY: &str = "database";

/// Whether `e` says the database itself is damaged (not one malformed row: every other row
/// still reads).
pub fn is_damaged(e: &StoreError) -> bool {
    matches!(e, StoreError::Corrupt { key, .. } if key == DAMAGED_KEY)
}

/// The sweep's damage latch: the first damage any guarded port saw. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Damage {
    first: Arc<Mutex<Option<String>>>,
}

impl Damage {
    /// The first damage seen, if any.
    pub fn seen(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `e` when it says the database is damaged.
    pub fn note(&self, e: &StoreError) {
        if is_damaged(e) {
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                tracing::error!(target: "reaper", error = %e, "the database is damaged: this sweep writes nothing more and destroys no sandbox");
                *first = Some(e.to_string());
            }
        }
    }

    /// Passes `r` on, noting its error.
    fn watch<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r {
            self.note(e);
        }
        r
    }

    /// The refusal of a write once damage was seen.
    fn refuse(&self) -> Result<(), StoreError> {
        match self.seen() {
            None => Ok(()),
            Some(reason) => Err(StoreError::Corrupt {
                key: DAMAGED_KEY.into(),
                reason: format!("not written: the sweep stopped at the damage it saw: {reason}"),
            }),
        }
    }
}

/// A port behind the damage latch (see the module docs).
pub struct Guarded<T: ?Sized> {
    inner: Arc<T>,
    damage: Damage,
}

impl<T: ?Sized> Guarded<T> {
    /// Wraps `inner` so its calls report into `damage`.
    pub fn new(inner: Arc<T>, damage: &Damage) -> Arc<Self> {
        Arc::new(Guarded {
            inner,
            damage: damage.clone(),
        })
    }
}

impl<T: ?Sized> std::fmt::Debug for Guarded<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("damage", &self.damage.seen())
            .finish()
    }
}

/// A write: refused once damage was seen, its error noted.
macro_rules! write {
    ($self:ident, $call:expr) => {{
        $self.damage.refuse()?;
        $self.damage.watch($call.await)
    }};
}

/// A read: always answered, its error noted.
macro_rules! read {
    ($self:ident, $call:expr) => {{
        $self.damage.watch($call.await)
    }};
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: RunStore + ?Sized> RunStore for Guarded<T> {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        write!(self, self.inner.create_or_resume(new))
    }
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        write!(self, self.inner.update(run_id, patch))
    }
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        write!(self, self.inner.update_fenced(run_id, held_epoch, patch))
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        read!(self, self.inner.get(run_id))
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        read!(self, self.inner.find_active_run(thread_id))
    }
    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        read!(self, self.inner.list_by_thread(thread_id))
    }
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        read!(self, self.inner.list_reclaimable_page(query))
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        read!(
            self,
            self.inner
                .count_reclaimable(detached_after, detached_until, at_most)
        )
    }
    fn capabilities(&self) -> RunStoreCapabilities {
        self.inner.capabilities()
    }
    async fn record_history(
        &self,
        entries: &[crate::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        write!(self, self.inner.record_history(entries))
    }
    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<crate::history::HistoryEntry>, StoreError> {
        read!(self, self.inner.run_history(run_id, limit))
    }
    async fn prune_history(&self, before: EpochMs, max_entries: usize) -> Result<u64, StoreError> {
        write!(self, self.inner.prune_history(before, max_entries))
    }
    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<crate::sweeps::SweepRecord>, StoreError> {
        read!(self, self.inner.recent_sweeps(limit))
    }
    /// Forwarded whole (the provided method would lose the inner store's sweep record and its
    /// one transaction); a part's failure the inner store reports is checked for damage too.
    async fn write_sweep_history(
        &self,
        history: &crate::history::SweepHistory,
    ) -> Result<crate::history::SweepWritten, StoreError> {
        let done = write!(self, self.inner.write_sweep_history(history))?;
        for error in [&done.write_error, &done.prune_error].into_iter().flatten() {
            self.damage.note(error);
        }
        Ok(done)
    }
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        write!(self, self.inner.bump_epoch(run_id))
    }
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        write!(self, self.inner.write_terminal(run_id, held_epoch, write))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: DeliveryLog + ?Sized> DeliveryLog for Guarded<T> {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        write!(self, self.inner.append(run_id, fence, chunks, now))
    }
    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        write!(self, self.inner.close(run_id, fence, now))
    }
    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        read!(self, self.inner.snapshot(run_id))
    }
    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        read!(self, self.inner.read(run_id, from, limit))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: MessageStore + ?Sized> MessageStore for Guarded<T> {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        write!(self, self.inner.save_transcript(transcript, fence))
    }
    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        read!(self, self.inner.get_transcript(run_id))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: SandboxInstanceStore + ?Sized> SandboxInstanceStore for Guarded<T> {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        read!(self, self.inner.get(key))
    }
    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError> {
        write!(self, self.inner.upsert(record))
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        write!(self, self.inner.delete(key))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: ReclaimLedger + ?Sized> ReclaimLedger for Guarded<T> {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        write!(self, self.inner.record_intent(intent))
    }
    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        write!(self, self.inner.update_intent(intent))
    }
    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        write!(self, self.inner.resolve_intent(run_id))
    }
    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        read!(self, self.inner.get_intent(run_id))
    }
    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        read!(self, self.inner.due_intents(now, limit))
    }
    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        read!(self, self.inner.ledger_counts())
    }
}

/// The reclaimer behind the latch: no sandbox is destroyed once damage was seen (the run it
/// belongs to may be recorded wrongly), and the ledger keeps the entry for a later sweep.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl<T: Reclaim + ?Sized> Reclaim for Guarded<T> {
    async fn reclaim(
        &self,
        record: &RunRecord,
        intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError> {
        if let Err(e) = self.damage.refuse() {
            return Err(ReclaimError::Store(e));
        }
        let out = self.inner.reclaim(record, intent).await;
        if let Err(ReclaimError::Store(e)) = &out {
            self.damage.note(e);
        }
        out
    }

    /// Reads only: forwarded whatever the latch says.
    async fn plan(
        &self,
        record: &RunRecord,
        intent: &ReclaimIntent,
    ) -> Result<Option<crate::reclaim::ReclaimPlan>, ReclaimError> {
        self.inner.plan(record, intent).await
    }
}
