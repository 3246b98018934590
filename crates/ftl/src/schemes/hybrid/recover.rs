//! The hybrid schemes' rebuild after recovery: versions are resolved by the page scheme's
//! rules (highest sequence number wins; merges' copies keep it), then the block roles are
//! derived from where the current versions are:
//!
//! - a block holding only pages of one logical block, each in its own slot, is that block's
//!   **data block** (the fullest such block when there are two: the other is a log);
//! - BAST: one other block holding only that logical block's pages is its **log block**;
//! - FAST: one identity block of a logical block becomes the **SW log**; any other block
//!   holding current pages is an **RW log** (closed: new writes go to fresh ones);
//! - blocks with trim records still live are **journal** blocks;
//! - a logical block whose pages are in a shape the scheme does not allow (a merge a crash
//!   left half done, or a log shared between logical blocks under BAST) is merged at once;
//! - log blocks beyond the pool are merged (logs already emptied are erased first);
//!   programmed blocks holding nothing current are erased, a block a merge emptied at once
//!   (recovery's merges must not run out of free blocks on an image full of mixed blocks).
//!
//! A clean open (after a checkpoint on close) derives the same roles the running FTL had, up
//! to the choice between two identity blocks, which merges treat alike.

use std::collections::{BTreeMap, HashSet};

use super::logs::{LogBlock, Logs};
use super::{HybridScheme, LogPolicy};
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Lpn};
use crate::schemes::block_ops::Journal;

impl HybridScheme {
    pub(super) fn rebuild_roles(&self, core: &Core) -> Result<()> {
        let layout = self.layout;
        let (spb, sps) = (self.spb, layout.slots_per_page);
        // Current slots per block: (slot in block, logical page).
        let mut per_block: BTreeMap<BlockIdx, Vec<(u32, u32)>> = BTreeMap::new();
        for l in 0..self.lpns {
            if let Some(psa) = self.map.get(Lpn(l)) {
                per_block
                    .entry(layout.block_of(psa))
                    .or_default()
                    .push((layout.slot_in_block(psa), l));
            }
        }
        let journal = Journal::live_blocks(&self.map, layout);
        let single = |v: &[(u32, u32)]| -> Option<u32> {
            let first = v.first()?.1 / spb;
            v.iter().all(|(_, l)| l / spb == first).then_some(first)
        };
        let identity = |v: &[(u32, u32)]| v.iter().all(|(s, l)| *s == l % spb);
        let mut blocks_of: BTreeMap<u32, Vec<BlockIdx>> = BTreeMap::new();
        for (b, v) in &per_block {
            // A journal block (live trim-log slots) is the journal's, never a data or log
            // block too (as in rftl and gftl): a block with both roles could be erased by a
            // merge and then released again by the journal under its next owner.
            if journal.contains(b) {
                continue;
            }
            let mut lbns: Vec<u32> = v.iter().map(|(_, l)| l / spb).collect();
            lbns.sort_unstable();
            lbns.dedup();
            for lbn in lbns {
                blocks_of.entry(lbn).or_default().push(*b);
            }
        }
        let mut logs = Logs::default();
        let mut to_merge = Vec::new();
        let mut data_blocks = HashSet::new();
        for (&lbn, blocks) in &blocks_of {
            let data = blocks
                .iter()
                .filter(|b| {
                    let v = &per_block[*b];
                    single(v) == Some(lbn) && identity(v)
                })
                .max_by_key(|b| (per_block[*b].len(), std::cmp::Reverse(b.0)))
                .copied();
            if let Some(d) = data {
                self.set_data_block(lbn, Some(d));
                data_blocks.insert(d);
            }
            let others: Vec<BlockIdx> = blocks
                .iter()
                .filter(|b| Some(**b) != data)
                .copied()
                .collect();
            let log_of = |b: BlockIdx, owner: Option<u32>, logs: &mut Logs| {
                let v = &per_block[&b];
                let next = core
                    .nand
                    .block_state(layout.block_addr(b))
                    .map_or(layout.pages_per_block, |s| s.programmed_pages);
                let mut lb = LogBlock::new(b, owner, spb, 0);
                lb.next = next;
                lb.lpns = vec![u32::MAX; (next * sps) as usize];
                for &(s, l) in v {
                    if let Some(e) = lb.lpns.get_mut(s as usize) {
                        *e = l;
                    }
                }
                lb.sequential = owner.is_some()
                    && identity(v)
                    && v.len() == lb.lpns.len()
                    && v.iter().all(|(s, _)| (*s as usize) < lb.lpns.len());
                logs.insert(lb);
            };
            match self.policy {
                LogPolicy::Bast => match others.as_slice() {
                    [] => {}
                    [g] if single(&per_block[g]) == Some(lbn) => {
                        log_of(*g, Some(lbn), &mut logs);
                        logs.by_owner.insert(lbn, *g);
                    }
                    _ => to_merge.push(lbn),
                },
                LogPolicy::Fast => {
                    for &o in &others {
                        if logs.blocks.contains_key(&o) {
                            continue;
                        }
                        let v = &per_block[&o];
                        if logs.sw.is_none() && single(v) == Some(lbn) && identity(v) {
                            log_of(o, Some(lbn), &mut logs);
                            logs.sw = Some(o);
                        } else {
                            log_of(o, None, &mut logs);
                            logs.rw_full.push_back(o);
                        }
                    }
                }
            }
        }
        // Under BAST a block holding pages of several logical blocks is no one's log: every
        // logical block with pages in it is merged, which empties it.
        if self.policy == LogPolicy::Bast {
            for (b, v) in &per_block {
                if single(v).is_none() && !journal.contains(b) {
                    let mut lbns: Vec<u32> = v.iter().map(|(_, l)| l / spb).collect();
                    lbns.sort_unstable();
                    lbns.dedup();
                    for l in lbns {
                        if let Some(g) = logs.by_owner.remove(&l) {
                            logs.blocks.remove(&g);
                        }
                        if let Some(d) = self.data_block(l).filter(|d| d == b) {
                            data_blocks.remove(&d);
                            self.set_data_block(l, None);
                        }
                        to_merge.push(l);
                    }
                }
            }
        }
        for b in logs.blocks.keys() {
            self.set_block_state(core, *b, BlockState::Open);
        }
        for b in &data_blocks {
            self.set_block_state(core, *b, BlockState::Full);
        }
        let log_count = logs.blocks.len();
        *self.logs.lock() = logs;
        {
            let mut j = self.journal.lock();
            j.open = None;
            j.closed = journal.iter().map(|b| (*b, false)).collect();
        }
        to_merge.sort_unstable();
        to_merge.dedup();
        if !to_merge.is_empty() || log_count > self.log_limit as usize {
            tracing::info!(
                "recovery: merging {} logical blocks left half merged; {log_count} log blocks for a pool of {}",
                to_merge.len(),
                self.log_limit
            );
        }
        // A read-only device (opened so, or damaged) merges nothing: it would change the image
        // (and its programs are refused). Reads go by the map, whatever shape the roles have.
        if core.is_read_only() {
            to_merge.clear();
        }
        for lbn in to_merge {
            self.locks.lock(lbn, || false);
            self.merge_lbn(core, lbn, false);
            self.locks.unlock(lbn);
            // A block that held pages of this logical block and of others is erased as soon as
            // its last current page has moved, not at the sweep below: each merge takes a fresh
            // block, and with many mixed blocks (an image with forged OOBs) the merges would
            // run out of free blocks long before the sweep.
            for &b in blocks_of.get(&lbn).into_iter().flatten() {
                self.release_if_emptied(core, b, &per_block[&b]);
            }
        }
        // A pool formatted smaller than what the crash left: merge down to it. Logs that the
        // merges emptied go first (an erase, no copy). Without that, a pool of mixed blocks
        // (FAST on an image with forged OOBs: every block holding a page of another logical
        // block is a random log) ran out of free blocks: each reclaim takes a fresh block per
        // logical block it merges, while the logs those merges emptied stayed queued.
        while self.logs.lock().blocks.len() > self.log_limit as usize && !core.is_read_only() {
            let emptied: Vec<BlockIdx> = {
                let logs = self.logs.lock();
                let over = logs.blocks.len() - self.log_limit as usize;
                logs.blocks
                    .keys()
                    .copied()
                    .filter(|b| self.map.valid_bits(*b) == 0)
                    .take(over)
                    .collect()
            };
            if !emptied.is_empty() {
                for b in emptied {
                    if self.logs.lock().remove(b).is_some() {
                        self.release_block(core, b, None, false);
                    }
                }
                continue;
            }
            let done = match self.policy {
                LogPolicy::Bast => self.reclaim_bast(core, u32::MAX),
                LogPolicy::Fast => self.reclaim_fast(core, u32::MAX),
            };
            if !done {
                break;
            }
        }
        // Programmed blocks that hold nothing current (a merge's source the crash kept from
        // being erased, a half-written copy) are erased.
        let logs = self.logs.lock();
        let keep: HashSet<BlockIdx> = logs
            .blocks
            .keys()
            .copied()
            .chain((0..self.lbns).filter_map(|l| self.data_block(l)))
            .chain(journal.iter().copied())
            .collect();
        drop(logs);
        for b in 0..layout.total_blocks() {
            let b = BlockIdx(b);
            if keep.contains(&b) || self.block_state(core, b) != BlockState::Full {
                continue;
            }
            if self.map.valid_bits(b) == 0 {
                self.release_block(core, b, None, false);
            }
        }
        Ok(())
    }

    /// Erases block `b` if it is programmed and holds nothing current (no valid bit: current,
    /// held-for-a-trim and trim-log slots all count), and is no one's log or data block.
    /// `pages` are the (slot, logical page) pairs it held before recovery's merges; a data
    /// block among them always holds current pages, so the check on them is a second guard.
    fn release_if_emptied(&self, core: &Core, b: BlockIdx, pages: &[(u32, u32)]) {
        if self.block_state(core, b) != BlockState::Full
            || self.map.valid_bits(b) != 0
            || self.logs.lock().blocks.contains_key(&b)
            || pages
                .iter()
                .any(|&(_, l)| self.data_block(l / self.spb) == Some(b))
        {
            return;
        }
        self.release_block(core, b, None, false);
    }

    /// Erases the journal blocks whose trim records were all pruned (after a checkpoint).
    pub(super) fn reclaim_journal(&self, core: &Core) {
        Journal::reclaim(&self.journal, core, self.layout, &self.map);
    }
}
