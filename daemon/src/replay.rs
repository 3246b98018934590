//! `ftld replay`: a trace or a synthetic workload replayed (`ftl-replay`) on the FTL — in
//! virtual time or in real time, on a given image or a scratch one made from the image
//! options — or in real time against another device (`--target`: an NBD export, a block
//! device or file).

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::PathBuf;

use anyhow::Context;
use ftl::Ftl;
use ftl_replay::target::FtlTarget;
use ftl_replay::{
    DeviceSelect, DriverOptions, Format, ReplayConfig, Request, Summary, Target, TraceError,
    TraceReader, Workload, WorkloadSpec,
};
use indicatif::{ProgressBar, ProgressStyle};
use nand_model::TimingMode;

use crate::cli::{ReplayArgs, ReplayTiming};
use crate::config::{self, FileConfig};
use crate::image;
use crate::signals::ReplaySignals;
use crate::UsageError;

/// A scratch image removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        crate::signals::remove_scratch(&self.0);
    }
}

/// Runs `ftld replay`.
pub fn run(args: &ReplayArgs) -> anyhow::Result<()> {
    // First, before any thread exists (they inherit the blocked signals).
    let signals = ReplaySignals::watch().context("starting the signal thread")?;
    if let Some(p) = args.precondition {
        if !(0.0..=100.0).contains(&p) {
            return Err(UsageError(format!("--precondition {p} is not a percentage")).into());
        }
    }
    // Below a microsecond the interval would round to 0 ns (per-interval rates of millions
    // of MB/s); above a year it overflows nothing but says nothing either.
    if !(args.interval_ms.is_finite() && (0.001..=3.2e10).contains(&args.interval_ms)) {
        return Err(UsageError(format!(
            "--interval-ms {} must be from 0.001 (1 us) to 3.2e10 (a year)",
            args.interval_ms
        ))
        .into());
    }
    // Parsed (a workload) or opened and its format found (a trace) before any device is
    // opened or aged: a wrong path or a file of no known format fails at once. A workload is
    // sized where the capacity is known.
    let source = match &args.workload {
        Some(w) => {
            let spec: WorkloadSpec = w
                .parse()
                .map_err(|e| UsageError(format!("--workload {w:?}: {e}")))?;
            // Open loop at a rate and a closed loop of N outstanding contradict each other;
            // taking either silently would change every figure.
            if let (Some(iops), Some(n)) = (spec.iops, args.queue_depth) {
                return Err(UsageError(format!(
                    "--workload {w:?}: iops={iops} (open loop at that rate) contradicts \
                     --queue-depth {n} (closed loop): drop one"
                ))
                .into());
            }
            Source::Workload(spec)
        }
        None => Source::Trace(open_trace(args)?),
    };
    let timing = match (args.timing, &args.target) {
        (Some(t @ (ReplayTiming::Virtual | ReplayTiming::Off)), Some(_)) => {
            return Err(UsageError(format!(
                "--target replays in real time (--timing {} needs the FTL in this process)",
                t.name()
            ))
            .into())
        }
        (Some(t), _) => t,
        (None, Some(_)) => ReplayTiming::Real,
        (None, None) => ReplayTiming::Virtual,
    };
    if args.stall_probe && timing == ReplayTiming::Virtual {
        return Err(UsageError(
            "--stall-probe measures how the host delays a replay on its own clock: a \
             virtual-time replay has none (add --timing real, or drop --stall-probe)"
                .into(),
        )
        .into());
    }
    let mut cfg_json = serde_json::json!({
        "timing": timing.name(),
        "queue_depth": args.queue_depth,
        "speed": args.speed,
        "seed": args.seed,
        "out_of_range": args.out_of_range,
    });
    let opts = DriverOptions {
        queue_depth: args.queue_depth.map(|n| n as usize),
        speed: args.speed,
        out_of_range: args
            .out_of_range
            .parse()
            .map_err(|e: String| UsageError(format!("--out-of-range: {e}")))?,
    };
    // Made once the arguments are checked, before any device is made or aged: a path where
    // the outputs' directory cannot be (a file, a dangling link, /proc) would otherwise fail
    // only at the end, as "File exists", with the run's figures lost.
    if let Some(out) = &args.out {
        let taken = out.symlink_metadata().is_ok() && !out.is_dir();
        if taken {
            return Err(UsageError(format!(
                "--out {}: exists and is not a directory (--out names the directory the \
                 outputs are written into)",
                out.display()
            ))
            .into());
        }
        std::fs::create_dir_all(out).map_err(|e| {
            UsageError(format!(
                "--out {}: the outputs' directory cannot be made: {e}",
                out.display()
            ))
        })?;
    }
    let summary = match &args.target {
        Some(spec) => {
            let i = &args.image;
            if i.image.is_some()
                || i.preset.is_some()
                || i.ftl.is_some()
                || i.capacity.is_some()
                || i.interconnect.is_some()
                || i.controllers.is_some()
                || i.queues.is_some()
                || i.config.is_some()
                || args.gc_policy.is_some()
                || args.log_placement.is_some()
                || args.power_cut
            {
                return Err(UsageError(
                    "--target replays against an existing device: the image options (--image, --preset, --ftl, --capacity, --gc-policy, --power-cut, ...) do not apply".into(),
                )
                .into());
            }
            let target = ftl_replay::target::open(spec, args.direct)
                .map_err(|e| anyhow::anyhow!("--target {spec}: {e}"))?;
            cfg_json["target"] = target.describe().into();
            cfg_json["capacity_bytes"] = target.capacity().into();
            if let Some(p) = args.precondition.filter(|&p| p > 0.0) {
                note!("preconditioning {p} % of {} ...", target.describe());
                let r = ftl_replay::precondition_real(target.as_ref(), p, args.seed)?;
                note!(
                    "preconditioned: {:.0} MiB filled, {:.0} MiB overwritten in {:.1} s",
                    r.fill_bytes as f64 / 1048576.0,
                    r.overwrite_bytes as f64 / 1048576.0,
                    r.wall_seconds
                );
                cfg_json["precondition"] = serde_json::to_value(&r)?;
            }
            replay_on(
                args,
                source,
                &opts,
                Device::Real(target.as_ref(), None),
                cfg_json,
                &signals,
            )?
        }
        None => replay_image(args, source, timing, &opts, cfg_json, &signals)?,
    };
    report(args, &summary)?;
    // A signal that came after the last request (during the drain or the close) cut nothing:
    // the run is whole.
    match (signals.received(), &summary.stopped_early) {
        (Some(signo), Some(_)) => Err(crate::Interrupted(signo).into()),
        // The device turned read-only, or the target failed: the figures until then are
        // written, and the command still fails.
        (None, Some(why)) => Err(anyhow::anyhow!(
            "{why} (the replay stopped there; the figures of the requests before it are written)"
        )),
        _ => Ok(()),
    }
}

/// Write queues of a virtual-time replay unless `--queues` or `[ftl] queues` says otherwise.
/// A simulation models a device, not the host: with the served default (the CPU count, at most
/// 8) the same command gave other figures on a machine with other CPUs (other writers and
/// buffering, and then also another format: a 32 MiB random-write replay had WAF 1.059 and a
/// mean write of 391 us on 2 CPUs, 1.100 and 834 us on one). Two is what the stored experiment
/// results were produced with (a 2-CPU machine).
const VIRTUAL_QUEUES: usize = 2;

/// Replays on an image (given or scratch), in virtual or real time.
fn replay_image(
    args: &ReplayArgs,
    source: Source,
    timing: ReplayTiming,
    opts: &DriverOptions,
    mut cfg_json: serde_json::Value,
    signals: &ReplaySignals,
) -> anyhow::Result<Summary> {
    let file = FileConfig::load_opt(args.image.config.as_deref())?;
    // The file's `timing` is a served device's (real or off); a replay's default is virtual
    // time, and silently taking the file's would change every figure.
    let file_timing = file.timing.map(|t| t.to_string());
    if let (Some(t), None, Some(path)) = (
        file_timing.filter(|t| t != timing.name()),
        args.timing,
        &args.image.config,
    ) {
        note!(
            "note: {}: timing = \"{t}\" applies to ftld serve; this replay runs in {} time (--timing sets it)",
            path.display(),
            timing.name()
        );
    }
    // The file's `image` is a served device's too: a replay on it would overwrite what that
    // device holds. Only --image names the image a replay changes.
    if let (Some(image), None, Some(path)) = (&file.image, &args.image.image, &args.image.config) {
        note!(
            "note: {}: image = {} applies to ftld serve; this replay runs on a scratch image \
             (--image {} replays on that image, and changes it)",
            path.display(),
            image.display(),
            image.display()
        );
    }
    let mut settings = config::resolve_image(&args.image, &file)?;
    // Armed once preconditioning is done (below): the aged state is the same with or without
    // them; from then on the requests, GC and the close meet them.
    let faults = settings.faults.take();
    if let Some(p) = args.gc_policy {
        settings.ftl.gc_policy = p;
        settings.ftl_keys.push("--gc-policy".into());
    }
    if let Some(p) = args.log_placement {
        settings.ftl.log_placement = p;
        settings.ftl_keys.push("--log-placement".into());
    }
    if timing == ReplayTiming::Virtual && args.image.queues.is_none() && !file.ftl_queues_set {
        settings.ftl.queues = VIRTUAL_QUEUES;
    }
    if args.power_cut && args.image.image.is_none() {
        return Err(UsageError(
            "--power-cut leaves an image to recover: it needs --image (a scratch image is removed)"
                .into(),
        )
        .into());
    }
    let scratch = if args.image.image.is_none() {
        let dir = std::env::temp_dir().join(format!("ftld-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        settings.path = dir.join("scratch.img");
        let _ = std::fs::remove_file(&settings.path);
        signals.set_scratch(Some(settings.path.clone()));
        Some(Scratch(settings.path.clone()))
    } else {
        None
    };
    // Preconditioning always runs in virtual time (fast, and the same aged state either way);
    // a real-time replay then reopens the image with timing real.
    let mut ftl = match &scratch {
        Some(_) => image::create(&settings, TimingMode::Virtual)?,
        None => image::open_or_create(&settings, TimingMode::Virtual, ftl::Access::ReadWrite)?,
    };
    // How an existing image was opened, in simulated time (the open ran on the virtual clock,
    // from 0: its checkpoint reads, or its scan after a power cut, and the checkpoint written
    // after a recovery). A new image has nothing to report.
    let report = ftl.recovery();
    cfg_json["open"] = if report.mode == ftl::RecoveryMode::Formatted {
        serde_json::Value::Null
    } else {
        serde_json::json!({
            "mode": report.mode,
            "checkpoint_id": report.checkpoint_id,
            "checkpoint_fallback": report.checkpoint_fallback,
            "blocks_scanned": report.blocks_scanned,
            "pages_scanned": report.pages_scanned,
            "mapped_pages": report.mapped_pages,
            "lost_pages": report.lost_pages,
            "unreadable_pages": report.unreadable_pages,
            "torn_slots": report.torn_slots,
            "wall_ms": report.millis,
            "scan_simulated_ms": report.scan_device_ms,
            "simulated_ms": ftl.now_ns() as f64 / 1e6,
        })
    };
    let precondition = match args.precondition {
        Some(p) if p > 0.0 => {
            note!("preconditioning {p} % of the device ...");
            let r = ftl_replay::precondition(&ftl, p, args.seed)?;
            let steady = match r.steady_waf {
                None => "none (the span is under 128 KiB: nothing aged)".to_string(),
                Some(w) if r.steady => format!("{w:.2}"),
                Some(w) => format!(
                    "not reached (the last two passes differ by more than 2 %; the last: {w:.2})"
                ),
            };
            note!(
                "preconditioned: {:.0} MiB filled, {:.0} MiB overwritten, steady WAF {steady}, {:.1} s simulated in {:.1} s",
                r.fill_bytes as f64 / 1048576.0,
                r.overwrite_bytes as f64 / 1048576.0,
                r.simulated_seconds,
                r.wall_seconds
            );
            Some(r)
        }
        _ => None,
    };
    // Held while a real-time replay runs (see `serve::hold_idle_poll`).
    let _idle_poll = if timing != ReplayTiming::Virtual {
        ftl.close()
            .map_err(|e| image::describe(e, &settings.path).context("closing the image"))?;
        drop(ftl);
        let mode = if timing == ReplayTiming::Off {
            TimingMode::Off
        } else {
            TimingMode::Real
        };
        ftl = image::open_or_create(&settings, mode, ftl::Access::ReadWrite)?;
        let timer = args.timer.or(file.timer).unwrap_or_default();
        ftl.nand().set_timer(timer);
        let idle_poll = crate::serve::hold_idle_poll(
            mode,
            timer,
            args.idle_poll.or(file.idle_poll).unwrap_or(true),
        );
        if timing == ReplayTiming::Real {
            cfg_json["timer"] = timer.to_string().into();
            cfg_json["idle_poll"] = idle_poll.is_some().into();
        }
        idle_poll
    } else {
        None
    };
    if let Some(plan) = &faults {
        plan.arm(ftl.nand());
    }
    cfg_json["faults"] = serde_json::to_value(faults)?;
    let stats = ftl.stats();
    cfg_json["image"] = if scratch.is_some() {
        serde_json::Value::Null
    } else {
        settings.path.display().to_string().into()
    };
    cfg_json["preset"] = settings
        .preset
        .clone()
        .unwrap_or_else(|| image::DEFAULT_PRESET.into())
        .into();
    cfg_json["capacity_bytes"] = ftl.capacity().into();
    cfg_json["ftl"] = stats.scheme.into();
    cfg_json["gc_policy"] = serde_json::to_value(stats.gc_policy)?;
    cfg_json["queues"] = ftl.queues().into();
    // Every `[ftl]` setting the run used (file, flags and defaults), so a result records the
    // policies behind it (victims, separation, frontiers, ...). Format-time values of an
    // existing image (over-provisioning) are the image's, not these.
    cfg_json["ftl_settings"] = serde_json::to_value(&settings.ftl)?;
    cfg_json["precondition"] = serde_json::to_value(&precondition)?;
    let summary = match timing {
        ReplayTiming::Virtual => {
            replay_on(args, source, opts, Device::Virtual(&ftl), cfg_json, signals)?
        }
        ReplayTiming::Real | ReplayTiming::Off => {
            let target = FtlTarget::new(&ftl);
            let mut summary = replay_on(
                args,
                source,
                opts,
                Device::Real(&target, Some(&ftl)),
                cfg_json,
                signals,
            )?;
            // The host's clock either way; "off" says the NAND took no time on it.
            summary.timing = timing.name();
            summary
        }
    };
    if args.power_cut {
        // The close's first operation on the medium is cut mid-way (a torn checkpoint page, or
        // an erase that does not happen) and none after it reaches the medium: the image is
        // left as a power cut during the close leaves it. (The next open may then fall back to
        // the older checkpoint: `checkpoint_fallback`.)
        ftl.nand().faults().power_cut_after(0);
        drop(ftl);
        note!(
            "power cut: {} left as after a crash (the next open recovers it)",
            settings.path.display()
        );
    } else {
        ftl.close()
            .map_err(|e| image::describe(e, &settings.path).context("closing the image"))?;
    }
    drop(scratch);
    signals.set_scratch(None);
    Ok(summary)
}

/// What a replay runs on.
enum Device<'a> {
    /// The FTL in this process, in virtual time.
    Virtual(&'a Ftl),
    /// A target in real time, and the FTL behind it when it is in this process.
    Real(&'a dyn Target, Option<&'a Ftl>),
}

/// What is replayed.
enum Source {
    Workload(WorkloadSpec),
    Trace(OpenTrace),
}

/// A trace file, opened, with its format.
struct OpenTrace {
    path: PathBuf,
    format: Format,
    reader: Box<dyn BufRead + Send>,
    /// The requests it holds for the replay, when it was read through first (a regular file).
    requests: Option<u64>,
}

/// Opens the trace of `args` and finds its format (`--format`, or guessed from its first
/// line). The lines read to guess it are kept and read again, so a pipe works too
/// (`ftld replay <(zcat trace.csv.gz)`).
///
/// A trace that is a regular file is read through once first ([`check_trace`]), so a line it
/// cannot use fails the command at once, not after the device was aged and part of the trace
/// replayed.
fn open_trace(args: &ReplayArgs) -> anyhow::Result<OpenTrace> {
    let path = args.trace.clone().context("a trace or --workload")?;
    // `-`: standard input, read once as a pipe is (no counting pass first, even when it is
    // a file redirected in: that pass opens the trace again by its name). A duplicate of fd 0,
    // not /dev/stdin: that cannot be opened on a socket, and reopens a redirected file from
    // its start.
    let stdin = path.as_os_str() == "-";
    let f = if stdin {
        if std::io::stdin().is_terminal() {
            return Err(UsageError(
                "the trace `-` is standard input, which is a terminal: pipe or redirect a trace \
                 into it"
                    .into(),
            )
            .into());
        }
        use std::os::fd::AsFd;
        std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
    } else {
        File::open(&path)
    }
    .with_context(|| format!("opening trace {}", path.display()))?;
    let regular = !stdin && f.metadata().is_ok_and(|m| m.is_file());
    let mut reader = BufReader::with_capacity(1 << 20, f);
    let (format, head) = match &args.format {
        Some(f) => (f.parse::<Format>().map_err(UsageError)?, Vec::new()),
        None => {
            let mut tee = Tee {
                inner: &mut reader,
                copy: Vec::new(),
            };
            let f = ftl_replay::detect(&path, &mut tee)?;
            (f, tee.copy)
        }
    };
    let requests = if regular {
        Some(check_trace(
            &path,
            format,
            args.device.clone().unwrap_or_default(),
        )?)
    } else {
        None
    };
    Ok(OpenTrace {
        path,
        format,
        reader: Box::new(std::io::Cursor::new(head).chain(reader)),
        requests,
    })
}

/// Reads the trace at `path` through as the replay will (the same format and choice of
/// devices) and counts its requests. Every error the replay's reader would raise at some
/// line — a malformed field, a second device, a request over 64 MiB, a jump of a month, an
/// empty trace — is raised here, before an image is made or aged: on a long capture the
/// replay would otherwise fail hours in. This costs one more pass over the file (the parse,
/// not the simulation: a small part of a replay's time); a pipe is not read twice.
fn check_trace(
    path: &std::path::Path,
    format: Format,
    devices: DeviceSelect,
) -> anyhow::Result<u64> {
    let f = File::open(path).with_context(|| format!("opening trace {}", path.display()))?;
    let reader = TraceReader::new(path, format, BufReader::with_capacity(1 << 20, f))
        .select_devices(devices);
    let mut requests = 0u64;
    for r in reader {
        r?;
        requests += 1;
    }
    Ok(requests)
}

/// A reader that keeps a copy of what is read through it.
struct Tee<'a, R> {
    inner: &'a mut R,
    copy: Vec<u8>,
}

impl<R: BufRead> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.copy.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Tee<'_, R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        // What `fill_buf` returned is still buffered: this reads no more from the file.
        if let Ok(b) = self.inner.fill_buf() {
            self.copy.extend_from_slice(&b[..amt.min(b.len())]);
        }
        self.inner.consume(amt);
    }
}

/// Replays the trace or workload of `args` on `dev`.
fn replay_on(
    args: &ReplayArgs,
    source: Source,
    opts: &DriverOptions,
    dev: Device<'_>,
    mut cfg_json: serde_json::Value,
    signals: &ReplaySignals,
) -> anyhow::Result<Summary> {
    let capacity = match dev {
        Device::Virtual(f) => f.capacity(),
        Device::Real(t, _) => t.capacity(),
    };
    let bar = progress_bar();
    let mut tick = |n: u64| {
        if let Some(b) = &bar {
            b.set_position(n);
        }
    };
    let requests: Box<dyn Iterator<Item = Result<Request, TraceError>> + Send> = match source {
        Source::Workload(spec) => {
            cfg_json["workload"] = args.workload.clone().into();
            let w = Workload::new(spec, capacity, args.seed)
                .map_err(|e| UsageError(format!("--workload: {e}")))?;
            if let Some(b) = &bar {
                b.set_length(w.size_hint().1.unwrap_or(0) as u64);
            }
            Box::new(w.map(Ok::<Request, TraceError>))
        }
        Source::Trace(t) => {
            cfg_json["trace"] = t.path.display().to_string().into();
            cfg_json["format"] = t.format.name().into();
            let devices = args.device.clone().unwrap_or_default();
            cfg_json["device"] = match &devices {
                DeviceSelect::Single if t.format == Format::Umass => "all".into(),
                DeviceSelect::Single => serde_json::Value::Null,
                DeviceSelect::Only(name) => name.as_str().into(),
                DeviceSelect::All => "all".into(),
            };
            if let (Some(b), Some(n)) = (&bar, t.requests) {
                b.set_length(n);
            }
            Box::new(TraceReader::new(&t.path, t.format, t.reader).select_devices(devices))
        }
    };
    let cfg = ReplayConfig {
        driver: opts.clone(),
        interval_ns: (args.interval_ms * 1e6) as u64,
        out: args.out.clone(),
        config: cfg_json,
        probe_stalls: matches!(dev, Device::Real(..)) && args.stall_probe,
        stop: Some(signals.stop.clone()),
    };
    signals.set_replaying(true);
    let summary = match dev {
        Device::Virtual(ftl) => ftl_replay::replay(ftl, requests, &cfg, &mut tick),
        Device::Real(target, ftl) => {
            ftl_replay::replay_real(target, ftl, requests, &cfg, &mut tick)
        }
    };
    signals.set_replaying(false);
    let summary = summary?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    Ok(summary)
}

/// Prints the summary: all of it as JSON without `--out`, else the main figures.
fn report(args: &ReplayArgs, summary: &Summary) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(summary)?;
    let Some(dir) = &args.out else {
        out!("{json}");
        return Ok(());
    };
    let o = |s: &ftl_replay::OpSummary| {
        format!(
            "{} requests, mean {:.1} us, p99 {:.1} us, max {:.1} us",
            s.count, s.mean_us, s.p99_us, s.max_us
        )
    };
    let clock = if summary.timing == "virtual" {
        "simulated"
    } else {
        "elapsed"
    };
    out!(
        "replayed {} requests: {:.3} s {clock} in {:.2} s ({:.0} requests/s)",
        summary.requests,
        summary.simulated_seconds,
        summary.wall_seconds,
        summary.requests_per_second
    );
    out!("  read:  {}", o(&summary.read));
    out!("  write: {}", o(&summary.write));
    let waf = match (summary.waf, summary.write.count + summary.trim.count) {
        (Some(w), _) => format!("{w:.3}"),
        (None, 0) if summary.gc.is_some() => "none (nothing written)".to_string(),
        (None, _) => "unknown".to_string(),
    };
    let erases = summary
        .gc
        .as_ref()
        .map_or_else(|| "unknown".to_string(), |g| g.erases.to_string());
    out!(
        "  WAF {waf}, GC erases {erases}, requests adjusted: {}, errors {}",
        summary.adjusted,
        summary.errors
    );
    if let Some(e) = &summary.first_error {
        out!("  first error: {e}");
    }
    // A read of a page that holds nothing takes no NAND time: a read-heavy run on a fresh
    // device measures RAM, which a researcher should know before reading its latencies.
    if let Some(n) = &summary.nand {
        let f = n.injected;
        if f.program + f.erase + f.read > 0 {
            out!(
                "  faults injected: {} program, {} erase, {} read; {} read retries, {} reads \
                 uncorrectable, {} blocks gone bad",
                f.program,
                f.erase,
                f.read,
                n.read_retries,
                n.uncorrectable_reads,
                n.grown_bad_blocks
            );
        }
        let pages = summary.read.bytes.div_ceil(4096);
        if pages > 0 && n.unwritten_page_reads * 10 > pages {
            out!(
                "  note: {} of the {pages} 4 KiB pages read held no data (never written or \
                 trimmed): they read as zeroes with no NAND read and no modelled time \
                 (--precondition PCT fills the device first)",
                n.unwritten_page_reads
            );
        }
    }
    if let Some(why) = &summary.stopped_early {
        out!("  stopped early ({why}): the figures are those of the requests replayed until then");
    }
    if let Some(d) = &summary.dispatch {
        out!(
            "  dispatch late: p50 {:.1} us, p99 {:.1} us, max {:.1} us ({} workers)",
            d.late_p50_us,
            d.late_p99_us,
            d.late_max_us,
            d.workers
        );
    }
    if let Some(h) = &summary.host_stalls {
        let steal = h
            .steal_ms
            .map_or_else(|| "unknown".to_string(), |s| format!("{s:.0} ms"));
        out!(
            "  host stalls: {} over {:.0} us on {} CPU(s), longest {:.0} us, {:.1} ms in all, steal {steal} (stalls.csv)",
            h.stalls,
            h.threshold_us,
            h.cpus,
            h.longest_us,
            h.stalled_ms
        );
    }
    out!("  outputs in {}", dir.display());
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
