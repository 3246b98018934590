//! `ftld serve`: open (or create) the image, export it over NBD or ublk (`crate::ublk`), answer
//! the control socket, and shut down cleanly on SIGINT/SIGTERM.
//!
//! ```text
//! main thread:  resolve settings ─► install signal handlers ─► open/create image (FTL threads)
//!               ─► runtime.block_on(serve_all) ─► Ftl::close (flush + checkpoint) ─► exit 0
//! serve_all:    NBD unix socket ┐
//!               NBD TCP socket  ├─ share one shutdown signal (first SIGINT/SIGTERM, or a
//!               control socket  ┘  listener failing); a second signal exits at once, unflushed
//! ```
//! # Shutdown contract
//! On the first signal the NBD server stops accepting, lets every request it has received
//! finish and answer, and closes its connections; then the FTL is closed (every acknowledged
//! write programmed, a checkpoint written, image unlocked) and the socket files are removed.
//! Only then does the process exit with 0, so `ftld info` right after reports a clean shutdown.

use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ftl::Ftl;
use ftl_nbd::{NbdServer, TlsMode};
use nand_model::{IdlePollHold, TimerMode, TimingMode};
use tokio::net::{TcpListener, UnixListener};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::backend::FtlBackend;
use crate::cli::{Frontend, ServeArgs};
use crate::config::{self, ServeSettings};
use crate::control::{self, ControlContext};
use crate::image;
use crate::notify;
use crate::units::format_size;
use crate::UsageError;

/// Where the kernel's ublk driver would be.
const UBLK_CONTROL: &str = ftl_ublk::CONTROL;

/// Runs `ftld serve` to completion.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let s = config::resolve_serve(args)?;
    let chosen = choose_frontend(&s)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(s.workers)
        .enable_all()
        .thread_name("ftld-rt")
        .build()
        .context("starting the tokio runtime")?;
    // Installed before the (possibly long) image open, so a signal during recovery is held
    // and handled as soon as serving starts instead of killing the process.
    let signals = rt.block_on(async { Signals::install() })?;
    // Before the image opens: the first asynchronous wait fixes how the timer is driven.
    rt.block_on(async { drive_nand_timer() });
    // Created before the (possibly long) open, so a bad path fails at once.
    let record = s
        .record
        .as_deref()
        .map(|p| open_record(p, &s))
        .transpose()?;
    // A socket another daemon holds fails the start before a new image is made. (An existing
    // image is opened first: a second daemon on it is refused naming the holder's pid.)
    if !s.image.path.exists() {
        socket_path_free(&s.control_socket, "control socket")?;
        if let (Chosen::Nbd, Some(p)) = (chosen, s.nbd_socket.as_ref()) {
            socket_path_free(p, "NBD socket")?;
        }
    }
    notify::status(&format!("opening {}", s.image.path.display()));
    let access = if s.read_only {
        ftl::Access::ReadOnly
    } else {
        ftl::Access::ReadWrite
    };
    let ftl = Arc::new(image::open_or_create(&s.image, s.timing, access)?);
    let recording = match record {
        Some((path, file)) => {
            file.set_len(0)
                .with_context(|| format!("emptying the --record file {}", path.display()))?;
            let log =
                ftl::RequestLog::start(file).context("starting the request recording thread")?;
            ftl.record_requests(&log)?;
            info!(path = %path.display(), "recording every request (blkparse text)");
            Some((path, log))
        }
        None => None,
    };
    ftl.nand().set_timer(s.timer);
    // Held until the FTL closes (the end of this function).
    let _idle_poll = hold_idle_poll(s.timing, s.timer, s.idle_poll);
    log_opened(&ftl, &s);
    let served = match chosen {
        Chosen::Nbd => rt.block_on(serve_all(Arc::clone(&ftl), &s, signals)),
        Chosen::Ublk(start) => crate::ublk::serve(&rt, Arc::clone(&ftl), &s, start, signals),
    };
    // A read-only device (opened so, or turned so by damage) writes nothing at close.
    let writes_at_close = ftl.read_only_reason().is_none();
    if writes_at_close {
        notify::status("closing the FTL: programming buffered writes, writing a checkpoint");
        info!("closing the FTL: programming buffered writes and writing a checkpoint");
    } else {
        notify::status("closing the FTL (read-only: nothing to write)");
        info!("closing the FTL (read-only: nothing to write)");
    }
    let t = Instant::now();
    let closed = ftl.close();
    rt.shutdown_timeout(Duration::from_secs(1));
    if let Some((path, log)) = recording {
        report_recording(&path, log.finish());
    }
    served?;
    closed.map_err(|e| image::describe(e, &s.image.path).context("closing the FTL"))?;
    let millis = t.elapsed().as_millis() as u64;
    match ftl.read_only_reason() {
        None => info!(
            millis,
            "clean shutdown: everything acknowledged is on flash"
        ),
        Some(_) if ftl.opened_read_only() => {
            info!(
                millis,
                "stopped; the image was opened read-only and is unchanged"
            )
        }
        Some(why) if ftl.read_only_since_open() => info!(
            millis,
            "stopped; the device was read-only since its open ({why}): nothing was written, \
             and the next open recovers as this one did"
        ),
        Some(why) => info!(
            millis,
            "stopped; the device turned read-only ({why}): no checkpoint was written, and the \
             next open rolls forward from the last one over what was written since"
        ),
    }
    Ok(())
}

/// Opens the `--record` file without truncating it yet (it is emptied only once the image is
/// open, so a start that fails, or a second daemon started with the same settings, leaves an
/// earlier recording alone), and locks it against a second recorder. Refuses the image itself
/// and the daemon's own socket paths, which it would truncate or occupy.
fn open_record(path: &Path, s: &ServeSettings) -> anyhow::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::MetadataExt;
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let sockets = [Some(&s.control_socket), s.nbd_socket.as_ref()];
    if sockets
        .into_iter()
        .flatten()
        .any(|sock| absolute(sock) == absolute(path))
    {
        bail!(
            "--record {}: that is one of this daemon's sockets",
            path.display()
        );
    }
    // Before opening: opening a FIFO for writing would wait for a reader.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        bail!("--record {}: not a regular file", path.display());
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("creating the --record file {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("the --record file {}", path.display()))?;
    // By device and inode: also a hard link or another name of the image.
    if let Ok(image) = std::fs::metadata(&s.image.path) {
        if (image.dev(), image.ino()) == (meta.dev(), meta.ino()) {
            bail!("--record {}: that is the image", path.display());
        }
    }
    // Another image (perhaps served by another daemon, whose mapping would fault once the file
    // is emptied): never overwritten by a recording.
    let mut prefix = [0u8; 8];
    let n = std::os::unix::fs::FileExt::read_at(&file, &mut prefix, 0).unwrap_or(0);
    if ftl::nand_model::is_image_prefix(&prefix[..n]) {
        bail!(
            "--record {}: that is an ftld NAND image, not a recording; give another file",
            path.display()
        );
    }
    // SAFETY: flock on a descriptor `file` keeps open for the call; no memory is passed. The
    // lock lasts as long as the descriptor (the recording). Exercised by
    // `a_served_device_records_what_it_receives_and_replay_reads_it_back`.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            bail!(
                "--record {}: another process is recording into it",
                path.display()
            );
        }
        return Err(e).with_context(|| format!("locking the --record file {}", path.display()));
    }
    Ok((path.to_path_buf(), file))
}

/// Says how a recording ended: how many requests, and what was lost (events dropped because
/// the writer fell behind, or a write error that stopped it).
fn report_recording(path: &Path, r: ftl::RecordSummary) {
    match r.error {
        Some(e) => warn!(
            path = %path.display(),
            requests = r.requests,
            error = %e,
            "the request recording stopped on a write error: the trace is incomplete"
        ),
        None if r.dropped > 0 => warn!(
            path = %path.display(),
            requests = r.requests,
            dropped_events = r.dropped,
            "the request recording fell behind: events were dropped, the trace is incomplete"
        ),
        None => info!(path = %path.display(), requests = r.requests, "request recording complete"),
    }
}

/// The frontend that will serve, decided before the image is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Chosen {
    Nbd,
    Ublk(ftl_ublk::Start),
}

/// Picks the frontend (`auto`: ublk when the driver answers, else NBD) and says why; for
/// ublk also whether to add a device or re-attach one left in recovery state.
fn choose_frontend(s: &ServeSettings) -> anyhow::Result<Chosen> {
    let wants_ublk = s.ublk.recover.is_some() || s.ublk.id.is_some();
    match s.frontend {
        Frontend::Nbd => {
            if wants_ublk {
                return Err(UsageError(
                    "--recover/--ublk-id need the ublk frontend, not --frontend nbd".into(),
                )
                .into());
            }
            info!("frontend: NBD (asked for)");
            Ok(Chosen::Nbd)
        }
        Frontend::Ublk if s.tls.mode() != TlsMode::Off => Err(UsageError(
            "--tls applies to NBD; the ublk frontend is a local block device".into(),
        )
        .into()),
        Frontend::Auto if s.tls.mode() != TlsMode::Off && !wants_ublk => {
            info!("frontend: NBD (TLS asked for)");
            Ok(Chosen::Nbd)
        }
        Frontend::Ublk => match ftl_ublk::available() {
            Ok(_) => {
                info!("frontend: ublk (asked for)");
                Ok(Chosen::Ublk(ublk_start(s)))
            }
            // Asked for something this machine cannot do: a usage error, like a bad flag.
            Err(why) => Err(UsageError(format!(
                "--frontend ublk: {why}; use --frontend nbd (or auto)"
            ))
            .into()),
        },
        Frontend::Auto => match ftl_ublk::available() {
            Ok(_) => {
                info!("frontend: ublk ({UBLK_CONTROL} answers; --frontend nbd to use NBD)");
                Ok(Chosen::Ublk(ublk_start(s)))
            }
            Err(why) if wants_ublk => {
                Err(UsageError(format!("--recover/--ublk-id need ublk, but {why}")).into())
            }
            Err(why) => {
                info!("frontend: NBD ({why})");
                Ok(Chosen::Nbd)
            }
        },
    }
}

/// Add or recover: `--recover N`, or `--ublk-id N` naming a device in recovery state.
fn ublk_start(s: &ServeSettings) -> ftl_ublk::Start {
    use ftl_ublk::Start;
    if let Some(id) = s.ublk.recover {
        return Start::Recover(id);
    }
    match s.ublk.id {
        Some(id) => match ftl_ublk::device_state(id) {
            Some(state) if state.recoverable() => {
                info!(
                    id,
                    ?state,
                    "/dev/ublkb{id} waits for recovery: re-attaching to it"
                );
                Start::Recover(id)
            }
            _ => Start::Add(Some(id)),
        },
        None => Start::Add(None),
    }
}

fn log_opened(ftl: &Ftl, s: &ServeSettings) {
    let r = ftl.recovery();
    info!(
        image = %s.image.path.display(),
        capacity = %format_size(ftl.capacity()),
        queues = ftl.queues(),
        gc_policy = s.image.ftl.gc_policy.name(),
        timing = %s.timing,
        timer = %s.timer,
        workers = s.workers,
        recovery = %r.mode,
        pages_scanned = r.pages_scanned,
        "image open"
    );
}

/// SIGINT and SIGTERM.
pub(crate) struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// The name of the next signal received.
    pub(crate) async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }
}

/// Socket files this process created, removed when dropped.
#[derive(Default)]
pub(crate) struct SocketFiles(Vec<PathBuf>);

impl Drop for SocketFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            if let Err(e) = std::fs::remove_file(p) {
                warn!(path = %p.display(), error = %e, "cannot remove socket file");
            }
        }
    }
}

/// Refuses a unix socket path another process listens on, or a file of another kind there;
/// true if a stale socket file (nobody listening) is there, to be replaced. Checked before
/// the image is opened too, so a start that would fail on its socket makes no image.
pub(crate) fn socket_path_free(path: &Path, what: &str) -> anyhow::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!(
                    "{what} {} is in use by another process (another ftld?)",
                    path.display()
                );
            }
            Ok(true)
        }
        Ok(_) => bail!(
            "{what} {} exists and is not a socket; refusing to replace it",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("{what} {}", path.display())),
    }
}

/// Binds a unix socket at `path`, replacing a stale socket file (one nobody listens on) but
/// never a live socket or a file of another kind.
pub(crate) fn bind_unix(
    path: &Path,
    what: &str,
    files: &mut SocketFiles,
) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the directory of {what} {}", path.display()))?;
    }
    if socket_path_free(path, what)? {
        std::fs::remove_file(path)
            .with_context(|| format!("removing stale {what} {}", path.display()))?;
    }
    let l =
        UnixListener::bind(path).with_context(|| format!("binding {what} {}", path.display()))?;
    files.0.push(path.to_path_buf());
    Ok(l)
}

/// Serves NBD and the control socket until a signal (or a listener failure).
async fn serve_all(ftl: Arc<Ftl>, s: &ServeSettings, mut signals: Signals) -> anyhow::Result<()> {
    let backend = Arc::new(FtlBackend::new(Arc::clone(&ftl), s.read_only));
    let server = Arc::new(NbdServer::new(backend, s.nbd.clone()).with_tls(s.tls.clone()));
    let mut files = SocketFiles::default();
    let unix = match &s.nbd_socket {
        Some(p) => Some(bind_unix(p, "NBD socket", &mut files)?),
        None => None,
    };
    let tcp = match s.nbd_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("binding NBD TCP address {a}"))?,
        ),
        None => None,
    };
    let ctl = bind_unix(&s.control_socket, "control socket", &mut files)?;

    let (tx, rx) = watch::channel(false);
    let tx = Arc::new(tx);
    let down = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|d| *d).await;
    };
    let ctx = Arc::new(ControlContext {
        ftl: Arc::clone(&ftl),
        nbd: Arc::clone(&server),
        image: s.image.path.clone(),
        started: Instant::now(),
    });
    let control = tokio::spawn(control::serve(ctl, ctx, down(rx.clone())));
    let stop = Arc::clone(&tx);
    // A read-only device has nothing to flush or checkpoint.
    let then = match ftl.read_only_reason() {
        None => ", then flush and checkpoint",
        Some(_) => "",
    };
    let signal_task = tokio::spawn(async move {
        let name = signals.next().await;
        info!("{name}: stopping (in-flight requests finish{then})");
        notify::stopping(&format!("{name}: stopping{then}"));
        stop.send_replace(true);
        let name = signals.next().await;
        warn!("second {name}: exiting at once; writes not yet flushed are lost");
        std::process::exit(1);
    });
    // The address actually bound (port 0 picks a free port).
    let tcp_addr = tcp.as_ref().and_then(|l| l.local_addr().ok());
    // The FTL may have turned read-only itself (damage its recovery found; the log said why),
    // asked to open read-only or not.
    let damaged = ftl.fault_reason().is_some();
    print_connect_help(s, tcp_addr, ftl.capacity(), damaged);
    info!(read_only = s.read_only || damaged, "ready");
    // The listeners are bound: a client connecting now is accepted by the loops below.
    let mut served = Vec::new();
    if let Some(p) = &s.nbd_socket {
        served.push(format!("unix:{}", p.display()));
    }
    if let Some(a) = tcp_addr {
        served.push(format!("tcp:{a}"));
    }
    notify::ready(&format!(
        "serving {} ({}) over NBD on {}",
        s.image.path.display(),
        format_size(ftl.capacity()),
        served.join(", ")
    ));
    let _watchdog = notify::Watchdog::start();

    let unix_loop = async {
        let Some(l) = unix else { return Ok(()) };
        let r = server.serve_unix(l, down(rx.clone())).await;
        if r.is_err() {
            tx.send_replace(true);
        }
        r.context("NBD unix socket")
    };
    let tcp_loop = async {
        let Some(l) = tcp else { return Ok(()) };
        let r = server.serve_tcp(l, down(rx.clone())).await;
        if r.is_err() {
            tx.send_replace(true);
        }
        r.context("NBD TCP socket")
    };
    let (ru, rt) = tokio::join!(unix_loop, tcp_loop);
    tx.send_replace(true);
    if let Err(e) = control.await {
        warn!(error = %e, "control socket task failed");
    }
    signal_task.abort();
    drop(files);
    ru.and(rt)
}

/// Tells the user how to reach the export (stdout; the logs go to stderr).
fn print_connect_help(
    s: &ServeSettings,
    tcp: Option<std::net::SocketAddr>,
    capacity: u64,
    damaged: bool,
) {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let image = abs(&s.image.path);
    let mut out = String::new();
    out.push_str(&format!(
        "\nftld is serving {} ({}{}) over NBD.\n",
        image.display(),
        format_size(capacity),
        match (s.read_only, damaged) {
            (true, false) => ", read-only",
            (true, true) =>
                ", read-only; the FTL found the image damaged or worn out, the log says what",
            (false, true) =>
                ", read-only: the FTL found the image damaged or worn out, the log says what",
            (false, false) => "",
        }
    ));
    let mut uris = Vec::new();
    // With TLS the URIs say so and where the client's certificates are (libnbd's syntax; a
    // client without its own certificate can point at a directory holding just ca-cert.pem).
    const PKI: &str = "tls-certificates=CLIENT-PKI-DIR";
    let tls = s.tls.mode() != TlsMode::Off;
    if let Some(p) = &s.nbd_socket {
        let sock = abs(p);
        uris.push(match tls {
            false => format!("nbd+unix:///?socket={}", sock.display()),
            true => format!("nbds+unix:///?socket={}&{PKI}", sock.display()),
        });
    }
    if let Some(a) = tcp {
        uris.push(match tls {
            false => format!("nbd://{a}"),
            true => format!("nbds://{a}/?{PKI}"),
        });
    }
    if tls {
        out.push_str(&format!(
            "TLS: {}{}; clients verify the server against their ca-cert.pem.\n",
            if s.tls.mode() == TlsMode::Require {
                "required"
            } else {
                "offered"
            },
            if s.tls.verify_peer() {
                ", client certificates required"
            } else {
                ""
            }
        ));
    }
    let Some(uri) = uris.first() else { return };
    out.push_str("\nInspect it:\n");
    for u in &uris {
        out.push_str(&format!("    nbdinfo '{u}'\n"));
    }
    // A read-only export gets commands that only read.
    let read_only = s.read_only || damaged;
    match (s.tls.mode(), tcp) {
        (TlsMode::Off, _) if read_only => {
            out.push_str(&format!("    qemu-io -r -f raw '{uri}' -c 'read 0 1M'\n"))
        }
        (TlsMode::Off, _) => out.push_str(&format!(
            "    qemu-io -f raw '{uri}' -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M'\n"
        )),
        (_, Some(a)) => out.push_str(&format!(
            "    qemu-io --object tls-creds-x509,id=tls0,endpoint=client,dir=CLIENT-PKI-DIR \\\n\
             \x20       --image-opts driver=nbd,host={},port={},tls-creds=tls0 \\\n\
             \x20       -c 'read 0 1M'\n",
            a.ip(),
            a.port()
        )),
        (_, None) => {}
    }
    if read_only {
        out.push_str(&format!(
            "\nMount the filesystem on it read-only (as root; needs fuse3 and libnbd-bin):\n\
             \x20   mkdir -p /tmp/ftld-fuse /mnt/ftld\n\
             \x20   nbdfuse -r /tmp/ftld-fuse/disk '{uri}' &\n\
             \x20   until [ -e /tmp/ftld-fuse/disk ]; do sleep 0.1; done   # nbdfuse is up\n\
             \x20   dev=$(losetup -r -f --show /tmp/ftld-fuse/disk)\n\
             \x20   mount -o ro,noload \"$dev\" /mnt/ftld   # noload: ext4 replays no journal\n\
             \x20   ... and to undo: umount /mnt/ftld; losetup -d \"$dev\"; fusermount3 -u /tmp/ftld-fuse\n"
        ));
    } else {
        out.push_str(&format!(
            "\nPut a filesystem on it (as root; needs fuse3 and libnbd-bin):\n\
             \x20   mkdir -p /tmp/ftld-fuse /mnt/ftld\n\
             \x20   nbdfuse /tmp/ftld-fuse/disk '{uri}' &\n\
             \x20   until [ -e /tmp/ftld-fuse/disk ]; do sleep 0.1; done   # nbdfuse is up\n\
             \x20   dev=$(losetup -f --show /tmp/ftld-fuse/disk)\n\
             \x20   mkfs.ext4 \"$dev\" && mount \"$dev\" /mnt/ftld\n\
             \x20   ... and to undo: umount /mnt/ftld; losetup -d \"$dev\"; fusermount3 -u /tmp/ftld-fuse\n"
        ));
    }
    out.push_str(&format!(
        "\nStatistics: ftld stats --control-socket {}\n\
         Stop with Ctrl-C or SIGTERM (in-flight requests finish{}).\n\n",
        abs(&s.control_socket).display(),
        if read_only {
            ""
        } else {
            ", then flush and checkpoint"
        }
    ));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
}

/// With timing real and a timer that spins (hybrid or spin), and unless the user said no, asks
/// the kernel to keep idle CPUs polling (`nand_model::IdlePollHold`): a sleeping wait then
/// wakes without the halted CPU's wake-up path, so hybrid's learnt margin (its spin per wait)
/// is shorter and fewer completions land late (figures in `nand_model::IdlePollHold`'s
/// module). Only root may; otherwise the device is served without it, and the log says so.
pub(crate) fn hold_idle_poll(
    timing: TimingMode,
    timer: TimerMode,
    wanted: bool,
) -> Option<IdlePollHold> {
    if !wanted || timing != TimingMode::Real || timer == TimerMode::Sleep {
        return None;
    }
    match IdlePollHold::acquire() {
        Ok(h) => {
            info!(
                path = nand_model::CPU_DMA_LATENCY,
                "idle CPUs poll while serving (CPU wake-up latency 0 us: prompt wake-ups for timing real, at the cost of idle power; idle_poll = false turns it off)"
            );
            Some(h)
        }
        Err(e) => {
            warn!(
                path = nand_model::CPU_DMA_LATENCY,
                error = %e,
                "cannot keep idle CPUs polling (idle_poll = false silences this): completions may land later and hybrid waits spin longer"
            );
            None
        }
    }
}

/// Drives the NAND model's timer from this runtime (`nand_model::EventLoopTimer`): a
/// completion's deadline then wakes a worker parked in the runtime's event loop, which wakes
/// the waiting requests itself, instead of waking a timer thread that then wakes a worker.
/// 4 x QD32 4 KiB random reads through NBD, timing real: ~10 % more IOPS at ~15 % less server
/// CPU per request (benches/README.md, issue 13). The task runs as long as the runtime, which
/// outlives every request. If it cannot be installed, the timer keeps its own thread.
fn drive_nand_timer() {
    let timer = match nand_model::EventLoopTimer::new() {
        Ok(t) => t,
        Err(e) => {
            warn!(error = %e, "NAND timer: keeping its own thread");
            return;
        }
    };
    // SAFETY: the AsyncFd owns `timer`, whose descriptor stays open until it is dropped, and
    // `EventLoopTimer::as_raw_fd` always returns that same descriptor.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(timer, tokio::io::Interest::READABLE)
    };
    let fd = match registered {
        Ok(fd) => fd,
        Err(e) => {
            let (_, e) = e.into_parts();
            warn!(error = %e, "NAND timer: cannot watch its timerfd; keeping its own thread");
            return;
        }
    };
    if let Err(e) = fd.get_ref().install() {
        warn!(error = %e, "NAND timer: keeping its own thread");
        return;
    }
    tracing::debug!(
        arm_cost_us = fd.get_ref().arm_cost().as_secs_f64() * 1e6,
        poll_window_us = fd.get_ref().poll_window().as_secs_f64() * 1e6,
        "NAND timer: deadlines nearer than the poll window are polled for, not armed"
    );
    tokio::spawn(async move {
        loop {
            match fd.readable().await {
                Ok(mut ready) => {
                    // Clears only the readiness this wake-up saw (tokio keeps a newer one), so
                    // an expiry armed meanwhile is not lost; `fire_due_polling` reads the fd
                    // first.
                    ready.clear_ready();
                    // A deadline within the poll window: let the woken requests run, then
                    // look at the clock again instead of arming the fd (`fire_due_polling`).
                    let mut readable = true;
                    while fd.get_ref().fire_due_polling(readable) {
                        readable = false;
                        tokio::task::yield_now().await;
                    }
                }
                Err(e) => {
                    // Never seen; without this task no request that waits would finish, so
                    // failing loudly beats hanging every client.
                    tracing::error!(error = %e, "NAND timer: its timerfd failed");
                    std::process::abort();
                }
            }
        }
    });
}
