//! Logical-block locks: one busy flag per logical block, held by whoever changes where the
//! block's pages live (a writer programming into its log block, a merge).
//!
//! # The rule that keeps them free of cycles
//! A thread *waits* for a logical-block lock only while it holds none for programs in flight:
//! a writer whose next page needs a lock it cannot take at once first commits what it has in
//! flight (`Target::Drain`), which releases its locks. A merge takes the locks of its victims
//! with `try_lock` only, and backs off when one is busy. So a holder never waits for another
//! holder: it only waits for NAND completions, pins and the trim queue, none of which wait for
//! a logical-block lock.
//!
//! Host reads and trims never take these locks: they work under the write cache's stripes, as
//! with every scheme; a merge publishes its copies under the stripes too (lock order: logical
//! block, then `gc_gate` shared, then stripes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use event_listener::{Event, Listener};

/// Busy flags of every logical block.
pub struct LbnLocks {
    busy: Box<[AtomicBool]>,
    released: Event,
}

impl LbnLocks {
    pub fn new(lbns: u32) -> LbnLocks {
        LbnLocks {
            busy: (0..lbns).map(|_| AtomicBool::new(false)).collect(),
            released: Event::new(),
        }
    }

    pub fn try_lock(&self, lbn: u32) -> bool {
        self.busy[lbn as usize]
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Waits for the lock (the caller holds no logical-block lock for programs in flight).
    /// Gives up (false) once `give_up` says so: after a power cut a writer that held the lock
    /// is gone without releasing it.
    pub fn lock(&self, lbn: u32, give_up: impl Fn() -> bool) -> bool {
        loop {
            if self.try_lock(lbn) {
                return true;
            }
            if give_up() {
                return false;
            }
            let l = self.released.listen();
            if self.try_lock(lbn) {
                return true;
            }
            // A bounded wait: a release between the check and the listen is caught by the
            // listener; the timeout only guards against a missed wake.
            l.wait_timeout(Duration::from_millis(5));
            nand_model::note_blocking_wait();
        }
    }

    pub fn unlock(&self, lbn: u32) {
        self.busy[lbn as usize].store(false, Ordering::Release);
        self.released.notify(usize::MAX);
    }

    #[cfg(test)]
    pub fn is_locked(&self, lbn: u32) -> bool {
        self.busy[lbn as usize].load(Ordering::Acquire)
    }

    /// Waits until some lock is released (or a short while): a merge that backed off retries.
    pub fn wait_release(&self) {
        self.released
            .listen()
            .wait_timeout(Duration::from_micros(200));
        nand_model::note_blocking_wait();
    }
}

/// Locks held by a merge of several logical blocks, released on drop.
pub struct Held<'a> {
    locks: &'a LbnLocks,
    lbns: Vec<u32>,
}

impl<'a> Held<'a> {
    /// Tries to take every lock of `lbns` (those in `already` are held by the caller and
    /// skipped); on failure takes none.
    pub fn try_all(locks: &'a LbnLocks, lbns: &[u32], already: &[u32]) -> Option<Held<'a>> {
        let mut held = Held {
            locks,
            lbns: Vec::new(),
        };
        for &l in lbns {
            if already.contains(&l) || held.lbns.contains(&l) {
                continue;
            }
            if !locks.try_lock(l) {
                return None;
            }
            held.lbns.push(l);
        }
        Some(held)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        for &l in &self.lbns {
            self.locks.unlock(l);
        }
    }
}

/// The logical-block locks a writer holds, each with its pages in flight: a lock is taken for
/// a page's placement and released once the last page placed under it is committed (or its
/// program failed), so several pages of one logical block may be in flight at once.
#[derive(Default)]
pub struct HeldByWriter {
    held: Vec<(u32, u32)>,
}

impl HeldByWriter {
    /// Pages in flight under every lock held.
    pub fn inflight(&self) -> u32 {
        self.held.iter().map(|(_, n)| n).sum()
    }

    pub fn holds(&self, lbn: u32) -> bool {
        self.held.iter().any(|(l, _)| *l == lbn)
    }

    /// Takes `lbn`'s lock; `false`: it is busy and waiting for it would hold others (pages
    /// in flight: the writer must drain first, see the module doc), or `give_up` said so
    /// while waiting (a power cut).
    pub fn acquire(&mut self, locks: &LbnLocks, lbn: u32, give_up: impl Fn() -> bool) -> bool {
        if self.holds(lbn) {
            return true;
        }
        if !locks.try_lock(lbn) && (self.inflight() > 0 || !locks.lock(lbn, give_up)) {
            return false;
        }
        self.held.push((lbn, 0));
        true
    }

    /// A page of `lbn` was placed under its lock (a program will follow).
    pub fn placed(&mut self, lbn: u32) {
        if let Some(e) = self.held.iter_mut().find(|(l, _)| *l == lbn) {
            e.1 += 1;
        }
    }

    /// One program of `lbn` is done (`placed`: a page placed under the lock committed or
    /// failed; else the placement was given up): the lock goes after the last.
    pub fn done(&mut self, locks: &LbnLocks, lbn: u32, placed: bool) {
        let Some(i) = self.held.iter().position(|(l, _)| *l == lbn) else {
            return;
        };
        if placed {
            self.held[i].1 = self.held[i].1.saturating_sub(1);
        }
        if self.held[i].1 == 0 {
            self.held.swap_remove(i);
            locks.unlock(lbn);
        }
    }

    /// The lock of `lbn` is no longer this writer's (lost while backing off): forget it
    /// without releasing it.
    pub fn forget(&mut self, lbn: u32) {
        self.held.retain(|(l, _)| *l != lbn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_all_takes_all_or_none() {
        let locks = LbnLocks::new(4);
        assert!(locks.try_lock(2));
        assert!(Held::try_all(&locks, &[0, 1, 2], &[]).is_none());
        assert!(!locks.is_locked(0) && !locks.is_locked(1), "none kept");
        let h = Held::try_all(&locks, &[0, 1, 2], &[2]).expect("2 is the caller's");
        assert!(locks.is_locked(0) && locks.is_locked(1));
        drop(h);
        assert!(!locks.is_locked(0) && !locks.is_locked(1) && locks.is_locked(2));
    }
}
