//! Scheme `gftl`: the guaranteed-service FTL that paper 004 compares RFTL with (Choudhuri &
//! Givargis, *Deterministic service guarantees for NAND flash using partial block cleaning*,
//! CODES+ISSS 2008): a data block per logical block, a **write buffer** of page-mapped blocks
//! shared by every logical block, and **centralised partial GC**: logical blocks with pages in
//! the buffer wait in one queue and are merged one after another, a step at a time, one step
//! per host page written anywhere and per host read, each step no longer than one erase. So
//! no host request waits behind a whole-block clean, whatever the device's fullness
//! (`budget.rs` for the bounds and the buffer size that keeps them).
//!
//! | module | job |
//! |---|---|
//! | `budget` | the step size, a merge's steps and the write buffer's size from the timing |
//! | `queue` | data blocks, the GC queue, the merge under way, the write buffer (bookkeeping) |
//! | `steps` | a step: erase an emptied block, or copy or erase for the merge |
//! | `place` | where a host page goes, and the step it runs first |
//! | this file | the OOB search of a read, the roles' check, the counters |
//! | `recover` | roles rebuilt after an open |
//!
//! # Mapping
//! A *logical block* is `slots_per_block` consecutive logical pages. It has a **data block**,
//! which GFTL programs in page order as the host writes, whatever the offsets (every ftld
//! device programs a block's pages in order, as GFTL's NAND does): a page's offset is in its
//! OOB, so a read of a page in a data block **searches the block's OOB area**, newest page
//! first, up to `pi` OOB reads (`T_rdpg + pi T_rdoob`, GFTL's read bound: `search_data_block`,
//! counted in `ftl.rt.oob_reads`). Once the data block is full, the logical block's pages go
//! to the **write buffer**, which is page-mapped in RAM (no search), and the logical block is
//! queued for a merge. ftld keeps the page scheme's `PageMap` for every page (the valid
//! bitmap, the trim log, recovery); the OOB search is made on the medium and timed, and its
//! answer checked against the map. GFTL's own RAM (a block map, a page map of the buffer, a
//! block-sized RAM buffer) is `model_map_bytes`.
//!
//! # Merges
//! The queue's oldest logical block gets a fresh data block; each step copies up to `beta`
//! pages of it, its current versions from wherever they are, packed in offset order (the
//! offsets are fixed when the merge starts), then a step erases the old data block. The new
//! data block takes the host's next pages after the copies. A page the host writes during
//! its block's merge goes to the buffer, and the block is queued again if a page of it is
//! left outside its data block. Buffer blocks whose pages were all superseded are erased, a
//! step each, before other work. GC runs whenever the queue is not empty, however little a
//! merge gains: paper 004's "many unnecessary valid page copies and block erases" against
//! RFTL's on-demand reclaim. A step runs per host page written and per host read (GFTL's
//! `L(p) = T_er + max(U(e_r), U(e_w))`); a read's step is skipped where it would wait for a
//! lock or a pin (`steps.rs`).
//!
//! # Locks
//! In this order: `gc` (held across a step: one step at a time, the centralised GC), a
//! logical block's lock (`locks`, held by a writer from `target` to `committed` of its pages,
//! and by a step on it), its `state` mutex, `core.gc_gate` shared (a step), the write cache's
//! stripes (a step publishing its copies). `queue` and `pool` are leaves, never held while
//! waiting for anything but the pool's open block, which a writer holds only from `target` to
//! `issued`; `buffer_inflight` is taken just before `pool` where both are held (`take_buffer`,
//! `end_merge`; `check` takes them the other way round, but runs quiesced). A writer runs a step only with nothing in flight (it drains first), so a step
//! waiting for a logical block's lock waits for programs to complete, never for a step.
//!
//! # Crash safety
//! Data slots carry (logical page, sequence number) and copies keep the sequence number, so
//! recovery resolves versions with the page scheme's rules; the data blocks are then the
//! blocks whose current slots are all one logical block's, and every other block with
//! current slots is a buffer block (`recover.rs`). A merge does not survive a close: its
//! logical block is queued again at open. The queue is rebuilt in the order its logical
//! blocks' oldest buffered pages were written, so that an open goes on with the round where
//! it was; a host page carries a second step while the buffer is over its budget (what a
//! crash's lost merge and partly written blocks leave). Trim records go to journal blocks.
//!
//! # Not done
//! Static wear levelling (allocation takes the least-worn free block).

mod budget;
mod place;
mod queue;
mod recover;
mod steps;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use nand_model::PageAddr;
use parking_lot::{Condvar, Mutex};

pub use self::budget::GcBudget;
use self::queue::{BufferPool, DataState, GcState, LbnQueue};
use self::steps::StepFor;
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Layout, Lpn, Psa, LOGICAL_PAGE};
use crate::oob;
use crate::schemes::block_ops::{self, Journal};
use crate::schemes::hybrid::banks::BankPlan;
use crate::schemes::hybrid::locks::LbnLocks;
use crate::schemes::page::map::PageMap;
use crate::schemes::{CleanOpen, Placer, Scheme, SchemeKind};
use crate::stats::{LatencyHistogram, RtStats};

/// OOB bytes that hold the slot entries of the largest page's slots.
const MAX_ENTRIES_LEN: usize =
    oob::slot_entry_len(nand_model::MAX_PAGE_SIZE / LOGICAL_PAGE as u32 - 1);

/// Counters of the partial GC.
#[derive(Default)]
struct GcCounters {
    copy_steps: AtomicU64,
    erase_steps: AtomicU64,
    pages_copied: AtomicU64,
    erases: AtomicU64,
    merges: AtomicU64,
    /// Most steps one merge took.
    max_merge_steps: AtomicU64,
    step_latency: LatencyHistogram,
    /// OOB reads of data-block searches (paper 004's Sigma_oob, GFTL's part of it).
    oob_reads: AtomicU64,
    /// Searches whose first OOB naming the page was not where the map has it.
    search_misses: AtomicU64,
}

/// What a block is to GFTL, for a read: a data block's pages are found by an OOB search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Role {
    /// Not GFTL's (free, a journal block) or not known.
    None = 0,
    /// A logical block's data block (or a merge's destination or old data block).
    Data = 1,
    /// A write-buffer block (page-mapped in RAM).
    Buffer = 2,
}

/// The GFTL scheme's state.
pub struct GftlScheme {
    layout: Layout,
    lpns: u32,
    /// Logical pages per logical block (= slots per physical block).
    spb: u32,
    lbns: u32,
    budget: GcBudget,
    /// Where every logical page's newest version lives, the valid bitmap and the trim log.
    pub map: PageMap,
    /// Held by a writer placing a page of the logical block until the page is committed, and
    /// by a step merging it: whoever changes where its pages live.
    locks: LbnLocks,
    /// Per logical block: its data block. Changed only by the holder of its lock.
    state: Box<[Mutex<DataState>]>,
    /// Logical blocks waiting for a merge (a leaf lock).
    queue: Mutex<LbnQueue>,
    /// The write buffer's blocks (a leaf lock; `pool_parked` wakes writers waiting for the
    /// open block to come back).
    pool: Mutex<BufferPool>,
    pool_parked: Condvar,
    /// Pages placed in buffer blocks and not yet committed (or failed), per block: such a
    /// block is not erased even if nothing in it is current yet.
    buffer_inflight: Mutex<std::collections::HashMap<BlockIdx, u32>>,
    /// The merge under way and the emptied blocks waiting for their erase; held across a step.
    gc: Mutex<GcState>,
    /// Whether a step has work (set under `queue`'s lock, so a push is never missed).
    work: AtomicBool,
    /// Whether the write buffer's size guarantee applies: not after an open that found
    /// buffer blocks (a merge cut short leaves its old block or its destination to the buffer,
    /// and a crash the open block partly written) until the queue has once drained.
    bound_applies: AtomicBool,
    journal: Mutex<Journal>,
    plan: BankPlan,
    counters: GcCounters,
    /// Each block's [`Role`], set when GFTL takes it for a role (read by reads without a
    /// lock: a stale value can only make one read search or not search).
    roles: Box<[AtomicU8]>,
}

impl GftlScheme {
    pub fn new(layout: Layout, lpns: u32, budget: GcBudget, plan: BankPlan) -> GftlScheme {
        let spb = layout.slots_per_block();
        let lbns = lpns.div_ceil(spb);
        GftlScheme {
            layout,
            lpns,
            spb,
            lbns,
            budget,
            map: PageMap::new(layout, lpns),
            locks: LbnLocks::new(lbns),
            state: (0..lbns)
                .map(|_| Mutex::new(DataState::default()))
                .collect(),
            queue: Mutex::new(LbnQueue::new(lbns)),
            pool: Mutex::new(BufferPool::default()),
            pool_parked: Condvar::new(),
            buffer_inflight: Mutex::new(Default::default()),
            gc: Mutex::new(GcState::default()),
            work: AtomicBool::new(false),
            bound_applies: AtomicBool::new(true),
            journal: Mutex::new(Journal::default()),
            plan,
            counters: GcCounters::default(),
            roles: (0..layout.total_blocks())
                .map(|_| AtomicU8::new(Role::None as u8))
                .collect(),
        }
    }

    fn set_role(&self, b: BlockIdx, role: Role) {
        if let Some(r) = self.roles.get(b.0 as usize) {
            r.store(role as u8, Ordering::Relaxed);
        }
    }

    fn role(&self, b: BlockIdx) -> Role {
        match self
            .roles
            .get(b.0 as usize)
            .map(|r| r.load(Ordering::Relaxed))
        {
            Some(1) => Role::Data,
            Some(2) => Role::Buffer,
            _ => Role::None,
        }
    }

    /// GFTL's read of a page in a data block: the block's OOB area is read from its newest
    /// programmed page down until an entry names `lpn` (at most `pages_per_block` OOB reads,
    /// and their retries). The reads are real NAND operations on the block's bank, submitted
    /// before the data read so its timeline keeps the data read behind them. The page found
    /// should be the one the map has; a miss is counted (`search_misses`) and the map's page
    /// read: with several queues two versions of a page can reach its data block out of
    /// their sequence order (the newest-first search would then find the older one, where
    /// ftld's versions follow sequence numbers), or the page was rewritten into the block
    /// between the map's lookup and the search.
    fn search_data_block(&self, core: &Core, lpn: Lpn, psa: Psa) {
        let layout = self.layout;
        let (at, _) = layout.split(psa);
        let top = core
            .nand
            .block_state(at.block)
            .map_or(layout.pages_per_block, |s| s.programmed_pages);
        let sps = layout.slots_per_page;
        let mut entries = [0u8; MAX_ENTRIES_LEN];
        let len = oob::slot_entry_len(sps - 1).min(MAX_ENTRIES_LEN);
        let mut found = None;
        for p in (0..top.min(layout.pages_per_block)).rev() {
            let page = PageAddr {
                block: at.block,
                page: p,
            };
            // An OOB that fails to read is read again, as a host read is; one that fails every
            // time ends the search (GFTL cannot tell what the page holds), and the data read
            // goes ahead from the map.
            let mut read = false;
            for _ in 0..=core.cfg.read_retries {
                self.counters.oob_reads.fetch_add(1, Ordering::Relaxed);
                let mut reads = [(page, 0u32, &mut [][..], Some(&mut entries[..len]))];
                if core.nand.read_planes(&mut reads).is_ok() {
                    read = true;
                    break;
                }
                core.counters.read_retries.fetch_add(1, Ordering::Relaxed);
            }
            if !read {
                tracing::debug!("gftl: the OOB search for lpn {} cannot read {page}", lpn.0);
                return;
            }
            let names = (0..sps).any(|i| {
                oob::slot_entry(&entries[..len], i)
                    .is_some_and(|m| m.kind == oob::SlotKind::Data && m.lpn == lpn)
            });
            if names {
                found = Some(p);
                break;
            }
        }
        if found != Some(at.page) {
            self.counters.search_misses.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                "gftl: the OOB search for lpn {} found page {found:?}, the map has {at:?}",
                lpn.0
            );
        }
    }

    fn lbn_of(&self, lpn: Lpn) -> u32 {
        lpn.0 / self.spb
    }

    fn bank_of(&self, b: BlockIdx) -> u32 {
        self.layout.block_addr(b).bank.0
    }

    fn addr(&self, b: BlockIdx, page: u32) -> PageAddr {
        PageAddr {
            block: self.layout.block_addr(b),
            page,
        }
    }

    fn block_state(&self, core: &Core, b: BlockIdx) -> BlockState {
        block_ops::block_state(core, self.layout, b)
    }

    fn set_block_state(&self, core: &Core, b: BlockIdx, state: BlockState) {
        block_ops::set_block_state(core, self.layout, b, state);
    }

    /// Queues `lbn` for a merge.
    fn enqueue(&self, lbn: u32) {
        let mut q = self.queue.lock();
        q.push(lbn);
        self.work.store(true, Ordering::Release);
    }

    /// Whether `lbn` has a current page outside `data` (in the buffer, or in an old block).
    fn has_pages_outside(&self, lbn: u32, data: Option<BlockIdx>) -> bool {
        let first = lbn * self.spb;
        let end = (first + self.spb).min(self.lpns);
        (first..end).any(|l| {
            self.map
                .get(Lpn(l))
                .is_some_and(|p| Some(self.layout.block_of(p)) != data)
        })
    }

    /// RAM GFTL's layout needs for its maps: a block number per logical block, a page-map
    /// entry per buffer page, and a block-sized RAM buffer (paper 004 §5.3).
    fn model_map_bytes(&self) -> usize {
        let ppb = self.layout.pages_per_block as usize;
        self.lbns as usize * 4
            + self.budget.buffer_blocks as usize * ppb * 4
            + ppb * self.layout.page_size as usize
    }
}

impl Scheme for GftlScheme {
    fn kind(&self) -> SchemeKind {
        SchemeKind::Gftl
    }

    fn placer(self: Arc<Self>, _q: usize) -> Box<dyn Placer> {
        place::placer(self)
    }

    fn page_map(&self) -> &PageMap {
        &self.map
    }

    fn before_read(&self, core: &Core) {
        if self.has_work() {
            self.step(core, StepFor::Read);
        }
    }

    fn search_on_flash(&self, core: &Core, lpn: Lpn, psa: Psa) {
        if self.role(self.layout.block_of(psa)) == Role::Data {
            self.search_data_block(core, lpn, psa);
        }
    }

    fn after_checkpoint(&self, core: &Core) {
        Journal::reclaim(&self.journal, core, self.layout, &self.map);
    }

    fn after_recovery(&self, core: &Core, _clean: Option<&CleanOpen<'_>>) -> Result<()> {
        self.rebuild_roles(core)
    }

    fn check(&self, core: &Core, zombies: &[Psa]) -> std::result::Result<(), String> {
        self.map.check(zombies)?;
        let layout = self.layout;
        let (ppb, sps) = (layout.pages_per_block, layout.slots_per_page);
        // Quiesced (no step, no page in flight): taking `gc` before the leaves and the states
        // here, against the writers' order, cannot meet a holder.
        let gc = self.gc.lock();
        let queue = self.queue.lock();
        let pool = self.pool.lock();
        let mut owner: std::collections::HashMap<BlockIdx, String> = Default::default();
        let mut own = |b: BlockIdx, who: String| match owner.insert(b, who.clone()) {
            Some(o) => Err(format!("block {} is {o} and {who}", b.0)),
            None => Ok(()),
        };
        let states: Vec<DataState> = self.state.iter().map(|s| *s.lock()).collect();
        for (lbn, st) in states.iter().enumerate() {
            if let Some(d) = st.data {
                own(d.block, format!("logical block {lbn}'s data block"))?;
                if d.next > ppb {
                    return Err(format!("logical block {lbn}: {d:?} is past its end"));
                }
            }
            let merging = gc.merge.as_ref().is_some_and(|m| m.lbn == lbn as u32);
            if st.merging != merging {
                return Err(format!(
                    "logical block {lbn}: merging {} but the merge under way is {:?}",
                    st.merging, gc.merge
                ));
            }
        }
        if let Some(m) = &gc.merge {
            own(m.dest.block, format!("merge {}'s destination", m.lbn))?;
            for (b, _) in &m.old {
                own(*b, format!("merge {}'s old block", m.lbn))?;
            }
        }
        // (A program that failed for another reason than a medium fault turned the device
        // read-only without giving the open block back.)
        if (pool.lent || !self.buffer_inflight.lock().is_empty())
            && core.read_only_reason().is_none()
        {
            return Err(format!(
                "quiesced, yet the write buffer is lent ({}) or has pages in flight",
                pool.lent
            ));
        }
        let faults = core.read_only_reason().is_some()
            || core.counters.program_failures.load(Ordering::Relaxed) > 0;
        if let Some(m) = gc.merge.as_ref().filter(|_| !faults) {
            let pages = (m.to_copy.len() as u32).div_ceil(sps);
            if m.steps > self.budget.merge_steps
                || m.to_copy.len() as u32 > self.spb
                || m.dest.next > pages.min(ppb)
            {
                return Err(format!(
                    "a merge past its budget of {} steps: {m:?}",
                    self.budget.merge_steps
                ));
            }
        }
        if let Some(o) = pool.open {
            own(o.block, "the open buffer block".into())?;
        }
        for (b, _) in pool.closed.iter().chain(gc.erasable.iter()) {
            own(*b, "a buffer block".into())?;
        }
        for (b, who) in &owner {
            let s = self.block_state(core, *b);
            if !matches!(s, BlockState::Open | BlockState::Full) {
                return Err(format!("block {} ({who}) is {s:?}", b.0));
            }
        }
        // And the other way round: a programmed block no role holds is never written, merged
        // or erased again (lost to the device for good). Not on a read-only device: it erases
        // nothing, so an emptied block stays programmed with no role.
        if core.read_only_reason().is_none() {
            let j = self.journal.lock();
            for b in 0..layout.total_blocks() {
                let b = BlockIdx(b);
                let s = self.block_state(core, b);
                let journal =
                    j.open.is_some_and(|(o, _)| o == b) || j.closed.iter().any(|(c, _)| *c == b);
                if matches!(s, BlockState::Open | BlockState::Full)
                    && !journal
                    && !owner.contains_key(&b)
                {
                    return Err(format!(
                        "block {} is {s:?} ({} valid slots) but no role holds it",
                        b.0,
                        self.map.valid_bits(b)
                    ));
                }
            }
        }
        for l in 0..self.lpns {
            let Some(psa) = self.map.get(Lpn(l)) else {
                continue;
            };
            let lbn = self.lbn_of(Lpn(l));
            let b = layout.block_of(psa);
            let st = &states[lbn as usize];
            if st.data.is_some_and(|d| d.block == b) {
                // Its data block: any page of it (the host's order).
                continue;
            }
            let Some(who) = owner.get(&b) else {
                return Err(format!(
                    "lpn {l} lives in block {} which no role holds",
                    b.0
                ));
            };
            if who.contains("data block") {
                return Err(format!("lpn {l} lives in {who} (block {})", b.0));
            }
            if !st.merging && !queue.contains(lbn) {
                return Err(format!(
                    "lpn {l} is outside its data block ({who}) but logical block {lbn} is neither queued nor merging"
                ));
            }
        }
        // The buffer's size bound holds while no block failed (a retired data block joins
        // the buffer until its pages move), and from the first time the queue drained after an
        // open that found buffer blocks.
        let held = pool.open.is_some() as u32 + pool.closed.len() as u32 + gc.erasable.len() as u32;
        if held != pool.held {
            return Err(format!(
                "the write buffer counts {} blocks and holds {held}",
                pool.held
            ));
        }
        if core.read_only_reason().is_none()
            && core.counters.program_failures.load(Ordering::Relaxed) == 0
            && self.bound_applies.load(Ordering::Relaxed)
            && held > self.budget.buffer_blocks
        {
            let blocks: Vec<String> = pool
                .closed
                .iter()
                .map(|(b, _)| format!("{}:{}", b.0, self.map.valid_bits(*b)))
                .collect();
            return Err(format!(
                "the write buffer holds {held} blocks, more than the {} its guarantee needs (queue {}, merge {:?}, {} erasable, closed block:valid slots {})",
                self.budget.buffer_blocks,
                queue.len(),
                gc.merge,
                gc.erasable.len(),
                blocks.join(" ")
            ));
        }
        Ok(())
    }

    fn memory_bytes(&self) -> usize {
        self.map.memory_bytes()
            + self.state.len() * std::mem::size_of::<Mutex<DataState>>()
            + self.lbns as usize / 8
            + self.model_map_bytes()
    }

    fn describe(&self, _core: &Core, lpn: Lpn) -> String {
        let lbn = self.lbn_of(lpn);
        format!(
            "lpn {}: {:?}; logical block {lbn}: {:?}, queued {}",
            lpn.0,
            self.map.get(lpn).map(|p| self.layout.split(p)),
            self.state[lbn as usize].lock(),
            self.queue.lock().contains(lbn)
        )
    }

    fn bench_victim_scan(&self, _core: &Core, _bank: u32) -> Option<u32> {
        None
    }

    fn seal_unit(&self) -> u32 {
        self.spb
    }

    fn rt_stats(&self) -> Option<RtStats> {
        let c = &self.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let b = self.budget;
        let (queue_len, queue_max) = {
            let q = self.queue.lock();
            (q.len() as u64, q.max_len as u64)
        };
        Some(RtStats {
            beta: b.beta,
            k_fold: b.merge_steps,
            k_shift: 0,
            step_bound_us: b.step_ns as f64 / 1000.0,
            write_bound_us: b.write_bound_ns as f64 / 1000.0,
            read_bound_us: b.read_bound_ns as f64 / 1000.0,
            copy_steps: ld(&c.copy_steps),
            erase_steps: ld(&c.erase_steps),
            pages_copied: ld(&c.pages_copied),
            erases: ld(&c.erases),
            folds: 0,
            shifts: 0,
            compactions: 0,
            jobs_resumed: 0,
            merges: ld(&c.merges),
            queue_len,
            queue_max,
            buffer_blocks: b.buffer_blocks,
            buffer_blocks_max: self.pool.lock().max_blocks,
            oob_reads: ld(&c.oob_reads),
            search_misses: ld(&c.search_misses),
            max_job_steps: ld(&c.max_merge_steps),
            step_latency: c.step_latency.summary(),
            log_placement: self.plan.placement().to_string(),
        })
    }
}
