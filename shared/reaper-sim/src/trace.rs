//! What the simulation saw: a time-stamped event trace (printed with a failing seed), and the
//! invariants that can only be checked at the moment something happens — two drivers of one
//! run at once, a superseded holder's write landing after a newer holder's, a live run's sandbox
//! destroyed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::exec::VirtualTime;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's short name (`live-sandbox-destroyed`, `duplicate-chunk`, …).
    pub invariant: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

#[derive(Debug, Default)]
struct State {
    events: Vec<String>,
    violations: Vec<Violation>,
    /// Drivers of each run right now: (id, who, the claim lease grant it held when it started).
    drivers: BTreeMap<String, Vec<(u64, String, Option<String>)>>,
    next_driver: u64,
    /// The grant each lease key was last given, unless released: (owner, token).
    leases: BTreeMap<String, (String, String)>,
    /// The greatest epoch whose fenced write landed, per run.
    landed_epoch: BTreeMap<String, u64>,
    /// (key, owner) pairs whose grant was taken over after it expired unreleased.
    taken_over: BTreeSet<(String, String)>,
    /// How many faults were injected.
    faults: u64,
}

/// Shared by every port and actor of one simulation. Clones share it.
#[derive(Debug, Clone)]
pub struct Trace {
    state: Arc<Mutex<State>>,
    time: VirtualTime,
}

/// Held while a drive (or a viewer's takeover) drives a run; dropping it ends the drive.
#[derive(Debug)]
pub struct DriverGuard {
    trace: Trace,
    run_id: String,
    id: u64,
}

impl Drop for DriverGuard {
    fn drop(&mut self) {
        let mut s = self.trace.lock();
        if let Some(list) = s.drivers.get_mut(&self.run_id) {
            list.retain(|(id, _, _)| *id != self.id);
        }
    }
}

impl Trace {
    pub fn new(time: VirtualTime) -> Self {
        Trace {
            state: Arc::default(),
            time,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a line to the trace, stamped with the virtual time.
    pub fn event(&self, line: impl AsRef<str>) {
        let now = self.time.now();
        let line = format!("t={now} {}", line.as_ref());
        self.lock().events.push(line);
    }

    pub fn violate(&self, invariant: &'static str, detail: impl Into<String>) {
        let detail = detail.into();
        self.event(format!("VIOLATION {invariant}: {detail}"));
        self.lock().violations.push(Violation { invariant, detail });
    }

    pub fn fault(&self, what: impl AsRef<str>) {
        self.lock().faults += 1;
        self.event(format!("fault: {}", what.as_ref()));
    }

    pub fn faults(&self) -> u64 {
        self.lock().faults
    }

    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.clone()
    }

    /// The last `n` trace lines.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let s = self.lock();
        s.events[s.events.len().saturating_sub(n)..].to_vec()
    }

    /// Records that `who` starts driving `run_id`. Two drivers of one run at once break "two
    /// sweeps never both drive a run" when the earlier one still holds the run's current claim
    /// lease grant: then the newcomer drives without the claim. A driver whose grant was taken
    /// over (it expired unreleased, or was dead on arrival) is not a clash — its claim is lost
    /// and its writes are fenced out, which [`Trace::landed`] checks.
    pub fn start_driving(&self, run_id: &str, who: &str) -> DriverGuard {
        let key = reaper_core::claim::run_driver_lock_key(run_id);
        let mut s = self.lock();
        let current = s.leases.get(&key).cloned();
        let mine = current
            .as_ref()
            .filter(|(owner, _)| owner == who)
            .map(|(_, token)| token.clone());
        // A newcomer whose own grant was taken over is the paused, superseded holder: it does
        // not know yet, and the fence keeps its writes out.
        let superseded = s.taken_over.contains(&(key.clone(), who.to_string()));
        let clash: Vec<String> = s
            .drivers
            .get(run_id)
            .into_iter()
            .flatten()
            .filter(|(_, _, token)| {
                !superseded && token.is_some() && token.as_ref() == current.as_ref().map(|(_, t)| t)
            })
            .map(|(_, other, _)| other.clone())
            .collect();
        s.next_driver += 1;
        let id = s.next_driver;
        s.drivers
            .entry(run_id.to_string())
            .or_default()
            .push((id, who.to_string(), mine));
        drop(s);
        self.event(format!("{who} drives {run_id}"));
        for other in clash {
            self.violate(
                "two-drivers",
                format!("{who} started driving {run_id} while {other} was driving it under the run's live claim"),
            );
        }
        DriverGuard {
            trace: self.clone(),
            run_id: run_id.to_string(),
            id,
        }
    }

    /// Whether `who` holds the current grant of `run_id`'s claim lease.
    pub fn holds_claim(&self, run_id: &str, who: &str) -> bool {
        let key = reaper_core::claim::run_driver_lock_key(run_id);
        self.lock()
            .leases
            .get(&key)
            .is_some_and(|(owner, _)| owner == who)
    }

    /// A lease grant landed in the store.
    pub fn lease_granted(&self, key: &str, owner: &str, token: &str) {
        let mut s = self.lock();
        s.taken_over.remove(&(key.to_string(), owner.to_string()));
        let previous = s
            .leases
            .insert(key.to_string(), (owner.to_string(), token.to_string()));
        if let Some((previous, _)) = previous.filter(|(o, _)| o != owner) {
            // Granted over an unreleased grant: that one expired, and its holder lost the key.
            s.taken_over.insert((key.to_string(), previous));
        }
    }

    /// A lease release landed in the store.
    pub fn lease_released(&self, key: &str, token: &str) {
        let mut s = self.lock();
        if s.leases.get(key).is_some_and(|(_, t)| t == token) {
            s.leases.remove(key);
        }
    }

    /// A write fenced on `epoch` landed for `run_id`. Once a newer holder's write landed, an
    /// older holder's never may: that is the fence, and the effective meaning of "two sweeps
    /// never both drive a run".
    pub fn landed(&self, run_id: &str, epoch: u64, what: &str, who: &str) {
        let mut s = self.lock();
        let newest = s.landed_epoch.entry(run_id.to_string()).or_insert(epoch);
        let stale = *newest > epoch;
        *newest = (*newest).max(epoch);
        let newest = *newest;
        drop(s);
        if stale {
            self.violate(
                "superseded-write-landed",
                format!("{who}'s {what} for {run_id} at epoch {epoch} landed after epoch {newest} wrote"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Trace {
        Trace::new(VirtualTime::new(0))
    }

    fn grant(t: &Trace, run: &str, owner: &str, token: &str) {
        t.lease_granted(&reaper_core::claim::run_driver_lock_key(run), owner, token);
    }

    #[test]
    fn driving_a_run_whose_live_claim_another_driver_holds_is_a_violation() {
        let t = trace();
        grant(&t, "r1", "sweeper-a", "1");
        let _a = t.start_driving("r1", "sweeper-a");
        let _b = t.start_driving("r1", "sweeper-b");
        assert_eq!(t.violations().len(), 1);
        assert_eq!(t.violations()[0].invariant, "two-drivers");
    }

    #[test]
    fn a_finished_drive_or_another_run_is_no_clash() {
        let t = trace();
        grant(&t, "r1", "a", "1");
        drop(t.start_driving("r1", "a"));
        grant(&t, "r1", "b", "2");
        let _b = t.start_driving("r1", "b");
        grant(&t, "r2", "c", "3");
        let _c = t.start_driving("r2", "c");
        assert!(t.violations().is_empty());
    }

    #[test]
    fn a_takeover_after_an_expired_lease_excuses_the_overlap() {
        let t = trace();
        grant(&t, "r1", "a", "1");
        let _a = t.start_driving("r1", "a");
        grant(&t, "r1", "b", "2"); // a's lease expired unreleased
        let _b = t.start_driving("r1", "b");
        assert!(t.violations().is_empty(), "{:?}", t.violations());
    }

    #[test]
    fn a_superseded_holder_starting_late_is_no_clash() {
        let t = trace();
        grant(&t, "r1", "a", "1");
        grant(&t, "r1", "b", "2"); // a paused past its lease; b took the run over
        let _b = t.start_driving("r1", "b");
        let _a = t.start_driving("r1", "a"); // a wakes up, not knowing yet
        assert!(t.violations().is_empty(), "{:?}", t.violations());
    }

    #[test]
    fn an_older_epoch_landing_after_a_newer_one_is_a_violation() {
        let t = trace();
        t.landed("r1", 1, "append", "a");
        t.landed("r1", 2, "append", "b");
        assert!(t.violations().is_empty());
        t.landed("r1", 1, "terminal write", "a");
        assert_eq!(t.violations()[0].invariant, "superseded-write-landed");
    }
}
