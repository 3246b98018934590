//! An asynchronous NBD (Network Block Device) server on tokio, generic over a [`BlockBackend`].
//!
//! ftld serves its flash translation layer through this crate when the kernel has no ublk; any
//! NBD client (the kernel's `nbd` driver via `nbd-client`, qemu, libnbd's `nbdinfo`/`nbdcopy`/
//! `nbdfuse`, fio) can then use it as a disk.
//!
//! ```text
//!  NbdServer::serve_unix / serve_tcp      accept loop, connection limit, shutdown   (server)
//!        └─ one task per connection       fixed newstyle handshake                  (handshake)
//!              └─ transmission            reader → requests polled once → reply task     (connection)
//!                    ├─ request reader    headers buffered, large payloads read directly  (reader)
//!                    ├─ reply task        runs waiting requests, writes replies in batches (replies)
//!                    └─ validate/execute  spec error codes, reply encoding          (request)
//!                          └─ BlockBackend::read / write / flush / trim / write_zeroes
//! ```
//!
//! What the server speaks (details in each module):
//! - handshake: fixed newstyle with `NBD_FLAG_NO_ZEROES`; options `GO`, `INFO`, `EXPORT_NAME`,
//!   `LIST`, `ABORT`, `STRUCTURED_REPLY`, `STARTTLS`, `LIST_META_CONTEXT`,
//!   `SET_META_CONTEXT`; info `EXPORT`, `NAME`, `DESCRIPTION`,
//!   `BLOCK_SIZE` (512 / 4096 / 32 MiB); everything else `NBD_REP_ERR_UNSUP`;
//! - TLS ([`tls`], rustls): off, offered (`on`) or required (`require`), with optional client
//!   certificate verification; certificates in nbdkit's and qemu's directory layout;
//! - metadata context `base:allocation` (`LIST_META_CONTEXT`, `SET_META_CONTEXT`, with
//!   structured replies), answered from [`BlockBackend::block_status`]: which ranges are holes
//!   that read as zeroes (an FTL's unmapped pages), for `qemu-img map`, `nbdinfo --map`,
//!   `nbdcopy`;
//! - transmission: `READ`, `WRITE`, `FLUSH`, `TRIM`, `WRITE_ZEROES` (with `NO_HOLE` and
//!   `FAST_ZERO`), `CACHE`, `BLOCK_STATUS` (with `REQ_ONE`), `DISC`; `FUA` on every command;
//!   simple or structured replies; many requests in flight per connection, replies in
//!   completion order; `CAN_MULTI_CONN`.
//!
//! [`client`] is a blocking client for any NBD server (`ftld replay --target` uses it).
//!
//! Not implemented: TLS with pre-shared keys, metadata contexts other than `base:allocation`,
//! extended headers, resize, more than one export.
//!
//! # Decisions where the spec leaves a choice
//! - Zero-length `READ`/`WRITE`/`TRIM`/`WRITE_ZEROES`/`CACHE` (behaviour unspecified, "SHOULD NOT
//!   disconnect"): answered `NBD_EINVAL`, never passed to the backend (as nbdkit does).
//! - Requests must be 512-byte aligned (advertised as the minimum block size, also to clients
//!   that did not ask for `NBD_INFO_BLOCK_SIZE`); misaligned ones get `NBD_EINVAL`. The export
//!   size is the backend size rounded down to 512.
//! - `READ`/`WRITE` over 32 MiB: `NBD_EINVAL`. The payload of a refused `WRITE` is read and
//!   discarded up to 64 MiB ([`WRITE_DISCARD_LIMIT`]) so the stream stays in sync; a larger
//!   announced payload closes the connection (the spec allows a hard disconnect for
//!   denial-of-service sized payloads). `TRIM`/`WRITE_ZEROES` may cover the whole export.
//! - `NBD_CMD_FLAG_FUA` is accepted on every command; `FLUSH` needs offset and length 0.
//! - `CACHE` validates its range and succeeds without touching the backend.
//! - `WRITE_ZEROES` always calls the backend's (unmapping) `write_zeroes`, which satisfies
//!   `NO_HOLE` on an FTL (no thin provisioning to run out of) and is fast, so `FAST_ZERO`
//!   succeeds rather than failing with `NBD_ENOTSUP`.
//! - A read-only export advertises neither `SEND_TRIM` nor `SEND_WRITE_ZEROES` (nor
//!   `SEND_FAST_ZERO`); write-type commands sent anyway get `NBD_EPERM`.
//! - Structured read replies are one `OFFSET_DATA` chunk flagged `DONE`, so `DF` always holds;
//!   failures are a single `NBD_REPLY_TYPE_ERROR` chunk with a message. Other commands answer
//!   success with a simple reply and failure with an error chunk.
//! - Option haggling: payloads over 8 KiB get `NBD_REP_ERR_TOO_BIG` (read and discarded up to
//!   1 MiB, else the connection closes); at most 128 options per connection (before and after
//!   `STARTTLS` together); `STARTTLS` on a server without TLS gets `NBD_REP_ERR_POLICY`; a
//!   repeated `STRUCTURED_REPLY` is acknowledged again. Clients without `NBD_FLAG_C_FIXED_NEWSTYLE` are served too.
//! - Replies to `NBD_OPT_LIST` carry the description after the name in `NBD_REP_SERVER`.
//! - Limits: `max_connections` (extra connections are closed right after accept), 128 requests
//!   and 256 MiB of buffers in flight per connection (then the server stops reading from it),
//!   and `reply_stall_timeout` (60 s): a client whose socket takes no reply byte that long is
//!   disconnected, so one that stops reading cannot hold its buffers and slot for ever. An
//!   idle connection (no request) is kept however long.
//!
//! ```no_run
//! use ftl_nbd::{MemBackend, NbdServer, ServerConfig};
//! use std::sync::Arc;
//!
//! # async fn run() -> std::io::Result<()> {
//! let server = NbdServer::new(Arc::new(MemBackend::new(64 << 20)), ServerConfig::default());
//! let listener = tokio::net::UnixListener::bind("/tmp/ftld.sock")?;
//! server.serve_unix(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

pub mod backend;
mod buffers;
pub mod client;
mod connection;
pub mod error;
mod handshake;
pub mod mem;
pub mod protocol;
mod reader;
mod replies;
mod request;
mod server;
mod stats;
pub mod tls;

pub use backend::{BackendError, BlockBackend, Extent};
pub use connection::WRITE_DISCARD_LIMIT;
pub use error::{errno_for, ProtocolError, RequestError};
pub use handshake::{MAX_DISCARD_OPTION_LEN, MAX_OPTIONS, MAX_OPTION_LEN};
pub use mem::MemBackend;
pub use server::{ConfigError, NbdServer, ServerConfig};
pub use stats::{ErrorCounts, RequestCounts, ServerStats};
pub use tls::{TlsError, TlsMode, TlsPolicy};
