//! One ublk hardware queue: a thread, its io_uring, one async task per tag and a kicker task.
//!
//! Each tag task follows libublk's shape: FETCH (prep) once, then loop { serve the request the
//! kernel put in the tag's descriptor by awaiting the FTL; COMMIT_AND_FETCH with the result }.
//! The queue going down (the device stopped, or the daemon quiescing it) completes the pending
//! FETCH with `UBLK_IO_RES_ABORT`, which libublk turns into `QueueIsDown`: the normal way out.
//!
//! FTL futures are awaited through [`kicked`], so an FTL thread's completion writes the queue's
//! eventfd; the kicker task keeps a `POLL_ADD` on it armed in the queue's ring (see
//! `kick.rs`). No tag ever blocks the thread: a slow NAND operation only parks its own task.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use ftl::Ftl;
use io_uring::{opcode, types};
use libublk::helpers::IoBuf;
use libublk::io::{UblkDev, UblkQueue};
use libublk::sys::{self, ublksrv_io_desc};
use libublk::uring_async::ublk_submit_sqe_async;
use libublk::{BufDesc, UblkError, UblkUringData};
use tracing::{debug, error};

use crate::errno;
use crate::kick::{kicked, Kick};

/// What every task of one queue shares.
struct QueueCtx {
    ftl: Arc<Ftl>,
    /// The FTL write queue this hardware queue writes through.
    write_queue: usize,
    read_only: bool,
    kick: Arc<Kick>,
}

/// The body of queue thread `qid` (called by `UblkCtrl::run_target`).
pub(crate) fn run(qid: u16, dev: &UblkDev, ftl: Arc<Ftl>, read_only: bool) {
    if let Err(e) = run_inner(qid, dev, ftl, read_only) {
        error!(queue = qid, error = %e, "ublk queue failed");
    }
    debug!(queue = qid, "ublk queue down");
}

fn run_inner(qid: u16, dev: &UblkDev, ftl: Arc<Ftl>, read_only: bool) -> Result<(), UblkError> {
    let kick = Kick::new().map_err(UblkError::IOError)?;
    let write_queue = usize::from(qid) % ftl.queues().max(1);
    let ctx = Rc::new(QueueCtx {
        ftl,
        write_queue,
        read_only,
        kick,
    });
    let q = Rc::new(UblkQueue::new(qid, dev)?);
    let exe = Rc::new(smol::LocalExecutor::new());
    let mut tags = Vec::new();
    for tag in q.tags() {
        let (q, ctx) = (Rc::clone(&q), Rc::clone(&ctx));
        tags.push(exe.spawn(async move {
            match io_task(&q, tag, &ctx).await {
                Ok(()) | Err(UblkError::QueueIsDown) => {}
                Err(e) => error!(queue = q.get_qid(), tag, error = %e, "ublk tag task failed"),
            }
        }));
    }
    let stop_kicker = Rc::new(Cell::new(false));
    let kicker = {
        let (ctx, stop) = (Rc::clone(&ctx), Rc::clone(&stop_kicker));
        exe.spawn(async move { kicker_task(&ctx.kick, &stop).await })
    };
    let tags_done = || tags.iter().all(|t| t.is_finished());
    // Runs every runnable task; once all tags are down, ends the kicker (its poll completes at
    // once because we write the eventfd), so no SQE outlives the queue.
    let run_ops = || {
        while exe.try_tick() {}
        if tags_done() && !stop_kicker.get() {
            stop_kicker.set(true);
            ctx.kick.notify();
        }
    };
    let done = || tags_done() && kicker.is_finished();
    smol::block_on(exe.run(libublk::wait_and_handle_io_events(&q, None, run_ops, done)))
}

/// Keeps a poll on the queue's eventfd armed until told to stop.
async fn kicker_task(kick: &Kick, stop: &Cell<bool>) {
    loop {
        let sqe = opcode::PollAdd::new(types::Fd(kick.raw_fd()), libc::POLLIN as u32).build();
        let res = ublk_submit_sqe_async(sqe, UblkUringData::Target as u64).await;
        kick.drain();
        match res {
            Ok(r) if r >= 0 => {}
            Ok(r) => {
                error!(errno = -r, "poll on the queue eventfd failed");
                return;
            }
            Err(e) => {
                error!(error = %e, "cannot arm the queue eventfd poll");
                return;
            }
        }
        if stop.get() {
            return;
        }
    }
}

/// One tag: FETCH, then serve and COMMIT_AND_FETCH until the queue goes down.
async fn io_task(q: &UblkQueue<'_>, tag: u16, ctx: &QueueCtx) -> Result<(), UblkError> {
    let mut buf = IoBuf::<u8>::new(q.dev.dev_info.max_io_buf_bytes as usize);
    q.submit_io_prep_cmd(tag, BufDesc::Slice(buf.as_slice()), 0, Some(&buf))
        .await?;
    loop {
        let iod = *q.get_iod(tag);
        let res = serve(ctx, &iod, buf.as_mut_slice()).await;
        q.submit_io_commit_cmd(tag, BufDesc::Slice(buf.as_slice()), res)
            .await?;
    }
}

/// Serves one request; the result is what the kernel expects: bytes for reads and writes, 0
/// for the others, or a negative errno.
async fn serve(ctx: &QueueCtx, iod: &ublksrv_io_desc, buf: &mut [u8]) -> i32 {
    let op = iod.op_flags & 0xff;
    let fua = iod.op_flags & sys::UBLK_IO_F_FUA != 0;
    let offset = iod.start_sector << 9;
    let len = u64::from(iod.nr_sectors) << 9;
    let writes = matches!(
        op,
        sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_OP_DISCARD | sys::UBLK_IO_OP_WRITE_ZEROES
    );
    if writes && ctx.read_only {
        return -libc::EROFS;
    }
    let (ftl, q, kick) = (&ctx.ftl, ctx.write_queue, &ctx.kick);
    let buf_len = buf.len();
    let data_len = || -> Result<usize, i32> {
        usize::try_from(len)
            .ok()
            .filter(|&n| n <= buf_len)
            .ok_or(-libc::EINVAL)
    };
    let r = match op {
        sys::UBLK_IO_OP_READ => match data_len() {
            Ok(n) => kicked(kick, ftl.read(offset, &mut buf[..n]))
                .await
                .map(|()| n),
            Err(e) => return e,
        },
        sys::UBLK_IO_OP_WRITE => match data_len() {
            Ok(n) => kicked(kick, ftl.write(q, offset, &buf[..n], fua))
                .await
                .map(|()| n),
            Err(e) => return e,
        },
        sys::UBLK_IO_OP_FLUSH => kicked(kick, ftl.flush()).await.map(|()| 0),
        sys::UBLK_IO_OP_DISCARD => kicked(kick, ftl.trim(q, offset, len, fua))
            .await
            .map(|()| 0),
        sys::UBLK_IO_OP_WRITE_ZEROES => kicked(kick, ftl.write_zeroes(q, offset, len, fua))
            .await
            .map(|()| 0),
        _ => return -libc::EOPNOTSUPP,
    };
    match r {
        // At most max_io_buf_bytes, far below i32::MAX.
        Ok(n) => i32::try_from(n).unwrap_or(i32::MAX),
        Err(e) => errno(op, &e),
    }
}
