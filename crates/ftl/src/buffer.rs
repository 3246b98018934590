//! Per-queue write buffers (MT-FTL): host pages and trim records are packed into NAND pages here,
//! then handed to the queue's own writer thread.
//!
//! A queue's `open` mutex protects the page being filled. A sealed page is sent to the writer
//! while that mutex is held, so the writer sees pages in seal order and its FIFO commits keep
//! `committed` meaning "the first `committed` sealed pages are durable" — which is what flush
//! and FUA wait on.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::cache::{Buffered, PageData};
use crate::core::Core;
use crate::layout::{Lpn, Psa, LOGICAL_PAGE};
use crate::oob::{SlotKind, SlotMeta};

/// Trim records that fit in one 4 KiB trim-log slot: a u32 count, then 16-byte records.
pub const TRIMS_PER_SLOT: usize = (LOGICAL_PAGE - 4) / 16;

/// One trim or write-zeroes of `count` pages from `start`, made at sequence number `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrimRecord {
    pub start: u32,
    pub count: u32,
    pub seq: u64,
}

/// Encodes trim records into a slot's bytes.
pub fn encode_trims(recs: &[TrimRecord]) -> Vec<u8> {
    let mut v = vec![0u8; LOGICAL_PAGE];
    v[0..4].copy_from_slice(&(recs.len() as u32).to_le_bytes());
    for (i, r) in recs.iter().enumerate() {
        let o = 4 + 16 * i;
        v[o..o + 4].copy_from_slice(&r.start.to_le_bytes());
        v[o + 4..o + 8].copy_from_slice(&r.count.to_le_bytes());
        v[o + 8..o + 16].copy_from_slice(&r.seq.to_le_bytes());
    }
    v
}

/// Decodes a trim-log slot; `None` if it is malformed.
pub fn decode_trims(b: &[u8]) -> Option<Vec<TrimRecord>> {
    let n = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    if n > TRIMS_PER_SLOT {
        return None;
    }
    (0..n)
        .map(|i| {
            let o = 4 + 16 * i;
            Some(TrimRecord {
                start: u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?),
                count: u32::from_le_bytes(b.get(o + 4..o + 8)?.try_into().ok()?),
                seq: u64::from_le_bytes(b.get(o + 8..o + 16)?.try_into().ok()?),
            })
        })
        .collect()
}

/// A NAND page's worth of slots on its way to the writer.
pub struct SealedPage {
    pub slots: Vec<(SlotMeta, Option<PageData>)>,
    /// Slots unmapped by the trim records in this page. They stay marked valid — so GC keeps
    /// their blocks — until the records are on flash: erasing them earlier could let an older
    /// copy of the page win the recovery scan after a crash that lost the trim.
    pub zombies: Vec<Psa>,
    /// When the page was sealed, on the NAND device's clock: its program counts from then
    /// (`nand_model::ArrivalScope`), so the writer's wake-up is not added to the host's wait.
    pub sealed_ns: u64,
}

pub enum WriterMsg {
    Page(SealedPage),
    /// A host started waiting for the queue's commits (see [`CommitWaiter`]).
    Wake,
    Stop,
}

/// The page being filled.
#[derive(Default)]
pub struct OpenPage {
    slots: Vec<(SlotMeta, Option<PageData>)>,
    trims: Vec<TrimRecord>,
    /// Slots unmapped by `trims` (see [`SealedPage::zombies`]).
    zombies: Vec<Psa>,
    /// Slots unmapped by the trim-log slots already in `slots`.
    page_zombies: Vec<Psa>,
}

impl OpenPage {
    /// Slots unmapped by the trim records this page holds (still counted valid).
    pub(crate) fn zombies(&self) -> impl Iterator<Item = Psa> + '_ {
        self.zombies.iter().chain(&self.page_zombies).copied()
    }

    /// The trim records this page holds: batched, and in trim-log slots already.
    pub(crate) fn trim_records(&self) -> Vec<TrimRecord> {
        let mut recs = self.trims.clone();
        for (meta, data) in &self.slots {
            if meta.kind == SlotKind::TrimLog {
                recs.extend(data.as_deref().and_then(decode_trims).unwrap_or_default());
            }
        }
        recs
    }
}

/// A write queue: its open page, its writer's inbox and its progress counters.
pub struct QueueState {
    pub open: Mutex<OpenPage>,
    pub tx: Sender<WriterMsg>,
    /// Pages sealed and sent to the writer.
    pub sealed: AtomicU64,
    /// Pages the writer has programmed and committed, in seal order.
    pub committed: AtomicU64,
    /// Notified on every commit.
    pub progress: crate::signal::Signal,
    /// Host requests waiting for this queue's commits (flush, FUA, room): while there are
    /// none, the writer thread waits for its programs without spinning (see [`CommitWaiter`]).
    pub commit_waiters: AtomicUsize,
    /// With timing `off`, the queue's writer runs inline on the sealing thread.
    pub inline: Option<Mutex<crate::writer::Writer>>,
}

/// A host request's place among a queue's [`QueueState::commit_waiters`] while it waits for
/// the queue's commits.
///
/// With timer `hybrid` the writer thread spins before each of its programs' completion times,
/// so a commit lands exactly on time. That precision only matters to someone waiting for the
/// commit: a flush, a FUA write, a write waiting for room. With nobody waiting it was pure cost
/// (4 KiB random writes at QD32, timing real: 40 % more server CPU per request than timer
/// `sleep`, and 10 % fewer IOPS where the CPU was the limit), so the writer sleeps to the
/// completion time instead while the count is 0. The first waiter sends the writer a
/// [`WriterMsg::Wake`], so a writer already asleep in its inbox wakes to wait precisely.
pub(crate) struct CommitWaiter<'a> {
    queue: &'a QueueState,
}

impl<'a> CommitWaiter<'a> {
    /// Enters queue `queue` (a queue with a writer thread; inline writers never wait).
    pub(crate) fn new(queue: &'a QueueState) -> Option<CommitWaiter<'a>> {
        if queue.inline.is_some() {
            return None;
        }
        if queue.commit_waiters.fetch_add(1, Ordering::AcqRel) == 0 {
            // The writer is gone only after a power cut or close; nothing to wake then.
            let _ = queue.tx.send(WriterMsg::Wake);
        }
        Some(CommitWaiter { queue })
    }
}

impl Drop for CommitWaiter<'_> {
    fn drop(&mut self) {
        self.queue.commit_waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

impl QueueState {
    pub fn new(tx: Sender<WriterMsg>, inline: Option<crate::writer::Writer>) -> QueueState {
        QueueState {
            open: Mutex::new(OpenPage::default()),
            tx,
            sealed: AtomicU64::new(0),
            committed: AtomicU64::new(0),
            progress: crate::signal::Signal::new(),
            commit_waiters: AtomicUsize::new(0),
            inline: inline.map(Mutex::new),
        }
    }

    pub fn pending(&self) -> u64 {
        self.sealed
            .load(Ordering::Acquire)
            .saturating_sub(self.committed.load(Ordering::Acquire))
    }
}

impl Core {
    /// Buffers one full logical page for queue `q`: the write is acknowledged once this returns.
    pub(crate) fn buffer_page(&self, q: usize, lpn: Lpn, data: PageData) {
        self.buffer(q, lpn, data, None);
    }

    /// Buffers the page a read-modify-write made (`data`: the page as the caller read it, with
    /// `part` written at `off`; the caller holds `lpn`'s partial-write lock). If a whole-page
    /// write or a trim of the page landed since the read, the edit goes onto the newest
    /// version instead when that is in RAM (the serial order "that request, then this one");
    /// when it is not, returns false and the caller reads again. Returns also whether it was
    /// overtaken: `Some(overtaken)` once buffered.
    pub(crate) fn buffer_page_rmw(
        &self,
        q: usize,
        lpn: Lpn,
        data: PageData,
        (off, part): (usize, &[u8]),
    ) -> Option<bool> {
        self.buffer(q, lpn, data, Some((off, part)))
    }

    /// Buffers `data` (see [`Core::buffer_page_rmw`] for `rmw`): `None` if it did not,
    /// `Some(overtaken)` if it did.
    fn buffer(
        &self,
        q: usize,
        lpn: Lpn,
        mut data: PageData,
        rmw: Option<(usize, &[u8])>,
    ) -> Option<bool> {
        let mut overtaken = false;
        let seq = {
            let mut st = self.cache.lock(lpn);
            match rmw {
                Some((off, part)) => {
                    if st.rmw.get(&lpn.0).is_some_and(|e| e.changed) {
                        overtaken = true;
                        let newer = st.overlay.get(&lpn.0)?;
                        let mut page = newer.data.to_vec();
                        page[off..off + part.len()].copy_from_slice(part);
                        data = PageData::from(page);
                    }
                }
                None => st.note_changed(lpn.0),
            }
            // Taken under the stripe lock: per page, sequence order is overlay order.
            let seq = self.next_seq();
            // An older version still buffered or in flight may commit under this one (see
            // `Buffered::floor`); with none in the overlay, nothing older may.
            let floor = st.overlay.get(&lpn.0).map_or(seq, |b| b.floor);
            st.overlay.insert(
                lpn.0,
                Buffered {
                    seq,
                    data: data.clone(),
                    floor,
                },
            );
            seq
        };
        let meta = SlotMeta {
            kind: SlotKind::Data,
            lpn,
            seq,
            crc: crc32fast::hash(&data),
        };
        let queue = &self.queues[q];
        let mut open = queue.open.lock();
        // A scheme that maps whole blocks wants each NAND page to hold one logical block's
        // pages: a page of another block seals the open one first.
        if self.seal_unit != 0
            && open
                .slots
                .first()
                .is_some_and(|(m, _)| m.lpn.0 / self.seal_unit != lpn.0 / self.seal_unit)
        {
            self.seal_locked(queue, &mut open);
        }
        open.slots.push((meta, Some(data)));
        if open.slots.len() == self.layout.slots_per_page as usize {
            self.seal_locked(queue, &mut open);
        }
        Some(overtaken)
    }

    /// LFTL's idle flush (paper 001 §3.2.1): a data queue whose partly filled page has seen
    /// no write for `idle` has the page sealed (padded) and programmed, so buffered writes do
    /// not sit in RAM indefinitely on pages larger than 4 KiB. Called from the maintenance
    /// tick, which keeps `seen` (per data queue: the newest buffered slot's sequence number and
    /// when the tick first saw it, in [`Core::now_ns`]), so the write path reads no clock. Returns the pages sealed.
    pub(crate) fn seal_idle_queues(
        &self,
        idle_ns: u64,
        now: u64,
        seen: &mut Vec<Option<(u64, u64)>>,
    ) -> u64 {
        seen.resize(self.trim_queue(), None);
        let mut sealed = 0;
        for (q, seen) in seen.iter_mut().enumerate() {
            let queue = &self.queues[q];
            let mut open = queue.open.lock();
            let Some(newest) = open.slots.last().map(|(m, _)| m.seq) else {
                *seen = None;
                continue;
            };
            match *seen {
                Some((seq, since)) if seq == newest => {
                    if now.saturating_sub(since) >= idle_ns {
                        self.seal_locked(queue, &mut open);
                        *seen = None;
                        sealed += 1;
                    }
                }
                _ => *seen = Some((newest, now)),
            }
        }
        if sealed > 0 {
            self.counters
                .idle_flushes
                .fetch_add(sealed, Ordering::Relaxed);
        }
        sealed
    }

    /// Virtual time: whether nothing waits in RAM for a time to pass (no queue holds a
    /// partly filled page or trim records, the idle flush's business; nobody asked for trim
    /// records or a checkpoint; none is due by the bytes written), so maintenance ticks change
    /// nothing until the host acts (`sim::Background`'s idle skip).
    pub(crate) fn sim_nothing_pending(&self) -> bool {
        let interval = self.cfg.checkpoint_interval_bytes;
        // (The idle flush leaves a read-only device's buffers alone.)
        let idle_flush = self.cfg.idle_flush_ms > 0 && self.read_only_reason().is_none();
        self.queues.iter().all(|q| {
            let open = q.open.lock();
            (open.slots.is_empty() || !idle_flush) && open.trims.is_empty()
        }) && !self.flush_requested.load(Ordering::Acquire)
            && !self.trims_pending.load(Ordering::Acquire)
            && !self.checkpoint_requested.load(Ordering::Acquire)
            && (interval == 0
                || self.counters.bytes_since_checkpoint.load(Ordering::Relaxed) < interval
                || self.read_only_reason().is_some())
    }

    /// Adds a trim record to queue `q`'s buffer.
    pub(crate) fn buffer_trim(&self, q: usize, rec: TrimRecord, zombies: Vec<Psa>) {
        let queue = &self.queues[q];
        let mut open = queue.open.lock();
        open.trims.push(rec);
        open.zombies.extend(zombies);
        if open.trims.len() == TRIMS_PER_SLOT {
            self.materialize_trims(queue, &mut open);
        }
    }

    fn materialize_trims(&self, queue: &QueueState, open: &mut OpenPage) {
        if open.trims.is_empty() {
            return;
        }
        if open.slots.len() == self.layout.slots_per_page as usize {
            self.seal_locked(queue, open);
        }
        let bytes = encode_trims(&open.trims);
        let meta = SlotMeta {
            kind: SlotKind::TrimLog,
            lpn: Lpn(0),
            seq: open.trims.iter().map(|r| r.seq).max().unwrap_or(0),
            crc: crc32fast::hash(&bytes),
        };
        open.trims.clear();
        let zombies = std::mem::take(&mut open.zombies);
        open.page_zombies.extend(zombies);
        open.slots.push((meta, Some(PageData::from(bytes))));
        if open.slots.len() == self.layout.slots_per_page as usize {
            self.seal_locked(queue, open);
        }
    }

    /// Sends the open page (padded) to the writer.
    fn seal_locked(&self, queue: &QueueState, open: &mut OpenPage) {
        if open.slots.is_empty() {
            return;
        }
        let mut slots = std::mem::take(&mut open.slots);
        slots.resize(self.layout.slots_per_page as usize, (SlotMeta::PAD, None));
        // With timing off nothing reads the seal time: spare the clock read.
        let sealed_ns = if self.nand.timing_mode() == nand_model::TimingMode::Off {
            0
        } else {
            self.nand.now_ns()
        };
        let page = SealedPage {
            slots,
            zombies: std::mem::take(&mut open.page_zombies),
            sealed_ns,
        };
        queue.sealed.fetch_add(1, Ordering::AcqRel);
        if let Some(w) = &queue.inline {
            // Lock order: open page, then the inline writer (only ever taken here).
            if let Some(spare) = w.lock().place(self, page) {
                // The slot vector of a page committed meanwhile: the next open page's, so a
                // page costs no allocation.
                open.slots = spare;
            }
            return;
        }
        if queue.tx.send(WriterMsg::Page(page)).is_err() {
            // The writer is gone (shutdown): nothing will commit; waiters see `closed`.
            queue.sealed.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Seals whatever queue `q` holds (pages and trims) and returns the count to wait for.
    pub(crate) fn force_seal(&self, q: usize) -> u64 {
        let queue = &self.queues[q];
        let mut open = queue.open.lock();
        self.materialize_trims(queue, &mut open);
        self.seal_locked(queue, &mut open);
        queue.sealed.load(Ordering::Acquire)
    }

    /// With timing `virtual`, moves the caller's simulated time to when everything queue `q`
    /// has programmed so far is durable, and returns true; false with other timing modes.
    /// (Its inline writer commits every page at once; the commit times are kept instead.)
    pub(crate) fn sim_wait_durable(&self, q: usize) -> bool {
        let Some(clock) = self.nand.sim_clock() else {
            return false;
        };
        // `try_lock`: the caller may be this queue's writer itself (a merge waiting for trim
        // records runs inside a writer); then its own pages are placed in turn anyway.
        if let Some(mut w) = self.queues[q].inline.as_ref().and_then(|w| w.try_lock()) {
            let durable = w.sim_drain(self);
            clock.advance_to(durable);
        }
        true
    }

    /// Waits until queue `q` has committed `target` pages.
    pub(crate) async fn wait_committed(&self, q: usize, target: u64) {
        if self.sim_wait_durable(q) {
            return;
        }
        let queue = &self.queues[q];
        loop {
            if queue.committed.load(Ordering::Acquire) >= target || self.writers_gone() {
                return;
            }
            let l = queue.progress.listen();
            if queue.committed.load(Ordering::Acquire) >= target || self.writers_gone() {
                return;
            }
            l.await;
        }
    }

    /// Whether a page may be sealed into queue `q` without waiting: the condition
    /// [`Self::wait_room`] waits for. Virtual time always goes through `wait_room`, which
    /// dates the page (without waiting).
    pub(crate) fn has_room(&self, q: usize) -> bool {
        let queue = &self.queues[q];
        if self.nand.sim_clock().is_some() && queue.inline.is_some() {
            return false;
        }
        queue.pending() < self.cfg.max_pending_pages as u64 || self.writers_gone()
    }

    /// Waits while queue `q` has too many sealed pages in flight (backpressure).
    pub(crate) async fn wait_room(&self, q: usize) {
        let queue = &self.queues[q];
        if let (Some(clock), Some(w)) = (self.nand.sim_clock(), &queue.inline) {
            // Virtual time: the host waits (in simulated time) for the oldest pending program.
            let at = w
                .lock()
                .sim_room_at(self, clock.now_ns(), self.cfg.max_pending_pages);
            clock.set_ns(at);
            return;
        }
        let mut _waiter = None;
        while !self.has_room(q) {
            if _waiter.is_none() {
                _waiter = CommitWaiter::new(queue);
            }
            let l = queue.progress.listen();
            if self.has_room(q) {
                return;
            }
            l.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first host to wait for a queue's commits wakes its writer (which then waits for its
    /// programs precisely); later ones only count; the count falls back to 0 as they leave.
    #[test]
    fn commit_waiters_count_and_the_first_wakes_the_writer() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let q = QueueState::new(tx, None);
        let wakes = || {
            rx.try_iter()
                .filter(|m| matches!(m, WriterMsg::Wake))
                .count()
        };
        let a = CommitWaiter::new(&q);
        assert!(a.is_some());
        let b = CommitWaiter::new(&q);
        assert_eq!(q.commit_waiters.load(Ordering::Acquire), 2);
        assert_eq!(wakes(), 1);
        drop(a);
        drop(b);
        assert_eq!(q.commit_waiters.load(Ordering::Acquire), 0);
        let _c = CommitWaiter::new(&q);
        assert_eq!(
            wakes(),
            1,
            "waiting again after a quiet spell wakes the writer again"
        );
    }

    #[test]
    fn trims_roundtrip() {
        let recs: Vec<_> = (0..TRIMS_PER_SLOT as u32)
            .map(|i| TrimRecord {
                start: i,
                count: i + 1,
                seq: i as u64 * 3,
            })
            .collect();
        assert_eq!(decode_trims(&encode_trims(&recs)), Some(recs));
        let mut bad = encode_trims(&[]);
        bad[0..4].fill(0xff);
        assert_eq!(decode_trims(&bad), None);
    }
}
