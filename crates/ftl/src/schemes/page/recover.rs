//! The page scheme's recovery rules: from the checkpoint's map and the scan of what was
//! programmed after it, per logical page ("highest sequence number wins"):
//! - a data slot or trim record numbered `>= sc` was written after the checkpoint: the highest
//!   such number wins over the checkpoint's entry;
//! - a data slot numbered `< sc` in a scanned page can only be a GC copy made after the
//!   checkpoint. It matters only when the checkpoint's entry points into a block that has been
//!   erased since ("lost"); then the highest such copy is the checkpointed version, moved;
//! - otherwise the checkpoint's entry stands.
//!
//! Suspects (data slots of a block's last programmed page that fail their CRCs: the crash may
//! have torn them, or they rotted) are judged one by one:
//! - a suspect whose twin (same page, same sequence number) was found intact is a torn GC
//!   copy, or a copy of rot: the twin decides (GC erases a source only after its copy is
//!   complete, so a torn copy always has its source);
//! - a suspect numbered `< sc` is a GC copy of data the checkpoint held as durable, made
//!   before the crash's last operation (its source is gone): it is rot, and stays a candidate
//!   so that reads of it report an error instead of an older version;
//! - a suspect numbered `>= sc` with no twin is the write the crash interrupted: ignored, the
//!   page keeps its previous version (a write that rotted in exactly this place after the last
//!   checkpoint cannot be told from a torn one, and is treated as torn).
//!
//! Trim-log slots stay live if they are newer than the older checkpoint (`prev_sc`), so falling
//! back to it loses no trim.
//!
//! # In place, as the scan goes
//! The checkpoint's map is already in the live table; each bank's scan thread offers every
//! intact data slot at once (`offer`), which replaces the entry with a compare-and-swap when it
//! wins. No sequence number is kept per page: when the entry was itself found by the scan
//! (its slot lies at or past its block's `scan_from`), its number is read from its page's OOB
//! again (`Scanner::slot_seq`), once per conflict, unless the range of numbers offered in the
//! entry's block already lies wholly above or below the offer (16 bytes per block; a
//! checkpoint entry pointing past its block's `scan_from` is corrupt and treated as lost, so
//! every entry there was offered and lies in its block's range); an entry whose slot cannot be read again
//! (the medium failed during the open) is left as it is rather than decided blindly. Equal numbers (a GC copy and its intact
//! source) go to the higher slot, so the outcome does not depend on which thread came first.
//! Then suspects, then trims (each entry decided once, by the newest trim covering it; an
//! entry in a block whose scanned sequence numbers all lie on one side of the trim is decided
//! without reading it again). So an open needs the live table plus a bit per page (lost flags;
//! trim coverage) and 16 bytes per block, however much is scanned. A suspect whose twin was found but is not the newest version is ignored without
//! being counted as torn (its twin cannot be told apart from another older copy without a
//! per-page record).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::map::PageMap;
use super::PageScheme;
use crate::checkpoint::Checkpoint;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{Layout, Psa};
use crate::recovery::{Resolved, Scanner, SlotVersion, Unreadable};
use crate::schemes::RecoverInput;

impl PageScheme {
    /// Resolves and installs the map (see the module doc).
    pub(super) fn resolve(
        &self,
        core: &Core,
        ckpt: Option<&Checkpoint>,
        input: RecoverInput,
    ) -> Result<Resolved> {
        resolve(core, self.layout, self.lpns, &self.map, ckpt, input)
    }
}

/// A bitmap of one bit per logical page.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &bits)| {
            let mut b = bits;
            std::iter::from_fn(move || {
                (b != 0).then(|| {
                    let i = w * 64 + b.trailing_zeros() as usize;
                    b &= b - 1;
                    i
                })
            })
        })
    }
}

/// Resolves a checkpoint (whose map is in `map`'s table) and a scan into `map` by the rules of
/// the module doc. Every scheme whose data slots carry (logical page, sequence number) and
/// whose copies keep the sequence number can use it (the hybrid schemes do, then derive their
/// block roles from the map).
pub(crate) fn resolve(
    scanner: &dyn Scanner,
    layout: Layout,
    lpns: u32,
    map: &PageMap,
    ckpt: Option<&Checkpoint>,
    input: RecoverInput,
) -> Result<Resolved> {
    let lpns = lpns as usize;
    let table: &[AtomicU32] = map.table();
    let table = &table[..lpns.min(table.len())];
    let lpns = table.len();
    let sc = ckpt.map_or(0, |c| c.sc);
    let RecoverInput {
        erased_since,
        scan_from,
        ranges,
        bad,
    } = input;
    // A slot the scan found (at or past its block's first page programmed after the
    // checkpoint), as opposed to one the checkpoint holds.
    let scanned = |v: u32| {
        let (addr, _) = layout.split(Psa(v));
        let blk = layout.block_of(Psa(v)).0 as usize;
        scan_from.get(blk).is_some_and(|&from| addr.page >= from)
    };
    // Checkpointed entries whose block was erased since (or that point nowhere valid) are
    // lost: a GC copy found by the scan may restore them.
    let mut lost = Bits::new(lpns);
    for (i, e) in table.iter().enumerate() {
        let v = e.load(Ordering::Acquire);
        if v == Psa::UNMAPPED {
            continue;
        }
        let blk = layout.block_of(Psa(v));
        // A checkpoint cannot point at a page programmed after it (at or past its block's
        // `scan_from`): such an entry is corrupt, and would break the rule below that every
        // entry in the scanned part of a block was offered by the scan.
        if u64::from(v) >= layout.total_slots()
            || erased_since.get(blk.0 as usize).is_none_or(|&e| e)
            || layout.is_reserved(layout.block_addr(blk))
            || scanned(v)
        {
            lost.set(i);
            e.store(Psa::UNMAPPED, Ordering::Release);
        }
    }
    // Entries left as they were because their slot could not be read again (the medium
    // failed during the open): nothing could be decided against them.
    let unreadable = AtomicU64::new(0);
    // What entry `v` of page `i` is, when the scan found it (`None`: unmapped, or the
    // checkpoint's, which everything the scan offers is newer than).
    let current = |i: usize, v: u32| {
        (v != Psa::UNMAPPED && scanned(v)).then(|| {
            let r = scanner.slot_seq(Psa(v), i as u32);
            if r == SlotVersion::Unreadable {
                unreadable.fetch_add(1, Ordering::Relaxed);
            }
            r
        })
    };
    // Per block, the lowest and highest sequence numbers offered so far (16 bytes per block).
    // Every entry in the scanned part of a block was offered (see the checkpoint's entries
    // above), before its compare-and-swap, so its number lies in its block's range: an offer
    // outside that range is decided without reading the entry's OOB again. Blocks the host
    // filled hold a narrow range; GC's destinations, holding copies of all ages, do not.
    let range_lo: Vec<AtomicU64> = (0..layout.total_blocks())
        .map(|_| AtomicU64::new(u64::MAX))
        .collect();
    let range_hi: Vec<AtomicU64> = (0..layout.total_blocks())
        .map(|_| AtomicU64::new(0))
        .collect();
    let by_range = |v: u32, seq: u64| {
        let b = layout.block_of(Psa(v)).0 as usize;
        let (lo, hi) = (range_lo.get(b)?, range_hi.get(b)?);
        let (lo, hi) = (lo.load(Ordering::Acquire), hi.load(Ordering::Acquire));
        if lo > hi {
            None
        } else if seq > hi {
            Some(false)
        } else if seq < lo {
            Some(true)
        } else {
            None
        }
    };
    // A copy in a good block wins over one of the same version in a bad block (GC copies
    // keep the sequence number: a retired block's data was copied out before it was marked).
    let good = |v: u32| {
        !bad.get(layout.block_of(Psa(v)).0 as usize)
            .is_some_and(|&b| b)
    };
    // Data slots, as the bank threads find them.
    let offer = |lpn: u32, seq: u64, psa: Psa| {
        let i = lpn as usize;
        if i >= lpns || !(seq >= sc || lost.get(i)) {
            return;
        }
        let b = layout.block_of(psa).0 as usize;
        if let (Some(lo), Some(hi)) = (range_lo.get(b), range_hi.get(b)) {
            lo.fetch_min(seq, Ordering::AcqRel);
            hi.fetch_max(seq, Ordering::AcqRel);
        }
        let e = &table[i];
        let mut cur = e.load(Ordering::Acquire);
        loop {
            // Whether the entry holds a newer version (or one that cannot be read again).
            let keep = match (cur != Psa::UNMAPPED && scanned(cur))
                .then(|| by_range(cur, seq))
                .flatten()
            {
                Some(newer) => newer,
                None => match current(i, cur) {
                    Some(SlotVersion::Of(cs)) => (cs, good(cur), cur) >= (seq, good(psa.0), psa.0),
                    Some(SlotVersion::Unreadable) => true,
                    _ => false,
                },
            };
            if keep {
                return;
            }
            match e.compare_exchange_weak(cur, psa.0, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    };
    let scans = scanner.scan(&ranges, &offer)?;

    // Suspects (see the module doc): few, at most one page per scanned block.
    let mut torn_slots = 0;
    for (lpn, seq, psa) in scans.iter().flat_map(|s| s.suspect.iter().copied()) {
        let i = lpn as usize;
        let cur = table.get(i).map(|e| e.load(Ordering::Acquire));
        let cur = cur.and_then(|v| current(i, v));
        if cur == Some(SlotVersion::Of(seq)) || seq >= sc {
            // Its twin is the newest version, or it is the write the crash interrupted.
            torn_slots += 1;
            continue;
        }
        let older = match cur {
            Some(SlotVersion::Of(c)) => c < seq,
            Some(SlotVersion::Unreadable) => false,
            Some(SlotVersion::Other) | None => true,
        };
        if i < lpns && lost.get(i) && older {
            // Rot of a moved copy whose source is gone: it stays, so a read reports it.
            table[i].store(psa.0, Ordering::Release);
        }
    }

    // Trims after the checkpoint, newest first: each entry is decided by the newest trim
    // covering it (it stays only if its version is newer still).
    let mut trims: Vec<(u32, u32, u64)> = scans
        .iter()
        .flat_map(|s| s.trims.iter().copied())
        .filter(|t| t.2 >= sc)
        .collect();
    trims.sort_unstable_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut trimmed = Bits::new(if trims.is_empty() { 0 } else { lpns });
    // Each scanned block's range of sequence numbers (only with trims to decide: 16 bytes
    // per block): an entry in a block wholly older or newer than a trim needs no reading.
    let mut bounds: Vec<(u64, u64)> = Vec::new();
    if !trims.is_empty() {
        bounds = vec![(u64::MAX, 0); layout.total_blocks() as usize];
        for &(blk, lo, hi) in scans.iter().flat_map(|s| s.block_seqs.iter()) {
            if let Some(b) = bounds.get_mut(blk as usize) {
                *b = (b.0.min(lo), b.1.max(hi));
            }
        }
    }
    let bound = |v: u32| {
        bounds
            .get(layout.block_of(Psa(v)).0 as usize)
            .copied()
            .filter(|(lo, hi)| lo <= hi)
    };
    for &(start, count, seq) in &trims {
        let end = (start as usize).saturating_add(count as usize).min(lpns);
        for (i, e) in table.iter().enumerate().take(end).skip(start as usize) {
            if trimmed.get(i) {
                continue;
            }
            trimmed.set(i);
            let v = e.load(Ordering::Acquire);
            if v == Psa::UNMAPPED {
                continue;
            }
            let older = match (scanned(v), bound(v)) {
                // The checkpoint's: older than every trim after it.
                (false, _) => true,
                (true, Some((_, hi))) if hi < seq => true,
                (true, Some((lo, _))) if lo > seq => false,
                _ => match current(i, v) {
                    Some(SlotVersion::Of(c)) => c < seq,
                    Some(SlotVersion::Unreadable) => false,
                    Some(SlotVersion::Other) | None => true,
                },
            };
            if older {
                e.store(Psa::UNMAPPED, Ordering::Release);
            }
        }
    }
    // Lost: checkpointed, erased since, and neither a copy nor a trim found.
    let mut lost: Vec<u32> = lost
        .ones()
        .filter(|&i| {
            table[i].load(Ordering::Acquire) == Psa::UNMAPPED
                && (trimmed.0.is_empty() || !trimmed.get(i))
        })
        .map(|i| i as u32)
        .collect();
    // Lost too: the newest version is in a block marked bad (found by the scan of its spare
    // areas, or the checkpoint's and not erased since). Unmapped, and named so a read fails.
    if bad.iter().any(|&b| b) {
        for (i, e) in table.iter().enumerate() {
            let v = e.load(Ordering::Acquire);
            if v != Psa::UNMAPPED
                && bad
                    .get(layout.block_of(Psa(v)).0 as usize)
                    .is_some_and(|&b| b)
            {
                e.store(Psa::UNMAPPED, Ordering::Release);
                lost.push(i as u32);
            }
        }
        lost.sort_unstable();
        lost.dedup();
    }
    let lost_pages = lost.len() as u64;

    // Trim-log slots: the checkpoint's own (if their block survived) and the scanned ones.
    let keep_from = ckpt.map_or(0, |c| c.prev_sc);
    let mut tl = Vec::new();
    if let Some(c) = ckpt {
        for &(psa, seq) in &c.trims {
            // A trim-log slot is kept live (valid, its block a journal block) until it is
            // pruned, and then its block may be erased: one that names the superblock, a
            // checkpoint area or no slot at all is not ours (a corrupt checkpoint).
            if u64::from(psa.0) >= layout.total_slots()
                || layout.is_reserved(layout.block_addr(layout.block_of(psa)))
            {
                tracing::warn!(
                    "recovery: the checkpoint lists slot {} as a trim-log slot, outside the \
                     data blocks; ignored",
                    psa.0
                );
                continue;
            }
            let blk = layout.block_of(psa).0 as usize;
            if blk < erased_since.len() && !erased_since[blk] {
                tl.push((psa, seq));
            }
        }
    }
    for s in &scans {
        tl.extend(s.trim_slots.iter().filter(|(_, seq)| *seq >= keep_from));
    }
    tl.sort_unstable();
    tl.dedup_by_key(|e| e.0);
    let unreadable = unreadable.into_inner();
    if unreadable > 0 {
        tracing::warn!(
            "recovery: {unreadable} time(s) a version's slot could not be read again; \
             the entry was kept as the scan left it"
        );
    }
    let mapped_pages = map.rebuild_valid(tl);
    let scanned_totals = scans.iter().fold((0, 0, 0), |(p, b, m), s| {
        (p + s.pages, b + s.blocks, m.max(s.max_seq + 1))
    });
    Ok(Resolved {
        scanned: scanned_totals,
        mapped_pages,
        lost_pages,
        lost,
        torn_slots,
        unreadable_pages: scans
            .iter()
            .fold(Unreadable::default(), |u, s| u.add(s.unreadable)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::{OnData, Scan};

    /// A scan of slots given by hand: `data` are intact, `suspect` fail their CRC.
    struct Given {
        data: Vec<(u32, u64, Psa)>,
        suspect: Vec<(u32, u64, Psa)>,
        trims: Vec<(u32, u32, u64)>,
        /// Slots whose second reading fails.
        unreadable: Vec<Psa>,
        /// Second readings so far.
        reads: AtomicU64,
    }

    impl Given {
        fn new(
            data: Vec<(u32, u64, Psa)>,
            suspect: Vec<(u32, u64, Psa)>,
            trims: Vec<(u32, u32, u64)>,
            unreadable: Vec<Psa>,
        ) -> Given {
            Given {
                data,
                suspect,
                trims,
                unreadable,
                reads: AtomicU64::new(0),
            }
        }
    }

    impl Scanner for Given {
        fn scan(&self, _ranges: &[Vec<(u32, u32, u32)>], on_data: OnData<'_>) -> Result<Vec<Scan>> {
            // Newest first, so the order of offers is not what makes the newest win.
            for &(l, s, p) in self.data.iter().rev() {
                on_data(l, s, p);
            }
            // Blocks of 4 slots (the test geometry).
            let mut block_seqs: Vec<(u32, u64, u64)> = Vec::new();
            for &(_, seq, psa) in self.data.iter().chain(&self.suspect) {
                match block_seqs.iter_mut().find(|b| b.0 == psa.0 / 4) {
                    Some(b) => *b = (b.0, b.1.min(seq), b.2.max(seq)),
                    None => block_seqs.push((psa.0 / 4, seq, seq)),
                }
            }
            Ok(vec![Scan {
                suspect: self.suspect.clone(),
                trims: self.trims.clone(),
                trim_slots: Vec::new(),
                max_seq: 0,
                pages: 0,
                blocks: 0,
                block_seqs,
                unreadable: Unreadable::default(),
            }])
        }

        fn slot_seq(&self, psa: Psa, lpn: u32) -> SlotVersion {
            self.reads.fetch_add(1, Ordering::Relaxed);
            if self.unreadable.contains(&psa) {
                return SlotVersion::Unreadable;
            }
            self.data
                .iter()
                .chain(&self.suspect)
                .find(|&&(l, _, p)| p == psa && l == lpn)
                .map_or(SlotVersion::Other, |&(_, s, _)| SlotVersion::Of(s))
        }
    }

    fn scheme() -> PageScheme {
        let geo = nand_model::Geometry {
            channels: 1,
            banks_per_channel: 1,
            blocks_per_bank: 16,
            pages_per_block: 4,
            page_size: 4096,
            oob_size: 64,
        };
        PageScheme::new(Layout::new(&geo, 1), 8, 1, Default::default())
    }

    /// Block 4 (slots 16..20) was erased since the checkpoint; blocks 5 and 6 (20..28) are
    /// as the checkpoint saw them; 7 and 8 (28..36) were programmed after it.
    fn input() -> RecoverInput {
        let mut erased_since = vec![false; 16];
        erased_since[4] = true;
        let mut scan_from = vec![4; 16];
        scan_from[4] = 0;
        scan_from[7] = 0;
        scan_from[8] = 0;
        RecoverInput {
            erased_since,
            scan_from,
            ranges: Vec::new(),
            bad: vec![false; 16],
        }
    }

    fn checkpoint(map: &PageMap, l2p: &[(usize, u32)]) -> Checkpoint {
        for &(l, p) in l2p {
            crate::checkpoint::MapSink::store(map, l, &[p]);
        }
        Checkpoint {
            id: 1,
            sc: 100,
            prev_sc: 0,
            lpns: 8,
            blocks: Vec::new(),
            trims: Vec::new(),
            scheme_state: Vec::new(),
        }
    }

    /// A version in a block marked bad loses a tie to the same version (a GC copy keeps the
    /// sequence number) in a good block, whichever is offered first and whatever the slots'
    /// order; a page whose newest version is only in the bad block is lost, not mapped there
    /// and not left to an older version.
    #[test]
    fn a_bad_block_s_copy_loses_the_tie_and_its_only_versions_are_lost() {
        for swap in [false, true] {
            let scheme = scheme();
            let ck = checkpoint(&scheme.map, &[(6, 20)]);
            // Blocks 7 (slots 28..32) and 8 (32..36) are scanned; 8 is bad, at higher slots.
            let mut data = vec![(5, 150, Psa(29)), (5, 150, Psa(33)), (6, 160, Psa(34))];
            if swap {
                data.swap(0, 1);
            }
            let given = Given::new(data, Vec::new(), Vec::new(), Vec::new());
            let mut inp = input();
            inp.bad[8] = true;
            let r =
                resolve(&given, scheme.layout, 8, &scheme.map, Some(&ck), inp).expect("resolves");
            let get = |l| scheme.map.get(crate::layout::Lpn(l));
            assert_eq!(get(5), Some(Psa(29)), "swap {swap}: the good block's copy");
            assert_eq!(
                get(6),
                None,
                "swap {swap}: not the bad block, not the older version"
            );
            assert_eq!((r.lost_pages, r.lost.clone()), (1, vec![6]), "swap {swap}");
        }
    }

    /// The three rules for suspect slots (see the module doc), each on its own page: page 1
    /// has a torn copy whose intact source is found (the source wins), page 2 a rotted copy of
    /// checkpointed data whose source is gone (it stays, so reads report it), page 3 a torn
    /// write after the checkpoint (ignored: the page keeps its previous version).
    #[test]
    fn suspects_torn_or_rotted() {
        let scheme = scheme();
        // 1 and 2 in the erased block: lost, so copies below sc count; 3 intact.
        let ck = checkpoint(&scheme.map, &[(1, 17), (2, 18), (3, 20)]);
        let given = Given::new(
            vec![(1, 40, Psa(30))],
            vec![(1, 40, Psa(31)), (2, 50, Psa(32)), (3, 120, Psa(33))],
            Vec::new(),
            Vec::new(),
        );
        let r =
            resolve(&given, scheme.layout, 8, &scheme.map, Some(&ck), input()).expect("resolves");
        let get = |l| scheme.map.get(crate::layout::Lpn(l));
        assert_eq!(get(1), Some(Psa(30)), "twin wins");
        assert_eq!(get(2), Some(Psa(32)), "rot stays");
        assert_eq!(get(3), Some(Psa(20)), "torn write ignored");
        assert_eq!(r.torn_slots, 2);
        assert_eq!(r.lost_pages, 0);
    }

    /// Trim-log slots a checkpoint lists in the superblock's block or past the device are not
    /// ours: left out, so they never make a reserved block a journal block the FTL erases.
    #[test]
    fn checkpoint_trim_slots_outside_the_data_blocks_are_ignored() {
        let scheme = scheme();
        let mut ck = checkpoint(&scheme.map, &[]);
        ck.trims = vec![(Psa(0), 5), (Psa(24), 5), (Psa(1000), 5)];
        assert!(scheme
            .layout
            .is_reserved(scheme.layout.block_addr(crate::layout::BlockIdx(0))));
        let given = Given::new(Vec::new(), Vec::new(), Vec::new(), Vec::new());
        resolve(&given, scheme.layout, 8, &scheme.map, Some(&ck), input()).expect("resolves");
        assert_eq!(scheme.map.trim_slots(), vec![(Psa(24), 5)]);
    }

    /// Versions against the checkpoint, one another and trims: the highest number wins
    /// whatever the order of the offers; a copy below `sc` counts only for a lost page; a trim
    /// removes only what is older than itself; a tie between a copy and its source goes to the
    /// higher slot; a lost page nothing restores is counted.
    #[test]
    fn newest_version_wins() {
        let scheme = scheme();
        let ck = checkpoint(
            &scheme.map,
            &[(0, 20), (1, 21), (2, 17), (4, 22), (5, 24), (6, 19)],
        );
        let given = Given::new(
            vec![
                (0, 150, Psa(28)),
                (0, 170, Psa(29)),
                (0, 160, Psa(30)),
                (1, 50, Psa(31)), // below sc, page not lost: ignored
                (2, 60, Psa(32)), // below sc, page lost: the moved copy
                (2, 60, Psa(34)), // and its twin: the higher slot wins
                (3, 130, Psa(33)),
                (5, 180, Psa(35)),
            ],
            Vec::new(),
            // Trim 3..6 at 175: removes 3 (130) and 4 (checkpointed), not 5 (180).
            vec![(3, 3, 175), (0, 1, 165)],
            Vec::new(),
        );
        let r =
            resolve(&given, scheme.layout, 8, &scheme.map, Some(&ck), input()).expect("resolves");
        let got: Vec<Option<Psa>> = (0..8)
            .map(|l| scheme.map.get(crate::layout::Lpn(l)))
            .collect();
        assert_eq!(
            got,
            vec![
                Some(Psa(29)),
                Some(Psa(21)),
                Some(Psa(34)),
                None,
                None,
                Some(Psa(35)),
                None,
                None
            ]
        );
        // Page 6 was in the erased block and nothing restored or trimmed it.
        assert_eq!(r.lost_pages, 1);
        assert_eq!(r.mapped_pages, 4);
    }

    /// A version whose slot cannot be read again (the medium failed during the open) is not
    /// replaced by an offer it cannot be compared with, nor unmapped by a trim, nor covered by
    /// a rotted copy.
    #[test]
    fn an_unreadable_winner_is_kept() {
        let scheme = scheme();
        let ck = checkpoint(&scheme.map, &[]);
        // Offered last to first: 28 is installed first, then 29 (older) is offered. A trim
        // between them: the block's range (140-150) does not decide it, so 28 is read again.
        let given = Given::new(
            vec![(0, 140, Psa(29)), (0, 150, Psa(28))],
            Vec::new(),
            vec![(0, 1, 145)],
            vec![Psa(28)],
        );
        resolve(&given, scheme.layout, 8, &scheme.map, Some(&ck), input()).expect("resolves");
        assert_eq!(scheme.map.get(crate::layout::Lpn(0)), Some(Psa(28)));
    }

    /// A trim newer (or older) than every version in an entry's block is decided without
    /// reading the slot again: 8 entries, one trim over all of them, no second reading.
    #[test]
    fn a_block_wholly_on_one_side_of_a_trim_is_not_read_again() {
        for (trim, want) in [(500, None), (100, Some(()))] {
            let scheme = scheme();
            let ck = checkpoint(&scheme.map, &[]);
            // Pages 0..8 in blocks 7 and 8 (slots 28..36), numbered 200..208.
            let data = (0..8u32)
                .map(|l| (l, 200 + u64::from(l), Psa(28 + l)))
                .collect();
            let given = Given::new(data, Vec::new(), vec![(0, 8, trim)], Vec::new());
            resolve(&given, scheme.layout, 8, &scheme.map, Some(&ck), input()).expect("resolves");
            for l in 0..8u32 {
                let got = scheme.map.get(crate::layout::Lpn(l)).map(|_| ());
                assert_eq!(got, want, "trim at {trim}, page {l}");
            }
            // Offers re-read nothing either: each page was offered once.
            assert_eq!(given.reads.load(Ordering::Relaxed), 0, "trim at {trim}");
        }
    }

    /// Versions in blocks whose numbers do not overlap are decided without reading either
    /// again, whichever is offered first; a checkpoint entry pointing at a page programmed
    /// after the checkpoint (corrupt) is treated as lost, not compared.
    #[test]
    fn versions_in_disjoint_blocks_are_not_read_again() {
        for newest_first in [true, false] {
            let scheme = scheme();
            // Page 5 points into block 7, which the scan covers from page 0.
            let ck = checkpoint(&scheme.map, &[(5, 30)]);
            // Pages 0..4: numbered 200.. in block 7 (slots 28..32), 300.. in block 8 (32..36).
            let old = (0..4u32).map(|l| (l, 200 + u64::from(l), Psa(28 + l)));
            let new = (0..4u32).map(|l| (l, 300 + u64::from(l), Psa(32 + l)));
            // `Given` offers its list last to first.
            let data: Vec<_> = if newest_first {
                old.chain(new).collect()
            } else {
                new.chain(old).collect()
            };
            let given = Given::new(data, Vec::new(), Vec::new(), Vec::new());
            let r = resolve(&given, scheme.layout, 8, &scheme.map, Some(&ck), input())
                .expect("resolves");
            for l in 0..4u32 {
                assert_eq!(
                    scheme.map.get(crate::layout::Lpn(l)),
                    Some(Psa(32 + l)),
                    "page {l}, newest offered first: {newest_first}"
                );
            }
            assert_eq!(given.reads.load(Ordering::Relaxed), 0, "{newest_first}");
            assert_eq!(scheme.map.get(crate::layout::Lpn(5)), None);
            assert_eq!(r.lost_pages, 1);
        }
    }
}
