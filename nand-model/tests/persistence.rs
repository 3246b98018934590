//! What the image keeps across close and reopen: page data, OOB, erase counts, bad flags,
//! programmed-page counts, identity and configuration.

mod common;

use common::{pattern, small_config, small_geometry, Fixture};
use nand_model::{Access, BlockAddr, NandDevice, NandError, PageAddr, TimingMode};

#[test]
fn everything_survives_reopen() {
    let mut f = Fixture::small();
    let (uuid, created) = (f.dev().uuid(), f.dev().created());
    {
        let dev = f.dev();
        // Bank 0 block 1: erased twice, then two pages programmed.
        let b = BlockAddr::new(0, 1);
        dev.erase(b).unwrap().wait();
        dev.erase(b).unwrap().wait();
        for i in 0..2 {
            let p = b.page(i);
            dev.program(p, &pattern(p, 7, 4096), &pattern(p, 8, 100))
                .unwrap()
                .wait();
        }
        dev.mark_bad(BlockAddr::new(3, 7)).unwrap();
        let p = PageAddr::new(2, 6, 0);
        dev.program(p, &pattern(p, 9, 4096), &[]).unwrap().wait();
        dev.sync().unwrap();
    }
    f.reopen(TimingMode::Off);
    let dev = f.dev();
    assert_eq!(dev.uuid(), uuid);
    assert_eq!(dev.created(), created);
    assert_eq!(dev.config(), &small_config());
    let b = BlockAddr::new(0, 1);
    let st = dev.block_state(b).unwrap();
    assert_eq!((st.erase_count, st.programmed_pages, st.bad), (2, 2, false));
    for i in 0..2 {
        let p = b.page(i);
        let mut data = vec![0u8; 4096];
        let mut oob = vec![0u8; 128];
        dev.read(p, 0, &mut data, Some(&mut oob)).unwrap().wait();
        assert_eq!(data, pattern(p, 7, 4096));
        assert_eq!(&oob[..100], &pattern(p, 8, 100)[..]);
        assert!(oob[100..].iter().all(|&x| x == 0xFF));
    }
    assert!(dev.block_state(BlockAddr::new(3, 7)).unwrap().bad);
    let st = dev.block_state(BlockAddr::new(2, 6)).unwrap();
    assert_eq!(st.programmed_pages, 1);
    // The next page of a reopened block is still the one after the persisted count.
    dev.program(b.page(2), &[0; 4096], &[]).unwrap().wait();
    assert!(dev.program(b.page(2), &[0; 4096], &[]).is_err());
}

#[test]
fn unsynced_writes_survive_drop_too() {
    // MAP_SHARED stores are in the page cache at once: no sync is needed to survive the
    // process, only to survive the machine.
    let mut f = Fixture::small();
    let p = PageAddr::new(1, 1, 0);
    f.dev()
        .program(p, &pattern(p, 1, 4096), &[])
        .unwrap()
        .wait();
    f.reopen(TimingMode::Real);
    let mut data = vec![0u8; 4096];
    f.dev().read(p, 0, &mut data, None).unwrap().wait();
    assert_eq!(data, pattern(p, 1, 4096));
    assert_eq!(f.dev().timing_mode(), TimingMode::Real);
}

#[test]
fn open_with_expected_geometry() {
    let mut f = Fixture::small();
    f.dev = None;
    let dev = NandDevice::open(&f.path, Some(&small_geometry()), TimingMode::Off).unwrap();
    assert_eq!(dev.geometry(), &small_geometry());
    assert_eq!(dev.path(), f.path.as_path());
}

#[test]
fn image_is_sparse_at_creation() {
    let cfg = nand_model::preset("default").unwrap().config;
    let f = Fixture::new(&cfg, TimingMode::Off);
    let meta = std::fs::metadata(&f.path).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert!(meta.len() > 512 << 20);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "allocated {} B",
        meta.blocks() * 512
    );
}

/// `preallocate` allocates the whole file (no holes left) and changes no data, before or after
/// a reopen; a second call is harmless.
#[test]
fn preallocate_fills_the_holes_and_keeps_the_data() {
    use std::os::unix::fs::MetadataExt;
    let mut f = Fixture::small();
    let p = PageAddr::new(1, 3, 0);
    f.dev()
        .program(p, &pattern(p, 5, 4096), &pattern(p, 6, 64))
        .unwrap()
        .wait();
    let meta = std::fs::metadata(&f.path).unwrap();
    assert!(
        meta.blocks() * 512 < meta.len(),
        "a new image is sparse ({} of {} bytes allocated)",
        meta.blocks() * 512,
        meta.len()
    );
    f.dev().preallocate().unwrap();
    f.dev().preallocate().unwrap();
    // On tmpfs the mapping is populated too (elsewhere the result depends on the file system).
    let shm = tempfile::tempdir_in("/dev/shm").expect("a directory in /dev/shm (tmpfs)");
    let dev =
        NandDevice::create(&shm.path().join("t.img"), &small_config(), TimingMode::Off).unwrap();
    dev.program(p, &pattern(p, 1, 4096), &[]).unwrap().wait();
    assert!(dev.preallocate().unwrap(), "a tmpfs image is mapped in");
    let mut data = vec![0u8; 4096];
    dev.read(p, 0, &mut data, None).unwrap().wait();
    assert_eq!(data, pattern(p, 1, 4096));
    drop(dev);
    let meta = std::fs::metadata(&f.path).unwrap();
    assert!(
        meta.blocks() * 512 >= meta.len(),
        "preallocated: {} of {} bytes allocated",
        meta.blocks() * 512,
        meta.len()
    );
    f.reopen(TimingMode::Off);
    let (mut data, mut oob) = (vec![0u8; 4096], vec![0u8; 64]);
    f.dev()
        .read(p, 0, &mut data, Some(&mut oob))
        .unwrap()
        .wait();
    assert_eq!((data, oob), (pattern(p, 5, 4096), pattern(p, 6, 64)));
    // An unwritten page still reads erased (allocated zeroes are not data).
    let q = PageAddr::new(2, 0, 0);
    let mut data = vec![0u8; 4096];
    f.dev().read(q, 0, &mut data, None).unwrap().wait();
    assert!(data.iter().all(|&b| b == 0xFF));
}

/// An image opened read-only reads as the writable open does, refuses every operation that
/// would change it (before the read-only mapping is stored into), and is left byte for byte as
/// it was; a reader's lock leaves room for other readers' `image_holder` checks to see it.
#[test]
fn a_read_only_open_reads_everything_and_changes_nothing() {
    let mut f = Fixture::small();
    let b = BlockAddr::new(1, 2);
    {
        let dev = f.dev();
        dev.erase(b).unwrap().wait();
        for i in 0..3 {
            let p = b.page(i);
            dev.program(p, &pattern(p, 3, 4096), &pattern(p, 4, 64))
                .unwrap()
                .wait();
        }
        // A copyback destination: its data is read through the frame table.
        dev.copyback(b.page(0), BlockAddr::new(1, 5).page(0), None)
            .unwrap()
            .wait();
        dev.mark_bad(BlockAddr::new(0, 7)).unwrap();
    }
    f.dev = None;
    let before = std::fs::read(&f.path).unwrap();
    let dev = NandDevice::open_with(&f.path, None, TimingMode::Off, Access::ReadOnly).unwrap();
    assert_eq!(dev.access(), Access::ReadOnly);
    // This process holds it (asked without dropping its lock: see below).
    assert_eq!(
        nand_model::image_holder(&f.path).unwrap(),
        Some(std::process::id() as i32)
    );
    let st = dev.block_state(b).unwrap();
    assert_eq!((st.erase_count, st.programmed_pages, st.bad), (1, 3, false));
    assert!(dev.block_state(BlockAddr::new(0, 7)).unwrap().bad);
    for (p, want) in [
        (b.page(2), pattern(b.page(2), 3, 4096)),
        (BlockAddr::new(1, 5).page(0), pattern(b.page(0), 3, 4096)),
    ] {
        let mut data = vec![0u8; 4096];
        dev.read(p, 0, &mut data, None).unwrap().wait();
        assert_eq!(data, want, "{p}");
    }
    let p = b.page(3);
    let refused = [
        dev.program(p, &[0; 4096], &[]).map(drop),
        dev.erase(b).map(drop),
        dev.mark_bad(b),
        dev.copyback(b.page(0), p, None).map(drop),
        dev.copyback_checked(b.page(0), p, &mut [0u8; 16], &mut |_| true)
            .map(drop),
    ];
    for (i, r) in refused.into_iter().enumerate() {
        assert!(
            matches!(r, Err(NandError::ReadOnly)),
            "operation {i}: {r:?}"
        );
    }
    assert_eq!(
        dev.violations(),
        0,
        "a refusal is not a flash-rule violation"
    );
    assert!(!dev.preallocate().unwrap(), "nothing allocated");
    dev.sync().unwrap();
    drop(dev);
    assert!(
        std::fs::read(&f.path).unwrap() == before,
        "the image changed"
    );
    assert_eq!(nand_model::image_holder(&f.path).unwrap(), None);
    // A writable open after it works as ever.
    f.reopen(TimingMode::Off);
    f.dev().program(p, &[7; 4096], &[]).unwrap().wait();
}
