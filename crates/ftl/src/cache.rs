//! The write cache's index: which logical pages have a newer version in RAM than on flash, and
//! the per-page locks every scheme takes around its map.
//!
//! # Structure
//! `stripes`: [`STRIPES`] mutexes; logical page `lpn` belongs to stripe `lpn % STRIPES`. A
//! stripe's lock protects (a) its `overlay`: the newest version of each of its pages that is
//! still in a write buffer, (b) its partial-write locks (`rmw`), and (c) the scheme's map
//! entries of its pages (a scheme updates an entry only under the page's stripe, see
//! `map::PageMap`).
//!
//! # Why 1024 stripes
//! LFTL locks single mapping entries (bit locks); a lock per entry would cost more memory than the
//! table itself. With `T` threads touching random pages, two of them meet on a stripe with
//! probability about `T^2 / (2 * STRIPES)`: under 4 % for 8 threads at 1024 stripes, while the
//! stripes cost 64 KiB (cache-line padded, so neighbours never false-share). Consecutive pages
//! land on consecutive stripes, so a sequential stream spreads over all of them.
//!
//! # Invariants
//! - A page's newest acknowledged version is in the overlay if it has one, else where the
//!   scheme's map says.
//! - Sequence numbers of one page are taken under its stripe lock, so their order is the order
//!   in which the overlay saw the writes; a buffered slot commits into the map only if the
//!   overlay still holds its sequence number (a newer write or a trim makes it garbage).
//!
//! Lock order: stripe, then anything else (the trim log's mutex and a bank's allocator may be
//! taken while a stripe is held; never the reverse). Several stripes only through
//! [`WriteCache::lock_range`], in ascending order.

use std::collections::HashMap;
use std::task::Waker;

use parking_lot::{Mutex, MutexGuard};

use crate::layout::Lpn;

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

/// The stripes.
pub struct WriteCache {
    stripes: Box<[Padded]>,
}

impl Default for WriteCache {
    fn default() -> Self {
        WriteCache::new()
    }
}

impl WriteCache {
    pub fn new() -> WriteCache {
        WriteCache {
            stripes: (0..STRIPES)
                .map(|_| Padded(Mutex::new(Stripe::default())))
                .collect(),
        }
    }

    /// Starts loading `lpn`'s stripe lock into the cache (see `map::PageMap::prefetch`).
    pub fn prefetch(&self, lpn: Lpn) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let s = &self.stripes[lpn.0 as usize % STRIPES];
            // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it is part of the
            // x86_64 baseline the crate is built for). A prefetch is only a hint: it reads
            // nothing into the program and never faults; the pointer is to a live field of
            // `self` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(s).cast()) };
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

    /// Number of buffered pages across all stripes (for invariant checks and stats).
    pub fn overlay_len(&self) -> usize {
        self.stripes.iter().map(|s| s.0.lock().overlay.len()).sum()
    }

    /// Bytes of RAM the stripes use (fixed, whatever the size).
    pub fn fixed_bytes(&self) -> usize {
        self.stripes.len() * std::mem::size_of::<Padded>()
    }
}

/// Several stripe locks held at once (see [`WriteCache::lock_range`]).
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
    fn range_guard_reaches_every_page_of_the_range() {
        let c = WriteCache::new();
        let mut g = c.lock_range(STRIPES as u32 - 2, 5);
        for l in STRIPES as u32 - 2..STRIPES as u32 + 3 {
            g.stripe(Lpn(l)).rmw.insert(l, Vec::new());
        }
        drop(g);
        assert_eq!(c.lock(Lpn(0)).rmw.len(), 1);
        assert_eq!(c.lock(Lpn(STRIPES as u32 + 2)).rmw.len(), 1);
        assert!(c.lock(Lpn(5)).rmw.is_empty());
        for l in [0, 1023, 1024, u32::MAX] {
            c.prefetch(Lpn(l));
        }
    }
}
