//! # ftl — flash translation layers over emulated NAND
//!
//! The FTL scheme is chosen per image at format time ([`SchemeKind`]: `page`, the
//! multi-threaded page-mapping FTL of papers 000/001/002; `bast` and `fast`, the hybrid
//! log-block FTLs of the thesis, paper 003; `rftl`, the real-time FTL of paper 004, whose
//! distributed partial GC bounds every write by one erase-long step and its program) and kept
//! in its superblock.
//!
//! Exposes an emulated NAND device ([`nand_model`]) as a block device of 512-byte sectors with
//! a volatile write cache: writes are acknowledged once buffered, [`Ftl::flush`] (or a FUA
//! write) makes them durable, and a crash (power cut, `kill -9`) loses at most unflushed data —
//! never a torn 4 KiB page, never another page's data.
//!
//! The API is `Send + Sync` and runtime-agnostic: its `async fn`s are woken by the NAND model's
//! timer (its thread, or the event loop that drives it) and by the FTL's own threads, so they
//! run under tokio, under a ublk queue's executor or under `futures::executor::block_on` alike.
//!
//! With timing `virtual` the same code runs as a deterministic simulation: no thread is
//! started, every `async fn` is ready on its first poll, writers, GC workers and maintenance
//! are actors on the NAND model's simulated clock (`sim`), and a driver (the `ftl-replay`
//! crate) calls [`Ftl::advance_to`] with each request's arrival time before running it.
//!
//! ## Where things are
//! Shared machinery, used by every scheme (top-level modules):
//!
//! | module | job |
//! |---|---|
//! | `layout` | address newtypes (`Lpn`, `Psa`), geometry-derived layout, reserved blocks |
//! | `core` | the state every thread shares, the lock order, allocator helpers |
//! | `gate` | the host gate a checkpoint freezes |
//! | `cache` | the write cache's overlay of buffered pages and its stripe locks |
//! | `buffer` | per-queue write buffers (MT-FTL) and trim records |
//! | `writer` | per-queue writer threads: programs in flight, commits in seal order |
//! | `read` | host reads: where each page comes from, slots of one NAND page read as one column read, multi-plane reads |
//! | `io` | host write / trim / flush paths |
//! | `blocks` | block states, erase counts, per-bank free lists, read pins |
//! | `checkpoint` | superblock, checkpoints (format streamed in `codec`, chains read into the live map in `load`), the maintenance thread |
//! | `recovery` | the OOB scan (slots handed to the scheme's resolution as found), block states after an open |
//! | `oob` | the spare-area record of every page |
//! | `stats` | counters, WAF, wear, latency histograms |
//! | `request_log` | recording the host requests as a blkparse trace (`ftld serve --record`) |
//! | `sim` | timing `virtual`: background work as actors of a discrete-event simulation |
//!
//! The scheme boundary is `schemes` (the `Scheme` and `Placer` traits, `SchemeKind`; its doc
//! says why a trait, and which call holds which lock). Each scheme is a folder under it:
//! `schemes/page` (map, placement, GC, recovery rules of the page-mapping FTL) and
//! `schemes/hybrid` (BAST and FAST: bank choice `same`/`spread` for TMCD and PMCD devices,
//! logical-block locks, log pool, log placement, merges,
//! block roles after recovery) and `schemes/rftl` (RFTL: the step budget from the device's
//! timing, a logical block's three blocks and its fold/shift jobs, a step per host page, roles
//! after recovery) and `schemes/gftl` (GFTL: the step size and write-buffer size from the
//! timing, the GC queue, a merge step per host page, roles after recovery);
//! `schemes/block_ops` holds what the block-mapped schemes share.
//!
//! ## Design in one page
//! **Definitions.** An *LPN* is a 4 KiB logical page; a *slot* is a 4 KiB piece of a NAND page;
//! a *sequence number* orders every write and trim. **Invariants.** (1) a page's newest version
//! is in the overlay if buffered, else where the scheme's map points, else it reads as zeroes
//! — unless recovery found it lost (its current version in a block marked bad, or erased since
//! the checkpoint that mapped it, with no newer copy: `Core::is_lost`), when a read fails;
//! (2) every scheme: a slot is valid iff `l2p` (or the live trim log) points at it, or it is a
//! zombie (or late zombie) whose trim record is not on flash yet
//! (`schemes::page::map::PageMap`, which the hybrids use too, is the only writer of both and
//! checks it); (2h) hybrid schemes: every mapped page lives in its logical block's data block
//! at its own offset, or in one of that
//! block's log blocks, and the log pool never holds more than its limit; under FAST only the
//! one sequential-write log has an owner (`HybridScheme::check`); (2r) rftl: every mapped page
//! lives in one of its logical block's blocks, a logical block holds at most three, no block
//! belongs to two, and with no job under way its buffer has room for a fold (`k_fold` free
//! pages: RFTL's Theorem 4.1) (`RftlScheme::check`); (2g) gftl: a data block holds only its
//! logical block's pages (in the order written); any other mapped page is in a write-buffer
//! block or a merge's block, and its logical block is queued or under merge; no block has two
//! roles; a merge copies at most one block's offsets in at most `merge_steps` steps;
//! the write buffer holds at most the blocks its guarantee computes (once the queue drained
//! after an open that found buffer blocks) (`GftlScheme::check`); (3) only a block's owner
//! programs it (a writer's frontier — with `[ftl] frontiers = "per-bank"` lent to one writer for
//! each program — one block per plane of a bank on a device with planes; a
//! log block's page, or an rftl block's or a gftl data block's, only by the writer holding its
//! logical block; gftl's write-buffer block is lent to one writer for each program);
//! (3f) a host frontier's block becomes a GC candidate only once every page programmed into
//! it is committed (`schemes/page/frontiers.rs`: with frontiers shared per bank, pages of one
//! block commit from several queues in any order);
//! (4) a block is erased only after every valid slot moved and no read is pinned on it;
//! (5) every programmed slot's OOB names its LPN and sequence number, so the newest version on
//! flash is the one with the highest number. `Ftl::check_invariants` (`check.rs`) checks (1)-(5)
//! and the block bookkeeping without flushing; the model test calls it after every step. **Media assumptions.** a programmed page survives
//! process death; a page program is atomic, or cut by a power loss, which can tear only the
//! pages being programmed (one, or one per plane of a multi-plane program) — each its block's
//! last programmed page — and leaves them detectably torn (their
//! OOB or their data fails a checksum). Recovery ignores a torn write there
//! (`RecoveryReport::torn_slots`; `schemes/page/recover.rs` says how it tells torn from
//! rotted); any other slot whose data fails its checksum has rotted, and a host read of it is
//! an error.
//!
//! **Read-only.** A device is read-only when opened so ([`Access::ReadOnly`]: the NAND model
//! maps the image `PROT_READ` and refuses every changing operation) or when it turns so (damage
//! recovery found, spares or checkpoint areas worn out, a full file system). Spares are worn
//! out when the usable blocks fall below what the scheme needs to keep writing whatever the
//! host does (`SchemeKind::blocks_needed`), checked when a block goes bad and at every open
//! of a device with bad blocks, so a worn-out device opens read-only again (a new image's
//! spare: its over-provisioning, or for nftl, rftl and gftl 2 % of its blocks,
//! `bad_block_reserve`); checkpoint areas
//! are worn out once either lost so many blocks that it cannot hold a full checkpoint (an
//! area's pages skip its bad blocks, `checkpoint/area.rs`; `Core::checkpoint_areas_worn`). It
//! stays so for the run, and then nothing changes the medium: no erase (a retirement after a
//! failed program excepted, on a device that turned read-only while running), GC round, merge
//! or checkpoint, and no program but one kind: a device that wore out (spares or a checkpoint
//! area; `Core::programs_acknowledged`) still programs the pages it had acknowledged and not
//! yet programmed (a partly filled page of a preset with pages over 4 KiB, trim records, pages
//! a writer thread or virtual time's inbox held), as they come and at the stop, into erased
//! pages only (`Placer::programs_after_turn`): the page scheme into its open blocks and then
//! its free blocks; a block-mapped scheme where its rules put the page without a merge, step,
//! fold or compaction first (the logical block's own open blocks or logs, a new one from the
//! free blocks, the journal's: `block_ops::Placing`), and it ends these programs at the first
//! one that fails (its way back from a failed program erases). The next open rolls forward to
//! them. A device read-only
//! since its open acknowledged no write, so its flushes succeed; one that turned so fails every
//! flush. A write or trim during which the device turned fails, even if it was buffered: with
//! timing off a sealed page is placed before its request returns, and one whose placement met
//! the turn may be unprogrammed. What is acknowledged and cannot be programmed (another read-only
//! reason, or no erased page left where the scheme may put it) reads from RAM until the stop,
//! which counts and logs it (`pages_dropped_read_only`).
//!
//! **Crash consistency of trims.** A trim unmaps at once, but the slots it unmapped stay
//! counted as valid (GC keeps their blocks) until the trim's record is on flash. Records are
//! batched in a dedicated trim queue (its writer never waits behind a data queue), sealed by a
//! flush, a FUA trim, the maintenance thread's 50 ms tick, or GC finding a block it may not yet
//! erase. Erasing them earlier could let
//! an *older* copy of a page outlive the newest one, and a crash that lost the unflushed trim
//! would then bring that older copy back. For the same reason a slot of the page still being
//! programmed when the trim came (a FUA write, say) is held too when it completes: it is then
//! the newest version a crash would recover (`PageMap::commit_page`, "late zombies"). A write
//! of part of a page (a read-modify-write) that a whole-page write or trim of the page
//! overtakes is redone on the newer version, so it never writes the old bytes back
//! (`cache::RmwEntry`).
//!
//! **Checkpoints** are chains: a full snapshot of the map, then incremental ones holding only the
//! map chunks (1024 entries) changed since, appended in the same area until it is full or the
//! chain is 32 long; then a full one goes to the other area. Recovery loads the newest readable
//! chain and scans only pages programmed after its last element.
//!
//! Memory: 4 bytes of L2P per exported page plus one valid bit per physical slot and ~12 bytes
//! per block (`FtlStats::map_bytes_per_page` reports it: about 4.3 bytes on the presets); the
//! NAND model adds a byte per physical page. An open stays within a bit per page of that: the
//! checkpoint streams into the live map, the scan resolves into it in place (no per-page
//! sequence numbers: a conflict re-reads the winner's OOB), and the checkpoint an open writes is
//! encoded straight from it (`benches/tests/open_memory.rs` holds the peak under 8 bytes per
//! page). A periodic full checkpoint copies the map (4 bytes per page while it is written), so
//! host writes need not wait for its pages.

mod blocks;
mod buffer;
pub mod cache;
mod check;
mod checkpoint;
mod config;
mod core;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod io;
pub mod layout;
mod oob;
mod read;
mod recovery;
mod request_log;
pub mod schemes;
mod signal;
mod sim;
mod stats;
#[cfg(test)]
mod test_support;
pub mod waf_limit;
mod writer;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

pub use bytes::Bytes;
/// How an image is opened ([`Ftl::open_with`]).
pub use nand_model::Access;
use nand_model::{NandConfig, NandDevice, TimingMode};
use parking_lot::Mutex;

pub use crate::checkpoint::{inspect, inspect_format, ImageInfo};
pub use crate::config::{Frontiers, FtlConfig, GcPolicy, Separation, VictimPolicy};
pub use crate::error::{FtlError, Result};
pub use crate::layout::{Lpn, Psa, LOGICAL_PAGE, SECTOR};
pub use crate::read::Extent;
pub use crate::recovery::{RecoveryMode, RecoveryReport};
pub use crate::request_log::{RecordSummary, RequestLog};
pub use crate::schemes::{LogPlacement, SchemeKind};
pub use crate::stats::{BankStats, FtlStats, LatencySummary, RtStats, WearStats};
pub use nand_model;

use crate::blocks::{Bank, BankAlloc, BlockState};
use crate::buffer::{QueueState, WriterMsg};
use crate::checkpoint::{CkptState, SuperBlock};
use crate::core::Core;
use crate::layout::Layout;
use crate::request_log::{Issued, RecordedOp, RequestSink};
use crate::stats::OpKind;

/// A running FTL over one image file.
pub struct Ftl {
    core: Arc<Core>,
    writers: Mutex<Vec<JoinHandle<()>>>,
    helpers: Mutex<Vec<JoinHandle<()>>>,
    /// Where host requests are recorded, once [`Ftl::record_requests`] was called.
    recording: OnceLock<Arc<RequestSink>>,
}

/// What formatting an image decided.
#[derive(Clone, Copy, Debug)]
pub struct FormatPlan {
    pub lpns: u32,
    pub ckpt_blocks: u32,
    /// Log blocks of a hybrid scheme (0 for `page`).
    pub log_blocks: u32,
    pub max_export_bytes: u64,
}

/// Checks the tunables a running FTL uses whatever the image (at create and at open; also
/// for a tool that sizes a device by trying formats, before it reads a failed try as "too
/// small").
pub fn check_running_policy(cfg: &FtlConfig) -> Result<()> {
    if !(cfg.hot_window > 0.0 && cfg.hot_window <= 1000.0) {
        return Err(FtlError::Config(format!(
            "hot_window {} is outside (0, 1000] (a fraction of the exported pages)",
            cfg.hot_window
        )));
    }
    // With none, the first write would wait for room that never comes (and hold shutdown).
    if cfg.max_pending_pages == 0 {
        return Err(FtlError::Config(
            "max_pending_pages must be at least 1 (sealed pages a queue may have waiting; 0 \
             would let no write in)"
                .into(),
        ));
    }
    // A thread each: more than a few per bank only contend for the same victims.
    if cfg.gc_threads > MAX_GC_THREADS {
        return Err(FtlError::Config(format!(
            "gc_threads {} is above {MAX_GC_THREADS} (0: one per two banks)",
            cfg.gc_threads
        )));
    }
    Ok(())
}

/// Most background GC workers (`[ftl] gc_threads`).
pub const MAX_GC_THREADS: usize = 256;

/// How many owners of host write frontiers a bank has (for a new image's reserve and the
/// spare-block check): one with frontiers shared per bank (and for the hybrid schemes, whose
/// writers own no blocks), one per data queue with the page scheme's frontiers `per-queue`.
pub(crate) fn frontier_owners(cfg: &FtlConfig) -> u64 {
    match (cfg.scheme, cfg.frontiers) {
        (SchemeKind::Page, Frontiers::PerQueue) => cfg.queues.max(1) as u64,
        _ => 1,
    }
}

/// No more queues own write frontiers than an image formatted for `max_queues` kept open
/// blocks for: with frontiers `per-queue`, `cfg.queues` is lowered to it (true if it was).
/// The open does so, and `ftld info --config` counts the need as the open would run.
pub(crate) fn clamp_frontier_queues(cfg: &mut FtlConfig, max_queues: u32) -> bool {
    let over = frontier_owners(cfg) > u64::from(max_queues);
    if over {
        cfg.queues = max_queues as usize;
    }
    over
}

/// RAM the FTL needs per exported 4 KiB page at its peak, an open's (the live map is 4.31 B
/// per page, the open's peak 5.8 B at 64 GiB: `benches/README.md`, open times), rounded up.
/// Checked against the memory left ([`nand_model::host_memory`]) before the map is allocated.
pub const MAP_PEAK_BYTES_PER_PAGE: u64 = 6;

/// Blocks a new image of `scheme` keeps out of its exported space, beyond the scheme's own
/// need, as spare for blocks that go bad over the device's life, of `usable` good blocks: 2 %
/// of them (NAND datasheets promise at least 98 % valid blocks over a part's life, e.g.
/// Samsung's K9F1G08 1 004 of 1 024), for the schemes whose spare does not come from
/// `[ftl] overprovision` (nftl, rftl, gftl: their logical blocks' own blocks are their
/// working space, so without it the spare was only the format's frontier room left over, a
/// fixed few blocks a bank). The over-provisioned schemes' spare is their over-provisioning
/// (7 % by default). An image's spare is what its blocks hold beyond its need, so nothing of
/// this is stored: images formatted before 2026-12-01 keep their size.
pub(crate) fn bad_block_reserve(scheme: SchemeKind, usable: u64) -> u64 {
    if scheme.uses_overprovision() {
        0
    } else {
        usable.div_ceil(50)
    }
}

/// Works out the exported size and checkpoint area of a geometry, without touching any file
/// (and refuses one whose tables and map would not fit in the memory left).
pub fn plan_format(
    nand: &NandConfig,
    cfg: &FtlConfig,
    export_bytes: Option<u64>,
) -> Result<FormatPlan> {
    let geo = &nand.geometry;
    let bad = |m: String| Err(FtlError::Config(m));
    if geo.page_size < LOGICAL_PAGE as u32 || !geo.page_size.is_multiple_of(LOGICAL_PAGE as u32) {
        return bad(format!(
            "page size {} is not a multiple of 4096",
            geo.page_size
        ));
    }
    let base = Layout::new(geo, 0);
    if oob::data_oob_len(base.slots_per_page) > geo.oob_size as usize {
        return bad(format!(
            "OOB of {} bytes is too small for {} slots per page (needs {})",
            geo.oob_size,
            base.slots_per_page,
            oob::data_oob_len(base.slots_per_page)
        ));
    }
    if base.total_slots() >= u32::MAX as u64 {
        return bad("device has more than 2^32 slots; use a larger page or fewer blocks".into());
    }
    if cfg.queues == 0 || cfg.queues > checkpoint::MAX_QUEUES as usize {
        return bad(format!(
            "queues {} is outside 1..={}",
            cfg.queues,
            checkpoint::MAX_QUEUES
        ));
    }
    check_running_policy(cfg)?;
    if !(0.0..0.9).contains(&cfg.overprovision) {
        return bad(format!(
            "over-provisioning {} is outside 0..0.9",
            cfg.overprovision
        ));
    }
    let spb = base.slots_per_block() as u64;
    let total = base.total_blocks() as u64;
    let banks = base.banks as u64;
    let ckpt_pages =
        checkpoint::checkpoint_bytes(total * spb, total).div_ceil(geo.page_size as u64);
    let ckpt_blocks = ckpt_pages.div_ceil(banks * geo.pages_per_block as u64) as u32;
    let reserved = 1 + banks * 2 * ckpt_blocks as u64;
    // Blocks per bank kept out of the exported space for frontiers and GC's working room
    // (the host's open blocks, GC's, its reserve and the free blocks it cleans ahead). The FTL
    // keeps fewer idle now (`GC_RESERVE`, `Core::gc_soft_free`); the figure only sizes new
    // images. An open block is a set of one block per plane (`PlaneSet`). With frontiers
    // shared per bank (the default) the host has one such set per bank whatever the number of
    // queues, so the format does not depend on the queue count — which defaults to the CPU
    // count: before a87d13b (2026-11-27) the same command made a smaller device, with more
    // spare, on a machine with more CPUs. With frontiers `per-queue` every queue's writer owns
    // a set on each bank, and the reserve grows with the queues the image is formatted for.
    // Since 2026-12-01 hot/cold separation counts too (`schemes::page_room_per_bank`: the
    // page scheme's need); before, a page image formatted for it needed more blocks than it
    // had, fresh, and turned read-only at its first bad block.
    let frontier = banks * schemes::page_room_per_bank(nand, cfg);
    let usable = total.saturating_sub(reserved);
    if usable <= frontier + banks {
        return bad(format!(
            "geometry too small: {total} blocks, {reserved} reserved for superblock and checkpoints, {frontier} needed for write frontiers and GC"
        ));
    }
    // The hybrid schemes keep their log blocks out of the exported space.
    let log_blocks = if cfg.scheme.has_log_blocks() {
        let max = checkpoint::max_log_blocks(&base);
        let n = match cfg.log_blocks {
            0 => ((usable * 3 / 100) as u32).max(cfg.scheme.min_log_blocks()),
            n => n,
        };
        if n < cfg.scheme.min_log_blocks() || n > max {
            return bad(format!(
                "log_blocks {n} is outside {}..={max} for scheme {}",
                cfg.scheme.min_log_blocks(),
                cfg.scheme
            ));
        }
        n
    } else {
        0
    };
    if usable <= frontier + banks + log_blocks as u64 {
        return bad(format!(
            "geometry too small: {usable} usable blocks cannot hold {log_blocks} log blocks and {frontier} for write frontiers and GC"
        ));
    }
    // A logical block of rftl holds up to three blocks, of nftl two: that is its working
    // space, so `overprovision` does not apply; and rftl's device must give the scheme's bound.
    // Their spare for blocks that go bad is `bad_block_reserve` (before 2026-12-01 only the
    // frontier room left over: 77 blocks of 65 936 at 8 GiB on k9-003, as of 2 192 at 256 MiB).
    let per_lbn = cfg.scheme.blocks_per_logical_block();
    let reserve = bad_block_reserve(cfg.scheme, usable);
    let room = (usable - frontier).saturating_sub(reserve);
    if per_lbn > 0 && room < per_lbn {
        return bad(format!(
            "geometry too small: {usable} usable blocks, {frontier} needed for write frontiers \
             and GC and {reserve} kept as spare for bad blocks, leave none of the {per_lbn} \
             blocks a logical block of scheme {} needs",
            cfg.scheme
        ));
    }
    let max_lpns = match room.checked_div(per_lbn) {
        // GFTL: a data block per logical block and a write buffer that grows with them.
        _ if cfg.scheme == SchemeKind::Gftl => {
            match schemes::gftl::GcBudget::max_lbns(nand, room) {
                Ok(lbns) => lbns * spb,
                Err(e) => return bad(format!("scheme {}: {e}", cfg.scheme)),
            }
        }
        Some(lbns) => {
            if let Err(e) = cfg.scheme.fits_device(nand) {
                return bad(format!("scheme {}: {e}", cfg.scheme));
            }
            lbns * spb
        }
        None => {
            (((usable - frontier - log_blocks as u64) * spb) as f64 * (1.0 - cfg.overprovision))
                as u64
        }
    };
    let max_lpns = max_lpns.min(u32::MAX as u64 - 1);
    let lpns = match export_bytes {
        None => max_lpns,
        Some(b) if b % LOGICAL_PAGE as u64 != 0 => {
            return bad(format!("export size {b} is not a multiple of 4096"))
        }
        Some(b) if b / LOGICAL_PAGE as u64 > max_lpns => {
            return bad(format!(
                "export size {b} exceeds what this geometry can hold ({} bytes)",
                max_lpns * LOGICAL_PAGE as u64
            ))
        }
        Some(b) => b / LOGICAL_PAGE as u64,
    };
    if lpns == 0 {
        return bad("export size is zero".into());
    }
    // Refused here, before the image file is made: the NAND model's tables and the map.
    let needed = geo.total_pages() * nand_model::host_memory::NAND_BYTES_PER_PAGE
        + lpns * MAP_PEAK_BYTES_PER_PAGE;
    nand_model::host_memory::ensure(needed).map_err(|shortfall| FtlError::OutOfMemory {
        pages: lpns,
        what: "the NAND model's tables and the FTL's map",
        shortfall,
    })?;
    Ok(FormatPlan {
        lpns: lpns as u32,
        ckpt_blocks,
        log_blocks,
        max_export_bytes: max_lpns * LOGICAL_PAGE as u64,
    })
}

impl Ftl {
    /// Creates a new image at `path` (which must not exist) and opens the FTL on it.
    pub fn create(
        path: &Path,
        nand_cfg: &NandConfig,
        timing: TimingMode,
        cfg: FtlConfig,
        export_bytes: Option<u64>,
    ) -> Result<Ftl> {
        let plan = plan_format(nand_cfg, &cfg, export_bytes)?;
        let nand = NandDevice::create(path, nand_cfg, timing)?;
        let layout = Layout::new(nand.geometry(), plan.ckpt_blocks);
        let sb = SuperBlock {
            scheme: cfg.scheme,
            lpns: plan.lpns,
            ckpt_blocks: plan.ckpt_blocks,
            max_queues: frontier_owners(&cfg) as u32,
            overprovision: cfg.overprovision,
            log_blocks: plan.log_blocks,
        };
        checkpoint::write_superblock(&nand, &layout, &sb)?;
        let ftl = Ftl::start(nand, sb, cfg, false)?;
        ftl.core.checkpoint_held()?;
        Ok(ftl)
    }

    /// Opens an existing image, recovering from its checkpoint and, after a crash, an OOB scan.
    pub fn open(path: &Path, timing: TimingMode, cfg: FtlConfig) -> Result<Ftl> {
        Ftl::open_with(path, timing, cfg, Access::ReadWrite)
    }

    /// [`Ftl::open`] with the access asked for. [`Access::ReadOnly`] recovers into RAM only
    /// and leaves the image byte for byte as it was: no checkpoint (after a crash every such
    /// open scans again), no erase of a block a rebuild finds empty, no program, no block
    /// marked bad, nothing allocated; writes fail with [`FtlError::ReadOnly`]. The image may
    /// lack write permission or lie on a read-only or full file system. Other read-only opens
    /// may share the image; a writer may not.
    pub fn open_with(
        path: &Path,
        timing: TimingMode,
        cfg: FtlConfig,
        access: Access,
    ) -> Result<Ftl> {
        Ftl::open_prepared(path, timing, cfg, access, |_| {})
    }

    /// [`Ftl::open_with`], with `prepare` run on the NAND device before the open reads
    /// anything from it: faults armed there ([`NandDevice::faults`]) reach the open's own
    /// reads (superblock, checkpoints, recovery's scan) as well as everything after.
    pub fn open_prepared(
        path: &Path,
        timing: TimingMode,
        cfg: FtlConfig,
        access: Access,
        prepare: impl FnOnce(&NandDevice),
    ) -> Result<Ftl> {
        let nand = NandDevice::open_with(path, None, timing, access)?;
        prepare(&nand);
        let (sb, copies) = checkpoint::read_superblock_copies(&nand)?;
        let ftl = Ftl::start(nand, sb, cfg, true)?;
        if ftl.core.read_only_reason().is_none() {
            checkpoint::restore_superblock_copies(&ftl.core.nand, &ftl.core.layout, &sb, copies);
        }
        // A device that opened read-only (damage recovery found, say) writes nothing, no
        // checkpoint either: that would replace the checkpoints recovery could not use with
        // one of the map it distrusts, and the next open would find it usable and open
        // writable. Each open recovers the same way instead.
        if ftl.core.recovery.lock().mode != RecoveryMode::Clean
            && ftl.core.read_only_reason().is_none()
        {
            // Written from the live map, held still: no copy of it (peak RAM at open).
            match ftl.core.checkpoint_held() {
                Ok(()) => {}
                // The checkpoint areas wore out at this checkpoint: the device is read-only
                // now (the log said why), and what recovery found stays readable.
                Err(FtlError::ReadOnly(_)) => {}
                Err(e) => return Err(e),
            }
            ftl.core
                .read_only_at_open
                .store(ftl.core.is_read_only(), Ordering::Release);
        }
        Ok(ftl)
    }

    /// Builds the core, recovers (an existing image: loads its newest checkpoint into the
    /// scheme's map and scans what came after it), and starts the threads.
    fn start(nand: NandDevice, sb: SuperBlock, mut cfg: FtlConfig, existing: bool) -> Result<Ftl> {
        let path = nand.path().to_path_buf();
        // `read_superblock` validated an opened image's; a created one's comes from `plan_format`.
        sb.validate(nand.geometry())
            .map_err(|reason| FtlError::Format { path, reason })?;
        let layout = Layout::new(nand.geometry(), sb.ckpt_blocks);
        if cfg.queues == 0 {
            return Err(FtlError::Config("queues must be at least 1".into()));
        }
        check_running_policy(&cfg)?;
        // The scheme is the image's (format time only), whatever the configuration says.
        cfg.scheme = sb.scheme;
        // Only queues that own write frontiers need room set aside at format time.
        let asked = cfg.queues;
        if clamp_frontier_queues(&mut cfg, sb.max_queues) {
            tracing::info!(
                "using {} write queues, not {asked}: the image's format holds open blocks for at most {} queues with frontiers per-queue",
                sb.max_queues,
                sb.max_queues
            );
        }
        // With timing off a program completes at once: a queue's writer then runs on the
        // thread that seals a page instead of costing a thread hand-off per page. With timing
        // virtual nothing may depend on thread scheduling: writers run inline, on their own
        // simulated time (`writer::SimWriter`), and the background work is run by the caller
        // (`sim.rs`).
        let virtual_time = nand.timing_mode() == TimingMode::Virtual;
        let inline = nand.timing_mode() == TimingMode::Off || virtual_time;
        let plan = schemes::BankPlan::new(
            cfg.log_placement,
            nand.geometry(),
            nand.config().interconnect,
        );
        // The NAND model's tables are in place (an image too large for them was refused when
        // opened); the map is next.
        let map_bytes = u64::from(sb.lpns) * MAP_PEAK_BYTES_PER_PAGE;
        nand_model::host_memory::ensure(map_bytes).map_err(|shortfall| FtlError::OutOfMemory {
            pages: sb.lpns.into(),
            what: "the FTL's map",
            shortfall,
        })?;
        let scheme = sb
            .scheme
            .build(layout, sb.lpns, sb.log_blocks, plan, &cfg, nand.config())?;
        let blocks_needed = sb
            .scheme
            .blocks_needed(nand.config(), &layout, sb.lpns, sb.log_blocks, &cfg)
            .map_err(|e| FtlError::Config(format!("scheme {}: {e}", sb.scheme)))?;
        let mut txs = Vec::new();
        let mut rxs = Vec::new();
        for q in 0..cfg.queues + 1 {
            let (tx, rx) = crossbeam_channel::unbounded();
            txs.push(QueueState::new(
                tx,
                inline.then(|| {
                    writer::Writer::new(&layout, nand.config().planes, q, scheme.clone().placer(q))
                }),
            ));
            rxs.push(rx);
        }
        let banks = (0..layout.banks)
            .map(|_| Bank {
                alloc: Mutex::new(BankAlloc::new(layout.blocks_per_bank)),
                free: Default::default(),
                exclusive_gc: Default::default(),
                uncorrectable: Default::default(),
            })
            .collect();
        let core = Arc::new(Core::new(
            nand,
            layout,
            cfg,
            sb.lpns,
            blocks_needed,
            scheme.clone(),
            banks,
            txs,
            1,
            CkptState::default(),
        ));
        let report = match existing {
            false => {
                // A fresh image: every non-reserved block is free.
                for b in 0..layout.banks {
                    let mut a = core.bank(b).alloc.lock();
                    for block in 0..layout.blocks_per_bank {
                        let addr = nand_model::BlockAddr {
                            bank: nand_model::BankId(b),
                            block,
                        };
                        if layout.is_reserved(addr) {
                            a.state[block as usize] = BlockState::Reserved;
                        } else {
                            a.push_free(block);
                        }
                    }
                    core.update_free(b, a.free_len());
                }
                RecoveryReport::default()
            }
            true => {
                let found = checkpoint::load_newest(
                    &core.nand,
                    &layout,
                    checkpoint::Retries {
                        max: core.own_read_retries(),
                        count: &core.counters.read_retries,
                    },
                    scheme.map_sink(),
                );
                let fallback = found.as_ref().is_none_or(|l| l.fallback);
                let report = core.recover(found.as_ref().map(|l| &l.snap), fallback)?;
                if let Some(l) = found {
                    *core.ckpt.lock() = CkptState {
                        last_id: l.snap.id,
                        last_area: Some(l.area),
                        last_sc: l.snap.sc,
                        next_offset: l.next_offset,
                        chain_len: l.chain_len,
                        // After a roll-forward the map differs from the chain in unknown
                        // chunks; after a fallback pages past the chain may be programmed; a
                        // chain read over an area's bad blocks takes no delta (`Loaded`).
                        force_full: report.mode != RecoveryMode::Clean || l.whole_map,
                    };
                }
                tracing::info!(
                    "opened {}: {} recovery, {} pages scanned in {:.1} ms",
                    core.nand.path().display(),
                    report.mode,
                    report.pages_scanned,
                    report.millis
                );
                report
            }
        };
        *core.recovery.lock() = report;
        core.read_only_at_open
            .store(core.is_read_only(), Ordering::Release);
        let mut writers = Vec::new();
        for (q, rx) in rxs.into_iter().enumerate().filter(|_| !inline) {
            let c = core.clone();
            writers.push(spawn(format!("ftl-writer-{q}"), move || {
                writer::run(c, q, rx)
            })?);
        }
        let workers = scheme.workers(&core);
        core.counters
            .gc_workers
            .store(workers.len() as u64, Ordering::Relaxed);
        if virtual_time {
            let background = sim::Background::new(&core, workers);
            // Set once, here, before anything can read it.
            let _ = core.sim_background.set(Mutex::new(background));
            return Ok(Ftl {
                core,
                writers: Mutex::new(writers),
                helpers: Mutex::new(Vec::new()),
                recording: OnceLock::new(),
            });
        }
        let mut helpers = Vec::new();
        for mut w in workers {
            let c = core.clone();
            helpers.push(spawn(w.name(), move || {
                writer::precise_timers();
                while !c.stopping.load(Ordering::Acquire) {
                    // A round's operations count from its start, each dependent one from the
                    // modelled end of what it waited for (`nand_model::ArrivalScope`): the
                    // worker's wake-ups inside a step are the host's, not the device's time.
                    let _arrival = nand_model::ArrivalScope::enter(c.nand.now_ns());
                    // A read-only device (opened so, or damaged) is not cleaned: that would
                    // change it, and could not free a block for anyone anyway.
                    let round = if c.is_read_only() {
                        Some(std::time::Duration::from_secs(1))
                    } else {
                        w.round(&c, u32::MAX)
                    };
                    if let Some(d) = round {
                        let l = if w.held_back(&c) {
                            c.gc_urgent.listen()
                        } else {
                            c.gc_wake.listen()
                        };
                        if !c.stopping.load(Ordering::Acquire) {
                            event_listener::Listener::wait_timeout(l, d);
                        }
                    }
                }
            })?);
        }
        let c = core.clone();
        helpers.push(spawn("ftl-maint".into(), move || {
            checkpoint::maintenance(c)
        })?);
        Ok(Ftl {
            core,
            writers: Mutex::new(writers),
            helpers: Mutex::new(helpers),
            recording: OnceLock::new(),
        })
    }

    /// Exported capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.core.capacity()
    }

    /// Number of write queues (frontends spread their writers over them).
    pub fn queues(&self) -> usize {
        self.core.data_queues()
    }

    /// The NAND device underneath (statistics, fault injection in tests).
    pub fn nand(&self) -> &NandDevice {
        &self.core.nand
    }

    /// Timing `virtual`: runs the background work (GC workers, maintenance) due before `t_ns`
    /// in simulated-time order, then sets the simulated clock to `t_ns`, where the caller's
    /// next request starts (see `sim.rs`). A simulation driver calls it before each request with
    /// the request's arrival time. Other timing modes: an error.
    pub fn advance_to(&self, t_ns: u64) -> Result<()> {
        let Some(bg) = self.core.sim_background.get() else {
            return Err(FtlError::Config(
                "advance_to needs an FTL opened with timing virtual".into(),
            ));
        };
        bg.lock().advance_to(&self.core, t_ns);
        Ok(())
    }

    /// Virtual time: turns off (or on again) the skip of idle stretches, in which the
    /// background actors' rounds change nothing (`sim.rs`). The skip changes no figure; tests
    /// compare a replay with it and without.
    #[doc(hidden)]
    pub fn set_sim_skip_idle(&self, on: bool) {
        if let Some(bg) = self.core.sim_background.get() {
            bg.lock().set_skip_idle(on);
        }
    }

    /// Virtual time: the background actors' rounds run so far (0 otherwise).
    #[doc(hidden)]
    pub fn sim_rounds(&self) -> u64 {
        self.core
            .sim_background
            .get()
            .map_or(0, |bg| bg.lock().rounds())
    }

    /// The FTL's clock in nanoseconds: simulated time with timing `virtual`, else the host's
    /// monotonic clock since the FTL was opened.
    pub fn now_ns(&self) -> u64 {
        self.core.now_ns()
    }

    /// Whether writes are refused (opened read-only, spare blocks exhausted or a fatal NAND
    /// error).
    pub fn read_only_reason(&self) -> Option<String> {
        self.core.read_only_reason()
    }

    /// Why the device turned read-only by itself (damage recovery found, worn out, a fatal
    /// NAND error), whether or not it was opened read-only.
    pub fn fault_reason(&self) -> Option<String> {
        self.core.fault_reason()
    }

    /// The image was opened read-only ([`Ftl::open_with`]).
    pub fn opened_read_only(&self) -> bool {
        self.core.opened_read_only()
    }

    /// The device was read-only when its open returned (opened so, or recovery found damage
    /// or worn-out spares or checkpoint areas): it wrote nothing since.
    pub fn read_only_since_open(&self) -> bool {
        self.core.read_only_at_open.load(Ordering::Acquire)
    }

    /// Reads `buf.len()` bytes at `offset` (both multiples of 512).
    pub async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let rec = self.record_issue(RecordedOp::Read, 0, offset, buf.len() as u64);
        let r = self.read_unrecorded(offset, buf).await;
        self.record_complete(rec, &r);
        r
    }

    async fn read_unrecorded(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let t = self.core.now_ns();
        self.core.check_range(offset, buf.len() as u64)?;
        let unwritten = self.core.read_at(offset, buf).await?;
        let c = &self.core.counters;
        c.host_reads.fetch_add(1, Ordering::Relaxed);
        if unwritten > 0 {
            c.unwritten_page_reads
                .fetch_add(unwritten, Ordering::Relaxed);
        }
        c.host_read_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.core.latencies.record(OpKind::Read, self.core.since(t));
        Ok(())
    }

    /// Which parts of `[offset, offset + len)` (both multiples of 512) hold data, as at most
    /// `max_runs` runs from `offset`; unmapped runs (never written, trimmed or zeroed) read as
    /// zeroes. A page is mapped or not as a whole (4 KiB). Covers at most 1 GiB per call: the
    /// runs may add up to less than `len`, never more (NBD `base:allocation`, `qemu-img map`).
    pub fn allocation(&self, offset: u64, len: u64, max_runs: usize) -> Result<Vec<Extent>> {
        self.core.check_range(offset, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        Ok(self.core.allocation(offset, len, max_runs))
    }

    /// Writes `data` at `offset` through write queue `queue` (taken modulo [`Ftl::queues`]).
    /// Returns once buffered, or once durable when `fua` is set.
    pub async fn write(&self, queue: usize, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        self.write_bytes(queue, offset, Bytes::copy_from_slice(data), fua)
            .await
    }

    /// [`Ftl::write`] of a buffer the caller hands over: its full 4 KiB pages are buffered as
    /// slices of it, without a copy (a frontend that owns its request buffers uses this).
    pub async fn write_bytes(
        &self,
        queue: usize,
        offset: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<()> {
        let len = data.len() as u64;
        let rec = self.record_issue(RecordedOp::Write { fua }, queue, offset, len);
        let r = self.write_unrecorded(queue, offset, data, fua).await;
        self.record_complete(rec, &r);
        r
    }

    async fn write_unrecorded(
        &self,
        queue: usize,
        offset: u64,
        data: Bytes,
        fua: bool,
    ) -> Result<()> {
        let t = self.core.now_ns();
        self.core.check_range(offset, data.len() as u64)?;
        let len = data.len() as u64;
        self.core.write_at(queue, offset, data, fua).await?;
        let c = &self.core.counters;
        c.host_writes.fetch_add(1, Ordering::Relaxed);
        c.host_write_bytes.fetch_add(len, Ordering::Relaxed);
        self.core
            .latencies
            .record(OpKind::Write, self.core.since(t));
        Ok(())
    }

    /// Makes every write, trim and write-zeroes acknowledged so far durable.
    pub async fn flush(&self) -> Result<()> {
        let rec = self.record_issue(RecordedOp::Flush, 0, 0, 0);
        let r = self.flush_unrecorded().await;
        self.record_complete(rec, &r);
        r
    }

    async fn flush_unrecorded(&self) -> Result<()> {
        let t = self.core.now_ns();
        if self.core.writers_gone() {
            return Err(FtlError::Closed);
        }
        self.core.flush_all().await?;
        self.core
            .counters
            .host_flushes
            .fetch_add(1, Ordering::Relaxed);
        self.core
            .latencies
            .record(OpKind::Flush, self.core.since(t));
        Ok(())
    }

    /// Discards a range: it reads as zeroes afterwards (durably once flushed, or at once with
    /// `fua`). Partial 4 KiB pages at the ends are zeroed by writing.
    pub async fn trim(&self, queue: usize, offset: u64, len: u64, fua: bool) -> Result<()> {
        let rec = self.record_issue(RecordedOp::Trim { fua }, queue, offset, len);
        let r = self.trim_unrecorded(queue, offset, len, fua).await;
        self.record_complete(rec, &r);
        r
    }

    async fn trim_unrecorded(&self, queue: usize, offset: u64, len: u64, fua: bool) -> Result<()> {
        let t = self.core.now_ns();
        self.core.check_range(offset, len)?;
        self.core.unmap(queue, offset, len, fua).await?;
        self.core
            .counters
            .host_trims
            .fetch_add(1, Ordering::Relaxed);
        self.core.latencies.record(OpKind::Trim, self.core.since(t));
        Ok(())
    }

    /// Writes zeroes over a range. Implemented by unmapping, which costs no flash writes.
    pub async fn write_zeroes(&self, queue: usize, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.trim(queue, offset, len, fua).await
    }

    /// Records every host request from now on (read, write, flush, trim, write-zeroes: what
    /// reaches this API, from any frontend) into `log`, as a blkparse trace (`ftld serve
    /// --record`; the format is in the `request_log` module's doc). One recording per FTL: a
    /// second call is refused.
    pub fn record_requests(&self, log: &RequestLog) -> Result<()> {
        self.recording
            .set(log.sink())
            .map_err(|_| FtlError::Config("this FTL is already recording its requests".into()))
    }

    fn record_issue(&self, op: RecordedOp, queue: usize, offset: u64, len: u64) -> Option<Issued> {
        let sink = self.recording.get()?;
        let queue = queue % self.queues().max(1);
        Some(sink.issue(|| self.core.now_ns(), op, queue, offset, len))
    }

    fn record_complete(&self, issued: Option<Issued>, result: &Result<()>) {
        if let (Some(req), Some(sink)) = (issued, self.recording.get()) {
            sink.complete(|| self.core.now_ns(), req, result.is_ok());
        }
    }

    /// Writes a checkpoint now (blocking).
    pub fn checkpoint(&self) -> Result<()> {
        self.core.checkpoint()
    }

    /// A statistics snapshot.
    pub fn stats(&self) -> FtlStats {
        self.core.stats()
    }

    /// The two sides of WAF, read without locks: host bytes written, and NAND bytes programmed
    /// for host data and GC (what [`FtlStats::waf`] divides).
    pub fn waf_counters(&self) -> (u64, u64) {
        let c = &self.core.counters;
        let programs =
            c.page_programs.load(Ordering::Relaxed) + c.gc_page_programs.load(Ordering::Relaxed);
        (
            c.host_write_bytes.load(Ordering::Relaxed),
            programs * self.core.layout.page_size as u64,
        )
    }

    /// How the image was opened.
    pub fn recovery(&self) -> RecoveryReport {
        self.core.recovery.lock().clone()
    }

    /// Clean shutdown: flush, checkpoint, stop the threads. Later calls fail with `Closed`.
    pub fn close(&self) -> Result<()> {
        if self.core.stopping.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_helpers();
        let flushed = if self.core.read_only_reason().is_none() {
            self.core.flush_all_blocking();
            // Nothing else runs now: written from the live map, without a copy.
            match self.core.checkpoint_held() {
                // A checkpoint area wore out at this checkpoint (the device turned read-only,
                // the log said why): everything acknowledged is on flash, and the next open
                // rolls forward from the last checkpoint to it.
                Err(FtlError::ReadOnly(_)) => Ok(()),
                r => r,
            }
        } else {
            // Read-only: no checkpoint. What the host was told is written and is still in
            // RAM (a partly filled page, trim records, pages a writer thread or virtual
            // time's inbox holds) goes to the writers, which program it if the device wore
            // out and the scheme can (the next open rolls forward to it), else drop and count
            // it (`Writer::place_group`), so the stop says what is lost.
            for q in 0..self.core.queues.len() {
                self.core.force_seal(q);
                self.core.sim_wait_durable(q);
            }
            Ok(())
        };
        self.stop_writers(false);
        let dropped = self
            .core
            .counters
            .pages_dropped_read_only
            .load(Ordering::Relaxed);
        if dropped > 0 {
            tracing::error!(
                "{dropped} pages of acknowledged writes or trims were never programmed: the \
                 device turned read-only ({}) before they were, and they are lost (every flush \
                 since then failed)",
                self.core.read_only_reason().unwrap_or_default()
            );
        }
        // The image survives the process without this; a clean close also survives the host.
        let synced = self.core.nand.sync().map_err(FtlError::from);
        flushed.and(synced)
    }

    /// Simulates a power cut: buffered data and every RAM structure are dropped without a flush
    /// or checkpoint, exactly as `kill -9` of the daemon would. For crash tests.
    pub fn simulate_power_loss(self) {
        self.core.stopping.store(true, Ordering::Release);
        self.stop_helpers();
        self.stop_writers(true);
    }

    fn stop_helpers(&self) {
        self.core.wake_all_gc();
        self.core.maint_wake.notify(usize::MAX);
        for h in self.helpers.lock().drain(..) {
            let _ = h.join();
        }
    }

    fn stop_writers(&self, power_cut: bool) {
        if power_cut {
            self.core.mark_writers_gone();
        }
        for q in &self.core.queues {
            let _ = q.tx.send(WriterMsg::Stop);
        }
        for h in self.writers.lock().drain(..) {
            let _ = h.join();
        }
        self.core.mark_writers_gone();
    }

    /// For crash tests: while `hold` is set, the maintenance thread leaves batched trim
    /// records in RAM (as if its 50 ms tick were late) instead of writing them out, and GC's
    /// request for them waits for the release; a flush, a FUA trim, a checkpoint or a merge
    /// that waits for them still writes them.
    #[doc(hidden)]
    pub fn hold_trim_records(&self, hold: bool) {
        self.core.trims_held.store(hold, Ordering::Release);
        if !hold {
            self.core.trims_pending.store(true, Ordering::Release);
            self.core.maint_wake.notify(usize::MAX);
        }
    }

    /// For tests: trim records not on flash yet, and the late zombies they hold (slots of
    /// their pages programmed after them: `PageMap::commit_page`).
    #[doc(hidden)]
    pub fn pending_trims(&self) -> (usize, usize) {
        let (recs, late) = self.core.scheme.page_map().pending_trims();
        (recs.len(), late.len())
    }

    /// Runs GC victim selection on `bank` without claiming the victim (for benchmarks).
    #[doc(hidden)]
    pub fn bench_victim_scan(&self, bank: u32) -> Option<u32> {
        self.core.scheme.bench_victim_scan(&self.core, bank)
    }

    /// Where the newest checkpoint lives (for corruption tests).
    #[doc(hidden)]
    pub fn newest_checkpoint_pages(&self) -> Vec<nand_model::PageAddr> {
        let Some(area) = self.core.ckpt.lock().last_area else {
            return Vec::new();
        };
        let map = checkpoint::AreaMap::of_device(&self.core.nand, &self.core.layout, area);
        (0..map.pages())
            .map(|i| map.page(i))
            .filter(|p| {
                self.core
                    .nand
                    .block_state(p.block)
                    .is_ok_and(|s| p.page < s.programmed_pages)
            })
            .collect()
    }

    /// Debug view of one logical page: its mapping and, if mapped, the slot's OOB entry and
    /// block state (for tests chasing a lost write).
    #[doc(hidden)]
    pub fn debug_lpn(&self, lpn: u32) -> String {
        let core = &self.core;
        let st = core.cache.lock(layout::Lpn(lpn));
        let buffered = st.overlay.get(&lpn).map(|b| b.seq);
        drop(st);
        format!(
            "{}, buffered {buffered:?}",
            core.scheme.describe(core, layout::Lpn(lpn))
        )
    }

    /// Where logical page `lpn`'s programmed version lives: its NAND page and slot (for
    /// corruption tests). `None` if it is unmapped or its newest version is still buffered.
    #[doc(hidden)]
    pub fn physical_slot(&self, lpn: u32) -> Option<(nand_model::PageAddr, u32)> {
        let core = &self.core;
        let lpn = layout::Lpn(lpn);
        let st = core.cache.lock(lpn);
        if st.overlay.contains_key(&lpn.0) {
            return None;
        }
        let psa = core.scheme.locate(&st, lpn)?;
        Some(core.layout.split(psa))
    }

    /// The first page of each checkpoint area (for corruption tests).
    #[doc(hidden)]
    pub fn checkpoint_area_heads(&self) -> [nand_model::PageAddr; 2] {
        let l = self.core.layout;
        [l.ckpt_page(0, 0), l.ckpt_page(1, 0)]
    }

    /// Checks the FTL's invariants (1)-(5) of the design page and the shared bookkeeping (free
    /// lists, block states against the medium, free counts, read pins) without changing its
    /// state: nothing is flushed or checkpointed (`check.rs` says what is checked and how it
    /// quiesces). For tests: call when no host operation is running. With timing `virtual`
    /// pages already sealed are placed first (the simulated clock moves).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        // No checkpoint (which prunes the trim log) may run meanwhile (lock order: the
        // checkpoint lock first).
        let _ckpt = self.core.ckpt_lock.lock();
        check::check(&self.core)
    }
}

impl Drop for Ftl {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.core.stopping.swap(true, Ordering::AcqRel) {
            // Dropped while a panic unwinds, maybe out of the FTL itself: a page it was
            // placing may never commit, so a clean close (or a checkpoint the maintenance
            // thread started) would wait for it forever, and the panic would surface as a
            // hang. Stop as a power cut does: nothing is flushed, recovery runs at the next
            // open.
            self.core.mark_writers_gone();
            self.stop_helpers();
            self.stop_writers(true);
            return;
        }
        if !self.core.stopping.load(Ordering::Acquire) {
            if let Err(e) = self.close() {
                tracing::warn!("closing the FTL on drop failed: {e}");
            }
        }
    }
}

pub(crate) fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|e| FtlError::Internal(format!("cannot start a thread: {e}")))
}
