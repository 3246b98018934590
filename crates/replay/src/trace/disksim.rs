//! DiskSim's ASCII input format: `ARRIVAL_MS DEVNO BLKNO SIZE FLAGS`, block number and size in
//! 512-byte sectors, flags bit 0 set for a read.

use super::{parse_decimal_ns, parse_u64, DeviceRef};
use crate::request::{Op, Request};

pub(super) fn parse(line: &str) -> Result<(Request, DeviceRef<'_>), String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 5 {
        return Err(format!(
            "a DiskSim line has 5 fields (time devno blkno size flags), this one {}",
            f.len()
        ));
    }
    let at = parse_decimal_ns(f[0], 1_000_000, "arrival time")?;
    parse_u64(f[1], "device number")?;
    let blk = parse_u64(f[2], "block number")?;
    let size = parse_u64(f[3], "size")?;
    let flags = parse_u64(f[4], "flags")?;
    let op = if flags & 1 == 1 { Op::Read } else { Op::Write };
    let offset = blk
        .checked_mul(512)
        .ok_or_else(|| format!("block number {blk} is too large"))?;
    let len = size
        .checked_mul(512)
        .ok_or_else(|| format!("size {size} is too large"))?;
    Ok((Request::new(at, op, offset, len), DeviceRef(f[1], None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let (r, d) = parse("0.5 0 1296 16 1").unwrap();
        assert_eq!(d.to_string(), "0");
        assert_eq!((r.op, r.offset, r.len), (Op::Read, 1296 * 512, 8192));
        assert_eq!(r.arrival, crate::request::Arrival::At(500_000));
        assert_eq!(parse("3 0 8 8 0").unwrap().0.op, Op::Write);
        assert!(parse("3 0 8 8").is_err());
        assert!(parse("3 0 -8 8 0").is_err());
    }
}
