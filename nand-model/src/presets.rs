//! Named device presets taken from the papers in `shared/papers/`, with capacities scaled to fit a
//! test machine (raw 256 MiB to 1 GiB). Use [`NandConfig::scaled_to`] for another size: it keeps
//! page/block shape, bank layout and timing.

use std::time::Duration;

use serde::Serialize;

use crate::config::NandConfig;
use crate::geometry::Geometry;
use crate::timing::{CellTiming, CellType, ReadRetry, Timing};

const MIB: u64 = 1 << 20;

/// A named configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Preset {
    /// Name used on command lines and in config files.
    pub name: &'static str,
    /// Where the numbers come from and what was changed.
    pub description: &'static str,
    /// The device.
    pub config: NandConfig,
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// 4 channels x 4 banks with the given page shape; blocks are filled in by `scaled_to`.
fn config(
    page_size: u32,
    pages_per_block: u32,
    oob_size: u32,
    (t_read, t_prog, t_erase): (u64, u64, u64),
    channel_bytes_per_sec: u64,
    endurance: u32,
    raw: u64,
) -> NandConfig {
    NandConfig {
        geometry: Geometry {
            channels: 4,
            banks_per_channel: 4,
            blocks_per_bank: 1,
            pages_per_block,
            page_size,
            oob_size,
        },
        timing: Timing {
            t_read: us(t_read),
            t_prog: us(t_prog),
            t_erase: us(t_erase),
            channel_bytes_per_sec,
            ..Timing::default()
        },
        endurance,
        interconnect: Default::default(),
        planes: 1,
    }
    .scaled_to(raw)
}

/// A multi-level cell part: `channels x banks` banks, latencies in microseconds (fractions
/// allowed) by page type, LSB first (`reads.len()` page types).
struct Mlc {
    channels: u32,
    banks_per_channel: u32,
    page_size: u32,
    pages_per_block: u32,
    oob_size: u32,
    reads: &'static [f64],
    progs: &'static [f64],
    t_erase: u64,
    channel_bytes_per_sec: u64,
    endurance: u32,
    read_retry: ReadRetry,
    raw: u64,
}

fn us_f(x: f64) -> Duration {
    Duration::from_nanos((x * 1000.0).round() as u64)
}

impl Mlc {
    fn config(&self) -> NandConfig {
        let bits = self.reads.len() as u32;
        let upper = |v: &[f64]| {
            let mut out = [Duration::ZERO; 3];
            for (o, &x) in out.iter_mut().zip(&v[1..]) {
                *o = us_f(x);
            }
            out
        };
        NandConfig {
            geometry: Geometry {
                channels: self.channels,
                banks_per_channel: self.banks_per_channel,
                blocks_per_bank: 1,
                pages_per_block: self.pages_per_block,
                page_size: self.page_size,
                oob_size: self.oob_size,
            },
            timing: Timing {
                t_read: us_f(self.reads[0]),
                t_prog: us_f(self.progs[0]),
                t_erase: us(self.t_erase),
                channel_bytes_per_sec: self.channel_bytes_per_sec,
                cell: CellTiming {
                    kind: CellType::from_bits(bits).unwrap_or_default(),
                    t_read_upper: upper(self.reads),
                    t_prog_upper: upper(self.progs),
                },
                read_retry: self.read_retry,
                suspend: Default::default(),
            },
            endurance: self.endurance,
            interconnect: Default::default(),
            planes: 1,
        }
        .scaled_to(self.raw)
    }
}

fn board_000(raw: u64) -> NandConfig {
    config(4096, 128, 128, (60, 800, 1500), 200_000_000, 10_000, raw)
}

/// All presets, `default` first.
pub fn presets() -> Vec<Preset> {
    vec![
        Preset {
            name: "default",
            description: "board-000 at 512 MiB raw.",
            config: board_000(512 * MIB),
        },
        Preset {
            name: "board-000",
            description: "Kim & Shin's uC/OS-II board (paper 000): 4 KiB page, 128 pages/block \
                (512 KiB), read 60 us, program 800 us, erase 1.5 ms. Not from the paper: 4 \
                channels x 4 banks, 200 MB/s channels, 128 B OOB, 10k P/E cycles, 512 MiB raw.",
            config: board_000(512 * MIB),
        },
        Preset {
            name: "lftl-card",
            description: "LFTL's PCIe SLC card (paper 001): 32 KiB page, 64 pages/block (2 MiB), \
                512 B user spare per page, 100k P/E cycles. SLC-like 25/200/1500 us and 300 MB/s \
                channels (a lone bank then writes ~82 MB/s as the paper measures); 4 channels x 4 \
                banks instead of the card's 4 x 16, 1 GiB raw.",
            config: config(
                32768,
                64,
                512,
                (25, 200, 1500),
                300_000_000,
                100_000,
                1024 * MIB,
            ),
        },
        Preset {
            name: "k9-003",
            description:
                "Sung's multi-controller SSD (paper 003): 4 KiB page, 64 pages/block, read \
                25 us, program 200 us, erase 1.5 ms, 50 us to transfer a page (81.92 MB/s); 16 \
                banks as 4 channels x 4 (paper: 4 buses x 2 chips x 2 dies), 128 B OOB, 100k P/E \
                cycles, 256 MiB raw.",
            config: config(
                4096,
                64,
                128,
                (25, 200, 1500),
                81_920_000,
                100_000,
                256 * MIB,
            ),
        },
        Preset {
            name: "slc-small-004",
            description: "RFTL Table 1 Samsung 16 MB small-block part (paper 004): read 36 us, \
                program 200 us, erase 2 ms, 32 pages/block. Page size raised from 512 B to 4 KiB \
                (OOB 16 B -> 128 B, same ratio); the table's times are kept as array times and \
                the channel is 200 MB/s. 4 channels x 4 banks, 100k P/E cycles, 256 MiB raw.",
            config: config(
                4096,
                32,
                128,
                (36, 200, 2000),
                200_000_000,
                100_000,
                256 * MIB,
            ),
        },
        Preset {
            name: "slc-large-004",
            description: "RFTL Table 1 Samsung 128 MB large-block part (paper 004): read 25 us, \
                program 300 us, erase 2 ms, 32 pages/block. Page size raised from 2 KiB to 4 KiB \
                (OOB 64 B -> 128 B); channel 200 MB/s. 4 channels x 4 banks, 100k P/E cycles, \
                256 MiB raw.",
            config: config(
                4096,
                32,
                128,
                (25, 300, 2000),
                200_000_000,
                100_000,
                256 * MIB,
            ),
        },
        Preset {
            name: "nvmevirt-970pro",
            description: "NVMeVirt's SAMSUNG_970PRO configuration (the drive's V-NAND is 2-bit \
                MLC, as NVMeVirt models it): 8 channels x 2 dies, 32 KiB page, read 30.0 us LSB / \
                42.0 us MSB (NVMeVirt's 36.013 us -/+ 6 us), program 185 us, 800 MB/s channels. \
                Not from NVMeVirt: erase 3 ms (it models 0), 64 pages/block (2 MiB), 512 B OOB, \
                5000 P/E cycles, 1 GiB raw.",
            config: Mlc {
                channels: 8,
                banks_per_channel: 2,
                page_size: 32768,
                pages_per_block: 64,
                oob_size: 512,
                reads: &[30.013, 42.013],
                progs: &[185.0, 185.0],
                t_erase: 3000,
                channel_bytes_per_sec: 800_000_000,
                endurance: 5000,
                read_retry: ReadRetry::default(),
                raw: 1024 * MIB,
            }
            .config(),
        },
        Preset {
            name: "tlc",
            description: "A 3D TLC part with FEMU's TLC latencies (from the SimpleSSD paper): \
                read 56.5 / 77.5 / 106 us and program 820.5 / 2225 / 5734 us for the LSB / CSB / \
                MSB pages, erase 3 ms. 16 KiB page, 96 pages/block (1.5 MiB), 800 MB/s channels \
                (ONFI 4), 4 channels x 4 banks, 3000 P/E cycles, read-retry one extra sensing \
                step per 500 P/E cycles up to 8 (not from FEMU, which has none), 1 GiB raw.",
            config: Mlc {
                channels: 4,
                banks_per_channel: 4,
                page_size: 16384,
                pages_per_block: 96,
                oob_size: 512,
                reads: &[56.5, 77.5, 106.0],
                progs: &[820.5, 2225.0, 5734.0],
                t_erase: 3000,
                channel_bytes_per_sec: 800_000_000,
                endurance: 3000,
                read_retry: ReadRetry {
                    every_pe_cycles: 500,
                    max_steps: 8,
                },
                raw: 1024 * MIB,
            }
            .config(),
        },
        Preset {
            name: "qlc",
            description:
                "A QLC part with FEMU's QLC latencies (TLC's scaled by 1.05 / 1.1 / 1.2 / \
                1.6 after Micron's FMS'19 characterisation): read 59.3 / 85.3 / 127.2 / 169.6 us, \
                program 861.5 / 2447.5 / 6880.8 / 9174.4 us (LSB / CSB / MSB / TSB), erase 3 ms. \
                16 KiB page, 64 pages/block (1 MiB), 800 MB/s channels, 4 channels x 4 banks, \
                1000 P/E cycles, read-retry a step per 200 P/E cycles up to 8 (not from FEMU), \
                1 GiB raw.",
            config: Mlc {
                channels: 4,
                banks_per_channel: 4,
                page_size: 16384,
                pages_per_block: 64,
                oob_size: 512,
                reads: &[59.325, 85.25, 127.2, 169.6],
                progs: &[861.525, 2447.5, 6880.8, 9174.4],
                t_erase: 3000,
                channel_bytes_per_sec: 800_000_000,
                endurance: 1000,
                read_retry: ReadRetry {
                    every_pe_cycles: 200,
                    max_steps: 8,
                },
                raw: 1024 * MIB,
            }
            .config(),
        },
    ]
}

/// The preset called `name`, if any.
pub fn preset(name: &str) -> Option<Preset> {
    presets().into_iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_presets_are_valid_and_sized_for_tests() {
        let all = presets();
        assert_eq!(all.len(), 9);
        for p in &all {
            p.config.geometry.validate().unwrap();
            p.config.timing.validate().unwrap();
            let raw = p.config.geometry.raw_capacity();
            assert!((256 * MIB..=1024 * MIB).contains(&raw), "{}: {raw}", p.name);
        }
        let d = preset("default").unwrap().config;
        assert_eq!(d, preset("board-000").unwrap().config);
        assert_eq!(d.geometry.raw_capacity(), 512 * MIB);
        assert!(preset("nope").is_none());
    }

    #[test]
    fn multi_level_presets_have_their_page_types() {
        let t = preset("tlc").unwrap().config.timing;
        assert_eq!(t.cell.kind, CellType::Tlc);
        assert_eq!(t.read_ns(2, 0), 106_000);
        assert_eq!(t.prog_ns(4), 2_225_000);
        let q = preset("qlc").unwrap().config.timing;
        assert_eq!(q.cell.kind, CellType::Qlc);
        assert_eq!(q.prog_ns(3), 9_174_400);
        let m = preset("nvmevirt-970pro").unwrap().config;
        assert_eq!(m.timing.cell.kind, CellType::Mlc);
        assert_eq!(m.timing.read_ns(1, 0), 42_013);
        assert_eq!(m.geometry.banks(), 16);
    }

    #[test]
    fn k9_transfer_is_50us() {
        let t = preset("k9-003").unwrap().config.timing;
        assert_eq!(t.xfer(4096), Duration::from_micros(50));
    }

    #[test]
    fn scaling_keeps_shape() {
        let base = preset("board-000").unwrap().config;
        let small = base.scaled_to(64 * MIB);
        assert_eq!(small.geometry.blocks_per_bank, 8);
        assert_eq!(small.timing, base.timing);
        assert_eq!(small.geometry.page_size, base.geometry.page_size);
        let tiny = base.scaled_to(0);
        assert_eq!(tiny.geometry.blocks_per_bank, 8);
        let big = base.scaled_to(4096 * MIB);
        assert_eq!(big.geometry.raw_capacity(), 4096 * MIB);
    }
}
