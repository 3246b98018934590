//! Small devices for the crate's own unit tests.

use nand_model::{Geometry, NandConfig};

/// A small SLC device: 4 KiB pages, 8 pages per block, the default timing (tests override it).
pub(crate) fn small_nand(
    channels: u32,
    banks_per_channel: u32,
    blocks_per_bank: u32,
) -> NandConfig {
    NandConfig {
        geometry: Geometry {
            channels,
            banks_per_channel,
            blocks_per_bank,
            pages_per_block: 8,
            page_size: 4096,
            oob_size: 256,
        },
        timing: nand_model::Timing::default(),
        endurance: 100_000,
        interconnect: Default::default(),
        planes: 1,
    }
}
