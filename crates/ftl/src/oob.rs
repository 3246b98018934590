//! The FTL's out-of-band (spare area) record, written with every NAND page.
//!
//! The OOB is what makes crash recovery possible: every data slot names its logical page and the
//! sequence number of the write that produced it, so a scan can rebuild the map ("highest sequence
//! number wins") and a torn page is detected by the checksums. Layout, little-endian:
//!
//! ```text
//! 0..4    crc32 of bytes 4..end            (an erased or torn OOB fails it)
//! 4       page kind: 1 data, 2 checkpoint, 3 superblock
//! 5       slot count (data pages)
//! 6..8    reserved
//! data:        per slot i at 8 + 20 i: kind u8 (0 pad, 1 data, 2 trim log), 3 reserved,
//!              lpn u32, seq u64, crc32 of the slot's 4 KiB
//! checkpoint:  8: checkpoint id u64, 16: page index u32, 20: page count u32, 24: crc32 of the page
//! superblock:  8: crc32 of the page
//! ```

use crate::layout::Lpn;

const HDR: usize = 8;
const SLOT: usize = 20;

/// OOB bytes needed for a data page with `slots` slots.
pub const fn data_oob_len(slots: u32) -> usize {
    HDR + SLOT * slots as usize
}

/// What a slot of a data page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// Padding written when a partly filled page had to be programmed (flush, FUA).
    Pad,
    /// Host data (or a garbage-collection copy of it, which keeps the original sequence number).
    Data,
    /// A block of trim/write-zeroes records (see `trimlog`).
    TrimLog,
}

/// One slot's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotMeta {
    pub kind: SlotKind,
    pub lpn: Lpn,
    pub seq: u64,
    pub crc: u32,
}

impl SlotMeta {
    pub const PAD: SlotMeta = SlotMeta {
        kind: SlotKind::Pad,
        lpn: Lpn(0),
        seq: 0,
        crc: 0,
    };
}

/// A decoded OOB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageOob {
    Data(Vec<SlotMeta>),
    Checkpoint {
        id: u64,
        index: u32,
        count: u32,
        crc: u32,
    },
    Superblock {
        crc: u32,
    },
}

fn seal(buf: &mut [u8]) {
    let crc = crc32fast::hash(&buf[4..]);
    buf[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes a data page's OOB into `buf` (whose length is the device's OOB size).
pub fn encode_data(buf: &mut [u8], slots: &[SlotMeta]) {
    buf.fill(0);
    buf[4] = 1;
    buf[5] = slots.len() as u8;
    for (i, s) in slots.iter().enumerate() {
        let o = HDR + SLOT * i;
        buf[o] = match s.kind {
            SlotKind::Pad => 0,
            SlotKind::Data => 1,
            SlotKind::TrimLog => 2,
        };
        buf[o + 4..o + 8].copy_from_slice(&s.lpn.0.to_le_bytes());
        buf[o + 8..o + 16].copy_from_slice(&s.seq.to_le_bytes());
        buf[o + 16..o + 20].copy_from_slice(&s.crc.to_le_bytes());
    }
    seal(buf);
}

/// Encodes a checkpoint page's OOB.
pub fn encode_checkpoint(buf: &mut [u8], id: u64, index: u32, count: u32, crc: u32) {
    buf.fill(0);
    buf[4] = 2;
    buf[8..16].copy_from_slice(&id.to_le_bytes());
    buf[16..20].copy_from_slice(&index.to_le_bytes());
    buf[20..24].copy_from_slice(&count.to_le_bytes());
    buf[24..28].copy_from_slice(&crc.to_le_bytes());
    seal(buf);
}

/// Encodes the superblock page's OOB.
pub fn encode_superblock(buf: &mut [u8], crc: u32) {
    buf.fill(0);
    buf[4] = 3;
    buf[8..12].copy_from_slice(&crc.to_le_bytes());
    seal(buf);
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// OOB bytes a read must fetch to check slot `slot` of a data page (header and entries up to
/// the slot's; at most `data_oob_len(8)` = 168 bytes with 32 KiB pages).
pub const fn slot_entry_len(slot: u32) -> usize {
    data_oob_len(slot + 1)
}

/// Slot `slot`'s entry of a data page's OOB, from its first [`slot_entry_len`] bytes, without
/// the OOB's own checksum (which covers bytes a host read does not fetch): the entry's data
/// CRC is what a read checks, and a corrupt entry fails that check too (a random corruption
/// matches it with probability 2^-32). `None`: not a data page, or no such slot.
pub fn slot_entry(buf: &[u8], slot: u32) -> Option<SlotMeta> {
    let o = HDR + SLOT * slot as usize;
    if buf.len() < o + SLOT || buf[4] != 1 || slot >= u32::from(buf[5]) {
        return None;
    }
    let kind = match buf[o] {
        0 => SlotKind::Pad,
        1 => SlotKind::Data,
        2 => SlotKind::TrimLog,
        _ => return None,
    };
    Some(SlotMeta {
        kind,
        lpn: Lpn(u32_at(buf, o + 4)),
        seq: u64_at(buf, o + 8),
        crc: u32_at(buf, o + 16),
    })
}

/// Decodes an OOB of a page of `slots_per_page` slots; `None` when it is erased, torn or not
/// ours. A data page's OOB lists one entry per slot (a padding slot too): an OOB that lists
/// more than the page holds is not ours either, even with a valid checksum (each entry names a
/// slot address that recovery and GC would map, so a hostile count would point logical pages
/// at the next page's slots, or past the device's last slot).
pub fn decode(buf: &[u8], slots_per_page: u32) -> Option<PageOob> {
    if buf.len() < 32 || u32_at(buf, 0) != crc32fast::hash(&buf[4..]) {
        return None;
    }
    match buf[4] {
        1 => {
            let n = buf[5] as usize;
            if data_oob_len(n as u32) > buf.len() || n > slots_per_page as usize {
                return None;
            }
            let mut slots = Vec::with_capacity(n);
            for i in 0..n {
                let o = HDR + SLOT * i;
                let kind = match buf[o] {
                    0 => SlotKind::Pad,
                    1 => SlotKind::Data,
                    2 => SlotKind::TrimLog,
                    _ => return None,
                };
                slots.push(SlotMeta {
                    kind,
                    lpn: Lpn(u32_at(buf, o + 4)),
                    seq: u64_at(buf, o + 8),
                    crc: u32_at(buf, o + 16),
                });
            }
            Some(PageOob::Data(slots))
        }
        2 => Some(PageOob::Checkpoint {
            id: u64_at(buf, 8),
            index: u32_at(buf, 16),
            count: u32_at(buf, 20),
            crc: u32_at(buf, 24),
        }),
        3 => Some(PageOob::Superblock {
            crc: u32_at(buf, 8),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_torn() {
        let mut b = vec![0u8; 256];
        let slots = vec![
            SlotMeta {
                kind: SlotKind::Data,
                lpn: Lpn(7),
                seq: 99,
                crc: 5,
            },
            SlotMeta::PAD,
            SlotMeta {
                kind: SlotKind::TrimLog,
                lpn: Lpn(0),
                seq: 100,
                crc: 6,
            },
        ];
        encode_data(&mut b, &slots);
        assert_eq!(decode(&b, 3), Some(PageOob::Data(slots.clone())));
        assert_eq!(decode(&b, 2), None, "more entries than the page has slots");
        for (i, s) in slots.iter().enumerate() {
            let i = i as u32;
            assert_eq!(slot_entry(&b[..slot_entry_len(i)], i), Some(*s));
            assert_eq!(slot_entry(&b[..slot_entry_len(i) - 1], i), None);
        }
        assert_eq!(slot_entry(&b, 3), None, "past the page's slot count");
        assert_eq!(slot_entry(&[0xff; 64], 0), None, "erased");
        b[30] ^= 1;
        assert_eq!(decode(&b, 3), None);
        assert_eq!(decode(&[0xff; 256], 3), None);
        encode_checkpoint(&mut b, 3, 4, 5, 6);
        assert_eq!(
            decode(&b, 1),
            Some(PageOob::Checkpoint {
                id: 3,
                index: 4,
                count: 5,
                crc: 6
            })
        );
    }
}
