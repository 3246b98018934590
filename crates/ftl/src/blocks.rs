//! Per-block bookkeeping every scheme shares: block states, erase counts and the per-bank free
//! lists (least-worn first), and read pins.
//!
//! Read pins are atomics (no lock): they change on every read. Block states, erase counts and
//! free lists change only when a block is opened, filled, erased or retired, under the bank's
//! `BankAlloc` mutex. Lock order: a stripe lock may be held while a `BankAlloc` is taken, never
//! the reverse.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

use crate::layout::{BlockIdx, Layout};

/// Life cycle of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockState {
    /// Erased, in the bank's free list.
    Free,
    /// A write frontier (a writer's or GC's open block); never a GC victim.
    Open,
    /// Every page programmed and committed: may be chosen as a victim.
    Full,
    /// Being cleaned by GC.
    Victim,
    /// GC found valid slots here it could not read (their OOB or data fails on every read):
    /// their data is lost and host reads of them fail, so the map keeps pointing here and the
    /// block cannot be erased. Never a victim while any slot is valid, so GC does not clean it
    /// again and again (one unreadable page would otherwise stall GC, then the device); a
    /// victim again once the host has overwritten them all (then marked bad, not erased, if a
    /// program had failed in it: [`BankAlloc::program_failed`]). Not persisted: after a
    /// restart GC finds it out again.
    Damaged,
    /// A program failed here: GC moves its data out, then it is marked bad.
    Retiring,
    /// Worn out or failed: never used again.
    Bad,
    /// Superblock or checkpoint area.
    Reserved,
}

/// A bank's allocator state, under one mutex per bank.
pub struct BankAlloc {
    /// Free blocks keyed by erase count (least worn first), then block number.
    free: BinaryHeap<Reverse<(u32, u32)>>,
    pub state: Vec<BlockState>,
    pub erase_count: Vec<u32>,
    /// Sequence number when the block was last filled (age for cost-benefit victims).
    pub filled_seq: Vec<u64>,
    /// A program failed in the block since its last erase: whatever path empties it next
    /// (GC's retire, a damaged block's reclaim once its unreadable slots were rewritten, a
    /// scheme's merge) marks it bad instead of erasing it. Kept beside `state` because a block
    /// can leave `Retiring` (for `Damaged`) before it is emptied.
    pub program_failed: Vec<bool>,
}

impl BankAlloc {
    pub fn new(blocks: u32) -> BankAlloc {
        BankAlloc {
            free: BinaryHeap::new(),
            state: vec![BlockState::Free; blocks as usize],
            erase_count: vec![0; blocks as usize],
            filled_seq: vec![0; blocks as usize],
            program_failed: vec![false; blocks as usize],
        }
    }

    /// The free list as (erase count, block), in no order (for checks).
    pub fn free_entries(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.free.iter().map(|Reverse(k)| *k)
    }

    pub fn free_len(&self) -> u32 {
        self.free.len() as u32
    }

    /// Puts an erased block in the free list.
    pub fn push_free(&mut self, block: u32) {
        self.state[block as usize] = BlockState::Free;
        self.free
            .push(Reverse((self.erase_count[block as usize], block)));
    }

    /// The erase count of the most-worn free block.
    pub fn most_worn_free(&self) -> Option<u32> {
        self.free.iter().map(|Reverse((e, _))| *e).max()
    }

    /// Takes the most-worn free block, marking it open (a destination for cold data: static
    /// wear levelling). O(free blocks).
    pub fn pop_most_worn(&mut self) -> Option<u32> {
        let Reverse((e, b)) = *self.free.iter().max_by_key(|Reverse(k)| *k)?;
        self.free.retain(|Reverse(k)| *k != (e, b));
        self.state[b as usize] = BlockState::Open;
        Some(b)
    }

    /// Takes free block `block`, marking it open; false if it is not in the free list.
    /// O(free blocks).
    pub fn take_free(&mut self, block: u32) -> bool {
        let before = self.free.len();
        self.free.retain(|Reverse((_, b))| *b != block);
        if self.free.len() == before {
            return false;
        }
        self.state[block as usize] = BlockState::Open;
        true
    }

    /// Takes the least-worn free block, marking it open.
    pub fn pop_free(&mut self) -> Option<u32> {
        let Reverse((_, b)) = self.free.pop()?;
        self.state[b as usize] = BlockState::Open;
        Some(b)
    }

    /// Takes up to `n` free blocks in different planes (block `b` is in plane `b % planes`),
    /// marking them open: the least-worn free block first, then the least-worn of each other
    /// plane that has one, so a multi-plane frontier wears its bank as evenly as single blocks
    /// would. One block (as [`Self::pop_free`]) when `n` or `planes` is 1. O(free blocks).
    pub fn pop_free_planes(&mut self, planes: u32, n: usize) -> Vec<u32> {
        if n <= 1 || planes <= 1 {
            return self.pop_free().into_iter().collect();
        }
        let mut by_wear: Vec<(u32, u32)> = self.free_entries().collect();
        by_wear.sort_unstable();
        let mut taken: Vec<(u32, u32)> = Vec::with_capacity(n);
        for k in by_wear {
            if taken.len() == n {
                break;
            }
            if taken.iter().all(|t| t.1 % planes != k.1 % planes) {
                taken.push(k);
            }
        }
        self.free.retain(|Reverse(k)| !taken.contains(k));
        taken
            .into_iter()
            .map(|(_, b)| {
                self.state[b as usize] = BlockState::Open;
                b
            })
            .collect()
    }
}

/// Per-bank shared state.
pub struct Bank {
    pub alloc: Mutex<BankAlloc>,
    /// Mirror of `alloc.free_len()` for lock-free checks on the write path.
    pub free: AtomicU32,
    /// Set while the bank is at most one block above its GC reserve: writers go elsewhere (LFTL
    /// exclusiveGC) and every background worker may clean.
    pub exclusive_gc: AtomicBool,
    /// Reads of this bank that failed every retry (a read fault, or data that fails its check).
    pub uncorrectable: AtomicU64,
}

/// Read pins of every block: a block is erased only when no read of it is being issued.
pub struct ReadPins {
    readers: Box<[AtomicU32]>,
}

impl ReadPins {
    pub fn new(layout: Layout) -> ReadPins {
        ReadPins {
            readers: (0..layout.total_blocks())
                .map(|_| AtomicU32::new(0))
                .collect(),
        }
    }

    /// Pins a block against erasure while a NAND read of it is being issued. Taken under the
    /// stripe lock that produced the address, so GC (which remaps under the same lock before it
    /// erases) either sees the pin or the reader sees the new address.
    pub fn pin(&self, b: BlockIdx) {
        self.readers[b.0 as usize].fetch_add(1, Ordering::AcqRel);
    }

    pub fn unpin(&self, b: BlockIdx) {
        self.readers[b.0 as usize].fetch_sub(1, Ordering::AcqRel);
    }

    pub fn pinned(&self, b: BlockIdx) -> bool {
        self.readers[b.0 as usize].load(Ordering::Acquire) != 0
    }

    pub fn memory_bytes(&self) -> usize {
        self.readers.len() * 4
    }
}
