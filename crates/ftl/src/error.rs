//! Errors of the FTL's public API.

use std::path::PathBuf;

/// Why an FTL operation failed. Frontends map these to protocol errors in one place each.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FtlError {
    #[error("request at offset {offset} length {len} is not aligned to 512-byte sectors")]
    Misaligned { offset: u64, len: u64 },
    #[error("request at offset {offset} length {len} runs past the end of the device ({capacity} bytes)")]
    OutOfRange {
        offset: u64,
        len: u64,
        capacity: u64,
    },
    #[error("device is read-only: {0}")]
    ReadOnly(String),
    /// The device turned read-only because the file system holding its (sparse) image has no
    /// room left for a page: the write needs space the host does not have.
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("uncorrectable read at logical page {lpn} after {retries} retries")]
    Uncorrectable { lpn: u32, retries: u32 },
    /// Recovery found the page's newest version in a block erased or marked bad since the
    /// checkpoint that mapped it, with no newer copy or trim (damage on the image: the device
    /// is read-only). A read of it fails rather than return zeroes as its data.
    #[error("logical page {lpn} was lost: recovery found its block erased or bad since the checkpoint, with no newer copy")]
    Lost { lpn: u32 },
    #[error("device is closed")]
    Closed,
    #[error("NAND error: {0}")]
    Nand(#[from] nand_model::NandError),
    #[error(transparent)]
    Image(#[from] nand_model::ImageError),
    #[error("image {path}: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("a device exporting {pages} pages of 4 KiB needs {shortfall} for {what}")]
    OutOfMemory {
        pages: u64,
        /// What the memory is for.
        what: &'static str,
        shortfall: nand_model::host_memory::Shortfall,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = FtlError> = std::result::Result<T, E>;
