//! What cleaning each bank would cost now, cached for ranking banks against each other.
//!
//! GC workers and writers cleaning in the path pick the bank whose best victim has the fewest
//! valid slots, and a worker passes over banks that neither need cleaning nor have a wear spread
//! worth levelling. Both answers take a scan of every block of the bank. Scanning every bank for
//! every choice made the choice itself the cost on large devices: at 8 GiB (1024 blocks per
//! bank) the scans were 8.6 % of the server's CPU under 128 KiB sequential overwrites, and they
//! grow with the device (a 64 GiB bank has 8192 blocks).
//!
//! So each bank's answers are kept from its last scan and scanned again only when they may have
//! moved the other way than time moves them:
//! - a block of the bank became full (a new candidate), a victim was taken from it or given
//!   back, or a block was erased (wear): the bank is marked stale ([`VictimCosts::touch`]) and
//!   scanned at its next use;
//! - between those, host writes only take valid slots away from full blocks, so a cached cost
//!   can only be too high (pessimistic), never too low. Each victim taken also marks the next
//!   banks in turn stale, as many as fit a budget of [`REFRESH_BLOCKS`] blocks, so a bank's
//!   cost is never older than a few victims. On the default device (16 banks of 128 blocks)
//!   that is every bank at every victim.
//!
//! The victim itself is still chosen by a full scan of the chosen bank (`select_victim`), so
//! only the ranking between banks uses cached figures.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Blocks rescanned in turn per victim taken, over all banks (besides stale banks).
pub(crate) const REFRESH_BLOCKS: u32 = 2048;

/// Each bank's cached cleaning cost and wear verdict (lock-free; racing refreshes store
/// equally fresh answers).
pub(crate) struct VictimCosts {
    /// Valid slots of the bank's best victim at its last scan (`u32::MAX`: it had none).
    valid: Box<[AtomicU32]>,
    /// Whether the bank's erase-count spread called for wear levelling at its last scan.
    wear_due: Box<[AtomicBool]>,
    /// The bank changed since its last scan.
    stale: Box<[AtomicBool]>,
    /// The next bank refreshed in turn.
    turn: AtomicU32,
    /// Banks refreshed in turn per victim taken.
    per_victim: u32,
}

impl VictimCosts {
    pub(crate) fn new(banks: u32, blocks_per_bank: u32) -> VictimCosts {
        let n = banks as usize;
        VictimCosts {
            valid: (0..n).map(|_| AtomicU32::new(u32::MAX)).collect(),
            wear_due: (0..n).map(|_| AtomicBool::new(false)).collect(),
            // Nothing is known before the first scan.
            stale: (0..n).map(|_| AtomicBool::new(true)).collect(),
            turn: AtomicU32::new(0),
            per_victim: (REFRESH_BLOCKS / blocks_per_bank.max(1)).clamp(1, banks.max(1)),
        }
    }

    /// Bank `b` changed in a way that may make its cost lower or its wear verdict different.
    pub(crate) fn touch(&self, b: u32) {
        self.stale[b as usize].store(true, Ordering::Release);
    }

    /// A victim was taken from bank `b`: it and the next banks in turn are scanned again at
    /// their next use.
    pub(crate) fn victim_taken(&self, b: u32) {
        self.touch(b);
        let n = self.valid.len() as u32;
        let from = self.turn.fetch_add(self.per_victim, Ordering::Relaxed);
        for i in 0..self.per_victim {
            self.touch((from + i) % n);
        }
    }

    /// Bank `b`'s cached answers, or `None` if it must be scanned again (the caller then
    /// [`VictimCosts::store`]s the scan's answers). Claims the refresh: a racing caller gets
    /// the old answers rather than scanning twice.
    pub(crate) fn cached(&self, b: u32) -> Option<(u32, bool)> {
        let i = b as usize;
        if self.stale[i].swap(false, Ordering::AcqRel) {
            return None;
        }
        Some((
            self.valid[i].load(Ordering::Acquire),
            self.wear_due[i].load(Ordering::Acquire),
        ))
    }

    /// Stores a scan's answers for bank `b`.
    pub(crate) fn store(&self, b: u32, valid: u32, wear_due: bool) {
        let i = b as usize;
        self.valid[i].store(valid, Ordering::Release);
        self.wear_due[i].store(wear_due, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bank_is_scanned_again_only_after_it_changed_or_its_turn_came() {
        // 16 banks of 1024 blocks: two banks refreshed in turn per victim.
        let c = VictimCosts::new(16, 1024);
        assert_eq!(c.per_victim, 2);
        assert_eq!(c.cached(3), None, "unknown before the first scan");
        c.store(3, 40, false);
        assert_eq!(c.cached(3), Some((40, false)));
        assert_eq!(c.cached(3), Some((40, false)));
        c.touch(3);
        assert_eq!(c.cached(3), None);
        c.store(3, 35, true);
        // A victim on bank 9 refreshes bank 9 and banks 0 and 1 (the turn).
        for b in 0..16 {
            if c.cached(b).is_none() {
                c.store(b, 50, false);
            }
        }
        c.victim_taken(9);
        let stale: Vec<u32> = (0..16).filter(|&b| c.cached(b).is_none()).collect();
        assert_eq!(stale, vec![0, 1, 9]);
        c.victim_taken(9);
        let stale: Vec<u32> = (0..16).filter(|&b| c.cached(b).is_none()).collect();
        assert_eq!(stale, vec![2, 3, 9]);
        // The default device's banks (128 blocks) are all refreshed at every victim.
        assert_eq!(VictimCosts::new(16, 128).per_victim, 16);
    }
}
