//! Where GFTL programs a sealed page, and the step it runs first.
//!
//! A data page (the pages of one logical block: `Scheme::seal_unit`) first runs one step of
//! the GC if there is work (GFTL serves a request and one partial step per period), then goes
//! to its data block's next page, whatever its offsets (a logical block without a data block
//! gets one), or, once the data block is full or while its logical block is merged, to the
//! write buffer, which queues its logical block for a merge. A trim-record page goes to the
//! journal.
//!
//! After a wear turn (`Placing::AfterWearTurn`) a page runs no step: it goes where it would
//! otherwise (a data block taken from the free blocks if it has none, then the buffer's
//! blocks), until no free page is left there.
//!
//! The writer holds the logical block's lock from `target` to `committed` of each page (as
//! the hybrids do, `hybrid/locks.rs`); a step needs nothing in flight (it may wait for the
//! lock of the block it merges), so the placer asks the writer to drain first. The write
//! buffer's open block is lent to one writer from `target` to `issued`, so its pages are
//! programmed in order.

use std::sync::Arc;
use std::time::Duration;

use nand_model::PageAddr;

use super::{GftlScheme, Role};
use crate::buffer::SealedPage;
use crate::core::Core;
use crate::schemes::block_ops::{self, Blk, Journal, PageShape, Placing};
use crate::schemes::hybrid::locks::HeldByWriter;
use crate::schemes::{Placer, Target};

pub(super) fn placer(scheme: Arc<GftlScheme>) -> Box<dyn Placer> {
    Box::new(GftlPlacer {
        scheme,
        held: HeldByWriter::default(),
        stepped: false,
        lent: false,
    })
}

/// A writer's placement state.
struct GftlPlacer {
    scheme: Arc<GftlScheme>,
    held: HeldByWriter,
    /// The page being placed has run its step (a drain and a new `target` do not run another).
    stepped: bool,
    /// This writer has the write buffer's open block until its program is issued.
    lent: bool,
}

impl GftlPlacer {
    fn place(&mut self, core: &Core, shape: &PageShape) -> Target {
        let s = self.scheme.clone();
        let ppb = s.layout.pages_per_block;
        let lbn = shape.lbn;
        let mut st = s.state[lbn as usize].lock();
        if !st.merging {
            match st.data.as_mut() {
                Some(d) if d.next < ppb => {
                    let page = d.take_next(core, s.layout);
                    return Target::Program(s.addr(d.block, page));
                }
                None => match s.alloc(core, s.plan.home(lbn), "a data block") {
                    Some(b) => {
                        s.set_role(b, Role::Data);
                        let mut d = Blk::fresh(b);
                        let page = d.take_next(core, s.layout);
                        st.data = Some(d);
                        return Target::Program(s.addr(b, page));
                    }
                    // After a wear turn the buffer's open block may still have room.
                    None if Placing::now(core) == Placing::AfterWearTurn => {}
                    None => return Target::ReadOnly,
                },
                _ => {}
            }
        }
        let t = self.take_buffer(core, lbn);
        if matches!(t, Target::Program(_)) && !st.merging {
            // A merge under way queues its block again at its end if a page is left over.
            s.enqueue(lbn);
        }
        t
    }

    /// The write buffer's next page (waiting while another writer has the open block).
    fn take_buffer(&mut self, core: &Core, lbn: u32) -> Target {
        let s = self.scheme.clone();
        let ppb = s.layout.pages_per_block;
        loop {
            if Placing::gave_up(core) {
                return Target::ReadOnly;
            }
            let mut inflight = s.buffer_inflight.lock();
            let mut pool = s.pool.lock();
            if pool.lent {
                drop(inflight);
                s.pool_parked.wait_for(&mut pool, Duration::from_millis(5));
                continue;
            }
            if let Some(b) = pool.open.as_mut() {
                let block = b.block;
                let page = b.take_next(core, s.layout);
                if b.next == ppb {
                    pool.closed.push_back((block, false));
                    pool.open = None;
                }
                pool.lent = true;
                self.lent = true;
                *inflight.entry(block).or_insert(0) += 1;
                return Target::Program(s.addr(block, page));
            }
            // A new block, taken under the pool's lock so that two writers never both open one
            // (allocation takes only the banks' leaf locks). Buffer blocks go away from the
            // logical block's home bank.
            let home = s.plan.home(lbn);
            let Some(b) = s.alloc(core, s.plan.log_bank(Some(home), home), "the write buffer")
            else {
                return Target::ReadOnly;
            };
            s.set_role(b, Role::Buffer);
            pool.open = Some(Blk::fresh(b));
            pool.held += 1;
            pool.max_blocks = pool.max_blocks.max(pool.held);
        }
    }

    /// A program into a buffer block is over (committed or failed).
    fn buffer_done(&self, addr: PageAddr) {
        let s = &self.scheme;
        let b = s.layout.block_idx(addr.block);
        let mut inflight = s.buffer_inflight.lock();
        if let Some(n) = inflight.get_mut(&b) {
            *n -= 1;
            if *n == 0 {
                inflight.remove(&b);
            }
        }
    }

    fn give_back(&mut self) {
        if self.lent {
            self.lent = false;
            self.scheme.pool.lock().lent = false;
            self.scheme.pool_parked.notify_all();
        }
    }
}

impl Placer for GftlPlacer {
    fn target(&mut self, core: &Core, page: &SealedPage) -> Target {
        let s = self.scheme.clone();
        let Some(shape) = PageShape::of(page, s.spb) else {
            return Journal::place(&s.journal, core, s.layout);
        };
        if !self.stepped && s.has_work() && Placing::now(core) == Placing::Free {
            if self.held.inflight() > 0 {
                return Target::Drain;
            }
            s.step(core, super::steps::StepFor::Write);
            self.stepped = true;
        }
        if Placing::gave_up(core) {
            return Target::ReadOnly;
        }
        let lbn = shape.lbn;
        if !self.held.acquire(&s.locks, lbn, || Placing::gave_up(core)) {
            return Target::Drain;
        }
        let t = self.place(core, &shape);
        match t {
            Target::Program(_) => self.held.placed(lbn),
            Target::Drain | Target::ReadOnly | Target::Planes(_) => {
                self.held.done(&s.locks, lbn, false)
            }
        }
        t
    }

    fn issued(&mut self, _core: &Core, _addrs: &[PageAddr], programmed: bool) {
        // After a failed program the same pages are offered again: they already carried
        // their step (one per host write, the bound `write_bound_ns` counts).
        if programmed {
            self.stepped = false;
        }
        self.give_back();
    }

    /// Into its data block or the buffer's blocks, while they have erased pages (see the
    /// module's doc).
    fn programs_after_turn(&self) -> bool {
        true
    }

    fn committed(&mut self, _core: &Core, page: &SealedPage, addr: PageAddr) {
        let s = self.scheme.clone();
        if let Some(shape) = PageShape::of(page, s.spb) {
            self.buffer_done(addr);
            self.held.done(&s.locks, shape.lbn, true);
        }
    }

    fn failed(&mut self, core: &Core, page: &SealedPage, addr: PageAddr) {
        let s = self.scheme.clone();
        let b = s.layout.block_idx(addr.block);
        // What follows moves no page and erases nothing: on a read-only device it only ends
        // the programs a wear turn allowed.
        block_ops::failed_on_read_only(core, addr);
        let Some(shape) = PageShape::of(page, s.spb) else {
            Journal::failed(&s.journal, b);
            return;
        };
        let lbn = shape.lbn;
        let mut retired = false;
        {
            let mut pool = s.pool.lock();
            if pool.open.is_some_and(|o| o.block == b) {
                pool.open = None;
                pool.closed.push_back((b, true));
                retired = true;
            } else if let Some(e) = pool.closed.iter_mut().find(|(x, _)| *x == b) {
                e.1 = true;
                retired = true;
            }
        }
        if !retired {
            // A data block's page: the block retires once its pages move, which the logical
            // block's merge does; meanwhile it is one of the buffer's.
            let mut st = s.state[lbn as usize].lock();
            if st.data.is_some_and(|d| d.block == b) {
                st.data = None;
                s.set_role(b, Role::Buffer);
                let mut pool = s.pool.lock();
                pool.closed.push_back((b, true));
                pool.held += 1;
                pool.max_blocks = pool.max_blocks.max(pool.held);
                drop(pool);
                s.enqueue(lbn);
            }
        }
        // Only now, with the block marked for retirement: until then its page in flight keeps
        // a merge's end from taking it for an emptied block to erase.
        self.buffer_done(addr);
        self.held.done(&s.locks, lbn, true);
    }
}
