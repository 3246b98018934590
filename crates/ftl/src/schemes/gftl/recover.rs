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
//!   data block are **queued** for a merge, in the order their oldest such page was written,
//!   as the queue had them before the close (below);
//! - blocks with trim records still live are journal blocks; programmed blocks holding
//!   nothing current are erased.
//!
//! A merge does not survive a close: its logical block has pages outside its data block
//! (the old data block, or the destination), so it is queued again.
//!
//! # The queue's order
//! The write buffer's pages are superseded within a window of host writes only because the
//! queue is first in, first out (`budget.rs`). Rebuilt in logical-block order, every open
//! would start the round again from logical block 0: with crashes closer together than one
//! round, the last logical blocks were never merged, their buffer blocks never emptied, and
//! each open's new buffer blocks came on top until no free block was left (found from
//! outside: kill -9 every few MiB on a 64 MiB device, read-only after five opens). So the
//! buffer blocks are ranked by age, the sequence number of the first data slot the OOB
//! area of their first pages names (a few OOB reads per buffer block; a copy keeps its
//! sequence number, so a merge's block ranks first), and a logical block is queued by its
//! oldest page outside its data block: (its block's rank, its page). The order is only
//! fairness: a value read wrong costs a merge's place in the queue, never data. After an
//! open the buffer may hold more than its budget (the open found it full, and the merge under
//! way is lost); a host page then carries a second step (`steps.rs`) so that the excess
//! drains.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;

use super::GftlScheme;
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Lpn};
use crate::oob;
use crate::schemes::block_ops::{self, Blk, Journal};

/// Pages of a buffer block whose OOB area is read for its age (the first with a data slot
/// names it; more only where a read fails or the first pages hold padding alone).
const FIRST_PAGES_READ: u32 = 4;

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
        // The buffer blocks, oldest first.
        let mut buffer: Vec<(u64, BlockIdx)> = seen
            .keys()
            .filter(|b| !data_blocks.contains(b))
            .map(|b| (self.first_seq(core, *b), *b))
            .collect();
        buffer.sort_unstable();
        let rank: std::collections::HashMap<BlockIdx, usize> = buffer
            .iter()
            .enumerate()
            .map(|(i, (_, b))| (*b, i))
            .collect();
        {
            let mut pool = self.pool.lock();
            *pool = Default::default();
            for (_, b) in &buffer {
                self.set_block_state(core, *b, BlockState::Full);
                self.set_role(*b, super::Role::Buffer);
                pool.closed.push_back((*b, false));
            }
            pool.held = pool.closed.len() as u32;
            pool.max_blocks = pool.held;
            self.bound_applies
                .store(pool.held == 0, std::sync::atomic::Ordering::Relaxed);
        }
        // Each logical block by its oldest page outside its data block.
        let mut oldest: BTreeMap<u32, (usize, u32)> = BTreeMap::new();
        for l in 0..self.lpns {
            let Some(psa) = self.map.get(Lpn(l)) else {
                continue;
            };
            let b = layout.block_of(psa);
            let lbn = self.lbn_of(Lpn(l));
            if data.get(&lbn).is_some_and(|(d, _)| *d == b) {
                continue;
            }
            let Some(r) = rank.get(&b) else {
                continue;
            };
            let key = (*r, layout.split(psa).0.page);
            let e = oldest.entry(lbn).or_insert(key);
            *e = (*e).min(key);
        }
        let mut queued: Vec<(usize, u32, u32)> = oldest
            .into_iter()
            .map(|(lbn, (r, p))| (r, p, lbn))
            .collect();
        queued.sort_unstable();
        for (_, _, lbn) in queued {
            self.enqueue(lbn);
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

    /// The sequence number of the first data slot named in the OOB area of block `b`'s first
    /// pages (`u64::MAX` if none reads: the block then ranks last). For the queue's order
    /// only (module docs).
    fn first_seq(&self, core: &Core, b: BlockIdx) -> u64 {
        let layout = self.layout;
        let sps = layout.slots_per_page;
        let len = oob::slot_entry_len(sps - 1).min(super::MAX_ENTRIES_LEN);
        let mut entries = [0u8; super::MAX_ENTRIES_LEN];
        let top = core
            .nand
            .block_state(layout.block_addr(b))
            .map_or(0, |s| s.programmed_pages)
            .min(FIRST_PAGES_READ);
        for page in 0..top {
            let addr = self.addr(b, page);
            let mut read = false;
            for _ in 0..=core.own_read_retries() {
                let mut reads = [(addr, 0u32, &mut [][..], Some(&mut entries[..len]))];
                if core.nand.read_planes(&mut reads).is_ok() {
                    read = true;
                    break;
                }
                core.counters.read_retries.fetch_add(1, Ordering::Relaxed);
            }
            if !read {
                continue;
            }
            let first = (0..sps)
                .filter_map(|i| oob::slot_entry(&entries[..len], i))
                .filter(|m| m.kind == oob::SlotKind::Data)
                .map(|m| m.seq)
                .min();
            if let Some(seq) = first {
                return seq;
            }
        }
        u64::MAX
    }
}
