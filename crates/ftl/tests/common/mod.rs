//! Shared helpers for the FTL's integration tests: small geometries and a blocking executor.
#![allow(dead_code)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use ftl::nand_model::{Geometry, NandConfig, Timing, TimingMode};
use ftl::{Ftl, FtlConfig, GcPolicy};

pub use futures::executor::block_on;

/// A tiny geometry so GC, wear and checkpoints all happen within a short test.
pub fn small_nand(page_size: u32, blocks_per_bank: u32) -> NandConfig {
    NandConfig {
        geometry: Geometry {
            channels: 2,
            banks_per_channel: 2,
            blocks_per_bank,
            pages_per_block: 8,
            page_size,
            oob_size: 256,
        },
        timing: Timing {
            t_read: Duration::from_micros(25),
            t_prog: Duration::from_micros(200),
            t_erase: Duration::from_micros(1500),
            channel_bytes_per_sec: 400_000_000,
            ..Default::default()
        },
        endurance: 100_000,
        interconnect: Default::default(),
        planes: 1,
    }
}

pub fn small_cfg(policy: GcPolicy) -> FtlConfig {
    FtlConfig {
        queues: 2,
        gc_policy: policy,
        gc_threads: 2,
        overprovision: 0.10,
        checkpoint_interval_bytes: 512 * 1024,
        ..FtlConfig::default()
    }
}

pub fn create(path: &Path, nand: &NandConfig, cfg: FtlConfig) -> Ftl {
    Ftl::create(path, nand, TimingMode::Off, cfg, None).expect("create FTL image")
}

pub fn open(path: &Path, cfg: FtlConfig) -> Ftl {
    Ftl::open(path, TimingMode::Off, cfg).expect("open FTL image")
}

/// A 4 KiB page stamped with its page number and a tag, so a read can tell which write it saw
/// and whether it is torn or belongs to another page.
pub fn stamped(lpn: u64, tag: u64) -> Vec<u8> {
    let mut v = vec![0u8; 4096];
    v[0..8].copy_from_slice(&lpn.to_le_bytes());
    v[8..16].copy_from_slice(&tag.to_le_bytes());
    let mut x = lpn.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ tag;
    for chunk in v[16..].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    v
}

/// The tag of a stamped page, or None if it is zeroes; panics if it is torn or foreign.
pub fn check_stamp(lpn: u64, data: &[u8]) -> Option<u64> {
    if data.iter().all(|b| *b == 0) {
        return None;
    }
    let got_lpn = u64::from_le_bytes(data[0..8].try_into().unwrap());
    let tag = u64::from_le_bytes(data[8..16].try_into().unwrap());
    assert_eq!(got_lpn, lpn, "page {lpn} holds data of page {got_lpn}");
    assert!(
        data == stamped(lpn, tag).as_slice(),
        "page {lpn} tag {tag} is torn"
    );
    Some(tag)
}

/// A stable content hash of a page (FNV-1a over 8-byte words), for the sets of values a page
/// may hold after a crash.
pub fn hash(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in b.chunks(8) {
        let mut a = [0u8; 8];
        a[..w.len()].copy_from_slice(w);
        h ^= u64::from_le_bytes(a);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Flips one bit of byte `at` of a slot's data in the image file (bit rot under the FTL).
pub fn flip(path: &Path, page: ftl::nand_model::PageAddr, slot: u32, at: u64) {
    let off = ftl::nand_model::page_data_offset(path, page).unwrap() + slot as u64 * 4096 + at;
    flip_byte(path, off);
}

/// Flips one bit of the image file's byte at `off`.
pub fn flip_byte(path: &Path, off: u64) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(off)).unwrap();
    f.read_exact(&mut b).unwrap();
    b[0] ^= 0x10;
    f.seek(SeekFrom::Start(off)).unwrap();
    f.write_all(&b).unwrap();
}

/// A device whose pages are written with [`stamped`] data, each page's newest tag kept, so
/// every page can be checked after merges, reopens and power cuts.
pub struct StampedDevice {
    pub ftl: Ftl,
    /// The newest tag written to each page (0: never written).
    pub tags: Vec<u64>,
    pub tag: u64,
}

impl StampedDevice {
    pub fn new(ftl: Ftl) -> StampedDevice {
        let pages = (ftl.capacity() / 4096) as usize;
        StampedDevice {
            ftl,
            tags: vec![0; pages],
            tag: 0,
        }
    }

    /// Writes each page of `lpns` with the next tag, through queue 0.
    pub fn write(&mut self, lpns: impl IntoIterator<Item = u64>) {
        for l in lpns {
            self.tag += 1;
            block_on(self.ftl.write(0, l * 4096, &stamped(l, self.tag), false)).unwrap();
            self.tags[l as usize] = self.tag;
        }
    }

    /// Every page reads back its newest tag, and the FTL's invariants hold.
    pub fn verify(&self, what: &str) {
        let mut buf = vec![0u8; 4096];
        for (l, t) in self.tags.iter().enumerate() {
            block_on(self.ftl.read(l as u64 * 4096, &mut buf)).unwrap();
            assert_eq!(
                check_stamp(l as u64, &buf).unwrap_or(0),
                *t,
                "{what}: page {l}"
            );
        }
        self.ftl
            .check_invariants()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}
