//! The TOML configuration file and how it merges with the command line.
//!
//! Precedence: command-line flag > config file > built-in default. Relative paths in the file
//! are taken relative to the file's own directory (so a unit file can point at
//! `/etc/ftld/disk.toml` from anywhere). Unknown keys are errors, in the `[ftl]` and `[nbd]`
//! tables too.
//!
//! ```toml
//! image = "/var/lib/ftld/disk0.img"
//! preset = "k9-003"          # new images only
//! capacity = "1G"            # new images only; or a number of bytes
//! preallocate = false        # allocate the whole image file when opened (fallocate)
//! timing = "real"            # or "off"
//! timer = "hybrid"           # sleep | hybrid | spin: how timing-real waits pass the time
//! idle_poll = true           # timer hybrid/spin: idle CPUs poll (/dev/cpu_dma_latency = 0)
//! workers = 1                # async runtime threads [default: usable CPUs - 1, at least 1]
//! frontend = "auto"          # auto | nbd | ublk
//! nbd_socket = "/run/ftld/disk0.sock"
//! nbd_listen = "127.0.0.1:10809"
//! read_only = false
//! control_socket = "/run/ftld/disk0.ctl"
//! record = "/var/tmp/disk0.blk" # every host request as a blkparse trace (ftld replay reads it)
//!
//! [nand]                     # new images only
//! interconnect = "tmcd"      # tmcd | pmcd (thesis ch. 4)
//! controllers = 4            # pmcd only [default: the preset's channel count]
//! # and the device settings of `nand_options.rs` (cell, latencies, read-retry, planes, suspend)
//!
//! [ftl]                      # ftl::FtlConfig
//! queues = 4
//! gc_policy = "adaptive"     # in-path | parallel | adaptive
//! overprovision = 0.07       # fixed at format; an existing image's must match
//! log_placement = "spread"   # bast/fast: same | spread
//!
//! [nbd]
//! export_name = "ftld"
//! max_connections = 64
//! reply_stall_timeout_s = 60 # a client that reads no reply this long is disconnected
//! tls = "require"            # off | on | require
//! tls_certificates = "pki"   # server-cert.pem, server-key.pem, ca-cert.pem
//! tls_verify_peer = true     # clients need a certificate signed by ca-cert.pem
//!
//! [faults]                   # random medium faults (`faults.rs`)
//! read = 1e-3                # program, erase, read: probabilities per operation
//!
//! [ublk]
//! id = 0                     # /dev/ublkb0; re-attached if left in recovery state
//! queues = 2                 # hardware queues [default: the CPU count]
//! queue_depth = 128
//! ```

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use ftl::FtlConfig;
use ftl_nbd::{ServerConfig, TlsMode, TlsPolicy};
use nand_model::{TimerMode, TimingMode};
use serde::Deserialize;

use crate::cli::{Frontend, ImageArgs, InterconnectKind, ServeArgs, DEFAULT_IMAGE};
pub use crate::faults::{FaultPlan, FaultsFileConfig};
pub use crate::nand_options::NandFileConfig;
use crate::units::{parse_listen, parse_size};
use crate::UsageError;

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub image: Option<PathBuf>,
    pub preset: Option<String>,
    pub capacity: Option<SizeValue>,
    pub preallocate: Option<bool>,
    pub timing: Option<TimingMode>,
    pub timer: Option<TimerMode>,
    pub idle_poll: Option<bool>,
    pub workers: Option<u16>,
    pub frontend: Option<Frontend>,
    pub nbd_socket: Option<PathBuf>,
    pub nbd_listen: Option<String>,
    pub read_only: Option<bool>,
    pub control_socket: Option<PathBuf>,
    pub record: Option<PathBuf>,
    pub nand: Option<NandFileConfig>,
    pub ftl: Option<FtlConfig>,
    pub nbd: Option<NbdFileConfig>,
    pub ublk: Option<UblkFileConfig>,
    pub faults: Option<FaultsFileConfig>,
    /// `[ftl] scheme` was written (`FtlConfig` fills absent keys with defaults, and only an
    /// explicit scheme may contradict an existing image).
    #[serde(skip)]
    pub ftl_scheme_set: bool,
    /// `[ftl] queues` was written (`ftld replay` in virtual time has its own default).
    #[serde(skip)]
    pub ftl_queues_set: bool,
    /// `[ftl] overprovision` and `[ftl] log_blocks` were written: format-time settings, which
    /// an existing image's must then match.
    #[serde(skip)]
    pub ftl_overprovision_set: bool,
    #[serde(skip)]
    pub ftl_log_blocks_set: bool,
    /// Every key written in the `[ftl]` table (a setting the image's scheme ignores is named).
    #[serde(skip)]
    pub ftl_keys: Vec<String>,
    /// The file this was read from (for messages).
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

/// Longest configuration file read (a `--config /dev/zero` would otherwise grow forever).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The `[ublk]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UblkFileConfig {
    pub id: Option<u32>,
    pub queues: Option<u16>,
    pub queue_depth: Option<u16>,
}

/// The `[nbd]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NbdFileConfig {
    pub export_name: Option<String>,
    pub description: Option<String>,
    pub max_connections: Option<usize>,
    /// Seconds a reply may wait for the client to read it before the connection is closed.
    pub reply_stall_timeout_s: Option<f64>,
    pub tls: Option<String>,
    pub tls_certificates: Option<PathBuf>,
    pub tls_verify_peer: Option<bool>,
}

/// A size written as a number of bytes or as a string like `"1G"`.
#[derive(Debug, Clone)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

/// By hand rather than `#[serde(untagged)]`, whose error for anything else ("did not match any
/// variant of untagged enum") names neither the value nor what a size is.
impl<'de> Deserialize<'de> for SizeValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SizeValue, D::Error> {
        struct Size;
        impl serde::de::Visitor<'_> for Size {
            type Value = SizeValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size: a whole number of bytes or a string like \"1G\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeValue, E> {
                Ok(SizeValue::Bytes(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeValue, E> {
                u64::try_from(v)
                    .map(SizeValue::Bytes)
                    .map_err(|_| E::custom(format!("{v} is negative; a size is 0 or more bytes")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<SizeValue, E> {
                Err(E::custom(format!(
                    "{v} is read as a fraction (TOML makes a number with a point or an \
                     exponent a float): a size is a whole number of bytes, written without \
                     them, or a string like \"512M\""
                )))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SizeValue, E> {
                Ok(SizeValue::Text(v.to_owned()))
            }
        }
        d.deserialize_any(Size)
    }
}

impl FileConfig {
    /// Reads and parses `path`; relative paths inside are resolved against its directory.
    pub fn load(path: &Path) -> anyhow::Result<FileConfig> {
        let text = read_bounded(path)?;
        let mut cfg: FileConfig = toml::from_str(&text)
            .map_err(|e| UsageError(format!("config file {}: {e}", path.display())))?;
        let table = toml::from_str::<toml::Table>(&text).ok();
        let ftl_key = |key: &str| {
            table
                .as_ref()
                .and_then(|t| t.get("ftl")?.get(key))
                .is_some()
        };
        cfg.ftl_scheme_set = ftl_key("scheme");
        cfg.ftl_queues_set = ftl_key("queues");
        cfg.ftl_overprovision_set = ftl_key("overprovision");
        cfg.ftl_log_blocks_set = ftl_key("log_blocks");
        cfg.ftl_keys = table
            .as_ref()
            .and_then(|t| {
                t.get("ftl")?
                    .as_table()
                    .map(|f| f.keys().cloned().collect())
            })
            .unwrap_or_default();
        cfg.path = Some(path.to_path_buf());
        let base = path.parent().unwrap_or(Path::new("."));
        let certs = cfg.nbd.as_mut().and_then(|n| n.tls_certificates.as_mut());
        for p in [
            cfg.image.as_mut(),
            cfg.nbd_socket.as_mut(),
            cfg.control_socket.as_mut(),
            cfg.record.as_mut(),
            certs,
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(cfg)
    }

    /// "config file PATH", to start a message about a value read from it.
    pub fn origin(&self) -> String {
        match &self.path {
            Some(p) => format!("config file {}", p.display()),
            None => "config file".into(),
        }
    }

    /// Loads `path` if given, else an empty configuration.
    pub fn load_opt(path: Option<&Path>) -> anyhow::Result<FileConfig> {
        path.map_or_else(|| Ok(FileConfig::default()), FileConfig::load)
    }
}

/// The text of the configuration file at `path`, refused past [`MAX_CONFIG_BYTES`] (a pipe or
/// `<(...)` works; a device that never ends does not hang the start).
fn read_bounded(path: &Path) -> anyhow::Result<String> {
    use std::io::Read;
    let what = || format!("reading config file {}", path.display());
    let mut bytes = Vec::new();
    fs::File::open(path)
        .with_context(what)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(what)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(UsageError(format!(
            "config file {} is longer than {} KiB: not a configuration file",
            path.display(),
            MAX_CONFIG_BYTES >> 10
        ))
        .into());
    }
    String::from_utf8(bytes).map_err(|e| {
        UsageError(format!(
            "config file {}: not UTF-8 text (byte {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
        .into()
    })
}

/// What an image command (serve or format) needs to find or create the image.
#[derive(Debug, Clone)]
pub struct ImageSettings {
    pub path: PathBuf,
    /// Preset named explicitly (flag or file); `None` means the default for a new image and
    /// "whatever it has" for an existing one.
    pub preset: Option<String>,
    /// Exported size asked for explicitly.
    pub capacity: Option<u64>,
    /// FTL scheme asked for explicitly (flag or `[ftl] scheme`); `ftl.scheme` holds it or the
    /// default.
    pub scheme: Option<ftl::SchemeKind>,
    /// Interconnect asked for explicitly (flags or `[nand]`); `controllers` is `None` for
    /// "the preset's channel count".
    pub interconnect: Option<(InterconnectKind, Option<u32>)>,
    /// The `[nand]` table's device settings (cell, latencies, read-retry, planes, suspend),
    /// applied over the preset of a new image and checked against an existing one.
    pub nand: NandFileConfig,
    pub ftl: FtlConfig,
    /// `[ftl] overprovision` and `[ftl] log_blocks` written explicitly (format-time settings:
    /// an existing image's must match).
    pub overprovision: Option<f64>,
    pub log_blocks: Option<u32>,
    /// The `[ftl]` keys written in the config file, and the flags that set `[ftl]` settings
    /// (as `--gc-policy`), for naming those the image's scheme ignores
    /// (`SchemeKind::uses_setting`).
    pub ftl_keys: Vec<String>,
    /// Allocate the whole image file once it is open ([`nand_model::NandDevice::preallocate`]).
    pub preallocate: bool,
    /// The `[faults]` table's random medium faults, armed when the image is opened or created.
    pub faults: Option<FaultPlan>,
}

/// Everything `ftld serve` runs with, after merging.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub image: ImageSettings,
    pub timing: TimingMode,
    /// How timing-real waits pass the time (not stored in the image).
    pub timer: TimerMode,
    /// Keep idle CPUs polling while timing-real waits sleep ([`nand_model::IdlePollHold`]).
    pub idle_poll: bool,
    /// Threads of the async runtime ([`default_workers`] unless set).
    pub workers: usize,
    pub frontend: Frontend,
    pub nbd_socket: Option<PathBuf>,
    pub nbd_listen: Option<SocketAddr>,
    pub read_only: bool,
    pub control_socket: PathBuf,
    /// Record every host request here (`--record`), as a blkparse trace.
    pub record: Option<PathBuf>,
    pub nbd: ServerConfig,
    /// TLS for every NBD socket (certificates already loaded).
    pub tls: TlsPolicy,
    pub ublk: UblkSettings,
}

/// The ublk frontend's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UblkSettings {
    /// `/dev/ublkb<id>`; `None`: the next free id.
    pub id: Option<u32>,
    /// Re-attach this device (explicit `--recover`).
    pub recover: Option<u32>,
    /// Hardware queues.
    pub queues: u16,
    /// Tags per queue.
    pub depth: u16,
}

/// Tags per ublk queue unless told otherwise.
pub const DEFAULT_QUEUE_DEPTH: u16 = 128;

/// The async runtime's threads unless set: the CPUs this process may run on minus one, at
/// least 1. The FTL's writer and GC threads, and on most setups the client itself (fio, a
/// filesystem, a VM), need CPUs too; runtime workers beyond what is left only hand tasks to
/// each other (cross-thread wake-ups, work stealing). Measured on the 2-vCPU guest with fio
/// beside the daemon (benches/README.md, issue 13), 1 worker against 2 (tokio's default),
/// alternated: lftl-card timing real 4 KiB random reads QD4 63.9 / 63.8 k against 57.3 /
/// 56.7 k, QD16 155 / 144 k against 121 / 105 k, 4 x QD32 171-183 k against 152-172 k (server
/// CPU 4.0-4.3 against 5.6-6.4 us per request); timing off 4 KiB random writes QD32 171-178 k
/// against 114-140 k; 128 KiB writes within the noise (49.8-62.8 against 52.4-55.2 us of CPU
/// per request, two sets that disagreed).
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .max(1)
}

/// The preset a new image would get from these options.
fn image_preset<'a>(args: &'a ImageArgs, file: &'a FileConfig) -> &'a str {
    args.preset
        .as_deref()
        .or(file.preset.as_deref())
        .unwrap_or(crate::image::DEFAULT_PRESET)
}

/// Merges image options: flags over file over defaults.
pub fn resolve_image(args: &ImageArgs, file: &FileConfig) -> anyhow::Result<ImageSettings> {
    let path = args
        .image
        .clone()
        .or_else(|| file.image.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_IMAGE));
    let capacity = match (args.capacity, &file.capacity) {
        (Some(c), _) => Some(c),
        (None, Some(SizeValue::Bytes(b))) => Some(*b),
        (None, Some(SizeValue::Text(t))) => Some(
            parse_size(t).map_err(|e| UsageError(format!("{}: capacity: {e}", file.origin())))?,
        ),
        (None, None) => None,
    };
    if capacity == Some(0) {
        return Err(UsageError("capacity must be more than 0 bytes".into()).into());
    }
    if let Some(c) = capacity.filter(|c| c.checked_next_multiple_of(4096).is_none()) {
        return Err(UsageError(format!(
            "capacity {c} bytes does not fit 64 bits once rounded up to whole 4 KiB pages"
        ))
        .into());
    }
    let mut ftl = file.ftl.clone().unwrap_or_default();
    let file_scheme = file
        .ftl
        .as_ref()
        .filter(|_| file.ftl_scheme_set)
        .map(|f| f.scheme);
    let scheme = args.ftl.or(file_scheme);
    if let Some(s) = scheme {
        ftl.scheme = s;
    }
    if let Some(q) = args.queues {
        ftl.queues = q.into();
    }
    if ftl.queues == 0 || ftl.queues > 64 {
        let key = match args.queues {
            Some(_) => "--queues".to_string(),
            None => format!("{}: [ftl] queues", file.origin()),
        };
        return Err(UsageError(format!("{key} must be from 1 to 64, not {}", ftl.queues)).into());
    }
    // A format-time value out of range read as "the device is too small" further on.
    if !(0.0..0.9).contains(&ftl.overprovision) {
        return Err(UsageError(format!(
            "{}: [ftl] overprovision must be at least 0 and below 0.9, not {}",
            file.origin(),
            ftl.overprovision
        ))
        .into());
    }
    // The running tunables only the file sets, checked here so the message names it.
    ftl::check_running_policy(&ftl).map_err(|e| {
        let e = match e {
            ftl::FtlError::Config(why) => why,
            e => e.to_string(),
        };
        UsageError(format!("{}: [ftl] {e}", file.origin()))
    })?;
    let nand = file.nand.as_ref();
    let kind = args
        .interconnect
        .or_else(|| nand.and_then(|n| n.interconnect));
    let controllers = args
        .controllers
        .or_else(|| nand.and_then(|n| n.controllers));
    let interconnect = match (kind, controllers) {
        (None, None) => None,
        (Some(InterconnectKind::Tmcd), Some(_)) | (None, Some(_)) => {
            return Err(UsageError(
                "controllers is a pmcd setting: add --interconnect pmcd (or [nand] \
                 interconnect = \"pmcd\"), or drop it (tmcd has a controller per channel)"
                    .into(),
            )
            .into())
        }
        (Some(k), c) => {
            if let Some(c) = c.filter(|c| !(1..=nand_model::MAX_CONTROLLERS).contains(c)) {
                return Err(UsageError(format!(
                    "controllers must be from 1 to {}, not {c}",
                    nand_model::MAX_CONTROLLERS
                ))
                .into());
            }
            Some((k, c))
        }
    };
    let faults = match &file.faults {
        Some(f) => f.resolve(&file.origin())?,
        None => None,
    };
    let nand = nand.cloned().unwrap_or_default();
    // Checked against a neutral device now, so a bad table fails before anything is opened;
    // against the real preset or image when it is used.
    if nand.sets_device() {
        let mut probe = crate::presets::find(image_preset(args, file))?.config;
        nand.apply(&mut probe).map_err(UsageError)?;
    }
    Ok(ImageSettings {
        path,
        preset: args.preset.clone().or_else(|| file.preset.clone()),
        capacity,
        scheme,
        interconnect,
        nand,
        overprovision: file
            .ftl
            .as_ref()
            .filter(|_| file.ftl_overprovision_set)
            .map(|f| f.overprovision),
        log_blocks: file
            .ftl
            .as_ref()
            .filter(|_| file.ftl_log_blocks_set)
            .map(|f| f.log_blocks),
        ftl_keys: file.ftl_keys.clone(),
        ftl,
        preallocate: args.preallocate || file.preallocate.unwrap_or(false),
        faults,
    })
}

/// Merges `serve` options: flags over file over defaults.
pub fn resolve_serve(args: &ServeArgs) -> anyhow::Result<ServeSettings> {
    let file = FileConfig::load_opt(args.image.config.as_deref())?;
    let mut image = resolve_image(&args.image, &file)?;
    if let Some(p) = args.gc_policy {
        image.ftl.gc_policy = p;
        image.ftl_keys.push("--gc-policy".into());
    }
    if let Some(p) = args.log_placement {
        image.ftl.log_placement = p;
        image.ftl_keys.push("--log-placement".into());
    }
    let nbd_listen = match (args.nbd_listen, &file.nbd_listen) {
        (Some(a), _) => Some(a),
        (None, Some(s)) => {
            Some(parse_listen(s).map_err(|e| UsageError(format!("config file: nbd_listen: {e}")))?)
        }
        (None, None) => None,
    };
    let nbd_socket = args.nbd_socket.clone().or_else(|| file.nbd_socket.clone());
    // A unix socket is served unless only TCP was asked for.
    let nbd_socket = match (nbd_socket, nbd_listen) {
        (Some(p), _) => Some(p),
        (None, None) => Some(sibling(&image.path, "sock")),
        (None, Some(_)) => None,
    };
    let control_socket = args
        .control_socket
        .clone()
        .or_else(|| file.control_socket.clone())
        .unwrap_or_else(|| sibling(&image.path, "ctl"));
    let mut nbd = ServerConfig::default();
    if let Some(n) = &file.nbd {
        if let Some(name) = &n.export_name {
            nbd.export_name.clone_from(name);
        }
        if let Some(d) = &n.description {
            nbd.description.clone_from(d);
        }
        if let Some(m) = n.max_connections {
            nbd.max_connections = m;
        }
        if let Some(t) = n.reply_stall_timeout_s {
            if !(1.0..=86_400.0).contains(&t) {
                return Err(UsageError(format!(
                    "{}: [nbd] reply_stall_timeout_s must be from 1 to 86400, not {t}",
                    file.origin()
                ))
                .into());
            }
            nbd.reply_stall_timeout = std::time::Duration::from_secs_f64(t);
        }
    }
    nbd.validate()
        .map_err(|e| UsageError(format!("{}: [nbd] {e}", file.origin())))?;
    let tls = resolve_tls(args, file.nbd.as_ref(), &file.origin())?;
    let uf = file.ublk.as_ref();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ublk = UblkSettings {
        id: args.ublk_id.or(uf.and_then(|u| u.id)),
        recover: args.recover,
        queues: args
            .image
            .queues
            .or(uf.and_then(|u| u.queues))
            .unwrap_or(u16::try_from(cpus.min(64)).unwrap_or(1)),
        depth: args
            .queue_depth
            .or(uf.and_then(|u| u.queue_depth))
            .unwrap_or(DEFAULT_QUEUE_DEPTH),
    };
    if !(1..=64).contains(&ublk.queues) || !(1..=4096).contains(&ublk.depth) {
        return Err(UsageError(format!(
            "ublk queues must be from 1 to 64 and queue depth from 1 to 4096, not {} and {} \
             (--queues and --queue-depth, or [ublk] queues and queue_depth in the {})",
            ublk.queues,
            ublk.depth,
            file.origin()
        ))
        .into());
    }
    let workers = match args.workers.or(file.workers) {
        Some(n @ (0 | 1025..)) => {
            let key = match args.workers {
                Some(_) => "--workers".to_string(),
                None => format!("{}: workers", file.origin()),
            };
            return Err(UsageError(format!("{key} must be from 1 to 1024, not {n}")).into());
        }
        Some(n) => usize::from(n),
        None => default_workers(),
    };
    // Virtual time is a simulated clock that a replay drives request by request; a served
    // device has no one to drive it (its waits and GC would run on a clock nothing advances
    // in step with the host), so it is refused rather than served with meaningless timing.
    let timing = args.timing.or(file.timing).unwrap_or(TimingMode::Real);
    if timing == TimingMode::Virtual {
        let key = match args.timing {
            Some(_) => "--timing virtual".to_string(),
            None => format!("{}: timing = \"virtual\"", file.origin()),
        };
        return Err(UsageError(format!(
            "{key}: virtual time is for `ftld replay` (a simulated clock the replay drives); a \
             served device runs with timing real or off"
        ))
        .into());
    }
    Ok(ServeSettings {
        image,
        workers,
        timing,
        timer: args.timer.or(file.timer).unwrap_or_default(),
        idle_poll: args.idle_poll.or(file.idle_poll).unwrap_or(true),
        frontend: args.frontend.or(file.frontend).unwrap_or_default(),
        nbd_socket,
        nbd_listen,
        read_only: args.read_only || file.read_only.unwrap_or(false),
        control_socket,
        record: args.record.clone().or_else(|| file.record.clone()),
        nbd,
        tls,
        ublk,
    })
}

/// The TLS mode and certificates: flags over `[nbd]` over off. The certificates are read here,
/// so a missing or unusable file is reported before the image is opened.
fn resolve_tls(
    args: &ServeArgs,
    file: Option<&NbdFileConfig>,
    origin: &str,
) -> anyhow::Result<TlsPolicy> {
    let mode = match (args.tls, file.and_then(|f| f.tls.as_deref())) {
        (Some(m), _) => m,
        (None, Some(m)) => m
            .parse::<TlsMode>()
            .map_err(|e| UsageError(format!("{origin}: [nbd] tls: {e}")))?,
        (None, None) => TlsMode::Off,
    };
    let dir = args
        .tls_certificates
        .clone()
        .or_else(|| file.and_then(|f| f.tls_certificates.clone()));
    let verify_peer = args.tls_verify_peer || file.and_then(|f| f.tls_verify_peer).unwrap_or(false);
    if mode == TlsMode::Off && (dir.is_some() || verify_peer) {
        return Err(UsageError(
            "--tls-certificates and --tls-verify-peer need --tls on or --tls require (or [nbd] \
             tls)"
                .into(),
        )
        .into());
    }
    if mode != TlsMode::Off && dir.is_none() {
        return Err(UsageError(format!(
            "--tls {} needs --tls-certificates DIR (server-cert.pem, server-key.pem{})",
            mode.name(),
            if verify_peer { ", ca-cert.pem" } else { "" }
        ))
        .into());
    }
    TlsPolicy::new(mode, dir.as_deref(), verify_peer)
        .map_err(|e| UsageError(format!("TLS certificates: {e}")).into())
}

/// `image` with its extension replaced by `ext` (`disk.img` -> `disk.sock`); if that would be
/// the image itself, `ext` is appended instead.
pub fn sibling(image: &Path, ext: &str) -> PathBuf {
    let p = image.with_extension(ext);
    if p == image {
        let mut s = image.as_os_str().to_owned();
        s.push(".");
        s.push(ext);
        PathBuf::from(s)
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftl::GcPolicy;

    fn parse(text: &str) -> Result<FileConfig, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn file_parses_and_rejects_unknown_keys() {
        let c = parse(
            "image = \"a.img\"\ncapacity = \"1G\"\ntiming = \"off\"\n[ftl]\nqueues = 3\ngc_policy = \"in-path\"\n[nbd]\nexport_name = \"x\"\n",
        )
        .expect("parses");
        assert_eq!(c.timing, Some(TimingMode::Off));
        assert_eq!(c.timer, None);
        assert_eq!(
            parse("timer = \"spin\"").expect("parses").timer,
            Some(TimerMode::Spin)
        );
        assert!(parse("timer = \"busy\"").is_err());
        assert_eq!(c.idle_poll, None);
        assert_eq!(
            parse("idle_poll = false").expect("parses").idle_poll,
            Some(false)
        );
        assert!(parse("idle_poll = \"no\"").is_err());
        let ftl = c.ftl.expect("ftl table");
        assert_eq!(ftl.queues, 3);
        assert_eq!(ftl.gc_policy, GcPolicy::InPath);
        assert!(parse("imagee = \"a\"").is_err());
        assert!(parse("[ftl]\nqueuez = 1").is_err());
        assert!(parse("[nbd]\nport = 1").is_err());
        assert!(parse("[ublk]\nqueue = 1").is_err());
        let u = parse("[ublk]\nid = 2\nqueues = 3\nqueue_depth = 64\n")
            .expect("parses")
            .ublk
            .expect("ublk table");
        assert_eq!(
            (u.id, u.queues, u.queue_depth),
            (Some(2), Some(3), Some(64))
        );
        assert!(matches!(
            parse("capacity = 4096").expect("parses").capacity,
            Some(SizeValue::Bytes(4096))
        ));
        assert!(matches!(
            parse("capacity = \"1G\"").expect("parses").capacity,
            Some(SizeValue::Text(t)) if t == "1G"
        ));
        // A value that is no size says so and shows it (not serde's "untagged enum").
        for (toml, says) in [
            ("capacity = -64", "-64 is negative"),
            ("capacity = 1.5", "1.5 is read as a fraction"),
            ("capacity = 1e9", "a size is a whole number of bytes"),
            ("capacity = true", "a size: a whole number of bytes"),
        ] {
            let e = format!("{:#}", parse(toml).expect_err(toml));
            assert!(e.contains(says) && !e.contains("untagged"), "{toml}: {e}");
        }
    }

    #[test]
    fn a_bad_nand_table_is_refused_before_anything_opens() {
        let args = ImageArgs::default();
        let ok = parse("[nand]\nsuspend = true\nt_resume_us = 12.5\n").expect("parses");
        let s = resolve_image(&args, &ok).expect("resolves");
        assert_eq!(s.nand.t_resume_us, Some(12.5));
        let bad = parse("[nand]\nt_suspend_us = 5\n").expect("parses");
        let e = resolve_image(&args, &bad).expect_err("refused").to_string();
        assert!(e.contains("[nand]"), "{e}");
        assert!(parse("[nand]\nsuspends = true\n").is_err());
    }

    #[test]
    fn nand_table_sets_the_interconnect_and_flags_override_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        fs::write(&path, "[nand]\ninterconnect = \"pmcd\"\ncontrollers = 2\n").expect("write");
        let file = FileConfig::load(&path).expect("loads");
        let s = resolve_image(&ImageArgs::default(), &file).expect("resolves");
        assert_eq!(s.interconnect, Some((InterconnectKind::Pmcd, Some(2))));
        let args = ImageArgs {
            controllers: Some(6),
            ..Default::default()
        };
        let s = resolve_image(&args, &file).expect("resolves");
        assert_eq!(s.interconnect, Some((InterconnectKind::Pmcd, Some(6))));
        let args = ImageArgs {
            interconnect: Some(InterconnectKind::Tmcd),
            ..Default::default()
        };
        // tmcd from the flag with controllers from the file: contradictory.
        assert!(resolve_image(&args, &file).is_err());
        assert!(parse("[nand]\ninterconnect = \"xbar\"").is_err());
        assert!(parse("[nand]\nchannels = 2").is_err());
        let zero = parse("[nand]\ninterconnect = \"pmcd\"\ncontrollers = 0").expect("parses");
        assert!(resolve_image(&ImageArgs::default(), &zero).is_err());
    }

    #[test]
    fn systemd_example_config_parses() {
        let c = parse(include_str!("../../systemd/example.toml")).expect("example.toml parses");
        assert_eq!(c.frontend, Some(Frontend::Auto));
        assert_eq!(c.ublk.expect("[ublk]").id, Some(0));
        assert!(c.image.expect("image").starts_with("/var/lib/ftld"));
    }

    #[test]
    fn flags_override_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        fs::write(
            &path,
            "image = \"d.img\"\ntiming = \"off\"\ncapacity = \"128M\"\nread_only = true\n[ftl]\nqueues = 3\n",
        )
        .expect("write");
        let args = ServeArgs {
            image: ImageArgs {
                config: Some(path),
                capacity: Some(64 << 20),
                ..Default::default()
            },
            ..Default::default()
        };
        let s = resolve_serve(&args).expect("resolves");
        assert_eq!(s.image.path, dir.path().join("d.img"));
        assert_eq!(s.image.capacity, Some(64 << 20));
        assert_eq!(s.image.ftl.queues, 3);
        assert_eq!(s.timing, TimingMode::Off);
        assert!(s.read_only);
        assert_eq!(s.nbd_socket, Some(dir.path().join("d.sock")));
        assert_eq!(s.control_socket, dir.path().join("d.ctl"));
    }

    /// Values refused name where they came from: the file (and the key) or the flag; a file
    /// that never ends is refused instead of read forever.
    #[test]
    fn refusals_name_the_file_and_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        let image = ImageArgs {
            config: Some(path.clone()),
            ..Default::default()
        };
        let file = |text: &str| {
            fs::write(&path, text).expect("write");
            FileConfig::load(&path).expect("parses")
        };
        let shown = path.display().to_string();
        for (text, key) in [
            ("[ftl]\noverprovision = 1.0\n", "[ftl] overprovision"),
            ("[ftl]\noverprovision = nan\n", "[ftl] overprovision"),
            ("[ftl]\nqueues = 0\n", "[ftl] queues"),
            ("[ftl]\ngc_threads = 100000\n", "[ftl] gc_threads"),
            ("[ftl]\nmax_pending_pages = 0\n", "[ftl] max_pending_pages"),
        ] {
            let err = resolve_image(&image, &file(text))
                .expect_err(text)
                .to_string();
            assert!(err.contains(&shown) && err.contains(key), "{text}: {err}");
        }
        let flag = ImageArgs {
            queues: Some(0),
            ..image.clone()
        };
        let err = resolve_image(&flag, &file("")).expect_err("--queues 0");
        assert!(err.to_string().contains("--queues"), "{err}");
        for (text, key) in [
            ("workers = 0\n", "workers"),
            ("[nbd]\ntls = \"maybe\"\n", "[nbd] tls"),
        ] {
            fs::write(&path, text).expect("write");
            let args = ServeArgs {
                image: image.clone(),
                ..Default::default()
            };
            let err = resolve_serve(&args).expect_err(text).to_string();
            assert!(err.contains(&shown) && err.contains(key), "{text}: {err}");
        }
        let huge = ImageArgs {
            capacity: Some(u64::MAX - 5),
            ..image.clone()
        };
        let err = resolve_image(&huge, &file("")).expect_err("2^64 - 6 bytes");
        assert!(err.to_string().contains("64 bits"), "{err}");
        let err = FileConfig::load(Path::new("/dev/zero")).expect_err("endless");
        assert!(err.to_string().contains("longer than"), "{err}");
    }

    /// `workers` from the file, the flag over it, and 0 refused with the key's name.
    #[test]
    fn workers_come_from_the_file_or_the_flag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        fs::write(&path, "workers = 3\n").expect("write");
        let image = ImageArgs {
            config: Some(path.clone()),
            ..Default::default()
        };
        let from_file = ServeArgs {
            image: image.clone(),
            ..Default::default()
        };
        assert_eq!(resolve_serve(&from_file).expect("resolves").workers, 3);
        let flag = ServeArgs {
            image: image.clone(),
            workers: Some(5),
            ..Default::default()
        };
        assert_eq!(resolve_serve(&flag).expect("resolves").workers, 5);
        fs::write(&path, "workers = 0\n").expect("write");
        let err = resolve_serve(&from_file).expect_err("0 workers");
        assert!(err.to_string().contains("workers"), "{err}");
        fs::write(&path, "workers = \"two\"\n").expect("write");
        assert!(resolve_serve(&from_file).is_err());
        // Virtual time is a replay's: refused for a served device, from the flag or the file.
        let e = resolve_serve(&ServeArgs {
            timing: Some(TimingMode::Virtual),
            ..Default::default()
        })
        .expect_err("virtual from the flag")
        .to_string();
        assert!(
            e.contains("--timing virtual") && e.contains("ftld replay"),
            "{e}"
        );
        fs::write(&path, "timing = \"virtual\"\n").expect("write");
        let e = resolve_serve(&from_file)
            .expect_err("virtual from the file")
            .to_string();
        assert!(e.contains("c.toml: timing = \"virtual\""), "{e}");
    }

    #[test]
    fn defaults() {
        let s = resolve_serve(&ServeArgs::default()).expect("resolves");
        assert_eq!(s.image.path, PathBuf::from("ftld-data/ftld.img"));
        assert_eq!(s.nbd_socket, Some(PathBuf::from("ftld-data/ftld.sock")));
        assert_eq!(s.control_socket, PathBuf::from("ftld-data/ftld.ctl"));
        assert_eq!(s.timing, TimingMode::Real);
        assert_eq!(s.frontend, Frontend::Auto);
        assert_eq!(s.ublk.depth, DEFAULT_QUEUE_DEPTH);
        assert_eq!((s.ublk.id, s.ublk.recover), (None, None));
        assert!(s.ublk.queues >= 1);
        assert_eq!(s.workers, default_workers());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(default_workers(), (cpus - 1).max(1));
        let tcp = resolve_serve(&ServeArgs {
            nbd_listen: Some("127.0.0.1:1".parse().expect("addr")),
            ..Default::default()
        })
        .expect("resolves");
        assert_eq!(tcp.nbd_socket, None);
    }

    #[test]
    fn sibling_never_returns_the_image() {
        assert_eq!(
            sibling(Path::new("a/x.img"), "ctl"),
            PathBuf::from("a/x.ctl")
        );
        assert_eq!(sibling(Path::new("a/x"), "ctl"), PathBuf::from("a/x.ctl"));
        assert_eq!(
            sibling(Path::new("a/x.ctl"), "ctl"),
            PathBuf::from("a/x.ctl.ctl")
        );
    }
}
