//! [`Completion`]: the modelled completion time of a submitted operation, waited on by blocking
//! ([`Completion::wait`]) or asynchronously ([`Completion::into_future`]).
//!
//! The data effect of an operation happens at submission; the completion only says *when* the
//! modelled device would have finished. A completion also keeps its bank's `inflight` count: it is
//! incremented at submission and decremented exactly once when the completion (or the future made
//! from it) is waited or dropped.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::clock::{now_ns, to_instant, SimClock, ALREADY_DONE};
use crate::stats::BankCounters;
use crate::timer::{register, WakerSlot};
use crate::waiting::{spin_while_alone, wait_until, TimerMode, FUTURE_MARGIN, WAITING};

/// Decrements a bank's in-flight count when dropped.
#[derive(Debug)]
struct InflightGuard(Arc<BankCounters>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.retire();
    }
}

/// The modelled completion of one NAND operation.
#[derive(Debug)]
#[must_use = "a Completion says when the operation finishes; wait on it or drop it deliberately"]
pub struct Completion {
    deadline_ns: u64,
    /// With program/erase suspend, the cell a program's or erase's completion time follows:
    /// reads that suspend it move it later (`timeline.rs`).
    moves: Option<Arc<AtomicU64>>,
    /// The device's simulated clock with timing `virtual`: waiting moves it instead of sleeping.
    sim: Option<Arc<SimClock>>,
    /// How a wait on the host's clock passes the time (the device's setting at submission).
    timer: TimerMode,
    _inflight: InflightGuard,
}

impl Completion {
    pub(crate) fn new(
        deadline_ns: u64,
        bank: Arc<BankCounters>,
        sim: Option<&Arc<SimClock>>,
        timer: TimerMode,
    ) -> Completion {
        bank.submit();
        Completion {
            deadline_ns,
            moves: None,
            sim: sim.cloned(),
            timer,
            _inflight: InflightGuard(bank),
        }
    }

    /// Follows `moves` (a suspendable operation's moving end) instead of the fixed deadline.
    pub(crate) fn following(mut self, moves: Option<Arc<AtomicU64>>) -> Completion {
        self.moves = moves;
        self
    }

    /// The completion time now (a suspended program or erase finishes later than first
    /// computed).
    fn current_ns(&self) -> u64 {
        match &self.moves {
            Some(m) => m.load(AtomicOrdering::Acquire),
            None => self.deadline_ns,
        }
    }

    /// When the operation completes on the modelled device (with timing off, a time already past;
    /// with timing `virtual` meaningless: see [`Completion::deadline_ns`]).
    pub fn deadline(&self) -> Instant {
        to_instant(self.current_ns())
    }

    /// When a thread that also waits for other events (a channel with a timeout) should wake
    /// to finish this wait with [`Completion::wait`] on time: the deadline minus the margin
    /// the device's timer has learnt for blocking waits (the deadline itself with timer
    /// `sleep`, or before any hybrid wait has run).
    pub fn wake_hint(&self) -> Instant {
        let d = self.current_ns();
        match self.timer {
            TimerMode::Sleep => to_instant(d),
            TimerMode::Hybrid | TimerMode::Spin => {
                to_instant(d.saturating_sub(crate::waiting::learnt_margins_ns().0))
            }
        }
    }

    /// The completion time on the device's clock in nanoseconds: the simulated clock with
    /// timing `virtual`, `CLOCK_MONOTONIC` with `real`, 0 with `off`.
    pub fn deadline_ns(&self) -> u64 {
        self.current_ns()
    }

    /// True once the deadline has passed (on the simulated clock with timing `virtual`).
    pub fn is_complete(&self) -> bool {
        let d = self.current_ns();
        d == ALREADY_DONE
            || match &self.sim {
                Some(c) => c.now_ns() >= d,
                None => now_ns() >= d,
            }
    }

    /// Blocks the calling thread until the deadline, the way the device's [`TimerMode`] says
    /// (sleep: absolute `clock_nanosleep` with 1 ns timer slack for this thread; hybrid: that
    /// until a learnt margin before the deadline, then a spin; spin: a spin). Returns at once
    /// with timing off or when the deadline has passed.
    /// With timing `virtual` it moves the simulated clock to the deadline (if it is earlier)
    /// and returns at once.
    pub fn wait(self) {
        let timer = self.timer;
        self.wait_as(timer);
    }

    /// [`Completion::wait`] with timer `timer` instead of the device's setting (a waiter that
    /// knows nobody needs its wake-up to be exact passes [`TimerMode::Sleep`]).
    pub fn wait_as(self, timer: TimerMode) {
        if let Some(c) = &self.sim {
            c.advance_to(self.current_ns());
        } else if self.deadline_ns != ALREADY_DONE {
            // A suspension may move the end while we wait: wait again until it stays.
            let end = loop {
                let d = self.current_ns();
                wait_until(d, timer);
                if self.current_ns() <= d {
                    break d;
                }
            };
            // Also when it was done before the wait: what this thread submits next depends on
            // it and cannot be dated before it (see `arrival::submission_time`).
            crate::arrival::note_wait_end(end);
        }
    }

    /// A runtime-agnostic future that is ready at the deadline (woken by the crate's timer
    /// thread). It is ready on first poll if the deadline has already passed.
    ///
    /// With timer `hybrid` or `spin`, a future that is the only waiter (in the process)
    /// is woken by the timer thread a learnt margin before its deadline and spins the rest
    /// on its executor's thread, so both wake-ups (timer thread, then executor) are absorbed;
    /// a deadline closer than the margin is spun for at once. While other futures wait too,
    /// it is woken at the deadline instead: spinning would hold an executor thread that the
    /// others' completions need (measured through NBD at QD128: a third of the IOPS), and
    /// under load the timeline, not the wake-up, sets the pace.
    pub fn into_future(self) -> CompletionFuture {
        CompletionFuture {
            completion: self,
            slot: None,
            margin: 0,
            counted: false,
            wake_at: 0,
        }
    }
}

impl IntoFuture for Completion {
    type Output = ();
    type IntoFuture = CompletionFuture;

    fn into_future(self) -> CompletionFuture {
        Completion::into_future(self)
    }
}

/// Future form of a [`Completion`]; see [`Completion::into_future`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct CompletionFuture {
    completion: Completion,
    /// Registered with the timer on the first pending poll.
    slot: Option<Arc<WakerSlot>>,
    /// How early the timer was asked to wake the task (0: at the deadline).
    margin: u64,
    /// Counted in [`WAITING`].
    counted: bool,
    /// The time `slot` was registered for (deadline minus margin, at registration).
    wake_at: u64,
}

impl CompletionFuture {
    /// The operation's modelled completion time.
    pub fn deadline(&self) -> Instant {
        self.completion.deadline()
    }
}

impl CompletionFuture {
    /// Forgets the timer registration and leaves the waiting count (the future is ready).
    fn unregister(&mut self) {
        self.slot = None;
        if std::mem::take(&mut self.counted) {
            WAITING.fetch_sub(1, AtomicOrdering::Relaxed);
        }
    }
}

impl Drop for CompletionFuture {
    fn drop(&mut self) {
        self.unregister();
    }
}

/// A future registered for a wake-up time nearer than this looks at the clock again after
/// registering (see [`CompletionFuture::poll`]).
const RECHECK_WITHIN_NS: u64 = 20_000;

impl Future for CompletionFuture {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let deadline = this.completion.current_ns();
        // Simulated time never waits for the host: the clock moves to the deadline.
        if let Some(c) = &this.completion.sim {
            c.advance_to(deadline);
            return Poll::Ready(());
        }
        if deadline == ALREADY_DONE {
            return Poll::Ready(());
        }
        if this.margin == 0
            && this.wake_at == deadline
            && this.slot.as_ref().is_some_and(|s| s.fired())
        {
            // Woken by the timer for the deadline itself (no early margin, and no suspension
            // moved it since): the timer fires only deadlines that have passed, so the clock
            // need not be read (under load the clock reads were 3 % of the server's CPU).
            this.unregister();
            return Poll::Ready(());
        }
        let mut now = now_ns();
        let first = !this.counted;
        if first {
            // First poll: wake early and spin only when no other future waits.
            this.counted = true;
            let alone = WAITING.fetch_add(1, AtomicOrdering::Relaxed) == 0;
            if this.completion.timer != TimerMode::Sleep && alone {
                this.margin = FUTURE_MARGIN.get();
            }
        }
        if first && this.margin > 0 && now < deadline && now >= deadline.saturating_sub(this.margin)
        {
            // Never spin in the first poll. It is made by whoever issued the operation, often
            // inline before it reads its next request (the NBD connection's reader polls each
            // request once before it hands it to the connection's reply task): a spin there
            // holds up the very requests whose waits would have stopped it
            // (`spin_while_alone`), and a deep queue ran one request at a time, each alone
            // (measured: 128 KiB sequential reads at QD32 on nvmevirt-970pro, 58 % of the
            // server's CPU in this spin and 1.0 GB/s against 2.8 GB/s with timer `sleep`).
            // Asked to be polled again at once, the future spins where it is polled next
            // instead (the NBD reply task), and stops as soon as the issuer starts another
            // wait. (With one runtime worker, `ftld serve`'s default on 2 CPUs, the issuer
            // cannot run meanwhile: the spin then lasts its margin, tens of microseconds.)
            // (A ublk queue thread runs that task before it looks at its ring again, so there
            // a lone wait still spins on the queue thread, as before; it reaps its ring's
            // completions in batches, so a deep queue does not fall into one-at-a-time.)
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if this.margin > 0 && now >= deadline.saturating_sub(this.margin) {
            if this.slot.as_ref().is_some_and(|s| s.fired()) {
                // Woken by the timer: learn how late that was against the early target.
                FUTURE_MARGIN.observe(this.margin, now - deadline.saturating_sub(this.margin));
            }
            if spin_while_alone(deadline) {
                this.unregister();
                return Poll::Ready(());
            }
            // Another wait started: stop spinning, be woken at the deadline instead.
            this.margin = 0;
            this.slot = None;
            now = now_ns();
        }
        let wake_at = deadline.saturating_sub(this.margin);
        if now >= deadline {
            this.unregister();
            return Poll::Ready(());
        }
        match &this.slot {
            // Still registered: make sure the timer wakes the current task. The timer may fire
            // meanwhile, taking the waker this poll replaces (often the issuer's: see above);
            // `set_unless_fired` says so, and the task polls again at once.
            Some(slot) if !slot.fired() => {
                if !slot.set_unless_fired(cx.waker()) {
                    cx.waker().wake_by_ref();
                }
            }
            // First pending poll, or the timer fired for a wake-up time the deadline has since
            // moved past (a suspension moves it later): register (again).
            _ => {
                let slot = Arc::new(WakerSlot::default());
                // A fresh slot: nothing can have fired it.
                slot.set_unless_fired(cx.waker());
                register(wake_at, Arc::clone(&slot));
                this.slot = Some(slot);
                this.wake_at = wake_at;
            }
        }
        // A shortcut, not needed for correctness (the registered slot fires whatever the
        // clock says now): a near wake-up time may have passed while registering (an arm of
        // the timer takes up to ~10 us in a virtual machine); then poll again at once rather
        // than after the timer's round trip (an early wake-up time is handled by polling
        // again: the spin is there). A farther one cannot have passed unless the thread was
        // preempted.
        if wake_at <= now.saturating_add(RECHECK_WITHIN_NS) && now_ns() >= wake_at {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A future whose deadline is already inside the spin margin, polled first by the code
    /// that issued it (here with a no-op waker, as the NBD reader polls a request inline),
    /// returns at once and asks to be polled again; it does not spin there. (Spinning in the
    /// first poll held up the issuer's next requests: a deep queue ran one request at a time.)
    /// The margin and the deadline are seconds long, so the outcome does not depend on this
    /// machine's scheduling: the old code spun for 5 s and returned Ready.
    #[test]
    fn the_first_poll_never_spins() {
        let before = crate::waiting::FUTURE_MARGIN.replace_for_test(10_000_000_000);
        let deadline = now_ns() + 5_000_000_000;
        let bank = Arc::new(BankCounters::default());
        let c = Completion::new(deadline, Arc::clone(&bank), None, TimerMode::Hybrid);
        let mut f = Box::pin(c.into_future());
        let mut noop = Context::from_waker(std::task::Waker::noop());
        let polled = f.as_mut().poll(&mut noop);
        crate::waiting::FUTURE_MARGIN.replace_for_test(before);
        assert!(polled.is_pending(), "the first poll spun to the deadline");
        assert!(now_ns() < deadline);
        drop(f);
        assert_eq!(bank.inflight.load(AtomicOrdering::Relaxed), 0);
        // A first poll after the deadline is ready at once. (In the same test: two futures in
        // parallel tests would each see the other waiting, and neither would try to spin.)
        let c = Completion::new(now_ns(), bank, None, TimerMode::Hybrid);
        let mut f = Box::pin(c.into_future());
        assert!(f.as_mut().poll(&mut noop).is_ready());
    }
}
