//! Which bank a hybrid scheme's new block goes to: the thesis's allocation of data and log
//! blocks for multi-controller SSDs (paper 003 ch. 4), or everything of a logical block on one
//! bank.
//!
//! - `same`: a logical block's log block and its merge destinations sit on the bank of its
//!   data block; logical blocks are dealt to banks in bank order (`lbn % banks`). A merge then
//!   reads, programs and erases through one bank and one controller.
//! - `spread` (the thesis's method): consecutive logical blocks go to different channels first
//!   (block striping over the buses, so the sub-requests of a large write run in parallel); a
//!   log block goes where its data block's controller is not needed — another channel under
//!   TMCD, another bank under PMCD (where any controller reaches any bank) — and a full merge
//!   writes its new block away from both, so its reads from the data and log blocks and its
//!   programs overlap (thesis Fig. 11, 12).
//!
//! These are preferences: the allocator falls back to the bank with the most free blocks when
//! the preferred one has none.

use nand_model::{Geometry, Interconnect};
use serde::{Deserialize, Serialize};

/// `[ftl] log_placement`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogPlacement {
    /// Log blocks and merge destinations on their data block's bank.
    Same,
    /// Log blocks and merge destinations away from their data block's channel (TMCD) or bank
    /// (PMCD); logical blocks striped over channels.
    #[default]
    Spread,
}

impl LogPlacement {
    pub const ALL: [LogPlacement; 2] = [LogPlacement::Same, LogPlacement::Spread];

    pub fn name(self) -> &'static str {
        match self {
            LogPlacement::Same => "same",
            LogPlacement::Spread => "spread",
        }
    }
}

impl std::fmt::Display for LogPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for LogPlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        LogPlacement::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown log placement {s:?} (expected same or spread)"))
    }
}

/// The bank choices of one device.
#[derive(Clone, Copy, Debug)]
pub struct BankPlan {
    placement: LogPlacement,
    channels: u32,
    per_channel: u32,
    /// PMCD: any controller reaches any bank, so "away" means another bank, not another bus.
    any_controller: bool,
}

impl BankPlan {
    pub fn new(placement: LogPlacement, g: &Geometry, interconnect: Interconnect) -> BankPlan {
        BankPlan {
            placement,
            channels: g.channels.max(1),
            per_channel: g.banks_per_channel.max(1),
            any_controller: matches!(interconnect, Interconnect::Pmcd { .. }),
        }
    }

    /// The policy.
    pub fn placement(&self) -> LogPlacement {
        self.placement
    }

    fn banks(&self) -> u32 {
        self.channels * self.per_channel
    }

    fn channel(&self, bank: u32) -> u32 {
        bank / self.per_channel
    }

    /// The bank of a logical block that has no block yet.
    pub fn home(&self, lbn: u32) -> u32 {
        match self.placement {
            LogPlacement::Same => lbn % self.banks(),
            LogPlacement::Spread => {
                crate::layout::channel_first_bank(lbn, self.channels, self.per_channel)
            }
        }
    }

    /// Whether work on `a` and on `b` can overlap as far as the device allows: different
    /// controllers (another channel under TMCD, another bank under PMCD), or on a one-channel
    /// TMCD device, with a single controller, at least different banks (their array times
    /// overlap).
    fn apart(&self, a: u32, b: u32) -> bool {
        if self.any_controller || self.channels == 1 {
            a != b
        } else {
            self.channel(a) != self.channel(b)
        }
    }

    /// The first bank after `from` (in channel-striped order) that is apart from every bank
    /// in `avoid`; `from` itself when there is none.
    fn next_apart(&self, from: u32, avoid: &[u32]) -> u32 {
        let banks = self.banks();
        // Walk channel-first from `from`'s position, so successive choices spread over buses.
        let pos = (0..banks).find(|&i| self.home(i) == from).unwrap_or(0);
        (1..=banks)
            .map(|k| self.home(pos + k))
            .find(|&b| avoid.iter().all(|&a| self.apart(a, b)))
            .unwrap_or(from)
    }

    /// The bank of a new log block for a logical block whose data block is on `data` (or
    /// which has none: `home`).
    pub fn log_bank(&self, data: Option<u32>, home: u32) -> u32 {
        match (self.placement, data) {
            (LogPlacement::Same, d) => d.unwrap_or(home),
            (LogPlacement::Spread, Some(d)) => self.next_apart(d, &[d]),
            (LogPlacement::Spread, None) => home,
        }
    }

    /// The bank of a full merge's new data block, when the old data block is on `data` and the
    /// pages to copy are on `sources` (data block first, then log blocks).
    pub fn merge_bank(&self, data: Option<u32>, sources: &[u32], home: u32) -> u32 {
        match self.placement {
            LogPlacement::Same => data.unwrap_or(home),
            LogPlacement::Spread => {
                let Some(&first) = sources.first() else {
                    return home;
                };
                // Away from every source if the device has room for that, else from as many
                // of the first ones as it can.
                (1..=sources.len())
                    .rev()
                    .map(|n| self.next_apart(first, &sources[..n]))
                    .find(|&b| sources[..1].iter().all(|&a| self.apart(a, b)))
                    .unwrap_or(first)
            }
        }
    }

    /// The bank of the `n`-th random-write log block (FAST), whose pages belong to any
    /// logical block.
    pub fn random_log_bank(&self, n: u32) -> u32 {
        match self.placement {
            LogPlacement::Same => n % self.banks(),
            // Successive random logs on successive channels.
            LogPlacement::Spread => self.home(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(channels: u32, per_channel: u32) -> Geometry {
        Geometry {
            channels,
            banks_per_channel: per_channel,
            blocks_per_bank: 16,
            pages_per_block: 8,
            page_size: 4096,
            oob_size: 128,
        }
    }

    #[test]
    fn spread_stripes_logical_blocks_over_channels() {
        let p = BankPlan::new(LogPlacement::Spread, &g(4, 2), Interconnect::Tmcd);
        // Banks 0,1 on channel 0; 2,3 on 1; ...
        let homes: Vec<u32> = (0..8).map(|l| p.home(l)).collect();
        assert_eq!(homes, [0, 2, 4, 6, 1, 3, 5, 7]);
        let same = BankPlan::new(LogPlacement::Same, &g(4, 2), Interconnect::Tmcd);
        assert_eq!(
            (0..4).map(|l| same.home(l)).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
    }

    #[test]
    fn spread_keeps_logs_and_merges_away_from_their_data() {
        for (geo, ic) in [
            (g(4, 2), Interconnect::Tmcd),
            (g(4, 2), Interconnect::Pmcd { controllers: 4 }),
            (g(2, 4), Interconnect::Tmcd),
            (g(1, 4), Interconnect::Tmcd),
        ] {
            let p = BankPlan::new(LogPlacement::Spread, &geo, ic);
            let banks = geo.banks();
            for d in 0..banks {
                let l = p.log_bank(Some(d), 0);
                assert!(
                    l < banks && p.apart(d, l),
                    "{geo:?} {ic:?}: data {d}, log {l}"
                );
                let m = p.merge_bank(Some(d), &[d, l], 0);
                assert!(
                    m < banks && p.apart(d, m) && (p.apart(l, m) || !has_third(&p, d, l)),
                    "{geo:?} {ic:?}: data {d}, log {l}, merge {m}"
                );
                if !matches!(ic, Interconnect::Pmcd { .. }) && geo.channels > 1 {
                    assert_ne!(d / geo.banks_per_channel, l / geo.banks_per_channel);
                }
            }
        }
        let same = BankPlan::new(LogPlacement::Same, &g(4, 2), Interconnect::Tmcd);
        assert_eq!(same.log_bank(Some(5), 0), 5);
        assert_eq!(same.merge_bank(Some(5), &[5, 2], 0), 5);
    }

    fn has_third(p: &BankPlan, a: u32, b: u32) -> bool {
        (0..p.banks()).any(|x| p.apart(a, x) && p.apart(b, x))
    }
}
