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

/// The controllers' timelines: `free_at` of each (internal clock ns), grouped in pools a bank
/// may use (TMCD: one pool of one controller per channel; PMCD: one pool of all of them).
/// A pool's mutex is taken briefly inside a bank lock, never the other way round.
pub(crate) struct Controllers {
    pools: Vec<Mutex<Vec<u64>>>,
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
                .map(|_| Mutex::new(vec![0; per_pool as usize]))
                .collect(),
            banks_per_channel: g.banks_per_channel.max(1),
            shared,
        }
    }

    /// Schedules a transfer of `ns` nanoseconds for `bank`, starting no earlier than
    /// `earliest`, on the controller of its pool that can start it first (the lowest index
    /// among equals, so a run is reproducible). Returns (start, end).
    pub(crate) fn transfer(&self, bank: BankId, earliest: u64, ns: u64) -> (u64, u64) {
        let pool = if self.shared {
            0
        } else {
            (bank.0 / self.banks_per_channel) as usize
        };
        // Bank ids come validated from the device, so the pool exists.
        let mut free = self.pools[pool].lock();
        let (i, start) = free
            .iter()
            .enumerate()
            .map(|(i, f)| (i, earliest.max(*f)))
            .min_by_key(|&(i, start)| (start, i))
            .unwrap_or((0, earliest));
        let end = start.saturating_add(ns);
        if let Some(f) = free.get_mut(i) {
            *f = end;
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
        assert_eq!(c.transfer(BankId(0), 100, 50), (100, 150));
        // Bank 1 shares channel 0: it waits.
        assert_eq!(c.transfer(BankId(1), 100, 50), (150, 200));
        // Bank 2 is on channel 1: in parallel.
        assert_eq!(c.transfer(BankId(2), 100, 50), (100, 150));
    }

    #[test]
    fn pmcd_uses_any_free_controller() {
        let c = Controllers::new(&geometry(), Interconnect::Pmcd { controllers: 2 });
        assert_eq!(c.transfer(BankId(0), 100, 50), (100, 150));
        // Same channel, but the second controller is free.
        assert_eq!(c.transfer(BankId(1), 100, 50), (100, 150));
        // Both busy until 150: the third transfer waits, whatever its bank.
        assert_eq!(c.transfer(BankId(3), 100, 50), (150, 200));
        let one = Controllers::new(&geometry(), Interconnect::Pmcd { controllers: 1 });
        one.transfer(BankId(0), 0, 10);
        assert_eq!(one.transfer(BankId(3), 0, 10), (10, 20));
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
