//! Prefaulting: mapping a block's pages in before they are programmed, on a thread of its own.
//!
//! The image is created sparse, and even a written file's pages are unmapped in a new process,
//! so the first store into each 4 KiB of a block is a page fault: the kernel allocates (or
//! looks up), zeroes and maps a page. On the 2-vCPU PVM guest of 2026-11-27 that costs 2.3 us
//! per 4 KiB of a tmpfs file (1 us of it the mapping alone), as much through
//! `madvise(MADV_POPULATE_WRITE)` as through a store: the cost is the kernel's, not the
//! exception's. With timing `off` a program runs inline in the host's own thread, so on a fresh
//! image the host paid it: sequential 128 KiB writes on `lftl-card` spent 72 % of the serving
//! thread's CPU in those faults (`perf`), and the emulator's ceiling was ~1 GB/s.
//!
//! So when a block's first page is programmed, the device asks the [`Prefaulter`] for that block
//! and the next one of its bank (allocators hand a fresh image's blocks out in order): its
//! thread populates their data frames and OOB entries with `MADV_POPULATE_WRITE` (Linux 5.14),
//! beside the host. The block's next programs are then plain stores. Populating does not change
//! what the pages hold (the kernel faults them in as a write would, without the write), so
//! racing the programs of the same pages, or reads, is harmless and needs no bank lock. Each
//! block is asked for once per process (a bit per block): a block programmed again after an
//! erase is still mapped. The thread runs `SCHED_IDLE`: it takes only CPU time nothing else
//! wants, and a page it has not reached yet is simply faulted in by its program as before.
//!
//! Only with timing `off` and `virtual` (where the wall clock is not part of the model and a
//! replay is as fast as its CPU work). With timing `real` a program's store is made by the
//! queue's writer thread inside the modelled program time, already beside the host: measured
//! on the same guest, a prefault thread there only took CPU from the host and fio (`lftl-card`
//! sequential writes 1.02-1.11 GB/s against 1.16-1.18 without, limit 1.18).
//!
//! Only the block's own frames are populated: a page whose data moved to another frame after a
//! copyback (see `bankmem`) writes a frame that was written before, which is in memory already.
//! A kernel without `MADV_POPULATE_WRITE` (`EINVAL`) turns the prefaulter off for good; any
//! other failure (a full tmpfs, say) is counted and left to the program's own store, which
//! behaves exactly as it did without the prefaulter.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use memmap2::MmapRaw;

use crate::geometry::Geometry;
use crate::header::Layout;
use crate::stats::PrefaultCounts;

/// State shared by the device (which asks) and the prefault thread (which populates).
struct Shared {
    /// One bit per block of the device (global block index): asked for already.
    asked: Vec<AtomicU64>,
    /// False once the kernel refused the advice or the device is being dropped (or with no
    /// thread): nothing is asked for, and the thread stops.
    enabled: AtomicBool,
    /// Blocks populated, and blocks whose populate failed (see [`PrefaultCounts`]).
    blocks: AtomicU64,
    failures: AtomicU64,
}

/// Where a block's data frames and OOB entries lie in the mapping.
#[derive(Clone, Copy)]
struct BlockRanges {
    data: u64,
    oob: u64,
    block_data: u64,
    block_oob: u64,
    /// The system's page size: `madvise` wants its start aligned to it.
    os_page: u64,
}

impl BlockRanges {
    /// Global block `block`'s data and OOB ranges, widened to whole system pages (populating a
    /// neighbour's page too is harmless: it changes nothing). An empty range is left out.
    fn of(&self, block: u64) -> impl Iterator<Item = (usize, usize)> {
        let p = self.os_page;
        [
            (self.data + block * self.block_data, self.block_data),
            (self.oob + block * self.block_oob, self.block_oob),
        ]
        .into_iter()
        .filter(|&(_, len)| len > 0)
        .map(move |(off, len)| {
            let start = off / p * p;
            let end = (off + len).div_ceil(p) * p;
            (start as usize, (end - start) as usize)
        })
    }
}

/// Populates blocks' mappings on a thread of its own; see the module docs.
pub(crate) struct Prefaulter {
    shared: Arc<Shared>,
    /// Global block indices to populate. `None` once dropped.
    tx: Option<Sender<u64>>,
    thread: Option<JoinHandle<()>>,
    blocks_per_bank: u64,
}

/// The system's page size.
fn os_page() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 on error, handled below.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

impl Prefaulter {
    /// A prefaulter for the image mapped at `map`, laid out per `layout` for geometry `g`.
    /// Without a thread (it could not be spawned) it does nothing, which is only slower.
    pub(crate) fn new(map: &Arc<MmapRaw>, g: &Geometry, layout: &Layout) -> Prefaulter {
        let words = g.total_blocks().div_ceil(64) as usize;
        let shared = Arc::new(Shared {
            asked: (0..words).map(|_| AtomicU64::new(0)).collect(),
            enabled: AtomicBool::new(true),
            blocks: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        });
        let ppb = u64::from(g.pages_per_block);
        let blocks_per_bank = u64::from(g.blocks_per_bank);
        let ranges = BlockRanges {
            data: layout.data,
            oob: layout.oob,
            block_data: ppb * u64::from(g.page_size),
            block_oob: ppb * u64::from(g.oob_size),
            os_page: os_page(),
        };
        let (tx, rx) = mpsc::channel();
        let thread = {
            let (map, shared) = (Arc::clone(map), Arc::clone(&shared));
            std::thread::Builder::new()
                .name("nand-prefault".into())
                .spawn(move || populate_loop(&map, &shared, ranges, &rx))
                .ok()
        };
        if thread.is_none() {
            shared.enabled.store(false, Ordering::Relaxed);
        }
        Prefaulter {
            shared,
            tx: Some(tx),
            thread,
            blocks_per_bank,
        }
    }

    /// A prefaulter that does nothing (timing `real`; see the module docs).
    pub(crate) fn off() -> Prefaulter {
        Prefaulter {
            shared: Arc::new(Shared {
                asked: Vec::new(),
                enabled: AtomicBool::new(false),
                blocks: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
            tx: None,
            thread: None,
            blocks_per_bank: 0,
        }
    }

    /// Global block `block` (`Geometry::block_index`) is being programmed from its first page:
    /// asks for it and the next block of its bank to be populated.
    pub(crate) fn block_opened(&self, block: u64) {
        self.ask(block);
        if self.blocks_per_bank > 0 && !(block + 1).is_multiple_of(self.blocks_per_bank) {
            self.ask(block + 1);
        }
    }

    /// Asks for `block` to be populated unless it was asked for before. Cheap: a relaxed load
    /// when it was, one `fetch_or` and a channel send the first time.
    fn ask(&self, block: u64) {
        let (word, bit) = ((block / 64) as usize, 1u64 << (block % 64));
        let Some(w) = self.shared.asked.get(word) else {
            return;
        };
        if w.load(Ordering::Relaxed) & bit != 0 || !self.shared.enabled.load(Ordering::Relaxed) {
            return;
        }
        if w.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
            return;
        }
        if let Some(tx) = &self.tx {
            // A send fails only when the thread is gone (it panicked): nothing to do then.
            let _ = tx.send(block);
        }
    }

    /// What the thread has done so far.
    pub(crate) fn counts(&self) -> PrefaultCounts {
        PrefaultCounts {
            blocks: self.shared.blocks.load(Ordering::Relaxed),
            failures: self.shared.failures.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Prefaulter {
    fn drop(&mut self) {
        // What is still queued is dropped (the device is going away: closing must not wait
        // for a backlog of populates); closing the channel ends the thread.
        self.shared.enabled.store(false, Ordering::Relaxed);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The prefault thread: populates each block it receives until the channel closes.
fn populate_loop(map: &MmapRaw, shared: &Shared, ranges: BlockRanges, rx: &Receiver<u64>) {
    // SCHED_IDLE: populating runs on CPU time nothing else wants. Taking a CPU from the host's
    // threads (or the client beside them) would cost more than it saves, and a page not
    // populated yet is simply faulted in by its program.
    let idle = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; the parameter is a valid sched_param. Failure only
    // leaves the thread at its normal priority.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) };
    let base = map.as_mut_ptr();
    let map_len = map.len();
    for block in rx {
        let mut ok = true;
        for (off, len) in ranges.of(block) {
            if !shared.enabled.load(Ordering::Relaxed) {
                return;
            }
            // The block came from a validated address and the offsets from the layout the
            // mapping was checked against; a range past the end is skipped, not trusted.
            if off.checked_add(len).is_none_or(|end| end > map_len) {
                ok = false;
                continue;
            }
            // SAFETY: [off, off + len) lies inside the mapping (checked just now), which `map`
            // keeps alive for the whole call. MADV_POPULATE_WRITE only faults the pages in (as
            // a write would, without writing), so it neither reads nor changes memory that the
            // device's threads may be using at the same time.
            let rc = unsafe {
                libc::madvise(
                    base.add(off).cast::<libc::c_void>(),
                    len,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                    // The kernel predates the advice (Linux 5.14): off for good.
                    shared.enabled.store(false, Ordering::Relaxed);
                    return;
                }
                ok = false;
            }
        }
        if ok {
            shared.blocks.fetch_add(1, Ordering::Relaxed);
        } else {
            shared.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::{
        BlockAddr, Geometry, NandConfig, NandDevice, PageAddr, PrefaultCounts, Timing, TimingMode,
    };

    const PAGE: u32 = 4096;
    const PAGES: u32 = 16;
    const BLOCKS: u32 = 8;

    fn config() -> NandConfig {
        NandConfig {
            geometry: Geometry {
                channels: 2,
                banks_per_channel: 2,
                blocks_per_bank: BLOCKS,
                pages_per_block: PAGES,
                page_size: PAGE,
                oob_size: 128,
            },
            timing: Timing {
                t_read: Duration::from_micros(25),
                t_prog: Duration::from_micros(200),
                t_erase: Duration::from_micros(1500),
                channel_bytes_per_sec: 400_000_000,
                ..Default::default()
            },
            endurance: 100,
            interconnect: Default::default(),
            planes: 1,
        }
    }

    /// A device on tmpfs: its page faults allocate exactly the page touched (a disk file's
    /// fault reads ahead around it, so residency would say nothing).
    fn device(mode: TimingMode) -> (tempfile::TempDir, NandDevice) {
        let dir = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm (tmpfs)");
        let dev = NandDevice::create(&dir.path().join("nand.img"), &config(), mode)
            .expect("create image");
        (dir, dev)
    }

    fn data(addr: PageAddr) -> Vec<u8> {
        (0..PAGE as usize)
            .map(|i| (i as u8) ^ (addr.page as u8).wrapping_mul(31) ^ (addr.block.block as u8))
            .collect()
    }

    fn program(dev: &NandDevice, addr: PageAddr) {
        dev.program(addr, &data(addr), &[addr.page as u8; 16])
            .expect("program")
            .wait();
    }

    /// Whether each system page of the data frames of `block`'s pages `pages` is resident (in
    /// the page cache: mincore on the device's own shared mapping of the file).
    fn resident(dev: &NandDevice, block: BlockAddr, pages: std::ops::Range<u32>) -> Vec<bool> {
        let (map, layout) = dev.mapping();
        let g = dev.geometry();
        let first = g.page_index(block.page(pages.start));
        let off = layout.data + first * u64::from(PAGE);
        let len = (pages.end - pages.start) as usize * PAGE as usize;
        let os = super::os_page() as usize;
        assert_eq!(off as usize % os, 0, "frames are page-aligned here");
        let mut vec = vec![0u8; len.div_ceil(os)];
        // SAFETY: [off, off + len) lies inside the mapping (a block of the device), and `vec`
        // has one byte per system page of it, as mincore requires.
        let rc = unsafe {
            libc::mincore(
                map.as_mut_ptr().add(off as usize).cast::<libc::c_void>(),
                len,
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().map(|v| v & 1 == 1).collect()
    }

    /// Waits for the prefault thread to have done `blocks` blocks (it was asked for that many).
    fn await_blocks(dev: &NandDevice, blocks: u64) -> PrefaultCounts {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let c = dev.stats().prefault;
            if c.blocks + c.failures >= blocks {
                return c;
            }
            assert!(Instant::now() < deadline, "prefault thread stuck at {c:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn first_program_populates_the_block_and_the_next_and_changes_no_data() {
        let (_dir, dev) = device(TimingMode::Off);
        let b = BlockAddr::new(1, 2);
        assert!(
            resident(&dev, b, 0..PAGES).iter().all(|r| !r),
            "a fresh sparse image has nothing resident"
        );
        program(&dev, b.page(0));
        let c = await_blocks(&dev, 2);
        assert_eq!(
            c,
            PrefaultCounts {
                blocks: 2,
                failures: 0
            }
        );
        assert!(
            resident(&dev, b, 1..PAGES).iter().all(|&r| r),
            "rest of the block"
        );
        assert!(
            resident(&dev, BlockAddr::new(1, 3), 0..PAGES)
                .iter()
                .all(|&r| r),
            "the next block of the bank"
        );
        assert!(
            resident(&dev, BlockAddr::new(1, 4), 0..PAGES)
                .iter()
                .all(|r| !r),
            "nothing else"
        );
        // Populating changed nothing: the programmed page reads back, the others read erased.
        let mut buf = vec![0u8; PAGE as usize];
        dev.read(b.page(0), 0, &mut buf, None).expect("read").wait();
        assert_eq!(buf, data(b.page(0)));
        dev.read(b.page(1), 0, &mut buf, None).expect("read").wait();
        assert!(
            buf.iter().all(|&x| x == 0xFF),
            "an unprogrammed page reads erased"
        );
        // Programs into populated pages are plain stores; every page reads back.
        for p in 1..PAGES {
            program(&dev, b.page(p));
        }
        for p in 0..PAGES {
            dev.read(b.page(p), 0, &mut buf, None).expect("read").wait();
            assert_eq!(buf, data(b.page(p)), "page {p}");
        }
    }

    #[test]
    fn each_block_once_and_never_past_the_bank() {
        let (_dir, dev) = device(TimingMode::Off);
        // The bank's last block: no next block in this bank, and none taken from the next.
        let last = BlockAddr::new(0, BLOCKS - 1);
        program(&dev, last.page(0));
        assert_eq!(await_blocks(&dev, 1).blocks, 1);
        assert!(resident(&dev, BlockAddr::new(1, 0), 0..PAGES)
            .iter()
            .all(|r| !r));
        // Erased and programmed again: asked for before, so not again. A later request for
        // other blocks is counted after it (the channel is FIFO), so the count is exact.
        dev.erase(last).expect("erase").wait();
        program(&dev, last.page(0));
        program(&dev, BlockAddr::new(2, 5).page(0));
        assert_eq!(await_blocks(&dev, 3).blocks, 3);
        assert!(resident(&dev, BlockAddr::new(2, 6), 0..PAGES)
            .iter()
            .all(|&r| r));
    }

    #[test]
    fn timing_real_leaves_the_programs_to_fault_their_own_pages() {
        let (_dir, dev) = device(TimingMode::Real);
        let b = BlockAddr::new(3, 1);
        program(&dev, b.page(0));
        // No thread exists with timing real, so nothing can populate later either. (The
        // program itself backed the chunk of the file it stores into, `backing`, which may
        // hold the block's next pages: the next block is beyond it.)
        assert_eq!(dev.stats().prefault, PrefaultCounts::default());
        assert!(resident(&dev, BlockAddr::new(3, 2), 0..PAGES)
            .iter()
            .all(|r| !r));
    }
}
