//! Per-block bookkeeping: valid-slot bitmaps and counts, read pins, block states and the per-bank
//! free lists (least-worn first).
//!
//! There is no P2L table in RAM: GC learns which logical page a valid slot holds from the slot's
//! OOB, which it reads anyway with the data — that keeps RAM at one bit per physical slot.
//!
//! Valid bitmaps, valid counts and read pins are atomics (no lock): they change on every commit
//! and every read. Block states, erase counts and free lists change only when a block is opened,
//! filled, erased or retired, under the bank's `BankAlloc` mutex. Lock order: a stripe lock may be
//! held while a `BankAlloc` is taken, never the reverse.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

use crate::layout::{BlockIdx, Layout, Psa};

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
}

impl BankAlloc {
    pub fn new(blocks: u32) -> BankAlloc {
        BankAlloc {
            free: BinaryHeap::new(),
            state: vec![BlockState::Free; blocks as usize],
            erase_count: vec![0; blocks as usize],
            filled_seq: vec![0; blocks as usize],
        }
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

    /// Takes the least-worn free block, marking it open.
    pub fn pop_free(&mut self) -> Option<u32> {
        let Reverse((_, b)) = self.free.pop()?;
        self.state[b as usize] = BlockState::Open;
        Some(b)
    }
}

/// Per-bank shared state.
pub struct Bank {
    pub alloc: Mutex<BankAlloc>,
    /// Mirror of `alloc.free_len()` for lock-free checks on the write path.
    pub free: AtomicU32,
    /// Set while the bank is nearly out of free blocks: writers go elsewhere (LFTL exclusiveGC).
    pub exclusive_gc: AtomicBool,
}

/// Valid bitmaps, valid counts and read pins of every block.
pub struct BlockTable {
    layout: Layout,
    words_per_block: usize,
    bitmap: Box<[AtomicU64]>,
    valid: Box<[AtomicU32]>,
    readers: Box<[AtomicU32]>,
    /// Valid slots on the whole device (the GC's yardstick for a worthwhile victim).
    valid_total: AtomicU64,
}

impl BlockTable {
    pub fn new(layout: Layout) -> BlockTable {
        let blocks = layout.total_blocks() as usize;
        let words_per_block = (layout.slots_per_block() as usize).div_ceil(64);
        BlockTable {
            layout,
            words_per_block,
            bitmap: (0..blocks * words_per_block)
                .map(|_| AtomicU64::new(0))
                .collect(),
            valid: (0..blocks).map(|_| AtomicU32::new(0)).collect(),
            readers: (0..blocks).map(|_| AtomicU32::new(0)).collect(),
            valid_total: AtomicU64::new(0),
        }
    }

    fn bit(&self, psa: Psa) -> (usize, u64, usize) {
        let blk = self.layout.block_of(psa).0 as usize;
        let s = self.layout.slot_in_block(psa) as usize;
        (blk * self.words_per_block + s / 64, 1u64 << (s % 64), blk)
    }

    /// Marks a slot valid; returns false if it already was (a bug the invariant checks catch).
    pub fn set_valid(&self, psa: Psa) -> bool {
        let (w, m, blk) = self.bit(psa);
        let was = self.bitmap[w].fetch_or(m, Ordering::AcqRel) & m != 0;
        if !was {
            self.valid[blk].fetch_add(1, Ordering::AcqRel);
            self.valid_total.fetch_add(1, Ordering::Relaxed);
        }
        !was
    }

    /// Marks a slot invalid; returns whether it was valid.
    pub fn clear_valid(&self, psa: Psa) -> bool {
        let (w, m, blk) = self.bit(psa);
        let was = self.bitmap[w].fetch_and(!m, Ordering::AcqRel) & m != 0;
        if was {
            self.valid[blk].fetch_sub(1, Ordering::AcqRel);
            self.valid_total.fetch_sub(1, Ordering::Relaxed);
        }
        was
    }

    pub fn is_valid(&self, psa: Psa) -> bool {
        let (w, m, _) = self.bit(psa);
        self.bitmap[w].load(Ordering::Acquire) & m != 0
    }

    /// Valid bits actually set in a block's bitmap (the count's ground truth).
    pub fn valid_bits(&self, b: BlockIdx) -> u32 {
        let w = b.0 as usize * self.words_per_block;
        self.bitmap[w..w + self.words_per_block]
            .iter()
            .map(|x| x.load(Ordering::Acquire).count_ones())
            .sum()
    }

    /// Valid slots on the whole device.
    pub fn valid_total(&self) -> u64 {
        self.valid_total.load(Ordering::Relaxed)
    }

    pub fn valid_count(&self, b: BlockIdx) -> u32 {
        self.valid[b.0 as usize].load(Ordering::Acquire)
    }

    /// Clears every bit (recovery rebuilds them from the map).
    pub fn clear_all(&self) {
        for w in self.bitmap.iter() {
            w.store(0, Ordering::Release);
        }
        for v in self.valid.iter() {
            v.store(0, Ordering::Release);
        }
        self.valid_total.store(0, Ordering::Release);
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
        self.bitmap.len() * 8 + self.valid.len() * 4 + self.readers.len() * 4
    }
}
