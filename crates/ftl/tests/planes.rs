//! Multi-plane writes: on banks with planes the page scheme's writers program the pages that
//! wait together as one multi-plane operation (one array time), and the data guarantees hold.
//! (Every crash point of such a workload is swept in `power_cut.rs`.)

mod common;

use common::*;
use ftl::nand_model::{NandConfig, TimingMode};
use ftl::{Frontiers, Ftl, FtlStats, GcPolicy};

const MIB: u64 = 1 << 20;

/// Reads pages `0..pages` and checks each written one (`want` gives its last tag, `None` if
/// never written) carries its stamp.
fn check_stamps(ftl: &Ftl, pages: u64, want: impl Fn(u64) -> Option<u64>, when: &str) {
    block_on(async {
        let mut buf = vec![0u8; 4096];
        for l in 0..pages {
            ftl.read(l * 4096, &mut buf).await.unwrap();
            if let Some(tag) = want(l) {
                assert_eq!(check_stamp(l, &buf), Some(tag), "page {l} {when}");
            }
        }
    })
}

/// Every injected program fault is a failed page the FTL counted and whose block it retired;
/// the invariants and the flash rules hold.
fn check_faults_retired(ftl: &Ftl, s: &FtlStats, injected: u64) {
    assert_eq!(
        (s.program_failures, s.retired_blocks),
        (injected, injected),
        "program failures and retired blocks against {injected} injected program faults"
    );
    ftl.check_invariants().unwrap();
    assert_eq!(ftl.nand().violations(), 0, "flash rule violations");
}

fn nand(planes: u32) -> NandConfig {
    NandConfig {
        planes,
        ..small_nand(4096, 32)
    }
}

/// Writes `bytes` sequentially in 64 KiB requests at simulated time 0, overwrites the first
/// half (so GC runs), flushes; returns the simulated time the flush returned at, the stats,
/// and checks every page's stamp before and after a clean reopen.
fn sequential_virtual(planes: u32, bytes: u64) -> (u64, FtlStats) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planes.img");
    let cfg = small_cfg(GcPolicy::Parallel);
    let ftl = Ftl::create(&path, &nand(planes), TimingMode::Virtual, cfg.clone(), None).unwrap();
    let start = ftl.now_ns();
    let pages = bytes / 4096;
    block_on(async {
        for (round, range) in [(1u64, 0..pages), (2, 0..pages / 2)] {
            let mut req = Vec::new();
            for l in range {
                req.extend_from_slice(&stamped(l, round));
                if req.len() == 64 << 10 {
                    let first = l + 1 - 16;
                    ftl.write(0, first * 4096, &req, false).await.unwrap();
                    req.clear();
                }
            }
        }
        ftl.flush().await.unwrap();
    });
    let elapsed = ftl.now_ns() - start;
    let expect = |l: u64| Some(if l < pages / 2 { 2 } else { 1 });
    let check = |ftl: &Ftl, when: &str| check_stamps(ftl, pages, expect, when);
    check(&ftl, "after the flush");
    ftl.check_invariants().unwrap();
    assert_eq!(ftl.nand().violations(), 0, "flash rule violations");
    let stats = ftl.stats();
    ftl.close().unwrap();
    drop(ftl);
    let ftl = Ftl::open(&path, TimingMode::Virtual, cfg).unwrap();
    check(&ftl, "after a reopen");
    (elapsed, stats)
}

/// Two planes: the writes go out mostly as two-page programs, and the device programs them
/// in little more than half the time one plane takes (the banks are the bottleneck: one
/// array time per two pages, the transfers of both still cross the channel).
#[test]
fn multi_plane_programs_take_one_array_time_for_two_pages() {
    let (one, s1) = sequential_virtual(1, 2 * MIB);
    let (two, s2) = sequential_virtual(2, 2 * MIB);
    eprintln!(
        "1 plane: {} us, {} programs; 2 planes: {} us, {} programs, {} multi-plane",
        one / 1000,
        s1.nand_page_programs,
        two / 1000,
        s2.nand_page_programs,
        s2.multi_plane_programs
    );
    assert_eq!(s1.multi_plane_programs, 0);
    assert!(
        s2.multi_plane_programs * 2 * 10 >= s2.nand_page_programs * 8,
        "fewer than 80 % of the host pages went out in multi-plane programs: {s2:?}"
    );
    assert!(
        two * 10 < one * 7,
        "two planes took {two} ns against {one} ns with one"
    );
}

/// A set of open blocks opened while a single page waited (a FUA write) is as wide as the
/// bank's planes, so the pages that come after it still pair: writes that alternate a lone
/// FUA page with a burst of 7 (a block's worth of 8 in all) go out mostly in multi-plane
/// programs. (A set opened one block wide stayed so for the whole block: here every block.)
#[test]
fn a_set_opened_for_one_page_still_pairs_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("narrow.img");
    let cfg = small_cfg(GcPolicy::Parallel);
    // One bank, so every page goes to the set the lone page opened.
    let mut one_bank = nand(2);
    one_bank.geometry.channels = 1;
    one_bank.geometry.banks_per_channel = 1;
    one_bank.geometry.blocks_per_bank = 96;
    let ftl = Ftl::create(&path, &one_bank, TimingMode::Virtual, cfg, None).unwrap();
    let pages = ftl.capacity() / 4096 / 2;
    let mut l = 0;
    block_on(async {
        while l + 8 <= pages {
            ftl.write(0, l * 4096, &stamped(l, 1), true).await.unwrap();
            let burst: Vec<u8> = (l + 1..l + 8).flat_map(|p| stamped(p, 1)).collect();
            ftl.write(0, (l + 1) * 4096, &burst, false).await.unwrap();
            l += 8;
        }
        ftl.flush().await.unwrap();
    });
    let s = ftl.stats();
    eprintln!(
        "{} host page programs, {} multi-plane programs",
        s.nand_page_programs, s.multi_plane_programs
    );
    assert!(
        s.multi_plane_programs * 2 * 10 >= s.nand_page_programs * 6,
        "fewer than 60 % of the host pages went out in multi-plane programs: {s:?}"
    );
    check_stamps(&ftl, l, |_| Some(1), "after the flush");
    ftl.check_invariants().unwrap();
    assert_eq!(ftl.nand().violations(), 0, "flash rule violations");
}

/// With frontiers `per-queue` on four-plane banks each of 8 queues' writers keeps four open
/// blocks per bank: an image is sized for them (`plan_format`), so whatever the device's size
/// it is either refused at creation ("geometry too small") or takes twice its capacity of
/// random overwrites from all eight queues without running out of blocks. (Sized for one open
/// block per writer, the 32-block device was created and went read-only: "no free blocks left
/// and nothing to reclaim".) With frontiers shared per bank (the default) the format sets aside
/// one set of open blocks per bank whatever the queues, and the same load runs in it.
#[test]
fn an_image_is_sized_for_a_block_per_plane_per_writer() {
    let mut ran = Vec::new();
    for (frontiers, blocks) in [Frontiers::PerQueue, Frontiers::PerBank]
        .into_iter()
        .flat_map(|f| [32, 40, 64].map(|b| (f, b)))
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sized.img");
        let cfg = ftl::FtlConfig {
            queues: 8,
            frontiers,
            ..small_cfg(GcPolicy::Parallel)
        };
        let nand = NandConfig {
            planes: 4,
            ..small_nand(4096, blocks)
        };
        let ftl = match Ftl::create(&path, &nand, TimingMode::Virtual, cfg, None) {
            Ok(f) => f,
            Err(e) => {
                assert!(
                    e.to_string().contains("too small"),
                    "{frontiers:?}, {blocks} blocks: {e}"
                );
                continue;
            }
        };
        assert_eq!(ftl.queues(), 8, "{frontiers:?}");
        let pages = ftl.capacity() / 4096;
        let mut tag = vec![0u64; pages as usize];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        block_on(async {
            for l in 0..pages {
                ftl.write((l % 8) as usize, l * 4096, &stamped(l, 1), false)
                    .await
                    .unwrap();
                tag[l as usize] = 1;
            }
            for i in 0..2 * pages {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let l = x % pages;
                tag[l as usize] += 1;
                let data = stamped(l, tag[l as usize]);
                if let Err(e) = ftl.write((i % 8) as usize, l * 4096, &data, false).await {
                    panic!("{frontiers:?}, {blocks} blocks, {pages} pages: overwrite {i}: {e}");
                }
            }
            ftl.flush().await.unwrap();
        });
        let s = ftl.stats();
        assert_eq!(s.read_only, None);
        assert!(s.gc_erases > 0 && s.multi_plane_programs > 0, "{s:?}");
        check_stamps(
            &ftl,
            pages,
            |l| Some(tag[l as usize]),
            "after the overwrites",
        );
        ftl.check_invariants().unwrap();
        assert_eq!(ftl.nand().violations(), 0, "flash rule violations");
        ran.push(frontiers);
    }
    for f in [Frontiers::PerQueue, Frontiers::PerBank] {
        assert!(ran.contains(&f), "no device size was accepted with {f:?}");
    }
}

/// Timing `real` with writer threads on four-plane banks: whatever the batching, the data
/// reads back, after a clean close and after a power loss.
#[test]
fn multi_plane_writes_with_timing_real_keep_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.img");
    let nand = NandConfig {
        planes: 4,
        ..small_nand(8192, 24)
    };
    let cfg = small_cfg(GcPolicy::Adaptive);
    let ftl = Ftl::create(&path, &nand, TimingMode::Real, cfg.clone(), None).unwrap();
    let pages = ftl.capacity() / 4096 * 3 / 4;
    // Enough rounds that the device's free space runs out and GC moves multi-plane pages
    // (three fit in the free blocks without an erase).
    const ROUNDS: u64 = 5;
    block_on(async {
        for round in 1..=ROUNDS {
            let mut req = Vec::new();
            for l in 0..pages {
                req.extend_from_slice(&stamped(l, round));
                if req.len() == 32 << 10 || l + 1 == pages {
                    let first = l + 1 - (req.len() / 4096) as u64;
                    ftl.write((l % 2) as usize, first * 4096, &req, l % 97 == 0)
                        .await
                        .unwrap();
                    req.clear();
                }
            }
        }
        ftl.flush().await.unwrap();
    });
    let s = ftl.stats();
    eprintln!(
        "{} host page programs, {} multi-plane programs, {} GC erases",
        s.nand_page_programs, s.multi_plane_programs, s.gc_erases
    );
    assert!(s.gc_erases > 0);
    ftl.check_invariants().unwrap();
    assert_eq!(ftl.nand().violations(), 0, "flash rule violations");
    let check = |ftl: &Ftl, when: &str| check_stamps(ftl, pages, |_| Some(ROUNDS), when);
    check(&ftl, "after the flush");
    ftl.simulate_power_loss();
    let ftl = Ftl::open(&path, TimingMode::Real, cfg).unwrap();
    check(&ftl, "after a power loss");
}

/// Program faults inside multi-plane programs (virtual time, two planes): the failed block is
/// retired, every page of the group is programmed again elsewhere, and the data reads back.
#[test]
fn a_failed_multi_plane_program_is_programmed_again() {
    faulty_multi_plane_writes(0.01);
}

/// Both pages of a two-plane program fail (page 3 of every block of bank 0 is armed to fail,
/// and a writer's two open blocks there reach page 3 together): each failed page's block is
/// retired, not only the first one the error names, and the data reads back.
#[test]
fn every_failed_page_of_a_multi_plane_program_retires_its_block() {
    use ftl::nand_model::{BlockAddr, PageAddr};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("double.img");
    let mut cfg = small_cfg(GcPolicy::Parallel);
    cfg.checkpoint_interval_bytes = 0;
    let geometry = nand(2);
    let ftl = Ftl::create(&path, &geometry, TimingMode::Virtual, cfg.clone(), None).unwrap();
    for block in 0..geometry.geometry.blocks_per_bank {
        let b = BlockAddr::new(0, block);
        ftl.nand()
            .faults()
            .fail_program_at(PageAddr { block: b, page: 3 });
    }
    let pages = 64u64;
    block_on(async {
        for first in (0..pages).step_by(16) {
            let req: Vec<u8> = (first..first + 16).flat_map(|l| stamped(l, 1)).collect();
            ftl.write(0, first * 4096, &req, false).await.unwrap();
        }
        ftl.flush().await.unwrap();
    });
    let s = ftl.stats();
    let injected = ftl.nand().faults().injected().program;
    assert!(
        injected >= 2 && s.multi_plane_programs > 0,
        "{injected} faults; {s:?}"
    );
    check_faults_retired(&ftl, &s, injected);
    check_stamps(&ftl, pages, |_| Some(1), "after the flush");
    ftl.simulate_power_loss();
    let ftl = Ftl::open(&path, TimingMode::Virtual, cfg).unwrap();
    check_stamps(&ftl, pages, |_| Some(1), "after a power loss");
}

fn faulty_multi_plane_writes(rate: f64) {
    use ftl::nand_model::FaultRates;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("faults.img");
    let mut cfg = small_cfg(GcPolicy::Parallel);
    cfg.overprovision = 0.25;
    cfg.checkpoint_interval_bytes = 0;
    let ftl = Ftl::create(&path, &nand(2), TimingMode::Virtual, cfg.clone(), None).unwrap();
    ftl.nand().faults().set_random(
        FaultRates {
            program: rate,
            erase: 0.0,
            read: 0.0,
        },
        7,
    );
    let pages = ftl.capacity() / 4096 * 8 / 10;
    let mut tags = vec![0u64; pages as usize];
    let mut x = 0x9e37_79b9_u64;
    block_on(async {
        for n in 1..=pages * 3 / 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let first = x % (pages - 7);
            let mut req = Vec::new();
            for l in first..first + 8 {
                req.extend_from_slice(&stamped(l, n));
                tags[l as usize] = n;
            }
            ftl.write(0, first * 4096, &req, false).await.unwrap();
        }
        ftl.flush().await.unwrap();
    });
    let s = ftl.stats();
    eprintln!(
        "{} program failures, {} multi-plane programs, {} retired blocks",
        s.program_failures, s.multi_plane_programs, s.retired_blocks
    );
    assert!(
        s.program_failures > 0 && s.multi_plane_programs > 0,
        "{s:?}"
    );
    let injected = ftl.nand().faults().injected().program;
    check_faults_retired(&ftl, &s, injected);
    let want = |l: u64| Some(tags[l as usize]).filter(|&t| t > 0);
    let check = |ftl: &Ftl, when: &str| check_stamps(ftl, pages, want, when);
    check(&ftl, "after the flush");
    ftl.nand().faults().set_random(FaultRates::default(), 0);
    ftl.simulate_power_loss();
    let ftl = Ftl::open(&path, TimingMode::Virtual, cfg).unwrap();
    check(&ftl, "after a power loss");
}
