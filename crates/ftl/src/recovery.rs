//! Rebuilding the FTL's RAM state when an image is opened.
//!
//! Start from the newest valid checkpoint (map + per-block erase/programmed counts at a quiescent
//! moment numbered `sc`), then scan, bank-parallel, the OOB of every page programmed since:
//! pages past the checkpoint's programmed count in blocks not erased since, and all pages of
//! blocks erased since. Without a checkpoint every programmed page is scanned.
//!
//! Resolution per logical page ("highest sequence number wins"):
//! - a data slot or trim record numbered `>= sc` was written after the checkpoint: the highest
//!   such number wins over the checkpoint's entry;
//! - a data slot numbered `< sc` in a scanned page can only be a GC copy made after the
//!   checkpoint. It matters only when the checkpoint's entry points into a block that has been
//!   erased since ("lost"); then the highest such copy is the checkpointed version, moved;
//! - otherwise the checkpoint's entry stands.
//!
//! A clean shutdown leaves nothing programmed after its checkpoint, so a clean open scans
//! nothing (`RecoveryMode::Clean`).

use std::time::Instant;

use nand_model::{BankId, BlockAddr, PageAddr};
use serde::Serialize;

use crate::blocks::BlockState;
use crate::buffer::decode_trims;
use crate::checkpoint::Snapshot;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Psa, LOGICAL_PAGE};
use crate::oob::{self, PageOob, SlotKind};

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
    /// Pages whose checkpointed copy was erased and no moved copy was found (trimmed but
    /// unflushed data); they read as zeroes.
    pub lost_pages: u64,
    pub millis: f64,
}

struct Scan {
    data: Vec<(u32, u64, Psa)>,
    trims: Vec<(u32, u32, u64)>,
    trim_slots: Vec<(Psa, u64)>,
    max_seq: u64,
    pages: u64,
    blocks: u64,
}

impl Core {
    /// Rebuilds map, bitmaps and block states from flash. Runs before any thread starts.
    /// Takes the checkpoint's map out of `ckpt` (it becomes the starting point of the live map).
    pub(crate) fn recover(
        &self,
        mut ckpt: Option<&mut Snapshot>,
        fallback: bool,
    ) -> Result<RecoveryReport> {
        let t0 = Instant::now();
        let lpns = self.lpns as usize;
        // Recovery's per-page working state is what an open costs beyond the live map: the
        // map is moved (not copied) out of the checkpoint, lost flags are one bit per page.
        let mut l2p: Vec<u32> = match ckpt.as_deref_mut().map(Snapshot::take_l2p) {
            Some(v) if v.len() == lpns => v,
            _ => vec![Psa::UNMAPPED; lpns],
        };
        let ckpt = ckpt.as_deref();
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
        for b in 0..total {
            let addr = layout.block_addr(BlockIdx(b));
            let st = now[b as usize];
            if layout.is_reserved(addr) {
                continue;
            }
            let (from, changed) = match ckpt.and_then(|c| c.blocks.get(b as usize)) {
                Some(&(erases, programmed)) if erases == st.erase_count => (programmed, false),
                Some(_) => (0, true),
                None => (0, true),
            };
            erased_since[b as usize] = changed || st.bad;
            if st.bad || st.programmed_pages <= from {
                continue;
            }
            ranges[addr.bank.0 as usize].push((addr.block, from, st.programmed_pages));
        }
        let scans: Vec<Scan> = std::thread::scope(|s| {
            let handles: Vec<_> = ranges
                .into_iter()
                .enumerate()
                .map(|(bank, list)| s.spawn(move || self.scan_bank(bank as u32, &list)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(crate::FtlError::Internal("scan thread panicked".into()))
                    })
                })
                .collect::<Result<Vec<_>>>()
        })?;

        // Resolve.
        let mut lost = vec![0u64; lpns.div_ceil(64)];
        let is_lost = |lost: &[u64], i: usize| lost[i / 64] & (1 << (i % 64)) != 0;
        for (lpn, e) in l2p.iter_mut().enumerate() {
            if *e != Psa::UNMAPPED {
                let blk = layout.block_of(Psa(*e)).0 as usize;
                if *e as u64 >= layout.total_slots()
                    || blk >= erased_since.len()
                    || erased_since[blk]
                {
                    lost[lpn / 64] |= 1 << (lpn % 64);
                    *e = Psa::UNMAPPED;
                }
            }
        }
        // best[lpn] = 1 + sequence number of the winning candidate (0: none).
        let mut best = vec![0u64; lpns];
        let mut max_seq = sc;
        let (mut pages, mut blocks) = (0, 0);
        let mut trim_slots: Vec<(Psa, u64)> = Vec::new();
        for s in &scans {
            max_seq = max_seq.max(s.max_seq + 1);
            pages += s.pages;
            blocks += s.blocks;
            for &(lpn, seq, psa) in &s.data {
                let i = lpn as usize;
                if i < lpns && (seq >= sc || is_lost(&lost, i)) && seq + 1 > best[i] {
                    best[i] = seq + 1;
                    l2p[i] = psa.0;
                }
            }
            for &(start, count, seq) in &s.trims {
                if seq < sc {
                    continue;
                }
                let end = (start as usize + count as usize).min(lpns);
                for i in start as usize..end {
                    if seq + 1 > best[i] {
                        best[i] = seq + 1;
                        l2p[i] = Psa::UNMAPPED;
                    }
                }
            }
            let keep_from = ckpt.map_or(0, |c| c.prev_sc);
            trim_slots.extend(s.trim_slots.iter().filter(|(_, seq)| *seq >= keep_from));
        }
        let lost_pages = best
            .iter()
            .enumerate()
            .filter(|(i, b)| **b == 0 && is_lost(&lost, *i))
            .count() as u64;

        // Install the map and rebuild the bitmaps.
        // Trim-log slots: the checkpoint's own (if their block survived) and the scanned ones.
        let mut tl = Vec::new();
        if let Some(c) = ckpt {
            for &(psa, seq) in &c.trims {
                let blk = layout.block_of(psa).0 as usize;
                if blk < erased_since.len() && !erased_since[blk] {
                    tl.push((psa, seq));
                }
            }
        }
        tl.extend(trim_slots);
        tl.sort_unstable();
        tl.dedup_by_key(|e| e.0);
        let mapped = self.map.install(&l2p, tl);

        // Block states and free lists.
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
                    // Partly programmed blocks are closed: frontiers start on fresh blocks.
                    a.state[block as usize] = BlockState::Full;
                }
            }
            self.update_free(bank, a.free_len());
        }
        self.set_seq(max_seq);
        let mode = match ckpt {
            None => RecoveryMode::FullScan,
            Some(_) if pages == 0 && !fallback => RecoveryMode::Clean,
            Some(_) => RecoveryMode::RollForward,
        };
        Ok(RecoveryReport {
            mode,
            checkpoint_id: ckpt.map(|c| c.id),
            checkpoint_fallback: fallback,
            blocks_scanned: blocks,
            pages_scanned: pages,
            mapped_pages: mapped,
            lost_pages,
            millis: t0.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Reads the OOB (and trim-log slots) of the given page ranges of one bank.
    fn scan_bank(&self, bank: u32, list: &[(u32, u32, u32)]) -> Result<Scan> {
        let mut out = Scan {
            data: Vec::new(),
            trims: Vec::new(),
            trim_slots: Vec::new(),
            max_seq: 0,
            pages: 0,
            blocks: list.len() as u64,
        };
        let mut oob_buf = vec![0u8; self.layout.oob_size as usize];
        let mut slot = vec![0u8; LOGICAL_PAGE];
        for &(block, from, to) in list {
            for page in from..to {
                let addr = PageAddr {
                    block: BlockAddr {
                        bank: BankId(bank),
                        block,
                    },
                    page,
                };
                out.pages += 1;
                if !self.read_retrying(addr, 0, &mut [], &mut oob_buf) {
                    continue;
                }
                let Some(PageOob::Data(metas)) = oob::decode(&oob_buf) else {
                    // Erased, torn by a crash mid-program, or a failed program: skip.
                    continue;
                };
                for (i, m) in metas.iter().enumerate() {
                    let psa = self.layout.psa(addr, i as u32);
                    match m.kind {
                        SlotKind::Data => {
                            out.max_seq = out.max_seq.max(m.seq);
                            out.data.push((m.lpn.0, m.seq, psa));
                        }
                        SlotKind::TrimLog => {
                            let off = (i * LOGICAL_PAGE) as u32;
                            if !self.read_retrying(addr, off, &mut slot, &mut oob_buf)
                                || crc32fast::hash(&slot) != m.crc
                            {
                                continue;
                            }
                            let Some(recs) = decode_trims(&slot) else {
                                continue;
                            };
                            out.max_seq = out.max_seq.max(m.seq);
                            out.trims
                                .extend(recs.iter().map(|r| (r.start, r.count, r.seq)));
                            out.trim_slots.push((psa, m.seq));
                        }
                        SlotKind::Pad => {}
                    }
                }
            }
        }
        Ok(out)
    }

    fn read_retrying(&self, addr: PageAddr, off: u32, data: &mut [u8], oob_buf: &mut [u8]) -> bool {
        for _ in 0..=self.cfg.read_retries {
            match self.nand.read(addr, off, data, Some(oob_buf)) {
                Ok(c) => {
                    c.wait();
                    return true;
                }
                Err(nand_model::NandError::Uncorrectable { .. }) => continue,
                Err(e) => {
                    tracing::warn!("recovery read of {addr:?} failed: {e}");
                    return false;
                }
            }
        }
        false
    }
}
