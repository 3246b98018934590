//! [`NbdServer`]: the accept loops for unix and TCP sockets, the connection limit and graceful
//! shutdown.
//!
//! # Shutdown contract
//! Each `serve_*` call owns a shutdown signal driven by the future it is given. When that future
//! resolves, the listener stops being polled (and is dropped on return); connections still in the
//! handshake are closed; connections in transmission stop reading new requests, let every
//! request already received finish its backend call and send its reply (bounded by
//! [`ServerConfig::shutdown_grace`] for a peer that does not read), shut down their write side
//! once every reply is out, and drop what the client still sends until it closes or goes
//! quiet (within the same grace: a close with unread requests would be a reset, see
//! `connection`), then close. `serve_*`
//! returns once every connection is closed. Dropping the `serve_*` future instead aborts all of
//! its connections at their next await point.
//!
//! Connections are numbered in accept order across all `serve_*` calls of one server; the
//! number picks the backend write queue (`id % queues()`).

use crate::backend::BlockBackend;
use crate::connection::{serve_connection, ConnContext};
use crate::protocol::{MAX_PAYLOAD, MAX_STRING_LEN};
use crate::stats::{Counters, ServerStats};
use crate::tls::TlsPolicy;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

/// Server settings. [`ServerConfig::default`] gives sensible values; serve calls validate it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Name of the single export; the empty name selects it too. At most 4096 bytes, no NUL.
    pub export_name: String,
    /// Description sent in `NBD_INFO_DESCRIPTION` and `NBD_OPT_LIST`. At most 4096 bytes.
    pub description: String,
    /// Connections served at once; further ones are closed right after accept.
    pub max_connections: usize,
    /// Requests in flight per connection before the server stops reading from it.
    pub max_inflight_per_connection: usize,
    /// Bytes of read/write buffers in flight per connection; at least 32 MiB (one maximal
    /// request).
    pub max_inflight_bytes_per_connection: usize,
    /// Time a client has to finish the handshake.
    pub handshake_timeout: Duration,
    /// Time a reply may wait for the client to read it (the socket accepting no byte) before
    /// the connection is closed: a client that stops reading would otherwise hold its
    /// buffers (up to `max_inflight_bytes_per_connection`) and its connection slot for ever.
    /// Waiting for the backend does not count, nor an idle connection.
    pub reply_stall_timeout: Duration,
    /// After shutdown is signalled: the time to finish receiving a request already begun and
    /// to get a request slot or buffer budget for it (timed from the signal), and, once the
    /// backend calls are done (they are always awaited), the time to send the last replies and
    /// close: the lingering close waits within it for the client to close its side, dropping
    /// what it still sends.
    pub shutdown_grace: Duration,
    /// In the lingering close after shutdown: a client that has sent nothing since the stop
    /// and sends nothing for this long is not waited for. Idle clients that do not close on
    /// end of stream (nbdfuse, an idle qemu-io or nbdsh) would otherwise hold every shutdown
    /// for the whole grace. A client that did send is waited for until it closes or the grace
    /// ends.
    pub shutdown_linger_quiet: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            export_name: "ftld".into(),
            description: "ftld flash translation layer".into(),
            max_connections: 64,
            max_inflight_per_connection: 128,
            max_inflight_bytes_per_connection: 256 << 20,
            handshake_timeout: Duration::from_secs(30),
            reply_stall_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(5),
            shutdown_linger_quiet: Duration::from_millis(200),
        }
    }
}

/// A [`ServerConfig`] that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A string exceeds the protocol's 4096-byte limit or contains NUL.
    #[error("{0} must be at most 4096 bytes without NUL")]
    BadString(&'static str),
    /// A limit is too small to serve anything (the field, and the least it may be).
    #[error("{0} is too small: at least {1}")]
    TooSmall(&'static str, u64),
}

impl ServerConfig {
    /// Checks the limits the protocol and the server need.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |s: &str| s.len() > MAX_STRING_LEN || s.contains('\0');
        if bad(&self.export_name) {
            return Err(ConfigError::BadString("export_name"));
        }
        if bad(&self.description) {
            return Err(ConfigError::BadString("description"));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::TooSmall("max_connections", 1));
        }
        if self.max_inflight_per_connection == 0 {
            return Err(ConfigError::TooSmall("max_inflight_per_connection", 1));
        }
        if self.max_inflight_bytes_per_connection < MAX_PAYLOAD as usize {
            return Err(ConfigError::TooSmall(
                "max_inflight_bytes_per_connection",
                u64::from(MAX_PAYLOAD),
            ));
        }
        if self.reply_stall_timeout.is_zero() {
            return Err(ConfigError::TooSmall("reply_stall_timeout (ns)", 1));
        }
        Ok(())
    }
}

/// The receiving side of a `serve_*` call's shutdown signal.
#[derive(Debug, Clone)]
pub(crate) struct ShutdownSignal(watch::Receiver<bool>);

impl ShutdownSignal {
    /// Resolves once shutdown is signalled (or the signalling side is gone).
    pub async fn wait(&mut self) {
        // An error means the sender was dropped, which only happens as `serve_*` returns.
        let _ = self.0.wait_for(|&down| down).await;
    }

    /// Whether shutdown has been signalled.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }
}

/// An NBD server exporting one [`BlockBackend`].
pub struct NbdServer<B: BlockBackend> {
    backend: Arc<B>,
    config: Arc<ServerConfig>,
    stats: Arc<Counters>,
    next_id: AtomicU64,
    tls: Arc<TlsPolicy>,
}

impl<B: BlockBackend> NbdServer<B> {
    /// A server for `backend`. The configuration is checked when serving starts.
    pub fn new(backend: Arc<B>, config: ServerConfig) -> Self {
        Self {
            backend,
            config: Arc::new(config),
            stats: Arc::new(Counters::default()),
            next_id: AtomicU64::new(0),
            tls: Arc::new(TlsPolicy::off()),
        }
    }

    /// Serves with `tls` (see [`crate::tls`]) instead of no TLS, on every socket.
    pub fn with_tls(mut self, tls: TlsPolicy) -> Self {
        self.tls = Arc::new(tls);
        self
    }

    /// The TLS policy.
    pub fn tls(&self) -> &TlsPolicy {
        &self.tls
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ServerStats {
        self.stats.snapshot()
    }

    /// Serves until `shutdown` resolves: then stops accepting, lets in-flight requests finish
    /// and their replies go out, closes connections, returns.
    pub async fn serve_unix(
        &self,
        listener: UnixListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        self.serve(
            || async {
                let (s, addr) = listener.accept().await?;
                let peer = addr
                    .as_pathname()
                    .map_or_else(|| "unix".to_string(), |p| p.display().to_string());
                let (r, w) = s.into_split();
                Ok((r, w, peer))
            },
            shutdown,
        )
        .await
    }

    /// Like [`NbdServer::serve_unix`] for TCP; sets `TCP_NODELAY` on every connection.
    pub async fn serve_tcp(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        self.serve(
            || async {
                let (s, addr) = listener.accept().await?;
                if let Err(e) = s.set_nodelay(true) {
                    warn!(peer = %addr, error = %e, "cannot set TCP_NODELAY");
                }
                let (r, w) = s.into_split();
                Ok((r, w, addr.to_string()))
            },
            shutdown,
        )
        .await
    }

    /// Serves one connection over any byte stream to its end (the peer's EOF, disconnect or a
    /// protocol error), as `serve_unix` serves each accepted socket: for streams that are not
    /// sockets (in-memory tests, the fuzz target in `fuzz/`).
    pub async fn serve_stream<R, W>(&self, r: R, w: W, peer: &str)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        // Kept alive to the end: a dropped sender reads as shutdown.
        let (_down_tx, down_rx) = watch::channel(false);
        let ctx = ConnContext {
            backend: Arc::clone(&self.backend),
            config: Arc::clone(&self.config),
            stats: Arc::clone(&self.stats),
            id: self.next_id.fetch_add(1, Relaxed),
            peer: peer.to_string(),
            tls: Arc::clone(&self.tls),
        };
        let _active = ActiveGuard::new(Arc::clone(&self.stats));
        serve_connection(ctx, r, w, ShutdownSignal(down_rx)).await;
    }

    /// The accept loop shared by both socket kinds.
    async fn serve<A, AF, R, W>(
        &self,
        mut accept: A,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()>
    where
        A: FnMut() -> AF,
        AF: Future<Output = std::io::Result<(R, W, String)>>,
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        self.config
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let (down_tx, down_rx) = watch::channel(false);
        let signal = ShutdownSignal(down_rx);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        info!(export = %self.config.export_name, size = self.backend.size(), "NBD server listening");

        let result = loop {
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    info!(connections = conns.len(), "NBD server shutting down");
                    break Ok(());
                }
                Some(res) = conns.join_next() => {
                    if let Err(e) = res {
                        error!(error = %e, "connection task failed");
                    }
                }
                res = accept() => match res {
                    Ok((r, w, peer)) => self.admit(&mut conns, r, w, peer, &signal),
                    Err(e) if is_transient(&e) => {
                        warn!(error = %e, "accept failed, retrying");
                        if is_resource_shortage(&e) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    Err(e) => {
                        error!(error = %e, "accept failed, stopping");
                        break Err(e);
                    }
                },
            }
        };
        let _ = down_tx.send(true);
        while let Some(res) = conns.join_next().await {
            if let Err(e) = res {
                error!(error = %e, "connection task failed");
            }
        }
        info!("NBD server stopped");
        result
    }

    /// Starts a connection task, or closes the connection if the limit is reached.
    fn admit<R, W>(
        &self,
        conns: &mut JoinSet<()>,
        r: R,
        w: W,
        peer: String,
        signal: &ShutdownSignal,
    ) where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Counters::bump(&self.stats.connections_accepted);
        if conns.len() >= self.config.max_connections {
            Counters::bump(&self.stats.connections_rejected);
            warn!(%peer, limit = self.config.max_connections, "connection refused: too many connections");
            return; // dropping the halves closes the socket
        }
        let id = self.next_id.fetch_add(1, Relaxed);
        let ctx = ConnContext {
            backend: Arc::clone(&self.backend),
            config: Arc::clone(&self.config),
            stats: Arc::clone(&self.stats),
            id,
            peer,
            tls: Arc::clone(&self.tls),
        };
        let stats = Arc::clone(&self.stats);
        let signal = signal.clone();
        conns.spawn(async move {
            let _active = ActiveGuard::new(stats);
            serve_connection(ctx, r, w, signal).await;
        });
    }
}

/// Counts a connection as active for as long as it lives (also if its task panics).
struct ActiveGuard(Arc<Counters>);

impl ActiveGuard {
    fn new(stats: Arc<Counters>) -> Self {
        stats.connections_active.fetch_add(1, Relaxed);
        Self(stats)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.connections_active.fetch_sub(1, Relaxed);
    }
}

/// Accept errors that concern one connection or a passing shortage, not the listener.
fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock | TimedOut
    ) || is_resource_shortage(e)
}

/// Out of file descriptors or memory: retry after a pause.
fn is_resource_shortage(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
