//! Model-based randomized test: seeded random sequences of write / read / trim / write-zeroes /
//! flush / FUA / close-reopen / crash-reopen against an in-memory reference. Each seed draws
//! its geometry, configuration and timing mode (`off`, or `real` with microsecond latencies so
//! writer threads, programs in flight and the timer thread take part).
//!
//! Every read must match the reference exactly. After a simulated power cut every 4 KiB page must
//! read as its last durable value (flushed, FUA'd or closed) or as a value written after it —
//! never torn, never another page's data. Seeds print on failure; rerun one with
//! `FTL_MODEL_SEED=<seed> cargo test -p ftl --test model -- --nocapture`; `FTL_MODEL_TRACE=1`
//! prints every step's operation, `FTL_MODEL_VERBOSE=1` each seed's geometry and configuration.
//! A crash-check failure names the value found and the page's history of values. After every
//! step `Ftl::check_invariants` checks the design page's invariants without flushing.

mod common;

use std::collections::HashSet;
use std::path::Path;

use common::*;
use ftl::{Ftl, FtlConfig, GcPolicy, SchemeKind, VictimPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const PAGE: usize = 4096;

/// The reference device: current contents, and per page the values a crash may leave.
struct Model {
    data: Vec<u8>,
    /// Per page: hashes of values acceptable after a crash (durable value + later writes).
    acceptable: Vec<HashSet<u64>>,
    /// Pages written since the last point where everything became durable.
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
    /// Per page: every value it held, `(hash, step, durable)`, for failure reports.
    history: Vec<Vec<(u64, usize, bool)>>,
    step: usize,
}

impl Model {
    fn new(cap: usize) -> Model {
        let pages = cap / PAGE;
        let zero = hash(&[0u8; PAGE]);
        Model {
            data: vec![0; cap],
            acceptable: (0..pages).map(|_| HashSet::from([zero])).collect(),
            dirty: Vec::new(),
            is_dirty: vec![false; pages],
            history: (0..pages).map(|_| vec![(zero, 0, true)]).collect(),
            step: 0,
        }
    }
    fn page_hash(&self, p: usize) -> u64 {
        hash(&self.data[p * PAGE..(p + 1) * PAGE])
    }
    fn apply(&mut self, off: usize, bytes: &[u8], durable: bool) {
        self.data[off..off + bytes.len()].copy_from_slice(bytes);
        for p in off / PAGE..(off + bytes.len()).div_ceil(PAGE) {
            let h = self.page_hash(p);
            if durable {
                self.acceptable[p].clear();
            }
            self.acceptable[p].insert(h);
            self.history[p].push((h, self.step, durable));
            if !self.is_dirty[p] {
                self.is_dirty[p] = true;
                self.dirty.push(p);
            }
        }
    }
    fn all_durable(&mut self) {
        for p in std::mem::take(&mut self.dirty) {
            self.is_dirty[p] = false;
            let h = self.page_hash(p);
            self.acceptable[p] = HashSet::from([h]);
            self.history[p].push((h, self.step, true));
        }
    }
    /// Which of page `p`'s past values `h` is, for a failure message.
    fn explain(&self, p: usize, h: u64) -> String {
        let zero = hash(&[0u8; PAGE]);
        let past: Vec<String> = self.history[p]
            .iter()
            .map(|(v, step, durable)| {
                let name = if *v == zero {
                    "zeroes".to_string()
                } else {
                    format!("{v:016x}")
                };
                format!(
                    "step {step}: {name}{}",
                    if *durable { " (durable)" } else { "" }
                )
            })
            .collect();
        let found = match self.history[p].iter().rev().find(|e| e.0 == h) {
            Some((_, step, _)) => format!("the value written at step {step}"),
            None if h == zero => "zeroes".to_string(),
            None => format!("{h:016x}, never written to this page"),
        };
        format!("holds {found}; its history: {}", past.join(", "))
    }
    /// After a crash the device holds `data`: every page is durable as it is now.
    fn reset(&mut self, data: Vec<u8>) {
        self.data = data;
        for p in 0..self.acceptable.len() {
            let h = self.page_hash(p);
            self.acceptable[p] = HashSet::from([h]);
            self.is_dirty[p] = false;
            // Only a change is history: a page a crash left as it was durably adds nothing.
            if self.history[p].last().map(|e| (e.0, e.2)) != Some((h, true)) {
                self.history[p].push((h, self.step, true));
            }
        }
        self.dirty.clear();
    }
}

fn cfg_for(rng: &mut SmallRng) -> FtlConfig {
    let policy = GcPolicy::ALL[rng.gen_range(0..3)];
    // Every scheme, drawn per seed (`FTL_MODEL_SCHEME=bast` runs one), with a log pool from
    // the smallest the scheme allows to a tenth of the device.
    let scheme = match std::env::var("FTL_MODEL_SCHEME") {
        Ok(s) => s.parse().expect("FTL_MODEL_SCHEME names a scheme"),
        Err(_) => SchemeKind::ALL[rng.gen_range(0..SchemeKind::ALL.len())],
    };
    let log_blocks = if scheme.has_log_blocks() {
        rng.gen_range(scheme.min_log_blocks()..12)
    } else {
        0
    };
    FtlConfig {
        scheme,
        log_blocks,
        victim_policy: if rng.gen_bool(0.5) {
            VictimPolicy::Greedy
        } else {
            VictimPolicy::CostBenefit
        },
        checkpoint_interval_bytes: rng.gen_range(64..1024) * 1024,
        wear_level_spread: rng.gen_range(4..64),
        gc_copyback: rng.gen_bool(0.5),
        ..small_cfg(policy)
    }
}

fn run_seed(seed: u64, ops: usize, dir: &Path) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let page_size = [4096u32, 8192, 16384][rng.gen_range(0..3)];
    let blocks = rng.gen_range(20..32);
    let mut nand = small_nand(page_size, blocks);
    let mut cfg = cfg_for(&mut rng);
    // Log placement and interconnect from a stream of their own (the draws above stay those
    // of earlier runs of a seed).
    let mut place_rng = SmallRng::seed_from_u64(seed ^ 0x1c_0003);
    cfg.log_placement = ftl::LogPlacement::ALL[place_rng.gen_range(0..2)];
    if place_rng.gen_bool(0.5) {
        nand.interconnect = ftl::nand_model::Interconnect::Pmcd {
            controllers: place_rng.gen_range(1..=4),
        };
    }
    // Timing `real` (writer threads, programs in flight, completions on the timer thread) with
    // microsecond latencies, or `off` (writers inline on the sealing thread).
    let timing = if rng.gen_bool(0.3) {
        nand.timing = ftl::nand_model::Timing {
            t_read: std::time::Duration::from_micros(2),
            t_prog: std::time::Duration::from_micros(8),
            t_erase: std::time::Duration::from_micros(25),
            channel_bytes_per_sec: 2_000_000_000,
            ..Default::default()
        };
        if cfg.scheme.is_real_time() {
            // The real-time schemes need an erase as long as several page copies (`budget.rs`): with
            // 8-page blocks, 4 copies of a 16 KiB page per step.
            nand.timing.t_erase = std::time::Duration::from_micros(150);
        }
        ftl::nand_model::TimingMode::Real
    } else {
        if cfg.scheme.is_real_time() {
            // 16 KiB pages: a copy of four 4 KiB slots (four array reads) is 383 us; RFTL's
            // 8-page blocks need 5 of them within an erase (`budget.rs`).
            nand.timing.t_erase = std::time::Duration::from_micros(2000);
        }
        ftl::nand_model::TimingMode::Off
    };
    if std::env::var_os("FTL_MODEL_VERBOSE").is_some() {
        eprintln!(
            "seed {seed}: page {page_size}, {blocks} blocks/bank, timing {timing:?}, {cfg:?}"
        );
    }
    let path = dir.join(format!("m{seed}.img"));
    let mut ftl = Some(Ftl::create(&path, &nand, timing, cfg.clone(), None).expect("create"));
    let cap = ftl.as_ref().unwrap().capacity() as usize;
    let mut model = Model::new(cap);
    // Most traffic goes to a hot region so pages are overwritten and GC has work.
    let hot = (cap / 3).max(64 * 1024);
    let mut tag = 0u64;
    let trace = std::env::var_os("FTL_MODEL_TRACE").is_some();
    for step in 0..ops {
        model.step = step;
        let f = ftl.as_ref().unwrap();
        let sectors = cap / 512;
        let region = if rng.gen_bool(0.8) {
            hot / 512
        } else {
            sectors
        };
        let start = rng.gen_range(0..region);
        let len = rng.gen_range(1..=(64usize).min(sectors - start));
        let (off, len_b) = (start * 512, len * 512);
        let q = rng.gen_range(0..4);
        let op = rng.gen_range(0..100);
        if trace {
            eprintln!(
                "step {step}: op {op} queue {q} pages {}..{} (bytes {off}+{len_b})",
                off / PAGE,
                (off + len_b).div_ceil(PAGE)
            );
        }
        match op {
            0..=44 => {
                tag += 1;
                let mut bytes = vec![0u8; len_b];
                let mut x = seed ^ (tag << 20);
                for c in bytes.chunks_mut(8) {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
                }
                let fua = rng.gen_bool(0.05);
                block_on(f.write(q, off as u64, &bytes, fua))
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: write: {e}"));
                model.apply(off, &bytes, fua);
            }
            45..=69 => {
                let mut buf = vec![0u8; len_b];
                block_on(f.read(off as u64, &mut buf))
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: read: {e}"));
                if buf != model.data[off..off + len_b] {
                    let first = (0..len_b)
                        .find(|i| buf[*i] != model.data[off + i])
                        .unwrap_or(0);
                    panic!("seed {seed} step {step}: read at {off} len {len_b} differs at byte {first}");
                }
            }
            70..=77 => {
                let fua = rng.gen_bool(0.1);
                if rng.gen_bool(0.5) {
                    block_on(f.trim(q, off as u64, len_b as u64, fua)).unwrap();
                } else {
                    block_on(f.write_zeroes(q, off as u64, len_b as u64, fua)).unwrap();
                }
                model.apply(off, &vec![0u8; len_b], fua);
            }
            78..=85 => {
                block_on(f.flush()).unwrap();
                model.all_durable();
            }
            86..=90 => {
                let f = ftl.take().unwrap();
                f.close()
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: close: {e}"));
                drop(f);
                model.all_durable();
                let f = Ftl::open(&path, timing, cfg.clone())
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: reopen: {e}"));
                assert_eq!(
                    f.recovery().mode,
                    ftl::RecoveryMode::Clean,
                    "seed {seed} step {step}: clean reopen scanned"
                );
                f.check_invariants()
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                ftl = Some(f);
            }
            91..=95 => {
                ftl.take().unwrap().simulate_power_loss();
                let f = Ftl::open(&path, timing, cfg.clone())
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: crash reopen: {e}"));
                let mut buf = vec![0u8; cap];
                block_on(f.read(0, &mut buf)).unwrap();
                for p in 0..cap / PAGE {
                    let h = hash(&buf[p * PAGE..(p + 1) * PAGE]);
                    assert!(
                        model.acceptable[p].contains(&h),
                        "seed {seed} step {step}: page {p} after crash holds a value that was never durable or later written: {}; recovery: {:?}",
                        model.explain(p, h),
                        f.recovery()
                    );
                }
                model.reset(buf);
                f.check_invariants()
                    .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                ftl = Some(f);
            }
            _ => {
                // Overwrite a whole hot range sequentially: bursts of GC work.
                let n = rng.gen_range(8..64).min(hot / PAGE);
                let base = rng.gen_range(0..=(hot / PAGE - n));
                for i in 0..n {
                    tag += 1;
                    let bytes = stamped((base + i) as u64, tag);
                    block_on(f.write(q, ((base + i) * PAGE) as u64, &bytes, false)).unwrap();
                    model.apply((base + i) * PAGE, &bytes, false);
                }
            }
        }
        // After every step, without flushing (buffered pages and trim records stay put).
        if let Some(f) = &ftl {
            f.check_invariants()
                .unwrap_or_else(|e| panic!("seed {seed} step {step} (op {op}): {e}"));
        }
    }
    let f = ftl.take().unwrap();
    block_on(f.flush()).unwrap();
    f.check_invariants()
        .unwrap_or_else(|e| panic!("seed {seed}: final: {e}"));
    assert_eq!(
        f.nand().violations(),
        0,
        "seed {seed}: flash rule violations"
    );
    f.close().unwrap();
    drop(f);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn randomized_sequences_match_reference() {
    let dir = tempfile::tempdir().unwrap();
    if let Ok(s) = std::env::var("FTL_MODEL_SEED") {
        let seed: u64 = s.parse().expect("FTL_MODEL_SEED is a number");
        run_seed(seed, 400, dir.path());
        return;
    }
    let seqs: u64 = std::env::var("FTL_MODEL_SEQS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    // Two runners share the seeds: each sequence waits on file creation and thread start-up.
    let dir = dir.path().to_path_buf();
    let runners: Vec<_> = (0..2u64)
        .map(|r| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                for seed in (r..seqs).step_by(2) {
                    if std::env::var_os("FTL_MODEL_VERBOSE").is_some() {
                        eprintln!("seed {seed}");
                    }
                    run_seed(seed, 200, &dir);
                }
            })
        })
        .collect();
    for r in runners {
        if let Err(e) = r.join() {
            std::panic::resume_unwind(e);
        }
    }
    println!("{seqs} sequences passed");
}
