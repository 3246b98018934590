//! [`IdlePollHold`]: keeps the host's idle CPUs polling instead of halting while timing-real
//! waits need prompt wake-ups.
//!
//! A sleeping wait ends when the kernel wakes its thread on a CPU. If that CPU was idle in a
//! halt state, it must first leave it: on a KVM guest a halted vCPU is a VM exit, and waking it
//! is the host's scheduling decision (tens to hundreds of microseconds on a busy host). The
//! hybrid timer absorbs that by waking a learnt margin early and spinning the rest, so a slow
//! wake-up path costs a long margin of spinning per wait, and wake-ups later than the margin
//! land late. The kernel's PM QoS interface lets a process ask for a CPU wake-up latency:
//! writing 0 to `/dev/cpu_dma_latency` and keeping the file open makes the idle governor pick
//! only its polling state (`POLL`), so a woken thread runs at once. `cyclictest`, tuned's
//! latency profiles and DPDK-style benchmarks do the same; the request ends when the file is
//! closed (also when the process dies).
//!
//! Measured with `timing_error` on a 2-vCPU KVM guest (`cpuidle-haltpoll` with
//! `guest_halt_poll_ns=0`, k9-003 timing, timer `hybrid`, four alternations on 2026-11-27):
//! learnt margins 35-80 us instead of 98-365 us, CPU per wait about half, and p99 lateness
//! 0.9-12.5 us instead of 1.7-59.6 us (`benches/README.md`, timing section). Late wake-ups of
//! milliseconds remain where the host deschedules the vCPU; polling cannot help those.
//!
//! The cost is the idle CPUs' power (they spin in the idle loop instead of halting); no CPU time
//! is charged to this process. Only root may open the file (mode 0600), so a failure is an
//! error the caller reports and serves on without it.
//!
//! Holds are counted: the file is opened by the first and closed when the last is dropped.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use parking_lot::Mutex;

/// The kernel's PM QoS device for the CPU wake-up latency.
pub const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// The open request and how many holds share it.
static REQUEST: Mutex<Option<(File, usize)>> = Mutex::new(None);

/// While alive, the kernel keeps idle CPUs polling (a CPU wake-up latency of 0 us). See the
/// module documentation.
#[derive(Debug)]
#[must_use = "the request ends when the hold is dropped"]
pub struct IdlePollHold(());

impl IdlePollHold {
    /// Asks for a CPU wake-up latency of 0 us (or shares the request already made).
    pub fn acquire() -> io::Result<IdlePollHold> {
        Self::acquire_at(Path::new(CPU_DMA_LATENCY))
    }

    fn acquire_at(path: &Path) -> io::Result<IdlePollHold> {
        let mut request = REQUEST.lock();
        match &mut *request {
            Some((_, holds)) => *holds += 1,
            None => {
                let mut f = OpenOptions::new().write(true).open(path)?;
                // The request is a binary s32 in microseconds (the kernel also takes text, but
                // only the binary form is documented for this device).
                f.write_all(&0i32.to_ne_bytes())?;
                *request = Some((f, 1));
            }
        }
        Ok(IdlePollHold(()))
    }

    /// How many holds share the open request (0: none, the file is closed).
    pub fn holds() -> usize {
        REQUEST.lock().as_ref().map_or(0, |(_, n)| *n)
    }
}

impl Drop for IdlePollHold {
    fn drop(&mut self) {
        let mut request = REQUEST.lock();
        if let Some((_, holds)) = &mut *request {
            *holds -= 1;
            if *holds == 0 {
                // Closing the file withdraws the request.
                *request = None;
            }
        }
    }
}

/// The wake-up latency the kernel currently grants (the strictest request of all processes),
/// in microseconds, read from `/dev/cpu_dma_latency`.
pub fn current_cpu_latency_us() -> io::Result<i32> {
    use std::io::Read;
    let mut b = [0u8; 4];
    File::open(CPU_DMA_LATENCY)?.read_exact(&mut b)?;
    Ok(i32::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds share one request: the file stays open until the last one goes, and while any is
    /// held the kernel grants a wake-up latency of 0. (As root, as CI runs; elsewhere the
    /// acquire fails with the open's own error, which is what a caller reports.) One test, not
    /// several: the count is process-wide and tests run in parallel.
    #[test]
    fn holds_share_one_request_and_the_kernel_grants_zero() {
        let e = IdlePollHold::acquire_at(Path::new("/nonexistent/cpu_dma_latency"))
            .expect_err("no such file");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(IdlePollHold::holds(), 0, "a failed acquire holds nothing");
        let a = match IdlePollHold::acquire() {
            Ok(h) => h,
            Err(e) => {
                // Only a missing device (no PM QoS in the kernel) or no permission may stop it.
                assert!(
                    matches!(
                        e.kind(),
                        io::ErrorKind::PermissionDenied | io::ErrorKind::NotFound
                    ),
                    "{e}"
                );
                // SAFETY: geteuid has no preconditions.
                let euid = unsafe { libc::geteuid() };
                assert_ne!(euid, 0, "root must be able to hold it");
                return;
            }
        };
        assert_eq!(IdlePollHold::holds(), 1);
        assert_eq!(current_cpu_latency_us().expect("readable by root"), 0);
        let b = IdlePollHold::acquire().expect("shares the open request");
        assert_eq!(IdlePollHold::holds(), 2);
        drop(a);
        assert_eq!(IdlePollHold::holds(), 1);
        assert_eq!(current_cpu_latency_us().expect("readable"), 0);
        drop(b);
        assert_eq!(IdlePollHold::holds(), 0);
    }
}
