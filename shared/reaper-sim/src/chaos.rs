//! Fault injection and interleaving: every port call of an actor goes through [`Chaos`], which
//! yields to the scheduler a random number of times before and after the real call, and fails it
//! at random — before it reaches the store (nothing happened) or after (it happened, but the
//! caller is told it failed: the ambiguous failure a timeout gives).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use reaper_core::domain::{
    Chunk, EpochMs, LedgerCounts, LogEntry, LogSnapshot, NewRun, ReclaimIntent, RunPatch,
    RunRecord, SandboxInstanceRecord, TerminalWrite, Transcript,
};
use reaper_core::error::StoreError;
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    Appended, BoundedCount, DeliveryLog, EpochBump, Fenced, Lease, LeaseGrant, LeaseStore,
    MessageStore, ReclaimLedger, ReclaimablePage, ReclaimableQuery, RunStore, SandboxInstanceStore,
};

use crate::exec::yield_now;
use crate::rng::Rng;
use crate::trace::Trace;

/// The dice every actor shares: the fault rate, and a switch that turns faults off for the
/// clean sweeps at the end.
#[derive(Debug, Clone)]
pub struct Faults {
    rng: Arc<Mutex<Rng>>,
    rate: f64,
    enabled: Arc<AtomicBool>,
}

impl Faults {
    pub fn new(rng: Rng, rate: f64) -> Self {
        Faults {
            rng: Arc::new(Mutex::new(rng)),
            rate,
            enabled: Arc::new(AtomicBool::new(true)),
        }
    }

    pub fn disable(&self) {
        self.enabled.store(false, Ordering::SeqCst);
    }

    fn with_rng<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut self.rng.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether this call fails (only while faults are enabled).
    pub fn strike(&self) -> bool {
        self.enabled.load(Ordering::SeqCst) && self.with_rng(|r| r.chance(self.rate))
    }

    /// A scheduling choice (always on: interleavings are not faults).
    pub fn draw(&self, n: u64) -> u64 {
        self.with_rng(|r| r.below(n))
    }

    /// Yields 0–2 times, so another task may run between any two port calls.
    pub async fn jitter(&self) {
        for _ in 0..self.draw(3) {
            yield_now().await;
        }
    }
}

/// One actor's view of the shared [`MemoryStore`], through the chaos.
#[derive(Debug, Clone)]
pub struct Chaos {
    pub store: MemoryStore,
    pub actor: Arc<str>,
    pub faults: Faults,
    pub trace: Trace,
}

impl Chaos {
    fn error(&self, op: &str, key: &str, when: &str) -> StoreError {
        self.trace
            .fault(format!("{} {op}({key}) fails {when}", self.actor));
        let message = format!("injected {op} failure {when} the store call");
        if self.faults.draw(2) == 0 {
            StoreError::Unavailable(message)
        } else {
            StoreError::Backend(message)
        }
    }

    async fn before(&self, op: &str, key: &str) -> Result<(), StoreError> {
        self.faults.jitter().await;
        if self.faults.strike() {
            return Err(self.error(op, key, "before"));
        }
        Ok(())
    }

    async fn after<T>(
        &self,
        op: &str,
        key: &str,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.faults.jitter().await;
        if result.is_ok() && self.faults.strike() {
            return Err(self.error(op, key, "after"));
        }
        result
    }
}

#[async_trait::async_trait]
impl RunStore for Chaos {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        let key = new.run_id.clone();
        self.before("create_or_resume", &key).await?;
        let r = self.store.create_or_resume(new).await;
        self.after("create_or_resume", &key, r).await
    }

    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.before("update", run_id).await?;
        let what = format!("{patch:?}");
        let r = self.store.update(run_id, patch).await;
        self.trace
            .event(format!("{} update {run_id}: {what}", self.actor));
        self.after("update", run_id, r).await
    }

    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        self.before("update_fenced", run_id).await?;
        let what = format!("{patch:?}");
        let r = self.store.update_fenced(run_id, held_epoch, patch).await;
        match &r {
            Ok(Fenced::Written(true)) => {
                self.trace.event(format!(
                    "{} update {run_id} at epoch {held_epoch}: {what}",
                    self.actor
                ));
                self.trace
                    .landed(run_id, held_epoch, "fenced update", &self.actor);
            }
            Ok(Fenced::Superseded { observed }) => self.trace.event(format!(
                "{} update of {run_id} at epoch {held_epoch} fenced out by {observed}",
                self.actor
            )),
            _ => {}
        }
        self.after("update_fenced", run_id, r).await
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.before("get", run_id).await?;
        let r = RunStore::get(&self.store, run_id).await;
        self.after("get", run_id, r).await
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.before("find_active_run", thread_id).await?;
        let r = self.store.find_active_run(thread_id).await;
        self.after("find_active_run", thread_id, r).await
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.before("list_by_thread", thread_id).await?;
        let r = self.store.list_by_thread(thread_id).await;
        self.after("list_by_thread", thread_id, r).await
    }

    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.before("live_runs_for_sandbox", sandbox_key).await?;
        let r = self.store.live_runs_for_sandbox(sandbox_key, limit).await;
        self.after("live_runs_for_sandbox", sandbox_key, r).await
    }

    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.before("list_reclaimable", "*").await?;
        let r = self.store.list_reclaimable(now, ttl_ms).await;
        self.after("list_reclaimable", "*", r).await
    }

    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        self.before("list_reclaimable_page", "*").await?;
        let r = self.store.list_reclaimable_page(query).await;
        self.after("list_reclaimable_page", "*", r).await
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        self.before("count_reclaimable", "*").await?;
        let r = self
            .store
            .count_reclaimable(detached_after, detached_until, at_most)
            .await;
        self.after("count_reclaimable", "*", r).await
    }

    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.before("bump_epoch", run_id).await?;
        let r = self.store.bump_epoch(run_id).await;
        if let Ok(EpochBump::Claimed { epoch, .. }) = &r {
            self.trace
                .event(format!("{} claims {run_id} at epoch {epoch}", self.actor));
        }
        self.after("bump_epoch", run_id, r).await
    }

    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.before("write_terminal", run_id).await?;
        let r = self.store.write_terminal(run_id, held_epoch, write).await;
        match &r {
            Ok(Fenced::Written(true)) => {
                self.trace.event(format!(
                    "{} writes {run_id} {:?} at epoch {held_epoch}",
                    self.actor, write.status
                ));
                self.trace
                    .landed(run_id, held_epoch, "terminal write", &self.actor);
            }
            Ok(Fenced::Superseded { observed }) => self.trace.event(format!(
                "{} terminal write for {run_id} at epoch {held_epoch} fenced out by {observed}",
                self.actor
            )),
            _ => {}
        }
        self.after("write_terminal", run_id, r).await
    }
}

#[async_trait::async_trait]
impl DeliveryLog for Chaos {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        self.before("append", run_id).await?;
        let appended = chunks.len();
        let r = self.store.append(run_id, fence, chunks, now).await;
        if let Ok(Fenced::Written(Appended::At { first })) = &r {
            self.trace.event(format!(
                "{} appends {} chunk(s) to {run_id} at {first} (fence {fence:?})",
                self.actor, appended
            ));
            match fence {
                Some(epoch) => self.trace.landed(run_id, epoch, "append", &self.actor),
                None => self.trace.violate(
                    "unfenced-append",
                    format!("{} appended to {run_id} without a fence", self.actor),
                ),
            }
        }
        self.after("append", run_id, r).await
    }

    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        self.before("close", run_id).await?;
        let r = self.store.close(run_id, fence, now).await;
        match (&r, fence) {
            (Ok(Fenced::Written(())), Some(epoch)) => {
                self.trace.event(format!(
                    "{} closes the log of {run_id} at epoch {epoch}",
                    self.actor
                ));
                self.trace.landed(run_id, epoch, "close", &self.actor);
            }
            (Ok(Fenced::Superseded { observed }), _) => self.trace.event(format!(
                "{} close of {run_id} at {fence:?} fenced out by {observed}",
                self.actor
            )),
            _ => {}
        }
        self.after("close", run_id, r).await
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        self.before("snapshot", run_id).await?;
        let r = self.store.snapshot(run_id).await;
        self.after("snapshot", run_id, r).await
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.before("read", run_id).await?;
        let r = self.store.read(run_id, from, limit).await;
        self.after("read", run_id, r).await
    }
}

#[async_trait::async_trait]
impl LeaseStore for Chaos {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        self.before("acquire", key).await?;
        let r = self.store.acquire(key, owner, now, ttl_ms).await;
        if let Ok(LeaseGrant::Acquired(lease)) = &r {
            self.trace.lease_granted(key, owner, &lease.token);
            self.trace.event(format!(
                "{owner} takes lease {key} until {}",
                lease.expires_at
            ));
        }
        self.after("acquire", key, r).await
    }

    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        self.before("renew", &lease.key).await?;
        let r = self.store.renew(lease, now, ttl_ms).await;
        if let Ok(None) = &r {
            self.trace
                .event(format!("{} lost lease {}", lease.owner, lease.key));
        }
        self.after("renew", &lease.key, r).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.before("release", &lease.key).await?;
        let r = self.store.release(lease).await;
        if r.is_ok() {
            self.trace.lease_released(&lease.key, &lease.token);
        }
        self.after("release", &lease.key, r).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.before("note", key).await?;
        let r = self.store.note(key).await;
        self.after("note", key, r).await
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        self.before("set_note", &lease.key).await?;
        let r = self.store.set_note(lease, note).await;
        self.after("set_note", &lease.key, r).await
    }
}

#[async_trait::async_trait]
impl SandboxInstanceStore for Chaos {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        self.before("instance get", key).await?;
        let r = SandboxInstanceStore::get(&self.store, key).await;
        self.after("instance get", key, r).await
    }

    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError> {
        let key = record.key.clone();
        self.before("instance upsert", &key).await?;
        let r = self.store.upsert(record).await;
        self.after("instance upsert", &key, r).await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.before("instance delete", key).await?;
        let r = self.store.delete(key).await;
        self.trace
            .event(format!("{} deletes instance {key}", self.actor));
        self.after("instance delete", key, r).await
    }
}

#[async_trait::async_trait]
impl MessageStore for Chaos {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        let run_id = transcript.run_id.as_str();
        self.before("save_transcript", run_id).await?;
        let r = self.store.save_transcript(transcript, fence).await;
        match &r {
            Ok(Fenced::Written(())) => {
                self.trace.event(format!(
                    "{} saves the transcript of {run_id} (fence {fence:?})",
                    self.actor
                ));
                if let Some(epoch) = fence {
                    self.trace
                        .landed(run_id, epoch, "transcript save", &self.actor);
                }
            }
            Ok(Fenced::Superseded { observed }) => self.trace.event(format!(
                "{} transcript save of {run_id} at {fence:?} fenced out by {observed}",
                self.actor
            )),
            Err(_) => {}
        }
        self.after("save_transcript", run_id, r).await
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        self.before("get_transcript", run_id).await?;
        let r = self.store.get_transcript(run_id).await;
        self.after("get_transcript", run_id, r).await
    }
}

#[async_trait::async_trait]
impl ReclaimLedger for Chaos {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.before("record_intent", &intent.run_id).await?;
        let r = self.store.record_intent(intent).await;
        self.after("record_intent", &intent.run_id, r).await
    }

    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.before("update_intent", &intent.run_id).await?;
        let r = self.store.update_intent(intent).await;
        self.trace.event(format!(
            "{} reschedules the intent of {} (attempts {}): {:?}",
            self.actor, intent.run_id, intent.attempts, r
        ));
        self.after("update_intent", &intent.run_id, r).await
    }

    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        self.before("resolve_intent", run_id).await?;
        let r = self.store.resolve_intent(run_id).await;
        self.trace
            .event(format!("{} resolves the intent of {run_id}", self.actor));
        self.after("resolve_intent", run_id, r).await
    }

    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        self.before("get_intent", run_id).await?;
        let r = self.store.get_intent(run_id).await;
        self.after("get_intent", run_id, r).await
    }

    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        self.before("due_intents", "*").await?;
        let r = self.store.due_intents(now, limit).await;
        self.after("due_intents", "*", r).await
    }

    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        self.before("ledger_counts", "*").await?;
        let r = self.store.ledger_counts().await;
        self.after("ledger_counts", "*", r).await
    }
}
