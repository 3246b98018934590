//! Named device presets taken from the papers in `shared/papers/`, with capacities scaled to fit a
//! test machine (raw 256 MiB to 1 GiB). Use [`NandConfig::scaled_to`] for another size: it keeps
//! page/block shape, bank layout and timing.

use std::time::Duration;

use serde::Serialize;

use crate::config::NandConfig;
use crate::geometry::Geometry;
use crate::timing::Timing;

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
        },
        endurance,
        interconnect: Default::default(),
    }
    .scaled_to(raw)
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
        assert_eq!(all.len(), 6);
        for p in &all {
            p.config.geometry.validate().unwrap();
            let raw = p.config.geometry.raw_capacity();
            assert!((256 * MIB..=1024 * MIB).contains(&raw), "{}: {raw}", p.name);
        }
        let d = preset("default").unwrap().config;
        assert_eq!(d, preset("board-000").unwrap().config);
        assert_eq!(d.geometry.raw_capacity(), 512 * MIB);
        assert!(preset("nope").is_none());
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
