//! Fault injection: one-shot faults at chosen addresses, seeded random faults, and a
//! deterministic power cut.
//!
//! A power cut ([`FaultInjector::power_cut_after`]) counts the operations that change the
//! medium (program, copyback, erase, marking a block bad): operation `n` is cut mid-way (a
//! program or copyback leaves a torn page, an erase or a bad mark does not happen) and every
//! later one never reaches the medium. Operations after the cut return success without
//! checking or changing anything, as if the controller still ran while the flash had no power:
//! a crash test then drops the FTL (a power cut of its RAM too) and reopens the image.
//!
//! Random faults ([`FaultInjector::set_random`]) of programs and erases are drawn per
//! operation from the seed, the address and the block's erase count (its program/erase
//! cycle), not from one sequence shared by every thread: which program or erase fails does
//! not depend on the order in which threads (host writers, GC workers) reach the device. A
//! test or an experiment with background GC then sees the same blocks fail at the same
//! cycles from run to run (only which operations happen may differ). Reads draw from a seeded
//! sequence: a random read fault spares the page's next read, so a retry succeeds and the
//! draws' order changes no outcome, unless another reader (a GC copy) reads the page between
//! a read's failure and its retry and takes the spare.
//!
//! Faults model the medium failing, not the caller misbehaving, so they are not counted as
//! violations. The device asks the injector once per operation, after the flash rules passed.
//! When nothing is armed the check is a single relaxed atomic load, so the injector costs
//! nothing on the fast path.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::geometry::{BlockAddr, PageAddr};

/// Per-operation fault probabilities for [`FaultInjector::set_random`] (each in 0.0..=1.0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultRates {
    /// Probability that a program fails.
    pub program: f64,
    /// Probability that an erase fails.
    pub erase: f64,
    /// Probability that a read is uncorrectable.
    pub read: f64,
}

/// How many faults of each kind the injector fired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Program failures.
    pub program: u64,
    /// Erase failures.
    pub erase: u64,
    /// Uncorrectable reads.
    pub read: u64,
}

#[derive(Default)]
struct Armed {
    program: HashSet<PageAddr>,
    erase: HashSet<BlockAddr>,
    read: HashSet<PageAddr>,
    /// The rates, the seed (for programs and erases, [`keyed_draw`]) and the read
    /// faults' sequence.
    random: Option<(FaultRates, u64, SmallRng)>,
    /// Pages whose last read failed at random: their next read is spared, so a retry succeeds
    /// (an uncorrectable read models a read that needs a retry, not lost data).
    read_retry: HashSet<PageAddr>,
}

/// Thread-safe fault injector owned by a [`crate::NandDevice`] ([`crate::NandDevice::faults`]).
#[derive(Default)]
pub struct FaultInjector {
    /// Fast-path flag: false when no fault of any kind is armed.
    armed: AtomicBool,
    state: Mutex<Armed>,
    fired_program: AtomicU64,
    fired_erase: AtomicU64,
    fired_read: AtomicU64,
    /// Operations that changed (or were to change) the medium while a cut was armed.
    mutations: AtomicU64,
    /// 1 + the index of the operation the power cut tears; 0: no cut armed.
    cut_plus_one: AtomicU64,
    /// The image's file system is full: room not yet allocated is refused (see
    /// [`FaultInjector::refuse_new_room`]).
    no_room: AtomicBool,
}

/// What the power lets an operation that changes the medium do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Power {
    /// No cut (yet): the operation happens.
    On,
    /// This is the operation the cut interrupts: a program leaves a torn page.
    Cut,
    /// After the cut: nothing reaches the medium.
    Off,
}

impl std::fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("armed", &self.armed.load(Ordering::Relaxed))
            .field("injected", &self.injected())
            .finish()
    }
}

impl FaultInjector {
    /// The next program of `addr` fails with [`crate::NandError::ProgramFailed`] (once).
    pub fn fail_program_at(&self, addr: PageAddr) {
        self.arm(|a| {
            a.program.insert(addr);
        });
    }

    /// The next erase of `block` fails with [`crate::NandError::EraseFailed`] (once).
    pub fn fail_erase_at(&self, block: BlockAddr) {
        self.arm(|a| {
            a.erase.insert(block);
        });
    }

    /// The next read of `addr` fails with [`crate::NandError::Uncorrectable`] (once).
    pub fn fail_read_at(&self, addr: PageAddr) {
        self.arm(|a| {
            a.read.insert(addr);
        });
    }

    /// Every operation fails with the given probability. A program or an erase fails by a
    /// draw from `seed`, its address and its block's erase count (see the module doc: the
    /// same operation fails whichever thread issues it, whenever); reads draw from a
    /// generator seeded with `seed` (the same sequence of reads gives the same faults), and
    /// a read that failed at random is never failed at random again on its immediate retry.
    pub fn set_random(&self, rates: FaultRates, seed: u64) {
        self.arm(|a| a.random = Some((rates, seed, SmallRng::seed_from_u64(seed))));
    }

    /// While `full`, the image's file system acts as full: a program that would store into a
    /// part of the (sparse) file not yet allocated in this process is refused with
    /// [`crate::NandError::NoSpace`], as on a file system with no room left (see `backing`);
    /// parts already allocated are written as before. For tests of what a full disk does.
    pub fn refuse_new_room(&self, full: bool) {
        self.no_room.store(full, Ordering::Release);
    }

    pub(crate) fn room_refused(&self) -> bool {
        self.no_room.load(Ordering::Acquire)
    }

    /// Cuts the power at the `n`-th operation from now that changes the medium (0: the next
    /// one): see the module doc. Replaces an earlier cut that has not happened yet. Operations
    /// are counted only while a cut is armed (the fast path stays one relaxed load); arm one
    /// that never comes, `power_cut_after(u64::MAX)`, to count a workload's operations.
    pub fn power_cut_after(&self, n: u64) {
        let at = self.mutations.load(Ordering::Acquire).saturating_add(n);
        self.cut_plus_one
            .store(at.saturating_add(1), Ordering::Release);
    }

    /// Whether an armed power cut has happened (its operation was attempted).
    pub fn power_cut_reached(&self) -> bool {
        let c = self.cut_plus_one.load(Ordering::Acquire);
        c != 0 && self.mutations.load(Ordering::Acquire) >= c
    }

    /// Operations that changed (or, after a power cut, were to change) the medium while a cut
    /// was armed.
    pub fn mutations(&self) -> u64 {
        self.mutations.load(Ordering::Acquire)
    }

    /// Counts one operation that changes the medium and says what the power lets it do.
    pub(crate) fn power(&self) -> Power {
        let c = self.cut_plus_one.load(Ordering::Acquire);
        if c == 0 {
            return Power::On;
        }
        let i = self.mutations.fetch_add(1, Ordering::AcqRel);
        match c {
            c if i + 1 < c => Power::On,
            c if i + 1 == c => Power::Cut,
            _ => Power::Off,
        }
    }

    /// Disarms every fault (one-shot, random and a power cut). Counters of fired faults are
    /// kept.
    pub fn clear(&self) {
        let mut a = self.state.lock();
        *a = Armed::default();
        self.armed.store(false, Ordering::Release);
        self.cut_plus_one.store(0, Ordering::Release);
        self.no_room.store(false, Ordering::Release);
    }

    /// How many faults of each kind fired so far.
    pub fn injected(&self) -> FaultCounts {
        FaultCounts {
            program: self.fired_program.load(Ordering::Relaxed),
            erase: self.fired_erase.load(Ordering::Relaxed),
            read: self.fired_read.load(Ordering::Relaxed),
        }
    }

    fn arm(&self, f: impl FnOnce(&mut Armed)) {
        let mut a = self.state.lock();
        f(&mut a);
        self.armed.store(true, Ordering::Release);
    }

    /// Decides whether this program of `addr` fails (consuming a one-shot fault if one is
    /// set); `cycle` is its block's erase count (a page is programmed once a cycle).
    pub(crate) fn program_fails(&self, addr: PageAddr, cycle: u32) -> bool {
        let fails = self.program_would_fail(addr, cycle);
        if fails {
            self.program_fault_fired(addr);
        }
        fails
    }

    /// Whether this program of `addr` would fail, consuming and counting nothing: for an
    /// operation that may still be refused for another reason (a copyback's room in the
    /// image, which depends on whether it fails) before it programs. The caller holds the
    /// bank's lock, so no other program of `addr` can take the fault meanwhile; it calls
    /// [`FaultInjector::program_fault_fired`] once the program goes ahead and fails.
    pub(crate) fn program_would_fail(&self, addr: PageAddr, cycle: u32) -> bool {
        if !self.armed.load(Ordering::Acquire) {
            return false;
        }
        let a = self.state.lock();
        a.program.contains(&addr)
            || a.random.as_ref().is_some_and(|(rates, seed, _)| {
                let key = [
                    0,
                    u64::from(addr.block.bank.0),
                    u64::from(addr.block.block),
                    u64::from(addr.page),
                    u64::from(cycle),
                ];
                fires(rates.program, keyed_draw(*seed, key))
            })
    }

    /// The program of `addr` that [`FaultInjector::program_would_fail`] said fails happened:
    /// takes its one-shot fault (if that was what failed it) and counts it.
    pub(crate) fn program_fault_fired(&self, addr: PageAddr) {
        self.state.lock().program.remove(&addr);
        self.fired_program.fetch_add(1, Ordering::Relaxed);
    }

    /// Decides whether this erase of `block` fails; `cycle` is its erase count before it.
    pub(crate) fn erase_fails(&self, block: BlockAddr, cycle: u32) -> bool {
        self.decide(&self.fired_erase, |a| {
            a.erase.remove(&block)
                || a.random.as_ref().is_some_and(|(rates, seed, _)| {
                    let key = [
                        1,
                        u64::from(block.bank.0),
                        u64::from(block.block),
                        0,
                        u64::from(cycle),
                    ];
                    fires(rates.erase, keyed_draw(*seed, key))
                })
        })
    }

    /// Decides whether this read of `addr` is uncorrectable.
    pub(crate) fn read_fails(&self, addr: PageAddr) -> bool {
        self.decide(&self.fired_read, |a| {
            if a.read.remove(&addr) {
                return true;
            }
            if a.read_retry.remove(&addr) {
                return false;
            }
            let fail = a
                .random
                .as_mut()
                .is_some_and(|(rates, _, rng)| fires(rates.read, rng.gen::<f64>()));
            if fail {
                a.read_retry.insert(addr);
            }
            fail
        })
    }

    fn decide(&self, counter: &AtomicU64, f: impl FnOnce(&mut Armed) -> bool) -> bool {
        if !self.armed.load(Ordering::Acquire) {
            return false;
        }
        let fired = f(&mut self.state.lock());
        if fired {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        fired
    }
}

/// Whether a fault of probability `p` fires on draw `u` (in [0, 1)): p <= 0 never does,
/// p >= 1 always does.
fn fires(p: f64, u: f64) -> bool {
    p > 0.0 && u < p
}

/// A uniform draw in [0, 1) determined by `seed` and `key` alone (SplitMix64's finaliser
/// folded over the key's words: every bit of each word reaches every bit of the result).
fn keyed_draw(seed: u64, key: [u64; 5]) -> f64 {
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let h = key.iter().fold(mix(seed ^ 0x9e37_79b9_7f4a_7c15), |h, &k| {
        mix(h.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ k)
    });
    // The top 53 bits: an f64's mantissa, exactly.
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_fires_once() {
        let f = FaultInjector::default();
        let p = PageAddr::new(0, 1, 2);
        assert!(!f.program_fails(p, 0));
        f.fail_program_at(p);
        assert!(!f.program_fails(PageAddr::new(0, 1, 3), 0));
        assert!(f.program_fails(p, 0));
        assert!(!f.program_fails(p, 0));
        assert_eq!(f.injected().program, 1);
    }

    #[test]
    fn random_is_deterministic_and_retry_succeeds() {
        let run = |seed| {
            let f = FaultInjector::default();
            f.set_random(
                FaultRates {
                    program: 0.3,
                    erase: 0.0,
                    read: 1.0,
                },
                seed,
            );
            let p = PageAddr::new(0, 0, 0);
            let programs: Vec<bool> = (0..64).map(|c| f.program_fails(p, c)).collect();
            // read rate 1.0: every first read fails, every retry succeeds.
            let reads: Vec<bool> = (0..4).map(|_| f.read_fails(p)).collect();
            assert_eq!(reads, [true, false, true, false]);
            assert!(!f.erase_fails(p.block, 0));
            programs
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let fails = run(7).iter().filter(|&&b| b).count();
        assert!((5..40).contains(&fails), "{fails}");
    }

    /// Which programs and erases fail depends on the operation (address and cycle), not on
    /// the order threads issue them in: the same operations in another order fail the same.
    #[test]
    fn random_program_and_erase_faults_do_not_depend_on_the_order() {
        let rates = FaultRates {
            program: 0.05,
            erase: 0.05,
            read: 0.0,
        };
        let ops: Vec<(PageAddr, u32)> = (0..4u32)
            .flat_map(|bank| (0..8u32).map(move |block| (bank, block)))
            .flat_map(|(bank, block)| (0..4u32).map(move |c| (PageAddr::new(bank, block, c), c)))
            .collect();
        // Each page's program at cycle `c`, then its block's erase ending that cycle.
        let failing = |order: &mut dyn Iterator<Item = &(PageAddr, u32)>| {
            let f = FaultInjector::default();
            f.set_random(rates, 11);
            let mut failed: Vec<(&str, PageAddr, u32, bool)> = order
                .flat_map(|&(a, c)| {
                    [
                        ("program", a, c, f.program_fails(a, c)),
                        ("erase", a, c, a.page == 0 && f.erase_fails(a.block, c)),
                    ]
                })
                .filter(|x| x.3)
                .collect();
            failed.sort_by_key(|(k, a, c, _)| (*k, a.block.bank.0, a.block.block, a.page, *c));
            failed
        };
        let forward = failing(&mut ops.iter());
        let backward = failing(&mut ops.iter().rev());
        assert_eq!(forward, backward);
        // About 5 % of 128 programs and 32 erases.
        assert!((2..25).contains(&forward.len()), "{}", forward.len());
        // Another seed, other faults.
        let f = FaultInjector::default();
        f.set_random(rates, 12);
        let other: Vec<bool> = ops.iter().map(|&(a, c)| f.program_fails(a, c)).collect();
        let f = FaultInjector::default();
        f.set_random(rates, 11);
        let same: Vec<bool> = ops.iter().map(|&(a, c)| f.program_fails(a, c)).collect();
        assert_ne!(other, same);
    }
}
