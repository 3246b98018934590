//! Finding, checking, creating and opening image files, with errors that name the image.
//!
//! An existing image keeps the geometry and capacity it was formatted with; a preset or
//! capacity asked for explicitly must agree with it ([`check_matches`]), otherwise the command
//! fails naming the image and the field. A held image lock becomes a message naming the
//! holder's pid.

use std::fs;
use std::path::Path;

use anyhow::{anyhow, Context};
use ftl::{Access, Ftl, FtlError, ImageInfo, LOGICAL_PAGE};
use nand_model::{ImageError, Interconnect, NandConfig, TimingMode};

use crate::cli::InterconnectKind;
use crate::config::{ImageSettings, NandFileConfig};
use crate::presets;
use crate::units::format_size;
use crate::UsageError;

/// Preset used for new images when none is named.
pub const DEFAULT_PRESET: &str = "default";

/// Exported size rounded up to whole 4 KiB logical pages.
pub fn round_capacity(capacity: u64) -> u64 {
    // Saturating: a size that does not fit is refused when the options are read.
    capacity
        .div_ceil(LOGICAL_PAGE as u64)
        .saturating_mul(LOGICAL_PAGE as u64)
}

/// Turns an FTL error about `path` into a message for people.
pub fn describe(e: FtlError, path: &Path) -> anyhow::Error {
    match e {
        FtlError::Image(ImageError::Locked { pid, .. }) => {
            let holder = pid.map_or_else(|| "another process".to_string(), |p| format!("pid {p}"));
            anyhow!(
                "image {} is in use by {holder} (another `ftld serve`?): stop it first, or \
                 query it with `ftld stats`",
                path.display()
            )
        }
        // These already name the image.
        e @ (FtlError::Image(_) | FtlError::Format { .. }) => anyhow::Error::new(e),
        e => anyhow::Error::new(e).context(format!("image {}", path.display())),
    }
}

/// Reads an image's description without changing it.
pub fn inspect(path: &Path) -> anyhow::Result<ImageInfo> {
    ftl::inspect(path).map_err(|e| describe(e, path))
}

/// Fails if an explicitly requested FTL scheme, preset or capacity contradicts the existing
/// image.
pub fn check_matches(
    info: &ImageInfo,
    scheme: Option<ftl::SchemeKind>,
    preset: Option<&str>,
    capacity: Option<u64>,
    nand: &NandFileConfig,
) -> anyhow::Result<()> {
    let path = info.path.display();
    if let Some(s) = scheme.filter(|s| *s != info.ftl) {
        return Err(UsageError(format!(
            "image {path} was formatted with FTL scheme {}, but --ftl (or [ftl] scheme) asks for \
             {s} (an image always opens with its own scheme; drop the option, or recreate the \
             image with `ftld format --force --ftl {s}`)",
            info.ftl
        ))
        .into());
    }
    let hint = "an existing image keeps the geometry it was created with; drop the option, or \
                recreate the image with `ftld format --force`";
    if let Some(name) = preset {
        // The preset as `[nand]` changes it (what a new image from these options would get).
        let mut want = presets::find(name)?.config;
        nand.apply(&mut want).map_err(UsageError)?;
        if let Some((field, image, wanted)) = shape_difference(&info.nand, &want) {
            return Err(UsageError(format!(
                "image {path} has {field} = {image}, but preset {name:?} has {field} = {wanted} ({hint})"
            ))
            .into());
        }
    }
    if let Some(c) = capacity {
        let c = round_capacity(c);
        if c != info.capacity_bytes {
            return Err(UsageError(format!(
                "image {path} exports {} ({} bytes), but --capacity asks for {} ({c} bytes) ({hint})",
                format_size(info.capacity_bytes),
                info.capacity_bytes,
                format_size(c)
            ))
            .into());
        }
    }
    Ok(())
}

/// Fails if an explicitly requested interconnect contradicts the existing image's.
pub fn check_interconnect(
    info: &ImageInfo,
    asked: Option<(InterconnectKind, Option<u32>)>,
) -> anyhow::Result<()> {
    let Some(asked) = asked else {
        return Ok(());
    };
    let have = info.nand.interconnect;
    let want = interconnect_of(asked, info.nand.geometry.channels);
    // `pmcd` without a count (its default is for new images) accepts any PMCD image.
    let agrees = match (asked, have) {
        ((InterconnectKind::Pmcd, None), Interconnect::Pmcd { .. }) => true,
        _ => have == want,
    };
    if !agrees {
        return Err(UsageError(format!(
            "image {} has interconnect {have}, but the options ask for {want} (an existing image \
             keeps the device it was created with; drop the option, or recreate the image with \
             `ftld format --force`)",
            info.path.display()
        ))
        .into());
    }
    Ok(())
}

/// Fails if `[ftl] overprovision` is written explicitly for a scheme that does not use it
/// (rftl, nftl, gftl size their spare themselves): a setting silently ignored would leave a
/// researcher measuring a spare they did not ask for.
fn refuse_inapplicable_overprovision(
    scheme: ftl::SchemeKind,
    settings: &ImageSettings,
) -> anyhow::Result<()> {
    match settings.overprovision {
        Some(op) if !scheme.uses_overprovision() => Err(UsageError(format!(
            "[ftl] overprovision = {op} does not apply to scheme {scheme} ({}): drop the \
             setting; `ftld info` shows the spare the scheme keeps",
            match scheme {
                ftl::SchemeKind::Gftl =>
                    "its write buffer is sized from the timing, and a new image's format keeps \
                     2 % of the blocks as spare for bad ones",
                _ =>
                    "a logical block's own blocks are its working space, and a new image's \
                     format keeps 2 % of the blocks as spare for bad ones",
            }
        ))
        .into()),
        _ => Ok(()),
    }
}

/// Checks the `[ftl]` settings written explicitly against the scheme the image has (or gets):
/// format-time settings it does not use are refused (`overprovision`; `log_blocks` other than
/// 0), running policies it does not use are warned of, so a researcher does not measure a
/// setting that was silently ignored.
fn check_scheme_settings(scheme: ftl::SchemeKind, settings: &ImageSettings) -> anyhow::Result<()> {
    refuse_scheme_settings(scheme, settings)?;
    let mut named = Vec::new();
    for key in &settings.ftl_keys {
        // A flag (`--gc-policy`) names the setting of its `[ftl]` key (`gc_policy`).
        let (setting, shown) = match key.strip_prefix("--") {
            Some(flag) => (flag.replace('-', "_"), key.clone()),
            None => (key.clone(), format!("[ftl] {key}")),
        };
        if setting != "overprovision"
            && setting != "log_blocks"
            && !scheme.uses_setting(&setting)
            && !named.contains(&setting)
        {
            tracing::warn!("{shown} does not apply to scheme {scheme}: ignored");
            // Once per setting (a flag and the file's key set the same one).
            named.push(setting);
        }
    }
    Ok(())
}

/// The refusals of [`check_scheme_settings`] alone (no warnings).
fn refuse_scheme_settings(scheme: ftl::SchemeKind, settings: &ImageSettings) -> anyhow::Result<()> {
    refuse_inapplicable_overprovision(scheme, settings)?;
    if let Some(n) = settings
        .log_blocks
        .filter(|&n| n != 0 && !scheme.has_log_blocks())
    {
        return Err(UsageError(format!(
            "[ftl] log_blocks = {n} does not apply to scheme {scheme} (only bast and fast keep \
             a pool of log blocks): drop the setting"
        ))
        .into());
    }
    Ok(())
}

/// Everything [`create`] refuses before it makes a file (the settings the scheme does not
/// take, the device and the format planned), so `ftld format --force` can check them before it
/// removes the old image: a refusal must not leave the user with no image at all.
pub fn validate_new(settings: &ImageSettings) -> anyhow::Result<()> {
    refuse_scheme_settings(settings.ftl.scheme, settings)?;
    let (nand, export) = plan_new(settings)?;
    ftl::plan_format(&nand, &settings.ftl, export)
        .map_err(|e| UsageError(format!("cannot format {}: {e}", settings.path.display())))?;
    Ok(())
}

/// Fails if `[ftl] overprovision` or `[ftl] log_blocks`, written explicitly, contradict the
/// existing image's (both are fixed when it is formatted).
pub fn check_format_settings(info: &ImageInfo, settings: &ImageSettings) -> anyhow::Result<()> {
    let path = info.path.display();
    let hint = "a format-time setting; drop it, or recreate the image with `ftld format --force`";
    check_scheme_settings(info.ftl, settings)?;
    if let (Some(op), Some(formatted)) = (settings.overprovision, info.overprovision) {
        if op != formatted {
            return Err(UsageError(format!(
                "image {path} was formatted with overprovision = {formatted}, but [ftl] \
                 overprovision asks for {op} ({hint})"
            ))
            .into());
        }
    }
    // 0 asks for the default pool (3 % of the blocks): whatever the image has.
    if let Some(n) = settings.log_blocks.filter(|&n| n != 0) {
        if n != info.log_blocks {
            return Err(UsageError(format!(
                "image {path} ({} scheme) has {} log blocks, but [ftl] log_blocks asks for {n} \
                 ({hint})",
                info.ftl, info.log_blocks
            ))
            .into());
        }
    }
    Ok(())
}

/// Fails if the `[nand]` table's device settings contradict the existing image's device.
pub fn check_nand_table(info: &ImageInfo, nand: &NandFileConfig) -> anyhow::Result<()> {
    if !nand.sets_device() {
        return Ok(());
    }
    let mut want = info.nand;
    nand.apply(&mut want).map_err(UsageError)?;
    if let Some((field, image, wanted)) = shape_difference(&info.nand, &want) {
        return Err(UsageError(format!(
            "image {} has {field} = {image}, but [nand] asks for {field} = {wanted} (an existing \
             image keeps the device it was created with; drop the setting, or recreate the image \
             with `ftld format --force`)",
            info.path.display()
        ))
        .into());
    }
    Ok(())
}

/// The first field (other than the number of blocks, which capacity scaling changes) in which
/// two device configurations differ: `(name, a's value, b's value)`.
pub fn shape_difference(a: &NandConfig, b: &NandConfig) -> Option<(&'static str, String, String)> {
    let (ga, gb) = (&a.geometry, &b.geometry);
    let (ta, tb) = (&a.timing, &b.timing);
    let fields: [(&'static str, String, String); 14] = [
        ("channels", ga.channels.to_string(), gb.channels.to_string()),
        (
            "banks_per_channel",
            ga.banks_per_channel.to_string(),
            gb.banks_per_channel.to_string(),
        ),
        (
            "pages_per_block",
            ga.pages_per_block.to_string(),
            gb.pages_per_block.to_string(),
        ),
        (
            "page_size",
            ga.page_size.to_string(),
            gb.page_size.to_string(),
        ),
        ("oob_size", ga.oob_size.to_string(), gb.oob_size.to_string()),
        (
            "t_read",
            format!("{:?}", ta.t_read),
            format!("{:?}", tb.t_read),
        ),
        (
            "t_prog",
            format!("{:?}", ta.t_prog),
            format!("{:?}", tb.t_prog),
        ),
        (
            "t_erase",
            format!("{:?}", ta.t_erase),
            format!("{:?}", tb.t_erase),
        ),
        (
            "channel_bytes_per_sec",
            ta.channel_bytes_per_sec.to_string(),
            tb.channel_bytes_per_sec.to_string(),
        ),
        ("cell", format!("{:?}", ta.cell), format!("{:?}", tb.cell)),
        (
            "suspend",
            format!("{:?}", ta.suspend),
            format!("{:?}", tb.suspend),
        ),
        ("planes", a.planes.to_string(), b.planes.to_string()),
        (
            "read_retry",
            format!("{:?}", ta.read_retry),
            format!("{:?}", tb.read_retry),
        ),
        (
            "endurance",
            a.endurance.to_string(),
            b.endurance.to_string(),
        ),
    ];
    fields.into_iter().find(|(_, x, y)| x != y)
}

/// The interconnect `asked` (kind, controllers) resolves to on a device with `channels`.
pub fn interconnect_of(asked: (InterconnectKind, Option<u32>), channels: u32) -> Interconnect {
    match asked {
        (InterconnectKind::Tmcd, _) => Interconnect::Tmcd,
        (InterconnectKind::Pmcd, c) => Interconnect::Pmcd {
            controllers: c.unwrap_or(channels),
        },
    }
}

/// The device configuration and exported size a new image gets.
pub fn plan_new(settings: &ImageSettings) -> anyhow::Result<(NandConfig, Option<u64>)> {
    let preset = presets::find(settings.preset.as_deref().unwrap_or(DEFAULT_PRESET))?;
    let mut config = preset.config;
    if let Some(asked) = settings.interconnect {
        config.interconnect = interconnect_of(asked, config.geometry.channels);
    }
    settings.nand.apply(&mut config).map_err(UsageError)?;
    match settings.capacity {
        None => Ok((config, None)),
        Some(c) => {
            let export = round_capacity(c);
            let nand = presets::scale_for_capacity(&config, &settings.ftl, export)?;
            Ok((nand, Some(export)))
        }
    }
}

/// Creates a new image (its directory too). A half-made file is removed on failure.
pub fn create(settings: &ImageSettings, timing: TimingMode) -> anyhow::Result<Ftl> {
    let path = &settings.path;
    check_scheme_settings(settings.ftl.scheme, settings)?;
    let (nand, export) = plan_new(settings)?;
    if let nand_model::Interconnect::Pmcd { controllers } = nand.interconnect {
        let banks = nand.geometry.banks();
        if controllers > banks {
            tracing::warn!(
                "pmcd with {controllers} controllers on {banks} banks: at most {banks} are ever \
                 busy at once, so this device behaves as with {banks}"
            );
        }
    }
    ftl::plan_format(&nand, &settings.ftl, export)
        .map_err(|e| UsageError(format!("cannot format {}: {e}", path.display())))?;
    if let Some(export) = export {
        warn_of_inflated_spare(settings, &nand, export);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)
            .with_context(|| format!("creating the image directory {}", dir.display()))?;
    }
    tracing::info!(
        image = %path.display(),
        ftl = %settings.ftl.scheme,
        preset = settings.preset.as_deref().unwrap_or(DEFAULT_PRESET),
        raw = %format_size(nand.geometry.raw_capacity()),
        "creating a new image"
    );
    match Ftl::create(path, &nand, timing, settings.ftl.clone(), export)
        .and_then(|f| preallocate(f, settings))
        .inspect(|f| {
            if let Some(plan) = &settings.faults {
                plan.arm(f.nand());
            }
        }) {
        Ok(f) => Ok(f),
        Err(e) => {
            // Leave a file that someone else made (or is making) alone.
            let theirs = matches!(
                e,
                FtlError::Image(ImageError::AlreadyExists { .. } | ImageError::Locked { .. })
            );
            if !theirs && path.exists() {
                if let Err(rm) = fs::remove_file(path) {
                    tracing::warn!(image = %path.display(), error = %rm, "cannot remove the half-created image");
                }
            }
            Err(describe(e, path))
        }
    }
}

/// Warns when a device scaled down to a small `export` keeps much more flash per exported
/// byte than its preset at its own size does: a preset is scaled by its blocks per bank,
/// never below `nand_model::MIN_SCALED_BLOCKS_PER_BANK`, so a small capacity on a preset of
/// many banks or large blocks gets spare the over-provisioning setting never asked for, and
/// its GC and WAF figures are those of that spare (a 64 MiB `default` device: 136 MiB of
/// flash, a physical spare of 87 %).
fn warn_of_inflated_spare(settings: &ImageSettings, nand: &nand_model::NandConfig, export: u64) {
    let Ok(preset) = presets::find(settings.preset.as_deref().unwrap_or(DEFAULT_PRESET)) else {
        return;
    };
    let Ok(own) = ftl::plan_format(&preset.config, &settings.ftl, None) else {
        return;
    };
    let ratio = |raw: u64, export: u64| raw as f64 / export.max(1) as f64;
    let own_ratio = ratio(preset.config.geometry.raw_capacity(), own.max_export_bytes);
    let this = ratio(nand.geometry.raw_capacity(), export);
    if this <= own_ratio * 1.25 {
        return;
    }
    // The smallest power-of-two multiple of this capacity that keeps within the bound (the
    // fixed per-bank reserves weigh less as the device grows).
    let mut enough = export;
    while enough < own.max_export_bytes {
        enough = enough.saturating_mul(2);
        let fits = presets::scale_for_capacity(&preset.config, &settings.ftl, enough)
            .is_ok_and(|c| ratio(c.geometry.raw_capacity(), enough) <= own_ratio * 1.25);
        if fits {
            break;
        }
    }
    let g = nand.geometry;
    tracing::warn!(
        "{} of flash for {} exported ({this:.2}x; the preset at its own size has \
         {own_ratio:.2}x): a scaled preset keeps at least {} blocks on each of its {} banks, \
         and its checkpoint areas and GC reserves on each bank, so this device's spare is far \
         above what over-provisioning asks, and its GC and WAF figures are those of that \
         spare ({} exported keeps within 1.25x of the preset's proportion)",
        format_size(g.raw_capacity()),
        format_size(export),
        nand_model::MIN_SCALED_BLOCKS_PER_BANK,
        g.banks(),
        format_size(enough.min(own.max_export_bytes)),
    );
}

/// Opens an existing image after checking it against explicitly requested options; with
/// [`Access::ReadOnly`] the image is left byte for byte as it was ([`Ftl::open_with`]).
pub fn open(settings: &ImageSettings, timing: TimingMode, access: Access) -> anyhow::Result<Ftl> {
    let path = &settings.path;
    // The format only: the open reads the checkpoints itself.
    let info = ftl::inspect_format(path).map_err(|e| describe(e, path))?;
    check_matches(
        &info,
        settings.scheme,
        settings.preset.as_deref(),
        settings.capacity,
        &settings.nand,
    )?;
    check_interconnect(&info, settings.interconnect)?;
    check_nand_table(&info, &settings.nand)?;
    check_format_settings(&info, settings)?;
    // Faults are armed before the open reads anything: its own reads meet them too.
    Ftl::open_prepared(path, timing, settings.ftl.clone(), access, |nand| {
        if let Some(plan) = &settings.faults {
            plan.arm(nand);
        }
    })
    .and_then(|f| preallocate(f, settings))
    .map_err(|e| describe(e, path))
}

/// `--preallocate`: allocates the whole image file now (see `NandDevice::preallocate`). On
/// failure the FTL is closed cleanly before the error is returned.
fn preallocate(ftl: Ftl, settings: &ImageSettings) -> Result<Ftl, FtlError> {
    if !settings.preallocate {
        return Ok(ftl);
    }
    if ftl.opened_read_only() {
        tracing::warn!(
            image = %settings.path.display(),
            "preallocate is ignored: the image is open read-only, and allocating would change it"
        );
        return Ok(ftl);
    }
    let t = std::time::Instant::now();
    match ftl.nand().preallocate() {
        Ok(mapped) => {
            tracing::info!(
                image = %settings.path.display(),
                mapped,
                bytes = std::fs::metadata(&settings.path).map_or(0, |m| m.len()),
                millis = t.elapsed().as_millis() as u64,
                "preallocated the image file"
            );
            Ok(ftl)
        }
        Err(e) => {
            if let Err(close) = ftl.close() {
                tracing::warn!(error = %close, "closing the image after the failed preallocation");
            }
            Err(FtlError::Image(e))
        }
    }
}

/// Opens the image, creating it first if it does not exist. A new image asked for read-only
/// is made, closed and opened read-only: from then on nothing changes it.
pub fn open_or_create(
    settings: &ImageSettings,
    timing: TimingMode,
    access: Access,
) -> anyhow::Result<Ftl> {
    let path = &settings.path;
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(UsageError(format!(
            "image {} is a directory, not an image file",
            path.display()
        ))
        .into()),
        Ok(_) => open(settings, timing, access),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match access {
            Access::ReadWrite => create(settings, timing),
            Access::ReadOnly => {
                // Made sparse: `preallocate` is ignored for a read-only device.
                let plain = ImageSettings {
                    preallocate: false,
                    faults: None,
                    ..settings.clone()
                };
                create(&plain, TimingMode::Off)?
                    .close()
                    .map_err(|e| describe(e, path))?;
                open(settings, timing, access)
            }
        },
        Err(e) => Err(anyhow::Error::new(e).context(format!("image {}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(round_capacity(1), 4096);
        assert_eq!(round_capacity(4096), 4096);
        assert_eq!(round_capacity(64 << 20), 64 << 20);
    }

    #[test]
    fn shapes() {
        let a = presets::find("board-000").expect("preset").config;
        let b = presets::find("k9-003").expect("preset").config;
        assert_eq!(shape_difference(&a, &a.scaled_to(1 << 30)), None);
        let d = shape_difference(&a, &b).expect("differs");
        assert_eq!(d.0, "pages_per_block");
    }
}
