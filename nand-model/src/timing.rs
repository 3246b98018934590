//! NAND operation latencies and the timing mode.
//!
//! The timeline that uses these numbers lives in `device.rs` (it needs the bank and channel
//! locks); this module only holds the parameters and the transfer-time arithmetic.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Latencies of one bank and the speed of a channel.
///
/// Serialized (JSON of `ftld presets --json` and `ftld info --json`) with the latencies as
/// numbers of microseconds, `t_read_us` and so on, as the text output shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// Array read (page to the bank's register), before the channel transfer.
    #[serde(rename = "t_read_us", with = "micros")]
    pub t_read: Duration,
    /// Array program, after the channel transfer.
    #[serde(rename = "t_prog_us", with = "micros")]
    pub t_prog: Duration,
    /// Block erase.
    #[serde(rename = "t_erase_us", with = "micros")]
    pub t_erase: Duration,
    /// Channel speed; a transfer of `n` bytes takes `n / channel_bytes_per_sec` seconds.
    /// 0 means transfers take no time.
    pub channel_bytes_per_sec: u64,
}

impl Timing {
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
        };
        let v = serde_json::to_value(t).unwrap();
        assert_eq!(v["t_read_us"], 25);
        assert_eq!(v["t_prog_us"], 200.5);
        assert_eq!(v["t_erase_us"], 2000);
        assert_eq!(serde_json::from_value::<Timing>(v).unwrap(), t);
        let bad = serde_json::json!({"t_read_us": -1, "t_prog_us": 1, "t_erase_us": 1,
            "channel_bytes_per_sec": 1});
        assert!(serde_json::from_value::<Timing>(bad).is_err());
    }

    #[test]
    fn transfer_time_rounds_up() {
        let t = Timing {
            t_read: Duration::ZERO,
            t_prog: Duration::ZERO,
            t_erase: Duration::ZERO,
            channel_bytes_per_sec: 81_920_000,
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
