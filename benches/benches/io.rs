//! In-process 4 KiB random write and read throughput with timing off (no NBD, no sockets), and
//! GC victim selection cost. Targets: >= 300 k writes/s and >= 500 k reads/s on 2 cores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ftl::nand_model::TimingMode;
use ftl::{FtlConfig, GcPolicy};
use futures::executor::block_on;

const OPS_PER_THREAD: u64 = 100_000;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let nand = ftl_benches::preset("board-000", 1 << 30);
    let cfg = FtlConfig {
        queues: 2,
        gc_policy: GcPolicy::Adaptive,
        ..FtlConfig::default()
    };
    let ftl = Arc::new(ftl_benches::ftl(dir.path(), &nand, TimingMode::Off, cfg));
    let pages = ftl.capacity() / 4096;
    // Half the device is the working set: random writes overwrite it and keep GC busy.
    let span = pages / 2;
    let threads = 2u64;
    let data = Arc::new(ftl_benches::page(1));
    // Fill the span once so reads hit flash.
    block_on(async {
        for l in 0..span {
            ftl.write(l as usize, l * 4096, &data, false)
                .await
                .expect("fill");
        }
        ftl.flush().await.expect("flush");
    });
    let mut g = c.benchmark_group("ftl_4k_random");
    for write in [true, false] {
        g.throughput(Throughput::Elements(threads * OPS_PER_THREAD));
        g.bench_function(
            if write {
                "write_2_threads"
            } else {
                "read_2_threads"
            },
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for i in 0..iters {
                        let start = Instant::now();
                        let hs: Vec<_> = (0..threads)
                            .map(|t| {
                                let (ftl, data) = (ftl.clone(), data.clone());
                                std::thread::spawn(move || {
                                    let mut x = ftl_benches::SEED ^ (t + 1) ^ (i << 8);
                                    let mut buf = vec![0u8; 4096];
                                    for _ in 0..OPS_PER_THREAD {
                                        let l = xorshift(&mut x) % span;
                                        if write {
                                            block_on(ftl.write(t as usize, l * 4096, &data, false))
                                                .expect("write");
                                        } else {
                                            block_on(ftl.read(l * 4096, &mut buf)).expect("read");
                                        }
                                    }
                                })
                            })
                            .collect();
                        for h in hs {
                            h.join().expect("bench thread");
                        }
                        total += start.elapsed();
                    }
                    total
                })
            },
        );
    }
    g.finish();
    let s = ftl.stats();
    println!(
        "after the runs: WAF {:.2}, gc erases {}, map bytes per exported page {:.2}",
        s.waf.unwrap_or(0.0),
        s.gc_erases,
        s.map_bytes_per_page
    );

    let mut g = c.benchmark_group("gc_victim_selection");
    let blocks = nand.geometry.blocks_per_bank as u64;
    g.throughput(Throughput::Elements(blocks));
    g.bench_function(format!("scan_{blocks}_blocks"), |b| {
        b.iter(|| ftl.bench_victim_scan(0))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
