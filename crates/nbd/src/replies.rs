//! A connection's reply side: it runs the requests that could not finish on their first poll
//! to completion, and writes every reply to the socket in completion order.
//!
//! # Why one task for both
//! Before, a request that had to wait was spawned as its own task and sent its reply through a
//! channel to a writer task. A NAND read with timing `real` completes from the timer thread:
//! each completion woke its request's task, which woke the writer, which ran next (tokio runs a
//! task woken from a worker right after the waker's task) and wrote and flushed that reply
//! alone. At QD128, 0.8 `send` calls per reply, each waking the client; and a task spawn per
//! request. Here the waiting requests live in one [`FuturesUnordered`] polled by the task that
//! writes: completions that land together are polled in one pass, and their replies leave in
//! one `send` (the buffer is flushed only when nothing more is ready).
//!
//! # Rules
//! - A reply goes out as soon as nothing else is ready; nothing waits to fill a batch. Replies
//!   the reader finished go out before the waiting requests are polled (a lone NAND wait may
//!   spin in its poll).
//! - Requests are always run to completion, even after a write failed (the peer is gone) or
//!   the writes were abandoned after shutdown: backend futures are never dropped half-way.
//!   Their replies are then dropped, which frees their permits.
//! - While a write is blocked (the peer does not read), waiting requests are still polled, so
//!   they finish and release whatever they hold in the backend.
//! - The first write failure is reported once to the reader through `failed`, so it stops
//!   reading requests. Once the reader is done and every request finished, `requests_done`
//!   tells it so: the shutdown grace then times only the drain of the replies, and an explicit
//!   `abandon` after it stops writing.

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncWrite, BufWriter};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};

use crate::buffers::ReadBuffers;
use crate::request::Reply;

/// A reply on its way to the socket, with the permits it holds until written.
pub(crate) struct Outgoing {
    pub reply: Reply,
    pub _slot: OwnedSemaphorePermit,
    pub _bytes: Option<OwnedSemaphorePermit>,
}

/// A request that has to wait; it ends with its reply.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = Outgoing> + Send>>;

/// What the reader hands over.
pub(crate) enum ToReplies {
    /// A request that finished in the reader (or was refused).
    Done(Outgoing),
    /// A request that has to wait.
    Waiting(Waiting),
}

/// How the writing stands.
enum Writing {
    On,
    /// A write failed (kept to be returned at the end).
    Failed(std::io::Error),
    /// Given up after the shutdown grace.
    Abandoned,
}

/// The reply side of one connection (see the module doc).
pub(crate) struct Replies<W> {
    w: BufWriter<W>,
    rx: mpsc::UnboundedReceiver<ToReplies>,
    /// The reader is done: nothing more comes from `rx`.
    closed: bool,
    waiting: FuturesUnordered<Waiting>,
    /// Replies ready to go, oldest first; the first may be partly written.
    ready: VecDeque<Outgoing>,
    /// Bytes of `ready`'s first reply (head, then data) already written.
    sent: usize,
    /// Replies written to the buffer since the last flush.
    unflushed: bool,
    writing: Writing,
    /// Tells the reader that a write failed (taken when used).
    failed: Option<oneshot::Sender<()>>,
    /// Resolves when the writes are to be given up (taken when it resolved).
    abandon: Option<oneshot::Receiver<()>>,
    /// Tells the reader that the reader is done and every request finished, so only the
    /// replies' drain is left (taken when used): the shutdown grace times that drain only.
    requests_done: Option<oneshot::Sender<()>>,
    /// Where a read's data buffer goes once its reply is written.
    buffers: Arc<ReadBuffers>,
    /// How long a write to the socket may make no progress before the peer counts as gone
    /// (`ServerConfig::reply_stall_timeout`); the timer of the current stall (kept and reset,
    /// not made anew per stall), and whether it runs.
    stall_limit: Duration,
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    stalled: bool,
}

impl<W: AsyncWrite + Unpin> Replies<W> {
    pub(crate) fn new(
        w: BufWriter<W>,
        rx: mpsc::UnboundedReceiver<ToReplies>,
        buffers: Arc<ReadBuffers>,
        failed: oneshot::Sender<()>,
        abandon: oneshot::Receiver<()>,
        requests_done: oneshot::Sender<()>,
        stall_limit: Duration,
    ) -> Replies<W> {
        Replies {
            w,
            rx,
            closed: false,
            waiting: FuturesUnordered::new(),
            ready: VecDeque::new(),
            sent: 0,
            unflushed: false,
            writing: Writing::On,
            failed: Some(failed),
            abandon: Some(abandon),
            requests_done: Some(requests_done),
            buffers,
            stall_limit,
            stall: None,
            stalled: false,
        }
    }

    /// A socket operation returned `Pending`: ready with an error once it has made no
    /// progress for `stall_limit` (a client that stopped reading its replies would otherwise
    /// pin the connection's buffers, up to `max_inflight_bytes_per_connection`, for ever).
    fn poll_stall(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let limit = self.stall_limit;
        if !self.stalled {
            self.stalled = true;
            let deadline = tokio::time::Instant::now() + limit;
            match &mut self.stall {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.stall = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        let Some(sleep) = &mut self.stall else {
            return Poll::Pending;
        };
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the client read no reply for {limit:?}"),
        )))
    }

    /// Runs until the reader is done, every request finished and (unless writing failed or
    /// was abandoned) every reply is written and the socket shut down. Returns the write error
    /// if there was one.
    pub(crate) async fn run(mut self) -> std::io::Result<()> {
        std::future::poll_fn(|cx| self.poll_run(cx)).await
    }

    fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        loop {
            if let Some(abandon) = &mut self.abandon {
                if Pin::new(abandon).poll(cx).is_ready() {
                    self.abandon = None;
                    if matches!(self.writing, Writing::On) {
                        self.writing = Writing::Abandoned;
                    }
                }
            }
            while !self.closed {
                match self.rx.poll_recv(cx) {
                    Poll::Ready(Some(ToReplies::Done(out))) => self.ready.push_back(out),
                    Poll::Ready(Some(ToReplies::Waiting(req))) => self.waiting.push(req),
                    Poll::Ready(None) => self.closed = true,
                    Poll::Pending => break,
                }
            }
            // Replies the reader finished go out before the waiting requests are polled: a
            // lone NAND wait may spin in its poll (`CompletionFuture`), and these are ready now.
            if !self.ready.is_empty() && self.poll_write_out(cx).is_ready() {
                // Polled again when the socket drains; the requests are polled below.
                let _ = self.poll_flush_out(cx);
            }
            // Polls the requests just added too, which registers their wakers.
            while let Poll::Ready(Some(out)) = self.waiting.poll_next_unpin(cx) {
                self.ready.push_back(out);
            }
            let finished = self.closed && self.waiting.is_empty();
            if finished {
                if let Some(done) = self.requests_done.take() {
                    let _ = done.send(());
                }
            }
            if !matches!(self.writing, Writing::On) {
                // Dropping the replies frees their permits.
                self.ready.clear();
                if finished {
                    return Poll::Ready(
                        match std::mem::replace(&mut self.writing, Writing::Abandoned) {
                            Writing::Failed(e) => Err(e),
                            _ => Ok(()),
                        },
                    );
                }
                return Poll::Pending;
            }
            if !self.ready.is_empty() {
                ready!(self.poll_write_out(cx));
                // Look for more before flushing (replies that complete together leave in one
                // `send`), or handle a failed write at the top.
                continue;
            }
            ready!(self.poll_flush_out(cx));
            if !matches!(self.writing, Writing::On) {
                continue;
            }
            if finished {
                return match ready!(Pin::new(&mut self.w).poll_shutdown(cx)) {
                    Ok(()) => Poll::Ready(Ok(())),
                    Err(e) => {
                        self.writing = Writing::Abandoned;
                        Poll::Ready(Err(e))
                    }
                };
            }
            return Poll::Pending;
        }
    }

    /// Writes the ready replies into the buffer (a large one past it, with its header in one
    /// vectored write). Ready once all are written.
    fn poll_write_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some(out) = self.ready.front() {
            let head = &out.reply.head[..];
            let data = out.reply.data.as_deref().unwrap_or(&[]);
            while self.sent < head.len() + data.len() {
                let (h, d) = if self.sent < head.len() {
                    (&head[self.sent..], data)
                } else {
                    (&[][..], &data[self.sent - head.len()..])
                };
                let n = match Pin::new(&mut self.w)
                    .poll_write_vectored(cx, &[IoSlice::new(h), IoSlice::new(d)])
                {
                    Poll::Ready(n) => n?,
                    Poll::Pending => {
                        ready!(self.poll_stall(cx))?;
                        return Poll::Pending;
                    }
                };
                if n == 0 {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                self.stalled = false;
                self.sent += n;
            }
            self.sent = 0;
            self.unflushed = true;
            if let Some(out) = self.ready.pop_front() {
                // Written out or copied into the buffer: the read buffer is free.
                if let Some(data) = out.reply.data {
                    self.buffers.put(data);
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Writes the ready replies while writing is on (a failure stops it: [`Self::fail`]).
    /// Ready once they are all written or the writing stopped.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if matches!(self.writing, Writing::On) {
            if let Err(e) = ready!(self.poll_write_ready(cx)) {
                self.fail(e);
            }
        }
        Poll::Ready(())
    }

    /// Flushes what was written since the last flush, while writing is on (a failure stops
    /// it). Ready once flushed or the writing stopped.
    fn poll_flush_out(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.unflushed && matches!(self.writing, Writing::On) {
            // Progress shows per completed flush (tokio's `BufWriter` empties its buffer only
            // then): a flush moves at most the connection's 128 KiB write buffer, so a client
            // that reads at 2 KiB/s or more is never cut by the 60 s default.
            let flushed = match Pin::new(&mut self.w).poll_flush(cx) {
                Poll::Ready(r) => r,
                Poll::Pending => match self.poll_stall(cx) {
                    Poll::Ready(Err(e)) => Err(e),
                    _ => return Poll::Pending,
                },
            };
            self.stalled = false;
            match flushed {
                Ok(()) => self.unflushed = false,
                Err(e) => self.fail(e),
            }
        }
        Poll::Ready(())
    }

    /// A write failed: the peer is gone. Stop writing and tell the reader once.
    fn fail(&mut self, e: std::io::Error) {
        self.writing = Writing::Failed(e);
        if let Some(tx) = self.failed.take() {
            let _ = tx.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::{Notify, Semaphore};

    /// The socket's side: counts the writes that reach it; it can fail or block every write.
    #[derive(Clone, Default)]
    struct Socket {
        writes: Arc<AtomicUsize>,
        bytes: Arc<AtomicUsize>,
        mode: Mode,
    }

    #[derive(Clone, Copy, Default, PartialEq)]
    enum Mode {
        #[default]
        Accept,
        Fail,
        Block,
    }

    impl AsyncWrite for Socket {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            match self.mode {
                Mode::Accept => {
                    self.writes.fetch_add(1, Ordering::SeqCst);
                    self.bytes.fetch_add(buf.len(), Ordering::SeqCst);
                    Poll::Ready(Ok(buf.len()))
                }
                Mode::Fail => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
                // Never woken: the peer never reads.
                Mode::Block => Poll::Pending,
            }
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    struct Harness {
        tx: mpsc::UnboundedSender<ToReplies>,
        failed: oneshot::Receiver<()>,
        abandon: oneshot::Sender<()>,
        done: oneshot::Receiver<()>,
        run: tokio::task::JoinHandle<std::io::Result<()>>,
        permits: Arc<Semaphore>,
    }

    fn start(socket: Socket) -> Harness {
        let (tx, rx) = mpsc::unbounded_channel();
        let (failed_tx, failed) = oneshot::channel();
        let (abandon, abandon_rx) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let w = BufWriter::with_capacity(64 << 10, socket);
        let replies = Replies::new(
            w,
            rx,
            Arc::default(),
            failed_tx,
            abandon_rx,
            done_tx,
            Duration::from_secs(60),
        );
        Harness {
            tx,
            failed,
            abandon,
            done,
            run: tokio::spawn(replies.run()),
            permits: Arc::new(Semaphore::new(1024)),
        }
    }

    impl Harness {
        /// A reply of a 16-byte head and `data`, holding one of the harness's permits.
        fn reply(&self, data: Option<Vec<u8>>) -> Outgoing {
            let slot = Arc::clone(&self.permits)
                .try_acquire_owned()
                .expect("permit");
            Outgoing {
                reply: Reply {
                    head: vec![7; 16],
                    data,
                },
                _slot: slot,
                _bytes: None,
            }
        }

        /// A request that waits for `go`, then counts itself in `done` and replies 16 bytes.
        fn waiting(&self, go: &Arc<Notify>, done: &Arc<AtomicUsize>) {
            let out = self.reply(None);
            let (go, done) = (Arc::clone(go), Arc::clone(done));
            let req: Waiting = Box::pin(async move {
                go.notified().await;
                done.fetch_add(1, Ordering::SeqCst);
                out
            });
            assert!(self.tx.send(ToReplies::Waiting(req)).is_ok());
        }
    }

    /// Waits (a bounded time) until `f` holds.
    async fn until(f: impl Fn() -> bool) {
        for _ in 0..2000 {
            if f() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        panic!("condition not reached in 2 s");
    }

    /// Requests that complete together are polled in one pass and their replies reach the
    /// socket in one write (the old writer flushed after each). One thread, so that all 32
    /// are woken before the reply task runs again (as when the timer fires a batch of due
    /// completions before a worker picks the task up).
    #[tokio::test(flavor = "current_thread")]
    async fn replies_completing_together_leave_in_one_write() {
        let socket = Socket::default();
        let h = start(socket.clone());
        let (go, done) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
        for _ in 0..32 {
            h.waiting(&go, &done);
        }
        // Let the reply task poll them all (each registers with `go`).
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        go.notify_waiters();
        until(|| socket.bytes.load(Ordering::SeqCst) == 32 * 16).await;
        assert_eq!(done.load(Ordering::SeqCst), 32);
        assert_eq!(
            socket.writes.load(Ordering::SeqCst),
            1,
            "one write for 32 replies"
        );
        drop(h.tx);
        assert!(h.run.await.expect("reply task").is_ok());
        assert_eq!(h.permits.available_permits(), 1024, "permits released");
    }

    /// After a write failed, the reader is told, and waiting requests still run to their end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_finish_after_a_failed_write() {
        let socket = Socket {
            mode: Mode::Fail,
            ..Socket::default()
        };
        let h = start(socket);
        let (go, done) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
        let quick = Arc::new(Notify::new());
        h.waiting(&quick, &done);
        for _ in 0..8 {
            h.waiting(&go, &done);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        // The first reply's write fails (the flush of its buffer).
        quick.notify_waiters();
        let failed = tokio::time::timeout(std::time::Duration::from_secs(2), h.failed).await;
        assert!(matches!(failed, Ok(Ok(()))), "the reader is told");
        drop(h.tx);
        go.notify_waiters();
        let res = h.run.await.expect("reply task");
        assert!(res.is_err(), "the write error is returned");
        assert_eq!(
            done.load(Ordering::SeqCst),
            9,
            "every request ran to its end"
        );
        assert_eq!(h.permits.available_permits(), 1024);
    }

    /// With a peer that never reads, waiting requests are still run while the write is
    /// blocked, the reader learns when they all finished, and once the writes are abandoned
    /// the task ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_run_while_a_write_is_blocked() {
        let socket = Socket {
            mode: Mode::Block,
            ..Socket::default()
        };
        let h = start(socket);
        let (go, done) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
        // Larger than the buffer: this reply's write reaches the socket and blocks.
        let big = h.reply(Some(vec![2; 256 << 10]));
        assert!(h.tx.send(ToReplies::Done(big)).is_ok());
        for _ in 0..4 {
            h.waiting(&go, &done);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        go.notify_waiters();
        until(|| done.load(Ordering::SeqCst) == 4).await;
        drop(h.tx);
        // Every request finished: the reader is told, though the replies cannot drain.
        let told = tokio::time::timeout(std::time::Duration::from_secs(2), h.done).await;
        assert!(matches!(told, Ok(Ok(()))), "requests_done not sent");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !h.run.is_finished(),
            "still writing to a peer that does not read"
        );
        let _ = h.abandon.send(());
        let res = tokio::time::timeout(std::time::Duration::from_secs(2), h.run).await;
        assert!(matches!(res, Ok(Ok(Ok(())))), "ends once abandoned");
        assert_eq!(h.permits.available_permits(), 1024);
    }
}
