//! NAND model operation overhead with timing off: the cost the emulator adds per operation.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nand_model::{BankId, BlockAddr, NandDevice, PageAddr, TimingMode};

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = ftl_benches::preset("board-000", 256 << 20);
    let dev = NandDevice::create(&dir.path().join("n.img"), &cfg, TimingMode::Off).expect("create");
    let geo = *dev.geometry();
    let data = vec![0xa5u8; geo.page_size as usize];
    let oob = vec![0x11u8; 64];
    let mut g = c.benchmark_group("nand_timing_off");
    g.throughput(Throughput::Elements(1));
    let mut next = 0u64;
    g.bench_function("program_4k", |b| {
        b.iter(|| {
            let bank = (next % geo.banks() as u64) as u32;
            let per_bank = next / geo.banks() as u64;
            let block = (per_bank / geo.pages_per_block as u64) as u32 % geo.blocks_per_bank;
            let page = (per_bank % geo.pages_per_block as u64) as u32;
            let blk = BlockAddr {
                bank: BankId(bank),
                block,
            };
            if page == 0 && dev.block_state(blk).expect("state").programmed_pages > 0 {
                dev.erase(blk).expect("erase").wait();
            }
            next += 1;
            dev.program(PageAddr { block: blk, page }, &data, &oob)
                .expect("program")
                .wait();
        })
    });
    let mut buf = vec![0u8; 4096];
    let mut i = 0u32;
    g.bench_function("read_4k", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            let addr = PageAddr {
                block: BlockAddr {
                    bank: BankId(i % geo.banks()),
                    block: 0,
                },
                page: 0,
            };
            dev.read(addr, 0, &mut buf, None).expect("read").wait();
        })
    });
    // Copyback of the pages of block 0 into the other blocks of the same bank in turn, erasing
    // each before its first page: what GC costs per fully valid page it moves.
    let mut out_oob = vec![0u8; 64];
    let mut k = 0u64;
    let (banks, ppb) = (geo.banks() as u64, geo.pages_per_block as u64);
    g.bench_function("copyback_4k", |b| {
        b.iter(|| {
            let bank = BankId((k % banks) as u32);
            let page = ((k / banks) % ppb) as u32;
            let cycle = k / (banks * ppb);
            k += 1;
            let dst = BlockAddr {
                bank,
                block: 1 + (cycle % (geo.blocks_per_bank as u64 - 1)) as u32,
            };
            if page == 0 && dev.block_state(dst).expect("state").programmed_pages > 0 {
                dev.erase(dst).expect("erase").wait();
            }
            let src = PageAddr {
                block: BlockAddr { bank, block: 0 },
                page,
            };
            dev.copyback(src, PageAddr { block: dst, page }, Some(&mut out_oob))
                .expect("copyback")
                .wait();
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
