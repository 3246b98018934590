//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz): each decodes bytes as the FTL
//! decodes what it reads from the medium, and must never panic. Not an API.

use nand_model::Geometry;

/// A small geometry for decoders that check fields against the device.
fn geometry(page_size: u32) -> Geometry {
    Geometry {
        channels: 2,
        banks_per_channel: 2,
        blocks_per_bank: 64,
        pages_per_block: 32,
        page_size,
        oob_size: 128,
    }
}

/// The superblock page decoder and its field validation.
pub fn superblock(data: &[u8]) {
    let _ = crate::checkpoint::SuperBlock::decode(data, &geometry(4096));
}

/// The checkpoint decoder (header, map chunks, block table, trim records), streaming over
/// pages: whole, and cut into 7-byte pieces (words straddling pieces).
pub fn checkpoint(data: &[u8]) {
    let _ = crate::checkpoint::decode(data, 4096);
    let _ = crate::checkpoint::decode(data, 7);
}

/// The OOB record decoder (data slots, checkpoint and superblock pages) and the per-slot
/// entry reader used on the read path.
pub fn oob(data: &[u8]) {
    let _ = crate::oob::decode(data, 8);
    let _ = crate::oob::decode(data, 1);
    for slot in 0..8 {
        let _ = crate::oob::slot_entry(data, slot);
    }
}
