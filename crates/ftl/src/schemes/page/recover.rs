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

use super::map::PageMap;
use super::PageScheme;
use crate::checkpoint::Snapshot;
use crate::layout::{Layout, Psa};
use crate::recovery::Resolved;
use crate::schemes::RecoverInput;

impl PageScheme {
    /// Resolves and installs the map (see the module doc).
    pub(super) fn resolve(&self, ckpt: Option<&mut Snapshot>, input: RecoverInput) -> Resolved {
        resolve(self.layout, self.lpns, &self.map, ckpt, input)
    }
}

/// Resolves a checkpoint and a scan into `map` by the rules of the module doc. Every scheme
/// whose data slots carry (logical page, sequence number) and whose copies keep the sequence
/// number can use it (the hybrid schemes do, then derive their block roles from the map).
/// Recovery's per-page working state is what an open costs beyond the live map: the map is
/// moved (not copied) out of the checkpoint, lost flags are one bit per page.
pub(crate) fn resolve(
    layout: Layout,
    lpns: u32,
    map: &PageMap,
    mut ckpt: Option<&mut Snapshot>,
    input: RecoverInput,
) -> Resolved {
    {
        let lpns = lpns as usize;
        let mut l2p: Vec<u32> = match ckpt.as_deref_mut().map(Snapshot::take_l2p) {
            Some(v) if v.len() == lpns => v,
            _ => vec![Psa::UNMAPPED; lpns],
        };
        let ckpt = ckpt.as_deref();
        let sc = ckpt.map_or(0, |c| c.sc);
        let RecoverInput {
            erased_since,
            scans,
        } = input;
        let mut lost = vec![0u64; lpns.div_ceil(64)];
        let is_lost = |lost: &[u64], i: usize| lost[i / 64] & (1 << (i % 64)) != 0;
        for (lpn, e) in l2p.iter_mut().enumerate() {
            if *e != Psa::UNMAPPED {
                let blk = layout.block_of(Psa(*e)).0 as usize;
                if *e as u64 >= layout.total_slots()
                    || blk >= erased_since.len()
                    || erased_since[blk]
                {
                    lost[lpn / 64] |= 1 << (lpn % 64);
                    *e = Psa::UNMAPPED;
                }
            }
        }
        // best[lpn] = 1 + sequence number of the winning candidate (0: none).
        let mut best = vec![0u64; lpns];
        let mut trim_slots: Vec<(Psa, u64)> = Vec::new();
        for s in &scans {
            for &(lpn, seq, psa) in &s.data {
                let i = lpn as usize;
                if i < lpns && (seq >= sc || is_lost(&lost, i)) && seq + 1 > best[i] {
                    best[i] = seq + 1;
                    l2p[i] = psa.0;
                }
            }
            for &(start, count, seq) in &s.trims {
                if seq < sc {
                    continue;
                }
                let end = (start as usize + count as usize).min(lpns);
                for i in start as usize..end {
                    if seq + 1 > best[i] {
                        best[i] = seq + 1;
                        l2p[i] = Psa::UNMAPPED;
                    }
                }
            }
            let keep_from = ckpt.map_or(0, |c| c.prev_sc);
            trim_slots.extend(s.trim_slots.iter().filter(|(_, seq)| *seq >= keep_from));
        }
        // Suspects, after every intact candidate is known (see the module doc). They are few
        // (at most one page per scanned block): look for their twins in one pass.
        let suspects: Vec<(u32, u64, Psa)> = scans
            .iter()
            .flat_map(|s| s.suspect.iter().copied())
            .collect();
        let mut twinned = std::collections::HashSet::new();
        if !suspects.is_empty() {
            let wanted: std::collections::HashSet<(u32, u64)> =
                suspects.iter().map(|&(l, s, _)| (l, s)).collect();
            for s in &scans {
                for &(lpn, seq, _) in &s.data {
                    if wanted.contains(&(lpn, seq)) {
                        twinned.insert((lpn, seq));
                    }
                }
            }
        }
        let mut torn_slots = 0;
        for (lpn, seq, psa) in suspects {
            let i = lpn as usize;
            if twinned.contains(&(lpn, seq)) || seq >= sc {
                torn_slots += 1;
                continue;
            }
            if i < lpns && is_lost(&lost, i) && seq + 1 > best[i] {
                best[i] = seq + 1;
                l2p[i] = psa.0;
            }
        }
        let lost_pages = best
            .iter()
            .enumerate()
            .filter(|(i, b)| **b == 0 && is_lost(&lost, *i))
            .count() as u64;

        // Trim-log slots: the checkpoint's own (if their block survived) and the scanned ones.
        let mut tl = Vec::new();
        if let Some(c) = ckpt {
            for &(psa, seq) in &c.trims {
                let blk = layout.block_of(psa).0 as usize;
                if blk < erased_since.len() && !erased_since[blk] {
                    tl.push((psa, seq));
                }
            }
        }
        tl.extend(trim_slots);
        tl.sort_unstable();
        tl.dedup_by_key(|e| e.0);
        let mapped_pages = map.install(&l2p, tl);
        Resolved {
            mapped_pages,
            lost_pages,
            torn_slots,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::MapImage;
    use crate::recovery::Scan;

    fn scan(data: Vec<(u32, u64, Psa)>, suspect: Vec<(u32, u64, Psa)>) -> Scan {
        Scan {
            data,
            suspect,
            trims: Vec::new(),
            trim_slots: Vec::new(),
            max_seq: 0,
            pages: 0,
            blocks: 0,
        }
    }

    /// The three rules for suspect slots (see the module doc), each on its own page: page 1
    /// has a torn copy whose intact source is found (the source wins), page 2 a rotted copy of
    /// checkpointed data whose source is gone (it stays, so reads report it), page 3 a torn
    /// write after the checkpoint (ignored: the page keeps its previous version).
    #[test]
    fn suspects_torn_or_rotted() {
        let geo = nand_model::Geometry {
            channels: 1,
            banks_per_channel: 1,
            blocks_per_bank: 16,
            pages_per_block: 4,
            page_size: 4096,
            oob_size: 64,
        };
        let layout = Layout::new(&geo, 1);
        let scheme = PageScheme::new(layout, 8, 1);
        // Block 4 was erased since the checkpoint (its slots 16..20), block 5 was not.
        let mut erased_since = vec![false; 16];
        erased_since[4] = true;
        let mut l2p = vec![Psa::UNMAPPED; 8];
        l2p[1] = 17; // in the erased block: lost, so copies below sc count
        l2p[2] = 18; // in the erased block
        l2p[3] = 20; // intact, the previous version of page 3
        let mut snap = Snapshot {
            id: 1,
            sc: 100,
            prev_sc: 0,
            lpns: 8,
            map: MapImage::Full(l2p),
            blocks: Vec::new(),
            trims: Vec::new(),
        };
        let scans = vec![scan(
            vec![(1, 40, Psa(30))],
            vec![(1, 40, Psa(31)), (2, 50, Psa(32)), (3, 120, Psa(33))],
        )];
        let r = scheme.resolve(
            Some(&mut snap),
            RecoverInput {
                erased_since,
                scans,
            },
        );
        assert_eq!(
            scheme.map.get(crate::layout::Lpn(1)),
            Some(Psa(30)),
            "twin wins"
        );
        assert_eq!(
            scheme.map.get(crate::layout::Lpn(2)),
            Some(Psa(32)),
            "rot stays"
        );
        assert_eq!(
            scheme.map.get(crate::layout::Lpn(3)),
            Some(Psa(20)),
            "torn write ignored"
        );
        assert_eq!(r.torn_slots, 2);
        assert_eq!(r.lost_pages, 0);
    }
}
