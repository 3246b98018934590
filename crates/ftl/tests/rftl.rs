//! RFTL (paper 004): distributed partial GC keeps every host write's reclaim work to one step
//! (at most `beta` copies or one erase), whatever the device's fullness; folds and shifts
//! keep a logical block within three blocks; data survives a clean reopen, a power cut and
//! overwrites of a full device. Crashes at every medium operation are swept for every scheme
//! in `power_cut.rs`, faults in `faults.rs`, and the randomized model test draws `rftl` too.

mod common;

use std::time::Duration;

use common::*;
use ftl::nand_model::TimingMode;
use ftl::{Ftl, FtlConfig, GcPolicy, SchemeKind};
use rand::{Rng, SeedableRng};

fn cfg() -> FtlConfig {
    FtlConfig {
        scheme: SchemeKind::Rftl,
        checkpoint_interval_bytes: 0,
        ..small_cfg(GcPolicy::Adaptive)
    }
}

type Device = StampedDevice;

fn device(path: &std::path::Path, page_size: u32) -> Device {
    Device::new(create(path, &small_nand(page_size, 32), cfg()))
}

#[test]
fn overwrites_of_a_full_device_fold_and_shift_within_the_budget() {
    for page_size in [4096, 8192] {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("r.img");
        let mut d = device(&img, page_size);
        let pages = d.tags.len() as u64;
        // Three blocks per logical block: a third of the usable blocks is exported.
        let usable = 4 * 32 - 1;
        assert!(
            pages <= usable / 3 * 8 * u64::from(page_size / 4096),
            "{pages} pages exported"
        );
        for l in 0..pages {
            d.write([l]);
        }
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for i in 0..pages * 12 {
            // Hot and cold: most writes to a few logical blocks, the rest anywhere.
            let l = if i % 4 == 0 {
                rng.gen_range(0..pages)
            } else {
                rng.gen_range(0..pages.min(48))
            };
            d.write([l]);
        }
        d.verify("after overwrites");
        let rt = d.ftl.stats().rt.expect("rftl reports its partial GC");
        assert!(rt.folds > 0 && rt.shifts > 0, "{rt:?}");
        assert!(
            rt.max_job_steps <= u64::from(rt.k_fold),
            "a job took {} steps, a fold may take {}: {rt:?}",
            rt.max_job_steps,
            rt.k_fold
        );
        assert_eq!(rt.compactions, 0, "{rt:?}");
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
        let d = Device { ftl, tags, tag };
        d.verify("after a power cut");
    }
}

/// Jobs under way at a clean close survive it: the open takes them back from the checkpoint
/// instead of compacting their logical blocks (a whole block's copies each), the jobs go on
/// and end within their budget, and the data survives a power cut after that. After a crash
/// the open compacts them, as before.
#[test]
fn jobs_under_way_survive_a_clean_close() {
    for page_size in [4096, 8192] {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("r.img");
        let mut d = device(&img, page_size);
        let pages = d.tags.len() as u64;
        d.write(0..pages);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        for _ in 0..pages * 6 {
            d.write([rng.gen_range(0..pages)]);
        }
        let Device { ftl, tags, tag } = d;
        ftl.close().unwrap();
        drop(ftl);
        let ftl = open(&img, cfg());
        assert_eq!(ftl.recovery().mode, ftl::RecoveryMode::Clean);
        let rt = ftl.stats().rt.expect("rftl reports its partial GC");
        assert!(rt.jobs_resumed > 0, "no job under way at the close: {rt:?}");
        assert_eq!(rt.compactions, 0, "the open compacted: {rt:?}");
        let mut d = Device { ftl, tags, tag };
        d.verify("after a clean reopen");
        for _ in 0..pages * 4 {
            d.write([rng.gen_range(0..pages)]);
        }
        d.verify("after the jobs went on");
        let rt = d.ftl.stats().rt.expect("rftl");
        assert_eq!(rt.compactions, 0, "{rt:?}");
        assert!(
            rt.max_job_steps <= u64::from(rt.k_fold),
            "a job took {} steps, a fold may take {}: {rt:?}",
            rt.max_job_steps,
            rt.k_fold
        );
        block_on(d.ftl.flush()).unwrap();
        let Device { ftl, tags, tag } = d;
        ftl.simulate_power_loss();
        let ftl = open(&img, cfg());
        assert_eq!(ftl.recovery().mode, ftl::RecoveryMode::RollForward);
        let rt = ftl.stats().rt.expect("rftl");
        assert_eq!(rt.jobs_resumed, 0, "a job taken back after a crash: {rt:?}");
        let d = Device { ftl, tags, tag };
        d.verify("after a power cut");
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
        msg.contains("rftl") && msg.contains("longer than an erase"),
        "{msg}"
    );
}

/// With timing virtual, no FUA write of a full, hot device waits longer than one step and
/// its own program: RFTL's L(p), computed from the device's timing. With pages of two slots a
/// copied page may gather its slots from two source pages: two array reads.
#[test]
fn every_write_is_within_one_step_and_its_program() {
    for page_size in [4096, 8192] {
        within_the_bound(page_size);
    }
}

fn within_the_bound(page_size: u32) {
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
    assert!(rt.folds > 10, "{rt:?}");
    assert!(
        (worst as f64) / 1000.0 <= bound,
        "{page_size}-byte pages: worst FUA write {} us, bound {bound} us ({rt:?})",
        worst as f64 / 1000.0
    );
}
