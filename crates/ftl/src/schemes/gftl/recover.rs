//! GFTL's rebuild after recovery: versions are resolved by the page scheme's rules (highest
//! sequence number wins; copies keep it), then the roles are derived from where the current
//! versions are:
//!
//! - a block whose current slots all belong to one logical block is that logical block's
//!   **data block** (of several such blocks, the one with the most current slots; the host
//!   appends after its last programmed page). A buffer block that held only one logical
//!   block's current pages may become its data block: a data block may hold its pages in
//!   any order, so that is a state GFTL could have reached;
//! - every other block with current slots is a **buffer** block (full: a partly written one
//!   is not appended to any more), and the logical blocks with a current page outside their
//!   data block are **queued** for a merge, in logical-block order;
//! - blocks with trim records still live are journal blocks; programmed blocks holding
//!   nothing current are erased.
//!
//! A merge does not survive a close: its logical block has pages outside its data block
//! (the old data block, or the destination), so it is queued again.

use std::collections::{BTreeMap, HashSet};

use super::GftlScheme;
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Lpn};
use crate::schemes::block_ops::{self, Blk, Journal};

/// What the current slots of a block say about its role.
#[derive(Default)]
struct Seen {
    /// The one logical block its current slots belong to (`None` after a second one).
    lbn: Option<u32>,
    mixed: bool,
    slots: u32,
}

impl GftlScheme {
    pub(super) fn rebuild_roles(&self, core: &Core) -> Result<()> {
        let layout = self.layout;
        let ppb = layout.pages_per_block;
        let journal = Journal::live_blocks(&self.map, layout);
        let mut seen: BTreeMap<BlockIdx, Seen> = BTreeMap::new();
        for l in 0..self.lpns {
            let Some(psa) = self.map.get(Lpn(l)) else {
                continue;
            };
            let b = layout.block_of(psa);
            if journal.contains(&b) {
                continue;
            }
            let lbn = self.lbn_of(Lpn(l));
            let e = seen.entry(b).or_insert(Seen {
                lbn: Some(lbn),
                ..Seen::default()
            });
            if e.lbn != Some(lbn) {
                e.mixed = true;
            }
            e.slots += 1;
        }
        let mut data: BTreeMap<u32, (BlockIdx, u32)> = BTreeMap::new();
        for (b, e) in &seen {
            let Some(lbn) = e.lbn.filter(|_| !e.mixed) else {
                continue;
            };
            let better = data.get(&lbn).is_none_or(|(_, n)| e.slots > *n);
            if better {
                data.insert(lbn, (*b, e.slots));
            }
        }
        let placed = |b: BlockIdx| {
            core.nand
                .block_state(layout.block_addr(b))
                .map_or(ppb, |s| s.programmed_pages)
        };
        let data_blocks: HashSet<BlockIdx> = data.values().map(|(b, _)| *b).collect();
        for (&lbn, &(b, _)) in &data {
            let d = Blk {
                block: b,
                next: placed(b),
            };
            let state = if d.next < ppb {
                BlockState::Open
            } else {
                BlockState::Full
            };
            self.set_block_state(core, b, state);
            self.set_role(b, super::Role::Data);
            self.state[lbn as usize].lock().data = Some(d);
        }
        {
            let mut pool = self.pool.lock();
            *pool = Default::default();
            for b in seen.keys().filter(|b| !data_blocks.contains(b)) {
                self.set_block_state(core, *b, BlockState::Full);
                self.set_role(*b, super::Role::Buffer);
                pool.closed.push_back((*b, false));
            }
            pool.held = pool.closed.len() as u32;
            pool.max_blocks = pool.held;
            self.bound_applies
                .store(pool.held == 0, std::sync::atomic::Ordering::Relaxed);
        }
        for lbn in 0..self.lbns {
            let d = self.state[lbn as usize].lock().data.map(|d| d.block);
            if self.has_pages_outside(lbn, d) {
                self.enqueue(lbn);
            }
        }
        {
            let mut j = self.journal.lock();
            j.open = None;
            j.closed = journal.iter().map(|b| (*b, false)).collect();
        }
        let queued = self.queue.lock().len();
        if queued > 0 {
            tracing::info!(
                "recovery: {queued} logical blocks have pages in GFTL's write buffer and are queued for a merge"
            );
        }
        // Programmed blocks that hold nothing current and belong to no one (an emptied buffer
        // block, a merge's old block the crash kept from being erased, a half-written copy)
        // are erased.
        for b in 0..layout.total_blocks() {
            let b = BlockIdx(b);
            if seen.contains_key(&b)
                || journal.contains(&b)
                || !matches!(
                    self.block_state(core, b),
                    BlockState::Open | BlockState::Full
                )
            {
                continue;
            }
            if self.map.valid_bits(b) == 0 {
                block_ops::release_emptied(core, layout, &self.map, b, false, false);
            }
        }
        Ok(())
    }
}
