//! What a replay measures: per-op latency histograms, one line per request
//! (`requests.csv`), a time series per interval, and the points the plots draw.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use ftl::Ftl;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::request::Op;

/// Where write amplification comes from: (host bytes written, NAND bytes programmed), or
/// `None` for a device that cannot tell (an NBD export, a block device).
pub trait WafSource {
    fn waf_counters(&self) -> Option<(u64, u64)>;
}

impl WafSource for Ftl {
    fn waf_counters(&self) -> Option<(u64, u64)> {
        Some(Ftl::waf_counters(self))
    }
}

/// A device without WAF counters.
pub struct NoWaf;

impl WafSource for NoWaf {
    fn waf_counters(&self) -> Option<(u64, u64)> {
        None
    }
}

/// Latency figures of one kind of request, in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OpSummary {
    pub count: u64,
    pub bytes: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// One interval of the time series.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Interval {
    /// Start of the interval, seconds since the replay began.
    pub start_s: f64,
    pub requests: u64,
    pub read_mb_s: f64,
    pub write_mb_s: f64,
    pub mean_latency_us: f64,
    pub p99_latency_us: f64,
    pub max_latency_us: f64,
    /// WAF of the writes in this interval (NAND bytes programmed / host bytes written), 0 when
    /// nothing was written.
    pub waf: f64,
    /// WAF since the replay began.
    pub cumulative_waf: f64,
}

fn hist() -> Histogram<u64> {
    // Nanoseconds, 3 significant digits; grows as needed.
    Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
}

/// What a histogram rounds, kept exactly: the sum and the largest of the latencies (ns). A
/// histogram's max is the top of its bucket (up to 0.1 % above the largest value, which made
/// RFTL's write maximum read as over its bound when it met it exactly), and its mean counts
/// a latency of 0 as 1 ns.
#[derive(Clone, Copy, Default)]
struct Exact {
    sum: u128,
    max: u64,
}

impl Exact {
    fn add(&mut self, ns: u64) {
        self.sum += u128::from(ns);
        self.max = self.max.max(ns);
    }
}

fn summary(h: &Histogram<u64>, bytes: u64, exact: Exact) -> OpSummary {
    let us = |ns: u64| ns as f64 / 1000.0;
    if h.is_empty() {
        return OpSummary::default();
    }
    // Percentiles from the histogram (3 significant digits), never above the true maximum.
    let at = |q: f64| us(h.value_at_quantile(q).min(exact.max));
    OpSummary {
        count: h.len(),
        bytes,
        mean_us: exact.sum as f64 / h.len() as f64 / 1000.0,
        p50_us: at(0.5),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: us(exact.max),
    }
}

struct Open {
    start: u64,
    requests: u64,
    read_bytes: u64,
    write_bytes: u64,
    latency_sum: u128,
    latency_max: u64,
    hist: Histogram<u64>,
    waf_at_start: Option<(u64, u64)>,
}

/// Collects a replay's measurements.
pub struct Recorder {
    hists: [Histogram<u64>; 4],
    exact: [Exact; 4],
    bytes: [u64; 4],
    csv: Option<BufWriter<File>>,
    interval_ns: u64,
    open: Option<Open>,
    pub intervals: Vec<Interval>,
    waf_origin: Option<(u64, u64)>,
    /// (arrival s, latency us, op) for the latency-over-time plot: every `stride`-th request,
    /// the stride doubling whenever `MAX_POINTS` are kept (deterministic thinning).
    pub points: Vec<(f64, f64, Op)>,
    stride: u64,
    seen: u64,
    /// The latest completion (ns since the replay began).
    pub last_done_ns: u64,
    line: String,
    /// The first failed write to `requests.csv`, returned by `finish`.
    csv_error: Option<std::io::Error>,
}

const MAX_POINTS: usize = 20_000;

fn idx(op: Op) -> usize {
    match op {
        Op::Read => 0,
        Op::Write => 1,
        Op::Flush => 2,
        Op::Trim => 3,
    }
}

impl Recorder {
    /// A recorder writing `requests.csv` to `csv` (if given), with a time-series interval of
    /// `interval_ns`; `waf`'s counters now are the baseline.
    pub fn new(
        waf: &dyn WafSource,
        csv: Option<&Path>,
        interval_ns: u64,
    ) -> std::io::Result<Recorder> {
        let csv = match csv {
            Some(p) => {
                let mut w = BufWriter::with_capacity(1 << 20, File::create(p)?);
                writeln!(w, "arrival_us,op,offset,length,latency_us")?;
                Some(w)
            }
            None => None,
        };
        Ok(Recorder {
            hists: [hist(), hist(), hist(), hist()],
            exact: [Exact::default(); 4],
            bytes: [0; 4],
            csv,
            interval_ns: interval_ns.max(1),
            open: None,
            intervals: Vec::new(),
            waf_origin: waf.waf_counters(),
            points: Vec::new(),
            stride: 1,
            seen: 0,
            last_done_ns: 0,
            line: String::new(),
            csv_error: None,
        })
    }

    /// Records one request: it arrived `arrival` ns after the replay began and took
    /// `latency` ns. Requests come in arrival order; one that arrived before the interval
    /// now open (a real-time replay's streams race) is counted in that interval.
    pub fn record(
        &mut self,
        waf: &dyn WafSource,
        arrival: u64,
        op: Op,
        offset: u64,
        len: u64,
        latency: u64,
    ) {
        let i = idx(op);
        // `record` only fails for values past the histogram's range, which auto-resize grows.
        let _ = self.hists[i].record(latency.max(1));
        self.exact[i].add(latency);
        self.bytes[i] += len;
        self.last_done_ns = self.last_done_ns.max(arrival + latency);
        if let Some(w) = &mut self.csv {
            use std::fmt::Write as _;
            self.line.clear();
            let _ = writeln!(
                self.line,
                "{}.{:03},{},{offset},{len},{}.{:03}",
                arrival / 1000,
                arrival % 1000,
                op.name(),
                latency / 1000,
                latency % 1000
            );
            if let Err(e) = w.write_all(self.line.as_bytes()) {
                self.csv_error.get_or_insert(e);
            }
        }
        self.seen += 1;
        if self.seen.is_multiple_of(self.stride) {
            self.points
                .push((arrival as f64 / 1e9, latency as f64 / 1000.0, op));
            if self.points.len() >= MAX_POINTS {
                self.stride *= 2;
                let mut k = 0;
                self.points.retain(|_| {
                    k += 1;
                    k % 2 == 0
                });
            }
        }
        self.arrive(waf, arrival);
        if let Some(o) = &mut self.open {
            o.requests += 1;
            match op {
                Op::Read => o.read_bytes += len,
                Op::Write => o.write_bytes += len,
                _ => {}
            }
            o.latency_sum += u128::from(latency);
            o.latency_max = o.latency_max.max(latency);
            let _ = o.hist.record(latency.max(1));
        }
    }

    /// A request arrives `arrival` ns after the replay began: the interval it falls in is
    /// opened (the one before it closed) with `waf`'s counters as they are now. A driver that
    /// runs requests one at a time calls this before running one, so an interval's WAF counts
    /// its own requests' host writes, not its first one's in the interval before;
    /// [`Recorder::record`] calls it too (after the request: a real-time replay's requests
    /// overlap anyway).
    pub fn arrive(&mut self, waf: &dyn WafSource, arrival: u64) {
        let slot = self.interval_start(arrival);
        if self.open.as_ref().is_none_or(|o| o.start != slot) {
            self.close_interval(waf);
            self.open = Some(Open {
                start: slot,
                requests: 0,
                read_bytes: 0,
                write_bytes: 0,
                latency_sum: 0,
                latency_max: 0,
                hist: hist(),
                waf_at_start: waf.waf_counters(),
            });
        }
    }

    /// Where the interval of a request arriving `arrival` ns after the replay began starts
    /// (never before the interval open now).
    pub fn interval_start(&self, arrival: u64) -> u64 {
        let slot = arrival / self.interval_ns * self.interval_ns;
        self.open.as_ref().map_or(slot, |o| slot.max(o.start))
    }

    fn close_interval(&mut self, waf: &dyn WafSource) {
        let Some(o) = self.open.take() else {
            return;
        };
        // Without counters both ratios are 0 ("nothing known"), as for an interval without
        // writes.
        let (h1, n1) = waf.waf_counters().unwrap_or_default();
        let (h0, n0) = o.waf_at_start.unwrap_or((h1, n1));
        let (ho, no) = self.waf_origin.unwrap_or((h1, n1));
        let ratio = |n: u64, h: u64| if h == 0 { 0.0 } else { n as f64 / h as f64 };
        let secs = self.interval_ns as f64 / 1e9;
        self.intervals.push(Interval {
            start_s: o.start as f64 / 1e9,
            requests: o.requests,
            read_mb_s: o.read_bytes as f64 / 1e6 / secs,
            write_mb_s: o.write_bytes as f64 / 1e6 / secs,
            mean_latency_us: if o.requests == 0 {
                0.0
            } else {
                o.latency_sum as f64 / o.requests as f64 / 1000.0
            },
            p99_latency_us: o.hist.value_at_quantile(0.99).min(o.latency_max) as f64 / 1000.0,
            max_latency_us: o.latency_max as f64 / 1000.0,
            waf: ratio(n1 - n0, h1 - h0),
            cumulative_waf: ratio(n1 - no, h1 - ho),
        });
    }

    /// Closes the last interval and flushes `requests.csv`.
    pub fn finish(&mut self, waf: &dyn WafSource) -> std::io::Result<()> {
        self.close_interval(waf);
        if let Some(e) = self.csv_error.take() {
            return Err(e);
        }
        if let Some(w) = &mut self.csv {
            w.flush()?;
        }
        Ok(())
    }

    /// Latency figures of `op`.
    pub fn op_summary(&self, op: Op) -> OpSummary {
        summary(
            &self.hists[idx(op)],
            self.bytes[idx(op)],
            self.exact[idx(op)],
        )
    }

    /// The latency histogram of `op` (ns), for the CDF plot.
    pub fn histogram(&self, op: Op) -> &Histogram<u64> {
        &self.hists[idx(op)]
    }

    /// Requests recorded.
    pub fn requests(&self) -> u64 {
        self.hists.iter().map(Histogram::len).sum()
    }

    /// NAND bytes programmed over host bytes written since the replay began; `None` for a
    /// device that cannot tell, or when the host wrote nothing.
    pub fn waf(&self, waf: &dyn WafSource) -> Option<f64> {
        let (h, n) = waf.waf_counters()?;
        let (h0, n0) = self.waf_origin?;
        // Nothing written: no ratio (`null`), not 0.
        let dh = h.checked_sub(h0).filter(|&d| d > 0)?;
        Some(n.saturating_sub(n0) as f64 / dh as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The summary's maximum and mean are the recorded latencies', not the histogram's
    /// rounding: a latency equal to a bound reads as equal to it (RFTL's write bound), and
    /// requests that took no time have a mean of 0.
    #[test]
    fn the_maximum_and_mean_are_exact() {
        let mut r = Recorder::new(&NoWaf, None, 1_000_000_000).unwrap();
        for (i, ns) in [1_000_000, 1_751_563, 900_000].into_iter().enumerate() {
            r.record(&NoWaf, i as u64 * 10, Op::Write, 0, 4096, ns);
        }
        for i in 0..3 {
            r.record(&NoWaf, 100 + i, Op::Flush, 0, 0, 0);
        }
        r.finish(&NoWaf).unwrap();
        let w = r.op_summary(Op::Write);
        assert_eq!(w.max_us, 1751.563);
        assert!(
            (w.mean_us - 3_651_563.0 / 3.0 / 1000.0).abs() < 1e-9,
            "{w:?}"
        );
        assert!(w.p99_us <= w.max_us && w.p999_us <= w.max_us, "{w:?}");
        let f = r.op_summary(Op::Flush);
        assert_eq!((f.count, f.mean_us, f.max_us, f.p50_us), (3, 0.0, 0.0, 0.0));
        assert_eq!(r.intervals[0].max_latency_us, 1751.563);
        assert!(r.intervals[0].p99_latency_us <= 1751.563);
    }
}
