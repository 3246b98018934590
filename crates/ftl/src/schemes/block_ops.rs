//! Block-level operations the block-mapped schemes share (`hybrid`: BAST and FAST; `rftl`;
//! `gftl`):
//! a free block near a bank, a slot read for a copy, the release of a block that holds
//! nothing current any more, and the journal blocks that hold trim records.
//!
//! The page scheme has its own (GC frontiers, victims): these serve schemes that keep blocks
//! per logical block and copy a logical block's pages between them.

use std::sync::atomic::Ordering;

use nand_model::{BlockAddr, Completion, NandError, PageAddr};
use parking_lot::Mutex;

use crate::blocks::BlockState;
use crate::buffer::SealedPage;
use crate::core::Core;
use crate::layout::{BlockIdx, Layout, Lpn, Psa, LOGICAL_PAGE};
use crate::oob::{self, SlotKind, SlotMeta};
use crate::schemes::page::map::PageMap;
use crate::schemes::Target;

/// What a block-mapped scheme's placer may do with a page now (the design page's
/// "Read-only").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placing {
    /// Anything its rules ask: steps, merges, folds, new blocks.
    Free,
    /// The device wore out ([`Core::programs_acknowledged`]): the page was acknowledged, and
    /// goes to an erased page its rules would put it in that needs nothing moved first (its
    /// logical block's own open block, a log with room, the journal's open block, or a free
    /// block, GC's reserve too: nothing is merged or erased again), or is dropped
    /// ([`Target::ReadOnly`]; the writer counts it). No step, merge, fold or erase.
    AfterWearTurn,
    /// Nothing more: a power cut, or read-only for another reason.
    Stop,
}

impl Placing {
    pub(crate) fn now(core: &Core) -> Placing {
        if core.writers_gone() {
            Placing::Stop
        } else if !core.is_read_only() {
            Placing::Free
        } else if core.programs_acknowledged() {
            Placing::AfterWearTurn
        } else {
            Placing::Stop
        }
    }

    /// Whether the device wore out (`Some(true)`), is writable (`Some(false)`), or takes no
    /// more programs (`None`: the placer returns [`Target::ReadOnly`]).
    pub(crate) fn after_turn(core: &Core) -> Option<bool> {
        match Placing::now(core) {
            Placing::Free => Some(false),
            Placing::AfterWearTurn => Some(true),
            Placing::Stop => None,
        }
    }

    /// Whether a writer stops waiting for a logical block's lock or placing: after a power cut
    /// the holder is gone; once the device is read-only for another reason the holder may
    /// never release it, and nothing will be programmed anyway. (After a wear turn it waits
    /// on: the holder is a writer programming what it acknowledged, and releases the lock at
    /// each commit.)
    pub(crate) fn gave_up(core: &Core) -> bool {
        Placing::now(core) == Placing::Stop
    }
}

/// A program failed on a device already read-only (after a wear turn, or in flight at any
/// turn): a block-mapped scheme's way back from a failed program, a merge or compaction of the
/// logical block, moves pages and erases, which a read-only device does not. So the programs a
/// wear turn allowed end here, and the writer drops and counts the pages not yet programmed.
/// Returns whether it was so: the caller then only releases what it holds for the page.
pub(crate) fn failed_on_read_only(core: &Core, addr: PageAddr) -> bool {
    if !core.is_read_only() {
        return false;
    }
    tracing::warn!("program at {addr} failed on the read-only device: no more programs");
    core.set_read_only(format!("program at {addr} failed after the turn"));
    true
}

/// The NAND time of a partial GC step's operations on a device (the real-time schemes' unit:
/// RFTL §4.4, GFTL's partial block cleaning). A copy fills a destination page with the next
/// current 4 KiB slots, which may come from as many source pages as the page has slots: an
/// array read per slot, the slots out over the channel and the page back in with its OOB,
/// and an array program (the slowest page type's; read-retry of a worn TLC/QLC block is not
/// counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StepCost {
    pub copy_ns: u64,
    pub erase_ns: u64,
    /// One page and its OOB over the channel.
    pub xfer_ns: u64,
    /// The slowest page type's program.
    pub prog_ns: u64,
    /// The slowest page type's array read.
    pub read_ns: u64,
    /// An OOB area's read: the array read and the OOB over the channel.
    pub oob_read_ns: u64,
}

impl StepCost {
    pub(crate) fn of(nand: &nand_model::NandConfig) -> StepCost {
        let t = &nand.timing;
        let g = &nand.geometry;
        let bits = t.cell.kind.bits();
        let read = (0..bits).map(|p| t.read_ns(p, 0)).max().unwrap_or(0);
        let prog_ns = (0..bits).map(|p| t.prog_ns(p)).max().unwrap_or(0);
        let xfer_ns = t.xfer_ns(u64::from(g.page_size) + u64::from(g.oob_size));
        let slots = u64::from((g.page_size / LOGICAL_PAGE as u32).max(1));
        StepCost {
            copy_ns: slots * read + 2 * xfer_ns + prog_ns,
            erase_ns: t.t_erase.as_nanos() as u64,
            xfer_ns,
            prog_ns,
            read_ns: read,
            oob_read_ns: read + t.xfer_ns(u64::from(g.oob_size)),
        }
    }

    /// Pages one step copies (as many as fit in an erase's time, at most `ppb`), or why not
    /// even one does.
    pub(crate) fn beta(&self, ppb: u32) -> Result<u32, String> {
        if self.copy_ns > self.erase_ns {
            return Err(format!(
                "a page copy ({} us: read, transfer out and in, program) takes longer than an erase ({} us), so a partial GC step cannot copy even one page within the bound",
                self.copy_ns / 1000,
                self.erase_ns / 1000
            ));
        }
        Ok((self.erase_ns / self.copy_ns.max(1)).clamp(1, u64::from(ppb)) as u32)
    }

    /// The longest a step of `beta` copies or one erase keeps the device busy.
    pub(crate) fn step_ns(&self, beta: u32) -> u64 {
        self.erase_ns.max(u64::from(beta) * self.copy_ns)
    }

    /// A host write's bound: one step, then the page's own transfer and program.
    pub(crate) fn write_bound_ns(&self, beta: u32) -> u64 {
        self.step_ns(beta) + self.xfer_ns + self.prog_ns
    }

    /// A page's read: the array read and the page over the channel.
    pub(crate) fn page_read_ns(&self) -> u64 {
        self.read_ns + self.xfer_ns
    }
}

/// A block of a logical block and the pages placed in it so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blk {
    pub block: BlockIdx,
    /// Pages placed (programmed, or reserved for a program in flight).
    pub next: u32,
}

impl Blk {
    pub(crate) fn fresh(block: BlockIdx) -> Blk {
        Blk { block, next: 0 }
    }

    pub(crate) fn free(&self, ppb: u32) -> u32 {
        ppb.saturating_sub(self.next)
    }

    /// Places the next page (a host page or a copy) and returns its index; the block is
    /// marked full after its last page.
    pub(crate) fn take_next(&mut self, core: &Core, layout: Layout) -> u32 {
        let page = self.next;
        self.next += 1;
        if self.next == layout.pages_per_block {
            set_block_state(core, layout, self.block, BlockState::Full);
        }
        page
    }
}

/// What a page holds, as the placement rules of the block-mapped schemes see it.
pub(crate) struct PageShape {
    pub(crate) lbn: u32,
    /// Each slot's logical page (`None`: padding).
    pub(crate) slots: Vec<Option<Lpn>>,
}

impl PageShape {
    pub(crate) fn of(page: &SealedPage, spb: u32) -> Option<PageShape> {
        let slots: Vec<Option<Lpn>> = page
            .slots
            .iter()
            .map(|(m, _)| (m.kind == SlotKind::Data).then_some(m.lpn))
            .collect();
        let lbn = slots.iter().flatten().next()?.0 / spb;
        Some(PageShape { lbn, slots })
    }

    /// Whether the page holds offsets `start, start + 1, ...` of its logical block, in order
    /// and without padding.
    pub(crate) fn in_order_from(&self, start: u32, spb: u32) -> bool {
        self.slots
            .iter()
            .enumerate()
            .all(|(i, s)| s.is_some_and(|l| l.0 == self.lbn * spb + start + i as u32))
    }
}

/// A free block, from bank `prefer` if it has one, else from the bank with the most. With
/// `for_merge` the GC reserve may be taken (work that frees blocks: merges, journal records).
pub(crate) fn alloc_near(
    core: &Core,
    layout: Layout,
    prefer: u32,
    for_merge: bool,
) -> Option<BlockIdx> {
    let mut order: Vec<u32> = (0..layout.banks).collect();
    order.sort_by_key(|b| {
        (
            *b != prefer,
            std::cmp::Reverse(core.bank(*b).free.load(Ordering::Acquire)),
        )
    });
    for reserve in [false, true] {
        if reserve && !for_merge {
            break;
        }
        for &b in &order {
            if let Some(block) = core.alloc_block(b, reserve) {
                return Some(layout.block_idx(BlockAddr {
                    bank: nand_model::BankId(b),
                    block,
                }));
            }
        }
    }
    None
}

/// Reads the slot at `src` (current version of `lpn`) into `buf` and returns the metadata
/// its copy carries, with the read's completion to wait for before programming the copy
/// (`None`: already waited). Data that fails its check on every retry is copied as read,
/// with its original CRC, so that it stays detectably bad.
pub(crate) fn read_for_copy(
    core: &Core,
    layout: Layout,
    lpn: Lpn,
    src: Psa,
    buf: &mut [u8],
) -> (SlotMeta, Option<Completion>) {
    let (page, slot) = layout.split(src);
    let mut oob_buf = vec![0u8; oob::slot_entry_len(slot)];
    let mut entry = None;
    for _ in 0..=core.own_read_retries() {
        match core
            .nand
            .read(page, slot * LOGICAL_PAGE as u32, buf, Some(&mut oob_buf))
        {
            Ok(c) => {
                entry = oob::slot_entry(&oob_buf, slot);
                if let Some(m) = entry.filter(|m| {
                    m.kind == SlotKind::Data && m.lpn == lpn && m.crc == crc32fast::hash(buf)
                }) {
                    return (m, Some(c));
                }
                // A retry is a new read after this one.
                c.wait();
                core.counters.crc_errors.fetch_add(1, Ordering::Relaxed);
            }
            Err(NandError::Uncorrectable { .. }) => buf.fill(0),
            Err(e) => {
                tracing::warn!("copy read of {page} failed: {e}");
                buf.fill(0);
                break;
            }
        }
        core.counters.read_retries.fetch_add(1, Ordering::Relaxed);
    }
    core.counters
        .gc_corrupt_slots
        .fetch_add(1, Ordering::Relaxed);
    core.count_uncorrectable(page.block.bank.0);
    // The entry names the page and its sequence number if it is readable; the CRC is made
    // to fail when the original is unknown.
    let meta = match entry.filter(|m| m.kind == SlotKind::Data && m.lpn == lpn) {
        Some(m) => m,
        None => SlotMeta {
            kind: SlotKind::Data,
            lpn,
            seq: 0,
            crc: !crc32fast::hash(buf),
        },
    };
    (meta, None)
}

/// A block's state in its bank's table.
pub(crate) fn block_state(core: &Core, layout: Layout, b: BlockIdx) -> BlockState {
    let addr = layout.block_addr(b);
    core.bank(addr.bank.0).alloc.lock().state[addr.block as usize]
}

/// Sets a block's state (a block turned full records the sequence number it filled at).
pub(crate) fn set_block_state(core: &Core, layout: Layout, b: BlockIdx, state: BlockState) {
    let addr = layout.block_addr(b);
    let mut a = core.bank(addr.bank.0).alloc.lock();
    a.state[addr.block as usize] = state;
    if state == BlockState::Full {
        a.filled_seq[addr.block as usize] = core.current_seq();
    }
}

/// A copy that did not complete: a program of its destination failed (the programs issued
/// before it were waited for; a failure other than a medium fault turned the device
/// read-only).
pub(crate) struct CopyFailed;

/// Programs one page of copied slots at `addr`, adding its completion to `programs` (waited
/// for by [`publish_copies`]).
pub(crate) fn program_copy(
    core: &Core,
    addr: PageAddr,
    data: &[u8],
    oob: &[u8],
    programs: &mut Vec<Completion>,
) -> Result<(), CopyFailed> {
    match core.nand.program(addr, data, oob) {
        Ok(c) => {
            core.counters
                .gc_page_programs
                .fetch_add(1, Ordering::Relaxed);
            programs.push(c);
            Ok(())
        }
        Err(e) if e.is_fault() => {
            tracing::warn!("copy program at {addr} failed: {e}; retiring the block");
            core.counters
                .program_failures
                .fetch_add(1, Ordering::Relaxed);
            for c in programs.drain(..) {
                c.wait();
            }
            Err(CopyFailed)
        }
        Err(e) => {
            core.set_read_only_after(&e, format!("copy program at {addr} failed: {e}"));
            Err(CopyFailed)
        }
    }
}

/// The pages one reclaim step copies (RFTL's and GFTL's steps): each destination page is
/// filled from the current slots of up to a page's worth of sources and programmed; the
/// copies are published together once every program is on flash.
pub(crate) struct PageCopier {
    data: Vec<u8>,
    oob: Vec<u8>,
    programs: Vec<Completion>,
    moves: Vec<(Lpn, Psa, Psa)>,
}

impl PageCopier {
    pub(crate) fn new(layout: Layout) -> PageCopier {
        PageCopier {
            data: vec![0u8; layout.page_size as usize],
            oob: vec![0u8; layout.oob_size as usize],
            programs: Vec::new(),
            moves: Vec::new(),
        }
    }

    /// Programs the page at `addr` with slot `i` holding `sources[i]` (a logical page and
    /// the slot its current version is in; `None`, or past the end: padding). Returns the
    /// slots copied; `Err` if the program failed (nothing of this copier is published).
    pub(crate) fn copy_page(
        &mut self,
        core: &Core,
        layout: Layout,
        addr: PageAddr,
        sources: &[Option<(Lpn, Psa)>],
    ) -> Result<u64, CopyFailed> {
        let sps = layout.slots_per_page as usize;
        let mut metas = Vec::with_capacity(sps);
        let mut reads = Vec::new();
        let mut copied = 0;
        for (i, buf) in self.data.chunks_mut(LOGICAL_PAGE).enumerate().take(sps) {
            match sources.get(i).copied().flatten() {
                Some((lpn, src)) => {
                    let (meta, read) = read_for_copy(core, layout, lpn, src, buf);
                    metas.push(meta);
                    reads.extend(read);
                    self.moves.push((lpn, src, layout.psa(addr, i as u32)));
                    copied += 1;
                }
                None => {
                    buf.fill(0);
                    metas.push(SlotMeta::PAD);
                }
            }
        }
        for r in reads {
            r.wait();
        }
        oob::encode_data(&mut self.oob, &metas);
        program_copy(core, addr, &self.data, &self.oob, &mut self.programs)?;
        Ok(copied)
    }

    /// Waits for the programs and publishes the copies ([`publish_copies`]).
    pub(crate) fn publish(self, core: &Core, map: &PageMap) -> u64 {
        publish_copies(core, map, self.programs, self.moves)
    }
}

/// Waits for the copies' programs (they must be on flash before the map points at them and
/// their sources can be erased), then switches each moved slot `(lpn, src, dst)` under its
/// stripe; a page the host rewrote or trimmed meanwhile keeps its new state (its copy is
/// garbage). Returns the slots moved.
pub(crate) fn publish_copies(
    core: &Core,
    map: &PageMap,
    programs: Vec<Completion>,
    moves: Vec<(Lpn, Psa, Psa)>,
) -> u64 {
    for c in programs {
        c.wait();
    }
    let mut copied = 0;
    for (lpn, src, dst) in moves {
        let stripe = core.cache.lock(lpn);
        if map.relocate(&stripe, lpn, src, dst) {
            copied += 1;
        }
    }
    core.counters.gc_copies.fetch_add(copied, Ordering::Relaxed);
    copied
}

/// What [`release_emptied`] did with a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Erased and back on its bank's free list.
    Erased,
    /// Marked bad (asked for, or its erase failed).
    Bad,
    /// Left as it is: slots in it were still held (logged).
    Held,
}

/// Erases a block that holds nothing current any more (or marks it bad with `bad`) and
/// returns it to its bank's free list. Slots a trim unmapped stay held until the trim's
/// record is on flash: the trim queue is written out first. With `wait` the erase is waited
/// for (a caller whose time bound counts it); else the bank's timeline keeps later work
/// behind it.
pub(crate) fn release_emptied(
    core: &Core,
    layout: Layout,
    map: &PageMap,
    b: BlockIdx,
    bad: bool,
    wait: bool,
) -> Released {
    let mut rounds = 0;
    while map.valid_bits(b) != 0 {
        if core.read_only_reason().is_some() {
            // Expected on a read-only device: the trim records that would free the slots
            // cannot be written any more (the device said why when it turned read-only).
            tracing::debug!(
                "block {}: {} slots still held after its pages moved (read-only); left unerased",
                b.0,
                map.valid_bits(b)
            );
            return Released::Held;
        }
        if rounds == 8 {
            tracing::error!(
                "block {}: {} slots still held after its pages moved; left unerased",
                b.0,
                map.valid_bits(b)
            );
            return Released::Held;
        }
        core.flush_queue_blocking(core.trim_queue());
        rounds += 1;
    }
    while core.pins.pinned(b) {
        std::thread::yield_now();
    }
    // A copy into the block that failed for want of room in the image's file system (the
    // schemes ask to retire a copy's destination when its program fails) was no fault of the
    // block's: it is erased, not marked bad for good.
    let bad = bad && !core.read_only_for_no_space();
    if bad {
        core.counters.retired_blocks.fetch_add(1, Ordering::Relaxed);
    }
    let (erased, done) = core.erase_or_retire_then(layout.block_addr(b), bad);
    if let Some(c) = done.filter(|_| wait) {
        c.wait();
    }
    if erased {
        Released::Erased
    } else {
        Released::Bad
    }
}

/// Blocks holding trim-log slots. A journal block is appended to until full, then kept until
/// every trim record in it is older than both checkpoints (`PageMap::prune_trim_log`), then
/// erased.
#[derive(Default)]
pub struct Journal {
    /// The block being appended to and its next page.
    pub open: Option<(BlockIdx, u32)>,
    /// Full journal blocks (and ones whose program failed: `true`, marked bad when empty).
    pub closed: Vec<(BlockIdx, bool)>,
}

impl Journal {
    /// Where the next trim-record page goes: the open journal block's next page (a full one
    /// is closed and a new one taken; trim records free the space they unmap, so they may use
    /// the merge reserve). After a wear turn too ([`Placing::AfterWearTurn`]: nothing is
    /// erased either way), until no free block is left.
    pub(crate) fn place(this: &Mutex<Journal>, core: &Core, layout: Layout) -> Target {
        let ppb = layout.pages_per_block;
        loop {
            let placing = Placing::now(core);
            if placing == Placing::Stop {
                return Target::ReadOnly;
            }
            let mut j = this.lock();
            if let Some((b, next)) = j.open {
                if next < ppb {
                    j.open = Some((b, next + 1));
                    return Target::Program(PageAddr {
                        block: layout.block_addr(b),
                        page: next,
                    });
                }
                j.closed.push((b, false));
                j.open = None;
                // Full journal blocks wait for two checkpoints to prune their records.
                if j.closed.len() >= 2 {
                    core.checkpoint_requested.store(true, Ordering::Release);
                    core.maint_wake.notify(usize::MAX);
                }
            }
            drop(j);
            match alloc_near(core, layout, 0, true) {
                Some(b) => this.lock().open = Some((b, 0)),
                None if placing == Placing::AfterWearTurn => return Target::ReadOnly,
                None => {
                    core.set_read_only("no free block for trim records".into());
                }
            }
        }
    }

    /// The blocks holding trim-log slots still live (at open: the journal blocks to keep).
    pub(crate) fn live_blocks(
        map: &PageMap,
        layout: Layout,
    ) -> std::collections::HashSet<BlockIdx> {
        map.trim_slots()
            .iter()
            .map(|(p, _)| layout.block_of(*p))
            .collect()
    }

    /// A program into journal block `b` failed: it takes no more records and goes bad once
    /// its records are pruned.
    pub(crate) fn failed(this: &Mutex<Journal>, b: BlockIdx) {
        let mut j = this.lock();
        if j.open.is_some_and(|(o, _)| o == b) {
            j.open = None;
            j.closed.push((b, true));
        }
    }

    /// Erases the journal blocks whose trim records were all pruned (after a checkpoint).
    pub(crate) fn reclaim(this: &Mutex<Journal>, core: &Core, layout: Layout, map: &PageMap) {
        let empty = |b: &BlockIdx| map.valid_bits(*b) == 0;
        // A closed block's last page may still be in flight: its slots count as valid only
        // once committed, so it would look empty and be erased under its own program (the
        // record lost, the block reused). Closed blocks get no new pages, so once every trim
        // page placed so far has committed, an empty one stays empty. Only blocks already
        // closed before the flush qualify: one closed during it (a trim page sealed meanwhile
        // filled it) may still have its last page in flight.
        let closed: Vec<BlockIdx> = {
            let j = this.lock();
            if !j.closed.iter().any(|(b, _)| empty(b)) {
                return;
            }
            j.closed.iter().map(|(b, _)| *b).collect()
        };
        core.flush_queue_blocking(core.trim_queue());
        let done: Vec<(BlockIdx, bool)> = {
            let mut j = this.lock();
            let (empty, live): (Vec<_>, Vec<_>) = j
                .closed
                .iter()
                .partition(|(b, _)| closed.contains(b) && empty(b));
            j.closed = live;
            empty
        };
        for (b, bad) in done {
            release_emptied(core, layout, map, b, bad, false);
        }
    }
}
