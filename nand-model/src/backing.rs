//! Making sure the image file backs a range of the mapping before anything is stored into it.
//!
//! The image is sparse: the first store into each of its holes makes the file system allocate
//! room. When it has none (a full tmpfs or disk), a store through the mapping does not fail, it
//! faults: the kernel sends SIGBUS and the daemon dies mid-request, losing what it buffered.
//! So before a program touches a region of the mapping not yet known to be backed in this
//! process, the device asks the kernel to allocate it, `madvise(MADV_POPULATE_WRITE)` (Linux
//! 5.14), which faults the pages in as a write would, without writing, and returns an error
//! where a store would have raised SIGBUS. The program is then refused
//! ([`crate::NandError::NoSpace`]) before any of its bytes is stored.
//!
//! Room is asked for a chunk at a time ([`CHUNK_PAGES`] system pages, 64 KiB with 4 KiB pages,
//! clipped to the region): a fresh image written in order makes one call per chunk, not per
//! page, and the kernel's work per page is what the first store would have cost anyway. A bit
//! per chunk remembers what was populated; allocated room stays allocated (nothing here punches
//! holes), so a bit once set stays true — on file systems that overwrite in place (tmpfs,
//! ext4, XFS without reflinks). A copy-on-write one (btrfs, ZFS, reflinked XFS) may need new
//! room at every rewrite of a page, which no check ahead can promise (the README says so). A
//! kernel without the advice (`EINVAL`) turns the check off: stores then behave as they did
//! without it.

use std::io;

/// System pages asked for at a time.
const CHUNK_PAGES: usize = 16;

/// Which chunks of one region of the mapping are known to be backed by the file.
pub(crate) struct Backed {
    /// The region: its first byte and length in the mapping.
    start: *mut u8,
    len: usize,
    /// Bytes per chunk (a power of two, a multiple of the system page size) and its log2:
    /// `ensure` runs at every program, so it shifts instead of dividing.
    chunk: usize,
    chunk_shift: u32,
    /// The system page size: `madvise` wants a start aligned to it.
    os_page: usize,
    /// How far `start` lies into its system page.
    lead: usize,
    /// One bit per chunk of the region, counted from the system page holding `start`.
    bits: Vec<u64>,
    /// False once the kernel refused the advice: nothing is checked any more.
    enabled: bool,
}

// SAFETY: `start` points into a shared file mapping that the owner (a `BankMem`, which keeps the
// mapping alive) only uses under its bank's lock; the pointer is not tied to any thread.
unsafe impl Send for Backed {}

impl Backed {
    /// A region of `len` bytes at `start` of a mapping whose base is aligned to the system page
    /// (so the system page holding `start` lies inside the mapping too).
    pub(crate) fn new(start: *mut u8, len: usize) -> Backed {
        let os_page = os_page();
        let chunk = (os_page * CHUNK_PAGES).next_power_of_two();
        let lead = start as usize % os_page;
        let chunks = (lead + len).div_ceil(chunk);
        Backed {
            start,
            len,
            chunk,
            chunk_shift: chunk.trailing_zeros(),
            os_page,
            lead,
            bits: vec![0; chunks.div_ceil(64)],
            enabled: true,
        }
    }

    /// Makes sure bytes `off..off + len` of the region are backed by the file, asking the
    /// kernel for every chunk they touch that was not asked for before. Fails, with nothing
    /// stored, when the file system has no room (or the kernel refuses for another reason).
    pub(crate) fn ensure(&mut self, off: usize, len: usize) -> io::Result<()> {
        self.ensure_or(off, len, false)
    }

    /// [`Backed::ensure`]; with `refuse`, a chunk not asked for before fails as on a full
    /// file system (`FaultInjector::refuse_new_room`).
    pub(crate) fn ensure_or(&mut self, off: usize, len: usize, refuse: bool) -> io::Result<()> {
        if !self.enabled || len == 0 {
            return Ok(());
        }
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "range outside the region"
        );
        let first = (self.lead + off) >> self.chunk_shift;
        let last = (self.lead + off + len - 1) >> self.chunk_shift;
        for c in first..=last {
            let (word, bit) = (c / 64, 1u64 << (c % 64));
            if self.bits[word] & bit != 0 {
                continue;
            }
            if refuse {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.populate(c)?;
            if !self.enabled {
                return Ok(());
            }
            self.bits[word] |= bit;
        }
        Ok(())
    }

    /// Asks the kernel to back chunk `c`.
    fn populate(&mut self, c: usize) -> io::Result<()> {
        let lead = self.lead;
        // The chunk's bytes counted from the system page holding `start`, clipped to the
        // region's end rounded up to a system page.
        let end = (lead + self.len).div_ceil(self.os_page) * self.os_page;
        let from = c * self.chunk;
        let to = (from + self.chunk).min(end);
        // SAFETY: `start - lead` is the system page holding `start`, inside the mapping (its
        // base is page-aligned and precedes `start`); `to <= end`, and the page holding the
        // region's last byte ends inside the mapping (a mapping is whole pages). So the range
        // lies in the mapping, which the owner keeps alive. MADV_POPULATE_WRITE only faults
        // the pages in (as a write would, without writing): it reads or changes no memory.
        let rc = unsafe {
            libc::madvise(
                self.start.sub(lead).add(from).cast::<libc::c_void>(),
                to - from,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // The kernel predates the advice (Linux 5.14): off for good.
            Some(libc::EINVAL) => {
                self.enabled = false;
                Ok(())
            }
            // A store would have raised SIGBUS: the file system has no room (or its write
            // fault failed).
            Some(libc::EFAULT) => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            _ => Err(e),
        }
    }
}

/// The system's page size (4 KiB if it cannot be read).
fn os_page() -> usize {
    // SAFETY: sysconf has no preconditions; it returns -1 on error, handled below.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous mapping: populating it always succeeds; the bits remember each chunk.
    #[test]
    fn chunks_are_asked_for_once() {
        let len = 3 * os_page() * CHUNK_PAGES + 100;
        let mut map = memmap2::MmapMut::map_anon(len + os_page()).unwrap();
        // A region starting mid-page, as an OOB region may.
        // SAFETY: 100 < the mapping's length.
        let start = unsafe { map.as_mut_ptr().add(100) };
        let mut b = Backed::new(start, len);
        b.ensure(0, 1).unwrap();
        assert_eq!(b.bits[0], 1);
        b.ensure(len - 1, 1).unwrap();
        assert_eq!(b.bits[0], 1 | 1 << 3);
        b.ensure(0, len).unwrap();
        assert_eq!(b.bits[0], 0b1111);
    }
}
