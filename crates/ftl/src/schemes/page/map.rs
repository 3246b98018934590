//! The page scheme's address map: the L2P table, the valid-slot bitmap and the live trim log,
//! with one owner so that they change together.
//!
//! # Structure
//! - `l2p`: one `AtomicU32` per exported logical page holding a [`Psa`] or `Psa::UNMAPPED`
//!   (4 bytes per exported 4 KiB page — the whole table's cost), plus one change bit per chunk
//!   of `CHUNK` entries for incremental checkpoints.
//! - `valid`: one bit per physical slot and a count per block (GC's victim choice), never
//!   changed except by the methods here.
//! - `trim_log`: trim-log slots that must survive GC (those newer than the older checkpoint).
//!
//! # Invariant (2) of the design page, kept here
//! A slot's valid bit is set iff `l2p` or the trim log points at it, or it is a *zombie*: a
//! slot [`PageMap::unmap`] took out of `l2p` whose trim record is not on flash yet (it is
//! released by [`PageMap::release`] once the record is), or a *late zombie*: an older slot
//! whose program completed after a trim unmapped its page, before that trim's record was on
//! flash (see [`PageMap::commit_page`]; released when the record's slot commits). Every method
//! that moves an entry moves its valid bit in the same call: [`PageMap::commit`] (a programmed
//! slot becomes a page's newest version), [`PageMap::relocate`] (GC moved it),
//! [`PageMap::unmap`] / `release` (trim), `hold_for_pending_trim` / `trims_durable` (late
//! zombies), [`PageMap::log_trim_slot`] / `relocate_trim_slot` / `prune_trim_log`. The one
//! exception is recovery, before the map is shared: the checkpoint's entries
//! (`MapSink::store`) and the scan's (`table()`) go in without their bits, and
//! [`PageMap::rebuild_valid`] then sets every bit from the table. [`PageMap::check`] verifies it.
//!
//! # Locking
//! An entry changes only under its page's stripe lock (`cache::WriteCache`), which the
//! mutating methods take as a witness (`&Stripe`). Valid bits and counts are atomics; the trim
//! log and the pending trims have a mutex each, taken after a stripe (never the reverse) and
//! never together.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use nand_model::PageAddr;

use crate::buffer::{decode_trims, SealedPage, TrimRecord};
use crate::cache::Stripe;
use crate::checkpoint::{MapImage, MapSink, MapSource, CHUNK};
use crate::core::Core;
use crate::layout::{BlockIdx, Layout, Lpn, Psa};
use crate::oob::SlotKind;
use crate::schemes::CheckpointPayload;

/// Valid bitmaps and counts of every block. Private: only [`PageMap`] changes them.
struct ValidSlots {
    layout: Layout,
    words_per_block: usize,
    bitmap: Box<[AtomicU64]>,
    count: Box<[AtomicU32]>,
    /// Valid slots on the whole device (the GC's yardstick for a worthwhile victim).
    total: AtomicU64,
}

impl ValidSlots {
    fn new(layout: Layout) -> ValidSlots {
        let blocks = layout.total_blocks() as usize;
        let words_per_block = (layout.slots_per_block() as usize).div_ceil(64);
        ValidSlots {
            layout,
            words_per_block,
            bitmap: (0..blocks * words_per_block)
                .map(|_| AtomicU64::new(0))
                .collect(),
            count: (0..blocks).map(|_| AtomicU32::new(0)).collect(),
            total: AtomicU64::new(0),
        }
    }

    fn bit(&self, psa: Psa) -> (usize, u64, usize) {
        let blk = self.layout.block_of(psa).0 as usize;
        let s = self.layout.slot_in_block(psa) as usize;
        (blk * self.words_per_block + s / 64, 1u64 << (s % 64), blk)
    }

    /// Marks a slot valid; returns false if it already was.
    fn set(&self, psa: Psa) -> bool {
        let (w, m, blk) = self.bit(psa);
        let was = self.bitmap[w].fetch_or(m, Ordering::AcqRel) & m != 0;
        if !was {
            self.count[blk].fetch_add(1, Ordering::AcqRel);
            self.total.fetch_add(1, Ordering::Relaxed);
        }
        !was
    }

    /// Marks a slot invalid; returns whether it was valid.
    fn clear(&self, psa: Psa) -> bool {
        let (w, m, blk) = self.bit(psa);
        let was = self.bitmap[w].fetch_and(!m, Ordering::AcqRel) & m != 0;
        if was {
            self.count[blk].fetch_sub(1, Ordering::AcqRel);
            self.total.fetch_sub(1, Ordering::Relaxed);
        }
        was
    }

    fn is_set(&self, psa: Psa) -> bool {
        let (w, m, _) = self.bit(psa);
        self.bitmap[w].load(Ordering::Acquire) & m != 0
    }

    fn bits(&self, b: BlockIdx) -> u32 {
        let w = b.0 as usize * self.words_per_block;
        self.bitmap[w..w + self.words_per_block]
            .iter()
            .map(|x| x.load(Ordering::Acquire).count_ones())
            .sum()
    }

    fn clear_all(&self) {
        self.bitmap
            .iter()
            .for_each(|w| w.store(0, Ordering::Release));
        self.count
            .iter()
            .for_each(|v| v.store(0, Ordering::Release));
        self.total.store(0, Ordering::Release);
    }

    fn memory_bytes(&self) -> usize {
        self.bitmap.len() * 8 + self.count.len() * 4
    }
}

/// The L2P table, valid bitmap and trim log (see the module doc).
pub struct PageMap {
    l2p: Box<[AtomicU32]>,
    /// One bit per chunk of `CHUNK` entries changed since the last checkpoint (what an
    /// incremental checkpoint writes).
    dirty: Box<[AtomicU64]>,
    valid: ValidSlots,
    trim_log: Mutex<Vec<(Psa, u64)>>,
    /// Per block: its zombies (slots [`PageMap::unmap`] took out whose trim records are not
    /// on flash yet) and late zombies (`hold_for_pending_trim`). GC tells a slot held by a
    /// trim on its way from one that nothing will ever release (an OOB that names another
    /// page: a hostile or damaged image).
    zombies: Box<[AtomicU32]>,
    /// Trim records buffered but not on flash yet, with their late zombies (see
    /// [`PageMap::commit_page`]). Entered under the stripes of the record's range
    /// ([`PageMap::trim_buffered`]); left when the record's trim-log slot commits.
    /// Keyed by sequence number (a record's own, unique).
    pending_trims: Mutex<BTreeMap<u64, PendingTrim>>,
    /// Entries of `pending_trims`, changed under its mutex and read without it: a slot's
    /// commit skips the mutex when no trim is pending. (A trim of the slot's page enters the
    /// list under the page's stripe lock, which the commit holds: it sees the count.)
    pending_count: AtomicUsize,
}

/// A trim record on its way to flash, and the slots it holds that it did not unmap itself.
struct PendingTrim {
    rec: TrimRecord,
    /// Slots of its pages programmed with older sequence numbers after it unmapped them: the
    /// newest programmed versions until the record is on flash.
    late: Vec<Psa>,
}

impl PageMap {
    /// A map of `lpns` entries over `layout`, all unmapped, every slot invalid.
    pub fn new(layout: Layout, lpns: u32) -> PageMap {
        PageMap {
            l2p: (0..lpns).map(|_| AtomicU32::new(Psa::UNMAPPED)).collect(),
            dirty: (0..(lpns as usize).div_ceil(CHUNK as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            valid: ValidSlots::new(layout),
            trim_log: Mutex::new(Vec::new()),
            zombies: (0..layout.total_blocks())
                .map(|_| AtomicU32::new(0))
                .collect(),
            pending_trims: Mutex::new(BTreeMap::new()),
            pending_count: AtomicUsize::new(0),
        }
    }

    /// Starts loading `lpn`'s entry into the cache. GC calls it (with the stripe's prefetch)
    /// before it locks the stripe: both are usually cold there (GC visits logical pages at
    /// random), and a lock's atomic instruction would otherwise wait for its own miss before
    /// the entry's load could even start.
    pub fn prefetch(&self, lpn: Lpn) {
        #[cfg(target_arch = "x86_64")]
        if let Some(e) = self.l2p.get(lpn.0 as usize) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it is part of the
            // x86_64 baseline the crate is built for). A prefetch is only a hint: it reads
            // nothing into the program and never faults; the pointer is to a live entry.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(e).cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = lpn;
    }

    /// Where `lpn`'s newest flushed version lives; `None` also for an LPN past the device,
    /// which only a damaged or hostile OOB names (GC salvaging a page whose OOB fails its CRC
    /// asks the map whether each entry's LPN names this slot; an index panicked there). Callers
    /// that act on the value (pin a block, compare) hold the page's stripe.
    pub fn get(&self, lpn: Lpn) -> Option<Psa> {
        match self.l2p.get(lpn.0 as usize)?.load(Ordering::Acquire) {
            Psa::UNMAPPED => None,
            v => Some(Psa(v)),
        }
    }

    fn swap(&self, lpn: Lpn, psa: Option<Psa>) -> Option<Psa> {
        let c = (lpn.0 / CHUNK) as usize;
        let (w, bit) = (&self.dirty[c / 64], 1u64 << (c % 64));
        // Read first: after the first change of a chunk its word is only read, not bounced.
        if w.load(Ordering::Relaxed) & bit == 0 {
            w.fetch_or(bit, Ordering::AcqRel);
        }
        let v = psa.map_or(Psa::UNMAPPED, |p| p.0);
        match self.l2p[lpn.0 as usize].swap(v, Ordering::AcqRel) {
            Psa::UNMAPPED => None,
            old => Some(Psa(old)),
        }
    }

    /// A programmed slot `psa` becomes `lpn`'s newest version; the slot it replaces becomes
    /// garbage. `_stripe` is `lpn`'s stripe, held.
    pub fn commit(&self, _stripe: &Stripe, lpn: Lpn, psa: Psa) {
        let old = self.swap(lpn, Some(psa));
        self.valid.set(psa);
        if let Some(old) = old {
            self.valid.clear(old);
        }
    }

    /// GC copied `lpn`'s slot from `src` to `dst`: switch to the copy unless a newer write or
    /// a trim replaced `src` meanwhile (then the copy is garbage). Returns whether it switched.
    pub fn relocate(&self, _stripe: &Stripe, lpn: Lpn, src: Psa, dst: Psa) -> bool {
        if self.get(lpn) != Some(src) {
            return false;
        }
        self.swap(lpn, Some(dst));
        self.valid.set(dst);
        self.valid.clear(src);
        true
    }

    /// Trim: unmaps `lpn` and returns its slot, which stays valid (a zombie, so GC keeps its
    /// block) until [`PageMap::release`] says the trim's record is on flash.
    pub fn unmap(&self, _stripe: &Stripe, lpn: Lpn) -> Option<Psa> {
        let old = self.swap(lpn, None);
        if let Some(p) = old {
            self.count_zombie(p);
        }
        old
    }

    fn count_zombie(&self, p: Psa) {
        if let Some(z) = self.zombies.get(self.valid.layout.block_of(p).0 as usize) {
            z.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A trim record was made and is on its way to flash; the caller holds the stripes of
    /// every page of its range (so no slot of these pages can commit between the unmap and
    /// this).
    pub fn trim_buffered(&self, rec: TrimRecord) {
        let mut pending = self.pending_trims.lock();
        pending.insert(
            rec.seq,
            PendingTrim {
                rec,
                late: Vec::new(),
            },
        );
        self.pending_count.store(pending.len(), Ordering::Release);
    }

    /// Called for a data slot of `lpn` numbered `seq` that a trim or a newer committed
    /// version superseded before it could commit: if a trim of the page newer than the slot
    /// has its record still in RAM, the slot may be the newest programmed version a crash
    /// leaves (the trim lost, the newer version perhaps not programmed yet), so it must not be
    /// erased: it becomes that record's late zombie. (When a newer version is already on
    /// flash the hold is not needed, only harmless: it ends with the record.) Returns whether
    /// it held the slot.
    fn hold_for_pending_trim(&self, lpn: Lpn, seq: u64, psa: Psa) -> bool {
        if self.pending_count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut pending = self.pending_trims.lock();
        let Some(t) = pending
            .range_mut(seq + 1..)
            .map(|(_, t)| t)
            .find(|t| lpn.0.wrapping_sub(t.rec.start) < t.rec.count)
        else {
            return false;
        };
        if self.valid.set(psa) {
            self.count_zombie(psa);
            t.late.push(psa);
        }
        true
    }

    /// The trim records of a trim-log slot are on flash: they leave the pending list and
    /// their late zombies are released.
    pub(crate) fn trims_durable(&self, slot: &[u8]) {
        let Some(recs) = decode_trims(slot) else {
            return;
        };
        let mut late = Vec::new();
        {
            let mut pending = self.pending_trims.lock();
            for r in recs {
                if let Some(mut t) = pending.remove(&r.seq) {
                    debug_assert_eq!(t.rec, r, "two trim records share a sequence number");
                    late.append(&mut t.late);
                }
            }
            self.pending_count.store(pending.len(), Ordering::Release);
        }
        for z in late {
            self.release(z);
        }
    }

    /// Trim records buffered and not on flash yet, and the late zombies they hold (for the
    /// invariant check).
    pub(crate) fn pending_trims(&self) -> (Vec<TrimRecord>, Vec<Psa>) {
        let pending = self.pending_trims.lock();
        (
            pending.values().map(|t| t.rec).collect(),
            pending
                .values()
                .flat_map(|t| t.late.iter().copied())
                .collect(),
        )
    }

    /// A zombie's trim record is on flash: its slot is garbage now.
    pub fn release(&self, zombie: Psa) {
        self.valid.clear(zombie);
        if let Some(z) = self
            .zombies
            .get(self.valid.layout.block_of(zombie).0 as usize)
        {
            let before = z.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            debug_assert!(
                before.is_ok(),
                "{zombie:?} released more often than unmapped"
            );
        }
    }

    /// Logical pages the map holds.
    pub fn lpns(&self) -> u32 {
        self.l2p.len() as u32
    }

    /// Zombies in block `b` (read before its valid count: a release in between then errs
    /// towards "still held").
    pub fn zombies_in(&self, b: BlockIdx) -> u32 {
        self.zombies
            .get(b.0 as usize)
            .map_or(0, |z| z.load(Ordering::Acquire))
    }

    /// A programmed trim-log slot: live (valid) until [`PageMap::prune_trim_log`] drops it.
    pub fn log_trim_slot(&self, psa: Psa, seq: u64) {
        let mut tl = self.trim_log.lock();
        self.valid.set(psa);
        tl.push((psa, seq));
    }

    /// GC copied a trim-log slot; returns whether it was live (and now lives at `dst`).
    pub fn relocate_trim_slot(&self, src: Psa, dst: Psa) -> bool {
        let mut tl = self.trim_log.lock();
        let Some(e) = tl.iter_mut().find(|e| e.0 == src) else {
            return false;
        };
        e.0 = dst;
        self.valid.set(dst);
        self.valid.clear(src);
        true
    }

    /// Commits the slots of `page`, programmed at `addr` (`Scheme::commit` of every scheme on
    /// this map): a data slot becomes its page's newest programmed version if the overlay
    /// still holds its sequence number, or a newer one it may commit under (`Buffered::floor`:
    /// a flushed version must stay on flash until the write that supersedes it is there too).
    /// Otherwise a trim or a newer committed version superseded it. A trim whose record is not
    /// on flash yet leaves it the newest version a crash would recover (the slot the trim
    /// unmapped is older): it is held as the record's late zombie, or a FUA write (or one a
    /// flush sealed) acknowledged meanwhile could be erased by GC or a merge and an older
    /// version come back after a power cut. Else the slot stays garbage.
    /// A trim-log slot joins the live trim log and its records' late zombies are released; so
    /// are the slots the page's trim records unmapped.
    pub(crate) fn commit_page(
        &self,
        core: &Core,
        layout: Layout,
        page: &SealedPage,
        addr: PageAddr,
    ) {
        for (i, (meta, data)) in page.slots.iter().enumerate() {
            let psa = layout.psa(addr, i as u32);
            match meta.kind {
                SlotKind::Data => {
                    let mut st = core.cache.lock(meta.lpn);
                    match st.overlay.get_mut(&meta.lpn.0) {
                        Some(b) if b.seq == meta.seq => {
                            st.overlay.remove(&meta.lpn.0);
                            self.commit(&st, meta.lpn, psa);
                        }
                        Some(b) if b.seq > meta.seq && meta.seq >= b.floor => {
                            b.floor = meta.seq + 1;
                            self.commit(&st, meta.lpn, psa);
                        }
                        _ => {
                            if self.hold_for_pending_trim(meta.lpn, meta.seq, psa) {
                                // Its record is what frees the slot: write it out soon.
                                core.trims_pending.store(true, Ordering::Release);
                            }
                        }
                    }
                }
                SlotKind::TrimLog => {
                    self.log_trim_slot(psa, meta.seq);
                    if let Some(bytes) = data {
                        self.trims_durable(bytes);
                    }
                }
                SlotKind::Pad => {}
            }
        }
        for z in &page.zombies {
            self.release(*z);
        }
    }

    /// Whether the next checkpoint should be a full one (more than half the chunks changed).
    pub fn prefers_full_checkpoint(&self) -> bool {
        self.dirty_chunks() * 2 > self.chunks()
    }

    /// The map's part of a checkpoint: the whole table or the chunks changed since the last
    /// one, and the live trim-log slots.
    pub(crate) fn checkpoint_payload(&self, full: bool) -> CheckpointPayload {
        let map = if full {
            self.clear_dirty();
            MapImage::Full(self.snapshot())
        } else {
            MapImage::Delta(self.take_dirty())
        };
        CheckpointPayload {
            map,
            trims: self.trim_slots(),
        }
    }

    /// Drops the trim-log slots older than `keep_from` (no recovery path needs them any more).
    pub fn prune_trim_log(&self, keep_from: u64) {
        self.trim_log.lock().retain(|(psa, seq)| {
            let keep = *seq >= keep_from;
            if !keep {
                self.valid.clear(*psa);
            }
            keep
        });
    }

    /// The live trim-log slots (for a checkpoint).
    pub fn trim_slots(&self) -> Vec<(Psa, u64)> {
        self.trim_log.lock().clone()
    }

    /// The table itself, for recovery's in-place resolution (before the FTL is shared).
    pub(crate) fn table(&self) -> &[AtomicU32] {
        &self.l2p
    }

    /// Finishes recovery's rebuild (before the FTL is shared): the table was filled in place
    /// (checkpoint, then the scan); sets the valid bits it and the live trim-log slots imply.
    /// A slot two entries point at (only a corrupt checkpoint can say so) stays with the first
    /// and the later entry is unmapped, so no page can read another's data. Returns the number
    /// of mapped pages.
    pub fn rebuild_valid(&self, trim_slots: Vec<(Psa, u64)>) -> u64 {
        self.valid.clear_all();
        let mut mapped = 0;
        for (lpn, e) in self.l2p.iter().enumerate() {
            let v = e.load(Ordering::Acquire);
            if v == Psa::UNMAPPED {
                continue;
            }
            if self.valid.set(Psa(v)) {
                mapped += 1;
            } else {
                tracing::warn!(
                    "recovery: page {lpn} maps slot {v}, which another page maps; unmapped"
                );
                e.store(Psa::UNMAPPED, Ordering::Release);
            }
        }
        // A trim-log slot holds trim records, never a page: one a page maps (only a corrupt
        // checkpoint can list it) is dropped, or pruning it would clear the page's valid bit
        // and GC would erase the page's only copy.
        let trim_slots: Vec<(Psa, u64)> = trim_slots
            .into_iter()
            .filter(|&(psa, _)| {
                let fresh = self.valid.set(psa);
                if !fresh {
                    tracing::warn!(
                        "recovery: trim-log slot {} is a mapped page's slot; dropped",
                        psa.0
                    );
                }
                fresh
            })
            .collect();
        *self.trim_log.lock() = trim_slots;
        mapped
    }

    /// A full checkpoint's payload read from the live table (the caller holds every mutation
    /// off until it is written): clears the change tracking, returns the table and the live
    /// trim-log slots.
    pub(crate) fn checkpoint_live(&self) -> (&dyn MapSource, Vec<(Psa, u64)>) {
        self.clear_dirty();
        (self, self.trim_slots())
    }

    pub fn is_valid(&self, psa: Psa) -> bool {
        self.valid.is_set(psa)
    }

    /// Valid slots of a block (by its count).
    pub fn valid_count(&self, b: BlockIdx) -> u32 {
        self.valid.count[b.0 as usize].load(Ordering::Acquire)
    }

    /// Valid bits actually set in a block's bitmap (the count's ground truth).
    pub fn valid_bits(&self, b: BlockIdx) -> u32 {
        self.valid.bits(b)
    }

    /// Valid slots on the whole device.
    pub fn valid_total(&self) -> u64 {
        self.valid.total.load(Ordering::Relaxed)
    }

    /// A copy of the raw table (for checkpoints; the caller has quiesced all writers).
    pub fn snapshot(&self) -> Vec<u32> {
        self.l2p.iter().map(|e| e.load(Ordering::Acquire)).collect()
    }

    /// Number of map chunks.
    pub fn chunks(&self) -> usize {
        self.l2p.len().div_ceil(CHUNK as usize)
    }

    /// Number of chunks changed since the last checkpoint.
    pub fn dirty_chunks(&self) -> usize {
        self.dirty
            .iter()
            .map(|w| w.load(Ordering::Acquire).count_ones() as usize)
            .sum()
    }

    /// Forgets the change tracking (a full checkpoint covers everything).
    pub fn clear_dirty(&self) {
        self.dirty
            .iter()
            .for_each(|w| w.store(0, Ordering::Release));
    }

    /// Takes the changed chunks and their entries, clearing their change bits (the caller has
    /// quiesced all writers).
    pub fn take_dirty(&self) -> Vec<(u32, Vec<u32>)> {
        let mut out = Vec::new();
        for (wi, w) in self.dirty.iter().enumerate() {
            let mut bits = w.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let c = wi * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let start = c * CHUNK as usize;
                let end = (start + CHUNK as usize).min(self.l2p.len());
                let entries = self.l2p[start..end]
                    .iter()
                    .map(|e| e.load(Ordering::Acquire))
                    .collect();
                out.push((c as u32, entries));
            }
        }
        out
    }

    /// Checks invariant (2) (the caller holds every mutation off): no slot mapped twice, every
    /// mapped, trim-log or zombie slot valid, and every block's valid count equal to its bits
    /// and to the slots pointing into it. `zombies` are the slots unmapped by trims whose
    /// records are not on flash yet (in the queues' open pages; none may be in flight); the
    /// late zombies those records hold are the map's own.
    /// Returns the valid slots per block for the caller's block-state checks.
    pub fn check(&self, zombies: &[Psa]) -> Result<Vec<u32>, String> {
        let layout = self.valid.layout;
        let mut expect = vec![0u32; layout.total_blocks() as usize];
        let mut seen = std::collections::HashSet::new();
        let mut zombies_per_block = vec![0u32; layout.total_blocks() as usize];
        for (l, e) in self.l2p.iter().enumerate() {
            let v = e.load(Ordering::Acquire);
            if v == Psa::UNMAPPED {
                continue;
            }
            let psa = Psa(v);
            if v as u64 >= layout.total_slots() {
                return Err(format!("lpn {l} maps to {psa:?}, past the device"));
            }
            if !seen.insert(psa) {
                return Err(format!("slot {psa:?} mapped twice (lpn {l})"));
            }
            if !self.is_valid(psa) {
                return Err(format!("lpn {l} maps to {psa:?} whose valid bit is clear"));
            }
            expect[layout.block_of(psa).0 as usize] += 1;
        }
        for (psa, _) in self.trim_log.lock().iter() {
            if !seen.insert(*psa) {
                return Err(format!("trim slot {psa:?} also mapped"));
            }
            if !self.is_valid(*psa) {
                return Err(format!("trim slot {psa:?} has its valid bit clear"));
            }
            expect[layout.block_of(*psa).0 as usize] += 1;
        }
        let (_, late) = self.pending_trims();
        for psa in zombies.iter().chain(&late) {
            if u64::from(psa.0) >= layout.total_slots() {
                return Err(format!("zombie {psa:?} past the device"));
            }
            if !seen.insert(*psa) {
                return Err(format!(
                    "zombie {psa:?} is also mapped, logged or listed twice"
                ));
            }
            if !self.is_valid(*psa) {
                return Err(format!("zombie {psa:?} has its valid bit clear"));
            }
            expect[layout.block_of(*psa).0 as usize] += 1;
            zombies_per_block[layout.block_of(*psa).0 as usize] += 1;
        }
        for (b, n) in zombies_per_block.iter().enumerate() {
            let counted = self.zombies_in(BlockIdx(b as u32));
            if counted != *n {
                return Err(format!(
                    "block {b}: {counted} zombies counted, {n} trim records waiting hold slots there"
                ));
            }
        }
        for (b, e) in expect.iter().enumerate() {
            let got = self.valid_count(BlockIdx(b as u32));
            let bits = self.valid_bits(BlockIdx(b as u32));
            if bits != got {
                return Err(format!(
                    "block {b}: valid count {got} but {bits} valid bits"
                ));
            }
            if got != *e {
                return Err(format!("block {b}: valid count {got}, expected {e}"));
            }
        }
        Ok(expect)
    }

    /// Bytes of RAM the map and bitmaps use (grow with the device).
    pub fn memory_bytes(&self) -> usize {
        self.l2p.len() * 4 + self.dirty.len() * 8 + self.valid.memory_bytes()
    }
}

impl MapSource for PageMap {
    fn entries(&self) -> usize {
        self.l2p.len()
    }
    fn read(&self, start: usize, out: &mut [u32]) {
        for (o, e) in out.iter_mut().zip(&self.l2p[start..]) {
            *o = e.load(Ordering::Acquire);
        }
    }
}

impl MapSink for PageMap {
    fn entries(&self) -> usize {
        self.l2p.len()
    }
    fn store(&self, start: usize, v: &[u32]) {
        for (e, x) in self.l2p[start..].iter().zip(v) {
            e.store(*x, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nand_model::Geometry;

    fn map() -> PageMap {
        let geo = Geometry {
            channels: 1,
            banks_per_channel: 2,
            blocks_per_bank: 8,
            pages_per_block: 4,
            page_size: 8192,
            oob_size: 128,
        };
        PageMap::new(Layout::new(&geo, 1), 20)
    }

    #[test]
    fn every_change_keeps_map_and_bits_in_step() {
        let m = map();
        let s = Stripe::default();
        assert_eq!(m.get(Lpn(3)), None);
        m.commit(&s, Lpn(3), Psa(7));
        assert_eq!(m.get(Lpn(3)), Some(Psa(7)));
        m.commit(&s, Lpn(3), Psa(9));
        assert!(!m.is_valid(Psa(7)) && m.is_valid(Psa(9)));
        // A relocation from a slot the page no longer lives at is refused.
        assert!(!m.relocate(&s, Lpn(3), Psa(7), Psa(11)));
        assert!(m.relocate(&s, Lpn(3), Psa(9), Psa(40)));
        let blk = m.valid.layout.block_of(Psa(40)).0 as usize;
        assert_eq!(m.check(&[]).map(|e| e[blk]), Ok(1));
        // Trim: the slot stays valid until released.
        assert_eq!(m.unmap(&s, Lpn(3)), Some(Psa(40)));
        assert!(m.is_valid(Psa(40)));
        assert!(m.check(&[]).is_err(), "a zombie is not pointed at");
        assert!(m.check(&[Psa(40)]).is_ok(), "unless it is listed as one");
        assert!(m.check(&[Psa(40), Psa(40)]).is_err(), "listed twice");
        m.release(Psa(40));
        m.log_trim_slot(Psa(1), 5);
        assert!(m.relocate_trim_slot(Psa(1), Psa(2)));
        assert!(!m.relocate_trim_slot(Psa(1), Psa(3)));
        assert_eq!(m.check(&[]).map(|e| e.iter().sum::<u32>()), Ok(1));
        m.prune_trim_log(6);
        assert_eq!(m.valid_total(), 0);
        assert_eq!(m.check(&[]).map(|e| e.iter().sum::<u32>()), Ok(0));
        assert_eq!(m.snapshot()[3], Psa::UNMAPPED);
    }

    #[test]
    fn rebuild_sets_the_bits_of_what_it_maps() {
        let m = map();
        m.store(0, &[4]);
        m.store(19, &[63]);
        // A slot mapped twice (a corrupt checkpoint): the second entry loses it.
        m.store(7, &[4]);
        // A trim-log slot a page maps (a corrupt checkpoint again) is dropped: pruning it
        // would clear the page's valid bit.
        assert_eq!(m.rebuild_valid(vec![(Psa(10), 1), (Psa(63), 2)]), 2);
        assert_eq!(m.valid_total(), 3);
        assert_eq!((m.get(Lpn(0)), m.get(Lpn(7))), (Some(Psa(4)), None));
        assert_eq!(m.trim_slots(), vec![(Psa(10), 1)]);
        assert!(m.check(&[]).is_ok());
        m.prune_trim_log(5);
        assert!(m.is_valid(Psa(63)), "the page's slot stays valid");
        m.prefetch(Lpn(19));
        m.prefetch(Lpn(u32::MAX));
    }

    /// Late zombies: a slot older than a pending trim of its page is held (valid, counted as a
    /// zombie of its block) until that trim's record is durable, released exactly once; a slot
    /// newer than every pending trim, or one whose trim is durable already, is not held.
    #[test]
    fn a_pending_trim_holds_older_slots_of_its_pages_until_its_record_is_durable() {
        use crate::buffer::encode_trims;
        let m = map();
        let blk = |p: u32| m.valid.layout.block_of(Psa(p));
        assert!(
            !m.hold_for_pending_trim(Lpn(3), 1, Psa(8)),
            "nothing pending"
        );
        let (t1, t2) = (
            TrimRecord {
                start: 2,
                count: 4,
                seq: 10,
            },
            TrimRecord {
                start: 4,
                count: 4,
                seq: 12,
            },
        );
        m.trim_buffered(t1);
        m.trim_buffered(t2);
        assert!(
            !m.hold_for_pending_trim(Lpn(1), 5, Psa(8)),
            "outside both ranges"
        );
        assert!(
            !m.hold_for_pending_trim(Lpn(3), 11, Psa(8)),
            "newer than the trim of page 3"
        );
        assert!(m.hold_for_pending_trim(Lpn(3), 5, Psa(8)));
        assert!(
            m.hold_for_pending_trim(Lpn(5), 11, Psa(9)),
            "older than the second trim"
        );
        assert!(
            m.hold_for_pending_trim(Lpn(4), 3, Psa(40)),
            "covered by both"
        );
        assert!(m.is_valid(Psa(8)) && m.is_valid(Psa(9)) && m.is_valid(Psa(40)));
        assert_eq!(m.zombies_in(blk(8)), 2);
        assert_eq!(m.zombies_in(blk(40)), 1);
        assert_eq!(m.pending_trims().0, vec![t1, t2]);
        assert_eq!(m.check(&[]).map(|e| e.iter().sum::<u32>()), Ok(3));
        // The first record on flash: its late zombies (and only those) go.
        m.trims_durable(&encode_trims(&[t1]));
        assert!(!m.is_valid(Psa(8)) && !m.is_valid(Psa(40)) && m.is_valid(Psa(9)));
        assert_eq!((m.zombies_in(blk(8)), m.zombies_in(blk(40))), (1, 0));
        // Reported twice (it cannot be, but a replayed slot must not release again).
        m.trims_durable(&encode_trims(&[t1]));
        assert_eq!(m.zombies_in(blk(8)), 1);
        assert!(m.check(&[]).is_ok());
        m.trims_durable(&encode_trims(&[t2]));
        assert_eq!((m.valid_total(), m.zombies_in(blk(9))), (0, 0));
        assert_eq!(m.pending_trims(), (vec![], vec![]));
        assert!(
            !m.hold_for_pending_trim(Lpn(5), 11, Psa(9)),
            "its trim is durable"
        );
        assert!(!m.is_valid(Psa(9)));
        // A malformed slot releases nothing and does not panic.
        m.trim_buffered(t1);
        m.trims_durable(&[0xff; 8]);
        assert_eq!(m.pending_trims().0, vec![t1]);
    }
}
