//! The log-block pool (BAST's per-block logs; FAST's sequential and random logs). Trim
//! records go to journal blocks (`schemes::block_ops::Journal`).
//!
//! Everything here is under one leaf mutex per structure (`HybridScheme::logs`,
//! `HybridScheme::journal`): taken after logical-block locks, never held across a NAND
//! operation or another lock.

use std::collections::{HashMap, VecDeque};

use crate::layout::{BlockIdx, Lpn};

/// A log block.
#[derive(Clone, Debug)]
pub struct LogBlock {
    pub block: BlockIdx,
    /// BAST: the logical block it logs. FAST: the logical block of the sequential-write log;
    /// `None` for a random-write log (any logical block's pages).
    pub owner: Option<u32>,
    /// Pages programmed (or reserved for a program in flight) so far.
    pub next: u32,
    /// Every slot so far holds its own offset of `owner` (slot `i` holds page `i`): a switch
    /// or partial merge is possible while every one of them is still current.
    pub sequential: bool,
    /// The logical page each slot holds (`u32::MAX`: padding), slot by slot — the log's page
    /// map, which a merge of a random log reads.
    pub lpns: Vec<u32>,
    /// Last time (pool clock) a page was placed here: BAST's victim is the least recent.
    pub last_use: u64,
    /// FAST: the queue whose writer appends to this random log (`None` once full).
    pub writer: Option<usize>,
    /// A program into it failed: it is marked bad instead of erased when reclaimed.
    pub retiring: bool,
    /// Which use of the block this is (`Logs::insert` numbers them): a block merged, erased
    /// and opened again as a log is another log, which a thread that looked at the first one
    /// must not act on.
    pub serial: u64,
}

impl LogBlock {
    pub fn new(block: BlockIdx, owner: Option<u32>, slots: u32, now: u64) -> LogBlock {
        LogBlock {
            block,
            owner,
            next: 0,
            sequential: owner.is_some(),
            lpns: Vec::with_capacity(slots as usize),
            last_use: now,
            writer: None,
            retiring: false,
            serial: 0,
        }
    }

    /// Records the slots of a page placed at `self.next` and advances.
    pub fn place(&mut self, slots: &[Option<Lpn>], spb: u32, now: u64) {
        for s in slots {
            let pos = self.lpns.len() as u32;
            let lpn = s.map_or(u32::MAX, |l| l.0);
            if self
                .owner
                .is_none_or(|o| lpn == u32::MAX || lpn != o * spb + pos)
            {
                self.sequential = false;
            }
            self.lpns.push(lpn);
        }
        self.next += 1;
        self.last_use = now;
    }
}

/// The log blocks in use.
#[derive(Default)]
pub struct Logs {
    pub blocks: HashMap<BlockIdx, LogBlock>,
    /// Pool entries promised to a thread that is allocating a block for them.
    pub reserved: u32,
    /// BAST: a logical block's log block.
    pub by_owner: HashMap<u32, BlockIdx>,
    /// FAST: the sequential-write log block.
    pub sw: Option<BlockIdx>,
    /// FAST: a writer is allocating the next sequential-write log (its pool entry is in
    /// `reserved`). Others wait for it: two writers opening one each would leave the first
    /// unreachable once `sw` names the second.
    pub sw_opening: bool,
    /// FAST: random-write log blocks no writer appends to any more, oldest first (FAST's
    /// victims, round-robin).
    pub rw_full: VecDeque<BlockIdx>,
    /// Pool clock for `last_use`.
    pub clock: u64,
    /// Log blocks opened so far (`LogBlock::serial`).
    opened: u64,
}

impl Logs {
    /// Log blocks in use or promised.
    pub fn in_use(&self) -> u32 {
        self.blocks.len() as u32 + self.reserved
    }

    /// The log block owned by logical block `lbn` (BAST's log; FAST's sequential log).
    pub fn owned(&self, lbn: u32) -> Option<BlockIdx> {
        if let Some(b) = self.by_owner.get(&lbn) {
            return Some(*b);
        }
        self.sw
            .filter(|b| self.blocks.get(b).is_some_and(|l| l.owner == Some(lbn)))
    }

    /// Puts a log block in the pool, numbering this use of its block.
    pub fn insert(&mut self, mut lb: LogBlock) {
        self.opened += 1;
        lb.serial = self.opened;
        self.blocks.insert(lb.block, lb);
    }

    /// Whether `lb` (a copy taken earlier) is still in the pool as the same use of its block.
    pub fn still(&self, lb: &LogBlock) -> bool {
        self.blocks
            .get(&lb.block)
            .is_some_and(|l| l.serial == lb.serial)
    }

    /// Takes a log block out of the pool (merged, or retired).
    pub fn remove(&mut self, block: BlockIdx) -> Option<LogBlock> {
        let lb = self.blocks.remove(&block)?;
        if let Some(o) = lb.owner {
            if self.by_owner.get(&o) == Some(&block) {
                self.by_owner.remove(&o);
            }
        }
        if self.sw == Some(block) {
            self.sw = None;
        }
        self.rw_full.retain(|b| *b != block);
        Some(lb)
    }

    pub fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}
