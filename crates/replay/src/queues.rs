//! Which write queue an open-loop request goes through, in virtual and in real time: the one
//! the trace names (blkparse's CPU column, which `ftld serve --record` fills with the write
//! queue), else the one whose last write or trim the request continues, else the queues in
//! turn.
//!
//! A sequential stream thus stays on one queue, as one host thread's requests do (blk-mq maps
//! a CPU to a queue). Dealt in turn to two queues, each queue's buffer was programmed every
//! other run of pages, and the hybrid schemes saw two interleaved streams (partial and full
//! merges, WAF ~2, where a sequential fill makes switch merges). In closed loop each stream is
//! an application thread with its own queue, and this does not apply.

use crate::request::{Op, Request};

/// Sequential streams followed at once.
const STREAMS: usize = 32;

/// The open-loop queue rule's state.
#[derive(Debug)]
pub(crate) struct QueueChooser {
    queues: usize,
    /// The sequential streams seen lately, as (where the last write or trim of the stream
    /// ended, its queue, when it was last continued: the request count), at most [`STREAMS`].
    streams: Vec<(u64, usize, u64)>,
}

impl QueueChooser {
    /// Over `queues` write queues (at least one).
    pub(crate) fn new(queues: usize) -> QueueChooser {
        QueueChooser {
            queues: queues.max(1),
            streams: Vec::new(),
        }
    }

    /// The queue of `r`, the `issued`-th request (every request counts, replayed or not: the
    /// turn of a request that continues nothing).
    pub(crate) fn choose(&mut self, r: &Request, issued: u64) -> usize {
        let n = self.queues;
        let continued = self
            .streams
            .iter()
            .position(|&(end, _, _)| end == r.offset && r.len > 0);
        let q = match (r.queue, continued) {
            (Some(q), _) => q as usize % n,
            (None, Some(i)) => self.streams[i].1,
            (None, None) => (issued % n as u64) as usize,
        };
        if matches!(r.op, Op::Write | Op::Trim) && r.len > 0 {
            let entry = (r.offset.saturating_add(r.len), q, issued);
            match continued {
                Some(i) => self.streams[i] = entry,
                None if self.streams.len() < STREAMS => self.streams.push(entry),
                // A new stream takes the place of the one continued longest ago (a random
                // write does not push a running sequential stream off its queue).
                None => {
                    if let Some(oldest) = self.streams.iter_mut().min_by_key(|e| e.2) {
                        *oldest = entry;
                    }
                }
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sequential stream keeps its queue while other writes come between its requests (they
    /// start streams of their own, taking the queues in turn), and a queue the trace names
    /// wins.
    #[test]
    fn a_sequential_stream_keeps_its_queue_among_other_writes() {
        let mut c = QueueChooser::new(2);
        let mut issued = 0;
        let mut seq_queues = Vec::new();
        let mut other_queues = Vec::new();
        for i in 0..40u64 {
            let seq = Request::new(0, Op::Write, i * 8192, 8192);
            seq_queues.push(c.choose(&seq, issued));
            issued += 1;
            // A write elsewhere, continuing nothing.
            let other = Request::new(0, Op::Write, (1 << 20) + i * 3 * 4096, 4096);
            other_queues.push(c.choose(&other, issued));
            issued += 1;
            // A read never moves a stream.
            let read = Request::new(0, Op::Read, 0, 4096);
            c.choose(&read, issued);
            issued += 1;
        }
        assert!(
            seq_queues.iter().all(|&q| q == seq_queues[0]),
            "{seq_queues:?}"
        );
        assert!(other_queues.contains(&0) && other_queues.contains(&1));
        let mut named = Request::new(0, Op::Write, 40 * 8192, 8192);
        named.queue = Some(3);
        assert_eq!(c.choose(&named, issued), 1);
    }

    /// More than [`STREAMS`] streams: the one continued longest ago is forgotten first.
    #[test]
    fn the_stream_continued_longest_ago_is_forgotten() {
        let mut c = QueueChooser::new(4);
        let mut issued = 0u64;
        let mut first = Vec::new();
        for s in 0..STREAMS as u64 + 1 {
            first.push(c.choose(&Request::new(0, Op::Write, s << 30, 4096), issued));
            issued += 1;
        }
        // Stream 0 was pushed out by the last; stream 1 is still followed.
        let q1 = c.choose(&Request::new(0, Op::Write, (1 << 30) + 4096, 4096), issued);
        assert_eq!(q1, first[1]);
        issued += 1;
        let q0 = c.choose(&Request::new(0, Op::Write, 4096, 4096), issued);
        assert_eq!(q0, (issued % 4) as usize, "a new stream, by turn");
    }
}
