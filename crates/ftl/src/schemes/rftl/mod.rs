//! Scheme `rftl`: the real-time FTL of paper 004 (Qin, Wang, Liu, Shao, *RFTL: Real-time
//! FTL for NAND flash storage systems*): block-level mapping of a logical block to three
//! physical blocks, and **distributed partial garbage collection**: a logical block's blocks
//! are reclaimed a step at a time, one step per host page written to that logical block, each
//! step no longer than one erase. So no host write waits behind a whole-block clean: its
//! response is bounded by one step and its own program (L(p) of the paper's Table 2),
//! whatever the device's fullness.
//!
//! | module | job |
//! |---|---|
//! | `budget` | the step size and job lengths from the device's timing; which devices qualify |
//! | `lbn` | a logical block's primary, buffer and replacement blocks and its job (bookkeeping) |
//! | `steps` | a step's copies and erases, the end of a job, compaction |
//! | `place` | where a host page goes, and the step it carries |
//! | `recover` | roles rebuilt after an open |
//! | `saved` | jobs under way, kept across a clean close |
//!
//! # Mapping
//! A *logical block* is `slots_per_block` consecutive logical pages; its pages live only in
//! its own blocks (at most three: Lemma 4.2), page-mapped: a page goes to the next free page
//! of the primary, or of the buffer once the primary is full. The per-page index is the page
//! scheme's `PageMap` (O(1) reads under the stripes every scheme uses, its valid bitmap and
//! trim log); RFTL keeps the page maps in the OOB with a RAM index of N entries per logical
//! block, which ftld does not emulate: it makes neither the OOB read of a write (to update
//! the map held in OOB) nor that of a read. `model_map_bytes` (in `memory_bytes`) is what the
//! paper's RAM layout would need. A NAND page holds pages of one logical block only.
//!
//! # Reclaim (see `lbn.rs` for the jobs)
//! A *fold* starts when host pages go to the buffer and it has `k_fold` free pages left; a
//! *shift* follows at once. Every host page of the logical block runs one step of its job
//! before it is programmed: at most `beta` copies (whose time is within one erase) or one
//! erase. `budget.rs` shows why the buffer never runs out while a job runs (Theorem 4.1).
//! A logical block never written since its blocks last changed keeps them as they are:
//! reclaim happens only where writes arrive (the paper's "distributed" GC; it avoids copies of
//! pages about to be rewritten).
//!
//! # Locks
//! In this order: a logical block's lock (`locks`, held by the writer from `target` to
//! `committed` and by a step), its `state` mutex (held across a step), `core.gc_gate` shared
//! (a step; a checkpoint or `check` takes it exclusive and never waits for a `state` mutex
//! while holding it: `check` runs quiesced), the write cache's stripes (a step publishing its
//! copies). A step may write out the trim queue (`block_ops::release_emptied`), whose writer
//! takes none of these.
//!
//! # Space
//! Three blocks per logical block: an image exports a third of its usable blocks (the paper
//! compares RFTL with GFTL at twice GFTL's flash). Formats refuse devices where the guarantee
//! cannot hold (`budget.rs`).
//!
//! # Crash safety
//! Data slots carry (logical page, sequence number) and copies keep the sequence number, so
//! recovery resolves versions with the page scheme's rules; roles are then derived from where
//! the current versions are (`recover.rs`), and a logical block left in a shape the rules do
//! not allow (a job half done) is compacted at open. A clean open instead takes the jobs
//! under way back from the checkpoint (`saved.rs`), once they check out against the medium.
//! Trim records go to journal blocks, and slots a trim unmapped stay valid until its record
//! is on flash, as with every scheme.
//!
//! # Not done
//! Static wear levelling (allocation takes the least-worn free block: dynamic only), and the
//! paper's OOB map reads (see Mapping).

mod budget;
mod lbn;
mod place;
mod recover;
mod saved;
mod steps;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nand_model::PageAddr;
use parking_lot::Mutex;

pub use self::budget::StepBudget;
use self::lbn::LbnState;
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Layout, Lpn, Psa};
use crate::schemes::block_ops::{self, Journal};
use crate::schemes::hybrid::banks::BankPlan;
use crate::schemes::hybrid::locks::LbnLocks;
use crate::schemes::page::map::PageMap;
use crate::schemes::{CleanOpen, Placer, Scheme, SchemeKind};
use crate::stats::{LatencyHistogram, RtStats};

/// Counters of the partial GC.
#[derive(Default)]
struct RtCounters {
    copy_steps: AtomicU64,
    erase_steps: AtomicU64,
    pages_copied: AtomicU64,
    erases: AtomicU64,
    folds: AtomicU64,
    shifts: AtomicU64,
    compactions: AtomicU64,
    /// Jobs a clean open took back from the checkpoint (`saved.rs`).
    jobs_resumed: AtomicU64,
    /// Most steps one job took (at most `k_fold` for a fold, `k_shift` for a shift).
    max_job_steps: AtomicU64,
    /// From a step's start to the submission of its last operation (erases are not waited
    /// for: the bank's timeline keeps the host's program behind them).
    step_latency: LatencyHistogram,
}

/// The RFTL scheme's state.
pub struct RftlScheme {
    layout: Layout,
    lpns: u32,
    /// Logical pages per logical block (= slots per physical block).
    spb: u32,
    lbns: u32,
    budget: StepBudget,
    /// Where every logical page's newest version lives, the valid bitmap and the trim log.
    pub map: PageMap,
    /// Held by the writer placing a page of the logical block, from `target` until the page
    /// is committed, and by a step or compaction: whoever changes where its pages live.
    locks: LbnLocks,
    /// Per logical block: its blocks and job. Changed only by the holder of its lock (the
    /// mutex is for the readers: `check`, `describe`, statistics).
    state: Box<[Mutex<LbnState>]>,
    journal: Mutex<Journal>,
    /// Which bank a new block goes to (`[ftl] log_placement`: `spread` puts a logical
    /// block's replacement and buffer on another channel than its primary, so a step's reads
    /// and programs overlap).
    plan: BankPlan,
    counters: RtCounters,
}

impl RftlScheme {
    pub fn new(layout: Layout, lpns: u32, budget: StepBudget, plan: BankPlan) -> RftlScheme {
        let spb = layout.slots_per_block();
        let lbns = lpns.div_ceil(spb);
        RftlScheme {
            layout,
            lpns,
            spb,
            lbns,
            budget,
            map: PageMap::new(layout, lpns),
            locks: LbnLocks::new(lbns),
            state: (0..lbns).map(|_| Mutex::new(LbnState::default())).collect(),
            journal: Mutex::new(Journal::default()),
            plan,
            counters: RtCounters::default(),
        }
    }

    fn lbn_of(&self, lpn: Lpn) -> u32 {
        lpn.0 / self.spb
    }

    fn bank_of(&self, b: BlockIdx) -> u32 {
        self.layout.block_addr(b).bank.0
    }

    fn addr(&self, b: BlockIdx, page: u32) -> PageAddr {
        PageAddr {
            block: self.layout.block_addr(b),
            page,
        }
    }

    fn block_state(&self, core: &Core, b: BlockIdx) -> BlockState {
        block_ops::block_state(core, self.layout, b)
    }

    /// The rules one logical block's state keeps (Lemma 4.2, Theorem 4.1), whatever the
    /// medium: checked by `check` and on a state a clean open takes back (`saved.rs`).
    /// `budget_holds`: false on a device that turned read-only (it stops mid-job or without
    /// a next buffer, so the budget's rules no longer apply).
    fn lbn_rules(&self, lbn: u32, st: &LbnState, budget_holds: bool) -> Result<(), String> {
        let ppb = self.layout.pages_per_block;
        let blocks = st.blocks();
        if blocks.len() > 3 {
            return Err(format!(
                "logical block {lbn} holds {} blocks: {st:?}",
                blocks.len()
            ));
        }
        for blk in st.roles() {
            if blk.next > ppb {
                return Err(format!("logical block {lbn}: {blk:?} is past its end"));
            }
        }
        let k = &self.budget;
        match &st.job {
            None => {
                if st.replacement.is_some() {
                    return Err(format!("logical block {lbn}: a replacement without a job"));
                }
                // Theorem 4.1: when the host starts filling the buffer, a fold must fit in
                // what is left of it.
                if let Some(b) = st.buffer.filter(|_| budget_holds) {
                    if b.free(ppb) < k.k_fold {
                        return Err(format!(
                            "logical block {lbn}: no job and a buffer with {} free pages (a fold needs {}): {st:?}",
                            b.free(ppb),
                            k.k_fold
                        ));
                    }
                }
            }
            Some(j) => {
                if st.dest(j.dest).is_none() {
                    return Err(format!(
                        "logical block {lbn}: a job without its destination: {st:?}"
                    ));
                }
                if j.steps > 0 && j.sources.iter().any(|(_, lim)| lim.is_none()) {
                    return Err(format!(
                        "logical block {lbn}: a source unfixed after a step: {st:?}"
                    ));
                }
                let over = match j.kind {
                    // Every step of a fold is followed by a host page into the buffer, which
                    // had `k_fold` free pages when the fold started: what is left covers the
                    // steps to come.
                    lbn::JobKind::Fold => {
                        j.steps > k.k_fold
                            || st.buffer.is_none_or(|b| b.free(ppb) + j.steps < k.k_fold)
                    }
                    lbn::JobKind::Shift => j.steps > k.k_shift,
                    // Run to its end at once: never seen between operations.
                    lbn::JobKind::Compact => true,
                };
                if over && budget_holds {
                    return Err(format!(
                        "logical block {lbn}: a job past its budget (k_fold {}, k_shift {}): {st:?}",
                        k.k_fold, k.k_shift
                    ));
                }
            }
        }
        Ok(())
    }

    fn set_block_state(&self, core: &Core, b: BlockIdx, state: BlockState) {
        block_ops::set_block_state(core, self.layout, b, state);
    }

    /// RAM the paper's layout needs for its maps: per logical block three block numbers and
    /// three next-page indices, and N = pi / alpha page-table indices (one per page here).
    fn model_map_bytes(&self) -> usize {
        self.lbns as usize * (3 * 4 + 3 * 2 + self.layout.pages_per_block as usize * 4)
    }
}

impl Scheme for RftlScheme {
    fn kind(&self) -> SchemeKind {
        SchemeKind::Rftl
    }

    fn placer(self: Arc<Self>, _q: usize) -> Box<dyn Placer> {
        place::placer(self)
    }

    fn page_map(&self) -> &PageMap {
        &self.map
    }

    fn after_checkpoint(&self, core: &Core) {
        Journal::reclaim(&self.journal, core, self.layout, &self.map);
    }

    fn after_recovery(&self, core: &Core, clean: Option<&CleanOpen<'_>>) -> Result<()> {
        self.rebuild_roles(core, clean.map_or(&[], |c| c.scheme_state))
    }

    /// The logical blocks with a fold or shift under way (`saved.rs`). A state mutex a step
    /// holds while it waits for the GC gate the checkpoint holds is not waited for: that
    /// logical block is left out (a clean open then compacts it, as after a crash).
    fn checkpoint_state(&self) -> Vec<u32> {
        let jobs: Vec<(u32, LbnState)> = self
            .state
            .iter()
            .enumerate()
            .filter_map(|(l, m)| {
                let st = m.try_lock()?;
                st.job.is_some().then(|| (l as u32, st.clone()))
            })
            .collect();
        saved::encode(&jobs)
    }

    fn check(&self, core: &Core, zombies: &[Psa]) -> std::result::Result<(), String> {
        self.map.check(zombies)?;
        let layout = self.layout;
        let states: Vec<LbnState> = self.state.iter().map(|s| s.lock().clone()).collect();
        let mut owner: std::collections::HashMap<BlockIdx, u32> = Default::default();
        // A device that turned read-only stops mid-job or without a next buffer: the
        // budget's rules no longer apply (the data rules still do).
        let budget_holds = core.read_only_reason().is_none();
        for (lbn, st) in states.iter().enumerate() {
            let lbn = lbn as u32;
            self.lbn_rules(lbn, st, budget_holds)?;
            for b in &st.blocks() {
                if let Some(o) = owner.insert(*b, lbn) {
                    return Err(format!(
                        "block {} belongs to logical blocks {o} and {lbn}",
                        b.0
                    ));
                }
                let s = self.block_state(core, *b);
                if !matches!(s, BlockState::Open | BlockState::Full) {
                    return Err(format!("block {} of logical block {lbn} is {s:?}", b.0));
                }
            }
        }
        for l in 0..self.lpns {
            let Some(psa) = self.map.get(Lpn(l)) else {
                continue;
            };
            let b = layout.block_of(psa);
            let lbn = self.lbn_of(Lpn(l));
            if owner.get(&b) != Some(&lbn) {
                return Err(format!(
                    "lpn {l} lives in block {} which is not one of its logical block {lbn}'s: {:?}",
                    b.0, states[lbn as usize]
                ));
            }
        }
        Ok(())
    }

    fn memory_bytes(&self) -> usize {
        self.map.memory_bytes()
            + self.state.len() * std::mem::size_of::<Mutex<LbnState>>()
            + self.model_map_bytes()
    }

    fn describe(&self, _core: &Core, lpn: Lpn) -> String {
        let lbn = self.lbn_of(lpn);
        format!(
            "lpn {}: {:?}; logical block {lbn}: {:?}",
            lpn.0,
            self.map.get(lpn).map(|p| self.layout.split(p)),
            self.state[lbn as usize].lock()
        )
    }

    fn bench_victim_scan(&self, _core: &Core, _bank: u32) -> Option<u32> {
        None
    }

    fn seal_unit(&self) -> u32 {
        self.spb
    }

    fn rt_stats(&self) -> Option<RtStats> {
        let c = &self.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let b = self.budget;
        Some(RtStats {
            beta: b.beta,
            k_fold: b.k_fold,
            k_shift: b.k_shift,
            step_bound_us: b.step_ns as f64 / 1000.0,
            write_bound_us: b.write_bound_ns as f64 / 1000.0,
            read_bound_us: b.read_bound_ns as f64 / 1000.0,
            copy_steps: ld(&c.copy_steps),
            erase_steps: ld(&c.erase_steps),
            pages_copied: ld(&c.pages_copied),
            erases: ld(&c.erases),
            folds: ld(&c.folds),
            shifts: ld(&c.shifts),
            compactions: ld(&c.compactions),
            jobs_resumed: ld(&c.jobs_resumed),
            merges: 0,
            queue_len: 0,
            queue_max: 0,
            buffer_blocks: 0,
            buffer_blocks_max: 0,
            oob_reads: 0,
            search_misses: 0,
            max_job_steps: ld(&c.max_job_steps),
            step_latency: c.step_latency.summary(),
            log_placement: self.plan.placement().to_string(),
        })
    }
}
