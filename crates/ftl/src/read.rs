//! Host reads: where each logical page comes from, and how the flash reads of one request are
//! grouped into NAND operations.
//!
//! Plan per logical page, decided under its stripe lock: the overlay (newest buffered version),
//! else zeroes (unmapped), else flash, with the block pinned so GC cannot erase it under the
//! read.
//!
//! **Grouping.** A device reads a NAND page into its page register once and then transfers the
//! columns asked for; reading the slots of one page one by one would charge the array time
//! (`t_read`) per 4 KiB slot, so a sequential read of a 32 KiB-page part would see an eighth of
//! its bandwidth. So the whole 4 KiB pieces of a request that lie in consecutive slots of one
//! page, in the request's order, become one column read (a [`SlotRun`]: one `t_read`, its bytes
//! and their OOB entries over the channel), as NVMeVirt's `conv_read` aggregates reads within a
//! flash page. Runs on pages at one page index in different planes of one bank, as multi-plane
//! writes place consecutive pages, go out as one multi-plane read ([`NandDevice::read_planes`]:
//! one array time for all). A partial piece (an unaligned start or end) is read on its own.
//!
//! **Checks.** Every slot read from flash is checked before its bytes are used, as a codeword
//! is by an ECC: its OOB entry must be a data entry naming the logical page, with the CRC of
//! the bytes read. A slot that fails is read again on its own like one with an injected read
//! fault; after `read_retries` retries it is an uncorrectable read
//! ([`FtlError::Uncorrectable`]: EIO to the host), never wrong bytes.
//!
//! **Allocation.** The same plan, without reading, says which pages hold data
//! ([`Core::allocation`]: NBD's `base:allocation`).
//!
//! [`NandDevice::read_planes`]: nand_model::NandDevice::read_planes

use std::sync::atomic::Ordering;

use nand_model::{Completion, NandError, PageAddr, PlaneRead};
use smallvec::{smallvec, SmallVec};

use crate::core::Core;
use crate::error::{FtlError, Result};
use crate::layout::{pieces, BlockIdx, Lpn, Piece, Psa, LOGICAL_PAGE};
use crate::oob::{self, SlotKind};

/// Slots in the largest NAND page the model accepts.
const MAX_SLOTS_PER_PAGE: u32 = nand_model::MAX_PAGE_SIZE / LOGICAL_PAGE as u32;

/// Most pages one [`Core::allocation`] query looks at: 2^18 (1 GiB), a few milliseconds of
/// lookups under the page's stripe lock each.
pub(crate) const ALLOCATION_SCAN_PAGES: u64 = 1 << 18;

/// A run of bytes that are all mapped or all unmapped (see [`crate::Ftl::allocation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Bytes in the run.
    pub len: u64,
    /// Holds data (buffered or on flash); unmapped bytes read as zeroes.
    pub mapped: bool,
}

/// OOB bytes that hold the entries of every slot of the largest page.
const MAX_ENTRIES_LEN: usize = oob::slot_entry_len(MAX_SLOTS_PER_PAGE - 1);

/// Where a logical page's bytes come from.
enum Source {
    /// Copied from the overlay already.
    Served,
    /// Holds no data (never written, trimmed, zeroed): zero-filled already.
    Unwritten,
    /// On flash at this slot; the block is pinned (the caller unpins it).
    Flash(Psa),
    /// Lost ([`FtlError::Lost`]): `dst` is zero-filled, and the read must fail.
    Lost,
}

/// Consecutive slots of one NAND page holding consecutive logical pages of a request: one
/// column read.
#[derive(Clone, Copy, Debug)]
struct SlotRun {
    page: PageAddr,
    /// Pinned while the run waits in a [`ReadGroup`].
    block: BlockIdx,
    first_slot: u32,
    first_lpn: Lpn,
    /// Where the run's bytes go in the request's buffer.
    pos: usize,
    slots: u32,
}

impl SlotRun {
    fn len(&self) -> usize {
        self.slots as usize * LOGICAL_PAGE
    }

    fn last_slot(&self) -> u32 {
        self.first_slot + self.slots - 1
    }

    /// The slot after the run's last, if `psa`, `lpn` and `pos` continue it.
    fn continues(&self, page: PageAddr, slot: u32, lpn: Lpn, pos: usize) -> bool {
        self.page == page
            && slot == self.first_slot + self.slots
            && lpn.0 == self.first_lpn.0 + self.slots
            && pos == self.pos + self.len()
    }
}

/// A slot of a group read to read again on its own.
struct Again {
    lpn: Lpn,
    /// Where the group read it (and the scheme searched for it).
    psa: Psa,
    /// Where its bytes go in the request's buffer.
    pos: usize,
    /// What the group's attempt was for this slot.
    attempt: GroupAttempt,
}

/// What a group read was for one of its slots that is read again.
enum GroupAttempt {
    /// Not an attempt: another page of the multi-plane read failed, so this slot's bytes are
    /// unspecified and all its attempts are still to come.
    None,
    /// Its first attempt: the slot at this page and index failed its check.
    FailedCheck(PageAddr, u32),
    /// Its first attempt: the device could not read its page.
    Unreadable(PageAddr),
}

/// The runs of one NAND operation (one page, or pages of one bank at one page index in
/// distinct planes), each holding a pin on its block until it is read or dropped.
struct ReadGroup<'a> {
    core: &'a Core,
    runs: Vec<SlotRun>,
}

impl Drop for ReadGroup<'_> {
    fn drop(&mut self) {
        for run in self.runs.drain(..) {
            self.core.pins.unpin(run.block);
        }
    }
}

impl<'a> ReadGroup<'a> {
    fn new(core: &'a Core) -> ReadGroup<'a> {
        ReadGroup {
            core,
            runs: Vec::new(),
        }
    }

    /// Adds the pinned slot `psa` (logical page `lpn`, at `pos` in the buffer) if one
    /// operation can still read it with the rest; false (nothing taken) if not.
    fn try_add(&mut self, psa: Psa, lpn: Lpn, pos: usize) -> bool {
        let layout = &self.core.layout;
        let (page, slot) = layout.split(psa);
        if let Some(last) = self.runs.last_mut() {
            if last.continues(page, slot, lpn, pos) {
                last.slots += 1;
                // One pin per run is enough: drop the one taken for this slot.
                self.core.pins.unpin(layout.block_of(psa));
                return true;
            }
        }
        let planes = self.core.nand.config().planes.max(1);
        let fits = self.runs.len() < planes as usize
            && self.runs.iter().all(|r| {
                r.page.block.bank == page.block.bank
                    && r.page.page == page.page
                    && r.page.block.block % planes != page.block.block % planes
            });
        if !fits {
            return false;
        }
        self.runs.push(SlotRun {
            page,
            block: layout.block_of(psa),
            first_slot: slot,
            first_lpn: lpn,
            pos,
            slots: 1,
        });
        true
    }
}

impl Core {
    /// Reads `buf.len()` bytes at `offset` (already range-checked).
    ///
    /// The NAND reads count from the request's arrival (NVMeVirt's accounting, see
    /// `nand_model::ArrivalScope`): the FTL's own lookup time is absorbed into the modelled
    /// latency instead of added to it.
    /// Returns how many of the request's pages held no data (read as zeroes with no NAND read:
    /// `FtlStats::unwritten_page_reads` counts them for host reads).
    pub(crate) async fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<u64> {
        if !self.is_read_only() {
            self.scheme.before_read(self);
        }
        let mut pending: Vec<Completion> = Vec::new();
        let mut unwritten = 0u64;
        {
            // Not held across an await: the scope is this thread's.
            let _arrival = nand_model::ArrivalScope::enter(self.nand.now_ns());
            let mut group = ReadGroup::new(self);
            for Piece {
                pos,
                lpn,
                in_page,
                len,
            } in pieces(offset, buf.len())
            {
                let dst = &mut buf[pos..pos + len];
                if len < LOGICAL_PAGE {
                    if let Some(c) = self.read_lpn(lpn, in_page, dst, 0, None, &mut unwritten)? {
                        pending.push(c);
                    }
                } else {
                    let psa = match self.source(lpn, 0, dst) {
                        Source::Flash(psa) => {
                            self.scheme.search_on_flash(self, lpn, psa);
                            psa
                        }
                        Source::Served => continue,
                        Source::Unwritten => {
                            unwritten += 1;
                            continue;
                        }
                        Source::Lost => return Err(FtlError::Lost { lpn: lpn.0 }),
                    };
                    if !group.try_add(psa, lpn, pos) {
                        // Read what the group holds, then start a new one with this slot
                        // (whose pin it takes over, even if the read failed).
                        let read = self.read_group(&mut group, buf, &mut pending);
                        let added = group.try_add(psa, lpn, pos);
                        debug_assert!(added, "an empty group takes any slot");
                        read?;
                    }
                }
            }
            self.read_group(&mut group, buf, &mut pending)?;
        }
        // The latest first: the others are then past too (a read's end does not move), so a
        // request costs one timer wake-up, not one per NAND read.
        pending.sort_unstable_by_key(|c| std::cmp::Reverse(c.deadline_ns()));
        for c in pending {
            if !c.is_complete() {
                c.into_future().await;
            }
        }
        Ok(unwritten)
    }

    /// Which parts of `[offset, offset + len)` (range-checked) hold data, as consecutive runs
    /// from `offset`: a page is mapped if it is buffered or on flash; an unmapped one (never
    /// written, trimmed, zeroed) reads as zeroes. Pages are 4 KiB: a page partly written by a
    /// 512-byte write is mapped whole. At most [`ALLOCATION_SCAN_PAGES`] pages are looked at,
    /// and at most `max_runs` runs returned (the scan stops where another would start); the
    /// runs then cover less than `len`.
    pub(crate) fn allocation(&self, offset: u64, len: u64, max_runs: usize) -> Vec<Extent> {
        let page = LOGICAL_PAGE as u64;
        let end = offset + len;
        let first = offset / page;
        let last = ((end - 1) / page).min(first + ALLOCATION_SCAN_PAGES - 1);
        let mut runs: Vec<Extent> = Vec::new();
        let mut pos = offset;
        for lpn in first..=last {
            let to = ((lpn + 1) * page).min(end);
            let mapped = {
                // Pages past 2^32 do not exist: `check_range` keeps `lpn` below the capacity.
                let lpn = Lpn(lpn as u32);
                let st = self.cache.lock(lpn);
                // A lost page counts as data: a copy tool reads it (and gets the error)
                // instead of skipping it as a hole that reads as zeroes.
                st.overlay.contains_key(&lpn.0)
                    || self.scheme.locate(&st, lpn).is_some()
                    || self.is_lost(lpn)
            };
            let full = runs.len() >= max_runs.max(1);
            match runs.last_mut() {
                Some(run) if run.mapped == mapped => run.len += to - pos,
                _ if full => break,
                _ => runs.push(Extent {
                    len: to - pos,
                    mapped,
                }),
            }
            pos = to;
        }
        runs
    }

    /// Serves logical page `lpn` from the overlay or as zeroes into `dst` (from byte `off` of
    /// the page), or says where on flash it is, with its block pinned (the caller runs the
    /// scheme's search of the medium, `Scheme::search_on_flash`, where a first read does).
    fn source(&self, lpn: Lpn, off: usize, dst: &mut [u8]) -> Source {
        let st = self.cache.lock(lpn);
        if let Some(b) = st.overlay.get(&lpn.0) {
            dst.copy_from_slice(&b.data[off..off + dst.len()]);
            return Source::Served;
        }
        let Some(psa) = self.scheme.locate(&st, lpn) else {
            dst.fill(0);
            if self.is_lost(lpn) {
                return Source::Lost;
            }
            return Source::Unwritten;
        };
        self.pins.pin(self.layout.block_of(psa));
        drop(st);
        Source::Flash(psa)
    }

    /// Reads the runs `group` holds into `buf` with one NAND operation, checks every slot, and
    /// empties the group (unpinning its blocks, whatever the outcome). A slot that fails its
    /// check, or sits on a page the operation could not read, is read again on its own
    /// ([`Self::read_lpn`]). The completions to wait for go to `pending`.
    fn read_group(
        &self,
        group: &mut ReadGroup<'_>,
        buf: &mut [u8],
        pending: &mut Vec<Completion>,
    ) -> Result<()> {
        if group.runs.is_empty() {
            return Ok(());
        }
        // Owns the pins from here on: they are released however this returns.
        let group = ReadGroup {
            core: self,
            runs: std::mem::take(&mut group.runs),
        };
        // Inline for the usual group of one page (every 4 KiB random read comes here).
        let mut entries: SmallVec<[[u8; MAX_ENTRIES_LEN]; 1]> =
            smallvec![[0u8; MAX_ENTRIES_LEN]; group.runs.len()];
        // Slots to read again on their own, with how their group attempt failed.
        let mut again: Vec<Again> = Vec::new();
        let read = {
            let mut reads: SmallVec<[PlaneRead<'_>; 1]> = SmallVec::new();
            // Runs are in buffer order and do not overlap: hand each its own slice.
            let mut rest: &mut [u8] = buf;
            let mut base = 0usize;
            for (run, entry) in group.runs.iter().zip(entries.iter_mut()) {
                debug_assert!(run.pos >= base, "runs in buffer order");
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(run.pos - base);
                let (data, tail) = tail.split_at_mut(run.len());
                rest = tail;
                base = run.pos + run.len();
                reads.push((
                    run.page,
                    run.first_slot * LOGICAL_PAGE as u32,
                    data,
                    Some(&mut entry[..oob::slot_entry_len(run.last_slot())]),
                ));
            }
            self.counters.page_reads.fetch_add(1, Ordering::Relaxed);
            if reads.len() > 1 {
                self.counters
                    .multi_plane_reads
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.nand.read_planes(&mut reads)
        };
        match read {
            Ok(c) => {
                for (run, entry) in group.runs.iter().zip(&entries) {
                    let entry = &entry[..oob::slot_entry_len(run.last_slot())];
                    for i in 0..run.slots {
                        let slot = run.first_slot + i;
                        let lpn = Lpn(run.first_lpn.0 + i);
                        let pos = run.pos + i as usize * LOGICAL_PAGE;
                        if !intact(entry, slot, lpn, &buf[pos..pos + LOGICAL_PAGE]) {
                            again.push(Again {
                                lpn,
                                psa: self.layout.psa(run.page, slot),
                                pos,
                                attempt: GroupAttempt::FailedCheck(run.page, slot),
                            });
                        }
                    }
                }
                pending.push(c);
            }
            // The device names the first page it could not read; the others' buffers are
            // unspecified, so every slot is read again, those of that page as a retry.
            Err(NandError::Uncorrectable { page: failed }) => {
                for run in &group.runs {
                    for i in 0..run.slots {
                        again.push(Again {
                            lpn: Lpn(run.first_lpn.0 + i),
                            psa: self.layout.psa(run.page, run.first_slot + i),
                            pos: run.pos + i as usize * LOGICAL_PAGE,
                            attempt: if run.page == failed {
                                GroupAttempt::Unreadable(failed)
                            } else {
                                GroupAttempt::None
                            },
                        });
                    }
                }
            }
            Err(e) => {
                for run in &group.runs {
                    buf[run.pos..run.pos + run.len()].fill(0);
                }
                return Err(e.into());
            }
        }
        // The group's bytes are read (or to be read again by slot): release its pins.
        drop(group);
        // Never leave bytes that failed their check, or that the device left unspecified,
        // where the caller could use them, even if a retry below ends the request first.
        for a in &again {
            buf[a.pos..a.pos + LOGICAL_PAGE].fill(0);
        }
        for a in again {
            // The group's attempt is counted here, slot by slot as the old per-slot reads
            // did: counting stops with the slot that fails the request.
            let first = match a.attempt {
                GroupAttempt::None => 0,
                GroupAttempt::FailedCheck(page, slot) => {
                    self.count_failed_check(a.lpn, page, slot, 0);
                    1
                }
                GroupAttempt::Unreadable(page) => {
                    self.count_failed_attempt(page, 0);
                    1
                }
            };
            let dst = &mut buf[a.pos..a.pos + LOGICAL_PAGE];
            // (A slot on flash a moment ago: one trimmed since is not a read of nothing.)
            if let Some(c) = self.read_lpn(a.lpn, 0, dst, first, Some(a.psa), &mut 0)? {
                pending.push(c);
            }
        }
        Ok(())
    }

    /// Counts and logs a slot read that failed its check (attempt `attempt` of the slot).
    fn count_failed_check(&self, lpn: Lpn, page: PageAddr, slot: u32, attempt: u32) {
        self.counters.crc_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            "lpn {}: the data read from {page} slot {slot} fails its check (attempt {} of {})",
            lpn.0,
            attempt + 1,
            self.cfg.read_retries + 1
        );
        self.count_failed_attempt(page, attempt);
    }

    /// Every failed attempt counts as a retry; the last one makes the read uncorrectable.
    fn count_failed_attempt(&self, page: PageAddr, attempt: u32) {
        self.counters.read_retries.fetch_add(1, Ordering::Relaxed);
        if attempt == self.cfg.read_retries {
            self.count_uncorrectable(page.block.bank.0);
        }
    }

    /// Fills `dst` from logical page `lpn` starting at byte `off`, on its own, attempts
    /// `first..=read_retries` (a read that already failed in a group starts at 1; `searched`:
    /// where that group read it); returns the NAND completion to wait for, if the data came
    /// from flash. A partial read needs the whole slot to check it; a whole one is read in
    /// place. A partial write to a page that cannot be read fails the same way (its
    /// read-modify-write cannot read the page); a whole 4 KiB write or a trim replaces it.
    fn read_lpn(
        &self,
        lpn: Lpn,
        off: usize,
        dst: &mut [u8],
        first: u32,
        searched: Option<Psa>,
        unwritten: &mut u64,
    ) -> Result<Option<Completion>> {
        let retries = self.cfg.read_retries;
        let partial = dst.len() != LOGICAL_PAGE;
        let mut scratch = [0u8; LOGICAL_PAGE];
        // Where the scheme last searched the medium for the page (GFTL's OOB search of a data
        // block; `searched`: where a group read that failed searched): a retry of the same
        // slot reads its page again without searching again, as a controller that found the
        // page retries its read; a page that moved since is searched for where it is now.
        let mut searched = searched;
        // With `first > retries` (a group read failed and no retry is allowed) the failure is
        // counted already: nothing is read.
        for attempt in first..=retries {
            let psa = match self.source(lpn, off, dst) {
                Source::Served => return Ok(None),
                Source::Unwritten => {
                    *unwritten += 1;
                    return Ok(None);
                }
                Source::Lost => return Err(FtlError::Lost { lpn: lpn.0 }),
                Source::Flash(psa) => psa,
            };
            if searched != Some(psa) {
                self.scheme.search_on_flash(self, lpn, psa);
            }
            searched = Some(psa);
            let blk = self.layout.block_of(psa);
            let (page, slot) = self.layout.split(psa);
            let mut entry = [0u8; MAX_ENTRIES_LEN];
            let entry = &mut entry[..oob::slot_entry_len(slot)];
            let buf: &mut [u8] = if partial { &mut scratch } else { &mut *dst };
            self.counters.page_reads.fetch_add(1, Ordering::Relaxed);
            let r = self
                .nand
                .read(page, slot * LOGICAL_PAGE as u32, buf, Some(entry));
            self.pins.unpin(blk);
            match r {
                Ok(c) => {
                    if intact(entry, slot, lpn, buf) {
                        if partial {
                            dst.copy_from_slice(&scratch[off..off + dst.len()]);
                        }
                        return Ok(Some(c));
                    }
                    self.count_failed_check(lpn, page, slot, attempt);
                }
                Err(NandError::Uncorrectable { .. }) => self.count_failed_attempt(page, attempt),
                Err(e) => {
                    dst.fill(0);
                    return Err(e.into());
                }
            }
        }
        // Never leave bytes that failed their check where the caller could use them.
        dst.fill(0);
        Err(FtlError::Uncorrectable {
            lpn: lpn.0,
            retries,
        })
    }
}

/// True if slot `slot`'s OOB entry (from `entries`, the page's first OOB bytes) is a data
/// entry for `lpn` whose CRC matches `bytes`.
fn intact(entries: &[u8], slot: u32, lpn: Lpn, bytes: &[u8]) -> bool {
    oob::slot_entry(entries, slot).is_some_and(|m| {
        m.kind == SlotKind::Data && m.lpn == lpn && m.crc == crc32fast::hash(bytes)
    })
}
