//! The image file's 4 KiB header and the file layout it implies.
//!
//! Header (all integers little-endian, explicit offsets so the format never depends on Rust's
//! struct layout):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `FTLDNAND` |
//! | 8 | 4 | format version (2; 3 for a PMCD device; 4 for a multi-level cell or read-retry device; 1 had no frame table) |
//! | 12 | 4 | header size (4096) |
//! | 16 | 4 x 6 | channels, banks_per_channel, blocks_per_bank, pages_per_block, page_size, oob_size |
//! | 40 | 4 | endurance (P/E cycles) |
//! | 44 | 4 | versions 3 and 4: the number of PMCD controllers, 0 for TMCD (version 3 is always PMCD); version 2: 0 |
//! | 48 | 8 x 4 | t_read, t_prog, t_erase (ns), channel bytes/s |
//! | 80 | 16 | uuid |
//! | 96 | 8 | creation time, ns since the Unix epoch |
//! | 104 | 4 | version 4: bits per cell (1-4); earlier: 0 (SLC) |
//! | 108 | 4 x 2 | version 4: read-retry P/E cycles per step (0: off), most steps |
//! | 116 | 4 | version 4: feature flags (bit 0: reads suspend programs and erases); other bits must be 0 |
//! | 120 | 8 x 3 | version 4: t_read of the CSB, MSB, TSB pages (ns; 0 past the cell's types) |
//! | 144 | 8 x 3 | version 4: t_prog of the same |
//! | 168 | 8 x 2 | version 4: t_suspend, t_resume (ns) |
//! | 184 | 4 | version 4: planes per bank (1-16) |
//! | 188 | .. | zero up to 4092 |
//! | 4092 | 4 | crc32 (crc32fast) of bytes 0..4092 |
//!
//! Decoding checks, in order: length, magic, version (before the CRC, since another version may
//! place its CRC elsewhere), CRC, header size, geometry validity. It never panics on any input.

use std::time::Duration;

use crate::config::NandConfig;
use crate::error::GeometryError;
use crate::geometry::Geometry;
use crate::interconnect::Interconnect;
use crate::timing::{dur_ns, CellTiming, CellType, ReadRetry, Suspend, Timing};

/// Bytes reserved for the header at the start of the file.
pub(crate) const HEADER_SIZE: usize = 4096;
/// `b"FTLDNAND"`.
pub(crate) const MAGIC: [u8; 8] = *b"FTLDNAND";
/// The format version of a TMCD device's image (and the oldest this build reads).
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The format version of a PMCD device's image: builds that predate the interconnect would
/// ignore bytes 44..48 and time it as TMCD, so they must refuse it instead.
pub(crate) const FORMAT_VERSION_PMCD: u32 = 3;
/// The format version of a device with multi-level cells or read-retry (either interconnect):
/// older builds would time it as SLC without retry, so they must refuse it. A device without
/// them keeps version 2 or 3, which older builds still open.
pub(crate) const FORMAT_VERSION_CELLS: u32 = 4;
/// Bytes of one block-table entry: erase_count, flags, programmed_pages, reserved (u32 each).
pub(crate) const BLOCK_ENTRY_SIZE: u64 = 16;
/// Bytes of one frame-table entry (see `bankmem.rs`).
pub(crate) const FRAME_ENTRY_SIZE: u64 = 4;
/// Alignment of every region in the file.
const REGION_ALIGN: u64 = 4096;
const CRC_OFFSET: usize = HEADER_SIZE - 4;

/// What a header holds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Header {
    pub(crate) config: NandConfig,
    pub(crate) uuid: [u8; 16],
    pub(crate) created_unix_ns: u64,
}

/// Why header bytes were refused (the caller adds the path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderError {
    Short { actual: usize },
    BadMagic,
    Version { found: u32 },
    Checksum { stored: u32, computed: u32 },
    HeaderSize { found: u32 },
    Geometry(GeometryError),
}

/// Byte offsets of the regions of an image file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Block table: `total_blocks` entries of [`BLOCK_ENTRY_SIZE`] bytes.
    pub(crate) block_table: u64,
    /// Frame table: `total_pages` entries of [`FRAME_ENTRY_SIZE`] bytes, page-index order.
    pub(crate) frames: u64,
    /// Page data: `total_pages` frames of `page_size` bytes, bank-major (a bank's pages use
    /// only that bank's frames).
    pub(crate) data: u64,
    /// OOB: `total_pages * oob_size` bytes, page-index order.
    pub(crate) oob: u64,
    /// Total file length.
    pub(crate) len: u64,
}

fn align_up(x: u64) -> u64 {
    x.div_ceil(REGION_ALIGN) * REGION_ALIGN
}

impl Layout {
    /// Layout for a geometry that passed `validate()` (sizes then fit in u64 easily: at most
    /// 2^32 pages of 32 KiB).
    pub(crate) fn of(g: &Geometry) -> Layout {
        let block_table = HEADER_SIZE as u64;
        let frames = block_table + align_up(g.total_blocks() * BLOCK_ENTRY_SIZE);
        let data = frames + align_up(g.total_pages() * FRAME_ENTRY_SIZE);
        let oob = data + align_up(g.total_pages() * u64::from(g.page_size));
        let len = oob + align_up(g.total_pages() * u64::from(g.oob_size));
        Layout {
            block_table,
            frames,
            data,
            oob,
            len,
        }
    }
}

struct Writer<'a>(&'a mut [u8]);

impl Writer<'_> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.0[at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// Encodes a header into exactly [`HEADER_SIZE`] bytes.
pub(crate) fn encode(h: &Header) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_SIZE];
    let g = &h.config.geometry;
    let t = &h.config.timing;
    let mut w = Writer(&mut buf);
    w.put(0, &MAGIC);
    let cells = t.cell != CellTiming::default()
        || t.read_retry != ReadRetry::default()
        || t.suspend != Suspend::default()
        || h.config.planes != 1;
    let version = match h.config.interconnect {
        _ if cells => FORMAT_VERSION_CELLS,
        Interconnect::Tmcd => FORMAT_VERSION,
        Interconnect::Pmcd { .. } => FORMAT_VERSION_PMCD,
    };
    w.put(8, &version.to_le_bytes());
    w.put(12, &(HEADER_SIZE as u32).to_le_bytes());
    let counts = [
        g.channels,
        g.banks_per_channel,
        g.blocks_per_bank,
        g.pages_per_block,
        g.page_size,
        g.oob_size,
        h.config.endurance,
    ];
    for (i, v) in counts.iter().enumerate() {
        w.put(16 + 4 * i, &v.to_le_bytes());
    }
    if let Interconnect::Pmcd { controllers } = h.config.interconnect {
        w.put(44, &controllers.to_le_bytes());
    }
    let times = [
        dur_ns(t.t_read),
        dur_ns(t.t_prog),
        dur_ns(t.t_erase),
        t.channel_bytes_per_sec,
    ];
    for (i, v) in times.iter().enumerate() {
        w.put(48 + 8 * i, &v.to_le_bytes());
    }
    w.put(80, &h.uuid);
    w.put(96, &h.created_unix_ns.to_le_bytes());
    if cells {
        w.put(104, &t.cell.kind.bits().to_le_bytes());
        w.put(108, &t.read_retry.every_pe_cycles.to_le_bytes());
        w.put(112, &t.read_retry.max_steps.to_le_bytes());
        for (i, d) in t.cell.t_read_upper.iter().enumerate() {
            w.put(120 + 8 * i, &dur_ns(*d).to_le_bytes());
        }
        for (i, d) in t.cell.t_prog_upper.iter().enumerate() {
            w.put(144 + 8 * i, &dur_ns(*d).to_le_bytes());
        }
        w.put(116, &u32::from(t.suspend.enabled).to_le_bytes());
        w.put(168, &dur_ns(t.suspend.t_suspend).to_le_bytes());
        w.put(176, &dur_ns(t.suspend.t_resume).to_le_bytes());
        w.put(184, &h.config.planes.to_le_bytes());
    }
    let crc = crc32fast::hash(&buf[..CRC_OFFSET]);
    buf[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    buf
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes and checks header bytes (the first [`HEADER_SIZE`] bytes of `b` are used).
pub(crate) fn decode(b: &[u8]) -> Result<Header, HeaderError> {
    if b.len() < HEADER_SIZE {
        return Err(HeaderError::Short { actual: b.len() });
    }
    let b = &b[..HEADER_SIZE];
    if b[..8] != MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let version = u32_at(b, 8);
    if ![FORMAT_VERSION, FORMAT_VERSION_PMCD, FORMAT_VERSION_CELLS].contains(&version) {
        return Err(HeaderError::Version { found: version });
    }
    let stored = u32_at(b, CRC_OFFSET);
    let computed = crc32fast::hash(&b[..CRC_OFFSET]);
    if stored != computed {
        return Err(HeaderError::Checksum { stored, computed });
    }
    if u32_at(b, 12) as usize != HEADER_SIZE {
        return Err(HeaderError::HeaderSize {
            found: u32_at(b, 12),
        });
    }
    let geometry = Geometry {
        channels: u32_at(b, 16),
        banks_per_channel: u32_at(b, 20),
        blocks_per_bank: u32_at(b, 24),
        pages_per_block: u32_at(b, 28),
        page_size: u32_at(b, 32),
        oob_size: u32_at(b, 36),
    };
    geometry.validate().map_err(HeaderError::Geometry)?;
    // Version 2 has no interconnect (TMCD); version 3 is PMCD, with its controller count here;
    // version 4 has the count or 0 for TMCD.
    let interconnect = match (version, u32_at(b, 44)) {
        (FORMAT_VERSION, _) | (FORMAT_VERSION_CELLS, 0) => Interconnect::Tmcd,
        (_, controllers) => Interconnect::Pmcd { controllers },
    };
    interconnect.validate().map_err(HeaderError::Geometry)?;
    let mut planes = 1;
    let mut timing = Timing {
        t_read: Duration::from_nanos(u64_at(b, 48)),
        t_prog: Duration::from_nanos(u64_at(b, 56)),
        t_erase: Duration::from_nanos(u64_at(b, 64)),
        channel_bytes_per_sec: u64_at(b, 72),
        ..Timing::default()
    };
    if version == FORMAT_VERSION_CELLS {
        let bits = u32_at(b, 104);
        let kind = CellType::from_bits(bits).ok_or_else(|| {
            HeaderError::Geometry(GeometryError::Cell {
                reason: format!("{bits} bits per cell; 1 to 4 are modelled"),
            })
        })?;
        let ns3 = |at: usize| [0, 1, 2].map(|i| Duration::from_nanos(u64_at(b, at + 8 * i)));
        timing.cell = CellTiming {
            kind,
            t_read_upper: ns3(120),
            t_prog_upper: ns3(144),
        };
        timing.read_retry = ReadRetry {
            every_pe_cycles: u32_at(b, 108),
            max_steps: u32_at(b, 112),
        };
        let flags = u32_at(b, 116);
        if flags & !1 != 0 {
            return Err(HeaderError::Geometry(GeometryError::Flags { flags }));
        }
        timing.suspend = Suspend {
            enabled: flags & 1 != 0,
            t_suspend: Duration::from_nanos(u64_at(b, 168)),
            t_resume: Duration::from_nanos(u64_at(b, 176)),
        };
        planes = u32_at(b, 184);
    }
    // Every version's latencies are bounded (versions 2 and 3 have only the first four).
    timing.validate().map_err(HeaderError::Geometry)?;
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&b[80..96]);
    let config = NandConfig {
        geometry,
        timing,
        endurance: u32_at(b, 40),
        interconnect,
        planes,
    };
    config.validate_planes().map_err(HeaderError::Geometry)?;
    Ok(Header {
        config,
        uuid,
        created_unix_ns: u64_at(b, 96),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;
    use proptest::prelude::*;

    fn sample() -> Header {
        Header {
            config: preset("k9-003").map(|p| p.config).unwrap(),
            uuid: *b"0123456789abcdef",
            created_unix_ns: 1_700_000_000_000_000_000,
        }
    }

    #[test]
    fn roundtrip() {
        let h = sample();
        let bytes = encode(&h);
        assert_eq!(bytes.len(), HEADER_SIZE);
        assert_eq!(decode(&bytes), Ok(h));
    }

    #[test]
    fn interconnect_roundtrips_and_is_validated() {
        let mut h = sample();
        h.config.interconnect = Interconnect::Pmcd { controllers: 3 };
        assert_eq!(decode(&encode(&h)), Ok(h.clone()));
        assert_eq!(u32_at(&encode(&h), 8), FORMAT_VERSION_PMCD);
        assert_eq!(u32_at(&encode(&sample()), 8), FORMAT_VERSION);
        // A hostile count with a valid CRC is refused.
        let mut bytes = encode(&h);
        bytes[44..48].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32fast::hash(&bytes[..CRC_OFFSET]);
        bytes[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&bytes),
            Err(HeaderError::Geometry(GeometryError::Controllers { .. }))
        ));
        // Version 3 (PMCD) with no controllers is refused too.
        bytes[44..48].copy_from_slice(&0u32.to_le_bytes());
        let crc = crc32fast::hash(&bytes[..CRC_OFFSET]);
        bytes[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&bytes),
            Err(HeaderError::Geometry(GeometryError::Controllers { .. }))
        ));
    }

    fn recrc(bytes: &mut [u8]) {
        let crc = crc32fast::hash(&bytes[..CRC_OFFSET]);
        bytes[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn cells_and_read_retry_roundtrip_as_version_4() {
        for name in ["tlc", "qlc", "nvmevirt-970pro"] {
            let mut h = sample();
            h.config = preset(name).unwrap().config;
            let bytes = encode(&h);
            assert_eq!(u32_at(&bytes, 8), FORMAT_VERSION_CELLS, "{name}");
            assert_eq!(decode(&bytes), Ok(h.clone()));
            h.config.interconnect = Interconnect::Pmcd { controllers: 2 };
            assert_eq!(decode(&encode(&h)), Ok(h.clone()));
        }
        // Read-retry alone on an SLC part is version 4 too.
        let mut h = sample();
        h.config.timing.read_retry = ReadRetry {
            every_pe_cycles: 100,
            max_steps: 4,
        };
        assert_eq!(u32_at(&encode(&h), 8), FORMAT_VERSION_CELLS);
        assert_eq!(decode(&encode(&h)), Ok(h.clone()));
        // Suspend alone is version 4 too, and round-trips.
        let mut hs = sample();
        hs.config.timing.suspend = Suspend {
            enabled: true,
            t_suspend: Duration::from_micros(20),
            t_resume: Duration::from_micros(15),
        };
        assert_eq!(u32_at(&encode(&hs), 8), FORMAT_VERSION_CELLS);
        assert_eq!(decode(&encode(&hs)), Ok(hs));
        // So are planes.
        let mut hp = sample();
        hp.config.planes = 2;
        assert_eq!(u32_at(&encode(&hp), 8), FORMAT_VERSION_CELLS);
        assert_eq!(decode(&encode(&hp)), Ok(hp.clone()));
        for planes in [0u32, 17] {
            let mut bad = encode(&hp);
            bad[184..188].copy_from_slice(&planes.to_le_bytes());
            recrc(&mut bad);
            assert!(matches!(
                decode(&bad),
                Err(HeaderError::Geometry(GeometryError::Planes { .. }))
            ));
        }
        // Hostile fields with a valid CRC are refused, each with its reason.
        let good = encode(&h);
        let mut bad = good.clone();
        bad[116..120].copy_from_slice(&2u32.to_le_bytes());
        recrc(&mut bad);
        assert!(matches!(
            decode(&bad),
            Err(HeaderError::Geometry(GeometryError::Flags { .. }))
        ));
        let mut bad = good.clone();
        bad[104..108].copy_from_slice(&5u32.to_le_bytes());
        recrc(&mut bad);
        assert!(matches!(
            decode(&bad),
            Err(HeaderError::Geometry(GeometryError::Cell { .. }))
        ));
        let mut bad = good.clone();
        bad[120..128].copy_from_slice(&1000u64.to_le_bytes()); // an MSB time on an SLC part
        recrc(&mut bad);
        assert!(matches!(
            decode(&bad),
            Err(HeaderError::Geometry(GeometryError::Cell { .. }))
        ));
        let mut bad = good;
        bad[112..116].copy_from_slice(&u32::MAX.to_le_bytes());
        recrc(&mut bad);
        assert!(matches!(
            decode(&bad),
            Err(HeaderError::Geometry(GeometryError::ReadRetrySteps { .. }))
        ));
    }

    #[test]
    fn layout_regions_are_aligned_and_ordered() {
        let g = sample().config.geometry;
        let l = Layout::of(&g);
        assert_eq!(l.block_table, 4096);
        assert!(l.data >= l.block_table + g.total_blocks() * BLOCK_ENTRY_SIZE);
        assert_eq!(l.oob - l.data, g.raw_capacity());
        assert!(l.len >= l.oob + g.total_pages() * u64::from(g.oob_size));
        for off in [l.data, l.oob, l.len] {
            assert_eq!(off % 4096, 0);
        }
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn random_bytes_after_magic_are_refused(mut bytes in proptest::collection::vec(any::<u8>(), HEADER_SIZE)) {
            bytes[..8].copy_from_slice(&MAGIC);
            bytes[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
            // Without a matching CRC nothing random gets through.
            prop_assert!(decode(&bytes).is_err());
        }

        #[test]
        fn single_bit_flips_are_detected(bit in 0usize..HEADER_SIZE * 8) {
            let mut bytes = encode(&sample());
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode(&bytes).is_err());
        }
    }
}
