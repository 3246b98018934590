//! Finding and reading the newest usable checkpoint chain, streaming its map into the
//! scheme's live table.
//!
//! A checkpoint's pages are read bank-parallel (the area's map, `area.rs`, says which bank
//! holds page `i`): a reader thread per bank reads its pages in order, checks each page's OOB
//! (checkpoint id, index, count, CRC) and hands it over through a small bounded channel; the
//! decoder takes page `i` from its bank's. At most a few pages per bank are in RAM.
//!
//! A chain is its full checkpoint, then the deltas appended after it. The full one is decoded
//! straight into the table; a delta is first checked (read and decoded without storing) and
//! then applied, so a corrupt delta leaves the table at the chain's previous element (a
//! fallback). Any failure of the full checkpoint clears the table before the other area's
//! chain is tried.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::{bounded, Receiver};

use nand_model::NandDevice;

use super::area::AreaMap;
use super::codec::{decode_body, BodySource, Checkpoint, Header, MapOut, MapSink, HEADER};
use crate::layout::Layout;
use crate::oob::{self, PageOob};

/// Reads the header OOB of the checkpoint starting at page `offset` of `map`'s area.
pub(super) fn header_at(
    nand: &NandDevice,
    layout: &Layout,
    retries: Retries<'_>,
    map: &AreaMap,
    offset: u64,
) -> Option<(u64, u32)> {
    if offset >= map.pages() {
        return None;
    }
    let mut oob_buf = vec![0u8; layout.oob_size as usize];
    read_ckpt_page(nand, retries, map.page(offset), &mut [], &mut oob_buf).ok()?;
    match oob::decode(&oob_buf, layout.slots_per_page)? {
        PageOob::Checkpoint {
            id,
            index: 0,
            count,
            ..
        } => Some((id, count)),
        _ => None,
    }
}

/// A bank's reader's channel: each page in turn, or why it could not be read.
type PageRx = Receiver<Result<Vec<u8>, String>>;

/// The pages of one checkpoint, in order, from the per-bank reader threads.
struct Pages<'m> {
    /// Each bank's reader's channel (`None`: no page of this checkpoint on the bank).
    rx: Vec<Option<PageRx>>,
    area: &'m AreaMap,
    offset: u64,
    next: u64,
    count: u64,
}

impl BodySource for Pages<'_> {
    fn next_piece(&mut self) -> Result<Vec<u8>, String> {
        if self.next >= self.count {
            return Err("checkpoint body longer than its pages".into());
        }
        let bank = self.area.bank_of(self.offset + self.next) as usize;
        self.next += 1;
        self.rx
            .get(bank)
            .and_then(Option::as_ref)
            .ok_or_else(|| "checkpoint reader missing".to_string())?
            .recv()
            .map_err(|_| "checkpoint reader stopped".to_string())?
    }
}

/// Reads and decodes the checkpoint at page `offset` of `area`'s map, sending its map where
/// `map` says. Returns it with its page count.
fn load_at(
    nand: &NandDevice,
    layout: &Layout,
    retries: Retries<'_>,
    area: &AreaMap,
    offset: u64,
    want_full: bool,
    map: MapOut<'_>,
) -> Result<(Checkpoint, u64), String> {
    let (id, count) =
        header_at(nand, layout, retries, area, offset).ok_or("no checkpoint header")?;
    let count = u64::from(count);
    if count == 0 || !area.fits(offset, count) {
        return Err(format!("checkpoint claims {count} pages"));
    }
    // Which pages each bank's reader reads, in order.
    let mut per_bank = vec![Vec::new(); layout.banks as usize];
    for i in 0..count {
        per_bank[area.bank_of(offset + i) as usize].push(i);
    }
    std::thread::scope(|s| {
        let mut rx = Vec::new();
        for indexes in per_bank {
            if indexes.is_empty() {
                rx.push(None);
                continue;
            }
            // Two pages ahead per bank keep every bank busy while the decoder works.
            let (tx, r) = bounded(2);
            rx.push(Some(r));
            s.spawn(move || {
                let mut oob_buf = vec![0u8; layout.oob_size as usize];
                for i in indexes {
                    let mut page = vec![0u8; layout.page_size as usize];
                    let at = (area, offset, id, count, i);
                    let got = read_page(nand, layout, retries, at, &mut page, &mut oob_buf)
                        .map(|()| page);
                    let failed = got.is_err();
                    // The decoder hung up (it failed or is done): stop.
                    if tx.send(got).is_err() || failed {
                        return;
                    }
                }
            });
        }
        let mut pages = Pages {
            rx,
            area,
            offset,
            next: 0,
            count,
        };
        let result = (|| {
            let mut first = pages.next_piece()?;
            let h = Header::decode(&first)?;
            // Nothing is sized by a length the pages cannot hold.
            if (HEADER + h.len) as u64 > count * u64::from(layout.page_size) {
                return Err("checkpoint longer than its pages".to_string());
            }
            if h.id != id {
                return Err("checkpoint id mismatch".to_string());
            }
            if want_full != h.full {
                return Err(if want_full {
                    "chain does not start with a full checkpoint".to_string()
                } else {
                    "a full checkpoint in the middle of a chain".to_string()
                });
            }
            let rest = first.split_off(HEADER.min(first.len()));
            let (c, _) = decode_body(&h, rest, &mut pages, map)?;
            Ok((c, count))
        })();
        // Dropping the receivers stops readers blocked on a full channel.
        drop(pages);
        result
    })
}

/// Reads page `i` of the checkpoint `id` of `count` pages at page `offset` of `area`'s map,
/// and checks its OOB.
fn read_page(
    nand: &NandDevice,
    layout: &Layout,
    retries: Retries<'_>,
    (area, offset, id, count, i): (&AreaMap, u64, u64, u64, u64),
    page: &mut [u8],
    oob_buf: &mut [u8],
) -> Result<(), String> {
    read_ckpt_page(nand, retries, area.page(offset + i), page, oob_buf)
        .map_err(|e| e.to_string())?;
    match oob::decode(oob_buf, layout.slots_per_page) {
        Some(PageOob::Checkpoint {
            id: pid,
            index,
            count: c,
            crc,
        }) if pid == id
            && u64::from(index) == i
            && u64::from(c) == count
            && crc == crc32fast::hash(page) =>
        {
            Ok(())
        }
        _ => Err(format!("checkpoint {id} page {i} is missing or corrupt")),
    }
}

/// Reads a checkpoint page (`page` from its first byte, and its OOB), of a block marked bad
/// too. Only a chain read over every block of its area (`AreaMap::whole`: images of versions
/// before 2026-12-01) meets one: such a writer went on with checkpoints after an area's block
/// turned bad (its erase failed, which leaves what the block held as it was,
/// `NandDevice::erase`), so the chain written there last could still be the device's newest
/// state, and reading it (as a controller salvaging a block does, `NandDevice::peek_of_bad`,
/// costing no modelled time) lets the open roll forward from it instead of scanning every page
/// (a full scan cannot see trims older than the checkpoints). What such a block holds is
/// checked as any checkpoint page is (ids, indexes, CRCs); a torn or damaged page fails the
/// chain as usual. An uncorrectable read is tried again up to `retries` times
/// (`Core::own_read_retries`, as recovery's scan does): a read that needs a retry must not
/// cost a checkpoint, and with it, perhaps, the only state recovery can trust.
fn read_ckpt_page(
    nand: &NandDevice,
    retries: Retries<'_>,
    addr: nand_model::PageAddr,
    page: &mut [u8],
    oob_buf: &mut [u8],
) -> Result<(), nand_model::NandError> {
    // Asked first: a read of a bad block is refused, and counted as the FTL breaking a rule.
    if nand.block_state(addr.block)?.bad {
        return match nand.peek_of_bad(addr, 0, page, oob_buf)? {
            true => Ok(()),
            false => Err(nand_model::NandError::BadBlock { block: addr.block }),
        };
    }
    let mut attempt = 0;
    loop {
        match nand.read(addr, 0, page, Some(oob_buf)) {
            Ok(done) => {
                done.wait();
                return Ok(());
            }
            Err(e @ nand_model::NandError::Uncorrectable { .. }) => {
                // Every failed attempt counts, the last one too, as the host's, GC's and
                // recovery's reads count theirs.
                retries.count.fetch_add(1, Ordering::Relaxed);
                if attempt == retries.max {
                    return Err(e);
                }
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// How often a checkpoint read that is uncorrectable is tried again
/// (`Core::own_read_retries`), and where the retries are counted (`ftl.read_retries`).
#[derive(Clone, Copy)]
pub(crate) struct Retries<'a> {
    pub max: u32,
    pub count: &'a AtomicU64,
}

/// A checkpoint chain loaded from one area: its full checkpoint with every valid delta applied.
pub(crate) struct Loaded {
    /// The state as of the chain's last valid element (its map is in the sink).
    pub snap: Checkpoint,
    pub area: u32,
    /// The chain was read over every block of an area that has bad blocks (a writer before
    /// 2026-12-01 wrote it before a block went bad): the writer's map of the area skips those
    /// blocks, so no delta may be appended to it; the next checkpoint is a full one in the
    /// other area.
    pub whole_map: bool,
    /// First free page of the area after the chain.
    pub next_offset: u64,
    /// Checkpoints in the chain (1 = just the full one).
    pub chain_len: u32,
    /// A newer checkpoint (another area's full one, or a delta of this chain) was corrupt.
    pub fallback: bool,
}

/// Loads the chain of `area`'s map into `sink`: its full checkpoint, then the deltas after it.
fn load_chain(
    nand: &NandDevice,
    layout: &Layout,
    retries: Retries<'_>,
    area: &AreaMap,
    sink: &dyn MapSink,
) -> Result<Loaded, String> {
    let (mut snap, count) = load_at(nand, layout, retries, area, 0, true, MapOut::Sink(sink))?;
    let mut next = count;
    let mut chain_len = 1;
    let mut fallback = false;
    while let Some((id, _)) = header_at(nand, layout, retries, area, next) {
        if id <= snap.id {
            break;
        }
        // Check the whole delta before any of it reaches the table.
        match load_at(nand, layout, retries, area, next, false, MapOut::Skip) {
            Ok((delta, _)) if delta.lpns != snap.lpns => {
                tracing::warn!(
                    "checkpoint area {}: delta {id} maps {} pages, its chain {}",
                    area.area,
                    delta.lpns,
                    snap.lpns
                );
                fallback = true;
                break;
            }
            Ok(_) => {
                // A page that read well a moment ago and fails now leaves the table half
                // updated: the whole chain is unusable then.
                let (delta, count) =
                    load_at(nand, layout, retries, area, next, false, MapOut::Sink(sink))
                        .map_err(|e| format!("delta {id} failed on its second reading: {e}"))?;
                snap = delta;
                next += count;
                chain_len += 1;
            }
            Err(e) => {
                tracing::warn!("checkpoint area {}: delta {id} unusable: {e}", area.area);
                fallback = true;
                break;
            }
        }
    }
    Ok(Loaded {
        snap,
        area: area.area,
        whole_map: false,
        next_offset: next,
        chain_len,
        fallback,
    })
}

/// Finds the newest usable checkpoint and loads its map into `sink`: the chain of the area
/// whose full checkpoint is newest, else the other area's chain (a fallback). With none, the
/// sink is left all unmapped. An uncorrectable read is tried again as `retries` says.
///
/// An area with bad blocks is read with its map (`AreaMap::of_device`, where this version
/// writes) and, for images of versions before 2026-12-01, over every block
/// (`AreaMap::whole`): a chain read that way must pass [`current_beside`].
pub(crate) fn load_newest(
    nand: &NandDevice,
    layout: &Layout,
    retries: Retries<'_>,
    sink: &dyn MapSink,
) -> Option<Loaded> {
    let mut maps = Vec::new();
    for area in 0..2 {
        let map = AreaMap::of_device(nand, layout, area);
        if map.bad_blocks() > 0 {
            maps.push((AreaMap::whole(layout, area), true));
        }
        maps.push((map, false));
    }
    let mut chains: Vec<(u64, &AreaMap, bool)> = maps
        .iter()
        .filter_map(|(m, whole)| {
            header_at(nand, layout, retries, m, 0).map(|(id, _)| (id, m, *whole))
        })
        .collect();
    // Newest first; of one id read both ways (pages a bad block holds count in either),
    // this version's map first.
    chains.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
    // A newer chain failed (read either way: a chain read over every block after its own
    // area's map failed may be a truncated read of a chain this version wrote, so it counts
    // as a fallback too, and recovery looks past it).
    let mut skipped = false;
    for (_, map, whole) in chains {
        let area = map.area;
        match load_chain(nand, layout, retries, map, sink) {
            Ok(l) if whole && !current_beside(nand, layout, &l) => {
                tracing::warn!(
                    "checkpoint area {area} has a bad block and the other area was erased \
                     since its chain was written: the chain is older than checkpoints that \
                     were written after it, and is not used"
                );
                sink.clear();
                skipped = true;
            }
            Ok(mut l) => {
                l.fallback |= skipped;
                l.whole_map = whole;
                return Some(l);
            }
            Err(e) => {
                if !whole {
                    tracing::warn!("checkpoint area {area} unusable: {e}");
                }
                sink.clear();
                skipped = true;
            }
        }
    }
    None
}

/// Whether chain `l`, read over every block of its area (`AreaMap::whole`), may be the
/// device's newest state or one generation older, as a fallback to the other area always
/// may be. An area with a bad block was skipped by the writer of versions before 2026-11-30,
/// which went on in the other area, so its chain may be any number of checkpoints old; it is
/// used only if the other area took at most one full checkpoint since, which its blocks'
/// erase counts against those the chain's last element recorded tell: a full checkpoint
/// erases every block of its area that holds pages. So a block that held pages then may have
/// one more erase (the crash that cut that one full checkpoint short, or this version's first
/// checkpoint after reading such a chain, which goes to the other area), one that held none
/// no more (a full checkpoint wrote it without an erase, and a second would have erased it:
/// with one more erase allowed there too, a chain two generations old passed, whose trim
/// records the second had dropped; review). (A failed erase adds none: both areas worn out
/// under the old writer.) (A chain this version writes into an area with bad blocks is read with the
/// area's map and is at most one generation old: areas alternate, and an area's blocks go
/// bad only when it is erased for a new chain.)
fn current_beside(nand: &NandDevice, layout: &Layout, l: &Loaded) -> bool {
    let addrs = |area: u32| layout.ckpt_area_addrs(area);
    addrs(1 - l.area).all(|addr| {
        let recorded = l.snap.blocks.get(layout.block_idx(addr).0 as usize);
        matches!(
            (recorded, nand.block_state(addr)),
            (Some(&(e, p)), Ok(st)) if st.erase_count <= e.saturating_add(u32::from(p > 0))
        )
    })
}

/// What the checkpoint areas show of checkpoints written in the past, whether or not any is
/// usable: the newest id a checkpoint page's OOB names, and how many areas hold programmed
/// pages. Reads OOBs without operations (no time passes, no fault is injected).
pub(crate) fn written_before(nand: &NandDevice, layout: &Layout) -> (Option<u64>, u32) {
    let mut newest = None;
    let mut areas = 0;
    let mut oob_buf = vec![0u8; layout.oob_size as usize];
    for area in 0..2 {
        let mut used = false;
        for i in 0..layout.ckpt_area_pages() {
            // Bad blocks too: a worn area keeps what it held.
            if !nand
                .peek_of_bad(layout.ckpt_page(area, i), 0, &mut [], &mut oob_buf)
                .unwrap_or(false)
            {
                continue;
            }
            used = true;
            if let Some(PageOob::Checkpoint { id, .. }) =
                oob::decode(&oob_buf, layout.slots_per_page)
            {
                newest = newest.max(Some(id));
            }
        }
        areas += u32::from(used);
    }
    (newest, areas)
}

/// A sink that keeps nothing (reading an image's checkpoints without opening it).
pub(crate) struct Discard(pub u32);

impl MapSink for Discard {
    fn entries(&self) -> usize {
        self.0 as usize
    }
    fn store(&self, _start: usize, _v: &[u32]) {}
    fn clear(&self) {}
}
