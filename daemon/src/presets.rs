//! NAND presets: lookup by name, scaling a preset to an exported capacity, and `ftld presets`.
//!
//! Scaling keeps a preset's page and block shape, bank layout and timing and changes only the
//! number of blocks per bank ([`nand_model::NandConfig::scaled_to`]); [`scale_for_capacity`]
//! grows the raw size until the FTL's format plan (over-provisioning, checkpoint area, write
//! frontiers, GC reserve) leaves at least the asked-for exported size.

use anyhow::Context;
use ftl::FtlConfig;
use nand_model::{NandConfig, Preset};

use crate::units::format_size;
use crate::UsageError;

/// The preset called `name`, or a usage error listing the known names.
pub fn find(name: &str) -> anyhow::Result<Preset> {
    nand_model::preset(name).ok_or_else(|| {
        let names: Vec<&str> = nand_model::presets().iter().map(|p| p.name).collect();
        UsageError(format!(
            "unknown preset {name:?} (known: {}; see `ftld presets`)",
            names.join(", ")
        ))
        .into()
    })
}

/// `base` with enough blocks per bank that the FTL can export `capacity` bytes.
pub fn scale_for_capacity(
    base: &NandConfig,
    ftl: &FtlConfig,
    capacity: u64,
) -> anyhow::Result<NandConfig> {
    // No size helps a device whose timing or block size cannot give the scheme's bound.
    ftl.scheme
        .fits_device(base)
        .map_err(|e| UsageError(format!("scheme {} on this device: {e}", ftl.scheme)))?;
    // A format the tunables refuse would read as "too small" below.
    ftl::check_running_policy(ftl).map_err(|e| UsageError(e.to_string()))?;
    // Logical pages are numbered in 32 bits (the map's entries, the OOB's page numbers): no
    // geometry exports more, and growing one towards it would end in a memory refusal
    // naming a smaller device.
    let max_pages = u64::from(u32::MAX);
    if capacity / ftl::LOGICAL_PAGE as u64 > max_pages {
        return Err(UsageError(format!(
            "capacity {} is more than ftld can export: logical pages of 4 KiB are numbered in \
             32 bits (at most {max_pages} pages: 16 TiB less 4 KiB)",
            format_size(capacity),
        ))
        .into());
    }
    let g = base.geometry;
    // A log block serves one logical block at a time (bast's, fast's sequential log) or holds
    // pages of several (fast's random logs): more logs than the device has logical blocks is
    // more log space than data, and the geometry grown to hold them is far larger than what
    // was asked for (100 000 on 64 MiB of bast made 195 GiB of flash).
    let logical_blocks = capacity.div_ceil(g.block_bytes().max(1));
    if ftl.scheme.has_log_blocks() && u64::from(ftl.log_blocks) > logical_blocks {
        return Err(UsageError(format!(
            "[ftl] log_blocks {} is more than the {logical_blocks} logical blocks of a {} device \
             on this preset: more log space than data ({} refuses more than {logical_blocks} \
             here; 0: the default, 3 % of the blocks)",
            ftl.log_blocks,
            format_size(capacity),
            ftl.scheme,
        ))
        .into());
    }
    let row = u64::from(g.banks()) * g.block_bytes();
    let mut raw = capacity;
    let mut last_blocks = 0;
    // Why the last geometry tried could not be formatted at all (a log block count outside
    // what it allows, say): said if no size helps.
    let mut refused = None;
    loop {
        let cfg = base.scaled_to(raw);
        let max = match ftl::plan_format(&cfg, ftl, None) {
            Ok(p) => p.max_export_bytes,
            // Not a matter of size: more blocks would need more memory still.
            // The geometry tried exports less than asked (the first is the asked raw size,
            // over-provisioning and reserves off it): the asked one needs more still.
            Err(e @ ftl::FtlError::OutOfMemory { .. }) => {
                return Err(UsageError(format!(
                    "capacity {}: more RAM than this process can get; already {e}",
                    format_size(capacity)
                ))
                .into())
            }
            Err(e) => {
                refused = Some(e);
                0
            }
        };
        if max >= capacity {
            warn_if_logs_grew(base, ftl, capacity, &cfg);
            return Ok(cfg);
        }
        if cfg.geometry.blocks_per_bank == last_blocks {
            if let (0, Some(e)) = (max, refused) {
                return Err(UsageError(format!("capacity {}: {e}", format_size(capacity))).into());
            }
            return Err(UsageError(format!(
                "capacity {} is more than this preset's geometry can address (at most {})",
                format_size(capacity),
                format_size(max)
            ))
            .into());
        }
        last_blocks = cfg.geometry.blocks_per_bank;
        // Grow by the shortfall plus some slack for over-provisioning, at least one block per
        // bank, so this converges in a handful of steps at any size.
        let short = capacity - max;
        raw = cfg
            .geometry
            .raw_capacity()
            .checked_add((short + short / 8).max(row))
            .context("capacity overflows")?;
    }
}

/// Warns when the log blocks asked for (`[ftl] log_blocks`) made the geometry grow well past
/// the one the default log pool gets at this capacity: the flash, and with it every spare and
/// WAF figure, is then the log pool's, not the capacity's.
fn warn_if_logs_grew(base: &NandConfig, ftl: &FtlConfig, capacity: u64, cfg: &NandConfig) {
    if ftl.log_blocks == 0 || !ftl.scheme.has_log_blocks() {
        return;
    }
    let default_logs = FtlConfig {
        log_blocks: 0,
        ..ftl.clone()
    };
    let Ok(plain) = scale_for_capacity(base, &default_logs, capacity) else {
        return;
    };
    let (grown, plain) = (cfg.geometry.raw_capacity(), plain.geometry.raw_capacity());
    if grown > plain + plain / 4 {
        tracing::warn!(
            "[ftl] log_blocks {} needs {} of flash for {} exported, against {} with the \
             default log pool: the device grew to hold the logs, and its spare and WAF figures \
             are those of that flash",
            ftl.log_blocks,
            format_size(grown),
            format_size(capacity),
            format_size(plain)
        );
    }
}

/// Prints the presets as a table (or JSON).
pub fn print(json: bool) -> anyhow::Result<()> {
    let all = nand_model::presets();
    if json {
        // Each preset as the library has it, plus what the table and notes print: the default
        // exported size (per scheme: the block-mapped schemes keep other spare) and the schemes
        // whose guarantees the device supports, with why not for the others.
        let mut list = Vec::with_capacity(all.len());
        for p in &all {
            let mut v = serde_json::to_value(p)?;
            let mut export = serde_json::Map::new();
            let mut fits = Vec::new();
            let mut unfit = serde_json::Map::new();
            for s in ftl::SchemeKind::ALL {
                let cfg = FtlConfig {
                    scheme: s,
                    ..FtlConfig::default()
                };
                if let Ok(pl) = ftl::plan_format(&p.config, &cfg, None) {
                    export.insert(s.name().into(), pl.max_export_bytes.into());
                }
                match s.fits_device(&p.config) {
                    Ok(()) => fits.push(s.name()),
                    Err(why) => {
                        unfit.insert(s.name().into(), why.into());
                    }
                }
            }
            v["export_bytes"] = export.into();
            v["schemes"] = fits.into();
            v["schemes_unfit"] = unfit.into();
            list.push(v);
        }
        out!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    out!(
        "{:<15} {:>4} {:>6} {:>6} {:>8} {:>5} {:>9} {:>9} {:>22} {:>9} {:>7}",
        "NAME",
        "CELL",
        "PAGE",
        "PG/BLK",
        "BLOCK",
        "BANKS",
        "RAW",
        "EXPORT",
        "READ/PROG/ERASE",
        "CHANNEL",
        "P/E"
    );
    let ftl = FtlConfig::default();
    for p in &all {
        let c = &p.config;
        let g = &c.geometry;
        let t = &c.timing;
        let export = ftl::plan_format(c, &ftl, None)
            .map_or_else(|_| "-".to_string(), |pl| format_size(pl.max_export_bytes));
        out!(
            "{:<15} {:>4} {:>6} {:>6} {:>8} {:>5} {:>9} {:>9} {:>22} {:>9} {:>7}",
            p.name,
            t.cell.kind.to_string().to_uppercase(),
            format_size(u64::from(g.page_size)),
            g.pages_per_block,
            format_size(g.block_bytes()),
            format!("{}x{}", g.channels, g.banks_per_channel),
            format_size(g.raw_capacity()),
            export,
            {
                // A multi-level cell shows its fastest-slowest page type.
                let lat = t.page_type_latencies();
                let range = |f: fn(&(std::time::Duration, std::time::Duration)) -> u128| {
                    let lo = lat.iter().map(f).min().unwrap_or(0);
                    let hi = lat.iter().map(f).max().unwrap_or(0);
                    if lo == hi {
                        lo.to_string()
                    } else {
                        format!("{lo}-{hi}")
                    }
                };
                format!(
                    "{}/{}/{}us",
                    range(|l| l.0.as_micros()),
                    range(|l| l.1.as_micros()),
                    t.t_erase.as_micros()
                )
            },
            format!("{:.0}MB/s", t.channel_bytes_per_sec as f64 / 1e6),
            c.endurance
        );
    }
    out!();
    out!(
        "BANKS is channels x banks per channel; EXPORT is the default exported size; a \
         multi-level cell (MLC, TLC, QLC) shows its fastest-slowest page type's read and program \
         (page p of a block is type p % bits: LSB, CSB, MSB, TSB; `ftld info` lists them)."
    );
    out!(
        "Every preset has interconnect tmcd (a controller per channel); --interconnect pmcd \
         [--controllers N] (or [nand]) gives a new image N controllers that reach any bank."
    );
    out!("--capacity SIZE scales a preset's blocks per bank to export SIZE.");
    out!();
    for p in &all {
        out!("{}: {}", p.name, p.description);
    }
    out!();
    out!("FTL schemes (--ftl, [ftl] scheme; chosen when an image is formatted):");
    for s in ftl::SchemeKind::ALL {
        out!("  {:<6} {}", s.name(), s.description());
    }
    let fits = |s: ftl::SchemeKind| -> Vec<&str> {
        all.iter()
            .filter(|p| s.fits_device(&p.config).is_ok())
            .map(|p| p.name)
            .collect()
    };
    out!(
        "rftl bounds every write by one erase-long GC step and a program, which needs an erase \
         longer than a page copy and blocks of enough pages: presets {}.",
        fits(ftl::SchemeKind::Rftl).join(", ")
    );
    out!(
        "gftl gives the same bound with a write buffer sized from the timing, which needs an \
         erase longer than a page copy: presets {}.",
        fits(ftl::SchemeKind::Gftl).join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_reaches_the_capacity() {
        let ftl = FtlConfig {
            queues: 2,
            ..Default::default()
        };
        for p in nand_model::presets() {
            for cap in [1u64 << 20, 64 << 20, 1 << 30, 3 << 30] {
                let rftl = FtlConfig {
                    scheme: ftl::SchemeKind::Rftl,
                    ..ftl.clone()
                };
                match ftl::schemes::rftl::StepBudget::of(&p.config) {
                    Ok(_) => {
                        let cfg = scale_for_capacity(&p.config, &rftl, cap).expect("scales");
                        let plan = ftl::plan_format(&cfg, &rftl, Some(cap)).expect("plan");
                        assert!(plan.max_export_bytes >= cap, "rftl {} {cap}", p.name);
                    }
                    Err(_) => {
                        let e = scale_for_capacity(&p.config, &rftl, cap).unwrap_err();
                        assert!(e.to_string().contains("scheme rftl"), "{e}");
                    }
                }
                let cfg = scale_for_capacity(&p.config, &ftl, cap).expect("scales");
                let plan = ftl::plan_format(&cfg, &ftl, Some(cap)).expect("plan");
                assert!(plan.max_export_bytes >= cap, "{} {cap}", p.name);
                assert_eq!(cfg.geometry.page_size, p.config.geometry.page_size);
            }
        }
    }

    /// Capacities past the 32-bit logical page numbers are refused as such (they were refused
    /// for memory, naming a smaller device's page count), on every preset; the largest
    /// addressable one is not refused for its size.
    #[test]
    fn capacities_past_32_bit_page_numbers_say_so() {
        let ftl = FtlConfig::default();
        for p in nand_model::presets() {
            for cap in [16u64 << 40, 17 << 40, 8000 << 40] {
                let e = scale_for_capacity(&p.config, &ftl, cap)
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.contains("more than ftld can export")
                        && e.contains("at most 4294967295 pages"),
                    "{} {cap}: {e}",
                    p.name
                );
            }
            let e = scale_for_capacity(&p.config, &ftl, (16 << 40) - 4096)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(!e.contains("more than ftld can export"), "{}: {e}", p.name);
        }
    }

    #[test]
    fn unknown_preset_lists_names() {
        let e = find("nope").expect_err("unknown");
        assert!(e.to_string().contains("board-000"), "{e}");
    }
}
