//! In-memory implementations of every store port, in one [`MemoryStore`] so a fenced append can
//! check the run's epoch in the same critical section (the atomicity the SQL and DynamoDB
//! backends get from a statement or a condition expression).
//!
//! Suitable as an embedded default for a single process and for tests; it passes the whole
//! conformance suite in `reaper-testkit`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::domain::{
    Chunk, EpochMs, LedgerCounts, LogEntry, LogSnapshot, NewRun, ReclaimIntent, RunPatch,
    RunRecord, SandboxInstanceRecord, TerminalWrite, Transcript,
};
use crate::error::StoreError;
use crate::history::{HistoryEntry, SweepHistory, SweepWritten, MAX_HISTORY_READ};
use crate::ports::{
    Appended, BoundedCount, DeliveryLog, EpochBump, Fenced, Lease, LeaseGrant, LeaseStore,
    MessageStore, ReclaimLedger, ReclaimableCursor, ReclaimablePage, ReclaimableQuery, RunStore,
    RunStoreCapabilities, SandboxInstanceStore,
};
use crate::sweeps::{SweepRecord, MAX_SWEEPS_KEPT, MAX_SWEEPS_READ, SWEEP_PRUNE_BATCH};

#[derive(Debug, Default)]
struct Log {
    entries: Vec<Chunk>,
    closed: bool,
    last_append_at: Option<EpochMs>,
}

/// A run id, allocated once and shared by the insertion order, the map and the keyset.
type Id = Arc<str>;

#[derive(Debug, Default)]
struct State {
    /// Insertion order is kept, as the reference's in-memory stores do.
    order: Vec<Id>,
    /// Shared records: a listing page hands them out without copying, and a change copies a
    /// record only while a page still holds it (`Arc::make_mut`).
    runs: HashMap<Id, Arc<RunRecord>>,
    /// The reclaimable listing's keyset, `(detachedSince, runId)` of every `running` detached
    /// run, kept in step with `runs`: a page is a range walk, not a scan and sort of every run.
    /// The same records as `runs`, shared: a page clones its records from the walk itself.
    listed: BTreeMap<(EpochMs, Id), Arc<RunRecord>>,
    logs: HashMap<String, Log>,
    leases: HashMap<String, Lease>,
    /// Beside the leases, not in them: a release removes the lease and keeps its note.
    lease_notes: HashMap<String, String>,
    lease_seq: u64,
    instances: HashMap<String, SandboxInstanceRecord>,
    transcripts: HashMap<String, Transcript>,
    intents: HashMap<String, ReclaimIntent>,
    /// Each run's history, oldest first (a memory store's histories are small; pruning walks
    /// them in memory, deleting at most its batch).
    history: HashMap<String, Vec<HistoryEntry>>,
    /// No history entry is older than this: a prune with nothing past its cutoff walks nothing.
    history_oldest: Option<EpochMs>,
    sweeps: SweepLog,
}

/// The sweep records, indexed so a sweep's end write costs O(log n) in the records kept (a
/// long-running process keeps a thousand; a scan of them per sweep cost more than the sweep).
#[derive(Debug, Default)]
struct SweepLog {
    /// Write order: the count cap drops the lowest.
    written: BTreeMap<u64, SweepRecord>,
    /// Each kept record's place in `written`.
    seq_of: HashMap<String, u64>,
    /// `(finishedAt, sweepId)` of every kept record: the retention prune's and the reads' order.
    finished: BTreeSet<(EpochMs, String)>,
    next_seq: u64,
}

impl SweepLog {
    fn remove(&mut self, sweep_id: &str) {
        if let Some(seq) = self.seq_of.remove(sweep_id) {
            if let Some(old) = self.written.remove(&seq) {
                self.finished.remove(&(old.finished_at, old.sweep_id));
            }
        }
    }

    /// Writes `sweep` (replacing one with its id, which then counts as written last), then
    /// deletes at most a batch of records finished before `prune_before`, oldest first, then
    /// the oldest written past the cap.
    fn write(&mut self, sweep: &SweepRecord, prune_before: EpochMs) {
        self.remove(&sweep.sweep_id);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.seq_of.insert(sweep.sweep_id.clone(), seq);
        self.finished
            .insert((sweep.finished_at, sweep.sweep_id.clone()));
        self.written.insert(seq, sweep.clone());
        let old: Vec<String> = self
            .finished
            .iter()
            .take_while(|(at, _)| *at < prune_before)
            .take(SWEEP_PRUNE_BATCH)
            .map(|(_, id)| id.clone())
            .collect();
        for id in &old {
            self.remove(id);
        }
        while self.written.len() as u64 > MAX_SWEEPS_KEPT {
            let Some((_, oldest)) = self.written.pop_first() else {
                break;
            };
            self.seq_of.remove(&oldest.sweep_id);
            self.finished.remove(&(oldest.finished_at, oldest.sweep_id));
        }
    }

    /// The newest `limit` by `(finishedAt, sweepId)`, newest first.
    fn recent(&self, limit: usize) -> Vec<SweepRecord> {
        self.finished
            .iter()
            .rev()
            .take(limit)
            .filter_map(|(_, id)| self.written.get(self.seq_of.get(id)?))
            .cloned()
            .collect()
    }
}

/// Every store port over one mutex-guarded map. Cheap to clone (shared state).
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl MemoryStore {
    /// Empty stores.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write here (every mutation
        // is a single assignment), so recovering the poisoned guard is sound.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Inserts or replaces a row as is: test and demo seeding, not a store operation.
    pub fn put_run(&self, record: RunRecord) {
        self.lock().put(record);
    }

    /// Every row, in insertion order.
    pub fn all_runs(&self) -> Vec<RunRecord> {
        let s = self.lock();
        s.order
            .iter()
            .filter_map(|id| s.runs.get(id).map(|r| RunRecord::clone(r)))
            .collect()
    }
}

/// A run's `detachedSince` in the listing's keyset, if it is listed.
fn listed_since(r: &RunRecord) -> Option<EpochMs> {
    r.detached_since
        .filter(|_| r.status == crate::RunStatus::Running)
}

/// The smallest keyset entry with `detachedSince` past `after` (exclusive); the range's
/// `admits` check stays the contract at the edges.
fn lowest_after(after: Option<EpochMs>) -> Option<(EpochMs, Id)> {
    after.map(|a| (a.saturating_add(1), Id::from("")))
}

impl State {
    /// Adds (or replaces, by key) history entries.
    fn record_history(&mut self, entries: &[HistoryEntry]) {
        for entry in entries {
            self.history_oldest = Some(self.history_oldest.map_or(entry.at, |at| at.min(entry.at)));
            let list = match self.history.get_mut(entry.run_id.as_str()) {
                Some(list) => list,
                None => self.history.entry(entry.run_id.clone()).or_default(),
            };
            // Kept sorted by (at, sweep) without re-sorting the run's whole history per entry;
            // an entry with the same key replaces the one there.
            match list.binary_search_by(|e| {
                (e.at, e.sweep_id.as_str()).cmp(&(entry.at, entry.sweep_id.as_str()))
            }) {
                Ok(i) => list[i] = entry.clone(),
                Err(i) => list.insert(i, entry.clone()),
            }
        }
    }

    /// Deletes at most `max_entries` entries made before `before`, oldest first.
    fn prune_history(&mut self, before: EpochMs, max_entries: usize) -> u64 {
        if self.history_oldest.is_none_or(|oldest| oldest >= before) {
            return 0;
        }
        let mut old: Vec<(EpochMs, String, String)> = self
            .history
            .values()
            .flatten()
            .filter(|e| e.at < before)
            .map(|e| (e.at, e.run_id.clone(), e.sweep_id.clone()))
            .collect();
        old.sort();
        old.truncate(max_entries);
        for (at, run_id, sweep_id) in &old {
            if let Some(list) = self.history.get_mut(run_id) {
                list.retain(|e| (e.at, &e.sweep_id) != (*at, sweep_id));
                if list.is_empty() {
                    self.history.remove(run_id);
                }
            }
        }
        self.history_oldest = self
            .history
            .values()
            .filter_map(|l| l.first())
            .map(|e| e.at)
            .min();
        old.len() as u64
    }

    /// Stores `record` (new or replacing), keeping the listing's keyset in step.
    fn put(&mut self, record: RunRecord) {
        let id = match self.runs.get_key_value(record.run_id.as_str()) {
            Some((id, old)) => {
                let id = Id::clone(id);
                if let Some(since) = listed_since(old) {
                    self.listed.remove(&(since, Id::clone(&id)));
                }
                id
            }
            None => {
                let id = Id::from(record.run_id.as_str());
                self.order.push(Id::clone(&id));
                id
            }
        };
        let record = Arc::new(record);
        if let Some(since) = listed_since(&record) {
            self.listed
                .insert((since, Id::clone(&id)), Arc::clone(&record));
        }
        self.runs.insert(id, record);
    }

    /// Changes a stored run in place, keeping the listing's keyset in step. `None`: no such run.
    fn change<T>(&mut self, run_id: &str, f: impl FnOnce(&mut RunRecord) -> T) -> Option<T> {
        let id = Id::clone(self.runs.get_key_value(run_id)?.0);
        let shared = self.runs.get_mut(run_id)?;
        // The keyset's share goes first, so the change copies the record only while a listing
        // page still holds it.
        if let Some(since) = listed_since(shared) {
            self.listed.remove(&(since, Id::clone(&id)));
        }
        let out = f(Arc::make_mut(shared));
        if let Some(since) = listed_since(shared) {
            self.listed.insert((since, id), Arc::clone(shared));
        }
        Some(out)
    }
}

fn epoch_of(s: &State, run_id: &str) -> Option<u64> {
    s.runs.get(run_id).and_then(|r| r.driver_epoch)
}

/// The run's epoch when a write fenced on `fence` must be refused: it is past the held one.
/// Unfenced writes, and runs without a record or an epoch, are never refused.
fn superseded(s: &State, run_id: &str, fence: Option<u64>) -> Option<u64> {
    let held = fence?;
    epoch_of(s, run_id).filter(|observed| *observed > held)
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl RunStore for MemoryStore {
    async fn record_history(&self, entries: &[HistoryEntry]) -> Result<(), StoreError> {
        self.lock().record_history(entries);
        Ok(())
    }

    async fn run_history(
        &self,
        run_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        let s = self.lock();
        let Some(list) = s.history.get(run_id) else {
            return Ok(Vec::new());
        };
        Ok(list
            .iter()
            .rev()
            .take(limit.min(MAX_HISTORY_READ))
            .cloned()
            .collect())
    }

    async fn prune_history(&self, before: EpochMs, max_entries: usize) -> Result<u64, StoreError> {
        Ok(self.lock().prune_history(before, max_entries))
    }

    /// Under one lock: no reader sees the entries without the record or before the prune.
    async fn write_sweep_history(
        &self,
        history: &SweepHistory,
    ) -> Result<SweepWritten, StoreError> {
        let mut s = self.lock();
        s.record_history(&history.entries);
        if let Some(sweep) = &history.record {
            s.sweeps.write(sweep, history.prune_before);
        }
        Ok(SweepWritten {
            recorded: history.entries.len(),
            sweep_recorded: history.record.is_some(),
            pruned: s.prune_history(history.prune_before, history.prune_max),
            ..SweepWritten::default()
        })
    }

    async fn recent_sweeps(&self, limit: usize) -> Result<Vec<SweepRecord>, StoreError> {
        let s = self.lock();
        Ok(s.sweeps.recent(limit.min(MAX_SWEEPS_READ)))
    }

    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError> {
        let mut s = self.lock();
        if let Some(existing) = s.runs.get(new.run_id.as_str()) {
            return Ok(RunRecord::clone(existing));
        }
        let mut record = RunRecord::new(new.run_id.clone(), new.thread_id, new.started_at);
        if let Some(status) = new.status {
            record.status = status;
        }
        s.put(record.clone());
        Ok(record)
    }

    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError> {
        self.lock().change(run_id, |r| r.apply(&patch));
        Ok(())
    }

    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self.lock().runs.get(run_id).map(|r| RunRecord::clone(r)))
    }

    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let s = self.lock();
        Ok(s.order
            .iter()
            .filter_map(|id| s.runs.get(id))
            .filter(|r| r.thread_id == thread_id && r.status == crate::RunStatus::Running)
            .max_by_key(|r| r.started_at)
            .map(|r| RunRecord::clone(r)))
    }

    async fn list_by_thread(&self, thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let s = self.lock();
        let mut rows: Vec<RunRecord> = s
            .order
            .iter()
            .filter_map(|id| s.runs.get(id))
            .filter(|r| r.thread_id == thread_id)
            .map(|r| RunRecord::clone(r))
            .collect();
        rows.sort_by_key(|r| r.started_at);
        Ok(rows)
    }

    async fn live_runs_for_sandbox(
        &self,
        sandbox_key: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let s = self.lock();
        Ok(s.order
            .iter()
            .filter_map(|id| s.runs.get(id))
            .filter(|r| !r.status.is_terminal() && r.sandbox_key.as_deref() == Some(sandbox_key))
            .take(limit)
            .map(|r| RunRecord::clone(r))
            .collect())
    }

    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let cutoff = now.saturating_sub(ttl_ms.min(i64::MAX as u64) as i64);
        let s = self.lock();
        Ok(s.order
            .iter()
            .filter_map(|id| s.runs.get(id))
            .filter(|r| {
                r.status == crate::RunStatus::Running
                    && r.detached_since.is_some_and(|d| d <= cutoff)
            })
            .map(|r| RunRecord::clone(r))
            .collect())
    }

    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError> {
        let s = self.lock();
        // A walk of the keyset from the range's start (or just past the cursor), in order.
        let cursor = query
            .after
            .as_ref()
            .map(|c| (c.detached_since, Id::from(c.run_id.as_str())));
        let start = match (cursor, lowest_after(query.detached_after)) {
            (Some(c), Some(low)) if c < low => Bound::Included(low),
            (Some(c), _) => Bound::Excluded(c),
            (None, Some(low)) => Bound::Included(low),
            (None, None) => Bound::Unbounded,
        };
        let runs: Vec<Arc<RunRecord>> = s
            .listed
            .range((start, Bound::Unbounded))
            .take_while(|((since, _), _)| *since <= query.detached_until)
            .map(|(_, r)| r)
            // The keyset holds exactly the running detached runs and the range starts past the
            // cursor: every record it walks is admitted, so none is read to check (at 1M runs
            // each read is a cache miss).
            .inspect(|r| debug_assert!(query.admits(r), "the keyset and the contract agree"))
            .take(query.limit)
            .cloned()
            .collect();
        let next = if runs.len() == query.limit {
            runs.last().and_then(|r| ReclaimableCursor::of(r))
        } else {
            None
        };
        Ok(ReclaimablePage {
            runs,
            corrupt: Vec::new(),
            next,
        })
    }

    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError> {
        let s = self.lock();
        let bound = usize::try_from(at_most)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        if detached_after.is_none() {
            // The whole listing up to a cutoff (the sweep's backlog): its size less the few runs
            // detached after the cutoff, so the count costs the same at 1k runs as at 1M.
            let later = s
                .listed
                .range((
                    lowest_after(Some(detached_until)).map_or(Bound::Unbounded, Bound::Included),
                    Bound::Unbounded,
                ))
                .take(bound)
                .count();
            if later < bound {
                return Ok(BoundedCount::of((s.listed.len() - later) as u64, at_most));
            }
        }
        // The keyset holds exactly the listed runs: counting its range reads no record.
        let start = lowest_after(detached_after).map_or(Bound::Unbounded, Bound::Included);
        let seen = s
            .listed
            .range((start, Bound::Unbounded))
            .take_while(|((since, _), _)| *since <= detached_until)
            .take(bound)
            .count();
        Ok(BoundedCount::of(seen as u64, at_most))
    }

    fn capabilities(&self) -> RunStoreCapabilities {
        RunStoreCapabilities::default()
    }

    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError> {
        let mut s = self.lock();
        // Through `change`, like every write: the keyset shares the record and must see it.
        let bump = s.change(run_id, |r| {
            if r.status.is_terminal() {
                return EpochBump::Terminal(r.status);
            }
            let epoch = r.driver_epoch.unwrap_or(0) + 1;
            r.driver_epoch = Some(epoch);
            EpochBump::Claimed {
                epoch,
                record: r.clone(),
            }
        });
        Ok(bump.unwrap_or(EpochBump::Unknown))
    }

    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError> {
        self.update_fenced(run_id, held_epoch, write.to_patch())
            .await
    }

    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError> {
        let mut s = self.lock();
        let fenced = s.change(run_id, |r| {
            if let Some(observed) = r.driver_epoch.filter(|e| *e > held_epoch) {
                return Fenced::Superseded { observed };
            }
            r.apply(&patch);
            Fenced::Written(true)
        });
        Ok(fenced.unwrap_or(Fenced::Written(false)))
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl DeliveryLog for MemoryStore {
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError> {
        let mut s = self.lock();
        if let Some(observed) = superseded(&s, run_id, fence) {
            return Ok(Fenced::Superseded { observed });
        }
        let log = s.logs.entry(run_id.to_string()).or_default();
        if log.closed {
            return Ok(Fenced::Written(Appended::Closed));
        }
        let first = log.entries.len() as u64;
        if !chunks.is_empty() {
            log.last_append_at = Some(now);
        }
        log.entries.extend(chunks);
        Ok(Fenced::Written(Appended::At { first }))
    }

    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        _now: EpochMs,
    ) -> Result<Fenced<()>, StoreError> {
        let mut s = self.lock();
        if let Some(observed) = superseded(&s, run_id, fence) {
            return Ok(Fenced::Superseded { observed });
        }
        s.logs.entry(run_id.to_string()).or_default().closed = true;
        Ok(Fenced::Written(()))
    }

    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError> {
        let s = self.lock();
        Ok(s.logs
            .get(run_id)
            .map(|l| LogSnapshot {
                len: l.entries.len() as u64,
                last_append_at: l.last_append_at,
                closed: l.closed,
            })
            .unwrap_or_default())
    }

    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let s = self.lock();
        let Some(log) = s.logs.get(run_id) else {
            return Ok(Vec::new());
        };
        Ok(log
            .entries
            .iter()
            .enumerate()
            .skip(usize::try_from(from).unwrap_or(usize::MAX))
            .take(limit)
            .map(|(i, c)| LogEntry {
                offset: i as u64,
                chunk: c.clone(),
            })
            .collect())
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl LeaseStore for MemoryStore {
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError> {
        let mut s = self.lock();
        if let Some(held) = s.leases.get(key) {
            if held.expires_at > now {
                return Ok(LeaseGrant::Held {
                    owner: held.owner.clone(),
                    expires_at: held.expires_at,
                });
            }
        }
        s.lease_seq += 1;
        let lease = Lease {
            key: key.to_string(),
            owner: owner.to_string(),
            token: format!("{}", s.lease_seq),
            expires_at: now.saturating_add(ttl_ms as i64),
        };
        s.leases.insert(key.to_string(), lease.clone());
        Ok(LeaseGrant::Acquired(lease))
    }

    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError> {
        let mut s = self.lock();
        match s.leases.get_mut(&lease.key) {
            Some(held) if held.token == lease.token && held.owner == lease.owner => {
                held.expires_at = now.saturating_add(ttl_ms as i64);
                Ok(Some(held.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let mut s = self.lock();
        if s.leases
            .get(&lease.key)
            .is_some_and(|h| h.token == lease.token && h.owner == lease.owner)
        {
            s.leases.remove(&lease.key);
        }
        Ok(())
    }

    async fn note(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.lock().lease_notes.get(key).cloned())
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError> {
        let mut s = self.lock();
        let holds = s
            .leases
            .get(&lease.key)
            .is_some_and(|h| h.token == lease.token && h.owner == lease.owner);
        if holds {
            s.lease_notes.insert(lease.key.clone(), note.to_string());
        }
        Ok(holds)
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl SandboxInstanceStore for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError> {
        Ok(self.lock().instances.get(key).cloned())
    }

    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError> {
        self.lock().instances.insert(record.key.clone(), record);
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.lock().instances.remove(key);
        Ok(())
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl MessageStore for MemoryStore {
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError> {
        let mut s = self.lock();
        if let Some(observed) = superseded(&s, &transcript.run_id, fence) {
            return Ok(Fenced::Superseded { observed });
        }
        s.transcripts
            .insert(transcript.run_id.clone(), transcript.clone());
        Ok(Fenced::Written(()))
    }

    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError> {
        Ok(self.lock().transcripts.get(run_id).cloned())
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
impl ReclaimLedger for MemoryStore {
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        let mut s = self.lock();
        if s.intents.contains_key(&intent.run_id) {
            return Ok(false);
        }
        s.intents.insert(intent.run_id.clone(), intent.clone());
        Ok(true)
    }

    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError> {
        match self.lock().intents.get_mut(&intent.run_id) {
            Some(slot) => {
                *slot = intent.clone();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError> {
        self.lock().intents.remove(run_id);
        Ok(())
    }

    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError> {
        Ok(self.lock().intents.get(run_id).cloned())
    }

    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError> {
        let s = self.lock();
        let mut due: Vec<&ReclaimIntent> = s
            .intents
            .values()
            .filter(|i| i.next_attempt_at <= now)
            .collect();
        due.sort_by(|a, b| (a.next_attempt_at, &a.run_id).cmp(&(b.next_attempt_at, &b.run_id)));
        Ok(due.into_iter().take(limit).cloned().collect())
    }

    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError> {
        let s = self.lock();
        Ok(LedgerCounts {
            pending: s.intents.len() as u64,
            leaked: s.intents.values().filter(|i| i.is_leak()).count() as u64,
            oldest_first_seen: s.intents.values().map(|i| i.first_seen).min(),
        })
    }
}

#[cfg(test)]
mod backlog_count_tests {
    use super::*;
    use crate::ports::RunStore;

    fn detached(store: &MemoryStore, id: &str, since: EpochMs) {
        let mut r = RunRecord::new(id, format!("thread-{id}"), 0);
        r.detached_since = Some(since);
        store.put_run(r);
    }

    #[tokio::test]
    async fn the_backlog_count_from_the_listings_size_leaves_out_runs_detached_after_the_cutoff() {
        let store = MemoryStore::new();
        for i in 0..50 {
            detached(&store, &format!("run-{i}"), 1_000 + i);
        }
        // Detached after the cutoff: not part of the backlog.
        detached(&store, "later-1", 5_000);
        detached(&store, "later-2", 5_001);
        let mut done = RunRecord::new("done", "thread-done", 0);
        done.detached_since = Some(1_000);
        done.status = crate::domain::RunStatus::Completed;
        store.put_run(done);
        assert_eq!(
            store.count_reclaimable(None, 4_999, 100).await.unwrap(),
            BoundedCount {
                count: 50,
                exact: true
            }
        );
        assert_eq!(
            store.count_reclaimable(None, 4_999, 10).await.unwrap(),
            BoundedCount {
                count: 10,
                exact: false
            }
        );
        assert_eq!(
            store.count_reclaimable(None, 1_009, 100).await.unwrap(),
            BoundedCount {
                count: 10,
                exact: true
            }
        );
    }
}
