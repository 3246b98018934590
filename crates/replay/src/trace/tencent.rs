//! Tencent Cloud Block Storage traces (2018, SNIA IOTTA; the OSCA paper, ATC '20):
//! `Timestamp,Offset,Size,IOType,VolumeID`, timestamp in seconds (Unix time, whole seconds),
//! offset and size in 512-byte sectors, IOType `0` read and `1` write. One file holds many
//! volumes: `VolumeID` is the line's device. Requests of the same second arrive together.

use super::{parse_u64, DeviceRef};
use crate::request::{Op, Request};

pub(super) fn parse(line: &str) -> Result<(Request, DeviceRef<'_>), String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() != 5 {
        return Err(format!(
            "a Tencent CBS line has 5 comma-separated fields (Timestamp,Offset,Size,IOType,VolumeID), this one {}",
            f.len()
        ));
    }
    let s = parse_u64(f[0], "timestamp (s)")?;
    let sector = parse_u64(f[1], "offset (sectors)")?;
    let sectors = parse_u64(f[2], "size (sectors)")?;
    let op = match f[3] {
        "0" => Op::Read,
        "1" => Op::Write,
        t => return Err(format!("IOType {t:?} is neither 0 (read) nor 1 (write)")),
    };
    parse_u64(f[4], "VolumeID")?;
    let at = s
        .checked_mul(1_000_000_000)
        .ok_or_else(|| format!("timestamp {s} is too large"))?;
    let bytes = |n: u64, field: &str| {
        n.checked_mul(512)
            .ok_or_else(|| format!("{field} {n}: past 2^64 bytes"))
    };
    let r = Request::new(at, op, bytes(sector, "offset")?, bytes(sectors, "size")?);
    Ok((r, DeviceRef(f[4], None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let (r, d) = parse("1538323200,2097152,16,1,1063").unwrap();
        assert_eq!((r.op, r.offset, r.len), (Op::Write, 2_097_152 * 512, 8192));
        assert_eq!(
            r.arrival,
            crate::request::Arrival::At(1_538_323_200_000_000_000)
        );
        assert_eq!(d.to_string(), "1063");
        assert_eq!(parse("1538323200,0,8,0,1").unwrap().0.op, Op::Read);
        assert!(parse("1538323200,0,8,2,1").is_err());
        assert!(parse("1538323200,0,8,1").is_err());
        assert!(parse("1538323200,36028797018963968,8,1,1").is_err());
    }
}
