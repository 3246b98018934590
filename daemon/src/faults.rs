//! The `[faults]` table: random medium faults, armed on the NAND device of `ftld serve` and
//! `ftld replay`, to measure how an FTL lives with a failing medium (bad-block retirement,
//! read retries, spare blocks running out).
//!
//! ```toml
//! [faults]
//! program = 1e-4   # probability that a program fails (the block is retired)
//! erase = 1e-3     # probability that an erase fails (the block is marked bad)
//! read = 1e-3      # probability that a read is uncorrectable (its retry succeeds)
//! seed = 7         # the faults' seed, 0 to 2^63 - 1 (a TOML integer) [default: 1]
//! ```
//!
//! Each probability applies to every operation of its kind (`nand_model::FaultRates`); an
//! uncorrectable read models a read that needs a retry, so with `[ftl] read_retries = 0` it
//! reaches the host as an I/O error. `ftld serve` arms them before the open reads anything, so
//! the open's own reads (superblock, checkpoints, recovery's scan) meet them too; `ftld replay`
//! after preconditioning, so the aged state is the same with or without them, and from then on
//! everything meets them: the replayed requests, GC, and the close's checkpoint (with
//! `--image`, blocks gone bad stay bad in the image). A program or an erase fails by a draw
//! from the seed, its address and its block's erase count, whichever thread issues it and
//! whenever (`nand_model::faults`): the same seed fails the same blocks at the same cycles
//! from run to run, in any timing mode; in virtual time it gives the same faults. `ftld format` arms none. `ftld stats` counts what fired under `nand.injected`;
//! a replay's summary under `nand`.

use nand_model::{FaultRates, NandDevice};
use serde::{Deserialize, Serialize};

use crate::UsageError;

/// The `[faults]` table as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsFileConfig {
    pub program: Option<f64>,
    pub erase: Option<f64>,
    pub read: Option<f64>,
    pub seed: Option<u64>,
}

/// Random faults to arm: each probability, and their seed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FaultPlan {
    pub rates: FaultRates,
    pub seed: u64,
}

impl FaultsFileConfig {
    /// The plan the table asks for (`None`: every probability 0), or why it is refused;
    /// `origin` names the file in messages.
    pub fn resolve(&self, origin: &str) -> Result<Option<FaultPlan>, UsageError> {
        let rate = |name: &str, v: Option<f64>| match v {
            None => Ok(0.0),
            Some(p) if (0.0..=1.0).contains(&p) => Ok(p),
            Some(p) => Err(UsageError(format!(
                "{origin}: [faults] {name} is a probability from 0 to 1, not {p}"
            ))),
        };
        let rates = FaultRates {
            program: rate("program", self.program)?,
            erase: rate("erase", self.erase)?,
            read: rate("read", self.read)?,
        };
        if rates == FaultRates::default() {
            return Ok(None);
        }
        Ok(Some(FaultPlan {
            rates,
            seed: self.seed.unwrap_or(1),
        }))
    }
}

impl FaultPlan {
    /// Arms the faults on `nand` from now on.
    pub fn arm(&self, nand: &NandDevice) {
        nand.faults().set_random(self.rates, self.seed);
        tracing::info!(
            program = self.rates.program,
            erase = self.rates.erase,
            read = self.rates.read,
            seed = self.seed,
            "random medium faults armed ([faults])"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_are_checked_and_zero_arms_nothing() {
        let t = |s: &str| toml::from_str::<FaultsFileConfig>(s).expect("parses");
        assert_eq!(t("").resolve("f").ok(), Some(None));
        assert_eq!(t("read = 0.0\nseed = 3").resolve("f").ok(), Some(None));
        let p = t("read = 0.5\nprogram = 1e-4").resolve("f").ok().flatten();
        assert_eq!(
            p,
            Some(FaultPlan {
                rates: FaultRates {
                    program: 1e-4,
                    erase: 0.0,
                    read: 0.5
                },
                seed: 1
            })
        );
        for bad in ["read = 1.5", "erase = -0.1", "program = nan"] {
            let e = t(bad).resolve("config file x.toml").expect_err(bad);
            assert!(e.0.contains("x.toml: [faults]"), "{e:?}");
        }
        assert!(toml::from_str::<FaultsFileConfig>("reads = 0.1").is_err());
    }
}
