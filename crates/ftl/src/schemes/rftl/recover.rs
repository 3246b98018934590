//! RFTL's rebuild after recovery: versions are resolved by the page scheme's rules (highest
//! sequence number wins; copies keep it), then each logical block's roles are derived from
//! where its current versions are:
//!
//! - in one block: that block is the **primary** (the host appends after its last programmed
//!   page);
//! - in two blocks: the one with more free pages is the **buffer**, the other the primary,
//!   if the buffer still has room for a fold (`k_fold` free pages: Theorem 4.1);
//! - otherwise (three blocks: a job a crash or a close left under way; a buffer too full; a
//!   block holding pages of several logical blocks, which RFTL never writes) the logical block
//!   is **compacted** at open: every current page into a fresh block, the others erased;
//! - blocks with trim records still live are journal blocks; programmed blocks holding
//!   nothing current are erased.
//!
//! A job under way survives a clean close: the checkpoint holds it (`saved.rs`), and the
//! open takes it back once it checks out against the medium and the map
//! ([`RftlScheme::take_saved`]). After a crash, or where it does not check out, the logical
//! block is rebuilt as above (compacted: at most a block's copies).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::lbn::{Blk, Dest, Job, JobKind, LbnState};
use super::{saved, RftlScheme};
use crate::blocks::BlockState;
use crate::core::Core;
use crate::error::Result;
use crate::layout::{BlockIdx, Lpn};
use crate::schemes::block_ops::{self, Journal};

impl RftlScheme {
    /// `saved`: the checkpoint's jobs, on a clean open (empty otherwise).
    pub(super) fn rebuild_roles(&self, core: &Core, saved: &[u32]) -> Result<()> {
        let layout = self.layout;
        let ppb = layout.pages_per_block;
        let at = self.pages_at();
        let (blocks_of, mixed, journal) = (&at.blocks_of, &at.mixed, &at.journal);
        let placed = |b: BlockIdx| {
            core.nand
                .block_state(layout.block_addr(b))
                .map_or(ppb, |s| s.programmed_pages)
        };
        // A read-only device steps no job: it keeps the rebuild it always had.
        let mut saved = match saved::decode(saved, self.lbns) {
            _ if core.read_only_reason().is_some() => BTreeMap::new(),
            Some(v) => v.into_iter().collect(),
            None => {
                tracing::warn!(
                    "recovery: the checkpoint's RFTL jobs do not parse; their logical blocks are \
                     rebuilt as after a crash"
                );
                BTreeMap::new()
            }
        };
        // A role block with room is open, else full.
        let mark_roles = |st: &LbnState| {
            for blk in st.roles() {
                let state = if blk.next < ppb {
                    BlockState::Open
                } else {
                    BlockState::Full
                };
                self.set_block_state(core, blk.block, state);
            }
        };
        let offered = saved.len();
        let mut claimed: HashSet<BlockIdx> = HashSet::new();
        let mut taken = 0u64;
        let mut compact: Vec<(u32, Vec<Blk>)> = Vec::new();
        for (&lbn, blocks) in blocks_of {
            if let Some(st) = saved.remove(&lbn) {
                match self.take_saved(core, lbn, &st, &at, &claimed) {
                    Ok(()) => {
                        // A role with no page yet (a shift's fresh buffer before its first
                        // step) is an erased block recovery put in the free list: it is
                        // this logical block's again.
                        for blk in st.roles() {
                            if blk.next == 0 {
                                let addr = layout.block_addr(blk.block);
                                let mut a = core.bank(addr.bank.0).alloc.lock();
                                // (`take_saved` found it free.)
                                let taken = a.take_free(addr.block);
                                debug_assert!(taken, "{addr:?} was not free");
                                core.update_free(addr.bank.0, a.free_len());
                            }
                        }
                        mark_roles(&st);
                        claimed.extend(st.blocks());
                        *self.state[lbn as usize].lock() = st;
                        taken += 1;
                        continue;
                    }
                    Err(why) => tracing::debug!(
                        "recovery: logical block {lbn}'s saved job not taken: {why}"
                    ),
                }
            }
            let blks: Vec<Blk> = blocks
                .iter()
                .map(|&b| Blk {
                    block: b,
                    next: placed(b),
                })
                .collect();
            let mut st = LbnState::default();
            match blks.as_slice() {
                [p] if !mixed.contains(&lbn) => st.primary = Some(*p),
                [x, y] if !mixed.contains(&lbn) => {
                    let (p, b) = if y.free(ppb) >= x.free(ppb) {
                        (*x, *y)
                    } else {
                        (*y, *x)
                    };
                    if b.free(ppb) >= self.budget.k_fold {
                        st.primary = Some(p);
                        st.buffer = Some(b);
                    } else {
                        compact.push((lbn, blks.clone()));
                    }
                }
                _ => compact.push((lbn, blks.clone())),
            }
            mark_roles(&st);
            *self.state[lbn as usize].lock() = st;
        }
        {
            let mut j = self.journal.lock();
            j.open = None;
            j.closed = journal.iter().map(|b| (*b, false)).collect();
        }
        self.counters
            .jobs_resumed
            .fetch_add(taken, std::sync::atomic::Ordering::Relaxed);
        if offered > 0 {
            // What is left in `saved` are jobs of logical blocks with no current page (trimmed
            // whole while the job was under way): nothing to take back, and their blocks are
            // erased below like any block that holds nothing current.
            let emptied = saved.len();
            let refused = offered - emptied - taken as usize;
            tracing::info!(
                "recovery: {taken} of the {offered} RFTL jobs the close left under way taken \
                 back ({emptied} of logical blocks trimmed whole, nothing to take back; {refused} that did not \
                 agree with the medium, rebuilt as after a crash)"
            );
        }
        if !compact.is_empty() {
            tracing::info!(
                "recovery: compacting {} logical blocks left mid-job or in a shape RFTL does not write",
                compact.len()
            );
        }
        for (lbn, blks) in compact {
            let mut st = LbnState::default();
            self.compact_with(core, lbn, &mut st, None, &blks);
            *self.state[lbn as usize].lock() = st;
        }
        // Programmed blocks that hold nothing current and belong to no one (a job's source
        // the crash kept from being erased, a half-written copy) are erased.
        let mut owned: HashSet<BlockIdx> = journal.clone();
        for st in self.state.iter() {
            owned.extend(st.lock().blocks());
        }
        for b in 0..layout.total_blocks() {
            let b = BlockIdx(b);
            if owned.contains(&b) || self.block_state(core, b) != BlockState::Full {
                continue;
            }
            if self.map.valid_bits(b) == 0 {
                block_ops::release_emptied(core, layout, &self.map, b, false, false);
            }
        }
        Ok(())
    }

    /// Where the current pages are, as the map says after recovery.
    fn pages_at(&self) -> PagesAt {
        let layout = self.layout;
        let mut lbns_in: BTreeMap<BlockIdx, BTreeSet<u32>> = BTreeMap::new();
        for l in 0..self.lpns {
            if let Some(psa) = self.map.get(Lpn(l)) {
                lbns_in
                    .entry(layout.block_of(psa))
                    .or_default()
                    .insert(self.lbn_of(Lpn(l)));
            }
        }
        let journal = Journal::live_blocks(&self.map, layout);
        let mut blocks_of: BTreeMap<u32, Vec<BlockIdx>> = BTreeMap::new();
        let mut mixed: BTreeSet<u32> = BTreeSet::new();
        for (b, lbns) in &lbns_in {
            if journal.contains(b) {
                continue;
            }
            if lbns.len() > 1 {
                mixed.extend(lbns.iter().copied());
            }
            for &l in lbns {
                blocks_of.entry(l).or_default().push(*b);
            }
        }
        PagesAt {
            lbns_in,
            journal,
            blocks_of,
            mixed,
        }
    }

    /// Whether logical block `lbn`'s saved state `st` may be taken back: it keeps the
    /// scheme's rules, names only good blocks that hold no other logical block's current
    /// pages, no trim journal's and none another taken state has (`claimed`), with every
    /// role's next page where the medium's block table says (a role with no page yet, a
    /// shift's fresh buffer, is a free block; any other block is programmed), every fixed
    /// source limit within what is programmed, and every block holding a current page of
    /// `lbn` among its own. A fold copies into its replacement, a shift into its buffer.
    fn take_saved(
        &self,
        core: &Core,
        lbn: u32,
        st: &LbnState,
        at: &PagesAt,
        claimed: &HashSet<BlockIdx>,
    ) -> std::result::Result<(), String> {
        let layout = self.layout;
        let ppb = layout.pages_per_block;
        self.lbn_rules(lbn, st, true)?;
        if at.mixed.contains(&lbn) {
            return Err("a block of it holds other logical blocks' pages".into());
        }
        job_shape(st)?;
        let job = st.job.as_ref().ok_or("no job")?;
        let mine = st.blocks();
        let mut programmed = std::collections::HashMap::new();
        for &b in &mine {
            if b.0 >= layout.total_blocks() {
                return Err(format!("block {} past the device", b.0));
            }
            let addr = layout.block_addr(b);
            if layout.is_reserved(addr) {
                return Err(format!("block {} is reserved", b.0));
            }
            let s = core
                .nand
                .block_state(addr)
                .map_err(|e| format!("block {}: {e}", b.0))?;
            let fresh_role = st.roles().any(|r| r.block == b && r.next == 0);
            if s.bad {
                return Err(format!("block {} is bad", b.0));
            }
            if s.programmed_pages == 0
                && !(fresh_role
                    && core.bank(addr.bank.0).alloc.lock().state[addr.block as usize]
                        == BlockState::Free)
            {
                return Err(format!("block {} is erased and not a free role block", b.0));
            }
            if at.journal.contains(&b) || claimed.contains(&b) {
                return Err(format!("block {} belongs to another", b.0));
            }
            if at
                .lbns_in
                .get(&b)
                .is_some_and(|ls| ls.iter().any(|&l| l != lbn))
            {
                return Err(format!("block {} holds another logical block's pages", b.0));
            }
            programmed.insert(b, s.programmed_pages);
        }
        for blk in st.roles() {
            if programmed.get(&blk.block) != Some(&blk.next) {
                return Err(format!(
                    "{blk:?}: the medium has {:?} pages programmed",
                    programmed.get(&blk.block)
                ));
            }
        }
        for (b, lim) in &job.sources {
            if let Some(l) = lim {
                if programmed.get(b).is_none_or(|p| l > p) {
                    return Err(format!("source {} limited past what it holds", b.0));
                }
            }
        }
        let current = at.blocks_of.get(&lbn).map_or(&[][..], |v| &v[..]);
        if let Some(b) = current.iter().find(|b| !mine.contains(b)) {
            return Err(format!(
                "block {} holds its pages and is not one of its own",
                b.0
            ));
        }
        // A block the job erases holds no current page the job does not move: its erase
        // would find it held, and the page would leave its logical block's blocks.
        // The sources' limits as the job's first step fixes them, to count what is left.
        let mut fixed = job.clone();
        for (b, lim) in &mut fixed.sources {
            if lim.is_none() {
                *lim = Some(st.roles().find(|x| x.block == *b).map_or(ppb, |x| x.next));
            }
        }
        let mut left = 0u32;
        let first = lbn * self.spb;
        for l in first..(first + self.spb).min(self.lpns) {
            let Some(psa) = self.map.get(Lpn(l)) else {
                continue;
            };
            let (b, page) = (layout.block_of(psa), layout.split(psa).0.page);
            if job.erase.iter().any(|(e, _)| *e == b) && !job.covers(b, page) {
                return Err(format!(
                    "lpn {l} in block {} to erase is not among what the job moves",
                    b.0
                ));
            }
            left += u32::from(fixed.covers(b, page));
        }
        self.budget_left(st, job, left)
    }

    /// Whether a saved job can end within its budget, as one that never stopped does: a
    /// fold starts on a full primary, its replacement holds only its copies (at most `beta`
    /// a step) and a shift's buffer at most those and a host page a step (and the one that
    /// ended the fold); the `left` slots
    /// still to move, then the erase, fit in the steps the job has left; the destination has
    /// room for them; and a shift's buffer still keeps `k_fold` free pages for the next fold
    /// after the host pages of those steps. A forged count of steps, a destination holding
    /// pages that are not its copies, or a fold on a primary the host still writes would
    /// otherwise make a write wait for more than a step, or the job run out of room.
    fn budget_left(&self, st: &LbnState, job: &Job, left: u32) -> std::result::Result<(), String> {
        let (ppb, sps) = (self.layout.pages_per_block, self.layout.slots_per_page);
        let k = &self.budget;
        let dest = st.dest(job.dest).ok_or("no destination")?;
        let (budget, most_placed) = match job.kind {
            JobKind::Fold => {
                if st.primary.is_none_or(|p| p.next != ppb) {
                    return Err("a fold on a primary that is not full".into());
                }
                (k.k_fold, job.steps.saturating_mul(k.beta))
            }
            // The page whose step ended the fold may go to the fresh buffer without a step
            // of the shift (the replacement it became the primary is full).
            JobKind::Shift => (
                k.k_shift,
                job.steps.saturating_mul(k.beta + 1).saturating_add(1),
            ),
            JobKind::Compact => return Err("a compaction".into()),
        };
        if dest.next > most_placed {
            return Err(format!(
                "its destination holds {} pages after {} steps",
                dest.next, job.steps
            ));
        }
        let pages = left.div_ceil(sps);
        let steps_left = pages.div_ceil(k.beta) + job.erase.len() as u32;
        if job.steps.saturating_add(steps_left) > budget {
            return Err(format!(
                "{} steps done and {steps_left} to come, past the budget of {budget}",
                job.steps
            ));
        }
        let room = match job.kind {
            JobKind::Shift => pages + steps_left + k.k_fold,
            _ => pages,
        };
        if dest.free(ppb) < room {
            return Err(format!(
                "its destination has {} free pages, {room} needed",
                dest.free(ppb)
            ));
        }
        Ok(())
    }
}

/// A saved job has a shape `lbn.rs` makes, and only that: a fold (`start_fold`) holds a
/// primary, a buffer and a replacement, copies the primary (up to its next page) and the
/// buffer's prefix into the replacement and erases the primary; a shift (`end_fold`) holds a
/// primary and a buffer and no replacement, copies an old buffer that is no role into the
/// buffer and erases it. Roles are distinct blocks, and nothing is to be retired (only a
/// compaction retires a block, and it runs to its end at once).
fn job_shape(st: &LbnState) -> std::result::Result<(), String> {
    let job = st.job.as_ref().ok_or("no job")?;
    let roles: Vec<BlockIdx> = st.roles().map(|b| b.block).collect();
    let mut distinct = roles.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != roles.len() {
        return Err("two roles in one block".into());
    }
    let ok = match (job.kind, st.primary, st.buffer, st.replacement) {
        (JobKind::Fold, Some(p), Some(b), Some(_)) => {
            job.dest == Dest::Replacement
                && job.sources.len() == 2
                && job.sources[0] == (p.block, Some(p.next))
                && job.sources[1].0 == b.block
                && job.sources[1].1.is_none_or(|l| l <= b.next)
                && job.erase == [(p.block, false)]
        }
        (JobKind::Shift, Some(_), Some(_), None) => {
            job.dest == Dest::Buffer
                && job.sources.len() == 1
                && job.sources[0].1.is_some()
                && !roles.contains(&job.sources[0].0)
                && job.erase == [(job.sources[0].0, false)]
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("not a shape a fold or shift has: {st:?}"))
    }
}

/// Where the current pages are after recovery (the map's view), for the rebuild.
struct PagesAt {
    /// The logical blocks with a current page in each block.
    lbns_in: BTreeMap<BlockIdx, BTreeSet<u32>>,
    /// The blocks holding live trim records (the journal's).
    journal: HashSet<BlockIdx>,
    /// Per logical block, the blocks (not the journal's) holding its current pages.
    blocks_of: BTreeMap<u32, Vec<BlockIdx>>,
    /// Logical blocks sharing a block with another (RFTL never writes that).
    mixed: BTreeSet<u32>,
}

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::sync::Arc;

    use nand_model::TimingMode;

    use super::*;
    use crate::schemes::SchemeKind;
    use crate::{Ftl, FtlConfig};

    /// A saved job is taken back only where it agrees with the medium and the map. The
    /// state a clean close saves is taken; the same state with a role's next page off by
    /// one, a fold copying into its buffer, a block past the device, a block another taken
    /// state claimed, or a block holding another logical block's pages is refused.
    #[test]
    fn a_saved_job_that_disagrees_with_the_medium_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = FtlConfig {
            scheme: SchemeKind::Rftl,
            queues: 1,
            checkpoint_interval_bytes: 0,
            ..FtlConfig::default()
        };
        // The integration tests' device: a copy well under an erase (RFTL's budget).
        let mut nand = crate::test_support::small_nand(2, 2, 32);
        nand.timing = nand_model::Timing {
            t_read: std::time::Duration::from_micros(25),
            t_prog: std::time::Duration::from_micros(200),
            t_erase: std::time::Duration::from_micros(1500),
            channel_bytes_per_sec: 400_000_000,
            ..Default::default()
        };
        let f = Ftl::create(&dir.path().join("r.img"), &nand, TimingMode::Off, cfg, None)
            .expect("create");
        let any: Arc<dyn Any + Send + Sync> = f.core.scheme.clone();
        let rftl = any.downcast::<RftlScheme>().expect("the rftl scheme");
        let pages = f.capacity() / 4096;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data = vec![7u8; 4096];
        for l in 0..pages {
            futures::executor::block_on(f.write(0, l * 4096, &data, false)).expect("write");
        }
        let job = |r: &RftlScheme| {
            r.state.iter().enumerate().find_map(|(l, m)| {
                let st = m.lock();
                st.job.is_some().then(|| (l as u32, st.clone()))
            })
        };
        let mut n = 0;
        while job(&rftl).is_none() {
            assert!(n < 40 * pages, "no job started");
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            futures::executor::block_on(f.write(0, (x % pages) * 4096, &data, false))
                .expect("write");
            n += 1;
        }
        f.close().expect("close");
        let (lbn, st) = job(&rftl).expect("a job");
        let core = &f.core;
        let at = rftl.pages_at();
        let none = HashSet::new();
        assert_eq!(rftl.take_saved(core, lbn, &st, &at, &none), Ok(()));
        let refused = |bad: &LbnState, claimed: &HashSet<BlockIdx>, what: &str| {
            assert!(
                rftl.take_saved(core, lbn, bad, &at, claimed).is_err(),
                "{what}: {bad:?} taken"
            );
        };
        let mut bad = st.clone();
        if let Some(p) = bad.primary.as_mut() {
            p.next = p.next.saturating_sub(1);
        }
        refused(&bad, &none, "the primary's next page off by one");
        let mut bad = st.clone();
        if let Some(j) = bad.job.as_mut() {
            j.dest = match j.dest {
                super::super::lbn::Dest::Replacement => super::super::lbn::Dest::Buffer,
                super::super::lbn::Dest::Buffer => super::super::lbn::Dest::Replacement,
            };
        }
        refused(&bad, &none, "the job's destination swapped");
        let mut bad = st.clone();
        if let Some(j) = bad.job.as_mut() {
            j.sources.push((BlockIdx(rftl.layout.total_blocks()), None));
        }
        refused(&bad, &none, "a block past the device");
        refused(
            &st,
            &st.blocks().into_iter().take(1).collect(),
            "a claimed block",
        );
        // A block holding another logical block's current pages.
        let other = at
            .lbns_in
            .iter()
            .find(|(_, ls)| !ls.contains(&lbn))
            .map(|(b, _)| *b)
            .expect("another logical block's block");
        let mut bad = st.clone();
        if let Some(j) = bad.job.as_mut() {
            j.erase.push((other, false));
        }
        refused(&bad, &none, "another logical block's block");
        // Shapes no fold or shift has (a forged checkpoint): two roles in one block, a
        // block to retire, a role to erase, a job without its sources.
        let mut bad = st.clone();
        bad.replacement = bad.primary;
        refused(&bad, &none, "the replacement in the primary's block");
        let mut bad = st.clone();
        if let Some(j) = bad.job.as_mut() {
            for e in &mut j.erase {
                e.1 = true;
            }
        }
        refused(&bad, &none, "a block to retire");
        let mut bad = st.clone();
        if let (Some(j), Some(b)) = (bad.job.as_mut(), st.buffer) {
            j.erase.push((b.block, false));
        }
        refused(&bad, &none, "the buffer to erase");
        let mut bad = st.clone();
        if let Some(j) = bad.job.as_mut() {
            j.sources.clear();
        }
        refused(&bad, &none, "no sources");
        // The budget left (outside checks forged these with valid CRCs): a job must end
        // within its steps and its destination's room, as one that never stopped does.
        let (ppb, k) = (rftl.layout.pages_per_block, rftl.budget);
        let blk = |b: u32, next: u32| Blk {
            block: BlockIdx(b),
            next,
        };
        let fold = |primary: u32, buffer: u32, replacement: u32, steps: u32| LbnState {
            primary: Some(blk(1, primary)),
            buffer: Some(blk(2, buffer)),
            replacement: Some(blk(3, replacement)),
            job: Some(Job {
                kind: JobKind::Fold,
                sources: vec![(BlockIdx(1), Some(primary)), (BlockIdx(2), Some(0))],
                erase: vec![(BlockIdx(1), false)],
                dest: Dest::Replacement,
                steps,
            }),
        };
        let shift = |buffer: u32, steps: u32| LbnState {
            primary: Some(blk(1, ppb)),
            buffer: Some(blk(2, buffer)),
            replacement: None,
            job: Some(Job {
                kind: JobKind::Shift,
                sources: vec![(BlockIdx(3), Some(k.k_fold))],
                erase: vec![(BlockIdx(3), false)],
                dest: Dest::Buffer,
                steps,
            }),
        };
        let left = |st: &LbnState, slots: u32| {
            rftl.budget_left(st, st.job.as_ref().expect("a job"), slots)
        };
        // Refused, and for the reason named.
        let refused_for = |st: &LbnState, slots: u32, why: &str| {
            let e = left(st, slots).expect_err(why);
            assert!(e.contains(why), "{e}: not for '{why}'");
        };
        let sps = rftl.layout.slots_per_page;
        let spb = ppb * sps;
        assert_eq!(left(&fold(ppb, ppb - k.k_fold, 0, 0), spb), Ok(()));
        let step = 3.min(k.k_fold - 2);
        let done = step * k.beta;
        assert_eq!(
            left(
                &fold(ppb, ppb - k.k_fold + step, done, step),
                spb - done * sps
            ),
            Ok(())
        );
        // A fold on a primary the host still writes.
        refused_for(
            &fold(ppb - 1, ppb - k.k_fold, 0, 0),
            spb,
            "a primary that is not full",
        );
        // A replacement holding more than the steps copied.
        refused_for(
            &fold(ppb, ppb - k.k_fold + step, done + 1, step),
            0,
            &format!("holds {} pages after {step} steps", done + 1),
        );
        // A count of steps that leaves too few for what is left.
        refused_for(&fold(ppb, ppb - 1, 0, k.k_fold - 1), spb, "past the budget");
        assert_eq!(left(&shift(1, 0), k.k_fold - 1), Ok(()));
        // A shift whose buffer holds more than its steps (and the page that ended the fold)
        // placed.
        refused_for(&shift(2, 0), 0, "holds 2 pages after 0 steps");
        // A shift with more to copy than its steps left.
        refused_for(
            &shift(1, k.k_shift - 1),
            (k.beta + 1) * sps,
            "past the budget",
        );
    }
}
