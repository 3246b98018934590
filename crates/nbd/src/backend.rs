//! The block-device contract between the NBD server and whatever stores the data.
//!
//! The FTL implements [`BlockBackend`]; this crate never depends on it. [`crate::MemBackend`] is
//! the reference implementation used by the tests and examples.
//!
//! # Calling contract
//! - Offsets and lengths are bytes. Before calling, the server has checked that the range lies
//!   inside `[0, size())`, that offset and length are multiples of 512, that the length is not
//!   zero and (for `read`/`write`) at most 32 MiB, and that no write-type call reaches a
//!   read-only backend. A [`BackendError`] is therefore a real device error.
//! - Calls from one connection and from different connections run concurrently; the backend
//!   orders them itself. The server never reorders a single request's effects.
//! - `queue` passed to [`BlockBackend::write`], [`BlockBackend::trim`] and
//!   [`BlockBackend::write_zeroes`] is `connection index % queues()`, so each connection sticks
//!   to one write queue.
//! - FUA (`fua == true`): resolve only once the data written by this call is durable.
//!   `flush`: resolve only once every write that completed before the call is durable.
//!
//! # Cancellation contract
//! The server polls every backend future to completion, also when the client disconnects or the
//! server shuts down: a backend never has to cope with a future dropped half-way (only a
//! runtime shutdown can do that).

use std::future::Future;

/// What the NBD server needs from a block device. Offsets/lengths are bytes; the server has
/// already checked range and 512-byte alignment before calling (so backend errors are real
/// device errors).
pub trait BlockBackend: Send + Sync + 'static {
    /// Size of the device in bytes (the server exports it rounded down to 512 bytes).
    fn size(&self) -> u64;
    /// Whether the device refuses writes; the export is then advertised read-only.
    fn read_only(&self) -> bool;
    /// Number of independent write queues; the server passes `queue` = connection index % queues.
    fn queues(&self) -> usize;
    /// Fills `buf` with the bytes at `offset`. On `Ok` every byte of `buf` must have been
    /// written: the server reuses a connection's read buffers, so `buf` may hold an earlier
    /// read's bytes when it is passed in (on `Err` nothing of it is sent).
    fn read(
        &self,
        offset: u64,
        buf: &mut [u8],
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Writes `data` at `offset` through write queue `queue`; durable before resolving if `fua`.
    /// The buffer is handed over, so a backend may keep it instead of copying it.
    fn write(
        &self,
        queue: usize,
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Makes every completed write durable.
    fn flush(&self) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Discards the range through write queue `queue`; after trim the range reads as zeroes.
    fn trim(
        &self,
        queue: usize,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Makes the range read as zeroes. Expected to be fast (unmapping), so the server answers
    /// `NBD_CMD_FLAG_FAST_ZERO` requests by calling it. `queue` as for [`BlockBackend::write`].
    fn write_zeroes(
        &self,
        queue: usize,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
    /// Allocation of `[offset, offset + len)` (checked as for `read`, but `len` may be up to
    /// 4 GiB) as consecutive runs from `offset`, at most `max_runs` of them (1 for a client's
    /// `REQ_ONE`: stop at the first change). They may cover less than `len` (the client asks
    /// again for the rest) but not more. The default says the whole range is allocated, which
    /// is always true enough: a client then reads it.
    fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> impl Future<Output = Result<Vec<Extent>, BackendError>> + Send {
        let _ = (offset, max_runs);
        std::future::ready(Ok(vec![Extent { len, hole: false }]))
    }
}

/// A run of bytes of one allocation state, from [`BlockBackend::block_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Bytes in the run.
    pub len: u64,
    /// Not allocated: reads as zeroes (an FTL's unmapped page).
    pub hole: bool,
}

/// A device error reported by a [`BlockBackend`]. The server maps it to an NBD error code in
/// one place (`crate::error::errno_for`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Media or internal failure (`NBD_EIO`).
    #[error("I/O error: {0}")]
    Io(String),
    /// The device ran out of space (`NBD_ENOSPC`).
    #[error("no space left: {0}")]
    NoSpace(String),
    /// The device refuses writes (`NBD_EPERM`).
    #[error("read-only: {0}")]
    ReadOnly(String),
    /// The device rejects the request (`NBD_EINVAL`).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The device is going away (`NBD_ESHUTDOWN`).
    #[error("shutting down")]
    ShuttingDown,
}
