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
//! counted ([`RecordSummary::dropped`]) rather than slowing the device being measured. Each
//! batch goes to the file in one write, so a `kill -9` loses at most the last few
//! milliseconds; a write that fails (a full disk) is cut back to the last whole batch, so the
//! file never ends in half a line, and the recording stops there (later events are counted as
//! dropped).

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Events that may wait for the writer before new ones are dropped.
const MAX_PENDING: usize = 64 * 1024;

/// How often the writer takes the events queued.
const DRAIN_EVERY: Duration = Duration::from_millis(5);

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
    /// Starts a recording appended to `out` (opened for writing; the caller truncates it).
    pub fn start(out: File) -> io::Result<RequestLog> {
        let sink = Arc::new(RequestSink {
            pending: Mutex::new(Pending::default()),
            stop: Condvar::new(),
            dropped: AtomicU64::new(0),
        });
        let s = Arc::clone(&sink);
        let thread = std::thread::Builder::new()
            .name("ftl-record".into())
            .spawn(move || write_events(&s, out))?;
        Ok(RequestLog {
            sink,
            thread: Some(thread),
        })
    }

    pub(crate) fn sink(&self) -> Arc<RequestSink> {
        Arc::clone(&self.sink)
    }

    /// Ends the recording: every event queued so far is written.
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
/// queued events and writes them as one batch. A failed write is cut back to the end of the
/// last whole batch and ends the recording (the error is returned).
fn write_events(sink: &RequestSink, mut out: File) -> (u64, Option<io::Error>) {
    let mut seq = 0u64;
    let mut requests = 0u64;
    let mut batch = Vec::new();
    let mut text = Vec::new();
    // Where the last whole batch ends.
    let mut good = match out.seek(SeekFrom::End(0)) {
        Ok(n) => n,
        Err(e) => return (0, Some(e)),
    };
    loop {
        let stopped = {
            let mut p = sink.pending.lock();
            if !p.stopped {
                sink.stop.wait_for(&mut p, DRAIN_EVERY);
            }
            std::mem::swap(&mut batch, &mut p.events);
            p.stopped
        };
        text.clear();
        let mut issued = 0;
        let events = batch.len() as u64;
        for event in batch.drain(..) {
            seq += 1;
            format_event(&mut text, seq, &event);
            issued += u64::from(matches!(event, Event::Issue { .. }));
        }
        if !text.is_empty() {
            if let Err(e) = out.write_all(&text) {
                // Half a line would be read as a request of another length.
                let _ = out.set_len(good);
                sink.pending.lock().stopped = true;
                sink.dropped.fetch_add(events, Ordering::Relaxed);
                return (requests, Some(e));
            }
            good += text.len() as u64;
            requests += issued;
        }
        if stopped {
            return (requests, None);
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

    fn recording() -> (tempfile::NamedTempFile, RequestLog) {
        let f = tempfile::NamedTempFile::new().unwrap();
        let log = RequestLog::start(f.reopen().unwrap()).unwrap();
        (f, log)
    }

    #[test]
    fn lines_have_blkparse_columns_and_time_order() {
        let (f, log) = recording();
        let sink = log.sink();
        let clock = AtomicU64::new(1_500_000_123);
        let now = || clock.fetch_add(1000, Ordering::Relaxed);
        let w = sink.issue(now, RecordedOp::Write { fua: true }, 3, 4096, 65536);
        let fl = sink.issue(now, RecordedOp::Flush, 2, 0, 0);
        sink.complete(now, w, true);
        sink.complete(now, fl, false);
        let t = sink.issue(now, RecordedOp::Trim { fua: true }, 1, 1 << 40, 1 << 30);
        sink.complete(now, t, true);
        // Issued but not completed before the end: no C line, nothing dropped.
        sink.issue(now, RecordedOp::Read, 1, 512, 512);
        let s = log.finish();
        assert_eq!((s.requests, s.dropped), (4, 0));
        assert!(s.error.is_none());
        let text = std::fs::read_to_string(f.path()).unwrap();
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let sectors = (1u64 << 40) / 512;
        let sectors = sectors.to_string();
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
                    "1",
                    "5",
                    "1.500004123",
                    "0",
                    "D",
                    "DF",
                    &sectors,
                    "+",
                    "2097152",
                    "[ftld]"
                ],
                vec![
                    "0,0",
                    "1",
                    "6",
                    "1.500005123",
                    "0",
                    "C",
                    "DF",
                    &sectors,
                    "+",
                    "2097152",
                    "[0]"
                ],
                vec![
                    "0,0",
                    "0",
                    "7",
                    "1.500006123",
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
        // Every write to /dev/full fails with ENOSPC.
        let full = File::options().write(true).open("/dev/full").unwrap();
        let log = RequestLog::start(full).unwrap();
        let sink = log.sink();
        sink.issue(|| 0, RecordedOp::Trim { fua: false }, 0, 0, 4096);
        // The writer takes the batch within a few milliseconds and fails on it.
        std::thread::sleep(DRAIN_EVERY * 4);
        sink.issue(|| 1, RecordedOp::Read, 0, 0, 4096);
        let s = log.finish();
        assert_eq!(s.error.map(|e| e.raw_os_error()), Some(Some(libc::ENOSPC)));
        assert_eq!((s.requests, s.dropped), (0, 2));
    }

    #[test]
    fn events_after_the_end_are_counted_as_dropped() {
        let (_f, log) = recording();
        let sink = log.sink();
        let s = log.finish();
        assert_eq!(s.dropped, 0);
        sink.issue(|| 0, RecordedOp::Read, 0, 0, 512);
        assert_eq!(sink.dropped.load(Ordering::Relaxed), 1);
    }
}
