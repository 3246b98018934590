//! A step of GFTL's centralised partial GC (one per host page): erase a block the buffer
//! emptied, or advance the merge of the queue's oldest logical block by at most `beta` page
//! copies or one erase.
//!
//! A step holds `gc` (steps run one at a time), the merged logical block's lock (none of its
//! pages in flight) and `gc_gate` shared, so a checkpoint never sees a step half published.
//! Copies keep each slot's sequence number and CRC and are published under the stripes once
//! programmed; a slot the host rewrote or trimmed meanwhile keeps its new state.

use std::sync::atomic::Ordering;

use super::queue::{GcState, Merge};
use super::GftlScheme;
use crate::core::Core;
use crate::layout::{BlockIdx, Lpn};
use crate::schemes::block_ops::{self, Blk, PageCopier, Released};

/// What one piece of a step did.
enum Did {
    /// A NAND operation: the step is over.
    Op,
    /// Bookkeeping only (a merge started or ended without an operation): go on.
    Bookkeeping,
    /// Nothing to do.
    Idle,
}

/// Releases a logical block's lock taken by a step.
struct LbnGuard<'a> {
    scheme: &'a GftlScheme,
    lbn: u32,
}

impl Drop for LbnGuard<'_> {
    fn drop(&mut self) {
        self.scheme.locks.unlock(self.lbn);
    }
}

fn gave_up(core: &Core) -> bool {
    core.writers_gone() || core.read_only_reason().is_some()
}

impl GftlScheme {
    /// A free block near `bank` (`for_merge`: the GC reserve may be taken).
    pub(super) fn alloc(&self, core: &Core, bank: u32, what: &str) -> Option<BlockIdx> {
        let b = block_ops::alloc_near(core, self.layout, bank, true);
        if b.is_none() {
            core.set_read_only(format!("gftl: no free block for {what}"));
        }
        b
    }

    /// Whether a step has work. Read without a lock: a writer that misses a push by a
    /// moment skips one step.
    pub(super) fn has_work(&self) -> bool {
        self.work.load(Ordering::Acquire)
    }

    /// Runs one step, if there is work. The caller holds no logical block's lock and has
    /// nothing in flight.
    pub(super) fn step(&self, core: &Core) {
        let mut gc = self.gc.lock();
        let t0 = core.now_ns();
        // A merge's start or end without an operation is followed by the next piece of work;
        // every round but the last makes no NAND operation or ends a merge.
        for _ in 0..4 {
            match self.step_piece(core, &mut gc) {
                Did::Op => {
                    core.counters.gc_steps.fetch_add(1, Ordering::Relaxed);
                    self.counters.step_latency.record(core.since(t0));
                    break;
                }
                Did::Bookkeeping => continue,
                Did::Idle => break,
            }
        }
        let other = gc.merge.is_some() || !gc.erasable.is_empty();
        let q = self.queue.lock();
        self.work.store(other || q.len() > 0, Ordering::Release);
        if !other && q.len() == 0 {
            // Every logical block's pages are in its data block and every emptied block is
            // erased: whatever an open found in the buffer is gone.
            self.bound_applies.store(true, Ordering::Relaxed);
        }
    }

    fn step_piece(&self, core: &Core, gc: &mut GcState) -> Did {
        if let Some((b, bad)) = gc.erasable.pop_front() {
            let _gate = core.gc_gate.read();
            let pool_after = self.erase_step(core, b, bad);
            let mut pool = self.pool.lock();
            match pool_after {
                // Still held: back to the buffer's list, looked at again after a merge.
                Some(entry) => pool.closed.push_back(entry),
                None => pool.held -= 1,
            }
            return Did::Op;
        }
        let lbn = match &gc.merge {
            Some(m) => m.lbn,
            None => match self.queue.lock().pop() {
                Some(l) => l,
                None => return Did::Idle,
            },
        };
        if !self.locks.lock(lbn, || gave_up(core)) {
            // A power cut or a read-only device: the logical block stays queued.
            if gc.merge.is_none() {
                self.enqueue(lbn);
            }
            return Did::Idle;
        }
        let _lock = LbnGuard { scheme: self, lbn };
        let mut st = self.state[lbn as usize].lock();
        let mut merge = match gc.merge.take() {
            Some(m) => m,
            None => {
                // The merge starts: the old data block leaves the logical block.
                let home = self.plan.home(lbn);
                let data_bank = st.data.map(|d| self.bank_of(d.block));
                let bank = self.plan.merge_bank(data_bank, data_bank.as_slice(), home);
                let Some(dest) = self.alloc(core, bank, "a merge's data block") else {
                    self.enqueue(lbn);
                    return Did::Idle;
                };
                st.merging = true;
                let dest = Blk::fresh(dest);
                Merge {
                    lbn,
                    dest,
                    old: st
                        .data
                        .take()
                        .map(|d| (d.block, false))
                        .into_iter()
                        .collect(),
                    end: self.copy_end(lbn, &dest),
                    steps: 0,
                }
            }
        };
        let _gate = core.gc_gate.read();
        let did = match self.copy_step(core, lbn, &mut merge.dest, merge.end) {
            Ok(None) => {
                if merge.old.is_empty() {
                    // Copies done and nothing to erase: the merge ends.
                    self.end_merge(core, gc, &mut st, merge);
                    return Did::Bookkeeping;
                }
                let (b, bad) = merge.old.remove(0);
                if let Some(entry) = self.erase_step(core, b, bad) {
                    // Slots in it are still held: the buffer keeps it until they are not.
                    let mut pool = self.pool.lock();
                    pool.closed.push_back(entry);
                    pool.held += 1;
                    pool.max_blocks = pool.max_blocks.max(pool.held);
                }
                Did::Op
            }
            Ok(Some(n)) => {
                self.counters.copy_steps.fetch_add(1, Ordering::Relaxed);
                self.counters.pages_copied.fetch_add(n, Ordering::Relaxed);
                Did::Op
            }
            Err(()) => {
                // A program into the destination failed: it retires once its slots are
                // superseded, and the merge starts over into a fresh block.
                let bank = self.plan.home(lbn);
                match self.alloc(core, bank, "a merge's data block") {
                    Some(b) => {
                        merge.old.push((merge.dest.block, true));
                        merge.dest = Blk::fresh(b);
                        merge.end = self.copy_end(lbn, &merge.dest);
                    }
                    None => {
                        // Read-only now: the merge stays as it is.
                        gc.merge = Some(merge);
                        return Did::Op;
                    }
                }
                Did::Op
            }
        };
        merge.steps += 1;
        self.counters
            .max_merge_steps
            .fetch_max(u64::from(merge.steps), Ordering::Relaxed);
        if merge.old.is_empty() && merge.dest.next >= merge.end {
            // The last erase was this step's: the merge ends with it.
            self.end_merge(core, gc, &mut st, merge);
        } else {
            gc.merge = Some(merge);
        }
        did
    }

    /// Erases (or retires) block `b`, which holds nothing current. The caller holds
    /// `gc_gate` shared. Returns the block back if slots in it are still held (a trim record
    /// that cannot be written yet): it stays until they are not.
    fn erase_step(&self, core: &Core, b: BlockIdx, bad: bool) -> Option<(BlockIdx, bool)> {
        self.counters.erase_steps.fetch_add(1, Ordering::Relaxed);
        match block_ops::release_emptied(core, self.layout, &self.map, b, bad, true) {
            Released::Erased => {
                self.counters.erases.fetch_add(1, Ordering::Relaxed);
                None
            }
            Released::Bad => None,
            Released::Held => Some((b, bad)),
        }
    }

    /// The merge's copies and erases are done: `dest` is the logical block's data block; the
    /// logical block is queued again if the host left a page of it outside; buffer blocks
    /// holding nothing current wait for their erase.
    fn end_merge(
        &self,
        _core: &Core,
        gc: &mut GcState,
        st: &mut super::queue::DataState,
        merge: Merge,
    ) {
        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        st.data = Some(merge.dest);
        st.merging = false;
        if self.has_pages_outside(merge.lbn, Some(merge.dest.block)) {
            self.enqueue(merge.lbn);
        }
        let inflight = self.buffer_inflight.lock();
        let mut pool = self.pool.lock();
        let mut kept = std::collections::VecDeque::with_capacity(pool.closed.len());
        while let Some((b, bad)) = pool.closed.pop_front() {
            if self.map.valid_bits(b) == 0 && !inflight.contains_key(&b) {
                gc.erasable.push_back((b, bad));
            } else {
                kept.push_back((b, bad));
            }
        }
        pool.closed = kept;
    }

    /// Where a merge's copies into `dest` end (exclusive), fixed when it starts: past the
    /// last page of the data block a current page of `lbn` outside `dest` maps to. Pages the
    /// host writes after it stay in the buffer (the logical block is queued again), so a merge
    /// takes at most `merge_steps` steps whatever the host does meanwhile.
    fn copy_end(&self, lbn: u32, dest: &Blk) -> u32 {
        self.last_page_to_copy(lbn, dest)
            .map_or(dest.next, |p| (p + 1).min(self.layout.pages_per_block))
    }

    /// The highest page of the data block that a current page of `lbn` outside `dest` maps
    /// to, if it is at or after `dest`'s next page (a page the host rewrote after its copy
    /// stays in the buffer: the logical block is queued again).
    fn last_page_to_copy(&self, lbn: u32, dest: &Blk) -> Option<u32> {
        let sps = self.layout.slots_per_page;
        let first = lbn * self.spb;
        let end = (first + self.spb).min(self.lpns);
        (first..end)
            .rev()
            .find(|&l| {
                self.map
                    .get(Lpn(l))
                    .is_some_and(|p| self.layout.block_of(p) != dest.block)
            })
            .map(|l| (l - first) / sps)
            .filter(|&p| p >= dest.next)
    }

    /// Copies up to `beta` pages of `lbn` into `dest` at their offsets, from `dest`'s next
    /// page up to `end` (padding pages with no current slot), and publishes them. Returns the
    /// slots moved (`None`: nothing left to copy); `Err` if a program failed (this step's
    /// copies are not published).
    fn copy_step(
        &self,
        core: &Core,
        lbn: u32,
        dest: &mut Blk,
        end: u32,
    ) -> Result<Option<u64>, ()> {
        let layout = self.layout;
        let sps = layout.slots_per_page;
        if dest.next >= end {
            return Ok(None);
        }
        let stop = end.min(dest.next + self.budget.beta);
        let first = lbn * self.spb;
        let mut copier = PageCopier::new(layout);
        while dest.next < stop {
            let addr = self.addr(dest.block, dest.next);
            let sources: Vec<_> = (0..sps)
                .map(|i| {
                    let l = first + dest.next * sps + i;
                    (l < self.lpns)
                        .then(|| self.map.get(Lpn(l)))
                        .flatten()
                        .filter(|p| layout.block_of(*p) != dest.block)
                        .map(|src| (Lpn(l), src))
                })
                .collect();
            dest.take_next(core, layout);
            if copier.copy_page(core, layout, addr, &sources).is_err() {
                return Err(());
            }
        }
        Ok(Some(copier.publish(core, &self.map)))
    }
}
