//! GFTL's bookkeeping (no NAND operation: those are in `steps.rs`): a logical block's data
//! block, the GC queue of logical blocks with pages in the write buffer, the merge under way,
//! and the write buffer's blocks.

use std::collections::VecDeque;

use crate::layout::BlockIdx;
use crate::schemes::block_ops::Blk;

/// A logical block's data block: its pages in the order they were written (GFTL appends to
/// it, so a read searches its OOB area: `GftlScheme::search_data_block`), until it is full;
/// then its pages go to the write buffer.
#[derive(Clone, Copy, Debug, Default)]
pub struct DataState {
    pub data: Option<Blk>,
    /// Under merge: the merge owns where the data block's pages go, so host pages go to the
    /// write buffer.
    pub merging: bool,
}

/// Logical blocks waiting for a merge, oldest first, each at most once.
#[derive(Debug)]
pub struct LbnQueue {
    fifo: VecDeque<u32>,
    queued: Vec<bool>,
    /// The longest the queue has been.
    pub max_len: usize,
}

impl LbnQueue {
    pub fn new(lbns: u32) -> LbnQueue {
        LbnQueue {
            fifo: VecDeque::new(),
            queued: vec![false; lbns as usize],
            max_len: 0,
        }
    }

    /// Queues `lbn` at the back unless it is queued already.
    pub fn push(&mut self, lbn: u32) {
        self.insert(lbn, false);
    }

    /// Puts `lbn` back at the head (a merge that could not start now), unless it is queued.
    pub fn push_front(&mut self, lbn: u32) {
        self.insert(lbn, true);
    }

    fn insert(&mut self, lbn: u32, front: bool) {
        let Some(q) = self.queued.get_mut(lbn as usize) else {
            return;
        };
        if !*q {
            *q = true;
            if front {
                self.fifo.push_front(lbn);
            } else {
                self.fifo.push_back(lbn);
            }
            self.max_len = self.max_len.max(self.fifo.len());
        }
    }

    pub fn pop(&mut self) -> Option<u32> {
        let l = self.fifo.pop_front()?;
        self.queued[l as usize] = false;
        Some(l)
    }

    pub fn contains(&self, lbn: u32) -> bool {
        self.queued.get(lbn as usize).copied().unwrap_or(false)
    }

    pub fn len(&self) -> usize {
        self.fifo.len()
    }
}

/// A merge under way: the logical block's current pages go to `dest` in offset order, packed,
/// then the old blocks are erased.
#[derive(Clone, Debug)]
pub struct Merge {
    pub lbn: u32,
    pub dest: Blk,
    /// Erased (or, `true`, marked bad) once the copies are done, in order: the old data block,
    /// and destinations a failed program left behind.
    pub old: Vec<(BlockIdx, bool)>,
    /// The offsets to copy, ascending: those with a current page when the merge started
    /// (fixed then, so a merge takes at most `merge_steps` steps whatever the host writes
    /// meanwhile: such a page stays in the buffer and the logical block is queued again).
    pub to_copy: Vec<u32>,
    /// Offsets of `to_copy` copied so far (a destination page takes `slots_per_page`).
    pub copied: usize,
    pub steps: u32,
}

impl Merge {
    /// Whether every offset is copied.
    pub fn copies_done(&self) -> bool {
        self.copied >= self.to_copy.len()
    }
}

/// The write buffer: the block host pages are appended to (lent to one writer at a time, from
/// placement until its program is issued, so its pages are programmed in order), and the
/// filled ones.
#[derive(Debug, Default)]
pub struct BufferPool {
    pub open: Option<Blk>,
    /// A writer has the open block between `target` and `issued`.
    pub lent: bool,
    /// Filled blocks (and ones whose program failed, or a data block whose program failed:
    /// `true`, marked bad when erased), oldest first.
    pub closed: VecDeque<(BlockIdx, bool)>,
    /// Blocks in the buffer's care: open, closed, and emptied ones waiting for their erase
    /// step (in `GcState::erasable`).
    pub held: u32,
    /// The most it held at once.
    pub max_blocks: u32,
}

/// The GC's own state: held across a step (steps run one at a time, GFTL's centralised GC).
#[derive(Debug, Default)]
pub struct GcState {
    pub merge: Option<Merge>,
    /// Emptied buffer blocks waiting for an erase step (before any other work).
    pub erasable: VecDeque<(BlockIdx, bool)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logical_block_is_queued_once_in_arrival_order() {
        let mut q = LbnQueue::new(4);
        q.push(2);
        q.push(0);
        q.push(2);
        q.push(9);
        assert_eq!((q.len(), q.max_len), (2, 2));
        assert!(q.contains(2) && !q.contains(1));
        assert_eq!(q.pop(), Some(2));
        q.push(2);
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(0), Some(2), None));
        q.push(1);
        q.push_front(3);
        q.push_front(1);
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(3), Some(1), None));
    }
}
