//! ftl-replay: trace replay and synthetic workloads over the FTL in virtual time — the
//! simulator half of ftld, running the same FTL code the daemon serves.
//!
//! | module | job |
//! |---|---|
//! | `request` | a host request: op, offset, length, arrival |
//! | `trace` | the trace formats (MSR, UMass/SPC, blkparse, fio iolog, DiskSim), format guessing |
//! | `workload` | synthetic workloads (`--workload`) |
//! | `driver` | the virtual-time driver: arrivals (open/closed loop), address fitting, completion times |
//! | `record` | latency histograms, `requests.csv`, the time series |
//! | `plot` | SVG plots |
//!
//! [`replay`] runs a whole replay and writes its outputs; [`precondition`] ages a device first.
//! Determinism: with timing `virtual` nothing reads the host's clock or depends on thread
//! scheduling (see `ftl`'s `sim` module), so the same trace, configuration and seed give the
//! same `summary.json` (less `wall_seconds` and the rates derived from it), `requests.csv` and
//! time series on any machine.

pub mod driver;
pub mod plot;
pub mod record;
pub mod request;
pub mod trace;
pub mod workload;

use std::path::{Path, PathBuf};
use std::time::Instant;

use ftl::Ftl;
use serde::Serialize;

pub use crate::driver::{Adjusted, Driver, DriverOptions, OutOfRange, ReplayError};
pub use crate::record::{Interval, OpSummary, Recorder};
pub use crate::request::{Arrival, Op, Request};
pub use crate::trace::{detect, Format, TraceError, TraceReader};
pub use crate::workload::{Workload, WorkloadSpec};

/// What a replay writes and how.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    pub driver: DriverOptions,
    /// Time-series interval (simulated ns).
    pub interval_ns: u64,
    /// Output directory (created); `None`: nothing is written, the summary is returned.
    pub out: Option<PathBuf>,
    /// Anything the caller wants in `summary.json`'s `config` (the command line, say).
    pub config: serde_json::Value,
}

/// GC and merge work done during the replay.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct GcSummary {
    pub steps: u64,
    pub copies: u64,
    pub erases: u64,
    pub page_programs: u64,
    pub foreground: u64,
    pub wear_level_moves: u64,
    pub checkpoints: u64,
    /// Hybrid schemes: switch, partial and full merges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merges: Option<MergeCounts>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MergeCounts {
    pub switch: u64,
    pub partial: u64,
    pub full: u64,
}

/// `summary.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub requests: u64,
    pub read: OpSummary,
    pub write: OpSummary,
    pub flush: OpSummary,
    pub trim: OpSummary,
    /// NAND bytes programmed (host data and GC) / host bytes written, during the replay.
    pub waf: f64,
    pub gc: GcSummary,
    /// From the first arrival to the last completion.
    pub simulated_seconds: f64,
    pub nand: NandOps,
    pub adjusted: Adjusted,
    /// Requests the FTL failed (e.g. an uncorrectable read).
    pub errors: u64,
    /// Host time the replay took; the only figure that differs between identical runs.
    pub wall_seconds: f64,
    pub requests_per_second: f64,
    pub nand_ops_per_second: f64,
    pub config: serde_json::Value,
}

/// NAND operations during the replay.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct NandOps {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
    pub copybacks: u64,
    pub total: u64,
}

fn nand_ops(ftl: &Ftl) -> NandOps {
    let t = ftl.nand().stats().totals;
    NandOps {
        reads: t.reads,
        programs: t.programs,
        erases: t.erases,
        copybacks: t.copybacks,
        total: t.reads + t.programs + t.erases + t.copybacks,
    }
}

fn gc_counts(s: &ftl::FtlStats) -> GcSummary {
    GcSummary {
        steps: s.gc_steps,
        copies: s.gc_copies,
        erases: s.gc_erases,
        page_programs: s.gc_page_programs,
        foreground: s.foreground_gc,
        wear_level_moves: s.wear_level_moves,
        checkpoints: s.checkpoints,
        merges: s.merges.as_ref().map(|m| MergeCounts {
            switch: m.switch.count,
            partial: m.partial.count,
            full: m.full.count,
        }),
    }
}

fn minus(a: &GcSummary, b: &GcSummary) -> GcSummary {
    GcSummary {
        steps: a.steps - b.steps,
        copies: a.copies - b.copies,
        erases: a.erases - b.erases,
        page_programs: a.page_programs - b.page_programs,
        foreground: a.foreground - b.foreground,
        wear_level_moves: a.wear_level_moves - b.wear_level_moves,
        checkpoints: a.checkpoints - b.checkpoints,
        merges: match (&a.merges, &b.merges) {
            (Some(x), Some(y)) => Some(MergeCounts {
                switch: x.switch - y.switch,
                partial: x.partial - y.partial,
                full: x.full - y.full,
            }),
            (m, _) => m.clone(),
        },
    }
}

fn output(what: &Path, source: std::io::Error) -> ReplayError {
    ReplayError::Output {
        what: what.display().to_string(),
        source,
    }
}

/// Replays `requests` on `ftl` (timing `virtual`) and writes, in `cfg.out`: `summary.json`,
/// `requests.csv`, `timeseries.csv`, and the plots `latency_cdf.svg`, `latency_time.svg`,
/// `waf_time.svg`.
pub fn replay(
    ftl: &Ftl,
    requests: impl Iterator<Item = Result<Request, TraceError>>,
    cfg: &ReplayConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, ReplayError> {
    let wall = Instant::now();
    if let Some(dir) = &cfg.out {
        std::fs::create_dir_all(dir).map_err(|e| output(dir, e))?;
    }
    let csv = cfg.out.as_ref().map(|d| d.join("requests.csv"));
    let mut rec = Recorder::new(ftl, csv.as_deref(), cfg.interval_ns)
        .map_err(|e| output(csv.as_deref().unwrap_or(Path::new("requests.csv")), e))?;
    let gc0 = gc_counts(&ftl.stats());
    let nand0 = nand_ops(ftl);
    let mut driver = Driver::new(ftl, cfg.driver.clone())?;
    driver.run(requests, &mut rec, progress)?;
    rec.finish(ftl)
        .map_err(|e| output(csv.as_deref().unwrap_or(Path::new("requests.csv")), e))?;
    let gc1 = gc_counts(&ftl.stats());
    let nand1 = nand_ops(ftl);
    let nand = NandOps {
        reads: nand1.reads - nand0.reads,
        programs: nand1.programs - nand0.programs,
        erases: nand1.erases - nand0.erases,
        copybacks: nand1.copybacks - nand0.copybacks,
        total: nand1.total - nand0.total,
    };
    let wall_seconds = wall.elapsed().as_secs_f64();
    let requests = rec.requests();
    let summary = Summary {
        requests,
        read: rec.op_summary(Op::Read),
        write: rec.op_summary(Op::Write),
        flush: rec.op_summary(Op::Flush),
        trim: rec.op_summary(Op::Trim),
        waf: rec.waf(ftl),
        gc: minus(&gc1, &gc0),
        simulated_seconds: rec.last_done_ns as f64 / 1e9,
        adjusted: driver.adjusted.clone(),
        errors: driver.errors,
        requests_per_second: requests as f64 / wall_seconds.max(1e-9),
        nand_ops_per_second: nand.total as f64 / wall_seconds.max(1e-9),
        nand,
        wall_seconds,
        config: cfg.config.clone(),
    };
    if let Some(dir) = &cfg.out {
        write_outputs(dir, &rec, &summary)?;
    }
    Ok(summary)
}

fn write_outputs(dir: &Path, rec: &Recorder, summary: &Summary) -> Result<(), ReplayError> {
    let p = dir.join("summary.json");
    let mut json = serde_json::to_string_pretty(summary).unwrap_or_default();
    json.push('\n');
    std::fs::write(&p, json).map_err(|e| output(&p, e))?;
    let p = dir.join("timeseries.csv");
    let mut ts = String::from(
        "start_s,requests,read_mb_s,write_mb_s,mean_latency_us,p99_latency_us,max_latency_us,waf,cumulative_waf\n",
    );
    for i in &rec.intervals {
        use std::fmt::Write as _;
        let _ = writeln!(
            ts,
            "{:.6},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.4},{:.4}",
            i.start_s,
            i.requests,
            i.read_mb_s,
            i.write_mb_s,
            i.mean_latency_us,
            i.p99_latency_us,
            i.max_latency_us,
            i.waf,
            i.cumulative_waf
        );
    }
    std::fs::write(&p, ts).map_err(|e| output(&p, e))?;
    type Draw = fn(&Recorder, &Path, &str) -> Result<(), String>;
    let plots: [(&str, Draw, &str); 3] = [
        ("latency_cdf.svg", plot::latency_cdf, "Latency CDF"),
        (
            "latency_time.svg",
            plot::latency_over_time,
            "Latency over time",
        ),
        (
            "waf_time.svg",
            plot::waf_over_time,
            "Write amplification over time",
        ),
    ];
    for (name, draw, title) in plots {
        let p = dir.join(name);
        draw(rec, &p, title).map_err(|e| output(&p, std::io::Error::other(e)))?;
    }
    Ok(())
}

/// What [`precondition`] did.
#[derive(Clone, Debug, Serialize)]
pub struct PreconditionReport {
    pub percent: f64,
    pub fill_bytes: u64,
    pub overwrite_bytes: u64,
    /// WAF of the last overwrite round (the steady state reached).
    pub steady_waf: f64,
    pub simulated_seconds: f64,
    pub wall_seconds: f64,
}

/// Ages the device (MQSim's preconditioning, LFTL's aging ioctl): writes the first `percent`
/// of the device sequentially in 128 KiB requests, then overwrites it with uniform random
/// 4 KiB writes in rounds of an eighth of that span until GC is in steady state (the WAF of two
/// rounds in a row within 2 %, after at least one whole pass; at most four passes). Runs in
/// virtual time, closed loop with one stream per write queue; nothing is recorded.
pub fn precondition(ftl: &Ftl, percent: f64, seed: u64) -> Result<PreconditionReport, ReplayError> {
    let wall = Instant::now();
    let t0 = ftl.now_ns();
    let span = (ftl.capacity() as f64 * percent / 100.0) as u64 / 4096 * 4096;
    let opts = DriverOptions {
        queue_depth: Some(ftl.queues()),
        ..DriverOptions::default()
    };
    let run = |spec: String, seed: u64| -> Result<(), ReplayError> {
        let spec: WorkloadSpec = spec
            .parse()
            .map_err(|e: String| ReplayError::Ftl(ftl::FtlError::Config(e)))?;
        let w = Workload::new(spec, ftl.capacity(), seed)
            .map_err(|e| ReplayError::Ftl(ftl::FtlError::Config(e)))?;
        let mut rec = Recorder::new(ftl, None, u64::MAX).map_err(|e| output(Path::new("-"), e))?;
        Driver::new(ftl, opts.clone())?.run(w.map(Ok), &mut rec, &mut |_| {})
    };
    let mut report = PreconditionReport {
        percent,
        fill_bytes: 0,
        overwrite_bytes: 0,
        steady_waf: 0.0,
        simulated_seconds: 0.0,
        wall_seconds: 0.0,
    };
    if span >= 128 << 10 {
        let n = span / (128 << 10);
        run(format!("seq,bs=128k,span={span},requests={n}"), seed)?;
        report.fill_bytes = n * (128 << 10);
        let round = (span / 4096 / 8).max(1);
        let mut prev: Option<f64> = None;
        for i in 0..32u64 {
            let (h0, n0) = ftl.waf_counters();
            run(
                format!("random,bs=4k,span={span},requests={round}"),
                seed.wrapping_add(i + 1),
            )?;
            let (h1, n1) = ftl.waf_counters();
            report.overwrite_bytes += round * 4096;
            let waf = (n1 - n0) as f64 / (h1 - h0).max(1) as f64;
            report.steady_waf = waf;
            let steady = prev.is_some_and(|p| (waf - p).abs() <= 0.02 * waf.max(p));
            if i >= 7 && steady {
                break;
            }
            prev = Some(waf);
        }
    }
    report.simulated_seconds = ftl.now_ns().saturating_sub(t0) as f64 / 1e9;
    report.wall_seconds = wall.elapsed().as_secs_f64();
    Ok(report)
}
