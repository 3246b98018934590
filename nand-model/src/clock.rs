//! The crate's clock and its high-resolution absolute sleep.
//!
//! Internally all times are nanoseconds of `CLOCK_MONOTONIC` read with `clock_gettime` (a vDSO
//! call, ~20 ns). Using one integer clock everywhere keeps the timeline, the timer thread and
//! [`crate::Completion`] consistent with each other. `std::time::Instant` also reads
//! `CLOCK_MONOTONIC` on Linux but does not expose its value, so the API converts through an epoch
//! pair (an `Instant` and a `clock_gettime` reading taken back to back; skew well below 1 us).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The completion time of operations with timing off: a time that has always passed, so the
/// hot paths need not read the clock at all.
pub(crate) const ALREADY_DONE: u64 = 0;

/// Current `CLOCK_MONOTONIC` time in nanoseconds.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on Linux,
    // so the call cannot fail and only writes `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // Monotonic time is never negative.
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds as a `timespec`.
pub(crate) fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// The simulated clock of a device with [`crate::TimingMode::Virtual`]: nanoseconds since the
/// simulation began.
///
/// It is "the time the caller acts at": a NAND operation submitted now starts no earlier than
/// it, and waiting on a [`crate::Completion`] moves it forward to the deadline instead of
/// sleeping. A simulation driver sets it before each actor's step (a host request at its
/// arrival, a background worker at its own time), so it may move backwards between steps: the
/// bank and controller timelines, not this clock, keep the device's resources in order.
/// Nothing here reads the host's clock, which is what makes a virtual run deterministic.
#[derive(Debug, Default)]
pub struct SimClock {
    now: AtomicU64,
}

impl SimClock {
    /// The current simulated time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }

    /// Sets the simulated time (the driver's choice of who acts when).
    pub fn set_ns(&self, ns: u64) {
        self.now.store(ns, Ordering::Release);
    }

    /// Moves the clock forward to `ns` if it is earlier (a wait for a completion).
    pub fn advance_to(&self, ns: u64) {
        self.now.fetch_max(ns, Ordering::AcqRel);
    }
}

struct Epoch {
    instant: Instant,
    ns: u64,
}

fn epoch() -> &'static Epoch {
    static EPOCH: OnceLock<Epoch> = OnceLock::new();
    EPOCH.get_or_init(|| {
        // A preemption between the readings would skew every conversion by up to its length
        // (and a wait could then look early against an `Instant` deadline): keep the tightest
        // of several tries. The `Instant` is paired with the reading *after* it, never one
        // before: the instant was taken no later than that, so a converted deadline is never
        // later than the internal one, and a wait that ended on time on the internal clock
        // is on time against its `Instant` too (pairing with the midpoint left up to half a
        // gap the other way: CI saw "a future completed before its deadline" in the timing
        // tests, all of them in one process at once).
        let mut best: Option<(u64, Epoch)> = None;
        for _ in 0..1000 {
            let before = now_ns();
            let instant = Instant::now();
            let after = now_ns();
            let gap = after - before;
            if best.as_ref().is_none_or(|(g, _)| gap < *g) {
                best = Some((gap, Epoch { instant, ns: after }));
            }
            if gap < 1_000 {
                break;
            }
        }
        best.map(|(_, e)| e).expect("at least one try")
    })
}

/// The `Instant` for an internal clock reading.
pub(crate) fn to_instant(ns: u64) -> Instant {
    let e = epoch();
    if ns >= e.ns {
        e.instant + Duration::from_nanos(ns - e.ns)
    } else {
        e.instant
            .checked_sub(Duration::from_nanos(e.ns - ns))
            .unwrap_or(e.instant)
    }
}

/// Lowers the calling thread's timer slack to 1 ns, once per thread.
///
/// The default slack (50 us) lets the kernel delay a timer wake-up by up to that much to batch
/// wake-ups; with 1 ns an absolute sleep wakes within the scheduler's latency instead. The
/// setting is per thread, so it is applied lazily in every thread that waits.
pub(crate) fn lower_timer_slack() {
    thread_local! {
        static DONE: Cell<bool> = const { Cell::new(false) };
    }
    DONE.with(|done| {
        if !done.get() {
            // SAFETY: PR_SET_TIMERSLACK takes an integer argument and only changes this thread's
            // timer slack; no memory is passed to the kernel.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
            done.set(true);
        }
    });
}

/// Sleeps until the internal clock reads at least `deadline_ns` (absolute, so a late wake-up
/// or an interruption never accumulates error).
pub(crate) fn sleep_until(deadline_ns: u64) {
    if now_ns() >= deadline_ns {
        return;
    }
    lower_timer_slack();
    let ts = timespec(deadline_ns);
    loop {
        // SAFETY: `ts` is a valid timespec that lives across the call; the remaining-time pointer
        // may be null with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        // EINTR: a signal interrupted the sleep; the deadline is absolute, so just sleep again.
        if rc != libc::EINTR {
            break;
        }
    }
}

/// Sleeps until `deadline` as precisely as the model's own waits (1 ns timer slack, an
/// absolute deadline): for drivers that must send requests on time (`ftld replay --timing
/// real`).
pub fn precise_sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        sleep_until(now_ns() + (deadline - now).as_nanos() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instant_conversion_agrees_with_std() {
        let ns = now_ns();
        let i = Instant::now();
        let conv = to_instant(ns);
        let diff = if conv > i { conv - i } else { i - conv };
        assert!(diff < Duration::from_millis(1), "{diff:?}");
    }

    #[test]
    fn sleep_until_is_absolute() {
        let start = now_ns();
        sleep_until(start + 2_000_000);
        assert!(now_ns() >= start + 2_000_000);
        sleep_until(0);
        let d = Instant::now() + Duration::from_millis(2);
        precise_sleep_until(d);
        assert!(Instant::now() >= d);
        precise_sleep_until(d - Duration::from_millis(1));
    }
}
