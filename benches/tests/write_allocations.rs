//! The inline write path (timing off) allocates nothing per page (issue 14: two allocations per
//! 4 KiB page were ~7 % of a 128 KiB write's CPU). Counted exactly by
//! `ftl_benches::heap::CountingAlloc`, over every thread of the process (GC workers included),
//! while 128 KiB sequential writes overwrite a full device: a regression that allocates per page
//! or per slot again makes it 32 or more per write. Alone in its test binary, so no other test
//! allocates meanwhile. Also runs the `write_cost` bench binary once, small.

use bytes::Bytes;
use ftl::nand_model::TimingMode;
use ftl::FtlConfig;
use futures::executor::block_on;

#[global_allocator]
static HEAP: ftl_benches::heap::CountingAlloc = ftl_benches::heap::CountingAlloc;

const BS: u64 = 128 << 10;

#[test]
fn sequential_large_writes_allocate_less_than_once_per_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nand = ftl_benches::preset("default", 256 << 20);
    let ftl = ftl_benches::ftl(dir.path(), &nand, TimingMode::Off, FtlConfig::default());
    let span = ftl.capacity() / BS * BS;
    let data = Bytes::from(vec![0x5a; BS as usize]);
    let write = |n: u64| {
        block_on(async {
            for i in 0..n {
                ftl.write_bytes(0, i * BS % span, data.clone(), false)
                    .await
                    .expect("write");
            }
        })
    };
    // Fill, then overwrite once: GC reclaims blocks during the measured writes.
    write(2 * span / BS);
    let n = span / BS;
    let before = ftl_benches::heap::allocations();
    write(n);
    let per_write = (ftl_benches::heap::allocations() - before) as f64 / n as f64;
    let s = ftl.stats();
    assert!(s.gc_erases > 0, "GC ran during the measured writes");
    assert!(
        per_write < 4.0,
        "{per_write:.1} allocations per 128 KiB write (32 pages; measured 0.8)"
    );
    let mut buf = vec![0u8; BS as usize];
    block_on(ftl.read(BS, &mut buf)).expect("read");
    assert!(buf.iter().all(|&b| b == 0x5a), "data read back");
}

#[test]
fn write_cost_runs_and_reports_per_write_figures() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_write_cost"))
        .args(["--capacity", "256M", "--requests", "256", "--reps", "1"])
        .args(["--dir", &std::env::temp_dir().to_string_lossy()])
        .output()
        .expect("run write_cost");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "write_cost failed: {text}");
    assert!(
        text.contains("us CPU") && text.contains("allocations") && text.contains("memcpy+crc"),
        "unexpected output: {text}"
    );
}
