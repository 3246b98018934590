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

/// Which checkpoint is newest (the next one goes to the other area).
#[derive(Clone, Debug, Default)]
pub struct CkptState {
    pub last_id: u64,
    pub last_area: Option<u32>,
    pub last_sc: u64,
}

/// A decoded checkpoint.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub id: u64,
    pub sc: u64,
    pub prev_sc: u64,
    pub l2p: Vec<u32>,
    /// Per global block: (erase count, programmed pages) at the snapshot.
    pub blocks: Vec<(u32, u32)>,
    pub trims: Vec<(Psa, u64)>,
}

/// The FTL's format parameters, from the superblock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SuperBlock {
    pub lpns: u32,
    pub ckpt_blocks: u32,
    pub max_queues: u32,
    pub overprovision: f64,
}

/// Checkpoint bytes for a device of `lpns` pages over `layout` (with room for trim-log slots).
pub fn checkpoint_bytes(lpns: u64, total_blocks: u64) -> u64 {
    HEADER as u64 + lpns * 4 + total_blocks * 8 + 64 * 1024
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
    if &data[0..8] != SUPER_MAGIC {
        return Err(fail("superblock magic mismatch"));
    }
    let version = get32(&data, 8).unwrap_or(0);
    if version != VERSION {
        return Err(fail(&format!(
            "FTL format version {version} is not supported (this build reads version {VERSION})"
        )));
    }
    Ok(SuperBlock {
        lpns: get32(&data, 12).unwrap_or(0),
        ckpt_blocks: get32(&data, 16).unwrap_or(0),
        max_queues: get32(&data, 20).unwrap_or(1),
        overprovision: f64::from_bits(get64(&data, 24).unwrap_or(0)),
    })
}

fn encode(s: &Snapshot) -> Vec<u8> {
    let mut body = Vec::with_capacity(s.l2p.len() * 4 + s.blocks.len() * 8 + s.trims.len() * 12);
    for v in &s.l2p {
        put32(&mut body, *v);
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
    put32(&mut out, 0);
    put64(&mut out, s.id);
    put64(&mut out, s.sc);
    put64(&mut out, s.prev_sc);
    put32(&mut out, s.l2p.len() as u32);
    put32(&mut out, s.blocks.len() as u32);
    put32(&mut out, s.trims.len() as u32);
    put32(&mut out, 0);
    put32(&mut out, crc32fast::hash(&body));
    put32(&mut out, 0);
    out.resize(HEADER, 0);
    out.extend_from_slice(&body);
    out
}

fn decode(b: &[u8]) -> std::result::Result<Snapshot, String> {
    if b.len() < HEADER || &b[0..8] != CKPT_MAGIC {
        return Err("bad checkpoint magic".into());
    }
    let h = |o| get32(b, o).ok_or("short header");
    if h(8)? != VERSION {
        return Err("unsupported checkpoint version".into());
    }
    let id = get64(b, 16).ok_or("short header")?;
    let sc = get64(b, 24).ok_or("short header")?;
    let prev_sc = get64(b, 32).ok_or("short header")?;
    let (lpns, blocks, trims, crc) = (h(40)? as usize, h(44)? as usize, h(48)? as usize, h(56)?);
    let len = lpns * 4 + blocks * 8 + trims * 12;
    let body = b
        .get(HEADER..HEADER + len)
        .ok_or("checkpoint shorter than its header says")?;
    if crc32fast::hash(body) != crc {
        return Err("checkpoint payload checksum mismatch".into());
    }
    let l2p = (0..lpns)
        .map(|i| get32(body, i * 4).unwrap_or(u32::MAX))
        .collect();
    let o = lpns * 4;
    let blocks = (0..blocks)
        .map(|i| {
            (
                get32(body, o + i * 8).unwrap_or(0),
                get32(body, o + i * 8 + 4).unwrap_or(0),
            )
        })
        .collect::<Vec<_>>();
    let o = o + blocks.len() * 8;
    let trims = (0..trims)
        .map(|i| {
            (
                Psa(get32(body, o + i * 12).unwrap_or(u32::MAX)),
                get64(body, o + i * 12 + 4).unwrap_or(0),
            )
        })
        .collect();
    Ok(Snapshot {
        id,
        sc,
        prev_sc,
        l2p,
        blocks,
        trims,
    })
}

/// Reads the id of the checkpoint in `area`, from its first page's OOB.
fn area_id(nand: &NandDevice, layout: &Layout, area: u32) -> Option<(u64, u32)> {
    let mut oob_buf = vec![0u8; layout.oob_size as usize];
    let c = nand
        .read(layout.ckpt_page(area, 0), 0, &mut [], Some(&mut oob_buf))
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

/// Loads the checkpoint in `area`, reading its pages bank-parallel and checking every CRC.
fn load_area(
    nand: &NandDevice,
    layout: &Layout,
    area: u32,
) -> std::result::Result<Snapshot, String> {
    let (id, count) = area_id(nand, layout, area).ok_or("no checkpoint header")?;
    if count as u64 > layout.ckpt_area_pages() || count == 0 {
        return Err(format!("checkpoint claims {count} pages"));
    }
    let ps = layout.page_size as usize;
    let mut bytes = vec![0u8; count as usize * ps];
    let banks = layout.banks as usize;
    let mut errors = Vec::new();
    std::thread::scope(|s| {
        // Page i lives on bank i % banks: each bank's thread reads its own pages.
        let mut per_bank: Vec<Vec<(usize, &mut [u8])>> = (0..banks).map(|_| Vec::new()).collect();
        for (i, chunk) in bytes.chunks_mut(ps).enumerate() {
            per_bank[i % banks].push((i, chunk));
        }
        let handles: Vec<_> = per_bank
            .into_iter()
            .map(|pages| {
                s.spawn(move || -> std::result::Result<(), String> {
                    let mut oob_buf = vec![0u8; layout.oob_size as usize];
                    for (i, chunk) in pages {
                        let addr = layout.ckpt_page(area, i as u64);
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
                                && index == i as u32
                                && c == count
                                && crc == crc32fast::hash(chunk) => {}
                            _ => return Err(format!("checkpoint page {i} is missing or corrupt")),
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
    Ok(snap)
}

/// Finds the checkpoints (newest first) and loads the newest valid one. Returns it with its area
/// and whether a newer one had to be skipped as corrupt.
pub fn load_newest(nand: &NandDevice, layout: &Layout) -> Option<(Snapshot, u32, bool)> {
    let mut areas: Vec<(u64, u32)> = (0..2)
        .filter_map(|a| area_id(nand, layout, a).map(|(id, _)| (id, a)))
        .collect();
    areas.sort_by(|a, b| b.cmp(a));
    let mut skipped = false;
    for (_, area) in areas {
        match load_area(nand, layout, area) {
            Ok(s) => return Some((s, area, skipped)),
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
        self.gate.freeze();
        self.flush_all_blocking();
        let snap = {
            let _gc = self.gc_gate.write();
            let st = self.ckpt.lock().clone();
            let mut blocks = Vec::with_capacity(self.layout.total_blocks() as usize);
            for b in 0..self.layout.total_blocks() {
                let addr = self.layout.block_addr(crate::layout::BlockIdx(b));
                let s = self.nand.block_state(addr)?;
                blocks.push((s.erase_count, s.programmed_pages));
            }
            Snapshot {
                id: st.last_id + 1,
                sc: self.current_seq(),
                prev_sc: st.last_sc,
                l2p: self.map.snapshot(),
                blocks,
                trims: self.trim_log.lock().clone(),
            }
        };
        self.gate.thaw();
        self.counters
            .bytes_since_checkpoint
            .store(0, Ordering::Relaxed);
        let area = match self.ckpt.lock().last_area {
            // A checkpoint area with a bad block is not remapped: write over the other one then
            // (a crash during that write leaves no checkpoint, and recovery does a full scan).
            Some(a) if self.area_has_bad_block(1 - a) => a,
            Some(a) => 1 - a,
            None => 0,
        };
        if let Err(e) = self.write_area(area, &snap) {
            self.counters
                .checkpoint_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        *self.ckpt.lock() = CkptState {
            last_id: snap.id,
            last_area: Some(area),
            last_sc: snap.sc,
        };
        // Trim records older than both checkpoints are no longer needed by any recovery path.
        let mut tl = self.trim_log.lock();
        tl.retain(|(psa, seq)| {
            let keep = *seq >= snap.prev_sc;
            if !keep {
                self.blocks.clear_valid(*psa);
            }
            keep
        });
        drop(tl);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("checkpoint {} written to area {area}", snap.id);
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

    fn write_area(&self, area: u32, snap: &Snapshot) -> Result<()> {
        let layout = &self.layout;
        let bytes = encode(snap);
        let ps = layout.page_size as usize;
        let count = bytes.len().div_ceil(ps) as u64;
        if count > layout.ckpt_area_pages() {
            return Err(FtlError::Internal(format!(
                "checkpoint needs {count} pages, the area has {}",
                layout.ckpt_area_pages()
            )));
        }
        // Erase the area's blocks on all banks (in parallel: the model overlaps them).
        let mut pending: Vec<Completion> = Vec::new();
        for bank in 0..layout.banks {
            for block in layout.ckpt_area_blocks(area) {
                let addr = BlockAddr {
                    bank: BankId(bank),
                    block,
                };
                let state = self.nand.block_state(addr)?;
                if state.bad {
                    return Err(FtlError::Internal(format!(
                        "checkpoint area {area} has a bad block ({addr:?}); using the other area only"
                    )));
                }
                if state.programmed_pages > 0 {
                    pending.push(self.nand.erase(addr)?);
                }
            }
        }
        pending.drain(..).for_each(Completion::wait);
        let mut page = vec![0u8; ps];
        let mut oob_buf = vec![0u8; layout.oob_size as usize];
        for i in 0..count {
            let chunk = &bytes[i as usize * ps..((i as usize + 1) * ps).min(bytes.len())];
            page[..chunk.len()].copy_from_slice(chunk);
            page[chunk.len()..].fill(0);
            oob::encode_checkpoint(
                &mut oob_buf,
                snap.id,
                i as u32,
                count as u32,
                crc32fast::hash(&page),
            );
            pending.push(
                self.nand
                    .program(layout.ckpt_page(area, i), &page, &oob_buf)?,
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

/// Background maintenance: periodic checkpoints and the adaptive GC gauge.
pub fn maintenance(core: std::sync::Arc<Core>) {
    let workers = core.cfg.gc_threads.max(1);
    while !core.stopping.load(Ordering::Acquire) {
        let l = core.wake.listen();
        if core.stopping.load(Ordering::Acquire) {
            break;
        }
        l.wait_timeout(std::time::Duration::from_millis(100));
        if core.stopping.load(Ordering::Acquire) {
            break;
        }
        core.update_gc_allowance(workers);
        let interval = core.cfg.checkpoint_interval_bytes;
        if interval > 0
            && core.counters.bytes_since_checkpoint.load(Ordering::Relaxed) >= interval
            && core.read_only_reason().is_none()
        {
            if let Err(e) = core.checkpoint() {
                tracing::warn!("periodic checkpoint failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_roundtrip() {
        let s = Snapshot {
            id: 4,
            sc: 99,
            prev_sc: 50,
            l2p: vec![1, u32::MAX, 7],
            blocks: vec![(1, 2), (3, 4)],
            trims: vec![(Psa(9), 77)],
        };
        let b = encode(&s);
        let d = decode(&b).expect("decodes");
        assert_eq!((d.id, d.sc, d.prev_sc), (4, 99, 50));
        assert_eq!(d.l2p, s.l2p);
        assert_eq!(d.blocks, s.blocks);
        assert_eq!(d.trims, s.trims);
        let mut bad = b.clone();
        bad[HEADER + 1] ^= 1;
        assert!(decode(&bad).is_err());
    }
}

/// What `inspect` finds in an image without changing it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImageInfo {
    pub path: std::path::PathBuf,
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
    let newest_id = (0..2)
        .filter_map(|a| area_id(&nand, &layout, a))
        .map(|(id, _)| id)
        .max();
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
        let from = match loaded
            .as_ref()
            .and_then(|(s, _, _)| s.blocks.get(b as usize))
        {
            Some(&(e, p)) if e == st.erase_count => p,
            _ => 0,
        };
        after += st.programmed_pages.saturating_sub(from) as u64;
    }
    let checkpoint_id = loaded.as_ref().map(|(s, _, _)| s.id);
    Ok(ImageInfo {
        path: path.to_path_buf(),
        nand: *nand.config(),
        capacity_bytes: sb.lpns as u64 * crate::layout::LOGICAL_PAGE as u64,
        logical_pages: sb.lpns,
        overprovision: sb.overprovision,
        max_queues: sb.max_queues,
        checkpoint_id,
        checkpoint_corrupt: newest_id.is_some() && newest_id != checkpoint_id,
        clean_shutdown: checkpoint_id.is_some() && after == 0,
        pages_after_checkpoint: after,
        erase_min: if emin == u32::MAX { 0 } else { emin },
        erase_avg: esum as f64 / total.max(1) as f64,
        erase_max: emax,
        bad_blocks: bad,
        total_blocks: total,
    })
}
