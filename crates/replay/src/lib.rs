//! ftl-replay: trace replay and synthetic workloads over the FTL in virtual time — the
//! simulator half of ftld, running the same FTL code the daemon serves.
//!
//! | module | job |
//! |---|---|
//! | `request` | a host request: op, offset, length, arrival |
//! | `trace` | the trace formats (MSR, UMass/SPC, blkparse, fio iolog, DiskSim), format guessing |
//! | `workload` | synthetic workloads (`--workload`) |
//! | `driver` | the virtual-time driver: arrivals (open/closed loop), address fitting, completion times |
//! | `queues` | which write queue an open-loop request goes through (both drivers) |
//! | `realtime` | the real-time driver: threads sending requests to a target on the host's clock |
//! | `target` | real-time targets: the FTL in this process, an NBD export, a block device or file |
//! | `record` | latency histograms, `requests.csv`, the time series |
//! | `plot` | SVG plots |
//!
//! [`replay`] runs a whole replay in virtual time and writes its outputs; [`replay_real`] does
//! the same in real time against a [`Target`]; [`precondition`] ages a device first.
//! Determinism: with timing `virtual` nothing reads the host's clock or depends on thread
//! scheduling (see `ftl`'s `sim` module), so the same trace, configuration and seed give the
//! same `summary.json` (less `wall_seconds` and the rates derived from it), `requests.csv` and
//! time series on any machine.

pub mod driver;
pub mod plot;
mod queues;
pub mod realtime;
pub mod record;
pub mod request;
pub mod target;
pub mod trace;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use ftl::Ftl;
use serde::Serialize;

pub use crate::driver::{Adjusted, Driver, DriverOptions, OutOfRange, ReplayError};
pub use crate::realtime::Dispatch;
pub use crate::record::{Interval, NoWaf, OpSummary, Recorder, WafSource};
pub use crate::request::{Arrival, Op, Request};
pub use crate::target::{Target, TargetError};
pub use crate::trace::{detect, DeviceSelect, Format, TraceError, TraceReader};
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
    /// Real time: run a [`nand_model::StallProbe`] beside the replay, so its host stalls are
    /// in `summary.json` (`host_stalls`) and `stalls.csv`.
    pub probe_stalls: bool,
    /// Ends the replay early when asked (a signal, say): no further request is sent, and the
    /// figures of those replayed are written, with `stopped_early`.
    pub stop: Option<Arc<Stop>>,
}

/// A request to end a replay before its last request, with the reason, settable from any
/// thread.
#[derive(Debug, Default)]
pub struct Stop {
    reason: OnceLock<String>,
    /// A request was left unreplayed for it (a stop asked for after the last request does
    /// not make a whole run a partial one).
    cut: std::sync::atomic::AtomicBool,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Asks the replay to stop; the first reason given is kept.
    pub fn request(&self, reason: impl Into<String>) {
        let _ = self.reason.set(reason.into());
    }

    /// Why a stop was asked for, if it was.
    pub fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }

    /// Notes that a request was left unreplayed for the stop.
    pub(crate) fn mark_cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Why the replay ended early, if a stop left requests unreplayed.
    pub fn cut_short(&self) -> Option<&str> {
        self.cut
            .load(std::sync::atomic::Ordering::Acquire)
            .then(|| self.reason())
            .flatten()
    }
}

/// `requests` until `stop` is asked for.
fn until_stopped<'a, I: Iterator + 'a>(
    requests: I,
    stop: Option<&'a Stop>,
) -> impl Iterator<Item = I::Item> + 'a {
    requests.take_while(move |_| match stop {
        Some(s) if s.reason().is_some() => {
            s.mark_cut();
            false
        }
        _ => true,
    })
}

/// GC and merge work done during the replay.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct GcSummary {
    /// Background GC workers (`[ftl] gc_threads`, resolved: 0 with in-path GC and the hybrid
    /// schemes).
    pub workers: usize,
    pub steps: u64,
    pub copies: u64,
    pub erases: u64,
    pub page_programs: u64,
    pub foreground: u64,
    pub wear_level_moves: u64,
    pub checkpoints: u64,
    /// Page scheme with hot/cold separation: host pages placed in hot blocks.
    pub hot_pages: u64,
    /// Hybrid schemes: switch, partial and full merges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merges: Option<MergeCounts>,
    /// Real-time schemes: the partial GC (`ftl.rt` of `ftld stats`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rt: Option<RtCounts>,
}

/// A real-time scheme's partial GC during the replay (RFTL: folds, shifts, compactions;
/// GFTL: merges, the queue and the write buffer), and its bounds (from the device's timing).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RtCounts {
    pub copy_steps: u64,
    pub erase_steps: u64,
    pub folds: u64,
    pub shifts: u64,
    pub compactions: u64,
    pub merges: u64,
    /// The longest the GC queue and the most blocks the write buffer held, since the FTL was
    /// opened, and the buffer's guaranteed size.
    pub queue_max: u64,
    pub buffer_blocks_max: u32,
    pub buffer_blocks: u32,
    /// Most steps one job took, since the FTL was opened.
    pub max_job_steps: u64,
    pub k_fold: u32,
    pub step_bound_us: f64,
    pub write_bound_us: f64,
    pub read_bound_us: f64,
    /// GFTL: OOB reads of its reads' data-block searches, and searches that did not find the
    /// page where the map has it.
    pub oob_reads: u64,
    pub search_misses: u64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MergeCounts {
    pub switch: u64,
    pub partial: u64,
    pub full: u64,
}

/// `summary.json`. Figures a target cannot give (WAF, GC and NAND counts of an NBD export or
/// a block device) are `null`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `virtual`, `real`, or `off` (the host's clock with NAND operations instant).
    pub timing: &'static str,
    pub requests: u64,
    pub read: OpSummary,
    pub write: OpSummary,
    pub flush: OpSummary,
    pub trim: OpSummary,
    /// NAND bytes programmed (host data and GC) / host bytes written, during the replay.
    pub waf: Option<f64>,
    /// The FTL's physical spare factor and the WAF greedy GC cannot beat under uniform random
    /// overwrites at it (Xiang & Kurkoski's Lambert-W limit, `ftl::waf_limit`): what `waf` is
    /// read against. `null` for a target that cannot tell.
    pub spare_factor: Option<f64>,
    pub waf_limit_greedy: Option<f64>,
    pub gc: Option<GcSummary>,
    /// From the replay's start to the last completion, on the replay's clock: simulated with
    /// timing `virtual`, the host's with `real`.
    pub simulated_seconds: f64,
    pub nand: Option<NandOps>,
    pub adjusted: Adjusted,
    /// Requests the device failed (e.g. an uncorrectable read).
    pub errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Why the replay ended before the trace or workload did (`stop` of the config: a signal;
    /// the device turned read-only; a fatal target error such as a lost connection); the
    /// figures are those of the requests replayed until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// Real timing, open loop: how late requests were sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<Dispatch>,
    /// Real timing: what the stall probe saw while the requests ran (`stalls.csv` lists them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_stalls: Option<HostStalls>,
    /// Host time the replay took; the only figure that differs between identical virtual runs.
    pub wall_seconds: f64,
    pub requests_per_second: f64,
    pub nand_ops_per_second: Option<f64>,
    pub config: serde_json::Value,
}

/// The host's scheduling stalls during a real-time replay (see [`nand_model::StallProbe`]): a
/// request whose window holds one was delayed by the machine, not only by the device.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HostStalls {
    /// Probe threads (one per CPU) and whether they ran as `SCHED_FIFO`.
    pub cpus: u32,
    pub realtime: bool,
    pub period_us: f64,
    /// Wake-ups later than this are stalls.
    pub threshold_us: f64,
    pub wakeups: u64,
    pub stalls: u64,
    pub longest_us: f64,
    /// Sum of the stalls, all CPUs.
    pub stalled_ms: f64,
    /// The hypervisor's steal time over the run, all CPUs (`/proc/stat`, 10 ms resolution).
    pub steal_ms: Option<f64>,
}

impl HostStalls {
    /// The figures of a probe's report (also what `ftld stalls --json` prints).
    pub fn of(r: &nand_model::StallReport) -> HostStalls {
        HostStalls {
            cpus: r.cpus,
            realtime: r.realtime,
            period_us: r.period_ns as f64 / 1e3,
            threshold_us: r.threshold_ns as f64 / 1e3,
            wakeups: r.wakeups,
            stalls: r.stalls.len() as u64 + r.dropped,
            longest_us: r.longest_ns() as f64 / 1e3,
            stalled_ms: r.total_stalled_ns() as f64 / 1e6,
            steal_ms: r.steal_ns.map(|s| s as f64 / 1e6),
        }
    }
}

/// The stall probe of a real-time replay: a wake-up every millisecond per CPU, stalls from
/// 200 us (this guest's own wake-up latency is ~70 us on average).
const PROBE_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);
const PROBE_THRESHOLD: std::time::Duration = std::time::Duration::from_micros(200);

/// Writes `stalls.csv`: each stall's start (us since the replay's time 0, as `requests.csv`'s
/// arrivals), its CPU and its length.
fn write_stalls(
    dir: &Path,
    r: &nand_model::StallReport,
    origin_ns: u64,
) -> Result<(), ReplayError> {
    use std::fmt::Write as _;
    let mut csv = String::from("start_us,cpu,length_us\n");
    for s in &r.stalls {
        let start = s.start_ns as f64 - origin_ns as f64;
        let _ = writeln!(
            csv,
            "{:.3},{},{:.3}",
            start / 1e3,
            s.cpu,
            s.late_ns as f64 / 1e3
        );
    }
    let p = dir.join("stalls.csv");
    std::fs::write(&p, csv).map_err(|e| output(&p, e))
}

/// NAND operations during the replay.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct NandOps {
    /// Page reads, a copyback's read included.
    pub reads: u64,
    /// Page programs, a copyback's program included.
    pub programs: u64,
    pub erases: u64,
    /// Copybacks (each also counted in `reads` and `programs`; one whose read failed, an
    /// injected fault, in `reads` only).
    pub copybacks: u64,
    /// Operations the device ran: reads + programs + erases - copybacks (a copyback's read and
    /// program happen inside the chip: one operation).
    pub total: u64,
    /// 4 KiB pages the host read that held no data (never written, trimmed): zeroes from RAM,
    /// no NAND read, no time (`ftl.unwritten_page_reads` of `ftld stats`).
    pub unwritten_page_reads: u64,
    /// Faults the NAND model injected (`ftld replay` with a `[faults]` table), and what the
    /// FTL made of them: reads tried again, reads that failed every retry (an error to the
    /// host, or GC's), and blocks that went bad (a failed program or erase).
    pub injected: ftl::nand_model::FaultCounts,
    pub read_retries: u64,
    pub uncorrectable_reads: u64,
    pub grown_bad_blocks: u64,
}

fn nand_ops(ftl: &Ftl) -> NandOps {
    let t = ftl.nand().stats().totals;
    let s = ftl.stats();
    NandOps {
        reads: t.reads,
        programs: t.programs,
        erases: t.erases,
        copybacks: t.copybacks,
        total: (t.reads + t.programs + t.erases).saturating_sub(t.copybacks),
        unwritten_page_reads: s.unwritten_page_reads,
        injected: ftl.nand().stats().injected,
        read_retries: s.read_retries,
        uncorrectable_reads: s.uncorrectable_reads,
        grown_bad_blocks: s.bad_blocks,
    }
}

fn gc_counts(s: &ftl::FtlStats) -> GcSummary {
    GcSummary {
        workers: s.gc_workers,
        steps: s.gc_steps,
        copies: s.gc_copies,
        erases: s.gc_erases,
        page_programs: s.gc_page_programs,
        foreground: s.foreground_gc,
        wear_level_moves: s.wear_level_moves,
        checkpoints: s.checkpoints,
        hot_pages: s.hot_pages,
        merges: s.merges.as_ref().map(|m| MergeCounts {
            switch: m.switch.count,
            partial: m.partial.count,
            full: m.full.count,
        }),
        rt: s.rt.as_ref().map(|r| RtCounts {
            copy_steps: r.copy_steps,
            erase_steps: r.erase_steps,
            folds: r.folds,
            shifts: r.shifts,
            compactions: r.compactions,
            merges: r.merges,
            queue_max: r.queue_max,
            buffer_blocks_max: r.buffer_blocks_max,
            buffer_blocks: r.buffer_blocks,
            oob_reads: r.oob_reads,
            search_misses: r.search_misses,
            read_bound_us: r.read_bound_us,
            max_job_steps: r.max_job_steps,
            k_fold: r.k_fold,
            step_bound_us: r.step_bound_us,
            write_bound_us: r.write_bound_us,
        }),
    }
}

fn minus(a: &GcSummary, b: &GcSummary) -> GcSummary {
    GcSummary {
        workers: a.workers,
        steps: a.steps - b.steps,
        copies: a.copies - b.copies,
        erases: a.erases - b.erases,
        page_programs: a.page_programs - b.page_programs,
        foreground: a.foreground - b.foreground,
        wear_level_moves: a.wear_level_moves - b.wear_level_moves,
        checkpoints: a.checkpoints - b.checkpoints,
        hot_pages: a.hot_pages - b.hot_pages,
        merges: match (&a.merges, &b.merges) {
            (Some(x), Some(y)) => Some(MergeCounts {
                switch: x.switch - y.switch,
                partial: x.partial - y.partial,
                full: x.full - y.full,
            }),
            (m, _) => m.clone(),
        },
        rt: match (&a.rt, &b.rt) {
            (Some(x), Some(y)) => Some(RtCounts {
                copy_steps: x.copy_steps - y.copy_steps,
                erase_steps: x.erase_steps - y.erase_steps,
                folds: x.folds - y.folds,
                shifts: x.shifts - y.shifts,
                compactions: x.compactions - y.compactions,
                merges: x.merges - y.merges,
                oob_reads: x.oob_reads - y.oob_reads,
                search_misses: x.search_misses - y.search_misses,
                ..x.clone()
            }),
            (r, _) => r.clone(),
        },
    }
}

fn output(what: &Path, source: std::io::Error) -> ReplayError {
    ReplayError::Output {
        what: what.display().to_string(),
        source,
    }
}

/// Counters of an FTL before a replay, to report what the replay did.
struct Before {
    gc: GcSummary,
    nand: NandOps,
}

impl Before {
    fn of(ftl: &Ftl) -> Before {
        Before {
            gc: gc_counts(&ftl.stats()),
            nand: nand_ops(ftl),
        }
    }

    fn since(&self, ftl: &Ftl) -> (GcSummary, NandOps) {
        let n = nand_ops(ftl);
        let nand = NandOps {
            reads: n.reads - self.nand.reads,
            programs: n.programs - self.nand.programs,
            erases: n.erases - self.nand.erases,
            copybacks: n.copybacks - self.nand.copybacks,
            total: n.total - self.nand.total,
            unwritten_page_reads: n.unwritten_page_reads - self.nand.unwritten_page_reads,
            injected: ftl::nand_model::FaultCounts {
                program: n.injected.program - self.nand.injected.program,
                erase: n.injected.erase - self.nand.injected.erase,
                read: n.injected.read - self.nand.injected.read,
            },
            read_retries: n.read_retries - self.nand.read_retries,
            uncorrectable_reads: n.uncorrectable_reads - self.nand.uncorrectable_reads,
            grown_bad_blocks: n
                .grown_bad_blocks
                .saturating_sub(self.nand.grown_bad_blocks),
        };
        (minus(&gc_counts(&ftl.stats()), &self.gc), nand)
    }
}

fn recorder(
    cfg: &ReplayConfig,
    waf: &dyn WafSource,
) -> Result<(Recorder, Option<PathBuf>), ReplayError> {
    if let Some(dir) = &cfg.out {
        std::fs::create_dir_all(dir).map_err(|e| output(dir, e))?;
        // The one output a run may not write (no probe asked for, or none could start): one
        // left from an earlier run into the same directory would pass for this one's.
        let stale = dir.join("stalls.csv");
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(output(&stale, e)),
            _ => {}
        }
    }
    let csv = cfg.out.as_ref().map(|d| d.join("requests.csv"));
    let rec = Recorder::new(waf, csv.as_deref(), cfg.interval_ns)
        .map_err(|e| output(csv.as_deref().unwrap_or(Path::new("requests.csv")), e))?;
    Ok((rec, csv))
}

/// What a driver reports besides the recorder.
struct Outcome {
    adjusted: Adjusted,
    errors: u64,
    first_error: Option<String>,
    /// What ended the replay before its last request (not a signal: `cfg.stop`).
    stopped: Option<String>,
    dispatch: Option<Dispatch>,
    host_stalls: Option<HostStalls>,
}

#[allow(clippy::too_many_arguments)]
fn finish(
    timing: &'static str,
    mut rec: Recorder,
    csv: Option<PathBuf>,
    waf: &dyn WafSource,
    ftl: Option<(&Ftl, Before)>,
    outcome: Outcome,
    wall: Instant,
    cfg: &ReplayConfig,
) -> Result<Summary, ReplayError> {
    rec.finish(waf)
        .map_err(|e| output(csv.as_deref().unwrap_or(Path::new("requests.csv")), e))?;
    let (gc, nand, spare) = match ftl {
        Some((ftl, before)) => {
            let (g, n) = before.since(ftl);
            let st = ftl.stats();
            (
                Some(g),
                Some(n),
                Some((st.spare_factor, st.waf_limit_greedy)),
            )
        }
        None => (None, None, None),
    };
    let wall_seconds = wall.elapsed().as_secs_f64();
    let requests = rec.requests();
    let summary = Summary {
        timing,
        requests,
        read: rec.op_summary(Op::Read),
        write: rec.op_summary(Op::Write),
        flush: rec.op_summary(Op::Flush),
        trim: rec.op_summary(Op::Trim),
        waf: rec.waf(waf),
        spare_factor: spare.map(|s| s.0),
        waf_limit_greedy: spare.and_then(|s| s.1),
        gc,
        simulated_seconds: rec.last_done_ns as f64 / 1e9,
        adjusted: outcome.adjusted,
        errors: outcome.errors,
        first_error: outcome.first_error,
        stopped_early: outcome.stopped.or_else(|| {
            cfg.stop
                .as_ref()
                .and_then(|s| s.cut_short().map(str::to_owned))
        }),
        dispatch: outcome.dispatch,
        host_stalls: outcome.host_stalls,
        requests_per_second: requests as f64 / wall_seconds.max(1e-9),
        nand_ops_per_second: nand
            .as_ref()
            .map(|n| n.total as f64 / wall_seconds.max(1e-9)),
        nand,
        wall_seconds,
        config: cfg.config.clone(),
    };
    if let Some(dir) = &cfg.out {
        write_outputs(dir, &rec, &summary)?;
    }
    Ok(summary)
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
    let (mut rec, csv) = recorder(cfg, ftl)?;
    let before = Before::of(ftl);
    let mut driver = Driver::new(ftl, cfg.driver.clone())?;
    // A device that turns read-only ends the replay, and the figures of the requests before
    // it are written all the same: they are what a researcher measuring wear-out wants most.
    let stopped = match driver.run(
        until_stopped(requests, cfg.stop.as_deref()),
        &mut rec,
        progress,
    ) {
        Ok(()) => None,
        Err(e @ (ReplayError::ReadOnly { .. } | ReplayError::ReadOnlyFromOpen { .. })) => {
            Some(e.to_string())
        }
        Err(e) => return Err(e),
    };
    // What the host wrote is all on flash before WAF is read (as fio's `end_fsync`): the
    // writes still buffered would otherwise count as host bytes without their programs, and a
    // short replay showed a WAF below 1 (0.9992 for 20 000 random 4 KiB writes, 0.92 with 8
    // queues). The drain is not a request: it adds no latency and no simulated time to the
    // figures (`simulated_seconds` ends with the last request); its programs are in the WAF,
    // the GC and NAND counts and the time series' last interval, and the FTL's own statistics
    // count it as a flush. A drain that fails (the device turned read-only) leaves WAF as it
    // is and is reported as the first error if there was none.
    let mut first_error = driver.first_error.clone();
    if let Err(e) = driver::settle(ftl) {
        first_error.get_or_insert(format!("the final drain of the write buffers: {e}"));
    }
    let outcome = Outcome {
        adjusted: driver.adjusted.clone(),
        errors: driver.errors,
        first_error,
        stopped,
        dispatch: None,
        host_stalls: None,
    };
    finish(
        "virtual",
        rec,
        csv,
        ftl,
        Some((ftl, before)),
        outcome,
        wall,
        cfg,
    )
}

/// Replays `requests` on `target` in real time (see [`realtime`]) and writes the same outputs
/// as [`replay`]. `ftl`: the FTL behind the target when it runs in this process, for WAF, GC
/// and NAND counts.
pub fn replay_real(
    target: &dyn Target,
    ftl: Option<&Ftl>,
    requests: impl Iterator<Item = Result<Request, TraceError>> + Send,
    cfg: &ReplayConfig,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<Summary, ReplayError> {
    let wall = Instant::now();
    let waf: &(dyn WafSource + Sync) = match ftl {
        Some(f) => f,
        None => &NoWaf,
    };
    let (mut rec, csv) = recorder(cfg, waf)?;
    let before = ftl.map(Before::of);
    // A probe that cannot start (no threads left) costs the figures, not the replay.
    let probe = cfg
        .probe_stalls
        .then(|| nand_model::StallProbe::start(PROBE_PERIOD, PROBE_THRESHOLD).ok())
        .flatten();
    let requests = until_stopped(requests, cfg.stop.as_deref());
    let o = realtime::run(
        target,
        waf,
        &cfg.driver,
        requests,
        &mut rec,
        progress,
        cfg.stop.as_deref(),
    )?;
    let stalls = probe.map(nand_model::StallProbe::finish);
    // As in virtual time: the buffered writes programmed before WAF is read.
    let drained = match ftl {
        Some(ftl) => futures::executor::block_on(ftl.flush()).err(),
        None => None,
    };
    if let (Some(dir), Some(r)) = (&cfg.out, &stalls) {
        write_stalls(dir, r, o.origin_ns)?;
    }
    let outcome = Outcome {
        adjusted: o.adjusted,
        errors: o.errors,
        first_error: o
            .first_error
            .or_else(|| drained.map(|e| format!("the final drain of the write buffers: {e}"))),
        stopped: o.fatal,
        dispatch: o.dispatch,
        host_stalls: stalls.as_ref().map(HostStalls::of),
    };
    let ftl = ftl.zip(before);
    finish("real", rec, csv, waf, ftl, outcome, wall, cfg)
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
    /// WAF of the last pass over the span (the steady state reached, if `steady`); `None` for
    /// a target that cannot tell, or a span under 128 KiB (nothing aged).
    pub steady_waf: Option<f64>,
    /// The last two passes agreed within 2 %; false if the rounds ran out first (the WAF
    /// reported is then the last pass's, not a steady state's).
    pub steady: bool,
    pub simulated_seconds: f64,
    pub wall_seconds: f64,
}

impl PreconditionReport {
    fn new(percent: f64) -> PreconditionReport {
        PreconditionReport {
            percent,
            fill_bytes: 0,
            overwrite_bytes: 0,
            steady_waf: None,
            steady: false,
            simulated_seconds: 0.0,
            wall_seconds: 0.0,
        }
    }
}

/// One of the preconditions' workloads (their specs are built here, so an error is a bug).
fn aging_workload(spec: &str, capacity: u64, seed: u64) -> Result<Workload, ReplayError> {
    let config = |e: String| ReplayError::Ftl(ftl::FtlError::Config(e));
    let spec: WorkloadSpec = spec.parse().map_err(config)?;
    Workload::new(spec, capacity, seed).map_err(config)
}

/// Ages the device (MQSim's preconditioning, LFTL's aging ioctl): writes the first `percent`
/// of the device sequentially in 128 KiB requests, then overwrites it with uniform random
/// 4 KiB writes in rounds (an eighth of that span, or a 64th of the raw flash if more) until GC
/// is in steady state, then flushes. Steady: the WAF of the last pass over the span within 2 %
/// of the pass before it (at most four passes; `steady` says whether they agreed), counting
/// only rounds that began once the host had written as many bytes as the device has flash and
/// an earlier round moved data (or a pass on from there moved none). Before
/// 2026-12-02 two rounds in a row within 2 % after one pass were "steady": a span of 60 % of a
/// device with spare to match read 1.00 with GC not started (1.24 measured after), and nftl,
/// which folds chains in bursts, read 1.00 between two bursts (2.01 measured). The report's
/// `steady_waf` is the last pass's. Runs in virtual time, closed loop with one stream per write queue; nothing is
/// recorded.
pub fn precondition(ftl: &Ftl, percent: f64, seed: u64) -> Result<PreconditionReport, ReplayError> {
    let wall = Instant::now();
    let t0 = ftl.now_ns();
    let span = (ftl.capacity() as f64 * percent / 100.0) as u64 / 4096 * 4096;
    let opts = DriverOptions {
        queue_depth: Some(ftl.queues()),
        ..DriverOptions::default()
    };
    let run = |spec: String, seed: u64| -> Result<(), ReplayError> {
        let w = aging_workload(&spec, ftl.capacity(), seed)?;
        let mut rec = Recorder::new(ftl, None, u64::MAX).map_err(|e| output(Path::new("-"), e))?;
        Driver::new(ftl, opts.clone())?.run(w.map(Ok), &mut rec, &mut |_| {})
    };
    let mut report = PreconditionReport::new(percent);
    if span >= 128 << 10 {
        let n = span / (128 << 10);
        run(format!("seq,bs=128k,span={span},requests={n}"), seed)?;
        report.fill_bytes = n * (128 << 10);
        let raw = ftl.nand().geometry().raw_capacity();
        let round = (span / 8).max(raw / 64) / 4096;
        // Rounds per pass over the span (8 or 9): the window two of which must agree. GC that
        // works in bursts (nftl folds chains a few rounds in every pass) has no steady round,
        // only a steady pass.
        let window = (span / (round * 4096)).max(1) as usize;
        // (host, NAND) bytes of each round that counts.
        let mut counted: Vec<(u64, u64)> = Vec::new();
        // Whether a round so far moved data (WAF over 1): GC (or a merge) has started.
        let mut gc_seen = false;
        // Rounds since the host had written the device's flash.
        let mut past_raw = 0usize;
        let ratio = |r: &[(u64, u64)]| {
            let (h, n) = r.iter().fold((0, 0), |(h, n), &(a, b)| (h + a, n + b));
            n as f64 / h.max(1) as f64
        };
        // Bounded: a round is about a 64th of the flash or more, and an eighth of the span or
        // more, so the flash is written within about 65 rounds, and four windows are at most
        // 36 rounds more.
        for i in 0..128u64 {
            if report.fill_bytes + report.overwrite_bytes >= raw {
                past_raw += 1;
            }
            // Once the flash is written, GC has started if it ever will; a pass on with no
            // data moved (every victim empty: a small span on a device with much spare) makes
            // 1.00 the steady figure, and the rounds count from then on too.
            let counts = past_raw > 0 && (gc_seen || past_raw > window);
            let (h0, n0) = ftl.waf_counters();
            run(
                format!("random,bs=4k,span={span},requests={round}"),
                seed.wrapping_add(i + 1),
            )?;
            let (h1, n1) = ftl.waf_counters();
            report.overwrite_bytes += round * 4096;
            let delta = (h1 - h0, n1 - n0);
            gc_seen |= ratio(&[delta]) > 1.001;
            if !counts {
                report.steady_waf = Some(ratio(&[delta]));
                continue;
            }
            counted.push(delta);
            let n = counted.len();
            let last = ratio(&counted[n.saturating_sub(window)..]);
            report.steady_waf = Some(last);
            if n >= 2 * window {
                let before = ratio(&counted[n - 2 * window..n - window]);
                if (last - before).abs() <= 0.02 * last.max(before) {
                    report.steady = true;
                    break;
                }
                if n >= 4 * window {
                    break;
                }
            }
        }
    }
    // Writes are acknowledged once buffered: the last ones' programs (and, with a real-time
    // scheme, the GC steps they carry) would otherwise delay the first measured request.
    driver::settle(ftl)?;
    report.simulated_seconds = ftl.now_ns().saturating_sub(t0) as f64 / 1e9;
    report.wall_seconds = wall.elapsed().as_secs_f64();
    Ok(report)
}

/// [`precondition`] for a target in real time, which cannot tell when GC is in steady state:
/// fills the first `percent` of it sequentially in 128 KiB writes (4 in flight), then
/// overwrites that span once with uniform random 4 KiB writes (32 in flight), as SNIA's
/// performance test specification ages a drive.
pub fn precondition_real(
    target: &dyn Target,
    percent: f64,
    seed: u64,
) -> Result<PreconditionReport, ReplayError> {
    let wall = Instant::now();
    let span = (target.capacity() as f64 * percent / 100.0) as u64 / 4096 * 4096;
    let run = |spec: String, qd: usize| -> Result<(), ReplayError> {
        let w = aging_workload(&spec, target.capacity(), seed)?;
        let mut rec =
            Recorder::new(&NoWaf, None, u64::MAX).map_err(|e| output(Path::new("-"), e))?;
        let opts = DriverOptions {
            queue_depth: Some(qd),
            ..DriverOptions::default()
        };
        realtime::run(
            target,
            &NoWaf,
            &opts,
            w.map(Ok),
            &mut rec,
            &mut |_| {},
            None,
        )
        .and_then(|o| match o.fatal {
            Some(reason) => Err(ReplayError::Target(reason)),
            None => Ok(()),
        })
    };
    let mut report = PreconditionReport::new(percent);
    if span >= 128 << 10 {
        let n = span / (128 << 10);
        run(format!("seq,bs=128k,span={span},requests={n}"), 4)?;
        report.fill_bytes = n * (128 << 10);
        let m = span / 4096;
        run(format!("random,bs=4k,span={span},requests={m}"), 32)?;
        report.overwrite_bytes = m * 4096;
    }
    report.wall_seconds = wall.elapsed().as_secs_f64();
    report.simulated_seconds = report.wall_seconds;
    Ok(report)
}
