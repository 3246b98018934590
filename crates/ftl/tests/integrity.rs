//! Data integrity: bytes changed on the medium (bit rot, a stray tool writing into the image)
//! are never returned as good data. Every slot read from flash is checked against the CRC in
//! its OOB; a slot that fails is retried and then reported as an uncorrectable read, counted
//! per bank. GC never gives bad bytes a good CRC, and a crash does not bring an older version
//! back in their place.

mod common;

use std::path::Path;

use common::*;
use ftl::{Ftl, FtlError, GcPolicy};

fn write(ftl: &Ftl, l: u64, tag: u64) {
    block_on(ftl.write(l as usize, l * 4096, &stamped(l, tag), false)).unwrap();
}

/// Reads page `l` whole and as one 512-byte sector; both must fail as uncorrectable.
fn assert_uncorrectable(ftl: &Ftl, l: u64) {
    let mut buf = vec![0xAAu8; 4096];
    match block_on(ftl.read(l * 4096, &mut buf)) {
        Err(FtlError::Uncorrectable { lpn, .. }) => assert_eq!(lpn as u64, l),
        other => panic!("page {l}: corrupt data read as {other:?}"),
    }
    let mut sector = vec![0u8; 512];
    assert!(
        matches!(
            block_on(ftl.read(l * 4096 + 1536, &mut sector)),
            Err(FtlError::Uncorrectable { .. })
        ),
        "page {l}: a partial read of a corrupt slot succeeded"
    );
}

fn verify(ftl: &Ftl, l: u64, tag: u64) {
    let mut buf = vec![0u8; 4096];
    block_on(ftl.read(l * 4096, &mut buf)).unwrap_or_else(|e| panic!("page {l}: {e}"));
    assert_eq!(check_stamp(l, &buf), Some(tag), "page {l}");
}

#[test]
fn flipped_bits_are_reported_never_returned() {
    for page_size in [4096u32, 16384] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.img");
        let nand = small_nand(page_size, 24);
        let cfg = small_cfg(GcPolicy::InPath);
        let ftl = create(&path, &nand, cfg.clone());
        let pages = ftl.capacity() / 4096;
        let step = (pages / 128).max(1) as usize;
        let corrupt: Vec<u64> = (0..pages).step_by(step).take(128).collect();
        assert_eq!(corrupt.len(), 128, "{pages} pages");
        for l in 0..pages {
            write(&ftl, l, 1);
        }
        ftl.close().unwrap();
        let where_: Vec<_> = corrupt
            .iter()
            .map(|&l| {
                ftl.physical_slot(l as u32)
                    .expect("flushed page is on flash")
            })
            .collect();
        drop(ftl);
        for (i, (page, slot)) in where_.into_iter().enumerate() {
            flip(&path, page, slot, (i as u64 * 37) % 4096);
        }

        let ftl = open(&path, cfg.clone());
        for &l in &corrupt {
            assert_uncorrectable(&ftl, l);
        }
        for l in (0..pages).filter(|l| !corrupt.contains(l)) {
            verify(&ftl, l, 1);
        }
        let s = ftl.stats();
        let reads = 2 * corrupt.len() as u64;
        let tries = u64::from(cfg.read_retries) + 1;
        assert_eq!(s.uncorrectable_reads, reads, "page size {page_size}");
        assert_eq!(s.crc_errors, reads * tries);
        assert_eq!(
            s.banks.iter().map(|b| b.uncorrectable_reads).sum::<u64>(),
            reads
        );
        // A rewrite heals a page.
        write(&ftl, corrupt[0], 2);
        block_on(ftl.flush()).unwrap();
        verify(&ftl, corrupt[0], 2);
        ftl.check_invariants().unwrap();
    }
}

/// GC moves corrupt slots without making them good (with copyback, and through the
/// controller where each slot is checked and counted), and a crash does not bring an older
/// version back in their place.
#[test]
fn gc_and_recovery_keep_corrupt_slots_detectably_bad() {
    for copyback in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.img");
        let nand = small_nand(4096, 24);
        let cfg = ftl::FtlConfig {
            gc_copyback: copyback,
            ..small_cfg(GcPolicy::InPath)
        };
        let ftl = create(&path, &nand, cfg.clone());
        let pages = ftl.capacity() / 4096;
        // An older version of every page first, so recovery has one to (wrongly) fall back to.
        for tag in [1, 2] {
            for l in 0..pages {
                write(&ftl, l, tag);
            }
        }
        ftl.close().unwrap();
        let corrupt: Vec<u64> = (0..pages).step_by(5).collect();
        let where_: Vec<_> = corrupt
            .iter()
            .map(|&l| ftl.physical_slot(l as u32).unwrap())
            .collect();
        drop(ftl);
        for &(page, slot) in &where_ {
            flip(&path, page, slot, 2048);
        }
        let ftl = open(&path, cfg.clone());
        // Overwrite everything else until GC has cleaned every block at least once.
        let before = ftl.stats().gc_erases;
        let mut tag = 3;
        while ftl.stats().gc_erases < before + 3 * 96 {
            for l in (0..pages).filter(|l| l % 5 != 0) {
                write(&ftl, l, tag);
            }
            tag += 1;
        }
        block_on(ftl.flush()).unwrap();
        let moved = corrupt
            .iter()
            .zip(&where_)
            .filter(|(l, w)| ftl.physical_slot(**l as u32) != Some(**w))
            .count();
        assert!(moved > 0, "GC moved none of the corrupt slots");
        let s = ftl.stats();
        assert!(s.gc_copies > 0);
        if !copyback {
            assert!(s.gc_corrupt_slots > 0, "GC never met a corrupt slot: {s:?}");
        }
        for &l in &corrupt {
            assert_uncorrectable(&ftl, l);
        }
        ftl.check_invariants().unwrap();
        // A crash and a recovery scan: still reported, never the older version.
        ftl.simulate_power_loss();
        let ftl = open(&path, cfg.clone());
        for &l in &corrupt {
            assert_uncorrectable(&ftl, l);
        }
        verify(&ftl, 1, tag - 1);
        ftl.check_invariants().unwrap();
    }
}

/// Flips one byte, at `at`, of a page's OOB area in the image file (the layout is in
/// `crates/ftl/src/oob.rs`: 0..4 the OOB's CRC, 6..8 reserved, slot 0's data CRC at 24).
fn flip_oob(path: &Path, page: ftl::nand_model::PageAddr, at: u64) {
    flip_byte(
        path,
        ftl::nand_model::page_oob_offset(path, page).unwrap() + at,
    );
}

/// A small device at `path` (4 banks, 4 KiB pages) with every page written once (tag 1),
/// closed: where its pages live can still be asked before it is dropped.
fn written_once(path: &Path, copyback: bool, policy: GcPolicy) -> (Ftl, ftl::FtlConfig, u64) {
    let cfg = ftl::FtlConfig {
        gc_copyback: copyback,
        ..small_cfg(policy)
    };
    let ftl = create(path, &small_nand(4096, 24), cfg.clone());
    let pages = ftl.capacity() / 4096;
    for l in 0..pages {
        write(&ftl, l, 1);
    }
    ftl.close().unwrap();
    (ftl, cfg, pages)
}

/// Random overwrites of every page but `spared`, 8 device capacities, flushed; returns each
/// page's tag (1 for the spared). Victims keep some valid slots, so a block whose only valid
/// slot is a spared one is the cheapest victim on its bank, time after time.
fn overwrite_at_random(ftl: &Ftl, pages: u64, spared: &[u64], seed: u64) -> Vec<u64> {
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut tags = vec![1u64; pages as usize];
    for _ in 0..8 * pages {
        let l = rand::Rng::gen_range(&mut rng, 0..pages);
        if spared.contains(&l) {
            continue;
        }
        tags[l as usize] += 1;
        write(ftl, l, tags[l as usize]);
    }
    block_on(ftl.flush()).unwrap();
    tags
}

/// A page whose OOB no longer decodes: host reads of its slot fail, and GC neither loops on
/// its block nor hands out the bad bytes. Before, GC left such a slot valid where it was, the
/// block stayed its favourite victim once the rest of it was overwritten, every step on it
/// freed nothing, and writers ended the device read-only ("no free blocks left"). Two kinds of
/// damage, in one page of every 97, with the rest overwritten many times over (with copyback
/// and through the controller, with the writer's own in-path GC and background workers):
/// - slot 0's LPN (OOB byte 12, its low byte; byte 15, its high byte, names an LPN past the
///   device, on which GC's check of the entry against the map panicked): the map does not vouch
///   for the entry, so the slot is lost and GC keeps the block (`damaged_blocks`) until the
///   host rewrites the page;
/// - slot 0's data CRC (byte 24): the map vouches for the entry, so GC moves the slot with the
///   CRC it has, which its data still fails.
#[test]
fn gc_keeps_blocks_with_unreadable_pages_instead_of_stalling() {
    let runs = [
        (12, true, GcPolicy::InPath),
        (12, false, GcPolicy::Parallel),
        (15, true, GcPolicy::InPath),
        (15, false, GcPolicy::Parallel),
        (24, true, GcPolicy::InPath),
        (24, false, GcPolicy::Parallel),
    ];
    for (at, copyback, policy) in runs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.img");
        let (ftl, cfg, pages) = written_once(&path, copyback, policy);
        let lost: Vec<u64> = (0..pages).step_by(97).collect();
        let where_: Vec<_> = lost
            .iter()
            .map(|&l| ftl.physical_slot(l as u32).unwrap().0)
            .collect();
        drop(ftl);
        for &page in &where_ {
            flip_oob(&path, page, at);
        }
        let ftl = open(&path, cfg.clone());
        let tags = overwrite_at_random(&ftl, pages, &lost, 3);
        assert!(
            ftl.read_only_reason().is_none(),
            "{:?}",
            ftl.read_only_reason()
        );
        assert!(ftl.stats().gc_erases > 0);
        for &l in &lost {
            assert_uncorrectable(&ftl, l);
        }
        for l in (0..pages).filter(|l| !lost.contains(l)) {
            verify(&ftl, l, tags[l as usize]);
        }
        if at == 24 {
            // (With a damaged LPN field the checker rightly finds an OOB that names another
            // page: it reads the medium. Checked below, once the pages are rewritten.)
            ftl.check_invariants().unwrap();
        }
        let damaged =
            |ftl: &Ftl| -> u32 { ftl.stats().banks.iter().map(|b| b.damaged_blocks).sum() };
        if at != 24 {
            assert!(damaged(&ftl) > 0, "GC kept no block for a lost page");
        } else {
            assert_eq!(damaged(&ftl), 0, "GC lost a slot the map vouches for");
        }
        let mut tag = tags.iter().max().copied().unwrap_or(1) + 1;
        // Rewriting the lost pages frees their blocks for GC again: as empty blocks they are
        // the cheapest victims once GC needs room.
        for &l in &lost {
            write(&ftl, l, tag);
        }
        for _ in 0..20 {
            for l in 0..pages {
                write(&ftl, l, tag);
            }
            if damaged(&ftl) == 0 {
                break;
            }
            tag += 1;
        }
        block_on(ftl.flush()).unwrap();
        assert_eq!(
            damaged(&ftl),
            0,
            "damaged blocks left after their pages were rewritten"
        );
        for l in 0..pages {
            verify(&ftl, l, tag);
        }
        ftl.check_invariants().unwrap();
    }
}

/// [`written_once`] (in-path GC), then a reserved OOB byte flipped in the page of every 31st
/// logical page (`kept`, at `where_`): their OOBs fail their own CRC while their slot entries
/// hold.
#[allow(clippy::type_complexity)]
fn with_reserved_oob_byte_flipped(
    path: &Path,
    copyback: bool,
) -> (
    ftl::FtlConfig,
    u64,
    Vec<u64>,
    Vec<(ftl::nand_model::PageAddr, u32)>,
) {
    let (ftl, cfg, pages) = written_once(path, copyback, GcPolicy::InPath);
    let kept: Vec<u64> = (0..pages).step_by(31).collect();
    let where_: Vec<_> = kept
        .iter()
        .map(|&l| ftl.physical_slot(l as u32).unwrap())
        .collect();
    drop(ftl);
    for &(page, _) in &where_ {
        flip_oob(path, page, 6);
    }
    (cfg, pages, kept, where_)
}

/// A page whose OOB fails its own CRC while its slot entries hold (a flipped reserved byte):
/// host reads check only their slot's entry and succeed, and GC salvages the slots the map
/// places there instead of giving them up, so they move and the block is cleaned as usual.
#[test]
fn gc_salvages_slots_of_an_oob_that_fails_only_its_own_crc() {
    for copyback in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.img");
        let (cfg, pages, kept, where_) = with_reserved_oob_byte_flipped(&path, copyback);
        let ftl = open(&path, cfg.clone());
        for &l in &kept {
            verify(&ftl, l, 1);
        }
        let erases = |ftl: &Ftl, w: &(ftl::nand_model::PageAddr, u32)| {
            ftl.nand().block_state(w.0.block).unwrap().erase_count
        };
        let erased_before: Vec<u32> = where_.iter().map(|w| erases(&ftl, w)).collect();
        let tags = overwrite_at_random(&ftl, pages, &kept, 5);
        // Moved, or moved and back at the same address once its block was erased and reused
        // (seen: GC's frontier reached the same page of the same block).
        let moved = kept
            .iter()
            .zip(where_.iter().zip(&erased_before))
            .filter(|(l, (w, e))| {
                ftl.physical_slot(**l as u32) != Some(**w) || erases(&ftl, w) > **e
            })
            .count();
        assert_eq!(
            moved,
            kept.len(),
            "copyback {copyback}: GC left slots behind"
        );
        for l in 0..pages {
            verify(&ftl, l, tags[l as usize]);
        }
        assert_eq!(ftl.stats().uncorrectable_reads, 0);
        ftl.check_invariants().unwrap();
        ftl.simulate_power_loss();
        let ftl = open(&path, cfg.clone());
        for l in 0..pages {
            verify(&ftl, l, tags[l as usize]);
        }
        ftl.check_invariants().unwrap();
    }
}

/// GC's copyback reads a victim page's OOB out before it programs the copy; one that does not
/// decode is not copied (the page is staged and its slots salvaged instead). Before, the copy
/// carried the bad OOB into a new block, mid-block, where a crash's scan could not read it and
/// the device opened read-only although GC had kept every slot.
#[test]
fn gc_does_not_copy_an_oob_that_does_not_decode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.img");
    let (cfg, pages, kept, where_) = with_reserved_oob_byte_flipped(&path, true);
    // No periodic checkpoint: the crash's scan covers every page GC wrote after the open.
    let cfg = ftl::FtlConfig {
        checkpoint_interval_bytes: 0,
        ..cfg
    };
    let ftl = open(&path, cfg.clone());
    let copybacks = ftl.nand().stats().totals.copybacks;
    // Overwrite the other pages until GC has moved every damaged one, then crash at once.
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(9);
    let mut tags = vec![1u64; pages as usize];
    let moved = |ftl: &Ftl| {
        kept.iter()
            .zip(&where_)
            .all(|(l, w)| ftl.physical_slot(*l as u32) != Some(*w))
    };
    for _ in 0..8 * pages {
        if moved(&ftl) {
            break;
        }
        let l = rand::Rng::gen_range(&mut rng, 0..pages);
        if kept.contains(&l) {
            continue;
        }
        tags[l as usize] += 1;
        write(&ftl, l, tags[l as usize]);
    }
    assert!(moved(&ftl), "GC did not move every damaged page");
    assert!(
        ftl.nand().stats().totals.copybacks > copybacks,
        "GC moved nothing by copyback"
    );
    block_on(ftl.flush()).unwrap();
    ftl.simulate_power_loss();
    let ftl = open(&path, cfg);
    assert_eq!(ftl.read_only_reason(), None);
    assert_eq!(ftl.recovery().unreadable_pages, 0);
    for l in 0..pages {
        verify(&ftl, l, tags[l as usize]);
    }
    ftl.check_invariants().unwrap();
}

/// Changes a page's OOB with `change` and seals it again (its CRC holds): a hostile image.
/// The OOB's CRC covers bytes 4.. of the device's OOB size, found from the stored CRC.
fn reseal_oob(path: &Path, page: ftl::nand_model::PageAddr, change: impl FnOnce(&mut [u8])) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let off = ftl::nand_model::page_oob_offset(path, page).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut oob = vec![0u8; 256];
    f.seek(SeekFrom::Start(off)).unwrap();
    f.read_exact(&mut oob).unwrap();
    let len = (8..=oob.len())
        .find(|&n| crc32fast::hash(&oob[4..n]).to_le_bytes() == oob[0..4])
        .expect("the OOB's CRC covers a prefix");
    change(&mut oob);
    let crc = crc32fast::hash(&oob[4..len]);
    oob[0..4].copy_from_slice(&crc.to_le_bytes());
    f.seek(SeekFrom::Start(off)).unwrap();
    f.write_all(&oob).unwrap();
}

/// Rewrites slot 0's LPN in a page's OOB to `lpn` (a hostile image that names another page
/// there). Data OOB layout: an 8-byte header, then 20-byte entries (kind, LPN at +4, sequence
/// number at +8, data CRC at +16).
fn forge_oob_lpn(path: &Path, page: ftl::nand_model::PageAddr, lpn: u32) {
    reseal_oob(path, page, |oob| {
        oob[12..16].copy_from_slice(&lpn.to_le_bytes())
    });
}

/// Makes a data page's OOB list a second slot, for `lpn` at a sequence number newer than any
/// written: a hostile image whose page "has" more slots than a 4 KiB page can.
fn forge_extra_slot(path: &Path, page: ftl::nand_model::PageAddr, lpn: u32) {
    reseal_oob(path, page, |oob| {
        assert_eq!(oob[5], 1, "a 4 KiB page lists one slot");
        oob[5] = 2;
        let e = 8 + 20;
        oob[e] = 1;
        oob[e + 4..e + 8].copy_from_slice(&lpn.to_le_bytes());
        oob[e + 8..e + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    });
}

/// Recovery's scan of a page whose sealed OOB lists more slots than the page has: the extra
/// entry would map its logical page to the next page's slot (or, on the device's last page,
/// past the last slot: a panic at open). Such an OOB is not ours: the page is skipped like a
/// torn one, and the page the extra entry names keeps its own data.
#[test]
fn recovery_skips_an_oob_listing_more_slots_than_its_page_has() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.img");
    let (ftl, cfg, pages) = written_once(&path, true, GcPolicy::InPath);
    drop(ftl);
    let ftl = open(&path, cfg.clone());
    // Written after the last checkpoint: recovery scans their pages.
    for l in 0..16 {
        write(&ftl, l, 2);
    }
    block_on(ftl.flush()).unwrap();
    let target = ftl.physical_slot(0).unwrap().0;
    ftl.simulate_power_loss();
    let named = pages - 1;
    forge_extra_slot(&path, target, named as u32);
    let ftl = open(&path, cfg.clone());
    verify(&ftl, named, 1);
    for l in 1..16 {
        verify(&ftl, l, 2);
    }
    // Page 0's newest copy is on the page whose OOB is not ours: its older one stands.
    verify(&ftl, 0, 1);
    ftl.check_invariants().unwrap();
}

/// Sets slot 0's sequence number in a page's OOB.
fn forge_oob_seq(path: &Path, page: ftl::nand_model::PageAddr, seq: u64) {
    reseal_oob(path, page, |oob| {
        oob[16..24].copy_from_slice(&seq.to_le_bytes())
    });
}

/// A scanned slot numbered near the limit (2^62, past which a scan drops a slot and a
/// checkpoint is refused) once became the sequence counter: every checkpoint written afterwards
/// was refused at load and the next scan dropped every slot written since, so flushed writes
/// vanished at each open. Now a counter that comes back at 2^61 or more (no device gets there:
/// the slot is forged) opens the device read-only, with what was on flash readable; a large
/// counter below that is an ordinary one, and writes after it survive power cuts.
#[test]
fn a_slot_numbered_near_the_limit_opens_the_device_read_only() {
    for (seq, read_only) in [(1u64 << 60, false), (1 << 61, true), ((1 << 62) - 1, true)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.img");
        let (ftl, cfg, _) = written_once(&path, true, GcPolicy::InPath);
        drop(ftl);
        let ftl = open(&path, cfg.clone());
        for l in 0..16 {
            write(&ftl, l, 2);
        }
        block_on(ftl.flush()).unwrap();
        let target = ftl.physical_slot(3).unwrap().0;
        ftl.simulate_power_loss();
        forge_oob_seq(&path, target, seq);
        let ftl = open(&path, cfg.clone());
        for l in 0..16 {
            verify(&ftl, l, 2);
        }
        let reason = ftl.read_only_reason();
        assert_eq!(reason.is_some(), read_only, "seq {seq}: {reason:?}");
        if read_only {
            assert!(reason.is_some_and(|r| r.contains("sequence counter")));
            continue;
        }
        for l in 16..32 {
            write(&ftl, l, 3);
        }
        block_on(ftl.flush()).unwrap();
        ftl.simulate_power_loss();
        for _ in 0..2 {
            let ftl = open(&path, cfg.clone());
            for l in 16..32 {
                verify(&ftl, l, 3);
            }
            for l in 32..40 {
                write(&ftl, l, 4);
            }
            block_on(ftl.flush()).unwrap();
            ftl.simulate_power_loss();
        }
        let ftl = open(&path, cfg.clone());
        for l in 32..40 {
            verify(&ftl, l, 4);
        }
    }
}

/// A hostile OOB that still passes its CRC but names another logical page for slot 0: the
/// page it holds reads as uncorrectable (its entry names another page), and GC, which moves a
/// slot only to where its entry's page is mapped, must neither copy the block over and over
/// (the slot stays valid: once looked like a trim record still on its way) nor lose the
/// other pages; the block is kept as damaged until the host rewrites the page.
#[test]
fn gc_does_not_loop_on_a_slot_whose_sealed_oob_names_another_page() {
    for (copyback, policy) in [(true, GcPolicy::InPath), (false, GcPolicy::Parallel)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.img");
        let (ftl, cfg, pages) = written_once(&path, copyback, policy);
        let lost: Vec<u64> = (0..pages).step_by(97).collect();
        let where_: Vec<_> = lost
            .iter()
            .map(|&l| ftl.physical_slot(l as u32).unwrap().0)
            .collect();
        drop(ftl);
        for (&l, &page) in lost.iter().zip(&where_) {
            forge_oob_lpn(&path, page, ((l + 1) % pages) as u32);
        }
        let ftl = open(&path, cfg.clone());
        let tags = overwrite_at_random(&ftl, pages, &lost, 5);
        assert!(
            ftl.read_only_reason().is_none(),
            "{:?}",
            ftl.read_only_reason()
        );
        for &l in &lost {
            assert_uncorrectable(&ftl, l);
        }
        for l in (0..pages).filter(|l| !lost.contains(l)) {
            verify(&ftl, l, tags[l as usize]);
        }
        let s = ftl.stats();
        // Every host page costs a bounded number of GC copies: no victim copied in a loop.
        assert!(
            s.waf.is_some_and(|w| w < 20.0),
            "copyback {copyback}: WAF {:?} ({} GC copies)",
            s.waf,
            s.gc_copies
        );
        let damaged: u32 = s.banks.iter().map(|b| b.damaged_blocks).sum();
        assert!(damaged > 0, "GC kept no block for a lost page");
    }
}

/// A block retired after a failed program that GC then finds damaged (a slot whose OOB names
/// another page) is kept until the host rewrites that page, and then marked bad, not erased
/// and reused: the failed program is remembered when the block leaves `Retiring`. Before, the
/// damaged block became an ordinary victim once rewritten and went back to the free list.
#[test]
fn a_retired_block_found_damaged_is_marked_bad_once_rewritten() {
    for (copyback, policy) in [(true, GcPolicy::InPath), (false, GcPolicy::Parallel)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.img");
        let cfg = ftl::FtlConfig {
            gc_copyback: copyback,
            ..small_cfg(policy)
        };
        let ftl = create(&path, &small_nand(4096, 24), cfg.clone());
        let pages = ftl.capacity() / 4096;
        let half = pages / 2;
        for l in 0..half {
            write(&ftl, l, 1);
        }
        block_on(ftl.flush()).unwrap();
        // One of the last pages written sits in a bank's open block, not at its last page:
        // the next program of that block fails, so the block is retired with the pages
        // written so far still valid in it.
        let last: Vec<_> = (half - 16..half)
            .map(|l| (l, ftl.physical_slot(l as u32).unwrap().0))
            .collect();
        let (lost, at) = last
            .iter()
            .enumerate()
            .rev()
            .find(|(i, (_, at))| {
                at.page + 1 < 8 && last[i + 1..].iter().all(|(_, a)| a.block != at.block)
            })
            .map(|(_, &la)| la)
            .expect("the last 16 pages written all end their blocks");
        let next = ftl::nand_model::PageAddr {
            block: at.block,
            page: at.page + 1,
        };
        ftl.nand().faults().fail_program_at(next);
        for l in half..pages {
            write(&ftl, l, 1);
        }
        block_on(ftl.flush()).unwrap();
        assert_eq!(
            ftl.stats().retired_blocks,
            1,
            "the armed program did not fail"
        );
        assert_eq!(ftl.stats().bad_blocks, 0);
        // A page of the retired block now names another page in its OOB (through the image
        // file: the running device sees it through its shared mapping).
        forge_oob_lpn(&path, at, ((lost + 1) % pages) as u32);
        let tags = overwrite_at_random(&ftl, pages, &[lost], 7);
        let s = ftl.stats();
        let damaged: u32 = s.banks.iter().map(|b| b.damaged_blocks).sum();
        assert_eq!(
            damaged, 1,
            "GC did not keep the retired block with its lost page"
        );
        assert_eq!(
            s.bad_blocks, 0,
            "the damaged block went bad with a page still in it"
        );
        assert_uncorrectable(&ftl, lost);
        // Rewritten, the block holds nothing current: GC empties it and must retire it.
        let mut tag = tags.iter().max().copied().unwrap_or(1) + 1;
        write(&ftl, lost, tag);
        for _ in 0..20 {
            for l in 0..pages {
                write(&ftl, l, tag);
            }
            let s = ftl.stats();
            if s.banks.iter().map(|b| b.damaged_blocks).sum::<u32>() == 0 {
                break;
            }
            tag += 1;
        }
        block_on(ftl.flush()).unwrap();
        let s = ftl.stats();
        assert_eq!(s.banks.iter().map(|b| b.damaged_blocks).sum::<u32>(), 0);
        assert_eq!(
            s.bad_blocks, 1,
            "copyback {copyback}: the block whose program failed was erased and reused"
        );
        for l in 0..pages {
            verify(&ftl, l, tag);
        }
        ftl.check_invariants().unwrap();
    }
}

/// A hostile image for the hybrid schemes: after a power cut, 5 % of the current slots have
/// their LPN forged (sealed again) to another in-range page. Their blocks then hold pages of
/// several logical blocks, a shape BAST does not allow, so recovery merges every logical block
/// with a page in them. Each merge takes a fresh block, and a mixed source is empty only once
/// all of its logical blocks are merged: recovery ran out of free blocks and opened the device
/// read-only ("no free block for a merge"). Now a source is erased as soon as its last current
/// page has moved. The device opens writable; every page no forgery touched reads its data;
/// writes, a clean reopen and a power cut after them keep it so.
#[test]
fn a_hybrid_image_with_forged_lpns_opens_writable() {
    use ftl::SchemeKind;
    for scheme in [SchemeKind::Bast, SchemeKind::Fast] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.img");
        let cfg = ftl::FtlConfig {
            scheme,
            checkpoint_interval_bytes: 0,
            ..small_cfg(GcPolicy::Adaptive)
        };
        let mut nand = small_nand(4096, 32);
        nand.geometry.pages_per_block = 64;
        let ftl = create(&path, &nand, cfg.clone());
        let pages = ftl.capacity() / 4096;
        let mut tags = vec![0u64; pages as usize];
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(5);
        for l in 0..pages {
            tags[l as usize] = 1;
            write(&ftl, l, 1);
        }
        for _ in 0..2 * pages {
            let l = rand::Rng::gen_range(&mut rng, 0..pages);
            tags[l as usize] += 1;
            write(&ftl, l, tags[l as usize]);
        }
        block_on(ftl.flush()).unwrap();
        let slots: Vec<_> = (0..pages)
            .map(|l| ftl.physical_slot(l as u32).expect("written").0)
            .collect();
        ftl.simulate_power_loss();
        let mut touched = vec![false; pages as usize];
        for l in 0..pages {
            if rand::Rng::gen_range(&mut rng, 0..100) < 5 {
                let other = rand::Rng::gen_range(&mut rng, 0..pages);
                forge_oob_lpn(&path, slots[l as usize], other as u32);
                touched[l as usize] = true;
                touched[other as usize] = true;
            }
        }
        let forged = touched.iter().filter(|t| **t).count();
        let ftl = open(&path, cfg.clone());
        assert_eq!(
            ftl.read_only_reason(),
            None,
            "{scheme:?}: {forged} pages touched by forgeries"
        );
        ftl.check_invariants().unwrap();
        let check = |ftl: &Ftl, tags: &[u64], touched: &[bool], when: &str| {
            for l in 0..pages {
                if !touched[l as usize] {
                    let mut buf = vec![0u8; 4096];
                    block_on(ftl.read(l * 4096, &mut buf))
                        .unwrap_or_else(|e| panic!("{scheme:?} {when}: page {l}: {e}"));
                    assert_eq!(
                        check_stamp(l, &buf),
                        Some(tags[l as usize]),
                        "{scheme:?} {when}: page {l}"
                    );
                }
            }
        };
        check(&ftl, &tags, &touched, "after the open");
        // The device takes writes everywhere, forged pages included.
        for l in 0..pages {
            if touched[l as usize] || l % 3 == 0 {
                tags[l as usize] += 1;
                write(&ftl, l, tags[l as usize]);
                touched[l as usize] = false;
            }
        }
        block_on(ftl.flush()).unwrap();
        check(&ftl, &tags, &touched, "after rewrites");
        ftl.close().unwrap();
        drop(ftl);
        let ftl = open(&path, cfg.clone());
        check(&ftl, &tags, &touched, "after a clean reopen");
        for l in (0..pages).step_by(5) {
            tags[l as usize] += 1;
            write(&ftl, l, tags[l as usize]);
        }
        block_on(ftl.flush()).unwrap();
        ftl.simulate_power_loss();
        let ftl = open(&path, cfg.clone());
        assert_eq!(
            ftl.read_only_reason(),
            None,
            "{scheme:?} after the power cut"
        );
        check(&ftl, &tags, &touched, "after a power cut");
        ftl.check_invariants().unwrap();
    }
}
