//! A queue's writer thread: programs the pages its queue seals where the scheme's placer says,
//! and commits them in seal order.
//!
//! The writer keeps several programs in flight (banks work in parallel) and commits them in
//! FIFO order once their modelled completion time passed, so a queue's `committed` count means
//! "the first `committed` sealed pages are durable" — what flush and FUA wait on. Where a page
//! goes is the scheme's business (`schemes::Placer`); the page scheme's placer gives each writer
//! its own open block per bank (`schemes/page/place.rs`).
//!
//! On a device with planes, a writer offers its placer the pages already waiting in its inbox
//! (never waiting for more), up to the planes of a bank: the page placer programs a prefix of
//! them in one multi-plane operation, and the rest join the next group. A group is one
//! in-flight program whose pages commit together, in seal order.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use nand_model::{Completion, NandError, PageAddr, PlaneProgram};
use smallvec::SmallVec;

use crate::buffer::{SealedPage, WriterMsg};
use crate::cache::PageData;
use crate::core::Core;
use crate::layout::LOGICAL_PAGE;
use crate::oob::{self, SlotKind, SlotMeta};
use crate::schemes::{Placer, Target};

/// One program in flight: a page, or the pages of a multi-plane program, in seal order.
struct InFlight {
    pages: Vec<(SealedPage, PageAddr)>,
    done: Completion,
}

/// A queue's writer: its placer and its in-flight programs. Owned by the queue's writer
/// thread (timing `real`) or, with timing `off` or `virtual`, kept in the queue and run by
/// whichever thread seals a page (under the queue's open-page lock).
pub struct Writer {
    q: usize,
    placer: Box<dyn Placer>,
    inflight: VecDeque<InFlight>,
    /// Scratch OOB buffers, one per page of a multi-plane program, and a page's slot metadata
    /// on its way into the OOB. (A page's data goes to the device as its slots' own buffers:
    /// `program_planes_parts`.)
    oob: Vec<Vec<u8>>,
    metas: Vec<SlotMeta>,
    /// Pages the placer may program at once (`Placer::group_size`).
    group: usize,
    /// Sealed pages taken from the inbox but not yet programmed (the rest of a group whose
    /// placer took only a prefix), in seal order: they go before anything newer.
    pending: VecDeque<SealedPage>,
    /// The writer's clock with timing `virtual`.
    sim: SimWriter,
    /// Programs a writer keeps in flight before it waits for the oldest.
    max_inflight: usize,
    /// No program may be dated before this (NAND clock ns): when the in-flight window last
    /// opened after being full (see `commit_front`), or when a wait inside `place_group` ended.
    gate_ns: u64,
    /// Reused buffers, so the inline path allocates nothing per page (it allocated two per
    /// page before: ~7 % of a 128 KiB write's CPU on 4 KiB pages, `write_cost`): the group
    /// handed to `place_group`, and the slot vector of the last page committed, which the
    /// inline caller takes back for its next open page (`place`).
    group_buf: Vec<SealedPage>,
    spare_slots: Option<Vec<Slot>>,
}

/// A sealed page's slot: its metadata and its bytes (none for padding).
pub(crate) type Slot = (SlotMeta, Option<PageData>);

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
    /// Commit times of the pages not yet committed at the host's last look, oldest first.
    /// A page commits once it and every page sealed before it are programmed, so the times are
    /// non-decreasing. (The host's backpressure counts pages.)
    commits: VecDeque<u64>,
    /// The same for programs: one entry per program, however many planes it wrote (the
    /// writer's in-flight window counts programs, as the real-time writer's `inflight` does).
    programs: VecDeque<u64>,
}

impl SimWriter {
    /// Forgets the pages and programs committed by `now`.
    fn retire(&mut self, now: u64) {
        while self.commits.front().is_some_and(|&t| t <= now) {
            self.commits.pop_front();
        }
        while self.programs.front().is_some_and(|&t| t <= now) {
            self.programs.pop_front();
        }
    }

    /// When the writer may submit another program at `at` or later: once fewer than `max`
    /// of its programs are still in flight. The commit times stay (the host's view of what is
    /// pending is behind the writer's).
    fn submit_at(&self, at: u64, max: usize) -> u64 {
        let max = max.max(1);
        let p = &self.programs;
        let in_flight = p.len() - p.partition_point(|&t| t <= at);
        if in_flight < max {
            return at;
        }
        // Non-decreasing: after the (len - max)-th commit, at most max - 1 remain in flight.
        p[p.len() - max].max(at)
    }

    /// When everything this queue has programmed so far is durable.
    pub(crate) fn durable_at(&self) -> u64 {
        self.commits.back().copied().unwrap_or(0)
    }

    /// A program of `pages` pages completing at `deadline`.
    fn programmed(&mut self, deadline: u64, pages: usize) {
        let t = deadline.max(self.commits.back().copied().unwrap_or(0));
        for _ in 0..pages {
            self.commits.push_back(t);
        }
        self.programs.push_back(t);
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
    pub(crate) fn new(
        layout: &crate::layout::Layout,
        planes: u32,
        q: usize,
        placer: Box<dyn Placer>,
    ) -> Writer {
        let group = placer.group_size(planes).clamp(1, planes.max(1) as usize);
        Writer {
            q,
            placer,
            inflight: VecDeque::new(),
            oob: vec![vec![0; layout.oob_size as usize]; group],
            metas: Vec::with_capacity(layout.slots_per_page as usize),
            group,
            pending: VecDeque::new(),
            sim: SimWriter::default(),
            max_inflight: layout.banks as usize * 2,
            gate_ns: 0,
            group_buf: Vec::new(),
            spare_slots: None,
        }
    }
}

/// The writer thread's body.
pub fn run(core: Arc<Core>, q: usize, rx: Receiver<WriterMsg>) {
    precise_timers();
    let layout = core.layout;
    let planes = core.nand.config().planes;
    let mut w = Writer::new(&layout, planes, q, core.scheme.clone().placer(q));
    let max_inflight = w.max_inflight;
    let mut stopping = false;
    loop {
        w.commit_done(&core, false);
        if w.pending.is_empty() {
            if stopping {
                // The channel is FIFO and Stop is sent last: every sealed page was placed.
                w.commit_done(&core, true);
                return;
            }
            let msg = match w.inflight.front() {
                Some(_) if w.inflight.len() >= max_inflight => {
                    w.commit_front(&core);
                    continue;
                }
                // Woken a timer margin early, the oldest program is then waited for precisely
                // (`commit_front`): a channel timeout alone wakes as late as the kernel's
                // latency, and every FUA write and flush behind it would wait that much longer.
                // With no host waiting for this queue's commits, the deadline itself (no spin;
                // the first waiter's `Wake` ends this wait).
                Some(f) => match rx.recv_deadline(if w.precise(&core) {
                    f.done.wake_hint()
                } else {
                    f.done.deadline()
                }) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => {
                        w.commit_front(&core);
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => WriterMsg::Stop,
                },
                None => rx.recv().unwrap_or(WriterMsg::Stop),
            };
            match msg {
                WriterMsg::Page(p) => {
                    count_host_slots(&core, &p);
                    w.pending.push_back(p);
                }
                WriterMsg::Wake => {}
                WriterMsg::Stop => stopping = true,
            }
        } else if w.inflight.len() >= max_inflight {
            w.commit_front(&core);
            continue;
        }
        if core.writers_gone() {
            // Power cut: whatever was not programmed yet is lost.
            return;
        }
        // Offer the placer what is already waiting, up to a group; never wait for more.
        while !stopping && w.pending.len() < w.group {
            match rx.try_recv() {
                Ok(WriterMsg::Page(p)) => {
                    count_host_slots(&core, &p);
                    w.pending.push_back(p);
                }
                Ok(WriterMsg::Wake) => {}
                Ok(WriterMsg::Stop) => stopping = true,
                Err(_) => break,
            }
        }
        let n = w.pending.len().min(w.group);
        if n > 0 {
            let mut group = std::mem::take(&mut w.group_buf);
            group.extend(w.pending.drain(..n));
            w.place_group(&core, &mut group);
            while let Some(p) = group.pop() {
                w.pending.push_front(p);
            }
            w.group_buf = group;
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

    /// Waits (absolute deadline) for the oldest in-flight program and commits its pages. With
    /// the in-flight window full, the next program could not have been issued before this one
    /// completed: its arrival is then no earlier than this deadline (`gate_ns`).
    fn commit_front(&mut self, core: &Core) {
        if let Some(f) = self.inflight.pop_front() {
            if self.inflight.len() + 1 >= self.max_inflight {
                self.gate_ns = self.gate_ns.max(f.done.deadline_ns());
            }
            if !self.precise(core) {
                // Asleep until the point a precise wait would start spinning, then precise if a
                // host began waiting meanwhile (a writer blocked here with its window full
                // cannot see that host's `Wake`).
                let hint = f.done.wake_hint();
                if let Some(d) = hint.checked_duration_since(std::time::Instant::now()) {
                    std::thread::sleep(d);
                }
            }
            if self.precise(core) {
                f.done.wait();
            } else {
                f.done.wait_as(nand_model::TimerMode::Sleep);
            }
            for (page, addr) in f.pages {
                self.commit(core, page, addr);
            }
        }
    }

    /// Whether a host waits for this queue's commits, so the oldest program's completion is
    /// worth waiting for exactly (the device's timer) rather than asleep (see
    /// [`crate::buffer::CommitWaiter`]).
    fn precise(&self, core: &Core) -> bool {
        core.queues[self.q].commit_waiters.load(Ordering::Acquire) > 0
    }

    fn commit(&mut self, core: &Core, page: SealedPage, addr: PageAddr) {
        core.scheme.commit(core, &page, addr);
        self.placer.committed(core, &page, addr);
        let queue = &core.queues[self.q];
        queue.committed.fetch_add(1, Ordering::AcqRel);
        queue.progress.notify_all();
        let mut slots = page.slots;
        slots.clear();
        self.spare_slots = Some(slots);
    }

    /// Programs `page` where the placer says (again elsewhere after a program failure) and
    /// commits it, at once if nothing is in flight and the program is done, else in turn.
    /// With timing `virtual` the page waits in the writer's inbox for the simulation (see
    /// [`SimWriter`]).
    ///
    /// Returns an empty slot vector to reuse for the next open page, when one is spare (the
    /// slots of a page committed meanwhile).
    pub fn place(&mut self, core: &Core, page: SealedPage) -> Option<Vec<Slot>> {
        count_host_slots(core, &page);
        match core.nand.sim_clock() {
            None => {
                // Inline (timing off): one page at a time, nothing else is waiting.
                let mut group = std::mem::take(&mut self.group_buf);
                group.push(page);
                self.place_group(core, &mut group);
                debug_assert!(group.is_empty());
                self.group_buf = group;
            }
            Some(clock) => self.sim.inbox.push_back((clock.now_ns(), page)),
        }
        self.spare_slots.take()
    }

    /// Virtual time: when the writer would place its next page (`None`: its inbox is empty).
    pub(crate) fn sim_next_at(&self) -> Option<u64> {
        let (sealed, _) = self.sim.inbox.front()?;
        Some(
            self.sim
                .submit_at((*sealed).max(self.sim.free_at), self.max_inflight),
        )
    }

    /// Virtual time: places the next page of the inbox on the writer's time (with the pages
    /// sealed by then that a multi-plane program can take along), leaving the simulated clock
    /// as it found it. False if the inbox is empty.
    pub(crate) fn sim_place_next(&mut self, core: &Core) -> bool {
        let (Some(clock), Some(at)) = (core.nand.sim_clock(), self.sim_next_at()) else {
            return false;
        };
        let mut group = Vec::new();
        let mut sealed = Vec::new();
        while group.len() < self.group {
            match self.sim.inbox.front() {
                Some((t, _)) if group.is_empty() || *t <= at => {}
                _ => break,
            }
            let Some((t, page)) = self.sim.inbox.pop_front() else {
                break;
            };
            sealed.push(t);
            group.push(page);
        }
        let caller = clock.now_ns();
        clock.set_ns(at);
        self.place_group(core, &mut group);
        // What the placer did not take goes back to the inbox's front with its seal time.
        let skip = sealed.len() - group.len();
        for (t, page) in sealed[skip..].iter().zip(group).rev() {
            self.sim.inbox.push_front((*t, page));
        }
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
            // The GC workers act up to the time this writer places its next page at, as they
            // would beside it while the host waits (`Core::sim_yield`).
            if let (Some(at), Some(clock)) = (self.sim_next_at(), core.nand.sim_clock()) {
                let caller = clock.now_ns();
                clock.set_ns(at);
                core.sim_yield();
                clock.set_ns(caller);
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

    /// Programs a prefix of `pages` (sealed in this order; at least the first page) where the
    /// placer says: one page, or one page per plane of a bank as a multi-plane program, and
    /// takes it out of `pages`. What stays is for the next group.
    fn place_group(&mut self, core: &Core, pages: &mut Vec<SealedPage>) {
        // A wait in here (a drain of the programs in flight, the placer's foreground or paced
        // GC, a merge) holds the writer: nothing it programs afterwards may be dated earlier.
        let waited_before = nand_model::last_wait_end_ns();
        loop {
            if core.writers_gone() {
                // Power cut: the pages are lost, as everything not yet programmed.
                pages.clear();
                return;
            }
            if core.is_read_only()
                && !(core.programs_acknowledged() && self.placer.programs_after_turn())
            {
                self.drop_read_only(core, pages);
                return;
            }
            let target = {
                // GC the placer runs for these pages (in-path or foreground steps) counts from
                // their arrival, and each dependent operation from the modelled end of the one
                // it waited for (`nand_model::ArrivalScope`), so the thread's wake-ups between
                // a step's operations are not added to the device's time.
                let _arrival = nand_model::ArrivalScope::enter(self.arrival(pages));
                self.placer.target_group(core, pages)
            };
            let addrs: &[PageAddr] = match &target {
                Target::Program(addr) => std::slice::from_ref(addr),
                Target::Planes(addrs) => addrs,
                Target::Drain => {
                    self.commit_done(core, true);
                    continue;
                }
                // Read-only, and (for a placer that programs after the turn) nothing erased
                // left to place them in. (A power cut, or a placer giving up before the
                // device turned: the loop's top decides.)
                Target::ReadOnly => {
                    if core.writers_gone() || !core.is_read_only() {
                        continue;
                    }
                    self.drop_read_only(core, pages);
                    return;
                }
            };
            debug_assert!(addrs.len() <= pages.len(), "more addresses than pages");
            let n = addrs
                .len()
                .clamp(1, pages.len())
                .min(nand_model::MAX_PLANES as usize);
            for (i, page) in pages[..n].iter().enumerate() {
                self.encode_oob(i, page);
            }
            // The program counts from when its pages were sealed (or the in-flight window
            // opened, or a wait in here ended), not from when this thread woke up to issue it.
            let waited = nand_model::last_wait_end_ns();
            if waited != waited_before {
                self.gate_ns = self.gate_ns.max(waited);
            }
            let arrival = self.arrival(&pages[..n]);
            let programmed = {
                // Each page's data is its slots' own buffers (a padding slot: zeroes), copied
                // into the page without being assembled here first. Inline up to a 32 KiB page
                // in two planes (this runs for every page programmed).
                const MAX: usize = nand_model::MAX_PLANES as usize;
                let parts: SmallVec<[&[u8]; 16]> = pages[..n]
                    .iter()
                    .flat_map(|p| &p.slots)
                    .map(slot_data)
                    .collect();
                let mut ops: [PlaneProgram<'_>; MAX] = [(addrs[0], &[], &[]); MAX];
                let mut from = 0;
                for (i, (page, &addr)) in pages[..n].iter().zip(addrs).enumerate() {
                    let to = from + page.slots.len();
                    ops[i] = (addr, &parts[from..to], self.oob[i].as_slice());
                    from = to;
                }
                let _arrival = nand_model::ArrivalScope::enter(arrival);
                core.nand.program_planes_parts(&ops[..n])
            };
            match programmed {
                Ok(done) => {
                    self.placer.issued(core, addrs, true);
                    core.counters
                        .page_programs
                        .fetch_add(n as u64, Ordering::Relaxed);
                    if n > 1 {
                        core.counters
                            .multi_plane_programs
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    let group = pages.drain(..n).zip(addrs.iter().copied());
                    if core.nand.sim_clock().is_some() {
                        // Virtual time: the commit time is kept, the pages commit now.
                        self.sim.programmed(done.deadline_ns(), n);
                        drop(done);
                        for (page, addr) in group {
                            self.commit(core, page, addr);
                        }
                    } else if done.is_complete() && self.inflight.is_empty() {
                        for (page, addr) in group {
                            self.commit(core, page, addr);
                        }
                    } else {
                        self.inflight.push_back(InFlight {
                            pages: group.collect(),
                            done,
                        });
                    }
                    return;
                }
                Err(e) if e.is_fault() => {
                    // Every page of the program that failed (the first alone for a fault
                    // other than a program failure).
                    let mask = match e {
                        NandError::ProgramFailed { failed_mask, .. } => failed_mask,
                        _ => 1,
                    };
                    let failed: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
                    let failed = if failed.is_empty() { vec![0] } else { failed };
                    for &i in &failed {
                        tracing::warn!("program failed at {}: {e}; retiring the block", addrs[i]);
                    }
                    core.counters
                        .program_failures
                        .fetch_add(failed.len() as u64, Ordering::Relaxed);
                    // Everything already programmed in the blocks must be committed before GC
                    // may move it out.
                    self.commit_done(core, true);
                    // Every page of the group is programmed again: the intact copies its
                    // plane-mates left carry the same LPN, sequence number and data, are never
                    // mapped, and GC treats them as invalid. Each failed page's block is
                    // retired.
                    for i in failed {
                        self.placer.failed(core, &pages[i], addrs[i]);
                    }
                    self.placer.issued(core, addrs, false);
                }
                Err(e) => {
                    core.set_read_only_after(&e, format!("program at {} failed: {e}", addrs[0]));
                    // Nothing was stored: the placer releases what it held for the
                    // addresses (its open-page count, a lent frontier). Its frontier stays
                    // past them, so nothing may be programmed after this on the device: a
                    // turn of another kind ends the programs a wear turn allowed
                    // (`Core::set_read_only_as`; the test
                    // `a_full_file_system_after_a_wear_turn_ends_its_programs` sees the
                    // out-of-order programs without that), and the pages are dropped.
                    self.placer.issued(core, addrs, false);
                    if core.writers_gone() {
                        pages.clear();
                    } else {
                        self.drop_read_only(core, pages);
                    }
                    return;
                }
            }
        }
    }

    /// The device is read-only and `pages` will not be programmed: they count as committed
    /// (their waiters go on; the data stays readable from the overlay until the stop, and a
    /// flush reports the error), and as dropped, which the stop reports (`Ftl::close`).
    fn drop_read_only(&mut self, core: &Core, pages: &mut Vec<SealedPage>) {
        // Programs still in flight commit first: the queue's committed count may not pass
        // pages not yet in the map (a flush or a checkpoint waiting on it would count them).
        self.commit_done(core, true);
        core.counters
            .pages_dropped_read_only
            .fetch_add(pages.len() as u64, Ordering::Relaxed);
        let queue = &core.queues[self.q];
        queue
            .committed
            .fetch_add(pages.len() as u64, Ordering::AcqRel);
        queue.progress.notify_all();
        pages.clear();
    }

    /// When work for `pages` may start on the device: the latest of their seal times and the
    /// writer's gate (see `gate_ns`).
    fn arrival(&self, pages: &[SealedPage]) -> u64 {
        pages
            .iter()
            .map(|p| p.sealed_ns)
            .max()
            .unwrap_or(0)
            .max(self.gate_ns)
    }

    /// Encodes the page's OOB into scratch buffer `i`.
    fn encode_oob(&mut self, i: usize, page: &SealedPage) {
        self.metas.clear();
        self.metas.extend(page.slots.iter().map(|(meta, _)| *meta));
        oob::encode_data(&mut self.oob[i], &self.metas);
    }
}

/// What a padding slot (no data) is programmed as.
static ZERO_SLOT: [u8; LOGICAL_PAGE] = [0; LOGICAL_PAGE];

/// A sealed slot's bytes as programmed (a padding slot: zeroes).
fn slot_data((_, data): &(SlotMeta, Option<PageData>)) -> &[u8] {
    data.as_deref().unwrap_or(&ZERO_SLOT)
}

/// Counts a sealed page's host data slots (once, however often the page is programmed).
fn count_host_slots(core: &Core, page: &SealedPage) {
    let n = page
        .slots
        .iter()
        .filter(|(meta, _)| meta.kind == SlotKind::Data)
        .count();
    core.counters
        .host_slots_programmed
        .fetch_add(n as u64, Ordering::Relaxed);
}
