//! Shared harness for the criterion benches: fixed seeds, scratch images, geometries.

pub mod heap;

use std::path::Path;

use ftl::nand_model::{self, NandConfig, TimingMode};
use ftl::{Ftl, FtlConfig};

/// Seed used by every bench so runs are comparable.
pub const SEED: u64 = 0x5eed_f71d;

/// A NAND preset scaled to `raw` bytes.
pub fn preset(name: &str, raw: u64) -> NandConfig {
    nand_model::preset(name)
        .unwrap_or_else(|| panic!("preset {name} exists"))
        .config
        .scaled_to(raw)
}

/// Creates an FTL image in `dir`.
pub fn ftl(dir: &Path, nand: &NandConfig, timing: TimingMode, cfg: FtlConfig) -> Ftl {
    Ftl::create(&dir.join("bench.img"), nand, timing, cfg, None).expect("create bench image")
}

/// A 4 KiB buffer with recognisable contents.
pub fn page(tag: u64) -> Vec<u8> {
    let mut v = vec![0u8; 4096];
    for (i, c) in v.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(tag ^ i as u64).to_le_bytes());
    }
    v
}
