//! L2P lookup and update throughput with 1, 2, 4 and 8 threads on the lock-striped table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ftl::map::MappingTable;
use ftl::{Lpn, Psa};

const ENTRIES: u32 = 1 << 20;
const OPS_PER_THREAD: u64 = 200_000;

fn run(table: &Arc<MappingTable>, threads: u64, update: bool) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let table = table.clone();
            std::thread::spawn(move || {
                let mut x = ftl_benches::SEED ^ t;
                for _ in 0..OPS_PER_THREAD {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let lpn = Lpn((x % ENTRIES as u64) as u32);
                    // The FTL reads and updates entries under their stripe lock: do the same.
                    let _stripe = table.lock(lpn);
                    if update {
                        table.set(lpn, Some(Psa(x as u32 >> 1)));
                    } else {
                        std::hint::black_box(table.get(lpn));
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("bench thread");
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let table = Arc::new(MappingTable::new(ENTRIES));
    for update in [false, true] {
        let mut g = c.benchmark_group(if update { "l2p_update" } else { "l2p_lookup" });
        for threads in [1u64, 2, 4, 8] {
            g.throughput(Throughput::Elements(threads * OPS_PER_THREAD));
            g.bench_function(format!("{threads}_threads"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| run(&table, threads, update)).sum())
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
