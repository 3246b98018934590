//! The superblock and checkpoints (LFTL §3.5).
//!
//! The *superblock* (bank 0, block 0, page 0) is written once at format and names the FTL's
//! format parameters. A *checkpoint* is a snapshot of the map and of every block's erase count and
//! programmed-page count, taken at a quiescent moment (host mutations frozen, buffers flushed, GC
//! between steps). It is written to one of two checkpoint areas, alternately, striped over all
//! banks so it is written and read in parallel; every page carries its checkpoint id, index and
//! CRC in the OOB, so a torn or corrupt checkpoint is detected and the other one is used.
//!
//! Payload layout (little-endian): header `magic "FTLDCKPT", version u32, 0 u32, id u64, sc u64,
//! prev_sc u64, lpns u32, blocks u32, trims u32, 0 u32, crc32 of the rest u32, 0 u32`, then the
//! map (`lpns` x u32), then per block `(erase_count u32, programmed_pages u32)`, then the live
//! trim-log slots `(psa u32, seq u64)`.
//!
//! `sc` is the sequence counter at the snapshot: every operation numbered below it is in the
//! snapshot, none at or above it is. `prev_sc` is the older checkpoint's `sc`; trim-log slots
//! newer than it stay live so that falling back to the older checkpoint loses no trim.

use std::sync::atomic::Ordering;

use event_listener::Listener;

use nand_model::{BankId, BlockAddr, Completion, NandDevice, PageAddr};

use crate::core::Core;
use crate::error::{FtlError, Result};
use crate::layout::{Layout, Psa};
use crate::oob::{self, PageOob};

const CKPT_MAGIC: &[u8; 8] = b"FTLDCKPT";
const SUPER_MAGIC: &[u8; 8] = b"FTLDSUPR";
const VERSION: u32 = 1;
const HEADER: usize = 64;
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

/// The map part of a checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub enum MapImage {
    /// Every entry.
    Full(Vec<u32>),
    /// Only the chunks (of `CHUNK` entries) changed since the previous checkpoint.
    Delta(Vec<(u32, Vec<u32>)>),
}

impl MapImage {
    fn entries(&self) -> usize {
        match self {
            MapImage::Full(v) => v.len(),
            MapImage::Delta(c) => c.iter().map(|(_, e)| e.len() + 1).sum(),
        }
    }
}

/// A decoded checkpoint.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub id: u64,
    pub sc: u64,
    pub prev_sc: u64,
    pub lpns: u32,
    pub map: MapImage,
    /// Per global block: (erase count, programmed pages) at the snapshot.
    pub blocks: Vec<(u32, u32)>,
    pub trims: Vec<(Psa, u64)>,
}

impl Snapshot {
    /// The full map (empty for a delta).
    #[cfg(test)]
    pub fn l2p(&self) -> &[u32] {
        match &self.map {
            MapImage::Full(v) => v,
            MapImage::Delta(_) => &[],
        }
    }

    /// Moves the full map out (recovery builds the live map from it without a copy); the
    /// snapshot keeps an empty one.
    pub fn take_l2p(&mut self) -> Vec<u32> {
        match &mut self.map {
            MapImage::Full(v) => std::mem::take(v),
            MapImage::Delta(_) => Vec::new(),
        }
    }

    /// Applies a delta on top of this (full) snapshot; false if it does not fit.
    fn apply(&mut self, delta: Snapshot) -> bool {
        let (MapImage::Full(l2p), MapImage::Delta(chunks)) = (&mut self.map, delta.map) else {
            return false;
        };
        for (c, entries) in chunks {
            let start = (c * CHUNK) as usize;
            match l2p.get_mut(start..start + entries.len()) {
                Some(dst) => dst.copy_from_slice(&entries),
                None => return false,
            }
        }
        self.id = delta.id;
        self.sc = delta.sc;
        self.prev_sc = delta.prev_sc;
        self.blocks = delta.blocks;
        self.trims = delta.trims;
        true
    }
}

/// The FTL's format parameters, from the superblock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SuperBlock {
    /// The FTL scheme the image was formatted with (bytes 32..36; 0, what older images hold
    /// there, is `page`).
    pub scheme: crate::schemes::SchemeKind,
    pub lpns: u32,
    pub ckpt_blocks: u32,
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

fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn get32(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn get64(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Writes the superblock of a freshly created image.
pub fn write_superblock(nand: &NandDevice, layout: &Layout, sb: &SuperBlock) -> Result<()> {
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
    let addr = PageAddr {
        block: layout.superblock(),
        page: 0,
    };
    nand.program(addr, &data, &oob_buf)?.wait();
    Ok(())
}

/// Reads the superblock; the error says why the image is not a usable FTL image.
pub fn read_superblock(nand: &NandDevice) -> Result<SuperBlock> {
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
    nand.read(addr, 0, &mut data, Some(&mut oob_buf))?.wait();
    match oob::decode(&oob_buf) {
        Some(PageOob::Superblock { crc }) if crc == crc32fast::hash(&data) => {}
        _ => return Err(fail("no FTL superblock (the NAND image was never formatted by ftld, or its superblock is corrupt)")),
    }
    SuperBlock::decode(&data, geo).map_err(|e| fail(&e))
}

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
        // A hybrid scheme maps whole blocks: the data blocks, the log blocks and a free block
        // per bank for merges must fit in the usable blocks.
        if self.scheme.has_log_blocks() {
            let lbns = u64::from(self.lpns).div_ceil(u64::from(layout.slots_per_block()));
            let usable =
                u64::from(layout.total_blocks()) - 1 - 2 * banks * u64::from(self.ckpt_blocks);
            let need = lbns + u64::from(self.log_blocks) + 2 * banks + 2;
            if need > usable {
                return bad(
                    "lpns",
                    self.lpns.to_string(),
                    format!(
                        "{lbns} data blocks, {} log blocks and {} spare need {need} blocks, the device has {usable}",
                        self.log_blocks,
                        2 * banks + 2
                    ),
                );
            }
        }
        Ok(())
    }
}

fn encode(s: &Snapshot) -> Vec<u8> {
    let (kind, chunks) = match &s.map {
        MapImage::Full(_) => (0u32, 0u32),
        MapImage::Delta(c) => (1, c.len() as u32),
    };
    let mut body =
        Vec::with_capacity(s.map.entries() * 4 + s.blocks.len() * 8 + s.trims.len() * 12);
    match &s.map {
        MapImage::Full(l2p) => l2p.iter().for_each(|v| put32(&mut body, *v)),
        MapImage::Delta(chunks) => {
            for (c, entries) in chunks {
                put32(&mut body, *c);
                entries.iter().for_each(|v| put32(&mut body, *v));
            }
        }
    }
    for (e, p) in &s.blocks {
        put32(&mut body, *e);
        put32(&mut body, *p);
    }
    for (psa, seq) in &s.trims {
        put32(&mut body, psa.0);
        put64(&mut body, *seq);
    }
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(CKPT_MAGIC);
    put32(&mut out, VERSION);
    put32(&mut out, kind);
    put64(&mut out, s.id);
    put64(&mut out, s.sc);
    put64(&mut out, s.prev_sc);
    put32(&mut out, s.lpns);
    put32(&mut out, s.blocks.len() as u32);
    put32(&mut out, s.trims.len() as u32);
    put32(&mut out, chunks);
    put32(&mut out, crc32fast::hash(&body));
    put32(&mut out, body.len() as u32);
    out.resize(HEADER, 0);
    out.extend_from_slice(&body);
    out
}

pub(crate) fn decode(b: &[u8]) -> std::result::Result<Snapshot, String> {
    if b.len() < HEADER || &b[0..8] != CKPT_MAGIC {
        return Err("bad checkpoint magic".into());
    }
    let h = |o| get32(b, o).ok_or("short header");
    if h(8)? != VERSION {
        return Err("unsupported checkpoint version".into());
    }
    let kind = h(12)?;
    let id = get64(b, 16).ok_or("short header")?;
    let sc = get64(b, 24).ok_or("short header")?;
    let prev_sc = get64(b, 32).ok_or("short header")?;
    if sc >= 1 << 62 || prev_sc > sc {
        return Err(format!(
            "checkpoint sequence numbers out of range (sc {sc}, prev_sc {prev_sc})"
        ));
    }
    let (lpns, blocks, trims, chunks, crc, len) = (
        h(40)? as usize,
        h(44)? as usize,
        h(48)? as usize,
        h(52)? as usize,
        h(56)?,
        h(60)? as usize,
    );
    let body = b
        .get(HEADER..HEADER + len)
        .ok_or("checkpoint shorter than its header says")?;
    if crc32fast::hash(body) != crc {
        return Err("checkpoint payload checksum mismatch".into());
    }
    // Counts are bounded by the body before anything is sized by them (a hostile count with
    // a valid CRC must not allocate: found by the `checkpoint` fuzz target).
    let fits = |count: usize, size: usize| count.checked_mul(size).is_some_and(|n| n <= len);
    if !fits(chunks, 4) || !fits(blocks, 8) || !fits(trims, 12) || (kind == 0 && !fits(lpns, 4)) {
        return Err(format!(
            "checkpoint counts exceed its {len}-byte body (lpns {lpns}, chunks {chunks}, \
             blocks {blocks}, trims {trims})"
        ));
    }
    let word = |o: usize| get32(body, o).ok_or("checkpoint body too short");
    let mut o = 0;
    let map = match kind {
        0 => {
            let l2p = (0..lpns)
                .map(|i| word(i * 4))
                .collect::<std::result::Result<_, _>>()?;
            o = lpns * 4;
            MapImage::Full(l2p)
        }
        1 => {
            let mut v = Vec::with_capacity(chunks);
            for _ in 0..chunks {
                let c = word(o)?;
                let n = chunk_len(c, lpns as u32).ok_or("delta chunk out of range")?;
                let entries = (0..n as usize)
                    .map(|i| word(o + 4 + i * 4))
                    .collect::<std::result::Result<_, _>>()?;
                o += 4 + n as usize * 4;
                v.push((c, entries));
            }
            MapImage::Delta(v)
        }
        k => return Err(format!("unknown checkpoint kind {k}")),
    };
    let blocks = (0..blocks)
        .map(|i| Ok((word(o + i * 8)?, word(o + i * 8 + 4)?)))
        .collect::<std::result::Result<Vec<_>, &str>>()?;
    let o = o + blocks.len() * 8;
    let trims = (0..trims)
        .map(|i| {
            Ok((
                Psa(word(o + i * 12)?),
                get64(body, o + i * 12 + 4).ok_or("checkpoint body too short")?,
            ))
        })
        .collect::<std::result::Result<Vec<_>, &str>>()?;
    Ok(Snapshot {
        id,
        sc,
        prev_sc,
        lpns: lpns as u32,
        map,
        blocks,
        trims,
    })
}

/// Entries in map chunk `c` of a `lpns`-entry map (the last chunk may be short).
fn chunk_len(c: u32, lpns: u32) -> Option<u32> {
    let start = c.checked_mul(CHUNK)?;
    (start < lpns).then(|| (lpns - start).min(CHUNK))
}

/// Reads the header OOB of the checkpoint starting at page `offset` of `area`.
fn header_at(nand: &NandDevice, layout: &Layout, area: u32, offset: u64) -> Option<(u64, u32)> {
    if offset >= layout.ckpt_area_pages() {
        return None;
    }
    let mut oob_buf = vec![0u8; layout.oob_size as usize];
    let c = nand
        .read(
            layout.ckpt_page(area, offset),
            0,
            &mut [],
            Some(&mut oob_buf),
        )
        .ok()?;
    c.wait();
    match oob::decode(&oob_buf)? {
        PageOob::Checkpoint {
            id,
            index: 0,
            count,
            ..
        } => Some((id, count)),
        _ => None,
    }
}

/// Loads the checkpoint starting at page `offset` of `area`, reading its pages bank-parallel
/// (page `i` of an area lives on bank `i % banks`) and checking every CRC. Returns it with its
/// page count.
fn load_at(
    nand: &NandDevice,
    layout: &Layout,
    area: u32,
    offset: u64,
) -> std::result::Result<(Snapshot, u64), String> {
    let (id, count) = header_at(nand, layout, area, offset).ok_or("no checkpoint header")?;
    if count == 0 || offset + count as u64 > layout.ckpt_area_pages() {
        return Err(format!("checkpoint claims {count} pages"));
    }
    let ps = layout.page_size as usize;
    let mut bytes = vec![0u8; count as usize * ps];
    let banks = layout.banks as u64;
    let mut errors = Vec::new();
    std::thread::scope(|s| {
        let mut per_bank: Vec<Vec<(u64, &mut [u8])>> = (0..banks).map(|_| Vec::new()).collect();
        for (i, chunk) in bytes.chunks_mut(ps).enumerate() {
            let page = offset + i as u64;
            per_bank[(page % banks) as usize].push((i as u64, chunk));
        }
        let handles: Vec<_> = per_bank
            .into_iter()
            .map(|pages| {
                s.spawn(move || -> std::result::Result<(), String> {
                    let mut oob_buf = vec![0u8; layout.oob_size as usize];
                    for (i, chunk) in pages {
                        let addr = layout.ckpt_page(area, offset + i);
                        nand.read(addr, 0, chunk, Some(&mut oob_buf))
                            .map_err(|e| e.to_string())?
                            .wait();
                        match oob::decode(&oob_buf) {
                            Some(PageOob::Checkpoint {
                                id: pid,
                                index,
                                count: c,
                                crc,
                            }) if pid == id
                                && index as u64 == i
                                && c == count
                                && crc == crc32fast::hash(chunk) => {}
                            _ => {
                                return Err(format!(
                                    "checkpoint {id} page {i} is missing or corrupt"
                                ))
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push("checkpoint reader panicked".into()),
            }
        }
    });
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let snap = decode(&bytes)?;
    if snap.id != id {
        return Err("checkpoint id mismatch".into());
    }
    Ok((snap, count as u64))
}

/// A checkpoint chain loaded from one area: its full checkpoint with every valid delta applied.
pub struct Loaded {
    /// The state as of the chain's last valid element (`map` is `Full`).
    pub snap: Snapshot,
    pub area: u32,
    /// First free page of the area after the chain.
    pub next_offset: u64,
    /// Checkpoints in the chain (1 = just the full one).
    pub chain_len: u32,
    /// A newer checkpoint (another area's full one, or a delta of this chain) was corrupt.
    pub fallback: bool,
}

/// Loads the chain of `area`: its full checkpoint, then the deltas appended after it.
fn load_chain(
    nand: &NandDevice,
    layout: &Layout,
    area: u32,
) -> std::result::Result<Loaded, String> {
    let (mut snap, count) = load_at(nand, layout, area, 0)?;
    if !matches!(snap.map, MapImage::Full(_)) {
        return Err("chain does not start with a full checkpoint".into());
    }
    let mut next = count;
    let mut chain_len = 1;
    let mut fallback = false;
    while let Some((id, _)) = header_at(nand, layout, area, next) {
        if id <= snap.id {
            break;
        }
        match load_at(nand, layout, area, next) {
            Ok((delta, count)) => {
                if delta.lpns != snap.lpns || !snap.apply(delta) {
                    fallback = true;
                    break;
                }
                next += count;
                chain_len += 1;
            }
            Err(e) => {
                tracing::warn!("checkpoint area {area}: delta {id} unusable: {e}");
                fallback = true;
                break;
            }
        }
    }
    Ok(Loaded {
        snap,
        area,
        next_offset: next,
        chain_len,
        fallback,
    })
}

/// Finds the newest usable checkpoint: the chain of the area whose full checkpoint is newest,
/// else the other area's chain (a fallback).
pub fn load_newest(nand: &NandDevice, layout: &Layout) -> Option<Loaded> {
    let mut areas: Vec<(u64, u32)> = (0..2)
        .filter_map(|a| header_at(nand, layout, a, 0).map(|(id, _)| (id, a)))
        .collect();
    areas.sort_by(|a, b| b.cmp(a));
    let mut skipped = false;
    for (_, area) in areas {
        match load_chain(nand, layout, area) {
            Ok(mut l) => {
                l.fallback |= skipped;
                return Some(l);
            }
            Err(e) => {
                tracing::warn!("checkpoint area {area} unusable: {e}");
                skipped = true;
            }
        }
    }
    None
}

impl Core {
    /// Takes and writes a checkpoint. Host mutations are frozen only for the flush and the
    /// snapshot copy, not while the checkpoint pages are programmed.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        let _one = self.ckpt_lock.lock();
        let frozen = self.gate.freeze();
        self.flush_all_blocking();
        let st = self.ckpt.lock().clone();
        // A delta (only the map chunks changed since the last checkpoint) when the current
        // chain is trustworthy and short and the delta is small; else a full checkpoint.
        let full = st.force_full
            || st.last_area.is_none()
            || st.chain_len >= MAX_CHAIN
            || self.scheme.prefers_full_checkpoint();
        let snap = {
            let _gc = self.gc_gate.write();
            let mut blocks = Vec::with_capacity(self.layout.total_blocks() as usize);
            for b in 0..self.layout.total_blocks() {
                let addr = self.layout.block_addr(crate::layout::BlockIdx(b));
                let s = self.nand.block_state(addr)?;
                blocks.push((s.erase_count, s.programmed_pages));
            }
            let payload = self.scheme.checkpoint_payload(full);
            Snapshot {
                id: st.last_id + 1,
                sc: self.current_seq(),
                prev_sc: st.last_sc,
                lpns: self.lpns,
                map: payload.map,
                blocks,
                trims: payload.trims,
            }
        };
        drop(frozen);
        self.counters
            .bytes_since_checkpoint
            .store(0, Ordering::Relaxed);
        let bytes = encode(&snap);
        let pages = bytes.len().div_ceil(self.layout.page_size as usize) as u64;
        let (area, offset) = match st.last_area {
            Some(a) if !full && st.next_offset + pages <= self.layout.ckpt_area_pages() => {
                (a, st.next_offset)
            }
            // A checkpoint area with a bad block is not remapped: write over the other one then
            // (a crash during that write leaves no checkpoint, and recovery does a full scan).
            Some(a) if self.area_has_bad_block(1 - a) => (a, 0),
            Some(a) => (1 - a, 0),
            None => (0, 0),
        };
        let written = if offset == 0 && !full {
            // The chain's area is full: this delta cannot start a chain. Take a full one.
            Err(FtlError::Internal("checkpoint area full".into()))
        } else {
            self.write_area(area, offset, snap.id, &bytes)
        };
        if let Err(e) = written {
            self.counters
                .checkpoint_failures
                .fetch_add(1, Ordering::Relaxed);
            // The dirty chunks taken for this checkpoint are lost: the next one must be full.
            self.ckpt.lock().force_full = true;
            if !full && offset == 0 {
                drop(_one);
                return self.checkpoint();
            }
            return Err(e);
        }
        *self.ckpt.lock() = CkptState {
            last_id: snap.id,
            last_area: Some(area),
            last_sc: snap.sc,
            next_offset: offset + pages,
            chain_len: if full { 1 } else { st.chain_len + 1 },
            force_full: false,
        };
        // Trim records older than both checkpoints are no longer needed by any recovery path.
        self.scheme.checkpoint_written(snap.prev_sc);
        self.scheme.after_checkpoint(self);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        if !full {
            self.counters
                .checkpoint_deltas
                .fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(
            "checkpoint {} ({}) written to area {area} at page {offset}",
            snap.id,
            if full { "full" } else { "delta" }
        );
        Ok(())
    }

    fn area_has_bad_block(&self, area: u32) -> bool {
        (0..self.layout.banks).any(|bank| {
            self.layout.ckpt_area_blocks(area).any(|block| {
                self.nand
                    .block_state(BlockAddr {
                        bank: BankId(bank),
                        block,
                    })
                    .map_or(true, |s| s.bad)
            })
        })
    }

    /// Programs an encoded checkpoint at page `offset` of `area`; a full checkpoint (offset 0)
    /// erases the area first, a delta goes on the still-erased pages after the chain.
    fn write_area(&self, area: u32, offset: u64, id: u64, bytes: &[u8]) -> Result<()> {
        let layout = &self.layout;
        let ps = layout.page_size as usize;
        let count = bytes.len().div_ceil(ps) as u64;
        if offset + count > layout.ckpt_area_pages() {
            return Err(FtlError::Internal(format!(
                "checkpoint needs {count} pages at page {offset}, the area has {}",
                layout.ckpt_area_pages()
            )));
        }
        let mut pending: Vec<Completion> = Vec::new();
        if offset == 0 {
            // Erase the area's blocks on all banks (in parallel: the model overlaps them).
            for bank in 0..layout.banks {
                for block in layout.ckpt_area_blocks(area) {
                    let addr = BlockAddr {
                        bank: BankId(bank),
                        block,
                    };
                    let state = self.nand.block_state(addr)?;
                    if state.bad {
                        return Err(FtlError::Internal(format!(
                            "checkpoint area {area} has a bad block ({addr:?})"
                        )));
                    }
                    if state.programmed_pages > 0 {
                        pending.push(self.nand.erase(addr)?);
                    }
                }
            }
            pending.drain(..).for_each(Completion::wait);
        }
        let mut page = vec![0u8; ps];
        let mut oob_buf = vec![0u8; layout.oob_size as usize];
        for i in 0..count {
            let chunk = &bytes[i as usize * ps..((i as usize + 1) * ps).min(bytes.len())];
            page[..chunk.len()].copy_from_slice(chunk);
            page[chunk.len()..].fill(0);
            oob::encode_checkpoint(
                &mut oob_buf,
                id,
                i as u32,
                count as u32,
                crc32fast::hash(&page),
            );
            pending.push(
                self.nand
                    .program(layout.ckpt_page(area, offset + i), &page, &oob_buf)?,
            );
            // Keep the number of outstanding completions bounded.
            if pending.len() >= 4 * layout.banks as usize {
                pending
                    .drain(..layout.banks as usize)
                    .for_each(Completion::wait);
            }
        }
        pending.drain(..).for_each(Completion::wait);
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

    /// Whether someone asked for work before the next tick (GC waits for trim records, a
    /// scheme wants a checkpoint).
    pub(crate) fn requested(core: &Core) -> bool {
        core.flush_requested.load(Ordering::Acquire)
            || core.checkpoint_requested.load(Ordering::Acquire)
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
        let gc_waiting = core.flush_requested.swap(false, Ordering::AcqRel);
        if gc_waiting || core.trims_pending.swap(false, Ordering::AcqRel) {
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
        if !core.flush_requested.load(Ordering::Acquire) {
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

    /// Counts in a checkpoint header that its body cannot hold are refused before anything is
    /// sized by them (the `checkpoint` fuzz target found a 64 GiB allocation here).
    #[test]
    fn checkpoint_counts_are_bounded_by_the_body() {
        let snap = Snapshot {
            id: 1,
            sc: 10,
            prev_sc: 5,
            lpns: 8,
            map: MapImage::Delta(vec![(0, vec![1, 2, 3, 4, 5, 6, 7, 8])]),
            blocks: vec![(1, 2)],
            trims: vec![(Psa(3), 4)],
        };
        let good = encode(&snap);
        assert!(decode(&good).is_ok());
        for (offset, value) in [
            (52, u32::MAX),
            (44, u32::MAX),
            (48, 1 << 30),
            (40, u32::MAX),
        ] {
            let mut bad = good.clone();
            bad[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
            assert!(
                decode(&bad).is_err(),
                "field at {offset} = {value} accepted"
            );
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

    #[test]
    fn snapshot_roundtrip() {
        let s = Snapshot {
            id: 4,
            sc: 99,
            prev_sc: 50,
            lpns: 3,
            map: MapImage::Full(vec![1, u32::MAX, 7]),
            blocks: vec![(1, 2), (3, 4)],
            trims: vec![(Psa(9), 77)],
        };
        let b = encode(&s);
        let d = decode(&b).expect("decodes");
        assert_eq!((d.id, d.sc, d.prev_sc), (4, 99, 50));
        assert_eq!(d.map, s.map);
        assert_eq!(d.blocks, s.blocks);
        assert_eq!(d.trims, s.trims);
        let mut bad = b.clone();
        bad[HEADER + 1] ^= 1;
        assert!(decode(&bad).is_err());
    }

    #[test]
    fn delta_applies_on_full() {
        let lpns = CHUNK * 2 + 10;
        let mut full = Snapshot {
            id: 1,
            sc: 10,
            prev_sc: 0,
            lpns,
            map: MapImage::Full(vec![0; lpns as usize]),
            blocks: vec![(0, 0)],
            trims: vec![],
        };
        let delta = Snapshot {
            id: 2,
            sc: 20,
            prev_sc: 10,
            lpns,
            map: MapImage::Delta(vec![(2, vec![5; 10])]),
            blocks: vec![(1, 3)],
            trims: vec![(Psa(1), 15)],
        };
        let delta = decode(&encode(&delta)).expect("delta decodes");
        assert!(full.apply(delta));
        assert_eq!((full.id, full.sc, full.prev_sc), (2, 20, 10));
        assert_eq!(&full.l2p()[2 * CHUNK as usize..], &[5; 10]);
        assert_eq!(full.l2p()[0], 0);
        assert_eq!(full.blocks, vec![(1, 3)]);
        // A chunk past the end is refused.
        let bad = Snapshot {
            id: 3,
            sc: 30,
            prev_sc: 20,
            lpns,
            map: MapImage::Delta(vec![(3, vec![1; 4])]),
            blocks: vec![],
            trims: vec![],
        };
        assert!(decode(&encode(&bad)).is_err());
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
    pub overprovision: f64,
    pub max_queues: u32,
    /// Id of the newest valid checkpoint.
    pub checkpoint_id: Option<u64>,
    /// A newer checkpoint exists but is corrupt.
    pub checkpoint_corrupt: bool,
    /// Nothing was programmed after the newest checkpoint: the last shutdown was clean.
    pub clean_shutdown: bool,
    /// Pages programmed after the newest checkpoint (what a crash recovery would scan).
    pub pages_after_checkpoint: u64,
    pub erase_min: u32,
    pub erase_avg: f64,
    pub erase_max: u32,
    pub bad_blocks: u32,
    pub total_blocks: u32,
}

/// Reads an image's superblock, checkpoints and block states without modifying it (the image
/// is locked while it is read, so this fails with `ImageError::Locked` while a daemon uses it).
pub fn inspect(path: &std::path::Path) -> Result<ImageInfo> {
    let nand = NandDevice::open(path, None, nand_model::TimingMode::Off)?;
    let sb = read_superblock(&nand)?;
    let layout = Layout::new(nand.geometry(), sb.ckpt_blocks);
    let loaded = load_newest(&nand, &layout);
    let (mut emin, mut emax, mut esum, mut bad, mut after) = (u32::MAX, 0u32, 0u64, 0u32, 0u64);
    let total = layout.total_blocks();
    for b in 0..total {
        let addr = layout.block_addr(crate::layout::BlockIdx(b));
        let st = nand.block_state(addr)?;
        emin = emin.min(st.erase_count);
        emax = emax.max(st.erase_count);
        esum += st.erase_count as u64;
        if st.bad {
            bad += 1;
        }
        if layout.is_reserved(addr) {
            continue;
        }
        let from = match loaded.as_ref().and_then(|l| l.snap.blocks.get(b as usize)) {
            Some(&(e, p)) if e == st.erase_count => p,
            _ => 0,
        };
        after += st.programmed_pages.saturating_sub(from) as u64;
    }
    let checkpoint_id = loaded.as_ref().map(|l| l.snap.id);
    Ok(ImageInfo {
        path: path.to_path_buf(),
        ftl: sb.scheme,
        log_blocks: sb.log_blocks,
        nand: *nand.config(),
        capacity_bytes: sb.lpns as u64 * crate::layout::LOGICAL_PAGE as u64,
        logical_pages: sb.lpns,
        overprovision: sb.overprovision,
        max_queues: sb.max_queues,
        checkpoint_id,
        checkpoint_corrupt: loaded.as_ref().is_some_and(|l| l.fallback),
        clean_shutdown: checkpoint_id.is_some() && after == 0,
        pages_after_checkpoint: after,
        erase_min: if emin == u32::MAX { 0 } else { emin },
        erase_avg: esum as f64 / total.max(1) as f64,
        erase_max: emax,
        bad_blocks: bad,
        total_blocks: total,
    })
}
