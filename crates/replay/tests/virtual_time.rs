//! Virtual time end to end: a QD1 read takes exactly the model's t_read + transfer, a FUA
//! write exactly transfer + t_prog, a buffered write nothing; and a replay with GC, background
//! workers and checkpoints gives byte-identical outputs twice, once with the machine loaded.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ftl::nand_model::{Geometry, NandConfig, Timing, TimingMode};
use ftl::{Ftl, FtlConfig, GcPolicy};
use ftl_replay::{
    replay, Arrival, DriverOptions, Op, ReplayConfig, Request, TraceError, Workload, WorkloadSpec,
};

fn nand() -> NandConfig {
    NandConfig {
        geometry: Geometry {
            channels: 2,
            banks_per_channel: 2,
            blocks_per_bank: 24,
            pages_per_block: 16,
            page_size: 4096,
            oob_size: 128,
        },
        timing: Timing {
            t_read: Duration::from_micros(25),
            t_prog: Duration::from_micros(200),
            t_erase: Duration::from_micros(1500),
            channel_bytes_per_sec: 81_920_000,
            ..Default::default()
        },
        endurance: 100_000,
        interconnect: Default::default(),
        planes: 1,
    }
}

fn cfg() -> FtlConfig {
    FtlConfig {
        queues: 2,
        gc_policy: GcPolicy::Parallel,
        gc_threads: 2,
        checkpoint_interval_bytes: 256 * 1024,
        ..FtlConfig::default()
    }
}

fn channel_bytes(ftl: &Ftl) -> u64 {
    ftl.nand().stats().channels.iter().map(|c| c.bytes).sum()
}

fn now<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("an FTL call blocked in virtual time"),
    }
}

#[test]
fn qd1_latencies_are_exactly_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let n = nand();
    let t = n.timing;
    let ftl = Ftl::create(
        &dir.path().join("v.img"),
        &n,
        TimingMode::Virtual,
        cfg(),
        None,
    )
    .unwrap();
    // Start when every bank is idle (formatting programmed a checkpoint).
    let mut at = ftl.nand().idle_at_ns() + 1_000_000;
    ftl.advance_to(at).unwrap();
    // A buffered write is acknowledged at once.
    now(ftl.write(0, 0, &[7u8; 4096], false)).unwrap();
    assert_eq!(ftl.now_ns(), at);
    // A FUA write on an idle device: its page's transfer (page + OOB) and t_prog. (The
    // buffered write before it sealed a whole 4 KiB page already, programmed in the meantime.)
    at += 1_000_000;
    ftl.advance_to(at).unwrap();
    let b0 = channel_bytes(&ftl);
    now(ftl.write(0, 4096, &[8u8; 4096], true)).unwrap();
    let bytes = channel_bytes(&ftl) - b0;
    assert_eq!(bytes, 4096 + 128, "one page and its OOB");
    assert_eq!(
        ftl.now_ns() - at,
        t.xfer_ns(bytes) + t.t_prog.as_nanos() as u64,
        "FUA write latency"
    );
    // A QD1 read of a programmed page on an idle device: t_read + transfer, exactly.
    at += 10_000_000;
    ftl.advance_to(at).unwrap();
    let b0 = channel_bytes(&ftl);
    let mut buf = [0u8; 4096];
    now(ftl.read(4096, &mut buf)).unwrap();
    let moved = channel_bytes(&ftl) - b0;
    assert_eq!(buf, [8u8; 4096]);
    assert!(moved >= 4096, "the read moved {moved} bytes");
    assert_eq!(
        ftl.now_ns() - at,
        t.t_read.as_nanos() as u64 + t.xfer_ns(moved),
        "QD1 read latency"
    );
    ftl.close().unwrap();
}

/// Runs a GC-heavy workload (overwrites of a full device, reads, flushes, background GC and
/// periodic checkpoints) and returns the output files' bytes (summary less its wall-clock
/// figures).
fn run_once(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let ftl = Ftl::create(
        &dir.join("d.img"),
        &nand(),
        TimingMode::Virtual,
        cfg(),
        None,
    )
    .unwrap();
    let spec: WorkloadSpec = "random,requests=20000,bs=4k,read=30,flush_every=500"
        .parse()
        .unwrap();
    let w = Workload::new(spec, ftl.capacity(), 7).unwrap();
    let out = dir.join("out");
    let cfg = ReplayConfig {
        driver: DriverOptions {
            queue_depth: Some(4),
            ..DriverOptions::default()
        },
        interval_ns: 50_000_000,
        out: Some(out.clone()),
        config: serde_json::Value::Null,
        probe_stalls: false,
        stop: None,
    };
    let s = replay(&ftl, w.map(Ok::<Request, TraceError>), &cfg, &mut |_| {}).unwrap();
    let gc = s.gc.as_ref().expect("GC counts of an FTL");
    assert!(gc.erases > 0 && gc.checkpoints > 0, "{s:?}");
    assert!(s.flush.count > 0);
    assert_eq!(s.requests, 20000 + s.flush.count);
    ftl.close().unwrap();
    let mut files = Vec::new();
    for name in [
        "summary.json",
        "requests.csv",
        "timeseries.csv",
        "latency_cdf.svg",
        "waf_time.svg",
    ] {
        files.push((name.to_string(), output(&out, name)));
    }
    files
}

/// The bytes of output file `name` in `out`; of the summary, less its wall-clock figures.
fn output(out: &Path, name: &str) -> Vec<u8> {
    let bytes = std::fs::read(out.join(name)).unwrap();
    if name != "summary.json" {
        return bytes;
    }
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    for k in ["wall_seconds", "requests_per_second", "nand_ops_per_second"] {
        v.as_object_mut().unwrap().remove(k);
    }
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn a_replay_is_deterministic_under_load() {
    let a = tempfile::tempdir().unwrap();
    let first = run_once(a.path());
    // Load the machine: busy threads on every core while the second run goes.
    let stop = Arc::new(AtomicBool::new(false));
    let burners: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let b = tempfile::tempdir().unwrap();
    let second = run_once(b.path());
    stop.store(true, Ordering::Relaxed);
    for t in burners {
        t.join().unwrap();
    }
    for ((name, x), (_, y)) in first.iter().zip(&second) {
        assert!(x == y, "{name} differs between two runs");
    }
    let csv = String::from_utf8(first[1].1.clone()).unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&first[0].1).unwrap();
    assert_eq!(
        csv.lines().count() as u64,
        1 + summary["requests"].as_u64().unwrap()
    );
}

#[test]
fn fua_workload_writes_complete_when_programmed() {
    // `fua=1`: every write of a QD1 sequential workload waits for its own page: transfer of
    // page + OOB, then t_prog, on an otherwise idle device.
    let dir = tempfile::tempdir().unwrap();
    let n = nand();
    let t = n.timing;
    let ftl = Ftl::create(
        &dir.path().join("f.img"),
        &n,
        TimingMode::Virtual,
        cfg(),
        None,
    )
    .unwrap();
    let spec: WorkloadSpec = "seq,requests=20,bs=4k,fua=1".parse().unwrap();
    let w = Workload::new(spec, ftl.capacity(), 1).unwrap();
    let out = dir.path().join("out");
    let rc = ReplayConfig {
        driver: DriverOptions {
            queue_depth: Some(1),
            ..DriverOptions::default()
        },
        interval_ns: 1_000_000_000,
        out: Some(out.clone()),
        config: serde_json::Value::Null,
        probe_stalls: false,
        stop: None,
    };
    let s = replay(&ftl, w.map(Ok::<Request, TraceError>), &rc, &mut |_| {}).unwrap();
    assert_eq!(s.write.count, 20);
    let expect = (t.xfer_ns(4096 + 128) + t.t_prog.as_nanos() as u64) as f64 / 1000.0;
    let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    for line in csv.lines().skip(1) {
        let lat: f64 = line.rsplit(',').next().unwrap().parse().unwrap();
        assert!((lat - expect).abs() < 0.002, "{line}: expected {expect} us");
    }
    ftl.close().unwrap();
}

/// Pages are striped channel first, as an SSD stripes them: as many FUA writes at once as
/// the device has channels each take exactly transfer + t_prog, none waiting for another's
/// transfer on a shared channel (with the banks looked at in bank order, the second write
/// went to the first one's channel: transfer twice + t_prog).
#[test]
fn concurrent_writes_are_striped_over_the_channels_first() {
    let dir = tempfile::tempdir().unwrap();
    let n = nand();
    let t = n.timing;
    let channels = n.geometry.channels as usize;
    let ftl = Ftl::create(
        &dir.path().join("c.img"),
        &n,
        TimingMode::Virtual,
        cfg(),
        None,
    )
    .unwrap();
    let spec: WorkloadSpec = format!("seq,requests={channels},bs=4k,fua=1")
        .parse()
        .unwrap();
    let w = Workload::new(spec, ftl.capacity(), 1).unwrap();
    let out = dir.path().join("out");
    let rc = ReplayConfig {
        driver: DriverOptions {
            queue_depth: Some(channels),
            ..DriverOptions::default()
        },
        interval_ns: 1_000_000_000,
        out: Some(out.clone()),
        config: serde_json::Value::Null,
        probe_stalls: false,
        stop: None,
    };
    replay(&ftl, w.map(Ok::<Request, TraceError>), &rc, &mut |_| {}).unwrap();
    let expect = (t.xfer_ns(4096 + 128) + t.t_prog.as_nanos() as u64) as f64 / 1000.0;
    let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    assert_eq!(csv.lines().count(), channels + 1, "{csv}");
    for line in csv.lines().skip(1) {
        let lat: f64 = line.rsplit(',').next().unwrap().parse().unwrap();
        assert!(
            (lat - expect).abs() < 0.002,
            "{line}: expected {expect} us\n{csv}"
        );
    }
    ftl.close().unwrap();
}

/// Background GC runs beside a writer (and a host) waiting for room, as the served device's
/// worker threads do, and two workers clean two banks, not one: a steady random-write run
/// keeps the banks busy. Deterministic: 0.45 of the banks' time here; 0.32 when the workers
/// stood still while a request waited for room (a writer with no room cleaning alone, one step
/// at a time), ~0.15 when, besides, every worker stepped the same bank in turn.
#[test]
fn gc_workers_clean_while_writers_wait_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let preset = ftl::nand_model::preset("default").unwrap();
    let nand = preset.config.scaled_to(160 << 20);
    let ftl = Ftl::create(
        &dir.path().join("gc.img"),
        &nand,
        TimingMode::Virtual,
        FtlConfig::default(),
        None,
    )
    .unwrap();
    ftl_replay::precondition(&ftl, 100.0, 1).unwrap();
    let busy = |ftl: &Ftl| -> u64 { ftl.nand().stats().banks.iter().map(|b| b.busy_ns).sum() };
    let (busy0, t0) = (busy(&ftl), ftl.now_ns());
    let spec: WorkloadSpec = "random,requests=20000,bs=4k,read=0".parse().unwrap();
    let w = Workload::new(spec, ftl.capacity(), 1).unwrap();
    let rc = ReplayConfig {
        driver: DriverOptions {
            queue_depth: Some(32),
            ..DriverOptions::default()
        },
        interval_ns: 1_000_000_000,
        out: None,
        config: serde_json::Value::Null,
        probe_stalls: false,
        stop: None,
    };
    let s = replay(&ftl, w.map(Ok::<Request, TraceError>), &rc, &mut |_| {}).unwrap();
    assert_eq!(s.write.count, 20_000);
    let gc = s.gc.as_ref().unwrap();
    assert!(gc.steps > 10_000, "steady state: GC moves data ({gc:?})");
    let banks = nand.geometry.banks() as f64;
    let util = (busy(&ftl) - busy0) as f64 / (banks * (ftl.now_ns() - t0) as f64);
    eprintln!(
        "bank utilisation {util:.3}, {:.0} IOPS simulated, {} foreground steps",
        s.write.count as f64 / s.simulated_seconds,
        gc.foreground
    );
    assert!(
        util > 0.4,
        "banks only {util:.3} busy under steady random writes"
    );
    ftl.close().unwrap();
}

/// A short replay on a fresh device: no GC, so every host byte is programmed exactly once and
/// WAF is 1. The writes still buffered when the requests end are programmed before WAF is
/// read (it was 0.92 here: eight queues' buffers counted as written, not programmed), and that
/// drain adds no simulated time.
#[test]
fn waf_counts_the_writes_still_buffered_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let ftl = Ftl::create(
        &dir.path().join("w.img"),
        &nand(),
        TimingMode::Virtual,
        FtlConfig { queues: 8, ..cfg() },
        None,
    )
    .unwrap();
    let spec: WorkloadSpec = "seq,requests=300,bs=4k".parse().unwrap();
    let w = Workload::new(spec, ftl.capacity(), 1).unwrap();
    let rc = ReplayConfig {
        driver: DriverOptions {
            queue_depth: Some(8),
            ..DriverOptions::default()
        },
        interval_ns: 1_000_000_000,
        out: None,
        config: serde_json::Value::Null,
        probe_stalls: false,
        stop: None,
    };
    let t0 = ftl.now_ns();
    let s = replay(&ftl, w.map(Ok::<Request, TraceError>), &rc, &mut |_| {}).unwrap();
    assert_eq!(s.gc.as_ref().unwrap().erases, 0, "{s:?}");
    assert_eq!(s.waf, Some(1.0), "{s:?}");
    assert!(
        (ftl.now_ns() - t0) as f64 / 1e9 > s.simulated_seconds,
        "the drain ran after the last request, outside the figures"
    );
    ftl.close().unwrap();
}

/// One sequential stream stays on one write queue in open loop: a sequential fill on the
/// hybrid schemes makes switch merges only (WAF 1) with two queues, each request sent when the
/// last completed or at a fixed rate. Before, requests were dealt to the queues in turn, each
/// queue's buffer programmed every other run of pages, and bast/fast saw two interleaved
/// streams (full and partial merges, WAF ~2).
#[test]
fn a_sequential_stream_stays_on_one_queue() {
    for scheme in [ftl::SchemeKind::Bast, ftl::SchemeKind::Fast] {
        for arrival in ["", ",iops=2000"] {
            let dir = tempfile::tempdir().unwrap();
            let cfg = FtlConfig {
                scheme,
                log_blocks: 8,
                gc_policy: GcPolicy::InPath,
                ..cfg()
            };
            let ftl = Ftl::create(
                &dir.path().join("s.img"),
                &nand(),
                TimingMode::Virtual,
                cfg,
                None,
            )
            .unwrap();
            assert_eq!(ftl.queues(), 2);
            // 8 KiB requests: a 4-page block takes two of them, one from each queue before.
            let requests = ftl.capacity() / 8192;
            let spec: WorkloadSpec = format!("seq,requests={requests},bs=8k{arrival}")
                .parse()
                .unwrap();
            let w = Workload::new(spec, ftl.capacity(), 1).unwrap();
            let rc = ReplayConfig {
                driver: DriverOptions::default(),
                interval_ns: 1_000_000_000,
                out: None,
                config: serde_json::Value::Null,
                probe_stalls: false,
                stop: None,
            };
            let s = replay(&ftl, w.map(Ok::<Request, TraceError>), &rc, &mut |_| {}).unwrap();
            let gc = s.gc.clone().expect("an FTL counts GC");
            let m = gc.merges.expect("a hybrid scheme counts merges");
            let what = format!("{scheme:?} {arrival:?}: {m:?}, waf {:?}", s.waf);
            assert!(m.switch > 0, "{what}");
            assert_eq!((m.partial, m.full), (0, 0), "{what}");
            assert_eq!(s.waf, Some(1.0), "{what}");
            ftl.close().unwrap();
        }
    }
}

/// A trace with idle stretches (the host quiet for minutes, as real traces are overnight):
/// the background actors' rounds in them change nothing once the device settled, and are
/// skipped (`ftl`'s `sim.rs`). The replay's outputs are the same byte for byte with the skip
/// and without, on each scheme and GC policy, and the skip runs far fewer rounds.
#[test]
fn idle_stretches_are_skipped_without_changing_a_figure() {
    let run = |dir: &Path, (nand, cfg): (NandConfig, FtlConfig), skip: bool| {
        let ftl = Ftl::create(&dir.join("g.img"), &nand, TimingMode::Virtual, cfg, None).unwrap();
        ftl.set_sim_skip_idle(skip);
        let pages = ftl.capacity() / 4096;
        // Fill and overwrite at random (GC, checkpoints), a request every 200 us; pause 10
        // minutes; more, at a tenth of the load (adaptive GC's gauge then tells a decayed peak
        // from one the skip forgot to decay); pause an hour; a read-write mix.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut requests = Vec::new();
        let mut t = 0u64;
        let mut push = |t: &mut u64, op, lpn: u64, gap: u64| {
            requests.push(Request {
                arrival: Arrival::At(*t),
                ..Request::new(0, op, lpn * 4096, 4096)
            });
            *t += gap;
        };
        for l in 0..pages {
            push(&mut t, Op::Write, l, 200_000);
        }
        for _ in 0..pages {
            push(&mut t, Op::Write, next() % pages, 200_000);
        }
        t += 600_000_000_000;
        // Trims among them: their records are sealed and written by maintenance, which the
        // skip must wait for (as for a partly filled page on 16 KiB pages, the idle flush's).
        for i in 0..pages {
            let op = if i % 10 == 0 { Op::Trim } else { Op::Write };
            push(&mut t, op, next() % pages, 2_000_000);
        }
        t += 3_600_000_000_000;
        for i in 0..pages / 2 {
            let op = if i % 3 == 0 { Op::Read } else { Op::Write };
            push(&mut t, op, next() % pages, 200_000);
        }
        let out = dir.join("out");
        let rc = ReplayConfig {
            driver: DriverOptions::default(),
            interval_ns: 60_000_000_000,
            out: Some(out.clone()),
            config: serde_json::Value::Null,
            probe_stalls: false,
            stop: None,
        };
        replay(
            &ftl,
            requests.into_iter().map(Ok::<Request, TraceError>),
            &rc,
            &mut |_| {},
        )
        .unwrap();
        let rounds = ftl.sim_rounds();
        ftl.close().unwrap();
        let files: Vec<_> = ["summary.json", "requests.csv", "timeseries.csv"]
            .into_iter()
            .map(|name| (name, output(&out, name)))
            .collect();
        (files, rounds)
    };
    let mut big_pages = nand();
    big_pages.geometry.page_size = 16384;
    big_pages.geometry.oob_size = 256;
    let configs = [
        (
            "page adaptive",
            (
                nand(),
                FtlConfig {
                    gc_threads: 4,
                    ..cfg_with(ftl::SchemeKind::Page, GcPolicy::Adaptive)
                },
            ),
        ),
        (
            "page adaptive, 16 KiB pages, idle flush after 2 s",
            (
                big_pages,
                FtlConfig {
                    idle_flush_ms: 2000,
                    ..cfg_with(ftl::SchemeKind::Page, GcPolicy::Adaptive)
                },
            ),
        ),
        ("page parallel", (nand(), cfg())),
        (
            "page in-path",
            (nand(), cfg_with(ftl::SchemeKind::Page, GcPolicy::InPath)),
        ),
        (
            "fast",
            (nand(), cfg_with(ftl::SchemeKind::Fast, GcPolicy::InPath)),
        ),
        (
            "rftl",
            (nand(), cfg_with(ftl::SchemeKind::Rftl, GcPolicy::InPath)),
        ),
    ];
    for (what, cfg) in configs {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let (skipped, few) = run(a.path(), cfg.clone(), true);
        let (kept, many) = run(b.path(), cfg, false);
        for ((name, x), (_, y)) in skipped.iter().zip(&kept) {
            assert!(x == y, "{what}: {name} differs with the idle skip");
        }
        // 70 minutes idle: ~84 000 maintenance ticks alone without the skip.
        assert!(many > 80_000, "{what}: {many} rounds without the skip");
        assert!(
            few * 10 < many,
            "{what}: {few} rounds with the skip, {many} without"
        );
    }
}

fn cfg_with(scheme: ftl::SchemeKind, gc_policy: GcPolicy) -> FtlConfig {
    FtlConfig {
        scheme,
        gc_policy,
        log_blocks: if scheme.has_log_blocks() { 8 } else { 0 },
        ..cfg()
    }
}

/// Preconditioning a part of the device reaches GC's steady state before it says so: at half
/// the device, one pass of overwrites leaves GC not started yet (its WAF 1.00, which the
/// precondition reported as steady before), and nftl folds its chains in bursts a few rounds
/// apart (it read 1.00 between two). Rounds count only once the host wrote as much as the
/// device has flash, and two passes must agree: the steady WAF it reports is what a replay
/// over that span then measures, for either. At 5 % GC finds empty victims (no data moved):
/// a pass on with none moved counts as steady at that figure.
#[test]
fn a_partial_precondition_reports_the_steady_waf_a_replay_then_measures() {
    for (scheme, pct) in [
        (ftl::SchemeKind::Page, 50),
        (ftl::SchemeKind::Nftl, 50),
        (ftl::SchemeKind::Page, 5),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let preset = ftl::nand_model::preset("default").unwrap();
        let nand = preset.config.scaled_to(160 << 20);
        let cfg = FtlConfig {
            scheme,
            ..FtlConfig::default()
        };
        let ftl = Ftl::create(
            &dir.path().join("p.img"),
            &nand,
            TimingMode::Virtual,
            cfg,
            None,
        )
        .unwrap();
        let r = ftl_replay::precondition(&ftl, f64::from(pct), 1).unwrap();
        let steady = r.steady_waf.unwrap();
        let raw = ftl.nand().geometry().raw_capacity();
        assert!(
            r.fill_bytes + r.overwrite_bytes > raw,
            "{scheme}: stopped before the flash was written once: {r:?}, {raw} bytes of flash"
        );
        let spec: WorkloadSpec = format!("random,requests=40000,bs=4k,read=0,span={pct}%")
            .parse()
            .unwrap();
        let w = Workload::new(spec, ftl.capacity(), 2).unwrap();
        let rc = ReplayConfig {
            driver: DriverOptions {
                queue_depth: Some(2),
                ..DriverOptions::default()
            },
            interval_ns: 1_000_000_000,
            out: None,
            config: serde_json::Value::Null,
            probe_stalls: false,
            stop: None,
        };
        let s = replay(&ftl, w.map(Ok::<Request, TraceError>), &rc, &mut |_| {}).unwrap();
        let measured = s.waf.unwrap();
        eprintln!("{scheme}: precondition {r:?}; measured WAF {measured:.3}");
        assert!(
            r.steady,
            "{scheme} at {pct} %: two passes never agreed: {r:?}"
        );
        if pct == 50 {
            assert!(
                steady > 1.02,
                "{scheme}: GC never ran in the precondition: {r:?}"
            );
        }
        assert!(
            (steady - measured).abs() <= 0.05 * measured,
            "{scheme}: steady WAF {steady:.3} against {measured:.3} measured after it"
        );
        ftl.close().unwrap();
    }
}
