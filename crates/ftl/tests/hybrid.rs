//! The hybrid schemes' merges, each provoked by a workload built for it and asserted in the
//! statistics (thesis §3.1): a sequential rewrite of a logical block ends in a switch merge, a
//! rewrite of its first half in a partial merge, scattered writes in full merges. Data is
//! checked after each phase, after a clean reopen and after a power cut. Crashes at every medium
//! operation, merges included, are swept in `power_cut.rs` for every scheme.

mod common;

use common::*;
use ftl::{FtlConfig, GcPolicy, SchemeKind};

/// Logical pages per logical block in `small_nand(4096, _)`: 8 pages of one 4 KiB slot.
const SPB: u64 = 8;

fn cfg(scheme: SchemeKind, log_blocks: u32) -> FtlConfig {
    FtlConfig {
        scheme,
        log_blocks,
        checkpoint_interval_bytes: 0,
        ..small_cfg(GcPolicy::Adaptive)
    }
}

type Device = StampedDevice;

impl StampedDevice {
    /// (switch, partial, full) merge counts.
    fn merges(&self) -> (u64, u64, u64) {
        let m = self
            .ftl
            .stats()
            .merges
            .expect("a hybrid scheme reports merges");
        (m.switch.count, m.partial.count, m.full.count)
    }
}

fn device(dir: &std::path::Path, scheme: SchemeKind, log_blocks: u32) -> Device {
    Device::new(create(
        &dir.join("h.img"),
        &small_nand(4096, 32),
        cfg(scheme, log_blocks),
    ))
}

/// Reopens cleanly, then after a power cut (everything was flushed), checking the data.
fn reopen_twice(dir: &std::path::Path, d: Device, scheme: SchemeKind) {
    let Device { ftl, tags, tag } = d;
    ftl.close().unwrap();
    drop(ftl);
    let ftl = open(&dir.join("h.img"), cfg(scheme, 0));
    assert_eq!(ftl.recovery().mode, ftl::RecoveryMode::Clean);
    let mut d = Device { ftl, tags, tag };
    d.verify("after a clean reopen");
    // More merges, flushed, then a power cut.
    d.write((0..4 * SPB).rev());
    block_on(d.ftl.flush()).unwrap();
    let Device { ftl, tags, tag } = d;
    ftl.simulate_power_loss();
    let ftl = open(&dir.join("h.img"), cfg(scheme, 0));
    let d = Device { ftl, tags, tag };
    d.verify("after a power cut");
}

#[test]
fn bast_switch_partial_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = device(dir.path(), SchemeKind::Bast, 1);
    // Switch: block 0 written in order fills its log with every page in its own slot; the
    // next write to block 0 finds the log full and switches it in.
    d.write(0..SPB);
    d.write([0]);
    assert_eq!(
        d.merges(),
        (1, 0, 0),
        "a sequential write of a block switches"
    );
    d.verify("switch");
    // Partial: the log of block 0 now holds page 0; pages 1..4 continue it in order. Block 1
    // needs the pool's only log: block 0's log is merged by copying pages 4..8 into it.
    d.write(1..SPB / 2);
    d.write([SPB]);
    assert_eq!(
        d.merges(),
        (1, 1, 0),
        "a rewrite of a block's first half is a partial merge"
    );
    let m = d.ftl.stats().merges.unwrap();
    assert_eq!(
        m.partial.pages_copied,
        SPB / 2,
        "the block's second half was copied"
    );
    assert_eq!(m.partial.erases, 1, "the old data block was erased");
    d.verify("partial");
    // Full: block 1's log gets pages out of order; block 2 takes the pool's log.
    d.write([SPB + 5, SPB + 2, SPB + 5]);
    d.write([2 * SPB + 3]);
    assert_eq!(d.merges(), (1, 1, 1), "scattered writes make a full merge");
    let m = d.ftl.stats().merges.unwrap();
    assert_eq!(m.full.pages_copied, 3, "block 1's current pages: 8, 13, 10");
    assert_eq!(m.full.erases, 1, "its log (it had no data block)");
    d.verify("full");
    assert_eq!(d.ftl.stats().nand_violations, 0);
    reopen_twice(dir.path(), d, SchemeKind::Bast);
}

#[test]
fn fast_switch_partial_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = device(dir.path(), SchemeKind::Fast, 2);
    // Switch: block 0 written from offset 0 in order goes to the SW log; offset 0 of block 1
    // starts a new SW log, so the full SW log of block 0 is switched in.
    d.write(0..SPB);
    d.write([SPB]);
    assert_eq!(
        d.merges(),
        (1, 0, 0),
        "a sequential write of a block switches"
    );
    // Partial: block 1's SW log holds pages 0..4 in order; offset 0 of block 2 merges it.
    d.write(SPB + 1..SPB + SPB / 2);
    d.write([2 * SPB]);
    assert_eq!(
        d.merges(),
        (1, 1, 0),
        "a block's first half in the SW log: partial"
    );
    d.verify("switch and partial");
    // Full: random writes go to the RW log (the pool's other block); once it is full the
    // next random write merges it: a full merge of every block with a current page in it.
    d.write([3, 11, 6, 1, 12, 5, 9, 2]);
    assert_eq!(d.merges(), (1, 1, 0), "the RW log is full, not yet merged");
    d.write([7]);
    let (_, _, full) = d.merges();
    assert_eq!(full, 2, "blocks 0 and 1 had pages in the RW log");
    d.verify("full");
    assert_eq!(d.ftl.stats().nand_violations, 0);
    reopen_twice(dir.path(), d, SchemeKind::Fast);
}

/// `[ftl] log_placement` (thesis ch. 4): `same` keeps a logical block's log block and its full
/// merge's new block on its data block's bank; `spread` puts them where other controllers
/// serve them: another channel under TMCD, another bank under PMCD. `small_nand` has banks 0
/// and 1 on channel 0, 2 and 3 on channel 1.
#[test]
fn log_placement_same_or_spread() {
    use ftl::nand_model::Interconnect;
    use ftl::LogPlacement;
    for interconnect in [Interconnect::Tmcd, Interconnect::Pmcd { controllers: 2 }] {
        for placement in LogPlacement::ALL {
            let what = format!("{placement} under {interconnect:?}");
            let dir = tempfile::tempdir().unwrap();
            let nand = ftl::nand_model::NandConfig {
                interconnect,
                ..small_nand(4096, 32)
            };
            let ftl = create(
                &dir.path().join("h.img"),
                &nand,
                FtlConfig {
                    log_placement: placement,
                    ..cfg(SchemeKind::Bast, 2)
                },
            );
            let pages = (ftl.capacity() / 4096) as usize;
            let mut d = Device {
                ftl,
                tags: vec![0; pages],
                tag: 0,
            };
            let bank_of = |d: &Device, lpn: u64| {
                block_on(d.ftl.flush()).unwrap();
                d.ftl
                    .physical_slot(lpn as u32)
                    .expect("flushed")
                    .0
                    .block
                    .bank
                    .0
            };
            let apart = |a: u32, b: u32| match interconnect {
                Interconnect::Tmcd => a / 2 != b / 2,
                Interconnect::Pmcd { .. } => a != b,
            };
            // Block 0 switches its log in: that is its data block now. Page 0 again: a new log.
            d.write(0..SPB);
            d.write([0]);
            let data = bank_of(&d, 3);
            let log = bank_of(&d, 0);
            match placement {
                LogPlacement::Same => assert_eq!(log, data, "{what}: log on the data bank"),
                LogPlacement::Spread => assert!(apart(log, data), "{what}: log {log}, data {data}"),
            }
            // Out-of-order pages, then two other blocks take the pool: block 0 is fully merged.
            d.write([5, 2, 5]);
            d.write([SPB, 2 * SPB]);
            assert_eq!(d.merges().2, 1, "{what}: one full merge");
            let merged = bank_of(&d, 0);
            assert_eq!(merged, bank_of(&d, 3), "{what}: one data block");
            match placement {
                LogPlacement::Same => assert_eq!(merged, data, "{what}: merged on the data bank"),
                // Two channels leave no third one under TMCD: away from the data block then.
                LogPlacement::Spread => assert!(
                    apart(merged, data)
                        && (apart(merged, log) || interconnect == Interconnect::Tmcd),
                    "{what}: merged to {merged}, data {data}, log {log}"
                ),
            }
            d.verify(&what);
            assert_eq!(d.ftl.stats().nand_violations, 0);
        }
    }
}

/// Static wear levelling on the hybrids: a device full of cold data with one logical block
/// rewritten over and over (switch merges cycle the free blocks) passes the erase-count spread,
/// and the maintenance tick moves cold logical blocks off their young blocks. Data and
/// invariants hold throughout.
#[test]
fn hybrids_level_wear_statically() {
    for scheme in [SchemeKind::Bast, SchemeKind::Fast] {
        let dir = tempfile::tempdir().unwrap();
        let ftl = create(
            &dir.path().join("h.img"),
            &small_nand(4096, 32),
            FtlConfig {
                wear_level_spread: 4,
                ..cfg(scheme, 2)
            },
        );
        let pages = (ftl.capacity() / 4096) as usize;
        let mut d = Device {
            ftl,
            tags: vec![0; pages],
            tag: 0,
        };
        d.write(0..pages as u64);
        let start = std::time::Instant::now();
        while d.ftl.stats().wear_level_moves < 3 && start.elapsed().as_secs() < 20 {
            d.write(0..SPB);
            d.write(SPB..2 * SPB);
            block_on(d.ftl.flush()).unwrap();
        }
        let s = d.ftl.stats();
        assert!(
            s.wear_level_moves >= 3,
            "{scheme}: {} moves, wear {:?}",
            s.wear_level_moves,
            s.wear
        );
        d.verify(&format!("{scheme} after wear levelling"));
        assert_eq!(s.nand_violations, 0);
    }
}

/// A hybrid image's writers own no open blocks, so its format sets none aside per queue and it
/// is served with any number of queues, whatever `[ftl] frontiers` says (that setting is the
/// page scheme's; the running configuration's scheme is the image's, not the file's).
#[test]
fn a_hybrid_image_takes_any_number_of_queues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fast.img");
    let nand = small_nand(4096, 64);
    let fast = ftl::FtlConfig {
        scheme: ftl::SchemeKind::Fast,
        queues: 1,
        ..small_cfg(GcPolicy::InPath)
    };
    create(&path, &nand, fast).close().unwrap();
    let ftl = open(
        &path,
        ftl::FtlConfig {
            queues: 4,
            frontiers: ftl::Frontiers::PerQueue,
            ..small_cfg(GcPolicy::InPath)
        },
    );
    assert_eq!(ftl.queues(), 4);
    block_on(ftl.write(3, 0, &stamped(0, 1), false)).unwrap();
    ftl.close().unwrap();
}

/// NFTL (paper 004's block-level baseline): every logical block has its own replacement
/// block, so a rewrite merges only the logical block written, once its replacement is full;
/// BAST with a small pool merges other logical blocks to free a log.
#[test]
fn nftl_merges_only_a_logical_block_whose_replacement_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = device(dir.path(), SchemeKind::Nftl, 0);
    let blocks = d.tags.len() as u64 / SPB;
    assert!(blocks >= 8, "{blocks} logical blocks");
    // Half the usable blocks hold data, the other half replacements (the format's spare).
    assert_eq!(d.ftl.stats().merges.unwrap().log_blocks as u64, blocks);
    for b in 0..blocks {
        d.write(b * SPB..(b + 1) * SPB);
    }
    // Each logical block's first write went to its replacement, in order: the first rewrite
    // finds it full and switches it in.
    for b in 0..blocks {
        d.write([b * SPB + 3]);
    }
    assert_eq!(
        d.merges(),
        (blocks, 0, 0),
        "a switch per logical block, nothing else"
    );
    // One page rewritten in every logical block: each has a replacement of its own, none full.
    for b in 0..blocks {
        d.write([b * SPB + 5]);
    }
    assert_eq!(
        d.merges(),
        (blocks, 0, 0),
        "no merge without a full replacement"
    );
    // Logical block 0's replacement fills (it holds pages 3 and 5): the next rewrite merges it.
    d.write((0..SPB - 2).map(|i| i % 4));
    d.write([1]);
    assert_eq!(
        d.merges(),
        (blocks, 0, 1),
        "a full merge of the block written"
    );
    d.verify("nftl");
    reopen_twice(dir.path(), d, SchemeKind::Nftl);
}

/// A hybrid device whose image's file system fills up (a full disk, injected: room not
/// allocated before is refused) turns read-only saying why, its writes fail with "no space",
/// no block is retired for it (a program that finds no room is no fault of its block), and
/// every page acknowledged before reads back. (Here the first program to find no room is a
/// host write's, into a fresh log block; a merge copy that finds none first is not provoked:
/// `block_ops::release_emptied` keeps its destination too.)
#[test]
fn a_hybrid_device_without_room_in_the_file_system_retires_no_block() {
    for scheme in [SchemeKind::Bast, SchemeKind::Fast] {
        let dir = tempfile::tempdir().unwrap();
        let mut d = device(dir.path(), scheme, 2);
        d.write(0..4 * SPB);
        block_on(d.ftl.flush()).unwrap();
        d.ftl.nand().faults().refuse_new_room(true);
        // Scattered FUA writes over logical blocks with and without data: every one needs a log
        // and, with two logs, a merge into a fresh block first.
        let mut failed = None;
        'rounds: for round in 0..SPB {
            for lb in 0..16 {
                let l = lb * SPB + (round * 3 + lb) % SPB;
                let tag = d.tag + 1;
                match block_on(d.ftl.write(0, l * 4096, &stamped(l, tag), true)) {
                    Ok(()) => {
                        d.tag = tag;
                        d.tags[l as usize] = tag;
                    }
                    Err(e) => {
                        failed = Some((e.to_string(), l, tag));
                        break 'rounds;
                    }
                }
            }
        }
        let (failed, failed_lpn, failed_tag) =
            failed.unwrap_or_else(|| panic!("{scheme:?}: no write failed"));
        let why = d.ftl.read_only_reason().expect("read-only");
        assert!(why.contains("has no room for it"), "{scheme:?}: {why}");
        assert!(failed.contains("no space"), "{scheme:?}: {failed}");
        let s = d.ftl.stats();
        assert_eq!(
            (s.retired_blocks, s.bad_blocks),
            (0, 0),
            "{scheme:?}: {why}"
        );
        let mut buf = vec![0u8; 4096];
        for (l, &t) in d.tags.iter().enumerate().filter(|(_, &t)| t > 0) {
            block_on(d.ftl.read(l as u64 * 4096, &mut buf)).unwrap();
            let got = check_stamp(l as u64, &buf);
            // The write that failed may read as written (it is in the write buffer) or not.
            let either = l as u64 == failed_lpn && got == Some(failed_tag);
            assert!(
                got == Some(t) || either,
                "{scheme:?}: page {l}: {got:?}, not {t}"
            );
        }
    }
}
