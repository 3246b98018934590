//! Timing `real` on board-000 with 16 banks: sequential write throughput as a fraction of the
//! modelled limit `banks * page_size / t_prog` (aim >= 90 %).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ftl::nand_model::TimingMode;
use ftl::{FtlConfig, GcPolicy};
use futures::executor::block_on;

const BYTES: u64 = 32 << 20;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let nand = ftl_benches::preset("board-000", 512 << 20);
    let geo = nand.geometry;
    let limit = geo.banks() as f64 * geo.page_size as f64 / nand.timing.t_prog.as_secs_f64();
    let cfg = FtlConfig {
        queues: 2,
        gc_policy: GcPolicy::Adaptive,
        ..FtlConfig::default()
    };
    let ftl = ftl_benches::ftl(dir.path(), &nand, TimingMode::Real, cfg);
    let chunk = vec![0x3cu8; 128 * 1024];
    let mut g = c.benchmark_group("real_timing_board_000");
    g.throughput(Throughput::Bytes(BYTES));
    let mut offset = 0u64;
    let mut best = 0.0f64;
    g.bench_function("sequential_write_128k", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                block_on(async {
                    let mut done = 0;
                    while done < BYTES {
                        if offset + chunk.len() as u64 > ftl.capacity() {
                            offset = 0;
                        }
                        ftl.write(0, offset, &chunk, false).await.expect("write");
                        offset += chunk.len() as u64;
                        done += chunk.len() as u64;
                    }
                    ftl.flush().await.expect("flush");
                });
                let el = start.elapsed();
                best = best.max(BYTES as f64 / el.as_secs_f64() / limit);
                total += el;
            }
            total
        })
    });
    g.finish();
    println!(
        "modelled limit {:.1} MB/s ({} banks x {} B / {:?}); best run reached {:.1} % of it",
        limit / 1e6,
        geo.banks(),
        geo.page_size,
        nand.timing.t_prog,
        best * 100.0
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(10));
    targets = bench
}
criterion_main!(benches);
