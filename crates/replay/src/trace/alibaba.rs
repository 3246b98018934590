//! Alibaba Cloud block traces (2020, github.com/alibaba/block-traces `io_traces.csv`):
//! `device_id,opcode,offset,length,timestamp`, opcode `R` or `W`, offset and length in bytes,
//! timestamp in microseconds (Unix time). One file holds 1000 virtual disks: `device_id` is
//! the line's device.

use super::{parse_u64, DeviceRef};
use crate::request::{Op, Request};

pub(super) fn parse(line: &str) -> Result<(Request, DeviceRef<'_>), String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() != 5 {
        return Err(format!(
            "an Alibaba line has 5 comma-separated fields (device_id,opcode,offset,length,timestamp), this one {}",
            f.len()
        ));
    }
    parse_u64(f[0], "device_id")?;
    let op = match f[1] {
        "R" | "r" => Op::Read,
        "W" | "w" => Op::Write,
        o => return Err(format!("opcode {o:?} is neither R nor W")),
    };
    let offset = parse_u64(f[2], "offset")?;
    let len = parse_u64(f[3], "length")?;
    let us = parse_u64(f[4], "timestamp (us)")?;
    let at = us
        .checked_mul(1_000)
        .ok_or_else(|| format!("timestamp {us} is too large"))?;
    Ok((Request::new(at, op, offset, len), DeviceRef(f[0], None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        // The example row of the trace's README.
        let (r, d) = parse("0,R,126703644672,4096,1577808000000626").unwrap();
        assert_eq!((r.op, r.offset, r.len), (Op::Read, 126_703_644_672, 4096));
        assert_eq!(
            r.arrival,
            crate::request::Arrival::At(1_577_808_000_000_626_000)
        );
        assert_eq!(d.to_string(), "0");
        assert_eq!(parse("7,W,0,512,1").unwrap().0.op, Op::Write);
        assert!(parse("0,D,0,4096,1").is_err());
        assert!(parse("0,R,0,4096").is_err());
        assert!(parse("x,R,0,4096,1").is_err());
        assert!(parse("0,R,0,4096,18446744073709551615").is_err());
    }
}
