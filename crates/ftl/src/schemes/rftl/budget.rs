//! How much reclaim work one host write may carry (RFTL §4.4, §4.5), from the device's timing.
//!
//! A partial GC step is one block erase, or at most `beta` page copies, where `beta` copies
//! take no longer than an erase (equation (2) with `t = T_er`): the erase is the longest
//! operation that cannot be cut, so a step never holds a write longer than one erase would.
//! A copy's cost is `block_ops::StepCost`'s (shared with GFTL). RFTL also reads a page's OOB for the map it keeps
//! there; ftld keeps the map in RAM, so that read is not made and not counted.
//!
//! The write bound holds for a write that finds its writer with nothing else in flight (one
//! outstanding write per queue, as RFTL's periodic requests) and no trim record waiting to
//! be written: a step first drains the writer's programs in flight, and an erase first writes
//! out the trim records that still hold slots of its block.
//!
//! - `k_fold`: the steps of a fold, which moves every current page of the primary block and
//!   of the buffer block's prefix into the replacement block (at most one block's worth: a
//!   logical block has one current version of each of its pages) and erases the primary
//!   (equation (1), plus the erase step);
//! - `k_shift`: the steps of a shift, which moves what the host wrote into the buffer during
//!   a fold (at most `k_fold` pages) into a fresh buffer and erases the old one (equation (3)).
//!
//! The fold starts when the buffer has `k_fold` free pages left, so the host always finds a
//! free page while it runs (Theorem 4.1); the fresh buffer of a shift takes up to `k_fold`
//! copies and `k_shift` host pages and must still have `k_fold` free pages for the next fold:
//! so a block needs at least `2 k_fold + k_shift` pages. Devices where it does not (a copy
//! slower than an erase, or small blocks) are refused at format, naming the figures.

use nand_model::NandConfig;

use crate::schemes::block_ops::StepCost;

/// The reclaim budget of one host write on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepBudget {
    /// Pages copied by one step (at least 1).
    pub beta: u32,
    /// Steps of a fold (copy every current page of the primary and the buffer's prefix, erase
    /// the primary).
    pub k_fold: u32,
    /// Steps of a shift (copy what the host wrote into the buffer during a fold, erase it).
    pub k_shift: u32,
    /// The longest a step keeps the device busy, in ns: an erase, or `beta` copies.
    pub step_ns: u64,
    /// RFTL's bound on a host write's response (L(p) of Table 2, without the OOB read):
    /// one step, then the page's own transfer and program.
    pub write_bound_ns: u64,
    /// A host read's: RFTL's reads run no step, so the page's read (without the OOB read of
    /// Table 2's `U(e_r)`: ftld's map of RFTL is in RAM).
    pub read_bound_ns: u64,
}

impl StepBudget {
    /// The budget on `nand`, or why the scheme cannot give its guarantee there.
    pub fn of(nand: &NandConfig) -> Result<StepBudget, String> {
        let cost = StepCost::of(nand);
        let ppb = nand.geometry.pages_per_block;
        let beta = cost.beta(ppb)?;
        let k_fold = ppb.div_ceil(beta) + 1;
        let k_shift = k_fold.div_ceil(beta) + 1;
        let need = 2 * k_fold + k_shift;
        if ppb < need {
            return Err(format!(
                "a block of {ppb} pages is too small: a step copies {beta} page{}, a fold takes {k_fold} steps and a shift {k_shift}, which needs blocks of at least {need} pages",
                if beta == 1 { "" } else { "s" }
            ));
        }
        Ok(StepBudget {
            beta,
            k_fold,
            k_shift,
            step_ns: cost.step_ns(beta),
            write_bound_ns: cost.write_bound_ns(beta),
            read_bound_ns: cost.page_read_ns(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_devices_have_a_budget_and_a_slow_copy_has_none() {
        let large = nand_model::preset("slc-large-004").unwrap();
        let b = StepBudget::of(&large.config).unwrap();
        // 25 us read + 2 x 21.1 us transfer (4 KiB and 128 B of OOB at 200 MB/s) + 300 us
        // program = 367 us: 5 copies per 2 ms erase.
        assert_eq!((b.beta, b.k_fold, b.k_shift), (5, 8, 3));
        // RFTL's 2325 us is 2000 + 300 + 25 (the OOB read ftld does not make); here the
        // page's transfer instead.
        assert_eq!(b.write_bound_ns / 1000, 2321);
        // The default preset's copy (60 + 800 us + transfers) is under its 1.5 ms erase, but a
        // step of one copy cannot fold a 128-page block within the 128 pages of its buffer.
        let def = nand_model::preset("default").unwrap();
        let e = StepBudget::of(&def.config).unwrap_err();
        assert!(e.contains("too small"), "{e}");
        let tlc = nand_model::preset("tlc").unwrap();
        let e = StepBudget::of(&tlc.config).unwrap_err();
        assert!(e.contains("longer than an erase"), "{e}");
        // 32 KiB pages of 8 slots: a copy is 8 array reads (8 x 42 us) + 2 x 41.4 us + 185 us
        // = 604 us, 4 within the 3 ms erase.
        let mlc = nand_model::preset("nvmevirt-970pro").unwrap();
        let b = StepBudget::of(&mlc.config).unwrap();
        assert_eq!((b.beta, b.k_fold, b.k_shift), (4, 17, 6));
        // lftl-card's 8 reads of 25 us and its 300 MB/s channel make a copy of 618 us: 2 per
        // 1.5 ms erase, too few for its 64-page blocks.
        let card = nand_model::preset("lftl-card").unwrap();
        assert!(StepBudget::of(&card.config).is_err());
    }
}
