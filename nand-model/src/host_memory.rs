//! How much memory this process can still get, checked before a device's in-RAM tables (and,
//! in the FTL, its maps) are allocated: an image too large for the machine (a mistyped
//! `--capacity`, a forged header over a sparse file) is refused with figures, where it would
//! otherwise abort on a failed allocation or be killed by the kernel's OOM killer part way.
//!
//! The figure is `MemAvailable + SwapFree` from `/proc/meminfo`, and at most the process's
//! soft data-segment limit (`ulimit -d`, `/proc/self/limits`: heap allocations count against
//! it, the image's file mapping does not). Unknown (no `/proc`) means no check.

use std::fmt;

/// Bytes the NAND model keeps in RAM per page of the device: the frame reference count (1 B)
/// and the free-frame pool (4 B, every frame of a fresh or lightly copied-back bank).
pub const NAND_BYTES_PER_PAGE: u64 = 5;

/// A device whose tables would not fit in the memory left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// Bytes the tables are estimated to need.
    pub needed: u64,
    /// Bytes this process can still get.
    pub available: u64,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "about {} of RAM, more than the {} this process can still get (MemAvailable + \
             SwapFree, or `ulimit -d` if lower)",
            gib(self.needed),
            gib(self.available)
        )
    }
}

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

/// Bytes this process can still allocate, if known.
pub fn available() -> Option<u64> {
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| from_meminfo(&t));
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| data_limit(&t));
    match (mem, limit) {
        (Some(m), Some(l)) => Some(m.min(l)),
        (m, l) => m.or(l),
    }
}

/// Fails if `needed` bytes are more than [`available`] (never when that is unknown).
pub fn ensure(needed: u64) -> Result<(), Shortfall> {
    match available() {
        Some(available) if needed > available => Err(Shortfall { needed, available }),
        _ => Ok(()),
    }
}

/// `MemAvailable + SwapFree` of a `/proc/meminfo` text, in bytes.
fn from_meminfo(text: &str) -> Option<u64> {
    let kib = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    let avail = kib("MemAvailable")?;
    Some((avail + kib("SwapFree").unwrap_or(0)).saturating_mul(1024))
}

/// The soft "Max data size" of a `/proc/self/limits` text, in bytes (`None` if unlimited).
fn data_limit(text: &str) -> Option<u64> {
    let l = text.lines().find(|l| l.starts_with("Max data size"))?;
    l["Max data size".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo_and_limits() {
        let m = "MemTotal:       24599084 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\nSwapTotal: 0 kB\nSwapFree:        1000000 kB\n";
        assert_eq!(from_meminfo(m), Some(21_000_000 * 1024));
        assert_eq!(from_meminfo("MemTotal: 1 kB\n"), None);
        let l = "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max cpu time              unlimited            unlimited            seconds   \n\
                 Max data size             4096000000           unlimited            bytes     \n";
        assert_eq!(data_limit(l), Some(4_096_000_000));
        let l = "Max data size             unlimited            unlimited            bytes\n";
        assert_eq!(data_limit(l), None);
        // This machine's figure is some positive number.
        assert!(available().is_some_and(|a| a > 0));
        assert!(ensure(u64::MAX).is_err());
        assert!(ensure(0).is_ok());
        let s = Shortfall {
            needed: 10 << 30,
            available: 3 << 29,
        };
        assert!(s
            .to_string()
            .starts_with("about 10.0 GiB of RAM, more than the 1.5 GiB"));
    }
}
