//! The real-time driver: sends requests to a [`Target`] on the host's clock, from threads that
//! each block on one request at a time (a synchronous I/O engine), and records when each
//! completes.
//!
//! **Closed loop** (`queue depth N`): N threads; each takes the next request, waits its think
//! time after its previous completion, sends it, and waits for it. The arrival is when it was
//! sent.
//!
//! **Open loop**: this thread dispatches each request at its trace time divided by `speed`
//! (one that follows its predecessor, [`Arrival::After`], that long after every earlier
//! request completed) to a pool of worker threads that grows while all are busy, up to
//! [`MAX_OUTSTANDING`]. A request's arrival is its *scheduled* time, so its latency includes
//! any wait for the dispatcher or a free worker — the response time the trace's host would
//! have seen (no coordinated omission). How late the dispatcher was is reported
//! ([`Dispatch`]).
//!
//! Completions reach the recorder thread in completion order and are recorded in issue order
//! (a reorder buffer), so `requests.csv` lists requests as they were sent.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::driver::{fit, patterned, Adjusted, DriverOptions, ReplayError};
use crate::queues::QueueChooser;
use crate::record::{Recorder, WafSource};
use crate::request::{Arrival, Op, Request};
use crate::target::{Target, TargetError};
use crate::trace::TraceError;

/// Open loop: at most this many requests in flight (worker threads).
pub const MAX_OUTSTANDING: usize = 256;

/// How far behind schedule the open-loop dispatcher sent requests (the tool's own timing
/// error, included in the latencies it reports).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Dispatch {
    pub late_p50_us: f64,
    pub late_p99_us: f64,
    pub late_max_us: f64,
    /// Worker threads the pool grew to.
    pub workers: usize,
}

/// What a real-time run reports besides the recorder's figures.
#[derive(Clone, Debug, Default)]
pub struct RealOutcome {
    pub adjusted: Adjusted,
    /// Requests the target failed.
    pub errors: u64,
    /// The first failed request's message.
    pub first_error: Option<String>,
    /// Open loop only.
    pub dispatch: Option<Dispatch>,
    /// The replay's time 0 (what `requests.csv`'s arrival times count from) on
    /// `CLOCK_MONOTONIC`, in ns: where a [`nand_model::StallReport`]'s stalls fall.
    pub origin_ns: u64,
    /// The target error that ended the replay early (the device turned read-only, the
    /// connection was lost): no request was sent after it; those before it are recorded.
    pub fatal: Option<String>,
}

/// A request handed to a worker.
struct Job {
    seq: u64,
    /// Scheduled arrival, ns since the start.
    at: u64,
    r: Request,
    /// The stream it is sent as (the FTL target's write queue).
    stream: usize,
}

/// A finished request, to the recorder.
struct Done {
    seq: u64,
    at: u64,
    r: Request,
    latency: u64,
    error: Option<TargetError>,
}

/// A 4 KiB-aligned buffer (for `O_DIRECT`), without `unsafe`: a larger vector, used from its
/// first aligned byte.
struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` bytes, the write payload (`patterned`, from its first byte on) or zeroes.
    fn new(len: usize, payload: bool) -> AlignedBuf {
        let mut v = vec![0; len + 4096];
        let off = v.as_ptr().align_offset(4096);
        if payload {
            v[off..off + len].copy_from_slice(&patterned(len));
        }
        AlignedBuf { v, off, len }
    }

    fn slice(&mut self, len: usize) -> &mut [u8] {
        &mut self.v[self.off..self.off + len.min(self.len)]
    }
}

/// A worker's buffers: read data lands in `read`, writes send a slice of `write`.
struct Buffers {
    read: AlignedBuf,
    write: AlignedBuf,
}

impl Buffers {
    fn new() -> Buffers {
        Buffers {
            read: AlignedBuf::new(1 << 20, false),
            write: AlignedBuf::new(1 << 20, true),
        }
    }

    fn fit(&mut self, len: usize) {
        if self.read.len < len {
            self.read = AlignedBuf::new(len.next_power_of_two(), false);
            self.write = AlignedBuf::new(len.next_power_of_two(), true);
        }
    }
}

/// Runs one request on `target`.
fn execute(
    target: &dyn Target,
    stream: usize,
    r: &Request,
    b: &mut Buffers,
) -> Result<(), TargetError> {
    let len = r.len as usize;
    b.fit(len);
    match r.op {
        Op::Read => target.read(stream, r.offset, b.read.slice(len)),
        Op::Write => target.write(stream, r.offset, b.write.slice(len), r.fua),
        Op::Flush => target.flush(),
        Op::Trim => target.trim(stream, r.offset, r.len, r.fua),
    }
}

/// Requests in flight, for [`Arrival::After`]: the dispatcher waits until none is left.
#[derive(Default)]
struct InFlight {
    count: u64,
    /// The latest completion, ns since the start.
    last_done: u64,
}

/// State the threads share.
struct Shared<'a> {
    target: &'a dyn Target,
    start: Instant,
    /// Set when the replay must end early (a fatal target error, a bad trace line).
    stop: AtomicBool,
    /// The caller's stop (a signal): the dispatcher's and streams' waits end at it.
    cancel: Option<&'a crate::Stop>,
    inflight: Mutex<InFlight>,
    drained: Condvar,
}

impl Shared<'_> {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Sleeps until `at_ns`; false, sooner, when the replay is to end (a wait for the next
    /// request of a trace with an hour's gap would otherwise outlast a stop by that hour).
    fn sleep_until(&self, at_ns: u64) -> bool {
        let deadline = self.start + Duration::from_nanos(at_ns);
        loop {
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            if let Some(c) = self.cancel.filter(|c| c.reason().is_some()) {
                // The request waited for is left unreplayed.
                c.mark_cut();
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            // Looked at every 50 ms; the last stretch is slept precisely.
            let step = deadline.min(now + Duration::from_millis(50));
            nand_model::precise_sleep_until(step);
        }
    }

    fn begin(&self) {
        self.inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .count += 1;
    }

    fn end(&self, done_ns: u64) {
        let mut f = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        f.count -= 1;
        f.last_done = f.last_done.max(done_ns);
        if f.count == 0 {
            self.drained.notify_all();
        }
    }

    /// Waits until nothing is in flight; the latest completion time.
    fn drain(&self) -> u64 {
        let mut f = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        while f.count > 0 {
            f = self.drained.wait(f).unwrap_or_else(|e| e.into_inner());
        }
        f.last_done
    }

    /// Runs a job and reports it.
    fn run(&self, job: Job, b: &mut Buffers, done: &Sender<Done>) {
        let error = execute(self.target, job.stream, &job.r, b).err();
        let t = self.now_ns();
        self.end(t);
        if matches!(error, Some(TargetError::Fatal(_))) {
            self.stop.store(true, Ordering::Release);
        }
        let _ = done.send(Done {
            seq: job.seq,
            at: job.at,
            r: job.r,
            latency: t.saturating_sub(job.at),
            error,
        });
    }
}

/// The next request that fits the device, or the end (or a trace error).
fn next_request(
    requests: &mut dyn Iterator<Item = Result<Request, TraceError>>,
    adjusted: &mut Adjusted,
    opts: &DriverOptions,
    capacity: u64,
) -> Option<Result<Request, TraceError>> {
    // A request not replayed takes no time, but its think time still passes (as in the
    // virtual-time driver): it is added to the next replayed request's.
    let mut skipped_think = 0u64;
    loop {
        match requests.next()? {
            Err(e) => return Some(Err(e)),
            Ok(r) => {
                let think = match r.arrival {
                    Arrival::After(d) => d,
                    Arrival::At(_) => 0,
                };
                match fit(adjusted, r, capacity, opts.out_of_range) {
                    Some(mut r) => {
                        if let Arrival::After(d) = &mut r.arrival {
                            *d = d.saturating_add(skipped_think);
                        }
                        return Some(Ok(r));
                    }
                    None => skipped_think = skipped_think.saturating_add(think),
                }
            }
        }
    }
}

/// Replays `requests` on `target` in real time, recording each in `rec` (WAF from `waf`);
/// `progress` is called with the count of requests done every 1024 requests.
pub fn run(
    target: &dyn Target,
    waf: &(dyn WafSource + Sync),
    opts: &DriverOptions,
    requests: impl Iterator<Item = Result<Request, TraceError>> + Send,
    rec: &mut Recorder,
    progress: &mut (dyn FnMut(u64) + Send),
    cancel: Option<&crate::Stop>,
) -> Result<RealOutcome, ReplayError> {
    let start = Instant::now();
    let origin_ns = nand_model::monotonic_ns();
    let shared = Shared {
        target,
        start,
        cancel,
        stop: AtomicBool::new(false),
        inflight: Mutex::new(InFlight::default()),
        drained: Condvar::new(),
    };
    let capacity = target.capacity();
    let (done_tx, done_rx) = unbounded::<Done>();
    std::thread::scope(|s| {
        let recorder = s.spawn(move || record(done_rx, rec, waf, progress));
        let fed = match opts.queue_depth {
            Some(n) => closed_loop(&shared, opts, capacity, n.max(1), requests, &done_tx),
            None => open_loop(&shared, opts, capacity, requests, &done_tx),
        };
        drop(done_tx);
        // Workers are joined by the scope before it returns; the recorder ends when the last
        // sender (each worker's clone) is gone.
        let recorded = recorder.join();
        let (mut outcome, fatal) = match recorded {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        };
        let (adjusted, dispatch) = fed?;
        outcome.adjusted = adjusted;
        outcome.dispatch = dispatch;
        outcome.origin_ns = origin_ns;
        outcome.fatal = fatal;
        Ok(outcome)
    })
}

type Fed = Result<(Adjusted, Option<Dispatch>), ReplayError>;

fn closed_loop(
    shared: &Shared<'_>,
    opts: &DriverOptions,
    capacity: u64,
    streams: usize,
    requests: impl Iterator<Item = Result<Request, TraceError>> + Send,
    done: &Sender<Done>,
) -> Fed {
    struct Feed<I> {
        requests: I,
        adjusted: Adjusted,
        seq: u64,
        error: Option<TraceError>,
    }
    let feed = Mutex::new(Feed {
        requests,
        adjusted: Adjusted::default(),
        seq: 0,
        error: None,
    });
    std::thread::scope(|s| {
        for stream in 0..streams {
            let done = done.clone();
            let feed = &feed;
            s.spawn(move || {
                let mut b = Buffers::new();
                let mut free_at = shared.now_ns();
                while !shared.stop.load(Ordering::Acquire) {
                    let (seq, r) = {
                        let mut f = feed.lock().unwrap_or_else(|e| e.into_inner());
                        let f = &mut *f;
                        match next_request(&mut f.requests, &mut f.adjusted, opts, capacity) {
                            None => return,
                            Some(Err(e)) => {
                                f.error.get_or_insert(e);
                                shared.stop.store(true, Ordering::Release);
                                return;
                            }
                            Some(Ok(r)) => {
                                f.seq += 1;
                                (f.seq - 1, r)
                            }
                        }
                    };
                    if let Arrival::After(think) = r.arrival {
                        if !shared.sleep_until(free_at + think) {
                            return;
                        }
                    }
                    shared.begin();
                    let at = shared.now_ns();
                    shared.run(Job { seq, at, r, stream }, &mut b, &done);
                    free_at = shared.now_ns();
                }
            });
        }
    });
    let f = feed.into_inner().unwrap_or_else(|e| e.into_inner());
    match f.error {
        Some(e) => Err(e.into()),
        None => Ok((f.adjusted, None)),
    }
}

fn open_loop(
    shared: &Shared<'_>,
    opts: &DriverOptions,
    capacity: u64,
    mut requests: impl Iterator<Item = Result<Request, TraceError>>,
    done: &Sender<Done>,
) -> Fed {
    let idle = AtomicUsize::new(0);
    let mut adjusted = Adjusted::default();
    let mut late = Histogram::<u64>::new(3).unwrap_or_else(|_| unreachable!("3 digits are valid"));
    let mut workers = 0usize;
    let mut chooser = QueueChooser::new(shared.target.queues());
    let result = std::thread::scope(|s| {
        let (job_tx, job_rx) = bounded::<Job>(0);
        let idle = &idle;
        let spawn = |job_rx: Receiver<Job>, done: Sender<Done>| {
            s.spawn(move || {
                let mut b = Buffers::new();
                loop {
                    idle.fetch_add(1, Ordering::AcqRel);
                    let Ok(job) = job_rx.recv() else {
                        return;
                    };
                    idle.fetch_sub(1, Ordering::AcqRel);
                    shared.run(job, &mut b, &done);
                }
            });
        };
        let mut prev_at = 0u64;
        let mut seq = 0u64;
        while !shared.stop.load(Ordering::Acquire) {
            let r = match next_request(&mut requests, &mut adjusted, opts, capacity) {
                None => break,
                Some(Err(e)) => return Err(e),
                Some(Ok(r)) => r,
            };
            let mut at = match r.arrival {
                Arrival::At(t) => (t as f64 / opts.speed) as u64,
                Arrival::After(d) => shared
                    .drain()
                    .saturating_add((d as f64 / opts.speed) as u64),
            };
            if at < prev_at || r.before_first {
                if matches!(r.arrival, Arrival::At(_)) {
                    adjusted.reordered += 1;
                }
                at = prev_at;
            }
            prev_at = at;
            if !shared.sleep_until(at) {
                break;
            }
            if idle.load(Ordering::Acquire) == 0 && workers < MAX_OUTSTANDING {
                spawn(job_rx.clone(), done.clone());
                workers += 1;
            }
            shared.begin();
            let _ = late.record(shared.now_ns().saturating_sub(at).max(1));
            // The queue rule of virtual time (which worker sends it does not matter), whose
            // count of requests takes in those not replayed too.
            let stream = chooser.choose(&r, seq + adjusted.refused + adjusted.empty);
            if job_tx.send(Job { seq, at, r, stream }).is_err() {
                break;
            }
            seq += 1;
        }
        Ok(())
        // `job_tx` is dropped here: idle workers see the channel closed and end; the scope
        // waits for the busy ones.
    });
    result?;
    let us = |ns: u64| ns as f64 / 1000.0;
    Ok((
        adjusted,
        Some(Dispatch {
            late_p50_us: us(late.value_at_quantile(0.5)),
            late_p99_us: us(late.value_at_quantile(0.99)),
            late_max_us: us(late.max()),
            workers,
        }),
    ))
}

/// The recorder thread: records finished requests in issue order. Returns the error counts
/// and the first fatal error.
fn record(
    done: Receiver<Done>,
    rec: &mut Recorder,
    waf: &dyn WafSource,
    progress: &mut (dyn FnMut(u64) + Send),
) -> (RealOutcome, Option<String>) {
    let mut out = RealOutcome::default();
    let mut fatal = None;
    let mut waiting: BTreeMap<u64, Done> = BTreeMap::new();
    let mut next = 0u64;
    let mut take = |d: Done, out: &mut RealOutcome, fatal: &mut Option<String>| {
        match d.error {
            Some(TargetError::Fatal(m)) => {
                // A failed request (counted, not recorded: as in virtual time), and the first
                // one ends the replay, numbered as virtual time numbers it.
                out.errors += 1;
                let m = format!("request {}: {m}", d.seq);
                out.first_error.get_or_insert_with(|| m.clone());
                fatal.get_or_insert(m);
                return;
            }
            Some(TargetError::Request(m)) => {
                out.errors += 1;
                out.first_error.get_or_insert(m);
            }
            None => {}
        }
        rec.record(waf, d.at, d.r.op, d.r.offset, d.r.len, d.latency);
    };
    for d in done {
        waiting.insert(d.seq, d);
        while let Some(d) = waiting.remove(&next) {
            next += 1;
            take(d, &mut out, &mut fatal);
            if next.is_multiple_of(1024) {
                progress(next);
            }
        }
    }
    // Requests after a gap (a worker that never reported): recorded all the same.
    for (_, d) in std::mem::take(&mut waiting) {
        next += 1;
        take(d, &mut out, &mut fatal);
    }
    progress(next);
    (out, fatal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::OutOfRange;

    /// The think times of requests that are not replayed (empty, refused past the end) pass
    /// before the next one that is.
    #[test]
    fn a_skipped_request_keeps_its_think_time() {
        let after = |d, offset, len| Request {
            arrival: Arrival::After(d),
            ..Request::new(0, Op::Write, offset, len)
        };
        let trace = vec![
            after(5_000, 1 << 40, 4096),
            after(7_000, 0, 0),
            after(3_000, 8192, 4096),
            after(2_000, 0, 4096),
        ];
        let mut requests = trace.into_iter().map(Ok);
        let mut adjusted = Adjusted::default();
        let opts = DriverOptions {
            out_of_range: OutOfRange::Refuse,
            ..DriverOptions::default()
        };
        let mut next = || match next_request(&mut requests, &mut adjusted, &opts, 1 << 20) {
            Some(Ok(r)) => Some((r.arrival, r.offset)),
            Some(Err(e)) => panic!("{e}"),
            None => None,
        };
        assert_eq!(next(), Some((Arrival::After(15_000), 8192)));
        assert_eq!(next(), Some((Arrival::After(2_000), 0)));
        assert_eq!(next(), None);
        assert_eq!((adjusted.refused, adjusted.empty), (1, 1));
    }

    /// A target that takes 2 ms a request (so the open-loop pool grows to several workers)
    /// and notes the stream each write came on.
    struct Streams {
        seen: Mutex<Vec<(u64, usize)>>,
    }

    impl Target for Streams {
        fn describe(&self) -> String {
            "a recording target".into()
        }
        fn capacity(&self) -> u64 {
            1 << 30
        }
        fn queues(&self) -> usize {
            2
        }
        fn read(&self, _: usize, _: u64, _: &mut [u8]) -> Result<(), TargetError> {
            Ok(())
        }
        fn write(&self, stream: usize, offset: u64, _: &[u8], _: bool) -> Result<(), TargetError> {
            std::thread::sleep(Duration::from_millis(2));
            self.seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((offset, stream));
            Ok(())
        }
        fn flush(&self) -> Result<(), TargetError> {
            Ok(())
        }
        fn trim(&self, _: usize, _: u64, _: u64, _: bool) -> Result<(), TargetError> {
            Ok(())
        }
    }

    /// Open loop in real time applies virtual time's queue rule: a sequential stream goes
    /// through one queue whichever worker sends its requests (before, each went through its
    /// worker's: the pool grows while all are busy, so the stream was spread over them), a
    /// second stream interleaved with it through the other.
    #[test]
    fn a_sequential_stream_keeps_one_queue_in_real_time() {
        let target = Streams {
            seen: Mutex::new(Vec::new()),
        };
        // Two streams, a request each every 0.5 ms: 4+ in flight at 2 ms each.
        let requests: Vec<Request> = (0..200u64)
            .map(|i| Request {
                arrival: Arrival::At(i * 250_000),
                ..Request::new(0, Op::Write, (i % 2) * (1 << 29) + (i / 2) * 4096, 4096)
            })
            .collect();
        let mut rec = Recorder::new(&crate::record::NoWaf, None, u64::MAX).unwrap();
        let o = run(
            &target,
            &crate::record::NoWaf,
            &DriverOptions::default(),
            requests.into_iter().map(Ok),
            &mut rec,
            &mut |_| {},
            None,
        )
        .unwrap();
        assert!(o.dispatch.unwrap().workers > 2, "the pool grew");
        let seen = target.seen.into_inner().unwrap();
        assert_eq!(seen.len(), 200);
        let queue_of = |stream: u64| {
            let qs: std::collections::BTreeSet<usize> = seen
                .iter()
                .filter(|(off, _)| off >> 29 == stream)
                .map(|(_, q)| *q)
                .collect();
            assert_eq!(qs.len(), 1, "stream {stream} went through queues {qs:?}");
            qs.into_iter().next()
        };
        assert_ne!(queue_of(0), queue_of(1));
    }
}
