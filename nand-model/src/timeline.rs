//! The analytical timing model (NVMeVirt style): every bank and every controller has a "free
//! at" time; an operation's completion time is computed at submission from them, under the
//! bank's lock (the caller holds it and passes the bank's `free_at`), taking the controller
//! pool's lock inside. `ctrl` below is the controller of the bank's pool that can start the
//! transfer first (`interconnect.rs`: under TMCD the channel's one controller, under PMCD any).
//!
//! `t_read` and `t_prog` below are the page's own (its page type's latency, times the
//! read-retry steps its block's wear asks for: `Timing::read_ns`, `Timing::prog_ns`); the
//! device computes them under the bank lock, where the page and its block's erase count are
//! known.
//!
//! ```text
//! read:    start = max(now, bank.free_at); sensed = start + t_read
//!          xfer_start = ctrl.first_gap(sensed, xfer(bytes)); end = xfer_start + xfer(bytes)
//!          bank.free_at = end                     (the bank holds the data until a controller
//!                                                  takes it)
//! program: xfer_start = ctrl.first_gap(max(now, bank.free_at), xfer)
//!          end = xfer_start + xfer + t_prog; bank.free_at = end
//! erase:   start = max(now, bank.free_at); end = start + t_erase; bank.free_at = end
//! copyback: start = max(now, bank.free_at); sensed = start + t_read
//!          (OOB read-out, if asked: xfer_start = ctrl.first_gap(sensed, xfer(oob)); sensed =
//!          xfer_start + xfer(oob))   end = sensed + t_prog; bank.free_at = end
//! ```
//!
//! With program/erase suspend (`Timing::suspend`), a read that arrives while the bank's last
//! scheduled operation is a program or erase in its array time does not queue behind it:
//!
//! ```text
//! suspend: start = now + t_suspend (or right after an earlier suspending read still running)
//!          sensed = start + t_read; end = transfer as for a read
//!          op.end += end - now + t_resume (or + end - previous read's end)
//! ```
//!
//! The suspended operation's [`crate::Completion`] follows its moving end.
//!
//! `ctrl.first_gap(t, d)`: the earliest time at or after `t` when the controller is free for
//! `d` (it keeps its busy intervals, so a transfer whose data is ready early slips into a gap
//! left before a later one: see `interconnect.rs`).
//!
//! "now" is the host's monotonic clock with timing `real` and the device's [`SimClock`] with
//! timing `virtual`; nothing else differs between the two.
//!
//! With timing off no timeline is kept: the deadline is "now", but busy time is still accounted
//! with the modelled durations so utilisation figures stay meaningful.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::clock::{now_ns, SimClock, ALREADY_DONE};
use crate::geometry::{BankId, Geometry};
use crate::interconnect::{Controllers, Interconnect};
use crate::stats::{BankCounters, OpCounters};
use crate::timing::{dur_ns, Timing, TimingMode};
use crate::waiting::TimerMode;

/// One bank's timeline, kept under the bank's lock.
#[derive(Default)]
pub(crate) struct BankTimeline {
    /// End of the bank's timeline (internal clock ns).
    pub(crate) free_at: u64,
    /// The bank's last scheduled operation, if it is a program or erase a read may suspend.
    suspendable: Option<Suspendable>,
}

/// A program's or erase's array time, which a read may suspend (`Timing::suspend`).
struct Suspendable {
    /// When its array time began (a program's transfer cannot be suspended).
    array_start: u64,
    /// When the last read that suspended it ends (then it resumes); 0 if none did.
    resume_at: u64,
    /// Its completion time, moved by each suspension; shared with its [`crate::Completion`].
    end: Arc<AtomicU64>,
}

/// Timing parameters plus the controller timelines.
pub(crate) struct Timeline {
    mode: TimingMode,
    /// The simulated clock (timing `virtual` only).
    sim: Option<Arc<SimClock>>,
    timing: Timing,
    t_erase: u64,
    t_suspend: u64,
    t_resume: u64,
    controllers: Controllers,
    /// The device's [`TimerMode`], handed to each completion.
    timer: AtomicU8,
}

impl Timeline {
    pub(crate) fn new(
        mode: TimingMode,
        timing: Timing,
        geometry: &Geometry,
        interconnect: Interconnect,
    ) -> Timeline {
        Timeline {
            mode,
            sim: (mode == TimingMode::Virtual).then(Arc::default),
            timing,
            t_erase: dur_ns(timing.t_erase),
            t_suspend: dur_ns(timing.suspend.t_suspend),
            t_resume: dur_ns(timing.suspend.t_resume),
            controllers: Controllers::new(geometry, interconnect),
            timer: AtomicU8::new(TimerMode::default().to_u8()),
        }
    }

    pub(crate) fn timer(&self) -> TimerMode {
        TimerMode::from_u8(self.timer.load(Ordering::Relaxed))
    }

    pub(crate) fn set_timer(&self, timer: TimerMode) {
        self.timer.store(timer.to_u8(), Ordering::Relaxed);
    }

    pub(crate) fn mode(&self) -> TimingMode {
        self.mode
    }

    /// The simulated clock, with timing `virtual`.
    pub(crate) fn sim(&self) -> Option<&Arc<SimClock>> {
        self.sim.as_ref()
    }

    /// "Now" on the timeline: the simulated clock with timing `virtual`, else the host's
    /// (or the arrival of the request being submitted for: `arrival.rs`).
    pub(crate) fn now(&self) -> u64 {
        match &self.sim {
            Some(c) => c.now_ns(),
            None => crate::arrival::submission_time(now_ns()),
        }
    }

    /// The device clock without any arrival scope.
    pub(crate) fn clock_ns(&self) -> u64 {
        match &self.sim {
            Some(c) => c.now_ns(),
            None => now_ns(),
        }
    }

    fn account_xfer(ops: &mut OpCounters, bytes: u64, ns: u64) {
        ops.xfers += 1;
        ops.xfer_bytes += bytes;
        ops.xfer_busy_ns += ns;
    }

    fn finish(
        ops: &mut OpCounters,
        live: &BankCounters,
        tl: &mut BankTimeline,
        start: u64,
        end: u64,
    ) {
        tl.free_at = end;
        // Whatever was last is no longer: a read now queues behind this operation.
        tl.suspendable = None;
        live.busy_until.store(end, Ordering::Relaxed);
        ops.busy_ns += end - start;
    }

    /// Makes the operation just finished on `tl` (array time from `array_start`) suspendable
    /// if the device suspends; returns the cell its completion follows.
    fn suspendable(&self, tl: &mut BankTimeline, array_start: u64) -> Option<Arc<AtomicU64>> {
        if !self.timing.suspend.enabled {
            return None;
        }
        let end = Arc::new(AtomicU64::new(tl.free_at));
        tl.suspendable = Some(Suspendable {
            array_start,
            resume_at: 0,
            end: Arc::clone(&end),
        });
        Some(end)
    }

    /// A read arriving at `now` that suspends the bank's program or erase, if the device
    /// suspends and one is in its array time: schedules the read's sensing and transfer, moves
    /// the suspended operation's end, and returns the read's end.
    #[allow(clippy::too_many_arguments)]
    fn suspending_read(
        &self,
        tl: &mut BankTimeline,
        ops: &mut OpCounters,
        live: &BankCounters,
        bank: BankId,
        now: u64,
        t_read: u64,
        xfer: u64,
    ) -> Option<u64> {
        let s = tl.suspendable.as_mut()?;
        if now < s.array_start || now >= tl.free_at {
            return None;
        }
        // Still suspended for an earlier read: run right after it, no second suspend/resume.
        let (start, from) = if now < s.resume_at {
            (s.resume_at, s.resume_at)
        } else {
            (now.saturating_add(self.t_suspend), now)
        };
        let sensed = start.saturating_add(t_read);
        let (_, end) = self.controllers.transfer(bank, sensed, xfer, now);
        let resume = if now < s.resume_at { 0 } else { self.t_resume };
        let delay = end.saturating_sub(from).saturating_add(resume);
        s.resume_at = end;
        tl.free_at = tl.free_at.saturating_add(delay);
        s.end.store(tl.free_at, Ordering::Release);
        live.busy_until.store(tl.free_at, Ordering::Relaxed);
        ops.busy_ns += delay;
        ops.suspends += 1;
        Some(end)
    }

    /// Completion time of a read of `bank` (array time `t_read` ns) moving `bytes` through a
    /// controller.
    pub(crate) fn read(
        &self,
        tl: &mut BankTimeline,
        ops: &mut OpCounters,
        live: &BankCounters,
        bank: BankId,
        t_read: u64,
        bytes: u64,
    ) -> u64 {
        let xfer = self.timing.xfer_ns(bytes);
        Self::account_xfer(ops, bytes, xfer);
        if self.mode == TimingMode::Off {
            ops.busy_ns += t_read + xfer;
            return ALREADY_DONE;
        }
        let now = self.now();
        if let Some(end) = self.suspending_read(tl, ops, live, bank, now, t_read, xfer) {
            return end;
        }
        let start = now.max(tl.free_at);
        let sensed = start.saturating_add(t_read);
        let (_, end) = self.controllers.transfer(bank, sensed, xfer, now);
        Self::finish(ops, live, tl, start, end);
        end
    }

    /// Completion time of a program of `bank` (array time `t_prog` ns) moving `bytes` through
    /// a controller, and the cell that time follows if reads may suspend it.
    pub(crate) fn program(
        &self,
        tl: &mut BankTimeline,
        ops: &mut OpCounters,
        live: &BankCounters,
        bank: BankId,
        t_prog: u64,
        bytes: u64,
    ) -> (u64, Option<Arc<AtomicU64>>) {
        let xfer = self.timing.xfer_ns(bytes);
        Self::account_xfer(ops, bytes, xfer);
        if self.mode == TimingMode::Off {
            ops.busy_ns += xfer + t_prog;
            return (ALREADY_DONE, None);
        }
        let now = self.now();
        let (start, xfer_end) = self
            .controllers
            .transfer(bank, now.max(tl.free_at), xfer, now);
        let end = xfer_end.saturating_add(t_prog);
        Self::finish(ops, live, tl, start, end);
        (end, self.suspendable(tl, xfer_end))
    }

    /// Completion time of a copyback (array times `t_read` of the source, `t_prog` of the
    /// destination) that reads `oob_bytes` of the page register out of `bank` through a
    /// controller between its internal read and its program (0: nothing crosses the channel).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copyback(
        &self,
        tl: &mut BankTimeline,
        ops: &mut OpCounters,
        live: &BankCounters,
        bank: BankId,
        (t_read, t_prog): (u64, u64),
        oob_bytes: u64,
    ) -> u64 {
        let xfer = if oob_bytes == 0 {
            0
        } else {
            let xfer = self.timing.xfer_ns(oob_bytes);
            Self::account_xfer(ops, oob_bytes, xfer);
            xfer
        };
        if self.mode == TimingMode::Off {
            ops.busy_ns += t_read + xfer + t_prog;
            return ALREADY_DONE;
        }
        let now = self.now();
        let start = now.max(tl.free_at);
        let mut sensed = start.saturating_add(t_read);
        if oob_bytes > 0 {
            sensed = self.controllers.transfer(bank, sensed, xfer, now).1;
        }
        let end = sensed.saturating_add(t_prog);
        Self::finish(ops, live, tl, start, end);
        end
    }

    /// Completion time of an erase, and the cell that time follows if reads may suspend it.
    pub(crate) fn erase(
        &self,
        tl: &mut BankTimeline,
        ops: &mut OpCounters,
        live: &BankCounters,
    ) -> (u64, Option<Arc<AtomicU64>>) {
        if self.mode == TimingMode::Off {
            ops.busy_ns += self.t_erase;
            return (ALREADY_DONE, None);
        }
        let now = self.now();
        let start = now.max(tl.free_at);
        let end = start.saturating_add(self.t_erase);
        Self::finish(ops, live, tl, start, end);
        (end, self.suspendable(tl, start))
    }
}
