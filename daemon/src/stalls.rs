//! `ftld stalls`: measures how long this machine keeps a thread from running when it is due
//! (`nand_model::StallProbe`), the limit of any real-time emulation on it: a completion cannot
//! be on time while the host has the vCPU stopped. Run it before trusting real-time tails on a
//! virtual machine, or beside a measurement (`--csv`, times on `CLOCK_MONOTONIC`) to tell which
//! slow requests the host delayed.

use std::time::Duration;

use anyhow::Context;
use nand_model::{StallProbe, StallReport};

use crate::cli::StallsArgs;

pub fn run(a: &StallsArgs) -> anyhow::Result<()> {
    // At most a year: a longer run is a typo, and the deadline must fit the clock.
    const MAX_SECONDS: f64 = 365.0 * 86_400.0;
    if !(a.seconds > 0.0 && a.seconds <= MAX_SECONDS) {
        return Err(crate::UsageError(format!(
            "--seconds must be a positive number of seconds up to {MAX_SECONDS} (a year), not {}",
            a.seconds
        ))
        .into());
    }
    // Made before the measurement: a path that cannot be written fails now, not after it.
    let csv = a
        .csv
        .as_ref()
        .map(|p| {
            std::fs::File::create(p)
                .map(|f| (p, f))
                .with_context(|| format!("creating {}", p.display()))
        })
        .transpose()?;
    // SIGINT and SIGTERM end the run early, with the report: blocked here, before the probe's
    // threads exist (they inherit the mask), and taken by `sigtimedwait` below.
    let signals = crate::signals::block_stop_signals();
    let probe = StallProbe::start(
        Duration::from_micros(a.period_us),
        Duration::from_micros(a.threshold_us),
    )
    .context("starting the probe threads")?;
    wait_for_stop(&signals, Duration::from_secs_f64(a.seconds));
    let r = probe.finish();
    if let Some((path, file)) = csv {
        write_csv(file, &r).with_context(|| format!("writing {}", path.display()))?;
    }
    if a.json {
        out!("{}", serde_json::to_string_pretty(&json(&r))?);
    } else {
        out!("{}", r.summary());
        let mut longest: Vec<_> = r.stalls.clone();
        longest.sort_by_key(|s| std::cmp::Reverse(s.late_ns));
        for s in longest.iter().take(5) {
            out!(
                "  {:>9.0} us on CPU {} at {:.3} s",
                s.late_ns as f64 / 1e3,
                s.cpu,
                s.start_ns.saturating_sub(r.started_ns) as f64 / 1e9
            );
        }
    }
    Ok(())
}

/// Stalls as CSV: start (`CLOCK_MONOTONIC` ns, the clock of `time.monotonic_ns()` and of the NAND
/// model in real time), CPU, length in us; in order of start.
fn write_csv(mut file: std::fs::File, r: &StallReport) -> std::io::Result<()> {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let mut csv = String::from("start_ns,cpu,length_us\n");
    for s in &r.stalls {
        let _ = writeln!(
            csv,
            "{},{},{:.3}",
            s.start_ns,
            s.cpu,
            s.late_ns as f64 / 1e3
        );
    }
    file.write_all(csv.as_bytes())
}

/// `--json`: the replay summary's `host_stalls` figures, with the run's length and its latest
/// wake-up (stall or not).
#[derive(serde::Serialize)]
struct Json {
    seconds: f64,
    latest_wakeup_us: f64,
    #[serde(flatten)]
    stalls: ftl_replay::HostStalls,
}

fn json(r: &StallReport) -> Json {
    Json {
        seconds: r.finished_ns.saturating_sub(r.started_ns) as f64 / 1e9,
        latest_wakeup_us: r.max_late_ns as f64 / 1e3,
        stalls: ftl_replay::HostStalls::of(r),
    }
}

/// Returns after `limit`, or earlier when a signal of `set` arrives.
fn wait_for_stop(set: &libc::sigset_t, limit: Duration) {
    let end = std::time::Instant::now() + limit;
    loop {
        let Some(left) = end.checked_duration_since(std::time::Instant::now()) else {
            return;
        };
        let ts = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `set` and `ts` are valid for the call; the siginfo pointer may be null.
        let rc = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
        // A signal of the set: stop. EAGAIN: the time is up. EINTR: another signal; go on.
        if rc >= 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
            return;
        }
    }
}
