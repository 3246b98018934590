//! An asynchronous NBD (Network Block Device) server on tokio, generic over a [`BlockBackend`].
//!
//! ftld serves its flash translation layer through this crate when the kernel has no ublk; any
//! NBD client (the kernel's `nbd` driver via `nbd-client`, qemu, libnbd's `nbdinfo`/`nbdcopy`/
//! `nbdfuse`, fio) can then use it as a disk.
//!
//! ```text
//!  NbdServer::serve_unix / serve_tcp      accept loop, connection limit, shutdown   (server)
//!        └─ one task per connection       fixed newstyle handshake                  (handshake)
//!              └─ transmission            reader → request tasks → reply writer     (connection)
//!                    └─ validate/execute  spec error codes, reply encoding          (request)
//!                          └─ BlockBackend::read / write / flush / trim / write_zeroes
//! ```
//!
//! What the server speaks (details in each module):
//! - handshake: fixed newstyle with `NBD_FLAG_NO_ZEROES`; options `GO`, `INFO`, `EXPORT_NAME`,
//!   `LIST`, `ABORT`, `STRUCTURED_REPLY`; info `EXPORT`, `NAME`, `DESCRIPTION`, `BLOCK_SIZE`
//!   (512 / 4096 / 32 MiB); everything else `NBD_REP_ERR_UNSUP`;
//! - transmission: `READ`, `WRITE`, `FLUSH`, `TRIM`, `WRITE_ZEROES` (with `NO_HOLE` and
//!   `FAST_ZERO`), `CACHE`, `DISC`; `FUA` on every command; simple or structured replies; many
//!   requests in flight per connection, replies in completion order; `CAN_MULTI_CONN`.
//!
//! Not implemented: TLS, metadata contexts / `NBD_CMD_BLOCK_STATUS`, extended headers, resize,
//! more than one export.
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
mod connection;
pub mod error;
mod handshake;
pub mod mem;
pub mod protocol;
mod request;
mod server;
mod stats;

pub use backend::{BackendError, BlockBackend};
pub use connection::WRITE_DISCARD_LIMIT;
pub use error::{errno_for, ProtocolError, RequestError};
pub use handshake::{MAX_DISCARD_OPTION_LEN, MAX_OPTIONS, MAX_OPTION_LEN};
pub use mem::MemBackend;
pub use server::{ConfigError, NbdServer, ServerConfig};
pub use stats::{ErrorCounts, RequestCounts, ServerStats};
