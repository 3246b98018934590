//! A block device or a regular file as a replay target (`/dev/nvme0n1`, `/dev/loop0`, an
//! image file): positioned reads and writes from every stream at once.
//!
//! - `direct` opens it `O_DIRECT`, bypassing the page cache as fio's `direct=1` does; the
//!   driver's buffers are 4 KiB-aligned for it, and requests must then be multiples of the
//!   device's logical block size (a refused one is counted as an error).
//! - A FUA write goes through a second descriptor opened `O_DSYNC`: durable on return (on a
//!   block device with `O_DIRECT` the kernel sends it as a FUA write).
//! - Flush is `fdatasync`; trim is `fallocate(PUNCH_HOLE)`, which a block device turns into a
//!   discard (or zeroing) of the range and a file into a hole.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::FallocateFlags;

use super::{Target, TargetError};

/// A block device or file.
pub struct FileTarget {
    path: PathBuf,
    file: File,
    /// The same, opened `O_DSYNC`, for FUA writes.
    dsync: File,
    size: u64,
    direct: bool,
}

impl FileTarget {
    /// Opens `path` for reading and writing.
    pub fn open(path: &Path, direct: bool) -> Result<FileTarget, TargetError> {
        let fatal = |what: &str, e: std::io::Error| {
            TargetError::Fatal(format!("{what} {}: {e}", path.display()))
        };
        let open = |extra: i32| {
            let mut flags = extra;
            if direct {
                flags |= libc::O_DIRECT;
            }
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(path)
        };
        let mut file = open(0).map_err(|e| {
            if direct && e.raw_os_error() == Some(libc::EINVAL) {
                fatal(
                    "opening (its filesystem does not support O_DIRECT; try without --direct)",
                    e,
                )
            } else {
                fatal("opening", e)
            }
        })?;
        let dsync = open(libc::O_DSYNC).map_err(|e| fatal("opening (O_DSYNC)", e))?;
        // Seeking to the end gives a block device's size as well as a file's.
        let size = file
            .seek(SeekFrom::End(0))
            .map_err(|e| fatal("sizing", e))?;
        if size == 0 {
            return Err(TargetError::Fatal(format!("{} is empty", path.display())));
        }
        Ok(FileTarget {
            path: path.to_path_buf(),
            file,
            dsync,
            size,
            direct,
        })
    }

    fn error(&self, op: &str, offset: u64, len: u64, e: std::io::Error) -> TargetError {
        TargetError::Request(format!(
            "{op} at offset {offset} length {len} on {}: {e}",
            self.path.display()
        ))
    }
}

impl Target for FileTarget {
    fn describe(&self) -> String {
        format!(
            "{}{}",
            self.path.display(),
            if self.direct { " (O_DIRECT)" } else { "" }
        )
    }

    fn capacity(&self) -> u64 {
        self.size
    }

    fn read(&self, _stream: usize, offset: u64, buf: &mut [u8]) -> Result<(), TargetError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| self.error("read", offset, buf.len() as u64, e))
    }

    fn write(
        &self,
        _stream: usize,
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<(), TargetError> {
        let f = if fua { &self.dsync } else { &self.file };
        f.write_all_at(data, offset)
            .map_err(|e| self.error("write", offset, data.len() as u64, e))
    }

    fn flush(&self) -> Result<(), TargetError> {
        self.file
            .sync_data()
            .map_err(|e| TargetError::Request(format!("fdatasync {}: {e}", self.path.display())))
    }

    fn trim(&self, _stream: usize, offset: u64, len: u64, fua: bool) -> Result<(), TargetError> {
        rustix::fs::fallocate(
            &self.file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            len,
        )
        .map_err(|e| self.error("trim (punch hole)", offset, len, e.into()))?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_writes_and_trims_to_zero() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("disk");
        std::fs::write(&p, vec![7u8; 1 << 20]).unwrap();
        let t = FileTarget::open(&p, false).unwrap();
        assert_eq!(t.capacity(), 1 << 20);
        t.write(0, 8192, &[1u8; 4096], false).unwrap();
        t.write(0, 12288, &[2u8; 4096], true).unwrap();
        t.flush().unwrap();
        let mut b = vec![0u8; 12288];
        t.read(0, 4096, &mut b).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 7));
        assert!(b[4096..8192].iter().all(|&x| x == 1));
        assert!(b[8192..].iter().all(|&x| x == 2));
        t.trim(0, 8192, 8192, true).unwrap();
        t.read(0, 4096, &mut b).unwrap();
        assert!(b[..4096].iter().all(|&x| x == 7));
        assert!(
            b[4096..].iter().all(|&x| x == 0),
            "trimmed range reads zero"
        );
        let e = t.read(0, (1 << 20) - 512, &mut b).unwrap_err();
        assert!(
            matches!(e, TargetError::Request(ref m) if m.contains("disk")),
            "{e}"
        );
        let e = match FileTarget::open(&dir.path().join("missing"), false) {
            Err(e) => e,
            Ok(_) => panic!("opened a missing file"),
        };
        assert!(
            matches!(e, TargetError::Fatal(ref m) if m.contains("missing")),
            "{e}"
        );
    }
}
