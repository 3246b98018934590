//! The logical-to-physical map: a lock-striped L2P table with an overlay of buffered writes.
//!
//! # Structure
//! - `l2p`: one `AtomicU32` per exported logical page holding a [`Psa`] or `Psa::UNMAPPED`
//!   (4 bytes per exported 4 KiB page — the whole table's cost).
//! - `stripes`: [`STRIPES`] mutexes; logical page `lpn` belongs to stripe `lpn % STRIPES`. A
//!   stripe's lock protects (a) the `l2p` entries of its pages against concurrent *updates*,
//!   (b) its `overlay`: the newest version of each of its pages that is still in a write buffer,
//!   and (c) its partial-write locks (`rmw`).
//!
//! # Why 1024 stripes
//! LFTL locks single mapping entries (bit locks); a lock per entry would cost more memory than the
//! table itself. With `T` threads touching random pages, two of them meet on a stripe with
//! probability about `T^2 / (2 * STRIPES)`: under 4 % for 8 threads at 1024 stripes, while the
//! stripes cost 64 KiB (cache-line padded, so neighbours never false-share). Consecutive pages
//! land on consecutive stripes, so a sequential stream spreads over all of them.
//!
//! # Invariants (checked by `Core::check_invariants`)
//! - A page's newest acknowledged version is in the overlay if it has one, else at `l2p`.
//! - Sequence numbers of one page are taken under its stripe lock, so their order is the order
//!   in which the overlay saw the writes; a buffered slot commits into `l2p` only if the overlay
//!   still holds its sequence number (a newer write or a trim makes it garbage).
//!
//! Lock order: stripe, then anything else (block table atomics need no lock; the trim log's mutex
//! and a bank's allocator may be taken while a stripe is held; never the reverse).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::Waker;

use parking_lot::{Mutex, MutexGuard};

use crate::checkpoint::CHUNK;
use crate::layout::{Lpn, Psa};

/// Number of lock stripes (see the module doc for the choice).
pub const STRIPES: usize = 1024;

/// A 4 KiB logical page's bytes, shared between the overlay and the write buffer.
pub type PageData = bytes::Bytes;

/// The newest version of a page that is still buffered in RAM.
#[derive(Clone)]
pub struct Buffered {
    pub seq: u64,
    pub data: PageData,
}

/// State guarded by one stripe lock.
#[derive(Default)]
pub struct Stripe {
    pub overlay: HashMap<u32, Buffered>,
    /// Pages locked for a read-modify-write, with the tasks waiting for them.
    pub rmw: HashMap<u32, Vec<Waker>>,
}

#[repr(align(64))]
struct Padded(Mutex<Stripe>);

/// The L2P table and its stripes.
pub struct MappingTable {
    l2p: Box<[AtomicU32]>,
    stripes: Box<[Padded]>,
    /// One bit per chunk of `checkpoint::CHUNK` entries changed since the last checkpoint
    /// (what an incremental checkpoint writes).
    dirty: Box<[AtomicU64]>,
}

impl MappingTable {
    /// A table of `lpns` entries, all unmapped.
    pub fn new(lpns: u32) -> MappingTable {
        MappingTable {
            l2p: (0..lpns).map(|_| AtomicU32::new(Psa::UNMAPPED)).collect(),
            stripes: (0..STRIPES)
                .map(|_| Padded(Mutex::new(Stripe::default())))
                .collect(),
            dirty: (0..(lpns as usize).div_ceil(CHUNK as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// Starts loading `lpn`'s entry and its stripe lock into the cache. GC calls it before it
    /// locks the stripe: both are usually cold there (GC visits logical pages at random), and a
    /// lock's atomic instruction would otherwise wait for its own miss before the entry's load
    /// could even start.
    pub fn prefetch(&self, lpn: Lpn) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let i = lpn.0 as usize;
            if let (Some(e), Some(s)) = (self.l2p.get(i), self.stripes.get(i % STRIPES)) {
                // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it is part of the
                // x86_64 baseline the crate is built for). A prefetch is only a hint: it reads
                // nothing into the program and never faults; the pointers are to live fields
                // of `self` anyway.
                unsafe {
                    _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(e).cast());
                    _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(s).cast());
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = lpn;
    }

    /// Locks the stripe of `lpn`.
    pub fn lock(&self, lpn: Lpn) -> MutexGuard<'_, Stripe> {
        self.stripes[lpn.0 as usize % STRIPES].0.lock()
    }

    /// Locks every stripe that holds a page of `start .. start + count`, in ascending stripe
    /// order (the only order in which several stripes are ever taken).
    pub fn lock_range(&self, start: u32, count: u32) -> RangeGuard<'_> {
        let idx: Vec<usize> = if count as usize >= STRIPES {
            (0..STRIPES).collect()
        } else {
            let mut v: Vec<usize> = (start..start + count)
                .map(|l| l as usize % STRIPES)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut slot = vec![usize::MAX; STRIPES];
        let guards = idx
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                slot[s] = i;
                self.stripes[s].0.lock()
            })
            .collect();
        RangeGuard { guards, slot }
    }

    /// Reads an entry. Callers that act on the value (pin a block, compare-and-set) hold the stripe.
    pub fn get(&self, lpn: Lpn) -> Option<Psa> {
        match self.l2p[lpn.0 as usize].load(Ordering::Acquire) {
            Psa::UNMAPPED => None,
            v => Some(Psa(v)),
        }
    }

    /// Sets an entry; the caller holds the stripe lock (or owns the table exclusively).
    pub fn set(&self, lpn: Lpn, psa: Option<Psa>) -> Option<Psa> {
        let c = (lpn.0 / CHUNK) as usize;
        let (w, bit) = (&self.dirty[c / 64], 1u64 << (c % 64));
        // Read first: after the first change of a chunk its word is only read, not bounced.
        if w.load(Ordering::Relaxed) & bit == 0 {
            w.fetch_or(bit, Ordering::AcqRel);
        }
        let v = psa.map_or(Psa::UNMAPPED, |p| p.0);
        match self.l2p[lpn.0 as usize].swap(v, Ordering::AcqRel) {
            Psa::UNMAPPED => None,
            old => Some(Psa(old)),
        }
    }

    /// A copy of the raw table (for checkpoints; the caller has quiesced all writers).
    pub fn snapshot(&self) -> Vec<u32> {
        self.l2p.iter().map(|e| e.load(Ordering::Acquire)).collect()
    }

    /// Number of map chunks.
    pub fn chunks(&self) -> usize {
        self.l2p.len().div_ceil(CHUNK as usize)
    }

    /// Number of chunks changed since the last checkpoint.
    pub fn dirty_chunks(&self) -> usize {
        self.dirty
            .iter()
            .map(|w| w.load(Ordering::Acquire).count_ones() as usize)
            .sum()
    }

    /// Forgets the change tracking (a full checkpoint covers everything).
    pub fn clear_dirty(&self) {
        self.dirty
            .iter()
            .for_each(|w| w.store(0, Ordering::Release));
    }

    /// Takes the changed chunks and their entries, clearing their change bits (the caller has
    /// quiesced all writers).
    pub fn take_dirty(&self) -> Vec<(u32, Vec<u32>)> {
        let mut out = Vec::new();
        for (wi, w) in self.dirty.iter().enumerate() {
            let mut bits = w.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let c = wi * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let start = c * CHUNK as usize;
                let end = (start + CHUNK as usize).min(self.l2p.len());
                let entries = self.l2p[start..end]
                    .iter()
                    .map(|e| e.load(Ordering::Acquire))
                    .collect();
                out.push((c as u32, entries));
            }
        }
        out
    }

    /// Replaces the whole table (recovery, before the FTL is shared).
    pub fn load(&self, entries: &[u32]) {
        for (e, v) in self.l2p.iter().zip(entries) {
            e.store(*v, Ordering::Release);
        }
    }

    /// Number of buffered pages across all stripes (for invariant checks and stats).
    pub fn overlay_len(&self) -> usize {
        self.stripes.iter().map(|s| s.0.lock().overlay.len()).sum()
    }

    /// Bytes of RAM the table uses (grows with the exported size).
    pub fn memory_bytes(&self) -> usize {
        self.l2p.len() * 4
    }

    /// Bytes of RAM the stripes use (fixed, whatever the size).
    pub fn fixed_bytes(&self) -> usize {
        self.stripes.len() * std::mem::size_of::<Padded>()
    }
}

/// Several stripe locks held at once (see [`MappingTable::lock_range`]).
pub struct RangeGuard<'a> {
    guards: Vec<MutexGuard<'a, Stripe>>,
    slot: Vec<usize>,
}

impl RangeGuard<'_> {
    /// The stripe of `lpn`, which must be inside the locked range.
    pub fn stripe(&mut self, lpn: Lpn) -> &mut Stripe {
        let i = self.slot[lpn.0 as usize % STRIPES];
        &mut self.guards[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get() {
        let m = MappingTable::new(10);
        assert_eq!(m.get(Lpn(3)), None);
        assert_eq!(m.set(Lpn(3), Some(Psa(7))), None);
        assert_eq!(m.get(Lpn(3)), Some(Psa(7)));
        assert_eq!(m.set(Lpn(3), None), Some(Psa(7)));
        assert_eq!(m.snapshot()[3], Psa::UNMAPPED);
    }

    #[test]
    fn prefetch_is_only_a_hint() {
        let m = MappingTable::new(3000);
        m.set(Lpn(2999), Some(Psa(5)));
        // In range, past the stripes' count, and past the table's end (ignored).
        for l in [0, 1023, 1024, 2999, 3000, u32::MAX] {
            m.prefetch(Lpn(l));
        }
        assert_eq!(m.get(Lpn(2999)), Some(Psa(5)));
        assert_eq!(m.get(Lpn(0)), None);
    }
}
