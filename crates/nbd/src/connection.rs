//! One client connection: the handshake, then the transmission phase.
//!
//! # Concurrency model
//! ```text
//!   socket read half ──► reader (this task): header ─► validate ─► payload ─► poll once ──┐
//!                        (`RequestReader`: large payloads skip its buffer)               │
//!                          ▲ waits for a slot and a byte budget before reading more       │
//!                          │             done at once: its reply ──┐                      │
//!                          │             must wait: the request ───┼──────────────────────┘
//!                          │                                       ▼ unbounded channel
//!   socket write half ◄── reply task (`replies`): runs the waiting requests, writes replies
//!                         in completion order, flushes when nothing more is ready
//! ```
//! - A request is polled once in the reader: most finish there (buffered writes, reads served
//!   from memory), which spares a cross-thread wake-up per request; one that has to wait (a
//!   flush, a full write buffer, a NAND read with timing on) goes to the reply task, which
//!   polls all of the connection's waiting requests, so requests still run concurrently and
//!   complete out of order, and replies that complete together leave in one `send`.
//! - At most `max_inflight_per_connection` requests are between "header read" and "reply
//!   written", and at most `max_inflight_bytes_per_connection` bytes of read/write buffers.
//!   The permits travel with the reply and are released once it is written (or dropped because
//!   the peer is gone), so a client that stops reading replies stops being read from: the
//!   channel is unbounded in type only. One that reads no reply for `reply_stall_timeout`
//!   counts as gone: its replies are dropped (their buffers freed) and, unless the reader is
//!   stuck in the middle of a request the client never finishes sending, the connection
//!   ends.
//! - Replies go out in completion order, so cookies come back out of order across requests.
//! - A `WRITE` that fails validation still has its payload read and discarded so the stream stays
//!   in sync, up to [`WRITE_DISCARD_LIMIT`]; a longer announced payload (the length field allows
//!   up to 4 GiB) closes the connection instead, as the spec allows for denial-of-service sized
//!   payloads.
//!
//! # Ending
//! The reader stops on `NBD_CMD_DISC`, end of stream, a protocol error (wrong magic, absurd
//! write length, socket error), a failed reply write, or server shutdown. The reply task then
//! runs every request that is still waiting to its end (backend futures are never dropped
//! half-way), writes what is queued, and closes the socket. Once shutdown is signalled, a
//! request that is only partly received and the final reply drain get `shutdown_grace` each
//! to complete (then the writes are given up); the backend calls themselves are always awaited.
//! After shutdown the close lingers: once every reply is out and the write side is shut
//! down, what the client still sends is read and dropped until it closes (within the drain's
//! grace; a client that sends nothing is not waited for), so that unread requests do not turn
//! the close into a reset that makes clients drop replies they were sent (see `linger`).
//! A connection still negotiating gets the same grace to notice `NBD_REP_ERR_SHUTDOWN`.

use crate::backend::BlockBackend;
use crate::buffers::ReadBuffers;
use crate::error::{ProtocolError, RequestError};
use crate::handshake::{greet, negotiate, ExportInfo, Negotiated, Outcome};
use crate::protocol::*;
use crate::reader::RequestReader;
use crate::replies::{Outgoing, Replies, ToReplies, Waiting};
use crate::request::{error_reply, execute, validate, Command, ExportParams};
use crate::server::{ServerConfig, ShutdownSignal};
use crate::stats::Counters;
use crate::tls::TlsPolicy;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::io::{BufReader, BufWriter, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::{debug, error, info, warn};

/// A `WRITE` payload up to this size is read and discarded when the request is refused; a
/// longer one closes the connection.
pub const WRITE_DISCARD_LIMIT: u32 = 2 * MAX_PAYLOAD;
/// The byte budget is counted in units of this many bytes.
const BUDGET_UNIT: u32 = 4096;
const READ_BUFFER: usize = 128 << 10;
/// The reader yields after running this long through buffered requests (see `transmission`).
const MAX_BURST: Duration = Duration::from_micros(30);
const WRITE_BUFFER: usize = 128 << 10;

/// Everything a connection needs from the server.
pub(crate) struct ConnContext<B> {
    pub backend: Arc<B>,
    pub config: Arc<ServerConfig>,
    pub stats: Arc<Counters>,
    /// Connection number (0-based, in accept order).
    pub id: u64,
    /// Peer address for logs.
    pub peer: String,
    /// How the server treats TLS.
    pub tls: Arc<TlsPolicy>,
}

/// Why a connection ended without a protocol error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Disconnect,
    Eof,
    Shutdown,
    WriterFailed,
}

/// For the "connection closed" log line.
impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            End::Disconnect => "the client sent NBD_CMD_DISC",
            End::Eof => "the client closed the socket",
            End::Shutdown => "the server is stopping",
            End::WriterFailed => "sending a reply failed",
        })
    }
}

/// Runs a connection to the end. Never panics on peer input; errors are logged and counted.
pub(crate) async fn serve_connection<B, R, W>(
    ctx: ConnContext<B>,
    r: R,
    w: W,
    mut shutdown: ShutdownSignal,
) where
    B: BlockBackend,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (id, peer) = (ctx.id, ctx.peer.clone());
    info!(conn = id, %peer, "connection opened");
    let size = ctx.backend.size() / u64::from(MIN_BLOCK_SIZE) * u64::from(MIN_BLOCK_SIZE);
    let export = ExportInfo {
        name: ctx.config.export_name.clone(),
        description: ctx.config.description.clone(),
        size,
        read_only: ctx.backend.read_only(),
    };
    let timeout = ctx.config.handshake_timeout;
    let grace = ctx.config.shutdown_grace;
    let hs_signal = shutdown.clone();
    let negotiation = handshake(&ctx, r, w, &export, &hs_signal);
    let handshake = tokio::select! {
        res = tokio::time::timeout(timeout, negotiation) => {
            res.unwrap_or(Err(ProtocolError::HandshakeTimeout))
        }
        () = async { shutdown.wait().await; tokio::time::sleep(grace).await } => {
            info!(conn = id, "connection closed during handshake: server shutting down");
            return;
        }
    };
    let (negotiated, channel) = match handshake {
        Ok(Some(agreed)) => agreed,
        Ok(None) => {
            info!(conn = id, "connection closed: client aborted negotiation");
            return;
        }
        Err(e) => {
            log_protocol_error(&ctx, "handshake", &e);
            return;
        }
    };
    Counters::bump(&ctx.stats.handshakes_completed);
    info!(
        conn = id,
        structured = negotiated.structured,
        tls = matches!(channel, Channel::Tls(..)),
        flags = format_args!("{:#x}", negotiated.flags),
        size,
        "transmission phase"
    );
    let params = ExportParams {
        size,
        read_only: export.read_only,
        structured: negotiated.structured,
        block_status: negotiated.block_status,
    };
    let ended = match channel {
        Channel::Clear(r, w) => transmission(&ctx, r, w, params, negotiated, shutdown).await,
        Channel::Tls(r, w) => transmission(&ctx, r, w, params, negotiated, shutdown).await,
    };
    match ended {
        Ok(end) => info!(conn = id, reason = %end, "connection closed"),
        Err(e) => log_protocol_error(&ctx, "transmission", &e),
    }
}

/// The stream a connection's TLS session runs on: the socket's two halves joined again.
type TlsTransport<R, W> = tokio_rustls::server::TlsStream<tokio::io::Join<R, W>>;

/// What the transmission phase reads from and writes to: the socket itself, or the TLS session
/// on it (split into halves that share the session).
enum Channel<R, W> {
    Clear(BufReader<R>, BufWriter<W>),
    Tls(
        BufReader<ReadHalf<TlsTransport<R, W>>>,
        BufWriter<WriteHalf<TlsTransport<R, W>>>,
    ),
}

/// The handshake: greeting, options, and on `STARTTLS` the TLS handshake and the options that
/// follow it. `None` if the client aborted.
async fn handshake<B, R, W>(
    ctx: &ConnContext<B>,
    r: R,
    w: W,
    export: &ExportInfo,
    shutdown: &ShutdownSignal,
) -> Result<Option<(Negotiated, Channel<R, W>)>, ProtocolError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut r = BufReader::with_capacity(READ_BUFFER, r);
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, w);
    let mut state = greet(&mut r, &mut w, ctx.tls.mode()).await?;
    match negotiate(&mut r, &mut w, export, shutdown, &mut state).await? {
        Outcome::Transmission(n) => return Ok(Some((n, Channel::Clear(r, w)))),
        Outcome::Aborted => return Ok(None),
        Outcome::StartTls => {}
    }
    // `negotiate` acknowledges STARTTLS only when the mode is not off, and a policy has an
    // acceptor exactly then (`TlsPolicy::new`); the reply is flushed. A client must wait for that reply before its TLS
    // handshake, so nothing can be buffered yet; anything that is was sent in the clear.
    let acceptor = ctx.tls.acceptor().ok_or_else(|| {
        ProtocolError::TlsHandshake(std::io::Error::other("no TLS configuration"))
    })?;
    if !r.buffer().is_empty() {
        return Err(ProtocolError::DataBeforeTls);
    }
    let socket = tokio::io::join(r.into_inner(), w.into_inner());
    let session = match acceptor.accept(socket).await {
        Ok(s) => s,
        Err(e) => {
            Counters::bump(&ctx.stats.tls_failures);
            return Err(ProtocolError::TlsHandshake(e));
        }
    };
    Counters::bump(&ctx.stats.tls_handshakes);
    let (tr, tw) = tokio::io::split(session);
    let mut r = BufReader::with_capacity(READ_BUFFER, tr);
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, tw);
    state.tls_active = true;
    match negotiate(&mut r, &mut w, export, shutdown, &mut state).await? {
        Outcome::Transmission(n) => Ok(Some((n, Channel::Tls(r, w)))),
        Outcome::Aborted => Ok(None),
        // `negotiate` answers a second STARTTLS with NBD_REP_ERR_INVALID.
        Outcome::StartTls => Err(ProtocolError::TlsHandshake(std::io::Error::other(
            "STARTTLS acknowledged twice",
        ))),
    }
}

fn log_protocol_error<B>(ctx: &ConnContext<B>, phase: &str, e: &ProtocolError) {
    let eof = matches!(e, ProtocolError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof);
    if matches!(e, ProtocolError::ShuttingDown) {
        info!(
            conn = ctx.id,
            phase, "connection closed: server shutting down"
        );
    } else if let ProtocolError::TlsHandshake(err) = e {
        // Counted in `tls_failures`: a client with the wrong CA or no certificate.
        warn!(conn = ctx.id, peer = %ctx.peer, error = %err, "connection closed: TLS handshake failed");
    } else if eof {
        info!(
            conn = ctx.id,
            phase, "connection closed by peer mid-message"
        );
    } else {
        Counters::bump(&ctx.stats.protocol_errors);
        warn!(conn = ctx.id, phase, error = %e, "connection closed: protocol error");
    }
}

/// The transmission phase. Returns once every request finished and the reply task is done.
async fn transmission<B, R, W>(
    ctx: &ConnContext<B>,
    r: BufReader<R>,
    w: BufWriter<W>,
    params: ExportParams,
    negotiated: Negotiated,
    mut shutdown: ShutdownSignal,
) -> Result<End, ProtocolError>
where
    B: BlockBackend,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let cfg = &ctx.config;
    let grace = cfg.shutdown_grace;
    let queue = usize::try_from(ctx.id).unwrap_or(0) % ctx.backend.queues().max(1);
    let (tx, rx) = mpsc::unbounded_channel::<ToReplies>();
    // Read buffers go back here once their reply is sent (see `buffers`).
    let buffers = Arc::new(ReadBuffers::default());
    let (failed_tx, mut failed) = oneshot::channel();
    let (abandon, abandon_rx) = oneshot::channel();
    let (done_tx, requests_done) = oneshot::channel();
    let replies = Replies::new(
        w,
        rx,
        Arc::clone(&buffers),
        failed_tx,
        abandon_rx,
        done_tx,
        cfg.reply_stall_timeout,
    );
    let mut replies = tokio::spawn(replies.run());
    let slots = Arc::new(Semaphore::new(cfg.max_inflight_per_connection));
    let budget_units = cfg.max_inflight_bytes_per_connection / BUDGET_UNIT as usize;
    let budget = Arc::new(Semaphore::new(budget_units));
    let structured = negotiated.structured;
    let mut r = RequestReader::from_buf_reader(r, READ_BUFFER);
    // When the reader started its current run of buffered requests.
    let mut burst: Option<Instant> = None;

    let result: Result<End, ProtocolError> = loop {
        if r.buffered() == 0 {
            burst = None;
        }
        // Wait for the next request to start arriving (cancel-safe: nothing is consumed).
        tokio::select! {
            biased;
            () = shutdown.wait() => break Ok(End::Shutdown),
            // A reply could not be written (or the reply task is gone): the peer is gone.
            _ = &mut failed => break Ok(End::WriterFailed),
            res = r.fill() => match res {
                Ok([]) => break Ok(End::Eof),
                Ok(_) => {}
                Err(e) => break Err(e.into()),
            },
        }
        let mut raw = [0u8; REQUEST_HEADER_LEN];
        match until_grace(&shutdown, grace, r.read_exact(&mut raw)).await {
            None => break Ok(End::Shutdown),
            Some(Err(e)) => break Err(e.into()),
            Some(Ok(_)) => {}
        }
        let h = RequestHeader::decode(&raw);
        if h.magic != REQUEST_MAGIC {
            break Err(ProtocolError::BadMagic {
                expected: REQUEST_MAGIC.into(),
                found: h.magic.into(),
            });
        }
        ctx.stats.request(h.kind);
        debug!(
            conn = ctx.id,
            cookie = h.cookie,
            cmd = command_name(h.kind),
            flags = h.flags,
            offset = h.offset,
            len = h.length,
            "request"
        );
        if h.kind == NBD_CMD_DISC {
            break Ok(End::Disconnect);
        }
        let Some(slot) = until_grace(&shutdown, grace, slots.clone().acquire_owned()).await else {
            break Ok(End::Shutdown);
        };
        let Ok(slot) = slot else {
            break Ok(End::Shutdown); // the semaphore is never closed
        };
        let cmd = match validate(&h, &params) {
            Ok(cmd) => cmd,
            Err(err) => {
                if h.kind == NBD_CMD_WRITE {
                    if h.length > WRITE_DISCARD_LIMIT {
                        break Err(ProtocolError::TooLarge {
                            what: "WRITE payload",
                            len: h.length.into(),
                        });
                    }
                    let skip = r.skip(u64::from(h.length));
                    match until_grace(&shutdown, grace, skip).await {
                        None => break Ok(End::Shutdown),
                        Some(Err(e)) => break Err(e.into()),
                        Some(Ok(())) => {}
                    }
                }
                debug!(conn = ctx.id, cookie = h.cookie, error = %err, "request refused");
                ctx.stats.error(err.errno);
                let reply = error_reply(h.cookie, &err, structured);
                let _ = tx.send(ToReplies::Done(Outgoing {
                    reply,
                    _slot: slot,
                    _bytes: None,
                }));
                continue;
            }
        };
        let data_len = match cmd {
            Command::Read { len, .. } | Command::Write { len, .. } => len,
            _ => 0,
        };
        let bytes = if data_len > 0 {
            let units = data_len.div_ceil(BUDGET_UNIT);
            let acquire = budget.clone().acquire_many_owned(units);
            match until_grace(&shutdown, grace, acquire).await {
                Some(Ok(p)) => Some(p),
                _ => break Ok(End::Shutdown),
            }
        } else {
            None
        };
        let mut payload = Vec::new();
        if let Command::Write { len, .. } = cmd {
            payload = Vec::with_capacity(len as usize);
            match until_grace(&shutdown, grace, r.read_payload(&mut payload, len as usize)).await {
                None => break Ok(End::Shutdown),
                Some(Err(e)) => break Err(e.into()),
                Some(Ok(())) => {}
            }
        }
        let backend = Arc::clone(&ctx.backend);
        let stats = Arc::clone(&ctx.stats);
        let buffers = Arc::clone(&buffers);
        let (conn, cookie) = (ctx.id, h.cookie);
        let mut request: Waiting = Box::pin(async move {
            let run = execute(
                &*backend, queue, cookie, cmd, payload, &params, &stats, &buffers,
            );
            let reply = CatchUnwind(Box::pin(run)).await.unwrap_or_else(|()| {
                error!(conn, cookie, %cmd, "backend panicked");
                let err = RequestError::new(Errno::Io, "backend panicked");
                stats.error(err.errno);
                error_reply(cookie, &err, structured)
            });
            Outgoing {
                reply,
                _slot: slot,
                _bytes: bytes,
            }
        });
        // Most requests complete without waiting (buffered writes, reads of buffered or
        // timing-off flash): run them here and spare a cross-thread wake-up. A request that
        // has to wait goes to the reply task, which registers its waker when it polls it (a
        // future wakes the waker of its latest poll). The reply task is gone only if it
        // panicked; the request is then dropped with it.
        let first = request
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        let _ = match first {
            Poll::Ready(out) => tx.send(ToReplies::Done(out)),
            Poll::Pending => tx.send(ToReplies::Waiting(request)),
        };
        // A long burst of buffered requests yields now and then: the reply task, woken from
        // this thread, waits in its worker's LIFO slot, where the other worker cannot take
        // it, until the reader gives the worker up (without this, 128 KiB sequential reads
        // at QD32 lost ~12 % of their throughput to replies held behind the reader).
        if r.buffered() > 0 {
            let now = Instant::now();
            if now.duration_since(*burst.get_or_insert(now)) >= MAX_BURST {
                burst = None;
                tokio::task::yield_now().await;
            }
        }
    };

    // The reply task runs every request to its end (however long that takes: backend calls
    // are always awaited), then lets the replies drain; after shutdown the drain gets the
    // grace period, then the writes are given up. (`requests_done` also resolves if the task
    // ended early, e.g. after a panic.)
    drop(tx);
    let _ = requests_done.await;
    // After shutdown, the drain and the lingering close share one grace from here.
    let deadline = tokio::time::Instant::now() + grace;
    // `Ok(())` from the task means its writes ended: all written and the write side shut
    // down, or given up here (then the client is not reading and nothing is shut down).
    let mut abandoned = false;
    let drained = match until_grace(&shutdown, grace, &mut replies).await {
        Some(res) => res,
        None => {
            info!(
                conn = ctx.id,
                "the client read no reply within the grace after shutdown"
            );
            let _ = abandon.send(());
            abandoned = true;
            replies.await
        }
    };
    let replies_sent = match drained {
        Ok(Ok(())) => !abandoned,
        Ok(Err(e)) => {
            debug!(conn = ctx.id, error = %e, "reply writer failed");
            false
        }
        Err(e) => {
            error!(conn = ctx.id, error = %e, "reply task failed");
            false
        }
    };
    if replies_sent && matches!(result, Ok(End::Shutdown)) {
        linger(ctx.id, &mut r, deadline, cfg.shutdown_linger_quiet).await;
    }
    result
}

/// The lingering close after shutdown. A client keeps sending while replies are due (libnbd,
/// the kernel's client), and requests that arrived after shutdown are never read. Closing with
/// them unread makes the kernel reset the connection (TCP sends RST; a unix socket reports
/// `ECONNRESET` to the peer), and a client whose next send fails that way may drop replies it
/// has already received: libnbd then fails writes that were carried out. So once the last
/// reply is out and the write side shut down (the client reads end of stream after it), what
/// the client still sends is read and dropped until it closes or until `deadline`. A client
/// that has sent nothing since the stop and sends nothing for `quiet` is not waited for (an
/// idle client that does not close on end of stream would otherwise hold the shutdown for the
/// whole grace); one that sends its first bytes after a longer pause could still see a reset.
/// Not after a drain given up (the client is not reading), nor after the other ends: end of
/// stream left nothing unread, nothing may follow `NBD_CMD_DISC`, and a peer that broke the
/// protocol or stopped reading gets the hard close the spec allows.
async fn linger<R: AsyncRead + Unpin>(
    conn: u64,
    r: &mut RequestReader<R>,
    deadline: tokio::time::Instant,
    quiet: Duration,
) {
    let mut dropped = 0u64;
    loop {
        // A client that has sent something since the stop may send more after a pause (a
        // window update, its own scheduling): closing then would be the reset this avoids.
        let until = if dropped == 0 {
            deadline.min(tokio::time::Instant::now() + quiet)
        } else {
            deadline
        };
        match tokio::time::timeout_at(until, r.discard_some()).await {
            Ok(Ok(0)) => return debug!(conn, dropped, "client closed after shutdown"),
            Ok(Ok(n)) => dropped += n as u64,
            // A TLS client that closes without its own close_notify: closed all the same.
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return debug!(
                    conn,
                    dropped, "client closed after shutdown (no close_notify)"
                )
            }
            Ok(Err(e)) => return debug!(conn, error = %e, "read after shutdown failed"),
            Err(_) if until < deadline => {
                return debug!(conn, "client sent nothing after shutdown")
            }
            Err(_) => {
                return info!(
                    conn,
                    dropped, "the client did not close within the grace after shutdown"
                )
            }
        }
    }
}

/// Runs `fut`; gives up (`None`) once `grace` has passed after shutdown was signalled.
async fn until_grace<F: Future>(
    shutdown: &ShutdownSignal,
    grace: Duration,
    fut: F,
) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    // Under load nearly every call completes on its first poll (the bytes are already in the
    // read buffer, a permit is free): those skip cloning and polling the shutdown watch, which
    // cost several atomic operations per request.
    let first = std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
        Poll::Ready(out) => Poll::Ready(Some(out)),
        Poll::Pending => Poll::Ready(None),
    });
    if let Some(out) = first.await {
        return Some(out);
    }
    let mut s = shutdown.clone();
    tokio::select! {
        out = fut => Some(out),
        () = async { s.wait().await; tokio::time::sleep(grace).await } => None,
    }
}

/// Turns a panic while polling the inner future into `Err(())`, so a panicking backend call
/// still gets a reply (`NBD_EIO`) instead of leaving the client waiting.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(_) => Poll::Ready(Err(())),
        }
    }
}
