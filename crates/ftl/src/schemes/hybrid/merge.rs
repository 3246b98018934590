//! Merges: a logical block's pages, spread over its data block and log blocks, become one
//! data block again (thesis §3.1).
//!
//! - **switch**: the log block holds every page of the block, each in its own slot and still
//!   current: it becomes the data block; the old data block is erased.
//! - **partial**: the log block holds a current in-order prefix: the block's remaining current
//!   pages are copied into the log's free pages, it becomes the data block, the old one is
//!   erased.
//! - **full**: every current page of the block is copied into a fresh block, slot `i` for page
//!   `i`; the old data block and the block's own log block are erased (FAST: its pages in random
//!   logs become stale there; the random log is erased when its last current page left).
//!
//! Copies keep each page's sequence number and CRC, so recovery resolves them as GC copies
//! (`page::recover`). A page whose data fails its check is copied with its original CRC: it
//! stays detectably bad, as with GC. A merge holds its logical block's lock (nothing of it is
//! in flight) and `gc_gate` shared (a checkpoint never sees a merge half published).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use nand_model::{BlockAddr, Completion, PageAddr};

use super::locks::Held;
use super::HybridScheme;
use crate::blocks::BlockState;
use crate::core::Core;
use crate::layout::{BlockIdx, Lpn, Psa, LOGICAL_PAGE};
use crate::oob::{self, SlotMeta};
use crate::schemes::block_ops::{self, CopyFailed};

/// The three merges (indices into `HybridScheme::merges`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeKind {
    Switch = 0,
    Partial = 1,
    Full = 2,
}

/// Destination pages whose reads a merge issues before programming the first of them.
const READ_AHEAD: usize = 4;

/// A destination page whose source reads are issued.
struct StagedPage {
    page: u32,
    data: Vec<u8>,
    metas: Vec<SlotMeta>,
    /// Reads to wait for before the program.
    reads: Vec<Completion>,
}

impl HybridScheme {
    /// Merges logical block `lbn` (see the module doc). The caller holds `lbn`'s lock and has
    /// no program of it in flight. With `retire_log` the block's own log block had a program
    /// fail: it is marked bad instead of erased, and only a full merge is used.
    pub(super) fn merge_lbn(&self, core: &Core, lbn: u32, retire_log: bool) -> MergeKind {
        let t0 = core.now_ns();
        let _gc = core.gc_gate.read();
        let log = {
            let logs = self.logs.lock();
            logs.owned(lbn).and_then(|b| logs.blocks.get(&b).cloned())
        };
        let old_data = self.data_block(lbn);
        let ppb = self.layout.pages_per_block;
        let prefix = log
            .as_ref()
            .filter(|lb| !retire_log && self.current_prefix(lb, lbn));
        let kind = match prefix {
            Some(lb) if lb.next == ppb => {
                self.logs.lock().remove(lb.block);
                self.set_block_state(core, lb.block, BlockState::Full);
                self.set_data_block(lbn, Some(lb.block));
                MergeKind::Switch
            }
            Some(lb) => {
                let from = lb.next;
                match self.copy_pages(core, lbn, lb.block, from) {
                    Ok(copied) => {
                        self.logs.lock().remove(lb.block);
                        self.set_block_state(core, lb.block, BlockState::Full);
                        self.set_data_block(lbn, Some(lb.block));
                        self.counters(MergeKind::Partial)
                            .copied
                            .fetch_add(copied, Ordering::Relaxed);
                        MergeKind::Partial
                    }
                    Err(CopyFailed) => {
                        // The log block cannot take the copies: a full merge, and it retires.
                        drop(_gc);
                        return self.merge_lbn(core, lbn, true);
                    }
                }
            }
            None => {
                self.full_copy(core, lbn);
                if let Some(lb) = &log {
                    self.logs.lock().remove(lb.block);
                    self.release_block(core, lb.block, Some(MergeKind::Full), retire_log);
                }
                MergeKind::Full
            }
        };
        if let Some(d) = old_data.filter(|d| self.data_block(lbn) != Some(*d)) {
            self.release_block(core, d, Some(kind), false);
        }
        let c = self.counters(kind);
        c.count.fetch_add(1, Ordering::Relaxed);
        c.latency.record(core.since(t0));
        kind
    }

    /// Whether every slot of log block `lb` so far holds its own page of `lbn` and is still
    /// that page's current version.
    fn current_prefix(&self, lb: &super::logs::LogBlock, lbn: u32) -> bool {
        lb.sequential
            && lb.owner == Some(lbn)
            && lb.lpns.iter().enumerate().all(|(s, &lpn)| {
                lpn == lbn * self.spb + s as u32
                    && self.map.get(Lpn(lpn)) == Some(self.slot_psa(lb.block, s as u32))
            })
    }

    fn slot_psa(&self, b: BlockIdx, slot: u32) -> Psa {
        Psa(b.0 * self.spb + slot)
    }

    /// Copies every current page of `lbn` into a fresh block, which becomes its data block
    /// (none if nothing of it is current). A destination whose program fails is retired and
    /// another one taken.
    fn full_copy(&self, core: &Core, lbn: u32) {
        loop {
            if self.last_current_page(lbn).is_none() {
                self.set_data_block(lbn, None);
                return;
            }
            let Some(dst) = self.alloc_block_near(core, self.merge_bank(lbn), true) else {
                core.set_read_only(format!("no free block for a merge of logical block {lbn}"));
                return;
            };
            if self.copy_into(core, lbn, dst, Some(MergeKind::Full))
                || core.read_only_reason().is_some()
            {
                return;
            }
        }
    }

    /// Copies every current page of `lbn` into `dst`, which becomes its data block. False if
    /// a program failed: `dst` is retired (nothing in it was published). `kind`: the merge
    /// whose counters it adds to (`None`: a wear-levelling move).
    fn copy_into(&self, core: &Core, lbn: u32, dst: BlockIdx, kind: Option<MergeKind>) -> bool {
        match self.copy_pages(core, lbn, dst, 0) {
            Ok(copied) => {
                self.set_block_state(core, dst, BlockState::Full);
                self.set_data_block(lbn, Some(dst));
                if let Some(k) = kind {
                    self.counters(k).copied.fetch_add(copied, Ordering::Relaxed);
                }
                true
            }
            Err(CopyFailed) => {
                self.release_block(core, dst, kind, true);
                false
            }
        }
    }

    /// Where a full merge of `lbn` should write its new data block: away from the blocks its
    /// pages are read from, under `spread` (`banks.rs`).
    fn merge_bank(&self, lbn: u32) -> u32 {
        let data = self.data_block(lbn).map(|d| self.bank_of(d));
        let mut sources: Vec<u32> = data.into_iter().collect();
        let first = lbn * self.spb;
        for l in first..(first + self.spb).min(self.lpns) {
            if let Some(psa) = self.map.get(Lpn(l)) {
                let b = self.bank_of(self.layout.block_of(psa));
                if !sources.contains(&b) {
                    sources.push(b);
                }
            }
        }
        self.plan.merge_bank(data, &sources, self.plan.home(lbn))
    }

    /// The last page (of a block) that holds a current page of `lbn`.
    fn last_current_page(&self, lbn: u32) -> Option<u32> {
        let first = lbn * self.spb;
        let end = (first + self.spb).min(self.lpns);
        (first..end)
            .rev()
            .find(|l| self.map.get(Lpn(*l)).is_some())
            .map(|l| (l - first) / self.layout.slots_per_page)
    }

    /// Copies the current pages of `lbn` that belong on pages `from..` of block `dst` (slot
    /// `i` for page `i`; padding where a page has no current version) up to the last such
    /// page, then switches the map to the copies. Returns the pages copied.
    ///
    /// Reads run up to [`READ_AHEAD`] destination pages ahead of the programs, and programs are
    /// not waited for one by one: each NAND operation waits only for what it really depends on
    /// (a program for its page's reads), so reads from the data and log blocks and programs to
    /// the destination overlap whenever they are on different banks and controllers (the
    /// parallelism `spread` placement is for: thesis Fig. 11, 12). The data effect of a read is
    /// at submission, so the data is checked at once; the program still starts only after the
    /// read's modelled completion.
    fn copy_pages(
        &self,
        core: &Core,
        lbn: u32,
        dst: BlockIdx,
        from: u32,
    ) -> Result<u64, CopyFailed> {
        let layout = self.layout;
        let sps = layout.slots_per_page;
        let Some(last) = self.last_current_page(lbn) else {
            return Ok(0);
        };
        let dst_addr = layout.block_addr(dst);
        let mut oob_buf = vec![0u8; layout.oob_size as usize];
        let mut moves: Vec<(Lpn, Psa, Psa)> = Vec::new();
        let mut programs: Vec<Completion> = Vec::new();
        let mut staged: VecDeque<StagedPage> = VecDeque::with_capacity(READ_AHEAD);
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let mut next = from;
        loop {
            // Read ahead.
            while next <= last && staged.len() < READ_AHEAD {
                let mut data = spare
                    .pop()
                    .unwrap_or_else(|| vec![0u8; layout.page_size as usize]);
                let mut metas = Vec::with_capacity(sps as usize);
                let mut reads = Vec::new();
                for i in 0..sps {
                    let off = next * sps + i;
                    let lpn = Lpn(lbn * self.spb + off);
                    let buf =
                        &mut data[(i as usize) * LOGICAL_PAGE..(i as usize + 1) * LOGICAL_PAGE];
                    let src = (lpn.0 < self.lpns).then(|| self.map.get(lpn)).flatten();
                    match src {
                        Some(src) => {
                            let (meta, read) =
                                block_ops::read_for_copy(core, layout, lpn, src, buf);
                            metas.push(meta);
                            reads.extend(read);
                            moves.push((lpn, src, self.slot_psa(dst, off)));
                        }
                        None => {
                            buf.fill(0);
                            metas.push(SlotMeta::PAD);
                        }
                    }
                }
                staged.push_back(StagedPage {
                    page: next,
                    data,
                    metas,
                    reads,
                });
                next += 1;
            }
            let Some(st) = staged.pop_front() else {
                break;
            };
            for r in st.reads {
                r.wait();
            }
            oob::encode_data(&mut oob_buf, &st.metas);
            let addr = PageAddr {
                block: dst_addr,
                page: st.page,
            };
            let result = block_ops::program_copy(core, addr, &st.data, &oob_buf, &mut programs);
            spare.push(st.data);
            result?;
        }
        Ok(block_ops::publish_copies(core, &self.map, programs, moves))
    }

    /// Erases a block that holds nothing current any more (or marks it bad with `bad`) and
    /// returns it to its bank's free list, counting the erase for merge `kind`
    /// (`block_ops::release_emptied`).
    pub(super) fn release_block(
        &self,
        core: &Core,
        b: BlockIdx,
        kind: Option<MergeKind>,
        bad: bool,
    ) {
        let released = block_ops::release_emptied(core, self.layout, &self.map, b, bad, false);
        if let Some(k) = kind.filter(|_| released == block_ops::Released::Erased) {
            self.counters(k).erases.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A free block, from bank `prefer` if it has one, else from the bank with the most.
    pub(super) fn alloc_block_near(
        &self,
        core: &Core,
        prefer: u32,
        for_merge: bool,
    ) -> Option<BlockIdx> {
        block_ops::alloc_near(core, self.layout, prefer, for_merge)
    }

    /// Static wear levelling (from the maintenance tick): when the erase-count spread of the
    /// device passes `wear_level_spread`, the logical block whose data block is the least worn
    /// (cold data keeps a young block out of circulation) is copied to the most-worn free block
    /// (cold data wears nothing), and its young block erased and freed for hot data. One move
    /// per call, and only into a free block worn at least `spread / 2` more than the young one
    /// and above the writers' floor: a move never takes the merge reserve and never makes the
    /// device read-only. A logical block with a log block of its own, or busy, waits for a
    /// later tick (its merge moves it anyway).
    pub(super) fn level_wear(&self, core: &Core) {
        let spread = core.cfg.wear_level_spread;
        if spread == 0 {
            return;
        }
        let layout = self.layout;
        // Cheap test first (every tick): the spread between the most-worn usable block and the
        // least-worn full one (data blocks are full blocks) bounds the one that matters.
        let (mut max, mut min_full) = (0, u32::MAX);
        for b in 0..layout.banks {
            let a = core.bank(b).alloc.lock();
            for (s, &e) in a.state.iter().zip(&a.erase_count) {
                match s {
                    BlockState::Bad | BlockState::Reserved => {}
                    BlockState::Full => {
                        max = max.max(e);
                        min_full = min_full.min(e);
                    }
                    _ => max = max.max(e),
                }
            }
        }
        if min_full == u32::MAX || max - min_full <= spread {
            return;
        }
        let wear: Vec<Vec<u32>> = (0..layout.banks)
            .map(|b| core.bank(b).alloc.lock().erase_count.clone())
            .collect();
        let erases = |d: BlockIdx| {
            let addr = layout.block_addr(d);
            wear[addr.bank.0 as usize][addr.block as usize]
        };
        let Some((lbn, young)) = (0..self.lbns)
            .filter_map(|l| self.data_block(l).map(|d| (l, erases(d))))
            .min_by_key(|&(_, e)| e)
        else {
            return;
        };
        if max - young <= spread
            || self.logs.lock().owned(lbn).is_some()
            || !self.locks.try_lock(lbn)
        {
            return;
        }
        // Under the lock: nothing of `lbn` is in flight, and no merge runs on it, and no log
        // block can become its (a writer takes the lock to place a page). The logs' guard must
        // go before `gc_gate`: in the `if let` below it would live to the block's end, and
        // the invariant check (which holds `gc_gate` exclusive and then takes `logs`) hung
        // against this wear-levelling move in CI.
        let has_log = self.logs.lock().owned(lbn).is_some();
        if let (false, Some(old)) = (has_log, self.data_block(lbn)) {
            let _gc = core.gc_gate.read();
            let worn = young.saturating_add(spread / 2);
            let dst = (0..layout.banks).find_map(|b| {
                core.alloc_most_worn(b, worn).map(|block| {
                    layout.block_idx(BlockAddr {
                        bank: nand_model::BankId(b),
                        block,
                    })
                })
            });
            if let Some(dst) = dst {
                if self.copy_into(core, lbn, dst, None) {
                    self.release_block(core, old, None, false);
                    core.counters
                        .wear_level_moves
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.locks.unlock(lbn);
    }

    /// BAST: merges the least recently used log block whose logical block is not locked.
    /// `held` is the caller's logical block. False if every candidate is busy.
    pub(super) fn reclaim_bast(&self, core: &Core, held: u32) -> bool {
        let mut owners: Vec<(u64, u32)> = {
            let logs = self.logs.lock();
            logs.blocks
                .values()
                .filter_map(|lb| lb.owner.map(|o| (lb.last_use, o)))
                .filter(|(_, o)| *o != held)
                .collect()
        };
        owners.sort_unstable();
        for (_, owner) in owners {
            if self.locks.try_lock(owner) {
                // It may have been merged between the snapshot and the lock: merge only a
                // block that still has its log.
                if self.logs.lock().owned(owner).is_some() {
                    self.merge_lbn(core, owner, false);
                }
                self.locks.unlock(owner);
                return true;
            }
        }
        false
    }

    /// FAST: frees a log-pool entry. The oldest full random-write log is merged (a full merge
    /// of every logical block with a current page in it, then it is erased); without one, a
    /// writer's open random log is closed so that the next call can take it; without that,
    /// the sequential log is merged. `held` is the caller's logical block. False if what
    /// must be locked is busy.
    pub(super) fn reclaim_fast(&self, core: &Core, held: u32) -> bool {
        let mut logs = self.logs.lock();
        if let Some(&victim) = logs.rw_full.front() {
            let Some(lb) = logs.blocks.get(&victim).cloned() else {
                logs.rw_full.pop_front();
                return true;
            };
            drop(logs);
            return self.reclaim_random_log(core, &lb, held);
        }
        // No full random log: close the open one with the most pages.
        let open = logs
            .blocks
            .values()
            .filter(|lb| lb.owner.is_none() && lb.writer.is_some() && lb.next > 0)
            .max_by_key(|lb| lb.next)
            .map(|lb| lb.block);
        if let Some(b) = open {
            if let Some(lb) = logs.blocks.get_mut(&b) {
                lb.writer = None;
            }
            logs.rw_full.push_back(b);
            return true;
        }
        let sw_owner = logs
            .sw
            .and_then(|b| logs.blocks.get(&b))
            .and_then(|lb| lb.owner);
        drop(logs);
        match sw_owner {
            Some(o) if o == held => {
                self.merge_lbn(core, o, false);
                true
            }
            Some(o) if self.locks.try_lock(o) => {
                if self.logs.lock().owned(o).is_some() {
                    self.merge_lbn(core, o, false);
                }
                self.locks.unlock(o);
                true
            }
            _ => false,
        }
    }

    /// FAST: merges every logical block with a current page in random log `lb` (a copy taken
    /// under the pool lock, then released), then erases the log. False if a logical block
    /// with a slot in it is locked. Another writer may have reclaimed the same log between
    /// the copy and the locks — its block may even be a new log by now: only the log still
    /// in the victim queue as the same use of its block is acted on (else `true`: the pool
    /// changed).
    fn reclaim_random_log(&self, core: &Core, lb: &super::logs::LogBlock, held: u32) -> bool {
        let victim = lb.block;
        // Every logical block with a slot here, current or not: a slot placed by a program
        // still in flight is not current yet, and its writer holds the lock.
        let mut lbns: Vec<u32> = lb
            .lpns
            .iter()
            .filter(|l| **l != u32::MAX)
            .map(|l| l / self.spb)
            .collect();
        lbns.sort_unstable();
        lbns.dedup();
        let Some(_held) = Held::try_all(&self.locks, &lbns, &[held]) else {
            return false;
        };
        let queued = |logs: &super::logs::Logs| logs.still(lb) && logs.rw_full.contains(&victim);
        if !queued(&self.logs.lock()) {
            return true;
        }
        for lbn in lbns {
            let current = lb.lpns.iter().enumerate().any(|(s, &lpn)| {
                lpn != u32::MAX
                    && lpn / self.spb == lbn
                    && self.map.get(Lpn(lpn)) == Some(self.slot_psa(victim, s as u32))
            });
            if current {
                self.merge_lbn(core, lbn, false);
            }
        }
        let removed = {
            let mut logs = self.logs.lock();
            if queued(&logs) {
                logs.remove(victim)
            } else {
                None
            }
        };
        if let Some(gone) = removed {
            self.release_block(core, victim, Some(MergeKind::Full), gone.retiring);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use futures::executor::block_on;
    use nand_model::TimingMode;

    use super::HybridScheme;
    use crate::{Ftl, FtlConfig, SchemeKind};

    /// A FAST device with one queue and a pool of four log blocks, and its scheme.
    fn fast_device(dir: &std::path::Path) -> (Arc<Ftl>, Arc<HybridScheme>) {
        let cfg = FtlConfig {
            scheme: SchemeKind::Fast,
            log_blocks: 4,
            queues: 1,
            checkpoint_interval_bytes: 0,
            ..FtlConfig::default()
        };
        let nand = crate::test_support::small_nand(1, 2, 64);
        let f = Arc::new(
            Ftl::create(&dir.join("f.img"), &nand, TimingMode::Off, cfg, None).expect("create"),
        );
        let any: Arc<dyn Any + Send + Sync> = f.core.scheme.clone();
        let scheme = any.downcast::<HybridScheme>().expect("a hybrid scheme");
        (f, scheme)
    }

    /// Two writers can pick the same victim from the queue; the second must find it gone once
    /// it holds the locks, not erase it again (then its block was free twice, and two owners
    /// programmed it: "already programmed", the device read-only; seen in the kill -9 test).
    #[test]
    fn a_random_log_reclaimed_by_another_writer_is_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (f, scheme) = fast_device(dir.path());
        // Offset 3 of eight logical blocks: random-log pages, which fill one log (8 pages).
        let lpns: Vec<u64> = (0..8).map(|lbn| lbn * 8 + 3).collect();
        for (i, &l) in lpns.iter().enumerate() {
            block_on(f.write(0, l * 4096, &[i as u8 + 1; 4096], false)).expect("write");
        }
        block_on(f.flush()).expect("flush");
        let core = &f.core;
        let stale = {
            let logs = scheme.logs.lock();
            let victim = *logs
                .rw_full
                .front()
                .expect("the full random log is a victim");
            logs.blocks[&victim].clone()
        };
        // The first writer reclaims it...
        assert!(scheme.reclaim_fast(core, u32::MAX));
        let erases = core.counters.gc_erases.load(Ordering::Relaxed);
        let state = scheme.block_state(core, stale.block);
        assert!(!scheme.logs.lock().blocks.contains_key(&stale.block));
        // ... then the second, with the copy it took before.
        assert!(scheme.reclaim_random_log(core, &stale, u32::MAX));
        assert_eq!(core.counters.gc_erases.load(Ordering::Relaxed), erases);
        assert_eq!(scheme.block_state(core, stale.block), state);
        assert_eq!(f.check_invariants(), Ok(()));

        // The same block opened again as a log is another log: still left alone.
        let b = stale.block;
        let again = {
            let mut logs = scheme.logs.lock();
            let mut lb = super::super::logs::LogBlock::new(b, None, scheme.spb, 0);
            lb.lpns = stale.lpns.clone();
            logs.insert(lb);
            logs.rw_full.push_back(b);
            logs.blocks[&b].serial
        };
        assert_ne!(again, stale.serial);
        assert!(scheme.reclaim_random_log(core, &stale, u32::MAX));
        {
            let logs = scheme.logs.lock();
            assert_eq!(
                logs.blocks.get(&b).map(|l| l.serial),
                Some(again),
                "still a log"
            );
        }
        assert_eq!(core.counters.gc_erases.load(Ordering::Relaxed), erases);
        {
            let mut logs = scheme.logs.lock();
            logs.remove(b);
        }
        let mut buf = vec![0u8; 4096];
        for (i, &l) in lpns.iter().enumerate() {
            block_on(f.read(l * 4096, &mut buf)).expect("read");
            assert!(buf.iter().all(|&x| x == i as u8 + 1), "lpn {l}");
        }
        assert_eq!(f.check_invariants(), Ok(()));
    }

    /// A writer waiting for a logical block's lock stops waiting once the device is
    /// read-only: the holder (a writer whose program failed for a reason other than a medium
    /// fault) never releases it, and a flush and `close` waited for ever.
    #[test]
    fn a_writer_waiting_for_a_lock_gives_up_when_the_device_turns_read_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (f, scheme) = fast_device(dir.path());
        // A holder that never lets go of logical block 0.
        assert!(scheme.locks.try_lock(0));
        // A page of it reaches the writer (inline on the caller's thread here), which waits
        // for the lock; the device turns read-only meanwhile.
        let (tx, rx) = std::sync::mpsc::channel();
        let f2 = Arc::clone(&f);
        std::thread::spawn(move || {
            let written = block_on(f2.write(0, 0, &[7; 4096], false));
            let flushed = block_on(f2.flush());
            let closed = f2.close();
            let _ = tx.send((written, flushed.is_err(), closed.is_ok()));
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        f.core.set_read_only("test: a program broke a rule".into());
        let (_written, flush_failed, closed) = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("write, flush and close return once the device is read-only");
        assert!(flush_failed, "a flush of a read-only device fails");
        assert!(closed, "close of a read-only device succeeds");
    }
}
