//! One logical block's physical blocks and its reclaim job (RFTL §4.1, §4.4): bookkeeping
//! only, no NAND operation (those are in `steps.rs`).
//!
//! A logical block has at most three blocks (Lemma 4.2), each page-mapped:
//! - the **primary**, which host pages fill first;
//! - the **buffer**, which host pages go to once the primary is full;
//! - the **replacement**, which a fold copies the current pages into.
//!
//! Jobs, one at a time, each advanced by one step per host page of this logical block:
//! - **fold** (started when host pages go to the buffer and it has `k_fold` free pages left):
//!   the current pages of the primary and of the buffer's prefix go into a fresh replacement,
//!   then the primary is erased; the replacement becomes the primary (the paper's exchange);
//! - **shift** (started when a fold ends): the buffer, which the host kept writing during the
//!   fold, is closed; what is current in it goes into a fresh buffer (which the host writes
//!   to as well), then the old one is erased (the paper's circular shift);
//! - **compact** (at open, after a failed program, or when a crash left a shape the rules do
//!   not allow): every current page of the logical block goes into a fresh block, every other
//!   block is erased; run to the end at once, not a step at a time.

use crate::layout::BlockIdx;
pub(crate) use crate::schemes::block_ops::Blk;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Fold,
    Shift,
    Compact,
}

/// Where a job's copies go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// The replacement block (fold, compact).
    Replacement,
    /// The buffer block, which the host writes to as well (shift).
    Buffer,
}

/// A reclaim job in progress.
#[derive(Clone, Debug)]
pub struct Job {
    pub kind: JobKind,
    /// Blocks whose current slots move, each with the pages of it that are looked at: `None`
    /// until the job's first step, which fixes it at every page placed by then (the writer
    /// has committed them all before a step).
    pub sources: Vec<(BlockIdx, Option<u32>)>,
    /// Blocks erased (or, `true`, marked bad) once nothing in them is current, in order.
    pub erase: Vec<(BlockIdx, bool)>,
    pub dest: Dest,
    /// Steps run so far.
    pub steps: u32,
}

impl Job {
    /// Whether slot `page` of `block` is one the job moves.
    pub fn covers(&self, block: BlockIdx, page: u32) -> bool {
        self.sources
            .iter()
            .any(|(b, lim)| *b == block && lim.is_some_and(|l| page < l))
    }
}

/// A logical block's blocks and job.
#[derive(Clone, Debug, Default)]
pub struct LbnState {
    pub primary: Option<Blk>,
    pub buffer: Option<Blk>,
    pub replacement: Option<Blk>,
    pub job: Option<Job>,
}

impl LbnState {
    /// Its roles that are filled: primary, buffer, replacement.
    pub fn roles(&self) -> impl Iterator<Item = Blk> {
        [self.primary, self.buffer, self.replacement]
            .into_iter()
            .flatten()
    }

    /// Every block the logical block holds (its roles and its job's victims), without repeats.
    pub fn blocks(&self) -> Vec<BlockIdx> {
        let mut v: Vec<BlockIdx> = self.roles().map(|b| b.block).collect();
        if let Some(j) = &self.job {
            v.extend(j.sources.iter().map(|(b, _)| *b));
            v.extend(j.erase.iter().map(|(b, _)| *b));
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The block a job's copies go to.
    pub fn dest(&self, d: Dest) -> Option<&Blk> {
        match d {
            Dest::Replacement => self.replacement.as_ref(),
            Dest::Buffer => self.buffer.as_ref(),
        }
    }

    /// The block a job's copies go to, to place pages in.
    pub fn dest_mut(&mut self, d: Dest) -> Option<&mut Blk> {
        match d {
            Dest::Replacement => self.replacement.as_mut(),
            Dest::Buffer => self.buffer.as_mut(),
        }
    }

    /// Starts a fold: the primary (full) and the buffer's prefix go to `replacement`.
    pub fn start_fold(&mut self, replacement: BlockIdx) {
        let (Some(p), Some(b)) = (self.primary, self.buffer) else {
            return;
        };
        self.replacement = Some(Blk::fresh(replacement));
        self.job = Some(Job {
            kind: JobKind::Fold,
            sources: vec![(p.block, Some(p.next)), (b.block, None)],
            erase: vec![(p.block, false)],
            dest: Dest::Replacement,
            steps: 0,
        });
    }

    /// A fold's copies and erase are done: the replacement becomes the primary, and the
    /// buffer is closed and shifted into `fresh_buffer` (`None`: no block, the buffer is
    /// compacted instead by the caller). Returns whether a shift started.
    pub fn end_fold(&mut self, fresh_buffer: Option<BlockIdx>) -> bool {
        self.primary = self.replacement.take();
        self.job = None;
        let Some(old) = self.buffer.take() else {
            return false;
        };
        match fresh_buffer {
            Some(nb) => {
                self.buffer = Some(Blk::fresh(nb));
                self.job = Some(Job {
                    kind: JobKind::Shift,
                    sources: vec![(old.block, Some(old.next))],
                    erase: vec![(old.block, false)],
                    dest: Dest::Buffer,
                    steps: 0,
                });
                true
            }
            None => {
                self.buffer = Some(old);
                false
            }
        }
    }

    /// Starts a compaction of every block, and of `extra` blocks (found at open beside the
    /// roles), into `fresh` (`retire`: a block whose program failed, marked bad instead of
    /// erased).
    pub fn start_compact(
        &mut self,
        fresh: BlockIdx,
        retire: Option<BlockIdx>,
        ppb: u32,
        extra: &[Blk],
    ) {
        let mut old = self.blocks();
        old.extend(extra.iter().map(|b| b.block));
        old.sort_unstable();
        old.dedup();
        let placed = |b: BlockIdx| {
            self.roles()
                .chain(extra.iter().copied())
                .find(|x| x.block == b)
                .map_or(ppb, |x| x.next)
        };
        // Blocks an earlier, failed attempt marked for retirement stay marked.
        let retired: Vec<BlockIdx> = self
            .job
            .iter()
            .flat_map(|j| j.erase.iter().filter(|(_, bad)| *bad).map(|(b, _)| *b))
            .collect();
        let sources = old.iter().map(|b| (*b, Some(placed(*b)))).collect();
        let erase = old
            .iter()
            .map(|b| (*b, Some(*b) == retire || retired.contains(b)))
            .collect();
        *self = LbnState {
            primary: None,
            buffer: None,
            replacement: Some(Blk::fresh(fresh)),
            job: Some(Job {
                kind: JobKind::Compact,
                sources,
                erase,
                dest: Dest::Replacement,
                steps: 0,
            }),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_then_shift_keep_three_blocks() {
        let mut s = LbnState {
            primary: Some(Blk {
                block: BlockIdx(1),
                next: 8,
            }),
            buffer: Some(Blk {
                block: BlockIdx(2),
                next: 5,
            }),
            ..LbnState::default()
        };
        s.start_fold(BlockIdx(3));
        assert_eq!(s.blocks(), vec![BlockIdx(1), BlockIdx(2), BlockIdx(3)]);
        let j = s.job.as_ref().unwrap();
        assert!(j.covers(BlockIdx(1), 7));
        // The buffer's prefix is fixed at the first step, not at the start.
        assert!(!j.covers(BlockIdx(2), 0));
        // The primary is erased and freed before the fresh buffer is taken.
        assert!(s.end_fold(Some(BlockIdx(1))));
        assert_eq!(s.primary.unwrap().block, BlockIdx(3));
        assert_eq!(s.buffer, Some(Blk::fresh(BlockIdx(1))));
        let j = s.job.as_ref().unwrap();
        assert_eq!(j.kind, JobKind::Shift);
        assert!(j.covers(BlockIdx(2), 4) && !j.covers(BlockIdx(2), 5));
        assert_eq!(s.blocks().len(), 3);
        s.start_compact(BlockIdx(9), Some(BlockIdx(2)), 8, &[]);
        let j = s.job.as_ref().unwrap();
        assert_eq!(j.erase.len(), 3);
        assert!(j.erase.contains(&(BlockIdx(2), true)));
        assert!(s.primary.is_none() && s.buffer.is_none());
    }
}
