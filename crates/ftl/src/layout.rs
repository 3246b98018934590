//! Address newtypes and the FTL's view of the flash geometry.
//!
//! The FTL maps 4 KiB *logical pages* ([`Lpn`]) to 4 KiB *slots* inside NAND pages ([`Psa`],
//! physical slot address). A NAND page of `page_size` bytes holds `slots_per_page =
//! page_size / 4096` slots. A `Psa` is one `u32`, the slot's linear index over the whole device:
//!
//! ```text
//! psa = ((bank * blocks_per_bank + block) * pages_per_block + page) * slots_per_page + slot
//! ```
//!
//! so the L2P table costs 4 bytes per exported page and `u32::MAX` means "unmapped".
//!
//! Reserved blocks (never host data, never garbage collected):
//! - bank 0, block 0: the *superblock*, programmed once at format with the FTL parameters;
//! - blocks `1 .. 1 + 2 * ckpt_blocks` of every bank: two checkpoint areas (A and B) used in turn.

use nand_model::{BankId, BlockAddr, Geometry, PageAddr};

/// Bytes in a logical page (the FTL's mapping unit).
pub const LOGICAL_PAGE: usize = 4096;

/// One logical page's share of a host byte range (see [`pieces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Bytes into the range.
    pub pos: usize,
    pub lpn: Lpn,
    /// Byte of the logical page the piece starts at.
    pub in_page: usize,
    pub len: usize,
}

impl Piece {
    /// The piece covers its whole logical page.
    pub fn whole(&self) -> bool {
        self.len == LOGICAL_PAGE
    }
}

/// The logical pages the `len` bytes at byte `offset` cover, in order: a partial first and
/// last piece where the range is not page-aligned, whole pages between.
pub(crate) fn pieces(offset: u64, len: usize) -> impl Iterator<Item = Piece> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos >= len {
            return None;
        }
        let abs = offset + pos as u64;
        let in_page = (abs % LOGICAL_PAGE as u64) as usize;
        let piece = Piece {
            pos,
            lpn: Lpn((abs / LOGICAL_PAGE as u64) as u32),
            in_page,
            len: (LOGICAL_PAGE - in_page).min(len - pos),
        };
        pos += piece.len;
        Some(piece)
    })
}
/// Exported sector size: requests must be aligned to it.
pub const SECTOR: u64 = 512;

/// A logical page number: byte offset / 4096.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lpn(pub u32);

/// A physical slot address (see the module doc for the packing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Psa(pub u32);

impl Psa {
    /// The L2P value of an unmapped logical page.
    pub const UNMAPPED: u32 = u32::MAX;
}

/// A global block index: `bank * blocks_per_bank + block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockIdx(pub u32);

/// Geometry-derived constants and address conversions. Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub banks: u32,
    /// Channels the banks are spread over (bank `b` is on channel `b / (banks / channels)`).
    pub channels: u32,
    pub blocks_per_bank: u32,
    pub pages_per_block: u32,
    pub page_size: u32,
    pub oob_size: u32,
    pub slots_per_page: u32,
    /// Blocks per bank in each of the two checkpoint areas.
    pub ckpt_blocks: u32,
}

/// The `p`-th bank (wrapping) in channel-first striping order on a device of `channels`
/// channels of `per_channel` banks each: bank 0 of every channel, then bank 1 of every channel.
pub fn channel_first_bank(p: u32, channels: u32, per_channel: u32) -> u32 {
    let ch = p % channels;
    let within = (p / channels) % per_channel;
    ch * per_channel + within
}

impl Layout {
    /// Builds the layout for a geometry and the checkpoint area size it needs for `lpns` pages.
    pub fn new(geo: &Geometry, ckpt_blocks: u32) -> Layout {
        Layout {
            banks: geo.banks(),
            channels: geo.channels.max(1),
            blocks_per_bank: geo.blocks_per_bank,
            pages_per_block: geo.pages_per_block,
            page_size: geo.page_size,
            oob_size: geo.oob_size,
            slots_per_page: geo.page_size / LOGICAL_PAGE as u32,
            ckpt_blocks,
        }
    }

    /// The banks in striping order, channel first (bank 0 of every channel, then bank 1 of
    /// every channel, ...), as an SSD stripes consecutive pages: successive programs then
    /// cross different channels rather than queue on one.
    pub fn channel_first_banks(&self) -> Vec<u32> {
        let per_channel = (self.banks / self.channels).max(1);
        (0..self.banks)
            .map(|p| channel_first_bank(p, self.channels, per_channel))
            .collect()
    }

    pub fn total_blocks(&self) -> u32 {
        self.banks * self.blocks_per_bank
    }
    pub fn slots_per_block(&self) -> u32 {
        self.pages_per_block * self.slots_per_page
    }
    pub fn total_slots(&self) -> u64 {
        self.total_blocks() as u64 * self.slots_per_block() as u64
    }
    pub fn block_idx(&self, b: BlockAddr) -> BlockIdx {
        BlockIdx(b.bank.0 * self.blocks_per_bank + b.block)
    }
    pub fn block_addr(&self, b: BlockIdx) -> BlockAddr {
        BlockAddr {
            bank: BankId(b.0 / self.blocks_per_bank),
            block: b.0 % self.blocks_per_bank,
        }
    }
    /// The first slot of a page.
    pub fn psa(&self, page: PageAddr, slot: u32) -> Psa {
        debug_assert!(slot < self.slots_per_page);
        let blk = self.block_idx(page.block).0 as u64;
        let v = ((blk * self.pages_per_block as u64 + page.page as u64)
            * self.slots_per_page as u64)
            + slot as u64;
        debug_assert!(v < u32::MAX as u64);
        Psa(v as u32)
    }
    /// Page address and slot index of a slot.
    pub fn split(&self, psa: Psa) -> (PageAddr, u32) {
        let slot = psa.0 % self.slots_per_page;
        let page_lin = psa.0 / self.slots_per_page;
        let page = page_lin % self.pages_per_block;
        let blk = BlockIdx(page_lin / self.pages_per_block);
        (
            PageAddr {
                block: self.block_addr(blk),
                page,
            },
            slot,
        )
    }
    pub fn block_of(&self, psa: Psa) -> BlockIdx {
        BlockIdx(psa.0 / self.slots_per_block())
    }
    /// Slot index inside its block (for the valid bitmap).
    pub fn slot_in_block(&self, psa: Psa) -> u32 {
        psa.0 % self.slots_per_block()
    }

    /// The superblock: bank 0, block 0.
    pub fn superblock(&self) -> BlockAddr {
        BlockAddr {
            bank: BankId(0),
            block: 0,
        }
    }
    /// Block numbers (inside each bank) of checkpoint area `area` (0 or 1).
    pub fn ckpt_area_blocks(&self, area: u32) -> std::ops::Range<u32> {
        let start = 1 + area * self.ckpt_blocks;
        start..start + self.ckpt_blocks
    }
    /// Every block of checkpoint area `area`, on every bank (bank-major).
    pub fn ckpt_area_addrs(&self, area: u32) -> impl Iterator<Item = BlockAddr> {
        let blocks = self.ckpt_area_blocks(area);
        (0..self.banks).flat_map(move |bank| {
            blocks.clone().map(move |block| BlockAddr {
                bank: BankId(bank),
                block,
            })
        })
    }
    /// Whether a block is reserved (superblock or checkpoint area) and never holds host data.
    pub fn is_reserved(&self, b: BlockAddr) -> bool {
        (b.bank.0 == 0 && b.block == 0) || (b.block >= 1 && b.block < 1 + 2 * self.ckpt_blocks)
    }
    /// Pages in one checkpoint area.
    pub fn ckpt_area_pages(&self) -> u64 {
        self.ckpt_blocks as u64 * self.banks as u64 * self.pages_per_block as u64
    }
    /// The `i`-th page of a checkpoint area: pages are striped across banks so a checkpoint is
    /// written and read by all banks in parallel.
    pub fn ckpt_page(&self, area: u32, i: u64) -> PageAddr {
        let bank = (i % self.banks as u64) as u32;
        let per_bank = i / self.banks as u64;
        let block =
            self.ckpt_area_blocks(area).start + (per_bank / self.pages_per_block as u64) as u32;
        PageAddr {
            block: BlockAddr {
                bank: BankId(bank),
                block,
            },
            page: (per_bank % self.pages_per_block as u64) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banks_are_striped_channel_first() {
        assert_eq!(
            (0..8)
                .map(|p| channel_first_bank(p, 4, 2))
                .collect::<Vec<_>>(),
            [0, 2, 4, 6, 1, 3, 5, 7]
        );
        assert_eq!(channel_first_bank(8, 4, 2), 0, "wraps");
        assert_eq!(
            (0..3)
                .map(|p| channel_first_bank(p, 1, 3))
                .collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[test]
    fn pieces_split_a_range_at_logical_pages() {
        let got: Vec<_> = pieces(4096 + 512, 3 * 4096)
            .map(|p| (p.pos, p.lpn.0, p.in_page, p.len, p.whole()))
            .collect();
        assert_eq!(
            got,
            [
                (0, 1, 512, 3584, false),
                (3584, 2, 0, 4096, true),
                (7680, 3, 0, 4096, true),
                (11776, 4, 0, 512, false),
            ]
        );
        assert_eq!(pieces(8192, 4096).count(), 1);
        assert_eq!(pieces(8192, 0).count(), 0);
    }

    fn geo() -> Geometry {
        Geometry {
            channels: 2,
            banks_per_channel: 2,
            blocks_per_bank: 16,
            pages_per_block: 8,
            page_size: 16384,
            oob_size: 256,
        }
    }

    #[test]
    fn psa_roundtrip() {
        let l = Layout::new(&geo(), 1);
        for v in 0..l.total_slots() as u32 {
            let (p, s) = l.split(Psa(v));
            assert_eq!(l.psa(p, s), Psa(v));
            assert_eq!(l.block_of(Psa(v)), l.block_idx(p.block));
        }
    }

    #[test]
    fn reserved_blocks() {
        let l = Layout::new(&geo(), 2);
        let b = |bank, block| BlockAddr {
            bank: BankId(bank),
            block,
        };
        assert!(l.is_reserved(b(0, 0)));
        assert!(!l.is_reserved(b(1, 0)));
        assert!(l.is_reserved(b(1, 4)));
        assert!(!l.is_reserved(b(1, 5)));
        assert_eq!(l.ckpt_area_blocks(1), 3..5);
        let last = l.ckpt_page(1, l.ckpt_area_pages() - 1);
        assert!(l.ckpt_area_blocks(1).contains(&last.block.block));
        let area1: Vec<_> = l.ckpt_area_addrs(1).collect();
        assert_eq!(area1.len(), (l.banks * 2) as usize);
        assert!(area1.iter().all(|&a| l.is_reserved(a) && a.block >= 3));
        assert!((0..l.banks).all(|bank| area1.contains(&b(bank, 4))));
    }
}
