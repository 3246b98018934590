//! GFTL (paper 004's real-time baseline): centralised partial GC keeps every host write's
//! reclaim work to one step (at most `beta` copies or one erase), whatever the device's
//! fullness, and the write buffer within the size its guarantee computes; sequential writes
//! go in place, and so do writes in any order until the data block is full; reads search a
//! data block's OOB area and run a step too, within GFTL's read bound; data survives merges,
//! a clean reopen, a power cut and overwrites of a full device. Crashes at every medium operation are swept for every scheme in `power_cut.rs`,
//! faults in `faults.rs`, and the randomized model test draws `gftl` too.

mod common;

use std::time::Duration;

use common::*;
use ftl::nand_model::TimingMode;
use ftl::{Ftl, FtlConfig, GcPolicy, SchemeKind};
use rand::{Rng, SeedableRng};

fn cfg() -> FtlConfig {
    FtlConfig {
        scheme: SchemeKind::Gftl,
        checkpoint_interval_bytes: 0,
        ..small_cfg(GcPolicy::Adaptive)
    }
}

type Device = StampedDevice;

fn device(path: &std::path::Path, page_size: u32) -> Device {
    Device::new(create(path, &small_nand(page_size, 32), cfg()))
}

#[test]
fn overwrites_of_a_full_device_merge_within_the_budget() {
    for page_size in [4096, 8192] {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("g.img");
        let mut d = device(&img, page_size);
        let pages = d.tags.len() as u64;
        for l in 0..pages {
            d.write([l]);
        }
        // Written in order: every page went in place, nothing to merge.
        let s = d.ftl.stats();
        let rt = s.rt.clone().expect("gftl reports its partial GC");
        assert_eq!(
            (rt.merges, rt.queue_len, rt.buffer_blocks_max),
            (0, 0, 0),
            "{rt:?}"
        );
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for i in 0..pages * 12 {
            // Hot and cold: most writes to a few logical blocks, the rest anywhere.
            let l = if i % 4 == 0 {
                rng.gen_range(0..pages)
            } else {
                rng.gen_range(0..pages.min(48))
            };
            d.write([l]);
            if i % 997 == 0 {
                d.ftl.check_invariants().unwrap();
            }
        }
        d.verify("after overwrites");
        let rt = d.ftl.stats().rt.unwrap();
        assert!(rt.merges > 10 && rt.erases > 10, "{rt:?}");
        assert!(
            rt.max_job_steps <= u64::from(rt.k_fold),
            "a merge took {} steps, at most {} allowed: {rt:?}",
            rt.max_job_steps,
            rt.k_fold
        );
        assert!(
            rt.buffer_blocks_max <= rt.buffer_blocks,
            "the write buffer held {} blocks, its guarantee needs {}",
            rt.buffer_blocks_max,
            rt.buffer_blocks
        );
        let Device { ftl, tags, tag } = d;
        ftl.close().unwrap();
        drop(ftl);
        let ftl = open(&img, cfg());
        assert_eq!(ftl.recovery().mode, ftl::RecoveryMode::Clean);
        let mut d = Device { ftl, tags, tag };
        d.verify("after a clean reopen");
        for l in (0..pages).rev() {
            d.write([l]);
        }
        block_on(d.ftl.flush()).unwrap();
        let Device { ftl, tags, tag } = d;
        ftl.simulate_power_loss();
        let ftl = open(&img, cfg());
        let mut d = Device { ftl, tags, tag };
        d.verify("after a power cut");
        // The queue rebuilt at open drains as writes come.
        for i in 0..pages * 2 {
            d.write([(i * 7) % pages]);
        }
        d.verify("after writes on the recovered device");
    }
}

/// The scheme is refused where its bound cannot hold, naming why.
#[test]
fn a_device_where_a_copy_is_slower_than_an_erase_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut nand = small_nand(4096, 32);
    nand.timing.t_prog = Duration::from_micros(1600);
    let err = Ftl::create(
        &dir.path().join("x.img"),
        &nand,
        TimingMode::Off,
        cfg(),
        None,
    )
    .err()
    .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("gftl") && msg.contains("longer than an erase"),
        "{msg}"
    );
}

/// GFTL appends a logical block's pages to its data block in the order they come, so writes
/// in any order go in place until the block is full (no buffer page, no merge), and a read of
/// a page there searches the block's OOB area from its newest page down: reading the page
/// written first of a full block reads every page's OOB.
#[test]
fn a_data_block_takes_pages_in_any_order_and_reads_search_its_oob() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("o.img");
    let mut d = device(&img, 4096);
    let ppb = 8u64; // small_nand's pages per block
                    // Logical block 1, its pages backwards, then logical block 2 with offset 3 three times.
    for l in (ppb..2 * ppb).rev() {
        d.write([l]);
    }
    for l in [2 * ppb + 3, 2 * ppb + 3, 2 * ppb + 3, 2 * ppb] {
        d.write([l]);
    }
    block_on(d.ftl.flush()).unwrap();
    let rt = d.ftl.stats().rt.unwrap();
    assert_eq!((rt.merges, rt.buffer_blocks_max), (0, 0), "{rt:?}");
    let before = rt.oob_reads;
    let mut buf = vec![0u8; 4096];
    // Page ppb + 7 was written first: the search reads all 8 OOBs, newest first.
    block_on(d.ftl.read((2 * ppb - 1) * 4096, &mut buf)).unwrap();
    assert_eq!(
        check_stamp(2 * ppb - 1, &buf),
        Some(d.tags[2 * ppb as usize - 1])
    );
    let rt = d.ftl.stats().rt.unwrap();
    assert_eq!(rt.oob_reads - before, ppb, "{rt:?}");
    // Offset 3 of logical block 2: its newest version is the third page, found on the
    // second OOB read (the fourth page holds offset 0).
    block_on(d.ftl.read((2 * ppb + 3) * 4096, &mut buf)).unwrap();
    let rt2 = d.ftl.stats().rt.unwrap();
    assert_eq!(rt2.oob_reads - rt.oob_reads, 2, "{rt2:?}");
    assert_eq!(rt2.search_misses, 0);
    d.verify("after writes in any order");
    d.ftl.check_invariants().unwrap();
    // The ninth page of logical block 2 finds its data block full: to the buffer, queued.
    for _ in 0..5 {
        d.write([2 * ppb + 5]);
    }
    let rt = d.ftl.stats().rt.unwrap();
    assert!(
        rt.buffer_blocks_max >= 1 && rt.queue_len + rt.merges >= 1,
        "{rt:?}"
    );
    d.verify("after the data block filled");
    // Clean reopen and power cut: the roles come back, the searches still find every page.
    let Device { ftl, tags, tag } = d;
    block_on(ftl.flush()).unwrap();
    ftl.simulate_power_loss();
    let ftl = open(&img, cfg());
    let d = Device { ftl, tags, tag };
    d.verify("after a power cut");
    assert_eq!(d.ftl.stats().rt.unwrap().search_misses, 0);
    d.ftl.check_invariants().unwrap();
}

/// GFTL runs a GC step per request, reads too (`L(p) = T_er + max(U(e_r), U(e_w))`): with
/// the GC queue left non-empty by overwrites, reads alone drain it, and the data reads back.
#[test]
fn reads_alone_drain_the_gc_queue() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("r.img");
    let mut d = device(&img, 4096);
    let pages = d.tags.len() as u64;
    for l in 0..pages {
        d.write([l]);
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    for _ in 0..pages {
        d.write([rng.gen_range(0..pages)]);
    }
    block_on(d.ftl.flush()).unwrap();
    let rt = d.ftl.stats().rt.unwrap();
    assert!(
        rt.queue_len > 0,
        "the overwrites left nothing to merge: {rt:?}"
    );
    let steps = rt.copy_steps + rt.erase_steps;
    let mut buf = vec![0u8; 4096];
    for i in 0..pages * 4 {
        if d.ftl.stats().rt.unwrap().queue_len == 0 {
            break;
        }
        let l = (i * 13) % pages;
        block_on(d.ftl.read(l * 4096, &mut buf)).unwrap();
        assert_eq!(check_stamp(l, &buf), Some(d.tags[l as usize]), "page {l}");
    }
    let rt = d.ftl.stats().rt.unwrap();
    assert_eq!(rt.queue_len, 0, "reads did not drain the queue: {rt:?}");
    assert!(rt.copy_steps + rt.erase_steps > steps, "{rt:?}");
    d.verify("after reads merged the queue");
    d.ftl.check_invariants().unwrap();
}

/// The worst read and FUA write responses (ns) on a full device under uniform random
/// overwrites in virtual time, with a read every `read_every` requests (`None`: writes
/// only), and the partial GC's figures at the end.
fn worst_responses(page_size: u32, read_every: Option<u64>) -> (u64, u64, ftl::RtStats) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let nand = small_nand(page_size, 32);
    let ftl = Ftl::create(&img, &nand, TimingMode::Virtual, cfg(), None).unwrap();
    let pages = ftl.capacity() / 4096;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(13);
    let (mut worst_r, mut worst_w) = (0u64, 0u64);
    let mut buf = vec![0u8; 4096];
    for l in 0..pages {
        block_on(ftl.write(0, l * 4096, &stamped(l, 1), true)).unwrap();
    }
    let mut tags = vec![1u64; pages as usize];
    for i in 2..pages * 10 {
        let l = rng.gen_range(0..pages);
        let t0 = ftl.now_ns();
        if read_every.is_some_and(|n| i % n == 0) {
            block_on(ftl.read(l * 4096, &mut buf)).unwrap();
            worst_r = worst_r.max(ftl.now_ns() - t0);
            assert_eq!(check_stamp(l, &buf), Some(tags[l as usize]), "page {l}");
        } else {
            block_on(ftl.write(0, l * 4096, &stamped(l, i), true)).unwrap();
            worst_w = worst_w.max(ftl.now_ns() - t0);
            tags[l as usize] = i;
        }
    }
    ftl.check_invariants().unwrap();
    (worst_r, worst_w, ftl.stats().rt.unwrap())
}

/// With timing virtual, no FUA write of a full device under uniform random overwrites waits
/// longer than one step and its own program; with reads among them (one in four), no read
/// waits longer than one step, an OOB search of a whole block and its page's read (GFTL's
/// read bound), and the writes keep theirs. Bounds computed from the device's timing.
#[test]
fn every_request_is_within_its_bound() {
    let us = |ns: u64| ns as f64 / 1000.0;
    for page_size in [4096, 8192] {
        for read_every in [None, Some(4)] {
            let (worst_r, worst_w, rt) = worst_responses(page_size, read_every);
            let (rbound, wbound) = (rt.read_bound_us, rt.write_bound_us);
            assert!(rbound > wbound, "{rt:?}");
            assert!(rt.merges > 10, "{rt:?}");
            assert!(rt.buffer_blocks_max <= rt.buffer_blocks, "{rt:?}");
            assert!(
                us(worst_w) <= wbound,
                "{page_size}-byte pages, reads {read_every:?}: worst FUA write {} us, bound {wbound} us ({rt:?})",
                us(worst_w)
            );
            if read_every.is_some() {
                assert!(rt.oob_reads > 0 && rt.search_misses == 0, "{rt:?}");
                // Reads ran steps: the worst waited for an erase.
                assert!(us(worst_r) > rt.step_bound_us, "{rt:?}");
                assert!(
                    us(worst_r) <= rbound,
                    "{page_size}-byte pages: worst read {} us, bound {rbound} us ({rt:?})",
                    us(worst_r)
                );
            }
        }
    }
}

/// Power cuts one after another, each after a mix of writes, trims and flushes, closer
/// together than one round of the merge queue: every open gives each programmed block a role
/// back (a data block, the write buffer, the journal) or erases it, and goes on with the queue
/// where it was, so the write buffer stays within its budget and the free blocks a device had
/// come back. (An outside run of `ftld serve --ftl gftl` with kill -9 every few MiB found
/// the queue started again from logical block 0 at each open: the last logical blocks were
/// never merged, and the buffer grew at each open until no free block was left.)
#[test]
fn power_cuts_one_after_another_lose_no_block() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("g.img");
    // A copy nearly as long as an erase: one copy a step, so a merge takes a block's pages
    // in steps and one round of the queue is many host writes.
    let mut nand = small_nand(4096, 24);
    nand.geometry.pages_per_block = 32;
    nand.timing.t_prog = std::time::Duration::from_micros(1000);
    let mut d = Device::new(create(&img, &nand, cfg()));
    let pages = d.tags.len() as u64;
    let free = |f: &Ftl| f.stats().banks.iter().map(|b| b.free_blocks).sum::<u32>();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(24137);
    for l in 0..pages {
        d.write([l]);
    }
    for _ in 0..pages * 2 {
        d.write([rng.gen_range(0..pages)]);
    }
    let rt = d.ftl.stats().rt.unwrap();
    let round = u64::from(rt.k_fold) * pages / 32;
    assert!(rt.beta == 1 && rt.queue_len > 10, "{rt:?}");
    let free_at_start = free(&d.ftl);
    let mut most_held = 0;
    for r in 0..30 {
        for i in 0..round / 4 {
            let l = rng.gen_range(0..pages);
            if i % 29 == 0 {
                let n = rng.gen_range(1..16).min(pages - l);
                block_on(d.ftl.trim(0, l * 4096, n * 4096, false)).unwrap();
                for t in &mut d.tags[l as usize..(l + n) as usize] {
                    *t = 0;
                }
            } else {
                d.write([l]);
            }
            if i % 101 == 0 {
                block_on(d.ftl.flush()).unwrap();
            }
        }
        block_on(d.ftl.flush()).unwrap();
        let Device { ftl, tags, tag } = d;
        ftl.simulate_power_loss();
        let ftl = open(&img, cfg());
        // (No read here: a read runs a step, and the queue would drain between the opens.)
        ftl.check_invariants()
            .unwrap_or_else(|e| panic!("round {r}, after a power cut: {e}"));
        let rt = ftl.stats().rt.unwrap();
        most_held = most_held.max(rt.buffer_blocks_max);
        d = Device { ftl, tags, tag };
    }
    d.verify("after the power cuts");
    let rt = d.ftl.stats().rt.unwrap();
    assert!(
        most_held <= rt.buffer_blocks + 4,
        "an open found {most_held} buffer blocks, the budget is {}",
        rt.buffer_blocks
    );
    // The queue the opens rebuilt drains with the next round of writes.
    for _ in 0..round * 2 {
        d.write([rng.gen_range(0..pages)]);
    }
    d.verify("after the queue drained");
    let now = free(&d.ftl);
    assert!(
        now + 2 >= free_at_start,
        "{free_at_start} free blocks at the start, {now} after the power cuts: {:?}",
        d.ftl.stats().rt
    );
}
