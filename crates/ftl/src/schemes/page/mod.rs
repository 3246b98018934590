//! Scheme `page`: the multi-threaded page-mapping FTL of papers 000/001/002.
//!
//! | module | job |
//! |---|---|
//! | `map` | L2P table, valid-slot bitmap and live trim log, kept in step (invariant 2) |
//! | `place` | bank choice, and which write frontier a page goes to |
//! | `frontiers` | open blocks shared per bank or owned per queue; when a filled one is GC's |
//! | `gc` | bounded-step GC, victim policies, wear levelling, GC workers |
//! | `costs` | each bank's cleaning cost and wear verdict, cached for ranking banks |
//! | `recency` | which pages the host rewrote recently (hot/cold separation) |
//! | `recover` | resolving a checkpoint and an OOB scan into the map |
//!
//! A 4 KiB logical page can live in any slot of any block. Writers pack slots of any pages into
//! NAND pages; GC moves valid slots (by copyback where it can) and erases blocks; a checkpoint
//! holds the L2P table (full or the chunks changed since the last one) and the live trim-log
//! slots.

mod costs;
mod frontiers;
mod gc;
pub mod map;
mod place;
pub mod recency;
pub(crate) mod recover;

use std::sync::Arc;

use nand_model::PageAddr;
use parking_lot::Mutex;

use self::costs::VictimCosts;
use self::frontiers::{OpenPages, ParkedFrontiers};
use self::gc::{BankGc, LoadGauge};
use self::map::PageMap;
use self::place::PagePlacer;
use crate::blocks::BlockState;
use crate::buffer::SealedPage;
use crate::checkpoint::Checkpoint;
use crate::config::{Frontiers, GcPolicy};
use crate::core::Core;
use crate::error::Result;
use crate::layout::{Layout, Lpn, Psa};
use crate::oob;
use crate::recovery::Resolved;
use crate::schemes::{BackgroundWorker, CleanOpen, Placer, RecoverInput, Scheme, SchemeKind};

/// The page scheme's state.
pub struct PageScheme {
    layout: Layout,
    lpns: u32,
    /// L2P, valid slots and the live trim log, kept in step.
    pub map: PageMap,
    /// Per bank: its cleaner's state (victim cursor, GC frontiers, staging), one cleaner at a
    /// time.
    pub gc: Vec<Mutex<BankGc>>,
    /// Host-load gauge of the adaptive GC policy.
    pub gc_load: LoadGauge,
    /// Where foreground GC starts breaking ties between equally cheap banks.
    pub foreground_rr: std::sync::atomic::AtomicU32,
    /// Recent host writes, with hot/cold separation on (`[ftl] separation`).
    pub recency: Option<recency::WriteRecency>,
    /// Each bank's cleaning cost and wear verdict from its last scan (ranking banks).
    costs: VictimCosts,
    /// Frontiers `per-bank`: each bank's host frontiers while no writer borrows them.
    parked: Option<ParkedFrontiers>,
    /// Pages of each block handed to writers and not yet committed (`frontiers.rs`).
    open_pages: OpenPages,
}

impl PageScheme {
    pub fn new(layout: Layout, lpns: u32, banks: usize, frontiers: Frontiers) -> PageScheme {
        PageScheme {
            layout,
            lpns,
            map: PageMap::new(layout, lpns),
            gc: (0..banks).map(|_| Mutex::new(BankGc::default())).collect(),
            gc_load: LoadGauge::default(),
            foreground_rr: Default::default(),
            recency: None,
            costs: VictimCosts::new(layout.banks, layout.blocks_per_bank),
            parked: (frontiers == Frontiers::PerBank).then(|| ParkedFrontiers::new(layout.banks)),
            open_pages: OpenPages::new(
                layout.banks,
                layout.blocks_per_bank,
                layout.pages_per_block,
            ),
        }
    }

    /// A page handed out to a writer was committed or given up: its block becomes GC's once
    /// that was its last outstanding page and its last page is out.
    fn page_resolved(&self, core: &Core, addr: PageAddr) {
        if self.open_pages.resolved(addr) {
            self.mark_full(core, addr.block.bank.0, addr.block.block);
        }
    }
}

impl Scheme for PageScheme {
    fn kind(&self) -> SchemeKind {
        SchemeKind::Page
    }

    fn placer(self: Arc<Self>, q: usize) -> Box<dyn Placer> {
        let banks = self.layout.banks;
        Box::new(PagePlacer::new(self, banks, q))
    }

    /// A data slot becomes its page's newest programmed version (`PageMap::commit_page`);
    /// superseded by a trim or a newer committed version, it stays invalid (garbage for GC).
    fn commit(&self, core: &Core, page: &SealedPage, addr: PageAddr) {
        self.map.commit_page(core, self.layout, page, addr);
        // After the map points at the page's slots: from then on GC may pick the block.
        self.page_resolved(core, addr);
    }

    fn workers(self: Arc<Self>, core: &Core) -> Vec<Box<dyn BackgroundWorker>> {
        if core.cfg.gc_policy == GcPolicy::InPath {
            return Vec::new();
        }
        let adaptive = core.cfg.gc_policy == GcPolicy::Adaptive;
        (0..core.gc_workers())
            .map(|i| {
                Box::new(gc::GcWorker::new(self.clone(), i, adaptive)) as Box<dyn BackgroundWorker>
            })
            .collect()
    }

    fn tick(&self, core: &Core) {
        self.update_gc_allowance(core, core.gc_workers());
    }

    /// Only adaptive GC's workers read the gauge (`held_back`); with the other policies its
    /// decay changes nothing a replay shows.
    fn tick_settled(&self, core: &Core) -> bool {
        core.cfg.gc_policy != GcPolicy::Adaptive || self.gc_load.settled(core, core.gc_workers())
    }

    fn page_map(&self) -> &PageMap {
        &self.map
    }

    fn after_recovery(&self, core: &Core, clean: Option<&CleanOpen<'_>>) -> Result<()> {
        let resumed = self.resume_frontiers(core, clean.map_or(&[], |c| c.partly_programmed));
        let steps = self.restore_headroom(core, &resumed);
        if steps > 0 {
            tracing::info!("open: {steps} GC steps gave every bank a block for writers again");
        }
        Ok(())
    }

    fn recover(
        &self,
        core: &Core,
        ckpt: Option<&Checkpoint>,
        input: RecoverInput,
    ) -> Result<Resolved> {
        self.resolve(core, ckpt, input)
    }

    fn check(&self, core: &Core, zombies: &[Psa]) -> std::result::Result<(), String> {
        let expect = self.map.check(zombies)?;
        let layout = self.layout;
        for (b, e) in expect.iter().enumerate() {
            let bank = b as u32 / layout.blocks_per_bank;
            let blk = b as u32 % layout.blocks_per_bank;
            let state = core.bank(bank).alloc.lock().state[blk as usize];
            if *e > 0
                && matches!(
                    state,
                    BlockState::Free | BlockState::Bad | BlockState::Reserved
                )
            {
                return Err(format!("block {b} is {state:?} but holds {e} valid slots"));
            }
        }
        Ok(())
    }

    fn memory_bytes(&self) -> usize {
        self.map.memory_bytes() + self.recency.as_ref().map_or(0, |r| r.memory_bytes())
    }

    fn describe(&self, core: &Core, lpn: Lpn) -> String {
        let Some(psa) = self.map.get(lpn) else {
            return format!("lpn {}: unmapped", lpn.0);
        };
        let (page, slot) = self.layout.split(psa);
        let mut oob_buf = vec![0u8; self.layout.oob_size as usize];
        let meta = core
            .nand
            .read(page, 0, &mut [], Some(&mut oob_buf))
            .map(|c| c.wait())
            .ok()
            .and_then(|_| oob::decode(&oob_buf, core.layout.slots_per_page));
        let state = core.nand.block_state(page.block);
        format!(
            "lpn {}: psa {} = {page:?} slot {slot}, valid {}, block {state:?}, oob {meta:?}",
            lpn.0,
            psa.0,
            self.map.is_valid(psa)
        )
    }

    fn bench_victim_scan(&self, core: &Core, bank: u32) -> Option<u32> {
        self.victim_scan(core, bank)
    }
}
