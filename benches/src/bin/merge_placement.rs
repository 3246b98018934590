//! The thesis's multi-controller experiment (paper 003 ch. 5, Fig. 14-16): total response time
//! of a hybrid FTL with log blocks on the same bank as their data block (`same`, "without the
//! proposed method") against `spread` ("with"), under both interconnects (TMCD, PMCD).
//!
//! ```text
//! cargo run --release -p ftl-benches --bin merge_placement -- [--rounds 3] [--requests 4000]
//!     [--threads 8] [--schemes bast,fast] [--dir DIR]
//! ```
//!
//! Device: `k9-003` timing (read 25 us, program 200 us, erase 1.5 ms, 50 us per 4 KiB
//! transfer), 4 channels x 2 banks as the thesis's 4 controllers and 8 chips, 64 pages/block,
//! 96 MiB raw; PMCD has 4 controllers. Each run formats an image with timing off, fills it
//! sequentially, reopens it with timing `real` and replays the same request stream from
//! `--threads` closed-loop clients (one seeded stream each; writes are FUA so their response
//! time includes the flash work they cause, as in the thesis's simulator):
//!
//! - 50 % random 4-16 KiB writes over a hot quarter of the space (random-log merges: full);
//! - 20 % rewrites of the first 8-32 pages of a logical block in order (partial merges);
//! - 10 % sequential 512 KiB writes over two logical blocks (switch merges, and striping);
//! - 20 % random 4-16 KiB reads.
//!
//! Printed per scheme and interconnect: total response time (sum over requests), wall time,
//! merges by kind, and the reduction `spread` brings; the four configurations are alternated
//! round by round so machine noise falls on all of them alike. Response times are measured on
//! the host clock with the model running in real time, so each figure carries that noise: look
//! at the spread over rounds (printed) before trusting a difference smaller than it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ftl::nand_model::{self, Interconnect, NandConfig, TimingMode};
use ftl::{Ftl, FtlConfig, LogPlacement, SchemeKind};
use futures::executor::block_on;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

struct Args {
    rounds: usize,
    requests: usize,
    threads: usize,
    schemes: Vec<SchemeKind>,
    dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        rounds: 3,
        requests: 4000,
        threads: 8,
        schemes: vec![SchemeKind::Bast, SchemeKind::Fast],
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--rounds" => a.rounds = value("--rounds")?.parse().map_err(|e| format!("{e}"))?,
            "--requests" => {
                a.requests = value("--requests")?.parse().map_err(|e| format!("{e}"))?
            }
            "--threads" => a.threads = value("--threads")?.parse().map_err(|e| format!("{e}"))?,
            "--schemes" => {
                a.schemes = value("--schemes")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--dir" => a.dir = Some(PathBuf::from(value("--dir")?)),
            "-h" | "--help" => {
                println!("see the doc comment of benches/src/bin/merge_placement.rs");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.threads == 0 || a.requests == 0 || a.rounds == 0 {
        return Err("--threads, --requests and --rounds must be at least 1".into());
    }
    Ok(a)
}

fn device(interconnect: Interconnect) -> NandConfig {
    let mut c = nand_model::preset("k9-003")
        .map(|p| p.config)
        .unwrap_or_else(|| unreachable!("k9-003 is a built-in preset"));
    c.geometry.channels = 4;
    c.geometry.banks_per_channel = 2;
    c.interconnect = interconnect;
    c.scaled_to(96 * MIB)
}

/// One request of the stream.
enum Req {
    Write { offset: u64, len: u64 },
    Read { offset: u64, len: u64 },
}

/// The seeded request stream of client `client`.
fn stream(client: usize, n: usize, capacity: u64, block_bytes: u64) -> Vec<Req> {
    let mut rng = SmallRng::seed_from_u64(0x7e5_0003 ^ client as u64);
    let pages = capacity / PAGE;
    let blocks = capacity / block_bytes;
    let hot = (pages / 4).max(8);
    (0..n)
        .map(|_| {
            let kind = rng.gen_range(0..100);
            let small = rng.gen_range(1..=4) * PAGE;
            match kind {
                0..50 => Req::Write {
                    offset: rng.gen_range(0..hot - 4) * PAGE,
                    len: small,
                },
                50..70 => Req::Write {
                    offset: rng.gen_range(0..blocks) * block_bytes,
                    len: rng.gen_range(8..=32) * PAGE,
                },
                70..80 => Req::Write {
                    offset: rng.gen_range(0..blocks - 1) * block_bytes,
                    len: 2 * block_bytes,
                },
                _ => Req::Read {
                    offset: rng.gen_range(0..pages - 4) * PAGE,
                    len: small,
                },
            }
        })
        .collect()
}

struct RunResult {
    total_response: Duration,
    wall: Duration,
    merges: [u64; 3],
    copied: u64,
}

fn run(
    dir: &Path,
    scheme: SchemeKind,
    interconnect: Interconnect,
    placement: LogPlacement,
    args: &Args,
) -> Result<RunResult, String> {
    let path = dir.join(format!("mp-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = FtlConfig {
        scheme,
        log_placement: placement,
        queues: 2,
        checkpoint_interval_bytes: 0,
        ..FtlConfig::default()
    };
    let nand = device(interconnect);
    let block_bytes = u64::from(nand.geometry.pages_per_block) * PAGE;
    // Fill with timing off (fast), then measure with timing real.
    {
        let f = Ftl::create(&path, &nand, TimingMode::Off, cfg.clone(), None)
            .map_err(|e| format!("create: {e}"))?;
        let chunk = vec![0x5au8; 256 * 1024];
        let cap = f.capacity();
        let mut off = 0;
        while off < cap {
            let n = (cap - off).min(chunk.len() as u64) as usize;
            block_on(f.write(0, off, &chunk[..n], false)).map_err(|e| format!("fill: {e}"))?;
            off += n as u64;
        }
        f.close().map_err(|e| format!("close: {e}"))?;
    }
    let f = Arc::new(Ftl::open(&path, TimingMode::Real, cfg).map_err(|e| format!("open: {e}"))?);
    let before = f.stats().merges;
    let cap = f.capacity();
    let per = args.requests.div_ceil(args.threads);
    let t0 = Instant::now();
    let handles: Vec<_> = (0..args.threads)
        .map(|t| {
            let f = f.clone();
            let reqs = stream(t, per, cap, block_bytes);
            std::thread::spawn(move || -> Result<Duration, String> {
                let q = t % f.queues();
                let data = vec![t as u8; 2 * 256 * 1024];
                let mut buf = vec![0u8; 2 * 256 * 1024];
                let mut total = Duration::ZERO;
                for r in reqs {
                    let start = Instant::now();
                    match r {
                        Req::Write { offset, len } => {
                            block_on(f.write(q, offset, &data[..len as usize], true))
                        }
                        Req::Read { offset, len } => {
                            block_on(f.read(offset, &mut buf[..len as usize]))
                        }
                    }
                    .map_err(|e| format!("request: {e}"))?;
                    total += start.elapsed();
                }
                Ok(total)
            })
        })
        .collect();
    let mut total_response = Duration::ZERO;
    for h in handles {
        total_response += h.join().map_err(|_| "client panicked".to_string())??;
    }
    let wall = t0.elapsed();
    let after = f.stats().merges;
    let f = Arc::try_unwrap(f).map_err(|_| "ftl still shared".to_string())?;
    f.close().map_err(|e| format!("close: {e}"))?;
    let _ = std::fs::remove_file(&path);
    let (Some(b), Some(a)) = (before, after) else {
        return Err("a hybrid scheme reports merges".into());
    };
    Ok(RunResult {
        total_response,
        wall,
        merges: [
            a.switch.count - b.switch.count,
            a.partial.count - b.partial.count,
            a.full.count - b.full.count,
        ],
        copied: (a.switch.pages_copied + a.partial.pages_copied + a.full.pages_copied)
            - (b.switch.pages_copied + b.partial.pages_copied + b.full.pages_copied),
    })
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("merge_placement: {e}");
            std::process::exit(2);
        }
    };
    let tmp = tempfile::tempdir().unwrap_or_else(|e| {
        eprintln!("merge_placement: cannot make a scratch directory: {e}");
        std::process::exit(1)
    });
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let ics = [
        ("TMCD", Interconnect::Tmcd),
        ("PMCD", Interconnect::Pmcd { controllers: 4 }),
    ];
    println!(
        "# merge_placement: {} requests from {} clients per run, {} rounds, device k9-003 \
         timing, 4 ch x 2 banks, 96 MiB raw",
        args.requests, args.threads, args.rounds
    );
    for &scheme in &args.schemes {
        // results[ic][placement] = per-round (total response s, wall s)
        let mut results = vec![vec![Vec::new(); 2]; ics.len()];
        let mut last: Vec<Vec<Option<RunResult>>> =
            (0..ics.len()).map(|_| vec![None, None]).collect();
        for round in 0..args.rounds {
            for (i, (_, ic)) in ics.iter().enumerate() {
                // Alternate the order within a round too.
                let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
                for p in order {
                    let placement = LogPlacement::ALL[p];
                    match run(&dir, scheme, *ic, placement, &args) {
                        Ok(r) => {
                            results[i][p]
                                .push((r.total_response.as_secs_f64(), r.wall.as_secs_f64()));
                            last[i][p] = Some(r);
                        }
                        Err(e) => {
                            eprintln!("merge_placement: {scheme} {ic:?} {placement}: {e}");
                            std::process::exit(1);
                        }
                    }
                }
            }
        }
        println!();
        println!("## {scheme}");
        println!(
            "| interconnect | placement | total response s (rounds) | mean | wall s | merges switch/partial/full | pages copied |"
        );
        println!("|---|---|---|---:|---:|---|---:|");
        for (i, (name, _)) in ics.iter().enumerate() {
            for p in 0..2 {
                let rs = &results[i][p];
                let totals: Vec<f64> = rs.iter().map(|r| r.0).collect();
                let walls: Vec<f64> = rs.iter().map(|r| r.1).collect();
                let r = last[i][p].as_ref();
                println!(
                    "| {name} | {} | {} | {:.2} | {:.2} | {} | {} |",
                    LogPlacement::ALL[p],
                    totals
                        .iter()
                        .map(|t| format!("{t:.2}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    mean(&totals),
                    mean(&walls),
                    r.map_or("-".into(), |r| format!(
                        "{}/{}/{}",
                        r.merges[0], r.merges[1], r.merges[2]
                    )),
                    r.map_or(0, |r| r.copied),
                );
            }
            let same = mean(&results[i][0].iter().map(|r| r.0).collect::<Vec<_>>());
            let spread = mean(&results[i][1].iter().map(|r| r.0).collect::<Vec<_>>());
            println!(
                "| {name} | spread vs same | | {:+.2} % | | | |",
                (spread / same - 1.0) * 100.0
            );
        }
    }
}
