//! Where a real-time replay sends its requests: the FTL in this process with timing `real`
//! ([`FtlTarget`]), any NBD export ([`NbdTarget`], by URI), or a block device or file
//! ([`FileTarget`], a real SSD too) — so emulation and hardware are measured by one tool.
//!
//! A [`Target`] is called from many threads at once, each call blocking until the request
//! completes, as a synchronous I/O engine does.

mod file;
mod ftl;
mod nbd;

use std::path::Path;

pub use self::file::FileTarget;
pub use self::ftl::FtlTarget;
pub use self::nbd::NbdTarget;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The device answered this request with an error (counted; the replay goes on).
    #[error("{0}")]
    Request(String),
    /// The device is gone or refuses all writes; the replay stops.
    #[error("{0}")]
    Fatal(String),
}

/// A block device a replay drives in real time.
pub trait Target: Sync {
    /// What it is, for the summary and messages.
    fn describe(&self) -> String;
    /// Size in bytes.
    fn capacity(&self) -> u64;
    /// Reads `buf.len()` bytes at `offset`. `stream` is the issuing stream (the FTL target
    /// uses it as the write queue; others ignore it).
    fn read(&self, stream: usize, offset: u64, buf: &mut [u8]) -> Result<(), TargetError>;
    /// Writes `data` at `offset`; with `fua`, durable when this returns.
    fn write(&self, stream: usize, offset: u64, data: &[u8], fua: bool) -> Result<(), TargetError>;
    /// Makes every completed write durable.
    fn flush(&self) -> Result<(), TargetError>;
    /// Discards a range.
    fn trim(&self, stream: usize, offset: u64, len: u64, fua: bool) -> Result<(), TargetError>;
    /// Write queues a stream maps to (the FTL target's; 1 for a target without any): an
    /// open-loop replay keeps a sequential stream on one of them (`queues.rs`).
    fn queues(&self) -> usize {
        1
    }
    /// (host bytes written, NAND bytes programmed) when the target can tell (an FTL in this
    /// process), for write amplification.
    fn waf_counters(&self) -> Option<(u64, u64)> {
        None
    }
}

/// Opens `spec`: an NBD URI (`nbd://...`, `nbd+unix://...`) or the path of a block device
/// or file. `direct`: open a device or file with `O_DIRECT` (bypassing the page cache).
pub fn open(spec: &str, direct: bool) -> Result<Box<dyn Target>, TargetError> {
    if spec.contains("://") {
        Ok(Box::new(NbdTarget::connect(spec)?))
    } else {
        Ok(Box::new(FileTarget::open(Path::new(spec), direct)?))
    }
}
