//! Waking a ublk queue thread from other threads.
//!
//! A ublk queue thread spends its idle time blocked in `io_uring_enter` on its own ring. The
//! FTL completes requests on its writer, bank and timer threads, and a completion there only
//! calls the waiting task's [`Waker`]; smol then puts the task on the queue's run list, but
//! nothing wakes the thread that would run it. So every FTL future a tag task awaits is wrapped
//! by [`kicked`], whose waker does two things: it wakes the task as usual (the task lands on
//! the executor's run list, a cross-thread queue), then it [`Kick::notify`]s the queue's
//! eventfd. The queue keeps a `POLL_ADD` on that eventfd armed in its ring (the kicker task in
//! `queue.rs`), so the write completes a CQE, `io_uring_enter` returns, and the queue runs
//! every runnable task before it blocks again.
//!
//! ```text
//!  FTL thread ── waker ─► smol run list (task)      queue thread: io_uring_enter ─► CQE (poll)
//!                  └────► Kick::notify ─► eventfd ─────────────────────────────────┘   │
//!                                                   run every runnable task ◄──────────┘
//! ```
//!
//! # Liveness contract
//! A wake that happens after the queue last ran its tasks always leaves the eventfd readable
//! (or its poll already completed), so the queue thread cannot sleep with a runnable task.
//! `pending` only saves syscalls: it is set by the first notify after a drain, and
//! [`Kick::drain`] resets the counter *before* clearing `pending`, so a notify racing with a
//! drain either writes the eventfd again or finds its task already queued for the tick that is
//! running.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};

/// One queue's wake-up eventfd.
#[derive(Debug)]
pub struct Kick {
    fd: OwnedFd,
    /// Set by the first [`Kick::notify`] after a [`Kick::drain`].
    pending: AtomicBool,
    /// eventfd writes done (for tests and statistics).
    writes: AtomicU64,
}

impl Kick {
    /// A new non-blocking eventfd.
    pub fn new() -> io::Result<Arc<Kick>> {
        // SAFETY: eventfd(2) takes no pointers; the flags are valid constants.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Arc::new(Kick {
            fd,
            pending: AtomicBool::new(false),
            writes: AtomicU64::new(0),
        }))
    }

    /// The eventfd, for a poll SQE.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the eventfd readable unless a notify since the last drain already did.
    pub fn notify(&self) {
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own; eventfd writes of 8
        // bytes are atomic. EAGAIN (counter at its maximum) still leaves the fd readable.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast::<libc::c_void>(),
                8,
            )
        };
        if n == 8 {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Resets the eventfd counter, then allows the next notify to write again. Called by the
    /// queue thread after its poll completed.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from an eventfd we own; the fd is
        // non-blocking, so an empty counter returns EAGAIN instead of blocking.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut v as *mut u64).cast::<libc::c_void>(),
                8,
            )
        };
        // A swap, not a store: a notify that found `pending` still set (and so wrote nothing)
        // is then ordered before this swap, which reads its value and so makes the task that
        // notify queued visible to the tick that follows. A plain store reads nothing, and the
        // memory model would let that tick miss the task (a store-then-load Dekker race).
        self.pending.swap(false, Ordering::AcqRel);
    }

    /// eventfd writes done so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}

/// The waker handed to an FTL future: wakes the task, then the queue thread.
struct KickWaker {
    task: Waker,
    kick: Arc<Kick>,
}

impl Wake for KickWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.task.wake_by_ref();
        self.kick.notify();
    }
}

/// Awaits `fut` so that a wake from any thread also notifies `kick` (see the module docs).
pub async fn kicked<F: Future>(kick: &Arc<Kick>, fut: F) -> F::Output {
    let mut fut = pin!(fut);
    // The waker built for the task waker seen last; rebuilt only when the task's changes.
    let mut cached: Option<(Waker, Waker)> = None;
    std::future::poll_fn(move |cx| {
        let stale = match &cached {
            Some((task, _)) => !task.will_wake(cx.waker()),
            None => true,
        };
        if stale {
            let w = Waker::from(Arc::new(KickWaker {
                task: cx.waker().clone(),
                kick: Arc::clone(kick),
            }));
            cached = Some((cx.waker().clone(), w));
        }
        let Some((_, waker)) = &cached else {
            return Poll::Pending;
        };
        let mut inner = std::task::Context::from_waker(waker);
        fut.as_mut().poll(&mut inner)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::task::Context;
    use std::time::Duration;

    /// Whether the eventfd is readable right now.
    fn readable(k: &Kick) -> bool {
        let mut p = libc::pollfd {
            fd: k.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn notify_coalesces_until_drained() {
        let k = Kick::new().expect("eventfd");
        assert!(!readable(&k));
        k.notify();
        k.notify();
        assert!(readable(&k));
        assert_eq!(k.writes(), 1, "second notify before a drain writes nothing");
        k.drain();
        assert!(!readable(&k));
        k.notify();
        assert!(readable(&k));
        assert_eq!(k.writes(), 2);
        k.drain();
        k.drain(); // an empty counter does not block
        assert!(!readable(&k));
    }

    /// A future completed from another thread, like an FTL request.
    #[derive(Default)]
    struct Remote {
        done: bool,
        waker: Option<Waker>,
    }

    #[test]
    fn remote_wake_reaches_task_and_eventfd() {
        let k = Kick::new().expect("eventfd");
        let state = Arc::new(Mutex::new(Remote::default()));
        let s2 = Arc::clone(&state);
        let fut = std::future::poll_fn(move |cx| {
            let mut s = s2.lock().expect("lock");
            if s.done {
                Poll::Ready(7)
            } else {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        });
        let task_woken = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let task_waker = Waker::from(Arc::new(Flag(Arc::clone(&task_woken))));
        let mut cx = Context::from_waker(&task_waker);
        let mut f = Box::pin(kicked(&k, fut));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert!(!readable(&k));
        let s3 = Arc::clone(&state);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            let w = {
                let mut s = s3.lock().expect("lock");
                s.done = true;
                s.waker.take()
            };
            w.expect("the future registered a waker").wake();
        })
        .join()
        .expect("thread");
        assert!(task_woken.load(Ordering::SeqCst), "the task waker ran");
        assert!(readable(&k), "the eventfd was written");
        k.drain();
        assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(7));
    }

    #[test]
    fn kicked_rebuilds_waker_for_new_task_waker() {
        let k = Kick::new().expect("eventfd");
        let seen = Arc::new(Mutex::new(Vec::<Waker>::new()));
        let s2 = Arc::clone(&seen);
        let mut polls = 0;
        let fut = std::future::poll_fn(move |cx| {
            polls += 1;
            s2.lock().expect("lock").push(cx.waker().clone());
            if polls == 3 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        let mut f = Box::pin(kicked(&k, fut));
        struct Nothing;
        impl Wake for Nothing {
            fn wake(self: Arc<Self>) {}
        }
        let a = Waker::from(Arc::new(Nothing));
        let mut cx = Context::from_waker(&a);
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert!(f.as_mut().poll(&mut cx).is_pending());
        let seen_now = seen.lock().expect("lock").clone();
        assert!(
            seen_now[0].will_wake(&seen_now[1]),
            "same task waker reuses ours"
        );
        seen_now[1].wake_by_ref();
        assert!(readable(&k), "the inner waker notifies the eventfd");
        assert!(f.as_mut().poll(&mut cx).is_ready());
    }
}
