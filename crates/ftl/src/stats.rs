//! FTL statistics: operation counters, write amplification, wear, free blocks per bank and
//! latency histograms per host operation kind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;

use crate::blocks::BlockState;
use crate::core::Core;

/// Monotonic event counters (relaxed atomics: they are statistics, not synchronisation).
#[derive(Default)]
pub struct Counters {
    /// Background GC workers started (set once at open).
    pub gc_workers: AtomicU64,
    pub host_reads: AtomicU64,
    pub host_writes: AtomicU64,
    pub host_read_bytes: AtomicU64,
    /// Host reads of 4 KiB pages holding no data (see [`FtlStats::unwritten_page_reads`]).
    pub unwritten_page_reads: AtomicU64,
    /// NAND reads for host reads (see [`FtlStats::nand_page_reads`]).
    pub page_reads: AtomicU64,
    pub multi_plane_reads: AtomicU64,
    pub host_write_bytes: AtomicU64,
    pub host_trims: AtomicU64,
    pub host_flushes: AtomicU64,
    pub trimmed_pages: AtomicU64,
    pub host_slots_programmed: AtomicU64,
    pub page_programs: AtomicU64,
    /// Multi-plane programs of host pages (each counted once; its pages are in
    /// `page_programs`).
    pub multi_plane_programs: AtomicU64,
    // GC workers bump these on every step while host threads bump the host counters: each
    // gets a cache line of its own, so the two sides do not bounce one line between cores.
    pub gc_page_programs: CachePadded<AtomicU64>,
    pub gc_copies: CachePadded<AtomicU64>,
    pub gc_erases: AtomicU64,
    pub gc_steps: CachePadded<AtomicU64>,
    pub foreground_gc: AtomicU64,
    pub wear_level_moves: AtomicU64,
    /// Partly filled pages programmed by the idle flush (`[ftl] idle_flush_ms`).
    pub idle_flushes: AtomicU64,
    /// Sealed pages (host data or trim records, acknowledged) a writer dropped unprogrammed
    /// because the device had turned read-only.
    pub pages_dropped_read_only: AtomicU64,
    /// Partial-page writes redone because a whole-page write or trim overtook them.
    pub rmw_retries: AtomicU64,
    /// Host pages placed in hot open blocks (`[ftl] separation = "hot-cold"`).
    pub hot_pages: AtomicU64,
    /// Pages whose program failed (each one's block is retired).
    pub program_failures: AtomicU64,
    /// Erases that failed (the block turned bad), the checkpoint areas' included.
    pub erase_failures: AtomicU64,
    pub read_retries: AtomicU64,
    pub uncorrectable: AtomicU64,
    /// Slots whose data failed its CRC when read (each attempt counts; a retry may succeed).
    pub crc_errors: AtomicU64,
    /// Slots GC moved although their data failed its check on every retry: they move with
    /// their original CRC, so they stay detectably bad (reads of them fail) until rewritten.
    pub gc_corrupt_slots: AtomicU64,
    /// Page scheme: GC programs that found no block for a GC frontier (on the bank, or one to
    /// rescue its data to) and moved nothing.
    pub gc_starved: AtomicU64,
    pub retired_blocks: AtomicU64,
    pub bad_blocks: AtomicU64,
    pub checkpoints: AtomicU64,
    pub checkpoint_failures: AtomicU64,
    pub checkpoint_deltas: AtomicU64,
    pub checkpoint_pages: AtomicU64,
    pub bytes_since_checkpoint: AtomicU64,
}

impl Counters {
    pub fn host_ops(&self) -> u64 {
        self.host_reads.load(Ordering::Relaxed)
            + self.host_writes.load(Ordering::Relaxed)
            + self.host_trims.load(Ordering::Relaxed)
    }
}

/// Host operation kinds with a latency histogram.
#[derive(Clone, Copy, Debug)]
pub enum OpKind {
    Read,
    Write,
    Flush,
    Trim,
}

/// Latency histograms per host operation kind.
#[derive(Default)]
pub struct Latencies {
    hists: [LatencyHistogram; 4],
}

impl Latencies {
    pub fn record(&self, kind: OpKind, d: Duration) {
        self.hists[kind as usize].record(d);
    }

    fn summary(&self, kind: OpKind) -> LatencySummary {
        self.hists[kind as usize].summary()
    }
}

/// A latency histogram in nanoseconds (1 ns .. 100 s, 3 significant digits).
pub struct LatencyHistogram(Mutex<Histogram<u64>>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram(Mutex::new(
            Histogram::new_with_bounds(1, 100_000_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).expect("3 significant digits is valid")),
        ))
    }
}

impl LatencyHistogram {
    pub fn record(&self, d: Duration) {
        let ns = (d.as_nanos() as u64).clamp(1, 100_000_000_000);
        self.0.lock().saturating_record(ns);
    }

    pub fn summary(&self) -> LatencySummary {
        let h = self.0.lock();
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: h.max() as f64 / 1000.0,
        }
    }
}

/// One merge kind's figures (hybrid schemes).
#[derive(Clone, Debug, Serialize)]
pub struct MergeKindStats {
    pub count: u64,
    /// Valid pages copied (read and programmed) by merges of this kind.
    pub pages_copied: u64,
    pub erases: u64,
    /// Time from the merge's start to the submission of its last erase (erases are not waited
    /// for: the bank's timeline keeps later work behind them), in microseconds.
    pub latency: LatencySummary,
}

/// Merges of a hybrid scheme (`ftl.merges` in `ftld stats`).
#[derive(Clone, Debug, Serialize)]
pub struct MergeStats {
    pub switch: MergeKindStats,
    pub partial: MergeKindStats,
    pub full: MergeKindStats,
    /// Log blocks the image was formatted with, and how many are in use.
    pub log_blocks: u32,
    pub log_blocks_in_use: u32,
    /// `[ftl] log_placement` in force (`same` or `spread`).
    pub log_placement: String,
}

/// Partial garbage collection of a real-time scheme (`ftl.rt` in `ftld stats`; RFTL §4.4).
#[derive(Clone, Debug, Serialize)]
pub struct RtStats {
    /// Pages one step copies (copies within one erase's time).
    pub beta: u32,
    /// Most steps a fold and a shift take (GFTL: a merge's steps, and 0).
    pub k_fold: u32,
    pub k_shift: u32,
    /// The longest a step keeps the device busy, and the bound on a host write's response
    /// (one step, then the page's transfer and program), in microseconds.
    pub step_bound_us: f64,
    pub write_bound_us: f64,
    /// The bound on a host read's response: GFTL's one step, then its OOB search of a data
    /// block and the page's read; RFTL's reads run no step (the page's read).
    pub read_bound_us: f64,
    pub copy_steps: u64,
    pub erase_steps: u64,
    pub pages_copied: u64,
    /// Erases of the partial GC's steps (`ftl.gc_erases` counts every GC erase: these, and
    /// those of an open's compaction of jobs a close left unfinished).
    pub erases: u64,
    /// Jobs finished: folds, shifts, and compactions (at open, or after a failed program).
    pub folds: u64,
    pub shifts: u64,
    pub compactions: u64,
    /// RFTL: jobs under way at a clean close that the open took back and went on with,
    /// rather than compacting their logical blocks (0 for GFTL).
    pub jobs_resumed: u64,
    /// GFTL: merges done, the GC queue's length now and at most, the write buffer's
    /// guaranteed size in blocks and the most it held (0 for RFTL).
    pub merges: u64,
    pub queue_len: u64,
    pub queue_max: u64,
    pub buffer_blocks: u32,
    pub buffer_blocks_max: u32,
    /// GFTL: OOB reads of its reads' data-block searches, and searches that did not find the
    /// page where the map has it (0 for RFTL).
    pub oob_reads: u64,
    pub search_misses: u64,
    /// Most steps one job took.
    pub max_job_steps: u64,
    /// A step's time, from its start to the submission of its last operation.
    pub step_latency: LatencySummary,
    /// `[ftl] log_placement` in force (`spread` puts a logical block's blocks on different
    /// channels).
    pub log_placement: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BankStats {
    pub free_blocks: u32,
    /// Open blocks: the page scheme's write frontiers (host and GC), partly written, whose
    /// unwritten pages are spare that gathers no garbage yet; with the hybrid schemes, the
    /// log blocks (full or not).
    pub open_blocks: u32,
    pub full_blocks: u32,
    pub bad_blocks: u32,
    /// Blocks GC keeps because they hold valid slots it could not read (lost data, whose host
    /// reads fail) until the host rewrites them (counted in `full_blocks` too).
    pub damaged_blocks: u32,
    pub exclusive_gc: bool,
    pub erase_min: u32,
    pub erase_max: u32,
    /// Reads of the bank that failed every retry.
    pub uncorrectable_reads: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct WearStats {
    pub min: u32,
    pub avg: f64,
    pub max: u32,
}

/// A point-in-time view of the FTL (serialisable to JSON for `ftld stats`). Counters (host
/// and NAND operations, GC, failures, checkpoints, `waf`, the latency summaries) count since
/// this open of the image (for the daemon, since it started); the block states, wear and
/// `bad_blocks` describe the device as it is.
#[derive(Clone, Debug, Serialize)]
pub struct FtlStats {
    pub capacity_bytes: u64,
    pub logical_pages: u32,
    pub queues: usize,
    /// The FTL scheme (`page`, ...).
    pub scheme: &'static str,
    pub gc_policy: &'static str,
    /// Background GC workers running (0 with in-path GC and with the hybrid schemes).
    pub gc_workers: usize,
    pub read_only: Option<String>,
    pub host_reads: u64,
    pub host_writes: u64,
    pub host_read_bytes: u64,
    /// 4 KiB pages host reads found holding no data (never written, trimmed or zeroed): read
    /// as zeroes from RAM, with no NAND read and no modelled time (as an SSD answers them). A
    /// read-heavy run on a fresh device measures mostly these: precondition it first.
    pub unwritten_page_reads: u64,
    pub host_write_bytes: u64,
    pub host_trims: u64,
    pub host_flushes: u64,
    pub trimmed_pages: u64,
    /// NAND pages programmed with host data (GC's are `gc_page_programs`; `nand.totals`
    /// counts every program, checkpoints' too).
    pub nand_page_programs: u64,
    /// Multi-plane programs among the host page programs (`[nand] planes` > 1).
    pub multi_plane_programs: u64,
    /// NAND reads for host reads: the consecutive slots of one page a request reads are one
    /// column read, pages at one page index in different planes one multi-plane read, each
    /// counted once (a slot read again after a failed check counts again).
    pub nand_page_reads: u64,
    /// Multi-plane reads among `nand_page_reads`.
    pub multi_plane_reads: u64,
    pub gc_page_programs: u64,
    pub gc_copies: u64,
    pub gc_erases: u64,
    pub gc_steps: u64,
    /// GC steps writers did in the foreground because no bank had room for a page.
    pub foreground_gc: u64,
    pub wear_level_moves: u64,
    /// Partly filled pages programmed by the idle flush (`[ftl] idle_flush_ms`).
    pub idle_flushes: u64,
    /// NAND pages of host data or trim records never programmed because the device turned
    /// read-only while they waited (in a writer, a partly filled buffer page, the trim queue):
    /// writes and trims acknowledged before the turn, lost at the stop (every flush since the
    /// turn failed), and those whose request failed at it. Counted whole by the stop.
    pub pages_dropped_read_only: u64,
    /// Writes of part of a 4 KiB page redone (on the newer version still in RAM, or on a
    /// fresh read) because a whole-page write or a trim of the page landed between their read
    /// and their buffering.
    pub rmw_retries: u64,
    /// Host 4 KiB pages placed in hot open blocks (`[ftl] separation = "hot-cold"`): what the
    /// recency tracker judged rewritten within its window (a page programmed again after a
    /// program failure counts again).
    pub hot_pages: u64,
    /// NAND bytes programmed for host data and GC / host bytes written, since the open;
    /// `null` while the host has written nothing (GC an open does, a restarted daemon's
    /// cleaning, has no host bytes to divide by).
    pub waf: Option<f64>,
    /// Physical space for host data (good blocks but the superblock and checkpoint areas) /
    /// exported space - 1.
    pub spare_factor: f64,
    /// The WAF greedy GC cannot beat under uniform random 4 KiB overwrites at `spare_factor`
    /// (Lambert-W expression, `waf_limit.rs`); `null` without spare.
    pub waf_limit_greedy: Option<f64>,
    /// Pages whose program failed (each one's block is retired).
    pub program_failures: u64,
    /// Erases that failed (the block turned bad), the checkpoint areas' included.
    pub erase_failures: u64,
    pub read_retries: u64,
    pub uncorrectable_reads: u64,
    pub crc_errors: u64,
    pub gc_corrupt_slots: u64,
    /// Page scheme: GC programs that found no block for a GC frontier (on the bank, or on
    /// one to rescue its data to) and moved nothing, each try counted; the log says so once
    /// per stretch and bank. GC's victims are chosen to fit its room, so this is a sign of
    /// GC starved of room, which a device should never show.
    pub gc_starved: u64,
    /// Blocks retired since the open (their valid data moved out, then marked bad).
    pub retired_blocks: u64,
    /// Bad blocks on the device now (marked at format, in earlier runs or in this one, the
    /// superblock's and checkpoint areas' included), as `ftld info` counts them.
    pub bad_blocks: u64,
    /// Good blocks outside the superblock and checkpoint areas, and the usable blocks the
    /// scheme needs with this open's settings (`SchemeKind::blocks_needed`): once the first
    /// falls below the second, the device is read-only ("spare blocks exhausted").
    pub usable_blocks: u64,
    pub blocks_needed: u64,
    pub checkpoints: u64,
    pub checkpoint_failures: u64,
    /// Checkpoints that were incremental (changed map chunks only).
    pub checkpoint_deltas: u64,
    pub checkpoint_pages: u64,
    pub buffered_pages: usize,
    pub wear: WearStats,
    pub banks: Vec<BankStats>,
    /// RAM used by the map, valid bitmaps and per-block tables, per exported 4 KiB page.
    pub map_bytes_per_page: f64,
    /// RAM of fixed size (lock stripes), whatever the device size.
    pub map_fixed_bytes: usize,
    pub latency_read: LatencySummary,
    pub latency_write: LatencySummary,
    pub latency_flush: LatencySummary,
    pub latency_trim: LatencySummary,
    pub nand_violations: u64,
    pub recovery: crate::recovery::RecoveryReport,
    /// Merges (hybrid schemes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merges: Option<MergeStats>,
    /// Partial GC (real-time schemes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rt: Option<RtStats>,
}

impl Core {
    pub(crate) fn stats(&self) -> FtlStats {
        let latencies = &self.latencies;
        let c = &self.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut banks = Vec::new();
        let (mut wmin, mut wmax, mut wsum, mut wn) = (u32::MAX, 0u32, 0u64, 0u64);
        let mut usable = 0u64;
        let mut device_bad = 0u64;
        for (b, bank) in self.banks.iter().enumerate() {
            let a = bank.alloc.lock();
            let (mut open, mut full, mut bad, mut damaged) = (0, 0, 0, 0);
            let (mut emin, mut emax) = (u32::MAX, 0);
            let mut reserved = Vec::new();
            for (block, (s, e)) in a.state.iter().zip(&a.erase_count).enumerate() {
                match s {
                    BlockState::Bad => bad += 1,
                    BlockState::Reserved => {
                        reserved.push(block as u32);
                        continue;
                    }
                    BlockState::Open => open += 1,
                    BlockState::Full => full += 1,
                    BlockState::Damaged => {
                        full += 1;
                        damaged += 1;
                    }
                    _ => {}
                }
                usable += u64::from(*s != BlockState::Bad);
                emin = emin.min(*e);
                emax = emax.max(*e);
                wsum += *e as u64;
                wn += 1;
            }
            wmin = wmin.min(emin);
            wmax = wmax.max(emax);
            let free_blocks = a.free_len();
            drop(a);
            // The superblock's and checkpoint areas' blocks: the allocator calls them reserved
            // whether bad or not; the NAND's block table says (a few blocks, outside the
            // allocator's lock).
            for block in reserved {
                let addr = nand_model::BlockAddr {
                    bank: nand_model::BankId(b as u32),
                    block,
                };
                bad += u32::from(self.nand.block_state(addr).is_ok_and(|st| st.bad));
            }
            device_bad += u64::from(bad);
            banks.push(BankStats {
                free_blocks,
                open_blocks: open,
                full_blocks: full,
                bad_blocks: bad,
                damaged_blocks: damaged,
                exclusive_gc: bank.exclusive_gc.load(Ordering::Relaxed),
                erase_min: if emin == u32::MAX { 0 } else { emin },
                erase_max: emax,
                uncorrectable_reads: bank.uncorrectable.load(Ordering::Relaxed),
            });
        }
        // Physical space for host data (every good block but the superblock and checkpoint
        // areas) over the exported space, minus one.
        let spare_factor =
            (usable * u64::from(self.layout.slots_per_block())) as f64 / f64::from(self.lpns) - 1.0;
        let host_bytes = ld(&c.host_write_bytes);
        let nand_bytes =
            (ld(&c.page_programs) + ld(&c.gc_page_programs)) * self.layout.page_size as u64;
        // Per block in the bank allocators: state (1), erase count (4), fill sequence (8).
        let alloc_bytes = self.layout.total_blocks() as usize * 13;
        let mem = self.scheme.memory_bytes() + self.pins.memory_bytes() + alloc_bytes;
        FtlStats {
            capacity_bytes: self.capacity(),
            logical_pages: self.lpns,
            queues: self.data_queues(),
            scheme: self.scheme.kind().name(),
            gc_policy: self.cfg.gc_policy.name(),
            gc_workers: self.counters.gc_workers.load(Ordering::Relaxed) as usize,
            read_only: self.read_only_reason(),
            host_reads: ld(&c.host_reads),
            host_writes: ld(&c.host_writes),
            host_read_bytes: ld(&c.host_read_bytes),
            unwritten_page_reads: ld(&c.unwritten_page_reads),
            host_write_bytes: host_bytes,
            host_trims: ld(&c.host_trims),
            host_flushes: ld(&c.host_flushes),
            trimmed_pages: ld(&c.trimmed_pages),
            nand_page_programs: ld(&c.page_programs),
            multi_plane_programs: ld(&c.multi_plane_programs),
            nand_page_reads: ld(&c.page_reads),
            multi_plane_reads: ld(&c.multi_plane_reads),
            gc_page_programs: ld(&c.gc_page_programs),
            gc_copies: ld(&c.gc_copies),
            gc_erases: ld(&c.gc_erases),
            gc_steps: ld(&c.gc_steps),
            foreground_gc: ld(&c.foreground_gc),
            wear_level_moves: ld(&c.wear_level_moves),
            idle_flushes: ld(&c.idle_flushes),
            pages_dropped_read_only: ld(&c.pages_dropped_read_only),
            rmw_retries: ld(&c.rmw_retries),
            hot_pages: ld(&c.hot_pages),
            waf: (host_bytes > 0).then(|| nand_bytes as f64 / host_bytes as f64),
            spare_factor,
            waf_limit_greedy: crate::waf_limit::greedy_uniform_waf(spare_factor),
            program_failures: ld(&c.program_failures),
            erase_failures: ld(&c.erase_failures),
            read_retries: ld(&c.read_retries),
            uncorrectable_reads: ld(&c.uncorrectable),
            crc_errors: ld(&c.crc_errors),
            gc_corrupt_slots: ld(&c.gc_corrupt_slots),
            gc_starved: ld(&c.gc_starved),
            retired_blocks: ld(&c.retired_blocks),
            bad_blocks: device_bad,
            usable_blocks: usable,
            blocks_needed: self.blocks_needed,
            checkpoints: ld(&c.checkpoints),
            checkpoint_failures: ld(&c.checkpoint_failures),
            checkpoint_deltas: ld(&c.checkpoint_deltas),
            checkpoint_pages: ld(&c.checkpoint_pages),
            buffered_pages: self.cache.overlay_len(),
            wear: WearStats {
                min: if wmin == u32::MAX { 0 } else { wmin },
                avg: if wn == 0 {
                    0.0
                } else {
                    wsum as f64 / wn as f64
                },
                max: wmax,
            },
            banks,
            map_bytes_per_page: mem as f64 / self.lpns.max(1) as f64,
            map_fixed_bytes: self.cache.fixed_bytes(),
            latency_read: latencies.summary(OpKind::Read),
            latency_write: latencies.summary(OpKind::Write),
            latency_flush: latencies.summary(OpKind::Flush),
            latency_trim: latencies.summary(OpKind::Trim),
            nand_violations: self.nand.violations(),
            recovery: self.recovery.lock().clone(),
            merges: self.scheme.merge_stats(),
            rt: self.scheme.rt_stats(),
        }
    }
}
