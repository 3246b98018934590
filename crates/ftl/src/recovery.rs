//! Rebuilding the FTL's RAM state when an image is opened.
//!
//! Start from the newest valid checkpoint (map + per-block erase/programmed counts at a quiescent
//! moment numbered `sc`), then scan, bank-parallel, the OOB of every page programmed since:
//! pages past the checkpoint's programmed count in blocks not erased since, and all pages of
//! blocks erased since. Without a checkpoint every programmed page is scanned.
//!
//! The scheme resolves what the scan finds into its map (`Scheme::recover`; the page scheme's
//! rules, "highest sequence number wins", are in `schemes/page/recover.rs`), as the scan finds
//! it: the scan hands each data slot to the scheme from the bank's thread and keeps only the
//! few things resolved afterwards (trim records, suspect slots). The block states, free lists
//! and the sequence counter are rebuilt here.
//!
//! Memory: the checkpoint's map was loaded straight into the scheme's live table
//! (`checkpoint::load_newest`), and the scan keeps nothing per data slot, so an open needs
//! little beyond the live map (issue 14; `open_times` reports the peak).
//!
//! A clean shutdown leaves nothing programmed after its checkpoint, so a clean open scans
//! nothing (`RecoveryMode::Clean`).

use std::time::Instant;

use nand_model::{BankId, BlockAddr, PageAddr};
use serde::Serialize;

use crate::blocks::BlockState;
use crate::buffer::decode_trims;
use crate::checkpoint::Checkpoint;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Psa, LOGICAL_PAGE};
use crate::oob::{self, PageOob, SlotKind};
use crate::schemes::{CleanOpen, RecoverInput};

/// How the last open rebuilt the FTL state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryMode {
    /// A new image.
    #[default]
    Formatted,
    /// The newest checkpoint was current: nothing scanned.
    Clean,
    /// A checkpoint plus a scan of what was written after it (unclean shutdown).
    RollForward,
    /// No usable checkpoint: every programmed page was scanned.
    FullScan,
}

/// As `ftld stats` spells it (`formatted`, `clean`, `roll-forward`, `full-scan`), for logs.
impl std::fmt::Display for RecoveryMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecoveryMode::Formatted => "formatted",
            RecoveryMode::Clean => "clean",
            RecoveryMode::RollForward => "roll-forward",
            RecoveryMode::FullScan => "full-scan",
        })
    }
}

/// What recovery did, for stats and tests.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryReport {
    pub mode: RecoveryMode,
    pub checkpoint_id: Option<u64>,
    /// A newer checkpoint was corrupt and an older one (or none) was used.
    pub checkpoint_fallback: bool,
    pub blocks_scanned: u64,
    pub pages_scanned: u64,
    pub mapped_pages: u64,
    /// Pages whose checkpointed copy was erased and no moved copy or trim was found: no crash
    /// does that (a copy is erased only once its newer version or its trim record is on
    /// flash), so the image is damaged; they read as zeroes, and the device opens read-only.
    pub lost_pages: u64,
    /// Programmed pages, not their block's last, whose OOB the scan could not read: rotted
    /// (a crash tears only a block's last programmed page), so what they held is unknown and
    /// the device opens read-only.
    pub unreadable_pages: u64,
    /// Slots the crash tore (in a block's last programmed page, data failing its CRC, a write
    /// after the checkpoint or a copy whose intact source exists): ignored.
    pub torn_slots: u64,
    pub millis: f64,
    /// The scan's time on the device clock (simulated with timing virtual), in milliseconds:
    /// the pages read after the checkpoint, and the slots read again to resolve versions.
    pub scan_device_ms: f64,
}

/// Sequence numbers at or above this are refused when read from the medium: no device lives
/// through 2^62 operations, and a counter restored near `u64::MAX` would wrap. A checkpoint's
/// counter and id are held to the same limit (`checkpoint::codec`).
const MAX_SEQ: u64 = 1 << 62;

/// A device whose sequence counter or checkpoint id comes back at or above this opens
/// read-only. No device lives through 2^61 operations (7 000 years at ten million a second),
/// so only a forged or corrupt slot or checkpoint gets here; writing on would number slots
/// ever closer to [`MAX_SEQ`], past which a later scan drops them and later checkpoints are
/// refused: flushed writes would vanish. Read-only, everything on flash stays readable.
const SEQ_READ_ONLY_AT: u64 = 1 << 61;

/// Receives each intact data slot the scan finds: (lpn, seq, where). Called from the banks'
/// scan threads at once.
pub(crate) type OnData<'a> = &'a (dyn Fn(u32, u64, Psa) + Sync);

/// What the scan of one bank found besides its data slots (which went to [`OnData`]).
pub(crate) struct Scan {
    /// Data slots of a block's last programmed page whose data fails its CRC: torn by the
    /// crash, or rotted (the scheme decides).
    pub suspect: Vec<(u32, u64, Psa)>,
    /// Trim records: (start, count, seq).
    pub trims: Vec<(u32, u32, u64)>,
    /// The trim-log slots that held them: (where, seq).
    pub trim_slots: Vec<(Psa, u64)>,
    pub max_seq: u64,
    pub pages: u64,
    pub blocks: u64,
    /// Per scanned block holding data slots: (global block, lowest, highest sequence number of
    /// its data slots, suspects included). A version in the block lies between them, which
    /// often decides against a trim without reading the slot again.
    pub block_seqs: Vec<(u32, u64, u64)>,
    /// Programmed pages, each not its block's last, whose OOB could not be read or decoded,
    /// and the first of them. A crash tears only a block's last programmed page: these rotted,
    /// and the logical pages they held (perhaps their newest versions) cannot be told. (A
    /// count, not a list: an image of garbage would otherwise cost RAM per page at open.)
    pub unreadable: Unreadable,
}

/// Pages whose OOB a scan could not read: how many, and the first one met.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unreadable {
    pub count: u64,
    pub first: Option<PageAddr>,
}

impl Unreadable {
    fn note(&mut self, addr: PageAddr) {
        self.count += 1;
        self.first.get_or_insert(addr);
    }

    /// Both scans' pages together.
    pub fn add(self, other: Unreadable) -> Unreadable {
        Unreadable {
            count: self.count + other.count,
            first: self.first.or(other.first),
        }
    }
}

/// What a scheme's resolution reads from flash: the scan, and a slot's sequence number again.
/// [`Core`] is the one that reads; tests give slots by hand.
pub(crate) trait Scanner: Sync {
    /// Scans the page ranges of every bank, `(block, from, to)` per bank: each intact data
    /// slot goes to `on_data` as it is found (from several threads at once).
    fn scan(&self, ranges: &[Vec<(u32, u32, u32)>], on_data: OnData<'_>) -> Result<Vec<Scan>>;

    /// What the slot at `psa` holds for `lpn`, read again.
    fn slot_seq(&self, psa: Psa, lpn: u32) -> SlotVersion;
}

/// A slot read again during recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotVersion {
    /// A version of the page, with this sequence number.
    Of(u64),
    /// Readable, and not a version of the page (a stale or corrupt pointer).
    Other,
    /// Not readable now (the scan read it, so the medium failed since): nothing can be
    /// decided against it.
    Unreadable,
}

/// What a scheme's resolution installed.
pub(crate) struct Resolved {
    /// Pages, blocks scanned and the highest sequence number found.
    pub scanned: (u64, u64, u64),
    pub mapped_pages: u64,
    /// Suspect slots (see `Scan::suspect`) judged torn and ignored.
    pub torn_slots: u64,
    /// Pages whose checkpointed copy was erased and no newer copy was found.
    pub lost_pages: u64,
    /// Those pages, in order (reads of them fail: [`Core::is_lost`]).
    pub lost: Vec<u32>,
    /// Pages whose OOB the scan could not read (see [`Scan::unreadable`]).
    pub unreadable_pages: Unreadable,
}

impl Core {
    /// Rebuilds the scheme's map and the block states from flash. Runs before any thread
    /// starts; the checkpoint's map (if any) is in the scheme's table already.
    pub(crate) fn recover(
        &self,
        ckpt: Option<&Checkpoint>,
        fallback: bool,
    ) -> Result<RecoveryReport> {
        let t0 = Instant::now();
        let layout = self.layout;
        let total = layout.total_blocks();
        // Current per-block state from the NAND.
        let mut now = Vec::with_capacity(total as usize);
        for b in 0..total {
            now.push(self.nand.block_state(layout.block_addr(BlockIdx(b)))?);
        }
        let sc = ckpt.map_or(0, |c| c.sc);
        // Pages to scan per block, and blocks whose checkpointed contents were erased.
        let mut ranges: Vec<Vec<(u32, u32, u32)>> = vec![Vec::new(); layout.banks as usize];
        let mut erased_since = vec![false; total as usize];
        let mut scan_from = vec![0u32; total as usize];
        // Blocks whose block table counts fewer programmed pages than the checkpoint recorded
        // at the same erase count: pages are only ever added until an erase, so the table is
        // damaged (or the machine crashed before the image reached its disk). Their checkpointed
        // contents are treated as erased (their entries lost), and the device opens read-only:
        // a block the table calls empty would otherwise be handed out again while the map and
        // the schemes' block roles still point into it.
        let mut shrunk = (0u64, None::<BlockAddr>);
        for b in 0..total {
            let addr = layout.block_addr(BlockIdx(b));
            let st = now[b as usize];
            if layout.is_reserved(addr) {
                continue;
            }
            let (from, changed) = match ckpt.and_then(|c| c.blocks.get(b as usize)) {
                Some(&(erases, programmed))
                    if erases == st.erase_count && programmed > st.programmed_pages && !st.bad =>
                {
                    shrunk.0 += 1;
                    shrunk.1.get_or_insert(addr);
                    (0, true)
                }
                Some(&(erases, programmed)) if erases == st.erase_count => (programmed, false),
                Some(_) => (0, true),
                None => (0, true),
            };
            erased_since[b as usize] = changed || st.bad;
            scan_from[b as usize] = from;
            // A bad block's pages programmed since are scanned too (their spare areas read as a
            // controller salvaging the block does): a version whose newest copy is there is
            // lost, and must not leave an older one to read as current.
            if st.programmed_pages <= from {
                continue;
            }
            ranges[addr.bank.0 as usize].push((addr.block, from, st.programmed_pages));
        }
        let checkpoint_id = ckpt.map(|c| c.id);
        let scan_start = self.nand.now_ns();
        // The scheme scans (`Core::scan`), resolves the versions and installs its map.
        let mut resolved = self.scheme.recover(
            self,
            ckpt,
            RecoverInput {
                erased_since,
                scan_from,
                ranges,
                bad: now.iter().map(|st| st.bad).collect(),
            },
        )?;
        if let Some(clock) = self.nand.sim_clock() {
            // Slots the resolution read again after the scan (suspects, trims) did not wait.
            clock.advance_to(self.nand.idle_at_ns());
        }
        let scan_device_ms = self.nand.now_ns().saturating_sub(scan_start) as f64 / 1e6;
        let (pages, blocks, scanned_max) = resolved.scanned;
        let max_seq = sc.max(scanned_max);

        // Block states and free lists. A clean open (the checkpoint describes every programmed
        // page: no program after it) hands the blocks the close left partly programmed to the
        // scheme, which may resume writing in them once their last page reads back whole
        // (`Core::last_page_intact`); after a crash any last page may be torn, and they stay
        // closed.
        let clean = checkpoint_id.is_some() && pages == 0 && !fallback;
        let mut partly_programmed = Vec::new();
        for bank in 0..layout.banks {
            let mut a = self.bank(bank).alloc.lock();
            for block in 0..layout.blocks_per_bank {
                let addr = BlockAddr {
                    bank: BankId(bank),
                    block,
                };
                let st = now[layout.block_idx(addr).0 as usize];
                a.erase_count[block as usize] = st.erase_count;
                if layout.is_reserved(addr) {
                    a.state[block as usize] = BlockState::Reserved;
                } else if st.bad {
                    a.state[block as usize] = BlockState::Bad;
                } else if st.programmed_pages == 0 {
                    a.push_free(block);
                } else {
                    // Closed unless the scheme resumes them: frontiers start on fresh blocks.
                    a.state[block as usize] = BlockState::Full;
                    if clean && st.programmed_pages < layout.pages_per_block {
                        partly_programmed.push(addr);
                    }
                }
            }
            self.update_free(bank, a.free_len());
        }
        self.set_seq(max_seq);
        // Declared before the scheme's own rebuild: the page scheme's headroom GC (which copies
        // and erases) then does not run. The hybrid schemes' merges stop too; their rebuild
        // may still erase blocks that hold nothing valid.
        let id = checkpoint_id.unwrap_or(0);
        if max_seq >= SEQ_READ_ONLY_AT || id >= SEQ_READ_ONLY_AT {
            self.set_read_only(format!(
                "the sequence counter ({max_seq}) or the checkpoint id ({id}) read from the \
                 image is at or above 2^61, which no device reaches: a corrupt or forged slot \
                 or checkpoint; writing on could lose data"
            ));
        }
        if let Some(damage) = self.damage(ckpt.is_none(), &resolved, shrunk) {
            self.set_read_only(damage);
        }
        // A device whose spare blocks ran out (it turned read-only for that before the stop)
        // stays read-only, saying why: opened writable, it would clean and wear more blocks
        // and turn read-only again a moment later. Only once blocks went bad: a device with
        // none has the spare its format gave it, whatever running policy (hot/cold, planes)
        // this open asks more of.
        let went_bad = self.banks.iter().any(|bank| {
            bank.alloc
                .lock()
                .state
                .contains(&crate::blocks::BlockState::Bad)
        });
        if went_bad {
            self.check_spares();
        } else {
            let usable = self.usable_blocks();
            if usable < self.blocks_needed {
                // Settings that ask for more open blocks than the format set aside (page's
                // frontiers `per-queue` with many queues and hot/cold separation): writable,
                // but the first bad block will turn it read-only. Said now, not then.
                tracing::warn!(
                    "these settings need {} usable blocks and the image has {usable}: the \
                     device turns read-only at its first bad block (format it with more \
                     over-provisioning, or serve it with fewer write frontiers: frontiers = \
                     \"per-bank\", no hot/cold separation)",
                    self.blocks_needed
                );
            }
        }
        // Lost pages are damage (the device is read-only now), so the set never changes.
        let _ = self
            .lost
            .set(std::mem::take(&mut resolved.lost).into_boxed_slice());
        // The scheme finishes its rebuild on the block states (hybrid schemes: block roles).
        let clean_open = clean.then(|| CleanOpen {
            partly_programmed: &partly_programmed,
            scheme_state: ckpt.map_or(&[], |c| &c.scheme_state),
        });
        self.scheme.after_recovery(self, clean_open.as_ref())?;
        let mode = match checkpoint_id {
            None => RecoveryMode::FullScan,
            Some(_) if pages == 0 && !fallback => RecoveryMode::Clean,
            Some(_) => RecoveryMode::RollForward,
        };
        Ok(RecoveryReport {
            mode,
            checkpoint_id,
            checkpoint_fallback: fallback,
            blocks_scanned: blocks,
            pages_scanned: pages,
            mapped_pages: resolved.mapped_pages,
            lost_pages: resolved.lost_pages,
            unreadable_pages: resolved.unreadable_pages.count,
            torn_slots: resolved.torn_slots,
            millis: t0.elapsed().as_secs_f64() * 1000.0,
            scan_device_ms,
        })
    }

    /// Why the map recovery rebuilt may return wrong data as good, if it may: damage no crash
    /// of the daemon leaves, whose lost versions cannot be named page by page (and the one
    /// crash that loses the checkpoints: see the full-scan case). The device then opens
    /// read-only (as an SSD whose metadata failed does): what it recovered stays readable, and
    /// nothing written later can be lost on top. `full_scan`: no checkpoint was usable;
    /// `shrunk`: blocks (how many, the first) the block table counts fewer pages in than the
    /// checkpoint did.
    fn damage(
        &self,
        full_scan: bool,
        resolved: &Resolved,
        shrunk: (u64, Option<BlockAddr>),
    ) -> Option<String> {
        let mut why = Vec::new();
        // Not damage, the end of the device's life; read-only all the same (no checkpoint
        // can be written, and a full scan's map may bring trimmed data back).
        let worn = self.checkpoint_areas_worn();
        if let Some(worn) = &worn {
            why.push(worn.clone());
        }
        if let (n, Some(first)) = shrunk {
            why.push(format!(
                "the block table counts fewer programmed pages than the checkpoint recorded in \
                 {n} block(s) with no erase between (first: {first}): pages are only added \
                 until an erase, so the block table was damaged (or the machine crashed before \
                 the image reached its disk), and what those blocks held is treated as lost"
            ));
        }
        if let Some(first) = resolved.unreadable_pages.first {
            why.push(format!(
                "the OOB of {} programmed page(s) that are not their block's last (first: {first}) \
                 cannot be read: a crash of the daemon tears only a block's last page, so the \
                 image was damaged (or the machine crashed before the image reached its disk), \
                 and which logical pages they held (perhaps their newest versions) is unknown",
                resolved.unreadable_pages.count
            ));
        }
        if resolved.lost_pages > 0 {
            why.push(format!(
                "{} page(s) have no readable current version: it is in a block marked bad, or \
                 the checkpoint's copy was erased since with no newer copy or trim on flash \
                 (first: logical page {}; reads of them fail)",
                resolved.lost_pages,
                resolved.lost.first().copied().unwrap_or_default()
            ));
        }
        // (Worn checkpoint areas still hold their last chain: a full scan means it was
        // unreadable too, and this reason applies as much.)
        if full_scan {
            // A crash leaves no usable checkpoint while the image's first is being written
            // (then no trim record was ever dropped), or (versions before 2026-11-30) while the
            // one checkpoint area left after the other went bad was rewritten. Once two were
            // written, records older than both are dropped, which only a checkpoint makes safe. An area is erased
            // only to be written again, so an erased one held a checkpoint before the one
            // it was erased for: two, even when the crash left none of their pages.
            let (newest, areas) = crate::checkpoint::written_before(&self.nand, &self.layout);
            let area_erased = (0..2)
                .flat_map(|area| self.layout.ckpt_area_addrs(area))
                .any(|addr| {
                    self.nand
                        .block_state(addr)
                        .is_ok_and(|st| st.erase_count > 0)
                });
            if newest.is_some_and(|id| id >= 2) || areas == 2 || area_erased {
                why.push(format!(
                    "no checkpoint is usable, though the image holds checkpoints (the newest \
                     named: {}; they were damaged, or a crash cut the rewrite of the one \
                     checkpoint area left after the other went bad): the map was rebuilt from a \
                     scan of every page, which cannot see trims and write-zeroes older than the \
                     checkpoints (their records are dropped once two checkpoints cover them), so \
                     such ranges may read old data",
                    newest.map_or_else(|| "none readable".into(), |id| id.to_string())
                ));
            }
        }
        if why.is_empty() {
            return None;
        }
        if worn.is_some() && why.len() == 1 {
            return Some(format!(
                "{}. Opened read-only: the device is at the end of its life; copy the data off \
                 (every page reads as recovered)",
                why.join("; ")
            ));
        }
        Some(format!(
            "recovery found damage: {}. Opened read-only so nothing more is lost; copy the data \
             off (every page reads as recovered) and format the image again",
            why.join("; ")
        ))
    }

    /// The scan of one bank's page ranges, `(block, from, to)`, not started.
    fn bank_scan<'a>(&self, bank: u32, list: &'a [(u32, u32, u32)]) -> BankScan<'a> {
        BankScan {
            bank,
            list,
            next: 0,
            page: list.first().map_or(0, |r| r.1),
            lo: u64::MAX,
            hi: 0,
            bad: None,
            out: Scan {
                trims: Vec::new(),
                trim_slots: Vec::new(),
                max_seq: 0,
                pages: 0,
                blocks: list.len() as u64,
                suspect: Vec::new(),
                block_seqs: Vec::new(),
                unreadable: Unreadable::default(),
            },
            oob_buf: vec![0u8; self.layout.oob_size as usize],
            slot: vec![0u8; LOGICAL_PAGE],
            page_buf: vec![0u8; self.layout.page_size as usize],
        }
    }

    /// Reads the OOB (and trim-log slots) of the next page of scan `s`; false when its
    /// ranges are done.
    fn scan_page(&self, s: &mut BankScan<'_>, on_data: OnData<'_>) -> bool {
        let (block, to) = loop {
            let Some(&(block, _, to)) = s.list.get(s.next) else {
                return false;
            };
            if s.page < to {
                break (block, to);
            }
            // The block is done: the range of its data slots' sequence numbers.
            if s.lo <= s.hi {
                let blk = self.layout.block_idx(BlockAddr {
                    bank: BankId(s.bank),
                    block,
                });
                s.out.block_seqs.push((blk.0, s.lo, s.hi));
            }
            (s.lo, s.hi) = (u64::MAX, 0);
            s.next += 1;
            s.page = s.list.get(s.next).map_or(0, |r| r.1);
        };
        let page = s.page;
        s.page += 1;
        let addr = PageAddr {
            block: BlockAddr {
                bank: BankId(s.bank),
                block,
            },
            page,
        };
        s.out.pages += 1;
        let bad = match s.bad {
            Some((b, bad)) if b == block => bad,
            _ => {
                let bad = self.nand.block_state(addr.block).is_ok_and(|st| st.bad);
                s.bad = Some((block, bad));
                bad
            }
        };
        let read = if bad {
            // Its versions are offered as found; the scheme's resolution turns any that is
            // the newest into a lost page (`page::recover::resolve`).
            self.nand
                .peek_of_bad(addr, 0, &mut [], &mut s.oob_buf)
                .unwrap_or(false)
        } else {
            self.read_retrying(addr, 0, &mut [], &mut s.oob_buf)
        };
        let decoded = read
            .then(|| oob::decode(&s.oob_buf, self.layout.slots_per_page))
            .flatten();
        let Some(PageOob::Data(metas)) = decoded else {
            // Torn by a crash mid-program, or a failed program (its block is retired and
            // programmed no further): only a block's last programmed page can be either.
            // Any other page has rotted, and what it held is unknown. (A bad block's pages
            // may be anything.)
            if page + 1 < to && !bad {
                s.out.unreadable.note(addr);
            }
            return true;
        };
        // A power cut can tear only the page being programmed: each block's last
        // programmed page. Its OOB may be whole while its data is not: its data slots
        // that fail their CRCs are handed to the scheme as suspects (torn, or rotted:
        // the scheme's rules tell which). Only these pages are checked; anywhere else
        // a bad CRC is rot, which a host read reports.
        let suspect = if page + 1 == to && !bad {
            self.failing_slots(addr, &metas, &mut s.page_buf, &mut s.oob_buf)
        } else {
            0
        };
        for (i, m) in metas.iter().enumerate() {
            let psa = self.layout.psa(addr, i as u32);
            if m.seq >= MAX_SEQ {
                // No run numbers 2^62 operations: a hostile or corrupt entry.
                tracing::warn!(
                    "{addr} slot {i}: sequence number {} is impossible; ignored",
                    m.seq
                );
                continue;
            }
            match m.kind {
                SlotKind::Data if suspect & (1 << i) != 0 => {
                    s.out.max_seq = s.out.max_seq.max(m.seq);
                    (s.lo, s.hi) = (s.lo.min(m.seq), s.hi.max(m.seq));
                    s.out.suspect.push((m.lpn.0, m.seq, psa));
                }
                SlotKind::Data => {
                    s.out.max_seq = s.out.max_seq.max(m.seq);
                    (s.lo, s.hi) = (s.lo.min(m.seq), s.hi.max(m.seq));
                    on_data(m.lpn.0, m.seq, psa);
                }
                SlotKind::TrimLog => {
                    let off = (i * LOGICAL_PAGE) as u32;
                    // A bad block's trim records are read as its spare areas are: a trim
                    // lost there would bring the trimmed data back.
                    let read = if bad {
                        self.nand
                            .peek_of_bad(addr, off, &mut s.slot, &mut s.oob_buf)
                            .unwrap_or(false)
                    } else {
                        self.read_retrying(addr, off, &mut s.slot, &mut s.oob_buf)
                    };
                    if !read || crc32fast::hash(&s.slot) != m.crc {
                        continue;
                    }
                    let Some(recs) = decode_trims(&s.slot) else {
                        continue;
                    };
                    s.out.max_seq = s.out.max_seq.max(m.seq);
                    s.out.trims.extend(
                        recs.iter()
                            .filter(|r| r.seq < MAX_SEQ)
                            .map(|r| (r.start, r.count, r.seq)),
                    );
                    // Applied, but not kept live in a block that cannot be erased: the
                    // checkpoint the open writes holds their effect.
                    if !bad {
                        s.out.trim_slots.push((psa, m.seq));
                    }
                }
                SlotKind::Pad => {}
            }
        }
        true
    }
}

/// Where one bank's scan is: the next page of its ranges, the sequence numbers of the current
/// block's data slots, what it found, and its buffers.
struct BankScan<'a> {
    bank: u32,
    list: &'a [(u32, u32, u32)],
    /// The range being scanned (an index into `list`), and its next page.
    next: usize,
    page: u32,
    lo: u64,
    hi: u64,
    /// The block of the last page read, and whether it is bad.
    bad: Option<(u32, bool)>,
    out: Scan,
    oob_buf: Vec<u8>,
    slot: Vec<u8>,
    page_buf: Vec<u8>,
}

thread_local! {
    /// With timing virtual: the latest end of the reads this thread submitted since it last
    /// reset it (`read_retrying` does not wait then; see [`Core::scan_virtual`]).
    static READS_END: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl Core {
    /// The scan with timing virtual, on this thread: the banks' scans take turns page by
    /// page, the one whose reads end first next (ties: the lowest bank), on the simulated
    /// clock set to that end. This is what a thread per bank waiting on its reads does, in an
    /// order that does not depend on thread scheduling (which scan meets which version of a
    /// page first decides which OOBs are read again), so the modelled scan is the same on
    /// every run; and the reads reach every timeline and controller in time order.
    fn scan_virtual(
        &self,
        clock: &nand_model::SimClock,
        ranges: &[Vec<(u32, u32, u32)>],
        on_data: OnData<'_>,
    ) -> Vec<Scan> {
        let start = clock.now_ns();
        let mut scans: Vec<(BankScan<'_>, u64, bool)> = ranges
            .iter()
            .enumerate()
            .map(|(bank, list)| (self.bank_scan(bank as u32, list), start, true))
            .collect();
        while let Some((s, ready, more)) = scans
            .iter_mut()
            .filter(|(_, _, more)| *more)
            .min_by_key(|(s, ready, _)| (*ready, s.bank))
        {
            clock.advance_to(*ready);
            READS_END.with(|e| e.set(0));
            *more = self.scan_page(s, on_data);
            *ready = (*ready).max(READS_END.with(|e| e.get()));
        }
        scans.into_iter().map(|(s, _, _)| s.out).collect()
    }
}

impl Scanner for Core {
    /// A thread per bank; with timing virtual, [`Core::scan_virtual`].
    fn scan(&self, ranges: &[Vec<(u32, u32, u32)>], on_data: OnData<'_>) -> Result<Vec<Scan>> {
        if let Some(clock) = self.nand.sim_clock() {
            let scans = self.scan_virtual(clock, ranges, on_data);
            clock.advance_to(self.nand.idle_at_ns());
            return Ok(scans);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = ranges
                .iter()
                .enumerate()
                .map(|(bank, list)| {
                    s.spawn(move || {
                        let mut scan = self.bank_scan(bank as u32, list);
                        while self.scan_page(&mut scan, on_data) {}
                        Ok(scan.out)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(crate::FtlError::Internal("scan thread panicked".into()))
                    })
                })
                .collect::<Result<Vec<_>>>()
        })
    }

    /// Read from the page's OOB again: recovery keeps no sequence number per page. The scan
    /// read this page a moment ago, so a read that fails now is retried longer than the
    /// scan's (a transient fault's spared retry may have gone to another thread's read).
    fn slot_seq(&self, psa: Psa, lpn: u32) -> SlotVersion {
        if u64::from(psa.0) >= self.layout.total_slots() {
            return SlotVersion::Other;
        }
        let (addr, slot) = self.layout.split(psa);
        let mut oob_buf = vec![0u8; self.layout.oob_size as usize];
        let read = if self.nand.block_state(addr.block).is_ok_and(|st| st.bad) {
            // As the scan read it (`scan_page`).
            self.nand
                .peek_of_bad(addr, 0, &mut [], &mut oob_buf)
                .unwrap_or(false)
        } else {
            (0..4).any(|_| self.read_retrying(addr, 0, &mut [], &mut oob_buf))
        };
        if !read {
            return SlotVersion::Unreadable;
        }
        let Some(PageOob::Data(metas)) = oob::decode(&oob_buf, self.layout.slots_per_page) else {
            return SlotVersion::Other;
        };
        match metas.get(slot as usize) {
            Some(m) if m.kind == SlotKind::Data && m.lpn.0 == lpn && m.seq < MAX_SEQ => {
                SlotVersion::Of(m.seq)
            }
            _ => SlotVersion::Other,
        }
    }
}

impl Core {
    /// Whether the last programmed page of `block` holds a data page whose every slot passes
    /// its check. Recovery takes a bad page for a crash's cut only when it is the last of its
    /// block, and for rot (damage: read-only) anywhere else; so a block is resumed only if its
    /// last page is whole. A clean close's blocks are, but a torn page an earlier crash left (a
    /// roll-forward keeps the block, closed) or a failed program (not remembered across a
    /// restart) may end a block a later clean close leaves partly programmed.
    /// (Read only for a block a scheme would resume: a hybrid scheme's clean open would
    /// otherwise read a page of every partly written log block for nothing. In virtual time
    /// the caller advances the clock past the reads, as after the scan.)
    pub(crate) fn last_page_intact(&self, block: BlockAddr) -> bool {
        let Some(last) = self
            .nand
            .block_state(block)
            .ok()
            .and_then(|st| st.programmed_pages.checked_sub(1))
        else {
            return false;
        };
        let addr = PageAddr { block, page: last };
        let mut page = vec![0u8; self.layout.page_size as usize];
        let mut oob_buf = vec![0u8; self.layout.oob_size as usize];
        if !self.read_retrying(addr, 0, &mut page, &mut oob_buf) {
            return false;
        }
        match crate::oob::decode(&oob_buf, self.layout.slots_per_page) {
            Some(crate::oob::PageOob::Data(metas)) => {
                metas.len() <= self.layout.slots_per_page as usize
                    && metas.iter().enumerate().all(|(i, m)| {
                        m.kind == SlotKind::Pad
                            || page
                                .get(i * LOGICAL_PAGE..(i + 1) * LOGICAL_PAGE)
                                .is_some_and(|d| crc32fast::hash(d) == m.crc)
                    })
            }
            _ => false,
        }
    }

    /// The slots of page `addr` (whose OOB decoded to `metas`) whose data fails its CRC on
    /// every read, as a bit mask (a page has at most 8 slots).
    fn failing_slots(
        &self,
        addr: PageAddr,
        metas: &[crate::oob::SlotMeta],
        page: &mut [u8],
        oob_buf: &mut [u8],
    ) -> u32 {
        let readable = self.read_retrying(addr, 0, page, oob_buf);
        let mut mask = 0;
        for (i, m) in metas.iter().enumerate().take(32) {
            let ok = readable
                && page
                    .get(i * LOGICAL_PAGE..(i + 1) * LOGICAL_PAGE)
                    .is_some_and(|d| crc32fast::hash(d) == m.crc);
            if m.kind != SlotKind::Pad && !ok {
                mask |= 1 << i;
            }
        }
        mask
    }

    fn read_retrying(&self, addr: PageAddr, off: u32, data: &mut [u8], oob_buf: &mut [u8]) -> bool {
        for _ in 0..=self.own_read_retries() {
            match self.nand.read(addr, off, data, Some(oob_buf)) {
                Ok(c) => {
                    // The data is read at submission. With timing virtual the scan keeps the
                    // time (`Core::scan_virtual`): a wait would move the shared clock.
                    if self.nand.sim_clock().is_some() {
                        let end = c.deadline_ns();
                        READS_END.with(|e| e.set(e.get().max(end)));
                    } else {
                        c.wait();
                    }
                    return true;
                }
                Err(nand_model::NandError::Uncorrectable { .. }) => {
                    // Every failed attempt counts, as the host's and GC's reads count theirs.
                    self.counters
                        .read_retries
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                Err(e) => {
                    tracing::warn!("recovery read of {addr} failed: {e}");
                    return false;
                }
            }
        }
        false
    }
}
