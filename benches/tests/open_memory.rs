//! Peak heap while an image is opened (issue 14: under 8 bytes per exported 4 KiB page, the
//! live map's 4.3 included), counted exactly by `ftl_benches::heap::CountingAlloc`: a clean
//! open, a crash open (checkpoint plus roll-forward scan, with trims) and a full-scan open
//! (both checkpoint areas corrupt). A regression that copies the map, keeps the checkpoint's
//! bytes or a per-page array during recovery fails here. The image is 8 GiB sparse, so the
//! per-page figure is not drowned by fixed costs.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use ftl::nand_model::TimingMode;
use ftl::{Ftl, FtlConfig, GcPolicy, RecoveryMode};
use futures::executor::block_on;

#[global_allocator]
static HEAP: ftl_benches::heap::CountingAlloc = ftl_benches::heap::CountingAlloc;

const BUDGET_PER_PAGE: f64 = 8.0;
const WRITTEN: u64 = 96 << 20;

fn stamp(lpn: u64, gen: u64) -> Vec<u8> {
    ftl_benches::page(lpn << 16 | gen)
}

/// Opens the image and returns the FTL with the heap `open` used at its peak, per page.
fn open(path: &Path, cfg: &FtlConfig) -> (Ftl, f64) {
    let base = ftl_benches::heap::reset_peak();
    let ftl = Ftl::open(path, TimingMode::Off, cfg.clone()).expect("open");
    let peak = ftl_benches::heap::peak() - base;
    let per_page = peak as f64 / (ftl.capacity() / 4096) as f64;
    (ftl, per_page)
}

fn corrupt(path: &Path, p: ftl::nand_model::PageAddr) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("image");
    let at = ftl::nand_model::page_data_offset(path, p).expect("offset");
    f.seek(SeekFrom::Start(at + 100)).expect("seek");
    f.write_all(&[0x5a; 16]).expect("corrupt");
}

#[test]
fn opening_an_image_peaks_under_8_bytes_per_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mem.img");
    let nand = ftl_benches::preset("board-000", 8 << 30);
    let cfg = FtlConfig {
        queues: 2,
        gc_policy: GcPolicy::Adaptive,
        checkpoint_interval_bytes: 0,
        ..FtlConfig::default()
    };
    let ftl = Ftl::create(&path, &nand, TimingMode::Off, cfg.clone(), None).expect("create");
    let pages = WRITTEN / 4096;
    let mut gen = vec![0u64; pages as usize];
    let write = |ftl: &Ftl, l: u64, g: u64| {
        block_on(ftl.write((l % 2) as usize, l * 4096, &stamp(l, g), false)).expect("write");
    };
    for l in 0..pages {
        write(&ftl, l, 1);
        gen[l as usize] = 1;
    }
    ftl.close().expect("close");
    drop(ftl);

    let (ftl, clean) = open(&path, &cfg);
    assert_eq!(ftl.recovery().mode, RecoveryMode::Clean);
    // After the checkpoint: overwrites and a trim, flushed but not checkpointed.
    let mut x = ftl_benches::SEED;
    for _ in 0..pages / 4 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let l = x % pages;
        gen[l as usize] += 1;
        write(&ftl, l, gen[l as usize]);
    }
    block_on(ftl.trim(0, 0, 1 << 20, false)).expect("trim");
    gen[..256].iter_mut().for_each(|g| *g = 0);
    block_on(ftl.flush()).expect("flush");
    ftl.simulate_power_loss();

    let (ftl, crash) = open(&path, &cfg);
    assert_eq!(ftl.recovery().mode, RecoveryMode::RollForward);
    let heads = ftl.checkpoint_area_heads();
    ftl.close().expect("close");
    drop(ftl);
    for h in heads {
        corrupt(&path, h);
    }
    let (ftl, full) = open(&path, &cfg);
    assert_eq!(ftl.recovery().mode, RecoveryMode::FullScan);
    let mut buf = vec![0u8; 4096];
    for l in (0..pages).step_by(97) {
        block_on(ftl.read(l * 4096, &mut buf)).expect("read");
        let g = gen[l as usize];
        let want = if g == 0 { vec![0u8; 4096] } else { stamp(l, g) };
        assert!(buf == want, "page {l}: not generation {g}");
    }
    eprintln!("peak heap per page: clean {clean:.2}, crash {crash:.2}, full scan {full:.2}");
    for (what, v) in [("clean", clean), ("crash", crash), ("full-scan", full)] {
        assert!(
            v < BUDGET_PER_PAGE,
            "a {what} open peaked at {v:.2} heap bytes per exported page (budget {BUDGET_PER_PAGE})"
        );
    }
}
