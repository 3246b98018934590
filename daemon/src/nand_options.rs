//! The `[nand]` table's device settings: what a new image's device gets on top of its preset
//! (cell type and latencies, read-retry, program/erase suspend, planes, endurance), and the
//! check that they agree with an existing image's device.
//!
//! ```toml
//! [nand]
//! cell = "tlc"                      # slc | mlc | tlc | qlc
//! t_read_us = [56.5, 77.5, 106]     # one number, or one per page type (LSB first)
//! t_prog_us = [820.5, 2225, 5734]
//! t_erase_us = 3000
//! channel_mb_s = 800                # channel bandwidth, 10^6 bytes/s
//! endurance = 3000                  # P/E cycles
//! read_retry_every_pe = 500         # one more array read per N P/E cycles (0: off)
//! read_retry_max_steps = 8
//! planes = 2                        # planes per bank
//! suspend = true                    # reads suspend programs and erases
//! t_suspend_us = 20
//! t_resume_us = 20
//! ```

use std::time::Duration;

use nand_model::{CellType, NandConfig, Suspend};
use serde::Deserialize;

use crate::cli::InterconnectKind;

/// `[nand] t_suspend_us` and `t_resume_us` unless set.
const DEFAULT_SUSPEND_US: f64 = 20.0;
/// Largest latency accepted, in microseconds (a second).
const MAX_US: f64 = 1e6;

/// The `[nand]` table as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NandFileConfig {
    pub interconnect: Option<InterconnectKind>,
    pub controllers: Option<u32>,
    pub cell: Option<CellType>,
    pub t_read_us: Option<Latencies>,
    pub t_prog_us: Option<Latencies>,
    pub t_erase_us: Option<f64>,
    pub channel_mb_s: Option<f64>,
    pub endurance: Option<u32>,
    pub read_retry_every_pe: Option<u32>,
    pub read_retry_max_steps: Option<u32>,
    pub planes: Option<u32>,
    pub suspend: Option<bool>,
    pub t_suspend_us: Option<f64>,
    pub t_resume_us: Option<f64>,
}

/// A latency in microseconds, or one per page type.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Latencies {
    One(f64),
    PerPageType(Vec<f64>),
}

fn duration(name: &str, us: f64) -> Result<Duration, String> {
    if !(0.0..=MAX_US).contains(&us) {
        return Err(format!(
            "[nand] {name} must be from 0 to {MAX_US} microseconds, not {us}"
        ));
    }
    Ok(Duration::from_nanos((us * 1000.0).round() as u64))
}

impl NandFileConfig {
    /// True if the table sets anything besides the interconnect (checked on its own).
    pub fn sets_device(&self) -> bool {
        self.cell.is_some()
            || self.t_read_us.is_some()
            || self.t_prog_us.is_some()
            || self.t_erase_us.is_some()
            || self.channel_mb_s.is_some()
            || self.endurance.is_some()
            || self.read_retry_every_pe.is_some()
            || self.read_retry_max_steps.is_some()
            || self.planes.is_some()
            || self.suspend.is_some()
            || self.t_suspend_us.is_some()
            || self.t_resume_us.is_some()
    }

    /// Applies the table's device settings to `c` (a preset's configuration), checking each
    /// against what `c` then is: a list of latencies must have one entry per page type of the
    /// cell, and so on. The message names the key.
    pub fn apply(&self, c: &mut NandConfig) -> Result<(), String> {
        let t = &mut c.timing;
        if let Some(cell) = self.cell {
            if cell != t.cell.kind {
                if cell.bits() > 1 && (self.t_read_us.is_none() || self.t_prog_us.is_none()) {
                    return Err(format!(
                        "[nand] cell = \"{cell}\" changes the page types: give t_read_us and \
                         t_prog_us too ({} entries each: {})",
                        cell.bits(),
                        cell.page_type_names().join(", ")
                    ));
                }
                t.cell.kind = cell;
                t.cell.t_read_upper = [Duration::ZERO; 3];
                t.cell.t_prog_upper = [Duration::ZERO; 3];
            }
        }
        let bits = t.cell.kind.bits() as usize;
        for (name, lat, lsb, upper) in [
            (
                "t_read_us",
                &self.t_read_us,
                &mut t.t_read,
                &mut t.cell.t_read_upper,
            ),
            (
                "t_prog_us",
                &self.t_prog_us,
                &mut t.t_prog,
                &mut t.cell.t_prog_upper,
            ),
        ] {
            let values = match lat {
                None => continue,
                Some(Latencies::One(us)) => vec![*us; bits],
                Some(Latencies::PerPageType(v)) => v.clone(),
            };
            if values.len() != bits {
                return Err(format!(
                    "[nand] {name} has {} entries; a {} cell has {bits} page type(s) ({})",
                    values.len(),
                    t.cell.kind,
                    t.cell.kind.page_type_names().join(", ")
                ));
            }
            *lsb = duration(name, values[0])?;
            for (u, &us) in upper.iter_mut().zip(&values[1..]) {
                *u = duration(name, us)?;
            }
        }
        if let Some(us) = self.t_erase_us {
            t.t_erase = duration("t_erase_us", us)?;
        }
        if let Some(mb) = self.channel_mb_s {
            if !(mb == 0.0 || (1.0..=1e6).contains(&mb)) {
                return Err(format!(
                    "[nand] channel_mb_s must be 0 (instant) or from 1 to 1000000, not {mb}"
                ));
            }
            t.channel_bytes_per_sec = (mb * 1e6).round() as u64;
        }
        if let Some(k) = self.read_retry_every_pe {
            t.read_retry.every_pe_cycles = k;
        }
        if let Some(n) = self.read_retry_max_steps {
            t.read_retry.max_steps = n;
        }
        match (self.suspend, self.t_suspend_us, self.t_resume_us) {
            (None, None, None) => {}
            (Some(true), ts, tr) => {
                t.suspend = Suspend {
                    enabled: true,
                    t_suspend: duration("t_suspend_us", ts.unwrap_or(DEFAULT_SUSPEND_US))?,
                    t_resume: duration("t_resume_us", tr.unwrap_or(DEFAULT_SUSPEND_US))?,
                };
            }
            (Some(false), None, None) => t.suspend = Suspend::default(),
            _ => return Err("[nand] t_suspend_us and t_resume_us need suspend = true".into()),
        }
        t.validate().map_err(|e| format!("[nand]: {e}"))?;
        if let Some(e) = self.endurance {
            if e == 0 {
                return Err("[nand] endurance must be at least 1 P/E cycle".into());
            }
            c.endurance = e;
        }
        if let Some(p) = self.planes {
            c.planes = p;
        }
        c.validate_planes().map_err(|e| format!("[nand] {e}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> NandFileConfig {
        toml::from_str(text).expect("parses")
    }

    fn base() -> NandConfig {
        nand_model::preset("k9-003").expect("preset").config
    }

    #[test]
    fn a_table_turns_a_preset_into_a_tlc_part() {
        let f = parse(
            "cell = \"tlc\"\nt_read_us = [50, 70.5, 90]\nt_prog_us = [500, 1500, 4000]\n\
             t_erase_us = 3500\nchannel_mb_s = 400\nendurance = 3000\nread_retry_every_pe = 100\n\
             read_retry_max_steps = 4\nplanes = 2\nsuspend = true\nt_resume_us = 10\n",
        );
        let mut c = base();
        f.apply(&mut c).expect("applies");
        let t = c.timing;
        assert_eq!(t.cell.kind, CellType::Tlc);
        assert_eq!(t.read_ns(1, 0), 70_500);
        assert_eq!(t.prog_ns(2), 4_000_000);
        assert_eq!(t.t_erase, Duration::from_micros(3500));
        assert_eq!(t.channel_bytes_per_sec, 400_000_000);
        assert_eq!(t.read_retry.steps(250), 2);
        assert_eq!((c.endurance, c.planes), (3000, 2));
        assert!(t.suspend.enabled);
        assert_eq!(t.suspend.t_suspend, Duration::from_micros(20));
        assert_eq!(t.suspend.t_resume, Duration::from_micros(10));
        assert!(f.sets_device());
        assert!(!parse("interconnect = \"pmcd\"").sets_device());
        // One number sets every page type.
        let mut c2 = c;
        parse("t_read_us = 40").apply(&mut c2).expect("applies");
        assert_eq!(c2.timing.read_ns(2, 0), 40_000);
    }

    #[test]
    fn bad_tables_name_the_key() {
        for (text, key) in [
            ("cell = \"qlc\"", "t_read_us and t_prog_us"),
            ("t_read_us = [1, 2]", "t_read_us has 2 entries"),
            ("t_prog_us = -5", "t_prog_us"),
            ("t_erase_us = 1e9", "t_erase_us"),
            ("channel_mb_s = -1", "channel_mb_s"),
            ("t_suspend_us = 5", "need suspend = true"),
            ("suspend = false\nt_resume_us = 5", "need suspend = true"),
            ("read_retry_max_steps = 1000", "read_retry"),
            ("planes = 0", "planes"),
            ("endurance = 0", "endurance"),
        ] {
            let e = parse(text).apply(&mut base()).expect_err(text);
            assert!(e.contains(key), "{text}: {e}");
        }
        assert!(toml::from_str::<NandFileConfig>("cell = \"plc\"").is_err());
        assert!(toml::from_str::<NandFileConfig>("t_read = 3").is_err());
    }
}
