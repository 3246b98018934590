//! The scheme boundary: what every FTL scheme provides to the shared machinery, and the
//! registry of schemes.
//!
//! # Shared machinery and schemes
//! Every scheme runs on the same machinery (the modules at the crate's top level): the NAND
//! device and its layout, the block allocator with wear and bad blocks (`blocks`), the write
//! cache (`cache`: overlay and stripe locks) and the per-queue write buffers (`buffer`), the
//! writer threads (`writer`: in-flight programs, commit order, flush and FUA accounting), the
//! host gate and the host paths (`io`), checkpoint framing and chains (`checkpoint`), the OOB
//! format (`oob`) and scan (`recovery`), and statistics (`stats`). A scheme owns what differs
//! between FTL designs: its **map** (page map; block map + log-page maps; block + replacement
//! chains), its **placement** (where a sealed page is programmed), its **reclaim** (GC, merges,
//! bounded partial steps) and its **recovery rules** (how scanned versions resolve).
//!
//! # Why a trait, not an enum over schemes
//! An `enum` over schemes is a type every scheme file extends: a new scheme adds a variant and
//! an arm to every central `match`. A trait keeps each scheme in a room of its own
//! (`schemes/<name>/`): it implements `Scheme` and `Placer` there and adds one line to
//! `SchemeKind::build`. The cost is one indirect call per host page on the read path and one
//! per programmed page on the write path (a few ns against microseconds of FTL work; measured
//! in `benches/README.md`). MQSim's `Address_Mapping_Unit_Base` and FEMU's mapping ops table are
//! the same shape.
//!
//! # The calls, and the locks a scheme may rely on
//! | call | who calls it | held |
//! |---|---|---|
//! | `Scheme::locate` | host read | the page's stripe |
//! | `Scheme::unmap` | host trim | the page's stripes |
//! | `Scheme::placer` | once per queue, at start | nothing |
//! | `Placer::target`, `Placer::target_group`, `Placer::failed` | the queue's writer, before/after a program (`target_group` with the pages waiting, up to `Placer::group_size`) | with timing `off` or `virtual` (writers inline), the queue's open page and its inline-writer lock, in that order |
//! | `Scheme::commit` | the queue's writer, in seal order, after the program completed | nothing |
//! | `Scheme::spawn_workers`, `Scheme::tick` | `Ftl::start`; the maintenance thread every 50 ms | nothing |
//! | `Scheme::checkpoint_payload`, `Scheme::checkpoint_written` | `Core::checkpoint` | host gate frozen, `gc_gate` exclusive; nothing |
//! | `Scheme::recover` | `Ftl::open`, before any thread runs | nothing |
//! | `Scheme::check` | tests, quiesced | checkpoint lock, `gc_gate` exclusive, every open page |

use std::sync::Arc;

use nand_model::{BlockAddr, PageAddr};
use serde::{Deserialize, Serialize};

use crate::buffer::SealedPage;
use crate::cache::Stripe;
use crate::checkpoint::{Checkpoint, MapImage, MapSink, MapSource};
use crate::core::Core;
use crate::error::Result;
use crate::layout::{Layout, Lpn, Psa};
use crate::recovery::Resolved;
use crate::schemes::page::map::PageMap;

pub(crate) mod block_ops;
pub mod gftl;
pub mod hybrid;
pub mod page;
pub mod rftl;

pub use hybrid::banks::{BankPlan, LogPlacement};

/// The FTL schemes an image can be formatted with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemeKind {
    /// Page mapping (papers 000/001/002): any logical page anywhere, greedy/cost-benefit GC.
    #[default]
    Page,
    /// BAST (Kim et al. 2002): block-mapped data blocks, one page-mapped log block per data
    /// block, switch/partial/full merges.
    Bast,
    /// FAST (Lee et al. 2007): block-mapped data blocks, one sequential-write log block and
    /// fully associative random-write log blocks.
    Fast,
    /// RFTL (Qin et al., paper 004): three blocks per logical block and distributed partial
    /// GC, a step of at most one erase's time per host write.
    Rftl,
    /// NFTL (Ban 1995; paper 004's block-level baseline): a data block and a replacement
    /// block per logical block, merged when the replacement is full.
    Nftl,
    /// GFTL (Choudhuri & Givargis 2008; paper 004's real-time baseline): a data block per
    /// logical block, appended to in any order and searched by its OOB on reads, a shared
    /// write buffer, and a queue of logical blocks merged a step per host request.
    Gftl,
}

impl SchemeKind {
    /// Every scheme, in the order `ftld presets` lists them.
    pub const ALL: [SchemeKind; 6] = [
        SchemeKind::Page,
        SchemeKind::Bast,
        SchemeKind::Fast,
        SchemeKind::Rftl,
        SchemeKind::Nftl,
        SchemeKind::Gftl,
    ];

    /// The name used on the command line, in TOML, JSON and the superblock.
    pub fn name(self) -> &'static str {
        match self {
            SchemeKind::Page => "page",
            SchemeKind::Bast => "bast",
            SchemeKind::Fast => "fast",
            SchemeKind::Rftl => "rftl",
            SchemeKind::Nftl => "nftl",
            SchemeKind::Gftl => "gftl",
        }
    }

    /// One line on what the scheme is.
    pub fn description(self) -> &'static str {
        match self {
            SchemeKind::Page => {
                "page mapping: a 4 KiB logical page anywhere; per-queue writers, greedy or cost-benefit GC (papers 000-002)"
            }
            SchemeKind::Bast => {
                "hybrid BAST: block-mapped data blocks, one log block per data block; switch, partial and full merges (thesis 003)"
            }
            SchemeKind::Fast => {
                "hybrid FAST: block-mapped data blocks, a sequential log block and fully associative random log blocks (thesis 003)"
            }
            SchemeKind::Rftl => {
                "real-time RFTL: three blocks per logical block, partial GC of at most one erase per host write (paper 004)"
            }
            SchemeKind::Nftl => {
                "block-level NFTL: a data block and a replacement block per logical block, merged when full (paper 004's baseline)"
            }
            SchemeKind::Gftl => {
                "real-time GFTL: data blocks searched by OOB on reads, a shared write buffer, queued merges a step per request (paper 004's baseline)"
            }
        }
    }

    /// The scheme's code in the superblock.
    pub(crate) fn code(self) -> u32 {
        match self {
            SchemeKind::Page => 0,
            SchemeKind::Bast => 1,
            SchemeKind::Fast => 2,
            SchemeKind::Rftl => 3,
            SchemeKind::Nftl => 4,
            SchemeKind::Gftl => 5,
        }
    }

    pub(crate) fn from_code(code: u32) -> Option<SchemeKind> {
        SchemeKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Whether the scheme keeps log blocks (`[ftl] log_blocks` applies).
    pub fn has_log_blocks(self) -> bool {
        matches!(self, SchemeKind::Bast | SchemeKind::Fast)
    }

    /// Whether an `[ftl]` setting (its key in the config file) means anything to this scheme.
    /// A setting the scheme ignores is named to the user rather than dropped silently: hot/cold
    /// separation, write frontiers and the GC settings (policy, workers, free-block floor and
    /// pool, victim policy, copyback) belong to the page scheme, whose GC is the only one with
    /// workers and victims (the block-mapped schemes merge or step inside their writes);
    /// static wear levelling to the page scheme and the hybrid merges (not rftl's or gftl's
    /// fixed rotations); log placement to the block-mapped schemes; log blocks to bast and fast.
    pub fn uses_setting(self, key: &str) -> bool {
        match key {
            "separation" | "frontiers" | "hot_window" | "victim_policy" | "gc_copyback"
            | "gc_policy" | "gc_threads" | "gc_soft_free" | "gc_free_pool" => {
                self == SchemeKind::Page
            }
            "wear_level_spread" => !self.is_real_time(),
            "log_placement" => self != SchemeKind::Page,
            "log_blocks" => self.has_log_blocks(),
            "overprovision" => self.uses_overprovision(),
            _ => true,
        }
    }

    /// Whether the scheme bounds a host write's reclaim work to one partial GC step (its device
    /// must allow a page copy within an erase's time).
    pub fn is_real_time(self) -> bool {
        matches!(self, SchemeKind::Rftl | SchemeKind::Gftl)
    }

    /// Whether a device's timing and geometry let the scheme give its guarantee (the
    /// real-time schemes' bound), or why not; every device fits the others.
    pub fn fits_device(self, nand: &nand_model::NandConfig) -> std::result::Result<(), String> {
        match self {
            SchemeKind::Rftl => rftl::StepBudget::of(nand).map(|_| ()),
            SchemeKind::Gftl => gftl::GcBudget::of(nand, 1).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// The usable blocks (neither bad nor reserved) the scheme needs to go on writing
    /// whatever the host writes, on `nand` laid out as `layout`, with `lpns` exported pages
    /// and `log_blocks` log blocks, served with `cfg`. Fewer, and the device turns read-only
    /// ("spare blocks exhausted"): when a block goes bad and at every open of a device with
    /// bad blocks (`Core::check_spares`). So a
    /// worn-out device turns read-only where the scheme's own rules run out of blocks, and
    /// stays so across opens, rather than taking writes until a reclaim finds no free block in
    /// the middle of its work. Fails only where the scheme cannot run on `nand` at all (gftl's
    /// budget).
    pub(crate) fn blocks_needed(
        self,
        nand: &nand_model::NandConfig,
        layout: &Layout,
        lpns: u32,
        log_blocks: u32,
        cfg: &crate::config::FtlConfig,
    ) -> std::result::Result<u64, String> {
        let banks = u64::from(layout.banks);
        let lbns = u64::from(lpns).div_ceil(u64::from(layout.slots_per_block()));
        let room = working_room(banks);
        Ok(match self {
            // The blocks the exported pages fill and each bank's open blocks, reserve and
            // garbage room.
            SchemeKind::Page => lbns + banks * page_room_per_bank(nand, cfg),
            // A data block per logical block and the log pool.
            SchemeKind::Bast | SchemeKind::Fast => lbns + u64::from(log_blocks) + room,
            // BAST with a replacement block for every logical block.
            SchemeKind::Nftl => 2 * lbns + room,
            // Primary, buffer and replacement (Lemma 4.2): the step bound holds only while a
            // job always finds its next block.
            SchemeKind::Rftl => 3 * lbns + room,
            // A data block each, the write buffer the budget sizes and the merge's new data
            // block: with fewer, the buffer may fill before the queue's round empties it.
            SchemeKind::Gftl => gftl::GcBudget::of(nand, lbns)?.blocks_needed(lbns) + room,
        })
    }

    /// Physical blocks a logical block may hold at once, for schemes that map whole blocks
    /// to logical blocks without a shared log pool (0: not such a scheme).
    pub fn blocks_per_logical_block(self) -> u64 {
        match self {
            SchemeKind::Rftl => 3,
            SchemeKind::Nftl => 2,
            _ => 0,
        }
    }

    /// Whether `[ftl] overprovision` sizes the scheme's spare. rftl and nftl work in each
    /// logical block's own blocks, gftl in a write buffer sized from the timing; their spare
    /// for bad blocks is the format's reserve (`bad_block_reserve`).
    pub fn uses_overprovision(self) -> bool {
        matches!(self, SchemeKind::Page | SchemeKind::Bast | SchemeKind::Fast)
    }

    /// The fewest log blocks the scheme works with.
    pub fn min_log_blocks(self) -> u32 {
        match self {
            SchemeKind::Page | SchemeKind::Rftl | SchemeKind::Nftl | SchemeKind::Gftl => 0,
            SchemeKind::Bast => 1,
            // One sequential-write log block and at least one random-write one.
            SchemeKind::Fast => 2,
        }
    }

    /// Builds the scheme's state for a device of `lpns` logical pages.
    /// `plan` says where the block-mapped schemes put new blocks (unused by `page`). Fails
    /// for `rftl` on a device whose timing or block size cannot give its bound.
    pub(crate) fn build(
        self,
        layout: Layout,
        lpns: u32,
        log_blocks: u32,
        plan: BankPlan,
        cfg: &crate::config::FtlConfig,
        nand: &nand_model::NandConfig,
    ) -> Result<Arc<dyn Scheme>> {
        let hybrid = |policy| {
            Arc::new(hybrid::HybridScheme::new(
                policy, layout, lpns, log_blocks, plan,
            ))
        };
        match self {
            SchemeKind::Page => {
                let mut scheme =
                    page::PageScheme::new(layout, lpns, layout.banks as usize, cfg.frontiers);
                if cfg.separation == crate::config::Separation::HotCold {
                    let window = (f64::from(lpns) * cfg.hot_window).round() as u64;
                    scheme.recency = Some(page::recency::WriteRecency::new(lpns, window));
                }
                Ok(Arc::new(scheme))
            }
            SchemeKind::Bast => Ok(hybrid(hybrid::LogPolicy::Bast)),
            SchemeKind::Fast => Ok(hybrid(hybrid::LogPolicy::Fast)),
            SchemeKind::Nftl => Ok(Arc::new(hybrid::HybridScheme::nftl(layout, lpns, plan))),
            SchemeKind::Rftl => {
                let budget = rftl::StepBudget::of(nand)
                    .map_err(|e| crate::FtlError::Config(format!("scheme rftl: {e}")))?;
                Ok(Arc::new(rftl::RftlScheme::new(layout, lpns, budget, plan)))
            }
            SchemeKind::Gftl => {
                let lbns = lpns.div_ceil(layout.slots_per_block());
                let budget = gftl::GcBudget::of(nand, u64::from(lbns))
                    .map_err(|e| crate::FtlError::Config(format!("scheme gftl: {e}")))?;
                let need = budget.blocks_needed(u64::from(lbns));
                if need > u64::from(layout.total_blocks()) {
                    return Err(crate::FtlError::Config(format!(
                        "scheme gftl: {lbns} logical blocks and a write buffer of {} blocks need {need} blocks, the device has {}",
                        budget.buffer_blocks,
                        layout.total_blocks()
                    )));
                }
                Ok(Arc::new(gftl::GftlScheme::new(layout, lpns, budget, plan)))
            }
        }
    }
}

impl std::fmt::Display for SchemeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SchemeKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        SchemeKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = SchemeKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown FTL scheme {s:?} (known: {})", names.join(", "))
            })
    }
}

/// The blocks a block-mapped scheme (every scheme but `page`) needs on top of its logical
/// blocks' own, on a device of `banks` banks: a destination per bank for the merges or
/// compactions in flight (one per writer, never more than the banks' worth the format keeps;
/// the hybrids' new log blocks leave a GC reserve block per bank to them), the trim journal's
/// open block and the full ones waiting for two checkpoints before they are erased, and a
/// block whose program failed until it is emptied. Every image's format leaves at least this
/// (`plan_format`'s frontier room is `banks * 6` or more), and its superblock check asks for it.
pub(crate) fn working_room(banks: u64) -> u64 {
    2 * banks + 2
}

/// Blocks per bank the page scheme keeps out of its data besides the exported pages' own:
/// every open block (the host's one per plane, each data queue writer's with frontiers
/// `per-queue`; the trim queue's one; GC's frontier one; two of each host and GC frontier with
/// hot/cold separation), the GC reserve, and two blocks' worth of garbage for GC to reclaim
/// (with less, a bank's GC frontier may fill with no victim that fits its room and no free
/// block for another: "nothing to reclaim"; a device worn down to the bare count did so in one
/// run in three of `faults.rs`' wear-out). [`SchemeKind::blocks_needed`] counts it, and the
/// format keeps it out of the exported space (`plan_format`, for every scheme: with one
/// temperature and one frontier owner it is the room the hybrids' format always had), so a
/// fresh image formatted with the settings it is served with has its over-provisioning as
/// spare for bad blocks.
pub(crate) fn page_room_per_bank(
    nand: &nand_model::NandConfig,
    cfg: &crate::config::FtlConfig,
) -> u64 {
    let planes = u64::from(nand.planes.max(1));
    let temps = match (cfg.scheme, cfg.separation) {
        (SchemeKind::Page, crate::config::Separation::HotCold) => 2,
        _ => 1,
    };
    let open = temps * (crate::frontier_owners(cfg) * planes + 1) + 1;
    open + u64::from(crate::core::GC_RESERVE) + 2
}

/// What a clean open (the checkpoint describes every programmed page) hands a scheme's
/// [`Scheme::after_recovery`].
pub(crate) struct CleanOpen<'a> {
    /// The good blocks the close left partly programmed, marked `Full` like every programmed
    /// block: a scheme may resume writing after the last page of one that reads back whole
    /// (`Core::last_page_intact`: an earlier crash's torn page or a failed program may end
    /// it).
    pub partly_programmed: &'a [BlockAddr],
    /// The checkpoint's [`Scheme::checkpoint_state`]: as read from the medium, to be
    /// validated before any of it is used.
    pub scheme_state: &'a [u32],
}

/// A scheme's checkpoint payload: its map image and the trim-log slots it keeps live.
pub(crate) struct CheckpointPayload {
    pub map: MapImage,
    pub trims: Vec<(Psa, u64)>,
}

/// What the shared machinery asks of an FTL scheme (see the module doc for who calls what).
pub(crate) trait Scheme: Send + Sync + std::any::Any {
    fn kind(&self) -> SchemeKind;

    /// Where `lpn`'s newest programmed version lives (`None`: it reads as zeroes). The write
    /// cache's overlay has been looked at already.
    fn locate(&self, _stripe: &Stripe, lpn: Lpn) -> Option<Psa> {
        self.page_map().get(lpn)
    }

    /// A host read arrives, before anything of it is looked up or pinned: a scheme whose GC
    /// runs a step per request (GFTL) runs it here. The reader holds nothing; the step must
    /// not wait for a lock, a pin or a program in flight (skip it instead).
    fn before_read(&self, _core: &Core) {}

    /// `lpn` is about to be read from `psa` (its block pinned): the NAND reads the scheme's
    /// own lookup makes before the data read, if its mapping is not all in RAM (GFTL searches
    /// its data block's OOB area). They are submitted now, so the bank's timeline keeps the
    /// data read behind them.
    fn search_on_flash(&self, _core: &Core, _lpn: Lpn, _psa: Psa) {}

    /// Trim: unmaps `lpn`. Returns the slot it pointed at, which must stay allocated until the
    /// trim's record is on flash: the record travels in a [`SealedPage`]'s `zombies`, and
    /// [`Scheme::commit`] of that page releases them.
    fn unmap(&self, stripe: &Stripe, lpn: Lpn) -> Option<Psa> {
        self.page_map().unmap(stripe, lpn)
    }

    /// Queue `q`'s placement state, owned by its writer.
    fn placer(self: Arc<Self>, q: usize) -> Box<dyn Placer>;

    /// `page` was programmed at `addr` and the program completed: make its slots the newest
    /// programmed versions of their pages through the page map (`PageMap::commit_page`: also
    /// under a newer version still in a buffer; not after a trim or a newer committed one,
    /// but held valid while such a trim's record is in RAM).
    fn commit(&self, core: &Core, page: &SealedPage, addr: PageAddr) {
        self.page_map().commit_page(core, core.layout, page, addr);
    }

    /// The scheme's background workers (GC): each runs on its own thread, or with timing
    /// `virtual` as an actor of the simulation. None by default: the block-mapped schemes
    /// reclaim where the write arrives (merges, partial steps).
    fn workers(self: Arc<Self>, _core: &Core) -> Vec<Box<dyn BackgroundWorker>> {
        Vec::new()
    }

    /// The maintenance thread's tick (every 50 ms).
    fn tick(&self, _core: &Core) {}

    /// Virtual time: whether [`Scheme::tick`] is at a fixed point while the host is idle and
    /// the device changes nothing (a tick then changes no state: `sim::Background`'s idle
    /// skip). What a tick decides from the device's state alone needs no answer here: the
    /// skip waits for a tick that did nothing on the device. Only state a tick moves on with
    /// time does (a decaying load gauge).
    fn tick_settled(&self, _core: &Core) -> bool {
        true
    }

    /// The per-page index every scheme keeps today (where each logical page's newest version
    /// is, the valid bitmap, the trim log): `locate`, `unmap` and the checkpoint calls
    /// default to it. A scheme with another map (a demand-paged one, say) overrides them.
    fn page_map(&self) -> &PageMap;

    /// Whether the next checkpoint should be a full one rather than a delta.
    fn prefers_full_checkpoint(&self) -> bool {
        self.page_map().prefers_full_checkpoint()
    }

    /// The scheme's part of a checkpoint (host mutations frozen, GC between steps).
    fn checkpoint_payload(&self, full: bool) -> CheckpointPayload {
        self.page_map().checkpoint_payload(full)
    }

    /// A full checkpoint's map read from the live table, and the live trim-log slots (the
    /// caller holds host mutations and GC off until the checkpoint is written).
    fn checkpoint_live(&self) -> (&dyn MapSource, Vec<(Psa, u64)>) {
        self.page_map().checkpoint_live()
    }

    /// The table a loaded checkpoint's map goes into (recovery, before any thread starts).
    fn map_sink(&self) -> &dyn MapSink {
        self.page_map()
    }

    /// A checkpoint is on flash; `prev_sc` is the sequence counter of the one before it, the
    /// oldest a recovery may fall back to: trim records older than both checkpoints are no
    /// longer needed by any recovery path.
    fn checkpoint_written(&self, prev_sc: u64) {
        self.page_map().prune_trim_log(prev_sc);
    }

    /// Rebuilds the scheme's state from the checkpoint (if any; its map is in [`Scheme::map_sink`]
    /// already) and a scan of what was programmed after it, which the scheme runs
    /// ([`Core::scan`]); the shared block states are rebuilt by the caller afterwards. By
    /// default the page scheme's rules (the highest sequence number wins; copies keep it)
    /// into the page map; a scheme then derives its own roles in `after_recovery`.
    fn recover(
        &self,
        core: &Core,
        ckpt: Option<&Checkpoint>,
        input: RecoverInput,
    ) -> Result<Resolved> {
        let map = self.page_map();
        page::recover::resolve(core, core.layout, map.lpns(), map, ckpt, input)
    }

    /// Checks the scheme's invariants (quiesced by `check::Quiesced`: no host operation, no
    /// page in flight, GC between steps); `zombies` are the slots whose trim records are still
    /// in the queues' open pages.
    fn check(&self, core: &Core, zombies: &[Psa]) -> std::result::Result<(), String>;

    /// Bytes of RAM the scheme's maps use (grow with the device).
    fn memory_bytes(&self) -> usize;

    /// A line about one logical page's mapping, for tests chasing a lost write.
    fn describe(&self, core: &Core, lpn: Lpn) -> String;

    /// Runs victim selection on `bank` without acting on it (benchmarks).
    fn bench_victim_scan(&self, core: &Core, bank: u32) -> Option<u32>;

    /// Logical pages per unit a NAND page must not mix (0: any mix). The write buffers seal
    /// a page early rather than put two units' pages in it.
    fn seal_unit(&self) -> u32 {
        0
    }

    /// Recovery rebuilt the block states and free lists: the scheme may finish its own
    /// rebuild (derive block roles, reclaim what a crash left half done). Before any thread.
    /// `clean`: on a clean open (nothing programmed after the checkpoint), what the close
    /// left; `None` after a crash.
    fn after_recovery(&self, _core: &Core, _clean: Option<&CleanOpen<'_>>) -> Result<()> {
        Ok(())
    }

    /// The scheme's own state for a checkpoint (`Checkpoint::scheme_state`), which a clean
    /// open hands back in [`CleanOpen::scheme_state`]. Called with host mutations frozen and
    /// `gc_gate` held exclusive: it must not wait for a lock a step holds across the gate
    /// (try it, and leave out what it cannot have: the open then rebuilds that part as after
    /// a crash).
    fn checkpoint_state(&self) -> Vec<u32> {
        Vec::new()
    }

    /// A checkpoint was written and `checkpoint_written` ran; the checkpoint lock is still
    /// held, nothing else (reclaim what the pruned trim log freed).
    fn after_checkpoint(&self, _core: &Core) {}

    /// Merge statistics (schemes that merge).
    fn merge_stats(&self) -> Option<crate::stats::MergeStats> {
        None
    }

    /// Partial GC statistics (real-time schemes).
    fn rt_stats(&self) -> Option<crate::stats::RtStats> {
        None
    }
}

/// A scheme's background worker, cut into rounds so that a thread (`Ftl::start`) and the
/// virtual-time simulation (`sim.rs`) run the same code.
pub(crate) trait BackgroundWorker: Send {
    /// The thread's name.
    fn name(&self) -> String;

    /// One round of work of at most `max_steps` steps. `Some(d)`: there was nothing to do;
    /// look again after `d`, or when woken (`Core::gc_wake`).
    fn round(&mut self, core: &Core, max_steps: u32) -> Option<std::time::Duration>;

    /// Whether the worker is held back from cleaning (adaptive GC while the host is busy):
    /// then only `Core::gc_urgent` wakes it, not every block a writer opens.
    fn held_back(&self, _core: &Core) -> bool {
        false
    }

    /// Virtual time: whether a round that found nothing to do would find nothing again however
    /// much time passed, as long as the device and the host change nothing (not held back by
    /// a host load that decays with time). `false` (the default) keeps the idle skip off.
    fn settled(&self, _core: &Core) -> bool {
        false
    }
}

/// What recovery hands a scheme: the blocks' state now and what to scan.
pub(crate) struct RecoverInput {
    /// Per global block: whether its checkpointed contents were erased since (or it went bad).
    pub erased_since: Vec<bool>,
    /// Per global block: the first page programmed after the checkpoint (0 if erased since);
    /// a slot below it is the checkpoint's, a slot at or above it the scan's.
    pub scan_from: Vec<u32>,
    /// Per bank: `(block, from, to)` page ranges programmed after the checkpoint.
    pub ranges: Vec<Vec<(u32, u32, u32)>>,
    /// Per global block: marked bad. A page whose newest version is there is lost (its
    /// block cannot be read): an older version found elsewhere must not stand in for it.
    pub bad: Vec<bool>,
}

/// What a placer decided for a page.
pub(crate) enum Target {
    /// Program the page here (the page is reserved for it, so a failed program consumes it).
    Program(PageAddr),
    /// Program the first `n` pages of the group offered to [`Placer::target_group`] here, one
    /// per plane of one bank at one page index, as one multi-plane operation (`n >= 2`); the
    /// rest of the group is offered again.
    Planes(Vec<PageAddr>),
    /// Commit every program in flight first, then ask again: the placer must wait for a lock
    /// or reclaim space, which it may do only while it holds nothing for programs in flight
    /// (the hybrid schemes' rule that keeps their logical-block locks free of cycles).
    Drain,
    /// The device turned read-only.
    ReadOnly,
}

/// A queue's placement: where the pages its writer seals are programmed.
pub(crate) trait Placer: Send {
    /// Where the next program of `page` goes. May reclaim space first.
    fn target(&mut self, core: &Core, page: &SealedPage) -> Target;

    /// How many sealed pages the writer offers [`Placer::target_group`] at once on a device
    /// with `planes` planes: more than one only for a placer that programs several planes of
    /// a bank together.
    fn group_size(&self, _planes: u32) -> usize {
        1
    }

    /// Where the next program of a group of sealed pages (in seal order, at most
    /// [`Placer::group_size`]) goes: [`Target::Planes`] for a multi-plane program of a prefix
    /// of them, else a [`Target`] for the first page alone.
    fn target_group(&mut self, core: &Core, pages: &[SealedPage]) -> Target {
        self.target(core, &pages[0])
    }

    /// The page programmed at `addr` was committed (after [`Scheme::commit`]): whatever the
    /// placer held for it may be released.
    fn committed(&mut self, _core: &Core, _page: &SealedPage, _addr: PageAddr) {}

    /// The program at `addr` failed: the block is retired. The writer has committed every
    /// earlier page first.
    fn failed(&mut self, core: &Core, page: &SealedPage, addr: PageAddr);

    /// The program of the last [`Target`] returned (`addrs`) was issued: `programmed`, or it
    /// failed and [`Placer::failed`] was called for its failed pages (then none of `addrs`
    /// will be committed: the writer programs the pages again elsewhere). Whatever the placer
    /// held only until the program was issued may go to other writers.
    fn issued(&mut self, _core: &Core, _addrs: &[PageAddr], _programmed: bool) {}

    /// Whether this placer, on a device that turned read-only because it wore out
    /// ([`Core::programs_acknowledged`]), still places the pages already acknowledged, into
    /// erased pages only (its open blocks, then free blocks): no erase, no GC, no merge. A
    /// placer that says so returns [`Target::ReadOnly`] for a page with no erased place left
    /// (the writer drops and counts it, `pages_dropped_read_only`); the others drop them all.
    /// Every scheme here says so (the block-mapped ones: `block_ops::Placing`).
    fn programs_after_turn(&self) -> bool {
        false
    }
}
