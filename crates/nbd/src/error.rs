//! Errors of the server and the single place where errors become NBD error codes.
//!
//! Two kinds of failure exist:
//! - A request that cannot be served (bad range, bad flags, device error) gets an error reply and
//!   the connection goes on. [`errno_for`] maps a [`BackendError`] to its [`Errno`];
//!   [`RequestError`] carries the code chosen by request validation plus a message for structured
//!   error chunks.
//! - A [`ProtocolError`] (wrong magic, absurd lengths, I/O failure on the socket) ends that one
//!   connection; other connections are not affected.

use crate::backend::BackendError;
use crate::protocol::Errno;

/// The NBD error code for a device error. This is the only errno mapping in the server.
pub fn errno_for(err: &BackendError) -> Errno {
    match err {
        BackendError::Io(_) => Errno::Io,
        BackendError::NoSpace(_) => Errno::NoSpc,
        BackendError::ReadOnly(_) => Errno::Perm,
        BackendError::Invalid(_) => Errno::Inval,
        BackendError::ShuttingDown => Errno::Shutdown,
    }
}

/// Why a request got an error reply: the code and a message for a human (sent in structured
/// error chunks, logged at debug level).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{errno:?}: {message}")]
pub struct RequestError {
    /// The code sent to the client.
    pub errno: Errno,
    /// What went wrong.
    pub message: String,
}

impl RequestError {
    /// An error with `errno` and `message`.
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        Self {
            errno,
            message: message.into(),
        }
    }
}

impl From<BackendError> for RequestError {
    fn from(err: BackendError) -> Self {
        Self {
            errno: errno_for(&err),
            message: err.to_string(),
        }
    }
}

/// A failure that ends one connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The socket failed or closed in the middle of a message.
    #[error("socket I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A message started with the wrong magic number.
    #[error("bad magic {found:#x} (expected {expected:#x})")]
    BadMagic {
        /// The magic number expected.
        expected: u64,
        /// The number received.
        found: u64,
    },
    /// The client set flags the server does not know or did not offer.
    #[error("unknown client flags {0:#x}")]
    UnknownClientFlags(u32),
    /// An option or request announced more data than the server is willing to read.
    #[error("{what} of {len} bytes is too large")]
    TooLarge {
        /// Which message.
        what: &'static str,
        /// Its announced length.
        len: u64,
    },
    /// The client kept negotiating past the option limit.
    #[error("more than {0} options during negotiation")]
    TooManyOptions(usize),
    /// `NBD_OPT_EXPORT_NAME` named an export that does not exist (this option cannot fail
    /// politely, so the spec requires closing).
    #[error("unknown export {0:?} requested with NBD_OPT_EXPORT_NAME")]
    UnknownExport(String),
    /// The handshake did not finish in time.
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// `NBD_OPT_EXPORT_NAME` arrived while the server shuts down (it cannot be refused politely).
    #[error("server is shutting down")]
    ShuttingDown,
    /// `NBD_OPT_EXPORT_NAME` in the clear on a server that requires TLS (it cannot be refused
    /// politely, so the spec requires closing).
    #[error("NBD_OPT_EXPORT_NAME without TLS on a server that requires TLS")]
    TlsRequired,
    /// After `STARTTLS` was acknowledged the client sent bytes before its TLS handshake could
    /// start (they would have been read in the clear).
    #[error("data sent after NBD_OPT_STARTTLS before the TLS handshake")]
    DataBeforeTls,
    /// The TLS handshake failed (wrong CA, no or bad client certificate, not TLS at all).
    #[error("TLS handshake: {0}")]
    TlsHandshake(std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_is_total_and_matches_the_spec() {
        assert_eq!(errno_for(&BackendError::Io("x".into())).code(), 5);
        assert_eq!(errno_for(&BackendError::NoSpace("x".into())).code(), 28);
        assert_eq!(errno_for(&BackendError::ReadOnly("x".into())).code(), 1);
        assert_eq!(errno_for(&BackendError::Invalid("x".into())).code(), 22);
        assert_eq!(errno_for(&BackendError::ShuttingDown).code(), 108);
    }
}
