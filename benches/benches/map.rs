//! L2P lookup and update throughput with 1, 2, 4 and 8 threads: the page scheme's map under
//! the write cache's stripe locks, as the FTL uses them. An update is a commit: the entry, its
//! chunk's change bit, and the valid bits and counts of the new and the old slot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ftl::cache::WriteCache;
use ftl::layout::Layout;
use ftl::nand_model::Geometry;
use ftl::schemes::page::map::PageMap;
use ftl::{Lpn, Psa};

const ENTRIES: u32 = 1 << 20;
const OPS_PER_THREAD: u64 = 200_000;

struct Table {
    cache: WriteCache,
    map: PageMap,
    slots: u64,
}

fn run(table: &Arc<Table>, threads: u64, update: bool) -> Duration {
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
                    let stripe = table.cache.lock(lpn);
                    if update {
                        let psa = Psa(((x >> 20) % table.slots) as u32);
                        table.map.commit(&stripe, lpn, psa);
                    } else {
                        std::hint::black_box(table.map.get(lpn));
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
    // board-000's page and block shape, with 2^20 + 7 % physical slots.
    let geo = Geometry {
        channels: 4,
        banks_per_channel: 4,
        blocks_per_bank: 550,
        pages_per_block: 128,
        page_size: 4096,
        oob_size: 128,
    };
    let layout = Layout::new(&geo, 1);
    let table = Arc::new(Table {
        cache: WriteCache::new(),
        map: PageMap::new(layout, ENTRIES),
        slots: layout.total_slots(),
    });
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
