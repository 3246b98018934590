//! The write cache's index: which logical pages have a newer version in RAM than on flash, and
//! the per-page locks every scheme takes around its map.
//!
//! # Structure
//! `stripes`: [`STRIPES`] mutexes; logical page `lpn` belongs to stripe `lpn % STRIPES`. A
//! stripe's lock protects (a) its `overlay`: the newest version of each of its pages that is
//! still in a write buffer, (b) its partial-write locks (`rmw`, each with a flag a whole-page
//! write or trim of the page sets, so the partial write redoes its edit), and (c) the scheme's
//! map entries of its pages (a scheme updates an entry only under the page's stripe, see
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
//!   in which the overlay saw the writes. A programmed slot commits into the map if the
//!   overlay still holds its sequence number (the entry goes), or holds a newer one whose
//!   `floor` the slot's number reaches (the entry stays, its floor moves past the slot). A
//!   trim, or a newer version already committed, keeps it out of the map; while that trim's
//!   record is still in RAM the slot is held valid as a late zombie (`map::PageMap`). So the
//!   newest *programmed* version, the one a crash leaves, is never erased: a flushed version
//!   superseded only by writes still in RAM stays in the map, and no GC or merge erases it
//!   (before, such a slot was garbage at once, and a merge of its block lost flushed data when
//!   the power failed before the newer version was programmed).
//!
//! Lock order: stripe, then anything else (the trim log's and the pending trims' mutexes and a
//! bank's allocator may be taken while a stripe is held; never the reverse). Several stripes
//! only through [`WriteCache::lock_range`], in ascending order.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
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
    /// The oldest sequence number of this page that may still commit into the map while this
    /// newer version waits in a buffer (see the invariants in the module doc): an older
    /// version programmed meanwhile becomes the map's (durable) version, so GC and merges keep
    /// it until this one is on flash. A page buffered with no version in the overlay starts at
    /// its own number (an older slot still in flight was superseded by a trim, or by a newer
    /// version already committed); a newer write keeps the floor; a commit below `seq` raises
    /// it past itself.
    pub floor: u64,
}

/// Hashes a stripe's logical page numbers. They all share their remainder modulo
/// [`STRIPES`], so the quotient is what tells them apart; a multiply by an odd constant (a
/// bijection on the low bits, which pick the bucket, and a mix into the high bits, which the
/// table compares first) spreads consecutive quotients. SipHash, the default, cost about 3 %
/// of a 128 KiB write's CPU (an insert and a remove per 4 KiB page); page numbers are not
/// attacker-chosen keys that could be made to collide beyond a request's own range.
#[derive(Default)]
pub struct LpnHasher(u64);

impl Hasher for LpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u32(&mut self, lpn: u32) {
        self.0 = u64::from(lpn / STRIPES as u32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u32 keys are hashed here; anything else still hashes correctly (FNV-1a).
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A map keyed by one stripe's logical page numbers.
pub type LpnMap<V> = HashMap<u32, V, BuildHasherDefault<LpnHasher>>;

/// A page locked for a read-modify-write (a write of part of it).
#[derive(Default)]
pub struct RmwEntry {
    /// The tasks waiting for the lock.
    pub waiters: Vec<Waker>,
    /// A whole-page write or a trim of the page landed since the holder read it: its edit of
    /// what it read would undo that request, so it edits the newer version instead (or reads
    /// again).
    pub changed: bool,
}

/// State guarded by one stripe lock.
#[derive(Default)]
pub struct Stripe {
    pub overlay: LpnMap<Buffered>,
    /// Pages locked for a read-modify-write.
    pub rmw: LpnMap<RmwEntry>,
}

impl Stripe {
    /// A whole-page write or a trim changes `lpn`: a read-modify-write holding it must redo its
    /// edit (see [`RmwEntry::changed`]).
    pub fn note_changed(&mut self, lpn: u32) {
        if !self.rmw.is_empty() {
            if let Some(e) = self.rmw.get_mut(&lpn) {
                e.changed = true;
            }
        }
    }
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
            g.stripe(Lpn(l)).rmw.insert(l, RmwEntry::default());
        }
        drop(g);
        assert_eq!(c.lock(Lpn(0)).rmw.len(), 1);
        assert_eq!(c.lock(Lpn(STRIPES as u32 + 2)).rmw.len(), 1);
        assert!(c.lock(Lpn(5)).rmw.is_empty());
        for l in [0, 1023, 1024, u32::MAX] {
            c.prefetch(Lpn(l));
        }
    }

    #[test]
    fn one_stripes_pages_hash_apart() {
        use std::hash::BuildHasher;
        let h = BuildHasherDefault::<LpnHasher>::default();
        // Pages of stripe 7: the low 6 bits (a 64-bucket table) of 64 consecutive quotients are
        // all different, and so are the top 7 bits hashbrown compares first, mostly.
        let hashes: Vec<u64> = (0..64u32)
            .map(|q| h.hash_one(q * STRIPES as u32 + 7))
            .collect();
        let low: std::collections::HashSet<u64> = hashes.iter().map(|x| x & 63).collect();
        assert_eq!(low.len(), 64);
        let top: std::collections::HashSet<u64> = hashes.iter().map(|x| x >> 57).collect();
        assert!(top.len() > 32, "{} distinct tags", top.len());
        let mut m: LpnMap<u32> = LpnMap::default();
        for q in 0..10_000u32 {
            m.insert(q * STRIPES as u32 + 7, q);
        }
        assert!((0..10_000u32).all(|q| m.get(&(q * STRIPES as u32 + 7)) == Some(&q)));
    }
}
