//! Error types: geometry validation, per-operation NAND errors (rule violations and injected
//! faults) and image-file errors. Each names what it is about, so a log line is enough to act on.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::geometry::{BlockAddr, PageAddr};

/// Why a [`crate::Geometry`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// A count that must be at least 1 is 0.
    #[error("{field} must be at least 1")]
    Zero {
        /// The field's name.
        field: &'static str,
    },
    /// A block needs at least two pages (otherwise "next page" rules are meaningless).
    #[error("pages_per_block must be at least 2, got {pages_per_block}")]
    PagesPerBlock {
        /// The value given.
        pages_per_block: u32,
    },
    /// The page size is not a power of two in 4096..=32768.
    #[error("page_size must be a power of two from 4096 to 32768, got {page_size}")]
    PageSize {
        /// The value given.
        page_size: u32,
    },
    /// The OOB size is outside 64..=page_size/8.
    #[error("oob_size must be from 64 to {max} (page_size / 8), got {oob_size}")]
    OobSize {
        /// The value given.
        oob_size: u32,
        /// The largest value allowed for this page size.
        max: u32,
    },
    /// A PMCD device's controller count is outside 1..=max.
    #[error("controllers must be from 1 to {max}, got {controllers}")]
    Controllers {
        /// The value given.
        controllers: u32,
        /// The largest count accepted.
        max: u32,
    },
    /// Upper-page latencies set past the cell's page types (an SLC part with an MSB latency),
    /// or a cell type field that names none.
    #[error("cell: {reason}")]
    Cell {
        /// What is wrong.
        reason: String,
    },
    /// The plane count is outside 1..=max.
    #[error("planes must be from 1 to {max} (and at most blocks_per_bank), got {planes}")]
    Planes {
        /// The value given.
        planes: u32,
        /// The largest count accepted for this geometry.
        max: u32,
    },
    /// Feature flags in an image header that this build does not know.
    #[error("unknown feature flags {flags:#x} in the header")]
    Flags {
        /// The flags word.
        flags: u32,
    },
    /// An operation latency is longer than the model accepts.
    #[error("{field} must be at most {max_ns} ns (a second), got {ns} ns")]
    Latency {
        /// The field's name.
        field: &'static str,
        /// The value given, in nanoseconds.
        ns: u128,
        /// The largest value accepted.
        max_ns: u128,
    },
    /// The channel is slower than the model accepts.
    #[error("channel_bytes_per_sec must be 0 (instant) or at least {min}, got {bytes_per_sec}")]
    ChannelSpeed {
        /// The value given.
        bytes_per_sec: u64,
        /// The slowest accepted.
        min: u64,
    },
    /// Read-retry asks for more steps than the model allows.
    #[error("read_retry.max_steps must be at most {max}, got {max_steps}")]
    ReadRetrySteps {
        /// The value given.
        max_steps: u32,
        /// The largest value accepted.
        max: u32,
    },
    /// Pages (or banks) would not be addressable with a u32 global index.
    #[error("geometry has {total_pages} pages; at most 2^32 - 1 are addressable")]
    TooLarge {
        /// Pages the geometry would have.
        total_pages: u64,
    },
}

/// Which caller buffer a [`NandError::BufferSize`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    /// The page-data buffer.
    Data,
    /// The OOB buffer.
    Oob,
}

impl std::fmt::Display for BufferKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BufferKind::Data => "data",
            BufferKind::Oob => "oob",
        })
    }
}

/// Error of one NAND operation.
///
/// Two families: **rule violations** (the caller broke a flash rule; each one is counted by
/// [`crate::NandDevice::violations`] and a correct FTL never triggers them) and **faults**
/// (the medium failed: injected by [`crate::FaultInjector`] or wear-out; [`NandError::is_fault`]
/// is true and the FTL is expected to handle them).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NandError {
    /// Violation: the block (or its bank) does not exist in this geometry.
    #[error("{block}: address out of range")]
    BlockOutOfRange {
        /// The address given.
        block: BlockAddr,
    },
    /// Violation: the page does not exist in this geometry.
    #[error("{page}: address out of range")]
    PageOutOfRange {
        /// The address given.
        page: PageAddr,
    },
    /// Violation: pages of a block must be programmed in order; `got` skips ahead of `expected`.
    #[error("{block}: program of page {got} but the next free page is {expected}")]
    NotNextPage {
        /// The block.
        block: BlockAddr,
        /// The block's next free page (its programmed page count).
        expected: u32,
        /// The page the caller tried to program.
        got: u32,
    },
    /// Violation: the page is already programmed (it must be erased with its block first).
    #[error("{page}: already programmed")]
    AlreadyProgrammed {
        /// The page.
        page: PageAddr,
    },
    /// Violation: the block is marked bad; no read, program or erase may touch it.
    #[error("{block}: block is bad")]
    BadBlock {
        /// The block.
        block: BlockAddr,
    },
    /// Violation: a buffer has the wrong size for the operation.
    #[error("{page}: {buffer} buffer of {len} bytes at offset {offset} does not fit ({rule})")]
    BufferSize {
        /// The page.
        page: PageAddr,
        /// Which buffer.
        buffer: BufferKind,
        /// Column offset of the access (0 for program).
        offset: u32,
        /// The buffer's length.
        len: usize,
        /// What would have been accepted.
        rule: &'static str,
    },
    /// Violation: a copyback must stay inside one bank (the page register is the die's).
    #[error("copyback from {src} to {dst}: source and destination are on different banks")]
    CopybackAcrossBanks {
        /// The source page.
        src: PageAddr,
        /// The destination page.
        dst: PageAddr,
    },
    /// Violation: a multi-plane operation's pages must be on one bank, at one page index, in
    /// distinct planes, at most `planes` of them.
    #[error("multi-plane operation on {pages:?}: {rule}")]
    MultiPlane {
        /// The pages given.
        pages: Vec<PageAddr>,
        /// The rule broken.
        rule: &'static str,
    },
    /// Fault: the program failed. The page is consumed (the write pointer moved past it) and
    /// reads back as garbage; the FTL should rewrite the data elsewhere and retire the block.
    #[error("{page}: program failed")]
    ProgramFailed {
        /// The page (the first failed one of a multi-plane program).
        page: PageAddr,
        /// Which pages of the operation failed: bit `i` for the `i`-th page given to
        /// [`crate::NandDevice::program_planes`] (bit 0 alone for a single-page program). The
        /// other pages of a multi-plane program were programmed.
        failed_mask: u32,
    },
    /// Fault: the erase failed; the block is now bad (persisted).
    #[error("{block}: erase failed, block marked bad")]
    EraseFailed {
        /// The block.
        block: BlockAddr,
    },
    /// Fault: the read was uncorrectable. One-shot: retrying the same read succeeds.
    #[error("{page}: uncorrectable read (retry)")]
    Uncorrectable {
        /// The page.
        page: PageAddr,
    },
    /// Fault: the block reached its endurance; the erase was refused and the block is now bad.
    #[error("{block}: worn out after {erase_count} erases, block marked bad")]
    WornOut {
        /// The block.
        block: BlockAddr,
        /// Its erase count.
        erase_count: u32,
    },
    /// The image's file system has no room for the page (the image is sparse, and the page's
    /// frame or OOB entry was a hole): nothing of it was stored, and it is not programmed.
    #[error("{page}: not programmed: the image's file system has no room for it ({source})")]
    NoSpace {
        /// The page (the first that found no room, of a multi-plane program).
        page: PageAddr,
        /// What the kernel said.
        source: io::Error,
    },
    /// The image was opened read-only ([`crate::Access::ReadOnly`]): a program, copyback,
    /// erase or bad-block mark is refused before it changes anything.
    #[error("the image is open read-only: no program, erase or bad-block mark")]
    ReadOnly,
    /// The backing file failed.
    #[error("image i/o: {0}")]
    Io(#[from] io::Error),
}

impl NandError {
    /// True for medium faults (injected or wear-out), false for rule violations and I/O errors.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            NandError::ProgramFailed { .. }
                | NandError::EraseFailed { .. }
                | NandError::Uncorrectable { .. }
                | NandError::WornOut { .. }
        )
    }

    /// True for flash-rule violations (the ones [`crate::NandDevice::violations`] counts).
    pub fn is_violation(&self) -> bool {
        !self.is_fault()
            && !matches!(
                self,
                NandError::Io(_) | NandError::NoSpace { .. } | NandError::ReadOnly
            )
    }
}

/// Error of creating, opening or syncing an image file. Every variant names the file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The file does not exist.
    #[error("image {}: not found", path.display())]
    NotFound {
        /// The image path.
        path: PathBuf,
    },
    /// `create` refuses to overwrite an existing file.
    #[error("image {}: already exists (refusing to overwrite)", path.display())]
    AlreadyExists {
        /// The image path.
        path: PathBuf,
    },
    /// The file does not start with the `FTLDNAND` magic.
    #[error("image {}: not a NAND image (bad magic)", path.display())]
    NotAnImage {
        /// The image path.
        path: PathBuf,
    },
    /// The header (magic and checksum good) gives its own size as other than this build's.
    #[error("image {}: the header says it is {found} bytes long, but this build's header is {expected} (an image of another format, or a corrupt header)", path.display())]
    HeaderSize {
        /// The image path.
        path: PathBuf,
        /// The size the header gives.
        found: u32,
        /// The size this build writes and reads.
        expected: u32,
    },
    /// The header's CRC does not match its contents.
    #[error("image {}: header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})", path.display())]
    BadChecksum {
        /// The image path.
        path: PathBuf,
        /// CRC stored in the header.
        stored: u32,
        /// CRC of the header bytes as read.
        computed: u32,
    },
    /// The image was written by another format version.
    #[error("image {}: unsupported format version {found} (this build reads {supported} to {}: {supported} for SLC TMCD devices, {} for PMCD, {} with multi-level cells or read-retry)", path.display(), supported + 2, supported + 1, supported + 2)]
    UnsupportedVersion {
        /// The image path.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build supports.
        supported: u32,
    },
    /// The image's geometry differs from the one the caller expects.
    #[error("image {}: geometry mismatch in {field}: image has {image}, requested {requested}", path.display())]
    GeometryMismatch {
        /// The image path.
        path: PathBuf,
        /// Name of the differing [`crate::Geometry`] field.
        field: &'static str,
        /// Value in the image.
        image: u64,
        /// Value requested.
        requested: u64,
    },
    /// A frame-table entry is impossible (the file was damaged or written by something else).
    #[error("image {}: frame table entry of bank {bank}, page {page} is corrupt: {reason}", path.display())]
    CorruptFrameTable {
        /// The image path.
        path: PathBuf,
        /// The bank.
        bank: u32,
        /// The page's index within the bank.
        page: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A block-table entry is impossible (the file was damaged or written by something else).
    #[error("image {}: block table entry of bank {bank}, block {block} is corrupt: programmed_pages is {programmed_pages}, but a block has {pages_per_block} pages", path.display())]
    CorruptBlockTable {
        /// The image path.
        path: PathBuf,
        /// The bank.
        bank: u32,
        /// The block's index within the bank.
        block: u32,
        /// The entry's programmed-page count.
        programmed_pages: u32,
        /// Pages per block of the image's geometry.
        pages_per_block: u32,
    },
    /// The file system holding the (sparse) image has no room for a bank's block table.
    #[error("image {}: its file system has no room for the block table of bank {bank} ({error}); free some space or move the image", path.display())]
    NoRoom {
        /// The image path.
        path: PathBuf,
        /// The bank.
        bank: u32,
        /// What the kernel said.
        error: String,
    },
    /// The file is shorter than its header says it must be.
    #[error("image {}: truncated: expected {expected} bytes, found {actual}", path.display())]
    Truncated {
        /// The image path.
        path: PathBuf,
        /// Bytes the layout needs.
        expected: u64,
        /// Bytes in the file.
        actual: u64,
    },
    /// Another process (or another device in this process) holds the image.
    #[error("image {}: locked by {}", path.display(), match pid { Some(p) => format!("process {p}"), None => "another process".to_string() })]
    Locked {
        /// The image path.
        path: PathBuf,
        /// Holder's pid when the kernel reports it.
        pid: Option<i32>,
    },
    /// The geometry (given to `create`, or stored in the image) is invalid.
    #[error("image {}: invalid geometry: {source}", path.display())]
    InvalidGeometry {
        /// The image path.
        path: PathBuf,
        /// What is wrong.
        source: GeometryError,
    },
    /// `fallocate` could not allocate the whole file ([`crate::NandDevice::preallocate`]).
    /// (The cause is part of the message, not a `source`: chained printing would repeat it.)
    #[error("image {}: cannot preallocate its {bytes} bytes: {error}", path.display())]
    Preallocate {
        /// The image path.
        path: PathBuf,
        /// The file's length.
        bytes: u64,
        /// The underlying error (e.g. no space left, or a file system without fallocate).
        error: io::Error,
    },
    /// The device's in-RAM tables would not fit in the memory this process can still get.
    #[error("image {}: a device of {pages} pages needs {shortfall} for the NAND model's tables alone", path.display())]
    OutOfMemory {
        /// The image path.
        path: PathBuf,
        /// Pages of the device.
        pages: u64,
        /// What is needed and what is left.
        shortfall: crate::host_memory::Shortfall,
    },
    /// An I/O error on the file.
    #[error("image {}: {source}", path.display())]
    Io {
        /// The image path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl ImageError {
    /// The image path the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            ImageError::NotFound { path }
            | ImageError::AlreadyExists { path }
            | ImageError::NotAnImage { path }
            | ImageError::HeaderSize { path, .. }
            | ImageError::BadChecksum { path, .. }
            | ImageError::UnsupportedVersion { path, .. }
            | ImageError::GeometryMismatch { path, .. }
            | ImageError::Truncated { path, .. }
            | ImageError::CorruptFrameTable { path, .. }
            | ImageError::CorruptBlockTable { path, .. }
            | ImageError::NoRoom { path, .. }
            | ImageError::Locked { path, .. }
            | ImageError::InvalidGeometry { path, .. }
            | ImageError::Preallocate { path, .. }
            | ImageError::OutOfMemory { path, .. }
            | ImageError::Io { path, .. } => path,
        }
    }
}
