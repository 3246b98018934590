//! `ftld replay`: a trace or a synthetic workload replayed on the FTL in virtual time
//! (`ftl-replay`), on a given image or a scratch one made from the image options.

use std::fs::File;
use std::io::{BufReader, IsTerminal, Seek};
use std::path::PathBuf;

use anyhow::Context;
use ftl_replay::{
    DriverOptions, Format, ReplayConfig, Request, TraceError, TraceReader, Workload, WorkloadSpec,
};
use indicatif::{ProgressBar, ProgressStyle};
use nand_model::TimingMode;

use crate::cli::ReplayArgs;
use crate::config::{self, FileConfig};
use crate::image;
use crate::UsageError;

/// A scratch image removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(d) = self.0.parent() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Runs `ftld replay`.
pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    if !(args.speed.is_finite() && args.speed > 0.0) {
        return Err(UsageError(format!("--speed {} must be a number above 0", args.speed)).into());
    }
    if let Some(p) = args.precondition {
        if !(0.0..=100.0).contains(&p) {
            return Err(UsageError(format!("--precondition {p} is not a percentage")).into());
        }
    }
    if !(args.interval_ms.is_finite() && args.interval_ms > 0.0) {
        return Err(UsageError(format!(
            "--interval-ms {} must be above 0",
            args.interval_ms
        ))
        .into());
    }
    let workload: Option<WorkloadSpec> = match &args.workload {
        Some(w) => Some(
            w.parse()
                .map_err(|e| UsageError(format!("--workload {w:?}: {e}")))?,
        ),
        None => None,
    };
    let file = FileConfig::load_opt(args.image.config.as_deref())?;
    let mut settings = config::resolve_image(&args.image, &file)?;
    if let Some(p) = args.gc_policy {
        settings.ftl.gc_policy = p;
    }
    if let Some(p) = args.log_placement {
        settings.ftl.log_placement = p;
    }
    let scratch = if args.image.image.is_none() && file.image.is_none() {
        let dir = std::env::temp_dir().join(format!("ftld-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        settings.path = dir.join("scratch.img");
        let _ = std::fs::remove_file(&settings.path);
        Some(Scratch(settings.path.clone()))
    } else {
        None
    };
    let ftl = match &scratch {
        Some(_) => image::create(&settings, TimingMode::Virtual)?,
        None => image::open_or_create(&settings, TimingMode::Virtual)?,
    };
    let precondition = match args.precondition {
        Some(p) if p > 0.0 => {
            eprintln!("preconditioning {p} % of the device ...");
            let r = ftl_replay::precondition(&ftl, p, args.seed)?;
            eprintln!(
                "preconditioned: {:.0} MiB filled, {:.0} MiB overwritten, steady WAF {:.2}, {:.1} s simulated in {:.1} s",
                r.fill_bytes as f64 / 1048576.0,
                r.overwrite_bytes as f64 / 1048576.0,
                r.steady_waf,
                r.simulated_seconds,
                r.wall_seconds
            );
            Some(r)
        }
        _ => None,
    };
    let stats = ftl.stats();
    let mut cfg_json = serde_json::json!({
        "timing": "virtual",
        "image": if scratch.is_some() { serde_json::Value::Null } else { settings.path.display().to_string().into() },
        "preset": settings.preset.clone().unwrap_or_else(|| image::DEFAULT_PRESET.into()),
        "capacity_bytes": ftl.capacity(),
        "ftl": stats.scheme,
        "gc_policy": stats.gc_policy,
        "queues": ftl.queues(),
        "queue_depth": args.queue_depth,
        "speed": args.speed,
        "seed": args.seed,
        "out_of_range": args.out_of_range,
        "precondition": precondition,
    });
    let opts = DriverOptions {
        queue_depth: args.queue_depth.map(|n| n as usize),
        speed: args.speed,
        out_of_range: args
            .out_of_range
            .parse()
            .map_err(|e: String| UsageError(format!("--out-of-range: {e}")))?,
    };
    let bar = progress_bar();
    let mut tick = |n: u64| {
        if let Some(b) = &bar {
            b.set_position(n);
        }
    };
    let cfg = |v: serde_json::Value| ReplayConfig {
        driver: opts.clone(),
        interval_ns: (args.interval_ms * 1e6) as u64,
        out: args.out.clone(),
        config: v,
    };
    let summary = if let Some(spec) = workload {
        cfg_json["workload"] = args.workload.clone().into();
        let w = Workload::new(spec, ftl.capacity(), args.seed)
            .map_err(|e| UsageError(format!("--workload: {e}")))?;
        if let Some(b) = &bar {
            b.set_length(w.size_hint().1.unwrap_or(0) as u64);
        }
        let requests = w.map(Ok::<Request, TraceError>);
        ftl_replay::replay(&ftl, requests, &cfg(cfg_json), &mut tick)?
    } else {
        let path = args.trace.clone().context("a trace or --workload")?;
        let f = File::open(&path).with_context(|| format!("opening trace {}", path.display()))?;
        let mut reader = BufReader::with_capacity(1 << 20, f);
        let format = match &args.format {
            Some(f) => f.parse::<Format>().map_err(UsageError)?,
            None => {
                let f = ftl_replay::detect(&path, &mut reader)?;
                reader
                    .rewind()
                    .with_context(|| format!("rereading {}", path.display()))?;
                f
            }
        };
        cfg_json["trace"] = path.display().to_string().into();
        cfg_json["format"] = format.name().into();
        let requests = TraceReader::new(&path, format, reader);
        ftl_replay::replay(&ftl, requests, &cfg(cfg_json), &mut tick)?
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    ftl.close()
        .map_err(|e| image::describe(e, &settings.path).context("closing the image"))?;
    drop(scratch);
    let json = serde_json::to_string_pretty(&summary)?;
    if args.out.is_none() {
        out!("{json}");
    } else {
        let o = |s: &ftl_replay::OpSummary| {
            format!(
                "{} requests, mean {:.1} us, p99 {:.1} us, max {:.1} us",
                s.count, s.mean_us, s.p99_us, s.max_us
            )
        };
        out!("replayed {} requests: {:.3} s simulated in {:.2} s ({:.0} requests/s, {:.0} NAND ops/s)",
            summary.requests, summary.simulated_seconds, summary.wall_seconds,
            summary.requests_per_second, summary.nand_ops_per_second);
        out!("  read:  {}", o(&summary.read));
        out!("  write: {}", o(&summary.write));
        out!(
            "  WAF {:.3}, GC erases {}, adjusted {:?}, errors {}",
            summary.waf,
            summary.gc.erases,
            summary.adjusted,
            summary.errors
        );
        if let Some(d) = &args.out {
            out!("  outputs in {}", d.display());
        }
    }
    Ok(())
}

fn progress_bar() -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = ProgressBar::new(0);
    b.set_style(
        ProgressStyle::with_template(
            "{spinner} {pos} requests {per_sec} [{elapsed_precise}] {wide_bar}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(b)
}
