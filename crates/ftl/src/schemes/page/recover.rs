//! The page scheme's recovery rules: from the checkpoint's map and the scan of what was
//! programmed after it, per logical page ("highest sequence number wins"):
//! - a data slot or trim record numbered `>= sc` was written after the checkpoint: the highest
//!   such number wins over the checkpoint's entry;
//! - a data slot numbered `< sc` in a scanned page can only be a GC copy made after the
//!   checkpoint. It matters only when the checkpoint's entry points into a block that has been
//!   erased since ("lost"); then the highest such copy is the checkpointed version, moved;
//! - otherwise the checkpoint's entry stands.
//!
//! Trim-log slots stay live if they are newer than the older checkpoint (`prev_sc`), so falling
//! back to it loses no trim.

use super::PageScheme;
use crate::checkpoint::Snapshot;
use crate::layout::{Layout, Psa};
use crate::recovery::Resolved;
use crate::schemes::RecoverInput;

impl PageScheme {
    /// Resolves and installs the map (see the module doc). Recovery's per-page working state is
    /// what an open costs beyond the live map: the map is moved (not copied) out of the
    /// checkpoint, lost flags are one bit per page.
    pub(super) fn resolve(
        &self,
        layout: Layout,
        lpns: u32,
        mut ckpt: Option<&mut Snapshot>,
        input: RecoverInput,
    ) -> Resolved {
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
            ..
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
        let mapped_pages = self.map.install(&l2p, tl);
        Resolved {
            mapped_pages,
            lost_pages,
        }
    }
}
