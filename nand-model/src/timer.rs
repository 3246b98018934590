//! The crate-global timer that wakes [`crate::CompletionFuture`]s.
//!
//! It keeps a min-heap of `(deadline, waker slot)` and is driven one of two ways:
//!
//! - **Its own thread** (the default, started lazily). It sleeps until the earliest deadline
//!   with `FUTEX_WAIT_BITSET`, whose timeout is an *absolute* `CLOCK_MONOTONIC` time (like
//!   `clock_nanosleep(TIMER_ABSTIME)`) but which another thread can interrupt with `FUTEX_WAKE`
//!   when it registers an earlier deadline. Its timer slack is 1 ns. Lost-wake-up freedom: the
//!   thread reads the futex word while holding the heap lock and then waits only if the word
//!   still has that value; a registrant pushes under the lock and bumps the word *after*
//!   unlocking, so either the thread saw the new entry or its wait returns at once.
//! - **An event loop's timerfd** ([`EventLoopTimer`], installed before the first wait): the
//!   heap arms a `CLOCK_MONOTONIC` timerfd at its earliest deadline, and the loop that watches
//!   the fd fires what is due when it becomes readable ([`EventLoopTimer::fire_due`]). The
//!   futures are then woken from the thread that saw the deadline, an executor worker, instead
//!   of a timer thread that wakes and then wakes a worker: one wake-up per expiry instead of
//!   two. Measured through NBD with 4 x QD32 4 KiB random reads (benches/README.md, issue 13):
//!   the timer thread was ~26 % of the server's CPU at ~140 k completions/s on a 2-vCPU guest,
//!   most of it its own sleep and wake-up. The fd is armed under the heap lock (by a
//!   registrant whose deadline became the earliest, and by `fire_due` for the next one), so
//!   the armed time is the heap's earliest whenever the loop is not polling.
//!
//!   When the next deadline is near, the loop looks at the clock again after running what it
//!   woke instead of arming the fd ([`EventLoopTimer::fire_due_polling`]): in a virtual
//!   machine every arm and expiry of a near timer is an exit to the host. While it polls the
//!   fd may be unarmed (or armed by a registrant for a deadline it made the earliest, which
//!   then only makes the fd readable once more); the loop arms it for the heap's earliest
//!   before it stops polling.
//!
//! Either way the heap lock is held only to push, pop and arm, never while waking a future.
//! The thread lives as long as the process and costs nothing while the heap is empty.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering as AtomicOrdering;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, OnceLock};
use std::task::Waker;

use parking_lot::Mutex;

use crate::clock::{lower_timer_slack, now_ns, timespec};

/// Where the timer finds the waker of one pending future. The future may replace the waker on
/// every poll; the timer takes it once.
#[derive(Default, Debug)]
pub(crate) struct WakerSlot {
    waker: Mutex<Option<Waker>>,
    fired: AtomicBool,
}

impl WakerSlot {
    /// Stores the waker to call at the deadline (keeps the old one if it would wake the same
    /// task) and returns true, or returns false if the timer has fired the slot already (its
    /// waker, an earlier one, was taken and called: this one would never be).
    ///
    /// The check is made under the slot's lock, and [`Self::fire`] marks the slot before it
    /// takes that lock: either the mark is seen here, or `fire` takes the lock after this and
    /// calls the waker stored (the lock alone orders the two; `fire` must mark the slot before
    /// it takes the lock). (A check before a plain store can lose a wake-up: the timer fires
    /// between them and wakes the waker the store then replaces. The future used to cover
    /// that by reading the clock after every pending poll; without that read, its waker
    /// replacement lost one wake-up in ~20 M requests through NBD at QD128.)
    pub(crate) fn set_unless_fired(&self, waker: &Waker) -> bool {
        let mut w = self.waker.lock();
        if self.fired() {
            return false;
        }
        match &*w {
            Some(old) if old.will_wake(waker) => {}
            _ => *w = Some(waker.clone()),
        }
        true
    }

    /// True once the timer has processed this slot's deadline.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(AtomicOrdering::Acquire)
    }

    fn fire(&self) {
        self.fired.store(true, AtomicOrdering::Release);
        // Wake outside the lock: a waker may run arbitrary executor code.
        let waker = self.waker.lock().take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

struct Entry {
    deadline: u64,
    seq: u64,
    slot: Arc<WakerSlot>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

#[derive(Default)]
struct Heap {
    entries: BinaryHeap<Reverse<Entry>>,
    next_seq: u64,
}

struct Timer {
    /// Pending deadlines. Lock held only to push, pop and arm, never while waking or waiting.
    heap: Mutex<Heap>,
    /// Futex word bumped when an entry becomes the new earliest deadline (thread mode).
    word: AtomicU32,
    /// The event loop's timerfd, armed at the earliest deadline, and the loop's poll window
    /// (reported only: the loop applies it); `None`: the timer thread.
    timerfd: Option<(OwnedFd, u64)>,
}

/// The timerfd and poll window an [`EventLoopTimer`] installed, taken by the first use of the
/// timer.
static INSTALLED_FD: Mutex<Option<(OwnedFd, u64)>> = Mutex::new(None);
/// The timer, once something used it (or an event loop installed it).
static TIMER: OnceLock<&'static Timer> = OnceLock::new();

fn timer() -> &'static Timer {
    TIMER.get_or_init(|| {
        let timerfd = INSTALLED_FD.lock().take();
        let external = timerfd.is_some();
        // Leaked on purpose: the thread below refers to it for the rest of the process.
        let t: &'static Timer = Box::leak(Box::new(Timer {
            heap: Mutex::new(Heap::default()),
            word: AtomicU32::new(0),
            timerfd,
        }));
        if external {
            return t;
        }
        // If the thread cannot be spawned the process is out of resources; futures would never
        // wake, so failing loudly here is the only honest option.
        std::thread::Builder::new()
            .name("nand-timer".into())
            .spawn(move || run(t))
            .expect("nand-model: cannot start the timer thread");
        t
    })
}

/// Arranges for `slot`'s waker to be called once the clock reaches `deadline_ns`.
pub(crate) fn register(deadline_ns: u64, slot: Arc<WakerSlot>) {
    let t = timer();
    let earliest = {
        let mut h = t.heap.lock();
        let seq = h.next_seq;
        h.next_seq += 1;
        h.entries.push(Reverse(Entry {
            deadline: deadline_ns,
            seq,
            slot,
        }));
        let earliest = h.entries.peek().is_some_and(|Reverse(e)| e.seq == seq);
        if let (true, Some((fd, _))) = (earliest, &t.timerfd) {
            // Under the lock, so the armed time is the heap's earliest (see the module doc).
            arm(fd, Some(deadline_ns));
            return;
        }
        earliest
    };
    if earliest {
        t.word.fetch_add(1, AtomicOrdering::Release);
        futex_wake(&t.word);
    }
}

/// The crate's timer driven by the caller's event loop instead of its own thread (see the
/// module doc): create it, register [`EventLoopTimer`]'s descriptor with the loop for
/// readability, [`EventLoopTimer::install`] it, and on each readiness call
/// [`EventLoopTimer::fire_due`].
///
/// It must be installed before anything waits asynchronously on a completion (before a device
/// with timing `real` serves requests): the first wait starts the timer in whichever mode is
/// installed then, for the rest of the process, so the loop must keep serving it as long as
/// anything may wait.
#[derive(Debug)]
pub struct EventLoopTimer {
    fd: OwnedFd,
    /// What arming the fd for a near deadline cost here (median of a few tries at creation).
    arm_cost_ns: u64,
    /// Deadlines nearer than this are polled for, not armed (see [`Self::fire_due_polling`]).
    poll_window_ns: u64,
}

/// Arming for a near deadline costs less than this: the platform's timer is cheap to
/// program (bare metal: ~0.3 us), so polling never pays and the window is 0.
const CHEAP_ARM_NS: u64 = 2_000;
/// A deadline is polled for when it is nearer than this many arm costs. An expiry costs an
/// arm (the `timerfd_settime`), about as much again for its interrupt, and the wake-up of a
/// parked worker; polling also sends the replies sooner, so a closed loop's next requests come
/// sooner. Measured on the 2-vCPU KVM guest (arm cost 6-9 us), 4 KiB random reads through NBD
/// on lftl-card, timing real, kIOPS / server CPU us per request, windows alternated:
/// QD4: 0 us 38.9 / 21.4, 12 us 43.1 / 19.2, 25 us 49.5 / 17.5, 50 us 59.1 / 16.7,
/// 100 us 57.4 / 17.2; QD16: 0 us 94.5 / 10.7, 12 us 125.7 / 8.0, 25 us 133 / 7.6,
/// 50 us 132.7 / 7.7, 100 us 125 / 8.5. At 4 x QD32 the CPU is saturated either way and
/// the windows differ by less than the noise (and see `MAX_POLLED_PENDING`).
const POLL_WINDOW_ARMS: u64 = 8;
/// The window never exceeds this: past it a worker would poll for long stretches with nothing
/// else to do, and the figures above stop improving.
const MAX_POLL_WINDOW_NS: u64 = 50_000;
/// With more deadlines pending than this, only a deadline nearer than one arm's cost (at most
/// the poll window) is polled for; a farther one is armed: an expiry then fires a batch (its
/// own lateness gathers the deadlines behind it), so the arm is shared, while polling through
/// the whole window between dense deadlines keeps a worker busy on CPUs the clients need.
/// Arming for a deadline nearer than the arm's own cost, though, only spends the wait in the
/// kernel.
/// tlc, 4 x QD32 reads through NBD, alternated: the build without polling 158 k (7 runs,
/// 144-165), polling whatever the count 151 k (139-163), polling up to 16 pending 159 k
/// (150-165); QD16 keeps its gain (lftl-card 137 k against 97 k without polling). Then
/// (2026-11-27, the same job, 5 rounds, each of its dense windows in turn) with more than 16
/// pending: 0 us 147 / 154 / 161 / 142 / 141 k, the arm cost (10 us) 156 / 161 / 166 / 150 /
/// 150 k (server CPU 6.1 / 5.9 / 5.6 / 6.6 / 6.7 us per request against 6.8 / 6.5 / 6.0 / 7.5
/// / 7.7), 5 us 147 / 148 k, 20 us 144 / 149 k, 50 us 144 / 150 / 141 k; board-000 and
/// lftl-card within the noise (133-141 k, 159-174 k either way).
const MAX_POLLED_PENDING: usize = 16;
/// The poll window of the [`EventLoopTimer`] installed in this process, if one is (reported by
/// `ftld stats`).
pub fn installed_poll_window_ns() -> Option<u64> {
    TIMER.get()?.timerfd.as_ref().map(|&(_, window)| window)
}

/// Measures what arming `fd` 200 us ahead costs (median of 9 tries; the fd is left disarmed).
/// 200 us is sooner than the scheduler tick's next expiry on an idle CPU, so the timer becomes
/// the CPU's earliest and the arm reprograms the hardware timer, as a near deadline's does.
fn measure_arm_cost(fd: &OwnedFd) -> u64 {
    let mut costs: Vec<u64> = (0..9)
        .map(|_| {
            let t0 = now_ns();
            arm(fd, Some(t0 + 200_000));
            let cost = now_ns() - t0;
            arm(fd, None);
            cost
        })
        .collect();
    costs.sort_unstable();
    costs[costs.len() / 2]
}

/// The poll window for an arm cost (see the constants above).
fn poll_window_for(arm_cost_ns: u64) -> u64 {
    if arm_cost_ns < CHEAP_ARM_NS {
        0
    } else {
        (arm_cost_ns * POLL_WINDOW_ARMS).min(MAX_POLL_WINDOW_NS)
    }
}

/// Why an [`EventLoopTimer`] could not be created or installed.
#[derive(Debug, thiserror::Error)]
pub enum EventLoopTimerError {
    #[error("the NAND timer already runs (something waited before the event loop installed it)")]
    AlreadyRunning,
    #[error("creating its timerfd: {0}")]
    Create(std::io::Error),
}

impl EventLoopTimer {
    /// Creates the timerfd (non-blocking, close-on-exec), not yet installed.
    pub fn new() -> Result<EventLoopTimer, EventLoopTimerError> {
        // SAFETY: plain syscall with constant flags; a negative result is an error.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(EventLoopTimerError::Create(std::io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let arm_cost_ns = measure_arm_cost(&fd);
        Ok(EventLoopTimer {
            fd,
            arm_cost_ns,
            poll_window_ns: poll_window_for(arm_cost_ns),
        })
    }

    /// Sets the poll window instead of the measured one (0: never poll). The window with many
    /// deadlines pending stays the measured arm cost, at most `window`.
    pub fn with_poll_window(mut self, window: std::time::Duration) -> EventLoopTimer {
        self.poll_window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// What arming the fd for a near deadline cost when this timer was created.
    pub fn arm_cost(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.arm_cost_ns)
    }

    /// Deadlines nearer than this are polled for instead of armed.
    pub fn poll_window(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.poll_window_ns)
    }

    /// Makes the crate's timer arm this timerfd instead of starting its thread. The timer
    /// keeps its own duplicate of the descriptor, so it stays valid whatever becomes of `self`.
    pub fn install(&self) -> Result<(), EventLoopTimerError> {
        if TIMER.get().is_some() {
            return Err(EventLoopTimerError::AlreadyRunning);
        }
        let own = self.fd.try_clone().map_err(EventLoopTimerError::Create)?;
        *INSTALLED_FD.lock() = Some((own, self.poll_window_ns));
        if timer().timerfd.is_some() {
            Ok(())
        } else {
            // Another thread started the timer between the check and the install.
            INSTALLED_FD.lock().take();
            Err(EventLoopTimerError::AlreadyRunning)
        }
    }

    /// Fires every due deadline and arms the timerfd for the next one. Call it whenever the fd
    /// is readable; a spurious call is harmless, and so is a call before [`Self::install`].
    pub fn fire_due(&self) {
        self.fire_due_within(0, 0, true);
    }

    /// [`Self::fire_due`], except that when the next deadline is nearer than the poll window
    /// ([`Self::poll_window`]; with more than 16 pending, `MAX_POLLED_PENDING`, nearer than
    /// one arm's cost, [`Self::arm_cost`], at most that window), the timerfd is left unarmed
    /// and this returns true: the caller then calls again soon (after letting the woken
    /// tasks run, e.g. tokio's `yield_now`), with `readable` false (the fd, unarmed, has
    /// nothing to read), until this returns false, which means the fd is armed for the next
    /// deadline (or disarmed: none is pending). Call it with `readable` true whenever the fd
    /// is readable.
    ///
    /// Why: arming a timer that becomes the CPU's earliest reprograms its local APIC timer,
    /// which in a virtual machine is an exit to the host. Measured on the project's 2-vCPU
    /// KVM guest: `timerfd_settime` 50 us ahead costs 9 us against 0.4 us for one behind
    /// another timer, and each expiry's interrupt costs again. At 4 x QD32 reads the next
    /// deadline is a few microseconds away after almost every expiry, and arming was 12 % of
    /// the server's CPU (`benches/README.md`, issue 13). A round through the caller's loop
    /// (its I/O poll and this check) costs about a microsecond. While it polls, the deadline
    /// polled for is not armed: the caller must keep calling until this returns false (a
    /// registrant whose deadline becomes the earliest still arms the fd meanwhile).
    /// The window is set when the timer is created from what an arm costs here (eight times
    /// that, at most 50 us; 0 where arming is cheap, as on bare metal).
    pub fn fire_due_polling(&self, readable: bool) -> bool {
        let dense = self.arm_cost_ns.min(self.poll_window_ns);
        self.fire_due_within(self.poll_window_ns, dense, readable)
    }

    /// Fires what is due; polls (returns true) for a next deadline nearer than `window_ns`,
    /// or than `dense_ns` when more than `MAX_POLLED_PENDING` are pending.
    fn fire_due_within(&self, window_ns: u64, dense_ns: u64, readable: bool) -> bool {
        if readable {
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into `expirations`; the fd is non-blocking, so with
            // nothing to read it fails with EAGAIN, which is fine (the count is not needed: the
            // heap says what is due).
            unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    expirations.as_mut_ptr().cast(),
                    expirations.len(),
                )
            };
        }
        let Some(t) = TIMER.get() else {
            return false;
        };
        let mut due = Vec::new();
        let soon = {
            let mut h = t.heap.lock();
            let now = pop_due(&mut h, &mut due);
            let next = h.entries.peek().map(|Reverse(e)| e.deadline);
            let window = if h.entries.len() <= MAX_POLLED_PENDING {
                window_ns
            } else {
                dense_ns
            };
            if next.is_some_and(|d| d < now.saturating_add(window)) {
                true
            } else {
                if let Some((fd, _)) = &t.timerfd {
                    arm(fd, next);
                }
                false
            }
        };
        for slot in due {
            slot.fire();
        }
        soon
    }
}

impl AsRawFd for EventLoopTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Moves the slots of every deadline that has passed from the heap to `due`; returns the
/// time it compared them with.
fn pop_due(h: &mut Heap, due: &mut Vec<Arc<WakerSlot>>) -> u64 {
    let now = now_ns();
    while h.entries.peek().is_some_and(|Reverse(e)| e.deadline <= now) {
        if let Some(Reverse(e)) = h.entries.pop() {
            due.push(e.slot);
        }
    }
    now
}

/// Arms `fd` to expire at the absolute monotonic time `deadline_ns` (`None`: disarms it).
fn arm(fd: &OwnedFd, deadline_ns: Option<u64>) {
    // An all-zero value would disarm: a deadline at time 0 is 1 ns (long past) instead.
    let value = deadline_ns.map_or(timespec(0), |d| timespec(d.max(1)));
    let spec = libc::itimerspec {
        it_interval: timespec(0),
        it_value: value,
    };
    // SAFETY: `fd` is a live timerfd (the timer owns it for the process's life); `spec` is a
    // valid itimerspec that outlives the call; the old value is not asked for. It cannot fail
    // with a valid fd and normalised times (tv_nsec < 1e9 by construction).
    unsafe {
        libc::timerfd_settime(
            fd.as_raw_fd(),
            libc::TFD_TIMER_ABSTIME,
            &spec,
            std::ptr::null_mut(),
        )
    };
}

fn run(t: &'static Timer) {
    lower_timer_slack();
    let mut due = Vec::new();
    loop {
        let (seen, next) = {
            let mut h = t.heap.lock();
            pop_due(&mut h, &mut due);
            let next = h.entries.peek().map(|Reverse(e)| e.deadline);
            (t.word.load(AtomicOrdering::Acquire), next)
        };
        for slot in due.drain(..) {
            slot.fire();
        }
        futex_wait_until(&t.word, seen, next);
    }
}

/// Waits while `word == expected`, until the absolute monotonic time `deadline_ns` (or forever).
fn futex_wait_until(word: &AtomicU32, expected: u32, deadline_ns: Option<u64>) {
    let ts = deadline_ns.map(timespec);
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 for the whole call (it is 'static); `ts_ptr` is null
    // or points to `ts`, which outlives the call. FUTEX_WAIT_BITSET without FUTEX_CLOCK_REALTIME
    // treats the timeout as absolute CLOCK_MONOTONIC time. Errors (EAGAIN when the word changed,
    // ETIMEDOUT, EINTR) all just mean "look at the heap again".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE only reads the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, AtomicOrdering::SeqCst);
        }
    }

    /// A waker stored before the slot fires is called by `fire`; one offered after it is
    /// refused (the caller then polls again itself), whatever waker the slot held before.
    #[test]
    fn a_waker_set_after_the_slot_fired_is_refused_not_lost() {
        let first = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let second = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let slot = WakerSlot::default();
        assert!(slot.set_unless_fired(&Waker::from(Arc::clone(&first))));
        slot.fire();
        assert_eq!(first.0.load(AtomicOrdering::SeqCst), 1);
        assert!(slot.fired());
        // The replacement the lost wake-up came from: refused, so the caller knows.
        assert!(!slot.set_unless_fired(&Waker::from(Arc::clone(&second))));
        assert_eq!(second.0.load(AtomicOrdering::SeqCst), 0);

        // Replacing the waker before the fire: the new one is called, the old one is not.
        let slot = WakerSlot::default();
        let (a, b) = (
            Arc::new(CountingWaker(AtomicUsize::new(0))),
            Arc::new(CountingWaker(AtomicUsize::new(0))),
        );
        assert!(slot.set_unless_fired(&Waker::from(Arc::clone(&a))));
        assert!(slot.set_unless_fired(&Waker::from(Arc::clone(&b))));
        slot.fire();
        assert_eq!(a.0.load(AtomicOrdering::SeqCst), 0);
        assert_eq!(b.0.load(AtomicOrdering::SeqCst), 1);
    }
}
