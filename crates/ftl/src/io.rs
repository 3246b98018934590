//! Host operations: write (with read-modify-write of partial pages), trim/write-zeroes and
//! flush (reads: `read`). The scheme says where a page lives (`Scheme::locate`) and unmaps
//! trimmed pages (`Scheme::unmap`); everything else here is the same for every scheme.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;

use std::task::{Context, Poll};

use crate::buffer::{CommitWaiter, TrimRecord};
use crate::cache::{PageData, RmwEntry};
use crate::core::Core;
use crate::error::{FtlError, Result};
use crate::layout::{pieces, Lpn, LOGICAL_PAGE, SECTOR};

const LP: u64 = LOGICAL_PAGE as u64;
/// Pages covered by one trim record (and one hold of the stripe locks).
const TRIM_CHUNK: u32 = 1 << 16;

impl Core {
    pub(crate) fn capacity(&self) -> u64 {
        self.lpns as u64 * LP
    }

    /// Checks alignment and range; `write_like` requests past the end are `NoSpace`-class.
    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        if !offset.is_multiple_of(SECTOR) || !len.is_multiple_of(SECTOR) {
            return Err(FtlError::Misaligned { offset, len });
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity())
        {
            return Err(FtlError::OutOfRange {
                offset,
                len,
                capacity: self.capacity(),
            });
        }
        Ok(())
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(FtlError::Closed);
        }
        if let Some(e) = self.read_only_error() {
            return Err(e);
        }
        Ok(())
    }

    /// Writes `data` at `offset` (already range-checked) through queue `q`.
    /// Full pages are buffered as slices of `data`, without copying.
    pub(crate) async fn write_at(
        &self,
        q: usize,
        offset: u64,
        data: PageData,
        fua: bool,
    ) -> Result<()> {
        self.check_writable()?;
        let q = q % self.data_queues();
        // Whole pages in a row share one pass through the host gate (entering and leaving it
        // per 4 KiB page was ~2 % of a 128 KiB write's CPU). The gate is never held while
        // this request waits: not for room (a checkpoint would wait on it), not for a
        // read-modify-write.
        let mut gate = None;
        for p in pieces(offset, data.len()) {
            let range = p.pos..p.pos + p.len;
            if p.whole() {
                if !self.has_room(q) {
                    gate = None;
                    self.wait_room(q).await;
                }
                if gate.is_none() {
                    gate = Some(self.gate.enter().await);
                }
                self.check_writable()?;
                self.buffer_page(q, p.lpn, data.slice(range));
            } else {
                gate = None;
                self.write_partial(q, p.lpn, p.in_page, &data[range])
                    .await?;
            }
        }
        drop(gate);
        // With timing off a sealed page is placed before its write returns: if that turned
        // the device read-only (a placement's erase failed and the spare ran out, say), the
        // page was dropped unprogrammed (`Writer::place_group`), and acknowledging the write
        // would lose it at the stop unannounced. (Pages acknowledged earlier and still
        // unprogrammed at the turn are programmed after it where the scheme can, or counted
        // as lost: the design page's "Read-only".)
        if let Some(e) = self.read_only_error() {
            return Err(e);
        }
        self.note_written(data.len() as u64);
        if fua {
            self.flush_queue(q).await?;
        }
        Ok(())
    }

    /// Read-modify-write of part of a logical page, under the page's partial-write lock (which
    /// keeps other partial writes of the page out). A whole-page write or a trim of the page
    /// landing between the read and the buffering would be undone by the old bytes around the
    /// edit (no serial order of the two requests gives that): it marks the lock, and the edit
    /// goes onto the newer version if that is in RAM, else is made again on a fresh read (a
    /// page rewritten without pause stays in RAM, so the loop does not starve).
    async fn write_partial(&self, q: usize, lpn: Lpn, off: usize, part: &[u8]) -> Result<()> {
        let _lock = RmwLock { core: self, lpn }.await;
        loop {
            if let Some(e) = self.cache.lock(lpn).rmw.get_mut(&lpn.0) {
                e.changed = false;
            }
            let mut page = vec![0u8; LOGICAL_PAGE];
            self.read_at(lpn.0 as u64 * LP, &mut page).await?;
            page[off..off + part.len()].copy_from_slice(part);
            self.wait_room(q).await;
            let _g = self.gate.enter().await;
            self.check_writable()?;
            let done = self.buffer_page_rmw(q, lpn, PageData::from(page), (off, part));
            if done != Some(false) {
                self.counters.rmw_retries.fetch_add(1, Ordering::Relaxed);
            }
            if done.is_some() {
                return Ok(());
            }
        }
    }

    fn note_written(&self, bytes: u64) {
        let since = self
            .counters
            .bytes_since_checkpoint
            .fetch_add(bytes, Ordering::Relaxed)
            + bytes;
        let interval = self.cfg.checkpoint_interval_bytes;
        if interval > 0 && since >= interval && since - bytes < interval {
            self.maint_wake.notify(usize::MAX);
        }
    }

    /// Trim / write-zeroes: afterwards the range reads as zeroes; durable once flushed.
    pub(crate) async fn unmap(&self, q: usize, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.check_writable()?;
        let q = q % self.data_queues();
        let tq = self.trim_queue();
        let end = offset + len;
        let first_full = offset.div_ceil(LP);
        let last_full = end / LP;
        if first_full >= last_full {
            // No whole page inside: zero the sectors.
            if len > 0 {
                let zeros = PageData::from(vec![0u8; len as usize]);
                self.write_at(q, offset, zeros, false).await?;
            }
        } else {
            if offset < first_full * LP {
                let zeros = PageData::from(vec![0u8; (first_full * LP - offset) as usize]);
                self.write_at(q, offset, zeros, false).await?;
            }
            if end > last_full * LP {
                let zeros = PageData::from(vec![0u8; (end - last_full * LP) as usize]);
                self.write_at(q, last_full * LP, zeros, false).await?;
            }
            let mut start = first_full as u32;
            let stop = last_full as u32;
            let mut unmapped_live = false;
            while start < stop {
                let count = (stop - start).min(TRIM_CHUNK);
                let _g = self.gate.enter().await;
                self.check_writable()?;
                unmapped_live |= self.unmap_chunk(tq, start, count);
                start += count;
            }
            // As a write: a record sealed and placed in there that met a read-only turn was
            // dropped.
            if let Some(e) = self.read_only_error() {
                return Err(e);
            }
            // The slots this trim unmapped stay allocated until its record is on flash. Records
            // are batched in the trim queue, which the maintenance thread seals within a tick
            // (and at once when GC is waiting for them); FUA writes them now.
            if unmapped_live {
                self.trims_pending.store(true, Ordering::Release);
            }
            if fua {
                self.flush_queue(tq).await?;
            }
            self.counters
                .trimmed_pages
                .fetch_add(last_full - first_full, Ordering::Relaxed);
        }
        if fua {
            self.flush_queue(q).await?;
        }
        Ok(())
    }

    /// Unmaps a range under one trim record; returns whether any page was mapped.
    fn unmap_chunk(&self, q: usize, start: u32, count: u32) -> bool {
        let mut zombies = Vec::new();
        let rec = {
            let mut g = self.cache.lock_range(start, count);
            // Every stripe of the range is held: the record's sequence number is above every
            // earlier write of these pages and below every later one.
            let seq = self.next_seq();
            for l in start..start + count {
                let lpn = Lpn(l);
                let stripe = g.stripe(lpn);
                stripe.overlay.remove(&l);
                stripe.note_changed(l);
                // The old slot stays valid until the trim record is durable (see
                // `SealedPage::zombies`).
                if let Some(old) = self.scheme.unmap(stripe, lpn) {
                    zombies.push(old);
                }
            }
            // A slot of these pages still in flight, older than the record, may commit after
            // this and before the record is on flash: the map holds it (`PageMap::commit_page`).
            let rec = TrimRecord { start, count, seq };
            self.scheme.page_map().trim_buffered(rec);
            rec
        };
        let any = !zombies.is_empty();
        self.buffer_trim(q, rec, zombies);
        any
    }

    /// Makes everything buffered in queue `q` durable.
    pub(crate) async fn flush_queue(&self, q: usize) -> Result<()> {
        // Counted before the seal: the writer then waits for this page precisely.
        let _waiter = CommitWaiter::new(&self.queues[q]);
        let target = self.force_seal(q);
        self.wait_committed(q, target).await;
        self.check_durable()
    }

    /// Makes everything acknowledged so far durable.
    pub(crate) async fn flush_all(&self) -> Result<()> {
        let _waiters: Vec<_> = self.queues.iter().filter_map(CommitWaiter::new).collect();
        let targets: Vec<u64> = (0..self.queues.len()).map(|q| self.force_seal(q)).collect();
        for (q, t) in targets.into_iter().enumerate() {
            self.wait_committed(q, t).await;
        }
        self.check_durable()
    }

    /// Blocking flush, for threads outside any executor (checkpoint, close).
    pub(crate) fn flush_all_blocking(&self) {
        // Counted before the seal, as `flush_all`: the writers wait for these pages precisely.
        let _waiters: Vec<_> = self.queues.iter().filter_map(CommitWaiter::new).collect();
        let targets: Vec<u64> = (0..self.queues.len()).map(|q| self.force_seal(q)).collect();
        for (q, t) in targets.into_iter().enumerate() {
            self.wait_committed_blocking(q, t);
        }
    }

    /// Blocking flush of one queue, for threads outside any executor (a merge waiting for
    /// the trim records that hold its blocks).
    pub(crate) fn flush_queue_blocking(&self, q: usize) {
        let _waiter = CommitWaiter::new(&self.queues[q]);
        let target = self.force_seal(q);
        self.wait_committed_blocking(q, target);
    }

    /// Blocks until queue `q` has committed `target` pages (see [`Core::wait_committed`]).
    fn wait_committed_blocking(&self, q: usize, target: u64) {
        if self.sim_wait_durable(q) {
            return;
        }
        let queue = &self.queues[q];
        while queue.committed.load(Ordering::Acquire) < target && !self.writers_gone() {
            let l = queue.progress.listen();
            if queue.committed.load(Ordering::Acquire) < target && !self.writers_gone() {
                l.wait();
            }
        }
    }

    fn check_durable(&self) -> Result<()> {
        // A device read-only since its open never acknowledged a write: nothing is left to
        // lose, and a flush (a file system mounted read-only sends some) succeeds.
        if let Some(e) = self
            .read_only_error()
            .filter(|_| !self.read_only_at_open.load(Ordering::Acquire))
        {
            return Err(e);
        }
        if self.writers_gone() {
            return Err(FtlError::Closed);
        }
        Ok(())
    }
}

/// Waits for, then holds, the partial-write lock of one logical page.
struct RmwLock<'a> {
    core: &'a Core,
    lpn: Lpn,
}

struct RmwGuard<'a> {
    core: &'a Core,
    lpn: Lpn,
}

impl<'a> Future for RmwLock<'a> {
    type Output = RmwGuard<'a>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RmwGuard<'a>> {
        let mut st = self.core.cache.lock(self.lpn);
        match st.rmw.get_mut(&self.lpn.0) {
            Some(e) => {
                e.waiters.push(cx.waker().clone());
                Poll::Pending
            }
            None => {
                st.rmw.insert(self.lpn.0, RmwEntry::default());
                Poll::Ready(RmwGuard {
                    core: self.core,
                    lpn: self.lpn,
                })
            }
        }
    }
}

impl Drop for RmwGuard<'_> {
    fn drop(&mut self) {
        let entry = self.core.cache.lock(self.lpn).rmw.remove(&self.lpn.0);
        for w in entry.into_iter().flat_map(|e| e.waiters) {
            w.wake();
        }
    }
}
