//! A step of a logical block's job (RFTL §4.4): at most `beta` page copies, or one erase;
//! the end of a job; and compaction, which runs a job to its end at once.
//!
//! A step holds its logical block's lock (nothing of it in flight: the writer drained) and
//! `gc_gate` shared, so a checkpoint never sees a step half published. Copies keep each
//! slot's sequence number and CRC (recovery resolves them as GC copies; a slot whose data
//! fails its check is copied as read, and stays detectably bad) and are published under the
//! stripes once programmed; a slot the host rewrote or trimmed meanwhile keeps its new state.

use std::sync::atomic::Ordering;

use super::lbn::{Blk, JobKind, LbnState};
use super::RftlScheme;
use crate::core::Core;
use crate::layout::{BlockIdx, Lpn, Psa};
use crate::schemes::block_ops::{self, PageCopier, Released};

/// What a step did.
enum Stepped {
    /// The job goes on.
    More,
    /// The job's copies and erases are done.
    Done,
    /// The job cannot go on into its destination: the logical block is compacted into a
    /// fresh block (`Some`: a program into this block failed, it is retired).
    Stuck(Option<BlockIdx>),
}

impl RftlScheme {
    /// A free block, preferring bank `bank` (from the pool every logical block's three come
    /// from: the format keeps three per logical block).
    pub(super) fn alloc(&self, core: &Core, bank: u32) -> Option<BlockIdx> {
        let b = block_ops::alloc_near(core, self.layout, bank, true);
        // After a wear turn only the page asking is dropped (the others may still have room).
        if b.is_none() && block_ops::Placing::now(core) != block_ops::Placing::AfterWearTurn {
            core.set_read_only(
                "no free block for a logical block's primary, buffer or replacement".into(),
            );
        }
        b
    }

    /// Runs one step of `lbn`'s job, if it has one. The caller holds `lbn`'s lock with none
    /// of its pages in flight.
    pub(super) fn step(&self, core: &Core, lbn: u32, st: &mut LbnState) {
        if st.job.is_none() {
            return;
        }
        let t0 = core.now_ns();
        match self.step_job(core, lbn, st) {
            Stepped::More => {}
            Stepped::Done => self.end_job(core, lbn, st),
            Stepped::Stuck(retire) => self.compact(core, lbn, st, retire),
        }
        self.counters.step_latency.record(core.since(t0));
    }

    /// Compacts `lbn` (see `lbn.rs`): every current page into a fresh block, every other
    /// block erased (`retire`: marked bad), at once. The caller holds `lbn`'s lock with none of
    /// its pages in flight.
    pub(super) fn compact(
        &self,
        core: &Core,
        lbn: u32,
        st: &mut LbnState,
        retire: Option<BlockIdx>,
    ) {
        self.compact_with(core, lbn, st, retire, &[]);
    }

    /// [`Self::compact`], taking `extra` blocks along (blocks of the logical block that
    /// recovery found beside the roles it could give).
    pub(super) fn compact_with(
        &self,
        core: &Core,
        lbn: u32,
        st: &mut LbnState,
        mut retire: Option<BlockIdx>,
        mut extra: &[Blk],
    ) {
        let ppb = self.layout.pages_per_block;
        loop {
            if core.read_only_reason().is_some() {
                return;
            }
            let Some(fresh) = self.alloc(core, self.plan.home(lbn)) else {
                return;
            };
            st.start_compact(fresh, retire, ppb, extra);
            // A later attempt finds them among the failed attempt's sources.
            extra = &[];
            loop {
                match self.step_job(core, lbn, st) {
                    Stepped::More => {}
                    Stepped::Done => {
                        self.end_job(core, lbn, st);
                        return;
                    }
                    Stepped::Stuck(failed) => {
                        retire = failed.or(retire);
                        break;
                    }
                }
                if core.read_only_reason().is_some() {
                    return;
                }
            }
        }
    }

    /// One step: copies if the job's sources still hold current slots, else an erase.
    fn step_job(&self, core: &Core, lbn: u32, st: &mut LbnState) -> Stepped {
        let _gc = core.gc_gate.read();
        let ppb = self.layout.pages_per_block;
        let Some(mut job) = st.job.take() else {
            return Stepped::Done;
        };
        // The first step fixes what a source holds: every page placed in it so far (the
        // writer committed them all before the step).
        for (b, lim) in &mut job.sources {
            if lim.is_none() {
                let placed = st.roles().find(|x| x.block == *b).map_or(ppb, |x| x.next);
                *lim = Some(placed);
            }
        }
        job.steps += 1;
        core.counters.gc_steps.fetch_add(1, Ordering::Relaxed);
        let cands = self.candidates(lbn, &job);
        let dest = job.dest;
        let outcome = if !cands.is_empty() {
            let Some(to) = st.dest_mut(dest) else {
                // Not reachable (every job is made with its destination); compacting keeps
                // the data rather than orphaning the blocks.
                tracing::error!("rftl: logical block {lbn}'s job has no destination: {job:?}");
                st.job = Some(job);
                return Stepped::Stuck(None);
            };
            match self.copy_step(core, &cands, to) {
                Ok(n) => {
                    self.counters.copy_steps.fetch_add(1, Ordering::Relaxed);
                    self.counters.pages_copied.fetch_add(n, Ordering::Relaxed);
                    Stepped::More
                }
                Err(failed) => Stepped::Stuck(failed),
            }
        } else if let Some(&(b, bad)) = job.erase.first() {
            self.counters.erase_steps.fetch_add(1, Ordering::Relaxed);
            // The step ends with its erase: the next host page of any logical block then finds
            // the bank free, so no write waits for more than one step (Table 2's L(p)).
            match block_ops::release_emptied(core, self.layout, &self.map, b, bad, true) {
                Released::Erased => {
                    self.counters.erases.fetch_add(1, Ordering::Relaxed);
                }
                Released::Bad => {}
                // Slots in it are still held: a trim record that cannot be written (the
                // device is read-only), or, at open, another logical block's current slots
                // (a block a crash or a hostile image left shared; that block's compaction
                // erases it). It leaves this logical block; a block left holding only
                // stale slots is erased at the next open.
                Released::Held => {}
            }
            job.erase.remove(0);
            if job.erase.is_empty() {
                Stepped::Done
            } else {
                Stepped::More
            }
        } else {
            Stepped::Done
        };
        if job.kind != JobKind::Compact {
            // The budget bounds folds and shifts; a compaction runs at once, not a step a write.
            self.counters
                .max_job_steps
                .fetch_max(u64::from(job.steps), Ordering::Relaxed);
        }
        st.job = Some(job);
        outcome
    }

    /// The job's copies and erases are done: the roles change (`lbn.rs`).
    fn end_job(&self, core: &Core, lbn: u32, st: &mut LbnState) {
        let Some(kind) = st.job.as_ref().map(|j| j.kind) else {
            return;
        };
        match kind {
            JobKind::Fold => {
                self.counters.folds.fetch_add(1, Ordering::Relaxed);
                let home = self.plan.home(lbn);
                let primary_bank = st.replacement.map(|r| self.bank_of(r.block));
                let fresh = self.alloc(core, self.plan.log_bank(primary_bank, home));
                if !st.end_fold(fresh) && fresh.is_none() {
                    // No block for the next buffer (read-only now): the old one stays.
                    st.job = None;
                }
            }
            JobKind::Shift => {
                self.counters.shifts.fetch_add(1, Ordering::Relaxed);
                st.job = None;
            }
            JobKind::Compact => {
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                st.primary = st.replacement.take();
                st.job = None;
            }
        }
    }

    /// The current slots of `lbn` that the job moves, in the order they were written.
    fn candidates(&self, lbn: u32, job: &super::lbn::Job) -> Vec<(Psa, Lpn)> {
        let first = lbn * self.spb;
        let end = (first + self.spb).min(self.lpns);
        let mut v: Vec<(Psa, Lpn)> = (first..end)
            .filter_map(|l| {
                let psa = self.map.get(Lpn(l))?;
                let (page, _) = self.layout.split(psa);
                job.covers(self.layout.block_of(psa), page.page)
                    .then_some((psa, Lpn(l)))
            })
            .collect();
        v.sort_unstable_by_key(|(p, _)| p.0);
        v
    }

    /// Copies up to `beta` pages' worth of `cands` into the next pages of `to`, then
    /// publishes the copies. Returns the slots moved; `Err` if the copies cannot go on in `to`
    /// (the pages copied by this step are not published): `Some(to)` if a program into it
    /// failed, `None` if it is full.
    fn copy_step(
        &self,
        core: &Core,
        cands: &[(Psa, Lpn)],
        to: &mut Blk,
    ) -> Result<u64, Option<BlockIdx>> {
        let layout = self.layout;
        let sps = layout.slots_per_page as usize;
        let pages = (self.budget.beta).min(to.free(layout.pages_per_block)) as usize;
        if pages == 0 {
            // The budget keeps a destination from filling up; a compaction has a fresh one.
            tracing::error!("rftl: copy destination {to:?} is full");
            return Err(None);
        }
        let take = cands.len().min(pages * sps);
        let mut copier = PageCopier::new(layout);
        for chunk in cands[..take].chunks(sps) {
            let addr = self.addr(to.block, to.next);
            let sources: Vec<_> = chunk.iter().map(|&(src, lpn)| Some((lpn, src))).collect();
            to.take_next(core, layout);
            if copier.copy_page(core, layout, addr, &sources).is_err() {
                return Err(Some(to.block));
            }
        }
        Ok(copier.publish(core, &self.map))
    }
}
