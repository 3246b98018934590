//! The image file: creating and opening it, locking it against a second user, mapping it.
//!
//! File layout (every region 4 KiB-aligned; the file is created sparse with `set_len`, so an
//! unwritten region costs no disk space):
//!
//! ```text
//! 0          header (4 KiB, see header.rs)
//! 4096       block table: total_blocks x 16 B {erase_count, flags (bit 0 = bad), programmed_pages, 0}
//! data       page data: total_pages x page_size, page index = (bank, block, page) row-major
//! oob        OOB: total_pages x oob_size, same order
//! len        end of file
//! ```
//!
//! Exclusive use: the file gets a POSIX `fcntl(F_SETLK, F_WRLCK)` lock for as long as the device
//! lives, so a second *process* is refused with [`ImageError::Locked`] (the holder's pid comes from
//! `F_GETLK`). An image opened [`Access::ReadOnly`] takes the shared `F_RDLCK` instead: readers
//! share the image with each other, never with a writer. POSIX locks belong to the process, not the file descriptor, so they cannot refuse a
//! second open *within* the same process — worse, closing any descriptor of the file would drop
//! the lock. Hence an in-process registry of open images (by device and inode) is checked before
//! the file is even opened; a second open in the same process gets `Locked` with our own pid.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use memmap2::MmapRaw;
use parking_lot::Mutex;
use rand::RngCore;

use crate::bankmem::frame_of_entry;
use crate::config::NandConfig;
use crate::error::ImageError;
use crate::geometry::{BlockAddr, Geometry, PageAddr};
use crate::header::{
    self, Header, HeaderError, Layout, BLOCK_ENTRY_SIZE, FORMAT_VERSION, FRAME_ENTRY_SIZE,
    HEADER_SIZE,
};

/// Images open in this process, by (st_dev, st_ino).
fn registry() -> &'static Mutex<BTreeSet<(u64, u64)>> {
    static OPEN: Mutex<BTreeSet<(u64, u64)>> = Mutex::new(BTreeSet::new());
    &OPEN
}

/// Membership of an image in the in-process registry; removed on drop.
struct Registered((u64, u64));

impl Registered {
    fn take(key: (u64, u64), path: &Path) -> Result<Registered, ImageError> {
        if registry().lock().insert(key) {
            Ok(Registered(key))
        } else {
            Err(ImageError::Locked {
                path: path.to_path_buf(),
                pid: Some(std::process::id() as i32),
            })
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        registry().lock().remove(&self.0);
    }
}

/// How an image is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Programs, erases and block-table updates, under an exclusive lock.
    #[default]
    ReadWrite,
    /// Reads only: the file is opened and mapped read-only under a lock other readers share,
    /// and every operation that would change the medium is refused with
    /// [`NandError::ReadOnly`](crate::NandError::ReadOnly) before it touches the mapping.
    /// Nothing of the file is written or allocated, so an image without write permission, on
    /// a read-only or a full file system opens, and stays byte for byte as it was.
    ReadOnly,
}

/// An open, locked, mapped image.
pub(crate) struct Image {
    pub(crate) path: PathBuf,
    pub(crate) header: Header,
    pub(crate) layout: Layout,
    /// Mapped read-only (`PROT_READ`) when `access` is [`Access::ReadOnly`]: a store through
    /// it would fault, so the device refuses every changing operation first.
    pub(crate) map: Arc<MmapRaw>,
    pub(crate) access: Access,
    /// Holds the POSIX lock: closing it releases the lock, so it lives as long as the image.
    file: File,
    _registered: Registered,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ImageError + '_ {
    move |source| match source.kind() {
        ErrorKind::NotFound => ImageError::NotFound {
            path: path.to_path_buf(),
        },
        ErrorKind::AlreadyExists => ImageError::AlreadyExists {
            path: path.to_path_buf(),
        },
        _ => ImageError::Io {
            path: path.to_path_buf(),
            source,
        },
    }
}

fn flock_struct(kind: libc::c_int) -> libc::flock {
    // SAFETY: `flock` is a plain C struct of integers; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0; // 0 = to the end of the file, whatever its size
    fl
}

/// Takes the POSIX lock on `file` (exclusive to write, shared to read), or says who holds a
/// lock in its way.
fn lock_file(file: &File, path: &Path, access: Access) -> Result<(), ImageError> {
    let mut fl = flock_struct(match access {
        Access::ReadWrite => libc::F_WRLCK,
        Access::ReadOnly => libc::F_RDLCK,
    });
    // SAFETY: the descriptor is open for the duration of the call and `fl` is a valid flock.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EAGAIN) => {
            // SAFETY: as above; F_GETLK writes the conflicting lock (if any) into `fl`.
            let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut fl) };
            let pid = (rc == 0 && fl.l_type != libc::F_UNLCK as libc::c_short && fl.l_pid > 0)
                .then_some(fl.l_pid);
            Err(ImageError::Locked {
                path: path.to_path_buf(),
                pid,
            })
        }
        _ => Err(ImageError::Io {
            path: path.to_path_buf(),
            source: err,
        }),
    }
}

/// Refuses what is not a regular file or a block device by name: a FIFO would block a
/// read-only open or fail its reads with "Illegal seek".
fn check_file_type(path: &Path, meta: &std::fs::Metadata) -> Result<(), ImageError> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_file() || kind.is_block_device() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a character device"
    };
    Err(ImageError::Io {
        path: path.to_path_buf(),
        source: io::Error::new(
            ErrorKind::InvalidInput,
            format!("{what}, not an image file"),
        ),
    })
}

/// Turns O_NONBLOCK (asked for only to make the open itself safe) off again.
fn clear_nonblock(file: &File) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor this `File` owns, with integer arguments only.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn key_of(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

fn map_file(file: &File, path: &Path, access: Access) -> Result<Arc<MmapRaw>, ImageError> {
    match access {
        Access::ReadWrite => MmapRaw::map_raw(file),
        Access::ReadOnly => memmap2::MmapOptions::new().map_raw_read_only(file),
    }
    .map(Arc::new)
    .map_err(io_err(path))
}

/// The pid of a process holding a lock on the image at `path` (a daemon serving it, or a
/// tool reading it; this process, if it has the image open), `Ok(None)` when none does.
/// Takes no lock itself, and reads nothing: for a command about to replace the file.
pub fn image_holder(path: &Path) -> Result<Option<i32>, ImageError> {
    // This process first, from the registry: the descriptor opened below for F_GETLK (which
    // never reports our own locks) would drop them when closed (see the module docs).
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    if registry().lock().contains(&key_of(&meta)) {
        return Ok(Some(std::process::id() as i32));
    }
    let file = File::open(path).map_err(io_err(path))?;
    let mut fl = flock_struct(libc::F_WRLCK);
    // SAFETY: the descriptor is open for the duration of the call and `fl` is a valid flock;
    // F_GETLK only writes the conflicting lock (if any) into `fl`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut fl) };
    if rc != 0 {
        return Err(io_err(path)(io::Error::last_os_error()));
    }
    if fl.l_type == libc::F_UNLCK as libc::c_short {
        return Ok(None);
    }
    Ok(Some(fl.l_pid))
}

impl Image {
    /// Allocates every byte of the file (`fallocate`, mode 0: holes become allocated zeroes,
    /// data is left as it is) and, on tmpfs, maps every page in. Returns whether it mapped.
    /// See [`crate::NandDevice::preallocate`].
    pub(crate) fn preallocate(&self) -> Result<bool, ImageError> {
        if self.access == Access::ReadOnly {
            // Allocating changes the file; a read-only open leaves it as it is.
            return Ok(false);
        }
        let bytes = self.layout.len;
        let err = |error| ImageError::Preallocate {
            path: self.path.clone(),
            bytes,
            error,
        };
        let len = libc::off_t::try_from(bytes)
            .map_err(|_| err(io::Error::from(ErrorKind::InvalidInput)))?;
        let fd = self.file.as_raw_fd();
        loop {
            // SAFETY: fallocate on a file descriptor this image owns (open for the image's
            // lifetime), over the file's own length; it touches no memory of ours.
            let rc = unsafe { libc::fallocate(fd, 0, 0, len) };
            if rc == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                return Err(err(e));
            }
        }
        // SAFETY: `statfs` is a plain C struct of integers; all-zero is a valid value.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: fstatfs writes one statfs into `fs`, which lives across the call.
        // (f_type's integer type differs between architectures, hence the casts.)
        #[allow(clippy::unnecessary_cast)]
        let tmpfs = unsafe { libc::fstatfs(fd, &mut fs) } == 0
            && fs.f_type as i64 == libc::TMPFS_MAGIC as i64;
        if !tmpfs {
            // On a disk file the pages would be read in (a written image: its whole length)
            // and their first writes would still fault for dirty tracking: not worth it.
            return Ok(false);
        }
        // On tmpfs a page in the file is memory already; mapping it read makes the mapping
        // writable too (tmpfs tracks no dirty pages), so no access faults afterwards
        // (1.5 us per 4 KiB here, against ~1 us for each first access otherwise). A kernel
        // without MADV_POPULATE_READ (before 5.14) just leaves the mapping to fault as usual.
        // SAFETY: the whole mapping, which `self.map` keeps alive; populating reads nothing
        // into our memory and changes no page.
        let rc = unsafe {
            libc::madvise(
                self.map.as_mut_ptr().cast::<libc::c_void>(),
                self.map.len(),
                libc::MADV_POPULATE_READ,
            )
        };
        Ok(rc == 0)
    }

    /// Creates a new image; refuses to touch an existing file.
    pub(crate) fn create(path: &Path, config: &NandConfig) -> Result<Image, ImageError> {
        config
            .geometry
            .validate()
            .and_then(|()| config.interconnect.validate())
            .and_then(|()| config.timing.validate())
            .and_then(|()| config.validate_planes())
            .map_err(|source| ImageError::InvalidGeometry {
                path: path.to_path_buf(),
                source,
            })?;
        check_memory(path, &config.geometry)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| match e.kind() {
                // Here "not found" is the directory (or a file system, like /proc, that takes
                // no new files), not the image `create` is making.
                ErrorKind::NotFound => ImageError::Io {
                    path: path.to_path_buf(),
                    source: io::Error::new(
                        ErrorKind::NotFound,
                        format!(
                            "cannot be created: its directory {} does not exist or takes no \
                             new files",
                            path.parent()
                                .filter(|p| !p.as_os_str().is_empty())
                                .unwrap_or(Path::new("."))
                                .display()
                        ),
                    ),
                },
                _ => io_err(path)(e),
            })?;
        let result = Image::init_new(path, config, file);
        if result.is_err() {
            // Don't leave a half-made image behind to block the next attempt. Nothing useful can
            // be done if removal fails too; the original error is the one to report.
            let _ = std::fs::remove_file(path);
        }
        result
    }

    fn init_new(path: &Path, config: &NandConfig, file: File) -> Result<Image, ImageError> {
        let registered = Registered::take(key_of(&file.metadata().map_err(io_err(path))?), path)?;
        lock_file(&file, path, Access::ReadWrite)?;
        let layout = Layout::of(&config.geometry);
        let mut uuid = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut uuid);
        let created_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let header = Header {
            config: *config,
            uuid,
            created_unix_ns,
        };
        // Size first (sparse: the block table reads as zeros = fresh blocks), header last, so a
        // crash during creation leaves no valid-looking image with missing parts.
        file.set_len(layout.len).map_err(io_err(path))?;
        file.write_all_at(&header::encode(&header), 0)
            .map_err(io_err(path))?;
        file.sync_all().map_err(io_err(path))?;
        let map = map_file(&file, path, Access::ReadWrite)?;
        Ok(Image {
            path: path.to_path_buf(),
            header,
            layout,
            map,
            access: Access::ReadWrite,
            file,
            _registered: registered,
        })
    }

    /// Opens an existing image, checking it and (if given) its geometry.
    pub(crate) fn open(
        path: &Path,
        expected: Option<&Geometry>,
        access: Access,
    ) -> Result<Image, ImageError> {
        let p = || path.to_path_buf();
        // Registry check before opening: see the module docs on POSIX lock semantics.
        let meta = std::fs::metadata(path).map_err(io_err(path))?;
        check_file_type(path, &meta)?;
        let registered = Registered::take(key_of(&meta), path)?;
        // O_NONBLOCK: should the path have become a FIFO since `metadata` (a swap in between),
        // the open returns instead of waiting for a writer; the descriptor's own metadata
        // below is what counts. Regular files and block devices ignore the flag.
        let file = OpenOptions::new()
            .read(true)
            .write(access == Access::ReadWrite)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(io_err(path))?;
        let opened = file.metadata().map_err(io_err(path))?;
        check_file_type(path, &opened)?;
        if key_of(&opened) != key_of(&meta) {
            // Closing a descriptor drops every POSIX lock this process holds on that file: if
            // the path now names an image this process has open, keep the descriptor open
            // (the module docs).
            if registry().lock().contains(&key_of(&opened)) {
                std::mem::forget(file);
            }
            return Err(ImageError::Io {
                path: p(),
                source: io::Error::new(
                    ErrorKind::InvalidInput,
                    "the file was replaced while it was being opened",
                ),
            });
        }
        clear_nonblock(&file).map_err(io_err(path))?;
        lock_file(&file, path, access)?;
        let actual = opened.len();
        let mut buf = vec![0u8; HEADER_SIZE];
        let got = read_prefix(&file, &mut buf).map_err(io_err(path))?;
        let header = decode_header(path, &buf[..got], actual)?;
        let g = header.config.geometry;
        if let Some(want) = expected {
            check_geometry(path, &g, want)?;
        }
        let layout = Layout::of(&g);
        if actual < layout.len {
            return Err(ImageError::Truncated {
                path: p(),
                expected: layout.len,
                actual,
            });
        }
        check_memory(path, &g)?;
        let map = map_file(&file, path, access)?;
        Ok(Image {
            path: p(),
            header,
            layout,
            map,
            access,
            file,
            _registered: registered,
        })
    }

    /// Reads `buf.len()` bytes at `offset` of the file with `pread` (not through the mapping).
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Writes the mapping back and flushes the file to stable storage (a read-only image has
    /// nothing to write back).
    pub(crate) fn sync(&self) -> Result<(), ImageError> {
        if self.access == Access::ReadOnly {
            return Ok(());
        }
        self.map.flush().map_err(io_err(&self.path))?;
        self.file.sync_all().map_err(io_err(&self.path))
    }
}

/// Byte offset in the image file at `path` where page `addr`'s data lives now (the start of
/// its frame), for tools that damage or inspect an image offline. Reads the header and the
/// page's frame-table entry; it does not lock the file, so call it on a closed image.
pub fn page_data_offset(path: &Path, addr: PageAddr) -> Result<u64, ImageError> {
    let p = || path.to_path_buf();
    let (file, g) = open_for_page(path, addr)?;
    let index = g.page_index(addr);
    let layout = Layout::of(&g);
    let mut raw = [0u8; 4];
    file.read_exact_at(&mut raw, layout.frames + index * FRAME_ENTRY_SIZE)
        .map_err(io_err(path))?;
    let pages = u64::from(g.blocks_per_bank) * u64::from(g.pages_per_block);
    let bank_first = u64::from(addr.block.bank.0) * pages;
    let in_bank = (index - bank_first) as usize;
    let frame =
        frame_of_entry(u32::from_le_bytes(raw), in_bank, pages as usize).ok_or_else(|| {
            ImageError::CorruptFrameTable {
                path: p(),
                bank: addr.block.bank.0,
                page: in_bank as u64,
                reason: "frame index out of range",
            }
        })?;
    Ok(layout.data + (bank_first + frame as u64) * u64::from(g.page_size))
}

/// Byte offset in the image file at `path` of page `addr`'s OOB area, for tools that damage or
/// inspect an image offline (call it on a closed image, as [`page_data_offset`]).
pub fn page_oob_offset(path: &Path, addr: PageAddr) -> Result<u64, ImageError> {
    let (_, g) = open_for_page(path, addr)?;
    Ok(Layout::of(&g).oob + g.page_index(addr) * u64::from(g.oob_size))
}

/// Byte offset in the image file at `path` of `block`'s block-table entry (16 bytes, little
/// endian: erase count, flags (bit 0: bad), programmed pages, reserved), for tools that damage
/// or inspect an image offline (call it on a closed image, as [`page_data_offset`]).
/// Whether a file starting with `prefix` is a NAND image (its magic): tools that write files
/// given on their command line refuse to overwrite one.
pub fn is_image_prefix(prefix: &[u8]) -> bool {
    prefix.starts_with(&crate::header::MAGIC)
}

pub fn block_entry_offset(path: &Path, block: BlockAddr) -> Result<u64, ImageError> {
    let addr = PageAddr { block, page: 0 };
    let (_, g) = open_for_page(path, addr)?;
    let index = u64::from(block.bank.0) * u64::from(g.blocks_per_bank) + u64::from(block.block);
    Ok(Layout::of(&g).block_table + index * BLOCK_ENTRY_SIZE)
}

/// Opens the image at `path` read-only and decodes its geometry, which must contain `addr`
/// (the offline offset helpers above).
fn open_for_page(path: &Path, addr: PageAddr) -> Result<(File, Geometry), ImageError> {
    let file = File::open(path).map_err(io_err(path))?;
    let actual = file.metadata().map_err(io_err(path))?.len();
    let mut buf = vec![0u8; HEADER_SIZE];
    let got = read_prefix(&file, &mut buf).map_err(io_err(path))?;
    let g = decode_header(path, &buf[..got], actual)?.config.geometry;
    if !g.contains_page(addr) {
        return Err(ImageError::Io {
            path: path.to_path_buf(),
            source: io::Error::new(ErrorKind::InvalidInput, format!("{addr}: out of range")),
        });
    }
    Ok((file, g))
}

/// Decodes the header bytes of the image at `path` (`actual` bytes long), with the error each
/// refusal deserves.
fn decode_header(path: &Path, bytes: &[u8], actual: u64) -> Result<Header, ImageError> {
    let p = || path.to_path_buf();
    header::decode(bytes).map_err(|e| match e {
        HeaderError::Short { .. } => ImageError::Truncated {
            path: p(),
            expected: HEADER_SIZE as u64,
            actual,
        },
        HeaderError::BadMagic => ImageError::NotAnImage { path: p() },
        HeaderError::HeaderSize { found } => ImageError::HeaderSize {
            path: p(),
            found,
            expected: HEADER_SIZE as u32,
        },
        HeaderError::Version { found } => ImageError::UnsupportedVersion {
            path: p(),
            found,
            supported: FORMAT_VERSION,
        },
        HeaderError::Checksum { stored, computed } => ImageError::BadChecksum {
            path: p(),
            stored,
            computed,
        },
        HeaderError::Geometry(source) => ImageError::InvalidGeometry { path: p(), source },
    })
}

/// Reads up to `buf.len()` bytes from the start of `file`; returns how many were read.
fn read_prefix(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn check_geometry(path: &Path, image: &Geometry, want: &Geometry) -> Result<(), ImageError> {
    let fields = [
        ("channels", image.channels, want.channels),
        (
            "banks_per_channel",
            image.banks_per_channel,
            want.banks_per_channel,
        ),
        (
            "blocks_per_bank",
            image.blocks_per_bank,
            want.blocks_per_bank,
        ),
        (
            "pages_per_block",
            image.pages_per_block,
            want.pages_per_block,
        ),
        ("page_size", image.page_size, want.page_size),
        ("oob_size", image.oob_size, want.oob_size),
    ];
    for (field, have, requested) in fields {
        if have != requested {
            return Err(ImageError::GeometryMismatch {
                path: path.to_path_buf(),
                field,
                image: u64::from(have),
                requested: u64::from(requested),
            });
        }
    }
    Ok(())
}

/// Refuses a device whose in-RAM tables would not fit ([`crate::host_memory`]).
fn check_memory(path: &Path, g: &Geometry) -> Result<(), ImageError> {
    let pages = g.total_pages();
    crate::host_memory::ensure(pages.saturating_mul(crate::host_memory::NAND_BYTES_PER_PAGE))
        .map_err(|shortfall| ImageError::OutOfMemory {
            path: path.to_path_buf(),
            pages,
            shortfall,
        })
}
