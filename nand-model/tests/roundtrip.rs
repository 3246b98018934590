//! Program / read / erase data paths: full and column reads, OOB, erased pages.

mod common;

use common::{pattern, Fixture};
use nand_model::{BlockAddr, PageAddr};

#[test]
fn program_then_read_whole_page_and_oob() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(2, 3, 0);
    let data = pattern(p, 0x5a, 4096);
    let oob: Vec<u8> = (0..40).collect();
    dev.program(p, &data, &oob).unwrap().wait();
    let mut back = vec![0u8; 4096];
    let mut oob_back = vec![0u8; 128];
    dev.read(p, 0, &mut back, Some(&mut oob_back))
        .unwrap()
        .wait();
    assert_eq!(back, data);
    assert_eq!(&oob_back[..40], &oob[..]);
    // OOB bytes the program did not supply read back as 0xFF (left unprogrammed).
    assert!(oob_back[40..].iter().all(|&b| b == 0xFF));
    let st = dev.block_state(p.block).unwrap();
    assert_eq!((st.programmed_pages, st.erase_count, st.bad), (1, 0, false));
}

/// A page programmed from parts (the FTL's slots) reads back as their concatenation, with
/// parts of any length at any alignment; parts that do not add up to a page are refused and
/// program nothing.
#[test]
fn a_page_programmed_from_parts_reads_back_whole() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(3, 1, 0);
    let data = pattern(p, 7, 4096 + 3);
    // Unaligned sources and lengths (the copy uses streaming stores on 16-byte chunks).
    let parts: [&[u8]; 4] = [
        &data[3..1003],
        &data[1003..1010],
        &data[1010..4000],
        &data[4000..],
    ];
    let oob = [0xA5u8; 24];
    dev.program_planes_parts(&[(p, &parts, &oob)])
        .unwrap()
        .wait();
    let mut back = vec![0u8; 4096];
    let mut oob_back = [0u8; 24];
    dev.read(p, 0, &mut back, Some(&mut oob_back))
        .unwrap()
        .wait();
    assert!(back == data[3..], "the parts, one after the other");
    assert_eq!(oob_back, oob);
    assert_eq!(dev.stats().totals.bytes_programmed, 4096 + 24);

    let q = p.block.page(1);
    let short: [&[u8]; 2] = [&data[..2048], &data[..2047]];
    let err = dev.program_planes_parts(&[(q, &short, &[])]).unwrap_err();
    assert!(err.to_string().contains("page_size"), "{err}");
    assert_eq!(dev.block_state(q.block).unwrap().programmed_pages, 1);
}

#[test]
fn column_reads_and_oob_only_reads() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(1, 0, 0);
    let data = pattern(p, 1, 4096);
    dev.program(p, &data, &[9; 128]).unwrap().wait();
    for (off, len) in [
        (0usize, 1usize),
        (512, 512),
        (4095, 1),
        (1000, 3000),
        (4096, 0),
    ] {
        let mut buf = vec![0u8; len];
        dev.read(p, off as u32, &mut buf, None).unwrap().wait();
        assert_eq!(buf, &data[off..off + len], "offset {off} len {len}");
    }
    let mut oob = [0u8; 16];
    dev.read(p, 0, &mut [], Some(&mut oob)).unwrap().wait();
    assert_eq!(oob, [9; 16]);
}

#[test]
fn erased_pages_read_as_ff() {
    let f = Fixture::small();
    let dev = f.dev();
    let b = BlockAddr::new(0, 4);
    let mut buf = vec![0u8; 4096];
    let mut oob = vec![0u8; 128];
    dev.read(b.page(2), 0, &mut buf, Some(&mut oob))
        .unwrap()
        .wait();
    assert!(buf.iter().chain(&oob).all(|&x| x == 0xFF));
    for i in 0..4 {
        let p = b.page(i);
        dev.program(p, &pattern(p, 2, 4096), &[1; 8])
            .unwrap()
            .wait();
    }
    dev.erase(b).unwrap().wait();
    let st = dev.block_state(b).unwrap();
    assert_eq!((st.programmed_pages, st.erase_count), (0, 1));
    for i in 0..4 {
        buf.fill(0);
        oob.fill(0);
        dev.read(b.page(i), 0, &mut buf, Some(&mut oob))
            .unwrap()
            .wait();
        assert!(buf.iter().chain(&oob).all(|&x| x == 0xFF), "page {i}");
    }
    // The block is writable again from page 0.
    let p = b.page(0);
    let data = pattern(p, 3, 4096);
    dev.program(p, &data, &[]).unwrap().wait();
    dev.read(p, 0, &mut buf, None).unwrap().wait();
    assert_eq!(buf, data);
}

#[test]
fn stats_count_operations() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(3, 0, 0);
    dev.program(p, &[0; 4096], &[0; 10]).unwrap().wait();
    let mut buf = [0u8; 100];
    dev.read(p, 0, &mut buf, None).unwrap().wait();
    dev.erase(p.block).unwrap().wait();
    let s = dev.stats();
    let b = &s.banks[3];
    assert_eq!((b.bank, b.channel), (3, 1));
    assert_eq!((b.programs, b.reads, b.erases), (1, 1, 1));
    assert_eq!((b.bytes_programmed, b.bytes_read), (4106, 100));
    assert_eq!(b.inflight, 0);
    assert_eq!(b.max_inflight, 1);
    assert!(b.busy_ns > 1_500_000);
    assert_eq!(s.channels[1].transfers, 2);
    assert_eq!(s.channels[0].transfers, 0);
    assert_eq!(s.totals.programs, 1);
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"max_inflight\":1"));
}

#[test]
fn inflight_counts_undropped_completions() {
    let f = Fixture::small();
    let dev = f.dev();
    let b = BlockAddr::new(2, 0);
    let c0 = dev.program(b.page(0), &[0; 4096], &[]).unwrap();
    let c1 = dev.program(b.page(1), &[0; 4096], &[]).unwrap();
    assert_eq!(dev.bank_load(b.bank).inflight, 2);
    assert!(c0.is_complete());
    c0.wait();
    assert_eq!(dev.bank_load(b.bank).inflight, 1);
    let fut = c1.into_future();
    assert_eq!(dev.bank_load(b.bank).inflight, 1);
    drop(fut);
    assert_eq!(dev.bank_load(b.bank).inflight, 0);
    assert_eq!(dev.bank_load(b.bank).busy_for, None);
    assert_eq!(dev.stats().banks[2].max_inflight, 2);
}
