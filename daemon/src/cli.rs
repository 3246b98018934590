//! The command line (clap derive): one struct per subcommand.
//!
//! Every `serve`/`format` setting is an `Option` here so that a value given in the `--config`
//! file can fill what the command line leaves out; `crate::config` merges the two (flags win)
//! and applies the defaults. Values clap can check (sizes, addresses, enums) are parsed here, so
//! a typo is a usage error (exit code 2) before anything is opened.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ftl::{GcPolicy, LogPlacement, SchemeKind};
use nand_model::{TimerMode, TimingMode};
use serde::Deserialize;

use crate::units::{parse_listen, parse_size};
use ftl_nbd::TlsMode;

fn parse_tls_mode(s: &str) -> Result<TlsMode, String> {
    s.parse()
}

/// `ftld replay --speed`: slower than 1/1000 would leave a virtual-time run simulating a
/// trace's idle time (GC and maintenance tick through it) for days of wall time.
fn speed(s: &str) -> Result<f64, String> {
    let x: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (1e-3..=1e6).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{s} is outside 0.001 to 1e6"))
    }
}

/// `--ftl`: one of the scheme names, listed in `--help` and in the error for a wrong one.
fn scheme_parser() -> impl clap::builder::TypedValueParser<Value = SchemeKind> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(SchemeKind::ALL.map(SchemeKind::name))
        .try_map(|s| s.parse::<SchemeKind>())
}

/// Image used when neither `--image` nor the config file names one.
pub const DEFAULT_IMAGE: &str = "ftld-data/ftld.img";

/// ftld: a flash translation layer over emulated NAND, served as a Linux block device.
#[derive(Parser, Debug)]
#[command(name = "ftld", version, propagate_version = true)]
#[command(after_help = "Run `ftld serve` and follow what it prints to connect a client.")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve an image as a block device (ublk or NBD) until SIGINT/SIGTERM (creates it if
    /// missing).
    Serve(ServeArgs),
    /// Create (or with --force recreate) an image.
    Format(FormatArgs),
    /// Show an image's geometry, capacity, wear and shutdown state (read-only: the image may be
    /// served read-only meanwhile, not by a writable daemon).
    Info(InfoArgs),
    /// Print the statistics of a running daemon as JSON (via its control socket).
    Stats(StatsArgs),
    /// List the NAND presets and the FTL schemes.
    Presets(PresetsArgs),
    /// Replay a block trace or a synthetic workload on the FTL in simulated (virtual) time and
    /// write latency, WAF and GC figures, a per-request log and plots.
    Replay(ReplayArgs),
    /// Measure how late this machine lets a due thread run (host scheduling stalls: the limit
    /// of real-time emulation on it), like cyclictest.
    Stalls(StallsArgs),
}

/// `ftld stalls`.
#[derive(Args, Debug, Clone)]
pub struct StallsArgs {
    /// How long to measure; SIGINT or SIGTERM ends it earlier, with the report.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub seconds: f64,
    /// Each probe thread (one per CPU) wakes this often.
    #[arg(long, value_name = "US", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    pub period_us: u64,
    /// A wake-up later than this is a stall.
    #[arg(long, value_name = "US", default_value_t = 200)]
    pub threshold_us: u64,
    /// Write every stall to this CSV: start_ns (CLOCK_MONOTONIC), cpu, length_us.
    #[arg(long, value_name = "PATH")]
    pub csv: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--timing` of `ftld replay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReplayTiming {
    /// Simulated time: every NAND operation takes its modelled time on a simulated clock,
    /// nothing sleeps, and the run is deterministic.
    Virtual,
    /// The host's clock: the emulated device (or --target) runs as when served, requests are
    /// sent by threads at their trace times.
    Real,
    /// The host's clock with NAND operations instant: what the FTL itself costs in CPU and
    /// locking (as a DRAM-backed emulator measures it).
    Off,
}

impl ReplayTiming {
    /// The name `--timing` takes.
    pub fn name(self) -> &'static str {
        match self {
            ReplayTiming::Virtual => "virtual",
            ReplayTiming::Real => "real",
            ReplayTiming::Off => "off",
        }
    }
}

/// `ftld replay`.
#[derive(Args, Debug, Clone)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["trace", "workload"]))]
pub struct ReplayArgs {
    /// The trace file (MSR, UMass/SPC, blkparse text, fio iolog v2/v3, DiskSim ASCII, Alibaba
    /// or Tencent cloud block traces); `-` reads it from standard input.
    #[arg(value_name = "TRACE")]
    pub trace: Option<PathBuf>,
    /// The trace's format [default: guessed from its first line].
    #[arg(long, value_name = "FORMAT", value_parser = ["msr", "umass", "blkparse", "fio", "disksim", "alibaba", "tencent"])]
    pub format: Option<String>,
    /// Which device of a trace that names several to replay (as the error naming them says:
    /// blkparse `8,16`, MSR `hm,0`, a fio file, a DiskSim device number, a UMass ASU, an
    /// Alibaba device_id, a Tencent VolumeID), or
    /// `all` to lay every device's requests over one address space [default: the trace must
    /// name one device; UMass ASUs are merged].
    #[arg(long, value_name = "NAME", value_parser = parse_device_select)]
    pub device: Option<ftl_replay::DeviceSelect>,
    /// A synthetic workload instead of a trace, e.g. `random,requests=1e6,bs=4k,read=30` or
    /// `hotcold,hot=80/20`, `seq`, `thinktime,think=1ms,every=64,long=100ms`,
    /// `periodic,period=10ms` (keys: see the replay section of the README).
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["trace", "format", "device"])]
    pub workload: Option<String>,
    /// The image to replay on (it is changed, as by a served device). Without it a scratch
    /// image is made from --preset/--capacity/--ftl and removed afterwards.
    #[command(flatten)]
    pub image: ImageArgs,
    /// Garbage-collection scheduling: in-path, parallel or adaptive [default: adaptive].
    #[arg(long, value_name = "POLICY")]
    pub gc_policy: Option<GcPolicy>,
    /// Hybrid schemes: log placement, same or spread [default: spread].
    #[arg(long, value_name = "POLICY")]
    pub log_placement: Option<LogPlacement>,
    /// How time passes [default: virtual; real with --target].
    #[arg(long, value_enum)]
    pub timing: Option<ReplayTiming>,
    /// With --timing real on an image: how waits pass the time, sleep, hybrid or spin (see
    /// `ftld serve --help`) [default: hybrid].
    #[arg(long, value_enum, value_name = "MODE")]
    pub timer: Option<TimerMode>,
    /// With --timing real on an image and timer hybrid or spin: keep idle CPUs polling (see
    /// `ftld serve --help`) [default: true].
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub idle_poll: Option<bool>,
    /// Replay in real time against this device instead of an image: an NBD URI
    /// (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`) or a block device or
    /// file (`/dev/nvme0n1`: a real SSD too). Its data is overwritten.
    #[arg(long, value_name = "URI|DEVICE")]
    pub target: Option<String>,
    /// With a device or file --target: open it O_DIRECT (bypass the page cache).
    #[arg(long, requires = "target")]
    pub direct: bool,
    /// Closed loop: N requests outstanding, each sent when one completes (trace times are
    /// ignored). Without it, requests arrive at their trace times (open loop).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub queue_depth: Option<u32>,
    /// Open loop: replay X times faster than the trace's own times (0.001 to 1e6): arrival
    /// times and think times are divided by X. A closed loop (--queue-depth) has no arrival
    /// times to scale.
    #[arg(long, value_name = "X", default_value_t = 1.0, value_parser = speed,
          conflicts_with = "queue_depth")]
    pub speed: f64,
    /// Age the device first: fill this percentage of it, then overwrite it at random until GC
    /// is in steady state.
    #[arg(long, value_name = "PCT")]
    pub precondition: Option<f64>,
    /// End as a power cut would (with --image): what the replay programmed stays, and the cut
    /// falls on the close's first operation on the flash (the first page of the checkpoint it
    /// starts is left torn, or an erase does not happen); nothing after it is written, so the
    /// next open recovers by scanning. The summary of a replay on an existing image reports
    /// how it was opened (`config.open`).
    #[arg(long)]
    pub power_cut: bool,
    /// Seed of the synthetic workload and the precondition's random writes.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Output directory: summary.json, requests.csv, timeseries.csv and SVG plots [default:
    /// only the summary, on stdout].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Requests past the device end: wrap them into it, or refuse (skip) them; both counted.
    #[arg(long, value_name = "WAY", default_value = "wrap", value_parser = ["wrap", "refuse"])]
    pub out_of_range: String,
    /// Time-series interval in simulated milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000.0)]
    pub interval_ms: f64,
    /// Real time: run the stall probe beside the replay (`ftld stalls`: a thread per CPU
    /// waking every millisecond to see whether the host let it run on time), its stalls in
    /// summary.json and stalls.csv, to tell which slow requests the machine delayed. Each
    /// wake-up takes its CPU for a few microseconds: leave it off for microsecond tails.
    #[arg(long)]
    pub stall_probe: bool,
}

/// Which frontend exports the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Frontend {
    /// ublk when the kernel offers it (/dev/ublk-control answers), else NBD.
    #[default]
    Auto,
    /// The kernel's ublk driver: /dev/ublkbN.
    Ublk,
    /// NBD on a unix socket and/or TCP.
    Nbd,
}

/// `--interconnect`, `[nand] interconnect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InterconnectKind {
    /// A controller per channel, reaching only its channel's banks.
    Tmcd,
    /// N controllers, each reaching every bank.
    Pmcd,
}

/// Options that choose and shape an image (shared by `serve` and `format`).
#[derive(Args, Debug, Default, Clone)]
pub struct ImageArgs {
    /// The image file [default: ./ftld-data/ftld.img; for `ftld replay` a scratch image,
    /// removed afterwards].
    #[arg(long, value_name = "PATH")]
    pub image: Option<PathBuf>,
    /// NAND preset for a new image (`ftld presets` lists them) [default: default].
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// FTL scheme of a new image (`ftld presets` describes them); an existing image keeps its
    /// own [default: page].
    #[arg(long, value_name = "SCHEME", value_parser = scheme_parser())]
    pub ftl: Option<SchemeKind>,
    /// How controllers reach banks in a new image: tmcd (a controller per channel, as every
    /// preset) or pmcd (N controllers, any of which reaches any bank; thesis ch. 4) [default:
    /// tmcd].
    #[arg(long, value_enum, value_name = "KIND")]
    pub interconnect: Option<InterconnectKind>,
    /// PMCD controllers of a new image [default: the preset's channel count].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(nand_model::MAX_CONTROLLERS)))]
    pub controllers: Option<u32>,
    /// Exported size of a new image, e.g. 256M, 1G, 1GiB or bytes; the preset's geometry is
    /// scaled to hold it [default: the preset's own size].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub capacity: Option<u64>,
    /// Write queues, one write buffer and writer each [default: the CPU count, at most 8;
    /// `ftld replay` in virtual time: 2, whatever the machine]. With `[ftl] frontiers =
    /// "per-queue"` a new image is formatted for at most this many. Also the number of ublk
    /// hardware queues (default: the CPU count).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queues: Option<u16>,
    /// Allocate the whole image file (fallocate) when it is opened or created: it then takes
    /// its full raw size in RAM (tmpfs) or on disk at once, and no first write to a page waits
    /// for the file system to allocate and map it (on a sparse image that caps a first pass at
    /// the kernel's speed, ~2 us per 4 KiB of tmpfs on a small VM). Data is kept
    /// [default: false: sparse].
    #[arg(long)]
    pub preallocate: bool,
    /// TOML configuration file; command-line flags override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `serve --timing`: real or off. Virtual time is a clock a replay drives; a served device has
/// nothing to drive it (`config::resolve_serve` refuses it from a config file too).
fn serve_timing() -> impl clap::builder::TypedValueParser<Value = TimingMode> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(["real", "off"]).map(|s| match s.as_str() {
        "off" => TimingMode::Off,
        _ => TimingMode::Real,
    })
}

/// `ftld serve`.
#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Whether NAND operations take their modelled time [default: real] (`off`: every
    /// operation completes at once; `ftld replay` has a third, `virtual`).
    #[arg(long, value_name = "TIMING", value_parser = serve_timing())]
    pub timing: Option<TimingMode>,
    /// With timing real, how waits for a modelled completion pass the time: sleep (no CPU,
    /// late by the kernel's wake-up latency), hybrid (sleep until a learnt margin before, then
    /// spin: on time, about a margin of CPU per wait) or spin (a core per waiting thread)
    /// [default: hybrid].
    #[arg(long, value_enum, value_name = "MODE")]
    pub timer: Option<TimerMode>,
    /// With timing real and timer hybrid or spin, keep idle CPUs polling instead of halting
    /// while serving (PM QoS: /dev/cpu_dma_latency held at 0, as cyclictest does), so sleeping
    /// waits wake in microseconds; needs root [default: true].
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    pub idle_poll: Option<bool>,
    /// Threads of the async runtime that serve the NBD connections and the control socket
    /// [default: the CPUs this process may run on minus one, at least 1: the FTL's writer and
    /// GC threads and a client on the same machine need the rest].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
    /// Frontend [default: auto].
    #[arg(long, value_enum)]
    pub frontend: Option<Frontend>,
    /// Unix socket to serve NBD on [default: the image path with extension .sock].
    #[arg(long, value_name = "PATH")]
    pub nbd_socket: Option<PathBuf>,
    /// Serve NBD over TCP on ADDR:PORT; a bare `:PORT` binds 127.0.0.1 (then no unix socket is
    /// served unless --nbd-socket is given too).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub nbd_listen: Option<SocketAddr>,
    /// Export the device read-only.
    #[arg(long)]
    pub read_only: bool,
    /// NBD over TLS: off, on (offered; clients may upgrade with STARTTLS) or require (nothing
    /// but STARTTLS before TLS) [default: off]. Applies to every NBD socket.
    #[arg(long, value_name = "MODE", value_parser = parse_tls_mode)]
    pub tls: Option<TlsMode>,
    /// Directory with server-cert.pem, server-key.pem and (for --tls-verify-peer) ca-cert.pem,
    /// the layout nbdkit and qemu use.
    #[arg(long, value_name = "DIR")]
    pub tls_certificates: Option<PathBuf>,
    /// Accept only TLS clients with a certificate signed by the directory's ca-cert.pem.
    #[arg(long)]
    pub tls_verify_peer: bool,
    /// Garbage-collection scheduling: in-path, parallel or adaptive [default: adaptive].
    #[arg(long, value_name = "POLICY")]
    pub gc_policy: Option<GcPolicy>,
    /// Hybrid schemes: log blocks and merge destinations on their data block's bank (same) or
    /// away from its channel/bank (spread; thesis ch. 4) [default: spread].
    #[arg(long, value_name = "POLICY")]
    pub log_placement: Option<LogPlacement>,
    /// Control socket for `ftld stats` [default: the image path with extension .ctl].
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// Record every host request (from any frontend) into FILE as a blkparse text trace: a
    /// `D` line when it arrives and a `C` line when it is answered, times on the device's
    /// clock. `ftld replay FILE` replays it, e.g. in virtual time on another scheme or preset.
    /// The file is replaced; it is flushed every second and completed at shutdown.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// ublk: serve /dev/ublkb<N>; if a daemon that died left that device in recovery state,
    /// re-attach to it [default: the next free id].
    #[arg(long, value_name = "N")]
    pub ublk_id: Option<u32>,
    /// ublk: re-attach /dev/ublkb<N>, left in recovery state by a daemon that died (kill -9).
    #[arg(long, value_name = "N", conflicts_with = "ublk_id")]
    pub recover: Option<u32>,
    /// ublk: tags (requests in flight) per hardware queue [default: 128].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub queue_depth: Option<u16>,
}

/// `ftld format`.
#[derive(Args, Debug, Default, Clone)]
pub struct FormatArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Replace an existing image (refused while a daemon holds it).
    #[arg(long)]
    pub force: bool,
}

/// `ftld info`.
#[derive(Args, Debug, Clone)]
pub struct InfoArgs {
    /// The image file.
    #[arg(value_name = "IMAGE", default_value = DEFAULT_IMAGE)]
    pub image: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// A configuration file whose `[ftl]` settings (frontiers, queues, separation) the
    /// "spare blocks" line counts the need for, as `ftld serve --config` would run the image
    /// [default: the default settings].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

/// `ftld stats`.
#[derive(Args, Debug, Clone)]
pub struct StatsArgs {
    /// The daemon's control socket [default: derived from --image].
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,
    /// The image the daemon serves (its control socket is `<image without extension>.ctl`).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_IMAGE)]
    pub image: PathBuf,
}

/// `ftld presets`.
#[derive(Args, Debug, Clone)]
pub struct PresetsArgs {
    /// Print JSON (full configurations) instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn parse_device_select(s: &str) -> Result<ftl_replay::DeviceSelect, String> {
    s.parse()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_flags_parse() {
        let cli = Cli::try_parse_from([
            "ftld",
            "serve",
            "--capacity",
            "64M",
            "--timing",
            "off",
            "--gc-policy",
            "in-path",
            "--nbd-listen",
            ":10809",
        ])
        .expect("parses");
        let Command::Serve(a) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(a.image.capacity, Some(64 << 20));
        assert_eq!(a.timing, Some(TimingMode::Off));
        assert_eq!(a.gc_policy, Some(GcPolicy::InPath));
        assert_eq!(a.nbd_listen, Some("127.0.0.1:10809".parse().expect("addr")));
        assert!(Cli::try_parse_from(["ftld", "serve", "--capacity", "12X"]).is_err());
        // Virtual time is a replay's: not offered to serve, and refused by it.
        let e = Cli::try_parse_from(["ftld", "serve", "--timing", "virtual"])
            .expect_err("virtual refused")
            .to_string();
        assert!(e.contains("[possible values: real, off]"), "{e}");
        let Command::Serve(r) = Cli::try_parse_from(["ftld", "serve", "--timing", "real"])
            .expect("parses")
            .command
        else {
            panic!("not serve")
        };
        assert_eq!(r.timing, Some(TimingMode::Real));
        let Command::Serve(u) = Cli::try_parse_from([
            "ftld",
            "serve",
            "--frontend",
            "ublk",
            "--recover",
            "3",
            "--queue-depth",
            "64",
        ])
        .expect("parses")
        .command
        else {
            panic!("not serve")
        };
        assert_eq!(u.frontend, Some(Frontend::Ublk));
        assert_eq!((u.recover, u.queue_depth), (Some(3), Some(64)));
        assert!(
            Cli::try_parse_from(["ftld", "serve", "--recover", "1", "--ublk-id", "1"]).is_err()
        );
        assert!(Cli::try_parse_from(["ftld", "serve", "--queue-depth", "0"]).is_err());
        assert!(Cli::try_parse_from(["ftld", "serve", "--gc-policy", "eager"]).is_err());
    }
}
