//! NAND operation latencies and the timing mode.
//!
//! The timeline that uses these numbers lives in `device.rs` (it needs the bank and channel
//! locks); this module only holds the parameters and the transfer-time arithmetic.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::GeometryError;

/// Latencies of one bank and the speed of a channel.
///
/// Serialized (JSON of `ftld presets --json` and `ftld info --json`) with the latencies as
/// numbers of microseconds, `t_read_us` and so on, as the text output shows them.
///
/// `t_read` and `t_prog` are the latencies of a cell's first (LSB) page; a multi-level cell's
/// other pages take [`CellTiming`]'s. Which page of a block is which type: see
/// [`CellTiming::page_type`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// Array read (page to the bank's register), before the channel transfer; of an LSB page.
    #[serde(rename = "t_read_us", with = "micros")]
    pub t_read: Duration,
    /// Array program, after the channel transfer; of an LSB page.
    #[serde(rename = "t_prog_us", with = "micros")]
    pub t_prog: Duration,
    /// Block erase.
    #[serde(rename = "t_erase_us", with = "micros")]
    pub t_erase: Duration,
    /// Channel speed; a transfer of `n` bytes takes `n / channel_bytes_per_sec` seconds.
    /// 0 means transfers take no time.
    pub channel_bytes_per_sec: u64,
    /// Bits per cell and the latencies of the upper page types (SLC unless set; absent in
    /// JSON written before it).
    #[serde(default)]
    pub cell: CellTiming,
    /// Read latency that grows with wear (off unless set).
    #[serde(default)]
    pub read_retry: ReadRetry,
    /// Program/erase suspend for reads (off unless set).
    #[serde(default)]
    pub suspend: Suspend,
}

/// Program/erase suspend (MQSim's model): a read that reaches a bank in the middle of a
/// program's or an erase's array time suspends it (`t_suspend`), senses and transfers its page,
/// and the suspended operation resumes (`t_resume`) and finishes that much later; reads that
/// arrive while it is still suspended run back to back before the resume. Only the bank's last
/// scheduled operation is suspended: a read queued behind other work waits its turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspend {
    /// Whether reads suspend programs and erases.
    pub enabled: bool,
    /// Time from the read's arrival until the array is free for it.
    #[serde(rename = "t_suspend_us", with = "micros", default)]
    pub t_suspend: Duration,
    /// Time the suspended operation needs to resume after the last read.
    #[serde(rename = "t_resume_us", with = "micros", default)]
    pub t_resume: Duration,
}

/// Bits stored per cell: how many pages (page types) share a word line.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum CellType {
    /// 1 bit: every page is an LSB page.
    #[default]
    Slc,
    /// 2 bits: LSB and MSB pages.
    Mlc,
    /// 3 bits: LSB, CSB and MSB pages.
    Tlc,
    /// 4 bits: LSB, CSB, MSB and TSB pages.
    Qlc,
}

impl CellType {
    /// Bits per cell, 1 to 4.
    pub fn bits(self) -> u32 {
        match self {
            CellType::Slc => 1,
            CellType::Mlc => 2,
            CellType::Tlc => 3,
            CellType::Qlc => 4,
        }
    }

    /// The cell type storing `bits` bits per cell (1 to 4).
    pub fn from_bits(bits: u32) -> Option<CellType> {
        Some(match bits {
            1 => CellType::Slc,
            2 => CellType::Mlc,
            3 => CellType::Tlc,
            4 => CellType::Qlc,
            _ => return None,
        })
    }

    /// Names of the page types, LSB first.
    pub fn page_type_names(self) -> &'static [&'static str] {
        match self {
            CellType::Slc => &["LSB"],
            CellType::Mlc => &["LSB", "MSB"],
            CellType::Tlc => &["LSB", "CSB", "MSB"],
            CellType::Qlc => &["LSB", "CSB", "MSB", "TSB"],
        }
    }
}

impl std::fmt::Display for CellType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CellType::Slc => "slc",
            CellType::Mlc => "mlc",
            CellType::Tlc => "tlc",
            CellType::Qlc => "qlc",
        })
    }
}

/// A multi-level cell's page types and their latencies.
///
/// Page-pairing order (MQSim's): page `p` of a block is of type `p % bits`, so a word line's
/// pages are consecutive (LSB, CSB, MSB, ...) and the block's pages cycle through the types.
/// An LSB page takes [`Timing::t_read`] / [`Timing::t_prog`]; page type `k >= 1` takes
/// `t_read_upper[k - 1]` / `t_prog_upper[k - 1]` (entries past `bits - 1` are unused and 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellTiming {
    /// Bits per cell.
    #[serde(rename = "type")]
    pub kind: CellType,
    /// Array read of the CSB/MSB/TSB pages (MLC: `[MSB]`), in microseconds in JSON.
    #[serde(rename = "t_read_upper_us", with = "micros3")]
    pub t_read_upper: [Duration; 3],
    /// Array program of the CSB/MSB/TSB pages.
    #[serde(rename = "t_prog_upper_us", with = "micros3")]
    pub t_prog_upper: [Duration; 3],
}

impl CellTiming {
    /// The type of page `page` of a block: 0 = LSB, up to `bits - 1`.
    pub fn page_type(&self, page: u32) -> u32 {
        page % self.kind.bits()
    }

    /// True when the upper-page latencies past the cell's page types are all zero (what the
    /// image header and the config check).
    pub fn unused_are_zero(&self) -> bool {
        let used = self.kind.bits() as usize - 1;
        self.t_read_upper[used..]
            .iter()
            .chain(&self.t_prog_upper[used..])
            .all(|d| d.is_zero())
    }
}

/// Read-retry as wear grows (FEMU's and real controllers' ECC model): a block that has seen
/// `erase_count` P/E cycles needs `min(erase_count / every_pe_cycles, max_steps)` extra sensing
/// steps per read, each the page's own array read time, before its data decodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRetry {
    /// P/E cycles per extra step; 0 turns read-retry off.
    pub every_pe_cycles: u32,
    /// The most extra steps a read takes.
    pub max_steps: u32,
}

impl ReadRetry {
    /// Extra sensing steps a read of a block erased `erase_count` times takes.
    pub fn steps(&self, erase_count: u32) -> u32 {
        match self.every_pe_cycles {
            0 => 0,
            k => (erase_count / k).min(self.max_steps),
        }
    }
}

/// Most read-retry steps a device may ask for (real parts give up after a few dozen).
pub const MAX_READ_RETRY_STEPS: u32 = 64;

/// Longest latency of one operation the model accepts: a second (real parts take at most tens
/// of milliseconds). It keeps every sum and product of latencies the FTLs compute (a GC step's
/// cost, a response bound, a retried read) far from overflow, whatever an image header says.
pub const MAX_LATENCY: Duration = Duration::from_secs(1);

/// Slowest channel the model accepts (bytes a second), besides 0 (instant).
pub const MIN_CHANNEL_BYTES_PER_SEC: u64 = 1_000_000;

impl Timing {
    /// Checks what the latencies alone cannot get wrong: every latency at most
    /// [`MAX_LATENCY`], a channel of at least [`MIN_CHANNEL_BYTES_PER_SEC`] (or instant), no
    /// upper-page latency past the cell's page types, read-retry steps
    /// within [`MAX_READ_RETRY_STEPS`].
    pub fn validate(&self) -> Result<(), GeometryError> {
        let latencies = [
            ("t_read", self.t_read),
            ("t_prog", self.t_prog),
            ("t_erase", self.t_erase),
            ("t_suspend", self.suspend.t_suspend),
            ("t_resume", self.suspend.t_resume),
        ]
        .into_iter()
        .chain(self.cell.t_read_upper.map(|t| ("t_read (upper page)", t)))
        .chain(self.cell.t_prog_upper.map(|t| ("t_prog (upper page)", t)));
        // 0 is an instant channel; a slow one is bounded like the latencies (a 32 KiB page
        // over 1 MB/s takes 33 ms).
        if (1..MIN_CHANNEL_BYTES_PER_SEC).contains(&self.channel_bytes_per_sec) {
            return Err(GeometryError::ChannelSpeed {
                bytes_per_sec: self.channel_bytes_per_sec,
                min: MIN_CHANNEL_BYTES_PER_SEC,
            });
        }
        for (field, t) in latencies {
            if t > MAX_LATENCY {
                return Err(GeometryError::Latency {
                    field,
                    ns: t.as_nanos(),
                    max_ns: MAX_LATENCY.as_nanos(),
                });
            }
        }
        if !self.cell.unused_are_zero() {
            return Err(GeometryError::Cell {
                reason: format!(
                    "a {} cell has {} page type(s) ({}); latencies of page types past them must \
                     be 0",
                    self.cell.kind,
                    self.cell.kind.bits(),
                    self.cell.kind.page_type_names().join(", ")
                ),
            });
        }
        if self.read_retry.max_steps > MAX_READ_RETRY_STEPS {
            return Err(GeometryError::ReadRetrySteps {
                max_steps: self.read_retry.max_steps,
                max: MAX_READ_RETRY_STEPS,
            });
        }
        Ok(())
    }

    /// Array read time of page `page` of a block erased `erase_count` times: its page type's
    /// read, once more for every read-retry step.
    pub fn read_ns(&self, page: u32, erase_count: u32) -> u64 {
        let one = match self.cell.page_type(page) {
            0 => self.t_read,
            k => self.cell.t_read_upper[k as usize - 1],
        };
        dur_ns(one).saturating_mul(u64::from(self.read_retry.steps(erase_count)) + 1)
    }

    /// Array program time of page `page` of a block.
    pub fn prog_ns(&self, page: u32) -> u64 {
        dur_ns(match self.cell.page_type(page) {
            0 => self.t_prog,
            k => self.cell.t_prog_upper[k as usize - 1],
        })
    }

    /// Array read and program times by page type, LSB first (one entry for SLC).
    pub fn page_type_latencies(&self) -> Vec<(Duration, Duration)> {
        (0..self.cell.kind.bits())
            .map(|k| match k {
                0 => (self.t_read, self.t_prog),
                k => (
                    self.cell.t_read_upper[k as usize - 1],
                    self.cell.t_prog_upper[k as usize - 1],
                ),
            })
            .collect()
    }

    /// "read 56.5/77.5/106 us, program 820.5/2225/5734 us (LSB/CSB/MSB), erase 3000 us,
    /// channel 800 MB/s[, read-retry +1 read per 500 P/E cycles, at most 8]": for `ftld info`.
    pub fn summary(&self) -> String {
        let us = |d: Duration| {
            let x = d.as_secs_f64() * 1e6;
            if (x - x.round()).abs() < 1e-9 {
                format!("{x:.0}")
            } else {
                format!("{x:.1}")
            }
        };
        let lat = self.page_type_latencies();
        let join = |f: &dyn Fn(&(Duration, Duration)) -> Duration| {
            lat.iter().map(|l| us(f(l))).collect::<Vec<_>>().join("/")
        };
        let mut s = format!("read {} us, program {} us", join(&|l| l.0), join(&|l| l.1));
        if lat.len() > 1 {
            s += &format!(
                " ({} {})",
                self.cell.kind.to_string().to_uppercase(),
                self.cell.kind.page_type_names().join("/")
            );
        }
        s += &format!(
            ", erase {} us, channel {} MB/s",
            us(self.t_erase),
            self.channel_bytes_per_sec / 1_000_000
        );
        if self.read_retry.every_pe_cycles > 0 {
            s += &format!(
                ", read-retry +1 read per {} P/E cycles, at most {}",
                self.read_retry.every_pe_cycles, self.read_retry.max_steps
            );
        }
        if self.suspend.enabled {
            s += &format!(
                ", reads suspend programs/erases (suspend {} us, resume {} us)",
                us(self.suspend.t_suspend),
                us(self.suspend.t_resume)
            );
        }
        s
    }

    /// Mean array read and program time over a block's page types (what throughput limits use).
    pub fn mean_read_prog_ns(&self) -> (u64, u64) {
        let bits = self.cell.kind.bits();
        let (r, p) = (0..bits).fold((0, 0), |(r, p), k| {
            (r + self.read_ns(k, 0), p + self.prog_ns(k))
        });
        (r / u64::from(bits), p / u64::from(bits))
    }

    /// Time the channel is busy moving `bytes` bytes, in nanoseconds (rounded up, so a transfer
    /// never appears faster than the bus allows).
    pub fn xfer_ns(&self, bytes: u64) -> u64 {
        if self.channel_bytes_per_sec == 0 {
            return 0;
        }
        let ns =
            (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(self.channel_bytes_per_sec));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Time the channel is busy moving `bytes` bytes.
    pub fn xfer(&self, bytes: u64) -> Duration {
        Duration::from_nanos(self.xfer_ns(bytes))
    }
}

/// Whether operations take their modelled time on the wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TimingMode {
    /// Every operation completes at once (functional tests, maximum speed). No timeline is kept.
    Off,
    /// An operation completes no earlier than its modelled completion time.
    Real,
    /// Simulated time ([`crate::SimClock`]): operations take their modelled time on a clock the
    /// caller drives, nothing sleeps, and a run takes as long as the CPU work. The timeline is
    /// the same as with `real`; only "now" and "wait" differ.
    Virtual,
}

/// As the command line and config files spell it (`off`, `real`, `virtual`), for logs.
impl std::fmt::Display for TimingMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimingMode::Off => "off",
            TimingMode::Real => "real",
            TimingMode::Virtual => "virtual",
        })
    }
}

/// Serde for a `Duration` as a number of microseconds (fractional where it has nanoseconds).
pub mod micros {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if d.subsec_nanos().is_multiple_of(1000) {
            s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        } else {
            s.serialize_f64(d.as_secs_f64() * 1e6)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let us = f64::deserialize(d)?;
        if !(0.0..=1e15).contains(&us) {
            return Err(serde::de::Error::custom(format!(
                "{us} is not a duration in microseconds (0 to 1e15)"
            )));
        }
        Ok(Duration::from_nanos((us * 1000.0).round() as u64))
    }
}

/// Serde for three durations as a list of microseconds.
mod micros3 {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Us(#[serde(with = "super::micros")] Duration);

    pub fn serialize<S: Serializer>(d: &[Duration; 3], s: S) -> Result<S::Ok, S::Error> {
        [Us(d[0]), Us(d[1]), Us(d[2])].serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[Duration; 3], D::Error> {
        let v = Vec::<Us>::deserialize(d)?;
        if v.len() > 3 {
            return Err(serde::de::Error::custom(format!(
                "{} upper-page latencies; at most 3 (CSB, MSB, TSB)",
                v.len()
            )));
        }
        let mut out = [Duration::ZERO; 3];
        for (o, Us(d)) in out.iter_mut().zip(v) {
            *o = d;
        }
        Ok(out)
    }
}

/// Saturating conversion of a duration to nanoseconds (u64 covers 584 years).
pub(crate) fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_latencies_are_microseconds() {
        let t = Timing {
            t_read: Duration::from_micros(25),
            t_prog: Duration::from_nanos(200_500),
            t_erase: Duration::from_millis(2),
            channel_bytes_per_sec: 40_000_000,
            ..Timing::default()
        };
        let v = serde_json::to_value(t).unwrap();
        assert_eq!(v["t_read_us"], 25);
        assert_eq!(v["t_prog_us"], 200.5);
        assert_eq!(v["t_erase_us"], 2000);
        assert_eq!(serde_json::from_value::<Timing>(v.clone()).unwrap(), t);
        assert_eq!(v["cell"]["type"], "slc");
        // JSON written before cell types and read-retry reads as SLC without retry.
        let old = serde_json::json!({"t_read_us": 25, "t_prog_us": 200.5, "t_erase_us": 2000,
            "channel_bytes_per_sec": 40_000_000});
        assert_eq!(serde_json::from_value::<Timing>(old).unwrap(), t);
        let bad = serde_json::json!({"t_read_us": -1, "t_prog_us": 1, "t_erase_us": 1,
            "channel_bytes_per_sec": 1});
        assert!(serde_json::from_value::<Timing>(bad).is_err());
    }

    #[test]
    fn page_types_cycle_and_retry_grows_with_wear() {
        let us = Duration::from_micros;
        let t = Timing {
            t_read: us(40),
            t_prog: us(500),
            cell: CellTiming {
                kind: CellType::Tlc,
                t_read_upper: [us(60), us(80), Duration::ZERO],
                t_prog_upper: [us(2000), us(5000), Duration::ZERO],
            },
            read_retry: ReadRetry {
                every_pe_cycles: 1000,
                max_steps: 3,
            },
            ..Timing::default()
        };
        assert!(t.cell.unused_are_zero());
        let reads: Vec<u64> = (0..6).map(|p| t.read_ns(p, 0) / 1000).collect();
        assert_eq!(reads, [40, 60, 80, 40, 60, 80]);
        let progs: Vec<u64> = (0..4).map(|p| t.prog_ns(p) / 1000).collect();
        assert_eq!(progs, [500, 2000, 5000, 500]);
        assert_eq!(t.read_ns(0, 999), 40_000);
        assert_eq!(t.read_ns(0, 1000), 80_000);
        assert_eq!(t.read_ns(2, 2500), 240_000);
        assert_eq!(t.read_ns(2, 1_000_000), 320_000);
        assert_eq!(t.mean_read_prog_ns(), (60_000, 2_500_000));
        assert_eq!(
            t.summary(),
            "read 40/60/80 us, program 500/2000/5000 us (TLC LSB/CSB/MSB), erase 0 us, channel \
             0 MB/s, read-retry +1 read per 1000 P/E cycles, at most 3"
        );
        let v = serde_json::to_value(t).unwrap();
        assert_eq!(
            v["cell"]["t_prog_upper_us"],
            serde_json::json!([2000, 5000, 0])
        );
        assert_eq!(v["read_retry"]["max_steps"], 3);
        assert_eq!(serde_json::from_value::<Timing>(v).unwrap(), t);
        assert_eq!(CellType::from_bits(4), Some(CellType::Qlc));
        assert_eq!(CellType::from_bits(5), None);
        let slc = Timing::default();
        assert_eq!(slc.cell.page_type(7), 0);
    }

    #[test]
    fn transfer_time_rounds_up() {
        let t = Timing {
            t_read: Duration::ZERO,
            t_prog: Duration::ZERO,
            t_erase: Duration::ZERO,
            channel_bytes_per_sec: 81_920_000,
            ..Timing::default()
        };
        assert_eq!(t.xfer(4096), Duration::from_micros(50));
        assert_eq!(t.xfer_ns(1), 13);
        let free = Timing {
            channel_bytes_per_sec: 0,
            ..t
        };
        assert_eq!(free.xfer_ns(1 << 20), 0);
    }
}
