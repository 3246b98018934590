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
    assert!(matches!(e, NandError::ProgramFailed { page } if page == dst.page(1)));
    assert_eq!(dev.block_state(dst).unwrap().programmed_pages, 2);
    assert_ne!(read(dev, dst.page(1)).0, pattern(src.page(0), 1, 4096));
    let s = dev.stats();
    assert_eq!((s.totals.copybacks, s.totals.faults), (3, 2));
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
