//! The crate-global timer thread that wakes [`crate::CompletionFuture`]s.
//!
//! One lazily started thread keeps a min-heap of `(deadline, waker slot)`. It sleeps until the
//! earliest deadline with `FUTEX_WAIT_BITSET`, whose timeout is an *absolute* `CLOCK_MONOTONIC`
//! time (like `clock_nanosleep(TIMER_ABSTIME)`) but which another thread can interrupt with
//! `FUTEX_WAKE` when it registers an earlier deadline. Its timer slack is 1 ns.
//!
//! Lost-wake-up freedom: the thread reads the futex word while holding the heap lock and then
//! waits only if the word still has that value; a registrant pushes under the lock and bumps the
//! word *after* unlocking, so either the thread saw the new entry or its wait returns at once.
//!
//! The thread lives as long as the process. It holds no resources besides the heap; when the
//! heap is empty it waits without a timeout and costs nothing.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
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
    /// Stores the waker to call at the deadline (keeps the old one if it would wake the same task).
    pub(crate) fn set(&self, waker: &Waker) {
        let mut w = self.waker.lock();
        match &*w {
            Some(old) if old.will_wake(waker) => {}
            _ => *w = Some(waker.clone()),
        }
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
    /// Pending deadlines. Lock held only to push/pop, never while waking or waiting.
    heap: Mutex<Heap>,
    /// Futex word bumped when an entry becomes the new earliest deadline.
    word: AtomicU32,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        // Leaked on purpose: the thread below refers to it for the rest of the process.
        let t: &'static Timer = Box::leak(Box::new(Timer {
            heap: Mutex::new(Heap::default()),
            word: AtomicU32::new(0),
        }));
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
        h.entries.peek().is_some_and(|Reverse(e)| e.seq == seq)
    };
    if earliest {
        t.word.fetch_add(1, AtomicOrdering::Release);
        futex_wake(&t.word);
    }
}

fn run(t: &'static Timer) {
    lower_timer_slack();
    let mut due = Vec::new();
    loop {
        let (seen, next) = {
            let mut h = t.heap.lock();
            let now = now_ns();
            while h.entries.peek().is_some_and(|Reverse(e)| e.deadline <= now) {
                if let Some(Reverse(e)) = h.entries.pop() {
                    due.push(e.slot);
                }
            }
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
