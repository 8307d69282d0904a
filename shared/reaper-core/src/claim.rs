//! The single-writer claim (spec A.5): a per-run lease plus the `driverEpoch` fencing token, the
//! fence every write of a drive goes through, and the wait for a quiet log (spec A.6).
//!
//! Where the reference re-reads the epoch and then writes (so a paused predecessor can still land
//! one batch), every fenced write here is conditional on the held epoch *inside the store*, in one
//! atomic step. Where the reference's lock queues a second caller, a busy claim here is refused at
//! once (`not-claimed`), and a lease that is lost mid-drive cancels the drive.

use std::sync::Mutex;

use crate::domain::{Chunk, EpochMs, RunRecord, TerminalWrite};
use crate::error::{ClaimRefusal, ObservedEpoch, ReapError, StoreError};
use crate::ports::{
    Appended, CancellationToken, Clock, DeliveryLog, EpochBump, Fenced, Lease, LeaseGrant,
    LeaseStore, RunStore, Sleeper,
};

/// The quiet window a log must hold still before a drive appends to it.
pub const DEFAULT_FENCE_QUIET_MS: u64 = 5_000;
/// How many times the quiet wait compares snapshots before giving up.
pub const MAX_QUIESCENCE_PROBES: u32 = 6;

/// The lease key of a run's driver claim. Shared with the takeover path, so the reaper and a
/// returning viewer never drive the same run at once.
pub fn run_driver_lock_key(run_id: &str) -> String {
    format!("run-driver:{run_id}")
}

/// A held claim: the lease, the epoch the claim wrote, and the latch both fences share.
#[derive(Debug)]
pub struct Claim {
    /// The claimed run.
    pub run_id: String,
    /// The `driverEpoch` this claim wrote; every fenced write is conditional on it.
    pub epoch: u64,
    /// The row as the epoch bump left it.
    pub record: RunRecord,
    lease: Mutex<Lease>,
    /// Cancelled when the lease is lost: the drive stops, and every later fenced write is refused.
    signal: CancellationToken,
    latch: Mutex<Option<ReapError>>,
}

/// Why a claim could not be taken.
#[derive(Debug)]
pub enum ClaimError {
    /// The run cannot be claimed.
    Refused(ReapError),
    /// A store call failed while claiming.
    Store(StoreError),
}

impl Claim {
    /// Takes the run's lease (refused at once if another owner holds it), then bumps the epoch
    /// atomically (refused without a write for an unknown or terminal run).
    pub async fn acquire(
        runs: &dyn RunStore,
        leases: &dyn LeaseStore,
        run_id: &str,
        owner: &str,
        now: EpochMs,
        lease_ttl_ms: u64,
    ) -> Result<Claim, ClaimError> {
        let key = run_driver_lock_key(run_id);
        let lease = match leases
            .acquire(&key, owner, now, lease_ttl_ms)
            .await
            .map_err(ClaimError::Store)?
        {
            LeaseGrant::Acquired(lease) => lease,
            LeaseGrant::Held { .. } => {
                return Err(ClaimError::Refused(ReapError::ClaimNotAcquired {
                    run_id: run_id.to_string(),
                    reason: ClaimRefusal::Busy,
                }))
            }
        };
        let refuse = |reason| {
            ClaimError::Refused(ReapError::ClaimNotAcquired {
                run_id: run_id.to_string(),
                reason,
            })
        };
        let bumped = match runs.bump_epoch(run_id).await {
            Ok(b) => b,
            Err(e) => {
                release_quietly(leases, &lease).await;
                return Err(ClaimError::Store(e));
            }
        };
        match bumped {
            EpochBump::Claimed { epoch, record } => {
                tracing::debug!(target: "reaper", run_id, epoch, "driver claim acquired");
                let expires_at = lease.expires_at;
                let claim = Claim {
                    run_id: run_id.to_string(),
                    epoch,
                    record,
                    signal: CancellationToken::new(),
                    lease: Mutex::new(lease),
                    latch: Mutex::new(None),
                };
                // A lease that is already past its expiry when handed out is lost before the
                // first write.
                if expires_at <= now {
                    claim.signal.cancel();
                }
                Ok(claim)
            }
            EpochBump::Unknown => {
                release_quietly(leases, &lease).await;
                Err(refuse(ClaimRefusal::Unknown))
            }
            EpochBump::Terminal(_) => {
                release_quietly(leases, &lease).await;
                Err(refuse(ClaimRefusal::Terminal))
            }
        }
    }

    /// The claim's signal: cancelled when the lease is lost.
    pub fn signal(&self) -> &CancellationToken {
        &self.signal
    }

    /// The lease as last renewed.
    pub fn lease(&self) -> Lease {
        self.lease.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Renews the lease right now and fails if it is gone: called just before a write that is
    /// not fenced on the epoch (the cancel), so a holder whose lease quietly expired (a paused
    /// process, a clock jump) cannot land it after someone else took the run over.
    pub async fn confirm(
        &self,
        leases: &dyn LeaseStore,
        clock: &dyn Clock,
        ttl_ms: u64,
    ) -> Result<(), ReapError> {
        self.check()?;
        let current = self.lease();
        let now = clock.now_ms();
        let lost = match leases.renew(&current, now, ttl_ms).await {
            Ok(Some(renewed)) => {
                *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = renewed;
                false
            }
            Ok(None) => true,
            Err(error) => {
                // Unknown is not lost while the lease is unexpired: nobody else can hold it.
                tracing::warn!(target: "reaper", run_id = %self.run_id, %error, "confirming the driver claim failed");
                now >= current.expires_at
            }
        };
        if lost {
            self.lose_lease();
            return Err(self.trip(ObservedEpoch::LeaseLost));
        }
        Ok(())
    }

    /// Marks the lease lost: cancels the drive and shuts the fence.
    pub fn lose_lease(&self) {
        self.signal.cancel();
    }

    /// Keeps the lease alive until the returned future is dropped: renews every third of the TTL
    /// and cancels the claim when a renewal says the lease is gone (or it expires unrenewed).
    pub async fn keep_alive(
        &self,
        leases: &dyn LeaseStore,
        clock: &dyn Clock,
        sleeper: &dyn Sleeper,
        ttl_ms: u64,
    ) -> std::convert::Infallible {
        let interval = (ttl_ms / 3).max(1);
        loop {
            sleeper.sleep(interval).await;
            if self.signal.is_cancelled() {
                break;
            }
            let current = self.lease();
            let now = clock.now_ms();
            match leases.renew(&current, now, ttl_ms).await {
                Ok(Some(renewed)) => {
                    *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = renewed;
                }
                Ok(None) => {
                    tracing::warn!(target: "reaper", run_id = %self.run_id, "driver claim lease lost");
                    self.lose_lease();
                    break;
                }
                Err(error) => {
                    // A failed renewal is not a lost lease until the lease has expired: another
                    // host cannot take it before then.
                    if now >= current.expires_at {
                        tracing::warn!(target: "reaper", run_id = %self.run_id, %error, "driver claim lease expired unrenewed");
                        self.lose_lease();
                        break;
                    }
                }
            }
        }
        std::future::pending().await
    }

    /// Releases the lease if still held; errors are logged, never raised (the lease expires).
    pub async fn release(&self, leases: &dyn LeaseStore) {
        release_quietly(leases, &self.lease()).await;
    }

    fn latched(&self) -> Option<ReapError> {
        self.latch.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Trips the latch with the first loss seen; later losses keep the first error.
    pub(crate) fn trip(&self, observed: ObservedEpoch) -> ReapError {
        let mut latch = self.latch.lock().unwrap_or_else(|p| p.into_inner());
        latch
            .get_or_insert_with(|| ReapError::ClaimLost {
                run_id: self.run_id.clone(),
                held_epoch: self.epoch,
                observed,
            })
            .clone()
    }

    /// Whether the claim is known to be lost (latched, or the lease signal fired).
    fn check(&self) -> Result<(), ReapError> {
        if let Some(e) = self.latched() {
            return Err(e);
        }
        if self.signal.is_cancelled() {
            return Err(self.trip(ObservedEpoch::LeaseLost));
        }
        Ok(())
    }

    /// The lost-claim error, if the fence has shut.
    pub fn lost(&self) -> Option<ReapError> {
        self.latched()
    }
}

async fn release_quietly(leases: &dyn LeaseStore, lease: &Lease) {
    if let Err(error) = leases.release(lease).await {
        tracing::warn!(target: "reaper", key = %lease.key, %error, "releasing a lease failed; it will expire");
    }
}

/// Where a drive's writes go: straight to the stores, or through a claim's fence.
#[derive(Clone, Copy)]
pub struct Writer<'a> {
    /// The run store the drive's writes go to.
    pub runs: &'a dyn RunStore,
    /// The delivery log the drive appends to.
    pub log: &'a dyn DeliveryLog,
    /// The claim fencing every write; `None` writes unfenced.
    pub claim: Option<&'a Claim>,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("fenced", &self.claim.map(|c| c.epoch))
            .finish()
    }
}

/// An append that did not land.
#[derive(Debug, Clone)]
pub enum AppendError {
    /// The claim was lost; the fence is shut for good.
    Lost(ReapError),
    /// The log is closed.
    Closed,
    /// A store call failed.
    Store(StoreError),
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::Lost(e) => e.fmt(f),
            AppendError::Closed => f.write_str("the run event log is closed"),
            AppendError::Store(e) => e.fmt(f),
        }
    }
}

/// The terminal write's result.
#[derive(Debug)]
pub enum TerminalResult {
    /// The terminal status landed.
    Written,
    /// The claim was lost: the write was suppressed and nothing changed.
    Suppressed,
}

impl Writer<'_> {
    /// Appends chunks; under a claim, only while the claim holds (checked atomically in the store).
    pub async fn append(
        &self,
        run_id: &str,
        chunks: Vec<Chunk>,
        now: EpochMs,
    ) -> Result<(), AppendError> {
        let fence = match self.claim {
            Some(claim) => {
                claim.check().map_err(AppendError::Lost)?;
                Some(claim.epoch)
            }
            None => None,
        };
        match self.log.append(run_id, fence, chunks, now).await {
            Ok(Fenced::Written(Appended::At { .. })) => Ok(()),
            Ok(Fenced::Written(Appended::Closed)) => Err(AppendError::Closed),
            Ok(Fenced::Superseded { observed }) => match self.claim {
                Some(claim) => Err(AppendError::Lost(
                    claim.trip(ObservedEpoch::Epoch(observed)),
                )),
                // A backend that refuses an unfenced append is broken; report it, never panic.
                None => Err(AppendError::Store(StoreError::Backend(format!(
                    "the store refused an unfenced append to run {run_id} as superseded \
                     (epoch {observed})"
                )))),
            },
            Err(e) => Err(AppendError::Store(e)),
        }
    }

    /// Closes the log; under a claim, only while the claim holds (checked atomically in the
    /// store), so a superseded driver never closes the log its successor is writing.
    /// `Ok(false)`: the fence refused it and nothing changed.
    pub async fn close(&self, run_id: &str, now: EpochMs) -> Result<bool, StoreError> {
        let fence = match self.claim {
            Some(claim) => {
                if claim.check().is_err() {
                    return Ok(false);
                }
                Some(claim.epoch)
            }
            None => None,
        };
        match self.log.close(run_id, fence, now).await? {
            Fenced::Written(()) => Ok(true),
            Fenced::Superseded { observed } => {
                if let Some(claim) = self.claim {
                    claim.trip(ObservedEpoch::Epoch(observed));
                }
                Ok(false)
            }
        }
    }

    /// The terminal write. Under a claim it is conditional on the held epoch in the store; a lost
    /// claim suppresses it (logged at debug with `suppressed a terminal`).
    pub async fn write_terminal(
        &self,
        run_id: &str,
        write: &TerminalWrite,
    ) -> Result<TerminalResult, StoreError> {
        let Some(claim) = self.claim else {
            self.runs.update(run_id, write.to_patch()).await?;
            return Ok(TerminalResult::Written);
        };
        let lost = match claim.check() {
            Err(e) => Some(e),
            Ok(()) => match self.runs.write_terminal(run_id, claim.epoch, write).await? {
                Fenced::Written(_) => None,
                Fenced::Superseded { observed } => Some(claim.trip(ObservedEpoch::Epoch(observed))),
            },
        };
        match lost {
            None => Ok(TerminalResult::Written),
            Some(error) => {
                tracing::debug!(
                    target: "reaper",
                    run_id,
                    status = ?write.status,
                    held_epoch = claim.epoch,
                    %error,
                    "the fence suppressed a terminal write: this host lost the claim"
                );
                Ok(TerminalResult::Suppressed)
            }
        }
    }
}

/// Waits until the run's log holds still (spec A.6), so a drive never interleaves with a
/// predecessor's late appends. Returns the settled length.
///
/// When the log records its last append time and that is at least `quiet_ms` ago, it returns
/// after one snapshot instead of sleeping the whole window (the reference always sleeps it).
pub async fn await_log_quiescence(
    log: &dyn DeliveryLog,
    run_id: &str,
    quiet_ms: u64,
    clock: &dyn Clock,
    sleeper: &dyn Sleeper,
) -> Result<u64, ReapError> {
    let first = log.snapshot(run_id).await?;
    let quiet_since = |at: EpochMs| clock.now_ms().saturating_sub(at) >= quiet_ms as i64;
    if first.closed || first.last_append_at.is_some_and(quiet_since) {
        return Ok(first.len);
    }
    let mut prev = first.len;
    for _ in 0..MAX_QUIESCENCE_PROBES {
        if quiet_ms > 0 {
            sleeper.sleep(quiet_ms).await;
        }
        let cur = log.snapshot(run_id).await?.len;
        if cur == prev {
            return Ok(cur);
        }
        prev = cur;
    }
    Err(ReapError::NeverQuiesced {
        probes: MAX_QUIESCENCE_PROBES,
        len: prev,
    })
}
