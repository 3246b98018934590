//! RFTL's rebuild after recovery: versions are resolved by the page scheme's rules (highest
//! sequence number wins; copies keep it), then each logical block's roles are derived from
//! where its current versions are:
//!
//! - in one block: that block is the **primary** (the host appends after its last programmed
//!   page);
//! - in two blocks: the one with more free pages is the **buffer**, the other the primary,
//!   if the buffer still has room for a fold (`k_fold` free pages: Theorem 4.1);
//! - otherwise (three blocks: a job a crash or a close left under way; a buffer too full; a
//!   block holding pages of several logical blocks, which RFTL never writes) the logical block
//!   is **compacted** at open: every current page into a fresh block, the others erased;
//! - blocks with trim records still live are journal blocks; programmed blocks holding
//!   nothing current are erased.
//!
//! A job does not survive a close: the logical blocks with one under way are compacted at
//! the next open (at most a block's copies each).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::lbn::{Blk, LbnState};
use super::RftlScheme;
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Lpn};
use crate::schemes::block_ops::{self, Journal};

impl RftlScheme {
    pub(super) fn rebuild_roles(&self, core: &Core) -> Result<()> {
        let layout = self.layout;
        let ppb = layout.pages_per_block;
        // The logical blocks with a current page in each block.
        let mut lbns_in: BTreeMap<BlockIdx, BTreeSet<u32>> = BTreeMap::new();
        for l in 0..self.lpns {
            if let Some(psa) = self.map.get(Lpn(l)) {
                lbns_in
                    .entry(layout.block_of(psa))
                    .or_default()
                    .insert(self.lbn_of(Lpn(l)));
            }
        }
        let journal = Journal::live_blocks(&self.map, layout);
        let mut blocks_of: BTreeMap<u32, Vec<BlockIdx>> = BTreeMap::new();
        let mut mixed: BTreeSet<u32> = BTreeSet::new();
        for (b, lbns) in &lbns_in {
            if journal.contains(b) {
                continue;
            }
            if lbns.len() > 1 {
                mixed.extend(lbns.iter().copied());
            }
            for &l in lbns {
                blocks_of.entry(l).or_default().push(*b);
            }
        }
        let placed = |b: BlockIdx| {
            core.nand
                .block_state(layout.block_addr(b))
                .map_or(ppb, |s| s.programmed_pages)
        };
        let mut compact: Vec<(u32, Vec<Blk>)> = Vec::new();
        for (&lbn, blocks) in &blocks_of {
            let blks: Vec<Blk> = blocks
                .iter()
                .map(|&b| Blk {
                    block: b,
                    next: placed(b),
                })
                .collect();
            let mut st = LbnState::default();
            match blks.as_slice() {
                [p] if !mixed.contains(&lbn) => st.primary = Some(*p),
                [x, y] if !mixed.contains(&lbn) => {
                    let (p, b) = if y.free(ppb) >= x.free(ppb) {
                        (*x, *y)
                    } else {
                        (*y, *x)
                    };
                    if b.free(ppb) >= self.budget.k_fold {
                        st.primary = Some(p);
                        st.buffer = Some(b);
                    } else {
                        compact.push((lbn, blks.clone()));
                    }
                }
                _ => compact.push((lbn, blks.clone())),
            }
            for blk in [st.primary, st.buffer].into_iter().flatten() {
                let state = if blk.next < ppb {
                    BlockState::Open
                } else {
                    BlockState::Full
                };
                self.set_block_state(core, blk.block, state);
            }
            *self.state[lbn as usize].lock() = st;
        }
        {
            let mut j = self.journal.lock();
            j.open = None;
            j.closed = journal.iter().map(|b| (*b, false)).collect();
        }
        if !compact.is_empty() {
            tracing::info!(
                "recovery: compacting {} logical blocks left mid-job or in a shape RFTL does not write",
                compact.len()
            );
        }
        for (lbn, blks) in compact {
            let mut st = LbnState::default();
            self.compact_with(core, lbn, &mut st, None, &blks);
            *self.state[lbn as usize].lock() = st;
        }
        // Programmed blocks that hold nothing current and belong to no one (a job's source
        // the crash kept from being erased, a half-written copy) are erased.
        let mut owned: HashSet<BlockIdx> = journal.clone();
        for st in self.state.iter() {
            owned.extend(st.lock().blocks());
        }
        for b in 0..layout.total_blocks() {
            let b = BlockIdx(b);
            if owned.contains(&b) || self.block_state(core, b) != BlockState::Full {
                continue;
            }
            if self.map.valid_bits(b) == 0 {
                block_ops::release_emptied(core, layout, &self.map, b, false, false);
            }
        }
        Ok(())
    }
}
