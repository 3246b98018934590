//! `ftld format`: create an image, or with `--force` replace one that no daemon holds.

use std::fs;

use anyhow::Context;
use ftl::FtlError;
use nand_model::{ImageError, TimingMode};

use crate::cli::FormatArgs;
use crate::config::{self, FileConfig};
use crate::image;
use crate::units::format_size;
use crate::UsageError;

/// Runs `ftld format`.
pub fn run(args: &FormatArgs) -> anyhow::Result<()> {
    let file = FileConfig::load_opt(args.image.config.as_deref())?;
    let mut s = config::resolve_image(&args.image, &file)?;
    // `[faults]` are for serving and replaying: a new image starts with no block gone bad.
    s.faults = None;
    let path = &s.path;
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(UsageError(format!("{} is a directory", path.display())).into())
        }
        // `--force` removes the file and makes a new one: never in place of a device node, a
        // FIFO, a socket or a symbolic link (`ftld format --force --image /dev/null` as root
        // would have replaced /dev/null with an image).
        Ok(m) if m.file_type().is_symlink() => {
            return Err(UsageError(format!(
                "{} is a symbolic link; give the path of the image it points to",
                path.display()
            ))
            .into())
        }
        Ok(m) if !m.is_file() => {
            return Err(UsageError(format!(
                "{} is not a regular file (a device, FIFO or socket); an image is a regular file",
                path.display()
            ))
            .into())
        }
        Ok(_) if !args.force => {
            return Err(UsageError(format!(
                "image {} already exists; pass --force to replace it (its data is lost)",
                path.display()
            ))
            .into())
        }
        Ok(_) => {
            // Any lock: a daemon serving the image, read-only too, or a tool reading it.
            // A file this cannot even open for reading is no daemon's image: replaced as before.
            let pid = nand_model::image_holder(path).ok().flatten();
            if pid.is_some() {
                let e = FtlError::Image(ImageError::Locked {
                    path: path.clone(),
                    pid,
                });
                return Err(image::describe(e, path));
            }
            // Settings `create` would refuse are refused while the old image still exists.
            image::validate_new(&s)?;
            fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("image {}", path.display())),
    }
    let ftl = image::create(&s, TimingMode::Off)?;
    let capacity = ftl.capacity();
    let geo = ftl.nand().geometry().to_owned();
    let interconnect = ftl.nand().config().interconnect;
    ftl.close()
        .map_err(|e| image::describe(e, path).context("closing the new image"))?;
    out!(
        "formatted {}: FTL scheme {}, {} exported ({} bytes) on {} of raw flash ({} blocks/bank), \
         interconnect {}",
        path.display(),
        s.ftl.scheme,
        format_size(capacity),
        capacity,
        format_size(geo.raw_capacity()),
        geo.blocks_per_bank,
        interconnect
    );
    Ok(())
}
