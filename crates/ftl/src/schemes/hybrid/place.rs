//! Where the hybrid schemes program a sealed page.
//!
//! A data page (pages of one logical block: `Scheme::seal_unit`) goes to a log block:
//! - **BAST**: the logical block's own log block; a full one is merged first; a logical block
//!   without one gets a free one from the pool, or, with the pool used up, the least recently
//!   used log block is merged to free one.
//! - **FAST**: the sequential-write (SW) log block if the page continues it (same logical
//!   block, the next offset); a page at offset 0 of a logical block starts a new SW log (the
//!   old one is merged first); anything else goes to the writer's random-write (RW) log block.
//!   The thesis's rule: "sequential when the SW log block is empty and the page offset is zero,
//!   or when the page offset is after that of the recently written page in the SW log block".
//!   Each writer appends to an RW log of its own (so pages of one block are programmed in
//!   order under any scheduling); a full one joins the victim queue, whose oldest is merged
//!   when the pool is used up.
//!
//! A trim-record page goes to the journal (`block_ops::Journal`).
//!
//! After a wear turn (`Placing::AfterWearTurn`) nothing is merged: a page goes where the rules
//! above put it without a merge first (its own log block or the SW log while they have room,
//! a new log from the free blocks while the pool has one; under FAST a page that would start a
//! new SW log goes to the writer's RW log instead when one exists, the pool is full or no free
//! block is left), or is dropped.
//!
//! The writer holds the logical block's lock from `target` to `committed` of each page (a
//! count per logical block: several of its pages may be in flight). See `locks.rs` for the
//! rule that keeps this free of cycles: before waiting or merging, the placer asks the writer
//! to drain (`Target::Drain`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nand_model::PageAddr;

use super::locks::HeldByWriter;
use super::logs::{LogBlock, Logs};
use super::{HybridScheme, LogPolicy};
use crate::buffer::SealedPage;
use crate::core::Core;
use crate::layout::BlockIdx;
use crate::schemes::block_ops::{self, Journal, PageShape, Placing};
use crate::schemes::{Placer, Target};

pub(super) fn placer(scheme: Arc<HybridScheme>, q: usize) -> Box<dyn Placer> {
    Box::new(HybridPlacer {
        scheme,
        q,
        held: HeldByWriter::default(),
        rw_open: None,
        no_space_rounds: 0,
    })
}

/// A writer's placement state.
struct HybridPlacer {
    scheme: Arc<HybridScheme>,
    q: usize,
    /// Logical blocks whose lock this writer holds, and how many of its pages are in flight.
    held: HeldByWriter,
    /// FAST: the random-write log this writer appends to.
    rw_open: Option<BlockIdx>,
    /// Consecutive rounds without a free block (the device turns read-only after many).
    no_space_rounds: u32,
}

impl HybridPlacer {
    fn inflight(&self) -> u32 {
        self.held.inflight()
    }

    /// Takes `lbn`'s lock; `false`: ask for a drain (waiting for it would hold others), or
    /// the writers are gone (a power cut).
    fn acquire(&mut self, core: &Core, lbn: u32) -> bool {
        self.held
            .acquire(&self.scheme.locks, lbn, || Placing::gave_up(core))
    }

    /// One program of `lbn` is done (committed, or failed): release the lock after the last.
    fn done(&mut self, lbn: u32, placed: bool) {
        self.held.done(&self.scheme.locks, lbn, placed);
    }

    /// Waits a little with `lbn` released (a merge that needs other writers' blocks backs
    /// off; releasing our own lets theirs proceed). Only with nothing in flight.
    fn back_off(&mut self, core: &Core, lbn: u32) {
        let locks = &self.scheme.locks;
        locks.unlock(lbn);
        locks.wait_release();
        if !locks.lock(lbn, || Placing::gave_up(core)) {
            // Power cut or read-only: the caller returns at once. The lock is not ours any
            // more, so it must not be released on our behalf.
            self.held.forget(lbn);
        }
    }

    /// A pool entry turned into a new log block. `install` runs under the same lock hold that
    /// gives the entry back, with the block or `None` (no free block: the device may turn
    /// read-only), so `Logs::in_use` never dips between the two and another writer cannot
    /// take the same entry (the pool would hold `log_limit + 1`). After a wear turn (`turn`)
    /// the merge reserve may go too (nothing is merged again), and `None` is the caller's to
    /// act on at once: the page is dropped.
    fn new_log(
        &mut self,
        core: &Core,
        prefer_bank: u32,
        turn: bool,
        install: impl FnOnce(&mut Logs, Option<BlockIdx>),
    ) -> Option<BlockIdx> {
        let s = &self.scheme;
        let b = s.alloc_block_near(core, prefer_bank, turn);
        let mut logs = s.logs.lock();
        logs.reserved -= 1;
        install(&mut logs, b);
        drop(logs);
        match b {
            Some(b) => {
                self.no_space_rounds = 0;
                Some(b)
            }
            None if turn => None,
            None => {
                self.no_space_rounds += 1;
                if self.no_space_rounds > 2000 {
                    core.set_read_only("no free block for a log block".into());
                }
                core.wait_for_others();
                None
            }
        }
    }

    fn addr(&self, b: BlockIdx, page: u32) -> PageAddr {
        PageAddr {
            block: self.scheme.layout.block_addr(b),
            page,
        }
    }

    fn place_bast(&mut self, core: &Core, page: &PageShape) -> Target {
        let s = self.scheme.clone();
        let (lbn, ppb) = (page.lbn, s.layout.pages_per_block);
        loop {
            let Some(turn) = Placing::after_turn(core) else {
                return Target::ReadOnly;
            };
            let mut logs = s.logs.lock();
            let now = logs.tick();
            if let Some(g) = logs.by_owner.get(&lbn).copied() {
                if let Some(lb) = logs.blocks.get_mut(&g).filter(|lb| lb.next < ppb) {
                    let p = lb.next;
                    lb.place(&page.slots, s.spb, now);
                    return Target::Program(self.addr(g, p));
                }
                drop(logs);
                if turn {
                    return Target::ReadOnly;
                }
                // Full: merge it (its pages must all be committed first).
                if self.inflight() > 0 {
                    return Target::Drain;
                }
                s.merge_lbn(core, lbn, false);
                continue;
            }
            if logs.in_use() < s.log_limit {
                logs.reserved += 1;
                drop(logs);
                let bank = s.log_bank(lbn);
                let spb = s.spb;
                let new = self.new_log(core, bank, turn, |logs, b| {
                    if let Some(b) = b {
                        logs.insert(LogBlock::new(b, Some(lbn), spb, now));
                        logs.by_owner.insert(lbn, b);
                    }
                });
                if turn && new.is_none() {
                    return Target::ReadOnly;
                }
                continue;
            }
            drop(logs);
            if turn {
                return Target::ReadOnly;
            }
            if self.inflight() > 0 {
                return Target::Drain;
            }
            if !s.reclaim_bast(core, lbn) {
                self.back_off(core, lbn);
            }
        }
    }

    fn place_fast(&mut self, core: &Core, page: &PageShape) -> Target {
        let s = self.scheme.clone();
        let (lbn, ppb, sps) = (page.lbn, s.layout.pages_per_block, s.layout.slots_per_page);
        let starts_block = page.in_order_from(0, s.spb);
        // After a wear turn: no new SW log can be opened (no free block).
        let mut no_new_sw = false;
        loop {
            let Some(turn) = Placing::after_turn(core) else {
                return Target::ReadOnly;
            };
            let mut logs = s.logs.lock();
            let now = logs.tick();
            // 1. The page continues the SW log.
            if let Some(sw) = logs.sw {
                if let Some(lb) = logs.blocks.get_mut(&sw).filter(|lb| {
                    lb.owner == Some(lbn)
                        && lb.sequential
                        && lb.next < ppb
                        && page.in_order_from(lb.next * sps, s.spb)
                }) {
                    let p = lb.next;
                    lb.place(&page.slots, s.spb, now);
                    return Target::Program(self.addr(sw, p));
                }
            }
            // 2. Offset 0 of a logical block starts a new SW log; the old one is merged. After
            // a wear turn, which merges nothing, such a page goes to the RW log instead unless
            // a new SW log can be opened without one.
            if starts_block
                && !(turn && (no_new_sw || logs.sw.is_some() || logs.in_use() >= s.log_limit))
            {
                if let Some(sw) = logs.sw {
                    let owner = logs.blocks.get(&sw).and_then(|lb| lb.owner);
                    drop(logs);
                    if self.inflight() > 0 {
                        return Target::Drain;
                    }
                    match owner {
                        Some(o) if o == lbn => {
                            s.merge_lbn(core, o, false);
                        }
                        Some(o) if s.locks.try_lock(o) => {
                            if s.logs.lock().owned(o).is_some() {
                                s.merge_lbn(core, o, false);
                            }
                            s.locks.unlock(o);
                        }
                        Some(_) => self.back_off(core, lbn),
                        None => {
                            // A SW log without an owner (never made today): forget it, unless
                            // another writer replaced it meanwhile.
                            let mut l = s.logs.lock();
                            if l.sw == Some(sw) {
                                l.sw = None;
                            }
                        }
                    }
                    continue;
                }
                if logs.sw_opening {
                    // Another writer is opening the SW log; look again once it has.
                    drop(logs);
                    std::thread::yield_now();
                    continue;
                }
                if logs.in_use() < s.log_limit {
                    logs.reserved += 1;
                    logs.sw_opening = true;
                    drop(logs);
                    let spb = s.spb;
                    let new = self.new_log(core, s.log_bank(lbn), turn, |logs, b| {
                        logs.sw_opening = false;
                        if let Some(b) = b {
                            logs.insert(LogBlock::new(b, Some(lbn), spb, now));
                            logs.sw = Some(b);
                        }
                    });
                    no_new_sw = turn && new.is_none();
                    continue;
                }
            } else {
                // 3. Anything else goes to this writer's RW log.
                if let Some(rw) = self.rw_open {
                    let q = self.q;
                    match logs.blocks.get_mut(&rw) {
                        Some(lb) if lb.writer == Some(q) && lb.next < ppb => {
                            let p = lb.next;
                            lb.place(&page.slots, s.spb, now);
                            if lb.next == ppb {
                                lb.writer = None;
                                logs.rw_full.push_back(rw);
                                self.rw_open = None;
                            }
                            return Target::Program(self.addr(rw, p));
                        }
                        // Closed by a reclaim, or merged.
                        _ => self.rw_open = None,
                    }
                }
                if logs.in_use() < s.log_limit {
                    logs.reserved += 1;
                    drop(logs);
                    let n = s.rw_opened.fetch_add(1, Ordering::Relaxed);
                    let bank = s.plan.random_log_bank(n);
                    let (spb, q) = (s.spb, self.q);
                    match self.new_log(core, bank, turn, |logs, b| {
                        if let Some(b) = b {
                            let mut lb = LogBlock::new(b, None, spb, now);
                            lb.writer = Some(q);
                            logs.insert(lb);
                        }
                    }) {
                        Some(b) => self.rw_open = Some(b),
                        None if turn => return Target::ReadOnly,
                        None => {}
                    }
                    continue;
                }
            }
            drop(logs);
            if turn {
                return Target::ReadOnly;
            }
            if self.inflight() > 0 {
                return Target::Drain;
            }
            if !s.reclaim_fast(core, lbn) {
                self.back_off(core, lbn);
            }
        }
    }
}

impl Placer for HybridPlacer {
    fn target(&mut self, core: &Core, page: &SealedPage) -> Target {
        let Some(shape) = PageShape::of(page, self.scheme.spb) else {
            return Journal::place(&self.scheme.journal, core, self.scheme.layout);
        };
        if !self.acquire(core, shape.lbn) {
            return Target::Drain;
        }
        let t = match self.scheme.policy {
            LogPolicy::Bast => self.place_bast(core, &shape),
            LogPolicy::Fast => self.place_fast(core, &shape),
        };
        match t {
            Target::Program(_) => {
                self.held.placed(shape.lbn);
            }
            // The hybrids program one page at a time (`group_size` 1): never multi-plane.
            Target::Drain | Target::ReadOnly | Target::Planes(_) => self.done(shape.lbn, false),
        }
        t
    }

    /// Into a log with room or a new one while the pool has one, no merge (see the module's
    /// doc).
    fn programs_after_turn(&self) -> bool {
        true
    }

    fn committed(&mut self, _core: &Core, page: &SealedPage, _addr: PageAddr) {
        if let Some(shape) = PageShape::of(page, self.scheme.spb) {
            self.done(shape.lbn, true);
        }
    }

    fn failed(&mut self, core: &Core, page: &SealedPage, addr: PageAddr) {
        let s = self.scheme.clone();
        let b = s.layout.block_idx(addr.block);
        let Some(shape) = PageShape::of(page, s.spb) else {
            // A journal block: its records stay live until pruned; it goes bad then.
            // (Counted as retired when `reclaim_journal` marks it bad.)
            Journal::failed(&s.journal, b);
            block_ops::failed_on_read_only(core, addr);
            return;
        };
        let ended = block_ops::failed_on_read_only(core, addr);
        // The writer committed everything else: we hold only this page's logical block.
        let mut logs = s.logs.lock();
        let owner = logs.blocks.get(&b).and_then(|lb| lb.owner);
        if let Some(lb) = logs.blocks.get_mut(&b) {
            lb.retiring = true;
            if lb.owner.is_none() {
                // A random log: closed; reclaimed (and marked bad) as a victim.
                lb.writer = None;
                if !logs.rw_full.contains(&b) {
                    logs.rw_full.push_back(b);
                }
                if self.rw_open == Some(b) {
                    self.rw_open = None;
                }
            }
        }
        drop(logs);
        // A page goes only to its own logical block's log (BAST's, or FAST's SW log, owned by
        // the page's block when the page went there): a full merge moves the log's committed
        // pages out, and the log goes bad. Not on a read-only device, which merges nothing:
        // the programs a wear turn allowed end instead.
        if owner == Some(shape.lbn) && !ended {
            s.merge_lbn(core, shape.lbn, true);
        }
        self.done(shape.lbn, true);
    }
}
