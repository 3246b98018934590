//! CPU per write inside the FTL (no NBD, no sockets), against the bare cost of
//! what any block-device emulator does with the same bytes: a copy into a cold mapping, and a
//! CRC of the data (issue 14: "128 KiB writes within nbdkit's CPU per request").
//!
//! ```text
//! cargo run --profile dist -p ftl-benches --bin write_cost -- [--preset default] [--bs 128k]
//!     [--pattern seq|random] [--capacity 1G] [--requests 16384] [--dir /dev/shm] [--reps 3]
//! ```
//!
//! The image (timing off, default `[ftl]` settings, sparse) is filled sequentially twice,
//! so the measured writes overwrite a full device and GC erases the blocks they invalidate.
//! Then one thread writes `--requests` writes of `--bs` from one queue, one after the other
//! (`seq`) or each at a uniformly random `--bs`-aligned offset (`random`: with 4 KiB, the
//! GC-heavy case whose WAF the greedy limit bounds), and the
//! process's CPU time (every thread: writers, GC, maintenance) is divided by the requests. The
//! baselines run in the same process: a `memcpy` of each request into a cold, prefaulted
//! mapping of the same size as the device, and `crc32fast` over it.

use std::time::Instant;

use bytes::Bytes;
use ftl::nand_model::TimingMode;
use ftl::FtlConfig;
use futures::executor::block_on;

#[global_allocator]
static HEAP: ftl_benches::heap::CountingAlloc = ftl_benches::heap::CountingAlloc;

fn cpu_ns() -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given, which is valid for it.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn size(s: &str) -> u64 {
    let (n, m) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>().unwrap_or_else(|_| panic!("bad size {s}")) * m
}

fn main() {
    let mut preset = "default".to_string();
    let mut bs = 128 << 10;
    let mut capacity = 1 << 30;
    let mut requests = 16384u64;
    let mut dir = std::path::PathBuf::from("/dev/shm");
    let mut reps = 3;
    let mut random = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut v = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--preset" => preset = v(),
            "--bs" => bs = size(&v()),
            "--capacity" => capacity = size(&v()),
            "--requests" => requests = v().parse().expect("--requests"),
            "--dir" => dir = v().into(),
            "--reps" => reps = v().parse().expect("--reps"),
            "--pattern" => {
                random = match v().as_str() {
                    "seq" => false,
                    "random" => true,
                    p => panic!("--pattern {p}: seq or random"),
                }
            }
            _ => panic!("unknown argument {a}"),
        }
    }
    assert!(
        bs >= 4096 && bs.is_multiple_of(4096),
        "--bs must be a multiple of 4 KiB"
    );
    let tmp = tempfile::tempdir_in(&dir).expect("scratch dir");
    let nand = ftl_benches::preset(&preset, capacity);
    let ftl = ftl_benches::ftl(tmp.path(), &nand, TimingMode::Off, FtlConfig::default());
    let span = ftl.capacity() / bs * bs;
    let data = Bytes::from((0..bs).map(|i| (i * 7 + 3) as u8).collect::<Vec<u8>>());
    let slots = span / bs;
    // xorshift64: the same offsets every run.
    let mut x = ftl_benches::SEED;
    let mut offset = |i: u64| {
        if random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % slots * bs
        } else {
            i * bs % span
        }
    };
    let mut write_all = |n: u64, start: u64, fill: bool| {
        block_on(async {
            for i in 0..n {
                let off = if fill {
                    (start + i * bs) % span
                } else {
                    offset(start / bs + i)
                };
                ftl.write_bytes(0, off, data.clone(), false)
                    .await
                    .expect("write");
            }
        })
    };
    write_all(2 * span / bs, 0, true);
    block_on(ftl.flush()).expect("flush");

    // Baseline target: a cold mapping as large as the device, faulted in once.
    let mut cold = vec![0u8; span as usize];
    for p in cold.chunks_mut(4096) {
        p[0] = 1;
    }
    let mut at = 0u64;
    for rep in 0..reps {
        let (c0, t0, a0) = (cpu_ns(), Instant::now(), ftl_benches::heap::allocations());
        write_all(requests, rep as u64 * requests * bs, false);
        let (c1, t1, a1) = (cpu_ns(), Instant::now(), ftl_benches::heap::allocations());
        let allocs = (a1 - a0) as f64 / requests as f64;
        let ftl_cpu = (c1 - c0) as f64 / requests as f64 / 1000.0;
        let ftl_wall = (t1 - t0).as_nanos() as f64 / requests as f64 / 1000.0;
        let c2 = cpu_ns();
        let mut sum = 0u32;
        for i in 0..requests {
            // The same pattern over the baseline's mapping.
            let o = if random {
                ((at / bs).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i) % slots * bs
            } else {
                at % span
            } as usize;
            cold[o..o + bs as usize].copy_from_slice(&data);
            sum ^= crc32fast::hash(&cold[o..o + bs as usize]);
            at += bs;
        }
        let base = (cpu_ns() - c2) as f64 / requests as f64 / 1000.0;
        std::hint::black_box(sum);
        println!(
            "{preset} bs={bs} {} rep {rep}: ftl {ftl_cpu:.2} us CPU ({ftl_wall:.2} us wall) per \
             write, {allocs:.1} allocations; memcpy+crc {base:.2} us; ftl - baseline {:.2} us ({:.0} ns \
             per 4 KiB)",
            if random { "random" } else { "seq" },
            ftl_cpu - base,
            (ftl_cpu - base) * 1000.0 / (bs / 4096) as f64
        );
    }
    let s = ftl.stats();
    println!("WAF {:.3}, gc erases {}", s.waf.unwrap_or(0.0), s.gc_erases);
}
