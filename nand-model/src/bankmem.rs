//! Raw access to one bank's part of the memory-mapped image.
//!
//! **Page frames.** A page's data lives in one of the bank's *frames* (as many as it has pages),
//! named by the page's entry in the frame table; a zero entry means the page's own frame (same
//! index), so a fresh sparse image needs no initialisation. A copyback points the destination
//! page at the source's frame instead of copying 4-16 KiB: both pages then share it (a frame is
//! never written while shared, so the source still reads its data until its block is erased and
//! reprogrammed). Programming a page whose frame is shared first gives the page a frame from the
//! bank's free pool. Reference counts and the pool live in memory and are rebuilt from the table
//! at open: the table is the only persistent state, so nothing else has to be crash-consistent.
//! Counting: frames = pages and every page references exactly one frame, so whenever some frame
//! is shared at least one frame is unreferenced, and the pool is never empty when needed.
//!
//! The image is mapped once, shared (`MAP_SHARED`), so a store into the mapping is in the page
//! cache the moment it executes and survives the death of the process. The mapping is split into
//! one [`BankMem`] per bank. A bank's block-table entries, page data and OOB are each contiguous
//! (global indices are bank-major), so the `BankMem`s cover pairwise disjoint byte ranges.
//!
//! Each `BankMem` lives inside its bank's mutex in the device, so **holding a `&mut BankMem`
//! (or `&BankMem`) means holding that bank's lock**: writes through `&mut self` never race with
//! anything, and reads through `&self` never race with writes. That is the whole safety argument
//! of the raw-pointer code below. Every index is bounds-checked here (with `assert!`, since an
//! out-of-range index would be a bug in the device, whose callers' addresses are validated
//! before reaching this module).

use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use memmap2::MmapRaw;

use crate::backing::Backed;
use crate::geometry::Geometry;
use crate::header::{Layout, BLOCK_ENTRY_SIZE, FRAME_ENTRY_SIZE};
use crate::stream_copy::copy_streaming;

/// Persistent state of one erase block (one block-table entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BlockState {
    /// Successful erases so far.
    pub erase_count: u32,
    /// The block is retired; every operation on it is refused.
    pub bad: bool,
    /// Pages programmed since the last erase: pages `0..programmed_pages` hold data (or garbage
    /// after a failed program), the rest read as erased (0xFF).
    pub programmed_pages: u32,
}

const FLAG_BAD: u32 = 1;

/// One bank's slice of the mapping. See the module docs for the locking contract.
pub(crate) struct BankMem {
    /// Keeps the mapping alive as long as any pointer below is in use.
    _map: Arc<MmapRaw>,
    /// The bank's block table: in the mapping, or for a read-only image in `table_copy`.
    table: *mut u8,
    /// A read-only image's block table, read with pread at open: a fresh block's entry lies in
    /// a hole of the sparse file, and reading a hole through a mapping of a full tmpfs raises
    /// SIGBUS (a writable image has its block table backed at open instead). Never written.
    /// A `Vec` (not a `Box`): moving it keeps `table`, a pointer into its buffer, valid.
    table_copy: Option<Vec<u8>>,
    /// Frame table: one little-endian u32 per page, 0 for the page's own frame, else frame + 1.
    frames: *mut u8,
    data: *mut u8,
    oob: *mut u8,
    blocks: u32,
    pages_per_block: u32,
    page_size: usize,
    oob_size: usize,
    /// Pages referencing each frame (programmed or not). A frame at `u8::MAX` is not shared
    /// further: a copyback from it copies the bytes instead.
    refs: Vec<u8>,
    /// Frames no page references.
    pool: Vec<u32>,
    /// One bit per page: its frame-table entry is not 0 (the page's data is in another frame
    /// than its own). Only such entries are read through the mapping: the others may lie in a
    /// hole of the sparse file, and on tmpfs even a read of a hole must allocate, which on a
    /// full file system raises SIGBUS (a read of a page whose entry was never written).
    remapped: Vec<u64>,
    /// What of the frame table, the frames and the OOB entries the file is known to back (see
    /// `backing`): a program first makes room ([`BankMem::make_room`]), so a full file system
    /// refuses it instead of faulting. (The block table is backed whole at open.)
    room_frame_table: Backed,
    room_data: Backed,
    room_oob: Backed,
}

/// Decodes page `page`'s frame-table entry (0: its own frame, else frame + 1) for a bank of
/// `frames` frames; `None` if the entry points outside the bank.
pub(crate) fn frame_of_entry(entry: u32, page: usize, frames: usize) -> Option<usize> {
    match entry {
        0 => Some(page),
        v => Some(v as usize - 1).filter(|&f| f < frames),
    }
}

/// Adds the frame-table entries in `raw` (4 bytes each, little-endian; the first is page
/// `first`'s) to `refs`, the count of pages referencing each of the bank's `refs.len()` frames,
/// and sets the bit of each page whose entry is not 0 in `remapped` (a bit per page; see
/// [`BankMem`]'s field). Fails with the page and the reason on an entry outside the bank or a
/// frame that would be shared by more than 255 pages (what the counts can hold). `raw` past
/// the bank's last page is refused too.
pub(crate) fn count_frame_refs(
    raw: &[u8],
    first: usize,
    refs: &mut [u8],
    remapped: &mut [u64],
) -> Result<(), (u64, &'static str)> {
    let frames = refs.len();
    for (k, e) in raw.chunks_exact(FRAME_ENTRY_SIZE as usize).enumerate() {
        let i = first + k;
        if i >= frames {
            return Err((i as u64, "entry beyond the bank's last page"));
        }
        let entry = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let f = frame_of_entry(entry, i, frames).ok_or((i as u64, "frame index out of range"))?;
        if entry != 0 {
            remapped[i / 64] |= 1 << (i % 64);
        }
        let r = &mut refs[f];
        if *r == u8::MAX {
            return Err((i as u64, "more than 255 pages share its frame"));
        }
        *r += 1;
    }
    Ok(())
}

/// Why a bank's tables were refused at open.
#[derive(Debug)]
pub(crate) enum TableError {
    /// A frame table entry is out of range, or too many pages share a frame.
    Frame {
        bank: u32,
        page: u64,
        reason: &'static str,
    },
    /// A block table entry says more pages are programmed than the block has: every scan of
    /// the block (recovery's, GC's) would walk past its end.
    Block {
        bank: u32,
        block: u32,
        programmed_pages: u32,
    },
    /// The file system has no room for the bank's block table (sparse until first written).
    NoRoom { bank: u32, error: String },
    /// The file could not be read.
    Read(std::io::Error),
}

// SAFETY: BankMem only holds pointers into a shared file mapping that `_map` keeps alive, and
// (read-only images) into its own `table_copy` buffer; the memory is not tied to any thread.
// Exclusive use is guaranteed by the bank mutex it lives in.
unsafe impl Send for BankMem {}

impl BankMem {
    /// Splits `map` (laid out per `layout` for geometry `g`) into one `BankMem` per bank and
    /// rebuilds each bank's frame reference counts from its frame table, which it reads from
    /// the file with `read_at(buf, offset)`. A `writable` map has its block tables backed;
    /// a read-only one is left as it is (nothing will be stored).
    ///
    /// Returns `Ok(None)` if the mapping is shorter than the layout (the caller checked the file
    /// length, so that would mean the file shrank between the check and the map), and an error
    /// if a frame table entry is out of range or too many pages share one frame, or a block
    /// table entry counts more programmed pages than a block has.
    pub(crate) fn split(
        map: &Arc<MmapRaw>,
        g: &Geometry,
        layout: &Layout,
        writable: bool,
        read_at: impl Fn(&mut [u8], u64) -> std::io::Result<()>,
    ) -> Result<Option<Vec<BankMem>>, TableError> {
        let Ok(len) = u64::try_from(map.len()) else {
            return Ok(None);
        };
        if len < layout.len {
            return Ok(None);
        }
        let base = map.as_mut_ptr();
        let blocks = u64::from(g.blocks_per_bank);
        let pages = blocks * u64::from(g.pages_per_block);
        let mut out = Vec::with_capacity(g.banks() as usize);
        for bank in 0..u64::from(g.banks()) {
            let table = layout.block_table + bank * blocks * BLOCK_ENTRY_SIZE;
            let frames = layout.frames + bank * pages * FRAME_ENTRY_SIZE;
            let data = layout.data + bank * pages * u64::from(g.page_size);
            let oob = layout.oob + bank * pages * u64::from(g.oob_size);
            // SAFETY: all four offsets (plus the bank's region length) are within `layout.len`,
            // which is <= the mapping length checked above, so the pointers stay inside the map.
            let (table, frames, data, oob) = unsafe {
                (
                    base.add(table as usize),
                    base.add(frames as usize),
                    base.add(data as usize),
                    base.add(oob as usize),
                )
            };
            // The block table is stored to at every program and erase: backed whole now (16
            // bytes a block), so a full file system fails the open rather than a later store.
            let table_bytes = (blocks * BLOCK_ENTRY_SIZE) as usize;
            let mut table_copy = None;
            if writable {
                Backed::new(table, table_bytes)
                    .ensure(0, table_bytes)
                    .map_err(|e| TableError::NoRoom {
                        bank: bank as u32,
                        error: e.to_string(),
                    })?;
            } else {
                let mut copy = vec![0u8; table_bytes];
                read_at(
                    &mut copy,
                    layout.block_table + bank * blocks * BLOCK_ENTRY_SIZE,
                )
                .map_err(TableError::Read)?;
                table_copy = Some(copy);
            }
            // Entries are read through `table` (and only stored through it when writable).
            let table = table_copy.as_mut().map_or(table, |c| c.as_mut_ptr());
            let mut mem = BankMem {
                _map: Arc::clone(map),
                table_copy,
                room_frame_table: Backed::new(frames, (pages * FRAME_ENTRY_SIZE) as usize),
                room_data: Backed::new(data, (pages * u64::from(g.page_size)) as usize),
                room_oob: Backed::new(oob, (pages * u64::from(g.oob_size)) as usize),
                table,
                frames,
                data,
                oob,
                blocks: g.blocks_per_bank,
                pages_per_block: g.pages_per_block,
                page_size: g.page_size as usize,
                oob_size: g.oob_size as usize,
                refs: vec![0; pages as usize],
                pool: Vec::new(),
                remapped: vec![0; (pages as usize).div_ceil(64)],
            };
            // The table is read with pread, not through the mapping: touching all of it through
            // the mapping would keep 4 B per page of file pages in the process's RSS for good,
            // although only copyback destinations have non-zero entries.
            let mut chunk = vec![0u8; 1 << 20];
            let table_len = pages as usize * FRAME_ENTRY_SIZE as usize;
            let table_off = layout.frames + bank * pages * FRAME_ENTRY_SIZE;
            let mut done = 0usize;
            while done < table_len {
                let n = chunk.len().min(table_len - done);
                read_at(&mut chunk[..n], table_off + done as u64).map_err(|_| {
                    TableError::Frame {
                        bank: bank as u32,
                        page: (done / FRAME_ENTRY_SIZE as usize) as u64,
                        reason: "the frame table could not be read",
                    }
                })?;
                let first = done / FRAME_ENTRY_SIZE as usize;
                count_frame_refs(&chunk[..n], first, &mut mem.refs, &mut mem.remapped).map_err(
                    |(page, reason)| TableError::Frame {
                        bank: bank as u32,
                        page,
                        reason,
                    },
                )?;
                done += n;
            }
            for block in 0..g.blocks_per_bank {
                let st = mem.block(block);
                if st.programmed_pages > g.pages_per_block {
                    return Err(TableError::Block {
                        bank: bank as u32,
                        block,
                        programmed_pages: st.programmed_pages,
                    });
                }
            }
            mem.pool = (0..pages as u32)
                .rev()
                .filter(|&f| mem.refs[f as usize] == 0)
                .collect();
            out.push(mem);
        }
        Ok(Some(out))
    }

    /// The frame holding page `i`'s data (`i` is the page's index in the bank).
    fn frame(&self, i: usize) -> usize {
        if self.remapped[i / 64] & (1 << (i % 64)) == 0 {
            return i;
        }
        let mut raw = [0u8; 4];
        // SAFETY: callers pass i < pages of the bank (they got it from `page_index`, which
        // checks it), so the 4-byte entry lies inside the bank's frame table; the bank lock
        // excludes concurrent writes.
        unsafe {
            ptr::copy_nonoverlapping(
                self.frames.add(i * FRAME_ENTRY_SIZE as usize),
                raw.as_mut_ptr(),
                4,
            )
        };
        frame_of_entry(u32::from_le_bytes(raw), i, self.refs.len())
            .expect("frame table entries are validated at open and written in range")
    }

    fn set_frame(&mut self, i: usize, f: usize) {
        let v: u32 = if f == i { 0 } else { f as u32 + 1 };
        let bit = 1u64 << (i % 64);
        if f == i {
            self.remapped[i / 64] &= !bit;
        } else {
            self.remapped[i / 64] |= bit;
        }
        // SAFETY: i < pages of the bank (callers got it from `page_index`), so the entry lies in
        // the bank's frame table; `&mut self` means the bank lock is held.
        unsafe {
            ptr::copy_nonoverlapping(
                v.to_le_bytes().as_ptr(),
                self.frames.add(i * FRAME_ENTRY_SIZE as usize),
                4,
            )
        };
    }

    /// Gives page `i` a frame of its own (taking one from the pool if its frame is shared) and
    /// returns it. The table entry is written before any data, so a process killed in between
    /// leaves an unprogrammed page pointing at a frame nobody else uses.
    fn own_frame(&mut self, i: usize) -> usize {
        let f = self.frame(i);
        if self.refs[f] == 1 {
            return f;
        }
        let nf = self
            .pool
            .pop()
            .expect("a shared frame implies an unreferenced one (frames = pages)")
            as usize;
        self.refs[f] -= 1;
        self.refs[nf] = 1;
        self.set_frame(i, nf);
        nf
    }

    fn frame_ptr(&self, f: usize) -> *mut u8 {
        debug_assert!(f < self.refs.len());
        // SAFETY: f < frames of the bank, so the frame lies inside the bank's data region.
        unsafe { self.data.add(f * self.page_size) }
    }

    fn entry(&self, block: u32) -> *mut u8 {
        assert!(block < self.blocks, "block {block} outside bank");
        // SAFETY: block < blocks, so the 16-byte entry lies inside this bank's table region.
        unsafe { self.table.add(block as usize * BLOCK_ENTRY_SIZE as usize) }
    }

    fn page_index(&self, block: u32, page: u32) -> usize {
        assert!(
            block < self.blocks && page < self.pages_per_block,
            "page outside bank"
        );
        block as usize * self.pages_per_block as usize + page as usize
    }

    /// Reads a block's table entry.
    pub(crate) fn block(&self, block: u32) -> BlockState {
        let p = self.entry(block);
        let mut raw = [0u8; 16];
        // SAFETY: `p` points to 16 bytes of this bank's table (see `entry`); `&self` means the
        // bank lock is held, so no write races with this read.
        unsafe { ptr::copy_nonoverlapping(p, raw.as_mut_ptr(), 16) };
        let word = |i: usize| u32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
        BlockState {
            erase_count: word(0),
            bad: word(4) & FLAG_BAD != 0,
            programmed_pages: word(8),
        }
    }

    /// Writes a block's table entry. `programmed_pages` is stored last with release ordering:
    /// page data written before this call is in the mapping before the counter that exposes it
    /// (neither the compiler nor the CPU may move the data stores after it), so a process killed
    /// mid-program leaves the page unprogrammed rather than half-visible.
    pub(crate) fn set_block(&mut self, block: u32, st: BlockState) {
        // The device refuses every changing operation on a read-only image first.
        debug_assert!(
            self.table_copy.is_none(),
            "a read-only image's table is written"
        );
        let p = self.entry(block);
        let flags: u32 = if st.bad { FLAG_BAD } else { 0 };
        // SAFETY: `p` points to this bank's 16-byte, 16-aligned entry (the table starts at a
        // 4 KiB-aligned offset of a page-aligned mapping); `&mut self` means the bank lock is
        // held, so nothing else accesses it. Offset 8 is 4-aligned, as AtomicU32 requires, and
        // the memory is only ever accessed under the same lock.
        unsafe {
            ptr::copy_nonoverlapping(st.erase_count.to_le_bytes().as_ptr(), p, 4);
            ptr::copy_nonoverlapping(flags.to_le_bytes().as_ptr(), p.add(4), 4);
            AtomicU32::from_ptr(p.add(8).cast::<u32>())
                .store(st.programmed_pages.to_le(), Ordering::Release);
        }
    }

    /// Copies `data.len()` bytes from `offset` of the page, and the first `oob.len()` OOB bytes.
    pub(crate) fn read_page(
        &self,
        block: u32,
        page: u32,
        offset: usize,
        data: &mut [u8],
        oob: Option<&mut [u8]>,
    ) {
        let i = self.page_index(block, page);
        assert!(offset + data.len() <= self.page_size, "read past page end");
        // An OOB-only read (recovery's scan, GC's look at a page) leaves the frame table alone.
        if !data.is_empty() {
            // SAFETY: page `i`'s frame spans page_size bytes inside the bank's data region (see
            // `frame_ptr`); offset + len <= page_size was just checked. `data` is a distinct
            // caller buffer (it cannot alias the mapping: no safe reference to the mapping
            // exists). `&self` means the bank lock is held, so no write races with this read.
            unsafe {
                let src = self.frame_ptr(self.frame(i)).add(offset);
                ptr::copy_nonoverlapping(src, data.as_mut_ptr(), data.len());
            }
        }
        if let Some(oob) = oob {
            assert!(oob.len() <= self.oob_size, "oob buffer too large");
            // SAFETY: as above, for the page's oob_size bytes in the bank's OOB region.
            unsafe {
                let src = self.oob.add(i * self.oob_size);
                ptr::copy_nonoverlapping(src, oob.as_mut_ptr(), oob.len());
            }
        }
    }

    /// Makes sure the file backs everything a program of page `(block, page)` will store: gives
    /// the page a frame of its own (as the program would; its frame-table entry is backed
    /// first if that changes it), then backs that frame and the page's OOB entry. On an error
    /// (a full file system) nothing of the page was stored; the page may own another frame,
    /// which is harmless (see `own_frame`).
    /// With `full`, room not yet allocated is refused (a full file system, injected).
    pub(crate) fn make_room(&mut self, block: u32, page: u32, full: bool) -> std::io::Result<()> {
        let i = self.page_index(block, page);
        let mut f = self.frame(i);
        if self.refs[f] != 1 {
            self.room_frame_table.ensure_or(
                i * FRAME_ENTRY_SIZE as usize,
                FRAME_ENTRY_SIZE as usize,
                full,
            )?;
            f = self.own_frame(i);
        }
        self.room_data
            .ensure_or(f * self.page_size, self.page_size, full)?;
        self.room_oob
            .ensure_or(i * self.oob_size, self.oob_size, full)
    }

    /// [`BankMem::make_room`] for a copyback of page `src` onto page `dst` ([`BankMem::copy_page`]:
    /// `dst`'s frame-table entry and OOB entry, and the frame it copies into when `src`'s frame
    /// cannot be shared further).
    pub(crate) fn make_room_copy(
        &mut self,
        src: (u32, u32),
        dst: (u32, u32),
        full: bool,
    ) -> std::io::Result<()> {
        let (s, d) = (self.page_index(src.0, src.1), self.page_index(dst.0, dst.1));
        self.room_frame_table.ensure_or(
            d * FRAME_ENTRY_SIZE as usize,
            FRAME_ENTRY_SIZE as usize,
            full,
        )?;
        if self.refs[self.frame(s)] == u8::MAX {
            let f = self.own_frame(d);
            self.room_data
                .ensure_or(f * self.page_size, self.page_size, full)?;
        }
        self.room_oob
            .ensure_or(d * self.oob_size, self.oob_size, full)
    }

    /// Writes a whole page, given as parts that follow one another, and its OOB; OOB bytes past
    /// `oob.len()` are set to 0xFF, as if left unprogrammed.
    pub(crate) fn write_page(&mut self, block: u32, page: u32, data: &[&[u8]], oob: &[u8]) {
        let i = self.page_index(block, page);
        let len: usize = data.iter().map(|d| d.len()).sum();
        assert!(len == self.page_size && oob.len() <= self.oob_size);
        let f = self.own_frame(i);
        // SAFETY: the destination ranges are page `i`'s own (unshared) frame and its OOB inside
        // this bank's regions (index checked above, lengths checked just now: the parts add up
        // to the frame, each written after the ones before it); `&mut self` means the bank lock
        // is held, so no other access to them is possible; the source buffers are caller
        // memory that cannot alias the mapping. The frame is written with streaming stores (it
        // is cold; see `stream_copy`), fenced before the block table's update.
        unsafe {
            let frame = self.frame_ptr(f);
            let mut at = 0;
            for part in data {
                copy_streaming(frame.add(at), part);
                at += part.len();
            }
            let o = self.oob.add(i * self.oob_size);
            ptr::copy_nonoverlapping(oob.as_ptr(), o, oob.len());
            ptr::write_bytes(o.add(oob.len()), 0xFF, self.oob_size - oob.len());
        }
    }

    /// Copies page `src` (data and OOB) over page `dst` of the same bank (NAND copyback).
    /// The two must differ; the caller checked that `dst` may be programmed.
    ///
    /// The data is not copied: `dst` shares `src`'s frame (see the module docs), unless that
    /// frame's reference count is saturated, when the bytes are copied into a frame of `dst`'s own.
    pub(crate) fn copy_page(&mut self, src: (u32, u32), dst: (u32, u32)) {
        let (s, d) = (self.page_index(src.0, src.1), self.page_index(dst.0, dst.1));
        assert!(s != d, "copyback onto its own source page");
        let fs = self.frame(s);
        if self.refs[fs] == u8::MAX {
            let fd = self.own_frame(d);
            debug_assert!(fd != fs);
            // SAFETY: both frames lie inside the bank's data region (`frame_ptr`); fd is d's own
            // frame (refcount 1) while fs has 255 references, so they differ and the ranges
            // cannot overlap; `&mut self` means the bank lock is held.
            unsafe {
                ptr::copy_nonoverlapping(self.frame_ptr(fs), self.frame_ptr(fd), self.page_size)
            };
        } else {
            let old = self.frame(d);
            self.refs[old] -= 1;
            if self.refs[old] == 0 {
                self.pool.push(old as u32);
            }
            self.refs[fs] += 1;
            self.set_frame(d, fs);
        }
        // SAFETY: both indices were bounds-checked by `page_index`, so each page's OOB lies
        // inside this bank's OOB region; s != d, so the ranges are disjoint and cannot overlap;
        // `&mut self` means the bank lock is held, so nothing else touches them.
        unsafe {
            ptr::copy_nonoverlapping(
                self.oob.add(s * self.oob_size),
                self.oob.add(d * self.oob_size),
                self.oob_size,
            );
        }
    }

    /// Sets a whole page and its OOB to the erased pattern (0xFF).
    pub(crate) fn fill_erased(&mut self, block: u32, page: u32) {
        let i = self.page_index(block, page);
        let f = self.own_frame(i);
        // SAFETY: page `i` was bounds-checked; its own frame and its OOB lie inside this bank's
        // regions, and `&mut self` means the bank lock is held.
        unsafe {
            ptr::write_bytes(self.frame_ptr(f), 0xFF, self.page_size);
            ptr::write_bytes(self.oob.add(i * self.oob_size), 0xFF, self.oob_size);
        }
    }

    /// Fills a page and its OOB with noise (what a failed program leaves behind), seeded by the
    /// page's position so it is reproducible.
    pub(crate) fn write_garbage(&mut self, block: u32, page: u32) {
        let i = self.page_index(block, page);
        let mut state = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut noise = vec![0u8; self.page_size + self.oob_size];
        for chunk in noise.chunks_mut(8) {
            // xorshift64: cheap, never all-zero or all-0xFF over a page.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        let (data, oob) = noise.split_at(self.page_size);
        self.write_page(block, page, &[data], oob);
    }
}
