//! Garbage collection and wear levelling, cut into bounded steps (RFTL).
//!
//! A bank is cleaned by one party at a time: whoever holds its `BankGc` mutex (a background
//! worker, or a writer doing in-path/foreground GC). One [`PageScheme::gc_step`] does at most one victim
//! page read plus one GC-page program (or one copyback), or one erase — so a writer that has to
//! clean before it can write waits for about one erase plus one program, never for a whole block.
//!
//! A victim page whose slots are all valid moves with one NAND copyback to the GC frontier on
//! the same bank: no transfer over the channel, no copy through memory (the model shares the
//! page's frame), and the OOB it reads out names the slots to switch. (Not with hot/cold
//! separation: which of the two GC frontiers a page goes to depends on its logical pages,
//! which only its OOB, read through the controller, tells.) Partly valid pages (and
//! pages a copyback could not move: frontier on another bank, read error, an OOB that does not
//! decode) are read, their valid slots packed in a staging buffer and programmed a page at a
//! time.
//!
//! Data integrity: a staged page's valid slots are checked against their CRCs; a slot that
//! fails is read again (as after a read fault), and one that fails every time is moved anyway
//! with the CRC it was written with (`gc_corrupt_slots`), so it stays detectably bad and host
//! reads of it fail with EIO until it is rewritten — GC never hands bad bytes a good CRC. A
//! copyback moves data and OOB together inside the die without the controller seeing the data
//! (as on real NAND, where copyback bypasses the ECC engine), so it too keeps a bad slot bad.
//!
//! Victims: blocks that had a program failure first (they are retired), then — when a bank's
//! erase-count spread passes `wear_level_spread` — its least-worn full block (static wear
//! levelling: its cold data moves and the block re-enters the free list), else greedy (fewest
//! valid slots) or cost-benefit. Valid slots are copied to the bank's own GC frontier with their
//! original sequence number, and the map is switched with a compare-and-set so a host write that
//! raced the copy wins. With hot/cold separation the bank has two GC frontiers and a page
//! goes to the one of its temperature (the host writes' recency test): GC-moved data kept
//! apart from host data but mixed by temperature made separation gain nothing (an 80/20 run,
//! cost-benefit victims: WAF 4.64 with one GC frontier, 4.41 with two; `benches/sim/hotcold_gc.py`
//! shows the same with a perfect classifier).
//!
//! Scheduling (the `GcPolicy`): in-path (writers clean before writing to a bank under its soft
//! floor, LFTL NPGC, paced at the victim's steady-state steps per page), parallel (workers
//! clean idle banks, LFTL PLLGC) and adaptive (as parallel, with the number of active workers
//! shrinking as host load grows, LFTL §3.4). Workers keep a device-wide pool of free blocks
//! above the banks' reserves (`Core::gc_free_pool`), cleaning the cheapest victim anywhere
//! while it is short, rather than a floor on every bank: free blocks are spare space held idle.
//! With workers, a page sent to a bank at its GC reserve while the pool is short pays the same
//! paced share. Under every policy a writer that finds all banks at their GC reserve cleans in
//! the foreground, a step at a time.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nand_model::{BankId, BlockAddr, Copyback, NandError, PageAddr};
use parking_lot::MutexGuard;

use super::frontiers::Frontier;
use super::PageScheme;
use crate::blocks::BlockState;
use crate::config::VictimPolicy;
use crate::core::{Core, GC_RESERVE};
use crate::layout::{Psa, LOGICAL_PAGE};
use crate::oob::{self, PageOob, SlotKind, SlotMeta};
use crate::schemes::BackgroundWorker;

/// Most GC steps one host page pays for in paced GC: what keeps up with victims up to
/// (8 - 1) / (8 + 1) = 78 % valid. Fuller victims (less spare than the default's) fall behind;
/// the bank then reaches its GC reserve and writers go to other banks or clean in the
/// foreground.
const IN_PATH_STEPS: u32 = 8;

/// Why a victim was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Reclaim,
    Retire,
    WearLevel,
}

struct Cursor {
    block: u32,
    next_page: u32,
    purpose: Purpose,
    /// Valid slots when the victim was chosen: what cleaning it costs (paced GC).
    valid: u32,
}

/// What one pass over a bank's blocks found ([`PageScheme::scan_bank`]).
#[derive(Default)]
struct BankScan {
    /// The best reclaim victim and its valid slots.
    best: Option<(u32, u32)>,
    /// Highest erase count of a usable block (static wear levelling).
    max_erases: Option<u32>,
    /// The least-worn full block (the first of equals) and its erase count.
    least_worn_full: Option<(u32, u32)>,
}

impl BankScan {
    /// The least-worn full block, if the bank's erase-count spread is wider than `spread`
    /// (0: wear levelling off).
    fn wear_victim(&self, spread: u32) -> Option<u32> {
        let (max, (block, min)) = (self.max_erases?, self.least_worn_full?);
        (spread != 0 && max - min > spread).then_some(block)
    }
}

/// Valid slots read from victims, laid out as they will be on the next GC page: slot `i` of
/// the page is `data[i * LOGICAL_PAGE..]`. Staging happens only while fewer than a page of slots
/// wait, so at most two pages' worth are ever held.
#[derive(Default)]
struct Staging {
    data: Vec<u8>,
    metas: Vec<SlotMeta>,
    /// Where each staged slot lives on flash now.
    srcs: Vec<Psa>,
}

impl Staging {
    fn len(&self) -> usize {
        self.metas.len()
    }

    fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }
}

/// What [`PageScheme::copyback_page`] did with a victim page.
enum Moved {
    /// Copied and switched in the map.
    Done,
    /// Not moved: stage it through the buffer instead.
    Staging,
    /// Not moved: no free block for the GC frontier, on this bank or one to rescue to.
    NoBlock,
    /// Not moved, and nothing can be: the device turned read-only.
    Failed,
}

/// A GC frontier's temperature: with `separation = "hot-cold"`, moved data is judged by the
/// host writes' recency (`PageScheme::temperature`: hot pages to one GC frontier, cold to
/// another), so hot survivors of a victim do not land among cold ones, die there soon and make
/// the cold block a mixed one; otherwise everything goes to `COLD`.
const COLD: usize = 0;
const HOT: usize = 1;

/// A bank's cleaner state (under the bank's GC mutex).
#[derive(Default)]
pub struct BankGc {
    victim: Option<Cursor>,
    /// The GC frontiers, `COLD` and `HOT`: `(bank, block)`. Normally on the bank being
    /// cleaned; on another bank only when this one has no free block left (then its data is
    /// rescued elsewhere rather than leaving the bank stuck with reclaimable space it cannot
    /// reach). `HOT` only with hot/cold separation.
    frontiers: [Option<(u32, Frontier)>; 2],
    staged: Staging,
    /// Victim page and OOB read buffers, and the GC page's OOB, reused across steps.
    page: Vec<u8>,
    oob: Vec<u8>,
    out_oob: Vec<u8>,
    /// Paced GC: steps the pages sent to this bank owe and have not paid yet.
    credit: f64,
    /// Timing `virtual`: when the last step on this bank ended (simulated ns). A served device's
    /// cleaner holds the bank's GC mutex through its step's waits; the simulation runs a step
    /// at once and moves its actor's clock on, so the mutex alone would let another actor step
    /// the same bank in simulated time the first still holds it (see [`PageScheme::try_gc`]).
    held_until: u64,
    /// A step found no block for a GC frontier and nothing was programmed since: said once
    /// per such stretch. Until a block frees (on this bank, or one to rescue its data to),
    /// every cleaner that tries the bank fails the same way, and logging each try gave bursts
    /// of 64-161 warnings within a millisecond (outside check, 2026-11-30).
    no_block_said: bool,
}

/// A GC program found no block for its frontier on bank `b` (nor one to rescue its data to):
/// counted every time, said once per stretch (`said`: `BankGc::no_block_said`).
fn starved(core: &Core, b: u32, said: &mut bool) {
    core.counters.gc_starved.fetch_add(1, Ordering::Relaxed);
    if !std::mem::replace(said, true) {
        tracing::warn!("bank {b}: no free block for a GC frontier");
    }
}

/// What a step achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to clean on this bank.
    Idle,
    /// Copied data (or skipped empty pages); more to do.
    Progress,
    /// A block was erased (or retired).
    Freed,
}

/// Host-load gauge for the adaptive policy.
#[derive(Default)]
pub struct LoadGauge {
    pub allowed: AtomicUsize,
    last_ops: AtomicU64,
    peak: AtomicU64,
}

impl LoadGauge {
    /// Whether a tick with no host operation since the last leaves the gauge as it is: every
    /// worker allowed, and the peak too small to decay (`update_gc_allowance`).
    pub(crate) fn settled(&self, core: &Core, workers: usize) -> bool {
        let peak = self.peak.load(Ordering::Acquire);
        let next = peak.max(1);
        self.last_ops.load(Ordering::Acquire) == core.counters.host_ops()
            && next - next / 64 == peak
            && self.allowed.load(Ordering::Acquire) == workers.max(1)
    }
}

impl PageScheme {
    /// Runs one bounded GC step on bank `b`; the caller holds `g`, the bank's GC mutex.
    ///
    /// `urgent` is set by a writer that found no bank with room: then any victim that frees
    /// at least one slot will do. Otherwise (background and in-path GC) only victims that free
    /// a quarter of a block are worth their copies — cleaning nearly-full blocks of a bank that
    /// lost many blocks would wear it out for almost nothing.
    pub(crate) fn gc_step(&self, core: &Core, b: u32, g: &mut BankGc, urgent: bool) -> Step {
        let step = self.run_step(core, b, g, urgent);
        if let Some(clock) = core.nand.sim_clock() {
            g.held_until = g.held_until.max(clock.now_ns());
        }
        step
    }

    /// Bank `b`'s GC mutex if no one holds it, for a cleaner that goes elsewhere rather than
    /// wait. With timing `virtual` a bank whose last step (by another actor) ends after the
    /// caller's simulated now counts as held too: on a served device that cleaner would still
    /// hold the mutex, waiting for its step's operations, and the others would clean other
    /// banks rather than queue steps behind it on one bank's timeline.
    pub(crate) fn try_gc(&self, core: &Core, b: u32) -> Option<MutexGuard<'_, BankGc>> {
        let g = self.gc[b as usize].try_lock()?;
        match core.nand.sim_clock() {
            Some(clock) if clock.now_ns() < g.held_until => None,
            _ => Some(g),
        }
    }

    /// Bank `b`'s GC mutex, waiting for it: with timing `virtual`, until the simulated time the
    /// last step on the bank ended (see [`PageScheme::try_gc`]).
    pub(crate) fn lock_gc(&self, core: &Core, b: u32) -> MutexGuard<'_, BankGc> {
        let g = self.gc[b as usize].lock();
        if let Some(clock) = core.nand.sim_clock() {
            clock.advance_to(g.held_until);
        }
        g
    }

    fn run_step(&self, core: &Core, b: u32, g: &mut BankGc, urgent: bool) -> Step {
        let _gate = core.gc_gate.read();
        if g.victim.is_none() {
            // Never start a victim whose valid data could not all be written back: the GC
            // frontier's room plus the bank's free blocks bound what may be chosen.
            let ppb = core.layout.pages_per_block;
            let spp = core.layout.slots_per_page;
            // With two frontiers a page takes the other's room when its own cannot have a
            // block (`gc_program`), so their rooms add.
            let room_of = |f: &Option<(u32, Frontier)>| f.map_or(0, |(_, f)| (ppb - f.next) * spp);
            let frontier_room = room_of(&g.frontiers[COLD]) + room_of(&g.frontiers[HOT]);
            let rescue = if self.rescue_bank(core, b).is_some() {
                core.layout.slots_per_block()
            } else {
                0
            };
            let room = (frontier_room + rescue).saturating_sub(g.staged.len() as u32);
            match self.select_victim(core, b, room, urgent) {
                Some(c) => g.victim = Some(c),
                None if g.staged.is_empty() => return Step::Idle,
                None => {}
            }
        }
        core.counters.gc_steps.fetch_add(1, Ordering::Relaxed);
        let spp = core.layout.slots_per_page as usize;
        let programmed = |ok: bool| if ok { Step::Progress } else { Step::Idle };
        if g.staged.len() >= spp {
            return programmed(self.gc_program(core, b, g));
        }
        let exhausted = {
            let Some(cur) = g.victim.as_mut() else {
                return programmed(self.gc_program(core, b, g));
            };
            // Find the next page that still holds valid slots, and stage them.
            while cur.next_page < core.layout.pages_per_block {
                let addr = PageAddr {
                    block: BlockAddr {
                        bank: BankId(b),
                        block: cur.block,
                    },
                    page: cur.next_page,
                };
                cur.next_page += 1;
                // A page has at most MAX_PAGE_SIZE / 4 KiB slots: no allocation per page.
                let mut slots = [0u32; nand_model::MAX_PAGE_SIZE as usize / LOGICAL_PAGE];
                let mut n = 0;
                for s in 0..spp as u32 {
                    if self.map.is_valid(core.layout.psa(addr, s)) {
                        slots[n] = s;
                        n += 1;
                    }
                }
                let valid = &slots[..n];
                if valid.is_empty() {
                    continue;
                }
                // With hot/cold separation a page goes where its logical pages' temperature
                // says, which only a read through the controller (its OOB) tells: no copyback.
                if core.cfg.gc_copyback
                    && self.recency.is_none()
                    && valid.len() == spp
                    && g.staged.is_empty()
                {
                    match self.copyback_page(core, b, addr, &mut g.frontiers[COLD], &mut g.oob) {
                        Moved::NoBlock => {
                            starved(core, b, &mut g.no_block_said);
                            // Nothing moved: the page is visited again by the next step.
                            cur.next_page -= 1;
                            return Step::Idle;
                        }
                        Moved::Failed => {
                            // Nothing moved: the page is visited again by the next step.
                            cur.next_page -= 1;
                            return Step::Idle;
                        }
                        Moved::Done => {
                            g.no_block_said = false;
                            break;
                        }
                        Moved::Staging => {}
                    }
                }
                self.stage_page(core, addr, valid, &mut g.staged, &mut g.page, &mut g.oob);
                break;
            }
            cur.next_page >= core.layout.pages_per_block
        };
        if g.staged.len() >= spp || (exhausted && !g.staged.is_empty()) {
            return programmed(self.gc_program(core, b, g));
        }
        if !exhausted {
            return Step::Progress;
        }
        let Some(cur) = g.victim.take() else {
            return Step::Progress;
        };
        self.finish_victim(core, b, cur)
    }

    /// Reads victim page `addr` and stages its `valid` slots. A fully valid page read while
    /// nothing is staged goes straight into the staging area (one copy fewer: with one slot per
    /// page, the common case, GC then costs one read and one program per slot).
    fn stage_page(
        &self,
        core: &Core,
        addr: PageAddr,
        valid: &[u32],
        staged: &mut Staging,
        page: &mut Vec<u8>,
        oob: &mut Vec<u8>,
    ) {
        let page_size = core.layout.page_size as usize;
        let spp = core.layout.slots_per_page as usize;
        debug_assert!(staged.len() < spp, "staging only below a page of slots");
        // Every byte is overwritten by the read or the copies: sizing is all the buffers need.
        staged.data.resize(2 * page_size, 0);
        oob.resize(core.layout.oob_size as usize, 0);
        let direct = staged.is_empty() && valid.len() == spp;
        let buf: &mut [u8] = if direct {
            &mut staged.data[..page_size]
        } else {
            page.resize(page_size, 0);
            page
        };
        // Read until the page reads and every valid slot's data matches its CRC (a slot that
        // fails is read again, as after an injected read fault).
        let mut metas = None;
        let mut bad_slots = 0;
        // Whether the buffers hold the page as last read (for a salvage of its slot entries).
        let mut read_ok = false;
        for _ in 0..=core.own_read_retries() {
            match core.nand.read(addr, 0, buf, Some(oob)) {
                Ok(c) => {
                    c.wait();
                    read_ok = true;
                }
                Err(NandError::Uncorrectable { .. }) => {
                    // The buffers are unspecified after a failed read: what an earlier attempt
                    // decoded no longer describes them.
                    core.counters.read_retries.fetch_add(1, Ordering::Relaxed);
                    metas = None;
                    read_ok = false;
                    continue;
                }
                Err(e) => {
                    tracing::error!("GC read of {addr} failed: {e}");
                    metas = None;
                    read_ok = false;
                    break;
                }
            }
            let Some(PageOob::Data(m)) = oob::decode(oob, core.layout.slots_per_page) else {
                core.counters.read_retries.fetch_add(1, Ordering::Relaxed);
                metas = None;
                continue;
            };
            bad_slots = valid
                .iter()
                .filter(|&&s| {
                    let from = s as usize * LOGICAL_PAGE;
                    m.get(s as usize).is_some_and(|meta| {
                        meta.kind != SlotKind::Pad
                            && meta.crc != crc32fast::hash(&buf[from..from + LOGICAL_PAGE])
                    })
                })
                .count();
            metas = Some(m);
            if bad_slots == 0 {
                break;
            }
            core.counters.read_retries.fetch_add(1, Ordering::Relaxed);
            core.counters
                .crc_errors
                .fetch_add(bad_slots as u64, Ordering::Relaxed);
        }
        let mut salvaged = Vec::new();
        let (metas, valid) = match metas {
            Some(m) => (m, valid),
            None if read_ok => {
                // The OOB as a whole fails its CRC, but each slot's entry may still be intact
                // (a host read checks only its own): one whose LPN the map places exactly here
                // names its slot (a damaged LPN cannot, as no other page maps here). Its data
                // is checked against its CRC below, as always.
                let mut m = vec![SlotMeta::PAD; spp];
                for &s in valid {
                    let here = core.layout.psa(addr, s);
                    if let Some(e) = oob::slot_entry(oob, s)
                        .filter(|e| e.kind == SlotKind::Data && self.map.get(e.lpn) == Some(here))
                    {
                        m[s as usize] = e;
                        salvaged.push(s);
                    }
                }
                bad_slots = salvaged
                    .iter()
                    .filter(|&&s| {
                        let from = s as usize * LOGICAL_PAGE;
                        m[s as usize].crc != crc32fast::hash(&buf[from..from + LOGICAL_PAGE])
                    })
                    .count();
                if salvaged.len() < valid.len() {
                    core.count_uncorrectable(addr.block.bank.0);
                    tracing::error!(
                        "GC cannot read {addr}'s OOB: {} of its {} valid slots are lost",
                        valid.len() - salvaged.len(),
                        valid.len()
                    );
                    mark_damaged(core, addr);
                } else {
                    tracing::warn!(
                        "GC: {addr}'s OOB does not decode (its CRC, or more slots than a \
                         page has); its slots' entries hold"
                    );
                }
                (m, salvaged.as_slice())
            }
            None => {
                core.count_uncorrectable(addr.block.bank.0);
                tracing::error!("GC cannot read {addr}: its valid data is lost");
                mark_damaged(core, addr);
                return;
            }
        };
        if bad_slots > 0 {
            // Moved as they are, with the CRC they were written with: they stay detectably bad
            // (a host read of them fails) until the host rewrites them, and a good CRC is never
            // given to bytes that failed theirs.
            core.counters
                .gc_corrupt_slots
                .fetch_add(bad_slots as u64, Ordering::Relaxed);
            core.count_uncorrectable(addr.block.bank.0);
            tracing::error!(
                "GC: {bad_slots} slots of {addr} fail their check on every read; moved with their original CRC"
            );
        }
        for &s in valid {
            let Some(meta) = metas.get(s as usize) else {
                continue;
            };
            let (from, to) = (s as usize * LOGICAL_PAGE, staged.len() * LOGICAL_PAGE);
            if direct {
                // Read in place; slots only move down if the OOB lacked an earlier one.
                if from != to {
                    staged.data.copy_within(from..from + LOGICAL_PAGE, to);
                }
            } else {
                staged.data[to..to + LOGICAL_PAGE]
                    .copy_from_slice(&page[from..from + LOGICAL_PAGE]);
            }
            staged.metas.push(*meta);
            staged.srcs.push(core.layout.psa(addr, s));
        }
    }

    /// Programs up to one page of staged slots to the bank's GC frontier (with hot/cold
    /// separation, the one of their temperature if it can have a block, else the other) and
    /// switches the map. Returns false if nothing could be programmed (no block for a
    /// frontier).
    fn gc_program(&self, core: &Core, b: u32, g: &mut BankGc) -> bool {
        let spp = core.layout.slots_per_page as usize;
        let page_size = core.layout.page_size as usize;
        let take = g.staged.len().min(spp);
        g.staged.data.resize(2 * page_size, 0);
        // Pad slots read as zeroes, like the host writer's.
        g.staged.data[take * LOGICAL_PAGE..page_size].fill(0);
        let mut metas = g.staged.metas[..take].to_vec();
        metas.resize(spp, SlotMeta::PAD);
        g.out_oob.resize(core.layout.oob_size as usize, 0);
        oob::encode_data(&mut g.out_oob, &metas);
        // Static wear levelling moves data nobody rewrites: cold, whatever its copies' age.
        let levelling = g
            .victim
            .as_ref()
            .is_some_and(|c| c.purpose == Purpose::WearLevel);
        let mut t = if levelling {
            COLD
        } else {
            self.temperature(&metas[..take])
        };
        loop {
            // The temperature is a preference: with no block for its frontier the other one
            // takes the page (a victim is chosen to fit in both frontiers' room together).
            let addr = match self.gc_frontier(core, b, &mut g.frontiers[t]) {
                Some(a) => a,
                None if self.recency.is_some() => {
                    match self.gc_frontier(core, b, &mut g.frontiers[1 - t]) {
                        Some(a) => {
                            t = 1 - t;
                            a
                        }
                        None => {
                            // Victims are chosen to fit: only repeated failures get here.
                            starved(core, b, &mut g.no_block_said);
                            return false;
                        }
                    }
                }
                None => {
                    starved(core, b, &mut g.no_block_said);
                    return false;
                }
            };
            let result = core
                .nand
                .program(addr, &g.staged.data[..page_size], &g.out_oob);
            self.advance_gc_frontier(core, &mut g.frontiers[t], addr);
            match result {
                Ok(c) => {
                    c.wait();
                    g.no_block_said = false;
                    core.counters
                        .gc_page_programs
                        .fetch_add(1, Ordering::Relaxed);
                    for meta in &g.staged.metas[..take] {
                        self.map.prefetch(meta.lpn);
                        core.cache.prefetch(meta.lpn);
                    }
                    for i in 0..take {
                        let (meta, src) = (g.staged.metas[i], g.staged.srcs[i]);
                        self.relocate(core, meta, src, core.layout.psa(addr, i as u32));
                    }
                    let st = &mut g.staged;
                    st.metas.drain(..take);
                    st.srcs.drain(..take);
                    let rest = st.len() * LOGICAL_PAGE;
                    st.data
                        .copy_within(take * LOGICAL_PAGE..take * LOGICAL_PAGE + rest, 0);
                    if addr.page + 1 == core.layout.pages_per_block {
                        self.mark_full(core, addr.block.bank.0, addr.block.block);
                    }
                    return true;
                }
                Err(e) if e.is_fault() => {
                    core.counters
                        .program_failures
                        .fetch_add(1, Ordering::Relaxed);
                    g.frontiers[t] = None;
                    core.retire_block(addr.block.bank.0, addr.block.block);
                }
                Err(e) => {
                    core.set_read_only_after(&e, format!("GC program at {addr} failed: {e}"));
                    return false;
                }
            }
        }
    }

    /// Which GC frontier a page of `slots` goes to, with hot/cold separation: `HOT` if the
    /// host wrote most of its data slots' pages within the recency window (`recency.rs`).
    /// For a copy that is its age, where the host's test at a write is the time since the
    /// page's previous write: a young survivor is likely a hot page not rewritten yet. (The
    /// temperature of the block the copy comes from did worse: WAF 4.59 against 4.41 on
    /// `waf_limit.py`'s 80/20 cost-benefit row, 5.45 against 5.39 with greedy victims.)
    /// `COLD` without separation.
    fn temperature(&self, slots: &[SlotMeta]) -> usize {
        let Some(recency) = &self.recency else {
            return COLD;
        };
        let (mut hot, mut data) = (0, 0);
        for m in slots.iter().filter(|m| m.kind == SlotKind::Data) {
            data += 1;
            hot += usize::from(recency.is_hot(m.lpn.0));
        }
        if data > 0 && 2 * hot > data {
            HOT
        } else {
            COLD
        }
    }

    /// The GC frontier's next page, opening a block for it if it has none: on bank `b`, or on
    /// the bank `rescue_bank` names when `b` has no free block. `None` if no block is free.
    /// A block opened here stays the frontier whether or not the page is then programmed.
    fn gc_frontier(
        &self,
        core: &Core,
        b: u32,
        frontier: &mut Option<(u32, Frontier)>,
    ) -> Option<PageAddr> {
        let (fb, fr) = match *frontier {
            Some(f) => f,
            None => {
                let (fb, block) = core.alloc_block(b, true).map(|blk| (b, blk)).or_else(|| {
                    let c = self.rescue_bank(core, b)?;
                    core.alloc_block(c, false).map(|blk| (c, blk))
                })?;
                *frontier.insert((fb, Frontier { block, next: 0 }))
            }
        };
        Some(PageAddr {
            block: BlockAddr {
                bank: BankId(fb),
                block: fr.block,
            },
            page: fr.next,
        })
    }

    /// Moves the GC frontier past `addr`, which was just programmed (or consumed by a failed
    /// program); after a block's last page the frontier is closed. The caller marks the block
    /// full once the page's slots are switched in the map, so GC cannot pick it before.
    fn advance_gc_frontier(
        &self,
        core: &Core,
        frontier: &mut Option<(u32, Frontier)>,
        addr: PageAddr,
    ) {
        let next = addr.page + 1;
        let (fb, block) = (addr.block.bank.0, addr.block.block);
        if next < core.layout.pages_per_block {
            *frontier = Some((fb, Frontier { block, next }));
        } else {
            *frontier = None;
        }
    }

    /// Moves a fully valid victim page to the GC frontier with one NAND copyback: no copy
    /// through a buffer, and with timing `real` no data transfer over the channel. The OOB read
    /// out of the page register names the slots to switch in the map. Only for a frontier on
    /// the victim's own bank (copyback cannot leave the die); otherwise, or if the copyback read
    /// failed (staging retries the read), the page is staged instead.
    fn copyback_page(
        &self,
        core: &Core,
        b: u32,
        src: PageAddr,
        frontier: &mut Option<(u32, Frontier)>,
        oob: &mut Vec<u8>,
    ) -> Moved {
        oob.resize(core.layout.oob_size as usize, 0);
        loop {
            let Some(dst) = self.gc_frontier(core, b, frontier) else {
                return Moved::NoBlock;
            };
            if dst.block.bank.0 != b {
                return Moved::Staging;
            }
            // The controller decodes the OOB read out of the page register before the program:
            // an OOB that does not decode is not copied (on flash it would outlive its page as
            // a programmed page no scan can read, and a later recovery would distrust the
            // image). Staging then reads `src` again and salvages what the map vouches for.
            let mut metas = None;
            let spp = core.layout.slots_per_page;
            let result = core.nand.copyback_checked(src, dst, oob, &mut |o| {
                metas = match oob::decode(o, spp) {
                    Some(PageOob::Data(m)) => Some(m),
                    _ => None,
                };
                metas.is_some()
            });
            match result {
                Ok(Copyback::Declined(c)) => {
                    c.wait();
                    return Moved::Staging;
                }
                Ok(Copyback::Programmed(c)) => {
                    self.advance_gc_frontier(core, frontier, dst);
                    c.wait();
                    core.counters
                        .gc_page_programs
                        .fetch_add(1, Ordering::Relaxed);
                    let metas = metas.unwrap_or_default();
                    for meta in &metas {
                        self.map.prefetch(meta.lpn);
                        core.cache.prefetch(meta.lpn);
                    }
                    for (i, meta) in metas.into_iter().enumerate() {
                        let i = i as u32;
                        let (from, to) = (core.layout.psa(src, i), core.layout.psa(dst, i));
                        self.relocate(core, meta, from, to);
                    }
                    if dst.page + 1 == core.layout.pages_per_block {
                        self.mark_full(core, b, dst.block.block);
                    }
                    return Moved::Done;
                }
                Err(NandError::Uncorrectable { .. }) => {
                    // The destination was not consumed: the frontier still points at it.
                    core.counters.read_retries.fetch_add(1, Ordering::Relaxed);
                    return Moved::Staging;
                }
                Err(e) if e.is_fault() => {
                    core.counters
                        .program_failures
                        .fetch_add(1, Ordering::Relaxed);
                    *frontier = None;
                    core.retire_block(b, dst.block.block);
                }
                Err(e) => {
                    core.set_read_only_after(&e, format!("GC copyback {src} -> {dst} failed: {e}"));
                    return Moved::Failed;
                }
            }
        }
    }

    /// Switches one relocated slot in the map if nothing newer replaced it meanwhile.
    fn relocate(&self, core: &Core, meta: SlotMeta, src: Psa, dst: Psa) {
        match meta.kind {
            SlotKind::Data => {
                let st = core.cache.lock(meta.lpn);
                if self.map.relocate(&st, meta.lpn, src, dst) {
                    core.counters.gc_copies.fetch_add(1, Ordering::Relaxed);
                }
            }
            SlotKind::TrimLog => {
                self.map.relocate_trim_slot(src, dst);
            }
            SlotKind::Pad => {}
        }
    }

    /// Erases (or retires) a victim whose valid data has all moved.
    fn finish_victim(&self, core: &Core, b: u32, cur: Cursor) -> Step {
        let blk_addr = BlockAddr {
            bank: BankId(b),
            block: cur.block,
        };
        let idx = core.layout.block_idx(blk_addr);
        let zombies = self.map.zombies_in(idx);
        let left = self.map.valid_count(idx).max(self.map.valid_bits(idx));
        if left != 0 && core.bank(b).alloc.lock().state[cur.block as usize] == BlockState::Damaged {
            tracing::warn!(
                "bank {b} block {}: {left} slots unreadable; kept until the host rewrites them",
                cur.block
            );
            return Step::Idle;
        }
        if left > zombies {
            // Valid slots that neither moved nor wait for a trim record: their OOB names a
            // page the map does not place there (a hostile or damaged image whose OOB still
            // passes its CRC), so host reads of them fail and GC cannot move them. Kept as
            // damaged until the host rewrites them; cleaning the block again would copy the
            // rest of it over and over and free nothing.
            tracing::warn!(
                "bank {b} block {}: {} valid slots whose OOB names another page; kept until the host rewrites them",
                cur.block,
                left - zombies
            );
            core.counters
                .gc_corrupt_slots
                .fetch_add(u64::from(left - zombies), Ordering::Relaxed);
            mark_damaged(
                core,
                PageAddr {
                    block: blk_addr,
                    page: 0,
                },
            );
            return Step::Idle;
        }
        if left != 0 {
            // Slots unmapped by a trim whose record is not on flash yet stay valid: the block
            // must wait. Ask the maintenance thread to write the trim records out.
            tracing::debug!(
                "bank {b} block {}: {left} slots still held; retry later",
                cur.block
            );
            // A block being retired stays so (it is cleaned again, then marked bad).
            core.bank(b).alloc.lock().state[cur.block as usize] = if cur.purpose == Purpose::Retire
            {
                BlockState::Retiring
            } else {
                BlockState::Full
            };
            self.costs.touch(b);
            core.flush_requested.store(true, Ordering::Release);
            core.maint_wake.notify(usize::MAX);
            return Step::Idle;
        }

        while core.pins.pinned(idx) {
            std::thread::yield_now();
        }
        if cur.purpose == Purpose::WearLevel {
            core.counters
                .wear_level_moves
                .fetch_add(1, Ordering::Relaxed);
        }
        core.erase_or_retire(blk_addr, cur.purpose == Purpose::Retire);
        // Erase counts moved (the wear verdict).
        self.costs.touch(b);
        Step::Freed
    }

    /// Most valid slots a background victim may hold: the device's average fill of its used
    /// blocks, at least 3/4 of a block, at most one slot short of full.
    fn worth_limit(&self, core: &Core) -> u32 {
        let spb = core.layout.slots_per_block();
        let free: u64 = core
            .banks
            .iter()
            .map(|b| b.free.load(Ordering::Relaxed) as u64)
            .sum();
        let reserved = 1 + core.layout.banks as u64 * 2 * core.layout.ckpt_blocks as u64;
        let used = (core.layout.total_blocks() as u64)
            .saturating_sub(reserved + free)
            .max(1);
        let avg = self.map.valid_total().div_ceil(used);
        (avg.min(u32::MAX as u64) as u32).clamp(spb - spb.div_ceil(4), spb - 1)
    }

    /// Another bank that can spare a block for `b`'s GC when `b` itself has none free.
    fn rescue_bank(&self, core: &Core, b: u32) -> Option<u32> {
        if core.bank(b).free.load(Ordering::Acquire) > 0 {
            return None;
        }
        (0..core.layout.banks)
            .filter(|&c| c != b)
            .max_by_key(|&c| core.bank(c).free.load(Ordering::Acquire))
            .filter(|&c| core.bank(c).free.load(Ordering::Acquire) > GC_RESERVE)
    }

    /// Chooses the bank's next victim and marks it. `room` is the number of slots the GC
    /// frontiers can still take without a new block.
    fn select_victim(&self, core: &Core, b: u32, room: u32, urgent: bool) -> Option<Cursor> {
        let spb = core.layout.slots_per_block();
        let mut a = core.bank(b).alloc.lock();
        let room = room + a.free_len() * spb;
        let fits = |block: usize| {
            let addr = BlockAddr {
                bank: BankId(b),
                block: block as u32,
            };
            self.map.valid_count(core.layout.block_idx(addr)) <= room
        };
        let pick = |block: u32, purpose| Some((block, purpose));
        // A block retired after a failed program may still have pages another writer
        // programmed before the failure and has not committed (frontiers shared per bank):
        // moving it out before they commit would leave them behind (their valid bits are set
        // at commit, after GC passed them), and the block would be erased or marked bad under
        // them. Only once every page handed out is resolved.
        let mut chosen = a
            .state
            .iter()
            .enumerate()
            .position(|(i, s)| {
                *s == BlockState::Retiring
                    && fits(i)
                    && self.open_pages.outstanding(BlockAddr {
                        bank: BankId(b),
                        block: i as u32,
                    }) == 0
            })
            .and_then(|i| pick(i as u32, Purpose::Retire));
        // Static wear levelling only on a bank that is not short of free blocks: with
        // background workers, while the device's free pool is full (a bank at its reserve is
        // where workers leave it, and the move's frontier may take that block: `fits` checks
        // the room); with in-path GC, at its soft floor.
        let spare = match core.cfg.gc_policy {
            crate::config::GcPolicy::InPath => a.free_len() >= core.gc_soft_free(),
            _ => a.free_len() >= GC_RESERVE && core.free_pool() >= core.gc_free_pool(),
        };
        if chosen.is_none() {
            // Background cleaning takes a victim only if it is no fuller than the device's
            // average used block (`worth_limit`): cleaning fuller blocks frees almost nothing,
            // and on a bank that lost many blocks it wears the bank out. A writer with nowhere
            // to write (`urgent`) takes any gain.
            let worth = if urgent {
                spb - 1
            } else {
                self.worth_limit(core)
            };
            let scan = self.scan_bank(core, b, &a, room.min(worth));
            if spare {
                chosen = scan
                    .wear_victim(core.cfg.wear_level_spread)
                    .filter(|blk| fits(*blk as usize))
                    .and_then(|blk| pick(blk, Purpose::WearLevel));
            }
            if chosen.is_none() {
                chosen = scan.best.and_then(|(blk, _)| pick(blk, Purpose::Reclaim));
            }
        }
        let (block, purpose) = chosen?;
        a.state[block as usize] = BlockState::Victim;
        self.costs.victim_taken(b);
        let valid = self.map.valid_count(core.layout.block_idx(BlockAddr {
            bank: BankId(b),
            block,
        }));
        Some(Cursor {
            block,
            next_page: 0,
            purpose,
            valid,
        })
    }

    /// One pass over bank `b`'s blocks: its best reclaim victim (greedy or cost-benefit) whose
    /// valid slots fit in `room`, and the erase counts static wear levelling compares.
    fn scan_bank(&self, core: &Core, b: u32, a: &crate::blocks::BankAlloc, room: u32) -> BankScan {
        let spb = core.layout.slots_per_block();
        let now = core.current_seq();
        let mut best: Option<(f64, u32, u32)> = None;
        let mut scan = BankScan::default();
        for (i, s) in a.state.iter().enumerate() {
            let erases = a.erase_count[i];
            if !matches!(s, BlockState::Bad | BlockState::Reserved) {
                scan.max_erases = scan.max_erases.max(Some(erases));
            }
            if !matches!(s, BlockState::Full | BlockState::Damaged) {
                continue;
            }
            if *s == BlockState::Full && scan.least_worn_full.is_none_or(|(_, e)| erases < e) {
                scan.least_worn_full = Some((i as u32, erases));
            }
            let blk = BlockAddr {
                bank: BankId(b),
                block: i as u32,
            };
            let valid = self.map.valid_count(core.layout.block_idx(blk));
            // A damaged block only once its unreadable slots were all overwritten.
            let damaged = *s == BlockState::Damaged && valid > 0;
            if damaged || valid >= spb || valid > room {
                continue;
            }
            let score = match core.cfg.victim_policy {
                VictimPolicy::Greedy => -(valid as f64),
                VictimPolicy::CostBenefit => {
                    let u = valid as f64 / spb as f64;
                    let age = (now.saturating_sub(a.filled_seq[i]) + 1) as f64;
                    if u == 0.0 {
                        f64::INFINITY
                    } else {
                        age * (1.0 - u) / (2.0 * u)
                    }
                }
            };
            if best.is_none_or(|(s, _, _)| score > s) {
                best = Some((score, i as u32, valid));
            }
        }
        scan.best = best.map(|(_, blk, valid)| (blk, valid));
        scan
    }

    /// The greedy/cost-benefit choice on bank `b`, without marking it (benchmarks).
    pub(crate) fn victim_scan(&self, core: &Core, b: u32) -> Option<u32> {
        let a = core.bank(b).alloc.lock();
        self.scan_bank(core, b, &a, u32::MAX)
            .best
            .map(|(blk, _)| blk)
    }

    /// Marks a frontier block full once its last page committed (GC may pick it from now on):
    /// bank `b` has a new candidate victim.
    pub(super) fn mark_full(&self, core: &Core, b: u32, block: u32) {
        core.mark_full(b, block);
        self.costs.touch(b);
    }

    /// Bank `b`'s best victim's valid slots (`u32::MAX`: it has none) and whether its wear
    /// spread is worth levelling: from its last scan unless it changed since (`costs.rs`).
    fn bank_costs(&self, core: &Core, b: u32) -> (u32, bool) {
        let refresh = match self.costs.cached(b) {
            Ok(answers) => return answers,
            Err(refresh) => refresh,
        };
        let scan = {
            let a = core.bank(b).alloc.lock();
            self.scan_bank(core, b, &a, u32::MAX)
        };
        let valid = scan.best.map_or(u32::MAX, |(_, valid)| valid);
        let wear = scan.wear_victim(core.cfg.wear_level_spread).is_some();
        self.costs.store(refresh, valid, wear);
        (valid, wear)
    }

    /// Whether bank `b` has a wear spread worth levelling (as of its last scan).
    fn wear_level_due(&self, core: &Core, b: u32) -> bool {
        self.bank_costs(core, b).1
    }

    /// Valid slots of bank `b`'s best reclaim victim (`u32::MAX`: it has none), as of its last
    /// scan: for ranking banks; the victim itself is chosen by a fresh scan.
    fn best_victim_valid(&self, core: &Core, b: u32) -> u32 {
        self.bank_costs(core, b).0
    }

    fn needs_gc(&self, core: &Core, b: u32) -> bool {
        core.bank(b).free.load(Ordering::Acquire) < core.gc_soft_free()
    }

    /// GC paced in the write path (LFTL NPGC, paced like RFTL's partial GC): while bank `b` is
    /// under its soft floor, each page a writer sends there pays its share of the cleaning that
    /// keeps the bank's free space level. A victim with `V` valid pages of `P` costs `V + 1`
    /// steps (its copies and the erase) and gives `P - V` pages back, so a page owes
    /// `(V + 1) / (P - V)` steps — about 4 at 80 % valid — times how many blocks the bank is
    /// under its floor (so a bank that slipped climbs back instead of hovering where one full
    /// victim tips it into foreground GC); the fraction carries over in the bank's credit. No
    /// page waits for a whole-block clean, nor for more than `IN_PATH_STEPS` steps.
    ///
    /// The in-path policy's cleaning; with background workers, see
    /// [`PageScheme::backstop_gc`].
    pub(crate) fn paced_gc(&self, core: &Core, b: u32) {
        if !self.needs_gc(core, b) {
            return;
        }
        let mut g = self.lock_gc(core, b);
        let free = core.bank(b).free.load(Ordering::Acquire);
        let below = core.gc_soft_free().saturating_sub(free).max(1);
        let owed = g.credit + f64::from(below) * self.steps_per_page(core, &g);
        // At the reserve nothing else may be written here: any victim that frees a slot will do.
        let urgent = free <= GC_RESERVE;
        let mut paid = 0;
        while f64::from(paid) + 1.0 <= owed && paid < IN_PATH_STEPS {
            paid += 1;
            if self.gc_step(core, b, &mut g, urgent) == Step::Idle {
                // Nothing to clean now: no debt to carry.
                g.credit = 0.0;
                return;
            }
        }
        g.credit = (owed - f64::from(paid)).clamp(0.0, f64::from(IN_PATH_STEPS));
    }

    /// Steps a page written to a bank owes under paced GC (see [`PageScheme::paced_gc`]),
    /// from the victim being cleaned; one (which picks a victim) when there is none yet.
    fn steps_per_page(&self, core: &Core, g: &BankGc) -> f64 {
        let Some(cur) = &g.victim else {
            return 1.0;
        };
        let (ppb, spp) = (core.layout.pages_per_block, core.layout.slots_per_page);
        // Pages the victim's valid slots fill once packed: what cleaning gives back is the rest.
        let packed = cur.valid.div_ceil(spp);
        let steps = if spp == 1 {
            // A valid page moves in one step (a copyback, or a read and a program).
            packed + 1
        } else {
            // A step per victim page holding valid slots (at most one per slot) to stage them,
            // a step per packed page to program, and the erase.
            cur.valid.min(ppb) + packed + 1
        };
        f64::from(steps) / f64::from(ppb.saturating_sub(packed).max(1))
    }

    /// After an open, before any host write: recovery closed every partly programmed block
    /// (frontiers start on fresh blocks), so a bank that was at its GC reserve when the image
    /// was closed or crashed has no block a writer may open, and the first writes would all
    /// wait for foreground GC (a benchmark that preconditions, closes and reopens measured
    /// 120-430 foreground steps from this alone). Cleans each bank back to its soft floor (the
    /// reserve and one block with workers, two with in-path GC, the level paced in-path GC
    /// keeps a bank at: only back to the reserve and one, in-path GC still fell back on
    /// foreground steps, 143 on slc-small-004), so every bank can take writes at first; with
    /// workers that is more than their device-wide pool, and the writes use it up before they
    /// clean again. A victim or a few per bank (the GC frontier it opens takes a free block
    /// first). A bank whose host frontier a clean open resumed (`resumed`) has room for
    /// writers as it had at the close, and is left to the workers (with in-path GC, to the
    /// writes' paced share). Returns the steps taken.
    pub(crate) fn restore_headroom(&self, core: &Core, resumed: &[bool]) -> u64 {
        let mut steps = 0;
        for b in 0..core.layout.banks {
            if resumed[b as usize] {
                continue;
            }
            let mut g = self.lock_gc(core, b);
            // A bound for a bank that cannot get there (worn out, or all its data valid).
            let mut left = 4 * u64::from(core.layout.slots_per_block());
            while core.bank(b).free.load(Ordering::Acquire) < core.gc_soft_free()
                && core.read_only_reason().is_none()
                && left > 0
            {
                // Any victim that frees a slot only at the reserve (where writers have no
                // block); above it, only victims worth their copies, as background GC.
                let urgent = core.bank(b).free.load(Ordering::Acquire) <= GC_RESERVE;
                if self.gc_step(core, b, &mut g, urgent) == Step::Idle {
                    break;
                }
                steps += 1;
                left -= 1;
            }
        }
        steps
    }

    /// A clean open found bank `b` with no free block for its GC: the close left the GC
    /// frontier partly programmed, and with the reserve in it the bank had no other. The
    /// resumed `block` (next page `next`) becomes the bank's cold GC frontier again rather
    /// than a writer's (`PageScheme::resume_frontiers`). Parked for writers, it left GC no
    /// room on the bank: an outside check saw 'no free block for a GC frontier' step after
    /// step right after clean opens with hot/cold separation, until another bank freed a
    /// block to rescue to.
    /// Returns false (nothing done) if the bank's cold GC frontier is taken already.
    pub(super) fn adopt_gc_frontier(&self, b: u32, block: u32, next: u32) -> bool {
        let mut g = self.gc[b as usize].lock();
        if g.frontiers[COLD].is_some() {
            return false;
        }
        g.frontiers[COLD] = Some((b, Frontier { block, next }));
        true
    }

    /// Slots bank `b`'s GC frontiers on the bank can still take without a new block.
    #[cfg(test)]
    pub(super) fn gc_room(&self, core: &Core, b: u32) -> u32 {
        let (ppb, spp) = (core.layout.pages_per_block, core.layout.slots_per_page);
        let g = self.gc[b as usize].lock();
        g.frontiers
            .iter()
            .flatten()
            .filter(|(fb, _)| *fb == b)
            .map(|(_, f)| (ppb - f.next) * spp)
            .sum()
    }

    /// Foreground GC when no bank can take a page: one step (see
    /// [`PageScheme::cheapest_step`]). The writer looks for room again after each step, so a
    /// page waits until any bank has a free block — freed by its own steps or by a background
    /// worker — rather than for a whole-block clean of its own. Returns false when nothing
    /// anywhere can be reclaimed.
    pub(crate) fn foreground_gc(&self, core: &Core, bank: &mut Option<u32>) -> bool {
        core.counters.foreground_gc.fetch_add(1, Ordering::Relaxed);
        self.cheapest_step(core, bank).is_some()
    }

    /// With background workers: the paced share a page pays when the bank it goes to is down
    /// to its GC reserve and the device's free pool is short (the workers fell behind; a bank
    /// at its reserve alone is normal, as the pool is device-wide; see
    /// [`PageScheme::paced_gc`] for the share), cleaned where it is cheapest device-wide rather than on that bank, as foreground
    /// GC does: the point is to keep the device's free space level, and cleaning the page's own
    /// bank instead cost 5-10 % WAF. `credit` carries the fraction (the writer's own).
    pub(crate) fn backstop_gc(
        &self,
        core: &Core,
        b: u32,
        bank: &mut Option<u32>,
        credit: &mut f64,
    ) {
        if !self.needs_gc(core, b) || core.free_pool() >= core.gc_free_pool() {
            return;
        }
        let mut owed = *credit + 1.0;
        let mut paid = 0;
        while f64::from(paid) + 1.0 <= owed && paid < IN_PATH_STEPS {
            let Some(ratio) = self.cheapest_step(core, bank) else {
                *credit = 0.0;
                return;
            };
            if paid == 0 {
                owed = *credit + ratio;
            }
            paid += 1;
        }
        *credit = (owed - f64::from(paid)).clamp(0.0, f64::from(IN_PATH_STEPS));
    }

    /// One GC step where cleaning is cheapest: on the bank `bank` names (a clean this writer
    /// started), else on the bank whose best victim has the fewest valid slots. Banks a worker
    /// is cleaning are passed over (it holds their GC mutex for a whole round). Returns the
    /// stepped bank's steps per page (see [`PageScheme::steps_per_page`]), `None` when nothing
    /// anywhere can be reclaimed.
    fn cheapest_step(&self, core: &Core, bank: &mut Option<u32>) -> Option<f64> {
        if let Some(b) = *bank {
            if let Some(mut g) = self.try_gc(core, b) {
                match self.gc_step(core, b, &mut g, true) {
                    Step::Progress => return Some(self.steps_per_page(core, &g)),
                    Step::Freed => {
                        *bank = None;
                        return Some(self.steps_per_page(core, &g));
                    }
                    Step::Idle => *bank = None,
                }
            } else {
                *bank = None;
            }
        }
        // Ties (common: victims differ by a few slots) go round the banks from `from`: the
        // cleaned bank is where the next pages go, and a cleaner that favours some banks
        // fills them up (see `GcWorker::round`).
        let n = core.layout.banks;
        let from = self.foreground_rr.fetch_add(1, Ordering::Relaxed) % n;
        let mut order: Vec<(u32, u32, u32)> = (0..n)
            .map(|b| (self.best_victim_valid(core, b), (b + n - from) % n, b))
            .collect();
        order.sort_unstable();
        let mut passed = false;
        for &(_, _, b) in &order {
            let Some(mut g) = self.try_gc(core, b) else {
                passed = true;
                continue;
            };
            match self.gc_step(core, b, &mut g, true) {
                Step::Progress => {
                    *bank = Some(b);
                    return Some(self.steps_per_page(core, &g));
                }
                Step::Freed => return Some(self.steps_per_page(core, &g)),
                Step::Idle => {}
            }
        }
        if !passed {
            return None;
        }
        // Every bank with something to clean is being cleaned by a worker: wait for one.
        for &(_, _, b) in &order {
            let mut g = self.lock_gc(core, b);
            match self.gc_step(core, b, &mut g, true) {
                Step::Progress | Step::Freed => return Some(self.steps_per_page(core, &g)),
                Step::Idle => {}
            }
        }
        None
    }

    /// Updates the adaptive policy's allowance from the host operation rate.
    pub(crate) fn update_gc_allowance(&self, core: &Core, workers: usize) {
        let g = &self.gc_load;
        let ops = core.counters.host_ops();
        let last = g.last_ops.swap(ops, Ordering::AcqRel);
        let rate = ops.saturating_sub(last);
        let peak = g.peak.load(Ordering::Acquire).max(rate).max(1);
        // Let the peak decay so one burst does not pin the scale for ever.
        g.peak.store(peak - peak / 64, Ordering::Release);
        let idle_share = 1.0 - rate as f64 / peak as f64;
        let allowed = ((workers as f64 * idle_share).ceil() as usize).clamp(1, workers);
        if g.allowed.swap(allowed, Ordering::AcqRel) < allowed {
            // A worker held back listens only for urgent wake-ups: tell it at once.
            core.wake_all_gc();
        }
    }
}

/// A background GC worker (parallel and adaptive policies): run on its own thread, or with
/// timing `virtual` as an actor of the simulation (`sim.rs`).
pub(crate) struct GcWorker {
    scheme: Arc<PageScheme>,
    idx: usize,
    adaptive: bool,
    /// Where the next scan of the banks starts (workers spread out).
    rr: u32,
    /// (does not need GC, not below its reserve, busy, valid slots of its best victim (of a
    /// bank in need above its reserve, else 0), place from `rr`, bank): sorted, most in need
    /// and cheapest first.
    candidates: Vec<(bool, bool, bool, u32, u32, u32)>,
    /// Adaptive GC: this worker is in a cleaning run, which goes on until the device's free
    /// pool is full again; the host load only decides whether a run starts.
    in_run: bool,
}

impl GcWorker {
    pub(crate) fn new(scheme: Arc<PageScheme>, idx: usize, adaptive: bool) -> GcWorker {
        GcWorker {
            scheme,
            idx,
            adaptive,
            rr: idx as u32,
            candidates: Vec::new(),
            in_run: false,
        }
    }
}

impl BackgroundWorker for GcWorker {
    fn name(&self) -> String {
        format!("ftl-gc-{}", self.idx)
    }

    fn held_back(&self, _core: &Core) -> bool {
        self.adaptive
            && !self.in_run
            && self.idx >= self.scheme.gc_load.allowed.load(Ordering::Acquire)
    }

    /// Not held back and not in a run: its rounds then decide from the banks' state alone.
    fn settled(&self, core: &Core) -> bool {
        !self.in_run && !self.held_back(core)
    }

    fn round(&mut self, core: &Core, max_steps: u32) -> Option<Duration> {
        let scheme = &self.scheme;
        let nb = core.layout.banks;
        // Every worker cleans, whatever the host load, once a bank is below its GC reserve.
        // Not sooner: some bank is at its reserve (or `exclusive_gc`, one block above) nearly
        // all the time on a busy device, and adaptive GC would never throttle; writers to
        // such a bank pay their paced share instead while the pool is short (`backstop_gc`).
        let urgent = (0..nb).any(|b| core.bank(b).free.load(Ordering::Acquire) < GC_RESERVE);
        if !urgent && self.held_back(core) {
            return Some(Duration::from_millis(5));
        }
        // Banks most in need first; idle banks before busy ones (PLLGC cleans idle banks);
        // ties from where the last round left off, not from bank 0. A cleaner that favours
        // some banks gives them the free blocks, so the writes, so the most valid data: with
        // ties broken by bank number, banks 0 and 1 (where the two workers start) ended up
        // 28 % fuller than the rest at 28 % OP, and the WAF 12 % above greedy's limit.
        //
        // What the workers keep is a device-wide pool of free blocks (`Core::gc_free_pool`),
        // not a floor per bank: while the pool is short every bank is a candidate and the
        // cheapest victim goes first, as a writer cleaning in the foreground picks it. Each
        // block held free is spare space idle; a floor of one block over the reserve on each
        // bank held 8-16 blocks idle on 16 banks and cost 1.13x the greedy limit where the
        // pool measures 1.06x (`FtlConfig::gc_free_pool`). A bank below its reserve (its GC
        // frontier has no block to go to) goes first regardless.
        self.candidates.clear();
        let short = core.free_pool() < core.gc_free_pool();
        self.in_run &= short;
        for i in 0..nb {
            let b = (self.rr + i) % nb;
            let below = core.bank(b).free.load(Ordering::Acquire) < GC_RESERVE;
            let needs = short || below;
            if !needs && !scheme.wear_level_due(core, b) {
                continue;
            }
            // In flight, or still working off an erase nobody waits for (`erase_or_retire`).
            let load = core.nand.bank_load(BankId(b));
            let busy = load.inflight > 0 || load.busy_for.is_some();
            let cost = if needs && !below {
                scheme.best_victim_valid(core, b)
            } else {
                0
            };
            // Not ranked first: a bank whose victim is under way (tried: in virtual time, where
            // a round is one step, workers then kept stepping on that bank while it was busy
            // instead of cleaning idle ones, fell behind, and writers cleaned in the
            // foreground: 262 steps and a 57 ms write on slc-small-004 in `gc_bound.py`).
            self.candidates.push((!needs, !below, busy, cost, i, b));
        }
        if self.candidates.is_empty() {
            return Some(Duration::from_millis(20));
        }
        self.candidates.sort_unstable();
        // A bank whose cleaner is busy (another worker, or a writer cleaning in the
        // foreground) is skipped rather than spun on, and so is one with nothing to clean now
        // (no victim worth its copies, or none that fits the room its GC frontier has): the
        // next candidate is tried instead of sleeping while the pool is short.
        let start = core.now_ns();
        let mut steps = 0u32;
        let mut locked = false;
        for c in 0..self.candidates.len() {
            let b = self.candidates[c].5;
            let Some(mut g) = scheme.try_gc(core, b) else {
                continue;
            };
            locked = true;
            while steps < max_steps {
                // A round under way ends at a read-only turn as at the stop: no new round
                // starts then (`Ftl::start`'s workers), and what the device still programs
                // after a turn is the host's acknowledged pages, into the erased pages GC
                // would take.
                if core.stopping.load(Ordering::Acquire) || core.is_read_only() {
                    return None;
                }
                let step = scheme.gc_step(core, b, &mut g, false);
                if step == Step::Idle {
                    break;
                }
                steps += 1;
                self.in_run = true;
                // After a freed block the next round chooses again: the cheapest victim may
                // now be on another bank, and the pool may be full.
                if step == Step::Freed {
                    self.rr = (b + 1) % nb;
                    return None;
                }
                // The clock is read every 16 steps only: in a VM a read can cost as much as a
                // step.
                if steps.is_multiple_of(16) && core.now_ns() - start > 50_000_000 {
                    break;
                }
            }
            if steps > 0 {
                self.rr = (b + 1) % nb;
                return None;
            }
        }
        Some(Duration::from_millis(if locked { 5 } else { 1 }))
    }
}

/// Marks the block of `page`, a victim with valid slots GC could not read, as damaged (see
/// [`BlockState::Damaged`]): it stays out of victim choice until they are overwritten.
fn mark_damaged(core: &Core, page: PageAddr) {
    core.bank(page.block.bank.0).alloc.lock().state[page.block.block as usize] =
        BlockState::Damaged;
}

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use futures::executor::block_on;
    use nand_model::TimingMode;

    use super::GcWorker;
    use crate::config::GcPolicy;
    use crate::schemes::page::PageScheme;
    use crate::schemes::BackgroundWorker;
    use crate::{Ftl, FtlConfig};

    /// Adaptive GC: the host load decides whether a worker starts cleaning; once it has, it
    /// goes on until the free pool is full again, however busy the host becomes. (Held back
    /// after every freed block instead, workers under load fell behind bursts and LFTL's Fig. 6
    /// stand-in measured 2.3x parallel GC's mean write latency, `experiments/README.md`.)
    #[test]
    fn an_adaptive_worker_cleans_on_to_a_full_pool_once_started() {
        let dir = tempfile::tempdir().expect("tempdir");
        // In-path policy: no background workers of its own; the one under test is made here.
        // A pool larger than the device can hold: it is short whatever GC does.
        let cfg = FtlConfig {
            queues: 1,
            gc_policy: GcPolicy::InPath,
            gc_free_pool: 10_000,
            checkpoint_interval_bytes: 0,
            ..FtlConfig::default()
        };
        let nand = crate::test_support::small_nand(1, 2, 32);
        let f = Ftl::create(&dir.path().join("a.img"), &nand, TimingMode::Off, cfg, None)
            .expect("create");
        let pages = f.capacity() / 4096;
        block_on(async {
            // Fill, then overwrite half: garbage on every bank.
            for l in (0..pages).chain(0..pages / 2) {
                f.write(0, l * 4096, &[l as u8; 4096], false)
                    .await
                    .expect("write");
            }
            f.flush().await.expect("flush");
        });
        let any: Arc<dyn Any + Send + Sync> = f.core.scheme.clone();
        let scheme = any.downcast::<PageScheme>().expect("the page scheme");
        let mut w = GcWorker::new(scheme.clone(), 1, true);
        // The host is idle: worker 1 may clean, and does.
        scheme.gc_load.allowed.store(2, Ordering::Release);
        assert!(!w.held_back(&f.core));
        assert_eq!(w.round(&f.core, 1), None, "a step was taken");
        // The host gets busy: one worker allowed, not this one. It is in a run and the pool
        // is short: it goes on.
        scheme.gc_load.allowed.store(1, Ordering::Release);
        assert!(!w.held_back(&f.core));
        assert_eq!(w.round(&f.core, 1), None, "the run goes on");
        // A worker that had not started stays held back.
        let idle = GcWorker::new(scheme, 1, true);
        assert!(idle.held_back(&f.core));
        assert_eq!(f.check_invariants(), Ok(()));
    }
}
