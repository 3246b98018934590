//! Injected faults (one-shot and seeded random) and wear-out. Faults never count as violations.

mod common;

use common::{pattern, small_config, Fixture};
use nand_model::{BlockAddr, FaultRates, NandError, PageAddr, TimingMode};

#[test]
fn program_failure_consumes_the_page() {
    let f = Fixture::small();
    let dev = f.dev();
    let b = BlockAddr::new(1, 1);
    dev.faults().fail_program_at(b.page(0));
    let data = pattern(b.page(0), 1, 4096);
    let e = dev.program(b.page(0), &data, &[0xAB; 32]).unwrap_err();
    assert!(
        matches!(e, NandError::ProgramFailed { page, .. } if page == b.page(0)),
        "{e}"
    );
    assert!(e.is_fault() && !e.is_violation());
    // The write pointer moved on: page 0 is consumed, page 1 is next.
    assert_eq!(dev.block_state(b).unwrap().programmed_pages, 1);
    assert!(matches!(
        dev.program(b.page(0), &data, &[]),
        Err(NandError::AlreadyProgrammed { .. })
    ));
    dev.program(b.page(1), &data, &[]).unwrap().wait();
    // The failed page reads without error but holds garbage, neither the data nor erased bytes.
    let mut back = vec![0u8; 4096];
    let mut oob = vec![0u8; 128];
    dev.read(b.page(0), 0, &mut back, Some(&mut oob))
        .unwrap()
        .wait();
    assert_ne!(back, data);
    assert!(!back.iter().all(|&x| x == 0xFF));
    assert_ne!(&oob[..32], &[0xAB; 32]);
    assert_eq!(dev.faults().injected().program, 1);
    assert_eq!(dev.violations(), 1, "only the deliberate re-program counts");
    assert_eq!(dev.stats().banks[1].faults, 1);
}

#[test]
fn erase_failure_marks_the_block_bad_persistently() {
    let mut f = Fixture::small();
    let b = BlockAddr::new(2, 3);
    f.dev().faults().fail_erase_at(b);
    let e = f.dev().erase(b).unwrap_err();
    assert!(
        matches!(e, NandError::EraseFailed { block } if block == b),
        "{e}"
    );
    assert!(f.dev().block_state(b).unwrap().bad);
    assert_eq!(f.dev().violations(), 0);
    f.reopen(TimingMode::Off);
    assert!(f.dev().block_state(b).unwrap().bad);
    // One-shot: another block erases fine.
    f.dev().erase(BlockAddr::new(2, 4)).unwrap().wait();
}

#[test]
fn uncorrectable_read_is_one_shot() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(0, 2, 0);
    let data = pattern(p, 4, 4096);
    dev.program(p, &data, &[]).unwrap().wait();
    dev.faults().fail_read_at(p);
    let mut back = vec![0u8; 4096];
    let e = dev.read(p, 0, &mut back, None).unwrap_err();
    assert!(
        matches!(e, NandError::Uncorrectable { page } if page == p),
        "{e}"
    );
    dev.read(p, 0, &mut back, None).unwrap().wait();
    assert_eq!(back, data);
    assert_eq!(dev.faults().injected().read, 1);
    assert_eq!(dev.violations(), 0);
}

#[test]
fn clear_disarms_everything() {
    let f = Fixture::small();
    let dev = f.dev();
    let p = PageAddr::new(0, 0, 0);
    dev.faults().fail_program_at(p);
    dev.faults().set_random(
        FaultRates {
            program: 1.0,
            erase: 1.0,
            read: 1.0,
        },
        1,
    );
    dev.faults().clear();
    dev.program(p, &[0; 4096], &[]).unwrap().wait();
    dev.erase(p.block).unwrap().wait();
}

/// Runs a fixed op sequence under random faults; returns which ops failed.
fn random_run(seed: u64) -> Vec<(usize, String)> {
    let f = Fixture::small();
    let dev = f.dev();
    dev.faults().set_random(
        FaultRates {
            program: 0.1,
            erase: 0.2,
            read: 0.1,
        },
        seed,
    );
    let mut failures = Vec::new();
    let mut n = 0;
    for round in 0..3 {
        for bank in 0..4 {
            for block in 0..8 {
                let b = BlockAddr::new(bank, block);
                if dev.block_state(b).unwrap().bad {
                    continue;
                }
                for page in 0..4 {
                    n += 1;
                    if let Err(e) = dev.program(b.page(page), &[round as u8; 4096], &[]) {
                        assert!(e.is_fault(), "{e}");
                        failures.push((n, e.to_string()));
                    }
                    let mut buf = [0u8; 64];
                    n += 1;
                    if let Err(e) = dev.read(b.page(page), 0, &mut buf, None) {
                        assert!(matches!(e, NandError::Uncorrectable { .. }), "{e}");
                        failures.push((n, e.to_string()));
                        // The retry succeeds.
                        dev.read(b.page(page), 0, &mut buf, None).unwrap().wait();
                    }
                }
                n += 1;
                if let Err(e) = dev.erase(b) {
                    assert!(e.is_fault(), "{e}");
                    failures.push((n, e.to_string()));
                }
            }
        }
    }
    assert_eq!(dev.violations(), 0);
    let inj = dev.faults().injected();
    assert_eq!(inj.program + inj.erase + inj.read, failures.len() as u64);
    failures
}

#[test]
fn random_faults_are_deterministic_by_seed() {
    let a = random_run(42);
    assert!(a.len() > 10, "{}", a.len());
    assert_eq!(a, random_run(42));
    assert_ne!(a, random_run(43));
}

#[test]
fn wear_out_at_endurance() {
    let mut f = Fixture::small();
    let endurance = small_config().endurance;
    let b = BlockAddr::new(3, 0);
    for i in 0..endurance {
        f.dev()
            .program(b.page(0), &[i as u8; 4096], &[])
            .unwrap()
            .wait();
        f.dev().erase(b).unwrap().wait();
    }
    assert_eq!(f.dev().block_state(b).unwrap().erase_count, endurance);
    // The block is still usable until the next erase...
    f.dev().program(b.page(0), &[1; 4096], &[]).unwrap().wait();
    let e = f.dev().erase(b).unwrap_err();
    assert!(
        matches!(e, NandError::WornOut { block, erase_count } if block == b && erase_count == endurance),
        "{e}"
    );
    assert!(e.is_fault());
    let st = f.dev().block_state(b).unwrap();
    assert!(st.bad);
    assert_eq!(st.erase_count, endurance);
    assert_eq!(f.dev().violations(), 0);
    f.reopen(TimingMode::Off);
    assert!(f.dev().block_state(b).unwrap().bad);
    assert!(matches!(f.dev().erase(b), Err(NandError::BadBlock { .. })));
}

/// A power cut at operation n: the operations before it happen, operation n (a program here)
/// leaves a torn page — OOB whole, the first half of the data, noise after it — and nothing
/// after it reaches the medium, though it returns success. Reads are not operations that
/// count; a reopen sees exactly what reached the medium.
#[test]
fn power_cut_tears_one_program_and_drops_everything_after() {
    let mut f = Fixture::small();
    let b = BlockAddr::new(1, 2);
    let other = BlockAddr::new(0, 5);
    let dev = f.dev();
    // Counted only while a cut is armed; one that never comes counts without cutting.
    dev.program(other.page(0), &pattern(other.page(0), 1, 4096), &[7; 16])
        .unwrap()
        .wait();
    assert_eq!(dev.faults().mutations(), 0);
    dev.faults().power_cut_after(u64::MAX);
    dev.program(other.page(1), &pattern(other.page(1), 1, 4096), &[7; 16])
        .unwrap()
        .wait();
    assert_eq!(dev.faults().mutations(), 1);
    assert!(!dev.faults().power_cut_reached());
    // Operations 0 and 1 from now happen, operation 2 is cut.
    dev.faults().power_cut_after(2);
    for p in 0..2 {
        dev.program(b.page(p), &pattern(b.page(p), 2, 4096), &[p as u8; 16])
            .unwrap()
            .wait();
    }
    assert!(!dev.faults().power_cut_reached());
    let torn_data = pattern(b.page(2), 2, 4096);
    dev.program(b.page(2), &torn_data, &[2; 16]).unwrap().wait();
    assert!(dev.faults().power_cut_reached());
    // After the cut: success, no effect, no rule checked (page 0 is programmed already).
    dev.program(b.page(0), &torn_data, &[9; 16]).unwrap().wait();
    dev.erase(other).unwrap().wait();
    dev.mark_bad(other).unwrap();
    let (mut back, mut oob) = (vec![0u8; 4096], vec![0u8; 16]);
    dev.read(other.page(0), 0, &mut back, None).unwrap().wait();
    assert_eq!(
        back,
        pattern(other.page(0), 1, 4096),
        "the erase never happened"
    );
    assert_eq!(dev.violations(), 0);
    f.reopen(TimingMode::Off);
    let dev = f.dev();
    assert_eq!(dev.block_state(b).unwrap().programmed_pages, 3);
    assert!(!dev.block_state(other).unwrap().bad);
    for p in 0..2 {
        dev.read(b.page(p), 0, &mut back, Some(&mut oob))
            .unwrap()
            .wait();
        assert_eq!(back, pattern(b.page(p), 2, 4096));
    }
    dev.read(b.page(2), 0, &mut back, Some(&mut oob))
        .unwrap()
        .wait();
    assert_eq!(oob, vec![2; 16], "a torn page's OOB is whole");
    assert_eq!(back[..2048], torn_data[..2048]);
    assert_ne!(back[2048..], torn_data[2048..]);
    // The cut is armed per device instance; `clear` disarms one not yet reached.
    dev.faults().power_cut_after(0);
    dev.faults().clear();
    dev.erase(b).unwrap().wait();
    assert_eq!(dev.block_state(b).unwrap().programmed_pages, 0);
}
