//! nand-model: a file-backed, emulated multi-channel, multi-bank NAND SSD for ftld.
//!
//! It enforces the flash rules, models per-bank and per-channel timing, injects faults, and keeps
//! everything (page data, OOB, block states) in one memory-mapped image file, so a programmed
//! page survives anything short of losing the file — including `kill -9` of the process. It never
//! sees logical addresses: the FTL above it addresses [`PageAddr`]s and [`BlockAddr`]s.
//!
//! ```no_run
//! use nand_model::{preset, NandDevice, PageAddr, TimingMode};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = preset("k9-003").ok_or("no preset")?.config.scaled_to(64 << 20);
//! let dev = NandDevice::create("/tmp/nand.img".as_ref(), &config, TimingMode::Real)?;
//! let page = vec![0u8; dev.geometry().page_size as usize];
//! dev.program(PageAddr::new(0, 0, 0), &page, b"oob bytes")?.wait(); // or `.await`
//! # Ok(()) }
//! ```
//!
//! # Image layout
//!
//! One file, every region 4 KiB-aligned, created sparse:
//!
//! | region | size | contents |
//! |---|---|---|
//! | header | 4 KiB | magic `FTLDNAND`, format version 2, geometry, timing, endurance, interconnect, uuid, creation time, CRC32 (all little-endian; table in `header.rs`) |
//! | block table | 16 B per block | `erase_count` u32, `flags` u32 (bit 0: bad), `programmed_pages` u32, reserved u32 |
//! | frame table | 4 B per page | which of its bank's frames holds the page's data: 0 = its own (same index), else frame + 1; page index = `(bank * blocks_per_bank + block) * pages_per_block + page` |
//! | page data | `total_pages * page_size` | the frames, bank-major (a bank's pages only use its own frames) |
//! | OOB | `total_pages * oob_size` | page-index order |
//!
//! Frames exist so a copyback costs no data copy: the destination page takes the source's
//! frame, and a shared frame is never written (see `bankmem.rs`). A fresh image has every entry
//! 0, so a page's data sits at its own index until the first copyback.
//!
//! A bank's table entries, data and OOB are each contiguous, so banks own disjoint byte ranges.
//! Writes go through a shared mapping (`MAP_SHARED`): a store is in the page cache when it
//! executes, so it survives the death of the process without any syscall. A program writes data
//! and OOB first and the block's `programmed_pages` last (release-ordered), so a process killed
//! mid-program leaves the page unprogrammed (it reads as erased). Only a crash of the *machine*
//! can tear a page (the page cache may write back out of order); the FTL's own OOB CRC catches
//! that. [`NandDevice::sync`] (`msync` + `fsync`) is what survives the machine.
//!
//! Sparse means the first store into each 4 KiB of the file is a page fault that allocates and
//! maps a page (2.3 us on tmpfs on a small PVM guest: a fresh image's first pass runs at the
//! kernel's allocation speed). [`NandDevice::preallocate`] allocates the whole file up front
//! (and on tmpfs maps it in); without it, with timing `off` and `virtual` a thread maps each
//! block in when its first page is programmed (`prefault.rs`).
//!
//! Opening checks magic, version, CRC, geometry validity, the expected geometry (field by field)
//! and the file length, and takes an exclusive POSIX `fcntl` lock; each failure is its own
//! [`ImageError`] naming the file. A second process gets [`ImageError::Locked`] with the holder's
//! pid. POSIX locks are per process, so a second open in the *same* process is refused by an
//! in-process registry instead (same error, own pid), checked before the file is opened because
//! closing any descriptor of a locked file would drop the process's lock. The lock is advisory:
//! a program that ignores it and truncates the file under an open device makes the next access
//! to the lost range fault (SIGBUS), as with any mapped file.
//!
//! # Timing model
//!
//! NVMeVirt-style analytical timeline computed at submission: each bank and each controller has
//! a "free at" time (see `timeline.rs`). Transfers go through a controller: under the default
//! **TMCD** interconnect a channel's one controller (so "the channel" below), under **PMCD**
//! (`NandConfig::interconnect`, thesis ch. 4) whichever of N controllers frees up first, for any
//! bank (see `interconnect.rs`).
//!
//! - read: the bank is busy `t_read`, then `data.len() + oob.len()` bytes cross the channel
//!   (column reads move only what is asked for); the bank stays busy until the transfer ends.
//! - program: page + OOB cross the channel (when both the bank and a controller are free), then
//!   the bank is busy `t_prog`.
//! - erase: the bank is busy `t_erase`.
//! - copyback (a page moved to another page of the same bank through the page register): the
//!   bank is busy `t_read`, the OOB bytes asked for cross the channel, then the bank is busy
//!   `t_prog`; the page data never crosses the channel.
//!
//! `t_read` and `t_prog` are the page's own: a multi-level cell ([`CellType`] MLC, TLC, QLC)
//! gives each page type (LSB, CSB, MSB, TSB; page `p` of a block is type `p % bits`, MQSim's
//! pairing order) its own latencies ([`CellTiming`]), and a block worn by `erase_count` P/E
//! cycles reads with `min(erase_count / K, max)` extra sensing steps ([`ReadRetry`]).
//!
//! A bank with `planes > 1` ([`NandConfig::planes`]; block `b` is in plane `b % planes`) runs a
//! multi-plane program or read ([`NandDevice::program_planes`], [`NandDevice::read_planes`]) of
//! one page per plane at one page index for one array time; the pages' transfers still cross
//! the channel one after another.
//!
//! With [`Suspend`] enabled, a read that reaches a bank in a program's or erase's array time
//! suspends it (`t_suspend`), runs, and the operation resumes (`t_resume`) and completes that
//! much later: its [`Completion`] follows the moved end. An operation submitted inside an
//! [`ArrivalScope`] counts from the request's arrival instead of its submission (NVMeVirt's
//! accounting: the emulator's own processing time is absorbed, not added), and one submitted
//! after the thread waited for another from that one's modelled end (a chain of dependent
//! operations, as a GC step's, does not add the thread's wake-ups between them).
//!
//! Banks run in parallel; a controller carries one transfer at a time (TMCD: one per channel). Transfer time is
//! `bytes / channel_bytes_per_sec`, rounded up to the nanosecond. The data effect happens at
//! submission; the returned [`Completion`] carries the modelled completion time. With
//! [`TimingMode::Real`] `Completion::wait` waits until it the way the device's [`TimerMode`]
//! says (`sleep`: absolute `clock_nanosleep` with the thread's timer slack lowered to 1 ns;
//! `hybrid`, the default: that until a learnt margin before the deadline, then a spin on the
//! clock; `spin`: a spin) and `Completion::into_future` (or `.await`) is woken by a
//! crate-global timer thread (`FUTEX_WAIT_BITSET` with an absolute monotonic deadline, also
//! 1 ns slack; with `hybrid`, a lone waiting future is woken a margin early and spins the rest
//! on its own thread) — never early, runtime-agnostic, no tokio. An event loop may drive that
//! timer instead, through a timerfd ([`EventLoopTimer`]; `ftld serve` does, from its tokio
//! runtime), which spares a wake-up per expiry. With [`TimingMode::Off`] deadlines are
//! "now" and waits return at once; busy time is still accounted with the modelled durations.
//! With [`TimingMode::Virtual`] the timeline is the same but "now" is the device's [`SimClock`]
//! (simulated nanoseconds, set by a simulation driver) and waiting moves that clock to the
//! deadline instead of sleeping: a run takes as long as its CPU work, and as nothing reads the
//! host's clock, the same submissions give the same times on any machine.
//! Faults take their modelled time on the timeline too (the chip did run the operation), but the
//! error is returned at once; rule violations never reach the timeline.
//!
//! # Timing accuracy
//!
//! Completion error = wake-up time minus deadline, queue depth 1, `k9-003` timing, measured with
//!
//! ```text
//! cargo run --release -p nand-model --example timing_error
//! ```
//!
//! Measured on the development machine (a 2-vCPU KVM guest, clocksource tsc, otherwise idle;
//! 3000 reads and programs and ~350 erases per row; `cpu/op` is the process's CPU time per
//! operation, timer thread included):
//!
//! | op / wait style | sleep p50 | sleep p99 | hybrid p50 | hybrid p99 | spin p50 | spin p99 | cpu/op sleep / hybrid / spin |
//! |---|---:|---:|---:|---:|---:|---:|---|
//! | read / `wait` | 25.0 us | 36.1 us | 0.1 us | 0.1 us | 0.1 us | 0.1 us | 20 / 42 / 76 us |
//! | program / `wait` | 25.5 us | 42.9 us | 0.1 us | 0.2 us | 0.1 us | 0.1 us | 30 / 41 / 251 us |
//! | erase / `wait` | 27.2 us | 35.0 us | 0.1 us | 11.5 us | 0.1 us | 0.7 us | 19 / 38 / 1501 us |
//! | read / future | 28.0 us | 37.2 us | 0.1 us | 0.1 us | 0.1 us | 0.1 us | 26 / 65 / 58 us |
//! | program / future | 28.5 us | 46.4 us | 0.1 us | 10.7 us | 0.1 us | 5.6 us | 27 / 76 / 63 us |
//! | erase / future | 28.6 us | 153 us | 0.1 us | 0.5 us | 0.1 us | 0.6 us | 28 / 93 / 41 us |
//!
//! The sleep floor (~25 us) is the guest's timer-interrupt wake-up path; hybrid absorbs it for
//! about a margin of spinning per wait (learnt here: 52 us for blocking waits, 51-131 us for
//! futures, pulled up by the few wake-ups that came hundreds of microseconds late). Runs vary
//! with the host's noise: an earlier run gave hybrid p99 1.4-13 us, one under load 4-28 us, and
//! a later one on a slower 2-vCPU Firecracker guest (2000 ops per row) hybrid p50 0.1-0.6 us,
//! p99 3.1-19.0 us, with spin no better (p99 4.4-20.7 us: the guest losing its CPU).
//! Under CPU contention the tail is the scheduler's. (Before the timer modes, on the same
//! machine under parallel builds: p50 23-54 us, p99 119-783 us.)
//!
//! **Idle CPUs.** On a guest whose idle vCPUs halt at once (`cpuidle-haltpoll` with
//! `guest_halt_poll_ns=0`, as the development machine), waking a sleeping waiter is a VM exit,
//! and hybrid's margins grow to 120-365 us. [`IdlePollHold`] asks the kernel to keep idle CPUs
//! polling (`/dev/cpu_dma_latency` = 0); `ftld serve` holds it with timing real, and
//! `timing_error` does unless `--no-idle-poll`. 2026-11-27, two alternations: margins 45-80 us
//! instead of 98-244 us, about half the CPU per wait, hybrid p99 2.0-12.5 us instead of
//! 1.7-42.3 us (`benches/README.md`, timing section).
//!
//! A completion is never early (tests check it); the lateness is the kernel's wake-up latency.
//!
//! # Flash rules
//!
//! Returned as typed [`NandError`]s and counted by [`NandDevice::violations`] (a correct FTL
//! never triggers any): address out of range; program of a page that is not the block's next
//! free page ([`NandError::NotNextPage`]) or of a programmed page
//! ([`NandError::AlreadyProgrammed`]); any read/program/erase of a bad block; a data buffer that
//! is not exactly `page_size` for program or runs past the page end for read, an OOB buffer
//! longer than `oob_size`.
//!
//! Semantics the FTL relies on:
//! - A page at or past the block's `programmed_pages` is erased: reads return 0xFF data and OOB,
//!   without error.
//! - `program` stores `oob.len()` OOB bytes; the rest of the page's OOB reads back 0xFF.
//! - `erase` sets `programmed_pages` to 0 and increments `erase_count`.
//! - `mark_bad` is persistent and idempotent; `block_state` works on bad blocks.
//!
//! # Faults
//!
//! [`NandError::is_fault`] is true for these; they are not violations:
//! - `ProgramFailed`: the page is consumed (the block's write pointer moves past it) and reads
//!   back, without error, as noise (neither the data nor 0xFF, OOB included). Rewrite the data
//!   elsewhere and retire the block. For a multi-plane program `failed_mask` names every page
//!   that failed (the others were programmed).
//! - `EraseFailed`: the block is now bad (persisted), contents and counts unchanged.
//! - `Uncorrectable`: a read fault; one-shot at an address, or random: then the page's next read
//!   is spared, so the caller's retry succeeds unless another read of the page (a GC copy) came
//!   between. The buffers are left unspecified.
//! - `WornOut`: an erase of a block whose `erase_count` reached the endurance; the block is now
//!   bad (persisted).
//!
//! Inject them with [`FaultInjector`] ([`NandDevice::faults`]): one-shot at an address, or random
//! per-operation rates from a seed (a program or an erase fails by its address and its block's
//! erase count, whichever thread issues it; reads by a seeded sequence), and a
//! deterministic power cut (`FaultInjector::power_cut_after(n)`): the n-th operation that
//! changes the medium is torn (a program leaves half its data and a whole OOB), nothing after
//! it reaches the medium, and a crash test reopens the image to see what survived.
//!
//! # Concurrency model
//!
//! [`NandDevice`] is `Send + Sync` and every method takes `&self`.
//! - Each bank has a mutex guarding its region of the mapped image (block-table entries, data,
//!   OOB) and its timeline. Every operation takes exactly one bank lock, for the rule checks, the
//!   memcpy and the timeline update, so operations on one bank are linearizable and banks never
//!   contend with each other.
//! - Each controller pool (a TMCD channel, or PMCD's one pool) has a mutex over its controllers'
//!   timelines only, taken briefly *inside* a bank lock. **Lock order: bank, then controller
//!   pool.** Nothing holds two banks or two pools.
//! - The fault injector's mutex is taken inside the bank lock, only while faults are armed (an
//!   atomic flag short-circuits it otherwise).
//! - Statistics, in-flight counts and [`NandDevice::bank_load`] are lock-free atomics.
//! - The timer thread's heap has its own mutex, never held while waking a task.
//!
//! In-flight accounting: `inflight` counts operations submitted whose [`Completion`] (or the
//! future made from it) has not been waited or dropped; dropping decrements it exactly once.
//!
//! Linux only (mmap, `fcntl` locks, `prctl`, futex).

mod arrival;
mod backing;
mod bankmem;
mod clock;
mod completion;
mod config;
mod device;
mod error;
mod faults;
mod geometry;
mod header;
pub mod host_memory;
mod idle_poll;
#[doc(hidden)]
pub mod fuzzing {
    //! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz). Not an API.

    /// The image header decoder: magic, version, CRC, geometry and interconnect checks.
    pub fn header(bytes: &[u8]) {
        let _ = crate::header::decode(bytes);
    }

    /// A bank's frame table as read at open: the first two bytes give the bank's page count
    /// (1..=65536), the rest are its entries. Checks what a table that passes guarantees:
    /// every page's frame is inside the bank and no frame is shared more than 255 times.
    pub fn frame_table(bytes: &[u8]) {
        let Some((n, table)) = bytes.split_first_chunk::<2>() else {
            return;
        };
        let pages = usize::from(u16::from_le_bytes(*n)) + 1;
        let mut refs = vec![0u8; pages];
        let mut remapped = vec![0u64; pages.div_ceil(64)];
        let whole = &table[..table.len() / 4 * 4];
        // In two calls, as open reads the table in chunks.
        let (a, b) = whole.split_at(whole.len() / 8 * 4);
        let ok = crate::bankmem::count_frame_refs(a, 0, &mut refs, &mut remapped)
            .and_then(|()| {
                crate::bankmem::count_frame_refs(b, a.len() / 4, &mut refs, &mut remapped)
            })
            .is_ok();
        if ok {
            let entries = whole.len() / 4;
            assert!(entries <= pages, "accepted entries beyond the last page");
            let total: usize = refs.iter().map(|&r| usize::from(r)).sum();
            assert_eq!(total, entries, "every entry references exactly one frame");
            for (i, e) in whole.chunks_exact(4).enumerate() {
                let e = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                let f = crate::bankmem::frame_of_entry(e, i, pages).expect("validated");
                assert!(f < pages && refs[f] > 0);
                // Exactly the pages whose entry is not 0 are read through the mapping later.
                let bit = remapped[i / 64] & (1 << (i % 64)) != 0;
                assert_eq!(bit, e != 0, "page {i}'s remapped bit");
            }
        }
    }
}
mod image;
mod interconnect;
mod prefault;
mod presets;
mod stall_probe;
mod stats;
mod stream_copy;
mod timeline;
mod timer;
mod timing;
mod waiting;

pub use arrival::{last_wait_end_ns, note_blocking_wait, ArrivalScope};
pub use bankmem::BlockState;
pub use clock::{precise_sleep_until, SimClock};
pub use completion::{Completion, CompletionFuture};
pub use config::{NandConfig, MAX_PLANES, MIN_SCALED_BLOCKS_PER_BANK};
pub use device::{BankLoad, Copyback, CopybackCheck, NandDevice, PlaneProgram, PlaneRead};
pub use error::{BufferKind, GeometryError, ImageError, NandError};
pub use faults::{FaultCounts, FaultInjector, FaultRates};
pub use geometry::{
    BankId, BlockAddr, Geometry, PageAddr, MAX_PAGE_SIZE, MIN_OOB_SIZE, MIN_PAGE_SIZE,
};
pub use idle_poll::{current_cpu_latency_us, IdlePollHold, CPU_DMA_LATENCY};
pub use image::{
    block_entry_offset, image_holder, is_image_prefix, page_data_offset, page_oob_offset, Access,
};
pub use interconnect::{Interconnect, MAX_CONTROLLERS};
pub use presets::{preset, presets, Preset};
pub use stall_probe::{monotonic_ns, Stall, StallProbe, StallReport};
pub use stats::{BankStats, ChannelStats, NandStats, PrefaultCounts, TotalStats};
pub use timer::{installed_poll_window_ns, EventLoopTimer, EventLoopTimerError};
pub use timing::{
    CellTiming, CellType, ReadRetry, Suspend, Timing, TimingMode, MAX_READ_RETRY_STEPS,
};
pub use waiting::{learnt_margins_ns, TimerMode};
