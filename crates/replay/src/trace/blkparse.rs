//! blkparse's default text output: `MAJ,MIN CPU SEQ TIME PID ACTION RWBS SECTOR + COUNT [PROC]`.
//! Only `D` (issued to the device) events become requests; other actions are skipped, and so
//! is the summary blkparse prints at the end (events after it, of captures concatenated, are
//! read on).

use super::{parse_decimal_ns, parse_u64, DeviceRef, Parsed};
use crate::request::{Op, Request};

#[derive(Default)]
pub(super) struct State {
    /// `Q` events seen (for the hint when a trace has no `D` events).
    pub queued: u64,
    /// A closing summary was reached (its lines are skipped).
    pub summary: bool,
}

/// Whether `line` has the shape of an event line (used to guess the format).
pub(super) fn is_event(line: &str) -> bool {
    let f: Vec<&str> = line.split_whitespace().collect();
    f.len() >= 7
        && f[0]
            .split_once(',')
            .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok())
        && f[1].parse::<u32>().is_ok()
        && f[2].parse::<u64>().is_ok()
        && parse_decimal_ns(f[3], 1_000_000_000, "time").is_ok()
}

impl State {
    /// The line's requests, and the device of an event line.
    pub(super) fn parse<'a>(
        &mut self,
        line: &'a str,
    ) -> Result<(Parsed, Option<DeviceRef<'a>>), String> {
        let t = line.trim_start();
        if t.starts_with("CPU") || t.starts_with("Total") {
            self.summary = true;
            return Ok((Parsed::Skip, None));
        }
        if !is_event(line) {
            // The summary's own lines (indented counts, `Throughput`, `Events`, `Skips`);
            // events after it (captures concatenated) are read on, and anything else is as
            // wrong there as anywhere.
            let summary_line = line.starts_with(char::is_whitespace)
                || ["Throughput", "Events", "Skips"]
                    .iter()
                    .any(|k| t.starts_with(k));
            if self.summary && summary_line {
                return Ok((Parsed::Skip, None));
            }
            return Err(
                "not a blkparse event line (MAJ,MIN CPU SEQ TIME PID ACTION RWBS ...)".into(),
            );
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        // `is_event` checked the comma.
        let device = f[0]
            .split_once(',')
            .map(|(maj, min)| DeviceRef(maj, Some(min)));
        let action = f[5];
        if action == "Q" {
            self.queued += 1;
        }
        if action != "D" {
            return Ok((Parsed::Skip, device));
        }
        let at = parse_decimal_ns(f[3], 1_000_000_000, "time")?;
        let rwbs = f[6];
        let preflush = rwbs.starts_with('F');
        let rest = rwbs.trim_start_matches('F');
        let op = match rest.chars().next() {
            Some('R') => Some(Op::Read),
            Some('W') => Some(Op::Write),
            Some('D') => Some(Op::Trim),
            // `N`: no data (a pure flush when preflush is set).
            Some('N') | None => None,
            Some(c) => return Err(format!("RWBS {rwbs:?}: unknown operation {c:?}")),
        };
        let fua = rest.len() > 1 && rest[1..].contains('F');
        let ranged = f.len() >= 10 && f[8] == "+";
        // blkparse prints `SECTOR + COUNT`, nothing for a request without sectors (the
        // process name in brackets follows), or `BYTES (CDB)` for a SCSI passthrough command
        // (sg_inq, smartctl: not a read or write of the medium, skipped): a number with
        // neither after it is a damaged line, not a request of no data.
        let passthrough = f.get(8).is_some_and(|w| w.starts_with('('));
        if !ranged && !passthrough && f.get(7).is_some_and(|w| w.parse::<u64>().is_ok()) {
            return Err(format!(
                "sector {} without `+ COUNT` (blkparse prints `SECTOR + COUNT`)",
                f[7]
            ));
        }
        let (sector, count) = if ranged {
            (parse_u64(f[7], "sector")?, parse_u64(f[9], "sector count")?)
        } else {
            (0, 0)
        };
        let flush = Request::new(at, Op::Flush, 0, 0);
        let bytes = |n: u64, field: &str| {
            n.checked_mul(512)
                .ok_or_else(|| format!("{field} {n}: past 2^64 bytes"))
        };
        // Only a request with data has a meaningful sector (a flush's may be printed as
        // 2^64 - 1, an unset sector). A read, write or discard of 0 sectors without a
        // preflush is kept: the replay counts it as empty, as in the other formats (with a
        // preflush it is how some kernels print a pure flush).
        let data = match op.filter(|_| count > 0 || (ranged && !preflush)) {
            Some(op) => {
                // A request of no sectors names no sector either (it may be printed unset).
                let offset = if count == 0 {
                    0
                } else {
                    bytes(sector, "sector")?
                };
                let mut r = Request::new(at, op, offset, bytes(count, "sector count")?);
                // `is_event` checked the CPU column.
                r.queue = f[1].parse().ok();
                // NBD and the block layer allow FUA on discards too (a recorded `DF`).
                r.fua = fua && matches!(op, Op::Write | Op::Trim);
                Some(r)
            }
            None => None,
        };
        let parsed = match (preflush, data) {
            (true, Some(d)) => Parsed::Two(flush, d),
            (true, None) => Parsed::One(flush),
            (false, Some(d)) => Parsed::One(d),
            (false, None) => Parsed::Skip,
        };
        Ok((parsed, device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &mut State, l: &str) -> Request {
        match s.parse(l).unwrap().0 {
            Parsed::One(r) => r,
            _ => panic!("not one request: {l}"),
        }
    }

    #[test]
    fn lines() {
        let mut s = State::default();
        assert!(matches!(
            s.parse("  8,0    3        1     0.000000000  697  Q  WS 3417048 + 8 [kjournald]"),
            Ok((Parsed::Skip, Some(DeviceRef("8", Some("0")))))
        ));
        let r = one(
            &mut s,
            "  8,0    3        2     0.000002500  697  D  WS 3417048 + 8 [kjournald]",
        );
        assert_eq!(
            (r.op, r.offset, r.len, r.fua),
            (Op::Write, 3_417_048 * 512, 4096, false)
        );
        assert_eq!(r.arrival, crate::request::Arrival::At(2500));
        // The CPU column (`ftld serve --record`: the write queue).
        assert_eq!(r.queue, Some(3));
        let r = one(&mut s, "  8,0    0        3     1.5  1  D  WFS 8 + 8 [x]");
        assert!(r.fua);
        assert!(matches!(
            s.parse("  8,16 0 4 2.0 1 D FWS 16 + 8 [x]"),
            Ok((Parsed::Two(..), Some(DeviceRef("8", Some("16")))))
        ));
        let r = one(&mut s, "  8,0 0 5 2.0 1 D FN [x]");
        assert_eq!(r.op, Op::Flush);
        // A flush's sector is meaningless (printed as -1 by some tools): not checked.
        let r = one(&mut s, "  8,0 0 5 2.0 1 D FN 18446744073709551615 + 0 [x]");
        assert_eq!(r.op, Op::Flush);
        assert_eq!(one(&mut s, "  8,0 0 6 2.0 1 D DS 64 + 64 [x]").op, Op::Trim);
        // A passthrough command (`BYTES (CDB)`) moves nothing on the medium: skipped.
        assert!(matches!(
            s.parse("  8,0 0 7 2.0 1 D R 36 (12 00 00 00 24 00) [sg_inq]"),
            Ok((Parsed::Skip, _))
        ));
        // A sector without `+ COUNT` is a damaged line, not a request of no data.
        for l in [
            "  8,0 0 6 2.0 1 D W 64 8 [x]",
            "  8,0 0 6 2.0 1 D W 64",
            "8,0 0 6 2.0 1 D R 64 +",
        ] {
            let e = s.parse(l).err().unwrap_or_else(|| panic!("{l}: accepted"));
            assert!(e.contains("without `+ COUNT`"), "{l}: {e}");
        }
        // A read of no sectors: a request of length 0 (the replay counts it as empty); with a
        // preflush, a pure flush.
        assert_eq!(one(&mut s, "  8,0 0 6 2.0 1 D R 0 + 0 [x]").len, 0);
        let unset = "  8,0 0 6 2.0 1 D R 18446744073709551615 + 0 [x]";
        assert_eq!(one(&mut s, unset).len, 0);
        assert_eq!(one(&mut s, "  8,0 0 6 2.0 1 D FWS 0 + 0 [x]").op, Op::Flush);
        // A FUA trim, as `ftld serve --record` writes it.
        let r = one(&mut s, "  0,0 1 7 2.5 0 D DF 64 + 64 [ftld]");
        assert_eq!((r.op, r.fua), (Op::Trim, true));
        assert!(s.parse("  8,0 0 7 2.0 1 D XS 64 + 64 [x]").is_err());
        assert!(s.parse("garbage").is_err());
        assert!(matches!(s.parse("CPU0 (8,0):"), Ok((Parsed::Skip, None))));
        assert!(s.summary);
    }
}
