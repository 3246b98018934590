//! Shared helpers for the integration tests: a small geometry and a device in a temp dir that is
//! removed when the fixture drops.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use nand_model::{Geometry, NandConfig, NandDevice, PageAddr, Timing, TimingMode};
use tempfile::TempDir;

pub fn small_geometry() -> Geometry {
    Geometry {
        channels: 2,
        banks_per_channel: 2,
        blocks_per_bank: 8,
        pages_per_block: 4,
        page_size: 4096,
        oob_size: 128,
    }
}

/// k9-003-like timing: 25/200/1500 us, 50 us per 4 KiB transfer.
pub fn k9_timing() -> Timing {
    Timing {
        t_read: Duration::from_micros(25),
        t_prog: Duration::from_micros(200),
        t_erase: Duration::from_micros(1500),
        channel_bytes_per_sec: 81_920_000,
        ..Default::default()
    }
}

pub fn small_config() -> NandConfig {
    NandConfig {
        geometry: small_geometry(),
        timing: k9_timing(),
        endurance: 5,
        interconnect: Default::default(),
        planes: 1,
    }
}

/// A device plus the directory holding its image.
pub struct Fixture {
    pub dir: TempDir,
    pub path: PathBuf,
    pub dev: Option<NandDevice>,
}

impl Fixture {
    pub fn new(config: &NandConfig, mode: TimingMode) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nand.img");
        let dev = NandDevice::create(&path, config, mode).expect("create image");
        Fixture {
            dir,
            path,
            dev: Some(dev),
        }
    }

    pub fn small() -> Fixture {
        Fixture::new(&small_config(), TimingMode::Off)
    }

    pub fn dev(&self) -> &NandDevice {
        self.dev.as_ref().expect("device open")
    }

    /// Closes and reopens the image (what a restart does).
    pub fn reopen(&mut self, mode: TimingMode) {
        self.dev = None;
        self.dev = Some(NandDevice::open(&self.path, None, mode).expect("reopen"));
    }
}

/// A recognisable page: every byte depends on the address and `salt`.
pub fn pattern(addr: PageAddr, salt: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(addr.block.bank.0 * 7 + addr.block.block * 13 + addr.page * 17)
                as u8
                ^ salt
        })
        .collect()
}
