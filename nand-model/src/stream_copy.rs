//! Copying a programmed page into the image with stores that bypass the CPU caches.
//!
//! A program writes a whole page to a frame that no cache holds (the frame was last touched
//! when its block was programmed before, long ago), and a multi-page write spreads its pages
//! over every bank, so the destinations form one cold stream per bank. An ordinary `memcpy`
//! first reads each destination line into the cache (read for ownership) and evicts useful
//! lines to make room; with 16 interleaved streams the hardware prefetcher no longer hides that
//! read. Non-temporal stores write whole lines without reading them. Measured on this project's
//! 2-vCPU build machine (1.2 GiB tmpfs mapping, 4 KiB pages round-robin over 16 streams): 12 us
//! per 128 KiB with `memcpy`, 5.5 us with streaming stores, the same as `memcpy` of one
//! contiguous 128 KiB (`benches/README.md`, "Streaming stores for the copy into the image").

use std::ptr;

/// Copies `src` to `dst` (`src.len()` bytes), the 64-byte lines with non-temporal stores where
/// the CPU has them (x86_64: SSE2, always present) and `dst` is 16-byte aligned, else with an
/// ordinary copy. Ends with a store fence, so the bytes are ordered before any later store of
/// this thread (the bank lock's release, the block table's `programmed_pages`), exactly as an
/// ordinary copy's would be.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes, must not overlap `src`, and no other
/// thread may access those bytes during the call (the same contract as
/// [`ptr::copy_nonoverlapping`]).
pub(crate) unsafe fn copy_streaming(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        const LINE: usize = 64;
        if dst.addr().is_multiple_of(16) && src.len() >= LINE {
            let lines = src.len() / LINE;
            let s = src.as_ptr();
            for l in 0..lines {
                let o = l * LINE;
                // SAFETY: SSE2 is part of the x86_64 baseline, so the intrinsics are available.
                // `o + 64 <= src.len()`, so the four 16-byte loads read inside `src` (unaligned
                // loads need no alignment); the four stores write `dst[o..o + 64]`, inside the
                // caller's range, each 16-byte aligned because `dst` is and `o` is a multiple of
                // 64, as `_mm_stream_si128` requires.
                unsafe {
                    let a = _mm_loadu_si128(s.add(o).cast::<__m128i>());
                    let b = _mm_loadu_si128(s.add(o + 16).cast::<__m128i>());
                    let c = _mm_loadu_si128(s.add(o + 32).cast::<__m128i>());
                    let d = _mm_loadu_si128(s.add(o + 48).cast::<__m128i>());
                    _mm_stream_si128(dst.add(o).cast::<__m128i>(), a);
                    _mm_stream_si128(dst.add(o + 16).cast::<__m128i>(), b);
                    _mm_stream_si128(dst.add(o + 32).cast::<__m128i>(), c);
                    _mm_stream_si128(dst.add(o + 48).cast::<__m128i>(), d);
                }
            }
            let done = lines * LINE;
            // SAFETY: the tail `done..len` lies inside both ranges (caller's contract); the
            // fence orders the streaming stores before every later store of this thread, which
            // is what makes them visible to the next holder of the bank lock.
            unsafe {
                ptr::copy_nonoverlapping(s.add(done), dst.add(done), src.len() - done);
                _mm_sfence();
            }
            return;
        }
    }
    // SAFETY: the caller's contract is `copy_nonoverlapping`'s.
    unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

#[cfg(test)]
mod tests {
    use super::copy_streaming;

    /// Every length around the 64-byte line, at an aligned and at each misaligned destination,
    /// from a misaligned source: the bytes arrive exactly, and nothing around them changes.
    #[test]
    fn copies_exactly_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut buf = vec![0xAAu8; 9000 + 256];
        let base = buf.as_ptr().align_offset(64);
        for len in [0, 1, 15, 63, 64, 65, 127, 128, 4096, 4100, 8192 + 17] {
            for dst_off in [0, 1, 8, 16, 48] {
                for src_off in [0, 1, 5] {
                    buf.fill(0xAA);
                    let s = &src[src_off..src_off + len];
                    let at = base + 64 + dst_off;
                    // SAFETY: `at + len <= buf.len()` (base < 64, len + offsets < 9000 + 128),
                    // `src` is a different allocation, and nothing else touches `buf`.
                    unsafe { copy_streaming(buf.as_mut_ptr().add(at), s) };
                    assert_eq!(
                        &buf[at..at + len],
                        s,
                        "len {len} dst+{dst_off} src+{src_off}"
                    );
                    assert!(
                        buf[..at].iter().all(|&b| b == 0xAA),
                        "wrote before the range"
                    );
                    assert!(
                        buf[at + len..].iter().all(|&b| b == 0xAA),
                        "wrote after the range"
                    );
                }
            }
        }
    }
}
