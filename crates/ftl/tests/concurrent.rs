//! Multi-threaded variant of the model test: 8 threads write, read, trim and flush overlapping
//! ranges at once. Every write stamps its page with a unique tag, and every operation records
//! when it started and ended on a shared logical clock.
//!
//! Checks: a read always sees a whole write of *that* page (never torn, never another page's)
//! that has not been superseded before the read started; after a power cut every page holds a
//! write (or zeroes from a trim) not superseded by a write or trim that a completed flush made
//! durable — linearizability of the final state, as far as concurrent overlapping requests allow.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use ftl::{Ftl, GcPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Copy, Debug)]
struct Op {
    /// Tag written, or 0 for a trim.
    tag: u64,
    start: u64,
    end: u64,
}

#[derive(Default)]
struct Log {
    ops: HashMap<u64, Vec<Op>>,
    flushes: Vec<(u64, u64)>,
}

/// Whether value `tag` (0 = zeroes) is an acceptable final content of page `lpn`.
fn acceptable(log: &Log, lpn: u64, tag: u64, durable_before: Option<u64>) -> Result<(), String> {
    let ops = log.ops.get(&lpn).map(|v| v.as_slice()).unwrap_or(&[]);
    // When did the value we see end? (zeroes: the latest-ending trim, or the beginning.)
    let seen_end = if tag == 0 {
        ops.iter()
            .filter(|o| o.tag == 0)
            .map(|o| o.end)
            .max()
            .unwrap_or(0)
    } else {
        ops.iter()
            .find(|o| o.tag == tag)
            .map(|o| o.end)
            .ok_or_else(|| format!("page {lpn}: tag {tag} was never written to it"))?
    };
    // Every op made durable by a flush must not have started after the seen value ended.
    let durable = |o: &Op| match durable_before {
        None => true,
        Some(_) => log.flushes.iter().any(|(fs, _)| *fs > o.end),
    };
    for o in ops.iter().filter(|o| durable(o)) {
        if o.start > seen_end {
            return Err(format!(
                "page {lpn}: holds tag {tag} (ended {seen_end}) but durable op {o:?} came strictly later"
            ));
        }
    }
    Ok(())
}

fn run(policy: GcPolicy, seed: u64) {
    run_scheme(policy, ftl::SchemeKind::Page, seed);
}

fn run_scheme(policy: GcPolicy, scheme: ftl::SchemeKind, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mt.img");
    let mut cfg = small_cfg(policy);
    cfg.scheme = scheme;
    if let Some(i) = std::env::var("FTL_TEST_CKPT_INTERVAL")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        cfg.checkpoint_interval_bytes = i;
    }
    let ftl = Arc::new(create(&path, &small_nand(8192, 32), cfg.clone()));
    let pages = ftl.capacity() / 4096;
    let clock = Arc::new(AtomicU64::new(1));
    let tags = Arc::new(AtomicU64::new(1));
    let log = Arc::new(Mutex::new(Log::default()));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (ftl, clock, tags, log) = (ftl.clone(), clock.clone(), tags.clone(), log.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed * 100 + t);
                // Overlapping windows: each thread covers half the device, offset by thread.
                let base = t * pages / 16;
                let mut buf = vec![0u8; 4096];
                for _ in 0..1500 {
                    let lpn = (base + rng.gen_range(0..pages / 2)) % pages;
                    let start = clock.fetch_add(1, Ordering::SeqCst);
                    match rng.gen_range(0..100) {
                        0..=54 => {
                            let tag = tags.fetch_add(1, Ordering::SeqCst);
                            block_on(ftl.write(
                                t as usize,
                                lpn * 4096,
                                &stamped(lpn, tag),
                                rng.gen_bool(0.02),
                            ))
                            .unwrap();
                            let end = clock.fetch_add(1, Ordering::SeqCst);
                            log.lock().unwrap().ops.entry(lpn).or_default().push(Op {
                                tag,
                                start,
                                end,
                            });
                        }
                        55..=89 => {
                            block_on(ftl.read(lpn * 4096, &mut buf)).unwrap();
                            // Torn or foreign data panics inside check_stamp.
                            let tag = check_stamp(lpn, &buf).unwrap_or(0);
                            let l = log.lock().unwrap();
                            // Ops that completed before this read began bound what it may see.
                            let done_before = |o: &Op| o.end < start;
                            let ops = l.ops.get(&lpn).map(|v| v.as_slice()).unwrap_or(&[]);
                            let seen_end = if tag == 0 {
                                ops.iter().filter(|o| o.tag == 0).map(|o| o.end).max().unwrap_or(0)
                            } else {
                                ops.iter().find(|o| o.tag == tag).map_or(u64::MAX, |o| o.end)
                            };
                            for o in ops.iter().filter(|o| done_before(o)) {
                                assert!(
                                    o.start <= seen_end,
                                    "page {lpn}: read (started {start}) saw tag {tag} (ended {seen_end}) but {o:?} completed before the read"
                                );
                            }
                        }
                        90..=96 => {
                            // Logged before it runs (end unknown yet): a concurrent read may
                            // already see its zeroes.
                            let idx = {
                                let mut l = log.lock().unwrap();
                                let v = l.ops.entry(lpn).or_default();
                                v.push(Op { tag: 0, start, end: u64::MAX });
                                v.len() - 1
                            };
                            block_on(ftl.trim(t as usize, lpn * 4096, 4096, false)).unwrap();
                            let end = clock.fetch_add(1, Ordering::SeqCst);
                            log.lock().unwrap().ops.get_mut(&lpn).unwrap()[idx].end = end;
                        }
                        _ => {
                            block_on(ftl.flush()).unwrap();
                            let end = clock.fetch_add(1, Ordering::SeqCst);
                            log.lock().unwrap().flushes.push((start, end));
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker thread");
    }
    let log = Arc::try_unwrap(log).ok().unwrap().into_inner().unwrap();
    let ftl = Arc::try_unwrap(ftl).ok().expect("sole owner");
    ftl.check_invariants().unwrap();
    let before: Vec<String> = (0..pages as u32).map(|l| ftl.debug_lpn(l)).collect();
    let stats_before = format!("{:?}", ftl.recovery());
    ftl.simulate_power_loss();

    let ftl: Ftl = open(&path, cfg.clone());
    let mut buf = vec![0u8; 4096];
    for lpn in 0..pages {
        block_on(ftl.read(lpn * 4096, &mut buf)).unwrap();
        let tag = check_stamp(lpn, &buf).unwrap_or(0);
        acceptable(&log, lpn, tag, Some(0))
            .unwrap_or_else(|e| {
                panic!(
                    "seed {seed} after crash: {e}\nbefore: {}\nafter: {}\nrecovery {:?} (before {stats_before})",
                    before[lpn as usize],
                    ftl.debug_lpn(lpn as u32),
                    ftl.recovery()
                )
            });
    }
    ftl.check_invariants().unwrap();
    // After a clean close everything acknowledged is durable: the final value must be one not
    // strictly superseded by any op at all.
    ftl.close().unwrap();
    drop(ftl);
    let ftl = open(&path, cfg);
    for lpn in 0..pages {
        block_on(ftl.read(lpn * 4096, &mut buf)).unwrap();
        check_stamp(lpn, &buf);
    }
}

#[test]
fn eight_threads_overlapping_adaptive() {
    run(GcPolicy::Adaptive, 1);
}

#[test]
fn eight_threads_overlapping_parallel() {
    run(GcPolicy::Parallel, 2);
}

#[test]
fn eight_threads_overlapping_in_path() {
    run(GcPolicy::InPath, 3);
}

#[test]
fn eight_threads_overlapping_bast() {
    run_scheme(GcPolicy::Adaptive, ftl::SchemeKind::Bast, 4);
}

#[test]
fn eight_threads_overlapping_fast() {
    run_scheme(GcPolicy::Adaptive, ftl::SchemeKind::Fast, 5);
}

#[test]
fn eight_threads_overlapping_rftl() {
    run_scheme(GcPolicy::Adaptive, ftl::SchemeKind::Rftl, 6);
}

#[test]
fn eight_threads_overlapping_nftl() {
    run_scheme(GcPolicy::Adaptive, ftl::SchemeKind::Nftl, 7);
}

#[test]
fn eight_threads_overlapping_gftl() {
    run_scheme(GcPolicy::Adaptive, ftl::SchemeKind::Gftl, 8);
}

/// A write of part of a page reads the page, edits it and buffers it. A whole-page write or a
/// trim of the page landing between that read and the buffering must not be undone by the old
/// bytes around the edit: the edit goes onto the newer version. The read is made slow (300 ms
/// on flash, timing real) so the other request lands inside it. On 4 KiB NAND pages the
/// overtaking write is on flash by then (FUA: not left to a writer thread that a loaded
/// machine may run late), and the partial write reads the page again; on 16 KiB pages it
/// still waits in a buffer, and the edit goes onto it there (no second read).
#[test]
fn a_partial_write_does_not_undo_a_whole_page_write_or_trim_that_overtook_it() {
    for page_size in [4096, 16384] {
        partial_write_overtaken(page_size);
    }
}

fn partial_write_overtaken(page_size: u32) {
    let dir = tempfile::tempdir().unwrap();
    let mut nand = small_nand(page_size, 16);
    nand.timing.t_read = std::time::Duration::from_millis(300);
    let path = dir.path().join("rmw.img");
    let ftl = Arc::new(
        Ftl::create(
            &path,
            &nand,
            ftl::nand_model::TimingMode::Real,
            small_cfg(GcPolicy::Adaptive),
            None,
        )
        .unwrap(),
    );
    let edit = vec![0xEEu8; 512];
    for (lpn, overtake_with_trim) in [(5u64, false), (9, true)] {
        let off = lpn * 4096;
        block_on(ftl.write(0, off, &stamped(lpn, 1), true)).unwrap();
        let reads = || ftl.nand().stats().totals.reads;
        let (reads_before, retries_before) = (reads(), ftl.stats().rmw_retries);
        let partial = {
            let (ftl, edit) = (Arc::clone(&ftl), edit.clone());
            std::thread::spawn(move || block_on(ftl.write(0, off + 1024, &edit, false)))
        };
        // Once the partial write's read of the page is on the medium (300 ms): the other
        // request.
        while reads() == reads_before {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let newer = if overtake_with_trim {
            block_on(ftl.trim(1, off, 4096, false)).unwrap();
            vec![0u8; 4096]
        } else {
            let v = stamped(lpn, 2);
            block_on(ftl.write(1, off, &v, page_size == 4096)).unwrap();
            v
        };
        assert!(
            !partial.is_finished(),
            "{page_size} B pages, page {lpn}: the partial write's 300 ms read ended before the \
             other request did (a stalled test thread): nothing overtook it"
        );
        partial.join().unwrap().unwrap();
        let mut edited = newer.clone();
        edited[1024..1536].copy_from_slice(&edit);
        let mut got = vec![0u8; 4096];
        let reads_during = reads() - reads_before;
        block_on(ftl.read(off, &mut got)).unwrap();
        let mut stale = stamped(lpn, 1);
        stale[1024..1536].copy_from_slice(&edit);
        let case = format!("{page_size} B pages, page {lpn}");
        assert!(
            got == edited,
            "{case}: {}",
            if got == stale {
                "the partial write undid the request that overtook it"
            } else {
                "not the edit on the newer version"
            }
        );
        assert_eq!(ftl.stats().rmw_retries - retries_before, 1, "{case}");
        // A second read from flash only where the overtaking write was on flash already (a
        // trimmed page reads as zeroes without one).
        let second_read = !overtake_with_trim && page_size == 4096;
        assert_eq!(
            reads_during,
            1 + u64::from(second_read),
            "{case}: NAND reads"
        );
    }
    ftl.check_invariants().unwrap();
}
