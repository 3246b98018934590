//! A queue's writer thread: programs the pages its queue seals where the scheme's placer says,
//! and commits them in seal order.
//!
//! The writer keeps several programs in flight (banks work in parallel) and commits them in
//! FIFO order once their modelled completion time passed, so a queue's `committed` count means
//! "the first `committed` sealed pages are durable" — what flush and FUA wait on. Where a page
//! goes is the scheme's business (`schemes::Placer`); the page scheme's placer gives each writer
//! its own open block per bank (`schemes/page/place.rs`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use nand_model::{Completion, PageAddr};

use crate::buffer::{SealedPage, WriterMsg};
use crate::core::Core;
use crate::layout::LOGICAL_PAGE;
use crate::oob::{self, SlotKind, SlotMeta};
use crate::schemes::{Placer, Target};

struct InFlight {
    page: SealedPage,
    addr: PageAddr,
    done: Completion,
}

/// A queue's writer: its placer and its in-flight programs. Owned by the queue's writer
/// thread (timing `real`) or, with timing `off` or `virtual`, kept in the queue and run by
/// whichever thread seals a page (under the queue's open-page lock).
pub struct Writer {
    q: usize,
    placer: Box<dyn Placer>,
    inflight: VecDeque<InFlight>,
    data: Vec<u8>,
    oob: Vec<u8>,
    /// The writer's clock with timing `virtual`.
    sim: SimWriter,
    /// Programs a writer keeps in flight before it waits for the oldest.
    max_inflight: usize,
}

/// The writer as an actor of a virtual-time run (timing `virtual`).
///
/// The writer thread of a served device programs sealed pages on its own time: it takes them
/// from its inbox in seal order, waits for its oldest program when `max_inflight` are in
/// flight, and does in-path and foreground GC, while the host goes on. Here a sealed page waits
/// in `inbox` with its seal time, and the simulation (`sim.rs`) runs the writer as an actor:
/// it places the next page at `max(seal time, free_at, when a program slot frees)`. A host
/// that must wait for the writer — a flush, a FUA write, a full buffer — has it place what it
/// needs at once ([`Writer::sim_place_next`]), on the writer's time. Pages commit as soon as
/// they are programmed (their data effect happened at submission); the served writer's
/// in-flight queue, which decides when a queue's pages are durable and how many are pending,
/// is kept as commit times.
#[derive(Default)]
pub(crate) struct SimWriter {
    /// Sealed pages not yet placed, with their seal times.
    inbox: VecDeque<(u64, SealedPage)>,
    /// When the writer has placed its last page (it may have waited or cleaned meanwhile).
    free_at: u64,
    /// Commit times of the programs not yet committed at the host's last look, oldest first.
    /// A page commits once it and every page sealed before it are programmed, so the times are
    /// non-decreasing.
    commits: VecDeque<u64>,
}

impl SimWriter {
    /// Forgets the programs committed by `now`.
    fn retire(&mut self, now: u64) {
        while self.commits.front().is_some_and(|&t| t <= now) {
            self.commits.pop_front();
        }
    }

    /// When the writer may submit another program at `at` or later: once fewer than `max`
    /// of its programs are still in flight. The commit times stay (the host's view of what is
    /// pending is behind the writer's).
    fn submit_at(&self, at: u64, max: usize) -> u64 {
        let max = max.max(1);
        let in_flight = self.commits.len() - self.commits.partition_point(|&t| t <= at);
        if in_flight < max {
            return at;
        }
        // Non-decreasing: after the (len - max)-th commit, at most max - 1 remain in flight.
        self.commits[self.commits.len() - max].max(at)
    }

    /// When everything this queue has programmed so far is durable.
    pub(crate) fn durable_at(&self) -> u64 {
        self.commits.back().copied().unwrap_or(0)
    }

    fn programmed(&mut self, deadline: u64) {
        let t = deadline.max(self.commits.back().copied().unwrap_or(0));
        self.commits.push_back(t);
    }
}

/// Lowers this thread's timer slack so deadline waits wake within microseconds, not 50 us.
pub fn precise_timers() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes a scheduling attribute of the calling thread;
    // it takes plain integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

impl Writer {
    pub(crate) fn new(layout: &crate::layout::Layout, q: usize, placer: Box<dyn Placer>) -> Writer {
        Writer {
            q,
            placer,
            inflight: VecDeque::new(),
            data: vec![0; layout.page_size as usize],
            oob: vec![0; layout.oob_size as usize],
            sim: SimWriter::default(),
            max_inflight: layout.banks as usize * 2,
        }
    }
}

/// The writer thread's body.
pub fn run(core: Arc<Core>, q: usize, rx: Receiver<WriterMsg>) {
    precise_timers();
    let layout = core.layout;
    let mut w = Writer::new(&layout, q, core.scheme.clone().placer(q));
    let max_inflight = w.max_inflight;
    loop {
        w.commit_done(&core, false);
        let msg = match w.inflight.front() {
            Some(_) if w.inflight.len() >= max_inflight => {
                w.commit_front(&core);
                continue;
            }
            Some(f) => match rx.recv_deadline(f.done.deadline()) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => WriterMsg::Stop,
            },
            None => rx.recv().unwrap_or(WriterMsg::Stop),
        };
        if core.writers_gone() {
            // Power cut: whatever was not programmed yet is lost.
            return;
        }
        match msg {
            WriterMsg::Page(p) => w.place(&core, p),
            WriterMsg::Stop => {
                // The channel is FIFO and Stop is sent last: every sealed page was placed.
                w.commit_done(&core, true);
                return;
            }
        }
    }
}

impl Writer {
    /// Commits in-flight pages whose program completed (all of them when `all`).
    fn commit_done(&mut self, core: &Core, all: bool) {
        while let Some(f) = self.inflight.front() {
            if !all && !f.done.is_complete() {
                return;
            }
            self.commit_front(core);
        }
    }

    /// Waits (absolute deadline) for the oldest in-flight program and commits it.
    fn commit_front(&mut self, core: &Core) {
        if let Some(f) = self.inflight.pop_front() {
            f.done.wait();
            self.commit(core, f.page, f.addr);
        }
    }

    fn commit(&mut self, core: &Core, page: SealedPage, addr: PageAddr) {
        core.scheme.commit(core, &page, addr);
        self.placer.committed(core, &page, addr);
        let queue = &core.queues[self.q];
        queue.committed.fetch_add(1, Ordering::AcqRel);
        queue.progress.notify(usize::MAX);
    }

    /// Programs `page` where the placer says (again elsewhere after a program failure) and
    /// commits it, at once if nothing is in flight and the program is done, else in turn.
    /// With timing `virtual` the page waits in the writer's inbox for the simulation (see
    /// [`SimWriter`]).
    pub fn place(&mut self, core: &Core, page: SealedPage) {
        match core.nand.sim_clock() {
            None => self.place_now(core, page),
            Some(clock) => self.sim.inbox.push_back((clock.now_ns(), page)),
        }
    }

    /// Virtual time: when the writer would place its next page (`None`: its inbox is empty).
    pub(crate) fn sim_next_at(&self) -> Option<u64> {
        let (sealed, _) = self.sim.inbox.front()?;
        Some(
            self.sim
                .submit_at((*sealed).max(self.sim.free_at), self.max_inflight),
        )
    }

    /// Virtual time: places the next page of the inbox on the writer's time, leaving the
    /// simulated clock as it found it. False if the inbox is empty.
    pub(crate) fn sim_place_next(&mut self, core: &Core) -> bool {
        let (Some(clock), Some(at)) = (core.nand.sim_clock(), self.sim_next_at()) else {
            return false;
        };
        let Some((_, page)) = self.sim.inbox.pop_front() else {
            return false;
        };
        let caller = clock.now_ns();
        clock.set_ns(at);
        self.place_now(core, page);
        self.sim.free_at = clock.now_ns();
        clock.set_ns(caller);
        true
    }

    /// Virtual time: the host at `now` waits until fewer than `max` of the queue's pages are
    /// pending (unplaced, or programmed but not committed); the writer places what that takes.
    /// Returns the host's time afterwards.
    pub(crate) fn sim_room_at(&mut self, core: &Core, mut now: u64, max: usize) -> u64 {
        let max = max.max(1);
        loop {
            self.sim.retire(now);
            if self.sim.inbox.len() + self.sim.commits.len() < max {
                return now;
            }
            if !self.sim_place_next(core) {
                now = now.max(self.sim.commits.pop_front().unwrap_or(now));
            }
        }
    }

    /// Virtual time: places every page of the inbox; returns when all the queue's pages are
    /// durable.
    pub(crate) fn sim_drain(&mut self, core: &Core) -> u64 {
        while self.sim_place_next(core) {}
        self.sim.durable_at()
    }

    fn place_now(&mut self, core: &Core, page: SealedPage) {
        self.fill(core, &page);
        loop {
            if core.writers_gone() {
                // Power cut: the page is lost, as everything not yet programmed.
                return;
            }
            if core.read_only_reason().is_some() {
                // The data stays readable from the overlay until restart; flush reports the error.
                let queue = &core.queues[self.q];
                queue.committed.fetch_add(1, Ordering::AcqRel);
                queue.progress.notify(usize::MAX);
                return;
            }
            let addr = match self.placer.target(core, &page) {
                Target::Program(addr) => addr,
                Target::Drain => {
                    self.commit_done(core, true);
                    continue;
                }
                // The loop's top acknowledges.
                Target::ReadOnly => continue,
            };
            let bytes = single_slot(&page).unwrap_or(&self.data);
            match core.nand.program(addr, bytes, &self.oob) {
                Ok(done) => {
                    core.counters.page_programs.fetch_add(1, Ordering::Relaxed);
                    if core.nand.sim_clock().is_some() {
                        // Virtual time: the commit time is kept, the page commits now.
                        self.sim.programmed(done.deadline_ns());
                        drop(done);
                        self.commit(core, page, addr);
                    } else if done.is_complete() && self.inflight.is_empty() {
                        self.commit(core, page, addr);
                    } else {
                        self.inflight.push_back(InFlight { page, addr, done });
                    }
                    return;
                }
                Err(e) if e.is_fault() => {
                    tracing::warn!("program failed at {addr:?}: {e}; retiring the block");
                    core.counters
                        .program_failures
                        .fetch_add(1, Ordering::Relaxed);
                    // Everything already programmed in the block must be committed before GC
                    // may move it out.
                    self.commit_done(core, true);
                    self.placer.failed(core, &page, addr);
                }
                Err(e) => {
                    core.set_read_only(format!("program at {addr:?} failed: {e}"));
                }
            }
        }
    }

    /// Assembles the page's bytes and OOB into the writer's scratch buffers.
    fn fill(&mut self, core: &Core, page: &SealedPage) {
        let mut metas: Vec<SlotMeta> = Vec::with_capacity(page.slots.len());
        let single = single_slot(page).is_some();
        for (i, (meta, data)) in page.slots.iter().enumerate() {
            if !single {
                let dst = &mut self.data[i * LOGICAL_PAGE..(i + 1) * LOGICAL_PAGE];
                match data {
                    Some(d) => dst.copy_from_slice(d),
                    None => dst.fill(0),
                }
            }
            metas.push(*meta);
            if meta.kind == SlotKind::Data {
                core.counters
                    .host_slots_programmed
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        oob::encode_data(&mut self.oob, &metas);
    }
}

/// The slot's own buffer when the page is exactly one full slot (4 KiB pages): programmed as
/// it is, without assembling a copy.
fn single_slot(page: &SealedPage) -> Option<&[u8]> {
    match page.slots.as_slice() {
        [(_, Some(d))] if d.len() == LOGICAL_PAGE => Some(d),
        _ => None,
    }
}
