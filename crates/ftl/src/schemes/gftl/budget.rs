//! How much reclaim work one host write carries under GFTL (Choudhuri & Givargis 2008, as
//! paper 004 describes it), and how large the write buffer must be for the host never to find
//! it full.
//!
//! A partial block cleaning step is one erase, or at most `beta` page copies within an erase's
//! time (`block_ops::StepCost`, the same unit as RFTL's). A merge of a queued logical block
//! copies at most one block's pages into its new data block (its current pages, packed in
//! offset order) and erases the old data block: `merge_steps = ceil(ppb / beta) + 1`.
//!
//! # Why the write buffer never runs out
//! Every host page runs one step. A logical block with a page in the buffer is in the GC
//! queue (at most once) or under merge, so it is merged within `(lbns + 1) * merge_steps`
//! merge steps of the page's write, and the merge supersedes the page. Erases of emptied
//! buffer blocks take steps too, at most one per `ppb` buffer pages, so every buffered page
//! is superseded within `window = ceil(((lbns + 1) * merge_steps + 1) * ppb / (ppb - 1))` host
//! pages. Buffer blocks written within one window number at most `ceil(window / ppb) + 1`;
//! older ones hold nothing current and are erased as soon as a merge's end finds them (one
//! step each, before any other work). `buffer_blocks` adds the open block and that backlog:
//! `ceil(window / ppb) + 4`. For 1024 logical blocks of 64 pages with 5 copies a step this is
//! 22 % of the data blocks (GFTL's paper reports 16 % of all blocks for its benchmarks).
//!
//! The bound on a host write's response is one step and its own program, as RFTL's. A read
//! runs a step too, then searches a data block's OOB area (at most `ppb` OOB reads) and reads
//! the page: `read_bound_ns`, paper 004's `T_er + T_rdpg + pi T_rdoob` (the larger of GFTL's
//! two: its `L(p)`). Both bounds are the paper's model: one request at a time, of one 4 KiB
//! page (a request of `n` pages searches `n` times; a write that arrives while another
//! request's step runs waits for it first, as any request behind another does).

use nand_model::NandConfig;

use crate::schemes::block_ops::StepCost;

/// GFTL's reclaim budget on a device with a number of logical blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcBudget {
    /// Pages one step copies (at least 1).
    pub beta: u32,
    /// Steps of one merge: its copies and the old data block's erase.
    pub merge_steps: u32,
    /// The longest a step keeps the device busy, in ns.
    pub step_ns: u64,
    /// The bound on a host write's response: one step, then its transfer and program.
    pub write_bound_ns: u64,
    /// The bound on a host read's: one step, an OOB search of a whole block, the page's read.
    pub read_bound_ns: u64,
    /// Write-buffer blocks the guarantee needs.
    pub buffer_blocks: u32,
}

impl GcBudget {
    /// The budget on `nand` for `lbns` logical blocks, or why GFTL cannot give its bound there.
    pub fn of(nand: &NandConfig, lbns: u64) -> Result<GcBudget, String> {
        let ppb = nand.geometry.pages_per_block;
        if ppb < 2 {
            return Err(format!(
                "blocks of {ppb} page cannot hold a write buffer's pages and be erased a step at a time"
            ));
        }
        let cost = StepCost::of(nand);
        let beta = cost.beta(ppb)?;
        let merge_steps = ppb.div_ceil(beta) + 1;
        let ppb64 = u64::from(ppb);
        let window = ((lbns + 1) * u64::from(merge_steps) + 1)
            .saturating_mul(ppb64)
            .div_ceil(ppb64 - 1);
        let buffer_blocks = window.div_ceil(ppb64) + 4;
        let buffer_blocks = u32::try_from(buffer_blocks)
            .map_err(|_| format!("{lbns} logical blocks need too large a write buffer"))?;
        Ok(GcBudget {
            beta,
            merge_steps,
            step_ns: cost.step_ns(beta),
            write_bound_ns: cost.write_bound_ns(beta),
            read_bound_ns: cost.step_ns(beta)
                + u64::from(ppb) * cost.oob_read_ns
                + cost.page_read_ns(),
            buffer_blocks,
        })
    }

    /// Blocks an image of `lbns` logical blocks needs: a data block each, the write buffer,
    /// and a merge's destination.
    pub fn blocks_needed(&self, lbns: u64) -> u64 {
        lbns + u64::from(self.buffer_blocks) + 1
    }

    /// The most logical blocks `avail` blocks hold with GFTL's write buffer, or why none fit.
    pub fn max_lbns(nand: &NandConfig, avail: u64) -> Result<u64, String> {
        let fits = |n: u64| GcBudget::of(nand, n).map(|b| b.blocks_needed(n) <= avail);
        // The buffer grows with the logical blocks: start from the estimate and walk down.
        let one = GcBudget::of(nand, 1)?;
        let per = 1.0 + f64::from(one.merge_steps) / f64::from(nand.geometry.pages_per_block);
        let mut n = ((avail as f64) / per) as u64 + 1;
        while n > 0 && !fits(n)? {
            n -= 1;
        }
        if n == 0 {
            return Err(format!(
                "{avail} blocks cannot hold a logical block with GFTL's write buffer"
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_buffer_follows_the_step_size() {
        let large = nand_model::preset("slc-large-004").unwrap();
        let b = GcBudget::of(&large.config, 1024).unwrap();
        // 5 copies a step (as RFTL's budget), 32-page blocks: 7 copy steps and an erase.
        assert_eq!((b.beta, b.merge_steps), (5, 8));
        // (1025 x 8 + 1) x 32 / 31 = 8466 pages: 265 blocks, and the open one and backlog.
        assert_eq!(b.buffer_blocks, 269);
        assert_eq!(b.write_bound_ns / 1000, 2321);
        // 2 ms erase, 32 OOB reads of 25 us + 0.64 us (128 B at 200 MB/s), 25 us + 21.1 us
        // for the page and its OOB: paper 004's 3650 us is 2000 + 50 + 32 x 50.
        assert_eq!(b.read_bound_ns / 1000, 2866);
        let n = GcBudget::max_lbns(&large.config, 2000).unwrap();
        let at = |n| GcBudget::of(&large.config, n).unwrap().blocks_needed(n);
        assert!(at(n) <= 2000 && at(n + 1) > 2000, "{n}");
        let tlc = nand_model::preset("tlc").unwrap();
        let e = GcBudget::of(&tlc.config, 10).unwrap_err();
        assert!(e.contains("longer than an erase"), "{e}");
        assert!(GcBudget::max_lbns(&large.config, 3).is_err());
    }
}
