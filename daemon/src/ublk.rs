//! `ftld serve` through the ublk frontend: `/dev/ublkb<N>` instead of an NBD socket.
//!
//! ```text
//! main thread: bind control socket ─► spawn "ftld-ublk" thread ─► block_on(wait for a signal
//!              or the device thread ending) ─► tell the device thread to stop ─► join it
//! ftld-ublk:   ftl_ublk::serve: create (or recover) the device, queue threads, READY=1 once
//!              the block device is live, wait for stop ─► stop + delete the device
//! ```
//! The caller (`serve::run`) then closes the FTL (flush + checkpoint), exactly as after NBD.
//! A second signal exits at once; kill -9 leaves the device in recovery state, for
//! `ftld serve --recover N` (or `--ublk-id N`) to re-attach.

use std::io::Write;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context};
use ftl::Ftl;
use ftl_nbd::NbdServer;
use ftl_ublk::{Options, Ready, Start};
use tokio::runtime::Runtime;
use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

use crate::backend::FtlBackend;
use crate::config::ServeSettings;
use crate::control::{self, ControlContext};
use crate::notify;
use crate::serve::{bind_unix, Signals, SocketFiles};
use crate::units::format_size;

/// Serves until a signal (or the device going away), then returns with the FTL still open.
pub fn serve(
    rt: &Runtime,
    ftl: Arc<Ftl>,
    s: &ServeSettings,
    start: Start,
    mut signals: Signals,
) -> anyhow::Result<()> {
    let mut files = SocketFiles::default();
    let ctl = {
        let _guard = rt.enter();
        bind_unix(&s.control_socket, "control socket", &mut files)?
    };
    // Read-only also when the FTL opened so itself (damage its recovery found; the log said
    // why): the kernel then refuses writes up front.
    let read_only = s.read_only || ftl.read_only_reason().is_some();
    let opts = Options {
        start,
        queues: s.ublk.queues,
        depth: s.ublk.depth,
        read_only,
    };
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (done_tx, mut done_rx) = oneshot::channel::<()>();
    let image = s.image.path.clone();
    let capacity = ftl.capacity();
    let control_socket = s.control_socket.clone();
    let device_ftl = Arc::clone(&ftl);
    let device = std::thread::Builder::new()
        .name("ftld-ublk".into())
        .spawn(move || {
            let on_ready = move |r: &Ready| {
                announce(r, &image, capacity, read_only, &control_socket);
            };
            let r = ftl_ublk::serve(device_ftl, &opts, on_ready, stop_rx);
            let _ = done_tx.send(());
            r
        })
        .context("starting the ublk thread")?;

    // The control socket reports the FTL; the NBD section of `ftld stats` stays empty.
    let nbd = Arc::new(NbdServer::new(
        Arc::new(FtlBackend::new(Arc::clone(&ftl), s.read_only)),
        s.nbd.clone(),
    ));
    let ctx = Arc::new(ControlContext {
        ftl: Arc::clone(&ftl),
        nbd,
        image: s.image.path.clone(),
        started: Instant::now(),
    });
    let (down_tx, down_rx) = watch::channel(false);
    let watchdog = notify::Watchdog::start();
    rt.block_on(async {
        let mut rx = down_rx.clone();
        let control = tokio::spawn(control::serve(ctl, ctx, async move {
            let _ = rx.wait_for(|d| *d).await;
        }));
        tokio::select! {
            name = signals.next() => {
                // A read-only device has nothing to flush or checkpoint.
                let then = if read_only { "" } else { ", then flush and checkpoint" };
                info!("{name}: stopping the ublk device (the kernel flushes through us){then}");
                notify::stopping(&format!("{name}: stopping /dev/ublkb device{then}"));
            }
            _ = &mut done_rx => {
                notify::stopping("the ublk device went away");
            }
        }
        let _ = stop_tx.send(());
        tokio::spawn(async move {
            let name = signals.next().await;
            warn!("second {name}: exiting at once; writes not yet flushed are lost");
            std::process::exit(1);
        });
        down_tx.send_replace(true);
        if let Err(e) = control.await {
            warn!(error = %e, "control socket task failed");
        }
    });
    drop(watchdog);
    let r = device
        .join()
        .map_err(|_| anyhow!("the ublk thread panicked"))?;
    drop(files);
    r.context("ublk frontend")
}

/// Logs, prints how to use the device, and tells systemd it is ready.
fn announce(
    r: &Ready,
    image: &std::path::Path,
    capacity: u64,
    read_only: bool,
    control_socket: &std::path::Path,
) {
    info!(
        device = %r.block_device,
        queues = r.queues,
        depth = r.depth,
        recovered = r.recovered,
        "ready"
    );
    let how = if r.recovered {
        "re-attached"
    } else {
        "serving"
    };
    let out = format!(
        "\nftld is {how} {} ({}{}) as {}.\n\n\
         Put a filesystem on it (as root):\n\
         \x20   mkfs.ext4 {dev} && mkdir -p /mnt/ftld && mount {dev} /mnt/ftld\n\n\
         Statistics: ftld stats --control-socket {}\n\
         Stop with Ctrl-C or SIGTERM (the device is removed after flush and checkpoint).\n\
         After a crash (kill -9) the device stays: ftld serve --recover {} re-attaches it.\n\n",
        image.display(),
        format_size(capacity),
        if read_only { ", read-only" } else { "" },
        r.block_device,
        control_socket.display(),
        r.id,
        dev = r.block_device,
    );
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    notify::ready(&format!(
        "serving {} ({}) as {} ({} queues x {} tags{})",
        image.display(),
        format_size(capacity),
        r.block_device,
        r.queues,
        r.depth,
        if r.recovered { ", recovered" } else { "" }
    ));
}
