//! The full description of an emulated device: geometry, timing and endurance.

use serde::{Deserialize, Serialize};

use crate::geometry::Geometry;
use crate::interconnect::Interconnect;
use crate::timing::Timing;

/// Fewest blocks per bank [`NandConfig::scaled_to`] will produce: an FTL needs a few spare blocks
/// per bank (open frontier, GC target, reserve) on top of data blocks.
pub const MIN_SCALED_BLOCKS_PER_BANK: u32 = 8;

/// Everything stored in an image header about the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NandConfig {
    /// Shape of the flash.
    pub geometry: Geometry,
    /// Latencies and channel speed.
    pub timing: Timing,
    /// Program/erase cycles a block survives: an erase of a block whose erase count has reached
    /// this value fails with [`crate::NandError::WornOut`] and the block turns bad.
    pub endurance: u32,
    /// How controllers reach banks (TMCD unless set; absent in JSON written before it).
    #[serde(default)]
    pub interconnect: Interconnect,
    /// Planes per bank: block `b` of a bank is in plane `b % planes`, and a multi-plane
    /// program or read ([`crate::NandDevice::program_planes`], `read_planes`) works on one page
    /// in each of up to `planes` planes at the same page index for one array time. 1 unless set
    /// (absent in JSON written before it).
    #[serde(default = "one_plane")]
    pub planes: u32,
}

fn one_plane() -> u32 {
    1
}

/// Most planes per bank a device may have.
pub const MAX_PLANES: u32 = 16;

impl NandConfig {
    /// Checks what the geometry and timing do not: the plane count (1 to [`MAX_PLANES`], at
    /// most the blocks per bank).
    pub fn validate_planes(&self) -> Result<(), crate::GeometryError> {
        if self.planes == 0 || self.planes > MAX_PLANES.min(self.geometry.blocks_per_bank) {
            return Err(crate::GeometryError::Planes {
                planes: self.planes,
                max: MAX_PLANES.min(self.geometry.blocks_per_bank),
            });
        }
        Ok(())
    }
}

impl NandConfig {
    /// The same device with `blocks_per_bank` changed so the raw data capacity is as close to
    /// `raw_capacity_bytes` as possible without exceeding it, but never below
    /// [`MIN_SCALED_BLOCKS_PER_BANK`] blocks per bank. Page size, block size, bank/channel layout
    /// and timing stay, so a preset's performance character is kept at any size.
    pub fn scaled_to(&self, raw_capacity_bytes: u64) -> NandConfig {
        let g = self.geometry;
        let per_block_row = u64::from(g.banks().max(1)) * g.block_bytes().max(1);
        // Keep total pages addressable with u32 (Geometry::validate's limit).
        let max_by_pages = u64::from(u32::MAX)
            / (u64::from(g.banks().max(1)) * u64::from(g.pages_per_block.max(1)));
        let blocks = (raw_capacity_bytes / per_block_row)
            .min(max_by_pages)
            .max(u64::from(MIN_SCALED_BLOCKS_PER_BANK));
        let mut out = *self;
        out.geometry.blocks_per_bank = u32::try_from(blocks).unwrap_or(u32::MAX);
        out
    }
}
