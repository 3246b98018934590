//! The shared machinery's state every thread works on (the scheme's own state hangs off
//! `Core::scheme`), and the allocator helpers every scheme uses.
//!
//! # Threads
//! - host callers (frontend tasks/threads): buffer writes, read, trim — `io.rs`;
//! - one writer per queue: programs sealed pages where the scheme's placer says and commits
//!   them — `writer.rs`;
//! - the scheme's background workers (the page scheme's GC workers — `schemes/page/gc.rs`);
//! - one maintenance thread: trim-record sealing, periodic checkpoints, the scheme's tick —
//!   `checkpoint.rs`.
//!
//! # Locks (what each protects; taken in this order)
//! 1. `ckpt_lock`: one checkpoint at a time.
//! 2. `HostGate` (`gate.rs`; not a lock: a freeze flag + active count) — keeps host mutations
//!    out while a checkpoint snapshots the map.
//! 3. a queue's open page (`buffer::QueueState::open`), and under it, with timing `off`, the
//!    queue's inline writer — which may reclaim space in the write path, so everything below.
//! 4. a bank's GC state mutex (page scheme: `BankGc`) — one cleaner per bank at a time.
//! 5. `gc_gate` (RwLock): a GC step holds it shared, taken while holding its bank's GC mutex;
//!    the checkpoint snapshot holds it exclusive (holding no GC mutex).
//! 6. a stripe of the write cache (`cache::Stripe`), several only in ascending order.
//! 7. the page map's trim log, a bank's allocator (`blocks::BankAlloc`): leaves, never held
//!    together.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use event_listener::Event;
use nand_model::NandDevice;
use parking_lot::{Mutex, RwLock};

use crate::blocks::{Bank, BlockState, ReadPins};
use crate::buffer::QueueState;
use crate::config::FtlConfig;
use crate::gate::HostGate;
use crate::layout::{Layout, Lpn};
use crate::schemes::Scheme;
use crate::stats::Counters;

/// Free blocks per bank that only GC may take, so its frontier never starves. One is enough:
/// a victim is chosen only if its valid slots fit in the GC frontiers' room plus the free
/// blocks (`select_victim`; with hot/cold separation a page takes the other temperature's GC
/// frontier when its own has no block), and cleaning it frees a whole block for at most its
/// valid slots.
/// Every free block is spare space doing nothing (a full block at least gathers invalid slots
/// for GC); with many banks the per-bank reserve and soft floor are what part the measured WAF
/// from the greedy limit (`waf_limit.rs`).
pub const GC_RESERVE: u32 = 1;

/// The read-only reason of an image opened read-only (and otherwise sound).
pub const OPENED_READ_ONLY: &str = "the image was opened read-only";

/// Everything the FTL's threads share.
/// Fewest retries of an uncorrectable read the FTL's own reads make, whatever `[ftl]
/// read_retries` says (see [`Core::own_read_retries`]).
pub(crate) const OWN_READ_RETRIES: u32 = 3;

pub struct Core {
    pub nand: NandDevice,
    pub layout: Layout,
    pub cfg: FtlConfig,
    pub lpns: u32,
    /// The usable blocks the scheme needs (`SchemeKind::blocks_needed`, fixed at open):
    /// fewer, and the device is read-only (`check_spares`).
    pub blocks_needed: u64,
    /// Logical pages per unit a NAND page must not mix (the scheme's `seal_unit`; 0: any mix).
    pub seal_unit: u32,
    /// The write cache's index: overlay of buffered pages, stripe locks.
    pub cache: crate::cache::WriteCache,
    /// The FTL scheme: its map, placement, reclaim and recovery rules.
    pub(crate) scheme: Arc<dyn Scheme>,
    pub pins: ReadPins,
    pub banks: Vec<Bank>,
    /// The host write queues, then one more queue that only carries trim records (so a trim's
    /// record never waits behind a data queue whose writer is stuck cleaning).
    pub queues: Vec<QueueState>,
    seq: AtomicU64,
    pub gate: HostGate,
    pub gc_gate: RwLock<()>,
    read_only: Mutex<Option<String>>,
    read_only_flag: AtomicBool,
    /// Logical pages recovery found lost (sorted; see [`crate::FtlError::Lost`]): set once,
    /// before any thread runs; non-empty only on a device that opened read-only for it.
    pub(crate) lost: std::sync::OnceLock<Box<[u32]>>,
    /// The device was read-only when the open returned (opened so, or damage): no write was
    /// acknowledged in this run, so a flush has nothing to lose.
    pub(crate) read_only_at_open: AtomicBool,
    /// The read-only reason is a file system without room for the image (set before the flag).
    read_only_no_space: AtomicBool,
    /// The read-only reason is wear (spare blocks or a checkpoint area worn out; set before the
    /// flag): the medium still programs, and a scheme that can may still program what the
    /// host was told is written ([`Core::programs_acknowledged`]).
    read_only_worn: AtomicBool,
    /// Set when the writer threads are stopping: nothing more will commit.
    writers_stopping: AtomicBool,
    pub stopping: AtomicBool,
    /// GC found blocks held by unwritten trim records: the maintenance thread should flush.
    pub flush_requested: AtomicBool,
    /// The trim queue holds records whose unmapped slots, or late zombies
    /// (`PageMap::commit_page`), are still held (see `SealedPage`).
    pub trims_pending: AtomicBool,
    /// Tests only (`Ftl::hold_trim_records`): the maintenance thread leaves batched trim
    /// records in RAM, as if its tick were late, so a test can place GC or a merge in the
    /// window before a trim's record reaches flash.
    pub trims_held: AtomicBool,
    /// A scheme asks the maintenance thread for a checkpoint (hybrid schemes: journal blocks
    /// wait for their trim records to be pruned).
    pub checkpoint_requested: AtomicBool,
    /// Wakes the background GC workers that may clean now (the free pool ran short).
    pub gc_wake: Event,
    /// Wakes every background GC worker, also one adaptive GC holds back while the host is
    /// busy (`BackgroundWorker::held_back`): a bank fell below its GC reserve or went
    /// exclusive, a block was retired, the FTL stops.
    pub gc_urgent: Event,
    /// Wakes the maintenance thread (GC waits for trim records, a checkpoint is due).
    pub maint_wake: Event,
    pub counters: Counters,
    pub ckpt: Mutex<crate::checkpoint::CkptState>,
    /// Serialises checkpoints.
    pub ckpt_lock: Mutex<()>,
    pub latencies: crate::stats::Latencies,
    pub recovery: Mutex<crate::recovery::RecoveryReport>,
    /// Origin of [`Core::now_ns`] with timing `off` and `real`.
    epoch: std::time::Instant,
    /// With timing `virtual`: the background work (GC workers, maintenance) as actors, run by
    /// `Ftl::advance_to` and, while a writer or host waits, by [`Core::sim_yield`].
    pub(crate) sim_background: std::sync::OnceLock<Mutex<crate::sim::Background>>,
}

impl Core {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        nand: NandDevice,
        layout: Layout,
        cfg: FtlConfig,
        lpns: u32,
        blocks_needed: u64,
        scheme: Arc<dyn Scheme>,
        banks: Vec<Bank>,
        queues: Vec<QueueState>,
        seq: u64,
        ckpt: crate::checkpoint::CkptState,
    ) -> Core {
        let opened_read_only = nand.access() == nand_model::Access::ReadOnly;
        Core {
            cache: crate::cache::WriteCache::new(),
            seal_unit: scheme.seal_unit(),
            scheme,
            pins: ReadPins::new(layout),
            nand,
            layout,
            cfg,
            lpns,
            blocks_needed,
            banks,
            queues,
            seq: AtomicU64::new(seq),
            gate: HostGate::new(),
            gc_gate: RwLock::new(()),
            read_only: Mutex::new(None),
            // An image opened read-only is so from the start: recovery and the scheme's
            // rebuild see it before they would write anything.
            read_only_flag: AtomicBool::new(opened_read_only),
            lost: std::sync::OnceLock::new(),
            read_only_at_open: AtomicBool::new(false),
            read_only_no_space: AtomicBool::new(false),
            read_only_worn: AtomicBool::new(false),
            writers_stopping: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            flush_requested: AtomicBool::new(false),
            trims_pending: AtomicBool::new(false),
            trims_held: AtomicBool::new(false),
            checkpoint_requested: AtomicBool::new(false),
            gc_wake: Event::new(),
            gc_urgent: Event::new(),
            maint_wake: Event::new(),
            counters: Counters::default(),
            ckpt: Mutex::new(ckpt),
            ckpt_lock: Mutex::new(()),
            latencies: crate::stats::Latencies::default(),
            recovery: Mutex::new(crate::recovery::RecoveryReport::default()),
            epoch: std::time::Instant::now(),
            sim_background: std::sync::OnceLock::new(),
        }
    }

    /// The FTL's clock in nanoseconds: simulated time with timing `virtual` (so latencies,
    /// idle times and ticks are simulated ones), else the host's monotonic clock since open.
    pub fn now_ns(&self) -> u64 {
        match self.nand.sim_clock() {
            Some(c) => c.now_ns(),
            None => u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// A writer that found no space gives the other threads a moment (other writers' open
    /// blocks may commit, the maintenance thread may write the trim records GC waits for).
    /// With timing `virtual` there are no other threads: the trim records are sealed here,
    /// unless the caller is the trim queue's own writer (its open page is held).
    /// A number that grows whenever anything on the device is programmed or erased (host
    /// pages, GC copies, erases): a writer that finds no room tells "others are still
    /// working" from "nothing can change" by it.
    pub(crate) fn progress(&self) -> u64 {
        let c = &self.counters;
        c.page_programs.load(Ordering::Relaxed)
            + c.gc_page_programs.load(Ordering::Relaxed)
            + c.gc_erases.load(Ordering::Relaxed)
    }

    /// With timing `virtual`, runs the GC worker actors due before the simulated now (not
    /// maintenance, not the queue writers: see `sim::Background::advance_nested`), and leaves
    /// the clock there; returns whether any ran. A served device's workers clean while a writer waits for room or a host
    /// for its writer; a request in virtual time runs whole on one thread, so without this the
    /// workers stood still for as long as it waited and a writer with no room cleaned alone,
    /// one step at a time (steady random writes, default preset: 370 IOPS, against 1100 served
    /// with the same two workers). No-op with other timings, and when called from inside the
    /// background's own run (an actor that waits).
    pub(crate) fn sim_yield(&self) -> bool {
        let (Some(clock), Some(bg)) = (self.nand.sim_clock(), self.sim_background.get()) else {
            return false;
        };
        let Some(mut bg) = bg.try_lock() else {
            return false;
        };
        let now = clock.now_ns();
        bg.advance_nested(self, now)
    }

    pub(crate) fn wait_for_others(&self) {
        if self.nand.sim_clock().is_none() {
            std::thread::sleep(std::time::Duration::from_micros(500));
            nand_model::note_blocking_wait();
            return;
        }
        let tq = self.trim_queue();
        if self.flush_requested.load(Ordering::Acquire) && !self.queues[tq].open.is_locked() {
            self.flush_requested.store(false, Ordering::Release);
            self.force_seal(tq);
            self.sim_wait_durable(tq);
        }
    }

    /// Time since an earlier [`Core::now_ns`] reading.
    pub fn since(&self, t: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(self.now_ns().saturating_sub(t))
    }

    /// The host `Instant` of a [`Core::now_ns`] reading (timing `off` and `real`).
    pub fn instant_at(&self, ns: u64) -> std::time::Instant {
        self.epoch + std::time::Duration::from_nanos(ns)
    }

    /// A fresh sequence number (callers that order per page hold its stripe lock).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::AcqRel)
    }

    /// Sets the sequence counter (recovery, before any thread runs).
    pub fn set_seq(&self, seq: u64) {
        self.seq.store(seq, Ordering::Release);
    }

    /// The next sequence number that will be handed out.
    pub fn current_seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Puts the device in read-only mode for good (until restart), keeping the first reason.
    pub fn set_read_only(&self, reason: String) {
        self.set_read_only_as(reason, false, false);
    }

    /// [`Core::set_read_only`] because the device wore out (its spare blocks, or a checkpoint
    /// area): nothing new is accepted and nothing is erased or cleaned, but the medium still
    /// programs, so writers may still program the pages already acknowledged
    /// ([`Core::programs_acknowledged`]).
    pub(crate) fn set_read_only_worn(&self, reason: String) {
        self.set_read_only_as(reason, false, true);
    }

    /// Writers may still program pages the host was told are written: the device turned
    /// read-only because it wore out (not opened so, not for damage, a full file system or a
    /// fatal NAND error), and is not stopping for a power cut. Only into erased pages: open
    /// blocks and free blocks, no erase and no GC (`Placer::programs_after_turn`).
    pub(crate) fn programs_acknowledged(&self) -> bool {
        self.read_only_worn.load(Ordering::Acquire)
            && !self.writers_gone()
            && !self.opened_read_only()
    }

    /// [`Core::set_read_only`] after the medium operation that failed with `e`: a program the
    /// image's file system had no room for makes later writes fail with
    /// [`FtlError::NoSpace`](crate::FtlError::NoSpace) rather than as on a read-only device.
    pub fn set_read_only_after(&self, e: &nand_model::NandError, reason: String) {
        if matches!(e, nand_model::NandError::ReadOnly) {
            // The image was opened read-only: that is the reason already, not this operation
            // (which should not have been tried).
            tracing::warn!("{reason}");
            return;
        }
        self.set_read_only_as(
            reason,
            matches!(e, nand_model::NandError::NoSpace { .. }),
            false,
        );
    }

    fn set_read_only_as(&self, reason: String, no_space: bool, worn: bool) {
        let mut r = self.read_only.lock();
        if r.is_none() {
            tracing::error!("device is now read-only: {reason}");
            *r = Some(reason);
            self.read_only_no_space.store(no_space, Ordering::Release);
            self.read_only_worn.store(worn, Ordering::Release);
            self.read_only_flag.store(true, Ordering::Release);
        } else if !worn {
            // The first reason stays the one reported, but a later failure of another kind
            // (a full file system, a fatal NAND error after a wear turn) ends the programs
            // the wear allowed: they would fail the same way.
            self.read_only_worn.store(false, Ordering::Release);
        }
        drop(r);
        for q in &self.queues {
            q.progress.notify_all();
        }
    }

    /// The device is read-only because the image's file system has no room: a copy that
    /// failed then says nothing about its block, which must not be retired for it.
    pub(crate) fn read_only_for_no_space(&self) -> bool {
        self.read_only_flag.load(Ordering::Acquire)
            && self.read_only_no_space.load(Ordering::Acquire)
    }

    /// The error a write gets on the read-only device: why it is read-only, as
    /// [`FtlError::NoSpace`](crate::FtlError::NoSpace) when the image's file system is full.
    pub(crate) fn read_only_error(&self) -> Option<crate::FtlError> {
        let r = self.read_only_reason()?;
        Some(if self.read_only_no_space.load(Ordering::Acquire) {
            crate::FtlError::NoSpace(r)
        } else {
            crate::FtlError::ReadOnly(r)
        })
    }

    pub fn read_only_reason(&self) -> Option<String> {
        if self.read_only_flag.load(Ordering::Acquire) {
            self.read_only.lock().clone().or_else(|| {
                self.opened_read_only()
                    .then(|| OPENED_READ_ONLY.to_string())
            })
        } else {
            None
        }
    }

    /// Writes are refused (opened read-only, or turned so): nothing may change the medium,
    /// not even the schemes' own work (GC, merges, a rebuild's erases). A flag load.
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only_flag.load(Ordering::Acquire)
    }

    /// Recovery found logical page `lpn` lost: its reads fail ([`crate::FtlError::Lost`]).
    pub(crate) fn is_lost(&self, lpn: Lpn) -> bool {
        self.lost
            .get()
            .is_some_and(|l| !l.is_empty() && l.binary_search(&lpn.0).is_ok())
    }

    /// The image was opened read-only ([`nand_model::Access::ReadOnly`]): nothing may change
    /// it, whatever else happens.
    pub fn opened_read_only(&self) -> bool {
        self.nand.access() == nand_model::Access::ReadOnly
    }

    /// Why the device turned read-only by itself (damage recovery found, a failed erase, no
    /// room for the image): [`Self::read_only_reason`] without the read-only open.
    pub fn fault_reason(&self) -> Option<String> {
        if self.read_only_flag.load(Ordering::Acquire) {
            self.read_only.lock().clone()
        } else {
            None
        }
    }

    pub fn writers_gone(&self) -> bool {
        self.writers_stopping.load(Ordering::Acquire)
    }

    pub fn mark_writers_gone(&self) {
        self.writers_stopping.store(true, Ordering::Release);
        for q in &self.queues {
            q.progress.notify_all();
        }
    }

    pub fn bank(&self, b: u32) -> &Bank {
        &self.banks[b as usize]
    }

    /// Number of host write queues (the trim queue not counted).
    pub fn data_queues(&self) -> usize {
        self.queues.len() - 1
    }

    /// The queue that carries trim records.
    pub fn trim_queue(&self) -> usize {
        self.queues.len() - 1
    }

    /// A bank's soft floor: under it, in-path GC cleans the bank as pages arrive there and,
    /// with background workers, a page sent there pays its backstop share while the device's
    /// free pool is short (`gc_free_pool` is what workers keep); an open cleans every bank
    /// back to it.
    pub fn gc_soft_free(&self) -> u32 {
        if self.cfg.gc_soft_free > 0 {
            return self.cfg.gc_soft_free.max(GC_RESERVE + 1);
        }
        // Background workers: one block ahead of the reserve, i.e. a bank at its reserve.
        // Each block more held free costs WAF (`ftld replay --timing off`, 1 GiB, 7 % OP,
        // QD32: 4.74-4.76 with 2, 5.05 with 3 when workers kept this floor on every bank).
        // In-path GC cleans as pages arrive, paced: it needs a block of its own to pace over
        // before the bank is down to the reserve.
        match self.cfg.gc_policy {
            crate::config::GcPolicy::InPath => GC_RESERVE + 2,
            _ => GC_RESERVE + 1,
        }
    }

    /// Free blocks above the banks' GC reserves that background GC keeps device-wide
    /// (`FtlConfig::gc_free_pool`).
    pub fn gc_free_pool(&self) -> u32 {
        match self.cfg.gc_free_pool {
            0 => (self.layout.banks / 8).max(2),
            n => n,
        }
    }

    /// Free blocks writers may take now: each bank's free blocks above its GC reserve.
    pub fn free_pool(&self) -> u32 {
        self.banks
            .iter()
            .map(|b| b.free.load(Ordering::Acquire).saturating_sub(GC_RESERVE))
            .sum()
    }

    /// Re-derives a bank's free count and exclusive-GC flag after its free list changed. The
    /// caller still holds the bank's `BankAlloc` lock: two threads that each changed the free
    /// list and stored their count after unlocking could store them in the wrong order, and a
    /// count left too high makes writers retry a bank that has no block for them.
    pub fn update_free(&self, b: u32, free: u32) {
        let bank = self.bank(b);
        bank.free.store(free, Ordering::Release);
        let exclusive = free <= GC_RESERVE + 1;
        let went_exclusive =
            bank.exclusive_gc.swap(exclusive, Ordering::AcqRel) != exclusive && exclusive;
        if went_exclusive || free < GC_RESERVE {
            self.wake_all_gc();
        }
        if free < self.gc_soft_free() || self.free_pool() < self.gc_free_pool() {
            // Only the workers allowed to clean listen here: a worker adaptive GC holds back
            // would wake, find it may not clean, and sleep again, for every block a writer
            // opens while the pool is short (2.3 % of the server's CPU on 128 KiB writes).
            self.gc_wake.notify(usize::MAX);
        }
    }

    /// Background GC workers (`FtlConfig::gc_threads`, 0 resolved).
    pub fn gc_workers(&self) -> usize {
        match self.cfg.gc_threads {
            0 if self.nand.timing_mode() == nand_model::TimingMode::Off => 2,
            0 => (self.layout.banks as usize / 2).max(2),
            n => n,
        }
    }

    /// Wakes every GC worker (see `gc_urgent`).
    pub fn wake_all_gc(&self) {
        self.gc_wake.notify(usize::MAX);
        self.gc_urgent.notify(usize::MAX);
    }

    /// Marks a frontier block full once its last page committed: from now on GC may pick it.
    pub fn mark_full(&self, b: u32, block: u32) {
        let mut a = self.bank(b).alloc.lock();
        if a.state[block as usize] == BlockState::Open {
            a.state[block as usize] = BlockState::Full;
            a.filled_seq[block as usize] = self.current_seq();
        }
    }

    /// Takes a free block of bank `b` for a frontier. Writers leave `GC_RESERVE` blocks to GC.
    pub fn alloc_block(&self, b: u32, for_gc: bool) -> Option<u32> {
        let mut a = self.bank(b).alloc.lock();
        let floor = if for_gc { 0 } else { GC_RESERVE };
        if a.free_len() <= floor {
            return None;
        }
        let blk = a.pop_free()?;
        self.update_free(b, a.free_len());
        Some(blk)
    }

    /// Takes up to `n` free blocks of bank `b` in different planes for a multi-plane write
    /// frontier (see [`crate::blocks::BankAlloc::pop_free_planes`]), leaving writers'
    /// `GC_RESERVE` blocks to GC as [`Self::alloc_block`] does; empty if there is no room.
    pub fn alloc_plane_blocks(&self, b: u32, n: usize, for_gc: bool) -> Vec<u32> {
        let mut a = self.bank(b).alloc.lock();
        let floor = if for_gc { 0 } else { GC_RESERVE };
        let room = a.free_len().saturating_sub(floor) as usize;
        if room == 0 {
            return Vec::new();
        }
        let blocks = a.pop_free_planes(self.nand.config().planes, n.min(room));
        self.update_free(b, a.free_len());
        blocks
    }

    /// Takes bank `b`'s most-worn free block if it has more than the writers' floor and its
    /// erase count is above `above` (static wear levelling's destination for cold data).
    pub fn alloc_most_worn(&self, b: u32, above: u32) -> Option<u32> {
        let mut a = self.bank(b).alloc.lock();
        if a.free_len() <= GC_RESERVE || a.most_worn_free()? <= above {
            return None;
        }
        let blk = a.pop_most_worn()?;
        self.update_free(b, a.free_len());
        Some(blk)
    }

    /// A read of bank `b` failed every retry: counted device-wide and per bank.
    pub fn count_uncorrectable(&self, b: u32) {
        self.counters.uncorrectable.fetch_add(1, Ordering::Relaxed);
        self.bank(b).uncorrectable.fetch_add(1, Ordering::Relaxed);
    }

    /// Retires a block after a program failure: GC moves its data out and marks it bad.
    /// (It counts as usable until then: the mark is not persisted, and an open would count it
    /// again, so a check that left it out could turn the device read-only and the next open
    /// writable.)
    pub fn retire_block(&self, b: u32, block: u32) {
        let mut a = self.bank(b).alloc.lock();
        a.state[block as usize] = BlockState::Retiring;
        a.program_failed[block as usize] = true;
        drop(a);
        self.counters.retired_blocks.fetch_add(1, Ordering::Relaxed);
        self.wake_all_gc();
    }

    /// Erases a block that holds nothing valid and no pinned read (or, with `retire` or after
    /// a failed program in it, marks it bad) and returns it to its bank's free list; an erase
    /// that fails retires it. Returns
    /// whether the block was erased (false: it went bad). Used by GC and by merges.
    ///
    /// The erase is not waited for: its effect and any fault are known at submission, and the
    /// bank's timeline keeps every later operation on the bank (a program into the freed block
    /// too) behind it. So a GC step or merge goes on with work on other banks while the erase
    /// runs, as a controller does, instead of idling for t_erase.
    pub fn erase_or_retire(&self, addr: nand_model::BlockAddr, retire: bool) -> bool {
        self.erase_or_retire_then(addr, retire).0
    }

    /// [`Self::erase_or_retire`], returning the erase's completion too (`None`: no erase was
    /// made), for a caller whose bound counts the erase (RFTL's step).
    pub fn erase_or_retire_then(
        &self,
        addr: nand_model::BlockAddr,
        retire: bool,
    ) -> (bool, Option<nand_model::Completion>) {
        let mut done = None;
        let (state, failed_program) = {
            let a = self.bank(addr.bank.0).alloc.lock();
            (
                a.state[addr.block as usize],
                a.program_failed[addr.block as usize],
            )
        };
        // A read-only device erases nothing (a rebuild releasing a block that holds nothing
        // current: the hybrid schemes'; opened read-only or damaged): the block stays as it is
        // on the image, closed here (a read-only device allocates only free blocks, which are
        // erased, for the pages a wear turn lets it program). A retirement is still recorded
        // on a device that turned read-only while running.
        if self.is_read_only() && (self.opened_read_only() || !(retire || failed_program)) {
            return (false, None);
        }
        if state == BlockState::Free {
            // Released twice: a second free-list entry would hand the block to two owners.
            // A check, not a lock: two releases racing each other can both pass it; the owner
            // of a block must make sure only one releases it (a scheme's invariant).
            tracing::error!("{addr} is released but already free; left alone");
            return (false, None);
        }
        let went_bad = if retire || failed_program {
            if let Err(e) = self.nand.mark_bad(addr) {
                tracing::error!("cannot mark {addr} bad: {e}");
            }
            true
        } else {
            match self.nand.erase(addr) {
                Ok(c) => {
                    done = Some(c);
                    self.counters.gc_erases.fetch_add(1, Ordering::Relaxed);
                    false
                }
                Err(e) if e.is_fault() => {
                    tracing::warn!("erase of {addr} failed: {e}; block retired");
                    self.counters.erase_failures.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(e) => {
                    self.set_read_only(format!("erase of {addr} failed: {e}"));
                    true
                }
            }
        };
        let b = addr.bank.0;
        let mut a = self.bank(b).alloc.lock();
        a.program_failed[addr.block as usize] = false;
        if went_bad {
            a.state[addr.block as usize] = BlockState::Bad;
        } else {
            a.erase_count[addr.block as usize] += 1;
            a.push_free(addr.block);
        }
        self.update_free(b, a.free_len());
        drop(a);
        if went_bad {
            self.counters.bad_blocks.fetch_add(1, Ordering::Relaxed);
            self.check_spares();
        }
        (!went_bad, done)
    }

    /// How often the FTL's own reads (GC's and merges' copies, the open's checkpoint reads and
    /// scan) try an uncorrectable read again: `[ftl] read_retries`, but never fewer than
    /// [`OWN_READ_RETRIES`]. The setting bounds what a host read may cost before its error;
    /// the FTL's own reads are what every later host read of the device depends on (a copy
    /// given up is a page lost for good, a checkpoint or spare area given up at open is the
    /// whole device read-only for damage), so a read that only needed a retry must not cost
    /// them.
    pub(crate) fn own_read_retries(&self) -> u32 {
        self.cfg.read_retries.max(OWN_READ_RETRIES)
    }

    /// Usable blocks (not bad, not reserved) across the device.
    pub fn usable_blocks(&self) -> u64 {
        self.banks
            .iter()
            .map(|bank| {
                let a = bank.alloc.lock();
                a.state
                    .iter()
                    .filter(|s| !matches!(s, BlockState::Bad | BlockState::Reserved))
                    .count() as u64
            })
            .sum()
    }

    /// At open and after a block went bad: if the spare blocks are gone (fewer usable blocks
    /// than the scheme needs, `SchemeKind::blocks_needed`), the device turns read-only.
    pub fn check_spares(&self) {
        let needed = self.blocks_needed;
        let usable = self.usable_blocks();
        if usable < needed {
            self.set_read_only_worn(format!(
                "spare blocks exhausted: {usable} usable blocks left, {needed} needed"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use event_listener::Listener;
    use nand_model::TimingMode;

    use crate::{Ftl, FtlConfig};

    /// A free pool running short wakes the workers listening on `gc_wake` only; a bank below
    /// its reserve also the ones adaptive GC holds back (`gc_urgent`).
    #[test]
    fn a_short_pool_wakes_the_cleaning_workers_and_a_bank_below_reserve_every_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nand = crate::test_support::small_nand(1, 2, 16);
        let cfg = FtlConfig {
            gc_free_pool: 10,
            ..FtlConfig::default()
        };
        let f = Ftl::create(&dir.path().join("w.img"), &nand, TimingMode::Off, cfg, None)
            .expect("create");
        let core = &f.core;
        let notified = |l: event_listener::EventListener| l.wait_timeout(Duration::ZERO).is_some();
        // Four free blocks on each bank: the pool (3 + 3 above the reserves) is short of 10,
        // but no bank is near its reserve.
        let (wake, urgent) = (core.gc_wake.listen(), core.gc_urgent.listen());
        core.update_free(0, 4);
        core.update_free(1, 4);
        assert!(
            notified(wake),
            "a short pool wakes the workers allowed to clean"
        );
        assert!(!notified(urgent), "but not the ones held back");
        let (wake, urgent) = (core.gc_wake.listen(), core.gc_urgent.listen());
        core.update_free(1, 0);
        assert!(
            notified(wake) && notified(urgent),
            "a bank below its reserve wakes all"
        );
        for b in 0..2 {
            let free = core.bank(b).alloc.lock().free_len();
            core.update_free(b, free);
        }
        assert_eq!(f.check_invariants(), Ok(()));
    }

    /// GC workers: two with timing `off` (CPU work), one per two banks with modelled time (a
    /// worker waits for its bank, and banks clean at once), or as configured.
    #[test]
    fn gc_workers_follow_the_banks_when_time_is_modelled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nand = crate::test_support::small_nand(2, 4, 16);
        for (i, (timing, threads, want)) in [
            (TimingMode::Off, 0, 2),
            (TimingMode::Virtual, 0, 4),
            (TimingMode::Real, 0, 4),
            (TimingMode::Virtual, 3, 3),
        ]
        .into_iter()
        .enumerate()
        {
            let cfg = FtlConfig {
                gc_threads: threads,
                ..FtlConfig::default()
            };
            let path = dir.path().join(format!("g{i}.img"));
            let f = Ftl::create(&path, &nand, timing, cfg, None).expect("create");
            assert_eq!(
                f.stats().gc_workers,
                want,
                "{timing:?}, gc_threads {threads}"
            );
            f.close().expect("close");
        }
    }
}
