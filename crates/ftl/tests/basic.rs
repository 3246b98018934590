//! Basic behaviour: round trips, sub-page writes, trims, errors, reopen.

mod common;

use common::*;
use ftl::{FtlError, GcPolicy, RecoveryMode};

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
