//! Every flash-rule violation returns its typed error and is counted; faults are not.

mod common;

use common::{pattern, Fixture};
use nand_model::{BlockAddr, BufferKind, NandError, PageAddr};

fn page(dev: &nand_model::NandDevice, addr: PageAddr) -> Vec<u8> {
    pattern(addr, 0, dev.geometry().page_size as usize)
}

#[test]
fn out_of_range_addresses() {
    let f = Fixture::small();
    let dev = f.dev();
    let data = vec![0u8; 4096];
    let mut buf = vec![0u8; 16];
    let cases = [
        PageAddr::new(4, 0, 0), // bank
        PageAddr::new(0, 8, 0), // block
        PageAddr::new(0, 0, 4), // page
    ];
    for (i, addr) in cases.into_iter().enumerate() {
        let e = dev.program(addr, &data, &[]).unwrap_err();
        assert!(
            matches!(e, NandError::PageOutOfRange { page } if page == addr),
            "{e}"
        );
        let e = dev.read(addr, 0, &mut buf, None).unwrap_err();
        assert!(matches!(e, NandError::PageOutOfRange { .. }), "{e}");
        assert_eq!(dev.violations(), 2 * (i as u64 + 1));
        assert!(!e.is_fault() && e.is_violation());
    }
    let before = dev.violations();
    for b in [BlockAddr::new(9, 0), BlockAddr::new(0, 8)] {
        assert!(matches!(dev.erase(b), Err(NandError::BlockOutOfRange { block }) if block == b));
        assert!(matches!(
            dev.block_state(b),
            Err(NandError::BlockOutOfRange { .. })
        ));
        assert!(matches!(
            dev.mark_bad(b),
            Err(NandError::BlockOutOfRange { .. })
        ));
    }
    assert_eq!(dev.violations(), before + 6);
}

#[test]
fn program_must_be_the_next_page() {
    let f = Fixture::small();
    let dev = f.dev();
    let b = BlockAddr::new(1, 2);
    let e = dev
        .program(b.page(1), &page(dev, b.page(1)), &[])
        .unwrap_err();
    match e {
        NandError::NotNextPage {
            block,
            expected,
            got,
        } => assert_eq!((block, expected, got), (b, 0, 1)),
        other => panic!("unexpected {other}"),
    }
    assert_eq!(dev.violations(), 1);
    dev.program(b.page(0), &page(dev, b.page(0)), &[])
        .unwrap()
        .wait();
    assert!(matches!(
        dev.program(b.page(3), &page(dev, b.page(3)), &[]),
        Err(NandError::NotNextPage {
            expected: 1,
            got: 3,
            ..
        })
    ));
    assert_eq!(dev.violations(), 2);
    assert_eq!(dev.block_state(b).unwrap().programmed_pages, 1);
}

#[test]
fn program_of_programmed_page_is_refused() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(0, 0, 0);
    dev.program(p, &page(dev, p), &[1, 2, 3]).unwrap().wait();
    let e = dev.program(p, &page(dev, p), &[]).unwrap_err();
    assert!(
        matches!(e, NandError::AlreadyProgrammed { page } if page == p),
        "{e}"
    );
    assert_eq!(dev.violations(), 1);
    // A full block: every page is "already programmed".
    let b = BlockAddr::new(0, 1);
    for i in 0..4 {
        dev.program(b.page(i), &page(dev, b.page(i)), &[])
            .unwrap()
            .wait();
    }
    assert!(matches!(
        dev.program(b.page(2), &page(dev, b.page(2)), &[]),
        Err(NandError::AlreadyProgrammed { .. })
    ));
    assert_eq!(dev.violations(), 2);
}

#[test]
fn bad_block_refuses_every_operation() {
    let f = Fixture::small();
    let dev = f.dev();
    let b = BlockAddr::new(3, 5);
    dev.mark_bad(b).unwrap();
    dev.mark_bad(b).unwrap(); // idempotent
    assert!(dev.block_state(b).unwrap().bad);
    let mut buf = vec![0u8; 4096];
    assert!(
        matches!(dev.read(b.page(0), 0, &mut buf, None), Err(NandError::BadBlock { block }) if block == b)
    );
    assert!(matches!(
        dev.program(b.page(0), &buf, &[]),
        Err(NandError::BadBlock { .. })
    ));
    assert!(matches!(dev.erase(b), Err(NandError::BadBlock { .. })));
    assert_eq!(dev.violations(), 3);
}

#[test]
fn buffer_sizes_are_checked() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(0, 0, 0);
    let cases: Vec<(Vec<u8>, Vec<u8>, BufferKind)> = vec![
        (vec![0; 4095], vec![], BufferKind::Data),
        (vec![0; 4097], vec![], BufferKind::Data),
        (vec![0; 4096], vec![0; 129], BufferKind::Oob),
    ];
    for (data, oob, kind) in &cases {
        let e = dev.program(p, data, oob).unwrap_err();
        assert!(
            matches!(e, NandError::BufferSize { buffer, .. } if buffer == *kind),
            "{e}"
        );
    }
    let mut data = vec![0u8; 100];
    let e = dev.read(p, 4000, &mut data, None).unwrap_err();
    assert!(
        matches!(
            e,
            NandError::BufferSize {
                buffer: BufferKind::Data,
                offset: 4000,
                len: 100,
                ..
            }
        ),
        "{e}"
    );
    let mut oob = vec![0u8; 200];
    assert!(matches!(
        dev.read(p, 0, &mut [], Some(&mut oob)),
        Err(NandError::BufferSize {
            buffer: BufferKind::Oob,
            ..
        })
    ));
    assert_eq!(dev.violations(), 5);
    // Nothing was programmed by the refused calls.
    assert_eq!(dev.block_state(p.block).unwrap().programmed_pages, 0);
    assert_eq!(dev.stats().violations, 5);
}

#[test]
fn error_messages_name_the_address() {
    let e = NandError::NotNextPage {
        block: BlockAddr::new(1, 2),
        expected: 3,
        got: 5,
    };
    assert_eq!(
        e.to_string(),
        "bank 1 block 2: program of page 5 but the next free page is 3"
    );
}
