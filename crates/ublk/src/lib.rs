//! # ftl-ublk — the FTL as a kernel block device through ublk
//!
//! Serves an [`ftl::Ftl`] as `/dev/ublkb<N>` with the `libublk` crate: the kernel's `ublk_drv`
//! passes every block request to this process over io_uring, one ring per hardware queue.
//!
//! ```text
//!  /dev/ublkbN ─► ublk_drv ─► queue thread q (io_uring) ─► tag task ─► Ftl::read/write/...
//!                                   ▲                                      │ (FTL threads)
//!                                   └── eventfd poll ◄── kicked waker ◄────┘
//! ```
//!
//! - **Queues**: one thread per hardware queue, one async task per tag on a smol
//!   `LocalExecutor` (`queue.rs`); queue `q` writes through FTL write queue `q % Ftl::queues()`.
//! - **Waking**: FTL completions happen on FTL threads; [`kick`] makes them wake the queue
//!   thread through an eventfd polled in its ring. A queue thread never blocks on the FTL.
//! - **Device**: logical block 512, physical block 4096, volatile write cache + FUA, discard
//!   and write-zeroes with 4 KiB granularity, the FTL's capacity; read-only when asked.
//! - **User recovery** (`UBLK_F_USER_RECOVERY` + `_REISSUE`): if the daemon dies (kill -9),
//!   the kernel keeps `/dev/ublkbN` and holds its I/O; [`serve`] with [`Start::Recover`]
//!   re-attaches to it and the held I/O is reissued to the new process.
//! - **Stop**: a message on the stop channel stops the device (the kernel flushes what it has
//!   dirty through us first), the queues drain and exit, and the device is deleted.
//!
//! Errors become negative errnos in one place, [`errno`].

mod kick;
mod queue;

use std::path::Path;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use ftl::{Ftl, FtlError};
use libublk::ctrl::{UblkCtrl, UblkCtrlBuilder};
use libublk::io::UblkDev;
use libublk::sys;
use libublk::{UblkError, UblkFlags};
use tracing::{info, warn};

pub use kick::{kicked, Kick};

/// The kernel's ublk control device.
pub const CONTROL: &str = "/dev/ublk-control";
/// Largest request the kernel sends us (bytes); also each tag's buffer size.
pub const IO_BUF_BYTES: u32 = 512 << 10;
/// Largest discard / write-zeroes request (bytes).
pub const MAX_DISCARD_BYTES: u32 = 1 << 30;

/// Errors of the ublk frontend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel has no ublk driver here.
    #[error("ublk is not available: {0}")]
    Unavailable(String),
    /// A libublk or ublk driver call failed.
    #[error("ublk {what}: {source}")]
    Ublk {
        what: &'static str,
        #[source]
        source: UblkError,
    },
    /// The device to recover is not in a state that can be recovered, or does not match.
    #[error("cannot recover /dev/ublkb{id}: {why}")]
    Recover { id: u32, why: String },
    /// The device id asked for is taken by a live device.
    #[error("/dev/ublkb{0} exists and is live (served by another process)")]
    Busy(u32),
}

fn ublk(what: &'static str) -> impl FnOnce(UblkError) -> Error {
    move |source| Error::Ublk { what, source }
}

/// The state of an existing ublk device, as the driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceState {
    /// Added but not started, or stopped.
    Dead,
    /// Started and served.
    Live,
    /// Its server died (or quiesced it): waiting for a new server to recover it.
    Quiesced,
    /// Its server died and the device fails I/O until recovered.
    FailIo,
    /// A state this crate does not know.
    Other(u16),
}

impl DeviceState {
    fn from_raw(s: u16) -> DeviceState {
        match u32::from(s) {
            sys::UBLK_S_DEV_DEAD => DeviceState::Dead,
            sys::UBLK_S_DEV_LIVE => DeviceState::Live,
            sys::UBLK_S_DEV_QUIESCED => DeviceState::Quiesced,
            sys::UBLK_S_DEV_FAIL_IO => DeviceState::FailIo,
            _ => DeviceState::Other(s),
        }
    }

    /// Whether a new server can take the device over with user recovery.
    pub fn recoverable(self) -> bool {
        matches!(self, DeviceState::Quiesced | DeviceState::FailIo)
    }
}

/// Checks that the ublk driver is loaded and answers; `Err` says why not.
pub fn available() -> Result<u64, String> {
    if !Path::new(CONTROL).exists() {
        return Err(format!("{CONTROL} does not exist (modprobe ublk_drv)"));
    }
    UblkCtrl::get_features().ok_or_else(|| format!("{CONTROL} exists but does not answer"))
}

/// The state of device `id`, or `None` when there is no such device.
pub fn device_state(id: u32) -> Option<DeviceState> {
    if !Path::new(&format!("/sys/class/ublk-char/ublkc{id}")).exists() {
        return None;
    }
    let id = i32::try_from(id).ok()?;
    let ctrl = UblkCtrl::new_simple(id).ok()?;
    Some(DeviceState::from_raw(ctrl.dev_info().state))
}

/// How [`serve`] gets its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Add a new device: with `Some(id)` exactly `/dev/ublkb<id>`, else the next free id.
    Add(Option<u32>),
    /// Re-attach to `/dev/ublkb<id>`, left in recovery state by a server that died.
    Recover(u32),
}

/// How to serve.
#[derive(Clone, Debug)]
pub struct Options {
    pub start: Start,
    /// Hardware queues (threads); ignored when recovering (the device keeps its own).
    pub queues: u16,
    /// Tags per queue; ignored when recovering.
    pub depth: u16,
    pub read_only: bool,
}

/// What is being served, reported once the device is live.
#[derive(Clone, Debug)]
pub struct Ready {
    pub id: u32,
    /// `/dev/ublkb<id>`.
    pub block_device: String,
    pub queues: u16,
    pub depth: u16,
    pub recovered: bool,
}

/// The one place where FTL errors become errnos for the kernel.
pub fn errno(op: u32, e: &FtlError) -> i32 {
    match e {
        FtlError::OutOfRange { .. } if op == sys::UBLK_IO_OP_READ => -libc::EINVAL,
        FtlError::OutOfRange { .. } => -libc::ENOSPC,
        FtlError::Misaligned { .. } => -libc::EINVAL,
        FtlError::ReadOnly(_) => -libc::EROFS,
        FtlError::NoSpace(_) => -libc::ENOSPC,
        FtlError::Closed => -libc::ESHUTDOWN,
        e => {
            tracing::error!(op, error = %e, "FTL request failed");
            -libc::EIO
        }
    }
}

/// The device parameters: what the FTL really is.
fn params(capacity: u64, max_io_buf_bytes: u32, read_only: bool) -> sys::ublk_params {
    let mut attrs = sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA;
    if read_only {
        attrs |= sys::UBLK_ATTR_READ_ONLY;
    }
    sys::ublk_params {
        types: sys::UBLK_PARAM_TYPE_BASIC | sys::UBLK_PARAM_TYPE_DISCARD,
        basic: sys::ublk_param_basic {
            attrs,
            logical_bs_shift: 9,
            physical_bs_shift: 12,
            io_opt_shift: 12,
            io_min_shift: 12,
            max_sectors: max_io_buf_bytes >> 9,
            dev_sectors: capacity >> 9,
            ..Default::default()
        },
        discard: sys::ublk_param_discard {
            discard_alignment: 0,
            discard_granularity: 4096,
            max_discard_sectors: MAX_DISCARD_BYTES >> 9,
            max_write_zeroes_sectors: MAX_DISCARD_BYTES >> 9,
            max_discard_segments: 1,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Serves `ftl` as a ublk device until a message arrives on `stop` (or its sender is
/// dropped), then stops and deletes the device and returns. `on_ready` runs once, when the
/// block device is live. The FTL is left open: the caller closes it (flush + checkpoint).
///
/// If this process dies instead (kill -9), the device stays in recovery state for a new
/// process to take over with [`Start::Recover`].
pub fn serve(
    ftl: Arc<Ftl>,
    opts: &Options,
    on_ready: impl FnOnce(&Ready) + Send + 'static,
    stop: Receiver<()>,
) -> Result<(), Error> {
    available().map_err(Error::Unavailable)?;
    let capacity = ftl.capacity();
    let ctrl_flags = u64::from(sys::UBLK_F_USER_RECOVERY | sys::UBLK_F_USER_RECOVERY_REISSUE);
    let (id, dev_flags) = match opts.start {
        Start::Add(id) => {
            if let Some(id) = id {
                if device_state(id).is_some() {
                    return Err(Error::Busy(id));
                }
            }
            (id.map_or(-1, |i| i as i32), UblkFlags::UBLK_DEV_F_ADD_DEV)
        }
        Start::Recover(id) => {
            prepare_recovery(id, capacity)?;
            (id as i32, UblkFlags::UBLK_DEV_F_RECOVER_DEV)
        }
    };
    let ctrl = UblkCtrlBuilder::default()
        .name("ftld")
        .id(id)
        .nr_queues(opts.queues.max(1))
        .depth(opts.depth.max(1))
        .io_buf_bytes(IO_BUF_BYTES)
        .ctrl_flags(ctrl_flags)
        .dev_flags(dev_flags)
        .build()
        .map_err(ublk("creating the device"))?;
    let info = ctrl.dev_info();
    let ready = Ready {
        id: info.dev_id,
        block_device: ctrl.get_bdev_path(),
        queues: info.nr_hw_queues,
        depth: info.queue_depth,
        recovered: matches!(opts.start, Start::Recover(_)),
    };
    info!(
        id = ready.id,
        queues = ready.queues,
        depth = ready.depth,
        recovering = ready.recovered,
        "ublk device created"
    );
    let read_only = opts.read_only;
    let tgt_init = move |dev: &mut UblkDev| {
        dev.tgt.dev_size = capacity;
        dev.tgt.params = params(capacity, dev.dev_info.max_io_buf_bytes, read_only);
        // Room for every tag's command plus the eventfd poll.
        let ring = dev.dev_info.queue_depth.saturating_mul(2);
        dev.tgt.sq_depth = ring;
        dev.tgt.cq_depth = ring;
        Ok(())
    };
    let q_ftl = Arc::clone(&ftl);
    let q_fn = move |qid: u16, dev: &UblkDev| queue::run(qid, dev, Arc::clone(&q_ftl), read_only);
    // run_target wants Sync closures; the channel and callback are used once, under a lock.
    let once = Mutex::new(Some((on_ready, stop, ready)));
    let wait = move |ctrl: &UblkCtrl| {
        let Some((on_ready, stop, ready)) = once.lock().ok().and_then(|mut g| g.take()) else {
            return;
        };
        on_ready(&ready);
        // Any message, or the sender gone, means stop.
        let _ = stop.recv();
        info!(id = ready.id, "stopping the ublk device");
        if let Err(e) = ctrl.kill_dev() {
            warn!(error = %e, "stopping the ublk device failed");
        }
    };
    let r = ctrl
        .run_target(tgt_init, q_fn, wait)
        .map_err(ublk("serving"));
    // Deleted whether we added or recovered it; a device that is already gone is fine.
    if let Err(e) = ctrl.del_dev() {
        warn!(error = %e, "deleting the ublk device");
    }
    r.map(|_| ())
}

/// Checks that device `id` waits for recovery and has our capacity, then starts recovery.
fn prepare_recovery(id: u32, capacity: u64) -> Result<(), Error> {
    let state = device_state(id).ok_or_else(|| Error::Recover {
        id,
        why: "no such device".into(),
    })?;
    if !state.recoverable() {
        return Err(Error::Recover {
            id,
            why: format!("its state is {state:?}, not quiesced (is its server still running?)"),
        });
    }
    let ctrl = UblkCtrl::new_simple(id as i32).map_err(ublk("opening the device"))?;
    let mut p = sys::ublk_params {
        len: std::mem::size_of::<sys::ublk_params>() as u32,
        ..Default::default()
    };
    ctrl.get_params(&mut p)
        .map_err(ublk("reading parameters"))?;
    if p.basic.dev_sectors != capacity >> 9 {
        return Err(Error::Recover {
            id,
            why: format!(
                "it has {} bytes, the image exports {capacity}",
                p.basic.dev_sectors << 9
            ),
        });
    }
    ctrl.start_user_recover()
        .map_err(ublk("starting user recovery"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_describe_the_ftl() {
        let p = params(64 << 20, IO_BUF_BYTES, false);
        assert_eq!(p.basic.dev_sectors, (64 << 20) >> 9);
        assert_eq!(p.basic.logical_bs_shift, 9);
        assert_eq!(p.basic.physical_bs_shift, 12);
        assert_ne!(p.basic.attrs & sys::UBLK_ATTR_VOLATILE_CACHE, 0);
        assert_ne!(p.basic.attrs & sys::UBLK_ATTR_FUA, 0);
        assert_eq!(p.basic.attrs & sys::UBLK_ATTR_READ_ONLY, 0);
        assert_ne!(p.types & sys::UBLK_PARAM_TYPE_DISCARD, 0);
        assert_eq!(p.discard.discard_granularity, 4096);
        assert!(p.discard.max_discard_sectors > 0);
        assert!(p.discard.max_write_zeroes_sectors > 0);
        let ro = params(1 << 20, IO_BUF_BYTES, true);
        assert_ne!(ro.basic.attrs & sys::UBLK_ATTR_READ_ONLY, 0);
    }

    #[test]
    fn errno_mapping() {
        let oor = FtlError::OutOfRange {
            offset: 0,
            len: 1,
            capacity: 0,
        };
        assert_eq!(errno(sys::UBLK_IO_OP_READ, &oor), -libc::EINVAL);
        assert_eq!(errno(sys::UBLK_IO_OP_WRITE, &oor), -libc::ENOSPC);
        assert_eq!(
            errno(sys::UBLK_IO_OP_WRITE, &FtlError::ReadOnly("worn".into())),
            -libc::EROFS
        );
        assert_eq!(
            errno(sys::UBLK_IO_OP_FLUSH, &FtlError::Closed),
            -libc::ESHUTDOWN
        );
        assert_eq!(
            errno(
                sys::UBLK_IO_OP_READ,
                &FtlError::Uncorrectable { lpn: 1, retries: 3 }
            ),
            -libc::EIO
        );
    }

    #[test]
    fn recovery_states() {
        assert!(DeviceState::from_raw(sys::UBLK_S_DEV_QUIESCED as u16).recoverable());
        assert!(DeviceState::from_raw(sys::UBLK_S_DEV_FAIL_IO as u16).recoverable());
        assert!(!DeviceState::from_raw(sys::UBLK_S_DEV_LIVE as u16).recoverable());
        assert_eq!(DeviceState::from_raw(99), DeviceState::Other(99));
    }
}
