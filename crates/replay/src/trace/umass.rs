//! UMass trace repository / SPC format (Financial, WebSearch): `ASU,LBA,Size,Opcode,Timestamp`
//! with optional further fields; LBA in 512-byte sectors, size in bytes, opcode `r`/`w` in
//! either case, timestamp in seconds. The ASU is the line's device (merged by default, see the
//! module above).

use super::{parse_decimal_ns, parse_u64, DeviceRef};
use crate::request::{Op, Request};

pub(super) fn parse(line: &str) -> Result<(Request, DeviceRef<'_>), String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < 5 {
        return Err(format!(
            "a UMass/SPC line has at least 5 comma-separated fields (ASU,LBA,Size,Opcode,Timestamp), this one {}",
            f.len()
        ));
    }
    parse_u64(f[0], "ASU")?;
    let op = match f[3] {
        "r" | "R" => Op::Read,
        "w" | "W" => Op::Write,
        o => return Err(format!("opcode {o:?} is neither r nor w")),
    };
    let lba = parse_u64(f[1], "LBA")?;
    let size = parse_u64(f[2], "size")?;
    let at = parse_decimal_ns(f[4], 1_000_000_000, "timestamp")?;
    let offset = lba
        .checked_mul(512)
        .ok_or_else(|| format!("LBA {lba} is too large"))?;
    Ok((Request::new(at, op, offset, size), DeviceRef(f[0], None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let (r, d) = parse("0,303567,3584,w,0.000000").unwrap();
        assert_eq!(d.to_string(), "0");
        assert_eq!((r.op, r.offset, r.len), (Op::Write, 303_567 * 512, 3584));
        let (r, _) = parse("2,1619808,8192,R,12.010000,extra").unwrap();
        assert_eq!(r.arrival, crate::request::Arrival::At(12_010_000_000));
        assert_eq!(r.op, Op::Read);
        assert!(parse("0,1,2,x,0.1").is_err());
        assert!(parse("0,1,2,r").is_err());
    }
}
