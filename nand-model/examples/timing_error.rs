//! Measures completion error (actual wake time minus modelled deadline) at queue depth 1 in
//! timing mode Real, for reads, programs and erases, waited both by blocking (`wait`) and through
//! the timer thread (`into_future` + `block_on`).
//!
//! `cargo run --release -p nand-model --example timing_error [ITERATIONS]`

use std::time::{Duration, Instant};

use futures::executor::block_on;
use nand_model::{preset, BlockAddr, Completion, NandDevice, TimingMode};

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

fn report(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let pct = |p: f64| v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    println!(
        "{name:<16} n={:<5} p50={:>6.1}us p99={:>6.1}us max={:>7.1}us",
        v.len(),
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: u32 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2000);
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
    for how in [How::Wait, How::Future] {
        let tag = match how {
            How::Wait => "wait",
            How::Future => "future",
        };
        let (mut reads, mut programs, mut erases) = (Vec::new(), Vec::new(), Vec::new());
        let mut n = 0;
        'outer: for block in 0..g.blocks_per_bank {
            for bank in 0..g.banks() {
                let b = BlockAddr::new(bank, block);
                if dev.block_state(b)?.programmed_pages > 0 {
                    erases.push(late(dev.erase(b)?, how));
                }
                for p in 0..g.pages_per_block {
                    programs.push(late(dev.program(b.page(p), &page, &[])?, how));
                    reads.push(late(dev.read(b.page(p), 0, &mut buf, None)?, how));
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
            erases.push(late(dev.erase(b)?, how));
        }
        report(&format!("read/{tag}"), reads);
        report(&format!("program/{tag}"), programs);
        report(&format!("erase/{tag}"), erases);
    }
    Ok(())
}
