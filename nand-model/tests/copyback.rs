//! Copyback: a page moved inside its bank without crossing the channel. Data and OOB arrive
//! intact and survive a reopen, the program rules hold for the destination, faults behave like
//! their read and program counterparts, and the modelled time has no data transfer in it.

mod common;

use std::time::{Duration, Instant};

use common::{pattern, small_config, Fixture};
use nand_model::{BlockAddr, NandError, PageAddr, TimingMode};

fn oob_of(addr: PageAddr) -> Vec<u8> {
    pattern(addr, 9, 40)
}

/// Programs pages 0..n of `block` with their patterns and OOBs.
fn fill(dev: &nand_model::NandDevice, block: BlockAddr, n: u32) {
    for p in 0..n {
        let a = block.page(p);
        dev.program(a, &pattern(a, 1, 4096), &oob_of(a))
            .expect("program")
            .wait();
    }
}

fn read(dev: &nand_model::NandDevice, addr: PageAddr) -> (Vec<u8>, Vec<u8>) {
    let (mut d, mut o) = (vec![0u8; 4096], vec![0u8; 128]);
    dev.read(addr, 0, &mut d, Some(&mut o))
        .expect("read")
        .wait();
    (d, o)
}

#[test]
fn copies_data_and_oob_and_reads_the_oob_out() {
    let mut f = Fixture::small();
    let dev = f.dev();
    let (src_blk, dst_blk) = (BlockAddr::new(1, 2), BlockAddr::new(1, 5));
    fill(dev, src_blk, 3);
    for (i, p) in [2u32, 0, 1].into_iter().enumerate() {
        let mut out = vec![0u8; 40];
        dev.copyback(src_blk.page(p), dst_blk.page(i as u32), Some(&mut out))
            .expect("copyback")
            .wait();
        assert_eq!(out, oob_of(src_blk.page(p)), "OOB read out of page {p}");
    }
    let s = dev.stats();
    assert_eq!(s.totals.copybacks, 3);
    assert_eq!(s.totals.programs, 3 + 3);
    assert_eq!(s.totals.reads, 3);
    // Only the OOB read-out crossed the channel, not the 3 pages.
    assert_eq!(s.totals.bytes_read, 3 * 40);
    assert_eq!(dev.block_state(dst_blk).unwrap().programmed_pages, 3);
    // Offline, the copy's data is found where its source's is (they share a frame).
    let offset = |a| nand_model::page_data_offset(&f.path, a).expect("offset");
    assert_eq!(offset(dst_blk.page(0)), offset(src_blk.page(2)));
    assert_ne!(offset(dst_blk.page(0)), offset(dst_blk.page(1)));
    assert!(nand_model::page_data_offset(&f.path, PageAddr::new(9, 0, 0)).is_err());
    f.reopen(TimingMode::Off);
    let dev = f.dev();
    for (i, p) in [2u32, 0, 1].into_iter().enumerate() {
        let (d, o) = read(dev, dst_blk.page(i as u32));
        assert_eq!(d, pattern(src_blk.page(p), 1, 4096), "data of copy {i}");
        assert_eq!(&o[..40], &oob_of(src_blk.page(p))[..], "OOB of copy {i}");
        assert!(o[40..].iter().all(|&b| b == 0xFF), "unwritten OOB bytes");
        // The source is untouched.
        assert_eq!(
            read(dev, src_blk.page(p)).0,
            pattern(src_blk.page(p), 1, 4096)
        );
    }
}

/// A checked copyback the caller declines (it saw an OOB it cannot use) leaves the
/// destination free and costs a read of the OOB; one it keeps is an ordinary copyback.
#[test]
fn a_declined_copyback_leaves_the_destination_free() {
    let f = Fixture::small();
    let dev = f.dev();
    let (src_blk, dst_blk) = (BlockAddr::new(1, 2), BlockAddr::new(1, 5));
    fill(dev, src_blk, 2);
    let mut out = vec![0u8; 40];
    let mut seen = Vec::new();
    let done = dev
        .copyback_checked(src_blk.page(0), dst_blk.page(0), &mut out, &mut |o| {
            seen = o.to_vec();
            false
        })
        .expect("copyback");
    let nand_model::Copyback::Declined(c) = done else {
        panic!("a declined copyback programmed its destination");
    };
    c.wait();
    assert_eq!(seen, oob_of(src_blk.page(0)), "the OOB the check saw");
    assert_eq!(out, seen);
    assert_eq!(dev.block_state(dst_blk).unwrap().programmed_pages, 0);
    let s = dev.stats();
    assert_eq!((s.totals.copybacks, s.totals.reads), (0, 1));
    assert_eq!(s.totals.bytes_read, 40);
    // The destination page is still the next free one: a kept copyback programs it.
    let done = dev
        .copyback_checked(src_blk.page(1), dst_blk.page(0), &mut out, &mut |_| true)
        .expect("copyback");
    let nand_model::Copyback::Programmed(c) = done else {
        panic!("a kept copyback was declined");
    };
    c.wait();
    assert_eq!(
        read(dev, dst_blk.page(0)).0,
        pattern(src_blk.page(1), 1, 4096)
    );
    assert_eq!(dev.stats().totals.copybacks, 1);
}

#[test]
fn an_erased_source_copies_as_erased() {
    let f = Fixture::small();
    let dev = f.dev();
    let mut out = vec![0u8; 16];
    dev.copyback(
        PageAddr::new(0, 1, 3),
        PageAddr::new(0, 4, 0),
        Some(&mut out),
    )
    .expect("copyback")
    .wait();
    assert!(out.iter().all(|&b| b == 0xFF));
    let (d, o) = read(dev, PageAddr::new(0, 4, 0));
    assert!(d.iter().chain(&o).all(|&b| b == 0xFF));
    assert_eq!(
        dev.block_state(BlockAddr::new(0, 4))
            .unwrap()
            .programmed_pages,
        1
    );
}

#[test]
fn destination_obeys_the_program_rules() {
    let f = Fixture::small();
    let dev = f.dev();
    let src = BlockAddr::new(2, 0);
    fill(dev, src, 2);
    let dst = BlockAddr::new(2, 1);
    // Skipping ahead.
    let e = dev.copyback(src.page(0), dst.page(1), None).unwrap_err();
    assert!(
        matches!(
            e,
            NandError::NotNextPage {
                expected: 0,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
    // Onto a programmed page (including the source itself).
    let e = dev.copyback(src.page(0), src.page(1), None).unwrap_err();
    assert!(matches!(e, NandError::AlreadyProgrammed { .. }), "{e}");
    let e = dev.copyback(src.page(0), src.page(0), None).unwrap_err();
    assert!(matches!(e, NandError::AlreadyProgrammed { .. }), "{e}");
    // Across banks.
    let e = dev
        .copyback(src.page(0), PageAddr::new(3, 1, 0), None)
        .unwrap_err();
    assert!(matches!(e, NandError::CopybackAcrossBanks { .. }), "{e}");
    // Out of range, and an OOB read-out larger than the OOB.
    let e = dev
        .copyback(src.page(0), PageAddr::new(2, 8, 0), None)
        .unwrap_err();
    assert!(matches!(e, NandError::PageOutOfRange { .. }), "{e}");
    let mut big = vec![0u8; 129];
    let e = dev
        .copyback(src.page(0), dst.page(0), Some(&mut big))
        .unwrap_err();
    assert!(matches!(e, NandError::BufferSize { .. }), "{e}");
    // Bad source or destination block.
    dev.mark_bad(BlockAddr::new(2, 3)).unwrap();
    let e = dev
        .copyback(src.page(0), PageAddr::new(2, 3, 0), None)
        .unwrap_err();
    assert!(matches!(e, NandError::BadBlock { .. }), "{e}");
    let e = dev
        .copyback(PageAddr::new(2, 3, 0), dst.page(0), None)
        .unwrap_err();
    assert!(matches!(e, NandError::BadBlock { .. }), "{e}");
    assert_eq!(dev.violations(), 8);
    assert!(e.is_violation());
    // Nothing was programmed by any of them.
    assert_eq!(dev.block_state(dst).unwrap().programmed_pages, 0);
    assert_eq!(dev.stats().totals.copybacks, 0);
}

#[test]
fn read_fault_leaves_the_destination_free_and_program_fault_consumes_it() {
    let f = Fixture::small();
    let dev = f.dev();
    let src = BlockAddr::new(3, 0);
    fill(dev, src, 1);
    let dst = BlockAddr::new(3, 1);
    dev.faults().fail_read_at(src.page(0));
    let mut out = vec![0u8; 40];
    let e = dev
        .copyback(src.page(0), dst.page(0), Some(&mut out))
        .unwrap_err();
    assert!(matches!(e, NandError::Uncorrectable { page } if page == src.page(0)));
    assert!(e.is_fault());
    assert_eq!(dev.block_state(dst).unwrap().programmed_pages, 0);
    // One-shot, like a read fault: the retry moves the page.
    dev.copyback(src.page(0), dst.page(0), Some(&mut out))
        .expect("retry")
        .wait();
    assert_eq!(read(dev, dst.page(0)).0, pattern(src.page(0), 1, 4096));

    dev.faults().fail_program_at(dst.page(1));
    let e = dev.copyback(src.page(0), dst.page(1), None).unwrap_err();
    assert!(matches!(e, NandError::ProgramFailed { page, .. } if page == dst.page(1)));
    assert_eq!(dev.block_state(dst).unwrap().programmed_pages, 2);
    assert_ne!(read(dev, dst.page(1)).0, pattern(src.page(0), 1, 4096));
    let s = dev.stats();
    assert_eq!((s.totals.copybacks, s.totals.faults), (3, 2));
    assert_eq!(dev.violations(), 0);
}

/// A copyback the image's file system has no room for is refused before it programs: a
/// program fault armed at its destination has not happened (not counted, still armed), and
/// fires on the copyback that does program.
#[test]
fn a_copyback_refused_for_room_takes_no_program_fault() {
    let f = Fixture::small();
    let dev = f.dev();
    let (src, dst) = (BlockAddr::new(0, 1), BlockAddr::new(0, 4));
    fill(dev, src, 1);
    dev.faults().fail_program_at(dst.page(0));
    dev.faults().refuse_new_room(true);
    let e = dev.copyback(src.page(0), dst.page(0), None).unwrap_err();
    assert!(
        matches!(e, NandError::NoSpace { page, .. } if page == dst.page(0)),
        "{e}"
    );
    assert_eq!(dev.faults().injected().program, 0, "no program happened");
    assert_eq!(dev.block_state(dst).unwrap().programmed_pages, 0);
    dev.faults().refuse_new_room(false);
    let e = dev.copyback(src.page(0), dst.page(0), None).unwrap_err();
    assert!(
        matches!(e, NandError::ProgramFailed { page, .. } if page == dst.page(0)),
        "{e}"
    );
    assert_eq!(dev.faults().injected().program, 1);
    assert_eq!(dev.block_state(dst).unwrap().programmed_pages, 1);
    // The one-shot fault is spent: the next page copies.
    dev.copyback(src.page(0), dst.page(1), None).unwrap().wait();
    assert_eq!(read(dev, dst.page(1)).0, pattern(src.page(0), 1, 4096));
    assert_eq!(dev.violations(), 0);
}

#[test]
fn takes_read_plus_program_time_without_a_data_transfer() {
    let f = Fixture::new(&small_config(), TimingMode::Real);
    let dev = f.dev();
    let t = small_config().timing;
    let src = BlockAddr::new(0, 0);
    dev.program(src.page(0), &[7u8; 4096], &[1; 40])
        .unwrap()
        .wait();
    let before = Instant::now();
    let c = dev
        .copyback(
            src.page(0),
            BlockAddr::new(0, 1).page(0),
            Some(&mut [0u8; 40]),
        )
        .unwrap();
    let after = Instant::now();
    let model = t.t_read + t.xfer(40) + t.t_prog;
    assert!(c.deadline() >= before + model, "deadline too early");
    // A page transfer (4 KiB at 81.92 MB/s = 50 us) would push it far past this.
    assert!(c.deadline() <= after + model + Duration::from_micros(5));
    c.wait();
    let ch = &dev.stats().channels[0];
    assert_eq!(ch.bytes, 4096 + 40 + 40);
}

/// A copy shares the source's frame: reprogramming the source (after its block's erase) and
/// erasing the copy's neighbours must never change what the copy reads, before and after a
/// reopen, including along a chain of copies of copies.
#[test]
fn copies_outlive_their_source_and_survive_reopen() {
    let mut f = Fixture::small();
    let dev = f.dev();
    let (a, b, c) = (
        BlockAddr::new(2, 0),
        BlockAddr::new(2, 1),
        BlockAddr::new(2, 2),
    );
    fill(dev, a, 4);
    for p in 0..4 {
        dev.copyback(a.page(p), b.page(p), None).unwrap().wait();
    }
    for p in 0..4 {
        dev.copyback(b.page(p), c.page(p), None).unwrap().wait();
    }
    // Reprogram A with other data, then B, while C still shares the first frames.
    dev.erase(a).unwrap().wait();
    for p in 0..4 {
        dev.program(a.page(p), &pattern(a.page(p), 77, 4096), &[])
            .unwrap()
            .wait();
    }
    f.reopen(TimingMode::Off);
    let dev = f.dev();
    dev.erase(b).unwrap().wait();
    dev.program(b.page(0), &pattern(b.page(0), 88, 4096), &[])
        .unwrap()
        .wait();
    f.reopen(TimingMode::Off);
    let dev = f.dev();
    for p in 0..4 {
        assert_eq!(read(dev, a.page(p)).0, pattern(a.page(p), 77, 4096), "A{p}");
        assert_eq!(read(dev, c.page(p)).0, pattern(a.page(p), 1, 4096), "C{p}");
        assert_eq!(
            &read(dev, c.page(p)).1[..40],
            &oob_of(a.page(p))[..],
            "C{p} OOB"
        );
    }
    assert_eq!(read(dev, b.page(0)).0, pattern(b.page(0), 88, 4096));
    assert!(read(dev, b.page(1)).0.iter().all(|&x| x == 0xFF));
}

/// One bank of 24 blocks x 16 pages (384 frames: room for a frame with 255 sharers), with an
/// endurance no test here reaches.
fn one_bank() -> Fixture {
    let geometry = nand_model::Geometry {
        channels: 1,
        banks_per_channel: 1,
        blocks_per_bank: 24,
        pages_per_block: 16,
        page_size: 4096,
        oob_size: 128,
    };
    let config = nand_model::NandConfig {
        geometry,
        endurance: 1_000_000,
        ..small_config()
    };
    Fixture::new(&config, TimingMode::Off)
}

/// Random programs, copybacks, erases and reopens on one bank, checked against a plain model of
/// what every page must read. Exercises frame sharing, the free pool, the reference counts'
/// rebuild at open, and the fallback to a real copy when one frame has 255 references.
#[test]
fn random_copybacks_match_a_model() {
    let mut f = one_bank();
    let geometry = *f.dev().geometry();
    let mut rng: u64 = 0x5eed;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let blocks = geometry.blocks_per_bank;
    let ppb = geometry.pages_per_block;
    // What each page must read (None: erased) and the block's next free page.
    let mut want: Vec<Vec<Option<u8>>> = vec![vec![None; ppb as usize]; blocks as usize];
    let mut fill_at = vec![0u32; blocks as usize];
    let mut stamp = 0u8;
    let page_of = |tag: u8| vec![tag; 4096];
    let mut copybacks = 0;
    for step in 0..20_000 {
        let dev = f.dev();
        let blk = next(u64::from(blocks)) as u32;
        let addr = BlockAddr::new(0, blk);
        match next(100) {
            // Copy a random programmed page into a block with room. Page 0 of block 0 is copied
            // very often, so its frame reaches 255 references and the fallback runs.
            0..=59 => {
                let (sb, sp) = if next(4) == 0 {
                    (0, 0)
                } else {
                    (blk, next(u64::from(ppb)) as u32)
                };
                let Some(tag) = want[sb as usize][sp as usize] else {
                    continue;
                };
                let Some(db) = (0..blocks)
                    .map(|i| (blk + 1 + i) % blocks)
                    .find(|&b| fill_at[b as usize] < ppb)
                else {
                    continue;
                };
                let dp = fill_at[db as usize];
                dev.copyback(
                    BlockAddr::new(0, sb).page(sp),
                    BlockAddr::new(0, db).page(dp),
                    None,
                )
                .unwrap()
                .wait();
                want[db as usize][dp as usize] = Some(tag);
                fill_at[db as usize] += 1;
                copybacks += 1;
            }
            60..=84 if fill_at[blk as usize] < ppb => {
                let p = fill_at[blk as usize];
                stamp = stamp.wrapping_add(1);
                dev.program(addr.page(p), &page_of(stamp), &[stamp; 8])
                    .unwrap()
                    .wait();
                want[blk as usize][p as usize] = Some(stamp);
                fill_at[blk as usize] += 1;
            }
            // Block 0 is erased rarely, so its page 0 keeps being copied.
            85..=98 if blk != 0 || next(20) == 0 => {
                dev.erase(addr).unwrap().wait();
                want[blk as usize] = vec![None; ppb as usize];
                fill_at[blk as usize] = 0;
            }
            99 => f.reopen(TimingMode::Off),
            _ => continue,
        }
        if step % 997 == 0 || step == 19_999 {
            let dev = f.dev();
            for b in 0..blocks {
                for p in 0..ppb {
                    let (d, o) = read(dev, BlockAddr::new(0, b).page(p));
                    match want[b as usize][p as usize] {
                        Some(tag) => {
                            assert!(
                                d.iter().all(|&x| x == tag),
                                "step {step}: block {b} page {p}"
                            );
                            assert_eq!(&o[..1], &[tag], "step {step}: OOB of block {b} page {p}");
                        }
                        None => assert!(d.iter().all(|&x| x == 0xFF), "step {step}: {b}/{p}"),
                    }
                }
            }
        }
    }
    assert!(copybacks > 5000, "{copybacks}");
    assert_eq!(f.dev().violations(), 0);
}

/// One page copied 300 times: after 254 copies its frame has 255 references and further
/// copies get bytes of their own. Every copy reads the original after the source is
/// reprogrammed, before and after a reopen (which recounts the references).
#[test]
fn a_frame_shared_255_times_falls_back_to_copying() {
    let mut f = one_bank();
    let dev = f.dev();
    let src = PageAddr::new(0, 0, 0);
    dev.program(src, &[0xA5; 4096], &[1; 8]).unwrap().wait();
    let dsts: Vec<PageAddr> = (1..20)
        .flat_map(|b| (0..16).map(move |p| PageAddr::new(0, b, p)))
        .take(300)
        .collect();
    for &d in &dsts {
        dev.copyback(src, d, None).unwrap().wait();
    }
    dev.erase(src.block).unwrap().wait();
    dev.program(src, &[0x5A; 4096], &[2; 8]).unwrap().wait();
    for round in 0..2 {
        let dev = f.dev();
        assert!(read(dev, src).0.iter().all(|&x| x == 0x5A));
        for &d in &dsts {
            let (data, oob) = read(dev, d);
            assert!(data.iter().all(|&x| x == 0xA5), "round {round}: {d}");
            assert_eq!(&oob[..8], &[1; 8]);
        }
        f.reopen(TimingMode::Off);
    }
}
