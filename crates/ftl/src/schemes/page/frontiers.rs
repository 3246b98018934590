//! Host write frontiers: the open blocks host pages are programmed into, who holds them, and
//! when a filled one becomes GC's.
//!
//! A frontier on a bank is a [`PlaneSet`] (one open block, or one per plane). Two ways to hold
//! them (`[ftl] frontiers`):
//! - **per bank** (the default; LFTL's "current-writing block per bank", paper 001): a bank's
//!   frontiers are parked in [`ParkedFrontiers`] and lent to one writer at a time, for one
//!   program: the writer takes the set, takes its next pages, issues the program and parks the
//!   set again ([`crate::schemes::Placer::issued`]). Programs into a block are therefore issued
//!   in page order whatever the writers do, and the device holds one partly written block per
//!   bank (and temperature) however many queues there are.
//! - **per queue** (paper 000: "each worker owns its own working block"): every writer keeps
//!   its own set on every bank. Each one is on average half written, so with `q` queues about
//!   `q / 2` blocks per bank of spare sit idle: on the default 1 GiB device at 7 % OP, uniform
//!   random 4 KiB writes measured 1.10x the greedy WAF limit with 2 queues and 1.18x with 8
//!   (`experiments/README.md`, "Shared write frontiers").
//!
//! GC may take a block as a victim only once every page programmed into it is committed (the
//! map points at its valid slots): before, its slots look invalid and it could be erased under
//! a page still in flight. With one owner per block, committing its last page meant that (the
//! owner commits in FIFO order); with shared frontiers the pages of one block commit from
//! several queues in any order, so [`OpenPages`] counts the pages handed out and not yet
//! committed (or given up after a failed program), and the block is marked full when the
//! count falls to zero after its last page was handed out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use nand_model::{BankId, BlockAddr, PageAddr};
use parking_lot::Mutex;

use super::PageScheme;
use crate::blocks::BlockState;
use crate::core::{Core, GC_RESERVE};
use crate::schemes::Target;

/// An open block and its next free page.
#[derive(Clone, Copy, Debug)]
pub struct Frontier {
    pub block: u32,
    pub next: u32,
}

/// A write frontier on one bank: its open blocks, at most one per plane, opened together
/// (one block with a single plane, or for a page carrying trim records; fewer than the
/// planes only when the bank had fewer free blocks).
///
/// Invariant: every member's next page is `m` or `m + 1`; the members still at `m` are the
/// current *row*. A multi-plane program takes a prefix of the row (the pages it writes share
/// the page index, as the chip requires), so the set realigns once the row is done.
#[derive(Clone, Debug, Default)]
pub struct PlaneSet {
    members: Vec<Frontier>,
}

impl PlaneSet {
    pub(super) fn new(blocks: Vec<u32>) -> PlaneSet {
        PlaneSet {
            members: blocks
                .into_iter()
                .map(|block| Frontier { block, next: 0 })
                .collect(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Takes the next pages of up to `n` members of the current row (at least one if the set
    /// is not empty): one page as [`Target::Program`] (no allocation: the common case),
    /// several as [`Target::Planes`]. Members whose block is then full leave the set.
    pub(super) fn take(&mut self, bank: u32, n: usize, pages_per_block: u32) -> Option<Target> {
        let row = self.members.iter().map(|f| f.next).min()?;
        let addr = |f: &Frontier| PageAddr {
            block: BlockAddr {
                bank: BankId(bank),
                block: f.block,
            },
            page: row,
        };
        let row_members = self.members.iter().filter(|f| f.next == row).count();
        let target = if n <= 1 || row_members == 1 {
            let f = self.members.iter_mut().find(|f| f.next == row)?;
            let a = addr(f);
            f.next += 1;
            Target::Program(a)
        } else {
            let mut out = Vec::with_capacity(n.min(row_members));
            for f in &mut self.members {
                if out.len() == n {
                    break;
                }
                if f.next == row {
                    out.push(addr(f));
                    f.next += 1;
                }
            }
            Target::Planes(out)
        };
        self.members.retain(|f| f.next < pages_per_block);
        Some(target)
    }

    /// Forgets `block` (a program failed there).
    pub(super) fn remove(&mut self, block: u32) {
        self.members.retain(|f| f.block != block);
    }
}

/// Each bank's parked host frontiers, per temperature, while no writer holds them (frontiers
/// `per-bank`).
pub(super) struct ParkedFrontiers {
    /// Index `bank * 2 + hot`. A set is here or lent to exactly one writer, never both.
    /// Held only to take or park a set (no lock is taken under it).
    sets: Box<[Mutex<Vec<PlaneSet>>]>,
    /// The same index: how many sets are parked (changed under the slot's lock), so bank choice
    /// asks without locking: it asks of every bank at its floor, for every page.
    counts: Box<[AtomicU32]>,
    /// The same index: how many sets the bank has open, parked or lent.
    open: Box<[AtomicU32]>,
}

impl ParkedFrontiers {
    pub(super) fn new(banks: u32) -> ParkedFrontiers {
        let n = banks as usize * 2;
        ParkedFrontiers {
            sets: (0..n).map(|_| Mutex::default()).collect(),
            counts: (0..n).map(|_| AtomicU32::new(0)).collect(),
            open: (0..n).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn index(bank: u32, hot: bool) -> usize {
        bank as usize * 2 + usize::from(hot)
    }

    /// Lends bank `bank`'s parked set of this temperature (`None`: none is parked; every one
    /// is lent, or the bank has none open).
    pub(super) fn take(&self, bank: u32, hot: bool) -> Option<PlaneSet> {
        let i = Self::index(bank, hot);
        if self.counts[i].load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut sets = self.sets[i].lock();
        let set = sets.pop();
        self.counts[i].store(sets.len() as u32, Ordering::Release);
        set
    }

    /// A writer opened a new set on bank `bank` (fresh blocks); it parks it after its program.
    pub(super) fn opened(&self, bank: u32, hot: bool) {
        self.open[Self::index(bank, hot)].fetch_add(1, Ordering::AcqRel);
    }

    /// Parks a set resumed at open (`PageScheme::resume_frontiers`): open, and not lent.
    pub(super) fn resume(&self, bank: u32, hot: bool, set: PlaneSet) {
        self.opened(bank, hot);
        self.park(bank, hot, set);
    }

    /// Parks a lent set again (an empty one, whose blocks are all filled, is closed).
    pub(super) fn park(&self, bank: u32, hot: bool, set: PlaneSet) {
        let i = Self::index(bank, hot);
        if set.is_empty() {
            self.open[i].fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let mut sets = self.sets[i].lock();
        sets.push(set);
        self.counts[i].store(sets.len() as u32, Ordering::Release);
    }

    /// Whether bank `bank` has a parked set of this temperature with room (a set lent to
    /// another writer right now does not count: a writer does not wait for it).
    pub(super) fn has(&self, bank: u32, hot: bool) -> bool {
        self.counts[Self::index(bank, hot)].load(Ordering::Acquire) > 0
    }

    /// Whether every set bank `bank` has open of this temperature is lent right now (and it
    /// has one): a writer that placed a page there would open another block, which then sits
    /// half written beside the first, so bank choice prefers other banks (the lend lasts one
    /// program's issue).
    pub(super) fn all_lent(&self, bank: u32, hot: bool) -> bool {
        let i = Self::index(bank, hot);
        self.open[i].load(Ordering::Acquire) > self.counts[i].load(Ordering::Acquire)
    }
}

impl PageScheme {
    /// A clean open: the blocks the close left partly programmed become parked host frontiers
    /// again (frontiers `per-bank`; a writer's own sets, `per-queue`, start empty), so writers
    /// go on after their last page. Closing them instead stranded their erased pages and left
    /// a full device's banks with no block for writers: the open then cleaned every bank
    /// first (`restore_headroom`: 973 GC steps, 846 ms, on the default 1 GiB device). With
    /// several planes full sets are rebuilt first, one block per plane at pages at most one
    /// apart (`take_plane_set`), as a multi-plane program needs; a block left over (a close
    /// seldom leaves a full set: its partly written blocks are mostly single GC frontiers)
    /// is a set of its own, which programs a page per array time until the block is full
    /// (as a trim-carrying page's set does), against 1.4-2 k GC steps at every open of a
    /// full 2-plane 256 MiB image when they stayed closed. Nothing is resumed on a read-only
    /// device. With in-path GC too: a bank that got a set is not cleaned at open either, and
    /// its first writes pay the paced share, as any write to a bank under its floor does (the
    /// open cleaned every bank to its floor before: 1.7 k steps on a full 256 MiB device, and
    /// twice that when it also resumed, as its cheapest victims were then full blocks).
    /// Only a block whose last page reads back whole (`Core::last_page_intact`). Pages
    /// resume as cold with hot/cold separation (a GC frontier's block holds cold data).
    /// Returns, per bank, whether a set was resumed there.
    pub(super) fn resume_frontiers(&self, core: &Core, partly: &[BlockAddr]) -> Vec<bool> {
        let mut resumed = vec![false; self.layout.banks as usize];
        let Some(parked) = &self.parked else {
            return resumed;
        };
        if core.read_only_reason().is_some() {
            return resumed;
        }
        let ppb = self.layout.pages_per_block;
        let planes = core.nand.config().planes.max(1);
        // Each bank's candidates, as (next page to program, block).
        let mut banks: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
        for &addr in partly {
            match core.nand.block_state(addr) {
                Ok(st)
                    if !st.bad
                        && st.programmed_pages > 0
                        && st.programmed_pages < ppb
                        && core.last_page_intact(addr) =>
                {
                    banks
                        .entry(addr.bank.0)
                        .or_default()
                        .push((st.programmed_pages, addr.block))
                }
                _ => {}
            }
        }
        if let Some(clock) = core.nand.sim_clock() {
            // Those reads, as the open's scan.
            clock.advance_to(core.nand.idle_at_ns());
        }
        for (bank, mut pool) in banks {
            pool.sort_unstable();
            // GC's room first: a bank with fewer free blocks than the GC reserve (it went into
            // the GC frontier the close left partly programmed) gets the block with the most
            // room back as its GC frontier (see `adopt_gc_frontier`).
            if core.bank(bank).free.load(Ordering::Acquire) < GC_RESERVE {
                if let Some(&(next, block)) = pool.first() {
                    if self.adopt_gc_frontier(bank, block, next) {
                        pool.remove(0);
                        core.bank(bank).alloc.lock().state[block as usize] = BlockState::Open;
                    }
                }
            }
            // Full plane sets first; then each block left as a set of its own.
            let mut sets: Vec<Vec<Frontier>> =
                std::iter::from_fn(|| take_plane_set(&mut pool, planes)).collect();
            sets.extend(
                pool.iter()
                    .map(|&(next, block)| vec![Frontier { block, next }]),
            );
            for set in sets {
                {
                    let mut a = core.bank(bank).alloc.lock();
                    for f in &set {
                        a.state[f.block as usize] = BlockState::Open;
                    }
                }
                parked.resume(bank, false, PlaneSet { members: set });
                resumed[bank as usize] = true;
            }
            self.costs.touch(bank);
        }
        resumed
    }
}

/// Takes from `pool` (a bank's partly programmed blocks as (next page, block), sorted) a set
/// of one block per plane whose next pages are `m` or `m + 1` for the lowest `m` that has
/// one, as a [`PlaneSet`]'s invariant allows (a close leaves a set's row partly taken, so its
/// blocks often end one page apart); `None` when no plane set can be made.
fn take_plane_set(pool: &mut Vec<(u32, u32)>, planes: u32) -> Option<Vec<Frontier>> {
    let starts: Vec<u32> = pool.iter().map(|&(next, _)| next).collect();
    for m in starts {
        let mut pick: Vec<Option<usize>> = vec![None; planes as usize];
        for (i, &(next, block)) in pool.iter().enumerate() {
            let slot = &mut pick[(block % planes) as usize];
            if slot.is_none() && (next == m || next == m + 1) {
                *slot = Some(i);
            }
        }
        let chosen: Vec<usize> = pick.iter().flatten().copied().collect();
        if chosen.len() == planes as usize && chosen.iter().any(|&i| pool[i].0 == m) {
            let set = chosen
                .iter()
                .map(|&i| Frontier {
                    block: pool[i].1,
                    next: pool[i].0,
                })
                .collect();
            let mut i = 0;
            pool.retain(|_| {
                i += 1;
                !chosen.contains(&(i - 1))
            });
            return Some(set);
        }
    }
    None
}

/// Per block: the pages handed out to writers and not yet committed or given up, and whether
/// its last page was handed out ([`EXHAUSTED`]). See the module doc.
pub(super) struct OpenPages {
    per_block: Box<[AtomicU32]>,
    blocks_per_bank: u32,
    pages_per_block: u32,
}

/// Bit of an [`OpenPages`] entry: the block's last page was handed out.
const EXHAUSTED: u32 = 1 << 31;

impl OpenPages {
    pub(super) fn new(banks: u32, blocks_per_bank: u32, pages_per_block: u32) -> OpenPages {
        OpenPages {
            per_block: (0..banks as usize * blocks_per_bank as usize)
                .map(|_| AtomicU32::new(0))
                .collect(),
            blocks_per_bank,
            pages_per_block,
        }
    }

    fn entry(&self, block: BlockAddr) -> &AtomicU32 {
        &self.per_block
            [block.bank.0 as usize * self.blocks_per_bank as usize + block.block as usize]
    }

    /// Page `addr` was handed to a writer to program.
    pub(super) fn handed_out(&self, addr: PageAddr) {
        let last = addr.page + 1 == self.pages_per_block;
        self.entry(addr.block)
            .fetch_add(1 | if last { EXHAUSTED } else { 0 }, Ordering::AcqRel);
    }

    /// Pages of `block` handed out and not yet committed or given up.
    pub(super) fn outstanding(&self, block: BlockAddr) -> u32 {
        self.entry(block).load(Ordering::Acquire) & !EXHAUSTED
    }

    /// Page `addr` was committed, or given up after a failed program. True when it was the
    /// block's last outstanding page and its last page is out: the block is full, GC's to take.
    /// (The entry is then 0 again, ready for the block's next life after an erase.)
    pub(super) fn resolved(&self, addr: PageAddr) -> bool {
        let e = self.entry(addr.block);
        let before = e.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(
            before & !EXHAUSTED > 0,
            "{addr:?} resolved more often than handed out"
        );
        if before == EXHAUSTED | 1 {
            e.store(0, Ordering::Release);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::sync::Arc;

    use nand_model::{PageAddr, TimingMode};

    use super::super::PageScheme;
    use crate::blocks::BlockState;
    use crate::buffer::SealedPage;
    use crate::config::{Frontiers, GcPolicy};
    use crate::oob::SlotMeta;
    use crate::schemes::{Placer, Scheme, Target};
    use crate::{Ftl, FtlConfig};

    /// A one-bank device (so every page goes to bank 0), two queues, and its page scheme.
    fn device(dir: &std::path::Path, frontiers: Frontiers) -> (Ftl, Arc<PageScheme>) {
        device_with(dir, frontiers, 1)
    }

    fn device_with(
        dir: &std::path::Path,
        frontiers: Frontiers,
        banks: u32,
    ) -> (Ftl, Arc<PageScheme>) {
        let cfg = FtlConfig {
            queues: 2,
            gc_policy: GcPolicy::InPath,
            checkpoint_interval_bytes: 0,
            frontiers,
            ..FtlConfig::default()
        };
        let nand = crate::test_support::small_nand(1, banks, 32);
        let f = Ftl::create(&dir.join("f.img"), &nand, TimingMode::Off, cfg, None).expect("create");
        let any: Arc<dyn Any + Send + Sync> = f.core.scheme.clone();
        let scheme = any.downcast::<PageScheme>().expect("the page scheme");
        (f, scheme)
    }

    /// A clean open gives a bank with no free block its GC frontier back (the partly
    /// programmed block with the most room), not a writer's: GC has room there again. Resumed
    /// for writers, it left GC none, and GC failed step after step until another bank freed
    /// a block to rescue to (an outside check, with hot/cold separation and timing real).
    #[test]
    fn a_bank_with_no_free_block_gets_its_gc_frontier_back() {
        use std::sync::atomic::Ordering;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.img");
        // Timing virtual: the background workers run at set points of simulated time, so
        // where the banks stand when the loop looks is where they stand at the close.
        let cfg = FtlConfig {
            queues: 1,
            gc_policy: GcPolicy::Adaptive,
            checkpoint_interval_bytes: 0,
            ..FtlConfig::default()
        };
        let nand = crate::test_support::small_nand(2, 2, 32);
        let f = Ftl::create(&path, &nand, TimingMode::Virtual, cfg.clone(), None).expect("create");
        let any: Arc<dyn Any + Send + Sync> = f.core.scheme.clone();
        let scheme = any.downcast::<PageScheme>().expect("the page scheme");
        let pages = f.capacity() / 4096;
        let data = vec![3u8; 4096];
        let write = |l: u64| {
            futures::executor::block_on(f.write(0, l * 4096, &data, false)).expect("write");
        };
        (0..pages).for_each(write);
        // Overwrites until the bank's last free block is GC's frontier, everything on flash.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let banks = f.core.layout.banks;
        let at_reserve = || {
            (0..banks).find(|&b| {
                f.core.bank(b).free.load(Ordering::Acquire) == 0 && scheme.gc_room(&f.core, b) > 0
            })
        };
        let mut n = 0;
        loop {
            assert!(n < 100 * pages, "no bank ever gave its last block to GC");
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            write(x % pages);
            n += 1;
            if at_reserve().is_some() {
                futures::executor::block_on(f.flush()).expect("flush");
                if at_reserve().is_some() {
                    break;
                }
            }
        }
        let bank = at_reserve().expect("a bank at its reserve");
        f.close().expect("close");
        drop((f, scheme));
        let f = Ftl::open(&path, TimingMode::Virtual, cfg).expect("open");
        let any: Arc<dyn Any + Send + Sync> = f.core.scheme.clone();
        let scheme = any.downcast::<PageScheme>().expect("the page scheme");
        let free = f.core.bank(bank).free.load(Ordering::Acquire);
        let room = scheme.gc_room(&f.core, bank);
        assert!(
            free >= crate::core::GC_RESERVE || room > 0,
            "after a clean open bank {bank} has {free} free blocks and {room} slots of GC room"
        );
        f.check_invariants().expect("invariants");
    }

    fn padding() -> SealedPage {
        SealedPage {
            slots: vec![(SlotMeta::PAD, None)],
            zombies: Vec::new(),
            sealed_ns: 0,
        }
    }

    /// Places one page with `placer` and reports its program issued.
    fn place(f: &Ftl, placer: &mut Box<dyn Placer>) -> PageAddr {
        let Target::Program(addr) = placer.target_group(&f.core, &[padding()]) else {
            panic!("one page, one plane: a single program");
        };
        placer.issued(&f.core, &[addr], true);
        addr
    }

    fn state(f: &Ftl, addr: PageAddr) -> BlockState {
        f.core.bank(addr.block.bank.0).alloc.lock().state[addr.block.block as usize]
    }

    /// Frontiers `per-bank`: two writers taking turns fill one block, page after page; the
    /// block becomes a GC candidate only once every page is committed, in whatever order the
    /// two queues commit them (its last page first here: with one owner per block, committing
    /// the last page was enough, and GC could then have erased pages still in flight).
    #[test]
    fn writers_share_a_banks_block_and_it_is_full_once_every_page_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (f, scheme) = device(dir.path(), Frontiers::PerBank);
        let ppb = f.core.layout.pages_per_block;
        let mut writers = [scheme.clone().placer(0), scheme.clone().placer(1)];
        let addrs: Vec<PageAddr> = (0..ppb as usize)
            .map(|i| place(&f, &mut writers[i % 2]))
            .collect();
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(
                (a.block, a.page),
                (addrs[0].block, i as u32),
                "one block, in page order"
            );
        }
        let page = padding();
        let mut order: Vec<usize> = (0..ppb as usize).rev().collect();
        // The last page first, then the others; page 3 last of all.
        order.retain(|&i| i != 3);
        order.push(3);
        for (n, &i) in order.iter().enumerate() {
            assert_eq!(
                state(&f, addrs[i]),
                BlockState::Open,
                "{n} of {ppb} committed"
            );
            scheme.commit(&f.core, &page, addrs[i]);
        }
        assert_eq!(state(&f, addrs[0]), BlockState::Full);
        // The next page opens a new block.
        assert_ne!(place(&f, &mut writers[0]).block, addrs[0].block);
    }

    /// A bank whose open block another writer holds right now is passed over while another
    /// bank has room: placing there would open a second block beside the first.
    #[test]
    fn a_writer_passes_over_a_bank_whose_block_is_lent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (f, scheme) = device_with(dir.path(), Frontiers::PerBank, 2);
        let mut a = scheme.clone().placer(0);
        let mut b = scheme.clone().placer(1);
        // Writer 1 opens bank 1 (its round-robin start); writer 0 then holds bank 0's block.
        let first = place(&f, &mut b);
        assert_eq!(first.block.bank.0, 1);
        let Target::Program(held) = a.target_group(&f.core, &[padding()]) else {
            panic!("a single program");
        };
        assert_eq!(held.block.bank.0, 0);
        // Writer 1 would go to bank 0 next in turn: bank 1's block instead.
        let second = place(&f, &mut b);
        assert_eq!((second.block, second.page), (first.block, 1));
        a.issued(&f.core, &[held], true);
        // Once parked, bank 0's block is everyone's again.
        let third = place(&f, &mut b);
        assert_eq!((third.block, third.page), (held.block, 1));
    }

    /// A page given up after a failed program counts as resolved: the rest of its block
    /// committed, the block is GC's.
    #[test]
    fn a_page_given_up_after_a_failed_program_does_not_hold_its_block_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (f, scheme) = device(dir.path(), Frontiers::PerBank);
        let ppb = f.core.layout.pages_per_block as usize;
        let mut w = scheme.clone().placer(0);
        let page = padding();
        for i in 0..ppb {
            let Target::Program(addr) = w.target_group(&f.core, &[padding()]) else {
                panic!("a single program");
            };
            if i == 2 {
                w.issued(&f.core, &[addr], false);
            } else {
                w.issued(&f.core, &[addr], true);
                scheme.commit(&f.core, &page, addr);
            }
            let want = if i + 1 == ppb {
                BlockState::Full
            } else {
                BlockState::Open
            };
            assert_eq!(state(&f, addr), want, "after page {i}");
        }
    }

    /// Resumed plane sets: one block per plane, their next pages at most one apart and the
    /// lowest first; blocks that cannot make a set are left.
    #[test]
    fn plane_sets_are_rebuilt_from_blocks_at_most_a_page_apart() {
        // (next page, block): planes are block % 2.
        let mut pool = vec![(3, 10), (4, 7), (5, 12), (5, 21), (6, 30)];
        pool.sort_unstable();
        let set = super::take_plane_set(&mut pool, 2).expect("blocks 10 and 7");
        let got: Vec<(u32, u32)> = set.iter().map(|f| (f.block, f.next)).collect();
        assert_eq!(got, vec![(10, 3), (7, 4)]);
        // 12 (plane 0) at 5 and 21 (plane 1) at 5.
        let set = super::take_plane_set(&mut pool, 2).expect("blocks 12 and 21");
        let got: Vec<(u32, u32)> = set.iter().map(|f| (f.block, f.next)).collect();
        assert_eq!(got, vec![(12, 5), (21, 5)]);
        // Block 30 alone: no set.
        assert!(super::take_plane_set(&mut pool, 2).is_none());
        assert_eq!(pool, vec![(6, 30)]);
        // Two apart: no set. One plane: every block its own.
        let mut pool = vec![(2, 4), (4, 5)];
        assert!(super::take_plane_set(&mut pool, 2).is_none());
        assert_eq!(
            super::take_plane_set(&mut pool, 1).map(|s| s.len()),
            Some(1)
        );
    }

    /// Frontiers `per-queue`: each writer owns its own block on the bank.
    #[test]
    fn per_queue_writers_each_own_a_block() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (f, scheme) = device(dir.path(), Frontiers::PerQueue);
        let mut writers = [scheme.clone().placer(0), scheme.clone().placer(1)];
        let a: Vec<PageAddr> = (0..4).map(|i| place(&f, &mut writers[i % 2])).collect();
        assert_eq!(a[0].block, a[2].block);
        assert_eq!(a[1].block, a[3].block);
        assert_ne!(a[0].block, a[1].block);
        assert_eq!((a[2].page, a[3].page), (1, 1));
    }
}
