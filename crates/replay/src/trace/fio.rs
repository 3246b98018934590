//! fio's I/O logs (`write_iolog`, `read_iolog`): version 2 (`FILE ACTION [OFFSET LENGTH]`, no
//! times: requests arrive together, `FILE wait USEC` adds a pause) and version 3
//! (`USEC FILE ACTION [OFFSET LENGTH]`: fio writes the microseconds since the log started,
//! `utime_since_now` in its `iolog.c`, and replays them as such). File actions (`add`, `open`, `close`) are skipped;
//! `sync`/`datasync` are flushes.

use super::{parse_u64, DeviceRef, Parsed};
use crate::request::{Op, Request};

#[derive(Default)]
pub(super) struct State {
    version: Option<u8>,
    /// Version 2: the time the `wait` lines added up to (ns).
    now: u64,
}

impl State {
    /// The line's request, and the file it names (the device) if it is a request.
    pub(super) fn parse<'a>(
        &mut self,
        line: &'a str,
    ) -> Result<(Parsed, Option<DeviceRef<'a>>), String> {
        let Some(version) = self.version else {
            self.version = match line.trim() {
                "fio version 2 iolog" => Some(2),
                "fio version 3 iolog" => Some(3),
                _ => {
                    return Err(
                        "a fio iolog starts with \"fio version 2 iolog\" or \"fio version 3 \
                         iolog\""
                            .into(),
                    )
                }
            };
            return Ok((Parsed::Skip, None));
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let (at, rest) = if version == 3 {
            let Some((t, rest)) = f.split_first() else {
                return Err("empty line".into());
            };
            let us = parse_u64(t, "timestamp (us)")?;
            (us.saturating_mul(1_000), rest)
        } else {
            (self.now, &f[..])
        };
        if rest.len() < 2 {
            return Err("a fio iolog line names a file and an action".into());
        }
        let action = rest[1];
        let file = Some(DeviceRef(rest[0], None));
        let op = match action {
            "read" => Op::Read,
            "write" => Op::Write,
            "trim" => Op::Trim,
            "sync" | "datasync" => {
                return Ok((Parsed::One(Request::new(at, Op::Flush, 0, 0)), file))
            }
            "add" | "open" | "close" => return Ok((Parsed::Skip, None)),
            "wait" if version == 2 => {
                let us = parse_u64(rest.get(2).copied().unwrap_or(""), "wait (us)")?;
                self.now = self.now.saturating_add(us.saturating_mul(1000));
                return Ok((Parsed::Skip, None));
            }
            a => return Err(format!("unknown action {a:?}")),
        };
        if rest.len() != 4 {
            return Err(format!("{action} needs an offset and a length"));
        }
        let offset = parse_u64(rest[2], "offset")?;
        let len = parse_u64(rest[3], "length")?;
        Ok((Parsed::One(Request::new(at, op, offset, len)), file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_v3() {
        let mut s = State::default();
        assert!(matches!(
            s.parse("fio version 2 iolog"),
            Ok((Parsed::Skip, None))
        ));
        assert!(matches!(s.parse("/dev/nbd0 add"), Ok((Parsed::Skip, None))));
        assert!(matches!(
            s.parse("/dev/nbd0 wait 1500"),
            Ok((Parsed::Skip, None))
        ));
        let Ok((Parsed::One(r), _)) = s.parse("/dev/nbd0 write 8192 4096") else {
            panic!()
        };
        assert_eq!((r.op, r.offset, r.len), (Op::Write, 8192, 4096));
        assert_eq!(r.arrival, crate::request::Arrival::At(1_500_000));
        assert!(s.parse("/dev/nbd0 write 8192").is_err());
        assert!(s.parse("/dev/nbd0 fly 1 2").is_err());
        let mut s = State::default();
        assert!(s.parse("/dev/nbd0 add").is_err());
        s.parse("fio version 3 iolog").ok();
        let Ok((Parsed::One(r), Some(d))) = s.parse("12 /dev/sdb read 0 65536") else {
            panic!()
        };
        assert_eq!(d.to_string(), "/dev/sdb");
        assert_eq!(
            (r.op, r.arrival),
            (Op::Read, crate::request::Arrival::At(12_000))
        );
        let Ok((Parsed::One(r), _)) = s.parse("13 /dev/sdb sync") else {
            panic!()
        };
        assert_eq!(r.op, Op::Flush);
    }

    /// The head and tail of a log fio 3.33 wrote (`fio --name=t --filename=f.dat --size=4M
    /// --rw=write --bs=4k --rate_iops=100 --runtime=1 --time_based --write_iolog=io.log`): a
    /// one-second run, so its last write is near 1 000 000 us.
    #[test]
    fn a_log_fio_wrote_spans_its_run_time() {
        let log = "fio version 3 iolog\n30 f.dat add\n171 f.dat open\n\
                   174 f.dat write 0 4096\n10170 f.dat write 4096 4096\n\
                   990174 f.dat write 405504 4096\n1000168 f.dat close\n";
        let mut s = State::default();
        let mut writes = Vec::new();
        for line in log.lines() {
            if let Ok((Parsed::One(r), _)) = s.parse(line) {
                writes.push(r.arrival);
            }
        }
        use crate::request::Arrival::At;
        assert_eq!(
            writes,
            [At(174_000), At(10_170_000), At(990_174_000)],
            "10 ms apart at 100 IOPS, the last one just under a second in"
        );
    }
}
