//! A probe of the host's scheduling stalls, run beside a real-time measurement.
//!
//! On a virtual machine the hypervisor may stop a vCPU for milliseconds; every guest thread on
//! it stops too, the emulated device's included, and no timer strategy completes an operation
//! on time while that lasts (on the 2-vCPU guest this project is developed on, `cyclictest`
//! saw 6 ms on an idle machine and 16 ms under load). A real-time tail (a p99 of a few
//! microseconds, a per-write bound of a few milliseconds) cannot be judged without knowing
//! whether the host stalled while it was measured.
//!
//! The probe runs one thread per CPU, pinned to it, each sleeping to absolute deadlines one
//! period apart (1 ns timer slack, `SCHED_FIFO` when the process may use it, so guest threads
//! do not delay it) and recording every wake-up later than a threshold as a [`Stall`]: its CPU
//! ran nothing else of ours in between either. With `SCHED_FIFO` such a stall is the host's (or
//! a guest section with interrupts off); without it, guest threads may be the cause too
//! ([`StallReport::realtime`] says which). A stall shorter than the period may fall between
//! two wake-ups and go unseen; the host's steal time over the run ([`StallReport::steal_ns`],
//! from `/proc/stat`) is the total the hypervisor reports, seen or not.
//!
//! The probe is not free: each wake-up takes its CPU for a few microseconds (a VM exit or two),
//! so it suits millisecond questions (did the host stall during this 7 ms write?) and would
//! itself show in a microsecond tail (tried on the `timing_error` example: program p99 from
//! ~5 to 13-17 us with it running). Users: `ftld stalls`, `ftld replay --timing real
//! --stall-probe` (`stalls.csv`), `experiments/gc_bound.py`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::{now_ns, timespec};

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of [`Stall`] times and of the NAND model in
/// real time (Rust's `Instant` reads it too but does not show its value).
pub fn monotonic_ns() -> u64 {
    now_ns()
}

/// At most this many stalls are kept per CPU (16 bytes each); later ones are only counted.
const MAX_STALLS_PER_CPU: usize = 1 << 20;

/// A stretch of time in which a probe thread could not run: it was due at `start_ns` and woke
/// `late_ns` later. Times are `CLOCK_MONOTONIC` nanoseconds (the NAND model's real-time clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    pub cpu: u32,
    pub start_ns: u64,
    pub late_ns: u64,
}

impl Stall {
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.late_ns
    }
}

/// What a [`StallProbe`] saw.
#[derive(Clone, Debug, Default)]
pub struct StallReport {
    /// When the probe started and finished (`CLOCK_MONOTONIC` ns).
    pub started_ns: u64,
    pub finished_ns: u64,
    pub period_ns: u64,
    pub threshold_ns: u64,
    /// CPUs probed (one thread each).
    pub cpus: u32,
    /// Whether the probe threads ran as `SCHED_FIFO` (then guest threads could not delay them).
    pub realtime: bool,
    /// Wake-ups over all CPUs.
    pub wakeups: u64,
    /// Wake-ups later than the threshold, in order of their start.
    pub stalls: Vec<Stall>,
    /// Stalls seen but not kept (more than [`MAX_STALLS_PER_CPU`] on a CPU).
    pub dropped: u64,
    /// The latest wake-up of any probe thread, threshold or not.
    pub max_late_ns: u64,
    /// Time the hypervisor reports it ran something else while a vCPU of ours wanted to run
    /// (`/proc/stat` steal, all CPUs, 10 ms resolution); `None` where it cannot be read.
    pub steal_ns: Option<u64>,
}

impl StallReport {
    /// The longest stall of any CPU that overlaps `[start_ns, end_ns)` (0: none).
    pub fn worst_within(&self, start_ns: u64, end_ns: u64) -> u64 {
        self.stalls
            .iter()
            .filter(|s| s.start_ns < end_ns && s.end_ns() > start_ns)
            .map(|s| s.late_ns)
            .max()
            .unwrap_or(0)
    }

    /// Sum of the stalls' lengths, over all CPUs.
    pub fn total_stalled_ns(&self) -> u64 {
        self.stalls.iter().map(|s| s.late_ns).sum()
    }

    /// The longest stall (0: none above the threshold).
    pub fn longest_ns(&self) -> u64 {
        self.stalls.iter().map(|s| s.late_ns).max().unwrap_or(0)
    }

    /// One line for a human: how many stalls, the longest, steal time.
    pub fn summary(&self) -> String {
        let secs = self.finished_ns.saturating_sub(self.started_ns) as f64 / 1e9;
        let steal = match self.steal_ns {
            Some(s) => format!("{:.0} ms", s as f64 / 1e6),
            None => "unknown".into(),
        };
        format!(
            "host stalls over {secs:.1} s on {} CPU(s){}: {} wake-up(s) over {} us late (longest {:.0} us, {:.1} ms in all), latest wake-up {:.0} us, steal {steal}",
            self.cpus,
            if self.realtime { "" } else { " (not SCHED_FIFO: guest threads may cause some)" },
            self.stalls.len() as u64 + self.dropped,
            self.threshold_ns / 1000,
            self.longest_ns() as f64 / 1e3,
            self.total_stalled_ns() as f64 / 1e6,
            self.max_late_ns as f64 / 1e3,
        )
    }
}

/// What one probe thread returns.
struct CpuLog {
    wakeups: u64,
    stalls: Vec<Stall>,
    dropped: u64,
    max_late_ns: u64,
    realtime: bool,
}

/// Probe threads running until [`StallProbe::finish`] (or drop, which discards the report).
pub struct StallProbe {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<CpuLog>>,
    started_ns: u64,
    period_ns: u64,
    threshold_ns: u64,
    steal_at_start: Option<u64>,
}

impl StallProbe {
    /// Starts one probe thread per CPU this process may run on, waking every `period` and
    /// recording wake-ups later than `threshold`.
    pub fn start(period: Duration, threshold: Duration) -> std::io::Result<StallProbe> {
        // At least 100 us: a SCHED_FIFO thread waking more often would take most of a CPU.
        let period_ns = (period.as_nanos() as u64).max(100_000);
        let threshold_ns = threshold.as_nanos() as u64;
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for cpu in allowed_cpus() {
            let flag = stop.clone();
            let t = std::thread::Builder::new()
                .name(format!("stall-probe-{cpu}"))
                .spawn(move || probe(cpu, period_ns, threshold_ns, &flag));
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    stop.store(true, Ordering::Release);
                    return Err(e);
                }
            }
        }
        Ok(StallProbe {
            stop,
            threads,
            started_ns: now_ns(),
            period_ns,
            threshold_ns,
            steal_at_start: steal_ns(),
        })
    }

    /// Stops the threads (within a period) and returns what they saw.
    pub fn finish(mut self) -> StallReport {
        self.stop.store(true, Ordering::Release);
        let mut r = StallReport {
            started_ns: self.started_ns,
            period_ns: self.period_ns,
            threshold_ns: self.threshold_ns,
            realtime: true,
            steal_ns: self
                .steal_at_start
                .zip(steal_ns())
                .map(|(a, b)| b.saturating_sub(a)),
            ..StallReport::default()
        };
        for t in self.threads.drain(..) {
            // A probe thread does not panic (no allocation beyond its capped list, no
            // unwrap); if one did, its CPU simply has no figures.
            let Ok(log) = t.join() else { continue };
            r.cpus += 1;
            r.wakeups += log.wakeups;
            r.dropped += log.dropped;
            r.max_late_ns = r.max_late_ns.max(log.max_late_ns);
            r.realtime &= log.realtime;
            r.stalls.extend(log.stalls);
        }
        r.realtime &= r.cpus > 0;
        r.stalls.sort_by_key(|s| s.start_ns);
        // After the joins: a thread asleep when `stop` was set still records its last wake-up.
        r.finished_ns = now_ns();
        r
    }
}

impl Drop for StallProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// One CPU's probe loop.
fn probe(cpu: u32, period_ns: u64, threshold_ns: u64, stop: &AtomicBool) -> CpuLog {
    pin_to(cpu);
    let realtime = make_fifo();
    crate::clock::lower_timer_slack();
    let mut log = CpuLog {
        wakeups: 0,
        stalls: Vec::new(),
        dropped: 0,
        max_late_ns: 0,
        realtime,
    };
    let mut due = now_ns() + period_ns;
    while !stop.load(Ordering::Acquire) {
        let ts = timespec(due);
        // SAFETY: `ts` is a valid timespec that lives across the call; the remaining-time
        // pointer may be null with TIMER_ABSTIME. An EINTR return only makes this wake-up early,
        // which is not recorded as a stall.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        let now = now_ns();
        if now < due {
            continue;
        }
        let late = now - due;
        log.wakeups += 1;
        log.max_late_ns = log.max_late_ns.max(late);
        if late > threshold_ns {
            if log.stalls.len() < MAX_STALLS_PER_CPU {
                log.stalls.push(Stall {
                    cpu,
                    start_ns: due,
                    late_ns: late,
                });
            } else {
                log.dropped += 1;
            }
        }
        // The next deadline after now, on the period's grid: a long stall is one stall, not a
        // burst of late wake-ups catching up.
        due += period_ns * ((now - due) / period_ns + 1);
    }
    log
}

/// The CPUs this process may run on (all online CPUs if the mask cannot be read).
fn allowed_cpus() -> Vec<u32> {
    // SAFETY: cpu_set_t is plain data (zero is an empty set); sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; pid 0 is this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc == 0 {
        let cpus: Vec<u32> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `set` is initialised and i < CPU_SETSIZE.
            .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
            .map(|i| i as u32)
            .collect();
        if !cpus.is_empty() {
            return cpus;
        }
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n as u32).collect()
}

/// Pins the calling thread to `cpu` (best effort: unpinned, it still probes some CPU).
fn pin_to(cpu: u32) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it for cpu < CPU_SETSIZE, which
    // `allowed_cpus` guarantees; sched_setaffinity only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Makes the calling thread `SCHED_FIFO` at the lowest real-time priority; false if not
/// permitted (no CAP_SYS_NICE, no RLIMIT_RTPRIO).
fn make_fifo() -> bool {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param that lives across the call; pid 0 is this thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// The host's steal time so far, all CPUs (`/proc/stat`'s 8th `cpu` field, in USER_HZ ticks).
fn steal_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let ticks: u64 = f.nth(7)?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks * 1_000_000_000 / hz as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a threshold of 0 every wake-up is a stall (a wake-up is never early): each is
    /// reported with its CPU, start and length inside the run, and a window finds the stalls
    /// that overlap it.
    #[test]
    fn every_late_wake_up_is_recorded_and_found_by_its_window() {
        let probe = StallProbe::start(Duration::from_micros(500), Duration::ZERO).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let r = probe.finish();
        assert!(r.cpus >= 1);
        assert!(r.wakeups >= 10, "{} wake-ups in 30 ms", r.wakeups);
        assert_eq!(r.stalls.len() as u64 + r.dropped, r.wakeups);
        let s = r.stalls[r.stalls.len() / 2];
        assert!(s.start_ns >= r.started_ns && s.end_ns() <= r.finished_ns);
        assert!(r.worst_within(s.start_ns, s.end_ns() + 1) >= s.late_ns);
        assert_eq!(r.worst_within(0, r.started_ns.saturating_sub(1_000_000)), 0);
        assert_eq!(
            r.longest_ns(),
            r.stalls.iter().map(|s| s.late_ns).max().unwrap()
        );
        assert!(r.summary().contains("host stalls"));
    }

    /// Windows are half-open and see every CPU's stalls (a report built by hand).
    #[test]
    fn windows_overlap_half_open() {
        let r = StallReport {
            stalls: vec![
                Stall {
                    cpu: 0,
                    start_ns: 1_000,
                    late_ns: 500,
                },
                Stall {
                    cpu: 1,
                    start_ns: 1_200,
                    late_ns: 2_000,
                },
            ],
            ..StallReport::default()
        };
        assert_eq!(r.worst_within(0, 1_000), 0, "ends where the stall starts");
        assert_eq!(r.worst_within(1_000, 1_100), 500);
        assert_eq!(r.worst_within(1_100, 1_300), 2_000);
        assert_eq!(
            r.worst_within(3_200, 4_000),
            0,
            "starts where the stall ended"
        );
        assert_eq!(r.total_stalled_ns(), 2_500);
    }
}
