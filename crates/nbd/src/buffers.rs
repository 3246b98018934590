//! Read buffers a connection keeps for its next reads.
//!
//! A read needs a buffer of the request's length for the backend to fill. A fresh
//! `vec![0; len]` costs more than it seems for large reads: 128 KiB is glibc's `mmap`
//! threshold, so such buffers come from pages the kernel faults in and zeroes, or from heap
//! memory `calloc` zeroes again, and then the backend overwrites every byte. Measured on
//! lftl-card with timing off, 128 KiB sequential reads at QD32: `memset` alone was 17.6 % of the
//! server's CPU. So the writer hands a reply's buffer back once it is sent, and the next read of
//! the connection takes it as it is.
//!
//! A taken buffer holds an earlier read's bytes of the same connection (or zeroes). That is
//! safe because [`crate::BlockBackend::read`] fills the whole buffer before it returns `Ok`,
//! and a failed read sends no data. At most [`MAX_KEPT_BYTES`] are kept per connection, so an
//! idle connection holds little memory; they are freed with the connection.

use parking_lot::Mutex;

/// Capacity a connection keeps at most: QD32 of 128 KiB reads.
pub(crate) const MAX_KEPT_BYTES: usize = 4 << 20;

/// The free read buffers of one connection.
#[derive(Default)]
pub(crate) struct ReadBuffers {
    /// Free buffers and their total capacity. Held only to push or take one.
    free: Mutex<(Vec<Vec<u8>>, usize)>,
}

impl ReadBuffers {
    /// A buffer of `len` bytes whose contents are unspecified (see the module doc): a kept one
    /// large enough if there is one, else a new zeroed one.
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let kept = {
            let mut free = self.free.lock();
            let (bufs, bytes) = &mut *free;
            // The newest first: with requests of one size it already has `len` bytes.
            bufs.iter().rposition(|b| b.capacity() >= len).map(|i| {
                let b = bufs.swap_remove(i);
                *bytes -= b.capacity();
                b
            })
        };
        match kept {
            Some(mut b) => {
                // Only bytes past the buffer's last length are written (zeroes).
                b.resize(len, 0);
                b
            }
            None => vec![0; len],
        }
    }

    /// Keeps `buf` for a later read, unless that would hold more than [`MAX_KEPT_BYTES`].
    pub(crate) fn put(&self, buf: Vec<u8>) {
        let mut free = self.free.lock();
        let (bufs, bytes) = &mut *free;
        if *bytes + buf.capacity() <= MAX_KEPT_BYTES {
            *bytes += buf.capacity();
            bufs.push(buf);
        }
    }

    /// Capacity kept now.
    #[cfg(test)]
    fn kept_bytes(&self) -> usize {
        self.free.lock().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_resized_and_bounded() {
        let pool = ReadBuffers::default();
        let mut a = pool.take(4096);
        assert!(a.len() == 4096 && a.iter().all(|&b| b == 0));
        a.fill(7);
        let cap = a.capacity();
        pool.put(a);
        assert_eq!(pool.kept_bytes(), cap);
        // A smaller read takes the kept buffer, shortened.
        let b = pool.take(512);
        assert_eq!((b.len(), b.capacity()), (512, cap));
        assert_eq!(pool.kept_bytes(), 0);
        pool.put(b);
        // A larger one than any kept buffer gets a new one; the kept one stays.
        let c = pool.take(8192);
        assert_eq!(c.len(), 8192);
        assert_eq!(pool.kept_bytes(), cap);
        // Growing a kept buffer zero-fills only the new part.
        let d = pool.take(600);
        assert!(d[..512].iter().all(|&b| b == 7) && d[512..].iter().all(|&b| b == 0));
        // The bound: buffers past MAX_KEPT_BYTES are freed, not kept.
        for _ in 0..(MAX_KEPT_BYTES / (1 << 20) + 2) {
            pool.put(Vec::with_capacity(1 << 20));
        }
        assert!(pool.kept_bytes() <= MAX_KEPT_BYTES);
        assert!(pool.kept_bytes() >= MAX_KEPT_BYTES - (1 << 20));
    }
}
