//! NAND operation latencies and the timing mode.
//!
//! The timeline that uses these numbers lives in `device.rs` (it needs the bank and channel
//! locks); this module only holds the parameters and the transfer-time arithmetic.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Latencies of one bank and the speed of a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// Array read (page to the bank's register), before the channel transfer.
    pub t_read: Duration,
    /// Array program, after the channel transfer.
    pub t_prog: Duration,
    /// Block erase.
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
}

/// Saturating conversion of a duration to nanoseconds (u64 covers 584 years).
pub(crate) fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

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
