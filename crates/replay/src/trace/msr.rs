//! MSR Cambridge block traces (SNIA IOTTA): `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`,
//! the timestamp in Windows filetime ticks of 100 ns, offset and size in bytes.

use super::{parse_u64, DeviceRef};
use crate::request::{Op, Request};

pub(super) fn parse(line: &str) -> Result<(Request, DeviceRef<'_>), String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() != 7 {
        return Err(format!(
            "an MSR line has 7 comma-separated fields, this one {}",
            f.len()
        ));
    }
    let op = match f[3] {
        t if t.eq_ignore_ascii_case("read") => Op::Read,
        t if t.eq_ignore_ascii_case("write") => Op::Write,
        t => return Err(format!("type {t:?} is neither Read nor Write")),
    };
    let ticks = parse_u64(f[0], "timestamp")?;
    let offset = parse_u64(f[4], "offset")?;
    let size = parse_u64(f[5], "size")?;
    // Not replayed (the device under test makes its own), but a line whose last field is not
    // a number is not an MSR line.
    parse_u64(f[6], "response time")?;
    let at = ticks
        .checked_mul(100)
        .ok_or_else(|| format!("timestamp {ticks} is too large"))?;
    Ok((
        Request::new(at, op, offset, size),
        DeviceRef(f[1], Some(f[2])),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let (r, d) = parse("128166372003061629,hm,0,Write,3338240000,4096,4326").unwrap();
        assert_eq!(d.to_string(), "hm,0");
        assert_eq!((r.op, r.offset, r.len), (Op::Write, 3_338_240_000, 4096));
        assert_eq!(
            r.arrival,
            crate::request::Arrival::At(12_816_637_200_306_162_900)
        );
        assert!(parse("1,hm,0,Trim,0,4096,1").is_err());
        assert!(parse("1,hm,0,Read,0,4096").is_err());
        assert!(parse("x,hm,0,Read,0,4096,1").is_err());
        assert!(parse("1,hm,0,Read,0,4096,abc")
            .unwrap_err()
            .contains("response time"));
    }
}
