//! Power cuts: `kill -9` of the real daemon while NBD clients write, then a restart and a check
//! of every block against what the clients know.
//!
//! Every 4 KiB block the clients write is *stamped*: it carries a magic, its own block number
//! and a generation, and the rest of it derives from (block, generation). So a block read back
//! is either a whole, known version of itself or evidence of a bug (torn, foreign, or zero).
//! The clients track, per block, the newest generation sent and the generation that is durable
//! (acknowledged before a completed FLUSH, or acknowledged with FUA). After the restart each
//! block must hold a generation between the two: flushed data survives, unflushed data is old
//! or new, never anything else. Two writes to one block are never in flight together, so the
//! newest acknowledged write is well defined.
//!
//! The kill points are random (seeded; the seed is printed, `FTLD_CRASH_SEED` repeats a run),
//! and one test kills the daemon while garbage collection is busy on a small device that has
//! been overwritten several times. Writers drain before a FLUSH, except in
//! `flushed_data_survives_kill9_with_writes_during_flushes`, where they keep writing while it
//! runs (the FLUSH then covers what was acknowledged before it was sent), on a 32 KiB-page
//! preset with the modelled timing.
//!
//! Those tests use the first ledger.
//! `flushed_data_survives_kill9_with_trims_partial_writes_and_racing_connections` keeps a
//! richer one: per block, every request's effect in send order (a generation, zeroes
//! from a trim or write-zeroes, or the block a 512-byte write leaves) and, for each, the
//! requests in flight on the block when it was sent. Connections race on a shared part of the
//! device, so the device may apply them in any order; once a request is durable, only it, the
//! requests in flight when it was sent and those sent after it may come back.

use std::collections::{HashMap, HashSet, VecDeque};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::nbd::{
    Client, NBD_CMD_FLAG_FUA, NBD_CMD_FLUSH, NBD_CMD_TRIM, NBD_CMD_WRITE, NBD_CMD_WRITE_ZEROES,
};
use e2e::{run_ok, Daemon, DaemonOpts};
use serde_json::Value;

const FTLD: &str = env!("CARGO_BIN_EXE_ftld");
const BLOCK: usize = 4096;
const MAGIC: u64 = 0x4654_4c44_4352_5348; // "FTLDCRSH"

// ------------------------------------------------------------------------------------------
// Stamped blocks and a small PRNG
// ------------------------------------------------------------------------------------------

/// xorshift64*: deterministic from a seed, good enough for offsets and delays.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed() -> u64 {
    let seed = std::env::var("FTLD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos() as u64
        });
    eprintln!("crash test seed {seed} (FTLD_CRASH_SEED={seed} repeats it)");
    seed
}

/// Block `block` at generation `gen`.
fn stamped(block: u64, gen: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(BLOCK);
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.extend_from_slice(&block.to_le_bytes());
    b.extend_from_slice(&gen.to_le_bytes());
    let mut r = Rng::new((block << 24) ^ gen);
    while b.len() < BLOCK {
        b.extend_from_slice(&r.next().to_le_bytes());
    }
    b.truncate(BLOCK);
    b
}

/// The generation of a block read back, or a description of what is wrong with it.
fn parse_stamp(block: u64, data: &[u8]) -> Result<u64, String> {
    if data.iter().all(|&b| b == 0) {
        return Err("all zeroes".into());
    }
    let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    if word(0) != MAGIC {
        return Err(format!("no stamp (first bytes {:02x?})", &data[..16]));
    }
    if word(8) != block {
        return Err(format!("stamp of block {} (foreign data)", word(8)));
    }
    let gen = word(16);
    if data != stamped(block, gen) {
        return Err(format!("generation {gen} stamp over other content (torn)"));
    }
    Ok(gen)
}

// ------------------------------------------------------------------------------------------
// What the clients know
// ------------------------------------------------------------------------------------------

/// Per block: the newest generation sent and the durable one.
struct Ledger {
    sent: Vec<u64>,
    durable: Vec<u64>,
}

/// Shared between the writer threads and the test.
struct Shared {
    ledger: Mutex<Ledger>,
    acked_bytes: AtomicU64,
    flushes: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn new(blocks: u64) -> Arc<Shared> {
        Arc::new(Shared {
            ledger: Mutex::new(Ledger {
                sent: vec![0; blocks as usize],
                durable: vec![0; blocks as usize],
            }),
            acked_bytes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        })
    }
}

/// How a writer picks blocks and flushes.
#[derive(Clone, Copy)]
struct WriterPlan {
    /// Writers in all; writer `id` owns the blocks `b` with `b % writers == id`.
    writers: u64,
    /// Requests in flight per connection.
    depth: usize,
    /// A FLUSH after this many writes (drained first, so the durable set is exact).
    flush_every: u64,
    /// Send the FLUSH without draining and go on writing while it runs: it makes durable the
    /// writes acknowledged before it was sent (a write to a block may land while that block's
    /// flushed version is being programmed).
    flush_in_flight: bool,
    /// Writes go to the first this many blocks only (0: the whole device), so blocks are
    /// rewritten while their last version is in flight.
    hot_blocks: u64,
    /// One write in this many carries FUA.
    fua_every: u64,
}

/// Writes stamped blocks of its share at random until the connection breaks (the daemon was
/// killed) or `stop` is set. Returns an error only for failures other than a broken
/// connection: an error reply, or a reply to a request never sent.
fn writer(
    socket: std::path::PathBuf,
    shared: Arc<Shared>,
    id: u64,
    plan: WriterPlan,
    seed: u64,
) -> Result<(), String> {
    let Ok(mut c) = Client::connect(&socket) else {
        return Ok(());
    };
    let blocks = c.size / BLOCK as u64;
    let mut rng = Rng::new(seed ^ ((id + 1) * 0x1234_5678));
    let mut in_flight: HashMap<u64, (u64, u64, bool)> = HashMap::new(); // cookie -> (block, gen, fua)
    let mut busy: HashSet<u64> = HashSet::new();
    let mut acked: Vec<(u64, u64)> = Vec::new(); // (block, gen) acked since the last flush
                                                 // A FLUSH sent and not answered yet, and the writes it makes durable.
    let mut flushing: Option<(u64, Vec<(u64, u64)>)> = None;
    let mut writes = 0u64;
    let span = if plan.hot_blocks > 0 {
        plan.hot_blocks.min(blocks)
    } else {
        blocks
    };
    let mine = span.div_ceil(plan.writers);
    // Completes one reply; Err(None) means the connection broke.
    let complete = |c: &mut Client,
                    in_flight: &mut HashMap<u64, (u64, u64, bool)>,
                    busy: &mut HashSet<u64>,
                    acked: &mut Vec<(u64, u64)>,
                    flushing: &mut Option<(u64, Vec<(u64, u64)>)>|
     -> Result<(), Option<String>> {
        let r = c.reply().map_err(|_| None)?;
        if flushing
            .as_ref()
            .is_some_and(|(cookie, _)| *cookie == r.cookie)
        {
            if r.error != 0 {
                return Err(Some(format!("FLUSH failed with errno {}", r.error)));
            }
            let (_, covered) = flushing.take().expect("checked");
            let mut l = shared.ledger.lock().expect("ledger");
            for (block, gen) in covered {
                let d = &mut l.durable[block as usize];
                *d = (*d).max(gen);
            }
            shared.flushes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let (block, gen, fua) = in_flight
            .remove(&r.cookie)
            .ok_or_else(|| Some(format!("reply for unknown cookie {}", r.cookie)))?;
        if r.error != 0 {
            return Err(Some(format!(
                "write of block {block} gen {gen} failed with errno {}",
                r.error
            )));
        }
        busy.remove(&block);
        acked.push((block, gen));
        shared
            .acked_bytes
            .fetch_add(BLOCK as u64, Ordering::Relaxed);
        if fua {
            let mut l = shared.ledger.lock().expect("ledger");
            let d = &mut l.durable[block as usize];
            *d = (*d).max(gen);
        }
        Ok(())
    };
    let result = (|| -> Result<(), Option<String>> {
        while !shared.stop.load(Ordering::Relaxed) {
            // Pick a block of ours that has no write in flight.
            let block = loop {
                let b = rng.below(mine) * plan.writers + id;
                if b < blocks && !busy.contains(&b) {
                    break b;
                }
            };
            let gen = {
                let mut l = shared.ledger.lock().expect("ledger");
                l.sent[block as usize] += 1;
                l.sent[block as usize]
            };
            writes += 1;
            let fua = writes.is_multiple_of(plan.fua_every);
            let flags = if fua { NBD_CMD_FLAG_FUA } else { 0 };
            let cookie = c
                .request(
                    NBD_CMD_WRITE,
                    flags,
                    block * BLOCK as u64,
                    BLOCK as u32,
                    &stamped(block, gen),
                )
                .map_err(|_| None)?;
            in_flight.insert(cookie, (block, gen, fua));
            busy.insert(block);
            // (A loop: a reply may be the FLUSH's, which frees no write.)
            while in_flight.len() >= plan.depth {
                complete(&mut c, &mut in_flight, &mut busy, &mut acked, &mut flushing)?;
            }
            if writes.is_multiple_of(plan.flush_every) && plan.flush_in_flight {
                if flushing.is_none() {
                    let cookie = c.request(NBD_CMD_FLUSH, 0, 0, 0, &[]).map_err(|_| None)?;
                    flushing = Some((cookie, std::mem::take(&mut acked)));
                }
            } else if writes.is_multiple_of(plan.flush_every) {
                while !in_flight.is_empty() {
                    complete(&mut c, &mut in_flight, &mut busy, &mut acked, &mut flushing)?;
                }
                let r = c.call(NBD_CMD_FLUSH, 0, 0, 0, &[]).map_err(|_| None)?;
                if r.error != 0 {
                    return Err(Some(format!("FLUSH failed with errno {}", r.error)));
                }
                let mut l = shared.ledger.lock().expect("ledger");
                for (block, gen) in acked.drain(..) {
                    let d = &mut l.durable[block as usize];
                    *d = (*d).max(gen);
                }
                shared.flushes.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    })();
    match result {
        Ok(()) | Err(None) => Ok(()),
        Err(Some(e)) => Err(e),
    }
}

/// Writes generation 1 of every block and flushes: the starting point of every test.
fn fill(d: &Daemon, shared: &Shared) -> u64 {
    let mut c = Client::connect(&d.socket()).expect("connect");
    let blocks = c.size / BLOCK as u64;
    let mut pending = VecDeque::new();
    for b in 0..blocks {
        let cookie = c
            .request(
                NBD_CMD_WRITE,
                0,
                b * BLOCK as u64,
                BLOCK as u32,
                &stamped(b, 1),
            )
            .expect("send");
        pending.push_back(cookie);
        if pending.len() >= 32 {
            pending.pop_front();
            assert_eq!(c.reply().expect("reply").error, 0);
        }
    }
    while pending.pop_front().is_some() {
        assert_eq!(c.reply().expect("reply").error, 0);
    }
    c.flush().expect("flush");
    c.disconnect();
    let mut l = shared.ledger.lock().expect("ledger");
    l.sent.iter_mut().for_each(|g| *g = 1);
    l.durable.iter_mut().for_each(|g| *g = 1);
    blocks
}

/// Reads every block and checks it against the ledger; then flushes and records what was read
/// as durable (the device returned it after a restart and a flush: it must not change without
/// a write). Returns how many blocks held a generation newer than the durable one.
fn verify(d: &Daemon, shared: &Shared, blocks: u64) -> u64 {
    let mut l = shared.ledger.lock().expect("ledger");
    let mut newer = 0;
    let mut seen = vec![0u64; blocks as usize];
    check_every_block(d, blocks, |b, page| {
        let (lo, hi) = (l.durable[b as usize], l.sent[b as usize]);
        match parse_stamp(b, page) {
            Ok(g) if (lo..=hi).contains(&g) => {
                newer += u64::from(g > lo);
                seen[b as usize] = g;
                Ok(())
            }
            Ok(g) => Err(format!("generation {g}, expected {lo}..={hi}")),
            Err(e) => Err(format!("{e}, expected {lo}..={hi}")),
        }
    });
    l.durable = seen;
    newer
}

/// Reads every block after a restart (1 MiB per request) and has `check` judge each (an error
/// says what is wrong with it); panics listing the wrong ones, else flushes.
fn check_every_block(
    d: &Daemon,
    blocks: u64,
    mut check: impl FnMut(u64, &[u8]) -> Result<(), String>,
) {
    let mut c = Client::connect(&d.socket()).expect("connect after restart");
    let mut bad = Vec::new();
    let mut b0 = 0;
    while b0 < blocks {
        let n = 256.min(blocks - b0);
        let data = c
            .read(b0 * BLOCK as u64, (n as usize * BLOCK) as u32)
            .expect("read");
        for (i, page) in data.chunks(BLOCK).enumerate() {
            let b = b0 + i as u64;
            if let Err(e) = check(b, page) {
                bad.push(format!("block {b}: {e}"));
            }
        }
        b0 += n;
    }
    assert!(
        bad.is_empty(),
        "{} of {blocks} blocks are wrong after kill -9 and restart:\n{}\n--- log\n{}",
        bad.len(),
        bad.iter().take(30).cloned().collect::<Vec<_>>().join("\n"),
        d.log()
    );
    c.flush().expect("flush");
    c.disconnect();
}

fn info_json(d: &Daemon) -> Value {
    let out = run_ok(Command::new(FTLD).arg("info").arg("--json").arg(d.image()));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ftld info printed bad JSON: {e}\n{out}"))
}

/// After a kill -9: `ftld info` sees a dirty shutdown; restart; the daemon rolled forward
/// from its last checkpoint.
fn restart_after_power_cut(d: &mut Daemon) {
    let info = info_json(d);
    assert_eq!(info["clean_shutdown"], false, "after kill -9: {info:#}");
    let text = run_ok(Command::new(FTLD).arg("info").arg(d.image()));
    assert!(text.contains("dirty"), "{text}");
    d.restart();
    let rec = &d.stats()["ftl"]["recovery"];
    assert_eq!(
        rec["mode"], "roll-forward",
        "recovery after kill -9: {rec:#}"
    );
    assert!(rec["pages_scanned"].as_u64().unwrap_or(0) > 0, "{rec:#}");
}

/// Runs `writers` writer threads until `kill_when` says so, then kills the daemon.
fn run_and_kill(
    d: &mut Daemon,
    shared: &Arc<Shared>,
    plan: WriterPlan,
    seed: u64,
    kill_when: impl FnMut(&Daemon, &Shared) -> bool,
) {
    run_and_end(d, shared, plan, seed, kill_when, Daemon::kill9);
}

/// Runs `writers` writer threads until `kill_when` says so, then ends the daemon with `end`.
fn run_and_end(
    d: &mut Daemon,
    shared: &Arc<Shared>,
    plan: WriterPlan,
    seed: u64,
    mut kill_when: impl FnMut(&Daemon, &Shared) -> bool,
    end: impl FnOnce(&mut Daemon),
) {
    shared.stop.store(false, Ordering::Relaxed);
    let threads: Vec<_> = (0..plan.writers)
        .map(|id| {
            let (socket, shared) = (d.socket(), Arc::clone(shared));
            std::thread::spawn(move || writer(socket, shared, id, plan, seed))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !kill_when(d, shared) {
        if threads.iter().all(|t| t.is_finished()) || Instant::now() > deadline {
            shared.stop.store(true, Ordering::Relaxed);
            let errs: Vec<_> = threads
                .into_iter()
                .filter_map(|t| t.join().expect("writer panicked").err())
                .collect();
            panic!(
                "the writers stopped (or never reached the kill point) before the kill: {errs:?}\n--- log\n{}",
                d.log()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    end(d);
    shared.stop.store(true, Ordering::Relaxed);
    for t in threads {
        if let Err(e) = t.join().expect("writer panicked") {
            panic!("writer failed before the kill: {e}\n--- log\n{}", d.log());
        }
    }
}

/// kill -9 in the middle of a clean shutdown (SIGTERM: the daemon stops taking requests,
/// answers those in flight, flushes, checkpoints and closes the image), at a random point of
/// it, with writers still sending. Whatever stage the kill cuts, the restart must find every
/// flushed block; a kill after the image was closed leaves a clean image.
#[test]
fn kill9_during_a_clean_shutdown_loses_nothing_flushed() {
    let seed = seed() ^ 0x7368;
    let mut rng = Rng::new(seed);
    for (scheme, preset, timing) in [
        ("page", "slc-small-004", "off"),
        ("bast", "lftl-card", "real"),
    ] {
        let opts = DaemonOpts {
            preset: preset.into(),
            capacity: "32M".into(),
            timing: timing.into(),
            extra: vec!["--ftl".into(), scheme.into()],
            ..Default::default()
        };
        let mut d = Daemon::start_with(FTLD, opts);
        let blocks = 32 << 20 >> 12;
        let shared = Shared::new(blocks);
        assert_eq!(fill(&d, &shared), blocks);
        // Round 0 measures how long a clean shutdown takes under this load; the later rounds
        // kill at random points of that span (and a little after it), drawn log-uniformly
        // from 0.2 ms: the image is closed well before the process has exited (its
        // connections wind down last), so the early part matters most.
        let mut shutdown = Duration::ZERO;
        let (mut clean, mut dirty) = (0, 0);
        for round in 0..6u64 {
            let delay = Duration::from_millis(50 + rng.below(300));
            let kill_after = (round > 0).then(|| {
                let (lo, hi) = (
                    200f64.ln(),
                    (shutdown.as_micros() as f64 * 1.2).max(400.0).ln(),
                );
                let u = rng.below(1 << 20) as f64 / f64::from(1 << 20);
                Duration::from_micros((lo + u * (hi - lo)).exp() as u64)
            });
            let start = Instant::now();
            let flushes_before = shared.flushes.load(Ordering::Relaxed);
            run_and_end(
                &mut d,
                &shared,
                PLAN,
                seed ^ round,
                |_, s| {
                    start.elapsed() >= delay && s.flushes.load(Ordering::Relaxed) > flushes_before
                },
                |d| match kill_after {
                    Some(t) => {
                        e2e::daemon::signal(d.pid(), libc::SIGTERM);
                        std::thread::sleep(t);
                        d.kill9();
                    }
                    None => {
                        let t = Instant::now();
                        assert!(d.stop().success(), "{}", d.log());
                        shutdown = t.elapsed();
                    }
                },
            );
            if info_json(&d)["clean_shutdown"] == true {
                clean += 1;
            } else {
                dirty += 1;
            }
            d.restart();
            let rec = d.stats()["ftl"]["recovery"].clone();
            let newer = verify(&d, &shared, blocks);
            eprintln!(
                "{scheme} round {round}: SIGTERM, kill -9 {kill_after:?} later (a clean shutdown took {shutdown:?}), {newer} blocks kept unflushed data, recovery {rec}"
            );
        }
        eprintln!("{scheme}: {clean} kills after the shutdown finished, {dirty} during it");
        assert!(d.stop().success(), "{}", d.log());
    }
}

const PLAN: WriterPlan = WriterPlan {
    writers: 3,
    depth: 16,
    flush_every: 200,
    fua_every: 37,
    flush_in_flight: false,
    hot_blocks: 0,
};

#[test]
fn flushed_data_survives_kill9_at_random_points() {
    kill9_rounds("page", 5);
}

#[test]
fn flushed_data_survives_kill9_on_bast_and_fast() {
    kill9_rounds("bast", 3);
    kill9_rounds("fast", 3);
}

/// RFTL: a kill -9 in the middle of folds and shifts leaves logical blocks with three
/// blocks, compacted at the restart; NFTL: merges cut short.
#[test]
fn flushed_data_survives_kill9_on_rftl_and_nftl() {
    kill9_rounds("rftl", 3);
    kill9_rounds("nftl", 2);
}

/// GFTL: a kill -9 in the middle of a merge leaves its logical block's pages in the old data
/// block, the destination and the write buffer: queued again at the restart.
#[test]
fn flushed_data_survives_kill9_on_gftl() {
    kill9_rounds("gftl", 3);
}

/// Writes that land while their block's flushed version is being programmed, on 32 KiB
/// pages with the modelled timing: BAST merges constantly on a hot megabyte. Before the fix in
/// `page::map::commit_page` such a flushed version was garbage at once, a merge erased it, and
/// a kill -9 before the newer write reached flash lost it (found from outside).
#[test]
fn flushed_data_survives_kill9_with_writes_during_flushes() {
    let plan = WriterPlan {
        writers: 3,
        depth: 8,
        flush_every: 40,
        fua_every: 1_000_000,
        flush_in_flight: true,
        hot_blocks: 256,
    };
    for scheme in ["bast", "page"] {
        let opts = DaemonOpts {
            preset: "lftl-card".into(),
            capacity: "32M".into(),
            timing: "real".into(),
            extra: vec!["--ftl".into(), scheme.into()],
            ..Default::default()
        };
        kill9_rounds_with(scheme, 4, opts, plan, u64::MAX);
    }
}

fn kill9_rounds(scheme: &str, rounds: u64) {
    let opts = DaemonOpts {
        capacity: "32M".into(),
        extra: vec!["--ftl".into(), scheme.into()],
        ..Default::default()
    };
    kill9_rounds_with(scheme, rounds, opts, PLAN, u64::MAX);
}

/// A medium that fails now and then (`[faults]`: programs, erases and reads at random, the
/// faults' seed the test's): every open after a kill -9 still rolls forward from its
/// checkpoint (a read that needs a retry is retried there too), failed programs retire their
/// blocks, failed erases mark theirs bad, and nothing flushed is lost.
#[test]
fn flushed_data_survives_kill9_on_a_failing_medium() {
    let conf = tempfile::tempdir().expect("tempdir");
    let conf_file = conf.path().join("ftld.toml");
    std::fs::write(
        &conf_file,
        format!(
            // Spare room for the blocks that go bad: a small device runs out of it fast.
            "[ftl]\noverprovision = 0.25\n[faults]\nprogram = 1e-4\nerase = 5e-3\nread = 0.02\nseed = {}\n",
            seed()
        ),
    )
    .expect("config");
    let opts = DaemonOpts {
        capacity: "32M".into(),
        extra: vec!["--config".into(), conf_file.display().to_string()],
        ..Default::default()
    };
    // Each round ends at a random time or after up to twice the capacity, whichever comes
    // first: on an idle machine a round of up to 750 ms wrote 60-360 MiB (timing off), and
    // three of them wore the 32 MiB device's spare out (50-80 failed programs and erases; "spare
    // blocks exhausted" in 2 runs of 16, 2026-12-01).
    let d = kill9_rounds_with("page", 3, opts, PLAN, 2 * (32 << 20));
    // The statistics count since the last open; the log holds every run's (rates high enough
    // that blocks go bad even on a slow machine).
    let log = d.log();
    assert!(
        log.contains("program failed") || log.contains("erase failed"),
        "no block went bad: {log}"
    );
    let s = d.stats();
    let injected = &s["nand"]["injected"];
    eprintln!(
        "failing medium: {} failed programs and {} failed erases in the log; since the last \
         open: injected {injected}, bad blocks {}, NAND {}",
        log.matches("program failed;").count(),
        log.matches("erase failed, block marked bad").count(),
        s["ftl"]["bad_blocks"],
        s["nand"]["totals"]
    );
    assert!(injected["read"].as_u64() > Some(0), "{injected}");
    assert!(
        s["ftl"]["read_retries"].as_u64() > Some(0),
        "{:#}",
        s["ftl"]
    );
    assert_eq!(s["ftl"]["uncorrectable_reads"], 0, "{:#}", s["ftl"]);
    assert_eq!(s["ftl"]["nand_violations"], 0, "{:#}", s["ftl"]);
    // Read-only only if a checkpoint area wore out (`Core::checkpoint_areas_worn`: so many of
    // its blocks bad that it cannot hold a checkpoint; it keeps the last one), unlikely at
    // 5e-3 of erases; the data checks above hold either way.
    let why = s["ftl"]["read_only"].as_str().unwrap_or_default();
    assert!(
        why.is_empty() || why.starts_with("checkpoint area"),
        "{:#}",
        s["ftl"]
    );
}

/// `rounds` rounds of writing and kill -9, each ended (after a flush) at a random 50-750 ms or
/// once a random quarter to all of `max_bytes` was acknowledged, whichever comes first.
fn kill9_rounds_with(
    scheme: &str,
    rounds: u64,
    opts: DaemonOpts,
    plan: WriterPlan,
    max_bytes: u64,
) -> Daemon {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let mut d = Daemon::start_with(FTLD, opts);
    let blocks = 32 << 20 >> 12;
    let shared = Shared::new(blocks);
    assert_eq!(fill(&d, &shared), blocks);
    for round in 0..rounds {
        let delay = Duration::from_millis(50 + rng.below(700));
        let start = Instant::now();
        let flushes_before = shared.flushes.load(Ordering::Relaxed);
        let bytes_before = shared.acked_bytes.load(Ordering::Relaxed);
        let bytes = match max_bytes {
            u64::MAX => u64::MAX,
            m => m / 4 + rng.below(m - m / 4),
        };
        run_and_kill(&mut d, &shared, plan, seed ^ round, |_, s| {
            // At least one flush per round, so every round has newly durable data.
            let written = s.acked_bytes.load(Ordering::Relaxed) - bytes_before;
            (start.elapsed() >= delay || written >= bytes)
                && s.flushes.load(Ordering::Relaxed) > flushes_before
        });
        restart_after_power_cut(&mut d);
        let rec = d.stats()["ftl"]["recovery"].clone();
        let newer = verify(&d, &shared, blocks);
        eprintln!(
            "{scheme} round {round}: killed after {delay:?} and {} KiB written, {} flushes so far, {newer} blocks kept unflushed data, recovery {rec}",
            (shared.acked_bytes.load(Ordering::Relaxed) - bytes_before) >> 10,
            shared.flushes.load(Ordering::Relaxed)
        );
    }
    // The last state also survives a clean restart.
    assert!(d.stop().success(), "{}", d.log());
    d.restart();
    verify(&d, &shared, blocks);
    d
}

#[test]
fn kill9_during_heavy_gc_loses_nothing_flushed() {
    let seed = seed() ^ 0x6763;
    let mut rng = Rng::new(seed);
    let mut d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            capacity: "16M".into(),
            ..Default::default()
        },
    );
    let capacity = 16u64 << 20;
    let blocks = capacity >> 12;
    let shared = Shared::new(blocks);
    fill(&d, &shared);
    for round in 0..3u64 {
        // Overwrite 2-4 times the capacity with GC running, then kill at a random moment.
        let target = capacity * (2 + rng.below(3)) + rng.below(capacity);
        let base = shared.acked_bytes.load(Ordering::Relaxed);
        let gc_before = d.stats()["ftl"]["gc_erases"].as_u64().unwrap_or(0);
        let mut gc_seen = gc_before;
        let plan = WriterPlan {
            flush_every: 500,
            ..PLAN
        };
        let mut last_poll = Instant::now();
        run_and_kill(&mut d, &shared, plan, seed ^ round, |d, s| {
            if last_poll.elapsed() >= Duration::from_millis(20) {
                last_poll = Instant::now();
                gc_seen = d.stats()["ftl"]["gc_erases"].as_u64().unwrap_or(0);
            }
            gc_seen > gc_before && s.acked_bytes.load(Ordering::Relaxed) - base >= target
        });
        restart_after_power_cut(&mut d);
        let newer = verify(&d, &shared, blocks);
        eprintln!(
            "GC round {round}: killed after {} MiB written, {} GC erases before the kill, {newer} blocks kept unflushed data",
            (shared.acked_bytes.load(Ordering::Relaxed) - base) >> 20,
            gc_seen - gc_before
        );
    }
    let s = d.stats();
    assert_eq!(s["ftl"]["nand_violations"], 0, "{:#}", s["ftl"]);
}

/// Periodic checkpoints racing the writers: a checkpoint freezes host writes, programs what is
/// buffered and snapshots the map while clients keep writing (and flushing) at full speed. A
/// write caught half buffered by a snapshot would be left out of it although numbered before
/// it, and recovery would then keep the checkpoint's older copy over the flushed one. With a
/// 128 KiB checkpoint interval the daemon checkpoints every few milliseconds here, so every
/// kill lands among many of them.
#[test]
fn kill9_while_checkpoints_race_writes() {
    let seed = seed() ^ 0x636b;
    let mut rng = Rng::new(seed);
    let conf = tempfile::tempdir().expect("tempdir");
    let conf_file = conf.path().join("ftld.toml");
    std::fs::write(&conf_file, "[ftl]\ncheckpoint_interval_bytes = 131072\n").expect("config");
    let mut d = Daemon::start_with(
        FTLD,
        DaemonOpts {
            capacity: "16M".into(),
            extra: vec!["--config".into(), conf_file.display().to_string()],
            ..Default::default()
        },
    );
    let blocks = 16 << 20 >> 12;
    let shared = Shared::new(blocks);
    fill(&d, &shared);
    for round in 0..8u64 {
        let ckpt_before = d.stats()["ftl"]["checkpoints"].as_u64().unwrap_or(0);
        let flushes_before = shared.flushes.load(Ordering::Relaxed);
        let wanted = 20 + rng.below(60);
        let mut ckpts = ckpt_before;
        let mut last_poll = Instant::now();
        run_and_kill(&mut d, &shared, PLAN, seed ^ round, |d, s| {
            if last_poll.elapsed() >= Duration::from_millis(10) {
                last_poll = Instant::now();
                ckpts = d.stats()["ftl"]["checkpoints"].as_u64().unwrap_or(0);
            }
            ckpts >= ckpt_before + wanted && s.flushes.load(Ordering::Relaxed) > flushes_before
        });
        // The kill may land right after a checkpoint, with nothing programmed since: then the
        // image looks cleanly shut down and the open scans nothing ("clean" recovery).
        d.restart();
        let rec = d.stats()["ftl"]["recovery"].clone();
        assert!(
            rec["mode"] == "roll-forward" || rec["mode"] == "clean",
            "recovery after kill -9 with a checkpoint: {rec:#}"
        );
        let newer = verify(&d, &shared, blocks);
        eprintln!(
            "checkpoint round {round}: killed after {} checkpoints, {newer} blocks kept unflushed data, recovery {rec}",
            ckpts - ckpt_before
        );
    }
}

// ------------------------------------------------------------------------------------------
// Mixed requests: trims, write-zeroes, 512-byte writes and connections racing on one block
// ------------------------------------------------------------------------------------------

/// What a block holds after a request.
#[derive(Clone)]
enum Content {
    Zero,
    Gen(u64),
    /// A 512-byte write's result: the whole block as its writer computed it.
    Bytes(Arc<Vec<u8>>),
}

impl Content {
    fn bytes(&self, block: u64) -> Vec<u8> {
        match self {
            Content::Zero => vec![0; BLOCK],
            Content::Gen(g) => stamped(block, *g),
            Content::Bytes(b) => b.to_vec(),
        }
    }
}

/// One request's effect on a block, in the order the clients sent them.
struct Entry {
    idx: u64,
    content: Content,
    /// The requests on the block in flight when this one was sent: the device may order this
    /// one before any of them.
    concurrent: Vec<u64>,
}

/// A block's history: what may still come back after a power cut.
#[derive(Default)]
struct BlockLog {
    entries: Vec<Entry>,
    next: u64,
    in_flight: Vec<u64>,
}

impl BlockLog {
    fn send(&mut self, content: Content) -> u64 {
        let idx = self.next;
        self.next += 1;
        let concurrent = self.in_flight.clone();
        self.in_flight.push(idx);
        self.entries.push(Entry {
            idx,
            content,
            concurrent,
        });
        idx
    }

    fn acked(&mut self, idx: u64, durable: bool) {
        self.in_flight.retain(|&i| i != idx);
        if durable {
            self.made_durable(idx);
        }
    }

    /// Request `idx` is durable: from now on the block holds its content, or that of a request
    /// in flight when it was sent, or of one sent after it (NBD lets the server run requests
    /// in flight in any order). Every durable request narrows what may come back; an entry
    /// pruned already was excluded by a later durable request, whose bound is the tighter.
    fn made_durable(&mut self, idx: u64) {
        let Some(k) = self.entries.iter().position(|e| e.idx == idx) else {
            return;
        };
        let concurrent = std::mem::take(&mut self.entries[k].concurrent);
        self.entries
            .retain(|e| e.idx >= idx || concurrent.contains(&e.idx));
        if let Some(e) = self.entries.iter_mut().find(|e| e.idx == idx) {
            e.concurrent = concurrent;
        }
    }

    /// After a power cut and a restart: the block holds `content`, durable, and nothing is in
    /// flight (the requests in flight at the cut were executed or lost, and what was read
    /// says which).
    fn restarted_with(&mut self, content: Content) {
        self.in_flight.clear();
        let i = self.send(content);
        self.acked(i, true);
    }

    fn last(&self) -> &Content {
        &self
            .entries
            .last()
            .expect("a block always has an entry")
            .content
    }
}

struct MixedLedger {
    blocks: Vec<BlockLog>,
}

impl MixedLedger {
    fn new(blocks: u64) -> MixedLedger {
        MixedLedger {
            blocks: (0..blocks)
                .map(|_| {
                    let mut l = BlockLog::default();
                    l.restarted_with(Content::Gen(1));
                    l
                })
                .collect(),
        }
    }
}

/// The device: blocks `0..SHARED_BLOCKS` are written and trimmed by every connection at once
/// (whole blocks only, so each request's result is known whatever the order); the rest is cut
/// into one range per connection, where its owner also writes 512-byte pieces (one request
/// per block in flight, so the piece's block is known).
const SHARED_BLOCKS: u64 = 512;

/// Sends random requests until the connection breaks or `stop` is set.
fn mixed_client(
    socket: std::path::PathBuf,
    ledger: Arc<Mutex<MixedLedger>>,
    stop: Arc<AtomicBool>,
    flushes: Arc<AtomicU64>,
    (id, clients): (u64, u64),
    seed: u64,
) -> Result<(), String> {
    let Ok(mut c) = Client::connect(&socket) else {
        return Ok(());
    };
    let blocks = c.size / BLOCK as u64;
    let own = (blocks - SHARED_BLOCKS) / clients;
    let own_start = SHARED_BLOCKS + id * own;
    let mut rng = Rng::new(seed ^ ((id + 1) * 0x9876_5431));
    // cookie -> (first block, block count, index per block, durable on ack)
    let mut in_flight: HashMap<u64, (u64, Vec<u64>, bool)> = HashMap::new();
    let mut busy: HashSet<u64> = HashSet::new();
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let mut flushing: Option<(u64, Vec<(u64, u64)>)> = None;
    let mut gen_seq = 0u64;
    let mut requests = 0u64;
    let result = (|| -> Result<(), Option<String>> {
        while !stop.load(Ordering::Relaxed) {
            requests += 1;
            gen_seq += 1;
            // Generations are unique per connection and request: (request << 8) | client.
            let gen = (gen_seq << 8) | (id + 2);
            let fua = rng.below(5) == 0;
            let flags = if fua { NBD_CMD_FLAG_FUA } else { 0 };
            let shared_block = rng.below(3) == 0;
            let (kind, first, count, offset, len, payload, contents) = if shared_block {
                let b = rng.below(SHARED_BLOCKS);
                if rng.below(2) == 0 {
                    (
                        NBD_CMD_WRITE,
                        b,
                        1,
                        b * 4096,
                        4096,
                        stamped(b, gen),
                        vec![Content::Gen(gen)],
                    )
                } else {
                    let kind = if rng.below(2) == 0 {
                        NBD_CMD_TRIM
                    } else {
                        NBD_CMD_WRITE_ZEROES
                    };
                    (kind, b, 1, b * 4096, 4096, Vec::new(), vec![Content::Zero])
                }
            } else {
                let b = loop {
                    let b = own_start + rng.below(own);
                    if !busy.contains(&b) {
                        break b;
                    }
                };
                match rng.below(10) {
                    0..=3 => (
                        NBD_CMD_WRITE,
                        b,
                        1,
                        b * 4096,
                        4096,
                        stamped(b, gen),
                        vec![Content::Gen(gen)],
                    ),
                    4..=7 => {
                        // A 512-byte piece over what the block holds now (its owner's view:
                        // nothing else writes it).
                        let sector = rng.below(8) as usize;
                        let mut piece = stamped(b, gen);
                        piece.truncate(512);
                        let mut whole = ledger.lock().expect("ledger").blocks[b as usize]
                            .last()
                            .bytes(b);
                        whole[sector * 512..(sector + 1) * 512].copy_from_slice(&piece);
                        let off = b * 4096 + sector as u64 * 512;
                        (
                            NBD_CMD_WRITE,
                            b,
                            1,
                            off,
                            512,
                            piece,
                            vec![Content::Bytes(Arc::new(whole))],
                        )
                    }
                    _ => {
                        // A trim or write-zeroes of 1-4 whole blocks of the owner's range.
                        let n = (1 + rng.below(4)).min(own_start + own - b);
                        if (b..b + n).any(|x| busy.contains(&x)) {
                            continue;
                        }
                        let kind = if rng.below(2) == 0 {
                            NBD_CMD_TRIM
                        } else {
                            NBD_CMD_WRITE_ZEROES
                        };
                        (
                            kind,
                            b,
                            n,
                            b * 4096,
                            (n * 4096) as u32,
                            Vec::new(),
                            vec![Content::Zero; n as usize],
                        )
                    }
                }
            };
            let idxs: Vec<u64> = {
                let mut l = ledger.lock().expect("ledger");
                contents
                    .into_iter()
                    .enumerate()
                    .map(|(i, content)| l.blocks[(first + i as u64) as usize].send(content))
                    .collect()
            };
            let cookie = c
                .request(kind, flags, offset, len, &payload)
                .map_err(|_| None)?;
            if !shared_block {
                busy.extend(first..first + count);
            }
            in_flight.insert(cookie, (first, idxs, fua));
            while in_flight.len() >= 8 {
                let r = c.reply().map_err(|_| None)?;
                if flushing.as_ref().is_some_and(|(k, _)| *k == r.cookie) {
                    if r.error != 0 {
                        return Err(Some(format!("FLUSH failed with errno {}", r.error)));
                    }
                    let (_, covered) = flushing.take().expect("checked");
                    let mut l = ledger.lock().expect("ledger");
                    for (b, i) in covered {
                        l.blocks[b as usize].made_durable(i);
                    }
                    flushes.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let (first, idxs, fua) = in_flight
                    .remove(&r.cookie)
                    .ok_or_else(|| Some(format!("reply for unknown cookie {}", r.cookie)))?;
                if r.error != 0 {
                    return Err(Some(format!(
                        "request on block {first} failed with errno {}",
                        r.error
                    )));
                }
                let mut l = ledger.lock().expect("ledger");
                for (i, idx) in idxs.into_iter().enumerate() {
                    let b = first + i as u64;
                    l.blocks[b as usize].acked(idx, fua);
                    busy.remove(&b);
                    acked.push((b, idx));
                }
            }
            // A FLUSH now and then, sent while other requests are in flight: it covers what
            // was acknowledged before it was sent.
            if requests.is_multiple_of(48) && flushing.is_none() {
                let cookie = c.request(NBD_CMD_FLUSH, 0, 0, 0, &[]).map_err(|_| None)?;
                flushing = Some((cookie, std::mem::take(&mut acked)));
            }
        }
        Ok(())
    })();
    match result {
        Ok(()) | Err(None) => Ok(()),
        Err(Some(e)) => Err(e),
    }
}

/// Reads every block after a restart: each must hold the content of a request its log still
/// allows (see [`BlockLog::made_durable`]). Then flushes and makes what was read durable.
fn verify_mixed(d: &Daemon, ledger: &Mutex<MixedLedger>) -> u64 {
    let mut l = ledger.lock().expect("ledger");
    let blocks = l.blocks.len() as u64;
    let mut newer = 0;
    let mut seen = Vec::with_capacity(blocks as usize);
    check_every_block(d, blocks, |b, page| {
        let log = &l.blocks[b as usize];
        if let Some(e) = log
            .entries
            .iter()
            .rev()
            .find(|e| e.content.bytes(b) == page)
        {
            newer += u64::from(e.idx > log.entries[0].idx);
            seen.push(e.content.clone());
            return Ok(());
        }
        seen.push(Content::Bytes(Arc::new(page.to_vec())));
        // (A block holding 512-byte writes parses as "torn": its sectors come from several
        // generations.)
        let what = match parse_stamp(b, page) {
            Ok(g) => format!("generation {g:#x}"),
            Err(e) => e,
        };
        let kept: Vec<String> = log
            .entries
            .iter()
            .map(|e| match &e.content {
                Content::Zero => format!("{}: zeroes", e.idx),
                Content::Gen(g) => format!("{}: generation {g:#x}", e.idx),
                Content::Bytes(_) => format!("{}: a 512-byte write's result", e.idx),
            })
            .collect();
        Err(format!("{what}; allowed (index: content) {kept:?}"))
    });
    for (log, content) in l.blocks.iter_mut().zip(seen) {
        log.restarted_with(content);
    }
    newer
}

/// Trims, write-zeroes and 512-byte writes beside whole-block writes, FUA or not, from three
/// connections racing on a shared part of the device, with FLUSHes sent while requests are in
/// flight; kill -9 at random points. The races include a trim overtaking a FUA write still
/// being programmed (the window of `PageMap::commit_page`'s late zombies, which the 50 ms
/// trim tick makes too narrow to hit reliably from outside: `power_cut.rs` places GC in it).
/// The 512-byte writes go to blocks nothing else writes (their result must be known), so the
/// race of a partial write overtaken by a whole-block write is covered in process
/// (`concurrent.rs`), not here. The ledger holds ftld's contract, stricter than NBD's: a
/// trimmed block reads as zeroes, and a 4 KiB block is written whole.
#[test]
fn flushed_data_survives_kill9_with_trims_partial_writes_and_racing_connections() {
    let seed = seed() ^ 0x6d78;
    let mut rng = Rng::new(seed);
    for (scheme, preset, timing) in [
        ("page", "lftl-card", "real"),
        ("bast", "lftl-card", "real"),
        ("page", "default", "off"),
        ("gftl", "default", "off"),
    ] {
        let mut d = Daemon::start_with(
            FTLD,
            DaemonOpts {
                preset: preset.into(),
                capacity: "32M".into(),
                timing: timing.into(),
                extra: vec!["--ftl".into(), scheme.into()],
                ..Default::default()
            },
        );
        let blocks = 32u64 << 20 >> 12;
        assert_eq!(fill(&d, &Shared::new(blocks)), blocks);
        let ledger = Arc::new(Mutex::new(MixedLedger::new(blocks)));
        for round in 0..3u64 {
            let stop = Arc::new(AtomicBool::new(false));
            let flushes = Arc::new(AtomicU64::new(0));
            let clients = 3;
            let threads: Vec<_> = (0..clients)
                .map(|id| {
                    let (socket, ledger, stop, flushes) = (
                        d.socket(),
                        Arc::clone(&ledger),
                        Arc::clone(&stop),
                        Arc::clone(&flushes),
                    );
                    let s = seed ^ (round << 32);
                    std::thread::spawn(move || {
                        mixed_client(socket, ledger, stop, flushes, (id, clients), s)
                    })
                })
                .collect();
            let delay = Duration::from_millis(100 + rng.below(900));
            let start = Instant::now();
            while start.elapsed() < delay || flushes.load(Ordering::Relaxed) < 2 {
                assert!(
                    start.elapsed() < Duration::from_secs(120)
                        && !threads.iter().all(|t| t.is_finished()),
                    "the clients stopped before the kill\n--- log\n{}",
                    d.log()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            d.kill9();
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                if let Err(e) = t.join().expect("client panicked") {
                    panic!("client failed before the kill: {e}\n--- log\n{}", d.log());
                }
            }
            restart_after_power_cut(&mut d);
            let newer = verify_mixed(&d, &ledger);
            eprintln!(
                "{scheme} on {preset}, timing {timing}, round {round}: killed after {delay:?} and {} flushes, {newer} blocks kept unflushed data",
                flushes.load(Ordering::Relaxed)
            );
        }
        assert!(d.stop().success(), "{}", d.log());
    }
}

/// A device that wears out under an NBD client (`[faults]` erases failing often enough that
/// its spare blocks run out within seconds), for every scheme: writes get `EPERM` once it
/// turns read-only, the SIGTERM stop still exits 0, and the restart serves it read-only with
/// the reason. Every block reads as its last flushed generation or a later acknowledged one,
/// and a block short of its last acknowledged write is one the stop counted (it logs the
/// pages it could not program; the page scheme loses none). On the 16 KiB-page `tlc` preset
/// (rftl and gftl, whose steps need an erase to fit a copy: `slc-small-004`), acknowledged
/// writes wait in partly filled pages at the turn, and are programmed after it where the
/// scheme can.
#[test]
fn a_device_that_wears_out_over_nbd_loses_only_what_its_stop_counts() {
    let seed = seed();
    for (scheme, preset, slots) in [
        ("page", "tlc", 4),
        ("bast", "tlc", 4),
        ("fast", "tlc", 4),
        ("nftl", "tlc", 4),
        ("rftl", "slc-small-004", 1),
        ("gftl", "slc-small-004", 1),
    ] {
        let conf = tempfile::tempdir().expect("tempdir");
        let conf_file = conf.path().join("ftld.toml");
        std::fs::write(
            &conf_file,
            format!("[faults]\nerase = 0.3\nseed = {seed}\n"),
        )
        .expect("config");
        let mut d = Daemon::start_with(
            FTLD,
            DaemonOpts {
                preset: preset.into(),
                capacity: "48M".into(),
                extra: vec![
                    "--ftl".into(),
                    scheme.into(),
                    "--config".into(),
                    conf_file.display().to_string(),
                ],
                ..Default::default()
            },
        );
        let mut c = Client::connect(&d.socket()).expect("connect");
        let used = c.size / BLOCK as u64 / 2;
        let (mut acked, mut durable) = (vec![0u64; used as usize], vec![0u64; used as usize]);
        let mut rng = Rng::new(seed);
        let mut gen = 0u64;
        // The write that failed: its block may read as it or as before.
        let mut failed = None;
        let mut worn = false;
        'writing: while gen < 2_000_000 {
            for _ in 0..64 {
                gen += 1;
                let b = rng.below(used);
                match c.write(b * BLOCK as u64, &stamped(b, gen)).expect("write") {
                    0 => acked[b as usize] = gen,
                    errno => {
                        assert_eq!(errno, 1, "{scheme}: a write on the worn device: EPERM");
                        failed = Some((b, gen));
                        worn = true;
                        break 'writing;
                    }
                }
            }
            if c.flush().is_err() {
                worn = true;
                break;
            }
            durable.copy_from_slice(&acked);
        }
        assert!(worn, "{scheme}: never wore out");
        assert!(
            c.flush().is_err(),
            "{scheme}: a flush on a device that turned read-only"
        );
        c.disconnect();
        assert!(
            d.stop().success(),
            "{scheme}: the stop of a worn device failed"
        );
        let log = d.log();
        assert!(
            log.contains("device is now read-only: spare blocks exhausted"),
            "{scheme}: {log}"
        );
        // "N pages of acknowledged writes or trims were never programmed" (`Ftl::close`).
        let dropped: u64 = match log.lines().find(|l| l.contains("were never programmed")) {
            None => 0,
            Some(line) => line
                .split_once("ERROR ftl: ")
                .and_then(|(_, rest)| rest.split_once(" pages of acknowledged writes"))
                .and_then(|(n, _)| n.parse().ok())
                .unwrap_or_else(|| panic!("{scheme}: cannot read the count in {line:?}")),
        };
        let log_before = log.len();
        d.restart();
        let restarted = d.log()[log_before..].to_string();
        assert!(
            restarted.contains("read-only"),
            "{scheme}: the restart does not say it serves read-only: {restarted}"
        );
        let mut c = Client::connect(&d.socket()).expect("connect after the restart");
        assert_eq!(
            c.write(0, &stamped(0, gen + 1))
                .expect("write after the restart"),
            1,
            "{scheme}: a write after the restart of a worn device: EPERM"
        );
        let mut lost = 0;
        for b in 0..used {
            let data = c.read(b * BLOCK as u64, BLOCK as u32).expect("read");
            let got = if data.iter().all(|&x| x == 0) {
                0
            } else {
                parse_stamp(b, &data).unwrap_or_else(|e| panic!("{scheme}: block {b}: {e}"))
            };
            let (d_gen, a_gen) = (durable[b as usize], acked[b as usize]);
            if failed == Some((b, got)) {
                continue;
            }
            assert!(
                d_gen <= got && got <= a_gen,
                "{scheme}: block {b} reads generation {got}: flushed {d_gen}, acknowledged {a_gen}"
            );
            lost += u64::from(got != a_gen);
        }
        c.disconnect();
        eprintln!(
            "{scheme} on {preset}: worn out after {gen} writes; {lost} acknowledged writes lost, \
             {dropped} pages counted never programmed"
        );
        assert!(
            lost <= dropped * slots,
            "{scheme}: {lost} writes lost, the stop counted {dropped} pages"
        );
        if scheme == "page" {
            assert_eq!(lost, 0, "page: {dropped} pages dropped");
        }
        assert!(
            d.stop().success(),
            "{scheme}: the stop after the restart failed"
        );
    }
}
