//! Garbage collection under sustained overwrite, for every GC policy: 20x the device capacity
//! written at >= 90 % utilisation, data verified, zero flash-rule violations.

mod common;

use common::*;
use ftl::{Ftl, GcPolicy, SchemeKind, VictimPolicy};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn verify_all(ftl: &Ftl, tags: &[u64]) {
    block_on(async {
        let mut buf = vec![0u8; 4096];
        for (l, t) in tags.iter().enumerate() {
            ftl.read(l as u64 * 4096, &mut buf).await.unwrap();
            assert_eq!(check_stamp(l as u64, &buf), Some(*t), "page {l}");
        }
    });
}

/// A device on 16 banks (4 channels x 4), where a floor per bank and a device-wide pool differ.
fn sixteen_banks() -> ftl::nand_model::NandConfig {
    let mut nand = small_nand(4096, 24);
    nand.geometry.channels = 4;
    nand.geometry.banks_per_channel = 4;
    nand
}

/// A new FTL at `path` on [`sixteen_banks`], in virtual time (deterministic GC workers).
fn create_sixteen_banks(path: &std::path::Path, cfg: ftl::FtlConfig) -> Ftl {
    Ftl::create(
        path,
        &sixteen_banks(),
        ftl::nand_model::TimingMode::Virtual,
        cfg,
        None,
    )
    .unwrap()
}

/// Rewrites page `l` through queue `q` with the next tag, keeping `tags` in step.
async fn overwrite(ftl: &Ftl, q: u64, l: u64, tags: &mut [u64]) {
    tags[l as usize] += 1;
    ftl.write(
        (q % 2) as usize,
        l * 4096,
        &stamped(l, tags[l as usize]),
        false,
    )
    .await
    .unwrap();
}

fn sustained(policy: GcPolicy, victim: VictimPolicy, page_size: u32) {
    sustained_with(policy, victim, page_size, true);
}

fn sustained_with(policy: GcPolicy, victim: VictimPolicy, page_size: u32, copyback: bool) {
    sustained_scheme(SchemeKind::Page, policy, victim, page_size, copyback);
}

fn sustained_scheme(
    scheme: SchemeKind,
    policy: GcPolicy,
    victim: VictimPolicy,
    page_size: u32,
    copyback: bool,
) {
    sustained_separated(
        scheme,
        policy,
        victim,
        page_size,
        copyback,
        ftl::Separation::None,
    );
}

fn sustained_separated(
    scheme: SchemeKind,
    policy: GcPolicy,
    victim: VictimPolicy,
    page_size: u32,
    copyback: bool,
    separation: ftl::Separation,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gc.img");
    let mut cfg = small_cfg(policy);
    cfg.separation = separation;
    cfg.scheme = scheme;
    cfg.victim_policy = victim;
    cfg.wear_level_spread = 16;
    cfg.gc_copyback = copyback;
    let ftl = create(&path, &small_nand(page_size, 64), cfg);
    let pages = ftl.capacity() / 4096;
    let used = pages * 92 / 100;
    let mut rng = SmallRng::seed_from_u64(7);
    let mut tags = vec![0u64; used as usize];
    let mut tag = 0;
    block_on(async {
        for l in 0..used {
            tag += 1;
            ftl.write(0, l * 4096, &stamped(l, tag), false)
                .await
                .unwrap();
            tags[l as usize] = tag;
        }
        let total = pages * 20;
        for i in 0..total {
            // Skewed: 80 % of writes go to 20 % of the pages, the rest is cold-ish.
            let l = if rng.gen_bool(0.8) {
                rng.gen_range(0..used / 5)
            } else {
                rng.gen_range(0..used)
            };
            tag += 1;
            ftl.write((i % 4) as usize, l * 4096, &stamped(l, tag), false)
                .await
                .unwrap();
            tags[l as usize] = tag;
            if i % 5000 == 0 {
                ftl.flush().await.unwrap();
            }
        }
        ftl.flush().await.unwrap();
    });
    verify_all(&ftl, &tags);
    ftl.check_invariants().unwrap();
    // Closed first: background workers may still be cleaning after the flush, and the FTL's
    // counters and the device's below must come from the same moment.
    ftl.close().unwrap();
    let s = ftl.stats();
    println!(
        "{scheme} {:>9} {:?} page {page_size}: WAF {:.2}, gc erases {}, copies {}, foreground {}, wear {}/{:.1}/{}, wl moves {}",
        policy.name(),
        victim,
        s.waf.unwrap_or(0.0),
        s.gc_erases,
        s.gc_copies,
        s.foreground_gc,
        s.wear.min,
        s.wear.avg,
        s.wear.max,
        s.wear_level_moves
    );
    assert!(s.gc_erases > 0);
    assert_eq!(s.nand_violations, 0);
    assert_eq!(
        s.hot_pages > 0,
        separation == ftl::Separation::HotCold,
        "hot pages {}",
        s.hot_pages
    );
    // Fully valid victim pages move by NAND copyback; the rest through the staging buffer.
    let copybacks = ftl.nand().stats().totals.copybacks;
    println!(
        "  {copybacks} of {} GC pages by copyback",
        s.gc_page_programs
    );
    if let Some(m) = &s.merges {
        println!(
            "  merges: switch {}, partial {}, full {}; pages copied {}",
            m.switch.count,
            m.partial.count,
            m.full.count,
            m.switch.pages_copied + m.partial.pages_copied + m.full.pages_copied
        );
        assert!(m.full.count > 0, "random overwrites make full merges");
        assert_eq!(copybacks, 0, "merges copy through the controller");
    } else if copyback && separation == ftl::Separation::None {
        assert!(copybacks > 0 && copybacks <= s.gc_page_programs);
    } else {
        // (With hot/cold separation GC reads every page through the controller: which GC
        // frontier it goes to depends on its logical pages.)
        assert_eq!(copybacks, 0);
    }
    assert!(s.waf.is_some_and(|w| w >= 1.0), "{:?}", s.waf);
    drop(ftl);
    let ftl = open(&path, small_cfg(policy));
    verify_all(&ftl, &tags);
    ftl.check_invariants().unwrap();
}

#[test]
fn sustained_overwrite_bast() {
    sustained_scheme(
        SchemeKind::Bast,
        GcPolicy::Adaptive,
        VictimPolicy::Greedy,
        4096,
        true,
    );
    sustained_scheme(
        SchemeKind::Bast,
        GcPolicy::Adaptive,
        VictimPolicy::Greedy,
        16384,
        true,
    );
}

#[test]
fn sustained_overwrite_fast() {
    sustained_scheme(
        SchemeKind::Fast,
        GcPolicy::Adaptive,
        VictimPolicy::Greedy,
        4096,
        true,
    );
    sustained_scheme(
        SchemeKind::Fast,
        GcPolicy::Adaptive,
        VictimPolicy::Greedy,
        16384,
        true,
    );
}

/// Hot/cold separation at 92 % utilisation: two frontiers per bank and writer on a device of
/// 4 banks, with 4 KiB pages and with 16 KiB ones (a NAND page's temperature is its slots'
/// majority).
#[test]
fn sustained_overwrite_hot_cold_separation() {
    for page in [4096, 16384] {
        sustained_separated(
            SchemeKind::Page,
            GcPolicy::Adaptive,
            VictimPolicy::CostBenefit,
            page,
            true,
            ftl::Separation::HotCold,
        );
    }
}

#[test]
fn sustained_overwrite_in_path() {
    sustained(GcPolicy::InPath, VictimPolicy::Greedy, 4096);
}

#[test]
fn sustained_overwrite_parallel() {
    sustained(GcPolicy::Parallel, VictimPolicy::Greedy, 8192);
}

#[test]
fn sustained_overwrite_adaptive() {
    sustained(GcPolicy::Adaptive, VictimPolicy::Greedy, 16384);
}

#[test]
fn sustained_overwrite_cost_benefit() {
    sustained(GcPolicy::Adaptive, VictimPolicy::CostBenefit, 4096);
}

#[test]
fn sustained_overwrite_without_copyback() {
    sustained_with(GcPolicy::Adaptive, VictimPolicy::Greedy, 4096, false);
}

/// An image closed (or cut) while a bank was down to its GC reserve opens with a block for
/// writers on every bank: recovery closes every partly programmed block, so without cleaning at
/// open such a bank stays out of reach and the first writes wait for foreground GC
/// (`experiments/gc_bound.py` measured 200-400 foreground steps from this after a reopen).
#[test]
fn an_image_reopened_at_its_gc_reserve_has_room_on_every_bank() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reserve.img");
    let cfg = small_cfg(GcPolicy::InPath);
    let ftl = Ftl::create(
        &path,
        &small_nand(4096, 32),
        ftl::nand_model::TimingMode::Virtual,
        cfg.clone(),
        None,
    )
    .unwrap();
    let pages = ftl.capacity() / 4096;
    let mut rng = SmallRng::seed_from_u64(11);
    let mut tags = vec![0u64; pages as usize];
    let at_reserve = |ftl: &Ftl| {
        ftl.stats()
            .banks
            .iter()
            .filter(|b| b.free_blocks <= 1)
            .count()
    };
    let mut written = 0;
    block_on(async {
        for l in 0..pages {
            ftl.write(0, l * 4096, &stamped(l, 1), false).await.unwrap();
            tags[l as usize] = 1;
        }
        // Random overwrites until a bank is down to its reserve with everything on flash (the
        // flush programs the open page, and the GC that pays for it may free a block again).
        loop {
            while at_reserve(&ftl) == 0 && written < 50 * pages {
                overwrite(&ftl, written, rng.gen_range(0..pages), &mut tags).await;
                written += 1;
            }
            ftl.flush().await.unwrap();
            if at_reserve(&ftl) > 0 || written >= 50 * pages {
                break;
            }
        }
    });
    let before = at_reserve(&ftl);
    assert!(
        before > 0,
        "no bank reached its GC reserve in {written} overwrites"
    );
    ftl.simulate_power_loss();
    let ftl = Ftl::open(&path, ftl::nand_model::TimingMode::Virtual, cfg).unwrap();
    let free: Vec<u32> = ftl.stats().banks.iter().map(|b| b.free_blocks).collect();
    assert!(
        free.iter().all(|&f| f > 1),
        "{before} bank(s) at the reserve before the crash; free blocks after the open: {free:?}"
    );
    verify_all(&ftl, &tags);
    ftl.check_invariants().unwrap();
}

/// Background GC keeps a device-wide pool of free blocks (`FtlConfig::gc_free_pool`), not a
/// floor on every bank: every block held free is spare space idle, which raises write
/// amplification. Once the workers have caught up, the blocks free above the banks' GC
/// reserves are the pool (and at most one block per worker more: each stops after the block
/// it freed), where a floor of one block over the reserve on each of 16 banks held 16.
#[test]
fn background_gc_keeps_a_device_wide_pool_not_a_floor_per_bank() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.img");
    let cfg = small_cfg(GcPolicy::Parallel);
    let ftl = create_sixteen_banks(&path, cfg.clone());
    let pages = ftl.capacity() / 4096;
    let mut rng = SmallRng::seed_from_u64(5);
    let mut tags = vec![0u64; pages as usize];
    block_on(async {
        for l in 0..pages {
            ftl.write(0, l * 4096, &stamped(l, 1), false).await.unwrap();
            tags[l as usize] = 1;
        }
        for i in 0..3 * pages {
            overwrite(&ftl, i, rng.gen_range(0..pages), &mut tags).await;
        }
        ftl.flush().await.unwrap();
    });
    // Idle for a simulated 5 s: the workers clean until the pool is full.
    ftl.advance_to(ftl.now_ns() + 5_000_000_000).unwrap();
    let free: Vec<u32> = ftl.stats().banks.iter().map(|b| b.free_blocks).collect();
    let pool: u32 = free.iter().map(|f| f.saturating_sub(1)).sum();
    let target = 2; // (16 banks / 8).max(2)
    assert!(
        (target..=target + cfg.gc_threads as u32).contains(&pool),
        "{pool} free blocks above the reserves, pool {target}: {free:?}"
    );
    assert!(
        free.iter().any(|&f| f <= 1),
        "no bank left at its reserve: {free:?}"
    );
    verify_all(&ftl, &tags);
    ftl.check_invariants().unwrap();
}

/// Static wear levelling with background workers, which keep a device-wide pool rather than a
/// floor per bank, so most banks rest at their GC reserve (levelling runs there while the pool
/// is full). Cold data written once, then a quarter of the pages rewritten many times, with
/// idle time in between (virtual time): the cold blocks must move.
#[test]
fn workers_level_wear_on_banks_at_their_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wear.img");
    let mut cfg = small_cfg(GcPolicy::Parallel);
    cfg.wear_level_spread = 4;
    let ftl = create_sixteen_banks(&path, cfg);
    let pages = ftl.capacity() / 4096;
    let hot = pages / 4;
    let mut tags = vec![1u64; pages as usize];
    let mut rng = SmallRng::seed_from_u64(3);
    block_on(async {
        for l in 0..pages {
            ftl.write(0, l * 4096, &stamped(l, 1), false).await.unwrap();
        }
        for i in 0..30 * pages {
            overwrite(&ftl, i, rng.gen_range(0..hot), &mut tags).await;
            if i % 1000 == 999 {
                ftl.flush().await.unwrap();
                ftl.advance_to(ftl.now_ns() + 200_000_000).unwrap();
            }
        }
        ftl.flush().await.unwrap();
    });
    ftl.advance_to(ftl.now_ns() + 2_000_000_000).unwrap();
    let s = ftl.stats();
    assert!(
        s.wear_level_moves > 0,
        "no cold data moved: wear {}/{:.1}/{}, free {:?}",
        s.wear.min,
        s.wear.avg,
        s.wear.max,
        s.banks.iter().map(|b| b.free_blocks).collect::<Vec<_>>()
    );
    verify_all(&ftl, &tags);
    ftl.check_invariants().unwrap();
}

/// Hot/cold separation (`[ftl] separation = "hot-cold"`): once the host has rewritten a hot
/// fifth of the pages long enough for the fill to leave the recency window, a cold page
/// rewritten among hot ones (one in five writes) goes to a block of its own temperature. The
/// blocks holding those cold rewrites are then mostly cold: hot pages there are only the few
/// whose last write fell out of the window (a few % of hot writes here). Without separation they
/// are mostly hot, as the write stream is. The data survives a power cut and reopen with both
/// frontiers open.
#[test]
fn hot_cold_separation_keeps_cold_rewrites_out_of_hot_blocks() {
    // Returns the hot pages' share of the pages in blocks holding cold rewrites, and
    // `hot_pages`.
    let run = |separation: ftl::Separation| -> (f64, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sep.img");
        let mut cfg = small_cfg(GcPolicy::Parallel);
        cfg.separation = separation;
        let ftl = create_sixteen_banks(&path, cfg.clone());
        let pages = ftl.capacity() / 4096;
        let hot = pages / 5;
        let mut rng = SmallRng::seed_from_u64(11);
        let mut tags = vec![0u64; pages as usize];
        let mut cold_rewrites = Vec::new();
        block_on(async {
            for l in 0..pages {
                overwrite(&ftl, l, l, &mut tags).await;
            }
            // Past the window (the exported pages): the fill is forgotten, hot pages are hot.
            for i in 0..2 * pages {
                overwrite(&ftl, i, rng.gen_range(0..hot), &mut tags).await;
            }
            // Four hot writes, then one cold rewrite of a page not written since the fill.
            for i in 0..hot {
                let l = if i % 5 == 4 {
                    let l = hot + cold_rewrites.len() as u64;
                    cold_rewrites.push(l);
                    l
                } else {
                    rng.gen_range(0..hot)
                };
                overwrite(&ftl, i, l, &mut tags).await;
            }
            ftl.flush().await.unwrap();
        });
        let block_of = |l: u64| ftl.physical_slot(l as u32).map(|(a, _)| a.block);
        let blocks: std::collections::HashSet<_> =
            cold_rewrites.iter().filter_map(|&l| block_of(l)).collect();
        let (mut hot_there, mut all_there) = (0, 0);
        for l in 0..pages {
            if block_of(l).is_some_and(|b| blocks.contains(&b)) {
                all_there += 1;
                hot_there += usize::from(l < hot);
            }
        }
        let hot_pages = ftl.stats().hot_pages;
        verify_all(&ftl, &tags);
        ftl.simulate_power_loss();
        let ftl = Ftl::open(&path, ftl::nand_model::TimingMode::Virtual, cfg).unwrap();
        verify_all(&ftl, &tags);
        ftl.check_invariants().unwrap();
        (hot_there as f64 / all_there.max(1) as f64, hot_pages)
    };
    let (share_on, hot_pages) = run(ftl::Separation::HotCold);
    let (share_off, hot_off) = run(ftl::Separation::None);
    eprintln!("hot share: {share_on:.3} separated, {share_off:.3} not; {hot_pages} hot pages");
    assert!(hot_pages > 0, "no page was judged hot");
    assert_eq!(hot_off, 0);
    assert!(
        share_off > 0.6 && share_on < 0.35,
        "hot pages' share of the blocks holding cold rewrites: {share_on:.2} separated, \
         {share_off:.2} not"
    );
}

/// Write frontiers shared per bank (`[ftl] frontiers`, the default) leave one partly written
/// host block per bank however many queues write; one per queue and bank (`per-queue`) leaves
/// a block per queue on every bank, spare that gathers no garbage (`ftld stats`: `open_blocks`).
/// Data written through four queues reads back either way.
#[test]
fn shared_frontiers_keep_one_open_host_block_per_bank() {
    let open_blocks = |frontiers: ftl::Frontiers| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = ftl::FtlConfig {
            queues: 4,
            frontiers,
            ..small_cfg(GcPolicy::Adaptive)
        };
        let ftl = create_sixteen_banks(&dir.path().join("f.img"), cfg);
        let pages = ftl.capacity() / 4096;
        let mut tags = vec![0u64; pages as usize];
        let mut rng = SmallRng::seed_from_u64(5);
        block_on(async {
            for i in 0..3 * pages {
                let l = if i < pages {
                    i
                } else {
                    rng.gen_range(0..pages)
                };
                tags[l as usize] += 1;
                let data = stamped(l, tags[l as usize]);
                ftl.write((i % 4) as usize, l * 4096, &data, false)
                    .await
                    .unwrap();
            }
            ftl.flush().await.unwrap();
        });
        verify_all(&ftl, &tags);
        ftl.check_invariants().unwrap();
        ftl.stats()
            .banks
            .iter()
            .map(|b| b.open_blocks)
            .collect::<Vec<_>>()
    };
    let shared = open_blocks(ftl::Frontiers::PerBank);
    let owned = open_blocks(ftl::Frontiers::PerQueue);
    // Per bank: its host frontier and GC's.
    assert!(shared.iter().all(|&n| n <= 2), "per-bank: {shared:?}");
    // Per queue: up to four host frontiers per bank (fewer where a bank at its floor could
    // not open one).
    assert!(
        owned.iter().sum::<u32>() > shared.iter().sum::<u32>(),
        "per-queue {owned:?} vs per-bank {shared:?}"
    );
    assert!(owned.iter().any(|&n| n > 2), "per-queue: {owned:?}");
}

/// With hot/cold separation, GC keeps moved data's temperature: a victim's hot survivors go
/// to a hot GC frontier and its cold ones to a cold one, so after a long 80/20 run blocks hold
/// one temperature or the other, not both (paper 000's single GC frontier would gather hot
/// survivors among the cold data GC moves, where they die soon and leave mixed blocks).
/// Measured as the share of valid pages that sit in a block with more of the other kind.
#[test]
fn gc_keeps_moved_data_apart_by_temperature() {
    let mixing = |separation: ftl::Separation| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.img");
        let mut cfg = small_cfg(GcPolicy::Parallel);
        cfg.separation = separation;
        let ftl = create_sixteen_banks(&path, cfg);
        let pages = ftl.capacity() / 4096;
        let hot = pages / 5;
        let mut rng = SmallRng::seed_from_u64(3);
        let mut tags = vec![0u64; pages as usize];
        block_on(async {
            for l in 0..pages {
                overwrite(&ftl, l, l, &mut tags).await;
            }
            for i in 0..15 * pages {
                let l = if rng.gen_bool(0.8) {
                    rng.gen_range(0..hot)
                } else {
                    rng.gen_range(hot..pages)
                };
                overwrite(&ftl, i, l, &mut tags).await;
            }
            ftl.flush().await.unwrap();
        });
        verify_all(&ftl, &tags);
        ftl.check_invariants().unwrap();
        let mut per_block: std::collections::HashMap<_, (u64, u64)> = Default::default();
        for l in 0..pages {
            if let Some((a, _)) = ftl.physical_slot(l as u32) {
                let e = per_block.entry(a.block).or_default();
                if l < hot {
                    e.0 += 1;
                } else {
                    e.1 += 1;
                }
            }
        }
        let minority: u64 = per_block.values().map(|(h, c)| (*h).min(*c)).sum();
        minority as f64 / pages as f64
    };
    let on = mixing(ftl::Separation::HotCold);
    let off = mixing(ftl::Separation::None);
    eprintln!("pages in a block of the other temperature: {on:.3} separated, {off:.3} not");
    assert!(
        on < 0.5 * off,
        "separated {on:.3} against {off:.3}: moved data mixes temperatures"
    );
}
