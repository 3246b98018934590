//! The page scheme's placement: which bank a host page goes to, and into which write frontier
//! (an open block, or one per plane: a [`PlaneSet`], so a writer can program several sealed
//! pages in one multi-plane operation). A writer holds a bank's frontier while it places a page
//! there and issues the program: borrowed from the bank for that one program (frontiers
//! `per-bank`, the default) or its own (`per-queue`; see `frontiers.rs`), so no other thread
//! programs into the block meanwhile and sequential programming inside a block holds under any
//! scheduling. A page goes to the least busy bank that is not under exclusive GC (LFTL §3.2.2);
//! a page sent to a bank under its soft floor first pays its paced share of that bank's
//! cleaning (with the in-path policy, or with workers that let the bank fall to its reserve),
//! and when every bank is at its GC reserve the writer cleans in the foreground, a step at a
//! time (`gc.rs`).
//!
//! With hot/cold separation (`[ftl] separation = "hot-cold"`) a bank has two frontiers (per
//! writer with `per-queue`): a page the host rewrote recently (`recency.rs`) goes to the hot
//! one, any other to the cold one, so blocks fill with pages of like lifetimes.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nand_model::{BankId, PageAddr};

use super::frontiers::PlaneSet;
use super::PageScheme;
use crate::blocks::BlockState;
use crate::buffer::SealedPage;
use crate::config::GcPolicy;
use crate::core::{Core, GC_RESERVE};
use crate::schemes::{Placer, Target};

/// Whether a sealed page may share a multi-plane program with others: pages carrying trim
/// records go alone, so a group that fails and is programmed again never leaves a second,
/// uncommitted copy of a trim record on flash.
fn groupable(page: &SealedPage) -> bool {
    page.zombies.is_empty()
        && page
            .slots
            .iter()
            .all(|(m, _)| m.kind != crate::oob::SlotKind::TrimLog)
}

/// A queue's placement state: the frontiers it holds and its share of writes per bank.
pub struct PagePlacer {
    scheme: Arc<PageScheme>,
    /// The frontiers this writer holds, per bank: its own (`per-queue`), or with `per-bank`
    /// only the one borrowed for the program being placed (`lent`), empty otherwise.
    frontiers: Vec<PlaneSet>,
    /// Frontiers for hot pages (hot/cold separation only; else every set stays empty).
    hot: Vec<PlaneSet>,
    /// The banks in the order they are looked at, channel first (`Layout::channel_first_banks`),
    /// and where in it the next look starts.
    order: Vec<u32>,
    rr: u32,
    /// Pages this placer sent to each bank.
    placed: Vec<u64>,
    /// Each bank's usable blocks (neither bad nor reserved): the bank's share of writes.
    /// Re-read when the device's bad-block count moves (`seen_bad`), the only way it changes.
    weight: Vec<u64>,
    /// Every bank has the same weight: round-robin over idle banks gives equal shares, and
    /// the first idle bank found will do (no scan of every bank per page).
    uniform: bool,
    seen_bad: Option<u64>,
    /// The bank this writer is cleaning in the foreground, one step per look for room.
    cleaning: Option<u32>,
    /// Backstop GC steps this writer's pages owe (see `PageScheme::backstop_gc`).
    backstop_credit: f64,
    /// Frontiers `per-bank`: the bank and temperature of the set borrowed for the program being
    /// placed, parked again once it is issued (`Placer::issued`).
    lent: Option<(u32, bool)>,
}

impl PagePlacer {
    pub fn new(scheme: Arc<PageScheme>, banks: u32, q: usize) -> PagePlacer {
        let order = scheme.layout.channel_first_banks();
        PagePlacer {
            scheme,
            frontiers: vec![PlaneSet::default(); banks as usize],
            hot: vec![PlaneSet::default(); banks as usize],
            order,
            rr: q as u32 % banks.max(1),
            placed: vec![0; banks as usize],
            weight: vec![1; banks as usize],
            uniform: true,
            seen_bad: None,
            cleaning: None,
            backstop_credit: 0.0,
            lent: None,
        }
    }

    fn refresh_weights(&mut self, core: &Core) {
        for (b, w) in self.weight.iter_mut().enumerate() {
            let a = core.bank(b as u32).alloc.lock();
            let usable = a
                .state
                .iter()
                .filter(|s| !matches!(s, BlockState::Bad | BlockState::Reserved))
                .count();
            *w = (usable as u64).max(1);
        }
        self.uniform = self.weight.windows(2).all(|w| w[0] == w[1]);
    }

    /// The frontier on bank `b` for pages of this temperature.
    fn frontier(&mut self, b: u32, hot: bool) -> &mut PlaneSet {
        let sets = if hot {
            &mut self.hot
        } else {
            &mut self.frontiers
        };
        &mut sets[b as usize]
    }

    /// Whether `page` goes to a hot frontier: separation is on and most of its data slots
    /// were written within the recency window. Pages carrying trim records are cold.
    fn is_hot(&self, page: &SealedPage) -> bool {
        let Some(recency) = &self.scheme.recency else {
            return false;
        };
        let (mut data, mut hot) = (0usize, 0usize);
        for (meta, _) in &page.slots {
            if meta.kind != crate::oob::SlotKind::Data {
                return false;
            }
            data += 1;
            hot += usize::from(recency.is_hot(meta.lpn.0));
        }
        data > 0 && 2 * hot > data
    }

    /// Counts the host slots of the pages `target` programs, when it is in a hot frontier
    /// (`FtlStats::hot_pages`: 4 KiB host pages, whatever the NAND page size).
    fn count_hot(core: &Core, pages: &[SealedPage], (target, hot): (Target, bool)) -> Target {
        let n = match &target {
            Target::Program(_) => 1,
            Target::Planes(addrs) => addrs.len(),
            _ => 0,
        };
        if !hot || n == 0 {
            return target;
        }
        let slots = pages
            .iter()
            .take(n)
            .flat_map(|p| &p.slots)
            .filter(|(m, _)| m.kind == crate::oob::SlotKind::Data)
            .count();
        core.counters
            .hot_pages
            .fetch_add(slots as u64, Ordering::Relaxed);
        target
    }

    /// Whether bank `a` has had fewer pages than bank `b` for its capacity.
    fn behind(&self, a: u32, b: u32) -> bool {
        let (a, b) = (a as usize, b as usize);
        u128::from(self.placed[a]) * u128::from(self.weight[b])
            < u128::from(self.placed[b]) * u128::from(self.weight[a])
    }

    /// Picks a bank for the next page: idle first, then the one that frees up soonest; among
    /// equals, the one furthest behind its share of writes; banks under exclusive GC only if
    /// nothing else can take the page, and (frontiers `per-bank`) a bank whose open blocks
    /// another writer holds right now only if no other bank can.
    fn choose_bank(&mut self, core: &Core, may_use_reserve: bool, hot: bool) -> Option<u32> {
        let n = core.layout.banks;
        // Blocks turn bad at open (before any placement) and in `erase_or_retire`, which counts
        // them: a changed count is the one reason to re-read the weights.
        let bad = core.counters.bad_blocks.load(Ordering::Relaxed);
        if self.seen_bad != Some(bad) {
            self.seen_bad = Some(bad);
            self.refresh_weights(core);
        }
        // Rank: not under exclusive GC, then not lent out (frontiers `per-bank`), then idle or
        // free soonest; among equals the bank furthest behind its share.
        type Rank = (bool, bool, Option<std::time::Duration>);
        let mut best: Option<(Rank, u32, u32)> = None;
        for i in 0..n {
            let at = (self.rr + i) % n;
            let b = self.order[at as usize];
            let floor = if may_use_reserve { 0 } else { GC_RESERVE };
            let has_room = !self.frontier(b, hot).is_empty()
                || core.bank(b).free.load(Ordering::Acquire) > floor
                || self.scheme.parked.as_ref().is_some_and(|p| p.has(b, hot));
            if !has_room {
                continue;
            }
            let exclusive = core.bank(b).exclusive_gc.load(Ordering::Acquire);
            let lent_out = self.frontier(b, hot).is_empty()
                && self
                    .scheme
                    .parked
                    .as_ref()
                    .is_some_and(|p| p.all_lent(b, hot));
            let load = core.nand.bank_load(BankId(b));
            let busy = load.busy_for;
            let rank = (exclusive, lent_out, busy);
            let better = match &best {
                None => true,
                Some((br, bbank, _)) => rank < *br || rank == *br && self.behind(b, *bbank),
            };
            if better {
                best = Some((rank, b, at));
            }
            if self.uniform && !exclusive && !lent_out && busy.is_none() {
                break;
            }
        }
        let (_, b, at) = best?;
        self.rr = (at + 1) % n;
        self.placed[b as usize] += 1;
        Some(b)
    }
}

impl PagePlacer {
    /// Where the next program goes of `page` and, up to `want` in all, the pages sealed after
    /// it (see [`Placer::target_group`]), all of temperature `hot` (`is_hot`, judged once by
    /// the caller: the bitmaps move under other writers' commits), and whether the target is
    /// in a hot frontier (with no room in its own temperature a page takes the other's).
    fn place(&mut self, core: &Core, page: &SealedPage, want: usize, hot: bool) -> (Target, bool) {
        let has_trims = !page.zombies.is_empty();
        // Consecutive rounds in which no bank could take the page and GC reclaimed nothing.
        let mut stuck = 0u32;
        // Of those, consecutive rounds in which nothing on the device moved either (no
        // program, no erase by anyone): only these count towards giving up. Other writers
        // filling their open blocks is what makes their garbage reclaimable, and on a loaded
        // machine they may need more than a second of rounds to get there (CI saw a false
        // "no free blocks" with eight threads while builds ran beside the test).
        let mut idle = 0u32;
        let mut seen = core.progress();
        // Foreground GC steps taken for this page.
        let mut cleaned = 0u32;
        // Rounds since the device turned read-only (see `last`).
        let mut after_turn = 0u32;
        loop {
            // Read-only because the device wore out: this page was acknowledged, and goes
            // where erased pages are left (open blocks, then free blocks, GC's reserve too:
            // GC never runs again), with no GC step and no erase; none left, it is dropped
            // (`Placer::programs_after_turn`). Any other read-only reason: dropped now.
            let last = core.is_read_only();
            if last {
                after_turn += 1;
                if !core.programs_acknowledged() || after_turn > 4 * core.layout.banks {
                    return (Target::ReadOnly, false);
                }
            }
            // A page carrying trim records may use GC's reserve, but only once GC found nothing
            // else to reclaim, or a block's worth of foreground steps found no room: the
            // records free the space they unmap only once they are on flash, so GC may be
            // waiting for them (a victim they hold is stepped through and then given up).
            // Sooner, the page could take the block a bank's GC frontier needs next (the
            // reserve is one block) and leave that bank with reclaimable space it cannot reach.
            let use_reserve =
                last || has_trims && (stuck > 0 || cleaned >= core.layout.pages_per_block);
            // With separation, a page no bank has room for in its own temperature's frontier
            // takes a half-filled one of the other temperature before anyone cleans: free
            // space must not sit stranded in open blocks while the writer waits for GC.
            let chosen = self
                .choose_bank(core, use_reserve, hot)
                .map(|b| (b, hot))
                .or_else(|| {
                    self.scheme.recency.as_ref()?;
                    self.choose_bank(core, use_reserve, !hot).map(|b| (b, !hot))
                });
            let Some((b, temp)) = chosen else {
                if last {
                    return (Target::ReadOnly, false);
                }
                // Virtual time: the workers catch up to this writer's time first, as they
                // clean beside it on a served device (`Core::sim_yield`).
                if core.sim_yield() {
                    continue;
                }
                // Every bank is at its GC reserve: clean a step in the foreground, then look
                // again (a background worker may have freed a block meanwhile).
                if self.scheme.foreground_gc(core, &mut self.cleaning) {
                    stuck = 0;
                    idle = 0;
                    cleaned += 1;
                } else {
                    // Reclaimable space may sit in other writers' open blocks: give them time.
                    stuck += 1;
                    let now = core.progress();
                    idle = if now == seen { idle + 1 } else { 0 };
                    seen = now;
                    if idle > 2000 {
                        core.set_read_only("no free blocks left and nothing to reclaim".into());
                    }
                    core.wait_for_others();
                }
                continue;
            };
            // No cleaning after the turn (which may have come inside this round).
            let last = last || core.is_read_only();
            if last {
                // Nothing to clean for.
            } else if core.cfg.gc_policy == GcPolicy::InPath {
                self.scheme.paced_gc(core, b);
            } else {
                self.scheme
                    .backstop_gc(core, b, &mut self.cleaning, &mut self.backstop_credit);
            }
            let parked = self.scheme.parked.as_ref();
            let sets = if temp {
                &mut self.hot
            } else {
                &mut self.frontiers
            };
            let set = &mut sets[b as usize];
            if set.is_empty() {
                if let Some(lent) = parked.and_then(|p| p.take(b, temp)) {
                    *set = lent;
                }
            }
            if set.is_empty() {
                let for_gc = use_reserve && core.bank(b).free.load(Ordering::Acquire) > 0;
                // A set is opened a block per plane even when fewer pages wait: a program
                // may only pair pages at one page index, so a set opened narrow would stay
                // narrow, and the bank program one page per array time, for a whole block.
                // A page carrying trim records goes alone (`groupable`): it opens one block.
                let planes = core.nand.config().planes as usize;
                let blocks = if planes > 1 && !has_trims {
                    core.alloc_plane_blocks(b, planes, for_gc)
                } else {
                    core.alloc_block(b, for_gc).into_iter().collect()
                };
                if blocks.is_empty() {
                    continue;
                }
                if let Some(p) = parked {
                    p.opened(b, temp);
                }
                *set = PlaneSet::new(blocks);
            }
            let Some(target) = set.take(b, want, core.layout.pages_per_block) else {
                continue;
            };
            if parked.is_some() {
                self.lent = Some((b, temp));
            }
            let addrs = match &target {
                Target::Program(addr) => std::slice::from_ref(addr),
                Target::Planes(addrs) => addrs.as_slice(),
                _ => &[],
            };
            for &addr in addrs {
                self.scheme.open_pages.handed_out(addr);
            }
            let pages = addrs.len();
            // Each further page of a multi-plane program is a page sent to this bank: it pays
            // its share of the bank's cleaning as the first did.
            for _ in 1..pages {
                self.placed[b as usize] += 1;
                if last {
                    continue;
                }
                if core.cfg.gc_policy == GcPolicy::InPath {
                    self.scheme.paced_gc(core, b);
                } else {
                    self.scheme
                        .backstop_gc(core, b, &mut self.cleaning, &mut self.backstop_credit);
                }
            }
            return (target, temp);
        }
    }
}

impl Placer for PagePlacer {
    fn target(&mut self, core: &Core, page: &SealedPage) -> Target {
        let hot = self.is_hot(page);
        let placed = self.place(core, page, 1, hot);
        Self::count_hot(core, std::slice::from_ref(page), placed)
    }

    fn group_size(&self, planes: u32) -> usize {
        planes as usize
    }

    fn target_group(&mut self, core: &Core, pages: &[SealedPage]) -> Target {
        // A multi-plane program writes into one frontier: the pages of one temperature.
        let hot = self.is_hot(&pages[0]);
        let want = pages
            .iter()
            .take_while(|p| groupable(p) && self.is_hot(p) == hot)
            .count();
        let placed = self.place(core, &pages[0], want.max(1), hot);
        Self::count_hot(core, pages, placed)
    }

    /// A committed page's host writes count towards recency from now on (a page programmed
    /// again after a failure is noted once).
    fn committed(&mut self, _core: &Core, page: &SealedPage, _addr: PageAddr) {
        if let Some(recency) = &self.scheme.recency {
            recency.note(
                page.slots
                    .iter()
                    .filter(|(m, _)| m.kind == crate::oob::SlotKind::Data)
                    .map(|(m, _)| m.lpn.0),
            );
        }
    }

    /// Pages given up after a failed program will never commit: they no longer hold their
    /// blocks open. Then a borrowed frontier goes back to its bank.
    fn issued(&mut self, core: &Core, addrs: &[PageAddr], programmed: bool) {
        if !programmed {
            for &addr in addrs {
                self.scheme.page_resolved(core, addr);
            }
        }
        if let Some((b, hot)) = self.lent.take() {
            let set = std::mem::take(self.frontier(b, hot));
            if let Some(parked) = &self.scheme.parked {
                parked.park(b, hot, set);
            }
        }
    }

    /// A page's place is any erased page: after a turn to read-only the pages acknowledged
    /// still find one in the open and free blocks, without cleaning.
    fn programs_after_turn(&self) -> bool {
        true
    }

    fn failed(&mut self, core: &Core, _page: &SealedPage, addr: PageAddr) {
        let (b, block) = (addr.block.bank.0, addr.block.block);
        self.frontiers[b as usize].remove(block);
        self.hot[b as usize].remove(block);
        core.retire_block(b, block);
    }
}
