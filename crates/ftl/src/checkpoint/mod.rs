//! The superblock and checkpoints (LFTL §3.5).
//!
//! The *superblock* (bank 0, block 0, page 0) is written once at format and names the FTL's
//! format parameters. A *checkpoint* is a snapshot of the map and of every block's erase count and
//! programmed-page count, taken at a quiescent moment (host mutations frozen, buffers flushed, GC
//! between steps). It is written to one of two checkpoint areas, alternately, striped over all
//! banks so it is written and read in parallel; every page carries its checkpoint id, index and
//! CRC in the OOB, so a torn or corrupt checkpoint is detected and the other one is used.
//!
//! The payload format is in `codec.rs` (encoded and decoded as a stream), finding and reading
//! the newest chain in `load.rs`, where an area's pages are (its bad blocks left out) in
//! `area.rs`. A *full* checkpoint holds the whole map; a *delta* only the map
//! chunks changed since the previous one, appended after it in the same area (a chain).
//!
//! Memory: a periodic checkpoint copies the map (host writes go on while its pages are
//! programmed); one written with everything held still (`Core::checkpoint_held`: at open and
//! create) is encoded straight from the live table. Neither holds the encoded bytes.
//!
//! `sc` is the sequence counter at the snapshot: every operation numbered below it is in the
//! snapshot, none at or above it is. `prev_sc` is the older checkpoint's `sc`; trim-log slots
//! newer than it stay live so that falling back to the older checkpoint loses no trim.

use std::sync::atomic::Ordering;

use event_listener::Listener;

use nand_model::{BankId, BlockAddr, Completion, NandDevice, PageAddr};

use crate::core::Core;
use crate::error::{FtlError, Result};
use crate::layout::Layout;
use crate::oob::{self, PageOob};

mod area;
mod codec;
mod load;

pub(crate) use area::AreaMap;
use codec::HEADER;
pub(crate) use codec::{decode, Checkpoint, MapImage, MapSink, MapSource};
pub(crate) use load::{load_newest, written_before, Retries};

const SUPER_MAGIC: &[u8; 8] = b"FTLDSUPR";
/// The superblock's format version.
const VERSION: u32 = 1;
/// Map entries per delta chunk (one 4 KiB piece of the map).
pub const CHUNK: u32 = 1024;
/// Most write queues an image may be formatted for.
pub const MAX_QUEUES: u32 = 256;
/// Deltas after which the next checkpoint is a full one again.
const MAX_CHAIN: u32 = 32;

/// Which checkpoint is newest (the next one goes to the other area).
#[derive(Clone, Debug, Default)]
pub struct CkptState {
    pub last_id: u64,
    /// Area of the current chain.
    pub last_area: Option<u32>,
    pub last_sc: u64,
    /// First free page of the current chain's area.
    pub next_offset: u64,
    /// Checkpoints in the current chain.
    pub chain_len: u32,
    /// The next checkpoint must be a full one (the map's change tracking is not trustworthy
    /// after a recovery or a failed checkpoint).
    pub force_full: bool,
}

/// The FTL's format parameters, from the superblock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SuperBlock {
    /// The FTL scheme the image was formatted with (bytes 32..36; 0, what older images hold
    /// there, is `page`).
    pub scheme: crate::schemes::SchemeKind,
    pub lpns: u32,
    pub ckpt_blocks: u32,
    /// The write queues whose own open blocks the format set room aside for: with the page
    /// scheme's frontiers `per-queue` the most queues the image may be served with; 1 for
    /// frontiers shared per bank and for the hybrid schemes, which then take any number
    /// (`frontier_owners`). Images formatted before a87d13b (2026-11-27) hold the queue count
    /// they were formatted with, whatever their frontiers.
    pub max_queues: u32,
    pub overprovision: f64,
    /// Log blocks of a hybrid scheme (bytes 36..40; 0 for `page`).
    pub log_blocks: u32,
}

/// Most log blocks a hybrid scheme may have: a quarter of the device.
pub fn max_log_blocks(layout: &Layout) -> u32 {
    (layout.total_blocks() / 4).max(2)
}

/// Checkpoint bytes for a device of `lpns` pages over `layout` (with room for trim-log slots).
/// Each area holds a full checkpoint and the deltas after it: room for twice a full one.
pub fn checkpoint_bytes(lpns: u64, total_blocks: u64) -> u64 {
    2 * (HEADER as u64 + lpns * 4 + total_blocks * 8 + 64 * 1024)
}

fn get32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn get64(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// A superblock page and its OOB, as every copy holds them.
fn superblock_page(layout: &Layout, sb: &SuperBlock) -> (Vec<u8>, Vec<u8>) {
    let mut data = vec![0u8; layout.page_size as usize];
    data[0..8].copy_from_slice(SUPER_MAGIC);
    data[8..12].copy_from_slice(&VERSION.to_le_bytes());
    data[12..16].copy_from_slice(&sb.lpns.to_le_bytes());
    data[16..20].copy_from_slice(&sb.ckpt_blocks.to_le_bytes());
    data[20..24].copy_from_slice(&sb.max_queues.to_le_bytes());
    data[24..32].copy_from_slice(&sb.overprovision.to_bits().to_le_bytes());
    data[32..36].copy_from_slice(&sb.scheme.code().to_le_bytes());
    data[36..40].copy_from_slice(&sb.log_blocks.to_le_bytes());
    let mut oob_buf = vec![0u8; layout.oob_size as usize];
    oob::encode_superblock(&mut oob_buf, crc32fast::hash(&data));
    (data, oob_buf)
}

/// Writes the superblock of a freshly created image.
pub fn write_superblock(nand: &NandDevice, layout: &Layout, sb: &SuperBlock) -> Result<()> {
    let (data, oob_buf) = superblock_page(layout, sb);
    for page in 0..SUPERBLOCK_COPIES.min(layout.pages_per_block) {
        let addr = PageAddr {
            block: layout.superblock(),
            page,
        };
        nand.program(addr, &data, &oob_buf)?.wait();
    }
    Ok(())
}

/// How the superblock's copies stood when it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuperblockCopies {
    /// Copies that read back whole and agree with the one used.
    pub intact: u32,
    /// Pages of the superblock's block programmed (copies, damaged or not).
    pub programmed: u32,
}

/// A writable open whose superblock has fewer than its copies intact (a damaged copy, or an
/// image formatted with one) programs fresh ones after the last, so one more damaged page
/// does not make the image unusable. A programmed page cannot be written again without an
/// erase of the whole block, and an erase would leave no copy at all until the programs
/// after it end: so copies are appended (the reader takes any intact copy in the block),
/// until the block is full. Returns the copies written; a failed program ends the repair
/// with a warning (the intact copies still serve).
pub fn restore_superblock_copies(
    nand: &NandDevice,
    layout: &Layout,
    sb: &SuperBlock,
    copies: SuperblockCopies,
) -> u32 {
    let want = SUPERBLOCK_COPIES.min(layout.pages_per_block);
    let missing = want.saturating_sub(copies.intact);
    let room = layout.pages_per_block.saturating_sub(copies.programmed);
    if missing == 0 {
        return 0;
    }
    if room == 0 {
        tracing::warn!(
            "{}: {} of the superblock's {want} copies are intact and its block has no \
             page left for another",
            nand.path().display(),
            copies.intact
        );
        return 0;
    }
    let (data, oob_buf) = superblock_page(layout, sb);
    let mut written = 0;
    for page in copies.programmed..copies.programmed + missing.min(room) {
        let addr = PageAddr {
            block: layout.superblock(),
            page,
        };
        match nand.program(addr, &data, &oob_buf) {
            Ok(c) => {
                c.wait();
                written += 1;
            }
            Err(e) => {
                tracing::warn!(
                    "{}: a fresh superblock copy (page {page} of its block) failed: {e}",
                    nand.path().display()
                );
                break;
            }
        }
    }
    tracing::info!(
        "{}: {} of the superblock's {want} copies were intact; {written} fresh {} written \
         after them",
        nand.path().display(),
        copies.intact,
        if written == 1 { "copy" } else { "copies" }
    );
    written
}

/// Copies of the superblock, in the first pages of its block (which holds nothing else): one
/// damaged page does not make the image unusable. Images formatted before hold one. A
/// writable open appends fresh copies when fewer are intact ([`restore_superblock_copies`]),
/// so the block holds up to a block's pages of them.
const SUPERBLOCK_COPIES: u32 = 4;

/// Reads the superblock; the error says why the image is not a usable FTL image.
pub fn read_superblock(nand: &NandDevice) -> Result<SuperBlock> {
    read_superblock_copies(nand).map(|(sb, _)| sb)
}

/// [`read_superblock`], and how its copies stand: every programmed page of its block is read.
pub fn read_superblock_copies(nand: &NandDevice) -> Result<(SuperBlock, SuperblockCopies)> {
    let geo = nand.geometry();
    let fail = |reason: &str| FtlError::Format {
        path: nand.path().to_path_buf(),
        reason: reason.to_string(),
    };
    let mut data = vec![0u8; geo.page_size as usize];
    let mut oob_buf = vec![0u8; geo.oob_size as usize];
    let addr = PageAddr {
        block: BlockAddr {
            bank: BankId(0),
            block: 0,
        },
        page: 0,
    };
    // The superblock is the first page a format programs: an image whose first page never was
    // is one whose creation was cut short (a crash within milliseconds of the first `serve`),
    // unless other blocks hold programmed pages: then the image's block table is damaged, and
    // formatting it again would destroy data a repair could still reach.
    if !nand.peek_oob(addr, &mut oob_buf)? {
        let holding = programmed_blocks(nand)?;
        if holding > 0 {
            return Err(fail(&format!(
                "its block table marks the superblock page (bank 0, block 0, page 0) as \
                 {}, yet {holding} other blocks hold programmed pages: the block table is \
                 damaged (this is not an interrupted format, and the data may be intact; do \
                 not format it: keep a copy of the image)",
                if nand.block_state(addr.block)?.bad {
                    "in a bad block"
                } else {
                    "never programmed"
                }
            )));
        }
        return Err(fail(
            "no FTL superblock: the image was never formatted to the end (its creation was \
             interrupted, so nothing was ever stored in it); format it again (ftld format \
             --force) or delete it",
        ));
    }
    // Every copy is read: the first intact one is used, the others counted (a writable open
    // replaces the damaged ones). With none intact, a copy whose checksum matches but whose
    // fields are refused explains the failure best; then one that fails its checksum
    // (damage); else the image was never formatted by ftld.
    let mut refused: Option<String> = None;
    let mut corrupt = 0;
    let mut found: Option<(u32, SuperBlock)> = None;
    let mut intact = 0;
    let mut programmed = 0;
    for page in 0..geo.pages_per_block {
        let addr = PageAddr { page, ..addr };
        // Copies are programmed in order: the first unprogrammed page ends them.
        if page > 0 && !nand.peek_oob(addr, &mut oob_buf)? {
            break;
        }
        programmed = page + 1;
        let mut read = nand.read(addr, 0, &mut data, Some(&mut oob_buf));
        if matches!(&read, Err(e) if e.is_fault()) {
            // Once more before a copy is called damaged (and replaced): a read fault may be
            // one that passes (injected read errors, `[faults]`).
            read = nand.read(addr, 0, &mut data, Some(&mut oob_buf));
        }
        match read {
            Ok(c) => c.wait(),
            Err(e) if e.is_fault() => {
                corrupt += 1;
                continue;
            }
            // Past a copy already found, only the count of intact copies suffers.
            Err(_) if found.is_some() => break,
            Err(e) => return Err(e.into()),
        }
        // (A superblock page: the slot count only bounds data pages.)
        match oob::decode(&oob_buf, geo.page_size / crate::layout::LOGICAL_PAGE as u32) {
            Some(PageOob::Superblock { crc }) if crc == crc32fast::hash(&data) => {
                match SuperBlock::decode(&data, geo) {
                    Ok(sb) => match &found {
                        None => {
                            found = Some((page, sb));
                            intact += 1;
                        }
                        Some((_, first)) if *first == sb => intact += 1,
                        // Copies are all written from one superblock: one that disagrees
                        // is not one to restore from.
                        Some(_) => corrupt += 1,
                    },
                    Err(e) => {
                        refused.get_or_insert(e);
                    }
                }
            }
            Some(PageOob::Superblock { .. }) => corrupt += 1,
            _ if data.starts_with(SUPER_MAGIC) => corrupt += 1,
            _ => {}
        }
    }
    if let Some((page, sb)) = found {
        if corrupt > 0 && intact < SUPERBLOCK_COPIES.min(geo.pages_per_block) {
            tracing::warn!(
                "{}: superblock copy {} of {programmed} used; {corrupt} damaged, {intact} intact",
                nand.path().display(),
                page + 1,
            );
        } else if corrupt > 0 {
            // Damage an earlier open made up for with fresh copies: nothing to act on.
            tracing::info!(
                "{}: superblock copy {} of {programmed} used; {corrupt} damaged, {intact} intact",
                nand.path().display(),
                page + 1,
            );
        }
        return Ok((sb, SuperblockCopies { intact, programmed }));
    }
    Err(fail(&match (refused, corrupt) {
        (Some(e), _) => e,
        (None, 0) => "no FTL superblock (the NAND image was never formatted by ftld)".into(),
        (None, n) => format!(
            "the superblock is corrupt: {n} of its copies are unreadable or fail their checksum \
             and none is intact, so the image was damaged; the data may be intact: do not \
             format it, keep a copy of the image"
        ),
    }))
}

/// Blocks other than the superblock's that hold programmed pages, per the image's block table.
fn programmed_blocks(nand: &NandDevice) -> Result<u64> {
    let geo = nand.geometry();
    let mut n = 0;
    for bank in 0..geo.banks() {
        for block in 0..geo.blocks_per_bank {
            if bank == 0 && block == 0 {
                continue;
            }
            let b = BlockAddr {
                bank: BankId(bank),
                block,
            };
            let st = nand.block_state(b)?;
            n += u64::from(!st.bad && st.programmed_pages > 0);
        }
    }
    Ok(n)
}

/// Times a checkpoint that failed is written again before the failure is the caller's (a
/// close's: the image is then not clean). A checkpoint of ten pages on a medium failing one
/// program in ten failed its one retry in 2 of 6 stops; each retry is a fresh draw, and an
/// area wearing out ends the retries sooner (`checkpoint_areas_worn`).
const CHECKPOINT_RETRIES: u32 = 3;

impl SuperBlock {
    /// Decodes and validates superblock page bytes (whose OOB CRC already matched) for a
    /// device of geometry `geo`. Never panics on any input (fuzzed: `fuzz/`).
    pub fn decode(data: &[u8], geo: &nand_model::Geometry) -> std::result::Result<Self, String> {
        if data.get(0..8) != Some(&SUPER_MAGIC[..]) {
            return Err("superblock magic mismatch".into());
        }
        let version = get32(data, 8).unwrap_or(0);
        if version != VERSION {
            return Err(format!(
                "FTL format version {version} is not supported (this build reads version {VERSION})"
            ));
        }
        let code = get32(data, 32).unwrap_or(0);
        let Some(scheme) = crate::schemes::SchemeKind::from_code(code) else {
            return Err(format!(
                "the superblock names FTL scheme {code}, which this build does not know"
            ));
        };
        let sb = SuperBlock {
            scheme,
            lpns: get32(data, 12).unwrap_or(0),
            ckpt_blocks: get32(data, 16).unwrap_or(0),
            max_queues: get32(data, 20).unwrap_or(1),
            overprovision: f64::from_bits(get64(data, 24).unwrap_or(0)),
            log_blocks: get32(data, 36).unwrap_or(0),
        };
        sb.validate(geo)?;
        Ok(sb)
    }
}

impl SuperBlock {
    /// Checks every field against the geometry: a superblock whose CRC is good may still hold
    /// values this build must not trust (a hostile or foreign image). The error names the field.
    pub fn validate(&self, geo: &nand_model::Geometry) -> std::result::Result<(), String> {
        let bad = |field: &str, value: String, want: String| {
            Err(format!(
                "superblock field {field} = {value} is out of range ({want})"
            ))
        };
        let banks = u64::from(geo.banks());
        if self.ckpt_blocks == 0
            || 1 + 2 * u64::from(self.ckpt_blocks) >= u64::from(geo.blocks_per_bank)
        {
            return bad(
                "ckpt_blocks",
                self.ckpt_blocks.to_string(),
                format!(
                    "1 to {}: two checkpoint areas and the superblock must leave data blocks in each bank of {} blocks",
                    (geo.blocks_per_bank.saturating_sub(2)) / 2,
                    geo.blocks_per_bank
                ),
            );
        }
        let layout = Layout::new(geo, self.ckpt_blocks);
        if self.lpns == 0 || u64::from(self.lpns) >= layout.total_slots() {
            return bad(
                "lpns",
                self.lpns.to_string(),
                format!(
                    "1 to {}, the device's 4 KiB slots",
                    layout.total_slots() - 1
                ),
            );
        }
        // A full checkpoint (without trim records) must fit in one area.
        let full = HEADER as u64 + u64::from(self.lpns) * 4 + u64::from(layout.total_blocks()) * 8;
        let area = layout.ckpt_area_pages() * u64::from(geo.page_size);
        if full > area {
            return bad(
                "ckpt_blocks",
                self.ckpt_blocks.to_string(),
                format!(
                    "a checkpoint of {} logical pages needs {full} bytes, the area holds {area} ({} banks)",
                    self.lpns, banks
                ),
            );
        }
        if self.max_queues == 0 || self.max_queues > MAX_QUEUES {
            return bad(
                "max_queues",
                self.max_queues.to_string(),
                format!("1 to {MAX_QUEUES}"),
            );
        }
        if !(0.0..0.9).contains(&self.overprovision) {
            return bad(
                "overprovision",
                self.overprovision.to_string(),
                "0 to 0.9".into(),
            );
        }
        let min_logs = self.scheme.min_log_blocks();
        let max_logs = max_log_blocks(&layout);
        let logs_ok = if self.scheme.has_log_blocks() {
            (min_logs..=max_logs).contains(&self.log_blocks)
        } else {
            self.log_blocks == 0
        };
        if !logs_ok {
            return bad(
                "log_blocks",
                self.log_blocks.to_string(),
                if self.scheme.has_log_blocks() {
                    format!("{min_logs} to {max_logs} for scheme {}", self.scheme)
                } else {
                    format!("0: scheme {} has no log blocks", self.scheme)
                },
            );
        }
        // A hybrid scheme maps whole blocks: the data blocks, the log blocks and the working
        // room (`schemes::working_room`) must fit in the usable blocks.
        if self.scheme.has_log_blocks() {
            let lbns = u64::from(self.lpns).div_ceil(u64::from(layout.slots_per_block()));
            let usable =
                u64::from(layout.total_blocks()) - 1 - 2 * banks * u64::from(self.ckpt_blocks);
            let room = crate::schemes::working_room(banks);
            let need = lbns + u64::from(self.log_blocks) + room;
            if need > usable {
                return bad(
                    "lpns",
                    self.lpns.to_string(),
                    format!(
                        "{lbns} data blocks, {} log blocks and {room} spare need {need} blocks, the device has {usable}",
                        self.log_blocks,
                    ),
                );
            }
        }
        // A scheme with several blocks per logical block (rftl: three) needs them all, and
        // the working room.
        let per_lbn = self.scheme.blocks_per_logical_block();
        if per_lbn > 0 {
            let lbns = u64::from(self.lpns).div_ceil(u64::from(layout.slots_per_block()));
            let usable =
                u64::from(layout.total_blocks()) - 1 - 2 * banks * u64::from(self.ckpt_blocks);
            let room = crate::schemes::working_room(banks);
            let need = per_lbn * lbns + room;
            if need > usable {
                return bad(
                    "lpns",
                    self.lpns.to_string(),
                    format!(
                        "{lbns} logical blocks of {per_lbn} blocks each and {room} spare need {need} blocks, the device has {usable}",
                    ),
                );
            }
        }
        Ok(())
    }
}

impl Core {
    /// Takes and writes a checkpoint. Host mutations are frozen only for the flush and the
    /// snapshot copy, not while the checkpoint pages are programmed.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        self.checkpoint_with(false, CHECKPOINT_RETRIES)
    }

    /// Takes and writes a full checkpoint straight from the live map, with host mutations and
    /// GC held off until it is on flash: no copy of the map (open and create, where nothing
    /// waits yet; issue 14's peak RAM at open).
    pub(crate) fn checkpoint_held(&self) -> Result<()> {
        self.checkpoint_with(true, CHECKPOINT_RETRIES)
    }

    /// `retries`: how many more times a checkpoint whose page program failed may be written
    /// again. One whose area's erase failed is not: the device turns read-only
    /// ([`Self::checkpoint_areas_worn`]).
    fn checkpoint_with(&self, held: bool, retries: u32) -> Result<()> {
        if let Some(why) = self.checkpoint_areas_worn() {
            self.set_read_only_worn(why.clone());
            return Err(FtlError::ReadOnly(why));
        }
        // A read-only device writes no checkpoint (the design page), even one asked for
        // before it turned (a close whose flush met the turn, the maintenance tick).
        if let Some(e) = self.read_only_error() {
            return Err(e);
        }
        let _one = self.ckpt_lock.lock();
        let frozen = self.gate.freeze();
        self.flush_all_blocking();
        let st = self.ckpt.lock().clone();
        // A delta (only the map chunks changed since the last checkpoint) when the current
        // chain is trustworthy and short and the delta is small; else a full checkpoint.
        let full = held
            || st.force_full
            || st.last_area.is_none()
            || st.chain_len >= MAX_CHAIN
            || self.scheme.prefers_full_checkpoint();
        let gc = self.gc_gate.write();
        let scheme_state = self.scheme.checkpoint_state();
        let mut blocks = Vec::with_capacity(self.layout.total_blocks() as usize);
        for b in 0..self.layout.total_blocks() {
            let addr = self.layout.block_addr(crate::layout::BlockIdx(b));
            let s = self.nand.block_state(addr)?;
            blocks.push((s.erase_count, s.programmed_pages));
        }
        let sc = self.current_seq();
        // The map: the live table (held still until the write ends), or a copy.
        let mut hold = Some((frozen, gc));
        let (copy, live, trims) = if held {
            let (live, trims) = self.scheme.checkpoint_live();
            (None, Some(live), trims)
        } else {
            let payload = self.scheme.checkpoint_payload(full);
            hold = None;
            (Some(payload.map), None, payload.trims)
        };
        let map = match (&copy, live) {
            (Some(MapImage::Full(v)), _) => codec::MapBody::Full(v),
            (Some(MapImage::Delta(c)), _) => codec::MapBody::Delta(c),
            (None, Some(live)) => codec::MapBody::Full(live),
            (None, None) => return Err(FtlError::Internal("checkpoint without a map".into())),
        };
        let mut out = codec::Outgoing {
            id: st.last_id + 1,
            sc,
            prev_sc: st.last_sc,
            lpns: self.lpns,
            map,
            blocks: &blocks,
            trims: &trims,
            scheme_state: &scheme_state,
        };
        // Where each area's pages are (its bad blocks left out): unchanged until the area is
        // erased (`area.rs`).
        let maps = [0, 1].map(|a| AreaMap::of_device(&self.nand, &self.layout, a));
        let area_bytes = maps[0].pages().min(maps[1].pages()) * u64::from(self.layout.page_size);
        if !scheme_state.is_empty() && out.encoded_len() as u64 > area_bytes {
            // An area holds a full checkpoint without it (the format checked, and an area
            // that lost blocks is worn out below that): the state is only an open's
            // shortcut, so a checkpoint goes without it rather than fail.
            tracing::debug!(
                "checkpoint: the scheme's state ({} bytes) left out: the area holds {area_bytes}",
                4 * scheme_state.len()
            );
            out.scheme_state = &[];
        }
        self.counters
            .bytes_since_checkpoint
            .store(0, Ordering::Relaxed);
        let pages = out.encoded_len().div_ceil(self.layout.page_size as usize) as u64;
        let (area, offset) = match st.last_area {
            Some(a) if !full && maps[a as usize].fits(st.next_offset, pages) => (a, st.next_offset),
            // (Neither area is worn out: checked above.)
            Some(a) => (1 - a, 0),
            None => (0, 0),
        };
        if offset == 0 && !full {
            // The chain's area is full: this delta cannot start a chain. A full one instead;
            // not a failure (a scheme state in every delta, RFTL's, fills the area sooner).
            // The dirty chunks taken for this delta are lost: the next one must be full.
            drop(hold);
            self.ckpt.lock().force_full = true;
            drop(_one);
            return self.checkpoint();
        }
        let written = self.write_area(area, offset, &out);
        drop(hold);
        if let Err(e) = written {
            self.counters
                .checkpoint_failures
                .fetch_add(1, Ordering::Relaxed);
            // The dirty chunks taken for this checkpoint are lost: the next one must be full.
            self.ckpt.lock().force_full = true;
            // The area's erases that failed left so few good blocks that the checkpoint does
            // not fit (worn out): read-only below, the last checkpoint kept in the other area.
            // A page's program failed (the medium, not wear: the block stays good): the
            // checkpoint is written again, up to `CHECKPOINT_RETRIES` times, as a full one (a
            // delta's chain area then goes unused; the area of a full one is erased and
            // written over). The last good checkpoint is not in the area written over, so
            // another failure loses nothing recovery needs. So too one whose area lost blocks
            // to failed erases and no longer holds this checkpoint, though it is not worn out
            // (the scheme's state, planned for the area as it was, is left out next time).
            let shrunk = AreaMap::of_device(&self.nand, &self.layout, area) != maps[area as usize];
            if retries > 0
                && self.checkpoint_areas_worn().is_none()
                && (shrunk
                    || matches!(
                        &e,
                        FtlError::Nand(nand_model::NandError::ProgramFailed { .. })
                    ))
            {
                tracing::warn!(
                    "checkpoint: {e} (area {area}); writing it again ({retries} more tries)"
                );
                drop(_one);
                return self.checkpoint_with(held, retries - 1);
            }
            if let Some(why) = self.checkpoint_areas_worn() {
                self.set_read_only_worn(why.clone());
                return Err(FtlError::ReadOnly(why));
            }
            return Err(e);
        }
        *self.ckpt.lock() = CkptState {
            last_id: out.id,
            last_area: Some(area),
            last_sc: out.sc,
            next_offset: offset + pages,
            chain_len: if full { 1 } else { st.chain_len + 1 },
            force_full: false,
        };
        // Trim records older than both checkpoints are no longer needed by any recovery path.
        self.scheme.checkpoint_written(out.prev_sc);
        self.scheme.after_checkpoint(self);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        if !full {
            self.counters
                .checkpoint_deltas
                .fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(
            "checkpoint {} ({}) written to area {area} at page {offset}",
            out.id,
            if full { "full" } else { "delta" }
        );
        Ok(())
    }

    /// Why no checkpoint can be written any more, if none can: a checkpoint area lost so many
    /// blocks (their erases failed, at the endurance or before) that its good pages cannot hold
    /// a full checkpoint with room for trim records (`area::full_pages`). An area with fewer
    /// bad blocks goes on, its pages striped over the good ones (`area.rs`), as an SSD retires
    /// a bad block of its metadata region. Until 2026-12-01 the first bad block ended the
    /// checkpoints; until 2026-11-30 the writer then went on in the other area alone.
    ///
    /// A worn area is not written again: the only place left for a checkpoint would be the
    /// other area, which holds the last one, and writing over it loses the device's state if
    /// its erase fails on one of its blocks (the others are erased by then, and the chain
    /// with them) or the machine crashes before the new one is whole; the open would then
    /// find no checkpoint and call the device damaged (a full scan cannot see trims older
    /// than the checkpoints). The device is read-only instead (an SSD whose metadata blocks
    /// wore out is), and every open rolls forward from the last chain.
    pub(crate) fn checkpoint_areas_worn(&self) -> Option<String> {
        let need = area::full_pages(&self.layout, self.lpns);
        (0..2).find_map(|a| {
            let map = AreaMap::of_device(&self.nand, &self.layout, a);
            area::worn_out(&self.nand, &self.layout, &map, need)
        })
    }

    /// Programs a checkpoint, encoded page by page, at page `offset` of `area`; a full
    /// checkpoint (offset 0) erases the area first, a delta goes on the still-erased pages
    /// after the chain. An erase that fails turns its block bad and the area goes on without
    /// it (`area.rs`); if the rest cannot hold the checkpoint the error says why
    /// ([`FtlError::ReadOnly`] when the area is worn out).
    fn write_area(&self, area: u32, offset: u64, out: &codec::Outgoing<'_>) -> Result<()> {
        let layout = &self.layout;
        let ps = layout.page_size as usize;
        let count = out.encoded_len().div_ceil(ps) as u64;
        let too_small = |map: &AreaMap| {
            // Worn out as `checkpoint_areas_worn` says (the device turns read-only); an area
            // that holds a full checkpoint but not this one (trim records beyond the room
            // the format left) is an error of this checkpoint only.
            match area::worn_out(&self.nand, layout, map, area::full_pages(layout, self.lpns)) {
                Some(why) => FtlError::ReadOnly(why),
                None => FtlError::Internal(format!(
                    "checkpoint needs {count} pages at page {offset}, area {area} has {}",
                    map.pages()
                )),
            }
        };
        let mut map = AreaMap::of_device(&self.nand, layout, area);
        if !map.fits(offset, count) {
            return Err(too_small(&map));
        }
        let mut pending: Vec<Completion> = Vec::new();
        if offset == 0 {
            // Erase the area's good blocks on all banks (in parallel: the model overlaps
            // them). One whose erase fails is bad now and left out of the area's map.
            let mut failed = 0;
            for addr in layout.ckpt_area_addrs(area) {
                let state = self.nand.block_state(addr)?;
                if state.bad || state.programmed_pages == 0 {
                    continue;
                }
                match self.nand.erase(addr) {
                    Ok(done) => pending.push(done),
                    Err(e) if e.is_fault() => {
                        tracing::warn!("checkpoint area {area}: {e}; the area goes on without it");
                        self.counters.erase_failures.fetch_add(1, Ordering::Relaxed);
                        failed += 1;
                    }
                    Err(e) => {
                        pending.drain(..).for_each(Completion::wait);
                        return Err(e.into());
                    }
                }
            }
            pending.drain(..).for_each(Completion::wait);
            if failed > 0 {
                map = AreaMap::of_device(&self.nand, layout, area);
                if !map.fits(offset, count) {
                    return Err(too_small(&map));
                }
            }
        }
        let mut page = vec![0u8; ps];
        let mut fill = 0;
        let mut index = 0u64;
        let mut oob_buf = vec![0u8; layout.oob_size as usize];
        let mut failed = None;
        let mut program = |page: &mut [u8], index: u64, pending: &mut Vec<Completion>| {
            oob::encode_checkpoint(
                &mut oob_buf,
                out.id,
                index as u32,
                count as u32,
                crc32fast::hash(page),
            );
            pending.push(
                self.nand
                    .program(map.page(offset + index), page, &oob_buf)?,
            );
            // Keep the number of outstanding completions bounded.
            if pending.len() >= 4 * layout.banks as usize {
                pending
                    .drain(..layout.banks as usize)
                    .for_each(Completion::wait);
            }
            Ok::<(), FtlError>(())
        };
        out.encode(&mut |mut bytes: &[u8]| {
            while failed.is_none() && !bytes.is_empty() {
                let k = (ps - fill).min(bytes.len());
                page[fill..fill + k].copy_from_slice(&bytes[..k]);
                fill += k;
                bytes = &bytes[k..];
                if fill == ps {
                    failed = program(&mut page, index, &mut pending).err();
                    fill = 0;
                    index += 1;
                }
            }
        });
        if failed.is_none() && fill > 0 {
            page[fill..].fill(0);
            failed = program(&mut page, index, &mut pending).err();
            index += 1;
        }
        pending.drain(..).for_each(Completion::wait);
        if let Some(e) = failed {
            return Err(e);
        }
        debug_assert_eq!(index, count);
        self.counters
            .checkpoint_pages
            .fetch_add(count, Ordering::Relaxed);
        Ok(())
    }
}

/// Background maintenance: periodic checkpoints, the scheme's tick (adaptive GC gauge, the
/// hybrids' wear levelling), the idle flush and trim-record sealing. Run by the maintenance
/// thread, or with timing `virtual` as an actor of the simulation (`sim.rs`).
pub(crate) struct Maintenance {
    /// When the next tick is due ([`Core::now_ns`]).
    next_tick: u64,
    /// The idle flush's view of each data queue (`Core::seal_idle_queues`).
    idle_seen: Vec<Option<(u64, u64)>>,
}

/// The maintenance tick.
pub(crate) const TICK_NS: u64 = 50_000_000;

impl Maintenance {
    pub(crate) fn new(core: &Core) -> Maintenance {
        Maintenance {
            next_tick: core.now_ns() + TICK_NS,
            idle_seen: Vec::new(),
        }
    }

    /// When the next tick is due.
    pub(crate) fn next_tick(&self) -> u64 {
        self.next_tick
    }

    /// Virtual time's idle skip: the ticks before `at` changed nothing and are not run; the
    /// next is at `at` (on the grid of ticks they would have kept).
    pub(crate) fn skip_to(&mut self, at: u64) {
        self.next_tick = at;
    }

    /// Whether someone asked for work before the next tick (GC waits for trim records, a
    /// scheme wants a checkpoint).
    pub(crate) fn requested(core: &Core) -> bool {
        Self::trims_wanted(core) || core.checkpoint_requested.load(Ordering::Acquire)
    }

    /// GC waits for trim records to reach flash, and no test holds them in RAM
    /// (`Ftl::hold_trim_records`; while one does, the request waits for the release).
    fn trims_wanted(core: &Core) -> bool {
        core.flush_requested.load(Ordering::Acquire) && !core.trims_held.load(Ordering::Acquire)
    }

    /// One round: the tick if it is due, then whatever was requested.
    pub(crate) fn round(&mut self, core: &Core) {
        // The gauge measures host operations per tick: only on the tick, not on early wakes.
        let now = core.now_ns();
        if now >= self.next_tick {
            core.scheme.tick(core);
            if core.cfg.idle_flush_ms > 0 && core.read_only_reason().is_none() {
                let idle = core.cfg.idle_flush_ms.saturating_mul(1_000_000);
                core.seal_idle_queues(idle, now, &mut self.idle_seen);
            }
            self.next_tick = now + TICK_NS;
        }
        // Write out batched trim records: the slots they unmapped are held until then. Only the
        // trim queue, whose writer never waits for a data queue.
        let held = core.trims_held.load(Ordering::Acquire);
        let gc_waiting = !held && core.flush_requested.swap(false, Ordering::AcqRel);
        if gc_waiting || !held && core.trims_pending.swap(false, Ordering::AcqRel) {
            core.force_seal(core.trim_queue());
        }
        let interval = core.cfg.checkpoint_interval_bytes;
        let requested = core.checkpoint_requested.swap(false, Ordering::AcqRel);
        if (requested
            || interval > 0
                && core.counters.bytes_since_checkpoint.load(Ordering::Relaxed) >= interval)
            && core.read_only_reason().is_none()
        {
            if let Err(e) = core.checkpoint() {
                tracing::warn!("periodic checkpoint failed: {e}");
            }
        }
    }
}

/// The maintenance thread.
pub fn maintenance(core: std::sync::Arc<Core>) {
    let mut m = Maintenance::new(&core);
    while !core.stopping.load(Ordering::Acquire) {
        let l = core.maint_wake.listen();
        if core.stopping.load(Ordering::Acquire) {
            break;
        }
        // GC waiting for trim records may have asked while the previous round ran (a
        // checkpoint, say), when nobody listened: then go on at once.
        if !Maintenance::trims_wanted(&core) {
            l.wait_deadline(core.instant_at(m.next_tick()));
        }
        if core.stopping.load(Ordering::Acquire) {
            break;
        }
        m.round(&core);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of the close's checkpoint whose program fails (the medium, once) costs neither
    /// the stop nor the next clean open: the checkpoint is written again. Both areas' first
    /// page fail, so whichever area the close writes meets it.
    #[test]
    fn a_failed_checkpoint_program_is_written_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.img");
        let nand = crate::test_support::small_nand(2, 2, 128);
        let cfg = crate::FtlConfig {
            queues: 1,
            checkpoint_interval_bytes: 0,
            ..crate::FtlConfig::default()
        };
        let f = crate::Ftl::create(&path, &nand, nand_model::TimingMode::Off, cfg.clone(), None)
            .expect("create");
        let data = vec![5u8; 4096];
        // Out of order, so the map does not pack into runs and the checkpoint takes pages.
        let n = f.capacity() / 4096;
        for i in 0..n {
            let l = (i * 7919) % n;
            futures::executor::block_on(f.write(0, l * 4096, &data, false)).expect("write");
        }
        let layout = f.core.layout;
        // The retry is written where the first try was, from its first page: one failure
        // each on its first three pages fails three tries (a single retry met a second).
        for area in 0..2 {
            for page in 0..3 {
                f.nand()
                    .faults()
                    .fail_program_at(layout.ckpt_page(area, page));
            }
        }
        f.close()
            .expect("the stop survives failed checkpoint programs");
        assert!(f.nand().stats().injected.program >= 3);
        drop(f);
        let f = crate::Ftl::open(&path, nand_model::TimingMode::Off, cfg).expect("open");
        let r = f.recovery();
        assert_eq!(r.mode, crate::RecoveryMode::Clean, "{r:?}");
        let mut buf = vec![0u8; 4096];
        for l in 0..f.capacity() / 4096 {
            futures::executor::block_on(f.read(l * 4096, &mut buf)).expect("read");
            assert_eq!(buf, data);
        }
    }

    /// A superblock whose CRC is good but whose fields are out of range (a scheme this build
    /// does not know, zero or absurd queue counts, sizes past the device, NaN) is refused,
    /// naming the image and the field; scheme 0 (what images made before schemes existed hold)
    /// is `page`.
    #[test]
    fn superblock_fields_are_validated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.img");
        let cfg = nand_model::preset("slc-small-004")
            .expect("preset")
            .config
            .scaled_to(16 << 20);
        let nand = NandDevice::create(&path, &cfg, nand_model::TimingMode::Off).expect("create");
        let layout = Layout::new(nand.geometry(), 1);
        let sb = SuperBlock {
            scheme: crate::schemes::SchemeKind::Page,
            lpns: 100,
            ckpt_blocks: 1,
            max_queues: 2,
            overprovision: 0.07,
            log_blocks: 0,
        };
        write_superblock(&nand, &layout, &sb).expect("write");
        assert_eq!(read_superblock(&nand).expect("read"), sb);
        // Rewrite it with CRC-valid but hostile fields: each is refused by name.
        let raw = |scheme: u32, lpns: u32, ckpt: u32, queues: u32, op: f64| {
            nand.erase(layout.superblock()).expect("erase").wait();
            let mut data = vec![0u8; layout.page_size as usize];
            data[0..8].copy_from_slice(SUPER_MAGIC);
            data[8..12].copy_from_slice(&VERSION.to_le_bytes());
            data[12..16].copy_from_slice(&lpns.to_le_bytes());
            data[16..20].copy_from_slice(&ckpt.to_le_bytes());
            data[20..24].copy_from_slice(&queues.to_le_bytes());
            data[24..32].copy_from_slice(&op.to_bits().to_le_bytes());
            data[32..36].copy_from_slice(&scheme.to_le_bytes());
            let mut oob_buf = vec![0u8; layout.oob_size as usize];
            oob::encode_superblock(&mut oob_buf, crc32fast::hash(&data));
            let addr = PageAddr {
                block: layout.superblock(),
                page: 0,
            };
            nand.program(addr, &data, &oob_buf).expect("program").wait();
            read_superblock(&nand).map_err(|e| e.to_string())
        };
        assert!(raw(0, 100, 1, 2, 0.07).is_ok());
        let blocks = nand.geometry().blocks_per_bank;
        for (fields, want) in [
            ((77, 100, 1, 2, 0.07), "scheme 77"),
            ((0, 100, 1, 0, 0.07), "max_queues = 0"),
            ((0, 100, 1, 1 << 30, 0.07), "max_queues = 1073741824"),
            ((0, 0, 1, 2, 0.07), "lpns = 0"),
            ((0, u32::MAX, 1, 2, 0.07), "lpns = 4294967295"),
            ((0, 100, 0, 2, 0.07), "ckpt_blocks = 0"),
            ((0, 100, blocks, 2, 0.07), "ckpt_blocks"),
            ((0, 100, u32::MAX, 2, 0.07), "ckpt_blocks"),
            ((0, 100, 1, 2, f64::NAN), "overprovision = NaN"),
            ((0, 100, 1, 2, -1.0), "overprovision = -1"),
        ] {
            let (sch, l, c, q, op) = fields;
            let err = raw(sch, l, c, q, op).expect_err(want);
            assert!(err.contains(want) && err.contains("x.img"), "{want}: {err}");
        }
    }

    /// Every image `plan_format` makes passes `validate`: every preset, scaled from small to
    /// large, with 1 to the most queues, at the edges of the over-provisioning range. A false
    /// rejection would make good images unopenable.
    #[test]
    fn every_formattable_image_passes_validation() {
        let mut checked = 0;
        for p in nand_model::presets() {
            for raw in [8u64 << 20, 64 << 20, 1 << 30, 64 << 30] {
                let nand = p.config.scaled_to(raw);
                for queues in [1usize, 8, 64, MAX_QUEUES as usize] {
                    for (overprovision, scheme) in [0.0, 0.07, 0.28, 0.89]
                        .into_iter()
                        .flat_map(|o| crate::schemes::SchemeKind::ALL.map(|k| (o, k)))
                    {
                        let cfg = crate::FtlConfig {
                            queues,
                            overprovision,
                            scheme,
                            ..crate::FtlConfig::default()
                        };
                        let Ok(plan) = crate::plan_format(&nand, &cfg, None) else {
                            continue;
                        };
                        let sb = SuperBlock {
                            scheme,
                            lpns: plan.lpns,
                            ckpt_blocks: plan.ckpt_blocks,
                            max_queues: queues as u32,
                            overprovision,
                            log_blocks: plan.log_blocks,
                        };
                        if let Err(e) = sb.validate(&nand.geometry) {
                            panic!(
                                "{} at {raw} bytes, {queues} queues, op {overprovision}, {scheme}: {e}",
                                p.name
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 150, "only {checked} plans");
    }

    /// A checkpoint area too small for the map is refused (a geometry with many tiny blocks).
    #[test]
    fn superblock_checkpoint_area_must_hold_the_map() {
        let geo = nand_model::Geometry {
            channels: 1,
            banks_per_channel: 1,
            blocks_per_bank: 900,
            pages_per_block: 2,
            page_size: 4096,
            oob_size: 64,
        };
        let sb = |lpns| SuperBlock {
            scheme: crate::schemes::SchemeKind::Page,
            lpns,
            ckpt_blocks: 1,
            max_queues: 1,
            overprovision: 0.1,
            log_blocks: 0,
        };
        assert!(sb(100).validate(&geo).is_ok());
        let err = sb(1000).validate(&geo).expect_err("area too small");
        assert!(
            err.contains("ckpt_blocks") && err.contains("needs"),
            "{err}"
        );
    }
}

/// What `inspect` finds in an image without changing it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImageInfo {
    pub path: std::path::PathBuf,
    /// The FTL scheme the image was formatted with.
    pub ftl: crate::schemes::SchemeKind,
    /// Log blocks of a hybrid scheme (0 for `page`).
    pub log_blocks: u32,
    pub nand: nand_model::NandConfig,
    pub capacity_bytes: u64,
    pub logical_pages: u32,
    /// The `overprovision` setting the image was formatted with; `None` for a scheme it does
    /// not apply to ([`crate::SchemeKind::uses_overprovision`]).
    pub overprovision: Option<f64>,
    /// Physical spare: the good blocks outside the superblock and checkpoint areas over the
    /// exported space, minus one (`ftld stats`' `spare_factor`, whatever the scheme).
    pub spare_factor: f64,
    /// See [`SuperBlock::max_queues`].
    pub max_queues: u32,
    /// Id of the newest valid checkpoint.
    pub checkpoint_id: Option<u64>,
    /// A newer checkpoint exists but is corrupt.
    pub checkpoint_corrupt: bool,
    /// Nothing was programmed after the newest checkpoint: the last shutdown was clean.
    pub clean_shutdown: bool,
    /// Pages programmed after the newest checkpoint (what a crash recovery would scan).
    pub pages_after_checkpoint: u64,
    /// Erase counts of the blocks that hold data (every block but the superblock and the
    /// checkpoint areas, bad ones included), as `ftld stats` reports wear.
    pub erase_min: u32,
    pub erase_avg: f64,
    pub erase_max: u32,
    /// The highest erase count in the checkpoint areas (erased once per full checkpoint: they
    /// wear at their own pace; the device turns read-only once either cannot hold a
    /// checkpoint).
    pub checkpoint_erase_max: u32,
    /// A checkpoint area lost so many blocks that it cannot hold a full checkpoint: the device
    /// opens read-only (`Core::checkpoint_areas_worn`).
    pub checkpoint_area_worn: bool,
    /// Bad blocks in the checkpoint areas (left out of their maps while the areas still hold
    /// a checkpoint).
    pub checkpoint_bad_blocks: u32,
    /// Bad blocks of the whole device, reserved ones included.
    pub bad_blocks: u32,
    pub total_blocks: u32,
    /// Good blocks outside the superblock and checkpoint areas.
    pub usable_blocks: u64,
    /// Bad blocks outside the superblock and checkpoint areas. With none, an open whose
    /// settings need more usable blocks than there are is writable, and turns read-only at the
    /// first block that goes bad (`Core`'s open check); with some, it opens read-only.
    pub data_bad_blocks: u64,
    /// The usable blocks the scheme needs with the default serving settings
    /// ([`crate::SchemeKind::blocks_needed`]; the page scheme's need grows with frontiers
    /// `per-queue` and hot/cold separation): fewer, and an open is read-only. `None` where the
    /// scheme cannot run on this device at all.
    pub blocks_needed: Option<u64>,
    /// The settings `blocks_needed` is for: "the default settings" unless
    /// [`ImageInfo::need_with`] set others.
    pub need_settings: String,
}

impl ImageInfo {
    /// Counts [`Self::blocks_needed`] again for the serving settings `cfg` (its `[ftl]`
    /// frontiers, queues and separation; the scheme stays the image's), described as
    /// `settings`.
    pub fn need_with(&mut self, cfg: &crate::FtlConfig, settings: String) {
        // Only the banks and slots per block of the layout count (not its checkpoint rows).
        let layout = Layout::new(&self.nand.geometry, 1);
        let mut cfg = crate::FtlConfig {
            scheme: self.ftl,
            ..cfg.clone()
        };
        crate::clamp_frontier_queues(&mut cfg, self.max_queues);
        self.blocks_needed = self
            .ftl
            .blocks_needed(
                &self.nand,
                &layout,
                self.logical_pages,
                self.log_blocks,
                &cfg,
            )
            .ok();
        self.need_settings = settings;
    }
}

/// Reads an image's superblock, checkpoints and block states without modifying it: opened
/// read-only ([`nand_model::Access::ReadOnly`]) under a shared lock, so it fails with
/// `ImageError::Locked` while a daemon writes the image, and works beside a read-only one.
pub fn inspect(path: &std::path::Path) -> Result<ImageInfo> {
    inspect_with(path, true)
}

/// [`inspect`] without reading the checkpoints: what an image is formatted as (scheme,
/// geometry, capacity, block states), for checking it against options before an open, which
/// reads the checkpoints itself (reading them twice doubled that part of the open, and
/// logged each unusable one twice). Its checkpoint fields are empty (`checkpoint_id` `None`,
/// `clean_shutdown` false).
pub fn inspect_format(path: &std::path::Path) -> Result<ImageInfo> {
    inspect_with(path, false)
}

fn inspect_with(path: &std::path::Path, checkpoints: bool) -> Result<ImageInfo> {
    let nand = NandDevice::open_with(
        path,
        None,
        nand_model::TimingMode::Off,
        nand_model::Access::ReadOnly,
    )?;
    let sb = read_superblock(&nand)?;
    let layout = Layout::new(nand.geometry(), sb.ckpt_blocks);
    let loaded = checkpoints
        // (No faults are armed on an inspection's device: the default retries are moot.)
        .then(|| {
            let count = std::sync::atomic::AtomicU64::new(0);
            let retries = load::Retries {
                max: crate::core::OWN_READ_RETRIES,
                count: &count,
            };
            load_newest(&nand, &layout, retries, &load::Discard(sb.lpns))
        })
        .flatten();
    let (mut emin, mut emax, mut esum, mut bad, mut after) = (u32::MAX, 0u32, 0u64, 0u32, 0u64);
    let (mut data_blocks, mut good_data_blocks, mut ckpt_emax) = (0u64, 0u64, 0u32);
    let mut ckpt_bad = 0u32;
    let ckpt_worn = (0..2).any(|a| {
        let map = AreaMap::of_device(&nand, &layout, a);
        area::worn_out(&nand, &layout, &map, area::full_pages(&layout, sb.lpns)).is_some()
    });
    let total = layout.total_blocks();
    for b in 0..total {
        let addr = layout.block_addr(crate::layout::BlockIdx(b));
        let st = nand.block_state(addr)?;
        if st.bad {
            bad += 1;
        }
        if layout.is_reserved(addr) {
            if addr != layout.superblock() {
                ckpt_emax = ckpt_emax.max(st.erase_count);
                ckpt_bad += u32::from(st.bad);
            }
            continue;
        }
        emin = emin.min(st.erase_count);
        emax = emax.max(st.erase_count);
        esum += st.erase_count as u64;
        data_blocks += 1;
        good_data_blocks += u64::from(!st.bad);
        let from = match loaded.as_ref().and_then(|l| l.snap.blocks.get(b as usize)) {
            Some(&(e, p)) if e == st.erase_count => p,
            _ => 0,
        };
        after += st.programmed_pages.saturating_sub(from) as u64;
    }
    let checkpoint_id = loaded.as_ref().map(|l| l.snap.id);
    let mut info = ImageInfo {
        path: path.to_path_buf(),
        ftl: sb.scheme,
        log_blocks: sb.log_blocks,
        nand: *nand.config(),
        capacity_bytes: sb.lpns as u64 * crate::layout::LOGICAL_PAGE as u64,
        logical_pages: sb.lpns,
        overprovision: sb.scheme.uses_overprovision().then_some(sb.overprovision),
        spare_factor: (good_data_blocks * u64::from(layout.slots_per_block())) as f64
            / f64::from(sb.lpns.max(1))
            - 1.0,
        max_queues: sb.max_queues,
        checkpoint_id,
        checkpoint_corrupt: loaded.as_ref().is_some_and(|l| l.fallback),
        clean_shutdown: checkpoint_id.is_some() && after == 0,
        pages_after_checkpoint: after,
        erase_min: if emin == u32::MAX { 0 } else { emin },
        erase_avg: esum as f64 / data_blocks.max(1) as f64,
        erase_max: emax,
        checkpoint_erase_max: ckpt_emax,
        checkpoint_area_worn: ckpt_worn,
        checkpoint_bad_blocks: ckpt_bad,
        bad_blocks: bad,
        total_blocks: total,
        usable_blocks: good_data_blocks,
        data_bad_blocks: data_blocks - good_data_blocks,
        blocks_needed: None,
        need_settings: String::new(),
    };
    info.need_with(&crate::FtlConfig::default(), "the default settings".into());
    Ok(info)
}
