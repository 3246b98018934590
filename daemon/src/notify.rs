//! systemd readiness protocol (`Type=notify`), through the `sd-notify` crate.
//!
//! | when | message |
//! |---|---|
//! | image opening (crash recovery may scan) | `STATUS=opening …` |
//! | the block device (ublk) or the NBD sockets accept I/O | `READY=1` + `STATUS=serving …` |
//! | every `WATCHDOG_USEC / 2` while serving, when `WatchdogSec=` is set | `WATCHDOG=1` |
//! | first SIGINT/SIGTERM | `STOPPING=1` + `STATUS=stopping …` |
//!
//! Without `NOTIFY_SOCKET` (not started by systemd) every call does nothing. A failed send is
//! logged at debug level and otherwise ignored: readiness reporting never stops the daemon.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sd_notify::NotifyState;
use tracing::debug;

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        debug!(error = %e, "sd_notify failed");
    }
}

/// `STATUS=<s>`.
pub fn status(s: &str) {
    send(&[NotifyState::Status(s)]);
}

/// `READY=1` with a status line saying what is served.
pub fn ready(s: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(s)]);
}

/// `STOPPING=1` with a status line.
pub fn stopping(s: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(s)]);
}

/// Pings the watchdog from its own thread until dropped (nothing when no watchdog is set).
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts pinging every half `WATCHDOG_USEC` if systemd asked for it.
    pub fn start() -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let mut usec = 0;
        let thread = if sd_notify::watchdog_enabled(false, &mut usec) && usec > 0 {
            let period = Duration::from_micros(usec / 2);
            debug!(?period, "systemd watchdog enabled");
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("ftld-watchdog".into())
                .spawn(move || {
                    // Short sleeps so that drop does not wait a whole period.
                    let tick = period.min(Duration::from_millis(100));
                    let mut since = Duration::ZERO;
                    send(&[NotifyState::Watchdog]);
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        since += tick;
                        if since >= period {
                            since = Duration::ZERO;
                            send(&[NotifyState::Watchdog]);
                        }
                    }
                })
                .ok()
        } else {
            None
        };
        Watchdog { stop, thread }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
