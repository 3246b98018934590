//! Where RFTL programs a sealed page, and the step of reclaim the page carries.
//!
//! A data page (the pages of one logical block: `Scheme::seal_unit`) first runs one step of
//! its logical block's job, if it has one (the paper's Fig. 4: each period serves a request
//! and one partial GC step), then goes to the primary's next free page, or the buffer's once
//! the primary is full. When the host starts on the last `k_fold` free pages of the buffer,
//! a fold starts, and this page runs its first step. A trim-record page goes to the journal.
//!
//! After a wear turn (`Placing::AfterWearTurn`) a page runs no step and starts no fold: it
//! goes to the primary's or the buffer's next free page (either taken from the free blocks if
//! the logical block has none yet), or is dropped once both are full.
//!
//! The writer holds the logical block's lock from `target` to `committed` of each page (as
//! the hybrids do, `hybrid/locks.rs`); a step needs none of the logical block's pages in
//! flight (it moves committed slots), so the placer asks the writer to drain first.

use std::sync::Arc;

use nand_model::PageAddr;

use super::lbn::Blk;
use super::RftlScheme;
use crate::buffer::SealedPage;
use crate::core::Core;
use crate::oob::SlotKind;
use crate::schemes::block_ops::{self, Journal, Placing};
use crate::schemes::hybrid::locks::HeldByWriter;
use crate::schemes::{Placer, Target};

pub(super) fn placer(scheme: Arc<RftlScheme>) -> Box<dyn Placer> {
    Box::new(RftlPlacer {
        scheme,
        held: HeldByWriter::default(),
    })
}

/// A writer's placement state.
struct RftlPlacer {
    scheme: Arc<RftlScheme>,
    held: HeldByWriter,
}

impl RftlScheme {
    /// The logical block of a data page (`None`: a page of trim records).
    fn lbn_of_page(&self, page: &SealedPage) -> Option<u32> {
        page.slots
            .iter()
            .find(|(m, _)| m.kind == SlotKind::Data)
            .map(|(m, _)| self.lbn_of(m.lpn))
    }
}

impl RftlPlacer {
    fn place(&mut self, core: &Core, lbn: u32) -> Target {
        let s = self.scheme.clone();
        let (ppb, k_fold) = (s.layout.pages_per_block, s.budget.k_fold);
        let mut st = s.state[lbn as usize].lock();
        let mut stepped = false;
        loop {
            let Some(turn) = Placing::after_turn(core) else {
                return Target::ReadOnly;
            };
            if !turn && !stepped && st.job.is_some() {
                if self.held.inflight() > 0 {
                    return Target::Drain;
                }
                s.step(core, lbn, &mut st);
                stepped = true;
                continue;
            }
            // After a wear turn a job cut short (a compaction, whose destination is none of
            // the roles yet) holds the blocks the rules allow: no block is added to them.
            let may_alloc = !turn || st.job.is_none();
            if st.primary.is_none() {
                if !may_alloc {
                    return Target::ReadOnly;
                }
                match s.alloc(core, s.plan.home(lbn)) {
                    Some(b) => st.primary = Some(Blk::fresh(b)),
                    None => return Target::ReadOnly,
                }
            }
            if let Some(p) = st.primary.as_mut().filter(|p| p.next < ppb) {
                let page = p.take_next(core, s.layout);
                return Target::Program(s.addr(p.block, page));
            }
            if st.buffer.is_none() {
                if !may_alloc {
                    return Target::ReadOnly;
                }
                let home = s.plan.home(lbn);
                let primary_bank = st.primary.map(|p| s.bank_of(p.block));
                match s.alloc(core, s.plan.log_bank(primary_bank, home)) {
                    Some(b) => st.buffer = Some(Blk::fresh(b)),
                    None => return Target::ReadOnly,
                }
            }
            let free = st.buffer.map_or(0, |b| b.free(ppb));
            if !turn && !stepped && st.job.is_none() && free <= k_fold {
                // Theorem 4.1: the fold starts while the buffer still has a page for every
                // step it takes; this page runs its first step.
                if self.held.inflight() > 0 {
                    return Target::Drain;
                }
                let mut banks: Vec<u32> = [st.primary, st.buffer]
                    .into_iter()
                    .flatten()
                    .map(|b| s.bank_of(b.block))
                    .collect();
                banks.dedup();
                let bank = s
                    .plan
                    .merge_bank(banks.first().copied(), &banks, s.plan.home(lbn));
                match s.alloc(core, bank) {
                    Some(r) => st.start_fold(r),
                    None => return Target::ReadOnly,
                }
                continue;
            }
            if let Some(b) = st.buffer.as_mut().filter(|b| b.next < ppb) {
                let page = b.take_next(core, s.layout);
                return Target::Program(s.addr(b.block, page));
            }
            if turn {
                // Both full: room would take a compaction, which erases.
                return Target::ReadOnly;
            }
            // Primary and buffer full and no job under way to free them: only after a fault
            // (a failed program compacted the logical block mid-job). Compact it again.
            if self.held.inflight() > 0 {
                return Target::Drain;
            }
            tracing::warn!("rftl: logical block {lbn} has no free page; compacting it");
            s.compact(core, lbn, &mut st, None);
            stepped = true;
        }
    }
}

impl Placer for RftlPlacer {
    fn target(&mut self, core: &Core, page: &SealedPage) -> Target {
        let s = self.scheme.clone();
        let Some(lbn) = s.lbn_of_page(page) else {
            return Journal::place(&s.journal, core, s.layout);
        };
        if !self.held.acquire(&s.locks, lbn, || Placing::gave_up(core)) {
            return Target::Drain;
        }
        let t = self.place(core, lbn);
        match t {
            Target::Program(_) => self.held.placed(lbn),
            // One page at a time (`group_size` 1): never multi-plane.
            Target::Drain | Target::ReadOnly | Target::Planes(_) => {
                self.held.done(&s.locks, lbn, false)
            }
        }
        t
    }

    /// Into its logical block's erased pages, or a free block (see the module's doc).
    fn programs_after_turn(&self) -> bool {
        true
    }

    fn committed(&mut self, _core: &Core, page: &SealedPage, _addr: PageAddr) {
        if let Some(lbn) = self.scheme.lbn_of_page(page) {
            self.held.done(&self.scheme.locks, lbn, true);
        }
    }

    fn failed(&mut self, core: &Core, page: &SealedPage, addr: PageAddr) {
        let s = self.scheme.clone();
        let b = s.layout.block_idx(addr.block);
        let Some(lbn) = s.lbn_of_page(page) else {
            Journal::failed(&s.journal, b);
            block_ops::failed_on_read_only(core, addr);
            return;
        };
        if block_ops::failed_on_read_only(core, addr) {
            // Compaction moves pages and erases: not on a read-only device.
            self.held.done(&s.locks, lbn, true);
            return;
        }
        // The writer committed every other page first: nothing of `lbn` is in flight but this
        // one, which is not mapped. Its current pages move to a fresh block, the failed one
        // retires; the writer then programs the page again (into the new primary).
        {
            let mut st = s.state[lbn as usize].lock();
            s.compact(core, lbn, &mut st, Some(b));
        }
        self.held.done(&s.locks, lbn, true);
    }
}
