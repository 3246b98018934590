//! A queue's writer thread: places sealed pages on banks and commits them into the map.
//!
//! Each writer owns one open block (its *write frontier*) per bank, as paper 000's workers own
//! their working blocks: no other thread ever programs into it, so sequential programming inside
//! a block holds under any scheduling. A page goes to the least busy bank that is not under
//! exclusive GC (LFTL §3.2.2). The writer keeps several programs in flight (one per bank, banks
//! work in parallel) and commits them in FIFO order once their modelled completion time passed.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use nand_model::{BankId, BlockAddr, Completion, PageAddr};

use crate::buffer::{SealedPage, WriterMsg};
use crate::config::GcPolicy;
use crate::core::{Core, GC_RESERVE};
use crate::layout::LOGICAL_PAGE;
use crate::oob::{self, SlotKind, SlotMeta};

/// An open block and its next free page.
#[derive(Clone, Copy, Debug)]
pub struct Frontier {
    pub block: u32,
    pub next: u32,
}

struct InFlight {
    page: SealedPage,
    addr: PageAddr,
    done: Completion,
}

/// A queue's writer: its frontiers and its in-flight programs. Owned by the queue's writer
/// thread (timing `real`) or, with timing `off` where programs complete at once, kept in the
/// queue and run by whichever thread seals a page (under the queue's open-page lock).
pub struct Writer {
    q: usize,
    frontiers: Vec<Option<Frontier>>,
    inflight: VecDeque<InFlight>,
    rr: u32,
    data: Vec<u8>,
    oob: Vec<u8>,
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
    pub fn new(layout: &crate::layout::Layout, q: usize) -> Writer {
        Writer {
            q,
            frontiers: vec![None; layout.banks as usize],
            inflight: VecDeque::new(),
            rr: q as u32,
            data: vec![0; layout.page_size as usize],
            oob: vec![0; layout.oob_size as usize],
        }
    }
}

/// The writer thread's body.
pub fn run(core: Arc<Core>, q: usize, rx: Receiver<WriterMsg>) {
    precise_timers();
    let layout = core.layout;
    let mut w = Writer::new(&layout, q);
    let max_inflight = layout.banks as usize * 2;
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

    fn commit(&self, core: &Core, page: SealedPage, addr: PageAddr) {
        core.commit_page(&page, addr);
        if addr.page + 1 == core.layout.pages_per_block {
            core.mark_full(addr.block.bank.0, addr.block.block);
        }
        let queue = &core.queues[self.q];
        queue.committed.fetch_add(1, Ordering::AcqRel);
        queue.progress.notify(usize::MAX);
    }

    /// Picks a bank for the next page: idle first, then the one that frees up soonest; banks
    /// under exclusive GC only if nothing else can take the page.
    fn choose_bank(&mut self, core: &Core, may_use_reserve: bool) -> Option<u32> {
        let n = core.layout.banks;
        let mut best: Option<(bool, Option<Instant>, u32)> = None;
        for i in 0..n {
            let b = (self.rr + i) % n;
            let floor = if may_use_reserve { 0 } else { GC_RESERVE };
            let has_room = self.frontiers[b as usize].is_some()
                || core.bank(b).free.load(Ordering::Acquire) > floor;
            if !has_room {
                continue;
            }
            let exclusive = core.bank(b).exclusive_gc.load(Ordering::Acquire);
            let load = core.nand.bank_load(BankId(b));
            let busy = load.busy_until.filter(|t| *t > Instant::now());
            let key = (exclusive, busy, b);
            let better = match &best {
                None => true,
                Some((be, bb, _)) => (exclusive, busy) < (*be, *bb),
            };
            if better {
                best = Some(key);
            }
            if !exclusive && busy.is_none() {
                break;
            }
        }
        let b = best?.2;
        self.rr = (b + 1) % n;
        Some(b)
    }

    pub fn place(&mut self, core: &Core, page: SealedPage) {
        self.fill(core, &page);
        let has_trims = !page.zombies.is_empty();
        // Consecutive rounds in which no bank could take the page and GC reclaimed nothing.
        let mut stuck = 0u32;
        loop {
            if core.read_only_reason().is_some() {
                // The data stays readable from the overlay until restart; flush reports the error.
                let queue = &core.queues[self.q];
                queue.committed.fetch_add(1, Ordering::AcqRel);
                queue.progress.notify(usize::MAX);
                return;
            }
            let Some(b) = self.choose_bank(core, has_trims) else {
                // Every bank is at its GC reserve: clean in the foreground until a block frees.
                if core.foreground_gc() {
                    stuck = 0;
                } else {
                    // Reclaimable space may sit in other writers' open blocks: give them time.
                    stuck += 1;
                    if stuck > 2000 {
                        core.set_read_only("no free blocks left and nothing to reclaim".into());
                    }
                    std::thread::sleep(std::time::Duration::from_micros(500));
                }
                continue;
            };
            if core.cfg.gc_policy == GcPolicy::InPath {
                core.in_path_gc(b);
            }
            let fr = match self.frontiers[b as usize] {
                Some(f) => f,
                // A page carrying trim records may use GC's reserve: the records free the
                // space they unmap only once they are on flash.
                None => match core.alloc_block(
                    b,
                    has_trims && core.bank(b).free.load(Ordering::Acquire) > 0,
                ) {
                    Some(block) => Frontier { block, next: 0 },
                    None => continue,
                },
            };
            let addr = PageAddr {
                block: BlockAddr {
                    bank: BankId(b),
                    block: fr.block,
                },
                page: fr.next,
            };
            let bytes = single_slot(&page).unwrap_or(&self.data);
            let result = core.nand.program(addr, bytes, &self.oob);
            let next = Frontier {
                block: fr.block,
                next: fr.next + 1,
            };
            self.frontiers[b as usize] = (next.next < core.layout.pages_per_block).then_some(next);
            match result {
                Ok(done) => {
                    core.counters.page_programs.fetch_add(1, Ordering::Relaxed);
                    if done.is_complete() && self.inflight.is_empty() {
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
                    self.frontiers[b as usize] = None;
                    core.retire_block(b, fr.block);
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
