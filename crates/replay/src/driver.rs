//! The virtual-time driver: feeds requests to an FTL opened with timing `virtual`, each at its
//! arrival time on the simulated clock, and records when each completes.
//!
//! **Arrivals.** Open loop (no queue depth): a request arrives at its trace time divided by
//! `speed` ([`Arrival::At`]), or, for a request that follows its predecessor
//! ([`Arrival::After`]), that long (divided by `speed`) after the previous request completed. Closed loop (`queue
//! depth N`): N streams; each sends its next request when its previous one completed (plus the
//! request's think time), trace times are ignored. Requests are handed to the FTL in arrival
//! order; a trace time earlier than the previous request's is moved up to it (counted as
//! `reordered`, as is one earlier than the trace's first request, which the trace reader puts
//! at time 0 and so is moved up to its predecessor's time too).
//!
//! **A request** runs whole when it arrives: `Ftl::advance_to(arrival)` first runs the
//! background work due before then (GC, maintenance: `ftl::sim`), then the request's FTL call
//! runs on the simulated clock — its NAND operations start no earlier than the arrival and queue
//! behind earlier work on their bank and channel, and waiting for them moves the clock. The
//! completion time is the clock when the call returns: a write acknowledged from the write
//! buffer completes at once (unless the buffer is full), a FUA write or flush when durable, a
//! read when its data crossed the channel — as the served device answers. Every FTL future
//! must be ready on its first poll (nothing else runs to wake it); one that is not is a bug,
//! reported as [`ReplayError::WouldBlock`] rather than a hang.
//!
//! **Queues.** Closed loop, a stream's writes and trims go through its own write queue (a
//! stream is an application thread). Open loop, through the queue the trace names, else the
//! one whose last write the request continues, else the queues in turn (`queues.rs`).
//!
//! **Addresses.** Offsets and lengths are widened to 512-byte sectors (`unaligned`). A request
//! past the device end is wrapped (its offset taken modulo the capacity, or moved back to end
//! at the capacity) or refused, as [`OutOfRange`] says; both are counted.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use ftl::{Ftl, FtlError};
use serde::Serialize;

use crate::queues::QueueChooser;
use crate::record::Recorder;
use crate::request::{Arrival, Op, Request};
use crate::trace::TraceError;

/// What to do with a request past the device end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutOfRange {
    Wrap,
    Refuse,
}

impl std::str::FromStr for OutOfRange {
    type Err = String;
    fn from_str(s: &str) -> Result<OutOfRange, String> {
        match s {
            "wrap" => Ok(OutOfRange::Wrap),
            "refuse" => Ok(OutOfRange::Refuse),
            _ => Err(format!("{s:?}: wrap or refuse")),
        }
    }
}

/// How requests are issued.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// Closed loop with this many streams; `None`: open loop at trace times.
    pub queue_depth: Option<usize>,
    /// Open loop: trace time is divided by this.
    pub speed: f64,
    pub out_of_range: OutOfRange,
}

impl Default for DriverOptions {
    fn default() -> DriverOptions {
        DriverOptions {
            queue_depth: None,
            speed: 1.0,
            out_of_range: OutOfRange::Wrap,
        }
    }
}

/// Requests the driver changed or left out, by reason.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Adjusted {
    /// Past the device end, wrapped into it.
    pub wrapped: u64,
    /// Past the device end, not replayed (`--out-of-range refuse`), or longer than the device.
    pub refused: u64,
    /// Offset or length not a multiple of 512, widened to whole sectors.
    pub unaligned: u64,
    /// Trace time earlier than the previous request's (or than the trace's first request's),
    /// moved up to the previous request's arrival (open loop only).
    pub reordered: u64,
    /// Reads or writes of zero bytes, not replayed.
    pub empty: u64,
}

impl std::fmt::Display for Adjusted {
    /// The non-zero counts, as `wrapped 3, unaligned 12` (`none` if every request was
    /// replayed as the trace has it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts = [
            ("wrapped", self.wrapped),
            ("refused", self.refused),
            ("unaligned", self.unaligned),
            ("reordered", self.reordered),
            ("empty", self.empty),
        ];
        let mut any = false;
        for (name, n) in counts.iter().filter(|(_, n)| *n > 0) {
            write!(f, "{}{name} {n}", if any { ", " } else { "" })?;
            any = true;
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("the FTL: {0}")]
    Ftl(#[from] FtlError),
    #[error("the device turned read-only at request {request}: {reason}")]
    ReadOnly { request: u64, reason: String },
    #[error("request {request} failed on a device read-only since its open: {reason}")]
    ReadOnlyFromOpen { request: u64, reason: String },
    #[error("a {op} request would block in virtual time (an FTL future was not ready on its first poll): a bug")]
    WouldBlock { op: &'static str },
    #[error("the target: {0}")]
    Target(String),
    #[error("writing {what}: {source}")]
    Output {
        what: String,
        source: std::io::Error,
    },
}

/// Polls a future once: in virtual time every FTL call completes without waiting.
fn ready<F: Future>(f: F, op: Op) -> Result<F::Output, ReplayError> {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Ok(v),
        Poll::Pending => Err(ReplayError::WouldBlock { op: op.name() }),
    }
}

/// Flushes `ftl` in virtual time: every buffered page programmed and committed, so what
/// follows starts on a settled device (after a precondition, nothing of it is still queued in
/// the writers to delay the first measured request).
pub(crate) fn settle(ftl: &Ftl) -> Result<(), ReplayError> {
    ready(ftl.flush(), Op::Flush)?.map_err(ReplayError::Ftl)
}

/// Feeds requests to an FTL in virtual time.
pub struct Driver<'a> {
    ftl: &'a Ftl,
    /// The device was read-only before the first request (an image that opened so): a
    /// request that fails for it did not turn it read-only.
    read_only_at_start: bool,
    opts: DriverOptions,
    capacity: u64,
    queues: usize,
    /// Write payload: requests take slices of it (no copy per request).
    data: Bytes,
    buf: Vec<u8>,
    pub adjusted: Adjusted,
    /// Requests the FTL failed (an uncorrectable read, say), by op.
    pub errors: u64,
    /// The first of them: which request, and why.
    pub first_error: Option<String>,
    /// When the replay began (simulated ns).
    pub start_ns: u64,
    issued: u64,
    /// Open loop: the queue each request goes through (`queues.rs`).
    chooser: QueueChooser,
}

impl<'a> Driver<'a> {
    /// A driver over `ftl`, which must run with timing `virtual`. The replay starts when the
    /// device is idle (after whatever ran before, a precondition say).
    pub fn new(ftl: &'a Ftl, opts: DriverOptions) -> Result<Driver<'a>, ReplayError> {
        if ftl.nand().sim_clock().is_none() {
            return Err(ReplayError::Ftl(FtlError::Config(
                "the replay driver needs an FTL opened with timing virtual".into(),
            )));
        }
        let start_ns = ftl.now_ns().max(ftl.nand().idle_at_ns());
        Ok(Driver {
            ftl,
            capacity: ftl.capacity(),
            queues: ftl.queues(),
            opts,
            data: Bytes::from(patterned(1 << 20)),
            buf: Vec::new(),
            adjusted: Adjusted::default(),
            errors: 0,
            first_error: None,
            start_ns,
            issued: 0,
            chooser: QueueChooser::new(ftl.queues()),
            read_only_at_start: ftl.read_only_reason().is_some(),
        })
    }

    /// Replays every request, recording each in `rec`; `progress` is called with the count
    /// of requests done every 4096 requests.
    pub fn run(
        &mut self,
        requests: impl Iterator<Item = Result<Request, TraceError>>,
        rec: &mut Recorder,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), ReplayError> {
        let t0 = self.start_ns;
        let mut prev_arrival = t0;
        let mut prev_done = t0;
        // Closed loop: streams by the time they are free (ties: lower stream first).
        let mut streams: BinaryHeap<Reverse<(u64, usize)>> = self
            .opts
            .queue_depth
            .map(|n| (0..n.max(1)).map(|s| Reverse((t0, s))).collect())
            .unwrap_or_default();
        for r in requests {
            let r = r?;
            let (arrival, before_first) = (r.arrival, r.before_first);
            let (mut at, stream) = match self.opts.queue_depth {
                Some(_) => {
                    let Some(Reverse((free, s))) = streams.pop() else {
                        unreachable!("a closed loop has at least one stream")
                    };
                    let think = match arrival {
                        Arrival::After(d) => d,
                        Arrival::At(_) => 0,
                    };
                    (free.saturating_add(think), s)
                }
                None => {
                    let at = match arrival {
                        Arrival::At(t) => t0.saturating_add((t as f64 / self.opts.speed) as u64),
                        Arrival::After(d) => {
                            prev_done.saturating_add((d as f64 / self.opts.speed) as u64)
                        }
                    };
                    (at, self.issued as usize)
                }
            };
            // Fitted to the device: one that is not replayed (empty, or refused past the end)
            // takes no time (its think time still passes) and is counted only as such.
            let fitted = fit(&mut self.adjusted, r, self.capacity, self.opts.out_of_range);
            // Counted, open loop: a time earlier than the previous request's, or than the
            // trace's first (its `At(0)` may equal the previous arrival). Moved, any loop: only
            // a time before the previous arrival (closed loop, `at` is when a stream is free,
            // which a request never precedes).
            if (at < prev_arrival || before_first)
                && fitted.is_some()
                && matches!(arrival, Arrival::At(_))
                && self.opts.queue_depth.is_none()
            {
                self.adjusted.reordered += 1;
            }
            if at < prev_arrival {
                at = prev_arrival;
            }
            prev_arrival = at;
            let Some(r) = fitted else {
                prev_done = at;
                if self.opts.queue_depth.is_some() {
                    streams.push(Reverse((at, stream)));
                }
                self.issued += 1;
                if self.issued.is_multiple_of(4096) {
                    progress(self.issued);
                }
                continue;
            };
            // The interval is opened before the request runs, so its counters do not yet
            // include this request's writes; what the device did before the interval began
            // (the programs of earlier writes, GC) is run first, and belongs to the intervals
            // before it. (Only forward: the clock never goes back.)
            let start = t0 + rec.interval_start(at - t0);
            if start > self.ftl.now_ns() {
                self.ftl.advance_to(start)?;
            }
            rec.arrive(self.ftl, at - t0);
            let q = match self.opts.queue_depth {
                // A stream is an application thread: its requests go through its queue.
                Some(_) => stream % self.queues.max(1),
                None => self.chooser.choose(&r, self.issued),
            };
            let done = self.execute(at, r, q)?;
            prev_done = done;
            if self.opts.queue_depth.is_some() {
                streams.push(Reverse((prev_done, stream)));
            }
            // As replayed: widened to sectors, wrapped.
            rec.record(self.ftl, at - t0, r.op, r.offset, r.len, done - at);
            self.issued += 1;
            if self.issued.is_multiple_of(4096) {
                progress(self.issued);
            }
        }
        progress(self.issued);
        Ok(())
    }

    /// Runs one request (fitted to the device) arriving at `at` through write queue `q`; its
    /// completion time.
    fn execute(&mut self, at: u64, r: Request, q: usize) -> Result<u64, ReplayError> {
        self.ftl.advance_to(at)?;
        let ftl = self.ftl;
        let result = match r.op {
            Op::Read => {
                let len = r.len as usize;
                if self.buf.len() < len {
                    self.buf.resize(len, 0);
                }
                ready(ftl.read(r.offset, &mut self.buf[..len]), r.op)?
            }
            Op::Write => {
                let len = r.len as usize;
                if self.data.len() < len {
                    // Grown by powers of two (few regrowths), but never past the device: a
                    // request is at most the capacity (`fit`).
                    let cap = usize::try_from(self.capacity).unwrap_or(usize::MAX);
                    self.data = Bytes::from(patterned(len.next_power_of_two().min(cap).max(len)));
                }
                ready(
                    ftl.write_bytes(q, r.offset, self.data.slice(..len), r.fua),
                    r.op,
                )?
            }
            Op::Flush => ready(ftl.flush(), r.op)?,
            Op::Trim => ready(ftl.trim(q, r.offset, r.len, r.fua), r.op)?,
        };
        if let Err(e) = result {
            // Counted: the summary reports `errors` (an uncorrectable read, say) and the first
            // one. Fatal only where the device refused it for being read-only (an uncorrectable
            // read on a read-only device is the request's error, as on any other).
            self.errors += 1;
            let refused = matches!(e, FtlError::ReadOnly(_) | FtlError::NoSpace(_));
            if let Some(reason) = ftl.read_only_reason().filter(|_| refused) {
                self.first_error.get_or_insert_with(|| {
                    format!(
                        "request {} ({} of {} bytes at {}): {e}",
                        self.issued,
                        r.op.name(),
                        r.len,
                        r.offset
                    )
                });
                return Err(if self.read_only_at_start {
                    ReplayError::ReadOnlyFromOpen {
                        request: self.issued,
                        reason,
                    }
                } else {
                    ReplayError::ReadOnly {
                        request: self.issued,
                        reason,
                    }
                });
            }
            if self.first_error.is_none() {
                // Numbered as `ReplayError::ReadOnly` numbers its request.
                self.first_error = Some(format!(
                    "request {} ({} of {} bytes at {}): {e}",
                    self.issued,
                    r.op.name(),
                    r.len,
                    r.offset
                ));
            }
        }
        Ok(ftl.now_ns())
    }
}

/// Fits a request to a device of `capacity` bytes: widened to 512-byte sectors, wrapped or
/// refused past the end, as `out_of_range` says; `None` when it is not replayed (empty or
/// refused). Every change is counted in `adjusted`.
pub fn fit(
    adjusted: &mut Adjusted,
    mut r: Request,
    capacity: u64,
    out_of_range: OutOfRange,
) -> Option<Request> {
    if r.op == Op::Flush {
        return Some(r);
    }
    if r.len == 0 {
        adjusted.empty += 1;
        return None;
    }
    // In u128: a trace's offset and length are any u64, and their sum (widened to a sector)
    // must not wrap past 2^64 back into the device.
    let start = r.offset / 512 * 512;
    let exact_end = u128::from(r.offset) + u128::from(r.len);
    let end = exact_end.div_ceil(512) * 512;
    if start != r.offset || end != exact_end {
        adjusted.unaligned += 1;
    }
    let Ok(len) = u64::try_from(end - u128::from(start)) else {
        adjusted.refused += 1;
        return None;
    };
    let mut off = start;
    if end > u128::from(capacity) {
        if len > capacity || out_of_range == OutOfRange::Refuse {
            adjusted.refused += 1;
            return None;
        }
        adjusted.wrapped += 1;
        off = off % capacity / 512 * 512;
        if off + len > capacity {
            off = capacity - len;
        }
    }
    r.offset = off;
    r.len = len;
    Some(r)
}

/// Write payload: not all one byte, so pages differ as real data does.
pub(crate) fn patterned(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect()
}
