//! Recording the host requests an FTL receives as a block trace (`ftld serve --record`), so a
//! workload run once through a real kernel path (a filesystem on the served device, a VM, a
//! database) can be replayed deterministically in virtual time, on any scheme and preset.
//!
//! **Format:** blkparse's default text output, the format most block-trace tools read and
//! write (`ftld replay` reads it back). Each request gives a `D` line (issued to the device)
//! when it reaches the FTL and a `C` line (completed) when it is answered, so blkparse-style
//! tools compute the served latency (D2C) from the trace alone:
//!
//! ```text
//!   0,0    1        1     0.000012345     0  D   W 8192 + 256 [ftld]
//!   0,0    1        2     0.000019876     0  C   W 8192 + 256 [0]
//!   0,0    0        3     0.000020100     0  D  FN [ftld]
//! ```
//!
//! Columns: device (always `0,0`), the write queue the request came through (blkparse's CPU
//! column; 0 for reads and flushes, which take no queue), a sequence number, the time in
//! seconds on the FTL's clock (the host's monotonic clock since the FTL was opened, or the
//! simulated clock in virtual time), pid (0), action, RWBS, first sector + sectors (512 B),
//! and `[ftld]` on a `D` line or the result on a `C` line (0, or -5 for an error). RWBS: `R`
//! read, `W` write, `WF` FUA write, `D` trim (write-zeroes too: the FTL implements it as a
//! trim, and a replay of it is exact), `DF` FUA trim, `FN` flush.
//!
//! **Order and cost.** An event's time is read and the event queued under one lock, so the
//! file is in time order (a replay does not see requests move backwards). A thread takes the
//! queued events every few milliseconds, formats and writes them: the host path never waits for
//! the file or wakes a thread (a wake-up per event cost more than the rest; see the README's
//! recording section for the measured cost). If 64 Ki events wait, further ones are dropped and
//! counted ([`RecordSummary::dropped`]) rather than slowing the device being measured. The file
//! is flushed at least every second, so a `kill -9` loses at most the last second.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Events that may wait for the writer before new ones are dropped.
const MAX_PENDING: usize = 64 * 1024;

/// How often the writer takes the events queued.
const DRAIN_EVERY: Duration = Duration::from_millis(5);

/// The longest a written event waits in the writer's buffer before reaching the file.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// `errno` written on the `C` line of a request that failed.
const EIO: i32 = -5;

/// What a recorded request does (its blkparse RWBS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordedOp {
    Read,
    Write { fua: bool },
    Trim { fua: bool },
    Flush,
}

impl RecordedOp {
    fn rwbs(self) -> &'static str {
        match self {
            RecordedOp::Read => "R",
            RecordedOp::Write { fua: false } => "W",
            RecordedOp::Write { fua: true } => "WF",
            RecordedOp::Trim { fua: false } => "D",
            RecordedOp::Trim { fua: true } => "DF",
            RecordedOp::Flush => "FN",
        }
    }
}

/// A request as recorded: kept by the caller between its `D` and its `C` event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Issued {
    op: RecordedOp,
    queue: u32,
    offset: u64,
    len: u64,
}

enum Event {
    Issue { t_ns: u64, req: Issued },
    Complete { t_ns: u64, req: Issued, ok: bool },
}

/// Events queued for the writer.
#[derive(Default)]
struct Pending {
    events: Vec<Event>,
    /// The recording ended: nothing more is queued.
    stopped: bool,
}

/// The side of a recording the FTL holds: queues events for the writer thread.
pub(crate) struct RequestSink {
    /// Held while an event's time is read and the event queued, so events are queued in time
    /// order, and while the writer swaps the queue out. Taken last (no other lock under it).
    pending: Mutex<Pending>,
    /// Wakes the writer early when the recording ends.
    stop: Condvar,
    dropped: AtomicU64,
}

impl RequestSink {
    /// Records that `op` reached the FTL now (`now` reads the FTL's clock).
    pub(crate) fn issue(
        &self,
        now: impl Fn() -> u64,
        op: RecordedOp,
        queue: usize,
        offset: u64,
        len: u64,
    ) -> Issued {
        let req = Issued {
            op,
            queue: u32::try_from(queue).unwrap_or(u32::MAX),
            offset,
            len,
        };
        self.send(|| Event::Issue { t_ns: now(), req });
        req
    }

    /// Records that `req` was answered now, successfully or not.
    pub(crate) fn complete(&self, now: impl Fn() -> u64, req: Issued, ok: bool) {
        self.send(|| Event::Complete {
            t_ns: now(),
            req,
            ok,
        });
    }

    fn send(&self, event: impl FnOnce() -> Event) {
        let mut p = self.pending.lock();
        if p.stopped || p.events.len() >= MAX_PENDING {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            p.events.push(event());
        }
    }
}

/// What a finished recording wrote.
#[derive(Debug)]
pub struct RecordSummary {
    /// Requests recorded (each a `D` line; its `C` line too unless it was still running).
    pub requests: u64,
    /// Events lost because the writer fell behind or had stopped on an error.
    pub dropped: u64,
    /// The write error that stopped the recording, if one did.
    pub error: Option<io::Error>,
}

/// A recording in progress: owns the writer thread. Install it with
/// [`crate::Ftl::record_requests`], end it with [`RequestLog::finish`].
pub struct RequestLog {
    sink: Arc<RequestSink>,
    thread: Option<JoinHandle<(u64, Option<io::Error>)>>,
}

impl RequestLog {
    /// Starts a recording into `out` (a file, usually; it is buffered here).
    pub fn start(out: Box<dyn Write + Send>) -> io::Result<RequestLog> {
        let sink = Arc::new(RequestSink {
            pending: Mutex::new(Pending::default()),
            stop: Condvar::new(),
            dropped: AtomicU64::new(0),
        });
        let s = Arc::clone(&sink);
        let thread = std::thread::Builder::new()
            .name("ftl-record".into())
            .spawn(move || write_events(&s, io::BufWriter::with_capacity(1 << 20, out)))?;
        Ok(RequestLog {
            sink,
            thread: Some(thread),
        })
    }

    pub(crate) fn sink(&self) -> Arc<RequestSink> {
        Arc::clone(&self.sink)
    }

    /// Ends the recording: every event queued so far is written and the output flushed.
    /// Events of requests still running are dropped (and counted).
    pub fn finish(mut self) -> RecordSummary {
        self.stop()
    }

    fn stop(&mut self) -> RecordSummary {
        let Some(thread) = self.thread.take() else {
            return RecordSummary {
                requests: 0,
                dropped: 0,
                error: None,
            };
        };
        self.sink.pending.lock().stopped = true;
        self.sink.stop.notify_one();
        let (requests, error) = thread
            .join()
            .unwrap_or_else(|_| (0, Some(io::Error::other("the recording thread panicked"))));
        RecordSummary {
            requests,
            dropped: self.sink.dropped.load(Ordering::Relaxed),
            error,
        }
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The writer thread: every [`DRAIN_EVERY`] (or at once when the recording ends) takes the
/// queued events and writes them, flushing at least every [`FLUSH_EVERY`]. After a write
/// error it only takes them (nothing more is written; the error is returned).
fn write_events(sink: &RequestSink, mut out: impl Write) -> (u64, Option<io::Error>) {
    let mut seq = 0u64;
    let mut requests = 0u64;
    let mut error: Option<io::Error> = None;
    let mut line = Vec::with_capacity(128);
    let mut batch = Vec::new();
    let mut flushed = Instant::now();
    loop {
        let stopped = {
            let mut p = sink.pending.lock();
            if !p.stopped {
                sink.stop.wait_for(&mut p, DRAIN_EVERY);
            }
            std::mem::swap(&mut batch, &mut p.events);
            p.stopped
        };
        for event in batch.drain(..) {
            if error.is_some() {
                continue;
            }
            seq += 1;
            line.clear();
            format_event(&mut line, seq, &event);
            if matches!(event, Event::Issue { .. }) {
                requests += 1;
            }
            if let Err(e) = out.write_all(&line) {
                error = Some(e);
            }
        }
        if error.is_none() && (stopped || flushed.elapsed() >= FLUSH_EVERY) {
            if let Err(e) = out.flush() {
                error = Some(e);
            }
            flushed = Instant::now();
        }
        if stopped {
            return (requests, error);
        }
    }
}

/// One blkparse line (see the module doc), appended to `line`. By hand with `itoa` rather than
/// `write!`: at 100k requests a second the formatting is most of what recording costs.
fn format_event(line: &mut Vec<u8>, seq: u64, event: &Event) {
    let (t_ns, req, action) = match *event {
        Event::Issue { t_ns, req } => (t_ns, req, b'D'),
        Event::Complete { t_ns, req, .. } => (t_ns, req, b'C'),
    };
    let queue = match req.op {
        RecordedOp::Read | RecordedOp::Flush => 0,
        _ => req.queue,
    };
    let mut num = itoa::Buffer::new();
    line.extend_from_slice(b"  0,0 ");
    pad_left(line, num.format(queue), 3);
    line.push(b' ');
    pad_left(line, num.format(seq), 8);
    line.push(b' ');
    pad_left(line, num.format(t_ns / 1_000_000_000), 5);
    line.push(b'.');
    let nanos = num.format(t_ns % 1_000_000_000);
    line.extend(std::iter::repeat_n(b'0', 9 - nanos.len()));
    line.extend_from_slice(nanos.as_bytes());
    line.extend_from_slice(b"     0  ");
    line.push(action);
    line.push(b' ');
    pad_left(line, req.op.rwbs(), 3);
    line.push(b' ');
    if req.op != RecordedOp::Flush {
        line.extend_from_slice(num.format(req.offset / 512).as_bytes());
        line.extend_from_slice(b" + ");
        line.extend_from_slice(num.format(req.len / 512).as_bytes());
        line.push(b' ');
    }
    match *event {
        Event::Complete { ok, .. } => {
            line.push(b'[');
            line.extend_from_slice(num.format(if ok { 0 } else { EIO }).as_bytes());
            line.extend_from_slice(b"]\n");
        }
        _ => line.extend_from_slice(b"[ftld]\n"),
    }
}

/// `s` right-aligned in `width` columns.
fn pad_left(line: &mut Vec<u8>, s: &str, width: usize) {
    line.extend(std::iter::repeat_n(b' ', width.saturating_sub(s.len())));
    line.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Write` whose bytes the test reads after the recording ends.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_have_blkparse_columns_and_time_order() {
        let out = Shared::default();
        let log = RequestLog::start(Box::new(out.clone())).unwrap();
        let sink = log.sink();
        let clock = AtomicU64::new(1_500_000_123);
        let now = || clock.fetch_add(1000, Ordering::Relaxed);
        let w = sink.issue(now, RecordedOp::Write { fua: true }, 3, 4096, 65536);
        let f = sink.issue(now, RecordedOp::Flush, 2, 0, 0);
        sink.complete(now, w, true);
        sink.complete(now, f, false);
        let r = sink.issue(now, RecordedOp::Read, 1, 512, 512);
        let s = log.finish();
        assert_eq!((s.requests, s.dropped), (3, 0));
        assert!(s.error.is_none());
        // Issued but not completed before the end: no C line, nothing dropped.
        let _ = r;
        let text = String::from_utf8(out.0.lock().clone()).unwrap();
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines,
            vec![
                vec![
                    "0,0",
                    "3",
                    "1",
                    "1.500000123",
                    "0",
                    "D",
                    "WF",
                    "8",
                    "+",
                    "128",
                    "[ftld]"
                ],
                vec!["0,0", "0", "2", "1.500001123", "0", "D", "FN", "[ftld]"],
                vec![
                    "0,0",
                    "3",
                    "3",
                    "1.500002123",
                    "0",
                    "C",
                    "WF",
                    "8",
                    "+",
                    "128",
                    "[0]"
                ],
                vec!["0,0", "0", "4", "1.500003123", "0", "C", "FN", "[-5]"],
                vec![
                    "0,0",
                    "0",
                    "5",
                    "1.500004123",
                    "0",
                    "D",
                    "R",
                    "1",
                    "+",
                    "1",
                    "[ftld]"
                ],
            ]
        );
    }

    #[test]
    fn a_failing_output_stops_the_recording_and_says_why() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            fn flush(&mut self) -> io::Result<()> {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
        }
        let log = RequestLog::start(Box::new(Full)).unwrap();
        let sink = log.sink();
        // More than the writer's buffer, so a write reaches the output.
        for i in 0..20_000u64 {
            sink.issue(|| i, RecordedOp::Trim { fua: false }, 0, i * 4096, 4096);
        }
        let s = log.finish();
        assert_eq!(s.error.map(|e| e.raw_os_error()), Some(Some(libc::ENOSPC)));
    }

    #[test]
    fn events_after_the_end_are_counted_as_dropped() {
        let log = RequestLog::start(Box::new(Shared::default())).unwrap();
        let sink = log.sink();
        let s = log.finish();
        assert_eq!(s.dropped, 0);
        sink.issue(|| 0, RecordedOp::Read, 0, 0, 512);
        assert_eq!(sink.dropped.load(Ordering::Relaxed), 1);
    }
}
