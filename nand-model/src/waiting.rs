//! How a thread waits for a deadline on the host's clock: [`TimerMode`] `sleep`, `spin` or
//! `hybrid`, and the early margin hybrid waits use.
//!
//! An absolute sleep wakes late by the kernel's wake-up latency (~25 us on a KVM guest, more
//! under load); that lateness is added to every modelled completion. Spinning on the clock is
//! exact but burns a core for the whole wait. Hybrid sleeps until `deadline - margin` and spins
//! the rest, so it is exact whenever the wake-up was less late than the margin, and burns about
//! a margin of CPU per wait.
//!
//! Spinning is only worth it for a lone waiter: with several waits pending (a deep queue), the
//! timeline, not the wake-up, sets the pace, and spinning threads take the CPU the other
//! requests need. So a hybrid wait spins only when no other wait (blocking or future) is in
//! progress when it starts ([`WAITING`]); otherwise it sleeps to the deadline like `sleep`,
//! and a spinning wait goes back to sleep as soon as another wait starts.
//!
//! The margin is learnt, per kind of wake-up (a thread's own sleep, or a future woken by the
//! timer thread through its executor), from the lateness of the early wake-ups themselves: a
//! wake-up later than the margin pulls it up by the miss (at most half the margin, so one
//! descheduled thread does not make every later wait spin for milliseconds), every other one
//! lets it decay by 1/1024. Misses then settle at about margin / (1024 x mean step) of the
//! wake-ups, under 1 %: the margin sits near the 99th percentile of the wake-up latency and
//! follows the machine's load. (A quarter of the miss and 1/256, the first version, settled
//! near the 95th: p99 errors of 15-28 us on a busy machine.) The first value comes from a short calibration (a few sleeps
//! of 50 us) the first time a hybrid wait happens.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::clock::{now_ns, sleep_until};

/// How waits on the host's clock (timing `real`) pass the time until a deadline.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TimerMode {
    /// Absolute `clock_nanosleep` (and a futex-sleeping timer thread for futures): no CPU while
    /// waiting, late by the kernel's wake-up latency.
    Sleep,
    /// Sleep until a learnt margin before the deadline, then spin on the clock: on time when the
    /// wake-up was within the margin, about a margin of CPU per wait. Only a lone waiter spins;
    /// with other waits in progress it sleeps to the deadline.
    #[default]
    Hybrid,
    /// A blocking wait spins on the clock for its whole length (a core per waiting thread);
    /// futures behave as with `hybrid` (their executor thread is woken early and spins).
    Spin,
}

impl std::fmt::Display for TimerMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimerMode::Sleep => "sleep",
            TimerMode::Hybrid => "hybrid",
            TimerMode::Spin => "spin",
        })
    }
}

impl TimerMode {
    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(v: u8) -> TimerMode {
        match v {
            0 => TimerMode::Sleep,
            2 => TimerMode::Spin,
            _ => TimerMode::Hybrid,
        }
    }
}

/// Waits in progress on the host's clock: blocking waits and futures polled at least once and
/// not yet ready or dropped, spinning ones included. Counting from the start of a wait, not
/// from a future's registration with the timer thread, matters: futures that spin at once
/// never register, and counting only registered ones let every future of a deep queue think it
/// was alone (measured: 90 % of the server's CPU spinning at QD128).
pub(crate) static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Holds a place in [`WAITING`] for a blocking wait.
struct Waiting;

impl Waiting {
    /// Enters; true if no other wait was in progress.
    fn enter() -> (Waiting, bool) {
        (Waiting, WAITING.fetch_add(1, Ordering::Relaxed) == 0)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Smallest margin: below this a wake-up is never early enough to matter.
const MIN_MARGIN_NS: u64 = 2_000;
/// Largest margin: a wait never spins longer than this after a timely wake-up.
const MAX_MARGIN_NS: u64 = 1_000_000;
/// Largest margin of a future (its spin holds an executor thread).
const MAX_FUTURE_MARGIN_NS: u64 = 250_000;

/// A learnt early margin (see the module comment).
pub(crate) struct Margin {
    ns: AtomicU64,
    /// The most it may grow to.
    max: u64,
}

impl Margin {
    const fn new(max: u64) -> Margin {
        Margin {
            ns: AtomicU64::new(0),
            max,
        }
    }

    /// The current margin, calibrated on first use.
    pub(crate) fn get(&self) -> u64 {
        match self.ns.load(Ordering::Relaxed) {
            0 => {
                let m = calibrate().min(self.max);
                // Another thread may have calibrated meanwhile; either value is fine.
                let _ = self
                    .ns
                    .compare_exchange(0, m, Ordering::Relaxed, Ordering::Relaxed);
                self.ns.load(Ordering::Relaxed)
            }
            m => m,
        }
    }

    /// Replaces the margin, past its cap if need be, and returns the old one (tests that need
    /// a wait to fall inside it whatever the machine's scheduling).
    #[cfg(test)]
    pub(crate) fn replace_for_test(&self, ns: u64) -> u64 {
        self.ns.swap(ns, Ordering::Relaxed)
    }

    /// Learns from a wake-up `late_ns` after the early target it was asked for (which was
    /// `margin` before the deadline).
    pub(crate) fn observe(&self, margin: u64, late_ns: u64) {
        let next = if late_ns > margin {
            margin + (late_ns - margin).min(margin / 2 + 1)
        } else {
            margin - margin / 1024
        };
        // Relaxed and racy on purpose: a lost update only delays learning by one sample.
        self.ns
            .store(next.clamp(MIN_MARGIN_NS, self.max), Ordering::Relaxed);
    }
}

/// The margin of a thread's own sleeps (`Completion::wait`).
pub(crate) static SLEEP_MARGIN: Margin = Margin::new(MAX_MARGIN_NS);
/// The margin of a future's wake-up through the timer thread and its executor: capped lower,
/// as it spins on an executor thread other requests may be waiting for.
pub(crate) static FUTURE_MARGIN: Margin = Margin::new(MAX_FUTURE_MARGIN_NS);

/// The margins currently learnt, in nanoseconds: (blocking waits, futures); 0 before the first
/// hybrid wait of that kind. For reports (`timing_error`).
pub fn learnt_margins_ns() -> (u64, u64) {
    (
        SLEEP_MARGIN.ns.load(Ordering::Relaxed),
        FUTURE_MARGIN.ns.load(Ordering::Relaxed),
    )
}

/// A first margin: the 90th percentile lateness of a few short sleeps, doubled.
fn calibrate() -> u64 {
    static FIRST: OnceLock<u64> = OnceLock::new();
    *FIRST.get_or_init(|| {
        let mut late: Vec<u64> = (0..16)
            .map(|_| {
                let target = now_ns() + 50_000;
                sleep_until(target);
                now_ns().saturating_sub(target)
            })
            .collect();
        late.sort_unstable();
        (late[late.len() * 9 / 10] * 2).clamp(MIN_MARGIN_NS, MAX_MARGIN_NS)
    })
}

/// Spins until `deadline_ns` unless another wait starts meanwhile (then spinning would hold a
/// CPU the other needs); true if the deadline came.
pub(crate) fn spin_while_alone(deadline_ns: u64) -> bool {
    while now_ns() < deadline_ns {
        if WAITING.load(Ordering::Relaxed) > 1 {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// Spins until the clock reads at least `deadline_ns`.
pub(crate) fn spin_until(deadline_ns: u64) {
    while now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Blocks until `deadline_ns` the way `mode` says.
pub(crate) fn wait_until(deadline_ns: u64, mode: TimerMode) {
    match mode {
        TimerMode::Sleep => {
            // Counted too: a thread asleep on its own completion is a wait in progress, and a
            // hybrid wait elsewhere that thought itself alone would spin beside it (a writer
            // that sleeps because nobody waits for its commits passes `Sleep` under `hybrid`).
            let _waiting = Waiting::enter();
            sleep_until(deadline_ns)
        }
        TimerMode::Spin => spin_until(deadline_ns),
        TimerMode::Hybrid => {
            let (_waiting, alone) = Waiting::enter();
            if !alone {
                return sleep_until(deadline_ns);
            }
            let margin = SLEEP_MARGIN.get();
            let early = deadline_ns.saturating_sub(margin);
            if now_ns() < early {
                sleep_until(early);
                SLEEP_MARGIN.observe(margin, now_ns().saturating_sub(early));
            }
            if !spin_while_alone(deadline_ns) {
                sleep_until(deadline_ns);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_waits_until_the_deadline() {
        for mode in [TimerMode::Sleep, TimerMode::Hybrid, TimerMode::Spin] {
            let deadline = now_ns() + 300_000;
            wait_until(deadline, mode);
            assert!(now_ns() >= deadline, "{mode}");
            assert_eq!(TimerMode::from_u8(mode.to_u8()), mode);
        }
        assert!(SLEEP_MARGIN.get() >= MIN_MARGIN_NS);
    }

    #[test]
    fn margin_follows_late_wake_ups_and_decays() {
        let m = Margin::new(MAX_MARGIN_NS);
        m.ns.store(10_000, Ordering::Relaxed);
        m.observe(10_000, 30_000);
        assert_eq!(m.ns.load(Ordering::Relaxed), 15_001);
        m.observe(15_000, 17_000);
        assert_eq!(m.ns.load(Ordering::Relaxed), 17_000);
        m.ns.store(10_000, Ordering::Relaxed);
        for _ in 0..8000 {
            let cur = m.ns.load(Ordering::Relaxed);
            m.observe(cur, 0);
        }
        assert_eq!(m.ns.load(Ordering::Relaxed), MIN_MARGIN_NS);
        for _ in 0..40 {
            let cur = m.ns.load(Ordering::Relaxed);
            m.observe(cur, 10_000_000);
        }
        assert_eq!(m.ns.load(Ordering::Relaxed), MAX_MARGIN_NS);
        // A future's margin stops at its own, lower cap (its spin holds an executor thread).
        let f = Margin::new(MAX_FUTURE_MARGIN_NS);
        f.ns.store(200_000, Ordering::Relaxed);
        for _ in 0..40 {
            let cur = f.ns.load(Ordering::Relaxed);
            f.observe(cur, 10_000_000);
        }
        assert_eq!(f.ns.load(Ordering::Relaxed), MAX_FUTURE_MARGIN_NS);
    }
}
