//! A single-threaded deterministic executor on virtual time.
//!
//! Every scheduling decision comes from the seeded [`Rng`]: which ready task runs next is drawn at
//! random, so the interleavings are many but each seed replays exactly. Time moves only when no
//! task can run (to the earliest timer) or when a task jumps it ([`VirtualTime::jump`]), so a
//! 30-second budget costs nothing and a clock jump is one call.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use reaper_core::domain::EpochMs;
use reaper_core::ports::{Clock, Sleeper};

use crate::rng::Rng;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug, Default)]
struct TimeState {
    now: EpochMs,
    seq: u64,
    /// Pending sleeps by (deadline, registration order): the order timers fire in is part of the
    /// schedule, so it must not depend on anything but the seed.
    timers: BTreeMap<(EpochMs, u64), Waker>,
}

/// The simulation's one clock and timer wheel. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct VirtualTime(Arc<Mutex<TimeState>>);

impl VirtualTime {
    pub fn new(now: EpochMs) -> Self {
        VirtualTime(Arc::new(Mutex::new(TimeState {
            now,
            ..TimeState::default()
        })))
    }

    pub fn now(&self) -> EpochMs {
        lock(&self.0).now
    }

    /// Moves the clock forward by `ms` at once (a paused VM, a long GC, an NTP step): every timer
    /// now due fires, in deadline order, whoever the scheduler picks first.
    pub fn jump(&self, ms: u64) {
        let mut t = lock(&self.0);
        t.now = t.now.saturating_add(ms as i64);
        let now = t.now;
        wake_due(&mut t, now);
    }

    /// Advances to the earliest timer and fires everything due then. False when no timer is
    /// pending (nothing can ever make progress again).
    fn advance(&self) -> bool {
        let mut t = lock(&self.0);
        let Some((&(deadline, _), _)) = t.timers.iter().next() else {
            return false;
        };
        t.now = t.now.max(deadline);
        let now = t.now;
        wake_due(&mut t, now);
        true
    }

    /// A sleep of `ms` on this clock.
    pub fn sleep(&self, ms: u64) -> Sleep {
        let deadline = self.now().saturating_add(ms as i64);
        Sleep {
            time: self.clone(),
            deadline,
            slot: None,
        }
    }
}

fn wake_due(t: &mut TimeState, now: EpochMs) {
    while let Some(entry) = t.timers.first_entry() {
        if entry.key().0 > now {
            break;
        }
        entry.remove().wake();
    }
}

impl Clock for VirtualTime {
    fn now_ms(&self) -> EpochMs {
        self.now()
    }
}

#[async_trait::async_trait]
impl Sleeper for VirtualTime {
    async fn sleep(&self, ms: u64) {
        VirtualTime::sleep(self, ms).await
    }
}

/// A clock that reads the shared time plus a fixed skew: one host's badly synchronised clock.
#[derive(Debug, Clone)]
pub struct SkewedClock {
    pub time: VirtualTime,
    pub skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> EpochMs {
        self.time.now().saturating_add(self.skew_ms)
    }
}

/// The future of [`VirtualTime::sleep`]. Dropping it unregisters its timer, so a cancelled sleep
/// never drags the clock forward.
#[derive(Debug)]
pub struct Sleep {
    time: VirtualTime,
    deadline: EpochMs,
    slot: Option<(EpochMs, u64)>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut t = lock(&self.time.0);
        if let Some(slot) = self.slot {
            t.timers.remove(&slot);
        }
        if t.now >= self.deadline {
            drop(t);
            self.slot = None;
            return Poll::Ready(());
        }
        t.seq += 1;
        let slot = (self.deadline, t.seq);
        t.timers.insert(slot, cx.waker().clone());
        drop(t);
        self.slot = Some(slot);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            lock(&self.time.0).timers.remove(&slot);
        }
    }
}

/// Yields to the scheduler once: another ready task may run before this one continues.
pub fn yield_now() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

struct TaskWaker {
    id: usize,
    ready: Arc<Mutex<BTreeSet<usize>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.ready).insert(self.id);
    }
}

/// Why [`Executor::run`] stopped before every task finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stall {
    /// Tasks remain but none is ready and no timer is pending: they wait for ever.
    Deadlock { blocked: Vec<String> },
    /// More polls than the limit: something spins without making progress.
    Livelock { polls: u64 },
}

/// Runs named tasks to completion, choosing among the ready ones with the seeded RNG.
pub struct Executor {
    tasks: Vec<Option<(String, Task)>>,
    ready: Arc<Mutex<BTreeSet<usize>>>,
    time: VirtualTime,
    rng: Rng,
    polls: u64,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("tasks", &self.tasks.iter().flatten().count())
            .field("polls", &self.polls)
            .finish_non_exhaustive()
    }
}

impl Executor {
    pub fn new(time: VirtualTime, rng: Rng) -> Self {
        Executor {
            tasks: Vec::new(),
            ready: Arc::default(),
            time,
            rng,
            polls: 0,
        }
    }

    pub fn spawn(&mut self, name: impl Into<String>, task: impl Future<Output = ()> + 'static) {
        let id = self.tasks.len();
        self.tasks.push(Some((name.into(), Box::pin(task))));
        lock(&self.ready).insert(id);
    }

    /// Polls until every spawned task has finished (`Ok`), or reports the stall.
    pub fn run(&mut self, max_polls: u64) -> Result<(), Stall> {
        loop {
            if self.tasks.iter().all(Option::is_none) {
                self.tasks.clear();
                return Ok(());
            }
            let next = {
                let mut ready = lock(&self.ready);
                let n = ready.len() as u64;
                if n == 0 {
                    None
                } else {
                    let pick = *ready
                        .iter()
                        .nth(self.rng.below(n) as usize)
                        .expect("index below len");
                    ready.remove(&pick);
                    Some(pick)
                }
            };
            let Some(id) = next else {
                if self.time.advance() {
                    continue;
                }
                let blocked = self
                    .tasks
                    .iter()
                    .flatten()
                    .map(|(n, _)| n.clone())
                    .collect();
                return Err(Stall::Deadlock { blocked });
            };
            let Some((_, task)) = self.tasks[id].as_mut() else {
                continue; // woken after it finished
            };
            self.polls += 1;
            if self.polls > max_polls {
                return Err(Stall::Livelock { polls: self.polls });
            }
            let waker = Waker::from(Arc::new(TaskWaker {
                id,
                ready: self.ready.clone(),
            }));
            if task
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
            {
                self.tasks[id] = None;
            }
        }
    }

    pub fn polls(&self) -> u64 {
        self.polls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn sleeps_finish_in_deadline_order_without_real_waiting() {
        let time = VirtualTime::new(0);
        let order = Rc::new(RefCell::new(Vec::new()));
        let mut ex = Executor::new(time.clone(), Rng::new(3));
        for (name, ms) in [("late", 30_000u64), ("early", 10), ("mid", 5_000)] {
            let (t, o) = (time.clone(), order.clone());
            ex.spawn(name, async move {
                t.sleep(ms).await;
                o.borrow_mut().push((name, t.now()));
            });
        }
        ex.run(1_000).unwrap();
        assert_eq!(
            *order.borrow(),
            vec![("early", 10), ("mid", 5_000), ("late", 30_000)]
        );
    }

    #[test]
    fn a_jump_fires_every_timer_it_passes() {
        let time = VirtualTime::new(0);
        let fired = Rc::new(RefCell::new(Vec::new()));
        let mut ex = Executor::new(time.clone(), Rng::new(1));
        let (t, f) = (time.clone(), fired.clone());
        let sleep = time.sleep(60_000); // due at 60 s, whenever the jump comes
        ex.spawn("sleeper", async move {
            sleep.await;
            f.borrow_mut().push(t.now());
        });
        let t = time.clone();
        ex.spawn("jumper", async move {
            yield_now().await;
            t.jump(90_000);
        });
        ex.run(1_000).unwrap();
        assert_eq!(*fired.borrow(), vec![90_000]);
    }

    #[test]
    fn a_task_waiting_for_nothing_is_a_deadlock() {
        let mut ex = Executor::new(VirtualTime::new(0), Rng::new(1));
        ex.spawn("stuck", std::future::pending::<()>());
        assert_eq!(
            ex.run(100),
            Err(Stall::Deadlock {
                blocked: vec!["stuck".into()]
            })
        );
    }

    #[test]
    fn a_task_that_never_stops_yielding_is_a_livelock() {
        let mut ex = Executor::new(VirtualTime::new(0), Rng::new(1));
        ex.spawn("spinner", async {
            loop {
                yield_now().await;
            }
        });
        assert_eq!(ex.run(50), Err(Stall::Livelock { polls: 51 }));
    }

    #[test]
    fn the_same_seed_interleaves_the_same_way() {
        let trace = |seed| {
            let log = Rc::new(RefCell::new(String::new()));
            let mut ex = Executor::new(VirtualTime::new(0), Rng::new(seed));
            for name in ["a", "b", "c"] {
                let l = log.clone();
                ex.spawn(name, async move {
                    for _ in 0..4 {
                        l.borrow_mut().push_str(name);
                        yield_now().await;
                    }
                });
            }
            ex.run(1_000).unwrap();
            let s = log.borrow().clone();
            s
        };
        assert_eq!(trace(9), trace(9));
        assert!(
            (0..20).any(|s| trace(s) != trace(9)),
            "seeds never change the order"
        );
    }
}
