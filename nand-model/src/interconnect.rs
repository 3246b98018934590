//! How controllers reach banks: the thesis's two multi-controller designs (paper 003 ch. 2,
//! Fig. 2), and the controller timelines the timing model schedules transfers on.
//!
//! - **TMCD** (traditional): a controller per channel; it reaches only the banks on its own
//!   bus. This is the classic channel model: a channel carries one transfer at a time.
//! - **PMCD** (parallel): `controllers` controllers, any of which reaches any bank; a transfer
//!   takes whichever controller frees up first.
//!
//! A controller is busy while data moves between it and a bank (the transfer of a read, a
//! program, or a copyback's OOB read-out); array time (t_read, t_prog, t_erase) runs inside the
//! bank and needs no controller, so several banks behind one controller still overlap their
//! array work, as dies on one bus do. Under TMCD this is exactly the channel model; under PMCD
//! the buses no longer constrain anything, the controller count does.
//!
//! A controller's timeline is a list of busy intervals, not one "free at" time: a transfer
//! takes the first gap at or after the time its data is ready that is long enough. With a
//! single "free at" time transfers would be served in submission order, so a bank whose data
//! was sensed early waits behind a transfer submitted before it whose data is not ready yet,
//! leaving the bus idle in between: at QD128 random 4 KiB reads on `board-000` that model
//! reached 42 % of the channel/bank limit in virtual time. A real controller (and NVMeVirt's
//! channel model, which fills free bandwidth in time slots) moves whichever data is ready.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::GeometryError;
use crate::geometry::{BankId, Geometry};

/// Most controllers a PMCD device may have (more than any bank count worth emulating).
pub const MAX_CONTROLLERS: u32 = 1024;

/// The interconnect between controllers and banks.
///
/// JSON: `{"kind": "tmcd"}` or `{"kind": "pmcd", "controllers": 4}`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Interconnect {
    /// A controller per channel, reaching only its channel's banks (today's SSDs).
    #[default]
    Tmcd,
    /// `controllers` controllers, each reaching every bank.
    Pmcd {
        /// Number of controllers (1 to [`MAX_CONTROLLERS`]).
        controllers: u32,
    },
}

impl Interconnect {
    /// Checks the controller count.
    pub fn validate(&self) -> Result<(), GeometryError> {
        match *self {
            Interconnect::Tmcd => Ok(()),
            Interconnect::Pmcd { controllers } => {
                if (1..=MAX_CONTROLLERS).contains(&controllers) {
                    Ok(())
                } else {
                    Err(GeometryError::Controllers {
                        controllers,
                        max: MAX_CONTROLLERS,
                    })
                }
            }
        }
    }
}

impl std::fmt::Display for Interconnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interconnect::Tmcd => f.write_str("tmcd (a controller per channel)"),
            Interconnect::Pmcd { controllers } => {
                write!(f, "pmcd ({controllers} controllers, any reaches any bank)")
            }
        }
    }
}

/// Busy intervals kept per controller before the oldest are folded into its floor.
const MAX_INTERVALS: usize = 256;

/// One controller's timeline: disjoint busy intervals `[start, end)` in time order, and a
/// floor before which it counts as busy (where intervals that were pruned or folded away
/// ended: a transfer never goes back into time the list no longer describes).
#[derive(Default)]
struct Controller {
    floor: u64,
    busy: std::collections::VecDeque<(u64, u64)>,
}

impl Controller {
    /// Where a transfer of `ns` that may start at `earliest` fits: (start, index to insert).
    fn fit(&self, earliest: u64, ns: u64) -> (u64, usize) {
        let mut t = earliest.max(self.floor);
        // Intervals ending at or before `t` cannot be in the way.
        let mut i = self.busy.partition_point(|&(_, end)| end <= t);
        while let Some(&(start, end)) = self.busy.get(i) {
            if t.saturating_add(ns) <= start {
                break;
            }
            t = t.max(end);
            i += 1;
        }
        (t, i)
    }

    fn insert(&mut self, at: usize, start: u64, end: u64, now: u64) {
        if end > start {
            self.busy.insert(at, (start, end));
        }
        // Drop what is over (the clock only moves on with timing real; a virtual-time actor
        // acting earlier than this is held at the floor, as the old single "free at" held it).
        while let Some(&(_, e)) = self.busy.front() {
            if e > now && self.busy.len() <= MAX_INTERVALS {
                break;
            }
            self.floor = self.floor.max(e);
            self.busy.pop_front();
        }
    }
}

/// The controllers' timelines, grouped in pools a bank may use (TMCD: one pool of one
/// controller per channel; PMCD: one pool of all of them). A pool's mutex is taken briefly
/// inside a bank lock, never the other way round.
pub(crate) struct Controllers {
    pools: Vec<Mutex<Vec<Controller>>>,
    /// Banks per channel, to find a TMCD bank's pool.
    banks_per_channel: u32,
    shared: bool,
}

impl Controllers {
    pub(crate) fn new(g: &Geometry, interconnect: Interconnect) -> Controllers {
        let (pools, per_pool, shared) = match interconnect {
            Interconnect::Tmcd => (g.channels, 1, false),
            Interconnect::Pmcd { controllers } => (1, controllers.max(1), true),
        };
        Controllers {
            pools: (0..pools)
                .map(|_| Mutex::new((0..per_pool).map(|_| Controller::default()).collect()))
                .collect(),
            banks_per_channel: g.banks_per_channel.max(1),
            shared,
        }
    }

    /// Schedules a transfer of `ns` nanoseconds for `bank`, starting no earlier than
    /// `earliest`, in the first long-enough gap of the controller of its pool that can start
    /// it first (the lowest index among equals, so a run is reproducible). `now` is the
    /// timeline's present: intervals that ended before it are forgotten. Returns (start, end).
    pub(crate) fn transfer(&self, bank: BankId, earliest: u64, ns: u64, now: u64) -> (u64, u64) {
        let pool = if self.shared {
            0
        } else {
            (bank.0 / self.banks_per_channel) as usize
        };
        // Bank ids come validated from the device, so the pool exists.
        let mut ctrls = self.pools[pool].lock();
        let best = ctrls
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.fit(earliest, ns)))
            .min_by_key(|&(i, (start, _))| (start, i));
        let Some((i, (start, at))) = best else {
            return (earliest, earliest.saturating_add(ns));
        };
        let end = start.saturating_add(ns);
        if let Some(c) = ctrls.get_mut(i) {
            c.insert(at, start, end, now);
        }
        (start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            channels: 2,
            banks_per_channel: 2,
            blocks_per_bank: 8,
            pages_per_block: 4,
            page_size: 4096,
            oob_size: 128,
        }
    }

    #[test]
    fn tmcd_serialises_banks_of_a_channel_only() {
        let c = Controllers::new(&geometry(), Interconnect::Tmcd);
        assert_eq!(c.transfer(BankId(0), 100, 50, 0), (100, 150));
        // Bank 1 shares channel 0: it waits.
        assert_eq!(c.transfer(BankId(1), 100, 50, 0), (150, 200));
        // Bank 2 is on channel 1: in parallel.
        assert_eq!(c.transfer(BankId(2), 100, 50, 0), (100, 150));
    }

    #[test]
    fn a_transfer_takes_the_first_gap_that_fits() {
        let c = Controllers::new(&geometry(), Interconnect::Tmcd);
        // Bank 0's data is ready at 100, bank 1's (submitted next) only at 300.
        assert_eq!(c.transfer(BankId(0), 100, 50, 0), (100, 150));
        assert_eq!(c.transfer(BankId(1), 300, 50, 0), (300, 350));
        // Ready at 120: fits between them instead of waiting for 350.
        assert_eq!(c.transfer(BankId(0), 120, 100, 0), (150, 250));
        // 60 long at 200: the gap 250..300 is too short, so after 350.
        assert_eq!(c.transfer(BankId(1), 200, 60, 0), (350, 410));
        // 50 long at 210 fits 250..300 exactly; at 0 it fits before everything.
        assert_eq!(c.transfer(BankId(1), 210, 50, 0), (250, 300));
        assert_eq!(c.transfer(BankId(0), 0, 50, 0), (0, 50));
        // Once the clock passed 400, everything that ended before is forgotten and the floor
        // holds: nothing is placed back into forgotten time.
        assert_eq!(c.transfer(BankId(1), 400, 10, 400), (410, 420));
        assert_eq!(c.transfer(BankId(1), 0, 10, 400), (420, 430));
    }

    #[test]
    fn a_long_timeline_folds_into_the_floor() {
        let one = Controllers::new(&geometry(), Interconnect::Tmcd);
        // Gaps of 10 between 10-long transfers, far more than the list keeps.
        for k in 0..(MAX_INTERVALS as u64 + 50) {
            assert_eq!(
                one.transfer(BankId(0), 20 * k, 10, 0),
                (20 * k, 20 * k + 10)
            );
        }
        // The oldest gaps are gone: a transfer that would fit there starts at the floor or later.
        let (start, _) = one.transfer(BankId(0), 0, 10, 0);
        assert!(start >= 20 * 49 + 10, "{start}");
    }

    #[test]
    fn pmcd_uses_any_free_controller() {
        let c = Controllers::new(&geometry(), Interconnect::Pmcd { controllers: 2 });
        assert_eq!(c.transfer(BankId(0), 100, 50, 0), (100, 150));
        // Same channel, but the second controller is free.
        assert_eq!(c.transfer(BankId(1), 100, 50, 0), (100, 150));
        // Both busy until 150: the third transfer waits, whatever its bank.
        assert_eq!(c.transfer(BankId(3), 100, 50, 0), (150, 200));
        let one = Controllers::new(&geometry(), Interconnect::Pmcd { controllers: 1 });
        one.transfer(BankId(0), 0, 10, 0);
        assert_eq!(one.transfer(BankId(3), 0, 10, 0), (10, 20));
    }

    #[test]
    fn validation() {
        for i in [
            Interconnect::Tmcd,
            Interconnect::Pmcd { controllers: 1 },
            Interconnect::Pmcd { controllers: 4 },
        ] {
            assert_eq!(i.validate(), Ok(()));
        }
        assert!(Interconnect::Pmcd {
            controllers: MAX_CONTROLLERS + 1
        }
        .validate()
        .is_err());
        let v = serde_json::to_value(Interconnect::Pmcd { controllers: 4 }).unwrap();
        assert_eq!(v, serde_json::json!({"kind": "pmcd", "controllers": 4}));
    }
}
