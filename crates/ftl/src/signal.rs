//! A broadcast signal that costs one fence and one load to raise while nobody listens.
//!
//! `event_listener::Event` (version 5) takes its list's mutex on every `notify`, listeners or
//! not. The writers raise a queue's progress on every committed page and the host gate on
//! every request that leaves it, almost always with nobody listening: a 128 KiB write took
//! that mutex ~64 times (`Inner::with_inner`, ~2 % of the server's CPU per request in a
//! profile, benches/README.md, issue 14). [`Signal`] counts its listeners and skips the
//! `Event` while there are none.
//!
//! Why no wake-up is lost: a listener counts itself (`SeqCst`) and then fences before it
//! re-checks its condition; a notifier changes the condition, fences, and then reads the count.
//! With both fences `SeqCst`, at least one side sees the other's write: either the notifier
//! sees the listener and notifies the `Event` (which the listener joined before it
//! re-checked, so the `Event`'s own guarantee applies), or the listener's re-check sees the
//! new condition and it does not wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use event_listener::{Event, EventListener, Listener};

/// See the module docs. Used as: `let l = s.listen(); if !condition() { l.await }` (or
/// `l.wait()` on a thread outside any executor); the notifier changes the condition, then
/// calls [`Signal::notify_all`].
#[derive(Default)]
pub struct Signal {
    event: Event,
    /// Listeners alive (created by `listen` and not dropped yet).
    listeners: AtomicUsize,
}

/// One registration with a [`Signal`]; counted until dropped.
pub struct SignalListener<'a> {
    signal: &'a Signal,
    /// Taken by a blocking wait (which consumes it); the count drops with `self`.
    inner: Option<EventListener>,
}

impl Signal {
    pub fn new() -> Signal {
        Signal::default()
    }

    /// Registers for the next [`Self::notify_all`]. Check the condition after this, then wait.
    pub fn listen(&self) -> SignalListener<'_> {
        self.listeners.fetch_add(1, Ordering::SeqCst);
        // Orders the count before the caller's re-check of its condition (module docs).
        fence(Ordering::SeqCst);
        SignalListener {
            signal: self,
            inner: Some(self.event.listen()),
        }
    }

    /// Wakes every listener registered now. Call it after changing the condition.
    pub fn notify_all(&self) {
        // Orders the caller's change of the condition before the read of the count.
        fence(Ordering::SeqCst);
        if self.listeners.load(Ordering::Relaxed) > 0 {
            self.event.notify(usize::MAX);
        }
    }

    /// Listeners registered now (tests).
    #[cfg(test)]
    fn listeners(&self) -> usize {
        self.listeners.load(Ordering::Relaxed)
    }
}

impl SignalListener<'_> {
    /// Blocks the thread until notified.
    pub fn wait(mut self) {
        // The listener stays counted until this returns (`self` drops after the wait).
        if let Some(l) = self.inner.take() {
            l.wait();
        }
    }

    /// Blocks the thread until notified or `timeout` passed; true if notified.
    pub fn wait_timeout(mut self, timeout: Duration) -> bool {
        self.inner
            .take()
            .is_some_and(|l| l.wait_timeout(timeout).is_some())
    }
}

impl Future for SignalListener<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.inner.as_mut() {
            Some(l) => Pin::new(l).poll(cx),
            None => Poll::Ready(()),
        }
    }
}

impl Drop for SignalListener<'_> {
    fn drop(&mut self) {
        self.signal.listeners.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn listeners_are_counted_until_dropped() {
        let s = Signal::new();
        s.notify_all(); // nobody listens: nothing to do
        let a = s.listen();
        let b = s.listen();
        assert_eq!(s.listeners(), 2);
        drop(a);
        assert_eq!(s.listeners(), 1);
        s.notify_all();
        assert!(
            b.wait_timeout(Duration::from_secs(5)),
            "a notified listener waited"
        );
        assert_eq!(s.listeners(), 0);
    }

    #[test]
    fn an_unnotified_wait_times_out() {
        let s = Signal::new();
        assert!(!s.listen().wait_timeout(Duration::from_millis(10)));
        assert_eq!(s.listeners(), 0);
    }

    /// The listen / re-check / wait pattern against a notifier that changes the condition
    /// and notifies, many times over: no waiter is left asleep (a lost wake-up would hang the
    /// waiter, and the test, here caught by the timeout).
    #[test]
    fn no_wake_up_is_lost() {
        for _ in 0..2000 {
            let s = Arc::new(Signal::new());
            let flag = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (s, flag) = (s.clone(), flag.clone());
                std::thread::spawn(move || {
                    while !flag.load(Ordering::Acquire) {
                        let l = s.listen();
                        if !flag.load(Ordering::Acquire) {
                            assert!(
                                l.wait_timeout(Duration::from_secs(10)),
                                "a wake-up was lost"
                            );
                        }
                    }
                })
            };
            flag.store(true, Ordering::Release);
            s.notify_all();
            waiter.join().unwrap();
        }
    }

    #[test]
    fn an_async_listener_is_woken() {
        let s = Arc::new(Signal::new());
        let flag = Arc::new(AtomicBool::new(false));
        let (s2, flag2) = (s.clone(), flag.clone());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            flag2.store(true, Ordering::Release);
            s2.notify_all();
        });
        block_on(async {
            while !flag.load(Ordering::Acquire) {
                let l = s.listen();
                if !flag.load(Ordering::Acquire) {
                    l.await;
                }
            }
        });
        t.join().unwrap();
    }

    /// A minimal executor for the test: polls on the thread, parking between wake-ups; a
    /// future still pending 10 s after its last wake-up fails the test.
    fn block_on<F: Future<Output = ()>>(f: F) {
        use std::task::{Wake, Waker};
        struct Unpark(std::thread::Thread);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        while f.as_mut().poll(&mut cx).is_pending() {
            let t0 = std::time::Instant::now();
            std::thread::park_timeout(Duration::from_secs(10));
            assert!(t0.elapsed() < Duration::from_secs(10), "never woken");
        }
    }
}
