//! Basic behaviour: round trips, sub-page writes, trims, errors, reopen.

mod common;

use common::*;
use std::time::Duration;

use ftl::{FtlConfig, FtlError, GcPolicy, RecoveryMode, SchemeKind};

#[test]
fn write_read_roundtrip_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.img");
    let ftl = create(&path, &small_nand(8192, 24), small_cfg(GcPolicy::Adaptive));
    let cap = ftl.capacity();
    assert!(cap > 1 << 20, "capacity {cap}");
    block_on(async {
        let data: Vec<u8> = (0..3 * 4096 + 1024).map(|i| (i % 251) as u8).collect();
        ftl.write(0, 512, &data, false).await.unwrap();
        let mut back = vec![0u8; data.len()];
        ftl.read(512, &mut back).await.unwrap();
        assert_eq!(back, data);
        // First sector untouched.
        let mut first = vec![1u8; 512];
        ftl.read(0, &mut first).await.unwrap();
        assert!(first.iter().all(|b| *b == 0));
        // Trim the middle page.
        ftl.trim(1, 4096, 4096, false).await.unwrap();
        ftl.read(512, &mut back).await.unwrap();
        assert!(back[3584..7680].iter().all(|b| *b == 0));
        assert_eq!(back[..3584], data[..3584]);
        // Errors.
        assert!(matches!(
            ftl.read(1, &mut [0u8; 512]).await,
            Err(FtlError::Misaligned { .. })
        ));
        assert!(matches!(
            ftl.write(0, cap, &[0u8; 512], false).await,
            Err(FtlError::OutOfRange { .. })
        ));
        ftl.flush().await.unwrap();
    });
    ftl.check_invariants().unwrap();
    ftl.close().unwrap();
    drop(ftl);
    let ftl = open(&path, small_cfg(GcPolicy::Adaptive));
    assert_eq!(ftl.recovery().mode, RecoveryMode::Clean);
    assert_eq!(ftl.recovery().pages_scanned, 0);
    block_on(async {
        let mut back = vec![0u8; 4096];
        ftl.read(8192, &mut back).await.unwrap();
        let expect: Vec<u8> = (2 * 4096 - 512..3 * 4096 - 512)
            .map(|i| (i % 251) as u8)
            .collect();
        assert_eq!(back, expect);
    });
    ftl.check_invariants().unwrap();
}

/// With timing `real` the queues' writer threads place pages (with timing `off` the writer runs
/// inline): the same data guarantees hold, crash included.
#[test]
fn timing_real_uses_writer_threads() {
    use ftl::nand_model::TimingMode;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.img");
    let nand = small_nand(8192, 24);
    let cfg = small_cfg(GcPolicy::Adaptive);
    let ftl = ftl::Ftl::create(&path, &nand, TimingMode::Real, cfg.clone(), None).unwrap();
    let pages = ftl.capacity() / 4096;
    block_on(async {
        for round in 1..=3u64 {
            for l in 0..pages * 3 / 4 {
                ftl.write((l % 2) as usize, l * 4096, &stamped(l, round), l % 97 == 0)
                    .await
                    .unwrap();
            }
        }
        ftl.flush().await.unwrap();
        let mut buf = vec![0u8; 4096];
        for l in 0..pages * 3 / 4 {
            ftl.read(l * 4096, &mut buf).await.unwrap();
            assert_eq!(check_stamp(l, &buf), Some(3), "page {l}");
        }
    });
    assert!(ftl.stats().gc_erases > 0);
    ftl.check_invariants().unwrap();
    ftl.simulate_power_loss();
    let ftl = ftl::Ftl::open(&path, TimingMode::Real, cfg).unwrap();
    block_on(async {
        let mut buf = vec![0u8; 4096];
        for l in 0..pages * 3 / 4 {
            ftl.read(l * 4096, &mut buf).await.unwrap();
            assert_eq!(check_stamp(l, &buf), Some(3), "page {l} after crash");
        }
    });
}

/// LFTL's idle flush: with 16 KiB pages a lone 4 KiB write leaves its page partly filled in
/// RAM; after `idle_flush_ms` without writes the maintenance tick programs it (padded). With
/// the idle flush off it stays buffered until a flush.
#[test]
fn idle_flush_programs_a_partly_filled_page() {
    for idle_ms in [100u64, 0] {
        let dir = tempfile::tempdir().unwrap();
        let ftl = create(
            &dir.path().join("i.img"),
            &small_nand(16384, 16),
            FtlConfig {
                idle_flush_ms: idle_ms,
                ..small_cfg(GcPolicy::Adaptive)
            },
        );
        let written = std::time::Instant::now();
        block_on(ftl.write(0, 5 * 4096, &stamped(5, 1), false)).unwrap();
        // (Only while the idle time cannot have passed: a stalled test thread may look late.)
        let unflushed = ftl.physical_slot(5).is_none();
        assert!(
            unflushed || idle_ms > 0 && written.elapsed() >= Duration::from_millis(idle_ms),
            "buffered at first"
        );
        let start = std::time::Instant::now();
        // Off: well past the 50 ms maintenance tick and what 100 ms would have needed.
        let bound = Duration::from_millis(if idle_ms > 0 { 5000 } else { 600 });
        while ftl.physical_slot(5).is_none() && start.elapsed() < bound {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut buf = vec![0u8; 4096];
        block_on(ftl.read(5 * 4096, &mut buf)).unwrap();
        assert_eq!(check_stamp(5, &buf), Some(1));
        if idle_ms > 0 {
            assert!(
                ftl.physical_slot(5).is_some(),
                "programmed after {idle_ms} ms idle"
            );
            assert_eq!(ftl.stats().idle_flushes, 1);
        } else {
            assert!(
                ftl.physical_slot(5).is_none(),
                "no idle flush when it is off"
            );
            assert_eq!(ftl.stats().idle_flushes, 0);
        }
        ftl.check_invariants().unwrap();
    }
}

/// A page image formatted with the settings it is served with (hot/cold separation, frontiers
/// per queue, both) has its over-provisioning as spare beyond what the scheme needs: until
/// 2026-12-01 the format did not count hot/cold's second temperature, and such an image needed
/// more blocks than it had, fresh (175 usable, 192 needed at 32 MiB), turning read-only at its
/// first bad block. The default format is unchanged by the fix.
#[test]
fn a_fresh_page_image_has_spare_beyond_its_need_with_the_settings_it_was_formatted_for() {
    use ftl::{Frontiers, Separation};
    let dir = tempfile::tempdir().unwrap();
    let mut nand = small_nand(4096, 256);
    let default_export = ftl::plan_format(&nand, &small_cfg(GcPolicy::Parallel), None)
        .unwrap()
        .max_export_bytes;
    for planes in [1, 2] {
        nand.planes = planes;
        for (separation, frontiers, queues) in [
            (Separation::None, Frontiers::PerBank, 2),
            (Separation::HotCold, Frontiers::PerBank, 2),
            (Separation::None, Frontiers::PerQueue, 8),
            (Separation::HotCold, Frontiers::PerQueue, 8),
        ] {
            let cfg = FtlConfig {
                separation,
                frontiers,
                queues,
                ..small_cfg(GcPolicy::Parallel)
            };
            let what = format!("{planes} plane(s), {separation:?}, {frontiers:?} x {queues}");
            let path = dir
                .path()
                .join(format!("{planes}-{separation:?}-{frontiers:?}.img"));
            let ftl = create(&path, &nand, cfg.clone());
            let st = ftl.stats();
            // 10 % over-provisioning of the 850-990 blocks left for data.
            assert!(
                st.usable_blocks >= st.blocks_needed + 40,
                "{what}: {} usable, {} needed",
                st.usable_blocks,
                st.blocks_needed
            );
            ftl.close().unwrap();
        }
    }
    nand.planes = 1;
    assert_eq!(
        ftl::plan_format(&nand, &small_cfg(GcPolicy::Parallel), None)
            .unwrap()
            .max_export_bytes,
        default_export
    );
}

/// The schemes whose spare does not come from over-provisioning (nftl, rftl, gftl: a logical
/// block's own blocks are their working space) keep 2 % of a new image's good blocks out of
/// its export as spare for blocks that go bad. Before 2026-12-01 their spare was the format's
/// frontier room left over, a fixed few blocks a bank whatever the size (77 of 65 936 blocks at
/// 8 GiB on k9-003): on a large device a handful of worn blocks turned it read-only. (The
/// over-provisioned schemes' format is unchanged: checked from outside, every preset.)
#[test]
fn a_fresh_block_mapped_image_keeps_two_percent_of_its_blocks_as_spare() {
    let dir = tempfile::tempdir().unwrap();
    for blocks_per_bank in [64, 512] {
        let nand = small_nand(4096, blocks_per_bank);
        for scheme in [SchemeKind::Nftl, SchemeKind::Rftl, SchemeKind::Gftl] {
            let cfg = FtlConfig {
                scheme,
                ..small_cfg(GcPolicy::Adaptive)
            };
            let path = dir.path().join(format!("{scheme}-{blocks_per_bank}.img"));
            let ftl = create(&path, &nand, cfg.clone());
            let st = ftl.stats();
            let spare = st.usable_blocks - st.blocks_needed;
            assert!(
                spare >= st.usable_blocks.div_ceil(50),
                "{scheme} on {blocks_per_bank} blocks a bank: {} usable, {} needed",
                st.usable_blocks,
                st.blocks_needed
            );
            // And no more than that, the frontier room the working room leaves (6 blocks a
            // bank less 2 a bank and 2: 14 here) and the rounding to whole logical blocks (at
            // most 2, rftl's three blocks each; gftl's write buffer grows with them): the
            // rest is exported.
            assert!(
                spare <= st.usable_blocks.div_ceil(50) + 14 + 2,
                "{scheme} on {blocks_per_bank} blocks a bank: {spare} spare of {}",
                st.usable_blocks
            );
            ftl.close().unwrap();
        }
    }
}

/// A geometry whose blocks, after the frontier room and the bad-block reserve, hold no logical
/// block of the scheme is refused as too small, naming the three figures (it said "export
/// size is zero", a size the user never gave).
#[test]
fn a_geometry_with_no_room_for_a_logical_block_is_refused_as_too_small() {
    // One bank of 20 blocks: 9 usable beside the superblock and checkpoint areas, 6 of
    // frontier room and 1 of reserve leave 2.
    let mut nand = small_nand(4096, 20);
    nand.geometry.channels = 1;
    nand.geometry.banks_per_channel = 1;
    let cfg = |scheme| FtlConfig {
        scheme,
        ..small_cfg(GcPolicy::Adaptive)
    };
    let err = ftl::plan_format(&nand, &cfg(SchemeKind::Rftl), None)
        .expect_err("rftl's three blocks do not fit")
        .to_string();
    assert!(
        err.contains("geometry too small")
            && err.contains("kept as spare for bad blocks")
            && err.contains("the 3 blocks a logical block of scheme rftl needs"),
        "{err}"
    );
    // NFTL's two do.
    assert!(ftl::plan_format(&nand, &cfg(SchemeKind::Nftl), None).is_ok());
}

/// With frontiers shared per bank (the default) a new image's size does not depend on the
/// queue count, which defaults to the CPU count: the same command made a smaller device with
/// more spare on a machine with more CPUs. Such an image is served with any number of queues.
/// With frontiers `per-queue` each queue's writer owns an open block per bank: the format sets
/// them aside (fewer exported pages for more queues), and the image is served with at most the
/// queues it was formatted for.
#[test]
fn only_per_queue_frontiers_tie_the_format_to_the_queue_count() {
    use ftl::Frontiers::{PerBank, PerQueue};
    let nand = small_nand(4096, 64);
    let cfg = |queues, frontiers| FtlConfig {
        queues,
        frontiers,
        ..small_cfg(GcPolicy::Parallel)
    };
    let export = |queues, frontiers| {
        ftl::plan_format(&nand, &cfg(queues, frontiers), None)
            .unwrap()
            .max_export_bytes
    };
    assert_eq!(export(1, PerBank), export(8, PerBank));
    assert_eq!(export(1, PerQueue), export(1, PerBank));
    assert!(export(8, PerQueue) < export(1, PerQueue));

    let dir = tempfile::tempdir().unwrap();
    let queues_when_opened = |name: &str, format: (usize, _), open_as: (usize, _)| {
        let path = dir.path().join(name);
        if !path.exists() {
            let f = create(&path, &nand, cfg(format.0, format.1));
            assert_eq!(f.queues(), format.0);
            f.close().unwrap();
        }
        let f = open(&path, cfg(open_as.0, open_as.1));
        let n = f.queues();
        block_on(f.write(n - 1, 0, &stamped(0, n as u64), false)).unwrap();
        f.close().unwrap();
        n
    };
    // Formatted per bank for one queue: any number later, unless its frontiers are per queue.
    assert_eq!(
        queues_when_opened("bank.img", (1, PerBank), (4, PerBank)),
        4
    );
    assert_eq!(
        queues_when_opened("bank.img", (1, PerBank), (4, PerQueue)),
        1
    );
    // Formatted per queue for two: two at most per queue, any number per bank.
    assert_eq!(
        queues_when_opened("queue.img", (2, PerQueue), (4, PerQueue)),
        2
    );
    assert_eq!(
        queues_when_opened("queue.img", (2, PerQueue), (4, PerBank)),
        4
    );
}
