//! SIGINT and SIGTERM for the commands that run to an end (`replay`, `stalls`): blocked in every
//! thread and taken by one, so a stop ends the work the command's way (the figures so far
//! written, a scratch image removed) instead of killing the process where it stands. `serve`
//! has its own handling (tokio's signals).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

/// Blocks SIGINT and SIGTERM in this thread (and the threads it starts later, which inherit
/// the mask); returns the set.
pub fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise and write only `set`;
    // pthread_sigmask reads `set` and changes this thread's mask only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// The name of a stop signal.
pub fn name(signo: i32) -> &'static str {
    match signo {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// A replay's answer to SIGINT and SIGTERM. While requests are replayed, the first one asks
/// the replay to stop ([`ftl_replay::Stop`]: it ends after the request in flight, drains the
/// write buffers and writes its figures); before that (opening, formatting, preconditioning:
/// nothing to report yet), and at a second signal, the process removes its scratch image and
/// exits at once, 128 + the signal's number, as the signal's default action would, less the
/// file left behind.
pub struct ReplaySignals {
    pub stop: Arc<ftl_replay::Stop>,
    /// Requests are being replayed: a signal asks for a stop rather than exiting.
    replaying: Arc<AtomicBool>,
    /// The signal that asked for the stop (0: none).
    received: Arc<AtomicI32>,
    /// The scratch image to remove on an exit at once.
    scratch: Arc<Mutex<Option<PathBuf>>>,
}

impl ReplaySignals {
    /// Blocks the signals (call before any thread is started) and starts the thread that
    /// takes them.
    pub fn watch() -> std::io::Result<ReplaySignals> {
        let set = block_stop_signals();
        let s = ReplaySignals {
            stop: Arc::new(ftl_replay::Stop::new()),
            replaying: Arc::new(AtomicBool::new(false)),
            received: Arc::new(AtomicI32::new(0)),
            scratch: Arc::new(Mutex::new(None)),
        };
        let (stop, replaying, received, scratch) = (
            s.stop.clone(),
            s.replaying.clone(),
            s.received.clone(),
            s.scratch.clone(),
        );
        std::thread::Builder::new()
            .name("ftld-signals".into())
            .spawn(move || loop {
                let mut signo: libc::c_int = 0;
                // SAFETY: `set` was initialised by `block_stop_signals`; `signo` is written.
                if unsafe { libc::sigwait(&set, &mut signo) } != 0 {
                    continue;
                }
                if replaying.load(Ordering::SeqCst) && received.load(Ordering::SeqCst) == 0 {
                    received.store(signo, Ordering::SeqCst);
                    stop.request(name(signo));
                    note!(
                        "{}: ending the replay after the requests in flight and writing the \
                         figures so far (a second signal exits at once)",
                        name(signo)
                    );
                    continue;
                }
                if let Some(p) = scratch.lock().ok().and_then(|g| g.clone()) {
                    remove_scratch(&p);
                }
                note!("{}: exiting", name(signo));
                std::process::exit(128 + signo);
            })?;
        Ok(s)
    }

    /// Names the scratch image an exit at once removes.
    pub fn set_scratch(&self, path: Option<PathBuf>) {
        if let Ok(mut g) = self.scratch.lock() {
            *g = path;
        }
    }

    /// Whether requests are being replayed (signals ask for a stop then).
    pub fn set_replaying(&self, on: bool) {
        self.replaying.store(on, Ordering::SeqCst);
    }

    /// The signal that stopped the replay, if one did.
    pub fn received(&self) -> Option<i32> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }
}

/// Removes a scratch image and its directory.
pub fn remove_scratch(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    if let Some(d) = path.parent() {
        let _ = std::fs::remove_dir(d);
    }
}
