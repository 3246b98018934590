//! Where a checkpoint area's pages are: striped over the area's good blocks.
//!
//! An area is `ckpt_blocks` rows of one block on every bank (`Layout::ckpt_area_blocks`). Page
//! `i` of an area goes to the rows in order; inside a row, to the row's good blocks in bank
//! order, round robin, so a checkpoint is written and read by all of them in parallel. With no
//! bad block this is `Layout::ckpt_page` exactly (images written before bad blocks were
//! skipped read the same). A block that went bad is left out, and the area holds fewer pages:
//! a checkpoint goes on in it while it still holds a full one with room for trim records
//! ([`full_pages`], [`worn_out`]), as an SSD retires a bad block of its metadata region instead of
//! the whole region.
//!
//! Why a map built from the block table is the one the chain was written with: an area's
//! blocks turn bad only when they are erased (`NandDevice::erase`: at the endurance or an
//! erase fault; a failed program leaves its block good), and an area is erased only to start
//! a new chain in it, after which the map is built again. So from a chain's first page to its
//! last delta, the area's bad blocks, and its map, stay the same; the loader builds it from the
//! same block table. (`AreaMap::whole` reads images of versions before 2026-12-01 whose chain
//! sits in an area that went bad after it was written; `load.rs` says when it is trusted.)

use nand_model::{BankId, BlockAddr, NandDevice, PageAddr};

use crate::layout::Layout;

/// One row of an area: block number `block` on each bank in `banks` (the good ones).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    /// Area page at which the row starts.
    start: u64,
    block: u32,
    banks: Vec<u32>,
}

/// The page addresses of one checkpoint area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AreaMap {
    pub area: u32,
    pages_per_block: u64,
    rows: Vec<Row>,
    /// Pages the area holds (its good blocks' pages).
    pages: u64,
    /// Blocks left out.
    bad: u32,
}

impl AreaMap {
    /// The map of `area` with the blocks `bad` says are bad left out.
    pub fn new(layout: &Layout, area: u32, bad: impl Fn(BlockAddr) -> bool) -> AreaMap {
        let ppb = u64::from(layout.pages_per_block);
        let (mut rows, mut start, mut skipped) = (Vec::new(), 0u64, 0u32);
        for block in layout.ckpt_area_blocks(area) {
            let banks: Vec<u32> = (0..layout.banks)
                .filter(|&bank| {
                    let good = !bad(BlockAddr {
                        bank: BankId(bank),
                        block,
                    });
                    skipped += u32::from(!good);
                    good
                })
                .collect();
            if banks.is_empty() {
                continue;
            }
            let row_pages = banks.len() as u64 * ppb;
            rows.push(Row {
                start,
                block,
                banks,
            });
            start += row_pages;
        }
        AreaMap {
            area,
            pages_per_block: ppb,
            rows,
            pages: start,
            bad: skipped,
        }
    }

    /// The map of `area` on the device now: its bad blocks (and any whose state cannot be
    /// read) left out.
    pub fn of_device(nand: &NandDevice, layout: &Layout, area: u32) -> AreaMap {
        AreaMap::new(layout, area, |b| {
            nand.block_state(b).map_or(true, |s| s.bad)
        })
    }

    /// The map of `area` over every block, bad or not: how writers before 2026-12-01 placed
    /// a chain (they never wrote into an area with a bad block, but a block could go bad under
    /// a chain they had written).
    pub fn whole(layout: &Layout, area: u32) -> AreaMap {
        AreaMap::new(layout, area, |_| false)
    }

    /// Pages the area holds.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Blocks of the area left out as bad.
    pub fn bad_blocks(&self) -> u32 {
        self.bad
    }

    /// Page `i` of the area (`i < self.pages()`).
    pub fn page(&self, i: u64) -> PageAddr {
        debug_assert!(i < self.pages, "page {i} of an area of {}", self.pages);
        // The last row that starts at or before `i` (row 0 starts at 0).
        let row = &self.rows[self
            .rows
            .partition_point(|r| r.start <= i)
            .saturating_sub(1)];
        let j = i - row.start;
        let n = row.banks.len() as u64;
        PageAddr {
            block: BlockAddr {
                bank: BankId(row.banks[(j % n) as usize]),
                block: row.block,
            },
            page: ((j / n) % self.pages_per_block) as u32,
        }
    }

    /// The bank of page `i` (which reader thread of `load.rs` reads it).
    pub fn bank_of(&self, i: u64) -> u32 {
        self.page(i).block.bank.0
    }

    /// Whether the area holds a checkpoint of `pages` pages starting at page `offset`.
    pub fn fits(&self, offset: u64, pages: u64) -> bool {
        offset
            .checked_add(pages)
            .is_some_and(|end| end <= self.pages)
    }
}

/// Pages a full checkpoint needs with room for trim records: half what the format sizes an
/// area for (`checkpoint_bytes`, which leaves room for the deltas after it). An area with a
/// bad block that holds fewer is worn out; one without is never (images of older formats may
/// have smaller areas, and hold what they always did).
pub(crate) fn full_pages(layout: &Layout, lpns: u32) -> u64 {
    (super::checkpoint_bytes(u64::from(lpns), u64::from(layout.total_blocks())) / 2)
        .div_ceil(u64::from(layout.page_size))
}

/// Why `map`'s area cannot take checkpoints any more, if it cannot: it lost so many blocks
/// that a full checkpoint of `need` pages does not fit.
pub(crate) fn worn_out(
    nand: &NandDevice,
    layout: &Layout,
    map: &AreaMap,
    need: u64,
) -> Option<String> {
    if map.bad_blocks() == 0 || map.pages() >= need {
        return None;
    }
    // The erase count at which the area's blocks went bad (the endurance, or before it for
    // an erase fault).
    let erases = layout
        .ckpt_area_addrs(map.area)
        .filter_map(|b| nand.block_state(b).ok())
        .filter(|s| s.bad)
        .map(|s| s.erase_count)
        .max()
        .unwrap_or_default();
    Some(format!(
        "checkpoint area {} wore out: {} of its {} blocks went bad (after up to {erases} \
         erases, endurance {}), and its good pages ({}) cannot hold a full checkpoint ({need} \
         pages); writing over the other area could lose the last checkpoint: no checkpoint is \
         written any more; what is on flash stays readable",
        map.area,
        map.bad_blocks(),
        layout.ckpt_blocks * layout.banks,
        nand.config().endurance,
        map.pages(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nand_model::Geometry;

    fn layout(ckpt_blocks: u32) -> Layout {
        let geo = Geometry {
            channels: 2,
            banks_per_channel: 2,
            blocks_per_bank: 32,
            pages_per_block: 8,
            page_size: 4096,
            oob_size: 64,
        };
        Layout::new(&geo, ckpt_blocks)
    }

    /// With no bad block the map is the layout's striping, page for page.
    #[test]
    fn without_bad_blocks_the_map_is_the_layouts_striping() {
        let l = layout(2);
        for area in 0..2 {
            let m = AreaMap::new(&l, area, |_| false);
            assert_eq!(m.pages(), l.ckpt_area_pages());
            assert_eq!(m, AreaMap::whole(&l, area));
            for i in 0..m.pages() {
                assert_eq!(m.page(i), l.ckpt_page(area, i), "area {area} page {i}");
            }
        }
    }

    /// Bad blocks are left out: every page lands on a distinct page of a good block of the
    /// area, in block page order, striped over the row's good banks, and the area holds the
    /// good blocks' pages.
    #[test]
    fn bad_blocks_are_left_out_and_pages_stay_distinct_and_striped() {
        let l = layout(2);
        let rows = l.ckpt_area_blocks(1);
        let bad = |b: BlockAddr| {
            (b.bank.0 == 1 && b.block == rows.start) || (b.block == rows.start + 1 && b.bank.0 != 2)
        };
        let m = AreaMap::new(&l, 1, bad);
        // Row 0: banks 0, 2, 3; row 1: bank 2 only.
        assert_eq!(m.bad_blocks(), 4);
        assert_eq!(m.pages(), 4 * 8);
        let mut seen = std::collections::HashSet::new();
        let mut next_page = std::collections::HashMap::new();
        for i in 0..m.pages() {
            let p = m.page(i);
            assert!(!bad(p.block), "page {i} in a bad block: {p:?}");
            assert!(rows.contains(&p.block.block), "page {i} outside the area");
            assert!(seen.insert(p), "page {i} twice: {p:?}");
            // Each block is filled from its first page on, as NAND requires.
            let n = next_page.entry(p.block).or_insert(0u32);
            assert_eq!(p.page, *n, "page {i}");
            *n += 1;
            assert_eq!(m.bank_of(i), p.block.bank.0);
        }
        assert_eq!(
            (0..3).map(|i| m.bank_of(i)).collect::<Vec<_>>(),
            vec![0, 2, 3]
        );
        assert!(m.fits(0, 32) && !m.fits(1, 32) && !m.fits(u64::MAX, 2));
        // A row with no good block is skipped whole.
        let m = AreaMap::new(&l, 0, |b| b.block == l.ckpt_area_blocks(0).start);
        assert_eq!(m.pages(), 4 * 8);
        assert_eq!(m.page(0).block.block, l.ckpt_area_blocks(0).start + 1);
    }
}
