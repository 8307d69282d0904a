//! The ports: small dyn-compatible async traits that every backend and provider implements.
//!
//! Futures are `Send` on native targets (tokio handlers) and not on `wasm32` (a single-threaded
//! Worker whose JS-backed futures are `!Send`); [`MaybeSend`] and the `cfg_attr`ed `async_trait`
//! make one trait serve both. Ports carry domain types only: no SDK types cross them.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
pub use tokio_util::sync::CancellationToken;

use crate::domain::{
    Chunk, EpochMs, LedgerCounts, LogEntry, LogSnapshot, NewRun, ReclaimIntent, RunPatch,
    RunRecord, RunStatus, SandboxInstanceRecord, TerminalWrite, Transcript,
};
use crate::error::{DriveError, ProbeError, ReclaimError, SandboxError, StoreError};

#[cfg(not(target_arch = "wasm32"))]
mod maybe {
    /// `Send` on native targets, nothing on wasm32.
    pub trait MaybeSend: Send {}
    impl<T: Send + ?Sized> MaybeSend for T {}
    /// `Sync` on native targets, nothing on wasm32.
    pub trait MaybeSync: Sync {}
    impl<T: Sync + ?Sized> MaybeSync for T {}
}
#[cfg(target_arch = "wasm32")]
mod maybe {
    pub trait MaybeSend {}
    impl<T: ?Sized> MaybeSend for T {}
    pub trait MaybeSync {}
    impl<T: ?Sized> MaybeSync for T {}
}
pub use maybe::{MaybeSend, MaybeSync};

/// A boxed future that is `Send` where the target allows it.
#[cfg(not(target_arch = "wasm32"))]
pub type BoxFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
#[cfg(target_arch = "wasm32")]
pub type BoxFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// The drive's output: chunks, or an error that ends the stream.
#[cfg(not(target_arch = "wasm32"))]
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<Chunk, DriveError>> + Send>>;
#[cfg(target_arch = "wasm32")]
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<Chunk, DriveError>>>>;

/// Reads the current time. The core never reads the system clock (`SystemTime::now()` panics on
/// `wasm32-unknown-unknown`, and injected time makes every test deterministic).
pub trait Clock: MaybeSend + MaybeSync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> EpochMs;
}

/// Waits. Injected so tests run on virtual time and a Worker uses its own timer.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait Sleeper: MaybeSend + MaybeSync {
    /// Returns after `ms` milliseconds.
    async fn sleep(&self, ms: u64);
}

/// What a store can do beyond the required methods. Callers feature-detect these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunStoreCapabilities {
    /// The store implements `list_reclaimable` (the sweep's listing).
    pub list_reclaimable: bool,
    /// The store implements `list_by_thread`.
    pub list_by_thread: bool,
}

impl Default for RunStoreCapabilities {
    fn default() -> Self {
        RunStoreCapabilities {
            list_reclaimable: true,
            list_by_thread: true,
        }
    }
}

/// The answer to a claim's atomic epoch bump.
// Returned once per claim and matched at once: boxing the record would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum EpochBump {
    /// The epoch moved to `epoch`; `record` is the row after the bump.
    Claimed {
        /// The new epoch.
        epoch: u64,
        /// The row after the bump.
        record: RunRecord,
    },
    /// No such run. Nothing was written.
    Unknown,
    /// The run is already terminal. Nothing was written: a refused claim never moves the epoch.
    Terminal(RunStatus),
}

/// The answer to a write fenced on the holder's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced<T> {
    /// The write landed.
    Written(T),
    /// The run's `driverEpoch` is past the holder's: nothing was written.
    Superseded {
        /// The epoch the run holds now.
        observed: u64,
    },
}

/// What a listing found: the runs, and the matching rows that did not parse.
#[derive(Debug, Clone, Default)]
pub struct ReclaimableListing {
    /// The runs that parsed.
    pub runs: Vec<RunRecord>,
    /// One error per matching row that did not parse.
    pub corrupt: Vec<StoreError>,
}

/// A position in the reclaimable listing: the `(detachedSince, runId)` keyset every store
/// orders it by. Small and serializable, so a handler can keep it between sweeps.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimableCursor {
    /// The last listed run's detach time.
    pub detached_since: EpochMs,
    /// The last listed run's id (breaks ties).
    pub run_id: String,
}

impl ReclaimableCursor {
    /// The position of a listed run (`None` for a run that is not detached).
    pub fn of(record: &RunRecord) -> Option<Self> {
        record
            .detached_since
            .map(|detached_since| ReclaimableCursor {
                detached_since,
                run_id: record.run_id.clone(),
            })
    }
}

/// One bounded page of the reclaimable listing: `running` runs with
/// `detached_after < detachedSince <= detached_until`, strictly after `after` in
/// `(detachedSince, runId)` order, at most `limit` of them, in that order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimableQuery {
    /// Exclusive lower bound on `detachedSince` (`None`: no bound).
    pub detached_after: Option<EpochMs>,
    /// Inclusive upper bound on `detachedSince`.
    pub detached_until: EpochMs,
    /// Resume strictly after this position (`None`: from the start of the range).
    pub after: Option<ReclaimableCursor>,
    /// Rows per page, corrupt rows included. Zero answers an empty page without a request.
    pub limit: usize,
}

impl ReclaimableQuery {
    /// Whether a run falls in the query's range and after its cursor (the contract, in one place).
    pub fn admits(&self, record: &RunRecord) -> bool {
        // Compared in place: this runs once per stored run, and an owned cursor would copy the
        // run id every time.
        let Some(since) = record.detached_since else {
            return false;
        };
        record.status == RunStatus::Running
            && self.detached_after.is_none_or(|a| since > a)
            && since <= self.detached_until
            && self.after.as_ref().is_none_or(|after| {
                (since, record.run_id.as_str()) > (after.detached_since, after.run_id.as_str())
            })
    }
}

/// What a page found. `next` is where the following page starts; `None` means the range is
/// exhausted (a page shorter than its limit always ends the range).
#[derive(Debug, Clone, Default)]
pub struct ReclaimablePage {
    /// Shared, not owned: a store that keeps its rows in memory hands out its own records
    /// without copying them, and the sweep borrows them for as long as it runs.
    pub runs: Vec<Arc<RunRecord>>,
    /// One error per matching row that did not parse.
    pub corrupt: Vec<StoreError>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<ReclaimableCursor>,
}

/// A count that stops at a bound, so counting costs the same whatever the backlog: `exact`
/// false means "at least `count`".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BoundedCount {
    /// The count, up to the bound.
    pub count: u64,
    /// Whether `count` is the exact number (else at least it).
    pub exact: bool,
}

impl BoundedCount {
    /// What counting `seen` rows with a bound of `at_most` says: a count past the bound is
    /// reported as the bound, and not exact.
    pub fn of(seen: u64, at_most: u64) -> Self {
        BoundedCount {
            count: seen.min(at_most),
            exact: seen <= at_most,
        }
    }
}

/// Rows per page when [`RunStore::list_reclaimable`] walks the whole listing.
pub const LISTING_PAGE_ROWS: usize = 500;

/// The run store: the same store the chat routes write runs into.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait RunStore: MaybeSend + MaybeSync {
    /// Returns an existing row unchanged (ignoring the input), else creates it (`running` unless
    /// the input says otherwise).
    async fn create_or_resume(&self, new: NewRun) -> Result<RunRecord, StoreError>;

    /// Applies a patch. An unknown `run_id` is a no-op: nothing is created, no error.
    async fn update(&self, run_id: &str, patch: RunPatch) -> Result<(), StoreError>;

    /// [`RunStore::update`] by a holder of the run's claim: conditional on
    /// `driverEpoch <= held_epoch` *in the same atomic step*, so a holder whose claim was taken
    /// over (a paused process, an expired lease) can never land it (the cancel, a returning
    /// viewer's attach). A missing row is a no-op (`Written(false)`); a landed patch is
    /// `Written(true)`. Required, with no default: an unfenced fallback is the bug it exists for.
    async fn update_fenced(
        &self,
        run_id: &str,
        held_epoch: u64,
        patch: RunPatch,
    ) -> Result<Fenced<bool>, StoreError>;

    /// The run, if it exists.
    async fn get(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// The `running` row with the greatest `startedAt` for the thread.
    async fn find_active_run(&self, thread_id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Rows of a thread ordered by `startedAt`. Optional: see [`RunStore::capabilities`].
    async fn list_by_thread(&self, _thread_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        Err(StoreError::Unsupported("list_by_thread"))
    }

    /// Up to `limit` non-terminal runs (`running`, `interrupted`) of any thread whose
    /// `sandboxKey` is `sandbox_key`: the reclaim keeps a sandbox any of them may use. Optional
    /// (`Unsupported` by default); a wrapper store must forward it, or the reclaim falls back to
    /// the thread's runs alone.
    async fn live_runs_for_sandbox(
        &self,
        _sandbox_key: &str,
        _limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        Err(StoreError::Unsupported("live_runs_for_sandbox"))
    }

    /// Every `running` row with `detachedSince <= now - ttl_ms` (inclusive). Order is not part of
    /// the contract. Provided: it walks [`RunStore::list_reclaimable_page`] to the end of the
    /// range (unbounded: the sweep itself reads only the pages it uses).
    async fn list_reclaimable(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        Ok(self.list_reclaimable_listing(now, ttl_ms).await?.runs)
    }

    /// [`RunStore::list_reclaimable`], plus the rows that matched but did not parse (each a
    /// [`StoreError::Corrupt`] naming its run), so one malformed row is reported instead of
    /// failing the whole listing. Provided, like `list_reclaimable`, on the paged listing.
    async fn list_reclaimable_listing(
        &self,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<ReclaimableListing, StoreError> {
        let mut listing = ReclaimableListing::default();
        let mut query = ReclaimableQuery {
            detached_after: None,
            detached_until: now.saturating_sub(ttl_ms.min(i64::MAX as u64) as i64),
            after: None,
            limit: LISTING_PAGE_ROWS,
        };
        loop {
            let page = self.list_reclaimable_page(query.clone()).await?;
            listing
                .runs
                .extend(page.runs.into_iter().map(Arc::unwrap_or_clone));
            listing.corrupt.extend(page.corrupt);
            match page.next {
                // A cursor that does not move would page for ever: a broken store ends here.
                Some(next) if query.after.as_ref() != Some(&next) => query.after = Some(next),
                _ => return Ok(listing),
            }
        }
    }

    /// One bounded page of the listing (see [`ReclaimableQuery`]), so a sweep reads only what it
    /// uses. Every store pushes the range, the keyset and the limit down to its backend. A store
    /// that cannot list answers [`StoreError::Unsupported`] (and says so in
    /// [`RunStore::capabilities`]). Required, with no default, so a wrapper store that forgets to
    /// forward it fails to compile instead of silently reading the whole listing.
    async fn list_reclaimable_page(
        &self,
        query: ReclaimableQuery,
    ) -> Result<ReclaimablePage, StoreError>;

    /// How many rows the listing holds in a range (every `running` run with
    /// `detached_after < detachedSince <= detached_until`, as in [`ReclaimableQuery`], corrupt
    /// rows included), counting at most `at_most` of them within a fixed number of requests
    /// (the sweep's true backlog). A store that stops early answers `exact: false` with what it
    /// counted. Stores count without reading the rows. Required, like the page.
    async fn count_reclaimable(
        &self,
        detached_after: Option<EpochMs>,
        detached_until: EpochMs,
        at_most: u64,
    ) -> Result<BoundedCount, StoreError>;

    /// What this store supports beyond the required methods.
    fn capabilities(&self) -> RunStoreCapabilities {
        RunStoreCapabilities::default()
    }

    /// Adds entries to runs' histories (see [`crate::history`]): one per run a sweep touched,
    /// keyed by `(run_id, at, sweep_id)`, so writing an entry again (a retried write) replaces
    /// it. Optional (`Unsupported` by default); the sweep never fails for it.
    async fn record_history(
        &self,
        _entries: &[crate::history::HistoryEntry],
    ) -> Result<(), StoreError> {
        Err(StoreError::Unsupported("record_history"))
    }

    /// Up to `limit` (capped at [`crate::history::MAX_HISTORY_READ`]) history entries of one
    /// run, newest first (by `at`, then `sweep_id`). An unknown run has none. Optional, like
    /// [`RunStore::record_history`].
    async fn run_history(
        &self,
        _run_id: &str,
        _limit: usize,
    ) -> Result<Vec<crate::history::HistoryEntry>, StoreError> {
        Err(StoreError::Unsupported("run_history"))
    }

    /// Deletes at most `max_entries` history entries made before `before` (of any run), oldest
    /// first, in one bounded request; returns how many went. The sweep calls it with its
    /// retention. Optional (a store whose backend expires entries itself answers `Ok(0)`).
    async fn prune_history(
        &self,
        _before: EpochMs,
        _max_entries: usize,
    ) -> Result<u64, StoreError> {
        Err(StoreError::Unsupported("prune_history"))
    }

    /// What `reaper status` lists (see [`crate::detached`]): a summary of every detached run
    /// and up to `query.limit` of those that pass its filters, each with its sandbox instance
    /// record (read from `instances`, or from the store's own table when it holds them) and its
    /// newest history entry. Provided by [`crate::detached::detached_view_by_listing`], which
    /// reads the whole listing; a store that can join and count in its backend overrides it so
    /// the cost follows the rows shown, not the backlog.
    async fn detached_view(
        &self,
        instances: &dyn SandboxInstanceStore,
        query: &crate::detached::DetachedQuery,
    ) -> Result<crate::detached::DetachedView, StoreError> {
        crate::detached::detached_view_by_listing(self, instances, query).await
    }

    /// Up to `limit` (capped at [`crate::sweeps::MAX_SWEEPS_READ`]) sweep records of every
    /// host, newest first (by `finished_at`, then `sweep_id`). Optional (`Unsupported` by
    /// default: a store that keeps no sweep records); a store that answers it writes the
    /// records in [`RunStore::write_sweep_history`].
    async fn recent_sweeps(
        &self,
        _limit: usize,
    ) -> Result<Vec<crate::sweeps::SweepRecord>, StoreError> {
        Err(StoreError::Unsupported("recent_sweeps"))
    }

    /// Everything a sweep writes at its end, in one call: its runs' history entries (as
    /// [`RunStore::record_history`] would), its record when it has one ([`crate::sweeps`]; a
    /// record with the same `sweep_id` is replaced) with the records' prune (at most
    /// [`crate::sweeps::SWEEP_PRUNE_BATCH`] that finished before `prune_before`, oldest first)
    /// and cap (the oldest past [`crate::sweeps::MAX_SWEEPS_KEPT`]), then the history's prune (as
    /// [`RunStore::prune_history`] with `prune_before` and `prune_max`). Returns what it did.
    ///
    /// A store sends it as one transaction, batch or request where the backend allows, so a
    /// sweep pays one round trip and a failure (`Err`) leaves nothing half done. A store that
    /// sends the parts apart reports a part's failure in [`crate::history::SweepWritten`] beside
    /// what the other part did.
    ///
    /// Provided for a store that implements only [`RunStore::record_history`] and
    /// [`RunStore::prune_history`] (or neither: `Unsupported` there writes nothing and is no
    /// failure): the entries, then the prune, apart; it keeps no sweep record. A store that keeps
    /// sweep records ([`RunStore::recent_sweeps`]) must override it, and so must a wrapper
    /// store forward it. The sweep never fails for it.
    async fn write_sweep_history(
        &self,
        history: &crate::history::SweepHistory,
    ) -> Result<crate::history::SweepWritten, StoreError> {
        let written = if history.entries.is_empty() {
            Ok(false)
        } else {
            self.record_history(&history.entries).await.map(|()| false)
        };
        let pruned = self
            .prune_history(history.prune_before, history.prune_max)
            .await;
        Ok(crate::history::SweepWritten::apart(
            history, written, pruned,
        ))
    }

    /// The claim's epoch bump, atomically: refuse an unknown or terminal run without writing,
    /// otherwise write `driverEpoch = (old ?? 0) + 1` and return it.
    async fn bump_epoch(&self, run_id: &str) -> Result<EpochBump, StoreError>;

    /// The terminal write of a drive, conditional on `driverEpoch <= held_epoch` *in the same
    /// atomic step*, so a superseded holder can never land it whatever its timing. A missing row
    /// is a no-op (`Written(false)`); a landed write is `Written(true)`.
    async fn write_terminal(
        &self,
        run_id: &str,
        held_epoch: u64,
        write: &TerminalWrite,
    ) -> Result<Fenced<bool>, StoreError>;
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// What the lease is for (one sweep at a time per key).
    pub key: String,
    /// Who holds it.
    pub owner: String,
    /// Changes on every grant, so a release or renewal by a stale holder cannot touch a newer one.
    pub token: String,
    /// When it lapses unless renewed.
    pub expires_at: EpochMs,
}

/// The answer to [`LeaseStore::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGrant {
    /// The lease is the caller's.
    Acquired(Lease),
    /// Another owner holds an unexpired lease.
    Held {
        /// Who holds it.
        owner: String,
        /// When their lease lapses.
        expires_at: EpochMs,
    },
}

/// Leases with owners and expiry: the per-run claim (`run-driver:<runId>`) and the sweep-wide
/// single-flight lease. A busy key is answered at once, never waited on.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait LeaseStore: MaybeSend + MaybeSync {
    /// Grants the key when it is free or its lease expired at or before `now`.
    async fn acquire(
        &self,
        key: &str,
        owner: &str,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<LeaseGrant, StoreError>;

    /// Extends a lease still held by this grant (`key`, `owner` and `token` match). `None` means
    /// it was lost: it expired and someone else took it, or it is gone.
    async fn renew(
        &self,
        lease: &Lease,
        now: EpochMs,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, StoreError>;

    /// Releases the lease if this grant still holds it; otherwise a no-op. The key's note stays.
    async fn release(&self, lease: &Lease) -> Result<(), StoreError>;

    /// The note kept with `key` (the sweep keeps its round-robin cursor there), or `None` when
    /// none was written. A note outlives grants: release and expiry keep it for the next holder.
    /// Required, with no default: a wrapper that forgot to forward it would silently lose the
    /// round-robin cursor.
    async fn note(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// Replaces the note of `lease.key` only while this grant still holds the key (`key`,
    /// `owner` and `token` match, as for [`LeaseStore::renew`]), checked in the same atomic step
    /// as the write: a holder that lost the key can never overwrite its successor's note.
    /// `false` means nothing was written.
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool, StoreError>;
}

/// The answer to an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The chunks landed at offsets `first .. first + n`.
    At {
        /// The offset of the first chunk appended.
        first: u64,
    },
    /// The log was closed before: nothing landed.
    Closed,
}

/// The per-run delivery log (the reference's `StreamDurability`), addressed by runId.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait DeliveryLog: MaybeSend + MaybeSync {
    /// Appends chunks in order. With `fence = Some(epoch)` the append is conditional, in the same
    /// atomic step, on the run's `driverEpoch` not being past `epoch`; a missing run record does
    /// not refuse it. `now` stamps the last-append time. The chunks are handed over, so a store
    /// that keeps them in memory moves them in instead of copying each one.
    async fn append(
        &self,
        run_id: &str,
        fence: Option<u64>,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<Fenced<Appended>, StoreError>;

    /// Terminalizes the log: live readers end, later appends are refused. Idempotent. With
    /// `fence = Some(epoch)` the close is conditional, as a fenced append is, on the run's
    /// `driverEpoch` not being past `epoch` in the same atomic step (a superseded driver must not
    /// close the log its successor is writing); `None` is the application's own close.
    async fn close(
        &self,
        run_id: &str,
        fence: Option<u64>,
        now: EpochMs,
    ) -> Result<Fenced<()>, StoreError>;

    /// A bounded point-in-time view; an unknown run is an empty snapshot, never an error.
    async fn snapshot(&self, run_id: &str) -> Result<LogSnapshot, StoreError>;

    /// Up to `limit` entries from offset `from`, in order. Never waits for more.
    async fn read(
        &self,
        run_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, StoreError>;
}

/// Sandbox instances by compound key. There is deliberately no `list`.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait SandboxInstanceStore: MaybeSend + MaybeSync {
    /// `None` when missing; never an error for that.
    async fn get(&self, key: &str) -> Result<Option<SandboxInstanceRecord>, StoreError>;
    /// Fully replaces the row.
    async fn upsert(&self, record: SandboxInstanceRecord) -> Result<(), StoreError>;
    /// Deleting a missing key is a no-op.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;
}

/// The reclaim ledger: durable intents to settle a terminal run's aftermath (close its log,
/// destroy its sandbox), keyed by run id. Every sweep retries the due ones until the provider
/// confirms the sandbox gone, so neither a crash nor a failed destroy forgets a sandbox.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait ReclaimLedger: MaybeSend + MaybeSync {
    /// Records `intent` unless an entry for its run exists (then the existing one, with its
    /// `firstSeen` and attempt count, is kept unchanged). Returns whether it was inserted.
    async fn record_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError>;

    /// Replaces the entry of `intent.run_id` after an attempt. Never resurrects a resolved
    /// entry: when there is none, nothing is written and it returns `false`.
    async fn update_intent(&self, intent: &ReclaimIntent) -> Result<bool, StoreError>;

    /// Removes the run's entry. Removing a missing entry is a no-op.
    async fn resolve_intent(&self, run_id: &str) -> Result<(), StoreError>;

    /// The run's reclaim intent, if one is recorded.
    async fn get_intent(&self, run_id: &str) -> Result<Option<ReclaimIntent>, StoreError>;

    /// Up to `limit` entries with `nextAttemptAt <= now`, earliest `nextAttemptAt` first.
    async fn due_intents(
        &self,
        now: EpochMs,
        limit: usize,
    ) -> Result<Vec<ReclaimIntent>, StoreError>;

    /// How many entries there are, how many are leaks, and the oldest one's age.
    async fn ledger_counts(&self) -> Result<LedgerCounts, StoreError>;
}

/// Transcripts (messages). They must outlive the delivery log's events; nothing in the reaper
/// ever deletes one.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait MessageStore: MaybeSend + MaybeSync {
    /// Saves (or replaces) a run's transcript. With `fence = Some(epoch)` the save is
    /// conditional, in the same atomic step, on the run's `driverEpoch` not being past `epoch`
    /// (a missing run record does not refuse it), so a superseded drive cannot replace its
    /// successor's transcript; `None` is an unfenced save (the application's own).
    async fn save_transcript(
        &self,
        transcript: &Transcript,
        fence: Option<u64>,
    ) -> Result<Fenced<()>, StoreError>;
    /// The run's saved transcript, if any.
    async fn get_transcript(&self, run_id: &str) -> Result<Option<Transcript>, StoreError>;
}

/// Options of one `exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecOptions {
    /// The command is killed after this long.
    pub timeout_ms: u64,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions { timeout_ms: 30_000 }
    }
}

/// What an `exec` returned. Some providers fold stderr into stdout, which is why every command
/// the core builds silences stderr inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOutput {
    /// The command's standard output.
    pub stdout: String,
    /// Its standard error (empty where the provider folds it into stdout).
    pub stderr: String,
    /// Its exit status.
    pub exit_code: i32,
}

/// A live sandbox. Every journal operation goes through `exec`, never a file API.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait SandboxHandle: MaybeSend + MaybeSync {
    /// The sandbox's id at its provider.
    fn id(&self) -> &str;
    /// Runs `sh -c command` inside the sandbox.
    async fn exec(&self, command: &str, options: ExecOptions) -> Result<ExecOutput, SandboxError>;
}

/// A sandbox provider: E2B, Daytona, Docker, a local directory, a remote daemon.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait SandboxProvider: MaybeSend + MaybeSync {
    /// The name recorded in instance records; reclaim refuses records of another provider.
    fn name(&self) -> &str;
    /// A handle to a live sandbox, or `None` when it is gone.
    async fn resume(&self, id: &str) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError>;
    /// Tears the sandbox down. An error means it may still be running.
    async fn destroy(&self, id: &str) -> Result<(), SandboxError>;

    /// Whether sandboxes recorded under provider `name` are this provider's to read and
    /// destroy. One provider serves its own name; [`crate::providers::ProviderSet`] serves each
    /// of its members'. The core asks this before it touches a recorded sandbox, because an id
    /// from another provider's id space may name an unrelated sandbox here.
    fn serves(&self, name: &str) -> bool {
        name == self.name()
    }

    /// [`resume`](Self::resume) of a sandbox an instance record names under provider `name`.
    /// A provider that does not serve `name` refuses and touches nothing.
    async fn resume_recorded(
        &self,
        name: &str,
        id: &str,
    ) -> Result<Option<Arc<dyn SandboxHandle>>, SandboxError> {
        if !self.serves(name) {
            return Err(not_served(self.name(), name));
        }
        self.resume(id).await
    }

    /// [`destroy`](Self::destroy) of a sandbox an instance record names under provider
    /// `name`. A provider that does not serve `name` refuses and touches nothing.
    async fn destroy_recorded(&self, name: &str, id: &str) -> Result<(), SandboxError> {
        if !self.serves(name) {
            return Err(not_served(self.name(), name));
        }
        self.destroy(id).await
    }

    /// The state of sandbox `id`, for a provider whose sandboxes stop by themselves and can be
    /// started again (Daytona's auto-stop, E2B's pause, Vercel's persistent sandboxes). `None`,
    /// the default, means this provider does not say: its sandboxes are live or gone, and the
    /// core never tries to start one. One request at most.
    async fn state(&self, _id: &str) -> Result<Option<SandboxState>, SandboxError> {
        Ok(None)
    }

    /// Starts (or resumes) the stopped sandbox `id` so its journal can be read. Returning `Ok`
    /// means the provider accepted; the core waits for [`state`](Self::state) to say
    /// `Running`. The default refuses: only a provider that answers `state` starts anything.
    async fn start_for_read(&self, id: &str) -> Result<(), SandboxError> {
        Err(cannot_start(self.name(), id))
    }

    /// Returns a sandbox [`start_for_read`](Self::start_for_read) started to the state it was
    /// in (stopped, paused). The default refuses, as `start_for_read` does.
    async fn restore(&self, id: &str) -> Result<(), SandboxError> {
        Err(cannot_start(self.name(), id))
    }

    /// [`state`](Self::state) of a sandbox recorded under provider `name`.
    async fn state_recorded(
        &self,
        name: &str,
        id: &str,
    ) -> Result<Option<SandboxState>, SandboxError> {
        if !self.serves(name) {
            return Err(not_served(self.name(), name));
        }
        self.state(id).await
    }

    /// [`start_for_read`](Self::start_for_read) of a sandbox recorded under provider `name`.
    async fn start_for_read_recorded(&self, name: &str, id: &str) -> Result<(), SandboxError> {
        if !self.serves(name) {
            return Err(not_served(self.name(), name));
        }
        self.start_for_read(id).await
    }

    /// [`restore`](Self::restore) of a sandbox recorded under provider `name`.
    async fn restore_recorded(&self, name: &str, id: &str) -> Result<(), SandboxError> {
        if !self.serves(name) {
            return Err(not_served(self.name(), name));
        }
        self.restore(id).await
    }
}

/// What a provider whose sandboxes stop by themselves says of one (see
/// [`SandboxProvider::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxState {
    /// Live: commands run.
    Running,
    /// Stopped (or paused) and kept: it can be started again, and its files are there.
    Stopped,
    /// Between states (starting, stopping, restoring): ask again shortly.
    Changing,
    /// Gone, or never existed.
    Gone,
}

/// A sandbox named by an instance record: its provider's name and its id there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedSandbox {
    /// The provider's name, as instance records carry it.
    pub provider: String,
    /// The sandbox's id at that provider.
    pub id: String,
}

fn cannot_start(provider: &str, id: &str) -> SandboxError {
    SandboxError::Refused(format!(
        "provider {provider} cannot start or stop sandbox {id}: its sandboxes do not stop by \
         themselves"
    ))
}

/// The refusal of a provider asked for another provider's sandbox.
pub fn not_served(this: &str, recorded: &str) -> SandboxError {
    SandboxError::Refused(format!(
        "the sandbox is recorded under provider {recorded:?}, which this reaper ({this}) does not serve; \
         configure that provider too, or let a reaper that has it reclaim the sandbox"
    ))
}

/// The probe's three answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunExitProbe {
    /// A genuine, nonced exit sentinel was found.
    Finished {
        /// The agent's exit code from the sentinel.
        exit_code: i64,
    },
    /// No sentinel: the agent is (or may be) still working. Leave it alone.
    Producing,
    /// The probe could not tell. Leave it alone; never `Finished` on a failure.
    Unknown {
        /// What failed, when something did.
        error: Option<String>,
    },
    /// There is no journal of ours to read (no key, no instance record, another provider's
    /// sandbox, a sandbox that is gone): reported `unknown` with the cause. Leave it alone.
    Unreachable(crate::reason::Unreachable),
}

impl RunExitProbe {
    /// The answer's name in reports: `finished`, `producing`, `unknown` or `unreachable`.
    pub fn state(&self) -> &'static str {
        match self {
            RunExitProbe::Finished { .. } => "finished",
            RunExitProbe::Producing => "producing",
            RunExitProbe::Unknown { .. } | RunExitProbe::Unreachable(_) => "unknown",
        }
    }
}

/// Learns out of band whether a detached run's agent finished (`hasFinished`). An `Err` is a
/// probe that threw: the run is reported `failed`, not `unknown`.
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait ExitProbe: MaybeSend + MaybeSync {
    /// Reads the run's journal for its exit sentinel.
    async fn has_finished(&self, record: &RunRecord) -> Result<RunExitProbe, ProbeError>;

    /// The run's sandbox when it is stopped and its provider can start it again to read the
    /// journal (see [`SandboxProvider::state`]); `None` when it is running, gone, unrecorded,
    /// another provider's, or the provider does not say. The default: `None`, never a start.
    async fn stopped_sandbox(
        &self,
        _record: &RunRecord,
    ) -> Result<Option<RecordedSandbox>, SandboxError> {
        Ok(None)
    }

    /// The state of a sandbox [`stopped_sandbox`](Self::stopped_sandbox) named.
    async fn sandbox_state(
        &self,
        _sandbox: &RecordedSandbox,
    ) -> Result<Option<SandboxState>, SandboxError> {
        Ok(None)
    }

    /// Starts a sandbox [`stopped_sandbox`](Self::stopped_sandbox) named, to read it.
    async fn start_for_read(&self, sandbox: &RecordedSandbox) -> Result<(), SandboxError> {
        Err(cannot_start(&sandbox.provider, &sandbox.id))
    }

    /// Returns a sandbox started to read to the state it was in.
    async fn restore(&self, sandbox: &RecordedSandbox) -> Result<(), SandboxError> {
        Err(cannot_start(&sandbox.provider, &sandbox.id))
    }
}

/// What a drive is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveRequest {
    /// The run to drive.
    pub run_id: String,
    /// Its conversation.
    pub thread_id: String,
    /// The epoch the drive's claim holds: every write the drive makes itself (the transcript)
    /// is fenced on it. `None` for a drive outside a claim.
    pub fence: Option<u64>,
}

/// Produces the run's remaining output as chunks under a cancel signal. An `Err` from `drive`
/// itself is the reference's synchronous throw: the run is reported `failed`.
pub trait Drive: MaybeSend + MaybeSync {
    /// Starts producing the run's remaining chunks; `signal` stops it.
    fn drive(
        &self,
        request: DriveRequest,
        signal: CancellationToken,
    ) -> Result<ChunkStream, DriveError>;
}

/// What a reclaim did with a terminal run's sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaimed {
    /// The provider destroyed it (or it was already gone) and the instance record is deleted.
    Destroyed,
    /// Nothing to tear down: no sandbox key, or no instance record and no sandbox on file.
    Nothing,
    /// Deliberately left alone, never destroyed: another provider's record, or a non-terminal
    /// run still uses the sandbox. The reason (a `kept/…` code) says which.
    Kept(crate::reason::Reason),
}

/// Tears down the sandbox of a run the store has confirmed terminal. `Err` means the sandbox
/// was *not* torn down and may still be running (a leak the ledger keeps retrying).
#[cfg_attr(not(target_arch = "wasm32"), async_trait::async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait::async_trait(?Send))]
pub trait Reclaim: MaybeSend + MaybeSync {
    /// `intent` is the run's ledger entry: on a retry it names the sandbox an earlier attempt
    /// saw, so a leak stays reachable after the instance record moved on.
    async fn reclaim(
        &self,
        record: &RunRecord,
        intent: &ReclaimIntent,
    ) -> Result<Reclaimed, ReclaimError>;

    /// What [`Reclaim::reclaim`] would do for `record`, from reads alone: no destroy, no delete
    /// (a dry run's proof). `None`: this reclaimer cannot tell without acting.
    async fn plan(
        &self,
        _record: &RunRecord,
        _intent: &ReclaimIntent,
    ) -> Result<Option<crate::reclaim::ReclaimPlan>, ReclaimError> {
        Ok(None)
    }
}
