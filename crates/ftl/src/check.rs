//! The invariant check tests call between operations (`Ftl::check_invariants`): it quiesces
//! the FTL without changing its state (no flush, no checkpoint, buffered pages and trim records
//! stay where they are), then checks the design page's invariants and the shared machinery's
//! bookkeeping.
//!
//! What is checked:
//! - (1) a buffered page is newer than its mapped copy on flash (overlay sequence number above
//!   the one in the mapped slot's OOB);
//! - (2) the scheme's map, valid bits and counts, with the zombies of the open pages
//!   (`Scheme::check`; the hybrids add (2h));
//! - (3) no flash rule was broken (the NAND model counts out-of-order programs, programs of
//!   programmed pages, operations on bad blocks);
//! - (4) no read pin is held, and no free, bad or reserved block holds a valid slot (the page
//!   scheme; the hybrids check their block roles);
//! - (5) every mapped slot's OOB names its logical page, as data;
//! - free lists: each bank's free list holds exactly its `Free` blocks, once, with their erase
//!   counts; the lock-free free count and exclusive-GC flag agree with it; a free block is
//!   erased and as worn on the medium as the FTL thinks; a block the medium has marked bad is
//!   `Bad` or `Reserved`, and a `Bad` one is bad on the medium.
//!
//! Quiescing: the caller runs no host operation. Pages already sealed must reach flash (the
//! writers place them; with timing `virtual` they are placed now), GC must be between steps
//! (`gc_gate` exclusive) and no queue may seal meanwhile (every open page locked). Open pages
//! rank above `gc_gate` in the lock order, so they are only *tried* while the gate is held;
//! on a miss everything is let go and the attempt repeats.

use std::sync::atomic::Ordering;

use parking_lot::{MutexGuard, RwLockWriteGuard};

use crate::blocks::BlockState;
use crate::buffer::OpenPage;
use crate::core::{Core, GC_RESERVE};
use crate::layout::{Lpn, Psa};
use crate::oob::{self, SlotKind};

/// The FTL held still for a check.
struct Quiesced<'a> {
    opens: Vec<MutexGuard<'a, OpenPage>>,
    _gc: RwLockWriteGuard<'a, ()>,
}

fn quiesce(core: &Core) -> Quiesced<'_> {
    loop {
        for q in 0..core.queues.len() {
            if core.sim_wait_durable(q) {
                continue;
            }
            let queue = &core.queues[q];
            while queue.pending() > 0 && !core.writers_gone() {
                let l = queue.progress.listen();
                if queue.pending() > 0 && !core.writers_gone() {
                    l.wait_timeout(std::time::Duration::from_millis(10));
                }
            }
        }
        let gc = core.gc_gate.write();
        let opens: Vec<_> = core
            .queues
            .iter()
            .map_while(|q| q.open.try_lock())
            .collect();
        if opens.len() == core.queues.len() && core.queues.iter().all(|q| q.pending() == 0) {
            return Quiesced { opens, _gc: gc };
        }
        drop(opens);
        drop(gc);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Runs every check (the caller holds the checkpoint lock).
pub(crate) fn check(core: &Core) -> Result<(), String> {
    let q = quiesce(core);
    let zombies: Vec<Psa> = q.opens.iter().flat_map(|o| o.zombies()).collect();
    core.scheme.check(core, &zombies)?;
    check_pending_trims(core, &q)?;
    let v = core.nand.violations();
    if v != 0 {
        return Err(format!("{v} flash rule violations"));
    }
    check_blocks(core)?;
    check_mapped_slots(core)
}

/// The map's pending trims (which hold late zombies) are exactly the trim records in the open
/// pages: one the map lost would let GC erase a version a crash needs; one it kept after its
/// record reached flash would hold its slots for good.
fn check_pending_trims(core: &Core, q: &Quiesced<'_>) -> Result<(), String> {
    let mut buffered: Vec<_> = q.opens.iter().flat_map(|o| o.trim_records()).collect();
    let (mut pending, _) = core.scheme.page_map().pending_trims();
    buffered.sort_by_key(|r| r.seq);
    pending.sort_by_key(|r| r.seq);
    if buffered != pending {
        let first = buffered.iter().zip(&pending).position(|(a, b)| a != b);
        return Err(format!(
            "{} trim records buffered, {} pending in the map; first difference at {first:?}: {:?} vs {:?}",
            buffered.len(),
            pending.len(),
            first.map_or(buffered.get(pending.len()), |i| buffered.get(i)),
            first.map_or(pending.get(buffered.len()), |i| pending.get(i)),
        ));
    }
    Ok(())
}

/// Free lists, block states against the medium, free counts, read pins.
fn check_blocks(core: &Core) -> Result<(), String> {
    let layout = core.layout;
    for b in 0..layout.banks {
        let bank = core.bank(b);
        let a = bank.alloc.lock();
        let mut listed = vec![false; layout.blocks_per_bank as usize];
        for (erases, blk) in a.free_entries() {
            let i = blk as usize;
            if i >= listed.len() || std::mem::replace(&mut listed[i], true) {
                return Err(format!(
                    "bank {b}: block {blk} listed free twice or out of range"
                ));
            }
            if a.state[i] != BlockState::Free {
                return Err(format!(
                    "bank {b}: block {blk} is free-listed but {:?}",
                    a.state[i]
                ));
            }
            if a.erase_count[i] != erases {
                return Err(format!(
                    "bank {b}: block {blk} free-listed with {erases} erases, has {}",
                    a.erase_count[i]
                ));
            }
        }
        let free = a.free_len();
        if bank.free.load(Ordering::Acquire) != free {
            return Err(format!(
                "bank {b}: free count {} but {free} blocks free-listed",
                bank.free.load(Ordering::Acquire)
            ));
        }
        if bank.exclusive_gc.load(Ordering::Acquire) != (free <= GC_RESERVE + 1) {
            return Err(format!(
                "bank {b}: exclusive-GC flag wrong for {free} free blocks"
            ));
        }
        for blk in 0..layout.blocks_per_bank {
            let i = blk as usize;
            let state = a.state[i];
            if (state == BlockState::Free) != listed[i] {
                return Err(format!(
                    "bank {b}: block {blk} is {state:?}, free-listed {}",
                    listed[i]
                ));
            }
            let addr = nand_model::BlockAddr {
                bank: nand_model::BankId(b),
                block: blk,
            };
            let m = core.nand.block_state(addr).map_err(|e| e.to_string())?;
            if m.bad && !matches!(state, BlockState::Bad | BlockState::Reserved) {
                return Err(format!(
                    "bank {b}: block {blk} is bad on the medium but {state:?}"
                ));
            }
            if state == BlockState::Bad && !m.bad {
                return Err(format!(
                    "bank {b}: block {blk} is Bad but not marked on the medium"
                ));
            }
            if state == BlockState::Free
                && (m.programmed_pages != 0 || m.erase_count != a.erase_count[i])
            {
                return Err(format!(
                    "bank {b}: free block {blk} has {} programmed pages and {} erases on the medium (FTL: {} erases)",
                    m.programmed_pages, m.erase_count, a.erase_count[i]
                ));
            }
            let idx = layout.block_idx(addr);
            if core.pins.pinned(idx) {
                return Err(format!(
                    "block {} has a read pin with no read running",
                    idx.0
                ));
            }
        }
    }
    Ok(())
}

/// (5) and (1): every mapped slot's OOB names its page, and a buffered page is newer than it:
/// mapped sequence number < the overlay entry's floor <= its sequence number (`cache.rs`: only
/// versions from the floor up may still commit, so the map never goes back).
fn check_mapped_slots(core: &Core) -> Result<(), String> {
    let layout = core.layout;
    let mut oob_buf = vec![0u8; layout.oob_size as usize];
    for l in 0..core.lpns {
        let lpn = Lpn(l);
        let (psa, buffered) = {
            let st = core.cache.lock(lpn);
            (
                core.scheme.locate(&st, lpn),
                st.overlay.get(&l).map(|b| (b.seq, b.floor)),
            )
        };
        if let Some((seq, floor)) = buffered.filter(|&(seq, floor)| floor > seq) {
            return Err(format!(
                "lpn {l}: the buffered version {seq} has a floor {floor} above it"
            ));
        }
        let Some(psa) = psa else { continue };
        let (page, slot) = layout.split(psa);
        let programmed = core
            .nand
            .peek_oob(page, &mut oob_buf)
            .map_err(|e| format!("lpn {l}: {e}"))?;
        if !programmed {
            return Err(format!("lpn {l} maps to {psa:?} on an unprogrammed page"));
        }
        let meta = oob::slot_entry(&oob_buf, slot)
            .ok_or_else(|| format!("lpn {l}: the OOB of {page:?} does not decode"))?;
        if meta.kind != SlotKind::Data || meta.lpn != lpn {
            return Err(format!(
                "lpn {l} maps to {psa:?} whose OOB names {:?} lpn {}",
                meta.kind, meta.lpn.0
            ));
        }
        if let Some((seq, floor)) = buffered.filter(|&(_, floor)| floor <= meta.seq) {
            return Err(format!(
                "lpn {l}: the mapped version {} is not below the floor {floor} of the buffered \
                 version {seq}",
                meta.seq
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Ftl, FtlConfig};
    use nand_model::{NandConfig, TimingMode};
    use std::sync::atomic::Ordering;

    fn ftl(dir: &std::path::Path) -> Ftl {
        let nand = NandConfig {
            timing: nand_model::Timing {
                t_read: std::time::Duration::from_micros(25),
                t_prog: std::time::Duration::from_micros(200),
                t_erase: std::time::Duration::from_micros(1500),
                channel_bytes_per_sec: 400_000_000,
                ..Default::default()
            },
            ..crate::test_support::small_nand(1, 2, 16)
        };
        let cfg = FtlConfig {
            queues: 2,
            ..FtlConfig::default()
        };
        Ftl::create(&dir.join("c.img"), &nand, TimingMode::Off, cfg, None).expect("create")
    }

    /// The check passes with buffered pages and an unflushed trim (a zombie in an open page),
    /// and catches broken bookkeeping of each kind it claims to check.
    #[test]
    fn passes_unflushed_and_catches_each_kind_of_damage() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = ftl(dir.path());
        let page = vec![0x5au8; 4096];
        let pages = f.capacity() / 4096;
        for i in 0..pages - 1 {
            futures::executor::block_on(f.write(0, i * 4096, &page, i % 8 == 0)).expect("write");
        }
        futures::executor::block_on(f.flush()).expect("flush");
        futures::executor::block_on(f.trim(1, 0, 8 * 4096, false)).expect("trim");
        futures::executor::block_on(f.write(0, (pages - 1) * 4096, &page, false)).expect("write");
        let core = &f.core;
        let zombies: usize = core
            .queues
            .iter()
            .map(|q| q.open.lock().zombies().count())
            .sum();
        assert!(zombies > 0, "the trim's record is still in an open page");
        assert_eq!(f.check_invariants(), Ok(()));

        // An overlay entry whose floor passed its own version, or fell to the mapped one (the
        // map could then go back to an older version). Entries made up for the check (no
        // queue holds them; nothing runs meanwhile), on page 10, which is mapped.
        let lpn = crate::layout::Lpn(10);
        let fake = |seq: u64, floor: u64| {
            core.cache.lock(lpn).overlay.insert(
                10,
                crate::cache::Buffered {
                    seq,
                    data: bytes::Bytes::from_static(&[0u8; 4096]),
                    floor,
                },
            );
        };
        fake(u64::MAX / 2, u64::MAX / 2 + 1);
        assert!(f
            .check_invariants()
            .is_err_and(|e| e.contains("has a floor")));
        fake(u64::MAX / 2, 0);
        assert!(f
            .check_invariants()
            .is_err_and(|e| e.contains("is not below the floor")));
        core.cache.lock(lpn).overlay.remove(&10);
        assert_eq!(f.check_invariants(), Ok(()));

        // A pending trim in the map that no open page holds (nothing would ever release its
        // late zombies), then gone again once its record is "on flash".
        let stray = crate::buffer::TrimRecord {
            start: 20,
            count: 1,
            seq: u64::MAX / 2,
        };
        core.scheme.page_map().trim_buffered(stray);
        assert!(f
            .check_invariants()
            .is_err_and(|e| e.contains("pending in the map")));
        core.scheme
            .page_map()
            .trims_durable(&crate::buffer::encode_trims(&[stray]));
        assert_eq!(f.check_invariants(), Ok(()));

        // A read pin nobody holds.
        let blk = crate::layout::BlockIdx(3);
        core.pins.pin(blk);
        assert!(f.check_invariants().is_err_and(|e| e.contains("read pin")));
        core.pins.unpin(blk);
        // A free count that disagrees with the free list.
        let bank = core.bank(0);
        let free = bank.free.load(Ordering::Acquire);
        bank.free.store(free + 1, Ordering::Release);
        assert!(f
            .check_invariants()
            .is_err_and(|e| e.contains("free count")));
        bank.free.store(free, Ordering::Release);
        // A block listed free twice.
        {
            let mut a = bank.alloc.lock();
            let (_, blk) = a.free_entries().next().expect("a free block");
            a.push_free(blk);
        }
        assert!(f.check_invariants().is_err_and(|e| e.contains("twice")));
        drop(f);
    }
}
