//! `ftld info`: what an image holds, read without changing it (`ftl::inspect`).

use std::path::Path;

use ftl::ImageInfo;

use crate::image;
use crate::units::format_size;

/// Prints the description of the image at `path`, as text or JSON.
pub fn run(path: &Path, json: bool, config: Option<&Path>) -> anyhow::Result<()> {
    let mut info = image::inspect(path)?;
    if let Some(c) = config {
        let file = crate::config::FileConfig::load(c)?;
        let ftl = file.ftl.clone().unwrap_or_default();
        ftl::check_running_policy(&ftl)
            .map_err(|e| crate::UsageError(format!("{}: [ftl] {e}", file.origin())))?;
        info.need_with(&ftl, format!("the settings of {}", c.display()));
    }
    if json {
        out!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        outp!("{}", render(&info));
    }
    Ok(())
}

/// The text form.
pub fn render(info: &ImageInfo) -> String {
    let g = &info.nand.geometry;
    let t = &info.nand.timing;
    let checkpoint = match (info.checkpoint_id, info.checkpoint_corrupt) {
        (Some(id), false) => format!("#{id}"),
        (Some(id), true) => format!("#{id} (a newer one is corrupt)"),
        (None, _) => "none".to_string(),
    };
    let shutdown = if info.clean_shutdown {
        "clean".to_string()
    } else if info.checkpoint_id.is_none() {
        // No checkpoint to start from (a creation cut short, or every checkpoint lost): the
        // open is a full scan, of what is programmed.
        format!(
            "dirty, no checkpoint: the open scans every page ({} programmed)",
            info.pages_after_checkpoint
        )
    } else {
        format!(
            "dirty ({} pages written after the last checkpoint will be scanned on open)",
            info.pages_after_checkpoint
        )
    };
    let lbns = u64::from(info.logical_pages)
        .div_ceil(u64::from(g.pages_per_block) * u64::from(g.page_size / 4096));
    let us = |ns: u64| ns as f64 / 1000.0;
    // The real-time schemes' bounds on one request's response (paper 004's L(p)).
    let bounds = match info.ftl {
        ftl::SchemeKind::Rftl => Some(
            ftl::schemes::rftl::StepBudget::of(&info.nand)
                .map(|b| (us(b.write_bound_ns), us(b.read_bound_ns))),
        ),
        ftl::SchemeKind::Gftl => Some(
            ftl::schemes::gftl::GcBudget::of(&info.nand, lbns)
                .map(|b| (us(b.write_bound_ns), us(b.read_bound_ns))),
        ),
        _ => None,
    };
    let rows = [
        ("image", info.path.display().to_string()),
        (
            "ftl",
            if info.ftl.has_log_blocks() {
                format!(
                    "{} ({}); {} log blocks",
                    info.ftl,
                    info.ftl.description(),
                    info.log_blocks
                )
            } else {
                format!("{} ({})", info.ftl, info.ftl.description())
            },
        ),
        (
            "capacity",
            format!(
                "{} ({} bytes, {} logical pages of 4 KiB)",
                format_size(info.capacity_bytes),
                info.capacity_bytes,
                info.logical_pages
            ),
        ),
        (
            "geometry",
            format!(
                "{} channels x {} banks, {} blocks/bank, {} pages/block, {} + {} B OOB pages, {} \
                 plane(s) per bank",
                g.channels,
                g.banks_per_channel,
                g.blocks_per_bank,
                g.pages_per_block,
                g.page_size,
                g.oob_size,
                info.nand.planes
            ),
        ),
        ("raw flash", format_size(g.raw_capacity())),
        (
            "over-provisioning",
            match info.ftl.blocks_per_logical_block() {
                // GFTL's working space is its write buffer, sized from the timing.
                0 if info.ftl == ftl::SchemeKind::Gftl => {
                    match ftl::schemes::gftl::GcBudget::of(&info.nand, lbns) {
                        Ok(b) => format!(
                            "a write buffer of {} blocks for {lbns} logical blocks ({:.1}%)",
                            b.buffer_blocks,
                            f64::from(b.buffer_blocks) * 100.0 / lbns.max(1) as f64
                        ),
                        Err(e) => format!("none: {e}"),
                    }
                }
                0 => format!(
                    "{:.1}% (physical spare {:.1}%: the good data blocks over the exported space)",
                    info.overprovision.unwrap_or(0.0) * 100.0,
                    info.spare_factor * 100.0
                ),
                // A logical block's own blocks are its working space; the setting does not
                // apply (their spare for bad blocks is the 2 % a new image's format keeps).
                n => format!(
                    "{}% (up to {n} blocks for each of {lbns} logical blocks)",
                    (n - 1) * 100,
                ),
            },
        ),
        ("timing", t.summary()),
        (
            "response bounds",
            match bounds {
                None => "none (not a real-time scheme)".to_string(),
                Some(Ok((w, r))) => format!(
                    "a 4 KiB write within {w:.0} us, a read within {r:.0} us (one request at a time; \
                     a periodic checkpoint's programs are outside it: [ftl] \
                     checkpoint_interval_bytes = 0 turns them off)"
                ),
                Some(Err(e)) => format!("none: {e}"),
            },
        ),
        ("interconnect", info.nand.interconnect.to_string()),
        (
            "write queues",
            if info.ftl == ftl::SchemeKind::Page {
                format!(
                    "any number; at most {} with [ftl] frontiers = \"per-queue\" (open blocks set aside for {})",
                    info.max_queues, info.max_queues
                )
            } else {
                // The block-mapped schemes' writers own no blocks: no queue count is short.
                "any number".to_string()
            },
        ),
        (
            "wear",
            format!(
                "erase count min {} / avg {:.1} / max {} of {} P/E cycles (data blocks; \
                 checkpoint areas: max {})",
                info.erase_min,
                info.erase_avg,
                info.erase_max,
                info.nand.endurance,
                info.checkpoint_erase_max
            ),
        ),
        (
            "bad blocks",
            match info.checkpoint_bad_blocks {
                0 => format!("{} of {}", info.bad_blocks, info.total_blocks),
                n => format!(
                    "{} of {} ({n} in the checkpoint areas, whose pages skip them)",
                    info.bad_blocks, info.total_blocks
                ),
            },
        ),
        ("spare blocks", spare(info)),
        ("last checkpoint", checkpoint),
        ("last shutdown", shutdown),
    ];
    rows.iter().map(|(k, v)| format!("{k:<18} {v}\n")).collect()
}

/// The usable blocks against what the scheme needs: how many more may go bad, or that the
/// device opens read-only.
fn spare(info: &ImageInfo) -> String {
    let usable = info.usable_blocks;
    if info.checkpoint_area_worn {
        return format!(
            "{usable} usable; a checkpoint area lost too many blocks to hold a checkpoint: the \
             device opens read-only"
        );
    }
    match info.blocks_needed {
        None => format!("{usable} usable"),
        Some(need) if usable >= need => format!(
            "{usable} usable, {need} needed by {} with {}: {} more may go bad before the \
             device turns read-only",
            info.ftl,
            info.need_settings,
            usable - need
        ),
        // As the open decides: short of the need with no block gone bad yet (settings that
        // ask for more open blocks than the format set aside), the device is writable until
        // its first bad block.
        Some(need) if info.data_bad_blocks == 0 => format!(
            "{usable} usable, {need} needed by {} with {}: writable, but the device turns \
             read-only at its first bad block",
            info.ftl, info.need_settings
        ),
        Some(need) => format!(
            "{usable} usable, {need} needed by {} with {}: spare blocks exhausted, the device \
             opens read-only",
            info.ftl, info.need_settings
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(checkpoint_id: Option<u64>, clean: bool, after: u64) -> ImageInfo {
        ImageInfo {
            path: "x.img".into(),
            ftl: ftl::SchemeKind::Page,
            log_blocks: 0,
            nand: ftl::nand_model::preset("default").expect("preset").config,
            capacity_bytes: 1 << 20,
            logical_pages: 256,
            overprovision: Some(0.07),
            spare_factor: 0.125,
            max_queues: 2,
            checkpoint_id,
            checkpoint_corrupt: false,
            clean_shutdown: clean,
            pages_after_checkpoint: after,
            erase_min: 0,
            erase_avg: 0.0,
            erase_max: 0,
            checkpoint_erase_max: 0,
            checkpoint_area_worn: false,
            checkpoint_bad_blocks: 0,
            bad_blocks: 0,
            total_blocks: 16,
            usable_blocks: 12,
            data_bad_blocks: 0,
            blocks_needed: Some(10),
            need_settings: "the default settings".into(),
        }
    }

    #[test]
    fn the_spare_line_says_how_many_more_blocks_may_go_bad() {
        let r = render(&info(Some(3), true, 0));
        assert!(
            r.contains("12 usable, 10 needed by page with the default settings: 2 more may go bad"),
            "{r}"
        );
        let worn = ImageInfo {
            usable_blocks: 9,
            data_bad_blocks: 3,
            ..info(Some(3), true, 0)
        };
        let r = render(&worn);
        assert!(
            r.contains("spare blocks exhausted, the device opens read-only"),
            "{r}"
        );
        // Short of the need with no block gone bad: settings that ask for more frontiers
        // than the format set aside; the open is writable (as `serve` finds).
        let short = ImageInfo {
            usable_blocks: 9,
            ..info(Some(3), true, 0)
        };
        let r = render(&short);
        assert!(
            r.contains("9 usable, 10 needed by page with the default settings: writable, but the device turns read-only at its first bad block"),
            "{r}"
        );
        let worn = ImageInfo {
            checkpoint_area_worn: true,
            ..info(Some(3), true, 0)
        };
        let r = render(&worn);
        assert!(
            r.contains("a checkpoint area lost too many blocks to hold a checkpoint: the device opens read-only"),
            "{r}"
        );
        assert!(r.contains("bad blocks         0 of 16\n"), "{r}");
        let skipped = ImageInfo {
            bad_blocks: 3,
            checkpoint_bad_blocks: 2,
            ..info(Some(3), true, 0)
        };
        let r = render(&skipped);
        assert!(
            r.contains("3 of 16 (2 in the checkpoint areas, whose pages skip them)"),
            "{r}"
        );
    }

    #[test]
    fn the_shutdown_line_says_what_the_open_will_scan() {
        assert!(render(&info(Some(3), true, 0)).contains("clean"));
        let r = render(&info(Some(3), false, 12));
        assert!(
            r.contains("dirty (12 pages written after the last checkpoint"),
            "{r}"
        );
        // A creation cut short after the superblock: no checkpoint, so a full scan (the open
        // reports `full-scan`), of however few pages are programmed.
        let r = render(&info(None, false, 0));
        assert!(
            r.contains("dirty, no checkpoint: the open scans every page (0 programmed)"),
            "{r}"
        );
    }
}
