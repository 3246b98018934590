//! Clean-open, crash-open and full-scan-open times of sparse `board-000` images (issue 2:
//! "report clean-open and crash-open times for a 4 GiB and a 64 GiB sparse image"), with the
//! RAM the FTL needs once open.
//!
//! ```text
//! cargo run --release -p ftl-benches --bin open_times -- [--sizes 4G,64G] [--dir DIR] [--warm]
//! ```
//!
//! Per raw size (preset `board-000` scaled with `NandConfig::scaled_to`, timing off, periodic
//! checkpoints off) the image is a sparse file of which only a bounded amount is ever written:
//!
//! 1. create; fill the first 1 GiB sequentially (128 KiB writes, 2 queues); overwrite 256 MiB
//!    at random 4 KiB pages of that range; flush; `close` (flush + checkpoint);
//! 2. clean open (must be `RecoveryMode::Clean`, nothing scanned);
//! 3. overwrite 256 MiB more at random, flush (durable, but no checkpoint), `simulate_power_loss`;
//! 4. crash open (must be `RollForward`): the scan covers the pages written since the checkpoint;
//! 5. take both checkpoint areas' first page addresses (`newest_checkpoint_pages`, then more
//!    `checkpoint`s until one lands in the other area: a chain of deltas stays in its area),
//!    close, corrupt both pages (each chain's full checkpoint) in the image file, open: no usable
//!    checkpoint, so every programmed page is scanned (`FullScan`).
//!
//! After every open, 4096 random pages of the written range are read back and checked. Before
//! every open the image is synced and dropped from the page cache (`dd iflag=nocache`, i.e.
//! `posix_fadvise(DONTNEED)`), so opens read from disk as after a reboot; `--warm` skips that.
//! Each size runs in a child process of its own, so the RSS figures of one size do not carry
//! over to the next; the peak RSS (`VmHWM`) is reset with `/proc/self/clear_refs` before each
//! open and read after it. The images are deleted at the end. The heap an open allocates (its
//! peak, and what it keeps) is counted exactly by a counting global allocator
//! (`ftl_benches::heap`), which, unlike the RSS, leaves out the image's mmapped pages.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use ftl::nand_model::{NandConfig, PageAddr, TimingMode};
use ftl::{Ftl, FtlConfig, GcPolicy, RecoveryMode, RecoveryReport};
use futures::executor::block_on;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const FILL_BYTES: u64 = GIB;
const RANDOM_BYTES: u64 = 256 * MIB;
const CRASH_BYTES: u64 = 256 * MIB;
const CHUNK: u64 = 128 * 1024;
const THREADS: u64 = 2;
const CHECKS: u64 = 4096;

struct Args {
    sizes: Vec<u64>,
    dir: Option<PathBuf>,
    warm: bool,
    child: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('G' | 'g') => (&s[..s.len() - 1], GIB),
        Some('M' | 'm') => (&s[..s.len() - 1], MIB),
        Some('T' | 't') => (&s[..s.len() - 1], GIB << 10),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .map(|n| n * mult)
        .map_err(|e| format!("bad size {s:?}: {e}"))
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        sizes: vec![4 * GIB, 64 * GIB],
        dir: None,
        warm: false,
        child: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--sizes" => {
                let v = it.next().ok_or("--sizes needs a value, e.g. 4G,64G")?;
                a.sizes = v.split(',').map(parse_size).collect::<Result<_, _>>()?;
            }
            "--dir" => a.dir = Some(it.next().ok_or("--dir needs a value")?.into()),
            "--warm" => a.warm = true,
            "--child" => a.child = true,
            "--bench" => {} // passed by `cargo bench`; ignored
            "-h" | "--help" => {
                println!("open_times [--sizes 4G,64G] [--dir DIR] [--warm]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn human(bytes: u64) -> String {
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

/// Free bytes on the file system holding `dir` (from `df`).
fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(dir)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// `(VmHWM, VmRSS, RssAnon, RssFile)` in bytes.
fn rss() -> [u64; 4] {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    [
        get("VmHWM:"),
        get("VmRSS:"),
        get("RssAnon:"),
        get("RssFile:"),
    ]
}

fn reset_peak_rss() {
    // "5" resets VmHWM to the current RSS (Linux >= 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Syncs the image and drops it from the page cache, so the next open reads from disk.
fn evict(path: &Path, warm: bool) {
    if warm {
        return;
    }
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.sync_all();
    }
    let _ = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status();
}

fn corrupt(path: &Path, p: PageAddr) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open image to corrupt it");
    let at = nand_model::page_data_offset(path, p).expect("page offset in the image");
    f.seek(SeekFrom::Start(at + 100)).expect("seek");
    f.write_all(&[0x5a; 16]).expect("corrupt");
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn stamp(lpn: u64, gen: u32) -> Vec<u8> {
    ftl_benches::page((lpn << 8) | gen as u64)
}

/// Sequential fill of `0..FILL_BYTES`, generation 0, 2 threads on their own queues.
fn fill(ftl: &Ftl, pages: u64) {
    let per = pages / THREADS;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let per_chunk = CHUNK / 4096;
                let mut l = t * per;
                while l < (t + 1) * per {
                    let n = per_chunk.min((t + 1) * per - l);
                    let buf: Vec<u8> = (l..l + n).flat_map(|p| stamp(p, 0)).collect();
                    block_on(ftl.write(t as usize, l * 4096, &buf, false)).expect("fill write");
                    l += n;
                }
            });
        }
    });
}

/// `bytes` of random 4 KiB overwrites inside `0..pages`; thread `t` owns the pages `l % 2 == t`,
/// so every page's newest generation is known.
fn overwrite(ftl: &Ftl, pages: u64, bytes: u64, gens: &[AtomicU32], seed: u64) {
    let per = bytes / 4096 / THREADS;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let mut x = ftl_benches::SEED ^ seed ^ (t + 1);
                for _ in 0..per {
                    let l = (xorshift(&mut x) % (pages / THREADS)) * THREADS + t;
                    let g = gens[l as usize].load(Ordering::Relaxed) + 1;
                    gens[l as usize].store(g, Ordering::Relaxed);
                    block_on(ftl.write(t as usize, l * 4096, &stamp(l, g), false))
                        .expect("random write");
                }
            });
        }
    });
}

fn verify(ftl: &Ftl, pages: u64, gens: &[AtomicU32], seed: u64) {
    let mut x = ftl_benches::SEED ^ seed ^ 0xc4ec;
    let mut buf = vec![0u8; 4096];
    for _ in 0..CHECKS {
        let l = xorshift(&mut x) % pages;
        block_on(ftl.read(l * 4096, &mut buf)).expect("read back");
        let g = gens[l as usize].load(Ordering::Relaxed);
        assert!(buf == stamp(l, g), "page {l}: not generation {g}");
    }
}

#[global_allocator]
static HEAP: ftl_benches::heap::CountingAlloc = ftl_benches::heap::CountingAlloc;

struct Open {
    wall_ms: f64,
    rep: RecoveryReport,
    rss: [u64; 4],
    /// Heap bytes `open` allocated at its peak, and still holds after it (beyond what the
    /// process held before it).
    heap_peak: usize,
    heap_kept: usize,
}

fn open(path: &Path, cfg: &FtlConfig, warm: bool) -> (Ftl, Open) {
    evict(path, warm);
    reset_peak_rss();
    let base = ftl_benches::heap::reset_peak();
    let t = Instant::now();
    let ftl = Ftl::open(path, TimingMode::Off, cfg.clone()).expect("open image");
    let wall_ms = t.elapsed().as_secs_f64() * 1e3;
    let heap_peak = ftl_benches::heap::peak().saturating_sub(base);
    let heap_kept = ftl_benches::heap::live().saturating_sub(base);
    let rep = ftl.recovery();
    let rss = rss();
    (
        ftl,
        Open {
            wall_ms,
            rep,
            rss,
            heap_peak,
            heap_kept,
        },
    )
}

fn field(k: &str, v: impl std::fmt::Display) -> String {
    format!("{k}={v}")
}

/// Runs one size; prints `RESULT k=v ...` lines for the parent.
fn run_size(raw: u64, dir: &Path, warm: bool) {
    let nand: NandConfig = ftl_benches::preset("board-000", raw);
    let geo = nand.geometry;
    let cfg = FtlConfig {
        queues: THREADS as usize,
        gc_policy: GcPolicy::Adaptive,
        checkpoint_interval_bytes: 0,
        ..FtlConfig::default()
    };
    let path = dir.join(format!("open-times-{}.img", raw / MIB));
    let _ = std::fs::remove_file(&path);
    let mut out = vec![
        field("raw", raw),
        field("banks", geo.banks()),
        field("blocks", geo.total_blocks()),
    ];
    let log = |m: &str| eprintln!("[{}] {m}", human(raw));

    let t = Instant::now();
    let ftl = Ftl::create(&path, &nand, TimingMode::Off, cfg.clone(), None).expect("create");
    out.push(field("create_ms", t.elapsed().as_secs_f64() * 1e3));
    let cap = ftl.capacity();
    out.push(field("export", cap));
    let pages = FILL_BYTES.min(cap) / 4096;
    let gens: Vec<AtomicU32> = (0..pages).map(|_| AtomicU32::new(0)).collect();
    log(&format!("created, exports {}; filling", human(cap)));

    let t = Instant::now();
    fill(&ftl, pages);
    overwrite(&ftl, pages, RANDOM_BYTES, &gens, 1);
    block_on(ftl.flush()).expect("flush");
    let s = t.elapsed().as_secs_f64();
    out.push(field(
        "fill_mbs",
        (pages * 4096 + RANDOM_BYTES) as f64 / s / 1e6,
    ));
    let t = Instant::now();
    ftl.close().expect("close");
    out.push(field("close_ms", t.elapsed().as_secs_f64() * 1e3));
    drop(ftl);
    log("closed; clean open");

    // Clean open.
    let (ftl, o) = open(&path, &cfg, warm);
    assert_eq!(o.rep.mode, RecoveryMode::Clean, "{:?}", o.rep);
    assert_eq!(o.rep.pages_scanned, 0, "clean open scanned: {:?}", o.rep);
    let st = ftl.stats();
    out.extend([
        field("clean_ms", o.wall_ms),
        field("clean_rec_ms", o.rep.millis),
        field("clean_hwm", o.rss[0]),
        field("clean_rss", o.rss[1]),
        field("clean_anon", o.rss[2]),
        field("clean_file", o.rss[3]),
        field("clean_heap", o.heap_peak),
        field("clean_kept", o.heap_kept),
        field("bpp", st.map_bytes_per_page),
        field("fixed", st.map_fixed_bytes),
    ]);
    verify(&ftl, pages, &gens, 2);
    log("clean open verified; writing without checkpoint, then power loss");

    overwrite(&ftl, pages, CRASH_BYTES, &gens, 3);
    block_on(ftl.flush()).expect("flush");
    ftl.simulate_power_loss();

    // Crash open: checkpoint + roll-forward scan.
    let (ftl, o) = open(&path, &cfg, warm);
    assert_eq!(o.rep.mode, RecoveryMode::RollForward, "{:?}", o.rep);
    out.extend([
        field("crash_ms", o.wall_ms),
        field("crash_rec_ms", o.rep.millis),
        field("crash_pages", o.rep.pages_scanned),
        field("crash_blocks", o.rep.blocks_scanned),
        field("crash_hwm", o.rss[0]),
        field("crash_heap", o.heap_peak),
    ]);
    verify(&ftl, pages, &gens, 4);
    log("crash open verified; corrupting both checkpoint areas");

    // Both checkpoint areas' first pages (where each chain's full checkpoint starts): the area
    // the crash open's checkpoint went to, then the other one. Checkpoints form chains (a full
    // one, then deltas appended in the same area), so checkpoint until the area changes.
    let a = *ftl.newest_checkpoint_pages().first().expect("a checkpoint");
    let mut b = a;
    let mut extra = 0;
    while b == a {
        assert!(extra < 100, "100 checkpoints and still in the same area");
        ftl.checkpoint().expect("checkpoint");
        extra += 1;
        b = *ftl.newest_checkpoint_pages().first().expect("a checkpoint");
    }
    out.push(field("ckpts_to_switch", extra));
    ftl.close().expect("close");
    drop(ftl);
    corrupt(&path, a);
    corrupt(&path, b);

    let (ftl, o) = open(&path, &cfg, warm);
    if o.rep.mode != RecoveryMode::FullScan {
        eprintln!("warning: expected a full scan, got {:?}", o.rep);
    }
    out.extend([
        field("full_mode", format!("{:?}", o.rep.mode)),
        field("full_ms", o.wall_ms),
        field("full_rec_ms", o.rep.millis),
        field("full_pages", o.rep.pages_scanned),
        field("full_blocks", o.rep.blocks_scanned),
        field("full_hwm", o.rss[0]),
        field("full_heap", o.heap_peak),
    ]);
    verify(&ftl, pages, &gens, 5);
    ftl.close().expect("close");
    drop(ftl);
    let md = std::fs::metadata(&path).expect("image metadata");
    {
        use std::os::unix::fs::MetadataExt;
        out.push(field("img_len", md.len()));
        out.push(field("img_alloc", md.blocks() * 512));
    }
    std::fs::remove_file(&path).expect("delete image");
    log("full-scan open verified; image deleted");
    println!("RESULT {}", out.join(" "));
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("open_times: {e}");
            std::process::exit(2);
        }
    };
    let tmp = match args.dir {
        Some(_) => None,
        None => Some(tempfile::tempdir().expect("tempdir")),
    };
    let dir = match (&args.dir, &tmp) {
        (Some(d), _) => d.clone(),
        (None, t) => t.as_ref().expect("tempdir").path().to_path_buf(),
    };
    if args.child {
        for &raw in &args.sizes {
            run_size(raw, &dir, args.warm);
        }
        return;
    }
    // Each size writes ~1.5 GiB of data plus OOB and checkpoints; want ample room.
    let need = 8 * GIB;
    match free_bytes(&dir) {
        Some(f) if f < need => {
            eprintln!(
                "open_times: only {} free in {}; need {}",
                human(f),
                dir.display(),
                human(need)
            );
            std::process::exit(1);
        }
        Some(f) => eprintln!("{} free in {}", human(f), dir.display()),
        None => eprintln!("warning: cannot tell free space in {}", dir.display()),
    }
    let exe = std::env::current_exe().expect("own path");
    let mut rows = Vec::new();
    for &raw in &args.sizes {
        let mut cmd = Command::new(&exe);
        cmd.args(["--child", "--sizes", &raw.to_string(), "--dir"])
            .arg(&dir);
        if args.warm {
            cmd.arg("--warm");
        }
        let out = cmd
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run child");
        if !out.status.success() {
            eprintln!("open_times: size {} failed", human(raw));
            // A failed child leaves its image behind: delete it (exit skips destructors).
            let _ = std::fs::remove_file(dir.join(format!("open-times-{}.img", raw / MIB)));
            drop(tmp);
            std::process::exit(1);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .expect("child result");
        let kv: std::collections::HashMap<String, String> = line
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        rows.push(kv);
    }
    print_tables(&rows, args.warm);
}

fn print_tables(rows: &[std::collections::HashMap<String, String>], warm: bool) {
    let f = |r: &std::collections::HashMap<String, String>, k: &str| -> f64 {
        r.get(k).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    };
    let mib = |b: f64| b / MIB as f64;
    println!(
        "\nopen times, board-000 scaled, timing off, page cache {} before each open",
        if warm { "warm" } else { "dropped" }
    );
    println!("1 GiB sequential fill + 256 MiB random overwrite, then 256 MiB more for the crash\n");
    println!("| raw | exported | blocks | create ms | fill MB/s | close ms | clean open ms | crash open ms (rebuild ms) | crash pages / blocks scanned | full-scan open ms (rebuild ms) | full-scan pages / blocks scanned | image allocated |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} ({:.0}) | {} / {} | {:.0} ({:.0}) | {} / {} ({}) | {:.2} GiB of {} |",
            human(f(r, "raw") as u64),
            human(f(r, "export") as u64),
            f(r, "blocks"),
            f(r, "create_ms"),
            f(r, "fill_mbs"),
            f(r, "close_ms"),
            f(r, "clean_ms"),
            f(r, "crash_ms"),
            f(r, "crash_rec_ms"),
            f(r, "crash_pages"),
            f(r, "crash_blocks"),
            f(r, "full_ms"),
            f(r, "full_rec_ms"),
            f(r, "full_pages"),
            f(r, "full_blocks"),
            r.get("full_mode").map_or("?", String::as_str),
            f(r, "img_alloc") / GIB as f64,
            human(f(r, "img_len") as u64),
        );
    }
    println!("\nRAM after the clean open\n");
    println!("| raw | map B/page | map fixed | map total (predicted) | VmHWM clean open | VmRSS | RssAnon | RssFile | VmHWM crash open | VmHWM full-scan open |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let lpns = f(r, "export") / 4096.0;
        let predicted = f(r, "bpp") * lpns + f(r, "fixed");
        println!(
            "| {} | {:.2} | {:.1} KiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB |",
            human(f(r, "raw") as u64),
            f(r, "bpp"),
            f(r, "fixed") / 1024.0,
            mib(predicted),
            mib(f(r, "clean_hwm")),
            mib(f(r, "clean_rss")),
            mib(f(r, "clean_anon")),
            mib(f(r, "clean_file")),
            mib(f(r, "crash_hwm")),
            mib(f(r, "full_hwm")),
        );
    }
    println!("\nHeap `open` allocated (counting allocator: exact, all threads), per exported 4 KiB page\n");
    println!(
        "| raw | kept after clean open | peak clean open | peak crash open | peak full-scan open |"
    );
    println!("|---|---|---|---|---|");
    for r in rows {
        let lpns = f(r, "export") / 4096.0;
        let cell = |k: &str| format!("{:.1} MiB = {:.2} B/page", mib(f(r, k)), f(r, k) / lpns);
        println!(
            "| {} | {} | {} | {} | {} |",
            human(f(r, "raw") as u64),
            cell("clean_kept"),
            cell("clean_heap"),
            cell("crash_heap"),
            cell("full_heap"),
        );
    }
}
