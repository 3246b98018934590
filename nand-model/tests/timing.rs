//! Timing modes Real and Virtual: modelled completion times, bank parallelism, serialization on a bank and on
//! a channel, and waiting by blocking and through futures.

mod common;

use std::time::{Duration, Instant};

use common::{small_config, Fixture};
use futures::executor::block_on;
use nand_model::{BankId, BlockAddr, PageAddr, TimingMode};

const PAGE: [u8; 4096] = [0x42; 4096];

fn real() -> Fixture {
    Fixture::new(&small_config(), TimingMode::Real)
}

fn xfer(bytes: u64) -> Duration {
    small_config().timing.xfer(bytes)
}

fn t_prog() -> Duration {
    small_config().timing.t_prog
}

#[test]
fn program_completes_after_transfer_and_program_time() {
    let f = real();
    let dev = f.dev();
    let before = Instant::now();
    let c = dev
        .program(PageAddr::new(0, 0, 0), &PAGE, &[0; 128])
        .unwrap();
    let after = Instant::now();
    let model = xfer(4096 + 128) + t_prog();
    assert!(c.deadline() >= before + model, "deadline too early");
    assert!(c.deadline() <= after + model + Duration::from_micros(5));
    assert!(!c.is_complete());
    let load = dev.bank_load(BankId(0));
    assert_eq!(load.inflight, 1);
    assert!(load.busy_for.is_some());
    let deadline = c.deadline();
    c.wait();
    assert!(Instant::now() >= deadline);
    assert!(before.elapsed() >= model);
    assert_eq!(
        dev.bank_load(BankId(0)),
        nand_model::BankLoad {
            inflight: 0,
            busy_for: None
        }
    );
}

#[test]
fn read_and_erase_times() {
    let f = real();
    let dev = f.dev();
    dev.program(PageAddr::new(1, 0, 0), &PAGE, &[])
        .unwrap()
        .wait();
    let t = small_config().timing;
    let before = Instant::now();
    let mut buf = [0u8; 512];
    let c = dev.read(PageAddr::new(1, 0, 0), 0, &mut buf, None).unwrap();
    let after = Instant::now();
    // Column read: only 512 bytes cross the channel.
    assert!(c.deadline() >= before + t.t_read + xfer(512));
    assert!(c.deadline() <= after + t.t_read + xfer(512) + Duration::from_micros(2));
    c.wait();
    let before = Instant::now();
    let c = dev.erase(BlockAddr::new(1, 0)).unwrap();
    assert!(c.deadline() >= before + t.t_erase);
    c.wait();
    assert!(before.elapsed() >= t.t_erase);
}

#[test]
fn banks_on_different_channels_run_in_parallel() {
    let f = real();
    let dev = f.dev();
    let one = xfer(4096) + t_prog();
    // Bank 0 is on channel 0, bank 2 on channel 1. Deadlines are measured from each op's own
    // submission: the machine may be loaded, the model must not be.
    let start = Instant::now();
    let a = dev.program(PageAddr::new(0, 0, 0), &PAGE, &[]).unwrap();
    let b_submit = Instant::now();
    let b = dev.program(PageAddr::new(2, 0, 0), &PAGE, &[]).unwrap();
    let b_after = Instant::now();
    assert!(a.deadline() >= start + one);
    assert!(b.deadline() >= b_submit + one);
    assert!(
        b.deadline() <= b_after + one,
        "bank 2 waited for bank 0: {:?} after its submission",
        b.deadline() - b_submit
    );
    a.wait();
    b.wait();
    assert!(start.elapsed() >= one);
}

#[test]
fn same_bank_serializes() {
    let f = real();
    let dev = f.dev();
    let a = dev.program(PageAddr::new(3, 0, 0), &PAGE, &[]).unwrap();
    let b = dev.program(PageAddr::new(3, 0, 1), &PAGE, &[]).unwrap();
    let one = xfer(4096) + t_prog();
    assert!(
        b.deadline() >= a.deadline() + one,
        "{:?}",
        b.deadline() - a.deadline()
    );
    // The FTL can see the bank is busy until the second op finishes.
    let until = Instant::now() + dev.bank_load(BankId(3)).busy_for.unwrap();
    let skew = if until > b.deadline() {
        until - b.deadline()
    } else {
        b.deadline() - until
    };
    assert!(skew < Duration::from_micros(2));
    let start = Instant::now();
    futures::executor::block_on(async {
        a.await;
        b.await;
    });
    assert!(start.elapsed() >= one);
}

#[test]
fn channel_transfers_serialize() {
    let f = real();
    let dev = f.dev();
    // Banks 0 and 1 share channel 0: their transfers queue, their program times overlap.
    let a = dev.program(PageAddr::new(0, 1, 0), &PAGE, &[]).unwrap();
    let b = dev.program(PageAddr::new(1, 1, 0), &PAGE, &[]).unwrap();
    let b_after = Instant::now();
    let gap = b.deadline() - a.deadline();
    assert!(
        gap >= xfer(4096),
        "second transfer overlapped the first: {gap:?}"
    );
    // At most one transfer of queueing after its own submission: the banks overlapped.
    assert!(b.deadline() <= b_after + xfer(4096) * 2 + t_prog());
    drop((a, b));
    let s = dev.stats();
    assert_eq!(s.channels[0].transfers, 2);
    assert_eq!(s.channels[0].busy_ns, 2 * xfer(4096).as_nanos() as u64);
    // Reads: both banks sense in parallel, then the transfers queue on the channel.
    std::thread::sleep(Duration::from_millis(2));
    let mut x = vec![0u8; 4096];
    let mut y = vec![0u8; 4096];
    let a = dev.read(PageAddr::new(0, 1, 0), 0, &mut x, None).unwrap();
    let b = dev.read(PageAddr::new(1, 1, 0), 0, &mut y, None).unwrap();
    let b_after = Instant::now();
    let gap = b.deadline() - a.deadline();
    assert!(gap >= xfer(4096), "{gap:?}");
    let t_read = small_config().timing.t_read;
    assert!(b.deadline() <= b_after + t_read + xfer(4096) * 2);
}

#[test]
fn future_waits_until_deadline() {
    let f = real();
    let dev = f.dev();
    let c = dev.erase(BlockAddr::new(0, 5)).unwrap();
    let deadline = c.deadline();
    block_on(c.into_future());
    assert!(Instant::now() >= deadline);
    // A future whose deadline has passed is ready at once.
    let c = dev.erase(BlockAddr::new(0, 6)).unwrap();
    std::thread::sleep(Duration::from_millis(3));
    let start = Instant::now();
    block_on(c.into_future());
    assert!(start.elapsed() < Duration::from_millis(1));
}

/// Awaits a completion; true if it did not complete before its deadline.
async fn on_time(c: nand_model::Completion) -> bool {
    let deadline = c.deadline();
    c.await;
    Instant::now() >= deadline
}

#[test]
fn many_concurrent_futures() {
    let f = real();
    let dev = f.dev();
    let mut futs = Vec::new();
    for bank in 0..4 {
        for block in 0..8 {
            for page in 0..4 {
                let c = dev
                    .program(PageAddr::new(bank, block, page), &PAGE, &[])
                    .unwrap();
                futs.push(on_time(c));
            }
        }
        // Erases mix long deadlines in with the short ones.
        for block in 0..8 {
            futs.push(on_time(dev.erase(BlockAddr::new(bank, block)).unwrap()));
        }
    }
    assert_eq!(dev.stats().totals.inflight, futs.len() as u64);
    let results = block_on(futures::future::join_all(futs));
    assert_eq!(results.len(), 4 * 8 * 5);
    assert!(
        results.iter().all(|&ok| ok),
        "a future completed before its deadline"
    );
    assert_eq!(dev.stats().totals.inflight, 0);
}

#[test]
fn futures_from_many_threads() {
    let f = real();
    let dev = f.dev();
    std::thread::scope(|s| {
        for bank in 0..4u32 {
            s.spawn(move || {
                block_on(async {
                    for page in 0..4 {
                        let c = dev
                            .program(PageAddr::new(bank, 2, page), &PAGE, &[])
                            .unwrap();
                        let d = c.deadline();
                        c.await;
                        assert!(Instant::now() >= d);
                    }
                })
            });
        }
    });
}

#[test]
fn timing_off_completes_immediately() {
    let f = Fixture::small();
    let dev = f.dev();
    let c = dev.program(PageAddr::new(0, 0, 0), &PAGE, &[]).unwrap();
    assert!(c.is_complete());
    assert!(c.deadline() <= Instant::now());
    block_on(c.into_future());
    assert_eq!(dev.bank_load(BankId(0)).busy_for, None);
}

/// PMCD (thesis ch. 4): any controller reaches any bank, so two banks of one channel transfer
/// at once with two controllers, and banks of different channels queue behind a single one.
/// The interconnect is stored in the image.
#[test]
fn pmcd_transfers_take_any_free_controller() {
    let config = |controllers| nand_model::NandConfig {
        interconnect: nand_model::Interconnect::Pmcd { controllers },
        ..small_config()
    };
    let mut f = Fixture::new(&config(2), TimingMode::Real);
    let dev = f.dev();
    // Both submissions count from the same arrival: a preemption between the two calls must
    // not make the second arrive a transfer later (CI saw this fail once).
    let arrival = nand_model::ArrivalScope::enter(dev.now_ns());
    // Banks 0 and 1 share channel 0 (which TMCD serialises: `channel_transfers_serialize`).
    let a = dev.program(PageAddr::new(0, 1, 0), &PAGE, &[]).unwrap();
    let b = dev.program(PageAddr::new(1, 1, 0), &PAGE, &[]).unwrap();
    drop(arrival);
    let gap = b.deadline().saturating_duration_since(a.deadline());
    assert!(
        gap < xfer(4096),
        "the second controller was not used: {gap:?}"
    );
    drop((a, b));
    f.reopen(TimingMode::Real);
    assert_eq!(
        f.dev().config().interconnect,
        nand_model::Interconnect::Pmcd { controllers: 2 }
    );

    let g = Fixture::new(&config(1), TimingMode::Real);
    let dev = g.dev();
    // Bank 2 is on channel 1, which TMCD would run in parallel; one controller serialises.
    let a = dev.program(PageAddr::new(0, 1, 0), &PAGE, &[]).unwrap();
    let b = dev.program(PageAddr::new(2, 1, 0), &PAGE, &[]).unwrap();
    let gap = b.deadline().saturating_duration_since(a.deadline());
    assert!(
        gap >= xfer(4096),
        "one controller carried two transfers at once: {gap:?}"
    );
}

#[test]
fn a_controller_count_out_of_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = nand_model::NandConfig {
        interconnect: nand_model::Interconnect::Pmcd { controllers: 0 },
        ..small_config()
    };
    let err = nand_model::NandDevice::create(&dir.path().join("x.img"), &config, TimingMode::Off)
        .unwrap_err()
        .to_string();
    assert!(err.contains("controllers must be from 1"), "{err}");
}

fn virt() -> Fixture {
    Fixture::new(&small_config(), TimingMode::Virtual)
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Simulated time: a QD1 read completes exactly t_read + transfer after it is submitted, a
/// program exactly transfer + t_prog, an erase t_erase; waiting moves the clock, not the host.
#[test]
fn virtual_time_takes_exactly_the_modelled_time() {
    let f = virt();
    let dev = f.dev();
    let clock = dev.sim_clock().expect("virtual mode has a clock");
    assert_eq!(clock.now_ns(), 0);
    let t = small_config().timing;
    clock.set_ns(1_000);
    let c = dev
        .program(PageAddr::new(0, 0, 0), &PAGE, &[0; 16])
        .unwrap();
    assert_eq!(c.deadline_ns(), 1_000 + ns(xfer(4096 + 16)) + ns(t.t_prog));
    assert!(!c.is_complete());
    let wall = Instant::now();
    let deadline = c.deadline_ns();
    c.wait();
    assert!(wall.elapsed() < t.t_prog, "a virtual wait must not sleep");
    assert_eq!(clock.now_ns(), deadline);
    // QD1 read right after: the bank is free, so exactly t_read + transfer.
    let mut buf = [0u8; 4096];
    let start = clock.now_ns();
    let r = dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None).unwrap();
    assert_eq!(r.deadline_ns() - start, ns(t.t_read) + ns(xfer(4096)));
    block_on(r.into_future());
    assert_eq!(clock.now_ns(), start + ns(t.t_read) + ns(xfer(4096)));
    assert_eq!(buf, PAGE);
    // The bank's load is seen on the simulated clock.
    let e = dev
        .erase(BlockAddr {
            bank: BankId(1),
            block: 0,
        })
        .unwrap();
    assert_eq!(e.deadline_ns() - clock.now_ns(), ns(t.t_erase));
    assert_eq!(dev.bank_load(BankId(1)).busy_for, Some(t.t_erase));
    assert_eq!(dev.idle_at_ns(), e.deadline_ns());
    e.wait();
    assert_eq!(dev.bank_load(BankId(1)).busy_for, None);
}

/// The timeline is the same as with `real`: two banks of two channels overlap, one bank
/// serialises, and a submission at an earlier simulated time still queues behind the bank's
/// earlier work.
#[test]
fn virtual_time_keeps_bank_and_channel_order() {
    let f = virt();
    let dev = f.dev();
    let clock = dev.sim_clock().unwrap();
    let one = ns(xfer(4096)) + ns(t_prog());
    let a = dev.program(PageAddr::new(0, 0, 0), &PAGE, &[]).unwrap();
    let b = dev.program(PageAddr::new(2, 0, 0), &PAGE, &[]).unwrap();
    assert_eq!(a.deadline_ns(), one);
    assert_eq!(
        b.deadline_ns(),
        one,
        "banks 0 and 2 are on different channels"
    );
    let c = dev.program(PageAddr::new(0, 0, 1), &PAGE, &[]).unwrap();
    assert_eq!(
        c.deadline_ns(),
        2 * one,
        "bank 0 is busy until its first program ends"
    );
    c.wait();
    clock.set_ns(10);
    let d = dev.program(PageAddr::new(0, 0, 2), &PAGE, &[]).unwrap();
    assert_eq!(d.deadline_ns(), 3 * one);
    drop((a, b, d));
}

/// A TLC part on the simulated clock: each page type takes its own read and program time
/// (page p is type p % 3), a copyback takes its source's read and its destination's program,
/// and reads of a worn block take one more array read per read-retry step.
#[test]
fn virtual_time_follows_page_types_and_read_retry() {
    use nand_model::{CellTiming, CellType, ReadRetry};
    let us = Duration::from_micros;
    let mut config = small_config();
    config.timing.cell = CellTiming {
        kind: CellType::Tlc,
        t_read_upper: [us(50), us(70), Duration::ZERO],
        t_prog_upper: [us(600), us(1500), Duration::ZERO],
    };
    config.timing.read_retry = ReadRetry {
        every_pe_cycles: 2,
        max_steps: 2,
    };
    config.endurance = 100;
    let t = config.timing;
    let f = Fixture::new(&config, TimingMode::Virtual);
    let dev = f.dev();
    let clock = dev.sim_clock().expect("virtual");
    let progs = [t.t_prog, us(600), us(1500), t.t_prog];
    let reads = [t.t_read, us(50), us(70), t.t_read];
    let b = BlockAddr::new(0, 0);
    for (p, want) in progs.iter().enumerate() {
        let start = clock.now_ns();
        let c = dev.program(b.page(p as u32), &PAGE, &[]).unwrap();
        assert_eq!(
            c.deadline_ns() - start,
            ns(xfer(4096)) + ns(*want),
            "page {p}"
        );
        c.wait();
    }
    let mut buf = [0u8; 4096];
    for (p, want) in reads.iter().enumerate() {
        let start = clock.now_ns();
        let c = dev.read(b.page(p as u32), 0, &mut buf, None).unwrap();
        assert_eq!(
            c.deadline_ns() - start,
            ns(*want) + ns(xfer(4096)),
            "page {p}"
        );
        c.wait();
    }
    // Copyback of page 2 (MSB) to page 1 of block 1 (CSB): MSB read + CSB program.
    dev.program(BlockAddr::new(0, 1).page(0), &PAGE, &[])
        .unwrap()
        .wait();
    let start = clock.now_ns();
    let c = dev
        .copyback(b.page(2), BlockAddr::new(0, 1).page(1), None)
        .unwrap();
    assert_eq!(c.deadline_ns() - start, ns(us(70)) + ns(us(600)));
    c.wait();
    // Wear: after 2 erases one retry step (a read takes twice its array time), after 4 and
    // beyond the cap of 2 steps, three times.
    let worn = BlockAddr::new(1, 0);
    for (erases, steps) in [(2, 1), (4, 2), (6, 2)] {
        while dev.block_state(worn).unwrap().erase_count < erases {
            dev.erase(worn).unwrap().wait();
        }
        dev.program(worn.page(0), &PAGE, &[]).unwrap().wait();
        let start = clock.now_ns();
        let c = dev.read(worn.page(0), 0, &mut buf, None).unwrap();
        assert_eq!(
            c.deadline_ns() - start,
            (steps + 1) * ns(t.t_read) + ns(xfer(4096)),
            "{erases} erases"
        );
        c.wait();
    }
}

/// Every timer mode waits until the deadline and never returns early, blocking or as a future
/// (hybrid and spin wake early and spin the rest on the waiting thread).
#[test]
fn every_timer_mode_completes_on_time() {
    use nand_model::TimerMode;
    let f = real();
    let dev = f.dev();
    for (i, mode) in [TimerMode::Sleep, TimerMode::Hybrid, TimerMode::Spin]
        .into_iter()
        .enumerate()
    {
        dev.set_timer(mode);
        assert_eq!(dev.timer(), mode);
        let block = 1 + i as u32;
        let mut buf = [0u8; 4096];
        for page in 0..4 {
            let c = dev
                .program(PageAddr::new(0, block, page), &PAGE, &[])
                .unwrap();
            let d = c.deadline();
            c.wait();
            assert!(Instant::now() >= d, "{mode} wait");
            let c = dev
                .read(PageAddr::new(0, block, page), 0, &mut buf, None)
                .unwrap();
            assert!(block_on(on_time(c)), "{mode} future");
        }
        let results =
            block_on(futures::future::join_all((0..4).map(|bank| {
                on_time(dev.erase(BlockAddr::new(bank, block)).unwrap())
            })));
        assert!(results.iter().all(|&ok| ok), "{mode} futures");
    }
}

/// Arrival-time accounting: with timing real, an operation submitted inside an
/// `ArrivalScope` counts from the request's arrival, so the time the submitter spent before
/// submitting is absorbed; outside the scope (or when the bank is busy) nothing changes.
#[test]
fn submissions_count_from_the_request_arrival() {
    use nand_model::ArrivalScope;
    let f = real();
    let dev = f.dev();
    let t = small_config().timing;
    dev.program(PageAddr::new(0, 0, 0), &PAGE, &[])
        .unwrap()
        .wait();
    let arrival = dev.now_ns();
    // The emulator "processes" the request for 300 us before it submits the read.
    std::thread::sleep(Duration::from_micros(300));
    let mut buf = [0u8; 4096];
    let c = {
        let _scope = ArrivalScope::enter(arrival);
        dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None).unwrap()
    };
    assert_eq!(c.deadline_ns(), arrival + ns(t.t_read) + ns(xfer(4096)));
    c.wait();
    // Without a scope the read counts from its submission.
    let before = dev.now_ns();
    let c = dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None).unwrap();
    assert!(c.deadline_ns() >= before + ns(t.t_read) + ns(xfer(4096)));
    c.wait();
    // A busy bank still holds the read back: the arrival never moves time before free_at.
    let e = dev.erase(BlockAddr::new(1, 0)).unwrap();
    let busy_until = e.deadline_ns();
    let c = {
        let _scope = ArrivalScope::enter(dev.now_ns() - 1_000);
        dev.read(PageAddr::new(1, 0, 0), 0, &mut buf, None).unwrap()
    };
    assert_eq!(c.deadline_ns(), busy_until + ns(t.t_read) + ns(xfer(4096)));
}

/// Inside an arrival scope, an operation submitted after waiting for another counts from that
/// one's modelled end (a GC step's read, then the program of what it read): the thread's late
/// wake-up between the two is absorbed, and the second never starts before the first ended,
/// although the scope's arrival is earlier.
#[test]
fn a_dependent_operation_counts_from_the_end_of_the_one_waited_for() {
    use nand_model::ArrivalScope;
    let f = real();
    let dev = f.dev();
    let t = small_config().timing;
    dev.program(PageAddr::new(0, 0, 0), &PAGE, &[])
        .unwrap()
        .wait();
    let mut buf = [0u8; 4096];
    let _scope = ArrivalScope::enter(dev.now_ns());
    let r = dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None).unwrap();
    let read_end = r.deadline_ns();
    r.wait();
    // The thread wakes up late (or works) for 2 ms before it submits the dependent program, on
    // bank 2 (the other channel: idle).
    std::thread::sleep(Duration::from_millis(2));
    let c = dev.program(PageAddr::new(2, 0, 0), &buf, &[]).unwrap();
    assert_eq!(c.deadline_ns(), read_end + ns(xfer(4096)) + ns(t.t_prog));
}

/// `last_wait_end_ns` moves to the operation's completion at every wait on this thread, one
/// that had to wait or one that found the operation done (what a submitter that dates
/// operations back checks: what it submits next depends on the waited operation), and not at
/// other threads' waits.
#[test]
fn a_wait_is_noted_for_the_thread() {
    let f = real();
    let dev = f.dev();
    let c = dev.program(PageAddr::new(0, 0, 0), &PAGE, &[]).unwrap();
    let deadline = c.deadline_ns();
    let before = nand_model::last_wait_end_ns();
    c.wait();
    let after = nand_model::last_wait_end_ns();
    assert!(
        after != before && after == deadline,
        "{before} -> {after}, deadline {deadline}"
    );
    // A completion whose deadline has passed returns at once, noted at its deadline.
    let c = dev.erase(BlockAddr::new(1, 0)).unwrap();
    let erased = c.deadline_ns();
    std::thread::sleep(Duration::from_nanos(
        c.deadline_ns().saturating_sub(dev.now_ns()),
    ));
    std::thread::sleep(Duration::from_millis(1));
    c.wait();
    assert_eq!(nand_model::last_wait_end_ns(), erased);
    let after = erased;
    // Another thread's waits are its own.
    let c = dev.program(PageAddr::new(0, 0, 1), &PAGE, &[]).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || c.wait());
    });
    assert_eq!(nand_model::last_wait_end_ns(), after);
    // A caller's own wait (a lock, a sleep) is noted when it says so.
    nand_model::note_blocking_wait();
    assert!(nand_model::last_wait_end_ns() > after);
}

/// Program/erase suspend on the simulated clock: a read that reaches a bank in an erase's (or
/// a program's) array time runs after `t_suspend` instead of after the erase, and the erase
/// ends later by the read's time plus suspend and resume; a second read while the erase is
/// still suspended runs right after the first; a read during a program's transfer, or behind
/// other queued work, queues as before.
#[test]
fn reads_suspend_programs_and_erases() {
    use nand_model::Suspend;
    let us = Duration::from_micros;
    let mut config = small_config();
    config.timing.suspend = Suspend {
        enabled: true,
        t_suspend: us(20),
        t_resume: us(15),
    };
    let t = config.timing;
    let f = Fixture::new(&config, TimingMode::Virtual);
    let dev = f.dev();
    let clock = dev.sim_clock().expect("virtual");
    let read_ns = ns(t.t_read) + ns(xfer(4096));
    let mut buf = [0u8; 4096];
    dev.program(PageAddr::new(0, 0, 0), &PAGE, &[])
        .unwrap()
        .wait();
    dev.program(PageAddr::new(0, 0, 1), &PAGE, &[])
        .unwrap()
        .wait();
    // Erase block 1 of bank 0; a read 100 us into it.
    let t0 = clock.now_ns();
    let erase = dev.erase(BlockAddr::new(0, 1)).unwrap();
    assert_eq!(erase.deadline_ns(), t0 + ns(t.t_erase));
    clock.set_ns(t0 + 100_000);
    let r1 = dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None).unwrap();
    let r1_end = t0 + 100_000 + 20_000 + read_ns;
    assert_eq!(r1.deadline_ns(), r1_end);
    let moved = t0 + ns(t.t_erase) + (r1_end - (t0 + 100_000)) + 15_000;
    assert_eq!(erase.deadline_ns(), moved, "the erase's completion follows");
    // A second read while the first still runs: right after it, no second suspend/resume.
    clock.set_ns(t0 + 110_000);
    let r2 = dev.read(PageAddr::new(0, 0, 1), 0, &mut buf, None).unwrap();
    assert_eq!(r2.deadline_ns(), r1_end + read_ns);
    assert_eq!(erase.deadline_ns(), moved + read_ns);
    assert_eq!(dev.stats().banks[0].suspends, 2);
    erase.wait();
    assert_eq!(clock.now_ns(), moved + read_ns);
    r1.wait();
    r2.wait();
    // A program: a read during its transfer queues behind it; one in its array time suspends.
    clock.set_ns(moved + read_ns);
    let p0 = clock.now_ns();
    let prog = dev.program(PageAddr::new(0, 0, 2), &PAGE, &[]).unwrap();
    let prog_end = p0 + ns(xfer(4096)) + ns(t.t_prog);
    assert_eq!(prog.deadline_ns(), prog_end);
    clock.set_ns(p0 + 1_000);
    let queued = dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None).unwrap();
    assert_eq!(queued.deadline_ns(), prog_end + read_ns);
    assert_eq!(prog.deadline_ns(), prog_end, "not suspended");
    // Behind the queued read, the program is no longer the bank's last operation: a later read
    // in its array time queues too.
    clock.set_ns(p0 + ns(xfer(4096)) + 10_000);
    let behind = dev.read(PageAddr::new(0, 0, 1), 0, &mut buf, None).unwrap();
    assert_eq!(behind.deadline_ns(), prog_end + 2 * read_ns);
    assert_eq!(dev.stats().banks[0].suspends, 2);
    drop((prog, queued, behind));
    // Without suspend the same read waits for the whole erase.
    let f = virt();
    let dev = f.dev();
    let clock = dev.sim_clock().expect("virtual");
    dev.program(PageAddr::new(0, 0, 0), &PAGE, &[])
        .unwrap()
        .wait();
    let t0 = clock.now_ns();
    let erase = dev.erase(BlockAddr::new(0, 1)).unwrap();
    clock.set_ns(t0 + 100_000);
    let r = dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None).unwrap();
    assert_eq!(r.deadline_ns(), erase.deadline_ns() + read_ns);
}

/// With timing real, a thread waiting for an erase that a read suspends returns no earlier
/// than the erase's moved end, blocking or as a future.
#[test]
fn a_waiter_follows_a_suspended_erase() {
    use nand_model::Suspend;
    let us = Duration::from_micros;
    let mut config = small_config();
    config.timing.suspend = Suspend {
        enabled: true,
        t_suspend: us(20),
        t_resume: us(15),
    };
    let t = config.timing;
    // What one suspending read adds to the erase.
    let added = us(20) + t.t_read + xfer(4096) + us(15);
    let f = Fixture::new(&config, TimingMode::Real);
    let dev = f.dev();
    dev.program(PageAddr::new(0, 0, 0), &PAGE, &[])
        .unwrap()
        .wait();
    for future in [false, true] {
        let erase = dev.erase(BlockAddr::new(0, 1)).unwrap();
        let first = erase.deadline();
        std::thread::scope(|s| {
            let waiter = s.spawn(move || {
                if future {
                    block_on(erase.into_future());
                } else {
                    erase.wait();
                }
                Instant::now()
            });
            std::thread::sleep(Duration::from_micros(300));
            let mut buf = [0u8; 4096];
            dev.read(PageAddr::new(0, 0, 0), 0, &mut buf, None)
                .unwrap()
                .wait();
            let woke = waiter.join().unwrap();
            assert!(
                woke >= first + added,
                "future {future}: woke before the moved end"
            );
        });
    }
    assert_eq!(dev.stats().banks[0].suspends, 2);
}

/// Multi-plane operations on the simulated clock: a two-plane program moves both pages over
/// the channel and then takes one t_prog (two single programs take two), a two-plane read one
/// t_read then both transfers; the data lands where it should. Pages in one plane, at different
/// page indexes, on different banks or more than the planes are refused as violations, and a
/// single-plane device refuses any pair.
#[test]
fn multi_plane_program_and_read_take_one_array_time() {
    use nand_model::NandError;
    let mut config = small_config();
    config.planes = 2;
    let t = config.timing;
    let f = Fixture::new(&config, TimingMode::Virtual);
    let dev = f.dev();
    let clock = dev.sim_clock().expect("virtual");
    let a = PageAddr::new(0, 0, 0);
    let b = PageAddr::new(0, 1, 0);
    let (da, db) = ([0x11u8; 4096], [0x22u8; 4096]);
    let start = clock.now_ns();
    let c = dev
        .program_planes(&[(a, &da, &[1, 2]), (b, &db, &[3, 4])])
        .unwrap();
    assert_eq!(
        c.deadline_ns() - start,
        ns(xfer(2 * (4096 + 2))) + ns(t.t_prog)
    );
    c.wait();
    // Two single programs on one bank: two array times.
    let start = clock.now_ns();
    dev.program(PageAddr::new(0, 0, 1), &PAGE, &[])
        .unwrap()
        .wait();
    dev.program(PageAddr::new(0, 1, 1), &PAGE, &[])
        .unwrap()
        .wait();
    assert_eq!(clock.now_ns() - start, 2 * (ns(xfer(4096)) + ns(t.t_prog)));
    let (mut ra, mut rb) = ([0u8; 4096], [0u8; 4096]);
    let (mut oa, mut ob) = ([0u8; 2], [0u8; 2]);
    let start = clock.now_ns();
    let c = dev
        .read_planes(&mut [
            (a, 0, &mut ra[..], Some(&mut oa[..])),
            (b, 0, &mut rb[..], Some(&mut ob[..])),
        ])
        .unwrap();
    assert_eq!(
        c.deadline_ns() - start,
        ns(t.t_read) + ns(xfer(2 * (4096 + 2)))
    );
    c.wait();
    assert_eq!((ra, rb, oa, ob), (da, db, [1, 2], [3, 4]));
    assert_eq!(dev.stats().totals.programs, 4);
    assert_eq!(dev.stats().totals.reads, 2);
    // The rules, each a violation that changes nothing.
    let v = dev.violations();
    type Pages<'a> = &'a [(PageAddr, &'a [u8], &'a [u8])];
    let bad: [Pages; 5] = [
        &[],
        &[
            (PageAddr::new(0, 2, 0), &PAGE, &[]),
            (PageAddr::new(0, 4, 0), &PAGE, &[]),
        ],
        &[
            (PageAddr::new(0, 2, 0), &PAGE, &[]),
            (PageAddr::new(0, 3, 1), &PAGE, &[]),
        ],
        &[
            (PageAddr::new(0, 2, 0), &PAGE, &[]),
            (PageAddr::new(1, 3, 0), &PAGE, &[]),
        ],
        &[
            (PageAddr::new(0, 2, 0), &PAGE, &[]),
            (PageAddr::new(0, 3, 0), &PAGE, &[]),
            (PageAddr::new(0, 5, 0), &PAGE, &[]),
        ],
    ];
    for pages in bad {
        let e = dev.program_planes(pages).unwrap_err();
        assert!(matches!(e, NandError::MultiPlane { .. }), "{e}");
    }
    // One page not programmable: nothing is programmed.
    let e = dev
        .program_planes(&[
            (PageAddr::new(0, 2, 0), &PAGE, &[]),
            (PageAddr::new(0, 3, 1), &PAGE, &[]),
        ])
        .unwrap_err();
    assert!(matches!(e, NandError::MultiPlane { .. }), "{e}");
    let e = dev
        .program_planes(&[
            (PageAddr::new(0, 2, 0), &PAGE, &[]),
            (PageAddr::new(0, 1, 0), &PAGE, &[]),
        ])
        .unwrap_err();
    assert!(matches!(e, NandError::AlreadyProgrammed { .. }), "{e}");
    assert_eq!(
        dev.block_state(BlockAddr::new(0, 2))
            .unwrap()
            .programmed_pages,
        0
    );
    assert_eq!(dev.violations(), v + 7);
    // A program fault on one plane consumes that page; the other is programmed.
    dev.faults().fail_program_at(PageAddr::new(0, 3, 0));
    let e = dev
        .program_planes(&[
            (PageAddr::new(0, 2, 0), &da, &[]),
            (PageAddr::new(0, 3, 0), &db, &[]),
        ])
        .unwrap_err();
    assert!(
        matches!(e, NandError::ProgramFailed { page, failed_mask: 0b10 } if page == PageAddr::new(0, 3, 0)),
        "{e:?}"
    );
    for block in [2, 3] {
        assert_eq!(
            dev.block_state(BlockAddr::new(0, block))
                .unwrap()
                .programmed_pages,
            1
        );
    }
    dev.read(PageAddr::new(0, 2, 0), 0, &mut ra, None)
        .unwrap()
        .wait();
    assert_eq!(ra, da);
    // Both planes fail: the error names the first page and marks both.
    dev.faults().fail_program_at(PageAddr::new(0, 2, 1));
    dev.faults().fail_program_at(PageAddr::new(0, 3, 1));
    let e = dev
        .program_planes(&[
            (PageAddr::new(0, 2, 1), &da, &[]),
            (PageAddr::new(0, 3, 1), &db, &[]),
        ])
        .unwrap_err();
    assert!(
        matches!(e, NandError::ProgramFailed { page, failed_mask: 0b11 } if page == PageAddr::new(0, 2, 1)),
        "{e:?}"
    );
    // A single-plane device refuses a pair.
    let f1 = virt();
    let e = f1
        .dev()
        .program_planes(&[
            (PageAddr::new(0, 0, 0), &PAGE, &[]),
            (PageAddr::new(0, 1, 0), &PAGE, &[]),
        ])
        .unwrap_err();
    assert!(matches!(e, NandError::MultiPlane { .. }), "{e}");
}
