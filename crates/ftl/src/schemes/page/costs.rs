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
//! - between those, host writes only take valid slots away from full blocks, so under greedy
//!   a cached cost can only be too high (pessimistic), never too low (under cost-benefit the
//!   best-scored block also moves with age, so the figure is the last scan's choice's). Each
//!   victim taken also marks the next banks in turn stale, as many as fit a budget of
//!   [`REFRESH_BLOCKS`] blocks, so a bank's cost is never older than a few victims. On the
//!   default device (16 banks of 128 blocks) that is every bank at every victim. A bank whose
//!   last scan found a victim with no valid slot is passed over in turn: nothing but a change
//!   of its own can make it cheaper.
//!
//! A scan that raced a change (a victim taken from the bank while it ran) leaves the bank stale,
//! so its possibly out-of-date answers are used at most until the bank's next use.
//!
//! The victim itself is still chosen by a full scan of the chosen bank (`select_victim`), so
//! only the ranking between banks uses cached figures.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Blocks rescanned in turn per victim taken, over all banks (besides stale banks).
pub(crate) const REFRESH_BLOCKS: u32 = 2048;

/// Bit of a packed answer saying wear levelling is due; the low 32 bits are the valid slots.
const WEAR_DUE: u64 = 1 << 32;

/// Each bank's cached cleaning cost and wear verdict (lock-free).
pub(crate) struct VictimCosts {
    /// Per bank, its last scan's answers packed in one word (so two racing stores never mix):
    /// the best victim's valid slots (`u32::MAX`: it had none), and [`WEAR_DUE`].
    answers: Box<[AtomicU64]>,
    /// The bank changed since its last scan.
    stale: Box<[AtomicBool]>,
    /// Changes of each bank so far: a scan's answers are kept only if none happened while it
    /// ran (else the bank stays stale).
    changes: Box<[AtomicU64]>,
    /// The next bank refreshed in turn.
    turn: AtomicU32,
    /// Banks refreshed in turn per victim taken.
    per_victim: u32,
}

/// A claimed refresh of one bank: scan it, then hand the answers to [`VictimCosts::store`].
pub(crate) struct Refresh {
    bank: u32,
    changes: u64,
}

impl VictimCosts {
    pub(crate) fn new(banks: u32, blocks_per_bank: u32) -> VictimCosts {
        let n = banks as usize;
        VictimCosts {
            answers: (0..n)
                .map(|_| AtomicU64::new(u64::from(u32::MAX)))
                .collect(),
            // Nothing is known before the first scan.
            stale: (0..n).map(|_| AtomicBool::new(true)).collect(),
            changes: (0..n).map(|_| AtomicU64::new(0)).collect(),
            turn: AtomicU32::new(0),
            per_victim: (REFRESH_BLOCKS / blocks_per_bank.max(1)).clamp(1, banks.max(1)),
        }
    }

    /// Bank `b` changed in a way that may make its cost lower or its wear verdict different.
    pub(crate) fn touch(&self, b: u32) {
        let i = b as usize;
        // Counted first: a scan that claimed the bank before this store sees the count move.
        self.changes[i].fetch_add(1, Ordering::AcqRel);
        self.stale[i].store(true, Ordering::Release);
    }

    /// A victim was taken from bank `b`: it and the next banks in turn are scanned again at
    /// their next use. A bank in turn whose last scan found a victim with no valid slot is
    /// left as it is: host writes cannot make its cost lower, and what can (a victim taken
    /// from it, a block erased) marks it stale itself. Under sequential overwrites most banks
    /// hold such a block, and rescanning them was most of the scans.
    pub(crate) fn victim_taken(&self, b: u32) {
        self.touch(b);
        let n = self.answers.len() as u32;
        let from = self.turn.fetch_add(self.per_victim, Ordering::Relaxed);
        for i in 0..self.per_victim {
            let t = (from + i) % n;
            if self.answers[t as usize].load(Ordering::Acquire) as u32 != 0 {
                self.touch(t);
            }
        }
    }

    /// Bank `b`'s cached answers (best victim's valid slots, wear due), or the claim to scan
    /// it again. A racing caller gets the old answers rather than scanning too.
    pub(crate) fn cached(&self, b: u32) -> Result<(u32, bool), Refresh> {
        let i = b as usize;
        if self.stale[i].swap(false, Ordering::AcqRel) {
            return Err(Refresh {
                bank: b,
                changes: self.changes[i].load(Ordering::Acquire),
            });
        }
        let a = self.answers[i].load(Ordering::Acquire);
        Ok((a as u32, a & WEAR_DUE != 0))
    }

    /// Stores the answers of a claimed scan. If the bank changed after the claim, the answers
    /// may already be out of date (a victim taken meanwhile, say): the bank stays stale, so its
    /// next use scans again.
    pub(crate) fn store(&self, r: Refresh, valid: u32, wear_due: bool) {
        let i = r.bank as usize;
        let packed = u64::from(valid) | if wear_due { WEAR_DUE } else { 0 };
        self.answers[i].store(packed, Ordering::Release);
        if self.changes[i].load(Ordering::Acquire) != r.changes {
            self.stale[i].store(true, Ordering::Release);
        }
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
        let r = c.cached(3).expect_err("unknown before the first scan");
        c.store(r, 40, false);
        assert_eq!(c.cached(3).ok(), Some((40, false)));
        assert_eq!(c.cached(3).ok(), Some((40, false)));
        c.touch(3);
        let r = c.cached(3).expect_err("touched");
        c.store(r, 35, true);
        assert_eq!(c.cached(3).ok(), Some((35, true)));
        // A victim on bank 9 refreshes bank 9 and banks 0 and 1 (the turn).
        let refresh_all = |c: &VictimCosts| {
            let stale: Vec<u32> = (0..16)
                .filter_map(|b| {
                    c.cached(b).err().map(|r| {
                        c.store(r, 50, false);
                        b
                    })
                })
                .collect();
            stale
        };
        refresh_all(&c);
        c.victim_taken(9);
        assert_eq!(refresh_all(&c), vec![0, 1, 9]);
        c.victim_taken(9);
        assert_eq!(refresh_all(&c), vec![2, 3, 9]);
        // A scan that raced a change keeps the bank stale: its answers may predate the change.
        let r = c.cached(5).err();
        assert!(r.is_none());
        c.touch(5);
        let r = c.cached(5).expect_err("touched");
        c.victim_taken(5);
        let r2 = c
            .cached(5)
            .expect_err("touched again while the first scan ran");
        c.store(r2, 200, false);
        c.store(r, 10, false);
        assert!(
            c.cached(5).is_err(),
            "the older scan's answers must not stick"
        );
        // The default device's banks (128 blocks) are all refreshed at every victim.
        assert_eq!(VictimCosts::new(16, 128).per_victim, 16);
        // A bank whose best victim has no valid slot cannot get cheaper: its turn passes it
        // over, but a change of its own still makes it scanned again.
        refresh_all(&c);
        let r = c.cached(5).err();
        assert!(r.is_none());
        c.touch(5);
        c.store(c.cached(5).expect_err("touched"), 0, false);
        for _ in 0..8 {
            c.victim_taken(9);
            assert!(!refresh_all(&c).contains(&5));
        }
        c.touch(5);
        assert!(c.cached(5).is_err());
    }
}
