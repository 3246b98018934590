//! Server counters: lock-free atomics updated by the connection tasks, read as a
//! [`ServerStats`] snapshot (serde-serialisable, for the daemon's metrics).
//!
//! Counters are monotonic except `connections_active`. Each is updated with `Relaxed` ordering,
//! so a snapshot is not atomic across fields (good enough for metrics, not for invariants).

use crate::protocol::{self, Errno};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of the server's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServerStats {
    /// Connections accepted since the server started (including rejected ones).
    pub connections_accepted: u64,
    /// Connections open now.
    pub connections_active: u64,
    /// Connections closed at once because `max_connections` were open.
    pub connections_rejected: u64,
    /// Handshakes that reached the transmission phase.
    pub handshakes_completed: u64,
    /// Connections closed because the peer broke the protocol (bad magic, absurd lengths, ...).
    pub protocol_errors: u64,
    /// TLS handshakes that succeeded (after `NBD_OPT_STARTTLS`).
    pub tls_handshakes: u64,
    /// TLS handshakes that failed (the connection was closed; not in `protocol_errors`).
    pub tls_failures: u64,
    /// Requests received, by command.
    pub requests: RequestCounts,
    /// Error replies sent, by error code.
    pub errors: ErrorCounts,
    /// Payload bytes returned by successful reads.
    pub bytes_read: u64,
    /// Payload bytes stored by successful writes.
    pub bytes_written: u64,
}

/// Requests received, by command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    /// `NBD_CMD_READ`.
    pub read: u64,
    /// `NBD_CMD_WRITE`.
    pub write: u64,
    /// `NBD_CMD_FLUSH`.
    pub flush: u64,
    /// `NBD_CMD_TRIM`.
    pub trim: u64,
    /// `NBD_CMD_WRITE_ZEROES`.
    pub write_zeroes: u64,
    /// `NBD_CMD_CACHE`.
    pub cache: u64,
    /// `NBD_CMD_BLOCK_STATUS`.
    pub block_status: u64,
    /// `NBD_CMD_DISC`.
    pub disc: u64,
    /// Anything else (answered with `NBD_EINVAL`).
    pub unknown: u64,
}

/// Error replies sent, by error code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// `NBD_EPERM`.
    pub eperm: u64,
    /// `NBD_EIO`.
    pub eio: u64,
    /// `NBD_EINVAL`.
    pub einval: u64,
    /// `NBD_ENOSPC`.
    pub enospc: u64,
    /// `NBD_ESHUTDOWN`.
    pub eshutdown: u64,
    /// Any other code.
    pub other: u64,
}

/// The live counters behind [`ServerStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub connections_accepted: AtomicU64,
    pub connections_active: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub handshakes_completed: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub tls_handshakes: AtomicU64,
    pub tls_failures: AtomicU64,
    read: AtomicU64,
    write: AtomicU64,
    flush: AtomicU64,
    trim: AtomicU64,
    write_zeroes: AtomicU64,
    cache: AtomicU64,
    block_status: AtomicU64,
    disc: AtomicU64,
    unknown: AtomicU64,
    eperm: AtomicU64,
    eio: AtomicU64,
    einval: AtomicU64,
    enospc: AtomicU64,
    eshutdown: AtomicU64,
    other_errors: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
}

impl Counters {
    /// Counts one request of command `kind`.
    pub fn request(&self, kind: u16) {
        let c = match kind {
            protocol::NBD_CMD_READ => &self.read,
            protocol::NBD_CMD_WRITE => &self.write,
            protocol::NBD_CMD_FLUSH => &self.flush,
            protocol::NBD_CMD_TRIM => &self.trim,
            protocol::NBD_CMD_WRITE_ZEROES => &self.write_zeroes,
            protocol::NBD_CMD_CACHE => &self.cache,
            protocol::NBD_CMD_BLOCK_STATUS => &self.block_status,
            protocol::NBD_CMD_DISC => &self.disc,
            _ => &self.unknown,
        };
        c.fetch_add(1, Relaxed);
    }

    /// Counts one error reply.
    pub fn error(&self, errno: Errno) {
        let c = match errno {
            Errno::Perm => &self.eperm,
            Errno::Io => &self.eio,
            Errno::Inval => &self.einval,
            Errno::NoSpc => &self.enospc,
            Errno::Shutdown => &self.eshutdown,
            _ => &self.other_errors,
        };
        c.fetch_add(1, Relaxed);
    }

    /// Adds 1 to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// A snapshot.
    pub fn snapshot(&self) -> ServerStats {
        let l = |c: &AtomicU64| c.load(Relaxed);
        ServerStats {
            connections_accepted: l(&self.connections_accepted),
            connections_active: l(&self.connections_active),
            connections_rejected: l(&self.connections_rejected),
            handshakes_completed: l(&self.handshakes_completed),
            protocol_errors: l(&self.protocol_errors),
            tls_handshakes: l(&self.tls_handshakes),
            tls_failures: l(&self.tls_failures),
            requests: RequestCounts {
                read: l(&self.read),
                write: l(&self.write),
                flush: l(&self.flush),
                trim: l(&self.trim),
                write_zeroes: l(&self.write_zeroes),
                cache: l(&self.cache),
                block_status: l(&self.block_status),
                disc: l(&self.disc),
                unknown: l(&self.unknown),
            },
            errors: ErrorCounts {
                eperm: l(&self.eperm),
                eio: l(&self.eio),
                einval: l(&self.einval),
                enospc: l(&self.enospc),
                eshutdown: l(&self.eshutdown),
                other: l(&self.other_errors),
            },
            bytes_read: l(&self.bytes_read),
            bytes_written: l(&self.bytes_written),
        }
    }
}
