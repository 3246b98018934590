//! Geometry of the emulated SSD and the typed addresses into it.
//!
//! A device is `channels x banks_per_channel` banks; a bank holds `blocks_per_bank` erase blocks
//! of `pages_per_block` pages, each `page_size` data bytes plus `oob_size` spare (OOB) bytes.
//! Banks are numbered globally: bank `b` sits on channel `b / banks_per_channel`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::GeometryError;

/// Smallest page size accepted: the FTL maps 4 KiB logical pages.
pub const MIN_PAGE_SIZE: u32 = 4096;
/// Largest page size accepted (LFTL's card uses 32 KiB pages).
pub const MAX_PAGE_SIZE: u32 = 32768;
/// Smallest OOB accepted: the FTL needs room for an LPN per slot, a sequence number and a CRC.
pub const MIN_OOB_SIZE: u32 = 64;

/// Shape of the emulated flash. Validate with [`Geometry::validate`] before use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Geometry {
    /// Buses; each carries one transfer at a time.
    pub channels: u32,
    /// Banks (dies/LUNs) on each channel; each performs one operation at a time.
    pub banks_per_channel: u32,
    /// Erase blocks in each bank.
    pub blocks_per_bank: u32,
    /// Pages in each block; they must be programmed in order.
    pub pages_per_block: u32,
    /// Data bytes per page (power of two, 4 KiB to 32 KiB).
    pub page_size: u32,
    /// Spare bytes per page (at least 64, at most `page_size / 8`).
    pub oob_size: u32,
}

impl Geometry {
    /// Checks the sizes are sane and every page is addressable with a `u32` global index.
    pub fn validate(&self) -> Result<(), GeometryError> {
        let counts = [
            ("channels", self.channels),
            ("banks_per_channel", self.banks_per_channel),
            ("blocks_per_bank", self.blocks_per_bank),
            ("pages_per_block", self.pages_per_block),
        ];
        for (field, value) in counts {
            if value == 0 {
                return Err(GeometryError::Zero { field });
            }
        }
        if self.pages_per_block < 2 {
            return Err(GeometryError::PagesPerBlock {
                pages_per_block: self.pages_per_block,
            });
        }
        if !self.page_size.is_power_of_two()
            || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&self.page_size)
        {
            return Err(GeometryError::PageSize {
                page_size: self.page_size,
            });
        }
        if self.oob_size < MIN_OOB_SIZE || self.oob_size > self.page_size / 8 {
            return Err(GeometryError::OobSize {
                oob_size: self.oob_size,
                max: self.page_size / 8,
            });
        }
        // Computed in u64 so the check itself cannot overflow.
        let banks = u64::from(self.channels) * u64::from(self.banks_per_channel);
        let pages = banks * u64::from(self.blocks_per_bank) * u64::from(self.pages_per_block);
        if banks > u64::from(u32::MAX) || pages > u64::from(u32::MAX) {
            return Err(GeometryError::TooLarge { total_pages: pages });
        }
        Ok(())
    }

    /// Number of banks in the device (`channels * banks_per_channel`).
    pub fn banks(&self) -> u32 {
        self.channels.saturating_mul(self.banks_per_channel)
    }

    /// Number of erase blocks in the device.
    pub fn total_blocks(&self) -> u64 {
        u64::from(self.banks()) * u64::from(self.blocks_per_bank)
    }

    /// Number of pages in the device.
    pub fn total_pages(&self) -> u64 {
        self.total_blocks() * u64::from(self.pages_per_block)
    }

    /// Data bytes in one erase block.
    pub fn block_bytes(&self) -> u64 {
        u64::from(self.pages_per_block) * u64::from(self.page_size)
    }

    /// Data bytes in the whole device (OOB not included).
    pub fn raw_capacity(&self) -> u64 {
        self.total_pages() * u64::from(self.page_size)
    }

    /// Channel that carries `bank`'s transfers.
    pub fn channel_of(&self, bank: BankId) -> u32 {
        bank.0 / self.banks_per_channel.max(1)
    }

    /// True when `block` names a block of this geometry.
    pub fn contains_block(&self, block: BlockAddr) -> bool {
        block.bank.0 < self.banks() && block.block < self.blocks_per_bank
    }

    /// True when `page` names a page of this geometry.
    pub fn contains_page(&self, page: PageAddr) -> bool {
        self.contains_block(page.block) && page.page < self.pages_per_block
    }

    /// Global index of a block: banks are laid out one after the other, so a bank's blocks are
    /// contiguous (the image relies on that to give each bank a disjoint region).
    pub fn block_index(&self, block: BlockAddr) -> u64 {
        u64::from(block.bank.0) * u64::from(self.blocks_per_bank) + u64::from(block.block)
    }

    /// Global index of a page (block-major, so a block's pages are contiguous).
    pub fn page_index(&self, page: PageAddr) -> u64 {
        self.block_index(page.block) * u64::from(self.pages_per_block) + u64::from(page.page)
    }
}

/// Global bank index, `0..geometry.banks()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BankId(pub u32);

/// An erase block: `block` is the index inside its bank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockAddr {
    /// The bank holding the block.
    pub bank: BankId,
    /// Block index inside the bank, `0..blocks_per_bank`.
    pub block: u32,
}

/// A page: `page` is the index inside its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PageAddr {
    /// The block holding the page.
    pub block: BlockAddr,
    /// Page index inside the block, `0..pages_per_block`.
    pub page: u32,
}

impl BlockAddr {
    /// Block `block` of bank `bank`.
    pub fn new(bank: u32, block: u32) -> BlockAddr {
        BlockAddr {
            bank: BankId(bank),
            block,
        }
    }

    /// Page `page` of this block.
    pub fn page(self, page: u32) -> PageAddr {
        PageAddr { block: self, page }
    }
}

impl PageAddr {
    /// Page `page` of block `block` of bank `bank`.
    pub fn new(bank: u32, block: u32, page: u32) -> PageAddr {
        BlockAddr::new(bank, block).page(page)
    }
}

impl fmt::Display for BankId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bank {}", self.0)
    }
}

impl fmt::Display for BlockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} block {}", self.bank, self.block)
    }
}

impl fmt::Display for PageAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} page {}", self.block, self.page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            channels: 2,
            banks_per_channel: 2,
            blocks_per_bank: 8,
            pages_per_block: 4,
            page_size: 4096,
            oob_size: 128,
        }
    }

    #[test]
    fn derived_sizes() {
        let g = geo();
        assert_eq!(g.validate(), Ok(()));
        assert_eq!(g.banks(), 4);
        assert_eq!(g.total_blocks(), 32);
        assert_eq!(g.total_pages(), 128);
        assert_eq!(g.block_bytes(), 16384);
        assert_eq!(g.raw_capacity(), 128 * 4096);
        assert_eq!(g.channel_of(BankId(3)), 1);
        assert_eq!(g.page_index(PageAddr::new(1, 2, 3)), (8 + 2) * 4 + 3);
    }

    #[test]
    fn rejects_bad_shapes() {
        let bad = [
            Geometry {
                channels: 0,
                ..geo()
            },
            Geometry {
                pages_per_block: 1,
                ..geo()
            },
            Geometry {
                page_size: 2048,
                ..geo()
            },
            Geometry {
                page_size: 6000,
                ..geo()
            },
            Geometry {
                page_size: 65536,
                ..geo()
            },
            Geometry {
                oob_size: 32,
                ..geo()
            },
            Geometry {
                oob_size: 1024,
                ..geo()
            },
            Geometry {
                blocks_per_bank: u32::MAX,
                ..geo()
            },
        ];
        for g in bad {
            assert!(g.validate().is_err(), "{g:?} accepted");
        }
    }
}
