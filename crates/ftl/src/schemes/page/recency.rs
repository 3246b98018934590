//! Hot/cold separation by update recency: which logical pages the host rewrote recently.
//!
//! Under skewed writes (say 80 % of them to 20 % of the space) a block that mixes hot pages,
//! soon overwritten, with cold ones, rarely overwritten, is a poor GC victim for a long time:
//! its hot pages die quickly, its cold ones make GC copy them again and again. Writing hot and
//! cold pages to different open blocks lets hot blocks empty almost completely before GC picks
//! them (the separation of Chiang et al.'s DAC and of multi-stream SSDs; paper 000's GC already
//! keeps GC-moved data, which is cold by survival, apart from host writes).
//!
//! A page counts as hot when the host wrote it before within the last *window* host pages.
//! Two bitmaps, one bit per logical page, record the writes of the current and the previous
//! epoch of `window / 2` pages; at an epoch boundary the older one is cleared and reused. So
//! "hot" means "written within the last `window / 2` to `window` pages" (3/4 of a window on
//! average), at 2 bits per logical page (0.25 B/page, against the map's ~4.3). The window
//! defaults to the exported capacity N: under 80/20 a hot page is rewritten every ~N/4 host
//! pages on average and a cold one every ~4N, so one expects ~95 % of hot rewrites judged hot
//! and ~83 % of cold ones cold (`waf_limit.py` measures 77 % of the host pages hot against
//! 80 % sent to the hot fifth).
//!
//! The bitmaps live in RAM only: after a restart every page starts cold, which costs a window
//! of less effective separation, never correctness (placement does not affect what is read).

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Recent host writes per logical page (see the module docs). Shared by every writer.
pub struct WriteRecency {
    /// Host pages per epoch (half the window), at least 1.
    epoch_len: u64,
    /// One bit per logical page; `bits[e % 2]` records epoch `e`'s writes.
    bits: [Vec<AtomicU64>; 2],
    /// Host pages noted so far (each committed data page counts its data slots).
    noted: AtomicU64,
    /// The current epoch.
    epoch: AtomicU64,
    /// Serialises epoch changes (clearing the reused bitmap). Never held with another lock.
    turn: Mutex<()>,
}

impl WriteRecency {
    /// A tracker for `lpns` logical pages and a window of `window` host pages.
    pub fn new(lpns: u32, window: u64) -> WriteRecency {
        let words = (lpns as usize).div_ceil(64);
        let bitmap = || (0..words).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        WriteRecency {
            epoch_len: (window / 2).max(1),
            bits: [bitmap(), bitmap()],
            noted: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            turn: Mutex::new(()),
        }
    }

    fn word_bit(lpn: u32) -> (usize, u64) {
        ((lpn / 64) as usize, 1u64 << (lpn % 64))
    }

    /// Whether the host wrote `lpn` within the window (before the write being placed, which is
    /// noted only when it commits). An LPN beyond the tracked range is cold.
    pub fn is_hot(&self, lpn: u32) -> bool {
        let (w, m) = Self::word_bit(lpn);
        self.bits
            .iter()
            .any(|b| b.get(w).is_some_and(|x| x.load(Ordering::Relaxed) & m != 0))
    }

    /// Notes host writes of `lpns` (a committed page's data slots).
    pub fn note(&self, lpns: impl Iterator<Item = u32>) {
        for lpn in lpns {
            let n = self.noted.fetch_add(1, Ordering::Relaxed);
            let e = n / self.epoch_len;
            if e > self.epoch.load(Ordering::Acquire) {
                self.advance(e);
            }
            let cur = self.epoch.load(Ordering::Acquire);
            let (w, m) = Self::word_bit(lpn);
            if let Some(x) = self.bits[(cur % 2) as usize].get(w) {
                x.fetch_or(m, Ordering::Relaxed);
            }
        }
    }

    /// Moves to epoch `e`: the bitmap it reuses held epoch `e - 2` (both are stale if more
    /// than one epoch passed, which concurrent noters can cause). A bit set concurrently in a
    /// bitmap being cleared may be lost: one page misjudged cold, never wrong data.
    fn advance(&self, e: u64) {
        let _turn = self.turn.lock();
        let cur = self.epoch.load(Ordering::Acquire);
        if e <= cur {
            return;
        }
        let clear = |b: &Vec<AtomicU64>| b.iter().for_each(|x| x.store(0, Ordering::Relaxed));
        clear(&self.bits[(e % 2) as usize]);
        if e > cur + 1 {
            clear(&self.bits[((e + 1) % 2) as usize]);
        }
        self.epoch.store(e, Ordering::Release);
    }

    /// Bytes of RAM the bitmaps take.
    pub fn memory_bytes(&self) -> usize {
        self.bits.iter().map(|b| b.len() * 8).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::WriteRecency;

    #[test]
    fn a_page_is_hot_from_its_first_write_until_two_epochs_pass() {
        // Window 8: epochs of 4 host pages.
        let r = WriteRecency::new(1000, 8);
        assert!(!r.is_hot(7), "never written");
        r.note([7].into_iter()); // epoch 0
        assert!(r.is_hot(7));
        r.note([100, 101, 102].into_iter()); // epoch 0 full
        r.note([200, 201, 202, 203].into_iter()); // epoch 1
        assert!(r.is_hot(7), "written in the previous epoch");
        r.note([300].into_iter()); // epoch 2 clears epoch 0's bits
        assert!(!r.is_hot(7), "older than the window");
        assert!(r.is_hot(200) && r.is_hot(300) && !r.is_hot(100));
        assert!(!r.is_hot(5000), "beyond the tracked range");
        assert_eq!(r.memory_bytes(), 2 * 16 * 8);
    }

    #[test]
    fn skipped_epochs_clear_both_bitmaps() {
        let r = WriteRecency::new(64, 2);
        r.note([1].into_iter());
        // Simulate noters racing past several epoch boundaries before anyone advanced. Epoch
        // 11 reuses the bitmap of odd epochs: page 1's bit (epoch 0, even) goes only if the
        // other bitmap is cleared too.
        r.noted.store(11, std::sync::atomic::Ordering::Relaxed);
        r.note([2].into_iter());
        assert!(!r.is_hot(1) && r.is_hot(2));
    }
}
