//! [`NandDevice`]: the emulated SSD. Checks the flash rules, applies data effects to the mapped
//! image, asks the fault injector, and computes each operation's completion time.
//!
//! Concurrency model:
//! - **bank mutex** (`Bank::state`): the bank's part of the image (block-table entries, page
//!   data, OOB; see `bankmem.rs`) and its timeline (`free_at`). Every operation takes exactly one
//!   bank lock and holds it for the rule checks, the memcpy and the timeline update, so operations
//!   on one bank are linearizable and different banks never contend.
//! - **controller pool mutex** (`interconnect::Controllers`): the controllers' timelines only,
//!   taken briefly inside a bank lock. Lock order: bank, then pool; nothing takes two banks or
//!   two pools.
//! - The fault injector has its own short lock, taken inside the bank lock only when faults are
//!   armed. Operation counters live under the bank lock (every operation holds it anyway);
//!   the in-flight count and `busy_until` are atomics, readable without locks.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::bankmem::{BankMem, BlockState, TableError};
use crate::clock::{SimClock, ALREADY_DONE};
use crate::completion::Completion;
use crate::config::{NandConfig, MAX_PLANES};
use crate::error::{BufferKind, ImageError, NandError};
use crate::faults::{FaultInjector, Power};
use crate::geometry::{BankId, BlockAddr, Geometry, PageAddr};
use crate::image::{Access, Image};
use crate::prefault::Prefaulter;
use crate::stats::{BankCounters, ChannelStats, NandStats, OpCounters, TotalStats};
use crate::timeline::{BankTimeline, Timeline};
use crate::timing::TimingMode;
use crate::waiting::TimerMode;
#[cfg(test)]
use memmap2::MmapRaw;

/// Load of one bank, readable without taking its lock ([`NandDevice::bank_load`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BankLoad {
    /// Operations submitted to the bank whose `Completion` is not yet waited or dropped.
    pub inflight: u32,
    /// How long until the bank's modelled timeline frees up (on the simulated clock with timing
    /// `virtual`); `None` if it is idle now (always `None` with timing off).
    pub busy_for: Option<Duration>,
}

struct BankState {
    mem: BankMem,
    /// The bank's timeline (its end, and a program or erase reads may suspend).
    tl: BankTimeline,
    /// The bank's operation counters (the lock-free ones are in `Bank::counters`).
    ops: OpCounters,
}

struct Bank {
    state: Mutex<BankState>,
    counters: Arc<BankCounters>,
}

/// The check [`NandDevice::copyback_checked`] runs on the OOB read out before the program.
pub type CopybackCheck<'a> = &'a mut dyn FnMut(&[u8]) -> bool;

/// What [`NandDevice::copyback_checked`] did.
#[derive(Debug)]
#[must_use]
pub enum Copyback {
    /// The page was programmed at the destination; the completion is the program's.
    Programmed(Completion),
    /// The caller declined the OOB it saw: the destination is untouched, and the completion is
    /// the read's.
    Declined(Completion),
}

/// Which blocks a peek reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Blocks {
    GoodOnly,
    BadToo,
}

/// A file-backed emulated NAND SSD. `Send + Sync`; every method takes `&self`.
pub struct NandDevice {
    /// Maps a block's pages in when its first page is programmed (see `prefault`). First, so
    /// it is dropped (its thread joined) before the image's lock is released.
    prefault: Prefaulter,
    image: Image,
    config: NandConfig,
    banks: Vec<Bank>,
    timeline: Timeline,
    faults: FaultInjector,
    violations: AtomicU64,
}

impl std::fmt::Debug for NandDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NandDevice")
            .field("path", &self.image.path)
            .field("config", &self.config)
            .field("mode", &self.timeline.mode())
            .finish_non_exhaustive()
    }
}

impl NandDevice {
    /// Creates a new image file at `path` (sparse, all blocks erased) and opens it.
    /// Refuses to overwrite an existing file ([`ImageError::AlreadyExists`]).
    pub fn create(
        path: &Path,
        config: &NandConfig,
        mode: TimingMode,
    ) -> Result<NandDevice, ImageError> {
        NandDevice::from_image(Image::create(path, config)?, mode)
    }

    /// Opens an existing image. With `expected`, its geometry must match field by field.
    pub fn open(
        path: &Path,
        expected: Option<&Geometry>,
        mode: TimingMode,
    ) -> Result<NandDevice, ImageError> {
        NandDevice::open_with(path, expected, mode, Access::ReadWrite)
    }

    /// [`Self::open`] with the access asked for: [`Access::ReadOnly`] reads the image without
    /// changing a byte of it (see there).
    pub fn open_with(
        path: &Path,
        expected: Option<&Geometry>,
        mode: TimingMode,
        access: Access,
    ) -> Result<NandDevice, ImageError> {
        NandDevice::from_image(Image::open(path, expected, access)?, mode)
    }

    /// How the image was opened.
    pub fn access(&self) -> Access {
        self.image.access
    }

    /// Refuses an operation that changes the medium on an image opened read-only; first in
    /// each such operation, before anything is stored through the (then read-only) mapping.
    fn check_writable(&self) -> Result<(), NandError> {
        match self.image.access {
            Access::ReadWrite => Ok(()),
            Access::ReadOnly => Err(NandError::ReadOnly),
        }
    }

    fn from_image(image: Image, mode: TimingMode) -> Result<NandDevice, ImageError> {
        let config = image.header.config;
        let g = config.geometry;
        let writable = image.access == Access::ReadWrite;
        let mems = BankMem::split(&image.map, &g, &image.layout, writable, |buf, off| {
            image.read_exact_at(buf, off)
        })
        .map_err(|e| match e {
            TableError::Frame { bank, page, reason } => ImageError::CorruptFrameTable {
                path: image.path.clone(),
                bank,
                page,
                reason,
            },
            TableError::Block {
                bank,
                block,
                programmed_pages,
            } => ImageError::CorruptBlockTable {
                path: image.path.clone(),
                bank,
                block,
                programmed_pages,
                pages_per_block: g.pages_per_block,
            },
            TableError::NoRoom { bank, error } => ImageError::NoRoom {
                path: image.path.clone(),
                bank,
                error,
            },
            TableError::Read(source) => ImageError::Io {
                path: image.path.clone(),
                source,
            },
        })?
        .ok_or_else(|| ImageError::Truncated {
            path: image.path.clone(),
            expected: image.layout.len,
            actual: image.map.len() as u64,
        })?;
        let banks = mems
            .into_iter()
            .map(|mem| Bank {
                state: Mutex::new(BankState {
                    mem,
                    tl: BankTimeline::default(),
                    ops: OpCounters::default(),
                }),
                counters: Arc::new(BankCounters::default()),
            })
            .collect();
        Ok(NandDevice {
            timeline: Timeline::new(mode, config.timing, &g, config.interconnect),
            // Nothing is programmed on a read-only image: no block to map in ahead.
            prefault: match (mode, image.access) {
                (TimingMode::Real, _) | (_, Access::ReadOnly) => Prefaulter::off(),
                (TimingMode::Off | TimingMode::Virtual, Access::ReadWrite) => {
                    Prefaulter::new(&image.map, &g, &image.layout)
                }
            },
            image,
            config,
            banks,
            faults: FaultInjector::default(),
            violations: AtomicU64::new(0),
        })
    }

    /// The image file's path.
    pub fn path(&self) -> &Path {
        &self.image.path
    }

    /// Allocates the whole image file now (`fallocate`), and on tmpfs maps all of it in, so
    /// that no program waits for the file system to allocate the page it stores into, and no
    /// access faults. A sparse image's first pass otherwise runs at the kernel's allocation
    /// speed: 2.3 us per 4 KiB of tmpfs for a first store on the 2-vCPU guest of 2026-11-27
    /// (1 us of it for mapping an allocated page), which capped sequential writes with timing
    /// real at ~1.3 GB/s (`nvmevirt-970pro`, limit 2.3 GB/s). The file then holds its full
    /// length in RAM (tmpfs) or on disk, and on tmpfs the process's page tables map it all
    /// (2 MiB per GiB). Data does not change; on an already allocated file it is cheap.
    /// Returns whether the mapping was populated (tmpfs).
    pub fn preallocate(&self) -> Result<bool, ImageError> {
        self.image.preallocate()
    }

    /// Geometry, timing and endurance stored in the image.
    pub fn config(&self) -> &NandConfig {
        &self.config
    }

    /// The device's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.config.geometry
    }

    /// Whether operations take modelled time.
    pub fn timing_mode(&self) -> TimingMode {
        self.timeline.mode()
    }

    /// How waits for this device's completions pass the time on the host's clock (timing
    /// `real`): see [`TimerMode`]. A property of the emulation, not of the device, so it is
    /// not stored in the image; operations submitted after the call use it.
    pub fn set_timer(&self, timer: TimerMode) {
        self.timeline.set_timer(timer);
    }

    /// The current [`TimerMode`].
    pub fn timer(&self) -> TimerMode {
        self.timeline.timer()
    }

    /// The simulated clock, with timing `virtual` (`None` otherwise).
    pub fn sim_clock(&self) -> Option<&SimClock> {
        self.timeline.sim().map(|c| &**c)
    }

    /// The device's clock in nanoseconds: `CLOCK_MONOTONIC` with timing `real` (what an
    /// [`crate::ArrivalScope`] takes), the simulated clock with `virtual`; with `off` the host's
    /// clock too, though nothing uses it.
    pub fn now_ns(&self) -> u64 {
        self.timeline.clock_ns()
    }

    /// When every bank and controller is idle: the latest end of any timeline, on the device's
    /// clock in nanoseconds (0 with timing off).
    pub fn idle_at_ns(&self) -> u64 {
        self.banks
            .iter()
            .map(|b| b.counters.busy_until.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// Random identity given to the image at creation.
    pub fn uuid(&self) -> [u8; 16] {
        self.image.header.uuid
    }

    /// When the image was created.
    pub fn created(&self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_nanos(self.image.header.created_unix_ns)
    }

    /// The fault injector of this device.
    pub fn faults(&self) -> &FaultInjector {
        &self.faults
    }

    /// Flash-rule violations returned so far (faults not included).
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }

    /// Writes everything to stable storage (`msync` of the mapping, then `fsync`).
    pub fn sync(&self) -> Result<(), ImageError> {
        self.image.sync()
    }

    /// Lock-free load figures of `bank` (an out-of-range bank reads as idle).
    pub fn bank_load(&self, bank: BankId) -> BankLoad {
        let Some(b) = self.banks.get(bank.0 as usize) else {
            return BankLoad {
                inflight: 0,
                busy_for: None,
            };
        };
        let until = b.counters.busy_until.load(Ordering::Relaxed);
        let now = match self.timing_mode() {
            TimingMode::Off => u64::MAX,
            TimingMode::Real | TimingMode::Virtual => self.timeline.now(),
        };
        BankLoad {
            inflight: b.counters.inflight.load(Ordering::Relaxed),
            busy_for: (until > now).then(|| Duration::from_nanos(until - now)),
        }
    }

    /// Snapshot of all counters (takes each bank's lock in turn).
    pub fn stats(&self) -> NandStats {
        let g = self.geometry();
        let mut channels: Vec<ChannelStats> = (0..g.channels)
            .map(|channel| ChannelStats {
                channel,
                ..ChannelStats::default()
            })
            .collect();
        let banks: Vec<_> = self
            .banks
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let ops = b.state.lock().ops;
                let ch = g.channel_of(BankId(i as u32));
                if let Some(c) = channels.get_mut(ch as usize) {
                    c.transfers += ops.xfers;
                    c.bytes += ops.xfer_bytes;
                    c.busy_ns += ops.xfer_busy_ns;
                }
                ops.snapshot(&b.counters, i as u32, ch)
            })
            .collect();
        NandStats {
            totals: TotalStats::sum(&banks),
            banks,
            channels,
            violations: self.violations(),
            injected: self.faults.injected(),
            prefault: self.prefault.counts(),
        }
    }

    /// The image's mapping and layout (the prefault tests look at what is resident).
    #[cfg(test)]
    pub(crate) fn mapping(&self) -> (&MmapRaw, crate::header::Layout) {
        (&self.image.map, self.image.layout)
    }

    /// Persistent state of `block` (also for bad blocks).
    pub fn block_state(&self, block: BlockAddr) -> Result<BlockState, NandError> {
        let bank = self.bank_of(block)?;
        let st = bank.state.lock();
        Ok(st.mem.block(block.block))
    }

    /// Copies page `addr`'s stored OOB into `oob` without an operation: no time passes, nothing
    /// is counted, no fault is injected (for invariant checks and tools, not for an FTL's data
    /// path). Returns false, leaving `oob` untouched, for an unprogrammed page or a bad block.
    pub fn peek_oob(&self, addr: PageAddr, oob: &mut [u8]) -> Result<bool, NandError> {
        self.peek(addr, 0, &mut [], oob, Blocks::GoodOnly)
    }

    /// Copies `data.len()` bytes from byte `offset` of page `addr` and its first `oob.len()`
    /// OOB bytes, of a bad block too: what a controller salvaging a block that went bad reads
    /// of it (recovery, to learn which logical pages such a block holds the newest versions
    /// of, and the trim records it holds). No time passes, nothing is counted, no fault is
    /// injected; false (buffers untouched) for an unprogrammed page.
    pub fn peek_of_bad(
        &self,
        addr: PageAddr,
        offset: u32,
        data: &mut [u8],
        oob: &mut [u8],
    ) -> Result<bool, NandError> {
        self.peek(addr, offset, data, oob, Blocks::BadToo)
    }

    /// The one body of the peeks: checks the buffers against the geometry, then copies under
    /// the bank lock. False (buffers untouched) for an unprogrammed page, and for a bad
    /// block's page unless `blocks` is `BadToo`.
    fn peek(
        &self,
        addr: PageAddr,
        offset: u32,
        data: &mut [u8],
        oob: &mut [u8],
        blocks: Blocks,
    ) -> Result<bool, NandError> {
        let bank = self.bank_of_page(addr)?;
        let g = self.geometry();
        if offset as usize + data.len() > g.page_size as usize {
            return Err(NandError::BufferSize {
                page: addr,
                buffer: BufferKind::Data,
                offset,
                len: data.len(),
                rule: "offset + length must be at most page_size",
            });
        }
        if oob.len() > g.oob_size as usize {
            return Err(NandError::BufferSize {
                page: addr,
                buffer: BufferKind::Oob,
                offset: 0,
                len: oob.len(),
                rule: "length must be at most oob_size",
            });
        }
        let st = bank.state.lock();
        let blk = st.mem.block(addr.block.block);
        if (blk.bad && blocks == Blocks::GoodOnly) || addr.page >= blk.programmed_pages {
            return Ok(false);
        }
        st.mem.read_page(
            addr.block.block,
            addr.page,
            offset as usize,
            data,
            Some(oob),
        );
        Ok(true)
    }

    /// Marks `block` bad (persisted). Idempotent. Every later operation on it is refused.
    pub fn mark_bad(&self, block: BlockAddr) -> Result<(), NandError> {
        let bank = self.bank_of(block)?;
        self.check_writable()?;
        if self.faults.power() != Power::On {
            return Ok(());
        }
        let mut st = bank.state.lock();
        let mut b = st.mem.block(block.block);
        b.bad = true;
        st.mem.set_block(block.block, b);
        Ok(())
    }

    /// Reads `data.len()` bytes from byte `offset` of the page (a column read) and, with `oob`,
    /// the first `oob.len()` OOB bytes. The bank is busy `t_read`, then `data.len() + oob.len()`
    /// bytes cross the channel. An erased (unprogrammed) page reads as 0xFF; that is not an error.
    pub fn read(
        &self,
        addr: PageAddr,
        offset: u32,
        data: &mut [u8],
        oob: Option<&mut [u8]>,
    ) -> Result<Completion, NandError> {
        let bank = self.bank_of_page(addr)?;
        let g = self.geometry();
        if u64::from(offset) + data.len() as u64 > u64::from(g.page_size) {
            return Err(self.violation(NandError::BufferSize {
                page: addr,
                buffer: BufferKind::Data,
                offset,
                len: data.len(),
                rule: "offset + length must be at most page_size",
            }));
        }
        let oob_len = oob.as_ref().map_or(0, |o| o.len());
        if oob_len > g.oob_size as usize {
            return Err(self.violation(NandError::BufferSize {
                page: addr,
                buffer: BufferKind::Oob,
                offset: 0,
                len: oob_len,
                rule: "length must be at most oob_size",
            }));
        }
        let mut st = bank.state.lock();
        let blk = st.mem.block(addr.block.block);
        if blk.bad {
            return Err(self.violation(NandError::BadBlock { block: addr.block }));
        }
        let fault = self.faults.read_fails(addr);
        if !fault {
            if addr.page < blk.programmed_pages {
                st.mem
                    .read_page(addr.block.block, addr.page, offset as usize, data, oob);
            } else {
                data.fill(0xFF);
                if let Some(o) = oob {
                    o.fill(0xFF);
                }
            }
        }
        let bytes = (data.len() + oob_len) as u64;
        let t_read = self.config.timing.read_ns(addr.page, blk.erase_count);
        let st = &mut *st;
        let deadline = self.timeline.read(
            &mut st.tl,
            &mut st.ops,
            &bank.counters,
            addr.block.bank,
            t_read,
            bytes,
        );
        st.ops.reads += 1;
        if fault {
            st.ops.faults += 1;
            return Err(NandError::Uncorrectable { page: addr });
        }
        st.ops.bytes_read += bytes;
        Ok(Completion::new(
            deadline,
            Arc::clone(&bank.counters),
            self.timeline.sim(),
            self.timeline.timer(),
        ))
    }

    /// Programs a whole page: `data.len()` must equal `page_size`, `oob.len()` at most `oob_size`
    /// (OOB bytes past `oob.len()` read back as 0xFF). The page must be the block's next free page.
    pub fn program(
        &self,
        addr: PageAddr,
        data: &[u8],
        oob: &[u8],
    ) -> Result<Completion, NandError> {
        self.program_planes(&[(addr, data, oob)])
    }

    /// Multi-plane program (ONFI's): one page in each of up to `planes` planes of a bank, all
    /// at the same page index (block `b` is in plane `b % planes`), for one array time: the
    /// pages cross the channel one after the other, then the bank is busy `t_prog` once. Each
    /// page follows [`Self::program`]'s rules; nothing is programmed unless all pass. A program
    /// fault on any page consumes that page (the others are programmed) and returns
    /// [`NandError::ProgramFailed`] naming the first such page, with a mask of every failed one.
    pub fn program_planes(
        &self,
        pages: &[(PageAddr, &[u8], &[u8])],
    ) -> Result<Completion, NandError> {
        // Refuses more pages than a bank has planes, so the arrays below hold them all.
        self.check_planes(pages.iter().map(|p| p.0))?;
        // Each page as one part; on the stack (GC stages every page it moves through here).
        const MAX: usize = MAX_PLANES as usize;
        let n = pages.len();
        let mut whole: [[&[u8]; 1]; MAX] = [[&[]]; MAX];
        for (w, p) in whole.iter_mut().zip(pages) {
            *w = [p.1];
        }
        let mut ops: [PlaneProgram<'_>; MAX] = [(pages[0].0, &[], &[]); MAX];
        for ((op, p), w) in ops.iter_mut().zip(pages).zip(&whole) {
            *op = (p.0, w, p.2);
        }
        self.program_planes_parts(&ops[..n])
    }

    /// [`Self::program_planes`] with each page's data given as parts that follow one another
    /// (their lengths must add up to `page_size`): the FTL's 4 KiB slots go into the page
    /// without being assembled in a buffer first.
    pub fn program_planes_parts(
        &self,
        pages: &[PlaneProgram<'_>],
    ) -> Result<Completion, NandError> {
        let bank = self.check_planes(pages.iter().map(|p| p.0))?;
        self.check_writable()?;
        let g = self.geometry();
        for &(addr, parts, oob) in pages {
            let len: usize = parts.iter().map(|d| d.len()).sum();
            if len != g.page_size as usize {
                return Err(self.violation(NandError::BufferSize {
                    page: addr,
                    buffer: BufferKind::Data,
                    offset: 0,
                    len,
                    rule: "length must equal page_size",
                }));
            }
            if oob.len() > g.oob_size as usize {
                return Err(self.violation(NandError::BufferSize {
                    page: addr,
                    buffer: BufferKind::Oob,
                    offset: 0,
                    len: oob.len(),
                    rule: "length must be at most oob_size",
                }));
            }
        }
        let power = self.faults.power();
        if power == Power::Off {
            return Ok(Completion::new(
                ALREADY_DONE,
                Arc::clone(&bank.counters),
                self.timeline.sim(),
                self.timeline.timer(),
            ));
        }
        let mut st = bank.state.lock();
        // Every page must be programmable before any is touched.
        let mut blks = [BlockState::default(); MAX_PLANES as usize];
        for (b, &(addr, ..)) in blks.iter_mut().zip(pages) {
            *b = self.programmable(&st.mem, addr)?;
        }
        for (b, &(addr, ..)) in blks.iter().zip(pages) {
            if b.programmed_pages == 0 {
                self.prefault.block_opened(g.block_index(addr.block));
            }
        }
        // Room in the file for every page before any is stored (see `backing`).
        let full = self.faults.room_refused();
        for &(addr, ..) in pages {
            st.mem
                .make_room(addr.block.block, addr.page, full)
                .map_err(|source| NandError::NoSpace { page: addr, source })?;
        }
        let mut failed = None;
        let mut failed_mask = 0u32;
        let mut faults = 0;
        for (i, (mut blk, &(addr, parts, oob))) in blks.into_iter().zip(pages).enumerate() {
            let fault = self.faults.program_fails(addr, blk.erase_count);
            // Data and OOB first, the counter last (see BankMem::set_block).
            if fault {
                st.mem.write_garbage(addr.block.block, addr.page);
                failed = failed.or(Some(addr));
                failed_mask |= 1 << i;
                faults += 1;
            } else if power == Power::Cut {
                let torn = torn(addr, &parts.concat());
                st.mem
                    .write_page(addr.block.block, addr.page, &[&torn], oob);
            } else {
                st.mem.write_page(addr.block.block, addr.page, parts, oob);
            }
            blk.programmed_pages += 1;
            st.mem.set_block(addr.block.block, blk);
        }
        let bytes: u64 = pages
            .iter()
            .map(|p| (g.page_size as usize + p.2.len()) as u64)
            .sum();
        let t_prog = pages
            .iter()
            .map(|p| self.config.timing.prog_ns(p.0.page))
            .max()
            .unwrap_or(0);
        let st = &mut *st;
        let (deadline, moves) = self.timeline.program(
            &mut st.tl,
            &mut st.ops,
            &bank.counters,
            bank_id_of(pages.iter().map(|p| p.0)),
            t_prog,
            bytes,
        );
        st.ops.programs += pages.len() as u64;
        if let Some(page) = failed {
            st.ops.faults += faults;
            return Err(NandError::ProgramFailed { page, failed_mask });
        }
        st.ops.bytes_programmed += bytes;
        Ok(Completion::new(
            deadline,
            Arc::clone(&bank.counters),
            self.timeline.sim(),
            self.timeline.timer(),
        )
        .following(moves))
    }

    /// Multi-plane read: reads `data.len()` bytes from byte `offset` of each page (and its
    /// first `oob.len()` OOB bytes), one page in each of up to `planes` planes of a bank at the
    /// same page index, for one array time (the slowest page's): the bank is busy `t_read`
    /// once, then every page's bytes cross the channel one after the other. Each read follows
    /// [`Self::read`]'s rules. A read fault on any page returns [`NandError::Uncorrectable`]
    /// for the first such page (the buffers are then unspecified).
    pub fn read_planes(&self, reads: &mut [PlaneRead<'_>]) -> Result<Completion, NandError> {
        let bank = self.check_planes(reads.iter().map(|r| r.0))?;
        let g = self.geometry();
        for (addr, offset, data, oob) in reads.iter() {
            if u64::from(*offset) + data.len() as u64 > u64::from(g.page_size) {
                return Err(self.violation(NandError::BufferSize {
                    page: *addr,
                    buffer: BufferKind::Data,
                    offset: *offset,
                    len: data.len(),
                    rule: "offset + length must be at most page_size",
                }));
            }
            let oob_len = oob.as_ref().map_or(0, |o| o.len());
            if oob_len > g.oob_size as usize {
                return Err(self.violation(NandError::BufferSize {
                    page: *addr,
                    buffer: BufferKind::Oob,
                    offset: 0,
                    len: oob_len,
                    rule: "length must be at most oob_size",
                }));
            }
        }
        let mut st = bank.state.lock();
        let mut t_read = 0;
        for (addr, ..) in reads.iter() {
            let blk = st.mem.block(addr.block.block);
            if blk.bad {
                return Err(self.violation(NandError::BadBlock { block: addr.block }));
            }
            t_read = t_read.max(self.config.timing.read_ns(addr.page, blk.erase_count));
        }
        let mut failed = None;
        let mut bytes = 0u64;
        for (addr, offset, data, oob) in reads.iter_mut() {
            bytes += (data.len() + oob.as_ref().map_or(0, |o| o.len())) as u64;
            if self.faults.read_fails(*addr) {
                failed = failed.or(Some(*addr));
                continue;
            }
            let blk = st.mem.block(addr.block.block);
            if addr.page < blk.programmed_pages {
                st.mem.read_page(
                    addr.block.block,
                    addr.page,
                    *offset as usize,
                    data,
                    oob.as_deref_mut(),
                );
            } else {
                data.fill(0xFF);
                if let Some(o) = oob {
                    o.fill(0xFF);
                }
            }
        }
        let st = &mut *st;
        let deadline = self.timeline.read(
            &mut st.tl,
            &mut st.ops,
            &bank.counters,
            bank_id_of(reads.iter().map(|r| r.0)),
            t_read,
            bytes,
        );
        st.ops.reads += reads.len() as u64;
        if let Some(page) = failed {
            st.ops.faults += 1;
            return Err(NandError::Uncorrectable { page });
        }
        st.ops.bytes_read += bytes;
        Ok(Completion::new(
            deadline,
            Arc::clone(&bank.counters),
            self.timeline.sim(),
            self.timeline.timer(),
        ))
    }

    /// The bank of a multi-plane operation's pages, if they may go together: 1 to `planes`
    /// pages, all in range, on one bank, at one page index, in distinct planes.
    fn check_planes(
        &self,
        pages: impl Iterator<Item = PageAddr> + Clone,
    ) -> Result<&Bank, NandError> {
        let all = pages.clone();
        let all = move || all.collect::<Vec<_>>();
        let mut it = pages.clone();
        let Some(first) = it.next() else {
            return Err(self.violation(NandError::MultiPlane {
                pages: Vec::new(),
                rule: "no pages",
            }));
        };
        let bank = self.bank_of_page(first)?;
        let planes = self.config.planes.max(1);
        let mut seen = 0u32;
        let mut n = 0u32;
        for p in pages {
            self.bank_of_page(p)?;
            n += 1;
            let rule = if n > planes {
                Some("more pages than the bank has planes")
            } else if p.block.bank != first.block.bank {
                Some("pages on different banks")
            } else if p.page != first.page {
                Some("pages at different page indexes")
            } else if seen & (1 << (p.block.block % planes)) != 0 {
                Some("two pages in one plane (block % planes)")
            } else {
                None
            };
            if let Some(rule) = rule {
                return Err(self.violation(NandError::MultiPlane { pages: all(), rule }));
            }
            seen |= 1 << (p.block.block % planes);
        }
        Ok(bank)
    }
    /// Copyback: moves page `src` to page `dst` of the same bank through the die's page
    /// register, without the data crossing the channel (the "copyback read, copyback program"
    /// pair of ONFI). `dst` must be the next free page of its block, as for [`Self::program`];
    /// the source's data and OOB are copied as they are (an erased source copies 0xFF). With
    /// `oob`, the first `oob.len()` OOB bytes are also read out of the register (over the
    /// channel), so the caller learns what it moved without a separate read.
    ///
    /// Timing: the bank is busy `t_read`, the OOB read-out (if any) crosses the channel, then the
    /// bank is busy `t_prog`. A read fault on `src` returns [`NandError::Uncorrectable`] with
    /// `dst` untouched (real controllers check ECC before the copyback program, since the page
    /// register's errors would otherwise be copied); a program fault consumes `dst` as
    /// [`Self::program`] does.
    pub fn copyback(
        &self,
        src: PageAddr,
        dst: PageAddr,
        oob: Option<&mut [u8]>,
    ) -> Result<Completion, NandError> {
        match self.copyback_inner(src, dst, oob, None)? {
            Copyback::Programmed(c) | Copyback::Declined(c) => Ok(c),
        }
    }

    /// [`Self::copyback`] whose program the caller may decline once it has seen the OOB read
    /// out of the page register (`oob.len()` bytes): `keep` returns false and `dst` stays
    /// untouched, the operation having cost the bank `t_read` and the channel the OOB's
    /// transfer, like a read ([`Copyback::Declined`]). This is the controller's check before a
    /// copyback program: metadata it cannot decode would otherwise be copied into a new block,
    /// where it outlives the page it was damaged on.
    pub fn copyback_checked(
        &self,
        src: PageAddr,
        dst: PageAddr,
        oob: &mut [u8],
        keep: CopybackCheck<'_>,
    ) -> Result<Copyback, NandError> {
        self.copyback_inner(src, dst, Some(oob), Some(keep))
    }

    fn copyback_inner(
        &self,
        src: PageAddr,
        dst: PageAddr,
        mut oob: Option<&mut [u8]>,
        keep: Option<CopybackCheck<'_>>,
    ) -> Result<Copyback, NandError> {
        let bank = self.bank_of_page(src)?;
        self.bank_of_page(dst)?;
        self.check_writable()?;
        if src.block.bank != dst.block.bank {
            return Err(self.violation(NandError::CopybackAcrossBanks { src, dst }));
        }
        let g = self.geometry();
        let oob_len = oob.as_ref().map_or(0, |o| o.len());
        if oob_len > g.oob_size as usize {
            return Err(self.violation(NandError::BufferSize {
                page: src,
                buffer: BufferKind::Oob,
                offset: 0,
                len: oob_len,
                rule: "length must be at most oob_size",
            }));
        }
        let power = self.faults.power();
        if power == Power::Off {
            if let Some(o) = oob {
                o.fill(0xFF);
            }
            return Ok(Copyback::Programmed(Completion::new(
                ALREADY_DONE,
                Arc::clone(&bank.counters),
                self.timeline.sim(),
                self.timeline.timer(),
            )));
        }
        let mut st = bank.state.lock();
        let from = st.mem.block(src.block.block);
        if from.bad {
            return Err(self.violation(NandError::BadBlock { block: src.block }));
        }
        let mut to = self.programmable(&st.mem, dst)?;
        let c = &bank.counters;
        let ch = src.block.bank;
        let t_read = self.config.timing.read_ns(src.page, from.erase_count);
        let st = &mut *st;
        if self.faults.read_fails(src) {
            // The bank stays busy for the failed sensing (as a failed read keeps it).
            self.timeline
                .read(&mut st.tl, &mut st.ops, c, ch, t_read, 0);
            st.ops.reads += 1;
            st.ops.copybacks += 1;
            st.ops.faults += 1;
            return Err(NandError::Uncorrectable { page: src });
        }
        let programmed = src.page < from.programmed_pages;
        if let Some(o) = oob.as_deref_mut() {
            if programmed {
                st.mem
                    .read_page(src.block.block, src.page, 0, &mut [], Some(o));
            } else {
                o.fill(0xFF);
            }
        }
        if let (Some(keep), Some(o)) = (keep, oob.as_deref()) {
            if !keep(o) {
                let deadline =
                    self.timeline
                        .read(&mut st.tl, &mut st.ops, c, ch, t_read, oob_len as u64);
                st.ops.reads += 1;
                st.ops.bytes_read += oob_len as u64;
                return Ok(Copyback::Declined(Completion::new(
                    deadline,
                    Arc::clone(c),
                    self.timeline.sim(),
                    self.timeline.timer(),
                )));
            }
        }
        if to.programmed_pages == 0 {
            self.prefault
                .block_opened(self.geometry().block_index(dst.block));
        }
        // Drawn, not yet counted: a copyback the image has no room for never programmed, so
        // its fault never happened.
        let fault = self.faults.program_would_fail(dst, to.erase_count);
        // Room in the file before anything is stored (see `backing`).
        let full = self.faults.room_refused();
        let room = if programmed && !fault && power != Power::Cut {
            st.mem.make_room_copy(
                (src.block.block, src.page),
                (dst.block.block, dst.page),
                full,
            )
        } else {
            st.mem.make_room(dst.block.block, dst.page, full)
        };
        room.map_err(|source| NandError::NoSpace { page: dst, source })?;
        // Data and OOB first, the counter last (see BankMem::set_block).
        if fault {
            self.faults.program_fault_fired(dst);
            st.mem.write_garbage(dst.block.block, dst.page);
        } else if programmed && power == Power::Cut {
            let mut data = vec![0u8; g.page_size as usize];
            let mut page_oob = vec![0u8; g.oob_size as usize];
            st.mem
                .read_page(src.block.block, src.page, 0, &mut data, Some(&mut page_oob));
            let torn = torn(dst, &data);
            st.mem
                .write_page(dst.block.block, dst.page, &[&torn], &page_oob);
        } else if programmed {
            st.mem
                .copy_page((src.block.block, src.page), (dst.block.block, dst.page));
        } else {
            st.mem.fill_erased(dst.block.block, dst.page);
        }
        to.programmed_pages += 1;
        st.mem.set_block(dst.block.block, to);
        let deadline = self.timeline.copyback(
            &mut st.tl,
            &mut st.ops,
            c,
            ch,
            (t_read, self.config.timing.prog_ns(dst.page)),
            oob_len as u64,
        );
        let ops = &mut st.ops;
        ops.reads += 1;
        ops.programs += 1;
        ops.copybacks += 1;
        ops.bytes_read += oob_len as u64;
        if fault {
            ops.faults += 1;
            return Err(NandError::ProgramFailed {
                page: dst,
                failed_mask: 1,
            });
        }
        ops.bytes_programmed += u64::from(g.page_size + g.oob_size);
        Ok(Copyback::Programmed(Completion::new(
            deadline,
            Arc::clone(c),
            self.timeline.sim(),
            self.timeline.timer(),
        )))
    }

    /// Erases a block: its pages read as 0xFF afterwards, `programmed_pages` becomes 0 and
    /// `erase_count` grows by one. An erase of a block whose erase count has reached the
    /// endurance fails with [`NandError::WornOut`] and the block turns bad.
    pub fn erase(&self, block: BlockAddr) -> Result<Completion, NandError> {
        let bank = self.bank_of(block)?;
        self.check_writable()?;
        if self.faults.power() != Power::On {
            // An erase the power cut interrupts leaves the block as it was (its pages still
            // program-once: the FTL will not be running to use it).
            return Ok(Completion::new(
                ALREADY_DONE,
                Arc::clone(&bank.counters),
                self.timeline.sim(),
                self.timeline.timer(),
            ));
        }
        let mut st = bank.state.lock();
        let mut blk = st.mem.block(block.block);
        if blk.bad {
            return Err(self.violation(NandError::BadBlock { block }));
        }
        let fault = if blk.erase_count >= self.config.endurance {
            Some(NandError::WornOut {
                block,
                erase_count: blk.erase_count,
            })
        } else if self.faults.erase_fails(block, blk.erase_count) {
            Some(NandError::EraseFailed { block })
        } else {
            None
        };
        if fault.is_some() {
            // The block keeps its contents and counts; it is retired for good.
            blk.bad = true;
        } else {
            blk.erase_count += 1;
            blk.programmed_pages = 0;
        }
        st.mem.set_block(block.block, blk);
        let st = &mut *st;
        let (deadline, moves) = self.timeline.erase(&mut st.tl, &mut st.ops, &bank.counters);
        st.ops.erases += 1;
        if let Some(e) = fault {
            st.ops.faults += 1;
            return Err(e);
        }
        Ok(Completion::new(
            deadline,
            Arc::clone(&bank.counters),
            self.timeline.sim(),
            self.timeline.timer(),
        )
        .following(moves))
    }

    /// The state of `addr`'s block if `addr` may be programmed now: the block is not bad and
    /// `addr` is its next free page. The caller holds the bank's lock (`mem`).
    fn programmable(&self, mem: &BankMem, addr: PageAddr) -> Result<BlockState, NandError> {
        let blk = mem.block(addr.block.block);
        if blk.bad {
            return Err(self.violation(NandError::BadBlock { block: addr.block }));
        }
        if addr.page < blk.programmed_pages {
            return Err(self.violation(NandError::AlreadyProgrammed { page: addr }));
        }
        if addr.page > blk.programmed_pages {
            return Err(self.violation(NandError::NotNextPage {
                block: addr.block,
                expected: blk.programmed_pages,
                got: addr.page,
            }));
        }
        Ok(blk)
    }

    fn violation(&self, e: NandError) -> NandError {
        self.violations.fetch_add(1, Ordering::Relaxed);
        e
    }

    fn bank_of(&self, block: BlockAddr) -> Result<&Bank, NandError> {
        if !self.geometry().contains_block(block) {
            return Err(self.violation(NandError::BlockOutOfRange { block }));
        }
        self.banks
            .get(block.bank.0 as usize)
            .ok_or_else(|| self.violation(NandError::BlockOutOfRange { block }))
    }

    fn bank_of_page(&self, page: PageAddr) -> Result<&Bank, NandError> {
        if !self.geometry().contains_page(page) {
            return Err(self.violation(NandError::PageOutOfRange { page }));
        }
        self.bank_of(page.block)
    }
}

/// A page as a program cut by a power loss leaves it: the first half of the data, noise after
/// it (what half-programmed cells read as). The OOB is written whole, so the page looks
/// programmed and names its contents: only a check of the data (its CRC) tells it is torn.
/// One page of a [`NandDevice::read_planes`]: the page, the byte offset to read from, the data
/// buffer and, optionally, the OOB buffer (as [`NandDevice::read`] takes them).
pub type PlaneRead<'a> = (PageAddr, u32, &'a mut [u8], Option<&'a mut [u8]>);

/// One page of [`NandDevice::program_planes_parts`]: its address, its data as parts that follow
/// one another, and its OOB bytes.
pub type PlaneProgram<'a> = (PageAddr, &'a [&'a [u8]], &'a [u8]);

/// The bank of a checked, non-empty multi-plane program.
/// The bank of a checked, non-empty list of pages.
fn bank_id_of(mut pages: impl Iterator<Item = PageAddr>) -> BankId {
    pages.next().map_or(BankId(0), |p| p.block.bank)
}

fn torn(addr: PageAddr, data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    let half = v.len() / 2;
    let mut x = (u64::from(addr.page) << 32 | u64::from(addr.block.block)) | 1;
    for b in &mut v[half..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    v
}
