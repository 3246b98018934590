//! Schemes `bast` and `fast`: the hybrid log-block FTLs of the thesis (paper 003 §2.3, §3.1;
//! Kim et al. 2002, Lee et al. 2007); and `nftl`, the block-level FTL paper 004 compares RFTL
//! with, which is BAST with a log (replacement) block for every logical block
//! ([`HybridScheme::nftl`]).
//!
//! | module | job |
//! |---|---|
//! | `banks` | which bank a new log block or merge destination goes to (`same`/`spread`) |
//! | `locks` | one lock per logical block, and the rule that keeps them free of cycles |
//! | `logs` | the log-block pool and the journal blocks of trim records |
//! | `place` | where a sealed page goes: BAST's and FAST's log rules |
//! | `merge` | switch, partial and full merges |
//! | `recover` | block roles rebuilt from the recovered map; what a crash left half done |
//!
//! # Mapping
//! A *logical block* is `slots_per_block` consecutive logical pages. Its **data block** holds
//! page `i` in slot `i` (block mapping); **log blocks** are page-mapped: BAST gives a logical
//! block one log block of its own; FAST has one sequential-write (SW) log block and random-write
//! (RW) log blocks shared by every logical block. A NAND page holds pages of one logical block
//! only (`Scheme::seal_unit`), so a BAST log's page belongs to its owner.
//!
//! The map of where each logical page's newest version lives is kept per page (the page
//! scheme's `PageMap`, with its valid bitmap and trim log): the block map and the log page maps
//! define it, and the per-page index is how reads find it in O(1) under the same stripe locks
//! every scheme uses. The RAM a real hybrid FTL needs for its maps (4 bytes per data block and
//! per log slot) is reported as `map_model_bytes`. What the NAND sees — where pages are
//! programmed, what merges copy and erase — is BAST's and FAST's.
//!
//! # Merges
//! When a log block is full, or a new one is needed and the pool is used up, a log block is
//! merged with its data block (`merge.rs`): a **switch** when the log holds every page of the
//! block in order, a **partial** when it holds a current in-order prefix (the rest is copied
//! into it), otherwise a **full** merge into a fresh block. FAST merges its oldest RW log by a
//! full merge of every logical block with a current page in it.
//!
//! # Wear levelling
//! Dynamic: every new block is the least-worn free one of its bank. Static: when the device's
//! erase-count spread passes `wear_level_spread`, the maintenance tick copies the logical block
//! on the least-worn data block to the most-worn free block, so cold data stops pinning a young
//! block (`merge.rs`, `level_wear`; counted in `wear_level_moves`). A move copies one block on
//! the maintenance thread holding `gc_gate` shared, as a merge does on a writer thread: a
//! checkpoint waits for it (one block's copy, ~20 ms with `k9-003` timing).
//!
//! # Crash safety
//! Data slots carry (logical page, sequence number) and merges keep the sequence number, so
//! recovery resolves versions with the page scheme's rules (`page::recover::resolve`); the
//! block roles are then derived from the recovered map, and a logical block whose pages a crash
//! left in a shape the scheme does not allow (a merge half done) is merged at open
//! (`recover.rs`). Trim records go to journal blocks and slots a trim unmapped stay valid
//! until its record is on flash, as with `page`: a merge erases a block only when none of its
//! slots is still held.

pub mod banks;
pub(crate) mod locks;
mod logs;
mod merge;
mod place;
mod recover;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use self::banks::BankPlan;
use self::locks::LbnLocks;
use self::logs::Logs;
use self::merge::MergeKind;
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Layout, Lpn, Psa};
use crate::schemes::block_ops::{self, Journal};
use crate::schemes::page::map::PageMap;
use crate::schemes::{CleanOpen, Placer, Scheme, SchemeKind};
use crate::stats::{LatencyHistogram, MergeKindStats, MergeStats};

/// Which hybrid: how log blocks are associated with data blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogPolicy {
    /// One log block per data block.
    Bast,
    /// One sequential-write log block and fully associative random-write log blocks.
    Fast,
}

/// No data block (the logical block was never written, or all of it was trimmed).
const NO_BLOCK: u32 = u32::MAX;

/// Counters of one merge kind.
#[derive(Default)]
struct MergeCounters {
    count: AtomicU64,
    copied: AtomicU64,
    erases: AtomicU64,
    latency: LatencyHistogram,
}

impl MergeCounters {
    fn summary(&self) -> MergeKindStats {
        MergeKindStats {
            count: self.count.load(Ordering::Relaxed),
            pages_copied: self.copied.load(Ordering::Relaxed),
            erases: self.erases.load(Ordering::Relaxed),
            latency: self.latency.summary(),
        }
    }
}

/// The hybrid schemes' state.
pub struct HybridScheme {
    policy: LogPolicy,
    /// The scheme the image was formatted with (`nftl` is BAST's policy with a log block for
    /// every logical block).
    kind: SchemeKind,
    layout: Layout,
    lpns: u32,
    /// Logical pages per logical block (= slots per physical block).
    spb: u32,
    lbns: u32,
    log_limit: u32,
    /// Where every logical page's newest version lives, the valid bitmap and the trim log.
    pub map: PageMap,
    locks: LbnLocks,
    /// Per logical block: its data block (`NO_BLOCK`: none). Changed only by the holder of the
    /// logical block's lock.
    data: Box<[AtomicU32]>,
    logs: Mutex<Logs>,
    journal: Mutex<Journal>,
    merges: [MergeCounters; 3],
    /// Where new blocks go.
    plan: BankPlan,
    /// Random-write log blocks opened so far (FAST), to deal them over the banks.
    rw_opened: AtomicU32,
}

impl HybridScheme {
    pub fn new(
        policy: LogPolicy,
        layout: Layout,
        lpns: u32,
        log_blocks: u32,
        plan: BankPlan,
    ) -> HybridScheme {
        let spb = layout.slots_per_block();
        let lbns = lpns.div_ceil(spb);
        HybridScheme {
            policy,
            kind: match policy {
                LogPolicy::Bast => SchemeKind::Bast,
                LogPolicy::Fast => SchemeKind::Fast,
            },
            layout,
            lpns,
            spb,
            lbns,
            log_limit: log_blocks,
            map: PageMap::new(layout, lpns),
            locks: LbnLocks::new(lbns),
            data: (0..lbns).map(|_| AtomicU32::new(NO_BLOCK)).collect(),
            logs: Mutex::new(Logs::default()),
            journal: Mutex::new(Journal::default()),
            merges: Default::default(),
            plan,
            rw_opened: AtomicU32::new(0),
        }
    }

    /// NFTL (Ban 1995; paper 004's block-level baseline): a logical block maps to a primary
    /// (data) block and, once it is rewritten, a replacement block of its own, written in page
    /// order with the logical page in its OOB (as NAND that programs a block's pages in order
    /// requires); when the replacement is full the two are merged. That is BAST's policy with
    /// a log block for every logical block: no write ever merges another logical block.
    pub fn nftl(layout: Layout, lpns: u32, plan: BankPlan) -> HybridScheme {
        let lbns = lpns.div_ceil(layout.slots_per_block());
        HybridScheme {
            kind: SchemeKind::Nftl,
            ..HybridScheme::new(LogPolicy::Bast, layout, lpns, lbns, plan)
        }
    }

    fn data_block(&self, lbn: u32) -> Option<BlockIdx> {
        match self.data[lbn as usize].load(Ordering::Acquire) {
            NO_BLOCK => None,
            b => Some(BlockIdx(b)),
        }
    }

    fn set_data_block(&self, lbn: u32, b: Option<BlockIdx>) {
        self.data[lbn as usize].store(b.map_or(NO_BLOCK, |b| b.0), Ordering::Release);
    }

    fn bank_of(&self, b: BlockIdx) -> u32 {
        self.layout.block_addr(b).bank.0
    }

    /// The bank a new log block of `lbn` should go to (`banks.rs`).
    fn log_bank(&self, lbn: u32) -> u32 {
        let data = self.data_block(lbn).map(|d| self.bank_of(d));
        self.plan.log_bank(data, self.plan.home(lbn))
    }

    fn lbn_of(&self, lpn: Lpn) -> u32 {
        lpn.0 / self.spb
    }

    fn counters(&self, kind: MergeKind) -> &MergeCounters {
        &self.merges[kind as usize]
    }

    /// RAM a hybrid FTL without a per-page index needs: 4 bytes per logical block (its data
    /// block) and 4 per log slot (the log page maps).
    fn model_map_bytes(&self) -> usize {
        self.lbns as usize * 4 + (self.log_limit * self.spb) as usize * 4
    }
}

impl Scheme for HybridScheme {
    fn kind(&self) -> SchemeKind {
        self.kind
    }

    fn placer(self: Arc<Self>, q: usize) -> Box<dyn Placer> {
        place::placer(self, q)
    }

    /// Static wear levelling (`merge.rs`: one move per tick at most).
    fn tick(&self, core: &Core) {
        if core.read_only_reason().is_none() && !core.writers_gone() {
            self.level_wear(core);
        }
    }

    fn page_map(&self) -> &PageMap {
        &self.map
    }

    fn after_checkpoint(&self, core: &Core) {
        self.reclaim_journal(core);
    }

    fn after_recovery(&self, core: &Core, _clean: Option<&CleanOpen<'_>>) -> Result<()> {
        self.rebuild_roles(core)
    }

    fn check(&self, core: &Core, zombies: &[Psa]) -> std::result::Result<(), String> {
        self.map.check(zombies)?;
        let logs = self.logs.lock();
        let layout = self.layout;
        for l in 0..self.lpns {
            let lpn = Lpn(l);
            let Some(psa) = self.map.get(lpn) else {
                continue;
            };
            let blk = layout.block_of(psa);
            let lbn = self.lbn_of(lpn);
            let at_home =
                self.data_block(lbn) == Some(blk) && layout.slot_in_block(psa) == l % self.spb;
            let in_log = logs.blocks.get(&blk).is_some_and(|lb| {
                lb.lpns.get(layout.slot_in_block(psa) as usize) == Some(&l)
                    && match self.policy {
                        LogPolicy::Bast => lb.owner == Some(lbn),
                        LogPolicy::Fast => lb.owner.is_none_or(|o| o == lbn),
                    }
            });
            if !at_home && !in_log {
                return Err(format!(
                    "lpn {l} lives at {psa:?} (block {}), neither in its logical block {lbn}'s data block {:?} at its offset nor in one of its log blocks",
                    blk.0,
                    self.data_block(lbn)
                ));
            }
        }
        if logs.blocks.len() as u32 > self.log_limit {
            return Err(format!(
                "{} log blocks in use, the pool has {}",
                logs.blocks.len(),
                self.log_limit
            ));
        }
        for (blk, lb) in &logs.blocks {
            if self.policy == LogPolicy::Fast && lb.owner.is_some() && logs.sw != Some(*blk) {
                // Only the SW log has an owner in FAST; one `sw` does not name is unreachable.
                return Err(format!(
                    "FAST log block {} has owner {:?} but the SW log is {:?}",
                    blk.0, lb.owner, logs.sw
                ));
            }
            let state = self.block_state(core, *blk);
            if state != BlockState::Open {
                return Err(format!("log block {} is {state:?}", blk.0));
            }
            if lb.lpns.len() as u32 != lb.next * layout.slots_per_page {
                return Err(format!(
                    "log block {}: {} slots recorded, {} pages placed",
                    blk.0,
                    lb.lpns.len(),
                    lb.next
                ));
            }
        }
        for lbn in 0..self.lbns {
            if let Some(d) = self.data_block(lbn) {
                let state = self.block_state(core, d);
                if state != BlockState::Full {
                    return Err(format!("data block {} of {lbn} is {state:?}", d.0));
                }
                if logs.blocks.contains_key(&d) {
                    return Err(format!("data block {} of {lbn} is also a log", d.0));
                }
            }
        }
        Ok(())
    }

    fn memory_bytes(&self) -> usize {
        self.map.memory_bytes() + self.data.len() * 4 + self.model_map_bytes()
    }

    fn describe(&self, _core: &Core, lpn: Lpn) -> String {
        let lbn = self.lbn_of(lpn);
        let logs = self.logs.lock();
        format!(
            "lpn {}: {:?}; logical block {lbn}: data block {:?}, log {:?}",
            lpn.0,
            self.map.get(lpn).map(|p| self.layout.split(p)),
            self.data_block(lbn),
            logs.owned(lbn)
        )
    }

    fn bench_victim_scan(&self, _core: &Core, _bank: u32) -> Option<u32> {
        None
    }

    fn seal_unit(&self) -> u32 {
        self.spb
    }

    fn merge_stats(&self) -> Option<MergeStats> {
        Some(MergeStats {
            switch: self.counters(MergeKind::Switch).summary(),
            partial: self.counters(MergeKind::Partial).summary(),
            full: self.counters(MergeKind::Full).summary(),
            log_blocks: self.log_limit,
            log_blocks_in_use: self.logs.lock().blocks.len() as u32,
            log_placement: self.plan.placement().to_string(),
        })
    }
}

impl HybridScheme {
    fn block_state(&self, core: &Core, b: BlockIdx) -> BlockState {
        block_ops::block_state(core, self.layout, b)
    }

    fn set_block_state(&self, core: &Core, b: BlockIdx, state: BlockState) {
        block_ops::set_block_state(core, self.layout, b, state);
    }
}
