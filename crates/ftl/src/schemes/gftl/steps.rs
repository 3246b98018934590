//! A step of GFTL's centralised partial GC (one per host request: a page written, a read):
//! erase a block the buffer emptied, or advance the merge of the queue's oldest logical block
//! by at most `beta` page copies or one erase.
//!
//! A step holds `gc` (steps run one at a time), the merged logical block's lock (none of its
//! pages in flight) and `gc_gate` shared, so a checkpoint never sees a step half published.
//! A read's step waits for none of them, nor for a pinned block or a trim record: it is
//! skipped instead (the reader may hold a writer's pages in flight, or another read's pin).
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

/// Who runs a step: a writer, which has drained its own pages and may wait, or a reader,
/// which must not (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepFor {
    Write,
    Read,
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
        // After a wear turn only the page asking is dropped (the others may still have room).
        if b.is_none() && block_ops::Placing::now(core) != block_ops::Placing::AfterWearTurn {
            core.set_read_only(format!("gftl: no free block for {what}"));
        }
        b
    }

    /// Whether a step has work. Read without a lock: a writer that misses a push by a
    /// moment skips one step.
    pub(super) fn has_work(&self) -> bool {
        self.work.load(Ordering::Acquire)
    }

    /// Runs one step, if there is work. A writer holds no logical block's lock and has
    /// nothing in flight; a reader holds no pin, and its step is skipped where it would wait.
    pub(super) fn step(&self, core: &Core, who: StepFor) {
        // A read-only device (opened so, or damaged) changes nothing, merges included.
        if core.is_read_only() {
            return;
        }
        let mut gc = match who {
            StepFor::Write => self.gc.lock(),
            StepFor::Read => match self.gc.try_lock() {
                Some(g) => g,
                None => return,
            },
        };
        // A writer's page carries a second step while the buffer holds more blocks than its
        // budget: only after an open that found it so (`recover.rs`) or a failed program, when
        // the bound does not apply; without it the excess never drains and crashes in quick
        // succession run the device out of free blocks.
        let steps = match who {
            StepFor::Write if self.pool.lock().held > self.budget.buffer_blocks => 2,
            _ => 1,
        };
        for _ in 0..steps {
            if !self.one_step(core, &mut gc, who) {
                break;
            }
        }
        let other = gc.merge.is_some() || !gc.erasable.is_empty();
        let q = self.queue.lock();
        self.work.store(other || q.len() > 0, Ordering::Release);
        if !other && q.len() == 0 {
            // Every logical block's pages are in its data block and every emptied block is
            // erased: whatever an open found in the buffer is gone. (Not sooner: once the
            // logical blocks the open queued are merged, pages written meanwhile may still
            // have waited behind the erases of the blocks it found, longer than the budget
            // allows for.)
            self.bound_applies.store(true, Ordering::Relaxed);
        }
    }

    /// One step: pieces of work until one makes a NAND operation (a merge's start or end
    /// without an operation is followed by the next piece). Whether it made one.
    fn one_step(&self, core: &Core, gc: &mut GcState, who: StepFor) -> bool {
        let t0 = core.now_ns();
        for _ in 0..4 {
            // A piece may have turned the device read-only (a copy's program failed and no
            // block is left for a new destination): nothing more is written, neither the rest
            // of this step nor a second one (the next copy went into the block just retired,
            // and the next open took the unreadable page for damage).
            if core.is_read_only() {
                return false;
            }
            match self.step_piece(core, gc, who) {
                Did::Op => {
                    core.counters.gc_steps.fetch_add(1, Ordering::Relaxed);
                    self.counters.step_latency.record(core.since(t0));
                    return true;
                }
                Did::Bookkeeping => continue,
                Did::Idle => return false,
            }
        }
        false
    }

    /// Whether block `b` can be erased now without waiting (a reader's step): nothing current
    /// in it, no trim record holding a slot, no read pinning it.
    fn erasable_now(&self, core: &Core, b: BlockIdx) -> bool {
        self.map.valid_bits(b) == 0 && !core.pins.pinned(b)
    }

    fn step_piece(&self, core: &Core, gc: &mut GcState, who: StepFor) -> Did {
        let reader = who == StepFor::Read;
        // A reader takes `gc_gate` now or not at all (a checkpoint may want it); a writer takes
        // it where it always did, after the logical block's lock.
        let reader_gate = if reader {
            match core.gc_gate.try_read() {
                Some(g) => Some(g),
                None => return Did::Idle,
            }
        } else {
            None
        };
        let gate = || reader_gate.is_none().then(|| core.gc_gate.read());
        if let Some(&(b, bad)) = gc.erasable.front() {
            if reader && !self.erasable_now(core, b) {
                return Did::Idle;
            }
            gc.erasable.pop_front();
            let _gate = gate();
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
        let locked = if reader {
            self.locks.try_lock(lbn)
        } else {
            self.locks.lock(lbn, || gave_up(core))
        };
        if !locked {
            // A power cut, a read-only device, or a reader's step that would wait: the
            // logical block keeps its place in the queue.
            if gc.merge.is_none() {
                self.queue.lock().push_front(lbn);
            }
            return Did::Idle;
        }
        let _lock = LbnGuard { scheme: self, lbn };
        let mut st = self.state[lbn as usize].lock();
        let mut merge = match gc.merge.take() {
            Some(m) => m,
            None => {
                // The merge starts: the old data block leaves the logical block, and the
                // offsets to copy are fixed.
                let home = self.plan.home(lbn);
                let data_bank = st.data.map(|d| self.bank_of(d.block));
                let bank = self.plan.merge_bank(data_bank, data_bank.as_slice(), home);
                let Some(dest) = self.alloc(core, bank, "a merge's data block") else {
                    self.queue.lock().push_front(lbn);
                    return Did::Idle;
                };
                self.set_role(dest, super::Role::Data);
                st.merging = true;
                Merge {
                    lbn,
                    dest: Blk::fresh(dest),
                    old: st
                        .data
                        .take()
                        .map(|d| (d.block, false))
                        .into_iter()
                        .collect(),
                    to_copy: self.current_offsets(lbn),
                    copied: 0,
                    steps: 0,
                }
            }
        };
        let _gate = gate();
        let did = match self.copy_step(core, lbn, &mut merge) {
            Ok(None) => {
                if merge.old.is_empty() {
                    // Copies done and nothing to erase: the merge ends.
                    self.end_merge(core, gc, &mut st, merge);
                    return Did::Bookkeeping;
                }
                if reader && !self.erasable_now(core, merge.old[0].0) {
                    // A slot still held by a trim record, or a read's pin: a writer's step
                    // waits for it, a reader's is skipped.
                    gc.merge = Some(merge);
                    return Did::Idle;
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
                        self.set_role(b, super::Role::Data);
                        merge.old.push((merge.dest.block, true));
                        merge.dest = Blk::fresh(b);
                        merge.copied = 0;
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
        if merge.old.is_empty() && merge.copies_done() {
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

    /// The offsets of `lbn` with a current page, ascending.
    fn current_offsets(&self, lbn: u32) -> Vec<u32> {
        let first = lbn * self.spb;
        let end = (first + self.spb).min(self.lpns);
        (first..end)
            .filter(|&l| self.map.get(Lpn(l)).is_some())
            .map(|l| l - first)
            .collect()
    }

    /// Copies up to `beta` pages of the merge's offsets into its destination, packed in
    /// offset order (a page with no current slot left for an offset, trimmed meanwhile, is
    /// padded there), and publishes them. Returns the slots moved (`None`: nothing left to
    /// copy); `Err` if a program failed (this step's copies are not published).
    fn copy_step(&self, core: &Core, lbn: u32, merge: &mut Merge) -> Result<Option<u64>, ()> {
        let layout = self.layout;
        let sps = layout.slots_per_page as usize;
        if merge.copies_done() {
            return Ok(None);
        }
        let first = lbn * self.spb;
        let mut copier = PageCopier::new(layout);
        let mut pages = 0;
        while pages < self.budget.beta && !merge.copies_done() {
            let dest = &mut merge.dest;
            let addr = self.addr(dest.block, dest.next);
            let take = (merge.to_copy.len() - merge.copied).min(sps);
            let sources: Vec<_> = (0..sps)
                .map(|i| {
                    (i < take)
                        .then(|| Lpn(first + merge.to_copy[merge.copied + i]))
                        .and_then(|l| self.map.get(l).map(|src| (l, src)))
                        .filter(|(_, src)| layout.block_of(*src) != dest.block)
                })
                .collect();
            merge.copied += take;
            dest.take_next(core, layout);
            pages += 1;
            if copier.copy_page(core, layout, addr, &sources).is_err() {
                return Err(());
            }
        }
        Ok(Some(copier.publish(core, &self.map)))
    }
}
