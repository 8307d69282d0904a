//! Fault-injecting fakes for the sweep's tests: a store that records every call and fails the
//! ones you choose, leases that are handed out already lost or lost later, scripted probes,
//! drives and reclaimers, a provider whose destroy rejects, virtual time, and a log capture.
//!
//! These are fakes for fault injection only; the real backends run the conformance suites.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::stream;
use reaper_core::domain::{
    Chunk, EpochMs, LedgerCounts, LogEntry, LogSnapshot, NewRun, ReclaimIntent, RunPatch,
    RunRecord, TerminalWrite,
};
use reaper_core::error::{DriveError, ProbeError, ReclaimError, SandboxError, StoreError};
use reaper_core::memory::MemoryStore;
use reaper_core::ports::{
    Appended, CancellationToken, ChunkStream, Clock, DeliveryLog, Drive, DriveRequest, EpochBump,
    ExitProbe, Fenced, Lease, LeaseGrant, LeaseStore, Reclaim, ReclaimLedger, Reclaimed,
    RunExitProbe, RunStore, SandboxHandle, SandboxProvider, Sleeper,
};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Virtual time

/// A clock on tokio's (pausable) time: `base` plus the time elapsed since creation. Under
/// `#[tokio::test(start_paused = true)]` time only moves when every task is waiting, so sleeps
/// cost nothing and ordering is deterministic.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base: EpochMs,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock showing `base` now.
    pub fn new(base: EpochMs) -> Self {
        TokioClock {
            base,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> EpochMs {
        self.base + self.start.elapsed().as_millis() as EpochMs
    }
}

/// Sleeps on tokio's (pausable) time.
#[derive(Debug, Clone, Default)]
pub struct TokioSleeper;

#[async_trait::async_trait]
impl Sleeper for TokioSleeper {
    async fn sleep(&self, ms: u64) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// A spying, fault-injecting store

/// One store call, as the spy saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `create_or_resume` of a run.
    CreateOrResume(String),
    /// `update` of a run with a patch.
    Update(String, RunPatch),
    /// `get` of a run.
    Get(String),
    /// `find_active_run` of a thread.
    FindActive(String),
    /// `list_reclaimable`.
    ListReclaimable,
    /// `bump_epoch` of a run.
    BumpEpoch(String),
    /// `write_terminal` of a run at a held epoch.
    WriteTerminal(String, u64),
    /// `append` of this many chunks to a run's log.
    Append(String, usize),
    /// `close` of a run's log.
    Close(String),
    /// `snapshot` of a run's log.
    Snapshot(String),
    /// `read` of a run's log.
    Read(String),
    /// `record_intent` for a run.
    RecordIntent(String),
    /// `update_intent` for a run.
    UpdateIntent(String),
    /// `resolve_intent` for a run.
    ResolveIntent(String),
    /// `get_intent` for a run.
    GetIntent(String),
    /// `due_intents`.
    DueIntents,
    /// `ledger_counts`.
    LedgerCounts,
    /// A batch of history entries (their run ids): `record_history`, or a sweep's write of its
    /// entries and record on a spy that writes and prunes apart.
    RecordHistory(Vec<String>),
    /// `run_history` for a run.
    RunHistory(String),
    /// `prune_history`.
    PruneHistory,
    /// `write_sweep_history` (the entries' run ids) as one call, on a spy made with
    /// [`SpyStore::with_history_in_one_call`]; otherwise a sweep's write shows as
    /// [`Op::RecordHistory`] then [`Op::PruneHistory`].
    WriteSweepHistory(Vec<String>),
}

impl Op {
    /// The run the call was about, if any.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            Op::CreateOrResume(r)
            | Op::Update(r, _)
            | Op::Get(r)
            | Op::BumpEpoch(r)
            | Op::WriteTerminal(r, _)
            | Op::Append(r, _)
            | Op::Close(r)
            | Op::Snapshot(r)
            | Op::Read(r)
            | Op::RecordIntent(r)
            | Op::UpdateIntent(r)
            | Op::ResolveIntent(r)
            | Op::GetIntent(r)
            | Op::RunHistory(r) => Some(r),
            Op::FindActive(_)
            | Op::ListReclaimable
            | Op::DueIntents
            | Op::LedgerCounts
            | Op::RecordHistory(_)
            | Op::PruneHistory
            | Op::WriteSweepHistory(_) => None,
        }
    }

    /// A call that changes stored state.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::CreateOrResume(_)
                | Op::Update(..)
                | Op::BumpEpoch(_)
                | Op::WriteTerminal(..)
                | Op::Append(..)
                | Op::Close(_)
                | Op::RecordIntent(_)
                | Op::UpdateIntent(_)
                | Op::ResolveIntent(_)
                | Op::RecordHistory(_)
                | Op::PruneHistory
                | Op::WriteSweepHistory(_)
        )
    }
}

type FailFn = dyn Fn(&Op, usize) -> Option<StoreError> + Send + Sync;
type HookFn = dyn Fn(&Op) + Send + Sync;

/// Wraps a [`MemoryStore`] as a run store and delivery log, records every call, and fails the
/// calls a rule picks (by op and by call number).
#[derive(Clone)]
pub struct SpyStore {
    /// The store every call goes to.
    pub inner: MemoryStore,
    ops: Arc<Mutex<Vec<Op>>>,
    fail: Arc<Mutex<Option<Arc<FailFn>>>>,
    before: Arc<Mutex<Option<Arc<HookFn>>>>,
    growing: Arc<Mutex<HashMap<String, u64>>>,
    no_listing: bool,
    history_in_one_call: bool,
    appended_chunks: Arc<Mutex<HashMap<String, usize>>>,
    hidden: Arc<Mutex<HashSet<String>>>,
    corrupt: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for SpyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpyStore").finish_non_exhaustive()
    }
}

impl SpyStore {
    /// A spy over `inner`, failing nothing yet.
    pub fn new(inner: MemoryStore) -> Self {
        SpyStore {
            inner,
            ops: Default::default(),
            fail: Default::default(),
            before: Default::default(),
            growing: Default::default(),
            no_listing: false,
            history_in_one_call: false,
            appended_chunks: Default::default(),
            hidden: Default::default(),
            corrupt: Default::default(),
        }
    }

    /// A store that takes a sweep's whole end write in one call (`write_sweep_history`, as D1
    /// does in one batch) instead of writing and pruning apart.
    pub fn with_history_in_one_call(mut self) -> Self {
        self.history_in_one_call = true;
        self
    }

    /// A store without the optional `list_reclaimable` capability.
    pub fn without_listing(mut self) -> Self {
        self.no_listing = true;
        self
    }

    /// Fails every call for which `rule(op, call_number)` answers an error (call numbers count
    /// from 1 over all calls).
    pub fn fail_when(
        &self,
        rule: impl Fn(&Op, usize) -> Option<StoreError> + Send + Sync + 'static,
    ) {
        *lock(&self.fail) = Some(Arc::new(rule));
    }

    /// Runs `hook` before every call reaches the inner store.
    pub fn before_each(&self, hook: impl Fn(&Op) + Send + Sync + 'static) {
        *lock(&self.before) = Some(Arc::new(hook));
    }

    /// Adds a row the listing matches but cannot parse.
    pub fn inject_corrupt_row(&self, run_id: &str) {
        lock(&self.corrupt).push(run_id.to_string());
    }

    /// Makes `get` answer `None` for the run from now on, as if its row vanished.
    pub fn hide_on_get(&self, run_id: &str) {
        lock(&self.hidden).insert(run_id.to_string());
    }

    /// Makes the run's log snapshot grow by one on every call, so it never quiesces.
    pub fn grow_snapshot(&self, run_id: &str) {
        lock(&self.growing).insert(run_id.to_string(), 0);
    }

    /// Every call so far, in order.
    pub fn ops(&self) -> Vec<Op> {
        lock(&self.ops).clone()
    }

    /// Forgets the calls recorded so far.
    pub fn clear_ops(&self) {
        lock(&self.ops).clear();
    }

    /// The calls about one run.
    pub fn ops_for(&self, run_id: &str) -> Vec<Op> {
        self.ops()
            .into_iter()
            .filter(|o| o.run_id() == Some(run_id))
            .collect()
    }

    /// The writes about one run.
    pub fn writes_for(&self, run_id: &str) -> Vec<Op> {
        self.ops_for(run_id)
            .into_iter()
            .filter(Op::is_write)
            .collect()
    }

    /// Chunks that landed in the run's log through this spy.
    pub fn appended(&self, run_id: &str) -> usize {
        lock(&self.appended_chunks)
            .get(run_id)
            .copied()
            .unwrap_or(0)
    }

    /// How many times the run's log was closed.
    pub fn closes(&self, run_id: &str) -> usize {
        self.ops_for(run_id)
            .iter()
            .filter(|o| matches!(o, Op::Close(_)))
            .count()
    }

    /// The chunks in the run's log.
    pub async fn log_entries(&self, run_id: &str) -> Vec<Chunk> {
        DeliveryLog::read(&self.inner, run_id, 0, usize::MAX)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.chunk)
            .collect()
    }

    /// The run's record, if any.
    pub async fn record(&self, run_id: &str) -> Option<RunRecord> {
        RunStore::get(&self.inner, run_id).await.unwrap()
    }

    fn enter(&self, op: Op) -> Result<(), StoreError> {
        let hook = lock(&self.before).clone();
        if let Some(hook) = hook {
            hook(&op);
        }
        let n = {
            let mut ops = lock(&self.ops);
            ops.push(op.clone());
            ops.len()
        };
        let rule = lock(&self.fail).clone();
        match rule.and_then(|r| r(&op, n)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl RunStore for SpyStore {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.enter(Op::CreateOrResume(new.run_id.clone()))?;
        self.inner.create_or_resume(new).await
    }
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.enter(Op::Update(run_id.into(), patch.clone()))?;
        self.inner.update(run_id, patch).await
    }
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        // Recorded as an update: what it writes is the same patch.
        self.enter(Op::Update(run_id.into(), patch.clone()))?;
        self.inner.update_fenced(run_id, held_epoch, patch).await
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.enter(Op::Get(run_id.into()))?;
        if lock(&self.hidden).contains(run_id) {
            return Ok(None);
        }
        RunStore::get(&self.inner, run_id).await
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.enter(Op::FindActive(thread_id.into()))?;
        self.inner.find_active_run(thread_id).await
    }
    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.live_runs_for_sandbox(sandbox_key, limit).await
    }
    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.enter(Op::ListReclaimable)?;
        self.inner.list_reclaimable(now, ttl_ms).await
    }
    /// The inner store's page, with the planted corrupt rows reported on the first page of each
    /// range (where a store reports rows it could not place).
    async fn list_reclaimable_page(
        &self,
        query: reaper_core::ReclaimableQuery,
    ) -> Result<reaper_core::ReclaimablePage, StoreError> {
        self.enter(Op::ListReclaimable)?;
        if self.no_listing {
            return Err(StoreError::Unsupported("list_reclaimable"));
        }
        let first = query.after.is_none();
        let mut page = self.inner.list_reclaimable_page(query).await?;
        if first {
            page.corrupt
                .extend(lock(&self.corrupt).iter().map(|key| StoreError::Corrupt {
                    key: key.clone(),
                    reason: "unknown status \"RUNNING\"".into(),
                }));
        }
        Ok(page)
    }
    /// The inner store's count plus the planted corrupt rows (a store counts rows it cannot
    /// parse too).
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<reaper_core::BoundedCount, StoreError> {
        self.enter(Op::ListReclaimable)?;
        let inner = self
            .inner
            .count_reclaimable(detached_after, detached_until, at_most)
            .await?;
        let planted = lock(&self.corrupt).len() as u64;
        let counted = reaper_core::BoundedCount::of(inner.count + planted, at_most);
        Ok(reaper_core::BoundedCount {
            exact: inner.exact && counted.exact,
            ..counted
        })
    }
    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.enter(Op::RecordHistory(
            entries.iter().map(|e| e.run_id.clone()).collect(),
        ))?;
        self.inner.record_history(entries).await
    }
    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        self.enter(Op::RunHistory(run_id.into()))?;
        self.inner.run_history(run_id, limit).await
    }
    async fn prune_history(&self, before: EpochMs, max_entries: usize) -> Result<u64, StoreError> {
        self.enter(Op::PruneHistory)?;
        self.inner.prune_history(before, max_entries).await
    }
    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        self.inner.recent_sweeps(limit).await
    }
    /// Made with [`SpyStore::with_history_in_one_call`]: one call ([`Op::WriteSweepHistory`])
    /// that one fault fails whole, as D1's batch. Otherwise the write and the prune go apart,
    /// as a store without one transaction sends them: the entries with the sweep's record
    /// ([`Op::RecordHistory`], one fault fails both), then the prune ([`Op::PruneHistory`]),
    /// each part's failure reported beside what the other did.
    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        let runs = || history.entries.iter().map(|e| e.run_id.clone()).collect();
        if self.history_in_one_call {
            self.enter(Op::WriteSweepHistory(runs()))?;
            return self.inner.write_sweep_history(history).await;
        }
        let mut done = match self.enter(Op::RecordHistory(runs())) {
            // The inner store's write without its history prune (a batch of none).
            Ok(()) => {
                let write = reaper_core::history::SweepHistory {
                    prune_max: 0,
                    ..history.clone()
                };
                self.inner.write_sweep_history(&write).await?
            }
            Err(error) => reaper_core::history::SweepWritten::failed(error),
        };
        match self.enter(Op::PruneHistory) {
            Ok(()) => {
                done.pruned = self
                    .inner
                    .prune_history(history.prune_before, history.prune_max)
                    .await?
            }
            Err(error) => done.prune_error = Some(error),
        }
        Ok(done)
    }
    fn capabilities(&self) -> reaper_core::ports::RunStoreCapabilities {
        reaper_core::ports::RunStoreCapabilities {
            list_reclaimable: !self.no_listing,
            list_by_thread: true,
        }
    }
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.enter(Op::BumpEpoch(run_id.into()))?;
        self.inner.bump_epoch(run_id).await
    }
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.enter(Op::WriteTerminal(run_id.into(), held_epoch))?;
        self.inner.write_terminal(run_id, held_epoch, write).await
    }
}

#[async_trait::async_trait]
impl ReclaimLedger for SpyStore {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.enter(Op::RecordIntent(intent.run_id.clone()))?;
        self.inner.record_intent(intent).await
    }
    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        self.enter(Op::UpdateIntent(intent.run_id.clone()))?;
        self.inner.update_intent(intent).await
    }
    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        self.enter(Op::ResolveIntent(run_id.into()))?;
        self.inner.resolve_intent(run_id).await
    }
    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        self.enter(Op::GetIntent(run_id.into()))?;
        self.inner.get_intent(run_id).await
    }
    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        self.enter(Op::DueIntents)?;
        self.inner.due_intents(now, limit).await
    }
    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        self.enter(Op::LedgerCounts)?;
        self.inner.ledger_counts().await
    }
}

#[async_trait::async_trait]
impl DeliveryLog for SpyStore {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        let n = chunks.len();
        self.enter(Op::Append(run_id.into(), n))?;
        let result = self.inner.append(run_id, fence, chunks, now).await?;
        if let Fenced::Written(Appended::At { .. }) = result {
            *lock(&self.appended_chunks)
                .entry(run_id.to_string())
                .or_default() += n;
        }
        Ok(result)
    }
    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        self.enter(Op::Close(run_id.into()))?;
        self.inner.close(run_id, fence, now).await
    }
    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        self.enter(Op::Snapshot(run_id.into()))?;
        if let Some(n) = lock(&self.growing).get_mut(run_id) {
            *n += 1;
            return Ok(LogSnapshot {
                len: *n,
                last_append_at: None,
                closed: false,
            });
        }
        self.inner.snapshot(run_id).await
    }
    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        self.enter(Op::Read(run_id.into()))?;
        DeliveryLog::read(&self.inner, run_id, from, limit).await
    }
}

// ---------------------------------------------------------------------------------------------
// Leases that are lost

/// Leases over a [`MemoryStore`] with faults: a run's claim can be handed out already lost
/// (expired on arrival) or lost at its first renewal; acquisition can run a hook (for example a
/// viewer coming back at the moment the claim is taken) or be refused as held elsewhere.
#[derive(Clone, Default)]
pub struct FaultyLeases {
    /// The store holding the leases.
    pub inner: MemoryStore,
    lost_on_arrival: Arc<Mutex<HashSet<String>>>,
    lost_on_renew: Arc<Mutex<HashSet<String>>>,
    held_elsewhere: Arc<Mutex<HashSet<String>>>,
    on_acquire: Arc<Mutex<Option<Arc<HookKey>>>>,
    acquired: Arc<Mutex<Vec<String>>>,
    released: Arc<Mutex<Vec<String>>>,
    acquire_delay_ms: Arc<Mutex<u64>>,
}

type HookKey = dyn Fn(&str) + Send + Sync;

impl std::fmt::Debug for FaultyLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyLeases").finish_non_exhaustive()
    }
}

impl FaultyLeases {
    /// Leases over `inner`, with no faults yet.
    pub fn new(inner: MemoryStore) -> Self {
        FaultyLeases {
            inner,
            ..Default::default()
        }
    }
    /// The lease for `key` is expired when handed out.
    pub fn lose_on_arrival(&self, key: &str) {
        lock(&self.lost_on_arrival).insert(key.into());
    }
    /// The lease for `key` is gone at its first renewal.
    pub fn lose_on_renew(&self, key: &str) {
        lock(&self.lost_on_renew).insert(key.into());
    }
    /// `key` is held by another owner.
    pub fn hold_elsewhere(&self, key: &str) {
        lock(&self.held_elsewhere).insert(key.into());
    }
    /// Every acquisition waits this long (virtual time) before it is answered, like a lock that
    /// queues behind another holder.
    pub fn delay_acquire(&self, ms: u64) {
        *lock(&self.acquire_delay_ms) = ms;
    }
    /// Runs `hook` with the key on every acquisition.
    pub fn on_acquire(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        *lock(&self.on_acquire) = Some(Arc::new(hook));
    }
    /// The keys acquired, in order.
    pub fn acquired(&self) -> Vec<String> {
        lock(&self.acquired).clone()
    }
    /// The keys released, in order.
    pub fn released(&self) -> Vec<String> {
        lock(&self.released).clone()
    }
}

#[async_trait::async_trait]
impl LeaseStore for FaultyLeases {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        if lock(&self.held_elsewhere).contains(key) {
            return Ok(LeaseGrant::Held {
                owner: "another-host".into(),
                expires_at: now + 60_000,
            });
        }
        let delay = *lock(&self.acquire_delay_ms);
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        let hook = lock(&self.on_acquire).clone();
        if let Some(hook) = hook {
            hook(key);
        }
        lock(&self.acquired).push(key.to_string());
        let grant = self.inner.acquire(key, owner, now, ttl_ms).await?;
        match grant {
            LeaseGrant::Acquired(mut lease) if lock(&self.lost_on_arrival).contains(key) => {
                lease.expires_at = now;
                Ok(LeaseGrant::Acquired(lease))
            }
            other => Ok(other),
        }
    }
    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        if lock(&self.lost_on_renew).contains(&lease.key) {
            return Ok(None);
        }
        self.inner.renew(lease, now, ttl_ms).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        lock(&self.released).push(lease.key.clone());
        self.inner.release(lease).await
    }
    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.inner.note(key).await
    }
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        if lock(&self.lost_on_renew).contains(&lease.key) {
            // A grant this fake reports lost must not write as if it still held the key.
            return Ok(false);
        }
        self.inner.set_note(lease, note).await
    }
}

// ---------------------------------------------------------------------------------------------
// Scripted probe, drive and reclaim

/// Answers per run; `producing` for any run not scripted. Counts calls.
#[derive(Debug, Clone, Default)]
pub struct ScriptedProbe {
    answers: Arc<Mutex<HashMap<String, Result<RunExitProbe, String>>>>,
    calls: Arc<Mutex<Vec<String>>>,
}

impl ScriptedProbe {
    /// A probe with no answers yet (unscripted runs are `Producing`).
    pub fn new() -> Self {
        Self::default()
    }
    /// Answers `probe` for the run.
    pub fn answer(&self, run_id: &str, probe: RunExitProbe) -> &Self {
        lock(&self.answers).insert(run_id.into(), Ok(probe));
        self
    }
    /// Answers `Finished` with `exit_code` for the run.
    pub fn finished(&self, run_id: &str, exit_code: i64) -> &Self {
        self.answer(run_id, RunExitProbe::Finished { exit_code })
    }
    /// The probe itself fails for this run.
    pub fn fail(&self, run_id: &str, message: &str) -> &Self {
        lock(&self.answers).insert(run_id.into(), Err(message.into()));
        self
    }
    /// The runs probed, in order.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }
}

#[async_trait::async_trait]
impl ExitProbe for ScriptedProbe {
    async fn has_finished(&self, record: &RunRecord) -> Result<RunExitProbe, ProbeError> {
        lock(&self.calls).push(record.run_id.clone());
        match lock(&self.answers).get(&record.run_id) {
            Some(Ok(p)) => Ok(p.clone()),
            Some(Err(m)) => Err(ProbeError(m.clone())),
            None => Ok(RunExitProbe::Producing),
        }
    }
}

/// What a scripted drive does for a run.
#[derive(Debug, Clone)]
pub enum DriveScript {
    /// Yields these chunks (stopping early if the signal fires), then ends.
    Chunks(Vec<Chunk>),
    /// Yields one chunk, then waits for the signal and ends normally (what `chat()` does).
    UntilAborted,
    /// Yields one chunk every `ms` of (virtual) time, ignoring the signal, forever.
    IgnoresAbort {
        /// Time between chunks.
        every_ms: u64,
    },
    /// Yields the chunks, then fails with the error.
    Throws(Vec<Chunk>, DriveError),
    /// `drive` itself fails before producing a stream.
    SyncError(DriveError),
}

/// A drive that follows a script per run; two text chunks (`hello `, `world`) by default.
/// Records which runs it drove and whether their signal was already cancelled.
#[derive(Clone)]
pub struct ScriptedDrive {
    scripts: Arc<Mutex<HashMap<String, DriveScript>>>,
    calls: Arc<Mutex<Vec<(String, bool)>>>,
    sleeper: Arc<dyn Sleeper>,
}

impl std::fmt::Debug for ScriptedDrive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedDrive").finish_non_exhaustive()
    }
}

impl ScriptedDrive {
    /// A drive waiting on `sleeper`, with no scripts yet.
    pub fn new(sleeper: Arc<dyn Sleeper>) -> Self {
        ScriptedDrive {
            scripts: Default::default(),
            calls: Default::default(),
            sleeper,
        }
    }
    /// Follows `script` for the run.
    pub fn script(&self, run_id: &str, script: DriveScript) -> &Self {
        lock(&self.scripts).insert(run_id.into(), script);
        self
    }
    /// Runs driven, in order.
    pub fn driven(&self) -> Vec<String> {
        lock(&self.calls).iter().map(|(r, _)| r.clone()).collect()
    }
    /// Whether the run's signal was already cancelled when its drive started.
    pub fn signal_was_cancelled(&self, run_id: &str) -> Option<bool> {
        lock(&self.calls)
            .iter()
            .find(|(r, _)| r == run_id)
            .map(|(_, c)| *c)
    }
}

/// The chunks an unscripted run yields.
pub fn default_chunks() -> Vec<Chunk> {
    vec![Chunk::text("hello "), Chunk::text("world")]
}

impl Drive for ScriptedDrive {
    fn drive(
        &self,
        request: DriveRequest,
        signal: CancellationToken,
    ) -> Result<ChunkStream, DriveError> {
        lock(&self.calls).push((request.run_id.clone(), signal.is_cancelled()));
        let script = lock(&self.scripts)
            .get(&request.run_id)
            .cloned()
            .unwrap_or(DriveScript::Chunks(default_chunks()));
        let sleeper = self.sleeper.clone();
        Ok(match script {
            DriveScript::Chunks(chunks) => Box::pin(stream::unfold(
                (chunks.into_iter(), signal),
                |(mut it, signal)| async move {
                    if signal.is_cancelled() {
                        return None;
                    }
                    it.next().map(|c| (Ok(c), (it, signal)))
                },
            )),
            DriveScript::UntilAborted => {
                Box::pin(stream::unfold((0u32, signal), |(n, signal)| async move {
                    if n == 0 {
                        return Some((Ok(Chunk::text("working")), (1, signal)));
                    }
                    signal.cancelled().await;
                    None
                }))
            }
            DriveScript::IgnoresAbort { every_ms } => {
                Box::pin(stream::unfold(sleeper, move |sleeper| async move {
                    sleeper.sleep(every_ms).await;
                    Some((Ok(Chunk::text("more")), sleeper))
                }))
            }
            DriveScript::Throws(chunks, error) => {
                let items: Vec<Result<Chunk, DriveError>> = chunks
                    .into_iter()
                    .map(Ok)
                    .chain(std::iter::once(Err(error)))
                    .collect();
                Box::pin(stream::iter(items))
            }
            DriveScript::SyncError(error) => return Err(error),
        })
    }
}

/// Records the records it is asked to reclaim; fails for chosen runs.
#[derive(Debug, Clone, Default)]
pub struct RecordingReclaim {
    calls: Arc<Mutex<Vec<RunRecord>>>,
    failing: Arc<Mutex<HashSet<String>>>,
}

impl RecordingReclaim {
    /// A reclaim that succeeds for every run.
    pub fn new() -> Self {
        Self::default()
    }
    /// Fails the run's reclaims until told otherwise.
    pub fn fail_for(&self, run_id: &str) -> &Self {
        lock(&self.failing).insert(run_id.into());
        self
    }
    /// Stops failing for the run: its next reclaim succeeds.
    pub fn succeed_for(&self, run_id: &str) -> &Self {
        lock(&self.failing).remove(run_id);
        self
    }
    /// The runs reclaim was called for, in order.
    pub fn calls(&self) -> Vec<RunRecord> {
        lock(&self.calls).clone()
    }
    /// The runs reclaimed successfully.
    pub fn reclaimed(&self) -> Vec<String> {
        self.calls().into_iter().map(|r| r.run_id).collect()
    }
}

#[async_trait::async_trait]
impl Reclaim for RecordingReclaim {
    async fn reclaim(
        &self,
        record: &RunRecord,
        _intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError> {
        lock(&self.calls).push(record.clone());
        if lock(&self.failing).contains(&record.run_id) {
            return Err(ReclaimError::Other(format!(
                "reclaim refused for {}",
                record.run_id
            )));
        }
        Ok(Reclaimed::Destroyed)
    }
}

/// A run store counting every call it forwards (a backend statement or request each): for
/// "requests per sweep" figures, whatever the store behind it.
#[derive(Debug)]
pub struct CountingRuns<S> {
    inner: S,
    calls: std::sync::atomic::AtomicUsize,
}

impl<S> CountingRuns<S> {
    /// Counts the calls to `inner`.
    pub fn new(inner: S) -> Self {
        CountingRuns {
            inner,
            calls: Default::default(),
        }
    }
    /// The calls since the last `take`, and starts counting again from zero.
    pub fn take(&self) -> usize {
        self.calls.swap(0, std::sync::atomic::Ordering::SeqCst)
    }
    fn count(&self) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl<S: RunStore> RunStore for CountingRuns<S> {
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        self.count();
        self.inner.create_or_resume(new).await
    }
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.count();
        self.inner.update(run_id, patch).await
    }
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        self.count();
        self.inner.update_fenced(run_id, held_epoch, patch).await
    }
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.count();
        self.inner.get(run_id).await
    }
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        self.count();
        self.inner.find_active_run(thread_id).await
    }
    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        self.count();
        self.inner.list_by_thread(thread_id).await
    }
    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.count();
        self.inner.live_runs_for_sandbox(sandbox_key, limit).await
    }
    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.count();
        self.inner.list_reclaimable(now, ttl_ms).await
    }
    async fn list_reclaimable_listing(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<reaper_core::ReclaimableListing, StoreError> {
        self.count();
        self.inner.list_reclaimable_listing(now, ttl_ms).await
    }
    async fn list_reclaimable_page(
        &self,
        query: reaper_core::ReclaimableQuery,
    ) -> Result<reaper_core::ReclaimablePage, StoreError> {
        self.count();
        self.inner.list_reclaimable_page(query).await
    }
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<reaper_core::BoundedCount, StoreError> {
        self.count();
        self.inner
            .count_reclaimable(detached_after, detached_until, at_most)
            .await
    }
    async fn record_history(
        &self,
        entries: &[reaper_core::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        self.count();
        self.inner.record_history(entries).await
    }
    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<reaper_core::history::HistoryEntry>, StoreError> {
        self.count();
        self.inner.run_history(run_id, limit).await
    }
    async fn prune_history(&self, before: EpochMs, max_entries: usize) -> Result<u64, StoreError> {
        self.count();
        self.inner.prune_history(before, max_entries).await
    }
    async fn recent_sweeps(
        &self,
        limit: usize,
    ) -> Result<Vec<reaper_core::sweeps::SweepRecord>, StoreError> {
        self.count();
        self.inner.recent_sweeps(limit).await
    }
    async fn write_sweep_history(
        &self,
        history: &reaper_core::history::SweepHistory,
    ) -> Result<reaper_core::history::SweepWritten, StoreError> {
        self.count();
        self.inner.write_sweep_history(history).await
    }
    fn capabilities(&self) -> reaper_core::ports::RunStoreCapabilities {
        self.inner.capabilities()
    }
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        self.count();
        self.inner.bump_epoch(run_id).await
    }
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.count();
        self.inner.write_terminal(run_id, held_epoch, write).await
    }
}

/// A provider whose `destroy` rejects for chosen sandbox ids; records destroy calls. It has no
/// live sandboxes (`resume` answers `None`).
#[derive(Debug, Clone)]
pub struct FakeProvider {
    name: String,
    failing: Arc<Mutex<HashSet<String>>>,
    destroyed: Arc<Mutex<Vec<String>>>,
}

impl FakeProvider {
    /// A provider called `name` whose destroys all succeed so far.
    pub fn new(name: &str) -> Self {
        FakeProvider {
            name: name.into(),
            failing: Default::default(),
            destroyed: Default::default(),
        }
    }
    /// Fails every destroy of `id`.
    pub fn fail_destroy(&self, id: &str) -> &Self {
        lock(&self.failing).insert(id.into());
        self
    }
    /// Every destroy call, in order (including failed ones).
    pub fn destroy_calls(&self) -> Vec<String> {
        lock(&self.destroyed).clone()
    }
}

#[async_trait::async_trait]
impl SandboxProvider for FakeProvider {
    fn name(&self) -> &str {
        &self.name
    }
    async fn resume(&self, _id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        Ok(None)
    }
    async fn destroy(&self, id: &str) -> Result<(), SandboxError> {
        lock(&self.destroyed).push(id.into());
        if lock(&self.failing).contains(id) {
            return Err(SandboxError::Other(format!("destroy of {id} rejected")));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Log capture

/// One captured tracing event.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The event's level.
    pub level: tracing::Level,
    /// Its message.
    pub message: String,
    /// Its other fields, formatted.
    pub fields: String,
}

/// Captures tracing events emitted on this thread while the guard lives.
///
/// One process-wide subscriber (installed on first use) forwards each event to the capture of the
/// thread that emitted it. A per-thread `set_default` subscriber would race with tracing's global
/// per-callsite interest cache when tests run in parallel, and silently miss events.
#[derive(Debug, Clone, Default)]
pub struct LogCapture {
    events: Arc<Mutex<Vec<Captured>>>,
}

thread_local! {
    static CURRENT: std::cell::RefCell<Option<LogCapture>> = const { std::cell::RefCell::new(None) };
}

/// Stops capturing on this thread when dropped.
#[derive(Debug)]
pub struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

impl LogCapture {
    /// Starts capturing this thread's events (tokio's current-thread test runtime runs on it).
    pub fn install() -> (Self, CaptureGuard) {
        use tracing_subscriber::layer::SubscriberExt;
        static INIT: std::sync::Once = std::sync::Once::new();
        INIT.call_once(|| {
            let subscriber = tracing_subscriber::registry()
                .with(CaptureLayer)
                .with(tracing_subscriber::filter::LevelFilter::TRACE);
            // Another global subscriber already installed by the test binary wins; then only
            // its own output is seen, which a test asserting on logs will report.
            let _ = tracing::subscriber::set_global_default(subscriber);
        });
        let capture = LogCapture::default();
        CURRENT.with(|c| *c.borrow_mut() = Some(capture.clone()));
        (capture, CaptureGuard(()))
    }

    /// The events captured so far.
    pub fn events(&self) -> Vec<Captured> {
        lock(&self.events).clone()
    }

    /// How many events of `level` were captured.
    pub fn count(&self, level: tracing::Level) -> usize {
        self.events().iter().filter(|e| e.level == level).count()
    }

    /// Whether an event of `level` mentions `needle`.
    pub fn contains(&self, level: tracing::Level, needle: &str) -> bool {
        self.events()
            .iter()
            .any(|e| e.level == level && (e.message.contains(needle) || e.fields.contains(needle)))
    }

    /// Whether any event mentions `needle`.
    pub fn any(&self, needle: &str) -> bool {
        self.events()
            .iter()
            .any(|e| e.message.contains(needle) || e.fields.contains(needle))
    }
}

struct CaptureLayer;

struct Visitor<'a> {
    message: &'a mut String,
    fields: &'a mut String,
}

impl tracing::field::Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.message = format!("{value:?}");
        } else {
            self.fields
                .push_str(&format!("{}={:?} ", field.name(), value));
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            *self.message = value.to_string();
        } else {
            self.fields
                .push_str(&format!("{}={} ", field.name(), value));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CaptureLayer {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let Some(capture) = CURRENT.with(|c| c.borrow().clone()) else {
            return;
        };
        let mut message = String::new();
        let mut fields = String::new();
        event.record(&mut Visitor {
            message: &mut message,
            fields: &mut fields,
        });
        lock(&capture.events).push(Captured {
            level: *event.metadata().level(),
            message,
            fields,
        });
    }
}
