//! GFTL (paper 004's real-time baseline): centralised partial GC keeps every host write's
//! reclaim work to one step (at most `beta` copies or one erase), whatever the device's
//! fullness, and the write buffer within the size its guarantee computes; sequential writes
//! go in place; data survives merges, a clean reopen, a power cut and overwrites of a full
//! device. Crashes at every medium operation are swept for every scheme in `power_cut.rs`,
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

/// With timing virtual, no FUA write of a full device under uniform random overwrites waits
/// longer than one step and its own program, computed from the device's timing.
#[test]
fn every_write_is_within_one_step_and_its_program() {
    for page_size in [4096, 8192] {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("v.img");
        let nand = small_nand(page_size, 32);
        let ftl = Ftl::create(&img, &nand, TimingMode::Virtual, cfg(), None).unwrap();
        let pages = ftl.capacity() / 4096;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let mut worst = 0u64;
        let bound = ftl.stats().rt.unwrap().write_bound_us;
        for i in 0..pages * 10 {
            let l = if i < pages {
                i
            } else {
                rng.gen_range(0..pages)
            };
            let t0 = ftl.now_ns();
            block_on(ftl.write(0, l * 4096, &stamped(l, i), true)).unwrap();
            worst = worst.max(ftl.now_ns() - t0);
        }
        let rt = ftl.stats().rt.unwrap();
        assert!(rt.merges > 10, "{rt:?}");
        assert!(rt.buffer_blocks_max <= rt.buffer_blocks, "{rt:?}");
        assert!(
            (worst as f64) / 1000.0 <= bound,
            "{page_size}-byte pages: worst FUA write {} us, bound {bound} us ({rt:?})",
            worst as f64 / 1000.0
        );
        ftl.check_invariants().unwrap();
    }
}
