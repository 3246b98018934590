//! Measures completion error (actual wake time minus modelled deadline) at queue depth 1 in
//! timing mode Real, for reads, programs and erases, waited both by blocking (`wait`) and through
//! the timer thread (`into_future` + `block_on`), for each [`TimerMode`], with the process's
//! CPU time per operation (user + system, all threads: the timer thread's included).
//!
//! Like `ftld serve`, it holds idle CPUs polling ([`nand_model::IdlePollHold`]) while a timer
//! other than `sleep` runs; `--no-idle-poll` measures without.
//!
//! `cargo run --release -p nand-model --example timing_error [ITERATIONS] [sleep|hybrid|spin]...
//! [--no-idle-poll]`

use std::time::{Duration, Instant};

use futures::executor::block_on;
use nand_model::{
    learnt_margins_ns, preset, BlockAddr, Completion, IdlePollHold, NandDevice, TimerMode,
    TimingMode,
};

#[derive(Clone, Copy)]
enum How {
    Wait,
    Future,
}

/// Waits for `c` and returns how late the wake-up was.
fn late(c: Completion, how: How) -> Duration {
    let deadline = c.deadline();
    match how {
        How::Wait => c.wait(),
        How::Future => block_on(c.into_future()),
    }
    Instant::now().saturating_duration_since(deadline)
}

/// CPU time (user + system) of the whole process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes only the struct we pass, which is zero-initialisable plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid and writable; RUSAGE_SELF always succeeds.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Completion errors of one kind of operation and the CPU time spent measuring them.
struct Sample {
    late: Vec<Duration>,
    cpu: Duration,
    modelled: Duration,
}

impl Sample {
    fn new() -> Sample {
        Sample {
            late: Vec::new(),
            cpu: Duration::ZERO,
            modelled: Duration::ZERO,
        }
    }

    /// Waits for the completion `op` submits and records its lateness and CPU time.
    fn measure(
        &mut self,
        how: How,
        op: impl FnOnce() -> Result<Completion, nand_model::NandError>,
    ) -> Result<(), nand_model::NandError> {
        let cpu = cpu_time();
        let start = Instant::now();
        let c = op()?;
        self.modelled += c.deadline().saturating_duration_since(start);
        self.late.push(late(c, how));
        self.cpu += cpu_time().saturating_sub(cpu);
        Ok(())
    }

    fn report(mut self, name: &str) {
        let v = &mut self.late;
        v.sort();
        let pct = |p: f64| v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
        let n = v.len() as f64;
        println!(
            "{name:<24} n={:<5} p50={:>6.1}us p99={:>6.1}us max={:>7.1}us  cpu/op={:>6.1}us ({:>3.0}% of the wait)",
            v.len(),
            pct(0.50),
            pct(0.99),
            pct(1.0),
            self.cpu.as_secs_f64() * 1e6 / n,
            100.0 * self.cpu.as_secs_f64() / self.modelled.as_secs_f64().max(1e-9),
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let idle_poll = !all.iter().any(|a| a == "--no-idle-poll");
    let mut args = all.into_iter().filter(|a| a != "--no-idle-poll");
    let iterations: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2000);
    let mut timers: Vec<TimerMode> = args
        .map(|a| <TimerMode as clap::ValueEnum>::from_str(&a, true))
        .collect::<Result<_, _>>()?;
    if timers.is_empty() {
        timers = vec![TimerMode::Sleep, TimerMode::Hybrid, TimerMode::Spin];
    }
    let dir = tempfile::tempdir()?;
    let config = preset("k9-003")
        .ok_or("missing preset")?
        .config
        .scaled_to(64 << 20);
    let dev = NandDevice::create(&dir.path().join("t.img"), &config, TimingMode::Real)?;
    let g = *dev.geometry();
    println!(
        "k9-003 timing (read 25us + 50us xfer, program 50us xfer + 200us, erase 1.5ms), QD1, {iterations} ops each"
    );
    let page = vec![0x5Au8; g.page_size as usize];
    let mut buf = vec![0u8; g.page_size as usize];
    for timer in timers {
        dev.set_timer(timer);
        let hold = if idle_poll && timer != TimerMode::Sleep {
            match IdlePollHold::acquire() {
                Ok(h) => Some(h),
                Err(e) => {
                    println!("idle CPUs halt ({}: {e})", nand_model::CPU_DMA_LATENCY);
                    None
                }
            }
        } else {
            None
        };
        println!(
            "timer {timer}: idle CPUs {}",
            if hold.is_some() { "poll" } else { "halt" }
        );
        for how in [How::Wait, How::Future] {
            let tag = match how {
                How::Wait => "wait",
                How::Future => "future",
            };
            let (mut reads, mut programs, mut erases) =
                (Sample::new(), Sample::new(), Sample::new());
            let mut n = 0;
            'outer: for block in 0..g.blocks_per_bank - 1 {
                for bank in 0..g.banks() {
                    let b = BlockAddr::new(bank, block);
                    if dev.block_state(b)?.programmed_pages > 0 {
                        erases.measure(how, || dev.erase(b))?;
                    }
                    for p in 0..g.pages_per_block {
                        programs.measure(how, || dev.program(b.page(p), &page, &[]))?;
                        reads.measure(how, || dev.read(b.page(p), 0, &mut buf, None))?;
                        n += 1;
                        if n >= iterations {
                            break 'outer;
                        }
                    }
                }
            }
            // Erases are rarer in the loop above; measure a batch on their own too.
            for i in 0..(iterations / 10).max(50) {
                let b = BlockAddr::new(i % g.banks(), g.blocks_per_bank - 1);
                erases.measure(how, || dev.erase(b))?;
            }
            reads.report(&format!("{timer}/read/{tag}"));
            programs.report(&format!("{timer}/program/{tag}"));
            erases.report(&format!("{timer}/erase/{tag}"));
        }
        let (w, f) = learnt_margins_ns();
        println!(
            "learnt margins: wait {:.1}us, future {:.1}us",
            w as f64 / 1e3,
            f as f64 / 1e3
        );
    }
    Ok(())
}
