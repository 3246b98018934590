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
//! `ctrl.first_gap(t, d)`: the earliest time at or after `t` when the controller is free for
//! `d` (it keeps its busy intervals, so a transfer whose data is ready early slips into a gap
//! left before a later one: see `interconnect.rs`).
//!
//! "now" is the host's monotonic clock with timing `real` and the device's [`SimClock`] with
//! timing `virtual`; nothing else differs between the two.
//!
//! With timing off no timeline is kept: the deadline is "now", but busy time is still accounted
//! with the modelled durations so utilisation figures stay meaningful.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::clock::{now_ns, SimClock, ALREADY_DONE};
use crate::geometry::{BankId, Geometry};
use crate::interconnect::{Controllers, Interconnect};
use crate::stats::{BankCounters, OpCounters};
use crate::timing::{dur_ns, Timing, TimingMode};
use crate::waiting::TimerMode;

/// Timing parameters plus the controller timelines.
pub(crate) struct Timeline {
    mode: TimingMode,
    /// The simulated clock (timing `virtual` only).
    sim: Option<Arc<SimClock>>,
    timing: Timing,
    t_erase: u64,
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

    /// "Now" on the timeline: the simulated clock with timing `virtual`, else the host's.
    pub(crate) fn now(&self) -> u64 {
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

    fn finish(ops: &mut OpCounters, live: &BankCounters, free_at: &mut u64, start: u64, end: u64) {
        *free_at = end;
        live.busy_until.store(end, Ordering::Relaxed);
        ops.busy_ns += end - start;
    }

    /// Completion time of a read of `bank` (array time `t_read` ns) moving `bytes` through a
    /// controller.
    pub(crate) fn read(
        &self,
        free_at: &mut u64,
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
        let start = now.max(*free_at);
        let sensed = start.saturating_add(t_read);
        let (_, end) = self.controllers.transfer(bank, sensed, xfer, now);
        Self::finish(ops, live, free_at, start, end);
        end
    }

    /// Completion time of a program of `bank` (array time `t_prog` ns) moving `bytes` through
    /// a controller.
    pub(crate) fn program(
        &self,
        free_at: &mut u64,
        ops: &mut OpCounters,
        live: &BankCounters,
        bank: BankId,
        t_prog: u64,
        bytes: u64,
    ) -> u64 {
        let xfer = self.timing.xfer_ns(bytes);
        Self::account_xfer(ops, bytes, xfer);
        if self.mode == TimingMode::Off {
            ops.busy_ns += xfer + t_prog;
            return ALREADY_DONE;
        }
        let now = self.now();
        let (start, xfer_end) = self.controllers.transfer(bank, now.max(*free_at), xfer, now);
        let end = xfer_end.saturating_add(t_prog);
        Self::finish(ops, live, free_at, start, end);
        end
    }

    /// Completion time of a copyback (array times `t_read` of the source, `t_prog` of the
    /// destination) that reads `oob_bytes` of the page register out of `bank` through a
    /// controller between its internal read and its program (0: nothing crosses the channel).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copyback(
        &self,
        free_at: &mut u64,
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
        let start = now.max(*free_at);
        let mut sensed = start.saturating_add(t_read);
        if oob_bytes > 0 {
            sensed = self.controllers.transfer(bank, sensed, xfer, now).1;
        }
        let end = sensed.saturating_add(t_prog);
        Self::finish(ops, live, free_at, start, end);
        end
    }

    /// Completion time of an erase.
    pub(crate) fn erase(
        &self,
        free_at: &mut u64,
        ops: &mut OpCounters,
        live: &BankCounters,
    ) -> u64 {
        if self.mode == TimingMode::Off {
            ops.busy_ns += self.t_erase;
            return ALREADY_DONE;
        }
        let now = self.now();
        let start = now.max(*free_at);
        let end = start.saturating_add(self.t_erase);
        Self::finish(ops, live, free_at, start, end);
        end
    }
}
