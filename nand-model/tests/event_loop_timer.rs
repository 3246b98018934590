//! The timer driven by an event loop's timerfd (`EventLoopTimer`) instead of its thread. A test
//! binary of its own: the timer is process-global and its mode is fixed by the first wait.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{small_config, Fixture};
use futures::executor::block_on;
use nand_model::{
    BlockAddr, Completion, EventLoopTimer, EventLoopTimerError, PageAddr, TimingMode,
};
use std::os::fd::AsRawFd;

const PAGE: [u8; 4096] = [0x42; 4096];

/// Waits for `c` through the timer; true if it was not woken before its deadline.
async fn on_time(c: Completion) -> bool {
    let deadline = c.deadline();
    c.into_future().await;
    Instant::now() >= deadline
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|n| n.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The one test of this binary (the timer's mode is per process): installed before any wait,
/// the event loop's timerfd wakes every future, none before its deadline, from many threads,
/// and no timer thread is started. The loop polls for deadlines nearer than 300 us instead of
/// arming the fd (`fire_due_polling`), and does so at least once here.
#[test]
fn an_event_loop_drives_the_timer() {
    let timer = EventLoopTimer::new().expect("timerfd");
    assert!(timer.arm_cost() > Duration::ZERO);
    assert!(timer.poll_window() <= Duration::from_micros(50));
    let timer = Arc::new(timer.with_poll_window(Duration::from_micros(300)));
    assert_eq!(timer.poll_window(), Duration::from_micros(300));
    assert_eq!(nand_model::installed_poll_window_ns(), None);
    timer.install().expect("installed before any wait");
    assert_eq!(nand_model::installed_poll_window_ns(), Some(300_000));
    assert!(matches!(
        timer.install(),
        Err(EventLoopTimerError::AlreadyRunning)
    ));
    // The event loop: poll(2) on the fd, fire what is due.
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (timer, stop) = (Arc::clone(&timer), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut fires, mut polls) = (0u64, 0u64);
            while !stop.load(Ordering::Acquire) {
                let mut pfd = libc::pollfd {
                    fd: timer.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, for the duration of the call.
                let n = unsafe { libc::poll(&mut pfd, 1, 50) };
                if n > 0 {
                    fires += 1;
                    let mut readable = true;
                    while timer.fire_due_polling(readable) {
                        readable = false;
                        polls += 1;
                        std::thread::yield_now();
                    }
                }
            }
            (fires, polls)
        })
    };

    let f = Fixture::new(&small_config(), TimingMode::Real);
    let dev = f.dev();
    // Programs and erases on every bank: short and long deadlines interleaved.
    let mut futs = Vec::new();
    for bank in 0..4 {
        for block in 0..4 {
            for page in 0..4 {
                let c = dev
                    .program(PageAddr::new(bank, block, page), &PAGE, &[])
                    .expect("program");
                futs.push(on_time(c));
            }
        }
        for block in 4..8 {
            futs.push(on_time(
                dev.erase(BlockAddr::new(bank, block)).expect("erase"),
            ));
        }
    }
    let n = futs.len();
    let results = block_on(futures::future::join_all(futs));
    assert_eq!(results.len(), n);
    assert!(
        results.iter().all(|&ok| ok),
        "a future completed before its deadline"
    );
    // Reads registered from several threads at once, each waited on its own thread.
    let dev = Arc::new(f);
    let readers: Vec<_> = (0..4)
        .map(|bank| {
            let f = Arc::clone(&dev);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                (0..4).all(|page| {
                    let c = f
                        .dev()
                        .read(PageAddr::new(bank, 0, page), 0, &mut buf, None)
                        .expect("read");
                    block_on(on_time(c)) && buf == PAGE
                })
            })
        })
        .collect();
    for r in readers {
        assert!(r.join().expect("reader thread"), "early or wrong read");
    }
    assert_eq!(dev.dev().stats().totals.inflight, 0);
    assert!(
        !thread_names().iter().any(|n| n == "nand-timer"),
        "the timer thread was started: {:?}",
        thread_names()
    );
    stop.store(true, Ordering::Release);
    let (fires, polls) = driver.join().expect("driver thread");
    assert!(fires > 0, "the event loop never fired");
    assert!(polls > 0, "no deadline was ever polled for");
}
